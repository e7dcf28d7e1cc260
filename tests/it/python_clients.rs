//! Real-client interop with the Python Kafka clients, for every read path: confluent-kafka
//! (librdkafka, every codec) and kafka-python (pure Python, producer defaults: idempotent,
//! acks=all).
//!
//! Each test starts a broker on 127.0.0.1:0 with a temporary log directory and runs one script of
//! `tests/python/` with the bootstrap address (killed after [`SCRIPT_TIMEOUT`], so the suite never
//! hangs). The script produces, consumes back with `assign()` (from the start and from a middle
//! offset), looks offsets up by timestamp and lists metadata, comparing everything exactly and
//! exiting non-zero with a message naming the topic on any difference; on success it prints one
//! JSON line, checked here. The codec of the stored batches is checked in the segment files, so a
//! client that silently fell back to no compression fails.
//!
//! The interpreter is `FETCHBENCH_PYTHON` (set by `scripts/test.sh`, a virtualenv with pinned
//! versions of both clients), else `.venv/bin/python` of the crate. Interpreter or client package
//! missing: the tests fail in CI (`CI` set, not `false`) and skip with a notice elsewhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fetchbench::broker::ServerModel;
use fetchbench::read_path::ReadPathKind;
use serde_json::Value;

/// The longest one script run may take before it is killed (a healthy run takes about a second).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Records per topic, as the scripts' `RECORDS`.
const RECORDS: u64 = 40;
/// confluent-kafka topics (`ck-<compression.type>`, and `ck-idempotent`: lz4 with
/// `enable.idempotence=true`) and the Kafka codec id their batches carry.
const CONFLUENT_TOPICS: [(&str, u8); 6] =
    [("ck-none", 0), ("ck-gzip", 1), ("ck-snappy", 2), ("ck-lz4", 3), ("ck-zstd", 4), ("ck-idempotent", 3)];
/// kafka-python topics and their codec ids.
const KAFKA_PYTHON_TOPICS: [(&str, u8); 2] = [("kp-none", 0), ("kp-gzip", 1)];

/// The Python interpreter that can import `module`; `None` (with a notice) outside CI, a panic
/// in CI.
pub(crate) fn python_with(module: &str) -> Option<PathBuf> {
    let python = std::env::var_os("FETCHBENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    let importable = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if importable {
        return Some(python);
    }
    let why = format!("{} cannot import {module}", python.display());
    if crate::common::in_ci() {
        panic!("{why}: CI must run the Python client interop tests (scripts/test.sh installs them)");
    }
    eprintln!("SKIP: {why}; run scripts/test.sh (or set FETCHBENCH_PYTHON) to run this test");
    None
}

/// Runs `tests/python/<script> <bootstrap>` and returns its last stdout line as JSON; panics
/// with the script's output when it fails, is killed after [`SCRIPT_TIMEOUT`] or prints no JSON.
fn run_script(python: &Path, script: &str, bootstrap: &str, what: &str) -> Value {
    run_script_args(python, script, &[bootstrap], what)
}

/// Runs `tests/python/<script> <args...>` as [`run_script`] does.
pub(crate) fn run_script_args(python: &Path, script: &str, args: &[&str], what: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python").join(script);
    let out = crate::common::run_with_timeout(
        Command::new(python).arg(&path).args(args).env("PYTHONDONTWRITEBYTECODE", "1").env("PYTHONUNBUFFERED", "1"),
        None,
        SCRIPT_TIMEOUT,
    );
    let stdout = out.expect_success(&format!("{what}: {script}"));
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{what}: {script} printed no JSON summary ({e})\nstdout:\n{stdout}"))
}

/// `(codec id, producer id)` of every batch in the partition's first segment file.
fn stored_batches(log_dir: &Path, topic: &str) -> Vec<(u8, i64)> {
    let bytes = std::fs::read(log_dir.join(format!("{topic}-0")).join("00000000000000000000.log")).unwrap();
    let mut batches = Vec::new();
    let mut pos = 0;
    while pos + 51 <= bytes.len() {
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let producer_id = i64::from_be_bytes(bytes[pos + 43..pos + 51].try_into().unwrap());
        batches.push((bytes[pos + 22] & 0x07, producer_id));
        pos += 12 + len;
    }
    batches
}

/// The producer id of every stored batch of `topic`.
fn stored_producer_ids(log_dir: &Path, topic: &str) -> Vec<i64> {
    stored_batches(log_dir, topic).into_iter().map(|(_, id)| id).collect()
}

