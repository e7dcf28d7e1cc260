//! Long polling for Fetch: [`DelayedFetch`], Kafka's `DelayedFetch` in the fetch purgatory.
//!
//! A Fetch that finds fewer than `min_bytes` bytes across its partitions (and no error) waits
//! until enough data arrives or `max_wait_ms` passes, then is answered with what is available at
//! that moment (the response is rebuilt: offsets may have moved). `max_wait_ms` of 0 answers at
//! once.
//!
//! Waiting holds no thread and no log lock: the Fetch handler wraps its request and its
//! [`Responder`] in a [`DelayedFetch`] and hands it to the
//! [`Purgatory`](super::purgatory::Purgatory), watching [`WatchKey::Partition`] of every
//! partition the response named ([`watch_keys`]). An append to one of them (produce, the group
//! coordinator's `__consumer_offsets` writes) calls `check_and_complete` for that partition, which
//! rebuilds this response on an io thread ([`DelayedOperation::try_complete`]) and answers if it
//! now holds `min_bytes` (capped at the broker's `fetch.max.bytes`) or an error; appends to other
//! partitions do not touch it. At `max_wait_ms` it is answered with what there is. When its client
//! goes away it is dropped within the purgatory's sweep (its Responder dropped: the Fetch leaves
//! `fetches_in_flight`, its connection's socket and place are freed). An idle consumer with
//! Kafka's default `fetch.max.wait.ms` of 500 ms makes about two requests a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::FetchRequest;

use super::purgatory::{DelayedOperation, WatchKey};
use super::responder::{ConnectionProbe, Responder};
use super::response;
use super::shared::Shared;
use crate::protocol::fetch_response::FetchResponse;

/// Builds the response of a Fetch request at a version from the logs as they are now (the Fetch
/// handler's `build`).
pub(crate) type BuildFetch = fn(&Shared, &FetchRequest, i16) -> FetchResponse;

/// Whether a fetch that found `available` bytes (and no error) must wait for more:
/// `max_wait_ms` is positive and `available < min_bytes` (a `min_bytes` of 0 or less never
/// waits; Kafka's `ReplicaManager.fetchMessages`).
pub(crate) fn should_park(available: u64, min_bytes: i32, max_wait_ms: i32) -> bool {
    max_wait_ms > 0 && available < u64::try_from(min_bytes.max(0)).unwrap_or(0)
}

/// The deadline of a fetch parked at `start` with `max_wait_ms`.
pub(crate) fn deadline(start: Instant, max_wait_ms: i32) -> Instant {
    start + Duration::from_millis(u64::try_from(max_wait_ms.max(0)).unwrap_or(0))
}

/// Record bytes in the response, across its partitions.
pub(crate) fn available_bytes(response: &FetchResponse) -> u64 {
    let partitions = response.topics.iter().flat_map(|t| t.partitions.iter());
    partitions.filter_map(|p| p.records.as_ref()).map(|slice| slice.len).sum()
}

/// Whether the response or any partition carries an error (answered at once, as Kafka does).
pub(crate) fn has_error(response: &FetchResponse) -> bool {
    response.error_code != 0 || response.topics.iter().flat_map(|t| t.partitions.iter()).any(|p| p.error_code != 0)
}

