//! Writing v2 batches, Kafka's `MemoryRecordsBuilder`.

use super::compression::Compression;
use super::error::BatchError;
use super::header::{
    Attributes, BatchHeader, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
use super::record::{encode_record, Header};

/// Builds one v2 batch: records are encoded as they are appended, compressed as a whole on
/// [`BatchBuilder::build`], and the CRC-32C is computed last.
///
/// Offsets are `base_offset + offset_delta`; [`BatchBuilder::append`] assigns consecutive deltas,
/// [`BatchBuilder::append_at`] takes explicit offsets (the cleaner keeps original offsets, leaving
/// gaps).
///
/// The timestamp type is CreateTime unless [`BatchBuilder::log_append_time`] is called. A batch
/// built without records still carries its codec (a compressed codec compresses an empty body);
/// the empty batch Kafka writes to keep a producer's state is [`empty_batch`].
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    compression: Compression,
    attributes: Attributes,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    log_append_time: Option<i64>,
    last_offset_delta: i32,
    last_offset_override: Option<i32>,
    /// Smallest delta the next record may take (i64: one past `i32::MAX` is representable).
    next_delta: i64,
    count: i32,
    records: Vec<u8>,
}

impl BatchBuilder {
    /// A builder for a batch starting at `base_offset` (brokers rewrite it on append).
    pub fn new(base_offset: i64, compression: Compression) -> Self {
        BatchBuilder {
            base_offset,
            compression,
            attributes: Attributes::default().with_compression(compression),
            partition_leader_epoch: 0,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            log_append_time: None,
            last_offset_delta: -1,
            last_offset_override: None,
            next_delta: 0,
            count: 0,
            records: Vec::new(),
        }
    }

