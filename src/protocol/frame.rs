//! Size-prefixed frames, request headers and bodies, response encoding.
//!
//! # Wire format
//!
//! ```text
//! frame    = size:i32 (big-endian, bytes that follow) payload:[u8; size]
//! request  = header body          header v1: api_key:i16 api_version:i16 correlation_id:i32
//!                                            client_id:nullable string (i16 length, -1 = null)
//!                                 header v2: header v1 + tagged fields (flexible versions, KIP-482)
//! response = header body          header v0: correlation_id:i32
//!                                 header v1: header v0 + tagged fields
//! ```
//!
//! The header version follows from the API key and version, as in Kafka's generated
//! `ApiMessageType.requestHeaderVersion` / `responseHeaderVersion`: flexible versions use request
//! header v2 and response header v1, others v1 and v0; ApiVersions responses always use header v0
//! (so a client that does not know the broker's versions can read the answer; KIP-511).
//!
//! # Limits and untrusted bytes
//!
//! The size of a frame is checked before anything is allocated: negative sizes and sizes above
//! `socket.request.max.bytes` ([`DEFAULT_SOCKET_REQUEST_MAX_BYTES`]) are errors, as in Kafka's
//! `NetworkReceive.readFrom` (`InvalidReceiveException`). A frame that has not fully arrived is
//! [`FrameCheck::Incomplete`] (or, read from a non-blocking socket by [`FrameReceive`], as the
//! broker's network threads read, [`ReceiveProgress::Pending`]), never an error. No input makes
//! these functions panic.
//!
//! `kafka-protocol` 0.17 pre-allocates arrays with `Vec::with_capacity(count)` using the count
//! read from the wire (upstream kafka-protocol-rs PRs #152, #161 and #200, open): a few bytes
//! claiming a huge count make that allocation fail, which aborts the process. [`decode_request`]
//! decodes the body behind a count guard that refuses such counts before the crate sees them, for
//! `i32` counts and varint (compact) counts alike ([`super::primitives::decode_guarded`]). Each
//! request is decoded once: the header once, the body once, except a non-flexible body in which a
//! plain `i32` field is larger than the bytes left after it (a second pass, see
//! `decode_guarded`). Flexible versions, the ones current clients send, are always one pass.
//! [`decode_response`] is not hardened.

use std::io::{self, Read};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::primitives::decode_guarded;

/// Kafka's default `socket.request.max.bytes` (100 MiB): the largest request payload, in bytes
/// after the 4-byte size, that a broker accepts (`SocketServerConfigs.SOCKET_REQUEST_MAX_BYTES_DEFAULT`).
pub const DEFAULT_SOCKET_REQUEST_MAX_BYTES: usize = 104_857_600;

/// Bytes of the big-endian `i32` size that starts every frame.
pub const SIZE_PREFIX_BYTES: usize = 4;

/// Bytes every request header starts with, whatever its version: api key (i16), api version
/// (i16), correlation id (i32).
pub const REQUEST_HEADER_FIXED_BYTES: usize = 8;

