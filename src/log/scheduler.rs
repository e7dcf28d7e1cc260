//! The log directory's background thread, Kafka's `KafkaScheduler` (`kafka-scheduler-N`) with the
//! tasks Kafka's `LogManager.startup` and `UnifiedLog.roll` give it, on one thread:
//!
//! | task | Kafka | when |
//! |---|---|---|
//! | fsync of rolled segments, recovery point moved past them | `UnifiedLog.roll` schedules `flushUptoOffsetExclusive(newSegment.baseOffset)` | woken by the roll |
//! | `flush.messages` | `UnifiedLog.append` (inline in Kafka) | woken by the append that reaches it |
//! | `flush.ms` | `LogManager.flushDirtyLogs` | every `log.flush.scheduler.interval.ms` |
//! | `recovery-point-offset-checkpoint` | `checkpointLogRecoveryOffsets` | every `log.flush.offset.checkpoint.interval.ms` (60 s) |
//! | `log-start-offset-checkpoint` | `checkpointLogStartOffsets` | every `log.flush.start.offset.checkpoint.interval.ms` (60 s) |
//!
//! None of this runs on a request's thread. Each flush collects its file handles under the
//! partition's lock, fsyncs with no lock held, and takes the lock again only to move the recovery
//! point ([`Partition::flush_in_background`](super::partition::Partition)); the checkpoints read
//! the partitions' lock-free offsets.
//!
//! Differences from Kafka, on purpose:
//! - `flush.messages` is applied here, not inline in the append: the producer's acknowledgement
//!   does not wait for the fsync (it follows within one wake-up of the scheduler). With Kafka's
//!   default (never) nothing changes.
//! - `log.flush.scheduler.interval.ms` defaults to Kafka's `Long.MAX_VALUE`, which in Kafka means
//!   `flush.ms` is never applied. Here the check runs at least every
//!   [`DEFAULT_FLUSH_CHECK_INTERVAL_MS`] (1 s) so that a topic's `flush.ms` keeps working; a
//!   smaller configured interval is used as it is (at least [`MIN_INTERVAL_MS`]).
//! - A checkpoint interval of 0 (Kafka: a task run once) writes that checkpoint only at shutdown.
//!
//! Without a scheduler (offline users of a [`LogManager`]: tools, tests) the fsyncs run inline
//! and the checkpoints at open and shutdown (see [`manager`](super::manager)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::error::LogError;
use super::manager::LogManager;
use super::partition::{now_ms, Wakeup};

