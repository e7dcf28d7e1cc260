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
//!
//! ## Sharing and lock order
//!
//! A `LogManager` is shared by the broker's threads (`&self` methods, `Send + Sync`); each
//! partition is a [`Partition`], Kafka's unit of locking (its `UnifiedLog` lock), behind an
//! `Arc`. The locks, in the order they may be taken (never the reverse):
//!
//! 1. the **creation lock** ([`LogManager::lock_topic_creation`]): held while a partition's
//!    directory and first segment are made and while a topic id is assigned, so creators never
//!    race; appends, fetches and lookups never take it;
//! 2. the **producer id lock** (InitProducerId's block of ids; a new block reads every
//!    partition's largest producer id);
//! 3. the **map lock**: a read-mostly `RwLock` over the topic -> partition -> `Arc<Partition>`
//!    map, held only to look a partition up, list partitions or insert a created one, NEVER
//!    across I/O (creation opens its files before it takes the map lock for the insert);
//! 4. **one partition's lock** ([`Partition::log`] / [`Partition::log_mut`]): appends (offset
//!    assignment and the write; validation runs before it, with no lock), rolls, a fetch's index
//!    lookup, the scheduler's flush bookkeeping (never its fsyncs). Nothing that holds a
//!    partition's lock takes the map lock, another partition's lock, or any lock above;
//! 5. the checkpoint writers' lock, taken alone (the offsets are read from the partitions'
//!    atomics, without their locks).
//!
//! In practice the map lock is released before a partition's lock is taken: lookups return an
//! `Arc<Partition>`.
//!
//! ## Background work
//!
//! With a scheduler ([`scheduler`](super::scheduler), Kafka's `kafka-scheduler`, started by the
//! broker), the fsync of a rolled segment, the `flush.messages` / `flush.ms` flushes and the
//! periodic writes of both offset checkpoints run on its thread, never inline on a request; the
//! fsyncs run outside the partition's lock. Without one (offline users: `fetchbench log` tools,
//! the bench's backlog writer, tests) a roll and `flush.*` fsync inline, as a lone
//! [`PartitionLog`] does, and the checkpoints are written at open and at [`LogManager::shutdown`],
//! which also fsyncs whatever a scheduler had not flushed yet.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use super::checkpoint::{
    self, read_offset_checkpoint, write_offset_checkpoint, OffsetCheckpoint, TopicId, CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT,
};
use super::config::LogConfig;
use super::error::LogError;
use super::partition::{parse_topic_partition, DamagedFile, LoadReport, OpenOptions, Partition, PartitionLog, Wakeup};
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

/// The partitions of a log directory, by topic then partition number.
type PartitionMap = BTreeMap<String, BTreeMap<i32, Arc<Partition>>>;

/// Every partition log of one log directory, shareable between threads (`&self` methods; see
/// the module docs for its locks and their order).
#[derive(Debug)]
pub struct LogManager {
    dir: PathBuf,
    config: LogConfig,
    read_only: bool,
    /// The map lock: read-mostly, held only to look up or list partitions, never across I/O.
    partitions: RwLock<PartitionMap>,
    /// The creation lock: held across a partition's creation (its directory and first segment)
    /// and a topic id's assignment, so that two creators never race; taken before the map lock.
    creation: Mutex<()>,
    producer_ids: Mutex<ProducerIdManager>,
    /// Serialises the writers of the offset checkpoint files (the scheduler, shutdown).
    checkpoints: Mutex<()>,
    /// Set by [`LogManager::shutdown`]: nothing is created any more.
    closed: AtomicBool,
    /// The scheduler's wake-up once background flushing is on ([`Self::enable_background_flush`]).
    background: OnceLock<Wakeup>,
    /// The exclusive `flock` on `<dir>/.lock` (Kafka's `LogManager.lockLogDirs`), held until
    /// [`Self::shutdown`] or the manager's drop; `None` read-only.
    lock: Mutex<Option<nix::fcntl::Flock<fs::File>>>,
}

