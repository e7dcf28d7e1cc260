//! The group APIs on the wire: each handler turns a `kafka-protocol` request into calls on the
//! broker's [`GroupCoordinator`](super::runtime::GroupCoordinator) and builds the response of the
//! request's version (fields a version does not have are left at their defaults, nullable
//! strings of old versions sent as `""`). They run on the io threads; each answers through the
//! request's [`Responder`]. JoinGroup and SyncGroup answer at once or park their Responder in
//! the purgatory ([`delayed_join`]), holding no thread; a member's `client_host` is the peer of
//! the connection its JoinGroup came on (as Kafka reports it, `/127.0.0.1`), which DescribeGroups
//! shows.
//!
//! | API (key)             | versions | notes |
//! |-----------------------|----------|-------|
//! | FindCoordinator (10)  | 0-6      | groups and transactional ids: this node; share groups: COORDINATOR_NOT_AVAILABLE |
//! | JoinGroup (11)        | 0-9      | v0: rebalance timeout = session timeout; v4+: KIP-394; v5+: KIP-345; v9: KIP-814 |
//! | Heartbeat (12)        | 0-4      | |
//! | LeaveGroup (13)       | 0-5      | v3+: several members (KIP-345) |
//! | SyncGroup (14)        | 0-5      | v5+: protocol type and name checked |
//! | DescribeGroups (15)   | 0-6      | |
//! | ListGroups (16)       | 0-5      | v4+: state filter; v5+: type filter (`classic`) |
//! | OffsetCommit (8)      | 2-9      | v2-v4: retention time; v6+: leader epoch; v7+: group instance id |
//! | OffsetFetch (9)       | 1-9      | v2+: all partitions (null topics); v7+: `require_stable` (KIP-447); v8+: several groups |
//! | TxnOffsetCommit (28)  | 0-4      | pending until the transaction's marker; v2+: leader epoch; v3+: member, generation, instance id (KIP-447) |
//! | DeleteGroups (42)     | 0-2      | |

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::delayed_join::{self, DelayedGroupRequest};
use super::group::{Completion, JoinRequest, JoinResult, MemberRef, SyncRequest, SyncResult};
use super::runtime::{Answer, CommittedOffset};
use super::storage::LogStorage;
use crate::broker::errors;
use crate::broker::node::NODE_ID;
use crate::broker::responder::Responder;
use crate::broker::response::encode;
use crate::broker::shared::Shared;
use crate::protocol::consumer_offsets::OFFSETS_TOPIC;

