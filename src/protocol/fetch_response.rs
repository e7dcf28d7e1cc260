//! The Fetch response (API key 1), hand-framed so that record bytes never pass through a buffer.
//!
//! Every other message goes through the `kafka-protocol` codecs; this one is written here because
//! its `records` fields are [`FileSlice`]s, not bytes in memory: [`FetchResponse::encode`] turns the
//! response into a [`FetchResponseFrame`], a list of [`Chunk`]s (`Bytes` for the size prefix,
//! header and every field around the records, `File` for each partition's record set) whose total
//! size is known before anything is written. [`FetchResponseFrame::write_to`] writes the bytes with a
//! blocking write-all and hands every slice to [`ReadPath::transfer`], the only place record bytes
//! move (Kafka's `FetchResponse` over `TransferableRecords.writeTo`).
//!
//! ## Wire format (Kafka's `FetchResponse.json`, versions [`MIN_VERSION`]..=[`MAX_VERSION`])
//!
//! ```text
//! frame        = size:i32 (bytes after the prefix) header body
//! header       = correlation_id:i32                      (header v0, Fetch v4-v11)
//!              | correlation_id:i32 tagged_fields         (header v1, Fetch v12+, "flexible")
//! body         = throttle_time_ms:i32 [error_code:i16 session_id:i32 (v7+)] topics [tagged_fields (v12+)]
//! topic        = name:string (v4-v12) | topic_id:uuid (v13+), partitions, [tagged_fields (v12+)]
//! partition    = partition_index:i32 error_code:i16 high_watermark:i64 last_stable_offset:i64
//!                [log_start_offset:i64 (v5+)] aborted_transactions:nullable array
//!                [preferred_read_replica:i32 (v11+)] records:nullable bytes [tagged_fields (v12+)]
//! ```
//!
//! Arrays, strings and bytes have an `i32` (`i16` for strings) length before v12 and an unsigned
//! varint `length + 1` (0 = null) from v12 on. Every tagged-field section written here is empty
//! (one `0` byte): no diverging epoch, current leader, snapshot id or node endpoints.
//!
//! An empty record set is sent as length 0, never null, as Kafka does (`MemoryRecords.EMPTY` in
//! `FetchResponse.partitionResponse`).

use std::io;
use std::os::fd::BorrowedFd;

use bytes::{BufMut, Bytes, BytesMut};

use super::primitives::{put_length, put_unsigned_varint};
use crate::log::FileSlice;
use crate::read_path::{util, ReadPath, TransferStats};

/// The API key of Fetch.
pub const API_KEY: i16 = 1;
/// The oldest Fetch version encoded here (Kafka 4 removed v0-v3; `kafka-protocol` 0.17 starts at 4).
pub const MIN_VERSION: i16 = 4;
/// The newest Fetch version encoded here (`kafka-protocol` 0.17's schema; v17 and v18 changed only
/// the request, so their responses equal v16's).
pub const MAX_VERSION: i16 = 18;
/// The first flexible version: compact lengths, tagged fields, response header v1.
pub const FIRST_FLEXIBLE_VERSION: i16 = 12;
/// The first version that names topics by topic id (KIP-516) instead of by name.
pub const FIRST_TOPIC_ID_VERSION: i16 = 13;

/// Why a response cannot be encoded in the requested version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchEncodeError {
    /// The version is outside [`MIN_VERSION`]..=[`MAX_VERSION`].
    #[error("Fetch response version {version} is not supported (supported: {MIN_VERSION}..={MAX_VERSION})")]
    UnsupportedVersion {
        /// The requested version.
        version: i16,
    },
    /// A field that the version cannot carry has a non-default value (Kafka's generated code
    /// throws `UnsupportedVersionException` for such non-ignorable fields).
    #[error("field {field} = {value} cannot be sent in Fetch response v{version}")]
    FieldNotInVersion {
        /// The field's name, as in `FetchResponse.json`.
        field: &'static str,
        /// Its value.
        value: i64,
        /// The requested version.
        version: i16,
    },
    /// A length does not fit its wire field (a topic name over `i16::MAX` bytes, a record set or
    /// the whole frame over `i32::MAX` bytes).
    #[error("{what} is {len} bytes, over the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its length in bytes.
        len: u64,
        /// The largest length the field can carry.
        limit: u64,
    },
}

/// One Fetch response, before encoding (Kafka's `FetchResponseData`).
#[derive(Clone, Debug, Default)]
pub struct FetchResponse {
    /// Time the request was throttled for a quota, in milliseconds (0: not throttled).
    pub throttle_time_ms: i32,
    /// Top-level error code (v7+; dropped for older versions, where it is ignorable in Kafka).
    pub error_code: i16,
    /// The fetch session id (KIP-227, v7+). A broker that keeps no sessions answers 0, and clients
    /// then fall back to full fetches. Must be 0 below v7.
    pub session_id: i32,
    /// The topics, in the order they are written.
    pub topics: Vec<FetchableTopic>,
}

