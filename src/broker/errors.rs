//! Kafka error codes, and the ONE place where storage errors become them.
//!
//! Codes and names are Kafka's (`org.apache.kafka.common.protocol.Errors`); the mapping follows
//! what Kafka's `ReplicaManager.appendToLocalLog` / `readFromLog` return for the matching
//! exceptions.

use crate::log::{BatchError, LogError};

/// No error.
pub const NONE: i16 = 0;
/// `UNKNOWN_SERVER_ERROR`: an unexpected failure on the broker.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
/// `OFFSET_OUT_OF_RANGE`: the fetch offset is below the log start offset or above the log end offset.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// `CORRUPT_MESSAGE`: a batch failed its CRC, length or magic check.
pub const CORRUPT_MESSAGE: i16 = 2;
/// `UNKNOWN_TOPIC_OR_PARTITION`: this broker does not host the partition.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// `NOT_LEADER_OR_FOLLOWER` (retriable): the partition is not served here now (the broker is
/// shutting down: clients refresh their metadata and retry).
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// `COORDINATOR_NOT_AVAILABLE`: the group or transaction coordinator is not available (retriable).
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// `MESSAGE_TOO_LARGE`: a batch is larger than `max.message.bytes`.
pub const MESSAGE_TOO_LARGE: i16 = 10;
/// `INVALID_TOPIC_EXCEPTION`: the topic name is not legal.
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
/// `RECORD_LIST_TOO_LARGE`: the record set does not fit a segment (`segment.bytes`).
pub const RECORD_LIST_TOO_LARGE: i16 = 18;
/// `NOT_ENOUGH_REPLICAS` (retriable): what a transactional Produce gets while its transaction
/// cannot be verified (the coordinator is loading, or the transaction is being ended), as Kafka's
/// `ReplicaManager` translates those coordinator errors so that every client retries.
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
/// `INVALID_REQUIRED_ACKS`: `acks` is not 0, 1 or -1.
pub const INVALID_REQUIRED_ACKS: i16 = 21;
/// `UNSUPPORTED_VERSION`: the API version is not served.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// `TOPIC_ALREADY_EXISTS`: CreateTopics named a topic that exists.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
/// `INVALID_PARTITIONS`: CreateTopics asked for a non-positive (other than -1) partition count.
pub const INVALID_PARTITIONS: i16 = 37;
/// `INVALID_REPLICATION_FACTOR`: a replication factor other than -1 or 1 (one broker).
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
/// `INVALID_REPLICA_ASSIGNMENT`: a manual assignment names another broker, or is malformed.
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
/// `INVALID_CONFIG`: a configuration value is not valid.
pub const INVALID_CONFIG: i16 = 40;
/// `INVALID_REQUEST`: the request is malformed or asks for something not served.
pub const INVALID_REQUEST: i16 = 42;
/// `OUT_OF_ORDER_SEQUENCE_NUMBER`: an idempotent batch's sequence does not follow its
/// producer's last one (Kafka's `OutOfOrderSequenceException`).
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// `INVALID_PRODUCER_EPOCH`: an idempotent batch's epoch is older than its producer's latest
/// (Kafka's `InvalidProducerEpochException`, since 2.7 instead of `PRODUCER_FENCED` on produce).
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
/// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`: a transactional batch in a Produce request that names
/// no transactional id (Kafka's answer to `hasTransactionalRecords` without an authorized id;
/// clients treat it as fatal).
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// `INVALID_TXN_STATE`: a producer's batch breaks its transaction state, or EndTxn asks for the
/// other outcome than the one under way or done, or for an Empty transaction (Kafka's
/// `InvalidTxnStateException`).
pub const INVALID_TXN_STATE: i16 = 48;
/// `TRANSACTION_COORDINATOR_FENCED`: a transaction marker from a coordinator epoch older than
/// the one the partition last saw for its producer (Kafka's `TransactionCoordinatorFencedException`).
pub const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
/// `TOPIC_AUTHORIZATION_FAILED`: AddPartitionsToTxn of an internal topic (a client's transaction
/// may not hold the coordinators' topics).
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// `OPERATION_NOT_ATTEMPTED`: AddPartitionsToTxn did not add this partition because another of
/// the request's partitions was refused.
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
/// `KAFKA_STORAGE_ERROR`: a disk error while reading or writing the log.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// `FETCH_SESSION_ID_NOT_FOUND`: a fetch named a session this broker does not have (KIP-227).
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// `INVALID_RECORD`: a record inside a valid batch is invalid (KIP-467).
pub const INVALID_RECORD: i16 = 87;
/// `FENCED_LEADER_EPOCH`: the request's current leader epoch is older than the broker's (KIP-320).
pub const FENCED_LEADER_EPOCH: i16 = 74;
/// `UNKNOWN_LEADER_EPOCH`: the request's current leader epoch is newer than the broker's (KIP-320).
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
/// `UNKNOWN_TOPIC_ID`: a request named a topic id this broker does not have (KIP-516).
pub const UNKNOWN_TOPIC_ID: i16 = 100;

