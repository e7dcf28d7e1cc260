#!/usr/bin/env bash
# Calibrates the performance gate (scripts/ci-gate.sh) against a planted regression: how often
# it flags a known cost (the power) and how often it flags nothing at all (the false alarms).
# A benchmark of the gate, run by hand on the gating machine; never part of .ci/run.
#
# Per try T (1..N):
#   1. a baseline: `ci-gate.sh --update-baseline --baseline OUT/base-T.json`;
#   2. the planted cost sized from it: COST (default 10%) of the mean broker CPU s/GB of the
#      baseline's catch-up entries, as microseconds of busy-spin per MiB served
#      (FETCHBENCH_PLANTED_FETCH_COST_US_PER_MIB, src/broker/planted.rs: the broker thread that
#      wrote a Fetch response spins that long per MiB of its record bytes);
#   3. an A/A run (nothing planted) and an A/B run (the cost planted), in an order that
#      alternates between tries, each gated against base-T.json with the gate's own defaults
#      (its --threshold, --metrics, --repeat, or the ones given here).
# A flagged A/B is a detection, a flagged A/A a false alarm. At the end: both counts, the effect
# the cost had (new / base of the gated catch-up figures, mean over the tries) and the minimum
# detectable effect of the gate at its repeats: the larger of its threshold and the shift a
# one-sided Welch t-test at alpha 0.05 finds with 90% power given the baselines' cv,
# (t(0.95, 2n-2) + t(0.90, 2n-2)) * cv * sqrt(2/n), for the noisiest gated catch-up figure.
#
# Usage: scripts/gate-calibration.sh [--tries 10] [--cost 10%] [--out DIR] [ci-gate options...]
#   --tries N      tries (default 10: 10 baselines, 10 A/A and 10 A/B runs; about 30 runs of the
#                  gate's workload, 30-40 minutes with fixtures/workloads/ci-gate.toml)
#   --cost C       the planted cost as a share of the baseline's broker CPU per GB (default 10%)
#   --out DIR      where the baselines, results and the summary go (default
#                  results/gate-calibration/<UTC time>)
#   other options (--threshold, --metrics, --repeat, --workload) are passed to ci-gate.sh
# Env: FETCHBENCH_BIN as for ci-gate.sh (unset: built once here with cargo build --release).
# Exit: 0 when the gate met the targets (A/B flagged in >= 90% of the tries, A/A in <= 10%),
# 1 when it did not, 2 on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tries=10
cost="10%"
out=""
gate_args=()
log() { printf 'gate-calibration: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }
usage() { sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ "$#" -gt 0 ]; do
  case "$1" in
    --tries) [ "$#" -ge 2 ] || die "--tries needs a value"; tries="$2"; shift 2 ;;
    --cost) [ "$#" -ge 2 ] || die "--cost needs a value"; cost="$2"; shift 2 ;;
    --out) [ "$#" -ge 2 ] || die "--out needs a value"; out="$2"; shift 2 ;;
    --threshold | --metrics | --repeat | --workload)
      [ "$#" -ge 2 ] || die "$1 needs a value"; gate_args+=("$1" "$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
case "$tries" in ''|*[!0-9]*|0) die "--tries: expected a positive integer, found $tries" ;; esac
case "$cost" in
  *%) share="${cost%\%}" ;;
  *) die "--cost: expected a percentage such as 10%, found $cost" ;;
esac
python3 -c "import sys; s=float(sys.argv[1]); assert 0 < s <= 100" "$share" 2>/dev/null \
  || die "--cost: expected a percentage from 0% to 100%, found $cost"
command -v python3 >/dev/null || die "python3 is needed (it reads the results JSON)"
[ -n "$out" ] || out="$ROOT/results/gate-calibration/$(date -u +%Y-%m-%dT%H%M%SZ)"
mkdir -p "$out" || die "cannot create $out"

if [ -z "${FETCHBENCH_BIN:-}" ]; then
  log "building fetchbench (release)"
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" >&2 || die "cargo build --release failed"
  export FETCHBENCH_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/fetchbench"
fi
[ -x "$FETCHBENCH_BIN" ] || die "no fetchbench binary at $FETCHBENCH_BIN"
gate="$ROOT/scripts/ci-gate.sh"
unset FETCHBENCH_PLANTED_FETCH_COST_US_PER_MIB

# us_per_mib BASE.json SHARE: SHARE% of the mean catch-up broker CPU s/GB, in us of spin per MiB.
us_per_mib() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
cpu = [p["broker_cpu"]["user_s_per_gb"] + p["broker_cpu"]["sys_s_per_gb"] for p in doc["paths"] if p["phase"] == "catch_up"]
if not cpu:
    sys.exit("the baseline has no catch_up entry: the cost is sized from the catch-up's broker CPU")
s_per_gb = sum(cpu) / len(cpu)
# s/GB -> us/MiB: 1e6 us per s, 2^20 / 1e9 GB per MiB.
print(f"{float(sys.argv[2]) / 100 * s_per_gb * 1e6 * 2**20 / 1e9:.3f}")
EOF
}

