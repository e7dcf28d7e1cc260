//! The sparse offset index (`.index`), Kafka's `OffsetIndex`: the entry layout, its append
//! rules and sanity check, on the memory-mapped index engine of `super::index` (Kafka's
//! `AbstractIndex`, shared with [`super::time_index`]).
//!
//! See [`OffsetIndex`] for the file format.

use std::path::Path;

use super::error::LogError;
use super::index::MappedIndex;

/// Size of one `.index` entry in bytes: relative offset (4) + position (4).
pub const ENTRY_SIZE: usize = 8;

/// Kafka's default `segment.index.bytes` (10 MiB): the size a writable index is preallocated to.
pub const DEFAULT_MAX_INDEX_SIZE: usize = 10 * 1024 * 1024;

/// One `.index` entry with its offset made absolute, Kafka's `OffsetPosition`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexEntry {
    /// Absolute offset: segment base offset + the stored relative offset. In the files Kafka
    /// writes this is the last offset of a batch.
    pub offset: i64,
    /// Byte position in the segment's `.log` of the start of the batch holding `offset`.
    pub position: u32,
}

/// The sparse offset index of one segment (`<base offset>.index`), Kafka's `OffsetIndex`: maps
/// offsets to byte positions in the segment's `.log`.
///
/// ## Format
///
/// A flat array of 8-byte entries, no header, no checksum, all integers **big-endian**:
///
/// ```text
/// offset  size  field
///  0       4    relative offset: absolute offset - segment base offset (0..=i32::MAX)
///  4       4    position: byte position of the batch in the .log file
/// ```
///
/// Kafka reads the relative offset as a signed `int`; so does this type, so a corrupt entry with
/// the top bit set reads as an offset below the base offset, which [`OffsetIndex::sanity_check`]
/// reports. Relative offsets are what make 4 bytes enough: an offset that does not fit
/// ([`OffsetIndex::relative_offset`]) forces the segment layer to roll a new segment.
///
/// ## Sparseness
///
/// The index does not hold an entry for every record. Kafka's `LogSegment.append` adds one entry
/// (last offset of the appended batch, position where it starts) whenever more than
/// `index.interval.bytes` (4096) bytes were appended since the previous entry. A lookup therefore
/// gives a position at or before the wanted batch, from which the segment scans batch headers
/// forward. Offsets strictly increase from entry to entry, and positions never decrease.
///
/// ## Size, preallocation and crashes
///
/// A writable index is preallocated to `segment.index.bytes` (rounded down to a multiple of 8) and
/// memory-mapped; appends write into the mapping. As in Kafka (`RandomAccessFile.setLength`) the
/// file is sparse: a fresh 10 MiB index uses no disk blocks. Kafka then writes entries straight
/// into the mapping, so on a full filesystem the first write to an unbacked page cannot be backed
/// and the process dies of `SIGBUS`. Here the index tracks how many leading bytes of the file are
/// known to be backed on disk, and before an entry is written past that mark the next
/// `ALLOCATION_CHUNK` of the index engine (`index.rs`: 64 KiB, page aligned, capped at the file
/// length) is allocated with `fallocate(2)` mode 0 inside the file size (tmpfs reserves the pages,
/// ext4 and xfs allocate unwritten extents; where a filesystem does not support it, `EOPNOTSUPP`,
/// each block of the chunk is read and written back with `pread`/`pwrite`, which allocates the
/// holes and keeps the content). A full disk is therefore an error ([`LogError::OutOfSpace`]) from
/// the append that needs the space, never a signal, and an index costs about its entries' bytes
/// rounded up to a chunk. On a clean close ([`OffsetIndex::close`], or
/// [`OffsetIndex::trim_to_valid_size`] when the segment rolls) the file is truncated to
/// `entries * 8` bytes. After a crash the file keeps its preallocated length: on reopen the entry count is
/// `file length / 8` as in Kafka, so the unused tail reads as entries of zeros (offset = base
/// offset, position 0). No attempt is made to detect this on open; as in Kafka the segment layer
/// calls [`OffsetIndex::sanity_check`] (which reports the non-increasing zero entries) and rebuilds
/// the index from the `.log` (Kafka's recovery path).
///
/// ## Modes
///
/// - [`OffsetIndex::open`]: writable, a read-write shared mapping (`MmapMut`).
/// - [`OffsetIndex::open_read_only`]: a read-only mapping of an existing file that is never
///   written, resized or trimmed; for data on read-only media (the corpus, a copied data directory)
///   and for `log dump`.
///
/// ## The mapping and the file
///
/// The file is not kept open: as in Kafka only the mapping holds it (no file descriptor per
/// index). The file may therefore be renamed or unlinked while mapped: a deleted segment stays
/// readable through the mapping until the index is dropped. Operations that go through the path
/// again (resize, trim, rename, delete) first check that the file there is still the one mapped
/// (device and inode), so rename the file with [`OffsetIndex::rename_to`], not behind the index's
/// back. The index only changes its file's length after dropping its own mapping. Callers must
/// not open the same file writable twice, and must not let a writer shrink a file that a
/// read-only index has mapped: reading past the new end of a mapped file raises `SIGBUS`.
///
/// Not internally synchronised: lookups take `&self`, changes `&mut self`; the segment layer
/// wraps the index in its own lock.
#[derive(Debug)]
pub struct OffsetIndex {
    inner: MappedIndex,
}

