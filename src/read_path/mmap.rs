//! `mmap`: the segment file mapped read-only (memmap2) and written to the socket from the
//! mapping: no `read` copy, one copy into the socket buffer.
//!
//! ## Why no SIGBUS
//!
//! A mapped page past the end of a truncated file raises SIGBUS when *user space* touches it.
//! This path never touches mapped bytes itself: it only hands the mapping's address to `send`,
//! and a fault taken by the kernel while copying from user memory fails the call with `EFAULT`
//! instead, which is reported as `UnexpectedEof` (the file shrank under the reader). Before each
//! transfer, and between its 1 MiB chunks, the file's current size bounds what is sent, so a slice
//! past the end sends the bytes that exist and then reports `UnexpectedEof`.
//!
//! One race is inherent to mmap: truncating a file zeroes the tail of the page that holds its new
//! end, so a `send` already copying from that page can deliver zeros for the bytes that were cut
//! (at most one page), before the next chunk sees the new size. `copy` and `sendfile` read through
//! the file and stop at the new end instead. fetchbench's log never truncates a segment that can be
//! read (retention unlinks whole segments; recovery truncates only at open).
//!
//! ## Mappings
//!
//! Each file is mapped whole (from offset 0 to its size at mapping time) and the mapping is kept
//! for later transfers; when the active segment has grown past it, it is mapped again, larger.
//! The cache holds a weak reference to the file: when the log and every slice have dropped a
//! segment (retention deleted it), its mapping is released at the next transfer. fetchbench never
//! truncates a file that may be mapped (retention unlinks whole segments).

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Weak};
use std::time::Instant;

use memmap2::{Mmap, MmapOptions};

use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::segment::SegmentFile;
use crate::log::FileSlice;

/// Bytes written per `send` from the mapping (the file size is re-checked between chunks).
const CHUNK: u64 = 1024 * 1024;

/// See the module docs.
#[derive(Debug, Default)]
pub struct MmapPath {
    maps: Mappings,
    stats: TransferStats,
}

impl MmapPath {
    /// An mmap path with no mappings yet.
    pub fn new() -> Self {
        MmapPath::default()
    }
}

/// The read-only mappings of segment files, one per file, kept between transfers (see the module
/// docs on mappings). Shared with `msg-zerocopy`, which sends from the same mappings.
///
/// Their bytes are never read by this process: only their addresses go to `send`, where the
/// kernel copies them (or, with `MSG_ZEROCOPY`, pins the pages) and turns a fault on a page past
/// the end of a truncated file into `EFAULT` rather than SIGBUS.
#[derive(Debug, Default)]
pub(crate) struct Mappings {
    maps: Vec<(Weak<SegmentFile>, Mmap)>,
}

impl Mappings {
    /// A mapping of `file` covering at least `[0, end)`, mapping it whole (`file_len` bytes, its
    /// size now) when there is none or the one there is too short; a mapping of a file nobody
    /// else holds any more is released first. Counts an `mmap` call in `stats`. Errors: `mmap`'s,
    /// and `file_len` larger than the address space.
    ///
    /// A mapping returned stays valid until the next call (which may replace it with a larger
    /// one): callers take one mapping per transfer, covering the whole transfer.
    pub(crate) fn get(
        &mut self,
        file: &Arc<SegmentFile>,
        end: u64,
        file_len: u64,
        stats: &mut TransferStats,
    ) -> io::Result<&Mmap> {
        self.maps.retain(|(w, _)| w.strong_count() > 0);
        let key = Arc::downgrade(file);
        let i = match self.maps.iter().position(|(w, _)| w.ptr_eq(&key)) {
            Some(i) if self.maps[i].1.len() as u64 >= end => i,
            found => {
                let len =
                    usize::try_from(file_len).map_err(|_| io::Error::other("file larger than the address space"))?;
                stats.syscalls += 1;
                // SAFETY: the mapping is read-only and its bytes are never read by this process:
                // only their address is passed to `send`, where the kernel copies them (or pins
                // the pages for MSG_ZEROCOPY) and turns a fault (file truncated by another
                // process) into EFAULT rather than SIGBUS. fetchbench never truncates a segment
                // that can be read (retention unlinks).
                let map = unsafe { MmapOptions::new().len(len).map(file.file())? };
                match found {
                    Some(i) => {
                        self.maps[i].1 = map;
                        i
                    }
                    None => {
                        self.maps.push((key, map));
                        self.maps.len() - 1
                    }
                }
            }
        };
        Ok(&self.maps[i].1)
    }
}

impl ReadPath for MmapPath {
    fn name(&self) -> &'static str {
        "mmap"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut sent = 0u64;
        let result = (|| {
            if slice.len == 0 {
                return Ok(0);
            }
            self.stats.syscalls += 1;
            let file_len = slice.segment.file().metadata()?.len();
            let end = slice.position.saturating_add(slice.len).min(file_len);
            let mut end = end;
            while slice.position + sent < end {
                // Chunks, with the file size checked before each: a file that shrank since the
                // last chunk is noticed before its vanished pages are handed to `send`.
                let from = slice.position + sent;
                let to = end.min(from + CHUNK);
                let stats = &mut self.stats;
                let res = self.maps.get(&slice.segment, to, file_len, stats).and_then(|map| {
                    let bytes = &map[from as usize..to as usize];
                    util::write_all(socket, bytes, stats, &mut sent)
                });
                res.map_err(|e| {
                    if e.raw_os_error() == Some(libc::EFAULT) {
                        util::truncated(slice.len - sent)
                    } else {
                        e
                    }
                })?;
                if slice.position + sent < end {
                    self.stats.syscalls += 1;
                    end = end.min(slice.segment.file().metadata()?.len());
                }
            }
            if sent < slice.len {
                return Err(util::truncated(slice.len - sent));
            }
            Ok(sent)
        })();
        self.stats.record_transfer(sent, start.elapsed());
        result
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}
