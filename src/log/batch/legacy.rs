//! Legacy message sets (magic 0 and 1), read-only: Kafka's `LegacyRecord` and
//! `AbstractLegacyRecordBatch`.
//!
//! ## Layout of one entry (all integers big-endian)
//!
//! ```text
//! offset  size  field
//!  0       8    offset (i64)
//!  8       4    message size (i32): bytes after this field, >= 14 (magic 0) / 22 (magic 1)
//! 12       4    CRC-32 (IEEE, u32) over bytes 16..end (magic to the end of the message)
//! 16       1    magic (i8): 0 or 1
//! 17       1    attributes (i8): bits 0-2 codec, bit 3 timestamp type (1 = LogAppendTime, magic 1)
//! 18       8    timestamp (i64 ms)                               magic 1 only
//! ..       4    key length (i32, negative = null key), key bytes
//! ..       4    value length (i32, negative = null value), value bytes
//! ```
//!
//! Offset, size and magic sit where they sit in a v2 batch, so a log of mixed magics is walked by
//! the length field alone ([`super::BatchBoundaries`]).
//!
//! ## Compressed wrappers
//!
//! A message whose codec is not none is a *wrapper*: its value is a compressed inner message set
//! (entries in the layout above, uncompressed). Kafka's `DeepRecordsIterator` rules, followed by
//! [`LegacyMessage::deep_records`]:
//!
//! - Magic 0 wrappers: inner messages carry absolute offsets.
//! - Magic 1 wrappers: the wrapper's offset is the offset of the *last* inner message and inner
//!   offsets are relative (0, 1, ..., n-1): absolute = wrapper offset - last inner relative offset +
//!   inner relative offset. A wrapper offset of 0 means base 0 (some librdkafka versions wrote it);
//!   a nonzero wrapper offset below the last inner offset is an error.
//! - Inner magic-1 messages take the wrapper's timestamp type; with LogAppendTime they take the
//!   wrapper's timestamp too (the broker only restamps the wrapper).
//! - The inner message set must not be empty and inner messages must not be compressed; a
//!   partial trailing inner entry is dropped silently (Kafka's `DataLogInputStream`). zstd wrappers
//!   are refused (zstd requires magic 2, KIP-110).
//! - Snappy wrappers are xerial framed (Java) or raw (librdkafka); lz4 wrappers of magic 0 carry the
//!   broken frame header checksum of KAFKA-3160, which is ignored for magic 0 as Kafka does
//!   ([`Compression::decompress_for_magic`]).
//!
//! The CRC of a wrapper covers its compressed value, and each inner message has its own CRC;
//! neither is verified while decoding: call [`LegacyMessage::verify_crc`] and
//! [`LegacyRecord::verify_crc`] (Kafka's `ensureValid`), or use [`super::mixed`], which does both.

use bytes::Bytes;

use super::compression::{Compression, DEFAULT_MAX_UNCOMPRESSED};
use super::error::BatchError;
use super::header::{be_i32, be_i64, check_offset_range, LOG_OVERHEAD, MAGIC_OFFSET};

/// Magic of the original message format (no timestamps).
pub const MAGIC_V0: i8 = 0;
/// Magic of the message format with timestamps (KIP-32).
pub const MAGIC_V1: i8 = 1;
/// Smallest message size (after the size field) of magic 0: crc, magic, attributes, key length,
/// value length. Kafka's `LegacyRecord.RECORD_OVERHEAD_V0`.
pub const RECORD_OVERHEAD_V0: usize = 14;
/// Smallest message size of magic 1 (adds the timestamp). `LegacyRecord.RECORD_OVERHEAD_V1`.
pub const RECORD_OVERHEAD_V1: usize = 22;

const CODEC_MASK: i8 = 0x07;
const TIMESTAMP_TYPE_MASK: i8 = 0x08;
/// Position of the message's CRC within an entry (after offset and size).
const CRC_POSITION: usize = LOG_OVERHEAD;

/// How a record's timestamp was set, Kafka's `TimestampType` (with its `NO_TIMESTAMP_TYPE` for
/// magic 0, which has no timestamps). Not to be confused with the `message.timestamp.type` config
/// value, which has only the last two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Magic 0: no timestamp (Kafka's `NO_TIMESTAMP_TYPE`, id -1).
    NoTimestampType,
    /// Set by the producer (id 0).
    CreateTime,
    /// Set by the broker on append (id 1).
    LogAppendTime,
}

