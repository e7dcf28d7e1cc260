//! fetchbench's own consumer (`client::consumer`): record-set decoding against real Fetch v10
//! responses of an Apache Kafka broker (the kafka-go fixtures of the corpus: magic 1 and 2,
//! gzip), and the consumer against the embedded broker: positions and commits across a
//! restart, `auto.offset.reset`, seek / pause / resume, a group shared with librdkafka
//! consumers, records from kafka-python's producer, cooperative rebalancing and
//! `max.poll.interval.ms`.
//!
//! Brokers start on 127.0.0.1:0 with a temporary log directory, 6 partitions per auto-created
//! topic and `group.initial.rebalance.delay.ms=0`. Real clients missing: the tests that need them
//! fail in CI and skip with a notice elsewhere ([`crate::python_clients::python_with`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::broker::BrokerHandle;
use fetchbench::client::consumer::fetcher::parse_records;
use fetchbench::client::consumer::{
    Consumer, ConsumerConfig, ConsumerError, ConsumerRecord, RebalanceListener, TopicPartition,
};
use fetchbench::log::batch::{BatchBuilder, Compression};
use kafka_protocol::messages::{FetchResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use crate::common;
use crate::python_clients::python_with;

/// The longest a behaviour may take before a test fails.
const WAIT: Duration = Duration::from_secs(20);

const GREEK: [&str; 24] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi",
    "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega",
];

fn decode_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// The partitions of a corpus Fetch v10 response frame: (topic, partition, record set).
fn corpus_fetch(path: &Path) -> Vec<(String, i32, Bytes)> {
    let frame = decode_hex(&std::fs::read_to_string(path).unwrap());
    let mut body = Bytes::from(frame).slice(4..);
    ResponseHeader::decode(&mut body, 0).unwrap();
    let r = FetchResponse::decode(&mut body, 10).unwrap();
    r.responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| (t.topic.to_string(), p.partition_index, p.records.clone().unwrap_or_default()))
        })
        .collect()
}

/// The value the kafka-go fixtures hold for the key of Greek letter `i`.
fn fixture_value(key: &[u8]) -> String {
    let key = std::str::from_utf8(key).unwrap();
    let i = GREEK.iter().position(|g| *g == key).unwrap_or_else(|| panic!("key {key}"));
    let filler = String::from_utf8(vec![b'a' + i as u8; 10]).unwrap();
    format!(r#"{{"count":0,"filler":"{filler}"}}"#)
}

#[test]
fn corpus_fetch_v10_responses_decode_to_every_record() {
    let Some(corpus) = common::corpus() else { return };
    let files = common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".hex");
    assert_eq!(files.len(), 11);
    let mut total = 0;
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let partitions = corpus_fetch(&path);
        assert!(!partitions.is_empty(), "{name}");
        for (topic, partition, bytes) in partitions {
            let topic: Arc<str> = topic.into();
            let all = parse_records(&topic, partition, 0, bytes.clone(), true, None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!all.partial_tail, "{name}");
            let n = all.records.len() as i64;
            assert!(n > 0, "{name}");
            assert_eq!(all.records.iter().map(|r| r.offset).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>(), "{name}");
            assert_eq!(all.next_offset, n, "{name}: next fetch offset");
            for r in &all.records {
                assert_eq!(&*r.topic, &*topic);
                assert_eq!(r.partition, partition);
                let key = r.key.as_deref().unwrap_or_else(|| panic!("{name}: offset {} has no key", r.offset));
                assert_eq!(r.value.as_deref(), Some(fixture_value(key).as_bytes()), "{name}: offset {}", r.offset);
                assert!(r.timestamp > 1_600_000_000_000, "{name}");
            }
            total += n;
            // From every offset: exactly the records from there (records below the position in
            // the first batch, wrapper or not, are skipped).
            for from in 0..n {
                let part = parse_records(&topic, partition, from, bytes.clone(), true, None).unwrap();
                assert_eq!(
                    part.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
                    (from..n).collect::<Vec<_>>(),
                    "{name}: from {from}"
                );
                assert_eq!(part.records, all.records[from as usize..], "{name}: from {from}");
            }
            // Cut inside the last entry: it is dropped, the position stops before it.
            let cut = parse_records(&topic, partition, 0, bytes.slice(..bytes.len() - 3), true, None).unwrap();
            assert!(cut.partial_tail, "{name}");
            assert!(cut.next_offset < n && cut.next_offset == cut.records.len() as i64, "{name}: {}", cut.next_offset);
            assert_eq!(cut.records, all.records[..cut.records.len()], "{name}");
            // A flipped bit in the last byte of the first entry: check.crcs catches it.
            let size = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
            let mut damaged = bytes.to_vec();
            damaged[12 + size - 1] ^= 0x01;
            match parse_records(&topic, partition, 0, Bytes::from(damaged), true, None) {
                Err(ConsumerError::Corrupt { offset: 0, partition: p, .. }) => assert_eq!(p, partition),
                other => panic!("{name}: a damaged first entry gave {other:?}"),
            }
        }
    }
    assert!(total > 50, "only {total} records in the corpus responses");
}

