//! One log segment: a `.log` file of record batches with its `.index` and `.timeindex`, Kafka's
//! `LogSegment` over `FileRecords`.
//!
//! Files are named by the segment's base offset, zero-padded to 20 digits
//! (`00000000000000000042.log`, Kafka's `LogFileUtils.filenamePrefixFromOffset`). Positions inside a
//! segment are `u32` as in Kafka: a segment stays below 2 GiB (`segment.bytes` is an `i32`).
//!
//! Appends follow Kafka's rule exactly: before an append, when more than `index.interval.bytes`
//! bytes were appended since the last index entry, one `.index` entry (largest offset of this
//! append, its start position) is added, and a `.timeindex` entry (max timestamp so far, offset of
//! that batch's last record) when the max timestamp grew. Recovery rebuilds both the same way, batch
//! by batch, so an index rebuilt here equals the one Kafka wrote.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{BatchError, BatchHeader, RecordBatch, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, NO_TIMESTAMP};
use super::error::LogError;
use super::offset_index::OffsetIndex;
use super::time_index::{TimeIndex, TimestampOffset};

/// Suffix of a segment's record file.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of the offset index.
pub const INDEX_SUFFIX: &str = ".index";
/// Suffix of the time index.
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Suffix of the transaction index (aborted transactions; fetchbench never writes one).
pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Suffix added to files scheduled for deletion (Kafka's `LogFileUtils.DELETED_FILE_SUFFIX`).
pub const DELETED_SUFFIX: &str = ".deleted";
/// Suffix of the cleaner's output before the swap (Kafka's `CLEANED_FILE_SUFFIX`).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of cleaned segments being swapped in (Kafka's `SWAP_FILE_SUFFIX`).
pub const SWAP_SUFFIX: &str = ".swap";
/// Smallest possible entry: a magic-0 message with empty key and value (Kafka's
/// `Records.LOG_OVERHEAD + LegacyRecord.RECORD_OVERHEAD_V0`).
pub const MIN_ENTRY_SIZE: usize = LOG_OVERHEAD + 14;

/// `<20-digit base offset><suffix>`, Kafka's file naming.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Parses the base offset from a segment file name such as `00000000000000000042.log` (any
/// suffix). Returns `None` when the name does not start with 20 digits followed by a dot.
pub fn parse_base_offset(name: &str) -> Option<i64> {
    let (digits, rest) = name.split_at_checked(20)?;
    if !rest.starts_with('.') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `offset` fits the 32-bit relative offsets of a segment whose base offset is
/// `base_offset`: `0 <= offset - base_offset <= i32::MAX`, computed without overflow (Kafka's
/// `LogSegment.canConvertToRelativeOffset`). Recovery cuts a segment at the first batch whose last
/// offset breaks this rule, and `log dump --verify` reports such a batch.
pub fn fits_relative_offset(base_offset: i64, offset: i64) -> bool {
    offset.checked_sub(base_offset).is_some_and(|rel| (0..=i64::from(i32::MAX)).contains(&rel))
}

/// An open `.log` file shared by the segment and by every [`FileSlice`] that names part of it.
/// Retention unlinks the file; readers holding an `Arc` keep reading it until the last one drops
/// (the file is never truncated under them).
#[derive(Debug)]
pub struct SegmentFile {
    file: File,
    path: PathBuf,
    base_offset: i64,
}

impl SegmentFile {
    /// Opens any file read-only as a slice source (tests, tools, data outside a log), with base
    /// offset 0. Errors: the `open` error.
    pub fn open_read_only(path: &Path) -> io::Result<Self> {
        Ok(SegmentFile { file: File::open(path)?, path: path.to_path_buf(), base_offset: 0 })
    }
    /// Wraps an open file (e.g. an anonymous temp file) as a slice source, with base offset 0.
    pub fn from_file(file: File, path: PathBuf) -> Self {
        SegmentFile { file, path, base_offset: 0 }
    }
    /// The open file (for `pread`, `sendfile`, `mmap` by read paths).
    pub fn file(&self) -> &File {
        &self.file
    }
    /// The path the file had when it was opened (it may since have been renamed or unlinked).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The segment's base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
}

/// A byte range of one segment file: what a fetch returns. Building it reads no record bytes; a
/// read path moves `len` bytes from `position` to a socket. `len` may end inside a batch (a fetch
/// is cut by bytes, as Kafka's `FileRecords.slice`); consumers drop the partial tail.
///
/// Positions are 64-bit here, as the read paths take them (`pread`, `sendfile64`, splice offsets),
/// although a Kafka segment stays below 2 GiB.
#[derive(Clone, Debug)]
pub struct FileSlice {
    /// The segment file.
    pub segment: Arc<SegmentFile>,
    /// Start position in bytes.
    pub position: u64,
    /// Length in bytes.
    pub len: u64,
}

impl FileSlice {
    /// Reads the slice's bytes into memory with `pread` (tests and tools; read paths move bytes
    /// without this). Errors: the underlying I/O error, e.g. `UnexpectedEof` if the file shrank.
    pub fn read_to_vec(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(|_| io::Error::other("slice larger than memory"))?;
        let mut buf = vec![0u8; len];
        self.segment.file.read_exact_at(&mut buf, self.position)?;
        Ok(buf)
    }
}

/// Header-level facts about one entry (v2 batch or legacy message) of a `.log`, read without
/// touching record bytes (Kafka's `FileChannelRecordBatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchInfo {
    /// Position in the file.
    pub position: u32,
    /// Total size including the 12-byte log overhead.
    pub size: u32,
    /// Magic byte.
    pub magic: i8,
    /// Base offset (for legacy entries: the entry's offset, which for a compressed wrapper is the
    /// last inner offset).
    pub base_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// Max timestamp (v2), the message timestamp (magic 1), or -1 (magic 0).
    pub max_timestamp: i64,
    /// The v2 header, when magic is 2.
    pub header: Option<BatchHeader>,
}

impl BatchInfo {
    /// `last_offset + 1`. Exact for an entry read from a segment (reading refuses a header whose
    /// next offset would overflow, [`BatchError::InvalidOffsetRange`]);
    /// saturating for a hand-built value.
    pub fn next_offset(&self) -> i64 {
        self.last_offset.saturating_add(1)
    }
    /// Position just after this entry.
    pub fn end(&self) -> u32 {
        self.position + self.size
    }
}

/// Tunables a segment needs (from [`super::LogConfig`]).
#[derive(Clone, Copy, Debug)]
pub struct SegmentConfig {
    /// `index.interval.bytes`: bytes between offset-index entries (Kafka default 4096).
    pub index_interval_bytes: u32,
    /// `segment.index.bytes`: preallocated size of each index file (Kafka default 10 MiB).
    pub max_index_size: usize,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig { index_interval_bytes: 4096, max_index_size: 10 * 1024 * 1024 }
    }
}

