//! The consumer's drain mode (`fetchbench.fetch.mode=drain`): a Fetch response read from the
//! socket a field at a time, its record batches walked by their headers and their record bytes
//! discarded in the kernel, so the consumer costs less than the broker that sends them.
//!
//! A benchmark's consumers must not be what limits it. The decoding consumer copies every
//! response into user space, decompresses and splits it into records and allocates a
//! [`super::ConsumerRecord`] per record: on loopback its CPU per GB is close to the broker's
//! (issue 29 measured consumers bounding every read path faster than `copy`). The drain mode
//! keeps what a benchmark needs to know that it read the log exactly, and nothing else:
//!
//! - the response's framing, its partitions' headers (error code, high watermark, last stable
//!   offset, log start offset, aborted transactions) and every batch's 61-byte v2 header (base
//!   offset, last offset delta, records count, attributes, producer id, CRC) are read into
//!   user space ([`DrainSource::read_exact`]);
//! - a batch's record bytes (batch length - 49) are discarded with `recv(MSG_TRUNC)`
//!   ([`SocketSource`]): Linux's TCP frees the received data without copying it to user space
//!   (tcp(7), since 2.4). A splice into a pipe drained to `/dev/null` would do the same with two
//!   system calls per chunk and a pipe per connection; it was not built, so it is not measured;
//! - a batch whose CRC is checked ([`CrcCheck`]: all, one in N, none) and every control batch
//!   (its marker type says COMMIT or ABORT, needed under `read_committed`) are read whole; the
//!   CRC-32C over bytes 21.. of the batch must match its header, else
//!   [`BatchError::CrcMismatch`];
//! - a last batch cut by the response's size limit is discarded and fetched again, as the
//!   decoding consumer does.
//!
//! What the caller gets per batch is a [`DrainedBatch`]: its offsets and record count from the
//! header. Exactness is still checked (the benchmark's offsets check takes a batch's
//! `first_offset..=last_offset`), but record contents are not: a wrong byte inside a record
//! whose batch's CRC is not checked goes unseen. Only magic 2 batches are read; an older
//! message set is refused ([`BatchError::UnsupportedMagic`]), use the decoding consumer for
//! those logs.
//!
//! Fetch versions 4 to 12 are read, the ones [`super::fetcher`] sends (v12 is flexible:
//! compact strings and arrays, tagged fields, which are skipped).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use crate::log::batch::mixed::{DecodeOptions, MixedBatches};
use crate::log::batch::BatchError;
use crate::log::batch::{BatchHeader, ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2};

/// How many of the drained batches have their CRC checked (`fetchbench.drain.crc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcCheck {
    /// Every batch (`all`): every record byte is copied into user space for the CRC.
    All,
    /// One batch in `n` (`1/N`), counted per connection; the others' record bytes are
    /// discarded in the kernel.
    OneIn(u32),
    /// No batch (`none`).
    None,
}

impl CrcCheck {
    /// Parses `all`, `none` or `1/N` (N from 1 to 2^31 - 1; `1/1` is `all`).
    ///
    /// Errors: a message naming what is accepted.
    pub fn parse(s: &str) -> Result<CrcCheck, String> {
        let s = s.trim();
        match s {
            "all" => return Ok(CrcCheck::All),
            "none" => return Ok(CrcCheck::None),
            _ => {}
        }
        let n = s
            .strip_prefix("1/")
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|&n| (1..=i32::MAX as u32).contains(&n))
            .ok_or_else(|| "expected all, none or 1/N (check one batch in N)".to_string())?;
        Ok(if n == 1 { CrcCheck::All } else { CrcCheck::OneIn(n) })
    }

    /// Whether the `i`-th batch (0-based, counted per connection) is checked.
    pub fn checks(self, i: u64) -> bool {
        match self {
            CrcCheck::All => true,
            CrcCheck::OneIn(n) => i.is_multiple_of(u64::from(n)),
            CrcCheck::None => false,
        }
    }
}

