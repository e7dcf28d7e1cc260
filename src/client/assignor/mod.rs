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
//! partition count of each topic and each member's [`MemberSubscription`](partition_assignor::MemberSubscription) (member id → topics,
//! owned partitions, generation, rack, `group.instance.id`) and returns member id → partitions.
//! Every member of `subscriptions` is in the result (possibly with no partitions); a member only
//! ever gets partitions of topics it subscribed to; topics of `partitions_per_topic` no member
//! subscribed to are ignored, as are subscribed topics missing from it (Kafka's
//! `AbstractPartitionAssignor` only passes subscribed topics known to the metadata). Each
//! member's partitions come back sorted by topic, then partition.
//!
//! Around the algorithms, the consumer protocol bytes (the codecs are
//! [`crate::protocol::consumer_protocol`]'s, byte-exact with Kafka):
//!
//! * a member builds its JoinGroup metadata with [`build_subscription`] (Kafka's
//!   `ConsumerCoordinator.metadata` + `ConsumerProtocol.serializeSubscription`): sorted topics, the
//!   assignor's user data ([`Assignor::subscription_user_data`]: `sticky` puts its last assignment
//!   and generation there, `cooperative-sticky` its generation), owned partitions (v1+, cooperative
//!   assignors only: eager members revoke everything before joining), generation (v2+), rack (v3+);
//! * the leader turns each member's metadata into a [`MemberSubscription`](partition_assignor::MemberSubscription) with
//!   [`decode_member_subscription`](subscription::decode_member_subscription) (the assignor's `memberData`: where the owned partitions and
//!   generation come from differs per assignor), runs [`Assignor::assign`] and encodes each
//!   member's partitions with [`build_assignment`](subscription::build_assignment); [`perform_assignment`] does all three;
//! * a member reads its assignment with [`decode_assignment`].
//!
//! Deviations from Kafka, where Java's result depends on `HashMap` iteration order: members are
//! visited in member id order, and the sticky assignors resolve conflicting ownership claims
//! without depending on that order (see [`sticky`]).

//!
//! Files: `partition_assignor.rs` (the [`Assignor`] trait and its types), `abstract_assignor.rs`
//! (what the assignors share), [`range`], [`roundrobin`], [`sticky`] (the algorithms),
//! `subscription.rs` (the consumer protocol bytes around them); this file names the assignors
//! ([`assignor_by_name`]).

mod abstract_assignor;
mod partition_assignor;
pub(crate) mod range;
pub(crate) mod roundrobin;
pub(crate) mod sticky;
mod subscription;

#[cfg(test)]
mod tests;

pub use partition_assignor::TopicPartition;
pub(crate) use partition_assignor::{Assignor, RebalanceProtocol};
pub(crate) use range::RangeAssignor;
pub(crate) use roundrobin::RoundRobinAssignor;
pub(crate) use sticky::{CooperativeStickyAssignor, StickyAssignor};
pub(crate) use subscription::{
    build_subscription, decode_assignment, perform_assignment, AssignorError, GroupMember, JoinState,
};

/// The names of the assignors [`assignor_by_name`] knows.
pub(crate) const ASSIGNOR_NAMES: [&str; 4] = ["range", "roundrobin", "sticky", "cooperative-sticky"];

static RANGE: RangeAssignor = RangeAssignor;
static ROUND_ROBIN: RoundRobinAssignor = RoundRobinAssignor;
static STICKY: StickyAssignor = StickyAssignor;
static COOPERATIVE_STICKY: CooperativeStickyAssignor = CooperativeStickyAssignor;

/// The assignor of a name of [`ASSIGNOR_NAMES`] (`None` for others).
pub(crate) fn assignor_by_name(name: &str) -> Option<&'static dyn Assignor> {
    match name {
        "range" => Some(&RANGE),
        "roundrobin" => Some(&ROUND_ROBIN),
        "sticky" => Some(&STICKY),
        "cooperative-sticky" => Some(&COOPERATIVE_STICKY),
        _ => None,
    }
}