/// Errors of the protocol layer. Context fields name what was being decoded: `api_key` and
/// `api_version` are the raw values from the header, `correlation_id` lets the broker answer,
/// `position` is the byte offset inside the frame payload (after the 4-byte size) where
/// decoding stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The frame size is negative (Kafka: `InvalidReceiveException`, connection closed).
    #[error("invalid frame size {size}: negative")]
    NegativeSize {
        /// The size read from the wire.
        size: i32,
    },
    /// The frame size exceeds the configured limit (`socket.request.max.bytes`); nothing was
    /// allocated (Kafka: `InvalidReceiveException`, connection closed).
    #[error("invalid frame size {size}: larger than the limit of {limit} bytes (socket.request.max.bytes)")]
    FrameTooLarge {
        /// The size read from the wire, in bytes after the 4-byte size.
        size: i32,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The reader ended inside a frame.
    #[error("connection closed inside a frame: {received} of {expected} bytes received")]
    Truncated {
        /// Bytes expected (4 for the size, or 4 + size).
        expected: usize,
        /// Bytes received before end of file.
        received: usize,
    },
    /// Reading from the underlying reader failed.
    #[error("reading a frame")]
    Io {
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The frame is too short to hold the fixed part of a request header (8 bytes).
    #[error("request frame of {len} bytes is shorter than the 8-byte header prefix")]
    HeaderTooShort {
        /// Payload length in bytes.
        len: usize,
    },
    /// The API key is not one Kafka defines (Kafka closes the connection).
    #[error("unknown API key {api_key} (version {api_version}, correlation id {correlation_id})")]
    UnknownApiKey {
        /// Raw API key.
        api_key: i16,
        /// Raw API version.
        api_version: i16,
        /// Correlation id of the request.
        correlation_id: i32,
    },
    /// The API version is outside the range the codec supports. For ApiVersions, Kafka answers
    /// with an ApiVersions v0 response carrying `UNSUPPORTED_VERSION` (35) and its own version
    /// range, without parsing the body (`RequestContext.isUnsupportedApiVersionsRequest`); for
    /// other APIs it closes the connection.
    #[error(
        "unsupported version {api_version} of API {api_key} (supported {min}..={max}, correlation id {correlation_id})"
    )]
    UnsupportedVersion {
        /// Raw API key.
        api_key: i16,
        /// Raw API version.
        api_version: i16,
        /// Correlation id of the request.
        correlation_id: i32,
        /// Lowest supported version.
        min: i16,
        /// Highest supported version.
        max: i16,
    },
    /// A header or body could not be decoded.
    #[error("decoding {what} of API {api_key} v{api_version} (correlation id {correlation_id}) at byte {position}: {reason}")]
    Decode {
        /// `"request header"`, `"request body"`, `"response header"` or `"response body"`.
        what: &'static str,
        /// Raw API key.
        api_key: i16,
        /// Raw API version.
        api_version: i16,
        /// Correlation id (of the request; for a response, `-1` when unreadable).
        correlation_id: i32,
        /// Byte offset inside the frame payload where decoding stopped.
        position: usize,
        /// The decoder's message (the whole `kafka-protocol` error chain).
        reason: String,
    },
    /// A header or body could not be encoded (a field does not fit its wire type, a field set
    /// in a version that lacks it, or a frame over `i32::MAX` bytes).
    #[error("encoding {what} of API {api_key} v{api_version} (correlation id {correlation_id}): {reason}")]
    Encode {
        /// `"request header"`, `"request body"`, `"response header"`, `"response body"` or `"frame"`.
        what: &'static str,
        /// Raw API key.
        api_key: i16,
        /// Raw API version.
        api_version: i16,
        /// Correlation id.
        correlation_id: i32,
        /// The encoder's message.
        reason: String,
    },
}

/// What [`check_frame`] found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole frame is present: its payload is `buf[4..4 + payload_len]`.
    Complete {
        /// Payload bytes after the 4-byte size.
        payload_len: usize,
    },
    /// More bytes are needed before the frame is whole (not an error).
    Incomplete {
        /// At least this many more bytes are needed (exactly this many once the size is known).
        needed: usize,
    },
}

/// Checks the frame at the start of `buf` against `max_bytes` (`socket.request.max.bytes`,
/// payload bytes after the 4-byte size) without copying or allocating.
///
/// Returns [`FrameCheck::Incomplete`] while fewer than 4 + size bytes are present, so a caller
/// reading from a socket knows to read more. Errors: [`ProtocolError::NegativeSize`],
/// [`ProtocolError::FrameTooLarge`], both raised as soon as the 4 size bytes are present (as
/// Kafka's `NetworkReceive.readFrom`). A size of 0 is a valid frame (its header then fails).
pub fn check_frame(buf: &[u8], max_bytes: usize) -> Result<FrameCheck, ProtocolError> {
    let Some(prefix) = buf.first_chunk::<SIZE_PREFIX_BYTES>() else {
        return Ok(FrameCheck::Incomplete { needed: SIZE_PREFIX_BYTES - buf.len() });
    };
    let payload_len = checked_size(i32::from_be_bytes(*prefix), max_bytes)?;
    let have = buf.len() - SIZE_PREFIX_BYTES;
    if have < payload_len {
        return Ok(FrameCheck::Incomplete { needed: payload_len - have });
    }
    Ok(FrameCheck::Complete { payload_len })
}

/// Splits one whole frame's payload off the front of `buf` (a connection's receive buffer).
///
/// Returns `Ok(None)` when the frame is not complete yet (`buf` untouched), `Ok(Some(payload))`
/// with the 4-byte size removed otherwise. Errors as [`check_frame`]; after an error the
/// connection should be closed, since the stream cannot be resynchronised.
pub fn split_frame(buf: &mut BytesMut, max_bytes: usize) -> Result<Option<Bytes>, ProtocolError> {
    match check_frame(buf, max_bytes)? {
        FrameCheck::Incomplete { .. } => Ok(None),
        FrameCheck::Complete { payload_len } => {
            buf.advance(SIZE_PREFIX_BYTES);
            Ok(Some(buf.split_to(payload_len).freeze()))
        }
    }
}

