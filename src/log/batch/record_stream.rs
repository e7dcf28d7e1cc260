//! [`RecordStream`]: the records of a v2 batch walked with bounded memory, Kafka's
//! `DefaultRecordBatch.skipKeyValueIterator` (`compressedIterator` over a streaming decompressor,
//! `PartialDefaultRecord.readPartiallyFrom`), and [`PartialRecord`], what such a walk decodes.
//!
//! [`RecordBatch::records`](super::RecordBatch::records) decompresses a whole batch into one
//! buffer: an 8 KiB zstd batch that inflates to 250 MiB costs 250 MiB. This walk reads the
//! decompressor's output through a 16 KiB buffer and decodes each record's fields as they stream
//! past, skipping keys, values and header bytes without keeping them: its memory is the buffer plus
//! the codec's own state (see [`Compression::decompressor`]), whatever the batch inflates to and
//! however long its records are. Uncompressed batches are walked in place, as
//! [`Records::iter`](super::Records::iter) walks them.
//!
//! The walk accepts and rejects exactly what the whole-buffer walk does, with the same
//! [`BatchError`]s: a whole-buffer walk decompresses everything before it looks at a record, so a
//! codec failure or output beyond `max_uncompressed` anywhere in the batch is its error, before any
//! record error; and a record whose length runs past the end of the decompressed data is reported
//! as such before anything inside it. So when the streaming walk meets an error (its own or its
//! caller's, [`RecordStream::walk`]) it reads the rest of the stream, discarding it, and reports
//! a codec error found there instead, or the record's length error once the stream's length is
//! known.

use std::io::{self, Read};

use super::compression::{limit_exceeded, Compression, Decompressor};
use super::error::BatchError;
use super::header::BatchHeader;
use super::record::{read_varint, read_varlong, Record, RecordIter};
use super::record_batch::RecordBatch;

/// Bytes of decompressed output buffered at a time.
const STREAM_BUFFER: usize = 16 * 1024;

/// One record of a v2 batch without its key, value and headers (their lengths only), Kafka's
/// `PartialDefaultRecord`: what a validation of the batch needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialRecord {
    /// Absolute offset: batch base offset + offset delta.
    pub offset: i64,
    /// Absolute timestamp in ms (the batch max timestamp for LogAppendTime batches), as
    /// [`Record::timestamp`].
    pub timestamp: i64,
    /// The record's attributes byte (unused by Kafka, 0).
    pub attributes: i8,
    /// Key length in bytes, `None` for a null key.
    pub key_len: Option<usize>,
    /// Value length in bytes, `None` for a null value.
    pub value_len: Option<usize>,
    /// Number of headers.
    pub headers: usize,
    /// Encoded size of the record including its length varint.
    pub size_in_bytes: usize,
}

impl PartialRecord {
    /// Whether the key is not null (Kafka's `hasKey`).
    pub fn has_key(&self) -> bool {
        self.key_len.is_some()
    }
}

impl From<&Record<'_>> for PartialRecord {
    fn from(r: &Record<'_>) -> Self {
        PartialRecord {
            offset: r.offset,
            timestamp: r.timestamp,
            attributes: r.attributes,
            key_len: r.key.map(<[u8]>::len),
            value_len: r.value.map(<[u8]>::len),
            headers: r.headers.len(),
            size_in_bytes: r.size_in_bytes,
        }
    }
}

/// The records of one v2 batch walked with bounded memory; see the module docs. Made by
/// [`RecordStream::new`], consumed by [`RecordStream::walk`].
pub struct RecordStream<'a> {
    header: BatchHeader,
    inner: Inner<'a>,
    /// Records decoded so far.
    index: usize,
    /// An error was returned: the walk is over.
    failed: bool,
}

