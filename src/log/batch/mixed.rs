//! Decoding a record set of mixed magics into uniform records: what a consumer does with the
//! bytes of a Fetch response partition (Kafka's `CompletedFetch` over `MemoryRecords.batches()`),
//! and what `log dump --deep-iteration` does with a segment.
//!
//! A record set is concatenated entries, each a v2 batch ([`RecordBatch`]) or a legacy magic 0/1
//! entry ([`LegacyMessage`]); both start with offset (8), size (4) and have the magic at byte 16,
//! so the set is walked by the size field, as Kafka's `ByteBufferLogInputStream` does:
//!
//! - fewer than 17 bytes left, or fewer than the size field announces: the walk ends and
//!   [`MixedBatches::partial_tail`] is set (a fetch response may cut the last batch, KIP-74);
//! - a size below 14 (the smallest legacy message) is an error (`CorruptRecordException`);
//! - a magic other than 0, 1, 2 is an error.
//!
//! Each entry is decoded to a [`DecodedBatch`] holding owned [`DecodedRecord`]s (key, value and
//! header values are [`Bytes`]: slices of one shared buffer per batch, never one allocation per
//! field). CRCs are verified by default, like a consumer with `check.crcs=true`: the CRC-32C of a
//! v2 batch, the CRC-32 of a legacy entry and of each inner message of a compressed wrapper.

use bytes::Bytes;

use super::compression::{Compression, DEFAULT_MAX_UNCOMPRESSED};
use super::error::BatchError;
use super::header::{
    be_i32, be_i64, BatchHeader, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
    NO_TIMESTAMP,
};
use super::legacy::{LegacyMessage, LegacyRecord, MAGIC_V0, MAGIC_V1, RECORD_OVERHEAD_V0};
use super::record::RecordIter;
use super::record_batch::RecordBatch;

pub use super::legacy::TimestampType;

/// Kafka's `RecordBatch.NO_PARTITION_LEADER_EPOCH`, reported for legacy entries.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// Bytes needed to read an entry's magic: offset, size, partition leader epoch / CRC, magic.
/// Kafka's `Records.HEADER_SIZE_UP_TO_MAGIC`.
pub const HEADER_SIZE_UP_TO_MAGIC: usize = MAGIC_OFFSET + 1;
/// Smallest entry size field accepted (a magic-0 message with null key and value), Kafka's
/// `LegacyRecord.RECORD_OVERHEAD_V0`.
const MIN_ENTRY_SIZE: i32 = RECORD_OVERHEAD_V0 as i32;
/// Smallest encoded v2 record (length, attributes, timestamp delta, offset delta, key length,
/// value length, header count: one byte each); bounds preallocation from an untrusted count.
const MIN_RECORD_SIZE: usize = 7;

/// How entries are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Verify CRCs (default true, the consumer's `check.crcs`).
    pub verify_crc: bool,
    /// Bound on one batch's (or wrapper's) decompressed bytes (default
    /// [`DEFAULT_MAX_UNCOMPRESSED`], 256 MiB).
    pub max_uncompressed: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { verify_crc: true, max_uncompressed: DEFAULT_MAX_UNCOMPRESSED }
    }
}

/// A record header of a [`DecodedRecord`] (v2 only; legacy records have none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedHeader {
    /// Header key (UTF-8 in Kafka; not checked).
    pub key: Bytes,
    /// Header value, `None` when null.
    pub value: Option<Bytes>,
}

/// One record of any magic, owned: Kafka's `Record` as a consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Absolute offset.
    pub offset: i64,
    /// Timestamp in ms (the batch's or wrapper's for LogAppendTime); -1 for magic 0.
    pub timestamp: i64,
    /// How the timestamp was set; [`TimestampType::NoTimestampType`] for magic 0.
    pub timestamp_type: TimestampType,
    /// Key, `None` for a null key.
    pub key: Option<Bytes>,
    /// Value, `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order (always empty for magic 0/1).
    pub headers: Vec<DecodedHeader>,
}