impl TimestampType {
    /// Kafka's name: `NoTimestampType`, `CreateTime`, `LogAppendTime`.
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::NoTimestampType => "NoTimestampType",
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

impl std::fmt::Display for TimestampType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One legacy entry (offset, size, message) viewed in place: Kafka's `LegacyRecord` together with
/// the log overhead, i.e. a `ByteBufferLegacyRecordBatch`. For a compressed wrapper, `key` is
/// normally `None` and `value` holds the compressed inner message set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegacyMessage<'a> {
    /// The entry's offset: absolute for a top-level uncompressed message and for magic-0 inner
    /// messages; the last inner offset for a magic-1 wrapper; relative (0..n-1) for magic-1 inner
    /// messages.
    pub offset: i64,
    /// The CRC-32 field as stored.
    pub crc: u32,
    /// 0 or 1.
    pub magic: i8,
    /// Bits 0-2 codec, bit 3 timestamp type.
    pub attributes: i8,
    /// The stored timestamp in ms (magic 1); `None` for magic 0 (Kafka reports -1,
    /// [`super::NO_TIMESTAMP`]).
    pub timestamp: Option<i64>,
    /// Key, `None` when its length is negative.
    pub key: Option<&'a [u8]>,
    /// Value, `None` when its length is negative (a tombstone; never for a valid wrapper).
    pub value: Option<&'a [u8]>,
    bytes: &'a [u8],
}

/// Decodes the legacy entry at the start of `bytes` (which may hold more after it) and returns
/// it with the number of bytes it takes (`12 + message size`). Same as [`LegacyMessage::parse`].
///
/// Errors: as [`LegacyMessage::parse`].
pub fn decode_legacy_entry(bytes: &[u8]) -> Result<(LegacyMessage<'_>, usize), BatchError> {
    let m = LegacyMessage::parse(bytes)?;
    Ok((m, m.total_size()))
}

/// Decodes and validates the legacy entry at the start of `entry` into its records with absolute
/// offsets, as a consumer with `check.crcs=true` does: the entry's CRC-32 is verified, a
/// compressed wrapper is decompressed (bounded by [`super::DEFAULT_MAX_UNCOMPRESSED`]) and every
/// inner message's CRC-32 verified. For v2 and legacy entries alike, see
/// [`super::mixed::decode_entry`].
///
/// Errors: those of [`LegacyMessage::parse`], [`LegacyMessage::deep_records`], and
/// [`BatchError::CrcMismatch`].
pub fn decode_entry(entry: &[u8]) -> Result<Vec<LegacyRecord>, BatchError> {
    let m = LegacyMessage::parse(entry)?;
    m.verify_crc()?;
    let records = m.deep_records(DEFAULT_MAX_UNCOMPRESSED)?;
    if m.is_compressed() {
        records.iter().try_for_each(LegacyRecord::verify_crc)?;
    }
    Ok(records)
}

/// Checks the CRC-32 of the legacy entry at the start of `entry` (the wrapper's only, as Kafka's
/// `AbstractLegacyRecordBatch.ensureValid` does; inner messages are checked when iterated).
///
/// Errors: those of [`LegacyMessage::parse`], and [`BatchError::CrcMismatch`].
pub fn verify_legacy_crc(entry: &[u8]) -> Result<(), BatchError> {
    LegacyMessage::parse(entry)?.verify_crc()
}

