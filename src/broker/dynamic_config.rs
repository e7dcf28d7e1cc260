//! Dynamic broker configs (Kafka's KIP-226, `DynamicBrokerConfig`): the broker keys that
//! DescribeConfigs reports ([`BROKER_KEYS`]), the one key that IncrementalAlterConfigs may change
//! at runtime ([`READ_PATH`]), and [`DynamicConfig`], the broker's current dynamic values.
//!
//! ## Layers, as in Kafka
//!
//! A dynamic value is held at one of two levels: for this broker (resource name `"0"`,
//! `DYNAMIC_BROKER_CONFIG`) or as the cluster-wide default (empty resource name,
//! `DYNAMIC_DEFAULT_BROKER_CONFIG`). The effective value is the first of: the per-broker value,
//! the cluster default, the static value the broker started with (`STATIC_BROKER_CONFIG`), the
//! built-in default (`DEFAULT_CONFIG`). DELETE removes a value from its level, so the next level
//! shows through (after deleting both, the static value). Unlike Kafka, nothing is persisted:
//! a restart starts from the static values again (Kafka keeps them in the metadata log).
//!
//! ## Dynamic keys
//!
//! Only `read.path` (fetchbench's own key; values the [`ReadPathKind`] names) is dynamic; every
//! other key of [`BROKER_KEYS`] is read-only (`server.model` among them: changing it needs a
//! restart). A change of `read.path` applies to Fetch responses written after it: under
//! `server.model=threaded` each io thread compares its own read path with
//! [`DynamicConfig::read_path`] (one atomic load) before each Fetch response and makes a new one
//! when they differ; no lock is taken on the Fetch path. Under `server.model=uring` the new
//! value is first prepared on every core (the [preparer](DynamicConfig::set_preparer) the
//! broker installs: each core checks the opcodes of the path's engine on its own ring and
//! registers the buffers it needs, `uring/start.rs`), and only then made current; each core
//! looks at [`DynamicConfig::read_path`] before each response it starts, so transfers in flight
//! finish on the path they started on and give back their buffers and pipes as they end.
//!
//! ## IncrementalAlterConfigs checks ([`DynamicConfig::alter`]), in Kafka's order
//!
//! Kafka's `ConfigAdminManager.preprocess`, `prepareIncrementalConfigs` and
//! `DynamicBrokerConfig.validateConfigs`; a refused resource changes nothing (all of its ops or
//! none), and `validate_only` runs every check and changes nothing:
//!
//! | check | error |
//! |---|---|
//! | a key twice in the resource | `INVALID_REQUEST` "Error due to duplicate config keys" |
//! | a null value for SET / APPEND / SUBTRACT | `INVALID_REQUEST` "Null value not supported for : a, b" |
//! | an operation other than 0-3 | `INVALID_REQUEST` "Unknown operations type 7" |
//! | an unknown key | `INVALID_CONFIG` "Unknown config name: x" (Kafka stores unknown broker keys; fetchbench refuses them, never ignoring a key silently) |
//! | APPEND / SUBTRACT on a key that is not a list | `INVALID_CONFIG` "Config value append is not allowed for config key: x" |
//! | a read-only key | `INVALID_REQUEST` "Cannot update these configs dynamically: Set(server.model)" |
//! | a bad `read.path` value, one this machine or server model cannot run (threaded: the path's probe; uring: [`ServerModel::supports`], then a core's preparation of the effective value) | `INVALID_REQUEST` "Invalid value x for configuration read.path: reason" |
//!
//! Read-only keys and bad values get `INVALID_REQUEST` (42), not `INVALID_CONFIG` (40), as in
//! Kafka: its `ConfigAdminManager.validateBrokerConfigChange` turns the `ConfigException` into
//! an `InvalidRequestException` (KAFKA-13609 notes it, kept for compatibility).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::config::BrokerConfig;
use super::errors;
use super::server_model::ServerModel;
use crate::log::config::{broker_synonyms, ConfigSource, TOPIC_CONFIG_KEYS};
use crate::log::LogConfig;
use crate::read_path::ReadPathKind;

/// `read.path`: fetchbench's own broker key, how Fetch responses move record bytes (a
/// [`ReadPathKind`] name); the one dynamic broker key.
pub(crate) const READ_PATH: &str = "read.path";

