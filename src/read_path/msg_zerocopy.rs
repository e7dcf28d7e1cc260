//! `msg-zerocopy`: the segment file mapped read-only (the mappings of the `mmap` path), and
//! `send(MSG_ZEROCOPY)` from the mapping: the kernel pins the mapped page-cache pages and sends
//! them without copying them into the socket buffer, then reports on the socket's error queue
//! when it no longer needs them (Documentation/networking/msg_zerocopy.rst, Linux 4.14+).
//!
//! ## How a transfer runs
//!
//! 1. `setsockopt(SO_ZEROCOPY, 1)` on the socket, every transfer (one system call: the path sees
//!    a socket descriptor per transfer, and a descriptor number can be reused by another socket,
//!    so a cached "already set" could lie).
//! 2. The slice's part of the file, mapped whole and cached as `mmap` does (`mmap::Mappings`),
//!    goes out in 1 MiB `send(MSG_ZEROCOPY | MSG_NOSIGNAL)` calls, with the file's size checked
//!    between them (as `mmap` does). Short sends are continued, `EINTR` retried, `EAGAIN`
//!    waited out with `poll(POLLOUT)` after draining the error queue (a pending completion
//!    would make `poll` return at once). `ENOBUFS` (the socket's `net.core.optmem_max` or the
//!    user's `RLIMIT_MEMLOCK`, which pinned pages are charged to without `CAP_IPC_LOCK`, is
//!    used up) waits for a completion, which frees both, and sends again; with nothing in flight
//!    it is an error naming both limits.
//! 3. Before `transfer` returns, on success and on error, it waits until a completion covers
//!    every send it made (`poll` for `POLLERR`, then `recvmsg(MSG_ERRQUEUE)`): each completion is
//!    a `sock_extended_err` with `ee_origin = SO_EE_ORIGIN_ZEROCOPY` naming the inclusive range
//!    `ee_info ..= ee_data` of send numbers (the kernel numbers a socket's zerocopy sends from 0
//!    and merges adjacent ranges), and `SO_EE_CODE_ZEROCOPY_COPIED` in `ee_code` when the kernel
//!    copied the data after all. So when `transfer` returns, the kernel holds no page of the
//!    mapping: the contract's "nothing in flight" holds (see below for a connection that dies).
//!
//! A file shorter than the slice: the bytes that exist are sent, then `UnexpectedEof`
//! (`util::truncated`); a page that vanished under a `send` faults in the kernel as `EFAULT`
//! (never SIGBUS: this process never touches mapped bytes), also reported as `UnexpectedEof`.
//! The peer gone: `BrokenPipe` / `ConnectionReset` (`MSG_NOSIGNAL`: no SIGPIPE).
//!
//! ## Where the kernel copies anyway (loopback, Unix sockets)
//!
//! The kernel decides per send whether it avoids the copy, and says so in the completion:
//!
//! - **Loopback TCP: always copied.** A zerocopy skb delivered to a local socket is copied on
//!   delivery (`skb_orphan_frags_rx`), so the data is copied once anyway, later, and the
//!   completion says `SO_EE_CODE_ZEROCOPY_COPIED`; the sender also pays for pinning the pages and
//!   reading the error queue. `fetchbench read-paths` and a broker with local clients measure
//!   that cost, not the zero-copy gain, which needs a real NIC with scatter-gather.
//! - **Sockets without zerocopy (`AF_UNIX`)**: `setsockopt(SO_ZEROCOPY)` fails with `EOPNOTSUPP`
//!   (only TCP, UDP, RDS and vsock have it), and the kernel ignores `MSG_ZEROCOPY` on a socket
//!   without `SO_ZEROCOPY` (the option is the opt-in guard, msg_zerocopy.rst): the very same
//!   `send` call copies, as `send` always did, and no completion comes. The path does not switch
//!   to another mechanism; it issues the same call and counts each such send as copied.
//!
//! [`ZerocopyStats`] ([`MsgZerocopyPath::take_zerocopy_stats`]) counts both: `copied_sends`
//! is the sends whose bytes the kernel copied (reported copied, or sent on a socket without
//! zerocopy), next to `sends`, so a result can say how much zero copy actually happened.
//!
//! ## The mapping while the kernel holds its pages
//!
//! A zerocopy send pins page-cache pages until its completion; changing them meanwhile would
//! change the bytes sent. The mapping is read-only and fetchbench's log never rewrites a written
//! byte of a segment, and `transfer` waits for every completion. The one race is `mmap`'s, wider:
//! truncating a file zeroes the tail of the page (folio) holding its new end, also in a page
//! already pinned by a send that is still queued, so up to that page's end zeros can be sent
//! for bytes that were cut. The log never truncates a readable segment.
//!
//! A connection shut down or reset under a transfer frees its queued data, and the completions
//! arrive at once. A socket that reports hang-up while some completions have not come (its data
//! still queued, e.g. `shutdown(SHUT_RDWR)` by the broker's write deadline with a peer that does
//! not read) is given up to about one second, then the transfer fails saying how many sends are
//! unacknowledged ([`ZerocopyStats::abandoned_sends`]): the kernel keeps its own reference to
//! every pinned page, so nothing unsafe remains, only pages that the mapping never writes.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::mmap::Mappings;
use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::FileSlice;

