//! [`Purgatory`]: requests that wait for something, holding no thread (Kafka's
//! `DelayedOperationPurgatory`).
//!
//! A handler that cannot answer yet (a Fetch short of `min_bytes`, a JoinGroup waiting for the
//! rebalance) wraps its [`Responder`](super::responder::Responder) in a [`DelayedOperation`] and
//! hands it to [`Purgatory::try_complete_else_watch`] with the [`WatchKey`]s whose change could
//! complete it; the io thread returns at once. Then:
//!
//! - whoever changes a key (produce appending to a partition, the coordinator appending to
//!   `__consumer_offsets`, a group changing state) calls [`Purgatory::check_and_complete`] with
//!   it, after the change is visible: one job on the io pool tries the operations watching THAT
//!   key, and only those (Kafka's `checkAndComplete`). Calls for a key whose check is queued and
//!   not yet started are merged into it (the check reads the state after every such change);
//! - the timer thread expires an operation at its deadline: a job on the io pool calls its
//!   [`DelayedOperation::on_expiration`] (Kafka's `SystemTimer` + `ExpiredOperationReaper`);
//! - an operation whose connection went away is expired at once: the network thread that notices
//!   the hang-up calls [`Purgatory::connection_closed`], which makes the timer thread sweep for
//!   such operations now (it also sweeps every [`SWEEP_INTERVAL`]);
//! - [`Purgatory::shutdown`] expires every operation (answered with what there is).
//!
//! Completions always run on the io pool, never on the timer thread or a network thread (or on
//! the io thread that parks the operation, inside `try_complete_else_watch`).
//!
//! ## At most one completion
//!
//! Each operation has a lock and a `completed` flag (Kafka's `DelayedOperation.lock` and
//! `completed`): `try_complete` and `on_expiration` are only called with the lock held and the
//! flag clear, and the flag is set by the call that completes. A check that finds the lock busy
//! does not wait: it marks a retry, which the holder runs after releasing it (Kafka's
//! `maybeTryComplete` with `tryCompletePending`), so no update is missed and no io thread waits
//! on another's write. `try_complete_else_watch` tries once, watches every key, then tries again
//! (an update between the first try and the watch is not missed), all under the operation's lock,
//! and only then arms the timer. A completed operation leaves its watch lists and the timer at
//! once (nothing of it stays until its deadline).
//!
//! ## Locks
//!
//! Watch lists are sharded by key ([`SHARDS`] mutexes); the timer has one mutex. Neither is held
//! while an operation's `try_complete` or `on_expiration` runs, and no operation lock is taken
//! under them, so the order is: an operation's lock, then a shard's or the timer's (briefly).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::io_pool::IoPool;

/// What a delayed operation waits on; a change to it may complete the operation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum WatchKey {
    /// A partition (topic name, partition index): an append to it (Kafka's
    /// `TopicPartitionOperationKey`).
    Partition(String, i32),
    /// A consumer group (group id): a member joined, synced, left or timed out (Kafka's
    /// `GroupJoinKey` / `GroupSyncKey`).
    Group(String),
}

/// A request waiting in the [`Purgatory`] (Kafka's `DelayedOperation`).
pub(crate) trait DelayedOperation: Send + Sync + 'static {
    /// Completes the operation if it can now (sends its response through its Responder); true if
    /// it completed. The purgatory calls it with the operation's lock held and never after a
    /// completion, so at most one call completes.
    fn try_complete(&self) -> bool;
    /// Completes it at its deadline (or when its connection closed / the broker stops): answers
    /// with what there is, or drops the Responder when the connection is gone.
    fn on_expiration(&self);
    /// When it expires.
    fn deadline(&self) -> Instant;
    /// Whether its client went away (the network thread noticed the hang-up): the operation is
    /// then expired at once.
    fn is_connection_closed(&self) -> bool;
}

/// Watch-list shards (Kafka's `purgatory` shards its watchers 512 ways).
pub(crate) const SHARDS: usize = 64;

/// How often the timer thread looks for operations whose connection closed, besides when a
/// network thread asks ([`Purgatory::connection_closed`]).
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// One watched operation.
struct Entry {
    id: u64,
    op: Arc<dyn DelayedOperation>,
    deadline: Instant,
    keys: Vec<WatchKey>,
    lock: Mutex<()>,
    completed: AtomicBool,
    try_pending: AtomicBool,
}

