//! [`Broker::start`] and the running [`BrokerHandle`]: open the log directory, bind the listen
//! address, start the broker's threads (among them the log directory's scheduler,
//! [`LogScheduler`]: background fsyncs and checkpoints), and stop them
//! ([`BrokerHandle::shutdown`]). Kafka's
//! `BrokerServer` with its `SocketServer` acceptor.
//!
//! Threads, a fixed number whatever the connections (see the [broker docs](super)): the front
//! end of `server.model` ([`FrontEnds`]: under `threaded` the acceptor and
//! `num.network.threads` network threads ([`network`](super::network)) with the write-deadline
//! watchdog ([`WriteDeadlines`](super::write_deadline::WriteDeadlines)); under `uring` the
//! cores; both once the model was switched at runtime), `num.io.threads` io threads
//! ([`IoPool`](super::io_pool::IoPool)), the purgatory's timer
//! ([`Purgatory`](super::purgatory::Purgatory)), the log scheduler and the group coordinator's thread (replay of
//! `__consumer_offsets`, then its timers), the transaction coordinator's thread
//! ([`txn_coordinator::markers`](super::txn_coordinator::markers): replay of `__transaction_state`,
//! then its timeout aborts), and with `metrics.listen` the metrics endpoint's
//! thread ([`MetricsEndpoint`]).

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::config::BrokerConfig;
use super::coordinator::delayed_join::PurgatoryWaiters;
use super::coordinator::runtime::GroupCoordinator;
use super::coordinator::storage::{self, LogStorage};
use super::error::BrokerError;
use super::front_end::{FrontEnds, Switch};
use super::metrics_endpoint::MetricsEndpoint;
use super::request_metrics::FetchLatencies;
use super::server_model::ServerModel;
use super::shared::Shared;
use super::test_support::TestSupport;
use super::txn_coordinator::markers as txn_markers;
use super::uring::start as uring_start;
use crate::log::manager::LogManager;
use crate::log::scheduler::LogScheduler;
use crate::metrics::Latency;

/// Starts brokers.
#[derive(Debug)]
pub struct Broker;

