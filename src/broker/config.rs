//! [`BrokerConfig`]: the broker's settings, with Kafka's names (`server.properties`), read from
//! `--config` / `-X` by [`BrokerConfig::apply_props`]; [`NOT_APPLICABLE_KEYS`], the Kafka
//! settings accepted with a warning because one node has nothing they could apply to; and the
//! group coordinator's configuration derived from the `group.*` / `offsets.*` settings
//! ([`BrokerConfig::coordinator_config`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::coordinator::group::GroupConfig;
use super::coordinator::runtime::CoordinatorConfig;
use super::error::BrokerError;
use super::server_model::{ServerModel, UnknownServerModel};
use super::txn_coordinator::decisions::{
    DEFAULT_ABORT_TIMED_OUT_TRANSACTIONS_INTERVAL_MS, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
};
use crate::log::scheduler::{SchedulerConfig, DEFAULT_CHECKPOINT_INTERVAL_MS};
use crate::log::LogConfig;
use crate::protocol::frame::DEFAULT_SOCKET_REQUEST_MAX_BYTES;
use crate::protocol::transaction_state::DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS;
use crate::read_path::{ReadPathConfig, ReadPathKind};

/// Broker configuration, with Kafka's names where Kafka has the setting.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Address to listen on (port 0: any free port; see
    /// [`BrokerHandle::local_addr`](crate::broker::server::BrokerHandle::local_addr)).
    pub listen: SocketAddr,
    /// The log directory (`log.dirs`, one directory).
    pub log_dir: PathBuf,
    /// How Fetch responses move record bytes to the socket.
    pub read_path: ReadPathKind,
    /// Buffer and pipe sizes of the read path.
    pub read_path_config: ReadPathConfig,
    /// `server.model` (default `threaded`): how connections are run, Kafka's network and io
    /// threads or one io_uring loop per core ([`ServerModel`]).
    pub server_model: ServerModel,
    /// `server.uring.cores` (default 0: one per CPU the broker may run on): the cores, each one
    /// thread with its own ring, of `server.model=uring`; unused by `threaded`.
    pub uring_cores: usize,
    /// Broker-level log configuration (`log.*`), the defaults of every partition.
    pub log_config: LogConfig,
    /// `auto.create.topics.enable` (Kafka default true): Metadata requests create unknown topics.
    pub auto_create_topics_enable: bool,
    /// `num.partitions` (Kafka default 1): partitions of an auto-created topic.
    pub num_partitions: i32,
    /// `socket.request.max.bytes` (Kafka default 100 MiB): the largest request frame, in bytes
    /// after the 4-byte size.
    pub socket_request_max_bytes: usize,
    /// `max.connections` (Kafka default `Int.MaxValue`): open client connections, broker-wide.
    /// A connection past the limit is closed at once with a warning (Kafka instead stops
    /// accepting until a slot frees; one node has no inter-broker listener to exempt).
    pub max_connections: usize,
    /// `max.connections.per.ip` (Kafka default `Int.MaxValue`): open connections from one IP
    /// address; a connection past it is closed at once with a warning, as Kafka's
    /// `ConnectionQuotas` does (`TooManyConnectionsException`).
    pub max_connections_per_ip: usize,
    /// `num.network.threads` (Kafka default 3): network threads, each reading the requests and
    /// noticing the hang-ups of its share of the connections (Kafka's `SocketServer` processors).
    pub num_network_threads: usize,
    /// `num.io.threads` (Kafka default 8): io threads, which decode and handle requests and write
    /// their responses (Kafka's `KafkaRequestHandlerPool`); each makes its own read path.
    pub num_io_threads: usize,
    /// `queued.max.requests` (Kafka default 500): requests read and waiting for an io thread; a
    /// network thread that finds the queue full waits (and reads nothing) until there is room.
    pub queued_max_requests: usize,
    /// `connections.max.idle.ms` (Kafka default 600000 = 10 min): a connection with no complete
    /// request and no response in flight for this long is closed, one stuck inside a frame too;
    /// `None` (a negative value) never closes one, as in Kafka.
    pub connections_max_idle_ms: Option<u64>,
    /// Test-only, not a Kafka config and no `-X` key: a busy spin of this many nanoseconds per
    /// MiB of record bytes after each Fetch response ([`crate::broker::planted`]), the known cost
    /// a CI gate is calibrated against. 0 (the default): none. Set only by `fetchbench run` from
    /// [`crate::broker::planted::ENV`].
    pub planted_fetch_cost_ns_per_mib: u64,
    /// `group.initial.rebalance.delay.ms` (Kafka default 3000): how long the group coordinator
    /// waits for more members before the first rebalance of an empty group.
    pub group_initial_rebalance_delay_ms: i32,
    /// `group.min.session.timeout.ms` (Kafka default 6000): the smallest session timeout a
    /// member may ask for (`INVALID_SESSION_TIMEOUT` below it).
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (Kafka default 1800000): the largest session timeout a
    /// member may ask for.
    pub group_max_session_timeout_ms: i32,
    /// `group.max.size` (Kafka default `Int.MaxValue`): members per consumer group
    /// (`GROUP_MAX_SIZE_REACHED` past it).
    pub group_max_size: i32,
    /// `offsets.topic.num.partitions` (Kafka default 50): partitions of `__consumer_offsets`,
    /// the modulus of the coordinator choice `abs(groupId.hashCode()) % n`.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.retention.minutes` (Kafka default 10080 = 7 days): how long an Empty group's
    /// committed offsets are kept (KIP-211).
    pub offsets_retention_minutes: i32,
    /// `offsets.retention.check.interval.ms` (Kafka default 600000): how often expired offsets
    /// are looked for.
    pub offsets_retention_check_interval_ms: i32,
    /// `offset.metadata.max.bytes` (Kafka default 4096): the longest commit metadata string.
    pub offset_metadata_max_bytes: i32,
    /// `transaction.state.log.num.partitions` (Kafka default 50): partitions `__transaction_state`
    /// is created with (an existing topic keeps its count), the modulus of the transaction
    /// coordinator's choice `abs(transactionalId.hashCode()) % n`.
    pub transaction_state_log_num_partitions: i32,
    /// `transaction.max.timeout.ms` (Kafka default 900000 = 15 min): the largest
    /// `transaction.timeout.ms` InitProducerId accepts (`INVALID_TRANSACTION_TIMEOUT` above it).
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (Kafka default 604800000 = 7 days): a transactional id
    /// with no transaction open and no request for this long is removed.
    pub transactional_id_expiration_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` (Kafka default 10000): how
    /// often transactions open longer than their `transaction.timeout.ms` are looked for and
    /// aborted.
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: i32,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` (Kafka default 3600000): how
    /// often expired transactional ids are looked for.
    pub transaction_remove_expired_transaction_cleanup_interval_ms: i32,
    /// `advertised.listeners`' PLAINTEXT (host, port): what Metadata and FindCoordinator tell
    /// clients to connect to. `None`: the bound address, or this machine's host name when bound
    /// to a wildcard address (as Kafka advertises `listeners` when `advertised.listeners` is
    /// unset).
    pub advertised_listener: Option<(String, u16)>,
    /// `log.flush.scheduler.interval.ms` (Kafka default `Long.MAX_VALUE`): how often the log
    /// scheduler checks `flush.ms`; checked at least every second whatever its value (see
    /// [`scheduler`](crate::log::scheduler)). Also a broker synonym of `flush.ms`, as in Kafka.
    pub log_flush_scheduler_interval_ms: i64,
    /// `log.flush.offset.checkpoint.interval.ms` (Kafka default 60000): how often the log
    /// scheduler writes `recovery-point-offset-checkpoint` (0: only at shutdown).
    pub log_flush_offset_checkpoint_interval_ms: i32,
    /// `log.flush.start.offset.checkpoint.interval.ms` (Kafka default 60000): how often the log
    /// scheduler writes `log-start-offset-checkpoint` (0: only at shutdown).
    pub log_flush_start_offset_checkpoint_interval_ms: i32,
    /// `metrics.listen` (fetchbench's own; default unset: no endpoint): the `HOST:PORT` on which
    /// the broker serves `GET /metrics`, its metrics in the OpenMetrics text format (port 0: any
    /// free port, see [`BrokerHandle::metrics_addr`](crate::broker::server::BrokerHandle::metrics_addr));
    /// see [`metrics_endpoint`](crate::broker::metrics_endpoint).
    pub metrics_listen: Option<SocketAddr>,
}

