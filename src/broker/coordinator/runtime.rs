//! [`GroupCoordinator`]: the broker's groups and committed offsets, sharded by
//! `__consumer_offsets` partition ([`partition_for`]) as Kafka 4's `GroupCoordinatorShard`s are:
//! each shard has its own lock, so operations on groups of different shards never contend.
//!
//! ```text
//! io thread ── partition_for(group) ──> shard N
//!   Heartbeat, OffsetFetch, DescribeGroups:  shard lock ─> read / Group::heartbeat ─> unlock
//!   JoinGroup, SyncGroup, LeaveGroup, OffsetCommit, TxnOffsetCommit, DeleteGroups, timer ticks,
//!   offset expiry (the writers):
//!     write-order mutex ─> shard lock ─> change the group, take the records to write ─> unlock
//!                       ─> OffsetsStorage::append / append_transactional (no shard lock held)
//!                       ─> shard lock ─> apply the append's result ─> unlock
//!     release it; wake the changed group's waiters (wakeup::GroupWaiters); tell the timer of an
//!     earlier deadline (wakeup::TimerWakeup); answer
//!   a waiting JoinGroup / SyncGroup: begin_join / begin_sync answer now or give a Parked
//!     ticket; the handler parks it in the broker's purgatory (delayed_join.rs), holding no
//!     thread; ITS group's change (GroupWaiters::group_changed -> check_and_complete of that
//!     group's key) tries it on an io thread: poll_parked looks for its answer under the shard
//!     lock; at its deadline or when its client went away, give_up_parked
//! timer thread ── shard by shard, one lock at a time: due groups tick (as writers); every
//!   offsets.retention.check.interval.ms offsets expire; sleeps until the earliest deadline
//! marker writer ── (after a COMMIT / ABORT marker is in __consumer_offsets-N, log locks
//!   released) complete_txn_offsets(N, producer, commit): write-order mutex ─> shard lock ─>
//!   the producer's pending offsets committed or dropped ─> unlock
//! start-up ── load_records(records of __consumer_offsets-N): each record into its group's
//!   shard ... finish_loading()
//! ```
//!
//! ## Writes and their order
//!
//! A writer holds its shard's write-order mutex from computing its change to applying its
//! append's result, so the shard's writes reach the log in the order their changes were made
//! (replaying the log gives the state in memory) and each answer waits for ITS records. The
//! shard lock is held only to compute and to apply: heartbeats, reads, the waiters and the
//! writers of other shards never wait for an append. Kafka 4 runs one event per shard at a time,
//! append included; here only a shard's writers are serialized.
//!
//! What the result of an append does (Kafka's `GroupMetadataManager.storeOffsets` /
//! `storeGroup` callbacks):
//! - committed offsets are cached only once written: a failed append is answered to that
//!   request with its error and nothing claims the commit (OffsetFetch never sees an offset
//!   that is not in the log); each remembers the offset of its batch
//!   ([`CommittedOffset::record_offset`]);
//! - transactional offsets (TxnOffsetCommit) are one transactional batch of the producer; once
//!   written they are PENDING by producer, group and partition (Kafka's
//!   `pendingTransactionalOffsetCommits`): OffsetFetch does not see them, and answers
//!   UNSTABLE_OFFSET_COMMIT for their partitions under `require_stable` (KIP-447), until
//!   [`GroupCoordinator::complete_txn_offsets`] for the producer's marker commits them (over a
//!   committed offset appended before them only) or drops them; a failed append leaves nothing
//!   pending. A tombstone (DeleteGroups, expiry) removes the pending offsets of its partition
//!   too; DeleteGroups writes tombstones for the pending-only partitions, and expiry keeps an
//!   offset with a pending one and a group with pending ones (Kafka 4's
//!   `OffsetMetadataManager`);
//! - DeleteGroups and offset expiry remove the group / offsets only once their tombstones are
//!   written;
//! - the leader's assignment is applied by the state machine when computed (the group is
//!   Stable), but the answers it makes are held (the group is "storing": its waiters do not take
//!   them) until the append's result; a failure rewrites them to the error and rebalances
//!   ([`Group::store_failed`]), as when the store happened under the lock;
//! - the metadata written after a join, a leave or a timer is best effort: a failure is logged.
//!
//! ## Lock order
//!
//! - a shard lock -> nothing (a leaf: no other lock is taken while it is held, and no two shard
//!   locks are held at once; the timer walks the shards one at a time);
//! - a shard's write-order mutex -> that shard's lock (briefly, to compute and to apply), and
//!   -> the log's locks inside [`OffsetsStorage::append`] / [`OffsetsStorage::append_transactional`]
//!   (the log map lock, then the partition lock), then the long-poll wakeup; never another
//!   shard's write-order mutex;
//! - [`GroupCoordinator::complete_txn_offsets`] takes the shard's write-order mutex, then its
//!   lock: its caller (the transaction coordinator's marker writer) must hold NO log lock (call
//!   it after `Partition::append_txn_marker` has returned) and no lock that a coordinator writer
//!   may wait for while holding its write-order mutex (a writer only waits for the log's locks
//!   and the leaves below, so the transaction coordinator's own locks are fine as long as no
//!   group writer takes them);
//! - the wakeup registries and the timer's mutex ([`super::wakeup`]) are leaves, taken with no
//!   shard lock held.
//!
//! Nothing that holds a log lock takes a coordinator lock.
//!
//! ## Records
//!
//! Persistence follows Kafka's `GroupMetadataManager` (Kafka 2.x-3.x) / `GroupCoordinatorShard`
//! (4.x) record formats ([`crate::protocol::consumer_offsets`]): an offset commit is an
//! `OffsetCommitKey` v1 with an `OffsetCommitValue` v3 (v1 when the commit carries an expire
//! timestamp), group metadata a `GroupMetadataKey` v2 with a `GroupMetadataValue` v3, written when
//! the leader's assignment is accepted, when the group becomes Empty, and when a static member
//! is replaced; deletions and expired offsets are tombstones. The write happens before the
//! answer is released, so an acknowledged commit is in the log (page cache) when the client
//! hears of it. A TxnOffsetCommit's records are the same, in a transactional batch of the
//! producer. At start-up every `__consumer_offsets` partition is replayed in offset order,
//! the last record of a key winning (transactional ones resolved by their markers, those of an
//! open transaction loaded pending: `replay::TxnOffsets`), and requests get
//! COORDINATOR_LOAD_IN_PROGRESS until the replay is done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;

use super::replay::LoadedRecord;

use super::group::{
    Completion, Group, GroupConfig, GroupState, JoinRequest, JoinResult, Member, MemberRef, Reply, SyncRequest,
    SyncResult, Ticket,
};
use super::wakeup::{GroupWaiters, TimerWakeup};
use crate::broker::errors;
use crate::protocol::consumer_offsets::{
    decode_record, partition_for, GroupMetadataKey, GroupMetadataValue, MemberMetadata, OffsetCommitKey,
    OffsetCommitValue, OffsetsRecord, DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
};

/// Coordinator configuration, with Kafka's names and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct CoordinatorConfig {
    /// Group limits and the initial rebalance delay.
    pub group: GroupConfig,
    /// `offsets.topic.num.partitions` (50).
    pub offsets_topic_num_partitions: i32,
    /// `offsets.retention.minutes` (10080 = 7 days), in ms: how long the offsets of an Empty
    /// group (or of a group without group management) are kept after it became Empty (or after
    /// the commit) (KIP-211).
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000).
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes` (4096): longer commit metadata gets OFFSET_METADATA_TOO_LARGE.
    pub offset_metadata_max_bytes: usize,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            group: GroupConfig::default(),
            offsets_topic_num_partitions: DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
            offsets_retention_ms: 10_080 * 60 * 1000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
        }
    }
}

/// A committed offset (Kafka's `OffsetAndMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset the group will consume.
    pub offset: i64,
    /// The leader epoch of the record before `offset` (-1 when unknown; KIP-320).
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: String,
    /// When it was committed (ms).
    pub commit_timestamp: i64,
    /// An explicit expiry (OffsetCommit v2-v4 `retention_time_ms`, or stored v1 values).
    pub expire_timestamp: Option<i64>,
    /// The offset of the `__consumer_offsets` batch that holds it (-1 before it is written;
    /// Kafka 4's `OffsetAndMetadata.recordOffset`, 3.x's `appendedBatchOffset`): a
    /// transactional commit completed by its marker replaces a committed offset only if it was
    /// appended after it.
    pub record_offset: i64,
}

/// Where the coordinator's records go: `__consumer_offsets` in the broker's log.
pub trait OffsetsStorage {
    /// Appends `records` (key, value; `None` = tombstone) as one batch to
    /// `__consumer_offsets-<partition>`, creating the topic if it does not exist yet, and
    /// returns once the batch is in the log (page cache).
    ///
    /// Returns the offset of the batch (its base offset).
    ///
    /// Errors: a Kafka error code for the caller to answer with (Kafka maps storage failures to
    /// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or UNKNOWN_SERVER_ERROR) and a message.
    fn append(&self, partition: i32, records: Vec<(Vec<u8>, Option<Vec<u8>>)>, now: i64) -> Result<i64, (i16, String)>;

    /// Appends `records` as one TRANSACTIONAL batch of `producer_id` / `producer_epoch` (a
    /// TxnOffsetCommit; Kafka's `GroupMetadataManager.storeOffsets` with a producer id): the
    /// batch opens (or continues) the producer's transaction in the partition until its
    /// COMMIT / ABORT marker. Returns the offset of the batch.
    ///
    /// Errors: as [`Self::append`]; a producer epoch below the partition's
    /// (INVALID_PRODUCER_EPOCH) is answered as it is.
    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now: i64,
    ) -> Result<i64, (i16, String)>;
}

/// An OffsetCommit partition: (topic, partition, offset, leader epoch, metadata, commit
/// timestamp or -1 for now).
pub(crate) type OffsetCommitEntry = (String, i32, i64, i32, Option<String>, i64);

/// One group of ListGroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOverview {
    /// Group id.
    pub group_id: String,
    /// Protocol type (`consumer`; `""` for a group that only stores offsets).
    pub protocol_type: String,
    /// State name.
    pub state: &'static str,
}

/// One member of DescribeGroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// Metadata for the chosen protocol (empty unless Stable / CompletingRebalance).
    pub metadata: Bytes,
    /// Assignment (empty unless Stable).
    pub assignment: Bytes,
}

/// A group of DescribeGroups (Kafka's `GroupSummary`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// Error code (0, or COORDINATOR_LOAD_IN_PROGRESS ...).
    pub error: i16,
    /// State name (`Dead` for an unknown group, as Kafka answers).
    pub state: &'static str,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol, when Stable (Kafka's `protocol_data`).
    pub protocol: String,
    /// Generation id (not in the Kafka response; for `fetchbench groups`).
    pub generation_id: i32,
    /// The members.
    pub members: Vec<MemberDescription>,
}

/// One `__consumer_offsets` partition's share of the coordinator (Kafka 4's
/// `GroupCoordinatorShard`): its groups and committed offsets behind its lock, and the
/// write-order mutex its writers hold from computing a change to applying its append's result.
#[derive(Debug)]
struct Shard {
    /// The `__consumer_offsets` partition.
    partition: i32,
    state: Mutex<ShardState>,
    write_order: Mutex<()>,
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The state of one shard.
#[derive(Debug, Default)]
struct ShardState {
    groups: BTreeMap<String, Group>,
    /// The committed offsets that are in the log, by group.
    offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    /// Transactional offset commits in the log whose transaction has no marker yet, by producer
    /// id, then group (Kafka 4's `OffsetMetadataManager.pendingTransactionalOffsets`, 3.x's
    /// `GroupMetadata.pendingTransactionalOffsetCommits`): invisible to OffsetFetch until
    /// [`GroupCoordinator::complete_txn_offsets`].
    pending_txn: BTreeMap<i64, PendingOffsets>,
    /// Markers completed while the shard was loading (producer id, commit), applied when the
    /// load ends: the transaction coordinator's start-up may write a prepared transaction's
    /// marker while this replay runs, after it read the partition.
    completed_while_loading: Vec<(i64, bool)>,
    /// The replay of `__consumer_offsets` has not ended yet.
    loading: bool,
    /// Groups whose records are being appended: the answers they made wait for the append's
    /// result (which may rewrite them).
    storing: BTreeSet<String>,
    /// Rate limit of the "storing the assignment failed" warn, per group.
    store_warns: WarnLimiter,
}

/// One producer's pending transactional offsets: group -> (topic, partition) -> offset.
type PendingOffsets = BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>;

impl ShardState {
    /// Commits (over committed offsets appended before them only) or drops the producer's
    /// pending offsets; returns how many were committed.
    fn complete_txn(&mut self, producer_id: i64, commit: bool) -> usize {
        let Some(groups) = self.pending_txn.remove(&producer_id) else { return 0 };
        let mut committed = 0;
        if commit {
            for (group_id, offsets) in groups {
                for (tp, c) in offsets {
                    let current = self.offsets.get(&group_id).and_then(|m| m.get(&tp));
                    // Kafka's `olderThan`: only over an offset appended before it.
                    if current.is_none_or(|old| old.record_offset < c.record_offset) {
                        self.offsets.entry(group_id.clone()).or_default().insert(tp, c);
                        committed += 1;
                    }
                }
            }
        }
        committed
    }