impl std::fmt::Display for CrcCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CrcCheck::All => f.write_str("all"),
            CrcCheck::OneIn(n) => write!(f, "1/{n}"),
            CrcCheck::None => f.write_str("none"),
        }
    }
}

/// One record batch as a drain-mode poll hands it out: what its header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainedBatch {
    /// Topic (shared by the batches of a partition).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// The batch's base offset.
    pub base_offset: i64,
    /// The first offset handed out: the batch's base offset, or the fetch offset when the
    /// batch starts below it (the broker returns whole batches).
    pub first_offset: i64,
    /// The batch's last offset (base offset + last offset delta).
    pub last_offset: i64,
    /// The batch's records count (all of its records, also those below `first_offset`).
    pub records: u32,
    /// The batch's size in bytes, its 12-byte log overhead included.
    pub bytes: u32,
    /// Whether its CRC was checked.
    pub crc_checked: bool,
}

impl DrainedBatch {
    /// Records from `first_offset` on: all of them when the batch starts there; for a batch
    /// that straddles the fetch offset, `last_offset - first_offset + 1` when its offsets are
    /// dense (records count = offset span: no compaction), else at most that many (a
    /// compacted batch cannot be split by its header).
    pub fn records_from_first(&self) -> u64 {
        let whole = u64::from(self.records);
        if self.first_offset <= self.base_offset {
            return whole;
        }
        let span = (self.last_offset - self.first_offset + 1).max(0) as u64;
        span.min(whole)
    }

    /// Whether the batch's offsets are dense: its records count is its offset span.
    pub fn is_dense(&self) -> bool {
        i64::from(self.records) == self.last_offset - self.base_offset + 1
    }
}

/// A batch's header as the drain read it, before the fetch offset and transactions are
/// applied ([`super::fetcher`] does that).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainedHeader {
    /// The decoded 61-byte header.
    pub header: BatchHeader,
    /// Whether its CRC was checked (and matched).
    pub crc_checked: bool,
    /// For a control batch: its marker type (0 ABORT, 1 COMMIT), from the control record's key.
    pub control_type: Option<i16>,
}

/// One partition of a drained Fetch response.
#[derive(Debug, Default)]
pub struct DrainedPartition {
    /// Partition index.
    pub partition: i32,
    /// Error code.
    pub error_code: i16,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset (-1 when the broker does not know it).
    pub last_stable_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Aborted transactions `(producer id, first offset)`; empty when the broker sent none.
    pub aborted: Vec<(i64, i64)>,
    /// The complete batches, in order.
    pub batches: Vec<DrainedHeader>,
    /// The record set ended with a batch cut by the size limit (discarded).
    pub partial_tail: bool,
    /// A batch failed its check (CRC, header, magic); the batches before it are kept.
    pub error: Option<BatchError>,
}

/// One drained Fetch response: its top-level error and its topics' partitions.
#[derive(Debug, Default)]
pub struct DrainedResponse {
    /// Throttle time, ms.
    pub throttle_time_ms: i32,
    /// Top-level error code (v7+; 0 before).
    pub error_code: i16,
    /// `(topic, partitions)` in response order.
    pub topics: Vec<(String, Vec<DrainedPartition>)>,
    /// Bytes read into user space (framing, headers, checked batches).
    pub bytes_read: u64,
    /// Bytes discarded in the kernel (record bytes of unchecked batches, cut tails).
    pub bytes_discarded: u64,
}

/// Where a drained response's bytes come from: exact reads into user space, and discards.
pub trait DrainSource {
    /// Fills `buf` completely.
    ///
    /// Errors: the source's; `UnexpectedEof` when it ends first.
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()>;
    /// Skips `n` bytes without handing them to user space where the source allows it.
    ///
    /// Errors: the source's; `UnexpectedEof` when it ends first.
    fn discard(&mut self, n: usize) -> io::Result<()>;
}

