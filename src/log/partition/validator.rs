//! Checks on the record batches of an append before anything reaches a segment, Kafka's
//! `LogValidator` (`validateMessagesAndAssignOffsets`) and the batch checks of
//! `UnifiedLog.analyzeAndValidateRecords`: a client's batches are validated and get their offsets,
//! leader epoch and (for `message.timestamp.type=LogAppendTime`) timestamp here; a replica's (or a
//! copy's) batches keep their offsets and are only checked. Producer sequence and epoch checks are
//! the producer state's ([`ProducerStateManager::check_append`](crate::log::producer_state::ProducerStateManager::check_append)).

use std::path::Path;

use crate::log::batch::builder::{set_base_offset, set_partition_leader_epoch};
use crate::log::batch::{
    BatchBoundaries, BatchError, BatchHeader, RecordBatch, RecordStream, ATTRIBUTES_OFFSET, CRC_OFFSET,
    DEFAULT_MAX_UNCOMPRESSED,
};
use crate::log::config::{LogConfig, TimestampType};
use crate::log::error::LogError;

/// A client's record set that passed every check that does not depend on the partition's state
/// ([`validate_client_records`]): the bytes as they will be written, except for the base offsets
/// and the partition leader epoch, which the leader stamps under the partition's lock
/// ([`PartitionLog::append_validated`](super::PartitionLog::append_validated); both lie outside
/// the CRC, so stamping them needs no CRC pass).
///
/// Built with no lock held: a Produce validates (CRC-32C, decompression, the record walk) before
/// it takes its partition's lock, as Kafka's `UnifiedLog.append` runs `analyzeAndValidateRecords`
/// and the `LogValidator` record checks before `lock synchronized`.
#[derive(Debug)]
pub struct ValidatedRecords {
    /// The record set, LogAppendTime already stamped (CRC recomputed) where the topic asks for it.
    pub(super) bytes: Vec<u8>,
    /// `(position, size)` of each batch in `bytes`.
    pub(super) batches: Vec<(usize, usize)>,
    /// Each batch's header as it will be written (base offset and leader epoch filled in when the
    /// offsets are assigned).
    pub(super) headers: Vec<BatchHeader>,
}

impl ValidatedRecords {
    /// Bytes of the record set.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Number of batches.
    pub fn batch_count(&self) -> usize {
        self.batches.len()
    }
}

/// Validates the v2 batches of a client's append (`records`: one or more whole batches, a produce
/// request's record set) as a leader does before it takes the partition's lock (Kafka's
/// `UnifiedLog.analyzeAndValidateRecords` and the record checks of `LogValidator`): each batch's
/// length, magic and CRC-32C, the client rules of [`validate_client_batch`] (records decompressed
/// and walked), and for `message.timestamp.type=LogAppendTime` the batch timestamp set to
/// `now_ms` (CRC recomputed). Every batch is checked before any is returned. Reads only `config`
/// (`cleanup.policy`, `message.timestamp.type`); `dir` names the partition in errors.
///
/// The offsets are assigned later, under the partition's lock ([`assign_offsets`]).
///
/// Errors: [`LogError::Batch`] naming `dir` and the batch's position for an invalid batch;
/// [`LogError::InvalidAppend`] for an empty append.
pub fn validate_client_records(
    dir: &Path,
    records: &[u8],
    config: &LogConfig,
    now_ms: i64,
) -> Result<ValidatedRecords, LogError> {
    let mut owned = records.to_vec();
    let mut positions = Vec::new();
    for b in BatchBoundaries::new(records) {
        positions.push((b.position, b.size));
    }
    let walked: usize = positions.iter().map(|p| p.1).sum();
    if walked != records.len() || positions.is_empty() {
        return Err(invalid_batch_at(dir, records, walked));
    }
    let append_time = config.message_timestamp_type == TimestampType::LogAppendTime;
    let mut headers = Vec::with_capacity(positions.len());
    for &(pos, size) in &positions {
        let batch = &mut owned[pos..pos + size];
        let parsed = RecordBatch::parse(batch).map_err(|e| batch_error(dir, pos, e))?;
        parsed.verify_crc().map_err(|e| batch_error(dir, pos, e))?;
        validate_client_batch(&parsed, config.is_compact()).map_err(|e| batch_error(dir, pos, e))?;
        let mut header = *parsed.header();
        if append_time {
            header.max_timestamp = now_ms;
            set_log_append_time(batch, now_ms).map_err(|e| batch_error(dir, pos, e))?;
        }
        headers.push(header);
    }
    Ok(ValidatedRecords { bytes: owned, batches: positions, headers })
}

