//! Transactions in a log the broker serves (issue 18, the log side): a partition directory
//! written as Kafka writes one (transactional batches, COMMIT / ABORT control batches, no
//! `.txnindex`, as in a copy whose index files were left behind) holds an aborted transaction
//! (offsets 0-2, its ABORT marker at 3), a committed one (4-5, COMMIT at 6) and one still open
//! at the log end (7-8). A `read_committed` consumer must get 4 and 5 only (Kafka's answer:
//! aborted records dropped through the Fetch's `aborted_transactions`, nothing at or past the
//! last stable offset 7); `read_uncommitted` gets every data record. The `.txnindex` is rebuilt
//! from the markers in Kafka's layout. Real clients: confluent-kafka (read_committed is
//! librdkafka's default) and kcat, on several read paths.

use std::path::Path;

use fetchbench::broker::ServerModel;
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::log::txn_index::{self, marker_batch, AbortedTxn};
use fetchbench::read_path::ReadPathKind;

use crate::common;
use crate::python_clients::{python_with, run_script_args};

const TOPIC: &str = "tx";

/// A transactional data batch of `producer_id` at `base` with `values`.
fn txn_batch(base: i64, producer_id: i64, values: &[&str]) -> Vec<u8> {
    let mut b = BatchBuilder::new(base, Compression::None).producer(producer_id, 0, 0).transactional(true);
    for v in values {
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// Writes `tx-0` into `log_dir` (see the module docs) and returns its directory.
pub(crate) fn write_txn_partition(log_dir: &Path) -> std::path::PathBuf {
    let dir = log_dir.join(format!("{TOPIC}-0"));
    std::fs::create_dir_all(&dir).unwrap();
    let segment = [
        txn_batch(0, 1, &["aborted-0", "aborted-1", "aborted-2"]),
        marker_batch(3, 1, 0, true, 0, 1_700_000_000_001),
        txn_batch(4, 2, &["committed-4", "committed-5"]),
        marker_batch(6, 2, 0, false, 0, 1_700_000_000_002),
        txn_batch(7, 3, &["open-7", "open-8"]),
    ]
    .concat();
    std::fs::write(dir.join("00000000000000000000.log"), segment).unwrap();
    dir
}

/// kcat's offsets and values of partition 0 with `isolation`.
fn kcat_read(bootstrap: &str, isolation: &str) -> Vec<String> {
    let args = [
        "-b",
        bootstrap,
        "-X",
        &format!("isolation.level={isolation}"),
        "-t",
        TOPIC,
        "-p",
        "0",
        "-C",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o:%s\n",
    ];
    let out = common::kcat(&args, "", std::time::Duration::from_secs(60));
    assert!(out.status.is_some_and(|s| s.success()), "kcat {args:?}: {}\n{}", out.stderr, out.stdout_text());
    out.stdout_text().lines().map(str::to_string).collect()
}

fn serves_read_committed_on(kind: ReadPathKind, model: ServerModel) {
    let mut partition_dir = None;
    let (_tmp, broker) = crate::uring_model::start_model(kind, model, |config| {
        partition_dir = Some(write_txn_partition(&config.log_dir));
    });
    let partition_dir = partition_dir.unwrap();
    let bootstrap = broker.local_addr().to_string();
    let what = format!("server model {model}, read path {kind}");
    // The index Kafka would have written at the ABORT marker: producer 1, offsets 0..=3, the
    // LSO then 4 (producer 2's transaction was open).
    let index = txn_index::read(&partition_dir.join("00000000000000000000.txnindex")).unwrap();
    assert_eq!(
        index,
        Some(vec![AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 4 }]),
        "{what}"
    );
    if common::kcat_available() {
        assert_eq!(kcat_read(&bootstrap, "read_committed"), ["4:committed-4", "5:committed-5"], "{what}");
        assert_eq!(
            kcat_read(&bootstrap, "read_uncommitted"),
            ["0:aborted-0", "1:aborted-1", "2:aborted-2", "4:committed-4", "5:committed-5", "7:open-7", "8:open-8"],
            "{what}"
        );
    }
    if let Some(python) = python_with("confluent_kafka") {
        let summary = run_script_args(&python, "txn_read_committed.py", &[&bootstrap, TOPIC], &what);
        assert_eq!(summary["read_committed"]["offsets"], serde_json::json!([4, 5]), "{what}: {summary}");
        assert_eq!(summary["read_committed"]["high"], 7, "{what}: the last stable offset: {summary}");
        assert_eq!(
            summary["read_uncommitted"]["offsets"],
            serde_json::json!([0, 1, 2, 4, 5, 7, 8]),
            "{what}: {summary}"
        );
        assert_eq!(summary["read_uncommitted"]["high"], 9, "{what}: {summary}");
    }
    for (isolation, want) in [
        ("read_committed", &["4:committed-4", "5:committed-5"][..]),
        (
            "read_uncommitted",
            &["0:aborted-0", "1:aborted-1", "2:aborted-2", "4:committed-4", "5:committed-5", "7:open-7", "8:open-8"][..],
        ),
    ] {
        assert_eq!(fetchbench_consume(&bootstrap, isolation), want, "{what}: fetchbench consume, {isolation}");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
    check_log_dump(&partition_dir);
}

/// `fetchbench log dump` reads the `.txnindex` (Kafka's `dumpTxnIndex` line) and `--verify`
/// checks it against the ABORT markers both ways: the broker's file passes; one naming another
/// producer fails, naming the entry and the marker.
fn check_log_dump(partition_dir: &Path) {
    let index = partition_dir.join("00000000000000000000.txnindex");
    let dump = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .args(["log", "dump"])
            .args(args)
            .arg(&index)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };
    let (code, text) = dump(&[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("version: 0 producerId: 1 firstOffset: 0 lastOffset: 3 lastStableOffset: 4"), "{text}");
    let (code, text) = dump(&["--verify"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("00000000000000000000.txnindex: 1 entries, ok"), "{text}");
    let wrong = AbortedTxn { producer_id: 2, first_offset: 4, last_offset: 6, last_stable_offset: 7 };
    txn_index::write(&index, &[wrong]).unwrap();
    let (code, text) = dump(&["--verify"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no ABORT marker of producer 2 at offset 6"), "{text}");
    assert!(text.contains("the ABORT marker of producer 1 at offset 3 has no entry"), "{text}");
}

/// `fetchbench consume` of partition 0 from the beginning with `isolation`, until its end
/// (`--exit-at-end`: the last stable offset under read_committed, which it must not wait past).
fn fetchbench_consume(bootstrap: &str, isolation: &str) -> Vec<String> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"));
    cmd.args(["consume", "--bootstrap", bootstrap, "--topic", TOPIC, "--partition", "0", "--offset", "beginning"])
        .args(["--exit-at-end", "--format", "%o:%s\\n", "-X", &format!("isolation.level={isolation}")])
        .args(["-X", "fetch.max.wait.ms=100"]);
    let out = common::run_with_timeout(&mut cmd, None, std::time::Duration::from_secs(60));
    let stdout = out.expect_success(&format!("fetchbench consume -X isolation.level={isolation}"));
    stdout.lines().map(str::to_string).collect()
}

#[test]
fn read_committed_on_copy() {
    serves_read_committed_on(ReadPathKind::Copy, ServerModel::Threaded);
}

#[test]
fn read_committed_on_sendfile() {
    serves_read_committed_on(ReadPathKind::Sendfile, ServerModel::Threaded);
}

#[test]
fn read_committed_on_mmap() {
    serves_read_committed_on(ReadPathKind::Mmap, ServerModel::Threaded);
}

#[test]
fn read_committed_under_uring() {
    if let Err(e) = ServerModel::Uring.probe() {
        assert!(!common::in_ci(), "CI must run the server.model=uring tests: {e}");
        eprintln!("SKIP: server.model=uring: {e}");
        return;
    }
    serves_read_committed_on(ReadPathKind::UringSplice, ServerModel::Uring);
}

/// A `__consumer_offsets` partition copied from a Kafka broker holding transactional offset
/// commits (`send_offsets_to_transaction`): the coordinator replays them as Kafka does, an
/// aborted transaction's offsets never committed, a committed one's applied at its marker, an
/// open one's not applied.
#[test]
fn transactional_offset_commits_in_a_copied_consumer_offsets_are_replayed_as_kafka_does() {
    use fetchbench::protocol::consumer_offsets::{partition_for, OffsetCommitKey, OffsetCommitValue};
    let commit = |base: i64, producer: Option<i64>, partition: i32, offset: i64| {
        let key = OffsetCommitKey::new("txg", TOPIC, partition).encode().unwrap();
        let value = OffsetCommitValue::new(offset, None, String::new(), 1_700_000_000_000, None).encode().unwrap();
        let mut b = BatchBuilder::new(base, Compression::None);
        if let Some(p) = producer {
            b = b.producer(p, 0, 0).transactional(true);
        }
        b.append(1_700_000_000_000, Some(&key), Some(&value), &[]);
        b.build().unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let dir = logs.join(format!("__consumer_offsets-{}", partition_for("txg", 50)));
    std::fs::create_dir_all(&dir).unwrap();
    let segment = [
        commit(0, None, 0, 5),
        commit(1, Some(7), 0, 10),
        marker_batch(2, 7, 0, true, 0, 1_700_000_000_001),
        commit(3, Some(8), 1, 20),
        marker_batch(4, 8, 0, false, 0, 1_700_000_000_002),
        commit(5, Some(9), 2, 30),
    ]
    .concat();
    std::fs::write(dir.join("00000000000000000000.log"), segment).unwrap();
    let broker = common::start_group_broker(&logs, "127.0.0.1:0".parse().unwrap(), |_| {});
    let offsets = broker.test_support().coordinator().fetch_offsets("txg", None).unwrap();
    let found: Vec<(i32, i64)> = offsets
        .iter()
        .flat_map(|(_, parts)| parts.iter().map(|(p, c)| (*p, c.as_ref().map_or(-1, |c| c.offset))))
        .collect();
    assert_eq!(found, [(0, 5), (1, 20)], "partition 0 keeps 5 (10 was aborted), 1 gets 20, 2 (open) nothing");
    broker.shutdown().unwrap();
}
