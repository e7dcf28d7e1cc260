//! A minimal single-node Kafka broker on the wire protocol (issue 4, first part).
//!
//! One node, node id 0, leader of every partition with leader epoch 0. A thread accepts
//! connections on the listen address; each connection gets its own thread, which reads a frame,
//! decodes it, runs the handler and writes the response before reading the next frame, so the
//! responses on one connection are in request order (as Kafka's `SocketServer` mutes a channel
//! while a request is in flight).
//!
//! ```text
//! TcpListener --accept--> connection thread: protocol::frame::read_frame (size limit)
//!                                            -> protocol::frame::decode_request
//!                                            -> handler::{api_versions, metadata, produce, fetch, list_offsets,
//!                                                         find_coordinator}
//!                                            -> frame::encode_response | FetchResponseFrame::write_to(read path)
//! ```
//!
//! Shared state is one [`LogManager`] behind a mutex. A fetch holds the lock only while it looks
//! up [`FileSlice`](crate::log::FileSlice)s (no record bytes are read then); the slices keep their
//! segment files open, and the bytes move after the lock is released, through the connection's
//! own [`ReadPath`](crate::read_path::ReadPath).
//!
//! Long polling (`fetch.min.bytes` / `fetch.max.wait.ms`): a fetch short of data parks its
//! connection thread on [`delayed_fetch::FetchWakeup`], holding no log lock; every produce that
//! appends wakes it at once.
//!
//! Not yet here (issue 4): fetch sessions, CreateTopics, InitProducerId and idempotent
//! produce, OffsetForLeaderEpoch, group coordination (FindCoordinator always answers
//! `COORDINATOR_NOT_AVAILABLE`), Fetch v13+ and Produce v13 (topic ids).
//!
//! Connection limits (Kafka's `ConnectionQuotas`): `max.connections` and
//! `max.connections.per.ip`; a connection past either is closed at once, before it is read, with
//! a warning naming the limit; open connections are unaffected and a closed one frees its place.
//! Signals are handled by `fetchbench serve` (SIGINT/SIGTERM -> [`BrokerHandle::shutdown`]).
//!
//! Fetch latency, the broker's own view (Kafka's
//! `kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer`): every consumer
//! Fetch answered is timed from the moment its request frame was completely read to the moment
//! its response was completely written (long-poll waits included) and recorded in one shared
//! histogram, taken and reset by [`BrokerHandle::take_fetch_latency`].
//!
//! Tested with a real client: kcat (librdkafka 2.0.2) lists, produces (uncompressed, gzip,
//! snappy, lz4, zstd) and consumes over every read path (`tests/it/kcat.rs`).

pub mod connection;
pub mod coordinator;
pub mod delayed_fetch;
pub mod errors;
pub mod handler;
pub mod topics;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::log::manager::LogManager;
use crate::log::{LogConfig, LogError};
use crate::metrics::Latency;
use crate::protocol::frame::DEFAULT_SOCKET_REQUEST_MAX_BYTES;
use crate::read_path::{ReadPathConfig, ReadPathKind};

/// The node id of this broker (one node: leader of every partition, Metadata's only broker).
pub const NODE_ID: i32 = 0;
/// The leader epoch of every partition (one node that never loses leadership).
pub const LEADER_EPOCH: i32 = 0;
/// The cluster id reported in Metadata (v2+).
pub const CLUSTER_ID: &str = "fetchbench";

/// Errors starting or stopping the broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// Binding the listen address failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Opening or closing the log directory failed.
    #[error("log directory: {source}")]
    Log {
        /// The cause.
        #[from]
        source: LogError,
    },
    /// The configured read path cannot run here (never a silent fallback).
    #[error("read path: {source}")]
    ReadPath {
        /// The cause.
        #[source]
        source: crate::read_path::CreateError,
    },
    /// A broker config (`-X key=value`) is unknown or invalid.
    #[error("invalid broker config {key}={value}: {reason}")]
    Config {
        /// The Kafka config name.
        key: String,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
}

/// Broker configuration, with Kafka's names where Kafka has the setting.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Address to listen on (port 0: any free port; see [`BrokerHandle::local_addr`]).
    pub listen: SocketAddr,
    /// The log directory (`log.dirs`, one directory).
    pub log_dir: PathBuf,
    /// How Fetch responses move record bytes to the socket.
    pub read_path: ReadPathKind,
    /// Buffer and pipe sizes of the read path.
    pub read_path_config: ReadPathConfig,
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
    /// `advertised.listeners`' PLAINTEXT (host, port): what Metadata and FindCoordinator tell
    /// clients to connect to. `None`: the bound address, or this machine's host name when bound
    /// to a wildcard address (as Kafka advertises `listeners` when `advertised.listeners` is
    /// unset).
    pub advertised_listener: Option<(String, u16)>,
}