/// Checks the summary's topics and counts, and the codec of each topic's stored batches.
fn check(summary: &Value, log_dir: &Path, topics: &[(&str, u8)], time_lookups: u64, what: &str) {
    for &(topic, codec) in topics {
        assert_eq!(summary["topics"][topic], RECORDS, "{what}: {topic} in {summary}");
        assert!(
            summary["listed_topics"].as_array().unwrap().iter().any(|t| t == topic),
            "{what}: {topic} not listed in {summary}"
        );
        let stored: Vec<u8> = stored_batches(log_dir, topic).into_iter().map(|(c, _)| c).collect();
        assert!(!stored.is_empty(), "{what}: {topic}: nothing stored");
        assert!(stored.iter().all(|&c| c == codec), "{what}: {topic}: stored codecs {stored:?}, want {codec}");
    }
    // Every topic read from offset 0 and from RECORDS / 2 + 1.
    let per_topic = RECORDS + (RECORDS - (RECORDS / 2 + 1));
    assert_eq!(summary["consumed"], per_topic * topics.len() as u64, "{what}: {summary}");
    assert_eq!(summary["offsets_for_times"], time_lookups * topics.len() as u64, "{what}: {summary}");
}

fn confluent(kind: ReadPathKind) {
    confluent_on(kind, ServerModel::Threaded);
}

/// The confluent-kafka interop run against a broker of `model` on `kind`.
pub(crate) fn confluent_on(kind: ReadPathKind, model: ServerModel) {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (tmp, broker) = crate::uring_model::start_model(kind, model, |_| {});
    let what = format!("confluent-kafka, server model {model}, read path {kind}");
    let summary = run_script(&python, "confluent_interop.py", &broker.local_addr().to_string(), &what);
    eprintln!("{what}: {summary}");
    let logs = tmp.path().join("logs");
    check(&summary, &logs, &CONFLUENT_TOPICS, 6, &what);
    let ids = stored_producer_ids(&logs, "ck-idempotent");
    assert!(ids.iter().all(|&id| id >= 0), "{what}: ck-idempotent: producer ids {ids:?}, want InitProducerId's");
    let ids = stored_producer_ids(&logs, "ck-none");
    assert!(ids.iter().all(|&id| id == -1), "{what}: ck-none: producer ids {ids:?}, want -1 (not idempotent)");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

fn kafka_python(kind: ReadPathKind) {
    kafka_python_on(kind, ServerModel::Threaded);
}

/// The kafka-python interop run against a broker of `model` on `kind`.
pub(crate) fn kafka_python_on(kind: ReadPathKind, model: ServerModel) {
    let Some(python) = python_with("kafka") else { return };
    let (tmp, broker) = crate::uring_model::start_model(kind, model, |_| {});
    let what = format!("kafka-python, server model {model}, read path {kind}");
    let summary = run_script(&python, "kafka_python_interop.py", &broker.local_addr().to_string(), &what);
    eprintln!("{what}: {summary}");
    let logs = tmp.path().join("logs");
    check(&summary, &logs, &KAFKA_PYTHON_TOPICS, 6, &what);
    for (topic, _) in KAFKA_PYTHON_TOPICS {
        let producer = &summary["producers"][topic];
        assert_eq!(producer["idempotent"], true, "{what}: {topic}: the producer must keep its defaults: {summary}");
        assert_eq!(producer["acks"], -1, "{what}: {topic}: the producer must keep its defaults: {summary}");
        let ids = stored_producer_ids(&logs, topic);
        assert!(ids.iter().all(|&id| id >= 0), "{what}: {topic}: producer ids {ids:?}, want InitProducerId's");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Runs `test` on the io_uring splice path when this kernel offers it, else skips with a notice.
fn on_uring_splice(test: fn(ReadPathKind)) {
    match ReadPathKind::UringSplice.probe() {
        Ok(()) => test(ReadPathKind::UringSplice),
        Err(e) => eprintln!("SKIP: read path {}: {}", ReadPathKind::UringSplice, e.reason),
    }
}

#[test]
fn confluent_copy() {
    confluent(ReadPathKind::Copy);
}

#[test]
fn confluent_sendfile() {
    confluent(ReadPathKind::Sendfile);
}

#[test]
fn confluent_mmap() {
    confluent(ReadPathKind::Mmap);
}

#[test]
fn confluent_uring_splice() {
    on_uring_splice(confluent);
}

#[test]
fn kafka_python_copy() {
    kafka_python(ReadPathKind::Copy);
}

#[test]
fn kafka_python_sendfile() {
    kafka_python(ReadPathKind::Sendfile);
}

#[test]
fn kafka_python_mmap() {
    kafka_python(ReadPathKind::Mmap);
}

#[test]
fn kafka_python_uring_splice() {
    on_uring_splice(kafka_python);
}
