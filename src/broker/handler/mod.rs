//! One handler per Kafka API, and the dispatch from a decoded request to it.
//!
//! Each handler takes the request body and version and returns the response body (Produce and
//! Fetch return what the connection must do: [`Response`](crate::broker::response::Response));
//! [`dispatch`] checks the version against what the broker serves
//! ([`api_versions::served_range`]), runs the handler and encodes the answer. A request for an API
//! or version the broker does not serve closes the connection, as Kafka does (except
//! ApiVersions, which is answered; KIP-511). The group APIs' handlers are the coordinator's
//! ([`coordinator::handlers`](crate::broker::coordinator::handlers)).
//!
//! - [`dispatch`]: API key -> handler (Kafka's `KafkaApis`).
//! - [`api_versions`], [`metadata`], [`create_topics`], [`produce`], [`fetch`], [`list_offsets`],
//!   [`offset_for_leader_epoch`], [`init_producer_id`], [`describe_configs`],
//!   [`incremental_alter_configs`] (the dynamic broker configs): one file per API.

pub(crate) mod api_versions;
pub(crate) mod create_topics;
pub(crate) mod describe_configs;
pub(crate) mod dispatch;
pub(crate) mod fetch;
pub(crate) mod incremental_alter_configs;
pub(crate) mod init_producer_id;
pub(crate) mod list_offsets;
pub(crate) mod metadata;
pub(crate) mod offset_for_leader_epoch;
pub(crate) mod produce;
