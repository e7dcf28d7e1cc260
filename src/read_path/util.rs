//! Blocking-socket helpers shared by the read paths, and small system facts they need (the page
//! size, a `/proc/sys` setting).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::transfer::TransferStats;

/// Waits until `fd` is writable (for a non-blocking socket that returned `EAGAIN`). A peer that
/// went away shows as writable, and the next write then reports the error.
pub(crate) fn wait_writable(fd: BorrowedFd<'_>, stats: &mut TransferStats) -> io::Result<()> {
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
        stats.syscalls += 1;
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Writes all of `buf` to `fd` with blocking semantics: short writes continued, `EINTR`
/// retried, `EAGAIN` waited out. `MSG_NOSIGNAL` keeps a closed peer from raising `SIGPIPE`: the
/// error is `BrokenPipe` instead. Works on sockets and pipes alike (falls back to `write` for a
/// descriptor that is not a socket). `sent` grows by every byte the kernel took, also when an
/// error ends the call part-way (so the caller's byte count stays exact).
pub(crate) fn write_all(
    fd: BorrowedFd<'_>,
    mut buf: &[u8],
    stats: &mut TransferStats,
    sent: &mut u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        stats.syscalls += 1;
        // SAFETY: `buf` is a valid readable slice for its length and `fd` is a live descriptor
        // borrowed for the duration of the call.
        let n = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n >= 0 {
            buf = &buf[n as usize..];
            *sent += n as u64;
            continue;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) => wait_writable(fd, stats)?,
            Some(libc::ENOTSOCK) => write_all_plain(fd, &mut buf, stats, sent)?,
            _ => return Err(err),
        }
    }
    Ok(())
}

fn write_all_plain(fd: BorrowedFd<'_>, buf: &mut &[u8], stats: &mut TransferStats, sent: &mut u64) -> io::Result<()> {
    while !buf.is_empty() {
        stats.syscalls += 1;
        match nix::unistd::write(fd, buf) {
            Ok(n) => {
                *buf = &buf[n..];
                *sent += n as u64;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => wait_writable(fd, stats)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The error a path returns when the file ended `missing` bytes before the slice did.
pub(crate) fn truncated(missing: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file ended {missing} bytes before the slice (truncated under the reader?)"),
    )
}

/// A one-line `/proc/sys` setting (e.g. `/proc/sys/fs/pipe-max-size`), trimmed; `None` when it
/// cannot be read.
pub(crate) fn read_setting(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The size of a memory page in bytes (`sysconf(_SC_PAGESIZE)`; 4096 if it cannot be read).
pub(crate) fn page_size() -> u64 {
    // SAFETY: `sysconf` reads a constant of the system; it takes no pointers.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page_size).ok().filter(|p| *p > 0).unwrap_or(4096)
}
