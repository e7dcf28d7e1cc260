//! The hand-framed Fetch response against the `kafka-protocol` codec and against real frames of
//! an Apache Kafka broker (`corpus/protocol/kafka-go-fixtures`), and its write path over sockets.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fetchbench::log::segment::SegmentFile;
use fetchbench::log::FileSlice;
use fetchbench::protocol::fetch_response::{
    AbortedTransaction, Chunk, FetchResponse, FetchableTopic, PartitionData, MAX_VERSION, MIN_VERSION,
};
use fetchbench::read_path::{ReadPathConfig, ReadPathKind};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction as KpAbortedTransaction, FetchableTopicResponse as KpTopic, PartitionData as KpPartition,
};
use kafka_protocol::messages::{FetchResponse as KpFetchResponse, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use proptest::prelude::*;

use crate::common;

/// A segment file holding `data` (an anonymous temp file).
fn segment_with(data: &[u8]) -> Arc<SegmentFile> {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    Arc::new(SegmentFile::from_file(f, "anonymous-temp-file".into()))
}

/// The same response as kafka-protocol's model, records read into memory.
fn to_kafka_protocol(resp: &FetchResponse) -> KpFetchResponse {
    let topics = resp
        .topics
        .iter()
        .map(|t| {
            // kafka-protocol's Uuid (from the `uuid` crate, not a dependency here) is made by
            // decoding a v13 topic: topic id, empty compact array, no tagged fields.
            let mut wire = t.topic_id.to_vec();
            wire.extend_from_slice(&[1, 0]);
            let mut kt = KpTopic::decode(&mut &wire[..], 13).unwrap();
            kt.topic = TopicName(StrBytes::from_string(t.name.clone()));
            kt.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut kp = KpPartition::default();
                    kp.partition_index = p.partition_index;
                    kp.error_code = p.error_code;
                    kp.high_watermark = p.high_watermark;
                    kp.last_stable_offset = p.last_stable_offset;
                    kp.log_start_offset = p.log_start_offset;
                    kp.aborted_transactions = p.aborted_transactions.as_ref().map(|v| {
                        v.iter()
                            .map(|a| {
                                let mut ka = KpAbortedTransaction::default();
                                ka.producer_id = a.producer_id.into();
                                ka.first_offset = a.first_offset;
                                ka
                            })
                            .collect()
                    });
                    kp.preferred_read_replica = p.preferred_read_replica.into();
                    // Kafka never sends a null record set (MemoryRecords.EMPTY).
                    kp.records =
                        Some(p.records.as_ref().map(|s| Bytes::from(s.read_to_vec().unwrap())).unwrap_or_default());
                    kp
                })
                .collect();
            kt
        })
        .collect();
    let mut k = KpFetchResponse::default();
    k.throttle_time_ms = resp.throttle_time_ms;
    k.error_code = resp.error_code;
    k.session_id = resp.session_id;
    k.responses = topics;
    k
}