/// A segment's files to fsync without the partition's lock, from [`Segment::sync_handles`]:
/// the `.log` (shared with the segment and its readers) and the index files, each a handle of
/// its own.
#[derive(Debug)]
pub(crate) struct SegmentSync {
    log: Option<Arc<SegmentFile>>,
    indexes: Vec<(File, PathBuf)>,
}

impl SegmentSync {
    /// `fdatasync` of the `.log`, of both index files and of the `.txnindex` when there is one.
    ///
    /// Errors: [`LogError::Io`] / [`LogError::OutOfSpace`] naming the file.
    pub(crate) fn sync(&self) -> Result<(), LogError> {
        if let Some(log) = &self.log {
            log.file.sync_data().map_err(|e| LogError::io("fsync", &log.path, e))?;
        }
        for (file, path) in &self.indexes {
            file.sync_data().map_err(|e| LogError::io("fsync", path, e))?;
        }
        Ok(())
    }
}

/// One segment. Not internally synchronised: the partition serialises writers; readers use
/// `&self` (index lookups and `pread` of headers).
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    log: Arc<SegmentFile>,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    size: u32,
    config: SegmentConfig,
    read_only: bool,
    bytes_since_last_index_entry: u32,
    max_timestamp_so_far: TimestampOffset,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
}

impl Segment {
    /// Creates a new empty segment in `dir`, with both indexes preallocated to
    /// `config.max_index_size` (allocated on disk, see [`OffsetIndex`]). Leftover files at that
    /// base offset are deleted first, with a warning.
    ///
    /// On failure the files this call created are removed again, so a roll that fails (e.g. on a
    /// full disk) can simply be retried.
    ///
    /// Errors: [`LogError::OutOfSpace`] when the disk cannot hold the new files;
    /// [`LogError::Io`] when a file exists or cannot be created.
    pub fn create(dir: &Path, base_offset: i64, config: SegmentConfig, now_ms: i64) -> Result<Self, LogError> {
        Self::create_with_suffix(dir, base_offset, config, now_ms, "")
    }

