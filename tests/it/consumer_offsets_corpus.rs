//! Real `__consumer_offsets` records and checkpoint files written by Kafka brokers 2.x-3.x
//! (corpus/kafka-segments): every record decodes, re-encoding reproduces Kafka's bytes exactly,
//! and the checkpoint and metadata files read back to the values Kafka wrote (and format back to
//! the same bytes).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use fetchbench::log::batch::{BatchBoundaries, RecordBatch};
use fetchbench::log::checkpoint::{self, EpochEntry, TopicId};
use fetchbench::protocol::consumer_offsets::{decode_record, OffsetsRecord};
use fetchbench::protocol::consumer_protocol::CONSUMER_PROTOCOL_TYPE;

use crate::common;

/// One decoded record with its raw bytes and where it came from.
struct Decoded {
    /// Path relative to `corpus/kafka-segments`.
    file: String,
    offset: i64,
    timestamp: i64,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    record: OffsetsRecord,
}

fn segments_dir(corpus: &Path) -> PathBuf {
    corpus.join("kafka-segments")
}

fn rel(corpus: &Path, p: &Path) -> String {
    p.strip_prefix(segments_dir(corpus)).unwrap().to_string_lossy().into_owned()
}

/// Every record of every `__consumer_offsets-*/*.log` in the corpus, in file and offset order.
fn decode_all(corpus: &Path) -> Vec<Decoded> {
    let logs: Vec<PathBuf> = common::files_with_suffix(&segments_dir(corpus), ".log")
        .into_iter()
        .filter(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|n| n.to_string_lossy().starts_with("__consumer_offsets-"))
        })
        .collect();
    assert_eq!(logs.len(), 10, "__consumer_offsets segments listed in corpus/README.md");
    let mut out = Vec::new();
    for file in logs {
        let bytes = fs::read(&file).unwrap();
        let mut walk = BatchBoundaries::new(&bytes);
        for b in walk.by_ref() {
            let batch = RecordBatch::parse(&bytes[b.position..b.position + b.size])
                .unwrap_or_else(|e| panic!("{} @{}: {e}", file.display(), b.position));
            batch.verify_crc().unwrap();
            assert!(!batch.attributes().is_control(), "{}: no control batches expected", file.display());
            let records = batch.records().unwrap();
            for r in records.iter() {
                let r = r.unwrap_or_else(|e| panic!("{} @{}: {e}", file.display(), b.position));
                let record = decode_record(r.key, r.value)
                    .unwrap_or_else(|e| panic!("{} offset {}: {e}", file.display(), r.offset));
                out.push(Decoded {
                    file: rel(corpus, &file),
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key.expect("decoded records have keys").to_vec(),
                    value: r.value.map(<[u8]>::to_vec),
                    record,
                });
            }
        }
        assert!(!walk.partial_tail(), "{}: partial tail", file.display());
    }
    out
}

fn find<'a>(all: &'a [Decoded], file_part: &str, offset: i64) -> &'a Decoded {
    all.iter()
        .find(|d| d.file.contains(file_part) && d.offset == offset)
        .unwrap_or_else(|| panic!("no record {file_part} @{offset}"))
}

#[test]
fn every_record_decodes_and_counts_match() {
    let Some(corpus) = common::corpus() else { return };
    let all = decode_all(&corpus);
    assert_eq!(all.len(), 909, "2+2+2+2+3+8+8+862+7+13 records (corpus/README.md)");

    let mut commits = 0;
    let mut groups = 0;
    let mut tombstones = 0;
    let mut commit_versions = BTreeMap::new();
    let mut group_versions = BTreeMap::new();
    let mut key_versions = BTreeMap::new();
    for d in &all {
        *key_versions.entry(i16::from_be_bytes([d.key[0], d.key[1]])).or_insert(0) += 1;
        if d.record.is_tombstone() {
            tombstones += 1;
        }
        match &d.record {
            OffsetsRecord::OffsetCommit { value, .. } => {
                commits += 1;
                if let Some(v) = value {
                    *commit_versions.entry(v.version).or_insert(0) += 1;
                }
            }
            OffsetsRecord::GroupMetadata { value, .. } => {
                groups += 1;
                if let Some(v) = value {
                    *group_versions.entry(v.version).or_insert(0) += 1;
                }
            }
            OffsetsRecord::Unknown { key_version, .. } => {
                panic!("{} @{}: unknown key v{key_version}", d.file, d.offset)
            }
        }
    }
    assert_eq!(commits, 884);
    assert_eq!(groups, 25);
    assert_eq!(tombstones, 7, "six offset tombstones and one group tombstone at offsets 862..868");
    // Kafka 2.x-3.x write key v1 for commits and v2 for groups; values v1 (with an expire
    // timestamp, the 2021 broker) or v3, and group metadata v1 (old broker) or v3.
    assert_eq!(key_versions, BTreeMap::from([(1, 884), (2, 25)]));
    assert_eq!(commit_versions, BTreeMap::from([(1, 13), (3, 865)]));
    assert_eq!(group_versions, BTreeMap::from([(1, 6), (3, 18)]));
}