/// Kafka broker configs that `apply_props` accepts but does not apply, because they concern
/// replication, KRaft, security, threads or other brokers (a single node has none of those), with
/// the reason given in the warning logged once per key. A `server.properties` shipped with Kafka
/// 4 (`config/server.properties`) or 3.x (`config/kraft/server.properties`, the ZooKeeper
/// `config/server.properties`) loads with only these warnings; any key neither applied nor
/// listed here is refused, so a typo is not silently ignored.
pub const NOT_APPLICABLE_KEYS: &[(&str, &str)] = &[
    ("process.roles", "KRaft roles: this broker is its own controller"),
    ("node.id", "the node id is always 0"),
    ("broker.id", "the node id is always 0"),
    ("controller.quorum.voters", "no KRaft quorum"),
    ("controller.quorum.bootstrap.servers", "no KRaft quorum"),
    ("controller.listener.names", "no controller listener"),
    ("inter.broker.listener.name", "no other brokers"),
    ("listener.security.protocol.map", "only PLAINTEXT is served"),
    ("security.inter.broker.protocol", "no other brokers"),
    ("num.network.threads", "one thread per connection"),
    ("num.io.threads", "requests run on their connection's thread"),
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
    ("transaction.state.log.num.partitions", "no transaction coordinator"),
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
            log_config: LogConfig::default(),
            auto_create_topics_enable: true,
            num_partitions: 1,
            socket_request_max_bytes: DEFAULT_SOCKET_REQUEST_MAX_BYTES,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            group_max_size: i32::MAX,
            offsets_topic_num_partitions: 50,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            advertised_listener: None,
        }
    }

    /// Applies broker properties (`server.properties` names, as `--config` and `-X` give them):
    ///
    /// - `auto.create.topics.enable`, `num.partitions`, `socket.request.max.bytes`,
    ///   `max.connections`, `max.connections.per.ip`;
    /// - the group coordinator's `group.initial.rebalance.delay.ms`,
    ///   `group.min.session.timeout.ms`, `group.max.session.timeout.ms`, `group.max.size`,
    ///   `offsets.topic.num.partitions`, `offsets.retention.minutes`,
    ///   `offsets.retention.check.interval.ms`, `offset.metadata.max.bytes`;
    /// - `log.dirs` (comma-separated; the first directory is served, more are warned about) or
    ///   `log.dir` (used when `log.dirs` is absent, as in Kafka) sets [`Self::log_dir`];
    /// - `listeners`: the first listener that is not a controller listener
    ///   (`controller.listener.names`) and whose security protocol is PLAINTEXT (through
    ///   `listener.security.protocol.map`, else its name) sets [`Self::listen`]; an empty host
    ///   (`PLAINTEXT://:9092`) binds every interface, as in Kafka;
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
                "group.initial.rebalance.delay.ms" => self.group_initial_rebalance_delay_ms = int(key, value, 0)?,
                "group.min.session.timeout.ms" => self.group_min_session_timeout_ms = int(key, value, 0)?,
                "group.max.session.timeout.ms" => self.group_max_session_timeout_ms = int(key, value, 0)?,
                "group.max.size" => self.group_max_size = int(key, value, 1)?,
                "offsets.topic.num.partitions" => self.offsets_topic_num_partitions = int(key, value, 1)?,
                "offsets.retention.minutes" => self.offsets_retention_minutes = int(key, value, 1)?,
                "offsets.retention.check.interval.ms" => self.offsets_retention_check_interval_ms = int(key, value, 1)?,
                "offset.metadata.max.bytes" => self.offset_metadata_max_bytes = int(key, value, 0)?,
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

/// This machine's host name (`/proc/sys/kernel/hostname`), `localhost` when unreadable.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// State shared by every connection thread.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the broker started with.
    pub config: BrokerConfig,
    /// The address actually bound (advertised in Metadata).
    pub local_addr: SocketAddr,
    logs: Mutex<Option<LogManager>>,
    shutting_down: AtomicBool,
    connection_panics: AtomicU64,
    fetch_wakeup: delayed_fetch::FetchWakeup,
    connections: Mutex<ConnectionCounts>,
    coordinator: coordinator::GroupCoordinator,
    /// Total times of consumer Fetches answered since the last take, split by whether the
    /// response carried record bytes (see [`Shared::take_fetch_latencies`]); locked once per
    /// Fetch response.
    fetch_latency: Mutex<FetchLatencies>,
    /// Fetch requests read and not yet answered (see [`Shared::fetches_in_flight`]).
    fetches_in_flight: AtomicU64,
}

