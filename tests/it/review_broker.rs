//! Adversarial review of the broker (issue 4) against Apache Kafka's behaviour. Each test names
//! the Kafka code it follows. Tests marked `#[ignore]` demonstrate open defects (the reason names
//! the bug); run them with `cargo test --test it review_broker -- --ignored`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, ProduceRequest,
    RequestKind, ResponseKind,
};

use crate::broker::{batch, fetch, metadata, name, start, Client};

const CORRUPT_MESSAGE: i16 = 2;
const INVALID_REQUEST: i16 = 42;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;
const INVALID_RECORD: i16 = 87;

/// Produces `records` to `topic`-0 with Produce v9, acks=1: the partition response.
fn produce_raw(client: &mut Client, topic: &str, records: Option<Vec<u8>>) -> (i16, i64) {
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

fn high_watermark(client: &mut Client, topic: &str) -> i64 {
    let (err, hw, _) = fetch(client, topic, 0, 11);
    assert_eq!(err, 0);
    hw
}

fn batch_at(timestamps: &[i64]) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for (i, ts) in timestamps.iter().enumerate() {
        b.append(*ts, Some(format!("k{i}").as_bytes()), Some(b"v"), &[]);
    }
    b.build().unwrap()
}

/// A legacy magic-1 message (offset, size, crc, magic 1, attributes, timestamp, null key, value).
fn legacy_v1_message(value: &[u8]) -> Vec<u8> {
    let mut body = vec![1u8, 0];
    body.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.extend_from_slice(&(value.len() as i32).to_be_bytes());
    body.extend_from_slice(value);
    let crc = crc32fast_ieee(&body);
    let mut out = Vec::new();
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// CRC-32 (IEEE), the checksum of legacy messages.
fn crc32fast_ieee(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

// ---------------------------------------------------------------------------------------------
// Produce: the record set of each partition (Kafka's `ProduceRequest.validateRecords`, called by
// `KafkaApis.handleProduceRequest` for v3+; its `InvalidRecordException` is INVALID_RECORD).
// ---------------------------------------------------------------------------------------------

/// Kafka: "Produce requests with version N are only allowed to contain exactly one record
/// batch" (INVALID_RECORD), nothing appended. fetchbench appended both batches.
#[test]
fn r01_two_batches_in_one_partition_are_invalid_record() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "two-batches", 12);
    let mut records = batch(2);
    records.extend(batch(3));
    assert_eq!(produce_raw(&mut c, "two-batches", Some(records)), (INVALID_RECORD, -1));
    assert_eq!(high_watermark(&mut c, "two-batches"), 0, "nothing appended");
    broker.shutdown().unwrap();
}

/// Kafka: "must have at least one record batch" (INVALID_RECORD) for an empty record set, and
/// for a set whose only batch claims more bytes than were sent (the batch iterator of
/// `MemoryRecords` yields nothing then). fetchbench answered CORRUPT_MESSAGE.
#[test]
fn r02_empty_or_short_record_set_is_invalid_record() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "empty-set", 12);
    assert_eq!(produce_raw(&mut c, "empty-set", Some(Vec::new())).0, INVALID_RECORD);
    let mut short = batch(3);
    short.truncate(short.len() - 1);
    assert_eq!(produce_raw(&mut c, "empty-set", Some(short)).0, INVALID_RECORD);
    // A batch claiming 1 GiB, 40 bytes sent.
    let mut huge = batch(1);
    huge[8..12].copy_from_slice(&(1i32 << 30).to_be_bytes());
    assert_eq!(produce_raw(&mut c, "empty-set", Some(huge)).0, INVALID_RECORD);
    // A length below the smallest record (14): CorruptRecordException, CORRUPT_MESSAGE.
    let mut tiny = batch(1);
    tiny[8..12].copy_from_slice(&5i32.to_be_bytes());
    assert_eq!(produce_raw(&mut c, "empty-set", Some(tiny)).0, CORRUPT_MESSAGE);
    // Magic 7: CorruptRecordException ("Invalid magic found in record").
    let mut magic = batch(1);
    magic[16] = 7;
    assert_eq!(produce_raw(&mut c, "empty-set", Some(magic)).0, CORRUPT_MESSAGE);
    assert_eq!(high_watermark(&mut c, "empty-set"), 0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Kafka: "Produce requests with version N are only allowed to contain record batches with
/// magic version 2" (INVALID_RECORD). fetchbench answered CORRUPT_MESSAGE.
#[test]
fn r03_legacy_magic_is_invalid_record() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "legacy", 12);
    assert_eq!(produce_raw(&mut c, "legacy", Some(legacy_v1_message(b"hello"))).0, INVALID_RECORD);
    assert_eq!(high_watermark(&mut c, "legacy"), 0);
    broker.shutdown().unwrap();
}

