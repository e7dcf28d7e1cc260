//! The mixed phase: producers write at the workload's `rate` (consumers reading at the head, as
//! in the tail phase) while the catch-up groups drain the backlog; both are measured at once,
//! over the same interval.
//!
//! Flow, for one read path (or the external cluster); the pieces are the tail phase's
//! ([`super::tail`]) and the catch-up phase's ([`super::catch_up`]):
//!
//! 1. the tail consumers (`consumer_groups` x `consumers_per_group`, groups
//!    `<prefix>-mixed-tail-<g>`) join and move to the log end of the tail topics
//!    (`fetchbench-tail-<topic>`);
//! 2. the producers start on their open-loop schedule (`rate / producers` records/s each, the
//!    workload's `[producer_config]`), each value stamped with its actual and intended send
//!    times, and keep to it until the interval ends;
//! 3. meanwhile the catch-up groups (`<prefix>-mixed-catch-up-<g>`) join and warm up exactly as
//!    in the catch-up phase (drains for `warmup`, none with a cold page cache), then seek to
//!    the log start;
//! 4. **the interval starts** when both the catch-up groups are positioned and `warmup` has
//!    passed since the producers' start (so the producers warmed up too): at that instant `S`
//!    the usage snapshots are taken, the broker's fetch latencies reset and the drain starts;
//! 5. **the interval ends** at the instant `E` the harness sees that the groups have delivered
//!    the whole backlog (within ~5 ms of the last record's delivery, before anyone closes);
//! 6. the producers send every record intended before `E`, flush and stop; the tail consumers
//!    read until every group has every acknowledged record (no loss, no duplicate), and close.
//!
//! The one results entry (phase `mixed`):
//!
//! - `seconds`, `bytes`, `records`, `mb_per_sec`, `records_per_sec`: the drain's, on the
//!   catch-up clock (drain start to the last backlog record delivered, within `S..E`): backlog
//!   record-batch bytes delivered to the catch-up groups;
//! - `end_to_end_latency`: the tail consumers', of the records whose intended send time is in
//!   `[S, E)` (raw and coordinated-omission corrected, as in the tail phase);
//! - `produced_mb_per_sec`: record-batch bytes the producers wrote to their connections over
//!   `S..E` (after compression), per second of it;
//! - `broker_cpu`, `consumer_cpu` (all client threads: drain consumers, tail consumers,
//!   producers), faults and context switches: over `S..E`, **per GB of all bytes served** in it:
//!   the drain's bytes plus the record-batch bytes of the tail records counted in the
//!   end-to-end latency;
//! - `fetch_latency`: every Fetch the broker answered over the drain, the drain's and the tail
//!   consumers' (those wait at the log end for new records); `poll_latency`: the drain's
//!   consumers'; `rebalance_ms`: the catch-up groups'.
//!
//! The native client only (the workload check refuses `mixed` with `client = "librdkafka"`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail};
use nix::sys::resource::UsageWho;

use super::catch_up::{catch_up_with, DrainHooks, Measured, Target};
use super::counters::Counts;
use super::remote::{BrokerInterval, MetricsEndpoint, RemoteWindow};
use super::results::PathResult;
use super::tail::{self, Producers, TailRig, CLIENT_THREADS};
use super::tail_shared::{mono_ns, TailShared};
use super::usage::{threads_usage, Usage};
use super::workload::{Client, Phase};
use crate::metrics::Latency;

/// The state at one bound of the interval.
#[derive(Clone, Copy)]
struct Mark {
    /// Mono ns ([`mono_ns`]).
    ns: u64,
    /// The process's usage.
    process: Usage,
    /// The client threads' usage.
    clients: Usage,
    /// Bytes the producers had written.
    written: u64,
}

impl Mark {
    fn now(producers: &Producers) -> Mark {
        Mark {
            ns: mono_ns(),
            process: Usage::now(UsageWho::RUSAGE_SELF),
            clients: threads_usage(&CLIENT_THREADS),
            written: producers.written(),
        }
    }
}

