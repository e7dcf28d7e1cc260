//! Admin queries over the Kafka protocol: the groups a broker coordinates and, for one group,
//! what `kafka-consumer-groups.sh --describe` shows (state, protocol, members with their
//! assignments, committed offsets with log end offsets and lag), plus the generation id.
//!
//! DescribeGroups does not carry the generation, so [`describe_group`] reads the group's last
//! metadata record from `__consumer_offsets` (Fetch of partition `partitionFor(group)`, the
//! way Kafka's `GroupMetadataMessageFormatter` reads it): that is the generation of the last
//! completed rebalance (written when the group became Stable or Empty). The partition count that
//! `partitionFor` needs (`offsets.topic.num.partitions`, a broker setting) comes from a Metadata
//! request for `__consumer_offsets`, which does not create the topic.
//!
//! Broker configs: [`describe_broker_configs`] (DescribeConfigs) and [`alter_broker_configs`]
//! (IncrementalAlterConfigs) of the broker found by [`connected_broker_id`], as
//! `kafka-configs.sh --entity-type brokers --entity-name ID` reads and changes them.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DescribeGroupsRequest, FetchRequest, GroupId, ListGroupsRequest, ListOffsetsRequest,
    MetadataRequest, OffsetFetchRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{ClientError, KafkaConnection};
use crate::log::batch::mixed::MixedBatches;
use crate::protocol::consumer_offsets::{decode_record, partition_for, OffsetsRecord, OFFSETS_TOPIC};
use crate::protocol::consumer_protocol::{ConsumerAssignment, CONSUMER_PROTOCOL_TYPE};

/// One group of ListGroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type (`consumer`, or `""` for groups that only commit offsets).
    pub protocol_type: String,
    /// State name (ListGroups v4+; `""` before).
    pub state: String,
}

/// A member as DescribeGroups reports it, its assignment decoded for `consumer` groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberReport {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Client address (`/127.0.0.1`).
    pub client_host: String,
    /// Assigned (topic, partition)s, sorted.
    pub assignment: Vec<(String, i32)>,
}

/// A partition the group committed to or is assigned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReport {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The committed offset, `None` when there is none.
    pub committed: Option<i64>,
    /// The partition's log end offset (high watermark), `None` when ListOffsets failed.
    pub log_end_offset: Option<i64>,
    /// `log_end_offset - committed`, when both are known.
    pub lag: Option<i64>,
    /// The member the partition is assigned to.
    pub owner: Option<String>,
}

/// What `fetchbench groups --group G` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupReport {
    /// Group id.
    pub group_id: String,
    /// State name (`Stable`, `Empty`, `Dead` for an unknown group, ...).
    pub state: String,
    /// Protocol type.
    pub protocol_type: String,
    /// The chosen protocol (assignor) when Stable.
    pub protocol: String,
    /// Generation of the last completed rebalance, from `__consumer_offsets`; `None` when no
    /// metadata record was found.
    pub generation_id: Option<i32>,
    /// The `__consumer_offsets` partition that holds the group (`partitionFor(group)` over the
    /// topic's partition count from Metadata); `None` when the broker has no such topic.
    pub coordinator_partition: Option<i32>,
    /// Members.
    pub members: Vec<MemberReport>,
    /// Partitions, sorted by topic and partition.
    pub partitions: Vec<PartitionReport>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn kafka(context: String, code: i16) -> Result<(), ClientError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::Kafka { context, code })
    }
}

/// CreateTopics: creates each `(name, partitions)` with replication factor 1 and the broker's
/// default configs, waiting up to `timeout_ms` (the request's `timeout_ms`) for the creation.
///
/// Errors: [`ClientError`]; a topic's error code (TOPIC_ALREADY_EXISTS = 36 included) is
/// [`ClientError::Kafka`] naming the topic.
pub fn create_topics(conn: &mut KafkaConnection, topics: &[(String, i32)], timeout_ms: i32) -> Result<(), ClientError> {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::CreateTopicsRequest;
    let version = conn.version(ApiKey::CreateTopics, (2, 7))?;
    let request = CreateTopicsRequest::default().with_timeout_ms(timeout_ms).with_topics(
        topics
            .iter()
            .map(|(name, partitions)| {
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.clone())))
                    .with_num_partitions(*partitions)
                    .with_replication_factor(1)
            })
            .collect(),
    );
    let ResponseKind::CreateTopics(r) = conn.call(ApiKey::CreateTopics, version, RequestKind::CreateTopics(request))?
    else {
        unreachable!()
    };
    for t in r.topics {
        kafka(format!("CreateTopics {}", t.name.as_str()), t.error_code)?;
    }
    Ok(())
}

