//! `fetchbench run [WORKLOAD.toml]`: runs one resolved workload and writes its results file.
//!
//! This first version measures the **catch-up** phase only (a `tail` phase in the workload is
//! skipped with a note). Flow:
//!
//! 1. the backlog is written straight into a temporary log directory through
//!    [`LogManager`] / [`PartitionLog::append`](crate::log::PartitionLog::append) of
//!    [`BatchBuilder`] batches (no network): `backlog / record_size` records of `record_size`
//!    bytes over `topics` x `partitions`, batches of about 16 KiB (the producer's default
//!    `batch.size`), each value starting with its write time (8-byte big-endian ns since the
//!    Unix epoch, as `fetchbench produce`);
//! 2. for each read path of the workload whose probe passes (others are skipped with the
//!    probe's reason; `null` is skipped too, consumers cannot decode its zeros): an embedded broker serving that directory with that path
//!    (`group.initial.rebalance.delay.ms=0`), then `consumer_groups` groups of
//!    `consumers_per_group` fetchbench consumers (one thread each) subscribe to every topic;
//!    once every group is stable (all members in one generation, every partition assigned:
//!    `rebalance_ms`), each member seeks to the log start and the backlog is drained;
//! 3. the results file `<results-dir>/<UTC time>-<name>.json` (schema of
//!    [`super::results`]) and its CSV are written, and a table is printed.
//!
//! What each field holds here:
//!
//! * `bytes`: the backlog's record-batch bytes on disk times the groups, scaled by the fraction
//!   of records in the measured window (the consumer API hands out records, not batches);
//! * `broker_cpu`: process CPU (`getrusage(RUSAGE_SELF)`) minus the consumer threads' own CPU
//!   (`getrusage(RUSAGE_THREAD)` in each consumer thread); the consumers' heartbeat threads and
//!   the harness's idle main thread are counted as broker (both are tiny);
//! * `consumer_cpu`: the consumer threads' CPU; faults and context switches: process minus
//!   consumer threads, as the CPU;
//! * `fetch_latency`: client-side, the duration of each `poll` that returned records (the
//!   broker keeps no per-request timings yet);
//! * `residency_before`: `mincore` over the segment files when the path starts;
//! * not measured (0 / empty): `broker_rss_bytes` (the broker shares the process with the
//!   consumers), `end_to_end_latency` (meaningless for a backlog written before the read).
//!
//! `warmup`: when the drain lasts longer than `warmup`, the window starts at `warmup` after
//! the drain began; otherwise the whole drain is measured (noted in the output).

use std::fs::{self, File};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use nix::sys::resource::{getrusage, UsageWho};

use super::histogram::Latency;
use super::results::{self, CpuPerGb, EndToEnd, Git, LatencyResult, Machine, PathResult, Results};
use super::workload::{self, Client, CpuPinning, KeyDistribution, PageCache, Phase, Workload};
use crate::broker::{Broker, BrokerConfig};
use crate::client::consumer::{Consumer, ConsumerConfig};
use crate::client::producer::partition_for_key;
use crate::log::batch::{BatchBuilder, Compression};
use crate::log::manager::LogManager;
use crate::log::LogConfig;
use crate::read_path::ReadPathKind;

/// Arguments of `fetchbench run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The workload file (TOML, see `bench::workload`); the default workload when omitted.
    pub workload: Option<PathBuf>,
    /// Print the results JSON on stdout (instead of the table).
    #[arg(long)]
    pub json: bool,
    /// Print no table or notes (errors still go to stderr).
    #[arg(long)]
    pub quiet: bool,
    /// Where the results JSON and CSV are written.
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
}

