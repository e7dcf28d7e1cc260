//! [`RecordBatch`], a v2 batch viewed in place (Kafka's `DefaultRecordBatch`), and [`Records`],
//! its decompressed records.

use std::borrow::Cow;

use super::compression::{Compression, DEFAULT_MAX_UNCOMPRESSED};
use super::error::BatchError;
use super::header::{Attributes, BatchHeader, ATTRIBUTES_OFFSET, HEADER_SIZE};
use super::record::{Record, RecordIter};

/// A v2 record batch viewed in place: the header decoded, the bytes borrowed.
#[derive(Clone, Copy, Debug)]
pub struct RecordBatch<'a> {
    header: BatchHeader,
    bytes: &'a [u8],
}

impl<'a> RecordBatch<'a> {
    /// Views the batch at the start of `bytes`; `bytes` may hold more after it. Checks the magic,
    /// the length against `bytes.len()`; does not check the CRC (call [`Self::verify_crc`]).
    ///
    /// Errors: [`BatchError::Truncated`] when `bytes` is shorter than the batch length says,
    /// [`BatchError::UnsupportedMagic`], [`BatchError::InvalidLength`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BatchError> {
        let header = BatchHeader::parse(bytes)?;
        let total = header.total_size();
        if bytes.len() < total {
            return Err(BatchError::Truncated { needed: total, available: bytes.len() });
        }
        Ok(RecordBatch { header, bytes: &bytes[..total] })
    }

    /// The decoded header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }
    /// The whole batch, header included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Base offset.
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }
    /// Last offset (`base_offset + last_offset_delta`).
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }
    /// `last_offset() + 1`.
    pub fn next_offset(&self) -> i64 {
        self.header.next_offset()
    }
    /// The attributes.
    pub fn attributes(&self) -> Attributes {
        self.header.attributes
    }
    /// The CRC-32C (Castagnoli) of bytes 21..end, as it should be stored in the CRC field.
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[ATTRIBUTES_OFFSET..])
    }
    /// Whether the stored CRC matches the bytes.
    pub fn is_crc_valid(&self) -> bool {
        self.compute_crc() == self.header.crc
    }
    /// Checks the CRC. Errors: [`BatchError::CrcMismatch`].
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let computed = self.compute_crc();
        if computed != self.header.crc {
            return Err(BatchError::CrcMismatch {
                base_offset: self.header.base_offset,
                stored: self.header.crc,
                computed,
            });
        }
        Ok(())
    }
    /// The records section as stored (compressed when the codec is not none).
    pub fn records_section(&self) -> &'a [u8] {
        &self.bytes[HEADER_SIZE..]
    }

    /// Decompresses (when needed) and returns the records, Kafka's `DefaultRecordBatch.iterator`.
    /// Decompressed output is limited to `max_uncompressed` bytes to bound memory on hostile
    /// input.
    ///
    /// Errors: [`BatchError::UnknownCodec`], [`BatchError::Compression`], and
    /// [`BatchError::InvalidRecord`] from iterating.
    pub fn records_with_limit(&self, max_uncompressed: usize) -> Result<Records<'a>, BatchError> {
        let codec = self.header.attributes.compression()?;
        let data: Cow<'a, [u8]> = match codec {
            Compression::None => Cow::Borrowed(self.records_section()),
            c => Cow::Owned(
                c.decompress(self.records_section(), max_uncompressed)
                    .map_err(|source| BatchError::Compression { codec: c, source })?,
            ),
        };
        Ok(Records { header: self.header, data })
    }

    /// [`Self::records_with_limit`] with [`DEFAULT_MAX_UNCOMPRESSED`].
    pub fn records(&self) -> Result<Records<'a>, BatchError> {
        self.records_with_limit(DEFAULT_MAX_UNCOMPRESSED)
    }
}

/// The (decompressed) records of one batch; iterate with [`Records::iter`].
#[derive(Debug)]
pub struct Records<'a> {
    header: BatchHeader,
    data: Cow<'a, [u8]>,
}

impl Records<'_> {
    /// Iterates the records. Each item is a record or the error that stopped the iteration;
    /// the iterator ends after `records_count` records or the first error.
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter::new(&self.header, &self.data)
    }
    /// Decodes every record; errors: [`BatchError::InvalidRecord`].
    pub fn to_vec(&self) -> Result<Vec<Record<'_>>, BatchError> {
        self.iter().collect()
    }
    /// The decompressed records bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}
