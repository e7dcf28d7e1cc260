//! [`TxnCoordinator`]: the broker's transaction coordinator as `Shared` holds it: the
//! [`TransactionStateManager`] (its partition count the existing `__transaction_state`'s, its
//! producer ids the log directory's), the markers waiting to be retried, and what the
//! coordinator's thread waits on. What runs over it (the marker writing, the thread) is in
//! [`markers`](super::markers), which needs the broker's `Shared`.
//!
//! ## Locks
//!
//! The manager's shard locks (see [`state_manager`](super::state_manager)); the retry queue and
//! the thread's mutex are leaves. An append lock ([`TxnCoordinator::append_lock`]) comes before
//! every other lock: a transactional Produce / TxnOffsetCommit (read) then the partition's or the
//! group coordinator's locks; the marker writer (write) then the partitions' locks, then the
//! group coordinator's.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use super::decisions::TxnError;
use super::state_manager::{TransactionStateManager, TxnMarkers, TxnStateConfig};
use crate::broker::config::BrokerConfig;
use crate::broker::{errors, topics};
use crate::log::manager::LogManager;
use crate::log::LogError;
use crate::protocol::transaction_state::TRANSACTION_STATE_TOPIC;

/// The transaction coordinator of a broker (see the module docs).
pub(crate) struct TxnCoordinator {
    manager: TransactionStateManager,
    /// Markers not written yet (a partition's append failed): the coordinator thread retries.
    pub(super) retry: Mutex<Vec<TxnMarkers>>,
    /// [`Self::append_lock`]'s stripes.
    append_locks: Vec<RwLock<()>>,
    /// Set by [`Self::shutdown`]; the coordinator thread's wait is on [`Self::wakeup`].
    stopping: Mutex<bool>,
    wakeup: Condvar,
    pub(super) abort_interval: Duration,
    pub(super) remove_interval: Duration,
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator").field("manager", &self.manager).finish_non_exhaustive()
    }
}

/// How many append locks the transactional ids share ([`TxnCoordinator::append_lock`]).
pub(crate) const APPEND_LOCK_STRIPES: usize = 256;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(1).max(1))
}

impl TxnCoordinator {
    /// The coordinator of a broker with `config` whose log directory is `logs`: its partition
    /// count is the existing `__transaction_state`'s, or `transaction.state.log.num.partitions`
    /// (Kafka's `getTransactionTopicPartitionCount`); producer ids come from
    /// [`LogManager::generate_producer_id`]. Every shard is loading until [`run`](super::markers::run) replays it.
    pub(crate) fn new(config: &BrokerConfig, logs: &Arc<LogManager>) -> TxnCoordinator {
        let existing = existing_partition_count(logs);
        let num_partitions = existing.unwrap_or(config.transaction_state_log_num_partitions).max(1);
        let ids = Arc::clone(logs);
        let generate = Box::new(move || {
            ids.generate_producer_id().map_err(|e| {
                tracing::warn!("InitProducerId: no producer id: {e}");
                let code = match e {
                    // Shutting down: retriable, the client asks again.
                    LogError::Closed { .. } => errors::COORDINATOR_NOT_AVAILABLE,
                    _ => errors::UNKNOWN_SERVER_ERROR,
                };
                TxnError::ProducerIdUnavailable { code }
            })
        });
        let state = TxnStateConfig {
            num_partitions,
            transaction_max_timeout_ms: config.transaction_max_timeout_ms,
            transactional_id_expiration_ms: i64::from(config.transactional_id_expiration_ms),
            coordinator_epoch: 0,
        };
        TxnCoordinator {
            manager: TransactionStateManager::new(state, generate),
            retry: Mutex::new(Vec::new()),
            append_locks: (0..APPEND_LOCK_STRIPES).map(|_| RwLock::new(())).collect(),
            stopping: Mutex::new(false),
            wakeup: Condvar::new(),
            abort_interval: millis(config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            remove_interval: millis(config.transaction_remove_expired_transaction_cleanup_interval_ms),
        }
    }

    /// The transactional ids' state.
    pub(crate) fn manager(&self) -> &TransactionStateManager {
        &self.manager
    }

    /// The append lock of `transactional_id` (one of [`APPEND_LOCK_STRIPES`], by the id's hash):
    /// a transactional Produce or TxnOffsetCommit holds it for reading from its verification to
    /// its append, the marker writer for writing while it writes the transaction's markers. So a
    /// batch verified while the transaction was ongoing is in the log before the marker that
    /// ends it, never after (where it would open a transaction no coordinator knows of, and hold
    /// the partition's last stable offset for ever). Kafka closes the same window with KIP-890's
    /// `VerificationGuard` in the partition's producer state. Taken before any log or group
    /// coordinator lock, never with a shard lock held.
    pub(crate) fn append_lock(&self, transactional_id: &str) -> &RwLock<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        transactional_id.hash(&mut h);
        &self.append_locks[(h.finish() % APPEND_LOCK_STRIPES as u64) as usize]
    }

    /// Ends the coordinator thread's loop (it returns at its next wake, at once).
    pub(crate) fn shutdown(&self) {
        *lock(&self.stopping) = true;
        self.wakeup.notify_all();
    }

    /// Queues markers for the coordinator thread to retry.
    pub(super) fn queue_retry(&self, markers: TxnMarkers) {
        lock(&self.retry).push(markers);
        self.wakeup.notify_all();
    }

    /// Waits up to `timeout` or until [`Self::shutdown`]; `true` when shutting down.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        let stopping = lock(&self.stopping);
        if *stopping {
            return true;
        }
        let (stopping, _) =
            self.wakeup.wait_timeout(stopping, timeout).unwrap_or_else(std::sync::PoisonError::into_inner);
        *stopping
    }
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