impl Entry {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_completed(&self) -> bool {
        self.completed.load(Ordering::SeqCst)
    }

    /// `try_complete` under the lock held by the caller; sets the flag on success.
    fn try_complete_locked(&self) -> bool {
        if self.is_completed() {
            return true;
        }
        let done = self.op.try_complete();
        if done {
            self.completed.store(true, Ordering::SeqCst);
        }
        done
    }

    /// Kafka's `maybeTryComplete`: tries without waiting for the lock; a check that finds it busy
    /// leaves a retry for the holder. True if the operation is completed.
    fn maybe_try_complete(&self) -> bool {
        loop {
            let retry = match self.lock.try_lock() {
                Ok(guard) => {
                    self.try_pending.store(false, Ordering::SeqCst);
                    let done = self.try_complete_locked();
                    drop(guard);
                    if done {
                        return true;
                    }
                    // Another check arrived while we held the lock: its update may be newer.
                    self.try_pending.load(Ordering::SeqCst)
                }
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    drop(poisoned.into_inner());
                    self.lock.clear_poison();
                    true
                }
                // The holder sees the flag and retries; set it, and retry ourselves only if it
                // was already set by nobody (the holder may have released the lock since).
                Err(std::sync::TryLockError::WouldBlock) => !self.try_pending.swap(true, Ordering::SeqCst),
            };
            if self.is_completed() {
                return true;
            }
            if !retry {
                return false;
            }
        }
    }

    /// Expires the operation unless it completed; true if this call completed it.
    fn expire(&self) -> bool {
        let _guard = self.lock();
        if self.is_completed() {
            return false;
        }
        self.completed.store(true, Ordering::SeqCst);
        self.op.on_expiration();
        true
    }
}

/// The operations watching one key.
#[derive(Default)]
struct WatcherList {
    ops: HashMap<u64, Arc<Entry>>,
    /// A check of this key is queued and has not started: later calls merge into it.
    check_queued: bool,
}

#[derive(Default)]
struct Timer {
    /// (deadline, id) -> operation, earliest first.
    entries: BTreeMap<(Instant, u64), Arc<Entry>>,
    sweep_requested: bool,
    shut_down: bool,
}

/// Delayed operations, their watch lists and their timer (see the [module docs](self)).
pub(crate) struct Purgatory {
    pool: Arc<IoPool>,
    shards: Box<[Mutex<HashMap<WatchKey, WatcherList>>]>,
    timer: Mutex<Timer>,
    timer_wake: Condvar,
    next_id: AtomicU64,
    /// `try_complete` calls made by checks of keys (for tests: an update wakes only its key).
    #[cfg_attr(not(test), allow(dead_code))]
    checks: AtomicU64,
}

impl std::fmt::Debug for Purgatory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purgatory").field("delayed", &self.delayed()).finish_non_exhaustive()
    }
}

impl Purgatory {
    /// An empty purgatory whose completions run on `pool`; its timer runs once
    /// [`Self::start_timer`] is called.
    pub(crate) fn new(pool: Arc<IoPool>) -> Arc<Purgatory> {
        Arc::new(Purgatory {
            pool,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            timer: Mutex::new(Timer::default()),
            timer_wake: Condvar::new(),
            next_id: AtomicU64::new(0),
            checks: AtomicU64::new(0),
        })
    }

    /// Starts the timer thread (expirations and sweeps); it ends at [`Self::shutdown`].
    pub(crate) fn start_timer(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let me = Arc::clone(self);
        std::thread::Builder::new().name("fetchbench-purgatory".into()).spawn(move || me.run_timer())
    }

    fn shard(&self, key: &WatchKey) -> MutexGuard<'_, HashMap<WatchKey, WatcherList>> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        let shard = &self.shards[(h.finish() % SHARDS as u64) as usize];
        shard.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn timer(&self) -> MutexGuard<'_, Timer> {
        self.timer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Operations waiting now (armed in the timer).
    pub(crate) fn delayed(&self) -> usize {
        self.timer().entries.len()
    }

    /// `try_complete` calls made by [`Self::check_and_complete`]'s checks since the start.
    #[cfg(test)]
    pub(crate) fn checks(&self) -> u64 {
        self.checks.load(Ordering::SeqCst)
    }

