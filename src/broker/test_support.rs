//! What the integration tests may ask of a running broker, through
//! [`BrokerHandle::test_support`](super::BrokerHandle::test_support): the questions they ask and
//! the setup they do, each one a short critical section taken and released here, so no test
//! holds the broker's log lock (or learns its lock order). For tests only: not a stable API, and
//! nothing in the crate or `main.rs` uses it.
//!
//! - [`TestSupport::connection_panics`]: connection threads that panicked (tests assert 0);
//! - [`TestSupport::open_connections`]: connections counted against `max.connections`;
//! - [`TestSupport::coordinator`]: the group coordinator's queries (`describe_group`,
//!   `fetch_offsets`, `is_loading`, `partition_for`);
//! - [`TestSupport::create_topic`]: setup, a topic made in the log directory as CreateTopics does;
//! - [`TestSupport::log_end_offset`], [`TestSupport::log_config`]: a partition's log end offset
//!   and log configuration.

use super::coordinator::runtime::GroupCoordinator;
use super::shared::Shared;
use super::topics;
use crate::log::checkpoint::TopicId;
use crate::log::{LogConfig, LogError};

/// A running broker's state as the integration tests see it (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct TestSupport<'a> {
    shared: &'a Shared,
}

impl<'a> TestSupport<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        TestSupport { shared }
    }

    /// Connections whose thread panicked (a bug: bad input must get an error or a close, never
    /// a panic); see [`Shared::connection_panics`].
    pub fn connection_panics(&self) -> u64 {
        self.shared.connection_panics()
    }

    /// Client connections open now (those counted against `max.connections`).
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections()
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
        let mut guard = self.shared.logs();
        let logs = guard.as_mut().expect("the broker is running");
        topics::create(logs, topic, partitions, None)
    }

    /// The log end offset of `topic`-`partition` (the offset the next record gets); `None` when
    /// the partition does not exist or the broker is shutting down.
    pub fn log_end_offset(&self, topic: &str, partition: i32) -> Option<i64> {
        self.shared.logs().as_ref()?.log(topic, partition).map(|log| log.log_end_offset())
    }

    /// The log configuration of `topic`-`partition` (the broker defaults with the topic's
    /// overrides); `None` when the partition does not exist or the broker is shutting down.
    pub fn log_config(&self, topic: &str, partition: i32) -> Option<LogConfig> {
        self.shared.logs().as_ref()?.log(topic, partition).map(|log| log.config().clone())
    }
}