/// How often `flush.ms` is checked when `log.flush.scheduler.interval.ms` is larger (its Kafka
/// default is `Long.MAX_VALUE`): 1 s.
pub const DEFAULT_FLUSH_CHECK_INTERVAL_MS: u64 = 1000;
/// The smallest interval of any task (a smaller configured value is raised to it): 10 ms.
pub const MIN_INTERVAL_MS: u64 = 10;
/// Kafka's default `log.flush.offset.checkpoint.interval.ms` and
/// `log.flush.start.offset.checkpoint.interval.ms`: 60 s.
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u64 = 60_000;
/// Intervals are capped at this (an `Instant` cannot be a `Long.MAX_VALUE` of ms away): a year.
const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// The scheduler's periods, from the broker's `log.flush.*` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// `log.flush.scheduler.interval.ms`: how often `flush.ms` is checked (see the module docs
    /// for the cap at [`DEFAULT_FLUSH_CHECK_INTERVAL_MS`]).
    pub flush_scheduler_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`: how often `recovery-point-offset-checkpoint`
    /// is written (0: only at shutdown).
    pub recovery_point_checkpoint_interval_ms: u64,
    /// `log.flush.start.offset.checkpoint.interval.ms`: how often `log-start-offset-checkpoint`
    /// is written (0: only at shutdown).
    pub log_start_offset_checkpoint_interval_ms: u64,
}

impl Default for SchedulerConfig {
    /// Kafka's defaults: `Long.MAX_VALUE`, 60000, 60000.
    fn default() -> Self {
        SchedulerConfig {
            flush_scheduler_interval_ms: i64::MAX as u64,
            recovery_point_checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
            log_start_offset_checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
        }
    }
}

impl SchedulerConfig {
    /// The interval of the `flush.ms` check actually used.
    pub fn flush_check_interval(&self) -> Duration {
        interval(self.flush_scheduler_interval_ms.min(DEFAULT_FLUSH_CHECK_INTERVAL_MS))
    }
}

fn interval(ms: u64) -> Duration {
    Duration::from_millis(ms.max(MIN_INTERVAL_MS)).min(MAX_INTERVAL)
}

/// What the thread waits on: wake-ups (a roll, `flush.messages`), the stop, and the count of
/// passes done (for those who wait for one).
#[derive(Debug, Default)]
struct Signal {
    state: Mutex<SignalState>,
    changed: Condvar,
    passes: AtomicU64,
}

#[derive(Debug, Default)]
struct SignalState {
    woken: bool,
    stop: bool,
}

impl Signal {
    fn state(&self) -> std::sync::MutexGuard<'_, SignalState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        self.state().woken = true;
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state().stop = true;
        self.changed.notify_all();
    }
}

/// How the thread's wait ended.
enum Wait {
    Stop,
    Woken,
    Timeout,
}

/// The running scheduler thread of a log directory. [`LogScheduler::shutdown`] (or the drop)
/// stops it and waits for the task in progress; then shut the [`LogManager`] down.
#[derive(Debug)]
pub struct LogScheduler {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl LogScheduler {
    /// Turns background flushing on for every partition of `manager` (existing and created
    /// later: [`LogManager`]'s docs) and starts the thread (`fetchbench-log-scheduler`).
    ///
    /// Errors: [`LogError::Io`] when the thread cannot be spawned.
    pub fn start(manager: Arc<LogManager>, config: SchedulerConfig) -> Result<LogScheduler, LogError> {
        let signal = Arc::new(Signal::default());
        let wake = Arc::clone(&signal);
        manager.enable_background_flush(Wakeup::new(move || wake.wake()));
        let thread_signal = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("fetchbench-log-scheduler".into())
            .spawn(move || run(&manager, &thread_signal, config))
            .map_err(|e| LogError::io("spawn the scheduler thread for", "log directory", e))?;
        Ok(LogScheduler { signal, thread: Some(thread) })
    }

    /// Passes completed so far (each a flush of the partitions with work, and the checkpoints
    /// that were due).
    pub fn passes(&self) -> u64 {
        self.signal.passes.load(Ordering::SeqCst)
    }

    /// Waits until `done()` holds, checking after every pass of the scheduler, for at most
    /// `timeout`; returns whether it held (a seam for tests: no sleeps).
    pub fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.signal.state();
        loop {
            if done() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self.signal.changed.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Stops the thread after the task in progress and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.signal.stop();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the log scheduler thread panicked (a bug)");
            }
        }
    }
}

impl Drop for LogScheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: waits for a wake-up or the next due task, runs what is due, repeats until stopped.
fn run(manager: &LogManager, signal: &Signal, config: SchedulerConfig) {
    let start = Instant::now();
    let flush_every = config.flush_check_interval();
    let periodic = |ms: u64| (ms > 0).then(|| interval(ms));
    let rp_every = periodic(config.recovery_point_checkpoint_interval_ms);
    let ls_every = periodic(config.log_start_offset_checkpoint_interval_ms);
    let mut next_flush = start + flush_every;
    let mut next_rp = rp_every.map(|d| start + d);
    let mut next_ls = ls_every.map(|d| start + d);
    loop {
        let deadline = [Some(next_flush), next_rp, next_ls].into_iter().flatten().min().unwrap_or(next_flush);
        let wait = {
            let mut state = signal.state();
            loop {
                if state.stop {
                    break Wait::Stop;
                }
                if std::mem::take(&mut state.woken) {
                    break Wait::Woken;
                }
                let now = Instant::now();
                if now >= deadline {
                    break Wait::Timeout;
                }
                state = signal.changed.wait_timeout(state, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
            }
        };
        if matches!(wait, Wait::Stop) {
            break;
        }
        let now = Instant::now();
        let tick = now >= next_flush;
        let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if matches!(wait, Wait::Woken) || tick {
                let (flushed, still_requested) = manager.flush_dirty_logs(now_ms());
                // Work that arrived during the pass (another roll): go on at once, unless
                // nothing could be flushed (a failing disk waits for the next tick).
                if still_requested && flushed > 0 {
                    signal.state().woken = true;
                }
            }
            if let (Some(due), Some(every)) = (next_rp, rp_every) {
                if now >= due {
                    if let Err(e) = manager.checkpoint_recovery_points() {
                        tracing::warn!("writing the recovery point checkpoint: {e}; tried again in {every:?}");
                    }
                    next_rp = Some(now + every);
                }
            }
            if let (Some(due), Some(every)) = (next_ls, ls_every) {
                if now >= due {
                    if let Err(e) = manager.checkpoint_log_start_offsets() {
                        tracing::warn!("writing the log start offset checkpoint: {e}; tried again in {every:?}");
                    }
                    next_ls = Some(now + every);
                }
            }
        }));
        if pass.is_err() {
            tracing::error!("a log scheduler task panicked (a bug); the scheduler goes on");
        }
        if tick {
            next_flush = now + flush_every;
        }
        signal.passes.fetch_add(1, Ordering::SeqCst);
        // Wake those waiting for a pass (`wait_until`) under the lock, so none misses it.
        let _state = signal.state();
        signal.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{BatchBuilder, Compression};
    use crate::log::config::LogConfig;

    fn batch(n: usize, value: &[u8]) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, Compression::None);
        for i in 0..n {
            b.append(1_700_000_000_000 + i as i64, Some(b"k"), Some(value), &[]);
        }
        b.build().unwrap()
    }

    fn small_segments() -> LogConfig {
        let mut config = LogConfig::default();
        config.set("segment.bytes", "4096").unwrap();
        config
    }

    /// Appends 1 KiB records to `topic`-0 until the log rolls; returns the new segment's base.
    fn append_until_rolled(mgr: &LogManager, topic: &str) -> i64 {
        let p = mgr.get_or_create(topic, 0, None).unwrap();
        let value = vec![7u8; 1024];
        for _ in 0..64 {
            p.append(&batch(1, &value), now_ms()).unwrap();
            let log = p.log();
            if log.segments().count() > 1 {
                return log.active_segment().base_offset();
            }
        }
        panic!("{topic} never rolled");
    }

    #[test]
    fn a_rolled_segment_is_fsynced_by_the_scheduler_not_by_the_append() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), small_segments(), |_| None, false).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&woken);
        mgr.enable_background_flush(Wakeup::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        let rolled_at = append_until_rolled(&mgr, "t");
        let p = mgr.partition("t", 0).unwrap();
        assert_eq!(p.recovery_point(), 0, "the append that rolled did not fsync the rolled segment");
        assert!(p.flush_requested());
        assert_eq!(woken.load(Ordering::SeqCst), 1, "the roll woke the scheduler, once");
        // The scheduler's pass: fsync outside the lock, then the recovery point moves.
        let (flushed, again) = mgr.flush_dirty_logs(now_ms());
        assert_eq!((flushed, again), (1, false));
        assert_eq!(p.recovery_point(), rolled_at, "the recovery point moved past the rolled segment");
        assert!(!p.flush_requested());
        assert_eq!(mgr.flush_dirty_logs(now_ms()).0, 0, "nothing left to do");
        // Without a scheduler (an offline manager) the roll fsyncs inline, as before.
        let tmp2 = tempfile::tempdir().unwrap();
        let (offline, _) = LogManager::open(tmp2.path(), small_segments(), |_| None, false).unwrap();
        let rolled_at = append_until_rolled(&offline, "t");
        assert_eq!(offline.partition("t", 0).unwrap().recovery_point(), rolled_at);
    }

    #[test]
    fn the_fsync_runs_outside_the_partition_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), small_segments(), |_| None, false).unwrap();
        mgr.enable_background_flush(Wakeup::new(|| {}));
        let rolled_at = append_until_rolled(&mgr, "t");
        let p = mgr.partition("t", 0).unwrap();
        // The plan is made under the lock, ...
        let plan = p.log_mut().plan_background_flush(now_ms()).unwrap().expect("a rolled segment to flush");
        assert_eq!(plan.target(), rolled_at);
        // ... the fsyncs run while another thread holds the partition's lock, ...
        let held = p.log_mut();
        std::thread::scope(|s| s.spawn(|| plan.sync().unwrap()).join().unwrap());
        drop(held);
        // ... and the lock is taken again only to move the recovery point.
        p.log_mut().complete_background_flush(&plan, now_ms());
        assert_eq!(p.recovery_point(), rolled_at);
    }

    #[test]
    fn flush_messages_and_flush_ms_are_applied_by_the_scheduler() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        mgr.enable_background_flush(Wakeup::new(|| {}));
        let mut every_two = LogConfig::default();
        every_two.set("flush.messages", "2").unwrap();
        let p = mgr.get_or_create("m", 0, Some(every_two)).unwrap();
        p.append(&batch(1, b"v"), 0).unwrap();
        assert!(!p.flush_requested());
        p.append(&batch(1, b"v"), 0).unwrap();
        assert!(p.flush_requested(), "flush.messages=2 reached");
        assert_eq!(p.recovery_point(), 0, "not fsynced inline");
        mgr.flush_dirty_logs(1);
        assert_eq!(p.recovery_point(), 2);
        let mut hourly = LogConfig::default();
        hourly.set("flush.ms", "3600000").unwrap();
        let q = mgr.get_or_create("ms", 0, Some(hourly)).unwrap();
        q.append(&batch(3, b"v"), now_ms()).unwrap();
        let since = q.log().unflushed_since_ms().expect("unflushed messages");
        mgr.flush_dirty_logs(since + 3_599_999);
        assert_eq!(q.recovery_point(), 0, "flush.ms not yet passed");
        mgr.flush_dirty_logs(since + 3_600_000);
        assert_eq!(q.recovery_point(), 3, "flush.ms passed");
        assert_eq!(q.log().unflushed_since_ms(), None);
    }

    #[test]
    fn the_thread_flushes_rolls_and_writes_checkpoints() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), small_segments(), |_| None, false).unwrap();
        let mgr = Arc::new(mgr);
        let config = SchedulerConfig {
            flush_scheduler_interval_ms: 3_600_000,
            recovery_point_checkpoint_interval_ms: 50,
            log_start_offset_checkpoint_interval_ms: 50,
        };
        let scheduler = LogScheduler::start(Arc::clone(&mgr), config).unwrap();
        let rolled_at = append_until_rolled(&mgr, "t");
        let p = mgr.partition("t", 0).unwrap();
        assert!(
            scheduler.wait_until(Duration::from_secs(20), || p.recovery_point() == rolled_at),
            "the scheduler moved the recovery point to {rolled_at}: it is {}",
            p.recovery_point()
        );
        let file = tmp.path().join(crate::log::checkpoint::RECOVERY_POINT_OFFSET_CHECKPOINT);
        let written = || {
            crate::log::checkpoint::read_offset_checkpoint(&file)
                .is_ok_and(|c| c.get(&("t".to_string(), 0)) == Some(&rolled_at))
        };
        assert!(scheduler.wait_until(Duration::from_secs(20), written), "the checkpoint names the recovery point");
        scheduler.shutdown();
        mgr.shutdown().unwrap();
    }
}
