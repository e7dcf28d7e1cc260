//! The single-node broker over TCP: requests built with kafka-protocol types and
//! `frame::encode_request`, responses decoded with `frame::decode_response`. The test client
//! ([`Client`]) and the request helpers are shared with the other broker test modules.
//!
//! What every API relies on: ApiVersions, produce / fetch / list offsets per read path, KIP-74
//! fetch limits, pipelining, long polls; and the connections under stress, against Kafka's
//! behaviour (`SocketServer`, `KafkaApis`, a clean shutdown): garbage and mutated requests never
//! panic a connection, a client that never reads blocks nobody, a shutdown during concurrent
//! produce and long polls loses no acknowledged record, a produce during shutdown gets a
//! retriable error, many connections on `uring-splice`, a decompression bomb stalls no other
//! client. The partition as the unit of locking (Kafka's `Partition` lock): appends to one
//! partition go on while another's lock is held (a test seam, not a sleep), and produce and fetch
//! on 100 partitions from many threads keep every offset once, in order. Tests marked `#[ignore]`
//! demonstrate open defects (the reason names the bug); run them with
//! `cargo test --test it broker:: -- --ignored`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::log::RecordBatch;
use fetchbench::protocol::frame;
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest, RequestHeader,
    RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

pub(crate) fn start(kind: ReadPathKind) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), kind);
    let handle = Broker::start(config).unwrap();
    (tmp, handle)
}

/// A test client: one connection, sequential correlation ids.
pub(crate) struct Client {
    pub(crate) stream: TcpStream,
    pub(crate) next_correlation_id: i32,
}

impl Client {
    pub(crate) fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { stream, next_correlation_id: 1 }
    }

    pub(crate) fn send(&mut self, api_key: ApiKey, version: i16, body: RequestKind) -> i32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("fetchbench-test")));
        let bytes = frame::encode_request(&header, &body).unwrap();
        self.stream.write_all(&bytes).unwrap();
        correlation_id
    }

    pub(crate) fn receive(&mut self, api_key: ApiKey, version: i16, correlation_id: i32) -> ResponseKind {
        let payload = frame::read_frame(&mut self.stream, 64 << 20).unwrap().expect("a response");
        let decoded = frame::decode_response(payload, api_key, version).unwrap();
        assert_eq!(decoded.header.correlation_id, correlation_id);
        decoded.body
    }

    pub(crate) fn call(&mut self, api_key: ApiKey, version: i16, body: RequestKind) -> ResponseKind {
        let id = self.send(api_key, version, body);
        self.receive(api_key, version, id)
    }
}

pub(crate) fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub(crate) fn metadata(client: &mut Client, topic: &str, version: i16) -> kafka_protocol::messages::MetadataResponse {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]))
        .with_allow_auto_topic_creation(true);
    match client.call(ApiKey::Metadata, version, RequestKind::Metadata(req)) {
        ResponseKind::Metadata(r) => r,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn batch(n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for i in 0..n {
        b.append(1_700_000_000_000 + i as i64, Some(format!("k{i}").as_bytes()), Some(format!("v{i}").as_bytes()), &[]);
    }
    b.build().unwrap()
}

pub(crate) fn produce(client: &mut Client, topic: &str, records: Vec<u8>, acks: i16) -> Option<(i16, i64)> {
    let req = ProduceRequest::default().with_acks(acks).with_timeout_ms(5000).with_topic_data(vec![
        TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(Bytes::from(records)))]),
    ]);
    if acks == 0 {
        client.send(ApiKey::Produce, 9, RequestKind::Produce(req));
        return None;
    }
    match client.call(ApiKey::Produce, 9, RequestKind::Produce(req)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            Some((p.error_code, p.base_offset))
        }
        other => panic!("{other:?}"),
    }
}

/// Fetches `topic`-0 from `offset` and returns (error code, high watermark, (offset, key, value)s).
pub(crate) fn fetch(
    client: &mut Client,
    topic: &str,
    offset: i64,
    version: i16,
) -> (i16, i64, Vec<(i64, String, String)>) {
    let req = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20)]),
    ]);
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, version, RequestKind::Fetch(req)) else { panic!() };
    assert_eq!(r.session_id, 0);
    let p = &r.responses[0].partitions[0];
    let mut out = Vec::new();
    let mut bytes: &[u8] = p.records.as_deref().unwrap_or(&[]);
    while !bytes.is_empty() {
        let batch = RecordBatch::parse(bytes).unwrap();
        for rec in batch.records().unwrap().to_vec().unwrap() {
            let s = |b: Option<&[u8]>| String::from_utf8(b.unwrap().to_vec()).unwrap();
            out.push((rec.offset, s(rec.key), s(rec.value)));
        }
        bytes = &bytes[batch.as_bytes().len()..];
    }
    (p.error_code, p.high_watermark, out)
}

pub(crate) fn list_offset(client: &mut Client, topic: &str, timestamp: i64) -> (i16, i64) {
    let req = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![ListOffsetsTopic::default()
        .with_name(name(topic))
        .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(timestamp)])]);
    let ResponseKind::ListOffsets(r) = client.call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(req)) else {
        panic!()
    };
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

#[test]
fn api_versions_lists_served_apis_and_answers_unknown_versions_with_v0() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    for version in [0, 3] {
        let ResponseKind::ApiVersions(r) =
            c.call(ApiKey::ApiVersions, version, RequestKind::ApiVersions(ApiVersionsRequest::default()))
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        let fetch = r.api_keys.iter().find(|k| k.api_key == ApiKey::Fetch as i16).unwrap();
        assert_eq!((fetch.min_version, fetch.max_version), (4, 18));
        let join = r.api_keys.iter().find(|k| k.api_key == ApiKey::JoinGroup as i16).unwrap();
        assert_eq!((join.min_version, join.max_version), (0, 9));
        // Not served: absent from the list.
        assert!(!r.api_keys.iter().any(|k| k.api_key == ApiKey::AlterConfigs as i16));
    }
    // ApiVersions v99: header v2 (api key, version, correlation id, null client id, no tags).
    let mut raw = Vec::new();
    raw.extend_from_slice(&18i16.to_be_bytes());
    raw.extend_from_slice(&99i16.to_be_bytes());
    raw.extend_from_slice(&77i32.to_be_bytes());
    raw.extend_from_slice(&(-1i16).to_be_bytes());
    raw.push(0);
    let mut framed = (raw.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&raw);
    c.stream.write_all(&framed).unwrap();
    let ResponseKind::ApiVersions(r) = c.receive(ApiKey::ApiVersions, 0, 77) else { panic!() };
    assert_eq!(r.error_code, 35);
    assert_eq!(r.api_keys.len(), 1);
    assert_eq!((r.api_keys[0].api_key, r.api_keys[0].max_version), (18, 4));
    broker.shutdown().unwrap();
}

