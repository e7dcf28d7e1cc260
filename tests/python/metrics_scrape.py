"""Scrapes a fetchbench broker's metrics endpoint twice and parses each scrape with the
`prometheus-client` package's OpenMetrics parser (tests/it/metrics_endpoint.rs).

Usage: metrics_scrape.py URL MIN_FETCHES

The broker writes the OpenMetrics 1.0 text format (the Rust `prometheus-client` crate writes no
other), so the parser is `prometheus_client.openmetrics.parser.text_string_to_metric_families`,
which is strict: it rejects a missing `# EOF`, a counter sample without `_total`, a histogram
without `+Inf`, a unit that is not the name's suffix, and clashing names.

Checks, exiting non-zero with a message on the first failure:
- the Content-Type is OpenMetrics text;
- every documented family is there with its type (and unit where it has one);
- the FetchConsumer histogram counted at least MIN_FETCHES requests, its buckets are cumulative
  and its +Inf bucket equals its count;
- every counter and histogram sample of the second scrape is >= the first's.

On success prints one JSON line: {"families": N, "fetch_consumer": COUNT, "read_path_bytes": N,
"cpu_seconds": S, "prometheus_client": VERSION}.
"""

import json
import sys
import urllib.request
from importlib.metadata import version

from prometheus_client.openmetrics.parser import text_string_to_metric_families

EXPECTED = {
    "fetchbench_process_cpu_user_seconds": ("counter", "seconds"),
    "fetchbench_process_cpu_system_seconds": ("counter", "seconds"),
    "fetchbench_process_resident_memory_bytes": ("gauge", "bytes"),
    "fetchbench_process_minor_page_faults": ("counter", ""),
    "fetchbench_process_major_page_faults": ("counter", ""),
    "fetchbench_process_voluntary_context_switches": ("counter", ""),
    "fetchbench_process_involuntary_context_switches": ("counter", ""),
    "fetchbench_read_path_bytes": ("counter", "bytes"),
    "fetchbench_read_path_transfers": ("counter", ""),
    "fetchbench_read_path_syscalls": ("counter", ""),
    "fetchbench_request_total_time_ms": ("histogram", "ms"),
    "fetchbench_fetch_requests_in_flight": ("gauge", ""),
    "fetchbench_purgatory_size": ("gauge", ""),
    "fetchbench_connections": ("gauge", ""),
    "fetchbench_broker": ("info", ""),
    "fetchbench_machine": ("info", ""),
}


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("application/openmetrics-text"):
            fail(f"Content-Type {ctype!r} is not OpenMetrics text")
        text = resp.read().decode("utf-8")
    try:
        return {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # the parser raises ValueError and friends
        fail(f"the OpenMetrics parser refused the scrape: {e!r}\n{text}")


def monotonic_samples(families):
    """(sample name, sorted labels) -> value of every counter and histogram sample."""
    out = {}
    for f in families.values():
        if f.type in ("counter", "histogram"):
            for s in f.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def main():
    url, min_fetches = sys.argv[1], int(sys.argv[2])
    first = scrape(url)
    second = scrape(url)
    for name, (typ, unit) in EXPECTED.items():
        f = second.get(name)
        if f is None:
            fail(f"family {name} missing; got {sorted(second)}")
        if f.type != typ or (f.unit or "") != unit:
            fail(f"{name}: type {f.type} unit {f.unit!r}, want {typ} {unit!r}")
    hist = [s for s in second["fetchbench_request_total_time_ms"].samples if s.labels.get("api") == "FetchConsumer"]
    count = next((s.value for s in hist if s.name.endswith("_count")), None)
    if count is None or count < min_fetches:
        fail(f"FetchConsumer count {count}, want >= {min_fetches}: {hist}")
    buckets = [s for s in hist if s.name.endswith("_bucket")]
    values = [s.value for s in buckets]
    if values != sorted(values) or buckets[-1].labels["le"] != "+Inf" or values[-1] != count:
        fail(f"FetchConsumer buckets not cumulative up to +Inf = count: {buckets}")
    before, after = monotonic_samples(first), monotonic_samples(second)
    for key, value in before.items():
        if key not in after:
            fail(f"{key} vanished from the second scrape")
        if after[key] < value:
            fail(f"{key} went down: {value} -> {after[key]}")
    read_bytes = sum(s.value for s in second["fetchbench_read_path_bytes"].samples if s.name.endswith("_total"))
    cpu = sum(
        s.value
        for n in ("fetchbench_process_cpu_user_seconds", "fetchbench_process_cpu_system_seconds")
        for s in second[n].samples
    )
    print(
        json.dumps(
            {
                "families": len(second),
                "fetch_consumer": count,
                "read_path_bytes": read_bytes,
                "cpu_seconds": cpu,
                "prometheus_client": version("prometheus-client"),
            }
        )
    )


if __name__ == "__main__":
    main()
