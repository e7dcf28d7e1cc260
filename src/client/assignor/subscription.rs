//! The consumer protocol bytes around the assignors (Kafka's `ConsumerProtocol` and
//! `ConsumerCoordinator`'s `metadata` / `onLeaderElected`): a member's JoinGroup subscription
//! ([`build_subscription`] from its [`JoinState`]), the leader's round ([`perform_assignment`]:
//! [`decode_member_subscription`] of every [`GroupMember`], the assignor, [`build_assignment`]),
//! and a member's SyncGroup assignment ([`decode_assignment`]).

use std::collections::BTreeMap;

use super::partition_assignor::{
    flatten, group_by_topic, Assignor, MemberSubscription, RebalanceProtocol, TopicPartition,
};
use crate::protocol::consumer_protocol::{ConsumerAssignment, ConsumerSubscription};
use crate::protocol::primitives::{DecodeError, EncodeError};

/// What a member knows when it (re)joins its group.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct JoinState<'a> {
    /// The topics it subscribes to.
    pub topics: &'a [String],
    /// Its last assignment (`None` if it never got one).
    pub assigned: Option<&'a [TopicPartition]>,
    /// The generation of that assignment (-1 = none).
    pub generation: i32,
    /// Its `client.rack`.
    pub rack_id: Option<&'a str>,
}

/// Builds a member's JoinGroup metadata for `assignor` at consumer protocol `version` (Kafka's
/// `ConsumerCoordinator.metadata` and `ConsumerProtocol.serializeSubscription`): topics sorted
/// and deduplicated, the assignor's user data, owned partitions sorted by topic and partition
/// (only for cooperative assignors: an eager member has revoked everything before it joins),
/// generation and rack. Fields above `version` are dropped by [`ConsumerSubscription::encode`].
pub(crate) fn build_subscription(assignor: &dyn Assignor, state: &JoinState<'_>, version: i16) -> ConsumerSubscription {
    let mut topics = state.topics.to_vec();
    topics.sort();
    topics.dedup();
    let owned: &[TopicPartition] = match assignor.protocol() {
        RebalanceProtocol::Cooperative => state.assigned.unwrap_or(&[]),
        RebalanceProtocol::Eager => &[],
    };
    let mut owned = owned.to_vec();
    owned.sort();
    owned.dedup();
    ConsumerSubscription {
        version,
        topics,
        user_data: assignor.subscription_user_data(state.assigned, state.generation),
        owned_partitions: group_by_topic(&owned),
        generation_id: state.generation,
        rack_id: state.rack_id.map(str::to_string),
    }
}

/// Decodes a member's JoinGroup metadata into what `assignor` works with.
///
/// Errors: [`DecodeError`] if the bytes are not a consumer protocol subscription.
pub(super) fn decode_member_subscription(
    assignor: &dyn Assignor,
    metadata: &[u8],
    group_instance_id: Option<&str>,
) -> Result<MemberSubscription, DecodeError> {
    let subscription = ConsumerSubscription::decode(metadata)?;
    let mut member = assignor.member_subscription(&subscription);
    member.group_instance_id = group_instance_id.map(str::to_string);
    Ok(member)
}

/// Builds the SyncGroup assignment of one member at consumer protocol `version` (Kafka's
/// `ConsumerProtocol.serializeAssignment`: partitions grouped by topic in order of first
/// appearance; no user data, as none of Kafka's assignors sends any).
pub(super) fn build_assignment(partitions: &[TopicPartition], version: i16) -> ConsumerAssignment {
    ConsumerAssignment { version, assigned_partitions: group_by_topic(partitions), user_data: None }
}

/// Decodes a member's assignment bytes into its partitions, in the order they were encoded.
///
/// Errors: [`DecodeError`] if the bytes are not a consumer protocol assignment.
pub(crate) fn decode_assignment(bytes: &[u8]) -> Result<Vec<TopicPartition>, DecodeError> {
    Ok(flatten(&ConsumerAssignment::decode(bytes)?.assigned_partitions))
}

/// One member as the group leader sees it in the JoinGroup response.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupMember<'a> {
    /// Member id.
    pub member_id: &'a str,
    /// `group.instance.id` (static membership, KIP-345).
    pub group_instance_id: Option<&'a str>,
    /// The member's protocol metadata (its consumer protocol subscription bytes).
    pub metadata: &'a [u8],
}

/// Errors of [`perform_assignment`].
#[derive(Debug, thiserror::Error)]
pub enum AssignorError {
    /// A member's metadata is not a consumer protocol subscription.
    #[error("subscription of member {member_id}: {source}")]
    Subscription {
        /// The member.
        member_id: String,
        /// Why.
        #[source]
        source: DecodeError,
    },
    /// An assignment could not be encoded.
    #[error("assignment of member {member_id}: {source}")]
    Assignment {
        /// The member.
        member_id: String,
        /// Why.
        #[source]
        source: EncodeError,
    },
}

/// What the group leader does (Kafka's `ConsumerCoordinator.onLeaderElected`): decodes every
/// member's subscription, runs `assignor`, and encodes each member's assignment at consumer
/// protocol `version`. Returns member id → assignment bytes for SyncGroup.
///
/// Errors: [`AssignorError`] for undecodable metadata or unencodable assignments.
pub(crate) fn perform_assignment(
    assignor: &dyn Assignor,
    partitions_per_topic: &BTreeMap<String, i32>,
    members: &[GroupMember<'_>],
    version: i16,
) -> Result<BTreeMap<String, Vec<u8>>, AssignorError> {
    let mut subscriptions = BTreeMap::new();
    for m in members {
        let sub = decode_member_subscription(assignor, m.metadata, m.group_instance_id)
            .map_err(|source| AssignorError::Subscription { member_id: m.member_id.to_string(), source })?;
        subscriptions.insert(m.member_id.to_string(), sub);
    }
    let assignment = assignor.assign(partitions_per_topic, &subscriptions);
    let mut out = BTreeMap::new();
    for (member_id, partitions) in assignment {
        let bytes = build_assignment(&partitions, version)
            .encode()
            .map_err(|source| AssignorError::Assignment { member_id: member_id.clone(), source })?;
        out.insert(member_id, bytes);
    }
    Ok(out)
}
