//! The transaction coordinator at run time over the broker's `Shared`: the writing of COMMIT /
//! ABORT markers to the partitions of a transaction ([`write_markers`]), and the coordinator's
//! thread ([`run`]: start-up replay, markers left to write, `transaction.timeout.ms` aborts,
//! transactional id expiry) over the [`TxnCoordinator`](super::runtime::TxnCoordinator) the broker
//! holds and its `__transaction_state` ([`LogStorage`]). Kafka's `TransactionCoordinator` +
//! `TransactionMarkerChannelManager` on one node.
//!
//! ```text
//! io thread: EndTxn / InitProducerId fencing an open transaction
//!   manager: Prepare* record written ─> TxnMarkers
//!   write_markers: for each partition, Partition::append_txn_marker (its lock only), the
//!     partition's parked Fetches tried, a __consumer_offsets partition's pending transactional
//!     offsets completed (GroupCoordinator) ─> manager.complete_markers (Complete* record)
//!   a marker that cannot be written (a full disk, a closing log): the rest are queued and the
//!     coordinator thread retries them; the transaction answers CONCURRENT_TRANSACTIONS until then
//! coordinator thread: load (replay of every __transaction_state partition) ─> markers of the
//!   transactions left in PrepareCommit / PrepareAbort written ─> loop until shutdown: queued
//!   markers retried (every second), timed-out transactions aborted (every
//!   transaction.abort.timed.out.transaction.cleanup.interval.ms), expired ids removed (every
//!   transaction.remove.expired.transaction.cleanup.interval.ms)
//! ```
//!
//! **Markers are written before EndTxn is answered.** Kafka answers EndTxn once PrepareCommit /
//! PrepareAbort is in its log and sends the markers to the partitions' leaders afterwards (the
//! producer's next transaction gets `CONCURRENT_TRANSACTIONS` until they are written). Here every
//! partition is local, so the markers are appended in the request: when EndTxn(commit) is
//! answered `NONE`, the transaction is visible to read_committed consumers, and the producer's
//! next AddPartitionsToTxn is not sent back to retry. The decision is durable from the Prepare*
//! record on, as in Kafka: a crash between it and the markers is completed by the replay at the
//! next start.
//!
//! ## Locks
//!
//! The manager's shard locks are leaves and never held across an append (see
//! [`state_manager`](super::state_manager)); a marker append holds only its partition's lock;
//! the group coordinator's shard lock is taken after the marker's partition lock is released.
//! The retry queue and the timer's mutex are leaves.

use std::sync::Arc;
use std::time::Duration;

use super::decisions::TxnResult;
use super::log_storage::LogStorage;
use super::runtime::lock;
use super::state_manager::TxnMarkers;
use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::log::partition::now_ms;
use crate::log::LogError;
use crate::protocol::consumer_offsets::OFFSETS_TOPIC;

/// How often markers that could not be written are tried again.
const MARKER_RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The broker's `__transaction_state` storage for `shared`'s coordinator.
pub(crate) fn storage(shared: &Shared) -> LogStorage<'_> {
    LogStorage { shared, num_partitions: shared.txn_coordinator().manager().config().num_partitions }
}

