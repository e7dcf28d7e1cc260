//! Topic and broker log configuration with Kafka's names, defaults and validation
//! (Kafka's `LogConfig`, `TopicConfig`, `ServerLogConfigs` and `ServerTopicConfigSynonyms`).
//!
//! Every topic config has a broker-level synonym that supplies its default (the "Server Default
//! Property" column of Kafka's topic config docs). Some topic configs have several broker synonyms;
//! the first one that is set wins, exactly as in `ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS`:
//!
//! | topic config | broker synonyms, in precedence order |
//! |---|---|
//! | `segment.bytes` | `log.segment.bytes` |
//! | `segment.ms` | `log.roll.ms`, `log.roll.hours` |
//! | `segment.jitter.ms` | `log.roll.jitter.ms`, `log.roll.jitter.hours` |
//! | `segment.index.bytes` | `log.index.size.max.bytes` |
//! | `index.interval.bytes` | `log.index.interval.bytes` |
//! | `retention.bytes` | `log.retention.bytes` |
//! | `retention.ms` | `log.retention.ms`, `log.retention.minutes`, `log.retention.hours` |
//! | `cleanup.policy` | `log.cleanup.policy` |
//! | `delete.retention.ms` | `log.cleaner.delete.retention.ms` |
//! | `min.compaction.lag.ms` | `log.cleaner.min.compaction.lag.ms` |
//! | `max.compaction.lag.ms` | `log.cleaner.max.compaction.lag.ms` |
//! | `min.cleanable.dirty.ratio` | `log.cleaner.min.cleanable.ratio` |
//! | `flush.messages` | `log.flush.interval.messages` |
//! | `flush.ms` | `log.flush.interval.ms`, `log.flush.scheduler.interval.ms` |
//! | `file.delete.delay.ms` | `log.segment.delete.delay.ms` |
//! | `max.message.bytes` | `message.max.bytes` |
//! | `message.timestamp.type` | `log.message.timestamp.type` |
//! | `compression.type` | `compression.type` |
//! | `preallocate` | `log.preallocate` |
//!
//! Note the one trap in Kafka's naming: the topic config is `max.message.bytes`, its broker
//! synonym `message.max.bytes`.
//!
//! Validation follows the `ConfigDef` ranges of Kafka 3.x's `LogConfig` (the brokers that wrote
//! the corpus): `segment.bytes >= 14` (`LegacyRecord.RECORD_OVERHEAD_V0`; Kafka 4.0 raised the
//! floor to 1 MiB and added `internal.segment.bytes` for tests), `segment.index.bytes >= 4`,
//! `flush.messages >= 1`, `retention.ms >= -1`, `min.cleanable.dirty.ratio` in `[0, 1]`, and
//! `min.compaction.lag.ms <= max.compaction.lag.ms` (`LogConfig.validateValues`).
//!
//! Also here: a parser for Java `.properties` files ([`parse_properties`]), the format of
//! `server.properties` and `meta.properties`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::batch::Compression;
use super::error::LogError;

/// `segment.bytes`: the size at which a segment rolls.
pub const SEGMENT_BYTES: &str = "segment.bytes";
/// `segment.ms`: the age at which a segment rolls even if not full.
pub const SEGMENT_MS: &str = "segment.ms";
/// `segment.jitter.ms`: random jitter subtracted from `segment.ms`.
pub const SEGMENT_JITTER_MS: &str = "segment.jitter.ms";
/// `segment.index.bytes`: size the offset and time indexes are preallocated to.
pub const SEGMENT_INDEX_BYTES: &str = "segment.index.bytes";
/// `index.interval.bytes`: bytes appended between two offset index entries.
pub const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
/// `retention.bytes`: size limit of a partition's log (-1 = none).
pub const RETENTION_BYTES: &str = "retention.bytes";
/// `retention.ms`: age limit of a segment (-1 = none).
pub const RETENTION_MS: &str = "retention.ms";
/// `cleanup.policy`: `delete`, `compact`, or both.
pub const CLEANUP_POLICY: &str = "cleanup.policy";
/// `delete.retention.ms`: how long tombstones survive compaction.
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
/// `min.compaction.lag.ms`: minimum age before a record may be compacted.
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
/// `max.compaction.lag.ms`: maximum age before a record must be eligible for compaction.
pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
/// `min.cleanable.dirty.ratio`: dirty/total ratio above which the cleaner compacts a log.
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
/// `flush.messages`: fsync after this many messages.
pub const FLUSH_MESSAGES: &str = "flush.messages";
/// `flush.ms`: fsync after this much time.
pub const FLUSH_MS: &str = "flush.ms";
/// `file.delete.delay.ms`: delay between renaming a segment `.deleted` and removing it.
pub const FILE_DELETE_DELAY_MS: &str = "file.delete.delay.ms";
/// `max.message.bytes`: largest record batch accepted (topic name; the broker's is `message.max.bytes`).
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
/// `message.timestamp.type`: `CreateTime` or `LogAppendTime`.
pub const MESSAGE_TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// `compression.type`: the topic's final codec, or `producer`.
pub const COMPRESSION_TYPE: &str = "compression.type";
/// `preallocate`: preallocate a new segment file to `segment.bytes`.
pub const PREALLOCATE: &str = "preallocate";

/// Every topic-level log config this crate knows, in Kafka's documentation order.
pub const TOPIC_CONFIG_KEYS: &[&str] = &[
    SEGMENT_BYTES,
    SEGMENT_MS,
    SEGMENT_JITTER_MS,
    SEGMENT_INDEX_BYTES,
    FLUSH_MESSAGES,
    FLUSH_MS,
    RETENTION_BYTES,
    RETENTION_MS,
    MAX_MESSAGE_BYTES,
    INDEX_INTERVAL_BYTES,
    DELETE_RETENTION_MS,
    MIN_COMPACTION_LAG_MS,
    MAX_COMPACTION_LAG_MS,
    FILE_DELETE_DELAY_MS,
    MIN_CLEANABLE_DIRTY_RATIO,
    CLEANUP_POLICY,
    COMPRESSION_TYPE,
    PREALLOCATE,
    MESSAGE_TIMESTAMP_TYPE,
];

/// How a broker synonym's value converts to the topic config's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// Same type and unit as the topic config.
    Same,
    /// An `int` of minutes, converted to milliseconds (`ConfigSynonym.MINUTES_TO_MILLISECONDS`).
    MinutesToMs,
    /// An `int` of hours, converted to milliseconds (`ConfigSynonym.HOURS_TO_MILLISECONDS`).
    HoursToMs,
}

