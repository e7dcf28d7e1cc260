//! Retention and compaction: Kafka's `UnifiedLog.deleteOldSegments` and `LogCleaner`.
//!
//! **Retention** (`cleanup.policy` contains `delete`) deletes whole segments from the oldest, never
//! the active one, and moves the log start offset to the first remaining offset:
//! - `retention.ms`: a segment goes when its largest record timestamp is older than `now -
//!   retention.ms` (Kafka's `deleteRetentionMsBreachedSegments`);
//! - `retention.bytes`: oldest segments go while the log stays at least `retention.bytes` without
//!   them (`deleteRetentionSizeBreachedSegments`);
//! - a segment entirely below the log start offset goes (`deleteLogStartOffsetBreachedSegments`).
//!
//! A deleted segment is renamed `.deleted` and unlinked; a reader holding a
//! [`super::FileSlice`] (sendfile, splice, mmap in flight) keeps its file open and reads the
//! data to the end: the file is never truncated under it.
//!
//! **Compaction** (`cleanup.policy` contains `compact`) keeps the latest record per key in the
//! segments before the active one (and older than `min.compaction.lag.ms`):
//! - offsets are preserved; the gaps are where removed records were; a rewritten batch keeps its
//!   base and last offsets (Kafka's `overrideLastOffset`), so the next fetch offset never moves back;
//! - a record without a key is removed (Kafka counts it as invalid in a compacted topic);
//! - tombstones (null values) are kept until the batch's delete horizon passes: the first cleaning
//!   that sees a tombstone stamps its batch with `delete horizon = now + delete.retention.ms`
//!   (KIP-534, attributes bit 6) and a later cleaning after that time removes it;
//! - the range cleaned ends below the last stable offset: a segment is cleaned only when all of
//!   it lies below the first offset of the earliest open transaction (Kafka's
//!   `firstUncleanableDirtyOffset` takes `firstUnstableOffset`) as well as the high watermark;
//! - the records of aborted transactions ([`PartitionLog::aborted_txns`]) are removed and never
//!   hide the committed value of their key (Kafka's `CleanedTransactionMetadata`); committed
//!   transactional records are compacted like any other;
//! - control batches (COMMIT / ABORT markers) are always kept, with the segment's `.txnindex`
//!   (Kafka removes a marker once its transaction's data is gone and `delete.retention.ms`
//!   passed; keeping it costs one small batch per transaction and keeps every `.txnindex` entry
//!   and read_committed answer true);
//! - a rewritten batch keeps its codec, producer id, epoch and base sequence, partition leader
//!   epoch, transactional bit and timestamp type; a LogAppendTime batch keeps its max timestamp
//!   (the log append time), as Kafka's `buildRetainedRecordsInto`;
//! - a batch left empty (or found empty) is dropped, except the batch holding its producer's last
//!   data offset in the log (Kafka's `lastDataOffset`: control batches do not count), which is
//!   kept as Kafka's 61-byte empty batch so the producer state survives
//!   (`BatchRetention.RETAIN_EMPTY`, `DefaultRecordBatch.writeEmptyHeader`: codec none, base
//!   timestamp -1, no delete horizon; offsets, max timestamp, producer id, epoch and base
//!   sequence, leader epoch, timestamp type, transactional and control bits kept);
//! - a batch whose records cannot be rewritten (e.g. offsets that do not increase) fails the pass
//!   with [`LogError::Batch`] naming the file and position; nothing is replaced and the `.cleaned`
//!   files are removed;
//! - each cleaned segment is written as `.cleaned` and gets its source segment's last-modified
//!   time (Kafka's `cleanSegments`, so `retention.ms` of an emptied segment still counts from the
//!   source's age), is swapped in via `.swap` (a crash mid-swap is completed on the next open) and
//!   replaces its source segment one for one (Kafka also groups small segments; fetchbench does
//!   not).

use std::collections::HashMap;
use std::time::SystemTime;

use super::batch::builder::empty_batch;
use super::batch::{BatchBuilder, BatchError, RecordBatch, DEFAULT_MAX_UNCOMPRESSED};
use super::error::LogError;
use super::partition::PartitionLog;
use super::segment::{self, Segment, SegmentConfig};

