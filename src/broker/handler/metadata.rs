//! Metadata (API key 3): this broker as the only node, leader of every partition.
//!
//! Node [`NODE_ID`] at the address the broker is bound to; every partition has leader
//! [`NODE_ID`], replicas and ISR `[0]`, and the partition's current leader epoch
//! ([`current_leader_epoch`]: leader epoch 0 for topics made
//! here; a copied Kafka log directory keeps the epoch its batches carry, so that clients'
//! OffsetForLeaderEpoch and `current_leader_epoch` checks agree with the stored batches).
//! Topic ids (KIP-516, v10+) come from the partitions' `partition.metadata` files, or are
//! generated and written there (Kafka's `PartitionMetadataFile`).
//!
//! Topics: a null list (v1+), or an empty list in v0, means every topic. An unknown topic is
//! created with `num.partitions` partitions ([`topics::create`], shared with CreateTopics) when
//! both `auto.create.topics.enable` and the request's `allow_auto_topic_creation` (v4+; always
//! true before) allow it, as Kafka's `KafkaApis.handleTopicMetadataRequest` does; it is then
//! returned with its partitions (Kafka answers `LEADER_NOT_AVAILABLE` first, while the
//! controller works; one node needs no wait). `__consumer_offsets` is created as the group
//! coordinator creates it: `offsets.topic.num.partitions` partitions, compacted;
//! `__transaction_state` as the transaction coordinator creates it
//! (`transaction.state.log.num.partitions`, compacted, 100 MiB segments). Otherwise
//! `UNKNOWN_TOPIC_OR_PARTITION`; an illegal
//! name, or one colliding on `.`/`_` with an existing topic, gets `INVALID_TOPIC_EXCEPTION`.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::broker::coordinator::storage::offsets_topic_config;
use crate::broker::handler::offset_for_leader_epoch::current_leader_epoch;
use crate::broker::node::{CLUSTER_ID, NODE_ID};
use crate::broker::shared::Shared;
use crate::broker::txn_coordinator::storage::transaction_state_topic_config;
use crate::broker::{errors, topics};
use crate::log::manager::{validate_topic_name, LogManager};
use crate::protocol::consumer_offsets::OFFSETS_TOPIC;
use crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC;

/// Answers a Metadata request, creating topics as described in the module docs.
pub(crate) fn handle(shared: &Shared, request: &MetadataRequest, version: i16) -> MetadataResponse {
    let broker = MetadataResponseBroker::default()
        .with_node_id(BrokerId(NODE_ID))
        .with_host(StrBytes::from_string(shared.advertised().0))
        .with_port(shared.advertised().1);
    let mut response = MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(NODE_ID));
    let Some(logs) = shared.logs() else {
        // Shutting down: no topics (clients retry elsewhere or later).
        return response;
    };
    let allow_create = shared.config.auto_create_topics_enable && (version < 4 || request.allow_auto_topic_creation);
    let all_topics = match &request.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    let mut topics = Vec::new();
    if all_topics {
        for name in logs.topics() {
            topics.push(describe(logs, &name));
        }
    } else {
        for wanted in request.topics.iter().flatten() {
            let name = match &wanted.name {
                Some(n) => n.0.as_str().to_string(),
                None => match topics::name_by_id(logs, wanted.topic_id.into_bytes()) {
                    Some(n) => n,
                    None => {
                        topics.push(
                            MetadataResponseTopic::default()
                                .with_error_code(errors::UNKNOWN_TOPIC_ID)
                                .with_topic_id(wanted.topic_id),
                        );
                        continue;
                    }
                },
            };
            topics.push(describe_or_create(shared, logs, &name, allow_create));
        }
    }
    response.topics = topics;
    response
}

fn topic_error(name: &str, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code)
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
}