/// Kafka broker configs that `apply_props` accepts but does not apply, because they concern
/// replication, KRaft, security, threads or other brokers (a single node has none of those), with
/// the reason given in the warning logged once per key. A `server.properties` shipped with Kafka
/// 4 (`config/server.properties`) or 3.x (`config/kraft/server.properties`, the ZooKeeper
/// `config/server.properties`) loads with only these warnings; any key neither applied nor
/// listed here is refused, so a typo is not silently ignored.
pub(crate) const NOT_APPLICABLE_KEYS: &[(&str, &str)] = &[
    ("process.roles", "KRaft roles: this broker is its own controller"),
    ("node.id", "the node id is always 0"),
    ("broker.id", "the node id is always 0"),
    ("controller.quorum.voters", "no KRaft quorum"),
    ("controller.quorum.bootstrap.servers", "no KRaft quorum"),
    ("controller.listener.names", "no controller listener"),
    ("inter.broker.listener.name", "no other brokers"),
    ("listener.security.protocol.map", "only PLAINTEXT is served"),
    ("security.inter.broker.protocol", "no other brokers"),
    ("num.replica.fetchers", "no replication"),
    ("socket.send.buffer.bytes", "kernel defaults are used"),
    ("socket.receive.buffer.bytes", "kernel defaults are used"),
    ("num.recovery.threads.per.data.dir", "recovery runs on one thread"),
    ("log.retention.check.interval.ms", "no background retention thread"),
    ("log.cleaner.enable", "no background cleaner thread"),
    ("log.cleaner.threads", "no background cleaner thread"),
    ("offsets.topic.replication.factor", "one replica"),
    ("transaction.state.log.replication.factor", "one replica"),
    ("transaction.state.log.min.isr", "one replica"),
    ("share.coordinator.state.topic.replication.factor", "one replica; no share groups"),
    ("share.coordinator.state.topic.min.isr", "one replica; no share groups"),
    ("default.replication.factor", "one replica"),
    ("min.insync.replicas", "one replica"),
    ("unclean.leader.election.enable", "one replica"),
    ("auto.leader.rebalance.enable", "one leader"),
    ("controlled.shutdown.enable", "no controller to hand leadership to"),
    ("delete.topic.enable", "topics are not deleted"),
    ("metadata.log.dir", "no KRaft metadata log"),
    ("zookeeper.connect", "no ZooKeeper"),
    ("zookeeper.connection.timeout.ms", "no ZooKeeper"),
    ("broker.rack", "one rack"),
];