impl OffsetIndex {
    /// Opens (creating it when missing) a writable offset index for the segment starting at
    /// `base_offset`, Kafka's `new OffsetIndex(file, baseOffset, maxIndexSize, writable = true)`.
    ///
    /// A new file is preallocated to `max_index_size` bytes (`segment.index.bytes`) rounded down
    /// to a multiple of 8, and has no entries. An existing empty file stays empty, with no room
    /// (full) until [`Self::resize`]d, as Kafka's `newlyCreated` rule. An existing non-empty file is mapped at
    /// its current length and holds `length / 8` entries; it is **not** resized, exactly as in
    /// Kafka, so a trimmed index of an old segment stays full ([`Self::is_full`]). Kafka's
    /// `LogLoader` then calls `resize(maxIndexSize)` on the active segment's indexes only; the
    /// segment layer does the same with [`Self::resize`].
    ///
    /// The file stays sparse; space is allocated chunk by chunk as entries are appended (see the
    /// type docs).
    ///
    /// Errors: [`LogError::InvalidConfig`] (`segment.index.bytes`) when a new file would be
    /// preallocated with `max_index_size < 8`; [`LogError::OutOfSpace`] when the disk cannot hold
    /// the new (empty) file; [`LogError::Io`] when the file cannot be created, sized or mapped.
    pub fn open(path: &Path, base_offset: i64, max_index_size: usize) -> Result<Self, LogError> {
        Ok(OffsetIndex { inner: MappedIndex::open_writable(path, base_offset, max_index_size, ENTRY_SIZE)? })
    }

    /// Opens an existing offset index read-only: it holds `file length / 8` entries and is never
    /// written or resized. See the type docs for the `SIGBUS` caveat.
    ///
    /// Errors: [`LogError::Io`] when the file is missing or cannot be mapped.
    pub fn open_read_only(path: &Path, base_offset: i64) -> Result<Self, LogError> {
        Ok(OffsetIndex { inner: MappedIndex::open_read_only(path, base_offset, ENTRY_SIZE)? })
    }

    /// An empty read-only index that maps nothing and touches no file, named `path`: for a
    /// read-only segment whose `.index` is missing (it must be rebuilt, but read-only media cannot
    /// hold a rebuilt one). Lookups return `(base_offset, 0)`, i.e. scan the segment from its start.
    pub fn empty_read_only(path: &Path, base_offset: i64) -> Self {
        OffsetIndex { inner: MappedIndex::empty_read_only(path, base_offset, ENTRY_SIZE) }
    }

    /// The largest entry whose offset is `<= target_offset`, or `(base_offset, 0)` when the index
    /// is empty or every entry is above the target. Kafka's `OffsetIndex.lookup` with
    /// `AbstractIndex.largestLowerBoundSlotFor`: a binary search that first tries the last 1024
    /// entries (8 KiB, the "warm" section most lookups hit, which keeps those pages in the page
    /// cache). O(log entries), no allocation.
    pub fn lookup(&self, target_offset: i64) -> IndexEntry {
        match self.inner.largest_lower_bound_slot(target_offset, |e| self.decode(e).offset) {
            Some(slot) => self.entry(slot),
            None => IndexEntry { offset: self.inner.base_offset, position: 0 },
        }
    }

