//! The dispatch from a decoded request to its handler (Kafka's `KafkaApis.handle`): checks the
//! version against what the broker serves ([`api_versions::served_range`]), runs the handler of
//! the API, and sends its answer through the request's [`Responder`]. A request for an API or
//! version the broker does not serve closes the connection, as Kafka does (except ApiVersions,
//! which is answered; KIP-511).
//!
//! Most handlers answer at once and return a body, which is encoded and sent here. Fetch,
//! JoinGroup and SyncGroup take the Responder themselves: each may wait in the purgatory,
//! holding no thread (a Fetch for its bytes, a JoinGroup for its rebalance, a follower's
//! SyncGroup for the leader's assignment), and is answered from there on an io thread.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::{
    api_versions, create_topics, describe_configs, fetch, incremental_alter_configs, init_producer_id, list_offsets,
    metadata, offset_for_leader_epoch, produce,
};
use crate::broker::coordinator::handlers as groups;
use crate::broker::responder::Responder;
use crate::broker::response::{encode, Response};
use crate::broker::shared::Shared;
use crate::broker::txn_coordinator::handlers as txn;
use crate::protocol::frame::DecodedRequest;

/// Runs the handler of `request`; it answers through `responder` (now, or later from the
/// purgatory).
pub(crate) fn dispatch(shared: &Arc<Shared>, request: DecodedRequest, responder: Responder) {
    let version = request.api_version();
    let correlation_id = request.correlation_id();
    let api_key = request.api_key;
    let Some((min, max)) = api_versions::served_range(api_key) else {
        tracing::warn!("{api_key:?} (v{version}, correlation id {correlation_id}) is not implemented; closing");
        return responder.send(Response::Close);
    };
    if version < min || version > max {
        if api_key == ApiKey::ApiVersions {
            return responder.send(api_versions::unsupported_version_response(correlation_id));
        }
        tracing::warn!("{api_key:?} v{version} is not served (served {min}..={max}); closing");
        return responder.send(Response::Close);
    }
    let client_id = request.header.client_id.as_deref().unwrap_or("").to_string();
    let body = match request.body {
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(api_versions::handle(&r, version)),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(shared, &r, version)),
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(create_topics::handle(shared, &r, version)),
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offset_for_leader_epoch::handle(shared, &r, version))
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(groups::find_coordinator(shared, &r, version)),
        RequestKind::JoinGroup(r) => return groups::join_group(shared, &r, version, &client_id, responder),
        RequestKind::SyncGroup(r) => return groups::sync_group(shared, &r, version, responder),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(shared, &r, version)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups::leave_group(shared, &r, version)),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(groups::offset_commit(shared, &r, version)),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(groups::offset_fetch(shared, &r, version)),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(groups::txn_offset_commit(shared, &r, version))
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list_groups(shared, &r, version)),
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(groups::describe_groups(shared, &r, version)),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(groups::delete_groups(shared, &r, version)),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(list_offsets::handle(shared, &r, version)),
        RequestKind::Produce(r) => match produce::handle(shared, &r, version) {
            produce::Outcome::Respond(resp) => ResponseKind::Produce(resp),
            produce::Outcome::NoResponse => return responder.send(Response::None),
            produce::Outcome::Close => return responder.send(Response::Close),
        },
        RequestKind::Fetch(r) => return fetch::handle(shared, r, version, responder),
        RequestKind::InitProducerId(r) => ResponseKind::InitProducerId(init_producer_id::handle(shared, &r, version)),
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(txn::add_partitions_to_txn(shared, &r, version))
        }
        RequestKind::AddOffsetsToTxn(r) => ResponseKind::AddOffsetsToTxn(txn::add_offsets_to_txn(shared, &r, version)),
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(txn::end_txn(shared, &r, version)),
        RequestKind::DescribeConfigs(r) => ResponseKind::DescribeConfigs(describe_configs::handle(shared, &r, version)),
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(incremental_alter_configs::handle(shared, &r, version))
        }
        _ => {
            tracing::warn!("{api_key:?} has no handler; closing");
            return responder.send(Response::Close);
        }
    };
    responder.send(encode(api_key, version, correlation_id, &body))
}
