//! Producer id allocation for InitProducerId: Kafka's `ProducerIdManager` (blocks of
//! [`PRODUCER_ID_BLOCK_SIZE`] ids, `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE` = 1000).
//!
//! In KRaft Kafka a broker asks the controller for a block (`AllocateProducerIds`) and the
//! controller records the next free id in the metadata log (`ProducerIdsRecord`) before answering,
//! so ids stay unique across restarts. This single node keeps that record in a small file of its
//! log directory, [`PRODUCER_ID_BLOCK_FILE`]:
//!
//! ```text
//! 0                  version
//! 2000               the first producer id of the NEXT block (every id below it may be in use)
//! ```
//!
//! Reserving a block writes the file atomically and fsyncs it (and the directory) BEFORE any id
//! of the block is handed out, so a crash can waste the rest of a block but never repeat an id.
//! A new block also starts above the largest producer id found in any partition's log, so a log
//! directory copied from elsewhere, or a lost block file, cannot make an id collide with a
//! producer the logs already know.

//!
//! ## A damaged block file
//!
//! A block file that cannot be read as the two lines above (garbage, non-UTF-8 bytes, a negative
//! value) is rebuilt, with a warning naming it, from the largest producer id found in any batch
//! header of the directory's logs: the next block starts at the block boundary above that id plus
//! [`DAMAGED_FILE_MARGIN_BLOCKS`] blocks, and is persisted at once ([`ProducerIdManager::open`]).
//! The margin covers ids handed out before the damage to producers that had not written yet (no
//! log names them). Kafka has no such file: its controller records `ProducerIdsRecord`s in the
//! replicated metadata log, and a broker that cannot get a block answers InitProducerId with
//! `COORDINATOR_LOAD_IN_PROGRESS` until it can; refusing every InitProducerId forever, as a
//! damaged file did here before, would make every idempotent producer fail.

use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint::write_atomically;
use super::error::LogError;
use super::partition::DamagedFile;

/// Producer ids reserved at once (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub(crate) const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The file in the log directory holding the first producer id of the next block.
pub(crate) const PRODUCER_ID_BLOCK_FILE: &str = "producer-id-block";

/// Blocks skipped above the largest producer id in the logs when the block file is rebuilt.
pub(crate) const DAMAGED_FILE_MARGIN_BLOCKS: i64 = 1000;

const VERSION: i64 = 0;

/// Hands out producer ids from persisted blocks. Not synchronised: the broker keeps it under the
/// log manager's lock.
#[derive(Debug)]
pub(crate) struct ProducerIdManager {
    path: PathBuf,
    /// Next id to hand out.
    next_id: i64,
    /// End (exclusive) of the current block; `next_id == block_end` means no block.
    block_end: i64,
}

impl ProducerIdManager {
    /// The manager of log directory `dir`, without looking at its block file (read-only opens);
    /// nothing is reserved until the first id is asked.
    pub(crate) fn new(dir: &Path) -> Self {
        ProducerIdManager { path: dir.join(PRODUCER_ID_BLOCK_FILE), next_id: 0, block_end: 0 }
    }

    /// Opens the manager of log directory `dir` at start-up and checks its block file. A damaged
    /// file is rebuilt at once (see the module docs) from `max_producer_id_in_logs`, the largest
    /// producer id in any batch header of the directory, and reported with a warning and as the
    /// returned [`DamagedFile`]. A missing file is fine (a new directory).
    ///
    /// Errors: [`LogError::Io`] writing the rebuilt file; [`LogError::InvalidAppend`] when the
    /// rebuilt start would overflow the id space.
    pub(crate) fn open(
        dir: &Path,
        max_producer_id_in_logs: Option<i64>,
    ) -> Result<(Self, Option<DamagedFile>), LogError> {
        let manager = Self::new(dir);
        match manager.read_next_block_start() {
            Ok(_) => Ok((manager, None)),
            Err(e) => {
                let start = manager.rebuilt_block_start(max_producer_id_in_logs)?;
                let action = manager.rebuild(&e, start)?;
                Ok((manager, Some(DamagedFile { path: manager_path(dir), error: e.to_string(), action })))
            }
        }
    }

