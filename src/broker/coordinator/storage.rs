//! The coordinator's `__consumer_offsets` in the broker's own log: [`LogStorage`] appends the
//! coordinator's records, [`load`] replays them at start-up.
//!
//! Transactional offset commits (a consumer-transform-produce loop's `TxnOffsetCommit`, written
//! in transactional batches of the producer, by Kafka and by [`LogStorage::append_transactional`])
//! are replayed as Kafka's `GroupMetadataManager.doLoadGroupsAndOffsets` / 4's
//! `OffsetMetadataManager.replay` replay them ([`TxnOffsets`]): held per producer until the
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

use super::runtime::{LoadedRecord, OffsetsStorage};
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

/// A `__consumer_offsets` record: key, value (`None`: a tombstone).
type OffsetsRecordBytes = (Option<bytes::Bytes>, Option<bytes::Bytes>);

/// The records of one `__consumer_offsets` partition in the order the coordinator applies them,
/// transactional offset commits resolved by their markers (see the module docs).
#[derive(Default)]
pub(crate) struct TxnOffsets {
    /// Records to apply, in order, with their batch offsets.
    out: Vec<LoadedRecord>,
    /// Per group/topic/partition key: the batch offset of the offset commit last put in `out`.
    applied_at: std::collections::HashMap<bytes::Bytes, i64>,
    /// Per producer: its transactional offset commits not yet decided, (batch offset, record).
    pending: std::collections::BTreeMap<i64, Vec<(i64, OffsetsRecordBytes)>>,
}

impl TxnOffsets {
    /// Adds one decoded batch of the partition, in log order.
    pub(crate) fn add(&mut self, b: crate::log::batch::mixed::DecodedBatch) {
        if b.is_control {
            // ControlRecordType: key = version i16, type i16 (0 ABORT, 1 COMMIT).
            let kind = b
                .records
                .first()
                .and_then(|r| r.key.as_ref())
                .filter(|k| k.len() >= 4)
                .map(|k| i16::from_be_bytes([k[2], k[3]]));
            let pending = self.pending.remove(&b.producer_id).unwrap_or_default();
            if kind == Some(crate::log::txn_index::COMMIT_MARKER) {
                for (batch_offset, (key, value)) in pending {
                    let k = key.clone().unwrap_or_default();
                    if self.applied_at.get(&k).is_some_and(|&at| at > batch_offset) {
                        continue; // a later plain commit wins (Kafka's `olderThan`)
                    }
                    self.applied_at.insert(k, batch_offset);
                    self.out.push(LoadedRecord { batch_offset, pending_producer: None, key, value });
                }
            }
            return;
        }
        for r in b.records {
            if b.is_transactional && b.producer_id >= 0 {
                self.pending.entry(b.producer_id).or_default().push((b.base_offset, (r.key, r.value)));
                continue;
            }
            if let Some(key) = &r.key {
                match r.value {
                    Some(_) => {
                        self.applied_at.insert(key.clone(), b.base_offset);
                    }
                    // A tombstone removes the offset and the pending transactional ones of its
                    // partition (Kafka 4's `OffsetMetadataManager.replay`): a transactional
                    // commit appended after it applies at its marker whatever its age.
                    None => {
                        self.applied_at.remove(key);
                        for records in self.pending.values_mut() {
                            records.retain(|(_, (k, _))| k.as_ref() != Some(key));
                        }
                    }
                }
            }
            self.out.push(LoadedRecord {
                batch_offset: b.base_offset,
                pending_producer: None,
                key: r.key,
                value: r.value,
            });
        }
    }

