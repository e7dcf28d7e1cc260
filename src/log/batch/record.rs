//! Records inside a v2 batch, Kafka's `DefaultRecord`.
//!
//! ```text
//! length            varint   bytes after this field
//! attributes        i8       unused, 0
//! timestamp delta   varlong  record timestamp - batch base timestamp
//! offset delta      varint   record offset - batch base offset
//! key length        varint   -1 = null key
//! key               bytes
//! value length      varint   -1 = null value (a tombstone)
//! value             bytes
//! header count      varint
//!   header key len  varint, key (UTF-8), value len varint (-1 = null), value
//! ```
//!
//! Varints are zig-zag encoded as in protobuf (Kafka's `ByteUtils.readVarint`).

use super::error::BatchError;
use super::header::BatchHeader;

/// A record header: a UTF-8 key (not checked here) and an optional value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// Header key bytes.
    pub key: &'a [u8],
    /// Header value, `None` when its length is -1.
    pub value: Option<&'a [u8]>,
}

/// One record, borrowed from the batch's (decompressed) bytes, with absolute offset and
/// timestamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Absolute offset: batch base offset + offset delta.
    pub offset: i64,
    /// Absolute timestamp in ms: batch base timestamp + timestamp delta; for LogAppendTime
    /// batches Kafka reports the batch max timestamp instead (done here too).
    pub timestamp: i64,
    /// The record's attributes byte (unused by Kafka, 0).
    pub attributes: i8,
    /// Key, `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// Value, `None` for a null value (a tombstone under compaction).
    pub value: Option<&'a [u8]>,
    /// Headers in order.
    pub headers: Vec<Header<'a>>,
    /// Encoded size of the record including its length varint.
    pub size_in_bytes: usize,
}

/// Iterates the records of one batch; see [`super::record_batch::Records::iter`].
#[derive(Debug)]
pub struct RecordIter<'a> {
    header: BatchHeader,
    data: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    pub(crate) fn new(header: &BatchHeader, data: &'a [u8]) -> Self {
        RecordIter { header: *header, data, pos: 0, index: 0, failed: false }
    }

    fn err(&self, reason: impl Into<String>) -> BatchError {
        BatchError::InvalidRecord { base_offset: self.header.base_offset, index: self.index, reason: reason.into() }
    }

    fn decode_one(&mut self) -> Result<Record<'a>, BatchError> {
        let start = self.pos;
        let mut r = Reader { b: self.data, pos: self.pos };
        let len = r.varint().ok_or_else(|| self.err("truncated length"))?;
        if len < 0 || (len as usize) > r.b.len() - r.pos {
            return Err(self.err(format!("record length {len} exceeds the {} bytes left", r.b.len() - r.pos)));
        }
        let end = r.pos + len as usize;
        let mut body = Reader { b: &self.data[..end], pos: r.pos };
        let attributes = body.u8().ok_or_else(|| self.err("truncated attributes"))? as i8;
        let ts_delta = body.varlong().ok_or_else(|| self.err("truncated timestamp delta"))?;
        let off_delta = body.varint().ok_or_else(|| self.err("truncated offset delta"))?;
        let key = body.nullable_bytes().map_err(|e| self.err(format!("key: {e}")))?;
        let value = body.nullable_bytes().map_err(|e| self.err(format!("value: {e}")))?;
        let n_headers = body.varint().ok_or_else(|| self.err("truncated header count"))?;
        if n_headers < 0 {
            return Err(self.err(format!("negative header count {n_headers}")));
        }
        let mut headers = Vec::with_capacity((n_headers as usize).min(16));
        for i in 0..n_headers {
            let hk = body
                .nullable_bytes()
                .map_err(|e| self.err(format!("header {i} key: {e}")))?
                .ok_or_else(|| self.err(format!("header {i} has a null key")))?;
            let hv = body.nullable_bytes().map_err(|e| self.err(format!("header {i} value: {e}")))?;
            headers.push(Header { key: hk, value: hv });
        }
        if body.pos != end {
            return Err(self.err(format!("{} unread bytes at the end of the record", end - body.pos)));
        }
        let timestamp = if self.header.attributes.is_log_append_time() {
            self.header.max_timestamp
        } else {
            self.header.base_timestamp.checked_add(ts_delta).ok_or_else(|| {
                self.err(format!(
                    "timestamp delta {ts_delta} overflows the base timestamp {}",
                    self.header.base_timestamp
                ))
            })?
        };
        let offset = self
            .header
            .base_offset
            .checked_add(i64::from(off_delta))
            .ok_or_else(|| self.err(format!("offset delta {off_delta} overflows the base offset")))?;
        self.pos = end;
        Ok(Record { offset, timestamp, attributes, key, value, headers, size_in_bytes: end - start })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, BatchError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.index >= self.header.records_count.max(0) as usize {
            return None;
        }
        let r = self.decode_one();
        if r.is_err() {
            self.failed = true;
        }
        self.index += 1;
        Some(r)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.pos)?;
        self.pos += 1;
        Some(v)
    }
    fn varint(&mut self) -> Option<i32> {
        let (v, n) = read_varint(&self.b[self.pos..])?;
        self.pos += n;
        Some(v)
    }
    fn varlong(&mut self) -> Option<i64> {
        let (v, n) = read_varlong(&self.b[self.pos..])?;
        self.pos += n;
        Some(v)
    }
    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, String> {
        let len = self.varint().ok_or("truncated length")?;
        if len < -1 {
            return Err(format!("invalid length {len}"));
        }
        if len == -1 {
            return Ok(None);
        }
        let len = len as usize;
        if len > self.b.len() - self.pos {
            return Err(format!("length {len} exceeds the {} bytes left", self.b.len() - self.pos));
        }
        let s = &self.b[self.pos..self.pos + len];
        self.pos += len;
        Ok(Some(s))
    }
}