/// Kafka trims bytes after the last whole batch (`UnifiedLog.trimInvalidBytes`) instead of
/// refusing the set: a batch followed by a few stray bytes is appended.
#[test]
fn r04_stray_bytes_after_the_batch_are_trimmed_as_kafka_does() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "stray", 12);
    let mut records = batch(2);
    records.extend_from_slice(&[0, 0, 0, 0, 0]);
    assert_eq!(produce_raw(&mut c, "stray", Some(records)), (0, 0));
    let (err, hw, recs) = fetch(&mut c, "stray", 0, 11);
    assert_eq!((err, hw, recs.len()), (0, 2, 2));
    broker.shutdown().unwrap();
}

/// acks=0 with one partition failing: the good partition is appended, the connection is closed
/// with no response (Kafka's `KafkaApis.handleProduceRequest`: `closeConnection` when
/// `errorInResponse`).
#[test]
fn r05_acks0_partial_failure_appends_the_good_partition_and_closes() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "acks0", 12);
    let req =
        ProduceRequest::default().with_acks(0).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
            .with_name(name("acks0"))
            .with_partition_data(vec![
                PartitionProduceData::default().with_index(0).with_records(Some(Bytes::from(batch(2)))),
                PartitionProduceData::default().with_index(7).with_records(Some(Bytes::from(batch(2)))),
            ])]);
    c.send(ApiKey::Produce, 9, RequestKind::Produce(req));
    let mut buf = [0u8; 16];
    assert_eq!(c.stream.read(&mut buf).unwrap(), 0, "closed without a response");
    let mut c2 = Client::connect(broker.local_addr());
    assert_eq!(high_watermark(&mut c2, "acks0"), 2);
    broker.shutdown().unwrap();
}

// ---------------------------------------------------------------------------------------------
// ListOffsets
// ---------------------------------------------------------------------------------------------

fn list_offsets(client: &mut Client, version: i16, topic: &str, partitions: &[(i32, i64, i32)]) -> ListOffsetsResponse {
    let req = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![ListOffsetsTopic::default()
        .with_name(name(topic))
        .with_partitions(
            partitions
                .iter()
                .map(|&(p, ts, epoch)| {
                    ListOffsetsPartition::default()
                        .with_partition_index(p)
                        .with_timestamp(ts)
                        .with_current_leader_epoch(epoch)
                })
                .collect(),
        )]);
    let ResponseKind::ListOffsets(r) = client.call(ApiKey::ListOffsets, version, RequestKind::ListOffsets(req)) else {
        panic!()
    };
    r
}

