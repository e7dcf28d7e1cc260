//! `direct`: `O_DIRECT` reads into aligned buffers, bypassing the page cache, then `write` to the
//! socket: what Redpanda does with its own cache in front. Every transfer reads from the device,
//! so it measures the disk, not the page cache.
//!
//! The segment is opened a second time with `O_DIRECT` (through `/proc/self/fd/N`, which works
//! for an unlinked segment too); the descriptor is cached per file. Reads start at the slice
//! position rounded down to 4096 bytes, into a 4096-aligned buffer of a multiple of 4096 bytes,
//! and the bytes before the slice are skipped when writing. A filesystem without real direct I/O
//! makes `transfer` fail with `Unsupported`, naming the file: one that refuses `O_DIRECT`
//! (`EINVAL`), and tmpfs/ramfs, which accept it since Linux 6.6 but serve it from the page cache.
//! Never a silent buffered read.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::transfer::{ReadPath, TransferStats};
use super::util;
use crate::log::segment::SegmentFile;
use crate::log::FileSlice;

/// Alignment of offsets, lengths and buffers for `O_DIRECT` (the common logical block size).
pub(crate) const ALIGN: usize = 4096;

/// O_DIRECT is a Linux open flag; whether a file's filesystem supports it is known only when the
/// file is opened, so this always succeeds and `transfer` reports a filesystem that refuses it.
pub(crate) fn probe() -> Result<(), String> {
    Ok(())
}

/// A heap buffer whose start is aligned to [`ALIGN`]: a `Vec` over-allocated by `ALIGN` bytes,
/// used from its first aligned byte (it never grows, so it never moves).
#[derive(Debug)]
struct AlignedBuf {
    raw: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(size: usize) -> Self {
        let len = size.max(ALIGN).next_multiple_of(ALIGN);
        let raw = vec![0u8; len + ALIGN];
        let offset = raw.as_ptr().align_offset(ALIGN);
        AlignedBuf { raw, offset, len }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.offset..self.offset + self.len]
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct DirectPath {
    buf: AlignedBuf,
    files: Vec<(Weak<SegmentFile>, File)>,
    stats: TransferStats,
}

impl DirectPath {
    /// A direct path with a buffer of `buffer_size` bytes rounded up to a multiple of 4096.
    pub fn new(buffer_size: usize) -> Self {
        DirectPath { buf: AlignedBuf::new(buffer_size), files: Vec::new(), stats: TransferStats::default() }
    }

    fn direct_fd(&mut self, seg: &Arc<SegmentFile>) -> io::Result<usize> {
        self.files.retain(|(w, _)| w.strong_count() > 0);
        let key = Arc::downgrade(seg);
        if let Some(i) = self.files.iter().position(|(w, _)| w.ptr_eq(&key)) {
            return Ok(i);
        }
        self.stats.syscalls += 1;
        let proc_path = format!("/proc/self/fd/{}", seg.file().as_raw_fd());
        let file = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&proc_path).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{}: the filesystem does not support O_DIRECT", seg.path().display()),
                )
            } else {
                e
            }
        })?;
        // Since Linux 6.6 tmpfs accepts O_DIRECT and serves it from the page cache: that would be
        // a silent fallback, so memory-backed filesystems are refused.
        self.stats.syscalls += 1;
        let fs_type = nix::sys::statfs::fstatfs(&file).map_err(io::Error::from)?.filesystem_type();
        const RAMFS_MAGIC: nix::sys::statfs::FsType = nix::sys::statfs::FsType(0x8584_58f6);
        if fs_type == nix::sys::statfs::TMPFS_MAGIC || fs_type == RAMFS_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: a memory filesystem (tmpfs/ramfs) has no direct I/O: O_DIRECT would read the page cache",
                    seg.path().display()
                ),
            ));
        }
        self.files.push((key, file));
        Ok(self.files.len() - 1)
    }
}

impl ReadPath for DirectPath {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut done = 0u64;
        let result = (|| {
            if slice.len == 0 {
                return Ok(0);
            }
            let i = self.direct_fd(&slice.segment)?;
            let cap = self.buf.len as u64;
            while done < slice.len {
                let pos = slice.position + done;
                let aligned = pos & !(ALIGN as u64 - 1);
                let skip = pos - aligned;
                let want = (skip + (slice.len - done)).min(cap).next_multiple_of(ALIGN as u64) as usize;
                self.stats.syscalls += 1;
                let buf = self.buf.as_mut_slice();
                let n = match self.files[i].1.read_at(&mut buf[..want], aligned) {
                    Ok(n) => n as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                self.stats.user_copied += n;
                if n <= skip {
                    return Err(util::truncated(slice.len - done));
                }
                let take = (n - skip).min(slice.len - done);
                let data = &self.buf.as_mut_slice()[skip as usize..(skip + take) as usize];
                util::write_all(socket, data, &mut self.stats, &mut done)?;
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
