//! ListOffsets (API key 2): offsets by timestamp (KIP-79).
//!
//! Per partition: timestamp -2 ([`EARLIEST_TIMESTAMP`]) gives the log start offset, -1
//! ([`LATEST_TIMESTAMP`]) the high watermark for `read_uncommitted` (on one node it equals the
//! log end offset) and the last stable offset for `read_committed` (v2+ `isolation_level` 1:
//! below the first open transaction), both with timestamp -1; a timestamp lookup finds only
//! offsets below that bound (Kafka's `Partition.fetchOffsetForTimestamp` and its
//! `lastFetchableOffset`); -4 (earliest local, KIP-405) is the log start offset here (no tiered
//! storage). A timestamp >= 0 gives the earliest offset whose record timestamp is >= it, looking
//! inside batches ([`PartitionLog::fetch_offset_by_timestamp`]), or offset -1 and timestamp -1
//! when there is none. -3 ([`MAX_TIMESTAMP`], KIP-734) gives the first record carrying the largest
//! timestamp of the log (offset -1 and timestamp -1 when that record is at or past the same
//! bound: a record of an open transaction under `read_committed`), -5 ([`LATEST_TIERED_TIMESTAMP`], KIP-1005) offset -1 (no tiered storage),
//! both as Kafka 4's `UnifiedLog.fetchOffsetByTimestamp`. Other negative timestamps:
//! `INVALID_REQUEST`.
//!
//! As Kafka's `ReplicaManager.fetchOffset`: a partition named twice in one request gets
//! `INVALID_REQUEST` in every occurrence, and the v4+ `current_leader_epoch` is checked
//! (`FENCED_LEADER_EPOCH` / `UNKNOWN_LEADER_EPOCH`, KIP-320;
//! [`offset_for_leader_epoch::check_current_leader_epoch`]).
//!
//! Leader epoch (v4+; the field does not exist before, so it stays -1 there), as Kafka's
//! `UnifiedLog.fetchOffsetByTimestamp`: latest gets the current leader epoch, earliest and
//! timestamps the epoch the found offset was appended under (`LeaderEpochFileCache.epochForOffset`
//! over [`offset_for_leader_epoch::leader_epochs`]), -1 when the offset is -1 or unknown to the
//! cache. Clients validate their position with that epoch (OffsetForLeaderEpoch, KIP-320).

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::errors;
use crate::broker::handler::offset_for_leader_epoch::{self, epoch_for_offset, leader_epochs};
use crate::broker::shared::Shared;
use crate::log::partition::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::log::{Partition, PartitionLog};

/// ListOffsets target timestamp meaning "the earliest offset on local storage" (KIP-405).
pub(crate) const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// ListOffsets target timestamp meaning "the record with the largest timestamp" (KIP-734, v7+).
pub(crate) const MAX_TIMESTAMP: i64 = -3;
/// ListOffsets target timestamp meaning "the latest offset in tiered storage" (KIP-1005, v9+).
pub(crate) const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Answers every partition of the request, in request order.
pub(crate) fn handle(shared: &Shared, request: &ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    // The leader epoch field exists from v4 on; setting it at v1-v3 fails the encoding.
    let with_epoch = version >= 4;
    // isolation_level exists from v2 on (KIP-98).
    let read_committed = version >= 2 && request.isolation_level == 1;
    let logs = shared.logs();
    let mut seen = std::collections::HashSet::new();
    let duplicates: std::collections::HashSet<(&str, i32)> = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.as_str(), p.partition_index)))
        .filter(|tp| !seen.insert(*tp))
        .collect();
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.as_str();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let resp = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    if duplicates.contains(&(name, p.partition_index)) {
                        return resp.with_error_code(errors::INVALID_REQUEST);
                    }
                    match logs.and_then(|logs| logs.partition(name, p.partition_index)) {
                        None => resp.with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION),
                        Some(partition) => {
                            match offset_for_leader_epoch::check_current_leader_epoch(
                                &partition,
                                p.current_leader_epoch,
                            )
                            .and_then(|()| lookup(&partition, p.timestamp, read_committed))
                            {
                                Ok((timestamp, offset)) => {
                                    let epoch = match p.timestamp {
                                        _ if !with_epoch || offset < 0 => -1,
                                        LATEST_TIMESTAMP => offset_for_leader_epoch::current_leader_epoch(&partition),
                                        _ => epoch_for_offset(&leader_epochs(&partition.log()), offset).unwrap_or(-1),
                                    };
                                    resp.with_timestamp(timestamp).with_offset(offset).with_leader_epoch(epoch)
                                }
                                Err(code) => resp.with_error_code(code),
                            }
                        }
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for a target timestamp, or a Kafka error code. Latest and earliest are
/// read without the partition's lock; a timestamp lookup takes it for reading.
fn lookup(partition: &Partition, target: i64, read_committed: bool) -> Result<(i64, i64), i16> {
    let last_fetchable = if read_committed { partition.last_stable_offset() } else { partition.high_watermark() };
    match target {
        LATEST_TIMESTAMP => Ok((-1, last_fetchable)),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok((-1, partition.log_start_offset())),
        LATEST_TIERED_TIMESTAMP => Ok((-1, -1)),
        // Kafka's `ReplicaManager.fetchOffset` bounds every lookup but latest and earliest by
        // the last fetchable offset, MAX_TIMESTAMP included: no offset of an open transaction.
        MAX_TIMESTAMP => match max_timestamp(&partition.log()) {
            Ok((_, offset)) if offset >= last_fetchable => Ok((-1, -1)),
            r => r.map_err(|e| errors::log_error_code(&e)),
        },
        t if t < 0 => Err(errors::INVALID_REQUEST),
        t => match partition.log().fetch_offset_by_timestamp(t) {
            Ok(Some(found)) if found.offset < last_fetchable => Ok((found.timestamp, found.offset)),
            Ok(Some(_)) => Ok((-1, -1)),
            Ok(None) => Ok((-1, -1)),
            Err(e) => Err(errors::log_error_code(&e)),
        },
    }
}