    /// Sets idempotent-producer state: producer id, epoch and the sequence of the first record.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }
    /// Sets the partition leader epoch field.
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }
    /// Sets the transactional bit.
    pub fn transactional(mut self, on: bool) -> Self {
        self.attributes = self.attributes.with_transactional(on);
        self
    }
    /// Sets the control bit.
    pub fn control(mut self, on: bool) -> Self {
        self.attributes = self.attributes.with_control(on);
        self
    }
    /// Sets the delete horizon (KIP-534): stored in the base timestamp field, bit 6 set. Record
    /// timestamp deltas are then relative to the horizon, as in Kafka.
    pub fn delete_horizon(mut self, delete_horizon_ms: i64) -> Self {
        self.attributes = self.attributes.with_delete_horizon(true);
        self.base_timestamp = Some(delete_horizon_ms);
        self
    }
    /// Makes the batch LogAppendTime (attributes bit 3) with `log_append_time_ms` as its max
    /// timestamp, as Kafka's `MemoryRecordsBuilder` with `TimestampType.LOG_APPEND_TIME` and
    /// `logAppendTime`. Records are still encoded with the timestamps they are appended with;
    /// readers report the batch max timestamp for every record of a LogAppendTime batch.
    pub fn log_append_time(mut self, log_append_time_ms: i64) -> Self {
        self.attributes = self.attributes.with_log_append_time(true);
        self.log_append_time = Some(log_append_time_ms);
        self
    }
    /// Forces the last offset delta (at least the largest appended delta): a compacted batch keeps
    /// its original last offset so that the next fetch offset does not move backwards.
    /// May be called before appending; records must still stay within the delta.
    pub fn last_offset_delta(mut self, delta: i32) -> Self {
        self.last_offset_override = Some(delta);
        self
    }

    /// Appends a record at the next offset and returns that offset.
    ///
    /// # Panics
    /// When no offset is left: a record is already at delta `i32::MAX`.
    pub fn append(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> i64 {
        let offset = self.base_offset.saturating_add(self.next_delta);
        if let Err(e) = self.append_at(offset, timestamp, key, value, headers) {
            panic!("{e}");
        }
        offset
    }

    /// Appends a record with an explicit `offset`, which must be above every offset appended so far
    /// and at most `i32::MAX` above the base offset (offset deltas are i32).
    ///
    /// Errors: [`BatchError::InvalidRecord`] (with the base offset, the index the record would have
    /// had, and the offsets involved) when `offset` does not increase or is out of that range; the
    /// builder is left unchanged then.
    pub fn append_at(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<(), BatchError> {
        let invalid = |reason: String| BatchError::InvalidRecord {
            base_offset: self.base_offset,
            index: self.count as usize,
            reason,
        };
        let delta = match offset.checked_sub(self.base_offset) {
            Some(d) if d > i32::MAX as i64 || d < 0 => {
                return Err(invalid(format!(
                    "offset {offset} is outside the offsets the batch can hold, {}..={}",
                    self.base_offset,
                    self.base_offset.saturating_add(i32::MAX as i64)
                )))
            }
            Some(d) if d < self.next_delta => {
                return Err(invalid(format!(
                    "offset {offset} is not above the previous record's offset {}",
                    self.base_offset + self.next_delta - 1
                )))
            }
            Some(d) => d as i32,
            None => return Err(invalid(format!("offset {offset} is not representable relative to the base offset"))),
        };
        let base_ts = *self.base_timestamp.get_or_insert(timestamp);
        encode_record(&mut self.records, delta, timestamp.wrapping_sub(base_ts), key, value, headers);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self.last_offset_delta = self.last_offset_delta.max(delta);
        self.next_delta = delta as i64 + 1;
        self.count += 1;
        Ok(())
    }

    /// Number of records appended.
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether no record was appended.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Size of the batch if it were built uncompressed now.
    pub fn uncompressed_size(&self) -> usize {
        HEADER_SIZE + self.records.len()
    }

    /// Compresses the records, writes the header and CRC, and returns the batch bytes.
    ///
    /// Errors: [`BatchError::Compression`] when the codec fails.
    pub fn build(self) -> Result<Vec<u8>, BatchError> {
        let body = match self.compression {
            Compression::None => self.records,
            c => c.compress(&self.records).map_err(|source| BatchError::Compression { codec: c, source })?,
        };
        let mut out = vec![0u8; HEADER_SIZE];
        out.extend_from_slice(&body);
        let base_timestamp = self.base_timestamp.unwrap_or(NO_TIMESTAMP);
        let header = BatchHeader {
            base_offset: self.base_offset,
            batch_length: (out.len() - LOG_OVERHEAD) as i32,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC_V2,
            crc: 0,
            attributes: self.attributes,
            last_offset_delta: self.last_offset_delta.max(self.last_offset_override.unwrap_or(0)).max(0),
            base_timestamp,
            max_timestamp: match self.log_append_time {
                Some(t) => t,
                None if self.count == 0 => base_timestamp,
                None => self.max_timestamp,
            },
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records_count: self.count,
        };
        header.encode(&mut out);
        let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

/// Kafka's `DefaultRecordBatch.writeEmptyHeader`: the 61-byte batch without records that the
/// cleaner keeps in place of `original` when all its records are removed but its producer state must
/// survive (`BatchRetention.RETAIN_EMPTY`).
///
/// Kept from `original`: base offset, last offset delta, partition leader epoch, producer id, epoch
/// and base sequence, the timestamp type, transactional and control bits; the max timestamp is
/// `original.max_timestamp`. Written as Kafka does: codec none, no delete horizon bit, base
/// timestamp -1 (`NO_TIMESTAMP`), record count 0, the CRC computed.
pub fn empty_batch(original: &BatchHeader) -> Vec<u8> {
    let a = original.attributes;
    let header = BatchHeader {
        base_offset: original.base_offset,
        batch_length: (HEADER_SIZE - LOG_OVERHEAD) as i32,
        partition_leader_epoch: original.partition_leader_epoch,
        magic: MAGIC_V2,
        crc: 0,
        attributes: Attributes::default()
            .with_log_append_time(a.is_log_append_time())
            .with_transactional(a.is_transactional())
            .with_control(a.is_control()),
        last_offset_delta: original.last_offset_delta,
        base_timestamp: NO_TIMESTAMP,
        max_timestamp: original.max_timestamp,
        producer_id: original.producer_id,
        producer_epoch: original.producer_epoch,
        base_sequence: original.base_sequence,
        records_count: 0,
    };
    let mut out = vec![0u8; HEADER_SIZE];
    header.encode(&mut out);
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Rewrites the base offset of the v2 batch at the start of `batch` (the field is outside the CRC,
/// so the CRC stays valid), as a broker does when it assigns offsets on append.
///
/// # Panics
/// When `batch` is shorter than 8 bytes.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Rewrites the partition leader epoch (outside the CRC), as the leader stamps it on append.
///
/// # Panics
/// When `batch` is shorter than 16 bytes.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[12..16].copy_from_slice(&epoch.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::record_batch::RecordBatch;

    #[test]
    fn build_then_parse_round_trip() {
        let mut b = BatchBuilder::new(100, Compression::None).producer(7, 1, 42);
        b.append(1_000, Some(b"k1"), Some(b"v1"), &[]);
        b.append(1_005, None, None, &[Header { key: b"h", value: Some(b"x") }]);
        let bytes = b.build().unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        batch.verify_crc().unwrap();
        let h = batch.header();
        assert_eq!((h.base_offset, h.last_offset(), h.records_count), (100, 101, 2));
        assert_eq!((h.base_timestamp, h.max_timestamp), (1_000, 1_005));
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (7, 1, 42));
        let recs = batch.records().unwrap();
        let recs = recs.to_vec().unwrap();
        assert_eq!(recs[0].key, Some(&b"k1"[..]));
        assert_eq!(recs[1].offset, 101);
        assert_eq!(recs[1].timestamp, 1_005);
        assert_eq!(recs[1].value, None);
        assert_eq!(recs[1].headers[0].value, Some(&b"x"[..]));
    }

    #[test]
    fn append_at_refuses_offsets_that_do_not_increase() {
        let mut b = BatchBuilder::new(10, Compression::None);
        b.append_at(12, 1, Some(b"a"), None, &[]).unwrap();
        for bad in [12, 11, 9, i64::MIN, 10 + i32::MAX as i64 + 1] {
            let e = b.append_at(bad, 1, Some(b"b"), None, &[]).unwrap_err();
            assert!(matches!(e, BatchError::InvalidRecord { base_offset: 10, index: 1, .. }), "{bad}: {e}");
        }
        b.append_at(10 + i32::MAX as i64, 2, Some(b"c"), None, &[]).unwrap();
        let bytes = b.build().unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert_eq!((batch.header().records_count, batch.last_offset()), (2, 10 + i32::MAX as i64));
    }

    #[test]
    fn log_append_time_sets_bit_3_and_max_timestamp() {
        let mut b = BatchBuilder::new(0, Compression::Lz4).log_append_time(9_000);
        b.append(5_000, Some(b"k"), Some(b"v"), &[]);
        let bytes = b.build().unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        batch.verify_crc().unwrap();
        let h = batch.header();
        assert!(h.attributes.is_log_append_time());
        assert_eq!((h.base_timestamp, h.max_timestamp), (5_000, 9_000));
        assert_eq!(batch.records().unwrap().to_vec().unwrap()[0].timestamp, 9_000);
    }

    #[test]
    fn empty_batch_is_kafkas_write_empty_header() {
        let mut b = BatchBuilder::new(40, Compression::Zstd)
            .producer(7, 3, 11)
            .partition_leader_epoch(5)
            .transactional(true)
            .delete_horizon(77)
            .log_append_time(2_000)
            .last_offset_delta(4);
        b.append_at(41, 1_000, Some(b"k"), None, &[]).unwrap();
        let original = *RecordBatch::parse(&b.build().unwrap()).unwrap().header();
        let bytes = empty_batch(&original);
        assert_eq!(bytes.len(), HEADER_SIZE);
        let batch = RecordBatch::parse(&bytes).unwrap();
        batch.verify_crc().unwrap();
        let h = batch.header();
        assert_eq!((h.base_offset, h.last_offset(), h.records_count), (40, 44, 0));
        assert_eq!((h.base_timestamp, h.max_timestamp), (NO_TIMESTAMP, 2_000));
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch), (7, 3, 11, 5));
        let a = h.attributes;
        assert_eq!(a.codec_id(), 0);
        assert!(a.is_transactional() && a.is_log_append_time() && !a.is_control() && !a.has_delete_horizon());
        assert!(batch.records().unwrap().to_vec().unwrap().is_empty());
    }

    #[test]
    fn base_offset_and_epoch_are_outside_the_crc() {
        let mut b = BatchBuilder::new(0, Compression::None);
        b.append(1, None, Some(b"v"), &[]);
        let mut bytes = b.build().unwrap();
        set_base_offset(&mut bytes, 1 << 40);
        set_partition_leader_epoch(&mut bytes, 9);
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert!(batch.is_crc_valid());
        assert_eq!(batch.base_offset(), 1 << 40);
        assert_eq!(batch.header().partition_leader_epoch, 9);
    }
}