/// Kafka's `ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS`, restricted to the configs here:
/// topic name -> broker synonyms in precedence order.
const SYNONYMS: &[(&str, &[(&str, Unit)])] = &[
    (SEGMENT_BYTES, &[("log.segment.bytes", Unit::Same)]),
    (SEGMENT_MS, &[("log.roll.ms", Unit::Same), ("log.roll.hours", Unit::HoursToMs)]),
    (SEGMENT_JITTER_MS, &[("log.roll.jitter.ms", Unit::Same), ("log.roll.jitter.hours", Unit::HoursToMs)]),
    (SEGMENT_INDEX_BYTES, &[("log.index.size.max.bytes", Unit::Same)]),
    (FLUSH_MESSAGES, &[("log.flush.interval.messages", Unit::Same)]),
    (FLUSH_MS, &[("log.flush.interval.ms", Unit::Same), ("log.flush.scheduler.interval.ms", Unit::Same)]),
    (RETENTION_BYTES, &[("log.retention.bytes", Unit::Same)]),
    (
        RETENTION_MS,
        &[
            ("log.retention.ms", Unit::Same),
            ("log.retention.minutes", Unit::MinutesToMs),
            ("log.retention.hours", Unit::HoursToMs),
        ],
    ),
    (MAX_MESSAGE_BYTES, &[("message.max.bytes", Unit::Same)]),
    (INDEX_INTERVAL_BYTES, &[("log.index.interval.bytes", Unit::Same)]),
    (DELETE_RETENTION_MS, &[("log.cleaner.delete.retention.ms", Unit::Same)]),
    (MIN_COMPACTION_LAG_MS, &[("log.cleaner.min.compaction.lag.ms", Unit::Same)]),
    (MAX_COMPACTION_LAG_MS, &[("log.cleaner.max.compaction.lag.ms", Unit::Same)]),
    (FILE_DELETE_DELAY_MS, &[("log.segment.delete.delay.ms", Unit::Same)]),
    (MIN_CLEANABLE_DIRTY_RATIO, &[("log.cleaner.min.cleanable.ratio", Unit::Same)]),
    (CLEANUP_POLICY, &[("log.cleanup.policy", Unit::Same)]),
    (COMPRESSION_TYPE, &[("compression.type", Unit::Same)]),
    (PREALLOCATE, &[("log.preallocate", Unit::Same)]),
    (MESSAGE_TIMESTAMP_TYPE, &[("log.message.timestamp.type", Unit::Same)]),
];

/// `LegacyRecord.RECORD_OVERHEAD_V0`: the smallest message; Kafka 3.x's floor for `segment.bytes`.
pub const MIN_SEGMENT_BYTES: i32 = 14;

/// The canonical topic config name for `key`, which may be a topic name or a broker synonym.
fn lookup(key: &str) -> Option<(&'static str, Unit, bool)> {
    for (topic, _) in SYNONYMS {
        if *topic == key {
            return Some((topic, Unit::Same, false));
        }
    }
    for (topic, brokers) in SYNONYMS {
        for (name, unit) in *brokers {
            if *name == key {
                return Some((topic, *unit, true));
            }
        }
    }
    None
}

/// Whether `key` is a log config at either level: a topic config name (`retention.ms`) or one of
/// its broker synonyms (`log.retention.hours`). A broker's `server.properties` holds many other
/// keys (`listeners`, `num.io.threads`, ...); callers skip those with this test, while
/// [`LogConfig::set`] refuses them.
pub fn is_log_config_key(key: &str) -> bool {
    lookup(key).is_some()
}

/// Whether `key` is a topic-level config name (the names `CreateTopics`/`AlterConfigs` accept).
pub fn is_topic_config_key(key: &str) -> bool {
    TOPIC_CONFIG_KEYS.contains(&key)
}

/// Broker synonyms of a topic config, in precedence order (empty for unknown keys).
pub fn broker_synonyms(topic_key: &str) -> Vec<&'static str> {
    SYNONYMS.iter().find(|(t, _)| *t == topic_key).map(|(_, b)| b.iter().map(|(n, _)| *n).collect()).unwrap_or_default()
}

/// `cleanup.policy`: a list of `delete` and/or `compact` (Kafka's `ValidList.in(compact, delete)`).
/// An empty list is valid: neither deletion nor compaction (segments are kept forever).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CleanupPolicy {
    /// `delete`: segments past `retention.ms` / `retention.bytes` are deleted.
    pub delete: bool,
    /// `compact`: the cleaner keeps only the last record of each key.
    pub compact: bool,
}

impl CleanupPolicy {
    /// `delete` only (Kafka's default).
    pub const DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: false };
    /// `compact` only (`__consumer_offsets` uses this).
    pub const COMPACT: CleanupPolicy = CleanupPolicy { delete: false, compact: true };
    /// `compact,delete`.
    pub const COMPACT_DELETE: CleanupPolicy = CleanupPolicy { delete: true, compact: true };

    /// Parses Kafka's list syntax: comma-separated, whitespace around items ignored, values
    /// case-sensitive (`ConfigDef.Type.LIST` + `ValidList`). Returns the offending item on error.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut p = CleanupPolicy { delete: false, compact: false };
        let s = s.trim();
        if s.is_empty() {
            return Ok(p);
        }
        for item in s.split(',').map(str::trim) {
            match item {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                other => return Err(other.to_string()),
            }
        }
        Ok(p)
    }
}

impl Default for CleanupPolicy {
    fn default() -> Self {
        CleanupPolicy::DELETE
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            (false, true) => "delete",
            (false, false) => "",
        })
    }
}

/// `message.timestamp.type` (Kafka's `TimestampType`): who sets record timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// The producer's timestamps are kept (default).
    #[default]
    CreateTime,
    /// The broker overwrites the batch timestamp with its clock on append (batch attribute bit 3).
    LogAppendTime,
}

impl TimestampType {
    /// Kafka's name: `CreateTime` or `LogAppendTime`.
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
    /// Parses Kafka's name, case-sensitively as `ValidString.in` does.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "CreateTime" => Some(TimestampType::CreateTime),
            "LogAppendTime" => Some(TimestampType::LogAppendTime),
            _ => None,
        }
    }
}

impl fmt::Display for TimestampType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `compression.type` of a topic (Kafka's `BrokerCompressionType`): keep the producer's codec or
/// recompress to a fixed one. Kafka's names are `uncompressed`, `zstd`, `lz4`, `snappy`, `gzip`,
/// `producer`; note that `none` is the *producer's* name for no compression and is refused here,
/// as Kafka refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CompressionType {
    /// Keep whatever codec the producer used (default).
    #[default]
    Producer,
    /// Store uncompressed.
    Uncompressed,
    /// Recompress with gzip.
    Gzip,
    /// Recompress with snappy.
    Snappy,
    /// Recompress with lz4.
    Lz4,
    /// Recompress with zstd.
    Zstd,
}

