//! Kafka clients of fetchbench's own: a blocking connection that negotiates API versions
//! ([`connection`]) and the admin queries behind `fetchbench groups` ([`admin`]).
//!
//! Codecs are the `kafka-protocol` crate's ([`crate::protocol::frame`]); a connection sends
//! requests with the highest version both sides know, as Kafka's `NetworkClient` does after
//! ApiVersions (KIP-35, KIP-511).

pub mod admin;
pub mod assignor;
pub mod connection;

pub use connection::{ClientError, KafkaConnection};