    /// [`Segment::create`] with an extra suffix on every file (the cleaner writes `.cleaned`).
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        config: SegmentConfig,
        now_ms: i64,
        suffix: &str,
    ) -> Result<Self, LogError> {
        // Kafka's LocalLog.roll: a leftover file at the new base offset is deleted first, never reused.
        for s in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            let p = dir.join(format!("{}{suffix}", file_name(base_offset, s)));
            if p.exists() {
                tracing::warn!("{}: already exists for a new segment; deleting it first", p.display());
                fs::remove_file(&p).map_err(|e| LogError::io("delete", &p, e))?;
            }
        }
        let path = dir.join(format!("{}{suffix}", file_name(base_offset, LOG_SUFFIX)));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| LogError::io("create", &path, e))?;
        let index_path = dir.join(format!("{}{suffix}", file_name(base_offset, INDEX_SUFFIX)));
        let time_path = dir.join(format!("{}{suffix}", file_name(base_offset, TIME_INDEX_SUFFIX)));
        let indexes = OffsetIndex::open(&index_path, base_offset, config.max_index_size).and_then(|offset_index| {
            Ok((offset_index, TimeIndex::open(&time_path, base_offset, config.max_index_size)?))
        });
        let (offset_index, time_index) = match indexes {
            Ok(indexes) => indexes,
            Err(e) => {
                // Leave nothing half-made behind (the mappings are already dropped).
                for p in [&path, &index_path, &time_path] {
                    if let Err(rm) = fs::remove_file(p) {
                        if rm.kind() != io::ErrorKind::NotFound {
                            tracing::warn!("{}: removing after a failed segment creation: {rm}", p.display());
                        }
                    }
                }
                return Err(e);
            }
        };
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            log: Arc::new(SegmentFile { file, path, base_offset }),
            offset_index,
            time_index,
            size: 0,
            config,
            read_only: false,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: TimestampOffset { timestamp: NO_TIMESTAMP, offset: base_offset },
            rolling_based_timestamp: None,
            created_ms: now_ms,
        })
    }

    /// Opens an existing segment. Missing index files are created empty (writable mode); call
    /// [`Segment::sanity_check`] and, when it fails or the shutdown was unclean, [`Segment::recover`].
    /// With `read_only`, nothing is created, resized or written: a missing index reads as empty
    /// (and [`Segment::sanity_check`] reports it), for data on read-only media and `log dump`.
    ///
    /// Errors: [`LogError::Io`], [`LogError::InvalidAppend`] when the file exceeds 2 GiB.
    pub fn open(dir: &Path, base_offset: i64, config: SegmentConfig, read_only: bool) -> Result<Self, LogError> {
        Self::open_with_suffix(dir, base_offset, config, read_only, "")
    }

    /// Opens an existing segment read-only, ignoring its index files (lookups then scan from the
    /// segment start): for read-only data whose indexes failed [`Segment::sanity_check`].
    pub fn open_without_indexes(dir: &Path, base_offset: i64, config: SegmentConfig) -> Result<Self, LogError> {
        let mut seg = Self::open(dir, base_offset, config, true)?;
        seg.offset_index = OffsetIndex::empty_read_only(seg.offset_index.path(), base_offset);
        seg.time_index = TimeIndex::empty_read_only(seg.time_index.path(), base_offset);
        seg.max_timestamp_so_far = seg.read_largest_timestamp()?;
        Ok(seg)
    }

    /// [`Segment::open`] for files carrying an extra suffix (`.swap`, `.cleaned`), as Kafka's
    /// `LogSegment.open(.., fileSuffix)`.
    pub fn open_with_suffix(
        dir: &Path,
        base_offset: i64,
        config: SegmentConfig,
        read_only: bool,
        suffix: &str,
    ) -> Result<Self, LogError> {
        let path = dir.join(format!("{}{suffix}", file_name(base_offset, LOG_SUFFIX)));
        let file =
            OpenOptions::new().read(true).write(!read_only).open(&path).map_err(|e| LogError::io("open", &path, e))?;
        let len = file.metadata().map_err(|e| LogError::io("stat", &path, e))?.len();
        if len > i32::MAX as u64 {
            return Err(LogError::InvalidAppend { path, reason: format!("segment of {len} bytes exceeds 2 GiB") });
        }
        let index_path = dir.join(format!("{}{suffix}", file_name(base_offset, INDEX_SUFFIX)));
        let time_path = dir.join(format!("{}{suffix}", file_name(base_offset, TIME_INDEX_SUFFIX)));
        let (offset_index, time_index) = if read_only {
            (
                if index_path.exists() {
                    OffsetIndex::open_read_only(&index_path, base_offset)?
                } else {
                    OffsetIndex::empty_read_only(&index_path, base_offset)
                },
                if time_path.exists() {
                    TimeIndex::open_read_only(&time_path, base_offset)?
                } else {
                    TimeIndex::empty_read_only(&time_path, base_offset)
                },
            )
        } else {
            (
                OffsetIndex::open(&index_path, base_offset, config.max_index_size)?,
                TimeIndex::open(&time_path, base_offset, config.max_index_size)?,
            )
        };
        let created_ms = file_mtime_ms(&file);
        let mut seg = Segment {
            base_offset,
            dir: dir.to_path_buf(),
            log: Arc::new(SegmentFile { file, path, base_offset }),
            offset_index,
            time_index,
            size: len as u32,
            config,
            read_only,
            bytes_since_last_index_entry: 0,
            max_timestamp_so_far: TimestampOffset { timestamp: NO_TIMESTAMP, offset: base_offset },
            rolling_based_timestamp: None,
            created_ms,
        };
        seg.max_timestamp_so_far = seg.time_index.last_entry();
        Ok(seg)
    }

    /// Base offset: every offset in the segment is >= it; file names carry it.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Size of the `.log` in bytes.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Path of the `.log` file.
    pub fn log_path(&self) -> &Path {
        &self.log.path
    }
    /// The shared file handle.
    pub fn file(&self) -> &Arc<SegmentFile> {
        &self.log
    }
    /// The offset index.
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    /// The time index.
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    /// Largest batch max timestamp appended or recovered, and the last offset of that batch;
    /// timestamp -1 when unknown.
    pub fn max_timestamp_so_far(&self) -> TimestampOffset {
        self.max_timestamp_so_far
    }
    /// Largest record timestamp in the segment, or the file's modification time when none is known
    /// (Kafka's `LogSegment.largestTimestamp`, used by `retention.ms`).
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.max_timestamp_so_far.timestamp
        } else {
            file_mtime_ms(&self.log.file)
        }
    }

    /// Reads header-level facts of the entry at `position`, reading at most 61 bytes. Returns
    /// `Ok(None)` at the end of the data (`position >= end`) or when the entry is partial (extends
    /// past `end`); `Err` when the length field is impossible.
    pub fn batch_at(&self, position: u32, end: u32) -> Result<Option<BatchInfo>, LogError> {
        read_batch_info(&self.log, position, end)
    }

    /// Iterates header-level facts of every entry from `position` to the end of the file (Kafka's
    /// `FileRecords.batchesFrom`). Stops at a partial tail; yields an error for an impossible
    /// length and then stops.
    pub fn batches_from(&self, position: u32) -> BatchInfoIter<'_> {
        BatchInfoIter { file: &self.log, position, end: self.size, done: false }
    }

    /// Reads `len` bytes at `position` (the cleaner, `log dump`, recovery's CRC checks).
    pub fn read_bytes(&self, position: u32, len: u32) -> Result<Vec<u8>, LogError> {
        let mut buf = vec![0u8; len as usize];
        self.log.file.read_exact_at(&mut buf, position as u64).map_err(|e| LogError::io("read", &self.log.path, e))?;
        Ok(buf)
    }

    /// Position and size of the first batch whose last offset is >= `offset`, searching from the
    /// offset index's lower bound (Kafka's `translateOffset`). `None` when every batch is below
    /// `offset`. Reads batch headers only.
    ///
    /// The index entry used is checked on the way: a batch must start at its position and end at
    /// or below its offset (Kafka indexes an append of several batches by the append's largest
    /// offset at its first batch's position). An inconsistent index is never trusted: the search
    /// then starts at the segment start, with a warning.
    pub fn translate_offset(&self, offset: i64, min_position: u32) -> Result<Option<BatchInfo>, LogError> {
        let entry = self.offset_index.lookup(offset);
        let indexed = entry.position > 0 && entry.position >= min_position;
        let start = entry.position.max(min_position);
        for (i, info) in self.batches_from(start).enumerate() {
            let info = match info {
                Ok(info) => info,
                Err(e) if indexed && i == 0 => return self.distrust_index(offset, min_position, entry, &e.to_string()),
                Err(e) => return Err(e),
            };
            if indexed && i == 0 && info.last_offset > entry.offset {
                let why = format!("the batch there ends at offset {}", info.last_offset);
                return self.distrust_index(offset, min_position, entry, &why);
            }
            if info.last_offset >= offset {
                return Ok(Some(info));
            }
        }
        if indexed && start >= self.size {
            return self.distrust_index(offset, min_position, entry, "it points past the end of the log");
        }
        Ok(None)
    }

    fn distrust_index(
        &self,
        offset: i64,
        min_position: u32,
        entry: super::offset_index::IndexEntry,
        why: &str,
    ) -> Result<Option<BatchInfo>, LogError> {
        tracing::warn!(
            "{}: ignoring index entry ({}, {}): {why}; scanning from the segment start",
            self.offset_index.path().display(),
            entry.offset,
            entry.position
        );
        for info in self.batches_from(min_position) {
            let info = info?;
            if info.last_offset >= offset {
                return Ok(Some(info));
            }
        }
        Ok(None)
    }

    /// The index's lower-bound position for `offset`, checked like [`Segment::translate_offset`]
    /// does (0 when the entry does not match the log).
    fn checked_index_position(&self, offset: i64) -> u32 {
        let entry = self.offset_index.lookup(offset);
        if entry.position == 0 {
            return 0;
        }
        match self.batch_at(entry.position, self.size) {
            Ok(Some(info)) if info.last_offset <= entry.offset => entry.position,
            _ => 0,
        }
    }

    /// Kafka's `LogSegment.read`: a slice from the first batch whose last offset is >=
    /// `start_offset`, at most `max_size` bytes (the first batch whole when `min_one_batch`, KIP-74),
    /// never past `max_position`. `None` when no batch in this segment reaches `start_offset`.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: u32,
        max_position: u32,
        min_one_batch: bool,
    ) -> Result<Option<FileSlice>, LogError> {
        let Some(first) = self.translate_offset(start_offset, 0)? else {
            return Ok(None);
        };
        if first.position >= max_position {
            return Ok(Some(FileSlice { segment: self.log.clone(), position: first.position as u64, len: 0 }));
        }
        let adjusted = if min_one_batch { max_size.max(first.size) } else { max_size };
        let len = adjusted.min(max_position - first.position);
        Ok(Some(FileSlice { segment: self.log.clone(), position: first.position as u64, len: len as u64 }))
    }

    /// The offset the next appended batch would get: last batch's last offset + 1, or the base
    /// offset when empty (Kafka's `readNextOffset`; reads headers from the last index entry on).
    pub fn read_next_offset(&self) -> Result<i64, LogError> {
        let start = self.checked_index_position(i64::MAX);
        let mut next = self.base_offset;
        for info in self.batches_from(start) {
            next = info?.next_offset();
        }
        Ok(next)
    }

    /// Whether `offset` fits this segment's 32-bit relative offsets (see [`fits_relative_offset`]).
    pub fn can_convert_to_relative_offset(&self, offset: i64) -> bool {
        fits_relative_offset(self.base_offset, offset)
    }

    /// Appends already validated, offset-assigned batches (Kafka's `LogSegment.append`):
    /// `largest_offset` is the last offset of the append, `largest_timestamp` its max timestamp and
    /// `offset_of_max_timestamp` the last offset of the batch holding it.
    ///
    /// A failed write (e.g. `ENOSPC` part way through) is cut off again: the file keeps its old
    /// size and the segment is unchanged.
    ///
    /// Errors: [`LogError::InvalidAppend`] when the segment is read-only, an offset does not fit
    /// 32 bits relative to the base, or the file would pass 2 GiB; [`LogError::OutOfSpace`];
    /// [`LogError::Io`].
    pub fn append(
        &mut self,
        largest_offset: i64,
        largest_timestamp: i64,
        offset_of_max_timestamp: i64,
        records: &[u8],
    ) -> Result<(), LogError> {
        if records.is_empty() {
            return Ok(());
        }
        if self.read_only {
            return Err(self.refuse("segment is open read-only"));
        }
        if !self.can_convert_to_relative_offset(largest_offset) {
            return Err(self.refuse(format!("offset {largest_offset} overflows the relative offsets of this segment")));
        }
        if self.size as u64 + records.len() as u64 > i32::MAX as u64 {
            return Err(self.refuse("segment would exceed 2 GiB"));
        }
        let position = self.size;
        if position == 0 {
            self.rolling_based_timestamp = Some(largest_timestamp);
        }
        if let Err(e) = self.log.file.write_all_at(records, position as u64) {
            // Part of the records may have been written before the error: cut them off, so the
            // file ends where the segment does (shrinking a file needs no space).
            if let Err(cut) = self.log.file.set_len(position as u64) {
                tracing::warn!("{}: cutting a failed append back to {position} bytes: {cut}", self.log.path.display());
            }
            return Err(LogError::io("append to", &self.log.path, e));
        }
        self.size += records.len() as u32;
        if largest_timestamp > self.max_timestamp_so_far.timestamp {
            self.max_timestamp_so_far =
                TimestampOffset { timestamp: largest_timestamp, offset: offset_of_max_timestamp };
        }
        if self.bytes_since_last_index_entry > self.config.index_interval_bytes {
            self.offset_index.append(largest_offset, position)?;
            self.time_index.maybe_append(
                self.max_timestamp_so_far.timestamp,
                self.max_timestamp_so_far.offset,
                false,
            )?;
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += records.len() as u32;
        Ok(())
    }

    fn refuse(&self, reason: impl Into<String>) -> LogError {
        LogError::InvalidAppend { path: self.log.path.clone(), reason: reason.into() }
    }

    /// Kafka's `LogSegment.shouldRoll`: whether an append of `append_size` bytes with
    /// `max_timestamp` and `max_offset` must go to a new segment.
    pub fn should_roll(
        &mut self,
        segment_bytes: u32,
        roll_ms: i64,
        append_size: u32,
        max_timestamp: i64,
        max_offset: i64,
        now_ms: i64,
    ) -> Result<bool, LogError> {
        let waited = self.time_waited_for_roll(now_ms, max_timestamp)?;
        Ok(self.size as u64 > (segment_bytes as u64).saturating_sub(append_size as u64)
            || (self.size > 0 && waited > roll_ms)
            || self.offset_index.is_full()
            || self.time_index.is_full()
            || !self.can_convert_to_relative_offset(max_offset))
    }

    fn time_waited_for_roll(&mut self, now_ms: i64, message_timestamp: i64) -> Result<i64, LogError> {
        if self.rolling_based_timestamp.is_none() {
            if let Some(first) = self.batches_from(0).next() {
                self.rolling_based_timestamp = Some(first?.max_timestamp);
            }
        }
        Ok(match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => message_timestamp.saturating_sub(ts),
            _ => now_ms.saturating_sub(self.created_ms),
        })
    }

    /// Checks the indexes without trusting them (Kafka's `LogSegment.sanityCheck`, made stricter):
    /// both index files exist, have whole entries, increase, and the last offset entry points at a
    /// batch boundary whose batch ends at or below the entry's offset (one entry per append, at
    /// the append's first batch, as Kafka writes them).
    ///
    /// Errors: [`LogError::CorruptIndex`] naming the index file.
    pub fn sanity_check(&self) -> Result<(), LogError> {
        let idx_path = self.offset_index.path().to_path_buf();
        if !idx_path.exists() {
            return Err(LogError::CorruptIndex { path: idx_path, reason: "missing".into() });
        }
        if !self.time_index.path().exists() {
            return Err(LogError::CorruptIndex {
                path: self.time_index.path().to_path_buf(),
                reason: "missing".into(),
            });
        }
        self.offset_index.sanity_check()?;
        self.time_index.sanity_check()?;
        if self.offset_index.entries() > 0 {
            let last = self.offset_index.entry(self.offset_index.entries() - 1);
            let corrupt = |reason: String| LogError::CorruptIndex { path: idx_path.clone(), reason };
            match self.batch_at(last.position, self.size) {
                Ok(Some(info)) if info.last_offset <= last.offset => {}
                Ok(Some(info)) => {
                    return Err(corrupt(format!(
                        "last entry ({}, {}) points at a batch with last offset {}",
                        last.offset, last.position, info.last_offset
                    )))
                }
                _ => {
                    return Err(corrupt(format!(
                        "last entry ({}, {}) does not point at a batch (log size {})",
                        last.offset, last.position, self.size
                    )))
                }
            }
        }
        let last_time = self.time_index.last_entry();
        if self.time_index.entries() > 0 && last_time.offset < self.base_offset {
            return Err(LogError::CorruptIndex {
                path: self.time_index.path().to_path_buf(),
                reason: format!("last entry offset {} below base offset {}", last_time.offset, self.base_offset),
            });
        }
        Ok(())
    }

    /// Kafka's `LogSegment.recover`: validates every batch (length, magic, CRC, offsets in range),
    /// rebuilds both indexes batch by batch, truncates the file at the first invalid byte, and
    /// returns what it found. A corrupt batch mid-file truncates there, with a warning naming the
    /// file, position and offset.
    ///
    /// Errors: [`LogError::Io`]; [`LogError::InvalidAppend`] when read-only.
    ///
    /// A full disk ([`LogError::OutOfSpace`]) while rebuilding the indexes is not an error: the
    /// entries written so far are kept, the rest of the segment is left unindexed (lookups find an
    /// earlier entry, or the segment start, and scan forward, as for an index found untrustworthy),
    /// and a warn names the file. Start-up after a crash on a full disk thus goes on; the indexes
    /// are complete again after the next recovery.
    ///
    /// `next_segment_base`, when given, bounds the offsets: a batch reaching it (a flipped bit in
    /// a base offset, which no CRC covers) is invalid, as is a batch whose offsets go backwards.
    pub fn recover(&mut self, next_segment_base: Option<i64>) -> Result<RecoveryOutcome, LogError> {
        if self.read_only {
            return Err(self.refuse("cannot recover a read-only segment"));
        }
        let prefix = self.valid_prefix(next_segment_base)?;
        self.offset_index.reset()?;
        self.time_index.reset()?;
        let mut last_index_entry: u32 = 0;
        let mut batches = 0u64;
        let mut max_ts = TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.base_offset };
        let mut next_offset = self.base_offset;
        let mut epochs = Vec::new();
        let mut producer_batches = Vec::new();
        // Set when the disk is full: the rest of the segment is left unindexed.
        let mut indexing = true;
        // Index building reads headers only: the batches were validated above.
        let file = self.log.clone();
        for info in (BatchInfoIter { file: &file, position: 0, end: prefix.valid_bytes, done: false }) {
            let info = info?;
            let valid = info.position;
            if info.max_timestamp > max_ts.timestamp {
                max_ts = TimestampOffset { timestamp: info.max_timestamp, offset: info.last_offset };
            }
            if indexing && valid - last_index_entry > self.config.index_interval_bytes {
                let appended = self
                    .offset_index
                    .append(info.last_offset, valid)
                    .and_then(|()| self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, false));
                match appended {
                    Ok(()) => {}
                    Err(e @ LogError::OutOfSpace { .. }) => {
                        tracing::warn!(
                            file = %self.log.path.display(),
                            offset = info.last_offset,
                            "recovery: the indexes of this segment are left incomplete from this offset on \
                             (reads scan the segment instead): {e}"
                        );
                        indexing = false;
                    }
                    Err(e) => return Err(e),
                }
                last_index_entry = valid;
            }
            if let Some(h) = info.header {
                if h.partition_leader_epoch >= 0 {
                    epochs.push((h.partition_leader_epoch, h.base_offset));
                }
                if h.has_producer_id() {
                    producer_batches.push(h);
                }
            }
            next_offset = info.next_offset();
            batches += 1;
        }
        let truncated = self.size - prefix.valid_bytes;
        if truncated > 0 {
            tracing::warn!(
                file = %self.log.path.display(),
                position = prefix.valid_bytes,
                offset = next_offset,
                "found invalid data in log segment, truncated {truncated} bytes: {}",
                prefix.error.as_deref().unwrap_or("")
            );
            self.log
                .file
                .set_len(prefix.valid_bytes as u64)
                .map_err(|e| LogError::io("truncate", &self.log.path, e))?;
            self.size = prefix.valid_bytes;
        }
        self.offset_index.trim_to_valid_size()?;
        self.max_timestamp_so_far = max_ts;
        if indexing {
            self.append_last_time_entry()?;
        }
        self.time_index.trim_to_valid_size()?;
        // As Kafka's recover: the counter is not rebuilt, so appends after recovery index as after
        // any open.
        self.bytes_since_last_index_entry = 0;
        Ok(RecoveryOutcome {
            truncated_bytes: truncated,
            batches,
            next_offset,
            error: prefix.error,
            offsets_out_of_order: prefix.offsets_out_of_order,
            epochs,
            producer_batches,
        })
    }

    /// The longest prefix of the `.log` made of valid batches: whole (not torn), CRC-checked,
    /// offsets increasing, below `next_segment_base`. When a batch's offsets go backwards, the
    /// batch before it is cut too: one of the two has a damaged base offset (no CRC covers it) and
    /// it cannot be told which, so neither is served.
    fn valid_prefix(&self, next_segment_base: Option<i64>) -> Result<ValidPrefix, LogError> {
        let mut valid: u32 = 0;
        let mut prev_position: u32 = 0;
        let mut next_offset = self.base_offset;
        while valid < self.size {
            let info = match self.validate_entry(valid) {
                Ok(info) => info,
                Err(e @ LogError::Io { .. }) => return Err(e),
                Err(e) => {
                    let out_of_order = matches!(e, LogError::InvalidAppend { .. });
                    return Ok(ValidPrefix {
                        valid_bytes: valid,
                        error: Some(e.to_string()),
                        offsets_out_of_order: out_of_order,
                    });
                }
            };
            let first = if info.magic == MAGIC_V2 { info.base_offset } else { info.last_offset };
            if first < next_offset {
                // The previous batch may be the damaged one (its base offset flipped upwards).
                let cut = if valid > 0 { prev_position } else { valid };
                return Ok(ValidPrefix {
                    valid_bytes: cut,
                    error: Some(format!(
                        "batch at position {valid} starts at offset {first}, below the previous batch's next offset {next_offset}"
                    )),
                    offsets_out_of_order: true,
                });
            }
            if let Some(next) = next_segment_base.filter(|&n| info.last_offset >= n) {
                return Ok(ValidPrefix {
                    valid_bytes: valid,
                    error: Some(format!(
                        "batch at position {valid} ends at offset {}, at or past the next segment's base offset {next}",
                        info.last_offset
                    )),
                    offsets_out_of_order: true,
                });
            }
            prev_position = valid;
            valid += info.size;
            next_offset = info.next_offset();
        }
        Ok(ValidPrefix { valid_bytes: valid, error: None, offsets_out_of_order: false })
    }

    /// Read-only counterpart of [`Segment::recover`]: validates every batch as recovery does,
    /// without writing anything, and caps the readable size at the end of the valid prefix, so a
    /// corrupt or torn batch is never served from read-only data. Returns the bytes hidden.
    pub fn validate_read_only(&mut self, next_segment_base: Option<i64>) -> Result<u32, LogError> {
        let prefix = self.valid_prefix(next_segment_base)?;
        let hidden = self.size - prefix.valid_bytes;
        if hidden > 0 {
            tracing::warn!(
                "{}: invalid data at position {} not served: {}",
                self.log.path.display(),
                prefix.valid_bytes,
                prefix.error.as_deref().unwrap_or("")
            );
            self.size = prefix.valid_bytes;
            // The time index may name hidden batches: take the max timestamp from what is kept.
            let mut best = TimestampOffset { timestamp: NO_TIMESTAMP, offset: self.base_offset };
            for info in self.batches_from(0) {
                let info = info?;
                if info.max_timestamp > best.timestamp {
                    best = TimestampOffset { timestamp: info.max_timestamp, offset: info.last_offset };
                }
            }
            self.max_timestamp_so_far = best;
        }
        Ok(hidden)
    }

    /// Validates the entry at `position` fully: header, length within the file, CRC (CRC-32C for
    /// v2, CRC-32 for legacy), offsets in range for this segment.
    fn validate_entry(&self, position: u32) -> Result<BatchInfo, LogError> {
        let info = self.batch_at(position, self.size)?.ok_or_else(|| LogError::Batch {
            path: self.log.path.clone(),
            position: position as u64,
            source: BatchError::Truncated { needed: MIN_ENTRY_SIZE, available: (self.size - position) as usize },
        })?;
        let bytes = self.read_bytes(position, info.size)?;
        let wrap = |source| LogError::Batch { path: self.log.path.clone(), position: position as u64, source };
        if info.magic == MAGIC_V2 {
            let batch = RecordBatch::parse(&bytes).map_err(wrap)?;
            batch.verify_crc().map_err(wrap)?;
        } else {
            super::batch::legacy::verify_legacy_crc(&bytes).map_err(wrap)?;
        }
        if !self.can_convert_to_relative_offset(info.last_offset) || info.base_offset < self.base_offset {
            return Err(self.refuse(format!(
                "batch at position {position} has offsets {}..={} outside this segment (base offset {})",
                info.base_offset, info.last_offset, self.base_offset
            )));
        }
        Ok(info)
    }

    /// Removes every batch with offsets >= `offset` and the index entries pointing at them
    /// (Kafka's `LogSegment.truncateTo`, for a replica that diverged). Returns the bytes removed.
    ///
    /// This truncates the file in place: call it only when no reader holds a [`FileSlice`] of
    /// this segment (an mmap reader could otherwise see the cut page's tail as zeros).
    pub fn truncate_to(&mut self, offset: i64) -> Result<u32, LogError> {
        let mapping = self.translate_offset(offset, 0)?;
        self.offset_index.truncate_to(offset)?;
        self.time_index.truncate_to(offset)?;
        let removed = match mapping {
            None => 0,
            Some(info) => {
                self.log.file.set_len(info.position as u64).map_err(|e| LogError::io("truncate", &self.log.path, e))?;
                let removed = self.size - info.position;
                self.size = info.position;
                removed
            }
        };
        if self.size == 0 {
            self.rolling_based_timestamp = None;
        }
        self.bytes_since_last_index_entry = 0;
        self.max_timestamp_so_far = self.read_largest_timestamp()?;
        Ok(removed)
    }

    fn read_largest_timestamp(&self) -> Result<TimestampOffset, LogError> {
        let last = self.time_index.last_entry();
        let start = self.checked_index_position(last.offset);
        let mut best = last;
        for info in self.batches_from(start) {
            let info = info?;
            if info.max_timestamp > best.timestamp {
                best = TimestampOffset { timestamp: info.max_timestamp, offset: info.last_offset };
            }
        }
        Ok(best)
    }

    /// Kafka's `LogSegment.findOffsetByTimestamp`: the first record with timestamp >=
    /// `timestamp_ms` and offset >= `starting_offset`, looking inside batches (CreateTime need not
    /// be monotonic). `None` when there is none in this segment.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp_ms: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampOffset>, LogError> {
        let entry = self.time_index.lookup(timestamp_ms);
        let position = self.checked_index_position(entry.offset.max(starting_offset));
        for info in self.batches_from(position) {
            let info = info?;
            if info.max_timestamp < timestamp_ms || info.last_offset < starting_offset {
                continue;
            }
            let bytes = self.read_bytes(info.position, info.size)?;
            let wrap = |source| LogError::Batch { path: self.log.path.clone(), position: info.position as u64, source };
            for rec in super::batch::mixed::records_of_entry(&bytes).map_err(wrap)? {
                if rec.timestamp >= timestamp_ms && rec.offset >= starting_offset {
                    return Ok(Some(TimestampOffset { timestamp: rec.timestamp, offset: rec.offset }));
                }
            }
        }
        Ok(None)
    }

    /// Called when the segment stops being the active one (Kafka's `onBecomeInactiveSegment`):
    /// a final `.timeindex` entry for the max timestamp, both indexes trimmed to their entries.
    pub fn on_become_inactive(&mut self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        self.time_index.maybe_append(self.max_timestamp_so_far.timestamp, self.max_timestamp_so_far.offset, true)?;
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        Ok(())
    }

    /// Writes the time-index entry of the segment's largest timestamp (Kafka's
    /// `timeIndex.maybeAppend(maxTimestampSoFar, .., skipFullCheck = true)`), tolerating a full
    /// disk: then the time index is emptied, with a warn naming the file, so that a later open
    /// never takes a smaller last entry for the largest timestamp (an empty time index makes
    /// lookups by time scan the segment, and retention use the file's modification time, as
    /// Kafka's `largestTimestamp` does without timestamps).
    ///
    /// Errors: those of [`TimeIndex::maybe_append`] and [`TimeIndex::truncate_to_entries`] other
    /// than [`LogError::OutOfSpace`].
    fn append_last_time_entry(&mut self) -> Result<(), LogError> {
        match self.time_index.maybe_append(self.max_timestamp_so_far.timestamp, self.max_timestamp_so_far.offset, true)
        {
            Err(e @ LogError::OutOfSpace { .. }) => {
                tracing::warn!(
                    file = %self.time_index.path().display(),
                    "no space for the time index's last entry: the time index is emptied \
                     (lookups by time scan this segment): {e}"
                );
                self.time_index.truncate_to_entries(0)
            }
            other => other,
        }
    }

    /// Makes an inactive segment's indexes writable at full size again (when it becomes active
    /// after truncation).
    pub fn resize_indexes(&mut self, max_index_size: usize) -> Result<(), LogError> {
        self.offset_index.resize(max_index_size)?;
        self.time_index.resize(max_index_size)?;
        Ok(())
    }

    /// fsyncs the `.log`, both indexes and the `.txnindex` when there is one (Kafka's
    /// `LogSegment.flush`).
    pub fn flush(&self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        self.log.file.sync_data().map_err(|e| LogError::io("fsync", &self.log.path, e))?;
        self.offset_index.flush()?;
        self.time_index.flush()?;
        if let Some((f, path)) = self.txn_index_file()? {
            f.sync_data().map_err(|e| LogError::io("fsync", path, e))?;
        }
        Ok(())
    }

    /// The `.txnindex` opened for an fsync, `None` when the segment has none.
    fn txn_index_file(&self) -> Result<Option<(fs::File, PathBuf)>, LogError> {
        let path = self.dir.join(file_name(self.base_offset, TXN_INDEX_SUFFIX));
        match fs::File::open(&path) {
            Ok(f) => Ok(Some((f, path))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LogError::io("open", path, e)),
        }
    }

    /// Handles of its own on the segment's files (the shared `.log`, the index files and the `.txnindex` opened
    /// again), so that a scheduler can fsync them without the partition's lock
    /// ([`SegmentSync::sync`]). Nothing to sync for a read-only segment.
    ///
    /// Errors: [`LogError::Io`] opening an index file.
    pub(crate) fn sync_handles(&self) -> Result<SegmentSync, LogError> {
        if self.read_only {
            return Ok(SegmentSync { log: None, indexes: Vec::new() });
        }
        let mut indexes = Vec::with_capacity(3);
        if let Some(f) = self.offset_index.sync_file()? {
            indexes.push((f, self.offset_index.path().to_path_buf()));
        }
        if let Some(f) = self.time_index.sync_file()? {
            indexes.push((f, self.time_index.path().to_path_buf()));
        }
        if let Some(txn) = self.txn_index_file()? {
            indexes.push(txn);
        }
        Ok(SegmentSync { log: Some(Arc::clone(&self.log)), indexes })
    }

    /// Closes the segment as Kafka does: a final time-index entry (on a full disk the time index
    /// is emptied instead, with a warn: `append_last_time_entry`), indexes trimmed.
    pub fn close(mut self) -> Result<(), LogError> {
        self.close_in_place()
    }

    /// [`Self::close`] on a segment that stays readable (a partition closed while requests may
    /// still hold it): the final time-index entry and trimmed indexes; reads go on.
    pub(crate) fn close_in_place(&mut self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        // On a full disk a clean shutdown still closes the segment (see append_last_time_entry).
        self.append_last_time_entry()?;
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        Ok(())
    }

    /// Renames all the segment's files by appending `suffix` (e.g. `.deleted`), Kafka's
    /// `changeFileSuffixes`. Open handles (readers' slices, mmaps) stay valid.
    pub fn add_suffix(&mut self, suffix: &str) -> Result<(), LogError> {
        let with = |s: &str| self.dir.join(format!("{}{suffix}", file_name(self.base_offset, s)));
        let (log_to, idx_to, time_to, txn_to) =
            (with(LOG_SUFFIX), with(INDEX_SUFFIX), with(TIME_INDEX_SUFFIX), with(TXN_INDEX_SUFFIX));
        fs::rename(&self.log.path, &log_to).map_err(|e| LogError::io("rename", &self.log.path, e))?;
        self.offset_index.rename_to(&idx_to)?;
        self.time_index.rename_to(&time_to)?;
        let txn = self.dir.join(file_name(self.base_offset, TXN_INDEX_SUFFIX));
        match fs::rename(&txn, &txn_to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LogError::io("rename", txn, e)),
        }
    }

    /// Unlinks every file of the segment (with `suffix`, e.g. `.deleted`). The data stays readable
    /// through handles that are still open (slices in flight, mmaps) until the last one closes:
    /// the file is never truncated under a reader.
    pub fn delete_files(dir: &Path, base_offset: i64, suffix: &str) -> Result<(), LogError> {
        for s in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            let p = dir.join(format!("{}{suffix}", file_name(base_offset, s)));
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io("delete", p, e)),
            }
        }
        Ok(())
    }

    /// The directory holding the segment.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Whether the segment was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