/// Kafka's `ConfigSource` values that only broker resources report (the topic ones are
/// [`ConfigSource`]): `DYNAMIC_BROKER_CONFIG` (2).
pub(crate) const DYNAMIC_BROKER_CONFIG: i8 = 2;
/// `DYNAMIC_DEFAULT_BROKER_CONFIG` (3): the cluster-wide default of a dynamic broker key.
pub(crate) const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;

/// Kafka's `DescribeConfigsResponse.ConfigType` wire values (KIP-569, DescribeConfigs v3+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfigType {
    /// `BOOLEAN` (1).
    Boolean = 1,
    /// `STRING` (2).
    String = 2,
    /// `INT` (3).
    Int = 3,
    /// `LONG` (5).
    Long = 5,
    /// `DOUBLE` (6).
    Double = 6,
    /// `LIST` (7): comma-separated; the only type APPEND and SUBTRACT apply to.
    List = 7,
}

/// The type of a topic config (Kafka's `LogConfig` `ConfigDef`), also that of its broker
/// synonyms; `None` for an unknown key.
pub(crate) fn topic_config_type(topic_key: &str) -> Option<ConfigType> {
    use crate::log::config as c;
    Some(match topic_key {
        c::SEGMENT_BYTES | c::SEGMENT_INDEX_BYTES | c::INDEX_INTERVAL_BYTES | c::MAX_MESSAGE_BYTES => ConfigType::Int,
        c::MIN_CLEANABLE_DIRTY_RATIO => ConfigType::Double,
        c::CLEANUP_POLICY => ConfigType::List,
        c::MESSAGE_TIMESTAMP_TYPE | c::COMPRESSION_TYPE => ConfigType::String,
        c::PREALLOCATE => ConfigType::Boolean,
        k if TOPIC_CONFIG_KEYS.contains(&k) => ConfigType::Long,
        _ => return None,
    })
}

/// One broker key as DescribeConfigs reports it: its value in `config`, Kafka's default
/// (`None`: no default, as `log.dirs` here), type and documentation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BrokerKey {
    /// The key, Kafka's name (`server.properties`) or fetchbench's own.
    pub name: &'static str,
    /// Its type.
    pub config_type: ConfigType,
    /// Whether IncrementalAlterConfigs may change it ([`READ_PATH`] only).
    pub dynamic: bool,
    /// Kafka's default value as a string (`None`: none).
    pub default: Option<&'static str>,
    /// Its value in a broker config.
    pub value: fn(&BrokerConfig) -> String,
    /// One line of documentation (DescribeConfigs v3+ `include_documentation`).
    pub doc: &'static str,
}

macro_rules! key {
    ($name:expr, $ty:ident, $default:expr, $doc:expr, |$c:ident| $value:expr) => {
        BrokerKey {
            name: $name,
            config_type: ConfigType::$ty,
            dynamic: false,
            default: $default,
            value: |$c: &BrokerConfig| $value.to_string(),
            doc: $doc,
        }
    };
}

