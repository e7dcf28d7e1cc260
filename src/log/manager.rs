//! A `log.dirs` directory: every partition log in it, Kafka's checkpoint files and the
//! clean-shutdown marker. Kafka's `LogManager`.
//!
//! Layout (Kafka's own):
//!
//! ```text
//! <log dir>/
//!   .kafka_cleanshutdown                 present only after a clean shutdown
//!   recovery-point-offset-checkpoint     per partition: offset up to which data was fsynced
//!   log-start-offset-checkpoint          per partition: first readable offset
//!   replication-offset-checkpoint        per partition: high watermark (left as written: on one
//!                                        replica the high watermark is the log end offset)
//!   meta.properties                      cluster and node id (left untouched)
//!   producer-id-block                    fetchbench's: the next free producer id block
//!                                        (InitProducerId; see `producer_id`)
//!   <topic>-<partition>/                 one PartitionLog each
//!   <topic>-<partition>.<uuid>-delete/   a deleted partition: removed at start-up
//!   __cluster_metadata-0/                KRaft's metadata log: not a client topic, skipped
//! ```
//!
//! Start-up: the marker says whether the last shutdown was clean (it is removed at once, so a
//! crash from now on is unclean); without it every partition is recovered from its recovery point.
//! A damaged file never stops start-up: each is rebuilt from the logs with a warning naming it
//! ([`ManagerReport::damaged`]): the offset checkpoints are ignored (full recovery; log start at
//! the first segment, as Kafka's `LogManager.loadLogs` resets them), a partition's
//! `leader-epoch-checkpoint` is rebuilt from its batch headers and its `partition.metadata` from a
//! sibling partition (Kafka takes the directory offline for either), and `producer-id-block` is
//! rebuilt above the largest producer id in the logs.
//! Shutdown: every log flushed and closed, both checkpoints written, then the marker.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint::{
    self, read_offset_checkpoint, write_offset_checkpoint, OffsetCheckpoint, TopicId, CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT,
};
use super::config::LogConfig;
use super::error::LogError;
use super::partition::{now_ms, parse_topic_partition, DamagedFile, LoadReport, OpenOptions, PartitionLog};
use super::producer_id::ProducerIdManager;

/// Name of KRaft's metadata log directory prefix (`__cluster_metadata-0`).
pub const CLUSTER_METADATA_TOPIC: &str = "__cluster_metadata";

/// What [`LogManager::open`] found.
#[derive(Debug, Default)]
pub struct ManagerReport {
    /// Whether `.kafka_cleanshutdown` was present.
    pub had_clean_shutdown: bool,
    /// Each partition loaded, with its load report.
    pub partitions: Vec<((String, i32), LoadReport)>,
    /// `-delete` directories removed.
    pub removed_dirs: Vec<PathBuf>,
    /// Damaged files found (the directory's offset checkpoints and `producer-id-block`, every
    /// partition's `leader-epoch-checkpoint` and `partition.metadata`) and what replaced each. Each
    /// was also logged at warn, naming the file.
    pub damaged: Vec<DamagedFile>,
    /// Entries that are not client partitions (KRaft metadata, `-future`/`-stray` directories,
    /// stray names), with the reason.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Every partition log of one log directory.
#[derive(Debug)]
pub struct LogManager {
    dir: PathBuf,
    config: LogConfig,
    logs: BTreeMap<(String, i32), PartitionLog>,
    read_only: bool,
    producer_ids: ProducerIdManager,
    /// The exclusive `flock` on `<dir>/.lock` (Kafka's `LogManager.lockLogDirs`), held while
    /// the manager lives; `None` read-only.
    _lock: Option<nix::fcntl::Flock<fs::File>>,
}

/// Kafka's lock file in every log directory.
pub const LOCK_FILE: &str = ".lock";

/// Takes an exclusive, non-blocking `flock` on `<dir>/.lock`, so that two brokers never share a
/// log directory (Kafka's `LogManager.lockLogDirs`).
///
/// Errors: [`LogError::Io`]; `WouldBlock` when another process holds the lock.
fn lock_dir(dir: &Path) -> Result<nix::fcntl::Flock<fs::File>, LogError> {
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io("open", &path, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        let e = if errno == nix::errno::Errno::EWOULDBLOCK {
            std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "the log directory is in use by another process (one broker per log directory)",
            )
        } else {
            std::io::Error::from(errno)
        };
        LogError::io("lock", &path, e)
    })
}

