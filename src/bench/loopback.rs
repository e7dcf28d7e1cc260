//! Measuring one read path alone: a file's bytes moved to a loopback TCP receiver that drains
//! and discards them, with wall time, system calls and process CPU counted.
//!
//! [`measure`] is what `fetchbench read-paths` ([`super::read_paths`]) runs for each path; the
//! pieces it is built from ([`LoopbackReceiver`] here, [`evict_from_page_cache`] and
//! [`resident_fraction`] in [`super::usage`]) are public so the criterion benches
//! (`benches/read_paths.rs`) measure the same way.
//!
//! ## What is measured
//!
//! A *pass* sweeps the file from position 0 in `slice_size` slices (the last one shorter), each a
//! [`ReadPath::transfer`] to the socket. One pass (at most `total_bytes`) runs first as a warm-up
//! and is excluded; then passes run until `total_bytes` have been moved (the last pass is cut
//! short). A pass ends when the receiver has received its last byte, so the wall time is end to
//! end, not just "queued into the socket buffer".
//!
//! - Page cache *hot* (the default): the file is read once before the warm-up, and every pass
//!   finds it cached; [`Measurement::resident_fraction_min`] shows it was (about 1.0).
//! - Page cache *cold*: before each measured pass the path is dropped (unmapping whatever it
//!   mapped), the file is `fdatasync`ed and evicted with `posix_fadvise(POSIX_FADV_DONTNEED)`,
//!   then `mincore` counts the pages still resident: [`Measurement::resident_fraction_max`] is the
//!   worst pass (about 0.0 when the eviction worked). Eviction and checking are outside the
//!   timed and CPU-counted region.
//!
//! ## CPU accounting: the receiver is inside the process
//!
//! CPU time is process-wide ([`Usage::now`] of `RUSAGE_SELF`, `getrusage`), so it includes
//! io_uring's `iou-wrk` threads, as it must, and also the receiver thread, which is the same for
//! every path. Two ways to take it out:
//!
//! - [`Measurement::receiver_cpu_seconds`] is the receiver thread's own CPU clock
//!   (`pthread_getcpuclockid`) over the measured passes, and
//!   [`Measurement::sender_cpu_seconds_per_gb`] is the process's minus the receiver's;
//! - or measure the `null` path in the same run (it reads no file): its CPU s/GB is the harness's
//!   own cost, socket and receiver included.
//!
//! Ratios between paths measured in one run stay comparable either way. Note that on loopback
//! the kernel runs most of the *receiving* TCP stack (softirq) in the sending thread's context,
//! so the receiver thread's own clock shows only its `recv` copies: "sender" CPU still holds
//! much of the receive path. Only the `null` baseline subtracts the whole socket cost.
//!
//! Units: GB = 1e9 bytes, MB = 1e6 bytes; seconds are wall-clock (`Instant`).

use std::fs::File;
use std::io::{self, Read};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::resource::UsageWho;

use super::usage::{evict_from_page_cache, resident_fraction, Usage};
use crate::log::segment::SegmentFile;
use crate::log::FileSlice;
use crate::read_path::msg_zerocopy::ZerocopyStats;
use crate::read_path::{AnyReadPath, CreateError, ReadPath, ReadPathConfig, ReadPathKind, TransferStats};

/// The result of measuring one read path. See the module docs for what a pass is and what the
/// CPU figures include.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// The path asked for.
    pub requested: ReadPathKind,
    /// The path that actually ran ([`AnyReadPath::kind`]); never silently another one.
    pub path: ReadPathKind,
    /// The measured file.
    pub file: PathBuf,
    /// Its size in bytes.
    pub file_size: u64,
    /// Bytes per `transfer` call (the last slice of a pass may be shorter).
    pub slice_size: u64,
    /// Whether the page cache was cold (evicted before each measured pass) or hot.
    pub cold_cache: bool,
    /// Measured passes (the warm-up pass excluded).
    pub passes: u32,
    /// Bytes moved in the measured passes (= the `total_bytes` asked for).
    pub bytes: u64,
    /// Wall time of the measured passes, in seconds.
    pub seconds: f64,
    /// Throughput: `bytes / seconds / 1e9`.
    pub gb_per_sec: f64,
    /// Process user CPU over the measured passes, in seconds (receiver thread included).
    pub cpu_user_seconds: f64,
    /// Process system CPU over the measured passes, in seconds (receiver thread included).
    pub cpu_system_seconds: f64,
    /// `cpu_user_seconds` per GB moved.
    pub cpu_user_seconds_per_gb: f64,
    /// `cpu_system_seconds` per GB moved.
    pub cpu_system_seconds_per_gb: f64,
    /// User + system CPU seconds per GB moved (process-wide, receiver included).
    pub cpu_seconds_per_gb: f64,
    /// The receiver thread's own CPU (user + system) over the measured passes, in seconds, when
    /// its clock could be read.
    pub receiver_cpu_seconds: Option<f64>,
    /// Process CPU minus the receiver's, per GB: the sending side (the read path, its kernel
    /// work and `iou-wrk` threads, and the harness loop).
    pub sender_cpu_seconds_per_gb: Option<f64>,
    /// System calls (or SQEs plus `io_uring_enter` calls) the path counted.
    pub syscalls: u64,
    /// `syscalls` per MB moved.
    pub syscalls_per_mb: f64,
    /// The path's counters over the measured passes.
    pub stats: TransferStats,
    /// For `msg-zerocopy`, what the kernel did with its sends over the measured passes (how
    /// many it copied: on loopback, every one); `None` for the other paths.
    pub zerocopy: Option<ZerocopyStats>,
    /// The smallest fraction of the file's pages resident in the page cache at the start of a
    /// measured pass (`mincore`).
    pub resident_fraction_min: f64,
    /// The largest such fraction: for a cold-cache run, how well eviction worked (0.0 = fully).
    pub resident_fraction_max: f64,
}