/// In-memory bytes (tests, and the same walk over a response already in memory).
impl DrainSource for &[u8] {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        io::Read::read_exact(self, buf)
    }
    fn discard(&mut self, n: usize) -> io::Result<()> {
        if n > self.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        *self = &self[n..];
        Ok(())
    }
}

/// A connected TCP socket: reads with `recv(MSG_WAITALL)`, discards with `recv(MSG_TRUNC)`
/// (no copy into user space). Honors the socket's receive timeout (`EAGAIN` is an error of
/// kind `WouldBlock`).
pub struct SocketSource {
    fd: RawFd,
}

impl SocketSource {
    /// Reads from `socket`, which must stay open while this is used.
    pub fn new(socket: &impl AsRawFd) -> SocketSource {
        SocketSource { fd: socket.as_raw_fd() }
    }

    fn recv(&mut self, ptr: *mut u8, len: usize, flags: libc::c_int) -> io::Result<usize> {
        loop {
            // SAFETY: `ptr` is null (MSG_TRUNC: the kernel writes nothing) or valid for `len`
            // bytes (a live `&mut [u8]`); the fd is the caller's open socket.
            let n = unsafe { libc::recv(self.fd, ptr.cast(), len, flags | libc::MSG_WAITALL) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl DrainSource for SocketSource {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let mut at = 0;
        while at < buf.len() {
            let n = self.recv(buf[at..].as_mut_ptr(), buf.len() - at, 0)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            at += n;
        }
        Ok(())
    }
    fn discard(&mut self, mut n: usize) -> io::Result<()> {
        while n > 0 {
            let got = self.recv(std::ptr::null_mut(), n, libc::MSG_TRUNC)?;
            if got == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            n -= got.min(n);
        }
        Ok(())
    }
}

/// Errors reading a drained response: the source's, or a response that does not parse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// Reading failed (the connection's, a timeout, or the frame ended early).
    #[error("reading a drained Fetch response: {0}")]
    Io(#[from] io::Error),
    /// The response's framing is wrong (a negative length, a length past the frame).
    #[error("malformed Fetch response: {0}")]
    Malformed(String),
}

/// A reader bounded by the frame's length, counting what it read and discarded.
struct Framed<'a, S: DrainSource> {
    src: &'a mut S,
    left: usize,
    read: u64,
    discarded: u64,
}

impl<S: DrainSource> Framed<'_, S> {
    fn take(&mut self, n: usize) -> Result<(), DrainError> {
        if n > self.left {
            return Err(DrainError::Malformed(format!("{n} bytes announced, {} left in the frame", self.left)));
        }
        self.left -= n;
        Ok(())
    }
    fn bytes(&mut self, buf: &mut [u8]) -> Result<(), DrainError> {
        self.take(buf.len())?;
        self.src.read_exact(buf)?;
        self.read += buf.len() as u64;
        Ok(())
    }
    fn skip(&mut self, n: usize) -> Result<(), DrainError> {
        self.take(n)?;
        self.src.discard(n)?;
        self.discarded += n as u64;
        Ok(())
    }
    fn i8(&mut self) -> Result<i8, DrainError> {
        let mut b = [0u8; 1];
        self.bytes(&mut b)?;
        Ok(b[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, DrainError> {
        let mut b = [0u8; 2];
        self.bytes(&mut b)?;
        Ok(i16::from_be_bytes(b))
    }
    fn i32(&mut self) -> Result<i32, DrainError> {
        let mut b = [0u8; 4];
        self.bytes(&mut b)?;
        Ok(i32::from_be_bytes(b))
    }
    fn i64(&mut self) -> Result<i64, DrainError> {
        let mut b = [0u8; 8];
        self.bytes(&mut b)?;
        Ok(i64::from_be_bytes(b))
    }
    fn uvarint(&mut self) -> Result<u64, DrainError> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.i8()? as u8;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DrainError::Malformed("an unsigned varint longer than 5 bytes".into()))
    }
    /// An array length: compact (`N + 1`, 0 = null) when `flexible`, else i32 (-1 = null).
    fn array_len(&mut self, flexible: bool) -> Result<Option<usize>, DrainError> {
        let n = if flexible { self.uvarint()? as i64 - 1 } else { i64::from(self.i32()?) };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(DrainError::Malformed(format!("array length {n}"))),
            n => Ok(Some(n as usize)),
        }
    }
    fn string(&mut self, flexible: bool) -> Result<String, DrainError> {
        let n = if flexible { self.uvarint()? as i64 - 1 } else { i64::from(self.i16()?) };
        if n < 0 || n as u64 > self.left as u64 {
            // Checked before allocating: a lying length costs nothing.
            return Err(DrainError::Malformed(format!("string length {n}, {} bytes left in the frame", self.left)));
        }
        let mut b = vec![0u8; n as usize];
        self.bytes(&mut b)?;
        String::from_utf8(b).map_err(|_| DrainError::Malformed("a topic name that is not UTF-8".into()))
    }
    fn tagged_fields(&mut self, flexible: bool) -> Result<(), DrainError> {
        if !flexible {
            return Ok(());
        }
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.skip(size)?;
        }
        Ok(())
    }
}

