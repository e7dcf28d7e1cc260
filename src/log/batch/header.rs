//! The fixed header of a RecordBatch v2 (magic 2), Kafka's `DefaultRecordBatch` header fields:
//! the layout constants, [`Attributes`], [`BatchHeader`] and the offset-range check.
//!
//! ## Layout (all integers big-endian)
//!
//! ```text
//! offset  size  field
//!  0       8    base offset (i64)
//!  8       4    batch length (i32): bytes after this field = total size - 12
//! 12       4    partition leader epoch (i32)
//! 16       1    magic (i8) = 2
//! 17       4    CRC-32C (u32) over bytes 21..end (attributes to the end of the batch)
//! 21       2    attributes (i16): bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
//!               4 transactional, 5 control, 6 delete horizon set (KIP-534)
//! 23       4    last offset delta (i32)
//! 27       8    base timestamp (i64 ms); the delete horizon when bit 6 is set
//! 35       8    max timestamp (i64 ms)
//! 43       8    producer id (i64, -1 = none)
//! 51       2    producer epoch (i16)
//! 53       4    base sequence (i32)
//! 57       4    record count (i32)
//! 61       ..   records, compressed as a whole when the codec is not none
//! ```
//!
//! The next offset after a batch is `base_offset + last_offset_delta + 1`, even when compaction
//! removed records from it or it holds none.
//!
//! ## Untrusted headers
//!
//! Every field comes from disk or the wire, so every computation on them is checked. The offset
//! range is validated once, where the header is parsed ([`BatchHeader::parse`]): a header whose
//! `last_offset_delta` is negative or whose next offset (`base_offset + last_offset_delta + 1`)
//! does not fit an `i64` is [`BatchError::InvalidOffsetRange`]. Kafka never writes such a batch
//! (`DefaultRecordBatch` computes the delta from offsets it assigned) and Java would wrap silently;
//! here the batch is corrupt: segment recovery cuts the log there, a Produce request carrying it is
//! refused, a consumer stops at it. Because a parsed header is valid, [`BatchHeader::last_offset`]
//! and [`BatchHeader::next_offset`] stay infallible; they saturate instead of wrapping for a header
//! built by hand with impossible fields. Record offsets (`base_offset + offset delta`) and
//! timestamps (`base_timestamp + timestamp delta`) are checked as each record is decoded
//! ([`RecordIter`](super::record::RecordIter)), lengths against the bytes present before anything is sliced or
//! allocated.

use super::compression::Compression;
use super::error::BatchError;

/// Bytes before the batch length field's end: base offset (8) + batch length (4). Kafka's
/// `Records.LOG_OVERHEAD`.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, Kafka's `DefaultRecordBatch.RECORD_BATCH_OVERHEAD`.
pub const HEADER_SIZE: usize = 61;
/// Offset of the magic byte within a batch (same in all magics).
pub const MAGIC_OFFSET: usize = 16;
/// Offset of the attributes field; the CRC covers from here to the end.
pub const ATTRIBUTES_OFFSET: usize = 21;
/// Offset of the CRC field.
pub const CRC_OFFSET: usize = 17;
/// The only magic fetchbench writes.
pub const MAGIC_V2: i8 = 2;
/// `producer_id` of a batch written by a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// `producer_epoch` of a batch written by a non-idempotent producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `base_sequence` of a batch written by a non-idempotent producer.
pub const NO_SEQUENCE: i32 = -1;
/// Timestamp meaning "none" (Kafka's `RecordBatch.NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;

const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;
const DELETE_HORIZON_FLAG_MASK: i16 = 0x40;
const COMPRESSION_CODEC_MASK: i16 = 0x07;

/// Compression codec, timestamp type and flags of a v2 batch, Kafka's batch attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attributes(pub i16);

