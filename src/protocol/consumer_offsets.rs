//! The key and value schemas Kafka's group coordinator writes to `__consumer_offsets` (Kafka's
//! `GroupMetadataManager` and the generated `OffsetCommitKey`, `OffsetCommitValue`,
//! `GroupMetadataKey`, `GroupMetadataValue` of `group-coordinator/src/main/resources/common/message`).
//! The members' subscription and assignment bytes embedded in group metadata are the consumer
//! protocol's ([`super::consumer_protocol`]) for groups of protocol type `consumer`.
//!
//! Every key and value starts with a big-endian `i16` version, followed by the fields of that
//! version in Kafka's protocol encoding (big-endian integers; `string` = `i16` length + UTF-8,
//! `bytes` = `i32` length, arrays = `i32` count, -1 = null). Versions marked flexible (v4 of both
//! values) use compact encodings instead (unsigned varint length + 1, 0 = null) and end every
//! struct with tagged fields (KIP-482).
//!
//! ```text
//! key   v0, v1  OffsetCommitKey      group: string, topic: string, partition: i32
//! key   v2      GroupMetadataKey     group: string
//! key   v3+     records of the KIP-848 coordinator (consumer/share/streams groups): Unknown here
//!
//! value of an offset commit: OffsetCommitValue v0..v4
//!   offset: i64
//!   leader_epoch: i32               v3+ (-1 = none)
//!   metadata: string
//!   commit_timestamp: i64 (ms)
//!   expire_timestamp: i64 (ms)      v1 only
//!
//! value of group metadata: GroupMetadataValue v0..v4
//!   protocol_type: string, generation: i32, protocol: string?, leader: string?,
//!   current_state_timestamp: i64    v2+
//!   members: [member_id, group_instance_id? (v3+), client_id, client_host,
//!             rebalance_timeout: i32 (v1+), session_timeout: i32,
//!             subscription: bytes, assignment: bytes]
//! ```
//!
//! A record with a null value is a tombstone: the offset or the group was deleted, and compaction
//! removes the key after `delete.retention.ms`.
//!
//! Which versions Kafka writes (`MetadataVersion.offsetCommitValueVersion` /
//! `groupMetadataValueVersion`): offset commits use key v1 and value v3, or value v1 when the
//! commit carries an explicit expire timestamp (OffsetCommit v1, or before IBP 2.1); group
//! metadata uses key v2 and value v3 since Kafka 2.3.
//!
//! The topic itself: [`OFFSETS_TOPIC`], Kafka's [`DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS`], and
//! [`partition_for`], the partition that holds a group's records (`Utils.abs(groupId.hashCode) %
//! offsets.topic.num.partitions`); a client learns the partition count from Metadata.
//!
//! ## Why in `protocol`
//!
//! Three parts of fetchbench read these records: the broker's group coordinator
//! (`broker::coordinator`) writes them and replays them at start-up, the admin client
//! (`client::admin`) reads a group's generation from them as Kafka's
//! `GroupMetadataMessageFormatter` does, and `log dump` prints them (Kafka's
//! `--offsets-decoder`, through the hook [`crate::log::dump::OffsetsDecoder`], filled with
//! [`dump_record`]). With the layering `log` <- `read_path` <- `protocol` <- `broker` and the
//! client on `protocol` and `log`, `protocol` is the one layer all three may use: the coordinator
//! alone would be out of the client's reach, and `log` must not know wire formats.
//!
//! Decoding is defensive: every length is checked against the bytes left before anything is
//! allocated, and no input makes it panic. As in Kafka's readers, bytes after the last field are
//! ignored (newer writers may append fields).

use std::fmt;

use super::consumer_protocol::{ConsumerAssignment, ConsumerSubscription, CONSUMER_PROTOCOL_TYPE};
use super::primitives::{read_version, DecodeError, EncodeError, Reader, TaggedField, Writer};

/// Key version of an offset commit written by Kafka before 0.10 (same fields as v1).
pub const OFFSET_COMMIT_KEY_V0: i16 = 0;
/// Key version of an offset commit.
pub const OFFSET_COMMIT_KEY_V1: i16 = 1;
/// Key version of group metadata.
pub const GROUP_METADATA_KEY_V2: i16 = 2;
/// Kafka's default `offsets.topic.num.partitions`.
pub const DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS: i32 = 50;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Java's `String.hashCode` over the UTF-16 code units of `s`: `s[0]*31^(n-1) + ... + s[n-1]`
/// with 32-bit wrapping arithmetic.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// The `__consumer_offsets` partition of `group_id`: `Utils.abs(groupId.hashCode()) %
/// offsets.topic.num.partitions`, where Kafka's `Utils.abs` maps `Integer.MIN_VALUE` to 0
/// (`"polygenelubricants"` hashes to `Integer.MIN_VALUE` and lands on partition 0).
///
/// `num_partitions` must be positive.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    let h = java_string_hash(group_id);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % num_partitions.max(1)
}

// ---------------------------------------------------------------------------------------------
// Keys.