/// Reads one Fetch response frame of `version` (4..=12) from `src`: the size prefix (at most
/// `max_bytes`), the response header (correlation id; tagged fields from v12), then the body
/// as [`read_fetch_body`]. Returns the correlation id and the response.
///
/// Errors: [`DrainError`]; a size prefix that is negative, shorter than a header or above
/// `max_bytes` is [`DrainError::Malformed`].
pub fn read_fetch_frame<S: DrainSource>(
    src: &mut S,
    max_bytes: usize,
    version: i16,
    crc: CrcCheck,
    batch_counter: &mut u64,
) -> Result<(i32, DrainedResponse), DrainError> {
    let mut prefix = [0u8; 4];
    src.read_exact(&mut prefix)?;
    let size = i32::from_be_bytes(prefix);
    if size < 4 || size as usize > max_bytes {
        return Err(DrainError::Malformed(format!("a response size of {size} bytes (at most {max_bytes})")));
    }
    let mut r = Framed { src, left: size as usize, read: 4, discarded: 0 };
    let correlation_id = r.i32()?;
    r.tagged_fields(version >= 12)?;
    Ok((correlation_id, body(&mut r, version, crc, batch_counter)?))
}

/// Reads a Fetch response body of `version` (4..=12) from `src`, `len` bytes after its
/// response header, walking the record sets by their batch headers; `batch_counter` counts the
/// connection's batches for [`CrcCheck::OneIn`]. Bytes left after the body are discarded.
///
/// Errors: [`DrainError`]. A batch that fails its check ends its partition's record set
/// (`DrainedPartition::error`): the connection stays in step, the caller reports it.
pub fn read_fetch_body<S: DrainSource>(
    src: &mut S,
    len: usize,
    version: i16,
    crc: CrcCheck,
    batch_counter: &mut u64,
) -> Result<DrainedResponse, DrainError> {
    let mut r = Framed { src, left: len, read: 0, discarded: 0 };
    body(&mut r, version, crc, batch_counter)
}