/// The listen address when neither `--listen` nor `listeners` gives one (Kafka's 9092, on
/// loopback).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9092";

impl BrokerConfig {
    /// Kafka's defaults, listening on `listen`, storing in `log_dir`, serving with `read_path`.
    pub fn new(listen: SocketAddr, log_dir: impl Into<PathBuf>, read_path: ReadPathKind) -> Self {
        BrokerConfig {
            listen,
            log_dir: log_dir.into(),
            read_path,
            read_path_config: ReadPathConfig::default(),
            server_model: ServerModel::Threaded,
            uring_cores: 0,
            log_config: LogConfig::default(),
            auto_create_topics_enable: true,
            num_partitions: 1,
            socket_request_max_bytes: DEFAULT_SOCKET_REQUEST_MAX_BYTES,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            num_network_threads: 3,
            num_io_threads: 8,
            queued_max_requests: 500,
            connections_max_idle_ms: Some(600_000),
            planted_fetch_cost_ns_per_mib: 0,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            group_max_size: i32::MAX,
            offsets_topic_num_partitions: 50,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            transaction_state_log_num_partitions: DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS,
            transaction_max_timeout_ms: DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            transactional_id_expiration_ms: DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
            transaction_abort_timed_out_transaction_cleanup_interval_ms:
                DEFAULT_ABORT_TIMED_OUT_TRANSACTIONS_INTERVAL_MS,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            advertised_listener: None,
            log_flush_scheduler_interval_ms: i64::MAX,
            log_flush_offset_checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS as i32,
            log_flush_start_offset_checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS as i32,
            metrics_listen: None,
        }
    }