impl LogManager {
    /// Opens `dir` (creating it unless `read_only`) and loads every partition in it with
    /// `config` (broker-level defaults) and per-topic overrides from `topic_config`. Damaged
    /// checkpoint, epoch, metadata and producer-id files are rebuilt, not fatal (module docs).
    ///
    /// A writable open takes an exclusive lock on `<dir>/.lock` for the manager's lifetime.
    ///
    /// Errors: [`LogError::Io`] (kind `WouldBlock` when another process has the directory open)
    /// and the errors of [`PartitionLog::open`], naming the partition.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        topic_config: impl Fn(&str) -> Option<LogConfig>,
        read_only: bool,
    ) -> Result<(Self, ManagerReport), LogError> {
        if !read_only {
            fs::create_dir_all(dir).map_err(|e| LogError::io("create", dir, e))?;
        }
        let lock = if read_only { None } else { Some(lock_dir(dir)?) };
        let mut report = ManagerReport::default();
        let marker = dir.join(CLEAN_SHUTDOWN_MARKER);
        report.had_clean_shutdown = marker.exists();
        if report.had_clean_shutdown && !read_only {
            fs::remove_file(&marker).map_err(|e| LogError::io("delete", &marker, e))?;
        }
        let recovery_point_path = dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT);
        let recovery_points = read_checkpoint_or_empty(&recovery_point_path).unwrap_or_else(|e| {
            let action =
                "every partition is recovered from its log start (CRC-checked, indexes rebuilt, torn tails cut)";
            tracing::warn!("{e}: damaged checkpoint ignored; {action}; it is rewritten after the load");
            report.damaged.push(DamagedFile {
                path: recovery_point_path.clone(),
                error: e.to_string(),
                action: action.into(),
            });
            None
        });
        let log_start_path = dir.join(LOG_START_OFFSET_CHECKPOINT);
        let log_starts = read_checkpoint_or_empty(&log_start_path).unwrap_or_else(|e| {
            let action = "each partition starts at the base offset of its first segment";
            tracing::warn!("{e}: damaged checkpoint ignored; {action}; it is rewritten after the load");
            report.damaged.push(DamagedFile {
                path: log_start_path.clone(),
                error: e.to_string(),
                action: action.into(),
            });
            Some(OffsetCheckpoint::new())
        });
        // Without trustworthy recovery points every partition is recovered in full, even after a
        // clean shutdown: the damage may not be the only one (Kafka resets the recovery point to 0).
        let full_recovery = recovery_points.is_none();
        let recovery_points = recovery_points.unwrap_or_default();
        let log_starts = log_starts.unwrap_or_default();
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .map_err(|e| LogError::io("list", dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        let mut logs = BTreeMap::new();
        for path in entries {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.ends_with("-delete") {
                if !read_only {
                    fs::remove_dir_all(&path).map_err(|e| LogError::io("delete", &path, e))?;
                    report.removed_dirs.push(path);
                }
                continue;
            }
            if name.ends_with("-future") || name.ends_with("-stray") {
                report.skipped.push((path, "replica being moved or stray (not served)".into()));
                continue;
            }
            let Some((topic, partition)) = parse_topic_partition(&name) else {
                report.skipped.push((path, "not a <topic>-<partition> directory".into()));
                continue;
            };
            if topic == CLUSTER_METADATA_TOPIC {
                report.skipped.push((path, "KRaft metadata log, not a client topic".into()));
                continue;
            }
            let key = (topic.clone(), partition);
            let cfg = topic_config(&topic).unwrap_or_else(|| config.clone());
            let opts = OpenOptions {
                had_clean_shutdown: report.had_clean_shutdown && !full_recovery,
                recovery_point: recovery_points.get(&key).copied(),
                log_start_offset: log_starts.get(&key).copied(),
                read_only,
                now_ms: 0,
            };
            let (log, load) = PartitionLog::open(&path, cfg, opts)?;
            report.damaged.extend(load.damaged.iter().cloned());
            report.partitions.push((key.clone(), load));
            logs.insert(key, log);
        }
        warn_inconsistent_topic_ids(&logs, &mut report);
        if !read_only {
            adopt_sibling_topic_ids(&mut logs, &mut report)?;
        }
        let max_producer_id = logs.values().filter_map(PartitionLog::max_producer_id).max();
        let producer_ids = if read_only {
            ProducerIdManager::new(dir)
        } else {
            let (ids, damaged) = ProducerIdManager::open(dir, max_producer_id)?;
            report.damaged.extend(damaged);
            ids
        };
        let mgr = LogManager { dir: dir.to_path_buf(), config, logs, read_only, producer_ids, _lock: lock };
        if !read_only {
            match mgr.checkpoint() {
                // A full disk at start-up: the checkpoints on disk are older, never wrong (the
                // recovery points are lower, so more is recovered next time); serve reads anyway.
                Err(e @ LogError::OutOfSpace { .. }) => {
                    tracing::warn!("{e}; keeping the previous checkpoints")
                }
                other => other?,
            }
        }
        Ok((mgr, report))
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Broker-level log config (defaults for new partitions).
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// A partition's log.
    pub fn log(&self, topic: &str, partition: i32) -> Option<&PartitionLog> {
        self.logs.get(&(topic.to_string(), partition))
    }
    /// A partition's log, mutable.
    pub fn log_mut(&mut self, topic: &str, partition: i32) -> Option<&mut PartitionLog> {
        self.logs.get_mut(&(topic.to_string(), partition))
    }
    /// Every log, by (topic, partition).
    pub fn logs(&self) -> impl Iterator<Item = (&(String, i32), &PartitionLog)> {
        self.logs.iter()
    }
    /// Every log, mutable (retention and compaction passes).
    pub fn logs_mut(&mut self) -> impl Iterator<Item = (&(String, i32), &mut PartitionLog)> {
        self.logs.iter_mut()
    }

    /// Returns the log of `topic`-`partition`, creating its directory and first segment with
    /// `config` (or the broker defaults) when it does not exist.
    ///
    /// Errors: [`LogError::Layout`] for an invalid topic name; [`LogError::Io`].
    pub fn get_or_create(
        &mut self,
        topic: &str,
        partition: i32,
        config: Option<LogConfig>,
    ) -> Result<&mut PartitionLog, LogError> {
        let key = (topic.to_string(), partition);
        if !self.logs.contains_key(&key) {
            validate_topic_name(topic).map_err(|reason| LogError::Layout { path: self.dir.join(topic), reason })?;
            if partition < 0 {
                return Err(LogError::Layout { path: self.dir.join(topic), reason: "negative partition".into() });
            }
            let path = self.dir.join(format!("{topic}-{partition}"));
            let opts = OpenOptions { had_clean_shutdown: true, read_only: self.read_only, ..Default::default() };
            let (log, _) = PartitionLog::open(&path, config.unwrap_or_else(|| self.config.clone()), opts)?;
            self.logs.insert(key.clone(), log);
        }
        Ok(self.logs.get_mut(&key).expect("inserted"))
    }

    /// Returns the topic id of `topic` (KIP-516): the one in any partition's `partition.metadata`,
    /// else a new random one, written to every partition of the topic that lacks it (a partition
    /// directory open read-only is left as it is).
    ///
    /// Errors: [`LogError::Io`] writing `partition.metadata`.
    pub fn ensure_topic_id(&mut self, topic: &str) -> Result<TopicId, LogError> {
        let existing = self.logs().filter(|((t, _), _)| t == topic).find_map(|(_, log)| log.topic_id());
        let id = match existing {
            Some(id) if !id.is_zero() => id,
            _ => random_topic_id(),
        };
        for ((t, _), log) in self.logs_mut() {
            if t == topic && log.topic_id() != Some(id) && !log.is_read_only() {
                log.set_topic_id(id)?;
            }
        }
        Ok(id)
    }

    /// A new producer id for an idempotent producer (InitProducerId without a transactional id),
    /// unique across restarts: taken from a block of 1000 persisted in `producer-id-block` before
    /// use, each block starting above the largest producer id in any partition's producer state
    /// (Kafka's `ProducerIdManager`; see [`super::producer_id`]).
    ///
    /// Errors: [`LogError::InvalidAppend`] when the directory is open read-only; the errors of
    /// [`ProducerIdManager::generate`].
    pub fn generate_producer_id(&mut self) -> Result<i64, LogError> {
        if self.read_only {
            return Err(LogError::InvalidAppend {
                path: self.dir.clone(),
                reason: "log directory is open read-only: no producer ids".into(),
            });
        }
        let logs = &self.logs;
        self.producer_ids.generate(|| logs.values().filter_map(PartitionLog::max_producer_id).max())
    }

    /// Writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` atomically.
    pub fn checkpoint(&self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        let mut rp = OffsetCheckpoint::new();
        let mut ls = OffsetCheckpoint::new();
        for (k, log) in &self.logs {
            rp.insert(k.clone(), log.recovery_point());
            ls.insert(k.clone(), log.log_start_offset());
        }
        write_offset_checkpoint(&self.dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT), &rp)?;
        write_offset_checkpoint(&self.dir.join(LOG_START_OFFSET_CHECKPOINT), &ls)?;
        Ok(())
    }

    /// Clean shutdown: every log flushed and closed, checkpoints written, then the
    /// `.kafka_cleanshutdown` marker, so the next start skips recovery.
    ///
    /// Checkpoints that cannot be written (a full disk) are a warn, not an error: the files in
    /// place keep older values, which are safe (a lower recovery point only means more recovery,
    /// after an unclean start; a lower log start offset is raised again by the next
    /// `DeleteRecords` or retention), and the logs are flushed, so the marker is still written.
    ///
    /// Errors: a log that cannot be flushed or closed, or the marker that cannot be written.
    pub fn shutdown(mut self) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        let now = now_ms();
        for log in self.logs.values_mut() {
            log.flush(now)?;
        }
        if let Err(e) = self.checkpoint() {
            tracing::warn!(dir = %self.dir.display(), "shutdown: the offset checkpoints keep their older values: {e}");
        }
        for (_, log) in std::mem::take(&mut self.logs) {
            log.close()?;
        }
        checkpoint::write_atomically(&self.dir.join(CLEAN_SHUTDOWN_MARKER), b"")?;
        Ok(())
    }
}

