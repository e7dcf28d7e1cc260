//! The catch-up phase: consumer groups drain the backlog from the log start as fast as they can.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use nix::sys::resource::UsageWho;

use super::backlog::Backlog;
use super::histogram::Latency;
use super::results::{CpuPerGb, EndToEnd, LatencyResult, PathResult};
use super::usage::{pin_current_thread, residency, rss_bytes, Usage};
use super::workload::{Phase, Workload};
use crate::broker::BrokerHandle;
use crate::client::consumer::{Consumer, ConsumerConfig};

/// How long one path's drain may take before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// What a consumer thread hands back.
struct MemberReport {
    /// Thread usage at the drain start, at the warmup boundary (if seen) and at the end.
    start: Usage,
    boundary: Option<Usage>,
    end: Usage,
    /// Poll latencies over the whole drain and after the warmup boundary.
    polls_all: Latency,
    polls_window: Latency,
}

/// State shared by the consumer threads of one path.
struct Shared {
    consumed: AtomicU64,
    target: u64,
    /// Per member: (generation, partitions assigned), for the stability check.
    members: Mutex<Vec<(usize, i32, usize)>>,
    stable: AtomicUsize,
    groups: usize,
    boundary: AtomicBool,
    failed: AtomicBool,
    /// Set on Ctrl-C: members stop reading and report.
    stop: AtomicBool,
    /// Threads (members and the main thread) past the "sought to the start" point.
    ready: Gate,
    /// Threads past the "start snapshot taken" point.
    go: Gate,
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
    /// `host:port` of the broker.
    pub bootstrap: String,
    /// The embedded broker, `None` for an external cluster (no broker CPU, no broker-side
    /// fetch latency there).
    pub broker: Option<&'a BrokerHandle>,
    /// Set by Ctrl-C: phases stop early and report what they measured.
    pub interrupted: &'a AtomicBool,
    /// A prefix unique to this path, for group ids.
    pub group_prefix: String,
    /// CPUs the client threads (consumers, producers) are pinned to, if any.
    pub pin_clients: Option<Vec<usize>>,
}