/// `SO_ZEROCOPY` (include/uapi/asm-generic/socket.h, the value of x86-64, arm64 and riscv;
/// missing from the `libc` crate).
const SO_ZEROCOPY: libc::c_int = 60;
/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h): a zerocopy completion.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (include/uapi/linux/errqueue.h): the kernel copied the data.
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Bytes per `send` from the mapping (the file size is re-checked between chunks), as `mmap`.
const CHUNK: u64 = 1024 * 1024;

/// How long a socket that reports hang-up with completions outstanding is given for them.
const HANGUP_GRACE: Duration = Duration::from_secs(1);

/// What the kernel did with this path's sends, cumulative since creation or the last
/// [`MsgZerocopyPath::take_zerocopy_stats`]. After a transfer that returned `Ok`,
/// `completed_sends + unsupported_sends == sends`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZerocopyStats {
    /// `send(MSG_ZEROCOPY)` calls that moved at least one byte.
    pub sends: u64,
    /// Sends acknowledged by a completion from the error queue (sockets with `SO_ZEROCOPY`).
    pub completed_sends: u64,
    /// Sends whose bytes the kernel copied: those whose completion carried
    /// `SO_EE_CODE_ZEROCOPY_COPIED` (every send on loopback), plus every send on a socket without
    /// `SO_ZEROCOPY` (`unsupported_sends`). The kernel merges adjacent completions into one
    /// range, and a merged range carries the code of its first part (net/core/skbuff.c,
    /// `skb_zerocopy_notify_extend`), so this is the kernel's report, range by range.
    pub copied_sends: u64,
    /// Sends on a socket that refused `SO_ZEROCOPY` (`EOPNOTSUPP`: a Unix socket): copied, no
    /// completion.
    pub unsupported_sends: u64,
    /// Sends whose completion never came because the connection hung up first (see the module
    /// docs); 0 unless a transfer failed that way.
    pub abandoned_sends: u64,
}

impl ZerocopyStats {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &ZerocopyStats) {
        self.sends += other.sends;
        self.completed_sends += other.completed_sends;
        self.copied_sends += other.copied_sends;
        self.unsupported_sends += other.unsupported_sends;
        self.abandoned_sends += other.abandoned_sends;
    }
}

/// One zerocopy completion: sends `lo ..= hi` (the kernel's per-socket send numbers, which wrap
/// at 2^32) are done; `copied` when the kernel reported `SO_EE_CODE_ZEROCOPY_COPIED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Completion {
    lo: u32,
    hi: u32,
    copied: bool,
}

impl Completion {
    /// How many sends the range covers (1 to 2^32).
    fn sends(self) -> u64 {
        u64::from(self.hi.wrapping_sub(self.lo)) + 1
    }
}

