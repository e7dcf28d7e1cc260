//! [`BatchError`]: what decoding a batch or a record can fail with.

use super::compression::Compression;

/// Errors decoding a batch or a record. Positions are relative to the buffer given to the
/// decoder; the segment layer adds the file and absolute position ([`LogError::Batch`](crate::log::LogError::Batch)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Fewer bytes than the header (or the batch length) says the batch has.
    #[error("truncated batch: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes the header needs or the length field announces.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The batch length field is smaller than a header or larger than the limit.
    #[error("invalid batch length {length} (base offset {base_offset}): must be in {min}..={max}")]
    InvalidLength {
        /// Base offset read from the header.
        base_offset: i64,
        /// The batch length field.
        length: i32,
        /// Smallest acceptable length.
        min: i32,
        /// Largest acceptable length.
        max: i32,
    },
    /// The magic byte is not 2 (or, for the legacy decoder, not 0 or 1).
    #[error("unsupported magic {magic} (base offset {base_offset})")]
    UnsupportedMagic {
        /// Base offset read from the header.
        base_offset: i64,
        /// The magic byte found.
        magic: i8,
    },
    /// The stored CRC does not match the computed one.
    #[error("CRC mismatch (base offset {base_offset}): stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// Base offset read from the header.
        base_offset: i64,
        /// CRC field of the batch.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// The attributes name a codec that does not exist (5, 6, 7).
    #[error("unknown compression codec id {id}")]
    UnknownCodec {
        /// Bits 0-2 of the attributes.
        id: u8,
    },
    /// Decompressing or compressing the records failed.
    #[error("{codec} codec failed: {source}")]
    Compression {
        /// The codec.
        codec: Compression,
        /// The codec's error.
        #[source]
        source: std::io::Error,
    },
    /// The header's offsets are impossible: `last_offset_delta` is negative, or the next offset
    /// (`base_offset + last_offset_delta + 1`) overflows `i64`; for a legacy entry, an offset of
    /// `i64::MAX` (no next offset). A crafted or corrupt header; Kafka's
    /// `CorruptRecordException` / `InvalidRecordException`.
    #[error("impossible offsets (base offset {base_offset}, last offset delta {last_offset_delta}): {reason}")]
    InvalidOffsetRange {
        /// Base offset read from the header.
        base_offset: i64,
        /// The last offset delta read from the header (0 for a legacy entry).
        last_offset_delta: i32,
        /// What is impossible.
        reason: &'static str,
    },
    /// A record inside the batch is malformed.
    #[error("invalid record {index} (base offset {base_offset}): {reason}")]
    InvalidRecord {
        /// Base offset of the batch.
        base_offset: i64,
        /// Index of the record within the batch.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}
