//! `copy`: `pread` into a reusable buffer, then `write` to the socket. What Kafka does when it
//! cannot use `sendfile` (TLS): two copies, file -> user buffer -> socket buffer.

use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::FileSlice;

/// See the module docs.
#[derive(Debug)]
pub struct CopyPath {
    buf: Vec<u8>,
    stats: TransferStats,
}

impl CopyPath {
    /// A copy path with a `buffer_size`-byte buffer (at least 1 byte; default 64 KiB).
    pub fn new(buffer_size: usize) -> Self {
        CopyPath { buf: vec![0; buffer_size.max(1)], stats: TransferStats::default() }
    }
}

impl ReadPath for CopyPath {
    fn name(&self) -> &'static str {
        "copy"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let file = slice.segment.file();
        let mut done = 0u64;
        let result = (|| {
            while done < slice.len {
                let want = (slice.len - done).min(self.buf.len() as u64) as usize;
                self.stats.syscalls += 1;
                let n = match file.read_at(&mut self.buf[..want], slice.position + done) {
                    Ok(0) => return Err(util::truncated(slice.len - done)),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                self.stats.user_copied += n as u64;
                util::write_all(socket, &self.buf[..n], &mut self.stats, &mut done)?;
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
