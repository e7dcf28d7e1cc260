//! Compression codecs of record batches (attributes bits 0-2), Kafka's `CompressionType`.
//!
//! A compressed v2 batch compresses its records section as a whole; a compressed legacy (magic
//! 0/1) message compresses an inner message set into the wrapper's value. The byte formats are
//! the ones Kafka's Java client writes and reads:
//!
//! | id | name | written as | read as |
//! |---|---|---|---|
//! | 0 | `none` | as is | as is |
//! | 1 | `gzip` | one gzip member (level 6, like `java.util.zip.GZIPOutputStream`) | concatenated members; trailing non-gzip bytes ignored (`GZIPInputStream`) |
//! | 2 | `snappy` | xerial framing, 32 KiB blocks (snappy-java's `SnappyOutputStream`) | xerial framing (Java client) or raw snappy (librdkafka), like `SnappyInputStream` |
//! | 3 | `lz4` | LZ4 frame, 64 KiB independent blocks, no checksums (`KafkaLZ4BlockOutputStream`) | LZ4 frame as `KafkaLZ4BlockInputStream` accepts it |
//! | 4 | `zstd` | one zstd frame, level 3 (zstd-jni's `ZstdOutputStream` default) | one or more zstd frames |
//!
//! Every decoder is bounded: [`Compression::decompress`] never produces (or allocates an output
//! buffer for) more than `max_output` bytes, so a decompression bomb fails with
//! [`io::ErrorKind::InvalidData`] instead of exhausting memory. Garbage input is an error, never a
//! panic. [`Compression::decompressor`] reads the same formats as a stream, in memory bounded by
//! the codec's state (a window, a block) rather than by the output, for walks that do not keep the
//! records (the produce validation's, `record_stream.rs`).
//!
//! The codec of an attributes id, [`Compression::from_id`], is decoded beside the attributes in
//! `header.rs` (an unknown id is a [`BatchError`](super::BatchError)).

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

/// A batch's compression codec, Kafka's `CompressionType` (the `compression.type` config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression (id 0).
    #[default]
    None,
    /// gzip (id 1).
    Gzip,
    /// snappy (id 2).
    Snappy,
    /// lz4 (id 3).
    Lz4,
    /// zstd (id 4, magic 2 only: KIP-110).
    Zstd,
}

/// Default bound on a batch's decompressed records (256 MiB): the `max_output` the record decoders
/// pass to [`Compression::decompress`] unless told otherwise.
pub const DEFAULT_MAX_UNCOMPRESSED: usize = 256 << 20;

/// The 8-byte magic of snappy-java's stream format (`SnappyCodec.MAGIC_HEADER`): `0x82 "SNAPPY" 0x00`.
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Size of the xerial stream header: magic (8), version (i32 BE), compatible version (i32 BE).
pub const XERIAL_HEADER_SIZE: usize = 16;
/// Version and minimum compatible version snappy-java writes (`SnappyCodec.DEFAULT_VERSION` and
/// `MINIMUM_COMPATIBLE_VERSION`); streams with a version below this are refused, as snappy-java does.
const XERIAL_VERSION: i32 = 1;
/// Uncompressed bytes per xerial block: snappy-java's `SnappyOutputStream` default block size.
pub const XERIAL_BLOCK_SIZE: usize = 32 * 1024;

/// Magic number of an LZ4 frame (little-endian on the wire), `KafkaLZ4BlockOutputStream.MAGIC`.
const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;
/// Bit 31 of an LZ4 block size: the block is stored uncompressed.
const LZ4_UNCOMPRESSED_BIT: u32 = 0x8000_0000;
/// FLG bits: version (7-6), block independence (5), block checksum (4), content size (3),
/// content checksum (2); bits 1-0 are reserved for Kafka (bit 0 is the dictionary id in the spec).
const LZ4_FLG_VERSION_MASK: u8 = 0xC0;
const LZ4_FLG_VERSION_1: u8 = 0x40;
const LZ4_FLG_INDEPENDENT: u8 = 0x20;
const LZ4_FLG_BLOCK_CHECKSUM: u8 = 0x10;
const LZ4_FLG_CONTENT_SIZE: u8 = 0x08;
const LZ4_FLG_CONTENT_CHECKSUM: u8 = 0x04;
const LZ4_FLG_RESERVED: u8 = 0x03;