// ---------------------------------------------------------------------------------------------
// Against the embedded broker.

fn start_in(dir: &Path) -> BrokerHandle {
    crate::common::start_group_broker(dir, "127.0.0.1:0".parse().unwrap(), |c| c.num_partitions = 6)
}

/// Produces `values` (key `k<i>`) to `topic`-`partition` as one batch; returns the base offset.
fn produce(broker: &BrokerHandle, topic: &str, partition: i32, values: &[&str], compression: Compression) -> i64 {
    crate::consumer_positions::produce_compressed(broker.local_addr(), topic, partition, values, compression)
}

fn config(broker: &BrokerHandle, pairs: &[(&str, &str)]) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(broker.local_addr().to_string());
    c.set("fetch.max.wait.ms", "100").unwrap();
    c.set("heartbeat.interval.ms", "300").unwrap();
    c.set("session.timeout.ms", "6000").unwrap();
    for (k, v) in pairs {
        c.set(k, v).unwrap();
    }
    c
}

/// Polls until `n` records arrived (panics after [`WAIT`]).
pub(crate) fn poll_n(consumer: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let deadline = Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} records after {WAIT:?}: {out:?}", out.len());
        out.extend(consumer.poll(Duration::from_millis(200)).unwrap());
    }
    out
}

pub(crate) fn values(records: &[ConsumerRecord]) -> Vec<String> {
    records.iter().map(|r| String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap()).collect()
}

#[test]
fn produce_4_consume_2_commit_close_restart_resumes_at_offset_2() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "restart", 0, &["a", "b", "c", "d"], Compression::Lz4);
    let tp: TopicPartition = ("restart".into(), 0);
    let settings = [
        ("group.id", "g-restart"),
        ("auto.offset.reset", "earliest"),
        ("enable.auto.commit", "false"),
        ("max.poll.records", "2"),
    ];
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["restart"]).unwrap();
    let first = poll_n(&mut c, 2);
    assert_eq!(first.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1], "max.poll.records=2");
    assert_eq!(values(&first), ["a", "b"]);
    assert_eq!(c.position(&tp).unwrap(), 2);
    c.commit_sync().unwrap();
    assert_eq!(c.committed(std::slice::from_ref(&tp)).unwrap()[&tp], Some(2));
    c.close().unwrap();
    broker.shutdown().unwrap();

    let broker = start_in(tmp.path());
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["restart"]).unwrap();
    let again = poll_n(&mut c, 2);
    assert_eq!(again[0].offset, 2, "the first record after the restart");
    assert_eq!(values(&again), ["c", "d"]);
    c.close().unwrap();
}

