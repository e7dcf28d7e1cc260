#!/usr/bin/env bash
# Two hosts on one machine: `fetchbench serve` in one network namespace, `fetchbench run
# --bootstrap` in another, joined by a veth pair (a real network stack on each side, no
# loopback shortcut), optionally shaped with `tc netem` to a rate and a delay. Cleans up after
# itself (the serve process, both namespaces and with them the veth pair) on success, failure
# or a signal.
#
# Usage (root: network namespaces need CAP_NET_ADMIN):
#   scripts/two-hosts.sh [OPTIONS] [-- RUN-ARGS...]
# Options:
#   --bin PATH            the fetchbench binary (default: target/release/fetchbench, built with
#                         `cargo build --release` when missing)
#   --read-path PATH      serve's --read-path (default: serve's default, sendfile)
#   --server-model MODEL  serve's --server-model (default: threaded)
#   --rate RATE           shape both directions to RATE (tc tbf, or netem with --delay;
#                         e.g. 10gbit, 1gbit)
#   --delay DELAY         add DELAY each way (tc netem delay, e.g. 100us, 1ms; needs a kernel
#                         with sch_netem)
#   --no-pin              do not pin serve to CPU 0 and run to the other CPUs
#   --no-metrics          no metrics endpoint: serve without metrics.listen, run without
#                         --metrics (broker figures 0, the read path serve's alone)
#   --serve-arg ARG       one more argument for serve (repeatable, e.g. --serve-arg -X
#                         --serve-arg num.io.threads=4)
# RUN-ARGS go to `fetchbench run --bootstrap <server>:9092 --metrics <server>:9093` (a workload
# file, --no-limits, --results-dir DIR, ...): serve exposes its metrics endpoint on port 9093,
# and run switches serve's read path per combination and reads the broker's CPU, faults, RSS
# and fetch latency from it. Exit status: run's, or 1 when the setup failed.
#
# On two real machines the same run is (README "Two hosts"):
#   host A: fetchbench serve --listen 0.0.0.0:9092 -X advertised.listeners=PLAINTEXT://hostA:9092 \
#             -X metrics.listen=0.0.0.0:9093
#   host B: fetchbench run --bootstrap hostA:9092 --metrics hostA:9093 WORKLOAD
set -euo pipefail

bin=
read_path=
server_model=
rate=
delay=
pin=1
metrics=1
serve_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --read-path) read_path=$2; shift 2 ;;
        --server-model) server_model=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --no-pin) pin=0; shift ;;
        --no-metrics) metrics=0; shift ;;
        --serve-arg) serve_args+=("$2"); shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "two-hosts: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
done

if [ "$(id -u)" != 0 ]; then
    echo "two-hosts: needs root (network namespaces)" >&2
    exit 1
fi
for tool in ip; do
    command -v "$tool" >/dev/null || { echo "two-hosts: $tool not found (Debian: iproute2)" >&2; exit 1; }
done
if [ -n "$rate$delay" ] && ! command -v tc >/dev/null; then
    echo "two-hosts: tc not found (Debian: iproute2)" >&2
    exit 1
fi
if [ -z "$bin" ]; then
    root=$(cd "$(dirname "$0")/.." && pwd)
    bin=$root/target/release/fetchbench
    [ -x "$bin" ] || (cd "$root" && cargo build --release --quiet)
fi
[ -x "$bin" ] || { echo "two-hosts: $bin is not an executable" >&2; exit 1; }

