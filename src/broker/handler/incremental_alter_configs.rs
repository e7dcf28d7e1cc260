//! IncrementalAlterConfigs (API key 44, KIP-339): change dynamic broker configs, as Kafka's
//! `ConfigAdminManager.preprocess` and `DynamicBrokerConfig` do on a broker.
//!
//! Per resource, in request order (each answered with its own error code and message):
//!
//! | resource | answer |
//! |---|---|
//! | the same (type, name) twice in the request | `INVALID_REQUEST` "Each resource must appear at most once." (each copy) |
//! | broker (type 4), name `"0"` | the ops on this broker's level ([`DynamicConfig::alter`]: its checks and errors) |
//! | broker, empty name | the ops on the cluster-default level |
//! | broker, a name that is not an integer | `INVALID_REQUEST` "Node id must be an integer, but it is: x" |
//! | broker, another id | `INVALID_REQUEST` "Unexpected broker id, expected 0, but received 7" |
//! | topic (type 2) | `INVALID_REQUEST`: topic configs are set at CreateTopics here (not yet alterable) |
//! | any other type | `INVALID_REQUEST` "Unknown resource type 8" |
//!
//! A refused resource changes nothing; `validate_only` runs every check and changes nothing.
//! The dynamic keys are `read.path` and `server.model` ([`crate::broker::dynamic_config`]): a
//! new `read.path` applies to Fetch responses started after the answer (one being written
//! finishes on its path), a new `server.model` to connections accepted after it (the open ones
//! stay on their front end until they close). Nothing is persisted: a restart starts from the
//! static configs.
//!
//! Versions v0-v1 (the codec's; v1 is the flexible encoding); confluent-kafka 2.16's AdminClient
//! is tested against them.
//!
//! [`DynamicConfig::alter`]: crate::broker::dynamic_config::DynamicConfig::alter

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::dynamic_config::AlterOp;
use crate::broker::errors;
use crate::broker::handler::describe_configs::{check_broker_name, RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::shared::Shared;

/// Checks and applies every resource of `request`; one response per resource, in order.
pub(crate) fn handle(
    shared: &Shared,
    request: &IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let key = |r: &AlterConfigsResource| (r.resource_type, r.resource_name.as_str().to_string());
    let responses = request
        .resources
        .iter()
        .map(|resource| {
            let response = AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let duplicate = request.resources.iter().filter(|r| key(r) == key(resource)).count() > 1;
            let outcome = if duplicate {
                Err((errors::INVALID_REQUEST, "Each resource must appear at most once.".to_string()))
            } else {
                alter(shared, resource, request.validate_only)
            };
            match outcome {
                Ok(()) => response.with_error_code(errors::NONE).with_error_message(None),
                Err((code, message)) => {
                    tracing::info!(
                        "IncrementalAlterConfigs {}: error {code}: {message}",
                        resource.resource_name.as_str()
                    );
                    response.with_error_code(code).with_error_message(Some(StrBytes::from_string(message)))
                }
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

fn alter(shared: &Shared, resource: &AlterConfigsResource, validate_only: bool) -> Result<(), (i16, String)> {
    let name = resource.resource_name.as_str();
    match resource.resource_type {
        RESOURCE_BROKER => {
            let per_broker = check_broker_name(name, true)?;
            let ops: Vec<AlterOp<'_>> = resource
                .configs
                .iter()
                .map(|c| AlterOp {
                    op: c.config_operation,
                    name: c.name.as_str(),
                    value: c.value.as_ref().map(|v| v.as_str()),
                })
                .collect();
            shared.dynamic_config().alter(per_broker, &ops, validate_only).map_err(|e| (e.code, e.message))
        }
        RESOURCE_TOPIC => Err((
            errors::INVALID_REQUEST,
            format!(
                "Topic configs cannot be altered on this broker (topic '{name}'): they are set when the topic \
                 is created (CreateTopics); only the broker's read.path and server.model are dynamic"
            ),
        )),
        other => Err((errors::INVALID_REQUEST, format!("Unknown resource type {other}"))),
    }
}