/// A member's `client_host` as Kafka reports it (`/127.0.0.1`): the peer of the connection its
/// JoinGroup came on (the request's [`Responder`]; the io thread that runs it is any of the
/// pool's).
fn client_host(responder: &Responder) -> String {
    format!("/{}", responder.peer().ip())
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// `key_type` of FindCoordinator: a consumer group.
const KEY_TYPE_GROUP: i8 = 0;

/// `key_type` of FindCoordinator: a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;

/// FindCoordinator: every group's and every transactional id's coordinator is this node (an
/// empty transactional id is `INVALID_REQUEST`, as Kafka's `KafkaApis.getCoordinator` answers;
/// [`find_coordinator_error`](crate::broker::txn_coordinator::handlers::find_coordinator_error)).
/// Other key types (share groups) are answered COORDINATOR_NOT_AVAILABLE with a message.
pub(crate) fn find_coordinator(
    shared: &Shared,
    request: &FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let (host, port) = shared.advertised();
    let host = s(&host);
    let answer = |key: &StrBytes| -> (i16, Option<StrBytes>, i32, StrBytes, i32) {
        if request.key_type == KEY_TYPE_GROUP {
            tracing::debug!(group = %key.as_str(), partition = shared.coordinator().partition_for(key), "FindCoordinator");
            (errors::NONE, None, NODE_ID, host.clone(), port)
        } else if request.key_type == KEY_TYPE_TRANSACTION {
            match crate::broker::txn_coordinator::handlers::find_coordinator_error(key.as_str()) {
                None => (errors::NONE, None, NODE_ID, host.clone(), port),
                Some((code, message)) => (code, Some(s(&message)), -1, StrBytes::default(), -1),
            }
        } else {
            let message =
                format!("key type {} is not served: fetchbench has no share group coordinator", request.key_type);
            (errors::COORDINATOR_NOT_AVAILABLE, Some(s(&message)), -1, StrBytes::default(), -1)
        }
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let (error, message, node, host, port) = answer(key);
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(host)
                    .with_port(port)
                    .with_error_code(error)
                    .with_error_message(message)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let (error, message, node, host, port) = answer(&request.key);
    let response = FindCoordinatorResponse::default()
        .with_error_code(error)
        .with_node_id(BrokerId(node))
        .with_host(host)
        .with_port(port);
    if version >= 1 {
        response.with_error_message(message)
    } else {
        response
    }
}

/// JoinGroup: answered at once, or parked in the purgatory (holding no thread) until the
/// rebalance completes ([`delayed_join`]). `client_id` is the request header's (the prefix of a
/// new member id); `client_host` is the peer of `responder`'s connection.
pub(crate) fn join_group(
    shared: &Arc<Shared>,
    request: &JoinGroupRequest,
    version: i16,
    client_id: &str,
    responder: Responder,
) {
    let join = JoinRequest {
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
        client_id: client_id.to_string(),
        client_host: client_host(&responder),
        rebalance_timeout_ms: if version >= 1 { request.rebalance_timeout_ms } else { request.session_timeout_ms },
        session_timeout_ms: request.session_timeout_ms,
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.iter().map(|p| (p.name.to_string(), p.metadata.clone())).collect(),
    };
    let correlation_id = responder.correlation_id();
    let answer = move |r: JoinResult| {
        let body = ResponseKind::JoinGroup(join_response(r, version));
        encode(ApiKey::JoinGroup, version, correlation_id, &body)
    };
    match shared.coordinator().begin_join(&LogStorage { shared }, &request.group_id, join) {
        Answer::Now(r) => responder.send(answer(r)),
        Answer::Parked(parked) => {
            let asked_member_id = request.member_id.to_string();
            let encode = Box::new(move |completion: Result<Completion, i16>| match completion {
                Ok(Completion::Join(r)) => answer(r),
                Ok(Completion::Sync(_)) => answer(JoinResult::error(&asked_member_id, errors::UNKNOWN_SERVER_ERROR)),
                Err(code) => answer(JoinResult::error(&asked_member_id, code)),
            });
            delayed_join::park(shared, DelayedGroupRequest::new(parked, encode, responder));
        }
    }
}

/// The JoinGroup response of `r` at `version`.
fn join_response(r: JoinResult, version: i16) -> JoinGroupResponse {
    let name_or_empty = |v: Option<String>| match (v, version >= 7) {
        (Some(v), _) => Some(s(&v)),
        (None, true) => None,
        (None, false) => Some(StrBytes::default()),
    };
    JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation_id)
        .with_protocol_type(if version >= 7 { r.protocol_type.as_deref().map(s) } else { None })
        .with_protocol_name(name_or_empty(r.protocol_name))
        .with_leader(s(&r.leader))
        .with_skip_assignment(r.skip_assignment)
        .with_member_id(s(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(s(&m.member_id))
                        .with_group_instance_id(if version >= 5 { m.group_instance_id.as_deref().map(s) } else { None })
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

/// SyncGroup: the leader (and a member of a Stable group) is answered at once, a follower parked
/// in the purgatory (holding no thread) until the leader's assignment is stored
/// ([`delayed_join`]).
pub(crate) fn sync_group(shared: &Arc<Shared>, request: &SyncGroupRequest, version: i16, responder: Responder) {
    let assignments = request.assignments.iter().map(|a| (a.member_id.to_string(), a.assignment.clone())).collect();
    let member = MemberRef {
        member_id: &request.member_id,
        group_instance_id: request.group_instance_id.as_deref(),
        generation_id: request.generation_id,
    };
    let sync = SyncRequest {
        member,
        protocol_type: request.protocol_type.as_deref(),
        protocol_name: request.protocol_name.as_deref(),
        assignments,
    };
    let correlation_id = responder.correlation_id();
    let answer = move |r: SyncResult| {
        let body = ResponseKind::SyncGroup(sync_response(r, version));
        encode(ApiKey::SyncGroup, version, correlation_id, &body)
    };
    match shared.coordinator().begin_sync(&LogStorage { shared }, &request.group_id, sync) {
        Answer::Now(r) => responder.send(answer(r)),
        Answer::Parked(parked) => {
            let encode = Box::new(move |completion: Result<Completion, i16>| match completion {
                Ok(Completion::Sync(r)) => answer(r),
                Ok(Completion::Join(_)) => answer(SyncResult::error(errors::UNKNOWN_SERVER_ERROR)),
                Err(code) => answer(SyncResult::error(code)),
            });
            delayed_join::park(shared, DelayedGroupRequest::new(parked, encode, responder));
        }
    }
}

/// The SyncGroup response of `r` at `version`.
fn sync_response(r: SyncResult, version: i16) -> SyncGroupResponse {
    let mut response = SyncGroupResponse::default().with_error_code(r.error).with_assignment(r.assignment);
    if version >= 5 {
        response = response
            .with_protocol_type(r.protocol_type.as_deref().map(s))
            .with_protocol_name(r.protocol_name.as_deref().map(s));
    }
    response
}

/// Heartbeat.
pub(crate) fn heartbeat(shared: &Shared, request: &HeartbeatRequest, _version: i16) -> HeartbeatResponse {
    let member = MemberRef {
        member_id: &request.member_id,
        group_instance_id: request.group_instance_id.as_deref(),
        generation_id: request.generation_id,
    };
    let code = shared.coordinator().heartbeat(&request.group_id, member);
    HeartbeatResponse::default().with_error_code(code)
}

/// LeaveGroup: v0-v2 name one member (its error is the top-level error); v3+ several, each
/// answered in `members`.
pub(crate) fn leave_group(shared: &Shared, request: &LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.as_deref().map(str::to_string)))
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let (error, codes) = shared.coordinator().leave_group(&LogStorage { shared }, &request.group_id, &members);
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(if error != errors::NONE { error } else { codes[0] });
    }
    LeaveGroupResponse::default().with_error_code(error).with_members(
        members
            .iter()
            .zip(codes.iter().copied().chain(std::iter::repeat(error)))
            .filter(|_| error == errors::NONE)
            .map(|((m, i), code)| {
                MemberResponse::default()
                    .with_member_id(s(m))
                    .with_group_instance_id(i.as_deref().map(s))
                    .with_error_code(code)
            })
            .collect(),
    )
}

/// OffsetCommit.
pub(crate) fn offset_commit(shared: &Shared, request: &OffsetCommitRequest, version: i16) -> OffsetCommitResponse {
    let entries: Vec<_> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    if version >= 6 { p.committed_leader_epoch } else { -1 },
                    p.committed_metadata.as_deref().map(str::to_string),
                    -1i64,
                )
            })
        })
        .collect();
    let retention = if (2..=4).contains(&version) { request.retention_time_ms } else { -1 };
    let member = MemberRef {
        member_id: &request.member_id,
        group_instance_id: request.group_instance_id.as_deref(),
        generation_id: request.generation_id_or_member_epoch,
    };
    let codes =
        shared.coordinator().commit_offsets(&LogStorage { shared }, &request.group_id, member, retention, &entries);
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR))
                    })
                    .collect(),
            )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// TxnOffsetCommit (Kafka's `KafkaApis.handleTxnOffsetCommitRequest` /
