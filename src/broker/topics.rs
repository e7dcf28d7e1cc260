//! Topics of the log directory: lookup by name or topic id, and creation, shared by CreateTopics
//! ([`handler::create_topics`](crate::broker::handler::create_topics)) and Metadata's
//! auto-create ([`handler::metadata`](crate::broker::handler::metadata)).
//!
//! A topic exists when at least one `<topic>-<partition>` log exists; its partitions are the
//! partition logs found. Creating a topic creates its partition logs `0..num_partitions`
//! (each a directory with an empty first segment) with the topic's [`LogConfig`], then gives
//! the topic a topic id (KIP-516), written to every partition's `partition.metadata` (Kafka's
//! `PartitionMetadataFile`), so the id survives restarts ([`LogManager::ensure_topic_id`]).
//!
//! The log directory is shared ([`LogManager`]'s `&self` methods): lookups take its map lock for
//! the lookup only; creation takes its creation lock ([`LogManager::lock_topic_creation`]), which
//! a caller that checks and creates (CreateTopics, Metadata's auto-create) holds across both, so
//! two requests creating one topic never both succeed.
//!
//! Validation follows Kafka 4's `ReplicationControlManager.createTopics`: the name
//! (`Topic.validate`), names that collide on `.` / `_` (`Topic.hasCollisionChars`, both are
//! `_` in metric names), an existing topic. Kafka's controller creates a topic atomically; here
//! a failure half way (a disk error on partition 3 of 5) leaves the partitions already made.

use crate::log::checkpoint::TopicId;
use crate::log::manager::{validate_topic_name, LogManager, TopicCreation, CLUSTER_METADATA_TOPIC};
use crate::log::{LogConfig, LogError};

/// The most partitions one topic may be created with (fetchbench's own bound, the size of
/// Kafka's `MAX_RECORDS_PER_USER_OP` = 10000 records a controller operation may write): every
/// partition holds open segment files, so an unbounded count would exhaust file descriptors.
pub(crate) const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// Why a topic cannot be created: the Kafka error code and Kafka's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TopicError {
    /// The Kafka error code (`INVALID_TOPIC_EXCEPTION`, `TOPIC_ALREADY_EXISTS`, ...).
    pub code: i16,
    /// A message for the client (`error_message` of CreateTopics v1+).
    pub message: String,
}

impl TopicError {
    /// A topic error with `code` and `message`.
    pub(crate) fn new(code: i16, message: impl Into<String>) -> Self {
        TopicError { code, message: message.into() }
    }
}

/// Whether any partition of `topic` exists.
pub(crate) fn exists(logs: &LogManager, topic: &str) -> bool {
    logs.topic_exists(topic)
}

/// The coordinators' topics, written only by the broker: a Produce to one is
/// `INVALID_TOPIC_EXCEPTION` and AddPartitionsToTxn of one `TOPIC_AUTHORIZATION_FAILED`, as Kafka
/// answers for its internal topics (`Topic.isInternal`).
pub(crate) const INTERNAL_TOPICS: [&str; 2] =
    [crate::protocol::consumer_offsets::OFFSETS_TOPIC, crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC];

/// The partition indexes of `topic`, ascending (empty when it does not exist).
pub(crate) fn partitions(logs: &LogManager, topic: &str) -> Vec<i32> {
    logs.partition_numbers(topic)
}

/// The name of the topic whose id (KIP-516, the UUID's 16 big-endian bytes) is `id`, from the
/// partitions' `partition.metadata`; `None` for an unknown id and for the zero id (never a
/// topic's: Kafka's `Uuid.ZERO_UUID` means "no id").
pub(crate) fn name_by_id(logs: &LogManager, id: [u8; 16]) -> Option<String> {
    if id == TopicId::ZERO.0 {
        return None;
    }
    logs.topic_with_id(TopicId(id))
}

/// The topic a request names (Fetch v13+ and Produce v13 name topics by id, KIP-516): with
/// `by_id`, the topic whose id is `id` (`None` when unknown: `UNKNOWN_TOPIC_ID`, or when the
/// broker is shutting down and `logs` is `None`); otherwise `name`, as it is.
pub(crate) fn resolve(logs: Option<&LogManager>, name: &str, id: uuid::Uuid, by_id: bool) -> Option<String> {
    if by_id {
        logs.and_then(|logs| name_by_id(logs, id.into_bytes()))
    } else {
        Some(name.to_string())
    }
}

/// An existing topic that collides with `topic` once `.` and `_` are unified (Kafka's
/// `Topic.unifyCollisionChars`), other than `topic` itself.
pub(crate) fn colliding_topic(logs: &LogManager, topic: &str) -> Option<String> {
    if !topic.contains(['.', '_']) {
        return None;
    }
    let unified = topic.replace('.', "_");
    logs.topics().into_iter().find(|t| t.as_str() != topic && t.replace('.', "_") == unified)
}

/// Checks that `topic` may be created: a legal name (`INVALID_TOPIC_EXCEPTION`, also for KRaft's
/// `__cluster_metadata` and for a name colliding with an existing topic on `.`/`_`), not an
/// existing topic (`TOPIC_ALREADY_EXISTS`, "Topic 'x' already exists.").
pub(crate) fn check_new_topic(logs: &LogManager, topic: &str) -> Result<(), TopicError> {
    use crate::broker::errors;
    validate_topic_name(topic).map_err(|reason| TopicError::new(errors::INVALID_TOPIC_EXCEPTION, reason))?;
    if topic == CLUSTER_METADATA_TOPIC {
        return Err(TopicError::new(
            errors::INVALID_REQUEST,
            format!("Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited."),
        ));
    }
    if exists(logs, topic) {
        return Err(TopicError::new(errors::TOPIC_ALREADY_EXISTS, format!("Topic '{topic}' already exists.")));
    }
    if let Some(other) = colliding_topic(logs, topic) {
        return Err(TopicError::new(
            errors::INVALID_TOPIC_EXCEPTION,
            format!("Topic '{topic}' collides with existing topic: {other}"),
        ));
    }
    Ok(())
}

/// Creates `topic` with partitions `0..num_partitions`, each with `config` (the broker defaults
/// with the topic's overrides applied; `None`: the broker defaults), and returns its topic id,
/// written to every partition's `partition.metadata`. Partitions that already exist are kept
/// as they are. The caller holds the creation lock (`logs`) and checks the name
/// ([`check_new_topic`]) and the count under it.
///
/// Errors: [`LogError::Layout`] for an illegal name or a negative partition, [`LogError::Io`]
/// creating a directory or writing `partition.metadata`, [`LogError::Closed`] once the log
/// directory is shut down; partitions made before the error stay.
pub(crate) fn create(
    logs: &TopicCreation<'_>,
    topic: &str,
    num_partitions: i32,
    config: Option<LogConfig>,
) -> Result<TopicId, LogError> {
    for partition in 0..num_partitions {
        logs.get_or_create(topic, partition, config.clone())?;
    }
    let id = logs.ensure_topic_id(topic)?;
    tracing::info!("created topic {topic} with {num_partitions} partitions, topic id {}", uuid::Uuid::from_bytes(id.0));
    Ok(id)
}
