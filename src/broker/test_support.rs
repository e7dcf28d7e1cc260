//! What the integration tests may ask of a running broker, through
//! [`BrokerHandle::test_support`](super::BrokerHandle::test_support): the questions they ask and
//! the setup they do, each one a short critical section taken and released here, so no test
//! holds a broker lock (or learns the lock order), except through the one seam made for it,
//! [`TestSupport::hold_partition_lock`]. For tests only: not a stable API, and
//! nothing in the crate or `main.rs` uses it.
//!
//! - [`TestSupport::connection_panics`]: panics caught on network and io threads (tests assert 0);
//! - [`TestSupport::open_connections`]: connections counted against `max.connections`;
//! - [`TestSupport::delayed_operations`]: requests waiting in the purgatory (parked fetches);
//! - [`TestSupport::coordinator`]: the group coordinator's queries (`describe_group`,
//!   `fetch_offsets`, `is_loading`, `partition_for`);
//! - [`TestSupport::create_topic`]: setup, a topic made in the log directory as CreateTopics does;
//! - [`TestSupport::log_end_offset`], [`TestSupport::log_config`]: a partition's log end offset
//!   (read without the partition's lock) and log configuration;
//! - [`TestSupport::uring_resources`]: the buffers and pipes the `uring` cores hold now (all 0
//!   once no transfer is in flight);
//! - [`TestSupport::read_path`], [`TestSupport::read_path_transfers`]: the broker's current read
//!   path (`read.path`, dynamic) and what each read path moved in Fetch responses;
//! - [`TestSupport::hold_partition_lock`]: a partition's lock held (for writing) until the
//!   returned guard is dropped, to show that other partitions go on meanwhile.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::coordinator::runtime::GroupCoordinator;
use super::shared::Shared;
use super::topics;
use super::uring::gauges::UringResources;
use crate::log::checkpoint::TopicId;
use crate::log::{LogConfig, LogError};
use crate::read_path::ReadPathKind;

/// A running broker's state as the integration tests see it (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct TestSupport<'a> {
    shared: &'a Shared,
}

impl<'a> TestSupport<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        TestSupport { shared }
    }

    /// The read path new Fetch responses are written with (`read.path`: the static one until
    /// IncrementalAlterConfigs changes it).
    pub fn read_path(&self) -> ReadPathKind {
        self.shared.dynamic_config().read_path()
    }

    /// `(transfers, bytes)` that `kind` moved in Fetch responses since the broker started, as
    /// the metrics endpoint counts them (`fetchbench_read_path_{transfers,bytes}_total`): when a
    /// response's write returns, so a client may have read the response just before.
    pub fn read_path_transfers(&self, kind: ReadPathKind) -> (u64, u64) {
        self.shared.metrics().path_counts(kind.name())
    }

    /// Panics caught on the broker's network and io threads (a bug: bad input must get an error
    /// or a close, never a panic); see [`Shared::connection_panics`].
    pub fn connection_panics(&self) -> u64 {
        self.shared.connection_panics()
    }

    /// Client connections open now (those counted against `max.connections`).
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections()
    }

    /// The registered buffers, provided buffers and pipes the `uring` model's cores hold now,
    /// summed over the cores (all 0 under `threaded`, and under `uring` whenever no transfer is
    /// in flight).
    pub fn uring_resources(&self) -> UringResources {
        self.shared.uring_gauges().snapshot()
    }

    /// Requests waiting in the purgatory now (long-polling fetches short of `min_bytes`).
    pub fn delayed_operations(&self) -> usize {
        self.shared.purgatory().delayed()
    }

    /// The group coordinator, for its queries (`describe_group`, `fetch_offsets`, `is_loading`,
    /// `partition_for`). It takes its own lock for each call, never the log lock.
    pub fn coordinator(&self) -> &'a GroupCoordinator {
        self.shared.coordinator()
    }

    /// Creates `topic` with partitions `0..partitions` and the broker's log defaults, as
    /// CreateTopics does ([`topics::create`]: partitions that exist are kept), and returns its
    /// topic id.
    ///
    /// Errors: those of [`topics::create`]. Panics when the broker is shutting down.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<TopicId, LogError> {
        let logs = self.shared.logs().expect("the broker is running");
        topics::create(&logs.lock_topic_creation(), topic, partitions, None)
    }

    /// The log end offset of `topic`-`partition` (the offset the next record gets), read
    /// without the partition's lock (so also while [`Self::hold_partition_lock`] holds it);
    /// `None` when the partition does not exist or the broker is shutting down.
    pub fn log_end_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        Some(self.shared.logs()?.partition(topic, partition)?.log_end_offset())
    }

    /// The log configuration of `topic`-`partition` (the broker defaults with the topic's
    /// overrides); `None` when the partition does not exist or the broker is shutting down.
    pub fn log_config(&self, topic: &str, partition: i32) -> Option<LogConfig> {
        Some(LogConfig::clone(&self.shared.logs()?.partition(topic, partition)?.config()))
    }

    /// Takes the lock of `topic`-`partition` for writing (as an append holds it) and keeps it
    /// until the returned guard is dropped: appends to that partition, and fetches from it, wait
    /// meanwhile; other partitions must not. The lock is held by a thread of the guard's own,
    /// and this returns once it is held. `None` when the partition does not exist or the broker
    /// is shutting down.
    pub fn hold_partition_lock(&self, topic: &str, partition: i32) -> Option<PartitionLockGuard> {
        let p = self.shared.logs()?.partition(topic, partition)?;
        let (held_tx, held_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let holder = std::thread::Builder::new()
            .name(format!("test-hold-{topic}-{partition}"))
            .spawn(move || {
                let guard = p.log_mut();
                let _ = held_tx.send(());
                // Until the guard sends or is dropped.
                let _ = release_rx.recv();
                drop(guard);
            })
            .expect("spawn the lock holder");
        held_rx.recv().expect("the holder took the lock");
        Some(PartitionLockGuard { release: Some(release_tx), holder: Some(holder) })
    }
}

/// A partition's lock held by [`TestSupport::hold_partition_lock`]; dropping it releases the
/// lock (and waits until it is released).
#[derive(Debug)]
pub struct PartitionLockGuard {
    release: Option<mpsc::Sender<()>>,
    holder: Option<JoinHandle<()>>,
}

impl Drop for PartitionLockGuard {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(h) = self.holder.take() {
            let _ = h.join();
        }
    }
}
