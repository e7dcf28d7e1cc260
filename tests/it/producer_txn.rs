//! fetchbench's transactional producer (`client::producer`, Kafka's `TransactionManager`)
//! against the embedded broker's transaction coordinator: committed records are seen by a
//! `read_committed` consumer, aborted ones are not (but are in the log, as `read_uncommitted`
//! shows); a second producer with the same `transactional.id` fences the first (its next call
//! fails with `PRODUCER_FENCED`, its open transaction is aborted); offsets sent to a
//! transaction are visible to the group only after the commit; the state machine refuses
//! calls out of order; a record the broker refuses makes the transaction abortable (commit
//! fails, abort works); `fetchbench produce --transaction-records N --abort-every K` writes
//! committed and aborted transactions.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::client::consumer::{Consumer, ConsumerRecord, TopicPartition};
use fetchbench::client::producer::{ConsumerGroupMetadata, Producer, ProducerConfig, ProducerError, TransactionState};
use fetchbench::read_path::ReadPathKind;

use crate::consumer_positions::config;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A broker with `num.partitions` = `partitions` (small `__transaction_state` and
/// `__consumer_offsets` topics keep start-up quick).
fn start(partitions: u32) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Copy);
    let props = [("num.partitions", partitions.to_string())];
    config.apply_props(&props.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()).unwrap();
    (tmp, Broker::start(config).unwrap())
}

fn txn_producer(broker: &BrokerHandle, transactional_id: &str) -> Producer {
    let bootstrap = broker.local_addr().to_string();
    let pairs = [
        ("bootstrap.servers", bootstrap.as_str()),
        ("transactional.id", transactional_id),
        ("linger.ms", "1"),
        ("max.block.ms", "20000"),
    ];
    Producer::new(ProducerConfig::from_pairs(&pairs).unwrap()).unwrap()
}

fn send(p: &Producer, topic: &str, partition: Option<i32>, value: &str) -> Result<(), ProducerError> {
    p.send(topic, partition, Some(value.as_bytes()), Some(value.as_bytes()), &[], None).map(|_| ())
}

/// Every record value of `topic` (partitions `0..partitions`) with `isolation`, read from the
/// beginning to the end offset the consumer sees (the last stable offset under read_committed).
fn read_all(broker: &BrokerHandle, topic: &str, partitions: i32, isolation: &str) -> Vec<String> {
    let mut consumer = Consumer::new(config(
        broker.local_addr(),
        &[("isolation.level", isolation), ("auto.offset.reset", "earliest")],
    ))
    .unwrap();
    let tps: Vec<TopicPartition> = (0..partitions).map(|p| (topic.to_string(), p)).collect();
    consumer.assign(&tps).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut out: Vec<ConsumerRecord> = Vec::new();
    let mut quiet = 0;
    // Until every partition's position reached its end offset and two polls brought nothing.
    loop {
        assert!(Instant::now() < deadline, "reading {topic} ({isolation}) took over {TIMEOUT:?}: {out:?}");
        let got = consumer.poll(Duration::from_millis(200)).unwrap();
        quiet = if got.is_empty() { quiet + 1 } else { 0 };
        out.extend(got);
        let at_end = tps.iter().all(|tp| {
            let end = consumer.end_offset(tp);
            end.is_some() && consumer.position(tp).ok() >= end
        });
        if at_end && quiet >= 2 {
            break;
        }
    }
    let mut values: Vec<String> =
        out.iter().map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()).collect();
    values.sort();
    values
}

fn sorted(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = values.into_iter().collect();
    v.sort();
    v
}

