//! `uring-splice`: io_uring moves page-cache pages from the segment file into a pipe and from the
//! pipe to the socket with two linked `IORING_OP_SPLICE` requests per chunk. No byte passes
//! through user space, and a chunk costs one `io_uring_enter` instead of two `splice` calls.
//! The splice work itself runs in the kernel's `iou-wrk` threads (splice requests are always
//! punted to io-wq), which is why CPU time is measured process-wide (see the parent module).
//!
//! ## How a transfer runs
//!
//! The pipe is empty between transfers. While bytes of the slice remain:
//!
//! 1. If the pipe holds bytes (the previous step moved fewer to the socket than it read), one
//!    SPLICE pipe -> socket of exactly those bytes drains it.
//! 2. Otherwise a chunk of `min(remaining, room)` bytes, where `room` is the pipe capacity
//!    minus the position's offset inside its page (a page-cache splice fills one pipe slot per
//!    page, so an unaligned first chunk would not fit otherwise), goes as SPLICE file -> pipe at
//!    `slice.position + read` linked (`IOSQE_IO_LINK`) with SPLICE pipe -> socket of the same
//!    length. One `io_uring_enter` submits both and waits for both completions.
//!
//! Outcomes, per completion:
//!
//! * file -> pipe moved fewer bytes than asked: the kernel fails the link, so the socket splice
//!   completes with `ECANCELED` having moved nothing; step 1 then drains what the pipe holds.
//! * file -> pipe returned 0: the file ended before the slice did (truncated under the reader):
//!   everything that existed was already sent, the error is `UnexpectedEof`
//!   (`util::truncated`).
//! * pipe -> socket moved fewer bytes than the pipe held (partial write): step 1 sends the rest.
//! * `EAGAIN` from a non-blocking socket: `util::wait_writable` polls for `POLLOUT`, then
//!   step 1 continues. `EINTR` from a completion or from `io_uring_enter` is retried.
//! * `EPIPE` / `ECONNRESET`: the peer went away; returned as `BrokenPipe` / `ConnectionReset`.
//!
//! On every error the pipe is emptied before `transfer` returns (its bytes spliced to
//! `/dev/null`; if even that fails the pipe is closed and a new one made by the next transfer),
//! so the next transfer starts clean.
//!
//! ## What the kernel holds
//!
//! No user memory is handed to the kernel, only file descriptors: the slice's file, the pipe
//! and the socket. io_uring resolves a descriptor number when the request is issued, which for
//! a linked or punted request is after `io_uring_enter` returned. So `transfer` never returns
//! while a request is in flight: it waits for every completion, on error paths too. The one
//! exception is a ring that `io_uring_enter` itself rejects (an error other than `EINTR`,
//! `EAGAIN` or `EBUSY`, which means the ring was misused and cannot be waited on): then the ring
//! and the pipe are closed at once, which makes the kernel cancel what is outstanding, the error
//! says so, and the next transfer builds a new ring and pipe.
//!
//! ## One ring per thread
//!
//! Each [`UringSplicePath`] owns one ring, created by `uring::setup_ring` (the one place a
//! read path sets a ring up, shared with `uring-read-send` and `uring-send-zc`), and a path is
//! used by one thread at a time (`transfer` takes `&mut self`), so a ring is never shared:
//! create one path per worker thread. The ring is not `SQPOLL` (a kernel thread spinning on
//! the queue would hide its CPU time from the comparison and take one of few cores) and not
//! `IOPOLL` (sockets cannot be polled for completion).
//!
//! ## The pipe size
//!
//! The pipe is raised to `pipe_size` bytes (default 1 MiB, [`super::ReadPathConfig`]) with
//! `F_SETPIPE_SZ`; the kernel rounds up to a power of two pages and the path uses the size it
//! got ([`UringSplicePath::pipe_capacity`]). A size above `/proc/sys/fs/pipe-max-size` (1 MiB
//! by default) without `CAP_SYS_RESOURCE`, or beyond the user's `fs.pipe-user-pages-hard`, makes
//! [`UringSplicePath::new`] fail with an error naming the limit and its value. It does not
//! shrink the pipe to the largest size allowed: a benchmark that quietly ran with another pipe
//! size than the one asked for would measure something else.
//!
//! ## SIGPIPE
//!
//! A splice into a socket whose peer has gone fails with `EPIPE` and `transfer` returns
//! `BrokenPipe`. Checked with SIGPIPE at its default disposition (a child process in the
//! conformance tests): the process is not signalled, unlike a plain `sendfile`, which the
//! `sendfile` path guards by blocking SIGPIPE when the process does not ignore it.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Instant;