/// What a retention pass deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Base offsets of the deleted segments.
    pub deleted_segments: Vec<i64>,
    /// Log start offset afterwards.
    pub log_start_offset: i64,
}

/// Applies `retention.ms`, `retention.bytes` and the log start offset to `log` (when its
/// `cleanup.policy` includes `delete`; the log start offset rule always applies), as Kafka's
/// `deleteOldSegments`. `now_ms` is the wall clock.
///
/// Errors: [`LogError::Io`] when a file cannot be renamed or removed.
pub fn apply_retention(log: &mut PartitionLog, now_ms: i64) -> Result<RetentionOutcome, LogError> {
    let mut deleted = Vec::new();
    let cfg = log.config().clone();
    if cfg.is_delete() {
        if cfg.retention_ms >= 0 {
            let retention_ms = cfg.retention_ms;
            deleted.extend(log.delete_oldest_segments(|seg, _| now_ms - seg.largest_timestamp() > retention_ms)?);
        }
        if cfg.retention_bytes >= 0 {
            let mut diff = log.size_in_bytes() as i64 - cfg.retention_bytes;
            deleted.extend(log.delete_oldest_segments(|seg, _| {
                if diff - seg.size() as i64 >= 0 {
                    diff -= seg.size() as i64;
                    true
                } else {
                    false
                }
            })?);
        }
    }
    let start = log.log_start_offset();
    deleted.extend(log.delete_oldest_segments(|_, next| next.is_some_and(|n| n.base_offset() <= start))?);
    Ok(RetentionOutcome { deleted_segments: deleted, log_start_offset: log.log_start_offset() })
}

/// What a compaction pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactionOutcome {
    /// Base offsets of the segments rewritten.
    pub cleaned_segments: Vec<i64>,
    /// Records read.
    pub records_read: u64,
    /// Records kept.
    pub records_kept: u64,
    /// Tombstones removed because their delete horizon had passed.
    pub tombstones_removed: u64,
    /// Bytes before and after.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// First offset not cleaned (Kafka's `cleaner-offset-checkpoint` value).
    pub first_dirty_offset: i64,
}

