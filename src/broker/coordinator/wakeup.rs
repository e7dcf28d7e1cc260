//! Who the group coordinator wakes, and when: the parked JoinGroup / SyncGroup requests of ONE
//! group ([`GroupWaiters`]) and its timer thread ([`TimerWakeup`]), never everyone at once.
//!
//! - A change of group X that may answer a parked request (a completed join, the leader's
//!   assignment, a removal) calls [`GroupWaiters::group_changed`] with X's id, after the shard
//!   lock is released. A heartbeat answers nobody and calls nothing. The broker's purgatory is
//!   the [`GroupWaiters`]: parked requests are `DelayedJoin` / `DelayedSync` operations
//!   ([`super::delayed_join`]) watching `WatchKey::Group(X)`, holding no thread, and X's change
//!   tries only them (Kafka's purgatory keyed by group).
//! - The timer thread sleeps until the earliest deadline it knows ([`TimerWakeup`]); an operation
//!   that arms an earlier deadline (a new member's session, a join timer) lowers it and wakes
//!   the thread; a heartbeat moves a deadline later and wakes nothing.
//!
//! Locks: the timer's mutex is a leaf, taken alone and never while a coordinator shard lock is
//! held; [`GroupWaiters::group_changed`] is called with no coordinator lock held.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Told when a group changed in a way that may answer its parked JoinGroup / SyncGroup
/// requests. Called with no coordinator lock held; must be cheap (it runs on the request's
/// thread). The broker's [`Purgatory`](crate::broker::purgatory::Purgatory) implements it
/// ([`crate::broker::coordinator::delayed_join`]): `check_and_complete(WatchKey::Group(id))`.
pub(crate) trait GroupWaiters: Send + Sync + std::fmt::Debug {
    /// Group `group_id` has new answers for its parked requests, or is gone.
    fn group_changed(&self, group_id: &str);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The coordinator timer thread's alarm: the earliest deadline it must wake for (ms since the
/// epoch), lowered by whoever arms an earlier one.
///
/// `next` is read without the mutex, so an operation whose deadline is not earlier (every
/// heartbeat) touches nothing shared; lowering it and the timer's look at it before sleeping
/// both happen under the mutex, so no lowering is missed.
#[derive(Debug)]
pub(crate) struct TimerWakeup {
    next: AtomicI64,
    sleep: Mutex<()>,
    wake: Condvar,
    /// How many times a deadline woke (or would have woken) the timer (a test seam).
    notified: AtomicU64,
}

impl Default for TimerWakeup {
    fn default() -> Self {
        TimerWakeup {
            next: AtomicI64::new(i64::MAX),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            notified: AtomicU64::new(0),
        }
    }
}

impl TimerWakeup {
    /// A deadline (ms) was armed: wakes the timer if it is earlier than the one it sleeps for.
    pub(crate) fn schedule(&self, deadline: i64) {
        if deadline >= self.next.load(Ordering::SeqCst) {
            return;
        }
        let _guard = lock(&self.sleep);
        if deadline < self.next.fetch_min(deadline, Ordering::SeqCst) {
            self.notified.fetch_add(1, Ordering::Relaxed);
            self.wake.notify_all();
        }
    }

    /// Starts a pass over the shards: deadlines armed from now on are collected anew (the pass
    /// then adds what it found with [`Self::sleep_until`]).
    pub(crate) fn begin_pass(&self) {
        let _guard = lock(&self.sleep);
        self.next.store(i64::MAX, Ordering::SeqCst);
    }

    /// Sleeps until `found` (the earliest deadline the pass saw) or an earlier deadline armed
    /// since [`Self::begin_pass`], or until `stop` is set (see [`Self::wake_now`]).
    pub(crate) fn sleep_until(&self, found: i64, stop: &AtomicBool, now_ms: impl Fn() -> i64) {
        let mut guard = lock(&self.sleep);
        self.next.fetch_min(found, Ordering::SeqCst);
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let next = self.next.load(Ordering::SeqCst);
            let now = now_ms();
            if now >= next {
                return;
            }
            guard = if next == i64::MAX {
                self.wake.wait(guard).unwrap_or_else(|p| p.into_inner())
            } else {
                let ms = u64::try_from(next - now).unwrap_or(u64::MAX);
                self.wake.wait_timeout(guard, Duration::from_millis(ms)).unwrap_or_else(|p| p.into_inner()).0
            };
        }
    }

    /// Wakes the timer now (shutdown: the caller set the `stop` flag first).
    pub(crate) fn wake_now(&self) {
        let _guard = lock(&self.sleep);
        self.next.store(i64::MIN, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// The deadline the timer sleeps for (tests).
    #[cfg(test)]
    pub(crate) fn next(&self) -> i64 {
        self.next.load(Ordering::SeqCst)
    }

    /// How many times an armed deadline woke the timer (tests).
    #[cfg(test)]
    pub(crate) fn notified(&self) -> u64 {
        self.notified.load(Ordering::Relaxed)
    }
}
