//! The assignor interface (Kafka's `ConsumerPartitionAssignor`): the [`Assignor`] trait, what it
//! assigns ([`TopicPartition`], [`Assignment`]), what it knows of each member
//! ([`MemberSubscription`]) and the [`RebalanceProtocol`]s; and the conversions between the
//! consumer protocol's `(topic, partitions)` groups and flat `(topic, partition)` pairs.

use std::collections::BTreeMap;

use crate::protocol::consumer_protocol::{ConsumerSubscription, TopicPartitions};

/// A topic partition: `(topic, partition index)` (Kafka's `TopicPartition`).
pub type TopicPartition = (String, i32);

/// An assignment: member id → the partitions assigned to it.
pub(super) type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// The generation of a member that has none (`AbstractStickyAssignor.DEFAULT_GENERATION`).
pub(super) const DEFAULT_GENERATION: i32 = -1;

/// How a group rebalances (Kafka's `ConsumerPartitionAssignor.RebalanceProtocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum RebalanceProtocol {
    /// Every member revokes all its partitions before rejoining (id 0).
    Eager,
    /// Members keep their partitions while rejoining; a partition changing owner is first only
    /// revoked from the old owner, and given to the new one in a follow-up rebalance
    /// (KIP-429, id 1).
    Cooperative,
}

impl RebalanceProtocol {
    /// Kafka's id of the protocol (`EAGER` = 0, `COOPERATIVE` = 1).
    #[cfg(test)]
    pub(crate) fn id(self) -> u8 {
        match self {
            RebalanceProtocol::Eager => 0,
            RebalanceProtocol::Cooperative => 1,
        }
    }
}

/// What the leader knows of one member (Kafka's `ConsumerPartitionAssignor.Subscription`, with
/// the owned partitions and generation already taken from where the assignor keeps them, as
/// `AbstractStickyAssignor.memberData` does; see [`Assignor::member_subscription`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemberSubscription {
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

/// Builders for the assignor tests (the consumer fills the fields from its subscription).
#[cfg(test)]
impl MemberSubscription {
    /// A member subscribed to `topics`, owning nothing, without generation, rack or instance id.
    pub(crate) fn new<S: Into<String>>(topics: impl IntoIterator<Item = S>) -> Self {
        MemberSubscription { topics: topics.into_iter().map(Into::into).collect(), ..Default::default() }
    }

    /// Sets the owned partitions.
    pub(crate) fn with_owned<S: Into<String>>(mut self, owned: impl IntoIterator<Item = (S, i32)>) -> Self {
        self.owned_partitions = owned.into_iter().map(|(t, p)| (t.into(), p)).collect();
        self
    }

    /// Sets the generation of the owned partitions.
    pub(crate) fn with_generation(mut self, generation: i32) -> Self {
        self.generation = Some(generation);
        self
    }

    /// Sets the `group.instance.id`.
    pub(crate) fn with_group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }
}

/// A partition assignor (Kafka's `ConsumerPartitionAssignor`).
pub(crate) trait Assignor: Send + Sync {
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

/// `(topic, partitions)` groups → flat `(topic, partition)` pairs, in order.
pub(super) fn flatten(groups: &[TopicPartitions]) -> Vec<TopicPartition> {
    groups.iter().flat_map(|g| g.partitions.iter().map(move |p| (g.topic.clone(), *p))).collect()
}

/// Groups partitions by topic, topics in order of first appearance, partitions in order.
pub(super) fn group_by_topic(partitions: &[TopicPartition]) -> Vec<TopicPartitions> {
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