/// A random version-4 UUID from the kernel's random source, never [`TopicId::ZERO`] nor
/// [`TopicId::METADATA_TOPIC_ID`] (Kafka's `Uuid.randomUuid` skips reserved ids too).
fn random_topic_id() -> TopicId {
    let mut bytes = [0u8; 16];
    loop {
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
        if let Err(e) = read {
            tracing::warn!("reading /dev/urandom failed ({e}); topic id from the clock");
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(1);
            bytes = (nanos ^ (u128::from(std::process::id()) << 64)).to_be_bytes();
        }
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let id = TopicId(bytes);
        if id != TopicId::ZERO && id != TopicId::METADATA_TOPIC_ID {
            return id;
        }
    }
}

/// Reads an offset checkpoint of the log directory; a missing one reads as empty.
///
/// Errors: the error of [`read_offset_checkpoint`] when the file cannot be read or is damaged
/// (not UTF-8, a bad version, count or line): the caller warns and goes on without it, as Kafka's
/// `LogManager.loadLogs` does ("Error occurred while reading recovery-point-offset-checkpoint
/// file ..., resetting the recovery checkpoint to 0"; for `log-start-offset-checkpoint`,
/// "resetting to the base offset of the first segment"). Damage never stops start-up: both
/// files are derived data, rewritten from the loaded logs right after the load.
fn read_checkpoint_or_empty(path: &Path) -> Result<Option<OffsetCheckpoint>, LogError> {
    read_offset_checkpoint(path).map(Some)
}