    /// The next free producer id. When the current block is used up, reserves the next one
    /// starting at the larger of the block file's value and `max_producer_id_in_logs + 1`
    /// (`max_producer_id_in_logs` is called only then), persisting its end first. A block file
    /// damaged since start-up is rebuilt as [`ProducerIdManager::open`] does.
    ///
    /// Errors: [`LogError::Io`] writing the file; [`LogError::InvalidAppend`] when the id space
    /// is exhausted.
    pub(crate) fn generate(&mut self, max_producer_id_in_logs: impl FnOnce() -> Option<i64>) -> Result<i64, LogError> {
        if self.next_id >= self.block_end {
            let max_in_logs = max_producer_id_in_logs();
            let stored = match self.read_next_block_start() {
                Ok(stored) => stored,
                Err(e) => {
                    let start = self.rebuilt_block_start(max_in_logs)?;
                    self.rebuild(&e, start)?;
                    start
                }
            };
            let start = stored.max(max_in_logs.map_or(0, |m| m.saturating_add(1))).max(self.block_end);
            let end = start.checked_add(PRODUCER_ID_BLOCK_SIZE).ok_or_else(|| self.exhausted())?;
            write_atomically(&self.path, format!("{VERSION}\n{end}\n").as_bytes())?;
            tracing::info!("reserved producer ids {start}..{end} ({})", self.path.display());
            self.next_id = start;
            self.block_end = end;
        }
        let id = self.next_id;
        self.next_id += 1;
        Ok(id)
    }

    fn exhausted(&self) -> LogError {
        LogError::InvalidAppend { path: self.path.clone(), reason: "producer ids exhausted".into() }
    }

    /// Where the next block starts when the block file is lost: the block boundary above the
    /// largest id in the logs, plus [`DAMAGED_FILE_MARGIN_BLOCKS`] blocks, and never below the
    /// block this process already holds.
    fn rebuilt_block_start(&self, max_producer_id_in_logs: Option<i64>) -> Result<i64, LogError> {
        let above =
            max_producer_id_in_logs.map_or(Some(0), |m| m.max(-1).checked_add(1)).ok_or_else(|| self.exhausted())?;
        let boundary = above
            .checked_add(PRODUCER_ID_BLOCK_SIZE - 1)
            .map(|v| v / PRODUCER_ID_BLOCK_SIZE * PRODUCER_ID_BLOCK_SIZE)
            .and_then(|b| b.checked_add(DAMAGED_FILE_MARGIN_BLOCKS * PRODUCER_ID_BLOCK_SIZE))
            .ok_or_else(|| self.exhausted())?;
        Ok(boundary.max(self.block_end))
    }

    /// Persists `start` as the next block start in place of a damaged file; returns what was done.
    fn rebuild(&self, damage: &LogError, start: i64) -> Result<String, LogError> {
        write_atomically(&self.path, format!("{VERSION}\n{start}\n").as_bytes())?;
        let action = format!(
            "rebuilt: the next producer id block starts at {start} ({DAMAGED_FILE_MARGIN_BLOCKS} blocks above the largest producer id in the logs)"
        );
        tracing::warn!("{damage}: damaged producer id block file {action}");
        Ok(action)
    }

