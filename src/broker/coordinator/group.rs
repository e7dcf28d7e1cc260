//! One classic consumer group (the JoinGroup / SyncGroup protocol) as a pure state machine:
//! Kafka's `ClassicGroup` and the classic-group half of `GroupMetadataManager` (Kafka 4.x;
//! `GroupCoordinator` / `GroupMetadata` in Kafka 2.x-3.x).
//!
//! Nothing here blocks, reads a clock or writes a log. Every call takes the current time in
//! milliseconds (`now`), and a request that Kafka parks in a purgatory (JoinGroup until the
//! rebalance completes, a follower's SyncGroup until the leader's assignment) gets a [`Ticket`];
//! the answer for that ticket appears later in [`Group::take_completion`] ([`Group::answers_made`]
//! counts the answers made, so the owner knows when to look). Timers (heartbeat expiry,
//! pending-member expiry, the rebalance deadline and `group.initial.rebalance.delay.ms`) are
//! deadlines that [`Group::tick`] fires; [`Group::next_deadline`] says when to call it. The owner
//! ([`super::runtime::GroupCoordinator`]) holds the group behind its shard's lock, wakes the
//! group's waiters when it made answers, and persists the group to `__consumer_offsets` whenever
//! [`Group::take_store_request`] says so.
//!
//! ```text
//!            join (first)                all joined / rebalance timeout       leader's SyncGroup
//!   Empty ----------------> PreparingRebalance -----------------------> CompletingRebalance ------> Stable
//!     ^                        ^   | no member left                          |                     |
//!     |                        |   +--> Empty (generation + 1)               | join/leave/expiry   |
//!     |                        +---------------------------------------------+---------------------+
//!   Dead: the group was deleted (DeleteGroups) or unloaded; every request gets COORDINATOR_NOT_AVAILABLE.
//! ```
//!
//! Rules kept from Kafka (with their source):
//! - the first member to join leads; a leader that does not rejoin is replaced by a member that
//!   did (`maybeElectNewJoinedLeader`);
//! - the protocol is chosen by vote among those every member supports, each member voting for
//!   its most preferred candidate (`ClassicGroup.selectProtocol`; ties go to the candidate first
//!   in the leader's preference, where Kafka's choice is unspecified);
//! - the rebalance completes when every member has rejoined and no KIP-394 pending member is
//!   left, or at the rebalance timeout (the largest of the members' `rebalance.timeout.ms`);
//!   members that did not rejoin by then are removed;
//! - a rebalance of an Empty group first waits `group.initial.rebalance.delay.ms`, extended by the
//!   same delay while new members keep arriving, never beyond the rebalance timeout
//!   (`InitialDelayedJoin`);
//! - REBALANCE_IN_PROGRESS is only answered when a rebalance really began after the member's
//!   generation (Heartbeat and OffsetCommit in PreparingRebalance, SyncGroup in
//!   PreparingRebalance, pending SyncGroups when a new rebalance starts);
//! - KIP-394: JoinGroup v4+ with an empty member id and no `group.instance.id` gets
//!   MEMBER_ID_REQUIRED and a member id, and is pending until it rejoins or its session timeout
//!   passes; pending members never count as members;
//! - KIP-345: a static member (`group.instance.id`) that rejoins with an unknown member id takes
//!   its old place with a new member id; in Stable no rebalance happens unless the chosen
//!   protocol would change; an old member id still in use is fenced (FENCED_INSTANCE_ID);
//! - a new member's session is `NEW_MEMBER_JOIN_TIMEOUT_MS` (5 minutes) until its first join
//!   completes (it cannot heartbeat before that); a member awaiting its JoinGroup or SyncGroup
//!   answer is kept alive (`MemberMetadata.shouldKeepAlive`).

use std::collections::{HashMap, HashSet};

use bytes::Bytes;

use crate::broker::errors;

/// Identifies a parked JoinGroup or SyncGroup request; its answer appears in
/// [`Group::take_completion`].
pub(crate) type Ticket = u64;

/// Kafka's `NewMemberJoinTimeoutMs` (ms): the session of a member whose first JoinGroup has not
/// completed yet.
pub(crate) const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// Group coordinator configuration, with Kafka's names and defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms` (6000): smaller session timeouts get INVALID_SESSION_TIMEOUT.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (1800000): larger session timeouts get INVALID_SESSION_TIMEOUT.
    pub max_session_timeout_ms: i32,
    /// `group.max.size` (Integer.MAX_VALUE): members beyond it get GROUP_MAX_SIZE_REACHED.
    pub max_size: usize,
    /// `group.initial.rebalance.delay.ms` (3000): how long the first rebalance of an Empty group
    /// waits for more members.
    pub initial_rebalance_delay_ms: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as usize,
            initial_rebalance_delay_ms: 3000,
        }
    }
}

/// The states of a classic group (Kafka's `ClassicGroupState`); [`GroupState::name`] gives the
/// names DescribeGroups and ListGroups report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GroupState {
    /// No members; committed offsets may remain.
    Empty,
    /// A rebalance started: waiting for members to (re)join.
    PreparingRebalance,
    /// The join completed: waiting for the leader's assignment (SyncGroup).
    CompletingRebalance,
    /// Every member has its assignment.
    Stable,
    /// Deleted or unloaded.
    Dead,
}

impl GroupState {
    /// Kafka's name of the state (`Empty`, `PreparingRebalance`, `CompletingRebalance`,
    /// `Stable`, `Dead`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup request, as the state machine needs it (all versions).
#[derive(Clone, Debug, Default)]
pub(crate) struct JoinRequest {
    /// The member id the client has (`""` when it has none yet).
    pub member_id: String,
    /// `group.instance.id` (KIP-345), v5+.
    pub group_instance_id: Option<String>,
    /// JoinGroup v4+: an empty member id gets MEMBER_ID_REQUIRED (KIP-394).
    pub require_known_member_id: bool,
    /// JoinGroup v9+: the leader of a static group may be told to skip the assignment (KIP-814).
    pub supports_skip_assignment: bool,
    /// The client's `client.id` (prefix of generated member ids).
    pub client_id: String,
    /// The client's address (`/127.0.0.1`).
    pub client_host: String,
    /// `rebalance.timeout.ms` (v1+; v0 uses the session timeout).
    pub rebalance_timeout_ms: i32,
    /// `session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// The protocol type (`consumer`).
    pub protocol_type: String,
    /// The protocols the member supports, most preferred first: (name, metadata).
    pub protocols: Vec<(String, Bytes)>,
}

/// One member as the leader sees it in its JoinGroup response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JoinedMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JoinResult {
    /// Error code (0 = none).
    pub error: i16,
    /// The member's id (new for a first join).
    pub member_id: String,
    /// The generation (-1 on error).
    pub generation_id: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id (`""` when none).
    pub leader: String,
    /// KIP-814: the (static) leader must not compute a new assignment.
    pub skip_assignment: bool,
    /// Every member with its metadata, for the leader only.
    pub members: Vec<JoinedMember>,
}

impl JoinResult {
    /// An error answer for `member_id` (generation -1, no protocol, no members).
    pub(crate) fn error(member_id: &str, error: i16) -> Self {
        JoinResult {
            error,
            member_id: member_id.to_string(),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            skip_assignment: false,
            members: Vec::new(),
        }
    }
}

/// The answer to a SyncGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyncResult {
    /// Error code (0 = none).
    pub error: i16,
    /// The group's protocol type (SyncGroup v5+).
    pub protocol_type: Option<String>,
    /// The chosen protocol (SyncGroup v5+).
    pub protocol_name: Option<String>,
    /// The member's assignment (empty on error).
    pub assignment: Bytes,
}

impl SyncResult {
    /// An error answer (no assignment).
    pub(crate) fn error(error: i16) -> Self {
        SyncResult { error, protocol_type: None, protocol_name: None, assignment: Bytes::new() }
    }
}

/// Who a SyncGroup, Heartbeat or OffsetCommit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberRef<'a> {
    /// The member id (`""` for an OffsetCommit without group management).
    pub member_id: &'a str,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<&'a str>,
    /// The generation the member believes in (-1: none).
    pub generation_id: i32,
}

/// A SyncGroup request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyncRequest<'a> {
    /// The member.
    pub member: MemberRef<'a>,
    /// v5+: the protocol type the member expects (checked).
    pub protocol_type: Option<&'a str>,
    /// v5+: the protocol the member expects (checked).
    pub protocol_name: Option<&'a str>,
    /// The leader's assignment: (member id, assignment); empty from followers.
    pub assignments: Vec<(String, Bytes)>,
}

/// A parked request's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Completion {
    /// A JoinGroup's answer.
    Join(JoinResult),
    /// A SyncGroup's answer.
    Sync(SyncResult),
}

/// The answer to a request: at once, or later for the ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply<T> {
    /// Answer now.
    Now(T),
    /// Wait until [`Group::take_completion`] has the ticket's answer.
    Wait(Ticket),
}

