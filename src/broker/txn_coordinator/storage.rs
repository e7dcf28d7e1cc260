//! Where the transaction coordinator's records go: [`TxnStateStorage`], one record at a time to
//! a `__transaction_state` partition, and the reads of the start-up replay; its implementation
//! over the broker's log is [`LogStorage`](super::log_storage::LogStorage) (Kafka's
//! `TransactionStateManager.appendTransactionToLog` and `loadTransactionMetadata` over its
//! `ReplicaManager`), `MemStorage` (tests only) a vector per partition.
//!
//! The topic is created on the first write, as Kafka creates it on the first
//! FindCoordinator(TRANSACTION): `transaction.state.log.num.partitions` partitions (default
//! [`DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS`]), `cleanup.policy=compact`,
//! `segment.bytes=transaction.state.log.segment.bytes` ([`TRANSACTION_STATE_SEGMENT_BYTES`],
//! 100 MiB), the broker's other log defaults (Kafka's `TransactionStateManager.transactionTopicConfigs`,
//! which also sets `unclean.leader.election.enable=false` and `min.insync.replicas`, which a single
//! node has no use for).

use crate::log::config::CleanupPolicy;
use crate::log::LogConfig;

#[cfg(doc)]
use crate::protocol::transaction_state::DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS;
#[cfg(test)]
use crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC;

/// Kafka's default `transaction.state.log.segment.bytes` (100 MiB).
pub(crate) const TRANSACTION_STATE_SEGMENT_BYTES: i32 = 100 * 1024 * 1024;

/// A stored `__transaction_state` record as read back: key, value (`None`: a tombstone); a
/// record without a key has `None` there (the replay skips it).
pub(crate) type StoredRecord = (Option<bytes::Bytes>, Option<bytes::Bytes>);

/// An error of the storage: the Kafka error code of the log's failure (before
/// [`append_error_code`](super::decisions::append_error_code) maps it for the client) and a message.
pub(crate) type StorageError = (i16, String);

/// A record to append: key, value (`None`: a tombstone).
#[cfg(test)]
pub(crate) type NewRecord = (Vec<u8>, Option<Vec<u8>>);

/// The `__transaction_state` partitions of the coordinator.
pub(crate) trait TxnStateStorage {
    /// Appends one record (the key, and the value or `None` for a tombstone) as one batch to
    /// `__transaction_state-<partition>`, creating the topic when it does not exist yet, and
    /// returns once the batch is in the log (page cache).
    ///
    /// Errors: the log's Kafka error code (`UNKNOWN_TOPIC_OR_PARTITION` when the partition is
    /// missing or the topic cannot be created, `KAFKA_STORAGE_ERROR` ...) and a message; the
    /// caller answers [`append_error_code`](super::decisions::append_error_code) of it.
    fn append(&self, partition: i32, key: Vec<u8>, value: Option<Vec<u8>>, now_ms: i64) -> Result<(), StorageError>;

    /// Every record of `__transaction_state-<partition>` in offset order (control batches left
    /// out); empty when the partition does not exist.
    ///
    /// Errors: the partition's files cannot be read or hold a corrupt batch (the records before
    /// it are not returned either: a partition is replayed whole or not at all).
    fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, StorageError>;
}

/// The log configuration of `__transaction_state`: the broker defaults, compacted, 100 MiB
/// segments (Kafka's `TransactionStateManager.transactionTopicConfigs`).
pub(crate) fn transaction_state_topic_config(broker_defaults: &LogConfig) -> LogConfig {
    let mut config = broker_defaults.clone();
    config.cleanup_policy = CleanupPolicy::COMPACT;
    config.segment_bytes = TRANSACTION_STATE_SEGMENT_BYTES;
    config
}

/// An in-memory [`TxnStateStorage`] for tests: the records of each partition in a vector, and
/// an error to answer instead of appending (to test failed writes).
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct MemStorage {
    records: std::sync::Mutex<std::collections::BTreeMap<i32, Vec<NewRecord>>>,
    fail_with: std::sync::Mutex<Option<i16>>,
}

#[cfg(test)]
impl MemStorage {
    /// Makes every append fail with the log's `code` (`None`: appends succeed again).
    pub(crate) fn fail_with(&self, code: Option<i16>) {
        *self.fail_with.lock().unwrap() = code;
    }

    /// The records of `partition`, in order.
    pub(crate) fn records(&self, partition: i32) -> Vec<NewRecord> {
        self.records.lock().unwrap().get(&partition).cloned().unwrap_or_default()
    }

    /// How many records all partitions hold.
    pub(crate) fn len(&self) -> usize {
        self.records.lock().unwrap().values().map(Vec::len).sum()
    }
}

#[cfg(test)]
impl TxnStateStorage for MemStorage {
    fn append(&self, partition: i32, key: Vec<u8>, value: Option<Vec<u8>>, _now_ms: i64) -> Result<(), StorageError> {
        if let Some(code) = *self.fail_with.lock().unwrap() {
            return Err((code, format!("injected failure of {TRANSACTION_STATE_TOPIC}-{partition}")));
        }
        self.records.lock().unwrap().entry(partition).or_default().push((key, value));
        Ok(())
    }

    fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, StorageError> {
        Ok(self
            .records(partition)
            .into_iter()
            .map(|(k, v)| (Some(bytes::Bytes::from(k)), v.map(bytes::Bytes::from)))
            .collect())
    }
}
