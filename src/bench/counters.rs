//! Counters that do not depend on time (issue 29, item 6): how many system calls the embedded
//! broker's threads made over a measured interval, counted by the kernel.
//!
//! Times (CPU seconds per GB, MB/s) move with everything else on a shared machine: frequency,
//! steal, the other side's scheduling. A count of events per GB moves only when the work
//! changes, so `compare` can gate on it where a time is too noisy. A results entry carries four
//! such counts per GB (see [`super::results::PathResult`]):
//!
//! | figure | counted by | source |
//! |---|---|---|
//! | `syscalls_per_gb` | the kernel: one `raw_syscalls:sys_enter` tracepoint counter per broker thread (`perf_event_open`, [`SyscallCounters`]) | this module |
//! | `context_switches_per_gb` | the kernel: `getrusage` of the process minus the client threads' `/proc/self/task/*/status` | [`super::usage`] |
//! | `minor_faults_per_gb`, `major_faults_per_gb` | the kernel: as the context switches | [`super::usage`] |
//! | `user_copied_bytes_per_gb` | the broker: record bytes its read paths read into user-space memory (`fetchbench_read_path_user_copied_bytes_total`) | [`crate::read_path::TransferStats::user_copied`] |
//!
//! ## The broker's threads
//!
//! The embedded broker runs in this process beside the clients, so the counters are opened per
//! thread, on the threads [`is_broker_thread`] names: `fetchbench-*` (network, io, request
//! handler pools, `fetchbench-core-*` of the `uring` model, coordinators, purgatory) except the
//! producer's `fetchbench-producer` sender (a client), and the kernel's io_uring workers
//! (`iou-wrk-*`, `iou-sqp-*`), which make no system calls but belong to the broker's rings.
//! The harness's own threads (the phase's coordinating thread, the attribution sampler) are
//! not the broker and are not counted (they are in the broker's CPU and context switches, which
//! are the process minus the clients). Counters open on the threads that exist when the
//! interval starts; a broker thread that starts during the interval is not counted, and the
//! interval's end names it in a note ([`CountWindow::close`]; the broker's threads all start
//! with it, so none did in the runs measured). A thread's counter keeps its count when the
//! thread exits.
//!
//! ## Where it cannot count
//!
//! The tracepoint's id is read from tracefs (`/sys/kernel/tracing`, or
//! `/sys/kernel/debug/tracing`); the counters need `perf_event_open` on this process's threads
//! (root, `CAP_PERFMON`, or `kernel.perf_event_paranoid` <= 1 with tracefs readable). Where
//! either is missing the figure is `null`, never a made-up 0, and the run says why in a note
//! ([`SyscallCounters::open`]'s error). `scripts/test.sh` mounts tracefs when it runs as root
//! and it is not mounted; by hand: `mount -t tracefs nodev /sys/kernel/tracing`. An external
//! broker's system calls are not counted (`null`).

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};

use perf_event_open_sys::bindings;

use super::remote::BrokerInterval;
use super::usage::CLIENT_THREADS;
use crate::broker::BrokerHandle;

/// Set by `scripts/test.sh` when tracefs is mounted: the tests that count system calls must
/// then count them (else they say why not and pass).
pub const EXPECT_ENV: &str = "FETCHBENCH_EXPECT_SYSCALL_COUNTS";

/// Where the `raw_syscalls:sys_enter` tracepoint's id is looked for, in order.
const TRACEPOINT_IDS: [&str; 2] = [
    "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
    "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id",
];

/// Whether a thread named `comm` (its `/proc/<tid>/comm`, at most 15 bytes) is one of the
/// embedded broker's (see the [module docs](self)).
pub(crate) fn is_broker_thread(comm: &str) -> bool {
    let broker = comm.starts_with("fetchbench-") || comm.starts_with("iou-wrk-") || comm.starts_with("iou-sqp-");
    broker && !CLIENT_THREADS.iter().any(|p| comm.starts_with(p))
}

