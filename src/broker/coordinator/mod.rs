//! The group coordinator (issue 5): classic consumer groups (JoinGroup / SyncGroup / Heartbeat /
//! LeaveGroup), committed offsets, and their storage in `__consumer_offsets`.
//!
//! - [`group`]: one group's state machine (Kafka's `ClassicGroup` + the classic half of
//!   `GroupMetadataManager`), pure: time is passed in, parked requests get tickets.
//! - [`partition_for`]: which `__consumer_offsets` partition holds a group (Kafka's
//!   `GroupCoordinatorService.partitionFor`).
//! - [`runtime`]: [`GroupCoordinator`], every group and committed offset behind one lock, the
//!   waits of parked JoinGroup / SyncGroup requests, the timers, and the records written to
//!   (and replayed from) `__consumer_offsets`.
//! - [`handlers`]: the group APIs on the wire (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//!   LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups), each a
//!   call on the broker's [`GroupCoordinator`].
//! - [`storage`]: [`LogStorage`](storage::LogStorage), the coordinator's records appended to the
//!   broker's own `__consumer_offsets` log, and their replay at start-up.
//!
//! The coordinator's configuration comes from the broker's `group.*` / `offsets.*` settings
//! ([`BrokerConfig::coordinator_config`](crate::broker::BrokerConfig::coordinator_config)).

pub mod group;
pub mod handlers;
pub mod runtime;
pub mod storage;

pub use runtime::{CommittedOffset, CoordinatorConfig, GroupCoordinator, OffsetsStorage};

/// Kafka's default `offsets.topic.num.partitions`.
pub const DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS: i32 = 50;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Java's `String.hashCode` over the UTF-16 code units of `s`: `s[0]*31^(n-1) + ... + s[n-1]`
/// with 32-bit wrapping arithmetic.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// The `__consumer_offsets` partition of `group_id`: `Utils.abs(groupId.hashCode()) %
/// offsets.topic.num.partitions`, where Kafka's `Utils.abs` maps `Integer.MIN_VALUE` to 0
/// (`"polygenelubricants"` hashes to `Integer.MIN_VALUE` and lands on partition 0).
///
/// `num_partitions` must be positive.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    let h = java_string_hash(group_id);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % num_partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // A character outside the BMP is two UTF-16 code units (surrogates), as in Java.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn partition_for_follows_kafka_utils_abs() {
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
        // A negative hash: abs then modulo.
        let h = java_string_hash("console-consumer-12345");
        assert_eq!(partition_for("console-consumer-12345", 50), if h == i32::MIN { 0 } else { h.abs() % 50 });
        for g in ["", "g", "my-group", "\u{e9}t\u{e9}"] {
            assert!((0..50).contains(&partition_for(g, 50)));
        }
    }
}
