//! The `librdkafka` client of the harness: consumers are `kcat` processes (kcat 1.7, librdkafka's
//! command-line client) in balanced consumer groups (`kcat -G`), one process per member.
//!
//! Both phases first commit, for each of their groups, the offsets the members must start at
//! (the log start for the catch-up, the log end for the tail) with fetchbench's consumer (a
//! simple commit: no generation, no member id). kcat then starts from the committed offsets
//! whatever its `auto.offset.reset`, and a partition that moves between members in a
//! rebalance resumes where its previous owner stopped: librdkafka's `enable.auto.commit`
//! (default true) commits the offsets of what it delivered when partitions are revoked and
//! when it closes. It is left on on purpose: kcat 1.7.1 applies `-X enable.auto.commit=false`
//! to the topic-level legacy alias `auto.commit.enable` (a deprecation warning on stderr,
//! and the consumer still commits, observed), and without those commits a rebalance during
//! the drain would hand a partition to a member that reads it again from the start.
//!
//! Each process runs `kcat -C -b BOOTSTRAP -G GROUP TOPICS... -f FORMAT -X k=v...` with
//! `auto.offset.reset` first and then every workload `consumer_config` entry as given
//! (librdkafka's names, e.g. `fetch.wait.max.ms`: it refuses unknown keys, and kcat's stderr
//! is then the error), except fetchbench's own `fetchbench.*` keys (the native consumer's
//! fetch mode). Its stdout (one line per record) and stderr (kcat's
//! `% Group G rebalanced (memberid M): assigned: t [0], t [1]` / `revoked: ...` lines, which
//! say when it consumes what) are read by threads of this process. The processes are pinned
//! to the client CPUs (`sched_setaffinity` between fork and exec), run in their own process
//! group (Ctrl-C is fetchbench's to handle) with SIGTERM as their parent-death signal, and
//! are reaped with `wait4`, which gives their resource use.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{ChildStderr, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use nix::sys::resource::UsageWho;

use super::attribution::{Roles, Sampler};
use super::catch_up::{Measured, Target};
use super::counters::CountWindow;
use super::histogram::LatencyRecorder;
use super::remote::RemoteWindow;
use super::results::PathResult;
use super::tail_shared::{mono_ns, TailMemberReport, TailMembers, TailShared, INTENDED_HEADER, SENT_HEADER};
use super::usage::{residency, Usage};
use super::workload::Phase;
use crate::client::consumer::{Consumer, ConsumerConfig, TopicPartition};
use crate::metrics::Latency;

/// How long one path's drain may take before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a stopped kcat gets to exit after SIGTERM before SIGKILL.
const EXIT_GRACE: Duration = Duration::from_secs(10);
/// Lines of a kcat's stderr kept for error messages.
const STDERR_TAIL: usize = 20;

/// Every partition of the target's topics.
fn partitions(t: &Target<'_>) -> Vec<TopicPartition> {
    t.backlog.topics.iter().flat_map(|(topic, n)| (0..*n).map(move |p| (topic.clone(), p))).collect()
}

/// Commits, for group `group`, every partition's log start (`end == false`) or log end offset
/// (`end == true`) as resolved now (ListOffsets), with a fetchbench consumer outside the group
/// (`assign`, then a commit without generation).
///
/// Errors: the consumer's (connection, ListOffsets, OffsetCommit).
fn commit_start_offsets(t: &Target<'_>, group: &str, end: bool) -> anyhow::Result<()> {
    let mut cc = ConsumerConfig::new(t.bootstrap.clone());
    cc.group_id = Some(group.to_string());
    cc.enable_auto_commit = false;
    cc.client_id = "fetchbench-run-kcat-offsets".into();
    let mut c = Consumer::new(cc)?;
    let tps = partitions(t);
    c.assign(&tps)?;
    if end {
        c.seek_to_end(&tps)?;
    } else {
        c.seek_to_beginning(&tps)?;
    }
    let mut offsets = BTreeMap::new();
    for tp in &tps {
        offsets.insert(tp.clone(), c.position(tp)?);
    }
    c.commit_offsets(&offsets, true).map_err(|e| anyhow!("group {group}: committing the start offsets: {e}"))?;
    let _ = c.close();
    Ok(())
}

