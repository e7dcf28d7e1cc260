//! Opening a partition directory, Kafka's `LogLoader`: [`PartitionLog::open`] removes leftover
//! files, completes `.swap` segments, sanity-checks (or rebuilds) indexes, recovers segments after an
//! unclean shutdown, reconciles the checkpointed offsets, rebuilds damaged checkpoints and the
//! idempotent producers' state from the batch headers, and reports what it found and did
//! ([`LoadReport`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::log::batch::BatchHeader;
use crate::log::checkpoint::{
    read_leader_epoch_checkpoint, read_partition_metadata, write_leader_epoch_checkpoint, LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
};
use crate::log::config::LogConfig;
use crate::log::error::LogError;
use crate::log::producer_state::ProducerStateManager;
use crate::log::segment::{self, BatchInfo, Segment, SegmentConfig};
use crate::log::txn_index::{self, end_marker, AbortedTxn};

use super::epoch_cache::{assign_epoch, truncate_epochs};
use super::partition_log::{now_ms, rename_suffix, segment_config, LogOffsetMetadata, PartitionLog, StorageWarnings};

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
        if !opts.read_only {
            reconcile_txn_indexes(&segments, &mut scan.aborted, log_start_offset, &mut report)?;
        }
        let aborted_txns: Vec<AbortedTxn> = scan.aborted.into_values().flatten().map(|(t, _)| t).collect();
        let producer_state = scan.producer_state;
        let log = PartitionLog {
            dir: dir.to_path_buf(),
            topic,
            partition,
            config: std::sync::Arc::new(config),
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
            aborted_txns,
            last_producer_expiry_check_ms: now_ms,
            storage_warnings: StorageWarnings::default(),
            max_producer_id: scan.max_producer_id,
            closed: false,
            background_flush: false,
            pending_flush_below: None,
        };
        Ok((log, report))
    }
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
    /// The aborted transactions by the segment (base offset) holding their ABORT marker, in
    /// marker order (with `producers`), each with the offset of its producer's previous COMMIT /
    /// ABORT marker replayed (`i64::MIN` when none): no batch of the transaction is before it.
    aborted: BTreeMap<i64, Vec<(AbortedTxn, i64)>>,
    /// Per producer, the offset of its last COMMIT / ABORT marker replayed.
    last_marker: std::collections::HashMap<i64, i64>,
}

/// Makes every segment's `.txnindex` say what its ABORT markers say (`aborted`, by segment base
/// offset): a missing file with entries is written (a log dir copied without them, or written
/// before the markers' segment was recovered), a file that disagrees with the markers or does
/// not parse is rewritten and reported as damaged, an index with no entry is no file. The log is
/// the truth: Kafka rebuilds the index from the markers too when it recovers a segment.
///
/// A file that knows more than the header replay can ([`kafka_compatible`]: Kafka's entries
/// for transactions that began below the log start offset or whose first batches its cleaner
/// removed) is kept as it is, and its entries replace the replayed ones in `aborted` (they are
/// what the log's reads and cleaner then use).
///
/// Errors: writing or removing an index file.
fn reconcile_txn_indexes(
    segments: &BTreeMap<i64, Segment>,
    aborted: &mut BTreeMap<i64, Vec<(AbortedTxn, i64)>>,
    log_start_offset: i64,
    report: &mut LoadReport,
) -> Result<(), LogError> {
    for (base, seg) in segments {
        let path = txn_index::path_for(seg.log_path());
        let replayed = aborted.get(base).map_or(&[][..], Vec::as_slice);
        let expected: Vec<AbortedTxn> = replayed.iter().map(|(t, _)| *t).collect();
        // Each entry is an ABORT marker of the segment, a batch of at least a v2 header: a file
        // with more entries than that is damaged, and is not read (a sparse file of any size
        // costs nothing to make and would be read whole).
        let max_len =
            (u64::from(seg.size()) / crate::log::batch::HEADER_SIZE as u64 + 1) * txn_index::ENTRY_SIZE as u64;
        let oversized = match fs::metadata(&path) {
            Ok(m) if m.len() > max_len => Some(m.len()),
            _ => None,
        };
        let read = match oversized {
            Some(len) => {
                Err(format!("{len} bytes: more entries than ABORT markers fit in the segment's {} bytes", seg.size()))
            }
            None => txn_index::read(&path).map_err(|e| e.to_string()),
        };
        let problem = match read {
            Ok(Some(found)) if found == expected => continue,
            Ok(None) if expected.is_empty() => continue,
            Ok(None) => None,
            Ok(Some(found)) if kafka_compatible(&found, replayed, *base, log_start_offset) => {
                tracing::info!(
                    "{}: kept ({} entries; the markers from the log start offset on give {}: transactions that began before it or whose first batches were cleaned)",
                    path.display(),
                    found.len(),
                    expected.len()
                );
                aborted.insert(*base, found.into_iter().map(|t| (t, i64::MIN)).collect());
                continue;
            }
            Ok(Some(found)) => Some(format!(
                "{} entries that disagree with the {} ABORT marker(s) of the segment",
                found.len(),
                expected.len()
            )),
            Err(e) => Some(e),
        };
        txn_index::write(&path, &expected)?;
        match problem {
            None => tracing::info!("{}: rebuilt from the markers ({} aborted)", path.display(), expected.len()),
            Some(error) => {
                let action = format!("rebuilt from the segment's markers: {} aborted transaction(s)", expected.len());
                tracing::warn!("{}: {error}: {action}", path.display());
                report.damaged.push(DamagedFile { path, error, action });
            }
        }
    }
    Ok(())
}