#[test]
fn committed_records_are_read_committed_and_aborted_ones_are_not() {
    let (_tmp, broker) = start(2);
    let p = txn_producer(&broker, "tx-commit-abort");
    assert_eq!(p.transaction_state(), Some(TransactionState::Uninitialized));
    p.init_transactions(TIMEOUT).unwrap();
    assert_eq!(p.transaction_state(), Some(TransactionState::Ready));
    let (producer_id, epoch) = p.producer_id();
    assert!(producer_id >= 0 && epoch >= 0, "{producer_id} {epoch}");

    // 1: committed, over both partitions.
    p.begin_transaction().unwrap();
    for i in 0..10 {
        send(&p, "txa", Some(i % 2), &format!("committed-{i}")).unwrap();
    }
    p.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(p.transaction_state(), Some(TransactionState::Ready));
    // 2: aborted after its records were written (flushed), so the log holds them.
    p.begin_transaction().unwrap();
    for i in 0..6 {
        send(&p, "txa", Some(i % 2), &format!("aborted-{i}")).unwrap();
    }
    p.flush().unwrap();
    p.abort_transaction(TIMEOUT).unwrap();
    // 3: aborted before its records were sent: they are discarded (TransactionAborted) or
    // written and aborted; never committed.
    p.begin_transaction().unwrap();
    let handle = p.send("txa", Some(0), None, Some(b"aborted-unsent"), &[], None).unwrap();
    p.abort_transaction(TIMEOUT).unwrap();
    assert!(handle.try_result().is_some(), "the abort completed the record's delivery");
    // 4: committed again.
    p.begin_transaction().unwrap();
    send(&p, "txa", Some(1), "committed-last").unwrap();
    p.commit_transaction(TIMEOUT).unwrap();
    p.close().unwrap();

    let committed = sorted((0..10).map(|i| format!("committed-{i}")).chain(["committed-last".to_string()]));
    assert_eq!(read_all(&broker, "txa", 2, "read_committed"), committed);
    let uncommitted = read_all(&broker, "txa", 2, "read_uncommitted");
    for i in 0..6 {
        assert!(uncommitted.contains(&format!("aborted-{i}")), "aborted-{i} was written: {uncommitted:?}");
    }
    assert_eq!(uncommitted.iter().filter(|v| v.starts_with("committed")).count(), 11, "{uncommitted:?}");
    broker.shutdown().unwrap();
}

