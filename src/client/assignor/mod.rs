//! The partition assignors of Kafka's consumer, as pure functions: what the group leader runs
//! on the members' subscriptions (JoinGroup) to produce the assignments it sends in SyncGroup.
//!
//! | name (`partition.assignment.strategy`) | type | Kafka class | protocol |
//! | --- | --- | --- | --- |
//! | `range` | [`RangeAssignor`] | `RangeAssignor` | eager |
//! | `roundrobin` | [`RoundRobinAssignor`] | `RoundRobinAssignor` | eager |
//! | `sticky` | [`StickyAssignor`] | `StickyAssignor` (`AbstractStickyAssignor`) | eager |
//! | `cooperative-sticky` | [`CooperativeStickyAssignor`] | `CooperativeStickyAssignor` | cooperative (KIP-429), eager |
//!
//! librdkafka uses the same names. Every assignor implements [`Assignor`]:
//! `assign(partitions_per_topic, subscriptions)` takes, like Java's
//! `ConsumerPartitionAssignor.assign(Map<String, Integer>, Map<String, Subscription>)`, the
//! partition count of each topic and each member's [`MemberSubscription`] (member id → topics,
//! owned partitions, generation, rack, `group.instance.id`) and returns member id → partitions.
//! Every member of `subscriptions` is in the result (possibly with no partitions); a member only
//! ever gets partitions of topics it subscribed to; topics of `partitions_per_topic` no member
//! subscribed to are ignored, as are subscribed topics missing from it (Kafka's
//! `AbstractPartitionAssignor` only passes subscribed topics known to the metadata). Each
//! member's partitions come back sorted by topic, then partition.
//!
//! Around the algorithms, the consumer protocol bytes (the codecs are
//! [`crate::protocol::consumer_offsets`]'s, byte-exact with Kafka):
//!
//! * a member builds its JoinGroup metadata with [`build_subscription`] (Kafka's
//!   `ConsumerCoordinator.metadata` + `ConsumerProtocol.serializeSubscription`): sorted topics, the
//!   assignor's user data ([`Assignor::subscription_user_data`]: `sticky` puts its last assignment
//!   and generation there, `cooperative-sticky` its generation), owned partitions (v1+, cooperative
//!   assignors only: eager members revoke everything before joining), generation (v2+), rack (v3+);
//! * the leader turns each member's metadata into a [`MemberSubscription`] with
//!   [`decode_member_subscription`] (the assignor's `memberData`: where the owned partitions and
//!   generation come from differs per assignor), runs [`Assignor::assign`] and encodes each
//!   member's partitions with [`build_assignment`]; [`perform_assignment`] does all three;
//! * a member reads its assignment with [`decode_assignment`].
//!
//! Deviations from Kafka, where Java's result depends on `HashMap` iteration order: members are
//! visited in member id order, and the sticky assignors resolve conflicting ownership claims
//! without depending on that order (see [`sticky`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::consumer_offsets::{
    ConsumerAssignment, ConsumerSubscription, OffsetsDecodeError, OffsetsEncodeError, TopicPartitions,
};

pub mod range;
pub mod roundrobin;
pub mod sticky;

#[cfg(test)]
mod tests;

pub use range::RangeAssignor;
pub use roundrobin::RoundRobinAssignor;
pub use sticky::{
    decode_cooperative_user_data, encode_cooperative_user_data, CooperativeStickyAssignor, StickyAssignor,
    StickyUserData,
};

/// A topic partition: `(topic, partition index)` (Kafka's `TopicPartition`).
pub type TopicPartition = (String, i32);

/// An assignment: member id → the partitions assigned to it.
pub type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// The generation of a member that has none (`AbstractStickyAssignor.DEFAULT_GENERATION`).
pub const DEFAULT_GENERATION: i32 = -1;

/// The names of the assignors [`assignor_by_name`] knows.
pub const ASSIGNOR_NAMES: [&str; 4] = ["range", "roundrobin", "sticky", "cooperative-sticky"];

/// How a group rebalances (Kafka's `ConsumerPartitionAssignor.RebalanceProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebalanceProtocol {
    /// Every member revokes all its partitions before rejoining (id 0).
    Eager,
    /// Members keep their partitions while rejoining; a partition changing owner is first only
    /// revoked from the old owner, and given to the new one in a follow-up rebalance
    /// (KIP-429, id 1).
    Cooperative,
}

impl RebalanceProtocol {
    /// Kafka's id of the protocol (`EAGER` = 0, `COOPERATIVE` = 1).
    pub fn id(self) -> u8 {
        match self {
            RebalanceProtocol::Eager => 0,
            RebalanceProtocol::Cooperative => 1,
        }
    }