#[test]
fn metadata_auto_creates_and_keeps_the_topic_id() {
    let (tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    let r = metadata(&mut c, "orders", 12);
    assert_eq!(r.brokers.len(), 1);
    assert_eq!(r.brokers[0].port, i32::from(broker.local_addr().port()));
    let t = &r.topics[0];
    assert_eq!(t.error_code, 0);
    assert_eq!(t.partitions.len(), 1);
    assert_eq!((t.partitions[0].leader_id.0, t.partitions[0].leader_epoch), (0, 0));
    assert!(!t.topic_id.is_nil());
    let again = metadata(&mut c, "orders", 12);
    assert_eq!(again.topics[0].topic_id, t.topic_id);
    assert!(tmp.path().join("logs/orders-0/partition.metadata").is_file());
    // An old version and an illegal name.
    assert_eq!(metadata(&mut c, "orders", 1).topics[0].error_code, 0);
    assert_eq!(metadata(&mut c, "bad/name", 12).topics[0].error_code, 17);
    broker.shutdown().unwrap();
    assert!(tmp.path().join("logs/.kafka_cleanshutdown").is_file());
}

fn produce_fetch_list(kind: ReadPathKind) {
    let (_tmp, broker) = start(kind);
    let mut c = Client::connect(broker.local_addr());
    // Produce to an unknown topic: no auto-creation on produce.
    assert_eq!(produce(&mut c, "t", batch(1), 1), Some((3, -1)));
    metadata(&mut c, "t", 12);
    assert_eq!(produce(&mut c, "t", batch(3), 1), Some((0, 0)));
    assert_eq!(produce(&mut c, "t", batch(2), -1), Some((0, 3)));
    assert_eq!(produce(&mut c, "t", batch(1), 0), None);
    // A corrupt batch: CORRUPT_MESSAGE.
    let mut bad = batch(1);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(produce(&mut c, "t", bad, 1), Some((2, -1)));
    for version in [4, 11, 12] {
        let (err, hw, records) = fetch(&mut c, "t", 0, version);
        assert_eq!((err, hw), (0, 6), "v{version}");
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!((records[4].1.as_str(), records[4].2.as_str()), ("k1", "v1"));
    }
    // From the middle: whole batches from the one holding offset 4.
    let (_, _, records) = fetch(&mut c, "t", 4, 12);
    assert_eq!(records.first().map(|r| r.0), Some(3));
    // At the high watermark: nothing; past it: OFFSET_OUT_OF_RANGE.
    assert_eq!(fetch(&mut c, "t", 6, 12), (0, 6, vec![]));
    assert_eq!(fetch(&mut c, "t", 7, 12).0, 1);
    assert_eq!(list_offset(&mut c, "t", -2), (0, 0));
    assert_eq!(list_offset(&mut c, "t", -1), (0, 6));
    assert_eq!(list_offset(&mut c, "t", 1_700_000_000_001), (0, 1));
    assert_eq!(list_offset(&mut c, "t", 1_800_000_000_000), (0, -1));
    assert_eq!(list_offset(&mut c, "nope", -1).0, 3);
    broker.shutdown().unwrap();
}

#[test]
fn produce_fetch_list_offsets_copy() {
    produce_fetch_list(ReadPathKind::Copy);
}

#[test]
fn produce_fetch_list_offsets_sendfile() {
    produce_fetch_list(ReadPathKind::Sendfile);
}

#[test]
fn produce_fetch_list_offsets_mmap() {
    produce_fetch_list(ReadPathKind::Mmap);
}

#[test]
fn garbage_closes_only_that_connection() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut good = Client::connect(broker.local_addr());
    metadata(&mut good, "g", 12);
    for garbage in [
        vec![0xff, 0xff, 0xff, 0xff],                                       // negative size
        vec![0x7f, 0xff, 0xff, 0xff],                                       // over socket.request.max.bytes
        vec![0, 0, 0, 3, 1, 2, 3],                                          // shorter than a header
        vec![0, 0, 0, 10, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0xff, 0xff],        // unknown API key
        vec![0, 0, 0, 12, 0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0x7f, 0xff], // truncated Metadata body
    ] {
        let mut bad = TcpStream::connect(broker.local_addr()).unwrap();
        bad.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        bad.write_all(&garbage).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(bad.read(&mut buf).unwrap_or(0), 0, "{garbage:?}: the broker closes the connection");
        assert_eq!(metadata(&mut good, "g", 12).topics[0].error_code, 0, "{garbage:?}");
    }
    broker.shutdown().unwrap();
}

/// Fetches partitions 0 and 1 of `topic` from offset 0; returns each partition's record bytes length.
fn fetch_two(client: &mut Client, topic: &str, max_bytes: i32, partition_max_bytes: i32) -> Vec<usize> {
    let partitions = (0..2)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    let req = FetchRequest::default()
        .with_max_bytes(max_bytes)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(partitions)]);
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 11, RequestKind::Fetch(req)) else { panic!() };
    r.responses[0].partitions.iter().map(|p| p.records.as_ref().map_or(0, |b| b.len())).collect()
}