    /// Tries `op` once; if it did not complete, watches `keys` and arms its timer. Returns at
    /// once (Kafka's `tryCompleteElseWatch`). An operation of a purgatory that is shut down, or
    /// whose connection is already closed, is expired at once on the calling thread.
    pub(crate) fn try_complete_else_watch(self: &Arc<Self>, op: Arc<dyn DelayedOperation>, keys: &[WatchKey]) {
        let entry = Arc::new(Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            deadline: op.deadline(),
            op,
            keys: keys.to_vec(),
            lock: Mutex::new(()),
            completed: AtomicBool::new(false),
            try_pending: AtomicBool::new(false),
        });
        {
            let _guard = entry.lock();
            if entry.try_complete_locked() {
                return;
            }
            for key in &entry.keys {
                self.shard(key).entry(key.clone()).or_default().ops.insert(entry.id, Arc::clone(&entry));
            }
            if entry.try_complete_locked() {
                drop(_guard);
                self.unwatch(&entry);
                return;
            }
        }
        let mut timer = self.timer();
        if timer.shut_down {
            drop(timer);
            self.expire(&entry);
            return;
        }
        let earliest = timer.entries.first_key_value().is_none_or(|(&(d, _), _)| entry.deadline < d);
        timer.entries.insert((entry.deadline, entry.id), Arc::clone(&entry));
        drop(timer);
        if earliest {
            self.timer_wake.notify_one();
        }
        // Completed by a check between the watch and the timer: leave the timer now.
        if entry.is_completed() {
            self.timer().entries.remove(&(entry.deadline, entry.id));
        } else if entry.op.is_connection_closed() {
            self.timer().entries.remove(&(entry.deadline, entry.id));
            self.expire(&entry);
        }
    }

    /// Called after `key` changed (an append to a partition, a change of a group): tries the
    /// operations watching that key, and only those, in one job on the io pool (Kafka's
    /// `checkAndComplete`). Cheap for the caller: one shard lock, no job when nobody watches or a
    /// check of the key is already queued.
    pub(crate) fn check_and_complete(self: &Arc<Self>, key: &WatchKey) {
        {
            let mut shard = self.shard(key);
            let Some(list) = shard.get_mut(key) else { return };
            if list.check_queued || list.ops.is_empty() {
                return;
            }
            list.check_queued = true;
        }
        let me = Arc::clone(self);
        let key = key.clone();
        self.pool.submit(Box::new(move || me.run_check(&key)));
    }

    fn run_check(&self, key: &WatchKey) {
        let watching: Vec<Arc<Entry>> = {
            let mut shard = self.shard(key);
            let Some(list) = shard.get_mut(key) else { return };
            // Cleared before any operation is tried: a change after this queues a new check.
            list.check_queued = false;
            list.ops.values().cloned().collect()
        };
        for entry in watching {
            if entry.is_completed() {
                continue;
            }
            self.checks.fetch_add(1, Ordering::Relaxed);
            if entry.maybe_try_complete() {
                self.finish(&entry);
            }
        }
    }

    /// Asks the timer thread to expire, now, the operations whose connection closed (called by a
    /// network thread that noticed a hang-up).
    pub(crate) fn connection_closed(&self) {
        self.timer().sweep_requested = true;
        self.timer_wake.notify_one();
    }

    /// Expires every operation (on the io pool: each answers with what there is) and stops the
    /// timer thread; later operations are expired as they come.
    pub(crate) fn shutdown(self: &Arc<Self>) {
        let entries = {
            let mut timer = self.timer();
            timer.shut_down = true;
            std::mem::take(&mut timer.entries)
        };
        self.timer_wake.notify_all();
        for entry in entries.into_values() {
            self.submit_expiry(entry);
        }
    }

    fn submit_expiry(self: &Arc<Self>, entry: Arc<Entry>) {
        let me = Arc::clone(self);
        self.pool.submit(Box::new(move || me.expire(&entry)));
    }

    /// Expires `entry` (if nothing completed it) and removes it from its watch lists.
    fn expire(&self, entry: &Entry) {
        entry.expire();
        self.unwatch(entry);
    }

    /// A completed operation leaves its watch lists and the timer.
    fn finish(&self, entry: &Entry) {
        self.unwatch(entry);
        self.timer().entries.remove(&(entry.deadline, entry.id));
    }

    fn unwatch(&self, entry: &Entry) {
        for key in &entry.keys {
            let mut shard = self.shard(key);
            if let Some(list) = shard.get_mut(key) {
                list.ops.remove(&entry.id);
                if list.ops.is_empty() && !list.check_queued {
                    shard.remove(key);
                }
            }
        }
    }

    fn run_timer(self: Arc<Self>) {
        let mut next_sweep = Instant::now() + SWEEP_INTERVAL;
        let mut timer = self.timer();
        loop {
            if timer.shut_down {
                return;
            }
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = timer.entries.first_entry().filter(|e| e.key().0 <= now) {
                due.push(entry.remove());
            }
            if timer.sweep_requested || now >= next_sweep {
                timer.sweep_requested = false;
                next_sweep = now + SWEEP_INTERVAL;
                let closed: Vec<(Instant, u64)> =
                    timer.entries.iter().filter(|(_, e)| e.op.is_connection_closed()).map(|(k, _)| *k).collect();
                due.extend(closed.iter().filter_map(|k| timer.entries.remove(k)));
            }
            if !due.is_empty() {
                drop(timer);
                for entry in due {
                    self.submit_expiry(entry);
                }
                timer = self.timer();
                continue;
            }
            let wake = timer.entries.first_key_value().map_or(next_sweep, |(&(d, _), _)| d.min(next_sweep));
            let wait = wake.saturating_duration_since(now);
            timer = self.timer_wake.wait_timeout(timer, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    /// An operation that completes once `ready` is set; counts its calls and reports its end.
    struct Probe {
        ready: AtomicBool,
        closed: AtomicBool,
        tries: AtomicUsize,
        deadline: Instant,
        done: Mutex<mpsc::Sender<&'static str>>,
    }

    impl Probe {
        fn new(deadline: Duration, done: &mpsc::Sender<&'static str>) -> Arc<Probe> {
            Arc::new(Probe {
                ready: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                tries: AtomicUsize::new(0),
                deadline: Instant::now() + deadline,
                done: Mutex::new(done.clone()),
            })
        }
    }

    impl DelayedOperation for Probe {
        fn try_complete(&self) -> bool {
            self.tries.fetch_add(1, Ordering::SeqCst);
            let ready = self.ready.load(Ordering::SeqCst);
            if ready {
                self.done.lock().unwrap().send("completed").unwrap();
            }
            ready
        }
        fn on_expiration(&self) {
            let what = if self.closed.load(Ordering::SeqCst) { "dropped" } else { "expired" };
            self.done.lock().unwrap().send(what).unwrap();
        }
        fn deadline(&self) -> Instant {
            self.deadline
        }
        fn is_connection_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    fn purgatory() -> (Arc<Purgatory>, Vec<JoinHandle<()>>, Arc<IoPool>) {
        let pool = IoPool::new(2, 10);
        let mut threads = pool.start("test-io").unwrap();
        let purgatory = Purgatory::new(Arc::clone(&pool));
        threads.push(purgatory.start_timer().unwrap());
        (purgatory, threads, pool)
    }

    fn stop(purgatory: &Arc<Purgatory>, threads: Vec<JoinHandle<()>>, pool: &IoPool) {
        purgatory.shutdown();
        pool.close();
        for t in threads {
            t.join().unwrap();
        }
    }

    fn partition(topic: &str, p: i32) -> WatchKey {
        WatchKey::Partition(topic.into(), p)
    }

    const LONG: Duration = Duration::from_secs(3600);
    const RECV: Duration = Duration::from_secs(10);

    #[test]
    fn an_update_to_a_tries_the_operations_watching_a_and_not_those_watching_b() {
        let (purgatory, threads, pool) = purgatory();
        let (tx, rx) = mpsc::channel();
        let on_a = Probe::new(LONG, &tx);
        let on_b = Probe::new(LONG, &tx);
        purgatory.try_complete_else_watch(on_a.clone(), &[partition("t", 0)]);
        purgatory.try_complete_else_watch(on_b.clone(), &[partition("t", 1)]);
        // Parking tries each twice (before and after watching).
        assert_eq!((on_a.tries.load(Ordering::SeqCst), on_b.tries.load(Ordering::SeqCst)), (2, 2));
        assert_eq!(purgatory.delayed(), 2);

        // Updates to A that do not satisfy it: A is tried, B never.
        for _ in 0..5 {
            let before = purgatory.checks();
            purgatory.check_and_complete(&partition("t", 0));
            // Wait for the check to run (at least one more try of A).
            let deadline = Instant::now() + RECV;
            while purgatory.checks() == before && Instant::now() < deadline {
                std::thread::yield_now();
            }
        }
        assert!(on_a.tries.load(Ordering::SeqCst) > 2);
        // An update of a key nobody watches costs no job.
        purgatory.check_and_complete(&partition("t", 2));
        on_a.ready.store(true, Ordering::SeqCst);
        purgatory.check_and_complete(&partition("t", 0));
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "completed");
        assert_eq!(on_b.tries.load(Ordering::SeqCst), 2, "B was never tried by A's updates");
        // A leaves the timer and its watch list as soon as its check ends; B still waits.
        let deadline = Instant::now() + RECV;
        while purgatory.delayed() != 1 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(purgatory.delayed(), 1);
        let tries_a = on_a.tries.load(Ordering::SeqCst);
        purgatory.check_and_complete(&partition("t", 0));
        stop(&purgatory, threads, &pool);
        assert_eq!(on_a.tries.load(Ordering::SeqCst), tries_a, "a completed operation is not tried again");
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "expired", "shutdown expires B");
        assert!(rx.try_recv().is_err(), "each operation ends once");
    }

    #[test]
    fn an_operation_that_can_complete_at_once_is_never_watched() {
        let (purgatory, threads, pool) = purgatory();
        let (tx, rx) = mpsc::channel();
        let op = Probe::new(LONG, &tx);
        op.ready.store(true, Ordering::SeqCst);
        purgatory.try_complete_else_watch(op.clone(), &[partition("t", 0)]);
        assert_eq!(rx.try_recv().unwrap(), "completed");
        assert_eq!((op.tries.load(Ordering::SeqCst), purgatory.delayed()), (1, 0));
        stop(&purgatory, threads, &pool);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn an_operation_expires_at_its_deadline() {
        let (purgatory, threads, pool) = purgatory();
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        purgatory.try_complete_else_watch(Probe::new(Duration::from_millis(100), &tx), &[partition("t", 0)]);
        // A later operation with an earlier deadline wakes the timer for it.
        let early = Probe::new(Duration::from_millis(30), &tx);
        purgatory.try_complete_else_watch(early, &[WatchKey::Group("g".into())]);
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "expired");
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "expired");
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(purgatory.delayed(), 0);
        stop(&purgatory, threads, &pool);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn an_operation_whose_connection_closed_is_dropped_when_asked_for() {
        let (purgatory, threads, pool) = purgatory();
        let (tx, rx) = mpsc::channel();
        let op = Probe::new(LONG, &tx);
        purgatory.try_complete_else_watch(op.clone(), &[partition("t", 0)]);
        op.closed.store(true, Ordering::SeqCst);
        purgatory.connection_closed();
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "dropped");
        assert_eq!(purgatory.delayed(), 0);
        // Already closed when parked: dropped at once.
        let closed = Probe::new(LONG, &tx);
        closed.closed.store(true, Ordering::SeqCst);
        purgatory.try_complete_else_watch(closed, &[partition("t", 0)]);
        assert_eq!(rx.try_recv().unwrap(), "dropped");
        stop(&purgatory, threads, &pool);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn concurrent_checks_complete_an_operation_once() {
        let (purgatory, threads, pool) = purgatory();
        let (tx, rx) = mpsc::channel();
        let keys: Vec<WatchKey> = (0..8).map(|p| partition("t", p)).collect();
        let op = Probe::new(LONG, &tx);
        purgatory.try_complete_else_watch(op.clone(), &keys);
        op.ready.store(true, Ordering::SeqCst);
        let updaters: Vec<_> = keys
            .iter()
            .cloned()
            .map(|key| {
                let purgatory = Arc::clone(&purgatory);
                std::thread::spawn(move || purgatory.check_and_complete(&key))
            })
            .collect();
        for u in updaters {
            u.join().unwrap();
        }
        assert_eq!(rx.recv_timeout(RECV).unwrap(), "completed");
        stop(&purgatory, threads, &pool);
        assert!(rx.try_recv().is_err(), "completed once, never expired");
        assert_eq!(purgatory.delayed(), 0);
    }
}