/// `ConfigResource.Type.BROKER` of DescribeConfigs and IncrementalAlterConfigs.
const RESOURCE_BROKER: i8 = 4;

/// The node id of the broker `conn` is connected to: the Metadata (no topics) broker whose
/// `host:port` is the connection's address, or, when none matches (an advertised name), the
/// only broker of a one-broker cluster.
///
/// Errors: [`ClientError`]; [`ClientError::Kafka`] (code -1) when neither finds one.
pub fn connected_broker_id(conn: &mut KafkaConnection) -> Result<i32, ClientError> {
    let version = conn.version(ApiKey::Metadata, (1, 12))?;
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    let ResponseKind::Metadata(r) = conn.call(ApiKey::Metadata, version, RequestKind::Metadata(request))? else {
        unreachable!()
    };
    let addr = conn.addr();
    let matching = r.brokers.iter().find(|b| {
        u16::try_from(b.port).ok() == Some(addr.port())
            && (b.host.as_str() == addr.ip().to_string()
                || std::net::ToSocketAddrs::to_socket_addrs(&(b.host.as_str(), addr.port()))
                    .is_ok_and(|mut a| a.any(|a| a == addr)))
    });
    match (matching, r.brokers.as_slice()) {
        (Some(b), _) => Ok(b.node_id.0),
        (None, [only]) => Ok(only.node_id.0),
        (None, _) => Err(ClientError::Kafka {
            context: format!("Metadata: no broker listed at {addr} among {} brokers", r.brokers.len()),
            code: -1,
        }),
    }
}

/// DescribeConfigs of broker `broker_id`'s resource: every config the broker reports, name to
/// value (`None`: a sensitive or unset value), as `kafka-configs.sh --describe --all
/// --entity-type brokers --entity-name ID` lists them.
///
/// Errors: [`ClientError`]; the resource's error code as [`ClientError::Kafka`] with the
/// broker's message in its context.
pub fn describe_broker_configs(
    conn: &mut KafkaConnection,
    broker_id: i32,
) -> Result<std::collections::BTreeMap<String, Option<String>>, ClientError> {
    Ok(broker_config_entries(conn, broker_id)?.into_iter().map(|(name, value, _)| (name, value)).collect())
}

/// Kafka's `ConfigSource.DYNAMIC_BROKER_CONFIG` (DescribeConfigs v1+ `config_source`): a value
/// set for this broker through the admin API.
const DYNAMIC_BROKER_CONFIG: i8 = 2;

/// The per-broker dynamic values of broker `broker_id` (DescribeConfigs, the configs whose
/// `config_source` is `DYNAMIC_BROKER_CONFIG`): what `kafka-configs.sh --describe
/// --entity-type brokers --entity-name ID` lists without `--all`, and what
/// [`alter_broker_configs`] with `None` (DELETE) removes. A sensitive value is left out.
///
/// Errors: as [`describe_broker_configs`].
pub fn describe_broker_dynamic_configs(
    conn: &mut KafkaConnection,
    broker_id: i32,
) -> Result<std::collections::BTreeMap<String, String>, ClientError> {
    Ok(broker_config_entries(conn, broker_id)?
        .into_iter()
        .filter(|(_, _, source)| *source == DYNAMIC_BROKER_CONFIG)
        .filter_map(|(name, value, _)| Some((name, value?)))
        .collect())
}