    /// The records to apply, those of transactions still open last (pending, with their
    /// producer), and how many of those there are.
    pub(crate) fn finish(mut self) -> (Vec<LoadedRecord>, usize) {
        let mut open = 0;
        for (producer, records) in std::mem::take(&mut self.pending) {
            for (batch_offset, (key, value)) in records {
                open += 1;
                self.out.push(LoadedRecord { batch_offset, pending_producer: Some(producer), key, value });
            }
        }
        (self.out, open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::mixed::MixedBatches;
    use crate::log::batch::{BatchBuilder, Compression};
    use crate::log::txn_index::marker_batch;
    use crate::protocol::consumer_offsets::{OffsetCommitKey, OffsetCommitValue};

    fn commit(base: i64, txn_producer: Option<i64>, partition: i32, offset: i64) -> Vec<u8> {
        let key = OffsetCommitKey::new("g", "t", partition).encode().unwrap();
        let value = OffsetCommitValue::new(offset, None, String::new(), 1, None).encode().unwrap();
        let mut b = BatchBuilder::new(base, Compression::None);
        if let Some(p) = txn_producer {
            b = b.producer(p, 0, 0).transactional(true);
        }
        b.append(1, Some(&key), Some(&value), &[]);
        b.build().unwrap()
    }

    /// Kafka's replay: an aborted transactional commit is dropped, a committed one applied at
    /// its marker unless a later plain commit of the same partition came first, an open one is
    /// not applied.
    #[test]
    fn transactional_offset_commits_wait_for_their_marker() {
        let log = [
            commit(0, None, 0, 5),
            commit(1, Some(7), 0, 10),
            marker_batch(2, 7, 0, true, 0, 1),
            commit(3, Some(8), 1, 20),
            commit(4, Some(9), 3, 40),
            commit(5, None, 3, 41),
            marker_batch(6, 8, 0, false, 0, 1),
            marker_batch(7, 9, 0, false, 0, 1),
            commit(8, Some(10), 2, 30),
        ]
        .concat();
        let mut t = TxnOffsets::default();
        for b in MixedBatches::new(&log) {
            t.add(b.unwrap());
        }
        let (records, open) = t.finish();
        // 0 -> 5 (10 aborted); 3 -> 41 (plain), then 1 -> 20 at 8's COMMIT; 9's 40 loses to the
        // later plain 41; 2 -> 30 is open: pending, last, with its producer.
        assert_eq!(decoded(&records), [(0, 5, 0, None), (3, 41, 5, None), (1, 20, 3, None), (2, 30, 8, Some(10))]);
        assert_eq!(open, 1);
    }

    /// (partition, offset, batch offset, pending producer) of each record.
    fn decoded(records: &[LoadedRecord]) -> Vec<(i32, i64, i64, Option<i64>)> {
        records
            .iter()
            .map(|r| {
                let key = OffsetCommitKey::decode(r.key.as_ref().unwrap()).unwrap();
                let offset = r.value.as_ref().map_or(-1, |v| OffsetCommitValue::decode(v).unwrap().offset);
                (key.partition, offset, r.batch_offset, r.pending_producer)
            })
            .collect()
    }

    /// Kafka 4's replay of a tombstone: it drops the pending transactional offsets of its
    /// partition appended before it (DeleteGroups of a group with an open transaction); one
    /// appended after it applies at its COMMIT.
    #[test]
    fn a_tombstone_drops_the_pending_transactional_offsets_before_it() {
        let tombstone = |base: i64, partition: i32| {
            let key = OffsetCommitKey::new("g", "t", partition).encode().unwrap();
            let mut b = BatchBuilder::new(base, Compression::None);
            b.append(1, Some(&key), None, &[]);
            b.build().unwrap()
        };
        let log = [
            commit(0, Some(7), 0, 10),
            commit(1, Some(8), 1, 20),
            tombstone(2, 0),
            tombstone(3, 1),
            commit(4, Some(8), 1, 21),
            marker_batch(5, 7, 0, false, 0, 1),
            marker_batch(6, 8, 0, false, 0, 1),
        ]
        .concat();
        let mut t = TxnOffsets::default();
        for b in MixedBatches::new(&log) {
            t.add(b.unwrap());
        }
        let (records, open) = t.finish();
        assert_eq!(decoded(&records), [(0, -1, 2, None), (1, -1, 3, None), (1, 21, 4, None)]);
        assert_eq!(open, 0);
    }
}