impl CompressionType {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            CompressionType::Producer => "producer",
            CompressionType::Uncompressed => "uncompressed",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }
    /// Parses Kafka's name, case-sensitively (`ValidString.in(BrokerCompressionType.names())`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "producer" => CompressionType::Producer,
            "uncompressed" => CompressionType::Uncompressed,
            "gzip" => CompressionType::Gzip,
            "snappy" => CompressionType::Snappy,
            "lz4" => CompressionType::Lz4,
            "zstd" => CompressionType::Zstd,
            _ => return None,
        })
    }
    /// The codec batches are stored with, given the producer's codec
    /// (`BrokerCompressionType.targetCompressionType`).
    pub fn target(self, producer: Compression) -> Compression {
        match self {
            CompressionType::Producer => producer,
            CompressionType::Uncompressed => Compression::None,
            CompressionType::Gzip => Compression::Gzip,
            CompressionType::Snappy => Compression::Snappy,
            CompressionType::Lz4 => Compression::Lz4,
            CompressionType::Zstd => Compression::Zstd,
        }
    }
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a config's effective value came from, as `DescribeConfigs` reports it (Kafka's
/// `ConfigSource`; the numbers are the wire values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    /// A per-topic override (`TOPIC_CONFIG`, 1).
    Topic = 1,
    /// A broker synonym from the broker's properties (`STATIC_BROKER_CONFIG`, 4).
    StaticBroker = 4,
    /// Kafka's built-in default (`DEFAULT_CONFIG`, 5).
    Default = 5,
}

