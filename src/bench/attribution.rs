//! Bottleneck attribution: what limited each measured interval's figures.
//!
//! A [`Sampler`] runs beside every measured interval (catch-up, tail, mixed, kcat): started
//! right before the interval's clock starts ([`Sampler::start`], which takes the first
//! snapshot on the caller's thread), stopped where the clock stops ([`Sampler::finish`], the
//! last snapshot, again on the caller's thread), and in between a thread
//! (`bench-attribution`) takes a snapshot every [`SAMPLE_INTERVAL`]. A snapshot is:
//!
//! - `/proc/stat`, per CPU: user, nice, system, idle, iowait, irq, softirq, steal (clock
//!   ticks; the `guest` columns are already inside user and are not added again),
//!   [`parse_proc_stat`];
//! - this process's CPU (`getrusage`) and its client threads' ([`super::usage::threads_usage`]
//!   over [`super::usage::CLIENT_THREADS`]: `bench-consumer-*`, `heartbeat-*`, `bench-producer*`
//!   and the producers' `fetchbench-producer` senders); the broker's threads are the rest
//!   (`fetchbench-net*`, `fetchbench-core-*`, the coordinators, purgatory, io pools, `iou-wrk`
//!   workers, the phase's own coordinating thread and this sampler, which sleeps);
//! - the phase's delivered-bytes counter (an `Arc<AtomicU64>` the consumers add to).
//!
//! Consecutive snapshots give the per-interval samples ([`AttributionSample`]: t, MB/s, each
//! role's busy fraction, steal); the first and last the whole interval's figures
//! ([`Attribution`]). The samples' MB/s are scaled so that they add up to the entry's `bytes`
//! (the counters count first deliveries or value bytes; the entry's bytes are record-batch
//! bytes): their shape is the counter's, their scale the entry's.
//!
//! ## Roles and CPUs
//!
//! - `pinned`: the broker's threads and the clients' on disjoint CPUs (`cpu_pinning`, `auto`
//!   on this 2-core machine: broker on CPU 0, clients on CPU 1; see [`super::run`]). The
//!   broker's CPUs are read from its threads' affinity (`Cpus_allowed_list`; they inherit the
//!   mask the run set when it started the broker), the clients' from
//!   [`super::catch_up::Target::pin_clients`]. A role's busy fraction is the non-idle,
//!   non-iowait share of its CPUs' ticks, steal included (a stolen tick was not available
//!   either). Whatever else runs on those CPUs (another process) counts as busy: the role
//!   could not have had that time; `broker_threads_cpus` / `client_threads_cpus` (the
//!   threads' own CPU-seconds per second) show how much of it was ours.
//! - `shared`: no pinning, or CPUs that overlap. Per-CPU figures cannot tell the roles apart,
//!   so each role's busy fraction is its threads' CPU seconds over the shared CPUs' time;
//!   saturation is judged on all of the shared CPUs (`cpus_busy`), and given to the role that
//!   used more of them. A note says so.
//! - `external` (`run --bootstrap`, [`super::remote`]): only the clients' CPUs are here; the
//!   broker's busy fraction comes from its metrics endpoint (its process CPU over the
//!   interval, over its machine's CPUs) when there is one, else it is not known (`null`) and
//!   the broker cannot be named. A note says so.
//!
//! ## Loopback and softirq
//!
//! Over loopback, the receive side of TCP (the softirq that queues the segment on the
//! receiving socket, the ACKs) runs on the CPU that sent the segment: the broker's CPU for
//! fetched data, the clients' for requests. That time is the receiver's work, but it occupies
//! the sender's CPU, so it is counted where it ran: a role's busy fraction includes its CPUs'
//! softirq, and the split (`user`/`system`/`softirq`/`irq`/`iowait`/`steal`) is kept per role.
//! When the broker's CPUs are saturated and softirq is at least [`SOFTIRQ_DOMINANT`] of their
//! busy time, the entry is still `broker_cpu` (those CPUs were the limit) but its reason says
//! the broker's CPU was busy mostly in softirq: the loopback network stack, not the read path
//! (the copy into the consumer's buffer itself runs in the consumer's `recvmsg`, on the
//! clients' CPU). In the `shared` method the kernel charges softirq time to whichever thread
//! it interrupted (or to no thread at all with `CONFIG_IRQ_TIME_ACCOUNTING`), so it may land
//! on either role or on none.
//!
//! ## Classification ([`classify`], [`BoundBy`])
//!
//! In this order: a rate-limited `tail` whose consumers received at least
//! [`KEPT_UP`] of the records due is `producer_rate`; throughput at least
//! [`NETWORK_FRACTION`] of the measured loopback TCP limit (iperf3, [`super::limits`]) is
//! `network`; a role whose CPUs were at least [`SATURATED`] busy is `broker_cpu` or
//! `client_cpu` (both: the busier one, both figures in the reason); a cold page cache
//! (`page_cache = "cold"` or under half of the backlog resident before) with the broker's CPUs
//! at least [`DISK_IOWAIT`] in iowait, or throughput at [`NETWORK_FRACTION`] of the fio
//! O_DIRECT limit, is `disk`; else `none`. A `client_cpu` entry always carries its warning
//! ([`warning`]) in the table, the notes and the report: it measures the consumers, not the
//! read path.
//!
//! ## Steal
//!
//! Steal is recorded over the whole interval and per sample; above [`STEAL_FLAG`] of the CPU
//! time (the interval's or one sample's) the entry is flagged (`steal_flagged`) and a note
//! says so: the hypervisor took CPU the figures assume was there.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::resource::UsageWho;

