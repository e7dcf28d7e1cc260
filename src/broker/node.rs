//! This node's fixed identity: one broker, node id 0, leader of every partition, in a cluster of
//! its own. Metadata (the only broker, every partition's leader, replica and ISR, the cluster and
//! controller), FindCoordinator and CreateTopics' replica assignment check answer with these.
//! The partitions made here have leader epoch 0 (one node that never loses leadership); a copied Kafka log directory keeps
//! the epoch its batches carry (see `handler::offset_for_leader_epoch::current_leader_epoch`).

/// The node id of this broker (one node: leader of every partition, Metadata's only broker).
pub(crate) const NODE_ID: i32 = 0;
/// The cluster id reported in Metadata (v2+).
pub(crate) const CLUSTER_ID: &str = "fetchbench";