    /// Applies broker properties (`server.properties` names, as `--config` and `-X` give them):
    ///
    /// - `read.path` (fetchbench's own key: a read path name; the CLI's `--read-path` is
    ///   overridden by it);
    /// - `auto.create.topics.enable`, `num.partitions`, `socket.request.max.bytes`,
    ///   `max.connections`, `max.connections.per.ip`;
    /// - the log scheduler's `log.flush.scheduler.interval.ms` (also the `flush.ms` synonym),
    ///   `log.flush.offset.checkpoint.interval.ms`, `log.flush.start.offset.checkpoint.interval.ms`;
    /// - the threads and queues: `num.network.threads`, `num.io.threads`, `queued.max.requests`
    ///   (each at least 1), `connections.max.idle.ms` (a 64-bit count of milliseconds; negative:
    ///   never);
    /// - the group coordinator's `group.initial.rebalance.delay.ms`,
    ///   `group.min.session.timeout.ms`, `group.max.session.timeout.ms`, `group.max.size`,
    ///   `offsets.topic.num.partitions`, `offsets.retention.minutes`,
    ///   `offsets.retention.check.interval.ms`, `offset.metadata.max.bytes`;
    /// - the transaction coordinator's `transaction.state.log.num.partitions`,
    ///   `transaction.max.timeout.ms`, `transactional.id.expiration.ms`,
    ///   `transaction.abort.timed.out.transaction.cleanup.interval.ms`,
    ///   `transaction.remove.expired.transaction.cleanup.interval.ms` (each at least 1);
    /// - `log.dirs` (comma-separated; the first directory is served, more are warned about) or
    ///   `log.dir` (used when `log.dirs` is absent, as in Kafka) sets [`Self::log_dir`];
    /// - `listeners`: the first listener that is not a controller listener
    ///   (`controller.listener.names`) and whose security protocol is PLAINTEXT (through
    ///   `listener.security.protocol.map`, else its name) sets [`Self::listen`]; an empty host
    ///   (`PLAINTEXT://:9092`) binds every interface, as in Kafka;
    /// - `metrics.listen` (fetchbench's own): an `IP:PORT` socket address for the metrics
    ///   endpoint ([`Self::metrics_listen`]);
    /// - every `log.*` synonym that [`LogConfig::from_broker_props`] knows;
    /// - the keys in [`NOT_APPLICABLE_KEYS`]: one warning each, otherwise ignored.
    ///
    /// Other keys are refused, so a typo is not ignored. Command-line flags (`--listen`,
    /// `--log-dir`) are applied after this by the caller and win.
    ///
    /// Errors: [`BrokerError::Config`] naming the key; [`BrokerError::Log`] for a bad `log.*` value.
    pub fn apply_props(&mut self, props: &BTreeMap<String, String>) -> Result<(), BrokerError> {
        let bad = |key: &str, value: &str, reason: &str| BrokerError::Config {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let int = |key: &str, value: &str, min: i32| -> Result<i32, BrokerError> {
            let n: i32 = value.trim().parse().map_err(|_| bad(key, value, "expected a 32-bit integer"))?;
            if n < min {
                return Err(bad(key, value, &format!("must be at least {min}")));
            }
            Ok(n)
        };
        let mut log_props = BTreeMap::new();
        for (key, value) in props {
            match key.as_str() {
                "auto.create.topics.enable" => {
                    self.auto_create_topics_enable =
                        value.trim().parse().map_err(|_| bad(key, value, "expected true or false"))?;
                }
                "num.partitions" => self.num_partitions = int(key, value, 1)?,
                "socket.request.max.bytes" => self.socket_request_max_bytes = int(key, value, 1)? as usize,
                "max.connections" => self.max_connections = int(key, value, 0)? as usize,
                "max.connections.per.ip" => self.max_connections_per_ip = int(key, value, 0)? as usize,
                "num.network.threads" => self.num_network_threads = int(key, value, 1)? as usize,
                "num.io.threads" => self.num_io_threads = int(key, value, 1)? as usize,
                "server.model" => {
                    self.server_model =
                        value.trim().parse().map_err(|e: UnknownServerModel| bad(key, value, &e.to_string()))?;
                }
                "server.uring.cores" => self.uring_cores = int(key, value, 0)? as usize,
                // fetchbench's own key, dynamic (IncrementalAlterConfigs; `dynamic_config`).
                "read.path" => {
                    self.read_path = value
                        .trim()
                        .parse()
                        .map_err(|e: crate::read_path::UnknownReadPath| bad(key, value, &e.to_string()))?;
                }
                "queued.max.requests" => self.queued_max_requests = int(key, value, 1)? as usize,
                "connections.max.idle.ms" => {
                    let ms: i64 = value.trim().parse().map_err(|_| bad(key, value, "expected a 64-bit integer"))?;
                    self.connections_max_idle_ms = u64::try_from(ms).ok();
                }
                "group.initial.rebalance.delay.ms" => self.group_initial_rebalance_delay_ms = int(key, value, 0)?,
                "group.min.session.timeout.ms" => self.group_min_session_timeout_ms = int(key, value, 0)?,
                "group.max.session.timeout.ms" => self.group_max_session_timeout_ms = int(key, value, 0)?,
                "group.max.size" => self.group_max_size = int(key, value, 1)?,
                "offsets.topic.num.partitions" => self.offsets_topic_num_partitions = int(key, value, 1)?,
                "offsets.retention.minutes" => self.offsets_retention_minutes = int(key, value, 1)?,
                "offsets.retention.check.interval.ms" => self.offsets_retention_check_interval_ms = int(key, value, 1)?,
                "offset.metadata.max.bytes" => self.offset_metadata_max_bytes = int(key, value, 0)?,
                "transaction.state.log.num.partitions" => {
                    self.transaction_state_log_num_partitions = int(key, value, 1)?
                }
                "transaction.max.timeout.ms" => self.transaction_max_timeout_ms = int(key, value, 1)?,
                "transactional.id.expiration.ms" => self.transactional_id_expiration_ms = int(key, value, 1)?,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                    self.transaction_abort_timed_out_transaction_cleanup_interval_ms = int(key, value, 1)?
                }
                "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                    self.transaction_remove_expired_transaction_cleanup_interval_ms = int(key, value, 1)?
                }
                "log.flush.offset.checkpoint.interval.ms" => {
                    self.log_flush_offset_checkpoint_interval_ms = int(key, value, 0)?
                }
                "log.flush.start.offset.checkpoint.interval.ms" => {
                    self.log_flush_start_offset_checkpoint_interval_ms = int(key, value, 0)?
                }
                // Both the scheduler's period and a broker synonym of `flush.ms` (Kafka's
                // `ServerTopicConfigSynonyms`), as in Kafka.
                "log.flush.scheduler.interval.ms" => {
                    let n: i64 = value.trim().parse().map_err(|_| bad(key, value, "expected a 64-bit integer"))?;
                    if n < 0 {
                        return Err(bad(key, value, "must be at least 0"));
                    }
                    self.log_flush_scheduler_interval_ms = n;
                    log_props.insert(key.clone(), value.clone());
                }
                "metrics.listen" => {
                    self.metrics_listen = Some(
                        value
                            .trim()
                            .parse()
                            .map_err(|_| bad(key, value, "expected HOST:PORT, an IP address and a port"))?,
                    );
                }
                // Applied after the loop: they depend on other keys.
                "log.dirs" | "log.dir" | "listeners" | "advertised.listeners" => {}
                k if crate::log::config::is_log_config_key(k) => {
                    log_props.insert(key.clone(), value.clone());
                }
                k => match NOT_APPLICABLE_KEYS.iter().find(|(name, _)| *name == k) {
                    Some((_, reason)) => {
                        tracing::warn!(
                            "broker config {key}={value} does not apply to one fetchbench node ({reason}); ignored"
                        )
                    }
                    None => return Err(bad(key, value, "unknown broker config")),
                },
            }
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            let value = self.group_min_session_timeout_ms.to_string();
            return Err(bad("group.min.session.timeout.ms", &value, "larger than group.max.session.timeout.ms"));
        }
        if let Some((key, value)) = props.get_key_value("log.dirs").or_else(|| props.get_key_value("log.dir")) {
            let mut dirs = value.split(',').map(str::trim).filter(|d| !d.is_empty());
            let first = dirs.next().ok_or_else(|| bad(key, value, "no directory given"))?;
            let rest: Vec<&str> = dirs.collect();
            if !rest.is_empty() {
                tracing::warn!("{key}={value}: only the first directory, {first}, is served; ignoring {rest:?}");
            }
            self.log_dir = PathBuf::from(first);
        }
        if let Some(value) = props.get("listeners") {
            self.listen = plaintext_listener(value, props).map_err(|reason| bad("listeners", value, &reason))?;
        }
        if let Some(value) = props.get("advertised.listeners") {
            let (host, port) =
                plaintext_entry(value, props).map_err(|reason| bad("advertised.listeners", value, &reason))?;
            self.advertised_listener = Some((host, port));
        }
        if !log_props.is_empty() {
            self.log_config = LogConfig::from_broker_props(&log_props)?;
        }
        Ok(())
    }
}