/// Assigns the offsets of validated records from `log_end_offset`, as the leader does under the
/// partition's lock: each base offset is rewritten and `leader_epoch` stamped (both outside the
/// CRC), after checking that every batch's next offset fits an `i64`. Nothing is changed when a
/// batch does not fit.
///
/// Errors: [`LogError::Batch`] ([`BatchError::InvalidOffsetRange`]) when the offsets would
/// overflow.
pub(super) fn assign_offsets(
    dir: &Path,
    records: &mut ValidatedRecords,
    log_end_offset: i64,
    leader_epoch: i32,
) -> Result<(), LogError> {
    let mut next = log_end_offset;
    let mut bases = Vec::with_capacity(records.headers.len());
    for (&(pos, _), header) in records.batches.iter().zip(&records.headers) {
        // `next` is the log end offset: the batch must end where a next offset still exists.
        let after =
            next.checked_add(header.last_offset_delta as i64).and_then(|l| l.checked_add(1)).ok_or_else(|| {
                batch_error(
                    dir,
                    pos,
                    BatchError::InvalidOffsetRange {
                        base_offset: next,
                        last_offset_delta: header.last_offset_delta,
                        reason: "assigned at the log end offset, the batch's next offset would overflow i64",
                    },
                )
            })?;
        bases.push(next);
        next = after;
    }
    for ((&(pos, size), header), base) in records.batches.iter().zip(&mut records.headers).zip(bases) {
        let batch = &mut records.bytes[pos..pos + size];
        set_base_offset(batch, base);
        set_partition_leader_epoch(batch, leader_epoch);
        header.base_offset = base;
        header.partition_leader_epoch = leader_epoch;
    }
    Ok(())
}

/// Checks the v2 batches of an append that keeps their offsets (Kafka's
/// `AppendOrigin.REPLICATION`): length, magic, CRC, a record count that fits the offset range, and
/// offsets starting at or above `log_end_offset` and increasing. Returns the headers.
///
/// Errors: [`LogError::Batch`] for an invalid batch; [`LogError::InvalidAppend`] when offsets go
/// backwards or the append is empty.
pub(super) fn validate_with_offsets(
    dir: &Path,
    records: &[u8],
    log_end_offset: i64,
) -> Result<Vec<BatchHeader>, LogError> {
    let mut expected_min = log_end_offset;
    let mut walked = 0;
    let mut headers = Vec::new();
    for b in BatchBoundaries::new(records) {
        let parsed = RecordBatch::parse(&records[b.position..b.position + b.size])
            .map_err(|e| batch_error(dir, b.position, e))?;
        parsed.verify_crc().map_err(|e| batch_error(dir, b.position, e))?;
        let h = parsed.header();
        if h.last_offset_delta < 0 || h.records_count < 0 || h.records_count as i64 > h.last_offset_delta as i64 + 1 {
            return Err(batch_error(
                dir,
                b.position,
                BatchError::InvalidRecord {
                    base_offset: h.base_offset,
                    index: 0,
                    reason: format!("{} records cannot fit last offset delta {}", h.records_count, h.last_offset_delta),
                },
            ));
        }
        if parsed.base_offset() < expected_min {
            return Err(LogError::InvalidAppend {
                path: dir.to_path_buf(),
                reason: format!("batch base offset {} is below {expected_min}", parsed.base_offset()),
            });
        }
        expected_min = parsed.next_offset();
        walked += b.size;
        headers.push(*h);
    }
    if walked != records.len() || walked == 0 {
        return Err(invalid_batch_at(dir, records, walked));
    }
    Ok(headers)
}

