//! Who the group coordinator wakes, and when: the parked JoinGroup / SyncGroup requests of ONE
//! group ([`GroupWaiters`], [`ParkedThreads`]) and its timer thread ([`TimerWakeup`]), never
//! everyone at once.
//!
//! - A change of group X that may answer a parked request (a completed join, the leader's
//!   assignment, a removal) calls [`GroupWaiters::group_changed`] with X's id, after the shard
//!   lock is released. A heartbeat answers nobody and calls nothing. [`ParkedThreads`] (a parked
//!   request holds its connection thread) unparks only the threads registered for X. Kafka's
//!   purgatory (`DelayedJoin` / `DelayedSync` watched by group key) is the same idea without a
//!   thread per waiter: implementing [`GroupWaiters`] with the broker's purgatory
//!   (`check_and_complete(WatchKey::Group(id))`) moves the waits there.
//! - The timer thread sleeps until the earliest deadline it knows ([`TimerWakeup`]); an operation
//!   that arms an earlier deadline (a new member's session, a join timer) lowers it and wakes
//!   the thread; a heartbeat moves a deadline later and wakes nothing.
//!
//! Locks: each registry shard's mutex and the timer's mutex are leaves, taken alone and never
//! while a coordinator shard lock is held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;

use crate::protocol::consumer_offsets::partition_for;

/// Told when a group changed in a way that may answer its parked JoinGroup / SyncGroup
/// requests. Called with no coordinator lock held; must be cheap (it runs on the request's
/// thread).
pub(crate) trait GroupWaiters: Send + Sync + std::fmt::Debug {
    /// Group `group_id` has new answers for its parked requests, or is gone.
    fn group_changed(&self, group_id: &str);
    /// Every group changed (the coordinator shuts down): every parked request must look again.
    fn all_changed(&self);
}

/// One registry shard: group id -> (registration id, parked thread).
type Registry = Mutex<HashMap<String, Vec<(u64, Thread)>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Threads parked on a group's answer, registered by group id (a registry per
/// `__consumer_offsets` partition, like the coordinator's shards); [`GroupWaiters`] unparks the
/// threads of the changed group only.
///
/// The protocol that loses no wakeup: a waiter [`registers`](Self::register) BEFORE it first
/// looks for its answer (under the shard lock) and stays registered until it leaves; a change
/// is made under the shard lock and notified after it is released. A change before the look is
/// seen by the look; a change after it unparks the registered thread (an unpark before the
/// park makes the park return at once).
#[derive(Debug)]
pub(crate) struct ParkedThreads {
    num_partitions: i32,
    shards: Box<[Registry]>,
    next_id: AtomicU64,
    /// Unparks delivered, by group (a test seam: counts what a change woke).
    #[cfg(test)]
    delivered: Mutex<HashMap<String, u64>>,
}

/// A thread's registration on a group; dropping it deregisters.
#[derive(Debug)]
pub(crate) struct Registration<'a> {
    parked: &'a ParkedThreads,
    group_id: String,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut shard = lock(self.parked.shard(&self.group_id));
        if let Some(threads) = shard.get_mut(&self.group_id) {
            threads.retain(|(id, _)| *id != self.id);
            if threads.is_empty() {
                shard.remove(&self.group_id);
            }
        }
    }
}

impl ParkedThreads {
    /// An empty registry for groups spread over `num_partitions` partitions.
    pub(crate) fn new(num_partitions: i32) -> Self {
        let n = num_partitions.max(1);
        ParkedThreads {
            num_partitions: n,
            shards: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            next_id: AtomicU64::new(1),
            #[cfg(test)]
            delivered: Mutex::new(HashMap::new()),
        }
    }

    fn shard(&self, group_id: &str) -> &Registry {
        &self.shards[partition_for(group_id, self.num_partitions) as usize]
    }

    /// Registers the calling thread as waiting on `group_id` until the registration is dropped.
    pub(crate) fn register(&self, group_id: &str) -> Registration<'_> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(self.shard(group_id)).entry(group_id.to_string()).or_default().push((id, std::thread::current()));
        Registration { parked: self, group_id: group_id.to_string(), id }
    }

    /// How many threads wait on `group_id` (tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self, group_id: &str) -> usize {
        lock(self.shard(group_id)).get(group_id).map_or(0, Vec::len)
    }

    /// How many unparks were delivered to the threads of `group_id` (tests).
    #[cfg(test)]
    pub(crate) fn delivered(&self, group_id: &str) -> u64 {
        lock(&self.delivered).get(group_id).copied().unwrap_or(0)
    }

    /// Unparks delivered to any group's threads (tests).
    #[cfg(test)]
    pub(crate) fn delivered_total(&self) -> u64 {
        lock(&self.delivered).values().sum()
    }
}

impl GroupWaiters for ParkedThreads {
    fn group_changed(&self, group_id: &str) {
        let shard = lock(self.shard(group_id));
        let Some(threads) = shard.get(group_id) else { return };
        for (_, t) in threads {
            t.unpark();
        }
        #[cfg(test)]
        {
            *lock(&self.delivered).entry(group_id.to_string()).or_default() += threads.len() as u64;
        }
    }

    fn all_changed(&self) {
        for shard in self.shards.iter() {
            for (_, t) in lock(shard).values().flatten() {
                t.unpark();
            }
        }
    }
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