/// gzip level Kafka uses by default (`Deflater.DEFAULT_COMPRESSION`, which is zlib's 6).
const GZIP_LEVEL: u32 = 6;
/// zstd level Kafka uses by default (`ZSTD_CLEVEL_DEFAULT`).
const ZSTD_LEVEL: i32 = 3;
/// zstd's default upper limit on a frame's window (2^27 = 128 MiB), `ZSTD_WINDOWLOG_LIMIT_DEFAULT`,
/// also the limit Kafka's zstd-jni decoder applies.
const ZSTD_WINDOW_LOG_LIMIT: u32 = 27;
/// The smallest window limit applied however small `max_output` is (2^23 = 8 MiB: every zstd level up
/// to 19 fits); the limit grows with `max_output` up to [`ZSTD_WINDOW_LOG_LIMIT`].
const ZSTD_WINDOW_LOG_FLOOR: u32 = 23;

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] =
        [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    /// The id stored in attributes bits 0-2.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Kafka's name (`compression.type` value): `none`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Compresses `input` the way Kafka's Java producer does (see the module table): gzip level 6,
    /// xerial-framed snappy with 32 KiB blocks, an LZ4 frame with 64 KiB independent blocks and no
    /// checksums (readable by `KafkaLZ4BlockInputStream` and librdkafka), zstd level 3.
    /// [`Compression::None`] returns a copy of `input`.
    ///
    /// Errors: only those of the underlying encoder (none are expected for in-memory buffers).
    pub fn compress(self, input: &[u8]) -> io::Result<Vec<u8>> {
        match self {
            Compression::None => Ok(input.to_vec()),
            Compression::Gzip => {
                let mut enc = flate2::write::GzEncoder::new(
                    Vec::with_capacity(input.len() / 2 + 64),
                    flate2::Compression::new(GZIP_LEVEL),
                );
                enc.write_all(input)?;
                enc.finish()
            }
            Compression::Snappy => xerial_compress(input),
            Compression::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .block_mode(lz4_flex::frame::BlockMode::Independent)
                    .block_checksums(false)
                    .content_checksum(false);
                let mut enc =
                    lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::with_capacity(input.len() / 2 + 64));
                enc.write_all(input)?;
                Ok(enc.finish()?)
            }
            Compression::Zstd => zstd::stream::encode_all(input, ZSTD_LEVEL),
        }
    }

    /// Decompresses `input` (a v2 batch's records section), producing at most `max_output` bytes.
    /// Equivalent to [`Compression::decompress_for_magic`] with magic 2.
    ///
    /// Errors (all [`io::Error`]): [`io::ErrorKind::InvalidData`] when the output would exceed
    /// `max_output` or the input is not valid for the codec; [`io::ErrorKind::UnexpectedEof`] (or
    /// `InvalidData`) when it is truncated.
    pub fn decompress(self, input: &[u8], max_output: usize) -> io::Result<Vec<u8>> {
        self.decompress_for_magic(input, 2, max_output)
    }

    /// Decompresses `input` written with message format `magic`, producing at most `max_output`
    /// bytes, like Kafka's `CompressionType.wrapForInput(buffer, messageVersion, ...)`. The magic
    /// matters for lz4 only: magic 0 frames were written with a wrong header checksum (KAFKA-3160),
    /// which Kafka ignores for magic 0 and so does this.
    ///
    /// Acceptance follows Kafka's readers:
    /// - gzip: one or more concatenated members; bytes after a member that do not start another
    ///   (no `1f 8b` magic) are ignored (`GZIPInputStream`).
    /// - snappy: a stream starting with [`XERIAL_MAGIC`] and a version >= 1 is read as xerial blocks
    ///   (`[u32 BE length][raw snappy block]`; further concatenated xerial headers are skipped; 1-3
    ///   trailing bytes are ignored); anything else is one raw snappy block (`SnappyInputStream`).
    /// - lz4: the first LZ4 frame only, with Kafka's restrictions: version 1, independent blocks, no
    ///   dictionary, block size 64 KiB..4 MiB; header checksum verified (magic >= 1), block checksums
    ///   verified when present, content size and content checksum skipped unverified, bytes after
    ///   the end mark ignored (`KafkaLZ4BlockInputStream`). A truncated frame is an error.
    /// - zstd: one or more frames; frames needing a window above `max(max_output, 8 MiB)` (and in
    ///   any case above zstd's default 128 MiB limit, as for zstd-jni) are refused.
    ///
    /// Errors: as [`Compression::decompress`].
    pub fn decompress_for_magic(self, input: &[u8], magic: i8, max_output: usize) -> io::Result<Vec<u8>> {
        match self {
            Compression::None => {
                if input.len() > max_output {
                    return Err(limit_exceeded(self, max_output));
                }
                Ok(input.to_vec())
            }
            c => read_bounded(c.decompressor(input, magic, max_output)?, c, max_output, input.len().saturating_mul(4)),
        }
    }

    /// A streaming decoder of `input` written with message format `magic`: the same format
    /// handling as [`Compression::decompress_for_magic`] (which reads it to the end), for walking
    /// decompressed records with a small buffer, as Kafka's `CompressionType.wrapForInput` streams
    /// do. Its own memory is bounded by the codec, not by the output: gzip's 32 KiB window; one
    /// snappy block (xerial blocks are 32 KiB as the Java client writes them; a raw snappy stream,
    /// librdkafka's, is one block: at most ~21 times its compressed size, and never more than
    /// `max_output`); one LZ4 block (at most 4 MiB, 64 KiB as Kafka writes them); zstd's frame
    /// window (2 MiB at Kafka's default level 3; at most `max(max_output, 8 MiB)` and zstd's
    /// 128 MiB limit, as for zstd-jni). The reader does not count its output against
    /// `max_output` (except snappy, which checks each block's announced size before allocating):
    /// the caller does, as [`read_bounded`] does.
    ///
    /// Errors: for lz4 and snappy, a frame or stream header Kafka refuses
    /// ([`io::ErrorKind::InvalidData`]) or a truncated lz4 frame
    /// ([`io::ErrorKind::UnexpectedEof`]); zstd's context creation. Reading returns the errors
    /// [`Compression::decompress_for_magic`] lists.
    pub(crate) fn decompressor<'a>(
        self,
        input: &'a [u8],
        magic: i8,
        max_output: usize,
    ) -> io::Result<Decompressor<'a>> {
        Ok(match self {
            Compression::None => Decompressor::None(input),
            Compression::Gzip => Decompressor::Gzip(JavaGzip::new(input)),
            Compression::Snappy => Decompressor::Snappy(SnappyReader::new(input, max_output)?),
            Compression::Lz4 => Decompressor::Lz4(lz4_reader(input, magic)?),
            Compression::Zstd => {
                let mut dec = zstd::stream::read::Decoder::with_buffer(input)?;
                dec.window_log_max(zstd_window_log_max(max_output))?;
                Decompressor::Zstd(Box::new(dec))
            }
        })
    }
}

