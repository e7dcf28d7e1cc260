//! The tail phase: producers at a fixed rate, consumer groups at the head of the log,
//! end-to-end latency.
//!
//! Flow, for one read path (or the external cluster):
//!
//! 1. `consumer_groups` x `consumers_per_group` consumers (one thread each, pinned to the client
//!    CPUs when pinning is on) subscribe to every topic; once every group is stable
//!    (`rebalance_ms`), each member moves to the log end of its partitions (`seek_to_end`, the
//!    offsets resolved before anything is produced);
//! 2. `producers` producer threads (each a [`Producer`] with Kafka 4's defaults: `acks=all`,
//!    `linger.ms=5`, `batch.size=16384`, idempotent; then the workload's `compression` and
//!    `[producer_config]` over them, see [`Workload::producer_config_for`]) send for
//!    `warmup + duration`. With a rate, each producer follows an open-loop schedule
//!    ([`OpenLoopSchedule`], `rate / producers` records/s, the producers' schedules
//!    interleaved): record `i` is due at its intended time whatever happened before, and a
//!    producer that fell behind sends at once without skipping. `rate = 0` is a closed loop
//!    (intended = actual send time). Each value starts with two 8-byte big-endian
//!    timestamps on the process's monotonic clock ([`mono_ns`]): the actual send time (when
//!    `send` was called) and the intended one;
//! 3. consumers take the receive time when `poll` returns and record every record whose
//!    intended time falls in the measured window `[warmup, warmup + duration)` into a
//!    [`LatencyRecorder`]: `raw` = receive - actual send, `corrected` = receive - intended
//!    (coordinated omission corrected). The members' recorders are merged (histograms added,
//!    never percentiles averaged);
//! 4. when the producers have flushed, the consumers read until every group has received
//!    every acknowledged record (each partition's offsets consecutive: no loss, no duplicate)
//!    and the phase ends.
//!
//! Throughput is the records of the window (all groups) over `duration`; bytes are those
//! records times the record-batch bytes per record the log grew by (embedded broker), or the
//! records' value bytes (external cluster). CPU: the process over the window minus the client
//! threads (consumers, producers and their sender threads, read from `/proc/self/task`).
//! `produced_mb_per_sec`: the record-batch bytes the producers wrote to their connections
//! (after compression, [`crate::client::producer::ProducerStats::batch_bytes_sent`]) over the
//! window, per second.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::resource::UsageWho;

use super::attribution::{Roles, Sampler};
use super::backlog::{Backlog, Payload};
use super::catch_up::{join_error, join_until_stable, Measured, Stability, Target};
use super::counters::CountWindow;
use super::histogram::{LatencyRecorder, OpenLoopSchedule};
use super::remote::RemoteWindow;
use super::results::PathResult;
use super::tail_shared::{mono_ns, TailMemberReport, TailMembers, TailShared, INTENDED_HEADER, SENT_HEADER};
use super::usage::{pin_current_thread, residency, threads_usage, Usage};
use super::workload::{Client, KeyDistribution, Phase, Workload};
use crate::client::consumer::{Consumer, ConsumerConfig, OffsetReset};
use crate::client::producer::{Producer, ProducerConfig};
use crate::log::batch::Header;
use crate::metrics::Latency;

pub(crate) use super::usage::CLIENT_THREADS;

/// How long consumers may take after the producers finished to receive every record.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A producer stall to inject (tests of the coordinated-omission correction): every producer
/// sleeps `length` once, `at` after the phase started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// When, from the phase start.
    pub at: Duration,
    /// How long.
    pub length: Duration,
}