/// `(name, value, config_source)` of every config DescribeConfigs reports for broker `broker_id`.
fn broker_config_entries(
    conn: &mut KafkaConnection,
    broker_id: i32,
) -> Result<Vec<(String, Option<String>, i8)>, ClientError> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let version = conn.version(ApiKey::DescribeConfigs, (1, 4))?;
    let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(RESOURCE_BROKER)
        .with_resource_name(s(&broker_id.to_string()))
        .with_configuration_keys(None)]);
    let ResponseKind::DescribeConfigs(r) =
        conn.call(ApiKey::DescribeConfigs, version, RequestKind::DescribeConfigs(request))?
    else {
        unreachable!()
    };
    let result = r
        .results
        .into_iter()
        .next()
        .ok_or(ClientError::Kafka { context: format!("DescribeConfigs broker {broker_id}: no result"), code: -1 })?;
    let message = result.error_message.as_ref().map_or(String::new(), |m| format!(": {}", m.as_str()));
    kafka(format!("DescribeConfigs broker {broker_id}{message}"), result.error_code)?;
    Ok(result
        .configs
        .into_iter()
        .map(|c| (c.name.to_string(), c.value.map(|v| v.to_string()), c.config_source))
        .collect())
}

/// IncrementalAlterConfigs of broker `broker_id`'s resource, all `changes` in one request
/// (the broker applies all of them or none): per key SET the value, or DELETE the broker's
/// dynamic value when it is `None` (the next level shows through, as `kafka-configs.sh --alter
/// --delete-config` does).
///
/// Errors: [`ClientError`]; the resource's error code (INVALID_CONFIG, INVALID_REQUEST, ...)
/// as [`ClientError::Kafka`] with the broker's message in its context.
pub fn alter_broker_configs(
    conn: &mut KafkaConnection,
    broker_id: i32,
    changes: &[(&str, Option<&str>)],
) -> Result<(), ClientError> {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let version = conn.version(ApiKey::IncrementalAlterConfigs, (0, 1))?;
    let ops = changes
        .iter()
        .map(|(key, value)| {
            AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(if value.is_some() { 0 } else { 1 }) // SET, DELETE
                .with_value(value.map(s))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(RESOURCE_BROKER)
        .with_resource_name(s(&broker_id.to_string()))
        .with_configs(ops)]);
    let ResponseKind::IncrementalAlterConfigs(r) =
        conn.call(ApiKey::IncrementalAlterConfigs, version, RequestKind::IncrementalAlterConfigs(request))?
    else {
        unreachable!()
    };
    let result = r.responses.into_iter().next().ok_or(ClientError::Kafka {
        context: format!("IncrementalAlterConfigs broker {broker_id}: no result"),
        code: -1,
    })?;
    let what: Vec<String> = changes
        .iter()
        .map(|(key, value)| match value {
            Some(v) => format!("{key}={v}"),
            None => format!("delete {key}"),
        })
        .collect();
    let message = result.error_message.as_ref().map_or(String::new(), |m| format!(": {}", m.as_str()));
    kafka(format!("IncrementalAlterConfigs broker {broker_id} {}{message}", what.join(", ")), result.error_code)
}

/// ListGroups: every group the broker coordinates.
///
/// Errors: [`ClientError`], including [`ClientError::Kafka`] for COORDINATOR_LOAD_IN_PROGRESS.
pub fn list_groups(conn: &mut KafkaConnection) -> Result<Vec<GroupListing>, ClientError> {
    let version = conn.version(ApiKey::ListGroups, (0, 5))?;
    let ResponseKind::ListGroups(r) =
        conn.call(ApiKey::ListGroups, version, RequestKind::ListGroups(ListGroupsRequest::default()))?
    else {
        unreachable!()
    };
    kafka("ListGroups".into(), r.error_code)?;
    let mut out: Vec<GroupListing> = r
        .groups
        .into_iter()
        .map(|g| GroupListing {
            group_id: g.group_id.to_string(),
            protocol_type: g.protocol_type.to_string(),
            state: g.group_state.to_string(),
        })
        .collect();
    out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Ok(out)
}

