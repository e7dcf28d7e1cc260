//! fetchbench's consumer (`client::consumer`) keeps its positions and commits right where the
//! broker or the application moves under it: after a broker restart on the same port (assigned
//! and in a group: Kafka's `NetworkClient` reconnects for metadata and the coordinator), across
//! partitions under `max.poll.records` (a commit stores last returned + 1, Kafka's
//! `FetchCollector`), with a seek while a Fetch is in flight (its stale answer dropped), with
//! `poll(Duration::ZERO)`, and through a cooperative revocation with records of the revoked
//! partitions buffered (each record delivered once, Kafka's `SubscriptionState`).
//!
//! Each test starts its own broker (3 partitions per auto-created topic): in-process, or
//! `fetchbench serve` as a child process where a restart must close every connection. The
//! helpers that address a broker by its socket address ([`produce`], [`config`], [`start_in`])
//! are shared with `consume_cli.rs` and `producer.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::broker::BrokerHandle;
use fetchbench::client::consumer::{Consumer, ConsumerConfig, TopicPartition};
use fetchbench::client::KafkaConnection;
use fetchbench::log::batch::{BatchBuilder, Compression};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, MetadataRequest, ProduceRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::consumer::{poll_n, values};

/// How long a test waits for records or a state.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A broker for consumer groups on `addr` (3 partitions per auto-created topic).
fn start_at(dir: &Path, addr: SocketAddr) -> BrokerHandle {
    crate::common::start_group_broker(dir, addr, |c| c.num_partitions = 3)
}

/// [`start_at`] on a free port of 127.0.0.1.
pub(crate) fn start_in(dir: &Path) -> BrokerHandle {
    start_at(dir, "127.0.0.1:0".parse().unwrap())
}

/// Produces `values` to `topic`-`partition` as one batch (the topic auto-created); returns the
/// base offset.
pub(crate) fn produce(broker_addr: SocketAddr, topic: &str, partition: i32, values: &[&str]) -> i64 {
    produce_compressed(broker_addr, topic, partition, values, Compression::None)
}

/// [`produce`] with the batch compressed with `compression`.
pub(crate) fn produce_compressed(
    broker_addr: SocketAddr,
    topic: &str,
    partition: i32,
    values: &[&str],
    compression: Compression,
) -> i64 {
    let mut conn = KafkaConnection::connect(broker_addr, "consumer-positions-test", Duration::from_secs(10)).unwrap();
    let md = MetadataRequest::default().with_allow_auto_topic_creation(true).with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(topic.into())))),
    ]));
    conn.call(ApiKey::Metadata, 9, RequestKind::Metadata(md)).unwrap();
    let mut b = BatchBuilder::new(0, compression);
    for (i, v) in values.iter().enumerate() {
        b.append(1_700_000_000_000 + i as i64, Some(format!("k{i}").as_bytes()), Some(v.as_bytes()), &[]);
    }
    let req =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default(
        )
        .with_name(TopicName(StrBytes::from_string(topic.into())))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(Bytes::from(b.build().unwrap())))])]);
    let ResponseKind::Produce(r) = conn.call(ApiKey::Produce, 9, RequestKind::Produce(req)).unwrap() else { panic!() };
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}-{partition}");
    p.base_offset
}

/// A consumer config for the broker at `addr` with short fetch waits and session timeouts, then
/// `pairs`.
pub(crate) fn config(addr: SocketAddr, pairs: &[(&str, &str)]) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(addr.to_string());
    c.set("fetch.max.wait.ms", "100").unwrap();
    c.set("heartbeat.interval.ms", "300").unwrap();
    c.set("session.timeout.ms", "6000").unwrap();
    c.set("request.timeout.ms", "3000").unwrap();
    for (k, v) in pairs {
        c.set(k, v).unwrap();
    }
    c
}

/// `fetchbench serve` as a child process (a restart closes every connection, as a real
/// broker's does; the embedded broker keeps old connections answering after `shutdown`).
struct Serve {
    child: Child,
}

