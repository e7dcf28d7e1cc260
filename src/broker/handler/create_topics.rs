//! CreateTopics (API key 19): create topics with their partitions and configs on this node.
//!
//! Each topic is checked as Kafka 4's KRaft controller does (`ControllerApis.createTopics`,
//! `ReplicationControlManager.createTopics` / `createTopic`), in this order, and answered with
//! Kafka's error code and message:
//!
//! | check | error |
//! |---|---|
//! | the name appears twice in the request | `INVALID_REQUEST` "Duplicate topic name." (one result) |
//! | illegal name (`Topic.validate`), collides with an existing topic on `.`/`_` | `INVALID_TOPIC_EXCEPTION` |
//! | `__cluster_metadata` | `INVALID_REQUEST` |
//! | the topic exists | `TOPIC_ALREADY_EXISTS` "Topic 'x' already exists." |
//! | a config with a null value | `INVALID_CONFIG` "Null value not supported for topic configs: a,b" |
//! | an unknown topic config name, an invalid value (topic-level names only: [`LogConfig::with_topic_overrides`]) | `INVALID_CONFIG` |
//! | manual assignments with `replication_factor` or `num_partitions` not -1 | `INVALID_REQUEST` |
//! | a manual assignment: a partition twice, an empty list, a broker other than node 0, node 0 twice, indexes not `0..n` | `INVALID_REPLICA_ASSIGNMENT` |
//! | `replication_factor` 0 or below -1 | `INVALID_REPLICATION_FACTOR` |
//! | `num_partitions` 0 or below -1 | `INVALID_PARTITIONS` |
//! | `replication_factor` above 1 (one broker) | `INVALID_REPLICATION_FACTOR` "Unable to replicate the partition 3 time(s): ..." |
//! | more than [`MAX_PARTITIONS_PER_TOPIC`] partitions (fetchbench's bound) | `INVALID_PARTITIONS` |
//!
//! `num_partitions` -1 means the broker's `num.partitions`, `replication_factor` -1 means
//! `default.replication.factor` (1 here). A `timeout_ms` of 0 or less answers every topic with
//! `REQUEST_TIMED_OUT` and creates nothing, as Kafka 4's controller does (the request's deadline
//! has passed before the controller runs it). `validate_only` runs every check and creates
//! nothing; the result then has the nil topic id (Kafka 4 reports a random id that it never
//! stores).
//!
//! A created topic gets partitions `0..n` ([`topics::create`], the same code as Metadata's
//! auto-create) and a topic id (KIP-516) in every partition's `partition.metadata`, so the id
//! survives a restart. v5+ results carry `num_partitions`, `replication_factor` (1) and every
//! topic config with its effective value and source (`TOPIC_CONFIG` 1 for the request's configs,
//! `STATIC_BROKER_CONFIG` 4 for `server.properties` synonyms, `DEFAULT_CONFIG` 5), sorted by name;
//! v7 results carry the topic id.
//!
//! **Gap: per-topic configs do not persist across a restart.** Kafka keeps them in the KRaft
//! metadata log (`ConfigRecord`s); the log layer here has no store for them ([`LogManager::open`]
//! takes a `topic_config` lookup, and the broker passes none), so after a restart the topic's
//! partitions reopen with the broker defaults. The partitions and the topic id persist.
//!
//! Versions: the codec's v2-v7 (Kafka 4 removed v0-v1, KIP-896).
//!
//! [`LogManager::open`]: crate::log::manager::LogManager::open

use std::collections::BTreeMap;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::errors;
use crate::broker::node::NODE_ID;
use crate::broker::shared::Shared;
use crate::broker::topics::{self, TopicError, MAX_PARTITIONS_PER_TOPIC};
use crate::log::config::{ConfigSource, TOPIC_CONFIG_KEYS};
use crate::log::manager::LogManager;
use crate::log::{LogConfig, LogError};

/// `REQUEST_TIMED_OUT` (7): the request's `timeout_ms` passed before the topic was created.
const REQUEST_TIMED_OUT: i16 = 7;
/// Kafka's `default.replication.factor` (not configurable here: one broker).
pub(crate) const DEFAULT_REPLICATION_FACTOR: i16 = 1;

