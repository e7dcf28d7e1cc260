//! [`LogStorage`]: the transaction coordinator's [`TxnStateStorage`] over the broker's log:
//! one record appended to a `__transaction_state` partition (the topic created on the first
//! write, compacted, as [`transaction_state_topic_config`] says), a partition read back for the
//! start-up replay (Kafka's `TransactionStateManager.appendTransactionToLog` and
//! `loadTransactionMetadata` over its `ReplicaManager`).

use std::sync::Arc;

use super::storage::{transaction_state_topic_config, StorageError, StoredRecord, TxnStateStorage};
use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::broker::{errors, topics};
use crate::log::batch::mixed::MixedBatches;
use crate::log::batch::{BatchBuilder, Compression};
use crate::log::FileSlice;
use crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::broker::txn_coordinator::decisions::TxnResult;
    use crate::broker::txn_coordinator::metadata::TransactionState;
    use crate::broker::txn_coordinator::runtime::existing_partition_count;
    use crate::broker::txn_coordinator::state_manager::tests::{init, set, state};
    use crate::broker::txn_coordinator::state_manager::{TransactionStateManager, TxnStateConfig};

    /// The broker's log: the topic is created compacted on the first write, and a new manager
    /// replays it, a PrepareCommit left behind included.
    #[test]
    fn log_storage_creates_the_topic_and_is_replayed() {
        use crate::broker::config::BrokerConfig;
        use crate::broker::coordinator::runtime::GroupCoordinator;
        use crate::broker::shared::Shared;
        use crate::log::manager::LogManager;
        use crate::read_path::ReadPathKind;

        let dir = tempfile::tempdir().unwrap();
        let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), dir.path(), ReadPathKind::Copy);
        let (logs, _) = LogManager::open(dir.path(), config.log_config.clone(), |_| None, false).unwrap();
        let coordinator = GroupCoordinator::new(config.coordinator_config());
        let local = config.listen;
        let shared = Shared::new(config, local, Arc::new(logs), coordinator, 0);
        let txn_config = TxnStateConfig { num_partitions: 3, ..Default::default() };
        let storage = LogStorage { shared: &shared, num_partitions: 3 };
        assert_eq!(existing_partition_count(shared.log_manager()), None);

        let m = TransactionStateManager::new(txn_config.clone(), Box::new(|| Ok(77)));
        assert!(m.load(&storage, 0).is_empty());
        assert_eq!(init(&m, &storage, "tx", 1), (77, 0));
        let logs = shared.logs().unwrap();
        assert_eq!(existing_partition_count(shared.log_manager()), Some(3));
        let log = logs.partition(TRANSACTION_STATE_TOPIC, m.partition_for("tx")).unwrap();
        assert_eq!(log.config().cleanup_policy, crate::log::config::CleanupPolicy::COMPACT);
        assert_eq!(log.config().segment_bytes, 100 * 1024 * 1024);
        m.add_partitions(&storage, "tx", 77, 0, &set(&[("a", 0)]), 2).unwrap();
        let markers = m.end_txn(&storage, "tx", 77, 0, TxnResult::Commit, 3).unwrap().markers.unwrap();
        assert_eq!(log.log_end_offset(), 3);
        // The markers fit the log's marker append (what the wiring will call per partition).
        {
            let creation = logs.lock_topic_creation();
            crate::broker::topics::create(&creation, "a", 1, None).unwrap();
        }
        let a0 = logs.partition("a", 0).unwrap();
        let aborted = markers.result == TxnResult::Abort;
        let (marker_offset, _) = a0
            .append_txn_marker(markers.producer_id, markers.producer_epoch, markers.coordinator_epoch, aborted, 4)
            .unwrap();
        assert_eq!(marker_offset, 0);

        // A restart before the markers: the PrepareCommit is found again.
        let again = TransactionStateManager::new(txn_config.clone(), Box::new(|| Ok(78)));
        let pending = again.load(&storage, 10);
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].result, pending[0].partitions.clone()), (TxnResult::Commit, set(&[("a", 0)])));
        assert_eq!(pending[0].producer_id, markers.producer_id);
        again.complete_markers(&storage, &pending[0], 11).unwrap();
        let third = TransactionStateManager::new(txn_config, Box::new(|| Ok(79)));
        assert!(third.load(&storage, 20).is_empty());
        assert_eq!(state(&third, "tx").state, TransactionState::CompleteCommit);
    }
}