impl Serve {
    fn start(log_dir: &Path, listen: &str) -> (Serve, SocketAddr) {
        let stderr_path = log_dir.with_extension(format!("{}.stderr", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .args(["serve", "--listen", listen, "--log-dir", &log_dir.display().to_string()])
            .args(["-X", "group.initial.rebalance.delay.ms=0", "-X", "num.partitions=3"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let serve = Serve { child };
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            if let Some(addr) = text
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.parse().ok())
            {
                return (serve, addr);
            }
            assert!(Instant::now() < deadline, "fetchbench serve did not listen:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finding: the consumer never reconnected its bootstrap connection (Metadata,
/// FindCoordinator), so after a broker restart every poll failed and returned nothing forever.
/// Kafka's `NetworkClient` reconnects to any known node (`leastLoadedNode`) for metadata.
/// Fixed: `Consumer::reconnect_bootstrap` after a connection error in `poll`.
#[test]
fn assigned_consumer_resumes_after_a_broker_restart_on_the_same_port() {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("logs");
    let (serve, addr) = Serve::start(&log_dir, "127.0.0.1:0");
    produce(addr, "restart", 0, &["a", "b"]);
    let tp: TopicPartition = ("restart".into(), 0);
    let mut c = Consumer::new(config(addr, &[("auto.offset.reset", "earliest")])).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    assert_eq!(values(&poll_n(&mut c, 2)), ["a", "b"]);
    drop(serve);
    for _ in 0..3 {
        assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    }
    let (_serve, again) = Serve::start(&log_dir, &addr.to_string());
    assert_eq!(again, addr);
    produce(addr, "restart", 0, &["c"]);
    let got = poll_n(&mut c, 1);
    assert_eq!((got[0].offset, values(&got)[0].as_str()), (2, "c"));
}

/// The same finding in a group: the coordinator is found again through the bootstrap
/// connection, the member rejoins and commits again.
#[test]
fn group_consumer_resumes_and_commits_after_a_broker_restart_on_the_same_port() {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("logs");
    let (serve, addr) = Serve::start(&log_dir, "127.0.0.1:0");
    produce(addr, "grestart", 1, &["a", "b"]);
    let tp: TopicPartition = ("grestart".into(), 1);
    let settings = [("group.id", "g-restart"), ("auto.offset.reset", "earliest"), ("enable.auto.commit", "false")];
    let mut c = Consumer::new(config(addr, &settings)).unwrap();
    c.subscribe(&["grestart"]).unwrap();
    assert_eq!(values(&poll_n(&mut c, 2)), ["a", "b"]);
    c.commit_sync().unwrap();
    drop(serve);
    for _ in 0..3 {
        assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    }
    let (_serve, _) = Serve::start(&log_dir, &addr.to_string());
    produce(addr, "grestart", 1, &["c"]);
    let got = poll_n(&mut c, 1);
    assert_eq!((got[0].offset, values(&got)[0].as_str()), (2, "c"));
    c.commit_sync().unwrap();
    assert_eq!(c.committed(std::slice::from_ref(&tp)).unwrap()[&tp], Some(3));
    c.close().unwrap();
}

/// `max.poll.records` holds across partitions, positions move only for the records handed
/// out, and a commit after a poll stores exactly last returned + 1 (Kafka's `FetchCollector`).
#[test]
fn max_poll_records_across_partitions_and_commit_stores_what_was_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    let five: Vec<String> = (0..5).map(|i| format!("v{i}")).collect();
    let five: Vec<&str> = five.iter().map(String::as_str).collect();
    for p in 0..3 {
        produce(addr, "mpr", p, &five);
    }
    let settings = [
        ("group.id", "g-mpr"),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("max.poll.records", "4"),
    ];
    let mut c = Consumer::new(config(addr, &settings)).unwrap();
    c.subscribe(&["mpr"]).unwrap();
    let mut seen: BTreeMap<i32, i64> = BTreeMap::new();
    let deadline = Instant::now() + WAIT;
    let mut total = 0;
    while total < 15 {
        assert!(Instant::now() < deadline);
        let got = c.poll(Duration::from_millis(200)).unwrap();
        assert!(got.len() <= 4, "max.poll.records=4, got {}", got.len());
        for r in &got {
            let next = seen.entry(r.partition).or_insert(0);
            assert_eq!(r.offset, *next, "in order, no gap, no duplicate");
            *next += 1;
        }
        total += got.len();
        for (&p, &next) in &seen {
            assert_eq!(c.position(&("mpr".into(), p)).unwrap(), next, "position = last returned + 1");
        }
        if !got.is_empty() {
            c.commit_sync().unwrap();
            let tps: Vec<TopicPartition> = seen.keys().map(|&p| ("mpr".to_string(), p)).collect();
            let committed = c.committed(&tps).unwrap();
            for (tp, next) in tps.iter().zip(seen.values()) {
                assert_eq!(committed[tp], Some(*next));
            }
        }
    }
    c.close().unwrap();
    broker.shutdown().unwrap();
}

/// A seek while the partition's next Fetch is in flight: the answer to that Fetch is stale and
/// must not be returned (Kafka's `FetchCollector` drops a completed fetch whose offset is not the
/// position).
#[test]
fn seek_with_a_fetch_in_flight_discards_the_stale_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    let ten: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
    produce(addr, "seekfly", 0, &ten[..5]);
    produce(addr, "seekfly", 0, &ten[5..]);
    let tp: TopicPartition = ("seekfly".into(), 0);
    let settings = [("auto.offset.reset", "earliest"), ("max.poll.records", "2"), ("max.partition.fetch.bytes", "1")];
    let mut c = Consumer::new(config(addr, &settings)).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let got = poll_n(&mut c, 2);
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1]);
    c.seek(&tp, 8).unwrap();
    let got = poll_n(&mut c, 2);
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [8, 9], "stale records after a seek");
    c.seek(&tp, 3).unwrap();
    let got = poll_n(&mut c, 2);
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [3, 4], "stale records after a seek back");
    drop(c);
    broker.shutdown().unwrap();
}