#[test]
fn a_transaction_that_sent_nothing_commits_and_calls_out_of_order_are_refused() {
    let (_tmp, broker) = start(1);
    let p = txn_producer(&broker, "tx-states");
    // Before init_transactions: no send, no begin.
    let e = send(&p, "txs", Some(0), "x").unwrap_err();
    assert!(
        matches!(
            e,
            ProducerError::IllegalTransactionState { operation: "send", state: TransactionState::Uninitialized, .. }
        ),
        "{e:?}"
    );
    assert!(matches!(p.begin_transaction(), Err(ProducerError::IllegalTransactionState { .. })));
    p.init_transactions(TIMEOUT).unwrap();
    assert!(
        matches!(p.init_transactions(TIMEOUT), Err(ProducerError::IllegalTransactionState { .. })),
        "init_transactions twice"
    );
    // Outside a transaction: no send, no commit.
    let e = send(&p, "txs", Some(0), "x").unwrap_err();
    assert!(matches!(e, ProducerError::IllegalTransactionState { state: TransactionState::Ready, .. }), "{e:?}");
    assert!(matches!(p.commit_transaction(TIMEOUT), Err(ProducerError::IllegalTransactionState { .. })));
    // An empty transaction commits (no EndTxn needed) and another begins.
    p.begin_transaction().unwrap();
    p.commit_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, "txs", Some(0), "one").unwrap();
    p.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(read_all(&broker, "txs", 1, "read_committed"), vec!["one".to_string()]);

    // A non-transactional producer has no transactional API.
    let plain = Producer::new(ProducerConfig::new(&broker.local_addr().to_string())).unwrap();
    assert_eq!(plain.transaction_state(), None);
    let e = plain.begin_transaction().unwrap_err();
    assert!(matches!(e, ProducerError::IllegalTransactionState { transactional: false, .. }), "{e:?}");
    broker.shutdown().unwrap();
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let (_tmp, broker) = start(1);
    let first = txn_producer(&broker, "tx-zombie");
    first.init_transactions(TIMEOUT).unwrap();
    let (id1, epoch1) = first.producer_id();
    first.begin_transaction().unwrap();
    send(&first, "txf", Some(0), "zombie-0").unwrap();
    first.flush().unwrap();

    // The new instance bumps the epoch and aborts the open transaction.
    let second = txn_producer(&broker, "tx-zombie");
    second.init_transactions(TIMEOUT).unwrap();
    let (id2, epoch2) = second.producer_id();
    assert_eq!(id2, id1, "the same producer id");
    assert!(epoch2 > epoch1, "the epoch was bumped: {epoch1} -> {epoch2}");

    // The zombie's next call fails with PRODUCER_FENCED, and so does every later one.
    let _ = send(&first, "txf", Some(0), "zombie-1");
    let e = first.commit_transaction(TIMEOUT).unwrap_err();
    let fenced = |e: &ProducerError| matches!(e, ProducerError::ProducerFenced { .. });
    assert!(fenced(&e), "commit of the fenced producer: {e:?}");
    assert_eq!(first.transaction_state(), Some(TransactionState::FatalError));
    let e = first.begin_transaction().unwrap_err();
    assert!(fenced(&e), "later calls fail with the fatal error: {e:?}");
    let e = first.abort_transaction(TIMEOUT).unwrap_err();
    assert!(fenced(&e), "{e:?}");
    assert!(e.to_string().contains("PRODUCER_FENCED") || e.to_string().contains("INVALID_PRODUCER_EPOCH"), "{e}");

    // The new instance works; the zombie's records are never committed.
    second.begin_transaction().unwrap();
    send(&second, "txf", Some(0), "new-0").unwrap();
    second.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(read_all(&broker, "txf", 1, "read_committed"), vec!["new-0".to_string()]);
    drop(first);
    broker.shutdown().unwrap();
}

/// The committed offset of `tp` for `group`: `Ok(None)` when there is none, `Err(code)` when
/// OffsetFetch refuses (UNSTABLE_OFFSET_COMMIT while a transactional commit is pending).
fn committed_offset(broker: &BrokerHandle, group: &str, tp: &TopicPartition) -> Result<Option<i64>, String> {
    let mut c =
        Consumer::new(config(broker.local_addr(), &[("group.id", group), ("enable.auto.commit", "false")])).unwrap();
    let r = c.committed(std::slice::from_ref(tp)).map(|m| m.get(tp).copied().flatten()).map_err(|e| e.to_string());
    drop(c);
    r
}

#[test]
fn offsets_sent_to_a_transaction_are_visible_only_after_the_commit() {
    let (_tmp, broker) = start(1);
    let p = txn_producer(&broker, "tx-offsets");
    p.init_transactions(TIMEOUT).unwrap();
    let tp: TopicPartition = ("txo-in".into(), 0);
    // The input topic exists (the group commits offsets of it).
    crate::consumer_positions::produce(broker.local_addr(), "txo-in", 0, &["a", "b", "c"]);

    // Aborted: the offsets never show.
    p.begin_transaction().unwrap();
    send(&p, "txo-out", Some(0), "out-aborted").unwrap();
    let offsets: BTreeMap<TopicPartition, i64> = [(tp.clone(), 2)].into_iter().collect();
    p.send_offsets_to_transaction(&offsets, &ConsumerGroupMetadata::new("g-txn")).unwrap();
    p.abort_transaction(TIMEOUT).unwrap();
    assert_eq!(committed_offset(&broker, "g-txn", &tp), Ok(None), "aborted offsets are dropped");

    // Committed: pending until the commit, then visible.
    p.begin_transaction().unwrap();
    send(&p, "txo-out", Some(0), "out-committed").unwrap();
    let offsets: BTreeMap<TopicPartition, i64> = [(tp.clone(), 3)].into_iter().collect();
    p.send_offsets_to_transaction(&offsets, &ConsumerGroupMetadata::new("g-txn")).unwrap();
    let before = committed_offset(&broker, "g-txn", &tp);
    assert_ne!(before, Ok(Some(3)), "the offset is visible before the commit");
    p.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(committed_offset(&broker, "g-txn", &tp), Ok(Some(3)));
    assert_eq!(read_all(&broker, "txo-out", 1, "read_committed"), vec!["out-committed".to_string()]);
    broker.shutdown().unwrap();
}

