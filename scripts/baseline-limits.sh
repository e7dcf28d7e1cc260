#!/usr/bin/env bash
# This machine's limits for moving file bytes to a socket, measured in one run, printed as ONE JSON
# document on stdout (progress goes to stderr). `fetchbench read-paths --limits FILE` puts each
# read path's figures beside these as ratios.
#
#   - fio sequential read of a page-cached file (`--invalidate=0`, file read once first) with the
#     psync, mmap, splice and io_uring ioengines: bytes/s and CPU usr/sys % (of one CPU);
#   - fio with `--direct=1` (the disk, bypassing the page cache; libaio);
#   - iperf3 over loopback (127.0.0.1 only) without and with `-Z` (sendfile): bits/s and CPU.
#
# Usage: scripts/baseline-limits.sh > limits.json
# Env:   LIMITS_SIZE=1G       size of the test file (fio size syntax: 256M, 1G, ...; default 1G)
#        LIMITS_BS=1M         fio block size (default 1M, the read-paths default slice)
#        LIMITS_RUNTIME=3     seconds per fio job and per iperf3 run (default 3)
#        LIMITS_DIR=/var/tmp  where the temp dir goes; it must be on the disk to measure (not tmpfs)
# Installs fio and iperf3 from Debian when missing (as root; otherwise says what to install).
# Runtime: about 7 x LIMITS_RUNTIME seconds plus writing the file (~30 s with the defaults).
set -euo pipefail

SCHEMA_VERSION=1
SIZE="${LIMITS_SIZE:-1G}"
BS="${LIMITS_BS:-1M}"
RUNTIME="${LIMITS_RUNTIME:-3}"
BASE_DIR="${LIMITS_DIR:-/var/tmp}"
COMMAND_LINE="$0${*:+ $*}"

log() { printf 'baseline-limits: %s\n' "$*" >&2; }

# --- tools -------------------------------------------------------------------------------------
missing=()
command -v fio >/dev/null || missing+=(fio)
command -v iperf3 >/dev/null || missing+=(iperf3)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]} from Debian"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  else
    echo "baseline-limits: missing ${missing[*]}: install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}) or run this script as root" >&2
    exit 1
  fi
fi
command -v python3 >/dev/null || { echo "baseline-limits: python3 is needed to assemble the JSON" >&2; exit 1; }

# --- temp dir, cleaned up on any exit ------------------------------------------------------------
tmp="$(mktemp -d "$BASE_DIR/fetchbench-limits.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

file="$tmp/limits.dat"
size_bytes="$(python3 - "$SIZE" <<'EOF'
import re, sys
m = re.fullmatch(r"(\d+)([KMGT]?)i?B?", sys.argv[1].strip(), re.I)
if not m:
    sys.exit(f"LIMITS_SIZE {sys.argv[1]!r}: expected e.g. 256M or 1G")
n = int(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())
if n < 1024 * 1024:
    sys.exit(f"LIMITS_SIZE {sys.argv[1]!r}: at least 1M is needed")
print(n)
EOF
)"
log "writing a $SIZE file ($size_bytes bytes) in $tmp"
# Real blocks (not a sparse file): holes read as zero pages, which would flatter every engine.
dd if=/dev/zero of="$file" bs=1M count="$((size_bytes / 1048576))" conv=fsync status=none
log "reading it once so it is page-cached"
cat "$file" >/dev/null

# --- fio ---------------------------------------------------------------------------------------
# run_fio NAME [fio options...]: writes $tmp/fio-NAME.json; on failure the error text instead.
run_fio() {
  local name="$1"; shift
  log "fio $name ($RUNTIME s)"
  if ! fio --name="$name" --filename="$file" --rw=read --bs="$BS" --size="$size_bytes" \
      --time_based --runtime="$RUNTIME" --numjobs=1 --thread --output-format=json \
      --output="$tmp/fio-$name.json" "$@" 2>"$tmp/fio-$name.err"; then
    log "fio $name failed: $(tail -n 3 "$tmp/fio-$name.err" | tr '\n' ' ')"
    rm -f "$tmp/fio-$name.json"
  fi
}
for engine in psync mmap splice io_uring; do
  run_fio "$engine" --ioengine="$engine" --invalidate=0 --direct=0 --iodepth=1
done
run_fio direct --ioengine=libaio --direct=1 --iodepth=16