/// Reads one frame from a blocking reader and returns its payload (without the 4-byte size).
///
/// Returns `Ok(None)` on a clean end of file before the first byte of a frame. The size is
/// checked before the payload is read; the payload buffer then grows with the bytes actually
/// received (at most `max_bytes`), so a peer announcing a large frame and sending little costs
/// little memory. Errors: [`ProtocolError::NegativeSize`], [`ProtocolError::FrameTooLarge`],
/// [`ProtocolError::Truncated`] (end of file inside a frame), [`ProtocolError::Io`].
pub fn read_frame<R: Read>(reader: &mut R, max_bytes: usize) -> Result<Option<Bytes>, ProtocolError> {
    let mut prefix = [0u8; SIZE_PREFIX_BYTES];
    let got = read_full(reader, &mut prefix)?;
    if got == 0 {
        return Ok(None);
    }
    if got < SIZE_PREFIX_BYTES {
        return Err(ProtocolError::Truncated { expected: SIZE_PREFIX_BYTES, received: got });
    }
    let payload_len = checked_size(i32::from_be_bytes(prefix), max_bytes)?;
    let mut payload = Vec::with_capacity(payload_len.min(64 * 1024));
    let received =
        reader.take(payload_len as u64).read_to_end(&mut payload).map_err(|source| ProtocolError::Io { source })?;
    if received < payload_len {
        return Err(ProtocolError::Truncated {
            expected: SIZE_PREFIX_BYTES + payload_len,
            received: SIZE_PREFIX_BYTES + received,
        });
    }
    Ok(Some(Bytes::from(payload)))
}

/// Bytes [`FrameReceive`] reads at most at once into a payload buffer: the buffer follows the
/// bytes actually received, not the size announced (it grows as a `Vec` does, so it holds at most
/// about twice the bytes received plus this much: a peer that announces 100 MiB and sends 10
/// bytes costs about 128 KiB).
pub const RECEIVE_CHUNK_BYTES: usize = 64 * 1024;

/// What one [`FrameReceive::read_from`] call got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiveProgress {
    /// A whole frame: its payload, without the 4-byte size. The receive is ready for the next
    /// frame; nothing after this frame was read.
    Frame(Bytes),
    /// The reader has no more bytes now (it returned `WouldBlock`); call again when it is
    /// readable. The bytes received so far are kept.
    Pending,
    /// End of file at a frame boundary (no byte of a next frame received): the peer closed.
    Closed,
}

/// One frame being received from a non-blocking reader, a piece at a time (Kafka's
/// `NetworkReceive`): the 4-byte size first, checked against `socket.request.max.bytes` before
/// anything is allocated (the errors of [`check_frame`]), then the payload, into a buffer that
/// grows with the bytes received ([`RECEIVE_CHUNK_BYTES`] at most per read). Reads stop at the end of the frame, so a
/// pipelined next request stays in the socket until the caller asks for it.
#[derive(Debug, Default)]
pub struct FrameReceive {
    size: [u8; SIZE_PREFIX_BYTES],
    size_read: usize,
    /// The payload length, once the size is read and checked.
    payload_len: Option<usize>,
    payload: Vec<u8>,
}

impl FrameReceive {
    /// A receive waiting for the first byte of a frame.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of the current frame received so far, its size prefix included (0 between frames).
    pub fn received(&self) -> usize {
        self.size_read + self.payload.len()
    }