/// A streaming decoder of one codec over a borrowed compressed buffer, made by
/// [`Compression::decompressor`]; read it with [`Read`].
pub(crate) enum Decompressor<'a> {
    /// Uncompressed: the bytes as they are.
    None(&'a [u8]),
    /// gzip members as `GZIPInputStream` reads them.
    Gzip(JavaGzip<'a>),
    /// xerial-framed or raw snappy, one block at a time.
    Snappy(SnappyReader<'a>),
    /// The first LZ4 frame, checked with Kafka's rules.
    Lz4(Lz4Reader<'a>),
    /// zstd frames (boxed: the decoder is large and the other variants small).
    Zstd(Box<zstd::stream::read::Decoder<'a, &'a [u8]>>),
}

impl Read for Decompressor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decompressor::None(r) => r.read(buf),
            Decompressor::Gzip(r) => r.read(buf),
            Decompressor::Snappy(r) => r.read(buf),
            Decompressor::Lz4(r) => r.read(buf),
            Decompressor::Zstd(r) => r.read(buf),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of [`Compression::from_str`]: the name is not one of Kafka's codec names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compression type {name:?}: expected none, gzip, snappy, lz4 or zstd")]
pub struct UnknownCompressionName {
    /// The name given.
    pub name: String,
}

impl FromStr for Compression {
    type Err = UnknownCompressionName;

    /// Parses a `compression.type` value (`none`, `gzip`, `snappy`, `lz4`, `zstd`; ASCII case is
    /// ignored, as Kafka's `CompressionType.forName` lower-cases). The topic-level value `producer`
    /// is not a codec and is refused here.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCompressionName { name: s.to_string() })
    }
}

/// The error of a decoder whose output would exceed `max_output` bytes ([`io::ErrorKind::InvalidData`]).
pub(crate) fn limit_exceeded(codec: Compression, max_output: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{codec} output exceeds the limit of {max_output} bytes (max_output)"),
    )
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads `r` to the end into a buffer that never grows past `max_output + 1` bytes. Errors with
/// [`limit_exceeded`] when there is more than `max_output` bytes of output.
fn read_bounded<R: Read>(mut r: R, codec: Compression, max_output: usize, size_hint: usize) -> io::Result<Vec<u8>> {
    let limit = max_output.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    out.reserve_exact(size_hint.clamp(64, 1 << 20).min(limit));
    let mut filled = 0usize;
    loop {
        if filled == out.len() {
            if out.len() >= limit {
                break;
            }
            let grow = out.len().max(8 * 1024).min(limit - out.len());
            out.reserve_exact(grow);
            out.resize(out.len() + grow, 0);
        }
        match r.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    if filled > max_output {
        return Err(limit_exceeded(codec, max_output));
    }
    out.truncate(filled);
    Ok(out)
}

/// gzip as `java.util.zip.GZIPInputStream` reads it: one member, then further members as long as
/// what follows starts with the gzip magic (`1f 8b`); other trailing bytes are ignored.
pub(crate) struct JavaGzip<'a> {
    rest: &'a [u8],
    member: Option<flate2::bufread::GzDecoder<&'a [u8]>>,
    started: bool,
}

impl<'a> JavaGzip<'a> {
    fn new(input: &'a [u8]) -> Self {
        JavaGzip { rest: input, member: None, started: false }
    }
}

impl Read for JavaGzip<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(member) = &mut self.member {
                let n = member.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                // The member ended (trailer checked): continue after it.
                self.rest = self.member.take().expect("member present").into_inner();
                continue;
            }
            if self.started && !self.rest.starts_with(&[0x1f, 0x8b]) {
                return Ok(0);
            }
            self.started = true;
            self.member = Some(flate2::bufread::GzDecoder::new(self.rest));
        }
    }
}

fn zstd_window_log_max(max_output: usize) -> u32 {
    // ceil(log2(max_output)), clamped to [floor, zstd's default limit].
    let log = usize::BITS - max_output.saturating_sub(1).leading_zeros();
    log.clamp(ZSTD_WINDOW_LOG_FLOOR, ZSTD_WINDOW_LOG_LIMIT)
}

// ---------------------------------------------------------------------------------------------
// snappy

/// Writes snappy-java's stream format: the 16-byte header, then per 32 KiB of input one
/// `[u32 BE compressed length][raw snappy block]`. Empty input gives the header alone.
fn xerial_compress(input: &[u8]) -> io::Result<Vec<u8>> {
    let mut out =
        Vec::with_capacity(XERIAL_HEADER_SIZE + snap::raw::max_compress_len(input.len()) + input.len() / 8192 + 8);
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
    out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
    let mut enc = snap::raw::Encoder::new();
    for chunk in input.chunks(XERIAL_BLOCK_SIZE) {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(chunk.len()), 0);
        let n = enc.compress(chunk, &mut out[start..]).map_err(io::Error::other)?;
        out.truncate(start + n);
        let n = u32::try_from(n).map_err(|_| invalid(format!("snappy block of {n} bytes does not fit a u32")))?;
        out[len_at..len_at + 4].copy_from_slice(&n.to_be_bytes());
    }
    Ok(out)
}