impl Attributes {
    /// Bits 0-2: the codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn codec_id(self) -> u8 {
        (self.0 & COMPRESSION_CODEC_MASK) as u8
    }
    /// The codec, or [`BatchError::UnknownCodec`].
    pub fn compression(self) -> Result<Compression, BatchError> {
        Compression::from_id(self.codec_id())
    }
    /// Bit 3: timestamps are LogAppendTime (set by the broker) rather than CreateTime.
    pub fn is_log_append_time(self) -> bool {
        self.0 & TIMESTAMP_TYPE_MASK != 0
    }
    /// Bit 4: the batch belongs to a transaction.
    pub fn is_transactional(self) -> bool {
        self.0 & TRANSACTIONAL_FLAG_MASK != 0
    }
    /// Bit 5: a control batch (transaction markers, KRaft control records); never delivered to
    /// consumers' applications.
    pub fn is_control(self) -> bool {
        self.0 & CONTROL_FLAG_MASK != 0
    }
    /// Bit 6 (KIP-534): the base timestamp holds the delete horizon set by the cleaner.
    pub fn has_delete_horizon(self) -> bool {
        self.0 & DELETE_HORIZON_FLAG_MASK != 0
    }
    /// Returns the attributes with the codec bits replaced.
    pub fn with_compression(self, c: Compression) -> Self {
        Attributes((self.0 & !COMPRESSION_CODEC_MASK) | c.id() as i16)
    }
    /// Returns the attributes with bit 3 set or cleared.
    pub fn with_log_append_time(self, on: bool) -> Self {
        self.with_flag(TIMESTAMP_TYPE_MASK, on)
    }
    /// Returns the attributes with bit 4 set or cleared.
    pub fn with_transactional(self, on: bool) -> Self {
        self.with_flag(TRANSACTIONAL_FLAG_MASK, on)
    }
    /// Returns the attributes with bit 5 set or cleared.
    pub fn with_control(self, on: bool) -> Self {
        self.with_flag(CONTROL_FLAG_MASK, on)
    }
    /// Returns the attributes with bit 6 set or cleared.
    pub fn with_delete_horizon(self, on: bool) -> Self {
        self.with_flag(DELETE_HORIZON_FLAG_MASK, on)
    }
    fn with_flag(self, mask: i16, on: bool) -> Self {
        Attributes(if on { self.0 | mask } else { self.0 & !mask })
    }
}

/// The fixed 61-byte header of a v2 batch, decoded. See the module docs for the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record (before compaction).
    pub base_offset: i64,
    /// Bytes after the length field: total batch size - [`LOG_OVERHEAD`].
    pub batch_length: i32,
    /// Leader epoch when the batch was appended (stamped by the broker).
    pub partition_leader_epoch: i32,
    /// Message format version; 2 here.
    pub magic: i8,
    /// CRC-32C of bytes 21..end.
    pub crc: u32,
    /// Codec, timestamp type, flags.
    pub attributes: Attributes,
    /// Last offset = base offset + this.
    pub last_offset_delta: i32,
    /// Timestamp of the first record, or the delete horizon (KIP-534).
    pub base_timestamp: i64,
    /// Largest record timestamp (or the LogAppendTime).
    pub max_timestamp: i64,
    /// Idempotent/transactional producer id, -1 for none.
    pub producer_id: i64,
    /// Producer epoch, -1 for none.
    pub producer_epoch: i16,
    /// Sequence number of the first record, -1 for none.
    pub base_sequence: i32,
    /// Number of records (after compaction, the records still present).
    pub records_count: i32,
}

impl BatchHeader {
    /// Reads the base offset and batch length (the first 12 bytes, common to all magics) and
    /// the magic byte. Returns `(base_offset, batch_length, magic)`.
    ///
    /// Errors: [`BatchError::Truncated`] when `bytes` has fewer than 17 bytes.
    pub fn peek(bytes: &[u8]) -> Result<(i64, i32, i8), BatchError> {
        if bytes.len() < MAGIC_OFFSET + 1 {
            return Err(BatchError::Truncated { needed: MAGIC_OFFSET + 1, available: bytes.len() });
        }
        Ok((be_i64(bytes, 0), be_i32(bytes, 8), bytes[MAGIC_OFFSET] as i8))
    }

