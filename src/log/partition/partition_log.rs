//! One partition's log: ordered segments, offsets, appends, reads. Kafka's `UnifiedLog` over
//! `LocalLog` and `LogLoader`.
//!
//! Offsets, as Kafka names them:
//! - **log start offset**: the first offset still readable; advanced by retention.
//! - **log end offset** (LEO): the offset the next appended record gets.
//! - **high watermark** (HW): the offset up to which consumers may read. This broker has one
//!   replica (the leader is the whole ISR), so the HW moves to the LEO after every append, as Kafka's
//!   does with `replication.factor=1`; [`PartitionLog::set_high_watermark`] exists for tests and
//!   future replication.
//! - **recovery point**: the offset up to which the log is known to be fsynced; after an unclean
//!   shutdown, segments from the one holding it onwards are recovered (CRC-checked, indexes rebuilt).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::log::batch::builder::{set_base_offset, set_partition_leader_epoch};
use crate::log::batch::{BatchBoundaries, BatchError, BatchHeader, RecordBatch, ATTRIBUTES_OFFSET, CRC_OFFSET};
use crate::log::checkpoint::{
    read_leader_epoch_checkpoint, read_partition_metadata, write_leader_epoch_checkpoint, write_partition_metadata,
    EpochEntry, TopicId, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA,
};
use crate::log::config::{LogConfig, TimestampType};
use crate::log::error::LogError;
use crate::log::producer_state::{
    ProducerCheck, ProducerStateManager, DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
};
use crate::log::segment::{self, Segment, SegmentConfig};
use crate::log::time_index::TimestampOffset;

pub use crate::log::segment::{FileSlice, SegmentFile};

/// ListOffsets target timestamp meaning "the earliest offset" (Kafka's `EARLIEST_TIMESTAMP`).
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets target timestamp meaning "the latest offset" (Kafka's `LATEST_TIMESTAMP`).
pub const LATEST_TIMESTAMP: i64 = -1;

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

/// How [`PartitionLog::open`] should treat the directory.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Whether the previous shutdown was clean (Kafka's `.kafka_cleanshutdown` marker). After an
    /// unclean one, every segment from the recovery point on is recovered.
    pub had_clean_shutdown: bool,
    /// Recovery point from `recovery-point-offset-checkpoint` (0 when unknown: recover everything
    /// after an unclean shutdown).
    pub recovery_point: Option<i64>,
    /// Log start offset from `log-start-offset-checkpoint` (else the first segment's base offset).
    pub log_start_offset: Option<i64>,
    /// Open without writing anything (no recovery, no index rebuild on disk, no cleanup): for data
    /// on read-only media and for tools. Indexes that fail their sanity check are ignored (reads scan
    /// from the segment start instead).
    pub read_only: bool,
    /// Wall clock in ms (for segment creation times); 0 = now.
    pub now_ms: i64,
}

/// What [`PartitionLog::open`] found and did.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Segments loaded.
    pub segments: usize,
    /// Segments whose indexes were rebuilt (missing or failed the sanity check).
    pub rebuilt_indexes: Vec<i64>,
    /// Segments recovered (CRC-validated) because the shutdown was unclean.
    pub recovered: Vec<i64>,
    /// Bytes cut from torn or corrupt tails.
    pub truncated_bytes: u64,
    /// Segments deleted because they followed a corrupt one.
    pub deleted_after_corruption: Vec<i64>,
    /// Leftover files removed (`.deleted`, `.cleaned`, orphan indexes, stale snapshots).
    pub removed_files: Vec<PathBuf>,
    /// `.swap` segments completed.
    pub swapped: Vec<i64>,
    /// Read-only opens: bytes of invalid batches (bad CRC, torn tail, offsets out of order) left
    /// unserved; nothing is written.
    pub unserved_bytes: u64,
    /// Damaged `leader-epoch-checkpoint` / `partition.metadata`, and what replaced each.
    pub damaged: Vec<DamagedFile>,
    /// Offsets missing between two segments of a log that is not compacted (a lost segment).
    pub holes: Vec<OffsetHole>,
    /// Checkpointed offsets that did not match the loaded log (each also logged at warn): a
    /// log-start offset above the log end offset (ignored, the data stays visible) and a recovery
    /// point above it (flushed records were lost).
    pub offset_warnings: Vec<String>,
}

/// A damaged file found while loading a log directory, and what was done instead: Kafka's
/// `CheckpointReadBuffer` and `PartitionMetadataReadBuffer` throw an `IOException` on such a file,
/// and Kafka's `LogManager` then takes the whole log directory offline (on one directory, the
/// broker stops). Here each file is rebuilt where the data allows (see
/// [`PartitionLog::open`], [`LogManager::open`](crate::log::manager::LogManager::open) and
/// [`ProducerIdManager::open`](crate::log::producer_id::ProducerIdManager::open)), with a warning
/// naming the file; start-up goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamagedFile {
    /// The damaged file.
    pub path: PathBuf,
    /// What is wrong with it (the read or parse error).
    pub error: String,
    /// What was done instead (what was rebuilt, from what).
    pub action: String,
}

/// Offsets `first_missing..=last_missing` that no segment holds, between two segments of a log
/// whose cleanup policy does not include `compact`: the next segment's base offset is above the
/// previous segment's next offset. Only a lost or deleted segment makes that (a segment rolls at
/// the log end offset; retention deletes from the start; control batches of transactions take
/// their own offsets, so transactions leave no gap in the log). Compaction legitimately leaves
/// such gaps (Kafka's cleaner keeps each group's base offset and drops records at its end), so a
/// compacted log is never checked. A fetch inside the hole gets the next batch, as in a
/// compaction gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetHole {
    /// The segment before the hole (`.log`).
    pub previous_segment: PathBuf,
    /// The segment after the hole (`.log`).
    pub next_segment: PathBuf,
    /// First offset missing (the previous segment's next offset).
    pub first_missing: i64,
    /// Last offset missing (the next segment's base offset - 1).
    pub last_missing: i64,
}