#[test]
fn new_group_with_latest_gets_every_record_produced_after_its_first_poll() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "latest", 0, &["old-1", "old-2"], Compression::None);
    let mut c = Consumer::new(config(&broker, &[("group.id", "g-latest"), ("auto.offset.reset", "latest")])).unwrap();
    c.subscribe(&["latest"]).unwrap();
    assert!(c.poll(Duration::from_millis(300)).unwrap().is_empty(), "nothing before the first poll is delivered");
    assert_eq!(c.assignment().len(), 6, "all 6 partitions after the first poll");
    assert_eq!(c.position(&("latest".into(), 0)).unwrap(), 2);
    produce(&broker, "latest", 0, &["new-1", "new-2"], Compression::Gzip);
    produce(&broker, "latest", 3, &["new-3"], Compression::Zstd);
    let got = poll_n(&mut c, 3);
    let mut v = values(&got);
    v.sort();
    assert_eq!(v, ["new-1", "new-2", "new-3"]);
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty());
    c.close().unwrap();
}

#[test]
fn seek_pause_resume_and_positions_in_assign_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let ten: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
    produce(&broker, "seek", 0, &ten[..5], Compression::Snappy);
    produce(&broker, "seek", 0, &ten[5..], Compression::None);
    produce(&broker, "seek", 1, &["p1-a"], Compression::None);
    let (p0, p1): (TopicPartition, TopicPartition) = (("seek".into(), 0), ("seek".into(), 1));
    let mut c = Consumer::new(config(&broker, &[("auto.offset.reset", "earliest")])).unwrap();
    c.assign(&[p0.clone(), p1.clone()]).unwrap();
    let got = poll_n(&mut c, 11);
    assert!(c.fetch_in_flight(), "the next fetch is sent before the records are handed out");
    let p0_offsets: Vec<i64> = got.iter().filter(|r| r.partition == 0).map(|r| r.offset).collect();
    assert_eq!(p0_offsets, (0..10).collect::<Vec<_>>());
    assert_eq!((c.position(&p0).unwrap(), c.position(&p1).unwrap()), (10, 1));

    c.seek(&p0, 7).unwrap();
    assert_eq!(c.position(&p0).unwrap(), 7);
    let got = poll_n(&mut c, 3);
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [7, 8, 9], "from the sought offset, mid-batch");
    assert_eq!(values(&got), ["v7", "v8", "v9"]);

    c.seek_to_beginning(std::slice::from_ref(&p0)).unwrap();
    assert_eq!(c.position(&p0).unwrap(), 0);
    c.seek_to_end(std::slice::from_ref(&p0)).unwrap();
    assert_eq!(c.position(&p0).unwrap(), 10);

    c.pause(std::slice::from_ref(&p0)).unwrap();
    assert_eq!(c.paused(), vec![p0.clone()]);
    produce(&broker, "seek", 0, &["paused-0"], Compression::None);
    produce(&broker, "seek", 1, &["p1-b"], Compression::None);
    let got = poll_n(&mut c, 1);
    assert_eq!(values(&got), ["p1-b"], "the paused partition is not delivered");
    let deadline = Instant::now() + Duration::from_millis(600);
    while Instant::now() < deadline {
        assert!(c.poll(Duration::from_millis(100)).unwrap().is_empty(), "records of a paused partition");
    }
    c.resume(std::slice::from_ref(&p0)).unwrap();
    let got = poll_n(&mut c, 1);
    assert_eq!((got[0].partition, got[0].offset, values(&got)[0].as_str()), (0, 10, "paused-0"));
    assert!(c.seek(&("seek".into(), 5), 0).is_err(), "seek on an unassigned partition");
    c.close().unwrap();
}