/// The kcat command line of one member (without stdio set up), pinned to `pin` when given.
fn kcat_command(t: &Target<'_>, group: &str, format: &str, offset_reset: &str, unbuffered: bool) -> Command {
    let mut cmd = Command::new("kcat");
    cmd.arg("-C").arg("-b").arg(&t.bootstrap).arg("-G").arg(group);
    cmd.args(t.backlog.topics.iter().map(|(topic, _)| topic.as_str()));
    cmd.arg("-f").arg(format);
    if unbuffered {
        cmd.arg("-u");
    }
    cmd.arg("-X").arg(format!("auto.offset.reset={offset_reset}"));
    // fetchbench's own consumer settings (`fetchbench.fetch.mode`, ...) are not librdkafka's.
    for (k, v) in t.w.consumer_config.iter().filter(|(k, _)| !k.starts_with("fetchbench.")) {
        cmd.arg("-X").arg(format!("{k}={v}"));
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Built before fork: between fork and exec only system calls run.
    let set = t.pin_clients.as_ref().map(|cpus| {
        // SAFETY: `cpu_set_t` is plain data; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                // SAFETY: CPU_SET writes one bit of `set`; `c` is below its size.
                unsafe { libc::CPU_SET(c, &mut set) };
            }
        }
        set
    });
    // SAFETY: the closure only makes system calls that are async-signal-safe (setpgid, prctl,
    // sched_setaffinity) on data built before the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // Its own process group: a terminal's Ctrl-C reaches fetchbench only, which stops
            // its kcats itself (and reports what was measured); they die with fetchbench's
            // thread that spawned them (the phase's, which outlives them).
            if libc::setpgid(0, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(set) = &set {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

/// A spawned kcat process.
struct Proc {
    pid: libc::pid_t,
    /// `wait4`'s status and resource use once reaped.
    reaped: Option<(libc::c_int, Usage)>,
}

impl Proc {
    /// Reaps the process if it exited (`block`: waits for it). Returns whether it is reaped.
    fn reap(&mut self, block: bool) -> bool {
        if self.reaped.is_some() {
            return true;
        }
        let mut status = 0;
        // SAFETY: `rusage` is plain data written by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if block { 0 } else { libc::WNOHANG };
        let r = loop {
            // SAFETY: wait4 on our own child with valid pointers.
            let r = unsafe { libc::wait4(self.pid, &mut status, flags, &mut ru) };
            if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break r;
            }
        };
        if r == self.pid {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            let usage = Usage {
                user: tv(ru.ru_utime),
                sys: tv(ru.ru_stime),
                minflt: ru.ru_minflt as f64,
                majflt: ru.ru_majflt as f64,
                csw: (ru.ru_nvcsw + ru.ru_nivcsw) as f64,
            };
            self.reaped = Some((status, usage));
            true
        } else {
            if r < 0 {
                // Not our child any more (should not happen): count it as gone.
                self.reaped = Some((0, Usage::default()));
                return true;
            }
            false
        }
    }

    /// Sends `sig` unless reaped.
    fn signal(&self, sig: libc::c_int) {
        if self.reaped.is_none() {
            // SAFETY: kill on our own, not yet reaped child (the pid cannot be reused).
            unsafe {
                libc::kill(self.pid, sig);
            }
        }
    }

    /// SIGTERM, then SIGKILL after [`EXIT_GRACE`]; reaps.
    fn stop(&mut self) {
        if self.reap(false) {
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + EXIT_GRACE;
        while !self.reap(false) {
            if Instant::now() > deadline {
                self.signal(libc::SIGKILL);
                self.reap(true);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// How it ended (`exit status N`, `signal N`), for error messages.
    fn describe_exit(&self) -> String {
        match self.reaped {
            Some((s, _)) if libc::WIFEXITED(s) => format!("exit status {}", libc::WEXITSTATUS(s)),
            Some((s, _)) if libc::WIFSIGNALED(s) => format!("signal {}", libc::WTERMSIG(s)),
            Some(_) => "unknown status".into(),
            None => "running".into(),
        }
    }

    /// Whether it was reaped after exiting with status 0.
    fn exited_ok(&self) -> bool {
        matches!(self.reaped, Some((s, _)) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0)
    }

    /// Its resource use from `wait4` (zeros before it is reaped).
    fn usage(&self) -> Usage {
        self.reaped.map(|(_, u)| u).unwrap_or_default()
    }
}

/// Spawns `cmd`, returning the process and its pipes.
///
/// Errors: kcat not installed or not startable.
fn spawn(mut cmd: Command) -> anyhow::Result<(Proc, ChildStdout, ChildStderr)> {
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!("client librdkafka: kcat not found (install kcat 1.7, e.g. the Debian package kcat)")
        } else {
            anyhow!("client librdkafka: starting kcat: {e}")
        }
    })?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("kcat: no stdout pipe"))?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("kcat: no stderr pipe"))?;
    // The child is reaped with wait4, never through `Child` (dropping it does not wait).
    Ok((Proc { pid: child.id() as libc::pid_t, reaped: None }, stdout, stderr))
}

/// The groups' membership as kcat's stderr tells it.
struct Membership {
    /// Per member: (group, current assignment; `None` before the first or after a revocation).
    members: Mutex<Vec<(usize, Option<Vec<TopicPartition>>)>>,
    per_group: usize,
    partitions_total: usize,
    /// Per group: when it was first seen stable (every member assigned, every partition once).
    stable_at: Vec<Mutex<Option<Instant>>>,
    /// The first assignment of a non-empty partition list, any member.
    first_assigned: Mutex<Option<Instant>>,
    /// Per member: the last lines of its stderr.
    stderr: Vec<Mutex<Vec<String>>>,
}