#[test]
fn kip74_only_the_first_non_empty_partition_exceeds_the_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Sendfile);
    config.apply_props(&[("num.partitions".to_string(), "2".to_string())].into_iter().collect()).unwrap();
    let broker = Broker::start(config).unwrap();
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(metadata(&mut c, "two", 12).topics[0].partitions.len(), 2);
    let one = batch(5);
    for p in 0..2 {
        let req = ProduceRequest::default().with_acks(1).with_topic_data(vec![TopicProduceData::default()
            .with_name(name("two"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(Bytes::from(one.clone())))])]);
        let ResponseKind::Produce(r) = c.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    // Response limit 10 bytes: partition 0 gets its first batch whole, partition 1 nothing.
    assert_eq!(fetch_two(&mut c, "two", 10, 1 << 20), vec![one.len(), 0]);
    // Partition limit 10 bytes: partition 0 whole, partition 1 cut at 10 bytes (inside the batch).
    assert_eq!(fetch_two(&mut c, "two", 1 << 20, 10), vec![one.len(), 10]);
    assert_eq!(fetch_two(&mut c, "two", 1 << 20, 1 << 20), vec![one.len(), one.len()]);
    broker.shutdown().unwrap();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "p", 12);
    let req = |n| {
        FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
            .with_topic(name("p"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(n)
                .with_partition_max_bytes(1 << 20)])])
    };
    let ids: Vec<i32> = (0..3)
        .flat_map(|_| {
            [
                c.send(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default())),
                c.send(ApiKey::Fetch, 12, RequestKind::Fetch(req(0))),
            ]
        })
        .collect();
    for pair in ids.chunks(2) {
        assert!(matches!(c.receive(ApiKey::ApiVersions, 3, pair[0]), ResponseKind::ApiVersions(_)));
        assert!(matches!(c.receive(ApiKey::Fetch, 12, pair[1]), ResponseKind::Fetch(_)));
    }
    broker.shutdown().unwrap();
}

#[test]
fn produce_fetch_list_offsets_probe_gated_paths() {
    for kind in [ReadPathKind::UringSplice, ReadPathKind::Direct] {
        match kind.probe() {
            Ok(()) => produce_fetch_list(kind),
            Err(e) => eprintln!("SKIP: read path {kind}: {}", e.reason),
        }
    }
}

/// Random request bodies behind valid headers, for every served API and version: each gets an
/// answer or a close, never a panic, and the broker keeps serving.
#[test]
fn random_bodies_never_panic() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut good = Client::connect(broker.local_addr());
    metadata(&mut good, "r", 12);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let served = [(0i16, 3i16, 13i16), (1, 4, 18), (2, 1, 10), (3, 0, 12), (18, 0, 4), (19, 2, 7), (23, 2, 4)];
    for &(key, min, max) in &served {
        for version in min..=max {
            for _ in 0..4 {
                let api_key = ApiKey::try_from(key).unwrap();
                let mut payload = Vec::new();
                payload.extend_from_slice(&key.to_be_bytes());
                payload.extend_from_slice(&version.to_be_bytes());
                payload.extend_from_slice(&5i32.to_be_bytes());
                payload.extend_from_slice(&(-1i16).to_be_bytes());
                if api_key.request_header_version(version) >= 2 {
                    payload.push(0);
                }
                let len = (next() % 96) as usize;
                payload.extend((0..len).map(|_| (next() % 7) as u8)); // small values: plausible lengths
                let mut framed = (payload.len() as i32).to_be_bytes().to_vec();
                framed.extend_from_slice(&payload);
                let mut s = TcpStream::connect(broker.local_addr()).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s.write_all(&framed).unwrap();
                let _ = s.shutdown(std::net::Shutdown::Write);
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink);
            }
        }
    }
    assert_eq!(metadata(&mut good, "r", 12).topics[0].error_code, 0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// A Fetch of `topic`-0 at `offset` with `max_wait_ms` and `min_bytes`; returns (elapsed, record
/// bytes length).
pub(crate) fn long_poll(
    client: &mut Client,
    topic: &str,
    offset: i64,
    max_wait_ms: i32,
    min_bytes: i32,
) -> (Duration, usize) {
    let req = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
        ])]);
    let start = std::time::Instant::now();
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
    let elapsed = start.elapsed();
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    (elapsed, p.records.as_ref().map_or(0, |b| b.len()))
}

#[test]
fn long_poll_on_an_empty_partition_waits_about_max_wait() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lp", 12);
    let (elapsed, len) = long_poll(&mut c, "lp", 0, 500, 1);
    assert_eq!(len, 0);
    assert!(elapsed >= Duration::from_millis(400), "answered after {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "answered after {elapsed:?}");
    broker.shutdown().unwrap();
}

/// `msg-zerocopy` under `threaded`: every send's completion lands on the socket's error queue,
/// which raises `EPOLLERR` on the network thread's poll with the peer still there. It once read
/// that as a hang-up, so the next long poll of the connection was dropped as "its client went
/// away" and the connection closed (the `fetchbench run` consumers retried hundreds of times).
/// Records fetched through msg-zerocopy, then a long poll at the log end, several times: each
/// long poll is answered (empty, after max_wait), on the same connection.
#[test]
fn msg_zerocopy_completions_are_not_a_hang_up() {
    if let Err(e) = ReadPathKind::MsgZerocopy.probe() {
        assert!(!crate::common::in_ci(), "CI must run msg-zerocopy: {e}");
        eprintln!("SKIP: {e}");
        return;
    }
    let (_tmp, broker) = start(ReadPathKind::MsgZerocopy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "zc", 12);
    for round in 0..5 {
        assert_eq!(produce(&mut c, "zc", batch(1), 1), Some((0, round)));
        let (_, _, records) = fetch(&mut c, "zc", round, 12);
        assert_eq!(records.len(), 1, "round {round}");
        let (elapsed, len) = long_poll(&mut c, "zc", round + 1, 300, 1);
        assert_eq!(len, 0, "round {round}");
        assert!(elapsed >= Duration::from_millis(200), "round {round}: answered after {elapsed:?}");
    }
    assert_eq!(broker.test_support().open_connections(), 1);
    broker.shutdown().unwrap();
}