/// The creation lock of a log directory, held ([`LogManager::lock_topic_creation`]): what a
/// caller that must check and create atomically (CreateTopics: "does the topic exist?" then
/// create it) does while holding it. Lock order: this, then the map lock, then a partition's.
#[derive(Debug)]
pub struct TopicCreation<'a> {
    manager: &'a LogManager,
    _guard: MutexGuard<'a, ()>,
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
    /// A writable open takes an exclusive lock on `<dir>/.lock` until [`Self::shutdown`] (or
    /// the manager's drop).
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
        let mut partitions = PartitionMap::new();
        for ((topic, partition), log) in logs {
            partitions.entry(topic).or_default().insert(partition, Arc::new(Partition::new(log)));
        }
        let mgr = LogManager {
            dir: dir.to_path_buf(),
            config,
            read_only,
            partitions: RwLock::new(partitions),
            creation: Mutex::new(()),
            producer_ids: Mutex::new(producer_ids),
            checkpoints: Mutex::new(()),
            closed: AtomicBool::new(false),
            background: OnceLock::new(),
            lock: Mutex::new(lock),
        };
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
    /// Whether the directory was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// Whether [`Self::shutdown`] has run (or begun).
    pub fn is_shut_down(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn map(&self) -> RwLockReadGuard<'_, PartitionMap> {
        // The map is changed in single inserts: a poisoned lock still holds a valid map.
        self.partitions.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A partition (the map lock is held only for the lookup).
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.map().get(topic)?.get(&partition).cloned()
    }
    /// Every partition, by topic then partition number (a snapshot: the map lock is released).
    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.map().values().flat_map(|ps| ps.values().cloned()).collect()
    }
    /// The partitions of `topic`, by partition number (empty when it does not exist).
    pub fn topic_partitions(&self, topic: &str) -> Vec<Arc<Partition>> {
        self.map().get(topic).map(|ps| ps.values().cloned().collect()).unwrap_or_default()
    }
    /// The partition numbers of `topic`, ascending (empty when it does not exist).
    pub fn partition_numbers(&self, topic: &str) -> Vec<i32> {
        self.map().get(topic).map(|ps| ps.keys().copied().collect()).unwrap_or_default()
    }
    /// Whether any partition of `topic` exists.
    pub fn topic_exists(&self, topic: &str) -> bool {
        self.map().get(topic).is_some_and(|ps| !ps.is_empty())
    }
    /// The names of the topics, sorted.
    pub fn topics(&self) -> Vec<String> {
        self.map().iter().filter(|(_, ps)| !ps.is_empty()).map(|(t, _)| t.clone()).collect()
    }
    /// The topic one of whose partitions has topic id `id` in its `partition.metadata`
    /// (KIP-516), looked up under the map lock (each partition's id is read without its lock).
    pub fn topic_with_id(&self, id: TopicId) -> Option<String> {
        let map = self.map();
        map.iter().find(|(_, ps)| ps.values().any(|p| p.topic_id() == Some(id))).map(|(t, _)| t.clone())
    }
    /// Number of partitions.
    pub fn partition_count(&self) -> usize {
        self.map().values().map(BTreeMap::len).sum()
    }

    /// Takes the creation lock (see [`TopicCreation`]): partitions are created, and topic ids
    /// assigned, by one caller at a time. Readers, appends and fetches do not take it.
    pub fn lock_topic_creation(&self) -> TopicCreation<'_> {
        TopicCreation { manager: self, _guard: self.creation.lock().unwrap_or_else(PoisonError::into_inner) }
    }

    /// Returns the partition `topic`-`partition`, creating its directory and first segment with
    /// `config` (or the broker defaults) when it does not exist (under the creation lock; see
    /// [`TopicCreation::get_or_create`]).
    ///
    /// Errors: [`LogError::Layout`] for an invalid topic name; [`LogError::Closed`] after
    /// [`Self::shutdown`]; [`LogError::Io`].
    pub fn get_or_create(
        &self,
        topic: &str,
        partition: i32,
        config: Option<LogConfig>,
    ) -> Result<Arc<Partition>, LogError> {
        if let Some(p) = self.partition(topic, partition) {
            return Ok(p);
        }
        self.lock_topic_creation().get_or_create(topic, partition, config)
    }

    /// Returns the topic id of `topic` (KIP-516): the one in any partition's `partition.metadata`,
    /// else a new random one, written to every partition of the topic that lacks it (a partition
    /// directory open read-only is left as it is). When every partition already has it, no lock
    /// but the map's is taken; otherwise the creation lock (so that two callers agree on one id).
    ///
    /// Errors: [`LogError::Io`] writing `partition.metadata`.
    pub fn ensure_topic_id(&self, topic: &str) -> Result<TopicId, LogError> {
        let partitions = self.topic_partitions(topic);
        if let Some(id) = partitions.first().and_then(|p| p.topic_id()) {
            if !id.is_zero() && partitions.iter().all(|p| p.topic_id() == Some(id)) {
                return Ok(id);
            }
        }
        self.lock_topic_creation().ensure_topic_id(topic)
    }

    /// A new producer id for an idempotent producer (InitProducerId without a transactional id),
    /// unique across restarts: taken from a block of 1000 persisted in `producer-id-block` before
    /// use, each block starting above the largest producer id in any partition's producer state
    /// (Kafka's `ProducerIdManager`; see [`super::producer_id`]). Takes the producer id lock, and
    /// for a new block each partition's lock in turn (one at a time, for reading).
    ///
    /// Errors: [`LogError::InvalidAppend`] when the directory is open read-only;
    /// [`LogError::Closed`] after [`Self::shutdown`]; the errors of
    /// [`ProducerIdManager::generate`].
    pub fn generate_producer_id(&self) -> Result<i64, LogError> {
        if self.read_only {
            return Err(LogError::InvalidAppend {
                path: self.dir.clone(),
                reason: "log directory is open read-only: no producer ids".into(),
            });
        }
        let mut ids = self.producer_ids.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_shut_down() {
            return Err(LogError::Closed { partition: self.dir.display().to_string() });
        }
        ids.generate(|| self.partitions().iter().filter_map(|p| p.log().max_producer_id()).max())
    }

    /// Writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` atomically,
    /// from the partitions' lock-free offsets (no partition lock is taken).
    pub fn checkpoint(&self) -> Result<(), LogError> {
        self.checkpoint_recovery_points()?;
        self.checkpoint_log_start_offsets()
    }

    /// Writes `recovery-point-offset-checkpoint` (Kafka's `checkpointLogRecoveryOffsets`, every
    /// `log.flush.offset.checkpoint.interval.ms` on the scheduler).
    pub fn checkpoint_recovery_points(&self) -> Result<(), LogError> {
        self.write_checkpoint(RECOVERY_POINT_OFFSET_CHECKPOINT, Partition::recovery_point)
    }

    /// Writes `log-start-offset-checkpoint` (Kafka's `checkpointLogStartOffsets`, every
    /// `log.flush.start.offset.checkpoint.interval.ms` on the scheduler).
    pub fn checkpoint_log_start_offsets(&self) -> Result<(), LogError> {
        self.write_checkpoint(LOG_START_OFFSET_CHECKPOINT, Partition::log_start_offset)
    }

    fn write_checkpoint(&self, file: &str, offset: impl Fn(&Partition) -> i64) -> Result<(), LogError> {
        if self.read_only {
            return Ok(());
        }
        let _writer = self.checkpoints.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = OffsetCheckpoint::new();
        for p in self.partitions() {
            entries.insert((p.topic().to_string(), p.partition()), offset(&p));
        }
        write_offset_checkpoint(&self.dir.join(file), &entries)
    }

    /// Leaves every partition's fsyncs (of rolled segments, `flush.messages`, `flush.ms`) to a
    /// background scheduler that `wakeup` wakes, now and for the partitions created later
    /// ([`PartitionLog::set_background_flush`]). The scheduler ([`scheduler`](super::scheduler))
    /// calls it when it starts, then runs [`Self::flush_dirty_logs`]. Once: later calls are
    /// ignored. Without it (offline users: tools, tests) fsyncs run inline as before.
    pub(crate) fn enable_background_flush(&self, wakeup: Wakeup) {
        let _creation = self.lock_topic_creation();
        if self.background.set(wakeup.clone()).is_err() {
            return;
        }
        for p in self.partitions() {
            p.enable_background_flush(wakeup.clone());
        }
    }

    /// The scheduler's flush pass (Kafka's `flushDirtyLogs` and the flushes that rolls schedule):
    /// every partition with background work at `now_ms` (judged without its lock, see
    /// [`Partition::flush_in_background`]) is flushed, its fsyncs outside its lock. A failing
    /// partition is logged and tried again at the next pass. Returns how many partitions were
    /// flushed and whether a flush is still requested (work arrived meanwhile: the scheduler
    /// goes on at once).
    pub(crate) fn flush_dirty_logs(&self, now_ms: i64) -> (usize, bool) {
        let mut flushed = 0;
        let mut still_requested = false;
        for p in self.partitions() {
            if !p.background_flush_due(now_ms) {
                continue;
            }
            match p.flush_in_background(now_ms) {
                Ok(true) => flushed += 1,
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    "{}-{}: background flush failed: {e}; the recovery point stays at {}, tried again at the next pass",
                    p.topic(),
                    p.partition(),
                    p.recovery_point()
                ),
            }
            still_requested |= p.flush_requested();
        }
        (flushed, still_requested)
    }

    /// Clean shutdown (Kafka's `LogManager.shutdown`), with others possibly still holding the
    /// manager or its partitions: from now on nothing is created; every partition is closed in
    /// turn, each after the appends in flight on it (it waits for the partition's lock): logs
    /// fsynced (including rolled segments whose fsync the scheduler had not run yet), segments
    /// closed, and later appends refused with [`LogError::Closed`]. Then both checkpoints are
    /// written, then the `.kafka_cleanshutdown` marker, so the next start skips recovery; the
    /// partitions leave the map and the directory's lock is released. Stop the scheduler first
    /// (it would find nothing more to do). A second call does nothing.
    ///
    /// Checkpoints that cannot be written (a full disk) are a warn, not an error: the files in
    /// place keep older values, which are safe (a lower recovery point only means more recovery,
    /// after an unclean start; a lower log start offset is raised again by the next
    /// `DeleteRecords` or retention), and the logs are flushed, so the marker is still written.
    ///
    /// Errors: a log that cannot be flushed or closed, or the marker that cannot be written.
    pub fn shutdown(&self) -> Result<(), LogError> {
        {
            let _creation = self.lock_topic_creation();
            if self.closed.swap(true, Ordering::SeqCst) || self.read_only {
                return Ok(());
            }
        }
        for p in self.partitions() {
            p.close()?;
        }
        if let Err(e) = self.checkpoint() {
            tracing::warn!(dir = %self.dir.display(), "shutdown: the offset checkpoints keep their older values: {e}");
        }
        checkpoint::write_atomically(&self.dir.join(CLEAN_SHUTDOWN_MARKER), b"")?;
        self.partitions.write().unwrap_or_else(PoisonError::into_inner).clear();
        self.lock.lock().unwrap_or_else(PoisonError::into_inner).take();
        Ok(())
    }
}