# --- iperf3 over loopback ----------------------------------------------------------------------
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
log "iperf3 server on 127.0.0.1:$port"
iperf3 -s -B 127.0.0.1 -p "$port" >"$tmp/iperf3-server.log" 2>&1 &
server_pid=$!
# run_iperf3 NAME [client options...]: writes $tmp/iperf3-NAME.json (retries until the server listens).
run_iperf3() {
  local name="$1"; shift
  log "iperf3 $name ($RUNTIME s)"
  local try
  for try in $(seq 1 30); do
    # iperf3 3.12 -J exits 0 even on "unable to connect": success means JSON without "error".
    if iperf3 -c 127.0.0.1 -p "$port" -t "$RUNTIME" -J "$@" >"$tmp/iperf3-$name.json" 2>"$tmp/iperf3-$name.err" \
        && ! grep -q '"error"' "$tmp/iperf3-$name.json"; then
      return 0
    fi
    grep -q 'unable to connect\|Connection refused' "$tmp/iperf3-$name.json" "$tmp/iperf3-$name.err" 2>/dev/null || break
    sleep 0.1
  done
  log "iperf3 $name failed: $(tail -c 300 "$tmp/iperf3-$name.json" | tr '\n' ' ')"
}
run_iperf3 copy
run_iperf3 sendfile -Z
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""

# --- one JSON document -------------------------------------------------------------------------
export SCHEMA_VERSION SIZE BS RUNTIME COMMAND_LINE size_bytes tmp
export fs_type="$(stat -f -c %T "$tmp")"
export fio_version="$(fio --version 2>&1 | head -n 1)"
export iperf3_version="$(iperf3 --version 2>&1 | head -n 1)"
python3 - <<'EOF'
import datetime, json, os, platform

tmp = os.environ["tmp"]

def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        err = path.rsplit("/", 1)[-1]
        try:
            with open(path.rsplit(".", 1)[0] + ".err") as f:
                return None, f.read().strip()[-500:] or f"no output ({e})"
        except OSError:
            return None, f"{err}: {e}"

def fio(name):
    data, err = load(f"{tmp}/fio-{name}.json")
    if data is None:
        return {"error": err}
    job = data["jobs"][0]
    if job.get("error"):
        return {"error": f"fio job error {job['error']}"}
    r = job["read"]
    return {
        "bandwidth_bytes_per_sec": r["bw_bytes"],
        "io_bytes": r["io_bytes"],
        "runtime_ms": r["runtime"],
        "iops": r["iops"],
        "cpu_usr_percent": job["usr_cpu"],
        "cpu_sys_percent": job["sys_cpu"],
        # CPU seconds per 1e9 bytes, comparable with fetchbench's "CPU s/GB".
        "cpu_seconds_per_gb": (job["usr_cpu"] + job["sys_cpu"]) / 100 / (r["bw_bytes"] / 1e9) if r["bw_bytes"] else None,
    }

def iperf3(name):
    data, err = load(f"{tmp}/iperf3-{name}.json")
    if data is None:
        return {"error": err}
    if "error" in data:
        return {"error": data["error"]}
    end = data["end"]
    cpu = end.get("cpu_utilization_percent", {})
    sent = end["sum_sent"]
    return {
        "bits_per_sec": sent["bits_per_second"],
        "bytes_per_sec": sent["bits_per_second"] / 8,
        "received_bits_per_sec": end["sum_received"]["bits_per_second"],
        "seconds": sent["seconds"],
        "retransmits": sent.get("retransmits"),
        # Host = the client (the sender); remote = the server (the receiver); % of one CPU.
        "cpu_host_total_percent": cpu.get("host_total"),
        "cpu_host_user_percent": cpu.get("host_user"),
        "cpu_host_system_percent": cpu.get("host_system"),
        "cpu_remote_total_percent": cpu.get("remote_total"),
        "sendfile_option_Z": name == "sendfile",
    }

def meminfo_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None

doc = {
    "schema": "fetchbench-limits",
    "schema_version": int(os.environ["SCHEMA_VERSION"]),
    "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
    "command": os.environ["COMMAND_LINE"],
    "machine": {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu_model": cpu_model(),
        "mem_total_bytes": meminfo_total(),
        "fio_version": os.environ["fio_version"],
        "iperf3_version": os.environ["iperf3_version"],
        "temp_filesystem": os.environ["fs_type"],
    },
    "config": {
        "file_size_bytes": int(os.environ["size_bytes"]),
        "block_size": os.environ["BS"],
        "runtime_seconds": float(os.environ["RUNTIME"]),
    },
    # Sequential read of a page-cached file, 1 job, iodepth 1, --invalidate=0.
    "fio_page_cache": {e: fio(e) for e in ("psync", "mmap", "splice", "io_uring")},
    # --direct=1: the disk itself (libaio, iodepth 16).
    "fio_direct": fio("direct"),
    # TCP over 127.0.0.1: write()/read() copies, and -Z (sendfile from a file).
    "iperf3_loopback": {"copy": iperf3("copy"), "sendfile": iperf3("sendfile")},
}
print(json.dumps(doc, indent=2))
EOF
log "done"
