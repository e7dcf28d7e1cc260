//! The crate's one codec of Kafka's protocol primitives, for what `kafka-protocol` does not do.
//!
//! Every request and response goes through `kafka-protocol`'s messages, the consumer protocol
//! too. Its primitive types (`protocol::types::Int32`, `String`, `CompactString`,
//! `UnsignedVarInt`, ...) cannot be used on their own: in 0.17 their `Encoder` / `Decoder` traits
//! are `pub(crate)`. The formats it does not ship are written and read here:
//!
//! - [`Reader`]: reads primitives from a slice with each length checked against the bytes left
//!   before anything is allocated, a 5-byte limit on unsigned varints, and errors
//!   ([`DecodeError`]) that name the schema, version, field and byte position: the
//!   `__consumer_offsets` and `__transaction_state` records ([`super::consumer_offsets`],
//!   [`super::transaction_state`]) and the sticky assignor's user
//!   data (`client::assignor::sticky`).
//! - [`Writer`], [`put_length`], [`put_unsigned_varint`]: the same primitives written, for those
//!   records and for the hand-framed Fetch response ([`super::fetch_response`]), failing with an
//!   [`EncodeError`] that names the field.
//! - [`CountGuard`] and [`decode_guarded`]: `kafka-protocol` 0.17 pre-allocates
//!   `Vec::with_capacity(count)` with the count read from the wire (upstream kafka-protocol-rs
//!   PRs #152, #161 and #200, open), so a few bytes claiming a huge count abort the process. Its
//!   decoders run over a [`CountGuard`] that refuses such counts first: requests
//!   ([`super::frame::decode_request`]), in one pass (see [`decode_guarded`]), and the consumer
//!   protocol ([`super::consumer_protocol`]).
//!
//! Kafka's encoding: big-endian integers; `string` = `int16` length + UTF-8, `bytes` = `int32`
//! length, arrays = `int32` count, -1 = null. Flexible versions (KIP-482) use compact lengths
//! instead (unsigned varint of length + 1, 0 = null) and end every struct with tagged fields.
//! The record format's zig-zag varints are not here: they belong to the log
//! (`log::batch::record`).

use std::str;

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::protocol::buf::{ByteBuf, NotEnoughBytesError};

/// Errors decoding a versioned Kafka schema: a `__consumer_offsets` key or value, consumer
/// protocol bytes, assignor user data. Positions are byte offsets inside the key, value or
/// embedded bytes being decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The record has no key; every `__consumer_offsets` record has one.
    #[error("record has no key (every __consumer_offsets record has one)")]
    MissingKey,
    /// Fewer than 2 bytes: not even the version prefix.
    #[error("{schema}: {available} bytes, too short for the 2-byte version prefix")]
    MissingVersion {
        /// The schema being decoded.
        schema: &'static str,
        /// Bytes available.
        available: usize,
    },
    /// A version this decoder does not know.
    #[error("{schema}: unsupported version {version} (known versions {min}..={max})")]
    UnsupportedVersion {
        /// The schema being decoded.
        schema: &'static str,
        /// The version prefix found.
        version: i16,
        /// Lowest known version.
        min: i16,
        /// Highest known version.
        max: i16,
    },
    /// A field extends past the end of the bytes.
    #[error("{schema} v{version}: {field} at byte {position} needs {needed} bytes, {available} left")]
    Truncated {
        /// The schema being decoded.
        schema: &'static str,
        /// Its version.
        version: i16,
        /// The field being read.
        field: &'static str,
        /// Byte position of the field.
        position: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// A field holds a value its type does not allow (a negative length, null for a non-nullable
    /// field, a varint longer than 5 bytes, an array longer than the bytes left could hold).
    #[error("{schema} v{version}: invalid {field} at byte {position}: {reason}")]
    Invalid {
        /// The schema being decoded.
        schema: &'static str,
        /// Its version.
        version: i16,
        /// The field being read.
        field: &'static str,
        /// Byte position of the field.
        position: usize,
        /// What was expected.
        reason: String,
    },
    /// A string field is not valid UTF-8.
    #[error("{schema} v{version}: {field} at byte {position} is not UTF-8")]
    InvalidUtf8 {
        /// The schema being decoded.
        schema: &'static str,
        /// Its version.
        version: i16,
        /// The field being read.
        field: &'static str,
        /// Byte position of the string's first byte.
        position: usize,
        /// The UTF-8 error.
        #[source]
        source: str::Utf8Error,
    },
    /// A message decoded by `kafka-protocol` (the consumer protocol's) does not parse; the crate
    /// names no field, so this carries its message and where decoding stopped.
    #[error("{schema} v{version}: {reason} (decoding stopped at byte {position})")]
    Message {
        /// The schema being decoded.
        schema: &'static str,
        /// Its version.
        version: i16,
        /// Byte position where decoding stopped.
        position: usize,
        /// The decoder's message (the whole error chain).
        reason: String,
    },
}

