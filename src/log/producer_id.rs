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

use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint::write_atomically;
use super::LogError;

/// Producer ids reserved at once (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// The file in the log directory holding the first producer id of the next block.
pub const PRODUCER_ID_BLOCK_FILE: &str = "producer-id-block";

const VERSION: i64 = 0;

/// Hands out producer ids from persisted blocks. Not synchronised: the broker keeps it under the
/// log manager's lock.
#[derive(Debug)]
pub struct ProducerIdManager {
    path: PathBuf,
    /// Next id to hand out.
    next_id: i64,
    /// End (exclusive) of the current block; `next_id == block_end` means no block.
    block_end: i64,
}

impl ProducerIdManager {
    /// Opens the manager of log directory `dir`; nothing is reserved until the first id is asked.
    pub fn new(dir: &Path) -> Self {
        ProducerIdManager { path: dir.join(PRODUCER_ID_BLOCK_FILE), next_id: 0, block_end: 0 }
    }

    /// The next free producer id. When the current block is used up, reserves the next one
    /// starting at the larger of the block file's value and `max_producer_id_in_logs + 1`
    /// (`max_producer_id_in_logs` is called only then), persisting its end first.
    ///
    /// Errors: [`LogError::Layout`] when the block file is malformed (ids could repeat: refused
    /// rather than guessed); [`LogError::Io`] reading or writing it; [`LogError::InvalidAppend`]
    /// when the id space is exhausted.
    pub fn generate(&mut self, max_producer_id_in_logs: impl FnOnce() -> Option<i64>) -> Result<i64, LogError> {
        if self.next_id >= self.block_end {
            let stored = self.read_next_block_start()?;
            let start = stored.max(max_producer_id_in_logs().map_or(0, |m| m.saturating_add(1))).max(self.block_end);
            let end = start.checked_add(PRODUCER_ID_BLOCK_SIZE).ok_or_else(|| LogError::InvalidAppend {
                path: self.path.clone(),
                reason: "producer ids exhausted".into(),
            })?;
            write_atomically(&self.path, format!("{VERSION}\n{end}\n").as_bytes())?;
            tracing::info!("reserved producer ids {start}..{end} ({})", self.path.display());
            self.next_id = start;
            self.block_end = end;
        }
        let id = self.next_id;
        self.next_id += 1;
        Ok(id)
    }

    /// The first id of the next block from the file; 0 when there is no file.
    fn read_next_block_start(&self) -> Result<i64, LogError> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(LogError::io("read", &self.path, e)),
        };
        let mut lines = text.lines().map(str::trim);
        let malformed = |reason: &str| LogError::Layout { path: self.path.clone(), reason: reason.to_string() };
        match lines.next().map(str::parse::<i64>) {
            Some(Ok(VERSION)) => {}
            _ => return Err(malformed("expected version 0 on the first line")),
        }
        match lines.next().map(str::parse::<i64>) {
            Some(Ok(n)) if n >= 0 => Ok(n),
            _ => Err(malformed("expected the next producer id block start (>= 0) on the second line")),
        }
    }
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
        fs::write(tmp.path().join(PRODUCER_ID_BLOCK_FILE), "x\n").unwrap();
        assert!(matches!(ProducerIdManager::new(tmp.path()).generate(|| None), Err(LogError::Layout { .. })));
    }
}