enum Inner<'a> {
    /// Uncompressed: the records section walked in place.
    InPlace { iter: RecordIter<'a>, len: usize, consumed: usize },
    /// Compressed: decoded from the stream.
    Stream(Box<Source<'a>>),
}

impl<'a> RecordStream<'a> {
    /// Starts a walk over `batch`'s records, decompressing as it goes with at most
    /// `max_uncompressed` bytes of output in all (the limit of
    /// [`RecordBatch::records_with_limit`]; nothing of that size is allocated).
    ///
    /// Errors: [`BatchError::UnknownCodec`]; [`BatchError::Compression`] for a frame or stream
    /// header the codec refuses (as [`RecordBatch::records_with_limit`] would report it).
    pub fn new(batch: &RecordBatch<'a>, max_uncompressed: usize) -> Result<Self, BatchError> {
        let header = *batch.header();
        let codec = header.attributes.compression()?;
        let section = batch.records_section();
        let inner = match codec {
            Compression::None => {
                Inner::InPlace { iter: RecordIter::new(&header, section), len: section.len(), consumed: 0 }
            }
            c => {
                let decoder = c
                    .decompressor(section, header.magic, max_uncompressed)
                    .map_err(|source| BatchError::Compression { codec: c, source })?;
                Inner::Stream(Box::new(Source {
                    codec: c,
                    decoder,
                    buf: vec![0; STREAM_BUFFER].into_boxed_slice(),
                    pos: 0,
                    end: 0,
                    produced: 0,
                    max_output: max_uncompressed,
                    eof: false,
                    current: None,
                }))
            }
        };
        Ok(RecordStream { header, inner, index: 0, failed: false })
    }

    /// Walks the batch's `records_count` records in order, calling `f(index, record)` for each,
    /// then reads what is left of the records section. Returns the number of bytes left after the
    /// declared records (0 for a well-formed batch; what
    /// [`Records::data`](super::Records::data)`().len()` minus the records' sizes would be).
    ///
    /// Errors: the first of, in the order a whole-buffer walk
    /// ([`RecordBatch::records_with_limit`], then [`Records::iter`](super::Records::iter), then `f`)
    /// would find them: [`BatchError::Compression`] for a codec failure or output above
    /// `max_uncompressed` anywhere in the section; [`BatchError::InvalidRecord`] for a malformed
    /// record (the same reasons as [`Records::iter`](super::Records::iter)); the error `f`
    /// returned for a record.
    pub fn walk(
        mut self,
        mut f: impl FnMut(usize, &PartialRecord) -> Result<(), BatchError>,
    ) -> Result<usize, BatchError> {
        while let Some(record) = self.next_record() {
            let record = record?;
            if let Err(e) = f(self.index - 1, &record) {
                return Err(self.fail(e));
            }
        }
        self.finish()
    }

    /// The next record, or the error that ends the walk (resolved as the whole-buffer walk would
    /// report it); `None` after `records_count` records or an error.
    fn next_record(&mut self) -> Option<Result<PartialRecord, BatchError>> {
        if self.failed || self.index >= self.header.records_count.max(0) as usize {
            return None;
        }
        let index = self.index;
        self.index += 1;
        let result = match &mut self.inner {
            Inner::InPlace { iter, consumed, .. } => match iter.next()? {
                Ok(r) => {
                    *consumed += r.size_in_bytes;
                    Ok(PartialRecord::from(&r))
                }
                Err(e) => Err(e),
            },
            Inner::Stream(source) => {
                source.decode_record(&self.header).map_err(|fault| source.resolve(fault, &self.header, index))
            }
        };
        self.failed = result.is_err();
        Some(result)
    }

    /// Reads the rest of the section; the bytes left after the records decoded.
    fn finish(self) -> Result<usize, BatchError> {
        match self.inner {
            Inner::InPlace { len, consumed, .. } => Ok(len - consumed),
            Inner::Stream(mut source) => {
                let at = source.consumed();
                source.drain().map_err(|e| source.codec_error(e))?;
                Ok(source.produced - at)
            }
        }
    }

    /// The error to report for `err`, found by the caller on a record: a codec error in the rest
    /// of the section comes first.
    fn fail(self, err: BatchError) -> BatchError {
        match self.inner {
            Inner::InPlace { .. } => err,
            Inner::Stream(mut source) => match source.drain() {
                Ok(()) => err,
                Err(e) => source.codec_error(e),
            },
        }
    }
}

/// Why decoding a record from the stream stopped, before [`Source::resolve`] turns it into the
/// error a whole-buffer walk reports.
enum Fault {
    /// The decoder failed (or exceeded the limit).
    Codec(io::Error),
    /// The stream ended inside the record, or its length is negative: a length error.
    Length,
    /// The record is malformed (the reason, as [`RecordIter`] words it).
    Record(String),
}

impl Fault {
    fn record(reason: impl Into<String>) -> Self {
        Fault::Record(reason.into())
    }

    /// A field's error with the field named in front, as [`RecordIter`] words it.
    fn in_field(self, field: impl FnOnce() -> String) -> Self {
        match self {
            Fault::Record(reason) => Fault::Record(format!("{}: {reason}", field())),
            other => other,
        }
    }
}

/// A decompressor's output, buffered [`STREAM_BUFFER`] bytes at a time, counted against the
/// limit.
struct Source<'a> {
    codec: Compression,
    decoder: Decompressor<'a>,
    buf: Box<[u8]>,
    /// The unread bytes of `buf` are `pos..end`.
    pos: usize,
    end: usize,
    /// Bytes the decoder produced so far.
    produced: usize,
    max_output: usize,
    /// The decoder returned its end (it is not read again).
    eof: bool,
    /// The record being decoded: its length field and the stream position after it.
    current: Option<(i32, usize)>,
}

