//! The consumer protocol (Kafka's `ConsumerProtocol`): the bytes a Kafka consumer puts in its
//! JoinGroup protocol metadata (its subscription) and the group leader hands each member in
//! SyncGroup (its assignment), for groups of protocol type [`CONSUMER_PROTOCOL_TYPE`]. The
//! coordinator stores them unread in group metadata ([`super::consumer_offsets`]); consumers,
//! their assignors and the admin client read them.
//!
//! ```text
//! subscription = version: i16, then ConsumerProtocolSubscription at min(version, 3):
//!   topics: [string], user_data: bytes?,
//!   owned_partitions: [topic: string, partitions: [i32]]    v1+ (KIP-429)
//!   generation_id: i32                                     v2+ (-1 = unknown)
//!   rack_id: string?                                       v3+ (KIP-881)
//! assignment   = version: i16, then ConsumerProtocolAssignment (one layout for v0..v3):
//!   assigned_partitions: [topic: string, partitions: [i32]], user_data: bytes?
//! ```
//!
//! The bodies are `kafka-protocol`'s `messages::ConsumerProtocolSubscription` and
//! `ConsumerProtocolAssignment` (no version is flexible); [`ConsumerSubscription`],
//! [`ConsumerAssignment`] and [`TopicPartitions`] are thin owned views of them for the
//! assignors. As Kafka's `ConsumerProtocol.deserializeSubscription` /
//! `deserializeAssignment`: a negative version is refused, a version above 3 is read with the v3
//! layout (a newer writer only appends fields) and the version kept, and bytes after the last
//! field are ignored. Decoding runs behind the count guard of [`super::primitives`], so a count
//! the bytes cannot hold is refused before `kafka-protocol` allocates for it.

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedTopicPartition;
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopicPartition;
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::primitives::{decode_guarded, read_version, DecodeError, EncodeError};

/// `protocol_type` of groups formed by Kafka consumers; their member subscription and assignment
/// bytes follow the consumer protocol ([`ConsumerSubscription`], [`ConsumerAssignment`]).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Highest consumer protocol version known (KIP-881 added the rack id in v3).
pub const CONSUMER_PROTOCOL_MAX_VERSION: i16 = 3;

/// A topic and some of its partitions (`ConsumerProtocolSubscription.TopicPartition` /
/// `ConsumerProtocolAssignment.TopicPartition`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// What a consumer sends in JoinGroup (`ConsumerProtocolSubscription` v0..v3).
///
/// Newer versions are read with the v3 layout and trailing bytes ignored, as Kafka's
/// `ConsumerProtocol.deserializeSubscription` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSubscription {
    /// The version prefix.
    pub version: i16,
    /// Subscribed topic names.
    pub topics: Vec<String>,
    /// Assignor-specific user data (the sticky assignors put their state here).
    pub user_data: Option<Vec<u8>>,
    /// Partitions the member owns (v1+, for cooperative rebalancing, KIP-429).
    pub owned_partitions: Vec<TopicPartitions>,
    /// Generation the owned partitions belong to (v2+; -1 = unknown).
    pub generation_id: i32,
    /// The consumer's `client.rack` (v3+, KIP-881).
    pub rack_id: Option<String>,
}

impl ConsumerSubscription {
    const SCHEMA: &'static str = "ConsumerProtocolSubscription";

    /// Decodes subscription bytes (version prefix included).
    ///
    /// Errors: [`DecodeError`] (a negative version is unsupported; a body that does not parse is
    /// [`DecodeError::Message`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, m) = decode_body::<ConsumerProtocolSubscription>(Self::SCHEMA, bytes)?;
        Ok(ConsumerSubscription {
            version,
            topics: m.topics.iter().map(|t| t.to_string()).collect(),
            user_data: m.user_data.map(|b| b.to_vec()),
            owned_partitions: m
                .owned_partitions
                .into_iter()
                .map(|tp| TopicPartitions { topic: tp.topic.to_string(), partitions: tp.partitions })
                .collect(),
            generation_id: m.generation_id,
            rack_id: m.rack_id.map(|r| r.to_string()),
        })
    }

    /// Encodes at `self.version` (versions above 3 with the v3 layout); fields the version does
    /// not have are left out.
    ///
    /// Errors: [`EncodeError`] for a negative version or an over-long string.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let message = ConsumerProtocolSubscription::default()
            .with_topics(self.topics.iter().map(|t| str_bytes(t)).collect())
            .with_user_data(self.user_data.as_deref().map(Bytes::copy_from_slice))
            .with_owned_partitions(
                self.owned_partitions
                    .iter()
                    .map(|tp| {
                        OwnedTopicPartition::default()
                            .with_topic(TopicName(str_bytes(&tp.topic)))
                            .with_partitions(tp.partitions.clone())
                    })
                    .collect(),
            )
            .with_generation_id(self.generation_id)
            .with_rack_id(self.rack_id.as_deref().map(str_bytes));
        encode_body(Self::SCHEMA, self.version, &message)
    }
}