/// Finds the zerocopy completion in the control messages of one `recvmsg(MSG_ERRQUEUE)`
/// (`control`: the `msg_control` bytes the kernel filled, `msg_controllen` long). The kernel
/// puts it in a `SOL_IP`/`IP_RECVERR` (IPv4) or `SOL_IPV6`/`IPV6_RECVERR` (IPv6) message
/// holding a `struct sock_extended_err` (include/uapi/linux/errqueue.h, ip(7)).
///
/// Returns `Ok(None)` when there is no such message; `Err` with the errno of an error-queue
/// entry that is not a zerocopy completion (`ee_errno` set: a real error reported on the socket)
/// or `InvalidData` for a malformed message (a length past the buffer). Never reads past
/// `control`.
fn parse_completion(control: &[u8]) -> io::Result<Option<Completion>> {
    let header = mem::size_of::<libc::cmsghdr>();
    let align = |n: usize| n.next_multiple_of(mem::size_of::<usize>());
    let mut at = 0usize;
    while at + header <= control.len() {
        // SAFETY: `at + header <= control.len()`, so the header's bytes are inside `control`;
        // `read_unaligned` copes with any alignment of the buffer.
        let cmsg: libc::cmsghdr = unsafe { std::ptr::read_unaligned(control.as_ptr().add(at).cast()) };
        let len = cmsg.cmsg_len as usize;
        if len < header || at + len > control.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a control message of {len} bytes at byte {at} of {} bytes", control.len()),
            ));
        }
        let data = &control[at + align(header)..at + len];
        let is_recverr = (cmsg.cmsg_level == libc::SOL_IP && cmsg.cmsg_type == libc::IP_RECVERR)
            || (cmsg.cmsg_level == libc::SOL_IPV6 && cmsg.cmsg_type == libc::IPV6_RECVERR);
        if is_recverr && data.len() >= mem::size_of::<libc::sock_extended_err>() {
            // SAFETY: `data` holds at least `size_of::<sock_extended_err>()` bytes; a plain-data
            // struct of integers, read unaligned.
            let ee: libc::sock_extended_err = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
            if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                return Ok(Some(Completion {
                    lo: ee.ee_info,
                    hi: ee.ee_data,
                    copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                }));
            }
            if ee.ee_errno != 0 {
                let errno = i32::try_from(ee.ee_errno).unwrap_or(libc::EIO);
                let err = io::Error::from_raw_os_error(errno);
                return Err(io::Error::new(
                    err.kind(),
                    format!("the socket's error queue reported {err} (origin {})", ee.ee_origin),
                ));
            }
        }
        at += align(len);
    }
    Ok(None)
}

/// Whether `SO_ZEROCOPY` works here: a TCP socket accepts it (Linux 4.14+). `Err` names the
/// cause: a kernel without it (`ENOPROTOOPT`), or no TCP socket to try it on.
pub(crate) fn probe() -> Result<(), String> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let tcp = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| format!("cannot create a TCP socket to try SO_ZEROCOPY on: {e}"))?;
    match enable_zerocopy(tcp.as_fd()) {
        Ok(()) => Ok(()),
        Err(e @ (Errno::ENOPROTOOPT | Errno::EINVAL)) => Err(format!(
            "setsockopt(SO_ZEROCOPY) on a TCP socket failed with {e}: this kernel lacks MSG_ZEROCOPY \
             (added in Linux 4.14)"
        )),
        Err(e) => Err(format!("setsockopt(SO_ZEROCOPY) on a TCP socket failed: {e}")),
    }
}

/// `setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, 1)`.
fn enable_zerocopy(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live `c_int` and the length passed is its size; `fd` is borrowed open.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct MsgZerocopyPath {
    maps: Mappings,
    stats: TransferStats,
    zerocopy: ZerocopyStats,
}

impl MsgZerocopyPath {
    /// A msg-zerocopy path with no mappings yet.
    pub fn new() -> Self {
        MsgZerocopyPath::default()
    }

    /// What the kernel did with the sends so far (see [`ZerocopyStats`]), reset to zero.
    pub fn take_zerocopy_stats(&mut self) -> ZerocopyStats {
        mem::take(&mut self.zerocopy)
    }
}

/// One transfer's sends on one socket, and the completions they still wait for.
struct Sends<'a> {
    socket: BorrowedFd<'a>,
    /// Whether the socket accepted `SO_ZEROCOPY` (completions will come).
    zerocopy: bool,
    /// Sends of this transfer not yet covered by a completion.
    outstanding: u64,
    stats: &'a mut TransferStats,
    counts: &'a mut ZerocopyStats,
}