    /// The first entry whose position is `>= position`, `None` when every entry is below it
    /// (Kafka's `OffsetIndex.fetchUpperBoundOffset`, `smallestUpperBoundSlotFor` by value): an
    /// offset at or past the end of a fetch of `position - start` bytes. O(log entries).
    pub fn upper_bound_by_position(&self, position: u32) -> Option<IndexEntry> {
        let (mut lo, mut hi) = (0, self.entries());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).position < position {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < self.entries()).then(|| self.entry(lo))
    }

    /// The `n`th entry (0-based), absolute offset.
    ///
    /// # Panics
    /// When `n >= self.entries()` (Kafka throws `IllegalArgumentException`).
    pub fn entry(&self, n: usize) -> IndexEntry {
        self.decode(self.inner.entry_bytes(n))
    }

    /// All entries in order.
    pub fn iter(&self) -> impl Iterator<Item = IndexEntry> + '_ {
        (0..self.entries()).map(|n| self.entry(n))
    }

    /// Number of entries in the index.
    pub fn entries(&self) -> usize {
        self.inner.entries
    }

    /// Number of entries the mapped file can hold (`file length / 8`).
    pub fn max_entries(&self) -> usize {
        self.inner.max_entries
    }

    /// No slot is left: `entries() >= max_entries()` (Kafka's `AbstractIndex.isFull`). The segment
    /// layer rolls a new segment when its offset index is full. A read-only index is always full.
    pub fn is_full(&self) -> bool {
        self.inner.entries >= self.inner.max_entries
    }

    /// The offset of the last entry, or the base offset when the index is empty (Kafka's
    /// `OffsetIndex.lastOffset`).
    pub fn last_offset(&self) -> i64 {
        match self.entries() {
            0 => self.inner.base_offset,
            n => self.entry(n - 1).offset,
        }
    }

    /// Appends the entry `(offset, position)`, Kafka's `OffsetIndex.append`.
    ///
    /// Errors ([`LogError::InvalidAppend`] unless noted):
    /// - the index is full (Kafka: `IllegalArgumentException`) or read-only;
    /// - the index has entries and `offset <= last_offset()` (Kafka: `InvalidOffsetException`;
    ///   an equal offset is refused too), or `position` is below the last entry's position;
    /// - `offset - base_offset` is outside `0..=i32::MAX` (Kafka: `IndexOffsetOverflowException`).
    ///
    /// [`LogError::OutOfSpace`] when the entry needs the next chunk of the file allocated and the
    /// disk is full (the index is unchanged; see the type docs).
    pub fn append(&mut self, offset: i64, position: u32) -> Result<(), LogError> {
        self.inner.ensure_writable()?;
        if self.is_full() {
            return Err(self.inner.invalid_append(format!(
                "attempt to append to a full index (entries = {}, max entries = {})",
                self.inner.entries, self.inner.max_entries
            )));
        }
        if self.entries() > 0 {
            let last = self.entry(self.entries() - 1);
            if offset <= last.offset {
                return Err(self.inner.invalid_append(format!(
                    "attempt to append offset {offset} at slot {} no larger than the last offset appended ({})",
                    self.entries(),
                    last.offset
                )));
            }
            if position < last.position {
                return Err(self.inner.invalid_append(format!(
                    "attempt to append offset {offset} at position {position}, below the last entry's position {}",
                    last.position
                )));
            }
        }
        let relative = self.inner.relative_offset(offset)?;
        let mut entry = [0u8; ENTRY_SIZE];
        entry[0..4].copy_from_slice(&relative.to_be_bytes());
        entry[4..8].copy_from_slice(&position.to_be_bytes());
        self.inner.push_entry(&entry)
    }

    /// Removes every entry whose offset is `>= offset`, Kafka's `OffsetIndex.truncateTo`;
    /// truncating to an offset above the last entry changes nothing. Only the entry count changes;
    /// the file keeps its size (the bytes past the entries are stale and get overwritten).
    ///
    /// Errors: [`LogError::InvalidAppend`] on a read-only index.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let keep = self.inner.first_slot_at_or_above(offset, |e| self.decode(e).offset);
        self.inner.truncate_to_entries(keep)
    }

    /// Keeps the first `min(n, entries())` entries (Kafka's `truncateToEntries`).
    ///
    /// Errors: [`LogError::InvalidAppend`] on a read-only index.
    pub fn truncate_to_entries(&mut self, n: usize) -> Result<(), LogError> {
        self.inner.truncate_to_entries(n)
    }

    /// Removes all entries and resizes the file to `max_index_size` (Kafka's `AbstractIndex.reset`),
    /// before a rebuild.
    ///
    /// Errors: [`LogError::InvalidAppend`] on a read-only index; [`LogError::Io`] as
    /// [`Self::resize`].
    pub fn reset(&mut self) -> Result<(), LogError> {
        self.inner.reset()
    }

    /// Truncates the file to exactly `entries() * 8` bytes and remaps it (Kafka's
    /// `trimToValidSize`), done when the segment rolls or closes. Afterwards the index is full.
    /// Returns whether the file length changed; a read-only index of the right size returns
    /// `Ok(false)`.
    ///
    /// Errors: as [`Self::resize`].
    pub fn trim_to_valid_size(&mut self) -> Result<bool, LogError> {
        self.inner.trim_to_valid_size()
    }

    /// Sets the file length to `new_size` rounded down to a multiple of 8 and remaps it, keeping
    /// the entries (Kafka's `AbstractIndex.resize`). Returns `Ok(false)` when the length is
    /// already that. The old mapping is dropped before the file length changes.
    ///
    /// The file is only sized (sparse, as Kafka's `setLength`); space is allocated as entries are
    /// appended (see the type docs).
    ///
    /// Errors: [`LogError::Io`] with kind `PermissionDenied` on a read-only index,
    /// [`LogError::InvalidAppend`] when the new size cannot hold the current entries (Kafka would
    /// throw), [`LogError::Io`] when the file cannot be reopened, sized or mapped. After an I/O error
    /// past the unmap, the file is mapped again at its current length with the entries that still
    /// fit, or, when even that fails, the index is left empty and unmapped (never dangling).
    pub fn resize(&mut self, new_size: usize) -> Result<bool, LogError> {
        self.inner.resize(new_size)
    }

    /// Writes dirty pages of the mapping to disk (`msync(MS_SYNC)`, Kafka's `mmap.force()`).
    /// A no-op for a read-only index.
    ///
    /// Errors: [`LogError::Io`].
    pub fn flush(&self) -> Result<(), LogError> {
        self.inner.flush()
    }

    /// A handle of its own on the index file, for an fsync without the partition's lock (see
    /// `MappedIndex::sync_file` in `index.rs`); `None` when the index is not writable.
    ///
    /// Errors: [`LogError::Io`].
    pub(crate) fn sync_file(&self) -> Result<Option<std::fs::File>, LogError> {
        self.inner.sync_file()
    }

    /// Checks the index without trusting it, Kafka's `OffsetIndex.sanityCheck` made stricter: the
    /// file length is a multiple of 8, the last offset is not below the base offset, and every
    /// entry is at or above the base offset with offsets strictly increasing and positions never
    /// decreasing. The last check catches the zero tail of a preallocated index left by an unclean
    /// shutdown. O(entries), reads the whole mapping.
    ///
    /// Errors: [`LogError::CorruptIndex`] naming the file and the first problem found.
    pub fn sanity_check(&self) -> Result<(), LogError> {
        let base = self.inner.base_offset;
        let last = self.last_offset();
        if self.entries() != 0 && last < base {
            return Err(self.inner.corrupt(format!(
                "index has non-zero size but the last offset is {last} which is less than the base offset {base}"
            )));
        }
        self.inner.check_length_multiple()?;
        let mut prev: Option<IndexEntry> = None;
        for (n, e) in self.iter().enumerate() {
            if e.offset < base {
                return Err(self
                    .inner
                    .corrupt(format!("entry {n}: offset {} is below the base offset {base}", e.offset)));
            }
            if let Some(p) = prev {
                if e.offset <= p.offset {
                    return Err(self.inner.corrupt(format!(
                        "entry {n}: offset {} is not larger than the previous entry's offset {} \
                         (offsets must strictly increase; a zero tail means an unclean shutdown)",
                        e.offset, p.offset
                    )));
                }
                if e.position < p.position {
                    return Err(self.inner.corrupt(format!(
                        "entry {n}: position {} is below the previous entry's position {}",
                        e.position, p.position
                    )));
                }
            }
            prev = Some(e);
        }
        Ok(())
    }

    /// `offset - base_offset` as stored in the file, Kafka's `AbstractIndex.relativeOffset`.
    ///
    /// Errors: [`LogError::InvalidAppend`] when the difference is outside `0..=i32::MAX` (Kafka's
    /// `IndexOffsetOverflowException`; Kafka stores it in a signed `int`).
    pub fn relative_offset(&self, offset: i64) -> Result<u32, LogError> {
        self.inner.relative_offset(offset)
    }

    /// Whether `offset` can be stored relative to the base offset (Kafka's `canAppendOffset`).
    pub fn can_append_offset(&self, offset: i64) -> bool {
        self.inner.to_relative(offset).is_some()
    }

    /// The index file's current path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Base offset of the segment; entries store offsets relative to it.
    pub fn base_offset(&self) -> i64 {
        self.inner.base_offset
    }

    /// The `max_index_size` given at open (0 for a read-only index).
    pub fn max_index_size(&self) -> usize {
        self.inner.max_index_size
    }

    /// Current file length in bytes, as last sized or seen by this index (Kafka's `length`).
    pub fn length(&self) -> u64 {
        self.inner.length
    }

    /// Bytes used by entries: `entries() * 8` (Kafka's `sizeInBytes`).
    pub fn size_in_bytes(&self) -> usize {
        self.inner.entries * ENTRY_SIZE
    }

    /// Whether the index was opened writable.
    pub fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }

    /// Renames the backing file (Kafka's `renameTo`), e.g. to `.deleted` before asynchronous
    /// deletion or from `.swap` after cleaning. The mapping stays valid. The stored path changes
    /// only when the rename succeeded.
    ///
    /// Errors: [`LogError::Io`] naming the old path, also (kind `Other`) when the file at the old
    /// path is no longer the file this index mapped.
    pub fn rename_to(&mut self, new_path: &Path) -> Result<(), LogError> {
        self.inner.rename_to(new_path)
    }

    /// Trims the file to its entries (writable index) and unmaps it, Kafka's `close`. Dropping the
    /// index without `close` unmaps without trimming, which leaves the file as a crash would.
    ///
    /// A file already unlinked (a deleted segment) is not trimmed and is no error.
    ///
    /// Errors: as [`Self::trim_to_valid_size`].
    pub fn close(self) -> Result<(), LogError> {
        self.inner.close()
    }

    /// Unmaps the index and deletes its file; returns whether a file was deleted (Kafka's
    /// `deleteIfExists`).
    ///
    /// An index without a file ([`Self::empty_read_only`]) deletes nothing.
    ///
    /// Errors: [`LogError::Io`] when the file exists but cannot be removed, or (kind `Other`) is no
    /// longer the file this index mapped.
    pub fn delete_if_exists(self) -> Result<bool, LogError> {
        self.inner.delete_if_exists()
    }

    fn decode(&self, e: &[u8]) -> IndexEntry {
        let relative = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
        let position = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
        IndexEntry { offset: self.inner.base_offset.saturating_add(i64::from(relative)), position }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File, OpenOptions};
    use std::io;
    use std::os::unix::fs::MetadataExt;

    use super::super::index::ALLOCATION_CHUNK;
    use super::*;
    use proptest::prelude::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn entry(offset: i64, position: u32) -> IndexEntry {
        IndexEntry { offset, position }
    }

    /// base 100, entries (110, 0) (120, 4096) (130, 8192) (140, 12288)
    fn sample(dir: &Path) -> OffsetIndex {
        let mut idx = OffsetIndex::open(&dir.join("00000000000000000100.index"), 100, 1024).unwrap();
        for i in 1..=4i64 {
            idx.append(100 + i * 10, (i as u32 - 1) * 4096).unwrap();
        }
        idx
    }

    #[test]
    fn new_file_is_preallocated_and_empty() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        let idx = OffsetIndex::open(&path, 0, 1003).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 1000);
        assert_eq!(idx.entries(), 0);
        assert_eq!(idx.max_entries(), 125);
        assert!(!idx.is_full());
        assert_eq!(idx.last_offset(), 0);
        assert_eq!(idx.lookup(5), entry(0, 0));
        assert!(idx.is_writable());
    }

    /// A writable index stays sparse as in Kafka and is allocated on disk one chunk at a time
    /// just before entries are written there (a write through the mapping of an unbacked page
    /// raises SIGBUS on a full disk, issue 12), so a fresh index costs about no blocks.
    #[test]
    fn writable_index_is_sparse_and_allocated_by_chunk() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        let chunk = ALLOCATION_CHUNK;
        let mut idx = OffsetIndex::open(&path, 0, 1024 * 1024).unwrap();
        let blocks = |p: &Path| fs::metadata(p).unwrap().blocks() * 512;
        assert_eq!(fs::metadata(&path).unwrap().len(), 1024 * 1024);
        assert!(blocks(&path) < 8192, "a fresh index uses {} bytes", blocks(&path));
        let n = 9000u64; // past one chunk (8192 entries)
        for i in 0..n {
            idx.append(i as i64, i as u32).unwrap();
        }
        let expected = (n * ENTRY_SIZE as u64).div_ceil(chunk) * chunk;
        let used = blocks(&path);
        assert!(used >= expected && used < expected + chunk, "{used} bytes for {n} entries, expected ~{expected}");
        // Truncation lowers the mark; appending again re-allocates (a no-op where backed).
        idx.truncate_to_entries(10).unwrap();
        idx.append(100_000, 100_000).unwrap();
        assert!(idx.resize(2 * 1024 * 1024).unwrap());
        assert!(blocks(&path) < expected + chunk, "a resize stays sparse: {} bytes", blocks(&path));
        assert_eq!(idx.entry(10), entry(100_000, 100_000), "entries survive the resize");
        // An existing sparse file (left by a crash) is not allocated when opened, and after the
        // rebuild's reset the entries are allocated again before they are written.
        let sparse = dir.path().join("b.index");
        File::create(&sparse).unwrap().set_len(256 * 1024).unwrap();
        {
            use std::io::Write;
            let mut f = OpenOptions::new().write(true).open(&sparse).unwrap();
            f.write_all(&[0, 0, 0, 1, 0, 0, 0, 0]).unwrap(); // one entry, then holes
        }
        let mut idx = OffsetIndex::open(&sparse, 0, 256 * 1024).unwrap();
        // The holes past the first page are cut (a read of a hole through a tmpfs mapping
        // allocates a page: SIGBUS on a full disk); the written page keeps its entries, zeros
        // included, which the sanity check reports as after any crash.
        let page = fs::metadata(&sparse).unwrap().len();
        assert!(page > 0 && page < 256 * 1024 && page.is_multiple_of(8), "cut at {page}");
        assert_eq!(idx.entries() as u64, page / 8);
        assert_eq!(idx.entry(0), entry(1, 0));
        assert!(idx.sanity_check().is_err() || idx.entries() == 1);
        assert!(blocks(&sparse) <= 8192, "{} bytes allocated", blocks(&sparse));
        idx.reset().unwrap();
        idx.append(1, 0).unwrap();
        assert!(blocks(&sparse) >= chunk, "{} bytes allocated after the first append", blocks(&sparse));
    }

    /// A full disk is a typed error from the append that needs the next chunk, never SIGBUS.
    /// Needs a small filesystem: run as root on a Linux tmpfs (skipped with a notice otherwise).
    #[test]
    fn append_on_a_full_tmpfs_is_out_of_space() {
        // A private 256 KiB tmpfs, filled up after the index's first chunk is allocated.
        let dir = tmp();
        let mnt = dir.path().join("fd");
        fs::create_dir(&mnt).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&mnt)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !mounted {
            eprintln!("NOTICE: append_on_a_full_tmpfs_is_out_of_space skipped (cannot mount a tmpfs; needs root)");
            return;
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let path = mnt.join("a.index");
            let mut idx = OffsetIndex::open(&path, 0, 1024 * 1024).unwrap();
            idx.append(0, 0).unwrap();
            // Fill the rest of the disk.
            let mut filler = File::create(mnt.join("filler")).unwrap();
            let block = vec![1u8; 4096];
            while std::io::Write::write_all(&mut filler, &block).is_ok() {}
            drop(filler);
            let mut i = 1i64;
            let err = loop {
                match idx.append(i, i as u32) {
                    Ok(()) => i += 1,
                    Err(e) => break e,
                }
                assert!(i < 200_000, "never ran out of space");
            };
            assert!(matches!(err, LogError::OutOfSpace { .. }), "{err:?}");
            assert_eq!(idx.entries(), i as usize, "the failed append changed nothing");
            assert_eq!(i as u64 * ENTRY_SIZE as u64 % ALLOCATION_CHUNK, 0, "fails at a chunk boundary");
            fs::remove_file(mnt.join("filler")).unwrap();
            idx.append(i, i as u32).unwrap();
        }));
        let _ = std::process::Command::new("umount").arg(&mnt).status();
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    }

    /// Kafka preallocates only a newly created file: an existing empty one (a trimmed index
    /// without entries) stays empty until resized, so loading a log allocates nothing for it.
    #[test]
    fn existing_empty_file_is_not_preallocated() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        File::create(&path).unwrap();
        let mut idx = OffsetIndex::open(&path, 0, 80).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        assert_eq!((idx.entries(), idx.max_entries()), (0, 0));
        assert!(idx.is_full());
        assert!(idx.resize(80).unwrap());
        assert_eq!((idx.entries(), idx.max_entries()), (0, 10));
    }

    #[test]
    fn tiny_max_index_size_is_refused() {
        let dir = tmp();
        let err = OffsetIndex::open(&dir.path().join("a.index"), 0, 7).unwrap_err();
        assert!(matches!(err, LogError::InvalidConfig { ref key, .. } if key == "segment.index.bytes"), "{err}");
    }

    #[test]
    fn append_and_lookup() {
        let dir = tmp();
        let idx = sample(dir.path());
        assert_eq!(idx.entries(), 4);
        assert_eq!(idx.last_offset(), 140);
        // before the first entry
        assert_eq!(idx.lookup(100), entry(100, 0));
        assert_eq!(idx.lookup(109), entry(100, 0));
        assert_eq!(idx.lookup(i64::MIN), entry(100, 0));
        // exact hits
        assert_eq!(idx.lookup(110), entry(110, 0));
        assert_eq!(idx.lookup(130), entry(130, 8192));
        assert_eq!(idx.lookup(140), entry(140, 12288));
        // between entries
        assert_eq!(idx.lookup(125), entry(120, 4096));
        assert_eq!(idx.lookup(139), entry(130, 8192));
        // after the last
        assert_eq!(idx.lookup(141), entry(140, 12288));
        assert_eq!(idx.lookup(i64::MAX), entry(140, 12288));
        assert_eq!(
            idx.iter().collect::<Vec<_>>(),
            vec![entry(110, 0), entry(120, 4096), entry(130, 8192), entry(140, 12288)]
        );
        idx.sanity_check().unwrap();
    }

    #[test]
    fn bytes_on_disk_are_big_endian_relative() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        let mut idx = OffsetIndex::open(&path, 1000, 64).unwrap();
        idx.append(1000 + 0x0102_0304, 0x0A0B_0C0D).unwrap();
        idx.close().unwrap();
        assert_eq!(fs::read(&path).unwrap(), [1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D]);
    }

    #[test]
    fn append_rules() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        // equal and smaller offsets are refused
        assert!(matches!(idx.append(140, 20000), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(idx.append(135, 20000), Err(LogError::InvalidAppend { .. })));
        // position going backwards is refused, equal is allowed
        assert!(matches!(idx.append(150, 12287), Err(LogError::InvalidAppend { .. })));
        idx.append(150, 12288).unwrap();
        assert_eq!(idx.entries(), 5);

        // relative offset overflow and below-base offsets
        let mut fresh = OffsetIndex::open(&dir.path().join("b.index"), 100, 64).unwrap();
        assert!(matches!(fresh.append(99, 0), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(fresh.append(100 + i64::from(i32::MAX) + 1, 0), Err(LogError::InvalidAppend { .. })));
        assert_eq!(fresh.relative_offset(100 + i64::from(i32::MAX)).unwrap(), i32::MAX as u32);
        assert!(fresh.can_append_offset(100));
        assert!(!fresh.can_append_offset(i64::MAX));
        assert!(!fresh.can_append_offset(i64::MIN));
        fresh.append(100, 0).unwrap();
        assert_eq!(fresh.entries(), 1);
    }

    #[test]
    fn full_index() {
        let dir = tmp();
        let mut idx = OffsetIndex::open(&dir.path().join("a.index"), 0, 24).unwrap();
        assert_eq!(idx.max_entries(), 3);
        for i in 0..3 {
            assert!(!idx.is_full());
            idx.append(i, i as u32 * 10).unwrap();
        }
        assert!(idx.is_full());
        let err = idx.append(10, 100).unwrap_err();
        assert!(err.to_string().contains("full"), "{err}");
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.lookup(100), entry(2, 20));
    }

    #[test]
    fn truncate_to() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        idx.truncate_to(200).unwrap(); // above the last: no effect
        assert_eq!(idx.entries(), 4);
        idx.truncate_to(130).unwrap(); // exact: removes 130 and 140
        assert_eq!(idx.entries(), 2);
        assert_eq!(idx.last_offset(), 120);
        idx.append(125, 5000).unwrap(); // appends resume after the truncation point
        idx.truncate_to(121).unwrap(); // between: removes 125
        assert_eq!(idx.iter().collect::<Vec<_>>(), vec![entry(110, 0), entry(120, 4096)]);
        idx.truncate_to(50).unwrap(); // below all
        assert_eq!(idx.entries(), 0);
        assert_eq!(idx.last_offset(), 100);
        assert_eq!(idx.lookup(1000), entry(100, 0));
    }

    #[test]
    fn truncate_to_entries_and_reset() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        idx.truncate_to_entries(10).unwrap(); // more than there are: unchanged
        assert_eq!(idx.entries(), 4);
        idx.truncate_to_entries(1).unwrap();
        assert_eq!(idx.iter().collect::<Vec<_>>(), vec![entry(110, 0)]);
        idx.trim_to_valid_size().unwrap();
        assert_eq!(fs::metadata(idx.path()).unwrap().len(), 8);
        idx.reset().unwrap();
        assert_eq!(idx.entries(), 0);
        assert_eq!(fs::metadata(idx.path()).unwrap().len(), 1024);
        assert_eq!(idx.max_entries(), 128);
        idx.append(100, 0).unwrap();
    }

    #[test]
    fn trim_then_reopen_gives_same_entries() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        let path = idx.path().to_path_buf();
        let before: Vec<_> = idx.iter().collect();
        assert!(idx.trim_to_valid_size().unwrap());
        assert_eq!(fs::metadata(&path).unwrap().len(), 32);
        assert!(idx.is_full());
        assert!(!idx.trim_to_valid_size().unwrap()); // already trimmed
        assert_eq!(idx.iter().collect::<Vec<_>>(), before);
        drop(idx);

        let mut reopened = OffsetIndex::open(&path, 100, 1024).unwrap();
        assert_eq!(reopened.iter().collect::<Vec<_>>(), before);
        assert!(reopened.is_full(), "an existing index is not resized on open, as in Kafka");
        reopened.sanity_check().unwrap();
        // the active segment's index is then resized, keeping its entries
        assert!(reopened.resize(1024).unwrap());
        assert_eq!(reopened.max_entries(), 128);
        assert_eq!(reopened.iter().collect::<Vec<_>>(), before);
        reopened.append(150, 16384).unwrap();
        reopened.close().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 40);

        let ro = OffsetIndex::open_read_only(&path, 100).unwrap();
        assert_eq!(ro.entries(), 5);
        assert_eq!(ro.entry(4), entry(150, 16384));
    }

    #[test]
    fn resize_refuses_to_drop_entries() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        assert!(matches!(idx.resize(31), Err(LogError::InvalidAppend { .. })));
        assert_eq!(idx.entries(), 4);
        assert_eq!(idx.lookup(140), entry(140, 12288));
    }

    #[test]
    fn reopen_preallocated_file_after_crash() {
        let dir = tmp();
        let idx = sample(dir.path());
        let path = idx.path().to_path_buf();
        idx.flush().unwrap();
        drop(idx); // no close: the file keeps its preallocated 1024 bytes, as after a crash
        assert_eq!(fs::metadata(&path).unwrap().len(), 1024);
        let idx = OffsetIndex::open(&path, 100, 1024).unwrap();
        // Kafka's rule: entries = length / 8, so the zero tail shows up as entries ...
        assert_eq!(idx.entries(), 128);
        assert_eq!(idx.entry(3), entry(140, 12288));
        assert_eq!(idx.entry(4), entry(100, 0));
        // ... which the sanity check reports
        let err = idx.sanity_check().unwrap_err();
        assert!(matches!(err, LogError::CorruptIndex { .. }));
        assert!(err.to_string().contains("entry 4"), "{err}");
    }

    #[test]
    fn read_only_open() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        idx.trim_to_valid_size().unwrap();
        let path = idx.path().to_path_buf();
        drop(idx);
        let mut ro = OffsetIndex::open_read_only(&path, 100).unwrap();
        assert!(!ro.is_writable());
        assert_eq!(ro.entries(), 4);
        assert!(ro.is_full());
        assert_eq!(ro.lookup(125), entry(120, 4096));
        ro.sanity_check().unwrap();
        ro.flush().unwrap();
        assert!(matches!(ro.append(150, 20000), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(ro.truncate_to(0), Err(LogError::InvalidAppend { .. })));
        let err = ro.resize(1024).unwrap_err();
        assert!(matches!(err, LogError::Io { ref source, .. } if source.kind() == io::ErrorKind::PermissionDenied));
        assert!(!ro.trim_to_valid_size().unwrap()); // right size already: nothing to do
        assert_eq!(fs::metadata(&path).unwrap().len(), 32);
        ro.close().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 32);

        // missing file
        let err = OffsetIndex::open_read_only(&dir.path().join("missing.index"), 0).unwrap_err();
        assert!(matches!(err, LogError::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound));
        assert!(!dir.path().join("missing.index").exists());

        // empty file
        let empty = dir.path().join("empty.index");
        File::create(&empty).unwrap();
        let ro = OffsetIndex::open_read_only(&empty, 7).unwrap();
        assert_eq!((ro.entries(), ro.last_offset()), (0, 7));
        assert_eq!(ro.lookup(100), entry(7, 0));
        ro.sanity_check().unwrap();

        let none = OffsetIndex::empty_read_only(&dir.path().join("absent.index"), 9);
        assert_eq!(none.lookup(100), entry(9, 0));
        assert_eq!(none.entries(), 0);
        none.sanity_check().unwrap();
    }

    #[test]
    fn sanity_check_length_not_multiple() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        let mut bytes = vec![0, 0, 0, 1, 0, 0, 0, 0];
        bytes.extend_from_slice(&[0, 0, 0]);
        fs::write(&path, &bytes).unwrap();
        let idx = OffsetIndex::open_read_only(&path, 0).unwrap();
        assert_eq!(idx.entries(), 1);
        let err = idx.sanity_check().unwrap_err();
        assert!(err.to_string().contains("not a multiple"), "{err}");
        // writable open does the same: no resize of an existing file
        let idx = OffsetIndex::open(&path, 0, 1024).unwrap();
        assert_eq!((idx.entries(), idx.length()), (1, 11));
        assert!(idx.sanity_check().is_err());
    }

    #[test]
    fn sanity_check_decreasing_and_below_base() {
        let dir = tmp();
        let path = dir.path().join("a.index");
        let write = |entries: &[(i32, u32)]| {
            let bytes: Vec<u8> =
                entries.iter().flat_map(|(o, p)| o.to_be_bytes().into_iter().chain(p.to_be_bytes())).collect();
            fs::write(&path, bytes).unwrap();
        };
        write(&[(1, 0), (5, 100), (3, 200)]);
        let err = OffsetIndex::open_read_only(&path, 0).unwrap().sanity_check().unwrap_err();
        assert!(err.to_string().contains("entry 2"), "{err}");
        write(&[(1, 0), (5, 100), (5, 200)]);
        assert!(OffsetIndex::open_read_only(&path, 0).unwrap().sanity_check().is_err());
        write(&[(1, 100), (5, 50)]);
        let err = OffsetIndex::open_read_only(&path, 0).unwrap().sanity_check().unwrap_err();
        assert!(err.to_string().contains("position"), "{err}");
        // negative relative offset (top bit set): below the base offset, last entry
        write(&[(1, 0), (-1, 100)]);
        let err = OffsetIndex::open_read_only(&path, 10).unwrap().sanity_check().unwrap_err();
        assert!(err.to_string().contains("less than the base offset"), "{err}");
        // ... and in the middle
        write(&[(-5, 0), (1, 100)]);
        let err = OffsetIndex::open_read_only(&path, 10).unwrap().sanity_check().unwrap_err();
        assert!(err.to_string().contains("below the base offset"), "{err}");
        write(&[(0, 0), (1, 100)]);
        OffsetIndex::open_read_only(&path, 10).unwrap().sanity_check().unwrap();
    }

    #[test]
    fn rename_and_delete() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        let old = idx.path().to_path_buf();
        let new = dir.path().join("00000000000000000100.index.deleted");
        idx.rename_to(&new).unwrap();
        assert_eq!(idx.path(), new);
        assert!(!old.exists() && new.exists());
        // still usable through the mapping, and resizing follows the new name
        assert_eq!(idx.lookup(131), entry(130, 8192));
        idx.trim_to_valid_size().unwrap();
        assert_eq!(fs::metadata(&new).unwrap().len(), 32);
        // a failed rename keeps the path
        let err = idx.rename_to(&dir.path().join("no/such/dir/x.index")).unwrap_err();
        assert!(matches!(err, LogError::Io { .. }));
        assert_eq!(idx.path(), new);
        assert!(idx.delete_if_exists().unwrap());
        assert!(!new.exists());
    }

    #[test]
    fn stale_path_never_touches_another_file() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        let path = idx.path().to_path_buf();
        // the file is renamed behind the index's back and a new one takes its name
        fs::rename(&path, dir.path().join("moved.index")).unwrap();
        fs::write(&path, [7u8; 16]).unwrap();
        assert!(
            matches!(idx.trim_to_valid_size(), Err(LogError::Io { ref source, .. }) if source.kind() == io::ErrorKind::Other)
        );
        assert!(idx.rename_to(&dir.path().join("x.index")).is_err());
        assert_eq!(idx.lookup(125), entry(120, 4096), "still mapped");
        assert!(idx.delete_if_exists().is_err());
        assert_eq!(fs::read(&path).unwrap(), [7u8; 16], "the other file is untouched");
        assert_eq!(fs::metadata(dir.path().join("moved.index")).unwrap().len(), 1024);
    }

    #[test]
    fn close_after_unlink() {
        let dir = tmp();
        let idx = sample(dir.path());
        fs::remove_file(idx.path()).unwrap();
        idx.close().unwrap();
        let none = OffsetIndex::empty_read_only(&dir.path().join("n.index"), 0);
        fs::write(dir.path().join("n.index"), [1u8; 8]).unwrap();
        assert!(!none.delete_if_exists().unwrap(), "an index without a file deletes nothing");
        assert!(dir.path().join("n.index").exists());
    }

    #[test]
    fn unlinked_while_mapped_stays_readable() {
        let dir = tmp();
        let idx = sample(dir.path());
        fs::remove_file(idx.path()).unwrap();
        assert_eq!(idx.lookup(125), entry(120, 4096));
        assert_eq!(idx.entries(), 4);
    }

    #[test]
    fn warm_section_lookup() {
        // more entries than the 1024-entry warm section, so both search branches run
        let dir = tmp();
        let mut idx = OffsetIndex::open(&dir.path().join("a.index"), 0, 3000 * 8).unwrap();
        for i in 0..3000i64 {
            idx.append(i * 3 + 1, i as u32 * 7).unwrap();
        }
        assert_eq!(idx.lookup(0), entry(0, 0));
        assert_eq!(idx.lookup(1), entry(1, 0));
        assert_eq!(idx.lookup(3), entry(1, 0));
        assert_eq!(idx.lookup(4), entry(4, 7));
        assert_eq!(idx.lookup(3000), entry(2998, 999 * 7));
        assert_eq!(idx.lookup(1975 * 3 + 1), entry(1975 * 3 + 1, 1975 * 7));
        assert_eq!(idx.lookup(1975 * 3 + 2), entry(1975 * 3 + 1, 1975 * 7));
        assert_eq!(idx.lookup(1976 * 3 + 1), entry(1976 * 3 + 1, 1976 * 7));
        assert_eq!(idx.lookup(9000), entry(2999 * 3 + 1, 2999 * 7));
    }

    #[test]
    fn garbage_does_not_panic() {
        let dir = tmp();
        let path = dir.path().join("g.index");
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for len in [0usize, 1, 7, 8, 9, 64, 8191, 8192 * 3 + 5] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            for base in [0, i64::MAX, i64::MIN, 12345] {
                fs::write(&path, &bytes).unwrap();
                let idx = OffsetIndex::open_read_only(&path, base).unwrap();
                assert_eq!(idx.entries(), len / 8);
                for t in [i64::MIN, -1, 0, 1, base, i64::MAX] {
                    let _ = idx.lookup(t);
                }
                let _ = idx.sanity_check();
                let _ = idx.last_offset();
                let mut w = OffsetIndex::open(&path, base, 1024).unwrap();
                let _ = w.truncate_to(base.wrapping_add(5));
                let _ = w.append(base.saturating_add(1), 1);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn lookup_agrees_with_linear_scan(
            base in 0i64..1_000_000,
            steps in proptest::collection::vec((1i64..50, 0u32..10_000), 0..2500),
            targets in proptest::collection::vec(-10i64..150_000, 1..40),
            truncate_at in -10i64..150_000,
        ) {
            let dir = tmp();
            let mut idx = OffsetIndex::open(&dir.path().join("p.index"), base, 2500 * 8).unwrap();
            let mut expected = Vec::new();
            let (mut offset, mut position) = (base, 0u32);
            for (i, (d_offset, d_position)) in steps.into_iter().enumerate() {
                if i > 0 {
                    offset += d_offset;
                }
                position += d_position;
                idx.append(offset, position).unwrap();
                expected.push(entry(offset, position));
            }
            prop_assert_eq!(idx.iter().collect::<Vec<_>>(), expected.clone());
            idx.sanity_check().unwrap();
            // every entry's offset, its neighbours and random targets, answered by one linear sweep
            let mut all: Vec<i64> = targets.into_iter().map(|t| base + t).collect();
            all.extend(expected.iter().flat_map(|e| [e.offset - 1, e.offset, e.offset + 1]));
            all.sort_unstable();
            let (mut next, mut linear) = (0, entry(base, 0));
            for t in all {
                while next < expected.len() && expected[next].offset <= t {
                    linear = expected[next];
                    next += 1;
                }
                prop_assert_eq!(idx.lookup(t), linear, "target {}", t);
            }
            idx.truncate_to(base + truncate_at).unwrap();
            let kept: Vec<_> = expected.iter().copied().filter(|e| e.offset < base + truncate_at).collect();
            prop_assert_eq!(idx.iter().collect::<Vec<_>>(), kept);
        }
    }
}