/// One partition's log. Not internally synchronised: wrap it in a lock; [`PartitionLog::read`]
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
    dir: PathBuf,
    topic: String,
    partition: i32,
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    log_end_offset: LogOffsetMetadata,
    high_watermark: LogOffsetMetadata,
    recovery_point: i64,
    unflushed_messages: u64,
    last_flush_ms: i64,
    read_only: bool,
    topic_id: Option<TopicId>,
    leader_epochs: Vec<EpochEntry>,
    leader_epoch: i32,
    producer_state: ProducerStateManager,
    last_producer_expiry_check_ms: i64,
    storage_warnings: StorageWarnings,
    /// Largest producer id in any batch header read at load or appended since (expired producers
    /// included): the floor of new producer id blocks.
    max_producer_id: Option<i64>,
}

/// How often a partition logs a failing write at warn (issue 12: a full disk must be visible
/// without flooding the log at every produce request).
const STORAGE_WARN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Rate limit of the warnings about writes that fail for a storage reason (a full disk, an I/O
/// error): at most one line per [`STORAGE_WARN_INTERVAL`], carrying the count of the failures
/// not logged since the previous line, and one info line when writes succeed again.
#[derive(Debug, Default)]
struct StorageWarnings {
    last_warned: Option<std::time::Instant>,
    suppressed: u64,
    failing: bool,
}

impl StorageWarnings {
    fn failed(&mut self, partition: &str, e: &LogError) {
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

    fn succeeded(&mut self, partition: &str) {
        if std::mem::take(&mut self.failing) {
            let suppressed = std::mem::take(&mut self.suppressed);
            tracing::info!("{partition}: appends succeed again ({suppressed} failure(s) not logged before this)");
            self.last_warned = None;
        }
    }
}

/// Splits a partition directory name `topic-partition` at its last dash (topics may contain
/// dashes). `None` when it does not end in `-<non-negative integer>`.
pub fn parse_topic_partition(dir_name: &str) -> Option<(String, i32)> {
    let (topic, part) = dir_name.rsplit_once('-')?;
    let partition: i32 = part.parse().ok()?;
    if topic.is_empty() || partition < 0 || part.starts_with('+') {
        return None;
    }
    Some((topic.to_string(), partition))
}

impl PartitionLog {
    /// Opens (creating when absent) the partition directory `dir` (named `topic-partition`) and
    /// loads it as Kafka's `LogLoader` does: leftover `.deleted`/`.cleaned` files removed, `.swap`
    /// segments completed, each segment opened with its indexes sanity-checked (rebuilt when missing
    /// or inconsistent), segments from the recovery point recovered after an unclean shutdown (torn
    /// or corrupt tails truncated, later segments deleted), producer snapshots past the log end
    /// removed. An empty directory gets one empty segment at offset 0. Finally the idempotent
    /// producers' state is rebuilt by replaying the batch headers of the recovered log (Kafka reads
    /// its `.snapshot` files instead; see [`producer_state`](crate::log::producer_state)); read-only
    /// opens skip it (they take no appends).
    ///
    /// A damaged `leader-epoch-checkpoint` is rebuilt from the partition leader epoch of every
    /// batch header (and written back unless read-only); a damaged `partition.metadata` leaves the
    /// topic id unknown (the log manager restores it from a sibling partition). Both are reported
    /// in [`LoadReport::damaged`] with a warning; Kafka takes the log directory offline instead.
    /// Offsets missing between segments of a log not compacted are warned about and reported in
    /// [`LoadReport::holes`] (see [`OffsetHole`]).
    ///
    /// Errors: [`LogError::Layout`] when the directory name is not `topic-partition`;
    /// [`LogError::Io`]; [`LogError::Batch`] / [`LogError::CorruptIndex`] only in read-only mode
    /// when a segment cannot even be walked.
    pub fn open(dir: &Path, config: LogConfig, opts: OpenOptions) -> Result<(Self, LoadReport), LogError> {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (topic, partition) = parse_topic_partition(&name).ok_or_else(|| LogError::Layout {
            path: dir.to_path_buf(),
            reason: "a partition directory is named <topic>-<partition>".into(),
        })?;
        let now_ms = if opts.now_ms == 0 { now_ms() } else { opts.now_ms };
        if !opts.read_only {
            fs::create_dir_all(dir).map_err(|e| LogError::io("create", dir, e))?;
        }
        let seg_cfg = segment_config(&config);
        let mut report = LoadReport::default();
        if !opts.read_only {
            remove_leftovers(dir, seg_cfg, &mut report)?;
        }
        let mut bases: Vec<i64> = list_dir(dir)?
            .iter()
            .filter(|n| n.ends_with(segment::LOG_SUFFIX))
            .filter_map(|n| segment::parse_base_offset(n))
            .collect();
        bases.sort_unstable();
        let recovery_point = opts.recovery_point.unwrap_or(0);
        let mut segments = BTreeMap::new();
        let mut recovered_epochs: Vec<(i32, i64)> = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied();
            let mut seg = Segment::open(dir, base, seg_cfg, opts.read_only)?;
            if let Err(e) = seg.sanity_check() {
                if opts.read_only {
                    tracing::info!(
                        "{}: ignoring index ({e}); reads will scan from the segment start",
                        seg.log_path().display()
                    );
                    seg = Segment::open_without_indexes(dir, base, seg_cfg)?;
                } else {
                    if opts.had_clean_shutdown {
                        tracing::warn!("{}: rebuilding indexes: {e}", seg.log_path().display());
                    } else {
                        // After an unclean shutdown the active segment's preallocated index was
                        // never trimmed: expected, not a corruption.
                        tracing::info!(
                            "{}: rebuilding indexes after an unclean shutdown ({e})",
                            seg.log_path().display()
                        );
                    }
                    let outcome = seg.recover(next_base)?;
                    report.rebuilt_indexes.push(base);
                    report.truncated_bytes += outcome.truncated_bytes as u64;
                    recovered_epochs.extend(&outcome.epochs);
                }
            }
            if opts.read_only {
                // Nothing is recovered on read-only media: validate in memory instead, so a corrupt
                // or torn batch is never served.
                report.unserved_bytes += seg.validate_read_only(next_base)? as u64;
            }
            segments.insert(base, seg);
        }
        // Unclean shutdown: recover every segment from the one holding the recovery point.
        if !opts.had_clean_shutdown && !opts.read_only {
            let first = segments.range(..=recovery_point).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
            let to_check: Vec<i64> = segments.range(first..).map(|(b, _)| *b).collect();
            for (i, base) in to_check.iter().enumerate() {
                let next_base = to_check.get(i + 1).copied();
                let seg = segments.get_mut(base).expect("listed");
                let outcome = seg.recover(next_base)?;
                recovered_epochs.extend(&outcome.epochs);
                if !report.rebuilt_indexes.contains(base) {
                    report.recovered.push(*base);
                }
                if outcome.truncated_bytes > 0 && outcome.offsets_out_of_order {
                    // An intact batch with impossible offsets (a flipped base offset): the rest of
                    // this segment is cut, the later segments are recovered on their own.
                    report.truncated_bytes += outcome.truncated_bytes as u64;
                    continue;
                }
                if outcome.truncated_bytes > 0 {
                    report.truncated_bytes += outcome.truncated_bytes as u64;
                    tracing::warn!(
                        "{}: corruption found, truncated {} bytes at offset {}; deleting {} later segment(s)",
                        seg.log_path().display(),
                        outcome.truncated_bytes,
                        outcome.next_offset,
                        to_check.len() - i - 1
                    );
                    for later in &to_check[i + 1..] {
                        segments.remove(later);
                        Segment::delete_files(dir, *later, "")?;
                        report.deleted_after_corruption.push(*later);
                    }
                    break;
                }
            }
        }
        if segments.is_empty() {
            let base = opts.log_start_offset.unwrap_or(0).max(0);
            if opts.read_only {
                return Err(LogError::Layout { path: dir.to_path_buf(), reason: "no segments".into() });
            }
            segments.insert(base, Segment::create(dir, base, seg_cfg, now_ms)?);
        }
        report.segments = segments.len();
        let first_base = *segments.keys().next().expect("one segment");
        let (&active_base, active) = segments.iter_mut().next_back().expect("one segment");
        let leo = match active.read_next_offset() {
            // After a clean shutdown segments are not recovered; a batch the active segment's
            // headers cannot describe (an impossible header, a damaged length) is corruption all
            // the same: recovery cuts the segment there, as after an unclean shutdown.
            Err(e @ LogError::Batch { .. }) if !opts.read_only => {
                tracing::warn!("{}: recovering the active segment: {e}", active.log_path().display());
                let outcome = active.recover(None)?;
                report.truncated_bytes += outcome.truncated_bytes as u64;
                recovered_epochs.extend(&outcome.epochs);
                if !report.rebuilt_indexes.contains(&active_base) && !report.recovered.contains(&active_base) {
                    report.recovered.push(active_base);
                }
                active.read_next_offset()?
            }
            r => r?,
        };
        let active = &*active;
        let end = LogOffsetMetadata { offset: leo, segment_base_offset: active_base, position: active.size() };
        let name = format!("{topic}-{partition}");
        let log_start_offset = match opts.log_start_offset {
            // Kafka's `LogLoader.recoverLog` warns "Deleting all segments because logEndOffset is
            // smaller than logStartOffset" and deletes them. Here the data stays visible: the
            // checkpoint (damaged, or written before the segments were lost) is ignored and
            // rewritten at the next checkpoint.
            Some(ls) if ls > leo => {
                let w = format!(
                    "{name}: the log-start-offset checkpoint says {ls}, above the log end offset {leo} (a damaged checkpoint or lost segments?); it is ignored and the records from offset {first_base} stay readable (Kafka would delete every segment)"
                );
                tracing::warn!("{w}");
                report.offset_warnings.push(w);
                first_base
            }
            ls => ls.unwrap_or(first_base).max(first_base).min(leo),
        };
        if let Some(rp) = opts.recovery_point.filter(|&rp| rp > leo) {
            let w = format!(
                "{name}: the recovery point {rp} is above the log end offset {leo}: records {leo}..{} that were flushed are lost (a deleted or truncated last segment?); new records take those offsets again",
                rp - 1
            );
            tracing::warn!("{w}");
            report.offset_warnings.push(w);
        }
        if !opts.read_only {
            // Inactive segments keep trimmed indexes; the active one gets room to grow.
            let n = segments.len();
            for (i, seg) in segments.values_mut().enumerate() {
                if i + 1 < n {
                    seg.on_become_inactive()?;
                } else if let Err(e) = seg.resize_indexes(seg_cfg.max_index_size) {
                    // A full disk: the partition still loads and serves reads. Its active segment
                    // keeps the indexes it has (trimmed ones are full), so the next append tries to
                    // roll a new segment, which fails with the same error until space is freed.
                    if !matches!(e, LogError::OutOfSpace { .. }) {
                        return Err(e);
                    }
                    tracing::warn!("{}: {e}; appends are refused until space is freed", seg.log_path().display());
                }
            }
            remove_stale_snapshots(dir, leo, &mut report)?;
        }
        let metadata_path = dir.join(PARTITION_METADATA);
        let topic_id = match read_partition_metadata(&metadata_path) {
            Ok(id) => id,
            Err(e) => {
                // Kafka takes the log directory offline here. The topic id is the same for every
                // partition of the topic: the log manager takes it from a sibling partition, or the
                // broker assigns a new one when a client asks for the topic.
                let action = "topic id unknown: taken from another partition of the topic, else a new one is assigned";
                tracing::warn!("{e}: damaged partition metadata file ignored ({action})");
                report.damaged.push(DamagedFile { path: metadata_path, error: e.to_string(), action: action.into() });
                None
            }
        };
        let epoch_path = dir.join(LEADER_EPOCH_CHECKPOINT);
        let (stored_epochs, epochs_damaged) = match read_leader_epoch_checkpoint(&epoch_path) {
            Ok(entries) => (entries, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let known_compacted = config.is_compact() || compacted_internal_topic(&topic);
        let mut scan = scan_headers(
            &segments,
            log_start_offset,
            ScanFor {
                producers: !opts.read_only,
                epochs: epochs_damaged.is_some(),
                compaction: !known_compacted && segments.len() > 1,
            },
            format!("{topic}-{partition}"),
        );
        let mut leader_epochs = stored_epochs.clone();
        if epochs_damaged.is_some() {
            // Kafka takes the log directory offline. Every v2 batch header carries the leader
            // epoch it was written under: the cache is rebuilt from all of them.
            recovered_epochs = std::mem::take(&mut scan.epochs);
        }
        recovered_epochs.sort_by_key(|e| e.1);
        for (epoch, start_offset) in recovered_epochs {
            assign_epoch(&mut leader_epochs, epoch, start_offset);
        }
        truncate_epochs(&mut leader_epochs, log_start_offset, leo);
        if let Some(e) = epochs_damaged {
            let action = format!(
                "rebuilt from the batch headers: {} leader epoch entr{}{}",
                leader_epochs.len(),
                if leader_epochs.len() == 1 { "y" } else { "ies" },
                if opts.read_only { " (in memory: read-only)" } else { ", written back" }
            );
            // Written back first: the warn never claims a rebuild that then fails.
            if !opts.read_only {
                write_leader_epoch_checkpoint(&epoch_path, &leader_epochs)?;
            }
            tracing::warn!("{e}: damaged leader epoch checkpoint {action}");
            report.damaged.push(DamagedFile { path: epoch_path.clone(), error: e.to_string(), action });
        } else if leader_epochs != stored_epochs && !opts.read_only {
            write_leader_epoch_checkpoint(&epoch_path, &leader_epochs)?;
        }
        if !known_compacted && !scan.compaction_seen {
            report.holes = find_holes(&segments)?;
            for h in &report.holes {
                tracing::warn!(
                    "{topic}-{partition}: offsets {}..={} are missing: {} ends at offset {} and {} starts at {} (a lost or deleted segment? the topic is not compacted); fetches in the range get the batches from offset {}",
                    h.first_missing,
                    h.last_missing,
                    h.previous_segment.display(),
                    h.first_missing - 1,
                    h.next_segment.display(),
                    h.last_missing + 1,
                    h.last_missing + 1
                );
            }
        }
        let producer_state = scan.producer_state;
        let log = PartitionLog {
            dir: dir.to_path_buf(),
            topic,
            partition,
            config,
            segments,
            log_start_offset,
            log_end_offset: end,
            high_watermark: end,
            recovery_point: if opts.had_clean_shutdown { leo } else { recovery_point.min(leo) },
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            read_only: opts.read_only,
            topic_id,
            leader_epoch: leader_epochs.last().map_or(0, |e| e.epoch),
            leader_epochs,
            producer_state,
            last_producer_expiry_check_ms: now_ms,
            storage_warnings: StorageWarnings::default(),
            max_producer_id: scan.max_producer_id,
        };
        Ok((log, report))
    }

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
    /// Replaces the config (takes effect for later appends, rolls and cleaning).
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
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

    /// Appends v2 batches as a leader does: validates each (length, magic, CRC), assigns offsets
    /// from the log end offset by rewriting each base offset (outside the CRC), checks idempotent
    /// producers' epochs and sequences ([`producer_state`](crate::log::producer_state), Kafka's
    /// `analyzeAndValidateProducerState`), rolls first when the append would not fit the active
    /// segment, and moves the high watermark to the new LEO. `records` holds one or more whole
    /// batches (a produce request's record set). Every batch is checked before anything is
    /// written. A set that repeats batches already written (a producer's retry) appends nothing
    /// and returns the original offsets with [`AppendInfo::duplicate`] set.
    ///
    /// Errors: [`LogError::Batch`] for an invalid batch; [`LogError::OutOfOrderSequence`] /
    /// [`LogError::InvalidProducerEpoch`] for a producer's batch that breaks its sequence or epoch
    /// (nothing is appended then); [`LogError::InvalidAppend`] for an empty or oversized append or
    /// a read-only log; [`LogError::Io`].
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let mut owned = records.to_vec();
        let mut next = self.log_end_offset.offset;
        let mut positions = Vec::new();
        for b in BatchBoundaries::new(records) {
            positions.push((b.position, b.size));
        }
        let walked: usize = positions.iter().map(|p| p.1).sum();
        if walked != records.len() || positions.is_empty() {
            return Err(self.invalid_batch_at(records, walked));
        }
        let mut headers = Vec::with_capacity(positions.len());
        for &(pos, size) in &positions {
            let batch = &mut owned[pos..pos + size];
            let parsed = RecordBatch::parse(batch).map_err(|e| self.batch_error(pos, e))?;
            parsed.verify_crc().map_err(|e| self.batch_error(pos, e))?;
            self.validate_client_batch(&parsed).map_err(|e| self.batch_error(pos, e))?;
            let mut header = *parsed.header();
            let delta = header.last_offset_delta as i64;
            // `next` is the log end offset: the batch must end where a next offset still exists.
            let after = next.checked_add(delta).and_then(|l| l.checked_add(1)).ok_or_else(|| {
                self.batch_error(
                    pos,
                    BatchError::InvalidOffsetRange {
                        base_offset: next,
                        last_offset_delta: header.last_offset_delta,
                        reason: "assigned at the log end offset, the batch's next offset would overflow i64",
                    },
                )
            })?;
            header.base_offset = next;
            if self.config.message_timestamp_type == TimestampType::LogAppendTime {
                header.max_timestamp = now_ms;
            }
            headers.push(header);
            // The leader assigns offsets and stamps its epoch (both outside the CRC) and, for
            // `message.timestamp.type=LogAppendTime`, the batch timestamp (inside it).
            set_base_offset(batch, next);
            set_partition_leader_epoch(batch, self.leader_epoch);
            if self.config.message_timestamp_type == TimestampType::LogAppendTime {
                set_log_append_time(batch, now_ms).map_err(|e| self.batch_error(pos, e))?;
            }
            next = after;
        }
        let update = match self.producer_state.check_append(&headers)? {
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
        let written = self.write_assigned(&owned, now_ms);
        let (info, epochs_changed, messages) = self.track_storage(written)?;
        // The records are in the log: the producer state knows them even if the steps after the
        // write fail, so a producer's retry is recognised as a duplicate, not stored twice.
        self.producer_state.apply(update);
        let appended_max = headers.iter().filter(|h| h.has_producer_id()).map(|h| h.producer_id).max();
        self.max_producer_id = self.max_producer_id.max(appended_max);
        let after = self.after_write(epochs_changed, messages, now_ms);
        self.track_storage(after)?;
        if now_ms.saturating_sub(self.last_producer_expiry_check_ms) >= DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS
        {
            self.remove_expired_producers(now_ms);
        }
        Ok(info)
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
    /// Producer state is updated without sequence checks (Kafka's `AppendOrigin.REPLICATION`).
    ///
    /// Errors: as [`PartitionLog::append`] (but never a producer error), plus
    /// [`LogError::InvalidAppend`] when offsets go backwards.
    pub fn append_with_offsets(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let mut expected_min = self.log_end_offset.offset;
        let mut walked = 0;
        let mut headers = Vec::new();
        for b in BatchBoundaries::new(records) {
            let parsed = RecordBatch::parse(&records[b.position..b.position + b.size])
                .map_err(|e| self.batch_error(b.position, e))?;
            parsed.verify_crc().map_err(|e| self.batch_error(b.position, e))?;
            let h = parsed.header();
            if h.last_offset_delta < 0 || h.records_count < 0 || h.records_count as i64 > h.last_offset_delta as i64 + 1
            {
                return Err(self.batch_error(
                    b.position,
                    BatchError::InvalidRecord {
                        base_offset: h.base_offset,
                        index: 0,
                        reason: format!(
                            "{} records cannot fit last offset delta {}",
                            h.records_count, h.last_offset_delta
                        ),
                    },
                ));
            }
            if parsed.base_offset() < expected_min {
                return Err(LogError::InvalidAppend {
                    path: self.dir.clone(),
                    reason: format!("batch base offset {} is below {expected_min}", parsed.base_offset()),
                });
            }
            expected_min = parsed.next_offset();
            walked += b.size;
            headers.push(*h);
        }
        if walked != records.len() || walked == 0 {
            return Err(self.invalid_batch_at(records, walked));
        }
        let written = self.write_assigned(records, now_ms);
        let (info, epochs_changed, messages) = self.track_storage(written)?;
        for h in &headers {
            self.producer_state.replay(h);
            if h.has_producer_id() {
                self.max_producer_id = self.max_producer_id.max(Some(h.producer_id));
            }
        }
        let after = self.after_write(epochs_changed, messages, now_ms);
        self.track_storage(after)?;
        Ok(info)
    }

    /// Kafka's `LogValidator` checks for a batch from a client: no control batches, a record count
    /// that matches the offset range, and records at offset deltas 0, 1, 2, ... (decompressing when
    /// needed); in a compacted topic every record has a key.
    fn validate_client_batch(&self, batch: &RecordBatch<'_>) -> Result<(), BatchError> {
        let h = batch.header();
        let invalid =
            |index: usize, reason: String| BatchError::InvalidRecord { base_offset: h.base_offset, index, reason };
        if h.attributes.is_control() {
            return Err(invalid(0, "clients are not allowed to write control batches".into()));
        }
        if h.last_offset_delta < 0 || h.records_count as i64 != h.last_offset_delta as i64 + 1 {
            return Err(invalid(
                0,
                format!(
                    "record count {} does not match last offset delta {} (must be delta + 1)",
                    h.records_count, h.last_offset_delta
                ),
            ));
        }
        if h.producer_id >= 0 && h.base_sequence < 0 {
            return Err(invalid(
                0,
                format!("invalid sequence number {} for producer id {}", h.base_sequence, h.producer_id),
            ));
        }
        let compact = self.config.is_compact();
        let records = batch.records()?;
        let mut consumed = 0;
        for (i, rec) in records.iter().enumerate() {
            let rec = rec?;
            consumed += rec.size_in_bytes;
            // Record offsets are checked on decoding (base offset + delta fits), so this subtraction
            // gives back the delta exactly.
            let delta = rec.offset - h.base_offset;
            if delta != i as i64 {
                return Err(invalid(i, format!("offset delta {delta} where {i} was expected")));
            }
            if compact && rec.key.is_none() {
                return Err(invalid(i, "a compacted topic cannot accept a record without a key".into()));
            }
        }
        if consumed != records.data().len() {
            return Err(invalid(
                h.records_count.max(0) as usize,
                format!(
                    "{} bytes remain after the declared {} records",
                    records.data().len() - consumed,
                    h.records_count
                ),
            ));
        }
        Ok(())
    }

    fn batch_error(&self, position: usize, source: BatchError) -> LogError {
        LogError::Batch { path: self.dir.clone(), position: position as u64, source }
    }

    fn invalid_batch_at(&self, records: &[u8], position: usize) -> LogError {
        if records.is_empty() {
            return LogError::InvalidAppend { path: self.dir.clone(), reason: "empty append".into() };
        }
        let source = match RecordBatch::parse(&records[position..]) {
            Err(e) => e,
            Ok(_) => BatchError::Truncated { needed: records.len() + 1, available: records.len() },
        };
        self.batch_error(position, source)
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
                .map_err(|e| self.batch_error(b.position, e))?
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
    /// that `flush.messages` / `flush.ms` call for. An error here comes after the records were
    /// written (they stay in the log).
    fn after_write(&mut self, epochs_changed: bool, messages: u64, now_ms: i64) -> Result<(), LogError> {
        if epochs_changed {
            write_leader_epoch_checkpoint(&self.dir.join(LEADER_EPOCH_CHECKPOINT), &self.leader_epochs)?;
        }
        self.unflushed_messages += messages;
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
        // fsynced and the recovery point moves past it (done inline here).
        self.flush_segments_below(new_base)?;
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
        Ok(())
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

    /// Moves the high watermark to `offset` (clamped to `[log start offset, log end offset]`).
    pub fn set_high_watermark(&mut self, offset: i64) -> Result<(), LogError> {
        let offset = offset.clamp(self.log_start_offset, self.log_end_offset.offset);
        self.high_watermark = self.offset_metadata(offset)?;
        Ok(())
    }

    fn offset_metadata(&self, offset: i64) -> Result<LogOffsetMetadata, LogError> {
        if offset == self.log_end_offset.offset {
            return Ok(self.log_end_offset);
        }
        for (&base, seg) in
            self.segments.range(..=offset).next_back().into_iter().chain(self.segments.range(offset + 1..))
        {
            if let Some(info) = seg.translate_offset(offset, 0)? {
                return Ok(LogOffsetMetadata { offset, segment_base_offset: base, position: info.position });
            }
        }
        Ok(self.log_end_offset)
    }

    /// Kafka's `LogSegment.read` through `LocalLog.read`: a [`FileSlice`] starting at the batch that
    /// contains `fetch_offset` (or, inside a compaction gap, the next batch), cut by bytes at
    /// `max_bytes` (so it may end inside a batch), never past the high watermark's position; with
    /// `min_one_batch` (KIP-74) the first batch is whole even when larger than `max_bytes`. At the
    /// high watermark (or with nothing to return) the slice is empty (`len == 0`). Reads index
    /// entries and batch headers only, never record bytes.
    ///
    /// Errors: [`LogError::OffsetOutOfRange`] when `fetch_offset` is below the log start offset or
    /// above the log end offset; [`LogError::Io`] / [`LogError::Batch`] when a header cannot be read.
    pub fn read(&self, fetch_offset: i64, max_bytes: u32, min_one_batch: bool) -> Result<FileSlice, LogError> {
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset.offset {
            return Err(LogError::OffsetOutOfRange {
                partition: format!("{}-{}", self.topic, self.partition),
                offset: fetch_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset.offset,
            });
        }
        let hw = self.high_watermark;
        let empty = || {
            let seg = self.segments.get(&hw.segment_base_offset).unwrap_or_else(|| self.active_segment());
            FileSlice { segment: seg.file().clone(), position: hw.position.min(seg.size()) as u64, len: 0 }
        };
        if fetch_offset >= hw.offset {
            return Ok(empty());
        }
        let start_base = self.segments.range(..=fetch_offset).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
        for (&base, seg) in self.segments.range(start_base..) {
            if base > hw.segment_base_offset {
                break;
            }
            let max_position = if base == hw.segment_base_offset { hw.position } else { seg.size() };
            if let Some(slice) = seg.read(fetch_offset, max_bytes, max_position, min_one_batch)? {
                return Ok(slice);
            }
        }
        Ok(empty())
    }

    /// Kafka's `UnifiedLog.fetchOffsetByTimestamp` (KIP-79): for [`EARLIEST_TIMESTAMP`] the log
    /// start offset, for [`LATEST_TIMESTAMP`] the log end offset (both with timestamp -1); otherwise
    /// the earliest offset whose record timestamp is >= `target_ms`, looking inside batches. `None`
    /// when no record is that recent (the broker answers offset -1, timestamp -1).
    pub fn fetch_offset_by_timestamp(&self, target_ms: i64) -> Result<Option<TimestampOffset>, LogError> {
        match target_ms {
            EARLIEST_TIMESTAMP => return Ok(Some(TimestampOffset { timestamp: -1, offset: self.log_start_offset })),
            LATEST_TIMESTAMP => return Ok(Some(TimestampOffset { timestamp: -1, offset: self.log_end_offset.offset })),
            _ => {}
        }
        for seg in self.segments.values() {
            if seg.size() == 0 || seg.largest_timestamp() < target_ms {
                continue;
            }
            if let Some(found) = seg.find_offset_by_timestamp(target_ms, self.log_start_offset)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// Deletes the oldest segments for which `should_delete(segment, next_segment)` holds, in order,
    /// stopping at the first that does not, never deleting the active segment unless it is empty
    /// and a new one replaces it (Kafka's `deleteOldSegments`); the log start offset moves to the
    /// first remaining offset. Files are renamed `.deleted` and unlinked: readers holding a
    /// [`FileSlice`] keep reading the data until they drop it. Returns the deleted base offsets.
    pub fn delete_oldest_segments(
        &mut self,
        mut should_delete: impl FnMut(&Segment, Option<&Segment>) -> bool,
    ) -> Result<Vec<i64>, LogError> {
        let mut doomed = Vec::new();
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for (i, base) in bases.iter().enumerate() {
            let seg = &self.segments[base];
            let next = bases.get(i + 1).map(|b| &self.segments[b]);
            if next.is_none() || !should_delete(seg, next) {
                break;
            }
            if self.high_watermark.offset < bases[i + 1] {
                break; // never delete past the high watermark
            }
            doomed.push(*base);
        }
        for base in &doomed {
            let mut seg = self.segments.remove(base).expect("listed");
            seg.add_suffix(segment::DELETED_SUFFIX)?;
            drop(seg);
            Segment::delete_files(&self.dir, *base, segment::DELETED_SUFFIX)?;
        }
        if let Some(&first) = self.segments.keys().next() {
            if first > self.log_start_offset {
                self.log_start_offset = first;
                // Kafka's `truncateFromStart(log start offset)` on the leader epoch cache.
                let before = self.leader_epochs.clone();
                truncate_epochs(&mut self.leader_epochs, self.log_start_offset, self.log_end_offset.offset);
                if self.leader_epochs != before {
                    write_leader_epoch_checkpoint(&self.dir.join(LEADER_EPOCH_CHECKPOINT), &self.leader_epochs)?;
                }
            }
        }
        Ok(doomed)
    }

    /// Replaces segments with cleaned ones (the cleaner's swap, Kafka's `replaceSegments`): `new`
    /// segments were written with the `.cleaned` suffix; they are renamed to `.swap`, the `old` base
    /// offsets deleted, then the swap files renamed to their final names. A crash in between is
    /// completed by [`PartitionLog::open`] as Kafka does.
    pub(crate) fn replace_segments(&mut self, new: Vec<Segment>, old: &[i64]) -> Result<(), LogError> {
        let mut new = new;
        for seg in &mut new {
            rename_suffix(&self.dir, seg.base_offset(), segment::CLEANED_SUFFIX, segment::SWAP_SUFFIX)?;
        }
        for base in old {
            if let Some(mut seg) = self.segments.remove(base) {
                seg.add_suffix(segment::DELETED_SUFFIX)?;
                drop(seg);
                Segment::delete_files(&self.dir, *base, segment::DELETED_SUFFIX)?;
            }
        }
        for seg in new {
            let base = seg.base_offset();
            drop(seg);
            rename_suffix(&self.dir, base, segment::SWAP_SUFFIX, "")?;
            let reopened = Segment::open(&self.dir, base, segment_config(&self.config), false)?;
            let mut reopened = reopened;
            reopened.on_become_inactive()?;
            self.segments.insert(base, reopened);
        }
        Ok(())
    }

    /// Segments by base offset, mutable (the cleaner).
    pub(crate) fn segments_map(&self) -> &BTreeMap<i64, Segment> {
        &self.segments
    }

    /// Closes every segment (final time-index entries, trimmed indexes) after an fsync.
    pub fn close(mut self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        self.flush(now_ms())?;
        for (_, seg) in std::mem::take(&mut self.segments) {
            seg.close()?;
        }
        Ok(())
    }
}

/// Marks a v2 batch as LogAppendTime with `now_ms` as its max timestamp (Kafka's
/// `setMaxTimestamp(LOG_APPEND_TIME, now)`), recomputing the CRC.
fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<(), BatchError> {
    let mut h = BatchHeader::parse(batch)?;
    h.attributes = h.attributes.with_log_append_time(true);
    h.max_timestamp = now_ms;
    h.encode(batch);
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// What [`scan_headers`] collects besides the maximum producer id and compaction evidence.
#[derive(Clone, Copy)]
struct ScanFor {
    /// Replay idempotent producers into a [`ProducerStateManager`].
    producers: bool,
    /// Collect every batch's (partition leader epoch, base offset).
    epochs: bool,
    /// Look for evidence of compaction (always collected when the scan runs).
    compaction: bool,
}

/// What one pass over every batch header found.
struct HeaderScan {
    producer_state: ProducerStateManager,
    max_producer_id: Option<i64>,
    epochs: Vec<(i32, i64)>,
    /// A v2 batch starts above the previous batch's next offset (or its segment's base offset),
    /// or holds fewer records than its offset span: the log has been compacted (whatever its config says now:
    /// per-topic configs are not kept across restarts).
    compaction_seen: bool,
}

/// Reads the batch headers of every segment once (a header-only scan, 61 bytes read per batch, no
/// record bytes) and, as `what` asks, replays the idempotent producers (Kafka reads its `.snapshot`
/// files instead and replays only the batches after the latest; fetchbench keeps no snapshots and
/// replays the whole log) and collects leader epochs. Batches below `log_start_offset` are not
/// replayed. The largest producer id and compaction evidence are always collected. A header
/// that cannot be read (possible only in a segment not recovered) ends that segment's scan with a
/// warning: reads there fail anyway.
fn scan_headers(
    segments: &BTreeMap<i64, Segment>,
    log_start_offset: i64,
    what: ScanFor,
    partition: String,
) -> HeaderScan {
    let mut scan = HeaderScan {
        producer_state: ProducerStateManager::new(partition),
        max_producer_id: None,
        epochs: Vec::new(),
        compaction_seen: false,
    };
    if !what.producers && !what.epochs && !what.compaction {
        return scan;
    }
    for seg in segments.values() {
        let mut next_offset = seg.base_offset();
        for info in seg.batches_from(0) {
            match info {
                Ok(info) => {
                    let expected = next_offset;
                    next_offset = info.next_offset();
                    // Legacy (magic 0/1) entries are skipped: a compressed wrapper carries the
                    // offset of its last inner message.
                    let Some(h) = info.header else { continue };
                    if h.base_offset > expected || i64::from(h.records_count) < i64::from(h.last_offset_delta) + 1 {
                        scan.compaction_seen = true;
                    }
                    if what.epochs && h.partition_leader_epoch >= 0 {
                        scan.epochs.push((h.partition_leader_epoch, h.base_offset));
                    }
                    if h.producer_id >= 0 {
                        scan.max_producer_id = scan.max_producer_id.max(Some(h.producer_id));
                        if what.producers && info.last_offset >= log_start_offset {
                            scan.producer_state.replay(&h);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("{}: header scan stopped: {e}", seg.log_path().display());
                    break;
                }
            }
        }
    }
    scan
}

/// Kafka's internal topics, compacted whatever the broker defaults say (their configs are fixed
/// by the broker that creates them).
pub(crate) fn compacted_internal_topic(topic: &str) -> bool {
    matches!(topic, "__consumer_offsets" | "__transaction_state" | "__share_group_state")
}

/// Offsets missing between consecutive segments: a next segment whose base offset is above the
/// previous one's next offset (its base offset when empty). See [`OffsetHole`].
///
/// Errors: [`LogError::Io`] / [`LogError::Batch`] reading a segment's last batch headers.
pub(crate) fn find_holes(segments: &BTreeMap<i64, Segment>) -> Result<Vec<OffsetHole>, LogError> {
    let mut holes = Vec::new();
    let mut prev: Option<(&Segment, i64)> = None;
    for seg in segments.values() {
        if let Some((p, next_offset)) = prev {
            if seg.base_offset() > next_offset {
                holes.push(OffsetHole {
                    previous_segment: p.log_path().to_path_buf(),
                    next_segment: seg.log_path().to_path_buf(),
                    first_missing: next_offset,
                    last_missing: seg.base_offset() - 1,
                });
            }
        }
        prev = Some((seg, seg.read_next_offset()?));
    }
    Ok(holes)
}

/// Kafka's `LeaderEpochFileCache.assign`: a new entry only for an epoch above the latest one.
fn assign_epoch(epochs: &mut Vec<EpochEntry>, epoch: i32, start_offset: i64) {
    if epochs.last().is_none_or(|l| epoch > l.epoch) {
        epochs.push(EpochEntry { epoch, start_offset });
    }
}

/// Kafka's `truncateFromEnd(log end offset)` (entries starting at or past it go) and
/// `truncateFromStart(log start offset)` (the last entry at or below it is kept, moved up to it).
fn truncate_epochs(epochs: &mut Vec<EpochEntry>, log_start_offset: i64, log_end_offset: i64) {
    epochs.retain(|e| e.start_offset < log_end_offset);
    if let Some(keep) = epochs.iter().rposition(|e| e.start_offset <= log_start_offset) {
        epochs.drain(..keep);
        if let Some(first) = epochs.first_mut() {
            first.start_offset = first.start_offset.max(log_start_offset);
        }
    }
}

fn segment_config(config: &LogConfig) -> SegmentConfig {
    SegmentConfig {
        index_interval_bytes: config.index_interval_bytes.max(0) as u32,
        max_index_size: config.segment_index_bytes.max(12) as usize,
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn list_dir(dir: &Path) -> Result<Vec<String>, LogError> {
    let mut names = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| LogError::io("list", dir, e))? {
        let e = e.map_err(|e| LogError::io("list", dir, e))?;
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn sync_dir(dir: &Path) -> Result<(), LogError> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| LogError::io("fsync", dir, e))
}

fn rename_suffix(dir: &Path, base: i64, from: &str, to: &str) -> Result<(), LogError> {
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

/// Kafka's `LogLoader.removeTempFilesAndCollectSwapFiles` + swap completion: `.deleted` and
/// `.cleaned` files are removed, orphan indexes (no `.log`) removed, and each `.swap` segment
/// replaces the segments whose offsets it covers, then loses its suffix.
fn remove_leftovers(dir: &Path, cfg: SegmentConfig, report: &mut LoadReport) -> Result<(), LogError> {
    let names = list_dir(dir)?;
    let mut swaps = Vec::new();
    for n in &names {
        let p = dir.join(n);
        if n.ends_with(segment::DELETED_SUFFIX) || n.ends_with(segment::CLEANED_SUFFIX) {
            fs::remove_file(&p).map_err(|e| LogError::io("delete", &p, e))?;
            report.removed_files.push(p);
        } else if n.ends_with(&format!("{}{}", segment::LOG_SUFFIX, segment::SWAP_SUFFIX)) {
            if let Some(base) = segment::parse_base_offset(n) {
                swaps.push(base);
            }
        }
    }
    for base in swaps {
        let mut swap = Segment::open_with_suffix(dir, base, cfg, false, segment::SWAP_SUFFIX)?;
        swap.recover(None)?;
        let end = swap.read_next_offset()?;
        drop(swap);
        for n in list_dir(dir)? {
            if let Some(b) = n.ends_with(segment::LOG_SUFFIX).then(|| segment::parse_base_offset(&n)).flatten() {
                if b >= base && b < end.max(base + 1) {
                    Segment::delete_files(dir, b, "")?;
                }
            }
        }
        rename_suffix(dir, base, segment::SWAP_SUFFIX, "")?;
        report.swapped.push(base);
    }
    // Orphan indexes (an index whose .log is gone).
    let names = list_dir(dir)?;
    for n in &names {
        for s in [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX, segment::TXN_INDEX_SUFFIX] {
            if let Some(base) = n.ends_with(s).then(|| segment::parse_base_offset(n)).flatten() {
                if !names.contains(&segment::file_name(base, segment::LOG_SUFFIX)) {
                    let p = dir.join(n);
                    fs::remove_file(&p).map_err(|e| LogError::io("delete", &p, e))?;
                    report.removed_files.push(p);
                }
            }
        }
    }
    Ok(())
}

/// Producer-state snapshots (`<offset>.snapshot`) past the log end offset describe data that no
/// longer exists; Kafka's `ProducerStateManager.truncateAndReload` removes them.
fn remove_stale_snapshots(dir: &Path, log_end_offset: i64, report: &mut LoadReport) -> Result<(), LogError> {
    for n in list_dir(dir)? {
        if let Some(off) = n.ends_with(".snapshot").then(|| segment::parse_base_offset(&n)).flatten() {
            if off > log_end_offset {
                let p = dir.join(&n);
                fs::remove_file(&p).map_err(|e| LogError::io("delete", &p, e))?;
                report.removed_files.push(p);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{BatchBuilder, Compression};

    const T: i64 = 1_764_000_000_000;

    fn batch(pid: i64, epoch: i16, seq: i32, n: usize, key: &str) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, seq);
        for i in 0..n {
            b.append(T + i as i64, Some(key.as_bytes()), Some(format!("v{seq}-{i}").as_bytes()), &[]);
        }
        b.build().unwrap()
    }

    fn open(dir: &std::path::Path, cfg: LogConfig, clean: bool) -> PartitionLog {
        PartitionLog::open(dir, cfg, OpenOptions { had_clean_shutdown: clean, ..Default::default() }).unwrap().0
    }

    #[test]
    fn partition_log_answers_retries_with_the_original_offsets_and_rebuilds_on_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("idem-0");
        let mut log = open(&dir, LogConfig::default(), true);
        for seq in [0, 2, 4] {
            let info = log.append(&batch(1, 0, seq, 2, "k"), T).unwrap();
            assert_eq!((info.first_offset, info.duplicate), (seq as i64, false));
        }
        let retry = log.append(&batch(1, 0, 2, 2, "k"), T).unwrap();
        assert!(retry.duplicate);
        assert_eq!((retry.first_offset, retry.last_offset, retry.bytes), (2, 3, 0));
        assert_eq!(log.log_end_offset(), 6, "a retry is stored once");
        let gap = log.append(&batch(1, 0, 7, 1, "k"), T);
        assert!(matches!(gap, Err(LogError::OutOfOrderSequence { sequence: 7, .. })), "{gap:?}");
        assert_eq!(log.log_end_offset(), 6);

        // Reopen without a clean shutdown: the state is replayed from the batch headers.
        drop(log);
        let mut log = open(&dir, LogConfig::default(), false);
        assert_eq!(log.producer_state().entry(1).unwrap().last_seq(), 5);
        assert!(log.append(&batch(1, 0, 4, 2, "k"), T).unwrap().duplicate);
        log.append(&batch(1, 0, 6, 2, "k"), T).unwrap();
        assert_eq!(log.log_end_offset(), 8);

        // A torn tail: the last batch (seq 6-7) is cut by recovery, and so is its state.
        let path = log.active_segment().log_path().to_path_buf();
        drop(log);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        f.set_len(len - 5).unwrap();
        drop(f);
        let mut log = open(&dir, LogConfig::default(), false);
        assert_eq!(log.log_end_offset(), 6);
        assert_eq!(log.producer_state().entry(1).unwrap().last_seq(), 5);
        let again = log.append(&batch(1, 0, 6, 2, "k"), T).unwrap();
        assert_eq!((again.first_offset, again.duplicate), (6, false), "the lost batch is written again");
    }
}