    /// Reads from `reader` until a whole frame is in, the reader would block, or it ends.
    ///
    /// Errors (the frame cannot be resumed: close the connection):
    /// [`ProtocolError::NegativeSize`], [`ProtocolError::FrameTooLarge`] (raised as soon as the 4
    /// size bytes are in, before the payload is allocated or read), [`ProtocolError::Truncated`]
    /// (end of file inside a frame), [`ProtocolError::Io`] (any read error but `WouldBlock`,
    /// which is [`ReceiveProgress::Pending`], and `Interrupted`, which is retried).
    pub fn read_from<R: Read>(&mut self, reader: &mut R, max_bytes: usize) -> Result<ReceiveProgress, ProtocolError> {
        loop {
            let Some(payload_len) = self.payload_len else {
                let n = match read_some(reader, &mut self.size[self.size_read..])? {
                    Some(n) => n,
                    None => return Ok(ReceiveProgress::Pending),
                };
                if n == 0 {
                    if self.size_read == 0 {
                        return Ok(ReceiveProgress::Closed);
                    }
                    return Err(ProtocolError::Truncated { expected: SIZE_PREFIX_BYTES, received: self.size_read });
                }
                self.size_read += n;
                if self.size_read == SIZE_PREFIX_BYTES {
                    let len = checked_size(i32::from_be_bytes(self.size), max_bytes)?;
                    self.payload_len = Some(len);
                    self.payload = Vec::with_capacity(len.min(RECEIVE_CHUNK_BYTES));
                }
                continue;
            };
            let have = self.payload.len();
            if have == payload_len {
                let payload = std::mem::take(&mut self.payload);
                *self = FrameReceive::default();
                return Ok(ReceiveProgress::Frame(Bytes::from(payload)));
            }
            let chunk = (payload_len - have).min(RECEIVE_CHUNK_BYTES);
            self.payload.resize(have + chunk, 0);
            let got = read_some(reader, &mut self.payload[have..]);
            let n = match got {
                Ok(Some(n)) => n,
                Ok(None) => 0,
                Err(e) => {
                    self.payload.truncate(have);
                    return Err(e);
                }
            };
            self.payload.truncate(have + n);
            match got {
                Ok(None) => return Ok(ReceiveProgress::Pending),
                Ok(Some(0)) => {
                    return Err(ProtocolError::Truncated {
                        expected: SIZE_PREFIX_BYTES + payload_len,
                        received: SIZE_PREFIX_BYTES + have,
                    })
                }
                _ => {}
            }
        }
    }
}

/// One read: `Some(n)` (0 at end of file), `None` when the reader would block; `Interrupted`
/// retried.
fn read_some<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<Option<usize>, ProtocolError> {
    loop {
        match reader.read(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(source) => return Err(ProtocolError::Io { source }),
        }
    }
}

/// Fills `buf` as far as the reader allows; returns the bytes read (less than `buf.len()` only
/// at end of file). Retries on `Interrupted`.
fn read_full<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, ProtocolError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(ProtocolError::Io { source }),
        }
    }
    Ok(filled)
}

fn checked_size(size: i32, max_bytes: usize) -> Result<usize, ProtocolError> {
    let Ok(len) = usize::try_from(size) else {
        return Err(ProtocolError::NegativeSize { size });
    };
    if len > max_bytes {
        return Err(ProtocolError::FrameTooLarge { size, limit: max_bytes });
    }
    Ok(len)
}

/// One decoded request: its header, its body and where they lie in the frame payload.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedRequest {
    /// The API, from the header's `request_api_key`.
    pub api_key: ApiKey,
    /// The request header (api key, api version, correlation id, client id, tagged fields).
    pub header: RequestHeader,
    /// Request header version used: 1, or 2 for flexible versions.
    pub header_version: i16,
    /// The body, decoded at `header.request_api_version`.
    pub body: RequestKind,
    /// Header bytes in the payload.
    pub header_len: usize,
    /// Body bytes in the payload.
    pub body_len: usize,
    /// Bytes after the body, ignored as Kafka ignores them (it parses the body from the frame and
    /// does not check that all bytes were consumed).
    pub trailing_bytes: usize,
}

impl DecodedRequest {
    /// The request's API version.
    pub fn api_version(&self) -> i16 {
        self.header.request_api_version
    }

    /// The request's correlation id, to be echoed in the response header.
    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Reads the api key, api version and correlation id that start every request header
/// (bytes 0..8 of the payload, whatever the header version).
///
/// Errors: [`ProtocolError::HeaderTooShort`] for a payload under 8 bytes.
pub fn peek_request_ids(payload: &[u8]) -> Result<(i16, i16, i32), ProtocolError> {
    let Some(fixed) = payload.first_chunk::<REQUEST_HEADER_FIXED_BYTES>() else {
        return Err(ProtocolError::HeaderTooShort { len: payload.len() });
    };
    Ok((
        i16::from_be_bytes([fixed[0], fixed[1]]),
        i16::from_be_bytes([fixed[2], fixed[3]]),
        i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
    ))
}

/// Decodes a request frame payload (the bytes after the 4-byte size): header, then body.
///
/// Steps, as Kafka's `RequestHeader.parse` and `RequestContext.parseRequest`:
/// 1. api key, api version, correlation id from the first 8 bytes;
/// 2. the header at the version the API/version pair needs (v2 for flexible versions);
/// 3. the version is checked against the codec's range (`ApiKey::valid_versions`, generated from
///    Apache Kafka 4.x's message specs: Produce 3..=13, Fetch 4..=18, ApiVersions 0..=4, ...; the
///    versions Kafka 4.0 removed (KIP-896) are absent). The broker narrows this to what it serves;
///    Kafka 4 lists Produce v0-v2 in ApiVersions but refuses them (KAFKA-18659), which this error
///    gives;
/// 4. the body; bytes after it are accepted and counted in [`DecodedRequest::trailing_bytes`].
///
/// Errors: [`ProtocolError::HeaderTooShort`], [`ProtocolError::UnknownApiKey`],
/// [`ProtocolError::UnsupportedVersion`] (the header was valid; for ApiVersions the broker
/// answers, see the variant), [`ProtocolError::Decode`] for a header or body that does not parse
/// (including an array whose element count exceeds the bytes left, rejected before allocation).
pub fn decode_request(payload: Bytes) -> Result<DecodedRequest, ProtocolError> {
    let (raw_key, api_version, correlation_id) = peek_request_ids(&payload)?;
    let api_key = ApiKey::try_from(raw_key).map_err(|()| ProtocolError::UnknownApiKey {
        api_key: raw_key,
        api_version,
        correlation_id,
    })?;
    let header_version = api_key.request_header_version(api_version);
    let decode_err = |what: &'static str, position: usize, reason: String| ProtocolError::Decode {
        what,
        api_key: raw_key,
        api_version,
        correlation_id,
        position,
        reason,
    };

