//! This node's fixed identity: one broker, node id 0, leader of every partition at leader
//! epoch 0, in a cluster of its own. Metadata, FindCoordinator, CreateTopics and the epoch
//! checks of Fetch, ListOffsets and OffsetForLeaderEpoch answer with these.

/// The node id of this broker (one node: leader of every partition, Metadata's only broker).
pub const NODE_ID: i32 = 0;
/// The leader epoch of every partition (one node that never loses leadership).
pub const LEADER_EPOCH: i32 = 0;
/// The cluster id reported in Metadata (v2+).
pub const CLUSTER_ID: &str = "fetchbench";