/// Whether the `.txnindex` entries `found` are what Kafka could have written for a segment whose
/// replayed ABORT markers give `replayed` (each with its producer's previous marker offset), the
/// replay having started at `log_start_offset` without Kafka's producer snapshots:
/// - the entries are in marker order, their markers in the segment (from `base_offset` on);
/// - an entry whose marker is below the log start offset (never replayed) may be there;
/// - a replayed entry with no data batch (first offset = its marker's) may be missing (Kafka's
///   cleaner drops the entry of an aborted transaction whose batches are all gone);
/// - otherwise the entries match one for one (producer id, marker offset), Kafka's first offset
///   at most the replayed one (the transaction's batches below the log start offset, or removed
///   by the cleaner, are not replayed) but after the producer's previous marker (every batch of
///   the producer between the two is then the aborted transaction's: a consumer drops nothing
///   else), and Kafka's last stable offset at most the replayed one (a lower one makes
///   [`PartitionLog::read_committed`] look at more entries, never fewer).
fn kafka_compatible(
    found: &[AbortedTxn],
    replayed: &[(AbortedTxn, i64)],
    base_offset: i64,
    log_start_offset: i64,
) -> bool {
    // In marker order, every marker in the segment: reads binary-search the entries by marker.
    if found.first().is_some_and(|f| f.last_offset < base_offset)
        || found.windows(2).any(|w| w[0].last_offset >= w[1].last_offset)
    {
        return false;
    }
    let no_data = |t: &AbortedTxn| t.first_offset == t.last_offset;
    let mut rest = replayed.iter().peekable();
    for f in found {
        loop {
            match rest.peek() {
                Some((e, previous_marker)) if (e.producer_id, e.last_offset) == (f.producer_id, f.last_offset) => {
                    if !(*previous_marker < f.first_offset
                        && f.first_offset <= e.first_offset
                        && f.last_stable_offset <= e.last_stable_offset)
                    {
                        return false;
                    }
                    rest.next();
                    break;
                }
                Some((e, _)) if no_data(e) && e.last_offset < f.last_offset => {
                    rest.next();
                }
                _ if f.last_offset < log_start_offset && f.first_offset <= f.last_offset => break,
                _ => return false,
            }
        }
    }
    rest.all(|(e, _)| no_data(e))
}