/// One topic of a Fetch response (Kafka's `FetchableTopicResponse`).
#[derive(Clone, Debug, Default)]
pub struct FetchableTopic {
    /// The topic name, written by versions 4-12.
    pub name: String,
    /// The topic id (KIP-516, a UUID as its 16 big-endian bytes), written by versions 13+.
    pub topic_id: [u8; 16],
    /// The partitions, in the order they are written.
    pub partitions: Vec<PartitionData>,
}

/// One partition of a Fetch response (Kafka's `FetchResponseData.PartitionData`).
#[derive(Clone, Debug)]
pub struct PartitionData {
    /// The partition index.
    pub partition_index: i32,
    /// The partition's error code (0 = none).
    pub error_code: i16,
    /// The high watermark: offset of the next record to be committed.
    pub high_watermark: i64,
    /// The last stable offset (v4+). Without transactions it equals the high watermark.
    pub last_stable_offset: i64,
    /// The log start offset (v5+; dropped for v4, where Kafka treats it as ignorable).
    pub log_start_offset: i64,
    /// Aborted transactions in the returned range (v4+). `None` is written as a null array, as Kafka
    /// does for `read_uncommitted` fetches; `Some(vec![])` as an empty one (`read_committed` with
    /// no aborted transaction).
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// The preferred read replica (KIP-392, v11+); -1 = none. Must be -1 below v11.
    pub preferred_read_replica: i32,
    /// The record set, a byte range of a segment file (it may end inside a batch). `None` and a
    /// zero-length slice are both written as an empty (length 0, not null) record set, as Kafka
    /// writes the result of a log read (`MemoryRecords.EMPTY` or an empty `FileRecords` slice).
    /// Difference: Kafka 3+ leaves `records` null in partitions built by
    /// `FetchResponse.partitionResponse(partition, error)` (request-level errors such as
    /// `UNKNOWN_TOPIC_OR_PARTITION`); this encoder sends an empty set there too, which clients
    /// read the same way.
    pub records: Option<FileSlice>,
}

impl Default for PartitionData {
    /// Kafka's defaults: high watermark 0, last stable offset and log start offset -1, an empty
    /// aborted-transactions array, no preferred read replica (-1), an empty record set.
    fn default() -> Self {
        PartitionData {
            partition_index: 0,
            error_code: 0,
            high_watermark: 0,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: Some(Vec::new()),
            preferred_read_replica: -1,
            records: None,
        }
    }
}

/// An aborted transaction in a partition's fetched range (Kafka's `AbortedTransaction`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer id of the aborted transaction.
    pub producer_id: i64,
    /// The first offset of the aborted transaction.
    pub first_offset: i64,
}

/// A piece of an encoded frame: bytes in memory, or a record set still on disk.
#[derive(Clone, Debug)]
pub enum Chunk {
    /// Bytes to write as they are (size prefix, header, fields, length prefixes).
    Bytes(Bytes),
    /// A record set, moved by a [`ReadPath`].
    File(FileSlice),
}

impl Chunk {
    /// The chunk's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(b) => b.len() as u64,
            Chunk::File(s) => s.len,
        }
    }

    /// Whether the chunk is empty (never true for chunks made by [`FetchResponse::encode`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An encoded Fetch response: the whole frame, from the 4-byte size prefix on, as chunks. No
/// chunk is empty; the first is always `Bytes` and starts with the size prefix.
#[derive(Clone, Debug)]
pub struct FetchResponseFrame {
    chunks: Vec<Chunk>,
    size: u64,
}

impl FetchResponseFrame {
    /// The chunks, in wire order.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Total bytes of the frame, the 4-byte size prefix included.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of record sets in the frame (the `File` chunks; 0 when no partition returned
    /// records, e.g. a long poll that expired at the log end).
    pub fn record_bytes(&self) -> u64 {
        self.chunks.iter().filter(|c| matches!(c, Chunk::File(_))).map(Chunk::len).sum()
    }

    /// Writes the frame to `socket`: `Bytes` chunks with a blocking write-all (short writes
    /// continued, `EINTR` retried, `EAGAIN` waited out, `MSG_NOSIGNAL`), `File` chunks through
    /// `path.transfer`. Returns the bytes written (= [`Self::size`]).
    ///
    /// Errors: the first I/O error, after which the peer holds a partial frame and the connection
    /// must be closed (`UnexpectedEof` when a segment file is shorter than its slice, `BrokenPipe`
    /// / `ConnectionReset` when the peer went away).
    pub fn write_to<P: ReadPath + ?Sized>(&self, socket: BorrowedFd<'_>, path: &mut P) -> io::Result<u64> {
        let mut stats = TransferStats::default();
        let mut sent = 0u64;
        for chunk in &self.chunks {
            match chunk {
                Chunk::Bytes(b) => util::write_all(socket, b, &mut stats, &mut sent)?,
                Chunk::File(slice) => sent += path.transfer(slice, socket)?,
            }
        }
        Ok(sent)
    }