/// The key of an offset commit: which group committed which partition (`OffsetCommitKey`, key
/// version 0 or 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OffsetCommitKey {
    /// The key version: 1 (Kafka 0.10+), or 0 (older, same fields).
    pub version: i16,
    /// The consumer group id.
    pub group: String,
    /// The topic name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
}

impl OffsetCommitKey {
    const SCHEMA: &'static str = "OffsetCommitKey";

    /// A key of the version Kafka writes (1).
    pub fn new(group: impl Into<String>, topic: impl Into<String>, partition: i32) -> Self {
        OffsetCommitKey { version: OFFSET_COMMIT_KEY_V1, group: group.into(), topic: topic.into(), partition }
    }

    /// Decodes a key whose version prefix is 0 or 1.
    ///
    /// Errors: [`DecodeError`] naming the field and byte position.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 0, 1, i16::MAX)?;
        Ok(OffsetCommitKey {
            version: r.version(),
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.i32("partition")?,
        })
    }

    /// Encodes the key, version prefix included.
    ///
    /// Errors: [`EncodeError`] for a version other than 0/1 or a string over 32767 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut w = Writer::new(Self::SCHEMA, self.version, false);
        if !(0..=1).contains(&self.version) {
            return Err(w.err("version", "offset commit keys have versions 0 and 1"));
        }
        w.string("group", &self.group)?;
        w.string("topic", &self.topic)?;
        w.i32(self.partition);
        Ok(w.finish())
    }
}

/// The key of a group's metadata record (`GroupMetadataKey`, key version 2).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupMetadataKey {
    /// The key version (2).
    pub version: i16,
    /// The group id.
    pub group: String,
}

impl GroupMetadataKey {
    const SCHEMA: &'static str = "GroupMetadataKey";

    /// A key of version 2.
    pub fn new(group: impl Into<String>) -> Self {
        GroupMetadataKey { version: GROUP_METADATA_KEY_V2, group: group.into() }
    }

    /// Decodes a key whose version prefix is 2.
    ///
    /// Errors: [`DecodeError`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 2, 2, i16::MAX)?;
        Ok(GroupMetadataKey { version: r.version(), group: r.string("group")? })
    }

    /// Encodes the key, version prefix included.
    ///
    /// Errors: [`EncodeError`] for a version other than 2 or a group id over 32767 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut w = Writer::new(Self::SCHEMA, self.version, false);
        if self.version != GROUP_METADATA_KEY_V2 {
            return Err(w.err("version", "group metadata keys have version 2"));
        }
        w.string("group", &self.group)?;
        Ok(w.finish())
    }
}

// ---------------------------------------------------------------------------------------------
// Values.

/// A committed offset (`OffsetCommitValue` v0..v4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCommitValue {
    /// Value version, 0..=4 (see the module docs for which Kafka writes).
    pub version: i16,
    /// The committed offset: the next offset the group will read.
    pub offset: i64,
    /// Leader epoch of the last consumed record (v3+; -1 = unknown, and in older versions).
    pub leader_epoch: i32,
    /// The client's metadata string (often empty).
    pub metadata: String,
    /// When the commit was made (ms since the epoch).
    pub commit_timestamp_ms: i64,
    /// When the offset expires (ms), only stored in v1; -1 otherwise.
    pub expire_timestamp_ms: i64,
    /// Tagged fields of v4 this decoder does not interpret.
    pub unknown_tagged_fields: Vec<TaggedField>,
}

impl OffsetCommitValue {
    const SCHEMA: &'static str = "OffsetCommitValue";
    /// Highest version known.
    pub const MAX_VERSION: i16 = 4;

    /// A value of the version Kafka writes: v1 when an expire timestamp is given, else v3
    /// (`MetadataVersion.offsetCommitValueVersion`).
    pub fn new(
        offset: i64,
        leader_epoch: Option<i32>,
        metadata: impl Into<String>,
        commit_timestamp_ms: i64,
        expire_timestamp_ms: Option<i64>,
    ) -> Self {
        OffsetCommitValue {
            version: if expire_timestamp_ms.is_some() { 1 } else { 3 },
            offset,
            leader_epoch: leader_epoch.unwrap_or(-1),
            metadata: metadata.into(),
            commit_timestamp_ms,
            expire_timestamp_ms: expire_timestamp_ms.unwrap_or(-1),
            unknown_tagged_fields: Vec::new(),
        }
    }

    /// The leader epoch, `None` when unknown (negative).
    pub fn leader_epoch(&self) -> Option<i32> {
        (self.leader_epoch >= 0).then_some(self.leader_epoch)
    }