// Group coordinator errors (Kafka's `Errors`).
/// `OFFSET_METADATA_TOO_LARGE`: a committed offset's metadata exceeds `offset.metadata.max.bytes`.
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
/// `COORDINATOR_LOAD_IN_PROGRESS`: the coordinator is still loading `__consumer_offsets`.
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// `NOT_COORDINATOR`: this broker is not the group's coordinator.
pub const NOT_COORDINATOR: i16 = 16;
/// `ILLEGAL_GENERATION`: the member's generation is not the group's.
pub const ILLEGAL_GENERATION: i16 = 22;
/// `INCONSISTENT_GROUP_PROTOCOL`: no protocol in common with the group (or a different type).
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
/// `INVALID_GROUP_ID`: an empty group id where one is required.
pub const INVALID_GROUP_ID: i16 = 24;
/// `UNKNOWN_MEMBER_ID`: the member id is not in the group.
pub const UNKNOWN_MEMBER_ID: i16 = 25;
/// `INVALID_SESSION_TIMEOUT`: outside `group.min.session.timeout.ms`..`group.max.session.timeout.ms`.
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
/// `REBALANCE_IN_PROGRESS`: the group is rebalancing; the member must rejoin.
pub const REBALANCE_IN_PROGRESS: i16 = 27;
/// `INVALID_COMMIT_OFFSET_SIZE`: the offset commit batch is too large for the log.
pub const INVALID_COMMIT_OFFSET_SIZE: i16 = 28;
/// `NON_EMPTY_GROUP`: DeleteGroups on a group that has members.
pub const NON_EMPTY_GROUP: i16 = 68;
/// `GROUP_ID_NOT_FOUND`: DeleteGroups on a group that does not exist.
pub const GROUP_ID_NOT_FOUND: i16 = 69;
/// `MEMBER_ID_REQUIRED`: JoinGroup v4+ must be retried with the member id given (KIP-394).
pub const MEMBER_ID_REQUIRED: i16 = 79;
/// `GROUP_MAX_SIZE_REACHED`: the group has `group.max.size` members.
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
/// `FENCED_INSTANCE_ID`: another member now holds this `group.instance.id` (KIP-345).
pub const FENCED_INSTANCE_ID: i16 = 82;
/// `UNSTABLE_OFFSET_COMMIT` (retriable): OffsetFetch v7+ with `require_stable` for a partition
/// with a pending transactional offset commit (KIP-447).
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;

// Transaction coordinator errors (Kafka's `Errors`; `broker::txn_coordinator`).
/// `INVALID_PRODUCER_ID_MAPPING`: the producer id is not the one of its transactional id (or the
/// transactional id is unknown).
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
/// `INVALID_TRANSACTION_TIMEOUT`: `transaction.timeout.ms` is not in `1..=transaction.max.timeout.ms`.
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
/// `CONCURRENT_TRANSACTIONS` (retriable): another state change of the transactional id is under way.
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
/// `PRODUCER_FENCED`: a newer producer with the same transactional id has the epoch (answered as
/// `INVALID_PRODUCER_EPOCH` to the request versions that predate it).
pub const PRODUCER_FENCED: i16 = 90;
/// `TRANSACTION_ABORTABLE`: a verified partition is not in the transaction (AddPartitionsToTxn v4+
/// verify-only, KIP-890).
pub const TRANSACTION_ABORTABLE: i16 = 120;

