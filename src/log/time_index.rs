//! The sparse time index (`.timeindex`), Kafka's `TimeIndex`: the entry layout, its append rules
//! and sanity check, on the memory-mapped index engine of `super::index` (Kafka's `AbstractIndex`).
//!
//! See [`TimeIndex`] for the file format.

use std::path::Path;

use super::batch::NO_TIMESTAMP;
use super::error::LogError;
use super::index::MappedIndex;

/// Size of one `.timeindex` entry in bytes: timestamp (8) + relative offset (4).
pub const ENTRY_SIZE: usize = 12;

/// One `.timeindex` entry with its offset made absolute, Kafka's `TimestampOffset`: no record
/// before `offset` (inclusive) has a timestamp above `timestamp`, so every record with a larger
/// timestamp comes after `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimestampOffset {
    /// Milliseconds since the Unix epoch; -1 ([`NO_TIMESTAMP`]) for "none".
    pub timestamp: i64,
    /// Absolute offset: segment base offset + the stored relative offset.
    pub offset: i64,
}

/// The sparse time index of one segment (`<base offset>.timeindex`), Kafka's `TimeIndex`: maps
/// timestamps to offsets, for ListOffsets by timestamp (KIP-79) and time-based retention.
///
/// ## Format
///
/// A flat array of 12-byte entries, no header, no checksum, all integers **big-endian**:
///
/// ```text
/// offset  size  field
///  0       8    timestamp (i64, ms since the epoch)
///  8       4    relative offset: absolute offset - segment base offset (0..=i32::MAX)
/// ```
///
/// An entry `(T, O)` means the largest timestamp seen up to offset `O` is `T`. Timestamps strictly
/// increase from entry to entry (an entry is only added when the max timestamp grows); offsets
/// never decrease (Kafka allows an equal offset with a larger timestamp). As in
/// [`super::offset_index::OffsetIndex`], the relative offset is read as a signed `int`.
///
/// ## Sparseness
///
/// Kafka's `LogSegment.append` calls `maybeAppend(maxTimestampSoFar, offsetOfMaxTimestampSoFar)`
/// each time it adds an offset-index entry (every `index.interval.bytes`), and once more, with
/// `skip_full_check`, when the segment rolls or closes (`onBecomeInactiveSegment`): that last slot
/// is reserved, which is why [`TimeIndex::is_full`] is `entries >= max_entries - 1`.
///
/// ## Size, preallocation, crashes, modes and the mapping
///
/// Exactly as [`super::offset_index::OffsetIndex`]: preallocated (sparse) to `segment.index.bytes`
/// rounded down to a multiple of 12 and memory-mapped when writable, allocated on disk one
/// `ALLOCATION_CHUNK` (64 KiB, `index.rs`) at a time as entries are appended (a full disk is
/// [`LogError::OutOfSpace`] from the append, never `SIGBUS`), trimmed to `entries * 12` bytes on
/// roll or close; after a crash the zero tail reads as entries (timestamp 0), which
/// [`TimeIndex::sanity_check`] reports and the segment layer answers by rebuilding. Read-only mode
/// maps an existing file and never writes or resizes it; the same `SIGBUS` caveat applies if
/// another writer shrinks a mapped file.
///
/// Not internally synchronised: lookups take `&self`, changes `&mut self`.
#[derive(Debug)]
pub struct TimeIndex {
    inner: MappedIndex,
}

impl TimeIndex {
    /// Opens (creating it when missing) a writable time index for the segment starting at
    /// `base_offset`, Kafka's `new TimeIndex(file, baseOffset, maxIndexSize, writable = true)`.
    /// A new or empty file is preallocated to `max_index_size` rounded down to a multiple of 12;
    /// an existing non-empty file is mapped at its length with `length / 12` entries and not
    /// resized (the segment layer resizes the active segment's index, as Kafka's `LogLoader`).
    ///
    /// Errors: [`LogError::InvalidConfig`] (`segment.index.bytes`) when a new file would be
    /// preallocated with `max_index_size < 12`; [`LogError::OutOfSpace`] when the disk cannot hold
    /// the new (empty) file; [`LogError::Io`].
    pub fn open(path: &Path, base_offset: i64, max_index_size: usize) -> Result<Self, LogError> {
        Ok(TimeIndex { inner: MappedIndex::open_writable(path, base_offset, max_index_size, ENTRY_SIZE)? })
    }

