//! The catch-up phase: consumer groups drain the backlog from the log start as fast as they can.
//!
//! ## The measured window
//!
//! With `catch_up_duration` above zero (the default, 5 s) the drain is measured by time: one
//! drain of a 1 GiB backlog lasts well under a second on a fast read path, and the join,
//! first fetches and the drain's tail would be a large share of it. So from the drain's start
//! `S` every member reads its partitions for `catch_up_duration`, and a partition that reaches
//! its end (the log end offset, or the last stable offset under `read_committed`, read before
//! the drain) is read again from its log start: a *pass*. The members start their partitions
//! at staggered offsets (the `i`-th of a member's `n` partitions at `i/n` of its length), so a
//! member's partitions do not reach their ends together and no Fetch of a member parks at the
//! log end (the harness's consumers use `fetch.max.wait.ms` = 10 in the catch-up, where the
//! workload's `consumer_config` does not set it: a partition at its end for the few
//! milliseconds before it is sought back must not hold a Fetch for Kafka's 500 ms).
//!
//! The window ends at `E = S + catch_up_duration`. The figures are the records (and their
//! record-batch bytes, the backlog's bytes per record) that polls returning by `E` delivered
//! for the first time in their pass, over `E - S`. Exactness holds per pass: every partition's
//! offsets arrive in order, each once per pass (a virtual offset `pass x (end - start) +
//! offset` is checked exactly as the offsets of one drain are). Records of polls that return
//! after `E` are checked but not counted.
//!
//! With `catch_up_duration = 0`, with a page cache `cold` (a second pass would read pages the
//! first cached) and in the mixed phase, the drain reads the backlog once and its clock stops
//! when the groups have read the last offset of every partition.
//!
//! ## The consumers
//!
//! The catch-up's consumers run in drain mode (`fetchbench.fetch.mode=drain`, see
//! [`crate::client::consumer::drain`]) unless the workload's `consumer_config` sets
//! `fetchbench.fetch.mode = "decode"`: they read each Fetch response's framing and batch
//! headers and discard the record bytes in the kernel (`recv(MSG_TRUNC)`), CRC-checking one
//! batch in 16 (`fetchbench.drain.crc`). A decoding consumer copies, decompresses and
//! allocates every record, and on a 2-core machine its core, not the broker's, bounded every
//! read path faster than `copy`. Exactness is kept: a batch is checked as its offsets
//! `first..=last` ([`GroupDeliveries::deliver_batch`]; on a dense backlog a batch whose
//! records count is not its offset span is a gap). A note names the consumer a run used. The
//! tail phase always decodes (its end-to-end latency needs each record's timestamp).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use nix::sys::resource::UsageWho;

use super::attribution::{Roles, Sampler};
use super::backlog::Backlog;
use super::counters::{CountWindow, Counts};
use super::histogram::LatencyRecorder;
use super::remote::{MetricsEndpoint, RemoteWindow};
use super::results::{Attribution, CpuPerGb, EndToEnd, LatencyResult, PathResult};
use super::usage::{pin_current_thread, residency, threads_usage, Usage};
use super::workload::{PageCache, Phase, Workload};
use crate::broker::server_model::ServerModel;
use crate::broker::BrokerHandle;
use crate::client::consumer::{Consumer, ConsumerConfig, ConsumerError, TopicPartition};
use crate::client::consumer::{DrainedBatch, FetchMode};
use crate::machine::rss_bytes;
use crate::metrics::Latency;

/// How long one path's drain may take before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// What a consumer thread hands back.
struct MemberReport {
    /// Thread usage at the drain start and at its end.
    start: Usage,
    end: Usage,
    /// Poll latencies of the measured drain.
    polls: Latency,
    /// Complete warmup drains of its partitions.
    warm_passes: u32,
}

/// A partition as the deliveries check keys it: (topic, partition).
type PartitionKey = (Arc<str>, i32);

/// A member's assigned partitions with their keys, and the generation they are of.
type Owned = (i32, Vec<(TopicPartition, PartitionKey)>);

/// Where one partition of the backlog starts and ends for the consumers, and the passes of a
/// windowed drain over it (see the module docs).
#[derive(Debug)]
struct Bounds {
    /// The log start offset.
    start: i64,
    /// The offset the consumers stop at: the log end offset, or the last stable offset under
    /// `read_committed`.
    end: i64,
    /// Passes completed (the partition was sought back to `start` this many times).
    pass: AtomicU64,
}

/// State shared by the consumer threads of one path.
struct Shared {
    /// A windowed drain (see the module docs): per group, every partition's [`Bounds`]. Empty
    /// for one drain of the backlog.
    bounds: Vec<HashMap<PartitionKey, Bounds>>,
    /// The end of the measured window (set before the drain starts); unset for one drain.
    window_end: std::sync::OnceLock<Instant>,
    /// Record-batch bytes per delivered record (the backlog's bytes over its records for the
    /// isolation level).
    bytes_per_record: f64,
    /// Record-batch bytes of the records counted in `consumed` (`bytes_per_record` each): also
    /// the attribution sampler's counter.
    delivered_bytes: Arc<AtomicU64>,
    /// Records delivered for the first time (all groups); redeliveries are not counted.
    consumed: AtomicU64,
    target: u64,
    /// Under `read_committed`: the backlog's aborted transactions (see
    /// [`Backlog::aborted_ranges`]); a record in one is an error. Empty otherwise.
    aborted: std::collections::BTreeMap<(String, i32), Vec<(i64, i64)>>,
    /// Per group: the exactly-once / at-least-once check of its deliveries.
    deliveries: Vec<Mutex<GroupDeliveries>>,
    /// Per group: (the generation the measured drain started in, the highest one a member
    /// saw during it).
    generations: Vec<(AtomicI32, AtomicI32)>,
    /// Per member: (generation, partitions assigned), for the stability check.
    members: Mutex<Vec<(usize, i32, usize)>>,
    stable: AtomicUsize,
    groups: usize,
    failed: AtomicBool,
    /// Set on Ctrl-C: members stop reading and report.
    stop: AtomicBool,
    /// Threads (members and the main thread) past the "sought to the start" point.
    ready: Gate,
    /// Threads past the "start snapshot taken" point.
    go: Gate,
    /// Members done reading (the drain finished, failed or was stopped): none leaves its
    /// group (LeaveGroup, which would rebalance the others) before all are here.
    finished: Gate,
    done_at: Mutex<Option<Instant>>,
}

/// What a phase measures against: the workload, the backlog, where the broker is.
pub(crate) struct Target<'a> {
    /// The resolved workload.
    pub w: &'a Workload,
    /// The backlog on the target.
    pub backlog: &'a Backlog,
    /// The read path's name for the results (`external` for a cluster).
    pub read_path: String,
    /// The embedded broker's server model, `None` for an external cluster (its own).
    pub server_model: Option<ServerModel>,
    /// `host:port` of the broker.
    pub bootstrap: String,
    /// The embedded broker, `None` for an external cluster (no broker CPU, no broker-side
    /// fetch latency there, unless `metrics`).
    pub broker: Option<&'a BrokerHandle>,
    /// The external broker's metrics endpoint (`run --metrics`): its figures replace the
    /// in-process ones ([`super::remote`]); `None` for the embedded broker.
    pub metrics: Option<&'a MetricsEndpoint>,
    /// Set by Ctrl-C: phases stop early and report what they measured.
    pub interrupted: &'a AtomicBool,
    /// A prefix unique to this path, for group ids.
    pub group_prefix: String,
    /// CPUs the client threads (consumers, producers) are pinned to, if any.
    pub pin_clients: Option<Vec<usize>>,
}

