//! The drain consumer (`fetchbench.fetch.mode=drain`, `client::consumer::drain`) against the
//! decoding consumer and kcat on the same data: real Fetch v10 responses of an Apache Kafka
//! broker (the kafka-go fixtures of the corpus), a crafted record set with compaction gaps,
//! control batches and an aborted transaction, and the embedded broker under both server
//! models with every codec and a size limit that cuts batches. Exact means: the same
//! partitions, the same offsets, the same next positions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::client::consumer::drain::{read_fetch_body, read_fetch_frame, CrcCheck};
use fetchbench::client::consumer::fetcher::{parse_records, select_batches};
use fetchbench::client::consumer::{Consumer, ConsumerConfig, DrainedBatch, TopicPartition};
use fetchbench::log::batch::{BatchError, Compression};
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::common;

const WAIT: Duration = Duration::from_secs(30);

/// The offsets a drained batch hands out (dense batches: every offset of its span).
fn offsets_of(batches: &[DrainedBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            assert!(b.is_dense(), "{b:?}");
            b.first_offset..=b.last_offset
        })
        .collect()
}

/// Real Kafka bytes: every magic 2 partition of the corpus's Fetch v10 responses drains to the
/// batches whose records the full decoder returns, with every CRC checked; the magic 0/1 ones
/// are refused by name.
#[test]
fn corpus_fetch_v10_responses_drain_to_the_decoded_records() {
    let Some(corpus) = common::corpus() else { return };
    let files = common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".hex");
    assert_eq!(files.len(), 11);
    let (mut drained, mut refused) = (0, 0);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let frame = decode_hex(&std::fs::read_to_string(&path).unwrap());
        let mut src: &[u8] = &frame;
        let mut counter = 0;
        let (_, response) = read_fetch_frame(&mut src, 1 << 30, 10, CrcCheck::All, &mut counter).unwrap();
        assert!(src.is_empty(), "{name}: the whole frame read");
        for (topic, parts) in response.topics {
            let topic: Arc<str> = topic.into();
            for p in parts {
                let records = frame_records(&frame, &topic, p.partition);
                let decoded = parse_records(&topic, p.partition, 0, records, true, None).unwrap();
                match &p.error {
                    Some(BatchError::UnsupportedMagic { .. }) => {
                        refused += 1;
                        continue;
                    }
                    Some(e) => panic!("{name}: {e}"),
                    None => {}
                }
                assert!(p.batches.iter().all(|b| b.crc_checked), "{name}");
                let (batches, next) = select_batches(&topic, p.partition, 0, p, false).unwrap();
                let want: Vec<i64> = decoded.records.iter().map(|r| r.offset).collect();
                assert_eq!(offsets_of(&batches), want, "{name} partition");
                assert_eq!(next, decoded.next_offset, "{name}");
                drained += batches.len();
            }
        }
    }
    assert!(drained > 5 && refused > 0, "drained {drained} batches, refused {refused} legacy sets");
}

fn decode_hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// The record set of `topic`-`partition` in a Fetch v10 response frame, by the full decoder.
fn frame_records(frame: &[u8], topic: &str, partition: i32) -> Bytes {
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;
    let mut body = Bytes::copy_from_slice(&frame[4..]);
    ResponseHeader::decode(&mut body, 0).unwrap();
    let r = FetchResponse::decode(&mut body, 10).unwrap();
    let t = r.responses.iter().find(|t| t.topic.as_str() == topic).unwrap();
    t.partitions.iter().find(|p| p.partition_index == partition).unwrap().records.clone().unwrap_or_default()
}