/// The transaction side of replaying one batch with a producer id: a transactional data batch
/// opens its producer's transaction, a COMMIT / ABORT marker ends it (its key read from the
/// segment: a control batch is one small record), an aborted one recorded under `seg`. A marker
/// that cannot be read is skipped with a warning (the segment was recovered, so it is not
/// expected).
fn replay_txn(scan: &mut HeaderScan, seg: &Segment, info: &BatchInfo, h: &BatchHeader) {
    if !h.attributes.is_transactional() {
        return;
    }
    if !h.attributes.is_control() {
        scan.producer_state.begin_txn(h.producer_id, h.base_offset);
        return;
    }
    let marker = seg
        .read_bytes(info.position, info.size)
        .map_err(|e| e.to_string())
        .and_then(|b| Ok((end_marker(&b)?, txn_index::marker_coordinator_epoch(&b))));
    match marker {
        Ok((Some(aborted), coordinator_epoch)) => {
            // Kafka's `ProducerStateEntry.coordinatorEpoch`, which fences an older coordinator's
            // markers (`append_txn_marker`).
            match coordinator_epoch {
                Ok(epoch) => scan.producer_state.set_coordinator_epoch(h.producer_id, epoch),
                Err(e) => tracing::warn!(
                    "{}: the marker at offset {} has no coordinator epoch ({e}); its producer's is unchanged",
                    seg.log_path().display(),
                    h.base_offset
                ),
            }
            let done = scan.producer_state.end_txn(h.producer_id, h.base_offset, aborted);
            let previous_marker = scan.last_marker.insert(h.producer_id, h.base_offset).unwrap_or(i64::MIN);
            if done.is_aborted {
                let entry = AbortedTxn {
                    producer_id: done.producer_id,
                    first_offset: done.first_offset,
                    last_offset: done.last_offset,
                    last_stable_offset: done.last_stable_offset,
                };
                scan.aborted.entry(seg.base_offset()).or_default().push((entry, previous_marker));
            }
        }
        Ok((None, _)) => {}
        Err(e) => tracing::warn!(
            "{}: the control batch at offset {} is not read as a transaction marker: {e}",
            seg.log_path().display(),
            h.base_offset
        ),
    }
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
        aborted: BTreeMap::new(),
        last_marker: std::collections::HashMap::new(),
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
                            replay_txn(&mut scan, seg, &info, &h);
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

fn list_dir(dir: &Path) -> Result<Vec<String>, LogError> {
    let mut names = Vec::new();
    for e in fs::read_dir(dir).map_err(|e| LogError::io("list", dir, e))? {
        let e = e.map_err(|e| LogError::io("list", dir, e))?;
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
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

    /// A transactional batch of producer `pid` (epoch 0) at `base` with `n` records.
    fn txn(base: i64, pid: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, Compression::None).producer(pid, 0, 0).transactional(true);
        for i in 0..n {
            b.append(T + i as i64, None, Some(b"v"), &[]);
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
    /// Transactions replayed at open: the ABORT marker's transaction in the `.txnindex` (a
    /// wrong file rewritten and reported), the open one bounding the last stable offset, and a
    /// read_committed read stopping there with the aborted transaction in its answer.
    #[test]
    fn transactions_are_replayed_the_index_rebuilt_and_read_committed_stops_at_the_lso() {
        use crate::log::txn_index::{self, marker_batch, AbortedTxn};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tx-0");
        fs::create_dir_all(&dir).unwrap();
        let segment = [
            txn(0, 1, 3),
            marker_batch(3, 1, 0, true, 0, T),
            txn(4, 2, 2),
            marker_batch(6, 2, 0, false, 0, T),
            txn(7, 3, 2),
        ]
        .concat();
        fs::write(dir.join("00000000000000000000.log"), &segment).unwrap();
        let index = dir.join("00000000000000000000.txnindex");
        let wrong = AbortedTxn { producer_id: 9, first_offset: 0, last_offset: 1, last_stable_offset: 2 };
        txn_index::write(&index, &[wrong]).unwrap();
        let (log, report) = PartitionLog::open(&dir, LogConfig::default(), OpenOptions::default()).unwrap();
        let expected = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 4 };
        assert_eq!(txn_index::read(&index).unwrap(), Some(vec![expected]));
        assert_eq!(log.aborted_txns(), [expected]);
        assert!(report.damaged.iter().any(|d| d.path == index && d.error.contains("disagree")), "{report:?}");
        assert_eq!((log.high_watermark(), log.last_stable_offset()), (9, 7));
        let (slice, aborted) = log.read_committed(0, 1 << 20, true).unwrap();
        let end_of_commit = segment.len() - txn(7, 3, 2).len();
        assert_eq!((slice.position, slice.len as usize), (0, end_of_commit), "up to the open transaction");
        assert_eq!(aborted, [expected]);
        let (_, aborted) = log.read_committed(4, 1 << 20, true).unwrap();
        assert_eq!(aborted, [], "the aborted transaction ended before offset 4");
        let (slice, aborted) = log.read_committed(7, 1 << 20, true).unwrap();
        assert_eq!((slice.len, aborted.len()), (0, 0), "at the last stable offset");
        assert_eq!(log.read(0, 1 << 20, true).unwrap().len as usize, segment.len(), "read_uncommitted: all");
        // An index with no entry is no file; reopening writes nothing new.
        drop(log);
        let (_, report) = PartitionLog::open(&dir, LogConfig::default(), OpenOptions::default()).unwrap();
        assert!(report.damaged.is_empty(), "{report:?}");
    }
    /// A `.txnindex` Kafka wrote is kept when the header replay can only know less than Kafka
    /// did: the log start offset inside a transaction (its first batch not replayed, so Kafka's
    /// first offset and the last stable offset it recorded are lower) or a marker below the log
    /// start offset. A first offset at or before the producer's previous marker is still wrong
    /// (a consumer would drop the producer's committed batches): that file is rewritten.
    #[test]
    fn a_kafka_txnindex_from_before_the_log_start_is_kept() {
        use crate::log::txn_index::{self, marker_batch, AbortedTxn};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ks-0");
        fs::create_dir_all(&dir).unwrap();
        // Producer 3 aborts at 1, producer 1 opens at 2 (two records), producer 2 runs 4..=5
        // aborted while 1 is open, producer 1 aborts at 7. The log start offset is 4.
        let segment = [
            txn(0, 3, 1),
            marker_batch(1, 3, 0, true, 0, T),
            txn(2, 1, 2),
            txn(4, 2, 1),
            marker_batch(5, 2, 0, true, 0, T),
            txn(6, 1, 1),
            marker_batch(7, 1, 0, true, 0, T),
        ]
        .concat();
        fs::write(dir.join("00000000000000000000.log"), &segment).unwrap();
        let index = dir.join("00000000000000000000.txnindex");
        // What Kafka wrote at each ABORT marker.
        let kafka = [
            AbortedTxn { producer_id: 3, first_offset: 0, last_offset: 1, last_stable_offset: 2 },
            AbortedTxn { producer_id: 2, first_offset: 4, last_offset: 5, last_stable_offset: 2 },
            AbortedTxn { producer_id: 1, first_offset: 2, last_offset: 7, last_stable_offset: 8 },
        ];
        txn_index::write(&index, &kafka).unwrap();
        let opts = || OpenOptions { log_start_offset: Some(4), had_clean_shutdown: true, ..Default::default() };
        let (log, report) = PartitionLog::open(&dir, LogConfig::default(), opts()).unwrap();
        assert!(report.damaged.is_empty(), "{report:?}");
        assert_eq!(txn_index::read(&index).unwrap(), Some(kafka.to_vec()), "left as Kafka wrote it");
        let (_, aborted) = log.read_committed(4, 1 << 20, true).unwrap();
        assert_eq!(aborted, kafka[1..], "every aborted transaction with data from offset 4");
        drop(log);
        // Out of marker order (reads binary-search the markers): rewritten.
        txn_index::write(&index, &[kafka[1], kafka[0], kafka[2]]).unwrap();
        let (log, report) = PartitionLog::open(&dir, LogConfig::default(), opts()).unwrap();
        assert!(report.damaged.iter().any(|d| d.path == index), "{report:?}");
        assert!(log.aborted_txns().windows(2).all(|w| w[0].last_offset < w[1].last_offset));
        drop(log);

        // Producer 1's first offset before its previous (COMMIT) marker: wrong, rewritten.
        let segment =
            [txn(0, 1, 1), marker_batch(1, 1, 0, false, 0, T), txn(2, 1, 1), marker_batch(3, 1, 0, true, 0, T)]
                .concat();
        fs::write(dir.join("00000000000000000000.log"), &segment).unwrap();
        let bad = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 4 };
        txn_index::write(&index, &[bad]).unwrap();
        let (log, report) = PartitionLog::open(&dir, LogConfig::default(), OpenOptions::default()).unwrap();
        let good = AbortedTxn { first_offset: 2, ..bad };
        assert!(report.damaged.iter().any(|d| d.path == index), "{report:?}");
        assert_eq!((txn_index::read(&index).unwrap(), log.aborted_txns()), (Some(vec![good]), &[good][..]));
    }

    /// A `.txnindex` with more entries than ABORT markers fit in its segment is damaged and is
    /// not read (a sparse file of any size is free to make): rewritten from the markers.
    #[test]
    fn an_oversized_txnindex_is_not_read() {
        use crate::log::txn_index::{self, marker_batch, AbortedTxn};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("big-0");
        fs::create_dir_all(&dir).unwrap();
        let mut data = BatchBuilder::new(0, Compression::None).producer(1, 0, 0).transactional(true);
        data.append(T, None, Some(b"v"), &[]);
        let segment = [data.build().unwrap(), marker_batch(1, 1, 0, true, 0, T)].concat();
        fs::write(dir.join("00000000000000000000.log"), &segment).unwrap();
        let index = dir.join("00000000000000000000.txnindex");
        // Zeros are valid entries (version 0): 1000 of them for a segment of two batches.
        fs::write(&index, vec![0u8; 1000 * txn_index::ENTRY_SIZE]).unwrap();
        let (log, report) = PartitionLog::open(&dir, LogConfig::default(), OpenOptions::default()).unwrap();
        let expected = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 1, last_stable_offset: 2 };
        assert!(
            report.damaged.iter().any(|d| d.path == index && d.error.contains("more entries than ABORT markers fit")),
            "{report:?}"
        );
        assert_eq!((txn_index::read(&index).unwrap(), log.aborted_txns()), (Some(vec![expected]), &[expected][..]));
    }

    /// A read_committed slice gets only the aborted transactions up to its upper bound (the
    /// offset index entry at its end, Kafka's `fetchUpperBoundOffset`), not every later one.
    #[test]
    fn read_committed_lists_only_the_aborted_transactions_up_to_the_slices_end() {
        use crate::log::txn_index::{marker_batch, AbortedTxn};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("many-0");
        fs::create_dir_all(&dir).unwrap();
        let mut batches = Vec::new();
        for i in 0..20i64 {
            batches.push(txn(2 * i, i, 1));
            batches.push(marker_batch(2 * i + 1, i, 0, true, 0, T));
        }
        fs::write(dir.join("00000000000000000000.log"), batches.concat()).unwrap();
        let mut config = LogConfig::default();
        config.index_interval_bytes = 1;
        let (log, _) = PartitionLog::open(&dir, config, OpenOptions::default()).unwrap();
        assert_eq!(log.aborted_txns().len(), 20);
        let three = (batches[0].len() + batches[1].len() + batches[2].len()) as u32;
        let (slice, aborted) = log.read_committed(0, three, true).unwrap();
        assert_eq!(slice.len, u64::from(three));
        let txn = |i: i64| AbortedTxn {
            producer_id: i,
            first_offset: 2 * i,
            last_offset: 2 * i + 1,
            last_stable_offset: 2 * i + 2,
        };
        assert_eq!(aborted, [txn(0), txn(1)], "up to offset 3, the batch at the slice's end");
        let (_, aborted) = log.read_committed(37, 1 << 20, true).unwrap();
        assert_eq!(aborted, [txn(18), txn(19)]);
    }
}