/// A value that cannot be encoded at the requested version (a string longer than 32767 bytes in
/// a non-flexible version, tagged fields in a non-flexible version, an unknown version).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{schema} v{version}: cannot encode {field}: {reason}")]
pub struct EncodeError {
    /// The schema being encoded.
    pub schema: &'static str,
    /// The version requested.
    pub version: i16,
    /// The field.
    pub field: &'static str,
    /// Why.
    pub reason: String,
}

/// A tagged field this decoder does not interpret (KIP-482), kept so that re-encoding
/// reproduces the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedField {
    /// The tag.
    pub tag: u32,
    /// The raw field bytes.
    pub data: Vec<u8>,
}

// ---------------------------------------------------------------------------------------------
// Reader.

/// Reads Kafka's protocol primitives from a byte slice with every length checked before anything
/// is allocated, and errors that name the schema, version, field and byte position.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    schema: &'static str,
    version: i16,
    flexible: bool,
}

type DResult<T> = Result<T, DecodeError>;

/// Reads the 2-byte version prefix.
pub(crate) fn read_version(schema: &'static str, buf: &[u8]) -> DResult<i16> {
    match buf {
        [a, b, ..] => Ok(i16::from_be_bytes([*a, *b])),
        _ => Err(DecodeError::MissingVersion { schema, available: buf.len() }),
    }
}

impl<'a> Reader<'a> {
    /// A reader positioned after the version prefix, which must be in `min..=max`; versions from
    /// `first_flexible` on use compact lengths and tagged fields.
    pub(crate) fn versioned(
        schema: &'static str,
        buf: &'a [u8],
        min: i16,
        max: i16,
        first_flexible: i16,
    ) -> DResult<Self> {
        let version = read_version(schema, buf)?;
        if !(min..=max).contains(&version) {
            return Err(DecodeError::UnsupportedVersion { schema, version, min, max });
        }
        Ok(Reader { buf, pos: 2, schema, version, flexible: version >= first_flexible })
    }

    /// A reader of bytes without a version prefix and without flexible encodings (the sticky
    /// assignor's user data); its errors give version -1.
    pub(crate) fn unversioned(schema: &'static str, buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0, schema, version: -1, flexible: false }
    }

    /// The version prefix read (-1 for [`Reader::unversioned`]).
    pub(crate) fn version(&self) -> i16 {
        self.version
    }

    /// Whether the version uses compact lengths and tagged fields (KIP-482).
    pub(crate) fn flexible(&self) -> bool {
        self.flexible
    }