impl Sends<'_> {
    /// Sends all of `buf` (mapped bytes; never read here) with `MSG_ZEROCOPY`, adding to `sent`
    /// every byte the kernel took, also when an error ends the call part-way.
    fn send_all(&mut self, mut buf: &[u8], sent: &mut u64) -> io::Result<()> {
        while !buf.is_empty() {
            self.stats.syscalls += 1;
            // SAFETY: `buf` is a valid range of a live read-only mapping (the caller holds it
            // until every completion has come, see the module docs); the kernel only pins or
            // copies it, faulting with EFAULT rather than SIGBUS. `socket` is borrowed open.
            let n = unsafe {
                libc::send(
                    self.socket.as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL,
                )
            };
            if n > 0 {
                buf = &buf[n as usize..];
                *sent += n as u64;
                self.counts.sends += 1;
                if self.zerocopy {
                    self.outstanding += 1;
                } else {
                    self.counts.unsupported_sends += 1;
                    self.counts.copied_sends += 1;
                }
                continue;
            }
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "send(MSG_ZEROCOPY) took 0 bytes"));
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => {
                    // A completion waiting in the error queue makes poll return at once.
                    self.reap()?;
                    util::wait_writable(self.socket, self.stats)?;
                }
                Some(libc::ENOBUFS) if self.zerocopy => {
                    if self.outstanding == 0 && self.reap()? == 0 {
                        return Err(io::Error::new(
                            err.kind(),
                            format!(
                                "send(MSG_ZEROCOPY) of {} bytes failed with {err} and no zerocopy send is in \
                                 flight: the chunk's pinned pages exceed RLIMIT_MEMLOCK (without \
                                 CAP_IPC_LOCK) or the socket's net.core.optmem_max is too small",
                                buf.len()
                            ),
                        ));
                    }
                    if self.outstanding > 0 {
                        self.wait_one()?;
                    }
                }
                _ => return Err(err),
            }
        }
        Ok(())
    }

    /// Reads every completion waiting in the error queue (never blocks); returns how many sends
    /// they covered. Errors: `recvmsg`'s other than `EAGAIN`/`EINTR`, and a non-zerocopy error
    /// in the queue (see [`parse_completion`]).
    fn reap(&mut self) -> io::Result<u64> {
        if !self.zerocopy {
            return Ok(0);
        }
        let mut covered = 0;
        loop {
            // u64 elements: aligned for `cmsghdr`; room for one `sock_extended_err` with the
            // offender's address.
            let mut control = [0u64; 16];
            // SAFETY: `msghdr` is plain data; all-zero is a valid empty header.
            let mut msg: libc::msghdr = unsafe { mem::zeroed() };
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = mem::size_of_val(&control) as _;
            self.stats.syscalls += 1;
            // SAFETY: `msg` points at `control`, which outlives the call, with its length; no
            // data iovec (a zerocopy completion carries no payload).
            let rc = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(covered),
                    Some(libc::EINTR) => continue,
                    _ => return Err(io::Error::new(err.kind(), format!("recvmsg(MSG_ERRQUEUE): {err}"))),
                }
            }
            let len = (msg.msg_controllen as usize).min(mem::size_of_val(&control));
            // SAFETY: `control` is `size_of_val(&control)` initialised bytes; `len` is within it.
            let bytes = unsafe { std::slice::from_raw_parts(control.as_ptr().cast::<u8>(), len) };
            if let Some(c) = parse_completion(bytes)? {
                let n = c.sends();
                covered += n;
                self.counts.completed_sends += n;
                if c.copied {
                    self.counts.copied_sends += n;
                }
                self.outstanding = self.outstanding.saturating_sub(n);
            }
        }
    }

    /// Waits for at least one completion (or a hang-up, see [`Sends::wait_all`]) and reads it.
    fn wait_one(&mut self) -> io::Result<()> {
        let before = self.outstanding;
        self.wait_until(|s| s.outstanding < before)
    }

    /// Waits until a completion covers every send of this transfer.
    fn wait_all(&mut self) -> io::Result<()> {
        self.wait_until(|s| s.outstanding == 0)
    }

    /// Reads completions, waiting for them with `poll` (error queue readable = `POLLERR`),
    /// until `done`. A socket that keeps reporting hang-up or an error with no completion to
    /// read is given [`HANGUP_GRACE`]; then the outstanding sends are counted abandoned and the
    /// error says how many.
    fn wait_until(&mut self, done: impl Fn(&Self) -> bool) -> io::Result<()> {
        let mut hung_up_since: Option<Instant> = None;
        loop {
            let got = self.reap()?;
            if done(self) {
                return Ok(());
            }
            if got > 0 {
                hung_up_since = None;
                continue;
            }
            if let Some(since) = hung_up_since {
                if since.elapsed() >= HANGUP_GRACE {
                    let n = self.outstanding;
                    self.counts.abandoned_sends += n;
                    self.outstanding = 0;
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        format!(
                            "the socket hung up with {n} zerocopy sends unacknowledged after {HANGUP_GRACE:?} \
                             (their data still queued; the kernel keeps its own page references)"
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // Events 0: POLLERR (error queue not empty, or a socket error) and POLLHUP are
            // always reported.
            let mut fds = [PollFd::new(self.socket, PollFlags::empty())];
            self.stats.syscalls += 1;
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(io::Error::new(io::Error::from(e).kind(), format!("poll(POLLERR): {e}"))),
            }
            let revents = fds[0].revents().unwrap_or(PollFlags::empty());
            if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLNVAL) {
                hung_up_since.get_or_insert_with(Instant::now);
            } else if revents.contains(PollFlags::POLLERR) && hung_up_since.is_none() {
                // A socket error (sk_err) with an empty queue also polls as POLLERR at once:
                // treat it like a hang-up, so this loop cannot spin past the grace period.
                hung_up_since = Some(Instant::now());
            }
        }
    }
}

