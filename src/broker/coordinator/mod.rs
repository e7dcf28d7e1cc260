//! The group coordinator (issue 5): classic consumer groups (JoinGroup / SyncGroup / Heartbeat /
//! LeaveGroup), committed offsets, transactional offset commits pending until their
//! transaction's marker (TxnOffsetCommit, issue 18), and their storage in `__consumer_offsets`.
//!
//! - [`group`]: one group's state machine (Kafka's `ClassicGroup` + the classic half of
//!   `GroupMetadataManager`), pure: time is passed in, parked requests get tickets.
//! - [`runtime`]: [`GroupCoordinator`](runtime::GroupCoordinator), the groups and committed
//!   offsets sharded by `__consumer_offsets` partition (one lock per shard, no lock held across
//!   a log append), the tickets of parked JoinGroup / SyncGroup requests, the timers, and the
//!   records written to (and replayed from) `__consumer_offsets`.
//! - [`wakeup`]: who a group change wakes (only that group's parked requests,
//!   [`GroupWaiters`](wakeup::GroupWaiters)) and the timer thread's alarm.
//! - [`delayed_join`]: a JoinGroup / SyncGroup that must wait, parked in the broker's purgatory
//!   holding no thread (Kafka's `DelayedJoin` / `DelayedSync`), watched by its group; the
//!   purgatory as the coordinator's [`GroupWaiters`](wakeup::GroupWaiters).
//! - [`handlers`]: the group APIs on the wire (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//!   LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups,
//!   DeleteGroups), each a
//!   call on the broker's [`GroupCoordinator`](runtime::GroupCoordinator).
//! - [`storage`]: [`LogStorage`](storage::LogStorage), the coordinator's records appended to the
//!   broker's own `__consumer_offsets` log, and their replay at start-up.
//! - [`replay`]: one partition's batches turned into the records the coordinator applies
//!   (transactional offset commits resolved by their markers).
//!
//! The coordinator's configuration comes from the broker's `group.*` / `offsets.*` settings
//! ([`BrokerConfig::coordinator_config`](crate::broker::BrokerConfig::coordinator_config)).
//!
//! The records' schemas, the topic's name and which of its partitions holds a group
//! ([`partition_for`](crate::protocol::consumer_offsets::partition_for), Kafka's
//! `GroupCoordinatorService.partitionFor`) live in [`crate::protocol::consumer_offsets`], where the
//! admin client and `log dump` read them too.

pub(crate) mod delayed_join;
pub(crate) mod group;
pub(crate) mod handlers;
pub(crate) mod replay;
pub(crate) mod runtime;
pub(crate) mod storage;
pub(crate) mod wakeup;