summary="$out/tries.tsv"
printf 'try\tkind\tcost_us_per_mib\texit\tresults\n' >"$summary"
for t in $(seq 1 "$tries"); do
  base="$out/base-$t.json"
  log "try $t/$tries: baseline"
  "$gate" --update-baseline --baseline "$base" --results-dir "$out/runs-$t" "${gate_args[@]}" >"$out/base-$t.log" 2>&1 \
    || { cat "$out/base-$t.log" >&2; die "try $t: the baseline run failed"; }
  us="$(us_per_mib "$base" "$share")" || die "try $t: cannot size the cost from $base"
  # Alternate the order, so a drift of the machine during a try lands on each kind as often.
  if [ $((t % 2)) = 1 ]; then order="aa ab"; else order="ab aa"; fi
  for kind in $order; do
    set +e
    if [ "$kind" = ab ]; then
      FETCHBENCH_PLANTED_FETCH_COST_US_PER_MIB="$us" "$gate" --baseline "$base" --results-dir "$out/runs-$t-$kind" \
        "${gate_args[@]}" >"$out/$kind-$t.log" 2>&1
    else
      "$gate" --baseline "$base" --results-dir "$out/runs-$t-$kind" "${gate_args[@]}" >"$out/$kind-$t.log" 2>&1
    fi
    code=$?
    set -e
    [ "$code" -le 1 ] || { cat "$out/$kind-$t.log" >&2; die "try $t ($kind): the gate failed (exit $code)"; }
    new="$(ls -t "$out/runs-$t-$kind"/*.json | head -n 1)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$kind" "$([ "$kind" = ab ] && echo "$us" || echo 0)" "$code" "$new" >>"$summary"
    log "try $t ($kind$([ "$kind" = ab ] && echo ", $us us/MiB planted")): $([ "$code" = 1 ] && echo FLAGGED || echo passed)"
  done
done

# The verdict: counts, the effect the cost had, the minimum detectable effect.
threshold="10%"
metrics="mb_per_sec,broker_cpu_s_per_gb"
repeat=3
set -- "${gate_args[@]}"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --threshold) threshold="$2" ;;
    --metrics) metrics="$2" ;;
    --repeat) repeat="$2" ;;
  esac
  shift 2
done
python3 - "$out" "$summary" "$threshold" "$metrics" "$repeat" "$share" <<'EOF' | tee "$out/summary.txt"
import json, math, statistics, sys
out, tsv, threshold, metrics, repeat, share = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(tsv).readlines()[1:]]
threshold = float(threshold.rstrip("%")) / 100
repeat = int(repeat)
def figure(p, m):
    if m == "mb_per_sec":
        return p["mb_per_sec"]
    if m == "broker_cpu_s_per_gb":
        return p["broker_cpu"]["user_s_per_gb"] + p["broker_cpu"]["sys_s_per_gb"]
    return p.get(m)
gated = [m for m in metrics.split(",") if m in ("mb_per_sec", "broker_cpu_s_per_gb")] or ["mb_per_sec", "broker_cpu_s_per_gb"]
def means(doc):
    by = {}
    for p in doc["paths"]:
        if p["phase"] != "catch_up":
            continue
        for m in gated:
            v = figure(p, m)
            if v is not None:
                by.setdefault((p["server_model"], p["read_path"], m), []).append(v)
    return {k: statistics.mean(v) for k, v in by.items()}, by
tries = sorted({r[0] for r in rows}, key=int)
n = len(tries)
flag = {k: sum(1 for r in rows if r[1] == k and r[3] == "1") for k in ("ab", "aa")}
effects = {}
cvs = {}
for r in rows:
    base = json.load(open(f"{out}/base-{r[0]}.json"))
    new = json.load(open(r[4]))
    bm, samples = means(base)
    nm, _ = means(new)
    for k, v in samples.items():
        if len(v) > 1 and statistics.mean(v) > 0:
            cvs.setdefault(k, []).append(statistics.stdev(v) / statistics.mean(v))
    if r[1] == "ab":
        for k in bm:
            if k in nm and bm[k] > 0:
                effects.setdefault(k, []).append(nm[k] / bm[k])
# t quantiles (one-sided) by degrees of freedom, 2..40
T95 = {2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812, 12: 1.782, 14: 1.761, 16: 1.746, 18: 1.734, 20: 1.725, 30: 1.697, 40: 1.684}
T90 = {2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383, 10: 1.372, 12: 1.356, 14: 1.345, 16: 1.337, 18: 1.330, 20: 1.325, 30: 1.310, 40: 1.303}
def t(table, df):
    return table[max(k for k in table if k <= max(df, 2))]
df = 2 * repeat - 2
factor = (t(T95, df) + t(T90, df)) * math.sqrt(2 / repeat)
print(f"tries: {n}; planted cost: {share}% of the baseline's catch-up broker CPU per GB")
print(f"A/B (cost planted) flagged: {flag['ab']}/{n}   target >= {math.ceil(0.9 * n)}/{n}")
print(f"A/A (nothing planted) flagged: {flag['aa']}/{n}   target <= {math.floor(0.1 * n)}/{n}")
print("effect of the planted cost (A/B new / base, mean over tries) and the baselines' median cv:")
worst = 0.0
for k in sorted(effects):
    cv = statistics.median(cvs.get(k, [0.0]))
    worst = max(worst, cv)
    e = statistics.mean(effects[k])
    print(f"  {k[0] or '-'}/{k[1]} {k[2]}: x{e:.3f}  cv {cv * 100:.1f}%  detectable shift {factor * cv * 100:.1f}%")
mde = max(threshold, factor * worst)
print(f"minimum detectable effect at --repeat {repeat}: {mde * 100:.1f}% (threshold {threshold * 100:.0f}%, "
      f"t-test at 90% power for the noisiest gated figure's cv {worst * 100:.1f}%: {factor * worst * 100:.1f}%)")
ok = flag["ab"] >= math.ceil(0.9 * n) and flag["aa"] <= math.floor(0.1 * n)
print("verdict:", "the gate meets the targets" if ok else "the gate does NOT meet the targets")
sys.exit(0 if ok else 1)
EOF
