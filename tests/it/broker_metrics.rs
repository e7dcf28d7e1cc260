//! The broker's own Fetch latency histogram (`BrokerHandle::take_fetch_latency`, Kafka's
//! `RequestMetrics` `TotalTimeMs` for `FetchConsumer`): what is counted, reset on take, and
//! long-poll waits included.
//!
//! A Fetch is recorded by the io thread that wrote its response, just after the write and before
//! the connection is read again, so each test sends one more (non-Fetch) request on the same
//! connection before taking the histogram: its answer proves the recording is done.

use std::io::Write;
use std::time::{Duration, Instant};

use fetchbench::broker::{errors, BrokerHandle};
use fetchbench::protocol::frame;
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, FetchRequest, RequestHeader, RequestKind, ResponseKind};

use crate::broker::{batch, fetch, long_poll, metadata, name, produce, start, Client};
use crate::common::reset_on_close;

/// A Metadata round trip: every earlier request on `client` has been answered and recorded.
fn sync(client: &mut Client, topic: &str) {
    metadata(client, topic, 12);
}

/// A Fetch of `topic`-0 at offset 0 with max wait 0 from replica `replica_id`, at `version`
/// (below v15 in `replica_id`, from v15 in `replica_state`; from v13 the topic is named by its
/// id, asked of Metadata); returns the partition's error code.
fn replica_fetch(client: &mut Client, topic: &str, version: i16, replica_id: i32) -> i16 {
    let topic_id = metadata(client, topic, 12).topics[0].topic_id;
    assert!(!topic_id.is_nil());
    let mut req =
        FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
            FetchTopic::default().with_topic(name(topic)).with_topic_id(topic_id).with_partitions(vec![
                FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
            ]),
        ]);
    if version >= 15 {
        req.replica_state = ReplicaState::default().with_replica_id(replica_id.into()).with_replica_epoch(0);
    } else {
        req.replica_id = replica_id.into();
    }
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, version, RequestKind::Fetch(req)) else { panic!() };
    r.responses[0].partitions[0].error_code
}

#[test]
fn every_consumer_fetch_is_counted_once_and_take_resets() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "m", 12);
    assert_eq!(produce(&mut c, "m", batch(10), 1), Some((0, 0)));
    // Nothing fetched yet: produce and metadata are not Fetches.
    assert_eq!(broker.take_fetch_latency().count(), 0);
    for i in 0..5 {
        let (code, hw, records) = fetch(&mut c, "m", i, 12);
        assert_eq!((code, hw), (0, 10));
        assert_eq!(records.len(), 10, "the batch holding offset {i}");
    }
    sync(&mut c, "m");
    let taken = broker.take_fetch_latency();
    assert_eq!(taken.count(), 5, "{taken:?}");
    assert!(taken.quantile_ns(1.0) >= 1_000, "at least the 1 us floor: {taken:?}");
    assert!(taken.quantile_ns(1.0) < 20_000_000_000, "max wait 0 answers at once: {taken:?}");
    assert_eq!(broker.take_fetch_latency().count(), 0, "take resets the histogram");
    // After a reset, new fetches are counted again (also from another connection).
    let mut d = Client::connect(broker.local_addr());
    fetch(&mut d, "m", 0, 4);
    sync(&mut d, "m");
    assert_eq!(broker.take_fetch_latency().count(), 1);
    broker.shutdown().unwrap();
}

#[test]
fn a_long_poll_on_an_empty_partition_is_recorded_with_its_wait() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lpm", 12);
    let (elapsed, len) = long_poll(&mut c, "lpm", 0, 300, 1);
    assert_eq!(len, 0);
    sync(&mut c, "lpm");
    let taken = broker.take_fetch_latency();
    assert_eq!(taken.count(), 1, "{taken:?}");
    let p50 = Duration::from_nanos(taken.quantile_ns(0.5));
    assert!(p50 >= Duration::from_millis(250), "recorded {p50:?} for a 300 ms wait: {taken:?}");
    assert!(p50 < Duration::from_secs(5), "recorded {p50:?}: {taken:?}");
    // The broker's time ends before the client's (the client also waits for the response to
    // arrive); allow histogram rounding (3 significant digits).
    assert!(p50 <= elapsed + Duration::from_millis(5), "broker {p50:?} > client {elapsed:?}");
    broker.shutdown().unwrap();
}

