//! One client connection: read a frame, decode it, run its handler, write the response, repeat.
//!
//! Requests are handled one at a time, so responses leave in request order (Kafka's
//! `SocketServer` mutes a channel while one of its requests is in flight). Bad input never
//! panics and affects only this connection:
//!
//! | input                                             | answer                                   |
//! |---------------------------------------------------|------------------------------------------|
//! | frame size negative or over `socket.request.max.bytes` | connection closed (Kafka: `InvalidReceiveException`) |
//! | ApiVersions at a version this broker does not know | ApiVersions v0 response, `UNSUPPORTED_VERSION` (KIP-511) |
//! | unknown API key, other unsupported version, undecodable header or body | connection closed (Kafka does the same) |
//! | an API this broker does not implement yet        | connection closed                         |
//! | acks=0 produce that fails                         | connection closed (the client learns of it that way, as in Kafka) |
//!
//! Every close is logged with the peer address and the reason (a frame over
//! `socket.request.max.bytes` names that limit). A connection past `max.connections` or
//! `max.connections.per.ip` never gets here: the accept loop ([`super::server`]) closes it at
//! once, unread, with a warning naming the limit; the place this connection holds in those limits
//! is freed when [`serve`] returns.
//!
//! Each consumer Fetch (`replica_id` < 0, see `is_consumer_fetch`) is timed from the return of the frame read
//! to the return of the response's last write and recorded in the broker's shared histogram
//! ([`super::BrokerHandle::take_fetch_latency`]), in the half of the responses that carried
//! record bytes or in the half that carried none ([`super::BrokerHandle::take_fetch_latencies`]);
//! a Fetch closed instead of answered, or whose write fails, is not recorded. Every Fetch is
//! counted in [`super::BrokerHandle::fetches_in_flight`] from its decode to the end of its
//! response's write (or the connection giving it up).

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Instant;

use kafka_protocol::messages::{ApiKey, RequestKind};

use super::coordinator::handlers::set_client_host;
use super::handler::api_versions;
use super::handler::dispatch::dispatch;
use super::response::Response;
use super::shared::Shared;
use crate::protocol::frame::{self, DecodedRequest, ProtocolError};
use crate::read_path::AnyReadPath;

/// Serves `stream` until the peer closes it, it sends something that cannot be answered, or an
/// I/O error occurs. Errors are logged (with the peer address), never returned: one connection's
/// failure is nobody else's business.
pub(crate) fn serve(mut stream: TcpStream, shared: &Shared) {
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
    set_client_host(stream.peer_addr().ok());
    if shared.is_shutting_down() {
        return;
    }
    let _ = stream.set_nodelay(true);
    // The read path (an io_uring ring and a 1 MiB pipe for uring-splice) is made at the first
    // Fetch response, so connections that never fetch (producers, admin tools, group
    // heartbeats) hold none.
    let mut path: Option<AnyReadPath> = None;
    loop {
        let payload = match frame::read_frame(&mut stream, shared.config.socket_request_max_bytes) {
            Ok(Some(p)) => p,
            Ok(None) => return,
            // A client that resets its connection (a consumer closed while its fetch was
            // parked) is routine; other read errors are worth a warning, with their cause.
            Err(ProtocolError::Io { source }) if is_disconnect(&source) => {
                tracing::debug!("{peer}: reading a frame: {source}; closing");
                return;
            }
            Err(e) => {
                let cause = std::error::Error::source(&e).map(|c| format!(": {c}")).unwrap_or_default();
                tracing::warn!("{peer}: {e}{cause}; closing");
                return;
            }
        };
        // Kafka's TotalTimeMs starts when the request's receive completes.
        let received = Instant::now();
        let mut consumer_fetch = false;
        // Counted in `fetches_in_flight` until its response is written (or given up).
        let mut in_flight = None;
        let response = match frame::decode_request(payload) {
            Ok(request) => {
                consumer_fetch = is_consumer_fetch(&request);
                if matches!(request.body, RequestKind::Fetch(_)) {
                    in_flight = Some(shared.fetch_in_flight());
                }
                dispatch(shared, request)
            }
            Err(ProtocolError::UnsupportedVersion { api_key, api_version, correlation_id, .. })
                if api_key == ApiKey::ApiVersions as i16 =>
            {
                tracing::info!("{peer}: ApiVersions v{api_version} not supported; answering with v0");
                api_versions::unsupported_version_response(correlation_id)
            }
            Err(e) => {
                tracing::warn!("{peer}: {e}; closing");
                return;
            }
        };
        let answers = !matches!(response, Response::None | Response::Close);
        let with_records = matches!(&response, Response::Fetch(f) if f.record_bytes() > 0);
        let written = write_response(&mut stream, &mut path, shared, response);
        if consumer_fetch && answers && written.is_ok() {
            shared.record_fetch_latency(received.elapsed(), with_records);
        }
        drop(in_flight);
        if let Err(e) = written {
            match e {
                WriteEnd::Close => tracing::info!("{peer}: closing after a request that cannot be answered"),
                // A client that goes away mid-answer (a closed consumer) is routine.
                WriteEnd::Io(e) if is_disconnect(&e) => {
                    tracing::debug!("{peer}: writing a response: {e}; closing")
                }
                WriteEnd::Io(e) => tracing::warn!("{peer}: writing a response: {e}; closing"),
            }
            return;
        }
    }
}

/// Whether `request` is a Fetch from a consumer: `replica_id` (below v15) and
/// `replica_state.replica_id` (v15+, KIP-903) both negative. The field a version does not carry
/// decodes as its default, -1, so one test covers every version (Kafka's `FetchRequest.isFromFollower`
/// and the `FetchConsumer` / `FetchFollower` split of `RequestMetrics`).
fn is_consumer_fetch(request: &DecodedRequest) -> bool {
    match &request.body {
        RequestKind::Fetch(r) => r.replica_id.0 < 0 && r.replica_state.replica_id.0 < 0,
        _ => false,
    }
}

enum WriteEnd {
    Close,
    Io(std::io::Error),
}

fn write_response(
    stream: &mut TcpStream,
    path: &mut Option<AnyReadPath>,
    shared: &Shared,
    response: Response,
) -> Result<(), WriteEnd> {
    match response {
        Response::None => Ok(()),
        Response::Close => Err(WriteEnd::Close),
        Response::Encoded(bytes) => stream.write_all(&bytes).map_err(WriteEnd::Io),
        Response::Fetch(frame) => {
            if path.is_none() {
                let created = shared.config.read_path.create(&shared.config.read_path_config).map_err(|e| {
                    tracing::error!("cannot create read path {}: {e}", shared.config.read_path);
                    WriteEnd::Close
                })?;
                *path = Some(created);
            }
            let path = path.as_mut().expect("created above");
            frame.write_to(stream.as_fd(), path).map(|_| ()).map_err(WriteEnd::Io)
        }
    }
}

/// Whether `e` is the peer going away (reset, broken pipe, aborted), not a fault.
fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted)
}