    /// Decodes the 61-byte header at the start of `bytes`. Checks the magic, that the batch
    /// length is at least a header and that the offset range is possible ([`check_offset_range`]);
    /// does not check the CRC or that the whole batch is present.
    ///
    /// Errors: [`BatchError::Truncated`], [`BatchError::UnsupportedMagic`],
    /// [`BatchError::InvalidLength`], [`BatchError::InvalidOffsetRange`].
    pub fn parse(bytes: &[u8]) -> Result<Self, BatchError> {
        let (base_offset, batch_length, magic) = Self::peek(bytes)?;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic { base_offset, magic });
        }
        if (batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
            return Err(BatchError::InvalidLength {
                base_offset,
                length: batch_length,
                min: (HEADER_SIZE - LOG_OVERHEAD) as i32,
                max: i32::MAX,
            });
        }
        if bytes.len() < HEADER_SIZE {
            return Err(BatchError::Truncated { needed: HEADER_SIZE, available: bytes.len() });
        }
        let last_offset_delta = be_i32(bytes, 23);
        check_offset_range(base_offset, last_offset_delta)?;
        Ok(BatchHeader {
            base_offset,
            batch_length,
            partition_leader_epoch: be_i32(bytes, 12),
            magic,
            crc: be_i32(bytes, CRC_OFFSET) as u32,
            attributes: Attributes(be_i16(bytes, ATTRIBUTES_OFFSET)),
            last_offset_delta,
            base_timestamp: be_i64(bytes, 27),
            max_timestamp: be_i64(bytes, 35),
            producer_id: be_i64(bytes, 43),
            producer_epoch: be_i16(bytes, 51),
            base_sequence: be_i32(bytes, 53),
            records_count: be_i32(bytes, 57),
        })
    }

    /// Encodes the header into `out[..61]` (with the CRC field as stored in `self.crc`).
    ///
    /// # Panics
    /// When `out` is shorter than [`HEADER_SIZE`] (a programming error, not an input error).
    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.batch_length.to_be_bytes());
        out[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out[16] = self.magic as u8;
        out[17..21].copy_from_slice(&self.crc.to_be_bytes());
        out[21..23].copy_from_slice(&self.attributes.0.to_be_bytes());
        out[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        out[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        out[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        out[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        out[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        out[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        out[57..61].copy_from_slice(&self.records_count.to_be_bytes());
    }

    /// Total size of the batch in bytes, including the 12-byte log overhead.
    pub fn total_size(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }
    /// Offset of the last record the producer wrote in this batch: `base_offset +
    /// last_offset_delta`. Exact for a header from [`Self::parse`] (which refuses impossible
    /// offsets); saturates at `i64::MAX` for one built by hand with impossible fields.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }
    /// The offset following this batch: `last_offset() + 1` (saturating, as [`Self::last_offset`]).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    /// Whether this batch carries idempotent-producer state (producer id >= 0).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// The delete horizon (ms) when bit 6 is set (KIP-534), else `None`.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        self.attributes.has_delete_horizon().then_some(self.base_timestamp)
    }
}

/// Checks that a batch's offsets are possible: `last_offset_delta >= 0` and the next offset,
/// `base_offset + last_offset_delta + 1`, fits an `i64`. [`BatchHeader::parse`] calls it, so a
/// parsed header's [`BatchHeader::last_offset`] and [`BatchHeader::next_offset`] are exact.
///
/// Errors: [`BatchError::InvalidOffsetRange`].
pub fn check_offset_range(base_offset: i64, last_offset_delta: i32) -> Result<(), BatchError> {
    let invalid = |reason| Err(BatchError::InvalidOffsetRange { base_offset, last_offset_delta, reason });
    if last_offset_delta < 0 {
        return invalid("the last offset delta is negative");
    }
    if base_offset.checked_add(i64::from(last_offset_delta)).and_then(|l| l.checked_add(1)).is_none() {
        return invalid("the next offset (base offset + last offset delta + 1) overflows i64");
    }
    Ok(())
}

#[inline]
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
#[inline]
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
#[inline]
pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// The codec ids live in attributes bits 0-2; decoding one is where an unknown id becomes a
/// [`BatchError`] (the codec itself knows nothing of batches).
impl Compression {
    /// The codec for an id (attributes bits 0-2); errors: [`BatchError::UnknownCodec`] for 5, 6, 7.
    pub fn from_id(id: u8) -> Result<Self, BatchError> {
        Ok(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            id => return Err(BatchError::UnknownCodec { id }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_parsing() {
        for (i, c) in Compression::ALL.into_iter().enumerate() {
            assert_eq!(c.id() as usize, i);
            assert_eq!(Compression::from_id(i as u8).unwrap(), c);
            assert_eq!(c.name().parse::<Compression>().unwrap(), c);
            assert_eq!(c.to_string(), c.name());
        }
        assert_eq!("GZIP".parse::<Compression>().unwrap(), Compression::Gzip);
        assert_eq!("zstd".parse::<Compression>().unwrap().id(), 4);
        assert!(matches!(Compression::from_id(5), Err(BatchError::UnknownCodec { id: 5 })));
        assert!(matches!(Compression::from_id(7), Err(BatchError::UnknownCodec { id: 7 })));
        let e = "producer".parse::<Compression>().unwrap_err();
        assert_eq!(e.name, "producer");
    }
}
