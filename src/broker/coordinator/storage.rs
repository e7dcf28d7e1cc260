//! The coordinator's `__consumer_offsets` in the broker's own log: [`LogStorage`] appends the
//! coordinator's records, [`load`] replays them at start-up.
//!
//! Transactional offset commits (a consumer-transform-produce loop's `TxnOffsetCommit`, written
//! in transactional batches of the producer, by Kafka and by [`LogStorage::append_transactional`])
//! are replayed as Kafka's `GroupMetadataManager.doLoadGroupsAndOffsets` / 4's
//! `OffsetMetadataManager.replay` replay them ([`TxnOffsets`], in [`super::replay`]): held per producer until the
//! producer's COMMIT marker, which applies each one unless an offset commit appended after it (a
//! higher batch offset) is already there; an ABORT marker drops them; a (non-transactional)
//! tombstone of the partition drops those before it (Kafka 4); those of a transaction still open
//! at the log end are loaded PENDING, as Kafka's loader keeps them, for the marker the
//! transaction coordinator writes later ([`super::runtime::GroupCoordinator::complete_txn_offsets`]).
//!
//! The topic is created on the first write, like Kafka creates it on the first FindCoordinator:
//! `offsets.topic.num.partitions` partitions, `cleanup.policy=compact`,
//! `segment.bytes=offsets.topic.segment.bytes` (100 MiB), the broker's other log defaults.

use std::sync::Arc;

use super::replay::TxnOffsets;
use super::runtime::OffsetsStorage;
use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::broker::{errors, topics};
use crate::log::batch::mixed::MixedBatches;
use crate::log::batch::{BatchBuilder, Compression};
use crate::log::config::CleanupPolicy;
use crate::log::producer_state::increment_sequence;
use crate::log::{FileSlice, LogConfig, Partition};
use crate::protocol::consumer_offsets::OFFSETS_TOPIC;

/// Kafka's default `offsets.topic.segment.bytes` (100 MiB).
pub(crate) const OFFSETS_TOPIC_SEGMENT_BYTES: i32 = 100 * 1024 * 1024;

/// Appends the coordinator's records to the broker's `__consumer_offsets` partitions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogStorage<'a> {
    /// The broker.
    pub shared: &'a Shared,
}

/// The log configuration of `__consumer_offsets`: the broker defaults, compacted, 100 MiB
/// segments (Kafka's `GroupCoordinator.offsetsTopicConfigs`).
pub(crate) fn offsets_topic_config(broker_defaults: &LogConfig) -> LogConfig {
    let mut config = broker_defaults.clone();
    config.cleanup_policy = CleanupPolicy::COMPACT;
    config.segment_bytes = OFFSETS_TOPIC_SEGMENT_BYTES;
    config
}

impl LogStorage<'_> {
    /// `__consumer_offsets-<partition>`, the topic created first if it does not exist.
    fn offsets_partition(&self, partition: i32) -> Result<Arc<Partition>, (i16, String)> {
        let Some(logs) = self.shared.logs() else {
            return Err((errors::COORDINATOR_NOT_AVAILABLE, "the broker is shutting down".into()));
        };
        if logs.partition(OFFSETS_TOPIC, partition).is_none() {
            let n = self.shared.coordinator().config().offsets_topic_num_partitions;
            let config = offsets_topic_config(logs.config());
            let creation = logs.lock_topic_creation();
            topics::create(&creation, OFFSETS_TOPIC, n, Some(config))
                .map_err(|e| (errors::COORDINATOR_NOT_AVAILABLE, format!("creating {OFFSETS_TOPIC}: {e}")))?;
        }
        logs.partition(OFFSETS_TOPIC, partition)
            .ok_or((errors::COORDINATOR_NOT_AVAILABLE, format!("{OFFSETS_TOPIC}-{partition} does not exist")))
    }

    /// After an append: someone may be consuming `__consumer_offsets` (long polling), its
    /// fetches are tried.
    fn appended(&self, partition: i32) {
        self.shared.purgatory().check_and_complete(&WatchKey::Partition(OFFSETS_TOPIC.to_string(), partition));
    }
}

/// Kafka's `GroupMetadataManager.storeOffsets` error mapping of a failed append.
fn store_error(e: &crate::log::LogError) -> (i16, String) {
    let code = match errors::log_error_code(e) {
        errors::RECORD_LIST_TOO_LARGE | errors::MESSAGE_TOO_LARGE => errors::INVALID_COMMIT_OFFSET_SIZE,
        // A fenced producer's epoch is answered as it is (Kafka: `case other => other`).
        code @ (errors::INVALID_PRODUCER_EPOCH | errors::INVALID_TXN_STATE) => code,
        _ => errors::COORDINATOR_NOT_AVAILABLE,
    };
    (code, e.to_string())
}