/// Measures the catch-up phase: `consumer_groups` groups of `consumers_per_group` consumers
/// (one thread each) subscribe to every topic; once every group is stable (all members in one
/// generation, every partition assigned: `rebalance_ms`), each member warms up (drains its
/// partitions from the log start again and again for `warmup`; none when the page cache is
/// `cold`), then every member seeks to the log start and the measured drain of the whole
/// backlog runs: until each group has received the backlog's records for the consumers'
/// isolation level ([`Backlog::records_for`]: under `read_committed` the committed
/// transactions' records; the bytes served are the same, aborted batches and markers
/// included). Returns the path's result and notes.
///
/// Errors: a consumer error, a group that does not become stable within 60 s, a record
/// delivered twice or out of order, more distinct records than the backlog holds for the
/// isolation level (an aborted transaction's records delivered), a drain longer than 600 s.
pub(crate) fn catch_up(t: &Target<'_>) -> anyhow::Result<(PathResult, Vec<String>)> {
    let window = t.w.catch_up_duration;
    let windowed = !window.is_zero() && t.w.page_cache != PageCache::Cold;
    catch_up_with(t, &(), windowed.then_some(window))
}

/// Calls from a drain into a phase that runs it inside itself (the mixed phase, see
/// [`super::mixed`]), on the thread that runs [`catch_up_with`].
pub(crate) trait DrainHooks {
    /// Every member is positioned at the log start; the drain starts when this returns (its
    /// clock, usage snapshots and fetch-latency reset come right after). An error stops the
    /// drain and is returned.
    fn at_start(&self) -> anyhow::Result<()> {
        Ok(())
    }
    /// The groups have consumed the whole backlog (seen within ~5 ms of the last delivery;
    /// before the members close).
    fn at_end(&self) {}
    /// Whether the caller's side failed: the drain stops with an error.
    fn failed(&self) -> bool {
        false
    }
}

/// No hooks: the catch-up phase on its own.
impl DrainHooks for () {}