/// The broker keys that [`BrokerConfig`] holds, besides the `log.*` synonyms of the topic
/// configs ([`broker_keys`] adds those), in the order DescribeConfigs lists them.
pub(crate) const BROKER_KEYS: &[BrokerKey] = &[
    BrokerKey {
        name: READ_PATH,
        config_type: ConfigType::String,
        dynamic: true,
        default: None,
        value: |c| c.read_path.name().to_string(),
        doc: "fetchbench: how Fetch responses move record bytes (copy, mmap, sendfile, splice, uring-splice, \
              uring-read-send, uring-send-zc, msg-zerocopy, direct; server.model=uring runs the uring-* ones); \
              dynamic: new Fetch responses use the new path",
    },
    key!("server.model", String, Some("threaded"), "fetchbench: threaded or uring (read-only: needs a restart)", |c| {
        c.server_model.name()
    }),
    key!("server.uring.cores", Int, Some("0"), "fetchbench: cores of server.model=uring (0: one per CPU)", |c| c
        .uring_cores),
    key!("log.dirs", String, None, "The log directory", |c| c.log_dir.display()),
    key!("auto.create.topics.enable", Boolean, Some("true"), "Metadata requests create unknown topics", |c| c
        .auto_create_topics_enable),
    key!("num.partitions", Int, Some("1"), "Partitions of an auto-created topic", |c| c.num_partitions),
    key!("socket.request.max.bytes", Int, Some("104857600"), "The largest request, in bytes", |c| c
        .socket_request_max_bytes),
    key!("max.connections", Int, Some("2147483647"), "Open client connections, broker-wide", |c| c.max_connections),
    key!("max.connections.per.ip", Int, Some("2147483647"), "Open connections from one IP address", |c| c
        .max_connections_per_ip),
    key!("num.network.threads", Int, Some("3"), "Network threads (server.model=threaded)", |c| c.num_network_threads),
    key!("num.io.threads", Int, Some("8"), "Io threads handling requests", |c| c.num_io_threads),
    key!("queued.max.requests", Int, Some("500"), "Requests waiting for an io thread", |c| c.queued_max_requests),
    key!("connections.max.idle.ms", Long, Some("600000"), "Idle connections close after this", |c| c
        .connections_max_idle_ms
        .map_or(-1, |ms| ms as i64)),
    key!("group.initial.rebalance.delay.ms", Int, Some("3000"), "Delay of an empty group's first rebalance", |c| c
        .group_initial_rebalance_delay_ms),
    key!("group.min.session.timeout.ms", Int, Some("6000"), "Smallest session timeout", |c| c
        .group_min_session_timeout_ms),
    key!("group.max.session.timeout.ms", Int, Some("1800000"), "Largest session timeout", |c| c
        .group_max_session_timeout_ms),
    key!("group.max.size", Int, Some("2147483647"), "Members per consumer group", |c| c.group_max_size),
    key!("offsets.topic.num.partitions", Int, Some("50"), "Partitions of __consumer_offsets", |c| c
        .offsets_topic_num_partitions),
    key!("offsets.retention.minutes", Int, Some("10080"), "Committed offsets of an empty group kept this long", |c| c
        .offsets_retention_minutes),
    key!(
        "offsets.retention.check.interval.ms",
        Long,
        Some("600000"),
        "How often expired offsets are looked for",
        |c| c.offsets_retention_check_interval_ms
    ),
    key!("offset.metadata.max.bytes", Int, Some("4096"), "Longest commit metadata", |c| c.offset_metadata_max_bytes),
    key!(
        "log.flush.scheduler.interval.ms",
        Long,
        Some("9223372036854775807"),
        "How often the log scheduler checks flush.ms",
        |c| c.log_flush_scheduler_interval_ms
    ),
    key!(
        "log.flush.offset.checkpoint.interval.ms",
        Int,
        Some("60000"),
        "How often recovery points are checkpointed",
        |c| c.log_flush_offset_checkpoint_interval_ms
    ),
    key!(
        "log.flush.start.offset.checkpoint.interval.ms",
        Int,
        Some("60000"),
        "How often log start offsets are checkpointed",
        |c| c.log_flush_start_offset_checkpoint_interval_ms
    ),
];

/// One broker key described: its name, type, dynamic flag, value, source and synonyms (the
/// static value then the default, each present only when there is one).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DescribedKey {
    /// The key.
    pub name: String,
    /// Its type.
    pub config_type: ConfigType,
    /// Whether IncrementalAlterConfigs may change it.
    pub dynamic: bool,
    /// Documentation.
    pub doc: &'static str,
    /// `(name, value, source)` in precedence order; the first is the effective one. The name
    /// is the key's, or the broker synonym's for a topic config.
    pub synonyms: Vec<(String, String, i8)>,
}