/// Kafka's `LogValidator` checks for a batch from a client: no control batches, a record count
/// that matches the offset range, a producer id on a transactional batch, a sequence on a batch
/// with a producer id, and records at offset deltas 0, 1, 2, ... (decompressing when
/// needed); in a compacted topic (`compact`) every record has a key.
fn validate_client_batch(batch: &RecordBatch<'_>, compact: bool) -> Result<(), BatchError> {
    let h = batch.header();
    let invalid =
        |index: usize, reason: String| BatchError::InvalidRecord { base_offset: h.base_offset, index, reason };
    if h.attributes.is_control() {
        return Err(invalid(0, "clients are not allowed to write control batches".into()));
    }
    if h.last_offset_delta < 0 || h.records_count as i64 != h.last_offset_delta as i64 + 1 {
        return Err(invalid(
            0,
            format!(
                "record count {} does not match last offset delta {} (must be delta + 1)",
                h.records_count, h.last_offset_delta
            ),
        ));
    }
    if h.attributes.is_transactional() && h.producer_id < 0 {
        // Kafka's `MemoryRecordsBuilder`: "Cannot write transactional messages without a valid
        // producer ID".
        return Err(invalid(0, format!("a transactional batch without a producer id ({})", h.producer_id)));
    }
    if h.producer_id >= 0 && h.base_sequence < 0 {
        return Err(invalid(
            0,
            format!("invalid sequence number {} for producer id {}", h.base_sequence, h.producer_id),
        ));
    }
    // Streamed, in bounded memory however much the batch inflates (Kafka's skipKeyValueIterator).
    let remaining = RecordStream::new(batch, DEFAULT_MAX_UNCOMPRESSED)?.walk(|i, rec| {
        // Record offsets are checked on decoding (base offset + delta fits), so this subtraction
        // gives back the delta exactly.
        let delta = rec.offset - h.base_offset;
        if delta != i as i64 {
            return Err(invalid(i, format!("offset delta {delta} where {i} was expected")));
        }
        if compact && !rec.has_key() {
            return Err(invalid(i, "a compacted topic cannot accept a record without a key".into()));
        }
        Ok(())
    })?;
    if remaining != 0 {
        return Err(invalid(
            h.records_count.max(0) as usize,
            format!("{remaining} bytes remain after the declared {} records", h.records_count),
        ));
    }
    Ok(())
}

/// A batch's error as a [`LogError::Batch`] naming the partition directory and the batch's
/// position in the appended records.
pub(super) fn batch_error(dir: &Path, position: usize, source: BatchError) -> LogError {
    LogError::Batch { path: dir.to_path_buf(), position: position as u64, source }
}

fn invalid_batch_at(dir: &Path, records: &[u8], position: usize) -> LogError {
    if records.is_empty() {
        return LogError::InvalidAppend { path: dir.to_path_buf(), reason: "empty append".into() };
    }
    let source = match RecordBatch::parse(&records[position..]) {
        Err(e) => e,
        Ok(_) => BatchError::Truncated { needed: records.len() + 1, available: records.len() },
    };
    batch_error(dir, position, source)
}

/// Marks a v2 batch as LogAppendTime with `now_ms` as its max timestamp (Kafka's
/// `setMaxTimestamp(LOG_APPEND_TIME, now)`), recomputing the CRC.
fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<(), BatchError> {
    let mut h = BatchHeader::parse(batch)?;
    h.attributes = h.attributes.with_log_append_time(true);
    h.max_timestamp = now_ms;
    h.encode(batch);
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}
