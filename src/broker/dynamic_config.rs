//! Dynamic broker configs (Kafka's KIP-226, `DynamicBrokerConfig`): the broker keys that
//! DescribeConfigs reports ([`BROKER_KEYS`]), the keys that IncrementalAlterConfigs may change
//! at runtime ([`DYNAMIC_KEYS`]: [`READ_PATH`], [`SERVER_MODEL`]), and [`DynamicConfig`], the
//! broker's current dynamic values.
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
//! [`DYNAMIC_KEYS`]: `read.path` and `server.model` (fetchbench's own keys; values the
//! [`ReadPathKind`] and [`ServerModel`] names); every other key of [`BROKER_KEYS`] is read-only.
//! The effective pair must be one the model runs ([`ServerModel::supports`]): `server.model=uring`
//! with a blocking `read.path` is refused, naming the key that changed (both may change in one
//! request).
//!
//! A change of `server.model` applies to connections accepted after the answer; the open ones
//! stay on the front end that accepted them until they close (as Kafka's connections stay on a
//! listener removed dynamically). Before the change the new model's front end is made ready
//! (started if it never ran) through the installed [`FrontEndSwitch`] (`front_end.rs`); after
//! it, the accepting moves over ([`FrontEndSwitch::accept_on`]). `validate_only` probes the model
//! ([`ServerModel::probe`]) and starts nothing.
//!
//! A change of `read.path` applies to Fetch responses started after it: under
//! `server.model=threaded` each io thread compares its own read path with
//! [`DynamicConfig::read_path`] (one atomic load) before each Fetch response and makes a new one
//! when they differ; no lock is taken on the Fetch path. Under `server.model=uring` the new
//! value is first prepared on every core ([`FrontEndSwitch::prepare`]: each core checks the
//! opcodes of the path's engine on its own ring and registers the buffers it needs,
//! `uring/start.rs`), and only then made current; each core
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
//! | a read-only key | `INVALID_REQUEST` "Cannot update these configs dynamically: Set(num.io.threads)" |
//! | a bad `server.model` value, a model this machine cannot run ([`ServerModel::probe`]), one that cannot run the effective `read.path`, or a front end that could not be made ready | `INVALID_REQUEST` "Invalid value x for configuration server.model: reason" |
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
/// [`ReadPathKind`] name); dynamic.
pub(crate) const READ_PATH: &str = "read.path";
/// `server.model`: fetchbench's own broker key, the front end that accepts new connections (a
/// [`ServerModel`] name); dynamic.
pub(crate) const SERVER_MODEL: &str = "server.model";
/// The dynamic broker keys: the only ones IncrementalAlterConfigs changes.
pub(crate) const DYNAMIC_KEYS: [&str; 2] = [READ_PATH, SERVER_MODEL];

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
    /// Whether IncrementalAlterConfigs may change it ([`DYNAMIC_KEYS`] only).
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
    BrokerKey {
        name: SERVER_MODEL,
        config_type: ConfigType::String,
        dynamic: true,
        default: Some("threaded"),
        value: |c| c.server_model.name().to_string(),
        doc: "fetchbench: the front end of new connections, threaded or uring; dynamic: the open connections stay \
              on the model that accepted them until they close",
    },
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
    key!("transaction.state.log.num.partitions", Int, Some("50"), "Partitions of __transaction_state", |c| c
        .transaction_state_log_num_partitions),
    key!("transaction.max.timeout.ms", Int, Some("900000"), "Largest transaction.timeout.ms accepted", |c| c
        .transaction_max_timeout_ms),
    key!("transactional.id.expiration.ms", Int, Some("604800000"), "Idle transactional ids removed after this", |c| c
        .transactional_id_expiration_ms),
    key!(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        Int,
        Some("10000"),
        "How often timed-out transactions are aborted",
        |c| c.transaction_abort_timed_out_transaction_cleanup_interval_ms
    ),
    key!(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        Int,
        Some("3600000"),
        "How often expired transactional ids are removed",
        |c| c.transaction_remove_expired_transaction_cleanup_interval_ms
    ),
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
/// start). Dynamic values are not applied here ([`DynamicConfig::describe_dynamic`]).
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

