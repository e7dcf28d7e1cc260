//! The contract every read path implements ([`ReadPath`]) and what each counts
//! ([`TransferStats`]).
//!
//! `transfer(slice, socket)` moves exactly `slice.len` bytes from `slice.position` of the slice's
//! file to `socket`, with blocking-socket semantics: short writes are continued, `EINTR` retried,
//! and `EAGAIN` on a non-blocking socket waited out with `poll(POLLOUT)`. It returns the bytes
//! moved (= `slice.len`), or an error: `UnexpectedEof` when the file is shorter than the slice
//! (truncated under the reader; the bytes that existed were sent), `BrokenPipe` /
//! `ConnectionReset` when the reader went away. It never falls back to another mechanism: a path
//! that cannot run here fails at [`super::ReadPathKind::create`] with the reason
//! ([`super::Unsupported`]).
//!
//! Every path counts what it did in [`TransferStats`] (bytes, system calls or SQEs, wall time),
//! the way Kafka's `TransferableRecords.writeTo` returns the bytes written: the harness
//! (`crate::bench`) adds CPU time and the rest around it.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::log::FileSlice;

/// Counters of one read path, cumulative since creation or the last [`ReadPath::take_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// `transfer` calls.
    pub transfers: u64,
    /// Bytes moved to sockets.
    pub bytes: u64,
    /// System calls issued (for io_uring paths: SQEs submitted plus `io_uring_enter` calls).
    pub syscalls: u64,
    /// Record bytes read into user-space memory on their way to the socket: `pread` into a
    /// buffer (`copy`), `O_DIRECT` reads (`direct`: a DMA, not a CPU copy, but the bytes pass
    /// through user space all the same), `IORING_OP_READ_FIXED` into registered buffers
    /// (`uring-read-send`, `uring-send-zc`); 0 for the paths that move pages in the kernel
    /// (`sendfile`, `splice`, `uring-splice`) or send from a mapping (`mmap`, `msg-zerocopy`:
    /// the kernel copies from the mapped page cache, nothing is read into a buffer first).
    /// Bytes read past the slice (alignment) count: they were read.
    pub user_copied: u64,
    /// Wall time spent inside `transfer`.
    pub wall: Duration,
}

impl TransferStats {
    /// Counts one finished (or failed) transfer that moved `bytes` in `wall`.
    pub fn record_transfer(&mut self, bytes: u64, wall: Duration) {
        self.transfers += 1;
        self.bytes += bytes;
        self.wall += wall;
    }

    /// Counts one finished (or failed) transfer that started at `start` and moved `sent` bytes
    /// ([`TransferStats::record_transfer`]), and returns `result` with that byte count: how a
    /// path's `transfer` ends, whatever its body did.
    pub(crate) fn finish(&mut self, start: Instant, sent: u64, result: io::Result<()>) -> io::Result<u64> {
        self.record_transfer(sent, start.elapsed());
        result.map(|()| sent)
    }

    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &TransferStats) {
        self.transfers += other.transfers;
        self.bytes += other.bytes;
        self.syscalls += other.syscalls;
        self.user_copied += other.user_copied;
        self.wall += other.wall;
    }
}

/// A mechanism that moves file bytes to a socket. See the module docs for the contract.
pub trait ReadPath {
    /// The path's name, as selected on the command line (`copy`, `sendfile`, ...).
    fn name(&self) -> &'static str;
    /// Moves exactly `slice.len` bytes from `slice.position` of its file to `socket`.
    ///
    /// Errors: `UnexpectedEof` when the file ends before the slice does; `BrokenPipe` /
    /// `ConnectionReset` when the peer is gone; other I/O errors as the kernel reports them.
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64>;
    /// The counters so far, reset to zero.
    fn take_stats(&mut self) -> TransferStats;
}