/// The log configuration of one topic: Kafka's topic-level configs with their defaults, after
/// broker defaults and per-topic overrides were applied.
///
/// Build with [`LogConfig::default`] (Kafka's defaults), [`LogConfig::from_broker_props`] (broker
/// synonyms from `server.properties`), then [`LogConfig::with_topic_overrides`] for a topic's own
/// configs. Numeric fields have Kafka's Java types (`int` -> `i32`, `long` -> `i64`) and are
/// validated against Kafka's ranges, so a value set through [`LogConfig::set`] or the
/// constructors is always one Kafka would accept (the `int` byte sizes are never negative).
///
/// ## Flushing (durability vs. throughput)
///
/// Kafka's defaults never fsync on a schedule: `flush.messages` and `flush.ms` are `i64::MAX`
/// (Java's `Long.MAX_VALUE`), so appended data lives in the page cache until the kernel writes it
/// back, and durability comes from replication to other brokers rather than from the disk. A
/// single-node fetchbench broker has no replicas: with the defaults, a power loss (not a process
/// crash) can lose the last seconds of appends, which recovery then truncates away. Setting
/// `flush.messages=1` makes every append durable at the cost of an fsync per append, which
/// dominates produce latency on most disks. The read paths measured here are unaffected either way.
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll a new segment when the active one would exceed this size (bytes,
    /// default 1 GiB, at least 14).
    pub segment_bytes: i32,
    /// `segment.ms`: roll a segment whose first batch is older than this (ms, default 7 days, >= 1).
    pub segment_ms: i64,
    /// `segment.jitter.ms`: maximum random jitter subtracted from `segment_ms` so that partitions
    /// do not all roll at once (ms, default 0, >= 0).
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`: size the `.index` and `.timeindex` files are preallocated to; also
    /// the maximum (bytes, default 10 MiB, >= 4). Trimmed to the used size when a segment rolls.
    pub segment_index_bytes: i32,
    /// `index.interval.bytes`: bytes appended between two offset index entries (default 4096, >= 0).
    pub index_interval_bytes: i32,
    /// `retention.bytes`: delete oldest segments while the log is larger than this (bytes, default
    /// -1 = no size limit; any negative value means no limit).
    pub retention_bytes: i64,
    /// `retention.ms`: delete segments whose newest record is older than this (ms, default 7 days,
    /// -1 = no time limit; >= -1).
    pub retention_ms: i64,
    /// `cleanup.policy`: delete, compact, or both (default delete).
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long a tombstone is kept after compaction reached it (ms,
    /// default 1 day, >= 0).
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: records younger than this are not compacted (ms, default 0, >= 0).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: records older than this make a log eligible for compaction
    /// regardless of the dirty ratio (ms, default `i64::MAX`, >= 1).
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: compact when dirty bytes / total bytes exceed this (default
    /// 0.5, in [0, 1]).
    pub min_cleanable_dirty_ratio: f64,
    /// `flush.messages`: fsync the log after this many appended messages (default `i64::MAX` =
    /// never, >= 1). See "Flushing" above for the trade-off.
    pub flush_messages: i64,
    /// `flush.ms`: fsync the log when the last fsync is older than this (ms, default `i64::MAX` =
    /// never, >= 0). See "Flushing" above.
    pub flush_ms: i64,
    /// `file.delete.delay.ms`: time between renaming a segment to `.deleted` and removing its
    /// files, so in-flight reads finish (ms, default 60000, >= 0).
    pub file_delete_delay_ms: i64,
    /// `max.message.bytes` (broker: `message.max.bytes`): largest record batch accepted, after
    /// compression (bytes, default 1048588 = 1 MiB + 12, >= 0).
    pub max_message_bytes: i32,
    /// `message.timestamp.type`: CreateTime (default) or LogAppendTime.
    pub message_timestamp_type: TimestampType,
    /// `compression.type`: producer (default) or a fixed codec.
    pub compression_type: CompressionType,
    /// `preallocate`: create new segment files at their full `segment.bytes` size (default false).
    pub preallocate: bool,
    /// Where each topic config's value came from; absent = Kafka's default.
    sources: BTreeMap<&'static str, ConfigSource>,
}

impl Default for LogConfig {
    /// Kafka's defaults (`LogConfig` / `ServerLogConfigs` constants).
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            max_message_bytes: 1024 * 1024 + 12,
            message_timestamp_type: TimestampType::CreateTime,
            compression_type: CompressionType::Producer,
            preallocate: false,
            sources: BTreeMap::new(),
        }
    }
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> LogError {
    LogError::InvalidConfig { key: key.to_string(), value: value.to_string(), reason: reason.into() }
}

/// Parses a Java `int` (`Integer.parseInt` of the trimmed value).
fn parse_int(key: &str, raw: &str) -> Result<i32, LogError> {
    raw.trim().parse::<i32>().map_err(|e| invalid(key, raw, format!("expected a 32-bit integer: {e}")))
}

/// Parses a Java `long` (`Long.parseLong` of the trimmed value).
fn parse_long(key: &str, raw: &str) -> Result<i64, LogError> {
    raw.trim().parse::<i64>().map_err(|e| invalid(key, raw, format!("expected a 64-bit integer: {e}")))
}

fn at_least(key: &str, raw: &str, v: i64, min: i64) -> Result<i64, LogError> {
    if v < min {
        return Err(invalid(key, raw, format!("value must be at least {min}")));
    }
    Ok(v)
}

/// Parses an `int`-typed config and checks `v >= min` (`ConfigDef.Range.atLeast`).
fn int_at_least(key: &str, raw: &str, min: i32) -> Result<i32, LogError> {
    let v = parse_int(key, raw)?;
    if v < min {
        return Err(invalid(key, raw, format!("value must be at least {min}")));
    }
    Ok(v)
}

/// Parses a `long`-typed config (or an `int` of hours/minutes converted to ms).
fn long_value(key: &str, raw: &str, unit: Unit) -> Result<i64, LogError> {
    let factor: i64 = match unit {
        Unit::Same => return parse_long(key, raw),
        Unit::MinutesToMs => 60_000,
        Unit::HoursToMs => 3_600_000,
    };
    // An int times a long in Java: cannot overflow i64.
    Ok(parse_int(key, raw)? as i64 * factor)
}

impl LogConfig {
    /// Builds the broker-wide defaults from a broker's properties (`server.properties`, parsed with
    /// [`parse_properties`]). For each topic config the first broker synonym present wins (see the
    /// module table): `log.retention.ms` over `log.retention.minutes` over `log.retention.hours`,
    /// `log.roll.ms` over `log.roll.hours`, `log.flush.interval.ms` over
    /// `log.flush.scheduler.interval.ms`. Keys that are not broker log synonyms (other broker
    /// settings, and topic-level names, which Kafka does not read from `server.properties`) are
    /// ignored. A negative retention time becomes -1 (unlimited), as in Kafka's
    /// `KafkaConfig.logRetentionTimeMillis`.
    ///
    /// Errors: [`LogError::InvalidConfig`] naming the broker key for an unparsable or out-of-range
    /// value, or for `min.compaction.lag.ms > max.compaction.lag.ms`.
    pub fn from_broker_props(props: &BTreeMap<String, String>) -> Result<LogConfig, LogError> {
        let mut config = LogConfig::default();
        for (topic_key, brokers) in SYNONYMS {
            if let Some((name, unit, value)) =
                brokers.iter().find_map(|(name, unit)| props.get(*name).map(|v| (*name, *unit, v)))
            {
                config.apply(topic_key, name, value, unit, true)?;
                config.sources.insert(topic_key, ConfigSource::StaticBroker);
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Returns this config (the broker defaults) with a topic's own configs applied on top
    /// (Kafka's `LogConfig.fromProps(defaults, overrides)`). Only topic-level names are accepted,
    /// as Kafka's `LogConfig.validateNames` does for `CreateTopics` / `AlterConfigs`.
    ///
    /// Errors: [`LogError::InvalidConfig`] for an unknown topic config name ("Unknown topic config
    /// name"), an unparsable or out-of-range value, or `min.compaction.lag.ms >
    /// max.compaction.lag.ms`.
    pub fn with_topic_overrides(&self, overrides: &BTreeMap<String, String>) -> Result<LogConfig, LogError> {
        let mut config = self.clone();
        for (key, value) in overrides {
            let Some((topic_key, _, false)) = lookup(key) else {
                return Err(invalid(key, value, "unknown topic config name"));
            };
            config.apply(topic_key, key, value, Unit::Same, false)?;
            config.sources.insert(topic_key, ConfigSource::Topic);
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets one config by its topic name (`retention.ms`, recorded as a topic override) or by a
    /// broker synonym (`log.retention.hours`, converted to the topic unit and recorded as a broker
    /// config). The value is parsed and range-checked as Kafka's `ConfigDef` does; the synonym
    /// precedence of [`Self::from_broker_props`] does not apply here: the last `set` wins.
    /// Cross-field checks run in [`Self::validate`].
    ///
    /// Errors: [`LogError::InvalidConfig`] for an unknown key (use [`is_log_config_key`] to skip
    /// other broker settings), an unparsable value or one out of Kafka's range.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), LogError> {
        let Some((topic_key, unit, broker)) = lookup(key) else {
            return Err(invalid(key, value, "unknown log config name"));
        };
        self.apply(topic_key, key, value, unit, broker)?;
        self.sources.insert(topic_key, if broker { ConfigSource::StaticBroker } else { ConfigSource::Topic });
        Ok(())
    }

    fn apply(&mut self, topic_key: &str, key: &str, raw: &str, unit: Unit, broker: bool) -> Result<(), LogError> {
        match topic_key {
            SEGMENT_BYTES => self.segment_bytes = int_at_least(key, raw, MIN_SEGMENT_BYTES)?,
            SEGMENT_MS => self.segment_ms = at_least(key, raw, long_value(key, raw, unit)?, 1)?,
            SEGMENT_JITTER_MS => self.segment_jitter_ms = at_least(key, raw, long_value(key, raw, unit)?, 0)?,
            SEGMENT_INDEX_BYTES => self.segment_index_bytes = int_at_least(key, raw, 4)?,
            INDEX_INTERVAL_BYTES => self.index_interval_bytes = int_at_least(key, raw, 0)?,
            RETENTION_BYTES => self.retention_bytes = parse_long(key, raw)?,
            RETENTION_MS => {
                let mut v = long_value(key, raw, unit)?;
                if broker && v < 0 {
                    // KafkaConfig.logRetentionTimeMillis: any negative broker value is "unlimited".
                    v = -1;
                }
                self.retention_ms = at_least(key, raw, v, -1)?;
            }
            CLEANUP_POLICY => {
                self.cleanup_policy = CleanupPolicy::parse(raw).map_err(|item| {
                    invalid(key, raw, format!("invalid value {item:?}: items must be in [compact, delete]"))
                })?
            }
            DELETE_RETENTION_MS => self.delete_retention_ms = at_least(key, raw, parse_long(key, raw)?, 0)?,
            MIN_COMPACTION_LAG_MS => self.min_compaction_lag_ms = at_least(key, raw, parse_long(key, raw)?, 0)?,
            MAX_COMPACTION_LAG_MS => self.max_compaction_lag_ms = at_least(key, raw, parse_long(key, raw)?, 1)?,
            MIN_CLEANABLE_DIRTY_RATIO => {
                let v: f64 = raw.trim().parse().map_err(|e| invalid(key, raw, format!("expected a number: {e}")))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(invalid(key, raw, "value must be between 0 and 1"));
                }
                self.min_cleanable_dirty_ratio = v;
            }
            FLUSH_MESSAGES => self.flush_messages = at_least(key, raw, parse_long(key, raw)?, 1)?,
            FLUSH_MS => self.flush_ms = at_least(key, raw, parse_long(key, raw)?, 0)?,
            FILE_DELETE_DELAY_MS => self.file_delete_delay_ms = at_least(key, raw, parse_long(key, raw)?, 0)?,
            MAX_MESSAGE_BYTES => self.max_message_bytes = int_at_least(key, raw, 0)?,
            MESSAGE_TIMESTAMP_TYPE => {
                self.message_timestamp_type = TimestampType::parse(raw.trim())
                    .ok_or_else(|| invalid(key, raw, "string must be one of: CreateTime, LogAppendTime"))?
            }
            COMPRESSION_TYPE => {
                self.compression_type = CompressionType::parse(raw.trim()).ok_or_else(|| {
                    invalid(key, raw, "string must be one of: uncompressed, zstd, lz4, snappy, gzip, producer")
                })?
            }
            PREALLOCATE => {
                self.preallocate = match raw.trim().to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid(key, raw, "expected true or false")),
                }
            }
            _ => return Err(invalid(key, raw, "unknown log config name")),
        }
        Ok(())
    }

    /// Cross-field checks of Kafka's `LogConfig.validateValues`: `min.compaction.lag.ms` must not
    /// exceed `max.compaction.lag.ms`.
    ///
    /// Errors: [`LogError::InvalidConfig`] naming `min.compaction.lag.ms`.
    pub fn validate(&self) -> Result<(), LogError> {
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return Err(invalid(
                MIN_COMPACTION_LAG_MS,
                &self.min_compaction_lag_ms.to_string(),
                format!("conflicts with {MAX_COMPACTION_LAG_MS} ({}): must not be greater", self.max_compaction_lag_ms),
            ));
        }
        Ok(())
    }

    /// The effective value of a topic config, formatted as Kafka's `DescribeConfigs` shows it
    /// (`ConfigDef.convertToString`); `None` for names that are not topic configs.
    pub fn get(&self, topic_key: &str) -> Option<String> {
        Some(match topic_key {
            SEGMENT_BYTES => self.segment_bytes.to_string(),
            SEGMENT_MS => self.segment_ms.to_string(),
            SEGMENT_JITTER_MS => self.segment_jitter_ms.to_string(),
            SEGMENT_INDEX_BYTES => self.segment_index_bytes.to_string(),
            INDEX_INTERVAL_BYTES => self.index_interval_bytes.to_string(),
            RETENTION_BYTES => self.retention_bytes.to_string(),
            RETENTION_MS => self.retention_ms.to_string(),
            CLEANUP_POLICY => self.cleanup_policy.to_string(),
            DELETE_RETENTION_MS => self.delete_retention_ms.to_string(),
            MIN_COMPACTION_LAG_MS => self.min_compaction_lag_ms.to_string(),
            MAX_COMPACTION_LAG_MS => self.max_compaction_lag_ms.to_string(),
            // Debug keeps the ".0" Java's Double.toString prints (0.5, 1.0).
            MIN_CLEANABLE_DIRTY_RATIO => format!("{:?}", self.min_cleanable_dirty_ratio),
            FLUSH_MESSAGES => self.flush_messages.to_string(),
            FLUSH_MS => self.flush_ms.to_string(),
            FILE_DELETE_DELAY_MS => self.file_delete_delay_ms.to_string(),
            MAX_MESSAGE_BYTES => self.max_message_bytes.to_string(),
            MESSAGE_TIMESTAMP_TYPE => self.message_timestamp_type.to_string(),
            COMPRESSION_TYPE => self.compression_type.to_string(),
            PREALLOCATE => self.preallocate.to_string(),
            _ => return None,
        })
    }

    /// Every topic config with its effective value (topic name -> value string), what
    /// `DescribeConfigs` returns for a topic resource.
    pub fn to_topic_map(&self) -> BTreeMap<String, String> {
        TOPIC_CONFIG_KEYS.iter().filter_map(|k| Some((k.to_string(), self.get(k)?))).collect()
    }

    /// Where a topic config's value came from ([`ConfigSource::Default`] when never set);
    /// `None` for names that are not topic configs.
    pub fn source(&self, topic_key: &str) -> Option<ConfigSource> {
        let key = TOPIC_CONFIG_KEYS.iter().find(|k| **k == topic_key)?;
        Some(self.sources.get(key).copied().unwrap_or(ConfigSource::Default))
    }

    /// The topic configs set by per-topic overrides (Kafka's `LogConfig.overriddenConfigs`).
    pub fn overridden_keys(&self) -> BTreeSet<&'static str> {
        self.sources.iter().filter(|(_, s)| **s == ConfigSource::Topic).map(|(k, _)| *k).collect()
    }

    /// `cleanup.policy` contains `compact`.
    pub fn is_compact(&self) -> bool {
        self.cleanup_policy.compact
    }

    /// `cleanup.policy` contains `delete`.
    pub fn is_delete(&self) -> bool {
        self.cleanup_policy.delete
    }

    /// The retention time limit in ms, or `None` when unlimited (`retention.ms` < 0).
    pub fn retention_ms_limit(&self) -> Option<i64> {
        (self.retention_ms >= 0).then_some(self.retention_ms)
    }

    /// The retention size limit in bytes, or `None` when unlimited (`retention.bytes` < 0).
    pub fn retention_bytes_limit(&self) -> Option<u64> {
        u64::try_from(self.retention_bytes).ok()
    }

    /// `flush.messages` as a limit, or `None` for Kafka's default of never (`i64::MAX`).
    pub fn flush_messages_limit(&self) -> Option<u64> {
        (self.flush_messages != i64::MAX).then_some(self.flush_messages as u64)
    }

    /// `flush.ms` as a limit, or `None` for Kafka's default of never (`i64::MAX`).
    pub fn flush_ms_limit(&self) -> Option<u64> {
        (self.flush_ms != i64::MAX).then_some(self.flush_ms as u64)
    }

    /// The segment age at which the active segment rolls (Kafka's `LogConfig.maxSegmentMs`): for
    /// compacted topics with a positive `max.compaction.lag.ms`, the smaller of it and
    /// `segment.ms`, so the cleaner can reach records within the lag.
    pub fn max_segment_ms(&self) -> i64 {
        if self.is_compact() && self.max_compaction_lag_ms > 0 {
            self.max_compaction_lag_ms.min(self.segment_ms)
        } else {
            self.segment_ms
        }
    }

    /// The roll jitter for one segment given a random `u32` (Kafka's `randomSegmentJitter`:
    /// `abs(random) % min(segment.jitter.ms, segment.ms)`, 0 when jitter is 0). Taking the random
    /// value as a parameter keeps this pure and testable.
    pub fn segment_jitter_ms_for(&self, random: u32) -> i64 {
        if self.segment_jitter_ms == 0 {
            return 0;
        }
        // Utils.abs on a Java int: i32::MIN maps to 0.
        let r = (random as i32).checked_abs().unwrap_or(0) as i64;
        r % self.segment_jitter_ms.min(self.segment_ms)
    }

    /// Initial size of a new segment file (Kafka's `initFileSize`): `segment.bytes` when
    /// `preallocate` is set, else 0.
    pub fn init_file_size(&self) -> i32 {
        if self.preallocate {
            self.segment_bytes
        } else {
            0
        }
    }
}