    /// Bytes not read yet.
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn truncated(&self, field: &'static str, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            schema: self.schema,
            version: self.version,
            field,
            position: self.pos,
            needed,
            available: self.remaining(),
        }
    }

    fn invalid(&self, field: &'static str, position: usize, reason: impl Into<String>) -> DecodeError {
        DecodeError::Invalid { schema: self.schema, version: self.version, field, position, reason: reason.into() }
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> DResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(field, n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> DResult<[u8; N]> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// An `int8`.
    pub(crate) fn i8(&mut self, field: &'static str) -> DResult<i8> {
        self.array(field).map(i8::from_be_bytes)
    }
    /// A big-endian `int16`.
    pub(crate) fn i16(&mut self, field: &'static str) -> DResult<i16> {
        self.array(field).map(i16::from_be_bytes)
    }
    /// A big-endian `int32`.
    pub(crate) fn i32(&mut self, field: &'static str) -> DResult<i32> {
        self.array(field).map(i32::from_be_bytes)
    }
    /// A big-endian `int64`.
    pub(crate) fn i64(&mut self, field: &'static str) -> DResult<i64> {
        self.array(field).map(i64::from_be_bytes)
    }

    /// Unsigned varint of at most 5 bytes (Kafka's `ByteUtils.readUnsignedVarint`; a sixth byte
    /// is an error, where `kafka-protocol` stops silently).
    pub(crate) fn uvarint(&mut self, field: &'static str) -> DResult<u32> {
        let start = self.pos;
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1, field)?[0];
            value |= ((b & 0x7f) as u32) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.invalid(field, start, "unsigned varint longer than 5 bytes"))
    }

    /// A length prefix: `None` for null. Non-flexible: `i16` or `i32` (per `wide`), -1 = null.
    /// Flexible: unsigned varint of length + 1, 0 = null.
    fn length(&mut self, field: &'static str, wide: bool) -> DResult<Option<usize>> {
        let start = self.pos;
        if self.flexible {
            let n = self.uvarint(field)?;
            return Ok(n.checked_sub(1).map(|n| n as usize));
        }
        let n = if wide { self.i32(field)? } else { self.i16(field)? as i32 };
        match n {
            -1 => Ok(None),
            n if n < -1 => Err(self.invalid(field, start, format!("negative length {n}"))),
            n => Ok(Some(n as usize)),
        }
    }

    /// A nullable string: `int16` length, or compact in flexible versions.
    pub(crate) fn nullable_string(&mut self, field: &'static str) -> DResult<Option<String>> {
        let Some(n) = self.length(field, false)? else { return Ok(None) };
        let position = self.pos;
        let bytes = self.take(n, field)?;
        let s = str::from_utf8(bytes).map_err(|source| DecodeError::InvalidUtf8 {
            schema: self.schema,
            version: self.version,
            field,
            position,
            source,
        })?;
        Ok(Some(s.to_string()))
    }

    /// A non-null string's bytes, not checked as UTF-8 (for names Kafka reads leniently, as
    /// Java's `new String(bytes, UTF_8)` does).
    pub(crate) fn string_bytes(&mut self, field: &'static str) -> DResult<&'a [u8]> {
        let start = self.pos;
        let n =
            self.length(field, false)?.ok_or_else(|| self.invalid(field, start, "null for a non-nullable string"))?;
        self.take(n, field)
    }

    /// A string; null is an error.
    pub(crate) fn string(&mut self, field: &'static str) -> DResult<String> {
        let start = self.pos;
        self.nullable_string(field)?.ok_or_else(|| self.invalid(field, start, "null for a non-nullable string"))
    }

    /// Nullable bytes: `int32` length, or compact in flexible versions.
    pub(crate) fn nullable_bytes(&mut self, field: &'static str) -> DResult<Option<Vec<u8>>> {
        let Some(n) = self.length(field, true)? else { return Ok(None) };
        Ok(Some(self.take(n, field)?.to_vec()))
    }

    /// Bytes; null is an error.
    pub(crate) fn bytes(&mut self, field: &'static str) -> DResult<Vec<u8>> {
        let start = self.pos;
        self.nullable_bytes(field)?.ok_or_else(|| self.invalid(field, start, "null for non-nullable bytes"))
    }

    /// A non-nullable array's element count, checked against the bytes left: each element takes
    /// at least `min_element_size` bytes, so a count the buffer cannot hold is refused before
    /// anything is allocated.
    pub(crate) fn array_len(&mut self, field: &'static str, min_element_size: usize) -> DResult<usize> {
        let start = self.pos;
        let n = self.length(field, true)?.ok_or_else(|| self.invalid(field, start, "null for a non-nullable array"))?;
        if n.saturating_mul(min_element_size.max(1)) > self.remaining() {
            return Err(self.invalid(
                field,
                start,
                format!("array of {n} elements cannot fit in the {} bytes left", self.remaining()),
            ));
        }
        Ok(n)
    }

    /// A nullable array's element count (`None` for null), checked against the bytes left as
    /// [`Reader::array_len`] does.
    pub(crate) fn nullable_array_len(
        &mut self,
        field: &'static str,
        min_element_size: usize,
    ) -> DResult<Option<usize>> {
        let start = self.pos;
        let Some(n) = self.length(field, true)? else { return Ok(None) };
        if n.saturating_mul(min_element_size.max(1)) > self.remaining() {
            return Err(self.invalid(
                field,
                start,
                format!("array of {n} elements cannot fit in the {} bytes left", self.remaining()),
            ));
        }
        Ok(Some(n))
    }

    /// The tagged-field section of a flexible struct (none in non-flexible versions).
    pub(crate) fn tagged_fields(&mut self) -> DResult<Vec<TaggedField>> {
        if !self.flexible {
            return Ok(Vec::new());
        }
        let n = self.uvarint("tagged field count")? as usize;
        // Each tagged field takes at least 2 bytes (tag and size varints).
        if n.saturating_mul(2) > self.remaining() {
            let at = self.pos;
            return Err(self.invalid("tagged field count", at, format!("{n} tagged fields cannot fit")));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let tag = self.uvarint("tagged field tag")?;
            let size = self.uvarint("tagged field size")? as usize;
            out.push(TaggedField { tag, data: self.take(size, "tagged field data")?.to_vec() });
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Writer.

/// Appends `v` as an unsigned varint (Kafka's `ByteUtils.writeUnsignedVarint`).
pub(crate) fn put_unsigned_varint(out: &mut impl BufMut, mut v: u32) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// A length that does not fit its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LengthTooLarge {
    /// The length.
    pub(crate) len: usize,
    /// The largest length the prefix carries.
    pub(crate) max: usize,
}

/// Appends a length prefix, `None` for null: in flexible versions an unsigned varint of
/// length + 1 (0 = null); otherwise an `int16` (strings, `wide` false) or an `int32` (arrays and
/// bytes, `wide` true), -1 = null.
///
/// Errors: [`LengthTooLarge`] for a length over `i16::MAX`, `i32::MAX` or `u32::MAX - 1`.
pub(crate) fn put_length(
    out: &mut impl BufMut,
    len: Option<usize>,
    flexible: bool,
    wide: bool,
) -> Result<(), LengthTooLarge> {
    if flexible {
        let n = match len {
            None => 0,
            Some(n) => u32::try_from(n)
                .ok()
                .and_then(|n| n.checked_add(1))
                .ok_or(LengthTooLarge { len: n, max: u32::MAX as usize - 1 })?,
        };
        put_unsigned_varint(out, n);
        return Ok(());
    }
    let max = if wide { i32::MAX as usize } else { i16::MAX as usize };
    let n = match len {
        None => -1,
        Some(n) if n > max => return Err(LengthTooLarge { len: n, max }),
        Some(n) => n as i32,
    };
    if wide {
        out.put_i32(n);
    } else {
        out.put_i16(n as i16);
    }
    Ok(())
}

/// Writes Kafka's protocol primitives after a big-endian `i16` version prefix, failing with an
/// [`EncodeError`] that names the field.
pub(crate) struct Writer {
    out: Vec<u8>,
    schema: &'static str,
    version: i16,
    flexible: bool,
}

type EResult<T> = Result<T, EncodeError>;

impl Writer {
    /// A writer of `schema` at `version` (compact lengths and tagged fields when `flexible`), the
    /// version prefix written.
    pub(crate) fn new(schema: &'static str, version: i16, flexible: bool) -> Self {
        let mut out = Vec::with_capacity(64);
        out.put_i16(version);
        Writer { out, schema, version, flexible }
    }
    /// The bytes written.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.out
    }
    /// An error about `field`.
    pub(crate) fn err(&self, field: &'static str, reason: impl Into<String>) -> EncodeError {
        EncodeError { schema: self.schema, version: self.version, field, reason: reason.into() }
    }
    /// An `int8`.
    pub(crate) fn i8(&mut self, v: i8) {
        self.out.put_i8(v);
    }
    /// A big-endian `int16`.
    pub(crate) fn i16(&mut self, v: i16) {
        self.out.put_i16(v);
    }
    /// A big-endian `int32`.
    pub(crate) fn i32(&mut self, v: i32) {
        self.out.put_i32(v);
    }
    /// A big-endian `int64`.
    pub(crate) fn i64(&mut self, v: i64) {
        self.out.put_i64(v);
    }
    fn length(&mut self, field: &'static str, len: Option<usize>, wide: bool) -> EResult<()> {
        put_length(&mut self.out, len, self.flexible, wide)
            .map_err(|LengthTooLarge { len, max }| self.err(field, format!("length {len} exceeds {max}")))
    }
    /// A nullable string: `int16` length (at most 32767 bytes), or compact in flexible versions.
    pub(crate) fn nullable_string(&mut self, field: &'static str, s: Option<&str>) -> EResult<()> {
        self.length(field, s.map(str::len), false)?;
        if let Some(s) = s {
            self.out.put_slice(s.as_bytes());
        }
        Ok(())
    }
    /// A string.
    pub(crate) fn string(&mut self, field: &'static str, s: &str) -> EResult<()> {
        self.nullable_string(field, Some(s))
    }
    /// Nullable bytes: `int32` length, or compact in flexible versions.
    pub(crate) fn nullable_bytes(&mut self, field: &'static str, b: Option<&[u8]>) -> EResult<()> {
        self.length(field, b.map(<[u8]>::len), true)?;
        if let Some(b) = b {
            self.out.put_slice(b);
        }
        Ok(())
    }
    /// The element count of a non-null array: `int32`, or unsigned varint `n + 1` in flexible
    /// versions (the elements follow, written by the caller).
    pub(crate) fn array_len(&mut self, field: &'static str, n: usize) -> EResult<()> {
        self.length(field, Some(n), true)
    }
    /// The element count of a nullable array (`None` = null: `int32` -1, or unsigned varint 0 in
    /// flexible versions).
    pub(crate) fn nullable_array_len(&mut self, field: &'static str, n: Option<usize>) -> EResult<()> {
        self.length(field, n, true)
    }
    /// The tagged-field section of a flexible struct (KIP-482); before the first flexible version
    /// there must be none.
    pub(crate) fn tagged_fields(&mut self, fields: &[TaggedField]) -> EResult<()> {
        if !self.flexible {
            if !fields.is_empty() {
                return Err(self.err("tagged fields", "this version does not support tagged fields"));
            }
            return Ok(());
        }
        let n = u32::try_from(fields.len()).map_err(|_| self.err("tagged fields", "too many"))?;
        put_unsigned_varint(&mut self.out, n);
        for f in fields {
            put_unsigned_varint(&mut self.out, f.tag);
            let size = u32::try_from(f.data.len()).map_err(|_| self.err("tagged field data", "too large"))?;
            put_unsigned_varint(&mut self.out, size);
            self.out.put_slice(&f.data);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Guarded decoding with kafka-protocol.

/// A read buffer that stops `kafka-protocol` 0.17 from pre-allocating `Vec::with_capacity(count)`
/// for a count taken from the wire that the bytes cannot hold (that allocation can abort the
/// process). [`decode_guarded`] runs a decoder over it.
///
/// Every array element, string byte or bytes byte occupies at least one byte on the wire, so a
/// length or count larger than the bytes left cannot belong to a valid message:
/// - an unsigned varint (compact lengths and counts, tag counts, ids and sizes of flexible
///   versions) larger than the bytes left after it + 1 fails the read at its first byte, before
///   the decoder sees a value;
/// - in non-flexible versions, where arrays and bytes have `i32` counts and lengths, an `i32`
///   larger than the bytes left after it reads as `-2` (when `replace_large_i32` is set): an
///   invalid length for arrays, strings and bytes (they fail at once, allocating nothing), and
///   an ordinary value for any other `i32` field (`max_bytes`, timeouts), whose value never
///   changes how the rest parses. Flexible versions have no `i32` count or length: every array,
///   string and bytes field is compact there (Kafka's generator makes them so, and
///   `kafka-protocol` 0.17's request decoders were checked to follow it), so there their `i32`s
///   are plain values, passed through.
///
/// So a guarded decode fails whenever such a value was a length (the real decode would fail
/// too), and when it succeeds every length and count fits. Lengths and counts that fit
/// pre-allocate at most `bytes left` elements, as upstream's proposed fix. `i16` lengths
/// (non-compact strings, at most 32767) are read with a bounds check and not touched.
/// Differences from Kafka, for input no Kafka client writes: a boolean byte >= 0x80 (Kafka reads
/// any non-zero byte as true) followed by bytes that read as a varint too large for the frame,
/// and a tag id larger than the bytes left, are rejected.
pub(crate) struct CountGuard<'a> {
    inner: &'a mut Bytes,
    /// Whether an `i32` larger than the bytes left reads as `-2`.
    replace_large_i32: bool,
    /// Whether any `i32` was replaced by `-2`.
    replaced: bool,
    /// The first varint refused: (value, bytes left after it).
    refused: Option<(u32, usize)>,
}

/// Runs `decode` (a `kafka-protocol` decoder) over `buf` behind a [`CountGuard`], leaving `buf`
/// where decoding stopped. `flexible`: the message version uses compact encodings (KIP-482).
///
/// One pass, except for a non-flexible message in which a plain `i32` field was larger than
/// the bytes left after it: that field read as `-2` in the guarded pass, so once that pass has
/// shown every length and count to fit, the message is decoded a second time from the same bytes
/// with every `i32` as written (`kafka-protocol` has no hook to tell a count from a plain field;
/// its proposed upstream fix, capping the capacity, would make one pass enough everywhere).
/// Returns the value and the number of passes (1 or 2), or the decoder's message (its whole
/// error chain, saying which length or count was refused).
pub(crate) fn decode_guarded<T>(
    buf: &mut Bytes,
    flexible: bool,
    mut decode: impl FnMut(&mut CountGuard<'_>) -> anyhow::Result<T>,
) -> (Result<T, String>, u8) {
    let start = buf.clone();
    let mut guard = CountGuard { inner: buf, replace_large_i32: !flexible, replaced: false, refused: None };
    let result = decode(&mut guard);
    let (replaced, refused) = (guard.replaced, guard.refused);
    match result {
        Ok(value) if !replaced => (Ok(value), 1),
        Ok(_) => {
            // Every length and count is known to fit: read the plain fields as written.
            *buf = start;
            let mut guard = CountGuard { inner: buf, replace_large_i32: false, replaced: false, refused: None };
            (decode(&mut guard).map_err(|e| format!("{e:#}")), 2)
        }
        Err(e) => {
            let e = match refused {
                Some((value, left)) => e.context(format!("a length or count of {value} exceeds the {left} bytes left")),
                None => e,
            };
            let note = if replaced {
                " (an i32 larger than the bytes left was read as -2 while checking lengths and counts)"
            } else {
                ""
            };
            (Err(format!("{e:#}{note}")), 1)
        }
    }
}

impl CountGuard<'_> {
    /// The varint that would be read from here, as `kafka-protocol` reads it (at most 5 bytes,
    /// `u32`), if it exceeds the bytes left after it + 1.
    fn oversized_varint(&self) -> Option<(u32, usize)> {
        let ahead = &self.inner[..self.inner.len().min(5)];
        if ahead.first().is_none_or(|&b| b < 0x80) {
            return None; // one byte: at most 127, nothing to fear
        }
        let mut value: u32 = 0;
        let mut len = 0;
        for (i, &b) in ahead.iter().enumerate() {
            value |= u32::from(b & 0x7F).wrapping_shl(7 * i as u32);
            len = i + 1;
            if b < 0x80 {
                break;
            }
        }
        let left = self.inner.len() - len;
        (u64::from(value) > left as u64 + 1).then_some((value, left))
    }
}

impl Buf for CountGuard<'_> {
    fn remaining(&self) -> usize {
        self.inner.remaining()
    }
    fn chunk(&self) -> &[u8] {
        self.inner.chunk()
    }
    fn advance(&mut self, cnt: usize) {
        self.inner.advance(cnt);
    }
    fn try_get_u8(&mut self) -> Result<u8, bytes::TryGetError> {
        if let Some(refused) = self.oversized_varint() {
            self.refused.get_or_insert(refused);
            return Err(bytes::TryGetError { requested: refused.0 as usize, available: refused.1 });
        }
        self.inner.try_get_u8()
    }
    fn try_get_i32(&mut self) -> Result<i32, bytes::TryGetError> {
        let v = self.inner.try_get_i32()?;
        if self.replace_large_i32 && i64::from(v) > self.inner.len() as i64 {
            self.replaced = true;
            return Ok(-2);
        }
        Ok(v)
    }
}

impl ByteBuf for CountGuard<'_> {
    fn peek_bytes(&mut self, r: std::ops::Range<usize>) -> Bytes {
        self.inner.peek_bytes(r)
    }
    fn get_bytes(&mut self, size: usize) -> Bytes {
        self.inner.get_bytes(size)
    }
    fn try_peek_bytes(&mut self, r: std::ops::Range<usize>) -> Result<Bytes, NotEnoughBytesError> {
        self.inner.try_peek_bytes(r)
    }
    fn try_get_bytes(&mut self, size: usize) -> Result<Bytes, NotEnoughBytesError> {
        self.inner.try_get_bytes(size)
    }
}
