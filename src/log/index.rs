//! The memory-mapped index file both segment indexes are built on, Kafka's `AbstractIndex`:
//! [`MappedIndex`] opens (and preallocates) the file, maps it, keeps the entry count, allocates the
//! sparse file on disk chunk by chunk before entries are written, searches entries (the
//! warm-section binary search), and resizes, trims, renames and deletes the file.
//!
//! The engine knows entries only as fixed-size byte slots ordered by a key the caller decodes;
//! the entry layouts, append rules and sanity checks belong to
//! [`OffsetIndex`](super::offset_index::OffsetIndex) (8-byte entries keyed by offset) and
//! [`TimeIndex`](super::time_index::TimeIndex) (12-byte entries keyed by timestamp), whose type
//! docs give the file format, the preallocation and what a crash leaves. Neither index imports
//! the other; both import this file.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

use super::error::LogError;

/// Bytes of the index a lookup tries first: Kafka's warm section (`AbstractIndex.warmEntries`).
const WARM_SECTION_BYTES: usize = 8192;

/// Bytes of an index file allocated on disk at a time (`fallocate`) as entries are appended:
/// 64 KiB, a multiple of the page size, so 8192 offset-index or 5461 time-index entries.
pub(crate) const ALLOCATION_CHUNK: u64 = 64 * 1024;

/// The mapping of an index file.
#[derive(Debug)]
enum Mapping {
    /// Zero-length file (mmap cannot map 0 bytes) or unmapped after a failed resize.
    None,
    ReadOnly(Mmap),
    Writable(MmapMut),
}

impl Mapping {
    fn bytes(&self) -> &[u8] {
        match self {
            Mapping::None => &[],
            Mapping::ReadOnly(m) => m,
            Mapping::Writable(m) => m,
        }
    }
}

/// A memory-mapped file of fixed-size index entries, Kafka's `AbstractIndex`: opening and
/// preallocation, the entry count, the warm-section binary search, resizing, trimming, renaming.
/// The entry layout belongs to [`OffsetIndex`](super::offset_index::OffsetIndex) and
/// [`TimeIndex`](super::time_index::TimeIndex).
///
/// Invariant: `entries <= max_entries == mapping length / entry_size`, so every entry slot below
/// `entries` lies inside the mapping.
#[derive(Debug)]
pub(super) struct MappedIndex {
    pub(super) path: PathBuf,
    pub(super) base_offset: i64,
    pub(super) max_index_size: usize,
    entry_size: usize,
    writable: bool,
    map: Mapping,
    /// `(device, inode)` of the file mapped, `None` for an index without a file. Checked before
    /// the file is reopened, renamed or deleted by path, so a stale path (the file renamed behind
    /// the index's back and another created under the old name) never touches the wrong file.
    file_id: Option<(u64, u64)>,
    /// File length in bytes when last mapped (may not be a multiple of `entry_size`).
    pub(super) length: u64,
    /// Bytes at the start of the file known to be backed on disk, `<= length`: an entry slot
    /// ending past this mark is allocated (`allocate_range`) before it is written, so a write
    /// through the mapping never touches an unbacked page (`SIGBUS` on a full disk). On open it
    /// is the bytes the entries occupy; truncation lowers it to the kept entries (the bytes past
    /// them may be holes of a file left by a crash).
    allocated: u64,
    pub(super) entries: usize,
    pub(super) max_entries: usize,
}

