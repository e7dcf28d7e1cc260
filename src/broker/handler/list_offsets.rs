//! ListOffsets (API key 2): offsets by timestamp (KIP-79).
//!
//! Per partition: timestamp -2 ([`EARLIEST_TIMESTAMP`]) gives the log start offset, -1
//! ([`LATEST_TIMESTAMP`]) the high watermark (Kafka's answer for `read_uncommitted`; on one node
//! it equals the log end offset, and without transactions it is also the last stable offset),
//! both with timestamp -1; -4 (earliest local, KIP-405) is the log start offset here (no tiered
//! storage). A timestamp >= 0 gives the earliest offset whose record timestamp is >= it, looking
//! inside batches ([`PartitionLog::fetch_offset_by_timestamp`]), or offset -1 and timestamp -1
//! when there is none. Other negative timestamps (-3 max timestamp, KIP-734; -5 earliest
//! pending upload) are not served yet: `INVALID_REQUEST`.
//!
//! Leader epoch (v4+; the field does not exist before, so it stays -1 there), as Kafka's
//! `UnifiedLog.fetchOffsetByTimestamp`: latest gets the current leader epoch, earliest and
//! timestamps the epoch the found offset was appended under (`LeaderEpochFileCache.epochForOffset`
//! over [`offset_for_leader_epoch::leader_epochs`]), -1 when the offset is -1 or unknown to the
//! cache. Clients validate their position with that epoch (OffsetForLeaderEpoch, KIP-320).

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::handler::offset_for_leader_epoch::{self, epoch_for_offset, leader_epochs};
use crate::broker::{errors, Shared};
use crate::log::partition::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::log::PartitionLog;

/// ListOffsets target timestamp meaning "the earliest offset on local storage" (KIP-405).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

/// Answers every partition of the request, in request order.
pub fn handle(shared: &Shared, request: &ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    // The leader epoch field exists from v4 on; setting it at v1-v3 fails the encoding.
    let with_epoch = version >= 4;
    let guard = shared.logs();
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
                    match guard.as_ref().and_then(|logs| logs.log(name, p.partition_index)) {
                        None => resp.with_error_code(errors::UNKNOWN_TOPIC_OR_PARTITION),
                        Some(log) => match lookup(log, p.timestamp) {
                            Ok((timestamp, offset)) => {
                                let epoch = match p.timestamp {
                                    _ if !with_epoch || offset < 0 => -1,
                                    LATEST_TIMESTAMP => offset_for_leader_epoch::current_leader_epoch(log),
                                    _ => epoch_for_offset(&leader_epochs(log), offset).unwrap_or(-1),
                                };
                                resp.with_timestamp(timestamp).with_offset(offset).with_leader_epoch(epoch)
                            }
                            Err(code) => resp.with_error_code(code),
                        },
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(topic.name.clone()).with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for a target timestamp, or a Kafka error code.
fn lookup(log: &PartitionLog, target: i64) -> Result<(i64, i64), i16> {
    match target {
        LATEST_TIMESTAMP => Ok((-1, log.high_watermark())),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Ok((-1, log.log_start_offset())),
        t if t < 0 => Err(errors::INVALID_REQUEST),
        t => match log.fetch_offset_by_timestamp(t) {
            Ok(Some(found)) => Ok((found.timestamp, found.offset)),
            Ok(None) => Ok((-1, -1)),
            Err(e) => Err(errors::log_error_code(&e)),
        },
    }
}