/// KIP-734 (ListOffsets v7+): timestamp -3 (`MAX_TIMESTAMP`) is the offset and timestamp of the
/// record with the largest timestamp (Kafka's `UnifiedLog.fetchOffsetByTimestamp`: the segment
/// with the largest `maxTimestampSoFar`, the first record carrying it). The Java admin client's
/// `OffsetSpec.maxTimestamp()` sends it. fetchbench answered INVALID_REQUEST.
#[test]
fn r06_list_offsets_max_timestamp() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "maxts", 12);
    let empty = list_offsets(&mut c, 7, "maxts", &[(0, -3, -1)]);
    let p = &empty.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.timestamp), (0, -1, -1), "empty log: no record");
    assert_eq!(produce_raw(&mut c, "maxts", Some(batch_at(&[1_000, 5_000, 2_000]))).0, 0);
    assert_eq!(produce_raw(&mut c, "maxts", Some(batch_at(&[3_000, 4_000]))).0, 0);
    let r = list_offsets(&mut c, 7, "maxts", &[(0, -3, -1)]);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.timestamp, p.leader_epoch), (0, 1, 5_000, 0));
    broker.shutdown().unwrap();
}

/// KIP-1005 (ListOffsets v9+): timestamp -5 (`LATEST_TIERED_TIMESTAMP`) on a log without
/// tiered storage is offset -1, timestamp -1, leader epoch -1, no error (Kafka's
/// `UnifiedLog.fetchOffsetByTimestamp`, `remoteLogEnabled()` false). fetchbench answered
/// INVALID_REQUEST.
#[test]
fn r07_list_offsets_latest_tiered_without_tiered_storage() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "tiered", 12);
    assert_eq!(produce_raw(&mut c, "tiered", Some(batch(3))).0, 0);
    let r = list_offsets(&mut c, 9, "tiered", &[(0, -5, -1)]);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.timestamp, p.leader_epoch), (0, -1, -1, -1));
    broker.shutdown().unwrap();
}

/// Kafka (`ReplicaManager.fetchOffset`): a partition named twice in one ListOffsets request
/// gets INVALID_REQUEST in every occurrence. fetchbench answered each one.
#[test]
fn r08_list_offsets_duplicate_partitions_are_invalid_request() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "dups", 12);
    let r = list_offsets(&mut c, 7, "dups", &[(0, -1, -1), (0, -2, -1)]);
    let codes: Vec<i16> = r.topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, vec![INVALID_REQUEST, INVALID_REQUEST]);
    broker.shutdown().unwrap();
}

/// KIP-320: ListOffsets v4+ carries `current_leader_epoch`; Kafka checks it
/// (`Partition.localLogWithEpochOrThrow`): older is FENCED_LEADER_EPOCH, newer
/// UNKNOWN_LEADER_EPOCH. fetchbench ignored it (OffsetForLeaderEpoch did check).
#[test]
fn r09_list_offsets_checks_current_leader_epoch() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "lo-epoch", 12);
    let r = list_offsets(&mut c, 7, "lo-epoch", &[(0, -1, 3)]);
    assert_eq!(r.topics[0].partitions[0].error_code, UNKNOWN_LEADER_EPOCH);
    let r = list_offsets(&mut c, 7, "lo-epoch", &[(0, -1, 0)]);
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    broker.shutdown().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Fetch
// ---------------------------------------------------------------------------------------------

fn fetch_with_epoch(client: &mut Client, topic: &str, current_leader_epoch: i32) -> FetchResponse {
    let req = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_current_leader_epoch(current_leader_epoch)
            .with_partition_max_bytes(1 << 20)]),
    ]);
    let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
    r
}

/// KIP-320: Fetch v9+ carries `current_leader_epoch`; Kafka answers a newer one with
/// UNKNOWN_LEADER_EPOCH and an older one with FENCED_LEADER_EPOCH
/// (`Partition.fetchRecords` -> `localLogWithEpochOrThrow`), with no records. fetchbench served
/// the records whatever the epoch.
#[test]
fn r10_fetch_checks_current_leader_epoch() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "f-epoch", 12);
    assert_eq!(produce_raw(&mut c, "f-epoch", Some(batch(2))).0, 0);
    let r = fetch_with_epoch(&mut c, "f-epoch", 5);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, UNKNOWN_LEADER_EPOCH);
    assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));
    let r = fetch_with_epoch(&mut c, "f-epoch", 0);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert!(!p.records.as_ref().unwrap().is_empty());
    let r = fetch_with_epoch(&mut c, "f-epoch", -1);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let _ = FENCED_LEADER_EPOCH;
    broker.shutdown().unwrap();
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

