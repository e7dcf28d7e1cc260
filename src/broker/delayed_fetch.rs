//! Long polling for Fetch (Kafka's `DelayedFetch` in the fetch purgatory).
//!
//! A Fetch that finds fewer than `min_bytes` bytes across its partitions (and no error) is
//! parked until enough data arrives or `max_wait_ms` passes, then answered with what is
//! available at that moment (the response is rebuilt: offsets may have moved). `max_wait_ms`
//! of 0 answers at once.
//!
//! Parking blocks the connection's own thread (requests on one connection are answered in
//! order anyway, as Kafka mutes a channel while a request is in flight) on a condition
//! variable; no log lock is held while parked, so other connections are not delayed. Every
//! append bumps [`FetchWakeup`]'s generation counter and wakes all parked fetches, which
//! rebuild their responses: no busy loop, no polling sleeps. An idle consumer with Kafka's
//! default `fetch.max.wait.ms` of 500 ms makes about two requests a second.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The generation counter that appends bump and parked fetches wait on.
#[derive(Debug, Default)]
pub(crate) struct FetchWakeup {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl FetchWakeup {
    fn lock(&self) -> MutexGuard<'_, u64> {
        self.generation.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The current generation: read it before looking at the logs, then
    /// [`Self::wait_past`] it, so an append in between is never missed.
    pub(crate) fn generation(&self) -> u64 {
        *self.lock()
    }

    /// Records that the logs changed (an append, or shutdown) and wakes every parked fetch.
    pub(crate) fn notify(&self) {
        let mut generation = self.lock();
        *generation = generation.wrapping_add(1);
        drop(generation);
        self.changed.notify_all();
    }

    /// Blocks until the generation differs from `seen` or `deadline` passes. Returns the
    /// generation then (equal to `seen` on a timeout).
    pub(crate) fn wait_past(&self, seen: u64, deadline: Instant) -> u64 {
        let mut generation = self.lock();
        while *generation == seen {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            generation = match self.changed.wait_timeout(generation, deadline - now) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        *generation
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
    fn wait_past_times_out_without_a_notify() {
        let wakeup = FetchWakeup::default();
        let seen = wakeup.generation();
        let start = Instant::now();
        assert_eq!(wakeup.wait_past(seen, deadline(start, 50)), seen);
        assert!(start.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn a_notify_before_the_wait_is_not_missed() {
        let wakeup = FetchWakeup::default();
        let seen = wakeup.generation();
        wakeup.notify();
        // The deadline is far away: this returns only because the generation moved.
        assert_ne!(wakeup.wait_past(seen, deadline(Instant::now(), 60_000)), seen);
    }

    #[test]
    fn a_notify_from_another_thread_wakes_the_waiter() {
        let wakeup = Arc::new(FetchWakeup::default());
        let seen = wakeup.generation();
        let notifier = Arc::clone(&wakeup);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            notifier.notify();
        });
        assert_ne!(wakeup.wait_past(seen, deadline(Instant::now(), 60_000)), seen);
        t.join().unwrap();
    }
}