/// `GroupCoordinator.handleTxnCommitOffsets`): the offsets go to the group's `__consumer_offsets`
/// partition as one transactional batch of the request's producer and stay pending until the
/// transaction's marker ([`GroupCoordinator::txn_offset_commit`](super::runtime::GroupCoordinator::txn_offset_commit)).
/// v0-v2 carry no member (a producer outside the group's generation); v3+ (KIP-447) the
/// member id, generation and `group.instance.id`, checked against the group. The errors are per
/// partition: INVALID_GROUP_ID, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
/// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, OFFSET_METADATA_TOO_LARGE, and the
/// append's, mapped as OffsetCommit maps them. Before all that, the transaction is verified as a
/// transactional Produce is ([`verify_produce`](crate::broker::txn_coordinator::handlers::verify_produce)):
/// INVALID_TXN_STATE when the group's partition was not added by AddOffsetsToTxn,
/// INVALID_PRODUCER_EPOCH for a fenced producer, INVALID_PRODUCER_ID_MAPPING for an unknown id.
pub(crate) fn txn_offset_commit(
    shared: &Shared,
    request: &TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let entries: Vec<_> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.to_string(),
                    p.partition_index,
                    p.committed_offset,
                    if version >= 2 { p.committed_leader_epoch } else { -1 },
                    p.committed_metadata.as_deref().map(str::to_string),
                    -1i64,
                )
            })
        })
        .collect();
    let member = if version >= 3 {
        MemberRef {
            member_id: &request.member_id,
            group_instance_id: request.group_instance_id.as_deref(),
            generation_id: request.generation_id,
        }
    } else {
        MemberRef { member_id: "", group_instance_id: None, generation_id: -1 }
    };
    // The transaction's verification (KIP-890 part 1, as for a transactional Produce): the
    // transactional id's producer id and epoch, the group's partition added by AddOffsetsToTxn.
    // Its error answers every partition; the retriable ones as COORDINATOR_LOAD_IN_PROGRESS,
    // which producers retry on TxnOffsetCommit (Kafka's `TxnOffsetCommitHandler`).
    // An empty group id is the group coordinator's INVALID_GROUP_ID first (Kafka validates the
    // group before the verification).
    // Held from the verification to the append (see `TxnCoordinator::append_lock`).
    let _txn_appends = shared
        .txn_coordinator()
        .append_lock(request.transactional_id.as_str())
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let offsets_partition = shared.coordinator().partition_for(&request.group_id);
    let verified = if request.group_id.is_empty() {
        Ok(())
    } else {
        crate::broker::txn_coordinator::handlers::verify_produce(
            shared,
            request.transactional_id.as_str(),
            request.producer_id.0,
            request.producer_epoch,
            OFFSETS_TOPIC,
            offsets_partition,
        )
    };
    if let Err((code, why)) = verified {
        tracing::debug!(group = request.group_id.as_str(), "TxnOffsetCommit refused: {why}");
        let code = if code == errors::NOT_ENOUGH_REPLICAS { errors::COORDINATOR_LOAD_IN_PROGRESS } else { code };
        return txn_offset_commit_response(request, vec![code; entries.len()]);
    }
    let codes = shared.coordinator().txn_offset_commit(
        &LogStorage { shared },
        &request.group_id,
        request.producer_id.0,
        request.producer_epoch,
        member,
        &entries,
    );
    txn_offset_commit_response(request, codes)
}