    /// Decodes a value of version 0..=4.
    ///
    /// Errors: [`DecodeError`] naming the field and byte position.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 0, Self::MAX_VERSION, 4)?;
        let v = r.version();
        let offset = r.i64("offset")?;
        let leader_epoch = if v >= 3 { r.i32("leader_epoch")? } else { -1 };
        let metadata = r.string("metadata")?;
        let commit_timestamp_ms = r.i64("commit_timestamp")?;
        let expire_timestamp_ms = if v == 1 { r.i64("expire_timestamp")? } else { -1 };
        let unknown_tagged_fields = r.tagged_fields()?;
        Ok(OffsetCommitValue {
            version: v,
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
            expire_timestamp_ms,
            unknown_tagged_fields,
        })
    }

    /// Encodes the value at `self.version`, version prefix included. Fields the version does not
    /// have are left out (they are all "ignorable" in Kafka's schema).
    ///
    /// Errors: [`EncodeError`] for an unknown version, a metadata string over 32767 bytes
    /// in v0..v3, or tagged fields before v4.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let v = self.version;
        let mut w = Writer::new(Self::SCHEMA, v, v >= 4);
        if !(0..=Self::MAX_VERSION).contains(&v) {
            return Err(w.err("version", "known versions are 0..=4"));
        }
        w.i64(self.offset);
        if v >= 3 {
            w.i32(self.leader_epoch);
        }
        w.string("metadata", &self.metadata)?;
        w.i64(self.commit_timestamp_ms);
        if v == 1 {
            w.i64(self.expire_timestamp_ms);
        }
        w.tagged_fields(&self.unknown_tagged_fields)?;
        Ok(w.finish())
    }
}

/// One member of a classic group (`GroupMetadataValue.MemberMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberMetadata {
    /// Member id assigned by the coordinator (`<client id>-<uuid>`).
    pub member_id: String,
    /// Static membership id (`group.instance.id`, KIP-345), v3+.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address as the broker saw it (`/192.168.50.45`).
    pub client_host: String,
    /// Rebalance timeout (ms), v1+; for v0 the session timeout, as Kafka's
    /// `GroupMetadataManager.readGroupMessageValue` uses.
    pub rebalance_timeout_ms: i32,
    /// Session timeout (ms).
    pub session_timeout_ms: i32,
    /// The member's protocol metadata for the chosen protocol; for `consumer` groups a
    /// [`ConsumerSubscription`].
    pub subscription: Vec<u8>,
    /// The assignment the leader gave this member; for `consumer` groups a [`ConsumerAssignment`].
    pub assignment: Vec<u8>,
    /// Tagged fields of v4 this decoder does not interpret.
    pub unknown_tagged_fields: Vec<TaggedField>,
}

impl MemberMetadata {
    /// Decodes [`Self::subscription`] as the consumer protocol's subscription (meaningful when
    /// the group's protocol type is `consumer`).
    ///
    /// Errors: [`DecodeError`].
    pub fn consumer_subscription(&self) -> Result<ConsumerSubscription, DecodeError> {
        ConsumerSubscription::decode(&self.subscription)
    }
    /// Decodes [`Self::assignment`] as the consumer protocol's assignment.
    ///
    /// Errors: [`DecodeError`].
    pub fn consumer_assignment(&self) -> Result<ConsumerAssignment, DecodeError> {
        ConsumerAssignment::decode(&self.assignment)
    }
}

/// The state of a classic (JoinGroup/SyncGroup) group after a rebalance (`GroupMetadataValue` v0..v4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMetadataValue {
    /// Value version, 0..=4 (Kafka 2.3+ writes 3).
    pub version: i16,
    /// The protocol type (`consumer` for Kafka consumers, `connect` for Connect workers).
    pub protocol_type: String,
    /// The generation id.
    pub generation: i32,
    /// The chosen protocol (assignor name: `range`, `cooperative-sticky`, ...), `None` when empty.
    pub protocol: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// When the group entered its current state (ms), v2+; -1 otherwise.
    pub current_state_timestamp_ms: i64,
    /// The members.
    pub members: Vec<MemberMetadata>,
    /// Tagged fields of v4 this decoder does not interpret.
    pub unknown_tagged_fields: Vec<TaggedField>,
}

/// Smallest encoding of one member (v0: 3 empty strings, 1 i32, 2 empty byte arrays).
const MIN_MEMBER_SIZE: usize = 2 + 2 + 2 + 4 + 4 + 4;

impl GroupMetadataValue {
    const SCHEMA: &'static str = "GroupMetadataValue";
    /// Highest version known.
    pub const MAX_VERSION: i16 = 4;
    /// The version Kafka 2.3+ writes.
    pub const CURRENT_VERSION: i16 = 3;

