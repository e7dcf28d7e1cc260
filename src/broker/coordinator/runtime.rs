//! [`GroupCoordinator`]: every group and committed offset of the broker behind one lock.
//!
//! ```text
//! connection thread ── join/sync ──> lock ─> Group::join / Group::sync ─> Reply::Wait(ticket)
//!        │                                         │ store requested? ─> OffsetsStorage::append
//!        └── waits on `changed` (no lock held) until Group::take_completion(ticket)
//! timer thread ── run_timers ──> lock ─> Group::tick for due groups, offset expiry ─> notify `changed`
//! start-up ── load_partition(records of __consumer_offsets-N) ... finish_loading()
//! ```
//!
//! Lock order: the coordinator's lock, then (inside [`OffsetsStorage::append`]) the log
//! manager's. Nothing that holds the log lock takes the coordinator's.
//!
//! Persistence follows Kafka's `GroupMetadataManager` (Kafka 2.x-3.x) / `GroupCoordinatorShard`
//! (4.x) record formats ([`crate::protocol::consumer_offsets`]): an offset commit is an
//! `OffsetCommitKey` v1 with an `OffsetCommitValue` v3 (v1 when the commit carries an expire
//! timestamp), group metadata a `GroupMetadataKey` v2 with a `GroupMetadataValue` v3, written when
//! the leader's assignment is accepted, when the group becomes Empty, and when a static member
//! is replaced; deletions and expired offsets are tombstones. The write happens before the
//! answer is released, so an acknowledged commit is in the log (page cache) when the client
//! hears of it. At start-up every `__consumer_offsets` partition is replayed in offset order,
//! the last record of a key winning, and requests get COORDINATOR_LOAD_IN_PROGRESS until the
//! replay is done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::group::{
    Completion, Group, GroupConfig, GroupState, JoinRequest, JoinResult, Member, MemberRef, Reply, SyncRequest,
    SyncResult, Ticket,
};
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
}