/// Writes the COMMIT / ABORT marker of `markers` to each of its partitions, then the Complete*
/// record ([`TransactionStateManager::complete_markers`](super::state_manager::TransactionStateManager::complete_markers)). Each written marker wakes the
/// partition's parked Fetches (read_committed ones wait for the last stable offset to move); a
/// marker in a `__consumer_offsets` partition completes the producer's pending transactional
/// offset commits there.
///
/// A partition that no longer exists is skipped (Kafka's marker channel drops it too); a marker
/// the log refuses for its epochs (a producer epoch above the marker's, a newer coordinator
/// epoch) is skipped with an error logged: that partition's data cannot be ended by this
/// coordinator. Any other failure (a full disk, a log closing for shutdown) leaves the partitions
/// not yet written queued for the coordinator thread, and returns `false`; the transaction
/// stays in PrepareCommit / PrepareAbort (its requests answer `CONCURRENT_TRANSACTIONS`) until
/// they are written, or until the next start replays it.
pub(crate) fn write_markers(shared: &Shared, mut markers: TxnMarkers) -> bool {
    let now = now_ms();
    let aborted = markers.result == TxnResult::Abort;
    let Some(logs) = shared.logs() else {
        // Shutting down: the replay at the next start writes them.
        return false;
    };
    // No transactional Produce / TxnOffsetCommit of this id between its verification and its
    // append while the markers are written (see `TxnCoordinator::append_lock`).
    let _appends = shared
        .txn_coordinator()
        .append_lock(&markers.transactional_id)
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let partitions = std::mem::take(&mut markers.partitions);
    let mut left = std::collections::BTreeSet::new();
    for tp in partitions {
        if !left.is_empty() {
            left.insert(tp);
            continue;
        }
        let Some(partition) = logs.partition(&tp.0, tp.1) else {
            tracing::warn!(
                transactional_id = markers.transactional_id.as_str(),
                "{}-{} no longer exists: no marker written there",
                tp.0,
                tp.1
            );
            continue;
        };
        match partition.append_txn_marker(
            markers.producer_id,
            markers.producer_epoch,
            markers.coordinator_epoch,
            aborted,
            now,
        ) {
            Ok(_) => {
                shared.purgatory().check_and_complete(&WatchKey::Partition(tp.0.clone(), tp.1));
                if tp.0 == OFFSETS_TOPIC {
                    // The marker's partition lock is released: the group coordinator may take
                    // its write-order mutex (see its lock order).
                    shared.coordinator().complete_txn_offsets(tp.1, markers.producer_id, !aborted);
                }
            }
            Err(e @ (LogError::InvalidProducerEpoch { .. } | LogError::TransactionCoordinatorFenced { .. })) => {
                tracing::error!(
                    transactional_id = markers.transactional_id.as_str(),
                    "the {} marker of producer {} epoch {} is refused by {}-{}: {e}",
                    if aborted { "ABORT" } else { "COMMIT" },
                    markers.producer_id,
                    markers.producer_epoch,
                    tp.0,
                    tp.1
                );
            }
            Err(e) => {
                tracing::warn!(
                    transactional_id = markers.transactional_id.as_str(),
                    "writing the transaction marker to {}-{}: {e} (retried)",
                    tp.0,
                    tp.1
                );
                left.insert(tp);
            }
        }
    }
    if !left.is_empty() {
        markers.partitions = left;
        shared.txn_coordinator().queue_retry(markers);
        return false;
    }
    match shared.txn_coordinator().manager().complete_markers(&storage(shared), &markers, now_ms()) {
        Ok(()) => true,
        Err(e) => {
            // The markers are written; only the Complete* record is missing: retried (writing
            // the markers again is skipped, their partitions are done).
            tracing::warn!(transactional_id = markers.transactional_id.as_str(), "completing the transaction: {e}");
            shared.txn_coordinator().queue_retry(markers);
            false
        }
    }
}

/// The coordinator thread: replays `__transaction_state`, writes the markers of the transactions
/// the replay found prepared, then retries queued markers, aborts timed-out transactions and
/// removes expired transactional ids until [`TxnCoordinator::shutdown`](super::runtime::TxnCoordinator::shutdown).
pub(crate) fn run(shared: &Arc<Shared>) {
    let coordinator = shared.txn_coordinator();
    let pending = coordinator.manager().load(&storage(shared), now_ms());
    if !pending.is_empty() {
        tracing::info!("completing {} transaction(s) left prepared at the last stop", pending.len());
    }
    for markers in pending {
        write_markers(shared, markers);
    }
    let started = std::time::Instant::now();
    let mut next_abort = started + coordinator.abort_interval;
    let mut next_remove = started + coordinator.remove_interval;
    loop {
        let now = std::time::Instant::now();
        let queued = std::mem::take(&mut *lock(&coordinator.retry));
        let retrying = !queued.is_empty();
        for markers in queued {
            write_markers(shared, markers);
        }
        if now >= next_abort {
            next_abort = now + coordinator.abort_interval;
            abort_timed_out(shared);
        }
        if now >= next_remove {
            next_remove = now + coordinator.remove_interval;
            let removed = coordinator.manager().remove_expired_transactional_ids(&storage(shared), now_ms());
            if !removed.is_empty() {
                tracing::info!("removed {} expired transactional id(s)", removed.len());
            }
        }
        let mut due = next_abort.min(next_remove);
        if retrying || !lock(&coordinator.retry).is_empty() {
            due = due.min(now + MARKER_RETRY_INTERVAL);
        }
        if coordinator.wait(due.saturating_duration_since(std::time::Instant::now())) {
            return;
        }
    }
}

