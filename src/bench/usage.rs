//! Resource accounting of a run: `getrusage` snapshots ([`Usage`]) and the page cache: the
//! residency of files ([`resident_fraction`], `mincore`; [`residency`] over a backlog) and
//! their eviction ([`evict_from_page_cache`]) for cold-cache runs.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use nix::sys::resource::{getrusage, UsageWho};

/// Thread-name prefixes of the client threads (consumers and their heartbeat threads,
/// producer loops, producer senders).
pub(crate) const CLIENT_THREADS: [&str; 4] = ["bench-consumer", "heartbeat-", "bench-producer", "fetchbench-prod"];

/// Resource use of a thread or the process at one instant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub user: f64,
    pub sys: f64,
    pub minflt: f64,
    pub majflt: f64,
    pub csw: f64,
}

impl Usage {
    /// `getrusage(who)` now (zeros when it fails).
    pub(crate) fn now(who: UsageWho) -> Usage {
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

    /// `self - o`, field by field.
    pub(crate) fn minus(self, o: Usage) -> Usage {
        Usage {
            user: self.user - o.user,
            sys: self.sys - o.sys,
            minflt: self.minflt - o.minflt,
            majflt: self.majflt - o.majflt,
            csw: self.csw - o.csw,
        }
    }

    /// `self - o` for a part `o` of `self` (the broker as the process minus its clients): as
    /// [`Usage::minus`], but the kernel's user/system split is a tick-sampled estimate made per
    /// thread and per process separately, so one side can come out negative while the total is
    /// exact; a negative side is moved to the other (total kept), and nothing stays below 0.
    pub(crate) fn minus_part(self, o: Usage) -> Usage {
        let mut d = self.minus(o);
        if d.user < 0.0 {
            d.sys += d.user;
            d.user = 0.0;
        }
        if d.sys < 0.0 {
            d.user = (d.user + d.sys).max(0.0);
            d.sys = 0.0;
        }
        d.minflt = d.minflt.max(0.0);
        d.majflt = d.majflt.max(0.0);
        d.csw = d.csw.max(0.0);
        d
    }

    /// `self + o`, field by field.
    pub(crate) fn plus(self, o: Usage) -> Usage {
        Usage {
            user: self.user + o.user,
            sys: self.sys + o.sys,
            minflt: self.minflt + o.minflt,
            majflt: self.majflt + o.majflt,
            csw: self.csw + o.csw,
        }
    }
}

/// A fixed amount of CPU work, timed: CRC32C (the SSE4.2 / ARMv8 instruction through the
/// `crc32c` crate) over a 1 MiB buffer 256 times, on the calling thread; GB/s (1e9 bytes).
/// About 25 ms. The run takes it on the broker's CPUs before each combination: the work never
/// changes, so a figure that moves between combinations is the CPU that moved (frequency, a
/// busy host the guest's steal time does not show).
pub(crate) fn cpu_probe_gb_per_s() -> f64 {
    const ROUNDS: usize = 256;
    let buf = vec![0x5au8; 1 << 20];
    let mut crc = crc32c::crc32c(&buf); // warm: the buffer in cache, the code paged in
    let start = std::time::Instant::now();
    for _ in 0..ROUNDS {
        crc = crc32c::crc32c_append(crc, std::hint::black_box(&buf));
    }
    std::hint::black_box(crc);
    (ROUNDS * buf.len()) as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e9
}

/// The fraction (0..=1) of the bytes of `files` in the page cache (`mincore`); 1.0 for none.
pub(crate) fn residency(files: &[PathBuf]) -> f64 {
    let (mut resident, mut total) = (0.0, 0.0);
    for f in files {
        let Ok(file) = File::open(f) else { continue };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0) as f64;
        if let Ok(r) = resident_fraction(&file) {
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

/// Evicts `file` from the page cache: `fdatasync` (dirty pages are not dropped), then
/// `posix_fadvise(0, 0, POSIX_FADV_DONTNEED)`. Pages mapped by anyone stay resident: unmap
/// first, and check with [`resident_fraction`].
///
/// Errors: the `fdatasync` or `posix_fadvise` error.
pub fn evict_from_page_cache(file: &File) -> io::Result<()> {
    nix::unistd::fdatasync(file.as_fd())?;
    nix::fcntl::posix_fadvise(file.as_fd(), 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED)?;
    Ok(())
}

/// The fraction (0.0 to 1.0) of `file`'s pages resident in the page cache, from `mincore` over a
/// read-only mapping of the whole file (mapping faults nothing in). An empty file gives 1.0.
///
/// `file` must be open for reading (a write-only descriptor cannot be mapped).
///
/// Errors: the `mmap` or `mincore` error.
pub fn resident_fraction(file: &File) -> io::Result<f64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(1.0);
    }
    // SAFETY: the mapping is never read or written through; its address range is only handed to
    // `mincore`, so a concurrent change or truncation of the file cannot be observed as memory.
    let map = unsafe { memmap2::Mmap::map(file)? };
    // SAFETY: `sysconf` only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as usize } else { 4096 };
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes at a page-aligned address, and `vec`
    // has one writable byte per page of it, as `mincore` requires.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
    Ok(resident as f64 / pages as f64)
}

/// Pins the calling thread to `cpus` (`sched_setaffinity`); threads it spawns afterwards
/// inherit the mask (how the embedded broker's threads, and the kernel's `iou-wrk` workers of
/// its rings, end up on the broker's CPUs).
///
/// Errors: `sched_setaffinity`'s (a CPU this process may not use).
pub(crate) fn pin_current_thread(cpus: &[usize]) -> anyhow::Result<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(|e| anyhow::anyhow!("cpu_pinning: CPU {c}: {e}"))?;
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| anyhow::anyhow!("cpu_pinning: sched_setaffinity({cpus:?}): {e}"))
}