/// Compacts `log` once (when its `cleanup.policy` includes `compact`): every segment before the
/// active one whose records are all older than `min.compaction.lag.ms` is rewritten keeping the
/// latest record per key, as described in the module docs. `now_ms` drives delete horizons.
///
/// Errors: [`LogError::Batch`] when a batch in a cleanable segment is invalid or its records cannot
/// be rewritten (nothing is replaced then); [`LogError::Io`].
pub fn compact(log: &mut PartitionLog, now_ms: i64) -> Result<CompactionOutcome, LogError> {
    let cfg = log.config().clone();
    let mut out = CompactionOutcome { first_dirty_offset: log.log_start_offset(), ..Default::default() };
    if !cfg.is_compact() {
        return Ok(out);
    }
    // The cleanable range: inactive segments old enough, below the last stable offset (the high
    // watermark, or the first offset of the earliest open transaction: Kafka's
    // `firstUncleanableDirtyOffset` takes the log's `firstUnstableOffset`).
    let upper = log.last_stable_offset();
    let segs: Vec<&Segment> = log.segments().collect();
    let mut cleanable: Vec<i64> = Vec::new();
    for (i, seg) in segs.iter().enumerate() {
        let Some(next) = segs.get(i + 1) else { break };
        if next.base_offset() > upper {
            break;
        }
        if cfg.min_compaction_lag_ms > 0 && now_ms - seg.largest_timestamp() < cfg.min_compaction_lag_ms {
            break;
        }
        cleanable.push(seg.base_offset());
        out.first_dirty_offset = next.base_offset();
    }
    if cleanable.is_empty() {
        return Ok(out);
    }
    // Pass 1: the offset map (latest offset per key) and each producer's last data offset
    // (Kafka's `lastDataOffset`: control batches do not count).
    let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
    let mut last_batch_of_producer: HashMap<i64, i64> = HashMap::new();
    let aborted = AbortedRanges::new(log.aborted_txns());
    let map = log.segments_map();
    for base in &cleanable {
        let seg = &map[base];
        for_each_batch(seg, |batch| {
            let h = batch.header();
            if h.attributes.is_control() {
                return Ok(());
            }
            if h.has_producer_id() {
                last_batch_of_producer.insert(h.producer_id, h.last_offset());
            }
            if aborted.contains(h) {
                // Kafka's buildOffsetMap skips aborted transactions' records: they must not
                // hide the committed value of their key.
                return Ok(());
            }
            for rec in batch.records_with_limit(DEFAULT_MAX_UNCOMPRESSED)?.iter() {
                let rec = rec?;
                if let Some(k) = rec.key {
                    latest.insert(k.to_vec(), rec.offset);
                }
            }
            Ok(())
        })?;
    }
    // Producers with data batches after the cleanable range are still writing: their last batch is
    // later.
    for seg in map.range(out.first_dirty_offset..).map(|(_, s)| s) {
        for info in seg.batches_from(0) {
            if let Some(h) = info?.header {
                if h.has_producer_id() && !h.attributes.is_control() {
                    last_batch_of_producer.insert(h.producer_id, h.last_offset());
                }
            }
        }
    }
    // Pass 2: rewrite each cleanable segment as `.cleaned`.
    let seg_cfg = SegmentConfig {
        index_interval_bytes: cfg.index_interval_bytes.max(0) as u32,
        max_index_size: cfg.segment_index_bytes.max(12) as usize,
    };
    let mut cleaned = Vec::new();
    let written = (|| {
        for base in &cleanable {
            let seg = &map[base];
            out.bytes_before += seg.size() as u64;
            segment::Segment::delete_files(log.dir(), *base, segment::CLEANED_SUFFIX)?;
            let mut dst = Segment::create_with_suffix(log.dir(), *base, seg_cfg, now_ms, segment::CLEANED_SUFFIX)?;
            // A failed write to the cleaned segment is a `LogError` of its own: kept aside with its
            // cause while the batch walk (whose errors are `BatchError`s) stops.
            let mut write_error: Option<LogError> = None;
            let walked = for_each_batch(seg, |batch| {
                let kept = filter_batch(
                    &batch,
                    &latest,
                    &last_batch_of_producer,
                    &aborted,
                    now_ms,
                    cfg.delete_retention_ms,
                    &mut out,
                )?;
                if let Some(bytes) = kept {
                    let b = RecordBatch::parse(&bytes)?;
                    let h = b.header();
                    if let Err(e) = dst.append(h.last_offset(), h.max_timestamp, h.last_offset(), &bytes) {
                        write_error = Some(e);
                        return Err(BatchError::InvalidRecord {
                            base_offset: h.base_offset,
                            index: 0,
                            reason: "the cleaned segment refused the batch".into(),
                        });
                    }
                }
                Ok(())
            });
            if let Some(e) = write_error {
                return Err(e);
            }
            walked?;
            // The markers are all kept, so the source's `.txnindex` stays true: it goes with
            // the cleaned segment through the swap.
            let txn = crate::log::txn_index::path_for(seg.log_path());
            if let Some(entries) = crate::log::txn_index::read(&txn)? {
                let to = log.dir().join(format!(
                    "{}{}",
                    segment::file_name(*base, segment::TXN_INDEX_SUFFIX),
                    segment::CLEANED_SUFFIX
                ));
                std::fs::write(&to, crate::log::txn_index::encode(&entries))
                    .map_err(|e| LogError::io("write", &to, e))?;
                std::fs::File::open(&to).and_then(|f| f.sync_all()).map_err(|e| LogError::io("fsync", &to, e))?;
            }
            dst.on_become_inactive()?;
            dst.flush()?;
            // Kafka's cleanSegments: the cleaned segment keeps the source's last-modified time.
            let modified = seg
                .file()
                .file()
                .metadata()
                .and_then(|m| m.modified())
                .map_err(|e| LogError::io("stat", seg.log_path(), e))?;
            set_last_modified(&dst, modified)?;
            out.bytes_after += dst.size() as u64;
            cleaned.push(dst);
        }
        Ok(())
    })();
    if let Err(e) = written {
        // Nothing is replaced: remove what was written (best effort; the next pass and the next
        // open remove `.cleaned` leftovers too) and report the first error.
        drop(cleaned);
        for base in &cleanable {
            let _ = Segment::delete_files(log.dir(), *base, segment::CLEANED_SUFFIX);
        }
        return Err(e);
    }
    out.cleaned_segments = cleanable.clone();
    log.replace_segments(cleaned, &cleanable)?;
    Ok(out)
}