use super::results::{
    combination_label, Attribution, AttributionSample, BoundBy, CpuSplit, LimitsResult, PathResult, ThroughputSummary,
};
use super::usage::{allowed_cpus, threads_usage, Usage, CLIENT_THREADS};

/// How often the sampler takes a snapshot between the interval's start and end.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A role's CPUs are saturated at this busy fraction (90%): a little below 1 because the
/// clock ticks are coarse and the phase's coordination sleeps in short steps.
pub const SATURATED: f64 = 0.90;

/// Throughput at this fraction (90%) of a measured limit (iperf3 loopback, fio O_DIRECT) is
/// bound by that limit.
pub const NETWORK_FRACTION: f64 = 0.90;

/// Steal above this fraction (2%) of the CPU time flags the entry.
pub const STEAL_FLAG: f64 = 0.02;

/// A saturated broker CPU whose busy time is at least this fraction (50%) softirq is named as
/// busy in softirq (the loopback network stack).
pub const SOFTIRQ_DOMINANT: f64 = 0.5;

/// A cold-cache interval with at least this fraction (10%) of the broker CPUs' time in iowait
/// is bound by the disk.
pub const DISK_IOWAIT: f64 = 0.10;

/// A rate-limited tail whose consumers received at least this fraction (95%) of the records
/// due kept up with its rate.
pub const KEPT_UP: f64 = 0.95;

/// One CPU's counters from `/proc/stat`, clock ticks since boot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Every tick (guest time is inside user already).
    fn total(&self) -> u64 {
        self.user + self.nice + self.system + self.idle + self.iowait + self.irq + self.softirq + self.steal
    }

    /// `self - o`, field by field (0 where a counter went backwards: a CPU brought offline).
    fn minus(&self, o: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(o.user),
            nice: self.nice.saturating_sub(o.nice),
            system: self.system.saturating_sub(o.system),
            idle: self.idle.saturating_sub(o.idle),
            iowait: self.iowait.saturating_sub(o.iowait),
            irq: self.irq.saturating_sub(o.irq),
            softirq: self.softirq.saturating_sub(o.softirq),
            steal: self.steal.saturating_sub(o.steal),
        }
    }

    fn plus(&self, o: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user + o.user,
            nice: self.nice + o.nice,
            system: self.system + o.system,
            idle: self.idle + o.idle,
            iowait: self.iowait + o.iowait,
            irq: self.irq + o.irq,
            softirq: self.softirq + o.softirq,
            steal: self.steal + o.steal,
        }
    }

    /// Busy fraction: everything but idle and iowait (steal included), 0 for no ticks.
    fn busy(&self) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        (total - self.idle - self.iowait) as f64 / total as f64
    }

    /// Steal over all ticks.
    fn steal_fraction(&self) -> f64 {
        frac(self.steal, self.total())
    }

    /// The split of the ticks.
    fn split(&self) -> CpuSplit {
        let t = self.total();
        CpuSplit {
            user: frac(self.user + self.nice, t),
            system: frac(self.system, t),
            softirq: frac(self.softirq, t),
            irq: frac(self.irq, t),
            iowait: frac(self.iowait, t),
            steal: frac(self.steal, t),
        }
    }
}

fn frac(x: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        x as f64 / total as f64
    }
}

/// The per-CPU lines (`cpuN user nice system idle iowait irq softirq steal [guest
/// guest_nice]`) of a `/proc/stat` text, by CPU number; the aggregate `cpu` line and other
/// lines are skipped, missing trailing columns (old kernels) read as 0, unparsable lines are
/// skipped.
pub(crate) fn parse_proc_stat(text: &str) -> BTreeMap<usize, CpuTimes> {
    let mut cpus = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(Ok(n)) = name.strip_prefix("cpu").filter(|s| !s.is_empty()).map(str::parse::<usize>) else {
            continue;
        };
        let values: Result<Vec<u64>, _> = fields.take(8).map(str::parse::<u64>).collect();
        let Ok(v) = values else { continue };
        if v.len() < 4 {
            continue;
        }
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        cpus.insert(
            n,
            CpuTimes {
                user: at(0),
                nice: at(1),
                system: at(2),
                idle: at(3),
                iowait: at(4),
                irq: at(5),
                softirq: at(6),
                steal: at(7),
            },
        );
    }
    cpus
}

/// The CPUs in a list such as `Cpus_allowed_list`: `0-3,6,8-9`.
pub(crate) fn parse_cpu_list(s: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    cpus.extend(a..=b);
                }
            }
            None => cpus.extend(part.parse::<usize>().ok()),
        }
    }
    cpus
}