#[test]
fn auto_offset_reset_none_names_the_partitions_and_earliest_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "reset", 2, &["x", "y", "z"], Compression::None);
    let tp: TopicPartition = ("reset".into(), 2);
    let mut c = Consumer::new(config(&broker, &[("auto.offset.reset", "none")])).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    let e = c.poll(Duration::from_millis(100)).unwrap_err();
    assert!(matches!(&e, ConsumerError::NoOffset { partitions } if partitions == std::slice::from_ref(&tp)), "{e:?}");
    assert!(e.to_string().contains("reset-2"), "{e}");
    // Out of range with none: an error naming the partition and offset, until a seek.
    c.seek(&tp, 100).unwrap();
    let deadline = Instant::now() + WAIT;
    let e = loop {
        assert!(Instant::now() < deadline);
        match c.poll(Duration::from_millis(100)) {
            Ok(r) => assert!(r.is_empty()),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&e, ConsumerError::OffsetOutOfRange { partitions } if partitions == &[(tp.clone(), 100)]),
        "{e:?}"
    );
    assert!(e.to_string().contains("reset-2 at offset 100"), "{e}");
    c.seek(&tp, 1).unwrap();
    assert_eq!(values(&poll_n(&mut c, 2)), ["y", "z"]);

    // earliest: an out-of-range position is reset to the log start.
    let mut c = Consumer::new(config(&broker, &[("auto.offset.reset", "earliest")])).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek(&tp, 100).unwrap();
    let got = poll_n(&mut c, 3);
    assert_eq!(got.iter().map(|r| r.offset).collect::<Vec<_>>(), [0, 1, 2]);
}

/// A rebalance listener that records its calls.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Call>>>);