/// Parses a Java `.properties` file (the `java.util.Properties.load` format):
///
/// - lines end at `\n`, `\r` or `\r\n`; blank lines and lines whose first non-blank character is
///   `#` or `!` are comments;
/// - a line ending in an odd number of backslashes continues on the next line, whose leading
///   whitespace is dropped (comment lines do not continue);
/// - the key ends at the first unescaped `=`, `:` or whitespace; whitespace, then at most one `=`
///   or `:`, then whitespace separate it from the value;
/// - escapes `\t \n \r \f \uXXXX` are decoded, a backslash before any other character yields that
///   character. A malformed `\u` escape (Java throws) is kept as the literal characters.
///
/// Later keys replace earlier ones. Never fails and never panics.
pub fn parse_properties(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut lines = java_lines(text);
    while let Some(first) = lines.next() {
        let trimmed = first.trim_start_matches(is_prop_blank);
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        // Join continuation lines into one logical line (backslashes still escaped).
        let mut logical = String::from(trimmed);
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.next() {
                Some(next) => logical.push_str(next.trim_start_matches(is_prop_blank)),
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical);
        out.insert(unescape(key), unescape(value));
    }
    out
}

fn is_prop_blank(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\x0c'
}

/// Splits at `\n`, `\r\n` and `\r`, as `BufferedReader.readLine` / `Properties.LineReader` do
/// (a final line terminator does not start an empty line).
pub(crate) fn java_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let s = rest?;
        match s.find(['\n', '\r']) {
            Some(i) => {
                let skip = if s[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&s[i + skip..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                if s.is_empty() {
                    None
                } else {
                    Some(s)
                }
            }
        }
    })
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// Splits a logical line into its (still escaped) key and value.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut key_end = line.len();
    let mut sep_is_char = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' => {
                key_end = i;
                sep_is_char = true;
                break;
            }
            c if is_prop_blank(c) => {
                key_end = i;
                break;
            }
            _ => {}
        }
    }
    let key = &line[..key_end];
    let mut rest = &line[key_end..];
    if sep_is_char {
        rest = &rest[1..];
    } else {
        rest = rest.trim_start_matches(is_prop_blank);
        if let Some(r) = rest.strip_prefix(['=', ':']) {
            rest = r;
        }
    }
    (key, rest.trim_start_matches(is_prop_blank))
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let mut pending_high: Option<u16> = None;
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush_surrogate(&mut out, &mut pending_high);
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else { break };
        match e {
            'u' => {
                let hex: String = chars.clone().take(4).collect();
                match (hex.len() == 4).then(|| u16::from_str_radix(&hex, 16).ok()).flatten() {
                    Some(unit) => {
                        for _ in 0..4 {
                            chars.next();
                        }
                        push_utf16(&mut out, &mut pending_high, unit);
                    }
                    None => {
                        flush_surrogate(&mut out, &mut pending_high);
                        out.push('u');
                    }
                }
            }
            other => {
                flush_surrogate(&mut out, &mut pending_high);
                out.push(match other {
                    't' => '\t',
                    'n' => '\n',
                    'r' => '\r',
                    'f' => '\x0c',
                    c => c,
                });
            }
        }
    }
    flush_surrogate(&mut out, &mut pending_high);
    out
}