/// The CPUs the broker's threads (named `fetchbench-*`, not the producers' `fetchbench-prod*`)
/// of this process may run on, ascending; empty when there are none (an external broker).
fn broker_thread_cpus() -> Vec<usize> {
    let mut cpus = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return cpus };
    for task in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else { continue };
        let comm = comm.trim_end();
        if !comm.starts_with("fetchbench-") || comm.starts_with("fetchbench-prod") {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        if let Some(list) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            cpus.extend(parse_cpu_list(list));
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// How the roles are told apart (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Roles {
    /// `pinned`, `shared` or `external`.
    pub method: &'static str,
    /// The broker's CPUs (`pinned` only).
    pub broker_cpus: Vec<usize>,
    /// The clients' CPUs; for `shared` every CPU the process may use.
    pub client_cpus: Vec<usize>,
}

impl Roles {
    /// The roles of a phase whose clients are pinned to `pin_clients` (if any), against the
    /// embedded broker (`embedded`) or an external one.
    pub(crate) fn of(pin_clients: Option<&[usize]>, embedded: bool) -> Roles {
        let allowed = allowed_cpus();
        if !embedded {
            return Roles {
                method: "external",
                broker_cpus: Vec::new(),
                client_cpus: pin_clients.map_or(allowed, <[usize]>::to_vec),
            };
        }
        let broker = broker_thread_cpus();
        match pin_clients {
            Some(c) if !broker.is_empty() && !c.is_empty() && !c.iter().any(|x| broker.contains(x)) => {
                Roles { method: "pinned", broker_cpus: broker, client_cpus: c.to_vec() }
            }
            _ => Roles { method: "shared", broker_cpus: Vec::new(), client_cpus: allowed },
        }
    }

    /// Every CPU the roles ran on.
    fn all_cpus(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.broker_cpus.iter().chain(&self.client_cpus).copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// One snapshot (see the [module docs](self)).
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub at: Instant,
    pub cpus: BTreeMap<usize, CpuTimes>,
    /// This process's CPU seconds (user + system).
    pub process_s: f64,
    /// Its client threads' CPU seconds.
    pub clients_s: f64,
    /// The delivered-bytes counter.
    pub bytes: u64,
}

impl Snapshot {
    fn take(delivered: &AtomicU64) -> Snapshot {
        let cpus = std::fs::read_to_string("/proc/stat").map(|s| parse_proc_stat(&s)).unwrap_or_default();
        let process = Usage::now(UsageWho::RUSAGE_SELF);
        let clients = threads_usage(&CLIENT_THREADS);
        Snapshot {
            at: Instant::now(),
            cpus,
            process_s: process.user + process.sys,
            clients_s: clients.user + clients.sys,
            bytes: delivered.load(Ordering::Relaxed),
        }
    }
}

/// The sum of `cpus`' counters in `b` minus those in `a`.
fn delta(a: &Snapshot, b: &Snapshot, cpus: &[usize]) -> CpuTimes {
    cpus.iter().fold(CpuTimes::default(), |acc, c| match (a.cpus.get(c), b.cpus.get(c)) {
        (Some(x), Some(y)) => acc.plus(&y.minus(x)),
        _ => acc,
    })
}

/// What one interval between two snapshots shows.
struct Span {
    seconds: f64,
    bytes: u64,
    broker_busy: Option<f64>,
    client_busy: f64,
    cpus_busy: f64,
    steal: f64,
    broker: CpuTimes,
    client: CpuTimes,
    broker_threads_cpus: Option<f64>,
    client_threads_cpus: f64,
}

fn span(roles: &Roles, a: &Snapshot, b: &Snapshot) -> Span {
    let seconds = b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-9);
    let all = delta(a, b, &roles.all_cpus());
    let (broker, client) = (delta(a, b, &roles.broker_cpus), delta(a, b, &roles.client_cpus));
    let clients_s = (b.clients_s - a.clients_s).max(0.0);
    let broker_s = ((b.process_s - a.process_s) - clients_s).max(0.0);
    let n = roles.client_cpus.len().max(1) as f64;
    let (broker_busy, client_busy) = match roles.method {
        "pinned" => (Some(broker.busy()), client.busy()),
        "shared" => (Some((broker_s / seconds / n).min(1.0)), (clients_s / seconds / n).min(1.0)),
        _ => (None, client.busy()),
    };
    Span {
        seconds,
        bytes: b.bytes.saturating_sub(a.bytes),
        broker_busy,
        client_busy,
        cpus_busy: all.busy(),
        steal: all.steal_fraction(),
        broker,
        client,
        broker_threads_cpus: (roles.method != "external").then_some(broker_s / seconds),
        client_threads_cpus: clients_s / seconds,
    }
}

/// A running sampler (see the [module docs](self)).
pub(crate) struct Sampler {
    roles: Roles,
    delivered: Arc<AtomicU64>,
    first: Snapshot,
    stop: mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<Vec<Snapshot>>>,
}

impl Sampler {
    /// Takes the start snapshot now and starts the sampling thread. `delivered` is the
    /// phase's delivered-bytes counter (any unit that grows with the bytes delivered: samples
    /// are scaled to the entry's bytes by [`Sampled::into_attribution`]).
    pub(crate) fn start(roles: Roles, delivered: Arc<AtomicU64>) -> Sampler {
        let first = Snapshot::take(&delivered);
        let (stop, stopped) = mpsc::channel::<()>();
        let counter = delivered.clone();
        let thread = std::thread::Builder::new()
            .name("bench-attribution".into())
            .spawn(move || {
                let mut snapshots = Vec::new();
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(SAMPLE_INTERVAL) {
                    snapshots.push(Snapshot::take(&counter));
                }
                snapshots
            })
            .ok();
        Sampler { roles, delivered, first, stop, thread }
    }