/// The address of the first PLAINTEXT client listener in Kafka's `listeners` list
/// (`NAME://host:port,...`), as described at [`BrokerConfig::apply_props`].
fn plaintext_listener(value: &str, props: &BTreeMap<String, String>) -> Result<SocketAddr, String> {
    let (host, port) = plaintext_entry(value, props)?;
    let host = if host.is_empty() { "0.0.0.0" } else { host.as_str() };
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| format!("{value:?}: resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{value:?}: {host} has no address"))
}

/// The (host, port) of the first PLAINTEXT client listener of a `listeners` or
/// `advertised.listeners` list; the host is `""` for `PLAINTEXT://:9092`.
fn plaintext_entry(value: &str, props: &BTreeMap<String, String>) -> Result<(String, u16), String> {
    let list = |key: &str| -> Vec<String> {
        props.get(key).map(|v| v.split(',').map(|s| s.trim().to_string()).collect()).unwrap_or_default()
    };
    let controllers = list("controller.listener.names");
    let protocols: BTreeMap<String, String> = list("listener.security.protocol.map")
        .iter()
        .filter_map(|e| e.split_once(':').map(|(n, p)| (n.trim().to_string(), p.trim().to_string())))
        .collect();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, host_port) = entry.split_once("://").ok_or_else(|| format!("{entry:?} is not NAME://host:port"))?;
        let protocol = protocols.get(name).map(String::as_str).unwrap_or(name);
        if controllers.iter().any(|c| c == name) || !protocol.eq_ignore_ascii_case("PLAINTEXT") {
            continue;
        }
        let (host, port) = host_port.rsplit_once(':').ok_or_else(|| format!("{entry:?} has no port"))?;
        let port: u16 = port.parse().map_err(|_| format!("{entry:?}: bad port {port:?}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        return Ok((host.to_string(), port));
    }
    Err("no PLAINTEXT client listener (only PLAINTEXT is served)".into())
}