use io_uring::{opcode, squeue, types, IoUring};

use super::pipe::PathPipe;
use super::transfer::{ReadPath, TransferStats};
use super::uring::{self, Op};
use super::util;
use crate::log::FileSlice;

/// Submission queue entries of a ring: one step needs at most two (the linked pair).
const RING_ENTRIES: u32 = 4;

/// Whether io_uring with `IORING_OP_SPLICE` works here; `Err` names the cause: no io_uring in
/// the kernel (`ENOSYS`), io_uring disabled (`kernel.io_uring_disabled`, named with its value)
/// or blocked (seccomp), or a kernel whose io_uring lacks `IORING_OP_SPLICE` (added in 5.7).
/// The ring comes from `uring::setup_ring`, the one place a ring is set up.
pub(crate) fn probe() -> Result<(), String> {
    uring::probe_ops(&[Op { code: opcode::Splice::CODE, name: "IORING_OP_SPLICE", since: "5.7" }]).map(drop)
}

/// See the module docs.
pub struct UringSplicePath {
    /// `None` after `io_uring_enter` rejected the ring; rebuilt by the next transfer. Boxed:
    /// the ring's handle is large, and the path sits in an enum with small siblings.
    ring: Option<Box<IoUring>>,
    /// The pipe, rebuilt by the next transfer after an error path dropped it.
    pipe: PathPipe,
    page_size: u64,
    stats: TransferStats,
}

