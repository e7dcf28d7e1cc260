//! Kafka's small text files in a log directory and its partition directories (Kafka's
//! `CheckpointFile`, `OffsetCheckpointFile`, `LeaderEpochCheckpointFile`, `PartitionMetadataFile`,
//! `MetaProperties`).
//!
//! ## Offset checkpoints (one per log directory)
//!
//! [`RECOVERY_POINT_OFFSET_CHECKPOINT`], [`LOG_START_OFFSET_CHECKPOINT`],
//! [`REPLICATION_OFFSET_CHECKPOINT`] (high watermarks) and [`CLEANER_OFFSET_CHECKPOINT`]:
//!
//! ```text
//! 0                      version
//! 2                      number of entries
//! my-topic 0 1234        topic, partition, offset (separated by whitespace)
//! other 3 0
//! ```
//!
//! ## `leader-epoch-checkpoint` (one per partition directory)
//!
//! ```text
//! 0                      version
//! 1                      number of entries
//! 0 0                    leader epoch, start offset of that epoch
//! ```
//!
//! Reading follows `CheckpointFile.CheckpointReadBuffer`: an empty file, or one holding only the
//! version (and perhaps the count), has no entries; every line after the count is an entry and
//! their number must equal the count. Lines end at `\n`, `\r\n` or `\r`.
//!
//! ## `partition.metadata` (one per partition directory, Kafka 2.8+, KIP-516)
//!
//! ```text
//! version: 0
//! topic_id: B3_HiNPgSQ6oxG9ZZ6ED5A         (no final newline)
//! ```
//!
//! The topic id is a [`TopicId`]: 16 bytes printed as URL-safe base64 without padding.
//!
//! ## Damaged files
//!
//! Every reader here returns [`LogError::Layout`] naming the file (and the line, or the byte where
//! the UTF-8 breaks) for a file that does not parse, whether it holds ASCII garbage or non-UTF-8
//! bytes: the callers treat both the same. Kafka's readers throw an `IOException`; its
//! `LogManager` resets the offset checkpoints and takes the log directory offline for the others.
//! Here the log manager and [`PartitionLog::open`](super::partition::PartitionLog::open) rebuild
//! each file from the logs instead (see [`DamagedFile`](super::partition::DamagedFile)).
//!
//! ## Writing
//!
//! Every write is atomic as in Kafka (`CheckpointFile.write` + `Utils.atomicMoveWithFallback`):
//! the content goes to `<name>.tmp`, which is fsynced, renamed over `<name>`, and the directory is
//! fsynced so the rename itself survives a crash. A reader sees the old file or the new one, never a
//! mix.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;

use super::config::{java_lines, parse_properties};
use super::error::LogError;

/// Per log directory: offset up to which each partition's log is known flushed; recovery after
/// an unclean shutdown starts here.
pub const RECOVERY_POINT_OFFSET_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Per log directory: each partition's log start offset (after retention or DeleteRecords).
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";
/// Per log directory: each partition's high watermark.
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
/// Per log directory: for compacted partitions, the offset up to which the log is clean.
pub const CLEANER_OFFSET_CHECKPOINT: &str = "cleaner-offset-checkpoint";
/// Per partition directory: leader epochs and their start offsets.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// Per partition directory: the topic id (KIP-516).
pub const PARTITION_METADATA: &str = "partition.metadata";
/// Per log directory: broker/cluster identity (`version`, `cluster.id`, `broker.id` / `node.id`).
pub const META_PROPERTIES: &str = "meta.properties";
/// Per log directory: present after a clean shutdown; when absent at startup, segments after the
/// recovery point are recovered (indexes rebuilt, tail truncated at the first invalid batch).
/// Kafka 3.7+ writes a small JSON body with string values (`{"version":"0","broker_epoch":"42"}`,
/// KIP-966, `CleanShutdownFileHandler`), older versions an empty file; only its existence matters
/// for recovery.
pub const CLEAN_SHUTDOWN_MARKER: &str = ".kafka_cleanshutdown";
/// KRaft metadata log directory: the bootstrap metadata records (binary record batches).
pub const BOOTSTRAP_CHECKPOINT: &str = "bootstrap.checkpoint";
/// KRaft metadata partition: the quorum state (JSON).
pub const QUORUM_STATE: &str = "quorum-state";
/// Suffix of the temporary file an atomic write goes through.
pub const TMP_SUFFIX: &str = ".tmp";