fn push_utf16(out: &mut String, pending_high: &mut Option<u16>, unit: u16) {
    if let Some(high) = pending_high.take() {
        if (0xDC00..0xE000).contains(&unit) {
            let c = 0x10000 + (((high as u32) - 0xD800) << 10) + ((unit as u32) - 0xDC00);
            out.push(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER));
            return;
        }
        out.push(char::REPLACEMENT_CHARACTER);
    }
    if (0xD800..0xDC00).contains(&unit) {
        *pending_high = Some(unit);
    } else {
        out.push(char::from_u32(unit as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
}

fn flush_surrogate(out: &mut String, pending_high: &mut Option<u16>) {
    if pending_high.take().is_some() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn reason_of(e: LogError) -> (String, String, String) {
        match e {
            LogError::InvalidConfig { key, value, reason } => (key, value, reason),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_ms, 604_800_000);
        assert_eq!(c.segment_jitter_ms, 0);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.cleanup_policy, CleanupPolicy::DELETE);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        assert_eq!(c.min_compaction_lag_ms, 0);
        assert_eq!(c.max_compaction_lag_ms, i64::MAX);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.5);
        assert_eq!(c.flush_messages, i64::MAX);
        assert_eq!(c.flush_ms, i64::MAX);
        assert_eq!(c.file_delete_delay_ms, 60_000);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.message_timestamp_type, TimestampType::CreateTime);
        assert_eq!(c.compression_type, CompressionType::Producer);
        assert!(!c.preallocate);
        assert!(c.is_delete() && !c.is_compact());
        assert_eq!(c.flush_messages_limit(), None);
        assert_eq!(c.flush_ms_limit(), None);
        assert_eq!(c.retention_bytes_limit(), None);
        assert_eq!(c.retention_ms_limit(), Some(604_800_000));
        assert_eq!(c.source(RETENTION_MS), Some(ConfigSource::Default));
        assert_eq!(c.source("log.retention.ms"), None);
    }

    #[test]
    fn topic_map_formats_like_kafka() {
        let m = LogConfig::default().to_topic_map();
        assert_eq!(m.len(), TOPIC_CONFIG_KEYS.len());
        assert_eq!(m["segment.bytes"], "1073741824");
        assert_eq!(m["min.cleanable.dirty.ratio"], "0.5");
        assert_eq!(m["cleanup.policy"], "delete");
        assert_eq!(m["flush.messages"], "9223372036854775807");
        assert_eq!(m["max.message.bytes"], "1048588");
        assert_eq!(m["message.timestamp.type"], "CreateTime");
        assert_eq!(m["compression.type"], "producer");
        assert_eq!(m["preallocate"], "false");
        let c = LogConfig::default().with_topic_overrides(&props(&[("min.cleanable.dirty.ratio", "1")])).unwrap();
        assert_eq!(c.get(MIN_CLEANABLE_DIRTY_RATIO).unwrap(), "1.0");
    }

    #[test]
    fn retention_precedence_ms_over_minutes_over_hours() {
        let c = LogConfig::from_broker_props(&props(&[("log.retention.hours", "1")])).unwrap();
        assert_eq!(c.retention_ms, 3_600_000);
        let c = LogConfig::from_broker_props(&props(&[("log.retention.hours", "1"), ("log.retention.minutes", "2")]))
            .unwrap();
        assert_eq!(c.retention_ms, 120_000);
        let c = LogConfig::from_broker_props(&props(&[
            ("log.retention.hours", "1"),
            ("log.retention.minutes", "2"),
            ("log.retention.ms", "5"),
        ]))
        .unwrap();
        assert_eq!(c.retention_ms, 5);
        assert_eq!(c.source(RETENTION_MS), Some(ConfigSource::StaticBroker));
        // Negative broker retention means unlimited.
        let c = LogConfig::from_broker_props(&props(&[("log.retention.hours", "-3")])).unwrap();
        assert_eq!(c.retention_ms, -1);
        assert_eq!(c.retention_ms_limit(), None);
    }

    #[test]
    fn roll_and_flush_synonyms() {
        let c = LogConfig::from_broker_props(&props(&[
            ("log.roll.hours", "2"),
            ("log.roll.jitter.hours", "1"),
            ("log.flush.scheduler.interval.ms", "3000"),
            ("log.segment.bytes", "1048576"),
            ("log.index.size.max.bytes", "4096"),
            ("log.index.interval.bytes", "100"),
            ("log.cleanup.policy", "compact, delete"),
            ("log.cleaner.min.cleanable.ratio", "0.25"),
            ("log.cleaner.delete.retention.ms", "10"),
            ("log.cleaner.min.compaction.lag.ms", "20"),
            ("log.flush.interval.messages", "1"),
            ("log.segment.delete.delay.ms", "0"),
            ("message.max.bytes", "2000000"),
            ("log.message.timestamp.type", "LogAppendTime"),
            ("compression.type", "zstd"),
            ("log.preallocate", "TRUE"),
            ("listeners", "PLAINTEXT://:9092"),
            ("segment.bytes", "99"),
        ]))
        .unwrap();
        assert_eq!(c.segment_ms, 7_200_000);
        assert_eq!(c.segment_jitter_ms, 3_600_000);
        assert_eq!(c.flush_ms, 3000);
        assert_eq!(c.flush_ms_limit(), Some(3000));
        // A topic-level name in server.properties is not a broker config: ignored.
        assert_eq!(c.segment_bytes, 1_048_576);
        assert_eq!(c.segment_index_bytes, 4096);
        assert_eq!(c.index_interval_bytes, 100);
        assert_eq!(c.cleanup_policy, CleanupPolicy::COMPACT_DELETE);
        assert!(c.is_compact() && c.is_delete());
        assert_eq!(c.min_cleanable_dirty_ratio, 0.25);
        assert_eq!(c.delete_retention_ms, 10);
        assert_eq!(c.min_compaction_lag_ms, 20);
        assert_eq!(c.flush_messages, 1);
        assert_eq!(c.flush_messages_limit(), Some(1));
        assert_eq!(c.file_delete_delay_ms, 0);
        assert_eq!(c.max_message_bytes, 2_000_000);
        assert_eq!(c.message_timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.compression_type, CompressionType::Zstd);
        assert!(c.preallocate);
        assert_eq!(c.init_file_size(), 1_048_576);

        let c = LogConfig::from_broker_props(&props(&[
            ("log.roll.hours", "2"),
            ("log.roll.ms", "1234"),
            ("log.flush.interval.ms", "7"),
            ("log.flush.scheduler.interval.ms", "3000"),
        ]))
        .unwrap();
        assert_eq!(c.segment_ms, 1234);
        assert_eq!(c.flush_ms, 7);
    }

    #[test]
    fn topic_overrides_apply_on_broker_defaults() {
        let broker = LogConfig::from_broker_props(&props(&[("log.retention.hours", "1")])).unwrap();
        let topic = broker
            .with_topic_overrides(&props(&[
                ("cleanup.policy", "compact"),
                ("segment.bytes", "14"),
                ("retention.ms", "-1"),
            ]))
            .unwrap();
        assert_eq!(topic.retention_ms, -1);
        assert_eq!(topic.segment_bytes, 14);
        assert_eq!(topic.cleanup_policy, CleanupPolicy::COMPACT);
        assert_eq!(topic.source(CLEANUP_POLICY), Some(ConfigSource::Topic));
        assert_eq!(topic.source(SEGMENT_MS), Some(ConfigSource::Default));
        assert_eq!(
            topic.overridden_keys().into_iter().collect::<Vec<_>>(),
            vec![CLEANUP_POLICY, RETENTION_MS, SEGMENT_BYTES]
        );
        // The broker config is unchanged.
        assert_eq!(broker.retention_ms, 3_600_000);
        assert_eq!(broker.source(RETENTION_MS), Some(ConfigSource::StaticBroker));
        // Broker names are not topic configs.
        let (key, _, reason) =
            reason_of(broker.with_topic_overrides(&props(&[("log.retention.hours", "2")])).unwrap_err());
        assert_eq!(key, "log.retention.hours");
        assert!(reason.contains("unknown topic config"), "{reason}");
    }

    #[test]
    fn bad_values_are_refused_with_context() {
        let mut c = LogConfig::default();
        let cases: &[(&str, &str, &str)] = &[
            ("segment.bytes", "13", "at least 14"),
            ("segment.bytes", "1g", "32-bit integer"),
            ("segment.bytes", "4294967296", "32-bit integer"),
            ("segment.ms", "0", "at least 1"),
            ("log.roll.hours", "0", "at least 1"),
            ("segment.index.bytes", "3", "at least 4"),
            ("index.interval.bytes", "-1", "at least 0"),
            ("retention.ms", "-2", "at least -1"),
            ("flush.messages", "0", "at least 1"),
            ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
            ("min.cleanable.dirty.ratio", "NaN", "between 0 and 1"),
            ("cleanup.policy", "Compact", "Compact"),
            ("cleanup.policy", "delete,bogus", "bogus"),
            ("compression.type", "none", "uncompressed"),
            ("message.timestamp.type", "createtime", "CreateTime"),
            ("preallocate", "yes", "true or false"),
            ("max.compaction.lag.ms", "0", "at least 1"),
            ("no.such.config", "1", "unknown"),
        ];
        for (key, value, needle) in cases {
            let before = c.clone();
            let (k, v, reason) = reason_of(c.set(key, value).unwrap_err());
            assert_eq!((k.as_str(), v.as_str()), (*key, *value));
            assert!(reason.contains(needle), "{key}={value}: {reason}");
            assert_eq!(c, before, "a refused value must not change the config");
        }
    }

    #[test]
    fn compaction_lag_conflict() {
        let e = LogConfig::default()
            .with_topic_overrides(&props(&[("min.compaction.lag.ms", "10"), ("max.compaction.lag.ms", "5")]))
            .unwrap_err();
        let (key, value, reason) = reason_of(e);
        assert_eq!(key, "min.compaction.lag.ms");
        assert_eq!(value, "10");
        assert!(reason.contains("max.compaction.lag.ms"), "{reason}");
    }

    #[test]
    fn set_accepts_both_levels() {
        let mut c = LogConfig::default();
        c.set("log.retention.minutes", "3").unwrap();
        assert_eq!(c.retention_ms, 180_000);
        assert_eq!(c.source(RETENTION_MS), Some(ConfigSource::StaticBroker));
        c.set("retention.ms", " 42 ").unwrap();
        assert_eq!(c.retention_ms, 42);
        assert_eq!(c.source(RETENTION_MS), Some(ConfigSource::Topic));
        c.set("cleanup.policy", "").unwrap();
        assert!(!c.is_compact() && !c.is_delete());
        assert_eq!(c.get(CLEANUP_POLICY).unwrap(), "");
        assert!(is_log_config_key("log.retention.hours"));
        assert!(is_log_config_key("max.message.bytes"));
        assert!(is_log_config_key("message.max.bytes"));
        assert!(!is_log_config_key("listeners"));
        assert!(is_topic_config_key("max.message.bytes"));
        assert!(!is_topic_config_key("message.max.bytes"));
        assert_eq!(
            broker_synonyms(RETENTION_MS),
            vec!["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
        );
    }

    #[test]
    fn max_segment_ms_and_jitter() {
        let mut c = LogConfig::default();
        c.set("max.compaction.lag.ms", "1000").unwrap();
        assert_eq!(c.max_segment_ms(), c.segment_ms, "not compacted: segment.ms");
        c.set("cleanup.policy", "compact").unwrap();
        assert_eq!(c.max_segment_ms(), 1000);
        assert_eq!(c.segment_jitter_ms_for(12345), 0);
        c.set("segment.jitter.ms", "100").unwrap();
        assert_eq!(c.segment_jitter_ms_for(12345), 45);
        assert_eq!(c.segment_jitter_ms_for(0x8000_0000), 0, "Utils.abs(Integer.MIN_VALUE) = 0");
        assert_eq!(c.segment_jitter_ms_for(u32::MAX), 1, "abs(-1) % 100");
        c.set("segment.ms", "7").unwrap();
        assert_eq!(c.segment_jitter_ms_for(12345), 12345 % 7);
    }

    #[test]
    fn compression_target() {
        assert_eq!(CompressionType::Producer.target(Compression::Lz4), Compression::Lz4);
        assert_eq!(CompressionType::Uncompressed.target(Compression::Lz4), Compression::None);
        assert_eq!(CompressionType::Zstd.target(Compression::None), Compression::Zstd);
    }

    #[test]
    fn properties_parser() {
        let text = "# comment\n\
                    ! another comment\n\
                    \n\
                    broker.id=0\n\
                    log.dirs = /tmp/kafka-logs\r\n\
                    listeners: PLAINTEXT://:9092\r\
                    key\\ with\\ spaces value with spaces\n\
                    continued = a,\\\n    b,\\\n\tc\n\
                    escaped\\=key=x\\ty\\u00e9\\uD83D\\uDE00\n\
                    empty=\n\
                    novalue\n\
                    dup=1\n\
                    dup=2\n\
                    trailing.backslash=x\\\\\n\
                    bad.unicode=\\u12\n\
                    # comment ending in backslash \\\n\
                    after.comment=ok\n\
                    last=no newline";
        let p = parse_properties(text);
        assert_eq!(p["broker.id"], "0");
        assert_eq!(p["log.dirs"], "/tmp/kafka-logs");
        assert_eq!(p["listeners"], "PLAINTEXT://:9092");
        assert_eq!(p["key with spaces"], "value with spaces");
        assert_eq!(p["continued"], "a,b,c");
        assert_eq!(p["escaped=key"], "x\ty\u{e9}\u{1F600}");
        assert_eq!(p["empty"], "");
        assert_eq!(p["novalue"], "");
        assert_eq!(p["dup"], "2");
        assert_eq!(p["trailing.backslash"], "x\\");
        assert_eq!(p["bad.unicode"], "u12");
        assert_eq!(p["after.comment"], "ok");
        assert_eq!(p["last"], "no newline");
        assert_eq!(p.len(), 13, "{p:?}");
    }

    #[test]
    fn properties_parser_does_not_panic_on_edge_input() {
        for text in ["\\", "=", ":", "a\\", "\\u", "\\uZZZZ", "\\uD800", "a=\\uDC00", "\r\r\n\n", " \t\x0c", "é=ü\\"]
        {
            let _ = parse_properties(text);
        }
        assert_eq!(parse_properties("=v")[""], "v");
        assert_eq!(parse_properties("a=\\uD800x")["a"], "\u{FFFD}x");
    }

    #[test]
    fn server_properties_round_trip_into_log_config() {
        let text = "log.retention.hours=168\nlog.segment.bytes=1073741824\nlog.retention.check.interval.ms=300000\n\
                    num.partitions=1\nlog.dirs=/tmp/kafka-logs\n";
        let c = LogConfig::from_broker_props(&parse_properties(text)).unwrap();
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.segment_bytes, 1 << 30);
    }
}