/// The mixed phase's hooks into the drain: they open and close the interval.
struct Interval<'a> {
    sh: &'a TailShared,
    interrupted: &'a AtomicBool,
    producers: &'a Producers,
    /// The producers' start + `warmup` (mono ns): the interval does not start before.
    warm_until: u64,
    /// The producers' end (mono ns): set to `E`.
    end: &'a AtomicU64,
    /// `S` and `E`.
    marks: Mutex<(Option<Mark>, Option<Mark>)>,
    /// An external broker's endpoint (`run --metrics`).
    metrics: Option<&'a MetricsEndpoint>,
    /// The read path the broker should serve with.
    read_path: String,
    /// Its window, opened at `S`, and its figures and notes, taken at `E`.
    remote: Mutex<(Option<RemoteWindow>, Option<BrokerInterval>, Vec<String>)>,
}

impl DrainHooks for Interval<'_> {
    fn at_start(&self) -> anyhow::Result<()> {
        // Interrupted: the drain sees Ctrl-C itself and stops at once.
        if !tail::wait_until(self.sh, self.interrupted, self.warm_until) && self.sh.failed.load(Ordering::SeqCst) {
            bail!("stopped: the producers or the tail consumers failed");
        }
        self.remote.lock().expect("not poisoned").0 = Some(RemoteWindow::open(self.metrics));
        let mark = Mark::now(self.producers);
        self.sh.window.0.store(mark.ns, Ordering::SeqCst);
        self.marks.lock().expect("not poisoned").0 = Some(mark);
        Ok(())
    }

    fn at_end(&self) {
        // The bound first (records intended from here on are not counted), then the snapshots.
        let ns = mono_ns();
        self.sh.window.1.store(ns, Ordering::SeqCst);
        self.end.store(ns, Ordering::SeqCst);
        let mark = Mark { ns, ..Mark::now(self.producers) };
        self.marks.lock().expect("not poisoned").1 = Some(mark);
        self.close_remote();
    }

    fn failed(&self) -> bool {
        self.sh.failed.load(Ordering::SeqCst)
    }
}

impl Interval<'_> {
    /// Closes the external broker's window, if open.
    fn close_remote(&self) {
        let mut remote = self.remote.lock().expect("not poisoned");
        if let Some(window) = remote.0.take() {
            let mut notes = Vec::new();
            remote.1 = window.close(self.metrics, &self.read_path, &mut notes);
            remote.2 = notes;
        }
    }
}