/// One entry of a record set, decoded: a v2 batch, or a legacy entry (a single message or a
/// compressed wrapper) presented as Kafka's `RecordBatch` interface presents it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedBatch {
    /// Byte position of the entry in the record set.
    pub position: usize,
    /// Size in bytes including the 12-byte log overhead.
    pub size: usize,
    /// 0, 1 or 2.
    pub magic: i8,
    /// v2: the header's base offset; legacy: the first record's offset.
    pub base_offset: i64,
    /// v2: `base_offset + last_offset_delta`; legacy: the entry's offset (the last inner offset).
    pub last_offset: i64,
    /// The codec.
    pub compression: Compression,
    /// v2: attributes bit 3; legacy: as `LegacyRecord.timestampType`.
    pub timestamp_type: TimestampType,
    /// v2: the header's max timestamp; legacy: the (wrapper) message's timestamp, -1 for magic 0.
    pub max_timestamp: i64,
    /// v2 attributes bit 5; never for legacy.
    pub is_control: bool,
    /// v2 attributes bit 4; never for legacy.
    pub is_transactional: bool,
    /// -1 for legacy entries and non-idempotent producers.
    pub producer_id: i64,
    /// -1 when none.
    pub producer_epoch: i16,
    /// -1 when none.
    pub base_sequence: i32,
    /// -1 for legacy entries.
    pub partition_leader_epoch: i32,
    /// The records, with absolute offsets.
    pub records: Vec<DecodedRecord>,
}

impl DecodedBatch {
    /// The offset following this entry: `last_offset + 1` (also after control batches and
    /// batches compaction emptied).
    /// Exact for a decoded entry (the decoder refuses an entry whose next offset overflows,
    /// [`BatchError::InvalidOffsetRange`]); saturating for one built by hand.
    pub fn next_offset(&self) -> i64 {
        self.last_offset.saturating_add(1)
    }
}

/// Where the record set lives: borrowed (fields are copied once per batch into a [`Bytes`]), or
/// already in a [`Bytes`] (fields are zero-copy slices of it).
#[derive(Clone, Debug)]
enum Source<'a> {
    Borrowed(&'a [u8]),
    Shared(Bytes),
}

impl Source<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Source::Borrowed(b) => b,
            Source::Shared(b) => b,
        }
    }
}

/// Walks a record set of mixed magics entry by entry, yielding each entry decoded (or the error
/// that stopped the walk; nothing follows an error). See the module docs for where it stops.
#[derive(Clone, Debug)]
pub struct MixedBatches<'a> {
    source: Source<'a>,
    position: usize,
    options: DecodeOptions,
    partial: bool,
    failed: bool,
}

impl<'a> MixedBatches<'a> {
    /// Walks `bytes` with the default options (CRCs verified, 256 MiB decompression bound).
    pub fn new(bytes: &'a [u8]) -> Self {
        Self::with_options(bytes, DecodeOptions::default())
    }
    /// Walks `bytes` with `options`.
    pub fn with_options(bytes: &'a [u8], options: DecodeOptions) -> Self {
        MixedBatches { source: Source::Borrowed(bytes), position: 0, options, partial: false, failed: false }
    }
    /// Byte position of the next entry (after the walk: the bytes consumed).
    pub fn position(&self) -> usize {
        self.position
    }
    /// Whether the walk stopped at an entry cut by the end of the buffer (normal at the end of a
    /// fetch response).
    pub fn partial_tail(&self) -> bool {
        self.partial
    }
    /// Flattens the walk into records, skipping control batches as a consumer does.
    pub fn records(self) -> MixedRecords<'a> {
        MixedRecords { batches: self, current: Vec::new().into_iter(), include_control: false }
    }
    /// Flattens the walk into records, control batches' records included (for `log dump`).
    pub fn all_records(self) -> MixedRecords<'a> {
        MixedRecords { batches: self, current: Vec::new().into_iter(), include_control: true }
    }
}

impl MixedBatches<'static> {
    /// Walks a record set held in a [`Bytes`] (a fetch response buffer): keys, values and header
    /// values of uncompressed entries are slices of it, without copying.
    pub fn shared(bytes: Bytes, options: DecodeOptions) -> Self {
        MixedBatches { source: Source::Shared(bytes), position: 0, options, partial: false, failed: false }
    }
}

