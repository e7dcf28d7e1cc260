//! [`Shared`]: the broker state every thread and handler gets, holding every lock of the broker
//! (their order is in the [module docs](super)): the log directory ([`LogManager`], shared:
//! its partitions have their own locks), the group coordinator (with its own lock), the
//! transaction coordinator ([`TxnCoordinator`], its own locks), the io pool ([`IoPool`]: the request queue
//! and the io threads), the [`Purgatory`] of delayed operations, the connection counts of
//! `max.connections` / `max.connections.per.ip`, and the Fetch metrics ([`FetchMetrics`]: the
//! per-io-thread latency histograms and the count of Fetch requests in flight), and the metrics
//! endpoint's registry ([`BrokerMetrics`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::config::BrokerConfig;
use super::coordinator::runtime::GroupCoordinator;
use super::dynamic_config::DynamicConfig;
use super::io_pool::IoPool;
use super::metrics_registry::{BrokerMetrics, LiveValues};
use super::purgatory::Purgatory;
use super::request_metrics::{FetchInFlight, FetchLatencies, FetchMetrics};
use super::txn_coordinator::runtime::TxnCoordinator;
use super::uring::gauges::UringGauges;
use super::write_deadline::{WriteDeadlines, SEND_TIMEOUT};
use crate::log::manager::LogManager;
use crate::metrics::Latency;

/// This machine's host name (`/proc/sys/kernel/hostname`), `localhost` when unreadable.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// State shared by every thread of the broker.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The configuration the broker started with.
    pub config: BrokerConfig,
    /// The address actually bound (advertised in Metadata).
    pub local_addr: SocketAddr,
    /// The log directory, shared (`&self` methods; the partitions have their own locks). Handed
    /// out by [`Shared::logs`] until the broker begins to shut down.
    logs: Arc<LogManager>,
    shutting_down: AtomicBool,
    connection_panics: AtomicU64,
    io_pool: Arc<IoPool>,
    /// The io threads' response writes in progress and their deadlines.
    write_deadlines: Arc<WriteDeadlines>,
    purgatory: Arc<Purgatory>,
    connections: Mutex<ConnectionCounts>,
    coordinator: GroupCoordinator,
    /// The transaction coordinator (its own shard locks, leaves).
    txn_coordinator: TxnCoordinator,
    /// Total times of consumer Fetches answered since the last take (per io thread) and the
    /// Fetch requests in flight (see [`Shared::take_fetch_latencies`]).
    fetch_metrics: FetchMetrics,
    /// What the `uring` model's cores hold (all 0 under `threaded`).
    uring_gauges: Arc<UringGauges>,
    /// The metrics endpoint's recorded families: total time per API, read path counters.
    metrics: BrokerMetrics,
    /// The dynamic broker configs (`read.path`) and the read paths' Fetch transfer counts.
    dynamic_config: DynamicConfig,
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
pub(crate) struct ConnectionSlot {
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
    /// The state of a broker that has opened `logs` and bound `local_addr`, with no connection
    /// yet and empty Fetch latency histograms (one per io thread and one per `uring` core:
    /// `cores`, 0 under `threaded`). The io pool (`num.io.threads`, `queued.max.requests`) and
    /// the purgatory are made here, their threads not started.
    pub(crate) fn new(
        config: BrokerConfig,
        local_addr: SocketAddr,
        logs: Arc<LogManager>,
        coordinator: GroupCoordinator,
        cores: usize,
    ) -> Shared {
        let io_pool = IoPool::new(config.num_io_threads, config.queued_max_requests);
        let purgatory = Purgatory::new(Arc::clone(&io_pool));
        let txn_coordinator = TxnCoordinator::new(&config, &logs);
        Shared {
            txn_coordinator,
            fetch_metrics: FetchMetrics::new(io_pool.threads(), cores),
            uring_gauges: Arc::default(),
            metrics: BrokerMetrics::new(),
            dynamic_config: DynamicConfig::new(&config),
            config,
            local_addr,
            logs,
            shutting_down: AtomicBool::new(false),
            connection_panics: AtomicU64::new(0),
            io_pool,
            purgatory,
            write_deadlines: WriteDeadlines::new(SEND_TIMEOUT),
            connections: Mutex::new(ConnectionCounts::default()),
            coordinator,
        }
    }