/// The partitions a response names (topics resolved to names, ids included), as watch keys.
pub(crate) fn watch_keys(response: &FetchResponse) -> Vec<WatchKey> {
    let mut keys: Vec<WatchKey> = response
        .topics
        .iter()
        .filter(|t| !t.name.is_empty())
        .flat_map(|t| t.partitions.iter().map(|p| WatchKey::Partition(t.name.clone(), p.partition_index)))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// A Fetch waiting in the purgatory for `min_bytes` or its deadline (see the
/// [module docs](self)).
pub(crate) struct DelayedFetch {
    shared: Arc<Shared>,
    request: FetchRequest,
    version: i16,
    /// `min_bytes`, capped at `fetch.max.bytes`.
    min_bytes: i32,
    deadline: Instant,
    build: BuildFetch,
    connection: ConnectionProbe,
    correlation_id: i32,
    /// Taken by the completion that answers.
    responder: Mutex<Option<Responder>>,
}

impl DelayedFetch {
    /// A Fetch of `request` at `version`, answered through `responder` once a rebuilt response
    /// (`build`) holds `min_bytes` (already capped) or an error, or at `deadline`.
    pub(crate) fn new(
        request: FetchRequest,
        version: i16,
        min_bytes: i32,
        deadline: Instant,
        build: BuildFetch,
        responder: Responder,
    ) -> DelayedFetch {
        DelayedFetch {
            shared: Arc::clone(responder.shared()),
            request,
            version,
            min_bytes,
            deadline,
            build,
            connection: responder.connection_probe(),
            correlation_id: responder.correlation_id(),
            responder: Mutex::new(Some(responder)),
        }
    }

    fn take_responder(&self) -> Option<Responder> {
        self.responder.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }

    fn respond(&self, response: FetchResponse) {
        if let Some(responder) = self.take_responder() {
            responder.send(response::fetch(response, self.version, self.correlation_id));
        }
    }

    /// The client is gone: drop the Responder unanswered (closes what is left of the
    /// connection, and the Fetch leaves `fetches_in_flight`).
    fn drop_unanswered(&self) {
        if let Some(responder) = self.take_responder() {
            tracing::debug!(
                "{}: a waiting Fetch (correlation id {}) is dropped: its client went away",
                responder.peer(),
                self.correlation_id
            );
        }
    }
}

impl DelayedOperation for DelayedFetch {
    fn try_complete(&self) -> bool {
        if self.connection.is_closed() {
            self.drop_unanswered();
            return true;
        }
        let response = (self.build)(&self.shared, &self.request, self.version);
        let enough = available_bytes(&response) >= u64::try_from(self.min_bytes.max(0)).unwrap_or(0);
        if enough || has_error(&response) || self.shared.is_shutting_down() {
            self.respond(response);
            return true;
        }
        false
    }

    fn on_expiration(&self) {
        if self.connection.is_closed() {
            self.drop_unanswered();
            return;
        }
        let response = (self.build)(&self.shared, &self.request, self.version);
        self.respond(response);
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn is_connection_closed(&self) -> bool {
        self.connection.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fetch_response::{FetchableTopic, PartitionData};

    #[test]
    fn parks_only_when_short_of_min_bytes_with_a_positive_wait() {
        assert!(should_park(0, 1, 500));
        assert!(should_park(99, 100, 1));
        assert!(!should_park(100, 100, 500));
        assert!(!should_park(0, 1, 0));
        assert!(!should_park(0, 0, 500));
        assert!(!should_park(0, -1, 500));
        assert!(!should_park(0, 1, -1));
    }

    #[test]
    fn the_deadline_is_max_wait_after_the_start() {
        let start = Instant::now();
        assert_eq!(deadline(start, 500), start + Duration::from_millis(500));
        assert_eq!(deadline(start, -1), start);
        assert_eq!(deadline(start, i32::MAX), start + Duration::from_millis(i32::MAX as u64));
    }

    #[test]
    fn every_named_partition_is_watched_once_and_unknown_topics_not_at_all() {
        let topic = |name: &str, partitions: &[i32]| FetchableTopic {
            name: name.into(),
            partitions: partitions
                .iter()
                .map(|&p| PartitionData { partition_index: p, ..Default::default() })
                .collect(),
            ..Default::default()
        };
        let response = FetchResponse {
            topics: vec![topic("a", &[0, 1]), topic("", &[0]), topic("b", &[3]), topic("a", &[1])],
            ..Default::default()
        };
        let keys = watch_keys(&response);
        let p = |t: &str, i| WatchKey::Partition(t.into(), i);
        assert_eq!(keys, [p("a", 0), p("a", 1), p("b", 3)]);
    }
}
