//! OffsetForLeaderEpoch (API key 23, KIP-101 / KIP-320): the end offset of a leader epoch.
//!
//! Consumers (librdkafka, the Java client since 2.3) call it after a leader change or when they
//! take over a committed position, to detect log truncation: they ask for the epoch of the last
//! record they consumed and compare the answer with their position. Followers use it to find
//! where to truncate; this single node has none.
//!
//! Per partition, in request order (Kafka's `Partition.lastOffsetForLeaderEpoch`):
//!
//! 1. unknown partition: `UNKNOWN_TOPIC_OR_PARTITION`;
//! 2. `current_leader_epoch` (-1 = not given, not checked) older than the partition's
//!    ([`current_leader_epoch`]): `FENCED_LEADER_EPOCH`; newer: `UNKNOWN_LEADER_EPOCH`
//!    (Kafka's `Partition.checkCurrentLeaderEpoch`);
//! 3. otherwise `(leader_epoch, end_offset)` = [`end_offset_for`] over the partition's leader
//!    epoch cache ([`leader_epochs`]), Kafka's `LeaderEpochFileCache.endOffsetFor`; an undefined
//!    answer is epoch -1 and offset -1 (`UNDEFINED_EPOCH`, `UNDEFINED_EPOCH_OFFSET`), with no
//!    error (`UnifiedLog.endOffsetForEpoch` returns `None`).
//!
//! Errors carry epoch -1 and offset -1 (the defaults of Kafka's `EpochEndOffset`).
//!
//! Versions: the codec's v2-v4 (Kafka 4 removed v0-v1, KIP-896); every served version carries
//! `current_leader_epoch` and the response's `leader_epoch`. `replica_id` (v3+) is not used:
//! consumers (-1) and the debugging id (-2) get the same answer from a leader.

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::broker::errors;
use crate::broker::shared::Shared;
use crate::log::checkpoint::EpochEntry;
use crate::log::{Partition, PartitionLog};