/// Kafka's `UnifiedLog.fetchOffsetByTimestamp` for [`MAX_TIMESTAMP`]: the segment with the
/// largest max timestamp (the first such), and in it the first record carrying that timestamp;
/// `(-1, -1)` for a log without timestamps.
fn max_timestamp(log: &PartitionLog) -> Result<(i64, i64), crate::log::LogError> {
    let mut best: Option<&crate::log::segment::Segment> = None;
    for seg in log.segments() {
        if seg.size() > 0
            && best.is_none_or(|b| seg.max_timestamp_so_far().timestamp > b.max_timestamp_so_far().timestamp)
        {
            best = Some(seg);
        }
    }
    let Some(seg) = best.filter(|s| s.max_timestamp_so_far().timestamp >= 0) else { return Ok((-1, -1)) };
    let max = seg.max_timestamp_so_far().timestamp;
    Ok(seg.find_offset_by_timestamp(max, log.log_start_offset())?.map_or((-1, -1), |f| (f.timestamp, f.offset)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{BatchBuilder, Compression};
    use crate::log::partition::OpenOptions;
    use crate::log::{LogConfig, PartitionLog};

    const T: i64 = 1_764_000_000_000;

    fn batch(timestamp: i64, transactional: bool) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::None);
        if transactional {
            b = b.producer(1, 0, 0).transactional(true);
        }
        b.append(timestamp, None, Some(b"v"), &[]);
        b.build().unwrap()
    }

    /// Kafka's `Partition.fetchOffsetForTimestamp` + `ReplicaManager.fetchOffset`: every lookup
    /// but latest and earliest, MAX_TIMESTAMP included, answers no offset (-1, -1) when the
    /// record found is at or past the last fetchable offset (the LSO under read_committed).
    #[test]
    fn max_timestamp_under_read_committed_is_bounded_by_the_last_stable_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let (log, _) =
            PartitionLog::open(&tmp.path().join("t-0"), LogConfig::default(), OpenOptions::default()).unwrap();
        let p = Partition::new(log);
        p.append(&batch(T, false), T).unwrap();
        p.append_transactional(&batch(T + 2, true), T).unwrap();
        assert_eq!(p.last_stable_offset(), 1);
        assert_eq!(lookup(&p, MAX_TIMESTAMP, false), Ok((T + 2, 1)));
        assert_eq!(lookup(&p, MAX_TIMESTAMP, true), Ok((-1, -1)), "the open transaction's record");
        assert_eq!(lookup(&p, T + 1, true), Ok((-1, -1)));
        p.append_txn_marker(1, 0, 0, false, T + 1).unwrap();
        assert_eq!(lookup(&p, MAX_TIMESTAMP, true), Ok((T + 2, 1)), "committed");
    }
}
