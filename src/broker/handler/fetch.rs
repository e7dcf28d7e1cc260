//! Fetch (API key 1), answered at once, its record sets moved by the configured read path.
//!
//! For each requested partition, in request order: [`Partition::read`] names a
//! [`FileSlice`](crate::log::FileSlice) starting at the batch holding the fetch offset, cut at
//! `min(partition_max_bytes, bytes left of the response's max_bytes)`. KIP-74: only the first
//! partition that returns data may exceed the limits (its first batch whole, `min_one_batch`);
//! once the response's `max_bytes` is used up, later partitions return no records. No
//! broker-wide lock is taken: the partition is looked up under the log directory's map lock
//! (released at once), its high watermark and log start offset are read without its lock, and its
//! own lock is held for reading only while the slice's index lookup runs, so a fetch never waits
//! for another partition's append. No lock is held when any byte is written; the response is hand-framed by
//! [`FetchResponse::encode`] and written by
//! [`FetchResponseFrame::write_to`](crate::protocol::fetch_response::FetchResponseFrame::write_to),
//! so record bytes are never copied into a user-space buffer by the broker itself (the `copy`
//! and `direct` read paths do copy: that is what they measure).
//!
//! Every partition carries the high watermark, last stable offset (= high watermark: no
//! transactions) and log start offset. Errors per partition: `UNKNOWN_TOPIC_OR_PARTITION`,
//! `FENCED_LEADER_EPOCH` / `UNKNOWN_LEADER_EPOCH` (v9+ `current_leader_epoch` older / newer than
//! the partition's, KIP-320, as Kafka's `Partition.fetchRecords`), `OFFSET_OUT_OF_RANGE` and the
//! rest of [`errors::log_error_code`].
//!
//! The response's `max_bytes` and `min_bytes` are capped at [`FETCH_MAX_BYTES`], Kafka's default
//! broker `fetch.max.bytes` (55 MiB).
//!
//! Long polling: a fetch that finds fewer than `min_bytes` bytes (and no error) waits in the
//! purgatory for up to `max_wait_ms`, holding no thread, and is rebuilt when one of its
//! partitions is appended to ([`delayed_fetch`]).
//!
//! Versions v4-v18. From v13 topics are named by topic id (KIP-516): the id is resolved to the
//! topic through the partitions' `partition.metadata` ([`topics::name_by_id`]); an unknown (or
//! zero) id gets `UNKNOWN_TOPIC_ID` in each requested partition, and the response carries the
//! requested id (Kafka's `KafkaApis.handleFetchRequest`). v15 moved `replica_id` into
//! `replica_state` and v17 added `replica_directory_id`, both only for followers; v16's
//! `node_endpoints` and the partitions' `current_leader` are sent by Kafka only with
//! `NOT_LEADER_OR_FOLLOWER` / `FENCED_LEADER_EPOCH`, never by this leader, so their tagged
//! fields stay empty.
//!
//! `isolation_level` (KIP-98): a `read_committed` (1) fetch reads up to the partition's last
//! stable offset (the first offset of its earliest open transaction, else the high watermark)
//! and gets the aborted transactions of its slice in `aborted_transactions`
//! ([`Partition::read_committed`](crate::log::Partition::read_committed), from the markers and
//! `.txnindex` files of the log), from which the consumer drops the aborted records;
//! `read_uncommitted` (0) reads up to the high watermark with a null array, as Kafka's
//! `UnifiedLog.read` leaves `abortedTransactions` empty (`Optional.empty`, written as null)
//! unless the isolation is `TXN_COMMITTED`. Every response carries the last stable offset.
//!
//! Not yet (issue 4): fetch sessions (KIP-227: `session_id` is always 0, so clients send full
//! fetches; a full fetch (session epoch 0 or -1) is answered whatever session it names, as Kafka
//! answers one, and an incremental fetch (any other epoch) gets `FETCH_SESSION_ID_NOT_FOUND`).

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::FetchRequest;

use crate::broker::delayed_fetch::{self, available_bytes, has_error, DelayedFetch};
use crate::broker::handler::offset_for_leader_epoch::check_current_leader_epoch;
use crate::broker::responder::Responder;
use crate::broker::response;
use crate::broker::shared::Shared;
use crate::broker::{errors, topics};
use crate::log::Partition;
use crate::protocol::fetch_response::{
    AbortedTransaction, FetchResponse, FetchableTopic, PartitionData, FIRST_TOPIC_ID_VERSION,
};

/// Kafka's broker `fetch.max.bytes` default (57671680 = 55 MiB): the most record bytes one Fetch
/// response carries whatever the request's `max_bytes` (`KafkaApis.handleFetchRequest` takes
/// `min(max_bytes, fetch.max.bytes, quota window)`; KIP-74's first batch may still exceed it).
/// Without it a request for everything over partitions holding more than 2 GiB asks for a
/// response too large to frame.
pub(crate) const FETCH_MAX_BYTES: i32 = 57_671_680;

/// `isolation_level` of a `read_committed` fetch (KIP-98).
const READ_COMMITTED: i8 = 1;