/// `UNDEFINED_EPOCH` (Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH`): no epoch.
pub(crate) const UNDEFINED_EPOCH: i32 = -1;
/// `UNDEFINED_EPOCH_OFFSET` (Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET`): no
/// end offset.
pub(crate) const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// Answers every partition of the request, topics and partitions in request order.
pub(crate) fn handle(
    shared: &Shared,
    request: &OffsetForLeaderEpochRequest,
    _version: i16,
) -> OffsetForLeaderEpochResponse {
    let logs = shared.logs();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.topic.0.as_str();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let resp = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(UNDEFINED_EPOCH)
                        .with_end_offset(UNDEFINED_EPOCH_OFFSET);
                    let Some(partition) = logs.and_then(|logs| logs.partition(name, p.partition)) else {
                        return resp.with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION);
                    };
                    if let Err(code) = check_current_leader_epoch(&partition, p.current_leader_epoch) {
                        return resp.with_error_code(code);
                    }
                    let log = partition.log();
                    let (epoch, offset) = end_offset_for(&leader_epochs(&log), p.leader_epoch, log.log_end_offset());
                    if offset == UNDEFINED_EPOCH_OFFSET {
                        resp
                    } else {
                        resp.with_leader_epoch(epoch).with_end_offset(offset)
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(topic.topic.clone()).with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// The partition's current leader epoch: the epoch this broker stamps on appended batches
/// ([`Partition::leader_epoch`], read without the partition's lock; 0 for a new partition, the
/// latest cached epoch for a copied Kafka log). Metadata, ListOffsets and this handler report it.
pub(crate) fn current_leader_epoch(partition: &Partition) -> i32 {
    partition.leader_epoch()
}

/// Kafka's `Partition.checkCurrentLeaderEpoch`: `Ok` when `requested` is -1 (not given) or
/// equals [`current_leader_epoch`]; `FENCED_LEADER_EPOCH` when it is older (the client's
/// metadata is stale), `UNKNOWN_LEADER_EPOCH` when newer (this broker is behind).
pub(crate) fn check_current_leader_epoch(partition: &Partition, requested: i32) -> Result<(), i16> {
    let ours = current_leader_epoch(partition);
    match requested {
        UNDEFINED_EPOCH => Ok(()),
        r if r < ours => Err(errors::FENCED_LEADER_EPOCH),
        r if r > ours => Err(errors::UNKNOWN_LEADER_EPOCH),
        _ => Ok(()),
    }
}

/// The partition's leader epoch cache as Kafka's leader holds it: the cached entries
/// ([`PartitionLog::leader_epochs`], ascending), plus the current leader epoch starting at the
/// log end offset when it is newer than the latest entry (or the cache is empty). Kafka's
/// `Partition.makeLeader` assigns the new epoch at the log end offset when leadership begins, so a
/// leader's cache always holds its current epoch even before anything was appended under it.
pub(crate) fn leader_epochs(log: &PartitionLog) -> Vec<EpochEntry> {
    let mut epochs = log.leader_epochs().to_vec();
    let current = log.leader_epoch();
    if current >= 0 && epochs.last().is_none_or(|last| current > last.epoch) {
        epochs.push(EpochEntry { epoch: current, start_offset: log.log_end_offset() });
    }
    epochs
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor(requestedEpoch, logEndOffset)` over `epochs`
/// (ascending by epoch): `(epoch, end offset)`.
///
/// - `requested` = -1, or above every cached epoch, or an empty cache: `(-1, -1)`;
/// - `requested` = the latest epoch: `(requested, log_end_offset)` (that epoch is still being
///   written to);
/// - `requested` below the first cached epoch: `(requested, start offset of the first epoch)`;
/// - otherwise: the largest cached epoch <= `requested` and the start offset of the first
///   cached epoch above `requested` (an epoch missing from the cache ends where the next starts).
pub(crate) fn end_offset_for(epochs: &[EpochEntry], requested: i32, log_end_offset: i64) -> (i32, i64) {
    if requested == UNDEFINED_EPOCH {
        return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    }
    if epochs.last().is_some_and(|last| last.epoch == requested) {
        return (requested, log_end_offset);
    }
    let Some(higher) = epochs.iter().find(|e| e.epoch > requested) else {
        return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    };
    match epochs.iter().rev().find(|e| e.epoch <= requested) {
        None => (requested, higher.start_offset),
        Some(floor) => (floor.epoch, higher.start_offset),
    }
}

/// Kafka's `LeaderEpochFileCache.epochForOffset`: the epoch under which `offset` was appended
/// (the entry starting at `offset`, else the last one starting before it), or `None` when
/// `offset` is below the first entry or the cache is empty.
pub(crate) fn epoch_for_offset(epochs: &[EpochEntry], offset: i64) -> Option<i32> {
    let mut previous = None;
    for e in epochs {
        if e.start_offset == offset {
            return Some(e.epoch);
        }
        if e.start_offset > offset {
            return previous;
        }
        previous = Some(e.epoch);
    }
    previous
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> Vec<EpochEntry> {
        entries.iter().map(|&(epoch, start_offset)| EpochEntry { epoch, start_offset }).collect()
    }

    #[test]
    fn end_offset_for_follows_leader_epoch_file_cache() {
        let epochs = cache(&[(2, 10), (4, 20), (7, 30)]);
        assert_eq!(end_offset_for(&epochs, 7, 42), (7, 42), "latest: the log end offset");
        assert_eq!(end_offset_for(&epochs, 4, 42), (4, 30), "a cached epoch ends where the next starts");
        assert_eq!(end_offset_for(&epochs, 2, 42), (2, 20));
        assert_eq!(end_offset_for(&epochs, 5, 42), (4, 30), "unknown epoch: floor epoch, next start");
        assert_eq!(end_offset_for(&epochs, 1, 42), (1, 10), "below the first: the first start offset");
        assert_eq!(end_offset_for(&epochs, 8, 42), (-1, -1), "above the latest");
        assert_eq!(end_offset_for(&epochs, -1, 42), (-1, -1), "undefined epoch");
        assert_eq!(end_offset_for(&[], 0, 42), (-1, -1), "empty cache");
    }

    #[test]
    fn epoch_for_offset_follows_kafka() {
        let epochs = cache(&[(2, 10), (4, 20)]);
        assert_eq!(epoch_for_offset(&epochs, 9), None);
        assert_eq!(epoch_for_offset(&epochs, 10), Some(2));
        assert_eq!(epoch_for_offset(&epochs, 19), Some(2));
        assert_eq!(epoch_for_offset(&epochs, 20), Some(4));
        assert_eq!(epoch_for_offset(&epochs, 99), Some(4));
        assert_eq!(epoch_for_offset(&[], 0), None);
    }
}