/// Where the coordinator's records go: `__consumer_offsets` in the broker's log.
pub trait OffsetsStorage {
    /// Appends `records` (key, value; `None` = tombstone) as one batch to
    /// `__consumer_offsets-<partition>`, creating the topic if it does not exist yet, and
    /// returns once the batch is in the log (page cache).
    ///
    /// Errors: a Kafka error code for the caller to answer with (Kafka maps storage failures to
    /// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or UNKNOWN_SERVER_ERROR) and a message.
    fn append(&self, partition: i32, records: Vec<(Vec<u8>, Option<Vec<u8>>)>, now: i64) -> Result<(), (i16, String)>;
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

#[derive(Debug, Default)]
struct State {
    groups: BTreeMap<String, Group>,
    offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    loading: bool,
    shutting_down: bool,
    next_retention_check: i64,
    /// Rate limit of the "storing the assignment failed" warn, per group.
    store_warns: WarnLimiter,
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
    state: Mutex<State>,
    changed: Condvar,
}

/// Extra time a parked request waits beyond its group's rebalance timeout before giving up (a
/// safety net: the state machine always answers before).
const WAIT_MARGIN_MS: i64 = 30_000;

impl GroupCoordinator {
    /// A coordinator with no groups, loading until [`Self::finish_loading`].
    pub fn new(config: CoordinatorConfig) -> Self {
        GroupCoordinator {
            config,
            state: Mutex::new(State { loading: true, ..State::default() }),
            changed: Condvar::new(),
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

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the replay of `__consumer_offsets` is still running.
    pub fn is_loading(&self) -> bool {
        self.lock().loading
    }

    /// Replays the records of one `__consumer_offsets` partition, in offset order (`key`,
    /// `value`; `None` = null). Undecodable records are skipped with a warning (Kafka fails the
    /// load of the partition; one bad record should not hide every group here). Returns the
    /// number of records applied.
    pub fn load_records<I>(&self, partition: i32, records: I, now: i64) -> usize
    where
        I: IntoIterator<Item = (Option<Bytes>, Option<Bytes>)>,
    {
        let mut st = self.lock();
        let mut applied = 0;
        for (key, value) in records {
            match decode_record(key.as_deref(), value.as_deref()) {
                Ok(OffsetsRecord::OffsetCommit { key, value }) => {
                    let tp = (key.topic.clone(), key.partition);
                    match value {
                        Some(v) => {
                            let committed = CommittedOffset {
                                offset: v.offset,
                                leader_epoch: v.leader_epoch().unwrap_or(-1),
                                metadata: v.metadata.clone(),
                                commit_timestamp: v.commit_timestamp_ms,
                                expire_timestamp: (v.expire_timestamp_ms >= 0).then_some(v.expire_timestamp_ms),
                            };
                            st.offsets.entry(key.group.clone()).or_default().insert(tp, committed);
                        }
                        None => {
                            if let Some(m) = st.offsets.get_mut(&key.group) {
                                m.remove(&tp);
                            }
                        }
                    }
                    applied += 1;
                }
                Ok(OffsetsRecord::GroupMetadata { key, value }) => {
                    match value {
                        Some(v) => {
                            let group = self.group_from_record(&key.group, &v, now);
                            st.groups.insert(key.group.clone(), group);
                        }
                        None => {
                            st.groups.remove(&key.group);
                        }
                    }
                    applied += 1;
                }
                Ok(OffsetsRecord::Unknown { key_version, .. }) => {
                    tracing::debug!("__consumer_offsets-{partition}: skipping a record with key version {key_version}");
                }
                Err(e) => tracing::warn!("__consumer_offsets-{partition}: skipping an undecodable record: {e}"),
            }
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

    /// Ends the start-up replay: requests are served from now on.
    pub fn finish_loading(&self) {
        let mut st = self.lock();
        st.loading = false;
        // Kafka 4's `GroupCoordinatorShard.onLoaded` schedules the first expiration one
        // `offsets.retention.check.interval.ms` after the load (Kafka 2.x-3.x ran it at once).
        st.next_retention_check = now_ms() + self.config.offsets_retention_check_interval_ms;
        let groups = st.groups.len();
        let offsets: usize = st.offsets.values().map(BTreeMap::len).sum();
        drop(st);
        tracing::info!(groups, offsets, "group coordinator loaded __consumer_offsets");
        self.changed.notify_all();
    }

    /// Stops the coordinator: parked requests are answered COORDINATOR_NOT_AVAILABLE and the
    /// timer loop ends.
    pub fn shutdown(&self) {
        self.lock().shutting_down = true;
        self.changed.notify_all();
    }

    /// Kafka's `validateGroupStatus` before a request touches a group.
    fn check(&self, st: &State, group_id: &str, empty_allowed: bool) -> Result<(), i16> {
        if group_id.is_empty() && !empty_allowed {
            Err(errors::INVALID_GROUP_ID)
        } else if st.shutting_down {
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        } else if st.loading {
            Err(errors::COORDINATOR_LOAD_IN_PROGRESS)
        } else {
            Ok(())
        }
    }

    /// Writes the group's metadata (or its tombstone when Dead) if the state machine asked for
    /// it. Returns the storage error, if any.
    fn persist_group(&self, storage: &dyn OffsetsStorage, group: &mut Group, now: i64) -> Result<(), (i16, String)> {
        if !group.take_store_request() {
            return Ok(());
        }
        let record = group_record(group, now);
        storage.append(self.partition_for(group.id()), vec![record], now)
    }

    /// Handles a JoinGroup, waiting (without any lock) until the rebalance completes.
    /// `client_id` prefixes a new member id. Errors come back inside the result.
    pub fn join_group(&self, storage: &dyn OffsetsStorage, group_id: &str, request: JoinRequest) -> JoinResult {
        let now = now_ms();
        let mut st = self.lock();
        let asked_member_id = request.member_id.clone();
        let fail = |code| JoinResult::error(&asked_member_id, code);
        if let Err(code) = self.check(&st, group_id, false) {
            return fail(code);
        }
        let g = &self.config.group;
        if request.session_timeout_ms < g.min_session_timeout_ms
            || request.session_timeout_ms > g.max_session_timeout_ms
        {
            return fail(errors::INVALID_SESSION_TIMEOUT);
        }
        if !st.groups.contains_key(group_id) {
            if !request.member_id.is_empty() {
                return fail(errors::UNKNOWN_MEMBER_ID);
            }
            st.groups.insert(group_id.to_string(), Group::new(group_id, self.config.group.clone(), now));
        }
        let new_member_id = format!("{}-{}", request.client_id, random_uuid());
        let rebalance_timeout = i64::from(request.rebalance_timeout_ms.max(request.session_timeout_ms));
        let group = st.groups.get_mut(group_id).expect("inserted above");
        let reply = group.join(now, request, new_member_id);
        if let Err((code, msg)) = self.persist_group(storage, group, now) {
            tracing::warn!(group = group_id, "storing group metadata failed ({code}): {msg}");
        }
        drop(st);
        self.changed.notify_all();
        match reply {
            Reply::Now(r) => r,
            Reply::Wait(ticket) => match self.wait(group_id, ticket, now + rebalance_timeout + WAIT_MARGIN_MS) {
                Some(Completion::Join(r)) => r,
                _ => fail(errors::REBALANCE_IN_PROGRESS),
            },
        }
    }

    /// Handles a SyncGroup, waiting (without any lock) for the leader's assignment when the
    /// caller is a follower. The leader's assignment is written to `__consumer_offsets` before
    /// anyone is answered; if that fails every waiting member gets the error and the group
    /// rebalances.
    pub fn sync_group(&self, storage: &dyn OffsetsStorage, group_id: &str, request: SyncRequest<'_>) -> SyncResult {
        let now = now_ms();
        let mut st = self.lock();
        let fail = SyncResult::error;
        match self.check(&st, group_id, false) {
            // Kafka: a loading coordinator lost the rebalance; REBALANCE_IN_PROGRESS makes the
            // member rejoin (older clients do not expect COORDINATOR_LOAD_IN_PROGRESS here).
            Err(errors::COORDINATOR_LOAD_IN_PROGRESS) => return fail(errors::REBALANCE_IN_PROGRESS),
            Err(code) => return fail(code),
            Ok(()) => {}
        }
        let Some(group) = st.groups.get_mut(group_id) else { return fail(errors::UNKNOWN_MEMBER_ID) };
        let rebalance_timeout =
            group.members().iter().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0).max(60_000);
        let reply = group.sync(now, request);
        if let Err((code, msg)) = self.persist_group(storage, group, now) {
            group.store_failed(code, now);
            if let Some(skipped) = st.store_warns.admit(group_id, now, STORE_WARN_INTERVAL_MS) {
                let more = if skipped > 0 {
                    format!(" ({skipped} more failures since the last warning)")
                } else {
                    String::new()
                };
                tracing::warn!(group = group_id, "storing the assignment failed ({code}): {msg}; rebalancing{more}");
            }
        }
        let Some(group) = st.groups.get_mut(group_id) else { return fail(errors::UNKNOWN_MEMBER_ID) };
        let reply = match reply {
            // The leader's own answer may have been replaced by the store failure.
            Reply::Now(r) if r.error == errors::NONE && group.state() != GroupState::Stable => match group.state() {
                GroupState::PreparingRebalance => fail(errors::COORDINATOR_NOT_AVAILABLE),
                _ => r,
            },
            Reply::Now(r) => r,
            Reply::Wait(ticket) => {
                drop(st);
                self.changed.notify_all();
                return match self.wait(group_id, ticket, now + rebalance_timeout + WAIT_MARGIN_MS) {
                    Some(Completion::Sync(r)) => r,
                    _ => fail(errors::REBALANCE_IN_PROGRESS),
                };
            }
        };
        drop(st);
        self.changed.notify_all();
        reply
    }

    /// Waits until the ticket's answer is there, the coordinator shuts down, or `deadline`.
    fn wait(&self, group_id: &str, ticket: Ticket, deadline: i64) -> Option<Completion> {
        let mut st = self.lock();
        loop {
            let shutting_down = st.shutting_down;
            let group = st.groups.get_mut(group_id)?;
            if let Some(c) = group.take_completion(ticket) {
                return Some(c);
            }
            let now = now_ms();
            if shutting_down || now >= deadline {
                group.abandon(ticket);
                return None;
            }
            let timeout = Duration::from_millis((deadline - now).clamp(1, 1000) as u64);
            st = self.changed.wait_timeout(st, timeout).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Handles a Heartbeat; returns the error code.
    pub fn heartbeat(&self, group_id: &str, member: MemberRef<'_>) -> i16 {
        let now = now_ms();
        let mut st = self.lock();
        match self.check(&st, group_id, false) {
            // Kafka answers a loading coordinator's heartbeats blindly.
            Err(errors::COORDINATOR_LOAD_IN_PROGRESS) => return errors::NONE,
            Err(code) => return code,
            Ok(()) => {}
        }
        let code = match st.groups.get_mut(group_id) {
            None => errors::UNKNOWN_MEMBER_ID,
            Some(g) => g.heartbeat(now, member),
        };
        drop(st);
        self.changed.notify_all();
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
        let mut st = self.lock();
        if let Err(code) = self.check(&st, group_id, false) {
            return (code, Vec::new());
        }
        let Some(group) = st.groups.get_mut(group_id) else {
            return (errors::NONE, vec![errors::UNKNOWN_MEMBER_ID; members.len()]);
        };
        if group.state() == GroupState::Dead {
            return (errors::COORDINATOR_NOT_AVAILABLE, Vec::new());
        }
        let codes = members.iter().map(|(m, i)| group.leave(now, m, i.as_deref())).collect();
        if let Err((code, msg)) = self.persist_group(storage, group, now) {
            tracing::warn!(group = group_id, "storing group metadata failed ({code}): {msg}");
        }
        drop(st);
        self.changed.notify_all();
        (errors::NONE, codes)
    }

    /// Handles an OffsetCommit: returns one error code per entry, in order. Valid entries are
    /// written to `__consumer_offsets` as one batch before the answer (Kafka's `storeOffsets`);
    /// `retention_time_ms` -1 means the broker's `offsets.retention.minutes`.
    pub fn commit_offsets(
        &self,
        storage: &dyn OffsetsStorage,
        group_id: &str,
        member: MemberRef<'_>,
        retention_time_ms: i64,
        entries: &[OffsetCommitEntry],
    ) -> Vec<i16> {
        let now = now_ms();
        let mut st = self.lock();
        let all = |code| vec![code; entries.len()];
        if let Err(code) = self.check(&st, group_id, true) {
            return all(code);
        }
        if !st.groups.contains_key(group_id) {
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
        let expire = (retention_time_ms >= 0).then(|| now.saturating_add(retention_time_ms));
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
        if !records.is_empty() {
            if let Err((code, msg)) = storage.append(self.partition_for(group_id), records, now) {
                tracing::warn!(group = group_id, "storing offsets failed ({code}): {msg}");
                return codes.iter().map(|&c| if c == errors::NONE { code } else { c }).collect();
            }
            let map = st.offsets.entry(group_id.to_string()).or_default();
            map.extend(accepted);
        }
        drop(st);
        self.changed.notify_all();
        codes
    }

    /// Handles an OffsetFetch for one group: `partitions` `None` means every partition with a
    /// committed offset (OffsetFetch v2+ with null topics). A partition without a commit gets
    /// offset -1 and no error, as Kafka answers. Errors: COORDINATOR_LOAD_IN_PROGRESS, ....
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, i16> {
        let st = self.lock();
        self.check(&st, group_id, true)?;
        let offsets = st.offsets.get(group_id);
        Ok(match partitions {
            Some(topics) => topics
                .into_iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .into_iter()
                        .map(|p| (p, offsets.and_then(|m| m.get(&(topic.clone(), p))).cloned()))
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> = BTreeMap::new();
                for ((topic, p), c) in offsets.into_iter().flatten() {
                    by_topic.entry(topic.clone()).or_default().push((*p, Some(c.clone())));
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// Handles a ListGroups: every group (also those that only store offsets), filtered by state
    /// names (v4+, case-insensitive) and types (v5+: only `classic` groups exist here).
    pub fn list_groups(&self, states_filter: &[String], types_filter: &[String]) -> Result<Vec<GroupOverview>, i16> {
        let st = self.lock();
        if st.shutting_down {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if st.loading {
            return Err(errors::COORDINATOR_LOAD_IN_PROGRESS);
        }
        let names: BTreeSet<&String> = st.groups.keys().chain(st.offsets.keys()).collect();
        let mut out = Vec::new();
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
        Ok(out)
    }

    /// Handles one group of DescribeGroups (Kafka's `GroupMetadata.summary`): member metadata and
    /// protocol only when Stable; an unknown group is reported `Dead` with no error.
    pub fn describe_group(&self, group_id: &str) -> GroupDescription {
        let st = self.lock();
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
    /// store offsets) are deleted: their offsets and metadata get tombstones.
    pub fn delete_groups(&self, storage: &dyn OffsetsStorage, group_ids: &[String]) -> Vec<i16> {
        let now = now_ms();
        let mut st = self.lock();
        let mut out = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            if let Err(code) = self.check(&st, id, true) {
                out.push(code);
                continue;
            }
            let state = st.groups.get(id).map(Group::state);
            let known = state.is_some() || st.offsets.contains_key(id);
            match state {
                _ if !known => out.push(errors::GROUP_ID_NOT_FOUND),
                Some(GroupState::Dead) => out.push(errors::GROUP_ID_NOT_FOUND),
                Some(GroupState::Stable | GroupState::PreparingRebalance | GroupState::CompletingRebalance) => {
                    out.push(errors::NON_EMPTY_GROUP)
                }
                _ => {
                    let mut records: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
                    for (topic, p) in
                        st.offsets.get(id).map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default()
                    {
                        if let Ok(key) = OffsetCommitKey::new(id.clone(), topic, p).encode() {
                            records.push((key, None));
                        }
                    }
                    if let Ok(key) = GroupMetadataKey::new(id.clone()).encode() {
                        records.push((key, None));
                    }
                    match storage.append(self.partition_for(id), records, now) {
                        Ok(()) => {
                            st.offsets.remove(id);
                            if let Some(mut g) = st.groups.remove(id) {
                                g.mark_dead(now);
                            }
                            out.push(errors::NONE);
                        }
                        Err((code, msg)) => {
                            tracing::warn!(group = %id, "deleting the group failed ({code}): {msg}");
                            out.push(code);
                        }
                    }
                }
            }
        }
        drop(st);
        self.changed.notify_all();
        out
    }

    /// The timer loop of the coordinator (run on its own thread until [`Self::shutdown`]):
    /// fires group deadlines (sessions, pending members, rebalance and initial delays), writes
    /// what they changed, and expires offsets every `offsets.retention.check.interval.ms`.
    pub fn run_timers(&self, storage: &dyn OffsetsStorage) {
        let mut st = self.lock();
        loop {
            if st.shutting_down {
                return;
            }
            let now = now_ms();
            let mut fired = false;
            if !st.loading {
                let due: Vec<String> = st
                    .groups
                    .iter()
                    .filter(|(_, g)| g.next_deadline().is_some_and(|d| d <= now))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in due {
                    if let Some(g) = st.groups.get_mut(&id) {
                        g.tick(now);
                        if let Err((code, msg)) = self.persist_group(storage, g, now) {
                            tracing::warn!(group = %id, "storing group metadata failed ({code}): {msg}");
                        }
                        fired = true;
                    }
                }
                if now >= st.next_retention_check {
                    st.next_retention_check = now + self.config.offsets_retention_check_interval_ms;
                    self.expire_offsets(&mut st, storage, now);
                }
            }
            if fired {
                self.changed.notify_all();
            }
            let next = st.groups.values().filter_map(Group::next_deadline).min().unwrap_or(i64::MAX);
            let next = next.min(st.next_retention_check);
            let sleep = (next - now_ms()).clamp(1, 1000) as u64;
            st = self.changed.wait_timeout(st, Duration::from_millis(sleep)).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Runs one offset expiration pass at `now` (what the timer loop does every
    /// `offsets.retention.check.interval.ms`).
    pub fn expire_offsets_now(&self, storage: &dyn OffsetsStorage, now: i64) {
        let mut st = self.lock();
        self.expire_offsets(&mut st, storage, now);
    }

    /// Kafka's `cleanupGroupMetadata` / `removeExpiredOffsets` (KIP-211): offsets with an
    /// explicit expiry past `now` go; the offsets of a group that is Empty (or has no group
    /// management) go `offsets.retention.minutes` after it became Empty (or after the commit).
    /// An Empty group left without offsets is deleted (tombstone). Stable groups keep theirs.
    fn expire_offsets(&self, st: &mut State, storage: &dyn OffsetsStorage, now: i64) {
        let retention = self.config.offsets_retention_ms;
        let group_ids: Vec<String> = st.offsets.keys().cloned().collect();
        for id in group_ids {
            let group_state = st.groups.get(&id).map(|g| (g.state(), g.state_timestamp()));
            let Some(offsets) = st.offsets.get(&id) else { continue };
            let expired: Vec<(String, i32)> = offsets
                .iter()
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
            let mut records: Vec<(Vec<u8>, Option<Vec<u8>>)> = expired
                .iter()
                .filter_map(|(t, p)| OffsetCommitKey::new(id.clone(), t.clone(), *p).encode().ok().map(|k| (k, None)))
                .collect();
            let left = offsets.len() - expired.len();
            let delete_group = left == 0 && matches!(group_state, None | Some((GroupState::Empty, _)));
            if delete_group {
                if let Ok(k) = GroupMetadataKey::new(id.clone()).encode() {
                    records.push((k, None));
                }
            }
            match storage.append(self.partition_for(&id), records, now) {
                Ok(()) => {
                    tracing::info!(group = %id, expired = expired.len(), "expired committed offsets");
                    if let Some(m) = st.offsets.get_mut(&id) {
                        for k in &expired {
                            m.remove(k);
                        }
                    }
                    if delete_group {
                        st.offsets.remove(&id);
                        if let Some(mut g) = st.groups.remove(&id) {
                            g.mark_dead(now);
                        }
                    }
                }
                Err((code, msg)) => tracing::warn!(group = %id, "expiring offsets failed ({code}): {msg}"),
            }
        }
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
    use std::cell::RefCell;

    /// (partition, key, value) of every record appended.
    type Appended = Vec<(i32, Vec<u8>, Option<Vec<u8>>)>;

    #[derive(Default)]
    struct MemStorage {
        records: RefCell<Appended>,
        fail: Option<i16>,
    }

    impl OffsetsStorage for MemStorage {
        fn append(
            &self,
            partition: i32,
            records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
            _now: i64,
        ) -> Result<(), (i16, String)> {
            if let Some(code) = self.fail {
                return Err((code, "injected".into()));
            }
            self.records.borrow_mut().extend(records.into_iter().map(|(k, v)| (partition, k, v)));
            Ok(())
        }
    }

    fn replay(storage: &MemStorage) -> GroupCoordinator {
        let c = GroupCoordinator::new(CoordinatorConfig::default());
        let recs = storage.records.borrow();
        for p in 0..50 {
            let mine = recs
                .iter()
                .filter(|(q, _, _)| *q == p)
                .map(|(_, k, v)| (Some(Bytes::from(k.clone())), v.clone().map(Bytes::from)));
            c.load_records(p, mine, now_ms());
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
        assert_eq!(storage.records.borrow().len(), 2);
        assert!(storage.records.borrow().iter().all(|(p, _, _)| *p == partition_for("g", 50)));
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
        // The initial delay is 0, but the join completes on the timer: run it on a thread.
        std::thread::scope(|s| {
            let timer_storage = MemStorage::default();
            let c2 = &c;
            s.spawn(move || c2.run_timers(&timer_storage));
            let r = c.join_group(&storage, "g", join.clone());
            assert_eq!((r.error, r.generation_id), (errors::NONE, 1));
            assert!(r.member_id.starts_with("client-") && r.member_id.len() == "client-".len() + 36);
            assert_eq!(r.leader, r.member_id);
            let request = SyncRequest {
                member: MemberRef { member_id: &r.member_id, group_instance_id: None, generation_id: 1 },
                protocol_type: None,
                protocol_name: None,
                assignments: vec![(r.member_id.clone(), Bytes::from_static(b"asg"))],
            };
            let s1 = c.sync_group(&storage, "g", request);
            assert_eq!((s1.error, s1.assignment.as_ref()), (errors::NONE, &b"asg"[..]));
            let d = c.describe_group("g");
            assert_eq!((d.state, d.protocol.as_str(), d.members.len()), ("Stable", "range", 1));
            assert_eq!(
                c.heartbeat("g", MemberRef { member_id: &r.member_id, group_instance_id: None, generation_id: 1 }),
                errors::NONE
            );
            // A bad session timeout is refused before anything else.
            let bad = c.join_group(&storage, "g", JoinRequest { session_timeout_ms: 1000, ..join.clone() });
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
            assert_eq!(
                c.leave_group(&storage, "g", &[(r.member_id.clone(), None)]),
                (errors::NONE, vec![errors::NONE])
            );
            assert_eq!(c.describe_group("g").state, "Empty");
            assert_eq!(c.delete_groups(&storage, &["g".into()]), vec![errors::NONE]);
            assert_eq!(replay(&storage).describe_group("g").state, "Dead");
            c.shutdown();
        });
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
        let tombstones = storage.records.borrow().iter().filter(|(_, _, v)| v.is_none()).count();
        assert_eq!(tombstones, 4);
        assert_eq!(replay(&storage).fetch_offsets("g", None).unwrap(), vec![]);
    }
}
