//! This node's fixed identity: one broker, node id 0, leader of every partition, in a cluster of
//! its own. Metadata (the only broker, every partition's leader, replica and ISR, the cluster and
//! controller), FindCoordinator and CreateTopics' replica assignment check answer with these.
//! [`LEADER_EPOCH`] is the epoch of the partitions made here; a copied Kafka log directory keeps
//! the epoch its batches carry (see `handler::offset_for_leader_epoch::current_leader_epoch`).

/// The node id of this broker (one node: leader of every partition, Metadata's only broker).
pub const NODE_ID: i32 = 0;
/// The leader epoch of every partition made here (one node that never loses leadership).
pub const LEADER_EPOCH: i32 = 0;
/// The cluster id reported in Metadata (v2+).
pub const CLUSTER_ID: &str = "fetchbench";
