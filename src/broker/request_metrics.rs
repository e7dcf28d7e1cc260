//! The broker's Fetch metrics (Kafka's `RequestMetrics` for `FetchConsumer`): the total-time
//! histograms ([`FetchLatencies`]) recorded per io thread, and the count of Fetch requests in
//! flight ([`FetchInFlight`]).
//!
//! Each io thread, and each core of `server.model=uring` (which writes its connections'
//! responses itself), records into its own slot (a mutex nobody else takes but the reader), so
//! recording never waits on another request; [`FetchMetrics::take`] swaps every slot for an
//! empty one and merges them. One more slot serves any other thread (none answers a Fetch
//! today). A Fetch recorded while a take runs lands in this take or the next, never lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::metrics::Latency;

/// The broker-side consumer Fetch latencies since the last take, in nanoseconds (see
/// [`BrokerHandle::take_fetch_latency`] for what each value measures), split by the response.
///
/// [`BrokerHandle::take_fetch_latency`]: crate::broker::server::BrokerHandle::take_fetch_latency
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

    fn merge(&mut self, other: &FetchLatencies) {
        self.with_records.merge(&other.with_records);
        self.without_records.merge(&other.without_records);
    }
}

/// One Fetch request counted in [`FetchMetrics::in_flight`] from the moment it was decoded to
/// the drop of this guard: after its response was written, or when it is given up unanswered
/// (its connection closed, the request dropped).
#[derive(Debug)]
pub(crate) struct FetchInFlight(Arc<AtomicU64>);

impl Drop for FetchInFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Per-io-thread (and per-core) Fetch latency slots and the in-flight count (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct FetchMetrics {
    /// One per io thread, then one per `uring` core, then one for any other thread.
    slots: Box<[Mutex<FetchLatencies>]>,
    io_threads: usize,
    in_flight: Arc<AtomicU64>,
}

impl FetchMetrics {
    /// Empty histograms for `io_threads` io threads, `cores` `uring` cores (0 under
    /// `server.model=threaded`) and the other threads' slot.
    pub(crate) fn new(io_threads: usize, cores: usize) -> FetchMetrics {
        FetchMetrics {
            slots: (0..=io_threads + cores).map(|_| Mutex::new(FetchLatencies::default())).collect(),
            io_threads,
            in_flight: Arc::new(AtomicU64::new(0)),
        }
    }

    fn slot(&self, index: usize) -> MutexGuard<'_, FetchLatencies> {
        // Recording never panics; a poisoned lock still holds valid histograms.
        self.slots[index].lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one consumer Fetch's total time in the slot of io thread `io_thread` (`None`, or
    /// an index past the io threads: the other threads' slot). Clamped to 1 us ..= 60 s by
    /// [`Latency::record_ns`].
    pub(crate) fn record(&self, io_thread: Option<usize>, total: Duration, with_records: bool) {
        let other = self.slots.len() - 1;
        self.record_at(io_thread.filter(|&i| i < self.io_threads).unwrap_or(other), total, with_records);
    }

    /// Records one consumer Fetch's total time in the slot of `uring` core `core` (an index past
    /// the cores: the other threads' slot).
    pub(crate) fn record_core(&self, core: usize, total: Duration, with_records: bool) {
        let other = self.slots.len() - 1;
        self.record_at((self.io_threads + core).min(other), total, with_records);
    }

    fn record_at(&self, index: usize, total: Duration, with_records: bool) {
        let ns = u64::try_from(total.as_nanos()).unwrap_or(u64::MAX);
        let mut slot = self.slot(index);
        if with_records {
            slot.with_records.record_ns(ns);
        } else {
            slot.without_records.record_ns(ns);
        }
    }

    /// Every slot's histograms since the last take, merged; the slots are reset.
    pub(crate) fn take(&self) -> FetchLatencies {
        let mut taken = FetchLatencies::default();
        for index in 0..self.slots.len() {
            // Allocate the empty histograms before locking: the io thread records meanwhile.
            let mut empty = FetchLatencies::default();
            std::mem::swap(&mut *self.slot(index), &mut empty);
            taken.merge(&empty);
        }
        taken
    }

    /// Fetch requests decoded and not yet answered (or given up).
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Counts one Fetch request in [`Self::in_flight`] until the guard is dropped.
    pub(crate) fn track(&self) -> FetchInFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        FetchInFlight(Arc::clone(&self.in_flight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_merged_and_reset_by_take() {
        let metrics = FetchMetrics::new(2, 2);
        metrics.record(Some(0), Duration::from_millis(1), true);
        metrics.record(Some(1), Duration::from_millis(2), false);
        metrics.record(None, Duration::from_millis(3), true);
        metrics.record(Some(7), Duration::from_millis(4), true);
        metrics.record_core(0, Duration::from_millis(5), true);
        metrics.record_core(9, Duration::from_millis(6), false);
        let taken = metrics.take();
        assert_eq!((taken.with_records.count(), taken.without_records.count()), (4, 2));
        assert_eq!(taken.all().count(), 6);
        assert_eq!(metrics.take().all().count(), 0);
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let metrics = FetchMetrics::new(1, 0);
        let a = metrics.track();
        let b = metrics.track();
        assert_eq!(metrics.in_flight(), 2);
        drop(a);
        assert_eq!(metrics.in_flight(), 1);
        drop(b);
        assert_eq!(metrics.in_flight(), 0);
    }
}
