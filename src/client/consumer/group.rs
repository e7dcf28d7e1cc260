//! Group membership (Kafka's `AbstractCoordinator` / `ConsumerCoordinator`): finding the
//! coordinator, JoinGroup (with the KIP-394 member id retry) and SyncGroup, the background
//! heartbeat thread, offset commits and fetches, LeaveGroup.
//!
//! The heartbeat thread has its own connection to the coordinator, so a heartbeat never waits
//! behind a long-poll Fetch or a JoinGroup of the application thread. It only beats while the
//! member is stable, and reports what it learns through [`HeartbeatState`]:
//! REBALANCE_IN_PROGRESS asks for a rejoin; ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
//! FENCED_INSTANCE_ID mean the partitions are lost. It also enforces `max.poll.interval.ms`
//! (KIP-62): when the application has not called `poll` for that long, it sends LeaveGroup (a
//! static member just stops beating) and the partitions count as lost at the next `poll`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, RequestKind, ResponseKind, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::error::ConsumerError;
use crate::client::assignor::{build_subscription, Assignor, JoinState, RebalanceProtocol, TopicPartition};
use crate::client::connection::{ClientError, KafkaConnection};
use crate::protocol::consumer_protocol::CONSUMER_PROTOCOL_TYPE;

/// Kafka error codes the membership reacts to.
pub(crate) mod codes {
    /// COORDINATOR_LOAD_IN_PROGRESS.
    pub(crate) const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    /// COORDINATOR_NOT_AVAILABLE.
    pub(crate) const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    /// NOT_COORDINATOR.
    pub(crate) const NOT_COORDINATOR: i16 = 16;
    /// ILLEGAL_GENERATION.
    pub(crate) const ILLEGAL_GENERATION: i16 = 22;
    /// UNKNOWN_MEMBER_ID.
    pub(crate) const UNKNOWN_MEMBER_ID: i16 = 25;
    /// REBALANCE_IN_PROGRESS.
    pub(crate) const REBALANCE_IN_PROGRESS: i16 = 27;
    /// MEMBER_ID_REQUIRED (KIP-394).
    pub(crate) const MEMBER_ID_REQUIRED: i16 = 79;
    /// FENCED_INSTANCE_ID (KIP-345).
    pub(crate) const FENCED_INSTANCE_ID: i16 = 82;
}
use codes::*;

/// Consumer protocol version of the subscriptions sent (v3: rack id; older leaders ignore the
/// trailing fields).
const SUBSCRIPTION_VERSION: i16 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// What the application thread and the heartbeat thread share.
#[derive(Debug)]
pub(crate) struct HeartbeatState {
    pub member_id: String,
    pub generation: i32,
    /// Joined and synced: the heartbeat thread beats.
    pub stable: bool,
    /// A rebalance is needed (the next `poll` rejoins).
    pub rejoin: bool,
    /// The partitions are lost (the generation is gone): `on_partitions_lost` at the next poll.
    pub lost: bool,
    /// A fatal error the heartbeat thread saw (FENCED_INSTANCE_ID).
    pub fatal: Option<i16>,
    /// When the application last called `poll`.
    pub last_poll: Instant,
    /// The coordinator's address.
    pub coordinator: Option<String>,
    /// Ask the thread to stop.
    pub stop: bool,
}

/// The settings of the membership.
#[derive(Clone)]
pub(crate) struct GroupSettings {
    pub group_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub heartbeat_interval: Duration,
    pub request_timeout: Duration,
    pub assignors: Vec<&'static dyn Assignor>,
    /// `retry.backoff.ms`: the first wait before rejoining after a retriable error.
    pub retry_backoff: Duration,
    /// `retry.backoff.max.ms`: the longest such wait (KIP-580).
    pub retry_backoff_max: Duration,
}

/// A JoinGroup that succeeded.
#[derive(Debug)]
pub(crate) struct Joined {
    pub generation: i32,
    pub member_id: String,
    pub protocol: String,
    /// The members with their metadata, when this member is the leader.
    pub leader_members: Option<Vec<(String, Option<String>, Bytes)>>,
}