impl MappedIndex {
    /// Kafka's `AbstractIndex` constructor with `writable = true`: only a newly created file is
    /// preallocated (Kafka's `newlyCreated`); an existing empty file (the trimmed index of a
    /// segment without entries) stays empty and full until the segment layer resizes it, as
    /// Kafka's `LogLoader` resizes only the active segment's indexes. Loading a log therefore
    /// allocates nothing for its inactive segments.
    pub(super) fn open_writable(
        path: &Path,
        base_offset: i64,
        max_index_size: usize,
        entry_size: usize,
    ) -> Result<Self, LogError> {
        let (file, newly_created) = match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let f =
                    OpenOptions::new().read(true).write(true).open(path).map_err(|e| LogError::io("open", path, e))?;
                (f, false)
            }
            Err(e) => return Err(LogError::io("create", path, e)),
        };
        let meta = file.metadata().map_err(|e| LogError::io("stat", path, e))?;
        let mut length = meta.len();
        let preallocated = newly_created && length == 0;
        if preallocated {
            if max_index_size < entry_size {
                return Err(LogError::InvalidConfig {
                    key: "segment.index.bytes".into(),
                    value: max_index_size.to_string(),
                    reason: format!("an index needs room for at least one {entry_size}-byte entry"),
                });
            }
            length = round_down(max_index_size, entry_size) as u64;
        }
        // An existing file left by a crash keeps its preallocated length, and past the chunks
        // written it is holes. Reading a hole through a shared mapping of a tmpfs file allocates
        // a page, and on a full disk that read raises SIGBUS: the holes at the end of the file
        // (which hold no entries, only zeros) are cut off before it is mapped. Shrinking needs
        // no space.
        if !newly_created && length > 0 {
            if let Some(cut) = first_hole(&file, length).map(|hole| round_down(hole as usize, entry_size) as u64) {
                tracing::debug!(file = %path.display(), "cutting the unbacked tail of the index at byte {cut} of {length}");
                file.set_len(cut).map_err(|e| LogError::io("cut the unbacked tail", path, e))?;
                length = cut;
            }
        }
        // The file stays sparse (Kafka's `setLength`); entries are backed chunk by chunk in
        // `push_entry`.
        if preallocated {
            file.set_len(length).map_err(|e| LogError::io("set length", path, e))?;
        }
        let map = map_writable(&file, length, path)?;
        let max_entries = map.bytes().len() / entry_size;
        let entries = if preallocated { 0 } else { max_entries };
        Ok(MappedIndex {
            path: path.to_path_buf(),
            base_offset,
            max_index_size,
            entry_size,
            writable: true,
            map,
            file_id: Some((meta.dev(), meta.ino())),
            length,
            allocated: (entries * entry_size) as u64,
            entries,
            max_entries,
        })
    }

    /// Kafka's `AbstractIndex` constructor with `writable = false`, without creating the file.
    pub(super) fn open_read_only(path: &Path, base_offset: i64, entry_size: usize) -> Result<Self, LogError> {
        let file = File::open(path).map_err(|e| LogError::io("open", path, e))?;
        let meta = file.metadata().map_err(|e| LogError::io("stat", path, e))?;
        let length = meta.len();
        let map = if length == 0 {
            Mapping::None
        } else {
            check_mappable(length, path)?;
            // SAFETY: the mapping is read-only and only ever read as plain bytes. memmap2's contract
            // is that no one truncates or rewrites the file while it is mapped; read-only indexes
            // are opened on immutable data (read-only media, copied data directories, segments of
            // a stopped broker), and the writable index of this crate never shrinks a file it did
            // not map itself: the remaining hazard (SIGBUS if another process shrinks the file) is
            // documented on `OffsetIndex` and `TimeIndex`.
            let m = unsafe { Mmap::map(&file) }.map_err(|e| LogError::io("mmap", path, e))?;
            Mapping::ReadOnly(m)
        };
        let entries = map.bytes().len() / entry_size;
        Ok(MappedIndex {
            path: path.to_path_buf(),
            base_offset,
            max_index_size: 0,
            entry_size,
            writable: false,
            map,
            file_id: Some((meta.dev(), meta.ino())),
            length,
            allocated: length,
            entries,
            max_entries: entries,
        })
    }

    pub(super) fn empty_read_only(path: &Path, base_offset: i64, entry_size: usize) -> Self {
        MappedIndex {
            path: path.to_path_buf(),
            base_offset,
            max_index_size: 0,
            entry_size,
            writable: false,
            map: Mapping::None,
            file_id: None,
            length: 0,
            allocated: 0,
            entries: 0,
            max_entries: 0,
        }
    }

    /// The bytes of entry `n`.
    ///
    /// # Panics
    /// When `n >= entries`.
    pub(super) fn entry_bytes(&self, n: usize) -> &[u8] {
        assert!(
            n < self.entries,
            "index entry {n} requested from {} which has {} entries",
            self.path.display(),
            self.entries
        );
        let start = n * self.entry_size;
        &self.map.bytes()[start..start + self.entry_size]
    }

    /// Kafka's `largestLowerBoundSlotFor` (`indexSlotRangeFor` with `LARGEST_LOWER_BOUND`): the
    /// slot of the largest entry whose key is `<= target`, or `None`. Searches the warm section
    /// (the last `8192 / entry_size` entries) first. `key` decodes the sort key of an entry; on
    /// entries that are not sorted the answer is some slot or `None`, never a panic.
    pub(super) fn largest_lower_bound_slot(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        if self.entries == 0 {
            return None;
        }
        let key_at = |n: usize| key(self.entry_bytes(n));
        let last = self.entries - 1;
        let warm_entries = WARM_SECTION_BYTES / self.entry_size;
        let first_hot = last.saturating_sub(warm_entries);
        if key_at(first_hot) < target {
            return Some(binary_search(first_hot, last, target, key_at));
        }
        if key_at(0) > target {
            return None;
        }
        Some(binary_search(0, first_hot, target, key_at))
    }

    /// The number of leading entries whose key is `< target` (the first slot with key `>= target`),
    /// for `truncateTo`. Equals Kafka's slot choice in `truncateTo` on strictly increasing keys,
    /// and still removes every entry `>= target` when the time index repeats an offset.
    pub(super) fn first_slot_at_or_above(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> usize {
        let (mut lo, mut hi) = (0, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key(self.entry_bytes(mid)) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Kafka's `toRelative`: `offset - base_offset` when it is in `0..=i32::MAX`.
    pub(super) fn to_relative(&self, offset: i64) -> Option<u32> {
        let relative = offset.checked_sub(self.base_offset)?;
        if (0..=i64::from(i32::MAX)).contains(&relative) {
            Some(relative as u32)
        } else {
            None
        }
    }

    pub(super) fn relative_offset(&self, offset: i64) -> Result<u32, LogError> {
        self.to_relative(offset).ok_or_else(|| {
            self.invalid_append(format!(
                "integer overflow for offset {offset}: relative to base offset {} it must be in 0..={} \
                 (IndexOffsetOverflowException)",
                self.base_offset,
                i32::MAX
            ))
        })
    }

    pub(super) fn is_writable(&self) -> bool {
        self.writable
    }

    /// Errors: [`LogError::InvalidAppend`] when the index is read-only.
    pub(super) fn ensure_writable(&self) -> Result<(), LogError> {
        if self.writable {
            Ok(())
        } else {
            Err(self.invalid_append("index is opened read-only".into()))
        }
    }

    /// Writes `entry` into the next slot, first allocating the next chunk of the file on disk
    /// when the slot ends past the allocated mark (see [`OffsetIndex`](super::offset_index::OffsetIndex)'s type docs).
    ///
    /// Errors: [`LogError::InvalidAppend`] when the index is read-only or full;
    /// [`LogError::OutOfSpace`] when the chunk cannot be allocated (nothing is written);
    /// [`LogError::Io`] when the file cannot be reopened or allocated otherwise.
    pub(super) fn push_entry(&mut self, entry: &[u8]) -> Result<(), LogError> {
        debug_assert_eq!(entry.len(), self.entry_size);
        self.ensure_writable()?;
        if self.entries >= self.max_entries {
            return Err(self.invalid_append(format!(
                "attempt to append to a full index (entries = {}, max entries = {})",
                self.entries, self.max_entries
            )));
        }
        let start = self.entries * self.entry_size;
        let end = (start + self.entry_size) as u64;
        if end > self.allocated {
            self.allocate_through(end)?;
        }
        match &mut self.map {
            Mapping::Writable(m) => m[start..start + self.entry_size].copy_from_slice(entry),
            // Unreachable for a writable index: max_entries > entries >= 0 means a mapping exists.
            _ => return Err(self.invalid_append("index is opened read-only".into())),
        }
        self.entries += 1;
        Ok(())
    }

    pub(super) fn truncate_to_entries(&mut self, n: usize) -> Result<(), LogError> {
        self.ensure_writable()?;
        self.entries = self.entries.min(n);
        self.allocated = self.allocated.min((self.entries * self.entry_size) as u64);
        Ok(())
    }

    /// Opens the index file for reading and writing and checks it is still the file this index
    /// mapped (`check_same_file`); `op` names the operation in errors.
    fn open_same_file(&self, op: &'static str) -> Result<File, LogError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(|e| LogError::io("open", &self.path, e))?;
        let meta = file.metadata().map_err(|e| LogError::io("stat", &self.path, e))?;
        self.check_same_file(op, &meta)?;
        Ok(file)
    }

    /// Allocates the file on disk from the allocated mark through at least byte `needed`: up to
    /// the next multiple of [`ALLOCATION_CHUNK`], capped at the file length (never grows the
    /// file). Only the bytes past the mark are allocated, so already backed pages cost nothing.
    fn allocate_through(&mut self, needed: u64) -> Result<(), LogError> {
        let from = self.allocated;
        let to = needed.div_ceil(ALLOCATION_CHUNK).saturating_mul(ALLOCATION_CHUNK).min(self.length).max(needed);
        let file = self.open_same_file("allocate")?;
        allocate_range(&file, from, to, &self.path)?;
        self.allocated = to;
        Ok(())
    }

    pub(super) fn reset(&mut self) -> Result<(), LogError> {
        self.truncate_to_entries(0)?;
        self.resize(self.max_index_size)?;
        Ok(())
    }

    pub(super) fn trim_to_valid_size(&mut self) -> Result<bool, LogError> {
        self.resize(self.entries * self.entry_size)
    }

    pub(super) fn resize(&mut self, new_size: usize) -> Result<bool, LogError> {
        let rounded = round_down(new_size, self.entry_size);
        if self.length == rounded as u64 {
            return Ok(false);
        }
        if !self.writable {
            return Err(LogError::io(
                "resize",
                &self.path,
                io::Error::new(io::ErrorKind::PermissionDenied, "index opened read-only is never resized"),
            ));
        }
        let used = self.entries * self.entry_size;
        if rounded < used {
            return Err(self.invalid_append(format!(
                "cannot resize to {rounded} bytes: {} entries use {used} bytes",
                self.entries
            )));
        }
        let file = self.open_same_file("resize")?;
        // Drop our mapping before changing the file length: no mapping of ours ever spans past
        // the end of the file.
        self.map = Mapping::None;
        let remapped = file
            .set_len(rounded as u64)
            .map_err(|e| LogError::io("resize", &self.path, e))
            .and_then(|()| map_writable(&file, rounded as u64, &self.path));
        match remapped {
            Ok(map) => {
                self.max_entries = map.bytes().len() / self.entry_size;
                self.map = map;
                self.length = rounded as u64;
                // Shrinking frees the blocks past the new end; growing adds holes (sparse).
                self.allocated = self.allocated.min(self.length);
                Ok(true)
            }
            Err(e) => {
                // Map the file again at whatever length it has now, keeping the entries that fit.
                let again = file
                    .metadata()
                    .map_err(|e| LogError::io("stat", &self.path, e))
                    .and_then(|m| map_writable(&file, m.len(), &self.path).map(|map| (m.len(), map)));
                match again {
                    Ok((length, map)) => {
                        self.max_entries = map.bytes().len() / self.entry_size;
                        self.entries = self.entries.min(self.max_entries);
                        self.map = map;
                        self.length = length;
                        self.allocated = self.allocated.min(length).min((self.entries * self.entry_size) as u64);
                    }
                    Err(_) => {
                        self.entries = 0;
                        self.max_entries = 0;
                        self.allocated = 0;
                    }
                }
                Err(e)
            }
        }
    }

    pub(super) fn flush(&self) -> Result<(), LogError> {
        match &self.map {
            Mapping::Writable(m) => m.flush().map_err(|e| LogError::io("flush", &self.path, e)),
            _ => Ok(()),
        }
    }

    /// A handle of its own on a writable index's file, for an fsync run without the partition's
    /// lock (the scheduler's flush): `fsync` of the file writes back the pages dirtied through the
    /// shared mapping as `msync(MS_SYNC)` does (on Linux both are `vfs_fsync_range` on the file).
    /// `None` for an index without a writable mapping (read-only, empty): nothing to write back.
    ///
    /// Errors: [`LogError::Io`] opening the file, or when the path now names another file.
    pub(super) fn sync_file(&self) -> Result<Option<File>, LogError> {
        if !matches!(self.map, Mapping::Writable(_)) {
            return Ok(None);
        }
        let file = File::open(&self.path).map_err(|e| LogError::io("open", &self.path, e))?;
        let meta = file.metadata().map_err(|e| LogError::io("stat", &self.path, e))?;
        self.check_same_file("sync", &meta)?;
        Ok(Some(file))
    }

    pub(super) fn rename_to(&mut self, new_path: &Path) -> Result<(), LogError> {
        let meta = fs::metadata(&self.path).map_err(|e| LogError::io("rename", &self.path, e))?;
        self.check_same_file("rename", &meta)?;
        fs::rename(&self.path, new_path).map_err(|e| LogError::io("rename", &self.path, e))?;
        self.path = new_path.to_path_buf();
        Ok(())
    }

    /// Trims a writable index; a file already unlinked (a deleted segment) has nothing to trim.
    pub(super) fn close(mut self) -> Result<(), LogError> {
        if self.writable {
            match self.trim_to_valid_size() {
                Err(LogError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the file at `path` if it is still this index's file; an index without a file
    /// deletes nothing.
    pub(super) fn delete_if_exists(mut self) -> Result<bool, LogError> {
        self.map = Mapping::None;
        if self.file_id.is_none() {
            return Ok(false);
        }
        match fs::metadata(&self.path) {
            Ok(meta) => self.check_same_file("delete", &meta)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(LogError::io("delete", &self.path, e)),
        }
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(LogError::io("delete", &self.path, e)),
        }
    }

    /// Errors: [`LogError::Io`] (kind `Other`) when the file at `path` is not the file this index
    /// mapped.
    fn check_same_file(&self, op: &'static str, meta: &fs::Metadata) -> Result<(), LogError> {
        if self.file_id == Some((meta.dev(), meta.ino())) {
            return Ok(());
        }
        Err(LogError::io(
            op,
            &self.path,
            io::Error::other("the file at this path is not the file this index mapped (renamed without rename_to?)"),
        ))
    }

    /// Kafka's length check in `sanityCheck`.
    pub(super) fn check_length_multiple(&self) -> Result<(), LogError> {
        if !self.length.is_multiple_of(self.entry_size as u64) {
            return Err(self.corrupt(format!(
                "found {} bytes which is not a multiple of the entry size {}",
                self.length, self.entry_size
            )));
        }
        Ok(())
    }

    pub(super) fn corrupt(&self, reason: String) -> LogError {
        LogError::CorruptIndex { path: self.path.clone(), reason }
    }

    pub(super) fn invalid_append(&self, reason: String) -> LogError {
        LogError::InvalidAppend { path: self.path.clone(), reason }
    }
}

/// Kafka's `binarySearch` for `LARGEST_LOWER_BOUND` over slots `lo..=hi`, where the caller knows
/// `key(lo) <= target`.
fn binary_search(mut lo: usize, mut hi: usize, target: i64, key: impl Fn(usize) -> i64) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        let k = key(mid);
        if k > target {
            hi = mid - 1;
        } else if k < target {
            lo = mid;
        } else {
            return mid;
        }
    }
    lo
}

/// Kafka's `roundDownToExactMultiple`: the largest multiple of `factor` that is `<= number`.
fn round_down(number: usize, factor: usize) -> usize {
    factor * (number / factor)
}

/// Refuses lengths a mapping on this platform cannot cover.
fn check_mappable(length: u64, path: &Path) -> Result<(), LogError> {
    if usize::try_from(length).is_err() {
        return Err(LogError::CorruptIndex {
            path: path.to_path_buf(),
            reason: format!("{length} bytes cannot be memory-mapped on this platform"),
        });
    }
    Ok(())
}

/// Allocates disk space for bytes `from..to` of `file` (inside its size: the caller caps `to` at
/// the file length), so that writes through a mapping of those bytes never fault for lack of
/// space (`SIGBUS`).
///
/// `fallocate(2)` with mode 0 (tmpfs reserves the pages, ext4 and xfs allocate unwritten
/// extents); bytes already allocated keep their content. On a filesystem without fallocate
/// (`EOPNOTSUPP`) every block of the range is read and written back (`pread`/`pwrite`, zeros past
/// the end), which allocates holes without changing what they read as.
///
/// Errors: [`LogError::OutOfSpace`] (`ENOSPC`, `EDQUOT`; on tmpfs and ext4 a failed fallocate
/// allocates nothing), [`LogError::Io`] otherwise.
pub(super) fn allocate_range(file: &File, from: u64, to: u64, path: &Path) -> Result<(), LogError> {
    use std::os::unix::fs::FileExt;
    if to <= from {
        return Ok(());
    }
    let too_large = |n: u64| LogError::io("allocate", path, io::Error::other(format!("{n} bytes is too large")));
    let offset = libc::off_t::try_from(from).map_err(|_| too_large(from))?;
    let len = libc::off_t::try_from(to - from).map_err(|_| too_large(to))?;
    match nix::fcntl::fallocate(file, nix::fcntl::FallocateFlags::empty(), offset, len) {
        Ok(()) => return Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => {}
        Err(errno) => return Err(LogError::io("allocate", path, io::Error::from(errno))),
    }
    const CHUNK: u64 = 64 * 1024;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut position = from;
    while position < to {
        let n = CHUNK.min(to - position) as usize;
        let chunk = &mut buf[..n];
        chunk.fill(0);
        // A short read (the end of the file) leaves zeros, which extend the file.
        let mut read = 0;
        while read < n {
            match file.read_at(&mut chunk[read..], position + read as u64) {
                Ok(0) => break,
                Ok(r) => read += r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LogError::io("allocate (read back)", path, e)),
            }
        }
        file.write_all_at(chunk, position).map_err(|e| LogError::io("allocate (write back)", path, e))?;
        position += n as u64;
    }
    Ok(())
}

/// The offset of the first hole of `file` below `length` (`lseek(SEEK_HOLE)`), or `None` when
/// the file has none there or the filesystem cannot tell.
fn first_hole(file: &File, length: u64) -> Option<u64> {
    let hole = nix::unistd::lseek(file, 0, nix::unistd::Whence::SeekHole).ok()?;
    u64::try_from(hole).ok().filter(|&h| h < length)
}

/// Maps `length` bytes of `file` read-write (nothing for a zero length, which mmap refuses).
/// The bytes may be holes: the caller allocates each before writing it ([`allocate_range`]).
fn map_writable(file: &File, length: u64, path: &Path) -> Result<Mapping, LogError> {
    if length == 0 {
        return Ok(Mapping::None);
    }
    check_mappable(length, path)?;
    // SAFETY: a shared read-write mapping of an index file that this `MappedIndex` owns: it is
    // opened writable once per file (the segment layer's contract, documented on the index types),
    // its length only changes in `MappedIndex::resize`, which drops this mapping before calling
    // `set_len`, and its bytes are only accessed through this mapping as plain integers. Every
    // byte is allocated on disk before it is written (`MappedIndex::push_entry`), so a write
    // cannot fault for lack of space.
    let m = unsafe { MmapMut::map_mut(file) }.map_err(|e| LogError::io("mmap", path, e))?;
    Ok(Mapping::Writable(m))
}