/// The broker-side consumer Fetch latencies since the last take, in nanoseconds (see
/// [`BrokerHandle::take_fetch_latency`] for what each value measures), split by the response.
#[derive(Debug, Default)]
pub struct FetchLatencies {
    /// Fetches whose response carried record bytes.
    pub with_records: Latency,
    /// Fetches whose response carried none: long polls that expired at the log end (waiting
    /// `fetch.max.wait.ms`), fetches that woke with nothing for them, and error answers.
    pub without_records: Latency,
}

impl FetchLatencies {
    /// Both histograms merged: every consumer Fetch answered.
    pub fn all(&self) -> Latency {
        let mut all = self.with_records.clone();
        all.merge(&self.without_records);
        all
    }
}

/// One Fetch request counted in [`Shared::fetches_in_flight`] from the moment it was read to
/// the drop of this guard: after its response was written, when the connection closes it
/// unanswered, or when the connection thread unwinds.
pub(crate) struct FetchInFlight<'a>(&'a AtomicU64);

impl<'a> FetchInFlight<'a> {
    pub(crate) fn new(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        FetchInFlight(counter)
    }
}

impl Drop for FetchInFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Open connections, counted against `max.connections` and `max.connections.per.ip`.
#[derive(Debug, Default)]
struct ConnectionCounts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// One open connection's place in the connection limits; dropping it (when the connection's
/// thread ends) frees the place.
#[derive(Debug)]
struct ConnectionSlot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.shared.connection_counts();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

impl Shared {
    /// Locks the log manager. `None` once the broker is shutting down (handlers then answer
    /// with an error or close the connection). A poisoned lock (a handler panicked) is taken
    /// over: the logs themselves stay consistent because appends validate before writing.
    pub fn logs(&self) -> MutexGuard<'_, Option<LogManager>> {
        self.logs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Connections whose thread panicked (a bug: bad input must get an error or a close, never a
    /// panic). The panic is caught, logged and closes only that connection; tests assert 0.
    pub fn connection_panics(&self) -> u64 {
        self.connection_panics.load(Ordering::SeqCst)
    }

    /// What parked fetches wait on; produce notifies it after an append (long polling).
    pub fn fetch_wakeup(&self) -> &delayed_fetch::FetchWakeup {
        &self.fetch_wakeup
    }

    /// The (host, port) clients are told to connect to (Metadata, FindCoordinator): see
    /// [`BrokerConfig::advertised_listener`].
    pub fn advertised(&self) -> (String, i32) {
        let port = i32::from(self.local_addr.port());
        match &self.config.advertised_listener {
            Some((host, p)) if !host.is_empty() => (host.clone(), i32::from(*p)),
            Some((_, p)) => (host_name(), i32::from(*p)),
            None if self.local_addr.ip().is_unspecified() => (host_name(), port),
            None => (self.local_addr.ip().to_string(), port),
        }
    }

    /// The group coordinator (every group of this broker: one node coordinates them all).
    pub fn coordinator(&self) -> &coordinator::GroupCoordinator {
        &self.coordinator
    }

    /// Whether [`BrokerHandle::shutdown`] has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Client connections open now (those counted against `max.connections`).
    pub fn open_connections(&self) -> usize {
        self.connection_counts().total
    }

    /// The total times of the consumer Fetch requests (`replica_id` < 0; every fetch but a
    /// follower's) answered since the last call, or since start, in nanoseconds, both kinds of
    /// response merged; the histograms are reset. See [`BrokerHandle::take_fetch_latency`],
    /// which calls this.
    pub fn take_fetch_latency(&self) -> Latency {
        self.take_fetch_latencies().all()
    }

    /// As [`Self::take_fetch_latency`], split by whether the response carried record bytes.
    pub fn take_fetch_latencies(&self) -> FetchLatencies {
        // Allocate the empty histograms before locking: connection threads record meanwhile.
        let mut taken = FetchLatencies::default();
        std::mem::swap(&mut *self.fetch_latency_guard(), &mut taken);
        taken
    }

    /// Fetch requests (any replica id) whose frame was read and decoded and whose response is
    /// not yet completely written: parked long polls included. A Fetch closed unanswered, or
    /// whose connection failed, leaves the count when its connection thread gives it up.
    pub fn fetches_in_flight(&self) -> u64 {
        self.fetches_in_flight.load(Ordering::SeqCst)
    }

    /// Counts one Fetch request in [`Self::fetches_in_flight`] until the guard is dropped.
    pub(crate) fn fetch_in_flight(&self) -> FetchInFlight<'_> {
        FetchInFlight::new(&self.fetches_in_flight)
    }