/// The id of the `raw_syscalls:sys_enter` tracepoint, from tracefs.
///
/// Errors: a sentence saying that tracefs is not mounted (or the id not readable) and how to
/// mount it.
pub(crate) fn sys_enter_id() -> Result<u64, String> {
    for path in TRACEPOINT_IDS {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text.trim().parse().map_err(|_| format!("{path}: not a tracepoint id: {:?}", text.trim()));
        }
    }
    Err("tracefs is not mounted at /sys/kernel/tracing (as root: mount -t tracefs nodev /sys/kernel/tracing)".into())
}

/// Kernel-counted system calls of a set of this process's threads (see the [module
/// docs](self)): one `perf_event_open` counter per thread, counting from when it was opened.
pub(crate) struct SyscallCounters {
    id: u64,
    select: fn(&str) -> bool,
    /// (thread id, its counter).
    threads: Vec<(i32, File)>,
    /// The counted threads' names, in the order of `threads`.
    names: Vec<String>,
}

impl SyscallCounters {
    /// Opens a counter on every thread of this process `select` names now.
    ///
    /// Errors: a sentence why nothing can be counted (tracefs missing, `perf_event_open`
    /// refused: permission or a kernel without tracepoints), for the run's note.
    pub(crate) fn open(select: fn(&str) -> bool) -> Result<SyscallCounters, String> {
        probe()?;
        let mut c = SyscallCounters { id: sys_enter_id()?, select, threads: Vec::new(), names: Vec::new() };
        c.refresh();
        Ok(c)
    }

    /// Opens counters on the selected threads that appeared since the last call (their
    /// system calls count from now). A thread that cannot be counted (it exited meanwhile) is
    /// skipped.
    pub(crate) fn refresh(&mut self) {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if self.threads.iter().any(|(t, _)| *t == tid) {
                continue;
            }
            let Ok(comm) = std::fs::read_to_string(task.path().join("comm")) else { continue };
            if !(self.select)(comm.trim_end()) {
                continue;
            }
            if let Ok(counter) = open_counter(self.id, tid) {
                self.threads.push((tid, counter));
                self.names.push(comm.trim_end().to_string());
            }
        }
    }

    /// The system calls the counted threads made since their counters opened.
    pub(crate) fn total(&self) -> u64 {
        self.threads.iter().map(|(_, f)| read_count(f)).sum()
    }

    /// The threads counted.
    pub(crate) fn threads(&self) -> usize {
        self.threads.len()
    }
}

/// Whether this process can count its threads' system calls here (a counter on the calling
/// thread, closed at once): `Err` with the reason, for the run's note (the entries'
/// `syscalls_per_gb` are then `null`).
pub(crate) fn probe() -> Result<(), String> {
    let id = sys_enter_id()?;
    open_counter(id, 0).map(drop).map_err(|e| format!("perf_event_open(raw_syscalls:sys_enter) refused: {e}"))
}

/// The counts of one measured interval ([`CountWindow::close`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    /// System calls of the embedded broker's threads; `None`: not counted (an external broker,
    /// or the kernel refused: see [`probe`]).
    pub syscalls: Option<u64>,
    /// Record bytes the broker's read paths read into user space; `None`: not known (an
    /// external broker without a metrics endpoint, or a non-fetchbench one).
    pub user_copied: Option<u64>,
}

/// The counters of one measured interval: opened where its clock starts, closed where it
/// stops.
pub(crate) struct CountWindow {
    syscalls: Option<SyscallCounters>,
    user_copied: Option<u64>,
}

impl CountWindow {
    /// Opens the system call counters on the embedded `broker`'s threads and reads its
    /// user-copied bytes (nothing for an external broker: its figures come from its endpoint).
    pub(crate) fn open(broker: Option<&BrokerHandle>) -> CountWindow {
        match broker {
            Some(b) => CountWindow {
                syscalls: SyscallCounters::open(is_broker_thread).ok(),
                user_copied: Some(b.user_copied_bytes()),
            },
            None => CountWindow { syscalls: None, user_copied: None },
        }
    }