fn describe_or_create(shared: &Shared, logs: &LogManager, name: &str, allow_create: bool) -> MetadataResponseTopic {
    if validate_topic_name(name).is_err() {
        return topic_error(name, errors::INVALID_TOPIC_EXCEPTION);
    }
    if !topics::exists(logs, name) {
        if !allow_create {
            return topic_error(name, errors::UNKNOWN_TOPIC_OR_PARTITION);
        }
        // Checked and created under the creation lock: a concurrent creator of the same topic
        // waits, then finds it (topics::create keeps existing partitions).
        let creation = logs.lock_topic_creation();
        if topics::exists(logs, name) {
            drop(creation);
            return describe(logs, name);
        }
        if let Err(e) = topics::check_new_topic(logs, name) {
            return topic_error(name, e.code);
        }
        // Kafka's `AutoTopicCreationManager.creatableTopic`: `__consumer_offsets` is created as the
        // group coordinator creates it (`offsets.topic.num.partitions`, compacted), and
        // `__transaction_state` as the transaction coordinator does, not with `num.partitions`
        // and the broker defaults.
        let (num_partitions, config) = if name == OFFSETS_TOPIC {
            let n = shared.coordinator().config().offsets_topic_num_partitions;
            (n, Some(offsets_topic_config(logs.config())))
        } else if name == TRANSACTION_STATE_TOPIC {
            // As the transaction coordinator creates it (`transaction.state.log.num.partitions`).
            let n = shared.txn_coordinator().manager().config().num_partitions;
            (n, Some(transaction_state_topic_config(logs.config())))
        } else {
            (shared.config.num_partitions, None)
        };
        if let Err(e) = topics::create(&creation, name, num_partitions, config) {
            tracing::warn!("auto-creating {name}: {e}");
            return topic_error(name, errors::log_error_code(&e));
        }
    }
    describe(logs, name)
}

/// The metadata of an existing topic: its partitions in index order, topic id ensured.
fn describe(logs: &LogManager, name: &str) -> MetadataResponseTopic {
    let topic_id = match logs.ensure_topic_id(name) {
        Ok(id) => uuid::Uuid::from_bytes(id.0),
        Err(e) => {
            tracing::warn!("topic id of {name}: {e}");
            uuid::Uuid::nil()
        }
    };
    let present = logs.topic_partitions(name);
    let numbers: Vec<i32> = present.iter().map(|p| p.partition()).collect();
    let missing = leaderless_partitions(&numbers);
    let mut partitions: Vec<MetadataResponsePartition> = present
        .iter()
        .map(|p| {
            let leader_epoch = current_leader_epoch(p);
            MetadataResponsePartition::default()
                .with_partition_index(p.partition())
                .with_leader_id(BrokerId(NODE_ID))
                .with_leader_epoch(leader_epoch)
                .with_replica_nodes(vec![BrokerId(NODE_ID)])
                .with_isr_nodes(vec![BrokerId(NODE_ID)])
        })
        .collect();
    partitions.extend(missing);
    partitions.sort_by_key(|p| p.partition_index);
    topic_error(name, errors::NONE)
        .with_topic_id(topic_id)
        .with_is_internal(is_internal_topic(name))
        .with_partitions(partitions)
}

/// `LEADER_NOT_AVAILABLE` (5): a partition with no leader.
const LEADER_NOT_AVAILABLE: i16 = 5;

/// The partitions below the highest one present that this log directory lacks (a copy of one
/// broker's `log.dirs` from a cluster holds only that broker's partitions, e.g. `topic-2` alone),
/// reported as Kafka reports an offline partition: `LEADER_NOT_AVAILABLE`, leader -1, no replicas.
/// Clients size a topic by its partition count and index partitions from 0 (librdkafka ignores a
/// partition whose index is not below the count), so without these the present partitions could
/// not be consumed.
fn leaderless_partitions(present: &[i32]) -> Vec<MetadataResponsePartition> {
    let Some(&max) = present.iter().max() else { return Vec::new() };
    (0..max)
        .filter(|p| !present.contains(p))
        .map(|p| {
            MetadataResponsePartition::default()
                .with_error_code(LEADER_NOT_AVAILABLE)
                .with_partition_index(p)
                .with_leader_id(BrokerId(-1))
                .with_leader_epoch(-1)
        })
        .collect()
}

/// Kafka's `Topic.isInternal`: its own internal topics only (`__consumer_offsets`,
/// `__transaction_state`, `__share_group_state`), not every name starting with `__`.
fn is_internal_topic(name: &str) -> bool {
    matches!(name, "__consumer_offsets" | "__transaction_state" | "__share_group_state")
}