/// Finding: `poll(Duration::ZERO)` never read a Fetch answer (it returned before looking at the
/// socket), so a consumer polling with a zero timeout got no record ever. Kafka's
/// `poll(Duration.ZERO)` returns what already arrived (`NetworkClient.poll(0)` reads ready
/// sockets). Fixed: `poll` checks the in-flight fetch once before giving up at its deadline.
#[test]
fn poll_with_a_zero_timeout_returns_records_that_arrived() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "zero", 0, &["a", "b", "c"]);
    let tp: TopicPartition = ("zero".into(), 0);
    let mut c = Consumer::new(config(addr, &[("auto.offset.reset", "earliest")])).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < 3 && Instant::now() < deadline {
        got.extend(c.poll(Duration::ZERO).unwrap());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(values(&got), ["a", "b", "c"], "poll(0) in a loop");
    drop(c);
    broker.shutdown().unwrap();
}

/// A cooperative rebalance while records of the revoked partitions wait in the buffer: the
/// old owner commits what it returned and returns none of the buffered records afterwards, the
/// new owner starts at the commit: every record exactly once across both members (Kafka's
/// `SubscriptionState` drops revoked partitions' fetched data).
#[test]
fn cooperative_revocation_with_buffered_records_delivers_each_record_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    let twenty: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
    let twenty: Vec<&str> = twenty.iter().map(String::as_str).collect();
    for p in 0..3 {
        produce(addr, "coop", p, &twenty);
    }
    let settings = [
        ("group.id", "g-coop"),
        ("auto.offset.reset", "earliest"),
        ("auto.commit.interval.ms", "600000"),
        ("max.poll.records", "1"),
        ("partition.assignment.strategy", "cooperative-sticky"),
    ];
    type Seen = Vec<(&'static str, i32, i64)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let mut a = Consumer::new(config(addr, &settings)).unwrap();
    a.subscribe(&["coop"]).unwrap();
    let deadline = Instant::now() + WAIT;
    while seen.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline);
        for r in a.poll(Duration::from_millis(100)).unwrap() {
            seen.lock().unwrap().push(("a", r.partition, r.offset));
        }
    }
    assert_eq!(a.assignment().len(), 3);
    let stop = Arc::new(AtomicBool::new(false));
    let b = {
        let (seen, stop) = (Arc::clone(&seen), Arc::clone(&stop));
        let cfg = config(addr, &settings);
        std::thread::spawn(move || {
            let mut b = Consumer::new(cfg).unwrap();
            b.subscribe(&["coop"]).unwrap();
            while !stop.load(Ordering::SeqCst) {
                for r in b.poll(Duration::from_millis(100)).unwrap() {
                    seen.lock().unwrap().push(("b", r.partition, r.offset));
                }
            }
            b.close().unwrap();
        })
    };
    let mut shrunk_at = None;
    while shrunk_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_secs(1)) {
        assert!(Instant::now() < deadline, "a kept all partitions");
        let assignment = a.assignment();
        for r in a.poll(Duration::from_millis(50)).unwrap() {
            let tp = (r.topic.to_string(), r.partition);
            assert!(assignment.contains(&tp) || a.assignment().contains(&tp), "a record of an unowned partition");
            seen.lock().unwrap().push(("a", r.partition, r.offset));
        }
        if shrunk_at.is_none() && a.assignment().len() < 3 {
            shrunk_at = Some(Instant::now());
        }
    }
    a.close().unwrap();
    while seen.lock().unwrap().len() < 60 && Instant::now() < deadline + WAIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    b.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    let mut keys: Vec<(i32, i64)> = seen.iter().map(|&(_, p, o)| (p, o)).collect();
    keys.sort();
    let mut dups = keys.clone();
    dups.dedup();
    let want: Vec<(i32, i64)> = (0..3).flat_map(|p| (0..20).map(move |o| (p, o))).collect();
    assert_eq!(dups, want, "every record");
    assert_eq!(keys.len(), 60, "no record twice: {seen:?}");
    broker.shutdown().unwrap();
}
