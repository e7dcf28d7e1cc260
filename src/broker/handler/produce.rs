//! Produce (API key 0): append each partition's record set to its log.
//!
//! `acks` 1 and -1 are the same on one node: the response follows the append to the page cache
//! (Kafka's `ReplicaManager.appendRecords` with an ISR of one). `acks` 0 sends no response; if
//! any partition failed, the connection is closed instead, so the client notices (Kafka's
//! `KafkaApis.handleProduceRequest` does the same). Other `acks` values: `INVALID_REQUIRED_ACKS`.
//!
//! [`PartitionLog::append`](crate::log::PartitionLog::append) validates every batch (length,
//! magic, CRC) and assigns offsets from the log end offset; before it, each batch's size is
//! checked against the topic's `max.message.bytes` (`MESSAGE_TOO_LARGE`, Kafka's
//! `LogValidator`). Errors map to codes in [`errors::log_error_code`]. Produce does not create
//! topics: an unknown partition is `UNKNOWN_TOPIC_OR_PARTITION`. v13 names topics by topic id
//! (KIP-516), resolved through `partition.metadata`; an unknown id is `UNKNOWN_TOPIC_ID`.
//! Transactional produce is refused with `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (transactions are out of scope).
//!
//! Idempotent produce (batches with a producer id, from InitProducerId): the log checks each
//! producer's epoch and sequence before writing (`OUT_OF_ORDER_SEQUENCE_NUMBER`,
//! `INVALID_PRODUCER_EPOCH`), and a retried batch is answered `NONE` with its ORIGINAL base
//! offset without being stored twice (see [`crate::log::producer_state`]).

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{errors, Shared};
use crate::log::batch::{BatchBoundaries, BatchHeader};
use crate::log::config::TimestampType;
use crate::log::partition::now_ms;
use crate::log::PartitionLog;

/// What to do after a produce.
#[derive(Debug)]
pub enum Outcome {
    /// Send this response (acks 1 / -1, or an invalid acks value).
    Respond(ProduceResponse),
    /// acks=0 and every append succeeded: send nothing.
    NoResponse,
    /// acks=0 and an append failed: close the connection.
    Close,
}

/// Appends every partition's records and builds the response (topics and partitions in request
/// order). `base_offset` is the offset given to the first record, `log_append_time_ms` -1
/// unless the topic uses `LogAppendTime`.
pub fn handle(shared: &Shared, request: &ProduceRequest, version: i16) -> Outcome {
    let acks = request.acks;
    let fixed_error = if !(-1..=1).contains(&acks) {
        Some((errors::INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1"))
    } else if request.transactional_id.is_some() {
        Some((errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported by fetchbench"))
    } else {
        None
    };
    let now = now_ms();
    let mut any_error = false;
    let mut appended = false;
    let mut topics = Vec::with_capacity(request.topic_data.len());
    let mut guard = shared.logs();
    for topic in &request.topic_data {
        // KIP-516: v13 names topics by id; an unknown id is UNKNOWN_TOPIC_ID (KafkaApis).
        let resolved =
            crate::broker::topics::resolve(guard.as_ref(), topic.name.0.as_str(), topic.topic_id, version >= 13);
        let name = resolved.as_deref().unwrap_or_default();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in &topic.partition_data {
            let mut resp = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let result = match (fixed_error, guard.as_mut()) {
                (Some((code, message)), _) => Err((code, message.to_string())),
                (None, None) => Err((errors::UNKNOWN_SERVER_ERROR, "broker is shutting down".to_string())),
                (None, Some(logs)) => match logs.log_mut(name, data.index) {
                    None if resolved.is_none() => {
                        Err((errors::UNKNOWN_TOPIC_ID, format!("topic id {} is not hosted here", topic.topic_id)))
                    }
                    None => {
                        Err((errors::UNKNOWN_TOPIC_OR_PARTITION, format!("{name}-{} is not hosted here", data.index)))
                    }
                    Some(log) => append(log, data.records.as_deref().unwrap_or(&[]), now),
                },
            };
            match result {
                Ok((base_offset, log_append_time_ms, log_start_offset)) => {
                    appended = true;
                    resp = resp
                        .with_base_offset(base_offset)
                        .with_log_append_time_ms(log_append_time_ms)
                        .with_log_start_offset(log_start_offset);
                }
                Err((code, message)) => {
                    any_error = true;
                    tracing::debug!("produce to {name}-{}: error {code}: {message}", data.index);
                    resp = resp.with_error_code(code).with_error_message(Some(StrBytes::from_string(message)));
                }
            }
            partitions.push(resp);
        }
        let topic_response =
            TopicProduceResponse::default().with_name(topic.name.clone()).with_topic_id(topic.topic_id);
        topics.push(topic_response.with_partition_responses(partitions));
    }
    drop(guard);
    if appended {
        // Wake parked fetches at once (long polling), after the log lock is released.
        shared.fetch_wakeup().notify();
    }
    match acks {
        0 if any_error => Outcome::Close,
        0 => Outcome::NoResponse,
        _ => Outcome::Respond(ProduceResponse::default().with_responses(topics)),
    }
}

/// Appends one record set: `(base_offset, log_append_time_ms, log_start_offset)` or
/// `(error code, message)`.
fn append(log: &mut PartitionLog, records: &[u8], now: i64) -> Result<(i64, i64, i64), (i16, String)> {
    let max = i64::from(log.config().max_message_bytes);
    for batch in BatchBoundaries::new(records) {
        if batch.size as i64 > max {
            return Err((
                errors::MESSAGE_TOO_LARGE,
                format!("batch of {} bytes exceeds max.message.bytes={max}", batch.size),
            ));
        }
        // Transactional batches need a transactional id, and transactions are not supported
        // (Kafka's `KafkaApis.handleProduceRequest`: `hasTransactionalRecords` without an
        // authorized transactional id is `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`). Checked here so
        // that they never reach the idempotent producer state as plain data.
        let header = BatchHeader::parse(&records[batch.position..batch.position + batch.size]);
        if header.is_ok_and(|h| h.attributes.is_transactional()) {
            return Err((
                errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactional batches are not supported by fetchbench".to_string(),
            ));
        }
    }
    let append_time = log.config().message_timestamp_type == TimestampType::LogAppendTime;
    match log.append(records, now) {
        // A producer's retry of batches already written (idempotence): `NONE` with the ORIGINAL
        // base offset, nothing appended (Kafka's `UnifiedLog.append` duplicate path). For a
        // LogAppendTime topic the original append time is the original batch's max timestamp.
        // (Kafka also reports that timestamp as log_append_time for CreateTime topics; clients
        // would then show it for every record, so -1 is kept there.)
        Ok(info) if info.duplicate => {
            Ok((info.first_offset, if append_time { info.max_timestamp } else { -1 }, info.log_start_offset))
        }
        Ok(info) => Ok((info.first_offset, if append_time { now } else { -1 }, info.log_start_offset)),
        Err(e) => Err((errors::log_error_code(&e), e.to_string())),
    }
}
