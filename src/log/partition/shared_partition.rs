//! [`Partition`]: one partition's log shared between threads, the unit of locking of a log
//! directory (Kafka's `Partition` with its `UnifiedLog`, whose `lock` serialises appends, rolls
//! and flushes, while readers use the log end offset and high watermark without it).
//!
//! - The [`PartitionLog`] is behind a read-write lock of its own. Appends, rolls, retention and
//!   the scheduler's flush bookkeeping take it for writing ([`Partition::log_mut`]); a fetch
//!   takes it for reading only while it looks up the [`FileSlice`] it returns (index lookups and
//!   batch headers, no record bytes: [`Partition::read`]).
//! - Log end offset, high watermark, last stable offset, log start offset, recovery point and
//!   leader epoch are atomics, written while the lock is held for writing (when a [`PartitionLogMut`] guard is
//!   dropped) and read with no lock: ListOffsets, Fetch's partition header, Metadata and the
//!   checkpoint files never wait for an append.
//! - A client's records are validated with no lock held ([`Partition::validate`]: CRC-32C,
//!   decompression, the record walk, LogValidator's rules, LogAppendTime stamping);
//!   [`Partition::append_validated`] holds the lock only to check producer state, assign offsets
//!   and write, as Kafka's `UnifiedLog.append` validates before `lock synchronized`.
//!   [`Partition::append_validated_transactional`] does the same for a transactional producer
//!   and [`Partition::append_txn_marker`] writes a COMMIT / ABORT marker under the lock; the
//!   last stable offset they move is published before the lock is released.
//! - fsyncs run on the log directory's scheduler when it has one
//!   ([`scheduler`](crate::log::scheduler)): a roll only records that the rolled segment awaits
//!   its fsync and wakes the scheduler, which collects file handles under the lock, fsyncs with
//!   no lock held, and takes the lock again only to move the recovery point.
//!
//! Lock order: the log directory's map lock, then one partition's lock; nothing holding a
//! partition's lock takes the map lock or another partition's lock (see
//! [`manager`](crate::log::manager)). The scheduler's wake-up is called after the lock is
//! released.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::log::checkpoint::TopicId;
use crate::log::config::LogConfig;
use crate::log::error::LogError;
use crate::log::segment::FileSlice;

use super::partition_log::{AppendInfo, PartitionLog};
use super::validator::{validate_client_records, ValidatedRecords};

/// What wakes the log directory's scheduler (set once background flushing is on): a cheap call
/// that takes only the scheduler's own signal lock.
#[derive(Clone)]
pub(crate) struct Wakeup(Arc<dyn Fn() + Send + Sync>);

impl Wakeup {
    /// Wraps the scheduler's wake-up.
    pub(crate) fn new(wake: impl Fn() + Send + Sync + 'static) -> Self {
        Wakeup(Arc::new(wake))
    }

    /// Wakes the scheduler.
    pub(crate) fn wake(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Wakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wakeup")
    }
}

/// One partition's log shared between threads (see the [module docs](self)).
///
/// ```
/// use fetchbench::log::batch::{BatchBuilder, Compression};
/// use fetchbench::log::partition::{OpenOptions, Partition};
/// use fetchbench::log::{LogConfig, PartitionLog};
///
/// let tmp = tempfile::tempdir()?;
/// let (log, _) = PartitionLog::open(&tmp.path().join("orders-0"), LogConfig::default(), OpenOptions::default())?;
/// let partition = Partition::new(log);
/// let mut batch = BatchBuilder::new(0, Compression::None);
/// batch.append(1_700_000_000_000, Some(b"key"), Some(b"value"), &[]);
/// // Validation takes no lock; the append takes the partition's lock to assign offsets and write.
/// let validated = partition.validate(&batch.build()?, 0)?;
/// let info = partition.append_validated(validated, 0)?;
/// assert_eq!((info.first_offset, partition.log_end_offset(), partition.high_watermark()), (0, 1, 1));
/// assert_eq!(partition.read(0, 1 << 20, true)?.position, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Partition {
    topic: String,
    partition: i32,
    dir: PathBuf,
    log: RwLock<PartitionLog>,
    log_end_offset: AtomicI64,
    high_watermark: AtomicI64,
    last_stable_offset: AtomicI64,
    log_start_offset: AtomicI64,
    recovery_point: AtomicI64,
    leader_epoch: AtomicI32,
    /// `PartitionLog::unflushed_since_ms`, `i64::MAX` for none.
    unflushed_since_ms: AtomicI64,
    /// `PartitionLog::flush_requested` as last published.
    flush_requested: AtomicBool,
    /// The log's config (a copy of its `Arc`), for validation and the scheduler without the lock.
    config: RwLock<Arc<LogConfig>>,
    topic_id: RwLock<Option<TopicId>>,
    wakeup: OnceLock<Wakeup>,
}