/// kafka-protocol's frame: size prefix, response header, body.
fn kafka_protocol_frame(resp: &KpFetchResponse, version: i16, correlation_id: i32) -> Vec<u8> {
    let mut body = BytesMut::new();
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header.encode(&mut body, KpFetchResponse::header_version(version)).unwrap();
    resp.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// A multi-topic response over one segment file: records cut inside the file, an empty
/// (`None`) and a zero-length record set, null and non-empty aborted transactions, error codes.
fn sample(version: i16) -> FetchResponse {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let seg = segment_with(&data);
    let slice = |position, len| Some(FileSlice { segment: seg.clone(), position, len });
    let replica = if version >= 11 { 2 } else { -1 };
    FetchResponse {
        throttle_time_ms: 15,
        error_code: 0,
        session_id: if version >= 7 { 0x1234_5678 } else { 0 },
        topics: vec![
            FetchableTopic {
                name: "orders".into(),
                topic_id: *b"0123456789abcdef",
                partitions: vec![
                    PartitionData {
                        partition_index: 0,
                        high_watermark: 1000,
                        last_stable_offset: 1000,
                        log_start_offset: 10,
                        aborted_transactions: None,
                        preferred_read_replica: replica,
                        records: slice(100, 1500),
                        ..Default::default()
                    },
                    PartitionData {
                        partition_index: 1,
                        high_watermark: 5,
                        last_stable_offset: 3,
                        log_start_offset: 0,
                        aborted_transactions: Some(vec![
                            AbortedTransaction { producer_id: 42, first_offset: 3 },
                            AbortedTransaction { producer_id: 43, first_offset: 4 },
                        ]),
                        records: None,
                        ..Default::default()
                    },
                    PartitionData {
                        partition_index: 2,
                        error_code: 1, // OFFSET_OUT_OF_RANGE
                        high_watermark: 7,
                        last_stable_offset: 7,
                        log_start_offset: 0,
                        aborted_transactions: Some(vec![]),
                        records: slice(0, 0),
                        ..Default::default()
                    },
                ],
            },
            FetchableTopic {
                name: "a-much-longer-topic-name.with.dots_and_underscores".into(),
                topic_id: [0xfe; 16],
                partitions: vec![PartitionData {
                    partition_index: 17,
                    high_watermark: 1 << 40,
                    last_stable_offset: 1 << 40,
                    log_start_offset: 1 << 39,
                    aborted_transactions: None,
                    records: slice(3000, 1096),
                    ..Default::default()
                }],
            },
            FetchableTopic { name: "no-partitions".into(), topic_id: [1; 16], partitions: vec![] },
        ],
    }
}

#[test]
fn every_version_matches_kafka_protocol_byte_for_byte() {
    for version in MIN_VERSION..=MAX_VERSION {
        let ours = sample(version);
        let frame = ours.encode(version, 0x0102_0304).unwrap();
        let bytes = frame.read_to_vec().unwrap();
        assert_eq!(bytes.len() as u64, frame.size(), "v{version}");
        let theirs = kafka_protocol_frame(&to_kafka_protocol(&ours), version, 0x0102_0304);
        assert_eq!(bytes, theirs, "Fetch response v{version} differs from kafka-protocol's encoding");
        // Exactly the two non-empty record sets are left on disk.
        let files: Vec<u64> =
            frame.chunks().iter().filter_map(|c| if let Chunk::File(s) = c { Some(s.len) } else { None }).collect();
        assert_eq!(files, [1500, 1096], "v{version}");
    }
}

#[test]
fn empty_record_set_is_length_zero_not_null() {
    let resp = FetchResponse {
        topics: vec![FetchableTopic {
            name: "t".into(),
            partitions: vec![PartitionData { aborted_transactions: None, ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    };
    for version in MIN_VERSION..=MAX_VERSION {
        let frame = resp.encode(version, 1).unwrap();
        assert!(frame.chunks().iter().all(|c| matches!(c, Chunk::Bytes(_))));
        let bytes = frame.read_to_vec().unwrap();
        if version >= 12 {
            // ... aborted = null (varint 0), preferred replica, records = empty (varint 0 + 1),
            // partition tags, topic tags, response tags.
            assert_eq!(&bytes[bytes.len() - 9..], &[0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0]);
        } else {
            // ... records = empty: i32 length 0, not -1.
            assert_eq!(&bytes[bytes.len() - 4..], &[0, 0, 0, 0]);
        }
        let mut body = Bytes::from(bytes).slice(4..);
        ResponseHeader::decode(&mut body, KpFetchResponse::header_version(version)).unwrap();
        let decoded = KpFetchResponse::decode(&mut body, version).unwrap();
        assert_eq!(decoded.responses[0].partitions[0].records, Some(Bytes::new()), "v{version}");
    }
}

fn decode_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).expect("hex digit")).collect()
}

#[test]
fn real_kafka_fetch_v10_frames_are_reproduced_exactly() {
    let Some(corpus) = common::corpus() else { return };
    let dir = corpus.join("protocol/kafka-go-fixtures");
    let hex_files = common::files_with_suffix(&dir, ".hex");
    assert!(!hex_files.is_empty(), "no .hex frames in {}", dir.display());
    for hex_path in hex_files {
        let name = hex_path.file_name().unwrap().to_string_lossy().to_string();
        let original = decode_hex(&std::fs::read_to_string(&hex_path).unwrap());
        let records = std::fs::read(hex_path.with_extension("records.bin")).unwrap();
        assert_eq!(i32::from_be_bytes(original[..4].try_into().unwrap()) as usize, original.len() - 4, "{name}");

        let version = 10;
        let mut body = Bytes::from(original.clone()).slice(4..);
        let header = ResponseHeader::decode(&mut body, KpFetchResponse::header_version(version)).unwrap();
        let decoded = KpFetchResponse::decode(&mut body, version).unwrap();
        assert!(body.is_empty(), "{name}: {} trailing bytes", body.len());

        // The record sets, in order, are the broker's on-disk bytes in `.records.bin`.
        let seg = segment_with(&records);
        let mut position = 0u64;
        let mut ours = FetchResponse {
            throttle_time_ms: decoded.throttle_time_ms,
            error_code: decoded.error_code,
            session_id: decoded.session_id,
            topics: Vec::new(),
        };
        for t in &decoded.responses {
            let mut topic = FetchableTopic { name: t.topic.0.to_string(), ..Default::default() };
            for p in &t.partitions {
                let len = p.records.as_ref().map_or(0, |r| r.len() as u64);
                assert!(p.records.is_some(), "{name}: Kafka sent a null record set");
                topic.partitions.push(PartitionData {
                    partition_index: p.partition_index,
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    aborted_transactions: p.aborted_transactions.as_ref().map(|v| {
                        v.iter()
                            .map(|a| AbortedTransaction { producer_id: a.producer_id.0, first_offset: a.first_offset })
                            .collect()
                    }),
                    preferred_read_replica: p.preferred_read_replica.0,
                    records: Some(FileSlice { segment: seg.clone(), position, len }),
                });
                position += len;
            }
            ours.topics.push(topic);
        }
        assert_eq!(position, records.len() as u64, "{name}: .records.bin is not the frame's record sets");
        assert!(position > 0, "{name}: no records in the frame");

        let frame = ours.encode(version, header.correlation_id).unwrap();
        assert_eq!(frame.size(), original.len() as u64, "{name}");
        assert_eq!(frame.read_to_vec().unwrap(), original, "{name}: our encoding differs from Kafka's frame");
    }
}

#[test]
fn write_to_over_a_socketpair_gives_the_same_bytes_with_copy_and_sendfile() {
    for kind in [ReadPathKind::Copy, ReadPathKind::Sendfile] {
        let mut path = kind.create(&ReadPathConfig::default()).unwrap();
        for version in [MIN_VERSION, 10, 12, 13, MAX_VERSION] {
            let frame = sample(version).encode(version, 99).unwrap();
            let expected = frame.read_to_vec().unwrap();
            let (writer, mut reader) = UnixStream::pair().unwrap();
            let read = std::thread::spawn(move || {
                let mut got = Vec::new();
                reader.read_to_end(&mut got).unwrap();
                got
            });
            let sent = frame.write_to(writer.as_fd(), &mut path).unwrap();
            drop(writer);
            assert_eq!(sent, frame.size(), "{kind} v{version}");
            assert_eq!(read.join().unwrap(), expected, "{kind} v{version}");
        }
    }
}

#[test]
fn write_to_reports_a_closed_peer() {
    let mut path = ReadPathKind::Copy.create(&ReadPathConfig::default()).unwrap();
    let frame = sample(MAX_VERSION).encode(MAX_VERSION, 1).unwrap();
    let (writer, reader) = UnixStream::pair().unwrap();
    drop(reader);
    let err = frame.write_to(writer.as_fd(), &mut path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
}

/// Arbitrary responses over one 2 KiB segment file, with only the fields `version` can carry.
fn arb_response(seg: Arc<SegmentFile>) -> impl Strategy<Value = (i16, FetchResponse)> {
    let partition = (
        any::<(i32, i16, i64, i64, i64)>(),
        proptest::option::of(proptest::collection::vec(any::<(i64, i64)>(), 0..3)),
        any::<i32>(),
        proptest::option::of((0u64..2048, 0u64..2048)),
    );
    let topic = ("[a-z._-]{0,40}", any::<[u8; 16]>(), proptest::collection::vec(partition, 0..4));
    (MIN_VERSION..=MAX_VERSION, any::<(i32, i16, i32)>(), proptest::collection::vec(topic, 0..4)).prop_map(
        move |(version, (throttle_time_ms, error_code, session_id), topics)| {
            let topics = topics
                .into_iter()
                .map(|(name, topic_id, partitions)| FetchableTopic {
                    name,
                    topic_id,
                    partitions: partitions
                        .into_iter()
                        .map(|((partition_index, error_code, hw, lso, lso_start), aborted, replica, records)| {
                            PartitionData {
                                partition_index,
                                error_code,
                                high_watermark: hw,
                                last_stable_offset: lso,
                                log_start_offset: lso_start,
                                aborted_transactions: aborted.map(|v| {
                                    v.into_iter()
                                        .map(|(producer_id, first_offset)| AbortedTransaction {
                                            producer_id,
                                            first_offset,
                                        })
                                        .collect()
                                }),
                                preferred_read_replica: if version >= 11 { replica } else { -1 },
                                records: records.map(|(position, len)| FileSlice {
                                    segment: seg.clone(),
                                    position,
                                    len: len.min(2048 - position),
                                }),
                            }
                        })
                        .collect(),
                })
                .collect();
            let session_id = if version >= 7 { session_id } else { 0 };
            (version, FetchResponse { throttle_time_ms, error_code, session_id, topics })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn arbitrary_responses_match_kafka_protocol(
        (version, resp) in arb_response(segment_with(&(0..2048u32).map(|i| (i % 251) as u8).collect::<Vec<_>>())),
        correlation_id in any::<i32>(),
    ) {
        let frame = resp.encode(version, correlation_id).unwrap();
        let bytes = frame.read_to_vec().unwrap();
        prop_assert_eq!(bytes.len() as u64, frame.size());
        prop_assert!(frame.chunks().iter().all(|c| !c.is_empty()));
        let theirs = kafka_protocol_frame(&to_kafka_protocol(&resp), version, correlation_id);
        prop_assert_eq!(bytes, theirs, "v{}", version);
    }
}
