//! Idempotent produce and InitProducerId over TCP (Kafka 4's rules: `ProducerStateManager`,
//! `ProducerAppendInfo.checkSequence` / `checkProducerEpoch`, `TransactionCoordinator.handleInitProducerId`
//! for a null transactional id), including restarts on the same log directory.

use std::path::Path;

use bytes::Bytes;
use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, RequestKind, ResponseKind, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{fetch, metadata, name, Client};

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const INVALID_REQUEST: i16 = 42;

fn start_in(dir: &Path) -> BrokerHandle {
    Broker::start(BrokerConfig::new("127.0.0.1:0".parse().unwrap(), dir, ReadPathKind::Copy)).unwrap()
}

fn init_producer_id(client: &mut Client, version: i16, transactional_id: Option<&str>) -> InitProducerIdResponse {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_transaction_timeout_ms(60_000);
    match client.call(ApiKey::InitProducerId, version, RequestKind::InitProducerId(req)) {
        ResponseKind::InitProducerId(r) => r,
        other => panic!("{other:?}"),
    }
}

fn new_producer_id(client: &mut Client) -> i64 {
    let r = init_producer_id(client, 4, None);
    assert_eq!((r.error_code, r.producer_epoch), (0, 0));
    r.producer_id.0
}

/// An idempotent batch of `n` records with current timestamps.
fn idempotent_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, seq);
    for i in 0..n {
        b.append(now, Some(format!("k{seq}-{i}").as_bytes()), Some(format!("v{seq}-{i}").as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// Produces `records` to `topic`-0 at `version` with acks=-1: (error code, base offset).
fn produce_at(client: &mut Client, topic: &str, records: Vec<u8>, version: i16) -> (i16, i64) {
    let req =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default(
        )
        .with_name(name(topic))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(Bytes::from(records)))])]);
    match client.call(ApiKey::Produce, version, RequestKind::Produce(req)) {
        ResponseKind::Produce(r) => {
            let p = &r.responses[0].partition_responses[0];
            (p.error_code, p.base_offset)
        }
        other => panic!("{other:?}"),
    }
}

fn produce(client: &mut Client, topic: &str, records: Vec<u8>) -> (i16, i64) {
    produce_at(client, topic, records, 9)
}

/// Offsets of every record of `topic`-0.
fn offsets(client: &mut Client, topic: &str) -> Vec<i64> {
    let (err, _, recs) = fetch(client, topic, 0, 11);
    assert_eq!(err, 0);
    recs.into_iter().map(|r| r.0).collect()
}

#[test]
fn init_producer_id_hands_out_distinct_ids_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    let mut seen = std::collections::BTreeSet::new();
    for version in 0..=5 {
        let r = init_producer_id(&mut client, version, None);
        assert_eq!((r.error_code, r.producer_epoch), (0, 0), "v{version}");
        assert!(r.producer_id.0 >= 0 && seen.insert(r.producer_id.0), "v{version}: {r:?}");
    }
    // A transactional id gets its own producer id from the same generator (epoch 0), and the
    // next InitProducerId of that id bumps the epoch of the same producer id; an empty id is
    // invalid (Kafka).
    let r = init_producer_id(&mut client, 4, Some("txn-1"));
    assert_eq!((r.error_code, r.producer_epoch), (0, 0), "{r:?}");
    assert!(r.producer_id.0 >= 0 && seen.insert(r.producer_id.0), "{r:?}");
    let again = init_producer_id(&mut client, 4, Some("txn-1"));
    assert_eq!((again.error_code, again.producer_id.0, again.producer_epoch), (0, r.producer_id.0, 1), "{again:?}");
    assert_eq!(init_producer_id(&mut client, 4, Some("")).error_code, INVALID_REQUEST);
    // A producer writes with one of the ids (the logs then know it).
    metadata(&mut client, "idem-ids", 12);
    let used = *seen.iter().next_back().unwrap();
    assert_eq!(produce(&mut client, "idem-ids", idempotent_batch(used, 0, 0, 1)).0, 0);
    drop(client);
    broker.shutdown().unwrap();

    // Clean restart: new ids, none seen before.
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    for _ in 0..3 {
        let id = new_producer_id(&mut client);
        assert!(seen.insert(id), "{id} repeated after a restart");
    }
    drop(client);
    broker.shutdown().unwrap();

    // Unclean restart (no clean-shutdown marker): still new ids.
    std::fs::remove_file(dir.join(".kafka_cleanshutdown")).unwrap();
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    let id = new_producer_id(&mut client);
    assert!(seen.insert(id), "{id} repeated after an unclean restart");
    // A producer writes with an id far above the blocks handed out so far.
    let far = id + 50_000;
    assert_eq!(produce(&mut client, "idem-ids", idempotent_batch(far, 0, 0, 1)).0, 0);
    drop(client);
    broker.shutdown().unwrap();

    // The block file lost: ids start above the largest producer id in the logs.
    std::fs::remove_file(dir.join("producer-id-block")).unwrap();
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    let id = new_producer_id(&mut client);
    assert!(id > far, "{id} must start above the largest producer id in the logs ({far})");
    drop(client);
    broker.shutdown().unwrap();
}