    /// Marks the broker as shutting down ([`Self::is_shutting_down`]), for good.
    pub(crate) fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Counts one panic caught on a network thread ([`Self::connection_panics`]).
    pub(crate) fn count_connection_panic(&self) {
        self.connection_panics.fetch_add(1, Ordering::SeqCst);
    }

    /// The log directory, or `None` once the broker is shutting down (handlers then answer with
    /// a retriable error or close the connection). No lock is taken: the broker-wide state is a
    /// flag ([`Self::is_shutting_down`]) next to the shared [`LogManager`]. A request that got
    /// the manager just before the shutdown began may still reach a partition the shutdown has
    /// closed: its append then fails with [`LogError::Closed`](crate::log::LogError::Closed)
    /// (`NOT_LEADER_OR_FOLLOWER`), while an append already holding its partition's lock
    /// finishes first and is flushed by the shutdown ([`LogManager::shutdown`]).
    pub(crate) fn logs(&self) -> Option<&LogManager> {
        (!self.is_shutting_down()).then_some(&*self.logs)
    }

    /// The log directory whether or not the broker is shutting down: for the shutdown itself and
    /// the log scheduler.
    pub(crate) fn log_manager(&self) -> &Arc<LogManager> {
        &self.logs
    }

    /// Panics caught on the broker's threads (a bug: bad input must get an error or a close,
    /// never a panic): network threads ([`Self::count_connection_panic`]) and io threads
    /// ([`IoPool::panics`]). Each is logged and closes only its connection; tests assert 0.
    pub(crate) fn connection_panics(&self) -> u64 {
        self.connection_panics.load(Ordering::SeqCst) + self.io_pool.panics()
    }

    /// The request queue and the io threads: [`IoPool::submit`] runs a job there.
    pub(crate) fn io_pool(&self) -> &Arc<IoPool> {
        &self.io_pool
    }

    /// The io threads' response writes in progress, each bounded by a deadline
    /// ([`WriteDeadlines`]).
    pub(crate) fn write_deadlines(&self) -> &Arc<WriteDeadlines> {
        &self.write_deadlines
    }

    /// The delayed operations: produce and the coordinator call its
    /// [`Purgatory::check_and_complete`] after a change.
    pub(crate) fn purgatory(&self) -> &Arc<Purgatory> {
        &self.purgatory
    }

    /// The (host, port) clients are told to connect to (Metadata, FindCoordinator): see
    /// [`BrokerConfig::advertised_listener`].
    pub(crate) fn advertised(&self) -> (String, i32) {
        let port = i32::from(self.local_addr.port());
        match &self.config.advertised_listener {
            Some((host, p)) if !host.is_empty() => (host.clone(), i32::from(*p)),
            Some((_, p)) => (host_name(), i32::from(*p)),
            None if self.local_addr.ip().is_unspecified() => (host_name(), port),
            None => (self.local_addr.ip().to_string(), port),
        }
    }

    /// The group coordinator (every group of this broker: one node coordinates them all).
    pub(crate) fn coordinator(&self) -> &GroupCoordinator {
        &self.coordinator
    }

    /// The transaction coordinator.
    pub(crate) fn txn_coordinator(&self) -> &TxnCoordinator {
        &self.txn_coordinator
    }

    /// Whether [`BrokerHandle::shutdown`](crate::broker::server::BrokerHandle::shutdown) has
    /// begun.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Client connections open now (those counted against `max.connections`).
    pub(crate) fn open_connections(&self) -> usize {
        self.connection_counts().total
    }