/// What the group leader gives each consumer in SyncGroup (`ConsumerProtocolAssignment` v0..v3;
/// all versions share one layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerAssignment {
    /// The version prefix.
    pub version: i16,
    /// Assigned partitions, grouped by topic.
    pub assigned_partitions: Vec<TopicPartitions>,
    /// Assignor-specific user data.
    pub user_data: Option<Vec<u8>>,
}

impl ConsumerAssignment {
    const SCHEMA: &'static str = "ConsumerProtocolAssignment";

    /// Decodes assignment bytes (version prefix included).
    ///
    /// Errors: [`DecodeError`] (a negative version is unsupported; a body that does not parse is
    /// [`DecodeError::Message`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, m) = decode_body::<ConsumerProtocolAssignment>(Self::SCHEMA, bytes)?;
        Ok(ConsumerAssignment {
            version,
            assigned_partitions: m
                .assigned_partitions
                .into_iter()
                .map(|tp| TopicPartitions { topic: tp.topic.to_string(), partitions: tp.partitions })
                .collect(),
            user_data: m.user_data.map(|b| b.to_vec()),
        })
    }

    /// Encodes at `self.version`.
    ///
    /// Errors: [`EncodeError`] for a negative version or an over-long string.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let message = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(
                self.assigned_partitions
                    .iter()
                    .map(|tp| {
                        AssignedTopicPartition::default()
                            .with_topic(TopicName(str_bytes(&tp.topic)))
                            .with_partitions(tp.partitions.clone())
                    })
                    .collect(),
            )
            .with_user_data(self.user_data.as_deref().map(Bytes::copy_from_slice));
        encode_body(Self::SCHEMA, self.version, &message)
    }

    /// The assigned partitions as `(topic, partition)` pairs, in order.
    pub fn partitions(&self) -> Vec<(&str, i32)> {
        self.assigned_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(move |p| (tp.topic.as_str(), *p)))
            .collect()
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The version prefix and the body after it, read at `min(version, 3)` behind the count guard.
fn decode_body<M: Decodable>(schema: &'static str, bytes: &[u8]) -> Result<(i16, M), DecodeError> {
    let version = read_version(schema, bytes)?;
    if version < 0 {
        return Err(DecodeError::UnsupportedVersion { schema, version, min: 0, max: i16::MAX });
    }
    let layout = version.min(CONSUMER_PROTOCOL_MAX_VERSION);
    let mut buf = Bytes::copy_from_slice(&bytes[2..]);
    let (message, _passes) = decode_guarded(&mut buf, false, |guard| M::decode(guard, layout));
    let message = message.map_err(|reason| DecodeError::Message {
        schema,
        version,
        position: bytes.len() - buf.len(),
        reason,
    })?;
    Ok((version, message))
}

/// The version prefix, then `message` at `min(version, 3)`.
fn encode_body<M: Encodable>(schema: &'static str, version: i16, message: &M) -> Result<Vec<u8>, EncodeError> {
    let err = |field, reason| EncodeError { schema, version, field, reason };
    if version < 0 {
        return Err(err("version", "negative version".to_string()));
    }
    let mut out = Vec::with_capacity(64);
    out.put_i16(version);
    message.encode(&mut out, version.min(CONSUMER_PROTOCOL_MAX_VERSION)).map_err(|e| err("body", format!("{e:#}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_protocol_versions() {
        for version in 0..=4 {
            let v = version.min(CONSUMER_PROTOCOL_MAX_VERSION);
            let sub = ConsumerSubscription {
                version,
                topics: vec!["a".into(), "b".into()],
                user_data: Some(vec![1, 2, 3]),
                owned_partitions: if v >= 1 {
                    vec![TopicPartitions { topic: "a".into(), partitions: vec![0, 2] }]
                } else {
                    vec![]
                },
                generation_id: if v >= 2 { 5 } else { -1 },
                rack_id: if v >= 3 { Some("rack-1".into()) } else { None },
            };
            let bytes = sub.encode().unwrap();
            assert_eq!(ConsumerSubscription::decode(&bytes).unwrap(), sub, "v{version}");
            let asg = ConsumerAssignment {
                version,
                assigned_partitions: vec![TopicPartitions { topic: "b".into(), partitions: vec![1] }],
                user_data: None,
            };
            assert_eq!(ConsumerAssignment::decode(&asg.encode().unwrap()).unwrap(), asg);
        }
        // Trailing bytes of a newer version are ignored.
        let mut bytes = ConsumerSubscription {
            version: 9,
            topics: vec!["t".into()],
            user_data: None,
            owned_partitions: vec![],
            generation_id: -1,
            rack_id: None,
        }
        .encode()
        .unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(ConsumerSubscription::decode(&bytes).unwrap().topics, vec!["t".to_string()]);
        assert!(matches!(
            ConsumerSubscription::decode(&[0xff, 0xff]),
            Err(DecodeError::UnsupportedVersion { version: -1, .. })
        ));
    }
}
