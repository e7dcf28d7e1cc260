//! Produce (API key 0): append each partition's record set to its log.
//!
//! `acks` 1 and -1 are the same on one node: the response follows the append to the page cache
//! (Kafka's `ReplicaManager.appendRecords` with an ISR of one). `acks` 0 sends no response; if
//! any partition failed, the connection is closed instead, so the client notices (Kafka's
//! `KafkaApis.handleProduceRequest` does the same). Other `acks` values: `INVALID_REQUIRED_ACKS`.
//!
//! Each partition's record set must hold exactly one magic-2 batch (Kafka's
//! `ProduceRequest.validateRecords`: `INVALID_RECORD` otherwise; bytes after the batch that do not
//! make a whole one are dropped, as `UnifiedLog.trimInvalidBytes` drops them). Each batch's size
//! is checked against the topic's `max.message.bytes` (`MESSAGE_TOO_LARGE`, Kafka's
//! `LogValidator`), then [`Partition::validate`] checks every batch (length, magic, CRC,
//! decompression and the record walk), all with no lock held; finally
//! [`Partition::append_validated`] assigns offsets from the log end offset and writes, holding only
//! that partition's lock. Errors map to codes in [`errors::log_error_code`]. Produce does not create
//! topics: an unknown partition is `UNKNOWN_TOPIC_OR_PARTITION`. v13 names topics by topic id
//! (KIP-516), resolved through `partition.metadata`; an unknown id is `UNKNOWN_TOPIC_ID`.
//!
//! Transactional produce (KIP-98): a transactional batch needs the request's `transactional_id`
//! (without one it is `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, as Kafka answers
//! `hasTransactionalRecords` with no authorized id); its producer id and epoch must be the id's
//! current ones and its partition added to the ongoing transaction, checked with the transaction
//! coordinator before the append (KIP-890 part 1's verification:
//! [`verify_produce`](crate::broker::txn_coordinator::handlers::verify_produce);
//! `INVALID_TXN_STATE` for a partition not added); then
//! [`Partition::append_validated_transactional`] opens the producer's transaction in the
//! partition (the last stable offset stays at its first offset until the coordinator's marker).
//! Control batches are refused (`INVALID_RECORD`: only the coordinator writes markers). The
//! request holds its transactional id's append lock from the verification to the append, so the
//! transaction's markers never land between them (Kafka's KIP-890 verification guard closes the
//! same window). The coordinators' topics (`__consumer_offsets`, `__transaction_state`) are
//! never written by a Produce: `INVALID_TOPIC_EXCEPTION`, as Kafka answers.
//!
//! Idempotent produce (batches with a producer id, from InitProducerId): the log checks each
//! producer's epoch and sequence before writing (`OUT_OF_ORDER_SEQUENCE_NUMBER`,
//! `INVALID_PRODUCER_EPOCH`), and a retried batch is answered `NONE` with its ORIGINAL base
//! offset without being stored twice (see [`crate::log::producer_state`]).

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use std::sync::Arc;

use crate::broker::errors;
use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::log::batch::{BatchBoundaries, BatchHeader};
use crate::log::config::{LogConfig, TimestampType};
use crate::log::partition::{now_ms, ValidatedRecords};
use crate::log::Partition;

/// What to do after a produce.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send this response (acks 1 / -1, or an invalid acks value).
    Respond(ProduceResponse),
    /// acks=0 and every append succeeded: send nothing.
    NoResponse,
    /// acks=0 and an append failed: close the connection.
    Close,
}

/// One partition's record set, validated and ready to append (and whether it is a verified
/// transactional batch), or its error.
type Prepared = Result<(Arc<Partition>, Arc<LogConfig>, ValidatedRecords, bool), (i16, String)>;

/// The request's transactional id, for the verification of transactional batches.
#[derive(Clone, Copy)]
struct Txn<'a> {
    shared: &'a Shared,
    transactional_id: Option<&'a str>,
}