impl Broker {
    /// Opens the log directory (recovering it after an unclean shutdown), checks that the read
    /// path can run, binds the listen address (one `SO_REUSEPORT` listener per `uring` core,
    /// under either model) and starts the broker's threads: the front end of `server.model`
    /// (`threaded`: the acceptor, `num.network.threads` network threads and the write-deadline
    /// watchdog; `uring`: the cores), `num.io.threads` io threads, the purgatory's timer, the log
    /// scheduler and the group coordinator's thread.
    ///
    /// Errors: [`BrokerError::ServerModel`] (the model cannot run here, or cannot run the read
    /// path: [`ServerModel::supports`]), [`BrokerError::Log`], [`BrokerError::ReadPath`] (the path's probe failed: never
    /// a fallback), [`BrokerError::Bind`], [`BrokerError::Thread`] (threads already started
    /// are stopped).
    pub fn start(config: BrokerConfig) -> Result<BrokerHandle, BrokerError> {
        // Under uring the path's synchronous implementation never runs: the core's engine does,
        // and each core checks the opcodes its engine issues when it sets up its ring.
        if config.server_model != ServerModel::Uring {
            config.read_path.probe().map_err(|e| BrokerError::ReadPath { source: e.into() })?;
        }
        config.server_model.probe()?;
        config.server_model.supports(config.read_path)?;
        let (logs, report) = LogManager::open(&config.log_dir, config.log_config.clone(), |_| None, false)?;
        tracing::info!(
            partitions = report.partitions.len(),
            clean = report.had_clean_shutdown,
            "opened log directory {}",
            config.log_dir.display()
        );
        let logs = Arc::new(logs);
        let bind_error = |source| BrokerError::Bind { addr: config.listen, source };
        // One listener per core (SO_REUSEPORT) under both models: server.model is dynamic, and
        // both front ends accept on the same sockets (front_end.rs).
        let core_count = uring_start::core_count(config.uring_cores);
        let listeners = uring_start::bind(config.listen, core_count).map_err(bind_error)?;
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).map_err(|source| BrokerError::Bind { addr, source })?),
            None => None,
        };
        // Rolled segments' fsyncs, flush.* and the offset checkpoints run on its thread.
        let scheduler = LogScheduler::start(Arc::clone(&logs), config.scheduler_config())?;
        let local_addr = listeners[0].local_addr().map_err(bind_error)?;
        let coordinator = GroupCoordinator::new(config.coordinator_config());
        let shared = Arc::new(Shared::new(config, local_addr, logs, coordinator, core_count));
        // Parked JoinGroup / SyncGroup requests wait in the purgatory: a group's change tries them.
        shared.coordinator().set_waiters(Arc::new(PurgatoryWaiters(Arc::clone(shared.purgatory()))));
        let mut front: Option<Arc<Mutex<FrontEnds>>> = None;
        let started = (|| {
            shared.io_pool().start("fetchbench-io").map_err(|source| BrokerError::Thread { what: "io", source })?;
            let timer = shared
                .purgatory()
                .start_timer()
                .map_err(|source| BrokerError::Thread { what: "purgatory timer", source })?;
            let (model, path) = (shared.config.server_model, shared.config.read_path);
            let front_ends = Arc::new(Mutex::new(FrontEnds::start(Arc::clone(&shared), listeners, model, path)?));
            // server.model and read.path are dynamic: IncrementalAlterConfigs switches the front
            // ends through this (a weak reference: the handle owns them).
            shared.dynamic_config().set_front_end(Box::new(Switch(Arc::downgrade(&front_ends))));
            front = Some(front_ends);
            // The coordinator replays __consumer_offsets (COORDINATOR_LOAD_IN_PROGRESS until done),
            // then its timer thread fires session, rebalance and retention deadlines.
            let coordinator_shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("fetchbench-group-coordinator".into())
                .spawn(move || {
                    storage::load(&coordinator_shared);
                    coordinator_shared.coordinator().run_timers(&LogStorage { shared: &coordinator_shared });
                })
                .map_err(|source| BrokerError::Thread { what: "group coordinator", source })?;
            // The transaction coordinator replays __transaction_state (COORDINATOR_LOAD_IN_PROGRESS
            // until done), completes the transactions left prepared, then aborts timed-out ones.
            let txn_shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("fetchbench-txn-coordinator".into())
                .spawn(move || txn_markers::run(&txn_shared))
                .map_err(|source| BrokerError::Thread { what: "transaction coordinator", source })?;
            // Last: nothing after it can fail, so it never needs stopping here.
            let metrics = metrics_listener
                .map(|listener| MetricsEndpoint::start(listener, Arc::clone(&shared)))
                .transpose()
                .map_err(|source| BrokerError::Thread { what: "metrics endpoint", source })?;
            Ok((timer, metrics))
        })();
        let (timer, metrics) = match started {
            Ok(threads) => threads,
            Err(e) => {
                // Whatever started ends: no connection was accepted yet.
                shared.begin_shutdown();
                shared.purgatory().shutdown();
                shared.coordinator().shutdown();
                shared.txn_coordinator().shutdown();
                if let Some(front) = &front {
                    lock(front).stop();
                }
                shared.io_pool().close();
                return Err(e);
            }
        };
        tracing::info!("broker listening on {local_addr}");
        let front = front.expect("set when started");
        Ok(BrokerHandle {
            shared,
            front,
            scheduler: Some(scheduler),
            timer: Some(timer),
            had_clean_shutdown: report.had_clean_shutdown,
            partitions_loaded: report.partitions.len(),
            metrics,
        })
    }
}

/// The front ends, locked (a poisoned lock still holds them: every change is one assignment).
fn lock(front: &Mutex<FrontEnds>) -> MutexGuard<'_, FrontEnds> {
    front.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running broker. Dropping it without [`BrokerHandle::shutdown`] leaves its threads running
/// until the process exits.
#[derive(Debug)]
pub struct BrokerHandle {
    shared: Arc<Shared>,
    /// The front ends (threaded, uring) and the listening sockets; a switch of `server.model`
    /// reaches them weakly through the dynamic config.
    front: Arc<Mutex<FrontEnds>>,
    scheduler: Option<LogScheduler>,
    timer: Option<JoinHandle<()>>,
    had_clean_shutdown: bool,
    partitions_loaded: usize,
    /// The metrics endpoint (`metrics.listen`), when configured.
    metrics: Option<MetricsEndpoint>,
}

