//! The `range` assignor (Kafka's `RangeAssignor`).
//!
//! Per topic: the topic's partitions in numeric order and its subscribers in
//! [`MemberInfo`](super::partition_assignor::MemberSubscription::group_instance_id) order (static members by
//! `group.instance.id`, then the others by member id); each subscriber gets a contiguous range of
//! `partitions / subscribers` partitions, and the first `partitions % subscribers` get one more.
//!
//! ```text
//! t: 12 partitions, c1 c2 c3 subscribed  →  c1 = t0..t3, c2 = t4..t7, c3 = t8..t11
//! ```
//!
//! Topics are independent, so with several topics the first members may get several extra
//! partitions (two topics of 3 partitions, two members: 4 and 2).

use std::collections::{BTreeMap, BTreeSet};

use super::abstract_assignor::{
    empty_assignment, members_in_member_info_order, sort_assignment, subscribed_partition_counts,
};
use super::partition_assignor::{Assignment, Assignor, MemberSubscription};

/// The `range` assignor (Kafka's `RangeAssignor`, eager).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Assignment {
        let mut assignment = empty_assignment(subscriptions);
        let counts = subscribed_partition_counts(partitions_per_topic, subscriptions);
        let members = members_in_member_info_order(subscriptions);
        // consumersPerTopic, each topic's subscribers already in MemberInfo order.
        let mut consumers_per_topic: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for &member in &members {
            let topics: BTreeSet<&str> = subscriptions[member].topics.iter().map(String::as_str).collect();
            for topic in topics {
                consumers_per_topic.entry(topic).or_default().push(member);
            }
        }
        for (topic, consumers) in consumers_per_topic {
            let Some(&count) = counts.get(topic) else { continue };
            let count = count as usize;
            let per_consumer = count / consumers.len();
            let with_extra = count % consumers.len();
            for (i, member) in consumers.iter().enumerate() {
                let start = per_consumer * i + i.min(with_extra);
                let len = per_consumer + usize::from(i < with_extra);
                let target = assignment.get_mut(*member).expect("every member is in the assignment");
                target.extend((start..start + len).map(|p| (topic.to_string(), p as i32)));
            }
        }
        sort_assignment(&mut assignment);
        assignment
    }
}