/// Kafka's `LogSegment.setLastModified`, for the `.log` of `seg`: its modification time is what
/// [`Segment::largest_timestamp`] falls back to. (The index files are not set: the swap reopens
/// and resizes them, which would reset their time.)
fn set_last_modified(seg: &Segment, modified: SystemTime) -> Result<(), LogError> {
    seg.file()
        .file()
        .set_modified(modified)
        .map_err(|e| LogError::io("set the modification time of", seg.log_path(), e))
}

/// The aborted transactions of a log by producer: `(first offset, marker offset)` ranges
/// (Kafka's cleaner collects them from the `.txnindex` files, `CleanedTransactionMetadata`).
struct AbortedRanges(HashMap<i64, Vec<(i64, i64)>>);

impl AbortedRanges {
    fn new(aborted: &[crate::log::txn_index::AbortedTxn]) -> Self {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for t in aborted {
            by_producer.entry(t.producer_id).or_default().push((t.first_offset, t.last_offset));
        }
        AbortedRanges(by_producer)
    }

    /// Whether `h` is a data batch of an aborted transaction: transactional, of a producer with
    /// an aborted transaction whose range holds it (a producer has one transaction open at a
    /// time, so the range is exact).
    fn contains(&self, h: &crate::log::batch::BatchHeader) -> bool {
        h.attributes.is_transactional()
            && !h.attributes.is_control()
            && self
                .0
                .get(&h.producer_id)
                .is_some_and(|r| r.iter().any(|&(first, last)| first <= h.base_offset && h.base_offset <= last))
    }
}

/// Applies the retention rules of the module docs to one batch. Returns the bytes to write (the
/// original, or a rewritten batch), or `None` to drop it.
fn filter_batch(
    batch: &RecordBatch<'_>,
    latest: &HashMap<Vec<u8>, i64>,
    last_batch_of_producer: &HashMap<i64, i64>,
    aborted: &AbortedRanges,
    now_ms: i64,
    delete_retention_ms: i64,
    stats: &mut CompactionOutcome,
) -> Result<Option<Vec<u8>>, BatchError> {
    let h = *batch.header();
    if h.attributes.is_control() {
        return Ok(Some(batch.as_bytes().to_vec()));
    }
    let horizon = h.delete_horizon_ms();
    let records = batch.records_with_limit(DEFAULT_MAX_UNCOMPRESSED)?;
    let all = records.to_vec()?;
    stats.records_read += all.len() as u64;
    let mut kept = Vec::new();
    let mut has_tombstone = false;
    // Kafka's cleaner discards the records of aborted transactions (`discardBatchRecords`).
    let discard = aborted.contains(&h);
    for rec in all.iter().filter(|_| !discard) {
        let Some(key) = rec.key else { continue };
        if latest.get(key).is_some_and(|&o| o > rec.offset) {
            continue;
        }
        if rec.value.is_none() {
            if horizon.is_some_and(|hz| hz <= now_ms) {
                stats.tombstones_removed += 1;
                continue;
            }
            has_tombstone = true;
        }
        kept.push(rec);
    }
    stats.records_kept += kept.len() as u64;
    if kept.is_empty() {
        // Kafka's filterTo: RETAIN_EMPTY writes writeEmptyHeader, anything else writes nothing.
        let is_last_of_producer =
            h.has_producer_id() && last_batch_of_producer.get(&h.producer_id) == Some(&h.last_offset());
        return Ok(is_last_of_producer.then(|| empty_batch(&h)));
    }
    let needs_horizon = has_tombstone && horizon.is_none();
    if kept.len() == all.len() && !needs_horizon {
        return Ok(Some(batch.as_bytes().to_vec()));
    }
    let codec = h.attributes.compression()?;
    let mut b = BatchBuilder::new(h.base_offset, codec)
        .producer(h.producer_id, h.producer_epoch, h.base_sequence)
        .partition_leader_epoch(h.partition_leader_epoch)
        .transactional(h.attributes.is_transactional())
        .last_offset_delta(h.last_offset_delta); // Kafka's overrideLastOffset: keeps the producer's last sequence
    if h.attributes.is_log_append_time() {
        // Kafka's buildRetainedRecordsInto: logAppendTime = the batch's max timestamp.
        b = b.log_append_time(h.max_timestamp);
    }
    if let Some(hz) = horizon.or(needs_horizon.then(|| now_ms.saturating_add(delete_retention_ms))) {
        b = b.delete_horizon(hz);
    }
    for rec in &kept {
        b.append_at(rec.offset, rec.timestamp, rec.key, rec.value, &rec.headers)?;
    }
    Ok(Some(b.build()?))
}