/// Appends every partition's records and builds the response (topics and partitions in request
/// order). `base_offset` is the offset given to the first record, `log_append_time_ms` -1
/// unless the topic uses `LogAppendTime`.
///
/// Every partition's records are validated first, with no lock held (CRC-32C, decompression, the
/// record walk: [`Partition::validate`]); then each is appended holding only its own partition's
/// lock, so a slow validation (a decompression bomb) delays nobody else, and appends to other
/// partitions, from other connections, run in parallel.
pub(crate) fn handle(shared: &Shared, request: &ProduceRequest, version: i16) -> Outcome {
    let acks = request.acks;
    let fixed_error =
        if !(-1..=1).contains(&acks) { Some((errors::INVALID_REQUIRED_ACKS, "acks must be 0, 1 or -1")) } else { None };
    let now = now_ms();
    let logs = shared.logs();
    // A transactional request holds its id's append lock from the verification to the append,
    // so the transaction's markers cannot land in between (`TxnCoordinator::append_lock`).
    let _txn_appends = request.transactional_id.as_ref().map(|id| {
        shared.txn_coordinator().append_lock(id.0.as_str()).read().unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    // Phase 1, no lock held: resolve and validate every partition's records.
    let prepared: Vec<(String, Vec<Prepared>)> = request
        .topic_data
        .iter()
        .map(|topic| {
            // KIP-516: v13 names topics by id; an unknown id is UNKNOWN_TOPIC_ID (KafkaApis).
            let resolved = crate::broker::topics::resolve(logs, topic.name.0.as_str(), topic.topic_id, version >= 13);
            let name = resolved.clone().unwrap_or_default();
            let partitions = topic
                .partition_data
                .iter()
                .map(|data| {
                    if let Some((code, message)) = fixed_error {
                        return Err((code, message.to_string()));
                    }
                    // Retriable, as Kafka answers a partition it no longer leads: the client
                    // retries until the broker is back, instead of failing the record for good.
                    let shutting_down = || (errors::NOT_LEADER_OR_FOLLOWER, "broker is shutting down".to_string());
                    let Some(logs) = logs else { return Err(shutting_down()) };
                    // Kafka's `ReplicaManager.appendToLocalLog`: clients never write the
                    // coordinators' topics.
                    if crate::broker::topics::INTERNAL_TOPICS.contains(&name.as_str()) {
                        return Err((
                            errors::INVALID_TOPIC_EXCEPTION,
                            format!("cannot append to internal topic {name}"),
                        ));
                    }
                    let Some(partition) = logs.partition(&name, data.index) else {
                        return Err(if logs.is_shut_down() {
                            shutting_down()
                        } else if resolved.is_none() {
                            (errors::UNKNOWN_TOPIC_ID, format!("topic id {} is not hosted here", topic.topic_id))
                        } else {
                            (errors::UNKNOWN_TOPIC_OR_PARTITION, format!("{name}-{} is not hosted here", data.index))
                        });
                    };
                    let txn = Txn { shared, transactional_id: request.transactional_id.as_ref().map(|t| t.0.as_str()) };
                    validate(partition, &name, data.index, txn, data.records.as_deref().unwrap_or(&[]), now)
                })
                .collect();
            (name, partitions)
        })
        .collect();
    // Phase 2: each append holds its own partition's lock only.
    let mut any_error = false;
    // Partitions appended to: their waiting fetches are checked after the log lock is released.
    let mut appended = Vec::new();
    let mut topics = Vec::with_capacity(request.topic_data.len());
    for (topic, (name, partitions)) in request.topic_data.iter().zip(prepared) {
        let mut responses = Vec::with_capacity(partitions.len());
        for (data, prepared) in topic.partition_data.iter().zip(partitions) {
            let mut resp = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let result = prepared.and_then(|(partition, config, records, transactional)| {
                append(&partition, &config, records, transactional, now)
            });
            match result {
                Ok((base_offset, log_append_time_ms, log_start_offset)) => {
                    appended.push(WatchKey::Partition(name.to_string(), data.index));
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
            responses.push(resp);
        }
        let topic_response =
            TopicProduceResponse::default().with_name(topic.name.clone()).with_topic_id(topic.topic_id);
        topics.push(topic_response.with_partition_responses(responses));
    }
    // Long polling: the fetches waiting on these partitions (only those) are tried again.
    for key in &appended {
        shared.purgatory().check_and_complete(key);
    }
    match acks {
        0 if any_error => Outcome::Close,
        0 => Outcome::NoResponse,
        _ => Outcome::Respond(ProduceResponse::default().with_responses(topics)),
    }
}

/// Validates one record set for `partition` (`topic`-`index`) with no lock held: Kafka's
/// `ProduceRequest.validateRecords` ([`validate_record_set`]), `max.message.bytes`
/// (`MESSAGE_TOO_LARGE`), a transactional batch verified with the transaction coordinator (see
/// the module docs), then the log's checks ([`Partition::validate`]: CRC, decompression, record
/// walk, LogValidator rules, LogAppendTime stamping).
fn validate(partition: Arc<Partition>, topic: &str, index: i32, txn: Txn<'_>, records: &[u8], now: i64) -> Prepared {
    let records = validate_record_set(records)?;
    let config = partition.config();
    let max = i64::from(config.max_message_bytes);
    let mut transactional = false;
    for batch in BatchBoundaries::new(records) {
        if batch.size as i64 > max {
            return Err((
                errors::MESSAGE_TOO_LARGE,
                format!("batch of {} bytes exceeds max.message.bytes={max}", batch.size),
            ));
        }
        // Transactional batches need a transactional id (Kafka's `KafkaApis.handleProduceRequest`:
        // `hasTransactionalRecords` without an authorized transactional id is
        // `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`) and a transaction of that id holding the
        // partition. Checked here so that they never reach the log unverified.
        let Ok(header) = BatchHeader::parse(&records[batch.position..batch.position + batch.size]) else {
            continue;
        };
        if header.attributes.is_transactional() && !header.attributes.is_control() {
            let Some(id) = txn.transactional_id else {
                return Err((
                    errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "a transactional batch needs the request's transactional id".to_string(),
                ));
            };
            crate::broker::txn_coordinator::handlers::verify_produce(
                txn.shared,
                id,
                header.producer_id,
                header.producer_epoch,
                topic,
                index,
            )?;
            transactional = true;
        }
    }
    let validated = partition.validate(records, now).map_err(|e| (errors::log_error_code(&e), e.to_string()))?;
    Ok((partition, config, validated, transactional))
}

/// Appends one validated record set under its partition's lock (a verified transactional one
/// with [`Partition::append_validated_transactional`]): `(base_offset,
/// log_append_time_ms, log_start_offset)` or `(error code, message)`.
fn append(
    partition: &Partition,
    config: &LogConfig,
    records: ValidatedRecords,
    transactional: bool,
    now: i64,
) -> Result<(i64, i64, i64), (i16, String)> {
    let append_time = config.message_timestamp_type == TimestampType::LogAppendTime;
    let appended = if transactional {
        partition.append_validated_transactional(records, now)
    } else {
        partition.append_validated(records, now)
    };
    match appended {
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

/// Kafka's `ProduceRequest.validateRecords` for Produce v3+ (run by `KafkaApis.handleProduceRequest`
/// before the append): the record set must hold exactly one batch, of magic 2; otherwise
/// `INVALID_RECORD` (its `InvalidRecordException`). Batches are walked as Kafka's
/// `ByteBufferLogInputStream` walks them: a length below 14 (the smallest legacy record) or a
/// magic above 2 is `CORRUPT_MESSAGE` (`CorruptRecordException`); a batch that extends past the end
/// of the set is not a batch (so a set whose only batch claims more bytes than were sent has none).
///
/// Returns the batch's bytes: bytes after it that do not make a whole batch are dropped, as
/// Kafka's `UnifiedLog.trimInvalidBytes` drops them.
fn validate_record_set(records: &[u8]) -> Result<&[u8], (i16, String)> {
    /// `ByteBufferLogInputStream.nextBatchSize` + `nextBatch`: the size of the batch at the start
    /// of `rest` (with its 12-byte log overhead) and its magic, `None` when there is none.
    fn next_batch(rest: &[u8]) -> Result<Option<(usize, i8)>, (i16, String)> {
        let Some(head) = rest.first_chunk::<12>() else { return Ok(None) };
        let size = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        if size < 14 {
            return Err((
                errors::CORRUPT_MESSAGE,
                format!("record size {size} is less than the minimum record overhead (14)"),
            ));
        }
        let Some(&magic) = rest.get(16) else { return Ok(None) };
        let magic = magic as i8;
        if !(0..=2).contains(&magic) {
            return Err((errors::CORRUPT_MESSAGE, format!("invalid magic found in record: {magic}")));
        }
        let total = size as usize + 12;
        Ok((rest.len() >= total).then_some((total, magic)))
    }
    let invalid = |what: &str| (errors::INVALID_RECORD, format!("Produce requests with version 3 and above {what}"));
    let Some((size, magic)) = next_batch(records)? else {
        return Err(invalid("must have at least one record batch per partition"));
    };
    if magic != 2 {
        return Err(invalid("are only allowed to contain record batches with magic version 2"));
    }
    if next_batch(&records[size..])?.is_some() {
        return Err(invalid("are only allowed to contain exactly one record batch per partition"));
    }
    Ok(&records[..size])
}