/// `fetchbench run`: exit 0 on success, 2 on an error (printed on stderr).
pub fn main(args: RunArgs) -> ExitCode {
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain, leaving out causes the message before already spells out.
            let mut msg = String::new();
            for cause in e.chain().map(ToString::to_string) {
                if !msg.ends_with(&cause) {
                    msg += &if msg.is_empty() { cause } else { format!(": {cause}") };
                }
            }
            eprintln!("fetchbench run: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Target size of one written batch (the producer's default `batch.size`).
const BATCH_BYTES: u64 = 16 * 1024;

/// How long one path's drain may take before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `args`: loads the workload, measures, writes the files, prints.
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let command: Vec<String> = std::env::args().collect();
    let date = utc_timestamp(SystemTime::now());
    let w = match &args.workload {
        Some(p) => Workload::from_file(p)?,
        None => Workload::default(),
    };
    check_supported(&w)?;
    let mut notes = Vec::new();
    if w.phases.contains(&Phase::Tail) {
        notes.push("phase tail: not implemented yet by `fetchbench run`, skipped".to_string());
    }
    if !w.phases.contains(&Phase::CatchUp) {
        bail!("the workload has no catch_up phase: only catch_up is implemented so far");
    }
    let dir = TempDir::new()?;
    let fill_start = Instant::now();
    let backlog = fill_backlog(&w, dir.path()).context("writing the backlog")?;
    notes.push(format!(
        "backlog: {} records, {} batch bytes on disk, written in {:.1} s",
        backlog.records,
        backlog.disk_bytes,
        fill_start.elapsed().as_secs_f64()
    ));
    let mut paths = Vec::new();
    for &kind in &w.read_paths {
        if kind == ReadPathKind::Null {
            notes.push("read path null: skipped: it sends zeros, which consumers cannot decode".to_string());
            continue;
        }
        if let Err(e) = kind.probe() {
            notes.push(format!("read path {}: skipped: {}", kind.name(), e.reason));
            continue;
        }
        if !args.quiet && !args.json {
            eprintln!("fetchbench run: measuring {} (catch_up)", kind.name());
        }
        let (result, path_notes) =
            catch_up(&w, kind, dir.path(), &backlog).with_context(|| format!("read path {}", kind.name()))?;
        notes.extend(path_notes.into_iter().map(|n| format!("read path {}: {n}", kind.name())));
        paths.push(result);
    }
    if paths.is_empty() {
        bail!("no read path of the workload could run here: {}", notes.join("; "));
    }
    notes.push(
        "not measured (0 / empty): broker_rss_bytes (broker and consumers share the process), \
         end_to_end_latency (catch-up reads an old backlog); fetch_latency is client-side poll time"
            .to_string(),
    );
    let results = Results {
        schema: results::SCHEMA.into(),
        schema_version: results::SCHEMA_VERSION,
        date: date.clone(),
        machine: Machine::current(),
        git: Git::current(),
        command,
        workload: Results::workload_value(&w),
        paths,
    };
    let doc = serde_json::to_value(&results)?;
    results::validate(&doc).map_err(|e| anyhow!("internal error: the results do not validate: {e}"))?;
    fs::create_dir_all(&args.results_dir).with_context(|| format!("creating {}", args.results_dir.display()))?;
    let stem = format!("{}-{}", date.replace(':', ""), file_safe(&w.name));
    let json_path = args.results_dir.join(format!("{stem}.json"));
    let csv_path = args.results_dir.join(format!("{stem}.csv"));
    fs::write(&json_path, results.to_json() + "\n").with_context(|| format!("writing {}", json_path.display()))?;
    let mut csv = Vec::new();
    results::write_csv(&results, &mut csv)?;
    fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    if args.json {
        println!("{}", results.to_json());
    } else if !args.quiet {
        print!("{}", table(&results));
    }
    if !args.quiet {
        for n in &notes {
            eprintln!("note: {n}");
        }
        eprintln!("wrote {} and {}", json_path.display(), csv_path.display());
    }
    Ok(())
}

fn check_supported(w: &Workload) -> anyhow::Result<()> {
    if !w.is_resolved() {
        bail!("the workload is a sweep ({} axes): `fetchbench run` takes one grid point", w.sweep.len());
    }
    if w.log_dir.is_some() {
        bail!("log_dir: not supported yet by `fetchbench run` (the backlog is generated)");
    }
    if w.payload_file.is_some() {
        bail!("payload_file: not supported yet by `fetchbench run`");
    }
    if w.client != Client::Native {
        bail!("client: only native is supported by `fetchbench run` so far");
    }
    if w.cpu_pinning != CpuPinning::None {
        bail!("cpu_pinning: not supported yet by `fetchbench run`");
    }
    if w.backlog_bytes < w.record_size {
        bail!("backlog: the catch_up phase needs a backlog of at least one record ({} bytes)", w.record_size);
    }
    Ok(())
}

/// The written backlog.
#[derive(Debug, Clone)]
struct Backlog {
    topics: Vec<String>,
    records: u64,
    disk_bytes: u64,
    segment_files: Vec<PathBuf>,
}

fn fill_backlog(w: &Workload, dir: &Path) -> anyhow::Result<Backlog> {
    let (mut logs, _) = LogManager::open(dir, LogConfig::default(), |_| None, false)?;
    let topics: Vec<String> = (0..w.topics).map(|t| format!("bench-{t}")).collect();
    let compression = match w.compression {
        workload::Compression::None => Compression::None,
        workload::Compression::Gzip => Compression::Gzip,
        workload::Compression::Snappy => Compression::Snappy,
        workload::Compression::Lz4 => Compression::Lz4,
        workload::Compression::Zstd => Compression::Zstd,
    };
    let total = w.backlog_bytes / w.record_size;
    let parts = w.partitions as usize;
    let per_batch = (BATCH_BYTES / (w.record_size + 20)).max(1) as usize;
    let mut value = vec![0u8; w.record_size as usize];
    for (i, b) in value.iter_mut().enumerate() {
        *b = (i % 251) as u8; // generated bytes, not all zero (compression stays honest)
    }
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    // Open batches, one per (topic, partition), flushed when full.
    let mut open: Vec<Option<BatchBuilder>> = (0..topics.len() * parts).map(|_| None).collect();
    for t in &topics {
        for p in 0..parts {
            logs.get_or_create(t, p as i32, None)?;
        }
    }
    let flush = |logs: &mut LogManager, slot: usize, b: BatchBuilder| -> anyhow::Result<()> {
        let bytes = b.build()?;
        let (t, p) = (slot / parts, slot % parts);
        let log = logs.log_mut(&topics[t], p as i32).expect("created above");
        log.append(&bytes, now_ms())?;
        Ok(())
    };
    for i in 0..total {
        let topic = (i % topics.len() as u64) as usize;
        let key: Option<Vec<u8>> = match w.key_distribution {
            KeyDistribution::None => None,
            KeyDistribution::Sequential => Some(i.to_string().into_bytes()),
            KeyDistribution::Random(k) => {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                Some((rng % k).to_string().into_bytes())
            }
        };
        let partition = match &key {
            // Null keys: spread evenly, as the sticky partitioner does over time.
            None => ((i / topics.len() as u64) % parts as u64) as usize,
            Some(k) => partition_for_key(k, parts as i32) as usize,
        };
        let slot = topic * parts + partition;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let n = value.len().min(8);
        value[..n].copy_from_slice(&(now.as_nanos() as u64).to_be_bytes()[..n]);
        let b = open[slot].get_or_insert_with(|| BatchBuilder::new(0, compression));
        b.append(now.as_millis() as i64, key.as_deref(), Some(&value), &[]);
        if b.len() >= per_batch {
            let b = open[slot].take().expect("just used");
            flush(&mut logs, slot, b)?;
        }
    }
    for (slot, b) in open.iter_mut().enumerate() {
        if let Some(b) = b.take() {
            flush(&mut logs, slot, b)?;
        }
    }
    let mut disk_bytes = 0;
    let mut segment_files = Vec::new();
    for (_, log) in logs.logs() {
        disk_bytes += log.size_in_bytes();
        for entry in fs::read_dir(log.dir())? {
            let p = entry?.path();
            if p.extension().is_some_and(|e| e == "log") {
                segment_files.push(p);
            }
        }
    }
    logs.shutdown()?;
    Ok(Backlog { topics, records: total, disk_bytes, segment_files })
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64
}

/// Resource use of a thread or the process at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    user: f64,
    sys: f64,
    minflt: f64,
    majflt: f64,
    csw: f64,
}