fn body<S: DrainSource>(
    r: &mut Framed<'_, S>,
    version: i16,
    crc: CrcCheck,
    batch_counter: &mut u64,
) -> Result<DrainedResponse, DrainError> {
    let flexible = version >= 12;
    let mut out = DrainedResponse { throttle_time_ms: r.i32()?, ..DrainedResponse::default() };
    if version >= 7 {
        out.error_code = r.i16()?;
        let _session_id = r.i32()?;
    }
    let mut scratch = Vec::new();
    for _ in 0..r.array_len(flexible)?.unwrap_or(0) {
        let topic = r.string(flexible)?;
        let mut partitions = Vec::new();
        for _ in 0..r.array_len(flexible)?.unwrap_or(0) {
            let mut p = DrainedPartition {
                partition: r.i32()?,
                error_code: r.i16()?,
                high_watermark: r.i64()?,
                last_stable_offset: r.i64()?,
                ..DrainedPartition::default()
            };
            p.log_start_offset = if version >= 5 { r.i64()? } else { -1 };
            for _ in 0..r.array_len(flexible)?.unwrap_or(0) {
                let producer_id = r.i64()?;
                let first_offset = r.i64()?;
                r.tagged_fields(flexible)?;
                p.aborted.push((producer_id, first_offset));
            }
            if version >= 11 {
                let _preferred_read_replica = r.i32()?;
            }
            let records = if flexible { r.uvarint()? as i64 - 1 } else { i64::from(r.i32()?) };
            if records > 0 {
                read_record_set(r, records as usize, crc, batch_counter, &mut scratch, &mut p)?;
            }
            r.tagged_fields(flexible)?;
            partitions.push(p);
        }
        r.tagged_fields(flexible)?;
        out.topics.push((topic, partitions));
    }
    r.tagged_fields(flexible)?;
    let rest = r.left;
    r.skip(rest)?;
    out.bytes_read = r.read;
    out.bytes_discarded = r.discarded;
    Ok(out)
}

/// Walks one partition's record set of `len` bytes (see the module docs).
fn read_record_set<S: DrainSource>(
    r: &mut Framed<'_, S>,
    len: usize,
    crc: CrcCheck,
    batch_counter: &mut u64,
    scratch: &mut Vec<u8>,
    p: &mut DrainedPartition,
) -> Result<(), DrainError> {
    let mut left = len;
    let mut head = [0u8; HEADER_SIZE];
    while left > 0 {
        if p.error.is_some() || left < LOG_OVERHEAD {
            // After a bad batch, or a tail too short for a length: discarded.
            p.partial_tail |= p.error.is_none();
            r.skip(left)?;
            return Ok(());
        }
        // The whole 61-byte header in one read where the record set has that much left (one
        // system call less per batch); a shorter tail is read 12 bytes first.
        let whole_head = left >= HEADER_SIZE;
        let n = if whole_head { HEADER_SIZE } else { LOG_OVERHEAD };
        r.bytes(&mut head[..n])?;
        left -= n;
        let batch_length = i32::from_be_bytes(head[8..12].try_into().expect("4 bytes"));
        let base_offset = i64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        // Bytes of the batch after its length field already read.
        let ahead = n - LOG_OVERHEAD;
        if batch_length < 0 || batch_length as usize > left + ahead {
            // Cut by the size limit (or a length no complete batch has): fetched again.
            p.partial_tail = true;
            r.skip(left)?;
            return Ok(());
        }
        let body = batch_length as usize;
        if body < HEADER_SIZE - LOG_OVERHEAD {
            // Shorter than a v2 header: a legacy message or a bad length (the rest of the
            // record set is discarded, also what was read ahead of it).
            let magic = if whole_head {
                Some(head[MAGIC_OFFSET])
            } else {
                let mut rest = vec![0u8; body];
                r.bytes(&mut rest)?;
                left -= body;
                rest.get(MAGIC_OFFSET - LOG_OVERHEAD).copied()
            };
            p.error = Some(match magic {
                Some(m) if m as i8 != MAGIC_V2 => BatchError::UnsupportedMagic { base_offset, magic: m as i8 },
                _ => BatchError::InvalidLength {
                    base_offset,
                    length: batch_length,
                    min: (HEADER_SIZE - LOG_OVERHEAD) as i32,
                    max: i32::MAX,
                },
            });
            continue;
        }
        let header = match BatchHeader::parse(&head) {
            Ok(h) => h,
            Err(e) => {
                r.skip(body - (HEADER_SIZE - LOG_OVERHEAD))?;
                left -= body - (HEADER_SIZE - LOG_OVERHEAD);
                p.error = Some(e);
                continue;
            }
        };
        let records_bytes = body - (HEADER_SIZE - LOG_OVERHEAD);
        let control = header.attributes.is_control();
        let check = crc.checks(*batch_counter);
        *batch_counter += 1;
        let mut drained = DrainedHeader { header, crc_checked: false, control_type: None };
        if check || control {
            scratch.clear();
            scratch.extend_from_slice(&head);
            scratch.resize(HEADER_SIZE + records_bytes, 0);
            r.bytes(&mut scratch[HEADER_SIZE..])?;
            left -= records_bytes;
            if check {
                let computed = crc32c::crc32c(&scratch[ATTRIBUTES_OFFSET..]);
                if computed != header.crc {
                    p.error = Some(BatchError::CrcMismatch { base_offset, stored: header.crc, computed });
                    continue;
                }
                drained.crc_checked = true;
            }
            if control {
                drained.control_type = control_type(scratch);
            }
        } else {
            r.skip(records_bytes)?;
            left -= records_bytes;
        }
        p.batches.push(drained);
    }
    Ok(())
}