    let mut buf = payload.clone();
    let header = RequestHeader::decode(&mut buf, header_version)
        .map_err(|e| decode_err("request header", payload.len() - buf.len(), format!("{e:#}")))?;
    let header_len = payload.len() - buf.len();

    let range = api_key.valid_versions();
    if api_version < range.min || api_version > range.max {
        return Err(ProtocolError::UnsupportedVersion {
            api_key: raw_key,
            api_version,
            correlation_id,
            min: range.min,
            max: range.max,
        });
    }

    let (body, _passes) = decode_body(api_key, &mut buf, api_version, header_version >= 2);
    let body = body.map_err(|reason| decode_err("request body", payload.len() - buf.len(), reason))?;
    let trailing_bytes = buf.len();
    Ok(DecodedRequest {
        api_key,
        header,
        header_version,
        body,
        header_len,
        body_len: payload.len() - header_len - trailing_bytes,
        trailing_bytes,
    })
}

/// Encodes a request as a whole frame: 4-byte size, header (at the version `header`'s API key
/// and version need), body at `header.request_api_version`. The inverse of [`decode_request`];
/// used by tests and by clients.
///
/// Errors: [`ProtocolError::UnknownApiKey`], [`ProtocolError::Encode`].
pub fn encode_request(header: &RequestHeader, body: &RequestKind) -> Result<BytesMut, ProtocolError> {
    let (raw_key, api_version, correlation_id) =
        (header.request_api_key, header.request_api_version, header.correlation_id);
    let api_key = ApiKey::try_from(raw_key).map_err(|()| ProtocolError::UnknownApiKey {
        api_key: raw_key,
        api_version,
        correlation_id,
    })?;
    let encode_err = |what: &'static str, e: anyhow::Error| ProtocolError::Encode {
        what,
        api_key: raw_key,
        api_version,
        correlation_id,
        reason: format!("{e:#}"),
    };
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header
        .encode(&mut buf, api_key.request_header_version(api_version))
        .map_err(|e| encode_err("request header", e))?;
    body.encode(&mut buf, api_version).map_err(|e| encode_err("request body", e))?;
    patch_size(&mut buf, raw_key, api_version, correlation_id)?;
    Ok(buf)
}

/// Encodes a response as a whole frame: 4-byte size, response header (v0, or v1 for flexible
/// versions; always v0 for ApiVersions), then `body` at `api_version`.
///
/// `api_key` and `api_version` are the request's; `body` must be the matching [`ResponseKind`]
/// variant. Errors: [`ProtocolError::Encode`] (a field that does not exist in `api_version` but
/// is set to a non-default value, or a frame over `i32::MAX` bytes).
pub fn encode_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<BytesMut, ProtocolError> {
    let raw_key = api_key as i16;
    let encode_err = |what: &'static str, e: anyhow::Error| ProtocolError::Encode {
        what,
        api_key: raw_key,
        api_version,
        correlation_id,
        reason: format!("{e:#}"),
    };
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, api_key.response_header_version(api_version))
        .map_err(|e| encode_err("response header", e))?;
    body.encode(&mut buf, api_version).map_err(|e| encode_err("response body", e))?;
    patch_size(&mut buf, raw_key, api_version, correlation_id)?;
    Ok(buf)
}