/// Measures the mixed phase on `t` (see the module docs). Returns the path's result and notes.
///
/// Errors: as the tail phase (record_size below 16 bytes, producer or consumer errors, records
/// lost or duplicated) and the catch-up phase (a drain error; a rebalance during the drain is
/// not an error: members resume at the committed positions and each group's deliveries are
/// checked at-least-once across generations, redeliveries not counted); a client other than
/// native.
pub(crate) fn mixed(t: &Target<'_>, dir: Option<&Path>) -> anyhow::Result<(PathResult, Vec<String>)> {
    let w = t.w;
    tail::check(w)?;
    if w.client != Client::Native {
        bail!("phases: the mixed phase runs the native client only (client = \"native\")");
    }
    let prefix = format!("{}-mixed", t.group_prefix);
    let tail_backlog = tail::tail_backlog(t)?;
    let tt = tail::retarget(t, &tail_backlog, prefix.clone());
    let rig = TailRig::start(&tt, dir)?;
    let sh = rig.sh.clone();
    let start_ns = mono_ns() + 20_000_000; // 20 ms for the producer threads to start
    let end = Arc::new(AtomicU64::new(u64::MAX));
    let producers = match Producers::start(&tt, &sh, start_ns, end.clone(), None) {
        Ok(p) => p,
        Err(e) => return Err(rig.abort(e)),
    };
    let hooks = Interval {
        sh: &sh,
        interrupted: t.interrupted,
        producers: &producers,
        warm_until: start_ns + w.warmup.as_nanos() as u64,
        end: &end,
        marks: Mutex::new((None, None)),
        metrics: t.metrics,
        read_path: t.read_path.clone(),
        remote: Mutex::new((None, None, Vec::new())),
    };
    let drained = catch_up_with(&tail::retarget(t, t.backlog, prefix), &hooks, None);
    let marks = *hooks.marks.lock().expect("not poisoned");
    let (drain, mut notes) = match drained {
        Ok(d) => d,
        Err(e) => {
            // The tail side's own error, when it failed first, is the cause.
            let tail_failed = sh.failed.swap(true, Ordering::SeqCst);
            return Err(match (tail_failed, rig.finish(&tt, producers, true)) {
                (true, Err(te)) => te,
                _ => e,
            });
        }
    };
    let start = marks.0.ok_or_else(|| anyhow!("internal error: the drain ran without starting the interval"))?;
    // Interrupted (Ctrl-C): the drain stopped early, the interval ends now.
    let end_mark = match marks.1 {
        Some(m) => m,
        None => {
            let m = Mark::now(&producers);
            sh.window.1.store(m.ns, Ordering::SeqCst);
            end.store(m.ns, Ordering::SeqCst);
            m
        }
    };
    let interrupted = t.interrupted.load(Ordering::SeqCst);
    hooks.close_remote(); // interrupted: the interval ends now
    let (remote, remote_notes) = {
        let mut r = hooks.remote.lock().expect("not poisoned");
        (r.1.take(), std::mem::take(&mut r.2))
    };
    drop(hooks);
    let out = rig.finish(&tt, producers, interrupted)?;
    let seconds = (end_mark.ns.saturating_sub(start.ns) as f64 / 1e9).max(1e-9);
    let tail_bytes = out.window_batch_bytes();
    let process = end_mark.process.minus(start.process);
    let clients = end_mark.clients.minus(start.clients);
    notes.extend(remote_notes);
    let brk = match (t.broker, &remote) {
        (Some(_), _) => process.minus_part(clients),
        (None, Some(r)) => r.usage,
        (None, None) => Usage::default(),
    };
    let clients = if t.broker.is_some() { clients } else { process };
    let interval_at = notes.len();
    let interval_note = format!(
        "interval {seconds:.3} s (drain start to its end): CPU, faults and context switches are per GB of all \
         bytes served in it ({} drain + {tail_bytes} tail record-batch bytes); end-to-end latency over {} tail \
         records",
        drain.bytes, out.records
    );
    if dir.is_none() {
        notes.push("tail bytes are record value bytes (the external cluster's log is not visible)".into());
    }
    if !interrupted {
        // Interrupted: the drain's note says so; unsent records are the interruption's.
        out.schedule_notes(w, seconds, false, &mut notes);
    }
    let per_gb = Measured {
        phase: Phase::Mixed,
        seconds,
        bytes: drain.bytes + tail_bytes,
        records: drain.records,
        broker: brk,
        clients,
        residency_before: drain.residency_before,
        fetch: Latency::new(),
        fetch_long_poll: Latency::new(),
        fetches_in_flight_at_start: None,
        polls: Latency::new(),
        end_to_end: out.latency,
        rebalance_ms: drain.rebalance_ms,
        broker_rss_bytes: remote.map(|r| r.rss_bytes),
        attribution: None, // the drain's, below
        // The drain counted over the same interval (its window opens at `S` and closes at `E`):
        // its counts, back from per GB of its bytes, are put per GB of all bytes.
        counts: Counts {
            syscalls: drain.syscalls_per_gb.map(|x| (x * drain.bytes as f64 / 1e9).round() as u64),
            user_copied: drain.user_copied_bytes_per_gb.map(|x| (x * drain.bytes as f64 / 1e9).round() as u64),
        },
    }
    .result(t);
    let result = PathResult {
        read_path: drain.read_path,
        phase: Phase::Mixed.name().to_string(),
        seconds: drain.seconds,
        bytes: drain.bytes,
        records: drain.records,
        mb_per_sec: drain.mb_per_sec,
        records_per_sec: drain.records_per_sec,
        produced_mb_per_sec: Some(end_mark.written.saturating_sub(start.written) as f64 / 1e6 / seconds),
        fetch_latency: drain.fetch_latency,
        fetch_long_poll_latency: drain.fetch_long_poll_latency,
        fetches_in_flight_at_start: drain.fetches_in_flight_at_start,
        poll_latency: drain.poll_latency,
        // The drain's sampler covered the interval (drain start to end), the tail's clients too.
        attribution: drain.attribution,
        ..per_gb
    };
    // An interrupted run drops an entry that measured nothing: no note about its window then.
    if !(interrupted && result.measured_nothing()) {
        notes.insert(interval_at, interval_note);
    }
    Ok((result, notes))
}
