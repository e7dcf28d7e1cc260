//! DescribeConfigs (API key 32): the configs of the broker and of topics, as Kafka's
//! `ConfigHelper.describeConfigs` reports them.
//!
//! Per resource (errors are per resource, with no configs):
//!
//! | resource | answer |
//! |---|---|
//! | broker (type 4), name `"0"` (this node) | every broker key ([`broker_keys`]): `read.path` and `server.model` with their dynamic levels, the others read-only |
//! | broker, empty name (the cluster default) | only the keys with a cluster-default dynamic value, source `DYNAMIC_DEFAULT_BROKER_CONFIG` (3) |
//! | broker, another id | `INVALID_REQUEST` "Unexpected broker id, expected 0 or empty string, but received 7" |
//! | broker, a name that is not an integer | `INVALID_REQUEST` "Broker id must be an integer, but it is: x" |
//! | topic (type 2) | every topic config with the topic's value and source (`TOPIC_CONFIG` 1, `STATIC_BROKER_CONFIG` 4, `DEFAULT_CONFIG` 5), `read_only` false |
//! | topic, illegal name | `INVALID_TOPIC_EXCEPTION` |
//! | topic, unknown | `UNKNOWN_TOPIC_OR_PARTITION` |
//! | any other type (broker logger, group, ...) | `INVALID_REQUEST` "Unsupported resource type: 8" |
//!
//! `configuration_keys` (non-null) keeps only the named keys (unknown names are left out, as in
//! Kafka). `include_synonyms` adds each entry's synonyms in precedence order: for a broker key
//! its per-broker and cluster-default dynamic values, static value and default; for a topic
//! config its override (named as the topic config), then its first broker synonym at the static
//! level (named as that synonym, e.g. `log.retention.ms`) and at the default. The entry's source
//! is the first synonym's. `include_documentation` (v3+) adds a line of documentation;
//! `config_type` (v3+) is Kafka's `ConfigType` of the key. No key here is sensitive.
//!
//! No authorizer: `TOPIC_AUTHORIZATION_FAILED` / `CLUSTER_AUTHORIZATION_FAILED` never occur.
//! Gap: a per-topic config does not persist across a restart ([`create_topics`](super::create_topics)),
//! so a topic's overrides are described only until then.
//!
//! Versions v1-v4 (the codec's; Kafka 4 removed v0, KIP-896); confluent-kafka 2.16's AdminClient
//! (librdkafka 2.16) is tested against them (`tests/it/dynamic_config.rs`).

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::dynamic_config::{broker_keys, topic_config_type, ConfigType, DescribedKey, DYNAMIC_KEYS};
use crate::broker::errors;
use crate::broker::node::NODE_ID;
use crate::broker::shared::Shared;
use crate::log::config::{broker_synonyms, ConfigSource, TOPIC_CONFIG_KEYS};
use crate::log::manager::validate_topic_name;
use crate::log::LogConfig;

/// Kafka's `ConfigResource.Type.TOPIC` (2).
pub(crate) const RESOURCE_TOPIC: i8 = 2;
/// Kafka's `ConfigResource.Type.BROKER` (4).
pub(crate) const RESOURCE_BROKER: i8 = 4;

/// A resource refused: error code and message.
type Refusal = (i16, String);

