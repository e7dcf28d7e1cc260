//! The dispatch from a decoded request to its handler (Kafka's `KafkaApis.handle`): checks the
//! version against what the broker serves ([`api_versions::served_range`]), runs the handler of
//! the API, and sends its answer through the request's [`Responder`]. A request for an API or
//! version the broker does not serve closes the connection, as Kafka does (except ApiVersions,
//! which is answered; KIP-511).
//!
//! Most handlers answer at once and return a body, which is encoded and sent here. Fetch takes
//! the Responder itself (it may wait in the purgatory). JoinGroup and SyncGroup still wait for
//! their rebalance inside the group coordinator (on its condition variable, until the "coord"
//! work turns them into purgatory operations keyed by group): so that waiting members can never
//! hold every io thread while the member that would complete their rebalance sits in the queue,
//! each runs on a short-lived thread of its own (`fetchbench-group`), which answers and ends.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::{
    api_versions, create_topics, fetch, init_producer_id, list_offsets, metadata, offset_for_leader_epoch, produce,
};
use crate::broker::coordinator::handlers::{self as groups, set_client_host};
use crate::broker::responder::Responder;
use crate::broker::response::{encode, Response};
use crate::broker::shared::Shared;
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
        RequestKind::JoinGroup(r) => {
            let shared = Arc::clone(shared);
            return on_group_thread(responder, move |responder| {
                let body = ResponseKind::JoinGroup(groups::join_group(&shared, &r, version, &client_id));
                responder.send(encode(api_key, version, correlation_id, &body));
            });
        }
        RequestKind::SyncGroup(r) => {
            let shared = Arc::clone(shared);
            return on_group_thread(responder, move |responder| {
                let body = ResponseKind::SyncGroup(groups::sync_group(&shared, &r, version));
                responder.send(encode(api_key, version, correlation_id, &body));
            });
        }
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
            produce::Outcome::NoResponse => return responder.send(Response::None),
            produce::Outcome::Close => return responder.send(Response::Close),
        },
        RequestKind::Fetch(r) => return fetch::handle(shared, r, version, responder),
        RequestKind::InitProducerId(r) => ResponseKind::InitProducerId(init_producer_id::handle(shared, &r, version)),
        _ => {
            tracing::warn!("{api_key:?} has no handler; closing");
            return responder.send(Response::Close);
        }
    };
    responder.send(encode(api_key, version, correlation_id, &body))
}

/// Runs a group handler that may wait for a rebalance on a thread of its own (see the
/// [module docs](self)), with the connection's peer as JoinGroup's `client_host`. If no thread
/// can be made it runs here, holding this io thread while it waits.
fn on_group_thread(responder: Responder, handle: impl FnOnce(Responder) + Send + 'static) {
    let peer = responder.peer();
    let slot = Arc::new(std::sync::Mutex::new(Some((responder, handle))));
    let run = {
        let slot = Arc::clone(&slot);
        move || {
            let taken = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
            if let Some((responder, handle)) = taken {
                set_client_host(Some(peer));
                handle(responder);
            }
        }
    };
    if let Err(e) = std::thread::Builder::new().name("fetchbench-group".into()).spawn(run.clone()) {
        tracing::warn!("{peer}: no thread for a group request ({e}); it waits on an io thread");
        run();
    }
}
