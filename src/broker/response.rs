//! [`Response`]: what a handler produced for one request, for the connection to write, and
//! [`encode`], which frames a `kafka-protocol` response body as one. Handlers return it;
//! [`connection`](super::connection) writes it (an encoded frame, a Fetch response through the
//! read path, nothing, or a close), so handlers never depend on the connection.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, ResponseKind};

use crate::protocol::fetch_response::FetchResponseFrame;
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