/// A crafted record set (compaction gaps, an emptied batch, an aborted transaction, a control
/// batch, a cut last batch), drained from every fetch offset, under both isolation levels:
/// the offsets and next positions of the decoding consumer's rules.
#[test]
fn a_gappy_transactional_record_set_drains_as_it_decodes() {
    let set = Bytes::from(crate::consumer::gappy_record_set());
    let topic: Arc<str> = "t".into();
    let aborted = [AbortedTransaction::default().with_producer_id(ProducerId(7)).with_first_offset(8)];
    for cut in [0, 5] {
        let bytes = set.slice(..set.len() - cut);
        for from in 0..12 {
            for read_committed in [false, true] {
                let ab = read_committed.then_some(&aborted[..]);
                let decoded = parse_records(&topic, 0, from, bytes.clone(), true, ab).unwrap();
                let body = response_body(bytes.clone(), &aborted);
                let mut src: &[u8] = &body;
                let mut counter = 0;
                let d = read_fetch_body(&mut src, body.len(), 12, CrcCheck::All, &mut counter).unwrap();
                let p = d.topics.into_iter().next().unwrap().1.into_iter().next().unwrap();
                assert_eq!(p.partial_tail, cut > 0);
                let (batches, next) = select_batches(&topic, 0, from, p, read_committed).unwrap();
                let label = format!("from {from}, cut {cut}, read_committed {read_committed}");
                assert_eq!(next, decoded.next_offset, "{label}");
                // Compacted batches: every decoded record lies in a handed-out batch; a batch's
                // count is exact when it starts at or after the fetch offset, and at most its
                // span when it straddles it (its header cannot say which records are left).
                for b in &batches {
                    let inside =
                        decoded.records.iter().filter(|r| (b.first_offset..=b.last_offset).contains(&r.offset));
                    let n = inside.count() as u64;
                    if b.first_offset == b.base_offset {
                        assert_eq!(b.records_from_first(), n, "{label}: {b:?}");
                    } else {
                        assert!(b.records_from_first() >= n, "{label}: {b:?}");
                    }
                }
                for r in &decoded.records {
                    assert!(
                        batches.iter().any(|b| (b.first_offset..=b.last_offset).contains(&r.offset)),
                        "{label}: offset {}",
                        r.offset
                    );
                }
            }
        }
    }
}

fn response_body(records: Bytes, aborted: &[AbortedTransaction]) -> Vec<u8> {
    let r = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(TopicName(StrBytes::from_static_str("t")))
        .with_partitions(vec![PartitionData::default()
            .with_partition_index(0)
            .with_high_watermark(12)
            .with_last_stable_offset(12)
            .with_aborted_transactions(Some(aborted.to_vec()))
            .with_records(Some(records))])]);
    let mut buf = bytes::BytesMut::new();
    r.encode(&mut buf, 12).unwrap();
    buf.to_vec()
}

/// Reads every partition of `topic` from the start to `ends` with our consumer in `mode`;
/// the `(partition, offset)` pairs it handed out, in order per partition.
fn consume_all(addr: &str, topic: &str, ends: &[i64], pairs: &[(&str, &str)]) -> BTreeSet<(i32, i64)> {
    let mut cc = ConsumerConfig::new(addr.to_string());
    cc.set("fetch.max.wait.ms", "50").unwrap();
    for (k, v) in pairs {
        cc.set(k, v).unwrap();
    }
    let drain = cc.drain_checks().is_some();
    let mut c = Consumer::new(cc).unwrap();
    let tps: Vec<TopicPartition> = (0..ends.len() as i32).map(|p| (topic.to_string(), p)).collect();
    c.assign(&tps).unwrap();
    c.seek_to_beginning(&tps).unwrap();
    let mut got = BTreeSet::new();
    let mut last = vec![-1i64; ends.len()];
    let deadline = Instant::now() + WAIT;
    while tps.iter().zip(ends).any(|(tp, &end)| c.position(tp).unwrap() < end) {
        assert!(Instant::now() < deadline, "{pairs:?}: not at the end after {WAIT:?}");
        let offsets: Vec<(i32, i64)> = if drain {
            c.poll_batches(Duration::from_millis(100))
                .unwrap()
                .iter()
                .flat_map(|b| {
                    assert!(b.is_dense(), "{b:?}");
                    (b.first_offset..=b.last_offset).map(move |o| (b.partition, o))
                })
                .collect()
        } else {
            c.poll(Duration::from_millis(100)).unwrap().iter().map(|r| (r.partition, r.offset)).collect()
        };
        for (p, o) in offsets {
            assert!(o > last[p as usize], "{pairs:?}: partition {p} offset {o} after {}", last[p as usize]);
            last[p as usize] = o;
            assert!(got.insert((p, o)));
        }
    }
    got
}