    /// Decodes a value of version 0..=4.
    ///
    /// Errors: [`DecodeError`] naming the field and byte position.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 0, Self::MAX_VERSION, 4)?;
        let v = r.version();
        let protocol_type = r.string("protocol_type")?;
        let generation = r.i32("generation")?;
        let protocol = r.nullable_string("protocol")?;
        let leader = r.nullable_string("leader")?;
        let current_state_timestamp_ms = if v >= 2 { r.i64("current_state_timestamp")? } else { -1 };
        let min_member = if r.flexible() { 1 + 1 + 1 + 4 + 4 + 1 + 1 + 1 } else { MIN_MEMBER_SIZE };
        let n = r.array_len("members", min_member)?;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            let member_id = r.string("member_id")?;
            let group_instance_id = if v >= 3 { r.nullable_string("group_instance_id")? } else { None };
            let client_id = r.string("client_id")?;
            let client_host = r.string("client_host")?;
            let rebalance_timeout = if v >= 1 { Some(r.i32("rebalance_timeout")?) } else { None };
            let session_timeout_ms = r.i32("session_timeout")?;
            let subscription = r.bytes("subscription")?;
            let assignment = r.bytes("assignment")?;
            let unknown_tagged_fields = r.tagged_fields()?;
            members.push(MemberMetadata {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms: rebalance_timeout.unwrap_or(session_timeout_ms),
                session_timeout_ms,
                subscription,
                assignment,
                unknown_tagged_fields,
            });
        }
        let unknown_tagged_fields = r.tagged_fields()?;
        Ok(GroupMetadataValue {
            version: v,
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp_ms,
            members,
            unknown_tagged_fields,
        })
    }

    /// Encodes the value at `self.version`, version prefix included; fields the version does
    /// not have are left out.
    ///
    /// Errors: [`EncodeError`] for an unknown version, an over-long string, or tagged
    /// fields before v4.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let v = self.version;
        let mut w = Writer::new(Self::SCHEMA, v, v >= 4);
        if !(0..=Self::MAX_VERSION).contains(&v) {
            return Err(w.err("version", "known versions are 0..=4"));
        }
        w.string("protocol_type", &self.protocol_type)?;
        w.i32(self.generation);
        w.nullable_string("protocol", self.protocol.as_deref())?;
        w.nullable_string("leader", self.leader.as_deref())?;
        if v >= 2 {
            w.i64(self.current_state_timestamp_ms);
        }
        w.array_len("members", self.members.len())?;
        for m in &self.members {
            w.string("member_id", &m.member_id)?;
            if v >= 3 {
                w.nullable_string("group_instance_id", m.group_instance_id.as_deref())?;
            }
            w.string("client_id", &m.client_id)?;
            w.string("client_host", &m.client_host)?;
            if v >= 1 {
                w.i32(m.rebalance_timeout_ms);
            }
            w.i32(m.session_timeout_ms);
            w.nullable_bytes("subscription", Some(&m.subscription))?;
            w.nullable_bytes("assignment", Some(&m.assignment))?;
            w.tagged_fields(&m.unknown_tagged_fields)?;
        }
        w.tagged_fields(&self.unknown_tagged_fields)?;
        Ok(w.finish())
    }
}

// ---------------------------------------------------------------------------------------------
// Whole records.

/// One decoded `__consumer_offsets` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OffsetsRecord {
    /// An offset commit; `value` is `None` for a tombstone (offset deleted or expired).
    OffsetCommit {
        /// Group, topic, partition.
        key: OffsetCommitKey,
        /// The committed offset, or `None` for a tombstone.
        value: Option<OffsetCommitValue>,
    },
    /// Group metadata; `value` is `None` for a tombstone (group deleted).
    GroupMetadata {
        /// The group.
        key: GroupMetadataKey,
        /// The group state, or `None` for a tombstone.
        value: Option<GroupMetadataValue>,
    },
    /// A key version this decoder does not know (3+: records of the KIP-848 group coordinator
    /// for consumer, share and streams groups). Kept raw, not an error, as Kafka's
    /// `GroupMetadataManager.readMessageKey` returns `UnknownKey`.
    Unknown {
        /// The key's version prefix (the record type in Kafka 3.7+).
        key_version: i16,
        /// The whole key.
        key: Vec<u8>,
        /// The whole value, `None` for a tombstone.
        value: Option<Vec<u8>>,
    },
}