/// Measures the tail phase on `t` (see the module docs). Returns the path's result and notes.
///
/// Errors: `record_size` below 16 bytes (no room for the timestamps), a consumer or producer
/// error, groups that do not become stable within 60 s, a record lost or delivered twice.
pub(crate) fn tail(
    t: &Target<'_>,
    dir: Option<&Path>,
    stall: Option<Stall>,
) -> anyhow::Result<(PathResult, Vec<String>)> {
    let w = t.w;
    check(w)?;
    let mut notes = Vec::new();
    let backlog = tail_backlog(t)?;
    let t = &retarget(t, &backlog, t.group_prefix.clone());
    // Of the segments the tail reads: its own topics, at the head.
    let residency_before = residency(&segment_files(dir, &t.backlog.topics));
    let rig = TailRig::start(t, dir)?;
    let sh = rig.sh.clone();
    // The schedule: record i of producer p (of P) due at start + (i * P + p) / rate.
    let start_ns = mono_ns() + 20_000_000; // 20 ms for the producer threads to start
    let window_start = start_ns + w.warmup.as_nanos() as u64;
    let window_end = window_start + w.duration.as_nanos() as u64;
    sh.window.0.store(window_start, Ordering::SeqCst);
    sh.window.1.store(window_end, Ordering::SeqCst);
    let producers = match Producers::start(t, &sh, start_ns, Arc::new(AtomicU64::new(window_end)), stall) {
        Ok(p) => p,
        Err(e) => return Err(rig.abort(e)),
    };
    // Usage snapshots at the window's bounds (the process, and the client threads). This
    // thread's own CPU counts as broker: it sleeps in long steps (a 1 ms poll loop cost a
    // third of a CPU in context switches on a VM).
    let mut interrupted = false;
    let mut window_cut = None;
    let (mut proc0, mut clients0, mut written0) = (Usage::default(), Usage::default(), 0);
    let mut in_flight_at_start = None;
    let mut remote = RemoteWindow::open(None);
    let mut sampler = None;
    let mut counting = None;
    if wait_until(&sh, t.interrupted, window_start) {
        remote = RemoteWindow::open(t.metrics);
        counting = Some(CountWindow::open(t.broker));
        proc0 = Usage::now(UsageWho::RUSAGE_SELF);
        clients0 = threads_usage(&CLIENT_THREADS);
        let roles = Roles::of(t.pin_clients.as_deref(), t.broker.is_some());
        sampler = Some(Sampler::start(roles, sh.delivered_bytes.clone()));
        written0 = producers.written();
        if let Some(b) = t.broker {
            // Consumers waiting at the log end hold parked fetches: the tail's steady state.
            in_flight_at_start = Some(b.fetches_in_flight());
            let _ = b.take_fetch_latencies(); // warmup fetches are not measured
        }
        if !wait_until(&sh, t.interrupted, window_end) {
            window_cut = Some(mono_ns());
        }
    } else {
        window_cut = Some(mono_ns());
    }
    let proc1 = Usage::now(UsageWho::RUSAGE_SELF);
    let clients1 = threads_usage(&CLIENT_THREADS);
    let written1 = producers.written();
    let sampled = sampler.map(Sampler::finish);
    let remote = remote.close(t.metrics, &t.read_path, &mut notes);
    let counts = counting.map(|c| c.close(t.broker, remote.as_ref(), &mut notes)).unwrap_or_default();
    let in_flight_at_start = in_flight_at_start.or(remote.as_ref().map(|r| r.fetches_in_flight_at_start));
    let broker_rss_bytes = remote.as_ref().map(|r| r.rss_bytes);
    let remote_usage = remote.as_ref().map(|r| r.usage);
    let fetch_latency = t.broker.map(|b| b.take_fetch_latencies()).or(remote.map(|r| r.fetch)).unwrap_or_default();
    if t.interrupted.load(Ordering::SeqCst) {
        interrupted = true;
    }
    if let Some(cut) = window_cut {
        // Shrink the window to what was measured, so late records do not count.
        sh.window.1.store(cut.max(window_start), Ordering::SeqCst);
    }
    let out = rig.finish(t, producers, interrupted)?;
    let seconds = (sh.window.1.load(Ordering::SeqCst) - window_start) as f64 / 1e9;
    let seconds = seconds.max(1e-9);
    let bytes = out.window_batch_bytes();
    if dir.is_none() {
        notes.push("tail bytes are record value bytes (the external cluster's log is not visible)".into());
    }
    if w.client == Client::Librdkafka {
        notes.push(
            "consumer_cpu counts this process's client threads only: the kcat processes' CPU is not \
             measured in the tail phase (it is in catch_up)"
                .into(),
        );
    }
    let process = proc1.minus(proc0);
    let clients = clients1.minus(clients0);
    let brk = match t.broker {
        Some(_) => process.minus_part(clients),
        None => remote_usage.unwrap_or_default(),
    };
    let clients = if t.broker.is_some() { clients } else { process };
    let interrupted = interrupted || t.interrupted.load(Ordering::SeqCst);
    out.schedule_notes(w, seconds, interrupted, &mut notes);
    let mut result = Measured {
        phase: Phase::Tail,
        seconds,
        bytes,
        records: out.records,
        broker: brk,
        clients,
        residency_before,
        fetch: fetch_latency.with_records,
        fetch_long_poll: fetch_latency.without_records,
        fetches_in_flight_at_start: in_flight_at_start,
        polls: out.polls,
        end_to_end: out.latency,
        rebalance_ms: Some(out.rebalance_ms),
        broker_rss_bytes,
        attribution: sampled.map(|s| s.into_attribution(bytes)),
        counts,
    }
    .result(t);
    result.produced_mb_per_sec = Some(written1.saturating_sub(written0) as f64 / 1e6 / seconds);
    Ok((result, notes))
}