/// The Kafka error code for a storage error.
///
/// | `LogError`                          | code                        |
/// |-------------------------------------|-----------------------------|
/// | `Batch` (CRC, length, magic, codec) | `CORRUPT_MESSAGE` (2)       |
/// | `Batch` (`InvalidRecord`, `InvalidOffsetRange`) | `INVALID_RECORD` (87) |
/// | `OffsetOutOfRange`                  | `OFFSET_OUT_OF_RANGE` (1)   |
/// | `InvalidAppend`                     | `CORRUPT_MESSAGE` (2), `RECORD_LIST_TOO_LARGE` (18) when it does not fit a segment |
/// | `Io`, `OutOfSpace`, `CorruptIndex`  | `KAFKA_STORAGE_ERROR` (56)  |
/// | `Layout`                            | `INVALID_TOPIC_EXCEPTION` (17) |
/// | `InvalidConfig`                     | `INVALID_CONFIG` (40)       |
/// | `OutOfOrderSequence`                | `OUT_OF_ORDER_SEQUENCE_NUMBER` (45) |
/// | `InvalidProducerEpoch`              | `INVALID_PRODUCER_EPOCH` (47) |
/// | `InvalidTxnState`                   | `INVALID_TXN_STATE` (48)    |
/// | `TransactionCoordinatorFenced`      | `TRANSACTION_COORDINATOR_FENCED` (52) |
/// | `TransactionalNotAllowed`           | `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (53) |
/// | `Closed` (the broker is shutting down) | `NOT_LEADER_OR_FOLLOWER` (6), retriable |
///
/// `UNKNOWN_PRODUCER_ID` (59) is never returned: like Kafka 4 (KIP-360), a producer the partition
/// does not know is accepted at any sequence.
pub fn log_error_code(error: &LogError) -> i16 {
    match error {
        LogError::Batch { source, .. } => batch_error_code(source),
        LogError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        LogError::InvalidAppend { reason, .. } if reason.contains("do not fit a segment") => RECORD_LIST_TOO_LARGE,
        LogError::InvalidAppend { .. } => CORRUPT_MESSAGE,
        LogError::Io { .. } | LogError::OutOfSpace { .. } | LogError::CorruptIndex { .. } => KAFKA_STORAGE_ERROR,
        LogError::Layout { .. } => INVALID_TOPIC_EXCEPTION,
        LogError::InvalidConfig { .. } => INVALID_CONFIG,
        LogError::OutOfOrderSequence { .. } => OUT_OF_ORDER_SEQUENCE_NUMBER,
        LogError::InvalidProducerEpoch { .. } => INVALID_PRODUCER_EPOCH,
        LogError::InvalidTxnState { .. } => INVALID_TXN_STATE,
        LogError::TransactionCoordinatorFenced { .. } => TRANSACTION_COORDINATOR_FENCED,
        LogError::TransactionalNotAllowed { .. } => TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        LogError::Closed { .. } => NOT_LEADER_OR_FOLLOWER,
    }
}

/// The Kafka error code for an invalid batch (Kafka's `LogValidator`: `CorruptRecordException`
/// for the batch framing and CRC, `InvalidRecordException` for a bad record inside and for a batch
/// whose offsets are impossible: `validateBatch`'s "Batch has an invalid offset range").
pub fn batch_error_code(error: &BatchError) -> i16 {
    match error {
        BatchError::InvalidRecord { .. } | BatchError::InvalidOffsetRange { .. } => INVALID_RECORD,
        _ => CORRUPT_MESSAGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_out_of_range_maps_to_1() {
        let e =
            LogError::OffsetOutOfRange { partition: "t-0".into(), offset: 9, log_start_offset: 0, log_end_offset: 3 };
        assert_eq!(log_error_code(&e), OFFSET_OUT_OF_RANGE);
        let e = LogError::io("read", "/x", std::io::Error::other("boom"));
        assert_eq!(log_error_code(&e), KAFKA_STORAGE_ERROR);
        let e = LogError::io("append to", "/x", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(e, LogError::OutOfSpace { .. }));
        assert_eq!(log_error_code(&e), KAFKA_STORAGE_ERROR);
    }

    #[test]
    fn producer_errors_map_to_kafka_codes() {
        let e = LogError::OutOfOrderSequence {
            partition: "t-0".into(),
            producer_id: 1,
            producer_epoch: 0,
            sequence: 7,
            offset: 3,
            reason: "6 (current end sequence number)".into(),
        };
        assert_eq!(log_error_code(&e), OUT_OF_ORDER_SEQUENCE_NUMBER);
        let e = LogError::InvalidProducerEpoch {
            partition: "t-0".into(),
            producer_id: 1,
            producer_epoch: 0,
            current_epoch: 1,
            offset: 3,
        };
        assert_eq!(log_error_code(&e), INVALID_PRODUCER_EPOCH);
    }

    #[test]
    fn transaction_errors_map_to_kafka_codes() {
        let e = LogError::TransactionCoordinatorFenced {
            partition: "t-0".into(),
            producer_id: 1,
            coordinator_epoch: 2,
            current_coordinator_epoch: 3,
            offset: 4,
        };
        assert_eq!(log_error_code(&e), TRANSACTION_COORDINATOR_FENCED);
        let e = LogError::InvalidTxnState { partition: "t-0".into(), producer_id: 1, offset: 4, reason: "x".into() };
        assert_eq!(log_error_code(&e), INVALID_TXN_STATE);
        let e = LogError::TransactionalNotAllowed { partition: "t-0".into(), producer_id: 1 };
        assert_eq!(log_error_code(&e), TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
}
