//! [`PartitionLog`], Kafka's `UnifiedLog` over `LocalLog`: the partition's state (segments,
//! offsets, leader epochs, producer state), its accessors, appends (validated by `validator.rs`,
//! then written to the active segment), rolls and flushes, and the directory helpers the other
//! files of [`super`] share. Opening is in `loader.rs`, reading in `read.rs`, segment deletion and
//! the cleaner's swap in `retention.rs`; each adds an `impl PartitionLog` block.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::log::batch::builder::set_partition_leader_epoch;
use crate::log::batch::{BatchBoundaries, RecordBatch};
use crate::log::checkpoint::{
    write_leader_epoch_checkpoint, write_partition_metadata, EpochEntry, TopicId, LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
};
use crate::log::config::LogConfig;
use crate::log::error::LogError;
use crate::log::producer_state::{
    CompletedTxn, ProducerCheck, ProducerStateManager, DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
};
use crate::log::segment::{self, Segment, SegmentConfig, SegmentSync};
use crate::log::txn_index::{self, AbortedTxn};

use super::epoch_cache::assign_epoch;
use super::validator::{assign_offsets, batch_error, validate_client_records, validate_with_offsets, ValidatedRecords};

/// An offset with its physical location: Kafka's `LogOffsetMetadata`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOffsetMetadata {
    /// The logical offset.
    pub offset: i64,
    /// Base offset of the segment holding it.
    pub segment_base_offset: i64,
    /// Byte position of the first batch at or after `offset` in that segment (its size when at the end).
    pub position: u32,
}

/// What an append did.
///
/// When `duplicate` is true the record set was a retry of idempotent batches already in the log
/// (Kafka's duplicate detection, see [`producer_state`](crate::log::producer_state)): NOTHING was
/// appended, `first_offset` / `last_offset` / `max_timestamp` are those of the ORIGINAL batches
/// (what Kafka's `UnifiedLog.append` answers), `offset_of_max_timestamp` is `last_offset`, and
/// `batches` and `bytes` are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub first_offset: i64,
    /// Last offset appended.
    pub last_offset: i64,
    /// Largest batch max timestamp appended.
    pub max_timestamp: i64,
    /// Last offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// Batches appended.
    pub batches: u32,
    /// Bytes appended.
    pub bytes: u32,
    /// Log start offset after the append.
    pub log_start_offset: i64,
    /// The set repeated batches already written: nothing was appended (see above).
    pub duplicate: bool,
}

/// One partition's log. Not internally synchronised: [`Partition`](super::Partition) is its lock
/// (a log directory's partitions are [`Partition`](super::Partition)s); [`PartitionLog::read`]
/// takes `&self`, appends `&mut self`.
///
/// ```
/// use fetchbench::log::batch::{BatchBuilder, BatchBoundaries, Compression};
/// use fetchbench::log::partition::OpenOptions;
/// use fetchbench::log::{LogConfig, PartitionLog};
///
/// let tmp = tempfile::tempdir()?;
/// let (mut log, _) = PartitionLog::open(&tmp.path().join("orders-0"), LogConfig::default(), OpenOptions::default())?;
/// let mut batch = BatchBuilder::new(0, Compression::Lz4);
/// for i in 0..3 {
///     batch.append(1_700_000_000_000 + i, Some(b"key"), Some(b"value"), &[]);
/// }
/// let info = log.append(&batch.build()?, 0)?;
/// assert_eq!((info.first_offset, info.last_offset, log.log_end_offset()), (0, 2, 3));
///
/// // A fetch from offset 1 returns the whole batch holding it: consumers skip offset 0.
/// let slice = log.read(1, 1 << 20, true)?;
/// assert_eq!(slice.position, 0);
/// let bytes = slice.read_to_vec()?;
/// assert_eq!(BatchBoundaries::new(&bytes).count(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PartitionLog {
    pub(super) dir: PathBuf,
    pub(super) topic: String,
    pub(super) partition: i32,
    /// Shared with [`Partition`](super::Partition)'s lock-free copy (replaced, never mutated).
    pub(super) config: Arc<LogConfig>,
    pub(super) segments: BTreeMap<i64, Segment>,
    pub(super) log_start_offset: i64,
    pub(super) log_end_offset: LogOffsetMetadata,
    pub(super) high_watermark: LogOffsetMetadata,
    pub(super) recovery_point: i64,
    pub(super) unflushed_messages: u64,
    pub(super) last_flush_ms: i64,
    pub(super) read_only: bool,
    pub(super) topic_id: Option<TopicId>,
    pub(super) leader_epochs: Vec<EpochEntry>,
    pub(super) leader_epoch: i32,
    pub(super) producer_state: ProducerStateManager,
    /// The aborted transactions of the log, in marker order (what its `.txnindex` files hold).
    pub(super) aborted_txns: Vec<crate::log::txn_index::AbortedTxn>,
    pub(super) last_producer_expiry_check_ms: i64,
    pub(super) storage_warnings: StorageWarnings,
    /// Largest producer id in any batch header read at load or appended since (expired producers
    /// included): the floor of new producer id blocks.
    pub(super) max_producer_id: Option<i64>,
    /// Closed by [`Self::close_in_place`] (a log directory's shutdown): appends are refused with
    /// [`LogError::Closed`], reads go on.
    pub(super) closed: bool,
    /// Whether fsyncs are left to the log directory's background scheduler (see
    /// [`Self::set_background_flush`]).
    pub(super) background_flush: bool,
    /// With background flushing: the base offset of the newest segment rolled since the last
    /// flush; the segments below it await their fsync (Kafka's roll schedules
    /// `flushUptoOffsetExclusive(newSegment.baseOffset)`).
    pub(super) pending_flush_below: Option<i64>,
}

