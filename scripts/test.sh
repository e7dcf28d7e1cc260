#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every check CI runs.
# Usage: scripts/test.sh            (from anywhere; works on a fresh Debian/Ubuntu machine as root)
# Env:   FETCHBENCH_CORPUS=DIR      real Kafka data (default ../shared/corpus beside the project)
#        CI=true                    a missing corpus fails the corpus tests instead of skipping them
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
step() { printf '\n== %s ==\n' "$*"; }

step "toolchain"
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust (rustup) first" >&2
  exit 1
fi
cargo --version
# rustfmt and clippy ship with the default rustup profile; add them if this toolchain lacks them.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

step "tests: unit, integration (real corpus), property, benches once in test mode, doc tests"
cargo test --locked --all-targets
cargo test --locked --doc

step "log dump --verify over every real Kafka log directory"
corpus="${FETCHBENCH_CORPUS:-../shared/corpus}"
if [ -d "$corpus/kafka-segments" ]; then
  cargo run --locked -q -- log dump --verify "$corpus/kafka-segments" >/tmp/fetchbench-dump.txt
  tail -n 3 /tmp/fetchbench-dump.txt
elif [ "${CI:-}" = "true" ]; then
  echo "corpus missing at $corpus: CI must verify it" >&2
  exit 1
else
  echo "SKIP: no corpus at $corpus"
fi
echo "all checks passed"