/// Version of the offset and leader-epoch checkpoint formats (the only one Kafka has).
pub const CHECKPOINT_VERSION: i32 = 0;
/// Version of the `partition.metadata` format.
pub const PARTITION_METADATA_VERSION: i32 = 0;

/// Contents of an offset checkpoint: (topic, partition) -> offset.
pub type OffsetCheckpoint = BTreeMap<(String, i32), i64>;

fn malformed(path: &Path, line_no: usize, line: &str, expected: &str) -> LogError {
    LogError::Layout {
        path: path.to_path_buf(),
        reason: format!("malformed line {line_no} {line:?} in checkpoint file: expected {expected}"),
    }
}

/// Java's `\s`: space, `\t`, `\n`, `\x0B`, `\f`, `\r`.
fn is_java_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// `line.split("\\s+")` with Java's semantics: a leading separator yields a leading empty string,
/// trailing empty strings are dropped.
fn java_split_ws(line: &str) -> Vec<&str> {
    if line.is_empty() {
        return vec![""];
    }
    let mut parts = Vec::new();
    if line.starts_with(is_java_ws) {
        parts.push("");
    }
    parts.extend(line.split(is_java_ws).filter(|s| !s.is_empty()));
    if parts == [""] {
        parts.clear();
    }
    parts
}

/// The entry lines of a checkpoint file after checking its version and count. Returns
/// `(line number, line)` pairs.
fn checkpoint_entries<'a>(path: &Path, text: &'a str) -> Result<Vec<(usize, &'a str)>, LogError> {
    let mut lines = java_lines(text).enumerate().map(|(i, l)| (i + 1, l));
    let Some((n, version_line)) = lines.next() else { return Ok(Vec::new()) };
    let version: i32 = version_line.parse().map_err(|_| malformed(path, n, version_line, "the version"))?;
    if version != CHECKPOINT_VERSION {
        return Err(LogError::Layout {
            path: path.to_path_buf(),
            reason: format!("unrecognised checkpoint version {version}, expected {CHECKPOINT_VERSION}"),
        });
    }
    let Some((n, count_line)) = lines.next() else { return Ok(Vec::new()) };
    let expected: i64 =
        count_line.parse::<i32>().map_err(|_| malformed(path, n, count_line, "the entry count"))?.into();
    let entries: Vec<(usize, &str)> = lines.collect();
    if entries.len() as i64 != expected {
        return Err(LogError::Layout {
            path: path.to_path_buf(),
            reason: format!("expected {expected} entries in checkpoint file, found {}", entries.len()),
        });
    }
    Ok(entries)
}

/// Parses the text of an offset checkpoint file (`path` is only used in errors). Duplicate
/// (topic, partition) entries keep the last offset, as Kafka's conversion to a map does.
///
/// Errors: [`LogError::Layout`] naming the file and the line for a bad version, count or entry,
/// or when the number of entries differs from the count.
pub fn parse_offset_checkpoint(path: &Path, text: &str) -> Result<OffsetCheckpoint, LogError> {
    let mut out = OffsetCheckpoint::new();
    for (n, line) in checkpoint_entries(path, text)? {
        let expected = "`topic partition offset`";
        let parts = java_split_ws(line);
        let [topic, partition, offset] = parts[..] else { return Err(malformed(path, n, line, expected)) };
        let partition: i32 = partition.parse().map_err(|_| malformed(path, n, line, expected))?;
        let offset: i64 = offset.parse().map_err(|_| malformed(path, n, line, expected))?;
        out.insert((topic.to_string(), partition), offset);
    }
    Ok(out)
}

/// Reads an offset checkpoint file. A missing file reads as empty: Kafka's `CheckpointFile`
/// creates it empty when first opened.
///
/// Errors: [`LogError::Io`] when the file cannot be read; [`LogError::Layout`] when it is not
/// UTF-8 or as [`parse_offset_checkpoint`].
pub fn read_offset_checkpoint(path: &Path) -> Result<OffsetCheckpoint, LogError> {
    match read_text(path)? {
        Some(text) => parse_offset_checkpoint(path, &text),
        None => Ok(OffsetCheckpoint::new()),
    }
}

/// The text of an offset checkpoint holding `entries`, in map order.
pub fn format_offset_checkpoint(entries: &OffsetCheckpoint) -> String {
    let mut s = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for ((topic, partition), offset) in entries {
        s.push_str(&format!("{topic} {partition} {offset}\n"));
    }
    s
}

