//! `fetchbench run` with a workload's `[producer_config]` (the configs reach the producers: the
//! batches in the log are shaped by `linger.ms` and `batch.size`) and the `mixed` phase
//! (producers at a rate while a group drains the backlog, one results entry).

use std::path::Path;

use fetchbench::log::segment::{Segment, SegmentConfig};

use crate::bench_run::{run_ok, write_workload};
use crate::serve_process::ServeProcess;

/// Records per batch of every batch in the partition directory `dir` (one segment).
fn records_per_batch(dir: &Path) -> Vec<i64> {
    let segment = Segment::open(dir, 0, SegmentConfig::default(), true).unwrap();
    segment.batches_from(0).map(|b| b.unwrap()).map(|b| b.last_offset - b.base_offset + 1).collect()
}

/// The tail phase against a `fetchbench serve` whose log directory the test reads afterwards:
/// with `linger.ms = 1000` and `batch.size = 2048`, a producer at 100 records/s of 512 bytes
/// fills each batch to what 2048 bytes hold (3 records: 61 header bytes + about 520 bytes a
/// record) and never more. Kafka's defaults (`linger.ms = 5`, `batch.size = 16384`) would send
/// one record a batch at this rate (10 ms apart); `batch.size` alone would let a 1 s linger
/// gather about 30.
#[test]
fn producer_config_shapes_the_batches_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let serve = ServeProcess::start(
        dir.path(),
        "serve",
        &[
            "--read-path",
            "copy",
            "-X",
            "group.initial.rebalance.delay.ms=0",
            "--listen",
            "127.0.0.1:0",
            "--log-dir",
            logs.to_str().unwrap(),
        ],
    );
    let workload = write_workload(
        dir.path(),
        r#"
name = "batches"
catch_up_duration = 0
partitions = 1
record_size = 512
consumers_per_group = 1
phases = ["tail"]
rate = 100
warmup = 0
duration = "1s"

[producer_config]
"linger.ms" = "1000"
"batch.size" = "2048"
"#,
    );
    let bootstrap = serve.addr.to_string();
    let results = run_ok(&workload, &dir.path().join("results"), &["--bootstrap", &bootstrap], "the tail run");
    drop(serve);
    let w = results.workload().unwrap();
    assert_eq!(w.producer_config["linger.ms"], "1000", "the results carry the producer configs");
    let tail = &results.paths[0];
    assert!(tail.produced_mb_per_sec.is_some_and(|mb| mb > 0.0), "{tail:?}");
    let partition = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("fetchbench-tail-"))
        .expect("the tail topic's partition directory");
    let batches = records_per_batch(&partition);
    let records: i64 = batches.iter().sum();
    assert!(records >= 90, "about 100 records produced: {batches:?}");
    assert!(batches.iter().all(|&n| n <= 3), "batch.size = 2048 holds at most 3 records of 512 bytes: {batches:?}");
    let full = batches.iter().filter(|&&n| n == 3).count();
    assert!(full * 10 >= (batches.len() - 1) * 8, "linger.ms = 1000 let the batches fill: {batches:?}");
}

/// The mixed phase over a small backlog at a low rate: one `mixed` entry whose records are the
/// backlog's, with end-to-end latencies of the tail records and the producers' MB/s; the
/// results validate (`only_results` parses them with the validator).
#[test]
fn a_mixed_phase_drains_the_backlog_while_producing() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "mixed"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "8MiB"
consumers_per_group = 2
phases = ["mixed"]
rate = 5000
warmup = "300ms"
read_paths = ["copy"]

[consumer_config]
"fetch.max.bytes" = 16384
"max.partition.fetch.bytes" = 16384
"#,
    );
    let results = run_ok(&workload, &dir.path().join("results"), &[], "the mixed run");
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("copy", "mixed")]);
    let p = &results.paths[0];
    assert_eq!(p.records, 8192, "every backlog record, once: {p:?}");
    assert!(p.bytes >= 8 << 20 && p.mb_per_sec > 0.0, "{p:?}");
    assert!(p.end_to_end_latency.corrected.summary.count > 0, "tail records in the interval: {p:?}");
    assert!(p.produced_mb_per_sec.is_some_and(|mb| mb > 0.0), "{p:?}");
    assert!(p.fetch_latency.summary.count > 0 && p.rebalance_ms.is_some(), "{p:?}");
    assert!(results.notes.iter().any(|n| n.contains("copy (mixed): interval")), "{:?}", results.notes);
}