#[test]
fn reencoding_reproduces_kafkas_bytes() {
    let Some(corpus) = common::corpus() else { return };
    let all = decode_all(&corpus);
    let mut members = 0;
    for d in &all {
        let ctx = format!("{} @{}", d.file, d.offset);
        match &d.record {
            OffsetsRecord::OffsetCommit { key, value } => {
                assert_eq!(key.encode().unwrap(), d.key, "{ctx}: key");
                assert_eq!(value.as_ref().map(|v| v.encode().unwrap()), d.value, "{ctx}: value");
            }
            OffsetsRecord::GroupMetadata { key, value } => {
                assert_eq!(key.encode().unwrap(), d.key, "{ctx}: key");
                assert_eq!(value.as_ref().map(|v| v.encode().unwrap()), d.value, "{ctx}: value");
                for m in value.iter().flat_map(|v| &v.members) {
                    members += 1;
                    assert_eq!(
                        m.consumer_subscription().unwrap().encode().unwrap(),
                        m.subscription,
                        "{ctx}: subscription"
                    );
                    assert_eq!(m.consumer_assignment().unwrap().encode().unwrap(), m.assignment, "{ctx}: assignment");
                }
            }
            OffsetsRecord::Unknown { .. } => unreachable!(),
        }
    }
    assert_eq!(members, 69);
}

