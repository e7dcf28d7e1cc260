//! The storage engine: Apache Kafka's on-disk log format.
//!
//! One module per concept, as Kafka's `storage` package has one class per concept:
//!
//! | module | Kafka class | what |
//! |---|---|---|
//! | [`batch`] | `DefaultRecordBatch`, `AbstractLegacyRecordBatch` | RecordBatch v2 view, CRC-32C, records, codecs; legacy magic 0/1 decoder (one file per concept, see its table) |
//! | `index` | `AbstractIndex` | the memory-mapped index file both indexes are built on: preallocation, sparse chunk allocation, entry search, resize/trim/rename |
//! | [`offset_index`] | `OffsetIndex` | sparse `.index`: relative offset -> position, on `index` |
//! | [`time_index`] | `TimeIndex` | sparse `.timeindex`: timestamp -> relative offset, on `index` |
//! | [`segment`] | `LogSegment`, `FileRecords` | one `.log` with its indexes: append, scan, recover |
//! | [`partition`] | `UnifiedLog`, `LocalLog`, `LogLoader`, `LogValidator`, `Partition` | ordered segments, offsets: open and recovery, append validation, read -> [`FileSlice`], segment deletion and the cleaner's swap; [`Partition`], the log behind its own lock (one file per concept, see its table) |
//! | [`producer_state`] | `ProducerStateManager`, `ProducerStateEntry` | idempotent producers: epochs, last 5 batches, sequence checks; open transactions, the checks on their batches and markers (epoch, coordinator epoch), the [`CompletedTxn`] a marker ends |
//! | [`txn_index`] | `TransactionIndex`, `AbortedTxn` | `.txnindex`: the aborted transactions whose ABORT marker is in a segment (appended at runtime, rebuilt at open); the COMMIT / ABORT marker batch |
//! | [`producer_id`] | `ProducerIdManager` | producer id blocks for InitProducerId, persisted in the log dir |
//! | [`cleaner`] | `LogCleaner`, retention in `UnifiedLog` | retention and compaction policies |
//! | [`config`] | `LogConfig` | topic and broker configs with Kafka's names and defaults |
//! | [`manager`] | `LogManager` | a `log.dirs` directory: partitions (shared, the lock order), checkpoints, clean-shutdown marker |
//! | [`scheduler`] | `KafkaScheduler` | the background thread: fsyncs of rolled segments, `flush.*`, the offset checkpoints |
//! | [`checkpoint`] | `OffsetCheckpointFile`, `PartitionMetadataFile` | Kafka's small text files |
//! | [`dump`] | `kafka-dump-log.sh` | the `log dump` tool (its `__consumer_offsets` decoder is a hook the CLI fills from `protocol`) |
//! | `error` | | [`LogError`], the storage engine's error |
//!
//! This file only declares the modules and re-exports the types most callers need; the files of
//! the engine import each other from the defining file (`super::error::LogError`), not through
//! these re-exports.

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod dump;
mod error;
pub(crate) mod index;
pub mod manager;
pub mod offset_index;
pub mod partition;
pub(crate) mod producer_id;
pub(crate) mod producer_state;
pub mod scheduler;
pub mod segment;
pub mod time_index;
pub mod txn_index;

pub use batch::{BatchError, RecordBatch};
pub use config::LogConfig;
pub use error::LogError;
pub use partition::{FileSlice, Partition, PartitionLog};
pub use producer_state::CompletedTxn;
pub use segment::Segment;