impl Source<'_> {
    /// Bytes of the stream consumed so far.
    fn consumed(&self) -> usize {
        self.produced - (self.end - self.pos)
    }

    fn codec_error(&self, source: io::Error) -> BatchError {
        BatchError::Compression { codec: self.codec, source }
    }

    /// Makes at least one byte available; `Ok(false)` at the end of the stream. Errors: the
    /// decoder's, or [`limit_exceeded`] once the output exceeds `max_output`.
    fn fill(&mut self) -> io::Result<bool> {
        if self.pos < self.end {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        loop {
            match self.decoder.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.produced += n;
                    if self.produced > self.max_output {
                        return Err(limit_exceeded(self.codec, self.max_output));
                    }
                    (self.pos, self.end) = (0, n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next byte, `None` at the end of the stream.
    fn byte(&mut self) -> io::Result<Option<u8>> {
        if !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    /// Skips up to `n` bytes; returns how many were skipped (fewer only at the end of the stream).
    fn skip(&mut self, n: usize) -> io::Result<usize> {
        let mut skipped = 0;
        while skipped < n && self.fill()? {
            let step = (self.end - self.pos).min(n - skipped);
            self.pos += step;
            skipped += step;
        }
        Ok(skipped)
    }

    /// Reads the stream to its end, discarding it.
    fn drain(&mut self) -> io::Result<()> {
        self.skip(usize::MAX).map(drop)
    }

    /// Reads a varint of at most `max_len` bytes from the stream (the outer record length):
    /// `None` when the stream ends first or the varint is longer.
    fn raw_varint(&mut self, max_len: usize) -> Result<Option<([u8; 10], usize)>, Fault> {
        let mut bytes = [0u8; 10];
        for (i, slot) in bytes.iter_mut().enumerate().take(max_len) {
            match self.byte().map_err(Fault::Codec)? {
                None => return Ok(None),
                Some(b) => {
                    *slot = b;
                    if b & 0x80 == 0 {
                        return Ok(Some((bytes, i + 1)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Decodes the next record as [`RecordIter`] does, without keeping its key, value or headers.
    fn decode_record(&mut self, header: &BatchHeader) -> Result<PartialRecord, Fault> {
        self.current = None;
        let start = self.consumed();
        let len = match self.raw_varint(5)? {
            Some((bytes, n)) => read_varint(&bytes[..n]).map(|(v, _)| v),
            None => None,
        };
        let len = len.ok_or_else(|| Fault::record("truncated length"))?;
        self.current = Some((len, self.consumed()));
        if len < 0 {
            return Err(Fault::Length);
        }
        let mut body = Body { src: self, left: len as usize };
        let attributes = body.u8()?.ok_or_else(|| Fault::record("truncated attributes"))? as i8;
        let ts_delta = body.varlong()?.ok_or_else(|| Fault::record("truncated timestamp delta"))?;
        let off_delta = body.varint()?.ok_or_else(|| Fault::record("truncated offset delta"))?;
        let key_len = body.nullable().map_err(|f| f.in_field(|| "key".into()))?;
        let value_len = body.nullable().map_err(|f| f.in_field(|| "value".into()))?;
        let n_headers = body.varint()?.ok_or_else(|| Fault::record("truncated header count"))?;
        if n_headers < 0 {
            return Err(Fault::record(format!("negative header count {n_headers}")));
        }
        for i in 0..n_headers {
            body.nullable()
                .map_err(|f| f.in_field(|| format!("header {i} key")))?
                .ok_or_else(|| Fault::record(format!("header {i} has a null key")))?;
            body.nullable().map_err(|f| f.in_field(|| format!("header {i} value")))?;
        }
        if body.left != 0 {
            return Err(Fault::record(format!("{} unread bytes at the end of the record", body.left)));
        }
        let timestamp = if header.attributes.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.checked_add(ts_delta).ok_or_else(|| {
                Fault::record(format!(
                    "timestamp delta {ts_delta} overflows the base timestamp {}",
                    header.base_timestamp
                ))
            })?
        };
        let offset = header
            .base_offset
            .checked_add(i64::from(off_delta))
            .ok_or_else(|| Fault::record(format!("offset delta {off_delta} overflows the base offset")))?;
        Ok(PartialRecord {
            offset,
            timestamp,
            attributes,
            key_len,
            value_len,
            headers: n_headers as usize,
            size_in_bytes: self.consumed() - start,
        })
    }

    /// The error a whole-buffer walk reports for `fault` on record `index`: the stream is read to
    /// its end first, so that a codec error anywhere in it, or a record length beyond its end,
    /// comes first (the whole-buffer walk checks a record's length before its fields).
    fn resolve(&mut self, fault: Fault, header: &BatchHeader, index: usize) -> BatchError {
        let invalid = |reason: String| BatchError::InvalidRecord { base_offset: header.base_offset, index, reason };
        let reason = match fault {
            Fault::Codec(e) => return self.codec_error(e),
            Fault::Length => None,
            Fault::Record(reason) => Some(reason),
        };
        if let Err(e) = self.drain() {
            return self.codec_error(e);
        }
        if let Some((len, body_start)) = self.current {
            let left = self.produced - body_start;
            if len < 0 || len as usize > left || reason.is_none() {
                return invalid(format!("record length {len} exceeds the {left} bytes left"));
            }
        }
        invalid(reason.unwrap_or_default())
    }
}

/// The body of one record in the stream: reads stop at its end (`left` bytes on), as
/// [`RecordIter`]'s reads stop at the end of the record's slice.
struct Body<'s, 'a> {
    src: &'s mut Source<'a>,
    left: usize,
}

impl Body<'_, '_> {
    /// The next byte, `None` at the end of the body; [`Fault::Length`] if the stream ends first.
    fn u8(&mut self) -> Result<Option<u8>, Fault> {
        if self.left == 0 {
            return Ok(None);
        }
        match self.src.byte().map_err(Fault::Codec)? {
            None => Err(Fault::Length),
            Some(b) => {
                self.left -= 1;
                Ok(Some(b))
            }
        }
    }

    /// The bytes of a varint of at most `max_len` bytes, `None` when the body ends first.
    fn raw_varint(&mut self, max_len: usize) -> Result<Option<([u8; 10], usize)>, Fault> {
        let mut bytes = [0u8; 10];
        for (i, slot) in bytes.iter_mut().enumerate().take(max_len) {
            match self.u8()? {
                None => return Ok(None),
                Some(b) => {
                    *slot = b;
                    if b & 0x80 == 0 {
                        return Ok(Some((bytes, i + 1)));
                    }
                }
            }
        }
        // `max_len` bytes, all with the continuation bit: too long, as `read_varint` says.
        Ok(Some((bytes, max_len)))
    }

    fn varint(&mut self) -> Result<Option<i32>, Fault> {
        Ok(self.raw_varint(5)?.and_then(|(b, n)| read_varint(&b[..n])).map(|(v, _)| v))
    }

    fn varlong(&mut self) -> Result<Option<i64>, Fault> {
        Ok(self.raw_varint(10)?.and_then(|(b, n)| read_varlong(&b[..n])).map(|(v, _)| v))
    }

    /// A nullable byte field, skipped: its length (`None` for -1). Errors as `RecordIter`'s.
    fn nullable(&mut self) -> Result<Option<usize>, Fault> {
        let len = self.varint()?.ok_or_else(|| Fault::record("truncated length"))?;
        if len < -1 {
            return Err(Fault::record(format!("invalid length {len}")));
        }
        if len == -1 {
            return Ok(None);
        }
        let len = len as usize;
        if len > self.left {
            return Err(Fault::record(format!("length {len} exceeds the {} bytes left", self.left)));
        }
        if self.src.skip(len).map_err(Fault::Codec)? < len {
            return Err(Fault::Length);
        }
        self.left -= len;
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::compression::DEFAULT_MAX_UNCOMPRESSED;
    use super::super::header::{Attributes, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2};
    use super::super::record::{encode_record, Header};
    use super::*;

    /// What a walk found: every record and the bytes after them, or its error (Debug: variant,
    /// fields, the codec error's kind and message).
    type Outcome = Result<(Vec<PartialRecord>, usize), String>;

    /// The error a caller returns for record `index` (the validator's rules).
    fn caller_error(index: usize) -> BatchError {
        BatchError::InvalidRecord { base_offset: 0, index, reason: "refused by the caller".into() }
    }

    /// The whole-buffer walk, as the validator did it before: decompress, iterate, call the
    /// caller's check (failing at `fail_at`), count what is left.
    fn whole(bytes: &[u8], max: usize, fail_at: Option<usize>) -> Outcome {
        let batch = RecordBatch::parse(bytes).unwrap();
        let run = || -> Result<_, BatchError> {
            let records = batch.records_with_limit(max)?;
            let (mut out, mut consumed) = (Vec::new(), 0);
            for (i, r) in records.iter().enumerate() {
                let r = r?;
                consumed += r.size_in_bytes;
                if fail_at == Some(i) {
                    return Err(caller_error(i));
                }
                out.push(PartialRecord::from(&r));
            }
            Ok((out, records.data().len() - consumed))
        };
        run().map_err(|e| format!("{e:?}"))
    }

    /// The streaming walk, same caller.
    fn streamed(bytes: &[u8], max: usize, fail_at: Option<usize>) -> Outcome {
        let batch = RecordBatch::parse(bytes).unwrap();
        let mut out = Vec::new();
        RecordStream::new(&batch, max)
            .and_then(|s| {
                s.walk(|i, r| {
                    if fail_at == Some(i) {
                        return Err(caller_error(i));
                    }
                    out.push(*r);
                    Ok(())
                })
            })
            .map(|left| (out, left))
            .map_err(|e| format!("{e:?}"))
    }

    fn assert_same(bytes: &[u8], max: usize, fail_at: Option<usize>) -> Outcome {
        let old = whole(bytes, max, fail_at);
        let new = streamed(bytes, max, fail_at);
        assert_eq!(new, old, "max {max}, caller fails at {fail_at:?}");
        old
    }

    /// A v2 batch around an already encoded (and compressed) records section; CRC computed.
    fn batch(codec: Compression, records_count: i32, section: &[u8], log_append_time: bool) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_SIZE];
        out.extend_from_slice(section);
        let header = BatchHeader {
            base_offset: 1000,
            batch_length: (out.len() - LOG_OVERHEAD) as i32,
            partition_leader_epoch: 0,
            magic: MAGIC_V2,
            crc: 0,
            attributes: Attributes::default().with_compression(codec).with_log_append_time(log_append_time),
            last_offset_delta: (records_count - 1).max(0),
            base_timestamp: 1_700_000_000_000,
            max_timestamp: 1_700_000_000_500,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count,
        };
        header.encode(&mut out);
        let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Bytes that compress somewhat: a pattern with noise from `seed`.
    fn filler(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(4) {
                    x as u8
                } else {
                    b"kafka-record-"[i % 13]
                }
            })
            .collect()
    }

    /// One record's shape: key length (None: null), value length (None: null), header count.
    type Shape = (Option<usize>, Option<usize>, usize);

    /// The uncompressed records section of records shaped as `shapes`.
    fn section(shapes: &[Shape]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &(key, value, headers)) in shapes.iter().enumerate() {
            let key = key.map(|n| filler(n, i as u64 * 7 + 1));
            let value = value.map(|n| filler(n, i as u64 * 7 + 2));
            let names: Vec<String> = (0..headers).map(|h| format!("h{h}")).collect();
            let headers: Vec<Header<'_>> = names
                .iter()
                .enumerate()
                .map(|(h, n)| Header { key: n.as_bytes(), value: (h % 2 == 0).then_some(&b"header value"[..]) })
                .collect();
            encode_record(&mut out, i as i32, i as i64 * 3, key.as_deref(), value.as_deref(), &headers);
        }
        out
    }

    const CODECS: [Compression; 5] = Compression::ALL;

    #[test]
    fn well_formed_batches_walk_to_the_same_records() {
        let shapes: Vec<Shape> = vec![
            (Some(3), Some(10), 0),
            (None, Some(0), 2),
            (Some(0), None, 1),
            (Some(40_000), Some(70_000), 3), // longer than the stream buffer
            (Some(1), Some(1), 0),
        ];
        let raw = section(&shapes);
        for codec in CODECS {
            let bytes = batch(codec, shapes.len() as i32, &codec.compress(&raw).unwrap(), false);
            let (records, left) = assert_same(&bytes, DEFAULT_MAX_UNCOMPRESSED, None).unwrap();
            assert_eq!(left, 0);
            assert_eq!(records.len(), 5);
            assert_eq!(records[3].key_len, Some(40_000));
            assert_eq!(records[3].value_len, Some(70_000));
            assert_eq!(records[1].key_len, None);
            assert!(!records[1].has_key() && records[0].has_key());
            assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [1000, 1001, 1002, 1003, 1004]);
            assert_eq!(records.iter().map(|r| r.size_in_bytes).sum::<usize>(), raw.len());
            // LogAppendTime: every record reports the batch max timestamp.
            let lat = batch(codec, shapes.len() as i32, &codec.compress(&raw).unwrap(), true);
            let (records, _) = assert_same(&lat, DEFAULT_MAX_UNCOMPRESSED, None).unwrap();
            assert!(records.iter().all(|r| r.timestamp == 1_700_000_000_500));
            // The caller's error at each record.
            for i in 0..5 {
                assert_same(&bytes, DEFAULT_MAX_UNCOMPRESSED, Some(i)).unwrap_err();
            }
            // The limit, around the exact size.
            for max in [0, 1, raw.len() / 2, raw.len() - 1, raw.len(), raw.len() + 1] {
                let _ = assert_same(&bytes, max, None);
            }
            assert!(assert_same(&bytes, raw.len(), None).is_ok());
            if codec != Compression::None {
                assert!(assert_same(&bytes, raw.len() - 1, None).unwrap_err().contains("limit of"));
            }
        }
    }

    #[test]
    fn record_count_mismatch_and_trailing_bytes() {
        let shapes: Vec<Shape> = (0..6).map(|i| (Some(i), Some(i * 100), i % 3)).collect();
        let raw = section(&shapes);
        for codec in CODECS {
            let z = codec.compress(&raw).unwrap();
            // Fewer declared than present: bytes remain.
            let (recs, left) = assert_same(&batch(codec, 4, &z, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap();
            assert_eq!(recs.len(), 4);
            assert!(left > 0);
            // More declared than present: a truncated length at the end.
            let e = assert_same(&batch(codec, 7, &z, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap_err();
            assert!(e.contains("truncated length") && e.contains("index: 6"), "{e}");
            // No records declared (count 0 or negative): everything remains.
            for count in [0, -3] {
                let (recs, left) =
                    assert_same(&batch(codec, count, &z, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap();
                assert_eq!((recs.len(), left), (0, raw.len()));
            }
            // Junk after the declared records, inside the compressed data.
            let mut junk = raw.clone();
            junk.extend_from_slice(b"junk");
            let z = codec.compress(&junk).unwrap();
            let (_, left) = assert_same(&batch(codec, 6, &z, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap();
            assert_eq!(left, 4);
        }
    }

    /// Each of `RecordIter`'s record errors, each with the record's length also running past the
    /// end (the length error wins), and with a codec error after it (the codec error wins).
    #[test]
    fn record_errors_are_reported_as_the_whole_buffer_walk_reports_them() {
        let good = section(&[(Some(2), Some(5), 1)]);
        // Hand-made record bodies, each broken in one way (the length prefix is added below), and
        // the reason `RecordIter` gives.
        let bodies: Vec<(Vec<u8>, &str)> = vec![
            (vec![], "truncated attributes"),
            (vec![0], "truncated timestamp delta"),
            (vec![0, 0x80], "truncated timestamp delta"),
            (vec![0, 0], "truncated offset delta"),
            (vec![0, 0, 0xff, 0xff, 0xff, 0xff, 0xff], "truncated offset delta"),
            (vec![0, 0, 0], "key: truncated length"),
            (vec![0, 0, 0, 5], "key: invalid length -3"),
            (vec![0, 0, 0, 8, b'a'], "key: length 4 exceeds the 1 bytes left"),
            (vec![0, 0, 0, 1], "value: truncated length"),
            (vec![0, 0, 0, 1, 2, b'v'], "truncated header count"),
            (vec![0, 0, 0, 1, 1, 1], "negative header count -1"),
            (vec![0, 0, 0, 1, 1, 2, 1], "header 0 has a null key"),
            (vec![0, 0, 0, 1, 1, 2, 2, b'h', 5], "header 0 value: invalid length -3"),
            (vec![0, 0, 0, 1, 1, 2, 2, b'h', 8], "header 0 value: length 4 exceeds the 0 bytes left"),
            (vec![0, 0, 0, 1, 1, 0, 9, 9], "2 unread bytes at the end of the record"),
        ];
        for codec in CODECS {
            for (body, reason) in &bodies {
                let len = body.len() as i32;
                for (declared, extra) in [(len, 0usize), (len, 5), (len + 3, 0), (len + 3, 2), (-1, 0)] {
                    let mut raw = good.clone();
                    super::super::record::write_varint(&mut raw, declared);
                    raw.extend_from_slice(body);
                    raw.extend(std::iter::repeat_n(0u8, extra));
                    let z = codec.compress(&raw).unwrap();
                    let err = assert_same(&batch(codec, 2, &z, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap_err();
                    let expected = if declared == len {
                        reason.to_string()
                    } else {
                        format!("record length {declared} exceeds the {} bytes left", body.len() + extra)
                    };
                    assert!(err.contains(&expected) && err.contains("index: 1"), "{codec} {body:?} {declared}: {err}");
                    // A codec error after the record wins over it: a cut in the compressed data
                    // (gzip and lz4 notice a missing trailer / end mark, snappy a short block,
                    // zstd a missing frame end).
                    if codec != Compression::None {
                        let cut = &z[..z.len() - 2];
                        let err =
                            assert_same(&batch(codec, 2, cut, false), DEFAULT_MAX_UNCOMPRESSED, None).unwrap_err();
                        assert!(err.starts_with("Compression"), "{codec} {body:?} {declared}: {err}");
                        // And so does the limit.
                        let err = assert_same(&batch(codec, 2, &z, false), raw.len() - 1, None).unwrap_err();
                        assert!(err.contains("limit of"), "{codec} {body:?} {declared}: {err}");
                    }
                }
            }
        }
    }

    #[test]
    fn offset_and_timestamp_overflow() {
        for codec in CODECS {
            let mut raw = Vec::new();
            encode_record(&mut raw, -1, 0, Some(b"k"), Some(b"v"), &[]);
            let mut bytes = batch(codec, 1, &codec.compress(&raw).unwrap(), false);
            bytes[..8].copy_from_slice(&i64::MIN.to_be_bytes()); // base offset (outside the CRC)
            let err = assert_same(&bytes, DEFAULT_MAX_UNCOMPRESSED, None).unwrap_err();
            assert!(err.contains("offset delta -1 overflows"), "{err}");
            let mut raw = Vec::new();
            encode_record(&mut raw, 0, 1, Some(b"k"), Some(b"v"), &[]);
            let mut bytes = batch(codec, 1, &codec.compress(&raw).unwrap(), false);
            bytes[27..35].copy_from_slice(&i64::MAX.to_be_bytes()); // base timestamp (CRC not checked here)
            let err = assert_same(&bytes, DEFAULT_MAX_UNCOMPRESSED, None).unwrap_err();
            assert!(err.contains("timestamp delta 1 overflows"), "{err}");
        }
    }

    /// Every cut of the compressed records and every flipped bit in them, and every flipped bit in
    /// the records before compression, on one small batch per codec.
    #[test]
    fn every_cut_and_flip_is_judged_alike() {
        let shapes: Vec<Shape> = vec![(Some(2), Some(30), 1), (None, Some(3), 0), (Some(5), None, 2)];
        let raw = section(&shapes);
        for codec in CODECS {
            let z = codec.compress(&raw).unwrap();
            for cut in 0..z.len() {
                assert_same(&batch(codec, 3, &z[..cut], false), DEFAULT_MAX_UNCOMPRESSED, None).ok();
            }
            for pos in 0..z.len() {
                for bit in [0x01u8, 0x10, 0x80] {
                    let mut bad = z.clone();
                    bad[pos] ^= bit;
                    assert_same(&batch(codec, 3, &bad, false), 10_000, None).ok();
                }
            }
            for pos in 0..raw.len() {
                for bit in [0x01u8, 0x02, 0x40, 0x80] {
                    let mut bad = raw.clone();
                    bad[pos] ^= bit;
                    let z = codec.compress(&bad).unwrap();
                    for fail_at in [None, Some(1)] {
                        assert_same(&batch(codec, 3, &z, false), DEFAULT_MAX_UNCOMPRESSED, fail_at).ok();
                    }
                }
            }
        }
    }

    /// Damage to a batch, before or after compression.
    #[derive(Debug, Clone)]
    enum Damage {
        None,
        Count(i32),
        FlipRaw(usize, u8),
        CutRaw(usize),
        AppendRaw(Vec<u8>),
        FlipCompressed(usize, u8),
        CutCompressed(usize),
        AppendCompressed(Vec<u8>),
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            Just(Damage::None),
            (-2i32..3).prop_map(Damage::Count),
            (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::FlipRaw(p, b)),
            any::<usize>().prop_map(Damage::CutRaw),
            proptest::collection::vec(any::<u8>(), 1..8).prop_map(Damage::AppendRaw),
            (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::FlipCompressed(p, b)),
            any::<usize>().prop_map(Damage::CutCompressed),
            proptest::collection::vec(any::<u8>(), 1..8).prop_map(Damage::AppendCompressed),
        ]
    }

    fn shape() -> impl Strategy<Value = Shape> {
        let len = prop_oneof![8 => 0usize..64, 1 => 10_000usize..40_000];
        (proptest::option::weighted(0.8, len.clone()), proptest::option::weighted(0.9, len), 0usize..4)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The streaming walk and the whole-buffer walk agree (records, bytes left, or the same
        /// error) on every codec, whatever the damage, the limit and the caller's verdict.
        #[test]
        fn streaming_and_whole_buffer_walks_agree(
            codec in proptest::sample::select(CODECS.to_vec()),
            shapes in proptest::collection::vec(shape(), 0..12),
            damage in damage(),
            small_limit in proptest::option::weighted(0.2, any::<usize>()),
            fail_at in proptest::option::weighted(0.2, 0usize..12),
        ) {
            let mut raw = section(&shapes);
            let mut count = shapes.len() as i32;
            match &damage {
                Damage::Count(d) => count += d,
                Damage::FlipRaw(p, b) if !raw.is_empty() => {
                    let p = p % raw.len();
                    raw[p] ^= 1 << b;
                }
                Damage::CutRaw(p) => raw.truncate(p % (raw.len() + 1)),
                Damage::AppendRaw(junk) => raw.extend_from_slice(junk),
                _ => {}
            }
            let mut z = codec.compress(&raw).unwrap();
            match &damage {
                Damage::FlipCompressed(p, b) if !z.is_empty() => {
                    let p = p % z.len();
                    z[p] ^= 1 << b;
                }
                Damage::CutCompressed(p) => z.truncate(p % (z.len() + 1)),
                Damage::AppendCompressed(junk) => z.extend_from_slice(junk),
                _ => {}
            }
            let max = small_limit.map_or(DEFAULT_MAX_UNCOMPRESSED, |m| m % (raw.len() + 2));
            let bytes = batch(codec, count, &z, false);
            let old = whole(&bytes, max, fail_at);
            let new = streamed(&bytes, max, fail_at);
            prop_assert_eq!(new, old);
        }
    }
}