impl ReadPath for MsgZerocopyPath {
    fn name(&self) -> &'static str {
        "msg-zerocopy"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut sent = 0u64;
        let result = if slice.len == 0 {
            Ok(())
        } else {
            self.stats.syscalls += 1;
            let zerocopy = match enable_zerocopy(socket) {
                Ok(()) => Ok(true),
                // A socket family without zerocopy (AF_UNIX): the same send copies; see the
                // module docs.
                Err(Errno::EOPNOTSUPP) => Ok(false),
                Err(e) => Err(io::Error::new(io::Error::from(e).kind(), format!("setsockopt(SO_ZEROCOPY): {e}"))),
            };
            match zerocopy {
                Err(e) => Err(e),
                Ok(zerocopy) => {
                    let mut sends =
                        Sends { socket, zerocopy, outstanding: 0, stats: &mut self.stats, counts: &mut self.zerocopy };
                    let result = send_slice(&mut self.maps, &mut sends, slice, &mut sent);
                    // Every send's completion, on success and on error: the kernel must be done
                    // with the mapping's pages before `transfer` returns.
                    let waited = sends.wait_all();
                    result.and(waited)
                }
            }
        };
        self.stats.finish(start, sent, result)
    }
    fn take_stats(&mut self) -> TransferStats {
        mem::take(&mut self.stats)
    }
}