/// Writes an offset checkpoint atomically (see the module docs).
///
/// Errors: [`LogError::Io`] naming the temporary file or the directory; [`LogError::Layout`] for
/// a topic name that would not read back (empty or containing whitespace).
pub fn write_offset_checkpoint(path: &Path, entries: &OffsetCheckpoint) -> Result<(), LogError> {
    if let Some(((topic, _), _)) = entries.iter().find(|((t, _), _)| t.is_empty() || t.contains(is_java_ws)) {
        return Err(LogError::Layout {
            path: path.to_path_buf(),
            reason: format!("topic name {topic:?} cannot be written to a checkpoint file"),
        });
    }
    write_atomically(path, format_offset_checkpoint(entries).as_bytes())
}

/// One `leader-epoch-checkpoint` entry: the leader epoch and the first offset written in it
/// (Kafka's `EpochEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EpochEntry {
    /// Leader epoch.
    pub epoch: i32,
    /// First offset appended under this epoch.
    pub start_offset: i64,
}

/// Parses the text of a `leader-epoch-checkpoint` (`path` only for errors); entries in file order.
///
/// Errors: [`LogError::Layout`] naming the file and line, as [`parse_offset_checkpoint`].
pub fn parse_leader_epoch_checkpoint(path: &Path, text: &str) -> Result<Vec<EpochEntry>, LogError> {
    let mut out = Vec::new();
    for (n, line) in checkpoint_entries(path, text)? {
        let expected = "`epoch start_offset`";
        let parts = java_split_ws(line);
        let [epoch, start_offset] = parts[..] else { return Err(malformed(path, n, line, expected)) };
        out.push(EpochEntry {
            epoch: epoch.parse().map_err(|_| malformed(path, n, line, expected))?,
            start_offset: start_offset.parse().map_err(|_| malformed(path, n, line, expected))?,
        });
    }
    Ok(out)
}

/// Reads a `leader-epoch-checkpoint`; a missing file has no entries.
///
/// Errors: [`LogError::Io`], [`LogError::Layout`].
pub fn read_leader_epoch_checkpoint(path: &Path) -> Result<Vec<EpochEntry>, LogError> {
    match read_text(path)? {
        Some(text) => parse_leader_epoch_checkpoint(path, &text),
        None => Ok(Vec::new()),
    }
}

/// The text of a `leader-epoch-checkpoint` holding `entries` in the order given.
pub fn format_leader_epoch_checkpoint(entries: &[EpochEntry]) -> String {
    let mut s = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        s.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    s
}

/// Writes a `leader-epoch-checkpoint` atomically.
///
/// Errors: [`LogError::Io`].
pub fn write_leader_epoch_checkpoint(path: &Path, entries: &[EpochEntry]) -> Result<(), LogError> {
    write_atomically(path, format_leader_epoch_checkpoint(entries).as_bytes())
}

/// A Kafka `Uuid`: 16 bytes, shown as URL-safe base64 without padding (22 characters), as
/// Kafka's `Uuid.toString` does. Used for topic ids (KIP-516) and log directory ids.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TopicId(pub [u8; 16]);

/// A string that is not a Kafka `Uuid` in base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Kafka Uuid {input:?}: {reason}")]
pub struct TopicIdParseError {
    /// The string given (truncated to 64 characters).
    pub input: String,
    /// What is wrong.
    pub reason: &'static str,
    /// The base64 decoder's error, when it refused the string.
    #[source]
    pub source: Option<base64::DecodeError>,
}

/// Kafka's `Uuid` alphabet (`Base64.getUrlEncoder().withoutPadding()`), decoding like Java's URL
/// decoder: unused low bits of the last character are ignored. Padding is refused here;
/// [`UUID_BASE64_PADDED`] reads the padded form.
const UUID_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// [`UUID_BASE64`] for input that ends in `=`: the padding must be canonical (`==` after 22
/// characters), as Java's decoder requires of padded input.
const UUID_BASE64_PADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Characters of a Kafka `Uuid` in base64 without padding: 128 bits in 6-bit characters.
const UUID_BASE64_LEN: usize = 22;

