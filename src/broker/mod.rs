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
//! `COORDINATOR_NOT_AVAILABLE`), Fetch v13+ and Produce v13 (topic ids), a connection limit,
//! signal handling.
//!
//! Tested with a real client: kcat (librdkafka 2.0.2) lists, produces (uncompressed, gzip,
//! snappy, lz4, zstd) and consumes over every read path (`tests/it/kcat.rs`).

pub mod connection;
pub mod delayed_fetch;
pub mod errors;
pub mod handler;

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::log::checkpoint::TopicId;
use crate::log::manager::LogManager;
use crate::log::{LogConfig, LogError};
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
}

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
        }
    }

    /// Applies broker properties (`server.properties` names): `auto.create.topics.enable`,
    /// `num.partitions`, `socket.request.max.bytes`, and every `log.*` synonym that
    /// [`LogConfig::from_broker_props`] knows. Other keys are refused, so a typo is not ignored.
    ///
    /// Errors: [`BrokerError::Config`] naming the key; [`BrokerError::Log`] for a bad `log.*` value.
    pub fn apply_props(&mut self, props: &BTreeMap<String, String>) -> Result<(), BrokerError> {
        let bad = |key: &str, value: &str, reason: &str| BrokerError::Config {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let mut log_props = BTreeMap::new();
        for (key, value) in props {
            match key.as_str() {
                "auto.create.topics.enable" => {
                    self.auto_create_topics_enable =
                        value.trim().parse().map_err(|_| bad(key, value, "expected true or false"))?;
                }
                "num.partitions" => {
                    let n: i32 = value.trim().parse().map_err(|_| bad(key, value, "expected an integer"))?;
                    if n < 1 {
                        return Err(bad(key, value, "must be at least 1"));
                    }
                    self.num_partitions = n;
                }
                "socket.request.max.bytes" => {
                    let n: usize = value.trim().parse().map_err(|_| bad(key, value, "expected a byte count"))?;
                    if n < 1 || n > i32::MAX as usize {
                        return Err(bad(key, value, "must be in 1..=2147483647"));
                    }
                    self.socket_request_max_bytes = n;
                }
                k if crate::log::config::is_log_config_key(k) => {
                    log_props.insert(key.clone(), value.clone());
                }
                _ => return Err(bad(key, value, "unknown broker config")),
            }
        }
        if !log_props.is_empty() {
            self.log_config = LogConfig::from_broker_props(&log_props)?;
        }
        Ok(())
    }
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

    /// Whether [`BrokerHandle::shutdown`] has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// Returns the topic id of `topic` (KIP-516): the one in any partition's `partition.metadata`,
/// else a new random one, written to every partition of the topic that lacks it.
///
/// Errors: [`LogError::Io`] writing `partition.metadata`.
pub fn ensure_topic_id(logs: &mut LogManager, topic: &str) -> Result<TopicId, LogError> {
    let existing = logs.logs().filter(|((t, _), _)| t == topic).find_map(|(_, log)| log.topic_id());
    let id = match existing {
        Some(id) if !id.is_zero() => id,
        _ => random_topic_id(),
    };
    for ((t, _), log) in logs.logs_mut() {
        if t == topic && log.topic_id() != Some(id) && !log.is_read_only() {
            log.set_topic_id(id)?;
        }
    }
    Ok(id)
}

/// A random version-4 UUID from the kernel's random source, never [`TopicId::ZERO`] nor
/// [`TopicId::METADATA_TOPIC_ID`] (Kafka's `Uuid.randomUuid` skips reserved ids too).
fn random_topic_id() -> TopicId {
    let mut bytes = [0u8; 16];
    loop {
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes));
        if let Err(e) = read {
            tracing::warn!("reading /dev/urandom failed ({e}); topic id from the clock");
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(1);
            bytes = (nanos ^ (u128::from(std::process::id()) << 64)).to_be_bytes();
        }
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let id = TopicId(bytes);
        if id != TopicId::ZERO && id != TopicId::METADATA_TOPIC_ID {
            return id;
        }
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
        let shared = Arc::new(Shared {
            config,
            local_addr,
            logs: Mutex::new(Some(logs)),
            shutting_down: AtomicBool::new(false),
            connection_panics: AtomicU64::new(0),
            fetch_wakeup: delayed_fetch::FetchWakeup::default(),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fetchbench-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .map_err(|source| BrokerError::Bind { addr: local_addr, source })?;
        tracing::info!("broker listening on {local_addr}");
        Ok(BrokerHandle { shared, accept: Some(accept) })
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
        let conn_shared = Arc::clone(&shared);
        let peer = stream.peer_addr().ok();
        let spawned = std::thread::Builder::new().name("fetchbench-conn".into()).spawn(move || {
            let served =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| connection::serve(stream, &conn_shared)));
            if served.is_err() {
                conn_shared.connection_panics.fetch_add(1, Ordering::SeqCst);
                tracing::error!("connection from {peer:?} panicked (a bug); closed");
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("no thread for connection from {peer:?}: {e}; closed");
        }
    }
}

/// A running broker. Dropping it without [`BrokerHandle::shutdown`] leaves the accept thread
/// running until the process exits.
#[derive(Debug)]
pub struct BrokerHandle {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
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

    /// Blocks until the accept thread ends (it ends only after [`Self::shutdown`] from another
    /// handle, or when accepting fails for good); for `fetchbench serve`.
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