/// Aborts the transactions open longer than their `transaction.timeout.ms` (Kafka's
/// `abortTimedOutTransactions`: the producer's epoch is bumped, fencing it, then the ABORT
/// markers are written).
fn abort_timed_out(shared: &Shared) {
    let manager = shared.txn_coordinator().manager();
    for txn in manager.expired_transactions(now_ms()) {
        match manager.abort_timed_out(&storage(shared), &txn, now_ms()) {
            Ok(Some(markers)) => {
                write_markers(shared, markers);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(transactional_id = txn.transactional_id.as_str(), "timeout abort: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::state_manager::InitProducerIdAnswer;
    use super::*;
    use crate::broker::config::BrokerConfig;
    use crate::broker::coordinator::runtime::GroupCoordinator;
    use crate::broker::{errors, topics};
    use crate::log::batch::{BatchBuilder, Compression};
    use crate::log::manager::LogManager;
    use crate::read_path::ReadPathKind;
    use std::collections::BTreeSet;

    /// A broker's shared state on `dir` (no thread started), with `props` applied.
    fn shared_on(dir: &std::path::Path, props: &[(&str, &str)]) -> Arc<Shared> {
        let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), dir, ReadPathKind::Copy);
        let props = props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        config.apply_props(&props).unwrap();
        let (logs, _) = LogManager::open(dir, config.log_config.clone(), |_| None, false).unwrap();
        let coordinator = GroupCoordinator::new(config.coordinator_config());
        let local = config.listen;
        Arc::new(Shared::new(config, local, Arc::new(logs), coordinator, 0))
    }

    /// Runs the coordinator thread of `shared` until `done` holds (30 s at most), then stops it.
    fn run_until(shared: &Arc<Shared>, done: impl Fn() -> bool) -> bool {
        let s = Arc::clone(shared);
        let thread = std::thread::spawn(move || run(&s));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let ok = done();
        shared.txn_coordinator().shutdown();
        thread.join().unwrap();
        ok
    }

    /// A transactional batch of `pid` epoch `epoch` with one record.
    fn txn_batch(pid: i64, epoch: i16, sequence: i32) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, sequence).transactional(true);
        b.append(1, None, Some(b"v"), &[]);
        b.build().unwrap()
    }

    /// A crash between the PrepareCommit record and the markers: the next start's coordinator
    /// thread replays it and writes the COMMIT marker, so the open transaction becomes visible
    /// (the last stable offset reaches the log end).
    #[test]
    fn a_commit_prepared_before_a_crash_is_completed_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let tp: BTreeSet<_> = [("a".to_string(), 0)].into();
        let shared = shared_on(dir.path(), &[]);
        assert!(run_until(&shared, || true), "the first start loads nothing");
        let logs = shared.logs().unwrap();
        topics::create(&logs.lock_topic_creation(), "a", 1, None).unwrap();
        let m = shared.txn_coordinator().manager();
        let st = storage(&shared);
        let InitProducerIdAnswer::Ready(p) = m.init_producer_id(&st, "tx", 60_000, -1, -1, now_ms()).unwrap() else {
            panic!()
        };
        m.add_partitions(&st, "tx", p.producer_id, p.epoch, &tp, now_ms()).unwrap();
        let a0 = logs.partition("a", 0).unwrap();
        a0.append_transactional(&txn_batch(p.producer_id, p.epoch, 0), now_ms()).unwrap();
        assert_eq!((a0.last_stable_offset(), a0.high_watermark()), (0, 1));
        // EndTxn's PrepareCommit is written; the markers never are (the crash).
        let markers = m.end_txn(&st, "tx", p.producer_id, p.epoch, TxnResult::Commit, now_ms()).unwrap().markers;
        assert!(markers.is_some());
        drop(a0);
        shared.log_manager().shutdown().unwrap();
        drop(shared);

        let shared = shared_on(dir.path(), &[]);
        let a0 = shared.logs().unwrap().partition("a", 0).unwrap();
        assert_eq!(a0.last_stable_offset(), 0, "still open after the restart, before the replay");
        assert!(run_until(&shared, || a0.last_stable_offset() == 2), "the COMMIT marker is written at start-up");
        assert!(a0.read_committed(0, 1 << 20, true).unwrap().1.is_empty(), "committed: no aborted transaction");
        // The transaction is complete: the producer's next epoch starts at once.
        let st = storage(&shared);
        let again = shared.txn_coordinator().manager().init_producer_id(&st, "tx", 60_000, -1, -1, now_ms()).unwrap();
        assert!(matches!(again, InitProducerIdAnswer::Ready(q) if q.epoch == p.epoch + 1), "{again:?}");
        shared.log_manager().shutdown().unwrap();
    }

    /// A transaction open longer than its `transaction.timeout.ms` is aborted by the coordinator
    /// thread: the ABORT marker is written (the last stable offset passes the transaction, which
    /// is in the aborted list), and its producer is fenced.
    #[test]
    fn a_timed_out_transaction_is_aborted_and_its_producer_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let tp: BTreeSet<_> = [("a".to_string(), 0)].into();
        let shared = shared_on(dir.path(), &[("transaction.abort.timed.out.transaction.cleanup.interval.ms", "50")]);
        topics::create(&shared.logs().unwrap().lock_topic_creation(), "a", 1, None).unwrap();
        let a0 = shared.logs().unwrap().partition("a", 0).unwrap();
        let s = Arc::clone(&shared);
        let thread = std::thread::spawn(move || run(&s));
        let st = storage(&shared);
        let m = shared.txn_coordinator().manager();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let p = loop {
            match m.init_producer_id(&st, "slow", 200, -1, -1, now_ms()) {
                Ok(InitProducerIdAnswer::Ready(p)) => break p,
                Err(e) if e.code() == errors::COORDINATOR_LOAD_IN_PROGRESS && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                other => panic!("{other:?}"),
            }
        };
        m.add_partitions(&st, "slow", p.producer_id, p.epoch, &tp, now_ms()).unwrap();
        a0.append_transactional(&txn_batch(p.producer_id, p.epoch, 0), now_ms()).unwrap();
        while a0.last_stable_offset() != 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        shared.txn_coordinator().shutdown();
        thread.join().unwrap();
        assert_eq!(a0.last_stable_offset(), 2, "the ABORT marker after the timeout");
        let (_, aborted) = a0.read_committed(0, 1 << 20, true).unwrap();
        assert_eq!(aborted.iter().map(|t| (t.producer_id, t.first_offset)).collect::<Vec<_>>(), [(p.producer_id, 0)]);
        // The producer's epoch was bumped by the abort: its EndTxn is fenced.
        let fenced = m.end_txn(&st, "slow", p.producer_id, p.epoch, TxnResult::Commit, now_ms()).unwrap_err();
        assert_eq!(fenced.code(), errors::PRODUCER_FENCED);
        shared.log_manager().shutdown().unwrap();
    }

    /// The append lock: while a transactional Produce of the id holds it (between its
    /// verification and its append), the transaction's markers wait; they are written once it
    /// is released, so a verified batch is never appended after the marker that ends its
    /// transaction.
    #[test]
    fn markers_wait_for_a_verified_append_of_their_id() {
        let dir = tempfile::tempdir().unwrap();
        let tp: BTreeSet<_> = [("a".to_string(), 0)].into();
        let shared = shared_on(dir.path(), &[]);
        assert!(run_until(&shared, || true));
        let logs = shared.logs().unwrap();
        topics::create(&logs.lock_topic_creation(), "a", 1, None).unwrap();
        let a0 = logs.partition("a", 0).unwrap();
        let m = shared.txn_coordinator().manager();
        let st = storage(&shared);
        let InitProducerIdAnswer::Ready(p) = m.init_producer_id(&st, "tx", 60_000, -1, -1, now_ms()).unwrap() else {
            panic!()
        };
        m.add_partitions(&st, "tx", p.producer_id, p.epoch, &tp, now_ms()).unwrap();
        a0.append_transactional(&txn_batch(p.producer_id, p.epoch, 0), now_ms()).unwrap();
        // A second batch verified, its append not done yet: it holds the id's lock.
        let verified = shared.txn_coordinator().append_lock("tx").read().unwrap();
        let markers = m.end_txn(&st, "tx", p.producer_id, p.epoch, TxnResult::Commit, now_ms()).unwrap().markers;
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || write_markers(&shared, markers.unwrap()))
        };
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(a0.log_end_offset(), 1, "no marker while the verified append is in flight");
        a0.append_transactional(&txn_batch(p.producer_id, p.epoch, 1), now_ms()).unwrap();
        drop(verified);
        assert!(writer.join().unwrap());
        assert_eq!((a0.log_end_offset(), a0.last_stable_offset()), (3, 3), "data, data, COMMIT");
        let (_, aborted) = a0.read_committed(0, 1 << 20, true).unwrap();
        assert!(aborted.is_empty());
        shared.log_manager().shutdown().unwrap();
    }
}