/// Waits until the mono time `ns`; false when the phase failed or was interrupted first. Sleeps
/// in steps of at most 50 ms (the caller's CPU counts as broker).
pub(crate) fn wait_until(sh: &TailShared, interrupted: &AtomicBool, ns: u64) -> bool {
    loop {
        let now = mono_ns();
        if now >= ns {
            return true;
        }
        if sh.failed.load(Ordering::SeqCst) || interrupted.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_nanos((ns - now).min(50_000_000)));
    }
}

/// The topics the producers of the tail (and mixed) phase write, created when missing:
/// `fetchbench-tail-<topic>` with the backlog topics' partition counts, so the backlog every
/// read path's catch-up reads stays as it was.
///
/// Errors: connecting, creating the topics.
pub(crate) fn tail_backlog(t: &Target<'_>) -> anyhow::Result<Backlog> {
    let tail_topics: Vec<(String, i32)> =
        t.backlog.topics.iter().map(|(name, p)| (format!("fetchbench-tail-{name}"), *p)).collect();
    create_if_missing(&t.bootstrap, &tail_topics)?;
    Ok(Backlog {
        topics: tail_topics,
        records: 0,
        committed_records: 0,
        disk_bytes: 0,
        segment_files: Vec::new(),
        dense_offsets: true,
        aborted_ranges: Default::default(),
    })
}

/// `t` with another backlog and group-id prefix.
pub(crate) fn retarget<'a>(t: &Target<'a>, backlog: &'a Backlog, group_prefix: String) -> Target<'a> {
    Target {
        w: t.w,
        backlog,
        read_path: t.read_path.clone(),
        server_model: t.server_model,
        bootstrap: t.bootstrap.clone(),
        broker: t.broker,
        metrics: t.metrics,
        interrupted: t.interrupted,
        group_prefix,
        pin_clients: t.pin_clients.clone(),
    }
}

/// The consumer side of a tail phase, running: `consumer_groups` x `consumers_per_group`
/// members at the head of the target's topics (the tail topics), and what is needed to end it.
pub(crate) struct TailRig {
    /// State shared with the members (and the producers).
    pub sh: Arc<TailShared>,
    consumers: TailMembers,
    topics: Vec<String>,
    rebalance_ms: f64,
    /// Bytes of the topics' `.log` files before producing (embedded broker).
    log_bytes_before: Option<u64>,
    dir: Option<std::path::PathBuf>,
}

/// The producer threads of a tail phase (see [`Producers::start`]).
pub(crate) struct Producers {
    handles: Vec<std::thread::JoinHandle<anyhow::Result<(u64, u64)>>>,
    stop: Arc<AtomicBool>,
    written: Vec<Arc<AtomicU64>>,
}

/// What the consumers of a tail phase received, once it ended ([`TailRig::finish`]).
pub(crate) struct TailOutcome {
    /// End-to-end latencies of the window's records (all members).
    pub latency: LatencyRecorder,
    /// Client-side poll latencies.
    pub polls: Latency,
    /// Records of the window received (all groups).
    pub records: u64,
    /// Their value bytes.
    pub value_bytes: u64,
    /// Records due in the window the producers never sent.
    pub unsent: u64,
    /// Record-batch bytes the topics' logs grew by per produced record (embedded broker).
    pub batch_bytes_per_record: Option<f64>,
    /// Subscribe to every member at the log end, ms.
    pub rebalance_ms: f64,
}

impl TailOutcome {
    /// Record-batch bytes of the window's records (their share of the log's growth), or their
    /// value bytes when the log is not visible (external cluster).
    pub(crate) fn window_batch_bytes(&self) -> u64 {
        match self.batch_bytes_per_record {
            Some(per) => (per * self.records as f64) as u64,
            None => self.value_bytes,
        }
    }

    /// Notes on the producers not keeping to their schedule over `seconds` of window.
    pub(crate) fn schedule_notes(&self, w: &Workload, seconds: f64, interrupted: bool, notes: &mut Vec<String>) {
        let rate = w.rate.records_per_sec(w.record_size);
        let expected = rate.map_or(0.0, |r| r * seconds) * w.consumer_groups as f64;
        notes.extend(schedule_notes(interrupted, self.unsent, rate.is_some(), self.records, expected));
    }
}

