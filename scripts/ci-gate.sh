#!/usr/bin/env bash
# A performance gate for CI on DEDICATED hardware: runs a short workload with `fetchbench run
# --repeat N`, compares its results with a committed baseline (`fetchbench compare`) and fails
# the build when a metric got worse: with repeated samples on both sides, a one-sided Welch
# t-test significant at 0.05 AND a mean that moved the wrong way by more than the threshold
# (the threshold is the minimum effect); with one sample on a side (a baseline made before
# repeats, schema version 2), the threshold alone.
#
# This project's own CI (.ci/run) does NOT run it: timings on shared CI machines are noise (other
# jobs, CPU steal, unknown disks), so a threshold there flags nothing or everything. Use it on a
# machine that does nothing else, the same one for the baseline and every run.
#
# What the gate can detect on a machine, and how often it flags nothing at all, is measured by
# scripts/gate-calibration.sh (a planted cost of a known size; README, "Gating CI").
#
# Make a baseline once, on that machine, and commit it:
#   scripts/ci-gate.sh --update-baseline             # runs, writes results/baseline.json
#   git add results/baseline.json
# Remake it the same way after an intended change of performance (or of the results schema).
#
# Usage: scripts/ci-gate.sh [--baseline results/baseline.json] [--threshold 10%]
#                           [--metrics LIST] [--repeat 3] [--attempts 1]
#                           [--workload fixtures/workloads/ci-gate.toml]
#                           [--results-dir results/ci-gate] [--update-baseline]
#   --baseline FILE      the reference results file (default: results/baseline.json)
#   --threshold T        how far a metric may move the wrong way: 10%, 2.5% (default 10%)
#   --metrics LIST       the gated metrics, comma-separated (`fetchbench compare --metrics`; the
#                        others are shown, not gated). Default: mb_per_sec,broker_cpu_s_per_gb
#                        (throughput and broker CPU per GB, user + sys: the split between the two
#                        is tick-sampled by the kernel and noisy over short runs); `all` gates all
#   --repeat N           repetitions of every read path in the run (`fetchbench run --repeat`;
#                        default 3: about 1 minute with the default workload). The t-test
#                        needs >= 2 on both sides, so make the baseline with repeats too
#   --attempts N         a regression must show in N runs in a row before the gate fails; a run
#                        that passes ends it (default 1: the repeats and the t-test already keep
#                        one noisy measurement from failing a build)
#   --workload FILE      the workload to run (default: fixtures/workloads/ci-gate.toml)
#   --results-dir DIR    where `fetchbench run` writes (default: results/ci-gate; kept for CI artifacts)
#   --update-baseline    copy the new results over the baseline (after showing the comparison,
#                        if there is a baseline) and exit 0
# Defaults are relative to the repository root; paths given are relative to the current directory.
#
# Exit codes (those of `fetchbench compare`): 0 no regression, 1 a regression, 2 bad input or
# any other failure (build, run, a missing or invalid baseline, a bad threshold).
#
# Env: FETCHBENCH_BIN  the fetchbench binary to use; set, nothing is built (default: build
#                      `cargo build --release` and use target/release/fetchbench).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
baseline="$ROOT/results/baseline.json"
threshold="10%"
metrics="mb_per_sec,broker_cpu_s_per_gb"
attempts=1
repeat=3
workload="$ROOT/fixtures/workloads/ci-gate.toml"
results_dir="$ROOT/results/ci-gate"
update_baseline=0
skip_run="" # hidden: --skip-run NEW.json compares NEW.json instead of running (for tests)

log() { printf 'ci-gate: %s\n' "$*" >&2; }
die() { log "$*"; exit 2; }
usage() { sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ "$#" -gt 0 ]; do
  opt="$1"
  case "$opt" in
    --baseline | --threshold | --workload | --results-dir | --skip-run | --metrics | --attempts | --repeat)
      [ "$#" -ge 2 ] || die "$opt needs a value (see --help)"
      value="$2"
      shift 2
      ;;
    --baseline=* | --threshold=* | --workload=* | --results-dir=* | --skip-run=* | --metrics=* | --attempts=* | --repeat=*)
      value="${opt#*=}"
      opt="${opt%%=*}"
      shift
      ;;
    --update-baseline) update_baseline=1; shift; continue ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $opt" ;;
  esac
  [ -n "$value" ] || die "$opt needs a non-empty value"
  case "$opt" in
    --baseline) baseline="$value" ;;
    --threshold) threshold="$value" ;;
    --workload) workload="$value" ;;
    --results-dir) results_dir="$value" ;;
    --skip-run) skip_run="$value" ;;
    --metrics) metrics="$value" ;;
    --attempts) attempts="$value" ;;
    --repeat) repeat="$value" ;;
  esac