    /// The whole frame in memory, reading every slice with `pread` (tests and tools; the broker
    /// uses [`Self::write_to`]). Errors: the read error of a slice.
    pub fn read_to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0));
        for chunk in &self.chunks {
            match chunk {
                Chunk::Bytes(b) => out.extend_from_slice(b),
                Chunk::File(slice) => out.extend_from_slice(&slice.read_to_vec()?),
            }
        }
        Ok(out)
    }
}

/// The response header version for Fetch `version`: 1 (with tagged fields) for flexible versions
/// (v12+), else 0.
pub fn header_version(version: i16) -> i16 {
    if version >= FIRST_FLEXIBLE_VERSION {
        1
    } else {
        0
    }
}

/// Accumulates the in-memory bytes of a frame and where the record sets go between them.
struct Writer {
    buf: BytesMut,
    /// `(position in buf, slice)`: the slice goes right after `buf[..position]`.
    files: Vec<(usize, FileSlice)>,
    files_len: u64,
    flexible: bool,
}

impl Writer {
    /// A length prefix (protocol primitives: `i32` or `i16` before v12, varint `n + 1` after, null
    /// for `None`), refused above `limit` (which the prefix can always carry).
    fn length(&mut self, len: Option<u64>, wide: bool, what: &'static str, limit: u64) -> Result<(), FetchEncodeError> {
        let too_large = |len| FetchEncodeError::TooLarge { what, len, limit };
        let len = match len {
            Some(n) if n > limit => return Err(too_large(n)),
            Some(n) => Some(usize::try_from(n).map_err(|_| too_large(n))?),
            None => None,
        };
        put_length(&mut self.buf, len, self.flexible, wide).map_err(|e| too_large(e.len as u64))
    }

    /// An array length (non-null `Some(n)` or null `None`): `i32` before v12, varint `n + 1` after.
    fn array_len(&mut self, len: Option<usize>, what: &'static str) -> Result<(), FetchEncodeError> {
        self.length(len.map(|n| n as u64), true, what, i32::MAX as u64)
    }

    fn string(&mut self, s: &str) -> Result<(), FetchEncodeError> {
        self.length(Some(s.len() as u64), false, "topic name", i16::MAX as u64)?;
        self.buf.put_slice(s.as_bytes());
        Ok(())
    }

    /// An empty tagged-field section (flexible versions only).
    fn tagged_fields(&mut self) {
        if self.flexible {
            put_unsigned_varint(&mut self.buf, 0);
        }
    }

    /// The records field: a non-null bytes length, then the slice as a `File` chunk.
    fn records(&mut self, records: Option<&FileSlice>) -> Result<(), FetchEncodeError> {
        let len = records.map_or(0, |s| s.len);
        self.length(Some(len), true, "record set", i32::MAX as u64)?;
        if let Some(slice) = records.filter(|s| s.len > 0) {
            self.files.push((self.buf.len(), slice.clone()));
            self.files_len += slice.len;
        }
        Ok(())
    }
}

