#!/usr/bin/env bash
# Runs the cargo-fuzz targets (fuzz/fuzz_targets/) for a bounded time each, seeded from the real
# corpus. Each target asserts "no panic" (fuzz builds have debug assertions and overflow checks
# on), record_batch also that the streaming record walk agrees with the whole-buffer one; a crash
# leaves its input in fuzz/artifacts/<target>/ and fails this script.
# Usage: scripts/fuzz.sh [TARGET...]     (default: frame record_batch legacy)
# Env:   FUZZ_SECONDS=N                  time per target (default 20)
#        FETCHBENCH_CORPUS=DIR           real Kafka data (default ../shared/corpus beside the project)
#        CI=true                         a missing nightly toolchain fails instead of skipping
# Seeds are written to fuzz/corpus/<target>/ at run time (not committed): request frames from
# corpus/protocol, v2 batches sliced from corpus/kafka-segments/**/*.log, legacy entries sliced
# from corpus/protocol/kafka-go-fixtures/*.records.bin. Needs python3 to slice.
set -euo pipefail
cd "$(dirname "$0")/.."
# Sanitizer builds go to fuzz/target: sharing the main target dir would rebuild both each time.
unset CARGO_TARGET_DIR
seconds="${FUZZ_SECONDS:-20}"
corpus="${FETCHBENCH_CORPUS:-../shared/corpus}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frame record_batch legacy)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly): CI runs the fuzz targets" >&2
    exit 1
  fi
  echo "NOTICE: no nightly toolchain: the fuzz targets are SKIPPED (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Seeds: one file per frame / batch / entry, named by content, so reruns do not duplicate them.
python3 - "$corpus" fuzz/corpus <<'PY'
import hashlib, os, pathlib, struct, sys
corpus, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def put(target, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)
def entries(data):
    """Kafka's FileRecords.batches(): offset (8), size (4), then size bytes; magic at byte 16."""
    pos = 0
    while len(data) - pos >= 17:
        size = struct.unpack_from(">i", data, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(data):
            return
        yield data[pos + 16], data[pos:pos + 12 + size]
        pos += 12 + size
if not (corpus / "README.md").is_file():
    if os.environ.get("CI", "") == "true":
        sys.exit(f"fuzz: corpus NOT FOUND at {corpus} (set FETCHBENCH_CORPUS): CI seeds the targets from it")
    print(f"NOTICE: no corpus at {corpus}: the targets start from what fuzz/corpus holds")
    sys.exit(0)
n = {"frame": 0, "record_batch": 0, "legacy": 0}
for f in sorted((corpus / "protocol").rglob("*.bin")):
    if "_c2s_" in f.name:  # client-to-server: request frames (size prefix included)
        put("frame", f.read_bytes()); n["frame"] += 1
for f in sorted((corpus / "kafka-segments").rglob("*.log")):
    for magic, e in entries(f.read_bytes()):
        put("record_batch" if magic == 2 else "legacy", e); n["record_batch" if magic == 2 else "legacy"] += 1
for f in sorted((corpus / "protocol" / "kafka-go-fixtures").glob("*.records.bin")):
    data = f.read_bytes()
    put("record_batch", data)  # a mixed record set as a Fetch response carries it
    for magic, e in entries(data):
        put("record_batch" if magic == 2 else "legacy", e); n["record_batch" if magic == 2 else "legacy"] += 1
print("seeds:", ", ".join(f"{k} {v}" for k, v in n.items()))
PY

for t in "${targets[@]}"; do
  echo "== fuzz $t for ${seconds}s =="
  mkdir -p "fuzz/corpus/$t"
  # -a: debug assertions and overflow checks (cargo-fuzz's default without -O, made explicit).
  cargo +nightly fuzz run -a "$t" "fuzz/corpus/$t" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 |
    grep -v '^#[0-9]' | tail -n 25
done
echo "fuzz: no crash in ${targets[*]}"