#[test]
fn long_poll_is_woken_by_a_produce_on_another_connection() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lpw", 12);
    let addr = broker.local_addr();
    let producer = std::thread::spawn(move || {
        let mut p = Client::connect(addr);
        std::thread::sleep(Duration::from_millis(200));
        produce(&mut p, "lpw", batch(1), 1)
    });
    let (elapsed, len) = long_poll(&mut c, "lpw", 0, 5000, 1);
    assert_eq!(producer.join().unwrap(), Some((0, 0)));
    assert!(len > 0, "the parked fetch returns the produced record");
    assert!(elapsed < Duration::from_millis(2500), "answered after {elapsed:?}");
    let (_, _, records) = fetch(&mut c, "lpw", 0, 12);
    assert_eq!(records, vec![(0, "k0".to_string(), "v0".to_string())]);
    broker.shutdown().unwrap();
}

#[test]
fn long_poll_with_max_wait_zero_answers_at_once() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lp0", 12);
    let (elapsed, len) = long_poll(&mut c, "lp0", 0, 0, 1);
    assert_eq!(len, 0);
    assert!(elapsed < Duration::from_millis(300), "answered after {elapsed:?}");
    broker.shutdown().unwrap();
}

#[test]
fn a_parked_fetch_does_not_delay_other_connections() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lpo", 12);
    let addr = broker.local_addr();
    let parked = std::thread::spawn(move || long_poll(&mut c, "lpo", 0, 2000, 1));
    std::thread::sleep(Duration::from_millis(200));
    let mut other = Client::connect(addr);
    let start = std::time::Instant::now();
    let ResponseKind::ApiVersions(r) =
        other.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()))
    else {
        panic!()
    };
    let elapsed = start.elapsed();
    assert_eq!(r.error_code, 0);
    assert!(elapsed < Duration::from_millis(300), "ApiVersions answered after {elapsed:?}");
    let (_, len) = parked.join().unwrap();
    assert_eq!(len, 0);
    broker.shutdown().unwrap();
}

/// A segment holding a batch with an impossible header (base offset `i64::MAX`, so its last
/// offset overflows; the CRC does not cover the base offset, so it passes) is corruption: the
/// broker cuts the segment there when it loads the log (recovery after an unclean shutdown; the
/// active segment's own check after a clean one), never serves the batch and does not panic.
/// Produce and Fetch go on at the offset after the last valid batch.
#[test]
fn a_crafted_batch_header_in_a_segment_is_cut_not_served() {
    for clean in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        let dir = logs.join("crafted-0");
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = batch(3);
        let mut bad = batch(2);
        fetchbench::log::batch::builder::set_base_offset(&mut bad, i64::MAX);
        bytes.extend_from_slice(&bad);
        std::fs::write(dir.join("00000000000000000000.log"), &bytes).unwrap();
        if clean {
            std::fs::write(logs.join(".kafka_cleanshutdown"), b"").unwrap();
        }
        let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), &logs, ReadPathKind::Sendfile);
        let broker = Broker::start(config).unwrap();
        let mut c = Client::connect(broker.local_addr());
        // `fetch` parses every served batch: the crafted one would fail it.
        let (code, hw, recs) = fetch(&mut c, "crafted", 0, 12);
        assert_eq!((code, hw), (0, 3), "clean shutdown: {clean}");
        assert_eq!(recs.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2], "clean shutdown: {clean}");
        assert_eq!(std::fs::metadata(dir.join("00000000000000000000.log")).unwrap().len(), batch(3).len() as u64);
        assert_eq!(produce(&mut c, "crafted", batch(1), -1), Some((0, 3)));
        let (code, _, recs) = fetch(&mut c, "crafted", 3, 12);
        assert_eq!((code, recs.len()), (0, 1));
        // A Produce request carrying such a batch is refused as Kafka's LogValidator does.
        let mut crafted = batch(1);
        let last_offset_delta = 23;
        crafted[last_offset_delta..last_offset_delta + 4].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crc32c::crc32c(&crafted[21..]);
        crafted[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(produce(&mut c, "crafted", crafted, -1).map(|p| p.0), Some(87), "INVALID_RECORD");
        assert_eq!(broker.test_support().connection_panics(), 0);
        broker.shutdown().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Connections, shutdown and robustness (Kafka's `SocketServer`, `KafkaApis`, clean shutdown)
// ---------------------------------------------------------------------------------------------

/// Produces `records` to `topic`-0 with Produce v9, acks=1: the partition response.
pub(crate) fn produce_raw(client: &mut Client, topic: &str, records: Option<Vec<u8>>) -> (i16, i64) {
    let req =
        ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(records.map(Bytes::from))])]);
    let ResponseKind::Produce(r) = client.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The high watermark of `topic`-0, from a Fetch v11.
pub(crate) fn high_watermark(client: &mut Client, topic: &str) -> i64 {
    let (err, hw, _) = fetch(client, topic, 0, 11);
    assert_eq!(err, 0);
    hw
}

/// A client that sends fetches and never reads the responses blocks only its own connection:
/// others are served, and shutdown completes promptly.
#[test]
fn r11_a_client_that_never_reads_blocks_nobody() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "noread", 12);
    let big = {
        let mut b = BatchBuilder::new(0, Compression::None);
        let value = vec![7u8; 100_000];
        for i in 0..9 {
            b.append(1_700_000_000_000, Some(format!("k{i}").as_bytes()), Some(&value), &[]);
        }
        b.build().unwrap()
    };
    assert_eq!(produce_raw(&mut c, "noread", Some(big)).0, 0);
    let mut stuck = TcpStream::connect(broker.local_addr()).unwrap();
    let req = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(name("noread")).with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)]),
    ]);
    let header = kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(12)
        .with_correlation_id(1);
    let frame = fetchbench::protocol::frame::encode_request(&header, &RequestKind::Fetch(req)).unwrap();
    stuck.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    // ~100 MB of responses asked for, none read: the broker's writes block.
    for _ in 0..100 {
        if stuck.write_all(&frame).is_err() {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut other = Client::connect(broker.local_addr());
    assert_eq!(high_watermark(&mut other, "noread"), 9);
    let ResponseKind::Metadata(_) =
        other.call(ApiKey::Metadata, 12, RequestKind::Metadata(MetadataRequest::default().with_topics(None)))
    else {
        panic!()
    };
    let start = Instant::now();
    broker.shutdown().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5), "shutdown took {:?}", start.elapsed());
    drop(stuck);
}

