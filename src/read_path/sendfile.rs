//! `sendfile`: the kernel moves page-cache pages to the socket (`sendfile64`), no copy through
//! user space. Kafka's `FileChannel.transferTo`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use super::{util, ReadPath, TransferStats};
use crate::log::FileSlice;

/// See the module docs.
#[derive(Debug, Default)]
pub struct SendfilePath {
    stats: TransferStats,
}

impl SendfilePath {
    /// A sendfile path.
    pub fn new() -> Self {
        SendfilePath::default()
    }
}

/// The most one `sendfile` call moves (Linux caps a call at 0x7ffff000 bytes).
const MAX_CHUNK: u64 = 0x7fff_f000;

impl ReadPath for SendfilePath {
    fn name(&self) -> &'static str {
        "sendfile"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let file = slice.segment.file().as_fd();
        let mut done = 0u64;
        let result = (|| {
            while done < slice.len {
                let mut offset = (slice.position + done) as libc::off64_t;
                let count = (slice.len - done).min(MAX_CHUNK) as usize;
                self.stats.syscalls += 1;
                match nix::sys::sendfile::sendfile64(socket, file, Some(&mut offset), count) {
                    Ok(0) => return Err(util::truncated(slice.len - done)),
                    Ok(n) => done += n as u64,
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(nix::errno::Errno::EAGAIN) => util::wait_writable(socket, &mut self.stats)?,
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(done)
        })();
        self.stats.record_transfer(done, start.elapsed());
        result
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}
