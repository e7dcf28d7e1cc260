//! The Kafka wire protocol: framing, request and response codecs.
//!
//! Every Kafka request and response travels as one *frame*: a big-endian `i32` size followed by
//! that many bytes (`header + body`). [`frame`] reads frames without trusting their size (it is
//! checked against `socket.request.max.bytes` before anything is allocated), decodes the request
//! header and body with the `kafka-protocol` crate, and encodes responses.
//!
//! ```text
//! socket bytes -> frame::check_frame / frame::read_frame    size-prefixed frame, size limit
//!              -> frame::decode_request                     header (v1/v2) + RequestKind
//! broker handler builds a ResponseKind
//!              -> frame::encode_response                    size + header (v0/v1) + body
//! ```
//!
//! Beside the requests and responses, the formats other components put inside them or in a log:
//! [`consumer_protocol`] is the consumer protocol's Subscription and Assignment (on
//! `kafka-protocol`'s messages), [`consumer_offsets`] the `__consumer_offsets` record schemas
//! (written and replayed by the broker's group coordinator, read by the admin client and by
//! `log dump`), [`transaction_state`] the `__transaction_state` record schemas (written and replayed
//! by the broker's transaction coordinator). [`primitives`] is the
//! crate's one codec of Kafka's primitives (lengths, varints, strings) for what `kafka-protocol`
//! does not do: those records, the sticky assignor's user data, and [`fetch_response`], the Fetch
//! response framed by hand so that record bytes stay in their files.
//!
//! Errors of this layer are [`ProtocolError`]; each carries the API key, version and correlation
//! id when they are known, so the broker can answer with an error response where the protocol has
//! one and close the connection otherwise.

pub mod consumer_offsets;
pub mod consumer_protocol;
pub mod fetch_response;
pub mod frame;
pub(crate) mod primitives;
pub mod transaction_state;

pub use frame::ProtocolError;