// ---------------------------------------------------------------------------------------------
// Metadata
// ---------------------------------------------------------------------------------------------

/// Kafka reports `is_internal` only for its internal topics (`Topic.isInternal`:
/// `__consumer_offsets`, `__transaction_state`, `__share_group_state`); a user topic whose name
/// starts with `__` is not internal (the Java consumer's `exclude.internal.topics` would hide
/// it from pattern subscriptions). fetchbench flagged every `__` topic.
#[test]
fn r12_user_topic_starting_with_two_underscores_is_not_internal() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    let r = metadata(&mut c, "__my_events", 12);
    assert_eq!(r.topics[0].error_code, 0);
    assert!(!r.topics[0].is_internal, "a user topic");
    let r = metadata(&mut c, "__consumer_offsets", 12);
    assert!(r.topics[0].is_internal);
    broker.shutdown().unwrap();
}

/// A Metadata request naming `__consumer_offsets` before any group committed (kcat
/// `-L -t __consumer_offsets`, a monitoring tool) auto-created it with `num.partitions` (1)
/// partitions and the broker's default (delete) cleanup policy; the coordinator later added
/// partitions 1..49 compacted, leaving partition 0 deleted by retention. Kafka's
/// `AutoTopicCreationManager.creatableTopic` creates it as the coordinator does:
/// `offsets.topic.num.partitions` (50) partitions with `groupMetadataTopicConfigs` (compacted).
#[test]
fn r13_metadata_auto_creates_consumer_offsets_as_the_coordinator_does() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    let r = metadata(&mut c, "__consumer_offsets", 12);
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(r.topics[0].partitions.len(), 50);
    {
        let support = broker.test_support();
        for p in [0, 49] {
            assert!(support.log_config("__consumer_offsets", p).unwrap().is_compact(), "partition {p}");
        }
    }
    broker.shutdown().unwrap();
}

/// A tiny compressed batch whose records decompress to ~200 MB (one record of zeros; the batch
/// itself is a few KiB, under `max.message.bytes`). Validation decompresses the whole records
/// section into memory inside [`PartitionLog::append`], under the broker-wide log lock, so
/// every other connection's Fetch/Produce/Metadata waits while it runs. Kafka validates with a
/// streaming iterator that skips keys and values (`LogValidator`, `skipKeyValueIterator`) under
/// the partition's own lock only.
#[test]
#[ignore = "open: produce validation decompresses whole batches under the broker-wide log lock; a few KiB stall every other client (needs per-partition locking or validation outside the lock)"]
fn r14_decompression_bomb_stalls_other_clients() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "bomb", 12);
    metadata(&mut c, "victim", 12);
    let zeros = vec![0u8; 200 << 20];
    let mut b = BatchBuilder::new(0, Compression::Zstd);
    b.append(1_700_000_000_000, Some(b"k"), Some(&zeros), &[]);
    let bomb = b.build().unwrap();
    drop(zeros);
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let addr = broker.local_addr();
    let bomber = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        for _ in 0..5 {
            produce_raw(&mut c, "bomb", Some(bomb.clone()));
        }
    });
    let mut victim = Client::connect(broker.local_addr());
    let mut worst = Duration::ZERO;
    while !bomber.is_finished() {
        let t = Instant::now();
        high_watermark(&mut victim, "victim");
        worst = worst.max(t.elapsed());
    }
    bomber.join().unwrap();
    eprintln!("worst victim fetch latency while a bomb was produced: {worst:?}");
    assert!(worst < Duration::from_millis(50), "a fetch of another topic waited {worst:?}");
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