/// Measures the catch-up phase: `consumer_groups` groups of `consumers_per_group` consumers
/// (one thread each) subscribe to every topic; once every group is stable (all members in one
/// generation, every partition assigned: `rebalance_ms`), each member seeks to the log start
/// and the backlog is drained. Returns the path's result and notes.
///
/// Errors: a consumer error, a group that does not become stable within 60 s, a record
/// delivered twice or out of order, a drain longer than 600 s.
pub(crate) fn catch_up(t: &Target<'_>) -> anyhow::Result<(PathResult, Vec<String>)> {
    let w = t.w;
    let backlog = t.backlog;
    let mut notes = Vec::new();
    let residency_before = residency(&backlog.segment_files);
    if let Some(b) = t.broker {
        let _ = b.take_fetch_latency(); // only this phase's fetches
    }
    let addr = t.bootstrap.clone();
    let groups = w.consumer_groups as usize;
    let per_group = w.consumers_per_group as usize;
    let members = groups * per_group;
    let partitions_total: usize = backlog.topics.iter().map(|(_, p)| *p as usize).sum();
    let shared = Arc::new(Shared {
        consumed: AtomicU64::new(0),
        target: backlog.records * groups as u64,
        members: Mutex::new(vec![(usize::MAX, -1, 0); members]),
        stable: AtomicUsize::new(0),
        groups,
        boundary: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        ready: Gate::new(members + 1),
        go: Gate::new(members + 1),
        done_at: Mutex::new(None),
    });
    let mut threads = Vec::new();
    for m in 0..members {
        let group = m / per_group;
        let mut cc = ConsumerConfig::new(addr.clone());
        // Harness settings first; the workload's consumer_config wins over them.
        cc.heartbeat_interval_ms = 100;
        cc.enable_auto_commit = false;
        cc.auto_offset_reset = crate::client::consumer::OffsetReset::Earliest;
        for (k, v) in &w.consumer_config {
            cc.set(k, v).map_err(|e| anyhow!("consumer_config.{k}: {e}"))?;
        }
        cc.group_id = Some(format!("{}-catch-up-{group}", t.group_prefix));
        cc.client_id = format!("fetchbench-run-{m}");
        let topics: Vec<String> = backlog.topics.iter().map(|(t, _)| t.clone()).collect();
        let dense = backlog.dense_offsets;
        let pin = t.pin_clients.clone();
        let sh = shared.clone();
        let t = std::thread::Builder::new().name(format!("bench-consumer-{m}")).spawn(move || {
            let r = member(m, group, per_group, partitions_total, cc, &topics, dense, pin.as_deref(), &sh);
            if r.is_err() {
                sh.failed.store(true, Ordering::SeqCst);
            }
            r
        })?;
        threads.push(t);
    }
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
    let proc_start = Usage::now(UsageWho::RUSAGE_SELF);
    let start = Instant::now();
    if let Err(e) = shared.go.wait(&shared.failed) {
        return Err(join_error(threads, e));
    }
    let mut boundary: Option<(Instant, Usage, u64)> = None;
    loop {
        if shared.consumed.load(Ordering::SeqCst) >= shared.target || shared.failed.load(Ordering::SeqCst) {
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
        if boundary.is_none() && !w.warmup.is_zero() && start.elapsed() >= w.warmup {
            let u = Usage::now(UsageWho::RUSAGE_SELF);
            boundary = Some((Instant::now(), u, shared.consumed.load(Ordering::SeqCst)));
            shared.boundary.store(true, Ordering::SeqCst);
            if let Some(b) = t.broker {
                let _ = b.take_fetch_latency(); // warmup fetches are not measured
            }
        }
        // Counted as broker CPU: a coarse poll (the drain's end is stamped by the consumers).
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut reports = Vec::new();
    let mut error = None;
    for t in threads {
        match t.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => error = error.or(Some(e)),
            Err(_) => error = error.or(Some(anyhow!("a consumer thread panicked"))),
        }
    }
    let proc_end = Usage::now(UsageWho::RUSAGE_SELF);
    let end = shared.done_at.lock().expect("not poisoned").unwrap_or_else(Instant::now);
    let fetch_latency = t.broker.map(|b| b.take_fetch_latency()).unwrap_or_default();
    if let Some(e) = error {
        return Err(e);
    }
    let stopped = shared.stop.load(Ordering::SeqCst);
    if !stopped && shared.consumed.load(Ordering::SeqCst) < shared.target {
        bail!("the drain did not finish within {} s", DRAIN_TIMEOUT.as_secs());
    }
    // The window: after the warmup boundary when every member saw it, else the whole drain.
    let use_boundary = boundary.filter(|_| reports.iter().all(|r| r.boundary.is_some()));
    if !w.warmup.is_zero() && use_boundary.is_none() {
        notes.push(format!(
            "the drain ({:.2} s) was shorter than warmup ({:.1} s): the whole drain is measured",
            end.duration_since(start).as_secs_f64(),
            w.warmup.as_secs_f64()
        ));
    }
    let (t0, proc0, records0) = use_boundary.unwrap_or((start, proc_start, 0));
    let mut consumer = Usage::default();
    let mut polls = Latency::new();
    for r in &reports {
        let from = if use_boundary.is_some() { r.boundary.expect("checked") } else { r.start };
        consumer = consumer.plus(r.end.minus(from));
        polls.merge(if use_boundary.is_some() { &r.polls_window } else { &r.polls_all });
    }
    let seconds = end.duration_since(t0).as_secs_f64().max(1e-9);
    let records = shared.consumed.load(Ordering::SeqCst).min(shared.target).saturating_sub(records0);
    let bytes = (backlog.disk_bytes as f64 * groups as f64 * records as f64 / shared.target.max(1) as f64) as u64;
    let gb = (bytes as f64 / 1e9).max(1e-12);
    let process = proc_end.minus(proc0);
    // External target: the broker is elsewhere; this process is only the clients.
    let brk = if t.broker.is_some() { process.minus(consumer) } else { Usage::default() };
    if t.broker.is_none() {
        consumer = process;
    }
    let per_gb = |x: f64| (x / gb).max(0.0);
    let empty = LatencyResult::of(&Latency::new());
    let result = PathResult {
        read_path: t.read_path.clone(),
        phase: Phase::CatchUp.name().to_string(),
        seconds,
        bytes,
        records,
        mb_per_sec: bytes as f64 / 1e6 / seconds,
        records_per_sec: records as f64 / seconds,
        broker_cpu: CpuPerGb { user_s_per_gb: per_gb(brk.user), sys_s_per_gb: per_gb(brk.sys) },
        consumer_cpu: CpuPerGb { user_s_per_gb: per_gb(consumer.user), sys_s_per_gb: per_gb(consumer.sys) },
        minor_faults_per_gb: per_gb(brk.minflt),
        major_faults_per_gb: per_gb(brk.majflt),
        context_switches_per_gb: per_gb(brk.csw),
        residency_before,
        broker_rss_bytes: if t.broker.is_some() { rss_bytes() } else { 0 },
        fetch_latency: LatencyResult::of(&fetch_latency),
        poll_latency: LatencyResult::of(&polls),
        end_to_end_latency: EndToEnd { raw: empty.clone(), corrected: empty },
        rebalance_ms: Some(rebalance_ms),
        ratio_to_limits: Vec::new(),
    };
    Ok((result, notes))
}

pub(crate) fn join_error<T>(
    threads: Vec<std::thread::JoinHandle<anyhow::Result<T>>>,
    e: anyhow::Error,
) -> anyhow::Error {
    let mut first = None;
    for t in threads {
        if let Ok(Err(te)) = t.join() {
            first = first.or(Some(te));
        }
    }
    match first {
        // The thread's own error is the cause; `e` only says the run stopped.
        Some(te) => te,
        None => e,
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
    dense: bool,
    pin: Option<&[usize]>,
    sh: &Shared,
) -> anyhow::Result<MemberReport> {
    if let Some(cpus) = pin {
        pin_current_thread(cpus)?;
    }
    let mut c = Consumer::new(config)?;
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    c.subscribe(&topic_refs)?;
    let short = Duration::from_millis(20);
    // Join; records polled before the group is stable are dropped (positions reset below).
    let mut group_stable = false;
    loop {
        if sh.failed.load(Ordering::SeqCst) {
            return Err(anyhow!("stopped: another part of the run failed"));
        }
        let _ = c.poll(short)?;
        let assignment = c.assignment();
        c.pause(&assignment)?;
        let gen = c.generation();
        let mut ms = sh.members.lock().expect("not poisoned");
        ms[m] = (group, gen, assignment.len());
        let mine: Vec<_> = ms.iter().filter(|x| x.0 == group).collect();
        let now_stable = mine.len() == per_group
            && gen > 0
            && mine.iter().all(|x| x.1 == gen)
            && mine.iter().map(|x| x.2).sum::<usize>() == partitions_total;
        if now_stable && !group_stable && m.is_multiple_of(per_group) {
            // The group's first member counts it once.
            sh.stable.fetch_add(1, Ordering::SeqCst);
            group_stable = true;
        }
        drop(ms);
        if sh.stable.load(Ordering::SeqCst) >= sh.groups {
            break;
        }
    }
    let assignment = c.assignment();
    if !assignment.is_empty() {
        c.seek_to_beginning(&assignment)?;
        c.resume(&assignment)?;
    }
    sh.ready.wait(&sh.failed)?;
    let start = Usage::now(UsageWho::RUSAGE_THREAD);
    sh.go.wait(&sh.failed)?;
    let mut boundary = None;
    let mut polls_all = Latency::new();
    let mut polls_window = Latency::new();
    // Next expected offset per partition: every record must come exactly once, in order.
    let mut next: std::collections::HashMap<(Arc<str>, i32), i64> = std::collections::HashMap::new();
    while sh.consumed.load(Ordering::SeqCst) < sh.target
        && !sh.failed.load(Ordering::SeqCst)
        && !sh.stop.load(Ordering::SeqCst)
    {
        if boundary.is_none() && sh.boundary.load(Ordering::SeqCst) {
            boundary = Some(Usage::now(UsageWho::RUSAGE_THREAD));
        }
        let t = Instant::now();
        let recs = c.poll(Duration::from_millis(100))?;
        let ns = t.elapsed().as_nanos() as u64;
        if !recs.is_empty() {
            polls_all.record_ns(ns);
            if boundary.is_some() {
                polls_window.record_ns(ns);
            }
            for r in &recs {
                // Generated: dense from 0, each offset once. A real log: offsets only grow
                // (compaction gaps, control batches), each at most once.
                let expected = next.entry((r.topic.clone(), r.partition)).or_insert(0);
                if (dense && r.offset != *expected) || r.offset < *expected {
                    bail!("{}-{}: offset {} delivered where {} was expected", r.topic, r.partition, r.offset, expected);
                }
                *expected = r.offset + 1;
            }
            let n = recs.len() as u64;
            let before = sh.consumed.fetch_add(n, Ordering::SeqCst);
            if before < sh.target && before + n >= sh.target {
                *sh.done_at.lock().expect("not poisoned") = Some(Instant::now());
            }
        }
    }
    let end = Usage::now(UsageWho::RUSAGE_THREAD);
    let _ = c.close();
    Ok(MemberReport { start, boundary, end, polls_all, polls_window })
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
                bail!("stopped: another part of the run failed");
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(())
    }
}