impl<'a> LegacyMessage<'a> {
    /// Decodes the entry at the start of `bytes`; `bytes` may hold more after it. Does not check
    /// the CRC.
    ///
    /// Errors: [`BatchError::Truncated`] when `bytes` is shorter than 12 bytes or than the size
    /// field says; [`BatchError::InvalidOffsetRange`] for an offset of `i64::MAX` (no next offset);
    /// [`BatchError::InvalidLength`] when the size is below the magic's minimum (14 or
    /// 22); [`BatchError::UnsupportedMagic`] when the magic is not 0 or 1;
    /// [`BatchError::InvalidRecord`] when a key or value length runs past the message.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BatchError> {
        if bytes.len() < LOG_OVERHEAD {
            return Err(BatchError::Truncated { needed: LOG_OVERHEAD, available: bytes.len() });
        }
        let offset = be_i64(bytes, 0);
        let size = be_i32(bytes, 8);
        // An entry at i64::MAX has no next offset.
        check_offset_range(offset, 0)?;
        if size < RECORD_OVERHEAD_V0 as i32 {
            return Err(BatchError::InvalidLength {
                base_offset: offset,
                length: size,
                min: RECORD_OVERHEAD_V0 as i32,
                max: i32::MAX,
            });
        }
        let total = LOG_OVERHEAD + size as usize;
        if bytes.len() < total {
            return Err(BatchError::Truncated { needed: total, available: bytes.len() });
        }
        let bytes = &bytes[..total];
        let magic = bytes[MAGIC_OFFSET] as i8;
        let (min, key_at) = match magic {
            MAGIC_V0 => (RECORD_OVERHEAD_V0, MAGIC_OFFSET + 2),
            MAGIC_V1 => (RECORD_OVERHEAD_V1, MAGIC_OFFSET + 10),
            _ => return Err(BatchError::UnsupportedMagic { base_offset: offset, magic }),
        };
        if (size as usize) < min {
            return Err(BatchError::InvalidLength {
                base_offset: offset,
                length: size,
                min: min as i32,
                max: i32::MAX,
            });
        }
        let timestamp = (magic == MAGIC_V1).then(|| be_i64(bytes, MAGIC_OFFSET + 2));
        let invalid = |reason: String| BatchError::InvalidRecord { base_offset: offset, index: 0, reason };
        let (key, value_at) = sized(bytes, key_at).map_err(|e| invalid(format!("key: {e}")))?;
        let (value, _end) = sized(bytes, value_at).map_err(|e| invalid(format!("value: {e}")))?;
        // Bytes after the value are ignored, as Kafka's LegacyRecord does.
        Ok(LegacyMessage {
            offset,
            crc: be_i32(bytes, CRC_POSITION) as u32,
            magic,
            attributes: bytes[MAGIC_OFFSET + 1] as i8,
            timestamp,
            key,
            value,
            bytes,
        })
    }

    /// The whole entry, offset and size fields included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Entry size in bytes: 12 + the message size field.
    pub fn total_size(&self) -> usize {
        self.bytes.len()
    }
    /// The CRC-32 (IEEE, as `java.util.zip.CRC32`) of the message from the magic byte to the end.
    pub fn compute_crc(&self) -> u32 {
        crc32fast::hash(&self.bytes[MAGIC_OFFSET..])
    }
    /// Whether the stored CRC matches.
    pub fn is_crc_valid(&self) -> bool {
        self.compute_crc() == self.crc
    }
    /// Checks the CRC, Kafka's `LegacyRecord.ensureValid`. Errors: [`BatchError::CrcMismatch`]
    /// (its `base_offset` is this entry's offset).
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let computed = self.compute_crc();
        if computed != self.crc {
            return Err(BatchError::CrcMismatch { base_offset: self.offset, stored: self.crc, computed });
        }
        Ok(())
    }
    /// The codec id (attributes bits 0-2).
    pub fn codec_id(&self) -> u8 {
        (self.attributes & CODEC_MASK) as u8
    }
    /// The codec; errors: [`BatchError::UnknownCodec`].
    pub fn compression(&self) -> Result<Compression, BatchError> {
        Compression::from_id(self.codec_id())
    }
    /// Whether this is a compressed wrapper (codec bits not 0).
    pub fn is_compressed(&self) -> bool {
        self.codec_id() != 0
    }
    /// Kafka's `LegacyRecord.timestampType` for a top-level message: none for magic 0, else bit 3.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.magic == MAGIC_V0 {
            TimestampType::NoTimestampType
        } else if self.attributes & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// The records of this entry with absolute offsets, Kafka's `AbstractLegacyRecordBatch.iterator`:
    /// the message itself when it is not compressed, else the decompressed inner messages (see the
    /// module docs for offsets and timestamps). Key and value bytes are copied into [`Bytes`]; the
    /// decompressed buffer is shared by the inner records without copying. CRCs are not checked
    /// (see [`LegacyRecord::verify_crc`]). Decompressed output is limited to `max_uncompressed`.
    ///
    /// Errors: [`BatchError::UnknownCodec`], [`BatchError::Compression`] (including the limit),
    /// [`BatchError::InvalidRecord`] (zstd or null-valued wrapper, empty inner set, compressed or
    /// undersized inner message, bad wrapper offset), [`BatchError::UnsupportedMagic`] for an
    /// inner magic other than 0/1, and inner-message errors of [`LegacyMessage::parse`].
    pub fn deep_records(&self, max_uncompressed: usize) -> Result<Vec<LegacyRecord>, BatchError> {
        self.deep_records_with(max_uncompressed, &Bytes::copy_from_slice)
    }

    /// [`Self::deep_records`] with the conversion of borrowed key/value slices to [`Bytes`] given
    /// (a copy, or `Bytes::slice_ref` when the entry lives in a `Bytes`).
    pub(crate) fn deep_records_with(
        &self,
        max_uncompressed: usize,
        to_bytes: &dyn Fn(&[u8]) -> Bytes,
    ) -> Result<Vec<LegacyRecord>, BatchError> {
        let codec = self.compression()?;
        if codec == Compression::None {
            return Ok(vec![LegacyRecord::from_message(self, self.offset, None, to_bytes)]);
        }
        let invalid = |reason: String| BatchError::InvalidRecord { base_offset: self.offset, index: 0, reason };
        if codec == Compression::Zstd {
            return Err(invalid(format!("invalid wrapper compression type zstd for magic {}", self.magic)));
        }
        let Some(compressed) = self.value else {
            return Err(invalid(format!("compressed message set with a null value (magic {})", self.magic)));
        };
        let inner: Bytes = codec
            .decompress_for_magic(compressed, self.magic, max_uncompressed)
            .map_err(|source| BatchError::Compression { codec, source })?
            .into();
        let wrapper_type = self.timestamp_type();
        let mut messages = Vec::new();
        let mut pos = 0;
        // A partial trailing entry ends the inner set silently (DataLogInputStream.nextBatch).
        while inner.len() - pos >= LOG_OVERHEAD {
            let size = be_i32(&inner, pos + 8);
            let index = messages.len();
            if size < RECORD_OVERHEAD_V0 as i32 {
                return Err(BatchError::InvalidRecord {
                    base_offset: self.offset,
                    index,
                    reason: format!(
                        "inner message size {size} is less than the minimum record overhead ({RECORD_OVERHEAD_V0})"
                    ),
                });
            }
            if inner.len() - pos - LOG_OVERHEAD < size as usize {
                break;
            }
            let m = LegacyMessage::parse(&inner[pos..])?;
            if m.is_compressed() {
                return Err(BatchError::InvalidRecord {
                    base_offset: self.offset,
                    index,
                    reason: "inner messages must not be compressed".into(),
                });
            }
            pos += m.total_size();
            messages.push(m);
        }
        let Some(last) = messages.last() else {
            return Err(invalid("compressed message set with no inner records".into()));
        };
        let base = if self.magic == MAGIC_V1 {
            if self.offset == 0 {
                // Produce data from some librdkafka versions has a wrapper offset of 0.
                0
            } else if self.offset < last.offset {
                return Err(invalid(format!(
                    "wrapper offset {} is less than the last inner message offset {} and it is not zero",
                    self.offset, last.offset
                )));
            } else {
                self.offset.checked_sub(last.offset).ok_or_else(|| {
                    invalid(format!(
                        "wrapper offset {} minus the last inner message offset {} overflows",
                        self.offset, last.offset
                    ))
                })?
            }
        } else {
            0
        };
        let to_inner = |s: &[u8]| inner.slice_ref(s);
        messages
            .iter()
            .enumerate()
            .map(|(index, m)| {
                let offset = if self.magic == MAGIC_V1 {
                    base.checked_add(m.offset).ok_or_else(|| BatchError::InvalidRecord {
                        base_offset: self.offset,
                        index,
                        reason: format!("inner offset {} overflows the absolute base offset {base}", m.offset),
                    })?
                } else {
                    m.offset
                };
                Ok(LegacyRecord::from_message(m, offset, Some((self.timestamp, wrapper_type)), &to_inner))
            })
            .collect()
    }
}

