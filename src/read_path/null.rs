//! `null`: writes zeros from memory, reading no file. It measures the harness itself: the
//! socket, the receiver and the bookkeeping, with no storage cost.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use super::{util, ReadPath, TransferStats};
use crate::log::FileSlice;

/// See the module docs.
#[derive(Debug)]
pub struct NullPath {
    zeros: Vec<u8>,
    stats: TransferStats,
}

impl NullPath {
    /// A null path writing from a `buffer_size`-byte buffer of zeros (at least 1 byte).
    pub fn new(buffer_size: usize) -> Self {
        NullPath { zeros: vec![0; buffer_size.max(1)], stats: TransferStats::default() }
    }
}

impl ReadPath for NullPath {
    fn name(&self) -> &'static str {
        "null"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut left = slice.len;
        let result = (|| {
            while left > 0 {
                let n = left.min(self.zeros.len() as u64) as usize;
                util::write_all(socket, &self.zeros[..n], &mut self.stats)?;
                left -= n as u64;
            }
            Ok(slice.len)
        })();
        self.stats.record_transfer(slice.len - left, start.elapsed());
        result
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}