/// Answers `request` through `responder`: at once when the response holds `min_bytes` (capped
/// at [`FETCH_MAX_BYTES`], as Kafka's `KafkaApis.handleFetchRequest` caps it), carries an error,
/// `max_wait_ms` is not positive or the broker is shutting down; otherwise the Fetch waits in the
/// purgatory ([`DelayedFetch`], watching its partitions) and this returns at once, holding no
/// thread and no log lock. An encoding failure (a bug) closes the connection.
pub(crate) fn handle(shared: &Arc<Shared>, request: FetchRequest, version: i16, responder: Responder) {
    let deadline = delayed_fetch::deadline(Instant::now(), request.max_wait_ms);
    let response = build(shared, &request, version);
    let min_bytes = request.min_bytes.min(FETCH_MAX_BYTES);
    if !delayed_fetch::should_park(available_bytes(&response), min_bytes, request.max_wait_ms)
        || has_error(&response)
        || shared.is_shutting_down()
    {
        let correlation_id = responder.correlation_id();
        responder.send(response::fetch(response, version, correlation_id));
        return;
    }
    let keys = delayed_fetch::watch_keys(&response);
    // The slices (and their open segment files) are not kept while waiting.
    drop(response);
    let op = DelayedFetch::new(request, version, min_bytes, deadline, build, responder);
    shared.purgatory().try_complete_else_watch(Arc::new(op), &keys);
}

/// The response before encoding (exposed for tests and benches). `version` decides how topics
/// are named: by name below v13, by topic id from v13 (KIP-516; an unknown id gets
/// `UNKNOWN_TOPIC_ID` in each of its partitions, the response naming the requested id).
pub(crate) fn build(shared: &Shared, request: &FetchRequest, version: i16) -> FetchResponse {
    let mut response = FetchResponse::default();
    // KIP-227 (Kafka's `FetchManager.newContext`): epoch 0 (INITIAL) and -1 (FINAL) are full
    // fetches whatever session they name (Kafka closes that session); any other epoch is an
    // incremental fetch of a session, and this broker keeps none.
    if request.session_epoch != 0 && request.session_epoch != -1 {
        response.error_code = errors::FETCH_SESSION_ID_NOT_FOUND;
        return response;
    }
    let read_committed = request.isolation_level == READ_COMMITTED;
    // max_bytes exists from v3 on; kafka-protocol's default for older versions is i32::MAX.
    let mut bytes_left = i64::from(request.max_bytes.clamp(0, FETCH_MAX_BYTES));
    let mut got_data = false;
    let logs = shared.logs();
    for topic in &request.topics {
        let (name, unknown_topic_code) = if version >= FIRST_TOPIC_ID_VERSION {
            let id = topic.topic_id.into_bytes();
            (logs.and_then(|logs| topics::name_by_id(logs, id)), errors::UNKNOWN_TOPIC_ID)
        } else {
            (Some(topic.topic.0.as_str().to_string()), errors::UNKNOWN_TOPIC_OR_PARTITION)
        };
        let mut out = FetchableTopic {
            name: name.clone().unwrap_or_default(),
            topic_id: topic.topic_id.into_bytes(),
            ..Default::default()
        };
        let name = name.as_deref().unwrap_or_default();
        for p in &topic.partitions {
            let mut data = PartitionData {
                partition_index: p.partition,
                high_watermark: -1,
                aborted_transactions: if read_committed { Some(Vec::new()) } else { None },
                ..Default::default()
            };
            match logs.and_then(|logs| logs.partition(name, p.partition)) {
                None if name.is_empty() => data.error_code = unknown_topic_code,
                None => data.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(partition) => {
                    fill(&mut data, &partition);
                    // KIP-320 (v9+): Kafka's `Partition.fetchRecords` -> `localLogWithEpochOrThrow`.
                    if let Err(code) = check_current_leader_epoch(&partition, p.current_leader_epoch) {
                        data.error_code = code;
                        out.partitions.push(data);
                        continue;
                    }
                    let limit = i64::from(p.partition_max_bytes.max(0)).min(bytes_left);
                    if limit > 0 || !got_data {
                        let max_bytes = u32::try_from(limit.max(0)).unwrap_or(u32::MAX);
                        let read = if read_committed {
                            partition.read_committed(p.fetch_offset, max_bytes, !got_data).map(|(slice, aborted)| {
                                data.aborted_transactions = Some(
                                    aborted
                                        .iter()
                                        .map(|t| AbortedTransaction {
                                            producer_id: t.producer_id,
                                            first_offset: t.first_offset,
                                        })
                                        .collect(),
                                );
                                slice
                            })
                        } else {
                            partition.read(p.fetch_offset, max_bytes, !got_data)
                        };
                        match read {
                            Ok(slice) => {
                                if slice.len > 0 {
                                    got_data = true;
                                    bytes_left -= slice.len as i64;
                                    data.records = Some(slice);
                                    // Appends may have run since `fill`: the slice ends at the
                                    // high watermark of its read, never above the one sent.
                                    fill(&mut data, &partition);
                                }
                            }
                            Err(e) => {
                                tracing::debug!("fetch {name}-{} at {}: {e}", p.partition, p.fetch_offset);
                                data.error_code = errors::log_error_code(&e);
                            }
                        }
                    }
                }
            }
            out.partitions.push(data);
        }
        response.topics.push(out);
    }
    response
}

/// High watermark, last stable offset and log start offset, read without the partition's lock.
fn fill(data: &mut PartitionData, partition: &Partition) {
    data.high_watermark = partition.high_watermark();
    data.last_stable_offset = partition.last_stable_offset();
    data.log_start_offset = partition.log_start_offset();
}