    /// The first id of the next block from the file; 0 when there is no file.
    ///
    /// Errors: [`LogError::Io`] when the file cannot be read; [`LogError::Layout`] when it is not
    /// UTF-8 or not the two lines of the format.
    fn read_next_block_start(&self) -> Result<i64, LogError> {
        let bytes = match fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(LogError::io("read", &self.path, e)),
        };
        let malformed = |reason: &str| LogError::Layout { path: self.path.clone(), reason: reason.to_string() };
        let text = String::from_utf8(bytes).map_err(|_| malformed("not a text file (invalid UTF-8)"))?;
        let mut lines = text.lines().map(str::trim);
        match lines.next().map(str::parse::<i64>) {
            Some(Ok(VERSION)) => {}
            _ => return Err(malformed("expected version 0 on the first line")),
        }
        match lines.next().map(str::parse::<i64>) {
            // Kafka's `ProducerIdManager` refuses a block past `Long.MaxValue - blockSize`
            // ("Have exhausted all producerIds"): such a value is damage, rebuilt from the logs.
            Some(Ok(n)) if n >= 0 && n.checked_add(PRODUCER_ID_BLOCK_SIZE).is_some() => Ok(n),
            Some(Ok(n)) if n >= 0 => Err(malformed(&format!(
                "the next producer id block start {n} leaves no room for a block of {PRODUCER_ID_BLOCK_SIZE} ids below i64::MAX"
            ))),
            _ => Err(malformed("expected the next producer id block start (>= 0) on the second line")),
        }
    }
}

fn manager_path(dir: &Path) -> PathBuf {
    dir.join(PRODUCER_ID_BLOCK_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_reopen_and_start_above_the_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = ProducerIdManager::new(tmp.path());
        assert_eq!(m.generate(|| None).unwrap(), 0);
        assert_eq!(m.generate(|| panic!("not asked inside a block")).unwrap(), 1);
        let text = fs::read_to_string(tmp.path().join(PRODUCER_ID_BLOCK_FILE)).unwrap();
        assert_eq!(text, "0\n1000\n");
        // A restart: the next block.
        let mut m = ProducerIdManager::new(tmp.path());
        assert_eq!(m.generate(|| Some(5)).unwrap(), 1000);
        // Logs know a larger id: start above it.
        let mut m = ProducerIdManager::new(tmp.path());
        assert_eq!(m.generate(|| Some(7777)).unwrap(), 7778);
        for want in 7779..8778 {
            assert_eq!(m.generate(|| None).unwrap(), want);
        }
        assert_eq!(m.generate(|| None).unwrap(), 8778, "next block follows");
    }

    #[test]
    fn a_damaged_block_file_is_rebuilt_above_the_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(PRODUCER_ID_BLOCK_FILE);
        let margin = DAMAGED_FILE_MARGIN_BLOCKS * PRODUCER_ID_BLOCK_SIZE;
        for (damage, max_in_logs, want) in [
            (&b"x\n"[..], Some(7777), 8000 + margin),
            (&b"0\n\xff\xfe\n"[..], Some(7999), 8000 + margin),
            (&b"0\n-5\n"[..], Some(8000), 9000 + margin),
            (&b"\x00\x00\x00"[..], None, margin),
            (&b""[..], Some(0), 1000 + margin),
            // Well-formed, but the next block would overflow i64 (review LOW 9).
            (&b"0\n9223372036854775000\n"[..], Some(7777), 8000 + margin),
        ] {
            fs::write(&path, damage).unwrap();
            let (mut m, damaged) = ProducerIdManager::open(tmp.path(), max_in_logs).unwrap();
            let damaged = damaged.expect("reported");
            assert_eq!(damaged.path, path);
            assert!(damaged.action.contains(&want.to_string()), "{damaged:?}");
            assert_eq!(fs::read_to_string(&path).unwrap(), format!("0\n{want}\n"), "persisted at once");
            assert_eq!(m.generate(|| max_in_logs).unwrap(), want);
        }
        // Damaged while running: the next block reservation rebuilds it too.
        let (mut m, none) = ProducerIdManager::open(tmp.path(), None).unwrap();
        assert!(none.is_none());
        fs::write(&path, "garbage").unwrap();
        assert_eq!(m.generate(|| Some(41)).unwrap(), 1000 + margin);
        // An id near the top of the id space: an error, never a wrap.
        fs::write(&path, "x").unwrap();
        assert!(matches!(
            ProducerIdManager::open(tmp.path(), Some(i64::MAX - 10)),
            Err(LogError::InvalidAppend { .. })
        ));
    }
}