/// [`catch_up`] with `hooks` called at the drain's start and end; `window`: a drain measured
/// for that long (see the module docs), `None`: one drain of the backlog.
pub(crate) fn catch_up_with(
    t: &Target<'_>,
    hooks: &dyn DrainHooks,
    window: Option<Duration>,
) -> anyhow::Result<(PathResult, Vec<String>)> {
    let w = t.w;
    let backlog = t.backlog;
    let mut notes = Vec::new();
    let residency_before = residency(&backlog.segment_files);
    if let Some(b) = t.broker {
        let _ = b.take_fetch_latencies(); // only this phase's fetches
    }
    let addr = t.bootstrap.clone();
    let groups = w.consumer_groups as usize;
    let per_group = w.consumers_per_group as usize;
    let members = groups * per_group;
    let partitions_total: usize = backlog.topics.iter().map(|(_, p)| *p as usize).sum();
    let bounds = match window {
        Some(_) => partition_bounds(t)?,
        None => HashMap::new(),
    };
    let records_per_group = backlog.records_for(w).max(1);
    let shared = Arc::new(Shared {
        bounds: if window.is_some() {
            (0..groups)
                .map(|_| {
                    bounds
                        .iter()
                        .map(|(k, &(start, end))| (k.clone(), Bounds { start, end, pass: AtomicU64::new(0) }))
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        },
        window_end: std::sync::OnceLock::new(),
        bytes_per_record: backlog.disk_bytes as f64 / records_per_group as f64,
        delivered_bytes: Arc::new(AtomicU64::new(0)),
        consumed: AtomicU64::new(0),
        target: backlog.records_for(w) * groups as u64,
        aborted: if w.read_committed() { backlog.aborted_ranges.clone() } else { Default::default() },
        deliveries: (0..groups).map(|_| Mutex::new(GroupDeliveries::new(backlog.dense_offsets))).collect(),
        generations: (0..groups).map(|_| (AtomicI32::new(-1), AtomicI32::new(-1))).collect(),
        members: Mutex::new(vec![(usize::MAX, -1, 0); members]),
        stable: AtomicUsize::new(0),
        groups,
        failed: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        ready: Gate::new(members + 1),
        go: Gate::new(members + 1),
        finished: Gate::new(members),
        done_at: Mutex::new(None),
    });
    let mut threads = Vec::new();
    let mut consumer_mode = None;
    for m in 0..members {
        let group = m / per_group;
        let mut cc = ConsumerConfig::new(addr.clone());
        // Harness settings first; the workload's consumer_config wins over them.
        cc.heartbeat_interval_ms = 100;
        // Positions are committed when a rebalance revokes partitions (and at close), never on
        // a timer: a partition that moves resumes at its old owner's position (Kafka's
        // ConsumerCoordinator.onJoinPrepare commits before revoking when auto-commit is on).
        cc.enable_auto_commit = true;
        cc.auto_commit_interval_ms = u64::MAX;
        cc.auto_offset_reset = crate::client::consumer::OffsetReset::Earliest;
        if window.is_some() {
            // A partition at its end until it is sought back must not park a Fetch for 500 ms
            // (see the module docs).
            cc.fetch_max_wait_ms = 10;
        }
        // The drain consumer (batch headers read, record bytes discarded in the kernel): the
        // consumers must cost less than the broker (see the module docs).
        cc.fetch_mode = FetchMode::Drain;
        for (k, v) in &w.consumer_config {
            cc.set(k, v).map_err(|e| anyhow!("consumer_config.{k}: {e}"))?;
        }
        consumer_mode.get_or_insert(cc.drain_checks());
        cc.group_id = Some(format!("{}-catch-up-{group}", t.group_prefix));
        cc.client_id = format!("fetchbench-run-{m}");
        let topics: Vec<String> = backlog.topics.iter().map(|(t, _)| t.clone()).collect();
        let pin = t.pin_clients.clone();
        // Warmup drains fill the page cache: none for a cold run.
        let warmup = if w.page_cache == PageCache::Cold { Duration::ZERO } else { w.warmup };
        let sh = shared.clone();
        let t = std::thread::Builder::new().name(format!("bench-consumer-{m}")).spawn(move || {
            let r = member(m, group, per_group, partitions_total, cc, &topics, warmup, pin.as_deref(), &sh);
            if r.is_err() {
                sh.failed.store(true, Ordering::SeqCst);
            }
            r
        })?;
        threads.push(t);
    }
    notes.push(match consumer_mode.flatten() {
        Some(crc) => format!(
            "catch-up consumers: drain (fetchbench.fetch.mode=drain: batch headers read, record bytes discarded \
             in the kernel by recv(MSG_TRUNC), offsets checked from the headers, CRC checked for {} batches)",
            if crc == crate::client::consumer::CrcCheck::None { "no".to_string() } else { crc.to_string() }
        ),
        None => "catch-up consumers: decode (fetchbench.fetch.mode=decode: every record decoded, as Kafka's consumer)"
            .to_string(),
    });
    // Rebalance: subscribe -> every group stable.
    let subscribed = Instant::now();
    let wait_stable = || -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while shared.stable.load(Ordering::SeqCst) < groups {
            if shared.failed.load(Ordering::SeqCst) || Instant::now() > deadline {
                shared.failed.store(true, Ordering::SeqCst);
                return Err(anyhow!("the consumer groups did not become stable"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    };
    let stable_result = wait_stable();
    let rebalance_ms = subscribed.elapsed().as_secs_f64() * 1e3;
    if let Err(e) = stable_result {
        // Release the threads so they can end.
        shared.failed.store(true, Ordering::SeqCst);
        return Err(join_error(threads, e));
    }
    // Every member has sought to the start: measure from here.
    if let Err(e) = shared.ready.wait(&shared.failed) {
        return Err(join_error(threads, e));
    }
    // Every member got the answers of its Fetches before arriving at `ready`; the broker
    // counts a Fetch until its response's last write returns, which may be a few microseconds
    // after the client read it: a short grace, then the count is what the drain starts with.
    let fetches_in_flight_at_start = t.broker.map(|b| {
        let grace = Instant::now() + Duration::from_millis(20);
        while b.fetches_in_flight() > 0 && Instant::now() < grace {
            std::thread::sleep(Duration::from_micros(100));
        }
        b.fetches_in_flight()
    });
    if let Err(e) = hooks.at_start() {
        shared.failed.store(true, Ordering::SeqCst);
        return Err(join_error(threads, e));
    }
    let remote = RemoteWindow::open(t.metrics);
    let counting = CountWindow::open(t.broker);
    let proc_start = Usage::now(UsageWho::RUSAGE_SELF);
    if let Some(b) = t.broker {
        let _ = b.take_fetch_latencies(); // the warmup's fetches are not measured
    }
    let heartbeats_start = threads_usage(&["heartbeat-"]);
    let sampler =
        Sampler::start(Roles::of(t.pin_clients.as_deref(), t.broker.is_some()), shared.delivered_bytes.clone());
    let start = Instant::now();
    if let Some(window) = window {
        let _ = shared.window_end.set(start + window);
    }
    if let Err(e) = shared.go.wait(&shared.failed) {
        return Err(join_error(threads, e));
    }
    let mut fetch_latency = None;
    loop {
        if hooks.failed() {
            shared.failed.store(true, Ordering::SeqCst);
            return Err(join_error(threads, anyhow!("stopped: another part of the phase failed")));
        }
        let over = match shared.window_end.get() {
            Some(&end) => Instant::now() >= end,
            None => shared.consumed.load(Ordering::SeqCst) >= shared.target,
        };
        if over || shared.failed.load(Ordering::SeqCst) {
            if !shared.failed.load(Ordering::SeqCst) {
                hooks.at_end();
            }
            // The drain's fetches, before the consumers close (their parked fetches at the log
            // end would add their long-poll waits after the drain).
            fetch_latency = t.broker.map(|b| b.take_fetch_latencies());
            break;
        }
        if t.interrupted.load(Ordering::SeqCst) {
            shared.stop.store(true, Ordering::SeqCst);
            notes.push("interrupted (Ctrl-C): the drain was stopped; figures cover what was read".to_string());
            break;
        }
        if start.elapsed() > DRAIN_TIMEOUT {
            shared.failed.store(true, Ordering::SeqCst);
            break;
        }
        // Counted as broker CPU: a coarse poll (the drain's end is stamped by the consumers).
        std::thread::sleep(Duration::from_millis(5));
    }
    let sampled = sampler.finish();
    // Before the consumers close, as the embedded broker's fetch latencies above.
    let remote = remote.close(t.metrics, &t.read_path, &mut notes);
    let counts = counting.close(t.broker, remote.as_ref(), &mut notes);
    // The consumers' heartbeat threads are clients too (taken before the consumers close).
    let heartbeats = threads_usage(&["heartbeat-"]).minus(heartbeats_start);
    let mut reports = Vec::new();
    let mut error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => error = Some(cause_first(error, e)),
            Err(_) => error = Some(cause_first(error, anyhow!("a consumer thread panicked"))),
        }
    }
    let proc_end = Usage::now(UsageWho::RUSAGE_SELF);
    let end = match shared.window_end.get() {
        Some(&end) => end,
        None => shared.done_at.lock().expect("not poisoned").unwrap_or_else(Instant::now),
    };
    let fetch_latency = fetch_latency.or_else(|| t.broker.map(|b| b.take_fetch_latencies()));
    let fetches_in_flight_at_start =
        fetches_in_flight_at_start.or(remote.as_ref().map(|r| r.fetches_in_flight_at_start));
    let broker_rss_bytes = remote.as_ref().map(|r| r.rss_bytes);
    let remote_usage = remote.as_ref().map(|r| r.usage);
    let fetch_latency = fetch_latency.or(remote.map(|r| r.fetch)).unwrap_or_default();
    if let Some(e) = error {
        return Err(e);
    }
    let stopped = shared.stop.load(Ordering::SeqCst);
    if !stopped && window.is_none() && shared.consumed.load(Ordering::SeqCst) < shared.target {
        bail!("the drain did not finish within {} s", DRAIN_TIMEOUT.as_secs());
    }
    // First deliveries are distinct records: more than the backlog holds for the isolation
    // level means records the consumers should not have got (an aborted transaction's under
    // read_committed).
    if window.is_none() && shared.consumed.load(Ordering::SeqCst) > shared.target {
        bail!(
            "the groups received {} distinct records, the backlog holds {} for {groups} group(s) with \
             isolation.level={}: records of aborted transactions were delivered",
            shared.consumed.load(Ordering::SeqCst),
            shared.target,
            w.isolation_level()
        );
    }
    let (t0, proc0) = (start, proc_start);
    let mut consumer = heartbeats;
    let mut polls = Latency::new();
    for r in &reports {
        consumer = consumer.plus(r.end.minus(r.start));
        polls.merge(&r.polls);
    }
    if w.warmup.is_zero() {
        notes.push("no warmup: the first drain is measured".to_string());
    } else if w.page_cache == PageCache::Cold {
        notes.push("page_cache cold: no warmup drains (they would fill the page cache)".to_string());
    } else {
        let passes: Vec<String> = reports.iter().map(|r| r.warm_passes.to_string()).collect();
        notes.push(format!(
            "warmup: {:.1} s of drains before the measured one (complete passes per member: {})",
            w.warmup.as_secs_f64(),
            passes.join(", ")
        ));
    }
    for (g, d) in shared.deliveries.iter().enumerate() {
        let redelivered = d.lock().expect("not poisoned").redelivered;
        let (from, to) = (&shared.generations[g].0, &shared.generations[g].1);
        let (from, to) = (from.load(Ordering::SeqCst), to.load(Ordering::SeqCst));
        if redelivered > 0 || to != from {
            notes.push(format!(
                "group {g} rebalanced during the drain (generation {from} -> {to}): {redelivered} records \
                 delivered again (at-least-once: a moved partition resumes at the committed position) \
                 were not counted"
            ));
        }
    }
    let seconds = end.duration_since(t0).as_secs_f64().max(1e-9);
    let (records, bytes) = match window {
        Some(window) => {
            let records = shared.consumed.load(Ordering::SeqCst);
            let passes: Vec<u64> =
                shared.bounds.iter().flat_map(|g| g.values().map(|b| b.pass.load(Ordering::SeqCst))).collect();
            notes.push(format!(
                "catch-up measured for {:.1} s: the groups read the backlog {:.2} times (passes per partition: {}..{}); \
                 partitions start staggered and are read again from the log start at their end",
                window.as_secs_f64(),
                records as f64 / shared.target.max(1) as f64,
                passes.iter().min().copied().unwrap_or(0),
                passes.iter().max().copied().unwrap_or(0),
            ));
            (records, shared.delivered_bytes.load(Ordering::SeqCst))
        }
        None => {
            let records = shared.consumed.load(Ordering::SeqCst).min(shared.target);
            (records, (backlog.disk_bytes as f64 * groups as f64 * records as f64 / shared.target.max(1) as f64) as u64)
        }
    };
    let process = proc_end.minus(proc0);
    // External target: the broker is elsewhere (its figures from its endpoint, if any); this
    // process is only the clients.
    let brk = match t.broker {
        Some(_) => process.minus_part(consumer),
        None => remote_usage.unwrap_or_default(),
    };
    if t.broker.is_none() {
        consumer = process;
    }
    let result = Measured {
        phase: Phase::CatchUp,
        seconds,
        bytes,
        records,
        broker: brk,
        clients: consumer,
        residency_before,
        fetch: fetch_latency.with_records,
        fetch_long_poll: fetch_latency.without_records,
        fetches_in_flight_at_start,
        polls,
        end_to_end: LatencyRecorder::new(),
        rebalance_ms: Some(rebalance_ms),
        broker_rss_bytes,
        attribution: Some(sampled.into_attribution(bytes)),
        counts,
    }
    .result(t);
    Ok((result, notes))
}

pub(crate) fn join_error<T>(
    threads: Vec<std::thread::JoinHandle<anyhow::Result<T>>>,
    e: anyhow::Error,
) -> anyhow::Error {
    let mut first = None;
    for t in threads {
        if let Ok(Err(te)) = t.join() {
            first = Some(cause_first(first, te));
        }
    }
    match first {
        // A thread's own error is the cause; `e` only says the run stopped (but says more than
        // a thread that stopped because of it).
        Some(te) if te.downcast_ref::<Stopped>().is_some() => e,
        Some(te) => te,
        None => e,
    }
}

/// The error a thread returns when it stopped because another part of the run failed: not a
/// cause, only its echo.
#[derive(Debug, thiserror::Error)]
#[error("stopped: another part of the run failed")]
pub(crate) struct Stopped;

/// Of the error kept so far and a new one, the one to report: the first that is not a
/// [`Stopped`] (a thread that gave up because another failed must not hide that one's error).
pub(crate) fn cause_first(kept: Option<anyhow::Error>, new: anyhow::Error) -> anyhow::Error {
    match kept {
        Some(k) if k.downcast_ref::<Stopped>().is_some() && new.downcast_ref::<Stopped>().is_none() => new,
        Some(k) => k,
        None => new,
    }
}

/// One consumer thread: join, wait for its group to be stable, seek to the start, drain.
#[allow(clippy::too_many_arguments)]
fn member(
    m: usize,
    group: usize,
    per_group: usize,
    partitions_total: usize,
    config: ConsumerConfig,
    topics: &[String],
    warmup: Duration,
    pin: Option<&[usize]>,
    sh: &Shared,
) -> anyhow::Result<MemberReport> {
    if let Some(cpus) = pin {
        pin_current_thread(cpus)?;
    }
    // No commit before the drain's start positions: a rebalance during the join or the warmup
    // must not commit a warmup position that a new owner would then resume the drain at.
    let auto_commit = config.enable_auto_commit;
    let mut c = Consumer::new(config)?;
    c.set_enable_auto_commit(false);
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    c.subscribe(&topic_refs)?;
    // Records polled before the group is stable are dropped (positions reset below).
    let stability = Stability { members: &sh.members, stable: &sh.stable, groups: sh.groups, failed: &sh.failed };
    join_until_stable(&mut c, m, group, per_group, partitions_total, &stability)?;
    let mut assignment = c.assignment();
    let mut generation = c.generation();
    let warm_passes = if warmup.is_zero() { 0 } else { warm_up(&mut c, warmup, sh)? };
    // No Fetch of the warmup (or of the join) may still be out when the drain starts: a
    // pipelined Fetch parked at the log end would hold the first measured one for up to
    // fetch.max.wait.ms. A rebalance during the warmup or the settle (a new generation or
    // assignment): back to a stable membership, then settle again.
    loop {
        settle(&mut c, sh)?;
        if c.generation() == generation && c.assignment() == assignment {
            // The current assignment (no poll since the check, so it cannot have changed).
            if assignment.is_empty() {
                break;
            }
            c.seek_to_beginning(&assignment)?;
            if !sh.bounds.is_empty() {
                stagger(&mut c, group, generation, &assignment, sh)?;
            }
            // A partition that moves in a rebalance resumes at the committed offset: from
            // here, the drain's start. A commit refused for a rebalance (Kafka's
            // CommitFailedException: REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
            // UNKNOWN_MEMBER_ID) sends the member back to rejoin.
            match c.commit_sync() {
                Ok(()) => {
                    c.resume(&assignment)?;
                    break;
                }
                Err(ConsumerError::CommitFailed { partitions })
                    if partitions.iter().all(|(_, _, code)| [22, 25, 27].contains(code)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        rejoin(&mut c, m, group, sh)?;
        assignment = c.assignment();
        generation = c.generation();
    }
    c.set_enable_auto_commit(auto_commit);
    sh.ready.wait(&sh.failed)?;
    let start = Usage::now(UsageWho::RUSAGE_THREAD);
    sh.go.wait(&sh.failed)?;
    let mut polls = Latency::new();
    let result = drain(&mut c, group, generation, &mut polls, sh);
    let end = Usage::now(UsageWho::RUSAGE_THREAD);
    if result.is_err() {
        sh.failed.store(true, Ordering::SeqCst);
    }
    // Done: stay in the group until every member is done, so no LeaveGroup rebalances a
    // group still reading (a failed run stops waiting at once).
    let _ = sh.finished.wait(&sh.failed);
    let _ = c.close();
    result?;
    Ok(MemberReport { start, end, polls, warm_passes })
}

/// The measured drain of one member of `group` (which started it in `generation`): polls until
/// every group has read the whole backlog, the run failed or was stopped. Each record goes
/// through the group's [`GroupDeliveries`] check; only first deliveries count.
fn drain(c: &mut Consumer, group: usize, generation: i32, polls: &mut Latency, sh: &Shared) -> anyhow::Result<()> {
    sh.generations[group].0.store(generation, Ordering::SeqCst);
    sh.generations[group].1.fetch_max(generation, Ordering::SeqCst);
    let window_end = sh.window_end.get().copied();
    // A windowed drain: the assigned partitions (and the generation they are of), to seek
    // back to their start at their end.
    let mut owned: Owned = (i32::MIN, Vec::new());
    let mut bytes_carry = 0.0f64;
    loop {
        let more = match window_end {
            Some(end) => Instant::now() < end,
            None => sh.consumed.load(Ordering::SeqCst) < sh.target,
        };
        if !more || sh.failed.load(Ordering::SeqCst) || sh.stop.load(Ordering::SeqCst) {
            break;
        }
        let t = Instant::now();
        let polled = if c.config().fetch_mode == FetchMode::Drain {
            Polled::Batches(c.poll_batches(Duration::from_millis(100))?)
        } else {
            Polled::Records(c.poll(Duration::from_millis(100))?)
        };
        let ns = t.elapsed().as_nanos() as u64;
        // Only the deliveries of polls that returned inside the window count.
        let counted = window_end.is_none_or(|end| Instant::now() <= end);
        deliver(group, polled, ns, counted, polls, sh, &mut bytes_carry, c.generation())?;
        // After the deliveries: they were of the pass before the seek back.
        if window_end.is_some() {
            wrap_at_end(c, group, &mut owned, sh)?;
        }
    }
    Ok(())
}

/// What one poll of a member returned: records (the decoding consumer) or batches (the drain
/// consumer).
enum Polled {
    Records(Vec<crate::client::consumer::ConsumerRecord>),
    Batches(Vec<DrainedBatch>),
}

/// A poll whose records are dropped (warmup, settling, rejoining), in the consumer's mode.
///
/// Errors: the consumer's.
fn poll_discard(c: &mut Consumer, timeout: Duration) -> Result<(), ConsumerError> {
    if c.config().fetch_mode == FetchMode::Drain {
        c.poll_batches(timeout).map(drop)
    } else {
        c.poll(timeout).map(drop)
    }
}

/// The checks and counts of the records of one poll of `group`'s member, delivered in
/// `gen` (see [`drain`]); `counted`: the poll returned inside the window. A drained batch is
/// checked as its offsets `first_offset..=last_offset` ([`GroupDeliveries::deliver_batch`]).
#[allow(clippy::too_many_arguments)]
fn deliver(
    group: usize,
    polled: Polled,
    ns: u64,
    counted: bool,
    polls: &mut Latency,
    sh: &Shared,
    bytes_carry: &mut f64,
    gen: i32,
) -> anyhow::Result<()> {
    // The generation the records were delivered in: a rebalance inside this poll has
    // completed before its records were fetched.
    sh.generations[group].1.fetch_max(gen, Ordering::SeqCst);
    let empty = match &polled {
        Polled::Records(r) => r.is_empty(),
        Polled::Batches(b) => b.is_empty(),
    };
    if empty {
        return Ok(());
    }
    polls.record_ns(ns);
    let mut new = 0u64;
    let mut d = sh.deliveries[group].lock().expect("not poisoned");
    match polled {
        Polled::Records(recs) => {
            for r in &recs {
                if !sh.aborted.is_empty() {
                    check_not_aborted(&sh.aborted, &r.topic, r.partition, r.offset)?;
                }
                let offset = sh.virtual_offset(group, &r.topic, r.partition, r.offset);
                if d.deliver(&r.topic, r.partition, offset, gen)? == Delivery::New {
                    new += 1;
                }
            }
        }
        Polled::Batches(batches) => {
            for b in &batches {
                if !sh.aborted.is_empty() {
                    check_not_aborted(&sh.aborted, &b.topic, b.partition, b.first_offset)?;
                    check_not_aborted(&sh.aborted, &b.topic, b.partition, b.last_offset)?;
                }
                let first = sh.virtual_offset(group, &b.topic, b.partition, b.first_offset);
                let last = first + (b.last_offset - b.first_offset);
                new +=
                    d.deliver_batch(&b.topic, b.partition, (first, last), b.records_from_first(), b.is_dense(), gen)?;
            }
        }
    }
    drop(d);
    if !counted {
        return Ok(());
    }
    *bytes_carry += new as f64 * sh.bytes_per_record;
    let whole = bytes_carry.floor();
    *bytes_carry -= whole;
    sh.delivered_bytes.fetch_add(whole as u64, Ordering::SeqCst);
    let before = sh.consumed.fetch_add(new, Ordering::SeqCst);
    if sh.window_end.get().is_none() && before < sh.target && before + new >= sh.target {
        *sh.done_at.lock().expect("not poisoned") = Some(Instant::now());
    }
    Ok(())
}

impl Shared {
    /// The offset the deliveries check sees for `offset` of `topic`-`partition` read by
    /// `group`: `offset` itself in one drain; in a windowed drain `pass x (end - start) +
    /// offset`, so the passes over a partition make one increasing sequence (the last offset
    /// of a pass, `end - 1`, is followed by the next pass's `start`).
    fn virtual_offset(&self, group: usize, topic: &Arc<str>, partition: i32, offset: i64) -> i64 {
        match self.bounds.get(group).and_then(|g| g.get(&(topic.clone(), partition))) {
            Some(b) => pass_offset(b.pass.load(Ordering::SeqCst), b.start, b.end, offset),
            None => offset,
        }
    }
}

/// `offset` of the partition `start..end` in pass `pass` as one increasing sequence over the
/// passes: `pass x (end - start) + offset`.
fn pass_offset(pass: u64, start: i64, end: i64, offset: i64) -> i64 {
    pass as i64 * (end - start) + offset
}

/// Every backlog partition's `(log start offset, end)` for the consumers of `t`: the end is
/// the log end offset, or the last stable offset under `read_committed` (ListOffsets with the
/// workload's isolation level), read by a consumer of its own without a group.
///
/// Errors: the consumer's (connecting, ListOffsets).
fn partition_bounds(t: &Target<'_>) -> anyhow::Result<HashMap<PartitionKey, (i64, i64)>> {
    let mut cc = ConsumerConfig::new(t.bootstrap.clone());
    for (k, v) in &t.w.consumer_config {
        cc.set(k, v).map_err(|e| anyhow!("consumer_config.{k}: {e}"))?;
    }
    cc.group_id = None;
    cc.enable_auto_commit = false;
    cc.client_id = "fetchbench-run-bounds".into();
    let mut c = Consumer::new(cc)?;
    let tps: Vec<TopicPartition> =
        t.backlog.topics.iter().flat_map(|(topic, n)| (0..*n).map(move |p| (topic.clone(), p))).collect();
    c.assign(&tps)?;
    c.seek_to_beginning(&tps)?;
    let starts = tps.iter().map(|tp| c.position(tp)).collect::<Result<Vec<_>, _>>()?;
    c.seek_to_end(&tps)?;
    let mut out = HashMap::new();
    for (tp, start) in tps.iter().zip(starts) {
        let end = c.position(tp)?;
        out.insert((Arc::from(tp.0.as_str()), tp.1), (start, end.max(start)));
    }
    let _ = c.close();
    Ok(out)
}

/// Seeks the `i`-th of the member's `n` partitions (in `assignment`'s order) to `start + i/n`
/// of its length, and starts its deliveries check there (see the module docs: staggered
/// partitions do not reach their ends together).
///
/// Errors: the seek's.
fn stagger(
    c: &mut Consumer,
    group: usize,
    generation: i32,
    assignment: &[TopicPartition],
    sh: &Shared,
) -> anyhow::Result<()> {
    let n = assignment.len().max(1) as i64;
    let mut d = sh.deliveries[group].lock().expect("not poisoned");
    for (i, tp) in assignment.iter().enumerate() {
        let key = (Arc::<str>::from(tp.0.as_str()), tp.1);
        let Some(b) = sh.bounds[group].get(&key) else { continue };
        let offset = b.start + (b.end - b.start) * i as i64 / n;
        c.seek(tp, offset)?;
        let virtual_offset = sh.virtual_offset(group, &key.0, tp.1, offset);
        d.begin(&key.0, tp.1, virtual_offset, generation);
    }
    Ok(())
}

/// After a poll of a windowed drain: every assigned partition whose position reached its end
/// is sought back to its log start, and its pass count goes up (`owned` caches the
/// assignment of the current generation).
///
/// Errors: the consumer's.
fn wrap_at_end(c: &mut Consumer, group: usize, owned: &mut Owned, sh: &Shared) -> anyhow::Result<()> {
    if owned.0 != c.generation() {
        let assignment = c.assignment();
        owned.1 = assignment.into_iter().map(|tp| (tp.clone(), (Arc::from(tp.0.as_str()), tp.1))).collect();
        owned.0 = c.generation();
    }
    for (tp, key) in &owned.1 {
        let Some(b) = sh.bounds[group].get(key) else { continue };
        if b.end > b.start && c.position(tp)? >= b.end {
            b.pass.fetch_add(1, Ordering::SeqCst);
            c.seek(tp, b.start)?;
        }
    }
    Ok(())
}

/// Errors when `offset` of `topic`-`partition` lies in one of its aborted transactions
/// (`aborted`: `(first offset, ABORT marker offset)` per partition, in offset order): a
/// `read_committed` consumer must never deliver it (Kafka's `CompletedFetch` drops it).
fn check_not_aborted(
    aborted: &std::collections::BTreeMap<(String, i32), Vec<(i64, i64)>>,
    topic: &str,
    partition: i32,
    offset: i64,
) -> anyhow::Result<()> {
    let Some(ranges) = aborted.get(&(topic.to_string(), partition)) else { return Ok(()) };
    let i = ranges.partition_point(|&(_, marker)| marker < offset);
    if let Some(&(first, marker)) = ranges.get(i).filter(|&&(first, _)| first <= offset) {
        bail!(
            "{topic}-{partition}: offset {offset} delivered under isolation.level=read_committed, but it is a \
             record of the aborted transaction at offsets {first}..{marker}"
        );
    }
    Ok(())
}

/// Waits until `c` has no Fetch in flight, its partitions paused (the answer of a Fetch parked
/// at the log end comes after up to `fetch.max.wait.ms`; it is read and dropped).
///
/// Errors: the consumer's; no answer within `fetch.max.wait.ms` + `request.timeout.ms` + 1 s;
/// "stopped" when the run failed elsewhere.
fn settle(c: &mut Consumer, sh: &Shared) -> anyhow::Result<()> {
    let assignment = c.assignment();
    c.pause(&assignment)?;
    let config = c.config();
    let limit = Duration::from_millis(config.fetch_max_wait_ms.max(0) as u64 + config.request_timeout_ms + 1000);
    let deadline = Instant::now() + limit;
    while c.fetch_in_flight() {
        if sh.failed.load(Ordering::SeqCst) {
            return Err(Stopped.into());
        }
        if Instant::now() > deadline {
            bail!("a Fetch sent before the drain was not answered within {} ms", limit.as_millis());
        }
        poll_discard(c, Duration::from_millis(100))?;
    }
    Ok(())
}

/// Warmup of one member: drains its partitions from the log start again and again (the same
/// connections, read path state, socket buffers and broker mappings the measured drain will
/// use) until `warmup` has passed, stopping mid-pass at the deadline. A rebalance (a new
/// generation or assignment after a poll) stops the pass; the next one starts on the current
/// assignment. Returns the complete passes.
fn warm_up(c: &mut Consumer, warmup: Duration, sh: &Shared) -> anyhow::Result<u32> {
    let deadline = Instant::now() + warmup;
    let mut passes = 0;
    'pass: loop {
        let assignment = c.assignment();
        let generation = c.generation();
        c.seek_to_end(&assignment)?;
        let mut ends = Vec::new();
        for tp in &assignment {
            ends.push(c.position(tp)?);
        }
        c.seek_to_beginning(&assignment)?;
        c.resume(&assignment)?;
        loop {
            if Instant::now() >= deadline || sh.failed.load(Ordering::SeqCst) || sh.stop.load(Ordering::SeqCst) {
                let now = c.assignment();
                c.pause(&now)?;
                return Ok(passes);
            }
            poll_discard(c, Duration::from_millis(100))?;
            if c.generation() != generation || c.assignment() != assignment {
                continue 'pass;
            }
            let mut done = !assignment.is_empty();
            for (tp, end) in assignment.iter().zip(&ends) {
                done &= c.position(tp)? >= *end;
            }
            if done {
                passes += 1;
                continue 'pass;
            }
        }
    }
}

/// Member `m` of `group` after a rebalance before the drain: polls (its partitions paused, what
/// is polled dropped) until it is in a generation again and its assignment held over a poll,
/// and records that in the stability table.
///
/// Errors: the consumer's; "stopped" when the run failed elsewhere; not back within 60 s.
fn rejoin(c: &mut Consumer, m: usize, group: usize, sh: &Shared) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (-1, Vec::new());
    loop {
        if sh.failed.load(Ordering::SeqCst) {
            return Err(Stopped.into());
        }
        if Instant::now() > deadline {
            bail!("member {m} of group {group} did not rejoin within 60 s after a rebalance before the drain");
        }
        poll_discard(c, Duration::from_millis(20))?;
        let assignment = c.assignment();
        c.pause(&assignment)?;
        let now = (c.generation(), assignment);
        sh.members.lock().expect("not poisoned")[m] = (group, now.0, now.1.len());
        if now.0 > 0 && now == last {
            return Ok(());
        }
        last = now;
    }
}

/// The figures of one measured phase, before they are put per GB: [`Measured::result`].
pub(crate) struct Measured {
    /// The phase.
    pub phase: Phase,
    /// Measured wall-clock time, s.
    pub seconds: f64,
    /// Record-batch bytes delivered (all groups).
    pub bytes: u64,
    /// Records delivered (all groups).
    pub records: u64,
    /// The broker's resource use over the window (zero for an external cluster without a
    /// metrics endpoint).
    pub broker: Usage,
    /// The clients' (consumers', and producers' in the tail).
    pub clients: Usage,
    /// Page-cache residency of the read segments when the phase started (0..=1).
    pub residency_before: f64,
    /// Broker-side latency of the Fetches whose response carried record bytes (empty for an
    /// external cluster).
    pub fetch: Latency,
    /// Broker-side latency of the Fetches whose response carried none (long polls at the
    /// log end; empty for an external cluster).
    pub fetch_long_poll: Latency,
    /// Fetch requests the embedded broker held when the measured interval started (`None`
    /// for an external cluster).
    pub fetches_in_flight_at_start: Option<u64>,
    /// Client-side poll latency.
    pub polls: Latency,
    /// End-to-end latency (empty in catch-up).
    pub end_to_end: LatencyRecorder,
    /// Subscribe to every group stable, ms.
    pub rebalance_ms: Option<f64>,
    /// An external broker's RSS at the end, from its endpoint (`None`: the embedded broker's
    /// is read by [`Measured::result`], or not measured).
    pub broker_rss_bytes: Option<u64>,
    /// What the attribution sampler saw over the interval (`bound_by` is decided by the run,
    /// [`super::attribution::attribute`], once the limits are known); `None`: not sampled.
    pub attribution: Option<Attribution>,
    /// The broker's system calls and user-copied bytes over the interval
    /// ([`super::counters`]).
    pub counts: Counts,
}

impl Measured {
    /// The results entry: throughputs over `seconds`, resource use per GB of `bytes`, the
    /// broker's RSS now when it is embedded in this process.
    pub(crate) fn result(&self, t: &Target<'_>) -> PathResult {
        let gb = (self.bytes as f64 / 1e9).max(1e-12);
        let per_gb = |x: f64| (x / gb).max(0.0);
        let cpu = |u: &Usage| CpuPerGb { user_s_per_gb: per_gb(u.user), sys_s_per_gb: per_gb(u.sys) };
        let seconds = self.seconds.max(1e-9);
        PathResult {
            server_model: t.server_model.map(|m| m.name().to_string()),
            read_path: t.read_path.clone(),
            phase: self.phase.name().to_string(),
            repetition: 0, // set by the run, which knows the repetition
            seconds,
            bytes: self.bytes,
            records: self.records,
            mb_per_sec: self.bytes as f64 / 1e6 / seconds,
            records_per_sec: self.records as f64 / seconds,
            produced_mb_per_sec: None,
            broker_cpu: cpu(&self.broker),
            consumer_cpu: cpu(&self.clients),
            minor_faults_per_gb: per_gb(self.broker.minflt),
            major_faults_per_gb: per_gb(self.broker.majflt),
            context_switches_per_gb: per_gb(self.broker.csw),
            syscalls_per_gb: self.counts.syscalls.map(|n| per_gb(n as f64)),
            user_copied_bytes_per_gb: self.counts.user_copied.map(|n| per_gb(n as f64)),
            residency_before: self.residency_before,
            broker_rss_bytes: match t.broker {
                Some(_) => rss_bytes(),
                None => self.broker_rss_bytes.unwrap_or(0),
            },
            fetch_latency: LatencyResult::of(&self.fetch),
            fetch_long_poll_latency: LatencyResult::of(&self.fetch_long_poll),
            fetches_in_flight_at_start: self.fetches_in_flight_at_start,
            poll_latency: LatencyResult::of(&self.polls),
            end_to_end_latency: EndToEnd {
                raw: LatencyResult::of(&self.end_to_end.raw),
                corrected: LatencyResult::of(&self.end_to_end.corrected),
            },
            rebalance_ms: self.rebalance_ms,
            ratio_to_limits: Vec::new(),
            loopback: None,
            bound_by: None,
            attribution: self.attribution.clone(),
        }
    }
}

/// Where the members of one phase report their group state (see [`join_until_stable`]).
pub(crate) struct Stability<'a> {
    /// Per member: (group, generation, partitions assigned).
    pub members: &'a Mutex<Vec<(usize, i32, usize)>>,
    /// Groups found stable.
    pub stable: &'a AtomicUsize,
    /// Number of groups.
    pub groups: usize,
    /// Set when any part of the run failed.
    pub failed: &'a AtomicBool,
}

/// Polls `c` (member `m` of `group`, `per_group` members a group) until every group of the
/// phase is stable: all its members in one generation, `partitions_total` partitions assigned
/// among them. The member's partitions are paused as soon as it has them (what is polled
/// meanwhile is dropped); each group is counted once, by its first member.
///
/// Errors: the consumer's, or "stopped" when the run failed elsewhere.
pub(crate) fn join_until_stable(
    c: &mut Consumer,
    m: usize,
    group: usize,
    per_group: usize,
    partitions_total: usize,
    s: &Stability<'_>,
) -> anyhow::Result<()> {
    let mut group_stable = false;
    loop {
        if s.failed.load(Ordering::SeqCst) {
            return Err(Stopped.into());
        }
        poll_discard(c, Duration::from_millis(20))?;
        let assignment = c.assignment();
        c.pause(&assignment)?;
        let gen = c.generation();
        let mut ms = s.members.lock().expect("not poisoned");
        ms[m] = (group, gen, assignment.len());
        let mine: Vec<_> = ms.iter().filter(|x| x.0 == group).collect();
        let now_stable = mine.len() == per_group
            && gen > 0
            && mine.iter().all(|x| x.1 == gen)
            && mine.iter().map(|x| x.2).sum::<usize>() == partitions_total;
        if now_stable && !group_stable && m.is_multiple_of(per_group) {
            s.stable.fetch_add(1, Ordering::SeqCst);
            group_stable = true;
        }
        drop(ms);
        if s.stable.load(Ordering::SeqCst) >= s.groups {
            return Ok(());
        }
    }
}

/// Whether a delivered record is new to its group or a redelivery ([`GroupDeliveries::deliver`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The first delivery of the offset to the group: counted.
    New,
    /// Delivered again after a rebalance (at-least-once): not counted.
    Redelivered,
}

/// A delivery that breaks the group's rules ([`GroupDeliveries::deliver`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeliveryError {
    /// Records skipped: an offset above the one expected on a dense backlog.
    #[error("{topic}-{partition}: offset {offset} delivered where {expected} was expected (records lost)")]
    Gap {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The offset delivered.
        offset: i64,
        /// The next offset the group had to receive.
        expected: i64,
    },
    /// An offset delivered again, or out of order, within one generation (no rebalance).
    #[error(
        "{topic}-{partition}: offset {offset} delivered where {expected} was expected \
         (delivered twice or out of order without a rebalance)"
    )]
    Duplicate {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The offset delivered.
        offset: i64,
        /// The next offset the current owner had to deliver.
        expected: i64,
    },
}