#[test]
fn idempotent_produce_stores_retries_once_and_checks_sequence_and_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut client = Client::connect(broker.local_addr());
    let topic = "idem-seq";
    metadata(&mut client, topic, 12);
    let pid = new_producer_id(&mut client);

    // Sequences 0, 1, 2 (one record each), then 3-4 in one batch.
    for seq in 0..3 {
        assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, seq, 1)), (0, seq as i64));
    }
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 3, 2)), (0, 3));
    // A retry (the response was lost): NONE with the ORIGINAL base offset, stored once. Also at
    // the newest Produce version this build serves for names.
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 1, 1)), (0, 1));
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 3, 2)), (0, 3));
    assert_eq!(produce_at(&mut client, topic, idempotent_batch(pid, 0, 3, 2), 12), (0, 3));
    assert_eq!(offsets(&mut client, topic), vec![0, 1, 2, 3, 4]);

    // A gap: OUT_OF_ORDER_SEQUENCE_NUMBER, nothing stored.
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 7, 1)).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    // A new epoch must start at 0.
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 1, 5, 1)).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 1, 0, 1)), (0, 5));
    // The old epoch is fenced.
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 5, 1)).0, INVALID_PRODUCER_EPOCH);
    assert_eq!(offsets(&mut client, topic), vec![0, 1, 2, 3, 4, 5]);

    // Another producer is independent; a non-idempotent batch is not checked.
    let other = new_producer_id(&mut client);
    assert_ne!(other, pid);
    assert_eq!(produce(&mut client, topic, idempotent_batch(other, 0, 0, 1)), (0, 6));
    assert_eq!(produce(&mut client, topic, crate::broker::batch(1)), (0, 7));
    // A transactional batch (no transactional id can be given here): refused, not stored.
    let mut txn = BatchBuilder::new(0, Compression::None).producer(other, 0, 1).transactional(true);
    txn.append(0, Some(b"k"), Some(b"v"), &[]);
    assert_eq!(produce(&mut client, topic, txn.build().unwrap()).0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    assert_eq!(produce(&mut client, topic, idempotent_batch(other, 0, 1, 1)), (0, 8));
    assert_eq!(broker.test_support().connection_panics(), 0);
    drop(client);
    broker.shutdown().unwrap();
}

#[test]
fn the_last_batch_is_still_a_duplicate_after_clean_and_unclean_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let topic = "idem-restart";
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    metadata(&mut client, topic, 12);
    let pid = new_producer_id(&mut client);
    for seq in [0, 2, 4] {
        assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, seq, 2)), (0, seq as i64));
    }
    drop(client);
    broker.shutdown().unwrap();

    // Clean restart: the state is rebuilt from the log; the last batch's retry is a duplicate.
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 4, 2)), (0, 4));
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 2, 2)), (0, 2));
    assert_eq!(offsets(&mut client, topic).len(), 6);
    drop(client);
    broker.shutdown().unwrap();

    // Unclean restart: no clean-shutdown marker, the partition is recovered, then replayed.
    std::fs::remove_file(dir.join(".kafka_cleanshutdown")).unwrap();
    let broker = start_in(&dir);
    let mut client = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 4, 2)), (0, 4));
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 7, 1)).0, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut client, topic, idempotent_batch(pid, 0, 6, 1)), (0, 6));
    assert_eq!(offsets(&mut client, topic), (0..7).collect::<Vec<i64>>());
    drop(client);
    broker.shutdown().unwrap();
}