/// Whether `input` starts with a xerial header snappy-java accepts (magic and version >= 1).
fn xerial_header_at(input: &[u8]) -> Option<Result<(), io::Error>> {
    if input.len() < XERIAL_HEADER_SIZE || input[..8] != XERIAL_MAGIC {
        return None;
    }
    let version = i32::from_be_bytes(input[8..12].try_into().expect("4 bytes"));
    if version < XERIAL_VERSION {
        return Some(Err(invalid(format!(
            "xerial snappy stream version {version} is incompatible: at least {XERIAL_VERSION} is required"
        ))));
    }
    Some(Ok(()))
}

/// The most output one raw snappy block can produce per compressed byte, rounded up: a 3-byte copy
/// element (2-byte offset) writes at most 64 bytes, every other element less per byte. A block
/// announcing more than 22 times its size cannot be valid, and is refused before its output is
/// allocated.
const SNAPPY_MAX_EXPANSION: usize = 22;

/// Reads snappy as snappy-java's `SnappyInputStream` does (see
/// [`Compression::decompress_for_magic`]), one block at a time: a stream starting with a xerial
/// header is read block by block (`[u32 BE length][raw snappy block]`, further concatenated headers
/// skipped, 1-3 trailing bytes ignored); anything else is one raw snappy block. Each block's
/// announced size is checked against what is left of `max_output` (and against what its compressed
/// size can produce) before its buffer is allocated.
pub(crate) struct SnappyReader<'a> {
    input: &'a [u8],
    /// Next byte of `input` to read (xerial).
    pos: usize,
    /// Whether `input` is xerial-framed.
    xerial: bool,
    /// A raw stream's one block was decoded.
    raw_done: bool,
    max_output: usize,
    /// Bytes decoded so far, all blocks.
    produced: usize,
    /// The current block's output and how much of it was read.
    block: Vec<u8>,
    block_pos: usize,
}

impl<'a> SnappyReader<'a> {
    /// Errors: a xerial header with a version below 1.
    fn new(input: &'a [u8], max_output: usize) -> io::Result<Self> {
        let xerial = match xerial_header_at(input) {
            None => false,
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => true,
        };
        let pos = if xerial { XERIAL_HEADER_SIZE } else { 0 };
        Ok(SnappyReader {
            input,
            pos,
            xerial,
            raw_done: false,
            max_output,
            produced: 0,
            block: Vec::new(),
            block_pos: 0,
        })
    }