impl TopicId {
    /// All zeros: "no topic id" (Kafka's `Uuid.ZERO_UUID`, `AAAAAAAAAAAAAAAAAAAAAA`).
    pub const ZERO: TopicId = TopicId([0; 16]);
    /// The id of the KRaft `__cluster_metadata` topic (Kafka's `Uuid.METADATA_TOPIC_ID`,
    /// `AAAAAAAAAAAAAAAAAAAAAQ`).
    pub const METADATA_TOPIC_ID: TopicId = TopicId([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

    /// Builds an id from Java's two longs (`new Uuid(mostSigBits, leastSigBits)`), big-endian.
    pub fn from_bits(most_significant: u64, least_significant: u64) -> Self {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&most_significant.to_be_bytes());
        b[8..].copy_from_slice(&least_significant.to_be_bytes());
        TopicId(b)
    }
    /// The first 8 bytes as a big-endian u64 (`getMostSignificantBits`).
    pub fn most_significant_bits(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
    /// The last 8 bytes as a big-endian u64 (`getLeastSignificantBits`).
    pub fn least_significant_bits(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }
    /// Whether this is [`TopicId::ZERO`].
    pub fn is_zero(&self) -> bool {
        *self == TopicId::ZERO
    }

    /// Parses Kafka's string form (`Uuid.fromString`): URL-safe base64 of 16 bytes, with or
    /// without `==` padding (the `base64` crate's URL-safe alphabet). Like Java's decoder, unused
    /// low bits of the last character are ignored.
    ///
    /// Errors: [`TopicIdParseError`] for other alphabets, bad padding, or a length other than 16
    /// bytes; the decoder's error is its source.
    pub fn parse(s: &str) -> Result<Self, TopicIdParseError> {
        let err = |reason, source| TopicIdParseError { input: s.chars().take(64).collect(), reason, source };
        if s.len() > 24 {
            return Err(err("too long to be a base64 Uuid", None));
        }
        let engine = if s.ends_with('=') { &UUID_BASE64_PADDED } else { &UUID_BASE64 };
        let bytes = engine.decode(s).map_err(|e| {
            let reason = match e {
                // `=` where only padding may stand (too many of them at the end).
                base64::DecodeError::InvalidByte(at, b'=')
                    if s.get(at..).is_some_and(|rest| rest.bytes().all(|c| c == b'=')) =>
                {
                    "malformed base64 padding"
                }
                base64::DecodeError::InvalidByte(..) => "not URL-safe base64",
                _ => "malformed base64 padding",
            };
            err(reason, Some(e))
        })?;
        let bytes: [u8; 16] = bytes.try_into().map_err(|_| err("does not decode to 16 bytes", None))?;
        Ok(TopicId(bytes))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = [0u8; UUID_BASE64_LEN];
        let n = UUID_BASE64.encode_slice(self.0, &mut s).expect("16 bytes are 22 base64 characters");
        f.write_str(std::str::from_utf8(&s[..n]).expect("base64 alphabet is ASCII"))
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

impl FromStr for TopicId {
    type Err = TopicIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TopicId::parse(s)
    }
}

/// Java's `line.split(":\\s+")` (trailing empty strings dropped).
fn split_colon_ws(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let b = line.as_bytes();
    while i < b.len() {
        if b[i] == b':' {
            let ws = line[i + 1..].chars().take_while(|c| is_java_ws(*c)).map(char::len_utf8).sum::<usize>();
            if ws > 0 {
                parts.push(&line[start..i]);
                i += 1 + ws;
                start = i;
                continue;
            }
        }
        i += 1;
    }
    parts.push(&line[start..]);
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// Parses the text of a `partition.metadata` file (`path` only for errors), Kafka's
/// `PartitionMetadataReadBuffer`: line 1 `version: 0`, line 2 `topic_id: <Uuid>`.
///
/// Errors: [`LogError::Layout`] naming the file and line for a malformed line, a version other
/// than 0, an unparsable or all-zero topic id.
pub fn parse_partition_metadata(path: &Path, text: &str) -> Result<TopicId, LogError> {
    let mut lines = java_lines(text);
    let version_line = lines.next().unwrap_or("");
    let parts = split_colon_ws(version_line);
    let [_, version] = parts[..] else { return Err(malformed(path, 1, version_line, "`version: 0`")) };
    let version: i32 = version.parse().map_err(|_| malformed(path, 1, version_line, "`version: 0`"))?;
    if version != PARTITION_METADATA_VERSION {
        return Err(LogError::Layout {
            path: path.to_path_buf(),
            reason: format!("unrecognized version of partition metadata file: {version}"),
        });
    }
    let id_line = lines.next().unwrap_or("");
    let parts = split_colon_ws(id_line);
    let [_, id] = parts[..] else { return Err(malformed(path, 2, id_line, "`topic_id: <base64 Uuid>`")) };
    let id = TopicId::parse(id)
        .map_err(|e| LogError::Layout { path: path.to_path_buf(), reason: format!("line 2: {e}") })?;
    if id.is_zero() {
        return Err(LogError::Layout { path: path.to_path_buf(), reason: "invalid topic id (all zeros)".into() });
    }
    Ok(id)
}

/// Reads a `partition.metadata` file; `Ok(None)` when it does not exist (logs created by Kafka
/// before 2.8, or before the topic id was known).
///
/// Errors: [`LogError::Io`], [`LogError::Layout`] as [`parse_partition_metadata`].
pub fn read_partition_metadata(path: &Path) -> Result<Option<TopicId>, LogError> {
    match read_text(path)? {
        Some(text) => parse_partition_metadata(path, &text).map(Some),
        None => Ok(None),
    }
}

/// The text Kafka writes to `partition.metadata` (`PartitionMetadataFileFormatter.toFile`): no
/// final newline.
pub fn format_partition_metadata(topic_id: TopicId) -> String {
    format!("version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}")
}

/// Writes `partition.metadata` atomically.
///
/// Errors: [`LogError::Io`].
pub fn write_partition_metadata(path: &Path, topic_id: TopicId) -> Result<(), LogError> {
    write_atomically(path, format_partition_metadata(topic_id).as_bytes())
}

/// A log directory's `meta.properties` (Kafka's `MetaProperties`), read only.
///
/// Version 0 was written by ZooKeeper-mode brokers (`broker.id`, `cluster.id` optional),
/// version 1 by KRaft nodes (`node.id` and `cluster.id` required, `directory.id` since 3.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaProperties {
    /// `version`: 0 (ZooKeeper) or 1 (KRaft).
    pub version: i32,
    /// `cluster.id`.
    pub cluster_id: Option<String>,
    /// `node.id` (version 1) or `broker.id` (version 0).
    pub node_id: Option<i32>,
    /// `directory.id` (KIP-858), a Kafka Uuid.
    pub directory_id: Option<TopicId>,
    /// Every key of the file, as read.
    pub properties: BTreeMap<String, String>,
}

/// Parses the text of a `meta.properties` file (`path` only for errors).
///
/// Errors: [`LogError::Layout`] for a missing or unknown `version`, an unparsable id, or (version 1)
/// a missing `node.id` or `cluster.id`.
pub fn parse_meta_properties(path: &Path, text: &str) -> Result<MetaProperties, LogError> {
    let bad = |reason: String| LogError::Layout { path: path.to_path_buf(), reason };
    let properties = parse_properties(text);
    let version: i32 = properties
        .get("version")
        .ok_or_else(|| bad("no `version` in meta.properties".into()))?
        .trim()
        .parse()
        .map_err(|e| bad(format!("`version` is not an integer: {e}")))?;
    if !(0..=1).contains(&version) {
        return Err(bad(format!("unknown meta.properties version {version}, expected 0 or 1")));
    }
    let int = |key: &str| -> Result<Option<i32>, LogError> {
        properties
            .get(key)
            .map(|v| v.trim().parse::<i32>().map_err(|e| bad(format!("`{key}` is not an integer: {e}"))))
            .transpose()
    };
    let node_id = if version == 0 { int("broker.id")?.or(int("node.id")?) } else { int("node.id")? };
    let cluster_id = properties.get("cluster.id").cloned();
    let directory_id = properties
        .get("directory.id")
        .map(|v| TopicId::parse(v.trim()).map_err(|e| bad(format!("`directory.id`: {e}"))))
        .transpose()?;
    if version == 1 {
        if node_id.is_none() {
            return Err(bad("meta.properties version 1 requires `node.id`".into()));
        }
        if cluster_id.is_none() {
            return Err(bad("meta.properties version 1 requires `cluster.id`".into()));
        }
    }
    Ok(MetaProperties { version, cluster_id, node_id, directory_id, properties })
}

/// Reads a log directory's `meta.properties`.
///
/// Errors: [`LogError::Io`] (including a missing file), [`LogError::Layout`].
pub fn read_meta_properties(path: &Path) -> Result<MetaProperties, LogError> {
    let text = read_text(path)?.ok_or_else(|| {
        LogError::io("read", path, io::Error::new(io::ErrorKind::NotFound, "meta.properties not found"))
    })?;
    parse_meta_properties(path, &text)
}

/// Reads a whole text file; `Ok(None)` when it does not exist.
///
/// Errors: [`LogError::Io`] when it cannot be read; [`LogError::Layout`] naming the byte position
/// when it is not UTF-8, so that a file damaged into non-UTF-8 bytes is reported (and, where the
/// caller recovers from damage, recovered) exactly like one damaged into ASCII garbage.
fn read_text(path: &Path) -> Result<Option<String>, LogError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io("read", path, e)),
    };
    String::from_utf8(bytes).map(Some).map_err(|e| LogError::Layout {
        path: path.to_path_buf(),
        reason: format!("not a text file: invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()),
    })
}

/// `<path>.tmp`, the temporary file of an atomic write.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(TMP_SUFFIX);
    PathBuf::from(s)
}