/// The broker's front ends as IncrementalAlterConfigs drives them (`front_end.rs` implements
/// it): getting ready for a new effective (server model, read path) before it is made current,
/// and moving the accepting of new connections to a model after.
pub(crate) trait FrontEndSwitch: Send + Sync {
    /// Gets the front ends ready to serve new connections under `model` with read path `path`
    /// (under `uring`: the cores started if they are not, every core prepared for `path`; under
    /// `threaded`: the network threads and the acceptor started if they are not), accepting
    /// nothing new yet. Errors: why it cannot, as a sentence.
    fn prepare(&self, model: ServerModel, path: ReadPathKind) -> Result<(), String>;
    /// New connections go to `model` from now on; the other model's front end stops accepting
    /// (its connections stay on it until they close).
    fn accept_on(&self, model: ServerModel);
}

/// The installed [`FrontEndSwitch`] (a newtype for `Debug`).
struct Installed(Box<dyn FrontEndSwitch>);

impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrontEndSwitch")
    }
}

/// The broker's dynamic config: the per-broker and cluster-default layers of the dynamic keys
/// and the effective read path and server model (each read with one atomic load). What each
/// read path moved is counted by the metrics registry (`metrics_registry.rs`).
#[derive(Debug)]
pub(crate) struct DynamicConfig {
    static_read_path: ReadPathKind,
    static_server_model: ServerModel,
    /// Index in [`ReadPathKind::ALL`] of the effective read path.
    read_path: AtomicUsize,
    /// Index in [`ServerModel::ALL`] of the effective server model (new connections').
    server_model: AtomicUsize,
    /// (per broker, cluster default); taken only by DescribeConfigs and IncrementalAlterConfigs.
    layers: Mutex<(Layer, Layer)>,
    /// The front ends, once started.
    front_end: OnceLock<Installed>,
}

