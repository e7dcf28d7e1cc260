//! The leader epoch cache rules, Kafka's `LeaderEpochFileCache`: the entries of
//! `leader-epoch-checkpoint` (each epoch with the first offset appended under it, ascending) are
//! extended by appends and recovery and truncated to the log's offsets.

use crate::log::checkpoint::EpochEntry;

/// Kafka's `LeaderEpochFileCache.assign`: a new entry only for an epoch above the latest one.
pub(super) fn assign_epoch(epochs: &mut Vec<EpochEntry>, epoch: i32, start_offset: i64) {
    if epochs.last().is_none_or(|l| epoch > l.epoch) {
        epochs.push(EpochEntry { epoch, start_offset });
    }
}

/// Kafka's `truncateFromEnd(log end offset)` (entries starting at or past it go) and
/// `truncateFromStart(log start offset)` (the last entry at or below it is kept, moved up to it).
pub(super) fn truncate_epochs(epochs: &mut Vec<EpochEntry>, log_start_offset: i64, log_end_offset: i64) {
    epochs.retain(|e| e.start_offset < log_end_offset);
    if let Some(keep) = epochs.iter().rposition(|e| e.start_offset <= log_start_offset) {
        epochs.drain(..keep);
        if let Some(first) = epochs.first_mut() {
            first.start_offset = first.start_offset.max(log_start_offset);
        }
    }
}