fn patch_size(buf: &mut BytesMut, api_key: i16, api_version: i16, correlation_id: i32) -> Result<(), ProtocolError> {
    let size = i32::try_from(buf.len() - SIZE_PREFIX_BYTES).map_err(|_| ProtocolError::Encode {
        what: "frame",
        api_key,
        api_version,
        correlation_id,
        reason: format!("{} payload bytes exceed i32::MAX", buf.len() - SIZE_PREFIX_BYTES),
    })?;
    buf[..SIZE_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// One decoded response (the client side of [`encode_response`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedResponse {
    /// The response header (correlation id, tagged fields in v1).
    pub header: ResponseHeader,
    /// Response header version used (0 or 1).
    pub header_version: i16,
    /// The body.
    pub body: ResponseKind,
    /// Header bytes in the payload.
    pub header_len: usize,
    /// Body bytes in the payload.
    pub body_len: usize,
    /// Bytes after the body.
    pub trailing_bytes: usize,
}

/// Decodes a response frame payload (after the 4-byte size) for the request it answers: a
/// response does not name its API, so `api_key` and `api_version` are the request's.
///
/// Errors: [`ProtocolError::UnsupportedVersion`], [`ProtocolError::Decode`].
///
/// Not hardened like [`decode_request`]: `kafka-protocol` 0.17 pre-allocates arrays from the
/// counts on the wire, so a hostile broker can make this abort; use it on trusted peers (tests,
/// the benchmark's own broker) until the crate bounds those allocations.
pub fn decode_response(payload: Bytes, api_key: ApiKey, api_version: i16) -> Result<DecodedResponse, ProtocolError> {
    let raw_key = api_key as i16;
    let correlation_id = payload.first_chunk::<4>().map_or(-1, |c| i32::from_be_bytes(*c));
    let range = api_key.valid_versions();
    if api_version < range.min || api_version > range.max {
        return Err(ProtocolError::UnsupportedVersion {
            api_key: raw_key,
            api_version,
            correlation_id,
            min: range.min,
            max: range.max,
        });
    }
    let decode_err = |what: &'static str, position: usize, reason: String| ProtocolError::Decode {
        what,
        api_key: raw_key,
        api_version,
        correlation_id,
        position,
        reason,
    };
    let header_version = api_key.response_header_version(api_version);
    let mut buf = payload.clone();
    let header = ResponseHeader::decode(&mut buf, header_version)
        .map_err(|e| decode_err("response header", payload.len() - buf.len(), format!("{e:#}")))?;
    let header_len = payload.len() - buf.len();
    let body = ResponseKind::decode(api_key, &mut buf, api_version)
        .map_err(|e| decode_err("response body", payload.len() - buf.len(), format!("{e:#}")))?;
    let trailing_bytes = buf.len();
    Ok(DecodedResponse {
        header,
        header_version,
        body,
        header_len,
        body_len: payload.len() - header_len - trailing_bytes,
        trailing_bytes,
    })
}