/// The TxnOffsetCommit response of `codes` (one per partition of the request, in order).
fn txn_offset_commit_response(request: &TxnOffsetCommitRequest, codes: Vec<i16>) -> TxnOffsetCommitResponse {
    let mut codes = codes.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        TxnOffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(codes.next().unwrap_or(errors::UNKNOWN_SERVER_ERROR))
                    })
                    .collect(),
            )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Fetches one group's offsets for the response: `(error, topics)`.
#[allow(clippy::type_complexity)]
fn fetch_group(
    shared: &Shared,
    group_id: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> (i16, Vec<(String, Vec<(i32, Option<CommittedOffset>, i16)>)>) {
    match shared.coordinator().fetch_offsets_stable(group_id, topics.clone(), require_stable) {
        Ok(found) => (errors::NONE, found),
        // Kafka puts the group error on every requested partition too (v0-v1 have no top-level
        // error) and answers no partitions for an all-partitions request.
        Err(code) => (
            code,
            topics
                .unwrap_or_default()
                .into_iter()
                .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, None, code)).collect()))
                .collect(),
        ),
    }
}

/// OffsetFetch: a partition without a commit is offset -1, metadata "", no error. v7+ with
/// `require_stable` (KIP-447): a partition with a pending transactional offset is
/// UNSTABLE_OFFSET_COMMIT (offset -1) in the partition's error code, in both the v7 and the v8+
/// (per group) shapes, the group's error staying NONE (Kafka's `GroupMetadataManager.getOffsets`).
pub(crate) fn offset_fetch(shared: &Shared, request: &OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    let require_stable = version >= 7 && request.require_stable;
    let partition_fields = |c: &Option<CommittedOffset>| match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata.clone()),
        None => (-1, -1, String::new()),
    };
    if version >= 8 {
        let groups = request
            .groups
            .iter()
            .map(|g| {
                let wanted = g
                    .topics
                    .as_ref()
                    .map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
                let (error, found) = fetch_group(shared, &g.group_id, wanted, require_stable);
                let topics = found
                    .into_iter()
                    .map(|(topic, parts)| {
                        OffsetFetchResponseTopics::default().with_name(TopicName(s(&topic))).with_partitions(
                            parts
                                .iter()
                                .map(|(p, c, code)| {
                                    let (offset, epoch, metadata) = partition_fields(c);
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(offset)
                                        .with_committed_leader_epoch(epoch)
                                        .with_metadata(Some(s(&metadata)))
                                        .with_error_code(if *code == error { errors::NONE } else { *code })
                                })
                                .collect(),
                        )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(error)
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = request
        .topics
        .as_ref()
        .map(|ts| ts.iter().map(|t| (t.name.to_string(), t.partition_indexes.clone())).collect());
    let (error, found) = fetch_group(shared, &request.group_id, wanted, require_stable);
    let topics = found
        .into_iter()
        .map(|(topic, parts)| {
            OffsetFetchResponseTopic::default().with_name(TopicName(s(&topic))).with_partitions(
                parts
                    .iter()
                    .map(|(p, c, code)| {
                        let (offset, epoch, metadata) = partition_fields(c);
                        // The group's error is on every partition below v2 only.
                        let code = match (error, version) {
                            (errors::NONE, _) => *code,
                            (_, v) if v < 2 => error,
                            _ => errors::NONE,
                        };
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(if version >= 5 { epoch } else { -1 })
                            .with_metadata(Some(s(&metadata)))
                            .with_error_code(code)
                    })
                    .collect(),
            )
        })
        .collect();
    let response = OffsetFetchResponse::default().with_topics(topics);
    if version >= 2 {
        response.with_error_code(error)
    } else {
        response
    }
}

/// ListGroups.
pub(crate) fn list_groups(shared: &Shared, request: &ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let states: Vec<String> =
        if version >= 4 { request.states_filter.iter().map(|x| x.to_string()).collect() } else { vec![] };
    let types: Vec<String> =
        if version >= 5 { request.types_filter.iter().map(|x| x.to_string()).collect() } else { vec![] };
    match shared.coordinator().list_groups(&states, &types) {
        Ok(groups) => ListGroupsResponse::default().with_groups(
            groups
                .into_iter()
                .map(|g| {
                    let mut listed = ListedGroup::default()
                        .with_group_id(GroupId(s(&g.group_id)))
                        .with_protocol_type(s(&g.protocol_type));
                    if version >= 4 {
                        listed = listed.with_group_state(s(g.state));
                    }
                    if version >= 5 {
                        listed = listed.with_group_type(s("classic"));
                    }
                    listed
                })
                .collect(),
        ),
        Err(code) => ListGroupsResponse::default().with_error_code(code),
    }
}

/// The authorized operations of a group with no authorizer: READ, DELETE, DESCRIBE (Kafka's
/// `AclOperation` codes 3, 6, 8 as bits).
const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8);

/// DescribeGroups.
pub(crate) fn describe_groups(
    shared: &Shared,
    request: &DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .iter()
        .map(|id| {
            let d = shared.coordinator().describe_group(id);
            let mut g = DescribedGroup::default()
                .with_error_code(d.error)
                .with_group_id(id.clone())
                .with_group_state(s(d.state))
                .with_protocol_type(s(&d.protocol_type))
                .with_protocol_data(s(&d.protocol))
                .with_members(
                    d.members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(s(&m.member_id))
                                .with_group_instance_id(if version >= 4 {
                                    m.group_instance_id.as_deref().map(s)
                                } else {
                                    None
                                })
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                );
            if version >= 3 {
                g = g.with_authorized_operations(if request.include_authorized_operations {
                    GROUP_AUTHORIZED_OPERATIONS
                } else {
                    i32::MIN
                });
            }
            g
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// DeleteGroups.
pub(crate) fn delete_groups(shared: &Shared, request: &DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
    let ids: Vec<String> = request.groups_names.iter().map(|g| g.to_string()).collect();
    let codes = shared.coordinator().delete_groups(&LogStorage { shared }, &ids);
    DeleteGroupsResponse::default().with_results(
        request
            .groups_names
            .iter()
            .zip(codes)
            .map(|(g, code)| DeletableGroupResult::default().with_group_id(g.clone()).with_error_code(code))
            .collect(),
    )
}