impl Iterator for MixedBatches<'_> {
    type Item = Result<DecodedBatch, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.partial {
            return None;
        }
        let all = self.source.as_slice();
        let rest = &all[self.position..];
        if rest.is_empty() {
            return None;
        }
        if rest.len() < LOG_OVERHEAD {
            self.partial = true;
            return None;
        }
        let size = be_i32(rest, 8);
        if size < MIN_ENTRY_SIZE {
            self.failed = true;
            return Some(Err(BatchError::InvalidLength {
                base_offset: be_i64(rest, 0),
                length: size,
                min: MIN_ENTRY_SIZE,
                max: i32::MAX,
            }));
        }
        let total = LOG_OVERHEAD + size as usize;
        if rest.len() < HEADER_SIZE_UP_TO_MAGIC || rest.len() < total {
            self.partial = true;
            return None;
        }
        let entry = &rest[..total];
        let result = match &self.source {
            Source::Borrowed(_) => decode_entry_at(entry, self.position, self.options, &Bytes::copy_from_slice),
            Source::Shared(shared) => {
                decode_entry_at(entry, self.position, self.options, &|s: &[u8]| shared.slice_ref(s))
            }
        };
        match result {
            Ok(b) => {
                self.position += total;
                Some(Ok(b))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The records of a [`MixedBatches`] walk, flattened; see [`MixedBatches::records`].
#[derive(Debug)]
pub struct MixedRecords<'a> {
    batches: MixedBatches<'a>,
    current: std::vec::IntoIter<DecodedRecord>,
    include_control: bool,
}

impl<'a> MixedRecords<'a> {
    /// The underlying walk (for [`MixedBatches::partial_tail`] and [`MixedBatches::position`]).
    pub fn batches(&self) -> &MixedBatches<'a> {
        &self.batches
    }
}

impl Iterator for MixedRecords<'_> {
    type Item = Result<DecodedRecord, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.current.next() {
                return Some(Ok(r));
            }
            match self.batches.next()? {
                Err(e) => return Some(Err(e)),
                Ok(b) if b.is_control && !self.include_control => continue,
                Ok(b) => self.current = b.records.into_iter(),
            }
        }
    }
}

/// Decodes every data record of a record set (control batches skipped, CRCs verified, default
/// bound), stopping silently at a partial trailing entry.
///
/// Errors: the first error of the walk (see [`decode_entry`]).
pub fn decode_records(bytes: &[u8]) -> Result<Vec<DecodedRecord>, BatchError> {
    MixedBatches::new(bytes).records().collect()
}

/// Decodes the single entry (v2 batch or legacy entry) at the start of `entry`; bytes after it
/// are ignored. `position` is reported back in [`DecodedBatch::position`].
///
/// Errors: [`BatchError::Truncated`], [`BatchError::InvalidLength`],
/// [`BatchError::UnsupportedMagic`] (not 0, 1, 2), [`BatchError::CrcMismatch`] (when verifying),
/// [`BatchError::UnknownCodec`], [`BatchError::Compression`], [`BatchError::InvalidRecord`]
/// (including a v2 batch whose records do not fill its records section exactly, Kafka's
/// "Incorrect declared batch size").
pub fn decode_entry(entry: &[u8], position: usize, options: DecodeOptions) -> Result<DecodedBatch, BatchError> {
    decode_entry_at(entry, position, options, &Bytes::copy_from_slice)
}

/// The records of the single entry (any magic) at the start of `entry`, control records
/// included, CRCs not verified, default decompression bound: what `LogSegment.findOffsetByTimestamp`
/// iterates.
///
/// Errors: as [`decode_entry`] except CRC mismatches.
pub fn records_of_entry(entry: &[u8]) -> Result<Vec<DecodedRecord>, BatchError> {
    let options = DecodeOptions { verify_crc: false, ..DecodeOptions::default() };
    Ok(decode_entry(entry, 0, options)?.records)
}

fn decode_entry_at(
    entry: &[u8],
    position: usize,
    options: DecodeOptions,
    to_bytes: &dyn Fn(&[u8]) -> Bytes,
) -> Result<DecodedBatch, BatchError> {
    let (base_offset, _, magic) = BatchHeader::peek(entry)?;
    match magic {
        MAGIC_V2 => decode_v2(entry, position, options, to_bytes),
        MAGIC_V0 | MAGIC_V1 => decode_legacy(entry, position, options, to_bytes),
        magic => Err(BatchError::UnsupportedMagic { base_offset, magic }),
    }
}