    /// Stops the thread and takes the end snapshot now: the samples of the interval.
    pub(crate) fn finish(mut self) -> Sampled {
        let _ = self.stop.send(());
        let mut snapshots = vec![self.first.clone()];
        if let Some(t) = self.thread.take() {
            snapshots.extend(t.join().unwrap_or_default());
        }
        snapshots.push(Snapshot::take(&self.delivered));
        Sampled { roles: self.roles.clone(), snapshots }
    }
}

impl Drop for Sampler {
    /// A sampler dropped unfinished (a phase's error path) stops its thread.
    fn drop(&mut self) {
        let _ = self.stop.send(());
    }
}

/// The snapshots of one measured interval, before they are put into the entry.
pub(crate) struct Sampled {
    pub roles: Roles,
    pub snapshots: Vec<Snapshot>,
}

impl Sampled {
    /// The entry's [`Attribution`] (`reason` empty, `network_fraction` `null`: both set by
    /// [`attribute`] once the limits are known), its samples' MB/s scaled so that they add up
    /// to `bytes`.
    pub(crate) fn into_attribution(self, bytes: u64) -> Attribution {
        let r = &self.roles;
        let s = &self.snapshots;
        let counted: u64 = s.last().map_or(0, |l| l.bytes.saturating_sub(s[0].bytes));
        let scale = if counted > 0 { bytes as f64 / counted as f64 } else { 0.0 };
        let mut samples = Vec::new();
        let mut t = 0.0;
        for w in s.windows(2) {
            let sp = span(r, &w[0], &w[1]);
            t += sp.seconds;
            samples.push(AttributionSample {
                t_s: t,
                seconds: sp.seconds,
                mb_per_sec: sp.bytes as f64 * scale / 1e6 / sp.seconds,
                broker_busy: sp.broker_busy,
                client_busy: sp.client_busy,
                steal: sp.steal,
            });
        }
        // A counter that did not move (no bytes yet, an external tail): spread evenly.
        if counted == 0 && t > 0.0 {
            for x in &mut samples {
                x.mb_per_sec = bytes as f64 / 1e6 / t;
            }
        }
        let whole = span(r, &s[0], &s[s.len() - 1]);
        let steal_max = samples.iter().map(|x| x.steal).fold(whole.steal, f64::max);
        Attribution {
            method: r.method.to_string(),
            broker_cpus: r.broker_cpus.iter().map(|&c| c as u64).collect(),
            client_cpus: r.client_cpus.iter().map(|&c| c as u64).collect(),
            broker_busy: whole.broker_busy,
            client_busy: whole.client_busy,
            cpus_busy: whole.cpus_busy,
            broker_split: (r.method == "pinned").then(|| whole.broker.split()),
            client_split: whole.client.split(),
            broker_threads_cpus: whole.broker_threads_cpus,
            client_threads_cpus: whole.client_threads_cpus,
            steal: whole.steal,
            steal_max,
            steal_flagged: steal_max > STEAL_FLAG,
            network_fraction: None,
            reason: String::new(),
            summary: summarize(&samples),
            samples,
        }
    }
}

/// The per-sample MB/s summarised (see [`ThroughputSummary`]): over the samples at least half
/// a [`SAMPLE_INTERVAL`] long, all of them when none is.
pub(crate) fn summarize(samples: &[AttributionSample]) -> ThroughputSummary {
    ThroughputSummary::of(samples, SAMPLE_INTERVAL.as_secs_f64() / 2.0)
}