/// The partition's log held for writing ([`Partition::log_mut`]). When it is dropped, still
/// under the lock, the partition's lock-free offsets are updated from the log; then the lock is
/// released and, if the log now asks for a flush, the scheduler is woken.
#[derive(Debug)]
pub struct PartitionLogMut<'a> {
    partition: &'a Partition,
    guard: Option<RwLockWriteGuard<'a, PartitionLog>>,
}

impl Deref for PartitionLogMut<'_> {
    type Target = PartitionLog;

    fn deref(&self) -> &PartitionLog {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl DerefMut for PartitionLogMut<'_> {
    fn deref_mut(&mut self) -> &mut PartitionLog {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for PartitionLogMut<'_> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else { return };
        let wake = self.partition.publish(&guard);
        drop(guard);
        if wake {
            if let Some(w) = self.partition.wakeup.get() {
                w.wake();
            }
        }
    }
}

impl Partition {
    /// Shares `log`.
    pub fn new(log: PartitionLog) -> Partition {
        Partition {
            topic: log.topic().to_string(),
            partition: log.partition(),
            dir: log.dir().to_path_buf(),
            log_end_offset: AtomicI64::new(log.log_end_offset()),
            high_watermark: AtomicI64::new(log.high_watermark()),
            last_stable_offset: AtomicI64::new(log.last_stable_offset()),
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            recovery_point: AtomicI64::new(log.recovery_point()),
            leader_epoch: AtomicI32::new(log.leader_epoch()),
            unflushed_since_ms: AtomicI64::new(log.unflushed_since_ms().unwrap_or(i64::MAX)),
            flush_requested: AtomicBool::new(log.flush_requested()),
            config: RwLock::new(Arc::clone(log.config_arc())),
            topic_id: RwLock::new(log.topic_id()),
            wakeup: OnceLock::new(),
            log: RwLock::new(log),
        }
    }

    /// Topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log end offset (the offset the next record gets), without the lock.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    /// The high watermark (= log end offset on this single-replica broker), without the lock.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// The last stable offset ([`PartitionLog::last_stable_offset`]), without the lock.
    pub fn last_stable_offset(&self) -> i64 {
        self.last_stable_offset.load(Ordering::Acquire)
    }