fn decode_v2(
    entry: &[u8],
    position: usize,
    options: DecodeOptions,
    to_bytes: &dyn Fn(&[u8]) -> Bytes,
) -> Result<DecodedBatch, BatchError> {
    let batch = RecordBatch::parse(entry)?;
    if options.verify_crc {
        batch.verify_crc()?;
    }
    let header = *batch.header();
    let attributes = header.attributes;
    let compression = attributes.compression()?;
    // One buffer per batch; record fields are slices of it.
    let data: Bytes = match compression {
        Compression::None => to_bytes(batch.records_section()),
        codec => codec
            .decompress(batch.records_section(), options.max_uncompressed)
            .map_err(|source| BatchError::Compression { codec, source })?
            .into(),
    };
    let count = header.records_count.max(0) as usize;
    let mut records = Vec::with_capacity(count.min(data.len() / MIN_RECORD_SIZE + 1));
    let mut consumed = 0usize;
    let timestamp_type =
        if attributes.is_log_append_time() { TimestampType::LogAppendTime } else { TimestampType::CreateTime };
    for r in RecordIter::new(&header, &data) {
        let r = r?;
        consumed += r.size_in_bytes;
        records.push(DecodedRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            timestamp_type,
            key: r.key.map(|k| data.slice_ref(k)),
            value: r.value.map(|v| data.slice_ref(v)),
            headers: r
                .headers
                .iter()
                .map(|h| DecodedHeader { key: data.slice_ref(h.key), value: h.value.map(|v| data.slice_ref(v)) })
                .collect(),
        });
    }
    if consumed != data.len() {
        return Err(BatchError::InvalidRecord {
            base_offset: header.base_offset,
            index: records.len(),
            reason: format!(
                "incorrect declared batch size: {} bytes remain after the {} declared records",
                data.len() - consumed,
                count
            ),
        });
    }
    Ok(DecodedBatch {
        position,
        size: batch.as_bytes().len(),
        magic: MAGIC_V2,
        base_offset: header.base_offset,
        last_offset: header.last_offset(),
        compression,
        timestamp_type,
        max_timestamp: header.max_timestamp,
        is_control: attributes.is_control(),
        is_transactional: attributes.is_transactional(),
        producer_id: header.producer_id,
        producer_epoch: header.producer_epoch,
        base_sequence: header.base_sequence,
        partition_leader_epoch: header.partition_leader_epoch,
        records,
    })
}

fn decode_legacy(
    entry: &[u8],
    position: usize,
    options: DecodeOptions,
    to_bytes: &dyn Fn(&[u8]) -> Bytes,
) -> Result<DecodedBatch, BatchError> {
    let message = LegacyMessage::parse(entry)?;
    if options.verify_crc {
        message.verify_crc()?;
    }
    let compression = message.compression()?;
    let inner = message.deep_records_with(options.max_uncompressed, to_bytes)?;
    let mut records = Vec::with_capacity(inner.len());
    for r in inner {
        if options.verify_crc && compression != Compression::None {
            r.verify_crc()?;
        }
        records.push(from_legacy(r));
    }
    Ok(DecodedBatch {
        position,
        size: message.total_size(),
        magic: message.magic,
        base_offset: records.first().map_or(message.offset, |r| r.offset),
        last_offset: message.offset,
        compression,
        timestamp_type: message.timestamp_type(),
        max_timestamp: message.timestamp.unwrap_or(NO_TIMESTAMP),
        is_control: false,
        is_transactional: false,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        records,
    })
}