/// Describes `group`: DescribeGroups, OffsetFetch (all partitions), ListOffsets (latest) for
/// every committed or assigned partition, and the generation from `__consumer_offsets`.
///
/// Errors: [`ClientError`]; a group error code from DescribeGroups or OffsetFetch is
/// [`ClientError::Kafka`].
pub fn describe_group(conn: &mut KafkaConnection, group: &str) -> Result<GroupReport, ClientError> {
    let version = conn.version(ApiKey::DescribeGroups, (0, 5))?;
    let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    let ResponseKind::DescribeGroups(mut r) =
        conn.call(ApiKey::DescribeGroups, version, RequestKind::DescribeGroups(req))?
    else {
        unreachable!()
    };
    let d =
        r.groups.pop().ok_or(ClientError::Kafka { context: format!("DescribeGroups {group}: no answer"), code: -1 })?;
    kafka(format!("DescribeGroups {group}"), d.error_code)?;
    let consumer = d.protocol_type.as_str() == CONSUMER_PROTOCOL_TYPE;
    let members: Vec<MemberReport> = d
        .members
        .iter()
        .map(|m| {
            let mut assignment: Vec<(String, i32)> = match consumer && !m.member_assignment.is_empty() {
                true => ConsumerAssignment::decode(&m.member_assignment)
                    .map(|a| a.partitions().into_iter().map(|(t, p)| (t.to_string(), p)).collect())
                    .unwrap_or_default(),
                false => Vec::new(),
            };
            assignment.sort();
            MemberReport {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment,
            }
        })
        .collect();
    let committed = committed_offsets(conn, group)?;
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    for m in &members {
        for tp in &m.assignment {
            owners.insert(tp.clone(), m.member_id.clone());
        }
    }
    let all: BTreeSet<(String, i32)> = committed.keys().chain(owners.keys()).cloned().collect();
    let ends = log_end_offsets(conn, &all)?;
    let partitions = all
        .into_iter()
        .map(|tp| {
            let committed = committed.get(&tp).copied();
            let log_end_offset = ends.get(&tp).copied();
            PartitionReport {
                lag: committed.zip(log_end_offset).map(|(c, e)| (e - c).max(0)),
                owner: owners.get(&tp).cloned(),
                topic: tp.0,
                partition: tp.1,
                committed,
                log_end_offset,
            }
        })
        .collect();
    let coordinator_partition = offsets_topic_partitions(conn)?.map(|n| partition_for(group, n));
    let generation_id = match coordinator_partition {
        Some(partition) => stored_generation(conn, group, partition)?,
        // No `__consumer_offsets`: the group never stored metadata.
        None => None,
    };
    Ok(GroupReport {
        group_id: group.to_string(),
        state: d.group_state.to_string(),
        protocol_type: d.protocol_type.to_string(),
        protocol: d.protocol_data.to_string(),
        generation_id,
        coordinator_partition,
        members,
        partitions,
    })
}

/// The partition count of `__consumer_offsets` (the broker's `offsets.topic.num.partitions`),
/// from Metadata v4+ for that topic alone with `allow_auto_topic_creation` off; `None` when the
/// broker has no such topic (UNKNOWN_TOPIC_OR_PARTITION, or no partitions).
fn offsets_topic_partitions(conn: &mut KafkaConnection) -> Result<Option<i32>, ClientError> {
    let version = conn.version(ApiKey::Metadata, (4, 12))?;
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(TopicName(s(OFFSETS_TOPIC))))]))
        .with_allow_auto_topic_creation(false);
    let ResponseKind::Metadata(r) = conn.call(ApiKey::Metadata, version, RequestKind::Metadata(req))? else {
        unreachable!()
    };
    Ok(r.topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == OFFSETS_TOPIC))
        .filter(|t| t.error_code == 0 && !t.partitions.is_empty())
        .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX)))
}

/// OffsetFetch of every committed partition of `group` (v2+: null topics).
fn committed_offsets(conn: &mut KafkaConnection, group: &str) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
    let version = conn.version(ApiKey::OffsetFetch, (2, 7))?;
    let req = OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(None);
    let ResponseKind::OffsetFetch(r) = conn.call(ApiKey::OffsetFetch, version, RequestKind::OffsetFetch(req))? else {
        unreachable!()
    };
    kafka(format!("OffsetFetch {group}"), r.error_code)?;
    Ok(r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
                .map(|p| ((t.name.to_string(), p.partition_index), p.committed_offset))
        })
        .collect())
}