impl TopicCreation<'_> {
    /// [`LogManager::get_or_create`] under the creation lock held: when the partition does not
    /// exist its directory and first segment are made with no map lock held, then it is
    /// inserted (the map lock held for the insert only).
    ///
    /// Errors: as [`LogManager::get_or_create`].
    pub fn get_or_create(
        &self,
        topic: &str,
        partition: i32,
        config: Option<LogConfig>,
    ) -> Result<Arc<Partition>, LogError> {
        let mgr = self.manager;
        if let Some(p) = mgr.partition(topic, partition) {
            return Ok(p);
        }
        if mgr.is_shut_down() {
            return Err(LogError::Closed { partition: format!("{topic}-{partition}") });
        }
        validate_topic_name(topic).map_err(|reason| LogError::Layout { path: mgr.dir.join(topic), reason })?;
        if partition < 0 {
            return Err(LogError::Layout { path: mgr.dir.join(topic), reason: "negative partition".into() });
        }
        let path = mgr.dir.join(format!("{topic}-{partition}"));
        let opts = OpenOptions { had_clean_shutdown: true, read_only: mgr.read_only, ..Default::default() };
        let (log, _) = PartitionLog::open(&path, config.unwrap_or_else(|| mgr.config.clone()), opts)?;
        let created = Arc::new(Partition::new(log));
        if let Some(wakeup) = mgr.background.get() {
            created.enable_background_flush(wakeup.clone());
        }
        let mut map = mgr.partitions.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(topic.to_string()).or_default().insert(partition, Arc::clone(&created));
        Ok(created)
    }

    /// [`LogManager::ensure_topic_id`] under the creation lock held: the id found in any
    /// partition (else a new one) is written to each partition lacking it, under that
    /// partition's lock.
    ///
    /// Errors: as [`LogManager::ensure_topic_id`].
    pub fn ensure_topic_id(&self, topic: &str) -> Result<TopicId, LogError> {
        let partitions = self.manager.topic_partitions(topic);
        let existing = partitions.iter().find_map(|p| p.topic_id());
        let id = match existing {
            Some(id) if !id.is_zero() => id,
            _ => random_topic_id(),
        };
        for p in &partitions {
            if p.topic_id() != Some(id) {
                let mut log = p.log_mut();
                if !log.is_read_only() {
                    log.set_topic_id(id)?;
                }
            }
        }
        Ok(id)
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

    fn batch(n: usize) -> Vec<u8> {
        let mut b = crate::log::batch::BatchBuilder::new(0, crate::log::batch::Compression::None);
        for i in 0..n {
            b.append(i as i64, Some(b"k"), Some(b"v"), &[]);
        }
        b.build().unwrap()
    }

    #[test]
    fn shutdown_waits_for_the_append_in_flight_then_refuses_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        let p = mgr.get_or_create("t", 0, None).unwrap();
        p.append(&batch(2), 0).unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            // An append in flight: its partition's lock taken before the shutdown begins.
            let in_flight = Arc::clone(&p);
            let appender = s.spawn(move || {
                let mut log = in_flight.log_mut();
                held_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                log.append(&batch(3), 0).unwrap()
            });
            held_rx.recv().unwrap();
            let shutdown = s.spawn(|| mgr.shutdown());
            go_tx.send(()).unwrap();
            assert_eq!(appender.join().unwrap().first_offset, 2);
            shutdown.join().unwrap().unwrap();
        });
        assert!(mgr.is_shut_down());
        assert!(matches!(p.append(&batch(1), 0), Err(LogError::Closed { .. })), "appends after the close");
        assert!(matches!(mgr.get_or_create("u", 0, None), Err(LogError::Closed { .. })), "no creation after");
        assert!(mgr.partition("t", 0).is_none(), "the partitions left the map");
        mgr.shutdown().unwrap();
        // The directory's lock is released at shutdown, while the manager still lives.
        let (again, report) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        assert!(report.had_clean_shutdown);
        assert_eq!(again.partition("t", 0).unwrap().log_end_offset(), 5, "the in-flight append is kept");
        drop(mgr);
    }

    #[test]
    fn concurrent_creators_agree_on_one_partition_and_one_topic_id() {
        let tmp = tempfile::tempdir().unwrap();
        let (mgr, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
        let results: Vec<(usize, TopicId)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let p = mgr.get_or_create("c", 0, None).unwrap();
                        (Arc::as_ptr(&p) as usize, mgr.ensure_topic_id("c").unwrap())
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
        assert_eq!(mgr.partition_count(), 1);
    }
}