/// Reads an i32 length at `at` and the bytes after it: `(None, at + 4)` for a negative length
/// (Kafka's `Utils.sizeDelimited`), else `(Some(bytes), end)`.
fn sized(b: &[u8], at: usize) -> Result<(Option<&[u8]>, usize), String> {
    if b.len() < at + 4 {
        return Err(format!("no room for the length at byte {at} of {}", b.len()));
    }
    let len = be_i32(b, at);
    let start = at + 4;
    if len < 0 {
        return Ok((None, start));
    }
    let len = len as usize;
    if len > b.len() - start {
        return Err(format!("length {len} exceeds the {} bytes left", b.len() - start));
    }
    Ok((Some(&b[start..start + len]), start + len))
}

/// One record of a legacy entry with its absolute offset and effective timestamp, owned
/// (what Kafka's deep iterator yields). Produced by [`LegacyMessage::deep_records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyRecord {
    /// Absolute offset.
    pub offset: i64,
    /// 0 or 1.
    pub magic: i8,
    /// The message's own attributes (codec bits 0 for inner messages).
    pub attributes: i8,
    /// Effective timestamp in ms: the wrapper's for inner magic-1 messages of a LogAppendTime
    /// wrapper, else the message's own; `None` for magic 0 (Kafka reports -1, [`super::NO_TIMESTAMP`]).
    pub timestamp: Option<i64>,
    /// Effective timestamp type (an inner magic-1 message takes its wrapper's).
    pub timestamp_type: TimestampType,
    /// Key, `None` for a null key.
    pub key: Option<Bytes>,
    /// Value, `None` for a null value.
    pub value: Option<Bytes>,
    /// The message's CRC-32 as stored.
    pub crc: u32,
    /// The CRC-32 computed over the message.
    pub computed_crc: u32,
}