/// Partitions of one topic whose valid `partition.metadata` holds another topic id than the
/// others (KIP-516: one id per topic). Kafka's `Partition.checkOrSetTopicId` refuses such a
/// partition with `InconsistentTopicIdException` (it goes offline). Here the records stay
/// served under the topic's name: the id held by most partitions (ties: the lowest partition's)
/// is the topic's, each differing file is warned about naming both ids and reported in
/// [`ManagerReport::damaged`], and it is left as it is until the broker next writes the topic's
/// id (when a client first asks for the topic's metadata).
fn warn_inconsistent_topic_ids(logs: &BTreeMap<(String, i32), PartitionLog>, report: &mut ManagerReport) {
    let mut by_topic: BTreeMap<&str, Vec<(i32, super::checkpoint::TopicId)>> = BTreeMap::new();
    for ((t, p), log) in logs {
        if let Some(id) = log.topic_id() {
            by_topic.entry(t.as_str()).or_default().push((*p, id));
        }
    }
    for (topic, ids) in by_topic {
        let count = |id: super::checkpoint::TopicId| ids.iter().filter(|(_, i)| *i == id).count();
        // `ids` is in partition order: max_by_key keeps the last maximum, so scan in reverse.
        let Some(&(_, topic_id)) = ids.iter().rev().max_by_key(|(_, id)| count(*id)) else { continue };
        for &(p, id) in ids.iter().filter(|(_, id)| *id != topic_id) {
            let path = logs[&(topic.to_string(), p)].dir().join(checkpoint::PARTITION_METADATA);
            let action = format!(
                "records still served as {topic}-{p}; the file is rewritten with topic id {topic_id} when the topic's id is next written (Kafka would refuse the partition: InconsistentTopicIdException)"
            );
            let error = format!(
                "topic id {id} differs from topic id {topic_id} of the other partitions of {topic} ({} of {})",
                count(topic_id),
                ids.len()
            );
            tracing::warn!("{}: {error}; {action}", path.display());
            report.damaged.push(DamagedFile { path, error, action });
        }
    }
}