fn from_legacy(r: LegacyRecord) -> DecodedRecord {
    DecodedRecord {
        offset: r.offset,
        timestamp: r.timestamp.unwrap_or(NO_TIMESTAMP),
        timestamp_type: r.timestamp_type,
        key: r.key,
        value: r.value,
        headers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::builder::BatchBuilder;
    use super::super::legacy::encode::{entry, wrapper};
    use super::super::record::Header;
    use super::*;

    fn v2(base: i64, codec: Compression, keys: &[&str]) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, codec);
        for k in keys {
            b.append(1000, Some(k.as_bytes()), Some(b"value"), &[Header { key: b"h", value: Some(b"hv") }]);
        }
        b.build().unwrap()
    }

    fn keys(records: &[DecodedRecord]) -> Vec<String> {
        records.iter().map(|r| String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap()).collect()
    }

    /// A v2 gzip batch, magic-1 messages, a magic-1 snappy wrapper, a magic-0 message: one set.
    fn mixed_set() -> Vec<u8> {
        let mut set = v2(0, Compression::Gzip, &["alpha", "beta"]);
        entry(&mut set, 2, 1, 0, 2000, Some(b"gamma"), Some(b"v"));
        entry(&mut set, 3, 1, 0, 2001, Some(b"delta"), Some(b"v"));
        let mut inner = Vec::new();
        entry(&mut inner, 0, 1, 0, 3000, Some(b"epsilon"), Some(b"v"));
        entry(&mut inner, 1, 1, 0, 3001, Some(b"zeta"), Some(b"v"));
        wrapper(&mut set, 5, 1, Compression::Snappy, false, 3001, &inner);
        entry(&mut set, 6, 0, 0, 0, Some(b"eta"), None);
        set
    }

    /// Legacy entries whose offsets overflow: refused by [`LegacyMessage`] and by the mixed decoder.
    #[test]
    fn offsets_that_overflow_are_errors_not_wrapped_numbers() {
        const MAX: usize = 1 << 20;
        // An entry at i64::MAX has no next offset.
        let mut b = Vec::new();
        entry(&mut b, i64::MAX, 1, 0, 0, None, Some(b"v"));
        assert!(matches!(LegacyMessage::parse(&b), Err(BatchError::InvalidOffsetRange { base_offset: i64::MAX, .. })));
        assert!(decode_entry(&b, 0, Default::default()).is_err());
        // A magic-1 wrapper at i64::MAX - 1 whose last inner offset is -2: the absolute base
        // (wrapper - last inner) overflows.
        let mut inner = Vec::new();
        entry(&mut inner, -3, 1, 0, 5, None, Some(b"a"));
        entry(&mut inner, -2, 1, 0, 5, None, Some(b"b"));
        let mut w = Vec::new();
        wrapper(&mut w, i64::MAX - 1, 1, Compression::Gzip, false, 5, &inner);
        let m = LegacyMessage::parse(&w).unwrap();
        let err = m.deep_records(MAX).unwrap_err();
        assert!(matches!(&err, BatchError::InvalidRecord { reason, .. } if reason.contains("overflows")), "{err}");
        // A base that fits but an inner offset that takes it past i64::MAX.
        let mut inner = Vec::new();
        entry(&mut inner, i64::MAX - 1, 1, 0, 5, None, Some(b"a"));
        entry(&mut inner, 0, 1, 0, 5, None, Some(b"b"));
        let mut w = Vec::new();
        wrapper(&mut w, 10, 1, Compression::Gzip, false, 5, &inner);
        let err = LegacyMessage::parse(&w).unwrap().deep_records(MAX).unwrap_err();
        assert!(matches!(&err, BatchError::InvalidRecord { index: 0, .. }), "{err}");
    }

    #[test]
    fn walks_mixed_magics() {
        let set = mixed_set();
        let batches: Vec<_> = MixedBatches::new(&set).collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.iter().map(|b| b.magic).collect::<Vec<_>>(), vec![2, 1, 1, 1, 0]);
        assert_eq!(
            batches.iter().map(|b| (b.base_offset, b.last_offset)).collect::<Vec<_>>(),
            vec![(0, 1), (2, 2), (3, 3), (4, 5), (6, 6)]
        );
        assert_eq!(batches[0].compression, Compression::Gzip);
        assert_eq!(batches[3].compression, Compression::Snappy);
        assert_eq!(batches.iter().map(|b| b.size).sum::<usize>(), set.len());
        assert_eq!(batches[4].next_offset(), 7);
        let records = decode_records(&set).unwrap();
        assert_eq!(keys(&records), vec!["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]);
        assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
        assert_eq!(records[0].headers, vec![DecodedHeader { key: Bytes::from_static(b"h"), value: Some("hv".into()) }]);
        assert_eq!(records[0].timestamp_type, TimestampType::CreateTime);
        assert_eq!((records[4].timestamp, records[5].timestamp), (3000, 3001));
        assert_eq!((records[6].timestamp, records[6].timestamp_type), (-1, TimestampType::NoTimestampType));
        assert_eq!(records[6].value, None);
        // The shared source gives the same records.
        let shared: Vec<_> = MixedBatches::shared(Bytes::from(set.clone()), DecodeOptions::default())
            .records()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(shared, records);
        // records_of_entry on each entry.
        let mut pos = 0;
        let mut all = Vec::new();
        for b in &batches {
            all.extend(records_of_entry(&set[pos..pos + b.size]).unwrap());
            pos += b.size;
        }
        assert_eq!(all, records);
    }

    #[test]
    fn partial_tail_stops_quietly() {
        let set = mixed_set();
        let full: Vec<_> = MixedBatches::new(&set).collect::<Result<_, _>>().unwrap();
        for cut in 0..set.len() {
            let mut walk = MixedBatches::new(&set[..cut]);
            let got: Vec<_> = walk.by_ref().collect::<Result<_, _>>().unwrap();
            let expected = full.iter().take_while(|b| b.position + b.size <= cut).count();
            assert_eq!(got.len(), expected, "cut {cut}");
            assert_eq!(walk.partial_tail(), walk.position() != cut, "cut {cut}");
        }
    }

    #[test]
    fn crc_errors_and_bad_sizes() {
        let set = mixed_set();
        // Flip a byte in the legacy message at position of the first magic-1 entry's value.
        let first = MixedBatches::new(&set).next().unwrap().unwrap();
        let mut bad = set.clone();
        let at = first.size + 12 + 22 + 5; // the value byte of "gamma"'s message
        bad[at] ^= 0x01;
        let err = decode_records(&bad).unwrap_err();
        assert!(matches!(err, BatchError::CrcMismatch { base_offset: 2, .. }), "{err}");
        let lenient = DecodeOptions { verify_crc: false, ..DecodeOptions::default() };
        assert_eq!(MixedBatches::with_options(&bad, lenient).records().count(), 7);
        // Size below 14 is corrupt, not partial.
        let mut small = set.clone();
        small[8..12].copy_from_slice(&13i32.to_be_bytes());
        assert!(matches!(decode_records(&small), Err(BatchError::InvalidLength { length: 13, .. })));
        // Unknown magic.
        let mut m3 = set.clone();
        m3[16] = 3;
        assert!(matches!(decode_records(&m3), Err(BatchError::UnsupportedMagic { magic: 3, .. })));
        // Nothing follows an error.
        let mut walk = MixedBatches::new(&m3);
        assert!(walk.next().unwrap().is_err());
        assert!(walk.next().is_none());
    }

    #[test]
    fn control_batches_are_skipped_by_records() {
        let mut set = v2(0, Compression::None, &["a"]);
        let mut ctl = BatchBuilder::new(1, Compression::None).control(true);
        ctl.append(1, Some(&[0, 0, 0, 0]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
        set.extend(ctl.build().unwrap());
        set.extend(v2(2, Compression::Lz4, &["b"]));
        assert_eq!(keys(&decode_records(&set).unwrap()), vec!["a", "b"]);
        let all: Vec<_> = MixedBatches::new(&set).all_records().collect::<Result<_, _>>().unwrap();
        assert_eq!(all.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1, 2]);
        let batches: Vec<_> = MixedBatches::new(&set).collect::<Result<_, _>>().unwrap();
        assert!(batches[1].is_control && !batches[0].is_control);
    }

    #[test]
    fn declared_count_must_match_the_records_section() {
        let mut b = v2(0, Compression::None, &["a", "b"]);
        // Declare one record: a record's worth of bytes remains.
        b[57..61].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let e = decode_records(&b).unwrap_err();
        assert!(e.to_string().contains("incorrect declared batch size"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let lenient = DecodeOptions { verify_crc: false, max_uncompressed: 1 << 16 };
            for r in MixedBatches::with_options(&bytes, lenient) {
                if r.is_err() { break; }
            }
        }

        #[test]
        fn flipped_bit_in_a_mixed_set_is_detected(pos in 0usize..10_000, bit in 0u8..8) {
            let set = mixed_set();
            let pos = pos % set.len();
            let mut bad = set.clone();
            bad[pos] ^= 1 << bit;
            // Either an error, a shorter walk (a size field grew past the end), or -- when the
            // flip hit a field no CRC covers (offset, v2 partition leader epoch) -- a different
            // decoded value.
            let good: Vec<_> = MixedBatches::new(&set).collect::<Result<_, _>>().unwrap();
            if let Ok(batches) = MixedBatches::new(&bad).collect::<Result<Vec<_>, _>>() {
                proptest::prop_assert_ne!(batches, good);
            }
        }
    }
}
