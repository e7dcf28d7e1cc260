//! The producer's errors ([`ProducerError`]) and which Kafka error codes it retries.

use std::sync::Arc;

use crate::client::connection::ClientError;
use crate::log::batch::Compression;

/// Errors of the producer. Cloneable: one batch's error is the result of each of its records.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// A configuration key has a bad value, is unknown, or conflicts with another.
    #[error("producer config {key}={value:?}: {reason}")]
    Config {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A request could not be sent or answered (connection, encoding, version negotiation).
    #[error("{context}: {source}")]
    Client {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: Arc<ClientError>,
    },
    /// The broker answered with a Kafka error code that is not retried (or retries ran out).
    #[error("{context} {topic}-{partition}: Kafka error {code}")]
    Kafka {
        /// The request (`Produce`, `Metadata`, `InitProducerId`).
        context: &'static str,
        /// Topic.
        topic: String,
        /// Partition (-1 when the error is the topic's).
        partition: i32,
        /// The Kafka error code.
        code: i16,
    },
    /// A record names a partition the topic does not have.
    #[error("topic {topic} has {partitions} partitions; partition {partition} does not exist")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// Partitions the topic has.
        partitions: i32,
    },
    /// A record is larger than `max.request.size` (or `buffer.memory`).
    #[error("a record of about {size} bytes is larger than {limit} bytes ({setting})")]
    RecordTooLarge {
        /// The record's encoded size, an upper bound.
        size: usize,
        /// The limit.
        limit: usize,
        /// The setting that sets the limit.
        setting: &'static str,
    },
    /// Waiting for metadata, buffer space or a delivery took too long.
    #[error("{what}: timed out after {timeout_ms} ms")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The limit, ms.
        timeout_ms: u64,
    },
    /// Compressing a batch failed.
    #[error("compressing a batch with {codec}: {message}")]
    Compression {
        /// The codec.
        codec: Compression,
        /// The encoder's message.
        message: String,
    },
    /// The producer is closed (or its sender thread died).
    #[error("the producer is closed")]
    Closed,
}

impl ProducerError {
    /// A [`ProducerError::Client`] of `source` while doing `context`.
    pub(super) fn client(context: impl Into<String>, source: ClientError) -> Self {
        ProducerError::Client { context: context.into(), source: Arc::new(source) }
    }
}

/// Kafka errors retried: the retriable exceptions of Kafka's `Errors` a single leader can answer.
pub(super) fn retriable(code: i16) -> bool {
    matches!(code, 3 | 5 | 6 | 7 | 13 | 14 | 15 | 19 | 20 | 45 | 56)
}

/// `DUPLICATE_SEQUENCE_NUMBER`: the batch was already written; Kafka's producer treats it as success.
pub(super) const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