/// ListOffsets on a `LogAppendTime` topic: by timestamp and `MAX_TIMESTAMP` use the append time
/// the broker stamped (Kafka: a record of a LogAppendTime batch has the batch's max timestamp).
#[test]
fn r17_list_offsets_on_a_log_append_time_topic() {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::CreateTopicsRequest;
    use kafka_protocol::protocol::StrBytes;

    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    let req = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![CreatableTopic::default()
        .with_name(name("lat"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("message.timestamp.type"))
            .with_value(Some(StrBytes::from_static_str("LogAppendTime")))])]);
    let ResponseKind::CreateTopics(r) = c.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) else {
        panic!()
    };
    assert_eq!(r.topics[0].error_code, 0);
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // Create times far in the past: the broker's append time replaces them.
    assert_eq!(produce_raw(&mut c, "lat", Some(batch_at(&[1_000, 2_000]))).0, 0);
    assert_eq!(produce_raw(&mut c, "lat", Some(batch_at(&[3_000]))).0, 0);
    let r = list_offsets(&mut c, 7, "lat", &[(0, before - 1, -1)]);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset), (0, 0));
    assert!(p.timestamp >= before, "append time {}", p.timestamp);
    let r = list_offsets(&mut c, 7, "lat", &[(0, -3, -1)]);
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert!(p.timestamp >= before, "append time {}", p.timestamp);
    assert!(p.offset == 0 || p.offset == 2, "first record with the max timestamp: {}", p.offset);
    broker.shutdown().unwrap();
}

