//! [`Response`]: what a handler produced for one request, for its
//! [`Responder`](super::responder::Responder) to write; [`encode`], which frames a
//! `kafka-protocol` response body as one, and [`fetch`], which frames a Fetch response. The
//! Responder writes it (an encoded frame, a Fetch response through the io thread's read path,
//! nothing, or a close), so handlers never touch the socket.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, ResponseKind};

use crate::protocol::fetch_response::{FetchResponse, FetchResponseFrame};
use crate::protocol::frame;

/// What a handler produced for one request.
#[derive(Debug)]
pub(crate) enum Response {
    /// Nothing to send (Produce with acks=0).
    None,
    /// Close the connection without answering (the request cannot be answered in its protocol).
    Close,
    /// A whole response frame (size prefix included), encoded by `kafka-protocol`.
    Encoded(BytesMut),
    /// A hand-framed Fetch response whose record sets move through the read path.
    Fetch(FetchResponseFrame),
}

/// Encodes a `kafka-protocol` response; an encoding failure (a bug: a field set that the version
/// cannot carry) is logged and closes the connection.
pub(crate) fn encode(api_key: ApiKey, version: i16, correlation_id: i32, body: &ResponseKind) -> Response {
    match frame::encode_response(api_key, version, correlation_id, body) {
        Ok(bytes) => Response::Encoded(bytes),
        Err(e) => {
            tracing::error!("{e}; closing");
            Response::Close
        }
    }
}

/// Frames a Fetch response at `version`; an encoding failure (a bug) is logged and closes the
/// connection.
pub(crate) fn fetch(response: FetchResponse, version: i16, correlation_id: i32) -> Response {
    match response.encode(version, correlation_id) {
        Ok(frame) => Response::Fetch(frame),
        Err(e) => {
            tracing::error!("encoding Fetch v{version} (correlation id {correlation_id}): {e}; closing");
            Response::Close
        }
    }
}