/// A partition whose `partition.metadata` was damaged (its topic id unknown) takes the topic id of
/// another partition of the same topic, and its file is rewritten: every partition of a topic has
/// the same id (KIP-516), so this restores exactly what was lost. When no partition of the topic
/// has an id, it stays unknown and the broker assigns a new one when a client first asks for
/// the topic's metadata (see the `partition.metadata` case in the README's durability section).
fn adopt_sibling_topic_ids(
    logs: &mut BTreeMap<(String, i32), PartitionLog>,
    report: &mut ManagerReport,
) -> Result<(), LogError> {
    let damaged: Vec<(String, i32)> = report
        .partitions
        .iter()
        .filter(|(_, load)| load.damaged.iter().any(|d| d.path.ends_with(checkpoint::PARTITION_METADATA)))
        .map(|(k, _)| k.clone())
        .collect();
    for key in damaged {
        let sibling = logs.iter().filter(|((t, _), _)| *t == key.0).find_map(|(k, l)| l.topic_id().map(|id| (k.1, id)));
        let Some(log) = logs.get_mut(&key) else { continue };
        match sibling {
            Some((partition, id)) => {
                log.set_topic_id(id)?;
                let path = log.dir().join(checkpoint::PARTITION_METADATA);
                tracing::warn!("{}: rewritten with topic id {id}, taken from partition {partition} of the same topic", path.display());
                if let Some(d) = report.damaged.iter_mut().rev().find(|d| d.path == path) {
                    d.action = format!("topic id {id} taken from partition {}-{partition} and written back", key.0);
                }
            }
            None => tracing::warn!(
                "{}-{}: no partition of the topic has a readable topic id: a new one is assigned when a client first asks for the topic's metadata (clients holding the old id get UNKNOWN_TOPIC_ID and refresh their metadata)",
                key.0,
                key.1
            ),
        }
    }
    Ok(())
}

/// Kafka's `Topic.validate`: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic == "." || topic == ".." {
        return Err(format!("invalid topic name {topic:?}"));
    }
    if topic.len() > 249 {
        return Err(format!("topic name is {} characters, the limit is 249", topic.len()));
    }
    if let Some(c) = topic.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("topic name {topic:?} contains {c:?}: only [a-zA-Z0-9._-] are legal"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_writer_per_log_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        let err = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap_err();
        assert!(err.to_string().contains("in use by another process"), "{err}");
        // Readers (log dump) are not locked out.
        assert!(LogManager::open(tmp.path(), LogConfig::default(), |_| None, true).is_ok());
        first.shutdown().unwrap();
        let (again, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        drop(again);
        assert!(tmp.path().join(LOCK_FILE).is_file());
    }
}