/// What [`classify`] needs of an entry and its run besides the [`Attribution`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Figures {
    /// `catch_up`, `tail` or `mixed`.
    pub phase: String,
    pub mb_per_sec: f64,
    pub seconds: f64,
    /// Records delivered (all groups).
    pub records: u64,
    /// Consumer groups (each receives every record).
    pub groups: u64,
    /// The producers' rate, records/s (`None`: unlimited).
    pub rate_records_per_sec: Option<f64>,
    /// A cold page cache (`page_cache = "cold"`, or under half the backlog resident before).
    pub cold: bool,
    /// The loopback TCP limit (iperf3), bytes/s.
    pub network_limit: Option<f64>,
    /// The fio O_DIRECT limit, bytes/s.
    pub disk_limit: Option<f64>,
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// What limited an interval, with the reason (see the [module docs](self) for the rules).
pub(crate) fn classify(f: &Figures, a: &Attribution) -> (BoundBy, String) {
    let broker = a.broker_busy;
    let client = a.client_busy;
    let shown = |b: Option<f64>| b.map_or("not measured".to_string(), pct);
    let busy = format!("clients {} busy, broker {}", pct(client), shown(broker));
    if f.phase == "tail" {
        if let Some(rate) = f.rate_records_per_sec.filter(|r| *r > 0.0) {
            let due = rate * f.seconds * f.groups.max(1) as f64;
            if f.records as f64 >= KEPT_UP * due {
                return (
                    BoundBy::ProducerRate,
                    format!(
                        "the consumers received {:.0}% of the records due at the producers' rate ({busy})",
                        100.0 * f.records as f64 / due.max(1e-9)
                    ),
                );
            }
        }
    }
    if let Some(limit) = f.network_limit.filter(|l| *l > 0.0) {
        let r = f.mb_per_sec * 1e6 / limit;
        if r >= NETWORK_FRACTION {
            return (BoundBy::Network, format!("{} of the loopback TCP limit ({busy})", pct(r)));
        }
    }
    let (sat_b, sat_c) = match a.method.as_str() {
        // Shared CPUs: saturation of all of them, given to the role that used more.
        "shared" => {
            let sat = a.cpus_busy >= SATURATED;
            let b = broker.unwrap_or(0.0);
            (sat && b >= client, sat && client > b)
        }
        _ => (broker.is_some_and(|b| b >= SATURATED), client >= SATURATED),
    };
    let shared_note = if a.method == "shared" {
        format!(" (CPUs shared, {} busy: attributed from the threads' CPU seconds)", pct(a.cpus_busy))
    } else {
        String::new()
    };
    let broker_wins = match (sat_b, sat_c) {
        (true, true) => broker.unwrap_or(0.0) >= client,
        (b, _) => b,
    };
    if sat_b || sat_c {
        let both = if sat_b && sat_c { "both saturated, " } else { "" };
        if broker_wins {
            let softirq = a.broker_split.as_ref().filter(|s| {
                let busy = s.user + s.system + s.softirq + s.irq + s.steal;
                busy > 0.0 && s.softirq / busy >= SOFTIRQ_DOMINANT
            });
            let what = match softirq {
                Some(s) => format!(
                    "; busy mostly in softirq ({} of its time: the loopback TCP stack, partly the receivers' work)",
                    pct(s.softirq)
                ),
                None => String::new(),
            };
            return (BoundBy::BrokerCpu, format!("the broker's CPU saturated ({both}{busy}){shared_note}{what}"));
        }
        return (BoundBy::ClientCpu, format!("the clients' CPU saturated ({both}{busy}){shared_note}"));
    }
    if f.cold {
        let iowait = a.broker_split.as_ref().map_or(a.client_split.iowait, |s| s.iowait);
        let at_limit = f.disk_limit.filter(|l| *l > 0.0).map(|l| f.mb_per_sec * 1e6 / l);
        if iowait >= DISK_IOWAIT || at_limit.is_some_and(|r| r >= NETWORK_FRACTION) {
            return (
                BoundBy::Disk,
                format!(
                    "cold page cache: {} iowait{} ({busy})",
                    pct(iowait),
                    at_limit.map_or(String::new(), |r| format!(", {} of the fio O_DIRECT limit", pct(r)))
                ),
            );
        }
    }
    (BoundBy::Nothing, format!("nothing saturated ({busy}){shared_note}"))
}

pub use super::results::warning;

/// A figure of an entry as it is printed, with the warning it must carry ([`warning`]): the
/// only way the table, chart and report render `mb_per_sec`.
#[derive(Clone, Debug, PartialEq)]
pub struct Shown {
    /// The figure, with ` !` after it when there is a warning.
    pub text: String,
    /// What limited it (`bound_by`, `-` when not measured) with the broker's and the clients'
    /// busy fractions (`client_cpu b61%/c97%`; `?` for a broker not measured), ` !` after a
    /// warned one and ` (steal)` after a steal-flagged one.
    pub bound: String,
    /// The warning, to print beside the figure (a footnote, a note, a banner).
    pub warning: Option<String>,
}

/// `p`'s MB/s (`decimals` digits) with its bound and warning (see [`Shown`]); `qualified`
/// names the combination `model/path` ([`combination_label`]).
pub fn show_mb_per_sec(p: &PathResult, decimals: usize, qualified: bool) -> Shown {
    let label = combination_label(p.server_model.as_deref(), &p.read_path, qualified);
    let warning = warning(p, &label);
    let mark = if warning.is_some() { " !" } else { "" };
    let a = p.attribution.as_ref();
    let steal = if a.is_some_and(|a| a.steal_flagged) { " (steal)" } else { "" };
    // The utilisations that show it: broker and clients busy.
    let busy = match (p.bound_by, a) {
        (Some(_), Some(a)) => {
            format!(" b{}/c{}", a.broker_busy.map_or("?".into(), pct), pct(a.client_busy))
        }
        _ => String::new(),
    };
    Shown {
        text: format!("{:.decimals$}{mark}", p.mb_per_sec),
        bound: format!("{}{busy}{mark}{steal}", p.bound_by.map_or("-", BoundBy::name)),
        warning,
    }
}

