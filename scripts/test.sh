#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every check CI runs.
# Usage: scripts/test.sh            (from anywhere; works on a fresh Debian/Ubuntu machine as root)
# Env:   FETCHBENCH_CORPUS=DIR      real Kafka data (default ../shared/corpus beside the project)
#        CI=true                    a missing corpus, kcat, chromium, Python client or nightly toolchain fails instead of skipping
#        FUZZ_SECONDS=N             time per fuzz target (default 20; scripts/fuzz.sh)
# Sets:  FETCHBENCH_PYTHON          the .venv Python with the pinned Kafka clients (tests/it/python_clients.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
step() { printf '\n== %s ==\n' "$*"; }

apt_install() { # Debian packages, when missing and we may install them
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    [ -n "${apt_updated:-}" ] || { apt-get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing: $* (install them, or run as root on Debian/Ubuntu)" >&2
    exit 1
  fi
}

step "toolchain and system packages"
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install a Rust toolchain (rustup) first; nothing else can fetch one" >&2
  exit 1
fi
cargo --version
# zstd-sys builds libzstd from C source.
command -v cc >/dev/null || apt_install gcc libc6-dev
cc --version | head -n 1
# iproute2 (ip, tc): scripts/two-hosts.sh's namespaces and veth pair (tests/it/two_hosts.rs).
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  if { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } || [ "${CI:-}" = "true" ]; then
    apt_install iproute2
  else
    echo "NOTICE: ip/tc not found: the two-hosts test will SKIP (apt-get install iproute2; it needs root too)"
  fi
fi
# kcat (librdkafka) is the real client of the broker interop tests (tests/it/kcat.rs).
if ! command -v kcat >/dev/null; then
  if { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } || [ "${CI:-}" = "true" ]; then
    apt_install kcat
  else
    echo "NOTICE: kcat not found: the kcat interop tests will SKIP (apt-get install kcat)"
  fi
fi
# Chromium (headless) renders the `fetchbench report` page in its test (tests/it/report.rs).
if ! command -v chromium >/dev/null; then
  if { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } || [ "${CI:-}" = "true" ]; then
    apt_install chromium
  else
    echo "NOTICE: chromium not found: the report page's browser test will SKIP (apt-get install chromium)"
  fi
fi
# tracefs: the id of the raw_syscalls:sys_enter tracepoint, which the run's per-GB system call
# counts read (src/bench/counters.rs). Mounted when missing and we are root; when it is there,
# the tests that count system calls must count them (FETCHBENCH_EXPECT_SYSCALL_COUNTS=1).
tracepoint=/sys/kernel/tracing/events/raw_syscalls/sys_enter/id
if [ ! -r "$tracepoint" ] && [ "$(id -u)" = 0 ] && [ -d /sys/kernel/tracing ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
if [ -r "$tracepoint" ]; then
  export FETCHBENCH_EXPECT_SYSCALL_COUNTS=1
else
  echo "NOTICE: tracefs not mounted at /sys/kernel/tracing: syscalls_per_gb will be null and its tests SKIP (as root: mount -t tracefs nodev /sys/kernel/tracing)"
fi
# The Python Kafka clients of the interop tests (tests/it/python_clients.rs): a virtualenv at
# .venv with pinned confluent-kafka (manylinux wheel bundling librdkafka) and kafka-python, and
# prometheus-client, whose OpenMetrics parser reads the broker's metrics endpoint
# (tests/it/metrics_endpoint.rs).
py_pins=(confluent-kafka==2.16.1 kafka-python==3.0.12 prometheus-client==0.26.0)
py_check='import confluent_kafka, kafka, sys; from importlib.metadata import version; sys.exit(confluent_kafka.__version__ != "2.16.1" or kafka.__version__ != "3.0.12" or version("prometheus-client") != "0.26.0")'
if ! { [ -x .venv/bin/python ] && .venv/bin/python -c "$py_check" 2>/dev/null; }; then
  # python3 -m venv needs venv and ensurepip (Debian: python3-venv); install them as kcat is.
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null &&
    { { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; } || [ "${CI:-}" = "true" ]; }; then
    apt_install python3 python3-venv
  fi
  if python3 -c 'import venv, ensurepip' 2>/dev/null; then
    { .venv/bin/python -c "" 2>/dev/null || python3 -m venv --clear .venv; } &&
      .venv/bin/python -m pip install -q --disable-pip-version-check "${py_pins[@]}" ||
      echo "creating .venv with ${py_pins[*]} failed" >&2
  fi
fi
if [ -x .venv/bin/python ] && .venv/bin/python -c "$py_check" 2>/dev/null; then
  FETCHBENCH_PYTHON="$(pwd)/.venv/bin/python"
  export FETCHBENCH_PYTHON
  echo "Python clients: $("$FETCHBENCH_PYTHON" -c 'import confluent_kafka as c, kafka; from importlib.metadata import version; print("confluent-kafka", c.__version__, "(librdkafka", c.libversion()[0] + "), kafka-python", kafka.__version__ + ", prometheus-client", version("prometheus-client"))')"
elif [ "${CI:-}" = "true" ]; then
  echo "Python clients NOT INSTALLED (.venv with ${py_pins[*]}): CI fails the Python interop tests" >&2
else
  echo "NOTICE: Python clients not installed in .venv: the Python interop tests will SKIP"
fi
# rustfmt and clippy ship with the default rustup profile; add them if this toolchain lacks them.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

corpus="${FETCHBENCH_CORPUS:-../shared/corpus}"
if [ -f "$corpus/README.md" ]; then
  echo "real-Kafka corpus: $corpus (the corpus tests run)"
elif [ "${CI:-}" = "true" ]; then
  echo "real-Kafka corpus NOT FOUND at $corpus: CI fails the corpus tests" >&2
else
  echo "NOTICE: real-Kafka corpus not found at $corpus: the corpus tests will SKIP (set FETCHBENCH_CORPUS)"
fi

step "format and lints"
for f in scripts/*.sh .ci/run; do bash -n "$f"; done
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

step "tests: unit, integration (real corpus), property, benches once in test mode, doc tests"
cargo test --locked --all-targets
cargo test --locked --doc

step "log dump --verify over every real Kafka log directory"
if [ -d "$corpus/kafka-segments" ]; then
  cargo run --locked -q -- log dump --verify "$corpus/kafka-segments" | tail -n 4
elif [ "${CI:-}" = "true" ]; then
  echo "corpus missing at $corpus: CI must verify it" >&2
  exit 1
else
  echo "SKIP: no corpus at $corpus"
fi
step "fuzz targets, ${FUZZ_SECONDS:-20} s each (frame, record_batch, legacy; nightly + cargo-fuzz)"
scripts/fuzz.sh
echo "all checks passed"