/// The marker type of a control batch (`batch`: the whole batch): the control record key's
/// second i16 (version i16, type i16: 0 ABORT, 1 COMMIT), or `None` when it does not decode.
fn control_type(batch: &[u8]) -> Option<i16> {
    let options = DecodeOptions { verify_crc: false, ..DecodeOptions::default() };
    let mut batches = MixedBatches::shared(bytes::Bytes::copy_from_slice(batch), options);
    let b = batches.next()?.ok()?;
    let key = b.records.first()?.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::builder::BatchBuilder;
    use crate::log::batch::compression::Compression;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::{FetchResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn crc_check_parses_all_none_and_one_in_n() {
        assert_eq!(CrcCheck::parse("all"), Ok(CrcCheck::All));
        assert_eq!(CrcCheck::parse(" none "), Ok(CrcCheck::None));
        assert_eq!(CrcCheck::parse("1/16"), Ok(CrcCheck::OneIn(16)));
        assert_eq!(CrcCheck::parse("1/1"), Ok(CrcCheck::All));
        for bad in ["some", "1/0", "2/3", "1/x", "", "1/-4"] {
            assert!(CrcCheck::parse(bad).unwrap_err().contains("expected all, none or 1/N"), "{bad}");
        }
        let checked: Vec<u64> = (0..10).filter(|&i| CrcCheck::OneIn(4).checks(i)).collect();
        assert_eq!(checked, [0, 4, 8]);
        assert!((0..10).all(|i| CrcCheck::All.checks(i) && !CrcCheck::None.checks(i)));
        assert_eq!(CrcCheck::OneIn(16).to_string(), "1/16");
    }

    /// `n` batches of `per` records each from `base`, concatenated.
    fn batches(base: i64, n: usize, per: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for b in 0..n {
            let mut builder = BatchBuilder::new(base + (b * per) as i64, Compression::None);
            for i in 0..per {
                builder.append(1_700_000_000_000, Some(b"k"), Some(format!("value-{b}-{i}").as_bytes()), &[]);
            }
            out.extend_from_slice(&builder.build().expect("builds"));
        }
        out
    }

    /// A partition of a test response: index, record set, aborted `(producer id, first offset)`.
    type Part = (i32, Vec<u8>, Vec<(i64, i64)>);

    fn response(version: i16, parts: Vec<Part>) -> Vec<u8> {
        let partitions = parts
            .into_iter()
            .map(|(p, records, aborted)| {
                PartitionData::default()
                    .with_partition_index(p)
                    .with_high_watermark(1000)
                    .with_last_stable_offset(900)
                    .with_log_start_offset(3)
                    .with_aborted_transactions(Some(
                        aborted
                            .into_iter()
                            .map(|(pid, first)| {
                                AbortedTransaction::default().with_producer_id(ProducerId(pid)).with_first_offset(first)
                            })
                            .collect(),
                    ))
                    .with_records(Some(Bytes::from(records)))
            })
            .collect();
        let r =
            FetchResponse::default().with_throttle_time_ms(7).with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(partitions)]);
        let mut buf = bytes::BytesMut::new();
        r.encode(&mut buf, version).expect("encodes");
        buf.to_vec()
    }

    fn drain(body: &[u8], version: i16, crc: CrcCheck) -> Result<DrainedResponse, DrainError> {
        let mut src: &[u8] = body;
        let mut counter = 0;
        let out = read_fetch_body(&mut src, body.len(), version, crc, &mut counter)?;
        assert!(src.is_empty(), "the whole body read");
        Ok(out)
    }

    /// Every version the fetcher sends: the partitions' fields and every batch's header as the
    /// full decoder (kafka-protocol, then the batch decoder) sees them; a cut last batch is a
    /// partial tail; bytes read plus discarded is the body.
    #[test]
    fn a_drained_response_agrees_with_the_decoded_one_in_every_version() {
        let set = batches(10, 5, 20);
        let mut cut = set.clone();
        cut.extend_from_slice(&batches(110, 1, 20)[..80]);
        for version in 4..=12 {
            let body = response(version, vec![(0, set.clone(), vec![(42, 15)]), (3, cut.clone(), vec![])]);
            for crc in [CrcCheck::All, CrcCheck::OneIn(2), CrcCheck::None] {
                let d = drain(&body, version, crc).unwrap();
                assert_eq!(d.throttle_time_ms, 7);
                assert_eq!(d.bytes_read + d.bytes_discarded, body.len() as u64, "v{version} {crc}");
                let (topic, parts) = &d.topics[0];
                assert_eq!(topic, "t");
                assert_eq!(parts.len(), 2);
                let p = &parts[0];
                assert_eq!((p.partition, p.error_code, p.high_watermark), (0, 0, 1000));
                assert_eq!(p.last_stable_offset, 900);
                assert_eq!(p.log_start_offset, if version >= 5 { 3 } else { -1 });
                assert_eq!(p.aborted, vec![(42, 15)]);
                let offsets: Vec<(i64, i64, i32)> = p
                    .batches
                    .iter()
                    .map(|b| (b.header.base_offset, b.header.last_offset(), b.header.records_count))
                    .collect();
                assert_eq!(offsets, [(10, 29, 20), (30, 49, 20), (50, 69, 20), (70, 89, 20), (90, 109, 20)]);
                assert!(!p.partial_tail && p.error.is_none());
                let checked = p.batches.iter().filter(|b| b.crc_checked).count();
                assert_eq!(
                    checked,
                    match crc {
                        CrcCheck::All => 5,
                        CrcCheck::OneIn(_) => 3,
                        CrcCheck::None => 0,
                    }
                );
                assert_eq!(parts[1].batches.len(), 5);
                assert!(parts[1].partial_tail, "the cut batch is a partial tail");
                if crc == CrcCheck::None {
                    // Only headers were read: 61 bytes a batch plus the framing.
                    assert!(d.bytes_discarded > 9 * (set.len() as u64 / 5 - 61), "{d:?}");
                }
            }
        }
    }

    /// A flipped record byte fails the batch's CRC where it is checked, is not seen where it
    /// is not; the batches before it are kept and the connection stays in step.
    #[test]
    fn a_corrupt_batch_fails_its_crc_where_checked_and_ends_its_record_set() {
        let mut set = batches(0, 4, 10);
        let second = set.len() / 4;
        set[second + 70] ^= 0x40;
        let body = response(12, vec![(0, set, vec![]), (1, batches(0, 1, 3), vec![])]);
        let d = drain(&body, 12, CrcCheck::All).unwrap();
        let p = &d.topics[0].1[0];
        assert_eq!(p.batches.len(), 1);
        let e = p.error.as_ref().expect("the second batch fails");
        assert!(matches!(e, BatchError::CrcMismatch { base_offset: 10, .. }), "{e:?}");
        assert_eq!(d.topics[0].1[1].batches.len(), 1, "the next partition still read");
        let d = drain(&body, 12, CrcCheck::None).unwrap();
        assert_eq!(d.topics[0].1[0].batches.len(), 4, "unchecked: not seen");
    }

    /// A legacy (magic 1) message set is refused by name.
    #[test]
    fn a_legacy_message_set_is_refused() {
        // offset, size, crc, magic 1, attributes, timestamp, key -1, value -1.
        let mut m = Vec::new();
        m.extend_from_slice(&5i64.to_be_bytes());
        let body: Vec<u8> =
            [&[0u8; 4][..], &[1, 0], &[0u8; 8], &(-1i32).to_be_bytes(), &(-1i32).to_be_bytes()].concat();
        m.extend_from_slice(&(body.len() as i32).to_be_bytes());
        m.extend_from_slice(&body);
        let d = drain(&response(4, vec![(0, m, vec![])]), 4, CrcCheck::None).unwrap();
        let e = d.topics[0].1[0].error.as_ref().expect("refused");
        assert!(matches!(e, BatchError::UnsupportedMagic { base_offset: 5, magic: 1 }), "{e:?}");
    }

    /// A truncated body is an error, not a hang or a panic; a length past the frame is
    /// malformed.
    #[test]
    fn a_truncated_or_lying_response_is_an_error() {
        let body = response(12, vec![(0, batches(0, 2, 5), vec![])]);
        let mut src: &[u8] = &body[..body.len() - 30];
        let mut counter = 0;
        assert!(read_fetch_body(&mut src, body.len(), 12, CrcCheck::None, &mut counter).is_err());
        let mut src: &[u8] = &body;
        let e = read_fetch_body(&mut src, 20, 12, CrcCheck::None, &mut counter).unwrap_err();
        assert!(matches!(e, DrainError::Malformed(_)), "{e}");
        // A topic name announced at 2^34 bytes (v12: compact string) is refused unallocated.
        let mut lying = Vec::new();
        lying.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // throttle, error, session
        lying.push(2); // one topic
        lying.extend_from_slice(&[0x81, 0x80, 0x80, 0x80, 0x40]); // 2^34 + 1 as a uvarint
        let mut src: &[u8] = &lying;
        let e = read_fetch_body(&mut src, lying.len(), 12, CrcCheck::None, &mut counter).unwrap_err();
        assert!(e.to_string().contains("string length 17179869184"), "{e}");
    }

    /// A control batch's marker type is read (COMMIT 1, ABORT 0).
    #[test]
    fn control_batches_carry_their_marker_type() {
        for kind in [1i16, 0] {
            // The control record: key (version 0, type), value (version 0, coordinator epoch 0).
            let key = [0u8, 0, 0, kind as u8];
            let mut marker =
                BatchBuilder::new(7, Compression::None).producer(42, 1, -1).transactional(true).control(true);
            marker.append(1_700_000_000_000, Some(&key), Some(&[0, 0, 0, 0, 0, 0]), &[]);
            let body = response(12, vec![(0, marker.build().expect("builds"), vec![])]);
            let d = drain(&body, 12, CrcCheck::None).unwrap();
            assert_eq!(d.topics[0].1[0].batches[0].control_type, Some(kind));
        }
    }

    #[test]
    fn records_from_first_counts_dense_and_straddling_batches() {
        let b = |first, last, records| DrainedBatch {
            topic: Arc::from("t"),
            partition: 0,
            base_offset: 10,
            first_offset: first,
            last_offset: last,
            records,
            bytes: 100,
            crc_checked: false,
        };
        assert_eq!(b(10, 29, 20).records_from_first(), 20);
        assert!(b(10, 29, 20).is_dense() && !b(10, 29, 5).is_dense());
        assert_eq!(b(15, 29, 20).records_from_first(), 15, "a dense batch from the fetch offset");
        assert_eq!(b(10, 29, 5).records_from_first(), 5, "compacted: its count");
        assert_eq!(b(27, 29, 5).records_from_first(), 3, "compacted, straddling: at most the span");
    }
}