/// KIP-511: ApiVersions v3+ carries `client_software_name` / `client_software_version`; Kafka
/// answers INVALID_REQUEST (42, no api keys) when either does not match
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` (`ApiVersionsRequest.isValid`, checked by
/// `KafkaApis.handleApiVersionsRequest`), e.g. an empty name. fetchbench answers NONE. Real
/// clients send valid names (librdkafka, kafka-python, the Java client, fetchbench's own client),
/// so this matters only to conformance; fixing it changes what the existing tests in broker.rs,
/// broker_apis.rs and serve_process.rs rely on (they send `ApiVersionsRequest::default()`, empty
/// names, at v3).
#[test]
#[ignore = "open: ApiVersions v3+ does not validate client_software_name/version (Kafka: INVALID_REQUEST); existing tests send empty names at v3 and need updating with the fix"]
fn r18_api_versions_v3_validates_client_software_name() {
    use kafka_protocol::messages::ApiVersionsRequest;
    use kafka_protocol::protocol::StrBytes;

    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    let ok = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("librdkafka"))
        .with_client_software_version(StrBytes::from_static_str("2.0.2"));
    let ResponseKind::ApiVersions(r) = c.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ok)) else { panic!() };
    assert_eq!(r.error_code, 0);
    for (software, version) in [("", "1.0"), ("my client", "1.0"), ("ok", "-1")] {
        let bad = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(software))
            .with_client_software_version(StrBytes::from_static_str(version));
        let ResponseKind::ApiVersions(r) = c.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(bad)) else {
            panic!()
        };
        assert_eq!(r.error_code, INVALID_REQUEST, "{software:?} {version:?}");
        assert!(r.api_keys.is_empty());
    }
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

/// Kafka caps a consumer Fetch at the broker's `fetch.max.bytes` (default 57671680 = 55 MiB;
/// `KafkaApis.handleFetchRequest`: `min(request max_bytes, fetch.max.bytes, quota window)`,
/// `fetch.min.bytes` capped the same way). fetchbench honoured any `max_bytes`: a consumer
/// configured for throughput (`fetch.max.bytes` and `max.partition.fetch.bytes` at
/// 2147483647, as benchmarks do) over partitions holding more than 2 GiB got a response too
/// large to frame, so the connection was closed on every fetch and the consumer never advanced.
/// Here: 3 partitions x 20 MB, everything asked for at once.
#[test]
fn r20_fetch_response_is_capped_at_kafkas_fetch_max_bytes() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::CreateTopicsRequest;

    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let mut c = Client::connect(broker.local_addr());
    let req = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![CreatableTopic::default()
        .with_name(name("big"))
        .with_num_partitions(3)
        .with_replication_factor(1)]);
    let ResponseKind::CreateTopics(r) = c.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) else {
        panic!()
    };
    assert_eq!(r.topics[0].error_code, 0);
    let value = vec![b'x'; 999_000];
    let one = {
        let mut b = BatchBuilder::new(0, Compression::None);
        b.append(1_700_000_000_000, Some(b"k"), Some(&value), &[]);
        b.build().unwrap()
    };
    for p in 0..3 {
        for _ in 0..20 {
            let req = ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![
                TopicProduceData::default().with_name(name("big")).with_partition_data(vec![
                    PartitionProduceData::default().with_index(p).with_records(Some(Bytes::from(one.clone()))),
                ]),
            ]);
            let ResponseKind::Produce(r) = c.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        }
    }
    let req = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(i32::MAX).with_topics(vec![
        FetchTopic::default().with_topic(name("big")).with_partitions(
            (0..3)
                .map(|p| {
                    FetchPartition::default().with_partition(p).with_fetch_offset(0).with_partition_max_bytes(i32::MAX)
                })
                .collect(),
        ),
    ]);
    let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
    let total: usize = r.responses[0].partitions.iter().map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum();
    assert!(total > 0);
    assert!(total <= 57_671_680, "{total} bytes in one response, over Kafka's fetch.max.bytes");
    broker.shutdown().unwrap();
}

/// `UNKNOWN_LEADER_EPOCH` is error code 75 in Kafka (`Errors.UNKNOWN_LEADER_EPOCH(75)`); 76 is
/// `UNSUPPORTED_COMPRESSION_TYPE`, which is not retriable. fetchbench's `errors.rs` had 76, so
/// OffsetForLeaderEpoch answered a client ahead of the broker with "unsupported compression type"
/// (and `tests/it/broker_apis.rs` asserted 76).
#[test]
fn r21_unknown_leader_epoch_is_75() {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
    use kafka_protocol::messages::OffsetForLeaderEpochRequest;

    assert_eq!(fetchbench::broker::errors::UNKNOWN_LEADER_EPOCH, 75);
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "olep", 12);
    let req = OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
        .with_topic(name("olep"))
        .with_partitions(vec![OffsetForLeaderPartition::default()
            .with_partition(0)
            .with_current_leader_epoch(3)
            .with_leader_epoch(0)])]);
    let ResponseKind::OffsetForLeaderEpoch(r) =
        c.call(ApiKey::OffsetForLeaderEpoch, 4, RequestKind::OffsetForLeaderEpoch(req))
    else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, 75);
    broker.shutdown().unwrap();
}

/// A `uring-splice` read path raises its pipe to 1 MiB with `F_SETPIPE_SZ`, and an unprivileged
/// process may hold `fs.pipe-user-pages-soft` pages (16384 = 64 MiB) of pipe buffers. Each
/// connection made its path when it opened, so from about the 64th concurrent connection on,
/// every new one was closed before its first request (even ApiVersions). Fixed: the path is made
/// at the connection's first Fetch response, so connections that never fetch hold no pipe
/// (consumers still need one each: 64 concurrent fetching connections unprivileged). Root is
/// exempt from the limit, so the old failure shows only when run unprivileged, e.g.
/// `setpriv --reuid=65534 --regid=65534 --clear-groups target/debug/deps/it-* review_broker::r22`.
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

/// KIP-227 as Kafka's `FetchManager.newContext` decides: a fetch with session epoch 0 (INITIAL)
/// or -1 (FINAL) is a full fetch whatever `session_id` it names (Kafka closes that session and
/// answers sessionless or with a new one); any other epoch is incremental and, with no such
/// session, FETCH_SESSION_ID_NOT_FOUND (70) -- also with session id 0. fetchbench refused every
/// request naming a session and served incremental epochs of session 0.
#[test]
fn r23_fetch_session_epochs_as_kafka() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "sess", 12);
    assert_eq!(produce_raw(&mut c, "sess", Some(batch(2))).0, 0);
    let mut ask = |session_id: i32, session_epoch: i32| {
        let req = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_id(session_id)
            .with_session_epoch(session_epoch)
            .with_topics(vec![FetchTopic::default().with_topic(name("sess")).with_partitions(vec![
                FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20),
            ])]);
        let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
        let records = r.responses.first().and_then(|t| t.partitions[0].records.as_ref()).map_or(0, |b| b.len());
        (r.error_code, r.session_id, records > 0)
    };
    assert_eq!(ask(0, -1), (0, 0, true));
    assert_eq!(ask(0, 0), (0, 0, true));
    assert_eq!(ask(1234, -1), (0, 0, true), "FINAL epoch: sessionless full fetch");
    assert_eq!(ask(1234, 0), (0, 0, true), "INITIAL epoch: full fetch, no session kept");
    assert_eq!(ask(1234, 3), (70, 0, false));
    assert_eq!(ask(0, 3), (70, 0, false));
    broker.shutdown().unwrap();
}

/// Kafka 4.0 (KIP-1030) defaults `log.message.timestamp.after.max.ms` to 3600000 (1 hour): a
/// CreateTime record stamped more than an hour ahead of the broker's clock is refused with
/// INVALID_TIMESTAMP (32) (`LogValidator.validateTimestamp`; `before.max.ms` stays unbounded).
/// fetchbench has neither config and accepts any timestamp, so such a record later moves
/// time-based retention and ListOffsets by timestamp.
#[test]
#[ignore = "open: message.timestamp.after.max.ms (Kafka 4 default 1 h) / before.max.ms not implemented in the log layer (LogConfig + PartitionLog::append validation)"]
fn r24_record_an_hour_ahead_is_invalid_timestamp() {
    const INVALID_TIMESTAMP: i16 = 32;
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "future", 12);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert_eq!(produce_raw(&mut c, "future", Some(batch_at(&[now + 2 * 3_600_000]))).0, INVALID_TIMESTAMP);
    assert_eq!(produce_raw(&mut c, "future", Some(batch_at(&[now + 60_000]))).0, 0);
    broker.shutdown().unwrap();
}

/// Compressed batches whose records section is garbage (valid CRC, every codec), or decompresses
/// to bytes that are not records: refused with an error code, nothing appended, no panic.
#[test]
fn r25_compressed_batches_with_bad_inner_records_are_refused() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let mut c = Client::connect(broker.local_addr());
    metadata(&mut c, "badz", 12);
    let recrc = |b: &mut Vec<u8>| {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    };
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let mut b = BatchBuilder::new(0, codec);
        for i in 0..20 {
            b.append(1_700_000_000_000, Some(format!("k{i}").as_bytes()), Some(b"some value bytes"), &[]);
        }
        let good = b.build().unwrap();
        // Garbage in the middle of the compressed stream.
        let mut garbled = good.clone();
        let mid = 61 + (garbled.len() - 61) / 2;
        for byte in &mut garbled[mid..(mid + 8).min(good.len())] {
            *byte ^= 0x5a;
        }
        recrc(&mut garbled);
        // The compressed stream cut short (batch length adjusted).
        let mut cut = good.clone();
        cut.truncate(good.len() - 6);
        let len = (cut.len() - 12) as i32;
        cut[8..12].copy_from_slice(&len.to_be_bytes());
        recrc(&mut cut);
        // A record count larger than the records present.
        let mut count = good.clone();
        count[57..61].copy_from_slice(&21i32.to_be_bytes());
        count[23..27].copy_from_slice(&20i32.to_be_bytes());
        recrc(&mut count);
        for (what, bad) in [("garbled", garbled), ("cut", cut), ("count", count)] {
            let (err, _) = produce_raw(&mut c, "badz", Some(bad));
            assert_ne!(err, 0, "{codec:?} {what}");
        }
    }
    assert_eq!(high_watermark(&mut c, "badz"), 0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
