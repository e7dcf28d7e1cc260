//! The catch-up drain's correctness (issue 13, item 1): no Fetch of the warmup still in flight
//! when the measured drain starts (a long `fetch.max.wait.ms` would otherwise hold its first
//! poll), and no failure at the end of a complete drain (a member that is done stays in the
//! group until every member is done; a rebalance is handled with committed positions).

use std::time::Instant;

use crate::bench_run::{run_ok, write_workload};

/// A warmup with `fetch.max.wait.ms = 5000`: each warm pass ends with a pipelined Fetch parked
/// at the log end for 5 s. It must be answered before the drain starts: the broker holds no
/// Fetch when the measured interval starts, and no data Fetch of the drain took anywhere near
/// the 5 s a leaked one would (before the fix: a ~5 s fetch max and a delayed drain).
#[test]
fn a_parked_warmup_fetch_does_not_leak_into_the_drain() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "warm-leak"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "2MiB"
consumers_per_group = 2
phases = ["catch_up"]
warmup = "1s"
read_paths = ["copy"]

[consumer_config]
"fetch.max.wait.ms" = "5000"
"#,
    );
    let results = run_ok(&workload, &dir.path().join("results"), &[], "the run");
    let p = &results.paths[0];
    assert_eq!(p.records, 2048, "{p:?}");
    assert_eq!(p.fetches_in_flight_at_start, Some(0), "{p:?}");
    let f = &p.fetch_latency.summary;
    assert!(f.count > 0, "{p:?}");
    assert!(f.max_us < 4e6, "a data Fetch of the drain took {} us: a parked warmup Fetch leaked in: {f:?}", f.max_us);
}

/// The issue's end-of-drain case: with `fetch.max.wait.ms = 20`, members finish at different
/// moments; one leaving the group early made another one, still polling, get its partitions
/// again from offset 0 and abort a complete drain ("offset 0 delivered where N was expected").
/// Ten drains (five runs of two read paths), none fails and each reads the backlog once. (Before
/// the fix, runs of this workload failed with "offset 0 delivered where 2048 was expected".)
#[test]
fn ten_drains_with_a_short_max_wait_all_finish() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "end-of-drain"
catch_up_duration = 0
partitions = 8
record_size = "1KiB"
backlog = "16MiB"
consumers_per_group = 4
phases = ["catch_up"]
warmup = "0s"
read_paths = ["copy", "sendfile"]

[consumer_config]
"fetch.max.wait.ms" = "20"
"#,
    );
    let started = Instant::now();
    for run in 0..5 {
        let what = format!("run {run} ({:?} in)", started.elapsed());
        let results = run_ok(&workload, &dir.path().join(format!("results-{run}")), &[], &what);
        assert_eq!(results.paths.len(), 2);
        for p in &results.paths {
            assert_eq!(p.records, 16384, "run {run}: every record once: {p:?}");
            assert_eq!(p.fetches_in_flight_at_start, Some(0), "run {run}: {p:?}");
        }
    }
}

/// A rebalance before the measured drain (the reviewer's repro, with `max.poll.interval.ms = 25`:
/// at 5 the consumer itself gives up a slow join, "did not stabilize"): members leave and rejoin
/// during the warmup and the settle. They must go back to a stable group and use their current
/// assignment, and no warmup position may be committed (before the fix, 3 of 3 runs failed:
/// "bench-0-2 is not assigned to this consumer", or "offset 120 delivered where 0 was expected").
#[test]
fn a_rebalance_during_the_warmup_does_not_abort_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "warm-rebalance"
catch_up_duration = 0
partitions = 4
record_size = "1KiB"
backlog = "16MiB"
consumer_groups = 2
consumers_per_group = 3
phases = ["catch_up"]
warmup = "1s"
read_paths = ["copy"]

[consumer_config]
"max.poll.interval.ms" = "25"
"fetch.max.wait.ms" = "20"
"max.partition.fetch.bytes" = "65536"
"#,
    );
    let results = run_ok(&workload, &dir.path().join("results"), &[], "the run");
    let p = &results.paths[0];
    assert_eq!(p.records, 2 * 16384, "every record once per group: {p:?}");
}