/// Errors measuring a read path. Each names the file and, for a failed transfer, the slice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MeasureError {
    /// The parameters cannot describe a measurement.
    #[error("invalid measurement of {path}: {reason}")]
    InvalidArgument {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Opening or inspecting the file failed.
    #[error("opening {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The read path cannot be created (unsupported here, or its setup failed).
    #[error(transparent)]
    Create(#[from] CreateError),
    /// The loopback receiver could not be set up, or failed.
    #[error("loopback receiver: {source}")]
    Receiver {
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A transfer failed.
    #[error("read path {kind} failed moving {len} bytes at position {position} of {path}: {source}")]
    Transfer {
        /// The path that ran.
        kind: ReadPathKind,
        /// The file.
        path: PathBuf,
        /// The slice's position.
        position: u64,
        /// The slice's length.
        len: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Evicting the file from the page cache, or checking residency, failed.
    #[error("evicting {path} from the page cache: {source}")]
    Evict {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The receiver got a different number of bytes than were sent.
    #[error("the receiver got {received} bytes, but {sent} were sent")]
    ByteCount {
        /// Bytes the paths reported sent.
        sent: u64,
        /// Bytes the receiver counted.
        received: u64,
    },
}

/// Measures `kind` moving `file` (page-cached, or evicted when `cold_cache`) to a loopback TCP
/// receiver, in `slice_size`-byte transfers, `total_bytes` in all after a warm-up pass. See the
/// module docs for passes, cold cache and what the CPU figures include.
///
/// Errors: [`MeasureError::InvalidArgument`] for an empty file or a zero `slice_size` /
/// `total_bytes`; [`MeasureError::Create`] when the path is unsupported here (the probe's reason)
/// or its setup fails; [`MeasureError::Transfer`] naming the slice when a transfer fails; the
/// other variants for the harness's own I/O.
pub fn measure(
    kind: ReadPathKind,
    config: &ReadPathConfig,
    file: &Path,
    slice_size: u64,
    total_bytes: u64,
    cold_cache: bool,
) -> Result<Measurement, MeasureError> {
    let invalid = |reason: &str| MeasureError::InvalidArgument { path: file.to_path_buf(), reason: reason.into() };
    if slice_size == 0 {
        return Err(invalid("the slice size is 0"));
    }
    if total_bytes == 0 {
        return Err(invalid("the total is 0 bytes"));
    }
    let open_err = |source| MeasureError::Open { path: file.to_path_buf(), source };
    let segment = Arc::new(SegmentFile::open_read_only(file).map_err(open_err)?);
    let file_size = segment.file().metadata().map_err(open_err)?.len();
    if file_size == 0 {
        return Err(invalid("the file is empty"));
    }

    let mut path = kind.create(config)?;
    let receiver = LoopbackReceiver::start().map_err(|source| MeasureError::Receiver { source })?;
    let evict_err = |source| MeasureError::Evict { path: file.to_path_buf(), source };

    if !cold_cache {
        read_through(segment.file(), file_size).map_err(open_err)?;
    }
    // Warm-up pass: excluded.
    let mut sent = run_pass(&mut path, &segment, file, slice_size, total_bytes.min(file_size), receiver.socket())?;
    receiver.wait_for(sent).map_err(|source| MeasureError::Receiver { source })?;
    let _ = path.take_stats();
    let _ = take_zerocopy_stats(&mut path);

    let mut stats = TransferStats::default();
    let mut zerocopy = take_zerocopy_stats(&mut path);
    let mut wall = Duration::ZERO;
    let (mut user, mut system) = (0.0f64, 0.0f64);
    let mut receiver_cpu = Some(Duration::ZERO);
    let (mut resident_min, mut resident_max) = (f64::INFINITY, 0.0f64);
    let mut passes = 0u32;
    let mut left = total_bytes;
    while left > 0 {
        if cold_cache {
            // Drop the path first: a mapping it holds would keep the pages in the cache.
            stats.add(&path.take_stats());
            add_zerocopy(&mut zerocopy, take_zerocopy_stats(&mut path));
            drop(path);
            evict_from_page_cache(segment.file()).map_err(evict_err)?;
            path = kind.create(config)?;
        }
        let resident = resident_fraction(segment.file()).map_err(evict_err)?;
        resident_min = resident_min.min(resident);
        resident_max = resident_max.max(resident);

        let pass_len = left.min(file_size);
        let receiver_before = receiver.cpu_time();
        let cpu_before = Usage::now(UsageWho::RUSAGE_SELF);
        let start = Instant::now();
        sent += run_pass(&mut path, &segment, file, slice_size, pass_len, receiver.socket())?;
        receiver.wait_for(sent).map_err(|source| MeasureError::Receiver { source })?;
        wall += start.elapsed();
        let cpu = Usage::now(UsageWho::RUSAGE_SELF).minus(cpu_before);
        receiver_cpu = match (receiver_cpu, receiver_before, receiver.cpu_time()) {
            (Some(acc), Some(before), Some(after)) => Some(acc + after.saturating_sub(before)),
            _ => None,
        };
        user += cpu.user.max(0.0);
        system += cpu.sys.max(0.0);
        left -= pass_len;
        passes += 1;
    }
    stats.add(&path.take_stats());
    add_zerocopy(&mut zerocopy, take_zerocopy_stats(&mut path));
    let ran = path.kind();
    drop(path);
    let received = receiver.finish().map_err(|source| MeasureError::Receiver { source })?;
    if received != sent {
        return Err(MeasureError::ByteCount { sent, received });
    }

    let seconds = wall.as_secs_f64();
    let gb = total_bytes as f64 / 1e9;
    let (user_s, system_s) = (user, system);
    let receiver_cpu_seconds = receiver_cpu.map(|d| d.as_secs_f64());
    Ok(Measurement {
        requested: kind,
        path: ran,
        file: file.to_path_buf(),
        file_size,
        slice_size,
        cold_cache,
        passes,
        bytes: total_bytes,
        seconds,
        gb_per_sec: if seconds > 0.0 { gb / seconds } else { f64::INFINITY },
        cpu_user_seconds: user_s,
        cpu_system_seconds: system_s,
        cpu_user_seconds_per_gb: user_s / gb,
        cpu_system_seconds_per_gb: system_s / gb,
        cpu_seconds_per_gb: (user_s + system_s) / gb,
        receiver_cpu_seconds,
        sender_cpu_seconds_per_gb: receiver_cpu_seconds.map(|r| (user_s + system_s - r).max(0.0) / gb),
        syscalls: stats.syscalls,
        syscalls_per_mb: stats.syscalls as f64 / (total_bytes as f64 / 1e6),
        stats,
        zerocopy,
        resident_fraction_min: resident_min,
        resident_fraction_max: resident_max,
    })
}

/// `msg-zerocopy`'s counters, reset (`None` for another path).
fn take_zerocopy_stats(path: &mut AnyReadPath) -> Option<ZerocopyStats> {
    match path {
        AnyReadPath::MsgZerocopy(p) => Some(p.take_zerocopy_stats()),
        _ => None,
    }
}

/// Adds `more` to `acc` (both `None` for a path without zerocopy counters).
fn add_zerocopy(acc: &mut Option<ZerocopyStats>, more: Option<ZerocopyStats>) {
    match (acc.as_mut(), more) {
        (Some(a), Some(m)) => a.add(&m),
        (None, Some(m)) => *acc = Some(m),
        (_, None) => {}
    }
}

/// One pass: `len` bytes from position 0 in `slice_size` slices. Returns the bytes sent.
fn run_pass(
    path: &mut AnyReadPath,
    segment: &Arc<SegmentFile>,
    file: &Path,
    slice_size: u64,
    len: u64,
    socket: BorrowedFd<'_>,
) -> Result<u64, MeasureError> {
    let mut position = 0u64;
    while position < len {
        let slice = FileSlice { segment: Arc::clone(segment), position, len: slice_size.min(len - position) };
        match path.transfer(&slice, socket) {
            Ok(n) => position += n,
            Err(source) => {
                return Err(MeasureError::Transfer {
                    kind: path.kind(),
                    path: file.to_path_buf(),
                    position: slice.position,
                    len: slice.len,
                    source,
                })
            }
        }
    }
    Ok(position)
}

/// Reads the first `len` bytes of `file` once (into a scratch buffer), so they are page-cached.
fn read_through(file: &File, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut position = 0u64;
    while position < len {
        let n = file.read_at(&mut buf, position)?;
        if n == 0 {
            break;
        }
        position += n as u64;
    }
    Ok(())
}

/// A thread that accepts one loopback TCP connection (127.0.0.1) and reads and discards
/// everything sent on it, counting the bytes. The sending end is [`LoopbackReceiver::socket`].
#[derive(Debug)]
pub struct LoopbackReceiver {
    sender: TcpStream,
    received: Arc<AtomicU64>,
    thread: JoinHandle<io::Result<u64>>,
}

impl LoopbackReceiver {
    /// Binds 127.0.0.1 on a free port, starts the draining thread and connects to it.
    ///
    /// Errors: the `bind`, `connect` or thread-spawn error.
    pub fn start() -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let addr = listener.local_addr()?;
        let received = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&received);
        let thread = std::thread::Builder::new().name("loopback-receiver".into()).spawn(move || {
            let (mut stream, _) = listener.accept()?;
            drop(listener);
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => return Ok(total),
                    Ok(n) => {
                        total += n as u64;
                        counter.store(total, Ordering::Release);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        })?;
        let sender = TcpStream::connect(addr)?;
        Ok(LoopbackReceiver { sender, received, thread })
    }

    /// The sending socket (a blocking TCP socket connected to the receiver).
    pub fn socket(&self) -> BorrowedFd<'_> {
        self.sender.as_fd()
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Acquire)
    }

    /// Waits until the receiver has received `bytes` in all (polling every 20 µs, so the wait
    /// costs little CPU). Errors: `UnexpectedEof` when the receiver thread ended first.
    pub fn wait_for(&self, bytes: u64) -> io::Result<()> {
        while self.received() < bytes {
            if self.thread.is_finished() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the receiver stopped after {} of {bytes} bytes", self.received()),
                ));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }

    /// The receiver thread's CPU time so far (user + system, its own clock), or `None` when it
    /// cannot be read (the thread ended, or the clock is unavailable).
    pub fn cpu_time(&self) -> Option<Duration> {
        if self.thread.is_finished() {
            return None;
        }
        let thread = self.thread.as_pthread_t();
        let mut clock: libc::clockid_t = 0;
        // SAFETY: `thread` is a running thread we own the join handle of (checked above; it
        // cannot be joined while `self` is borrowed), and `clock` is a valid out pointer.
        if unsafe { libc::pthread_getcpuclockid(thread, &mut clock) } != 0 {
            return None;
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out pointer; an invalid clock id only makes the call fail.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return None;
        }
        Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Closes the sending side and waits for the receiver; returns the bytes it received.
    ///
    /// Errors: the receiver's read error, or `Other` if the thread panicked.
    pub fn finish(self) -> io::Result<u64> {
        drop(self.sender);
        self.thread.join().map_err(|_| io::Error::other("the receiver thread panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A synced file of `len` bytes in a temp dir (removed when the dir drops, even on panic).
    fn temp_file(len: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment.dat");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![0x5a; len]).unwrap();
        f.sync_all().unwrap();
        (dir, path)
    }

    #[test]
    fn measures_copy_hot_and_counts_bytes() {
        let (_dir, path) = temp_file(300_000);
        let m = measure(ReadPathKind::Copy, &ReadPathConfig::default(), &path, 64 * 1024, 1_000_000, false).unwrap();
        assert_eq!(m.path, ReadPathKind::Copy);
        assert_eq!(m.bytes, 1_000_000);
        assert_eq!(m.stats.bytes, 1_000_000);
        assert_eq!(m.passes, 4);
        assert!(m.syscalls > 0 && m.seconds > 0.0);
        assert!(m.resident_fraction_min > 0.99, "{m:?}");
    }

    #[test]
    fn cold_cache_evicts() {
        let (_dir, path) = temp_file(1 << 20);
        let m = measure(ReadPathKind::Sendfile, &ReadPathConfig::default(), &path, 1 << 16, 2 << 20, true).unwrap();
        // Eviction is advisory (a tmpfs keeps everything): only check the figure is a fraction.
        assert!((0.0..=1.0).contains(&m.resident_fraction_max), "{m:?}");
        assert!(m.cold_cache);
        let f = File::open(&path).unwrap();
        assert!((0.0..=1.0).contains(&resident_fraction(&f).unwrap()));
    }

    #[test]
    fn rejects_bad_arguments() {
        let (_dir, path) = temp_file(10);
        let cfg = ReadPathConfig::default();
        assert!(matches!(
            measure(ReadPathKind::Copy, &cfg, &path, 0, 10, false),
            Err(MeasureError::InvalidArgument { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(measure(ReadPathKind::Copy, &cfg, &path, 1, 10, false), Err(MeasureError::Open { .. })));
    }
}