/// Every broker key of `config` with its static and default values: [`BROKER_KEYS`], then for
/// each topic config its first broker synonym (`log.segment.bytes`, `message.max.bytes`, ...; the
/// value in the topic unit, `STATIC_BROKER_CONFIG` when `server.properties` set a synonym). A
/// non-log key is reported `STATIC_BROKER_CONFIG` when its value differs from Kafka's default
/// (the broker does not keep which keys its properties named), `read.path` always (it is given at
/// start). Dynamic values are not applied here ([`DynamicConfig::describe_read_path`]).
pub(crate) fn broker_keys(config: &BrokerConfig) -> Vec<DescribedKey> {
    let mut out = Vec::new();
    for key in BROKER_KEYS {
        let value = (key.value)(config);
        let mut synonyms = Vec::new();
        if key.default != Some(value.as_str()) {
            synonyms.push((key.name.to_string(), value, ConfigSource::StaticBroker as i8));
        }
        if let Some(d) = key.default {
            synonyms.push((key.name.to_string(), d.to_string(), ConfigSource::Default as i8));
        }
        out.push(DescribedKey {
            name: key.name.to_string(),
            config_type: key.config_type,
            dynamic: key.dynamic,
            doc: key.doc,
            synonyms,
        });
    }
    let defaults = LogConfig::default();
    let mut topic_keys: Vec<&str> = TOPIC_CONFIG_KEYS.to_vec();
    topic_keys.sort_unstable();
    for topic_key in topic_keys {
        let Some(name) = broker_synonyms(topic_key).first().copied() else { continue };
        if out.iter().any(|k| k.name == name) {
            continue;
        }
        let mut synonyms = Vec::new();
        if config.log_config.source(topic_key) == Some(ConfigSource::StaticBroker) {
            if let Some(v) = config.log_config.get(topic_key) {
                synonyms.push((name.to_string(), v, ConfigSource::StaticBroker as i8));
            }
        }
        if let Some(v) = defaults.get(topic_key) {
            synonyms.push((name.to_string(), v, ConfigSource::Default as i8));
        }
        if synonyms.is_empty() {
            continue;
        }
        out.push(DescribedKey {
            name: name.to_string(),
            config_type: topic_config_type(topic_key).unwrap_or(ConfigType::String),
            dynamic: false,
            doc: "Broker default of a topic config",
            synonyms,
        });
    }
    out
}

/// A refused IncrementalAlterConfigs resource: Kafka's error code and message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("error {code}: {message}")]
pub(crate) struct AlterError {
    /// `INVALID_REQUEST` or `INVALID_CONFIG`.
    pub code: i16,
    /// Kafka's message.
    pub message: String,
}

impl AlterError {
    fn new(code: i16, message: impl Into<String>) -> AlterError {
        AlterError { code, message: message.into() }
    }
}

/// One IncrementalAlterConfigs op: Kafka's `AlterConfigOp.OpType` wire value (0 SET, 1 DELETE,
/// 2 APPEND, 3 SUBTRACT), key and value.
#[derive(Clone, Debug)]
pub(crate) struct AlterOp<'a> {
    /// The op's wire value.
    pub op: i8,
    /// The key.
    pub name: &'a str,
    /// The value (`None`: null, allowed for DELETE only).
    pub value: Option<&'a str>,
}

/// The dynamic values of one level (per broker or cluster default): key -> value.
type Layer = BTreeMap<String, String>;

/// What gets the front end ready for a new effective read path before it is made current:
/// `Ok`, or the reason it cannot run it (see [`DynamicConfig::set_preparer`]).
pub(crate) type PreparePath = Box<dyn Fn(ReadPathKind) -> Result<(), String> + Send + Sync>;

/// The installed [`PreparePath`] (a newtype for `Debug`).
struct Preparer(PreparePath);

impl std::fmt::Debug for Preparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Preparer")
    }
}

/// The broker's dynamic config: the per-broker and cluster-default layers of the dynamic keys
/// and the effective read path (read with one atomic load on the Fetch path). What each read
/// path moved is counted by the metrics registry (`metrics_registry.rs`).
#[derive(Debug)]
pub(crate) struct DynamicConfig {
    static_read_path: ReadPathKind,
    server_model: ServerModel,
    /// Index in [`ReadPathKind::ALL`] of the effective read path.
    read_path: AtomicUsize,
    /// (per broker, cluster default); taken only by DescribeConfigs and IncrementalAlterConfigs.
    layers: Mutex<(Layer, Layer)>,
    /// Under `server.model=uring`: gets every core ready for a new read path.
    preparer: OnceLock<Preparer>,
}