/// A tiny compressed batch whose records decompress to ~200 MB (one record of zeros; the batch
/// itself is a few KiB, under `max.message.bytes`), produced five times in a row. Validation
/// decompresses and walks the records, which takes a while; it used to run inside
/// `PartitionLog::append` under the broker-wide log lock, so every other connection's
/// Fetch/Produce/Metadata waited (0.8-1.2 s per bomb). Now it runs before the bomb's partition
/// lock is taken and no broker-wide lock exists (Kafka validates before its partition's `lock
/// synchronized` too): another partition's Fetch and ListOffsets are answered while it runs,
/// 99% of them within 50 ms and every one far below a validation's time (see the bounds below).
/// The bomb is accepted, as Kafka accepts it (it stays under the 256 MiB decompression bound).
#[test]
fn r14_decompression_bomb_stalls_other_clients() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "bomb", 12);
    metadata(&mut c, "victim", 12);
    assert_eq!(produce_raw(&mut c, "victim", Some(batch(3))).0, 0);
    let zeros = vec![0u8; 200 << 20];
    let mut b = BatchBuilder::new(0, Compression::Zstd);
    b.append(1_700_000_000_000, Some(b"k"), Some(&zeros), &[]);
    let bomb = b.build().unwrap();
    drop(zeros);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let addr = broker.local_addr();
    // zstd inflates zeros at GB/s, so a bomb may validate in ~0.1 s: bombs follow each other for
    // at least 2 s (at most 40), a window in which the victim must be served many times.
    let bomber = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        let start = Instant::now();
        let mut answers = Vec::new();
        while answers.len() < 5 || (start.elapsed() < Duration::from_secs(2) && answers.len() < 40) {
            answers.push(produce_raw(&mut c, "bomb", Some(bomb.clone())));
        }
        answers
    });
    let mut victim = Client::connect(broker.local_addr());
    let (mut fetches, mut lists) = (Vec::new(), Vec::new());
    while !bomber.is_finished() {
        let t = Instant::now();
        assert_eq!(high_watermark(&mut victim, "victim"), 3);
        fetches.push(t.elapsed());
        let t = Instant::now();
        assert_eq!(list_offset(&mut victim, "victim", -1), (0, 3));
        lists.push(t.elapsed());
    }
    let bombs = bomber.join().unwrap();
    let (rounds, n) = (fetches.len(), bombs.len());
    fetches.sort();
    lists.sort();
    let q = |v: &Vec<Duration>, f: f64| v[((v.len() - 1) as f64 * f) as usize];
    let over = |v: &Vec<Duration>| v.iter().filter(|d| **d > Duration::from_millis(10)).count();
    eprintln!(
        "while {n} bombs were produced: {rounds} rounds; Fetch p50 {:?} p99 {:?} p99.9 {:?} max {:?} >10ms {}; ListOffsets p50 {:?} p99 {:?} max {:?} >10ms {}",
        q(&fetches, 0.5), q(&fetches, 0.99), q(&fetches, 0.999), q(&fetches, 1.0), over(&fetches),
        q(&lists, 0.5), q(&lists, 0.99), q(&lists, 1.0), over(&lists)
    );
    assert_eq!(
        bombs.iter().map(|r| r.1).collect::<Vec<_>>(),
        (0..bombs.len() as i64).collect::<Vec<_>>(),
        "accepted, as Kafka does: {bombs:?}"
    );
    assert!(rounds >= 100, "the victim was served while the bombs were validated ({rounds} rounds)");
    // The victim asks tens of thousands of times; on a loaded machine a few answers wait for a
    // CPU (scheduling, not a lock: p50 is tens of microseconds). So: 99% within 50 ms (the issue's
    // generous bound), none near a bomb's validation time (the old stall: 0.8-1.2 s per bomb).
    for (what, v) in [("Fetch", &fetches), ("ListOffsets", &lists)] {
        assert!(q(v, 0.99) < Duration::from_millis(50), "{what} of another topic: p99 {:?}", q(v, 0.99));
        assert!(q(v, 1.0) < Duration::from_millis(500), "{what} of another topic waited {:?}", q(v, 1.0));
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Producers, long-polling fetchers and a shutdown at the same time: every acknowledged record
/// is in the log after a restart, the shutdown was clean, nothing panicked.
#[test]
fn r15_shutdown_during_concurrent_produce_and_long_polls_loses_no_acknowledged_record() {
    use fetchbench::broker::{Broker, BrokerConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), &dir, ReadPathKind::Sendfile);
    let broker = Broker::start(config).unwrap();
    let addr = broker.local_addr();
    let topics = ["race-a", "race-b", "race-c", "race-d"];
    let mut c = Client::connect(addr);
    for t in topics {
        metadata(&mut c, t, 12);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = topics
        .iter()
        .map(|&t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut acked = Vec::new();
                for i in 0.. {
                    let mut b = BatchBuilder::new(0, Compression::None);
                    b.append(1_700_000_000_000, Some(b"k"), Some(format!("{t}-{i}").as_bytes()), &[]);
                    let (err, offset) = produce_raw(&mut c, t, Some(b.build().unwrap()));
                    if err != 0 {
                        break;
                    }
                    acked.push((offset, format!("{t}-{i}")));
                }
                (t, acked)
            })
        })
        .collect();
    let fetchers: Vec<_> = topics
        .iter()
        .map(|&t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut offset = 0;
                while !stop.load(Ordering::SeqCst) {
                    let req = FetchRequest::default()
                        .with_max_wait_ms(300)
                        .with_min_bytes(1 << 20)
                        .with_max_bytes(1 << 20)
                        .with_topics(vec![FetchTopic::default().with_topic(name(t)).with_partitions(vec![
                            FetchPartition::default()
                                .with_partition(0)
                                .with_fetch_offset(offset)
                                .with_partition_max_bytes(1 << 20),
                        ])]);
                    let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
                    let p = &r.responses[0].partitions[0];
                    if p.error_code != 0 {
                        break;
                    }
                    offset = offset.max(p.high_watermark.min(offset + 1));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let start = Instant::now();
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5), "shutdown took {:?}", start.elapsed());
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<(&str, Vec<(i64, String)>)> = producers.into_iter().map(|p| p.join().unwrap()).collect();
    for f in fetchers {
        f.join().unwrap();
    }
    let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), &dir, ReadPathKind::Sendfile);
    let broker = Broker::start(config).unwrap();
    assert!(broker.had_clean_shutdown());
    let mut c = Client::connect(broker.local_addr());
    for (t, acked) in acked {
        assert!(!acked.is_empty(), "{t}: nothing was produced");
        let mut stored = std::collections::BTreeMap::new();
        let mut offset = 0;
        loop {
            let (err, hw, recs) = fetch(&mut c, t, offset, 11);
            assert_eq!(err, 0);
            for (o, _, v) in recs {
                stored.insert(o, v);
            }
            offset = stored.keys().next_back().map_or(0, |o| o + 1);
            if offset >= hw {
                break;
            }
        }
        for (o, v) in &acked {
            assert_eq!(stored.get(o), Some(v), "{t}: acknowledged offset {o}");
        }
    }
    broker.shutdown().unwrap();
}