impl Membership {
    fn new(groups: usize, per_group: usize, partitions_total: usize) -> Membership {
        let members = groups * per_group;
        Membership {
            members: Mutex::new((0..members).map(|m| (m / per_group, None)).collect()),
            per_group,
            partitions_total,
            stable_at: (0..groups).map(|_| Mutex::new(None)).collect(),
            first_assigned: Mutex::new(None),
            stderr: (0..members).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Applies one stderr line of member `m`; returns the group when this line made it stable
    /// for the first time.
    fn line(&self, m: usize, line: &str) -> Option<usize> {
        {
            let mut tail = self.stderr[m].lock().expect("not poisoned");
            if tail.len() >= STDERR_TAIL {
                tail.remove(0);
            }
            tail.push(line.to_string());
        }
        let event = parse_rebalance(line)?;
        let now = Instant::now();
        let mut ms = self.members.lock().expect("not poisoned");
        let group = ms[m].0;
        match event {
            Rebalance::Assigned(tps) => {
                if !tps.is_empty() {
                    self.first_assigned.lock().expect("not poisoned").get_or_insert(now);
                }
                ms[m].1 = Some(tps);
            }
            Rebalance::Revoked => ms[m].1 = None,
        }
        let mine: Vec<_> = ms.iter().filter(|x| x.0 == group).collect();
        let mut seen: Vec<&TopicPartition> = Vec::new();
        for (_, a) in &mine {
            seen.extend(a.iter().flatten());
        }
        let n = seen.len();
        seen.sort();
        seen.dedup();
        let stable = mine.len() == self.per_group
            && mine.iter().all(|x| x.1.is_some())
            && n == self.partitions_total
            && seen.len() == n;
        drop(ms);
        let mut at = self.stable_at[group].lock().expect("not poisoned");
        if stable && at.is_none() {
            *at = Some(now);
            return Some(group);
        }
        None
    }

    fn stderr_tail(&self, m: usize) -> String {
        self.stderr[m].lock().expect("not poisoned").join("\n")
    }
}

/// A rebalance event on kcat's stderr.
#[derive(Debug, PartialEq)]
enum Rebalance {
    Assigned(Vec<TopicPartition>),
    Revoked,
}

/// Parses kcat 1.7's `% Group G rebalanced (memberid M): assigned: t [0], t [1]` (an empty
/// list for a member without partitions) and `...: revoked: ...` lines.
fn parse_rebalance(line: &str) -> Option<Rebalance> {
    let rest = line.strip_prefix("% Group ")?;
    let (_, rest) = rest.split_once(" rebalanced (")?;
    let (_, rest) = rest.split_once("): ")?;
    if rest.starts_with("revoked:") {
        return Some(Rebalance::Revoked);
    }
    let list = rest.strip_prefix("assigned:")?;
    let mut tps = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (topic, p) = item.rsplit_once(' ')?;
        let p = p.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?;
        tps.push((topic.to_string(), p));
    }
    Some(Rebalance::Assigned(tps))
}

/// One stdout line `TOPIC PARTITION OFFSET[ REST]`.
fn parse_record(line: &str) -> Option<(&str, i32, i64, &str)> {
    let mut it = line.splitn(4, ' ');
    let topic = it.next()?;
    let partition = it.next()?.parse().ok()?;
    let offset = it.next()?.trim_end().parse().ok()?;
    Some((topic, partition, offset, it.next().unwrap_or("")))
}

/// Per group: per partition, the offset ranges `[from, to)` its members delivered (each a
/// contiguous run of one member), sorted. Members' lines arrive through separate pipes, so a
/// partition that moved between members in a rebalance is checked by ranges, not by order
/// of arrival: two ranges overlapping is a record delivered twice.
type Delivered = Mutex<HashMap<(String, i32), Vec<(i64, i64)>>>;

/// Adds the run `[from, to)` of `tp` to `delivered`.
///
/// Errors: the run overlaps one already there (records delivered twice).
fn add_run(delivered: &Delivered, tp: (String, i32), from: i64, to: i64) -> anyhow::Result<()> {
    let mut d = delivered.lock().expect("not poisoned");
    let runs = d.entry(tp).or_default();
    let i = runs.partition_point(|r| r.0 < from);
    let before = i.checked_sub(1).map(|k| runs[k]).filter(|r| r.1 > from);
    let after = runs.get(i).copied().filter(|r| r.0 < to);
    if let Some((a, b)) = before.or(after) {
        let tp = d.iter().find(|(_, v)| v.contains(&(a, b))).map(|(k, _)| format!("{}-{}", k.0, k.1));
        bail!("{}: offsets {from}..{to} and {a}..{b} were both delivered: duplicates (kcat)", tp.unwrap_or_default());
    }
    runs.insert(i, (from, to));
    Ok(())
}

/// One member's open run per partition: topic -> partition -> `(from, next)`.
#[derive(Default)]
struct MemberRuns {
    open: HashMap<String, HashMap<i32, (i64, i64)>>,
}

impl MemberRuns {
    /// Takes record `offset` of `topic`-`partition`: it extends the open run when it is the
    /// next offset; a jump forward (a gap of a real log, or the partition moved away and
    /// back) closes the run into `delivered` and opens a new one.
    ///
    /// Errors: an offset not above this member's previous one of that partition, a closed
    /// run overlapping another member's.
    fn record(&mut self, delivered: &Delivered, topic: &str, partition: i32, offset: i64) -> anyhow::Result<()> {
        let parts = match self.open.get_mut(topic) {
            Some(p) => p,
            None => self.open.entry(topic.to_string()).or_default(),
        };
        match parts.get_mut(&partition) {
            Some(run) if offset == run.1 => run.1 += 1,
            Some(run) if offset < run.1 => {
                bail!("{topic}-{partition}: offset {offset} delivered after {} (kcat)", run.1 - 1)
            }
            Some(run) => {
                let closed = std::mem::replace(run, (offset, offset + 1));
                add_run(delivered, (topic.to_string(), partition), closed.0, closed.1)?;
            }
            None => {
                parts.insert(partition, (offset, offset + 1));
            }
        }
        Ok(())
    }