/// Decodes one `__consumer_offsets` record from its key and value (`None` = null).
///
/// Errors: [`DecodeError::MissingKey`] for a null key, and the decoding errors of the key
/// and value schemas. A key version other than 0, 1, 2 is not an error: it gives
/// [`OffsetsRecord::Unknown`].
pub fn decode_record(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<OffsetsRecord, DecodeError> {
    let key = key.ok_or(DecodeError::MissingKey)?;
    match read_version("__consumer_offsets key", key)? {
        OFFSET_COMMIT_KEY_V0 | OFFSET_COMMIT_KEY_V1 => Ok(OffsetsRecord::OffsetCommit {
            key: OffsetCommitKey::decode(key)?,
            value: value.map(OffsetCommitValue::decode).transpose()?,
        }),
        GROUP_METADATA_KEY_V2 => Ok(OffsetsRecord::GroupMetadata {
            key: GroupMetadataKey::decode(key)?,
            value: value.map(GroupMetadataValue::decode).transpose()?,
        }),
        key_version => Ok(OffsetsRecord::Unknown { key_version, key: key.to_vec(), value: value.map(<[u8]>::to_vec) }),
    }
}

/// [`decode_record`] as `log dump --print-records` shows it: the [`OffsetsRecord`]'s `Display`
/// (`key: ... payload: ...`), for [`crate::log::dump::DumpOptions::offsets_decoder`].
///
/// Errors: those of [`decode_record`].
pub fn dump_record(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    Ok(decode_record(key, value)?.to_string())
}

impl OffsetsRecord {
    /// The group id, when the key type is known.
    pub fn group(&self) -> Option<&str> {
        match self {
            OffsetsRecord::OffsetCommit { key, .. } => Some(&key.group),
            OffsetsRecord::GroupMetadata { key, .. } => Some(&key.group),
            OffsetsRecord::Unknown { .. } => None,
        }
    }

    /// Whether the value is null.
    pub fn is_tombstone(&self) -> bool {
        match self {
            OffsetsRecord::OffsetCommit { value, .. } => value.is_none(),
            OffsetsRecord::GroupMetadata { value, .. } => value.is_none(),
            OffsetsRecord::Unknown { value, .. } => value.is_none(),
        }
    }

    /// The key as `kafka-dump-log.sh --offsets-decoder` prints it (Kafka 2.x-3.x
    /// `GroupMetadataManager.formatRecordKeyAndValue`): `offset_commit::group=G,partition=T-P`,
    /// `group_metadata::group=G` or `unknown::version=V`.
    pub fn key_string(&self) -> String {
        match self {
            OffsetsRecord::OffsetCommit { key, .. } => {
                format!("offset_commit::group={},partition={}-{}", key.group, key.topic, key.partition)
            }
            OffsetsRecord::GroupMetadata { key, .. } => format!("group_metadata::group={}", key.group),
            OffsetsRecord::Unknown { key_version, .. } => format!("unknown::version={key_version}"),
        }
    }

    /// The value as `kafka-dump-log.sh --offsets-decoder` prints it: `<DELETE>` for tombstones,
    /// `offset=N` or `offset=N,metadata=M` for commits, and for group metadata a JSON object
    /// `{"protocolType":..,"protocol":..,"generationId":..,"assignment":"{member=[t-0, t-1]}"}`
    /// (the assignment of `consumer` groups decoded, others in hex). `None` for unknown keys.
    pub fn payload_string(&self) -> Option<String> {
        Some(match self {
            OffsetsRecord::OffsetCommit { value: None, .. } | OffsetsRecord::GroupMetadata { value: None, .. } => {
                "<DELETE>".to_string()
            }
            OffsetsRecord::OffsetCommit { value: Some(v), .. } => {
                if v.metadata.is_empty() {
                    format!("offset={}", v.offset)
                } else {
                    format!("offset={},metadata={}", v.offset, v.metadata)
                }
            }
            OffsetsRecord::GroupMetadata { value: Some(g), .. } => group_json(g),
            OffsetsRecord::Unknown { .. } => return None,
        })
    }
}

impl fmt::Display for OffsetsRecord {
    /// `key: <key_string> payload: <payload_string>`, the tail of a `kafka-dump-log.sh
    /// --offsets-decoder --print-data-log` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key: {}", self.key_string())?;
        if let Some(p) = self.payload_string() {
            write!(f, " payload: {p}")?;
        }
        Ok(())
    }
}

/// Kafka's `"%X".format(BigInt(1, bytes))`: upper-case hex without leading zeros ("" for empty).
fn kafka_hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return String::new();
    }
    let s: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    let t = s.trim_start_matches('0');
    if t.is_empty() {
        "0".to_string()
    } else {
        t.to_string()
    }
}

