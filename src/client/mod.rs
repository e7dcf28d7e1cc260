//! Kafka clients of fetchbench's own: a blocking connection that negotiates API versions
//! ([`connection`]), the admin queries behind `fetchbench groups` ([`admin`]), and the
//! consumer ([`consumer`], behind `fetchbench consume`: [`consume_cmd`]), and the load
//! producer ([`producer`], behind `fetchbench produce`: [`produce_cmd`]).
//!
//! Codecs are the `kafka-protocol` crate's ([`crate::protocol::frame`]); a connection sends
//! requests with the highest version both sides know, as Kafka's `NetworkClient` does after
//! ApiVersions (KIP-35, KIP-511).

pub mod admin;
pub(crate) mod assignor;
pub(crate) mod connection;
pub mod consume_cmd;
pub mod consumer;
pub mod produce_cmd;
pub mod producer;

pub use connection::{ClientError, KafkaConnection};