/// What a valid topic will be created with.
struct Plan {
    num_partitions: i32,
    config: LogConfig,
    has_overrides: bool,
}

/// Checks and creates every topic of the request; one result per distinct topic name, in the
/// order of first appearance.
pub(crate) fn handle(shared: &Shared, request: &CreateTopicsRequest, _version: i16) -> CreateTopicsResponse {
    let logs = shared.logs();
    let mut seen: Vec<&str> = Vec::new();
    let mut results = Vec::new();
    for topic in &request.topics {
        let name = topic.name.0.as_str();
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let duplicate = request.topics.iter().filter(|t| t.name.0.as_str() == name).count() > 1;
        let result = CreatableTopicResult::default().with_name(topic.name.clone());
        let outcome = if duplicate {
            Err(TopicError::new(errors::INVALID_REQUEST, "Duplicate topic name."))
        } else {
            match logs {
                None => Err(TopicError::new(errors::UNKNOWN_SERVER_ERROR, "the broker is shutting down")),
                Some(logs) => create_one(shared, logs, topic, request.timeout_ms, request.validate_only),
            }
        };
        results.push(match outcome {
            Ok((id, plan)) => success(result, id, &plan),
            Err(e) => {
                tracing::debug!("CreateTopics {name}: error {}: {}", e.code, e.message);
                result
                    .with_error_code(e.code)
                    .with_error_message(Some(StrBytes::from_string(e.message)))
                    .with_configs(None)
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// Validates one topic (after the timeout, which Kafka's controller checks first) and, unless
/// `validate_only`, creates it, checks and creation under the log directory's creation lock (so
/// of two requests creating one topic, one gets `TOPIC_ALREADY_EXISTS`).
/// Returns its topic id (nil when not created) and what it was created with.
fn create_one(
    shared: &Shared,
    logs: &LogManager,
    topic: &CreatableTopic,
    timeout_ms: i32,
    validate_only: bool,
) -> Result<([u8; 16], Plan), TopicError> {
    let name = topic.name.0.as_str();
    if timeout_ms <= 0 {
        return Err(TopicError::new(
            REQUEST_TIMED_OUT,
            format!("The request's timeout_ms ({timeout_ms}) passed before topic '{name}' could be created."),
        ));
    }
    let creation = logs.lock_topic_creation();
    topics::check_new_topic(logs, name)?;
    let plan = plan(shared, logs, topic)?;
    if validate_only {
        return Ok(([0; 16], plan));
    }
    let config = plan.has_overrides.then(|| plan.config.clone());
    match topics::create(&creation, name, plan.num_partitions, config) {
        Ok(id) => Ok((id.0, plan)),
        Err(e) => Err(TopicError::new(errors::log_error_code(&e), e.to_string())),
    }
}

/// The checks after the name: configs (over the broker defaults), assignments, counts.
fn plan(shared: &Shared, logs: &LogManager, topic: &CreatableTopic) -> Result<Plan, TopicError> {
    let null_configs: Vec<&str> = topic.configs.iter().filter(|c| c.value.is_none()).map(|c| c.name.as_str()).collect();
    if !null_configs.is_empty() {
        return Err(TopicError::new(
            errors::INVALID_CONFIG,
            format!("Null value not supported for topic configs: {}", null_configs.join(",")),
        ));
    }
    let overrides: BTreeMap<String, String> = topic
        .configs
        .iter()
        .filter_map(|c| Some((c.name.as_str().to_string(), c.value.as_ref()?.as_str().to_string())))
        .collect();
    let config = logs.config().with_topic_overrides(&overrides).map_err(|e| config_error(&e))?;
    let num_partitions = partition_count(shared, topic)?;
    Ok(Plan { num_partitions, config, has_overrides: !overrides.is_empty() })
}

/// The partition count from `num_partitions` / `replication_factor` or the manual assignments.
fn partition_count(shared: &Shared, topic: &CreatableTopic) -> Result<i32, TopicError> {
    let bad_assignment = |m: String| TopicError::new(errors::INVALID_REPLICA_ASSIGNMENT, m);
    let count = if !topic.assignments.is_empty() {
        if topic.replication_factor != -1 {
            return Err(TopicError::new(
                errors::INVALID_REQUEST,
                "A manual partition assignment was specified, but replication factor was not set to -1.",
            ));
        }
        if topic.num_partitions != -1 {
            return Err(TopicError::new(
                errors::INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            ));
        }
        let mut indexes = Vec::with_capacity(topic.assignments.len());
        for a in &topic.assignments {
            if indexes.contains(&a.partition_index) {
                return Err(bad_assignment(format!(
                    "Found multiple manual partition assignments for partition {}",
                    a.partition_index
                )));
            }
            if a.broker_ids.is_empty() {
                return Err(bad_assignment("The manual partition assignment includes an empty replica list.".into()));
            }
            let mut brokers: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
            brokers.sort_unstable();
            if let Some(other) = brokers.iter().find(|b| **b != NODE_ID) {
                return Err(bad_assignment(format!(
                    "The manual partition assignment includes broker {other}, but no such broker is registered."
                )));
            }
            if brokers.len() > 1 {
                return Err(bad_assignment(format!(
                    "The manual partition assignment includes the broker {NODE_ID} more than once."
                )));
            }
            indexes.push(a.partition_index);
        }
        let n = indexes.len();
        if (0..n).any(|i| !indexes.contains(&(i as i32))) {
            return Err(bad_assignment("partitions should be a consecutive 0-based integer sequence".into()));
        }
        i32::try_from(n).unwrap_or(i32::MAX)
    } else if topic.replication_factor < -1 || topic.replication_factor == 0 {
        return Err(TopicError::new(
            errors::INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ));
    } else if topic.num_partitions < -1 || topic.num_partitions == 0 {
        return Err(TopicError::new(
            errors::INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        ));
    } else {
        let rf = if topic.replication_factor == -1 { DEFAULT_REPLICATION_FACTOR } else { topic.replication_factor };
        if rf > 1 {
            return Err(TopicError::new(
                errors::INVALID_REPLICATION_FACTOR,
                format!(
                    "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} \
                     cannot be reached because only 1 broker(s) are registered."
                ),
            ));
        }
        if topic.num_partitions == -1 {
            shared.config.num_partitions
        } else {
            topic.num_partitions
        }
    };
    if count > MAX_PARTITIONS_PER_TOPIC {
        return Err(TopicError::new(
            errors::INVALID_PARTITIONS,
            format!("{count} partitions requested; this broker creates at most {MAX_PARTITIONS_PER_TOPIC} per topic"),
        ));
    }
    Ok(count)
}

/// Kafka's messages for a refused topic config (`ConfigDef` / `LogConfig.validateNames`).
fn config_error(e: &LogError) -> TopicError {
    let message = match e {
        LogError::InvalidConfig { key, reason, .. } if reason.starts_with("unknown") => {
            format!("Unknown topic config name: {key}")
        }
        LogError::InvalidConfig { key, value, reason } => {
            format!("Invalid value {value} for configuration {key}: {reason}")
        }
        other => other.to_string(),
    };
    TopicError::new(errors::INVALID_CONFIG, message)
}

/// A successful result: topic id (v7), partition count, replication factor and configs (v5+).
fn success(result: CreatableTopicResult, id: [u8; 16], plan: &Plan) -> CreatableTopicResult {
    let mut keys: Vec<&str> = TOPIC_CONFIG_KEYS.to_vec();
    keys.sort_unstable();
    let configs = keys
        .into_iter()
        .filter_map(|key| {
            let value = plan.config.get(key)?;
            let source = plan.config.source(key).unwrap_or(ConfigSource::Default);
            Some(
                CreatableTopicConfigs::default()
                    .with_name(StrBytes::from_static_str(key))
                    .with_value(Some(StrBytes::from_string(value)))
                    .with_read_only(false)
                    .with_config_source(source as i8)
                    .with_is_sensitive(false),
            )
        })
        .collect();
    result
        .with_topic_id(uuid::Uuid::from_bytes(id))
        .with_error_code(errors::NONE)
        .with_error_message(None)
        .with_num_partitions(plan.num_partitions)
        .with_replication_factor(1)
        .with_configs(Some(configs))
}