impl BrokerHandle {
    /// The address the broker listens on (the real port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// What the integration tests may ask of the running broker's state, without its locks
    /// (see [`TestSupport`]).
    pub fn test_support(&self) -> TestSupport<'_> {
        TestSupport::new(&self.shared)
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
    /// encoding failure, a write that failed: the peer reset the connection).
    ///
    /// Also counted: a Fetch answered while its client was hanging up (the write succeeded). Not
    /// counted: a Fetch that waited in the purgatory when its client hung up: it is dropped
    /// unanswered.
    ///
    /// A Fetch is recorded (in the histograms of the io thread that wrote it; this merges every
    /// io thread's) just after the write of its last byte returns and before its connection is
    /// read again, so a client that has just read a whole response may, for a few microseconds,
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
    /// returns (a client may have read the whole response a few microseconds before), or when it
    /// is given up unanswered: its connection closed, or its client hung up while it waited in
    /// the purgatory (dropped within a second, normally at once).
    pub fn fetches_in_flight(&self) -> u64 {
        self.shared.fetches_in_flight()
    }

    /// Record bytes the broker's read paths read into user-space memory before sending them,
    /// since it started, under either server model: `read_path_user_copied_bytes_total` of
    /// [`metrics_registry`](super::metrics_registry) summed over its paths
    /// ([`crate::read_path::TransferStats::user_copied`]). The harness takes differences over
    /// its measured intervals.
    pub fn user_copied_bytes(&self) -> u64 {
        self.shared.metrics().user_copied_bytes()
    }

    /// The broker's metrics now, in the OpenMetrics text format: exactly what the metrics
    /// endpoint (`metrics.listen`) answers to `GET /metrics`, whether or not the endpoint is
    /// configured. The metrics, their units and labels are listed in
    /// [`metrics_registry`](super::metrics_registry); counters and histograms count from the
    /// broker's start (the process's start for `process_*`), never reset.
    ///
    /// Errors: the encoder's `fmt::Error` (not expected: the text is written to a `String`).
    pub fn metrics_text(&self) -> Result<String, std::fmt::Error> {
        self.shared.metrics_text()
    }

    /// The address of the metrics endpoint (the real port when `metrics.listen` said port 0);
    /// `None` when `metrics.listen` is not set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsEndpoint::local_addr)
    }

    /// Blocks until the acceptor and the cores end (they end only after [`Self::shutdown`]
    /// from another handle, or when accepting fails for good).
    pub fn join(self) {
        lock(&self.front).join();
    }

    /// Stops the metrics endpoint, stops accepting, answers the requests waiting in the purgatory (with what there is), stops
    /// the log scheduler, then shuts the log directory down cleanly (each partition after the
    /// append in flight on it, logs flushed, checkpoints and the
    /// `.kafka_cleanshutdown` marker written: Kafka's `LogManager.shutdown`). Connections still
    /// open get errors (retriable ones for produce) until their clients close them: the network
    /// and io threads serve them, and end once the last one is gone.
    ///
    /// Errors: [`BrokerError::Log`].
    pub fn shutdown(mut self) -> Result<(), BrokerError> {
        if let Some(mut metrics) = self.metrics.take() {
            metrics.stop();
        }
        self.shared.begin_shutdown();
        // Waiting fetches answer now, on the io threads; the timer thread ends.
        self.shared.purgatory().shutdown();
        self.shared.coordinator().shutdown();
        self.shared.txn_coordinator().shutdown();
        // Each core stops accepting, finishes (5 s at most) or closes its connections and waits
        // for every completion of its ring; the acceptor ends; no connection comes any more:
        // network threads end with their last connection.
        let threaded_ran = lock(&self.front).stop();
        if !threaded_ran {
            // Only cores ran, all stopped: no request comes any more.
            self.shared.io_pool().close();
        }
        if let Some(t) = self.timer.take() {
            let _ = t.join();
        }
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.shutdown();
        }
        self.shared.log_manager().shutdown()?;
        Ok(())
    }
}