/// The CPUs this process may run on (`sched_getaffinity`), ascending; empty when unknown.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    match sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect(),
        Err(_) => Vec::new(),
    }
}

/// The summed resource use of this process's threads whose name (`comm`, at most 15 bytes)
/// starts with one of `prefixes`, from `/proc/self/task/*/schedstat` (exact CPU time),
/// `.../stat` (its user/system split, faults) and `.../status` (context switches). Threads that ended are not
/// counted: take both snapshots while the threads live.
pub(crate) fn threads_usage(prefixes: &[&str]) -> Usage {
    // SAFETY: `sysconf` only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let mut total = Usage::default();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return total };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // `pid (comm) state ...`: comm may hold spaces and parentheses; it ends at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        if !prefixes.iter().any(|p| comm.starts_with(p)) {
            continue;
        }
        // Fields after comm, from field 3 (state): minflt = 10, majflt = 12, utime = 14, stime = 15.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        // CPU: the exact runtime (`schedstat`, ns) split as the tick-sampled user:system
        // ratio; the ticks alone (10 ms steps) where schedstat is missing.
        let (utime, stime) = (field(14) / ticks, field(15) / ticks);
        let exact = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()))
            .map(|ns| ns / 1e9);
        let (user, sys) = match exact {
            Some(total) if utime + stime > 0.0 => (total * utime / (utime + stime), total * stime / (utime + stime)),
            Some(total) => (0.0, total),
            None => (utime, stime),
        };
        let csw = std::fs::read_to_string(task.path().join("status"))
            .map(|s| {
                s.lines()
                    .filter(|l| l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches"))
                    .filter_map(|l| l.split(':').nth(1).and_then(|v| v.trim().parse::<f64>().ok()))
                    .sum()
            })
            .unwrap_or(0.0);
        total = total.plus(Usage { user, sys, minflt: field(10), majflt: field(12), csw });
    }
    total
}