/// The fsync work of one background flush, collected under the partition's lock by
/// [`PartitionLog::plan_background_flush`] and run with no lock held ([`FlushPlan::sync`]): the
/// segments' files (the `.log` shared with readers, the index files opened again), then the
/// partition directory. [`PartitionLog::complete_background_flush`] then moves the recovery point
/// to [`FlushPlan::target`] under the lock.
#[derive(Debug)]
pub struct FlushPlan {
    /// The recovery point once the files are synced: the log end offset when the plan was made
    /// for a full flush (`flush.messages` / `flush.ms`), else the base offset of the newest
    /// rolled segment.
    pub(super) target: i64,
    /// Whether this flushes up to the log end (`flush.messages` / `flush.ms`) rather than only
    /// rolled segments.
    pub(super) full: bool,
    /// Unflushed messages counted when the plan was made (a full flush), subtracted on completion.
    pub(super) messages: u64,
    pub(super) segments: Vec<SegmentSync>,
    pub(super) dir: PathBuf,
}

impl FlushPlan {
    /// The offset the recovery point moves to once the plan's files are synced.
    pub fn target(&self) -> i64 {
        self.target
    }

    /// fsyncs the planned segments' files and the partition directory. Takes no lock: the files
    /// are handles of their own (a segment deleted meanwhile is synced harmlessly).
    ///
    /// Errors: [`LogError::Io`] / [`LogError::OutOfSpace`] naming the file.
    pub fn sync(&self) -> Result<(), LogError> {
        for seg in &self.segments {
            seg.sync()?;
        }
        sync_dir(&self.dir)
    }
}