impl fmt::Debug for UringSplicePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringSplicePath")
            .field("ring", &self.ring.as_ref().map(|r| r.as_raw_fd()))
            .field("pipe", &self.pipe)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl UringSplicePath {
    /// Sets up the ring (`uring::setup_ring`) and a pipe of `pipe_size` bytes (see the module docs on
    /// the pipe size). Errors: the `io_uring_setup` error, with its cause named; the pipe size
    /// refused (naming `fs.pipe-max-size`); opening `/dev/null`.
    pub fn new(pipe_size: usize) -> io::Result<Self> {
        let ring = uring::setup_ring_described(RING_ENTRIES)?;
        let pipe = PathPipe::new(pipe_size)?;
        let page_size = util::page_size();
        Ok(UringSplicePath { ring: Some(Box::new(ring)), pipe, page_size, stats: TransferStats::default() })
    }

    /// The pipe's capacity in bytes as the kernel set it (`pipe_size` rounded up to a power of
    /// two pages), or `None` while no pipe exists (after an error, until the next transfer).
    pub fn pipe_capacity(&self) -> Option<u64> {
        self.pipe.capacity()
    }

    /// Rebuilds the ring or the pipe if an earlier error discarded them.
    fn ensure_ready(&mut self) -> io::Result<()> {
        if self.ring.is_none() {
            let ring = uring::setup_ring_described(RING_ENTRIES)?;
            self.ring = Some(Box::new(ring));
        }
        self.pipe.ensure()?;
        Ok(())
    }

    /// Submits `entries` (their `user_data` is their index) and waits until every one of them
    /// has completed; returns their results (a byte count or `-errno`). Counts each entry and
    /// each `io_uring_enter` in the stats.
    ///
    /// # Safety
    ///
    /// Every descriptor the entries name must stay open until this function returns. It returns
    /// only when all entries have completed, except after `io_uring_enter` rejected the ring:
    /// then the ring and the pipe are dropped (the kernel cancels the outstanding requests) and
    /// the error says so.
    unsafe fn submit_and_reap(&mut self, entries: &[squeue::Entry]) -> io::Result<[i32; 2]> {
        let ring = self.ring.as_mut().ok_or_else(|| io::Error::other("the io_uring ring is gone"))?;
        debug_assert!(entries.len() <= 2);
        for (i, entry) in entries.iter().enumerate() {
            let entry = entry.clone().user_data(i as u64);
            // SAFETY: the entry names only descriptors (no memory), which the caller keeps open
            // until this function returns, and this function waits for the entry's completion
            // below (see its `# Safety`).
            unsafe { ring.submission().push(&entry) }.map_err(|_| {
                io::Error::other("the io_uring submission queue is full (a bug: it is drained every step)")
            })?;
        }
        self.stats.syscalls += entries.len() as u64;
        let mut results = [-libc::ECANCELED; 2];
        let mut outstanding = entries.len();
        while outstanding > 0 {
            self.stats.syscalls += 1;
            let entered = ring.submit_and_wait(outstanding);
            for cqe in ring.completion() {
                if let Some(slot) = results.get_mut(cqe.user_data() as usize) {
                    *slot = cqe.result();
                    outstanding -= 1;
                }
            }
            match entered {
                Ok(_) => {}
                // Interrupted by a signal (the entries were submitted or stay queued), out of
                // request memory, or completions not yet flushed: reaped above; enter again.
                Err(e) if uring::enter_error_is_transient(&e) => {
                    if e.raw_os_error() != Some(libc::EINTR) {
                        std::thread::yield_now();
                    }
                }
                Err(e) => {
                    self.ring = None;
                    self.pipe.close();
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "io_uring_enter rejected the ring ({e}) with {outstanding} splice \
                             requests outstanding; the ring and the pipe were closed, which cancels \
                             them, and the next transfer builds new ones"
                        ),
                    ));
                }
            }
        }
        Ok(results)
    }

    /// The body of `transfer`; `read` counts bytes spliced from the file into the pipe, `sent`
    /// bytes spliced from the pipe to the socket (the pipe holds `read - sent`).
    fn run(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>, read: &mut u64, sent: &mut u64) -> io::Result<()> {
        self.ensure_ready()?;
        let file = types::Fd(slice.segment.file().as_raw_fd());
        let sock = types::Fd(socket.as_raw_fd());
        loop {
            let pipe = self.pipe.get()?;
            let (pipe_r, pipe_w, capacity) =
                (types::Fd(pipe.read.as_raw_fd()), types::Fd(pipe.write.as_raw_fd()), pipe.capacity);
            let in_pipe = *read - *sent;
            let out_result;
            let mut in_error = None;
            if in_pipe > 0 {
                // Step 1: drain the pipe to the socket.
                let out = opcode::Splice::new(pipe_r, -1, sock, -1, in_pipe as u32).build();
                // SAFETY: the slice's file is kept open by `slice.segment` (borrowed for this
                // call), the socket by the caller's borrow, the pipe by `self`.
                out_result = unsafe { self.submit_and_reap(&[out]) }?[0];
            } else if *read < slice.len {
                // Step 2: a chunk file -> pipe linked with pipe -> socket.
                let position = slice.position + *read;
                let room = capacity - position % self.page_size;
                let chunk = (slice.len - *read).min(room) as u32;
                let offset = i64::try_from(position).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("position {position} beyond i64::MAX"))
                })?;
                let fill = opcode::Splice::new(file, offset, pipe_w, -1, chunk).build().flags(squeue::Flags::IO_LINK);
                let out = opcode::Splice::new(pipe_r, -1, sock, -1, chunk).build();
                // SAFETY: as above.
                let [fill_result, result] = unsafe { self.submit_and_reap(&[fill, out]) }?;
                match fill_result {
                    0 => in_error = Some(util::truncated(slice.len - *read)),
                    n if n > 0 => *read += n as u64,
                    e if e == -libc::EINTR || e == -libc::EAGAIN => {}
                    e => in_error = Some(io::Error::from_raw_os_error(-e)),
                }
                out_result = result;
            } else {
                return Ok(());
            }
            match out_result {
                n if n > 0 => *sent += n as u64,
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice from the pipe to the socket moved 0 bytes",
                    ))
                }
                // The file splice moved fewer bytes than asked (or none): the link was cut.
                e if e == -libc::ECANCELED => {}
                e if e == -libc::EINTR => {}
                e if e == -libc::EAGAIN => util::wait_writable(socket, &mut self.stats)?,
                e => return Err(io::Error::from_raw_os_error(-e)),
            }
            if let Some(err) = in_error {
                return Err(err);
            }
        }
    }
}

impl ReadPath for UringSplicePath {
    fn name(&self) -> &'static str {
        "uring-splice"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let (mut read, mut sent) = (0u64, 0u64);
        let result = self.run(slice, socket, &mut read, &mut sent);
        if result.is_err() {
            self.pipe.empty_after_error(&mut self.stats);
        }
        self.stats.finish(start, sent, result)
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::path::PathBuf;
    use std::sync::{mpsc, Arc};
    use std::thread;
    use std::time::Duration;

    use super::*;
    use crate::log::segment::SegmentFile;
    use crate::read_path::test_support::{reader, reader_paced, segment, slice, tcp_pair};

