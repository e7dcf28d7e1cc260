//! `fetchbench run` with `client = "librdkafka"`: the consumers are kcat processes in balanced
//! groups (src/bench/kcat.rs). A generated backlog (catch-up exact record count, tail latency
//! for every record of the window) and the `real-log-dir.toml` fixture over a copy of a real
//! Kafka log directory. kcat missing: skipped with a notice, a failure in CI.

use std::path::Path;

use crate::bench_run::{fetchbench, only_results, text};

/// A generated 2 MiB backlog (2048 records of 1 KiB) over 2 partitions, one group of 2 kcat
/// members: the catch-up reads every record exactly once (the harness checks offsets and the
/// count), the tail phase measures the end-to-end latency of every record of the window from
/// the producers' headers.
#[test]
fn kcat_consumers_catch_up_and_tail() {
    if !crate::common::kcat_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("workload.toml");
    std::fs::write(
        &workload,
        r#"
name = "kcat-tiny"
catch_up_duration = 0
client = "librdkafka"
partitions = 2
record_size = "1KiB"
backlog = "2MiB"
consumers_per_group = 2
rate = 500
warmup = 0
duration = "1s"
read_paths = ["sendfile"]
"#,
    )
    .unwrap();
    let results_dir = dir.path().join("results");
    let out =
        fetchbench().args(["run", "--no-limits", "--results-dir"]).arg(&results_dir).arg(&workload).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    let phases: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(phases, [("sendfile", "catch_up"), ("sendfile", "tail")]);
    let catch_up = &results.paths[0];
    assert_eq!(catch_up.records, 2048, "{catch_up:?}");
    assert!(catch_up.seconds > 0.0 && catch_up.mb_per_sec > 0.0, "{catch_up:?}");
    assert_eq!(catch_up.poll_latency.summary.count, 0, "kcat has no poll latency");
    let kcat_cpu = catch_up.consumer_cpu.user_s_per_gb + catch_up.consumer_cpu.sys_s_per_gb;
    assert!(kcat_cpu > 0.0, "the kcat processes' CPU (wait4) is the consumer CPU: {catch_up:?}");
    let tail = &results.paths[1];
    assert!(tail.records >= 450, "rate 500 for 1 s: {tail:?}");
    assert_eq!(tail.end_to_end_latency.corrected.summary.count, tail.records, "{tail:?}");
    assert_eq!(tail.end_to_end_latency.raw.summary.count, tail.records, "{tail:?}");
    assert!(
        results.notes.iter().any(|n| n.contains("kcat") && n.contains("poll latency is not available")),
        "{:?}",
        results.notes
    );
}

/// Read paths share the log directory: the second path's catch-up must read exactly the 2048
/// backlog records again, untouched by the first path's tail phase (which writes to topics of
/// its own), with no "duplicates" error.
#[test]
fn a_second_read_path_counts_only_the_backlog() {
    if !crate::common::kcat_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("workload.toml");
    std::fs::write(
        &workload,
        r#"
name = "kcat-two-paths"
catch_up_duration = 0
client = "librdkafka"
partitions = 2
record_size = "1KiB"
backlog = "2MiB"
consumers_per_group = 1
rate = 200
warmup = 0
duration = "1s"
read_paths = ["copy", "sendfile"]
"#,
    )
    .unwrap();
    let results_dir = dir.path().join("results");
    let out =
        fetchbench().args(["run", "--no-limits", "--results-dir"]).arg(&results_dir).arg(&workload).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    let catch_ups: Vec<_> = results.paths.iter().filter(|p| p.phase == "catch_up").collect();
    assert_eq!(catch_ups.len(), 2, "{:?}", results.paths);
    for p in catch_ups {
        assert_eq!(p.records, 2048, "{p:?}");
    }
}

/// The `real-log-dir.toml` fixture (librdkafka consumers, two groups of two, read paths copy
/// and sendfile) over a copy of a real Kafka broker's log directory: cities-0 holds 11
/// records in 820 batch bytes (corpus README), so each path's catch-up reads 22 records (two
/// groups) and 1640 bytes; one partition for two members leaves one member of each group
/// without partitions, which the harness stops once its group has everything.
#[test]
fn real_log_dir_fixture_with_kcat() {
    let Some(corpus) = crate::common::corpus() else { return };
    if !crate::common::kcat_available() {
        return;
    }
    let src = corpus.join("kafka-segments/Bheem6005-kafka/kafka-logs");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/real-log-dir.toml");
    let dir = tempfile::tempdir().unwrap();
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--results-dir"])
        .arg(&results_dir)
        .arg("--log-dir")
        .arg(&src)
        .arg(&fixture)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    let phases: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(phases, [("copy", "catch_up"), ("sendfile", "catch_up")]);
    for p in &results.paths {
        assert_eq!((p.records, p.bytes), (22, 1640), "two groups x cities-0 (11 records, 820 bytes): {p:?}");
    }
    assert_eq!(results.workload().unwrap().log_dir.as_deref(), Some(src.as_path()));
}

/// The fixture's own `log_dir` names a directory `copy_log_dir` accepts when the corpus sits at
/// its default place (the crate root's `../shared/corpus`).
#[test]
fn real_log_dir_fixture_names_the_corpus_directory() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/real-log-dir.toml"))
            .unwrap();
    let line = text.lines().find(|l| l.starts_with("log_dir")).expect("log_dir is set");
    assert!(line.contains("../shared/corpus/kafka-segments/Bheem6005-kafka/kafka-logs"), "{line}");
    let Some(corpus) = crate::common::corpus() else { return };
    assert!(corpus.join("kafka-segments/Bheem6005-kafka/kafka-logs/cities-0").is_dir());
}
