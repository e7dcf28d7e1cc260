//! One partition's log, Kafka's `UnifiedLog` over `LocalLog`: everything is in `partition_log`
//! for now; this file declares it and re-exports its public items.

mod partition_log;

pub(crate) use partition_log::compacted_internal_topic;
pub use partition_log::{
    now_ms, parse_topic_partition, AppendInfo, DamagedFile, FileSlice, LoadReport, LogOffsetMetadata, OffsetHole,
    OpenOptions, PartitionLog, SegmentFile, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
};