impl TailRig {
    /// Starts the consumer members on `t`'s topics and waits until every one is at the log
    /// end of its partitions (groups stable).
    ///
    /// Errors: a consumer error, groups not stable within 60 s, Ctrl-C.
    pub(crate) fn start(t: &Target<'_>, dir: Option<&Path>) -> anyhow::Result<TailRig> {
        let w = t.w;
        let groups = w.consumer_groups as usize;
        let members = groups * w.consumers_per_group as usize;
        let partitions_total: usize = t.backlog.topics.iter().map(|(_, p)| *p as usize).sum();
        let topics: Vec<String> = t.backlog.topics.iter().map(|(t, _)| t.clone()).collect();
        let sh = Arc::new(TailShared {
            members: Mutex::new(vec![(usize::MAX, -1, 0); members]),
            stable: AtomicUsize::new(0),
            groups,
            failed: AtomicBool::new(false),
            ready: AtomicUsize::new(0),
            start_ns: AtomicU64::new(0),
            produced: AtomicU64::new(u64::MAX),
            received: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            delivered_bytes: Arc::new(AtomicU64::new(0)),
            done: AtomicBool::new(false),
            window: (AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)),
        });
        let consumers = match w.client {
            Client::Native => native_members(t, &sh, &topics, partitions_total)?,
            Client::Librdkafka => super::kcat::tail_members(t, &sh)?,
        };
        let subscribed = Instant::now();
        let deadline = subscribed + Duration::from_secs(60);
        while sh.ready.load(Ordering::SeqCst) < members {
            if sh.failed.load(Ordering::SeqCst) || Instant::now() > deadline || t.interrupted.load(Ordering::SeqCst) {
                sh.failed.store(true, Ordering::SeqCst);
                return Err(join_error(consumers, anyhow!("the consumer groups did not become stable")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let rebalance_ms = subscribed.elapsed().as_secs_f64() * 1e3;
        let log_bytes_before = dir.map(|d| topic_log_bytes(d, &topics));
        Ok(TailRig { sh, consumers, topics, rebalance_ms, log_bytes_before, dir: dir.map(Path::to_path_buf) })
    }

    /// Stops everything after an error `e` elsewhere; returns the members' own error if one
    /// failed, else `e`.
    pub(crate) fn abort(self, e: anyhow::Error) -> anyhow::Error {
        self.sh.failed.store(true, Ordering::SeqCst);
        join_error(self.consumers, e)
    }

    /// Ends the phase: stops the producers (they send what is due before their end), waits
    /// until every group received every acknowledged record, closes the members and merges
    /// their reports. `interrupted`: Ctrl-C was seen (no loss or duplicate check then).
    ///
    /// Errors: a producer or consumer error, records lost (not received 60 s after the
    /// producers finished) or delivered twice.
    pub(crate) fn finish(self, t: &Target<'_>, producers: Producers, interrupted: bool) -> anyhow::Result<TailOutcome> {
        let TailRig { sh, consumers, topics, rebalance_ms, log_bytes_before, dir } = self;
        let mut interrupted = interrupted;
        producers.stop.store(true, Ordering::SeqCst);
        let mut produced = 0;
        let mut unsent = 0u64;
        let mut error = None;
        for p in producers.handles {
            match p.join() {
                Ok(Ok((n, u))) => {
                    produced += n;
                    unsent += u;
                }
                Ok(Err(e)) => error = error.or(Some(e)),
                Err(_) => error = error.or(Some(anyhow!("a producer thread panicked"))),
            }
        }
        if let Some(e) = error {
            sh.failed.store(true, Ordering::SeqCst);
            return Err(join_error(consumers, e));
        }
        sh.produced.store(produced, Ordering::SeqCst);
        // Every group receives every acknowledged record.
        let settle = Instant::now();
        loop {
            if sh.failed.load(Ordering::SeqCst) {
                break;
            }
            if sh.received.iter().all(|r| r.load(Ordering::SeqCst) >= produced) {
                break;
            }
            if interrupted || t.interrupted.load(Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            if settle.elapsed() > SETTLE_TIMEOUT {
                sh.failed.store(true, Ordering::SeqCst);
                let got: Vec<u64> = sh.received.iter().map(|r| r.load(Ordering::SeqCst)).collect();
                return Err(join_error(
                    consumers,
                    anyhow!(
                        "records lost: {produced} acknowledged, the groups received {got:?} {} s after the producers finished",
                        SETTLE_TIMEOUT.as_secs()
                    ),
                ));
            }
        }
        sh.done.store(true, Ordering::SeqCst);
        let mut reports = Vec::new();
        let mut error = None;
        for c in consumers {
            match c.join() {
                Ok(Ok(r)) => reports.push(r),
                Ok(Err(e)) => error = error.or(Some(e)),
                Err(_) => error = error.or(Some(anyhow!("a consumer thread panicked"))),
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        if !interrupted {
            for (g, r) in sh.received.iter().enumerate() {
                let r = r.load(Ordering::SeqCst);
                if r != produced {
                    bail!("group {g} received {r} records, {produced} were acknowledged: duplicates");
                }
            }
        }
        let mut latency = LatencyRecorder::new();
        let mut polls = Latency::new();
        let (mut records, mut value_bytes) = (0u64, 0u64);
        for r in &reports {
            latency.merge(&r.latency);
            polls.merge(&r.polls);
            records += r.window_records;
            value_bytes += r.window_value_bytes;
        }
        // Record-batch bytes per record, from the log's growth (embedded).
        let batch_bytes_per_record = match (dir, log_bytes_before) {
            (Some(d), Some(before)) if produced > 0 => {
                Some(topic_log_bytes(&d, &topics).saturating_sub(before) as f64 / produced as f64)
            }
            _ => None,
        };
        Ok(TailOutcome { latency, polls, records, value_bytes, unsent, batch_bytes_per_record, rebalance_ms })
    }
}

impl Producers {
    /// Starts `producers` producer threads on `t`'s topics: each a [`Producer`] with the
    /// workload's producer config ([`Workload::producer_config_for`]), sending on the
    /// open-loop schedule from `start_ns` (mono ns) while the intended time is below `end_ns`
    /// (which may be moved while they run), then flushing. A failing producer sets
    /// `sh.failed`.
    ///
    /// Errors: a bad producer config, a payload file that cannot be read, spawning a thread.
    pub(crate) fn start(
        t: &Target<'_>,
        sh: &Arc<TailShared>,
        start_ns: u64,
        end_ns: Arc<AtomicU64>,
        stall: Option<Stall>,
    ) -> anyhow::Result<Producers> {
        let w = t.w;
        sh.start_ns.store(start_ns, Ordering::SeqCst);
        let topics: Vec<String> = t.backlog.topics.iter().map(|(t, _)| t.clone()).collect();
        let rate = w.rate.records_per_sec(w.record_size);
        let stop = Arc::new(AtomicBool::new(false));
        let mut out = Producers { handles: Vec::new(), stop: stop.clone(), written: Vec::new() };
        for p in 0..w.producers as usize {
            let pc = w
                .producer_config_for(&t.bootstrap, &format!("fetchbench-run-producer-{p}"))
                .map_err(|e| anyhow!("producer_config: {e}"))?;
            let written = Arc::new(AtomicU64::new(0));
            let job = ProducerJob {
                index: p as u64,
                count: u64::from(w.producers),
                rate,
                start_ns,
                end_ns: end_ns.clone(),
                record_size: w.record_size as usize,
                keys: w.key_distribution,
                topics: topics.clone(),
                stall,
                pin: t.pin_clients.clone(),
                stamp_headers: w.client == Client::Librdkafka,
                payload: w.payload_file.as_deref().map(Payload::read).transpose()?,
                written: written.clone(),
            };
            let (stop, failed) = (stop.clone(), sh.clone());
            let handle = std::thread::Builder::new().name(format!("bench-producer-{p}")).spawn(move || {
                let r = produce(pc, &job, &stop);
                if r.is_err() {
                    failed.failed.store(true, Ordering::SeqCst);
                }
                r
            })?;
            out.handles.push(handle);
            out.written.push(written);
        }
        Ok(out)
    }

    /// Record-batch bytes the producers have written to their connections so far (after
    /// compression, retries included: [`crate::client::producer::ProducerStats::batch_bytes_sent`]),
    /// as last published by each producer thread (after each send).
    pub(crate) fn written(&self) -> u64 {
        self.written.iter().map(|w| w.load(Ordering::SeqCst)).sum()
    }
}

/// The native (fetchbench) consumer members of a tail phase: `consumer_groups` x
/// `consumers_per_group` threads running [`tail_member`].
fn native_members(
    t: &Target<'_>,
    sh: &Arc<TailShared>,
    topics: &[String],
    partitions_total: usize,
) -> anyhow::Result<TailMembers> {
    let w = t.w;
    let per_group = w.consumers_per_group as usize;
    let mut consumers = Vec::new();
    for m in 0..w.consumer_groups as usize * per_group {
        let group = m / per_group;
        let mut cc = ConsumerConfig::new(t.bootstrap.clone());
        cc.heartbeat_interval_ms = 100;
        cc.enable_auto_commit = false;
        cc.auto_offset_reset = OffsetReset::Latest;
        for (k, v) in &w.consumer_config {
            cc.set(k, v).map_err(|e| anyhow!("consumer_config.{k}: {e}"))?;
        }
        // End-to-end latency needs each record's timestamp: the tail always decodes, whatever
        // `fetchbench.fetch.mode` the catch-up uses.
        cc.fetch_mode = crate::client::consumer::FetchMode::Decode;
        cc.group_id = Some(format!("{}-tail-{group}", t.group_prefix));
        cc.client_id = format!("fetchbench-run-tail-{m}");
        let (topics, sh, pin) = (topics.to_vec(), sh.clone(), t.pin_clients.clone());
        let handle = std::thread::Builder::new().name(format!("bench-consumer-t{m}")).spawn(move || {
            let r = tail_member(m, group, per_group, partitions_total, cc, &topics, pin.as_deref(), &sh);
            if r.is_err() {
                sh.failed.store(true, Ordering::SeqCst);
            }
            r
        })?;
        consumers.push(handle);
    }
    Ok(consumers)
}

/// Creates `topics` (name, partitions) on the broker at `bootstrap` unless they exist.
///
/// Errors: connecting, or a CreateTopics error other than TOPIC_ALREADY_EXISTS (36).
fn create_if_missing(bootstrap: &str, topics: &[(String, i32)]) -> anyhow::Result<()> {
    use crate::client::{admin, ClientError, KafkaConnection};
    let mut conn = KafkaConnection::connect(bootstrap, "fetchbench-run", Duration::from_secs(10))?;
    for topic in topics {
        match admin::create_topics(&mut conn, std::slice::from_ref(topic), 30_000) {
            Ok(()) | Err(ClientError::Kafka { code: 36, .. }) => {}
            Err(e) => return Err(e).with_context(|| format!("creating the tail topic {}", topic.0)),
        }
    }
    Ok(())
}

/// The `.log` files of `topics`' partitions under the log directory `dir` (none without one).
fn segment_files(dir: Option<&Path>, topics: &[(String, i32)]) -> Vec<std::path::PathBuf> {
    let Some(dir) = dir else { return Vec::new() };
    let mut out = Vec::new();
    for (topic, partitions) in topics {
        for p in 0..*partitions {
            for f in std::fs::read_dir(dir.join(format!("{topic}-{p}"))).into_iter().flatten().flatten() {
                if f.path().extension().is_some_and(|x| x == "log") {
                    out.push(f.path());
                }
            }
        }
    }
    out
}

/// Bytes of the `.log` files of `topics`' partitions under the log directory `dir`.
fn topic_log_bytes(dir: &Path, topics: &[String]) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let mut total = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((topic, _)) = name.rsplit_once('-') else { continue };
        if !topics.iter().any(|t| t == topic) {
            continue;
        }
        for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            if f.path().extension().is_some_and(|x| x == "log") {
                total += f.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    total
}

/// What one producer thread sends.
struct ProducerJob {
    index: u64,
    count: u64,
    rate: Option<f64>,
    start_ns: u64,
    /// Records intended at or after this (mono ns) are not sent; may move while running.
    end_ns: Arc<AtomicU64>,
    /// Where the producer publishes its `batch_bytes_sent` after each send.
    written: Arc<AtomicU64>,
    record_size: usize,
    keys: KeyDistribution,
    topics: Vec<String>,
    stall: Option<Stall>,
    pin: Option<Vec<usize>>,
    /// Values cut from `payload_file` (after the 16 stamp bytes), when set.
    payload: Option<Payload>,
    /// Also carry the two timestamps as decimal record headers [`SENT_HEADER`] and
    /// [`INTENDED_HEADER`] (for clients that cannot hand back value bytes, e.g. kcat).
    stamp_headers: bool,
}

/// The key of record `i` (of all producers) under `keys`; `rng` is the producer's state for
/// `random:K`.
pub(crate) fn record_key(keys: KeyDistribution, i: u64, rng: &mut u64) -> Option<String> {
    match keys {
        KeyDistribution::None => None,
        KeyDistribution::Sequential => Some(i.to_string()),
        KeyDistribution::Random(k) => {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            Some((*rng % k).to_string())
        }
    }
}

/// One producer: sends on its schedule until `end_ns` (or `stop`), flushes, returns the
/// records acknowledged.
fn produce(config: ProducerConfig, job: &ProducerJob, stop: &AtomicBool) -> anyhow::Result<(u64, u64)> {
    if let Some(cpus) = &job.pin {
        pin_current_thread(cpus)?;
    }
    let producer = Producer::new(config)?;
    // This producer's share of the schedule: every `count`-th slot, offset by `index`.
    let schedule = job.rate.map(|r| OpenLoopSchedule { start_ns: job.start_ns, records_per_sec: r });
    let mut value = vec![0u8; job.record_size];
    for (i, b) in value.iter_mut().enumerate().skip(16) {
        *b = (i % 251) as u8;
    }
    let mut payload = job.payload.clone();
    let mut handles = Vec::new();
    let mut rng: u64 = 0x2545_F491_4F6C_DD1D ^ job.index;
    let mut stalled = false;
    while mono_ns() < job.start_ns {
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut unsent = 0;
    for i in 0u64.. {
        let intended = match schedule {
            Some(s) => s.intended_ns(i * job.count + job.index),
            None => mono_ns(),
        };
        let end_ns = job.end_ns.load(Ordering::Relaxed);
        if intended >= end_ns {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            // Stopped while records of the window were still due: a producer that could not
            // keep to the schedule. Those records are in no histogram; count them.
            if let Some(s) = schedule.filter(|_| end_ns != u64::MAX) {
                let window_slots = ((end_ns - job.start_ns) as f64 * s.records_per_sec / 1e9).ceil() as u64;
                let mine = window_slots.saturating_sub(job.index).div_ceil(job.count);
                unsent = mine.saturating_sub(i);
            }
            break;
        }
        if let Some(s) = job.stall.filter(|s| !stalled && intended >= job.start_ns + s.at.as_nanos() as u64) {
            stalled = true;
            std::thread::sleep(s.length);
        }
        // Open loop: sleep until the due time (no spinning: the clients share their CPUs);
        // when late, send at once (never skip). Sleep overshoot shows in the corrected
        // latency, as any other lateness of the producer.
        let now = mono_ns();
        if now < intended {
            std::thread::sleep(Duration::from_nanos(intended - now));
        }
        let topic = &job.topics[(i as usize) % job.topics.len()];
        let key = record_key(job.keys, i * job.count + job.index, &mut rng);
        if let Some(p) = payload.as_mut() {
            p.fill(&mut value[16..]);
        }
        let sent = mono_ns();
        value[..8].copy_from_slice(&sent.to_be_bytes());
        value[8..16].copy_from_slice(&intended.to_be_bytes());
        let (sent_text, intended_text) = (sent.to_string(), intended.to_string());
        let stamps = [
            Header { key: SENT_HEADER.as_bytes(), value: Some(sent_text.as_bytes()) },
            Header { key: INTENDED_HEADER.as_bytes(), value: Some(intended_text.as_bytes()) },
        ];
        let headers: &[Header<'_>] = if job.stamp_headers { &stamps } else { &[] };
        handles.push(producer.send(topic, None, key.as_deref().map(str::as_bytes), Some(&value), headers, None)?);
        job.written.store(producer.stats().batch_bytes_sent, Ordering::Relaxed);
        if handles.len() >= 4096 {
            for h in handles.drain(..) {
                h.wait()?;
            }
        }
    }
    producer.flush()?;
    for h in handles {
        h.wait()?;
    }
    let stats = producer.stats();
    job.written.store(stats.batch_bytes_sent, Ordering::Relaxed);
    producer.close()?;
    if stats.records_failed > 0 || stats.records_acked != stats.records_sent {
        bail!(
            "producer {}: {} records sent, {} acknowledged, {} failed",
            job.index,
            stats.records_sent,
            stats.records_acked,
            stats.records_failed
        );
    }
    Ok((stats.records_acked, unsent))
}

/// One tail consumer: join, wait for every group to be stable, move to the log end, then read
/// until the phase is done, recording latencies of the window's records.
#[allow(clippy::too_many_arguments)]
fn tail_member(
    m: usize,
    group: usize,
    per_group: usize,
    partitions_total: usize,
    config: ConsumerConfig,
    topics: &[String],
    pin: Option<&[usize]>,
    sh: &TailShared,
) -> anyhow::Result<TailMemberReport> {
    if let Some(cpus) = pin {
        pin_current_thread(cpus)?;
    }
    let mut c = Consumer::new(config)?;
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    c.subscribe(&topic_refs)?;
    let stability = Stability { members: &sh.members, stable: &sh.stable, groups: sh.groups, failed: &sh.failed };
    join_until_stable(&mut c, m, group, per_group, partitions_total, &stability)?;
    let assignment = c.assignment();
    // Positions at the log end, resolved now: nothing is produced until every member is here.
    let mut next: HashMap<(Arc<str>, i32), i64> = HashMap::new();
    if !assignment.is_empty() {
        c.seek_to_end(&assignment)?;
        for tp in &assignment {
            let position = c.position(tp)?;
            next.insert((Arc::from(tp.0.as_str()), tp.1), position);
        }
        c.resume(&assignment)?;
    }
    sh.ready.fetch_add(1, Ordering::SeqCst);
    let mut report = TailMemberReport {
        latency: LatencyRecorder::new(),
        polls: Latency::new(),
        window_records: 0,
        window_value_bytes: 0,
    };
    while !sh.done.load(Ordering::SeqCst) && !sh.failed.load(Ordering::SeqCst) {
        let before = Instant::now();
        let recs = c.poll(Duration::from_millis(100))?;
        let received = mono_ns();
        if recs.is_empty() {
            continue;
        }
        report.polls.record_ns(before.elapsed().as_nanos() as u64);
        let (from, to) = (sh.window.0.load(Ordering::SeqCst), sh.window.1.load(Ordering::SeqCst));
        for r in &recs {
            let expected = next.entry((r.topic.clone(), r.partition)).or_insert(r.offset);
            if r.offset != *expected {
                bail!("{}-{}: offset {} delivered where {} was expected", r.topic, r.partition, r.offset, expected);
            }
            *expected += 1;
            let Some(v) = r.value.as_deref().filter(|v| v.len() >= 16) else {
                bail!("{}-{} offset {}: a value without the harness's timestamps", r.topic, r.partition, r.offset);
            };
            let sent = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
            let intended = u64::from_be_bytes(v[8..16].try_into().expect("8 bytes"));
            if intended >= from && intended < to {
                report.latency.record(intended, sent, received);
                report.window_records += 1;
                report.window_value_bytes += v.len() as u64;
            }
        }
        let value_bytes: usize = recs.iter().map(|r| r.value.as_deref().map_or(0, <[u8]>::len)).sum();
        sh.delivered_bytes.fetch_add(value_bytes as u64, Ordering::Relaxed);
        sh.received[group].fetch_add(recs.len() as u64, Ordering::SeqCst);
    }
    let _ = c.close();
    Ok(report)
}

/// The notes on the producers' schedule of a tail phase: `unsent` records due in the window
/// that no producer sent, `records` measured (all groups) against `expected` due (`with_rate`:
/// an open-loop schedule). A phase cut short by Ctrl-C (`interrupted`) gets one note saying so
/// and none claiming the producers fell behind: its unsent and missing records are the
/// interruption's (the producers stop, the window shrinks to what was measured, records in
/// flight are not waited for).
fn schedule_notes(interrupted: bool, unsent: u64, with_rate: bool, records: u64, expected: f64) -> Vec<String> {
    let mut notes = Vec::new();
    if interrupted {
        let mut note =
            "interrupted (Ctrl-C): the tail phase was cut short; figures cover the time measured".to_string();
        if unsent > 0 {
            note += &format!(" ({unsent} records still due were not sent because of the interruption)");
        }
        notes.push(note);
        return notes;
    }
    if unsent > 0 {
        notes.push(format!(
            "the producers could not keep to the schedule: {unsent} records due in the window were never sent; \
             they are in no histogram, so the corrected latency understates (lower the rate)"
        ));
    }
    if with_rate && (records as f64) < expected * 0.9 {
        notes.push(format!(
            "the producers fell behind the schedule: {records} records measured, {expected:.0} due (see the corrected latency)"
        ));
    }
    notes
}

/// Checks a workload's tail settings before anything runs.
///
/// Errors: as [`tail`], early.
pub(crate) fn check(w: &Workload) -> anyhow::Result<()> {
    if w.record_size < 16 {
        bail!("record_size: the tail phase needs at least 16 bytes (two timestamps), found {}", w.record_size);
    }
    if w.producers == 0 {
        bail!("producers: the tail phase needs at least one producer");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ctrl-C: one note saying the phase was interrupted, none claiming the producers fell
    /// behind; without it, the schedule notes as before.
    #[test]
    fn an_interrupted_tail_does_not_blame_the_producers() {
        let notes = schedule_notes(true, 1_234, true, 10, 5_000.0);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("interrupted (Ctrl-C): the tail phase was cut short"), "{notes:?}");
        assert!(notes[0].contains("1234 records still due were not sent because of the interruption"), "{notes:?}");
        assert!(!notes[0].contains("could not keep") && !notes[0].contains("fell behind"), "{notes:?}");
        assert_eq!(schedule_notes(true, 0, true, 5_000, 5_000.0).len(), 1);

        let notes = schedule_notes(false, 1_234, true, 10, 5_000.0);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("the producers could not keep to the schedule: 1234 records"), "{notes:?}");
        assert!(
            notes[1].starts_with("the producers fell behind the schedule: 10 records measured, 5000 due"),
            "{notes:?}"
        );
        assert!(schedule_notes(false, 0, true, 4_600, 5_000.0).is_empty());
        assert!(schedule_notes(false, 0, false, 10, 0.0).is_empty());
    }
}
