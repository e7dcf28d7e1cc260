//! What an io thread does with one request read by a network thread (Kafka's
//! `KafkaRequestHandler`): decode it, make its [`Responder`], dispatch it to its handler. The
//! handler answers through the Responder, at once or later from the purgatory; either way the
//! connection stays muted until the answer is written.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use super::conn_handle::ConnHandle;
use super::handler::api_versions;
use super::handler::dispatch::dispatch;
use super::responder::Responder;
use super::shared::Shared;
use crate::protocol::frame::{self, DecodedRequest, ProtocolError};

/// Handles the request `payload` (a whole frame's payload) read from `conn` at `received`, on the
/// calling io thread. A request whose client hung up meanwhile is still handled: its answer is
/// written if the socket takes it, and a request that would wait is dropped instead.
pub(crate) fn handle(shared: &Arc<Shared>, conn: ConnHandle, payload: Bytes, received: Instant) {
    handle_with(shared, conn, payload, received, dispatch);
}

/// As [`handle`], with the decoded request and its Responder handed to `run` instead of
/// [`dispatch`] on the calling thread: a `uring` core runs the requests that only read inline
/// and sends the others to the io pool ([`super::uring`]). The decode errors are answered (or
/// the connection closed) here, on the calling thread, as [`handle`] does.
pub(crate) fn handle_with(
    shared: &Arc<Shared>,
    conn: ConnHandle,
    payload: Bytes,
    received: Instant,
    run: impl FnOnce(&Arc<Shared>, DecodedRequest, Responder),
) {
    if conn.is_closed() {
        return;
    }
    let peer = conn.peer();
    match frame::decode_request(payload) {
        Ok(request) => {
            let responder = Responder::new(shared, conn, &request, received);
            run(shared, request, responder);
        }
        Err(ProtocolError::UnsupportedVersion { api_key, api_version, correlation_id, .. })
            if api_key == ApiKey::ApiVersions as i16 =>
        {
            tracing::info!("{peer}: ApiVersions v{api_version} not supported; answering with v0");
            let responder = Responder::for_correlation_id(shared, conn, correlation_id, received);
            responder.send(api_versions::unsupported_version_response(correlation_id));
        }
        Err(e) => {
            tracing::warn!("{peer}: {e}; closing");
            conn.close();
        }
    }
}