/// How often a partition logs a failing write at warn (issue 12: a full disk must be visible
/// without flooding the log at every produce request).
const STORAGE_WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Rate limit of the warnings about writes that fail for a storage reason (a full disk, an I/O
/// error): at most one line per [`STORAGE_WARN_INTERVAL`], carrying the count of the failures
/// not logged since the previous line, and one info line when writes succeed again.
#[derive(Debug, Default)]
pub(super) struct StorageWarnings {
    last_warned: Option<std::time::Instant>,
    suppressed: u64,
    failing: bool,
}

impl StorageWarnings {
    pub(super) fn failed(&mut self, partition: &str, e: &LogError) {
        self.failing = true;
        let now = std::time::Instant::now();
        if self.last_warned.is_some_and(|t| now.duration_since(t) < STORAGE_WARN_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        let suppressed = std::mem::take(&mut self.suppressed);
        let full = if matches!(e, LogError::OutOfSpace { .. }) { " (disk full)" } else { "" };
        tracing::warn!(
            "{partition}: write failed{full}: {e}; appends to this partition are refused with KAFKA_STORAGE_ERROR until one succeeds, reads go on ({suppressed} more failure(s) not logged in the last {} s)",
            STORAGE_WARN_INTERVAL.as_secs()
        );
        self.last_warned = Some(now);
    }

    pub(super) fn succeeded(&mut self, partition: &str) {
        if std::mem::take(&mut self.failing) {
            let suppressed = std::mem::take(&mut self.suppressed);
            tracing::info!("{partition}: appends succeed again ({suppressed} failure(s) not logged before this)");
            self.last_warned = None;
        }
    }
}

impl PartitionLog {
    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The effective config.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The effective config, shared (the copy [`Partition`](super::Partition) reads without its
    /// lock).
    pub fn config_arc(&self) -> &Arc<LogConfig> {
        &self.config
    }

    /// Replaces the config (takes effect for later appends, rolls and cleaning).
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = Arc::new(config);
    }

    /// First readable offset.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset the next record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.offset
    }

    /// Offset up to which consumers may read (= LEO on this single-replica broker).
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.offset
    }

    /// The last stable offset (KIP-98, Kafka's `UnifiedLog.lastStableOffset`): the first offset
    /// of the earliest open transaction when one is open below the high watermark, else the
    /// high watermark. A `read_committed` fetch reads up to it. A transaction whose first
    /// batches retention deleted counts from the log start offset (Kafka's
    /// `updateFirstUnstableOffset`: the first unstable offset is never below the log start
    /// offset; retention, as Kafka's `deleteOldSegments`, is bounded by the high watermark only).
    pub fn last_stable_offset(&self) -> i64 {
        self.producer_state
            .first_unstable_offset()
            .map_or(self.high_watermark.offset, |o| o.max(self.log_start_offset).min(self.high_watermark.offset))
    }

    /// The aborted transactions of the log, in marker order.
    pub fn aborted_txns(&self) -> &[crate::log::txn_index::AbortedTxn] {
        &self.aborted_txns
    }

    /// Offset up to which the log has been fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// The segments, by base offset.
    pub fn segments(&self) -> impl DoubleEndedIterator<Item = &Segment> + ExactSizeIterator {
        self.segments.values()
    }

    /// The active (last) segment.
    pub fn active_segment(&self) -> &Segment {
        self.segments.values().next_back().expect("a log always has an active segment")
    }

    /// Total bytes of all segments.
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size() as u64).sum()
    }

    /// Whether the log was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The topic id from `partition.metadata` (KIP-516), when the directory has one.
    pub fn topic_id(&self) -> Option<TopicId> {
        self.topic_id
    }

    /// Records the topic id in `partition.metadata` (Kafka's `PartitionMetadataFile`).
    ///
    /// Errors: [`LogError::Io`]; [`LogError::InvalidAppend`] when read-only.
    pub fn set_topic_id(&mut self, topic_id: TopicId) -> Result<(), LogError> {
        if self.read_only {
            return Err(LogError::InvalidAppend { path: self.dir.clone(), reason: "log is open read-only".into() });
        }
        write_partition_metadata(&self.dir.join(PARTITION_METADATA), topic_id)?;
        self.topic_id = Some(topic_id);
        Ok(())
    }

    /// The leader epoch stamped on appended batches (Kafka's `LogValidator` sets every batch's
    /// partition leader epoch to the leader's). Starts at the latest epoch in the cache, or 0.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Sets the leader epoch for later appends (a new leadership term).
    pub fn set_leader_epoch(&mut self, epoch: i32) {
        self.leader_epoch = epoch;
    }

    /// The leader epoch cache (`leader-epoch-checkpoint`): each epoch with the first offset
    /// appended under it, ascending (Kafka's `LeaderEpochFileCache`). Rebuilt from batches on
    /// recovery, truncated to the log's offsets, extended by appends of batches with a newer epoch.
    pub fn leader_epochs(&self) -> &[EpochEntry] {
        &self.leader_epochs
    }

    /// Appends v2 batches as a leader does: validates each (length, magic, CRC, the record walk:
    /// [`validate_client_records`], which a [`Partition`](super::Partition) runs before taking its
    /// lock) and assigns offsets from the log end offset by rewriting each base offset, outside the
    /// CRC (Kafka's `LogValidator`, in `validator.rs`), checks idempotent producers' epochs and
    /// sequences ([`producer_state`](crate::log::producer_state), Kafka's
    /// `analyzeAndValidateProducerState`), rolls first when the append would not fit the active
    /// segment, and moves the high watermark to the new LEO. `records` holds one or more whole
    /// batches (a produce request's record set). Every batch is checked before anything is
    /// written. A set that repeats batches already written (a producer's retry) appends nothing
    /// and returns the original offsets with [`AppendInfo::duplicate`] set.
    ///
    /// Errors: [`LogError::Batch`] for an invalid batch; [`LogError::OutOfOrderSequence`] /
    /// [`LogError::InvalidProducerEpoch`] for a producer's batch that breaks its sequence or epoch
    /// (nothing is appended then); [`LogError::InvalidTxnState`] for a non-transactional batch of
    /// a producer whose transaction is open; [`LogError::TransactionalNotAllowed`] for a
    /// transactional batch (they go through [`Self::append_transactional`]);
    /// [`LogError::InvalidAppend`] for an empty or oversized append or a read-only log;
    /// [`LogError::Closed`] after [`Self::close_in_place`]; [`LogError::Io`].
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let validated = validate_client_records(&self.dir, records, &self.config, now_ms)?;
        self.append_validated(validated, now_ms)
    }

    /// [`Self::append`] that also takes transactional batches (KIP-98; Kafka's `UnifiedLog.append`
    /// with `AppendOrigin.CLIENT` for a producer whose transactional id the broker authorized and
    /// whose partition its transaction coordinator added). Each transactional data batch opens
    /// its producer's transaction at its offset unless one is open
    /// ([`ProducerStateManager::begin_txn`], after the write succeeded), so the
    /// [last stable offset](Self::last_stable_offset) stays at the transaction's first offset
    /// until its marker ([`Self::append_txn_marker`]). Checks as for any producer batch: epoch
    /// ([`LogError::InvalidProducerEpoch`] for an epoch below the producer's), sequence, and a
    /// transactional batch must carry a producer id ([`LogError::Batch`], Kafka's
    /// `MemoryRecordsBuilder` rule).
    ///
    /// Errors: as [`Self::append`], less [`LogError::TransactionalNotAllowed`].
    pub fn append_transactional(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let validated = validate_client_records(&self.dir, records, &self.config, now_ms)?;
        self.append_validated_transactional(validated, now_ms)
    }

    /// The second half of [`Self::append_transactional`], as [`Self::append_validated`] is of
    /// [`Self::append`].
    ///
    /// Errors: as [`Self::append_transactional`], less the batch checks already done.
    pub fn append_validated_transactional(
        &mut self,
        records: ValidatedRecords,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_validated_inner(records, now_ms, true)
    }

    /// Writes a COMMIT (`aborted == false`) or ABORT marker of `producer_id` at the log end
    /// offset and ends the producer's transaction in this partition: Kafka's `UnifiedLog.appendAsLeader`
    /// of `MemoryRecords.withEndTransactionMarker` with `AppendOrigin.COORDINATOR`, what a
    /// broker does for each partition of a `WriteTxnMarkers` request. The marker is one control
    /// record ([`txn_index::marker_batch`]: key version 0 and type, value version 0 and
    /// `coordinator_epoch`), stamped with the partition's leader epoch and `now_ms` as its
    /// timestamp; it may roll a segment like any append.
    ///
    /// Checks first, nothing written when they fail (Kafka's `ProducerAppendInfo.appendEndTxnMarker`,
    /// [`ProducerStateManager::check_end_txn_marker`]): `producer_epoch` below the producer's
    /// current epoch is [`LogError::InvalidProducerEpoch`]; `coordinator_epoch` below the one of
    /// the producer's last marker is [`LogError::TransactionCoordinatorFenced`]. A marker of a
    /// producer with no open transaction here is written and completes an empty transaction at
    /// the marker (Kafka does the same).
    ///
    /// After the write the producer's epoch and coordinator epoch become the marker's, and for an
    /// ABORT the [`AbortedTxn`] goes to [`Self::aborted_txns`] and is appended to the `.txnindex`
    /// of the segment holding the MARKER (Kafka's `LogSegment.updateTxnIndex`; the transaction's
    /// data may be in earlier segments). The [last stable offset](Self::last_stable_offset)
    /// moves to the first offset of the earliest transaction still open, or to the log end.
    ///
    /// Returns the marker's offset and the completed transaction.
    ///
    /// Errors: the checks above; [`LogError::InvalidAppend`] for a negative `producer_id` or a
    /// read-only log; [`LogError::Closed`]; [`LogError::Io`] / [`LogError::OutOfSpace`] writing the
    /// marker (nothing changed), or writing the `.txnindex` entry or flushing after the marker
    /// (the marker is then in the log and the transaction ended: the entry is rebuilt from the
    /// marker when the partition is opened again).
    pub fn append_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        aborted: bool,
        now_ms: i64,
    ) -> Result<(i64, CompletedTxn), LogError> {
        if self.closed {
            return Err(self.closed_error());
        }
        if producer_id < 0 {
            return Err(LogError::InvalidAppend {
                path: self.dir.clone(),
                reason: format!("a transaction marker needs a producer id, got {producer_id}"),
            });
        }
        let offset = self.log_end_offset.offset;
        self.producer_state.check_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, offset)?;
        let mut bytes =
            txn_index::marker_batch(offset, producer_id, producer_epoch, aborted, coordinator_epoch, now_ms);
        set_partition_leader_epoch(&mut bytes, self.leader_epoch);
        let written = self.write_assigned(&bytes, now_ms);
        let (_, epochs_changed, messages) = self.track_storage(written)?;
        let done = self.producer_state.append_end_txn_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            offset,
            now_ms,
            aborted,
        );
        self.max_producer_id = self.max_producer_id.max(Some(producer_id));
        if done.is_aborted {
            let entry = AbortedTxn {
                producer_id,
                first_offset: done.first_offset,
                last_offset: done.last_offset,
                last_stable_offset: done.last_stable_offset,
            };
            self.aborted_txns.push(entry);
            // The segment holding the marker (the write may have rolled).
            let seg = self.segments.get(&self.log_end_offset.segment_base_offset).expect("the marker's segment");
            let indexed = txn_index::append(&txn_index::path_for(seg.log_path()), &entry);
            self.track_storage(indexed)?;
        }
        let after = self.after_write(epochs_changed, messages, now_ms);
        self.track_storage(after)?;
        Ok((offset, done))
    }

    /// The second half of [`Self::append`], the part that needs the partition's state (Kafka's
    /// `UnifiedLog.append` inside `lock synchronized`): assigns the offsets of `records` (validated
    /// by [`validate_client_records`]) from the log end offset and stamps the leader epoch (base
    /// offset and epoch are outside the CRC), checks the producers' epochs and sequences, and
    /// writes.
    ///
    /// Errors: as [`Self::append`], less the batch checks already done.
    pub fn append_validated(&mut self, records: ValidatedRecords, now_ms: i64) -> Result<AppendInfo, LogError> {
        self.append_validated_inner(records, now_ms, false)
    }

    /// [`Self::append_validated`] (`allow_transactional == false`: a transactional batch is
    /// [`LogError::TransactionalNotAllowed`]) or [`Self::append_validated_transactional`].
    fn append_validated_inner(
        &mut self,
        mut records: ValidatedRecords,
        now_ms: i64,
        allow_transactional: bool,
    ) -> Result<AppendInfo, LogError> {
        if self.closed {
            return Err(self.closed_error());
        }
        if !allow_transactional {
            if let Some(h) = records.headers.iter().find(|h| h.attributes.is_transactional()) {
                return Err(LogError::TransactionalNotAllowed {
                    partition: format!("{}-{}", self.topic, self.partition),
                    producer_id: h.producer_id,
                });
            }
        }
        assign_offsets(&self.dir, &mut records, self.log_end_offset.offset, self.leader_epoch)?;
        let headers = &records.headers;
        let update = match self.producer_state.check_append(headers)? {
            ProducerCheck::Duplicate(original) => {
                tracing::debug!(
                    "{}-{}: duplicate of offsets {}..={} (a producer's retry); nothing appended",
                    self.topic,
                    self.partition,
                    original.first_offset,
                    original.last_offset
                );
                return Ok(AppendInfo {
                    first_offset: original.first_offset,
                    last_offset: original.last_offset,
                    max_timestamp: original.max_timestamp,
                    offset_of_max_timestamp: original.last_offset,
                    batches: 0,
                    bytes: 0,
                    log_start_offset: self.log_start_offset,
                    duplicate: true,
                });
            }
            ProducerCheck::Append(update) => update,
        };
        let written = self.write_assigned(&records.bytes, now_ms);
        let (info, epochs_changed, messages) = self.track_storage(written)?;
        // The records are in the log: the producer state knows them even if the steps after the
        // write fail, so a producer's retry is recognised as a duplicate, not stored twice.
        self.producer_state.apply(update);
        // Kafka's `ProducerAppendInfo.appendDataBatch`: a transactional batch opens its
        // producer's transaction unless one is open (the first batch's offset stays its start).
        for h in records.headers.iter().filter(|h| h.attributes.is_transactional() && h.has_producer_id()) {
            self.producer_state.begin_txn(h.producer_id, h.base_offset);
        }
        let appended_max = records.headers.iter().filter(|h| h.has_producer_id()).map(|h| h.producer_id).max();
        self.max_producer_id = self.max_producer_id.max(appended_max);
        let after = self.after_write(epochs_changed, messages, now_ms);
        self.track_storage(after)?;
        if now_ms.saturating_sub(self.last_producer_expiry_check_ms) >= DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS
        {
            self.remove_expired_producers(now_ms);
        }
        Ok(info)
    }

    fn closed_error(&self) -> LogError {
        LogError::Closed { partition: format!("{}-{}", self.topic, self.partition) }
    }

    /// Whether [`Self::close_in_place`] closed the log.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The producer state of this partition (idempotent producers; empty for a read-only log).
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producer_state
    }

    /// The largest producer id in any batch header of this log read at load or appended since,
    /// expired producers included; `None` without idempotent batches (or read-only: not scanned).
    pub fn max_producer_id(&self) -> Option<i64> {
        self.max_producer_id.max(self.producer_state.max_producer_id())
    }

    /// Forgets producers whose last batch is older than `producer.id.expiration.ms` (Kafka's
    /// default, 24 h) at `now_ms` (Kafka's `UnifiedLog.removeExpiredProducers`; [`Self::append`]
    /// runs it every `producer.id.expiration.check.interval.ms`, 10 min). Returns how many went.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> usize {
        self.last_producer_expiry_check_ms = now_ms;
        let removed = self.producer_state.remove_expired(now_ms, DEFAULT_PRODUCER_ID_EXPIRATION_MS);
        if removed > 0 {
            tracing::info!("{}-{}: {removed} producer id(s) expired", self.topic, self.partition);
        }
        removed
    }

    /// Appends v2 batches keeping the offsets they carry (replication, the cleaner's tests, copying
    /// data between logs). Offsets must start at or above the log end offset and increase.
    ///
    /// Producer state is updated without sequence checks (Kafka's `AppendOrigin.REPLICATION`),
    /// transactions included: a transactional data batch opens its producer's transaction, a
    /// COMMIT / ABORT marker ends it, an ABORT's entry going to [`Self::aborted_txns`] and the
    /// active segment's `.txnindex`, as the loader replays them at open.
    ///
    /// Errors: as [`PartitionLog::append`] (but never a producer error), plus
    /// [`LogError::InvalidAppend`] when offsets go backwards.
    pub fn append_with_offsets(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let headers = validate_with_offsets(&self.dir, records, self.log_end_offset.offset)?;
        let written = self.write_assigned(records, now_ms);
        let (info, epochs_changed, messages) = self.track_storage(written)?;
        let mut aborted = Vec::new();
        for (h, b) in headers.iter().zip(BatchBoundaries::new(records)) {
            self.producer_state.replay(h);
            if h.has_producer_id() {
                self.max_producer_id = self.max_producer_id.max(Some(h.producer_id));
            }
            if let Some(t) = self.replay_txn(h, &records[b.position..b.position + b.size]) {
                aborted.push(t);
            }
        }
        if !aborted.is_empty() {
            // The whole append went to the active segment (a roll happens before it).
            let seg = self.segments.get(&self.log_end_offset.segment_base_offset).expect("the active segment");
            let path = txn_index::path_for(seg.log_path());
            for t in &aborted {
                let indexed = txn_index::append(&path, t);
                self.track_storage(indexed)?;
            }
        }
        let after = self.after_write(epochs_changed, messages, now_ms);
        self.track_storage(after)?;
        Ok(info)
    }

    /// The transaction side of a batch appended with its offsets (as the loader replays it): a
    /// transactional data batch opens its producer's transaction, a COMMIT / ABORT marker
    /// (`bytes`, the whole batch) ends it with its coordinator epoch recorded; an ABORT's
    /// [`AbortedTxn`] is added to [`Self::aborted_txns`] and returned for the `.txnindex`.
    fn replay_txn(&mut self, h: &crate::log::batch::BatchHeader, bytes: &[u8]) -> Option<AbortedTxn> {
        if !h.attributes.is_transactional() || !h.has_producer_id() {
            return None;
        }
        if !h.attributes.is_control() {
            self.producer_state.begin_txn(h.producer_id, h.base_offset);
            return None;
        }
        let aborted = match txn_index::end_marker(bytes) {
            Ok(Some(aborted)) => aborted,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(
                    "{}-{}: the control batch at offset {} is not read as a transaction marker: {e}",
                    self.topic,
                    self.partition,
                    h.base_offset
                );
                return None;
            }
        };
        if let Ok(epoch) = txn_index::marker_coordinator_epoch(bytes) {
            self.producer_state.set_coordinator_epoch(h.producer_id, epoch);
        }
        let done = self.producer_state.end_txn(h.producer_id, h.base_offset, aborted);
        let entry = done.is_aborted.then_some(AbortedTxn {
            producer_id: done.producer_id,
            first_offset: done.first_offset,
            last_offset: done.last_offset,
            last_stable_offset: done.last_stable_offset,
        })?;
        self.aborted_txns.push(entry);
        Some(entry)
    }

    /// Logs a storage failure (rate-limited, see [`StorageWarnings`]) and passes the result on.
    fn track_storage<T>(&mut self, result: Result<T, LogError>) -> Result<T, LogError> {
        match &result {
            Ok(_) => self.storage_warnings.succeeded(&format!("{}-{}", self.topic, self.partition)),
            Err(e) if e.is_storage_failure() => {
                self.storage_warnings.failed(&format!("{}-{}", self.topic, self.partition), e)
            }
            Err(_) => {}
        }
        result
    }

    /// Writes batches whose offsets are already final (validated by the caller), rolling first
    /// when needed, and moves the log end offset and high watermark. Returns the append's info,
    /// whether the leader epochs changed and the number of messages, for [`Self::after_write`].
    /// On an error nothing was written and the log is unchanged (a failed roll leaves the active
    /// segment active; the next append tries the roll again).
    fn write_assigned(&mut self, records: &[u8], now_ms: i64) -> Result<(AppendInfo, bool, u64), LogError> {
        if self.read_only {
            return Err(LogError::InvalidAppend { path: self.dir.clone(), reason: "log is open read-only".into() });
        }
        if self.closed {
            return Err(self.closed_error());
        }
        let max_segment = self.config.segment_bytes.max(1) as u64;
        if records.len() as u64 > max_segment {
            return Err(LogError::InvalidAppend {
                path: self.dir.clone(),
                reason: format!("{} bytes do not fit a segment of segment.bytes={}", records.len(), max_segment),
            });
        }
        let mut info = AppendInfo {
            first_offset: -1,
            last_offset: -1,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            batches: 0,
            bytes: records.len() as u32,
            log_start_offset: self.log_start_offset,
            duplicate: false,
        };
        let mut messages = 0u64;
        let epochs_before = self.leader_epochs.len();
        for b in BatchBoundaries::new(records) {
            let h = RecordBatch::parse(&records[b.position..b.position + b.size])
                .map_err(|e| batch_error(&self.dir, b.position, e))?
                .header()
                .to_owned();
            if info.first_offset < 0 {
                info.first_offset = h.base_offset;
            }
            info.last_offset = h.last_offset();
            if h.max_timestamp > info.max_timestamp {
                info.max_timestamp = h.max_timestamp;
                info.offset_of_max_timestamp = h.last_offset();
            }
            info.batches += 1;
            messages += u64::from(h.last_offset_delta.unsigned_abs()) + 1;
            if h.partition_leader_epoch >= 0 {
                assign_epoch(&mut self.leader_epochs, h.partition_leader_epoch, h.base_offset);
            }
        }
        let roll_ms = self.config.segment_ms;
        let needs_roll = {
            let active = self.segments.values_mut().next_back().expect("active segment");
            active.should_roll(
                max_segment.min(i32::MAX as u64) as u32,
                roll_ms,
                records.len() as u32,
                info.max_timestamp,
                info.last_offset,
                now_ms,
            )?
        };
        if needs_roll {
            self.roll_at(info.first_offset, now_ms)?;
        }
        let (&base, active) = self.segments.iter_mut().next_back().expect("active segment");
        active.append(info.last_offset, info.max_timestamp, info.offset_of_max_timestamp, records)?;
        self.log_end_offset =
            LogOffsetMetadata { offset: info.last_offset + 1, segment_base_offset: base, position: active.size() };
        self.high_watermark = self.log_end_offset;
        Ok((info, self.leader_epochs.len() != epochs_before, messages))
    }

    /// What follows a write: the leader-epoch checkpoint when the epochs changed, and the flush
    /// that `flush.messages` / `flush.ms` call for (inline, unless the log directory's scheduler
    /// flushes: [`Self::set_background_flush`]). An error here comes after the records were
    /// written (they stay in the log).
    fn after_write(&mut self, epochs_changed: bool, messages: u64, now_ms: i64) -> Result<(), LogError> {
        if epochs_changed {
            write_leader_epoch_checkpoint(&self.dir.join(LEADER_EPOCH_CHECKPOINT), &self.leader_epochs)?;
        }
        self.unflushed_messages += messages;
        if self.background_flush {
            return Ok(());
        }
        let flush_ms = self.config.flush_ms;
        if self.unflushed_messages >= self.config.flush_messages.max(1) as u64
            || now_ms.saturating_sub(self.last_flush_ms) >= flush_ms
        {
            self.flush(now_ms)?;
        }
        Ok(())
    }

    /// Rolls a new active segment at the log end offset (Kafka's `roll`): the old one gets its
    /// final time-index entry and trimmed indexes. Rolling an empty active segment is a no-op.
    pub fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.roll_at(self.log_end_offset.offset, now_ms)
    }

    fn roll_at(&mut self, new_base: i64, now_ms: i64) -> Result<(), LogError> {
        let active = self.segments.values().next_back().expect("active segment");
        let (old_base, old_empty) = (active.base_offset(), active.size() == 0);
        if old_empty && old_base == new_base {
            return Ok(());
        }
        // The new segment is made first: when that fails (a full disk: its indexes are allocated
        // up front), the active segment is untouched and the next append tries the roll again.
        let seg = Segment::create(&self.dir, new_base, segment_config(&self.config), now_ms)?;
        if !old_empty {
            let active = self.segments.get_mut(&old_base).expect("active segment");
            if let Err(e) = active.on_become_inactive() {
                // The old segment stays active (with trimmed, hence full, indexes the next
                // append rolls again); the new one goes.
                drop(seg);
                if let Err(rm) = Segment::delete_files(&self.dir, new_base, "") {
                    tracing::warn!("{}: after a failed roll: {rm}", self.dir.display());
                }
                return Err(e);
            }
        }
        self.segments.insert(new_base, seg);
        if old_empty {
            // An empty active segment at a lower base (e.g. after retention): replaced.
            self.segments.remove(&old_base);
            Segment::delete_files(&self.dir, old_base, "")?;
        }
        // Kafka's roll schedules `flushUptoOffsetExclusive(new base)`: the rolled segment is
        // fsynced and the recovery point moves past it, on the log directory's scheduler when it
        // has one (`set_background_flush`), else inline here.
        if self.background_flush {
            self.pending_flush_below = Some(self.pending_flush_below.map_or(new_base, |p| p.max(new_base)));
        } else {
            self.flush_segments_below(new_base)?;
        }
        self.log_end_offset = LogOffsetMetadata { offset: new_base, segment_base_offset: new_base, position: 0 };
        if self.high_watermark.offset >= new_base {
            self.high_watermark = self.log_end_offset;
        }
        Ok(())
    }

    /// fsyncs every segment holding offsets at or above the recovery point, then moves the recovery
    /// point to the log end offset. Kafka's default is never to fsync on append (`flush.messages` and
    /// `flush.ms` at Long.MAX): durability then comes from the page cache surviving a process crash
    /// and from replication, and a power loss can lose the unflushed tail.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        self.flush_segments_below(i64::MAX)?;
        self.recovery_point = self.log_end_offset.offset;
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        self.pending_flush_below = None;
        Ok(())
    }

    /// Leaves the fsyncs of this log to a background scheduler (the log directory's, Kafka's
    /// `kafka-scheduler`; see [`scheduler`](crate::log::scheduler)) instead of running them inline:
    /// a roll only records that the rolled segments await their fsync, and `flush.messages` /
    /// `flush.ms` only make [`Self::background_flush_due`] true. The scheduler then runs
    /// [`Self::plan_background_flush`], [`FlushPlan::sync`] with no lock held, and
    /// [`Self::complete_background_flush`]. Off by default (a log used alone, tests, tools).
    pub fn set_background_flush(&mut self, on: bool) {
        self.background_flush = on;
    }

    /// Whether [`Self::set_background_flush`] is on.
    pub fn is_background_flush(&self) -> bool {
        self.background_flush
    }

    /// Whether a rolled segment awaits its fsync or `flush.messages` is reached: work for the
    /// scheduler as soon as it can (it is woken for it), not at its next tick.
    pub fn flush_requested(&self) -> bool {
        self.pending_flush_below.is_some() || self.flush_messages_reached()
    }

    fn flush_messages_reached(&self) -> bool {
        self.unflushed_messages > 0 && self.unflushed_messages >= self.config.flush_messages.max(1) as u64
    }

    fn flush_ms_reached(&self, now_ms: i64) -> bool {
        self.unflushed_messages > 0 && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms
    }

    /// The last time (ms) the whole log was fsynced (`flush.ms` counts from it); `None` when
    /// nothing appended is unflushed.
    pub fn unflushed_since_ms(&self) -> Option<i64> {
        (self.unflushed_messages > 0).then_some(self.last_flush_ms)
    }

    /// Whether a background flush has work at `now_ms`: [`Self::flush_requested`], or `flush.ms`
    /// passed since the last flush with messages unflushed (Kafka's `LogManager.flushDirtyLogs`).
    pub fn background_flush_due(&self, now_ms: i64) -> bool {
        self.flush_requested() || self.flush_ms_reached(now_ms)
    }

    /// Collects the fsync work of a background flush (see [`Self::set_background_flush`]):
    /// for `flush.messages` / `flush.ms`, every segment from the one holding the recovery point
    /// to the active one, the target being the log end offset; otherwise the rolled segments
    /// below the newest roll, the target being its base offset. The index files are opened
    /// again here (an `open`, no I/O on data), so the fsyncs need no lock. `None` when there is
    /// nothing to do (or the log is read-only or closed).
    ///
    /// Errors: [`LogError::Io`] opening an index file.
    pub fn plan_background_flush(&mut self, now_ms: i64) -> Result<Option<FlushPlan>, LogError> {
        if self.read_only || self.closed {
            return Ok(None);
        }
        let full = self.flush_messages_reached() || self.flush_ms_reached(now_ms);
        let (target, end_base) = match self.pending_flush_below {
            _ if full => (self.log_end_offset.offset, i64::MAX),
            Some(below) => (below, below),
            None => return Ok(None),
        };
        let from = self.segments.range(..=self.recovery_point).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
        let mut segments = Vec::new();
        if from < end_base {
            for seg in self.segments.range(from..end_base).map(|(_, s)| s) {
                segments.push(seg.sync_handles()?);
            }
        }
        Ok(Some(FlushPlan {
            target,
            full,
            messages: if full { self.unflushed_messages } else { 0 },
            segments,
            dir: self.dir.clone(),
        }))
    }

    /// Completes a background flush whose [`FlushPlan::sync`] succeeded: the recovery point moves
    /// to the plan's target (never back), a full flush subtracts the messages it covered and
    /// restarts `flush.ms`, and a pending roll flush it covered is done.
    pub fn complete_background_flush(&mut self, plan: &FlushPlan, now_ms: i64) {
        self.recovery_point = self.recovery_point.max(plan.target.min(self.log_end_offset.offset));
        if plan.full {
            self.unflushed_messages = self.unflushed_messages.saturating_sub(plan.messages);
            self.last_flush_ms = now_ms;
        }
        if self.pending_flush_below.is_some_and(|below| below <= plan.target) {
            self.pending_flush_below = None;
        }
    }

    /// Applies `flush.ms` when no append did (Kafka's scheduled `flushDirtyLogs`): flushes when
    /// more than `flush.ms` passed since the last flush and something is unflushed. Call it
    /// periodically. Returns whether it flushed.
    pub fn maybe_flush(&mut self, now_ms: i64) -> Result<bool, LogError> {
        if self.unflushed_messages > 0 && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms {
            self.flush(now_ms)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// fsyncs the segments from the one holding the recovery point up to (excluding) the one
    /// starting at `end_base`, and the directory; moves the recovery point to `end_base` when
    /// that is a segment boundary below the log end.
    fn flush_segments_below(&mut self, end_base: i64) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        let from = self.segments.range(..=self.recovery_point).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
        if from >= end_base {
            return Ok(());
        }
        for seg in self.segments.range(from..end_base).map(|(_, s)| s) {
            seg.flush()?;
        }
        sync_dir(&self.dir)?;
        if end_base != i64::MAX {
            self.recovery_point = self.recovery_point.max(end_base);
        }
        Ok(())
    }

    /// Closes every segment (final time-index entries, trimmed indexes) after an fsync.
    pub fn close(mut self) -> Result<(), LogError> {
        self.close_in_place()
    }

    /// [`Self::close`] for a log others may still hold (a [`Partition`](super::Partition) shared
    /// with in-flight requests): everything is fsynced, every segment closed (final time-index
    /// entries, trimmed indexes), and from now on appends are refused with [`LogError::Closed`]
    /// (even when this fails half way); reads of what was written go on. Closing twice is a
    /// no-op.
    ///
    /// Errors: the fsync's or a segment's.
    pub fn close_in_place(&mut self) -> Result<(), LogError> {
        if self.read_only || self.closed {
            self.closed = true;
            return Ok(());
        }
        self.closed = true;
        self.flush(now_ms())?;
        for seg in self.segments.values_mut() {
            seg.close_in_place()?;
        }
        Ok(())
    }
}

pub(super) fn segment_config(config: &LogConfig) -> SegmentConfig {
    SegmentConfig {
        index_interval_bytes: config.index_interval_bytes.max(0) as u32,
        max_index_size: config.segment_index_bytes.max(12) as usize,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn sync_dir(dir: &Path) -> Result<(), LogError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| LogError::io("fsync", dir, e))
}

pub(super) fn rename_suffix(dir: &Path, base: i64, from: &str, to: &str) -> Result<(), LogError> {
    for s in [segment::LOG_SUFFIX, segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX, segment::TXN_INDEX_SUFFIX] {
        let a = dir.join(format!("{}{from}", segment::file_name(base, s)));
        let b = dir.join(format!("{}{to}", segment::file_name(base, s)));
        match fs::rename(&a, &b) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && s != segment::LOG_SUFFIX => {}
            Err(e) => return Err(LogError::io("rename", a, e)),
        }
    }
    Ok(())
}