fn run(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = String::new();
    let mut err = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let ok = child.wait().unwrap().success();
    (ok, out, err)
}

#[test]
fn produce_cli_writes_committed_and_aborted_transactions() {
    let (_tmp, broker) = start(2);
    let bootstrap = broker.local_addr().to_string();
    // 10 transactions of 4 records; every 3rd (3, 6, 9) aborted: 7 committed = 28 records.
    let (ok, out, err) = run(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        "txcli",
        "--num-records",
        "40",
        "--record-size",
        "16",
        "--key-distribution",
        "sequential",
        "--transaction-records",
        "4",
        "--abort-every",
        "3",
        "-X",
        "transactional.id=cli-tx",
    ]);
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("7 transactions committed, 3 aborted (12 records)"), "{out}");
    assert_eq!(read_all(&broker, "txcli", 2, "read_committed").len(), 28);
    assert_eq!(read_all(&broker, "txcli", 2, "read_uncommitted").len(), 40);

    // The options need a transactional.id, and a transactional.id needs them.
    let (ok, _, err) = run(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        "txcli",
        "--num-records",
        "4",
        "--transaction-records",
        "2",
    ]);
    assert!(!ok && err.contains("transactional.id"), "{err}");
    let (ok, _, err) = run(&[
        "produce",
        "--bootstrap",
        &bootstrap,
        "--topic",
        "txcli",
        "--num-records",
        "4",
        "-X",
        "transactional.id=x",
    ]);
    assert!(!ok && err.contains("--transaction-records"), "{err}");
    broker.shutdown().unwrap();
}

#[test]
fn a_failed_record_makes_the_transaction_abortable_and_abort_recovers() {
    let (_tmp, broker) = start(1);
    let bootstrap = broker.local_addr().to_string();
    // A record above the broker's message.max.bytes (1 MiB) passes the producer's own
    // max.request.size check and is refused by the broker (a non-retriable error).
    let pairs = [
        ("bootstrap.servers", bootstrap.as_str()),
        ("transactional.id", "tx-abortable"),
        ("max.request.size", "4194304"),
        ("linger.ms", "1"),
    ];
    let p = Producer::new(ProducerConfig::from_pairs(&pairs).unwrap()).unwrap();
    p.init_transactions(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    send(&p, "txab", Some(0), "before-the-failure").unwrap();
    let big = vec![b'x'; 2 << 20];
    let handle = p.send("txab", Some(0), None, Some(&big), &[], None).unwrap();
    assert!(handle.wait().is_err(), "the broker refuses a 2 MiB record");
    let e = p.commit_transaction(TIMEOUT).unwrap_err();
    assert!(matches!(e, ProducerError::TransactionAbortable { operation: "commit_transaction", .. }), "{e:?}");
    assert_eq!(p.transaction_state(), Some(TransactionState::AbortableError));
    assert!(matches!(p.begin_transaction(), Err(ProducerError::TransactionAbortable { .. })));
    p.abort_transaction(TIMEOUT).unwrap();
    assert_eq!(p.transaction_state(), Some(TransactionState::Ready));
    p.begin_transaction().unwrap();
    send(&p, "txab", Some(0), "after-the-abort").unwrap();
    p.commit_transaction(TIMEOUT).unwrap();
    assert_eq!(read_all(&broker, "txab", 1, "read_committed"), vec!["after-the-abort".to_string()]);
    broker.shutdown().unwrap();
}