    /// Kafka's name of the protocol (`EAGER`, `COOPERATIVE`).
    pub fn name(self) -> &'static str {
        match self {
            RebalanceProtocol::Eager => "EAGER",
            RebalanceProtocol::Cooperative => "COOPERATIVE",
        }
    }
}

/// What the leader knows of one member (Kafka's `ConsumerPartitionAssignor.Subscription`, with
/// the owned partitions and generation already taken from where the assignor keeps them, as
/// `AbstractStickyAssignor.memberData` does; see [`Assignor::member_subscription`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Partitions the member says it owns (sticky assignors: from its last assignment).
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation those partitions belong to; `None` when unknown (KIP-341).
    pub generation: Option<i32>,
    /// The member's `client.rack` (KIP-881). Carried, not used: rack-aware assignment needs the
    /// replicas' racks, which partition counts do not give (as Kafka's
    /// `assign(Map<String, Integer>, ...)`, which is not rack-aware either).
    pub rack: Option<String>,
    /// The member's `group.instance.id` (KIP-345): `range` and `roundrobin` order static
    /// members by it, before dynamic members ordered by member id (Kafka's `MemberInfo`).
    pub group_instance_id: Option<String>,
}

impl MemberSubscription {
    /// A member subscribed to `topics`, owning nothing, without generation, rack or instance id.
    pub fn new<S: Into<String>>(topics: impl IntoIterator<Item = S>) -> Self {
        MemberSubscription { topics: topics.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Sets the owned partitions.
    pub fn with_owned<S: Into<String>>(mut self, owned: impl IntoIterator<Item = (S, i32)>) -> Self {
        self.owned_partitions = owned.into_iter().map(|(t, p)| (t.into(), p)).collect();
        self
    }

    /// Sets the generation of the owned partitions.
    pub fn with_generation(mut self, generation: i32) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets the rack.
    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    /// Sets the `group.instance.id`.
    pub fn with_group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }
}

/// A partition assignor (Kafka's `ConsumerPartitionAssignor`).
pub trait Assignor: Send + Sync {
    /// The assignor's name, as sent in JoinGroup's protocol list (`range`, `roundrobin`,
    /// `sticky`, `cooperative-sticky`).
    fn name(&self) -> &'static str;

    /// The rebalance protocols the assignor supports, preferred first
    /// (`supportedProtocols()`).
    fn supported_protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Eager]
    }

    /// The most capable protocol the assignor supports (what a consumer configured with only
    /// this assignor uses).
    fn protocol(&self) -> RebalanceProtocol {
        self.supported_protocols().iter().copied().max().unwrap_or(RebalanceProtocol::Eager)
    }

    /// Computes the assignment: member id → partitions, for every member of `subscriptions`.
    /// `partitions_per_topic` gives the partition count of each topic (negative counts count as
    /// zero).
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Assignment;

    /// The user data a member puts in its subscription (`subscriptionUserData`), given the last
    /// assignment it received (`None` if it never received one) and its generation (-1 =
    /// none). `None` by default.
    fn subscription_user_data(&self, last_assignment: Option<&[TopicPartition]>, generation: i32) -> Option<Vec<u8>> {
        let _ = (last_assignment, generation);
        None
    }

    /// What the leader makes of a member's decoded subscription (`memberData`). By default the
    /// owned partitions (v1+) and generation (v2+, negative = none) of the protocol fields.
    fn member_subscription(&self, subscription: &ConsumerSubscription) -> MemberSubscription {
        MemberSubscription {
            topics: subscription.topics.clone(),
            owned_partitions: flatten(&subscription.owned_partitions),
            generation: (subscription.generation_id >= 0).then_some(subscription.generation_id),
            rack: subscription.rack_id.clone(),
            group_instance_id: None,
        }
    }
}

static RANGE: RangeAssignor = RangeAssignor;
static ROUND_ROBIN: RoundRobinAssignor = RoundRobinAssignor;
static STICKY: StickyAssignor = StickyAssignor;
static COOPERATIVE_STICKY: CooperativeStickyAssignor = CooperativeStickyAssignor;

/// The assignor of a name of [`ASSIGNOR_NAMES`] (`None` for others).
pub fn assignor_by_name(name: &str) -> Option<&'static dyn Assignor> {
    match name {
        "range" => Some(&RANGE),
        "roundrobin" => Some(&ROUND_ROBIN),
        "sticky" => Some(&STICKY),
        "cooperative-sticky" => Some(&COOPERATIVE_STICKY),
        _ => None,
    }
}