impl BrokerConfig {
    /// The log scheduler's periods from the `log.flush.*` settings.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            flush_scheduler_interval_ms: self.log_flush_scheduler_interval_ms.max(0) as u64,
            recovery_point_checkpoint_interval_ms: self.log_flush_offset_checkpoint_interval_ms.max(0) as u64,
            log_start_offset_checkpoint_interval_ms: self.log_flush_start_offset_checkpoint_interval_ms.max(0) as u64,
        }
    }

    /// The group coordinator's configuration from the broker's `group.*` and `offsets.*`
    /// settings (the rest at Kafka's defaults).
    pub fn coordinator_config(&self) -> CoordinatorConfig {
        CoordinatorConfig {
            group: GroupConfig {
                min_session_timeout_ms: self.group_min_session_timeout_ms,
                max_session_timeout_ms: self.group_max_session_timeout_ms,
                max_size: usize::try_from(self.group_max_size).unwrap_or(0),
                initial_rebalance_delay_ms: i64::from(self.group_initial_rebalance_delay_ms),
            },
            offsets_topic_num_partitions: self.offsets_topic_num_partitions.max(1),
            offsets_retention_ms: i64::from(self.offsets_retention_minutes) * 60_000,
            offsets_retention_check_interval_ms: i64::from(self.offsets_retention_check_interval_ms),
            offset_metadata_max_bytes: usize::try_from(self.offset_metadata_max_bytes).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> BTreeMap<String, String> {
        crate::log::config::parse_properties(text)
    }

    #[test]
    fn log_scheduler_settings_have_kafkas_names_and_defaults() {
        let mut config = BrokerConfig::new("127.0.0.1:1".parse().unwrap(), "/nowhere", ReadPathKind::Copy);
        let defaults = config.scheduler_config();
        assert_eq!(defaults, SchedulerConfig::default(), "Long.MAX_VALUE, 60000, 60000");
        assert_eq!(defaults.flush_check_interval(), std::time::Duration::from_secs(1), "flush.ms checked every second");
        config
            .apply_props(&props(
                "log.flush.scheduler.interval.ms=200\nlog.flush.offset.checkpoint.interval.ms=5000\n\
                 log.flush.start.offset.checkpoint.interval.ms=0\n",
            ))
            .unwrap();
        let s = config.scheduler_config();
        assert_eq!(
            (
                s.flush_scheduler_interval_ms,
                s.recovery_point_checkpoint_interval_ms,
                s.log_start_offset_checkpoint_interval_ms
            ),
            (200, 5000, 0)
        );
        assert_eq!(s.flush_check_interval(), std::time::Duration::from_millis(200));
        // Also Kafka's broker synonym of flush.ms (after log.flush.interval.ms).
        assert_eq!(config.log_config.flush_ms, 200);
        for bad in ["log.flush.scheduler.interval.ms=-1\n", "log.flush.offset.checkpoint.interval.ms=x\n"] {
            let err = config.apply_props(&props(bad)).unwrap_err().to_string();
            assert!(err.contains(bad.split('=').next().unwrap()), "{bad:?}: {err}");
        }
    }
}