    /// Whether the path can run here; prints why not when it cannot.
    fn supported(test: &str) -> bool {
        crate::read_path::test_support::supported(test, "uring-splice", probe())
    }
    use crate::read_path::pipe::PIPE_MAX_SIZE;
    use crate::read_path::util::read_setting;

    /// Transfers each (position, len) of a `file_len`-byte file through one path to a Unix
    /// socket and a TCP socket, and checks the bytes that arrive.
    fn check_transfers(pipe_size: usize, file_len: usize, cases: &[(u64, u64)]) {
        let (seg, data) = segment(file_len);
        let mut path = UringSplicePath::new(pipe_size).unwrap();
        for &(position, len) in cases {
            let expected = &data[position as usize..(position + len) as usize];

            let (tx, rx) = UnixStream::pair().unwrap();
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
            drop(tx);
            assert!(r.join().unwrap() == expected, "unix: position {position} len {len}");

            let (tx, rx) = tcp_pair();
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
            drop(tx);
            assert!(r.join().unwrap() == expected, "tcp: position {position} len {len}");
        }
        let stats = path.take_stats();
        let total: u64 = cases.iter().map(|c| c.1).sum();
        assert_eq!(stats.transfers, 2 * cases.len() as u64);
        assert_eq!(stats.bytes, 2 * total);
        assert!(total == 0 || stats.syscalls > 0);
        assert_eq!(path.take_stats(), TransferStats::default());
    }

    #[test]
    fn probe_names_a_cause_or_succeeds() {
        match probe() {
            Ok(()) => eprintln!("uring-splice probe: supported"),
            Err(reason) => {
                eprintln!("uring-splice probe: {reason}");
                assert!(!reason.is_empty());
            }
        }
    }

    #[test]
    fn small_and_unaligned_slices() {
        if !supported("small_and_unaligned_slices") {
            return;
        }
        check_transfers(
            1024 * 1024,
            200_000,
            &[(0, 0), (5, 0), (0, 1), (199_999, 1), (13, 4097), (4095, 8193), (0, 200_000), (4096, 65536)],
        );
    }

    #[test]
    fn slices_larger_than_the_pipe() {
        if !supported("slices_larger_than_the_pipe") {
            return;
        }
        let mib = 1024 * 1024;
        check_transfers(mib, 4 * mib, &[(0, 3 * mib as u64), (4095, 3 * mib as u64 + 123), (1, 4 * mib as u64 - 1)]);
        // A one-page pipe: many chunks, every unaligned one cut to fit.
        check_transfers(4096, 300_000, &[(0, 300_000), (1234, 250_001)]);
    }

    #[test]
    fn pipe_is_raised() {
        if !supported("pipe_is_raised") {
            return;
        }
        let path = UringSplicePath::new(1024 * 1024).unwrap();
        assert_eq!(path.pipe_capacity(), Some(1024 * 1024));
        let path = UringSplicePath::new(100_000).unwrap();
        assert!(path.pipe_capacity().unwrap() >= 100_000);
    }