/// Mutated requests (valid Produce / Fetch / ListOffsets / Metadata / OffsetForLeaderEpoch
/// frames with random bytes flipped in the body) never panic a connection or abort the
/// process; each gets a response or a close, and the broker keeps serving.
#[test]
fn r16_mutated_requests_never_panic() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
    use kafka_protocol::messages::{OffsetForLeaderEpochRequest, RequestHeader};

    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "fuzz", 12);
    assert_eq!(produce_raw(&mut c, "fuzz", Some(batch(3))).0, 0);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let gzip = {
        let mut b = BatchBuilder::new(0, Compression::Gzip);
        for i in 0..5 {
            b.append(1_700_000_000_000, Some(format!("k{i}").as_bytes()), Some(b"value value value"), &[]);
        }
        b.build().unwrap()
    };
    let requests: Vec<(ApiKey, i16, RequestKind)> = vec![
        (
            ApiKey::Produce,
            9,
            RequestKind::Produce(ProduceRequest::default().with_acks(1).with_timeout_ms(1000).with_topic_data(vec![
                TopicProduceData::default().with_name(name("fuzz")).with_partition_data(vec![
                    PartitionProduceData::default().with_index(0).with_records(Some(Bytes::from(gzip.clone()))),
                ]),
            ])),
        ),
        (
            ApiKey::Produce,
            3,
            RequestKind::Produce(ProduceRequest::default().with_acks(0).with_timeout_ms(1000).with_topic_data(vec![
                TopicProduceData::default().with_name(name("fuzz")).with_partition_data(vec![
                    PartitionProduceData::default().with_index(0).with_records(Some(Bytes::from(batch(2)))),
                ]),
            ])),
        ),
        (
            ApiKey::Fetch,
            12,
            RequestKind::Fetch(FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
                FetchTopic::default().with_topic(name("fuzz")).with_partitions(vec![
                    FetchPartition::default().with_partition(0).with_fetch_offset(1).with_partition_max_bytes(1 << 20),
                ]),
            ])),
        ),
        (
            ApiKey::Fetch,
            16,
            RequestKind::Fetch(FetchRequest::default().with_max_wait_ms(0).with_max_bytes(1 << 20).with_topics(vec![
                FetchTopic::default().with_partitions(vec![
                    FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(100),
                ]),
            ])),
        ),
        (
            ApiKey::ListOffsets,
            7,
            RequestKind::ListOffsets(ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("fuzz"))
                .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-3)])])),
        ),
        (
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(None).with_allow_auto_topic_creation(false)),
        ),
        (
            ApiKey::OffsetForLeaderEpoch,
            4,
            RequestKind::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::default().with_topics(vec![
                OffsetForLeaderTopic::default().with_topic(name("fuzz")).with_partitions(vec![
                    OffsetForLeaderPartition::default().with_partition(0).with_leader_epoch(0),
                ]),
            ])),
        ),
    ];
    let frames: Vec<Vec<u8>> = requests
        .iter()
        .map(|(key, version, body)| {
            let header = RequestHeader::default()
                .with_request_api_key(*key as i16)
                .with_request_api_version(*version)
                .with_correlation_id(7)
                .with_client_id(Some(kafka_protocol::protocol::StrBytes::from_static_str("fuzz")));
            fetchbench::protocol::frame::encode_request(&header, body).unwrap().to_vec()
        })
        .collect();
    let mut conn: Option<TcpStream> = None;
    for _ in 0..3000 {
        let mut frame = frames[(next() % frames.len() as u64) as usize].clone();
        // Flip 1-4 bytes after the 4-byte size and the 8-byte header prefix.
        for _ in 0..1 + next() % 4 {
            let at = 12 + (next() % (frame.len() as u64 - 12)) as usize;
            frame[at] = match next() % 4 {
                0 => 0xff,
                1 => 0x00,
                2 => 0x7f,
                _ => next() as u8,
            };
        }
        let s = conn.get_or_insert_with(|| {
            let s = TcpStream::connect(broker.local_addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            s
        });
        if s.write_all(&frame).is_err() {
            conn = None;
            continue;
        }
        // acks=0 produce may legitimately get no answer: do not wait for one.
        let acks0 = frame.len() > 13 && frame[4..6] == [0, 0] && frame[6..8] == [0, 3];
        if acks0 {
            conn = None;
            continue;
        }
        match fetchbench::protocol::frame::read_frame(s, 64 << 20) {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => conn = None,
        }
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "fuzz", 12);
    broker.shutdown().unwrap();
}

