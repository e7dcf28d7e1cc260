//! The coordinator's `__consumer_offsets` in the broker's own log: [`LogStorage`] appends the
//! coordinator's records, [`load`] replays them at start-up.
//!
//! The topic is created on the first write, like Kafka creates it on the first FindCoordinator:
//! `offsets.topic.num.partitions` partitions, `cleanup.policy=compact`,
//! `segment.bytes=offsets.topic.segment.bytes` (100 MiB), the broker's other log defaults.

use std::sync::Arc;

use super::runtime::OffsetsStorage;
use crate::broker::purgatory::WatchKey;
use crate::broker::shared::Shared;
use crate::broker::{errors, topics};
use crate::log::batch::mixed::MixedBatches;
use crate::log::batch::{BatchBuilder, Compression};
use crate::log::config::CleanupPolicy;
use crate::log::{FileSlice, LogConfig};
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

impl OffsetsStorage for LogStorage<'_> {
    fn append(&self, partition: i32, records: Vec<(Vec<u8>, Option<Vec<u8>>)>, now: i64) -> Result<(), (i16, String)> {
        if records.is_empty() {
            return Ok(());
        }
        let mut batch = BatchBuilder::new(0, Compression::None);
        for (key, value) in &records {
            batch.append(now, Some(key), value.as_deref(), &[]);
        }
        let bytes = batch.build().map_err(|e| (errors::UNKNOWN_SERVER_ERROR, e.to_string()))?;
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
        let log = logs
            .partition(OFFSETS_TOPIC, partition)
            .ok_or((errors::COORDINATOR_NOT_AVAILABLE, format!("{OFFSETS_TOPIC}-{partition} does not exist")))?;
        // Validated with no lock, appended under the partition's lock only.
        // Kafka's `GroupMetadataManager.storeOffsets` error mapping.
        log.append(&bytes, now).map_err(|e| {
            let code = match errors::log_error_code(&e) {
                errors::RECORD_LIST_TOO_LARGE | errors::MESSAGE_TOO_LARGE => errors::INVALID_COMMIT_OFFSET_SIZE,
                _ => errors::COORDINATOR_NOT_AVAILABLE,
            };
            (code, e.to_string())
        })?;
        // Someone may be consuming __consumer_offsets (long polling): its fetches are tried.
        self.shared.purgatory().check_and_complete(&WatchKey::Partition(OFFSETS_TOPIC.to_string(), partition));
        Ok(())
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
        let mut records = Vec::new();
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
                        Ok(b) if b.is_control => {}
                        Ok(b) => records.extend(b.records.into_iter().map(|r| (r.key, r.value))),
                        Err(e) => {
                            tracing::warn!("{OFFSETS_TOPIC}-{partition}: {e}; the rest of the segment is skipped");
                            break;
                        }
                    }
                }
            }
        }
        let applied = coordinator.load_records(partition, records, now);
        tracing::debug!("{OFFSETS_TOPIC}-{partition}: replayed {applied} records");
    }
    coordinator.finish_loading();
}