/// The batch of `records` (key, value) at `now`, of `producer` (id, epoch, base sequence) as a
/// transactional batch when given.
fn offsets_batch(
    records: &[(Vec<u8>, Option<Vec<u8>>)],
    producer: Option<(i64, i16, i32)>,
    now: i64,
) -> Result<Vec<u8>, (i16, String)> {
    let mut batch = BatchBuilder::new(0, Compression::None);
    if let Some((id, epoch, sequence)) = producer {
        batch = batch.producer(id, epoch, sequence).transactional(true);
    }
    for (key, value) in records {
        batch.append(now, Some(key), value.as_deref(), &[]);
    }
    batch.build().map_err(|e| (errors::UNKNOWN_SERVER_ERROR, e.to_string()))
}

impl OffsetsStorage for LogStorage<'_> {
    fn append(&self, partition: i32, records: Vec<(Vec<u8>, Option<Vec<u8>>)>, now: i64) -> Result<i64, (i16, String)> {
        if records.is_empty() {
            return Ok(-1);
        }
        let bytes = offsets_batch(&records, None, now)?;
        let log = self.offsets_partition(partition)?;
        // Validated with no lock, appended under the partition's lock only.
        let info = log.append(&bytes, now).map_err(|e| store_error(&e))?;
        self.appended(partition);
        Ok(info.first_offset)
    }

    /// The batch's sequence continues the producer's sequence in the partition (0 for a new
    /// epoch): Kafka writes 0 and skips the sequence check for its coordinator's appends
    /// (`AppendOrigin.COORDINATOR`); this log checks every producer batch, and a repeated
    /// sequence would be taken for a retry and not written. The shard's write-order mutex,
    /// held by the caller, keeps the coordinator's appends to the partition in order.
    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now: i64,
    ) -> Result<i64, (i16, String)> {
        if records.is_empty() {
            return Ok(-1);
        }
        let log = self.offsets_partition(partition)?;
        let sequence = match log.log().producer_state().entry(producer_id) {
            Some(e) if e.producer_epoch() == producer_epoch => increment_sequence(e.last_seq(), 1),
            _ => 0,
        };
        let bytes = offsets_batch(&records, Some((producer_id, producer_epoch, sequence)), now)?;
        let info = log.append_transactional(&bytes, now).map_err(|e| store_error(&e))?;
        self.appended(partition);
        Ok(info.first_offset)
    }
}

/// Replays every `__consumer_offsets` partition of the broker's log into its coordinator, then
/// ends the coordinator's loading state. Each partition's segment files are listed under its own
/// lock, for reading, and read after it is released (record bytes are read with `pread`, whole
/// segments at a time); a partition that cannot be read is logged and skipped.
pub(crate) fn load(shared: &Shared) {
    let coordinator = shared.coordinator();
    let partitions: Vec<i32> = match shared.logs() {
        Some(logs) => topics::partitions(logs, OFFSETS_TOPIC),
        None => Vec::new(),
    };
    let now = crate::log::partition::now_ms();
    for partition in partitions {
        let mut records = TxnOffsets::default();
        {
            let Some(log) = shared.logs().and_then(|l| l.partition(OFFSETS_TOPIC, partition)) else { continue };
            // The segments' files and sizes are taken under the partition's lock; the bytes are
            // read after it is released (a file stays readable while its handle is held).
            let segments: Vec<_> = log
                .log()
                .segments()
                .map(|s| FileSlice { segment: Arc::clone(s.file()), position: 0, len: u64::from(s.size()) })
                .collect();
            for segment in segments {
                let bytes = match segment.read_to_vec() {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!(
                            "{OFFSETS_TOPIC}-{partition}: reading {}: {e}",
                            segment.segment.path().display()
                        );
                        continue;
                    }
                };
                for batch in MixedBatches::new(&bytes) {
                    match batch {
                        Ok(b) => records.add(b),
                        Err(e) => {
                            tracing::warn!("{OFFSETS_TOPIC}-{partition}: {e}; the rest of the segment is skipped");
                            break;
                        }
                    }
                }
            }
        }
        let (records, open) = records.finish();
        if open > 0 {
            tracing::info!(
                "{OFFSETS_TOPIC}-{partition}: {open} transactional offset commit(s) of transactions still open are pending"
            );
        }
        let applied = coordinator.load_records(partition, records, now);
        tracing::debug!("{OFFSETS_TOPIC}-{partition}: replayed {applied} records");
    }
    coordinator.finish_loading();
}