/// Sends the slice from its file's mapping in [`CHUNK`]s, the file's size checked before the
/// first and between chunks (as `mmap` does); `sent` counts the bytes the kernel took.
fn send_slice(maps: &mut Mappings, sends: &mut Sends<'_>, slice: &FileSlice, sent: &mut u64) -> io::Result<()> {
    sends.stats.syscalls += 1;
    let file_len = slice.segment.file().metadata()?.len();
    let mut end = slice.position.saturating_add(slice.len).min(file_len);
    if slice.position < end {
        // One mapping for the whole transfer (covering `end`), held until its completions came.
        let map = maps.get(&slice.segment, end, file_len, sends.stats)?;
        while slice.position + *sent < end {
            let from = slice.position + *sent;
            let to = end.min(from + CHUNK);
            sends.send_all(&map[from as usize..to as usize], sent).map_err(|e| {
                if e.raw_os_error() == Some(libc::EFAULT) {
                    util::truncated(slice.len - *sent)
                } else {
                    e
                }
            })?;
            if slice.position + *sent < end {
                sends.stats.syscalls += 1;
                end = end.min(slice.segment.file().metadata()?.len());
            }
        }
    }
    if *sent < slice.len {
        return Err(util::truncated(slice.len - *sent));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::thread;

    use super::*;
    use crate::read_path::test_support::{reader, segment, slice, tcp_pair};

    fn supported(test: &str) -> bool {
        crate::read_path::test_support::supported(test, "msg-zerocopy", probe())
    }

    /// One control message as the kernel lays it out: `cmsghdr` then the payload, aligned.
    fn cmsg(level: i32, kind: i32, ee: libc::sock_extended_err) -> Vec<u8> {
        let payload = mem::size_of::<libc::sock_extended_err>() + mem::size_of::<libc::sockaddr_in>();
        // SAFETY: CMSG_SPACE / CMSG_LEN are pure arithmetic.
        let (space, len) = unsafe { (libc::CMSG_SPACE(payload as u32) as usize, libc::CMSG_LEN(payload as u32)) };
        let mut buf = vec![0u8; space];
        // SAFETY: `cmsghdr` is plain data; all-zero is valid.
        let mut header: libc::cmsghdr = unsafe { mem::zeroed() };
        header.cmsg_len = len as _;
        header.cmsg_level = level;
        header.cmsg_type = kind;
        let header_space = mem::size_of::<libc::cmsghdr>().next_multiple_of(mem::size_of::<usize>());
        // SAFETY: both writes stay inside `buf` (`space` covers header and payload).
        unsafe {
            std::ptr::write_unaligned(buf.as_mut_ptr().cast(), header);
            std::ptr::write_unaligned(buf.as_mut_ptr().add(header_space).cast(), ee);
        }
        buf
    }

    fn ee(origin: u8, errno: u32, code: u8, lo: u32, hi: u32) -> libc::sock_extended_err {
        libc::sock_extended_err {
            ee_errno: errno,
            ee_origin: origin,
            ee_type: 0,
            ee_code: code,
            ee_pad: 0,
            ee_info: lo,
            ee_data: hi,
        }
    }

    #[test]
    fn parser_reads_zerocopy_completions_of_ipv4_and_ipv6() {
        let buf = cmsg(libc::SOL_IP, libc::IP_RECVERR, ee(SO_EE_ORIGIN_ZEROCOPY, 0, 0, 7, 9));
        assert_eq!(parse_completion(&buf).unwrap(), Some(Completion { lo: 7, hi: 9, copied: false }));
        let buf = cmsg(
            libc::SOL_IPV6,
            libc::IPV6_RECVERR,
            ee(SO_EE_ORIGIN_ZEROCOPY, 0, SO_EE_CODE_ZEROCOPY_COPIED, u32::MAX, 1),
        );
        let c = parse_completion(&buf).unwrap().unwrap();
        assert_eq!(c, Completion { lo: u32::MAX, hi: 1, copied: true });
        assert_eq!(c.sends(), 3, "the send numbers wrap at 2^32");
        assert_eq!(Completion { lo: 5, hi: 5, copied: false }.sends(), 1);
    }

    #[test]
    fn parser_skips_other_messages_and_reports_errors() {
        // A message of another level first, then the completion.
        let mut buf = cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMP, ee(0, 0, 0, 0, 0));
        buf.extend(cmsg(libc::SOL_IP, libc::IP_RECVERR, ee(SO_EE_ORIGIN_ZEROCOPY, 0, 0, 0, 0)));
        assert_eq!(parse_completion(&buf).unwrap(), Some(Completion { lo: 0, hi: 0, copied: false }));
        // No completion at all.
        assert_eq!(parse_completion(&[]).unwrap(), None);
        assert_eq!(parse_completion(&cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMP, ee(0, 0, 0, 0, 0))).unwrap(), None);
        // A real error in the queue names its errno.
        let buf =
            cmsg(libc::SOL_IP, libc::IP_RECVERR, ee(2 /* SO_EE_ORIGIN_ICMP */, libc::EHOSTUNREACH as u32, 0, 0, 0));
        let err = parse_completion(&buf).unwrap_err();
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().contains("error queue"), "{err}");
        // A length past the buffer, or shorter than a header: InvalidData, no panic.
        let mut buf = cmsg(libc::SOL_IP, libc::IP_RECVERR, ee(SO_EE_ORIGIN_ZEROCOPY, 0, 0, 0, 0));
        buf.truncate(buf.len() - 8);
        let _ = parse_completion(&buf).unwrap_err();
        let mut buf = vec![0u8; mem::size_of::<libc::cmsghdr>()];
        buf[0] = 1;
        assert_eq!(parse_completion(&buf).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn probe_succeeds_or_names_the_cause() {
        match probe() {
            Ok(()) => eprintln!("msg-zerocopy probe: supported"),
            Err(reason) => assert!(reason.contains("SO_ZEROCOPY"), "{reason}"),
        }
    }

    /// Over loopback TCP every send is acknowledged by a completion before `transfer` returns,
    /// and the kernel reports each one copied (loopback copies on delivery).
    #[test]
    fn loopback_tcp_completions_cover_every_send_and_say_copied() {
        if !supported("loopback_tcp_completions_cover_every_send_and_say_copied") {
            return;
        }
        let (seg, data) = segment(5 * 1024 * 1024 + 333);
        let mut path = MsgZerocopyPath::new();
        let mut expected_bytes = 0;
        for (position, len) in [(0u64, 1u64), (4095, 8193), (17, data.len() as u64 - 17)] {
            let (tx, rx) = tcp_pair();
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
            let z = path.take_zerocopy_stats();
            assert!(z.sends >= len.div_ceil(CHUNK), "{z:?}");
            assert_eq!(z.completed_sends, z.sends, "every send acknowledged before transfer returned: {z:?}");
            assert_eq!((z.unsupported_sends, z.abandoned_sends), (0, 0), "{z:?}");
            assert_eq!(z.copied_sends, z.sends, "loopback copies every send: {z:?}");
            drop(tx);
            assert!(r.join().unwrap() == data[position as usize..(position + len) as usize]);
            expected_bytes += len;
        }
        let stats = path.take_stats();
        assert_eq!((stats.transfers, stats.bytes), (3, expected_bytes));
    }

    /// A Unix socket refuses `SO_ZEROCOPY`: the same sends copy, every one counted copied and
    /// unsupported, none waits for a completion.
    #[test]
    fn unix_socket_sends_are_counted_copied() {
        let (seg, data) = segment(3 * 1024 * 1024);
        let mut path = MsgZerocopyPath::new();
        let (tx, rx) = UnixStream::pair().unwrap();
        let r = reader(rx, None);
        assert_eq!(path.transfer(&slice(&seg, 5, 3 * 1024 * 1024 - 5), tx.as_fd()).unwrap(), 3 * 1024 * 1024 - 5);
        drop(tx);
        assert!(r.join().unwrap() == data[5..]);
        let z = path.take_zerocopy_stats();
        assert!(z.sends >= 3, "{z:?}");
        assert_eq!((z.completed_sends, z.copied_sends, z.unsupported_sends), (0, z.sends, z.sends), "{z:?}");
    }

    /// The reader leaves mid-transfer over TCP: the error is BrokenPipe or ConnectionReset, and
    /// the completions of the sends made still all came (none abandoned).
    #[test]
    fn reader_gone_completions_still_arrive() {
        if !supported("reader_gone_completions_still_arrive") {
            return;
        }
        let (seg, data) = segment(8 * 1024 * 1024);
        let mut path = MsgZerocopyPath::new();
        let (tx, mut rx) = tcp_pair();
        let r = thread::spawn(move || {
            let mut buf = vec![0u8; 100_000];
            rx.read_exact(&mut buf).unwrap();
        });
        let err = path.transfer(&slice(&seg, 0, data.len() as u64), tx.as_fd()).unwrap_err();
        r.join().unwrap();
        assert!(matches!(err.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset), "{err}");
        let z = path.take_zerocopy_stats();
        assert_eq!(z.completed_sends, z.sends, "{z:?}");
        assert_eq!(z.abandoned_sends, 0, "{z:?}");
    }
}