    /// The total times of the consumer Fetch requests (`replica_id` < 0; every fetch but a
    /// follower's) answered since the last call, or since start, in nanoseconds, both kinds of
    /// response merged; the histograms are reset. See [`BrokerHandle::take_fetch_latency`],
    /// which calls this.
    ///
    /// [`BrokerHandle::take_fetch_latency`]: crate::broker::server::BrokerHandle::take_fetch_latency
    pub(crate) fn take_fetch_latency(&self) -> Latency {
        self.take_fetch_latencies().all()
    }

    /// As [`Self::take_fetch_latency`], split by whether the response carried record bytes.
    pub(crate) fn take_fetch_latencies(&self) -> FetchLatencies {
        self.fetch_metrics.take()
    }

    /// Fetch requests (any replica id) whose frame was read and decoded and whose response is
    /// not yet completely written: parked long polls included. A Fetch given up unanswered (its
    /// connection closed, its client gone) leaves the count when its `Responder` is dropped.
    pub(crate) fn fetches_in_flight(&self) -> u64 {
        self.fetch_metrics.in_flight()
    }

    /// Counts one Fetch request in [`Self::fetches_in_flight`] until the guard is dropped.
    pub(crate) fn fetch_in_flight(&self) -> FetchInFlight {
        self.fetch_metrics.track()
    }

    /// Records one consumer Fetch's total time (frame read -> response written), called once the
    /// response's last byte was written, in the calling io thread's own histograms (no lock
    /// shared with another io thread); `with_records` says whether the response carried record
    /// bytes. Clamped to 1 us ..= 60 s by [`Latency::record_ns`].
    pub(crate) fn record_fetch_latency(&self, total: Duration, with_records: bool) {
        self.fetch_metrics.record(self.io_pool.current_thread(), total, with_records);
        self.metrics.record_fetch(total, with_records);
    }

    /// Records one consumer Fetch's total time in `uring` core `core`'s own histograms (the
    /// core wrote its response).
    pub(crate) fn record_core_fetch_latency(&self, core: usize, total: Duration, with_records: bool) {
        self.fetch_metrics.record_core(core, total, with_records);
        self.metrics.record_fetch(total, with_records);
    }

    /// The metrics endpoint's recorded families ([`BrokerMetrics`]): the io threads and cores
    /// record each request's total time and their read path's transfers in it.
    pub(crate) fn metrics(&self) -> &BrokerMetrics {
        &self.metrics
    }

    /// The metrics exposition now (see [`BrokerMetrics::encode`]): the recorded families, and
    /// the process, connections, in-flight Fetches, purgatory, broker and machine read now.
    ///
    /// Errors: [`BrokerMetrics::encode`]'s.
    pub(crate) fn metrics_text(&self) -> Result<String, std::fmt::Error> {
        self.metrics.encode(&LiveValues {
            connections: self.open_connections(),
            fetches_in_flight: self.fetches_in_flight(),
            purgatory_size: self.purgatory.delayed(),
            server_model: self.dynamic_config.server_model().to_string(),
            read_path: self.dynamic_config.read_path().name().to_string(),
        })
    }

    /// What the `uring` cores hold now (registered and provided buffers, pipes).
    pub(crate) fn uring_gauges(&self) -> &UringGauges {
        &self.uring_gauges
    }

    /// The same counters, shared (each core's buffers and pipes update them).
    pub(crate) fn uring_gauges_arc(&self) -> Arc<UringGauges> {
        Arc::clone(&self.uring_gauges)
    }

    /// The dynamic broker configs: the effective read path, changed by IncrementalAlterConfigs.
    pub(crate) fn dynamic_config(&self) -> &DynamicConfig {
        &self.dynamic_config
    }

    fn connection_counts(&self) -> MutexGuard<'_, ConnectionCounts> {
        // The counts are updated in single statements: a poisoned lock still holds valid counts.
        self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a place for a connection from `ip`, or says which limit is reached.
    pub(crate) fn acquire_slot(shared: &Arc<Shared>, ip: IpAddr) -> Result<ConnectionSlot, String> {
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