/// Produces `batches` batches per partition (every codec in turn, 40 records of 300-byte
/// values each) to `topic`; the partitions' end offsets.
fn produce_backlog(addr: std::net::SocketAddr, topic: &str, partitions: i32, batches: usize) -> Vec<i64> {
    let codecs = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];
    let value = "v".repeat(300);
    let values: Vec<&str> = (0..40).map(|_| value.as_str()).collect();
    let mut ends = vec![0; partitions as usize];
    for b in 0..batches {
        for p in 0..partitions {
            let base = crate::consumer_positions::produce_compressed(addr, topic, p, &values, codecs[b % codecs.len()]);
            ends[p as usize] = base + values.len() as i64;
        }
    }
    ends
}

/// The embedded broker under each server model: the drain consumer (CRC all, 1/3, none; a
/// partition size limit that cuts batches) hands out exactly the offsets the decoding consumer
/// and kcat do.
#[test]
fn the_drain_consumer_reads_what_the_decoding_consumer_and_kcat_read() {
    let kcat = common::kcat_available();
    for model in ["threaded", "uring"] {
        let dir = tempfile::tempdir().unwrap();
        let broker = common::start_group_broker(dir.path(), "127.0.0.1:0".parse().unwrap(), |c| {
            c.num_partitions = 3;
            if model == "uring" {
                c.server_model = fetchbench::broker::ServerModel::Uring;
                c.read_path = fetchbench::read_path::ReadPathKind::UringSplice;
            }
        });
        let addr = broker.local_addr();
        let ends = produce_backlog(addr, "drained", 3, 12);
        let decoded = consume_all(&addr.to_string(), "drained", &ends, &[]);
        assert_eq!(decoded.len() as i64, ends.iter().sum::<i64>(), "{model}: the decoding consumer read everything");
        for pairs in [
            &[("fetchbench.fetch.mode", "drain"), ("fetchbench.drain.crc", "all")][..],
            &[("fetchbench.fetch.mode", "drain"), ("fetchbench.drain.crc", "1/3")],
            &[("fetchbench.fetch.mode", "drain"), ("check.crcs", "false")],
            &[("fetchbench.fetch.mode", "drain"), ("max.partition.fetch.bytes", "5000"), ("max.poll.records", "7")],
        ] {
            assert_eq!(consume_all(&addr.to_string(), "drained", &ends, pairs), decoded, "{model} {pairs:?}");
        }
        if kcat {
            let out = common::kcat(
                &["-C", "-b", &addr.to_string(), "-t", "drained", "-o", "beginning", "-e", "-q", "-f", "%p %o\n"],
                "",
                WAIT,
            )
            .expect_success("kcat -C");
            let by_kcat: BTreeSet<(i32, i64)> = out
                .lines()
                .map(|l| {
                    let (p, o) = l.split_once(' ').unwrap();
                    (p.parse().unwrap(), o.parse().unwrap())
                })
                .collect();
            assert_eq!(by_kcat, decoded, "{model}: kcat");
        }
    }
}

/// A drain-mode consumer refuses `poll` (its records are not decoded) and a decoding one
/// `poll_batches`, by name.
#[test]
fn each_mode_refuses_the_other_modes_poll() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::start_group_broker(dir.path(), "127.0.0.1:0".parse().unwrap(), |_| {});
    let mut cc = ConsumerConfig::new(broker.local_addr().to_string());
    cc.set("fetchbench.fetch.mode", "drain").unwrap();
    let e = Consumer::new(cc).unwrap().poll(Duration::from_millis(10)).unwrap_err().to_string();
    assert!(e.contains("use poll_batches()"), "{e}");
    let cc = ConsumerConfig::new(broker.local_addr().to_string());
    let e = Consumer::new(cc).unwrap().poll_batches(Duration::from_millis(10)).unwrap_err().to_string();
    assert!(e.contains("needs fetchbench.fetch.mode=drain"), "{e}");
}
