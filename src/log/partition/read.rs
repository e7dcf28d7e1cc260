//! The read side of a partition's log: [`PartitionLog::read`] (Kafka's `LocalLog.read`, a fetch
//! answered with a [`FileSlice`] naming bytes of a segment), [`PartitionLog::fetch_offset_by_timestamp`]
//! (ListOffsets, KIP-79) and the high watermark that bounds both; [`PartitionLog::read_committed`]
//! (KIP-98) bounded by the last stable offset, which moves with transactional appends and their
//! markers ([`PartitionLog::append_txn_marker`]) at runtime and is rebuilt at open.

use crate::log::error::LogError;
use crate::log::segment::FileSlice;
use crate::log::time_index::TimestampOffset;
use crate::log::txn_index::AbortedTxn;

use super::partition_log::{LogOffsetMetadata, PartitionLog};

/// ListOffsets target timestamp meaning "the earliest offset" (Kafka's `EARLIEST_TIMESTAMP`).
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// ListOffsets target timestamp meaning "the latest offset" (Kafka's `LATEST_TIMESTAMP`).
pub const LATEST_TIMESTAMP: i64 = -1;

impl PartitionLog {
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
        self.read_below(fetch_offset, max_bytes, min_one_batch, self.high_watermark)
    }

    /// A `read_committed` fetch (KIP-98, Kafka's `LocalLog.read` with `FetchIsolation.TXN_COMMITTED`):
    /// [`Self::read`] up to the [last stable offset](Self::last_stable_offset) instead of the high
    /// watermark, with the aborted transactions a consumer needs to drop the aborted records of
    /// the slice: those whose ABORT marker is at or after `fetch_offset` and whose first offset
    /// is below the slice's upper bound (Kafka's `LocalLog.addAbortedTransactions`: the bound
    /// is the offset of the first offset index entry at or past the slice's end
    /// ([`OffsetIndex::upper_bound_by_position`](crate::log::offset_index::OffsetIndex::upper_bound_by_position)), else the next segment's base offset,
    /// else the log end offset; here never above the last stable offset). The aborted
    /// transactions are kept in marker order, so the search starts with a binary search and
    /// stops, as Kafka's `TransactionIndex.collectAbortedTxns`, at the first one whose last
    /// stable offset reaches the bound (every later one started at or past it). None with an
    /// empty slice.
    ///
    /// Errors: as [`Self::read`].
    pub fn read_committed(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
    ) -> Result<(FileSlice, Vec<AbortedTxn>), LogError> {
        let lso = self.last_stable_offset();
        let bound = if lso == self.high_watermark.offset { self.high_watermark } else { self.offset_metadata(lso)? };
        let (slice, base) = self.read_below_from(fetch_offset, max_bytes, min_one_batch, bound)?;
        let mut aborted = Vec::new();
        if let (true, Some(base)) = (slice.len > 0, base) {
            let end = u32::try_from(slice.position + slice.len).unwrap_or(u32::MAX);
            let upper = self.segments[&base]
                .offset_index()
                .upper_bound_by_position(end)
                .map(|e| e.offset)
                .or_else(|| self.segments.range(base + 1..).next().map(|(b, _)| *b))
                .unwrap_or(self.log_end_offset.offset)
                .min(lso);
            let from = self.aborted_txns.partition_point(|t| t.last_offset < fetch_offset);
            for t in &self.aborted_txns[from..] {
                if t.first_offset < upper {
                    aborted.push(*t);
                }
                if t.last_stable_offset >= upper {
                    break;
                }
            }
        }
        Ok((slice, aborted))
    }

    /// [`Self::read`] never past `bound` (the high watermark or the last stable offset).
    fn read_below(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
        bound: LogOffsetMetadata,
    ) -> Result<FileSlice, LogError> {
        Ok(self.read_below_from(fetch_offset, max_bytes, min_one_batch, bound)?.0)
    }

    /// [`Self::read_below`] with the base offset of the segment the slice is in (`None` for an
    /// empty slice at the bound).
    fn read_below_from(
        &self,
        fetch_offset: i64,
        max_bytes: u32,
        min_one_batch: bool,
        bound: LogOffsetMetadata,
    ) -> Result<(FileSlice, Option<i64>), LogError> {
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset.offset {
            return Err(LogError::OffsetOutOfRange {
                partition: format!("{}-{}", self.topic, self.partition),
                offset: fetch_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset.offset,
            });
        }
        let hw = bound;
        let empty = || {
            let seg = self.segments.get(&hw.segment_base_offset).unwrap_or_else(|| self.active_segment());
            FileSlice { segment: seg.file().clone(), position: hw.position.min(seg.size()) as u64, len: 0 }
        };
        if fetch_offset >= hw.offset {
            return Ok((empty(), None));
        }
        let start_base = self.segments.range(..=fetch_offset).next_back().map(|(b, _)| *b).unwrap_or(i64::MIN);
        for (&base, seg) in self.segments.range(start_base..) {
            if base > hw.segment_base_offset {
                break;
            }
            let max_position = if base == hw.segment_base_offset { hw.position } else { seg.size() };
            if let Some(slice) = seg.read(fetch_offset, max_bytes, max_position, min_one_batch)? {
                return Ok((slice, Some(base)));
            }
        }
        Ok((empty(), None))
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
}
