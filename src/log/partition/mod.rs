//! One partition's log: ordered segments, offsets, appends, reads. Kafka's `UnifiedLog` over
//! `LocalLog`, split by concept as Kafka splits it:
//!
//! | file | Kafka class | what |
//! |---|---|---|
//! | `partition_log` | `UnifiedLog`, `LocalLog` | [`PartitionLog`]: state and accessors, [`append`](PartitionLog::append) (transactional batches only through [`append_transactional`](PartitionLog::append_transactional)), transaction markers ([`append_txn_marker`](PartitionLog::append_txn_marker): COMMIT / ABORT written, the transaction ended, the `.txnindex` entry appended), roll, flush (inline, or planned for the scheduler: [`FlushPlan`]), close; [`AppendInfo`], [`LogOffsetMetadata`] |
//! | `shared_partition` | `Partition` (its `UnifiedLog` lock) | [`Partition`]: the log behind its own lock, lock-free log end offset, high watermark, last stable offset and log start offset, validation outside the lock, the scheduler's flush |
//! | `loader` | `LogLoader` | [`PartitionLog::open`]: leftovers, `.swap` completion, index checks, recovery, checkpoints, producer state rebuilt; [`OpenOptions`], [`LoadReport`], [`DamagedFile`], [`OffsetHole`] |
//! | `validator` | `LogValidator` | checks on appended batches ([`validate_client_records`] -> [`ValidatedRecords`], no lock needed), offset assignment, leader epoch and LogAppendTime stamping |
//! | `read` | `LocalLog.read`, `UnifiedLog.fetchOffsetByTimestamp` | [`PartitionLog::read`] -> [`FileSlice`], offset for a timestamp, the high watermark |
//! | `retention` | `UnifiedLog.deleteOldSegments`, `replaceSegments` (the `LogCleaner` side) | deleting the oldest segments, swapping in cleaned ones |
//! | `epoch_cache` | `LeaderEpochFileCache` | assigning and truncating leader epoch entries |
//!
//! The policies that decide what retention and compaction remove are in
//! [`cleaner`](super::cleaner). The files import each other from the defining file; this one only
//! declares them and re-exports their public items.
//!
//! Offsets, as Kafka names them:
//! - **log start offset**: the first offset still readable; advanced by retention.
//! - **log end offset** (LEO): the offset the next appended record gets.
//! - **high watermark** (HW): the offset up to which consumers may read. This broker has one
//!   replica (the leader is the whole ISR), so the HW moves to the LEO after every append, as Kafka's
//!   does with `replication.factor=1`; [`PartitionLog::set_high_watermark`] exists for tests and
//!   future replication.
//! - **last stable offset** (LSO, KIP-98): the first offset of the earliest open transaction
//!   (opened by a transactional append, ended by its marker), else the high watermark; a
//!   `read_committed` fetch reads below it and the cleaner cleans below it.
//! - **recovery point**: the offset up to which the log is known to be fsynced; after an unclean
//!   shutdown, segments from the one holding it onwards are recovered (CRC-checked, indexes rebuilt).

mod epoch_cache;
mod loader;
mod partition_log;
mod read;
mod retention;
mod shared_partition;
mod validator;

pub(crate) use loader::compacted_internal_topic;
pub use loader::{parse_topic_partition, DamagedFile, LoadReport, OffsetHole, OpenOptions};
pub use partition_log::{now_ms, AppendInfo, FlushPlan, LogOffsetMetadata, PartitionLog};
pub use read::{EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
pub(crate) use shared_partition::Wakeup;
pub use shared_partition::{Partition, PartitionLogMut};
pub use validator::{validate_client_records, ValidatedRecords};

pub use super::segment::{FileSlice, SegmentFile};