/// A produce that arrives while the broker shuts down (SIGTERM) was answered
/// UNKNOWN_SERVER_ERROR (-1), which the Java producer and librdkafka treat as permanent: the
/// application loses the message although a restart is seconds away. Kafka answers a partition
/// it no longer leads with NOT_LEADER_OR_FOLLOWER (6), retriable: clients refresh metadata and
/// retry until the broker is back (`delivery.timeout.ms`). Fetch (UNKNOWN_TOPIC_OR_PARTITION) and
/// InitProducerId (COORDINATOR_NOT_AVAILABLE) already answer retriable codes then.
#[test]
fn r19_produce_during_shutdown_gets_a_retriable_error() {
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "closing", 12);
    assert_eq!(produce_raw(&mut c, "closing", Some(batch(1))).0, 0);
    broker.shutdown().unwrap();
    // The connection outlives the shutdown (its thread serves until the peer closes).
    assert_eq!(produce_raw(&mut c, "closing", Some(batch(1))), (NOT_LEADER_OR_FOLLOWER, -1));
}

/// A `uring-splice` read path raises its pipe to 1 MiB with `F_SETPIPE_SZ`, and an unprivileged
/// process may hold `fs.pipe-user-pages-soft` pages (16384 = 64 MiB) of pipe buffers. Each
/// connection made its path when it opened, so from about the 64th concurrent connection on,
/// every new one was closed before its first request (even ApiVersions). Fixed: the path is made
/// at the first Fetch response, so connections that never fetch hold no pipe; since issue 15 a
/// path belongs to an io thread (`num.io.threads` of them), not to a connection. Root is
/// exempt from the limit, so the old failure shows only when run unprivileged, e.g.
/// `setpriv --reuid=65534 --regid=65534 --clear-groups target/debug/deps/it-* broker::r22`.
#[test]
fn r22_many_connections_with_uring_splice() {
    use kafka_protocol::messages::ApiVersionsRequest;
    if ReadPathKind::UringSplice.probe().is_err() {
        eprintln!("SKIP: uring-splice cannot run here");
        return;
    }
    let (_tmp, broker) = start(ReadPathKind::UringSplice);
    let mut clients = Vec::new();
    for i in 0..150 {
        let mut c = Client::connect(broker.local_addr());
        let id = c.send(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()));
        match fetchbench::protocol::frame::read_frame(&mut c.stream, 1 << 20) {
            Ok(Some(_)) => {}
            other => panic!("connection {i} (correlation id {id}) got no answer: {other:?}"),
        }
        clients.push(c);
    }
    drop(clients);
    broker.shutdown().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Per-partition locking (issue 15): the partition is the unit of locking
// ---------------------------------------------------------------------------------------------

/// A Produce v9 of one record set per `(partition, records)` of `topic`, acks=1: each partition's
/// (index, error code, base offset), in request order.
fn produce_partitions(client: &mut Client, topic: &str, sets: Vec<(i32, Vec<u8>)>) -> Vec<(i32, i16, i64)> {
    let data = sets
        .into_iter()
        .map(|(p, records)| PartitionProduceData::default().with_index(p).with_records(Some(Bytes::from(records))))
        .collect();
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default().with_name(name(topic)).with_partition_data(data)]);
    let ResponseKind::Produce(r) = client.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
    r.responses[0].partition_responses.iter().map(|p| (p.index, p.error_code, p.base_offset)).collect()
}

/// One partition of a Fetch answer: (error code, high watermark, (offset, value)s).
type FetchedPartition = (i16, i64, Vec<(i64, String)>);

/// A Fetch v12 (min bytes 1, waiting at most `max_wait_ms`) of `topic`'s partitions from the
/// given offsets: per partition, in request order, (error code, high watermark, the whole
/// batches' (offset, value)s; a batch cut by the response's byte limits is left out).
fn fetch_partitions(client: &mut Client, topic: &str, from: &[(i32, i64)], max_wait_ms: i32) -> Vec<FetchedPartition> {
    let partitions = from
        .iter()
        .map(|&(p, offset)| {
            FetchPartition::default().with_partition(p).with_fetch_offset(offset).with_partition_max_bytes(64 << 10)
        })
        .collect();
    let req = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(4 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(partitions)]);
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
    assert_eq!(r.responses.len(), 1);
    let got = &r.responses[0].partitions;
    assert_eq!(got.len(), from.len());
    got.iter()
        .zip(from)
        .map(|(p, &(index, _))| {
            assert_eq!(p.partition_index, index);
            let mut out = Vec::new();
            let mut bytes: &[u8] = p.records.as_deref().unwrap_or(&[]);
            while bytes.len() >= 12 {
                let len = 12 + i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
                if bytes.len() < len {
                    break;
                }
                let batch = RecordBatch::parse(&bytes[..len]).unwrap();
                for rec in batch.records().unwrap().to_vec().unwrap() {
                    out.push((rec.offset, String::from_utf8(rec.value.unwrap().to_vec()).unwrap()));
                }
                bytes = &bytes[len..];
            }
            (p.error_code, p.high_watermark, out)
        })
        .collect()
}

