//! The consumer's errors ([`ConsumerError`]).

use crate::client::assignor::{AssignorError, TopicPartition};
use crate::client::connection::ClientError;
use crate::log::batch::BatchError;

/// Errors of the consumer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// A config key is unknown or its value invalid: `consumer config <key>="<value>": <reason>`.
    #[error("consumer config {key}={value:?}: {reason}")]
    Config {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Why it is refused. [`ConsumerConfig::set`](super::ConsumerConfig::set) words it as `expected <what the key
        /// accepts>` (e.g. `expected an integer from 0 to 2147483647`).
        reason: String,
    },
    /// A connection or protocol error.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The broker answered with a Kafka error code.
    #[error("{context}: Kafka error {code}")]
    Kafka {
        /// The request and object.
        context: String,
        /// The error code.
        code: i16,
    },
    /// Fetch offsets out of range with `auto.offset.reset=none` (Kafka's
    /// `OffsetOutOfRangeException`): `(topic, partition, fetch offset)`. Seek to continue.
    #[error("offsets out of range with no reset policy (auto.offset.reset=none): {}", fmt_offsets(partitions))]
    OffsetOutOfRange {
        /// The partitions and their fetch offsets.
        partitions: Vec<(TopicPartition, i64)>,
    },
    /// Partitions without a committed offset under `auto.offset.reset=none` (Kafka's
    /// `NoOffsetForPartitionException`).
    #[error("no committed offset and no reset policy (auto.offset.reset=none) for {}", fmt_partitions(partitions))]
    NoOffset {
        /// The partitions.
        partitions: Vec<TopicPartition>,
    },
    /// A record set failed to decode (a CRC mismatch, an unknown codec, ...).
    #[error("corrupt record set of {topic}-{partition} at offset {offset}: {source}")]
    Corrupt {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The fetch position where decoding failed.
        offset: i64,
        /// The decoding error.
        #[source]
        source: BatchError,
    },
    /// An offset commit failed (`(topic, partition, error code)`); REBALANCE_IN_PROGRESS,
    /// ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID make the next poll rejoin (Kafka's
    /// `CommitFailedException`).
    #[error("offset commit failed: {partitions:?}")]
    CommitFailed {
        /// The failed partitions with their error codes.
        partitions: Vec<(String, i32, i16)>,
    },
    /// The group leader could not compute the assignment.
    #[error(transparent)]
    Assignor(#[from] AssignorError),
    /// A protocol payload could not be encoded or decoded.
    #[error("{0}")]
    Protocol(String),
    /// The call does not fit the consumer's state (seek on an unassigned partition, commit
    /// without `group.id`, ...).
    #[error("{0}")]
    IllegalState(String),
}

pub(super) fn fmt_partitions(p: &[TopicPartition]) -> String {
    p.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>().join(", ")
}

fn fmt_offsets(p: &[(TopicPartition, i64)]) -> String {
    p.iter().map(|((t, p), o)| format!("{t}-{p} at offset {o}")).collect::<Vec<_>>().join(", ")
}