    /// Decodes the next block into `self.block`; `Ok(false)` at the end of the stream.
    fn next_block(&mut self) -> io::Result<bool> {
        let input = self.input;
        if !self.xerial {
            // Raw snappy (librdkafka, or anything without the xerial header): one block (an
            // empty input too: an error, a block has at least its length varint).
            if self.raw_done {
                return Ok(false);
            }
            self.raw_done = true;
            self.decode_block(input)?;
            return Ok(true);
        }
        // snappy-java stops when fewer than 4 bytes are left for a block length.
        while input.len() - self.pos >= 4 {
            let pos = self.pos;
            let len = u32::from_be_bytes(input[pos..pos + 4].try_into().expect("4 bytes"));
            if len == u32::from_be_bytes(XERIAL_MAGIC[..4].try_into().expect("4 bytes")) {
                // A concatenated stream: another header follows (snappy-java skips it).
                match xerial_header_at(&input[pos..]) {
                    Some(Ok(())) => {
                        self.pos += XERIAL_HEADER_SIZE;
                        continue;
                    }
                    Some(Err(e)) => return Err(e),
                    None => return Err(invalid(format!("corrupt xerial snappy header at byte {pos}"))),
                }
            }
            if len > i32::MAX as u32 {
                return Err(invalid(format!("negative xerial snappy block length at byte {pos}")));
            }
            let start = pos + 4;
            let len = len as usize;
            if len > input.len() - start {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "xerial snappy block of {len} bytes at byte {pos} exceeds the {} bytes left",
                        input.len() - start
                    ),
                ));
            }
            self.pos = start + len;
            self.decode_block(&input[start..start + len])?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Decodes one raw snappy block into `self.block`, checking its announced length against
    /// what is left of `max_output` (and what `block.len()` bytes can produce) before allocating.
    fn decode_block(&mut self, block: &[u8]) -> io::Result<()> {
        let n = snap::raw::decompress_len(block).map_err(|e| invalid(format!("snappy: {e}")))?;
        if n > self.max_output - self.produced {
            return Err(limit_exceeded(Compression::Snappy, self.max_output));
        }
        if n > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
            return Err(invalid(format!(
                "snappy: a block of {} bytes cannot produce the {n} bytes it announces",
                block.len()
            )));
        }
        self.block.clear();
        self.block.resize(n, 0);
        self.block_pos = 0;
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut self.block)
            .map_err(|e| invalid(format!("snappy: {e}")))?;
        if written != n {
            return Err(invalid(format!("snappy block announced {n} bytes but produced {written}")));
        }
        self.produced += n;
        Ok(())
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.block_pos < self.block.len() {
                let n = buf.len().min(self.block.len() - self.block_pos);
                buf[..n].copy_from_slice(&self.block[self.block_pos..self.block_pos + n]);
                self.block_pos += n;
                return Ok(n);
            }
            if !self.next_block()? {
                return Ok(0);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// lz4

/// The first LZ4 frame of `input` as `KafkaLZ4BlockInputStream` reads it: a streaming decoder.
/// Holds one block (at most 4 MiB) and its output at a time.
///
/// The frame is checked here with Kafka's rules (header, then a walk over the block headers to the
/// end mark), and a normalized copy of the header (content size and content checksum dropped, a
/// correct header checksum) is put in front of the blocks for `lz4_flex`'s `FrameDecoder`, which
/// decompresses the blocks and verifies block checksums. This gives Kafka's behaviour exactly:
/// magic 0's broken header checksum is ignored, unverified fields Kafka skips are skipped, and
/// trailing bytes after the end mark are ignored.
/// `lz4_flex`'s frame decoder over a normalized 7-byte frame header followed by the frame's blocks.
pub(crate) type Lz4Reader<'a> = lz4_flex::frame::FrameDecoder<io::Chain<io::Cursor<[u8; 7]>, &'a [u8]>>;

fn lz4_reader(input: &[u8], magic: i8) -> io::Result<Lz4Reader<'_>> {
    let eof = |what: &str| io::Error::new(io::ErrorKind::UnexpectedEof, format!("lz4 frame truncated: {what}"));
    if input.len() < 7 {
        return Err(eof("header"));
    }
    if u32::from_le_bytes(input[0..4].try_into().expect("4 bytes")) != LZ4_FRAME_MAGIC {
        return Err(invalid("lz4: stream unsupported (invalid magic bytes)"));
    }
    let flg = input[4];
    let bd = input[5];
    if flg & LZ4_FLG_RESERVED != 0 {
        return Err(invalid(format!("lz4: reserved FLG bits set ({flg:#04x}); dictionaries are unsupported")));
    }
    if flg & LZ4_FLG_INDEPENDENT == 0 {
        return Err(invalid("lz4: dependent block stream is unsupported"));
    }
    if flg & LZ4_FLG_VERSION_MASK != LZ4_FLG_VERSION_1 {
        return Err(invalid(format!("lz4: frame version {} is unsupported", flg >> 6)));
    }
    if bd & 0x8F != 0 {
        return Err(invalid(format!("lz4: reserved BD bits set ({bd:#04x})")));
    }
    let block_size_id = (bd >> 4) & 0x07;
    if !(4..=7).contains(&block_size_id) {
        return Err(invalid(format!("lz4: block size value {block_size_id} must be between 4 and 7")));
    }
    let max_block_size = 1usize << (2 * block_size_id as usize + 8);
    let mut pos = 6;
    if flg & LZ4_FLG_CONTENT_SIZE != 0 {
        if input.len() < pos + 8 + 1 {
            return Err(eof("content size"));
        }
        pos += 8;
    }
    // Header checksum: second byte of xxh32 over the descriptor (FLG .. content size). Magic 0
    // frames computed it over the magic number too (KAFKA-3160); Kafka skips the check for them.
    let hc = input[pos];
    if magic != 0 {
        let expected = (xxh32(&input[4..pos], 0) >> 8) as u8;
        if hc != expected {
            return Err(invalid(format!(
                "lz4: stream frame descriptor corrupted (header checksum {hc:#04x}, expected {expected:#04x})"
            )));
        }
    }
    pos += 1;
    let blocks_start = pos;
    let block_checksums = flg & LZ4_FLG_BLOCK_CHECKSUM != 0;
    // Walk the block headers to the end mark.
    loop {
        if input.len() - pos < 4 {
            return Err(eof("block size"));
        }
        let raw = u32::from_le_bytes(input[pos..pos + 4].try_into().expect("4 bytes"));
        pos += 4;
        let size = (raw & !LZ4_UNCOMPRESSED_BIT) as usize;
        if size == 0 {
            break;
        }
        if size > max_block_size {
            return Err(invalid(format!("lz4: block size {size} exceeded max: {max_block_size}")));
        }
        let need = size + if block_checksums { 4 } else { 0 };
        if input.len() - pos < need {
            return Err(eof("block"));
        }
        pos += need;
    }
    let blocks = &input[blocks_start..pos]; // up to and including the end mark
    let mut header = [0u8; 7];
    header[0..4].copy_from_slice(&LZ4_FRAME_MAGIC.to_le_bytes());
    header[4] = flg & !(LZ4_FLG_CONTENT_SIZE | LZ4_FLG_CONTENT_CHECKSUM);
    header[5] = bd;
    header[6] = (xxh32(&header[4..6], 0) >> 8) as u8;
    Ok(lz4_flex::frame::FrameDecoder::new(io::Read::chain(io::Cursor::new(header), blocks)))
}