fn kind_index(kind: ReadPathKind) -> usize {
    ReadPathKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl DynamicConfig {
    /// No dynamic value yet: the effective read path is `config.read_path`.
    pub(crate) fn new(config: &BrokerConfig) -> DynamicConfig {
        DynamicConfig {
            static_read_path: config.read_path,
            server_model: config.server_model,
            read_path: AtomicUsize::new(kind_index(config.read_path)),
            layers: Mutex::default(),
            preparer: OnceLock::new(),
        }
    }

    /// Installs what gets the front end ready for a new effective read path (under
    /// `server.model=uring`: every core checks the path's engine and registers its buffers;
    /// `uring/start.rs`'s `prepare_cores`). [`Self::alter`] calls it, under `uring`, before it
    /// changes the effective path, and refuses the change with its reason. Set once, when the
    /// front end has started; a second call is ignored.
    pub(crate) fn set_preparer(&self, prepare: PreparePath) {
        let _ = self.preparer.set(Preparer(prepare));
    }

    /// The effective read path: what new Fetch responses are written with (one atomic load).
    pub(crate) fn read_path(&self) -> ReadPathKind {
        ReadPathKind::ALL[self.read_path.load(Ordering::Acquire)]
    }

    fn layers(&self) -> std::sync::MutexGuard<'_, (Layer, Layer)> {
        // A panic while holding it cannot leave the maps half-changed (they are replaced whole).
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `read.path`'s synonyms in precedence order, `(value, source)`: the per-broker value
    /// (`DYNAMIC_BROKER_CONFIG`), the cluster default (`DYNAMIC_DEFAULT_BROKER_CONFIG`), the
    /// static value (`STATIC_BROKER_CONFIG`); for the default resource (`per_broker` false) only
    /// the cluster default, as Kafka's `ConfigHelper.createBrokerConfigEntry`.
    pub(crate) fn describe_read_path(&self, per_broker: bool) -> Vec<(String, i8)> {
        let layers = self.layers();
        let mut out = Vec::new();
        if per_broker {
            if let Some(v) = layers.0.get(READ_PATH) {
                out.push((v.clone(), DYNAMIC_BROKER_CONFIG));
            }
        }
        if let Some(v) = layers.1.get(READ_PATH) {
            out.push((v.clone(), DYNAMIC_DEFAULT_BROKER_CONFIG));
        }
        if per_broker {
            out.push((self.static_read_path.name().to_string(), ConfigSource::StaticBroker as i8));
        }
        out
    }

    /// Applies `ops` to the per-broker level (`per_broker`) or the cluster default, all or
    /// nothing, after the checks of the [module docs](self); with `validate_only` it checks and
    /// changes nothing. Errors: [`AlterError`] with Kafka's code and message.
    pub(crate) fn alter(&self, per_broker: bool, ops: &[AlterOp<'_>], validate_only: bool) -> Result<(), AlterError> {
        let mut seen = BTreeSet::new();
        if !ops.iter().all(|op| seen.insert(op.name)) {
            return Err(AlterError::new(errors::INVALID_REQUEST, "Error due to duplicate config keys"));
        }
        let nulls: Vec<&str> = ops.iter().filter(|op| op.op != 1 && op.value.is_none()).map(|op| op.name).collect();
        if !nulls.is_empty() {
            return Err(AlterError::new(
                errors::INVALID_REQUEST,
                format!("Null value not supported for : {}", nulls.join(", ")),
            ));
        }
        let mut layers = self.layers();
        let mut layer = if per_broker { layers.0.clone() } else { layers.1.clone() };
        let mut changed = BTreeSet::new();
        for op in ops {
            if !(0..=3).contains(&op.op) {
                return Err(AlterError::new(errors::INVALID_REQUEST, format!("Unknown operations type {}", op.op)));
            }
            let Some(ty) = key_type(op.name) else {
                return Err(AlterError::new(errors::INVALID_CONFIG, format!("Unknown config name: {}", op.name)));
            };
            let value = op.value.unwrap_or_default();
            match op.op {
                0 => {
                    layer.insert(op.name.to_string(), value.to_string());
                }
                1 => {
                    layer.remove(op.name);
                }
                _ if ty != ConfigType::List => {
                    let verb = if op.op == 2 { "append" } else { "subtract" };
                    return Err(AlterError::new(
                        errors::INVALID_CONFIG,
                        format!("Config value {verb} is not allowed for config key: {}", op.name),
                    ));
                }
                // No list key is dynamic: the read-only check below refuses the change.
                _ => {
                    layer.insert(op.name.to_string(), value.to_string());
                }
            }
            changed.insert(op.name);
        }
        let read_only: Vec<&str> = changed.iter().copied().filter(|k| *k != READ_PATH).collect();
        if !read_only.is_empty() {
            return Err(AlterError::new(
                errors::INVALID_REQUEST,
                format!("Cannot update these configs dynamically: Set({})", read_only.join(", ")),
            ));
        }
        let (broker_layer, default_layer) = if per_broker { (&layer, &layers.1) } else { (&layers.0, &layer) };
        let mut effective = self.static_read_path;
        for level in [default_layer, broker_layer] {
            if let Some(v) = level.get(READ_PATH) {
                effective = self.check_read_path(v)?;
            }
        }
        let current = self.read_path();
        if effective != current && self.server_model == ServerModel::Uring {
            // The cores' own check of the path (their ring's opcodes, the registered buffers),
            // also for validate_only: it is the probe of the value under uring.
            let invalid = |reason: String| {
                AlterError::new(
                    errors::INVALID_REQUEST,
                    format!("Invalid value {effective} for configuration {READ_PATH}: {reason}"),
                )
            };
            let prepare = self.preparer.get().ok_or_else(|| invalid("the uring cores are not running".into()))?;
            (prepare.0)(effective).map_err(invalid)?;
        }
        if validate_only {
            return Ok(());
        }
        if per_broker {
            layers.0 = layer;
        } else {
            layers.1 = layer;
        }
        self.read_path.store(kind_index(effective), Ordering::Release);
        if effective != current {
            tracing::info!("read.path changed from {current} to {effective}: new Fetch responses use {effective}");
        }
        Ok(())
    }

    /// Parses a `read.path` value and checks that this broker can run it: a known path, not
    /// `null` (it sends zeros), one this machine can run ([`ReadPathKind::probe`]) and the server
    /// model runs ([`ServerModel::supports`]).
    fn check_read_path(&self, value: &str) -> Result<ReadPathKind, AlterError> {
        let invalid = |reason: String| {
            AlterError::new(
                errors::INVALID_REQUEST,
                format!("Invalid value {value} for configuration {READ_PATH}: {reason}"),
            )
        };
        let kind: ReadPathKind =
            value.trim().parse().map_err(|e: crate::read_path::UnknownReadPath| invalid(e.to_string()))?;
        if kind == ReadPathKind::Null {
            return Err(invalid("null sends zeros, not records: it is a baseline for `read-paths` only".into()));
        }
        self.server_model.supports(kind).map_err(|e| invalid(e.to_string()))?;
        if self.server_model == ServerModel::Threaded {
            kind.probe().map_err(|e| invalid(e.to_string()))?;
        }
        Ok(kind)
    }
}

/// The type of a broker key: one of [`BROKER_KEYS`] or a broker synonym of a topic config;
/// `None` for an unknown key.
fn key_type(name: &str) -> Option<ConfigType> {
    if let Some(k) = BROKER_KEYS.iter().find(|k| k.name == name) {
        return Some(k.config_type);
    }
    TOPIC_CONFIG_KEYS.iter().find(|t| broker_synonyms(t).contains(&name)).and_then(|t| topic_config_type(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(model: ServerModel, path: ReadPathKind) -> BrokerConfig {
        let mut c = BrokerConfig::new("127.0.0.1:1".parse().unwrap(), "/nowhere", path);
        c.server_model = model;
        c
    }

    fn set<'a>(name: &'a str, value: &'a str) -> AlterOp<'a> {
        AlterOp { op: 0, name, value: Some(value) }
    }

    #[test]
    fn layers_and_delete_restore_the_static_value() {
        let d = DynamicConfig::new(&config(ServerModel::Threaded, ReadPathKind::Copy));
        d.alter(false, &[set(READ_PATH, "mmap")], false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Mmap);
        d.alter(true, &[set(READ_PATH, "sendfile")], false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Sendfile, "per broker wins over the default");
        assert_eq!(d.describe_read_path(true).iter().map(|s| s.1).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(d.describe_read_path(false), [("mmap".to_string(), 3)]);
        let delete = AlterOp { op: 1, name: READ_PATH, value: None };
        d.alter(true, std::slice::from_ref(&delete), false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Mmap);
        d.alter(false, &[delete], false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Copy);
    }

    #[test]
    fn refusals_change_nothing() {
        let d = DynamicConfig::new(&config(ServerModel::Threaded, ReadPathKind::Copy));
        let cases: Vec<(Vec<AlterOp<'_>>, i16, &str)> = vec![
            (vec![set("no.such.key", "1")], errors::INVALID_CONFIG, "Unknown config name: no.such.key"),
            (
                vec![set(READ_PATH, "mmap"), set("server.model", "uring")],
                errors::INVALID_REQUEST,
                "Cannot update these configs dynamically: Set(server.model)",
            ),
            (vec![set(READ_PATH, "warp")], errors::INVALID_REQUEST, "Invalid value warp for configuration read.path"),
            (vec![set(READ_PATH, "null")], errors::INVALID_REQUEST, "sends zeros"),
            (
                vec![AlterOp { op: 2, name: READ_PATH, value: Some("mmap") }],
                errors::INVALID_CONFIG,
                "Config value append is not allowed for config key: read.path",
            ),
            (vec![set(READ_PATH, "mmap"), set(READ_PATH, "copy")], errors::INVALID_REQUEST, "duplicate config keys"),
            (vec![AlterOp { op: 0, name: READ_PATH, value: None }], errors::INVALID_REQUEST, "Null value"),
            (vec![AlterOp { op: 9, name: READ_PATH, value: Some("x") }], errors::INVALID_REQUEST, "Unknown operations"),
        ];
        for (ops, code, message) in cases {
            let e = d.alter(true, &ops, false).unwrap_err();
            assert_eq!(e.code, code, "{ops:?}: {e}");
            assert!(e.message.contains(message), "{ops:?}: {e}");
            assert_eq!(d.read_path(), ReadPathKind::Copy);
            assert_eq!(d.describe_read_path(true).len(), 1, "nothing stored");
        }
        d.alter(true, &[set(READ_PATH, "mmap")], true).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Copy, "validate_only changes nothing");
        // APPEND on a list key passes the list check, then is refused as read-only.
        let e = d.alter(true, &[AlterOp { op: 2, name: "log.cleanup.policy", value: Some("compact") }], false);
        assert_eq!(e.unwrap_err().code, errors::INVALID_REQUEST);
    }

    #[test]
    fn uring_prepares_the_cores_before_a_read_path_change() {
        let d = DynamicConfig::new(&config(ServerModel::Uring, ReadPathKind::UringSplice));
        let e = d.alter(true, &[set(READ_PATH, "sendfile")], false).unwrap_err();
        assert!(e.message.contains("cannot run read path sendfile"), "{e}");
        let e = d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap_err();
        assert!(e.message.contains("the uring cores are not running"), "{e}");
        let asked = std::sync::Arc::new(Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&asked);
        d.set_preparer(Box::new(move |kind| {
            seen.lock().unwrap().push(kind);
            match kind {
                ReadPathKind::UringSendZc => Err("core 0 cannot run it: no SEND_ZC".into()),
                _ => Ok(()),
            }
        }));
        let e = d.alter(true, &[set(READ_PATH, "uring-send-zc")], false).unwrap_err();
        assert_eq!(e.code, errors::INVALID_REQUEST);
        assert!(e.message.contains("Invalid value uring-send-zc for configuration read.path: core 0"), "{e}");
        assert_eq!(d.read_path(), ReadPathKind::UringSplice, "a refused preparation changes nothing");
        assert_eq!(d.describe_read_path(true).len(), 1, "nothing stored");
        d.alter(true, &[set(READ_PATH, "uring-read-send")], true).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::UringSplice, "validate_only prepares, changes nothing");
        d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::UringReadSend);
        d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap();
        let asked = asked.lock().unwrap().clone();
        assert_eq!(
            asked,
            [ReadPathKind::UringSendZc, ReadPathKind::UringReadSend, ReadPathKind::UringReadSend],
            "the current path is not prepared again"
        );
    }

    #[test]
    fn broker_keys_report_static_values_and_defaults() {
        let mut c = config(ServerModel::Threaded, ReadPathKind::Copy);
        c.num_io_threads = 4;
        c.log_config.set("log.retention.ms", "1000").unwrap();
        let keys = broker_keys(&c);
        let find = |n: &str| keys.iter().find(|k| k.name == n).unwrap().clone();
        let values = |n: &str| find(n).synonyms.into_iter().map(|(_, v, s)| (v, s)).collect::<Vec<_>>();
        assert_eq!(values("num.io.threads"), [("4".into(), 4), ("8".into(), 5)]);
        assert_eq!(values("num.partitions"), [("1".into(), 5)]);
        assert_eq!(values("read.path")[0], ("copy".into(), 4));
        assert!(find("read.path").dynamic && !find("server.model").dynamic);
        assert_eq!(values("log.retention.ms"), [("1000".into(), 4), ("604800000".into(), 5)]);
        assert_eq!(find("log.cleanup.policy").config_type, ConfigType::List);
    }
}