/// A listener call: (`revoked` | `assigned` | `lost`, partitions).
type Call = (&'static str, Vec<TopicPartition>);

impl RebalanceListener for Recorder {
    fn on_partitions_revoked(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(("revoked", p.to_vec()));
    }
    fn on_partitions_assigned(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(("assigned", p.to_vec()));
    }
    fn on_partitions_lost(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(("lost", p.to_vec()));
    }
}

/// One of our consumers polling in a thread; shares its assignment and records.
struct Polling {
    stop: Arc<AtomicBool>,
    assignment: Arc<Mutex<Vec<TopicPartition>>>,
    records: Arc<Mutex<Vec<(String, i32, i64)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Polling {
    fn start(config: ConsumerConfig, topic: &str, listener: Option<Recorder>) -> Polling {
        let stop = Arc::new(AtomicBool::new(false));
        let assignment = Arc::new(Mutex::new(Vec::new()));
        let records = Arc::new(Mutex::new(Vec::new()));
        let (s, a, r, topic) = (Arc::clone(&stop), Arc::clone(&assignment), Arc::clone(&records), topic.to_string());
        let thread = std::thread::spawn(move || {
            let mut c = Consumer::new(config).unwrap();
            if let Some(l) = listener {
                c.set_rebalance_listener(Box::new(l));
            }
            c.subscribe(&[topic.as_str()]).unwrap();
            while !s.load(Ordering::SeqCst) {
                let got = c.poll(Duration::from_millis(100)).unwrap();
                r.lock().unwrap().extend(got.iter().map(|x| (x.topic.to_string(), x.partition, x.offset)));
                *a.lock().unwrap() = c.assignment();
            }
            c.close().unwrap();
        });
        Polling { stop, assignment, records, thread: Some(thread) }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("consumer thread panicked");
        }
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A `tests/python/group_member.py` process (confluent-kafka), its JSON events collected.
struct RdMember {
    child: Child,
    events: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl RdMember {
    fn spawn(python: &Path, broker: &BrokerHandle, group: &str, topic: &str) -> RdMember {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/group_member.py");
        let settings = serde_json::json!({"partition.assignment.strategy": "range"});
        let mut child = Command::new(python)
            .arg(&script)
            .args([&broker.local_addr().to_string(), group, topic, &settings.to_string()])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().unwrap(), Arc::clone(&events));
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        RdMember { child, events }
    }

    /// The partitions of its last `assign` event (eager: the whole assignment).
    fn assignment(&self) -> Vec<TopicPartition> {
        let events = self.events.lock().unwrap();
        let mut current = Vec::new();
        for e in events.iter() {
            match e["ev"].as_str() {
                Some("assign") => {
                    current = e["parts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_i64().unwrap() as i32))
                        .collect()
                }
                Some("revoke") | Some("lost") => current.clear(),
                _ => {}
            }
        }
        current
    }

    fn records(&self) -> Vec<(String, i32, i64)> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e["ev"] == "msgs")
            .flat_map(|e| {
                e["recs"].as_array().unwrap().iter().map(|r| {
                    (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap() as i32, r[2].as_i64().unwrap())
                })
            })
            .collect()
    }
}

impl Drop for RdMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn our_consumers_and_librdkafka_share_a_group() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let topic = "shared";
    for p in 0..6 {
        let vals: Vec<String> = (0..5).map(|i| format!("p{p}-{i}")).collect();
        produce(&broker, topic, p, &vals.iter().map(String::as_str).collect::<Vec<_>>(), Compression::Gzip);
    }
    let group = "g-mixed";
    let ours_config = || {
        config(
            &broker,
            &[("group.id", group), ("auto.offset.reset", "earliest"), ("partition.assignment.strategy", "range")],
        )
    };
    let mut ours = vec![Polling::start(ours_config(), topic, None)];
    let theirs1 = RdMember::spawn(&python, &broker, group, topic);
    ours.push(Polling::start(ours_config(), topic, None));
    let theirs2 = RdMember::spawn(&python, &broker, group, topic);
    let theirs = [&theirs1, &theirs2];

    let all: BTreeSet<TopicPartition> = (0..6).map(|p| (topic.to_string(), p)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (assignments, records) = loop {
        let assignments: Vec<Vec<TopicPartition>> = ours
            .iter()
            .map(|o| o.assignment.lock().unwrap().clone())
            .chain(theirs.iter().map(|t| t.assignment()))
            .collect();
        let records: BTreeSet<(String, i32, i64)> = ours
            .iter()
            .flat_map(|o| o.records.lock().unwrap().clone())
            .chain(theirs.iter().flat_map(|t| t.records()))
            .collect();
        let flat: Vec<&TopicPartition> = assignments.iter().flatten().collect();
        let distinct: BTreeSet<TopicPartition> = flat.iter().map(|tp| (*tp).clone()).collect();
        if assignments.iter().all(|a| !a.is_empty()) && flat.len() == 6 && distinct == all && records.len() == 30 {
            break (assignments, records);
        }
        assert!(
            Instant::now() < deadline,
            "no stable shared assignment: {assignments:?}, {} records; events: {:?}",
            records.len(),
            theirs.iter().map(|t| t.events.lock().unwrap().clone()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("assignments (ours, ours, librdkafka, librdkafka): {assignments:?}");
    let expected: BTreeSet<(String, i32, i64)> =
        (0..6).flat_map(|p| (0..5).map(move |o| (topic.to_string(), p, o))).collect();
    assert_eq!(records, expected, "every record consumed by some member");
    for o in &mut ours {
        o.stop();
    }
}

#[test]
fn kafka_python_producer_to_our_consumer() {
    let Some(python) = python_with("kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let script = r#"
import sys
from kafka import KafkaProducer
p = KafkaProducer(bootstrap_servers=sys.argv[1], compression_type="gzip", linger_ms=5)
for i in range(50):
    p.send("kp", key=b"key-%d" % i, value=b"value-%d" % i, partition=i % 2, headers=[("h", b"%d" % i)], timestamp_ms=1700000000000 + i)
p.flush(10)
p.close(10)
"#;
    let out = Command::new(&python).args(["-c", script, &broker.local_addr().to_string()]).output().unwrap();
    assert!(out.status.success(), "kafka-python producer failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut c = Consumer::new(config(&broker, &[("auto.offset.reset", "earliest")])).unwrap();
    c.assign(&[("kp".into(), 0), ("kp".into(), 1)]).unwrap();
    let got = poll_n(&mut c, 50);
    let mut by_key: BTreeMap<i64, &ConsumerRecord> = BTreeMap::new();
    for r in &got {
        let key = String::from_utf8(r.key.as_deref().unwrap().to_vec()).unwrap();
        let i: i64 = key.strip_prefix("key-").unwrap().parse().unwrap();
        assert_eq!(r.partition as i64, i % 2);
        assert_eq!(r.offset, i / 2, "offsets per partition in send order");
        assert_eq!(r.value.as_deref(), Some(format!("value-{i}").as_bytes()));
        assert_eq!(r.timestamp, 1_700_000_000_000 + i);
        assert_eq!(r.headers.len(), 1);
        assert_eq!((&r.headers[0].key[..], r.headers[0].value.as_deref()), (&b"h"[..], Some(i.to_string().as_bytes())));
        assert!(by_key.insert(i, r).is_none(), "record {i} twice");
    }
    assert_eq!(by_key.len(), 50);
}

#[test]
fn cooperative_rebalance_revokes_only_what_moves_then_assigns_it() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "coop", 0, &["x"], Compression::None);
    let cfg = || {
        config(
            &broker,
            &[
                ("group.id", "g-coop"),
                ("auto.offset.reset", "earliest"),
                ("partition.assignment.strategy", "cooperative-sticky"),
            ],
        )
    };
    let (l1, l2) = (Recorder::default(), Recorder::default());
    let mut a = Polling::start(cfg(), "coop", Some(l1.clone()));
    let deadline = Instant::now() + WAIT;
    while a.assignment.lock().unwrap().len() != 6 {
        assert!(Instant::now() < deadline, "the first member never got all 6 partitions");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut b = Polling::start(cfg(), "coop", Some(l2.clone()));
    let deadline = Instant::now() + WAIT;
    loop {
        let (x, y) = (a.assignment.lock().unwrap().clone(), b.assignment.lock().unwrap().clone());
        let union: BTreeSet<_> = x.iter().chain(&y).cloned().collect();
        if x.len() == 3 && y.len() == 3 && union.len() == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no 3/3 split: {x:?} {y:?}; {:?} {:?}",
            l1.0.lock().unwrap(),
            l2.0.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let calls = l1.0.lock().unwrap().clone();
    let revoked: Vec<&Vec<TopicPartition>> = calls.iter().filter(|(k, _)| *k == "revoked").map(|(_, p)| p).collect();
    assert_eq!(revoked.len(), 1, "one revocation of the moving partitions only: {calls:?}");
    assert_eq!(revoked[0].len(), 3, "{calls:?}");
    assert!(!calls.iter().any(|(k, _)| *k == "lost"), "{calls:?}");
    let new_calls = l2.0.lock().unwrap().clone();
    let assigned: BTreeSet<TopicPartition> =
        new_calls.iter().filter(|(k, _)| *k == "assigned").flat_map(|(_, p)| p.clone()).collect();
    assert_eq!(assigned, revoked[0].iter().cloned().collect(), "the new member gets what was revoked");
    b.stop();
    a.stop();
}

#[test]
fn missing_max_poll_interval_leaves_the_group_and_loses_the_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "slow", 0, &["x"], Compression::None);
    let rec = Recorder::default();
    let mut slow = Consumer::new(config(
        &broker,
        &[("group.id", "g-slow"), ("auto.offset.reset", "earliest"), ("max.poll.interval.ms", "1000")],
    ))
    .unwrap();
    slow.set_rebalance_listener(Box::new(rec.clone()));
    slow.subscribe(&["slow"]).unwrap();
    poll_n(&mut slow, 1);
    assert_eq!(slow.assignment().len(), 6);
    let mut other = Polling::start(
        config(
            &broker,
            &[("group.id", "g-slow"), ("auto.offset.reset", "earliest"), ("partition.assignment.strategy", "range")],
        ),
        "slow",
        None,
    );
    // The slow member does not poll: after max.poll.interval.ms it leaves, and the other member
    // gets all partitions (the slow one never rejoined to share them).
    let deadline = Instant::now() + WAIT;
    while other.assignment.lock().unwrap().len() != 6 {
        assert!(Instant::now() < deadline, "the other member never got all partitions");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The next poll reports the partitions lost, then rejoins.
    let _ = slow.poll(Duration::from_millis(100)).unwrap();
    let calls = rec.0.lock().unwrap().clone();
    assert!(calls.iter().any(|(k, p)| *k == "lost" && p.len() == 6), "{calls:?}");
    other.stop();
    slow.close().unwrap();
}

#[test]
fn regex_subscription_picks_up_matching_topics() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "metrics-a", 0, &["a"], Compression::None);
    produce(&broker, "metrics-b", 1, &["b"], Compression::None);
    produce(&broker, "other", 0, &["o"], Compression::None);
    let mut c = Consumer::new(config(&broker, &[("group.id", "g-re"), ("auto.offset.reset", "earliest")])).unwrap();
    c.subscribe_pattern("metrics-.*").unwrap();
    let got = poll_n(&mut c, 2);
    let mut v = values(&got);
    v.sort();
    assert_eq!(v, ["a", "b"]);
    let topics: BTreeSet<String> = c.assignment().into_iter().map(|(t, _)| t).collect();
    assert_eq!(topics, ["metrics-a".to_string(), "metrics-b".to_string()].into());
    c.close().unwrap();
}

/// A record set with a compaction gap, an emptied batch, an aborted transaction with its
/// control batch, and a committed record after it.
pub(crate) fn gappy_record_set() -> Vec<u8> {
    let mut set = Vec::new();
    let mut a = BatchBuilder::new(0, Compression::None).last_offset_delta(4);
    a.append_at(0, 1, Some(b"k0"), Some(b"v0"), &[]).unwrap();
    a.append_at(3, 1, Some(b"k3"), Some(b"v3"), &[]).unwrap();
    set.extend(a.build().unwrap());
    set.extend(BatchBuilder::new(5, Compression::None).last_offset_delta(2).build().unwrap());
    let mut t = BatchBuilder::new(8, Compression::Zstd).producer(7, 0, 0).transactional(true);
    t.append(1, Some(b"k8"), Some(b"aborted-8"), &[]);
    t.append(1, Some(b"k9"), Some(b"aborted-9"), &[]);
    set.extend(t.build().unwrap());
    let mut marker = BatchBuilder::new(10, Compression::None).producer(7, 0, 2).transactional(true).control(true);
    marker.append(1, Some(&[0, 0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    set.extend(marker.build().unwrap());
    let mut e = BatchBuilder::new(11, Compression::Gzip);
    e.append(1, Some(b"k11"), Some(b"v11"), &[]);
    set.extend(e.build().unwrap());
    set
}

#[test]
fn gaps_empty_and_control_batches_move_the_position_and_aborted_records_are_dropped() {
    use kafka_protocol::messages::fetch_response::AbortedTransaction;
    use kafka_protocol::messages::ProducerId;
    let bytes = Bytes::from(gappy_record_set());
    let topic: Arc<str> = "t".into();
    let offsets = |from: i64, aborted: Option<&[AbortedTransaction]>| {
        let p = parse_records(&topic, 0, from, bytes.clone(), true, aborted).unwrap();
        (p.records.iter().map(|r| r.offset).collect::<Vec<_>>(), p.next_offset)
    };
    assert_eq!(offsets(0, None), (vec![0, 3, 8, 9, 11], 12), "read_uncommitted");
    assert_eq!(offsets(1, None), (vec![3, 8, 9, 11], 12), "inside a compaction gap");
    assert_eq!(offsets(6, None), (vec![8, 9, 11], 12), "inside an emptied batch");
    let aborted = [AbortedTransaction::default().with_producer_id(ProducerId(7)).with_first_offset(8)];
    assert_eq!(offsets(0, Some(&aborted)), (vec![0, 3, 11], 12), "read_committed");
    // Only control and emptied batches left: no records, but the position moves past them.
    let tail = parse_records(&topic, 0, 10, bytes.slice(..bytes.len() - 5), true, None).unwrap();
    assert!(tail.records.is_empty() && tail.partial_tail);
    assert_eq!(tail.next_offset, 11, "past the control batch; the cut last batch is fetched again");
}

#[test]
fn close_commits_the_positions_with_auto_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "auto", 1, &["a", "b", "c"], Compression::None);
    let settings = [("group.id", "g-auto"), ("auto.offset.reset", "earliest"), ("max.poll.records", "2")];
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["auto"]).unwrap();
    assert_eq!(values(&poll_n(&mut c, 2)), ["a", "b"]);
    c.close().unwrap();
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    let tp: TopicPartition = ("auto".into(), 1);
    assert_eq!(c.committed(std::slice::from_ref(&tp)).unwrap()[&tp], Some(2), "close() committed the position");
    c.subscribe(&["auto"]).unwrap();
    assert_eq!(values(&poll_n(&mut c, 1)), ["c"]);
}

#[test]
fn consume_cli_prints_records_and_exits_at_end() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "cli", 0, &["zero", "one"], Compression::Gzip);
    produce(&broker, "cli", 4, &["four"], Compression::None);
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .args(["consume", "--bootstrap", &broker.local_addr().to_string(), "--topic", "cli"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let mut lines: Vec<String> =
        run(&["--from-beginning", "--exit-at-end", "--format", "%p:%o:%k:%s\\n"]).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(lines, ["0:0:k0:zero", "0:1:k1:one", "4:0:k0:four"]);
    assert_eq!(run(&["--partition", "0", "--offset", "1", "--exit-at-end"]), "one\n");
    let counted =
        run(&["--group", "g-cli", "--from-beginning", "--exit-at-end", "--count", "-X", "fetch.max.wait.ms=50"]);
    assert!(counted.starts_with("3 records, 17 bytes"), "{counted}");
}

#[test]
fn static_member_rejoins_with_its_partitions_without_leaving() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "static", 0, &["x"], Compression::None);
    let settings = [("group.id", "g-static"), ("group.instance.id", "instance-1"), ("auto.offset.reset", "earliest")];
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["static"]).unwrap();
    poll_n(&mut c, 1);
    let (member, assignment) = (c.member_id(), c.assignment());
    assert_eq!(assignment.len(), 6);
    c.close().unwrap(); // a static member sends no LeaveGroup: it stays in the group
    let report = broker.test_support().coordinator().describe_group("g-static");
    assert_eq!(report.members.len(), 1, "the static member is still in the group: {report:?}");
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["static"]).unwrap();
    assert!(c.poll(Duration::from_millis(200)).unwrap().is_empty(), "the committed position is kept");
    assert_eq!(c.assignment(), assignment);
    assert_ne!(c.member_id(), member, "a new member id for the same instance (KIP-345)");
    c.close().unwrap();
}