    /// Closes every open run into `delivered`.
    ///
    /// Errors: as [`Self::record`].
    fn finish(self, delivered: &Delivered) -> anyhow::Result<()> {
        for (topic, parts) in self.open {
            for (p, (from, to)) in parts {
                add_run(delivered, (topic.clone(), p), from, to)?;
            }
        }
        Ok(())
    }
}

/// Starts a thread reading member `m`'s stderr into `ms`; `on_stable(group)` runs when a line
/// made that group stable.
fn stderr_reader(
    m: usize,
    stderr: ChildStderr,
    ms: Arc<Membership>,
    on_stable: impl Fn(usize) + Send + 'static,
) -> anyhow::Result<std::thread::JoinHandle<Usage>> {
    Ok(std::thread::Builder::new().name(format!("bench-consumer-e{m}")).spawn(move || {
        let start = Usage::now(UsageWho::RUSAGE_THREAD);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(g) = ms.line(m, &line) {
                on_stable(g);
            }
        }
        Usage::now(UsageWho::RUSAGE_THREAD).minus(start)
    })?)
}

/// State of one catch-up drain shared with the reader threads.
struct Drain {
    /// Records read per group.
    consumed: Vec<AtomicU64>,
    /// Records read (all groups): the attribution sampler's counter (scaled to bytes there).
    records_read: Arc<AtomicU64>,
    /// Records per group to read.
    target: u64,
    /// Per group: the offset ranges delivered.
    delivered: Vec<Delivered>,
    boundary: AtomicBool,
    failed: AtomicBool,
    /// When the last group got its last record.
    done_at: Mutex<Option<Instant>>,
    groups_done: AtomicUsize,
}

/// What a stdout reader of the catch-up hands back: its thread's usage at its start, at the
/// warmup boundary (if seen) and at its end.
struct ReaderReport {
    start: Usage,
    boundary: Option<Usage>,
    end: Usage,
}

/// Reads one catch-up member's stdout until kcat closes it, checking and counting records.
fn drain_reader(m: usize, group: usize, stdout: ChildStdout, d: &Drain) -> anyhow::Result<ReaderReport> {
    let start = Usage::now(UsageWho::RUSAGE_THREAD);
    let mut boundary = None;
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    let mut runs = MemberRuns::default();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if boundary.is_none() && d.boundary.load(Ordering::Relaxed) {
            boundary = Some(Usage::now(UsageWho::RUSAGE_THREAD));
        }
        let Some((topic, partition, offset, _)) = parse_record(line.trim_end_matches('\n')) else {
            bail!("kcat member {m}: an unexpected output line {line:?}");
        };
        runs.record(&d.delivered[group], topic, partition, offset)?;
        d.records_read.fetch_add(1, Ordering::Relaxed);
        let n = d.consumed[group].fetch_add(1, Ordering::SeqCst) + 1;
        if n == d.target && d.groups_done.fetch_add(1, Ordering::SeqCst) + 1 == d.consumed.len() {
            *d.done_at.lock().expect("not poisoned") = Some(Instant::now());
        }
    }
    runs.finish(&d.delivered[group])?;
    Ok(ReaderReport { start, boundary, end: Usage::now(UsageWho::RUSAGE_THREAD) })
}