    /// Records one consumer Fetch's total time (frame read -> response written), called by the
    /// connection thread once the response's last byte was written; `with_records` says whether
    /// the response carried record bytes. Clamped to 1 us ..= 60 s by [`Latency::record_ns`].
    fn record_fetch_latency(&self, total: Duration, with_records: bool) {
        let ns = u64::try_from(total.as_nanos()).unwrap_or(u64::MAX);
        let mut l = self.fetch_latency_guard();
        if with_records {
            l.with_records.record_ns(ns);
        } else {
            l.without_records.record_ns(ns);
        }
    }

    fn fetch_latency_guard(&self) -> MutexGuard<'_, FetchLatencies> {
        // Recording never panics; a poisoned lock still holds valid histograms.
        self.fetch_latency.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn connection_counts(&self) -> MutexGuard<'_, ConnectionCounts> {
        // The counts are updated in single statements: a poisoned lock still holds valid counts.
        self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a place for a connection from `ip`, or says which limit is reached.
    fn acquire_slot(shared: &Arc<Shared>, ip: IpAddr) -> Result<ConnectionSlot, String> {
        let mut counts = shared.connection_counts();
        let max = shared.config.max_connections;
        if counts.total >= max {
            return Err(format!("max.connections={max} reached ({} open)", counts.total));
        }
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        let max_ip = shared.config.max_connections_per_ip;
        if from_ip >= max_ip {
            return Err(format!("max.connections.per.ip={max_ip} reached for {ip} ({from_ip} open)"));
        }
        counts.total += 1;
        *counts.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnectionSlot { shared: Arc::clone(shared), ip })
    }
}

/// Starts brokers.
#[derive(Debug)]
pub struct Broker;

impl Broker {
    /// Opens the log directory (recovering it after an unclean shutdown), checks that the read
    /// path can run, binds the listen address and starts accepting connections on a thread.
    ///
    /// Errors: [`BrokerError::Log`], [`BrokerError::ReadPath`] (the path's probe failed: never
    /// a fallback), [`BrokerError::Bind`].
    pub fn start(config: BrokerConfig) -> Result<BrokerHandle, BrokerError> {
        config.read_path.probe().map_err(|e| BrokerError::ReadPath { source: e.into() })?;
        let (logs, report) = LogManager::open(&config.log_dir, config.log_config.clone(), |_| None, false)?;
        tracing::info!(
            partitions = report.partitions.len(),
            clean = report.had_clean_shutdown,
            "opened log directory {}",
            config.log_dir.display()
        );
        let listener =
            TcpListener::bind(config.listen).map_err(|source| BrokerError::Bind { addr: config.listen, source })?;
        let local_addr = listener.local_addr().map_err(|source| BrokerError::Bind { addr: config.listen, source })?;
        let coordinator_config = config.coordinator_config();
        let shared = Arc::new(Shared {
            config,
            local_addr,
            logs: Mutex::new(Some(logs)),
            shutting_down: AtomicBool::new(false),
            connection_panics: AtomicU64::new(0),
            fetch_wakeup: delayed_fetch::FetchWakeup::default(),
            connections: Mutex::new(ConnectionCounts::default()),
            coordinator: coordinator::GroupCoordinator::new(coordinator_config),
            fetch_latency: Mutex::new(FetchLatencies::default()),
            fetches_in_flight: AtomicU64::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fetchbench-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .map_err(|source| BrokerError::Bind { addr: local_addr, source })?;
        // The coordinator replays __consumer_offsets (COORDINATOR_LOAD_IN_PROGRESS until done),
        // then its timer thread fires session, rebalance and retention deadlines.
        let coordinator_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("fetchbench-group-coordinator".into())
            .spawn(move || {
                coordinator::storage::load(&coordinator_shared);
                coordinator_shared
                    .coordinator()
                    .run_timers(&coordinator::storage::LogStorage { shared: &coordinator_shared });
            })
            .map_err(|source| BrokerError::Bind { addr: local_addr, source })?;
        tracing::info!("broker listening on {local_addr}");
        Ok(BrokerHandle {
            shared,
            accept: Some(accept),
            had_clean_shutdown: report.had_clean_shutdown,
            partitions_loaded: report.partitions.len(),
        })
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.is_shutting_down() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning; running connections go on.
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let peer = match stream.peer_addr() {
            Ok(peer) => peer,
            Err(e) => {
                tracing::warn!("accepted a connection without a peer address ({e}); closed");
                continue;
            }
        };
        // Past a limit the connection is closed at once (dropped unread); others go on.
        let slot = match Shared::acquire_slot(&shared, peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                tracing::warn!("connection from {peer} closed: {limit}");
                continue;
            }
        };
        let conn_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().name("fetchbench-conn".into()).spawn(move || {
            // Freed when the connection ends, however it ends.
            let _slot = slot;
            let served =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| connection::serve(stream, &conn_shared)));
            if served.is_err() {
                conn_shared.connection_panics.fetch_add(1, Ordering::SeqCst);
                tracing::error!("connection from {peer} panicked (a bug); closed");
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("no thread for connection from {peer}: {e}; closed");
        }
    }
}

/// A running broker. Dropping it without [`BrokerHandle::shutdown`] leaves the accept thread
/// running until the process exits.
#[derive(Debug)]
pub struct BrokerHandle {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    had_clean_shutdown: bool,
    partitions_loaded: usize,
}

impl BrokerHandle {
    /// The address the broker listens on (the real port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The shared state (tests and tools).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether the log directory held `.kafka_cleanshutdown` at start (the last shutdown was
    /// clean, so no partition was recovered).
    pub fn had_clean_shutdown(&self) -> bool {
        self.had_clean_shutdown
    }