/// Membership of one group.
pub(crate) struct Membership {
    pub settings: GroupSettings,
    /// The protocol every configured assignor supports (cooperative only if all do).
    pub protocol: RebalanceProtocol,
    pub state: Arc<Mutex<HeartbeatState>>,
    conn: Option<KafkaConnection>,
    heartbeat: Option<JoinHandle<()>>,
    max_poll_interval: Duration,
    pending_commits: VecDeque<(i32, i16)>,
    /// Partitions owned (the last assignment minus what was revoked).
    pub owned: Vec<TopicPartition>,
    /// Whether an assignment was ever received (`JoinState::assigned`).
    pub ever_assigned: bool,
    /// Retriable JoinGroup/SyncGroup failures in a row (the exponent of the backoff).
    failures: u32,
    /// When the current run of failed rebalance attempts began (`None` after a success).
    pub failing_since: Option<Instant>,
    /// No rejoin before this instant (the backoff after a retriable error).
    pub retry_at: Option<Instant>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").field("group_id", &self.settings.group_id).field("owned", &self.owned).finish()
    }
}

impl Membership {
    pub(crate) fn new(settings: GroupSettings, max_poll_interval: Duration) -> Self {
        let protocol =
            if settings.assignors.iter().all(|a| a.supported_protocols().contains(&RebalanceProtocol::Cooperative)) {
                RebalanceProtocol::Cooperative
            } else {
                RebalanceProtocol::Eager
            };
        Membership {
            settings,
            protocol,
            state: Arc::new(Mutex::new(HeartbeatState {
                member_id: String::new(),
                generation: -1,
                stable: false,
                rejoin: true,
                lost: false,
                fatal: None,
                last_poll: Instant::now(),
                coordinator: None,
                stop: false,
            })),
            conn: None,
            heartbeat: None,
            max_poll_interval,
            pending_commits: VecDeque::new(),
            owned: Vec::new(),
            ever_assigned: false,
            failures: 0,
            failing_since: None,
            retry_at: None,
        }
    }

    /// The wait before the next attempt after a retriable error, and counts the failure:
    /// `retry.backoff.ms` doubled per failure in a row up to `retry.backoff.max.ms`, with
    /// +/-20 % jitter (Kafka's `ExponentialBackoff` as `AbstractCoordinator` uses it, KIP-580).
    pub(crate) fn next_backoff(&mut self) -> Duration {
        let d = backoff(self.settings.retry_backoff, self.settings.retry_backoff_max, self.failures, jitter());
        self.failures = self.failures.saturating_add(1);
        self.failing_since.get_or_insert_with(Instant::now);
        d
    }

