//! Transactions with real clients (issue 18, the coordinator side; Kafka's `TransactionCoordinator`,
//! KIP-98, KIP-447, KIP-890 part 1 verification): every test checks what the clients see exactly.
//!
//! - confluent-kafka's transactional producer commits four transactions and aborts one over three
//!   partitions; read_committed consumers (confluent-kafka and kcat) get exactly the committed
//!   records in order per partition and an end (the last stable offset) equal to the high
//!   watermark, read_uncommitted consumers get them all; on every read path (`copy`, `sendfile`,
//!   `mmap`, and `uring-splice` under `server.model=uring`), the batches compressed with a
//!   different codec on each; the `.txnindex` it leaves passes `fetchbench log dump --verify`.
//! - three producers' transactions overlapping in the same partitions, committed and aborted in
//!   turn: read_committed gets exactly the committed ones, in log order.
//! - a fenced zombie: a second producer with the same transactional id fences the first, whose
//!   commit (or late Produce) fails with a fatal fenced error and whose records are never visible
//!   to read_committed; a transaction left open past its `transaction.timeout.ms` is aborted by
//!   the broker the same way.
//! - consume-transform-produce with `send_offsets_to_transaction`: the group's committed offsets
//!   move on commit only.
//! - kafka-python's transactional producer read by kafka-python read_committed consumers, and its
//!   `send_offsets_to_transaction`.
//! - SIGKILL of `fetchbench serve` with a transaction open, with and without offsets sent in it
//!   (the restarted coordinator aborts it after its `transaction.timeout.ms`: none of its records
//!   is ever visible to read_committed, its offsets never the group's) and right after
//!   EndTxn(commit) was answered (all of it visible after the restart).
//! - over the wire: a transactional batch for a partition not added to the transaction is refused
//!   with INVALID_TXN_STATE (Kafka's `ReplicaManager` transaction verification, KIP-890) and a
//!   control batch written by a client with INVALID_RECORD (`LogValidator`); nothing of them
//!   becomes readable, and a client-written COMMIT marker commits nothing.
//!
//! The Python scripts are `tests/python/txn_confluent.py`, `txn_kafka_python.py` and
//! `txn_crash.py`; a missing client skips outside CI (see `python_clients.rs`).

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use fetchbench::broker::ServerModel;
use fetchbench::log::batch::{BatchBuilder, Compression, RecordBatch};
use fetchbench::log::txn_index::{self, marker_batch};
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiKey, EndTxnRequest, FetchRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProduceRequest, ProducerId, RequestKind, ResponseKind, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::broker::{metadata, name, Client};
use crate::common;
use crate::python_clients::{python_with, run_script_args};
use crate::serve_process::ServeProcess;

/// Partitions of the topics the scripts create.
const PARTITIONS: usize = 3;

/// `r{r}-p{p}-{i}` for every round of `rounds` and record `i < records` of partition `p`.
fn round_values(rounds: impl IntoIterator<Item = usize>, p: usize, records: usize) -> Vec<String> {
    rounds.into_iter().flat_map(|r| (0..records).map(move |i| format!("r{r}-p{p}-{i}"))).collect()
}