impl LegacyRecord {
    fn from_message(
        m: &LegacyMessage<'_>,
        offset: i64,
        wrapper: Option<(Option<i64>, TimestampType)>,
        to_bytes: &dyn Fn(&[u8]) -> Bytes,
    ) -> Self {
        // LegacyRecord.timestamp()/timestampType() with a wrapper timestamp and type.
        let (timestamp, timestamp_type) = match (m.magic, wrapper) {
            (MAGIC_V0, _) => (None, TimestampType::NoTimestampType),
            (_, Some((wrapper_ts, TimestampType::LogAppendTime))) => (wrapper_ts, TimestampType::LogAppendTime),
            (_, Some((_, wrapper_type))) => (m.timestamp, wrapper_type),
            (_, None) => (m.timestamp, m.timestamp_type()),
        };
        LegacyRecord {
            offset,
            magic: m.magic,
            attributes: m.attributes,
            timestamp,
            timestamp_type,
            key: m.key.map(to_bytes),
            value: m.value.map(to_bytes),
            crc: m.crc,
            computed_crc: m.compute_crc(),
        }
    }

    /// Whether the stored CRC matches the message.
    pub fn is_crc_valid(&self) -> bool {
        self.crc == self.computed_crc
    }

    /// Checks the CRC, Kafka's `LegacyRecord.ensureValid` (what a consumer with `check.crcs=true`
    /// does for every record). Errors: [`BatchError::CrcMismatch`] (its `base_offset` is this
    /// record's absolute offset).
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        if !self.is_crc_valid() {
            return Err(BatchError::CrcMismatch {
                base_offset: self.offset,
                stored: self.crc,
                computed: self.computed_crc,
            });
        }
        Ok(())
    }
}

/// Encoding of legacy entries, for tests: fetchbench never writes magic 0/1, but the decoder must
/// be exercised on every shape Kafka could have left in a log.
#[cfg(test)]
pub(crate) mod encode {
    use super::*;

    /// Appends one entry: offset, size, crc, magic, attributes, timestamp (magic 1), key, value.
    pub(crate) fn entry(
        out: &mut Vec<u8>,
        offset: i64,
        magic: i8,
        attributes: i8,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) {
        let mut msg = vec![0u8; 4];
        msg.push(magic as u8);
        msg.push(attributes as u8);
        if magic == MAGIC_V1 {
            msg.extend_from_slice(&timestamp.to_be_bytes());
        }
        for field in [key, value] {
            match field {
                None => msg.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(b) => {
                    msg.extend_from_slice(&(b.len() as i32).to_be_bytes());
                    msg.extend_from_slice(b);
                }
            }
        }
        let crc = crc32fast::hash(&msg[4..]);
        msg[0..4].copy_from_slice(&crc.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(msg.len() as i32).to_be_bytes());
        out.extend_from_slice(&msg);
    }