/// A member of the group (Kafka's `ClassicGroupMember`).
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// Member id (`<client.id>-<uuid>`).
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Client address.
    pub client_host: String,
    /// `rebalance.timeout.ms`.
    pub rebalance_timeout_ms: i32,
    /// `session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// Supported protocols, most preferred first (the group keeps the protocol type).
    pub protocols: Vec<(String, Bytes)>,
    /// The current assignment (empty until the leader's SyncGroup).
    pub assignment: Bytes,
    awaiting_join: Option<Ticket>,
    awaiting_sync: Option<Ticket>,
    is_new: bool,
    latest_heartbeat: i64,
    heartbeat_deadline: Option<i64>,
}

impl Member {
    /// The member's metadata for `protocol`.
    pub(crate) fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m)
    }

    /// Whether a JoinGroup of this member is parked.
    pub(crate) fn is_awaiting_join(&self) -> bool {
        self.awaiting_join.is_some()
    }

    fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// Kafka's `shouldKeepAlive(deadline)`.
    fn should_keep_alive(&self, deadline: i64) -> bool {
        if self.awaiting_join.is_some() {
            !self.is_new || self.latest_heartbeat + NEW_MEMBER_JOIN_TIMEOUT_MS > deadline
        } else {
            self.awaiting_sync.is_some() || self.latest_heartbeat + i64::from(self.session_timeout_ms) > deadline
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JoinTimer {
    /// `InitialDelayedJoin`: completes only at `deadline`; may extend itself by `remaining` ms.
    Initial { deadline: i64, delay: i64, remaining: i64 },
    /// `DelayedJoin`: completes when everyone joined, or at `deadline`.
    Rebalance { deadline: i64 },
}

impl JoinTimer {
    fn deadline(self) -> i64 {
        match self {
            JoinTimer::Initial { deadline, .. } | JoinTimer::Rebalance { deadline } => deadline,
        }
    }
}

/// A classic group. See the module documentation.
#[derive(Debug)]
pub(crate) struct Group {
    id: String,
    config: GroupConfig,
    state: GroupState,
    state_timestamp: i64,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    /// In join order (the first is the oldest; Kafka keeps a hash map, the order only picks a
    /// new leader).
    members: Vec<Member>,
    static_members: HashMap<String, String>,
    /// KIP-394 pending member ids and when they expire.
    pending_members: HashMap<String, i64>,
    new_member_added: bool,
    join_timer: Option<JoinTimer>,
    completions: HashMap<Ticket, Completion>,
    /// Tickets whose waiter gave up before their answer was made: the answer is discarded.
    abandoned: HashSet<Ticket>,
    next_ticket: Ticket,
    store_requested: bool,
    /// How many answers to parked requests were made (only grows; see [`Group::answers_made`]).
    answers_made: u64,
}

impl Group {
    /// A new Empty group at generation 0.
    pub(crate) fn new(id: impl Into<String>, config: GroupConfig, now: i64) -> Self {
        Group {
            id: id.into(),
            config,
            state: GroupState::Empty,
            state_timestamp: now,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: Vec::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            new_member_added: false,
            join_timer: None,
            completions: HashMap::new(),
            abandoned: HashSet::new(),
            next_ticket: 1,
            store_requested: false,
            answers_made: 0,
        }
    }

    /// A group as loaded from `__consumer_offsets` (Kafka's `GroupMetadataManager.loadGroup`):
    /// Stable with these members and their assignments, or Empty without members. Every member
    /// must heartbeat within its session timeout from `now`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loaded(
        id: impl Into<String>,
        config: GroupConfig,
        now: i64,
        generation_id: i32,
        protocol_type: Option<String>,
        protocol_name: Option<String>,
        leader_id: Option<String>,
        members: Vec<Member>,
    ) -> Self {
        let mut g = Group::new(id, config, now);
        g.generation_id = generation_id;
        g.protocol_type = protocol_type;
        g.protocol_name = protocol_name;
        for mut m in members {
            m.latest_heartbeat = now;
            m.heartbeat_deadline = Some(now + i64::from(m.session_timeout_ms));
            if let Some(instance) = &m.group_instance_id {
                g.static_members.insert(instance.clone(), m.member_id.clone());
            }
            g.members.push(m);
        }
        g.leader_id =
            leader_id.filter(|l| g.member(l).is_some()).or_else(|| g.members.first().map(|m| m.member_id.clone()));
        if !g.members.is_empty() {
            g.state = GroupState::Stable;
        }
        g
    }

    /// A member as stored in group metadata (for [`Group::loaded`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stored_member(
        member_id: String,
        group_instance_id: Option<String>,
        client_id: String,
        client_host: String,
        rebalance_timeout_ms: i32,
        session_timeout_ms: i32,
        protocol: Option<(String, Bytes)>,
        assignment: Bytes,
    ) -> Member {
        Member {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocols: protocol.into_iter().collect(),
            assignment,
            awaiting_join: None,
            awaiting_sync: None,
            is_new: false,
            latest_heartbeat: 0,
            heartbeat_deadline: None,
        }
    }

    /// The group id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
    /// The current state.
    pub(crate) fn state(&self) -> GroupState {
        self.state
    }
    /// When the group entered its current state (ms since the epoch).
    pub(crate) fn state_timestamp(&self) -> i64 {
        self.state_timestamp
    }
    /// The generation id (0 before the first rebalance completes).
    pub(crate) fn generation_id(&self) -> i32 {
        self.generation_id
    }
    /// The protocol type (`consumer`), once a member joined.
    pub(crate) fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    /// The chosen protocol (assignor), from CompletingRebalance on.
    pub(crate) fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }
    /// The leader's member id.
    pub(crate) fn leader_id(&self) -> Option<&str> {
        self.leader_id.as_deref()
    }
    /// The members, oldest first.
    pub(crate) fn members(&self) -> &[Member] {
        &self.members
    }
    /// KIP-394 pending member ids (not members yet).
    #[cfg(test)]
    pub(crate) fn pending_member_count(&self) -> usize {
        self.pending_members.len()
    }
    /// A member by id.
    pub(crate) fn member(&self, member_id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.member_id == member_id)
    }
    fn member_mut(&mut self, member_id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.member_id == member_id)
    }
    fn has(&self, member_id: &str) -> bool {
        self.member(member_id).is_some()
    }
    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }
    fn awaiting_join_count(&self) -> usize {
        self.members.iter().filter(|m| m.awaiting_join.is_some()).count()
    }

    /// Takes the answer of a parked request, once there is one.
    pub(crate) fn take_completion(&mut self, ticket: Ticket) -> Option<Completion> {
        self.completions.remove(&ticket)
    }

    /// Drops a parked request's ticket whose waiter gave up (its connection closed, its
    /// deadline passed): the answer, made or to come, is discarded. The member is untouched: as
    /// in Kafka, whose `DelayedJoin` stays until the rebalance completes whether or not its
    /// client is still there, a member whose JoinGroup went away still counts as joined, gets
    /// its (unheard) answer when the rebalance completes, and is removed when its session then
    /// times out without a heartbeat.
    pub(crate) fn abandon(&mut self, ticket: Ticket) {
        if self.completions.remove(&ticket).is_none() && ticket < self.next_ticket {
            self.abandoned.insert(ticket);
        }
    }

    /// How many answers to parked requests the group has made so far (a counter that only
    /// grows, also when an answer is rewritten): the owner wakes the group's waiters when it
    /// moved, and only then.
    pub(crate) fn answers_made(&self) -> u64 {
        self.answers_made
    }

    /// Makes the answer of a parked request.
    fn answer(&mut self, ticket: Ticket, completion: Completion) {
        self.answers_made += 1;
        if !self.abandoned.remove(&ticket) {
            self.completions.insert(ticket, completion);
        }
    }

    /// Whether the group changed in a way Kafka persists (`storeGroup`): a completed
    /// assignment, an emptied group, a replaced static member. Reading it clears it.
    pub(crate) fn take_store_request(&mut self) -> bool {
        std::mem::take(&mut self.store_requested)
    }

    /// The earliest deadline at which [`Group::tick`] has work (ms), if any.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        let members = self.members.iter().filter_map(|m| m.heartbeat_deadline);
        let pending = self.pending_members.values().copied();
        members.chain(pending).chain(self.join_timer.map(JoinTimer::deadline)).min()
    }

    fn transition(&mut self, to: GroupState, now: i64) {
        self.state = to;
        self.state_timestamp = now;
    }

    fn ticket(&mut self) -> Ticket {
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }

    fn complete_join(&mut self, member_id: &str, result: JoinResult) -> bool {
        let Some(ticket) = self.member_mut(member_id).and_then(|m| m.awaiting_join.take()) else { return false };
        self.answer(ticket, Completion::Join(result));
        true
    }

    fn complete_sync(&mut self, member_id: &str, result: SyncResult) -> bool {
        let Some(ticket) = self.member_mut(member_id).and_then(|m| m.awaiting_sync.take()) else { return false };
        self.answer(ticket, Completion::Sync(result));
        true
    }

    /// Restarts a member's session (`completeAndScheduleNextHeartbeatExpiration`).
    fn heartbeat_now(&mut self, member_id: &str, now: i64) {
        if let Some(m) = self.member_mut(member_id) {
            m.latest_heartbeat = now;
            let timeout = if m.is_new { NEW_MEMBER_JOIN_TIMEOUT_MS } else { i64::from(m.session_timeout_ms) };
            m.heartbeat_deadline = Some(now + timeout);
        }
    }

    /// `ClassicGroup.supportsProtocols`: an Empty group takes any non-empty protocol type and
    /// list; otherwise the type must match and one protocol must be supported by every member.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| self.members.iter().all(|m| m.metadata(name).is_some()))
    }

    /// `ClassicGroup.selectProtocol`: the protocols every member supports, each member voting for
    /// its most preferred one; the most votes wins (ties: earliest in the leader's list).
    fn select_protocol(&self) -> Option<String> {
        let first = self.leader_id.as_deref().and_then(|l| self.member(l)).or(self.members.first())?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| self.members.iter().all(|m| m.metadata(n).is_some()))
            .collect();
        let mut votes = vec![0usize; candidates.len()];
        for m in &self.members {
            if let Some(i) = m.protocols.iter().find_map(|(n, _)| candidates.iter().position(|c| c == n)) {
                votes[i] += 1;
            }
        }
        let best = votes.iter().enumerate().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?.0;
        Some(candidates[best].to_string())
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members.iter().map(|m| i64::from(m.rebalance_timeout_ms)).max().unwrap_or(0)
    }

    fn current_member_metadata(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .iter()
            .map(|m| JoinedMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    fn join_result_for(&self, member_id: &str, include_members: bool) -> JoinResult {
        JoinResult {
            error: errors::NONE,
            member_id: member_id.to_string(),
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            skip_assignment: false,
            members: if include_members { self.current_member_metadata() } else { Vec::new() },
        }
    }

    fn is_static_member_fenced(&self, member_id: &str, group_instance_id: Option<&str>) -> bool {
        match group_instance_id {
            Some(instance) => self.static_members.get(instance).is_some_and(|m| m != member_id),
            None => false,
        }
    }

    /// Handles a JoinGroup (Kafka's `classicGroupJoin`). `new_member_id` is the id to give a
    /// member that has none (`<client.id>-<uuid>`, made by the caller). The session timeout is
    /// checked by the caller (INVALID_SESSION_TIMEOUT comes before the group is looked up).
    pub(crate) fn join(&mut self, now: i64, request: JoinRequest, new_member_id: String) -> Reply<JoinResult> {
        let unknown = request.member_id.is_empty();
        if self.state == GroupState::Dead {
            return Reply::Now(JoinResult::error(&request.member_id, errors::COORDINATOR_NOT_AVAILABLE));
        }
        if !self.accepts_joining_member(&request.member_id) {
            return Reply::Now(JoinResult::error(&request.member_id, errors::GROUP_MAX_SIZE_REACHED));
        }
        if !self.supports_protocols(&request.protocol_type, &request.protocols) {
            return Reply::Now(JoinResult::error(&request.member_id, errors::INCONSISTENT_GROUP_PROTOCOL));
        }
        let reply =
            if unknown { self.join_unknown(now, request, new_member_id) } else { self.join_known(now, request) };
        self.maybe_complete_join(now);
        self.debug_check_invariants();
        match reply {
            Reply::Wait(ticket) => match self.completions.remove(&ticket) {
                Some(Completion::Join(r)) => Reply::Now(r),
                Some(other) => {
                    self.completions.insert(ticket, other);
                    Reply::Wait(ticket)
                }
                None => Reply::Wait(ticket),
            },
            now => now,
        }
    }

    /// Kafka's `acceptJoiningMember`: the size limit counts rejoined members during
    /// PreparingRebalance and all members otherwise.
    fn accepts_joining_member(&self, member_id: &str) -> bool {
        match self.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                self.member(member_id).is_some_and(Member::is_awaiting_join)
                    || self.awaiting_join_count() < self.config.max_size
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.has(member_id) || self.members.len() < self.config.max_size
            }
        }
    }

    fn join_unknown(&mut self, now: i64, request: JoinRequest, new_member_id: String) -> Reply<JoinResult> {
        if let Some(instance) = request.group_instance_id.clone() {
            if let Some(old_member_id) = self.static_members.get(&instance).cloned() {
                return self.rejoin_static(now, request, &old_member_id, new_member_id);
            }
            return self.add_member_and_rebalance(now, request, new_member_id);
        }
        if request.require_known_member_id {
            let deadline = now + i64::from(request.session_timeout_ms);
            self.pending_members.insert(new_member_id.clone(), deadline);
            return Reply::Now(JoinResult::error(&new_member_id, errors::MEMBER_ID_REQUIRED));
        }
        self.add_member_and_rebalance(now, request, new_member_id)
    }

    fn join_known(&mut self, now: i64, request: JoinRequest) -> Reply<JoinResult> {
        let member_id = request.member_id.clone();
        if self.pending_members.contains_key(&member_id) {
            if request.group_instance_id.is_some() {
                // Kafka throws: a pending member is never static. Tell the client to start over.
                return Reply::Now(JoinResult::error(&member_id, errors::UNKNOWN_MEMBER_ID));
            }
            return self.add_member_and_rebalance(now, request, member_id);
        }
        let instance = request.group_instance_id.as_deref();
        if self.is_static_member_fenced(&member_id, instance) {
            return Reply::Now(JoinResult::error(&member_id, errors::FENCED_INSTANCE_ID));
        }
        let instance_unknown = instance.is_some_and(|i| !self.static_members.contains_key(i));
        if !self.has(&member_id) || instance_unknown {
            return Reply::Now(JoinResult::error(&member_id, errors::UNKNOWN_MEMBER_ID));
        }
        match self.state {
            GroupState::PreparingRebalance => self.update_member_and_rebalance(now, request),
            GroupState::CompletingRebalance => {
                if self.member(&member_id).is_some_and(|m| m.matches(&request.protocols)) {
                    // The member lost its JoinGroup answer: give it again.
                    let leader = self.is_leader(&member_id);
                    Reply::Now(self.join_result_for(&member_id, leader))
                } else {
                    self.update_member_and_rebalance(now, request)
                }
            }
            GroupState::Stable => {
                let unchanged = self.member(&member_id).is_some_and(|m| m.matches(&request.protocols));
                if self.is_leader(&member_id) || !unchanged {
                    // The leader rejoining forces a rebalance (it may have seen metadata change).
                    self.update_member_and_rebalance(now, request)
                } else {
                    Reply::Now(self.join_result_for(&member_id, false))
                }
            }
            GroupState::Empty | GroupState::Dead => {
                Reply::Now(JoinResult::error(&member_id, errors::UNKNOWN_MEMBER_ID))
            }
        }
    }

    /// A parked join of `member_id` (an earlier one still parked is answered with
    /// UNKNOWN_MEMBER_ID: its client retried on another connection).
    fn park_join(&mut self, member_id: &str) -> Ticket {
        let ticket = self.ticket();
        let old = self.member_mut(member_id).and_then(|m| m.awaiting_join.replace(ticket));
        if let Some(old) = old {
            self.answer(old, Completion::Join(JoinResult::error(member_id, errors::UNKNOWN_MEMBER_ID)));
        }
        ticket
    }

    fn add_member_and_rebalance(&mut self, now: i64, request: JoinRequest, member_id: String) -> Reply<JoinResult> {
        if self.state == GroupState::PreparingRebalance && self.generation_id == 0 {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        self.members.push(Member {
            member_id: member_id.clone(),
            group_instance_id: request.group_instance_id.clone(),
            client_id: request.client_id,
            client_host: request.client_host,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            session_timeout_ms: request.session_timeout_ms,
            protocols: request.protocols,
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            is_new: true,
            latest_heartbeat: now,
            heartbeat_deadline: None,
        });
        if self.leader_id.is_none() {
            self.leader_id = Some(member_id.clone());
        }
        let ticket = self.park_join(&member_id);
        self.heartbeat_now(&member_id, now);
        match &request.group_instance_id {
            Some(instance) => {
                self.static_members.insert(instance.clone(), member_id.clone());
            }
            None => {
                self.pending_members.remove(&member_id);
            }
        }
        self.maybe_prepare_rebalance(now);
        Reply::Wait(ticket)
    }

    fn update_member_and_rebalance(&mut self, now: i64, request: JoinRequest) -> Reply<JoinResult> {
        let member_id = request.member_id.clone();
        if let Some(m) = self.member_mut(&member_id) {
            m.protocols = request.protocols;
            m.rebalance_timeout_ms = request.rebalance_timeout_ms;
            m.session_timeout_ms = request.session_timeout_ms;
        }
        let ticket = self.park_join(&member_id);
        self.maybe_prepare_rebalance(now);
        Reply::Wait(ticket)
    }

    /// KIP-345: a static member rejoins with an unknown member id and takes its old place
    /// (Kafka's `updateStaticMemberAndRebalance`).
    fn rejoin_static(
        &mut self,
        now: i64,
        request: JoinRequest,
        old_member_id: &str,
        new_member_id: String,
    ) -> Reply<JoinResult> {
        let previous_leader = self.leader_id.clone().unwrap_or_default();
        // Fence whatever the old member id still has parked.
        let fenced_join = JoinResult::error(old_member_id, errors::FENCED_INSTANCE_ID);
        self.complete_join(old_member_id, fenced_join);
        self.complete_sync(old_member_id, SyncResult::error(errors::FENCED_INSTANCE_ID));
        let Some(m) = self.member_mut(old_member_id) else {
            return Reply::Now(JoinResult::error("", errors::UNKNOWN_MEMBER_ID));
        };
        m.member_id = new_member_id.clone();
        m.protocols = request.protocols;
        m.rebalance_timeout_ms = request.rebalance_timeout_ms;
        m.session_timeout_ms = request.session_timeout_ms;
        m.client_id = request.client_id;
        m.client_host = request.client_host;
        let was_leader = self.leader_id.as_deref() == Some(old_member_id);
        if was_leader {
            self.leader_id = Some(new_member_id.clone());
        }
        if let Some(instance) = &request.group_instance_id {
            self.static_members.insert(instance.clone(), new_member_id.clone());
        }
        self.heartbeat_now(&new_member_id, now);
        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol_name => {
                // No rebalance: persist the new member id, answer with the current generation.
                self.store_requested = true;
                let skip = was_leader && request.supports_skip_assignment;
                let mut result = self.join_result_for(&new_member_id, skip);
                result.skip_assignment = skip;
                if !request.supports_skip_assignment {
                    // Older clients must not believe they lead (they would assign, and a Stable
                    // group ignores the assignment): answer with the old leader id.
                    result.leader = previous_leader;
                }
                Reply::Now(result)
            }
            GroupState::PreparingRebalance => Reply::Wait(self.park_join(&new_member_id)),
            _ => {
                let ticket = self.park_join(&new_member_id);
                self.maybe_prepare_rebalance(now);
                Reply::Wait(ticket)
            }
        }
    }

    fn can_rebalance(&self) -> bool {
        matches!(self.state, GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty)
    }

    fn maybe_prepare_rebalance(&mut self, now: i64) {
        if self.can_rebalance() {
            self.prepare_rebalance(now);
        }
    }

    /// Kafka's `prepareRebalance`.
    fn prepare_rebalance(&mut self, now: i64) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_assignment_error(errors::REBALANCE_IN_PROGRESS, now);
        }
        self.join_timer = Some(if self.state == GroupState::Empty {
            let delay = self.config.initial_rebalance_delay_ms;
            JoinTimer::Initial { deadline: now + delay, delay, remaining: (self.rebalance_timeout_ms() - delay).max(0) }
        } else {
            JoinTimer::Rebalance { deadline: now + self.rebalance_timeout_ms() }
        });
        self.transition(GroupState::PreparingRebalance, now);
        // `tryCompleteElseWatch`: a group whose members all left completes at once.
        self.maybe_complete_join(now);
    }

    fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.awaiting_join_count() && self.pending_members.is_empty()
    }

    /// `joinPurgatory.checkAndComplete`: a `DelayedJoin` completes once everyone joined (an
    /// `InitialDelayedJoin` only at its deadline).
    fn maybe_complete_join(&mut self, now: i64) {
        if self.state == GroupState::PreparingRebalance
            && matches!(self.join_timer, Some(JoinTimer::Rebalance { .. }))
            && self.has_all_members_joined()
        {
            self.join_timer = None;
            self.on_complete_join(now);
        }
    }

    /// Kafka's `onCompleteJoin`.
    fn on_complete_join(&mut self, now: i64) {
        // Members that did not rejoin in time are removed.
        let failed: Vec<String> =
            self.members.iter().filter(|m| m.awaiting_join.is_none()).map(|m| m.member_id.clone()).collect();
        for id in failed {
            self.remove_member_only(&id);
        }
        if self.state == GroupState::Dead {
            return;
        }
        if !self.maybe_elect_new_joined_leader() && !self.members.is_empty() {
            self.join_timer = Some(JoinTimer::Rebalance { deadline: now + self.rebalance_timeout_ms() });
            return;
        }
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition(GroupState::Empty, now);
            self.store_requested = true;
            return;
        }
        self.protocol_name = self.select_protocol();
        self.transition(GroupState::CompletingRebalance, now);
        let ids: Vec<String> = self.members.iter().map(|m| m.member_id.clone()).collect();
        for id in ids {
            let result = self.join_result_for(&id, self.is_leader(&id));
            self.complete_join(&id, result);
            if let Some(m) = self.member_mut(&id) {
                m.is_new = false;
            }
            self.heartbeat_now(&id, now);
        }
    }

    fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else { return false };
        if self.member(&leader).is_some_and(Member::is_awaiting_join) {
            return true;
        }
        match self.members.iter().find(|m| m.awaiting_join.is_some()) {
            Some(m) => {
                self.leader_id = Some(m.member_id.clone());
                true
            }
            None => false,
        }
    }

    /// Removes a member without any state change (`group.remove`); a new leader is the oldest
    /// remaining member.
    fn remove_member_only(&mut self, member_id: &str) {
        if let Some(pos) = self.members.iter().position(|m| m.member_id == member_id) {
            let m = self.members.remove(pos);
            if let Some(instance) = &m.group_instance_id {
                if self.static_members.get(instance).is_some_and(|id| id == member_id) {
                    self.static_members.remove(instance);
                }
            }
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.first().map(|m| m.member_id.clone());
        }
        // The protocol type stays (an Empty consumer group is still listed as `consumer`); the
        // next first member sets it again.
    }

    /// Kafka's `removeMemberAndUpdateGroup`: a parked join is answered UNKNOWN_MEMBER_ID, then
    /// the group rebalances (or completes a rebalance that waited only for this member).
    fn remove_member_and_update_group(&mut self, member_id: &str, now: i64) {
        self.complete_join(member_id, JoinResult::error("", errors::UNKNOWN_MEMBER_ID));
        self.complete_sync(member_id, SyncResult::error(errors::UNKNOWN_MEMBER_ID));
        self.remove_member_only(member_id);
        match self.state {
            GroupState::Dead | GroupState::Empty => {}
            GroupState::Stable | GroupState::CompletingRebalance => self.maybe_prepare_rebalance(now),
            GroupState::PreparingRebalance => self.maybe_complete_join(now),
        }
    }

    fn reset_and_propagate_assignment_error(&mut self, error: i16, now: i64) {
        for m in &mut self.members {
            m.assignment = Bytes::new();
        }
        self.propagate_assignment(error, now);
    }

    fn propagate_assignment(&mut self, error: i16, now: i64) {
        let ids: Vec<String> = self.members.iter().map(|m| m.member_id.clone()).collect();
        for id in ids {
            let Some(m) = self.member(&id) else { continue };
            let result = SyncResult {
                error,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                assignment: if error == errors::NONE { m.assignment.clone() } else { Bytes::new() },
            };
            if self.complete_sync(&id, result) {
                self.heartbeat_now(&id, now);
            }
        }
    }

    /// Handles a SyncGroup (Kafka's `classicGroupSync`). `assignments` is the leader's
    /// (member id, assignment) list (ignored for followers). `protocol_type` / `protocol_name`
    /// are the v5+ fields (None before v5). Members missing from the leader's list get an empty
    /// assignment. The leader's SyncGroup moves the group to Stable and asks for it to be stored.
    pub(crate) fn sync(&mut self, now: i64, request: SyncRequest<'_>) -> Reply<SyncResult> {
        let reply = self.sync_inner(now, request);
        self.debug_check_invariants();
        reply
    }

    fn sync_inner(&mut self, now: i64, request: SyncRequest<'_>) -> Reply<SyncResult> {
        let SyncRequest { member, protocol_type, protocol_name, assignments } = request;
        let MemberRef { member_id, group_instance_id, generation_id } = member;
        if self.state == GroupState::Dead {
            return Reply::Now(SyncResult::error(errors::COORDINATOR_NOT_AVAILABLE));
        }
        if self.is_static_member_fenced(member_id, group_instance_id) {
            return Reply::Now(SyncResult::error(errors::FENCED_INSTANCE_ID));
        }
        if !self.has(member_id) {
            return Reply::Now(SyncResult::error(errors::UNKNOWN_MEMBER_ID));
        }
        if generation_id != self.generation_id {
            return Reply::Now(SyncResult::error(errors::ILLEGAL_GENERATION));
        }
        let mismatch = |given: Option<&str>, ours: &Option<String>| given.is_some_and(|g| Some(g) != ours.as_deref());
        if mismatch(protocol_type, &self.protocol_type) || mismatch(protocol_name, &self.protocol_name) {
            return Reply::Now(SyncResult::error(errors::INCONSISTENT_GROUP_PROTOCOL));
        }
        match self.state {
            GroupState::Empty => Reply::Now(SyncResult::error(errors::UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => Reply::Now(SyncResult::error(errors::REBALANCE_IN_PROGRESS)),
            GroupState::CompletingRebalance => {
                let ticket = self.ticket();
                if let Some(old) = self.member_mut(member_id).and_then(|m| m.awaiting_sync.replace(ticket)) {
                    self.answer(old, Completion::Sync(SyncResult::error(errors::UNKNOWN_MEMBER_ID)));
                }
                if self.is_leader(member_id) {
                    let mut by_member: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for m in &mut self.members {
                        m.assignment = by_member.remove(&m.member_id).unwrap_or_default();
                    }
                    self.store_requested = true;
                    self.propagate_assignment(errors::NONE, now);
                    self.transition(GroupState::Stable, now);
                }
                match self.completions.remove(&ticket) {
                    Some(Completion::Sync(r)) => Reply::Now(r),
                    Some(other) => {
                        self.completions.insert(ticket, other);
                        Reply::Wait(ticket)
                    }
                    None => Reply::Wait(ticket),
                }
            }
            GroupState::Stable => {
                self.heartbeat_now(member_id, now);
                let m = self.member(member_id).expect("checked above");
                Reply::Now(SyncResult {
                    error: errors::NONE,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: m.assignment.clone(),
                })
            }
            GroupState::Dead => Reply::Now(SyncResult::error(errors::COORDINATOR_NOT_AVAILABLE)),
        }
    }

    /// The store of the leader's assignment failed: the members waiting for it get `error` and
    /// the group rebalances (Kafka's storeGroup callback with an error).
    pub(crate) fn store_failed(&mut self, error: i16, now: i64) {
        if self.state == GroupState::Stable {
            // Undo the transition the leader's SyncGroup made; the answers are not read yet.
            self.state = GroupState::CompletingRebalance;
            self.answers_made += 1;
            for c in self.completions.values_mut() {
                if let Completion::Sync(r) = c {
                    *r = SyncResult::error(error);
                }
            }
            self.prepare_rebalance(now);
        }
        self.debug_check_invariants();
    }

    /// Handles a Heartbeat (Kafka 4's `classicGroupHeartbeat`): NONE in Stable and
    /// CompletingRebalance (clients heartbeat between their JoinGroup and SyncGroup answers),
    /// REBALANCE_IN_PROGRESS in PreparingRebalance (the member must rejoin); the session restarts
    /// in every case but Empty.
    pub(crate) fn heartbeat(&mut self, now: i64, member: MemberRef<'_>) -> i16 {
        let MemberRef { member_id, group_instance_id, generation_id } = member;
        if self.state == GroupState::Dead {
            return errors::COORDINATOR_NOT_AVAILABLE;
        }
        if self.is_static_member_fenced(member_id, group_instance_id) {
            return errors::FENCED_INSTANCE_ID;
        }
        if !self.has(member_id) {
            return errors::UNKNOWN_MEMBER_ID;
        }
        if generation_id != self.generation_id {
            return errors::ILLEGAL_GENERATION;
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => errors::UNKNOWN_MEMBER_ID,
            GroupState::PreparingRebalance => {
                self.heartbeat_now(member_id, now);
                errors::REBALANCE_IN_PROGRESS
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.heartbeat_now(member_id, now);
                errors::NONE
            }
        }
    }

    /// Handles one member of a LeaveGroup (v3+ carries several; Kafka's `classicGroupLeave`):
    /// by member id, or by `group.instance.id` for a static member. Returns the member's error.
    pub(crate) fn leave(&mut self, now: i64, member_id: &str, group_instance_id: Option<&str>) -> i16 {
        if self.state == GroupState::Dead {
            return errors::COORDINATOR_NOT_AVAILABLE;
        }
        if !member_id.is_empty() && self.is_static_member_fenced(member_id, group_instance_id) {
            return errors::FENCED_INSTANCE_ID;
        }
        if self.pending_members.remove(member_id).is_some() {
            self.maybe_complete_join(now);
            return errors::NONE;
        }
        let target = match group_instance_id.and_then(|i| self.static_members.get(i)) {
            Some(id) => id.clone(),
            None if self.has(member_id) => member_id.to_string(),
            None => return errors::UNKNOWN_MEMBER_ID,
        };
        self.remove_member_and_update_group(&target, now);
        self.debug_check_invariants();
        errors::NONE
    }

    /// Validates an OffsetCommit's member and generation (Kafka's `validateOffsetCommit`):
    /// `Ok(())` when the commit may be stored. A commit with generation -1 is a "simple" commit
    /// (no group management) and is accepted only while the group is Empty.
    pub(crate) fn validate_offset_commit(&mut self, now: i64, member: MemberRef<'_>) -> Result<(), i16> {
        let MemberRef { member_id, group_instance_id, generation_id } = member;
        if self.state == GroupState::Dead {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if self.is_static_member_fenced(member_id, group_instance_id) {
            return Err(errors::FENCED_INSTANCE_ID);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if !self.has(member_id) {
            return Err(errors::UNKNOWN_MEMBER_ID);
        }
        if generation_id != self.generation_id {
            return Err(errors::ILLEGAL_GENERATION);
        }
        match self.state {
            GroupState::CompletingRebalance => Err(errors::REBALANCE_IN_PROGRESS),
            _ => {
                self.heartbeat_now(member_id, now);
                Ok(())
            }
        }
    }

    /// Validates a TxnOffsetCommit's member and generation (Kafka's `validateOffsetCommit` with
    /// `isTransactional`, `ClassicGroup.validateOffsetCommit` in Kafka 4): `Ok(())` when the
    /// commit may be stored. Unlike an OffsetCommit, a commit without member id, generation and
    /// instance id (TxnOffsetCommit v0-v2, or a producer outside the group) is accepted in any
    /// state, and CompletingRebalance is no error; a commit that names a member (v3+) must name
    /// a current one of this generation: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
    /// ILLEGAL_GENERATION. A Dead group is COORDINATOR_NOT_AVAILABLE. No heartbeat is counted.
    pub(crate) fn validate_txn_offset_commit(&self, member: MemberRef<'_>) -> Result<(), i16> {
        let MemberRef { member_id, group_instance_id, generation_id } = member;
        if self.state == GroupState::Dead {
            return Err(errors::COORDINATOR_NOT_AVAILABLE);
        }
        if generation_id < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation_id < 0 && member_id.is_empty() && group_instance_id.is_none() {
            return Ok(());
        }
        if self.is_static_member_fenced(member_id, group_instance_id) {
            return Err(errors::FENCED_INSTANCE_ID);
        }
        if !self.has(member_id) {
            return Err(errors::UNKNOWN_MEMBER_ID);
        }
        if generation_id != self.generation_id {
            return Err(errors::ILLEGAL_GENERATION);
        }
        Ok(())
    }

    /// Marks the group Dead (deleted or unloaded); parked requests get COORDINATOR_NOT_AVAILABLE
    /// (Kafka answers NOT_COORDINATOR on unload; one node never moves groups).
    pub(crate) fn mark_dead(&mut self, now: i64) {
        let ids: Vec<String> = self.members.iter().map(|m| m.member_id.clone()).collect();
        for id in &ids {
            self.complete_join(id, JoinResult::error(id, errors::COORDINATOR_NOT_AVAILABLE));
            self.complete_sync(id, SyncResult::error(errors::COORDINATOR_NOT_AVAILABLE));
        }
        self.join_timer = None;
        self.transition(GroupState::Dead, now);
    }

    /// Fires every deadline that has passed at `now`, earliest first, as Kafka's timer does:
    /// expired KIP-394 pending members are dropped, expired sessions remove members (and
    /// rebalance, or complete a rebalance that waited only for them), and the join timer
    /// completes the rebalance (or extends the initial delay while members keep arriving).
    ///
    /// Each step reads the timers as they are *now*, never from a list taken before the
    /// previous step: firing one timer can move others (an expiry that completes the join
    /// re-arms every member's session), and a moved deadline is a new timer that has not
    /// fired. Kafka keys the heartbeat timer by member (`classicGroupHeartbeatKey`;
    /// `DelayedHeartbeat` in the heartbeat purgatory before 4.0), so re-arming replaces the old
    /// expiry and `onExpireHeartbeat` never sees a stale one. Judging a member by a deadline
    /// that has moved since would clear its new deadline, and a member with no deadline that
    /// awaits no answer is never expired (issue 12).
    ///
    /// Ends: each step removes a pending member or a member, clears one deadline without
    /// arming another, or fires the join timer (which extends itself at most while new members
    /// arrive, and otherwise completes the join or leaves PreparingRebalance).
    pub(crate) fn tick(&mut self, now: i64) {
        loop {
            let pending = self.pending_members.iter().filter(|(_, &d)| d <= now).min_by_key(|(_, &d)| d);
            let pending = pending.map(|(id, &d)| (d, id.clone()));
            let session = self
                .members
                .iter()
                .filter_map(|m| m.heartbeat_deadline.filter(|&d| d <= now).map(|d| (d, m.member_id.clone())))
                .min_by_key(|(d, _)| *d);
            let join = self.join_timer.filter(|t| t.deadline() <= now);
            // Equal deadlines: pending members, then sessions, then the join timer.
            let first = [pending.as_ref().map(|p| p.0), session.as_ref().map(|s| s.0), join.map(JoinTimer::deadline)];
            let Some(earliest) = first.iter().flatten().min().copied() else { break };
            if let Some((_, id)) = pending.filter(|(d, _)| *d == earliest) {
                self.pending_members.remove(&id);
                self.maybe_complete_join(now);
            } else if let Some((deadline, id)) = session.filter(|(d, _)| *d == earliest) {
                self.expire_heartbeat(&id, deadline, now);
            } else if let Some(timer) = join {
                self.fire_join_timer(timer, now);
            }
        }
        self.debug_check_invariants();
    }

    /// `onExpireHeartbeat` for `member_id`, whose current session deadline `deadline` passed:
    /// a member awaiting its JoinGroup or SyncGroup answer is kept (the answer re-arms its
    /// session: `completeAndScheduleNextHeartbeatExpiration`), any other is removed.
    fn expire_heartbeat(&mut self, member_id: &str, deadline: i64, now: i64) {
        let Some(m) = self.member_mut(member_id) else { return };
        debug_assert_eq!(m.heartbeat_deadline, Some(deadline), "a heartbeat timer fired after it moved");
        if m.should_keep_alive(deadline) {
            // The expectation is met (the member waits for an answer); the next one is set
            // when that answer goes out.
            m.heartbeat_deadline = None;
        } else {
            tracing::info!(group = %self.id, member = %member_id, "member session expired; removing it");
            self.remove_member_and_update_group(member_id, now);
        }
    }

    /// The join timer fired: `InitialDelayedJoin` extends itself while members keep arriving
    /// (within the rebalance timeout); otherwise the join completes (`DelayedJoin.onComplete`).
    fn fire_join_timer(&mut self, timer: JoinTimer, now: i64) {
        self.join_timer = None;
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        match timer {
            JoinTimer::Initial { delay, remaining, .. } if self.new_member_added && remaining > 0 => {
                self.new_member_added = false;
                let delay = delay.min(remaining);
                self.join_timer =
                    Some(JoinTimer::Initial { deadline: now + delay, delay, remaining: (remaining - delay).max(0) });
            }
            _ => self.on_complete_join(now),
        }
    }

    /// The liveness invariant behind member expiry, checked in debug builds after every
    /// operation: each member either has a session deadline or awaits a JoinGroup / SyncGroup
    /// answer that will come (a parked join only in PreparingRebalance, whose join timer is
    /// armed; a parked sync only in CompletingRebalance, whose leader has a session deadline),
    /// so a member that stops talking is always expired in the end.
    fn debug_check_invariants(&self) {
        if cfg!(debug_assertions) {
            if let Err(why) = self.check_invariants() {
                panic!("group {}: {why}: {self:?}", self.id);
            }
        }
    }

    fn check_invariants(&self) -> Result<(), String> {
        if self.state == GroupState::Dead {
            return Ok(());
        }
        if self.state == GroupState::PreparingRebalance && self.join_timer.is_none() {
            return Err("PreparingRebalance without a join timer".into());
        }
        for m in &self.members {
            let id = &m.member_id;
            match (m.heartbeat_deadline, m.awaiting_join, m.awaiting_sync) {
                (None, None, None) => return Err(format!("member {id} has no session deadline and awaits nothing")),
                (_, Some(_), Some(_)) => return Err(format!("member {id} awaits a join and a sync")),
                (_, Some(_), None) if self.state != GroupState::PreparingRebalance => {
                    return Err(format!("member {id} awaits a join in {}", self.state.name()))
                }
                (_, None, Some(_)) if self.state != GroupState::CompletingRebalance => {
                    return Err(format!("member {id} awaits a sync in {}", self.state.name()))
                }
                _ => {}
            }
        }
        if self.state == GroupState::CompletingRebalance {
            let leader = self.leader_id.as_deref().and_then(|l| self.member(l));
            if leader.is_none_or(|l| l.heartbeat_deadline.is_none()) {
                return Err("CompletingRebalance without a leader whose session runs".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: i32 = 10_000;
    const REBALANCE: i32 = 30_000;

    fn config(initial_delay: i64) -> GroupConfig {
        GroupConfig { initial_rebalance_delay_ms: initial_delay, ..GroupConfig::default() }
    }

    fn req(member_id: &str, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member_id.to_string(),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: REBALANCE,
            session_timeout_ms: SESSION,
            protocol_type: "consumer".into(),
            protocols: protocols.iter().map(|p| (p.to_string(), Bytes::from(format!("meta-{p}")))).collect(),
            ..JoinRequest::default()
        }
    }

    fn join_result(g: &mut Group, reply: Reply<JoinResult>) -> Option<JoinResult> {
        match reply {
            Reply::Now(r) => Some(r),
            Reply::Wait(t) => match g.take_completion(t) {
                Some(Completion::Join(r)) => Some(r),
                None => None,
                other => panic!("{other:?}"),
            },
        }
    }

    fn mref<'a>(member_id: &'a str, group_instance_id: Option<&'a str>, generation_id: i32) -> MemberRef<'a> {
        MemberRef { member_id, group_instance_id, generation_id }
    }

    fn sreq<'a>(
        member_id: &'a str,
        group_instance_id: Option<&'a str>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncRequest<'a> {
        SyncRequest {
            member: mref(member_id, group_instance_id, generation_id),
            protocol_type: None,
            protocol_name: None,
            assignments,
        }
    }

    fn join_now(g: &mut Group, (now, request, id): (i64, JoinRequest, String)) -> Option<JoinResult> {
        let reply = g.join(now, request, id);
        join_result(g, reply)
    }

    fn wait_join(g: &mut Group, t: Ticket) -> JoinResult {
        match g.take_completion(t) {
            Some(Completion::Join(r)) => r,
            other => panic!("no join answer: {other:?}"),
        }
    }

    fn ticket<T: std::fmt::Debug>(r: Reply<T>) -> Ticket {
        match r {
            Reply::Wait(t) => t,
            Reply::Now(x) => panic!("answered at once: {x:?}"),
        }
    }

    /// Two members form a group; returns (group, leader id, follower id) in Stable, generation 1.
    fn stable_pair() -> (Group, String, String) {
        let mut g = Group::new("g", config(0), 0);
        let t1 = ticket(g.join(0, req("", &["range"]), "m1".into()));
        g.tick(0); // initial delay 0: completes with m1 alone
        let r1 = wait_join(&mut g, t1);
        assert_eq!((r1.generation_id, r1.leader.as_str()), (1, "m1"));
        // m2 joins: rebalance; m1 rejoins.
        let t2 = ticket(g.join(1, req("", &["range"]), "m2".into()));
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let r1 = join_now(&mut g, (2, req("m1", &["range"]), String::new())).unwrap();
        let r2 = wait_join(&mut g, t2);
        assert_eq!((r1.generation_id, r2.generation_id), (2, 2));
        assert_eq!(r1.members.len(), 2, "the leader sees every member");
        assert!(r2.members.is_empty(), "followers see none");
        let ts = ticket(g.sync(3, sreq("m2", None, 2, vec![])));
        let assignment = vec![("m1".into(), Bytes::from_static(b"a1")), ("m2".into(), Bytes::from_static(b"a2"))];
        let Reply::Now(s1) = g.sync(3, sreq("m1", None, 2, assignment)) else { panic!() };
        assert_eq!(s1.assignment, Bytes::from_static(b"a1"));
        let Some(Completion::Sync(s2)) = g.take_completion(ts) else { panic!() };
        assert_eq!((s2.error, s2.assignment), (0, Bytes::from_static(b"a2")));
        assert_eq!(g.state(), GroupState::Stable);
        assert!(g.take_store_request());
        (g, "m1".into(), "m2".into())
    }

    #[test]
    fn answers_made_moves_only_when_a_parked_request_is_answered() {
        let (mut g, _, _) = stable_pair();
        let before = g.answers_made();
        assert_eq!(g.heartbeat(10, mref("m1", None, 2)), errors::NONE);
        g.tick(11);
        assert_eq!(g.answers_made(), before, "a heartbeat or a quiet tick answers nobody");
        let t1 = ticket(g.join(12, req("m1", &["range"]), String::new()));
        assert_eq!(g.answers_made(), before, "m1 waits for m2: nobody answered yet");
        assert!(join_now(&mut g, (13, req("m2", &["range"]), String::new())).is_some());
        assert!(g.answers_made() > before, "m2's rejoin answered m1");
        assert_eq!(wait_join(&mut g, t1).generation_id, 3);
    }

    #[test]
    fn first_member_leads_and_the_group_stabilizes() {
        let (g, leader, _) = stable_pair();
        assert_eq!(g.leader_id(), Some(leader.as_str()));
        assert_eq!(g.generation_id(), 2);
        assert_eq!(g.protocol_name(), Some("range"));
    }

    #[test]
    fn initial_rebalance_delay_waits_and_extends_while_members_arrive() {
        let mut g = Group::new("g", config(3000), 0);
        let t1 = ticket(g.join(0, req("", &["range"]), "m1".into()));
        assert_eq!(g.next_deadline(), Some(3000));
        g.tick(2999);
        assert!(g.take_completion(t1).is_none());
        let t2 = ticket(g.join(2000, req("", &["range"]), "m2".into()));
        g.tick(3000); // a member arrived during the delay: wait another 3000 ms
        assert!(g.take_completion(t1).is_none());
        g.tick(6000);
        assert_eq!(wait_join(&mut g, t1).generation_id, 1);
        assert_eq!(wait_join(&mut g, t2).generation_id, 1);
    }

    #[test]
    fn protocol_is_chosen_by_vote_among_common_protocols() {
        let mut g = Group::new("g", config(0), 0);
        let t1 = ticket(g.join(0, req("", &["roundrobin", "range"]), "m1".into()));
        let t2 = ticket(g.join(0, req("", &["range", "roundrobin"]), "m2".into()));
        let t3 = ticket(g.join(0, req("", &["range", "sticky"]), "m3".into()));
        g.tick(0);
        for t in [t1, t2, t3] {
            assert_eq!(wait_join(&mut g, t).protocol_name.as_deref(), Some("range"));
        }
        // A member with no common protocol is refused.
        let r = join_now(&mut g, (1, req("", &["sticky"]), "m4".into()));
        assert_eq!(r.map(|r| r.error), Some(errors::INCONSISTENT_GROUP_PROTOCOL));
    }

    #[test]
    fn followers_sync_waits_for_the_leader() {
        let (mut g, _, _) = stable_pair();
        // Force a rebalance by the leader rejoining.
        let t1 = ticket(g.join(10, req("m1", &["range"]), String::new()));
        assert_eq!(g.heartbeat(10, mref("m2", None, 2)), errors::REBALANCE_IN_PROGRESS);
        let r2 = join_now(&mut g, (11, req("m2", &["range"]), String::new())).unwrap();
        assert_eq!(wait_join(&mut g, t1).generation_id, 3);
        assert_eq!(r2.generation_id, 3);
        let ts = ticket(g.sync(12, sreq("m2", None, 3, vec![])));
        // Heartbeats while waiting for the leader are fine.
        assert_eq!(g.heartbeat(500, mref("m2", None, 3)), errors::NONE);
        g.tick(1000);
        assert!(g.take_completion(ts).is_none());
        let Reply::Now(_) = g.sync(1012, sreq("m1", None, 3, vec![("m2".into(), Bytes::from_static(b"x"))])) else {
            panic!()
        };
        let Some(Completion::Sync(s)) = g.take_completion(ts) else { panic!() };
        assert_eq!((s.error, s.assignment), (errors::NONE, Bytes::from_static(b"x")));
    }

    #[test]
    fn session_expiry_removes_the_member_and_rebalances() {
        let (mut g, _, _) = stable_pair();
        assert_eq!(g.heartbeat(5000, mref("m1", None, 2)), errors::NONE);
        g.tick(3 + i64::from(SESSION)); // m2's session (from its sync at 3) expires; m1 heartbeated at 5000
        assert!(g.member("m2").is_none());
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        assert_eq!(g.heartbeat(10_010, mref("m1", None, 2)), errors::REBALANCE_IN_PROGRESS);
        let r = join_now(&mut g, (10_020, req("m1", &["range"]), String::new())).unwrap();
        assert_eq!((r.generation_id, r.members.len()), (3, 1));
    }

    #[test]
    fn members_not_rejoining_within_the_rebalance_timeout_are_removed() {
        let (mut g, _, _) = stable_pair();
        let t1 = ticket(g.join(100, req("m1", &["range"]), String::new()));
        // m2 keeps heartbeating but never rejoins.
        for t in (1000..30_000).step_by(1000) {
            assert_eq!(g.heartbeat(t, mref("m2", None, 2)), errors::REBALANCE_IN_PROGRESS);
            g.tick(t);
        }
        assert!(g.take_completion(t1).is_none());
        g.tick(100 + i64::from(REBALANCE));
        let r = wait_join(&mut g, t1);
        assert_eq!((r.generation_id, r.members.len()), (3, 1));
        assert!(g.member("m2").is_none());
    }

    #[test]
    fn leave_moves_partitions_at_once_and_last_leave_empties_the_group() {
        let (mut g, _, _) = stable_pair();
        assert_eq!(g.leave(10, "m2", None), errors::NONE);
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let r1 = join_now(&mut g, (11, req("m1", &["range"]), String::new())).unwrap();
        assert_eq!(r1.generation_id, 3);
        assert_eq!(g.leave(12, "nobody", None), errors::UNKNOWN_MEMBER_ID);
        assert_eq!(g.leave(12, "m1", None), errors::NONE);
        assert_eq!(g.state(), GroupState::Empty);
        assert_eq!(g.generation_id(), 4);
        assert!(g.take_store_request());
    }

    #[test]
    fn kip394_pending_members_expire_and_do_not_grow_the_group() {
        let mut g = Group::new("g", config(0), 0);
        for i in 0..5 {
            let mut r = req("", &["range"]);
            r.require_known_member_id = true;
            let res = join_now(&mut g, (i, r, format!("ghost{i}"))).unwrap();
            assert_eq!((res.error, res.member_id), (errors::MEMBER_ID_REQUIRED, format!("ghost{i}")));
        }
        assert_eq!(g.pending_member_count(), 5);
        let mut r = req("", &["range"]);
        r.require_known_member_id = true;
        let res = join_now(&mut g, (10, r, "real".into())).unwrap();
        assert_eq!(res.error, errors::MEMBER_ID_REQUIRED);
        let mut r = req("real", &["range"]);
        r.require_known_member_id = true;
        let t = ticket(g.join(20, r, String::new()));
        g.tick(20); // the initial delay (0) passed: completes with the one real member
        let res = wait_join(&mut g, t);
        assert_eq!((res.error, res.generation_id, res.members.len()), (0, 1, 1));
        assert_eq!(g.heartbeat(5000, mref("real", None, 1)), errors::NONE);
        g.tick(20 + i64::from(SESSION));
        assert_eq!(g.pending_member_count(), 0);
        assert_eq!(g.members().len(), 1);
    }

    #[test]
    fn a_pending_member_holds_a_rebalance_until_it_expires() {
        let (mut g, _, _) = stable_pair();
        let mut r = req("", &["range"]);
        r.require_known_member_id = true;
        assert_eq!(join_now(&mut g, (10, r, "ghost".into())).unwrap().error, errors::MEMBER_ID_REQUIRED);
        let t1 = ticket(g.join(11, req("m1", &["range"]), String::new()));
        let t2 = ticket(g.join(12, req("m2", &["range"]), String::new()));
        assert!(g.take_completion(t1).is_none(), "waits for the pending member");
        g.tick(10 + i64::from(SESSION));
        assert_eq!(wait_join(&mut g, t1).generation_id, 3);
        assert_eq!(wait_join(&mut g, t2).members.len(), 0);
    }

    #[test]
    fn static_member_rejoining_in_stable_keeps_the_generation() {
        let mut g = Group::new("g", config(0), 0);
        let mut r = req("", &["range"]);
        r.group_instance_id = Some("i1".into());
        let t = ticket(g.join(0, r.clone(), "s1".into()));
        g.tick(0);
        assert_eq!(wait_join(&mut g, t).generation_id, 1);
        let Reply::Now(_) = g.sync(1, sreq("s1", Some("i1"), 1, vec![("s1".into(), Bytes::from_static(b"a"))])) else {
            panic!()
        };
        g.take_store_request();
        // Restart: unknown member id, same instance id.
        let res = join_now(&mut g, (100, r.clone(), "s1b".into())).unwrap();
        assert_eq!((res.error, res.generation_id, res.member_id.as_str()), (0, 1, "s1b"));
        assert_eq!(g.state(), GroupState::Stable);
        assert!(g.take_store_request());
        // The old id is fenced; the new one gets the old assignment.
        assert_eq!(g.heartbeat(101, mref("s1", Some("i1"), 1)), errors::FENCED_INSTANCE_ID);
        let Reply::Now(s) = g.sync(102, sreq("s1b", Some("i1"), 1, vec![])) else { panic!() };
        assert_eq!(s.assignment, Bytes::from_static(b"a"));
    }

    #[test]
    fn commit_rules_follow_generation_and_state() {
        let (mut g, _, _) = stable_pair();
        assert_eq!(g.validate_offset_commit(10, mref("m1", None, 2)), Ok(()));
        assert_eq!(g.validate_offset_commit(10, mref("m1", None, 1)), Err(errors::ILLEGAL_GENERATION));
        assert_eq!(g.validate_offset_commit(10, mref("zz", None, 2)), Err(errors::UNKNOWN_MEMBER_ID));
        assert_eq!(g.validate_offset_commit(10, mref("", None, -1)), Err(errors::UNKNOWN_MEMBER_ID));
        let mut empty = Group::new("e", config(0), 0);
        assert_eq!(empty.validate_offset_commit(10, mref("", None, -1)), Ok(()));
    }

    /// Kafka's transactional `validateOffsetCommit`: no member = a producer outside the group,
    /// accepted in any state; a named member is checked like an OffsetCommit's, without the
    /// CompletingRebalance refusal.
    #[test]
    fn txn_commit_rules_follow_generation_and_member() {
        let (g, _, _) = stable_pair();
        assert_eq!(g.validate_txn_offset_commit(mref("m1", None, 2)), Ok(()));
        assert_eq!(g.validate_txn_offset_commit(mref("m1", None, 1)), Err(errors::ILLEGAL_GENERATION));
        assert_eq!(g.validate_txn_offset_commit(mref("zz", None, 2)), Err(errors::UNKNOWN_MEMBER_ID));
        assert_eq!(g.validate_txn_offset_commit(mref("", None, 2)), Err(errors::UNKNOWN_MEMBER_ID));
        assert_eq!(g.validate_txn_offset_commit(mref("", None, -1)), Ok(()), "no member: a plain producer");
        let empty = Group::new("e", config(0), 0);
        assert_eq!(empty.validate_txn_offset_commit(mref("", None, -1)), Ok(()));
        assert_eq!(empty.validate_txn_offset_commit(mref("x", None, 0)), Err(errors::UNKNOWN_MEMBER_ID));
    }

    /// Issue 12 (6), the traced order: in one tick the dead m1 expires, which completes the
    /// join (m2 and m3 rejoined) and re-arms every session; m2's due entry from before the
    /// completion must not then count as "kept alive" and clear its new deadline, or m2, dying
    /// before its SyncGroup, is never expired and the group waits for it forever.
    #[test]
    fn an_expiry_that_completes_the_join_leaves_the_others_sessions_armed() {
        let (mut g, _, _) = stable_pair(); // m1 and m2 synced at 3: both sessions end at 10_003
        let t3 = ticket(g.join(10, req("", &["range"]), "m3".into())); // a rebalance; m1 is dead
        let t2 = ticket(g.join(11, req("m2", &["range"]), String::new()));
        let session_end = 3 + i64::from(SESSION);
        g.tick(session_end); // m1 and m2 are due together; m1's removal completes the join
        assert!(g.member("m1").is_none());
        assert_eq!(g.state(), GroupState::CompletingRebalance);
        let (r2, r3) = (wait_join(&mut g, t2), wait_join(&mut g, t3));
        assert_eq!((r2.generation_id, r2.leader.as_str(), r3.generation_id), (3, "m2", 3));
        for id in ["m2", "m3"] {
            let deadline = g.member(id).unwrap().heartbeat_deadline;
            assert_eq!(deadline, Some(session_end + i64::from(SESSION)), "{id}'s session after the join");
        }
        // m2 (the new leader) dies before its SyncGroup; m3 syncs and keeps heartbeating.
        let ts = ticket(g.sync(session_end + 1, sreq("m3", None, 3, vec![])));
        for t in (session_end + 1000..=session_end + i64::from(SESSION)).step_by(1000) {
            assert_eq!(g.heartbeat(t, mref("m3", None, 3)), errors::NONE);
            g.tick(t);
        }
        assert!(g.member("m2").is_none(), "the dead m2 was never expired: {:?}", g.member("m2"));
        assert_eq!(g.state(), GroupState::PreparingRebalance);
        let Some(Completion::Sync(s)) = g.take_completion(ts) else { panic!("m3's SyncGroup unanswered") };
        assert_eq!(s.error, errors::REBALANCE_IN_PROGRESS);
    }

    /// One step of a client in [`members_that_stop_talking_are_always_expired`].
    #[derive(Clone, Debug)]
    enum Step {
        /// JoinGroup: with the client's member id (or none), KIP-394 style or not, as a
        /// static member or not, with protocols `range` or `roundrobin` + `range`.
        Join { client: usize, fresh: bool, kip394: bool, static_member: bool, alt_protocols: bool },
        /// SyncGroup in the client's generation (the leader assigns something to everyone).
        Sync { client: usize },
        /// Heartbeat in the client's generation.
        Heartbeat { client: usize },
        /// OffsetCommit validation in the client's generation.
        Commit { client: usize },
        /// LeaveGroup.
        Leave { client: usize },
        /// The waiter of the client's parked request gives up (its connection closed).
        Abandon { client: usize },
        /// Time passes and the timers fire (a late timer thread fires many at once).
        Advance { ms: i64 },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let client = 0usize..4;
        prop_oneof![
            4 => (client.clone(), any::<bool>(), any::<bool>(), proptest::bool::weighted(0.15), proptest::bool::weighted(0.1))
                .prop_map(|(client, fresh, kip394, static_member, alt_protocols)| Step::Join {
                    client, fresh, kip394, static_member, alt_protocols
                }),
            3 => client.clone().prop_map(|client| Step::Sync { client }),
            3 => client.clone().prop_map(|client| Step::Heartbeat { client }),
            1 => client.clone().prop_map(|client| Step::Commit { client }),
            1 => client.clone().prop_map(|client| Step::Leave { client }),
            1 => client.prop_map(|client| Step::Abandon { client }),
            4 => prop_oneof![0i64..1500, 9_000i64..11_000, 25_000i64..35_000].prop_map(|ms| Step::Advance { ms }),
        ]
    }

    /// What a client knows: its member id, generation, and parked requests.
    #[derive(Clone, Debug, Default)]
    struct Client {
        member_id: String,
        generation_id: i32,
        join: Option<Ticket>,
        sync: Option<Ticket>,
    }

    fn settle(g: &mut Group, clients: &mut [Client]) {
        for c in clients.iter_mut() {
            if let Some(Completion::Join(r)) = c.join.and_then(|t| g.take_completion(t)) {
                c.join = None;
                if r.error == errors::NONE || r.error == errors::MEMBER_ID_REQUIRED {
                    c.member_id = r.member_id;
                    c.generation_id = r.generation_id;
                } else if r.error == errors::UNKNOWN_MEMBER_ID || r.error == errors::FENCED_INSTANCE_ID {
                    c.member_id = String::new();
                }
            }
            if c.sync.is_some_and(|t| g.take_completion(t).is_some()) {
                c.sync = None;
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Issue 12 (6): over random join / sync / heartbeat / commit / leave / abandon / timer
        /// sequences, every member always has a session deadline or awaits an answer that will
        /// come ([`Group::check_invariants`]), and once every client stops talking the timers
        /// alone empty the group in bounded time: no member is kept forever.
        #[test]
        fn members_that_stop_talking_are_always_expired(
            initial_delay in proptest::prop_oneof![proptest::strategy::Just(0i64), proptest::strategy::Just(3000i64)],
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let mut g = Group::new("g", config(initial_delay), 0);
            let mut clients = vec![Client::default(); 4];
            let mut now = 0i64;
            let mut next_id = 0;
            for step in steps {
                match step {
                    Step::Join { client, fresh, kip394, static_member, alt_protocols } => {
                        let c = &mut clients[client];
                        if fresh {
                            c.member_id.clear();
                        }
                        let protocols: &[&str] = if alt_protocols { &["roundrobin", "range"] } else { &["range"] };
                        let mut r = req(&c.member_id, protocols);
                        r.require_known_member_id = kip394;
                        r.group_instance_id = static_member.then(|| format!("i{client}"));
                        next_id += 1;
                        match g.join(now, r, format!("c{client}-{next_id}")) {
                            Reply::Now(r) => {
                                if r.error == errors::NONE || r.error == errors::MEMBER_ID_REQUIRED {
                                    c.member_id = r.member_id;
                                    c.generation_id = r.generation_id;
                                }
                            }
                            Reply::Wait(t) => c.join = Some(t),
                        }
                    }
                    Step::Sync { client } => {
                        let c = &clients[client];
                        let assignments = g.members().iter().map(|m| (m.member_id.clone(), Bytes::from_static(b"a"))).collect();
                        match g.sync(now, sreq(&c.member_id, None, c.generation_id, assignments)) {
                            Reply::Now(_) => {}
                            Reply::Wait(t) => clients[client].sync = Some(t),
                        }
                    }
                    Step::Heartbeat { client } => {
                        let c = &clients[client];
                        g.heartbeat(now, mref(&c.member_id, None, c.generation_id));
                    }
                    Step::Commit { client } => {
                        let c = &clients[client];
                        let _ = g.validate_offset_commit(now, mref(&c.member_id, None, c.generation_id));
                    }
                    Step::Leave { client } => {
                        let c = &mut clients[client];
                        g.leave(now, &c.member_id, None);
                        c.member_id.clear();
                    }
                    Step::Abandon { client } => {
                        let c = &mut clients[client];
                        for t in [c.join.take(), c.sync.take()].into_iter().flatten() {
                            g.abandon(t);
                        }
                    }
                    Step::Advance { ms } => {
                        now += ms;
                        g.tick(now);
                    }
                }
                settle(&mut g, &mut clients);
                proptest::prop_assert!(g.check_invariants().is_ok(), "{:?}: {:?}", g.check_invariants(), g);
            }
            // Everyone falls silent: only the timers run, each fired when it is due.
            let silent_from = now;
            let bound = NEW_MEMBER_JOIN_TIMEOUT_MS + 4 * i64::from(REBALANCE) + 4 * i64::from(SESSION);
            while let Some(deadline) = g.next_deadline() {
                proptest::prop_assert!(deadline - silent_from <= bound, "still busy at +{} ms: {:?}", deadline - silent_from, g);
                now = now.max(deadline);
                g.tick(now);
                proptest::prop_assert!(g.check_invariants().is_ok(), "{:?}: {:?}", g.check_invariants(), g);
            }
            proptest::prop_assert!(
                g.members().is_empty() && g.pending_member_count() == 0,
                "members never expired (no timer left): {:?}",
                g
            );
            proptest::prop_assert_eq!(g.state(), GroupState::Empty);
        }
    }

    #[test]
    fn group_max_size_refuses_extra_members() {
        let mut g = Group::new("g", GroupConfig { max_size: 1, ..config(0) }, 0);
        let t = ticket(g.join(0, req("", &["range"]), "m1".into()));
        g.tick(0);
        wait_join(&mut g, t);
        let r = join_now(&mut g, (1, req("", &["range"]), "m2".into())).unwrap();
        assert_eq!(r.error, errors::GROUP_MAX_SIZE_REACHED);
    }
}