#[test]
fn errors_count_followers_and_unanswered_fetches_do_not() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "e", 12);
    assert_eq!(produce(&mut c, "e", batch(3), 1), Some((0, 0)));

    // An error answered is still an answered consumer Fetch.
    let (code, _, records) = fetch(&mut c, "no-such-topic", 0, 12);
    assert_eq!(code, errors::UNKNOWN_TOPIC_OR_PARTITION);
    assert!(records.is_empty());
    let (code, _, _) = fetch(&mut c, "e", 1_000, 12);
    assert_eq!(code, errors::OFFSET_OUT_OF_RANGE);
    sync(&mut c, "e");
    assert_eq!(broker.take_fetch_latency().count(), 2);

    // Followers (replica id >= 0) are answered but not counted, in either field; an explicit
    // consumer id (-1) in either field is counted.
    assert_eq!(replica_fetch(&mut c, "e", 12, 1), 0);
    assert_eq!(replica_fetch(&mut c, "e", 15, 1), 0);
    sync(&mut c, "e");
    assert_eq!(broker.take_fetch_latency().count(), 0, "follower fetches are not FetchConsumer");
    assert_eq!(replica_fetch(&mut c, "e", 12, -1), 0);
    assert_eq!(replica_fetch(&mut c, "e", 15, -1), 0);
    sync(&mut c, "e");
    assert_eq!(broker.take_fetch_latency().count(), 2);

    // A Fetch at a version not served (v3: a v4 frame with its header's version patched) closes
    // the connection unanswered: not counted.
    let mut d = Client::connect(broker.local_addr());
    let req = FetchRequest::default().with_max_wait_ms(0).with_topics(vec![FetchTopic::default()
        .with_topic(name("e"))
        .with_partitions(vec![FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20)])]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(4)
        .with_correlation_id(1);
    let mut bytes = frame::encode_request(&header, &RequestKind::Fetch(req)).unwrap();
    // size (4 bytes), api key (2), api version (2).
    bytes[6..8].copy_from_slice(&3i16.to_be_bytes());
    d.stream.write_all(&bytes).unwrap();
    let closed = frame::read_frame(&mut d.stream, 64 << 20);
    assert!(matches!(closed, Ok(None) | Err(_)), "v3 is not served: the connection closes, got {closed:?}");
    wait_for_open_connections(&broker, 1);
    assert_eq!(broker.take_fetch_latency().count(), 0, "an unanswered Fetch is not counted");

    // A parked Fetch whose client resets the connection (SO_LINGER 0: RST on close) fails to
    // write its response: not counted.
    let mut r = Client::connect(broker.local_addr());
    let req =
        FetchRequest::default().with_max_wait_ms(400).with_min_bytes(1 << 20).with_topics(vec![FetchTopic::default()
            .with_topic(name("e"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(3)
                .with_partition_max_bytes(1 << 20)])]);
    r.send(ApiKey::Fetch, 12, RequestKind::Fetch(req));
    std::thread::sleep(Duration::from_millis(100));
    reset_on_close(&r.stream);
    drop(r);
    wait_for_open_connections(&broker, 1);
    assert_eq!(broker.take_fetch_latency().count(), 0, "a Fetch whose answer could not be written is not counted");

    // `c` still works and is still counted.
    fetch(&mut c, "e", 0, 12);
    sync(&mut c, "e");
    assert_eq!(broker.take_fetch_latency().count(), 1);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Waits (up to 10 s) until `n` client connections are open: closed connections have been
/// dropped by the broker. Answers on other connections are not ordered after another
/// connection's end.
fn wait_for_open_connections(broker: &BrokerHandle, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.test_support().open_connections() > n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(broker.test_support().open_connections(), n);
}

/// Waits (up to 10 s) until the broker holds `n` Fetches in flight.
fn wait_for_fetches_in_flight(broker: &BrokerHandle, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.fetches_in_flight() != n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(broker.fetches_in_flight(), n);
}

/// Issue 13: fetches that returned records and long polls that returned none are taken apart
/// (`take_fetch_latencies`; `take_fetch_latency` still merges both), and a parked Fetch is
/// counted in `fetches_in_flight` until answered, or until its connection gives it up.
#[test]
fn long_polls_are_split_from_data_fetches_and_parked_fetches_are_in_flight() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "split", 12);
    assert_eq!(produce(&mut c, "split", batch(4), 1), Some((0, 0)));
    assert_eq!(broker.fetches_in_flight(), 0);
    // Two data fetches, one long poll at the log end (300 ms, nothing).
    fetch(&mut c, "split", 0, 12);
    fetch(&mut c, "split", 2, 12);
    let (_, len) = long_poll(&mut c, "split", 4, 300, 1);
    assert_eq!(len, 0);
    sync(&mut c, "split");
    let taken = broker.take_fetch_latencies();
    assert_eq!((taken.with_records.count(), taken.without_records.count()), (2, 1), "{taken:?}");
    assert!(taken.without_records.quantile_ns(1.0) >= 250_000_000, "the long poll's wait: {taken:?}");
    assert!(taken.with_records.quantile_ns(1.0) < 250_000_000, "no wait in the data fetches: {taken:?}");
    assert_eq!(taken.all().count(), 3);

    // A Fetch parked at the log end is in flight until its answer is written.
    let parked =
        FetchRequest::default().with_max_wait_ms(2_000).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
            FetchTopic::default().with_topic(name("split")).with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(4)
                .with_partition_max_bytes(1 << 20)]),
        ]);
    let id = c.send(ApiKey::Fetch, 12, RequestKind::Fetch(parked.clone()));
    wait_for_fetches_in_flight(&broker, 1);
    // A produce on another connection wakes it with records: a data fetch.
    let mut p = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut p, "split", batch(1), 1), Some((0, 4)));
    let ResponseKind::Fetch(r) = c.receive(ApiKey::Fetch, 12, id) else { panic!() };
    assert!(r.responses[0].partitions[0].records.as_ref().is_some_and(|b| !b.is_empty()));
    sync(&mut c, "split");
    assert_eq!(broker.fetches_in_flight(), 0);
    assert_eq!(broker.take_fetch_latency().count(), 1, "take_fetch_latency merges both kinds");

    // A parked Fetch whose client resets the connection leaves the count when it is dropped.
    let mut r = Client::connect(broker.local_addr());
    r.send(
        ApiKey::Fetch,
        12,
        RequestKind::Fetch(parked.with_max_wait_ms(300).with_topics(vec![
            FetchTopic::default().with_topic(name("split")).with_partitions(vec![
                FetchPartition::default().with_partition(0).with_fetch_offset(5).with_partition_max_bytes(1 << 20),
            ]),
        ])),
    );
    wait_for_fetches_in_flight(&broker, 1);
    reset_on_close(&r.stream);
    drop(r);
    wait_for_fetches_in_flight(&broker, 0);
    broker.shutdown().unwrap();
}