fn kind_index(kind: ReadPathKind) -> usize {
    ReadPathKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

fn model_index(model: ServerModel) -> usize {
    ServerModel::ALL.iter().position(|m| *m == model).unwrap_or(0)
}

impl DynamicConfig {
    /// No dynamic value yet: the effective read path and server model are `config`'s.
    pub(crate) fn new(config: &BrokerConfig) -> DynamicConfig {
        DynamicConfig {
            static_read_path: config.read_path,
            static_server_model: config.server_model,
            read_path: AtomicUsize::new(kind_index(config.read_path)),
            server_model: AtomicUsize::new(model_index(config.server_model)),
            layers: Mutex::default(),
            front_end: OnceLock::new(),
        }
    }

    /// Installs the broker's front ends ([`FrontEndSwitch`]): [`Self::alter`] asks them to get
    /// ready before it changes the effective server model, or the read path under `uring`, and
    /// refuses the change with their reason. Set once, when the front end has started; a second
    /// call is ignored.
    pub(crate) fn set_front_end(&self, front_end: Box<dyn FrontEndSwitch>) {
        let _ = self.front_end.set(Installed(front_end));
    }

    /// The effective read path: what new Fetch responses are written with (one atomic load).
    pub(crate) fn read_path(&self) -> ReadPathKind {
        ReadPathKind::ALL[self.read_path.load(Ordering::Acquire)]
    }

    /// The effective server model: the front end that accepts new connections (one atomic
    /// load). Connections accepted before a change stay on the model that accepted them.
    pub(crate) fn server_model(&self) -> ServerModel {
        ServerModel::ALL[self.server_model.load(Ordering::Acquire)]
    }

    fn layers(&self) -> std::sync::MutexGuard<'_, (Layer, Layer)> {
        // A panic while holding it cannot leave the maps half-changed (they are replaced whole).
        self.layers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Dynamic key `key`'s synonyms in precedence order, `(value, source)`: the per-broker
    /// value (`DYNAMIC_BROKER_CONFIG`), the cluster default (`DYNAMIC_DEFAULT_BROKER_CONFIG`),
    /// the static value (`STATIC_BROKER_CONFIG`, `read.path` always, `server.model` when not
    /// Kafka's default `threaded`), then `DEFAULT_CONFIG` for `server.model`; for the default
    /// resource (`per_broker` false) only the cluster default, as Kafka's
    /// `ConfigHelper.createBrokerConfigEntry`. Empty for a key that is not dynamic.
    pub(crate) fn describe_dynamic(&self, key: &str, per_broker: bool) -> Vec<(String, i8)> {
        let static_values: Vec<(String, i8)> = match key {
            READ_PATH => vec![(self.static_read_path.name().to_string(), ConfigSource::StaticBroker as i8)],
            SERVER_MODEL if self.static_server_model == ServerModel::default() => {
                vec![(ServerModel::default().name().to_string(), ConfigSource::Default as i8)]
            }
            SERVER_MODEL => vec![
                (self.static_server_model.name().to_string(), ConfigSource::StaticBroker as i8),
                (ServerModel::default().name().to_string(), ConfigSource::Default as i8),
            ],
            _ => return Vec::new(),
        };
        let layers = self.layers();
        let mut out = Vec::new();
        if per_broker {
            if let Some(v) = layers.0.get(key) {
                out.push((v.clone(), DYNAMIC_BROKER_CONFIG));
            }
        }
        if let Some(v) = layers.1.get(key) {
            out.push((v.clone(), DYNAMIC_DEFAULT_BROKER_CONFIG));
        }
        if per_broker {
            out.extend(static_values);
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
        let read_only: Vec<&str> = changed.iter().copied().filter(|k| !DYNAMIC_KEYS.contains(k)).collect();
        if !read_only.is_empty() {
            return Err(AlterError::new(
                errors::INVALID_REQUEST,
                format!("Cannot update these configs dynamically: Set({})", read_only.join(", ")),
            ));
        }
        let (broker_layer, default_layer) = if per_broker { (&layer, &layers.1) } else { (&layers.0, &layer) };
        // The effective values, each level's value checked on its own first.
        let mut model = self.static_server_model;
        let mut path = self.static_read_path;
        for level in [default_layer, broker_layer] {
            if let Some(v) = level.get(SERVER_MODEL) {
                model = check_server_model(v)?;
            }
            if let Some(v) = level.get(READ_PATH) {
                path = check_read_path(v)?;
            }
        }
        let (current_model, current_path) = (self.server_model(), self.read_path());
        if model != current_model {
            model.probe().map_err(|e| invalid(SERVER_MODEL, model.name(), e.to_string()))?;
        }
        if let Err(e) = model.supports(path) {
            // Named after the key that changed: a new path the model cannot run, or a new model
            // that cannot run the path.
            return Err(if path != current_path || model == current_model {
                invalid(READ_PATH, path.name(), e.to_string())
            } else {
                invalid(
                    SERVER_MODEL,
                    model.name(),
                    format!("{e}; set read.path to one it runs first, or in the same request"),
                )
            });
        }
        if path != current_path && model == ServerModel::Threaded {
            path.probe().map_err(|e| invalid(READ_PATH, path.name(), e.to_string()))?;
        }
        let switch = (model, path) != (current_model, current_path);
        // The front end's own preparation (under uring the cores' check of the path, their
        // registered buffers) runs for validate_only too when the model stays: it is the probe of
        // the value; a model change is only probed (above) under validate_only, nothing started.
        let prepare = switch && (model == ServerModel::Uring || model != current_model);
        if prepare && !(validate_only && model != current_model) {
            let front_end = self
                .front_end
                .get()
                .ok_or_else(|| invalid(READ_PATH, path.name(), "the front end is not running".into()))?;
            front_end.0.prepare(model, path).map_err(|reason| {
                if model != current_model {
                    invalid(SERVER_MODEL, model.name(), reason)
                } else {
                    invalid(READ_PATH, path.name(), reason)
                }
            })?;
        }
        if validate_only {
            return Ok(());
        }
        if per_broker {
            layers.0 = layer;
        } else {
            layers.1 = layer;
        }
        self.read_path.store(kind_index(path), Ordering::Release);
        self.server_model.store(model_index(model), Ordering::Release);
        if path != current_path {
            tracing::info!("read.path changed from {current_path} to {path}: new Fetch responses use {path}");
        }
        if model != current_model {
            if let Some(front_end) = self.front_end.get() {
                front_end.0.accept_on(model);
            }
            tracing::info!(
                "server.model changed from {current_model} to {model}: new connections go to {model}, the open ones \
                 stay on {current_model} until they close"
            );
        }
        Ok(())
    }
}

/// Kafka's refusal of a bad value: `INVALID_REQUEST` "Invalid value v for configuration k: reason".
fn invalid(key: &str, value: &str, reason: String) -> AlterError {
    AlterError::new(errors::INVALID_REQUEST, format!("Invalid value {value} for configuration {key}: {reason}"))
}

/// Parses a `read.path` value: a known path, not `null` (it sends zeros). Whether this machine
/// and the server model run it is checked on the effective value ([`DynamicConfig::alter`]).
fn check_read_path(value: &str) -> Result<ReadPathKind, AlterError> {
    let kind: ReadPathKind = value
        .trim()
        .parse()
        .map_err(|e: crate::read_path::UnknownReadPath| invalid(READ_PATH, value, e.to_string()))?;
    if kind == ReadPathKind::Null {
        return Err(invalid(
            READ_PATH,
            value,
            "null sends zeros, not records: it is a baseline for `read-paths` only".into(),
        ));
    }
    Ok(kind)
}

/// Parses a `server.model` value (`threaded`, `uring`).
fn check_server_model(value: &str) -> Result<ServerModel, AlterError> {
    value
        .trim()
        .parse()
        .map_err(|e: super::server_model::UnknownServerModel| invalid(SERVER_MODEL, value, e.to_string()))
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
        assert_eq!(d.describe_dynamic(READ_PATH, true).iter().map(|s| s.1).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(d.describe_dynamic(READ_PATH, false), [("mmap".to_string(), 3)]);
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
                vec![set(READ_PATH, "mmap"), set("num.io.threads", "2")],
                errors::INVALID_REQUEST,
                "Cannot update these configs dynamically: Set(num.io.threads)",
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
            assert_eq!(d.describe_dynamic(READ_PATH, true).len(), 1, "nothing stored");
        }
        d.alter(true, &[set(READ_PATH, "mmap")], true).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::Copy, "validate_only changes nothing");
        // APPEND on a list key passes the list check, then is refused as read-only.
        let e = d.alter(true, &[AlterOp { op: 2, name: "log.cleanup.policy", value: Some("compact") }], false);
        assert_eq!(e.unwrap_err().code, errors::INVALID_REQUEST);
    }

    /// A front end that records what it is asked and refuses `uring-send-zc`.
    #[derive(Default)]
    struct FakeFrontEnd {
        prepared: Mutex<Vec<(ServerModel, ReadPathKind)>>,
        accepting: Mutex<Vec<ServerModel>>,
    }

    impl FrontEndSwitch for std::sync::Arc<FakeFrontEnd> {
        fn prepare(&self, model: ServerModel, path: ReadPathKind) -> Result<(), String> {
            self.prepared.lock().unwrap().push((model, path));
            match path {
                ReadPathKind::UringSendZc => Err("core 0 cannot run it: no SEND_ZC".into()),
                _ => Ok(()),
            }
        }
        fn accept_on(&self, model: ServerModel) {
            self.accepting.lock().unwrap().push(model);
        }
    }

    #[test]
    fn uring_prepares_the_cores_before_a_read_path_change() {
        let d = DynamicConfig::new(&config(ServerModel::Uring, ReadPathKind::UringSplice));
        let e = d.alter(true, &[set(READ_PATH, "sendfile")], false).unwrap_err();
        assert!(e.message.contains("cannot run read path sendfile"), "{e}");
        let e = d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap_err();
        assert!(e.message.contains("the front end is not running"), "{e}");
        let front = std::sync::Arc::new(FakeFrontEnd::default());
        d.set_front_end(Box::new(std::sync::Arc::clone(&front)));
        let e = d.alter(true, &[set(READ_PATH, "uring-send-zc")], false).unwrap_err();
        assert_eq!(e.code, errors::INVALID_REQUEST);
        assert!(e.message.contains("Invalid value uring-send-zc for configuration read.path: core 0"), "{e}");
        assert_eq!(d.read_path(), ReadPathKind::UringSplice, "a refused preparation changes nothing");
        assert_eq!(d.describe_dynamic(READ_PATH, true).len(), 1, "nothing stored");
        d.alter(true, &[set(READ_PATH, "uring-read-send")], true).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::UringSplice, "validate_only prepares, changes nothing");
        d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap();
        assert_eq!(d.read_path(), ReadPathKind::UringReadSend);
        d.alter(true, &[set(READ_PATH, "uring-read-send")], false).unwrap();
        let asked: Vec<ReadPathKind> = front.prepared.lock().unwrap().iter().map(|(_, p)| *p).collect();
        assert_eq!(
            asked,
            [ReadPathKind::UringSendZc, ReadPathKind::UringReadSend, ReadPathKind::UringReadSend],
            "the current path is not prepared again"
        );
        assert!(front.accepting.lock().unwrap().is_empty(), "the model did not change");
    }

    #[test]
    fn server_model_switches_after_the_front_end_is_ready_and_only_with_a_path_it_runs() {
        let d = DynamicConfig::new(&config(ServerModel::Threaded, ReadPathKind::Sendfile));
        let front = std::sync::Arc::new(FakeFrontEnd::default());
        d.set_front_end(Box::new(std::sync::Arc::clone(&front)));
        let e = d.alter(true, &[set(SERVER_MODEL, "uring")], false).unwrap_err();
        assert_eq!(e.code, errors::INVALID_REQUEST);
        assert!(e.message.starts_with("Invalid value uring for configuration server.model: "), "{e}");
        assert!(e.message.contains("cannot run read path sendfile") && e.message.contains("same request"), "{e}");
        let e = d.alter(true, &[set(SERVER_MODEL, "reactor")], false).unwrap_err();
        assert!(e.message.contains("unknown server model"), "{e}");
        assert_eq!((d.server_model(), d.read_path()), (ServerModel::Threaded, ReadPathKind::Sendfile));
        assert!(front.prepared.lock().unwrap().is_empty(), "nothing prepared for a refused switch");
        if ServerModel::Uring.probe().is_err() {
            return; // The switch itself needs io_uring here (probed before the front end is asked).
        }
        d.alter(true, &[set(SERVER_MODEL, "uring"), set(READ_PATH, "uring-splice")], true).unwrap();
        assert_eq!(d.server_model(), ServerModel::Threaded, "validate_only changes nothing");
        assert!(front.prepared.lock().unwrap().is_empty(), "validate_only starts no front end");
        d.alter(true, &[set(SERVER_MODEL, "uring"), set(READ_PATH, "uring-splice")], false).unwrap();
        assert_eq!((d.server_model(), d.read_path()), (ServerModel::Uring, ReadPathKind::UringSplice));
        assert_eq!(*front.prepared.lock().unwrap(), [(ServerModel::Uring, ReadPathKind::UringSplice)]);
        assert_eq!(*front.accepting.lock().unwrap(), [ServerModel::Uring]);
        let described = d.describe_dynamic(SERVER_MODEL, true);
        assert_eq!(described, [("uring".to_string(), DYNAMIC_BROKER_CONFIG), ("threaded".to_string(), 5)]);
        // Under uring, a blocking path is refused for read.path; back to threaded, then it runs.
        let e = d.alter(true, &[set(READ_PATH, "sendfile")], false).unwrap_err();
        assert!(e.message.starts_with("Invalid value sendfile for configuration read.path"), "{e}");
        d.alter(true, &[AlterOp { op: 1, name: SERVER_MODEL, value: None }], false).unwrap();
        assert_eq!(d.server_model(), ServerModel::Threaded);
        d.alter(true, &[set(READ_PATH, "sendfile")], false).unwrap();
        assert_eq!(*front.accepting.lock().unwrap(), [ServerModel::Uring, ServerModel::Threaded]);
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
        assert!(find("read.path").dynamic && find("server.model").dynamic && !find("num.io.threads").dynamic);
        assert_eq!(values("log.retention.ms"), [("1000".into(), 4), ("604800000".into(), 5)]);
        assert_eq!(find("log.cleanup.policy").config_type, ConfigType::List);
    }
}