    /// The interval's counts: the embedded `broker`'s, or an external one's user-copied bytes
    /// from its endpoint (`remote`). A broker thread that started during the interval is not
    /// counted: a note in `notes` says so.
    pub(crate) fn close(
        self,
        broker: Option<&BrokerHandle>,
        remote: Option<&BrokerInterval>,
        notes: &mut Vec<String>,
    ) -> Counts {
        let syscalls = self.syscalls.map(|mut c| {
            let total = c.total();
            let counted = c.threads();
            c.refresh();
            // io_uring's workers make no system calls: one that started late misses nothing.
            let late: Vec<String> = c.names[counted..].iter().filter(|n| !n.starts_with("iou-")).cloned().collect();
            if !late.is_empty() {
                notes.push(format!(
                    "syscalls_per_gb: {} broker thread(s) started during the interval were not counted: {}",
                    late.len(),
                    late.join(", ")
                ));
            }
            total
        });
        let user_copied = match (broker, self.user_copied) {
            (Some(b), Some(start)) => Some(b.user_copied_bytes().saturating_sub(start)),
            _ => remote.map(|r| r.user_copied),
        };
        Counts { syscalls, user_copied }
    }
}

/// A counting (not sampling) tracepoint counter on thread `tid` (0: the calling thread), any
/// CPU, enabled at once.
fn open_counter(id: u64, tid: i32) -> std::io::Result<File> {
    // SAFETY: perf_event_attr is a plain C struct for which all zeroes is a valid value (every
    // field off or 0).
    let mut attr: bindings::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = bindings::PERF_TYPE_TRACEPOINT;
    attr.size = std::mem::size_of::<bindings::perf_event_attr>() as u32;
    attr.config = id;
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr that outlives the call;
    // the other arguments are plain integers (no group, any CPU, close-on-exec).
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(&mut attr, tid, -1, -1, bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong)
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd`, open and owned by nobody else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// A counter's value (`read_format` 0: one u64); 0 when it cannot be read.
fn read_count(mut f: &File) -> u64 {
    let mut buf = [0u8; 8];
    match f.read(&mut buf) {
        Ok(8) => u64::from_ne_bytes(buf),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn the_brokers_threads_are_named() {
        for broker in ["fetchbench-net0", "fetchbench-io3", "fetchbench-core-", "fetchbench-purg", "iou-wrk-1234"] {
            assert!(is_broker_thread(broker), "{broker}");
        }
        for other in ["fetchbench-prod", "bench-consumer-", "heartbeat-fetch", "bench-attributi", "fetchbench", "main"]
        {
            assert!(!is_broker_thread(other), "{other}");
        }
    }

    fn test_thread(comm: &str) -> bool {
        comm == "fb-count-test"
    }

    /// 1,000 `getppid` calls (never served by the vDSO) on a selected thread, and nothing from
    /// the others: the count is at least 1,000 and at most a few dozen more (the barrier's
    /// futex calls, the thread's exit). Where the kernel cannot count (no tracefs, no
    /// permission) the test says why and passes, unless `scripts/test.sh` found (or mounted)
    /// tracefs and set `FETCHBENCH_EXPECT_SYSCALL_COUNTS`: then the counters must work.
    #[test]
    fn counts_a_threads_system_calls_and_only_the_selected_threads() {
        let go = Arc::new(Barrier::new(2));
        let opened = Arc::new(Barrier::new(2));
        let (g, o) = (go.clone(), opened.clone());
        let counted = std::thread::Builder::new()
            .name("fb-count-test".into())
            .spawn(move || {
                o.wait();
                g.wait();
                for _ in 0..1000 {
                    // SAFETY: getppid takes no arguments and cannot fail.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
            })
            .unwrap();
        // Started but waiting: it exists in /proc/self/task when the counters open.
        opened.wait();
        let counters = match SyscallCounters::open(test_thread) {
            Ok(c) => c,
            Err(why) => {
                assert!(
                    std::env::var_os(EXPECT_ENV).is_none(),
                    "{EXPECT_ENV} is set (tracefs is mounted) but nothing can be counted: {why}"
                );
                eprintln!("not counted here: {why}");
                go.wait();
                counted.join().unwrap();
                return;
            }
        };
        assert_eq!(counters.threads(), 1);
        // This thread's calls are not counted.
        for _ in 0..500 {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        go.wait();
        counted.join().unwrap();
        let n = counters.total();
        assert!((1000..1100).contains(&n), "{n} system calls counted for 1,000 getppid calls");
    }
}
