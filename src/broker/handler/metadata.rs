//! Metadata (API key 3): this broker as the only node, leader of every partition.
//!
//! Node [`NODE_ID`] at the address the broker is bound to; every partition has leader
//! [`NODE_ID`], leader epoch [`LEADER_EPOCH`], replicas and ISR `[0]`. Topic ids (KIP-516, v10+)
//! come from the partitions' `partition.metadata` files, or are generated and written there
//! (Kafka's `PartitionMetadataFile`).
//!
//! Topics: a null list (v1+), or an empty list in v0, means every topic. An unknown topic is
//! created with `num.partitions` partitions when both `auto.create.topics.enable` and the
//! request's `allow_auto_topic_creation` (v4+; always true before) allow it, as Kafka's
//! `KafkaApis.handleTopicMetadataRequest` does; it is then returned with its partitions
//! (Kafka answers `LEADER_NOT_AVAILABLE` first, while the controller works; one node needs no
//! wait). Otherwise `UNKNOWN_TOPIC_OR_PARTITION`; an illegal name gets `INVALID_TOPIC_EXCEPTION`.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{ensure_topic_id, errors, Shared, CLUSTER_ID, LEADER_EPOCH, NODE_ID};
use crate::log::manager::{validate_topic_name, LogManager};

/// `UNKNOWN_TOPIC_ID` (100): a v10+ request named a topic id this broker does not have.
const UNKNOWN_TOPIC_ID: i16 = 100;

/// Answers a Metadata request, creating topics as described in the module docs.
pub fn handle(shared: &Shared, request: &MetadataRequest, version: i16) -> MetadataResponse {
    let broker = MetadataResponseBroker::default()
        .with_node_id(BrokerId(NODE_ID))
        .with_host(StrBytes::from_string(shared.local_addr.ip().to_string()))
        .with_port(i32::from(shared.local_addr.port()));
    let mut response = MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(NODE_ID));
    let mut guard = shared.logs();
    let Some(logs) = guard.as_mut() else {
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
        let mut names: Vec<String> = logs.logs().map(|((t, _), _)| t.clone()).collect();
        names.dedup();
        for name in names {
            topics.push(describe(logs, &name));
        }
    } else {
        for wanted in request.topics.iter().flatten() {
            let name = match &wanted.name {
                Some(n) => n.0.as_str().to_string(),
                None => match topic_by_id(logs, wanted.topic_id.into_bytes()) {
                    Some(n) => n,
                    None => {
                        topics.push(
                            MetadataResponseTopic::default()
                                .with_error_code(UNKNOWN_TOPIC_ID)
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

fn topic_by_id(logs: &LogManager, id: [u8; 16]) -> Option<String> {
    logs.logs().find(|(_, log)| log.topic_id().map(|t| t.0) == Some(id)).map(|((t, _), _)| t.clone())
}

fn topic_error(name: &str, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code)
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
}

fn describe_or_create(shared: &Shared, logs: &mut LogManager, name: &str, allow_create: bool) -> MetadataResponseTopic {
    if validate_topic_name(name).is_err() {
        return topic_error(name, errors::INVALID_TOPIC_EXCEPTION);
    }
    let exists = logs.logs().any(|((t, _), _)| t == name);
    if !exists {
        if !allow_create {
            return topic_error(name, errors::UNKNOWN_TOPIC_OR_PARTITION);
        }
        for partition in 0..shared.config.num_partitions {
            if let Err(e) = logs.get_or_create(name, partition, None) {
                tracing::warn!("auto-creating {name}-{partition}: {e}");
                return topic_error(name, errors::log_error_code(&e));
            }
        }
        tracing::info!("auto-created topic {name} with {} partitions", shared.config.num_partitions);
    }
    describe(logs, name)
}

/// The metadata of an existing topic: its partitions in index order, topic id ensured.
fn describe(logs: &mut LogManager, name: &str) -> MetadataResponseTopic {
    let topic_id = match ensure_topic_id(logs, name) {
        Ok(id) => uuid::Uuid::from_bytes(id.0),
        Err(e) => {
            tracing::warn!("topic id of {name}: {e}");
            uuid::Uuid::nil()
        }
    };
    let mut partitions: Vec<i32> = logs.logs().filter(|((t, _), _)| t == name).map(|((_, p), _)| *p).collect();
    partitions.sort_unstable();
    let partitions = partitions
        .into_iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(BrokerId(NODE_ID))
                .with_leader_epoch(LEADER_EPOCH)
                .with_replica_nodes(vec![BrokerId(NODE_ID)])
                .with_isr_nodes(vec![BrokerId(NODE_ID)])
        })
        .collect();
    topic_error(name, errors::NONE)
        .with_topic_id(topic_id)
        .with_is_internal(name.starts_with("__"))
        .with_partitions(partitions)
}