    #[test]
    fn pipe_above_the_limit_names_it() {
        if !supported("pipe_above_the_limit_names_it") {
            return;
        }
        let Some(max) = read_setting(PIPE_MAX_SIZE).and_then(|s| s.parse::<usize>().ok()) else {
            eprintln!("skipping pipe_above_the_limit_names_it: {PIPE_MAX_SIZE} unreadable");
            return;
        };
        match UringSplicePath::new(max * 2) {
            Ok(path) => eprintln!(
                "pipe_above_the_limit_names_it: a {} byte pipe was allowed (CAP_SYS_RESOURCE)",
                path.pipe_capacity().unwrap()
            ),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("pipe-max-size") && text.contains(&max.to_string()), "{text}");
            }
        }
        let e = UringSplicePath::new(usize::MAX).unwrap_err();
        assert!(e.to_string().contains("F_SETPIPE_SZ"), "{e}");
    }

    #[test]
    fn file_shorter_than_the_slice() {
        if !supported("file_shorter_than_the_slice") {
            return;
        }
        let (seg, data) = segment(10_000);
        // A small pipe so that the end of file is met after several chunks.
        for pipe_size in [4096, 1024 * 1024] {
            let mut path = UringSplicePath::new(pipe_size).unwrap();
            let (tx, rx) = UnixStream::pair().unwrap();
            let r = reader(rx, None);
            let err = path.transfer(&slice(&seg, 100, 20_000), tx.as_fd()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
            drop(tx);
            assert!(r.join().unwrap() == data[100..], "the bytes that existed were sent");
            assert_eq!(path.take_stats().bytes, 9_900);

            // Entirely past the end.
            let (tx, rx) = UnixStream::pair().unwrap();
            let err = path.transfer(&slice(&seg, 10_000, 1), tx.as_fd()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
            drop((tx, rx));

            // The pipe was left clean: the next transfer is exact.
            let (tx, rx) = UnixStream::pair().unwrap();
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, 7, 5000), tx.as_fd()).unwrap(), 5000);
            drop(tx);
            assert!(r.join().unwrap() == data[7..5007]);
        }
    }

    #[test]
    fn position_beyond_4_gib_of_a_sparse_file() {
        if !supported("position_beyond_4_gib_of_a_sparse_file") {
            return;
        }
        use std::os::unix::fs::FileExt;
        let position = (4u64 << 30) + 4093;
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let file = tempfile::tempfile().unwrap();
        if let Err(e) = file.write_all_at(&data, position) {
            eprintln!("skipping position_beyond_4_gib_of_a_sparse_file: no sparse 4 GiB file here: {e}");
            return;
        }
        let seg = Arc::new(SegmentFile::from_file(file, PathBuf::from("sparse")));
        let mut path = UringSplicePath::new(64 * 1024).unwrap();
        let (tx, rx) = tcp_pair();
        let r = reader(rx, None);
        assert_eq!(path.transfer(&slice(&seg, position, data.len() as u64), tx.as_fd()).unwrap(), 70_000);
        drop(tx);
        assert!(r.join().unwrap() == data);
    }

    /// Runs `f` on a thread and fails the test instead of hanging when it takes over a minute.
    fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, wait) = mpsc::channel();
        thread::spawn(move || done.send(f()).unwrap());
        wait.recv_timeout(Duration::from_secs(60)).expect("the transfer hung")
    }

    #[test]
    fn reader_that_goes_away() {
        if !supported("reader_that_goes_away") {
            return;
        }
        let result = within_a_minute(|| {
            let (seg, data) = segment(8 * 1024 * 1024);
            let mut path = UringSplicePath::new(1024 * 1024).unwrap();
            let mut kinds = Vec::new();
            for tcp in [false, true] {
                let (tx, rx): (OwnedFd, Box<dyn Read + Send>) = if tcp {
                    let (tx, rx) = tcp_pair();
                    (tx.into(), Box::new(rx))
                } else {
                    let (tx, rx) = UnixStream::pair().unwrap();
                    (tx.into(), Box::new(rx))
                };
                let r = thread::spawn(move || {
                    let mut rx = rx;
                    let mut buf = vec![0u8; 1000];
                    rx.read_exact(&mut buf).unwrap();
                    drop(rx);
                });
                let err = path.transfer(&slice(&seg, 0, data.len() as u64), tx.as_fd()).unwrap_err();
                r.join().unwrap();
                kinds.push(err.kind());

                // The pipe was left clean: the next transfer is exact.
                let (tx, rx) = UnixStream::pair().unwrap();
                let r = reader(rx, None);
                assert_eq!(path.transfer(&slice(&seg, 3, 100_000), tx.as_fd()).unwrap(), 100_000);
                drop(tx);
                assert!(r.join().unwrap() == data[3..100_003]);
            }
            kinds
        });
        for kind in result {
            assert!(matches!(kind, io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset), "{kind:?}");
        }
    }

    #[test]
    fn non_blocking_socket_with_a_tiny_send_buffer() {
        if !supported("non_blocking_socket_with_a_tiny_send_buffer") {
            return;
        }
        within_a_minute(|| {
            let (seg, data) = segment(2 * 1024 * 1024 + 777);
            let mut path = UringSplicePath::new(1024 * 1024).unwrap();
            for tcp in [false, true] {
                let (tx, rx): (OwnedFd, OwnedFd) = if tcp {
                    let (tx, rx) = tcp_pair();
                    tx.set_nonblocking(true).unwrap();
                    (tx.into(), rx.into())
                } else {
                    let (tx, rx) = UnixStream::pair().unwrap();
                    tx.set_nonblocking(true).unwrap();
                    (tx.into(), rx.into())
                };
                nix::sys::socket::setsockopt(&tx, nix::sys::socket::sockopt::SndBuf, &4096).unwrap();
                let r = reader_paced(rx, None, true);
                let (position, len) = (333u64, data.len() as u64 - 333);
                assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
                drop(tx);
                assert!(r.join().unwrap() == data[333..], "tcp: {tcp}");
            }
        });
    }
}