/// What a member knows when it (re)joins its group.
#[derive(Clone, Copy, Debug, Default)]
pub struct JoinState<'a> {
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
pub fn build_subscription(assignor: &dyn Assignor, state: &JoinState<'_>, version: i16) -> ConsumerSubscription {
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
/// Errors: [`OffsetsDecodeError`] if the bytes are not a consumer protocol subscription.
pub fn decode_member_subscription(
    assignor: &dyn Assignor,
    metadata: &[u8],
    group_instance_id: Option<&str>,
) -> Result<MemberSubscription, OffsetsDecodeError> {
    let subscription = ConsumerSubscription::decode(metadata)?;
    let mut member = assignor.member_subscription(&subscription);
    member.group_instance_id = group_instance_id.map(str::to_string);
    Ok(member)
}

/// Builds the SyncGroup assignment of one member at consumer protocol `version` (Kafka's
/// `ConsumerProtocol.serializeAssignment`: partitions grouped by topic in order of first
/// appearance; no user data, as none of Kafka's assignors sends any).
pub fn build_assignment(partitions: &[TopicPartition], version: i16) -> ConsumerAssignment {
    ConsumerAssignment { version, assigned_partitions: group_by_topic(partitions), user_data: None }
}

/// Decodes a member's assignment bytes into its partitions, in the order they were encoded.
///
/// Errors: [`OffsetsDecodeError`] if the bytes are not a consumer protocol assignment.
pub fn decode_assignment(bytes: &[u8]) -> Result<Vec<TopicPartition>, OffsetsDecodeError> {
    Ok(flatten(&ConsumerAssignment::decode(bytes)?.assigned_partitions))
}

/// One member as the group leader sees it in the JoinGroup response.
#[derive(Clone, Copy, Debug)]
pub struct GroupMember<'a> {
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
        source: OffsetsDecodeError,
    },
    /// An assignment could not be encoded.
    #[error("assignment of member {member_id}: {source}")]
    Assignment {
        /// The member.
        member_id: String,
        /// Why.
        #[source]
        source: OffsetsEncodeError,
    },
}

/// What the group leader does (Kafka's `ConsumerCoordinator.onLeaderElected`): decodes every
/// member's subscription, runs `assignor`, and encodes each member's assignment at consumer
/// protocol `version`. Returns member id → assignment bytes for SyncGroup.
///
/// Errors: [`AssignorError`] for undecodable metadata or unencodable assignments.
pub fn perform_assignment(
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

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// `(topic, partitions)` groups → flat `(topic, partition)` pairs, in order.
fn flatten(groups: &[TopicPartitions]) -> Vec<TopicPartition> {
    groups.iter().flat_map(|g| g.partitions.iter().map(move |p| (g.topic.clone(), *p))).collect()
}

/// Groups partitions by topic, topics in order of first appearance, partitions in order.
fn group_by_topic(partitions: &[TopicPartition]) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (topic, p) in partitions {
        let i = *index.entry(topic.as_str()).or_insert_with(|| {
            out.push(TopicPartitions { topic: topic.clone(), partitions: Vec::new() });
            out.len() - 1
        });
        out[i].partitions.push(*p);
    }
    out
}

/// The topics some member subscribes to that `partitions_per_topic` knows, with their partition
/// counts (negative = 0): what Kafka's `AbstractPartitionAssignor` passes to `assign`.
fn subscribed_partition_counts<'a>(
    partitions_per_topic: &'a BTreeMap<String, i32>,
    subscriptions: &'a BTreeMap<String, MemberSubscription>,
) -> BTreeMap<&'a str, i32> {
    let subscribed: BTreeSet<&str> = subscriptions.values().flat_map(|s| s.topics.iter().map(String::as_str)).collect();
    subscribed.into_iter().filter_map(|t| partitions_per_topic.get(t).map(|&n| (t, n.max(0)))).collect()
}

/// An assignment giving every member nothing yet.
fn empty_assignment(subscriptions: &BTreeMap<String, MemberSubscription>) -> Assignment {
    subscriptions.keys().map(|m| (m.clone(), Vec::new())).collect()
}

/// Members in the order of Kafka's `MemberInfo`: static members (with a `group.instance.id`)
/// first, by instance id, then dynamic members by member id.
fn members_in_member_info_order(subscriptions: &BTreeMap<String, MemberSubscription>) -> Vec<&str> {
    let mut members: Vec<(&str, &MemberSubscription)> = subscriptions.iter().map(|(m, s)| (m.as_str(), s)).collect();
    members.sort_by(|(a_id, a), (b_id, b)| match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then(a_id.cmp(b_id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a_id.cmp(b_id),
    });
    members.into_iter().map(|(m, _)| m).collect()
}

/// Sorts each member's partitions by topic, then partition.
fn sort_assignment(assignment: &mut Assignment) {
    for partitions in assignment.values_mut() {
        partitions.sort();
    }
}