/// Catch-up phase with kcat consumers: `consumer_groups` x `consumers_per_group` processes
/// `kcat -C -G <prefix>-catch-up-<g> TOPICS -e -u -f '%t %p %o\n'` read the backlog from the
/// log start (committed first, see the module doc). Unbuffered (`-u`, a write per record):
/// with stdio's buffering the last lines would only arrive when kcat exits, after the
/// end-of-partition long poll (`fetch.wait.max.ms`), and the clock would include that wait.
/// `-e` (works in `-G` mode with kcat 1.7.1): a member exits once every partition assigned
/// to it reached its end; members still running when their group has every record (for
/// instance one without partitions) get SIGTERM.
///
/// Measured: kcat cannot be held before consuming (it reads from its first assignment, and
/// members that join later rebalance the group), so the clock starts when every group is
/// stable on kcat's stderr (all its members assigned, every partition once) plus `warmup`,
/// as the native client's drain, and the records read before are not counted; it stops at
/// the line of the last record. When the drain (or a member) ends before that instant, the
/// whole drain from the first assignment is measured instead, rebalances included (a note
/// says which). `rebalance_ms`: from the spawn to every group stable, `None` when a group
/// never was. Broker CPU: this process's `getrusage` over the measured time minus the reader
/// threads'; consumer CPU: the kcat processes' (`wait4` at the end minus
/// `/proc/<pid>/stat` at the start, clock ticks). Poll latency is not available (empty).
///
/// Each record is checked: per group and partition, the offset ranges the members delivered
/// must not overlap (see [`Delivered`]: a duplicate), each member's offsets of a partition
/// must grow, and each group must receive exactly the backlog's records for its isolation level
/// ([`Backlog::records_for`](super::backlog::Backlog::records_for): librdkafka reads
/// `read_committed` unless `consumer_config` says otherwise) (with no duplicate,
/// every offset of a generated, dense backlog); members stop (SIGTERM) once their group has the
/// whole backlog (a member without partitions never reaches an end).
///
/// Errors: kcat missing, a kcat that exits with an error (its stderr quoted, e.g. an unknown
/// `consumer_config` key), a record delivered twice or out of order, a group with too many
/// records, a drain longer than 600 s.
pub(crate) fn catch_up(t: &Target<'_>) -> anyhow::Result<(PathResult, Vec<String>)> {
    let w = t.w;
    let backlog = t.backlog;
    let mut notes = Vec::new();
    let residency_before = residency(&backlog.segment_files);
    let groups = w.consumer_groups as usize;
    let per_group = w.consumers_per_group as usize;
    let members = groups * per_group;
    let partitions_total = partitions(t).len();
    let group_name = |g: usize| format!("{}-catch-up-{g}", t.group_prefix);
    for g in 0..groups {
        commit_start_offsets(t, &group_name(g), false)?;
    }
    if let Some(b) = t.broker {
        let _ = b.take_fetch_latencies(); // only this phase's fetches
    }
    // Before any kcat runs; replaced at the warmup boundary when there is one.
    let mut in_flight_at_start = t.broker.map(|b| b.fetches_in_flight());
    let ms = Arc::new(Membership::new(groups, per_group, partitions_total));
    let d = Arc::new(Drain {
        consumed: (0..groups).map(|_| AtomicU64::new(0)).collect(),
        records_read: Arc::new(AtomicU64::new(0)),
        target: backlog.records_for(w),
        delivered: (0..groups).map(|_| Mutex::new(HashMap::new())).collect(),
        boundary: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        done_at: Mutex::new(None),
        groups_done: AtomicUsize::new(0),
    });
    let mut remote = RemoteWindow::open(t.metrics);
    let mut counting = CountWindow::open(t.broker);
    let proc_start = Usage::now(UsageWho::RUSAGE_SELF);
    // From the spawn; started again at the warmup boundary, where the clock then starts.
    let roles = Roles::of(t.pin_clients.as_deref(), t.broker.is_some());
    let mut sampler = Sampler::start(roles.clone(), d.records_read.clone());
    let spawned = Instant::now();
    let mut procs = Vec::new();
    let mut readers = Vec::new();
    let mut err_readers = Vec::new();
    let mut spawn_error = None;
    for m in 0..members {
        let group = m / per_group;
        let mut cmd = kcat_command(t, &group_name(group), "%t %p %o\n", "earliest", true);
        cmd.arg("-e");
        let (p, stdout, stderr) = match spawn(cmd) {
            Ok(x) => x,
            Err(e) => {
                spawn_error = Some(e);
                break;
            }
        };
        procs.push(p);
        err_readers.push(stderr_reader(m, stderr, ms.clone(), |_| {})?);
        let dd = d.clone();
        readers.push(std::thread::Builder::new().name(format!("bench-consumer-k{m}")).spawn(move || {
            let r = drain_reader(m, group, stdout, &dd);
            if r.is_err() {
                dd.failed.store(true, Ordering::SeqCst);
            }
            r
        })?);
    }
    let mut error: Option<anyhow::Error> = spawn_error;
    let mut boundary: Option<(Instant, Usage, u64, Usage)> = None;
    let mut stopped = false;
    let total = d.target * groups as u64;
    let consumed = || d.consumed.iter().map(|c| c.load(Ordering::SeqCst)).sum::<u64>();
    while error.is_none() {
        for p in &mut procs {
            p.reap(false);
        }
        if d.failed.load(Ordering::SeqCst) {
            break;
        }
        if let Some(g) = (0..groups).find(|&g| d.consumed[g].load(Ordering::SeqCst) > d.target) {
            error = Some(anyhow!("group {g} received more than the backlog's {} records: duplicates", d.target));
            break;
        }
        if (0..groups).all(|g| d.consumed[g].load(Ordering::SeqCst) >= d.target) {
            break;
        }
        if t.interrupted.load(Ordering::SeqCst) {
            stopped = true;
            notes.push("interrupted (Ctrl-C): the drain was stopped; figures cover what was read".to_string());
            break;
        }
        // A member that failed, or a group whose members all ended short of the backlog.
        if let Some((m, p)) = procs.iter().enumerate().find(|(_, p)| p.reaped.is_some() && !p.exited_ok()) {
            let g = m / per_group;
            if d.consumed[g].load(Ordering::SeqCst) < d.target {
                // Its stderr reader takes the last lines (the error) first.
                let waited = Instant::now();
                while !err_readers[m].is_finished() && waited.elapsed() < Duration::from_secs(1) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                error = Some(anyhow!("kcat member {m} ended ({}): {}", p.describe_exit(), ms.stderr_tail(m)));
                break;
            }
        }
        if let Some(g) = (0..groups).find(|&g| {
            procs.iter().skip(g * per_group).take(per_group).all(|p| p.reaped.is_some())
                && d.consumed[g].load(Ordering::SeqCst) < d.target
        }) {
            // Let the readers take the last lines of the pipes before judging.
            std::thread::sleep(Duration::from_millis(200));
            let got = d.consumed[g].load(Ordering::SeqCst);
            if got < d.target {
                error = Some(anyhow!(
                    "group {g}: every kcat member exited after {got} of {} records: {}",
                    d.target,
                    ms.stderr_tail(g * per_group)
                ));
                break;
            }
        }
        if spawned.elapsed() > DRAIN_TIMEOUT {
            error = Some(anyhow!("the drain did not finish within {} s", DRAIN_TIMEOUT.as_secs()));
            break;
        }
        // The measured drain starts once every group is stable, plus warmup (as native).
        let all_stable = (0..groups)
            .map(|g| *ms.stable_at[g].lock().expect("not poisoned"))
            .collect::<Option<Vec<Instant>>>()
            .and_then(|v| v.into_iter().max());
        if boundary.is_none() && all_stable.is_some_and(|s| s.elapsed() >= w.warmup) {
            // The kcat processes' usage now; one that already ended cannot be read (then the
            // whole drain is measured: the marker below is never used).
            let children: Option<Vec<Usage>> = procs.iter().map(|p| proc_usage(p.pid)).collect();
            match children.filter(|_| procs.iter().all(|p| p.reaped.is_none())) {
                Some(c) => {
                    let children = c.into_iter().fold(Usage::default(), Usage::plus);
                    remote = RemoteWindow::open(t.metrics);
                    counting = CountWindow::open(t.broker);
                    sampler = Sampler::start(roles.clone(), d.records_read.clone());
                    boundary = Some((Instant::now(), Usage::now(UsageWho::RUSAGE_SELF), consumed(), children));
                    d.boundary.store(true, Ordering::SeqCst);
                    if let Some(b) = t.broker {
                        // The drain goes on through the boundary: its own fetches are out.
                        in_flight_at_start = Some(b.fetches_in_flight());
                        let _ = b.take_fetch_latencies(); // warmup fetches are not measured
                    }
                }
                None => boundary = Some((Instant::now(), Usage::default(), u64::MAX, Usage::default())),
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let end = d.done_at.lock().expect("not poisoned").unwrap_or_else(Instant::now);
    let sampled = sampler.finish();
    for p in &mut procs {
        p.stop();
    }
    let mut reports = Vec::new();
    for r in readers {
        match r.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => error = error.or(Some(e)),
            Err(_) => error = error.or(Some(anyhow!("a kcat reader thread panicked"))),
        }
    }
    let mut stderr_threads = Usage::default();
    for r in err_readers {
        stderr_threads = stderr_threads.plus(r.join().unwrap_or_default());
    }
    let proc_end = Usage::now(UsageWho::RUSAGE_SELF);
    let remote = remote.close(t.metrics, &t.read_path, &mut notes);
    let counts = counting.close(t.broker, remote.as_ref(), &mut notes);
    let in_flight_at_start = in_flight_at_start.or(remote.as_ref().map(|r| r.fetches_in_flight_at_start));
    let broker_rss_bytes = remote.as_ref().map(|r| r.rss_bytes);
    let remote_usage = remote.as_ref().map(|r| r.usage);
    let fetch_latency = t.broker.map(|b| b.take_fetch_latencies()).or(remote.map(|r| r.fetch)).unwrap_or_default();
    if let Some(e) = error {
        return Err(e);
    }
    // Records that came after the last one counted (a partition read again after a rebalance).
    if let Some(g) = (0..groups).find(|&g| d.consumed[g].load(Ordering::SeqCst) > d.target) {
        bail!(
            "group {g} received {} records, the backlog holds {} for isolation.level={}: duplicates, or \
             records of aborted transactions",
            d.consumed[g].load(Ordering::SeqCst),
            d.target,
            w.isolation_level()
        );
    }
    let boundary = boundary.filter(|b| b.2 != u64::MAX);
    let first_assigned = ms.first_assigned.lock().expect("not poisoned").unwrap_or(spawned);
    match boundary {
        Some((b, ..)) => notes.push(format!(
            "kcat: the clock runs from every group stable{} ({:.0} ms after the first assignment; kcat consumes from \
             its first assignment, so the records read before are not counted) to the last record's line",
            if w.warmup.is_zero() { String::new() } else { format!(" + warmup {:.1} s", w.warmup.as_secs_f64()) },
            b.duration_since(first_assigned).as_secs_f64() * 1e3
        )),
        None => notes.push(format!(
            "kcat: the clock runs from the first partition assignment kcat reported ({:.0} ms after spawning) to the \
             last record's line, rebalances included: the drain ended (or a member did) before every group was stable{}",
            first_assigned.duration_since(spawned).as_secs_f64() * 1e3,
            if w.warmup.is_zero() { "" } else { " plus warmup" }
        )),
    }
    let (t0, proc0, records0, children0) = boundary.unwrap_or((first_assigned, proc_start, 0, Usage::default()));
    let mut readers_usage = Usage::default();
    for r in &reports {
        // A reader that got no line after the boundary did (almost) nothing after it.
        let from = if boundary.is_some() { r.boundary.unwrap_or(r.end) } else { r.start };
        readers_usage = readers_usage.plus(r.end.minus(from));
    }
    if boundary.is_none() {
        readers_usage = readers_usage.plus(stderr_threads);
    }
    let children = procs.iter().fold(Usage::default(), |acc, p| acc.plus(p.usage())).minus(children0);
    let seconds = end.saturating_duration_since(t0).as_secs_f64().max(1e-9);
    let records = consumed().min(total).saturating_sub(records0);
    let bytes = (backlog.disk_bytes as f64 * groups as f64 * records as f64 / total.max(1) as f64) as u64;
    let process = proc_end.minus(proc0);
    let brk = match t.broker {
        Some(_) => process.minus_part(readers_usage),
        None => remote_usage.unwrap_or_default(),
    };
    // The consumers are the kcat processes (plus, on an external cluster, this process's readers).
    let consumer = if t.broker.is_some() { children } else { children.plus(process) };
    let rebalance = (0..groups).map(|g| *ms.stable_at[g].lock().expect("not poisoned")).collect::<Option<Vec<_>>>();
    let rebalance_ms =
        rebalance.and_then(|v| v.into_iter().max()).map(|s| s.duration_since(spawned).as_secs_f64() * 1e3);
    notes.push(
        "kcat: each member writes a line per record unbuffered (-u), which its CPU includes; consumer CPU is the \
         kcat processes' (wait4); poll latency is not available (empty)"
            .into(),
    );
    if rebalance_ms.is_none() && !stopped {
        notes.push("kcat: rebalance not measured: a member finished before its whole group had joined".into());
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
        fetches_in_flight_at_start: in_flight_at_start,
        polls: Latency::new(),
        end_to_end: LatencyRecorder::new(),
        rebalance_ms,
        broker_rss_bytes,
        attribution: Some(sampled.into_attribution(bytes)),
        counts,
    }
    .result(t);
    Ok((result, notes))
}

/// A live process's CPU and faults from `/proc/<pid>/stat` (clock ticks: 10 ms resolution;
/// context switches not counted); `None` when unreadable.
fn proc_usage(pid: libc::pid_t) -> Option<Usage> {
    // SAFETY: `sysconf` only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let close = stat.rfind(')')?;
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    Some(Usage { user: field(14) / ticks, sys: field(15) / ticks, minflt: field(10), majflt: field(12), csw: 0.0 })
}

/// Tail-phase consumer members as kcat processes: per group `<prefix>-tail-<g>`, the log end
/// offsets are committed first (so kcat starts exactly there, whenever its assignment comes),
/// then `consumers_per_group` processes `kcat -C -G ... -u -f '%t %p %o %S %h\n'` (unbuffered:
/// a line per record as it is consumed). A member counts as ready (`sh.ready`) when its group
/// is stable on kcat's stderr (every member assigned, every partition once); the producers
/// stamp each record with [`SENT_HEADER`] and [`INTENDED_HEADER`] (decimal [`mono_ns`]).
///
/// One thread per member reads its stdout: the receive time is [`mono_ns`] when the line
/// arrives through the pipe (so it includes kcat's output path, microseconds); records whose
/// intended time is inside the window are recorded (`%S` value bytes), every record is added
/// to `sh.received[group]`, offsets are checked consecutive per group and partition. When
/// `sh.done` or `sh.failed` is set the thread stops its kcat (SIGTERM, SIGKILL after 10 s)
/// and returns. Poll latency is not available (empty). The kcat processes' CPU is not in this
/// process's usage, so the tail phase's consumer CPU leaves it out.
///
/// Errors (returned now): kcat missing, committing the start offsets; (from the threads) a
/// kcat that exits early (its stderr quoted), an unexpected line, a record without the
/// headers, an offset out of order.
pub(crate) fn tail_members(t: &Target<'_>, sh: &Arc<TailShared>) -> anyhow::Result<TailMembers> {
    let w = t.w;
    let groups = w.consumer_groups as usize;
    let per_group = w.consumers_per_group as usize;
    let members = groups * per_group;
    let group_name = |g: usize| format!("{}-tail-{g}", t.group_prefix);
    for g in 0..groups {
        commit_start_offsets(t, &group_name(g), true)?;
    }
    let ms = Arc::new(Membership::new(groups, per_group, partitions(t).len()));
    let next: Arc<Vec<Delivered>> = Arc::new((0..groups).map(|_| Mutex::new(HashMap::new())).collect());
    let mut handles = Vec::new();
    for m in 0..members {
        let group = m / per_group;
        let cmd = kcat_command(t, &group_name(group), "%t %p %o %S %h\n", "latest", true);
        let (proc, stdout, stderr) = match spawn(cmd) {
            Ok(x) => x,
            Err(e) => {
                sh.failed.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        let sh2 = sh.clone();
        let per = per_group;
        let err_thread = stderr_reader(m, stderr, ms.clone(), move |_g| {
            // The whole group is consuming: its members are ready.
            sh2.ready.fetch_add(per, Ordering::SeqCst);
            sh2.stable.fetch_add(1, Ordering::SeqCst);
        })?;
        let (sh, ms, next) = (sh.clone(), ms.clone(), next.clone());
        let handle = std::thread::Builder::new().name(format!("bench-consumer-w{m}")).spawn(move || {
            let r = tail_member(m, group, proc, stdout, err_thread, &sh, &ms, &next);
            if r.is_err() {
                sh.failed.store(true, Ordering::SeqCst);
            }
            r
        })?;
        handles.push(handle);
    }
    Ok(handles)
}

/// One tail member: reads its kcat's stdout on a thread of its own, watches `sh` and the
/// process, stops the process at the end.
#[allow(clippy::too_many_arguments)]
fn tail_member(
    m: usize,
    group: usize,
    mut proc: Proc,
    stdout: ChildStdout,
    err_thread: std::thread::JoinHandle<Usage>,
    sh: &Arc<TailShared>,
    ms: &Membership,
    next: &Arc<Vec<Delivered>>,
) -> anyhow::Result<TailMemberReport> {
    let finished = Arc::new(AtomicBool::new(false));
    let reader = {
        let (sh, next, finished) = (sh.clone(), next.clone(), finished.clone());
        std::thread::Builder::new().name(format!("bench-consumer-k{m}")).spawn(move || {
            let r = tail_reader(m, group, stdout, &sh, &next);
            finished.store(true, Ordering::SeqCst);
            r
        })?
    };
    let mut early_exit = None;
    while !sh.done.load(Ordering::SeqCst) && !sh.failed.load(Ordering::SeqCst) && !finished.load(Ordering::SeqCst) {
        if proc.reap(false) {
            early_exit = Some(proc.describe_exit());
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    proc.stop();
    let report = reader.join().map_err(|_| anyhow!("a kcat reader thread panicked"))?;
    let _ = err_thread.join();
    let report = report?;
    if let Some(status) = early_exit {
        if !sh.done.load(Ordering::SeqCst) && !sh.failed.load(Ordering::SeqCst) {
            bail!("kcat tail member {m} ended early ({status}): {}", ms.stderr_tail(m));
        }
    }
    Ok(report)
}

/// Reads one tail member's stdout until it closes (see [`tail_members`]).
fn tail_reader(
    m: usize,
    group: usize,
    stdout: ChildStdout,
    sh: &TailShared,
    next: &[Delivered],
) -> anyhow::Result<TailMemberReport> {
    let mut report = TailMemberReport {
        latency: LatencyRecorder::new(),
        polls: Latency::new(),
        window_records: 0,
        window_value_bytes: 0,
    };
    let mut reader = BufReader::new(stdout);
    let mut runs = MemberRuns::default();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let received = mono_ns();
        let text = line.trim_end_matches('\n');
        let Some((topic, partition, offset, rest)) = parse_record(text) else {
            bail!("kcat member {m}: an unexpected output line {line:?}");
        };
        runs.record(&next[group], topic, partition, offset)?;
        let (size, headers) = rest.split_once(' ').unwrap_or((rest, ""));
        let (Some(sent), Some(intended)) = (header_value(headers, SENT_HEADER), header_value(headers, INTENDED_HEADER))
        else {
            bail!("{topic}-{partition} offset {offset}: a record without the harness's headers ({headers:?})");
        };
        let (from, to) = (sh.window.0.load(Ordering::SeqCst), sh.window.1.load(Ordering::SeqCst));
        if intended >= from && intended < to {
            report.latency.record(intended, sent, received);
            report.window_records += 1;
            report.window_value_bytes += size.parse::<u64>().unwrap_or(0);
        }
        sh.delivered_bytes.fetch_add(size.parse::<u64>().unwrap_or(0), Ordering::Relaxed);
        sh.received[group].fetch_add(1, Ordering::SeqCst);
    }
    runs.finish(&next[group])?;
    Ok(report)
}

/// The value of header `key` in kcat's `%h` output (`k1=v1,k2=v2`), parsed as u64.
fn header_value(headers: &str, key: &str) -> Option<u64> {
    headers.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebalance_lines_parse() {
        let line = "% Group g3 rebalanced (memberid rdkafka-5b73): assigned: t2 [0], bench-1 [11]";
        assert_eq!(parse_rebalance(line), Some(Rebalance::Assigned(vec![("t2".into(), 0), ("bench-1".into(), 11)])));
        assert_eq!(parse_rebalance("% Group g (memberid x): assigned: "), None);
        assert_eq!(parse_rebalance("% Group g rebalanced (memberid x): assigned: "), Some(Rebalance::Assigned(vec![])));
        assert_eq!(parse_rebalance("% Group g rebalanced (memberid x): revoked: t [0]"), Some(Rebalance::Revoked));
        assert_eq!(parse_rebalance("% Reached end of topic t2 [0] at offset 20000: exiting"), None);
    }

    #[test]
    fn record_lines_and_headers_parse() {
        assert_eq!(parse_record("bench-0 3 17"), Some(("bench-0", 3, 17, "")));
        let (_, _, _, rest) = parse_record("t 0 5 1024 fetchbench.sent=12,fetchbench.intended=9").unwrap();
        let (size, headers) = rest.split_once(' ').unwrap();
        assert_eq!(size, "1024");
        assert_eq!(header_value(headers, SENT_HEADER), Some(12));
        assert_eq!(header_value(headers, INTENDED_HEADER), Some(9));
        assert_eq!(header_value("", SENT_HEADER), None);
        assert_eq!(parse_record("garbage"), None);
    }

    #[test]
    fn offsets_are_checked_by_ranges_across_members() {
        let d: Delivered = Mutex::new(HashMap::new());
        let (mut a, mut b) = (MemberRuns::default(), MemberRuns::default());
        // Member a reads t-0 0..3, loses it to b (3..5), gets it back at 5; b's lines of t-0
        // arrive after a's second run: order of arrival does not matter.
        for o in [0, 1, 2, 5, 6] {
            a.record(&d, "t", 0, o).unwrap();
        }
        for o in [3, 4] {
            b.record(&d, "t", 0, o).unwrap();
        }
        assert!(a.record(&d, "t", 0, 6).is_err(), "an offset twice from one member");
        a.finish(&d).unwrap();
        b.finish(&d).unwrap();
        assert_eq!(d.lock().unwrap()[&("t".to_string(), 0)], [(0, 3), (3, 5), (5, 7)]);
        // Member c reads 4..6 again: overlaps.
        let mut c = MemberRuns::default();
        c.record(&d, "t", 0, 4).unwrap();
        let err = c.finish(&d).unwrap_err().to_string();
        assert!(err.contains("duplicates") && err.contains("t-0"), "{err}");
        // A real log's gaps are fine.
        let mut e = MemberRuns::default();
        for o in [10, 12, 20] {
            e.record(&d, "u", 1, o).unwrap();
        }
        e.finish(&d).unwrap();
    }

    #[test]
    fn membership_sees_a_stable_group() {
        let ms = Membership::new(1, 2, 2);
        assert_eq!(ms.line(0, "% Group g rebalanced (memberid a): assigned: t [0], t [1]"), None);
        assert_eq!(ms.line(0, "% Group g rebalanced (memberid a): revoked: t [0], t [1]"), None);
        assert_eq!(ms.line(1, "% Group g rebalanced (memberid b): assigned: t [1]"), None);
        assert_eq!(ms.line(0, "% Group g rebalanced (memberid a): assigned: t [0]"), Some(0));
        assert!(ms.stderr_tail(0).contains("assigned: t [0]"));
    }
}