/// A batch of `values`, one record each.
fn batch_of(values: &[String]) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for v in values {
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// Partition B's lock is held through the test seam (as an append holds it, for as long as the
/// test wants: no sleep decides anything): produces to partition A of the same topic, sent on
/// the wire, are acknowledged and A can be fetched and listed meanwhile, while B's log end offset
/// stays where it was (read without B's lock) even with a produce to B in flight on another
/// connection. Once the lock is released that produce completes and B goes on.
#[test]
fn appends_to_a_partition_go_on_while_another_partition_holds_its_lock() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let support = broker.test_support();
    support.create_topic("locks", 2).unwrap();
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(produce_partitions(&mut c, "locks", vec![(1, batch(2))]), vec![(1, 0, 0)]);
    let held = support.hold_partition_lock("locks", 1).expect("partition 1 exists");
    // A produce to B, in flight on its own connection: it waits for B's lock.
    let mut to_b = Client::connect(broker.local_addr());
    let waiting = std::thread::spawn(move || produce_partitions(&mut to_b, "locks", vec![(1, batch(3))]));
    for i in 0..5 {
        assert_eq!(produce_partitions(&mut c, "locks", vec![(0, batch(2))]), vec![(0, 0, 2 * i)], "append {i} to A");
    }
    let fetched = fetch_partitions(&mut c, "locks", &[(0, 0)], 0);
    assert_eq!((fetched[0].0, fetched[0].1, fetched[0].2.len()), (0, 10, 10), "A is fetched");
    assert_eq!(support.log_end_offset("locks", 0), Some(10));
    assert_eq!(support.log_end_offset("locks", 1), Some(2), "B did not move while its lock was held");
    assert!(!waiting.is_finished(), "the produce to B cannot complete while B's lock is held");
    drop(held);
    assert_eq!(waiting.join().unwrap(), vec![(1, 0, 2)], "B's produce completes once the lock is released");
    assert_eq!(produce_partitions(&mut c, "locks", vec![(1, batch(1))]), vec![(1, 0, 5)]);
    assert_eq!(support.log_end_offset("locks", 1), Some(6));
    assert_eq!(support.connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Many producer threads (each its own connection) append to 100 partitions at once, several
/// threads to every partition, while fetcher threads follow all 100 partitions; afterwards every
/// partition holds every acknowledged record exactly once, at the offset its acknowledgement
/// named, offsets dense from 0 and each producer's records in the order it sent them; every
/// fetcher saw each partition's offsets exactly once, in order.
#[test]
fn produce_and_fetch_on_100_partitions_from_many_threads() {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const PARTITIONS: i32 = 100;
    const PRODUCERS: usize = 8;
    const ROUNDS: usize = 20;
    const PER_REQUEST: usize = 25;
    let (_tmp, broker) = start(ReadPathKind::Copy);
    broker.test_support().create_topic("many", PARTITIONS).unwrap();
    let addr = broker.local_addr();
    let producing = Arc::new(AtomicBool::new(true));
    let fetchers: Vec<_> = (0..3)
        .map(|f| {
            let producing = Arc::clone(&producing);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut seen: Vec<Vec<(i64, String)>> = vec![Vec::new(); PARTITIONS as usize];
                loop {
                    let last_round = !producing.load(Ordering::SeqCst);
                    let from: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, seen[p as usize].len() as i64)).collect();
                    let mut behind = false;
                    for ((p, offset), (err, hw, records)) in
                        from.iter().zip(fetch_partitions(&mut c, "many", &from, 20))
                    {
                        assert_eq!(err, 0, "fetcher {f}: many-{p} at {offset}");
                        let got = &mut seen[*p as usize];
                        for (o, v) in records.into_iter().filter(|(o, _)| *o >= *offset) {
                            assert_eq!(o, got.len() as i64, "fetcher {f}: many-{p}: offsets once each, in order");
                            got.push((o, v));
                        }
                        behind |= (got.len() as i64) < hw;
                    }
                    if last_round && !behind {
                        return seen;
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut acked: Vec<(i32, i64, Vec<String>)> = Vec::new();
                for round in 0..ROUNDS {
                    // 25 partitions per request, a different window each round and thread: every
                    // partition gets appends from several threads.
                    let first = (t * 13 + round * 7) % PARTITIONS as usize;
                    let sets: Vec<(i32, Vec<String>)> = (0..PER_REQUEST)
                        .map(|k| {
                            let p = ((first + k * 4) % PARTITIONS as usize) as i32;
                            (p, (0..2).map(|i| format!("t{t}-r{round}-p{p}-{i}")).collect())
                        })
                        .collect();
                    let request = sets.iter().map(|(p, values)| (*p, batch_of(values))).collect();
                    let answers = produce_partitions(&mut c, "many", request);
                    assert_eq!(answers.len(), sets.len());
                    for ((p, err, base), (sent_p, values)) in answers.into_iter().zip(sets) {
                        assert_eq!((p, err), (sent_p, 0), "producer {t} round {round}");
                        acked.push((p, base, values));
                    }
                }
                (t, acked)
            })
        })
        .collect();
    // Partition -> offset -> value, from the acknowledgements.
    let mut expected: BTreeMap<i32, BTreeMap<i64, String>> = BTreeMap::new();
    for producer in producers {
        let (t, acked) = producer.join().unwrap();
        let mut last_base: BTreeMap<i32, i64> = BTreeMap::new();
        for (p, base, values) in acked {
            let previous = last_base.insert(p, base);
            assert!(previous.is_none_or(|b| b < base), "producer {t}: many-{p} in send order");
            for (i, v) in values.into_iter().enumerate() {
                let clash = expected.entry(p).or_default().insert(base + i as i64, v);
                assert!(clash.is_none(), "many-{p}: offset {} acknowledged twice", base + i as i64);
            }
        }
    }
    producing.store(false, Ordering::SeqCst);
    let total: usize = expected.values().map(BTreeMap::len).sum();
    assert_eq!(total, PRODUCERS * ROUNDS * PER_REQUEST * 2);
    let support = broker.test_support();
    for p in 0..PARTITIONS {
        let want = expected.get(&p).cloned().unwrap_or_default();
        assert!(!want.is_empty(), "many-{p} got appends");
        assert_eq!(support.log_end_offset("many", p), Some(want.len() as i64), "many-{p}: dense offsets");
        assert!(want.keys().copied().eq(0..want.len() as i64), "many-{p}: offsets 0.. each once");
    }
    for fetcher in fetchers {
        let seen = fetcher.join().unwrap();
        for p in 0..PARTITIONS {
            let want: Vec<(i64, String)> = expected[&p].clone().into_iter().collect();
            assert_eq!(seen[p as usize], want, "many-{p}: every offset once, in order, the acknowledged value");
        }
    }
    assert_eq!(support.connection_panics(), 0);
    broker.shutdown().unwrap();
}
