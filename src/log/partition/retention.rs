//! Removing and replacing segments, the partition's side of retention and compaction (Kafka's
//! `UnifiedLog.deleteOldSegments` and `replaceSegments`, driven by the `LogCleaner`): the policies
//! themselves (`retention.ms`, `retention.bytes`, the compaction pass) are in
//! [`cleaner`](crate::log::cleaner). Deletion is bounded by the high watermark, not by the last
//! stable offset (as Kafka's): the aborted transactions whose markers go are forgotten, and an
//! open transaction whose first batches go counts from the new log start offset
//! ([`PartitionLog::last_stable_offset`]).

use std::collections::BTreeMap;

use crate::log::checkpoint::{write_leader_epoch_checkpoint, LEADER_EPOCH_CHECKPOINT};
use crate::log::error::LogError;
use crate::log::segment::{self, Segment};

use super::epoch_cache::truncate_epochs;
use super::partition_log::{rename_suffix, segment_config, PartitionLog};

impl PartitionLog {
    /// Deletes the oldest segments for which `should_delete(segment, next_segment)` holds, in order,
    /// stopping at the first that does not, never deleting the active segment unless it is empty
    /// and a new one replaces it (Kafka's `deleteOldSegments`); the log start offset moves to the
    /// first remaining offset. Files are renamed `.deleted` and unlinked: readers holding a
    /// [`FileSlice`](crate::log::segment::FileSlice) keep reading the data until they drop it.
    /// Returns the deleted base offsets.
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
                // The aborted transactions whose markers went with the deleted segments.
                self.aborted_txns.retain(|t| t.last_offset >= first);
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
}