/// Where one partition's deliveries to a group stand.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    /// One past the highest offset delivered to the group.
    next: i64,
    /// The next offset its current owner must deliver.
    at: i64,
    /// The generation of its last delivery.
    generation: i32,
}

/// The delivery rules of one consumer group over a measured drain, per partition, whichever
/// member delivers (Kafka's consumer semantics with committed positions):
///
/// * within one generation, the partition's records come in order, each once: on a dense
///   backlog (generated: offsets 0, 1, 2, ...) exactly the next offset; on a real log any higher
///   offset (compaction gaps, control batches);
/// * in a new generation (a rebalance), the owner starts again at its position: the committed
///   offset, or `auto.offset.reset` without one (Kafka's `ConsumerCoordinator`: positions are
///   committed before revocation with auto-commit, and a newly assigned partition starts at its
///   committed offset). Records below the highest offset the group already had are
///   [`Delivery::Redelivered`] (at-least-once); on a dense backlog a start above it is a gap;
/// * a redelivery without a rebalance, or a gap, is an error.
///
/// The drain starts at the log start: a partition's first delivery must be offset 0 on a dense
/// backlog (any offset on a real log), whatever its generation.
#[derive(Debug)]
pub(crate) struct GroupDeliveries {
    dense: bool,
    partitions: HashMap<(Arc<str>, i32), Cursor>,
    /// Records delivered again after a rebalance.
    pub redelivered: u64,
}

