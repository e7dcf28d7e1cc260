//! The producer's errors ([`ProducerError`]), which Kafka error codes it retries, and Kafka's
//! names of error codes ([`error_name`]).

use std::sync::Arc;

use super::txn_state::TransactionState;
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
    #[error("{context} {topic}-{partition}: {}", error_name(*code))]
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
    /// `PRODUCER_FENCED` (or `INVALID_PRODUCER_EPOCH`, which Kafka's `TransactionManager` turns
    /// into the same `ProducerFencedException`): a newer producer with the same
    /// `transactional.id` has taken over. Fatal: every later transactional call fails with it;
    /// the producer can only be closed.
    #[error("{operation} for transactional.id {transactional_id:?}: {} (a newer producer with this transactional.id fenced this one; close it)", error_name(*code))]
    ProducerFenced {
        /// The request that was answered so (`AddPartitionsToTxn`, `EndTxn`, `Produce`, ...).
        operation: &'static str,
        /// The transactional id.
        transactional_id: String,
        /// `PRODUCER_FENCED` (90) or `INVALID_PRODUCER_EPOCH` (47).
        code: i16,
    },
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (53): the broker refuses this transactional id
    /// (Kafka's `TransactionalIdAuthorizationException`). Fatal.
    #[error("{operation} for transactional.id {transactional_id:?}: TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)")]
    TransactionalIdAuthorizationFailed {
        /// The request that was answered so.
        operation: &'static str,
        /// The transactional id.
        transactional_id: String,
    },
    /// A transaction request (FindCoordinator, InitProducerId, AddPartitionsToTxn,
    /// AddOffsetsToTxn, TxnOffsetCommit, EndTxn) was answered with another Kafka error that is
    /// not retried (`INVALID_TXN_STATE`, `INVALID_TRANSACTION_TIMEOUT`, `UNKNOWN_PRODUCER_ID`,
    /// `ILLEGAL_GENERATION`, ...). Whether it is fatal or abortable is Kafka's
    /// `TransactionManager` classification of the request's answer.
    #[error("{operation} for transactional.id {transactional_id:?}{}: {}", target.as_ref().map(|t| format!(" ({t})")).unwrap_or_default(), error_name(*code))]
    Transaction {
        /// The request.
        operation: &'static str,
        /// The transactional id.
        transactional_id: String,
        /// What the error is about when not the whole request: `topic-partition`, `group g`.
        target: Option<String>,
        /// The Kafka error code.
        code: i16,
    },
    /// A transactional method was called in a state that does not allow it (Kafka's
    /// `IllegalStateException` "Cannot call X in state Y"), or a non-transactional producer was
    /// asked for a transactional method.
    #[error("cannot {operation} in transaction state {state}{}", if *transactional { "" } else { " (transactional.id is not set)" })]
    IllegalTransactionState {
        /// The method (`begin_transaction`, `send`, `commit_transaction`, ...).
        operation: &'static str,
        /// The state it was called in.
        state: TransactionState,
        /// Whether `transactional.id` is set.
        transactional: bool,
    },
    /// The current transaction hit an error (a batch failed, a request was answered with an
    /// abortable error): it can only be aborted ([`Producer::abort_transaction`]), then a new
    /// one begun (Kafka's `KafkaException` "Cannot execute transactional method because we are
    /// in an error state", state `ABORTABLE_ERROR`).
    ///
    /// [`Producer::abort_transaction`]: super::Producer::abort_transaction
    #[error("cannot {operation}: the transaction must be aborted after an error: {source}")]
    TransactionAbortable {
        /// The method called.
        operation: &'static str,
        /// The error that made the transaction abortable.
        #[source]
        source: Arc<ProducerError>,
    },
    /// A transaction request was still answered with a retried error (or could not reach the
    /// coordinator) when the call's timeout ran out (Kafka's `TimeoutException`). The state is
    /// kept: calling the method again resumes it.
    #[error("{operation}: timed out; last error: {last_error}")]
    TransactionTimeout {
        /// The request.
        operation: &'static str,
        /// The last retried error.
        #[source]
        last_error: Arc<ProducerError>,
    },
    /// The record's batch was discarded, not sent, because its transaction was aborted
    /// (Kafka's `TransactionAbortedException`).
    #[error("the batch was not sent: its transaction was aborted")]
    TransactionAborted,
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

/// Kafka error codes the transaction requests meet.
pub(super) mod code {
    pub(crate) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub(crate) const REQUEST_TIMED_OUT: i16 = 7;
    pub(crate) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub(crate) const NOT_COORDINATOR: i16 = 16;
    pub(crate) const ILLEGAL_GENERATION: i16 = 22;
    pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
    pub(crate) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub(crate) const GROUP_AUTHORIZATION_FAILED: i16 = 30;
    pub(crate) const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub(crate) const UNSUPPORTED_VERSION: i16 = 35;
    pub(crate) const INVALID_PRODUCER_EPOCH: i16 = 47;
    pub(crate) const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
    pub(crate) const CONCURRENT_TRANSACTIONS: i16 = 51;
    pub(crate) const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
    pub(crate) const OPERATION_NOT_ATTEMPTED: i16 = 55;
    pub(crate) const UNKNOWN_PRODUCER_ID: i16 = 59;
    pub(crate) const FENCED_INSTANCE_ID: i16 = 82;
    pub(crate) const PRODUCER_FENCED: i16 = 90;
    pub(crate) const TRANSACTION_ABORTABLE: i16 = 120;
}

/// Whether a failed batch's error makes the producer unusable rather than its transaction
/// abortable (Kafka's `TransactionManager.maybeTransitionToErrorState`: fencing, authorization,
/// an unsupported version).
pub(super) fn is_fatal_batch_error(e: &ProducerError) -> bool {
    use code::*;
    matches!(
        e,
        ProducerError::Kafka {
            code: PRODUCER_FENCED
                | INVALID_PRODUCER_EPOCH
                | TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                | CLUSTER_AUTHORIZATION_FAILED
                | UNSUPPORTED_VERSION,
            ..
        } | ProducerError::ProducerFenced { .. }
            | ProducerError::TransactionalIdAuthorizationFailed { .. }
    )
}

/// `DUPLICATE_SEQUENCE_NUMBER`: the batch was already written; Kafka's producer treats it as success.
pub(super) const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;

/// A Kafka error code by Kafka's name, as Kafka's `Errors`: `PRODUCER_FENCED (90)`; `error N`
/// for a code this build does not know.
pub(super) fn error_name(code: i16) -> String {
    use kafka_protocol::error::ResponseError;
    match ResponseError::try_from_code(code) {
        None => "NONE (0)".into(),
        Some(ResponseError::Unknown(c)) => format!("error {c}"),
        Some(e) => {
            let mut name = String::new();
            for (i, c) in format!("{e:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            format!("{name} ({code})")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_named_as_kafka() {
        assert_eq!(error_name(90), "PRODUCER_FENCED (90)");
        assert_eq!(error_name(53), "TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53)");
        assert_eq!(error_name(0), "NONE (0)");
        assert_eq!(error_name(31_000), "error 31000");
        let e = ProducerError::ProducerFenced { operation: "EndTxn", transactional_id: "t".into(), code: 90 };
        assert!(e.to_string().starts_with("EndTxn for transactional.id \"t\": PRODUCER_FENCED (90)"), "{e}");
        let e = ProducerError::Kafka { context: "Produce", topic: "x".into(), partition: 1, code: 10 };
        assert_eq!(e.to_string(), "Produce x-1: MESSAGE_TOO_LARGE (10)");
    }
}