    /// Whether a producer has a pending transactional offset for the group's partition (Kafka's
    /// `hasPendingTransactionalOffsets`).
    fn has_pending_txn(&self, group_id: &str, tp: &(String, i32)) -> bool {
        self.pending_txn.values().any(|g| g.get(group_id).is_some_and(|m| m.contains_key(tp)))
    }

    /// Whether the group has pending transactional offsets (Kafka's `openTransactionsByGroup`).
    fn group_has_pending_txn(&self, group_id: &str) -> bool {
        self.pending_txn.values().any(|g| g.get(group_id).is_some_and(|m| !m.is_empty()))
    }

    /// A tombstone of the group's partition was written: the committed offset and every
    /// producer's pending one go (Kafka 4's `OffsetMetadataManager.replay` of a tombstone).
    fn remove_offset(&mut self, group_id: &str, tp: &(String, i32)) {
        if let Some(m) = self.offsets.get_mut(group_id) {
            m.remove(tp);
        }
        self.remove_pending(group_id, |k| k == tp);
    }

    /// Drops the pending transactional offsets of `group_id` whose partition `matches`.
    fn remove_pending(&mut self, group_id: &str, matches: impl Fn(&(String, i32)) -> bool) {
        for groups in self.pending_txn.values_mut() {
            if let Some(m) = groups.get_mut(group_id) {
                m.retain(|k, _| !matches(k));
                if m.is_empty() {
                    groups.remove(group_id);
                }
            }
        }
        self.pending_txn.retain(|_, groups| !groups.is_empty());
    }
}

/// A record of `__consumer_offsets`: key, value (`None`: a tombstone).
type Record = (Vec<u8>, Option<Vec<u8>>);

/// The result of an append: the batch's offset, or a Kafka error code and a message.
type StoreResult = Result<i64, (i16, String)>;

/// One batch of records a writer appends for one group, and what its result does.
#[derive(Debug)]
struct Write {
    group_id: String,
    /// The group's [`Group::answers_made`] before the change (`None`: there was no group).
    answers_before: Option<u64>,
    records: Vec<Record>,
    /// A transactional batch of (producer id, producer epoch).
    txn: Option<(i64, i16)>,
    effect: Effect,
}

/// What a write's result does to the shard (see the module documentation).
#[derive(Debug)]
enum Effect {
    /// The group's metadata after a join, a leave or a timer: a failure is logged.
    Group,
    /// The leader's assignment: a failure fails the answers it made and rebalances.
    Assignment,
    /// Committed offsets, cached once written.
    Commit(Vec<((String, i32), CommittedOffset)>),
    /// A producer's transactional offsets, pending once written (until its marker).
    TxnCommit { producer_id: i64, offsets: Vec<((String, i32), CommittedOffset)> },
    /// DeleteGroups: the group and its offsets go once their tombstones are written.
    Delete,
    /// Expired offsets (and the group, when it goes too) go once their tombstones are written.
    Expire { expired: Vec<(String, i32)>, delete_group: bool },
}

/// What a change asks for once the shard lock is released: the groups whose waiters to wake,
/// the earliest deadline it armed.
#[derive(Debug, Default)]
struct Wakes {
    groups: Vec<String>,
    deadline: Option<i64>,
}

impl Wakes {
    /// Notes group `id` after a change: its waiters are woken if it made answers since
    /// `answers_before` (`None`: the group is new, it had made none) or is gone; the timer hears
    /// of its next deadline.
    fn note(&mut self, st: &ShardState, id: &str, answers_before: Option<u64>) {
        match st.groups.get(id) {
            Some(g) => {
                if answers_before.unwrap_or(0) != g.answers_made() {
                    self.groups.push(id.to_string());
                }
                if let Some(d) = g.next_deadline() {
                    self.deadline = Some(self.deadline.map_or(d, |e| e.min(d)));
                }
            }
            None if answers_before.is_some() => self.groups.push(id.to_string()),
            None => {}
        }
    }
}

/// What a writer computed under its shard's lock.
#[derive(Debug, Default)]
struct Changes {
    /// Appended in this order.
    writes: Vec<Write>,
    wakes: Wakes,
}

impl Changes {
    fn write(&mut self, group_id: &str, answers_before: Option<u64>, records: Vec<Record>, effect: Effect) {
        self.writes.push(Write { group_id: group_id.to_string(), answers_before, records, txn: None, effect });
    }
}

/// A JoinGroup's or SyncGroup's answer: now, or parked until its group has it.
#[derive(Debug)]
pub(crate) enum Answer<T> {
    /// The answer.
    Now(T),
    /// Parked: look with [`GroupCoordinator::poll_parked`] when the group changed
    /// ([`GroupWaiters::group_changed`]), and give it up with
    /// [`GroupCoordinator::give_up_parked`] at the deadline or when its client went away (the
    /// broker's `DelayedGroupRequest`, [`super::delayed_join`]).
    Parked(Parked),
}

/// A parked JoinGroup or SyncGroup (Kafka's `DelayedJoin` / `DelayedSync`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parked {
    /// Its group.
    pub(crate) group_id: String,
    /// Its ticket in the group.
    pub(crate) ticket: Ticket,
    /// When it gives up (ms since the epoch): the group's rebalance timeout and a margin.
    pub(crate) deadline: i64,
}

/// What [`GroupCoordinator::poll_parked`] found.
#[derive(Debug)]
pub(crate) enum ParkedPoll {
    /// The answer.
    Ready(Completion),
    /// No answer will come (the group is gone, the coordinator stops, or the deadline passed):
    /// answer REBALANCE_IN_PROGRESS.
    Gone,
    /// Not yet.
    Pending,
}

/// How often, per group, a failure to store the group's assignment is logged at warn: a
/// coordinator whose `__consumer_offsets` cannot be written (a full disk) fails every
/// SyncGroup, and its members retry (backing off) for as long as it lasts.
const STORE_WARN_INTERVAL_MS: i64 = 10_000;

/// A per-key rate limit for warnings: at most one per key per `interval_ms`, the next one
/// counting those left out.
#[derive(Debug, Default)]
struct WarnLimiter {
    /// key -> (ms of the last warning logged, warnings left out since).
    last: BTreeMap<String, (i64, u64)>,
}