/// A JSON string literal as Jackson writes it.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn group_json(g: &GroupMetadataValue) -> String {
    let members: Vec<String> = g
        .members
        .iter()
        .map(|m| {
            if g.protocol_type == CONSUMER_PROTOCOL_TYPE {
                if let Ok(a) = m.consumer_assignment() {
                    let parts: Vec<String> = a.partitions().iter().map(|(t, p)| format!("{t}-{p}")).collect();
                    let user_data = a.user_data.as_deref().map(kafka_hex).unwrap_or_default();
                    let mut s = format!("{}=[{}]", m.member_id, parts.join(", "));
                    if !user_data.is_empty() {
                        s.push(':');
                        s.push_str(&user_data);
                    }
                    return s;
                }
            }
            format!("{}={}", m.member_id, kafka_hex(&m.assignment))
        })
        .collect();
    format!(
        "{{\"protocolType\":{},\"protocol\":{},\"generationId\":{},\"assignment\":{}}}",
        json_string(&g.protocol_type),
        g.protocol.as_deref().map(json_string).unwrap_or_else(|| "null".to_string()),
        g.generation,
        json_string(&format!("{{{}}}", members.join(",")))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::consumer_protocol::TopicPartitions;
    use proptest::prelude::*;

    /// Key and value of the record at offset 8 of the corpus file
    /// `Niloufar1171-LDI-POC/__consumer_offsets-6/00000000000000000000.log`: group DEVSmileCDR
    /// committed offset 0 of TestTopicPatient-0 (key v1, value v3, Kafka 3.x).
    fn real_commit() -> (Vec<u8>, Vec<u8>) {
        let mut key = vec![0x00, 0x01, 0x00, 0x0b];
        key.extend_from_slice(b"DEVSmileCDR");
        key.extend_from_slice(&[0x00, 0x10]);
        key.extend_from_slice(b"TestTopicPatient");
        key.extend_from_slice(&[0x00, 0x00, 0x00, 0x00]);
        let value = vec![
            0x00, 0x03, // version
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // offset
            0xff, 0xff, 0xff, 0xff, // leader epoch
            0x00, 0x00, // metadata ""
            0x00, 0x00, 0x01, 0x9c, 0x0f, 0xda, 0xb7, 0xdf, // commit timestamp
        ];
        (key, value)
    }

    /// The value at offset 1 of `KAIPASUBHASH-kafka-logs/__consumer_offsets-2/00000000000000000000.log`
    /// (Kafka 2.x, 2021): value v1 with an expire timestamp.
    const REAL_V1_VALUE: [u8; 28] = [
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x7d, 0xbd, 0x99,
        0x20, 0xb4, 0x00, 0x00, 0x01, 0x7d, 0xe1, 0xa5, 0xa4, 0xb4,
    ];

    fn sample_group(version: i16) -> GroupMetadataValue {
        let sub = ConsumerSubscription {
            version: 1,
            topics: vec!["cities".into()],
            user_data: None,
            owned_partitions: vec![],
            generation_id: -1,
            rack_id: None,
        };
        let asg = ConsumerAssignment {
            version: 1,
            assigned_partitions: vec![TopicPartitions { topic: "cities".into(), partitions: vec![0, 1] }],
            user_data: None,
        };
        GroupMetadataValue {
            version,
            protocol_type: "consumer".into(),
            generation: 1,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            current_state_timestamp_ms: if version >= 2 { 1_645_952_438_526 } else { -1 },
            members: vec![MemberMetadata {
                member_id: "m-1".into(),
                group_instance_id: if version >= 3 { Some("static-1".into()) } else { None },
                client_id: "console-consumer".into(),
                client_host: "/192.168.50.45".into(),
                rebalance_timeout_ms: if version >= 1 { 300_000 } else { 45_000 },
                session_timeout_ms: 45_000,
                subscription: sub.encode().unwrap(),
                assignment: asg.encode().unwrap(),
                unknown_tagged_fields: vec![],
            }],
            unknown_tagged_fields: vec![],
        }
    }

    #[test]
    fn decodes_real_offset_commit_and_reencodes_exactly() {
        let (key, value) = real_commit();
        let rec = decode_record(Some(&key), Some(&value)).unwrap();
        let OffsetsRecord::OffsetCommit { key: k, value: Some(v) } = &rec else { panic!("{rec:?}") };
        assert_eq!(k, &OffsetCommitKey::new("DEVSmileCDR", "TestTopicPatient", 0));
        assert_eq!(v.version, 3);
        assert_eq!(v.offset, 0);
        assert_eq!(v.leader_epoch(), None);
        assert_eq!(v.metadata, "");
        assert_eq!(v.commit_timestamp_ms, 1_769_792_518_111);
        assert_eq!(v.expire_timestamp_ms, -1);
        assert_eq!(k.encode().unwrap(), key);
        assert_eq!(v.encode().unwrap(), value);
        assert_eq!(v, &OffsetCommitValue::new(0, None, "", 1_769_792_518_111, None));
        assert_eq!(rec.group(), Some("DEVSmileCDR"));
        assert!(!rec.is_tombstone());
        assert_eq!(
            rec.to_string(),
            "key: offset_commit::group=DEVSmileCDR,partition=TestTopicPatient-0 payload: offset=0"
        );
        let tomb = decode_record(Some(&key), None).unwrap();
        assert_eq!(
            tomb.to_string(),
            "key: offset_commit::group=DEVSmileCDR,partition=TestTopicPatient-0 payload: <DELETE>"
        );

        let v1 = OffsetCommitValue::decode(&REAL_V1_VALUE).unwrap();
        assert_eq!(v1, OffsetCommitValue::new(0, None, "", 1_639_563_468_980, Some(1_640_168_268_980)));
        assert_eq!(v1.encode().unwrap(), REAL_V1_VALUE);
        let mut with_meta = v1.clone();
        with_meta.metadata = "m".into();
        let rec = OffsetsRecord::OffsetCommit { key: OffsetCommitKey::new("g", "t", 3), value: Some(with_meta) };
        assert_eq!(rec.payload_string().unwrap(), "offset=0,metadata=m");
    }

    #[test]
    fn offset_commit_value_versions_round_trip() {
        for version in 0..=4 {
            let mut v = OffsetCommitValue::new(42, Some(7), "meta", 1000, Some(2000));
            v.version = version;
            if version != 3 && version != 4 {
                v.leader_epoch = -1;
            }
            if version != 1 {
                v.expire_timestamp_ms = -1;
            }
            if version == 4 {
                v.unknown_tagged_fields = vec![TaggedField { tag: 0, data: vec![1, 2, 3] }];
            }
            let bytes = v.encode().unwrap();
            assert_eq!(i16::from_be_bytes([bytes[0], bytes[1]]), version);
            assert_eq!(OffsetCommitValue::decode(&bytes).unwrap(), v, "v{version}");
        }
        // Exact v1 layout: offset, metadata, commit ts, expire ts.
        let v1 = OffsetCommitValue::new(5, None, "m", 10, Some(20)).encode().unwrap();
        let mut expected = vec![0, 1];
        expected.extend_from_slice(&5i64.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'm']);
        expected.extend_from_slice(&10i64.to_be_bytes());
        expected.extend_from_slice(&20i64.to_be_bytes());
        assert_eq!(v1, expected);
        // Exact v4 layout: compact string and an empty tagged-field section.
        let mut v4 = OffsetCommitValue::new(5, Some(2), "m", 10, None);
        v4.version = 4;
        let mut expected = vec![0, 4];
        expected.extend_from_slice(&5i64.to_be_bytes());
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&[2, b'm']);
        expected.extend_from_slice(&10i64.to_be_bytes());
        expected.push(0);
        assert_eq!(v4.encode().unwrap(), expected);
    }

    #[test]
    fn group_metadata_versions_round_trip() {
        for version in 0..=4 {
            let g = sample_group(version);
            let bytes = g.encode().unwrap();
            let back = GroupMetadataValue::decode(&bytes).unwrap();
            assert_eq!(back, g, "v{version}");
            assert_eq!(back.encode().unwrap(), bytes);
            let sub = back.members[0].consumer_subscription().unwrap();
            assert_eq!(sub.topics, vec!["cities".to_string()]);
            let asg = back.members[0].consumer_assignment().unwrap();
            assert_eq!(asg.partitions(), vec![("cities", 0), ("cities", 1)]);
        }
        let key = GroupMetadataKey::new("g");
        assert_eq!(key.encode().unwrap(), vec![0, 2, 0, 1, b'g']);
        assert_eq!(GroupMetadataKey::decode(&key.encode().unwrap()).unwrap(), key);
    }

    #[test]
    fn group_metadata_display_matches_dump_log() {
        let g = sample_group(3);
        let rec = OffsetsRecord::GroupMetadata { key: GroupMetadataKey::new("grp"), value: Some(g) };
        assert_eq!(
            rec.to_string(),
            "key: group_metadata::group=grp payload: {\"protocolType\":\"consumer\",\"protocol\":\"range\",\
             \"generationId\":1,\"assignment\":\"{m-1=[cities-0, cities-1]}\"}"
        );
        let mut g = sample_group(3);
        g.protocol_type = "connect".into();
        g.protocol = None;
        g.members[0].assignment = vec![0x00, 0x0a, 0xff];
        let rec = OffsetsRecord::GroupMetadata { key: GroupMetadataKey::new("c"), value: Some(g) };
        assert_eq!(
            rec.payload_string().unwrap(),
            "{\"protocolType\":\"connect\",\"protocol\":null,\"generationId\":1,\"assignment\":\"{m-1=AFF}\"}"
        );
        let tomb = decode_record(Some(&GroupMetadataKey::new("g").encode().unwrap()), None).unwrap();
        assert!(tomb.is_tombstone());
        assert_eq!(tomb.to_string(), "key: group_metadata::group=g payload: <DELETE>");
        assert_eq!(kafka_hex(&[0, 0]), "0");
        assert_eq!(json_string("a\"b\\\u{1}"), "\"a\\\"b\\\\\\u0001\"");
    }

    #[test]
    fn unknown_key_versions_are_kept() {
        let rec = decode_record(Some(&[0, 3, 1, 2]), Some(&[9])).unwrap();
        assert_eq!(rec, OffsetsRecord::Unknown { key_version: 3, key: vec![0, 3, 1, 2], value: Some(vec![9]) });
        assert_eq!(rec.to_string(), "key: unknown::version=3");
        assert_eq!(rec.group(), None);
        let rec = decode_record(Some(&[0xff, 0xff]), None).unwrap();
        assert!(matches!(rec, OffsetsRecord::Unknown { key_version: -1, .. }));
    }

    #[test]
    fn errors_carry_context() {
        assert!(matches!(decode_record(None, None), Err(DecodeError::MissingKey)));
        assert!(matches!(decode_record(Some(&[0]), None), Err(DecodeError::MissingVersion { available: 1, .. })));
        // Key v1 whose group length says 10 bytes but only 3 follow.
        let e = decode_record(Some(&[0, 1, 0, 10, b'a', b'b', b'c']), None).unwrap_err();
        match e {
            DecodeError::Truncated { schema, version, field, position, needed, available } => {
                assert_eq!(
                    (schema, version, field, position, needed, available),
                    ("OffsetCommitKey", 1, "group", 4, 10, 3)
                );
            }
            other => panic!("{other:?}"),
        }
        // Value of an unknown version.
        let (key, _) = real_commit();
        let e = decode_record(Some(&key), Some(&[0, 9])).unwrap_err();
        assert!(matches!(e, DecodeError::UnsupportedVersion { schema: "OffsetCommitValue", version: 9, .. }));
        assert!(e.to_string().contains("unsupported version 9"), "{e}");
        // Null for a non-nullable string.
        let e = OffsetCommitKey::decode(&[0, 1, 0xff, 0xff]).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid { field: "group", position: 2, .. }), "{e:?}");
        // Invalid UTF-8 keeps the source error.
        let e = OffsetCommitKey::decode(&[0, 1, 0, 1, 0xff]).unwrap_err();
        assert!(matches!(e, DecodeError::InvalidUtf8 { field: "group", position: 4, .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
        // A member count the bytes cannot hold is refused before allocating.
        let mut g = vec![0, 3, 0, 0];
        g.extend_from_slice(&1i32.to_be_bytes());
        g.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        g.extend_from_slice(&0i64.to_be_bytes());
        g.extend_from_slice(&i32::MAX.to_be_bytes());
        let e = GroupMetadataValue::decode(&g).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid { field: "members", position: 20, .. }), "{e:?}");
        // Over-long varint in a flexible value.
        let mut v4 = vec![0, 4];
        v4.extend_from_slice(&0i64.to_be_bytes());
        v4.extend_from_slice(&0i32.to_be_bytes());
        v4.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        let e = OffsetCommitValue::decode(&v4).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid { field: "metadata", position: 14, .. }), "{e:?}");
    }

    #[test]
    fn encode_errors() {
        let mut v = OffsetCommitValue::new(1, None, "x".repeat(40_000), 0, None);
        let e = v.encode().unwrap_err();
        assert_eq!((e.field, e.version), ("metadata", 3));
        v.version = 4;
        assert!(v.encode().is_ok(), "compact strings have no 32767 limit");
        v.version = 5;
        assert!(v.encode().is_err());
        let mut v = OffsetCommitValue::new(1, None, "", 0, None);
        v.unknown_tagged_fields.push(TaggedField { tag: 1, data: vec![] });
        assert_eq!(v.encode().unwrap_err().field, "tagged fields");
        let mut k = OffsetCommitKey::new("g", "t", 0);
        k.version = 2;
        assert!(k.encode().is_err());
        k.version = 0;
        assert_eq!(OffsetCommitKey::decode(&k.encode().unwrap()).unwrap(), k);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(key in proptest::collection::vec(any::<u8>(), 0..64),
                                           value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..256))) {
            let _ = decode_record(Some(&key), value.as_deref());
            if let Some(v) = &value {
                let _ = OffsetCommitValue::decode(v);
                let _ = GroupMetadataValue::decode(v);
                let _ = ConsumerSubscription::decode(v);
                let _ = ConsumerAssignment::decode(v);
            }
        }

        #[test]
        fn never_panics_on_mutated_valid_values(version in 0i16..=4, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
                                                cut in any::<usize>()) {
            let mut bytes = sample_group(version).encode().unwrap();
            for (at, b) in flips {
                let n = bytes.len();
                bytes[at % n] ^= b;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            if let Ok(g) = GroupMetadataValue::decode(&bytes) {
                for m in &g.members {
                    let _ = m.consumer_subscription();
                    let _ = m.consumer_assignment();
                }
                let _ = OffsetsRecord::GroupMetadata { key: GroupMetadataKey::new("g"), value: Some(g) }.to_string();
            }
        }

        #[test]
        fn offset_commit_round_trips(group in "\\PC{0,20}", topic in "[a-zA-Z0-9._-]{1,30}", partition in any::<i32>(),
                                     offset in any::<i64>(), epoch in any::<i32>(), metadata in "\\PC{0,40}",
                                     commit in any::<i64>(), expire in any::<i64>(), version in 0i16..=4) {
            let key = OffsetCommitKey::new(group, topic, partition);
            let value = OffsetCommitValue {
                version,
                offset,
                leader_epoch: if version >= 3 { epoch } else { -1 },
                metadata,
                commit_timestamp_ms: commit,
                expire_timestamp_ms: if version == 1 { expire } else { -1 },
                unknown_tagged_fields: vec![],
            };
            let (kb, vb) = (key.encode().unwrap(), value.encode().unwrap());
            let rec = decode_record(Some(&kb), Some(&vb)).unwrap();
            prop_assert_eq!(rec, OffsetsRecord::OffsetCommit { key, value: Some(value) });
        }
    }

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // A character outside the BMP is two UTF-16 code units (surrogates), as in Java.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn partition_for_follows_kafka_utils_abs() {
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        // A negative hash: abs then modulo.
        let h = java_string_hash("console-consumer-12345");
        assert_eq!(partition_for("console-consumer-12345", 50), if h == i32::MIN { 0 } else { h.abs() % 50 });
        for g in ["", "g", "my-group", "\u{e9}t\u{e9}"] {
            assert!((0..50).contains(&partition_for(g, 50)));
        }
    }
}
