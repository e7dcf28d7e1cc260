//! Where the transaction coordinator's records go: [`TxnStateStorage`], one record at a time to
//! a `__transaction_state` partition, and the reads of the start-up replay; [`LogStorage`] is
//! the broker's log (Kafka's `TransactionStateManager.appendTransactionToLog` and
//! `loadTransactionMetadata` over its `ReplicaManager`), `MemStorage` (tests only) a vector per
//! partition.
//!
//! The topic is created on the first write, as Kafka creates it on the first
//! FindCoordinator(TRANSACTION): `transaction.state.log.num.partitions` partitions (default
//! [`DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS`]), `cleanup.policy=compact`,
//! `segment.bytes=transaction.state.log.segment.bytes` ([`TRANSACTION_STATE_SEGMENT_BYTES`],
//! 100 MiB), the broker's other log defaults (Kafka's `TransactionStateManager.transactionTopicConfigs`,
//! which also sets `unclean.leader.election.enable=false` and `min.insync.replicas`, which a single
//! node has no use for).

use std::sync::Arc;

use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::broker::{errors, topics};
use crate::log::batch::mixed::MixedBatches;
use crate::log::batch::{BatchBuilder, Compression};
use crate::log::config::CleanupPolicy;
use crate::log::manager::LogManager;
use crate::log::{FileSlice, LogConfig};
use crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC;

#[cfg(doc)]
use crate::protocol::transaction_state::DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS;

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

/// The number of partitions `__transaction_state` has in the broker's log, `None` when the
/// topic does not exist. Kafka's `TransactionStateManager` takes the topic's partition count
/// when it exists (`getTransactionTopicPartitionCount`) and `transaction.state.log.num.partitions`
/// only to create it; the broker's coordinator is built with this count when it is `Some`.
pub(crate) fn existing_partition_count(logs: &LogManager) -> Option<i32> {
    let partitions = topics::partitions(logs, TRANSACTION_STATE_TOPIC);
    let count = partitions.iter().max().map(|m| m + 1)?;
    if usize::try_from(count).ok() != Some(partitions.len()) {
        tracing::warn!("{TRANSACTION_STATE_TOPIC} has partitions {partitions:?}: some are missing");
    }
    Some(count)
}

/// Appends to and reads the broker's `__transaction_state` partitions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogStorage<'a> {
    /// The broker.
    pub shared: &'a Shared,
    /// How many partitions to create the topic with (`transaction.state.log.num.partitions`;
    /// the manager's [`num_partitions`](super::state_manager::TxnStateConfig::num_partitions)).
    pub num_partitions: i32,
}

impl TxnStateStorage for LogStorage<'_> {
    fn append(&self, partition: i32, key: Vec<u8>, value: Option<Vec<u8>>, now_ms: i64) -> Result<(), StorageError> {
        let mut batch = BatchBuilder::new(0, Compression::None);
        batch.append(now_ms, Some(&key), value.as_deref(), &[]);
        let bytes = batch.build().map_err(|e| (errors::UNKNOWN_SERVER_ERROR, e.to_string()))?;
        let Some(logs) = self.shared.logs() else {
            return Err((errors::NOT_LEADER_OR_FOLLOWER, "the broker is shutting down".into()));
        };
        if logs.partition(TRANSACTION_STATE_TOPIC, partition).is_none() {
            let config = transaction_state_topic_config(logs.config());
            let creation = logs.lock_topic_creation();
            topics::create(&creation, TRANSACTION_STATE_TOPIC, self.num_partitions, Some(config)).map_err(|e| {
                (errors::UNKNOWN_TOPIC_OR_PARTITION, format!("creating {TRANSACTION_STATE_TOPIC}: {e}"))
            })?;
        }
        let log = logs.partition(TRANSACTION_STATE_TOPIC, partition).ok_or_else(|| {
            (errors::UNKNOWN_TOPIC_OR_PARTITION, format!("{TRANSACTION_STATE_TOPIC}-{partition} does not exist"))
        })?;
        log.append(&bytes, now_ms).map_err(|e| (errors::log_error_code(&e), e.to_string()))?;
        // Someone may be consuming __transaction_state (long polling): its fetches are tried.
        self.shared
            .purgatory()
            .check_and_complete(&WatchKey::Partition(TRANSACTION_STATE_TOPIC.to_string(), partition));
        Ok(())
    }

    fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, StorageError> {
        let Some(log) = self.shared.logs().and_then(|l| l.partition(TRANSACTION_STATE_TOPIC, partition)) else {
            return Ok(Vec::new());
        };
        // The segments' files and sizes are taken under the partition's lock; the bytes are read
        // after it is released (a file stays readable while its handle is held).
        let segments: Vec<_> = log
            .log()
            .segments()
            .map(|s| FileSlice { segment: Arc::clone(s.file()), position: 0, len: u64::from(s.size()) })
            .collect();
        let mut records = Vec::new();
        for segment in segments {
            let bytes = segment.read_to_vec().map_err(|e| {
                (
                    errors::KAFKA_STORAGE_ERROR,
                    format!("{TRANSACTION_STATE_TOPIC}-{partition}: reading {}: {e}", segment.segment.path().display()),
                )
            })?;
            for batch in MixedBatches::new(&bytes) {
                let batch = batch
                    .map_err(|e| (errors::CORRUPT_MESSAGE, format!("{TRANSACTION_STATE_TOPIC}-{partition}: {e}")))?;
                if batch.is_control {
                    continue;
                }
                records.extend(batch.records.into_iter().map(|r| (r.key, r.value)));
            }
        }
        Ok(records)
    }
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
