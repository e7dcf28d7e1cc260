use std::io;
use std::path::PathBuf;

use super::batch::BatchError;

/// Errors of the storage engine. Every variant names the file and, where known, the byte
/// position and offset, as Kafka's storage exceptions do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// An I/O operation on `path` failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("open", "read", "append to", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The filesystem has no space left (`ENOSPC`) or the quota is used up (`EDQUOT`) for an
    /// operation on `path`: an append, a segment roll (its index files are allocated up front,
    /// see [`OffsetIndex`](super::offset_index::OffsetIndex)), a checkpoint. [`LogError::io`] makes this variant
    /// from those errno values. Nothing half-done is left behind: a failed append or roll leaves
    /// the partition as it was, and the same write succeeds once space is freed. The broker
    /// answers `KAFKA_STORAGE_ERROR` (56) and keeps serving reads (Kafka instead marks the whole
    /// log directory offline through its `LogDirFailureChannel`).
    #[error("{op} {path}: {source}")]
    OutOfSpace {
        /// What was being done ("append to", "allocate", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying `ENOSPC` / `EDQUOT` error.
        #[source]
        source: io::Error,
    },
    /// A record batch in a `.log` file failed to decode or validate.
    #[error("{path}: invalid batch at position {position}: {source}")]
    Batch {
        /// The `.log` file.
        path: PathBuf,
        /// Byte position of the batch inside the file.
        position: u64,
        /// What is wrong with it (carries the base offset when the header could be read).
        #[source]
        source: BatchError,
    },
    /// An index file (`.index` / `.timeindex`) is malformed or inconsistent with its segment.
    #[error("{path}: corrupt index: {reason}")]
    CorruptIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A fetch or lookup offset lies outside `[log start offset, log end offset]`
    /// (Kafka's `OffsetOutOfRangeException`).
    #[error("offset {offset} is out of range for {partition}: log start offset {log_start_offset}, log end offset {log_end_offset}")]
    OffsetOutOfRange {
        /// The partition directory name (`topic-partition`).
        partition: String,
        /// The requested offset.
        offset: i64,
        /// The first offset still in the log.
        log_start_offset: i64,
        /// The offset the next appended record will get.
        log_end_offset: i64,
    },
    /// An append was refused (offsets not increasing, batch too large for a segment, ...).
    #[error("{path}: append refused: {reason}")]
    InvalidAppend {
        /// The segment or partition the append went to.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A configuration value could not be parsed or is out of range.
    #[error("invalid config {key}={value}: {reason}")]
    InvalidConfig {
        /// The Kafka config name.
        key: String,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// An idempotent batch's sequence does not follow its producer's last one (Kafka's
    /// `OutOfOrderSequenceException` from `ProducerAppendInfo.checkSequence`; see
    /// [`producer_state`](super::producer_state)). Nothing was appended.
    #[error("{partition}: out of order sequence number for producer {producer_id} (epoch {producer_epoch}) at offset {offset}: {sequence} (incoming seq. number), {reason}")]
    OutOfOrderSequence {
        /// The partition (`topic-partition`).
        partition: String,
        /// The producer id of the batch.
        producer_id: i64,
        /// The producer epoch of the batch.
        producer_epoch: i16,
        /// The batch's first sequence.
        sequence: i32,
        /// The offset the batch would have had.
        offset: i64,
        /// What was expected.
        reason: String,
    },
    /// An idempotent batch carries an epoch below its producer's latest (a fenced, zombie producer:
    /// Kafka's `InvalidProducerEpochException` from `ProducerAppendInfo.checkProducerEpoch`).
    /// Nothing was appended.
    #[error("{partition}: epoch of producer {producer_id} at offset {offset} is {producer_epoch}, which is smaller than the last seen epoch {current_epoch}")]
    InvalidProducerEpoch {
        /// The partition (`topic-partition`).
        partition: String,
        /// The producer id of the batch.
        producer_id: i64,
        /// The epoch of the batch.
        producer_epoch: i16,
        /// The latest epoch the partition has seen for this producer.
        current_epoch: i16,
        /// The offset the batch would have had.
        offset: i64,
    },
    /// A transaction marker's coordinator epoch is below the one of its producer's last marker
    /// in this partition (a zombie transaction coordinator: Kafka's
    /// `TransactionCoordinatorFencedException` from `ProducerAppendInfo.appendEndTxnMarker`).
    /// Nothing was appended.
    #[error("{partition}: marker of producer {producer_id} at offset {offset} has coordinator epoch {coordinator_epoch}, which is smaller than the last seen {current_coordinator_epoch}")]
    TransactionCoordinatorFenced {
        /// The partition (`topic-partition`).
        partition: String,
        /// The producer id of the marker.
        producer_id: i64,
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The coordinator epoch of the producer's last marker.
        current_coordinator_epoch: i32,
        /// The offset the marker would have had.
        offset: i64,
    },
    /// A batch breaks its producer's transaction state (Kafka's `InvalidTxnStateException` from
    /// `ProducerAppendInfo.appendDataBatch`: a non-transactional batch while the producer's
    /// transaction is open). Nothing was appended.
    #[error("{partition}: invalid transaction state of producer {producer_id} at offset {offset}: {reason}")]
    InvalidTxnState {
        /// The partition (`topic-partition`).
        partition: String,
        /// The producer id of the batch.
        producer_id: i64,
        /// The offset the batch would have had.
        offset: i64,
        /// What is wrong.
        reason: String,
    },
    /// A transactional batch reached an append that does not take them
    /// ([`PartitionLog::append`](super::PartitionLog::append) and
    /// [`PartitionLog::append_validated`](super::PartitionLog::append_validated); the
    /// transactional appends are [`PartitionLog::append_transactional`](super::PartitionLog::append_transactional)
    /// and [`PartitionLog::append_validated_transactional`](super::PartitionLog::append_validated_transactional)).
    /// Kafka's `KafkaApis.handleProduceRequest` answers transactional records without an
    /// authorized transactional id `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`. Nothing was appended.
    #[error("{partition}: transactional batch of producer {producer_id} refused: this append does not take transactional batches")]
    TransactionalNotAllowed {
        /// The partition (`topic-partition`).
        partition: String,
        /// The producer id of the batch.
        producer_id: i64,
    },
    /// The partition's log was closed (its log directory is shutting down): the append was
    /// refused, nothing was written. Kafka's request handlers stop before its `LogManager`
    /// shuts down; here a request already past that point gets this, and the broker answers
    /// `NOT_LEADER_OR_FOLLOWER` (retriable).
    #[error("{partition}: the log is closed (its log directory is shutting down)")]
    Closed {
        /// The partition (`topic-partition`).
        partition: String,
    },
    /// A file or directory name does not follow Kafka's `log.dirs` layout.
    #[error("{path}: {reason}")]
    Layout {
        /// The offending path.
        path: PathBuf,
        /// What was expected.
        reason: String,
    },
}

impl LogError {
    /// Wraps an [`io::Error`] with the operation and path it came from: [`LogError::OutOfSpace`]
    /// for `ENOSPC` and `EDQUOT`, [`LogError::Io`] otherwise.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if is_out_of_space(&source) {
            return LogError::OutOfSpace { op, path: path.into(), source };
        }
        LogError::Io { op, path: path.into(), source }
    }

    /// Whether this is a failure to write to the disk or read from it ([`LogError::Io`],
    /// [`LogError::OutOfSpace`]), as opposed to bad data or a refused request.
    pub fn is_storage_failure(&self) -> bool {
        matches!(self, LogError::Io { .. } | LogError::OutOfSpace { .. })
    }
}

/// `ENOSPC` (no space left on device) or `EDQUOT` (disk quota exceeded).
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_and_edquot_are_out_of_space() {
        for errno in [libc::ENOSPC, libc::EDQUOT] {
            let e = LogError::io("append to", "/x", io::Error::from_raw_os_error(errno));
            assert!(matches!(e, LogError::OutOfSpace { op: "append to", .. }), "{e:?}");
            assert!(e.is_storage_failure());
        }
        let e = LogError::io("append to", "/x", io::Error::from_raw_os_error(libc::EIO));
        assert!(matches!(e, LogError::Io { .. }) && e.is_storage_failure());
    }
}
