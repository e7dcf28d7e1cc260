//! What the assignors share (Kafka's `AbstractPartitionAssignor` and its `MemberInfo`): the
//! partition counts of the subscribed topics, an assignment giving every member nothing yet,
//! members in `MemberInfo` order, and sorted results.

use std::collections::{BTreeMap, BTreeSet};

use super::partition_assignor::{Assignment, MemberSubscription};

/// The topics some member subscribes to that `partitions_per_topic` knows, with their partition
/// counts (negative = 0): what Kafka's `AbstractPartitionAssignor` passes to `assign`.
pub(super) fn subscribed_partition_counts<'a>(
    partitions_per_topic: &'a BTreeMap<String, i32>,
    subscriptions: &'a BTreeMap<String, MemberSubscription>,
) -> BTreeMap<&'a str, i32> {
    let subscribed: BTreeSet<&str> = subscriptions.values().flat_map(|s| s.topics.iter().map(String::as_str)).collect();
    subscribed.into_iter().filter_map(|t| partitions_per_topic.get(t).map(|&n| (t, n.max(0)))).collect()
}

/// An assignment giving every member nothing yet.
pub(super) fn empty_assignment(subscriptions: &BTreeMap<String, MemberSubscription>) -> Assignment {
    subscriptions.keys().map(|m| (m.clone(), Vec::new())).collect()
}

/// Members in the order of Kafka's `MemberInfo`: static members (with a `group.instance.id`)
/// first, by instance id, then dynamic members by member id.
pub(super) fn members_in_member_info_order(subscriptions: &BTreeMap<String, MemberSubscription>) -> Vec<&str> {
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
pub(super) fn sort_assignment(assignment: &mut Assignment) {
    for partitions in assignment.values_mut() {
        partitions.sort();
    }
}