impl WarnLimiter {
    /// Whether to log the warning for `key` at `now` (ms): `Some(n)` with the number left out
    /// since the last one logged, `None` to leave it out.
    fn admit(&mut self, key: &str, now: i64, interval_ms: i64) -> Option<u64> {
        match self.last.get_mut(key) {
            Some((at, skipped)) if now.saturating_sub(*at) < interval_ms => {
                *skipped += 1;
                None
            }
            Some((at, skipped)) => {
                *at = now;
                Some(std::mem::take(skipped))
            }
            None => {
                self.last.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The broker's group coordinator. See the module documentation.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: CoordinatorConfig,
    /// One per `__consumer_offsets` partition, indexed by partition.
    shards: Box<[Shard]>,
    shutting_down: AtomicBool,
    /// When the next offset expiration pass is due (ms since the epoch; `i64::MAX` until the
    /// load ends). The timer thread's.
    next_retention_check: AtomicI64,
    /// Told of group changes (the broker's purgatory, where parked JoinGroup / SyncGroup
    /// requests wait), once set.
    waiters: OnceLock<Arc<dyn GroupWaiters>>,
    /// The timer thread's alarm.
    timer: TimerWakeup,
}

/// Extra time a parked request waits beyond its group's rebalance timeout before giving up (a
/// safety net: the state machine always answers before).
const WAIT_MARGIN_MS: i64 = 30_000;

impl GroupCoordinator {
    /// A coordinator with no groups, loading until [`Self::finish_loading`]: one shard per
    /// `offsets.topic.num.partitions`.
    pub fn new(config: CoordinatorConfig) -> Self {
        let n = config.offsets_topic_num_partitions.max(1);
        let shards = (0..n)
            .map(|partition| Shard {
                partition,
                state: Mutex::new(ShardState { loading: true, ..ShardState::default() }),
                write_order: Mutex::new(()),
            })
            .collect();
        GroupCoordinator {
            config,
            shards,
            shutting_down: AtomicBool::new(false),
            next_retention_check: AtomicI64::new(i64::MAX),
            waiters: OnceLock::new(),
            timer: TimerWakeup::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// The `__consumer_offsets` partition of `group_id`.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    /// Sets who hears of group changes ([`GroupWaiters::group_changed`]): the broker's
    /// purgatory, where parked JoinGroup / SyncGroup requests wait (a change of group X
    /// checks the operations watching X only). Set once; a second call is ignored.
    pub(crate) fn set_waiters(&self, waiters: Arc<dyn GroupWaiters>) {
        let _ = self.waiters.set(waiters);
    }

    fn shard(&self, group_id: &str) -> &Shard {
        &self.shards[self.partition_for(group_id) as usize]
    }

    fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Whether the replay of `__consumer_offsets` is still running.
    pub fn is_loading(&self) -> bool {
        self.shards.iter().any(|s| s.lock().loading)
    }

    /// Replays the records of one `__consumer_offsets` partition, in the order to apply them
    /// ([`LoadedRecord`]), each into the shard of its group (the partition's own, unless
    /// `offsets.topic.num.partitions` changed since they were written). Records are decoded
    /// with no lock held. Undecodable records are skipped with a warning (Kafka fails the load
    /// of the partition; one bad record should not hide every group here). A pending
    /// transactional offset commit goes to its producer's pending offsets; a tombstone removes
    /// the committed offset and the pending ones of its partition. Returns the number of
    /// records applied.
    pub fn load_records<I>(&self, partition: i32, records: I, now: i64) -> usize
    where
        I: IntoIterator<Item = LoadedRecord>,
    {
        let mut applied = 0;
        let mut locked: Option<(i32, MutexGuard<'_, ShardState>)> = None;
        for LoadedRecord { batch_offset, pending_producer, key, value } in records {
            let record = match decode_record(key.as_deref(), value.as_deref()) {
                Ok(OffsetsRecord::Unknown { key_version, .. }) => {
                    tracing::debug!("__consumer_offsets-{partition}: skipping a record with key version {key_version}");
                    continue;
                }
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("__consumer_offsets-{partition}: skipping an undecodable record: {e}");
                    continue;
                }
            };
            let group_id = match &record {
                OffsetsRecord::OffsetCommit { key, .. } => key.group.as_str(),
                OffsetsRecord::GroupMetadata { key, .. } => key.group.as_str(),
                OffsetsRecord::Unknown { .. } => continue,
            };
            let shard = self.partition_for(group_id);
            if locked.as_ref().map(|(p, _)| *p) != Some(shard) {
                drop(locked.take()); // never two shard locks at once
                locked = Some((shard, self.shards[shard as usize].lock()));
            }
            let Some((_, st)) = locked.as_mut() else { continue };
            match record {
                OffsetsRecord::OffsetCommit { key, value } => {
                    let tp = (key.topic.clone(), key.partition);
                    match (value, pending_producer) {
                        (Some(v), producer) => {
                            let committed = CommittedOffset {
                                offset: v.offset,
                                leader_epoch: v.leader_epoch().unwrap_or(-1),
                                metadata: v.metadata.clone(),
                                commit_timestamp: v.commit_timestamp_ms,
                                expire_timestamp: (v.expire_timestamp_ms >= 0).then_some(v.expire_timestamp_ms),
                                record_offset: batch_offset,
                            };
                            let offsets = match producer {
                                Some(p) => st.pending_txn.entry(p).or_default(),
                                None => &mut st.offsets,
                            };
                            offsets.entry(key.group.clone()).or_default().insert(tp, committed);
                        }
                        (None, None) => st.remove_offset(&key.group, &tp),
                        // Kafka writes no transactional tombstones.
                        (None, Some(_)) => continue,
                    }
                }
                OffsetsRecord::GroupMetadata { key, value } => match value {
                    Some(v) => {
                        let group = self.group_from_record(&key.group, &v, now);
                        st.groups.insert(key.group.clone(), group);
                    }
                    None => {
                        st.groups.remove(&key.group);
                    }
                },
                OffsetsRecord::Unknown { .. } => continue,
            }
            applied += 1;
        }
        applied
    }

    fn group_from_record(&self, group_id: &str, v: &GroupMetadataValue, now: i64) -> Group {
        let protocol = v.protocol.clone();
        let members = v
            .members
            .iter()
            .map(|m| {
                Group::stored_member(
                    m.member_id.clone(),
                    m.group_instance_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    protocol.clone().map(|p| (p, Bytes::from(m.subscription.clone()))),
                    Bytes::from(m.assignment.clone()),
                )
            })
            .collect();
        let protocol_type = (!v.protocol_type.is_empty()).then(|| v.protocol_type.clone());
        let state_ts = if v.current_state_timestamp_ms >= 0 { v.current_state_timestamp_ms } else { now };
        Group::loaded(
            group_id,
            self.config.group.clone(),
            state_ts,
            v.generation,
            protocol_type,
            protocol,
            v.leader.clone(),
            members,
        )
    }

    /// Ends the start-up replay: requests are served from now on, shard by shard.
    pub fn finish_loading(&self) {
        let (mut groups, mut offsets, mut next) = (0, 0, i64::MAX);
        for shard in self.shards.iter() {
            let mut st = shard.lock();
            st.loading = false;
            for (producer_id, commit) in std::mem::take(&mut st.completed_while_loading) {
                st.complete_txn(producer_id, commit);
            }
            groups += st.groups.len();
            offsets += st.offsets.values().map(BTreeMap::len).sum::<usize>();
            next = next.min(st.groups.values().filter_map(Group::next_deadline).min().unwrap_or(i64::MAX));
        }
        // Kafka 4's `GroupCoordinatorShard.onLoaded` schedules the first expiration one
        // `offsets.retention.check.interval.ms` after the load (Kafka 2.x-3.x ran it at once).
        let retention = now_ms().saturating_add(self.config.offsets_retention_check_interval_ms);
        self.next_retention_check.store(retention, Ordering::SeqCst);
        self.timer.schedule(next.min(retention));
        tracing::info!(groups, offsets, "group coordinator loaded __consumer_offsets");
    }

    /// Stops the coordinator: requests get COORDINATOR_NOT_AVAILABLE, a parked request that
    /// looks again finds no answer ([`Self::poll_parked`] is `Gone`), and the timer loop ends.
    /// The broker's purgatory, shut down first, expires the parked requests (answered
    /// COORDINATOR_NOT_AVAILABLE, see [`super::delayed_join`]).
    pub fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.timer.wake_now();
    }

    /// Kafka's `validateGroupStatus` before a request touches a group.
    fn check(&self, st: &ShardState, group_id: &str, empty_allowed: bool) -> Result<(), i16> {
        if group_id.is_empty() && !empty_allowed {
            Err(errors::INVALID_GROUP_ID)
        } else if self.is_shutting_down() {
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        } else if st.loading {
            Err(errors::COORDINATOR_LOAD_IN_PROGRESS)
        } else {
            Ok(())
        }
    }

    /// Wakes what a change asked for (called with no shard lock held).
    fn wake(&self, wakes: Wakes) {
        if let Some(w) = self.waiters.get() {
            for id in &wakes.groups {
                w.group_changed(id);
            }
        }
        if let Some(d) = wakes.deadline {
            self.timer.schedule(d);
        }
    }

    /// Runs a writer on `shard` (see the module documentation): under the write-order mutex,
    /// `compute` changes the shard under its lock and says what to write; the writes are
    /// appended in order with no shard lock held; their results are applied under the lock,
    /// then `finish` builds the answer from them.
    fn write_op<T, R>(
        &self,
        storage: &dyn OffsetsStorage,
        shard: &Shard,
        now: i64,
        compute: impl FnOnce(&mut ShardState, &mut Changes) -> T,
        finish: impl FnOnce(&mut ShardState, T, &[StoreResult]) -> R,
    ) -> R {
        let order = shard.write_order.lock().unwrap_or_else(|p| p.into_inner());
        let mut changes = Changes::default();
        let mut st = shard.lock();
        let computed = compute(&mut st, &mut changes);
        let Changes { mut writes, mut wakes } = changes;
        if writes.is_empty() {
            let answer = finish(&mut st, computed, &[]);
            drop(st);
            drop(order);
            self.wake(wakes);
            return answer;
        }
        for w in &writes {
            st.storing.insert(w.group_id.clone());
        }
        // The answers of a group being stored wait for the append's result.
        wakes.groups.retain(|id| !st.storing.contains(id));
        drop(st);
        self.wake(wakes);
        let results: Vec<StoreResult> = writes
            .iter_mut()
            .map(|w| match (std::mem::take(&mut w.records), w.txn) {
                (records, _) if records.is_empty() => Ok(-1),
                (records, None) => storage.append(shard.partition, records, now),
                (records, Some((id, epoch))) => storage.append_transactional(shard.partition, id, epoch, records, now),
            })
            .collect();
        let mut st = shard.lock();
        let mut wakes = Wakes::default();
        for (w, result) in writes.into_iter().zip(&results) {
            st.storing.remove(&w.group_id);
            self.apply(&mut st, &w.group_id, w.effect, result, now);
            wakes.note(&st, &w.group_id, w.answers_before);
        }
        let answer = finish(&mut st, computed, &results);
        drop(st);
        drop(order);
        self.wake(wakes);
        answer
    }

    /// Applies the result of one write (under the shard lock).
    fn apply(&self, st: &mut ShardState, id: &str, effect: Effect, result: &StoreResult, now: i64) {
        match (effect, result) {
            (Effect::Group, Ok(_)) => {}
            (Effect::Group, Err((code, msg))) => {
                tracing::warn!(group = id, "storing group metadata failed ({code}): {msg}");
            }
            (Effect::Assignment, Ok(_)) => {}
            (Effect::Assignment, Err((code, msg))) => {
                if let Some(g) = st.groups.get_mut(id) {
                    g.store_failed(*code, now);
                }
                if let Some(skipped) = st.store_warns.admit(id, now, STORE_WARN_INTERVAL_MS) {
                    let more = if skipped > 0 {
                        format!(" ({skipped} more failures since the last warning)")
                    } else {
                        String::new()
                    };
                    tracing::warn!(group = id, "storing the assignment failed ({code}): {msg}; rebalancing{more}");
                }
            }
            (Effect::Commit(accepted), Ok(at)) => {
                let at = *at;
                st.offsets
                    .entry(id.to_string())
                    .or_default()
                    .extend(accepted.into_iter().map(|(k, c)| (k, CommittedOffset { record_offset: at, ..c })));
            }
            (Effect::Commit(_), Err((code, msg))) => {
                tracing::warn!(group = id, "storing offsets failed ({code}): {msg}");
            }
            // Kafka's `onTxnOffsetCommitAppend`: the offsets wait for the producer's marker.
            (Effect::TxnCommit { producer_id, offsets }, Ok(at)) => {
                let at = *at;
                let pending = st.pending_txn.entry(producer_id).or_default().entry(id.to_string()).or_default();
                pending.extend(offsets.into_iter().map(|(k, c)| (k, CommittedOffset { record_offset: at, ..c })));
            }
            // Kafka's `failPendingTxnOffsetCommit`: nothing was written, nothing is pending.
            (Effect::TxnCommit { producer_id, .. }, Err((code, msg))) => {
                tracing::warn!(group = id, producer_id, "storing transactional offsets failed ({code}): {msg}");
            }
            (Effect::Delete, Ok(_)) => {
                st.offsets.remove(id);
                st.remove_pending(id, |_| true);
                if let Some(mut g) = st.groups.remove(id) {
                    g.mark_dead(now);
                }
            }
            (Effect::Delete, Err((code, msg))) => {
                tracing::warn!(group = id, "deleting the group failed ({code}): {msg}");
            }
            (Effect::Expire { expired, delete_group }, Ok(_)) => {
                tracing::info!(group = id, expired = expired.len(), "expired committed offsets");
                for k in &expired {
                    st.remove_offset(id, k);
                }
                if delete_group {
                    st.offsets.remove(id);
                    if let Some(mut g) = st.groups.remove(id) {
                        g.mark_dead(now);
                    }
                }
            }
            (Effect::Expire { .. }, Err((code, msg))) => {
                tracing::warn!(group = id, "expiring offsets failed ({code}): {msg}");
            }
        }
    }

    /// The group's metadata record, if the state machine asked for it to be stored.
    fn store_request(group: &mut Group, now: i64) -> Option<Vec<Record>> {
        group.take_store_request().then(|| vec![group_record(group, now)])
    }

    /// The JoinGroup without the wait: the answer, or where to look for it.
    pub(crate) fn begin_join(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        request: JoinRequest,
    ) -> Answer<JoinResult> {
        let now = now_ms();
        let asked_member_id = request.member_id.clone();
        let fail = |code| Answer::Now(JoinResult::error(&asked_member_id, code));
        // Made before the lock: it reads /dev/urandom.
        let new_member_id = format!("{}-{}", request.client_id, random_uuid());
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            if let Err(code) = self.check(st, group_id, false) {
                return fail(code);
            }
            let g = &self.config.group;
            if request.session_timeout_ms < g.min_session_timeout_ms
                || request.session_timeout_ms > g.max_session_timeout_ms
            {
                return fail(errors::INVALID_SESSION_TIMEOUT);
            }
            let before = st.groups.get(group_id).map(Group::answers_made);
            if before.is_none() {
                if !request.member_id.is_empty() {
                    return fail(errors::UNKNOWN_MEMBER_ID);
                }
                st.groups.insert(group_id.to_string(), Group::new(group_id, self.config.group.clone(), now));
            }
            let rebalance_timeout = i64::from(request.rebalance_timeout_ms.max(request.session_timeout_ms));
            let group = st.groups.get_mut(group_id).expect("inserted above");
            let reply = group.join(now, request, new_member_id);
            if let Some(records) = Self::store_request(group, now) {
                changes.write(group_id, before, records, Effect::Group);
            }
            changes.wakes.note(st, group_id, before);
            match reply {
                Reply::Now(r) => Answer::Now(r),
                Reply::Wait(ticket) => Answer::Parked(Parked {
                    group_id: group_id.to_string(),
                    ticket,
                    deadline: now + rebalance_timeout + WAIT_MARGIN_MS,
                }),
            }
        };
        self.write_op(storage, self.shard(group_id), now, compute, |_, answer, _| answer)
    }

    /// The SyncGroup without the wait: the answer, or where to look for it.
    pub(crate) fn begin_sync(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        request: SyncRequest<'_>,
    ) -> Answer<SyncResult> {
        let now = now_ms();
        let fail = SyncResult::error;
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            match self.check(st, group_id, false) {
                // Kafka: a loading coordinator lost the rebalance; REBALANCE_IN_PROGRESS makes
                // the member rejoin (older clients do not expect COORDINATOR_LOAD_IN_PROGRESS).
                Err(errors::COORDINATOR_LOAD_IN_PROGRESS) => return Err(fail(errors::REBALANCE_IN_PROGRESS)),
                Err(code) => return Err(fail(code)),
                Ok(()) => {}
            }
            let Some(group) = st.groups.get_mut(group_id) else { return Err(fail(errors::UNKNOWN_MEMBER_ID)) };
            let before = Some(group.answers_made());
            let rebalance_timeout =
                group.members().iter().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0).max(60_000);
            let reply = group.sync(now, request);
            if let Some(records) = Self::store_request(group, now) {
                changes.write(group_id, before, records, Effect::Assignment);
            }
            changes.wakes.note(st, group_id, before);
            Ok((reply, now + rebalance_timeout + WAIT_MARGIN_MS))
        };
        let finish = |st: &mut ShardState,
                      computed: Result<(Reply<SyncResult>, i64), SyncResult>,
                      _: &[StoreResult]| {
            let (reply, deadline) = match computed {
                Ok(c) => c,
                Err(r) => return Answer::Now(r),
            };
            let Some(group) = st.groups.get_mut(group_id) else { return Answer::Now(fail(errors::UNKNOWN_MEMBER_ID)) };
            match reply {
                // The leader's own answer may have been replaced by the store failure.
                Reply::Now(r) if r.error == errors::NONE && group.state() != GroupState::Stable => {
                    match group.state() {
                        GroupState::PreparingRebalance => Answer::Now(fail(errors::COORDINATOR_NOT_AVAILABLE)),
                        _ => Answer::Now(r),
                    }
                }
                Reply::Now(r) => Answer::Now(r),
                Reply::Wait(ticket) => Answer::Parked(Parked { group_id: group_id.to_string(), ticket, deadline }),
            }
        };
        self.write_op(storage, self.shard(group_id), now, compute, finish)
    }

    /// Looks once for a parked request's answer (under its shard's lock): the answer, `Gone`
    /// (its group went, the coordinator stops, or `now` is past its deadline: the ticket is
    /// abandoned), or `Pending`. An answer whose group is being stored is not taken until the
    /// append's result is applied (it may rewrite the answer).
    pub(crate) fn poll_parked(&self, parked: &Parked, now: i64) -> ParkedPoll {
        let mut st = self.shard(&parked.group_id).lock();
        let storing = st.storing.contains(&parked.group_id);
        let Some(group) = st.groups.get_mut(&parked.group_id) else { return ParkedPoll::Gone };
        if !storing {
            if let Some(c) = group.take_completion(parked.ticket) {
                return ParkedPoll::Ready(c);
            }
        }
        if self.is_shutting_down() || now >= parked.deadline {
            group.abandon(parked.ticket);
            return ParkedPoll::Gone;
        }
        ParkedPoll::Pending
    }

    /// Gives a parked request up (its deadline passed, its connection closed, the broker stops):
    /// its answer if it is there (and its group is not being stored), else `None`, the ticket
    /// abandoned ([`Group::abandon`]: the member stays, as Kafka keeps a member whose JoinGroup
    /// went away until its session times out).
    pub(crate) fn give_up_parked(&self, parked: &Parked) -> Option<Completion> {
        let mut st = self.shard(&parked.group_id).lock();
        let storing = st.storing.contains(&parked.group_id);
        let group = st.groups.get_mut(&parked.group_id)?;
        if !storing {
            if let Some(c) = group.take_completion(parked.ticket) {
                return Some(c);
            }
        }
        group.abandon(parked.ticket);
        None
    }

    /// Handles a Heartbeat; returns the error code. Takes only the group's shard lock: it waits
    /// for no append, and wakes no waiter (a heartbeat answers no parked request) and not the
    /// timer (it moves a session deadline later).
    pub fn heartbeat(&self, group_id: &str, member: MemberRef<'_>) -> i16 {
        let now = now_ms();
        let mut st = self.shard(group_id).lock();
        match self.check(&st, group_id, false) {
            // Kafka answers a loading coordinator's heartbeats blindly.
            Err(errors::COORDINATOR_LOAD_IN_PROGRESS) => return errors::NONE,
            Err(code) => return code,
            Ok(()) => {}
        }
        let mut wakes = Wakes::default();
        let code = match st.groups.get_mut(group_id) {
            None => errors::UNKNOWN_MEMBER_ID,
            Some(g) => {
                let before = Some(g.answers_made());
                let code = g.heartbeat(now, member);
                wakes.note(&st, group_id, before);
                code
            }
        };
        drop(st);
        self.wake(wakes);
        code
    }

    /// Handles a LeaveGroup: `(top-level error, per-member errors)` for `members` (member id,
    /// `group.instance.id`).
    pub fn leave_group(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        let now = now_ms();
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            if let Err(code) = self.check(st, group_id, false) {
                return (code, Vec::new());
            }
            let Some(group) = st.groups.get_mut(group_id) else {
                return (errors::NONE, vec![errors::UNKNOWN_MEMBER_ID; members.len()]);
            };
            if group.state() == GroupState::Dead {
                return (errors::COORDINATOR_NOT_AVAILABLE, Vec::new());
            }
            let before = Some(group.answers_made());
            let codes = members.iter().map(|(m, i)| group.leave(now, m, i.as_deref())).collect();
            if let Some(records) = Self::store_request(group, now) {
                changes.write(group_id, before, records, Effect::Group);
            }
            changes.wakes.note(st, group_id, before);
            (errors::NONE, codes)
        };
        self.write_op(storage, self.shard(group_id), now, compute, |_, answer, _| answer)
    }

