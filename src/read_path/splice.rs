//! `splice`: splice(2) moves page-cache pages from the segment file into a pipe and from the pipe
//! to the socket, with plain system calls: two `splice` calls per chunk, no byte through user
//! space.
//!
//! It is the same kernel mechanism as `uring-splice` (the same `filemap_splice_read` into a pipe,
//! the same `splice_to_socket` out of it) without the ring, so the two side by side tell the
//! io_uring effect (one `io_uring_enter` per chunk instead of two system calls, the splices run in
//! `iou-wrk` threads) from the splice effect (pages referenced, not copied, into the socket). It
//! is also what `sendfile` does inside the kernel (`splice_direct_to_actor` through an internal
//! pipe), with the pipe and its size in user space's hands.
//!
//! ## How a transfer runs
//!
//! The pipe is empty between transfers. While bytes of the slice remain:
//!
//! 1. The pipe empty: `splice(file at slice.position + read -> pipe)` of `min(remaining, room)`
//!    bytes, where `room` is the pipe capacity minus the position's offset inside its page (a
//!    page-cache splice fills one pipe slot per page, so an unaligned chunk would not fit
//!    otherwise), with `SPLICE_F_MOVE` (a hint; the kernel references the pages). The pipe is
//!    empty, so this never waits for room. 0 bytes means the file ended before the slice did
//!    (truncated under the reader): everything that existed was already sent, the error is
//!    `UnexpectedEof` (`util::truncated`).
//! 2. The pipe holding bytes: `splice(pipe -> socket)` of exactly those bytes, with
//!    `SPLICE_F_MORE` while more of the slice follows (`MSG_MORE` for TCP, which keeps a partly
//!    filled segment for the next chunk). A short splice (partial write) leaves the rest for the
//!    next step 2.
//!
//! `EINTR` is retried; `EAGAIN` from a non-blocking socket (or a blocking one whose
//! `SO_SNDTIMEO` expired) is waited out with `util::wait_writable`; `EPIPE` / `ECONNRESET` (the
//! peer went away) is returned as `BrokenPipe` / `ConnectionReset`. On every error the pipe is
//! emptied before `transfer` returns ([`PathPipe::empty_after_error`]: its bytes spliced to
//! `/dev/null`; if even that fails the pipe is closed and the next transfer makes a new one),
//! so the next transfer starts clean.
//! Nothing is in flight when `transfer` returns: both calls are synchronous.
//!
//! ## The pipe size
//!
//! As for `uring-splice`: the pipe is raised to `pipe_size` bytes (default 1 MiB,
//! [`super::ReadPathConfig`]) with `F_SETPIPE_SZ`, and a size the kernel refuses makes
//! [`SplicePath::new`] fail naming `fs.pipe-max-size` and its value, never a smaller pipe (see
//! the `pipe` module). One pipe per path instance (and so per thread).
//!
//! ## SIGPIPE
//!
//! `splice` has no `MSG_NOSIGNAL`: splicing into a socket whose peer has gone raises SIGPIPE, as
//! `sendfile` does (the conformance suite's `sigpipe_default_disposition` runs it with the default
//! disposition). Like `sendfile`, when the process does not ignore SIGPIPE each transfer blocks it
//! on its thread and discards a pending one (the `sigpipe` module), so the caller gets
//! `BrokenPipe`. (`uring-splice` needs no guard: its splices run in `iou-wrk` threads.)

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::SpliceFFlags;

use super::pipe::PathPipe;
use super::sigpipe::{sigpipe_ignored, SigpipeBlock};
use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::FileSlice;

/// See the module docs.
#[derive(Debug)]
pub struct SplicePath {
    /// The pipe, rebuilt by the next transfer after an error path dropped it.
    pipe: PathPipe,
    page_size: u64,
    /// Whether SIGPIPE is blocked during a transfer (the process does not ignore it).
    block_sigpipe: bool,
    stats: TransferStats,
}

impl SplicePath {
    /// A splice path with a pipe of `pipe_size` bytes (see the module docs on the pipe size).
    /// Errors: `pipe2`'s; the pipe size refused by `F_SETPIPE_SZ` (naming `fs.pipe-max-size`);
    /// opening `/dev/null`.
    pub fn new(pipe_size: usize) -> io::Result<Self> {
        Ok(SplicePath {
            pipe: PathPipe::new(pipe_size)?,
            page_size: util::page_size(),
            block_sigpipe: !sigpipe_ignored(),
            stats: TransferStats::default(),
        })
    }

    /// The pipe's capacity in bytes as the kernel set it (`pipe_size` rounded up to a power of
    /// two pages), or `None` while no pipe exists (after an error, until the next transfer).
    pub fn pipe_capacity(&self) -> Option<u64> {
        self.pipe.capacity()
    }