    /// Partitions loaded from the log directory at start.
    pub fn partitions_loaded(&self) -> usize {
        self.partitions_loaded
    }

    /// The broker-side Fetch latency: a histogram (nanoseconds, 1 us ..= 60 s, 3 significant
    /// digits; longer times count as 60 s) of the consumer Fetch requests answered since the
    /// last call (or since start), which is reset. Kafka's
    /// `kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer`: each value
    /// runs from the moment the request frame was completely read from the socket to the moment
    /// the response was completely written to it, so it includes decoding, the log lookup, any
    /// long-poll wait (`fetch.max.wait.ms`) and the read path's write.
    ///
    /// Counted: every Fetch whose `replica_id` (below v15) or `replica_state.replica_id` (v15+)
    /// is negative, i.e. from a consumer, once its response is written, including responses
    /// carrying errors (an unknown topic, `OFFSET_OUT_OF_RANGE`, ...). Not counted: follower
    /// fetches (`replica_id` >= 0), and requests never answered (a version not served, an
    /// encoding failure, a write that failed: the peer reset the connection). A peer that merely
    /// closed its end (FIN) while its Fetch was parked cannot be told apart before the write,
    /// which then succeeds, so that Fetch is counted.
    ///
    /// A Fetch is recorded by its connection thread just after the write of its last byte
    /// returns, so a client that has just read a whole response may, for a few microseconds,
    /// see it missing here; any later response on the same connection guarantees it is in.
    pub fn take_fetch_latency(&self) -> Latency {
        self.shared.take_fetch_latency()
    }

    /// As [`Self::take_fetch_latency`], split: fetches whose response carried record bytes,
    /// and those whose response carried none (long polls that waited out `fetch.max.wait.ms`
    /// at the log end, fetches woken with nothing for them, error answers). Both are reset.
    pub fn take_fetch_latencies(&self) -> FetchLatencies {
        self.shared.take_fetch_latencies()
    }

    /// Fetch requests received and not yet answered now (read and decoded; the response not
    /// yet completely written), parked long polls included: what a client's pipelined Fetch
    /// still holds on the broker. A Fetch leaves the count when its response's last write
    /// returns (a client may have read the whole response a few microseconds before), or when
    /// its connection gives it up unanswered.
    pub fn fetches_in_flight(&self) -> u64 {
        self.shared.fetches_in_flight()
    }

    /// Blocks until the accept thread ends (it ends only after [`Self::shutdown`] from another
    /// handle, or when accepting fails for good).
    pub fn join(mut self) {
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }

    /// Stops accepting, then shuts the log directory down cleanly (logs flushed, checkpoints and
    /// the `.kafka_cleanshutdown` marker written: Kafka's `LogManager.shutdown`). Connections
    /// still open get errors or are closed on their next request.
    ///
    /// Errors: [`BrokerError::Log`].
    pub fn shutdown(mut self) -> Result<(), BrokerError> {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        // Parked fetches answer now.
        self.shared.fetch_wakeup.notify();
        self.shared.coordinator.shutdown();
        // Wake the accept thread so it sees the flag.
        let _ = TcpStream::connect(self.shared.local_addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let logs = self.shared.logs().take();
        if let Some(logs) = logs {
            logs.shutdown()?;
        }
        Ok(())
    }
}