/// Decides `bound_by` of every entry of a run that has an attribution (limits known now),
/// sets its `network_fraction` and `reason`, and returns the notes: each client-bound entry's
/// warning, each steal-flagged entry, and the method of a run whose CPUs were shared or
/// external (once). `cold`: the run's page cache was cold; `broker_nproc`: the external
/// broker's CPUs (its machine record), for its busy fraction from the endpoint's CPU seconds.
pub(crate) fn attribute(
    paths: &mut [PathResult],
    limits: &LimitsResult,
    w: &super::workload::Workload,
    cold: bool,
    broker_nproc: Option<u64>,
    qualified: bool,
) -> Vec<String> {
    let limit = |key: &str| limits.figures.iter().find(|f| f.key == key).and_then(|f| f.bytes_per_sec);
    let mut notes = Vec::new();
    let mut methods: Vec<String> = Vec::new();
    for p in paths.iter_mut() {
        let Some(mut a) = p.attribution.take() else { continue };
        if a.method == "external" && a.broker_busy.is_none() {
            // The endpoint's process CPU, if any, over the broker machine's CPUs.
            let cpu_s = (p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb) * p.bytes as f64 / 1e9;
            if let Some(n) = broker_nproc.filter(|n| *n > 0 && cpu_s > 0.0) {
                a.broker_busy = Some((cpu_s / p.seconds.max(1e-9) / n as f64).min(1.0));
            }
        }
        let f = Figures {
            phase: p.phase.clone(),
            mb_per_sec: p.mb_per_sec,
            seconds: p.seconds,
            records: p.records,
            groups: u64::from(w.consumer_groups),
            rate_records_per_sec: w.rate.records_per_sec(w.record_size),
            cold: cold || p.residency_before < 0.5,
            network_limit: limit("iperf3_loopback"),
            disk_limit: limit("fio_direct"),
        };
        a.network_fraction = f.network_limit.filter(|l| *l > 0.0).map(|l| p.mb_per_sec * 1e6 / l);
        let (bound, reason) = classify(&f, &a);
        a.reason = reason;
        let label = combination_label(p.server_model.as_deref(), &p.read_path, qualified);
        if a.steal_flagged {
            notes.push(format!(
                "steal: {label} {}: {} of the CPU time stolen by the hypervisor (worst sample {}, above {}): its \
                 figures had less CPU than they assume",
                p.phase,
                pct(a.steal),
                pct(a.steal_max),
                pct(STEAL_FLAG)
            ));
        }
        if !methods.contains(&a.method) {
            methods.push(a.method.clone());
        }
        p.bound_by = Some(bound);
        p.attribution = Some(a);
        notes.extend(warning(p, &label));
    }
    for m in methods {
        match m.as_str() {
            "shared" => notes.push(
                "bound by: the broker and the clients shared CPUs (no or overlapping cpu_pinning): attributed from \
                 the threads' CPU seconds, saturation judged over all the shared CPUs"
                    .into(),
            ),
            "external" => notes.push(
                "bound by: only the clients' CPUs are on this machine (external broker); the broker's busy fraction \
                 is its metrics endpoint's process CPU over its machine's CPUs, not measured without --metrics"
                    .into(),
            ),
            _ => {}
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real lines of a 2-CPU VM (kernel 6.x: ten columns, steal and guest included).
    const STAT: &str = "cpu  2255 34 2290 22625563 6290 127 456 17 0 0
cpu0 1132 34 1441 11311718 3675 127 438 9 5 0
cpu1 1123 0 849 11313845 2615 0 18 8 0 0
intr 114930548 113199788 3 0 5 263 0 4 [... 50 more fields]
ctxt 1990473
btime 1062191376
processes 2915
procs_running 1
procs_blocked 0
softirq 183433 0 21755 12 39 1137 231 21459 2263
";

    #[test]
    fn proc_stat_lines_parse_per_cpu_with_steal_and_guest_ignored() {
        let cpus = parse_proc_stat(STAT);
        assert_eq!(cpus.len(), 2, "the aggregate cpu line and the softirq line are not CPUs");
        let c0 = cpus[&0];
        assert_eq!(
            c0,
            CpuTimes {
                user: 1132,
                nice: 34,
                system: 1441,
                idle: 11311718,
                iowait: 3675,
                irq: 127,
                softirq: 438,
                steal: 9
            }
        );
        // guest (5) is inside user already: not in the total.
        assert_eq!(c0.total(), 1132 + 34 + 1441 + 11311718 + 3675 + 127 + 438 + 9);
        assert_eq!(cpus[&1].steal, 8);
        // An old kernel's four columns; a line that does not parse is skipped.
        let old = parse_proc_stat("cpu3 1 2 3 4\ncpu4 x y z w\n");
        assert_eq!(old[&3], CpuTimes { user: 1, nice: 2, system: 3, idle: 4, ..CpuTimes::default() });
        assert!(!old.contains_key(&4));
    }

    #[test]
    fn busy_counts_steal_but_not_idle_or_iowait() {
        let a = CpuTimes { user: 50, system: 20, softirq: 10, steal: 10, idle: 5, iowait: 5, ..Default::default() };
        assert!((a.busy() - 0.9).abs() < 1e-12);
        assert!((a.steal_fraction() - 0.1).abs() < 1e-12);
        let s = a.split();
        assert!((s.user - 0.5).abs() < 1e-12 && (s.softirq - 0.1).abs() < 1e-12 && (s.iowait - 0.05).abs() < 1e-12);
        assert_eq!(CpuTimes::default().busy(), 0.0);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-2,5, 7-8\n"), vec![0, 1, 2, 5, 7, 8]);
        assert_eq!(parse_cpu_list("1"), vec![1]);
        assert!(parse_cpu_list("").is_empty());
    }

    fn sample(seconds: f64, mb: f64) -> AttributionSample {
        AttributionSample { t_s: 0.0, seconds, mb_per_sec: mb, broker_busy: None, client_busy: 0.0, steal: 0.0 }
    }

    #[test]
    fn summary_is_median_min_max_and_cv_of_the_full_samples() {
        let s = summarize(&[sample(1.0, 100.0), sample(1.0, 300.0), sample(1.0, 200.0), sample(0.2, 5000.0)]);
        assert_eq!(s.samples, 3, "the 0.2 s tail sample is left out");
        assert_eq!((s.median_mb_per_sec, s.min_mb_per_sec, s.max_mb_per_sec), (200.0, 100.0, 300.0));
        assert!((s.cv.unwrap() - 0.5).abs() < 1e-12, "stddev 100 over mean 200");
        let even = summarize(&[sample(1.0, 100.0), sample(1.0, 200.0)]);
        assert_eq!(even.median_mb_per_sec, 150.0);
        let one = summarize(&[sample(0.3, 42.0)]);
        assert_eq!((one.samples, one.median_mb_per_sec, one.cv), (1, 42.0, None), "all short: all of them");
        assert_eq!(summarize(&[]), ThroughputSummary::default());
    }

    fn attribution(method: &str, broker: Option<f64>, client: f64) -> Attribution {
        Attribution {
            method: method.into(),
            broker_cpus: vec![0],
            client_cpus: vec![1],
            broker_busy: broker,
            client_busy: client,
            cpus_busy: (broker.unwrap_or(0.0) + client) / 2.0,
            broker_split: Some(CpuSplit { user: 0.3, system: broker.unwrap_or(0.0) - 0.3, ..Default::default() }),
            client_split: CpuSplit::default(),
            broker_threads_cpus: broker,
            client_threads_cpus: client,
            steal: 0.0,
            steal_max: 0.0,
            steal_flagged: false,
            network_fraction: None,
            reason: String::new(),
            samples: Vec::new(),
            summary: ThroughputSummary::default(),
        }
    }

    fn catch_up(mb: f64) -> Figures {
        Figures {
            phase: "catch_up".into(),
            mb_per_sec: mb,
            seconds: 10.0,
            records: 1000,
            groups: 1,
            ..Default::default()
        }
    }

    #[test]
    fn classification_names_the_saturated_side() {
        let f = catch_up(500.0);
        assert_eq!(classify(&f, &attribution("pinned", Some(0.97), 0.40)).0, BoundBy::BrokerCpu);
        let (b, why) = classify(&f, &attribution("pinned", Some(0.61), 0.97));
        assert_eq!(b, BoundBy::ClientCpu);
        assert!(why.contains("clients 97% busy, broker 61%"), "{why}");
        // Both: the busier, both figures kept.
        let (b, why) = classify(&f, &attribution("pinned", Some(0.93), 0.99));
        assert_eq!(b, BoundBy::ClientCpu);
        assert!(why.contains("both saturated") && why.contains("clients 99%") && why.contains("broker 93%"), "{why}");
        assert_eq!(classify(&f, &attribution("pinned", Some(0.99), 0.95)).0, BoundBy::BrokerCpu);
        // At the threshold exactly: saturated; below it: nothing.
        assert_eq!(classify(&f, &attribution("pinned", Some(SATURATED), 0.2)).0, BoundBy::BrokerCpu);
        assert_eq!(classify(&f, &attribution("pinned", Some(0.89), 0.89)).0, BoundBy::Nothing);
    }

    #[test]
    fn a_broker_busy_in_softirq_is_named_so() {
        let mut a = attribution("pinned", Some(0.95), 0.5);
        a.broker_split = Some(CpuSplit { user: 0.1, system: 0.25, softirq: 0.6, ..Default::default() });
        let (b, why) = classify(&catch_up(900.0), &a);
        assert_eq!(b, BoundBy::BrokerCpu);
        assert!(why.contains("softirq"), "{why}");
        let (_, why) = classify(&catch_up(900.0), &attribution("pinned", Some(0.95), 0.5));
        assert!(!why.contains("softirq"), "{why}");
    }

    #[test]
    fn shared_cpus_go_to_the_role_that_used_more() {
        let mut a = attribution("shared", Some(0.30), 0.62);
        a.cpus_busy = 0.95;
        let (b, why) = classify(&catch_up(100.0), &a);
        assert_eq!(b, BoundBy::ClientCpu);
        assert!(why.contains("threads' CPU seconds"), "{why}");
        a.cpus_busy = 0.5;
        assert_eq!(classify(&catch_up(100.0), &a).0, BoundBy::Nothing);
    }

    #[test]
    fn network_producer_rate_disk_and_nothing() {
        let a = attribution("pinned", Some(0.95), 0.95);
        // 1900 MB/s of a 2 GB/s loopback limit: the network, whatever the CPUs.
        let f = Figures { network_limit: Some(2e9), ..catch_up(1900.0) };
        assert_eq!(classify(&f, &a).0, BoundBy::Network);
        let f = Figures { network_limit: Some(2e9), ..catch_up(1000.0) };
        assert_eq!(classify(&f, &a).0, BoundBy::BrokerCpu, "half the limit: the CPUs decide (a tie: the broker)");
        // A tail at 1000 records/s for 10 s, 2 groups: 20000 due.
        let tail = |records| Figures {
            phase: "tail".into(),
            mb_per_sec: 1.0,
            seconds: 10.0,
            records,
            groups: 2,
            rate_records_per_sec: Some(1000.0),
            ..Default::default()
        };
        let idle = attribution("pinned", Some(0.1), 0.1);
        assert_eq!(classify(&tail(19_900), &idle).0, BoundBy::ProducerRate);
        assert_eq!(classify(&tail(10_000), &idle).0, BoundBy::Nothing, "fell behind, nothing saturated");
        assert_eq!(classify(&tail(10_000), &a).0, BoundBy::BrokerCpu, "fell behind: the CPUs");
        // An unlimited tail is never producer_rate.
        let f = Figures { rate_records_per_sec: None, ..tail(20_000) };
        assert_eq!(classify(&f, &idle).0, BoundBy::Nothing);
        // Cold page cache with iowait on the broker's CPUs.
        let mut cold = attribution("pinned", Some(0.4), 0.3);
        cold.broker_split = Some(CpuSplit { user: 0.1, system: 0.3, iowait: 0.4, ..Default::default() });
        assert_eq!(classify(&Figures { cold: true, ..catch_up(100.0) }, &cold).0, BoundBy::Disk);
        assert_eq!(classify(&catch_up(100.0), &cold).0, BoundBy::Nothing, "hot cache: not the disk");
        let at_fio = Figures { cold: true, disk_limit: Some(1e8), ..catch_up(95.0) };
        assert_eq!(classify(&at_fio, &idle).0, BoundBy::Disk);
        // External without a broker figure: only the clients can be named.
        let ext = attribution("external", None, 0.5);
        let (b, why) = classify(&catch_up(10.0), &ext);
        assert_eq!(b, BoundBy::Nothing);
        assert!(why.contains("broker not measured"), "{why}");
    }

    fn entry(bound: Option<BoundBy>, a: Option<Attribution>) -> PathResult {
        let doc = crate::bench::results::example(1.0);
        let mut p = doc.paths[0].clone();
        p.bound_by = bound;
        p.attribution = a;
        p
    }

    #[test]
    fn a_client_bound_figure_is_always_shown_with_its_warning() {
        let p = entry(Some(BoundBy::ClientCpu), Some(attribution("pinned", Some(0.61), 0.97)));
        let shown = show_mb_per_sec(&p, 1, false);
        let w = shown.warning.clone().expect("a warning");
        assert!(w.starts_with(&format!("WARNING: {} {} was bound by the clients' CPU", p.read_path, p.phase)), "{w}");
        assert!(w.contains("(clients 97% busy, broker 61%): it measures the consumers, not the read path"), "{w}");
        assert!(shown.text.ends_with(" !") && shown.bound == "client_cpu b61%/c97% !", "{shown:?}");
        let p = entry(Some(BoundBy::BrokerCpu), Some(attribution("pinned", Some(0.97), 0.3)));
        let shown = show_mb_per_sec(&p, 1, false);
        assert_eq!((shown.warning, shown.bound.as_str()), (None, "broker_cpu b97%/c30%"));
        assert_eq!(show_mb_per_sec(&entry(None, None), 1, false).bound, "-");
    }

    #[test]
    fn steal_above_the_threshold_is_flagged_in_the_entry_and_the_notes() {
        let mut a = attribution("pinned", Some(0.5), 0.5);
        a.steal = 0.01;
        a.steal_max = 0.05;
        a.steal_flagged = a.steal_max > STEAL_FLAG;
        let mut paths = vec![entry(None, Some(a))];
        paths[0].phase = "catch_up".into();
        let w = crate::bench::workload::Workload::default();
        let notes = attribute(&mut paths, &LimitsResult::default(), &w, false, None, false);
        assert!(paths[0].attribution.as_ref().unwrap().steal_flagged);
        assert!(notes.iter().any(|n| n.starts_with("steal: ") && n.contains("worst sample 5%")), "{notes:?}");
        assert!(paths[0].bound_by.is_some());
        assert!(show_mb_per_sec(&paths[0], 1, false).bound.ends_with("(steal)"));
    }

    #[test]
    fn a_sampler_gives_samples_that_add_up_to_the_entry_bytes() {
        let counter = Arc::new(AtomicU64::new(0));
        let s = Sampler::start(Roles::of(None, true), counter.clone());
        counter.fetch_add(1000, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(30));
        let a = s.finish().into_attribution(2_000_000);
        assert_eq!(a.method, "shared");
        assert!(!a.samples.is_empty());
        let bytes: f64 = a.samples.iter().map(|x| x.mb_per_sec * 1e6 * x.seconds).sum();
        assert!((bytes - 2e6).abs() < 1.0, "{bytes}");
        assert!(a.client_busy >= 0.0 && a.client_busy <= 1.0);
    }
}
