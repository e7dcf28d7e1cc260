//! `null`: writes zeros from memory, reading no file. It measures the harness itself: the
//! socket, the receiver and the bookkeeping, with no storage cost.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::FileSlice;

/// The smallest zero buffer: 1 MiB, like `mmap`'s chunks and `uring-splice`'s pipe.
pub(crate) const WRITE_SIZE: usize = 1024 * 1024;

/// See the module docs.
#[derive(Debug)]
pub struct NullPath {
    zeros: Vec<u8>,
    stats: TransferStats,
}

impl NullPath {
    /// A null path writing from a buffer of zeros of `buffer_size` bytes, at least
    /// [`WRITE_SIZE`]: its `send`s are as large as the other paths' largest writes, so its cost is
    /// the socket's and not that of many small writes.
    pub fn new(buffer_size: usize) -> Self {
        NullPath { zeros: vec![0; buffer_size.max(WRITE_SIZE)], stats: TransferStats::default() }
    }
}

impl ReadPath for NullPath {
    fn name(&self) -> &'static str {
        "null"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut sent = 0u64;
        let result = (|| {
            while sent < slice.len {
                let n = (slice.len - sent).min(self.zeros.len() as u64) as usize;
                util::write_all(socket, &self.zeros[..n], &mut self.stats, &mut sent)?;
            }
            Ok(slice.len)
        })();
        self.stats.record_transfer(sent, start.elapsed());
        result
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}