    /// Handles an OffsetCommit: returns one error code per entry, in order. Valid entries are
    /// written to `__consumer_offsets` as one batch before the answer (Kafka's `storeOffsets`),
    /// and cached once written; `retention_time_ms` -1 means the broker's
    /// `offsets.retention.minutes`.
    pub fn commit_offsets(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        member: MemberRef<'_>,
        retention_time_ms: i64,
        entries: &[OffsetCommitEntry],
    ) -> Vec<i16> {
        let now = now_ms();
        let all = |code| vec![code; entries.len()];
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            if let Err(code) = self.check(st, group_id, true) {
                return all(code);
            }
            let before = st.groups.get(group_id).map(Group::answers_made);
            if before.is_none() {
                if member.generation_id >= 0 {
                    // A commit from a generation of a group this coordinator does not know.
                    return all(errors::ILLEGAL_GENERATION);
                }
                st.groups.insert(group_id.to_string(), Group::new(group_id, self.config.group.clone(), now));
            }
            let group = st.groups.get_mut(group_id).expect("inserted above");
            if let Err(code) = group.validate_offset_commit(now, member) {
                return all(code);
            }
            changes.wakes.note(st, group_id, before);
            let expire = (retention_time_ms >= 0).then(|| now.saturating_add(retention_time_ms));
            let (codes, records, accepted) = self.offset_records(group_id, entries, now, expire);
            if !records.is_empty() {
                let answers = st.groups.get(group_id).map(Group::answers_made);
                changes.write(group_id, answers, records, Effect::Commit(accepted));
            }
            codes
        };
        let finish = |_: &mut ShardState, codes: Vec<i16>, results: &[StoreResult]| match results.first() {
            Some(Err((code, _))) => codes.iter().map(|&c| if c == errors::NONE { *code } else { c }).collect(),
            _ => codes,
        };
        self.write_op(storage, self.shard(group_id), now, compute, finish)
    }

    /// Handles a TxnOffsetCommit (Kafka's `GroupCoordinator.handleTxnCommitOffsets` /
    /// `doTxnCommitOffsets`, `GroupMetadataManager.storeOffsets` with a producer id): returns one
    /// error code per entry, in order.
    ///
    /// The group is checked first: an empty group id is INVALID_GROUP_ID, then
    /// COORDINATOR_NOT_AVAILABLE (stopping) / COORDINATOR_LOAD_IN_PROGRESS; an unknown group is
    /// created Empty for a commit with generation -1 (a producer outside any group: Kafka 4's
    /// "simple group"), and is ILLEGAL_GENERATION for generation >= 0 (Kafka 4's
    /// `validateTransactionalOffsetCommit`); a known group checks the member
    /// ([`Group::validate_txn_offset_commit`]: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
    /// ILLEGAL_GENERATION). Metadata longer than `offset.metadata.max.bytes` is
    /// OFFSET_METADATA_TOO_LARGE for its entry. The other entries are appended to the group's
    /// `__consumer_offsets` partition as ONE transactional batch of `producer_id` /
    /// `producer_epoch` ([`OffsetsStorage::append_transactional`]) before the answer; once
    /// written they are PENDING (by producer, group and partition), invisible to OffsetFetch,
    /// until [`Self::complete_txn_offsets`] for the marker. A failed append answers its error
    /// on every valid entry and leaves nothing pending (Kafka's `failPendingTxnOffsetCommit`).
    ///
    /// The transaction itself (is `producer_id` / `producer_epoch` the transactional id's, is the
    /// group's partition in its transaction) is verified by the caller before this.
    pub fn txn_offset_commit(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        member: MemberRef<'_>,
        entries: &[OffsetCommitEntry],
    ) -> Vec<i16> {
        let now = now_ms();
        let all = |code| vec![code; entries.len()];
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            if let Err(code) = self.check(st, group_id, false) {
                return all(code);
            }
            if producer_id < 0 {
                return all(errors::INVALID_REQUEST);
            }
            let before = st.groups.get(group_id).map(Group::answers_made);
            if before.is_none() {
                if member.generation_id >= 0 {
                    return all(errors::ILLEGAL_GENERATION);
                }
                st.groups.insert(group_id.to_string(), Group::new(group_id, self.config.group.clone(), now));
            }
            let group = st.groups.get(group_id).expect("inserted above");
            if let Err(code) = group.validate_txn_offset_commit(member) {
                return all(code);
            }
            let (codes, records, accepted) = self.offset_records(group_id, entries, now, None);
            if !records.is_empty() {
                changes.writes.push(Write {
                    group_id: group_id.to_string(),
                    answers_before: before,
                    records,
                    txn: Some((producer_id, producer_epoch)),
                    effect: Effect::TxnCommit { producer_id, offsets: accepted },
                });
            }
            codes
        };
        let finish = |_: &mut ShardState, codes: Vec<i16>, results: &[StoreResult]| match results.first() {
            Some(Err((code, _))) => codes.iter().map(|&c| if c == errors::NONE { *code } else { c }).collect(),
            _ => codes,
        };
        self.write_op(storage, self.shard(group_id), now, compute, finish)
    }

    /// The records of an OffsetCommit / TxnOffsetCommit's `entries` for `group_id`: the error
    /// of each entry in order (`OFFSET_METADATA_TOO_LARGE` past `offset.metadata.max.bytes`,
    /// `INVALID_REQUEST` for an unencodable record, else `NONE`), the records to append, and the
    /// accepted offsets with their partitions (committed at `now` unless the entry has its own
    /// timestamp, expiring at `expire`).
    #[allow(clippy::type_complexity)]
    fn offset_records(
        &self,
        group_id: &str,
        entries: &[OffsetCommitEntry],
        now: i64,
        expire: Option<i64>,
    ) -> (Vec<i16>, Vec<(Vec<u8>, Option<Vec<u8>>)>, Vec<((String, i32), CommittedOffset)>) {
        let mut codes = Vec::with_capacity(entries.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for (topic, partition, offset, leader_epoch, metadata, commit_ts) in entries {
            let metadata = metadata.clone().unwrap_or_default();
            if metadata.len() > self.config.offset_metadata_max_bytes {
                codes.push(errors::OFFSET_METADATA_TOO_LARGE);
                continue;
            }
            let committed = CommittedOffset {
                offset: *offset,
                leader_epoch: *leader_epoch,
                metadata,
                commit_timestamp: if *commit_ts < 0 { now } else { *commit_ts },
                expire_timestamp: expire,
                record_offset: -1,
            };
            match offset_record(group_id, topic, *partition, &committed) {
                Ok(r) => {
                    records.push(r);
                    accepted.push(((topic.clone(), *partition), committed));
                    codes.push(errors::NONE);
                }
                Err(_) => codes.push(errors::INVALID_REQUEST),
            }
        }
        (codes, records, accepted)
    }

    /// Completes the transactional offset commits of `producer_id` in the groups of
    /// `__consumer_offsets-<offsets_partition>` once its COMMIT (`commit`) or ABORT marker is
    /// in that partition (Kafka's `GroupMetadataManager.handleTxnCompletion` /
    /// `GroupMetadata.completePendingTxnOffsetCommit`, 4's `replayEndTransactionMarker`). On
    /// commit each pending offset becomes the group's committed offset unless the committed
    /// one was appended after it (a higher [`CommittedOffset::record_offset`]: a plain
    /// OffsetCommit written later wins); on abort they are dropped. Returns how many offsets
    /// were committed. A partition out of range or a producer with nothing pending is a no-op.
    /// While the shard is still loading, the completion is kept and applied when the load ends
    /// (the replay may have read the partition before the marker; the producer's pending
    /// offsets then are those of the transaction the marker ends).
    ///
    /// Takes the shard's write-order mutex, then its lock (a writer's order: a TxnOffsetCommit
    /// whose append is in flight is applied first, so its offsets are completed here too). Call
    /// it with NO log lock held (the marker's append has returned) and no lock a coordinator
    /// writer may wait for (see the module documentation's lock order).
    pub fn complete_txn_offsets(&self, offsets_partition: i32, producer_id: i64, commit: bool) -> usize {
        let Some(shard) = usize::try_from(offsets_partition).ok().and_then(|i| self.shards.get(i)) else {
            return 0;
        };
        let order = shard.write_order.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = shard.lock();
        if st.loading {
            st.completed_while_loading.push((producer_id, commit));
            return 0;
        }
        let committed = st.complete_txn(producer_id, commit);
        drop(st);
        drop(order);
        committed
    }

    /// Handles an OffsetFetch for one group: `partitions` `None` means every partition with a
    /// committed offset (OffsetFetch v2+ with null topics). A partition without a commit gets
    /// offset -1 and no error, as Kafka answers. Only offsets in the log are seen; pending
    /// transactional offsets are not. Errors: COORDINATOR_LOAD_IN_PROGRESS, ....
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, i16> {
        let found = self.fetch_offsets_stable(group_id, partitions, false)?;
        Ok(found.into_iter().map(|(t, ps)| (t, ps.into_iter().map(|(p, c, _)| (p, c)).collect())).collect())
    }

    /// [`Self::fetch_offsets`] with OffsetFetch v7+'s `require_stable` (KIP-447): each
    /// partition comes with an error code, UNSTABLE_OFFSET_COMMIT (and no offset) for a
    /// partition with a pending transactional offset when `require_stable` (Kafka's
    /// `GroupMetadataManager.getOffsets`), NONE otherwise. The all-partitions form lists the
    /// committed partitions, as Kafka does.
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets_stable(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>, i16)>)>, i16> {
        let st = self.shard(group_id).lock();
        self.check(&st, group_id, true)?;
        let offsets = st.offsets.get(group_id);
        let answer = |tp: &(String, i32), c: Option<&CommittedOffset>| {
            if require_stable && st.has_pending_txn(group_id, tp) {
                (tp.1, None, errors::UNSTABLE_OFFSET_COMMIT)
            } else {
                (tp.1, c.cloned(), errors::NONE)
            }
        };
        Ok(match partitions {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .into_iter()
                        .map(|p| {
                            let tp = (topic.clone(), p);
                            answer(&tp, offsets.and_then(|m| m.get(&tp)))
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>, i16)>> = BTreeMap::new();
                for (tp, c) in offsets.into_iter().flatten() {
                    by_topic.entry(tp.0.clone()).or_default().push(answer(tp, Some(c)));
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// Handles a ListGroups: every group (also those that only store offsets), filtered by state
    /// names (v4+, case-insensitive) and types (v5+: only `classic` groups exist here). The
    /// shards are read one at a time; the groups come sorted by id.
    pub fn list_groups(&self, states_filter: &[String], types_filter: &[String]) -> Result<Vec<GroupOverview>, i16> {
        if self.is_shutting_down() {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let st = shard.lock();
            if st.loading {
                return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
            }
            let names: BTreeSet<&String> = st.groups.keys().chain(st.offsets.keys()).collect();
            for name in names {
                let (protocol_type, state) = match st.groups.get(name) {
                    Some(g) if g.state() == GroupState::Dead => continue,
                    Some(g) => (g.protocol_type().unwrap_or("").to_string(), g.state().name()),
                    None => (String::new(), GroupState::Empty.name()),
                };
                if !states_filter.is_empty() && !states_filter.iter().any(|s| s.eq_ignore_ascii_case(state)) {
                    continue;
                }
                if !types_filter.is_empty() && !types_filter.iter().any(|t| t.eq_ignore_ascii_case("classic")) {
                    continue;
                }
                out.push(GroupOverview { group_id: name.clone(), protocol_type, state });
            }
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// Handles one group of DescribeGroups (Kafka's `GroupMetadata.summary`): member metadata and
    /// protocol only when Stable; an unknown group is reported `Dead` with no error.
    pub fn describe_group(&self, group_id: &str) -> GroupDescription {
        let st = self.shard(group_id).lock();
        let dead = |error| GroupDescription {
            error,
            state: GroupState::Dead.name(),
            protocol_type: String::new(),
            protocol: String::new(),
            generation_id: -1,
            members: Vec::new(),
        };
        if let Err(code) = self.check(&st, group_id, true) {
            return GroupDescription { state: "", ..dead(code) };
        }
        let Some(g) = st.groups.get(group_id) else {
            return match st.offsets.contains_key(group_id) {
                true => GroupDescription { state: GroupState::Empty.name(), ..dead(errors::NONE) },
                false => dead(errors::NONE),
            };
        };
        let stable = g.state() == GroupState::Stable;
        let protocol = g.protocol_name().unwrap_or("").to_string();
        GroupDescription {
            error: errors::NONE,
            state: g.state().name(),
            protocol_type: g.protocol_type().unwrap_or("").to_string(),
            protocol: if stable { protocol.clone() } else { String::new() },
            generation_id: g.generation_id(),
            members: g
                .members()
                .iter()
                .map(|m| MemberDescription {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable { m.metadata(&protocol).cloned().unwrap_or_default() } else { Bytes::new() },
                    assignment: if stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        }
    }

    /// Handles DeleteGroups: one error per group id. Only Empty groups (or groups that only
    /// store offsets) are deleted: their offsets and metadata get tombstones, and the group goes
    /// once they are written. Each group is a write of its own shard.
    pub fn delete_groups(&self, storage: &dyn OffsetsStorage, group_ids: &[String]) -> Vec<i16> {
        let now = now_ms();
        group_ids
            .iter()
            .map(|id| {
                let compute = |st: &mut ShardState, changes: &mut Changes| {
                    self.check(st, id, true)?;
                    let state = st.groups.get(id).map(Group::state);
                    let known = state.is_some() || st.offsets.contains_key(id);
                    match state {
                        _ if !known => return Err(errors::GROUP_ID_NOT_FOUND),
                        Some(GroupState::Dead) => return Err(errors::GROUP_ID_NOT_FOUND),
                        Some(GroupState::Stable | GroupState::PreparingRebalance | GroupState::CompletingRebalance) => {
                            return Err(errors::NON_EMPTY_GROUP)
                        }
                        _ => {}
                    }
                    // Kafka 4's `deleteAllOffsets`: a tombstone for every committed offset and
                    // for every partition with only a pending transactional one (a tombstone
                    // removes the pending offsets of its partition, here and at replay).
                    let mut partitions: BTreeSet<&(String, i32)> =
                        st.offsets.get(id).into_iter().flat_map(BTreeMap::keys).collect();
                    for groups in st.pending_txn.values() {
                        partitions.extend(groups.get(id).into_iter().flat_map(BTreeMap::keys));
                    }
                    let mut records: Vec<Record> = Vec::new();
                    for (topic, p) in partitions {
                        if let Ok(key) = OffsetCommitKey::new(id.clone(), topic.clone(), *p).encode() {
                            records.push((key, None));
                        }
                    }
                    if let Ok(key) = GroupMetadataKey::new(id.clone()).encode() {
                        records.push((key, None));
                    }
                    let before = st.groups.get(id).map(Group::answers_made);
                    changes.write(id, before, records, Effect::Delete);
                    Ok(())
                };
                let finish = |_: &mut ShardState, computed: Result<(), i16>, results: &[StoreResult]| match computed {
                    Err(code) => code,
                    Ok(()) => match results.first() {
                        Some(Err((code, _))) => *code,
                        _ => errors::NONE,
                    },
                };
                self.write_op(storage, self.shard(id), now, compute, finish)
            })
            .collect()
    }

    /// The timer loop of the coordinator (run on its own thread until [`Self::shutdown`]):
    /// fires group deadlines (sessions, pending members, rebalance and initial delays), writes
    /// what they changed, and expires offsets every `offsets.retention.check.interval.ms`;
    /// between passes it sleeps until the earliest deadline (an earlier one armed meanwhile
    /// wakes it).
    pub fn run_timers(&self, storage: &dyn OffsetsStorage) {
        while !self.is_shutting_down() {
            let next = self.timer_pass(storage);
            self.timer.sleep_until(next, &self.shutting_down, now_ms);
        }
    }

    /// One pass of the timer over the shards, one at a time: returns the earliest deadline
    /// left (ms since the epoch; `i64::MAX`: none).
    pub(crate) fn timer_pass(&self, storage: &dyn OffsetsStorage) -> i64 {
        self.timer.begin_pass();
        let now = now_ms();
        let mut next = i64::MAX;
        for shard in self.shards.iter() {
            next = next.min(self.tick_shard(storage, shard, now));
        }
        if now >= self.next_retention_check.load(Ordering::SeqCst) {
            let again = now.saturating_add(self.config.offsets_retention_check_interval_ms);
            self.next_retention_check.store(again, Ordering::SeqCst);
            for shard in self.shards.iter() {
                self.expire_shard(storage, shard, now);
            }
        }
        next.min(self.next_retention_check.load(Ordering::SeqCst))
    }

    /// Fires the due deadlines of one shard's groups (a writer only when one is due); returns
    /// the shard's earliest deadline left.
    fn tick_shard(&self, storage: &dyn OffsetsStorage, shard: &Shard, now: i64) -> i64 {
        let earliest = |st: &ShardState| st.groups.values().filter_map(Group::next_deadline).min().unwrap_or(i64::MAX);
        {
            let st = shard.lock();
            if st.loading || self.is_shutting_down() {
                return i64::MAX;
            }
            if earliest(&st) > now {
                return earliest(&st);
            }
        }
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            let due: Vec<String> = st
                .groups
                .iter()
                .filter(|(_, g)| g.next_deadline().is_some_and(|d| d <= now))
                .map(|(id, _)| id.clone())
                .collect();
            for id in due {
                let Some(g) = st.groups.get_mut(&id) else { continue };
                let before = Some(g.answers_made());
                g.tick(now);
                if let Some(records) = Self::store_request(g, now) {
                    changes.write(&id, before, records, Effect::Group);
                }
                changes.wakes.note(st, &id, before);
            }
        };
        self.write_op(storage, shard, now, compute, |st, (), _| earliest(st))
    }

    /// Runs one offset expiration pass at `now` (what the timer loop does every
    /// `offsets.retention.check.interval.ms`).
    pub fn expire_offsets_now(&self, storage: &dyn OffsetsStorage, now: i64) {
        for shard in self.shards.iter() {
            self.expire_shard(storage, shard, now);
        }
    }

    /// Kafka's `cleanupGroupMetadata` / `removeExpiredOffsets` (KIP-211) for one shard:
    /// offsets with an explicit expiry past `now` go; the offsets of a group that is Empty (or
    /// has no group management) go `offsets.retention.minutes` after it became Empty (or after
    /// the commit). An Empty group left without offsets is deleted (tombstone). Stable groups
    /// keep theirs. An offset with a pending transactional offset of its partition is not
    /// expired, and a group with pending transactional offsets is not deleted (Kafka 4's
    /// `cleanupExpiredOffsets`). Each group's tombstones are one write; what they remove goes
    /// once written.
    fn expire_shard(&self, storage: &dyn OffsetsStorage, shard: &Shard, now: i64) {
        let retention = self.config.offsets_retention_ms;
        let compute = |st: &mut ShardState, changes: &mut Changes| {
            if st.loading {
                return;
            }
            for (id, offsets) in &st.offsets {
                let group_state = st.groups.get(id).map(|g| (g.state(), g.state_timestamp()));
                let expired: Vec<(String, i32)> = offsets
                    .iter()
                    .filter(|(tp, _)| !st.has_pending_txn(id, tp))
                    .filter(|(_, c)| match (c.expire_timestamp, group_state) {
                        (Some(t), _) => now >= t,
                        (None, Some((GroupState::Empty, since))) => now - since.max(0) >= retention,
                        (None, None) => now - c.commit_timestamp >= retention,
                        (None, Some(_)) => false,
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                if expired.is_empty() {
                    continue;
                }
                let mut records: Vec<Record> = expired
                    .iter()
                    .filter_map(|(t, p)| {
                        OffsetCommitKey::new(id.clone(), t.clone(), *p).encode().ok().map(|k| (k, None))
                    })
                    .collect();
                let left = offsets.len() - expired.len();
                let delete_group = left == 0
                    && matches!(group_state, None | Some((GroupState::Empty, _)))
                    && !st.group_has_pending_txn(id);
                if delete_group {
                    if let Ok(k) = GroupMetadataKey::new(id.clone()).encode() {
                        records.push((k, None));
                    }
                }
                let before = st.groups.get(id).map(Group::answers_made);
                changes.write(id, before, records, Effect::Expire { expired, delete_group });
            }
        };
        self.write_op(storage, shard, now, compute, |_, (), _| ())
    }

    /// Holds the lock of shard `partition` until the guard is dropped (tests: nothing else may
    /// need it).
    #[cfg(test)]
    fn hold_shard(&self, partition: i32) -> MutexGuard<'_, ShardState> {
        self.shards[partition as usize].lock()
    }

    /// Whether the lock of shard `partition` is free now (tests).
    #[cfg(test)]
    fn shard_is_free(&self, partition: i32) -> bool {
        self.shards[partition as usize].state.try_lock().is_ok()
    }

    /// Whether the write-order mutex of shard `partition` is held now (tests).
    #[cfg(test)]
    fn write_order_is_held(&self, partition: i32) -> bool {
        self.shards[partition as usize].write_order.try_lock().is_err()
    }
}

/// The `__consumer_offsets` record of a committed offset: key v1, value v3 (v1 with an expire
/// timestamp), as Kafka's `GroupMetadataManager.offsetCommitValue` chooses.
///
/// Errors: an over-long string in the key or value.
pub(crate) fn offset_record(
    group: &str,
    topic: &str,
    partition: i32,
    c: &CommittedOffset,
) -> Result<(Vec<u8>, Option<Vec<u8>>), crate::protocol::primitives::EncodeError> {
    let key = OffsetCommitKey::new(group, topic, partition).encode()?;
    let leader_epoch = (c.leader_epoch >= 0).then_some(c.leader_epoch);
    let value =
        OffsetCommitValue::new(c.offset, leader_epoch, c.metadata.clone(), c.commit_timestamp, c.expire_timestamp)
            .encode()?;
    Ok((key, Some(value)))
}

/// The `__consumer_offsets` record of a group's metadata (key v2, value v3; a tombstone for a
/// Dead group).
fn group_record(group: &Group, now: i64) -> (Vec<u8>, Option<Vec<u8>>) {
    let key = GroupMetadataKey::new(group.id()).encode().unwrap_or_default();
    if group.state() == GroupState::Dead {
        return (key, None);
    }
    let protocol = group.protocol_name().map(str::to_string);
    let members = group
        .members()
        .iter()
        .map(|m: &Member| MemberMetadata {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout_ms: m.rebalance_timeout_ms,
            session_timeout_ms: m.session_timeout_ms,
            subscription: protocol.as_deref().and_then(|p| m.metadata(p)).map(|b| b.to_vec()).unwrap_or_default(),
            assignment: m.assignment.to_vec(),
            unknown_tagged_fields: Vec::new(),
        })
        .collect();
    let value = GroupMetadataValue {
        version: GroupMetadataValue::CURRENT_VERSION,
        protocol_type: group.protocol_type().unwrap_or("").to_string(),
        generation: group.generation_id(),
        protocol,
        leader: group.leader_id().map(str::to_string),
        current_state_timestamp_ms: if group.state_timestamp() > 0 { group.state_timestamp() } else { now },
        members,
        unknown_tagged_fields: Vec::new(),
    };
    (key, value.encode().ok())
}

/// Milliseconds since the Unix epoch (Kafka's `time.milliseconds()`).
fn now_ms() -> i64 {
    crate::log::partition::now_ms()
}

/// A random version-4 UUID string (Java's `UUID.randomUUID().toString()`, which Kafka appends to
/// the client id to make member ids).
fn random_uuid() -> uuid::Uuid {
    let mut bytes = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if ok.is_err() {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(1);
        bytes = (nanos ^ (u128::from(std::process::id()) << 64)).to_be_bytes();
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::mpsc;
    use std::time::Duration;

    /// (partition, key, value) of every record appended.
    type Appended = Vec<(i32, Vec<u8>, Option<Vec<u8>>)>;

    #[derive(Default)]
    struct MemStorage {
        records: Mutex<Appended>,
        /// Per partition: its batches as they would be in the log (offsets assigned).
        logs: Mutex<HashMap<i32, Vec<u8>>>,
        /// Per partition: the next offset.
        next: Mutex<HashMap<i32, i64>>,
        fail: Option<i16>,
        /// Yield inside each append (widens the windows of concurrent tests).
        yield_in_append: bool,
    }

    impl MemStorage {
        fn records(&self) -> MutexGuard<'_, Appended> {
            self.records.lock().unwrap()
        }

        /// Writes one batch (a transactional one of `producer` when given) at the partition's
        /// next offset; returns its offset.
        fn write(&self, partition: i32, records: Vec<Record>, producer: Option<(i64, i16)>) -> i64 {
            let mut next = self.next.lock().unwrap();
            let base = *next.get(&partition).unwrap_or(&0);
            let mut b = crate::log::batch::BatchBuilder::new(base, crate::log::batch::Compression::None);
            if let Some((id, epoch)) = producer {
                b = b.producer(id, epoch, 0).transactional(true);
            }
            for (k, v) in &records {
                b.append(1, Some(k), v.as_deref(), &[]);
            }
            self.logs.lock().unwrap().entry(partition).or_default().extend(b.build().unwrap());
            next.insert(partition, base + records.len() as i64);
            self.records().extend(records.into_iter().map(|(k, v)| (partition, k, v)));
            base
        }

        /// Writes a COMMIT / ABORT marker of `producer_id` (what the transaction coordinator's
        /// marker writer does); returns its offset.
        fn marker(&self, partition: i32, producer_id: i64, commit: bool) -> i64 {
            let mut next = self.next.lock().unwrap();
            let base = *next.get(&partition).unwrap_or(&0);
            let m = crate::log::txn_index::marker_batch(base, producer_id, 0, !commit, 0, 1);
            self.logs.lock().unwrap().entry(partition).or_default().extend(m);
            next.insert(partition, base + 1);
            base
        }
    }

    impl OffsetsStorage for MemStorage {
        fn append(
            &self,
            partition: i32,
            records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
            _now: i64,
        ) -> Result<i64, (i16, String)> {
            if let Some(code) = self.fail {
                return Err((code, "injected".into()));
            }
            if self.yield_in_append {
                std::thread::yield_now();
            }
            let at = self.write(partition, records, None);
            if self.yield_in_append {
                std::thread::yield_now();
            }
            Ok(at)
        }

        fn append_transactional(
            &self,
            partition: i32,
            producer_id: i64,
            producer_epoch: i16,
            records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
            _now: i64,
        ) -> Result<i64, (i16, String)> {
            if let Some(code) = self.fail {
                return Err((code, "injected".into()));
            }
            Ok(self.write(partition, records, Some((producer_id, producer_epoch))))
        }
    }

    /// A coordinator loaded from what `storage` holds, as the broker's start-up loads
    /// `__consumer_offsets` (markers resolved by `replay::TxnOffsets`).
    fn replay(storage: &MemStorage) -> GroupCoordinator {
        let c = GroupCoordinator::new(CoordinatorConfig::default());
        let logs = storage.logs.lock().unwrap();
        for p in 0..50 {
            let mut t = super::super::replay::TxnOffsets::default();
            for b in crate::log::batch::mixed::MixedBatches::new(logs.get(&p).map_or(&[][..], |l| &l[..])) {
                t.add(b.unwrap());
            }
            c.load_records(p, t.finish().0, now_ms());
        }
        c.finish_loading();
        c
    }

    fn config() -> CoordinatorConfig {
        CoordinatorConfig {
            group: GroupConfig { initial_rebalance_delay_ms: 0, ..GroupConfig::default() },
            ..CoordinatorConfig::default()
        }
    }

    #[test]
    fn requests_wait_for_the_load() {
        let c = GroupCoordinator::new(config());
        let storage = MemStorage::default();
        assert_eq!(c.fetch_offsets("g", None), Err(errors::COORDINATOR_LOAD_IN_PROGRESS));
        assert_eq!(
            c.heartbeat("g", MemberRef { member_id: "m", group_instance_id: None, generation_id: 1 }),
            errors::NONE,
            "Kafka answers heartbeats blindly while loading"
        );
        let codes = c.commit_offsets(
            &storage,
            "g",
            MemberRef { member_id: "", group_instance_id: None, generation_id: -1 },
            -1,
            &[("t".into(), 0, 5, -1, None, -1)],
        );
        assert_eq!(codes, vec![errors::COORDINATOR_LOAD_IN_PROGRESS]);
        c.finish_loading();
        assert_eq!(c.fetch_offsets("g", None), Ok(vec![]));
    }

    #[test]
    fn simple_commits_round_trip_through_the_records() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let entries = vec![
            ("t".to_string(), 0, 42, 3, Some("meta".to_string()), -1),
            ("t".to_string(), 1, 7, -1, None, -1),
            ("u".to_string(), 0, 1, -1, Some("x".repeat(5000)), -1),
        ];
        let codes = c.commit_offsets(
            &storage,
            "g",
            MemberRef { member_id: "", group_instance_id: None, generation_id: -1 },
            -1,
            &entries,
        );
        assert_eq!(codes, vec![errors::NONE, errors::NONE, errors::OFFSET_METADATA_TOO_LARGE]);
        assert_eq!(storage.records().len(), 2);
        assert!(storage.records().iter().all(|(p, _, _)| *p == partition_for("g", 50)));
        let fetched = c.fetch_offsets("g", Some(vec![("t".into(), vec![0, 1, 2])])).unwrap();
        let got: Vec<(i32, Option<i64>)> =
            fetched[0].1.iter().map(|(p, o)| (*p, o.as_ref().map(|o| o.offset))).collect();
        assert_eq!(got, vec![(0, Some(42)), (1, Some(7)), (2, None)]);
        // A new coordinator replaying the records knows the same offsets.
        let c2 = replay(&storage);
        assert_eq!(c2.fetch_offsets("g", None), c.fetch_offsets("g", None));
        let all = c2.fetch_offsets("g", None).unwrap();
        assert_eq!(all[0].1[0].1.as_ref().map(|o| (o.leader_epoch, o.metadata.as_str())), Some((3, "meta")));
        // A commit from a generation of an unknown group is refused.
        let codes = c.commit_offsets(
            &storage,
            "other",
            MemberRef { member_id: "m", group_instance_id: None, generation_id: 3 },
            -1,
            &entries[..1],
        );
        assert_eq!(codes, vec![errors::ILLEGAL_GENERATION]);
    }

    #[test]
    fn store_warnings_are_limited_per_key_and_count_what_was_left_out() {
        let mut w = WarnLimiter::default();
        assert_eq!(w.admit("g", 1000, 10_000), Some(0));
        for t in 1001..1100 {
            assert_eq!(w.admit("g", t, 10_000), None);
        }
        assert_eq!(w.admit("h", 1100, 10_000), Some(0), "another group has its own limit");
        assert_eq!(w.admit("g", 10_999, 10_000), None);
        assert_eq!(w.admit("g", 11_000, 10_000), Some(100));
        assert_eq!(w.admit("g", 11_001, 10_000), None);
    }

    #[test]
    fn a_failed_store_is_reported_and_not_cached() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage { fail: Some(errors::COORDINATOR_NOT_AVAILABLE), ..MemStorage::default() };
        let codes = c.commit_offsets(
            &storage,
            "g",
            MemberRef { member_id: "", group_instance_id: None, generation_id: -1 },
            -1,
            &[("t".into(), 0, 5, -1, None, -1)],
        );
        assert_eq!(codes, vec![errors::COORDINATOR_NOT_AVAILABLE]);
        let fetched = c.fetch_offsets("g", Some(vec![("t".into(), vec![0])])).unwrap();
        assert_eq!(fetched[0].1[0].1, None);
    }

    #[test]
    fn a_group_forms_and_its_metadata_is_replayed() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let join = JoinRequest {
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
            ..JoinRequest::default()
        };
        // The initial delay is 0, but the join completes on the timer: the test runs its pass.
        let Answer::Parked(parked) = c.begin_join(&storage, "g", join.clone()) else { panic!("joined at once") };
        c.timer_pass(&MemStorage::default());
        let Completion::Join(r) = ready(&c, &parked) else { panic!("not a join answer") };
        assert_eq!((r.error, r.generation_id), (errors::NONE, 1));
        assert!(r.member_id.starts_with("client-") && r.member_id.len() == "client-".len() + 36);
        assert_eq!(r.leader, r.member_id);
        let request = SyncRequest {
            member: MemberRef { member_id: &r.member_id, group_instance_id: None, generation_id: 1 },
            protocol_type: None,
            protocol_name: None,
            assignments: vec![(r.member_id.clone(), Bytes::from_static(b"asg"))],
        };
        let Answer::Now(s1) = c.begin_sync(&storage, "g", request) else { panic!("the leader's sync waited") };
        assert_eq!((s1.error, s1.assignment.as_ref()), (errors::NONE, &b"asg"[..]));
        let d = c.describe_group("g");
        assert_eq!((d.state, d.protocol.as_str(), d.members.len()), ("Stable", "range", 1));
        assert_eq!(
            c.heartbeat("g", MemberRef { member_id: &r.member_id, group_instance_id: None, generation_id: 1 }),
            errors::NONE
        );
        // A bad session timeout is refused before anything else.
        let Answer::Now(bad) = c.begin_join(&storage, "g", JoinRequest { session_timeout_ms: 1000, ..join.clone() })
        else {
            panic!("a bad session timeout waited")
        };
        assert_eq!(bad.error, errors::INVALID_SESSION_TIMEOUT);
        // DeleteGroups refuses a group with members.
        assert_eq!(
            c.delete_groups(&storage, &["g".into(), "nope".into()]),
            vec![errors::NON_EMPTY_GROUP, errors::GROUP_ID_NOT_FOUND]
        );
        // Replayed: the group is Stable with its member and assignment.
        let replayed = replay(&storage);
        let d2 = replayed.describe_group("g");
        assert_eq!((d2.state, d2.generation_id, d2.members[0].assignment.as_ref()), ("Stable", 1, &b"asg"[..]));
        // Leaving empties it; the Empty metadata is written; then it can be deleted.
        assert_eq!(c.leave_group(&storage, "g", &[(r.member_id.clone(), None)]), (errors::NONE, vec![errors::NONE]));
        assert_eq!(c.describe_group("g").state, "Empty");
        assert_eq!(c.delete_groups(&storage, &["g".into()]), vec![errors::NONE]);
        assert_eq!(replay(&storage).describe_group("g").state, "Dead");
        c.shutdown();
    }

    #[test]
    fn offsets_of_empty_groups_expire_after_the_retention_and_the_group_goes() {
        let c = GroupCoordinator::new(CoordinatorConfig { offsets_retention_ms: 60_000, ..config() });
        c.finish_loading();
        let storage = MemStorage::default();
        let simple = MemberRef { member_id: "", group_instance_id: None, generation_id: -1 };
        let entry = [("t".to_string(), 0, 5, -1, None, -1)];
        assert_eq!(c.commit_offsets(&storage, "g", simple, -1, &entry), vec![errors::NONE]);
        // An explicit retention (OffsetCommit v2-v4) expires on its own clock: stored as value v1.
        assert_eq!(c.commit_offsets(&storage, "h", simple, 1000, &entry), vec![errors::NONE]);
        let now = now_ms();
        c.expire_offsets_now(&storage, now + 30_000);
        assert_eq!(c.fetch_offsets("g", None).unwrap().len(), 1, "not yet");
        assert_eq!(c.fetch_offsets("h", None).unwrap(), vec![], "its own 1 s retention passed");
        c.expire_offsets_now(&storage, now + 61_000);
        assert_eq!(c.fetch_offsets("g", None).unwrap(), vec![]);
        assert_eq!(c.describe_group("g").state, "Dead", "an Empty group without offsets is deleted");
        // Tombstones were written for both offsets and both groups, and a replay agrees.
        let tombstones = storage.records().iter().filter(|(_, _, v)| v.is_none()).count();
        assert_eq!(tombstones, 4);
        assert_eq!(replay(&storage).fetch_offsets("g", None).unwrap(), vec![]);
    }

    // ---- Transactional offset commits (issue 18) ----

    const PID: i64 = 4000;

    /// (partition, offset or -1, error) of `group`'s topic `t` partitions `parts`.
    fn stable_offsets(c: &GroupCoordinator, group: &str, parts: &[i32], require_stable: bool) -> Vec<(i32, i64, i16)> {
        let found = c.fetch_offsets_stable(group, Some(vec![("t".into(), parts.to_vec())]), require_stable).unwrap();
        found[0].1.iter().map(|(p, o, e)| (*p, o.as_ref().map_or(-1, |o| o.offset), *e)).collect()
    }

    fn txn_entry(partition: i32, offset: i64) -> OffsetCommitEntry {
        ("t".to_string(), partition, offset, -1, None, -1)
    }

    /// KIP-98 / KIP-447: a TxnOffsetCommit is one transactional batch, pending (invisible to
    /// OffsetFetch; UNSTABLE_OFFSET_COMMIT under require_stable) until its COMMIT marker.
    #[test]
    fn txn_offsets_are_pending_until_the_commit_marker() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let entries = [txn_entry(0, 10), txn_entry(1, 11), ("t".to_string(), 2, 12, -1, Some("x".repeat(5000)), -1)];
        let codes = c.txn_offset_commit(&storage, "g", PID, 3, SIMPLE, &entries);
        assert_eq!(codes, vec![errors::NONE, errors::NONE, errors::OFFSET_METADATA_TOO_LARGE]);
        let p = c.partition_for("g");
        assert_eq!(storage.records().len(), 2, "one batch of the two valid entries");
        let batch =
            crate::log::batch::mixed::MixedBatches::new(&storage.logs.lock().unwrap()[&p]).next().unwrap().unwrap();
        assert!(batch.is_transactional && batch.producer_id == PID && batch.producer_epoch == 3);
        assert_eq!(stable_offsets(&c, "g", &[0, 1, 2], false), [(0, -1, 0), (1, -1, 0), (2, -1, 0)]);
        let unstable = errors::UNSTABLE_OFFSET_COMMIT;
        assert_eq!(stable_offsets(&c, "g", &[0, 1, 2], true), [(0, -1, unstable), (1, -1, unstable), (2, -1, 0)]);
        assert_eq!(c.fetch_offsets("g", None).unwrap(), vec![], "nothing committed yet");
        // Another partition's marker, another producer's: nothing.
        assert_eq!(c.complete_txn_offsets((p + 1) % 50, PID, true), 0);
        assert_eq!(c.complete_txn_offsets(p, PID + 1, true), 0);
        assert_eq!(c.complete_txn_offsets(-1, PID, true), 0);
        storage.marker(p, PID, true);
        assert_eq!(c.complete_txn_offsets(p, PID, true), 2);
        assert_eq!(stable_offsets(&c, "g", &[0, 1, 2], true), [(0, 10, 0), (1, 11, 0), (2, -1, 0)]);
        assert_eq!(c.complete_txn_offsets(p, PID, true), 0, "completed once");
        // A restart agrees.
        assert_eq!(replay(&storage).fetch_offsets("g", None), c.fetch_offsets("g", None));
    }

    #[test]
    fn aborted_txn_offsets_are_dropped() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let simple = SIMPLE;
        assert_eq!(c.commit_offsets(&storage, "g", simple, -1, &[txn_entry(0, 5)]), vec![errors::NONE]);
        assert_eq!(c.txn_offset_commit(&storage, "g", PID, 0, simple, &[txn_entry(0, 9)]), vec![errors::NONE]);
        assert_eq!(stable_offsets(&c, "g", &[0], false), [(0, 5, 0)], "the committed offset until the marker");
        let p = c.partition_for("g");
        storage.marker(p, PID, false);
        assert_eq!(c.complete_txn_offsets(p, PID, false), 0);
        assert_eq!(stable_offsets(&c, "g", &[0], true), [(0, 5, 0)], "aborted: stable, the old offset");
        assert_eq!(replay(&storage).fetch_offsets("g", None), c.fetch_offsets("g", None));
    }

    /// Kafka's `completePendingTxnOffsetCommit`: a transactional offset replaces a committed one
    /// only if it was appended after it.
    #[test]
    fn a_later_plain_commit_wins_over_an_older_txn_commit() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let p = c.partition_for("g");
        // Partition 0: txn 9, then plain 20 -> 20 stays. Partition 1: plain 30, then txn 31 -> 31.
        assert_eq!(c.commit_offsets(&storage, "g", SIMPLE, -1, &[txn_entry(1, 30)]), vec![0]);
        assert_eq!(c.txn_offset_commit(&storage, "g", PID, 0, SIMPLE, &[txn_entry(0, 9), txn_entry(1, 31)]), [0, 0]);
        assert_eq!(c.commit_offsets(&storage, "g", SIMPLE, -1, &[txn_entry(0, 20)]), vec![0]);
        storage.marker(p, PID, true);
        assert_eq!(c.complete_txn_offsets(p, PID, true), 1);
        assert_eq!(stable_offsets(&c, "g", &[0, 1], true), [(0, 20, 0), (1, 31, 0)]);
        assert_eq!(replay(&storage).fetch_offsets("g", None), c.fetch_offsets("g", None));
    }

    #[test]
    fn txn_commits_check_the_group_and_the_member() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let e = [txn_entry(0, 1)];
        assert_eq!(c.txn_offset_commit(&storage, "", PID, 0, SIMPLE, &e), [errors::INVALID_GROUP_ID]);
        let gen3 = MemberRef { member_id: "m", group_instance_id: None, generation_id: 3 };
        assert_eq!(c.txn_offset_commit(&storage, "new", PID, 0, gen3, &e), [errors::ILLEGAL_GENERATION]);
        let member = stable_group(&c, &storage, "grp");
        let at = |generation_id| MemberRef { member_id: &member, group_instance_id: None, generation_id };
        assert_eq!(c.txn_offset_commit(&storage, "grp", PID, 0, at(2), &e), [errors::ILLEGAL_GENERATION]);
        let stranger = MemberRef { member_id: "zz", group_instance_id: None, generation_id: 1 };
        assert_eq!(c.txn_offset_commit(&storage, "grp", PID, 0, stranger, &e), [errors::UNKNOWN_MEMBER_ID]);
        assert_eq!(c.txn_offset_commit(&storage, "grp", PID, 0, at(1), &e), [errors::NONE]);
        assert_eq!(c.txn_offset_commit(&storage, "grp", PID + 1, 0, SIMPLE, &e), [errors::NONE], "v0-v2: no member");
        assert_eq!(stable_offsets(&c, "grp", &[0], true), [(0, -1, errors::UNSTABLE_OFFSET_COMMIT)]);
        // A failed append leaves nothing pending.
        let failing = MemStorage { fail: Some(errors::NOT_COORDINATOR), ..MemStorage::default() };
        assert_eq!(c.txn_offset_commit(&failing, "g2", PID, 0, SIMPLE, &e), [errors::NOT_COORDINATOR]);
        assert_eq!(stable_offsets(&c, "g2", &[0], true), [(0, -1, 0)]);
    }

    /// Kafka's loader keeps the offsets of a transaction with no marker pending; the marker
    /// written after the restart completes them.
    #[test]
    fn pending_txn_offsets_stay_pending_after_a_restart() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        assert_eq!(c.txn_offset_commit(&storage, "g", PID, 0, SIMPLE, &[txn_entry(0, 7)]), [0]);
        let c2 = replay(&storage);
        assert_eq!(stable_offsets(&c2, "g", &[0], true), [(0, -1, errors::UNSTABLE_OFFSET_COMMIT)]);
        let p = c2.partition_for("g");
        storage.marker(p, PID, true);
        assert_eq!(c2.complete_txn_offsets(p, PID, true), 1);
        assert_eq!(stable_offsets(&c2, "g", &[0], true), [(0, 7, 0)]);
        assert_eq!(replay(&storage).fetch_offsets("g", None), c2.fetch_offsets("g", None));
    }

    /// The transaction coordinator's start-up may write a prepared transaction's marker while
    /// the replay runs: a completion during the load is applied when it ends.
    #[test]
    fn a_marker_completed_during_the_load_applies_when_it_ends() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        assert_eq!(c.txn_offset_commit(&storage, "g", PID, 0, SIMPLE, &[txn_entry(0, 7)]), [0]);
        assert_eq!(c.txn_offset_commit(&storage, "g", PID + 1, 0, SIMPLE, &[txn_entry(1, 8)]), [0]);
        let loading = GroupCoordinator::new(CoordinatorConfig::default());
        let p = loading.partition_for("g");
        // The load read the partition before the markers.
        let logs = storage.logs.lock().unwrap().clone();
        storage.marker(p, PID, true);
        storage.marker(p, PID + 1, false);
        assert_eq!(loading.complete_txn_offsets(p, PID, true), 0, "loading: kept for later");
        assert_eq!(loading.complete_txn_offsets(p, PID + 1, false), 0);
        let mut t = super::super::replay::TxnOffsets::default();
        for b in crate::log::batch::mixed::MixedBatches::new(&logs[&p]) {
            t.add(b.unwrap());
        }
        loading.load_records(p, t.finish().0, now_ms());
        loading.finish_loading();
        assert_eq!(stable_offsets(&loading, "g", &[0, 1], true), [(0, 7, 0), (1, -1, 0)]);
        assert_eq!(replay(&storage).fetch_offsets("g", None), loading.fetch_offsets("g", None));
    }

    /// Kafka 4's `deleteAllOffsets` / `cleanupExpiredOffsets`: DeleteGroups writes tombstones for
    /// the pending partitions too (a later COMMIT marker applies nothing, here and at replay);
    /// expiry keeps an offset with a pending one and the group.
    #[test]
    fn delete_and_expiry_with_pending_txn_offsets() {
        let c = GroupCoordinator::new(CoordinatorConfig { offsets_retention_ms: 60_000, ..config() });
        c.finish_loading();
        let storage = MemStorage::default();
        assert_eq!(c.commit_offsets(&storage, "g", SIMPLE, -1, &[txn_entry(0, 1)]), [0]);
        assert_eq!(c.txn_offset_commit(&storage, "g", PID, 0, SIMPLE, &[txn_entry(0, 2), txn_entry(1, 3)]), [0, 0]);
        c.expire_offsets_now(&storage, now_ms() + 120_000);
        assert_eq!(stable_offsets(&c, "g", &[0], false), [(0, 1, 0)], "not expired: a pending offset waits");
        assert_eq!(c.delete_groups(&storage, &["g".to_string()]), [errors::NONE]);
        let tombstones = storage.records().iter().filter(|(_, _, v)| v.is_none()).count();
        assert_eq!(tombstones, 3, "partitions 0 and 1 (pending only) and the group");
        let p = c.partition_for("g");
        storage.marker(p, PID, true);
        assert_eq!(c.complete_txn_offsets(p, PID, true), 0);
        assert_eq!(c.fetch_offsets("g", None).unwrap(), vec![]);
        assert_eq!(replay(&storage).fetch_offsets("g", None).unwrap(), vec![]);
    }

    // ---- Shards, write order and wakeups (issue 15) ----

    const SIMPLE: MemberRef<'static> = MemberRef { member_id: "", group_instance_id: None, generation_id: -1 };

    fn join_request(client: &str) -> JoinRequest {
        JoinRequest {
            client_id: client.into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 10_000,
            session_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
            ..JoinRequest::default()
        }
    }

    /// A group id whose partition is (`same`) or is not that of `of`.
    fn group_in(c: &GroupCoordinator, of: &str, same: bool) -> String {
        (0..1000)
            .map(|i| format!("{of}-{i}"))
            .find(|g| (c.partition_for(g) == c.partition_for(of)) == same)
            .expect("some group id fits")
    }

    /// The answer of a parked request that must be there now.
    fn ready(c: &GroupCoordinator, parked: &Parked) -> Completion {
        match c.poll_parked(parked, now_ms()) {
            ParkedPoll::Ready(answer) => answer,
            other => panic!("no answer for {parked:?}: {other:?}"),
        }
    }

    /// Forms `group` with one member on this thread (the test drives the timer): its member id.
    fn stable_group(c: &GroupCoordinator, storage: &dyn OffsetsStorage, group: &str) -> String {
        let Answer::Parked(parked) = c.begin_join(storage, group, join_request("c")) else { panic!("joined at once") };
        c.timer.schedule(c.timer_pass(storage)); // the initial delay (0) passes
        let Completion::Join(r) = ready(c, &parked) else { panic!() };
        let request = SyncRequest {
            member: MemberRef { member_id: &r.member_id, group_instance_id: None, generation_id: r.generation_id },
            protocol_type: None,
            protocol_name: None,
            assignments: vec![(r.member_id.clone(), Bytes::from_static(b"asg"))],
        };
        let Answer::Now(s) = c.begin_sync(storage, group, request) else { panic!("the leader's sync waited") };
        assert_eq!(s.error, errors::NONE);
        assert_eq!(c.describe_group(group).state, "Stable");
        r.member_id
    }

    #[test]
    fn groups_of_other_shards_progress_while_a_shard_lock_is_held() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let a = "a";
        let b = group_in(&c, a, false);
        let entry = [("t".to_string(), 0, 5, -1, None, -1)];
        let held = c.hold_shard(c.partition_for(a));
        std::thread::scope(|s| {
            let (c, storage, b, entry) = (&c, &storage, &b, &entry);
            let blocked = s.spawn(move || c.commit_offsets(storage, a, SIMPLE, -1, entry));
            let (tx, rx) = mpsc::channel();
            s.spawn(move || {
                let codes = c.commit_offsets(storage, b, SIMPLE, -1, entry);
                let fetched = c.fetch_offsets(b, None).map(|t| t.len());
                let heartbeat = c.heartbeat(b, MemberRef { member_id: "m", group_instance_id: None, generation_id: 1 });
                let state = c.describe_group(b).state;
                let deleted = c.delete_groups(storage, std::slice::from_ref(b));
                tx.send((codes, fetched, heartbeat, state, deleted)).unwrap();
            });
            let got = rx.recv_timeout(Duration::from_secs(60));
            let a_went_through = blocked.is_finished();
            drop(held);
            let got = got.expect("group b waited for the lock of group a's shard");
            assert_eq!(got, (vec![errors::NONE], Ok(1), errors::UNKNOWN_MEMBER_ID, "Empty", vec![errors::NONE]));
            assert!(!a_went_through, "group a's commit did not need its shard's lock");
            assert_eq!(blocked.join().unwrap(), vec![errors::NONE]);
        });
        assert_eq!(c.fetch_offsets(a, None).unwrap().len(), 1);
    }

    /// Checks at every append that the shard's lock is free and its write-order mutex held.
    struct CheckingStorage<'a> {
        c: &'a GroupCoordinator,
        inner: MemStorage,
        checked: Mutex<Vec<i32>>,
        violations: Mutex<Vec<String>>,
    }

    impl OffsetsStorage for CheckingStorage<'_> {
        fn append_transactional(&self, partition: i32, _: i64, _: i16, records: Vec<Record>, now: i64) -> StoreResult {
            self.append(partition, records, now)
        }

        fn append(&self, partition: i32, records: Vec<Record>, now: i64) -> StoreResult {
            if !self.c.shard_is_free(partition) {
                self.violations.lock().unwrap().push(format!("shard {partition}'s lock is held during its append"));
            }
            if !self.c.write_order_is_held(partition) {
                self.violations.lock().unwrap().push(format!("shard {partition}'s write order is not held"));
            }
            self.checked.lock().unwrap().push(partition);
            self.inner.append(partition, records, now)
        }
    }

    #[test]
    fn appends_happen_after_the_shard_lock_is_released() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = CheckingStorage {
            c: &c,
            inner: MemStorage::default(),
            checked: Mutex::default(),
            violations: Mutex::default(),
        };
        // Every kind of write: a commit, the leader's assignment, the Empty group after a leave,
        // a deletion, expired offsets.
        let entry = [("t".to_string(), 0, 5, -1, None, -1)];
        assert_eq!(c.commit_offsets(&storage, "g1", SIMPLE, -1, &entry), vec![errors::NONE]);
        let member = stable_group(&c, &storage, "g2");
        assert_eq!(c.leave_group(&storage, "g2", &[(member, None)]), (errors::NONE, vec![errors::NONE]));
        assert_eq!(c.delete_groups(&storage, &["g2".into()]), vec![errors::NONE]);
        c.expire_offsets_now(&storage, now_ms() + c.config.offsets_retention_ms + 1);
        assert_eq!(c.fetch_offsets("g1", None).unwrap(), vec![]);
        assert_eq!(storage.violations.lock().unwrap().as_slice(), &[] as &[String]);
        let checked = storage.checked.lock().unwrap().clone();
        assert_eq!(checked.len(), 5, "one append per write: {checked:?}");
        let replayed = replay(&storage.inner);
        assert_eq!(replayed.describe_group("g2").state, "Dead");
        assert_eq!(replayed.fetch_offsets("g1", None).unwrap(), vec![]);
    }

    /// Counts the group changes it is told of.
    #[derive(Debug, Default)]
    struct RecordingWaiters {
        calls: Mutex<HashMap<String, u64>>,
    }

    impl RecordingWaiters {
        fn calls(&self, group: &str) -> u64 {
            self.calls.lock().unwrap().get(group).copied().unwrap_or(0)
        }
        fn total(&self) -> u64 {
            self.calls.lock().unwrap().values().sum()
        }
    }

    impl GroupWaiters for RecordingWaiters {
        fn group_changed(&self, group_id: &str) {
            *self.calls.lock().unwrap().entry(group_id.to_string()).or_default() += 1;
        }
    }

    #[test]
    fn a_heartbeat_wakes_no_other_groups_waiters_nor_the_timer() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let recorded = Arc::new(RecordingWaiters::default());
        c.set_waiters(recorded.clone());
        let storage = MemStorage::default();
        let x_member = stable_group(&c, &storage, "x");
        let y = "y";
        // Y's JoinGroup waits (holding no thread) until the timer fires the initial delay.
        let Answer::Parked(waiter) = c.begin_join(&storage, y, join_request("cy")) else { panic!("Y joined at once") };
        assert!(matches!(c.poll_parked(&waiter, now_ms()), ParkedPoll::Pending));
        let (recorded_total, timer) = (recorded.total(), c.timer.notified());
        let x_changes = recorded.calls("x");
        for _ in 0..100 {
            let me = MemberRef { member_id: &x_member, group_instance_id: None, generation_id: 1 };
            assert_eq!(c.heartbeat("x", me), errors::NONE);
        }
        assert_eq!(recorded.calls(y), 0, "Y was notified before it changed");
        assert_eq!(recorded.total(), recorded_total, "a heartbeat notified a group");
        assert_eq!(c.timer.notified(), timer, "a heartbeat woke the timer");
        assert!(matches!(c.poll_parked(&waiter, now_ms()), ParkedPoll::Pending));
        // Y's own change notifies Y, and only Y; Y's waiter then finds its answer.
        c.timer_pass(&storage);
        assert_eq!(recorded.calls(y), 1);
        assert_eq!(recorded.calls("x"), x_changes, "Y's change notified X");
        let Completion::Join(r) = ready(&c, &waiter) else { panic!("not a join answer") };
        assert_eq!((r.error, r.generation_id), (errors::NONE, 1));
    }

    /// A waiter that gives up (its client went away) leaves its member in the group, as Kafka
    /// keeps a member whose JoinGroup disappeared: the rebalance waits for it, completes with it,
    /// and its session then expires without heartbeats.
    #[test]
    fn a_given_up_join_leaves_its_member_until_its_session_expires() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let Answer::Parked(gone) = c.begin_join(&storage, "g", join_request("gone")) else { panic!() };
        assert!(c.give_up_parked(&gone).is_none(), "no answer yet");
        let Answer::Parked(stays) = c.begin_join(&storage, "g", join_request("stays")) else { panic!() };
        c.timer_pass(&storage);
        let Completion::Join(r) = ready(&c, &stays) else { panic!() };
        assert_eq!((r.error, r.generation_id), (errors::NONE, 1));
        assert_eq!(c.describe_group("g").members.len(), 2, "the member whose join went away is still there");
        assert!(matches!(c.poll_parked(&gone, now_ms()), ParkedPoll::Pending), "its answer was discarded");
        // Its session (10 s) runs from the join's completion; nobody heartbeats for it.
        let shard = c.shard("g");
        let later = now_ms() + 10_001;
        c.tick_shard(&storage, shard, later);
        let members = c.describe_group("g").members;
        assert!(members.iter().all(|m| m.client_id != "gone"), "its session did not expire: {members:?}");
    }

    #[test]
    fn an_earlier_deadline_wakes_the_timer() {
        let c = GroupCoordinator::new(CoordinatorConfig {
            group: GroupConfig { initial_rebalance_delay_ms: 3000, ..GroupConfig::default() },
            ..config()
        });
        c.finish_loading();
        let storage = MemStorage::default();
        let before = c.timer.notified();
        let retention_check = c.timer.next();
        assert!(retention_check > now_ms(), "the first retention check is one interval after the load");
        let Answer::Parked(_) = c.begin_join(&storage, "g", join_request("c")) else { panic!() };
        assert_eq!(c.timer.notified(), before + 1, "the join timer is earlier than the retention check");
        assert!(c.timer.next() <= now_ms() + 3000);
    }

    /// The offset of the last commit of (`group`, `t`, 0) in the log.
    fn last_logged(storage: &MemStorage, group: &str) -> Option<i64> {
        storage.records().iter().rev().find_map(|(_, k, v)| match decode_record(Some(k), v.as_deref()) {
            Ok(OffsetsRecord::OffsetCommit { key, value: Some(v) }) if key.group == group => Some(v.offset),
            _ => None,
        })
    }

    #[test]
    fn concurrent_commits_to_one_shard_reach_the_log_in_the_order_they_are_cached() {
        const THREADS: i64 = 8;
        const ROUNDS: i64 = 200;
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage { yield_in_append: true, ..MemStorage::default() };
        let groups = ["g".to_string(), group_in(&c, "g", true)];
        let barrier = std::sync::Barrier::new(THREADS as usize);
        let mismatches = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (c, storage, barrier, groups, mismatches) = (&c, &storage, &barrier, &groups, &mismatches);
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        // Every thread commits the same partition of one of the two groups at once...
                        barrier.wait();
                        let entries = [("t".to_string(), 0, round * 1000 + t, -1, None, -1)];
                        let group = &groups[(t % 2) as usize];
                        assert_eq!(c.commit_offsets(storage, group, SIMPLE, -1, &entries), vec![errors::NONE]);
                        barrier.wait();
                        // ...then the cache must hold what the log has last.
                        if t == 0 {
                            for g in groups {
                                let cached =
                                    c.fetch_offsets(g, Some(vec![("t".into(), vec![0])])).unwrap()[0].1[0].1.clone();
                                let logged = last_logged(storage, g);
                                if cached.as_ref().map(|o| o.offset) != logged {
                                    mismatches.lock().unwrap().push((
                                        round,
                                        g.clone(),
                                        cached.map(|o| o.offset),
                                        logged,
                                    ));
                                }
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(mismatches.into_inner().unwrap(), vec![], "(round, group, cached, last in the log)");
        assert_eq!(storage.records().len(), (THREADS * ROUNDS) as usize);
        let replayed = replay(&storage);
        for g in &groups {
            assert_eq!(replayed.fetch_offsets(g, None).unwrap(), c.fetch_offsets(g, None).unwrap());
        }
    }

    /// An append that waits for the test to let it fail.
    struct GatedFailingStorage {
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl OffsetsStorage for GatedFailingStorage {
        fn append_transactional(&self, partition: i32, _: i64, _: i16, records: Vec<Record>, now: i64) -> StoreResult {
            self.append(partition, records, now)
        }

        fn append(&self, _: i32, _: Vec<Record>, _: i64) -> StoreResult {
            self.entered.lock().unwrap().send(()).unwrap();
            self.release.lock().unwrap().recv_timeout(Duration::from_secs(60)).unwrap();
            Err((errors::NOT_COORDINATOR, "injected".into()))
        }
    }

    #[test]
    fn a_follower_waits_for_the_leaders_append_and_gets_its_failure() {
        let c = GroupCoordinator::new(config());
        c.finish_loading();
        let storage = MemStorage::default();
        let Answer::Parked(leader) = c.begin_join(&storage, "s", join_request("l")) else { panic!() };
        let Answer::Parked(follower) = c.begin_join(&storage, "s", join_request("f")) else { panic!() };
        c.timer_pass(&storage);
        let (Completion::Join(l), Completion::Join(f)) = (ready(&c, &leader), ready(&c, &follower)) else { panic!() };
        assert_eq!((l.leader.as_str(), l.generation_id, f.generation_id), (l.member_id.as_str(), 1, 1));
        let sync = |member_id, assignments| SyncRequest {
            member: MemberRef { member_id, group_instance_id: None, generation_id: 1 },
            protocol_type: None,
            protocol_name: None,
            assignments,
        };
        let Answer::Parked(parked) = c.begin_sync(&storage, "s", sync(&f.member_id, vec![])) else { panic!() };
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let gated = GatedFailingStorage { entered: Mutex::new(entered_tx), release: Mutex::new(release_rx) };
        std::thread::scope(|s| {
            let assignments =
                vec![(l.member_id.clone(), Bytes::from_static(b"a")), (f.member_id.clone(), Bytes::from_static(b"b"))];
            let leader = s.spawn(|| c.begin_sync(&gated, "s", sync(&l.member_id, assignments)));
            entered.recv_timeout(Duration::from_secs(60)).expect("the leader's assignment was not appended");
            // During the append: the shard serves (a heartbeat), the follower's answer is held.
            let me = MemberRef { member_id: &f.member_id, group_instance_id: None, generation_id: 1 };
            assert_eq!(c.heartbeat("s", me), errors::NONE);
            let during = c.poll_parked(&parked, now_ms());
            release.send(()).unwrap();
            assert!(matches!(during, ParkedPoll::Pending), "the follower took an unwritten assignment: {during:?}");
            let Answer::Now(r) = leader.join().unwrap() else { panic!("the leader's sync parked") };
            assert_eq!(r.error, errors::COORDINATOR_NOT_AVAILABLE);
        });
        let Completion::Sync(r) = ready(&c, &parked) else { panic!() };
        assert_eq!((r.error, r.assignment.len()), (errors::NOT_COORDINATOR, 0));
        assert_eq!(c.describe_group("s").state, "PreparingRebalance");
    }
}