impl Usage {
    fn now(who: UsageWho) -> Usage {
        match getrusage(who) {
            Ok(u) => {
                let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
                Usage {
                    user: s(u.user_time()),
                    sys: s(u.system_time()),
                    minflt: u.minor_page_faults() as f64,
                    majflt: u.major_page_faults() as f64,
                    csw: (u.voluntary_context_switches() + u.involuntary_context_switches()) as f64,
                }
            }
            Err(_) => Usage::default(),
        }
    }

    fn minus(self, o: Usage) -> Usage {
        Usage {
            user: self.user - o.user,
            sys: self.sys - o.sys,
            minflt: self.minflt - o.minflt,
            majflt: self.majflt - o.majflt,
            csw: self.csw - o.csw,
        }
    }

    fn plus(self, o: Usage) -> Usage {
        Usage {
            user: self.user + o.user,
            sys: self.sys + o.sys,
            minflt: self.minflt + o.minflt,
            majflt: self.majflt + o.majflt,
            csw: self.csw + o.csw,
        }
    }
}

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
    /// Threads (members and the main thread) past the "sought to the start" point.
    ready: Gate,
    /// Threads past the "start snapshot taken" point.
    go: Gate,
    done_at: Mutex<Option<Instant>>,
}

fn catch_up(
    w: &Workload,
    kind: ReadPathKind,
    dir: &Path,
    backlog: &Backlog,
) -> anyhow::Result<(PathResult, Vec<String>)> {
    let mut notes = Vec::new();
    if w.page_cache == PageCache::Cold {
        for f in &backlog.segment_files {
            crate::read_path::measure::evict_from_page_cache(&File::open(f)?)?;
        }
    }
    let residency_before = residency(&backlog.segment_files);
    let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), dir, kind);
    config.group_initial_rebalance_delay_ms = 0;
    let broker = Broker::start(config)?;
    let addr = broker.local_addr().to_string();
    let groups = w.consumer_groups as usize;
    let per_group = w.consumers_per_group as usize;
    let members = groups * per_group;
    let partitions_total = backlog.topics.len() * w.partitions as usize;
    let shared = Arc::new(Shared {
        consumed: AtomicU64::new(0),
        target: backlog.records * groups as u64,
        members: Mutex::new(vec![(usize::MAX, -1, 0); members]),
        stable: AtomicUsize::new(0),
        groups,
        boundary: AtomicBool::new(false),
        failed: AtomicBool::new(false),
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
        cc.group_id = Some(format!("fetchbench-run-{}-{group}", kind.name()));
        cc.client_id = format!("fetchbench-run-{m}");
        let topics = backlog.topics.clone();
        let sh = shared.clone();
        let t = std::thread::Builder::new().name(format!("bench-consumer-{m}")).spawn(move || {
            let r = member(m, group, per_group, partitions_total, cc, &topics, &sh);
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
        return Err(join_error(threads, broker, e));
    }
    // Every member has sought to the start: measure from here.
    if let Err(e) = shared.ready.wait(&shared.failed) {
        return Err(join_error(threads, broker, e));
    }
    let proc_start = Usage::now(UsageWho::RUSAGE_SELF);
    let start = Instant::now();
    if let Err(e) = shared.go.wait(&shared.failed) {
        return Err(join_error(threads, broker, e));
    }
    let mut boundary: Option<(Instant, Usage, u64)> = None;
    loop {
        if shared.consumed.load(Ordering::SeqCst) >= shared.target || shared.failed.load(Ordering::SeqCst) {
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
        }
        std::thread::sleep(Duration::from_millis(1));
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
    broker.shutdown()?;
    if let Some(e) = error {
        return Err(e);
    }
    if shared.consumed.load(Ordering::SeqCst) < shared.target {
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
    let records = shared.target - records0;
    let bytes = (backlog.disk_bytes as f64 * groups as f64 * records as f64 / shared.target as f64) as u64;
    let gb = (bytes as f64 / 1e9).max(1e-12);
    let process = proc_end.minus(proc0);
    let brk = process.minus(consumer);
    let per_gb = |x: f64| (x / gb).max(0.0);
    let empty = LatencyResult::of(&Latency::new());
    let result = PathResult {
        read_path: kind.name().to_string(),
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
        broker_rss_bytes: 0,
        fetch_latency: LatencyResult::of(&polls),
        end_to_end_latency: EndToEnd { raw: empty.clone(), corrected: empty },
        rebalance_ms: Some(rebalance_ms),
    };
    Ok((result, notes))
}

fn join_error(
    threads: Vec<std::thread::JoinHandle<anyhow::Result<MemberReport>>>,
    broker: crate::broker::BrokerHandle,
    e: anyhow::Error,
) -> anyhow::Error {
    let mut first = None;
    for t in threads {
        if let Ok(Err(te)) = t.join() {
            first = first.or(Some(te));
        }
    }
    let _ = broker.shutdown();
    match first {
        // The thread's own error is the cause; `e` only says the run stopped.
        Some(te) => te,
        None => e,
    }
}

/// One consumer thread: join, wait for its group to be stable, seek to the start, drain.
fn member(
    m: usize,
    group: usize,
    per_group: usize,
    partitions_total: usize,
    config: ConsumerConfig,
    topics: &[String],
    sh: &Shared,
) -> anyhow::Result<MemberReport> {
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
    while sh.consumed.load(Ordering::SeqCst) < sh.target && !sh.failed.load(Ordering::SeqCst) {
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
                let expected = next.entry((r.topic.clone(), r.partition)).or_insert(0);
                if r.offset != *expected {
                    bail!("{}-{}: offset {} delivered where {} was expected", r.topic, r.partition, r.offset, expected);
                }
                *expected += 1;
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

fn residency(files: &[PathBuf]) -> f64 {
    let (mut resident, mut total) = (0.0, 0.0);
    for f in files {
        let Ok(file) = File::open(f) else { continue };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0) as f64;
        if let Ok(r) = crate::read_path::measure::resident_fraction(&file) {
            resident += r * len;
            total += len;
        }
    }
    if total > 0.0 {
        (resident / total).clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// The results as a table: read path, MB/s, records/s, broker CPU s/GB (user+sys), fetch
/// p50/p99/p99.9 (us) and rebalance ms.
pub fn table(r: &Results) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let header =
        ["read path", "MB/s", "records/s", "broker CPU s/GB", "fetch p50 us", "p99 us", "p99.9 us", "rebalance ms"];
    let mut rows = vec![header.map(String::from).to_vec()];
    for p in &r.paths {
        let f = &p.fetch_latency.summary;
        rows.push(vec![
            format!("{} ({})", p.read_path, p.phase),
            format!("{:.1}", p.mb_per_sec),
            format!("{:.0}", p.records_per_sec),
            format!("{:.3}", p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb),
            format!("{:.0}", f.p50_us),
            format!("{:.0}", f.p99_us),
            format!("{:.0}", f.p999_us),
            p.rebalance_ms.map_or("-".into(), |x| format!("{x:.0}")),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| if i == 0 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `t`.
pub fn utc_timestamp(t: SystemTime) -> String {
    crate::read_path::report::utc_date(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

fn file_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> io::Result<TempDir> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let p = std::env::temp_dir().join(format!("fetchbench-run-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(1_796_027_883)), "2026-11-30T08:38:03Z");
    }
}