/// Replaces `path` with `contents` atomically and durably: write `<path>.tmp`, fsync it, rename
/// it over `path`, fsync the parent directory (Kafka's `CheckpointFile.write` with `sync = true`).
///
/// Errors: [`LogError::OutOfSpace`] on a full disk, [`LogError::Io`], naming the step and file;
/// [`LogError::Layout`] when `path` is a directory (the message says to remove it); on error `path` still holds its old contents (a failed write or fsync removes the `.tmp`; one
/// left by a crash is overwritten by the next write).
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), LogError> {
    // A directory in the file's place cannot be replaced by a rename, and removing it could
    // destroy what someone put there: the operator decides.
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(LogError::Layout {
            path: path.to_path_buf(),
            reason: format!("a directory is in the place of this file: remove {} and start again", path.display()),
        });
    }
    let tmp = tmp_path(path);
    let mut f = File::create(&tmp).map_err(|e| LogError::io("create", &tmp, e))?;
    let written = f
        .write_all(contents)
        .map_err(|e| LogError::io("write", &tmp, e))
        .and_then(|()| f.sync_all().map_err(|e| LogError::io("fsync", &tmp, e)));
    drop(f);
    if let Err(e) = written {
        // E.g. a full disk: the previous file stays in place, and no partial temporary is left.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path).map_err(|e| LogError::io("rename into place", &tmp, e))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let d = File::open(dir).map_err(|e| LogError::io("open directory", dir, e))?;
    d.sync_all().map_err(|e| LogError::io("fsync directory", dir, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_reason(e: LogError) -> (PathBuf, String) {
        match e {
            LogError::Layout { path, reason } => (path, reason),
            other => panic!("expected Layout, got {other:?}"),
        }
    }

    #[test]
    fn offset_checkpoint_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RECOVERY_POINT_OFFSET_CHECKPOINT);
        assert!(read_offset_checkpoint(&path).unwrap().is_empty(), "missing file reads empty");
        let mut m = OffsetCheckpoint::new();
        m.insert(("my-topic".into(), 0), 1234);
        m.insert(("__consumer_offsets".into(), 49), 0);
        m.insert(("my-topic".into(), 10), i64::MAX);
        write_offset_checkpoint(&path, &m).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "0\n3\n__consumer_offsets 49 0\nmy-topic 0 1234\nmy-topic 10 9223372036854775807\n"
        );
        assert!(!tmp_path(&path).exists(), "tmp file renamed away");
        assert_eq!(read_offset_checkpoint(&path).unwrap(), m);
        m.insert(("x".into(), 1), 5);
        write_offset_checkpoint(&path, &m).unwrap();
        assert_eq!(read_offset_checkpoint(&path).unwrap().len(), 4);
    }

    #[test]
    fn offset_checkpoint_refuses_unwritable_topic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp");
        let m = OffsetCheckpoint::from([(("a b".to_string(), 0), 1)]);
        assert!(write_offset_checkpoint(&path, &m).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn offset_checkpoint_lenient_cases_match_kafka() {
        let p = Path::new("cp");
        assert!(parse_offset_checkpoint(p, "").unwrap().is_empty());
        assert!(parse_offset_checkpoint(p, "0\n").unwrap().is_empty());
        assert!(parse_offset_checkpoint(p, "0\n0\n").unwrap().is_empty());
        // CRLF line ends, tabs and runs of spaces between fields, trailing spaces.
        let m = parse_offset_checkpoint(p, "0\r\n2\r\nt\t0  7 \r\nt 1 -1").unwrap();
        assert_eq!(m[&("t".to_string(), 0)], 7);
        assert_eq!(m[&("t".to_string(), 1)], -1);
        // Duplicates: the count counts lines, the map keeps the last.
        let m = parse_offset_checkpoint(p, "0\n2\nt 0 1\nt 0 2\n").unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[&("t".to_string(), 0)], 2);
    }

    #[test]
    fn offset_checkpoint_malformed_names_file_and_line() {
        let p = Path::new("/data/recovery-point-offset-checkpoint");
        let cases: &[(&str, &str)] = &[
            ("1\n0\n", "version 1"),
            ("x\n", "line 1"),
            ("0\nx\n", "line 2"),
            ("0\n1\nt 0\n", "line 3"),
            ("0\n2\nt 0 1\nt x 1\n", "line 4"),
            ("0\n1\nt 0 1.5\n", "line 3"),
            ("0\n1\n t 0 1\n", "line 3"),
            ("0\n1\n\n", "line 3"),
            ("0\n2\nt 0 1\n", "expected 2 entries"),
            ("0\n1\nt 0 1\nt 1 1\n", "expected 1 entries"),
            ("0\n-1\n", "expected -1 entries"),
            (" 0\n0\n", "line 1"),
        ];
        for (text, needle) in cases {
            let (path, reason) = layout_reason(parse_offset_checkpoint(p, text).unwrap_err());
            assert_eq!(path, p);
            assert!(reason.contains(needle), "{text:?}: {reason}");
        }
    }

    #[test]
    fn non_utf8_reads_as_damage_like_ascii_garbage() {
        let dir = tempfile::tempdir().unwrap();
        for name in [RECOVERY_POINT_OFFSET_CHECKPOINT, LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA] {
            let path = dir.path().join(name);
            for bytes in [&b"0\n1\nt 0 \xff\n"[..], b"garbage"] {
                fs::write(&path, bytes).unwrap();
                let err = match name {
                    RECOVERY_POINT_OFFSET_CHECKPOINT => read_offset_checkpoint(&path).unwrap_err(),
                    LEADER_EPOCH_CHECKPOINT => read_leader_epoch_checkpoint(&path).unwrap_err(),
                    _ => read_partition_metadata(&path).unwrap_err(),
                };
                let (p, reason) = layout_reason(err);
                assert_eq!(p, path);
                if bytes[0] == b'0' {
                    assert!(reason.contains("invalid UTF-8 at byte 8"), "{name}: {reason}");
                }
            }
        }
    }

    #[test]
    fn leader_epoch_checkpoint_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        assert!(read_leader_epoch_checkpoint(&path).unwrap().is_empty());
        let entries = vec![EpochEntry { epoch: 0, start_offset: 0 }, EpochEntry { epoch: 3, start_offset: 120 }];
        write_leader_epoch_checkpoint(&path, &entries).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n2\n0 0\n3 120\n");
        assert_eq!(read_leader_epoch_checkpoint(&path).unwrap(), entries);
        let (_, reason) = layout_reason(parse_leader_epoch_checkpoint(&path, "0\n1\n0 0 0\n").unwrap_err());
        assert!(reason.contains("line 3") && reason.contains("epoch start_offset"), "{reason}");
    }

    #[test]
    fn topic_id_base64() {
        let id: TopicId = "B3_HiNPgSQ6oxG9ZZ6ED5A".parse().unwrap();
        assert_eq!(id.to_string(), "B3_HiNPgSQ6oxG9ZZ6ED5A");
        assert_eq!(id.0[..4], [0x07, 0x7f, 0xc7, 0x88]);
        assert_eq!(TopicId::parse("B3_HiNPgSQ6oxG9ZZ6ED5A==").unwrap(), id, "padding accepted");
        assert_eq!(TopicId::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(TopicId::METADATA_TOPIC_ID.to_string(), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(TopicId::from_bits(0, 1), TopicId::METADATA_TOPIC_ID);
        let all = TopicId([0xff; 16]);
        assert_eq!(all.to_string(), "_____________________w");
        assert_eq!(TopicId::parse(&all.to_string()).unwrap(), all);
        let x = TopicId::from_bits(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        assert_eq!(x.most_significant_bits(), 0x0123_4567_89ab_cdef);
        assert_eq!(x.least_significant_bits(), 0xfedc_ba98_7654_3210);
        assert_eq!(TopicId::parse(&x.to_string()).unwrap(), x);
        for bad in [
            "",
            "B3_HiNPgSQ6oxG9ZZ6ED5",
            "B3_HiNPgSQ6oxG9ZZ6ED5AA",
            "B3+HiNPgSQ6oxG9ZZ6ED5A",
            "B3_HiNPgSQ6oxG9ZZ6ED5A=",
            "B3_HiNPgSQ6oxG9ZZ6ED5A===",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "é",
        ] {
            assert!(TopicId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn topic_id_parse_errors_say_why() {
        for (bad, reason) in [
            ("", "does not decode to 16 bytes"),
            ("B3_HiNPgSQ6oxG9ZZ6ED5AA", "does not decode to 16 bytes"),
            ("B3_HiNPgSQ6oxG9ZZ6ED5", "malformed base64 padding"),
            ("B3_HiNPgSQ6oxG9ZZ6ED5A=", "malformed base64 padding"),
            ("AAAAAAAAAAAAAAAAAAAA===", "malformed base64 padding"),
            ("B3_HiNPgSQ6oxG9ZZ6E=5A", "not URL-safe base64"),
            ("B3+HiNPgSQ6oxG9ZZ6ED5A", "not URL-safe base64"),
            ("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "too long to be a base64 Uuid"),
        ] {
            assert_eq!(TopicId::parse(bad).unwrap_err().reason, reason, "{bad:?}");
        }
        // Unused low bits of the last character are ignored, as Java's decoder does.
        assert_eq!(TopicId::parse("AAAAAAAAAAAAAAAAAAAAAR").unwrap(), TopicId::METADATA_TOPIC_ID);
        let e = TopicId::parse("B3+HiNPgSQ6oxG9ZZ6ED5A").unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "the base64 error is kept");
    }

    #[test]
    fn partition_metadata_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PARTITION_METADATA);
        assert_eq!(read_partition_metadata(&path).unwrap(), None);
        let id = TopicId::parse("B3_HiNPgSQ6oxG9ZZ6ED5A").unwrap();
        write_partition_metadata(&path, id).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "version: 0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A");
        assert_eq!(read_partition_metadata(&path).unwrap(), Some(id));
        // Trailing newline and extra spaces after the colon are accepted.
        assert_eq!(parse_partition_metadata(&path, "version:  0\ntopic_id:\tB3_HiNPgSQ6oxG9ZZ6ED5A\n").unwrap(), id);
        for (text, needle) in [
            ("version: 1\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A", "version"),
            ("version:0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A", "line 1"),
            ("version: 0\n", "line 2"),
            ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "all zeros"),
            ("version: 0\ntopic_id: nope", "line 2"),
            ("", "line 1"),
        ] {
            let (p, reason) = layout_reason(parse_partition_metadata(&path, text).unwrap_err());
            assert_eq!(p, path);
            assert!(reason.contains(needle), "{text:?}: {reason}");
        }
    }

    #[test]
    fn meta_properties_versions() {
        let p = Path::new("meta.properties");
        let zk = parse_meta_properties(
            p,
            "#\n#Sun Feb 27 16:00:38 ICT 2022\nbroker.id=0\nversion=0\ncluster.id=P4mWrUMKRvm3AylnZYNBaQ\n",
        )
        .unwrap();
        assert_eq!(zk.version, 0);
        assert_eq!(zk.node_id, Some(0));
        assert_eq!(zk.cluster_id.as_deref(), Some("P4mWrUMKRvm3AylnZYNBaQ"));
        assert_eq!(zk.directory_id, None);
        let kraft =
            parse_meta_properties(p, "node.id=1\ndirectory.id=XHhkr4tkSsD900pOQ8pPfg\nversion=1\ncluster.id=abc\n")
                .unwrap();
        assert_eq!(kraft.version, 1);
        assert_eq!(kraft.node_id, Some(1));
        assert_eq!(kraft.directory_id.unwrap().to_string(), "XHhkr4tkSsD900pOQ8pPfg");
        assert_eq!(kraft.properties.len(), 4);
        for (text, needle) in [
            ("broker.id=0\n", "no `version`"),
            ("version=2\n", "unknown"),
            ("version=1\ncluster.id=x\n", "node.id"),
            ("version=1\nnode.id=1\n", "cluster.id"),
            ("version=0\nbroker.id=x\n", "broker.id"),
            ("version=1\nnode.id=1\ncluster.id=x\ndirectory.id=!!\n", "directory.id"),
        ] {
            let (_, reason) = layout_reason(parse_meta_properties(p, text).unwrap_err());
            assert!(reason.contains(needle), "{text:?}: {reason}");
        }
        assert!(matches!(read_meta_properties(Path::new("/nonexistent/meta.properties")), Err(LogError::Io { .. })));
    }

    #[test]
    fn java_split_semantics() {
        assert_eq!(java_split_ws("a b"), vec!["a", "b"]);
        assert_eq!(java_split_ws(" a"), vec!["", "a"]);
        assert_eq!(java_split_ws("a  "), vec!["a"]);
        assert_eq!(java_split_ws(""), vec![""]);
        assert!(java_split_ws("   ").is_empty());
        assert_eq!(split_colon_ws("version: 0"), vec!["version", "0"]);
        assert_eq!(split_colon_ws("a:b"), vec!["a:b"]);
        assert_eq!(split_colon_ws("a: b: c"), vec!["a", "b", "c"]);
    }
}