    /// The body of `transfer`; `read` counts bytes spliced from the file into the pipe, `sent`
    /// bytes spliced from the pipe to the socket (the pipe holds `read - sent`).
    fn run(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>, read: &mut u64, sent: &mut u64) -> io::Result<()> {
        let pipe = self.pipe.ensure()?;
        let file = slice.segment.file().as_fd();
        while *sent < slice.len {
            let in_pipe = *read - *sent;
            if in_pipe == 0 {
                // Step 1: a chunk file -> pipe.
                let position = slice.position + *read;
                let room = pipe.capacity - position % self.page_size;
                let chunk = (slice.len - *read).min(room) as usize;
                let mut offset = libc::loff_t::try_from(position).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("position {position} beyond i64::MAX"))
                })?;
                self.stats.syscalls += 1;
                match nix::fcntl::splice(file, Some(&mut offset), &pipe.write, None, chunk, SpliceFFlags::SPLICE_F_MOVE)
                {
                    Ok(0) => return Err(util::truncated(slice.len - *read)),
                    Ok(n) => *read += n as u64,
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
                continue;
            }
            // Step 2: what the pipe holds, pipe -> socket.
            let mut flags = SpliceFFlags::SPLICE_F_MOVE;
            if *read < slice.len {
                flags |= SpliceFFlags::SPLICE_F_MORE;
            }
            self.stats.syscalls += 1;
            match nix::fcntl::splice(&pipe.read, None, socket, None, in_pipe as usize, flags) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice from the pipe to the socket moved 0 bytes",
                    ))
                }
                Ok(n) => *sent += n as u64,
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => util::wait_writable(socket, &mut self.stats)?,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl ReadPath for SplicePath {
    fn name(&self) -> &'static str {
        "splice"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let (mut read, mut sent) = (0u64, 0u64);
        let result = match if self.block_sigpipe { SigpipeBlock::new().map(Some) } else { Ok(None) } {
            Ok(_guard) => self.run(slice, socket, &mut read, &mut sent),
            Err(e) => Err(e),
        };
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
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::thread;

    use super::*;
    use crate::read_path::test_support::{reader, segment, slice, tcp_pair};

    /// Unaligned slices through a one-page pipe (many chunks, each cut to fit) and a 1 MiB pipe,
    /// to a Unix socket and to TCP: the bytes arrive exact and the stats count two splices per
    /// chunk at least.
    #[test]
    fn slices_through_small_and_large_pipes() {
        let (seg, data) = segment(300_000);
        for pipe_size in [4096, 1024 * 1024] {
            let mut path = SplicePath::new(pipe_size).unwrap();
            for (position, len) in [(0u64, 0u64), (1, 1), (4095, 8193), (13, 299_987), (0, 300_000)] {
                let expected = &data[position as usize..(position + len) as usize];
                for tcp in [false, true] {
                    let (tx, r): (OwnedFd, _) = if tcp {
                        let (tx, rx) = tcp_pair();
                        (tx.into(), reader(rx, None))
                    } else {
                        let (tx, rx) = UnixStream::pair().unwrap();
                        (tx.into(), reader(rx, None))
                    };
                    assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
                    drop(tx);
                    assert!(r.join().unwrap() == expected, "pipe {pipe_size}, tcp {tcp}, {position}+{len}");
                }
            }
            let stats = path.take_stats();
            assert_eq!(stats.transfers, 10);
            assert_eq!(stats.bytes, 2 * (1 + 8193 + 299_987 + 300_000));
            if pipe_size == 4096 {
                // 300,000 bytes through one page: at least 74 chunks of two splices each.
                assert!(stats.syscalls >= 2 * 2 * 74, "{stats:?}");
            }
        }
    }

    /// A slice past the file's end sends what exists, fails with `UnexpectedEof`, and leaves the
    /// pipe empty: the next transfer is exact.
    #[test]
    fn file_shorter_than_the_slice_leaves_a_clean_pipe() {
        let (seg, data) = segment(10_000);
        for pipe_size in [4096, 1024 * 1024] {
            let mut path = SplicePath::new(pipe_size).unwrap();
            let (tx, rx) = UnixStream::pair().unwrap();
            let r = reader(rx, None);
            let err = path.transfer(&slice(&seg, 100, 20_000), tx.as_fd()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
            drop(tx);
            assert!(r.join().unwrap() == data[100..]);
            assert_eq!(path.take_stats().bytes, 9_900);

            let (tx, rx) = UnixStream::pair().unwrap();
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, 7, 5000), tx.as_fd()).unwrap(), 5000);
            drop(tx);
            assert!(r.join().unwrap() == data[7..5007]);
        }
    }

    /// The reader leaves with bytes in the pipe: `BrokenPipe` or `ConnectionReset`, and the pipe
    /// was emptied (the next transfer is exact).
    #[test]
    fn reader_gone_then_a_clean_transfer() {
        let (seg, data) = segment(4 * 1024 * 1024);
        let mut path = SplicePath::new(1024 * 1024).unwrap();
        let (tx, mut rx) = UnixStream::pair().unwrap();
        let r = thread::spawn(move || {
            let mut buf = vec![0u8; 1000];
            rx.read_exact(&mut buf).unwrap();
        });
        let err = path.transfer(&slice(&seg, 0, data.len() as u64), tx.as_fd()).unwrap_err();
        r.join().unwrap();
        assert!(matches!(err.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset), "{err}");
        assert_eq!(path.pipe_capacity(), Some(1024 * 1024), "the pipe was emptied, not dropped");

        let (tx, rx) = UnixStream::pair().unwrap();
        let r = reader(rx, None);
        assert_eq!(path.transfer(&slice(&seg, 3, 100_000), tx.as_fd()).unwrap(), 100_000);
        drop(tx);
        assert!(r.join().unwrap() == data[3..100_003]);
    }

    /// A refused pipe size names the limit, as `uring-splice`'s does (the shared `pipe` module).
    #[test]
    fn pipe_size_refused_names_fcntl() {
        let e = SplicePath::new(usize::MAX).unwrap_err();
        assert!(e.to_string().contains("F_SETPIPE_SZ"), "{e}");
    }
}
