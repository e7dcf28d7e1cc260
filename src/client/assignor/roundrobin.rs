//! The `roundrobin` assignor (Kafka's `RoundRobinAssignor`).
//!
//! All partitions of all subscribed topics, sorted by topic then partition, are dealt in turn
//! to the members in `MemberInfo` order (static members by `group.instance.id`, then the others
//! by member id), skipping members not subscribed to the partition's topic:
//!
//! ```text
//! t: 12 partitions, c1 c2 c3 subscribed  →  c1 = 0,3,6,9  c2 = 1,4,7,10  c3 = 2,5,8,11
//! ```
//!
//! With identical subscriptions member loads differ by at most one; with different
//! subscriptions they may not (Kafka's example: t0 to c0; t0, t1 to c1; t0, t1, t2 to c2, with 1,
//! 2, 3 partitions: c0 = t0p0, c1 = t1p0, c2 = t1p1 t2p0 t2p1 t2p2).

use std::collections::{BTreeMap, HashSet};

use super::abstract_assignor::{
    empty_assignment, members_in_member_info_order, sort_assignment, subscribed_partition_counts,
};
use super::partition_assignor::{Assignment, Assignor, MemberSubscription};

/// The `roundrobin` assignor (Kafka's `RoundRobinAssignor`, eager).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RoundRobinAssignor;

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, MemberSubscription>,
    ) -> Assignment {
        let mut assignment = empty_assignment(subscriptions);
        let members = members_in_member_info_order(subscriptions);
        let subscribed: Vec<HashSet<&str>> =
            members.iter().map(|m| subscriptions[*m].topics.iter().map(String::as_str).collect()).collect();
        // CircularIterator over the sorted members; `next` is the index `peek` would return.
        let mut next = 0usize;
        for (topic, count) in subscribed_partition_counts(partitions_per_topic, subscriptions) {
            for p in 0..count {
                // Some member subscribes to `topic` (it is in the counts), so this ends.
                while !subscribed[next].contains(topic) {
                    next = (next + 1) % members.len();
                }
                let target = assignment.get_mut(members[next]).expect("every member is in the assignment");
                target.push((topic.to_string(), p));
                next = (next + 1) % members.len();
            }
        }
        sort_assignment(&mut assignment);
        assignment
    }
}