impl GroupDeliveries {
    /// No delivery yet; `dense`: the backlog's offsets are 0, 1, 2, ... in every partition.
    pub(crate) fn new(dense: bool) -> Self {
        GroupDeliveries { dense, partitions: HashMap::new(), redelivered: 0 }
    }

    /// Starts the check of `topic`-`partition` at `offset` in `generation` (a windowed drain's
    /// staggered start): the next delivery must be `offset` (dense offsets) or above it.
    pub(crate) fn begin(&mut self, topic: &Arc<str>, partition: i32, offset: i64, generation: i32) {
        self.partitions.insert((topic.clone(), partition), Cursor { next: offset, at: offset, generation });
    }

    /// Checks one record of `topic`-`partition` at `offset` delivered by a member in
    /// `generation` (its `Consumer::generation` after the poll that returned it).
    ///
    /// Errors: [`DeliveryError::Gap`] (records lost), [`DeliveryError::Duplicate`] (a
    /// redelivery or reordering within a generation).
    pub(crate) fn deliver(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        generation: i32,
    ) -> Result<Delivery, DeliveryError> {
        let dense = self.dense;
        let c = self.partitions.entry((topic.clone(), partition)).or_insert(Cursor { next: 0, at: 0, generation });
        let gap = |expected| DeliveryError::Gap { topic: topic.to_string(), partition, offset, expected };
        if generation != c.generation {
            // A rebalance: the owner starts again at its position.
            if dense && offset > c.next {
                return Err(gap(c.next));
            }
            c.at = offset;
            c.generation = generation;
        }
        if offset < c.at {
            return Err(DeliveryError::Duplicate { topic: topic.to_string(), partition, offset, expected: c.at });
        }
        if dense && offset > c.at {
            return Err(gap(c.at));
        }
        c.at = offset + 1;
        if offset < c.next {
            self.redelivered += 1;
            return Ok(Delivery::Redelivered);
        }
        c.next = offset + 1;
        Ok(Delivery::New)
    }