#[test]
fn commit_async_and_explicit_offsets_are_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    produce(&broker, "commits", 0, &["a", "b", "c"], Compression::None);
    let settings = [("group.id", "g-commits"), ("auto.offset.reset", "earliest"), ("enable.auto.commit", "false")];
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["commits"]).unwrap();
    poll_n(&mut c, 3);
    let (p0, p5): (TopicPartition, TopicPartition) = (("commits".into(), 0), ("commits".into(), 5));
    c.commit_async().unwrap();
    // committed() reads the asynchronous commit's answer first (answers come in order).
    let committed = c.committed(&[p0.clone(), p5.clone()]).unwrap();
    assert_eq!((committed[&p0], committed[&p5]), (Some(3), Some(0)), "positions of every assigned partition");
    c.commit_offsets(&BTreeMap::from([(p0.clone(), 1)]), true).unwrap();
    assert_eq!(c.committed(std::slice::from_ref(&p0)).unwrap()[&p0], Some(1));
    c.close().unwrap();
    let mut c = Consumer::new(config(&broker, &settings)).unwrap();
    c.subscribe(&["commits"]).unwrap();
    assert_eq!(values(&poll_n(&mut c, 2)), ["b", "c"], "from the explicitly committed offset");
    c.close().unwrap();
}