impl FetchResponse {
    /// Encodes the response as Fetch `version` with `correlation_id` in the response header
    /// (header v0 below v12, v1 with an empty tagged-field section from v12). The frame's size is
    /// computed here, before anything is written; no record byte is read.
    ///
    /// Errors: [`FetchEncodeError::UnsupportedVersion`] outside [`MIN_VERSION`]..=[`MAX_VERSION`];
    /// [`FetchEncodeError::FieldNotInVersion`] for a non-zero `session_id` below v7 or a
    /// `preferred_read_replica` other than -1 below v11; [`FetchEncodeError::TooLarge`] when a topic
    /// name, a record set or the frame does not fit its length field.
    pub fn encode(&self, version: i16, correlation_id: i32) -> Result<FetchResponseFrame, FetchEncodeError> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(FetchEncodeError::UnsupportedVersion { version });
        }
        let flexible = version >= FIRST_FLEXIBLE_VERSION;
        let mut w = Writer { buf: BytesMut::with_capacity(256), files: Vec::new(), files_len: 0, flexible };
        w.buf.put_i32(0); // size prefix, patched below
        w.buf.put_i32(correlation_id);
        w.tagged_fields();

        w.buf.put_i32(self.throttle_time_ms);
        if version >= 7 {
            w.buf.put_i16(self.error_code);
            w.buf.put_i32(self.session_id);
        } else if self.session_id != 0 {
            return Err(FetchEncodeError::FieldNotInVersion {
                field: "SessionId",
                value: self.session_id.into(),
                version,
            });
        }
        w.array_len(Some(self.topics.len()), "topics array")?;
        for topic in &self.topics {
            if version >= FIRST_TOPIC_ID_VERSION {
                w.buf.put_slice(&topic.topic_id);
            } else {
                w.string(&topic.name)?;
            }
            w.array_len(Some(topic.partitions.len()), "partitions array")?;
            for p in &topic.partitions {
                w.buf.put_i32(p.partition_index);
                w.buf.put_i16(p.error_code);
                w.buf.put_i64(p.high_watermark);
                w.buf.put_i64(p.last_stable_offset);
                if version >= 5 {
                    w.buf.put_i64(p.log_start_offset);
                }
                w.array_len(p.aborted_transactions.as_ref().map(Vec::len), "aborted transactions array")?;
                for t in p.aborted_transactions.iter().flatten() {
                    w.buf.put_i64(t.producer_id);
                    w.buf.put_i64(t.first_offset);
                    w.tagged_fields();
                }
                if version >= 11 {
                    w.buf.put_i32(p.preferred_read_replica);
                } else if p.preferred_read_replica != -1 {
                    return Err(FetchEncodeError::FieldNotInVersion {
                        field: "PreferredReadReplica",
                        value: p.preferred_read_replica.into(),
                        version,
                    });
                }
                w.records(p.records.as_ref())?;
                w.tagged_fields();
            }
            w.tagged_fields();
        }
        w.tagged_fields();

        let size = w.buf.len() as u64 + w.files_len;
        let body = size - 4;
        let limit = i32::MAX as u64;
        if body > limit {
            return Err(FetchEncodeError::TooLarge { what: "Fetch response frame", len: body, limit });
        }
        w.buf[..4].copy_from_slice(&(body as i32).to_be_bytes());

        let all = w.buf.freeze();
        let mut chunks = Vec::with_capacity(2 * w.files.len() + 1);
        let mut start = 0;
        for (at, slice) in w.files {
            if at > start {
                chunks.push(Chunk::Bytes(all.slice(start..at)));
            }
            chunks.push(Chunk::File(slice));
            start = at;
        }
        if all.len() > start {
            chunks.push(Chunk::Bytes(all.slice(start..)));
        }
        Ok(FetchResponseFrame { chunks, size })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    use crate::log::segment::SegmentFile;

    fn slice_of(data: &[u8], position: u64, len: u64) -> FileSlice {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(data).unwrap();
        let segment = Arc::new(SegmentFile::from_file(f, "anon".into()));
        FileSlice { segment, position, len }
    }

    #[test]
    fn size_prefix_and_chunk_layout() {
        let data: Vec<u8> = (0..100u8).collect();
        let resp = FetchResponse {
            topics: vec![FetchableTopic {
                name: "t".into(),
                partitions: vec![PartitionData { records: Some(slice_of(&data, 10, 50)), ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        for version in MIN_VERSION..=MAX_VERSION {
            let frame = resp.encode(version, 7).unwrap();
            let bytes = frame.read_to_vec().unwrap();
            assert_eq!(bytes.len() as u64, frame.size());
            assert_eq!(i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize, bytes.len() - 4);
            assert_eq!(i32::from_be_bytes(bytes[4..8].try_into().unwrap()), 7);
            let kinds: Vec<bool> = frame.chunks().iter().map(|c| matches!(c, Chunk::File(_))).collect();
            // v4-v11 end with the records; flexible versions add tagged fields after them.
            let expected = if version >= FIRST_FLEXIBLE_VERSION { vec![false, true, false] } else { vec![false, true] };
            assert_eq!(kinds, expected, "v{version}");
            assert!(frame.chunks().iter().all(|c| !c.is_empty()));
            assert!(bytes.windows(50).any(|w| w == &data[10..60]));
        }
    }

    #[test]
    fn rejects_fields_and_versions_kafka_rejects() {
        assert_eq!(
            FetchResponse::default().encode(3, 0).unwrap_err(),
            FetchEncodeError::UnsupportedVersion { version: 3 }
        );
        assert!(FetchResponse::default().encode(MAX_VERSION + 1, 0).is_err());
        let with_session = FetchResponse { session_id: 5, ..Default::default() };
        assert!(matches!(with_session.encode(6, 0), Err(FetchEncodeError::FieldNotInVersion { .. })));
        assert!(with_session.encode(7, 0).is_ok());
        let replica = FetchResponse {
            topics: vec![FetchableTopic {
                partitions: vec![PartitionData { preferred_read_replica: 0, ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(replica.encode(10, 0), Err(FetchEncodeError::FieldNotInVersion { .. })));
        assert!(replica.encode(11, 0).is_ok());
    }

    #[test]
    fn header_versions() {
        assert_eq!(header_version(11), 0);
        assert_eq!(header_version(12), 1);
    }
}