    /// Checks a drained batch of `topic`-`partition` whose records from the one handed out
    /// first are `first..=last` (`records` of them; `dense`: its records count is its offset
    /// span), delivered in `generation`: as [`Self::deliver`] of `first`, then of every offset
    /// up to `last` (on a dense backlog a batch that is not dense is a gap: records missing).
    /// Returns the records delivered for the first time (the rest are redeliveries).
    ///
    /// Errors: as [`Self::deliver`].
    pub(crate) fn deliver_batch(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        (first, last): (i64, i64),
        records: u64,
        dense: bool,
        generation: i32,
    ) -> Result<u64, DeliveryError> {
        let next_before = self.partitions.get(&(topic.clone(), partition)).map(|c| c.next);
        let one = self.deliver(topic, partition, first, generation)?;
        if self.dense && !dense {
            return Err(DeliveryError::Gap { topic: topic.to_string(), partition, offset: last, expected: first + 1 });
        }
        let c = self.partitions.get_mut(&(topic.clone(), partition)).expect("delivered");
        c.at = last + 1;
        // `deliver(first)` counted the first record; the others are new above the old `next`.
        let (new, redelivered) = if one == Delivery::New {
            c.next = c.next.max(last + 1);
            (records, 0)
        } else {
            let old_next = next_before.unwrap_or(0);
            let new =
                if self.dense { (last + 1 - old_next.max(first)).max(0) as u64 } else { u64::from(last >= old_next) };
            c.next = c.next.max(last + 1);
            (new.min(records), records - new.min(records))
        };
        // `deliver` counted the first one as redelivered already.
        self.redelivered += redelivered.saturating_sub(u64::from(one == Delivery::Redelivered));
        Ok(new)
    }
}