#[test]
fn real_values() {
    let Some(corpus) = common::corpus() else { return };
    let all = decode_all(&corpus);

    // A console consumer's group (Kafka 3.x, 2022): one member, range assignor, cities-0.
    let d = find(&all, "Bheem6005-kafka/kafka-logs/__consumer_offsets-0/", 0);
    let OffsetsRecord::GroupMetadata { key, value: Some(g) } = &d.record else { panic!("{}", d.record) };
    assert_eq!(key.group, "console-consumer-14897");
    assert_eq!((g.version, g.protocol_type.as_str(), g.generation), (3, CONSUMER_PROTOCOL_TYPE, 1));
    assert_eq!(g.protocol.as_deref(), Some("range"));
    assert_eq!(g.leader.as_deref(), Some("console-consumer-4fcee79b-493d-41c0-b3ea-633d704faf45"));
    assert_eq!(g.current_state_timestamp_ms, 1_645_954_314_494);
    let m = &g.members[0];
    assert_eq!(m.member_id, "console-consumer-4fcee79b-493d-41c0-b3ea-633d704faf45");
    assert_eq!((m.client_id.as_str(), m.client_host.as_str()), ("console-consumer", "/192.168.50.45"));
    assert_eq!((m.rebalance_timeout_ms, m.session_timeout_ms), (300_000, 45_000));
    assert_eq!(m.group_instance_id, None);
    let sub = m.consumer_subscription().unwrap();
    assert_eq!((sub.version, sub.topics.clone()), (1, vec!["cities".to_string()]));
    assert_eq!(m.consumer_assignment().unwrap().partitions(), vec![("cities", 0)]);
    assert_eq!(
        d.record.to_string(),
        "key: group_metadata::group=console-consumer-14897 payload: {\"protocolType\":\"consumer\",\
         \"protocol\":\"range\",\"generationId\":1,\
         \"assignment\":\"{console-consumer-4fcee79b-493d-41c0-b3ea-633d704faf45=[cities-0]}\"}"
    );
    // ... and the group emptied when the consumer left: generation 2, no protocol, no members.
    let d = find(&all, "Bheem6005-kafka/kafka-logs/__consumer_offsets-0/", 1);
    assert_eq!(
        d.record.to_string(),
        "key: group_metadata::group=console-consumer-14897 payload: {\"protocolType\":\"consumer\",\
         \"protocol\":null,\"generationId\":2,\"assignment\":\"{}\"}"
    );

    // Kafka 2.x (2021): value v1 with an expire timestamp 7 days (offsets.retention) after the commit;
    // consumer protocol v0 with empty (not null) user data.
    let d = find(&all, "KAIPASUBHASH-kafka-logs/__consumer_offsets-2/", 1);
    let OffsetsRecord::OffsetCommit { key, value: Some(v) } = &d.record else { panic!("{}", d.record) };
    assert_eq!((key.group.as_str(), key.topic.as_str(), key.partition), ("console-consumer-23934", "TestTopic", 0));
    assert_eq!((v.version, v.offset, v.leader_epoch()), (1, 0, None));
    assert_eq!(v.commit_timestamp_ms, 1_639_563_468_980);
    assert_eq!(v.expire_timestamp_ms - v.commit_timestamp_ms, 7 * 24 * 3_600_000);
    assert_eq!(
        d.record.to_string(),
        "key: offset_commit::group=console-consumer-23934,partition=TestTopic-0 payload: offset=0"
    );
    let d = find(&all, "KAIPASUBHASH-kafka-logs/__consumer_offsets-2/", 0);
    let OffsetsRecord::GroupMetadata { value: Some(g), .. } = &d.record else { panic!("{}", d.record) };
    assert_eq!((g.version, g.current_state_timestamp_ms), (1, -1));
    let sub = g.members[0].consumer_subscription().unwrap();
    assert_eq!(
        (sub.version, sub.topics.clone(), sub.user_data.clone()),
        (0, vec!["TestTopic".to_string()], Some(vec![]))
    );

    // A Java consumer subscribed to two topics; the range assignor gave it all six partitions.
    let d = find(&all, "NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000000.log", 0);
    let OffsetsRecord::GroupMetadata { key, value: Some(g) } = &d.record else { panic!("{}", d.record) };
    assert_eq!(key.group, "my-group");
    let m = &g.members[0];
    assert_eq!(m.client_id, "consumer-my-group-1");
    assert_eq!(m.consumer_subscription().unwrap().topics, vec!["my-first-topic", "my-second-topic"]);
    let parts = m.consumer_assignment().unwrap();
    assert_eq!(
        parts.partitions(),
        vec![
            ("my-second-topic", 0),
            ("my-second-topic", 1),
            ("my-second-topic", 2),
            ("my-first-topic", 0),
            ("my-first-topic", 1),
            ("my-first-topic", 2)
        ]
    );

    // The last committed offsets of my-group, then the tombstones that deleted them.
    let mut last = BTreeMap::new();
    for d in all.iter().filter(|d| d.file.contains("NikhilDighe9975")) {
        if let OffsetsRecord::OffsetCommit { key, value } = &d.record {
            last.insert((key.topic.clone(), key.partition), value.as_ref().map(|v| v.offset));
        }
    }
    assert!(last.values().all(Option::is_none), "every partition's offset was deleted: {last:?}");
    let mut before_delete = BTreeMap::new();
    for d in all.iter().filter(|d| d.file.contains("NikhilDighe9975") && d.offset < 862) {
        if let OffsetsRecord::OffsetCommit { key, value: Some(v) } = &d.record {
            before_delete.insert(format!("{}-{}", key.topic, key.partition), v.offset);
        }
    }
    let expected: BTreeMap<String, i64> = [
        ("my-first-topic-0", 1),
        ("my-first-topic-1", 0),
        ("my-first-topic-2", 2),
        ("my-second-topic-0", 1),
        ("my-second-topic-1", 0),
        ("my-second-topic-2", 2),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(before_delete, expected);
    let d = find(&all, "00000000000000000862.log", 868);
    assert_eq!(d.record.to_string(), "key: group_metadata::group=my-group payload: <DELETE>");

    // Kafka 3.8-era KRaft broker (2026): consumer protocol v3 with generation ids, 8+ members.
    let d = find(&all, "Niloufar1171-LDI-POC/__consumer_offsets-6/", 12);
    let OffsetsRecord::OffsetCommit { key, value: Some(v) } = &d.record else { panic!("{}", d.record) };
    assert_eq!((key.group.as_str(), key.topic.as_str(), v.offset), ("DEVSmileCDR", "TestTopicPatient", 3));
    assert_eq!((v.version, v.commit_timestamp_ms), (3, 1_769_793_578_176));
    assert_eq!(d.timestamp, 1_769_793_578_176, "the record timestamp is the commit time (and the .timeindex entry)");
    let d = find(&all, "Niloufar1171-LDI-POC/__consumer_offsets-6/", 2);
    let OffsetsRecord::GroupMetadata { value: Some(g), .. } = &d.record else { panic!("{}", d.record) };
    assert_eq!(g.generation, 2);
    assert_eq!(g.members.len(), 13);
    let subs: Vec<_> = g.members.iter().map(|m| m.consumer_subscription().unwrap()).collect();
    assert!(subs.iter().all(|s| s.version == 3 && s.rack_id.is_none()));
    assert_eq!(subs[0].generation_id, 1, "a member of generation 1 rejoining");
    let mut topics: Vec<&str> = subs.iter().flat_map(|s| s.topics.iter().map(String::as_str)).collect();
    topics.sort_unstable();
    topics.dedup();
    assert!(topics.contains(&"batch2.work.notification.SHR_PROD.persistence"), "{topics:?}");
    assert!(topics.contains(&"subscription.matching.SHR_PROD.persistence"), "{topics:?}");
    // Every assigned partition's topic is one its member subscribed to.
    for m in &g.members {
        let sub = m.consumer_subscription().unwrap();
        for (t, _) in m.consumer_assignment().unwrap().partitions() {
            assert!(sub.topics.iter().any(|s| s == t), "{} assigned {t} without subscribing", m.member_id);
        }
    }
}

/// Every file named `name` under the corpus's kafka-segments, relative path -> contents.
fn corpus_files(corpus: &Path, name: &str) -> BTreeMap<String, String> {
    common::files_with_suffix(&segments_dir(corpus), name)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == name))
        .map(|p| (rel(corpus, &p), fs::read_to_string(&p).unwrap()))
        .collect()
}