    /// Opens an existing time index read-only: `file length / 12` entries, never written or
    /// resized.
    ///
    /// Errors: [`LogError::Io`] when the file is missing or cannot be mapped.
    pub fn open_read_only(path: &Path, base_offset: i64) -> Result<Self, LogError> {
        Ok(TimeIndex { inner: MappedIndex::open_read_only(path, base_offset, ENTRY_SIZE)? })
    }

    /// An empty read-only index that maps nothing and touches no file, named `path` (for a
    /// read-only segment whose `.timeindex` is missing).
    pub fn empty_read_only(path: &Path, base_offset: i64) -> Self {
        TimeIndex { inner: MappedIndex::empty_read_only(path, base_offset, ENTRY_SIZE) }
    }

    /// The entry with the largest timestamp `<= target_timestamp`, or `(-1, base_offset)` when the
    /// index is empty or every timestamp is larger (Kafka's `TimeIndex.lookup`; the same
    /// warm-section binary search as the offset index, over the last 682 entries first).
    pub fn lookup(&self, target_timestamp: i64) -> TimestampOffset {
        match self.inner.largest_lower_bound_slot(target_timestamp, |e| self.decode(e).timestamp) {
            Some(slot) => self.entry(slot),
            None => TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.inner.base_offset },
        }
    }

    /// The `n`th entry (0-based), absolute offset.
    ///
    /// # Panics
    /// When `n >= self.entries()` (Kafka throws `IllegalArgumentException`).
    pub fn entry(&self, n: usize) -> TimestampOffset {
        self.decode(self.inner.entry_bytes(n))
    }

    /// All entries in order.
    pub fn iter(&self) -> impl Iterator<Item = TimestampOffset> + '_ {
        (0..self.entries()).map(|n| self.entry(n))
    }

    /// The last entry, or `(-1, base_offset)` when the index is empty (Kafka's `lastEntry`).
    pub fn last_entry(&self) -> TimestampOffset {
        match self.entries() {
            0 => TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.inner.base_offset },
            n => self.entry(n - 1),
        }
    }

    /// Number of entries in the index.
    pub fn entries(&self) -> usize {
        self.inner.entries
    }

    /// Number of entries the mapped file can hold (`file length / 12`).
    pub fn max_entries(&self) -> usize {
        self.inner.max_entries
    }

    /// `entries() >= max_entries() - 1`: Kafka's `TimeIndex.isFull`, which keeps the last slot
    /// for the entry appended when the segment rolls (`maybe_append(.., skip_full_check = true)`).
    /// A read-only index is always full.
    pub fn is_full(&self) -> bool {
        self.inner.entries.saturating_add(1) >= self.inner.max_entries
    }

    /// Kafka's `TimeIndex.maybeAppend`: appends `(timestamp, offset)` only when `timestamp` is
    /// larger than [`Self::last_entry`]'s (so with no entries, any timestamp above -1), else does
    /// nothing. Repeating the last entry, as a roll after a close does, is a no-op.
    ///
    /// Errors ([`LogError::InvalidAppend`] unless noted), checked in Kafka's order:
    /// - the index is full and `skip_full_check` is false (Kafka: `IllegalArgumentException`), or
    ///   the index is read-only;
    /// - the index has entries and `offset` is below the last entry's offset (Kafka:
    ///   `InvalidOffsetException`; an equal offset is allowed);
    /// - the index has entries and `timestamp` is below the last entry's (Kafka:
    ///   `IllegalStateException`);
    /// - an entry is due but no slot is left at all, even with `skip_full_check`;
    /// - `offset - base_offset` is outside `0..=i32::MAX` (Kafka: `IndexOffsetOverflowException`).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64, skip_full_check: bool) -> Result<(), LogError> {
        self.inner.ensure_writable()?;
        if !skip_full_check && self.is_full() {
            return Err(self.inner.invalid_append(format!(
                "attempt to append to a full time index (entries = {}, max entries = {})",
                self.inner.entries, self.inner.max_entries
            )));
        }
        let last = self.last_entry();
        if self.entries() != 0 && offset < last.offset {
            return Err(self.inner.invalid_append(format!(
                "attempt to append offset {offset} at slot {} below the last offset appended ({})",
                self.entries(),
                last.offset
            )));
        }
        if self.entries() != 0 && timestamp < last.timestamp {
            return Err(self.inner.invalid_append(format!(
                "attempt to append timestamp {timestamp} at slot {} below the last timestamp appended ({})",
                self.entries(),
                last.timestamp
            )));
        }
        if timestamp > last.timestamp {
            let relative = self.inner.relative_offset(offset)?;
            let mut entry = [0u8; ENTRY_SIZE];
            entry[0..8].copy_from_slice(&timestamp.to_be_bytes());
            entry[8..12].copy_from_slice(&relative.to_be_bytes());
            self.inner.push_entry(&entry)?;
        }
        Ok(())
    }

    /// Removes every entry whose offset is `>= offset` (Kafka's `TimeIndex.truncateTo`, which
    /// searches by offset); truncating above the last entry changes nothing. Only the entry count
    /// changes.
    ///
    /// Errors: [`LogError::InvalidAppend`] on a read-only index.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        let keep = self.inner.first_slot_at_or_above(offset, |e| self.decode(e).offset);
        self.inner.truncate_to_entries(keep)
    }

    /// Keeps the first `min(n, entries())` entries.
    ///
    /// Errors: [`LogError::InvalidAppend`] on a read-only index.
    pub fn truncate_to_entries(&mut self, n: usize) -> Result<(), LogError> {
        self.inner.truncate_to_entries(n)
    }

    /// Removes all entries and resizes the file to `max_index_size` (Kafka's `reset`).
    ///
    /// Errors: as [`super::offset_index::OffsetIndex::reset`].
    pub fn reset(&mut self) -> Result<(), LogError> {
        self.inner.reset()
    }

    /// Truncates the file to `entries() * 12` bytes and remaps it (Kafka's `trimToValidSize`).
    /// Returns whether the length changed.
    ///
    /// Errors: as [`Self::resize`].
    pub fn trim_to_valid_size(&mut self) -> Result<bool, LogError> {
        self.inner.trim_to_valid_size()
    }

    /// Sets the file length to `new_size` rounded down to a multiple of 12 and remaps, keeping the
    /// entries (Kafka's `resize`). Returns `Ok(false)` when the length is already that.
    ///
    /// Errors: as [`super::offset_index::OffsetIndex::resize`] (read-only, too small for the
    /// entries, I/O).
    pub fn resize(&mut self, new_size: usize) -> Result<bool, LogError> {
        self.inner.resize(new_size)
    }

    /// `msync(MS_SYNC)` of the mapping (Kafka's `flush`); a no-op when read-only.
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

    /// Checks the index without trusting it, Kafka's `TimeIndex.sanityCheck` made stricter: the
    /// last timestamp is not below the first, the last offset not below the base offset, the
    /// file length is a multiple of 12, and every entry is at or above the base offset with
    /// timestamps strictly increasing and offsets never decreasing (this catches the zero tail
    /// of a preallocated index after an unclean shutdown). O(entries).
    ///
    /// Errors: [`LogError::CorruptIndex`] naming the file and the first problem found.
    pub fn sanity_check(&self) -> Result<(), LogError> {
        let base = self.inner.base_offset;
        if self.entries() != 0 {
            let (first, last) = (self.entry(0), self.last_entry());
            if last.timestamp < first.timestamp {
                return Err(self.inner.corrupt(format!(
                    "time index has non-zero size but the last timestamp is {} which is less than the first \
                     timestamp {}",
                    last.timestamp, first.timestamp
                )));
            }
            if last.offset < base {
                return Err(self.inner.corrupt(format!(
                    "time index has non-zero size but the last offset is {} which is less than the base offset {base}",
                    last.offset
                )));
            }
        }
        self.inner.check_length_multiple()?;
        let mut prev: Option<TimestampOffset> = None;
        for (n, e) in self.iter().enumerate() {
            if e.offset < base {
                return Err(self
                    .inner
                    .corrupt(format!("entry {n}: offset {} is below the base offset {base}", e.offset)));
            }
            if let Some(p) = prev {
                if e.timestamp <= p.timestamp {
                    return Err(self.inner.corrupt(format!(
                        "entry {n}: timestamp {} is not larger than the previous entry's timestamp {} \
                         (timestamps must strictly increase; a zero tail means an unclean shutdown)",
                        e.timestamp, p.timestamp
                    )));
                }
                if e.offset < p.offset {
                    return Err(self.inner.corrupt(format!(
                        "entry {n}: offset {} is below the previous entry's offset {}",
                        e.offset, p.offset
                    )));
                }
            }
            prev = Some(e);
        }
        Ok(())
    }

    /// `offset - base_offset` as stored in the file (Kafka's `relativeOffset`).
    ///
    /// Errors: [`LogError::InvalidAppend`] when outside `0..=i32::MAX`
    /// (`IndexOffsetOverflowException`).
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

    /// Base offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.inner.base_offset
    }

    /// The `max_index_size` given at open (0 for a read-only index).
    pub fn max_index_size(&self) -> usize {
        self.inner.max_index_size
    }

    /// Current file length in bytes, as last sized or seen by this index.
    pub fn length(&self) -> u64 {
        self.inner.length
    }

    /// Bytes used by entries: `entries() * 12` (Kafka's `sizeInBytes`).
    pub fn size_in_bytes(&self) -> usize {
        self.inner.entries * ENTRY_SIZE
    }

    /// Whether the index was opened writable.
    pub fn is_writable(&self) -> bool {
        self.inner.is_writable()
    }

    /// Renames the backing file (Kafka's `renameTo`); the mapping stays valid and the stored path
    /// changes only on success.
    ///
    /// Errors: [`LogError::Io`] naming the old path, also (kind `Other`) when the file at the old
    /// path is no longer the file this index mapped.
    pub fn rename_to(&mut self, new_path: &Path) -> Result<(), LogError> {
        self.inner.rename_to(new_path)
    }

    /// Trims the file to its entries (writable index) and unmaps it (Kafka's `close`). Dropping
    /// without `close` leaves the file as a crash would.
    ///
    /// A file already unlinked (a deleted segment) is not trimmed and is no error.
    ///
    /// Errors: as [`Self::trim_to_valid_size`].
    pub fn close(self) -> Result<(), LogError> {
        self.inner.close()
    }

    /// Unmaps the index and deletes its file; returns whether a file was deleted.
    ///
    /// An index without a file ([`Self::empty_read_only`]) deletes nothing.
    ///
    /// Errors: [`LogError::Io`] when the file exists but cannot be removed, or (kind `Other`) is no
    /// longer the file this index mapped.
    pub fn delete_if_exists(self) -> Result<bool, LogError> {
        self.inner.delete_if_exists()
    }

    fn decode(&self, e: &[u8]) -> TimestampOffset {
        let timestamp = i64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
        let relative = i32::from_be_bytes([e[8], e[9], e[10], e[11]]);
        TimestampOffset { timestamp, offset: self.inner.base_offset.saturating_add(i64::from(relative)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs::{self, File};
    use std::io;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn to(timestamp: i64, offset: i64) -> TimestampOffset {
        TimestampOffset { timestamp, offset }
    }

    /// base 50: (1000, 55) (2000, 60) (3000, 70)
    fn sample(dir: &Path) -> TimeIndex {
        let mut idx = TimeIndex::open(&dir.join("00000000000000000050.timeindex"), 50, 120).unwrap();
        idx.maybe_append(1000, 55, false).unwrap();
        idx.maybe_append(2000, 60, false).unwrap();
        idx.maybe_append(3000, 70, false).unwrap();
        idx
    }

    #[test]
    fn new_file_is_preallocated_and_empty() {
        let dir = tmp();
        let path = dir.path().join("a.timeindex");
        let idx = TimeIndex::open(&path, 7, 100).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 96);
        assert_eq!((idx.entries(), idx.max_entries()), (0, 8));
        assert_eq!(idx.last_entry(), to(-1, 7));
        assert_eq!(idx.lookup(i64::MAX), to(-1, 7));
        let err = TimeIndex::open(&dir.path().join("b.timeindex"), 0, 11).unwrap_err();
        assert!(matches!(err, LogError::InvalidConfig { .. }), "{err}");
    }

    #[test]
    fn maybe_append_and_lookup() {
        let dir = tmp();
        let idx = sample(dir.path());
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.last_entry(), to(3000, 70));
        // before the first entry
        assert_eq!(idx.lookup(999), to(-1, 50));
        assert_eq!(idx.lookup(-1), to(-1, 50));
        // exact hits
        assert_eq!(idx.lookup(1000), to(1000, 55));
        assert_eq!(idx.lookup(2000), to(2000, 60));
        assert_eq!(idx.lookup(3000), to(3000, 70));
        // between
        assert_eq!(idx.lookup(2999), to(2000, 60));
        // after the last
        assert_eq!(idx.lookup(i64::MAX), to(3000, 70));
        idx.sanity_check().unwrap();
    }

    #[test]
    fn bytes_on_disk_are_big_endian_relative() {
        let dir = tmp();
        let path = dir.path().join("a.timeindex");
        let mut idx = TimeIndex::open(&path, 100, 120).unwrap();
        idx.maybe_append(0x0102_0304_0506_0708, 100 + 0x0A0B_0C0D, false).unwrap();
        idx.close().unwrap();
        assert_eq!(fs::read(&path).unwrap(), [1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C, 0x0D]);
    }

    #[test]
    fn maybe_append_rules() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        // same or smaller timestamp with a valid offset: ignored
        idx.maybe_append(3000, 70, false).unwrap();
        idx.maybe_append(3000, 75, false).unwrap();
        assert_eq!(idx.entries(), 3);
        // offset below the last: error, even with a larger timestamp
        assert!(matches!(idx.maybe_append(4000, 69, false), Err(LogError::InvalidAppend { .. })));
        // timestamp below the last: error
        assert!(matches!(idx.maybe_append(2999, 80, false), Err(LogError::InvalidAppend { .. })));
        // equal offset, larger timestamp: appended
        idx.maybe_append(3500, 70, false).unwrap();
        assert_eq!(idx.last_entry(), to(3500, 70));
        assert_eq!(idx.entries(), 4);
        // no entries: timestamp -1 (no timestamp) is never indexed, offsets below base refused
        let mut fresh = TimeIndex::open(&dir.path().join("b.timeindex"), 50, 120).unwrap();
        fresh.maybe_append(NO_TIMESTAMP, 55, false).unwrap();
        assert_eq!(fresh.entries(), 0);
        assert!(matches!(fresh.maybe_append(10, 49, false), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(
            fresh.maybe_append(10, 50 + i64::from(i32::MAX) + 1, false),
            Err(LogError::InvalidAppend { .. })
        ));
        fresh.maybe_append(0, 50, false).unwrap();
        assert_eq!(fresh.last_entry(), to(0, 50));
    }

    #[test]
    fn full_keeps_the_last_slot_for_the_roll() {
        let dir = tmp();
        let mut idx = TimeIndex::open(&dir.path().join("a.timeindex"), 0, 36).unwrap();
        assert_eq!(idx.max_entries(), 3);
        idx.maybe_append(10, 1, false).unwrap();
        assert!(!idx.is_full());
        idx.maybe_append(20, 2, false).unwrap();
        assert!(idx.is_full(), "full at max_entries - 1");
        assert!(matches!(idx.maybe_append(30, 3, false), Err(LogError::InvalidAppend { .. })));
        idx.maybe_append(30, 3, true).unwrap();
        assert_eq!(idx.entries(), 3);
        // no slot left at all: an entry that is due fails even with skip_full_check ...
        assert!(matches!(idx.maybe_append(40, 4, true), Err(LogError::InvalidAppend { .. })));
        // ... while repeating the last entry is a no-op
        idx.maybe_append(30, 3, true).unwrap();
        assert_eq!(idx.iter().collect::<Vec<_>>(), vec![to(10, 1), to(20, 2), to(30, 3)]);
    }

    #[test]
    fn truncate_to() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        idx.truncate_to(71).unwrap();
        assert_eq!(idx.entries(), 3);
        idx.truncate_to(70).unwrap(); // exact
        assert_eq!(idx.last_entry(), to(2000, 60));
        idx.maybe_append(2500, 65, false).unwrap();
        idx.truncate_to(61).unwrap(); // between
        assert_eq!(idx.iter().collect::<Vec<_>>(), vec![to(1000, 55), to(2000, 60)]);
        idx.truncate_to(0).unwrap();
        assert_eq!(idx.entries(), 0);
        assert_eq!(idx.last_entry(), to(-1, 50));
        assert_eq!(idx.lookup(5000), to(-1, 50));
    }

    #[test]
    fn truncate_to_removes_repeated_offsets() {
        let dir = tmp();
        let mut idx = TimeIndex::open(&dir.path().join("a.timeindex"), 0, 120).unwrap();
        idx.maybe_append(10, 3, false).unwrap();
        for ts in [20, 30, 40] {
            idx.maybe_append(ts, 5, false).unwrap();
        }
        assert_eq!(idx.entries(), 4);
        idx.sanity_check().unwrap();
        idx.truncate_to(5).unwrap();
        assert_eq!(idx.iter().collect::<Vec<_>>(), vec![to(10, 3)]);
    }

    #[test]
    fn trim_reopen_resize_reset() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        let path = idx.path().to_path_buf();
        let before: Vec<_> = idx.iter().collect();
        assert!(idx.trim_to_valid_size().unwrap());
        assert_eq!(fs::metadata(&path).unwrap().len(), 36);
        idx.close().unwrap();

        let mut reopened = TimeIndex::open(&path, 50, 120).unwrap();
        assert_eq!(reopened.iter().collect::<Vec<_>>(), before);
        assert!(reopened.is_full());
        reopened.resize(120).unwrap();
        assert_eq!(reopened.max_entries(), 10);
        assert_eq!(reopened.last_entry(), to(3000, 70));
        reopened.maybe_append(4000, 80, false).unwrap();
        reopened.reset().unwrap();
        assert_eq!((reopened.entries(), reopened.max_entries()), (0, 10));
        assert_eq!(fs::metadata(&path).unwrap().len(), 120);
        reopened.close().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn reopen_preallocated_file_after_crash() {
        let dir = tmp();
        let idx = sample(dir.path());
        let path = idx.path().to_path_buf();
        drop(idx);
        let idx = TimeIndex::open(&path, 50, 120).unwrap();
        assert_eq!(idx.entries(), 10);
        assert_eq!(idx.entry(3), to(0, 50));
        // Kafka's own check already fails here: last timestamp 0 < first timestamp 1000
        let err = idx.sanity_check().unwrap_err();
        assert!(err.to_string().contains("last timestamp is 0"), "{err}");
    }

    #[test]
    fn read_only_open() {
        let dir = tmp();
        let mut idx = sample(dir.path());
        idx.trim_to_valid_size().unwrap();
        let path = idx.path().to_path_buf();
        drop(idx);
        let mut ro = TimeIndex::open_read_only(&path, 50).unwrap();
        assert_eq!(ro.iter().collect::<Vec<_>>(), vec![to(1000, 55), to(2000, 60), to(3000, 70)]);
        assert!(ro.is_full() && !ro.is_writable());
        ro.sanity_check().unwrap();
        assert!(matches!(ro.maybe_append(4000, 80, true), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(ro.truncate_to(0), Err(LogError::InvalidAppend { .. })));
        assert!(matches!(ro.reset(), Err(LogError::InvalidAppend { .. })));
        assert_eq!(ro.entries(), 3);
        let err = ro.resize(120).unwrap_err();
        assert!(matches!(err, LogError::Io { ref source, .. } if source.kind() == io::ErrorKind::PermissionDenied));
        ro.close().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 36);

        let err = TimeIndex::open_read_only(&dir.path().join("missing.timeindex"), 0).unwrap_err();
        assert!(matches!(err, LogError::Io { ref source, .. } if source.kind() == io::ErrorKind::NotFound));
        let empty = TimeIndex::empty_read_only(&dir.path().join("absent.timeindex"), 4);
        assert_eq!(empty.lookup(100), to(-1, 4));
        assert_eq!(empty.last_entry(), to(-1, 4));
        empty.sanity_check().unwrap();
        let zero = dir.path().join("zero.timeindex");
        File::create(&zero).unwrap();
        assert_eq!(TimeIndex::open_read_only(&zero, 4).unwrap().entries(), 0);
    }

    #[test]
    fn sanity_check_catches_problems() {
        let dir = tmp();
        let path = dir.path().join("a.timeindex");
        let write = |entries: &[(i64, i32)], extra: usize| {
            let mut bytes: Vec<u8> =
                entries.iter().flat_map(|(t, o)| t.to_be_bytes().into_iter().chain(o.to_be_bytes())).collect();
            bytes.extend(std::iter::repeat_n(0, extra));
            fs::write(&path, bytes).unwrap();
        };
        let check = || TimeIndex::open_read_only(&path, 100).unwrap().sanity_check();
        write(&[(10, 1), (20, 2)], 0);
        check().unwrap();
        write(&[(10, 1), (20, 2)], 5);
        assert!(check().unwrap_err().to_string().contains("not a multiple of the entry size 12"));
        write(&[(10, 1), (30, 2), (20, 3), (40, 4)], 0); // decreasing timestamp in the middle
        assert!(check().unwrap_err().to_string().contains("entry 2"));
        write(&[(10, 1), (10, 2)], 0); // equal timestamps
        assert!(check().is_err());
        write(&[(10, 5), (20, 4)], 0); // decreasing offset
        assert!(check().unwrap_err().to_string().contains("offset 104 is below the previous"));
        write(&[(10, 1), (20, -1)], 0); // last offset below base
        assert!(check().unwrap_err().to_string().contains("less than the base offset"));
        write(&[(10, -3), (20, 1)], 0);
        assert!(check().unwrap_err().to_string().contains("below the base offset"));
    }

    #[test]
    fn garbage_does_not_panic() {
        let dir = tmp();
        let path = dir.path().join("g.timeindex");
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for len in [0usize, 1, 11, 12, 13, 120, 8191, 8192 * 3 + 7] {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            for base in [0, i64::MAX, i64::MIN, 999] {
                fs::write(&path, &bytes).unwrap();
                let idx = TimeIndex::open_read_only(&path, base).unwrap();
                assert_eq!(idx.entries(), len / 12);
                for t in [i64::MIN, -1, 0, 1, i64::MAX] {
                    let _ = idx.lookup(t);
                }
                let _ = idx.sanity_check();
                let _ = idx.last_entry();
                let mut w = TimeIndex::open(&path, base, 1200).unwrap();
                let _ = w.truncate_to(base.wrapping_add(3));
                let _ = w.maybe_append(i64::MAX, base.saturating_add(1), true);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn lookup_agrees_with_linear_scan(
            base in 0i64..1_000_000,
            steps in proptest::collection::vec((1i64..1000, 0i64..20), 0..2000),
            targets in proptest::collection::vec(-10i64..2_000_000, 1..40),
            truncate_at in -10i64..40_000,
        ) {
            let dir = tmp();
            let mut idx = TimeIndex::open(&dir.path().join("p.timeindex"), base, 2001 * 12).unwrap();
            let mut expected = Vec::new();
            let (mut ts, mut offset) = (0i64, base);
            for (d_ts, d_offset) in steps {
                ts += d_ts;
                offset += d_offset;
                idx.maybe_append(ts, offset, false).unwrap();
                expected.push(to(ts, offset));
            }
            prop_assert_eq!(idx.iter().collect::<Vec<_>>(), expected.clone());
            idx.sanity_check().unwrap();
            // every entry's timestamp, its neighbours and random targets, answered by one linear sweep
            let mut all = targets;
            all.extend(expected.iter().flat_map(|e| [e.timestamp - 1, e.timestamp, e.timestamp + 1]));
            all.sort_unstable();
            let (mut next, mut linear) = (0, to(-1, base));
            for t in all {
                while next < expected.len() && expected[next].timestamp <= t {
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