/// The request body at `version` (`flexible`: the version uses request header v2 and compact
/// encodings), decoded by `kafka-protocol` behind [`decode_guarded`]'s count guard, leaving `buf`
/// where decoding stopped. Returns the body or the decoder's message, and the passes it took.
fn decode_body(api_key: ApiKey, buf: &mut Bytes, version: i16, flexible: bool) -> (Result<RequestKind, String>, u8) {
    macro_rules! dispatch {
        ($guard:ident; $($variant:ident => $ty:ident),* $(,)?) => {
            match api_key {
                $(ApiKey::$variant => {
                    <kafka_protocol::messages::$ty as Decodable>::decode($guard, version).map(RequestKind::from)
                })*
            }
        };
    }
    decode_guarded(buf, flexible, |guard| {
        dispatch!(guard;
            Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
            Metadata => MetadataRequest, OffsetCommit => OffsetCommitRequest, OffsetFetch => OffsetFetchRequest,
            FindCoordinator => FindCoordinatorRequest, JoinGroup => JoinGroupRequest, Heartbeat => HeartbeatRequest,
            LeaveGroup => LeaveGroupRequest, SyncGroup => SyncGroupRequest, DescribeGroups => DescribeGroupsRequest,
            ListGroups => ListGroupsRequest, SaslHandshake => SaslHandshakeRequest, ApiVersions => ApiVersionsRequest,
            CreateTopics => CreateTopicsRequest, DeleteTopics => DeleteTopicsRequest, DeleteRecords => DeleteRecordsRequest,
            InitProducerId => InitProducerIdRequest, OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
            AddPartitionsToTxn => AddPartitionsToTxnRequest, AddOffsetsToTxn => AddOffsetsToTxnRequest,
            EndTxn => EndTxnRequest, WriteTxnMarkers => WriteTxnMarkersRequest, TxnOffsetCommit => TxnOffsetCommitRequest,
            DescribeAcls => DescribeAclsRequest, CreateAcls => CreateAclsRequest, DeleteAcls => DeleteAclsRequest,
            DescribeConfigs => DescribeConfigsRequest, AlterConfigs => AlterConfigsRequest,
            AlterReplicaLogDirs => AlterReplicaLogDirsRequest, DescribeLogDirs => DescribeLogDirsRequest,
            SaslAuthenticate => SaslAuthenticateRequest, CreatePartitions => CreatePartitionsRequest,
            CreateDelegationToken => CreateDelegationTokenRequest, RenewDelegationToken => RenewDelegationTokenRequest,
            ExpireDelegationToken => ExpireDelegationTokenRequest, DescribeDelegationToken => DescribeDelegationTokenRequest,
            DeleteGroups => DeleteGroupsRequest, ElectLeaders => ElectLeadersRequest,
            IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
            AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
            ListPartitionReassignments => ListPartitionReassignmentsRequest, OffsetDelete => OffsetDeleteRequest,
            DescribeClientQuotas => DescribeClientQuotasRequest, AlterClientQuotas => AlterClientQuotasRequest,
            DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
            AlterUserScramCredentials => AlterUserScramCredentialsRequest, Vote => VoteRequest,
            BeginQuorumEpoch => BeginQuorumEpochRequest, EndQuorumEpoch => EndQuorumEpochRequest,
            DescribeQuorum => DescribeQuorumRequest, AlterPartition => AlterPartitionRequest,
            UpdateFeatures => UpdateFeaturesRequest, Envelope => EnvelopeRequest, FetchSnapshot => FetchSnapshotRequest,
            DescribeCluster => DescribeClusterRequest, DescribeProducers => DescribeProducersRequest,
            BrokerRegistration => BrokerRegistrationRequest, BrokerHeartbeat => BrokerHeartbeatRequest,
            UnregisterBroker => UnregisterBrokerRequest, DescribeTransactions => DescribeTransactionsRequest,
            ListTransactions => ListTransactionsRequest, AllocateProducerIds => AllocateProducerIdsRequest,
            ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest, ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
            ControllerRegistration => ControllerRegistrationRequest,
            GetTelemetrySubscriptions => GetTelemetrySubscriptionsRequest, PushTelemetry => PushTelemetryRequest,
            AssignReplicasToDirs => AssignReplicasToDirsRequest, ListConfigResources => ListConfigResourcesRequest,
            DescribeTopicPartitions => DescribeTopicPartitionsRequest, ShareGroupHeartbeat => ShareGroupHeartbeatRequest,
            ShareGroupDescribe => ShareGroupDescribeRequest, ShareFetch => ShareFetchRequest,
            ShareAcknowledge => ShareAcknowledgeRequest, AddRaftVoter => AddRaftVoterRequest,
            RemoveRaftVoter => RemoveRaftVoterRequest, UpdateRaftVoter => UpdateRaftVoterRequest,
            InitializeShareGroupState => InitializeShareGroupStateRequest,
            ReadShareGroupState => ReadShareGroupStateRequest, WriteShareGroupState => WriteShareGroupStateRequest,
            DeleteShareGroupState => DeleteShareGroupStateRequest,
            ReadShareGroupStateSummary => ReadShareGroupStateSummaryRequest,
            DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest,
            AlterShareGroupOffsets => AlterShareGroupOffsetsRequest,
            DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest,
        )
    })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    /// A consumer's Fetch (v11: the last non-flexible version; v12: the first flexible one):
    /// `max_wait_ms`, `max_bytes` and `partition_max_bytes` all exceed the bytes after them.
    fn fetch_payload(version: i16) -> (Bytes, RequestKind) {
        let body =
            RequestKind::Fetch(FetchRequest::default().with_max_wait_ms(500).with_max_bytes(52_428_800).with_topics(
                vec![FetchTopic::default().with_topic(TopicName(StrBytes::from_static_str("t"))).with_partitions(
                    vec![FetchPartition::default().with_partition(0).with_partition_max_bytes(1_048_576)],
                )],
            ));
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(version)
            .with_correlation_id(7);
        let frame = encode_request(&header, &body).unwrap().freeze();
        (frame.slice(SIZE_PREFIX_BYTES..), body)
    }

    /// A reader that hands out `chunks` one read at a time, `WouldBlock` between them when
    /// `stalls`, then end of file.
    struct Trickle {
        chunks: std::collections::VecDeque<Vec<u8>>,
        stall_next: bool,
        stalls: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.stalls {
                self.stall_next = !self.stall_next;
                if self.stall_next {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
            }
            let Some(chunk) = self.chunks.front_mut() else { return Ok(0) };
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                self.chunks.pop_front();
            }
            Ok(n)
        }
    }

    fn trickle(bytes: &[u8], piece: usize, stalls: bool) -> Trickle {
        Trickle { chunks: bytes.chunks(piece).map(<[u8]>::to_vec).collect(), stall_next: false, stalls }
    }

    #[test]
    fn a_frame_received_in_pieces_is_whole_and_the_next_one_waits() {
        let mut wire = Vec::new();
        for payload in [&b"hello"[..], b"", b"world!"] {
            wire.extend_from_slice(&(payload.len() as i32).to_be_bytes());
            wire.extend_from_slice(payload);
        }
        for piece in [1, 3, 100] {
            let mut reader = trickle(&wire, piece, true);
            let mut receive = FrameReceive::new();
            let mut frames = Vec::new();
            loop {
                match receive.read_from(&mut reader, 100).unwrap() {
                    ReceiveProgress::Frame(p) => frames.push(p),
                    ReceiveProgress::Pending => {}
                    ReceiveProgress::Closed => break,
                }
            }
            assert_eq!(frames, [&b"hello"[..], b"", b"world!"], "pieces of {piece}");
        }
    }

    #[test]
    fn the_size_is_checked_before_the_payload_is_read_and_eof_inside_is_truncated() {
        let mut receive = FrameReceive::new();
        let mut reader = trickle(&[0, 0, 1, 0, 9, 9], 6, false);
        let err = receive.read_from(&mut reader, 255).unwrap_err();
        assert!(matches!(err, ProtocolError::FrameTooLarge { size: 256, limit: 255 }), "{err}");
        let mut reader = trickle(&(-1i32).to_be_bytes(), 4, false);
        let err = FrameReceive::new().read_from(&mut reader, 255).unwrap_err();
        assert!(matches!(err, ProtocolError::NegativeSize { size: -1 }), "{err}");
        // Two bytes of the size, then end of file.
        let mut reader = trickle(&[0, 0], 2, false);
        let err = FrameReceive::new().read_from(&mut reader, 255).unwrap_err();
        assert!(matches!(err, ProtocolError::Truncated { expected: 4, received: 2 }), "{err}");
        // A payload cut short.
        let mut reader = trickle(&[0, 0, 0, 5, 1, 2], 6, false);
        let err = FrameReceive::new().read_from(&mut reader, 255).unwrap_err();
        assert!(matches!(err, ProtocolError::Truncated { expected: 9, received: 6 }), "{err}");
    }

    #[test]
    fn a_large_announced_frame_allocates_with_the_bytes_received() {
        let mut wire = (100_000_000i32).to_be_bytes().to_vec();
        wire.extend_from_slice(&[7; 10]);
        let mut reader = trickle(&wire, 14, false);
        let mut receive = FrameReceive::new();
        assert!(matches!(
            receive.read_from(&mut reader, DEFAULT_SOCKET_REQUEST_MAX_BYTES),
            Err(ProtocolError::Truncated { .. })
        ));
        let mut reader = trickle(&wire, 14, true);
        let mut receive = FrameReceive::new();
        while receive.received() < 14 {
            assert_eq!(
                receive.read_from(&mut reader, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap(),
                ReceiveProgress::Pending
            );
        }
        assert!(receive.payload.capacity() <= 2 * RECEIVE_CHUNK_BYTES, "{}", receive.payload.capacity());
    }

    #[test]
    fn flexible_request_bodies_are_decoded_in_one_pass() {
        for version in [11, 12] {
            let (payload, body) = fetch_payload(version);
            let request = decode_request(payload.clone()).unwrap();
            assert_eq!(request.body, body, "v{version}");
            let mut buf = payload.slice(request.header_len..);
            let (decoded, passes) = decode_body(ApiKey::Fetch, &mut buf, version, request.header_version >= 2);
            assert_eq!(decoded.unwrap(), body, "v{version}");
            assert!(buf.is_empty());
            // v11's large plain i32s read as -2 in the guarded pass, so it is decoded again.
            assert_eq!(passes, if version >= 12 { 1 } else { 2 }, "v{version}");
        }
    }
}