    /// Appends a compressed wrapper around `inner` (already-encoded inner entries), as Kafka's
    /// `MemoryRecordsBuilder` did for magic 0/1: null key, value = compressed inner set.
    pub(crate) fn wrapper(
        out: &mut Vec<u8>,
        offset: i64,
        magic: i8,
        codec: Compression,
        log_append_time: bool,
        timestamp: i64,
        inner: &[u8],
    ) {
        let z = codec.compress(inner).unwrap();
        let attributes = codec.id() as i8 | if log_append_time { TIMESTAMP_TYPE_MASK } else { 0 };
        entry(out, offset, magic, attributes, timestamp, None, Some(&z));
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{entry, wrapper};
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn parses_magic0_and_magic1_messages() {
        let mut b = Vec::new();
        entry(&mut b, 7, 0, 0, 0, Some(b"k0"), Some(b"value zero"));
        entry(&mut b, 8, 1, 0, 1_600_000_000_123, None, Some(b"v1"));
        entry(&mut b, 9, 1, 0x08, 42, Some(b""), None);
        let (m0, n0) = decode_legacy_entry(&b).unwrap();
        assert_eq!(n0, 12 + 14 + 2 + 10);
        assert_eq!((m0.offset, m0.magic, m0.timestamp), (7, 0, None));
        assert_eq!(m0.key, Some(&b"k0"[..]));
        assert_eq!(m0.value, Some(&b"value zero"[..]));
        assert_eq!(m0.timestamp_type(), TimestampType::NoTimestampType);
        assert!(m0.is_crc_valid());
        m0.verify_crc().unwrap();
        let (m1, n1) = decode_legacy_entry(&b[n0..]).unwrap();
        assert_eq!(n1, 12 + 22 + 2);
        assert_eq!((m1.offset, m1.magic, m1.timestamp), (8, 1, Some(1_600_000_000_123)));
        assert_eq!((m1.key, m1.value), (None, Some(&b"v1"[..])));
        assert_eq!(m1.timestamp_type(), TimestampType::CreateTime);
        let (m2, n2) = decode_legacy_entry(&b[n0 + n1..]).unwrap();
        assert_eq!(n0 + n1 + n2, b.len());
        assert_eq!((m2.key, m2.value), (Some(&b""[..]), None));
        assert_eq!(m2.timestamp_type(), TimestampType::LogAppendTime);
        // Uncompressed: the deep records are the message itself.
        let r = m1.deep_records(MAX).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].offset, r[0].timestamp, r[0].value.as_deref()),
            (8, Some(1_600_000_000_123), Some(&b"v1"[..]))
        );
        r[0].verify_crc().unwrap();
    }

    #[test]
    fn decode_entry_validates_wrapper_and_inner_crcs() {
        let inner = inner_set(1, &["a", "b"], 0, 10);
        let mut b = Vec::new();
        wrapper(&mut b, 41, 1, Compression::Snappy, false, 11, &inner);
        let r = decode_entry(&b).unwrap();
        assert_eq!(r.iter().map(|r| (r.offset, r.timestamp)).collect::<Vec<_>>(), vec![(40, Some(10)), (41, Some(11))]);
        // Damage inside the wrapper's value: the wrapper CRC catches it.
        let mut bad = b.clone();
        let n = bad.len();
        bad[n - 3] ^= 4;
        assert!(matches!(decode_entry(&bad), Err(BatchError::CrcMismatch { base_offset: 41, .. })));
        // Damage to an inner message under a valid wrapper CRC: the inner CRC catches it.
        let mut inner_bad = inner.clone();
        *inner_bad.last_mut().unwrap() ^= 1;
        let mut b = Vec::new();
        wrapper(&mut b, 41, 1, Compression::Snappy, false, 11, &inner_bad);
        assert!(matches!(decode_entry(&b), Err(BatchError::CrcMismatch { base_offset: 41, .. })));
    }

    #[test]
    fn kafka_crc32_vector() {
        // Kafka's LegacyRecord CRC is java.util.zip.CRC32: the standard check value.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn bad_entries_are_errors() {
        let mut b = Vec::new();
        entry(&mut b, 3, 1, 0, 5, Some(b"key"), Some(b"value"));
        // Truncated anywhere.
        for cut in 0..b.len() {
            assert!(matches!(LegacyMessage::parse(&b[..cut]), Err(BatchError::Truncated { .. })), "cut {cut}");
        }
        // Flipped payload byte: CRC mismatch.
        let mut bad = b.clone();
        *bad.last_mut().unwrap() ^= 0x20;
        let m = LegacyMessage::parse(&bad).unwrap();
        assert!(matches!(m.verify_crc(), Err(BatchError::CrcMismatch { base_offset: 3, .. })));
        assert!(verify_legacy_crc(&bad).is_err());
        verify_legacy_crc(&b).unwrap();
        // Magic 2 and 5 are not legacy.
        let mut m2 = b.clone();
        m2[16] = 2;
        assert!(matches!(LegacyMessage::parse(&m2), Err(BatchError::UnsupportedMagic { magic: 2, .. })));
        // Size below the minimum.
        let mut small = b.clone();
        small[8..12].copy_from_slice(&13i32.to_be_bytes());
        assert!(matches!(LegacyMessage::parse(&small), Err(BatchError::InvalidLength { length: 13, .. })));
        let mut small1 = b.clone();
        small1[8..12].copy_from_slice(&21i32.to_be_bytes());
        assert!(matches!(LegacyMessage::parse(&small1), Err(BatchError::InvalidLength { min: 22, .. })));
        // Key length running past the message.
        let mut long_key = b.clone();
        long_key[26..30].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(LegacyMessage::parse(&long_key), Err(BatchError::InvalidRecord { .. })));
        // Negative lengths other than -1 are null, as in Kafka's Utils.sizeDelimited.
        let mut neg = Vec::new();
        entry(&mut neg, 0, 0, 0, 0, None, None);
        neg[18..22].copy_from_slice(&(-7i32).to_be_bytes());
        assert_eq!(LegacyMessage::parse(&neg).unwrap().key, None);
    }

    fn inner_set(magic: i8, keys: &[&str], first_offset: i64, ts: i64) -> Vec<u8> {
        let mut b = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            entry(&mut b, first_offset + i as i64, magic, 0, ts + i as i64, Some(k.as_bytes()), Some(b"v"));
        }
        b
    }

    #[test]
    fn magic1_wrapper_offsets_are_relative_to_the_last() {
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
            let inner = inner_set(1, &["a", "b", "c"], 0, 1000);
            let mut b = Vec::new();
            wrapper(&mut b, 12, 1, codec, false, 5000, &inner);
            let m = LegacyMessage::parse(&b).unwrap();
            m.verify_crc().unwrap();
            assert_eq!(m.compression().unwrap(), codec);
            let r = m.deep_records(MAX).unwrap();
            let got: Vec<_> = r.iter().map(|r| (r.offset, r.key.clone().unwrap(), r.timestamp)).collect();
            assert_eq!(
                got,
                vec![
                    (10, Bytes::from_static(b"a"), Some(1000)),
                    (11, Bytes::from_static(b"b"), Some(1001)),
                    (12, Bytes::from_static(b"c"), Some(1002))
                ],
                "{codec}"
            );
            assert!(r.iter().all(|r| r.is_crc_valid() && r.timestamp_type == TimestampType::CreateTime));
        }
    }

    #[test]
    fn log_append_time_wrapper_stamps_inner_records() {
        let inner = inner_set(1, &["a", "b"], 0, 1000);
        let mut b = Vec::new();
        wrapper(&mut b, 1, 1, Compression::Gzip, true, 777, &inner);
        let r = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap();
        assert_eq!(r.iter().map(|r| r.timestamp).collect::<Vec<_>>(), vec![Some(777), Some(777)]);
        assert!(r.iter().all(|r| r.timestamp_type == TimestampType::LogAppendTime));
    }

    #[test]
    fn wrapper_offset_rules() {
        // Wrapper offset 0 (old librdkafka): base 0.
        let inner = inner_set(1, &["a", "b"], 0, 1);
        let mut b = Vec::new();
        wrapper(&mut b, 0, 1, Compression::Gzip, false, 0, &inner);
        let r = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap();
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1]);
        // Non-zero wrapper offset below the last inner offset: invalid.
        let inner = inner_set(1, &["a", "b", "c"], 0, 1);
        let mut b = Vec::new();
        wrapper(&mut b, 1, 1, Compression::Gzip, false, 0, &inner);
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::InvalidRecord { .. })));
        // Magic 0 wrapper: inner offsets are absolute, whatever the wrapper says.
        let inner = inner_set(0, &["x", "y"], 100, 0);
        let mut b = Vec::new();
        wrapper(&mut b, 101, 0, Compression::Snappy, false, 0, &inner);
        let r = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap();
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![100, 101]);
        assert!(r.iter().all(|r| r.timestamp.is_none() && r.timestamp_type == TimestampType::NoTimestampType));
    }

    #[test]
    fn invalid_wrappers() {
        let inner = inner_set(1, &["a"], 0, 1);
        // zstd in a legacy wrapper.
        let mut b = Vec::new();
        wrapper(&mut b, 0, 1, Compression::Zstd, false, 0, &inner);
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::InvalidRecord { .. })));
        // Null value.
        let mut b = Vec::new();
        entry(&mut b, 0, 1, 1, 0, None, None);
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::InvalidRecord { .. })));
        // Empty inner set.
        let mut b = Vec::new();
        wrapper(&mut b, 0, 1, Compression::Gzip, false, 0, &[]);
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::InvalidRecord { .. })));
        // Nested compression.
        let mut nested = Vec::new();
        wrapper(&mut nested, 0, 1, Compression::Gzip, false, 0, &inner);
        let mut b = Vec::new();
        wrapper(&mut b, 0, 1, Compression::Gzip, false, 0, &nested);
        let e = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap_err();
        assert!(e.to_string().contains("must not be compressed"), "{e}");
        // Garbage value.
        let mut b = Vec::new();
        entry(&mut b, 0, 1, 2, 0, None, Some(b"not snappy at all"));
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::Compression { .. })));
        // Unknown codec 6.
        let mut b = Vec::new();
        entry(&mut b, 0, 1, 6, 0, None, Some(b"x"));
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::UnknownCodec { id: 6 })));
        // Decompression limit.
        let big = inner_set(1, &["a"; 100], 0, 1);
        let mut b = Vec::new();
        wrapper(&mut b, 99, 1, Compression::Gzip, false, 0, &big);
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(100), Err(BatchError::Compression { .. })));
        assert_eq!(LegacyMessage::parse(&b).unwrap().deep_records(big.len()).unwrap().len(), 100);
    }

    #[test]
    fn partial_trailing_inner_entry_is_dropped_and_inner_crc_is_checked() {
        let mut inner = inner_set(1, &["a", "b"], 0, 1);
        let full = inner.len();
        entry(&mut inner, 2, 1, 0, 3, Some(b"c"), Some(b"v"));
        inner.truncate(full + 20); // a partial third entry
        let mut b = Vec::new();
        wrapper(&mut b, 1, 1, Compression::Gzip, false, 0, &inner);
        let r = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap();
        assert_eq!(r.len(), 2);
        // Corrupt the second inner message's value: the wrapper CRC is still fine (it covers the
        // compressed bytes), the inner CRC is not.
        let mut inner = inner_set(1, &["a", "b"], 0, 1);
        *inner.last_mut().unwrap() ^= 1;
        let mut b = Vec::new();
        wrapper(&mut b, 1, 1, Compression::Lz4, false, 0, &inner);
        let m = LegacyMessage::parse(&b).unwrap();
        m.verify_crc().unwrap();
        let r = m.deep_records(MAX).unwrap();
        r[0].verify_crc().unwrap();
        assert!(matches!(r[1].verify_crc(), Err(BatchError::CrcMismatch { base_offset: 1, .. })));
    }

    #[test]
    fn magic0_lz4_wrapper_with_broken_header_checksum() {
        // KAFKA-3160: magic-0 lz4 wrappers hash the frame magic too. Build one and rewrite the HC.
        let inner = inner_set(0, &["a", "b"], 5, 0);
        let mut z = Compression::Lz4.compress(&inner).unwrap();
        z[6] = (super::super::compression::xxh32(&z[0..6], 0) >> 8) as u8;
        assert_ne!(z[6], (super::super::compression::xxh32(&z[4..6], 0) >> 8) as u8);
        let mut b = Vec::new();
        entry(&mut b, 6, 0, 3, 0, None, Some(&z));
        let r = LegacyMessage::parse(&b).unwrap().deep_records(MAX).unwrap();
        assert_eq!(r.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![5, 6]);
        // The same frame in a magic-1 wrapper is refused, as Kafka refuses it.
        let mut b = Vec::new();
        entry(&mut b, 1, 1, 3, 0, None, Some(&z));
        assert!(matches!(LegacyMessage::parse(&b).unwrap().deep_records(MAX), Err(BatchError::Compression { .. })));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            if let Ok(m) = LegacyMessage::parse(&bytes) {
                let _ = m.verify_crc();
                let _ = m.deep_records(4096);
            }
        }
    }
}