    /// A rebalance completed: the next failure backs off from `retry.backoff.ms` again.
    pub(crate) fn reset_backoff(&mut self) {
        self.failures = 0;
        self.failing_since = None;
        self.retry_at = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeartbeatState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a call of `poll` (for `max.poll.interval.ms`).
    pub(crate) fn note_poll(&self) {
        self.lock().last_poll = Instant::now();
    }

    /// Whether a rebalance is needed.
    pub(crate) fn needs_rejoin(&self) -> bool {
        let st = self.lock();
        st.rejoin || !st.stable
    }

    /// Takes the "partitions lost" flag, resetting member id and generation when set.
    pub(crate) fn take_lost(&self) -> bool {
        let mut st = self.lock();
        let lost = std::mem::take(&mut st.lost);
        if lost {
            st.generation = -1;
            st.member_id.clear();
        }
        lost
    }

    /// The member id and generation (for commits).
    pub(crate) fn identity(&self) -> (String, i32) {
        let st = self.lock();
        (st.member_id.clone(), st.generation)
    }

    /// Marks the member as stable in `generation` (the heartbeat thread beats).
    pub(crate) fn set_stable(&self) {
        let mut st = self.lock();
        st.stable = true;
    }

    /// Asks for a rebalance at the next poll (cooperative follow-up, changed subscription).
    pub(crate) fn request_rejoin(&self) {
        let mut st = self.lock();
        st.rejoin = true;
    }

    /// The coordinator connection, finding the coordinator first when unknown.
    fn coordinator(&mut self, bootstrap: &mut KafkaConnection) -> Result<&mut KafkaConnection, ConsumerError> {
        if self.conn.is_none() {
            let deadline = Instant::now() + self.settings.request_timeout;
            let addr = loop {
                let version = bootstrap.version(ApiKey::FindCoordinator, (0, 3))?;
                let req = FindCoordinatorRequest::default().with_key(s(&self.settings.group_id)).with_key_type(0);
                let ResponseKind::FindCoordinator(r) =
                    bootstrap.call(ApiKey::FindCoordinator, version, RequestKind::FindCoordinator(req))?
                else {
                    unreachable!()
                };
                if r.error_code == 0 {
                    break format!("{}:{}", r.host, r.port);
                }
                if Instant::now() > deadline
                    || !matches!(
                        r.error_code,
                        COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS | NOT_COORDINATOR
                    )
                {
                    return Err(ConsumerError::Kafka {
                        context: format!("FindCoordinator {}", self.settings.group_id),
                        code: r.error_code,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let conn =
                KafkaConnection::connect(addr.as_str(), &self.settings.client_id, self.settings.request_timeout)?;
            self.lock().coordinator = Some(addr);
            self.conn = Some(conn);
        }
        self.drain_commits(true)?;
        Ok(self.conn.as_mut().expect("connected"))
    }

    /// Forgets the coordinator (NOT_COORDINATOR and friends, or a broken connection).
    pub(crate) fn coordinator_lost(&mut self) {
        self.conn = None;
        self.pending_commits.clear();
    }

    fn start_heartbeat(&mut self) {
        if self.heartbeat.is_some() {
            return;
        }
        let state = Arc::clone(&self.state);
        let settings = self.settings.clone();
        let max_poll_interval = self.max_poll_interval;
        self.heartbeat = Some(
            std::thread::Builder::new()
                .name(format!("heartbeat-{}", self.settings.group_id))
                .spawn(move || heartbeat_loop(state, settings, max_poll_interval))
                .expect("spawning the heartbeat thread"),
        );
    }

    /// JoinGroup: retries MEMBER_ID_REQUIRED (with the given member id), UNKNOWN_MEMBER_ID
    /// (with none), REBALANCE_IN_PROGRESS and coordinator errors, until the request timeout
    /// plus the rebalance timeout passed.
    pub(crate) fn join(
        &mut self,
        bootstrap: &mut KafkaConnection,
        topics: &[String],
        rack: Option<&str>,
    ) -> Result<Joined, ConsumerError> {
        {
            let mut st = self.lock();
            st.stable = false;
            st.rejoin = false;
        }
        self.start_heartbeat();
        let deadline = Instant::now()
            + self.settings.request_timeout
            + Duration::from_millis(self.settings.rebalance_timeout_ms.max(0) as u64);
        let owned = self.owned.clone();
        loop {
            self.coordinator(bootstrap)?;
            let (member_id, generation) = self.identity();
            let assigned = self.ever_assigned.then_some(owned.as_slice());
            let mut protocols = Vec::new();
            for a in &self.settings.assignors {
                let sub = build_subscription(
                    *a,
                    &JoinState { topics, assigned, generation, rack_id: rack },
                    SUBSCRIPTION_VERSION,
                );
                let bytes =
                    sub.encode().map_err(|e| ConsumerError::Protocol(format!("encoding a subscription: {e}")))?;
                protocols
                    .push(JoinGroupRequestProtocol::default().with_name(s(a.name())).with_metadata(Bytes::from(bytes)));
            }
            let req = JoinGroupRequest::default()
                .with_group_id(GroupId(s(&self.settings.group_id)))
                .with_session_timeout_ms(self.settings.session_timeout_ms)
                .with_rebalance_timeout_ms(self.settings.rebalance_timeout_ms)
                .with_member_id(s(&member_id))
                .with_group_instance_id(self.settings.instance_id.as_deref().map(s))
                .with_protocol_type(s(CONSUMER_PROTOCOL_TYPE))
                .with_protocols(protocols);
            let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
            let response = self.call_long(ApiKey::JoinGroup, (0, 7), RequestKind::JoinGroup(req), wait);
            let r = match response {
                Ok(ResponseKind::JoinGroup(r)) => r,
                Ok(_) => unreachable!(),
                Err(e) => return Err(e),
            };
            match r.error_code {
                0 => {
                    let member_id = r.member_id.to_string();
                    {
                        let mut st = self.lock();
                        st.member_id = member_id.clone();
                        st.generation = r.generation_id;
                    }
                    let protocol = r.protocol_name.map(|p| p.to_string()).unwrap_or_default();
                    let leader_members = (r.leader.as_str() == member_id).then(|| {
                        r.members
                            .into_iter()
                            .map(|m| (m.member_id.to_string(), m.group_instance_id.map(|i| i.to_string()), m.metadata))
                            .collect()
                    });
                    return Ok(Joined { generation: r.generation_id, member_id, protocol, leader_members });
                }
                MEMBER_ID_REQUIRED => self.lock().member_id = r.member_id.to_string(),
                UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                    let mut st = self.lock();
                    st.member_id.clear();
                    st.generation = -1;
                }
                REBALANCE_IN_PROGRESS => {}
                COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR | COORDINATOR_LOAD_IN_PROGRESS => {
                    self.coordinator_lost();
                    let wait = self.next_backoff();
                    std::thread::sleep(wait.min(deadline.saturating_duration_since(Instant::now())));
                }
                code => {
                    return Err(ConsumerError::Kafka { context: format!("JoinGroup {}", self.settings.group_id), code })
                }
            }
            if Instant::now() > deadline {
                return Err(ConsumerError::Kafka {
                    context: format!("JoinGroup {}: gave up retrying", self.settings.group_id),
                    code: r.error_code,
                });
            }
        }
    }

    /// SyncGroup; `Ok(Err(code))` for REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and
    /// UNKNOWN_MEMBER_ID (the caller rejoins), `Ok(Ok(bytes))` with this member's assignment.
    pub(crate) fn sync(
        &mut self,
        joined: &Joined,
        assignments: BTreeMap<String, Vec<u8>>,
    ) -> Result<Result<Bytes, i16>, ConsumerError> {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&self.settings.group_id)))
            .with_generation_id(joined.generation)
            .with_member_id(s(&joined.member_id))
            .with_group_instance_id(self.settings.instance_id.as_deref().map(s))
            .with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)))
            .with_protocol_name(Some(s(&joined.protocol)))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default().with_member_id(s(&m)).with_assignment(Bytes::from(a))
                    })
                    .collect(),
            );
        let wait =
            self.settings.request_timeout + Duration::from_millis(self.settings.rebalance_timeout_ms.max(0) as u64);
        let ResponseKind::SyncGroup(r) =
            self.call_long(ApiKey::SyncGroup, (0, 5), RequestKind::SyncGroup(req), wait)?
        else {
            unreachable!()
        };
        match r.error_code {
            0 => Ok(Ok(r.assignment)),
            REBALANCE_IN_PROGRESS => Ok(Err(r.error_code)),
            UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                let mut st = self.lock();
                st.member_id.clear();
                st.generation = -1;
                Ok(Err(r.error_code))
            }
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => {
                self.coordinator_lost();
                Ok(Err(r.error_code))
            }
            code => Err(ConsumerError::Kafka { context: format!("SyncGroup {}", self.settings.group_id), code }),
        }
    }

    /// A call with a long read timeout (JoinGroup, SyncGroup wait for the other members).
    fn call_long(
        &mut self,
        api: ApiKey,
        range: (i16, i16),
        body: RequestKind,
        wait: Duration,
    ) -> Result<ResponseKind, ConsumerError> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(ConsumerError::IllegalState("no coordinator connection".into()));
        };
        let version = conn.version(api, range)?;
        conn.set_read_timeout(Some(wait))?;
        let result = conn.call(api, version, body);
        let restore = conn.set_read_timeout(Some(self.settings.request_timeout));
        match result {
            Ok(r) => {
                restore?;
                Ok(r)
            }
            Err(e) => {
                self.coordinator_lost();
                Err(e.into())
            }
        }
    }

    /// Makes sure the coordinator is known and connected.
    pub(crate) fn ensure_coordinator(&mut self, bootstrap: &mut KafkaConnection) -> Result<(), ConsumerError> {
        self.coordinator(bootstrap).map(|_| ())
    }

    /// Receives the answers of asynchronous commits (all when `block`, else those already
    /// arrived); failures are logged, as Kafka's default `OffsetCommitCallback` does.
    pub(crate) fn drain_commits(&mut self, block: bool) -> Result<(), ConsumerError> {
        while let Some(&(id, version)) = self.pending_commits.front() {
            let Some(conn) = self.conn.as_mut() else {
                self.pending_commits.clear();
                return Ok(());
            };
            if !block && !conn.wait_readable(Duration::from_millis(1), Some(self.settings.request_timeout))? {
                return Ok(());
            }
            self.pending_commits.pop_front();
            match conn.receive(ApiKey::OffsetCommit, version, id) {
                Ok(ResponseKind::OffsetCommit(r)) => {
                    if let Err(e) = self.commit_result(&r) {
                        tracing::warn!("asynchronous commit failed: {e}");
                    }
                }
                Ok(_) => unreachable!(),
                Err(e) => {
                    self.coordinator_lost();
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    fn commit_result(&self, r: &kafka_protocol::messages::OffsetCommitResponse) -> Result<(), ConsumerError> {
        let mut failed = Vec::new();
        for t in &r.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    failed.push((t.name.to_string(), p.partition_index, p.error_code));
                }
            }
        }
        let Some(&(_, _, code)) = failed.first() else { return Ok(()) };
        match code {
            REBALANCE_IN_PROGRESS => self.lock().rejoin = true,
            UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION => {
                let mut st = self.lock();
                st.rejoin = true;
                st.lost = true;
            }
            _ => {}
        }
        Err(ConsumerError::CommitFailed { partitions: failed })
    }

    /// OffsetCommit of `offsets` (the next offsets to read) with the current generation;
    /// `sync` waits for the answer, else it is received later ([`Self::drain_commits`]).
    ///
    /// Errors: [`ConsumerError::CommitFailed`] naming the partitions and codes (a rebalance
    /// began or the generation is gone: the next poll rejoins).
    pub(crate) fn commit(
        &mut self,
        bootstrap: &mut KafkaConnection,
        offsets: &BTreeMap<TopicPartition, i64>,
        sync: bool,
    ) -> Result<(), ConsumerError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let (member_id, generation) = self.identity();
        let instance_id = self.settings.instance_id.clone();
        let group_id = self.settings.group_id.clone();
        let conn = self.coordinator(bootstrap)?;
        let version = conn.version(ApiKey::OffsetCommit, (2, 8))?;
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for ((topic, partition), offset) in offsets {
            if topics.last().is_none_or(|t| t.name.as_str() != topic) {
                topics.push(OffsetCommitRequestTopic::default().with_name(TopicName(s(topic))));
            }
            topics.last_mut().expect("pushed").partitions.push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(s(""))),
            );
        }
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(&group_id)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(&member_id))
            .with_group_instance_id(instance_id.as_deref().map(s))
            .with_retention_time_ms(-1)
            .with_topics(topics);
        let sent = conn.send(ApiKey::OffsetCommit, version, RequestKind::OffsetCommit(req));
        let id = match sent {
            Ok(id) => id,
            Err(e) => {
                self.coordinator_lost();
                return Err(e.into());
            }
        };
        self.pending_commits.push_back((id, version));
        if sync {
            // Answers come in order: the last one is ours; earlier async ones are logged.
            let last = self.pending_commits.pop_back().expect("pushed");
            self.drain_commits(true)?;
            let conn = self.conn.as_mut().ok_or(ConsumerError::IllegalState("coordinator lost".into()))?;
            match conn.receive(ApiKey::OffsetCommit, last.1, last.0) {
                Ok(ResponseKind::OffsetCommit(r)) => self.commit_result(&r)?,
                Ok(_) => unreachable!(),
                Err(e) => {
                    self.coordinator_lost();
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// OffsetFetch: the committed offsets of `partitions` (`None` when there is none).
    pub(crate) fn committed(
        &mut self,
        bootstrap: &mut KafkaConnection,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>, ConsumerError> {
        let group_id = self.settings.group_id.clone();
        let conn = self.coordinator(bootstrap)?;
        let version = conn.version(ApiKey::OffsetFetch, (1, 7))?;
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            by_topic.entry(t).or_default().push(*p);
        }
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(&group_id)))
            .with_require_stable(true)
            .with_topics(Some(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default().with_name(TopicName(s(t))).with_partition_indexes(ps)
                    })
                    .collect(),
            ));
        let r = match conn.call(ApiKey::OffsetFetch, version, RequestKind::OffsetFetch(req)) {
            Ok(ResponseKind::OffsetFetch(r)) => r,
            Ok(_) => unreachable!(),
            Err(e) => {
                self.coordinator_lost();
                return Err(e.into());
            }
        };
        if r.error_code != 0 {
            if matches!(r.error_code, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE) {
                self.coordinator_lost();
            }
            return Err(ConsumerError::Kafka { context: format!("OffsetFetch {group_id}"), code: r.error_code });
        }
        let mut out: BTreeMap<TopicPartition, Option<i64>> = partitions.iter().map(|tp| (tp.clone(), None)).collect();
        for t in &r.topics {
            for p in &t.partitions {
                if p.error_code != 0 {
                    return Err(ConsumerError::Kafka {
                        context: format!("OffsetFetch {group_id} {}-{}", t.name.as_str(), p.partition_index),
                        code: p.error_code,
                    });
                }
                if p.committed_offset >= 0 {
                    out.insert((t.name.to_string(), p.partition_index), Some(p.committed_offset));
                }
            }
        }
        Ok(out)
    }

    /// LeaveGroup (dynamic members only, as Kafka's `close()`), then stops the heartbeat thread.
    pub(crate) fn leave(&mut self, bootstrap: &mut KafkaConnection) -> Result<(), ConsumerError> {
        let (member_id, _) = self.identity();
        let mut result = Ok(());
        if self.settings.instance_id.is_none() && !member_id.is_empty() {
            {
                let mut st = self.lock();
                st.stable = false;
            }
            let group_id = self.settings.group_id.clone();
            result = self.coordinator(bootstrap).and_then(|conn| {
                let version = conn.version(ApiKey::LeaveGroup, (0, 4))?;
                let ResponseKind::LeaveGroup(r) = conn.call(
                    ApiKey::LeaveGroup,
                    version,
                    RequestKind::LeaveGroup(leave_request(&group_id, &member_id, version)),
                )?
                else {
                    unreachable!()
                };
                match r.error_code {
                    0 | UNKNOWN_MEMBER_ID => Ok(()),
                    code => Err(ConsumerError::Kafka { context: format!("LeaveGroup {group_id}"), code }),
                }
            });
            let mut st = self.lock();
            st.member_id.clear();
            st.generation = -1;
        }
        self.stop_heartbeat();
        result
    }

    /// Lets a later join start the heartbeat thread again (after [`Membership::leave`]).
    pub(crate) fn lock_reset_stop(&self) {
        self.lock().stop = false;
    }

    /// Stops the heartbeat thread and waits for it.
    pub(crate) fn stop_heartbeat(&mut self) {
        self.lock().stop = true;
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
    }

    /// A fatal error seen by the heartbeat thread.
    pub(crate) fn fatal(&self) -> Option<i16> {
        self.lock().fatal
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop_heartbeat();
    }
}