/// The values a summary holds for partition `p` (the scripts print per-partition maps).
fn values(summary: &Value, p: usize) -> Vec<String> {
    let list = summary["values"][p.to_string()]
        .as_array()
        .unwrap_or_else(|| panic!("no values of partition {p} in {summary}"));
    list.iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

/// kcat's values of `topic`-`partition` from the beginning to its end with `isolation`.
fn kcat_values(bootstrap: &str, topic: &str, partition: usize, isolation: &str) -> Vec<String> {
    let partition = partition.to_string();
    let args = [
        "-b",
        bootstrap,
        "-X",
        &format!("isolation.level={isolation}"),
        "-t",
        topic,
        "-p",
        &partition,
        "-C",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%s\n",
    ];
    let out = common::kcat(&args, "", Duration::from_secs(60));
    assert!(out.status.is_some_and(|s| s.success()), "kcat {args:?}: {}\n{}", out.stderr, out.stdout_text());
    out.stdout_text().lines().map(str::to_string).collect()
}

/// confluent-kafka (batches compressed with `codec`): rounds 0, 1, 3, 4 committed, 2 aborted (5
/// records per partition each), read back by confluent-kafka and kcat under both isolation levels.
fn confluent_commit_abort_on(kind: ReadPathKind, model: ServerModel, codec: &str) {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (tmp, broker) = crate::uring_model::start_model(kind, model, |_| {});
    let bootstrap = broker.local_addr().to_string();
    let what = format!("confluent-kafka transactions ({codec}), server model {model}, read path {kind}");
    let topic = "ck-txn";
    let parts = PARTITIONS.to_string();
    let summary =
        run_script_args(&python, "txn_confluent.py", &["commit-abort", &bootstrap, topic, &parts, codec], &what);
    let committed_rounds = [0, 1, 3, 4];
    for p in 0..PARTITIONS {
        let rc = &summary["read_committed"];
        let ru = &summary["read_uncommitted"];
        assert_eq!(values(rc, p), round_values(committed_rounds, p, 5), "{what}: read_committed, partition {p}");
        assert_eq!(values(ru, p), round_values(0..5, p, 5), "{what}: read_uncommitted, partition {p}");
        let offsets: Vec<i64> =
            rc["offsets"][p.to_string()].as_array().unwrap().iter().map(|o| o.as_i64().unwrap()).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{what}: partition {p}: offsets out of order {offsets:?}");
        // 25 records and 5 markers; nothing open: the last stable offset is the high watermark.
        assert_eq!(ru["high"][p.to_string()], 30, "{what}: partition {p}: {summary}");
        assert_eq!(rc["eof"][p.to_string()], 30, "{what}: partition {p}: read_committed's end: {summary}");
        assert_eq!(ru["eof"][p.to_string()], 30, "{what}: partition {p}: {summary}");
        if common::kcat_available() {
            assert_eq!(
                kcat_values(&bootstrap, topic, p, "read_committed"),
                round_values(committed_rounds, p, 5),
                "{what}: kcat read_committed, partition {p}"
            );
            assert_eq!(
                kcat_values(&bootstrap, topic, p, "read_uncommitted"),
                round_values(0..5, p, 5),
                "{what}: kcat read_uncommitted, partition {p}"
            );
        }
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
    // The log the producer wrote, in Kafka's formats: round 2 (offsets 12-16, ABORT at 17) in
    // each partition's `.txnindex`, which `fetchbench log dump --verify` finds consistent with
    // the markers.
    for p in 0..PARTITIONS {
        let index = tmp.path().join("logs").join(format!("{topic}-{p}")).join("00000000000000000000.txnindex");
        let entries = txn_index::read(&index).unwrap().unwrap_or_default();
        let ranges: Vec<(i64, i64, i64)> =
            entries.iter().map(|e| (e.first_offset, e.last_offset, e.last_stable_offset)).collect();
        assert_eq!(ranges, [(12, 17, 18)], "{what}: {}: {entries:?}", index.display());
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .args(["log", "dump", "--verify"])
            .arg(&index)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 entries, ok"), "{what}: log dump --verify: {text}");
        let codec_id = ["none", "gzip", "snappy", "lz4", "zstd"].iter().position(|c| *c == codec).unwrap() as u8;
        let segment = std::fs::read(index.with_extension("log")).unwrap();
        let mut rest = &segment[..];
        let mut data_batches = 0;
        while let Ok(batch) = RecordBatch::parse(rest) {
            if !batch.attributes().is_control() {
                assert_eq!(batch.attributes().codec_id(), codec_id, "{what}: batch at {}", batch.base_offset());
                data_batches += 1;
            }
            rest = &rest[batch.as_bytes().len()..];
        }
        assert!(data_batches >= 5, "{what}: {data_batches} data batches");
    }
}

#[test]
fn confluent_transactions_on_copy() {
    confluent_commit_abort_on(ReadPathKind::Copy, ServerModel::Threaded, "none");
}

#[test]
fn confluent_transactions_on_sendfile() {
    confluent_commit_abort_on(ReadPathKind::Sendfile, ServerModel::Threaded, "lz4");
}

#[test]
fn confluent_transactions_on_mmap() {
    confluent_commit_abort_on(ReadPathKind::Mmap, ServerModel::Threaded, "zstd");
}

#[test]
fn confluent_transactions_under_uring() {
    if let Err(e) = ServerModel::Uring.probe() {
        assert!(!common::in_ci(), "CI must run the server.model=uring tests: {e}");
        eprintln!("SKIP: server.model=uring: {e}");
        return;
    }
    confluent_commit_abort_on(ReadPathKind::UringSplice, ServerModel::Uring, "snappy");
}

/// A zombie producer is fenced by a new instance with the same transactional id: its commit
/// fails fatally, its records (delivered before the fencing) are aborted. With `late_send`, it
/// sends one more record after the fencing, which is not appended at all (the abort marker
/// carried the bumped epoch: INVALID_PRODUCER_EPOCH); without, its EndTxn carries the old epoch.
fn fenced_zombie(late_send: bool) {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::Sendfile, ServerModel::Threaded, |_| {});
    let bootstrap = broker.local_addr().to_string();
    let (mode, topic) = if late_send { ("late", "ck-zombie-late") } else { ("direct", "ck-zombie-direct") };
    let what = format!("fenced zombie ({mode})");
    let summary = run_script_args(&python, "txn_confluent.py", &["zombie", &bootstrap, topic, mode], &what);
    eprintln!("{what}: {summary}");
    let a = &summary["a_commit"];
    let error = a["error"].as_str().unwrap();
    assert!(
        ["_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"].contains(&error),
        "{what}: A's commit failed with {error}, want a fenced error: {summary}"
    );
    assert_eq!(a["fatal"], true, "{what}: a fenced producer's error is fatal: {summary}");
    let late = summary["a_late_delivery"].as_array().unwrap();
    assert_eq!(late.is_empty(), !late_send, "{what}: {summary}");
    assert!(late.iter().all(|e| !e.is_null()), "{what}: the zombie's late record was delivered: {summary}");
    let b: Vec<String> = (0..5).map(|i| format!("b-{i}")).collect();
    let zombie: Vec<String> = (0..5).map(|i| format!("zombie-{i}")).collect();
    assert_eq!(values(&summary["read_committed"], 0), b, "{what}: read_committed: {summary}");
    assert_eq!(values(&summary["read_uncommitted"], 0), [zombie, b].concat(), "{what}: read_uncommitted: {summary}");
    // zombie 0-4, ABORT 5 (written at B's InitProducerId), b 6-10, COMMIT 11.
    assert_eq!(summary["read_uncommitted"]["high"]["0"], 12, "{what}: {summary}");
    assert_eq!(summary["read_committed"]["eof"]["0"], 12, "{what}: nothing open: {summary}");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn confluent_fenced_zombie_commits_nothing() {
    fenced_zombie(false);
}

#[test]
fn confluent_fenced_zombie_cannot_produce() {
    fenced_zombie(true);
}

/// Three producers' transactions overlapping in every partition, committed and aborted in
/// turn: read_committed gets exactly the committed transactions' records, in the log's order
/// (Kafka's `collectAbortedTransactions` with overlapping aborted transactions of several
/// producers, the consumer's aborted-producer set), and its end is the high watermark.
fn interleaved_on(kind: ReadPathKind) {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(kind, ServerModel::Threaded, |_| {});
    let bootstrap = broker.local_addr().to_string();
    let what = format!("interleaved transactions, read path {kind}");
    let parts = PARTITIONS.to_string();
    let summary = run_script_args(&python, "txn_confluent.py", &["interleaved", &bootstrap, "ck-inter", &parts], &what);
    let committed: Vec<&str> = summary["committed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    // Producer n commits in round r when n + r is even: 6 of the 12 transactions.
    assert_eq!(committed.len(), 6, "{what}: {summary}");
    for p in 0..PARTITIONS {
        let all = values(&summary["read_uncommitted"], p);
        assert_eq!(all.len(), 3 * 4 * 3, "{what}: partition {p}: every record of every producer");
        let is_committed = |v: &String| committed.iter().any(|c| v.starts_with(&format!("{c}-")));
        let want: Vec<String> = all.iter().filter(|v| is_committed(v)).cloned().collect();
        assert_eq!(values(&summary["read_committed"], p), want, "{what}: partition {p}");
        let key = p.to_string();
        // 36 records and 12 markers.
        assert_eq!(summary["read_uncommitted"]["high"][&key], 48, "{what}: {summary}");
        assert_eq!(summary["read_committed"]["eof"][&key], 48, "{what}: read_committed's end: {summary}");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn confluent_interleaved_transactions_on_sendfile() {
    interleaved_on(ReadPathKind::Sendfile);
}

#[test]
fn confluent_interleaved_transactions_on_copy() {
    interleaved_on(ReadPathKind::Copy);
}

/// A transaction left open past its `transaction.timeout.ms` (2 s) is aborted by the broker (the
/// check runs every 500 ms): the producer's later commit fails with a fatal fenced error and
/// read_committed never sees its records.
#[test]
fn confluent_transaction_timeout_aborts_it() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::Sendfile, ServerModel::Threaded, |c| {
        c.transaction_abort_timed_out_transaction_cleanup_interval_ms = 500;
    });
    let bootstrap = broker.local_addr().to_string();
    let what = "transaction timeout";
    let summary = run_script_args(&python, "txn_confluent.py", &["timeout", &bootstrap, "ck-timeout"], what);
    eprintln!("{what}: {summary}");
    let commit = &summary["commit"];
    assert!(!commit.is_null(), "{what}: the timed-out transaction committed: {summary}");
    let error = commit["error"].as_str().unwrap();
    assert!(
        ["_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"].contains(&error),
        "{what}: the commit failed with {error}: {summary}"
    );
    let late: Vec<String> = (0..5).map(|i| format!("late-{i}")).collect();
    assert_eq!(values(&summary["read_committed"], 0), Vec::<String>::new(), "{what}: {summary}");
    assert_eq!(values(&summary["read_uncommitted"], 0), late, "{what}: {summary}");
    // late 0-4, ABORT 5.
    assert_eq!(summary["read_committed"]["eof"]["0"], 6, "{what}: read_committed's end: {summary}");
    assert_eq!(summary["read_uncommitted"]["high"]["0"], 6, "{what}: {summary}");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Consume-transform-produce: the group's offsets sent with `send_offsets_to_transaction` are
/// committed with the transaction (and read back by a new consumer and the admin client), an
/// aborted round moves neither them nor what read_committed sees of the output.
#[test]
fn confluent_consume_transform_produce_commits_offsets_with_the_transaction() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::Sendfile, ServerModel::Threaded, |_| {});
    let bootstrap = broker.local_addr().to_string();
    let what = "consume-transform-produce";
    let args = ["ctp", &bootstrap, "ctp-in", "ctp-out", "ctp-group", &PARTITIONS.to_string()];
    let summary = run_script_args(&python, "txn_confluent.py", &args, what);
    eprintln!("{what}: {summary}");
    let per_partition = |n: i64| json!({"0": n, "1": n, "2": n});
    let rounds = summary["rounds"].as_array().unwrap();
    // (consumed, positions sent, committed offsets afterwards) of rounds 1 (commit), 2 (abort), 3 (commit).
    let want = [(30, 10, 10), (9, 13, 10), (9, 13, 13)];
    for (round, (consumed, sent, committed)) in rounds.iter().zip(want) {
        assert_eq!(round["consumed"], consumed, "{what}: {round}");
        assert_eq!(round["positions"], per_partition(sent), "{what}: {round}");
        assert_eq!(round["in_ends"], per_partition(sent), "{what}: {round}");
        assert_eq!(round["committed"]["consumer"], per_partition(committed), "{what}: committed(): {round}");
        assert_eq!(round["committed"]["admin"], per_partition(committed), "{what}: admin: {round}");
    }
    assert_eq!(rounds.len(), 3, "{summary}");
    for p in 0..PARTITIONS {
        let want: Vec<String> = (0..30)
            .filter(|i| i % PARTITIONS == p)
            .map(|i| format!("IN-{i}|round1"))
            .chain((30..39).filter(|i| i % PARTITIONS == p).map(|i| format!("IN-{i}|round3")))
            .collect();
        let got: Vec<String> =
            summary["out"][p.to_string()].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        assert_eq!(got, want, "{what}: read_committed output, partition {p}");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// kafka-python's transactional producer (rounds 0, 1, 3 committed, 2 aborted; 4 records per
/// partition each) read by kafka-python consumers under both isolation levels; its
/// `send_offsets_to_transaction` (a bare group id) commits offsets with a committed transaction
/// only.
#[test]
fn kafka_python_transactions_read_committed() {
    let Some(python) = python_with("kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::Sendfile, ServerModel::Threaded, |_| {});
    let bootstrap = broker.local_addr().to_string();
    let what = "kafka-python transactions";
    let summary =
        run_script_args(&python, "txn_kafka_python.py", &[&bootstrap, "kp-txn", &PARTITIONS.to_string()], what);
    for p in 0..PARTITIONS {
        assert_eq!(values(&summary["read_committed"], p), round_values([0, 1, 3], p, 4), "{what}: partition {p}");
        assert_eq!(values(&summary["read_uncommitted"], p), round_values(0..4, p, 4), "{what}: partition {p}");
        // 16 records and 4 markers, nothing open: the last stable offset is the high watermark.
        assert_eq!(summary["read_committed"]["end"][p.to_string()], 20, "{what}: {summary}");
        assert_eq!(summary["read_uncommitted"]["end"][p.to_string()], 20, "{what}: {summary}");
    }
    // send_offsets_to_transaction: 3 committed with its transaction, 7 aborted with its one.
    let three = json!({"0": 3, "1": 3, "2": 3});
    assert_eq!(summary["offsets"]["commit"], three, "{what}: offsets after the commit: {summary}");
    assert_eq!(summary["offsets"]["abort"], three, "{what}: offsets after the abort: {summary}");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

// ---------------------------------------------------------------------------------------------
// SIGKILL of `fetchbench serve` around a transaction
// ---------------------------------------------------------------------------------------------

/// `(base offset, transactional, control)` of every batch in `topic`-`partition`'s first segment.
fn stored_batches(log_dir: &Path, topic: &str, partition: usize) -> Vec<(i64, bool, bool)> {
    let path = log_dir.join(format!("{topic}-{partition}")).join("00000000000000000000.log");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Ok(batch) = RecordBatch::parse(rest) else { break };
        let a = batch.attributes();
        out.push((batch.base_offset(), a.is_transactional(), a.is_control()));
        rest = &rest[batch.as_bytes().len()..];
    }
    out
}

/// `(offset, "COMMIT" or "ABORT", producer epoch)` of every transaction marker in
/// `topic`-`partition`'s first segment.
fn stored_markers(log_dir: &Path, topic: &str, partition: usize) -> Vec<(i64, &'static str, i16)> {
    let path = log_dir.join(format!("{topic}-{partition}")).join("00000000000000000000.log");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while let Ok(batch) = RecordBatch::parse(rest) {
        let len = batch.as_bytes().len();
        if batch.attributes().is_control() {
            let kind = match txn_index::end_marker(batch.as_bytes()) {
                Ok(Some(true)) => "ABORT",
                Ok(Some(false)) => "COMMIT",
                other => panic!("{}: control batch at {}: {other:?}", path.display(), batch.base_offset()),
            };
            out.push((batch.base_offset(), kind, batch.header().producer_epoch));
        }
        rest = &rest[len..];
    }
    out
}

fn serve_args(log_dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = crate::serve_process::serve_args(log_dir);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn start_serve(work: &Path, name: &str, log_dir: &Path, extra: &[&str]) -> ServeProcess {
    let args = serve_args(log_dir, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServeProcess::start(work, name, &args)
}

fn sigkill(broker: &mut ServeProcess) {
    broker.signal(Signal::SIGKILL);
    let status = broker.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(Signal::SIGKILL as i32));
}

/// The coordinator's abort timer runs every 500 ms after the restart (Kafka's default: 10 s).
const SHORT_ABORT_CHECK: [&str; 2] = ["-X", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500"];

/// A transaction with delivered records is open when the broker is killed; after the restart the
/// coordinator (which loaded it from `__transaction_state`) aborts it after its 3 s timeout:
/// read_committed's end passes it with none of its records, the committed transaction before
/// it stays whole, and the same transactional id commits again afterwards.
#[test]
fn serve_sigkill_mid_transaction_aborts_it_after_restart() {
    sigkill_mid_transaction(false);
}

/// As [`serve_sigkill_mid_transaction_aborts_it_after_restart`], both transactions also sending
/// the group's offsets (`send_offsets_to_transaction`): after the restart the committed one's
/// offsets (2) are the group's, the open one's (5) are dropped by the timeout abort, and a
/// require_stable OffsetFetch (librdkafka's committed() under read_committed) answers instead of
/// waiting on them.
#[test]
fn serve_sigkill_mid_transaction_with_offsets_keeps_only_committed_offsets() {
    sigkill_mid_transaction(true);
}

fn sigkill_mid_transaction(offsets: bool) {
    let Some(python) = python_with("confluent_kafka") else { return };
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("logs");
    let topic = if offsets { "crash-offsets" } else { "crash-open" };
    let (open_mode, read_mode) = if offsets { ("offsets-open", "read-offsets") } else { ("open", "read") };
    let parts = PARTITIONS.to_string();
    // Kafka's default abort check (every 10 s): the open transaction outlives this broker.
    let mut first = start_serve(work.path(), "first", &log_dir, &[]);
    let bootstrap = first.addr.to_string();
    let summary = run_script_args(&python, "txn_crash.py", &[open_mode, &bootstrap, topic, &parts], "open transaction");
    assert_eq!(summary["open"], true);
    sigkill(&mut first);
    for p in 0..PARTITIONS {
        // committed 0-4, COMMIT 5, open 6-10 (one or more batches), no marker after them.
        let batches = stored_batches(&log_dir, topic, p);
        let controls: Vec<i64> = batches.iter().filter(|b| b.2).map(|b| b.0).collect();
        assert_eq!(controls, [5], "{topic}-{p}: the committed transaction's marker only: {batches:?}");
        assert!(batches.iter().all(|b| b.1), "{topic}-{p}: transactional batches only: {batches:?}");
        assert!(batches.last().is_some_and(|b| !b.2 && b.0 >= 6), "{topic}-{p}: open at the kill: {batches:?}");
    }

    let mut second = start_serve(work.path(), "second", &log_dir, &SHORT_ABORT_CHECK);
    let bootstrap = second.addr.to_string();
    let summary =
        run_script_args(&python, "txn_crash.py", &[read_mode, &bootstrap, topic, &parts], "after the restart");
    eprintln!("after the restart: {summary}");
    if offsets {
        assert_eq!(summary["group_offsets"], json!({"0": 2, "1": 2, "2": 2}), "the group's offsets: {summary}");
    }
    for p in 0..PARTITIONS {
        let committed: Vec<String> = (0..5).map(|i| format!("committed-p{p}-{i}")).collect();
        let open: Vec<String> = (0..5).map(|i| format!("open-p{p}-{i}")).collect();
        let key = p.to_string();
        assert_eq!(
            values(&summary["read_uncommitted"], p),
            [committed.clone(), open].concat(),
            "{topic}-{p}: {summary}"
        );
        assert_eq!(values(&summary["read_committed"], p), committed, "{topic}-{p}: read_committed: {summary}");
        // 0-4, COMMIT 5, 6-10, ABORT 11: the end of read_committed is past the abort marker.
        assert_eq!(summary["read_committed"]["eof"][&key], 12, "{topic}-{p}: read_committed's end: {summary}");
        assert_eq!(summary["read_committed"]["high"][&key], 12, "{topic}-{p}: {summary}");
        let after = [committed, vec![format!("after-p{p}")]].concat();
        assert_eq!(values(&summary["after"], p), after, "{topic}-{p}: a new transaction: {summary}");
        assert_eq!(summary["after"]["eof"][&key], 14, "{topic}-{p}: {summary}");
    }
    second.signal(Signal::SIGTERM);
    assert_eq!(second.wait().code(), Some(0), "{}", second.stderr());
    for p in 0..PARTITIONS {
        // The markers and their producer epochs: the commit at epoch 0; the timeout abort after
        // the restart fenced the producer first (Kafka's `abortTimedOutTransactions`:
        // `prepareFenceProducerEpoch`, so the ABORT marker carries epoch 1); the new instance's
        // InitProducerId bumped it again (the COMMIT of `after-p{p}` at epoch 2).
        assert_eq!(
            stored_markers(&log_dir, topic, p),
            [(5, "COMMIT", 0), (11, "ABORT", 1), (13, "COMMIT", 2)],
            "{topic}-{p}: (offset, marker, producer epoch)"
        );
        let dir = log_dir.join(format!("{topic}-{p}"));
        let index = txn_index::read(&dir.join("00000000000000000000.txnindex")).unwrap().unwrap_or_default();
        let ranges: Vec<(i64, i64)> = index.iter().map(|e| (e.first_offset, e.last_offset)).collect();
        assert_eq!(ranges, [(6, 11)], "{topic}-{p}: the aborted transaction in the .txnindex: {index:?}");
    }
}

/// The broker is killed as soon as EndTxn(commit) was answered: after the restart every record
/// of the transaction is visible to read_committed, on every partition, and nothing stays open.
#[test]
fn serve_sigkill_after_commit_keeps_the_whole_transaction() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("logs");
    let topic = "crash-commit";
    let parts = PARTITIONS.to_string();
    let mut first = start_serve(work.path(), "first", &log_dir, &[]);
    let bootstrap = first.addr.to_string();
    let summary = run_script_args(&python, "txn_crash.py", &["commit", &bootstrap, topic, &parts], "commit");
    assert_eq!(summary["committed"], true);
    sigkill(&mut first);
    let second = start_serve(work.path(), "second", &log_dir, &SHORT_ABORT_CHECK);
    let bootstrap = second.addr.to_string();
    let summary = run_script_args(&python, "txn_crash.py", &["read", &bootstrap, topic, &parts], "after the restart");
    eprintln!("after the restart: {summary}");
    for p in 0..PARTITIONS {
        let committed: Vec<String> = (0..5).map(|i| format!("commit-p{p}-{i}")).collect();
        let key = p.to_string();
        assert_eq!(values(&summary["read_committed"], p), committed, "{topic}-{p}: read_committed: {summary}");
        assert_eq!(values(&summary["read_uncommitted"], p), committed, "{topic}-{p}: {summary}");
        assert_eq!(
            summary["read_committed"]["eof"][&key], summary["read_committed"]["high"][&key],
            "{topic}-{p}: nothing open after the restart: {summary}"
        );
        let after = [committed, vec![format!("after-p{p}")]].concat();
        assert_eq!(values(&summary["after"], p), after, "{topic}-{p}: a new transaction: {summary}");
    }
    let text = second.stderr();
    assert!(!text.contains("panicked"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Over the wire: what the broker refuses of a transactional producer
// ---------------------------------------------------------------------------------------------

const INVALID_TXN_STATE: i16 = 48;
const INVALID_RECORD: i16 = 87;

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

/// A batch of `values` from `pid`/`epoch` at sequence `seq`, transactional when `txn`.
fn producer_batch(pid: i64, epoch: i16, seq: i32, txn: bool, values: &[&str]) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, seq).transactional(txn);
    for v in values {
        b.append(now, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// Produce v9, acks=-1, with `transactional_id`, of `records` to `topic`-`partition`: the
/// partition's (error code, base offset).
fn produce_to(
    client: &mut Client,
    transactional_id: Option<&str>,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(txn_id))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
            PartitionProduceData::default().with_index(partition).with_records(Some(Bytes::from(records))),
        ])]);
    let ResponseKind::Produce(r) = client.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A Fetch v11 of `topic`-`partition` from 0 with `isolation_level`: (error, high watermark,
/// last stable offset, aborted transactions' first offsets, the data records' values).
fn fetch_isolated(
    client: &mut Client,
    topic: &str,
    partition: i32,
    isolation: i8,
) -> (i16, i64, i64, Vec<i64>, Vec<String>) {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            FetchPartition::default().with_partition(partition).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
        ])]);
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 11, RequestKind::Fetch(req)) else { panic!() };
    let p = &r.responses[0].partitions[0];
    let aborted = p.aborted_transactions.iter().flatten().map(|a| a.first_offset).collect();
    let mut out = Vec::new();
    let mut bytes: &[u8] = p.records.as_deref().unwrap_or(&[]);
    while let Ok(batch) = RecordBatch::parse(bytes) {
        if !batch.attributes().is_control() {
            for rec in batch.records().unwrap().to_vec().unwrap() {
                out.push(String::from_utf8(rec.value.unwrap().to_vec()).unwrap());
            }
        }
        bytes = &bytes[batch.as_bytes().len()..];
    }
    (p.error_code, p.high_watermark, p.last_stable_offset, aborted, out)
}

/// A transactional producer's batch for a partition it did not add to its transaction is refused
/// with INVALID_TXN_STATE (Kafka's `ReplicaManager.appendRecordsWithTransactionVerification`
/// asks the coordinator, whose `handleVerifyPartitionsInTransaction` answers INVALID_TXN_STATE
/// for a partition not in the transaction) and nothing of it is appended; once added, the same
/// batch is accepted. A control batch from a client is refused with INVALID_RECORD (Kafka's
/// `LogValidator`: "clients are not allowed to write control records"), whether or not its
/// producer has a transaction: a client-written COMMIT does not make the records readable
/// under read_committed, only EndTxn does.
#[test]
fn transactional_produce_outside_the_transaction_and_client_markers_are_refused() {
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::Sendfile, ServerModel::Threaded, |c| {
        c.num_partitions = 2;
    });
    let mut c = Client::connect(broker.local_addr());
    let topic = "raw-txn";
    let tid = "raw-txn-id";
    assert_eq!(metadata(&mut c, topic, 12).topics[0].partitions.len(), 2);

    let req = FindCoordinatorRequest::default().with_key_type(1).with_key(StrBytes::from_static_str("raw-txn-id"));
    let ResponseKind::FindCoordinator(r) = c.call(ApiKey::FindCoordinator, 3, RequestKind::FindCoordinator(req)) else {
        panic!()
    };
    assert_eq!(r.error_code, 0, "FindCoordinator(TRANSACTION): {r:?}");
    let req =
        InitProducerIdRequest::default().with_transactional_id(Some(txn_id(tid))).with_transaction_timeout_ms(60_000);
    let ResponseKind::InitProducerId(r) = c.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req)) else {
        panic!()
    };
    assert_eq!(r.error_code, 0, "InitProducerId({tid}): {r:?}");
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    assert!(pid >= 0, "{r:?}");

    // Partition 0 before AddPartitionsToTxn: refused, nothing appended.
    let data = producer_batch(pid, epoch, 0, true, &["x0", "x1"]);
    assert_eq!(produce_to(&mut c, Some(tid), topic, 0, data.clone()).0, INVALID_TXN_STATE, "partition not added");
    let (err, hw, _, _, values) = fetch_isolated(&mut c, topic, 0, 0);
    assert_eq!((err, hw, values.len()), (0, 0, 0), "nothing appended by the refused batch");

    // Partition 0 added: the same batch (sequence 0) is accepted; partition 1 is still refused.
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(tid))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![0])]);
    let ResponseKind::AddPartitionsToTxn(r) =
        c.call(ApiKey::AddPartitionsToTxn, 3, RequestKind::AddPartitionsToTxn(req))
    else {
        panic!()
    };
    let codes: Vec<i16> = r
        .results_by_topic_v3_and_below
        .iter()
        .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
        .collect();
    assert_eq!(codes, [0], "AddPartitionsToTxn: {r:?}");
    assert_eq!(produce_to(&mut c, Some(tid), topic, 0, data), (0, 0), "partition 0 is in the transaction");
    let other = producer_batch(pid, epoch, 0, true, &["y0"]);
    assert_eq!(produce_to(&mut c, Some(tid), topic, 1, other).0, INVALID_TXN_STATE, "partition 1 not added");
    assert_eq!(fetch_isolated(&mut c, topic, 1, 0).1, 0, "partition 1: nothing appended");

    // A COMMIT marker written by the client: refused; the transaction stays open (the last
    // stable offset 0, read_committed sees nothing).
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let marker = marker_batch(0, pid, epoch, false, 0, now);
    assert_eq!(produce_to(&mut c, Some(tid), topic, 0, marker).0, INVALID_RECORD, "a client's COMMIT marker");
    let (err, hw, lso, _, values) = fetch_isolated(&mut c, topic, 0, 1);
    assert_eq!((err, hw, lso), (0, 2, 0), "read_committed with the transaction open");
    assert!(values.is_empty(), "read_committed before EndTxn: {values:?}");
    // A control batch without a producer, from a plain (non-transactional) produce: refused too.
    let mut b = BatchBuilder::new(0, Compression::None).control(true);
    b.append(now, Some(&[0, 0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    assert_eq!(produce_to(&mut c, None, topic, 1, b.build().unwrap()).0, INVALID_RECORD, "a plain control batch");
    assert_eq!(fetch_isolated(&mut c, topic, 1, 0).1, 0, "partition 1: nothing appended");

    // EndTxn(commit): the coordinator's marker makes the records readable.
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(tid))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(true);
    let ResponseKind::EndTxn(r) = c.call(ApiKey::EndTxn, 3, RequestKind::EndTxn(req)) else { panic!() };
    assert_eq!(r.error_code, 0, "EndTxn: {r:?}");
    let (err, hw, lso, aborted, values) = fetch_isolated(&mut c, topic, 0, 1);
    assert_eq!((err, hw, lso), (0, 3, 3), "after EndTxn(commit): data 0-1, COMMIT 2");
    assert!(aborted.is_empty(), "{aborted:?}");
    assert_eq!(values, ["x0", "x1"]);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