/// xxHash32 (the checksum of LZ4 frames), little-endian lanes.
pub(crate) fn xxh32(input: &[u8], seed: u32) -> u32 {
    const P1: u32 = 0x9E37_79B1;
    const P2: u32 = 0x85EB_CA77;
    const P3: u32 = 0xC2B2_AE3D;
    const P4: u32 = 0x27D4_EB2F;
    const P5: u32 = 0x1656_67B1;
    fn lane(b: &[u8]) -> u32 {
        u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
    }
    fn round(acc: u32, v: u32) -> u32 {
        acc.wrapping_add(v.wrapping_mul(P2)).rotate_left(13).wrapping_mul(P1)
    }
    let mut rest = input;
    let mut h = if input.len() >= 16 {
        let mut v = [seed.wrapping_add(P1).wrapping_add(P2), seed.wrapping_add(P2), seed, seed.wrapping_sub(P1)];
        while rest.len() >= 16 {
            for (i, acc) in v.iter_mut().enumerate() {
                *acc = round(*acc, lane(&rest[4 * i..]));
            }
            rest = &rest[16..];
        }
        v[0].rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18))
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(input.len() as u32);
    while rest.len() >= 4 {
        h = h.wrapping_add(lane(rest).wrapping_mul(P3)).rotate_left(17).wrapping_mul(P4);
        rest = &rest[4..];
    }
    for &b in rest {
        h = h.wrapping_add((b as u32).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 << 20;

    /// Deterministic, moderately compressible bytes (a text-like mix with some noise).
    fn sample(len: usize) -> Vec<u8> {
        let mut x: u32 = 0x1234_5678;
        let words: [&[u8]; 6] = [b"kafka ", b"segment ", b"offset ", b"batch ", b"record ", b"fetch "];
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if x & 7 == 0 {
                out.push((x >> 8) as u8);
            } else {
                out.extend_from_slice(words[(x % 6) as usize]);
            }
        }
        out.truncate(len);
        out
    }

    fn incompressible(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn round_trip_every_codec() {
        let inputs = [Vec::new(), b"x".to_vec(), b"hello, kafka".to_vec(), sample(1 << 20), incompressible(200_000)];
        for c in Compression::ALL {
            for input in &inputs {
                let z = c.compress(input).unwrap();
                let back = c.decompress(&z, MAX).unwrap();
                assert_eq!(back.len(), input.len(), "{c} len {}", input.len());
                assert!(back == *input, "{c} round trip of {} bytes", input.len());
                // Exactly at the limit is fine.
                assert_eq!(c.decompress(&z, input.len()).unwrap(), *input, "{c} at the limit");
            }
            if c != Compression::None {
                let big = sample(1 << 20);
                let z = c.compress(&big).unwrap();
                assert!(z.len() < big.len() / 2, "{c} compressed 1 MiB of text to {} bytes", z.len());
            }
        }
    }

    #[test]
    fn max_output_is_enforced() {
        let input = vec![0u8; 1 << 20];
        for c in Compression::ALL {
            let z = c.compress(&input).unwrap();
            for limit in [0, 1, 1000, (1 << 20) - 1] {
                let e = c.decompress(&z, limit).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{c} limit {limit}: {e}");
                assert!(e.to_string().contains(&format!("limit of {limit} bytes")), "{c}: {e}");
            }
        }
        // A bomb: 64 MiB of zeros compresses to little; a 1 MiB limit stops it.
        let bomb = vec![0u8; 64 << 20];
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let z = c.compress(&bomb).unwrap();
            assert!(z.len() < 4 << 20, "{c}: {}", z.len());
            assert!(c.decompress(&z, 1 << 20).is_err(), "{c}");
        }
    }

    #[test]
    fn read_bounded_never_grows_past_the_limit() {
        let data = vec![7u8; 100_000];
        let out = read_bounded(&data[..], Compression::Gzip, 100_000, 10).unwrap();
        assert_eq!(out.len(), 100_000);
        assert!(out.capacity() <= 100_001, "capacity {}", out.capacity());
        assert!(read_bounded(&data[..], Compression::Gzip, 99_999, 1 << 30).is_err());
    }

    #[test]
    fn garbage_is_rejected() {
        let garbage: Vec<Vec<u8>> = vec![
            b"definitely not compressed".to_vec(),
            vec![0xff; 64],
            vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1, 2, 3],
            vec![0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x00],
            vec![0x28, 0xb5, 0x2f, 0xfd, 0x00],
            incompressible(4096),
        ];
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            for g in &garbage {
                assert!(c.decompress(g, MAX).is_err(), "{c} accepted {:02x?}", &g[..g.len().min(16)]);
            }
            // Truncations of a valid stream fail too (never panic).
            let z = c.compress(&sample(100_000)).unwrap();
            for cut in [1, 5, 10, z.len() / 2, z.len() - 1] {
                assert!(c.decompress(&z[..cut], MAX).is_err(), "{c} accepted a cut at {cut} of {}", z.len());
            }
        }
    }

    #[test]
    fn flipped_bytes_never_panic() {
        for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let input = sample(5000);
            let z = c.compress(&input).unwrap();
            for i in 0..z.len() {
                for bit in [0x01u8, 0x80] {
                    let mut bad = z.clone();
                    bad[i] ^= bit;
                    // Whatever the codec says, it must not panic or exceed the limit.
                    if let Ok(out) = c.decompress(&bad, 10_000) {
                        assert!(out.len() <= 10_000);
                    }
                }
            }
        }
    }

    #[test]
    fn snappy_writes_xerial_framing() {
        let input = sample(100_000);
        let z = Compression::Snappy.compress(&input).unwrap();
        assert_eq!(&z[..16], &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        // Four blocks of at most 32 KiB each, each a valid raw snappy block.
        let mut pos = 16;
        let mut sizes = Vec::new();
        while pos < z.len() {
            let len = u32::from_be_bytes(z[pos..pos + 4].try_into().unwrap()) as usize;
            let block = &z[pos + 4..pos + 4 + len];
            sizes.push(snap::raw::decompress_len(block).unwrap());
            pos += 4 + len;
        }
        assert_eq!(pos, z.len());
        assert_eq!(sizes, vec![32768, 32768, 32768, 100_000 - 3 * 32768]);
        assert_eq!(Compression::Snappy.compress(&[]).unwrap().len(), 16);
    }

    #[test]
    fn snappy_known_xerial_vector_and_raw() {
        // Hand-assembled from the formats: xerial header (version 1, compatible 1), then two blocks:
        // "hello" as a raw snappy literal (len 5, tag 0x10), and "abcabcabc" as literal "abc" + a
        // 1-byte-offset copy (length 6, offset 3: tag 0x09, offset 0x03).
        let mut v = vec![0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1];
        v.extend_from_slice(&[0, 0, 0, 7, 0x05, 0x10, b'h', b'e', b'l', b'l', b'o']);
        v.extend_from_slice(&[0, 0, 0, 7, 0x09, 0x08, b'a', b'b', b'c', 0x09, 0x03]);
        assert_eq!(Compression::Snappy.decompress(&v, MAX).unwrap(), b"helloabcabcabc");
        // Three trailing bytes are ignored, as by snappy-java.
        let mut t = v.clone();
        t.extend_from_slice(&[0, 0, 0]);
        assert_eq!(Compression::Snappy.decompress(&t, MAX).unwrap(), b"helloabcabcabc");
        // A concatenated stream (header again) continues.
        let mut cat = v.clone();
        cat.extend_from_slice(&v);
        assert_eq!(Compression::Snappy.decompress(&cat, MAX).unwrap(), b"helloabcabcabchelloabcabcabc");
        // The same blocks without framing: raw snappy, as librdkafka writes.
        assert_eq!(Compression::Snappy.decompress(&v[20..27], MAX).unwrap(), b"hello");
        assert_eq!(
            Compression::Snappy.decompress(&[0x09, 0x08, b'a', b'b', b'c', 0x09, 0x03], MAX).unwrap(),
            b"abcabcabc"
        );
        // Version 0 is refused; a block running past the end is an error; the limit applies.
        let mut v0 = v.clone();
        v0[11] = 0;
        assert!(Compression::Snappy.decompress(&v0, MAX).is_err());
        assert!(Compression::Snappy.decompress(&v[..v.len() - 1], MAX).is_err());
        assert!(Compression::Snappy.decompress(&v, 13).is_err());
        assert_eq!(Compression::Snappy.decompress(&v, 14).unwrap().len(), 14);
        // Header only = empty.
        assert!(Compression::Snappy.decompress(&v[..16], MAX).unwrap().is_empty());
    }

    #[test]
    fn snappy_refuses_block_sizes_its_bytes_cannot_produce() {
        // A raw block announcing 100 000 bytes with 3 bytes of elements: refused before allocating.
        let mut v = Vec::new();
        let mut n = 100_000u32;
        while n >= 0x80 {
            v.push((n as u8) | 0x80);
            n >>= 7;
        }
        v.push(n as u8);
        v.extend_from_slice(&[0x00, b'a', 0x00]);
        let e = Compression::Snappy.decompress(&v, MAX).unwrap_err();
        assert!(e.to_string().contains("cannot produce the 100000 bytes"), "{e}");
        // The most compressible input snappy has (runs of copies of 64 bytes) stays within the
        // bound, raw and xerial-framed.
        let zeros = vec![0u8; 1 << 20];
        let raw = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert!(raw.len() * SNAPPY_MAX_EXPANSION >= zeros.len() && raw.len() * 21 < zeros.len(), "{}", raw.len());
        assert_eq!(Compression::Snappy.decompress(&raw, MAX).unwrap(), zeros);
        let framed = Compression::Snappy.compress(&zeros).unwrap();
        assert_eq!(Compression::Snappy.decompress(&framed, MAX).unwrap(), zeros);
    }

    #[test]
    fn decompressor_streams_what_decompress_returns() {
        let input = sample(300_000);
        for c in Compression::ALL {
            let z = c.compress(&input).unwrap();
            let mut r = c.decompressor(&z, 2, MAX).unwrap();
            let mut out = Vec::new();
            let mut buf = [0u8; 1000];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            assert!(out == input, "{c}");
        }
    }

    #[test]
    fn xxh32_known_vectors() {
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(xxh32(b"Nobody inspects the spammish repetition", 0), 0xE229_3B2F);
        // lz4_flex's header checksum agrees with ours: (xxh32(FLG BD) >> 8) as u8.
        let z = Compression::Lz4.compress(b"abc").unwrap();
        assert_eq!(z[6], (xxh32(&z[4..6], 0) >> 8) as u8);
    }

    #[test]
    fn lz4_frames_are_kafkas() {
        let z = Compression::Lz4.compress(&sample(200_000)).unwrap();
        // Magic, FLG = version 1 + independent blocks (no checksums, no content size), BD = 64 KiB.
        assert_eq!(&z[..6], &[0x04, 0x22, 0x4d, 0x18, 0x60, 0x40]);
        // Ends with the end mark and no content checksum.
        assert_eq!(&z[z.len() - 4..], &[0, 0, 0, 0]);
        // Blocks hold at most 64 KiB; incompressible ones are stored with bit 31 set.
        let raw = Compression::Lz4.compress(&incompressible(70_000)).unwrap();
        let first = u32::from_le_bytes(raw[7..11].try_into().unwrap());
        assert_eq!(first, 0x8000_0000 | 65536);
        // Empty input: header + end mark, like KafkaLZ4BlockOutputStream.
        assert_eq!(Compression::Lz4.compress(&[]).unwrap().len(), 11);
    }

    /// Builds a frame by hand, the way Kafka does, with optional block checksums, content size and
    /// content checksum, and a header checksum computed as magic 0 (KAFKA-3160) or correctly.
    fn hand_frame(
        data: &[u8],
        broken_hc: bool,
        block_checksum: bool,
        content_size: bool,
        content_checksum: bool,
    ) -> Vec<u8> {
        let mut f = LZ4_FRAME_MAGIC.to_le_bytes().to_vec();
        let mut flg = 0x60;
        if block_checksum {
            flg |= LZ4_FLG_BLOCK_CHECKSUM;
        }
        if content_size {
            flg |= LZ4_FLG_CONTENT_SIZE;
        }
        if content_checksum {
            flg |= LZ4_FLG_CONTENT_CHECKSUM;
        }
        f.push(flg);
        f.push(0x40);
        if content_size {
            f.extend_from_slice(&(data.len() as u64).to_le_bytes());
        }
        let hc_from = if broken_hc { 0 } else { 4 };
        f.push((xxh32(&f[hc_from..], 0) >> 8) as u8);
        for chunk in data.chunks(65536) {
            let block = lz4_flex::block::compress(chunk);
            f.extend_from_slice(&(block.len() as u32).to_le_bytes());
            f.extend_from_slice(&block);
            if block_checksum {
                f.extend_from_slice(&xxh32(&block, 0).to_le_bytes());
            }
        }
        f.extend_from_slice(&[0; 4]);
        if content_checksum {
            // Deliberately wrong: Kafka does not verify the content checksum.
            f.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        }
        f
    }

    #[test]
    fn lz4_reads_what_kafka_reads() {
        let data = sample(150_000);
        // Magic 0's broken header checksum: accepted for magic 0 only.
        let broken = hand_frame(&data, true, false, false, false);
        assert_ne!(broken[6], (xxh32(&broken[4..6], 0) >> 8) as u8, "the vector must have a wrong HC");
        assert_eq!(Compression::Lz4.decompress_for_magic(&broken, 0, MAX).unwrap(), data);
        let e = Compression::Lz4.decompress_for_magic(&broken, 1, MAX).unwrap_err();
        assert!(e.to_string().contains("descriptor corrupted"), "{e}");
        assert!(Compression::Lz4.decompress(&broken, MAX).is_err());
        // Block checksums verified; content size and (wrong) content checksum skipped.
        let full = hand_frame(&data, false, true, true, true);
        assert_eq!(Compression::Lz4.decompress(&full, MAX).unwrap(), data);
        let mut bad_block = full.clone();
        let at = bad_block.len() - 12; // inside the last block's checksum
        bad_block[at] ^= 1;
        assert!(Compression::Lz4.decompress(&bad_block, MAX).is_err());
        // Trailing bytes after the end mark are ignored, as by Kafka.
        let mut trailing = hand_frame(&data, false, false, false, false);
        trailing.extend_from_slice(b"junk");
        assert_eq!(Compression::Lz4.decompress(&trailing, MAX).unwrap(), data);
        // Dependent blocks, dictionaries and other versions are refused.
        let mut linked = hand_frame(b"abc", false, false, false, false);
        linked[4] &= !LZ4_FLG_INDEPENDENT;
        linked[6] = (xxh32(&linked[4..6], 0) >> 8) as u8;
        assert!(Compression::Lz4.decompress(&linked, MAX).unwrap_err().to_string().contains("dependent"));
        let mut dict = hand_frame(b"abc", false, false, false, false);
        dict[4] |= 0x01;
        assert!(Compression::Lz4.decompress(&dict, MAX).is_err());
        // A missing end mark is an error (lz4_flex alone would accept it).
        let z = Compression::Lz4.compress(&data).unwrap();
        assert!(Compression::Lz4.decompress(&z[..z.len() - 4], MAX).is_err());
    }

    #[test]
    fn zstd_window_limit() {
        assert_eq!(zstd_window_log_max(0), ZSTD_WINDOW_LOG_FLOOR);
        assert_eq!(zstd_window_log_max(1 << 20), ZSTD_WINDOW_LOG_FLOOR);
        assert_eq!(zstd_window_log_max((1 << 25) + 1), 26);
        assert_eq!(zstd_window_log_max(256 << 20), ZSTD_WINDOW_LOG_LIMIT);
        assert_eq!(zstd_window_log_max(usize::MAX), ZSTD_WINDOW_LOG_LIMIT);
        // Two concatenated frames decode as one stream.
        let mut two = Compression::Zstd.compress(b"abc").unwrap();
        two.extend(Compression::Zstd.compress(b"def").unwrap());
        assert_eq!(Compression::Zstd.decompress(&two, MAX).unwrap(), b"abcdef");
    }

    #[test]
    fn gzip_reads_like_java() {
        // Concatenated members are one stream (GZIPInputStream).
        let mut g = Compression::Gzip.compress(b"abc").unwrap();
        g.extend(Compression::Gzip.compress(b"def").unwrap());
        assert_eq!(Compression::Gzip.decompress(&g, MAX).unwrap(), b"abcdef");
        // Trailing bytes that are not another member are ignored.
        let mut t = g.clone();
        t.extend_from_slice(b"trailing junk");
        assert_eq!(Compression::Gzip.decompress(&t, MAX).unwrap(), b"abcdef");
        // A corrupt second member is an error, and so is a bad first member or a bad trailer.
        let mut bad = g.clone();
        let second = Compression::Gzip.compress(b"abc").unwrap().len();
        bad[second + 12] ^= 0xff;
        assert!(Compression::Gzip.decompress(&bad, MAX).is_err());
        assert!(Compression::Gzip.decompress(&g[1..], MAX).is_err());
        let mut crc = Compression::Gzip.compress(b"abc").unwrap();
        let n = crc.len();
        crc[n - 8] ^= 1; // CRC-32 in the trailer
        assert!(Compression::Gzip.decompress(&crc, MAX).is_err());
        assert!(Compression::Gzip.decompress(&[], MAX).is_err());
        // The limit counts across members.
        assert!(Compression::Gzip.decompress(&g, 5).is_err());
        assert_eq!(Compression::Gzip.decompress(&g, 6).unwrap(), b"abcdef");
    }
}