# Names unique to this run (interface names: 15 characters at most).
id=$$
srv=fb-srv-$id
cli=fb-cli-$id
veth_srv=fbs$id
veth_cli=fbc$id
srv_ip=10.250.0.1
cli_ip=10.250.0.2
port=9092
tmp=$(mktemp -d /tmp/two-hosts.XXXXXX)
serve_pid=
run_pid=

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then
        kill -TERM "$run_pid" 2>/dev/null || true
        wait "$run_pid" 2>/dev/null || true
    fi
    if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
        kill -TERM "$serve_pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$serve_pid" 2>/dev/null || true
        wait "$serve_pid" 2>/dev/null || true
    fi
    for ns in "$srv" "$cli"; do
        if ip netns list | grep -qw "$ns"; then
            # Whatever still runs in the namespace (a client the run left behind) goes first.
            for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
    ip link del "$veth_srv" 2>/dev/null || true
    if [ "$status" != 0 ] && [ -f "$tmp/serve.log" ]; then
        echo "two-hosts: serve's log (last lines):" >&2
        tail -20 "$tmp/serve.log" >&2 || true
    fi
    rm -rf "$tmp"
    echo "two-hosts: cleaned up (namespaces $srv, $cli)" >&2
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$srv"
ip netns add "$cli"
ip link add "$veth_srv" type veth peer name "$veth_cli"
ip link set "$veth_srv" netns "$srv"
ip link set "$veth_cli" netns "$cli"
ip -n "$srv" addr add "$srv_ip/24" dev "$veth_srv"
ip -n "$cli" addr add "$cli_ip/24" dev "$veth_cli"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link set "$veth_srv" up
ip -n "$cli" link set "$veth_cli" up
shaping="none"
if [ -n "$delay" ]; then
    # netem carries the delay (and the rate with it); kernels built without sch_netem refuse it.
    netem=(delay "$delay")
    [ -n "$rate" ] && netem+=(rate "$rate")
    for end in "$srv:$veth_srv" "$cli:$veth_cli"; do
        if ! ip netns exec "${end%%:*}" tc qdisc add dev "${end#*:}" root netem "${netem[@]}"; then
            echo "two-hosts: tc netem refused (a kernel without sch_netem has no --delay; --rate alone uses tbf)" >&2
            exit 1
        fi
    done
    shaping="netem ${netem[*]} each way"
elif [ -n "$rate" ]; then
    # A token bucket: a 4 MiB burst covers a timer tick at up to ~32 Gbit/s.
    for end in "$srv:$veth_srv" "$cli:$veth_cli"; do
        ip netns exec "${end%%:*}" tc qdisc add dev "${end#*:}" root tbf rate "$rate" burst 4mb latency 50ms
    done
    shaping="tbf rate $rate each way"
fi

srv_pin=()
cli_pin=()
cpus=$(nproc)
if [ "$pin" = 1 ] && [ "$cpus" -ge 2 ] && command -v taskset >/dev/null; then
    srv_pin=(taskset -c 0)
    cli_pin=(taskset -c "1-$((cpus - 1))")
fi

serve_cmd=("${srv_pin[@]}" "$bin" serve --listen "$srv_ip:$port" --log-dir "$tmp/logs")
[ -n "$read_path" ] && serve_cmd+=(--read-path "$read_path")
[ -n "$server_model" ] && serve_cmd+=(--server-model "$server_model")
metrics_port=9093
run_metrics=()
if [ "$metrics" = 1 ]; then
    serve_cmd+=(-X "metrics.listen=$srv_ip:$metrics_port")
    run_metrics=(--metrics "$srv_ip:$metrics_port")
fi
serve_cmd+=("${serve_args[@]}")
echo "two-hosts: server namespace $srv ($srv_ip), client namespace $cli ($cli_ip), veth, shaping: $shaping" >&2
echo "two-hosts: serve: ${serve_cmd[*]}" >&2
ip netns exec "$srv" "${serve_cmd[@]}" >"$tmp/serve.log" 2>&1 &
serve_pid=$!
for i in $(seq 1 300); do
    if ip netns exec "$cli" bash -c "exec 3<>/dev/tcp/$srv_ip/$port" 2>/dev/null; then break; fi
    kill -0 "$serve_pid" 2>/dev/null || { echo "two-hosts: serve exited before listening" >&2; exit 1; }
    [ "$i" = 300 ] && { echo "two-hosts: serve did not listen within 30 s" >&2; exit 1; }
    sleep 0.1
done

run_cmd=("${cli_pin[@]}" "$bin" run --bootstrap "$srv_ip:$port" "${run_metrics[@]}" "$@")
echo "two-hosts: run: ${run_cmd[*]}" >&2
# In the background and waited for: a signal to this script then runs its trap at once (bash
# defers traps until a foreground child exits), and the cleanup stops the run too.
ip netns exec "$cli" "${run_cmd[@]}" &
run_pid=$!
set +e
wait "$run_pid"
status=$?
set -e
exit "$status"