#[test]
fn leader_epoch_checkpoints() {
    let Some(corpus) = common::corpus() else { return };
    let files = corpus_files(&corpus, checkpoint::LEADER_EPOCH_CHECKPOINT);
    assert_eq!(files.len(), 17);
    for (name, text) in &files {
        let path = segments_dir(&corpus).join(name);
        let entries = checkpoint::read_leader_epoch_checkpoint(&path).unwrap();
        // The KRaft metadata log starts at epoch 1 (the first election); data partitions at 0.
        let epoch = if name.contains("__cluster_metadata") { 1 } else { 0 };
        assert_eq!(entries, vec![EpochEntry { epoch, start_offset: 0 }], "{name}");
        assert_eq!(&checkpoint::format_leader_epoch_checkpoint(&entries), text, "{name}: same bytes as Kafka");
    }
}

#[test]
fn partition_metadata_files() {
    let Some(corpus) = common::corpus() else { return };
    let files = corpus_files(&corpus, checkpoint::PARTITION_METADATA);
    assert_eq!(files.len(), 11);
    let mut ids = BTreeMap::new();
    for (name, text) in &files {
        let id = checkpoint::read_partition_metadata(&segments_dir(&corpus).join(name)).unwrap().unwrap();
        assert_eq!(&checkpoint::format_partition_metadata(id), text, "{name}: same bytes as Kafka");
        ids.insert(name.rsplit_once('/').unwrap().0.to_string(), id);
    }
    let id = |dir: &str| ids[dir].to_string();
    assert_eq!(id("Niloufar1171-LDI-POC/TestTopicPatient-0"), "B3_HiNPgSQ6oxG9ZZ6ED5A");
    assert_eq!(ids["Niloufar1171-LDI-POC/__cluster_metadata-0"], TopicId::METADATA_TOPIC_ID);
    // All partitions of one topic share its id.
    for p in [0, 2, 31, 34] {
        assert_eq!(id(&format!("Bheem6005-kafka/kafka-logs/__consumer_offsets-{p}")), "ATcW5sJxQuO79ERkNYiecQ");
    }
    assert_ne!(id("Bheem6005-kafka/kafka-logs/cities-0"), id("Bheem6005-kafka/kafka-logs/__consumer_offsets-0"));
}

#[test]
fn meta_properties_files() {
    let Some(corpus) = common::corpus() else { return };
    let files = corpus_files(&corpus, checkpoint::META_PROPERTIES);
    assert_eq!(files.len(), 3);
    let read = |name: &str| checkpoint::read_meta_properties(&segments_dir(&corpus).join(name)).unwrap();
    let zk = read("Bheem6005-kafka/kafka-logs/meta.properties");
    assert_eq!((zk.version, zk.node_id), (0, Some(0)));
    assert_eq!(zk.cluster_id.as_deref(), Some("P4mWrUMKRvm3AylnZYNBaQ"));
    let old = read("KAIPASUBHASH-kafka-logs/meta.properties");
    assert_eq!((old.version, old.node_id, old.cluster_id), (0, Some(0), None));
    let kraft = read("Niloufar1171-LDI-POC/meta.properties");
    assert_eq!((kraft.version, kraft.node_id), (1, Some(1)));
    assert_eq!(kraft.cluster_id.as_deref(), Some("q1w2e3r4t5y6u7i8o9p0"));
    assert_eq!(kraft.directory_id.map(|d| d.to_string()).as_deref(), Some("XHhkr4tkSsD900pOQ8pPfg"));
}