/// ListOffsets (latest, read_uncommitted) of `partitions`; partitions with an error are left out.
fn log_end_offsets(
    conn: &mut KafkaConnection,
    partitions: &BTreeSet<(String, i32)>,
) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t).or_default().push(*p);
    }
    let version = conn.version(ApiKey::ListOffsets, (1, 7))?;
    let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(
        by_topic
            .iter()
            .map(|(t, ps)| {
                ListOffsetsTopic::default().with_name(TopicName(s(t))).with_partitions(
                    ps.iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(-1)
                        })
                        .collect(),
                )
            })
            .collect(),
    );
    let ResponseKind::ListOffsets(r) = conn.call(ApiKey::ListOffsets, version, RequestKind::ListOffsets(req))? else {
        unreachable!()
    };
    Ok(r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == 0)
                .map(|p| ((t.name.to_string(), p.partition_index), p.offset))
        })
        .collect())
}

/// The generation in the last group metadata record of `group` in `__consumer_offsets-<partition>`.
fn stored_generation(conn: &mut KafkaConnection, group: &str, partition: i32) -> Result<Option<i32>, ClientError> {
    let version = conn.version(ApiKey::Fetch, (4, 12))?;
    let mut offset = 0i64;
    let mut generation = None;
    // Bounded: a compacted offsets partition is small; stop at the high watermark.
    for _ in 0..10_000 {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(8 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(TopicName(s(OFFSETS_TOPIC))).with_partitions(vec![
                FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(8 << 20),
            ])]);
        let ResponseKind::Fetch(r) = conn.call(ApiKey::Fetch, version, RequestKind::Fetch(req))? else {
            unreachable!()
        };
        let Some(p) = r.responses.first().and_then(|t| t.partitions.first()) else { return Ok(generation) };
        if p.error_code != 0 {
            // No such partition: the group never stored metadata.
            return Ok(generation);
        }
        let bytes = p.records.clone().unwrap_or_default();
        let mut progressed = false;
        for batch in MixedBatches::new(&bytes) {
            let Ok(batch) = batch else { break };
            offset = batch.next_offset();
            progressed = true;
            for rec in &batch.records {
                if let Ok(OffsetsRecord::GroupMetadata { key, value }) =
                    decode_record(rec.key.as_deref(), rec.value.as_deref())
                {
                    if key.group == group {
                        generation = value.map(|v| v.generation);
                    }
                }
            }
        }
        if !progressed || offset >= p.high_watermark {
            return Ok(generation);
        }
    }
    Ok(generation)
}

/// Formats a report like `kafka-consumer-groups.sh --describe --members --verbose` combined:
/// a header line, one line per partition, one line per member.
pub fn format_report(r: &GroupReport) -> String {
    let mut out = String::new();
    let generation = r.generation_id.map_or("-".to_string(), |g| g.to_string());
    let coordinator = r.coordinator_partition.map_or("-".to_string(), |p| format!("{OFFSETS_TOPIC}-{p}"));
    out.push_str(&format!(
        "GROUP {}  STATE {}  GENERATION {}  PROTOCOL-TYPE {}  PROTOCOL {}  MEMBERS {}  COORDINATOR-PARTITION {}\n\n",
        r.group_id,
        r.state,
        generation,
        if r.protocol_type.is_empty() { "-" } else { &r.protocol_type },
        if r.protocol.is_empty() { "-" } else { &r.protocol },
        r.members.len(),
        coordinator,
    ));
    let dash = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
    out.push_str(&format!(
        "{:<24} {:>9} {:>14} {:>14} {:>8}  {}\n",
        "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"
    ));
    for p in &r.partitions {
        out.push_str(&format!(
            "{:<24} {:>9} {:>14} {:>14} {:>8}  {}\n",
            p.topic,
            p.partition,
            dash(p.committed),
            dash(p.log_end_offset),
            dash(p.lag),
            p.owner.as_deref().unwrap_or("-")
        ));
    }
    if !r.members.is_empty() {
        out.push_str(&format!("\n{:<48} {:<16} {:<20} {}\n", "CONSUMER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"));
        for m in &r.members {
            let assignment: Vec<String> = m.assignment.iter().map(|(t, p)| format!("{t}-{p}")).collect();
            out.push_str(&format!(
                "{:<48} {:<16} {:<20} {}\n",
                m.member_id,
                m.client_host,
                m.client_id,
                if assignment.is_empty() { "-".to_string() } else { assignment.join(",") }
            ));
        }
    }
    out
}