done

# --- the binary ----------------------------------------------------------------------------------
if [ -n "${FETCHBENCH_BIN:-}" ]; then
  bin="$FETCHBENCH_BIN"
else
  log "building fetchbench (release)"
  cargo build --release --quiet --manifest-path "$ROOT/Cargo.toml" >&2 || die "cargo build --release failed"
  bin="${CARGO_TARGET_DIR:-$ROOT/target}/release/fetchbench"
fi
[ -x "$bin" ] || die "no fetchbench binary at $bin"
case "$attempts" in ''|*[!0-9]*|0) die "--attempts: expected a positive integer, found $attempts" ;; esac
case "$repeat" in ''|*[!0-9]*|0) die "--repeat: expected a positive integer, found $repeat" ;; esac
gate=()
[ "$metrics" = all ] || gate=(--metrics "$metrics")

# Before a run of a minute or more: the baseline and the threshold must be usable (comparing
# the baseline with itself exits 2 on a missing or invalid file or a bad threshold).
if [ "$update_baseline" = 0 ]; then
  if [ ! -e "$baseline" ]; then
    die "no baseline at $baseline: make one on this machine with scripts/ci-gate.sh --update-baseline"
  fi
  "$bin" compare "$baseline" "$baseline" --threshold "$threshold" "${gate[@]}" >/dev/null \
    || die "unusable baseline, threshold or metrics (above)"
fi

# --- the new results -----------------------------------------------------------------------------
# run_once: sets $new to the results file of a fresh run (or --skip-run's file).
run_once() {
  if [ -n "$skip_run" ]; then
    new="$skip_run"
    [ -e "$new" ] || die "--skip-run: no file $new"
  else
    [ -e "$workload" ] || die "no workload file $workload"
    mkdir -p "$results_dir" || die "cannot create $results_dir"
    marker="$(mktemp "$results_dir/.ci-gate-start.XXXXXX")"
    log "running $workload, $repeat repetition(s) (results in $results_dir)"
    "$bin" run "$workload" --quiet --repeat "$repeat" --results-dir "$results_dir" || { rm -f "$marker"; die "fetchbench run failed (above)"; }
    # The newest results file, written after the run started.
    new=""
    while IFS= read -r f; do
      if [ "$f" -nt "$marker" ]; then new="$f"; fi
      break
    done < <(ls -t "$results_dir"/*.json 2>/dev/null || true)
    rm -f "$marker"
    [ -n "$new" ] || die "fetchbench run wrote no results file in $results_dir"
  fi
  log "new results: $new"
}

# --- compare -------------------------------------------------------------------------------------
if [ "$update_baseline" = 1 ]; then
  run_once
  # Never make an invalid file the baseline: comparing it with itself validates it.
  "$bin" compare "$new" "$new" >/dev/null || die "$new is not a valid results file (above): baseline not updated"
  if [ -e "$baseline" ]; then
    set +e
    "$bin" compare "$baseline" "$new" --threshold "$threshold"
    code=$?
    set -e
    log "compare exited $code; updating the baseline anyway (--update-baseline)"
  fi
  mkdir -p "$(dirname "$baseline")"
  cp "$new" "$baseline"
  log "baseline updated: $baseline (from $new)"
  exit 0
fi

for attempt in $(seq 1 "$attempts"); do
  run_once
  set +e
  "$bin" compare "$baseline" "$new" --threshold "$threshold" "${gate[@]}"
  code=$?
  set -e
  case "$code" in
    0) log "passed: no regression beyond $threshold against $baseline (attempt $attempt)"; exit 0 ;;
    1) log "attempt $attempt/$attempts: regression beyond $threshold against $baseline (table above)" ;;
    *) log "compare failed (exit $code)"; exit 2 ;;
  esac
done
if [ "$attempts" = 1 ]; then
  log "FAILED: a regression beyond $threshold against $baseline"
else
  log "FAILED: the regression showed in all $attempts attempts"
fi
exit 1