/// The valid part of a `.log` (see `Segment::valid_prefix`).
struct ValidPrefix {
    valid_bytes: u32,
    error: Option<String>,
    offsets_out_of_order: bool,
}

/// What [`Segment::recover`] found.
#[derive(Debug, Clone, Default)]
pub struct RecoveryOutcome {
    /// Bytes cut from the end of the `.log` (0 when everything was valid).
    pub truncated_bytes: u32,
    /// Valid batches kept.
    pub batches: u64,
    /// Offset after the last valid batch.
    pub next_offset: i64,
    /// Why the scan stopped early, when it did.
    pub error: Option<String>,
    /// Whether it stopped at a batch that is intact (its CRC holds) but whose offsets go backwards
    /// or past the next segment: only that batch is damaged, not the data after it.
    pub offsets_out_of_order: bool,
    /// `(partition leader epoch, base offset)` of every valid v2 batch with an epoch >= 0, in order
    /// (to rebuild `leader-epoch-checkpoint`).
    pub epochs: Vec<(i32, i64)>,
    /// Headers of valid batches with a producer id (to rebuild producer state).
    pub producer_batches: Vec<BatchHeader>,
}

/// Iterator of [`Segment::batches_from`].
#[derive(Debug)]
pub struct BatchInfoIter<'a> {
    file: &'a SegmentFile,
    position: u32,
    end: u32,
    done: bool,
}

