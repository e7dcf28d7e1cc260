//! [`Broker::start`] and the running [`BrokerHandle`]: open the log directory and start its
//! scheduler thread ([`LogScheduler`]: background fsyncs and checkpoints), bind the listen
//! address, start the group coordinator's thread (replay of `__consumer_offsets`, then its
//! timers) and the accept thread, which enforces the connection limits and gives each
//! connection its own thread ([`connection::serve`]); [`BrokerHandle::shutdown`] stops them and
//! shuts the log directory down cleanly. Kafka's `BrokerServer` with its `SocketServer` acceptor.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::config::BrokerConfig;
use super::connection;
use super::coordinator::runtime::GroupCoordinator;
use super::coordinator::storage::{self, LogStorage};
use super::error::BrokerError;
use super::shared::{FetchLatencies, Shared};
use super::test_support::TestSupport;
use crate::log::manager::LogManager;
use crate::log::scheduler::LogScheduler;
use crate::metrics::Latency;

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
        let logs = Arc::new(logs);
        let listener =
            TcpListener::bind(config.listen).map_err(|source| BrokerError::Bind { addr: config.listen, source })?;
        // Rolled segments' fsyncs, flush.* and the offset checkpoints run on its thread.
        let scheduler = LogScheduler::start(Arc::clone(&logs), config.scheduler_config())?;
        let local_addr = listener.local_addr().map_err(|source| BrokerError::Bind { addr: config.listen, source })?;
        let coordinator = GroupCoordinator::new(config.coordinator_config());
        let shared = Arc::new(Shared::new(config, local_addr, logs, coordinator));
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
                storage::load(&coordinator_shared);
                coordinator_shared.coordinator().run_timers(&LogStorage { shared: &coordinator_shared });
            })
            .map_err(|source| BrokerError::Bind { addr: local_addr, source })?;
        tracing::info!("broker listening on {local_addr}");
        Ok(BrokerHandle {
            shared,
            accept: Some(accept),
            scheduler: Some(scheduler),
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
                conn_shared.count_connection_panic();
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
    scheduler: Option<LogScheduler>,
    had_clean_shutdown: bool,
    partitions_loaded: usize,
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

    /// Stops accepting, then stops the log scheduler and shuts the log directory down cleanly
    /// (Kafka's `LogManager.shutdown`): each partition after the append in flight on it, logs
    /// flushed, checkpoints and the `.kafka_cleanshutdown` marker written, the directory's lock
    /// released. Connections still open get retriable errors (`NOT_LEADER_OR_FOLLOWER` for
    /// produce) or are closed on their next request.
    ///
    /// Errors: [`BrokerError::Log`].
    pub fn shutdown(mut self) -> Result<(), BrokerError> {
        self.shared.begin_shutdown();
        // Parked fetches answer now.
        self.shared.fetch_wakeup().notify();
        self.shared.coordinator().shutdown();
        // Wake the accept thread so it sees the flag.
        let _ = TcpStream::connect(self.shared.local_addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.shutdown();
        }
        self.shared.log_manager().shutdown()?;
        Ok(())
    }
}