/// Answers every resource of `request`, in request order.
pub(crate) fn handle(shared: &Shared, request: &DescribeConfigsRequest, _version: i16) -> DescribeConfigsResponse {
    let results = request
        .resources
        .iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            match describe(shared, request, resource) {
                Ok(configs) => result.with_error_code(errors::NONE).with_configs(configs),
                Err((code, message)) => {
                    tracing::debug!("DescribeConfigs {}: error {code}: {message}", resource.resource_name.as_str());
                    result.with_error_code(code).with_error_message(Some(StrBytes::from_string(message)))
                }
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// Checks a broker resource's name, with the messages of Kafka's `ConfigHelper`
/// (`resourceNameToBrokerId`, for DescribeConfigs: `alter` false) or of
/// `ConfigAdminManager.validateResourceNameIsCurrentNodeId` (IncrementalAlterConfigs: `alter`
/// true): `Ok(true)` for this node's id, `Ok(false)` for the empty name (the cluster default).
/// Errors: `INVALID_REQUEST` for a name that is not an integer or another broker's id.
pub(crate) fn check_broker_name(name: &str, alter: bool) -> Result<bool, Refusal> {
    if name.is_empty() {
        return Ok(false);
    }
    let (what, or_empty) = if alter { ("Node", "") } else { ("Broker", " or empty string") };
    let id: i32 = name
        .parse()
        .map_err(|_| (errors::INVALID_REQUEST, format!("{what} id must be an integer, but it is: {name}")))?;
    if id != NODE_ID {
        return Err((
            errors::INVALID_REQUEST,
            format!("Unexpected broker id, expected {NODE_ID}{or_empty}, but received {name}"),
        ));
    }
    Ok(true)
}

fn describe(
    shared: &Shared,
    request: &DescribeConfigsRequest,
    resource: &DescribeConfigsResource,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let name = resource.resource_name.as_str();
    let keys: Vec<DescribedKey> = match resource.resource_type {
        RESOURCE_BROKER => {
            let per_broker = check_broker_name(name, false)?;
            let mut keys = broker_keys(&shared.config);
            for key in &mut keys {
                if DYNAMIC_KEYS.contains(&key.name.as_str()) {
                    // The dynamic levels, then the static one and the default.
                    let dynamic = shared.dynamic_config().describe_dynamic(&key.name, per_broker);
                    key.synonyms = dynamic.into_iter().map(|(v, s)| (key.name.clone(), v, s)).collect();
                }
            }
            if !per_broker {
                keys.retain(|k| DYNAMIC_KEYS.contains(&k.name.as_str()) && !k.synonyms.is_empty());
            }
            keys
        }
        RESOURCE_TOPIC => {
            validate_topic_name(name).map_err(|e| (errors::INVALID_TOPIC_EXCEPTION, e))?;
            let logs =
                shared.logs().ok_or((errors::UNKNOWN_SERVER_ERROR, "the broker is shutting down".to_string()))?;
            let partition = logs
                .partition(name, 0)
                .ok_or((errors::UNKNOWN_TOPIC_OR_PARTITION, format!("The topic '{name}' does not exist.")))?;
            topic_keys(&partition.config(), logs.config())
        }
        other => return Err((errors::INVALID_REQUEST, format!("Unsupported resource type: {other}"))),
    };
    let wanted = resource.configuration_keys.as_ref();
    Ok(keys
        .into_iter()
        .filter(|k| wanted.is_none_or(|w| w.iter().any(|n| n.as_str() == k.name)))
        .map(|k| entry(k, request.include_synonyms, request.include_documentation))
        .collect())
}

/// A topic's configs: `topic` (its log config) over `broker` (the broker's log defaults).
fn topic_keys(topic: &LogConfig, broker: &LogConfig) -> Vec<DescribedKey> {
    let defaults = LogConfig::default();
    let mut names: Vec<&'static str> = TOPIC_CONFIG_KEYS.to_vec();
    names.sort_unstable();
    names
        .into_iter()
        .filter_map(|key| {
            let mut synonyms = Vec::new();
            if topic.source(key) == Some(ConfigSource::Topic) {
                synonyms.push((key.to_string(), topic.get(key)?, ConfigSource::Topic as i8));
            }
            let broker_name = broker_synonyms(key).first().copied().unwrap_or(key);
            if broker.source(key) == Some(ConfigSource::StaticBroker) {
                synonyms.push((broker_name.to_string(), broker.get(key)?, ConfigSource::StaticBroker as i8));
            }
            synonyms.push((broker_name.to_string(), defaults.get(key)?, ConfigSource::Default as i8));
            Some(DescribedKey {
                name: key.to_string(),
                config_type: topic_config_type(key).unwrap_or(ConfigType::String),
                dynamic: true,
                doc: "Topic config (Kafka's TopicConfig)",
                synonyms,
            })
        })
        .collect()
}

/// One entry: the value and source of the first synonym; the synonyms when asked.
fn entry(key: DescribedKey, synonyms: bool, documentation: bool) -> DescribeConfigsResourceResult {
    let (value, source) = match key.synonyms.first() {
        Some((_, v, s)) => (Some(StrBytes::from_string(v.clone())), *s),
        None => (None, ConfigSource::Default as i8),
    };
    let synonym_list = if synonyms {
        key.synonyms
            .iter()
            .map(|(n, v, s)| {
                DescribeConfigsSynonym::default()
                    .with_name(StrBytes::from_string(n.clone()))
                    .with_value(Some(StrBytes::from_string(v.clone())))
                    .with_source(*s)
            })
            .collect()
    } else {
        Vec::new()
    };
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(key.name))
        .with_value(value)
        .with_read_only(!key.dynamic)
        .with_config_source(source)
        .with_is_sensitive(false)
        .with_synonyms(synonym_list)
        .with_config_type(key.config_type as i8)
        .with_documentation(documentation.then(|| StrBytes::from_static_str(key.doc)))
}