/// Calls `f` for every v2 batch of `seg` (CRC-verified); a legacy entry or a corrupt batch is an
/// error naming the file and position.
fn for_each_batch(seg: &Segment, mut f: impl FnMut(RecordBatch<'_>) -> Result<(), BatchError>) -> Result<(), LogError> {
    for info in seg.batches_from(0) {
        let info = info?;
        let bytes = seg.read_bytes(info.position, info.size)?;
        let wrap =
            |source| LogError::Batch { path: seg.log_path().to_path_buf(), position: info.position as u64, source };
        let batch = RecordBatch::parse(&bytes).map_err(wrap)?;
        batch.verify_crc().map_err(wrap)?;
        f(batch).map_err(wrap)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::Compression;
    use crate::log::config::LogConfig;
    use crate::log::partition::OpenOptions;

    const T: i64 = 1_764_000_000_000;

    /// One batch of producer `pid` (epoch `epoch`) with sequence `seq`: one record under key `k`.
    fn idempotent(pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, seq);
        b.append(T, Some(b"k"), Some(format!("v{seq}-0").as_bytes()), &[]);
        b.build().unwrap()
    }

    #[test]
    fn state_rebuilt_from_a_compacted_log_keeps_each_producers_last_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("compacted-0");
        let open = |dir: &std::path::Path, cfg: LogConfig, clean: bool| {
            PartitionLog::open(dir, cfg, OpenOptions { had_clean_shutdown: clean, ..Default::default() }).unwrap().0
        };
        let mut cfg = LogConfig::default();
        cfg.set("cleanup.policy", "compact").unwrap();
        let mut log = open(&dir, cfg.clone(), true);
        for seq in 0..5 {
            log.append(&idempotent(3, 0, seq), T).unwrap();
        }
        // A plain write of the same key makes every record of producer 3 obsolete.
        let mut plain = BatchBuilder::new(0, Compression::None);
        plain.append(T, Some(b"k"), Some(b"latest"), &[]);
        log.append(&plain.build().unwrap(), T).unwrap();
        log.roll(T).unwrap();
        let out = compact(&mut log, T).unwrap();
        assert!(out.records_kept < out.records_read, "{out:?}");
        drop(log);
        let mut log = open(&dir, cfg, false);
        let entry = log.producer_state().entry(3).expect("the producer's last (empty) batch survives");
        assert_eq!((entry.producer_epoch(), entry.last_seq(), entry.last_data_offset()), (0, 4, 4));
        let retry = log.append(&idempotent(3, 0, 4), T).unwrap();
        assert_eq!((retry.duplicate, retry.first_offset), (true, 4));
        assert!(matches!(log.append(&idempotent(3, 0, 6), T), Err(LogError::OutOfOrderSequence { .. })));
        assert_eq!(log.append(&idempotent(3, 0, 5), T).unwrap().first_offset, 6);
    }
}