/// A barrier that gives up when the run failed (a member that errors never arrives).
struct Gate {
    arrived: AtomicUsize,
    parties: usize,
}

impl Gate {
    fn new(parties: usize) -> Gate {
        Gate { arrived: AtomicUsize::new(0), parties }
    }

    fn wait(&self, failed: &AtomicBool) -> anyhow::Result<()> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        while self.arrived.load(Ordering::SeqCst) < self.parties {
            if failed.load(Ordering::SeqCst) {
                return Err(Stopped.into());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Arc<str> {
        Arc::from("t")
    }

    /// Delivers `(partition, offset, generation)` in order; the outcome of each.
    fn run(dense: bool, seq: &[(i32, i64, i32)]) -> (Vec<Result<Delivery, String>>, u64) {
        let mut d = GroupDeliveries::new(dense);
        let out = seq.iter().map(|&(p, o, g)| d.deliver(&t(), p, o, g).map_err(|e| e.to_string())).collect();
        (out, d.redelivered)
    }

    #[test]
    fn join_error_reports_the_cause_not_a_thread_that_stopped_because_of_it() {
        let spawn = |r: fn() -> anyhow::Result<()>| std::thread::spawn(r);
        // Thread 0 gave up at a gate because thread 1 failed: thread 1's error is the cause.
        let threads = vec![spawn(|| Err(Stopped.into())), spawn(|| Err(anyhow!("offset commit failed")))];
        assert_eq!(join_error(threads, anyhow!("main")).to_string(), "offset commit failed");
        // Only echoes: the main thread's reason.
        let threads = vec![spawn(|| Err(Stopped.into())), spawn(|| Ok(()))];
        assert_eq!(join_error(threads, anyhow!("did not become stable")).to_string(), "did not become stable");
        assert_eq!(cause_first(Some(Stopped.into()), anyhow!("x")).to_string(), "x");
        assert_eq!(cause_first(Some(anyhow!("x")), Stopped.into()).to_string(), "x");
        assert_eq!(cause_first(Some(anyhow!("x")), anyhow!("y")).to_string(), "x");
    }

    /// A windowed drain: a partition of offsets 10..20 started staggered at 15, read to its
    /// end and again from its start, is one contiguous sequence; a record missed across the
    /// wrap is a gap, a pass read again without its pass counted a duplicate.
    /// A drained batch is checked as its offsets one by one would be: the same new and
    /// redelivered counts, the same errors; a batch with records missing is a gap.
    #[test]
    fn a_drained_batch_is_checked_as_its_offsets_one_by_one() {
        // (first, last, generation): in order, a redelivery after a rebalance, a gap, a duplicate.
        let cases: &[&[(i64, i64, i32)]] = &[
            &[(0, 9, 1), (10, 19, 1), (20, 29, 1)],
            &[(0, 9, 1), (10, 19, 1), (5, 14, 2), (15, 24, 2)],
            &[(0, 9, 1), (12, 19, 1)],
            &[(0, 9, 1), (5, 9, 1)],
            &[(3, 9, 1)],
        ];
        for seq in cases {
            let mut one = GroupDeliveries::new(true);
            let mut batched = GroupDeliveries::new(true);
            for &(first, last, g) in *seq {
                let mut expected = Ok(0u64);
                for o in first..=last {
                    match one.deliver(&t(), 0, o, g) {
                        Ok(Delivery::New) => expected = expected.map(|n| n + 1),
                        Ok(Delivery::Redelivered) => {}
                        Err(e) => {
                            expected = Err(e.to_string());
                            break;
                        }
                    }
                }
                let records = (last - first + 1) as u64;
                let got = batched.deliver_batch(&t(), 0, (first, last), records, true, g).map_err(|e| e.to_string());
                assert_eq!(got, expected, "{seq:?} at {first}..={last}");
                assert_eq!(batched.redelivered, one.redelivered, "{seq:?}");
                if got.is_err() {
                    break;
                }
            }
        }
        // A batch that is not dense (records missing from its offsets) on a dense backlog.
        let mut d = GroupDeliveries::new(true);
        assert!(d.deliver_batch(&t(), 0, (0, 9), 7, false, 1).unwrap_err().to_string().contains("records lost"));
        // On a real log: its records count.
        let mut d = GroupDeliveries::new(false);
        assert_eq!(d.deliver_batch(&t(), 0, (4, 9), 3, false, 1).unwrap(), 3);
    }

    #[test]
    fn passes_over_a_partition_are_checked_as_one_sequence() {
        let (start, end) = (10, 20);
        let mut d = GroupDeliveries::new(true);
        d.begin(&t(), 0, pass_offset(0, start, end, 15), 1);
        let mut seq: Vec<(u64, i64)> = (15..20).map(|o| (0, o)).collect();
        seq.extend((10..20).map(|o| (1, o)));
        seq.extend((10..13).map(|o| (2, o)));
        for &(pass, o) in &seq {
            assert_eq!(d.deliver(&t(), 0, pass_offset(pass, start, end, o), 1).unwrap(), Delivery::New, "{pass} {o}");
        }
        assert_eq!(d.redelivered, 0);
        // Pass 2 resumes at 13; 14 first is a gap.
        let e = d.deliver(&t(), 0, pass_offset(2, start, end, 14), 1).unwrap_err();
        assert!(e.to_string().contains("records lost"), "{e}");

        let mut d = GroupDeliveries::new(true);
        d.begin(&t(), 0, pass_offset(0, start, end, 10), 1);
        for o in 10..19 {
            d.deliver(&t(), 0, pass_offset(0, start, end, o), 1).unwrap();
        }
        // The last record of pass 0 (19) was skipped at the wrap.
        assert!(d.deliver(&t(), 0, pass_offset(1, start, end, 10), 1).is_err());

        let mut d = GroupDeliveries::new(true);
        d.begin(&t(), 0, pass_offset(0, start, end, 10), 1);
        for o in 10..20 {
            d.deliver(&t(), 0, pass_offset(0, start, end, o), 1).unwrap();
        }
        // The partition read again from its start with the pass not counted.
        let e = d.deliver(&t(), 0, pass_offset(0, start, end, 10), 1).unwrap_err();
        assert!(e.to_string().contains("delivered twice"), "{e}");
    }

    #[test]
    fn each_offset_once_in_order_within_a_generation() {
        let (out, redelivered) = run(true, &[(0, 0, 5), (1, 0, 5), (0, 1, 5), (1, 1, 5), (0, 2, 5)]);
        assert!(out.iter().all(|r| *r == Ok(Delivery::New)), "{out:?}");
        assert_eq!(redelivered, 0);
    }

    #[test]
    fn a_redelivery_without_a_rebalance_is_an_error() {
        let (out, _) = run(true, &[(0, 0, 5), (0, 1, 5), (0, 0, 5)]);
        let e = out[2].as_ref().unwrap_err();
        assert!(e.contains("t-0: offset 0 delivered where 2 was expected") && e.contains("without a rebalance"), "{e}");
        // Also on a real log (offsets only grow).
        let (out, _) = run(false, &[(0, 10, 5), (0, 12, 5), (0, 11, 5)]);
        assert!(out[2].as_ref().unwrap_err().contains("without a rebalance"), "{out:?}");
    }

    #[test]
    fn records_of_aborted_transactions_are_refused() {
        let aborted = std::collections::BTreeMap::from([(("t".to_string(), 0), vec![(10, 15), (30, 31)])]);
        for ok in [0, 9, 16, 29, 32] {
            assert!(check_not_aborted(&aborted, "t", 0, ok).is_ok(), "{ok}");
        }
        assert!(check_not_aborted(&aborted, "t", 1, 12).is_ok(), "another partition");
        for bad in [10, 12, 14, 30] {
            let e = check_not_aborted(&aborted, "t", 0, bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("t-0: offset {bad} delivered under isolation.level=read_committed")), "{e}");
        }
    }

    #[test]
    fn after_a_rebalance_the_group_may_get_records_again_and_they_are_not_counted() {
        // Generation 5: offsets 0..=2 of partition 0; generation 6 (another member, no
        // committed position): from 0 again, then on past where the group was.
        let seq = [(0, 0, 5), (0, 1, 5), (0, 2, 5), (0, 0, 6), (0, 1, 6), (0, 2, 6), (0, 3, 6), (0, 4, 6)];
        let (out, redelivered) = run(true, &seq);
        let kinds: Vec<Delivery> = out.into_iter().map(Result::unwrap).collect();
        use Delivery::{New, Redelivered};
        assert_eq!(kinds, [New, New, New, Redelivered, Redelivered, Redelivered, New, New]);
        assert_eq!(redelivered, 3);
        // From the committed position (no redelivery at all).
        let (out, redelivered) = run(true, &[(0, 0, 5), (0, 1, 5), (0, 2, 6), (0, 3, 6)]);
        assert!(out.iter().all(|r| *r == Ok(New)), "{out:?}");
        assert_eq!(redelivered, 0);
        // Within the new generation the owner must still go on in order.
        let (out, _) = run(true, &[(0, 0, 5), (0, 1, 5), (0, 0, 6), (0, 0, 6)]);
        assert!(out[3].as_ref().unwrap_err().contains("without a rebalance"), "{out:?}");
    }

    #[test]
    fn a_gap_is_an_error_on_a_dense_backlog_even_after_a_rebalance() {
        let (out, _) = run(true, &[(0, 0, 5), (0, 2, 5)]);
        assert!(out[1].as_ref().unwrap_err().contains("offset 2 delivered where 1 was expected (records lost)"));
        let (out, _) = run(true, &[(0, 0, 5), (0, 1, 5), (0, 5, 6)]);
        assert!(out[2].as_ref().unwrap_err().contains("offset 5 delivered where 2 was expected (records lost)"));
        // The first delivery of a partition is its log start, 0.
        let (out, _) = run(true, &[(3, 7, 5)]);
        assert!(out[0].as_ref().unwrap_err().contains("t-3: offset 7 delivered where 0 was expected"));
        // A real log: higher offsets are compaction gaps, not losses.
        let (out, _) = run(false, &[(0, 3, 5), (0, 9, 5), (0, 20, 6)]);
        assert!(out.iter().all(|r| *r == Ok(Delivery::New)), "{out:?}");
    }
}