impl Iterator for BatchInfoIter<'_> {
    type Item = Result<BatchInfo, LogError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match read_batch_info(self.file, self.position, self.end) {
            Ok(Some(info)) => {
                self.position = info.end();
                Some(Ok(info))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

fn read_batch_info(file: &SegmentFile, position: u32, end: u32) -> Result<Option<BatchInfo>, LogError> {
    if position as u64 + LOG_OVERHEAD as u64 > end as u64 {
        return Ok(None);
    }
    let want = (HEADER_SIZE as u32).min(end - position) as usize;
    let mut buf = [0u8; HEADER_SIZE];
    file.file.read_exact_at(&mut buf[..want], position as u64).map_err(|e| LogError::io("read", &file.path, e))?;
    let buf = &buf[..want];
    let base_offset = super::batch::be_i64(buf, 0);
    let length = super::batch::be_i32(buf, 8);
    let corrupt = |source| LogError::Batch { path: file.path.clone(), position: position as u64, source };
    if length < (MIN_ENTRY_SIZE - LOG_OVERHEAD) as i32 {
        return Err(corrupt(BatchError::InvalidLength {
            base_offset,
            length,
            min: (MIN_ENTRY_SIZE - LOG_OVERHEAD) as i32,
            max: i32::MAX,
        }));
    }
    let size = length as u64 + LOG_OVERHEAD as u64;
    if position as u64 + size > end as u64 {
        return Ok(None);
    }
    let magic = buf[super::batch::MAGIC_OFFSET] as i8;
    let info = match magic {
        MAGIC_V2 => {
            let h = BatchHeader::parse(buf).map_err(corrupt)?;
            BatchInfo {
                position,
                size: size as u32,
                magic,
                base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
                header: Some(h),
            }
        }
        0 | 1 => {
            // An entry at i64::MAX has no next offset.
            super::batch::check_offset_range(base_offset, 0).map_err(corrupt)?;
            // Legacy entry: offset field = (last inner) offset; magic 1 timestamp at 18..26.
            let max_timestamp =
                if magic == 1 && buf.len() >= 26 { super::batch::be_i64(buf, 18) } else { NO_TIMESTAMP };
            BatchInfo {
                position,
                size: size as u32,
                magic,
                base_offset,
                last_offset: base_offset,
                max_timestamp,
                header: None,
            }
        }
        m => return Err(corrupt(BatchError::UnsupportedMagic { base_offset, magic: m })),
    };
    Ok(Some(info))
}

fn file_mtime_ms(file: &File) -> i64 {
    file.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}