    /// The log start offset (first readable offset), without the lock.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    /// The recovery point (the offset up to which the log is known to be fsynced), without the
    /// lock.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::Acquire)
    }

    /// The leader epoch stamped on appended batches, without the lock.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// The topic id from `partition.metadata` (KIP-516), without the partition's lock.
    pub fn topic_id(&self) -> Option<TopicId> {
        *self.topic_id.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log's effective config, without the partition's lock.
    pub fn config(&self) -> Arc<LogConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The log, for reading: concurrent readers share the lock, an append waits for them (and
    /// they for it). Hold it only for lookups, never across a socket write. A poisoned lock (a
    /// panic while it was held for writing) is taken over: an append validates before it
    /// writes, so the log stays consistent.
    pub fn log(&self) -> RwLockReadGuard<'_, PartitionLog> {
        self.log.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log, for writing (appends, rolls, retention, topic id, config). The lock-free
    /// offsets are updated when the guard is dropped.
    pub fn log_mut(&self) -> PartitionLogMut<'_> {
        PartitionLogMut { partition: self, guard: Some(self.log.write().unwrap_or_else(PoisonError::into_inner)) }
    }

    /// Kafka's `LocalLog.read`: [`PartitionLog::read`] under the read lock, which is held only
    /// for the index lookup that builds the [`FileSlice`]; the slice keeps its segment file open,
    /// and its bytes are moved after the lock is released.
    ///
    /// Errors: those of [`PartitionLog::read`].
    pub fn read(&self, fetch_offset: i64, max_bytes: u32, min_one_batch: bool) -> Result<FileSlice, LogError> {
        self.log().read(fetch_offset, max_bytes, min_one_batch)
    }

    /// [`PartitionLog::read_committed`] under the read lock, as [`Self::read`].
    ///
    /// Errors: those of [`PartitionLog::read`].
    pub fn read_committed(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
    ) -> Result<(FileSlice, Vec<crate::log::txn_index::AbortedTxn>), LogError> {
        self.log().read_committed(fetch_offset, max_bytes, min_one_batch)
    }

    /// Validates a client's record set with no lock held ([`validate_client_records`] with the
    /// partition's current config): the first half of an append.
    ///
    /// Errors: those of [`validate_client_records`].
    pub fn validate(&self, records: &[u8], now_ms: i64) -> Result<ValidatedRecords, LogError> {
        validate_client_records(&self.dir, records, &self.config(), now_ms)
    }

    /// The second half of an append ([`PartitionLog::append_validated`]) under the partition's
    /// lock: producer state checked, offsets assigned, records written.
    ///
    /// Errors: those of [`PartitionLog::append_validated`].
    pub fn append_validated(&self, records: ValidatedRecords, now_ms: i64) -> Result<AppendInfo, LogError> {
        self.log_mut().append_validated(records, now_ms)
    }

    /// [`Self::validate`] then [`Self::append_validated`].
    ///
    /// Errors: those of [`PartitionLog::append`].
    pub fn append(&self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let validated = self.validate(records, now_ms)?;
        self.append_validated(validated, now_ms)
    }

    /// [`PartitionLog::append_validated_transactional`] under the partition's lock (records
    /// validated by [`Self::validate`]); the last stable offset is published with the log end
    /// offset when the lock is released.
    ///
    /// Errors: those of [`PartitionLog::append_validated_transactional`].
    pub fn append_validated_transactional(
        &self,
        records: ValidatedRecords,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.log_mut().append_validated_transactional(records, now_ms)
    }

    /// [`Self::validate`] then [`Self::append_validated_transactional`].
    ///
    /// Errors: those of [`PartitionLog::append_transactional`].
    pub fn append_transactional(&self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let validated = self.validate(records, now_ms)?;
        self.append_validated_transactional(validated, now_ms)
    }

    /// [`PartitionLog::append_txn_marker`] under the partition's lock: a COMMIT or ABORT marker
    /// of `producer_id` written at the log end offset, its transaction ended. The new last
    /// stable offset (and log end offset) are published when the lock is released, before this
    /// returns. Returns the marker's offset and the completed transaction.
    ///
    /// Errors: those of [`PartitionLog::append_txn_marker`].
    pub fn append_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        aborted: bool,
        now_ms: i64,
    ) -> Result<(i64, crate::log::producer_state::CompletedTxn), LogError> {
        self.log_mut().append_txn_marker(producer_id, producer_epoch, coordinator_epoch, aborted, now_ms)
    }

    /// Closes the log in place ([`PartitionLog::close_in_place`]): after appends in flight
    /// (it waits for the lock), everything is fsynced and segments closed; later appends get
    /// [`LogError::Closed`].
    ///
    /// Errors: those of [`PartitionLog::close_in_place`].
    pub fn close(&self) -> Result<(), LogError> {
        self.log_mut().close_in_place()
    }

    /// Turns background flushing on ([`PartitionLog::set_background_flush`]) with `wakeup`
    /// called (after the lock is released) whenever the log starts asking for a flush. Once.
    pub(crate) fn enable_background_flush(&self, wakeup: Wakeup) {
        let _ = self.wakeup.set(wakeup);
        let mut log = self.log_mut();
        log.set_background_flush(true);
        // Anything already pending is published (and wakes the scheduler) on drop.
        self.flush_requested.store(false, Ordering::Release);
        drop(log);
    }

    /// Whether the scheduler has work here at `now_ms`, judged without the lock: a rolled
    /// segment awaits its fsync, `flush.messages` is reached, or `flush.ms` passed with messages
    /// unflushed ([`PartitionLog::background_flush_due`] re-checks under the lock).
    pub(crate) fn background_flush_due(&self, now_ms: i64) -> bool {
        if self.flush_requested.load(Ordering::Acquire) {
            return true;
        }
        let since = self.unflushed_since_ms.load(Ordering::Acquire);
        since != i64::MAX && now_ms.saturating_sub(since) >= self.config().flush_ms
    }

    /// Whether a flush was requested (a roll or `flush.messages`) and not yet done.
    pub(crate) fn flush_requested(&self) -> bool {
        self.flush_requested.load(Ordering::Acquire)
    }

    /// One background flush: the plan is made under the lock (file handles collected), the
    /// fsyncs run with no lock held, and the lock is taken again only to move the recovery point.
    /// Returns whether anything was flushed.
    ///
    /// Errors: an fsync's or an index's `open`; the recovery point is then left where it was
    /// and the flush is tried again at the scheduler's next pass.
    pub(crate) fn flush_in_background(&self, now_ms: i64) -> Result<bool, LogError> {
        let Some(plan) = self.log_mut().plan_background_flush(now_ms)? else { return Ok(false) };
        plan.sync()?;
        self.log_mut().complete_background_flush(&plan, now_ms);
        Ok(true)
    }

    /// Copies the log's offsets (and config, topic id) into the lock-free fields; called under
    /// the write lock. Returns whether the scheduler must be woken (a flush is newly requested).
    fn publish(&self, log: &PartitionLog) -> bool {
        self.log_end_offset.store(log.log_end_offset(), Ordering::Release);
        self.high_watermark.store(log.high_watermark(), Ordering::Release);
        self.last_stable_offset.store(log.last_stable_offset(), Ordering::Release);
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        self.recovery_point.store(log.recovery_point(), Ordering::Release);
        self.leader_epoch.store(log.leader_epoch(), Ordering::Release);
        self.unflushed_since_ms.store(log.unflushed_since_ms().unwrap_or(i64::MAX), Ordering::Release);
        if !Arc::ptr_eq(&self.config.read().unwrap_or_else(PoisonError::into_inner), log.config_arc()) {
            *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::clone(log.config_arc());
        }
        if *self.topic_id.read().unwrap_or_else(PoisonError::into_inner) != log.topic_id() {
            *self.topic_id.write().unwrap_or_else(PoisonError::into_inner) = log.topic_id();
        }
        let requested = log.is_background_flush() && log.flush_requested();
        let was = self.flush_requested.swap(requested, Ordering::AcqRel);
        requested && !was
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::super::loader::OpenOptions;
    use super::*;
    use crate::log::batch::{BatchBuilder, Compression, RecordBatch};

    fn partition(config: LogConfig) -> (tempfile::TempDir, Partition) {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _) = PartitionLog::open(&tmp.path().join("t-0"), config, OpenOptions::default()).unwrap();
        (tmp, Partition::new(log))
    }

    fn batch(n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::Zstd);
        for i in 0..n {
            b.append(1_700_000_000_000 + i as i64, Some(b"k"), Some(&[7u8; 100]), &[]);
        }
        b.build().unwrap()
    }

    #[test]
    fn validation_needs_no_lock() {
        let (_tmp, p) = partition(LogConfig::default());
        let records = batch(50);
        // Another thread holds the partition's lock, as an append would ...
        let held = p.log_mut();
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(p.validate(&records, 0).map(|v| v.batch_count())).unwrap());
            // ... and the validation (CRC, decompression, record walk) completes meanwhile.
            let done = rx.recv_timeout(Duration::from_secs(30));
            drop(held);
            assert_eq!(done.expect("validated while the lock was held").unwrap(), 1);
        });
        // Lock-free reads too.
        let held = p.log_mut();
        assert_eq!((p.log_end_offset(), p.high_watermark(), p.log_start_offset()), (0, 0, 0));
        drop(held);
    }

    #[test]
    fn offsets_are_assigned_under_the_lock_in_append_order() {
        let mut config = LogConfig::default();
        config.set("message.timestamp.type", "LogAppendTime").unwrap();
        let (_tmp, p) = partition(config);
        let first = p.validate(&batch(3), 1_000).unwrap();
        let second = p.validate(&batch(2), 2_000).unwrap();
        // Validated in one order, appended in the other: offsets follow the appends.
        assert_eq!(p.append_validated(second, 2_000).unwrap().first_offset, 0);
        assert_eq!(p.append_validated(first, 1_000).unwrap().first_offset, 2);
        assert_eq!((p.log_end_offset(), p.high_watermark()), (5, 5), "published on the guard's drop");
        let bytes = p.read(0, 1 << 20, true).unwrap().read_to_vec().unwrap();
        let a = RecordBatch::parse(&bytes).unwrap();
        a.verify_crc().unwrap();
        assert_eq!((a.base_offset(), a.header().max_timestamp), (0, 2_000), "LogAppendTime stamped in validation");
        let b = RecordBatch::parse(&bytes[a.as_bytes().len()..]).unwrap();
        b.verify_crc().unwrap();
        assert_eq!((b.base_offset(), b.header().max_timestamp), (2, 1_000), "base offset rewritten outside the CRC");
        // A corrupt batch is refused by the validation and never reaches the log.
        let mut bad = batch(1);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(matches!(p.validate(&bad, 0), Err(LogError::Batch { .. })));
        assert_eq!(p.log_end_offset(), 5);
    }

    #[test]
    fn a_closed_partition_refuses_appends_and_serves_reads() {
        let (_tmp, p) = partition(LogConfig::default());
        p.append(&batch(2), 0).unwrap();
        p.close().unwrap();
        assert!(matches!(p.append(&batch(1), 0), Err(LogError::Closed { .. })));
        assert_eq!(p.log_end_offset(), 2);
        assert_eq!(p.recovery_point(), 2, "closing fsyncs");
        assert!(p.read(0, 1 << 20, true).unwrap().len > 0);
        p.close().unwrap();
    }
}