/// Reads an unsigned varint of at most `max_len` bytes, 7 bits a byte, least significant group
/// first (protobuf's base 128; Kafka's `ByteUtils.readUnsignedVarlong`). Returns the value and
/// the bytes used, or `None` when `b` ends first or the varint is longer than `max_len` bytes.
/// Bits beyond 64 are dropped.
fn read_raw_varint(b: &[u8], max_len: usize) -> Option<(u64, usize)> {
    let mut raw: u64 = 0;
    for i in 0..max_len {
        let byte = *b.get(i)?;
        raw |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((raw, i + 1));
        }
    }
    None
}

/// Reads a zig-zag varint (at most 5 bytes). Returns the value and the bytes used, or `None`
/// when `b` ends first or the varint is longer than 5 bytes.
pub fn read_varint(b: &[u8]) -> Option<(i32, usize)> {
    read_raw_varint(b, 5).map(|(raw, n)| {
        let raw = raw as u32;
        (((raw >> 1) as i32) ^ -((raw & 1) as i32), n)
    })
}

/// Reads a zig-zag varlong (at most 10 bytes); see [`read_varint`].
pub fn read_varlong(b: &[u8]) -> Option<(i64, usize)> {
    read_raw_varint(b, 10).map(|(raw, n)| (((raw >> 1) as i64) ^ -((raw & 1) as i64), n))
}

/// Reads an unsigned (not zig-zag) varlong of at most 10 bytes, as KRaft's record frames use
/// (`MetadataRecordSerde`: frame version, api key, version); see [`read_varint`].
pub fn read_unsigned_varlong(b: &[u8]) -> Option<(u64, usize)> {
    read_raw_varint(b, 10)
}

/// Appends `v` as a zig-zag varint.
pub fn write_varint(out: &mut Vec<u8>, v: i32) {
    write_varlong(out, v as i64)
}

/// Appends `v` as a zig-zag varlong.
pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Size in bytes of `v` as a zig-zag varlong.
pub fn varlong_size(v: i64) -> usize {
    let raw = ((v << 1) ^ (v >> 63)) as u64;
    let bits = 64 - raw.leading_zeros() as usize;
    bits.max(1).div_ceil(7)
}

/// Writes a nullable byte field of a v2 record: varint length (-1 for null), then the bytes.
pub fn write_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

/// Appends one encoded record (length varint included), Kafka's `DefaultRecord.writeTo`.
pub fn encode_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) {
    let mut body = Vec::with_capacity(16 + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
    body.push(0); // attributes
    write_varlong(&mut body, timestamp_delta);
    write_varint(&mut body, offset_delta);
    write_nullable(&mut body, key);
    write_nullable(&mut body, value);
    write_varint(&mut body, headers.len() as i32);
    for h in headers {
        write_nullable(&mut body, Some(h.key));
        write_nullable(&mut body, h.value);
    }
    write_varint(out, body.len() as i32);
    out.extend_from_slice(&body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_edges() {
        for v in [0i64, 1, -1, 63, -64, 64, 300, -300, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_size(v), "size of {v}");
            assert_eq!(read_varlong(&out), Some((v, out.len())));
        }
        // Kafka's ByteUtils test vectors: 0 -> 00, -1 -> 01, 1 -> 02, 300 -> d8 04.
        let mut out = Vec::new();
        write_varint(&mut out, 300);
        assert_eq!(out, [0xd8, 0x04]);
        assert_eq!(read_varint(&[0x01]), Some((-1, 1)));
        assert_eq!(read_varint(&[0x80, 0x80]), None);
        assert_eq!(read_varint(&[0xff; 6]), None);
    }
}