/// The backoff after `failures` failures in a row: `base * 2^failures`, at most `max`, scaled
/// by `jitter` (in 0.8..=1.2; Kafka's `ExponentialBackoff` with jitter 0.2), never above `max`.
fn backoff(base: Duration, max: Duration, failures: u32, jitter: f64) -> Duration {
    let exp = base.saturating_mul(1u32.checked_shl(failures.min(31)).unwrap_or(u32::MAX)).min(max);
    exp.mul_f64(jitter.clamp(0.8, 1.2)).min(max.max(base))
}

/// A jitter factor in 0.8..1.2 (from the standard library's random hasher keys; no dependency).
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(0);
    0.8 + 0.4 * (h.finish() % 1000) as f64 / 1000.0
}

/// LeaveGroup at `version`: v0-2 name the member, v3+ list it in `members` (KIP-345).
fn leave_request(group_id: &str, member_id: &str, version: i16) -> LeaveGroupRequest {
    let r = LeaveGroupRequest::default().with_group_id(GroupId(s(group_id)));
    if version >= 3 {
        r.with_members(vec![MemberIdentity::default().with_member_id(s(member_id))])
    } else {
        r.with_member_id(s(member_id))
    }
}

/// The heartbeat thread: beats every `heartbeat.interval.ms` while stable, on its own
/// connection; enforces `max.poll.interval.ms`.
fn heartbeat_loop(state: Arc<Mutex<HeartbeatState>>, settings: GroupSettings, max_poll_interval: Duration) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let mut conn: Option<(String, KafkaConnection)> = None;
    let mut last_beat: Option<Instant> = None;
    let tick = Duration::from_millis(20).min(settings.heartbeat_interval);
    loop {
        std::thread::sleep(tick);
        let (member_id, generation, addr, last_poll) = {
            let st = lock();
            if st.stop {
                return;
            }
            if !st.stable || st.coordinator.is_none() {
                last_beat = None;
                continue;
            }
            (st.member_id.clone(), st.generation, st.coordinator.clone().expect("checked"), st.last_poll)
        };
        if conn.as_ref().is_some_and(|(a, _)| a != &addr) {
            conn = None;
        }
        let connect = |conn: &mut Option<(String, KafkaConnection)>| -> Result<(), ClientError> {
            if conn.is_none() {
                let c = KafkaConnection::connect(addr.as_str(), &settings.client_id, settings.request_timeout)?;
                *conn = Some((addr.clone(), c));
            }
            Ok(())
        };
        if last_poll.elapsed() > max_poll_interval {
            tracing::warn!(
                "consumer poll timeout: poll() was not called for {max_poll_interval:?} (max.poll.interval.ms); \
                 leaving group {}",
                settings.group_id
            );
            if settings.instance_id.is_none() && connect(&mut conn).is_ok() {
                let (_, c) = conn.as_mut().expect("connected");
                let sent = c.version(ApiKey::LeaveGroup, (0, 4)).and_then(|v| {
                    c.call(
                        ApiKey::LeaveGroup,
                        v,
                        RequestKind::LeaveGroup(leave_request(&settings.group_id, &member_id, v)),
                    )
                });
                if sent.is_err() {
                    conn = None;
                }
            }
            let mut st = lock();
            if st.generation == generation && st.member_id == member_id {
                st.stable = false;
                st.rejoin = true;
                st.lost = true;
            }
            continue;
        }
        if last_beat.is_some_and(|t| t.elapsed() < settings.heartbeat_interval) {
            continue;
        }
        last_beat = Some(Instant::now());
        if connect(&mut conn).is_err() {
            conn = None;
            continue;
        }
        let (_, c) = conn.as_mut().expect("connected");
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(&settings.group_id)))
            .with_generation_id(generation)
            .with_member_id(s(&member_id))
            .with_group_instance_id(settings.instance_id.as_deref().map(s));
        let answer = c
            .version(ApiKey::Heartbeat, (0, 4))
            .and_then(|v| c.call(ApiKey::Heartbeat, v, RequestKind::Heartbeat(req)));
        let code = match answer {
            Ok(ResponseKind::Heartbeat(r)) => r.error_code,
            Ok(_) => unreachable!(),
            Err(e) => {
                tracing::debug!("heartbeat failed: {e}");
                conn = None;
                continue;
            }
        };
        let mut st = lock();
        if st.generation != generation || st.member_id != member_id || !st.stable {
            continue;
        }
        match code {
            0 => {}
            REBALANCE_IN_PROGRESS => st.rejoin = true,
            ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID => {
                st.rejoin = true;
                st.lost = true;
                st.stable = false;
            }
            FENCED_INSTANCE_ID => {
                st.fatal = Some(code);
                st.stable = false;
            }
            // The application thread's next request finds the new coordinator (and publishes
            // its address here).
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR | COORDINATOR_LOAD_IN_PROGRESS => st.rejoin = true,
            other => tracing::warn!("heartbeat of group {}: Kafka error {other}", settings.group_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_retry_backoff_up_to_the_max() {
        let (base, max) = (Duration::from_millis(100), Duration::from_millis(1000));
        let plain: Vec<u128> = (0..7).map(|n| backoff(base, max, n, 1.0).as_millis()).collect();
        assert_eq!(plain, vec![100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(backoff(base, max, 0, 0.8), Duration::from_millis(80));
        assert_eq!(backoff(base, max, 1, 1.2), Duration::from_millis(240));
        assert_eq!(backoff(base, max, 9, 1.2), max, "jitter never goes past the max");
        assert_eq!(backoff(base, max, u32::MAX, 1.0), max);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.8..=1.2).contains(&j), "{j}");
        }
    }
}
