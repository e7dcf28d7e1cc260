//! The dispatch from a decoded request to its handler (Kafka's `KafkaApis.handle`): checks the
//! version against what the broker serves ([`api_versions::served_range`]), runs the handler of
//! the API, and encodes its answer. A request for an API or version the broker does not serve
//! closes the connection, as Kafka does (except ApiVersions, which is answered; KIP-511).

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::{
    api_versions, create_topics, fetch, init_producer_id, list_offsets, metadata, offset_for_leader_epoch, produce,
};
use crate::broker::coordinator::handlers as groups;
use crate::broker::response::{encode, Response};
use crate::broker::shared::Shared;
use crate::protocol::frame::DecodedRequest;

/// Runs the handler of `request` and returns what to send back.
pub(crate) fn dispatch(shared: &Shared, request: DecodedRequest) -> Response {
    let version = request.api_version();
    let correlation_id = request.correlation_id();
    let api_key = request.api_key;
    let Some((min, max)) = api_versions::served_range(api_key) else {
        tracing::warn!("{api_key:?} (v{version}, correlation id {correlation_id}) is not implemented; closing");
        return Response::Close;
    };
    if version < min || version > max {
        if api_key == ApiKey::ApiVersions {
            return api_versions::unsupported_version_response(correlation_id);
        }
        tracing::warn!("{api_key:?} v{version} is not served (served {min}..={max}); closing");
        return Response::Close;
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
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(groups::join_group(shared, &r, version, &client_id)),
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync_group(shared, &r, version)),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(shared, &r, version)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(groups::leave_group(shared, &r, version)),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(groups::offset_commit(shared, &r, version)),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(groups::offset_fetch(shared, &r, version)),
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list_groups(shared, &r, version)),
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(groups::describe_groups(shared, &r, version)),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(groups::delete_groups(shared, &r, version)),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(list_offsets::handle(shared, &r, version)),
        RequestKind::Produce(r) => match produce::handle(shared, &r, version) {
            produce::Outcome::Respond(resp) => ResponseKind::Produce(resp),
            produce::Outcome::NoResponse => return Response::None,
            produce::Outcome::Close => return Response::Close,
        },
        RequestKind::Fetch(r) => return fetch::handle(shared, &r, version, correlation_id),
        RequestKind::InitProducerId(r) => ResponseKind::InitProducerId(init_producer_id::handle(shared, &r, version)),
        _ => {
            tracing::warn!("{api_key:?} has no handler; closing");
            return Response::Close;
        }
    };
    encode(api_key, version, correlation_id, &body)
}
