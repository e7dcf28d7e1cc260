//! Per-partition producer state for idempotent produce (KIP-98): Kafka's `ProducerStateManager`,
//! `ProducerStateEntry`, `BatchMetadata` and the client-append checks of `ProducerAppendInfo`
//! (`checkProducerEpoch`, `checkSequence`), with the Kafka 2.5+ (KIP-360) rule for producers the
//! partition does not know.
//!
//! For every producer id seen in the partition it keeps the producer epoch and the metadata of the
//! producer's last [`NUM_BATCHES_TO_RETAIN`] (5) batches: first/last sequence, first/last offset,
//! max timestamp. An idempotent producer (Java client, librdkafka, kafka-python) has at most 5
//! requests in flight per partition, so a retried batch is always one of those 5.
//!
//! Rules for a batch from a client (`producer_id >= 0`), in Kafka's order:
//!
//! 1. **Duplicate**: same epoch as the stored one and exactly the first/last sequence of one of
//!    the retained batches: nothing is appended and the producer gets the ORIGINAL batch's
//!    offsets ([`ProducerCheck::Duplicate`]; Kafka's `ProducerStateEntry.findDuplicateBatch`,
//!    answered with `NONE` by `UnifiedLog.append`).
//! 2. **Epoch** (`checkProducerEpoch`): an epoch below the stored one is
//!    [`LogError::InvalidProducerEpoch`] (`INVALID_PRODUCER_EPOCH`, 47; a zombie producer).
//! 3. **Sequence** (`checkSequence`), [`LogError::OutOfOrderSequence`] (`OUT_OF_ORDER_SEQUENCE_NUMBER`,
//!    45) when broken:
//!    - a new (higher) epoch must start at sequence 0, unless the producer is unknown;
//!    - in the same epoch the first sequence must follow the last one (`last + 1`, and 0 after
//!      `i32::MAX`: sequences wrap);
//!    - an unknown producer (no state: never seen, expired, or its batches were deleted by
//!      retention) is accepted at ANY sequence. Kafka 4 no longer answers `UNKNOWN_PRODUCER_ID`
//!      (59) to a produce (KIP-360), so neither does this broker.
//!
//! Several batches of one record set are checked one after the other (each against the state the
//! previous ones would leave), all BEFORE anything is written ([`ProducerStateManager::check_append`]);
//! the state changes only after the write succeeded ([`ProducerStateManager::apply`]).
//!
//! **Persistence.** Kafka writes `<offset>.snapshot` files (producer state at a segment roll and
//! at shutdown) and, on load, reads the latest snapshot and replays only the batches after it.
//! fetchbench writes no snapshots: [`PartitionLog::open`](super::PartitionLog::open) rebuilds the
//! state by replaying the batch HEADERS of the whole log ([`ProducerStateManager::replay`], a
//! header-only scan, no record bytes), after recovery, so the state always matches the log that
//! survived (a truncated tail takes its batches with it). Replay does not check sequences (Kafka
//! loads with `AppendOrigin.REPLICATION`, which does not either). Consequences: the state of a
//! producer whose batches were all deleted by retention is lost on restart (Kafka keeps it in its
//! snapshot); the producer is then unknown and accepted at any sequence, exactly as after Kafka's
//! expiry. Compaction keeps each producer's last batch (an empty one if needed, with its base
//! sequence and last offset delta), so a compacted log still gives every producer its last
//! sequence and epoch, with fewer than 5 batches retained.
//!
//! **Transactions** (KIP-98; Kafka's `ProducerStateManager.ongoingTxns` and
//! `ProducerAppendInfo.appendEndTxnMarker`): a producer's transactional batch opens a
//! transaction in the partition at its base offset unless one is open
//! ([`ProducerStateManager::begin_txn`]); its COMMIT or ABORT marker (a control batch) ends it
//! ([`ProducerStateManager::end_txn`], a [`CompletedTxn`]; a marker with none open completes an
//! empty one at the marker's offset, as Kafka does). The earliest open transaction's first
//! offset is the partition's first unstable offset ([`ProducerStateManager::first_unstable_offset`]),
//! which bounds the last stable offset. A producer with an open transaction never expires.
//! This runs at load (the header replay) and at runtime: a transactional append
//! ([`PartitionLog::append_transactional`](super::PartitionLog::append_transactional)) opens the
//! transaction after its write; while it is open the producer's non-transactional batches are
//! [`LogError::InvalidTxnState`] (Kafka's `appendDataBatch`). A marker written by the
//! coordinator ([`PartitionLog::append_txn_marker`](super::PartitionLog::append_txn_marker)) is
//! checked first ([`ProducerStateManager::check_end_txn_marker`]: an epoch below the producer's
//! is [`LogError::InvalidProducerEpoch`], a coordinator epoch below the one of the producer's
//! last marker [`LogError::TransactionCoordinatorFenced`]) and applied after its write
//! ([`ProducerStateManager::append_end_txn_marker`]: the producer takes the marker's epoch and
//! coordinator epoch, Kafka's `ProducerStateEntry.coordinatorEpoch`; at load the coordinator
//! epoch is read back from the marker's value).
//!
//! **Expiry** (`producer.id.expiration.ms`, Kafka default 24 h, [`DEFAULT_PRODUCER_ID_EXPIRATION_MS`]):
//! a producer whose last batch max timestamp is older than that is forgotten by
//! [`ProducerStateManager::remove_expired`] (Kafka's `removeExpiredProducers`, which the log runs
//! every `producer.id.expiration.check.interval.ms`, 10 min). Like Kafka, the timestamp is the
//! producer's own (batch max timestamp), not the append time.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::batch::{BatchHeader, NO_PRODUCER_EPOCH};
use super::error::LogError;

/// Batches retained per producer for duplicate detection (Kafka's
/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`; the client's `max.in.flight.requests.per.connection`
/// limit for idempotence).
pub(crate) const NUM_BATCHES_TO_RETAIN: usize = 5;

/// `producer.id.expiration.ms` default: 86 400 000 ms (24 h), Kafka's `ProducerStateManagerConfig`.
pub(crate) const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;

/// `producer.id.expiration.check.interval.ms` default: 600 000 ms (10 min), how often a log drops
/// expired producers.
pub(crate) const DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: i64 = 600_000;

/// "No sequence" (Kafka's `RecordBatch.NO_SEQUENCE`).
pub(crate) const NO_SEQUENCE: i32 = -1;

/// `sequence + increment` wrapping from `i32::MAX` to 0 (Kafka's
/// `DefaultRecordBatch.incrementSequence`). `increment` is >= 0.
pub(crate) fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// `sequence - decrement` wrapping from 0 to `i32::MAX` (Kafka's
/// `DefaultRecordBatch.decrementSequence`). `decrement` is >= 0.
#[cfg(test)]
pub(crate) fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// Whether `next_seq` directly follows `last_seq` (Kafka's `ProducerAppendInfo.inSequence`): `last + 1`,
/// or 0 after `i32::MAX`.
fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq as i64 == last_seq as i64 + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// The producer facts of one batch, with the offsets it has (or will have) in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    /// Producer id (>= 0).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record: `first_seq + last_offset_delta`, wrapping at `i32::MAX`.
    pub last_seq: i32,
    /// Offset of the first record (the batch base offset).
    pub first_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Batch max timestamp, ms.
    pub max_timestamp: i64,
}

impl ProducerBatch {
    /// The producer facts of a v2 batch header, `None` when it has no producer id (`producer_id < 0`).
    /// Offsets are taken from the header as it is (set its base offset first for a leader append).
    pub fn from_header(h: &BatchHeader) -> Option<Self> {
        if h.producer_id < 0 {
            return None;
        }
        let delta = h.last_offset_delta.max(0);
        Some(ProducerBatch {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            last_seq: if h.base_sequence < 0 { h.base_sequence } else { increment_sequence(h.base_sequence, delta) },
            first_offset: h.base_offset,
            last_offset: h.base_offset.saturating_add(i64::from(delta)),
            max_timestamp: h.max_timestamp,
        })
    }

    fn metadata(&self) -> BatchMetadata {
        BatchMetadata {
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            first_offset: self.first_offset,
            last_offset: self.last_offset,
            max_timestamp: self.max_timestamp,
        }
    }
}

/// One retained batch of a producer (Kafka's `BatchMetadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record.
    pub last_seq: i32,
    /// Offset of the first record.
    pub first_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
    /// Batch max timestamp, ms (the append time for `LogAppendTime` topics).
    pub max_timestamp: i64,
}

/// The state of one producer id in one partition (Kafka's `ProducerStateEntry`): its epoch and
/// its last [`NUM_BATCHES_TO_RETAIN`] batches, oldest first. A new epoch clears the batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerStateEntry {
    producer_id: i64,
    producer_epoch: i16,
    batches: VecDeque<BatchMetadata>,
    last_timestamp: i64,
    /// The coordinator epoch of the producer's last transaction marker, -1 when none (Kafka's
    /// `ProducerStateEntry.coordinatorEpoch`).
    coordinator_epoch: i32,
}

impl ProducerStateEntry {
    /// A producer with no state: epoch -1 (`NO_PRODUCER_EPOCH`), no batches, timestamp -1.
    pub fn empty(producer_id: i64) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            last_timestamp: -1,
            coordinator_epoch: -1,
        }
    }
    /// The producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// The latest epoch seen (-1 when none).
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }
    /// The coordinator epoch of the producer's last COMMIT / ABORT marker, -1 when none (Kafka's
    /// `ProducerStateEntry.coordinatorEpoch`): a marker from an older coordinator is fenced
    /// ([`ProducerStateManager::check_end_txn_marker`]).
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }
    /// Max timestamp of the latest batch, ms (-1 when none): what expiry compares.
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }
    /// The retained batches, oldest first (at most [`NUM_BATCHES_TO_RETAIN`]).
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> {
        self.batches.iter()
    }
    /// Whether no batch is retained.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
    /// Last sequence of the latest batch, [`NO_SEQUENCE`] when none.
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }
    /// Last offset of the latest batch, -1 when none.
    pub fn last_data_offset(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }

    /// The retained batch `batch` repeats: same epoch and the exact first and last sequence
    /// (Kafka's `findDuplicateBatch`).
    pub fn find_duplicate(&self, batch: &ProducerBatch) -> Option<BatchMetadata> {
        if batch.producer_epoch != self.producer_epoch {
            return None;
        }
        self.batches.iter().find(|m| m.first_seq == batch.first_seq && m.last_seq == batch.last_seq).copied()
    }

    /// Kafka's `maybeUpdateProducerEpoch`: a different epoch replaces the stored one and clears
    /// the batches.
    fn set_epoch(&mut self, epoch: i16) {
        if self.producer_epoch != epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    /// Kafka's `addBatch`: epoch first, then the batch, dropping the oldest beyond 5.
    fn add_batch(&mut self, batch: &ProducerBatch) {
        self.set_epoch(batch.producer_epoch);
        if self.batches.len() == NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.batches.push_back(batch.metadata());
        self.last_timestamp = batch.max_timestamp;
    }
}

/// What [`ProducerStateManager::check_append`] decided for a record set.
#[derive(Debug, PartialEq, Eq)]
pub enum ProducerCheck {
    /// Every batch is a retry of a retained batch: append nothing, answer with these offsets
    /// (first batch's first offset, last batch's last offset, largest max timestamp).
    Duplicate(BatchMetadata),
    /// The batches pass: write them, then [`ProducerStateManager::apply`] this update.
    Append(ProducerUpdate),
}

/// Validated producer-state changes of one append, applied after the write (Kafka's map of
/// `ProducerAppendInfo.updatedEntry`s): per producer, the epoch and the batches of the append.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProducerUpdate {
    entries: Vec<ProducerStateEntry>,
}

impl ProducerUpdate {
    /// Whether no batch of the append had a producer id.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The producer state of one partition (Kafka's `ProducerStateManager`). See the module docs.
#[derive(Clone, Debug, Default)]
pub struct ProducerStateManager {
    partition: String,
    producers: HashMap<i64, ProducerStateEntry>,
    /// Open transactions: first offset -> producer id (Kafka's `ongoingTxns`).
    ongoing: BTreeMap<i64, i64>,
    /// Open transactions: producer id -> first offset (Kafka's `currentTxnFirstOffset`).
    open_by_producer: HashMap<i64, i64>,
}

/// A transaction its marker ended (Kafka's `CompletedTxn`), offsets absolute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    /// The producer id.
    pub producer_id: i64,
    /// The transaction's first offset in the partition (the marker's own offset for an empty one).
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    /// Whether the marker was ABORT.
    pub is_aborted: bool,
    /// The partition's last stable offset once the marker is written (Kafka's
    /// `ProducerStateManager.lastStableOffset(completedTxn)`): the first offset of the earliest
    /// transaction still open, or the marker's offset + 1.
    pub last_stable_offset: i64,
}

impl ProducerStateManager {
    /// An empty state for `partition` (`topic-partition`, used in error messages).
    pub fn new(partition: impl Into<String>) -> Self {
        ProducerStateManager {
            partition: partition.into(),
            producers: HashMap::new(),
            ongoing: BTreeMap::new(),
            open_by_producer: HashMap::new(),
        }
    }

    /// Opens a transaction of `producer_id` at `offset` (the base offset of one of its
    /// transactional data batches) unless one is open already.
    pub fn begin_txn(&mut self, producer_id: i64, offset: i64) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.open_by_producer.entry(producer_id) {
            v.insert(offset);
            self.ongoing.insert(offset, producer_id);
        }
    }

    /// Ends `producer_id`'s transaction with its marker at `marker_offset` (`aborted`: ABORT,
    /// else COMMIT).
    pub fn end_txn(&mut self, producer_id: i64, marker_offset: i64, aborted: bool) -> CompletedTxn {
        let first_offset = match self.open_by_producer.remove(&producer_id) {
            Some(first) => {
                self.ongoing.remove(&first);
                first
            }
            None => marker_offset,
        };
        CompletedTxn {
            producer_id,
            first_offset,
            last_offset: marker_offset,
            is_aborted: aborted,
            last_stable_offset: self.first_unstable_offset().unwrap_or(marker_offset + 1),
        }
    }

    /// Checks a COMMIT / ABORT marker of `producer_id` before it is written, as Kafka's
    /// `ProducerAppendInfo.appendEndTxnMarker` (a marker is appended with
    /// `AppendOrigin.COORDINATOR`): its `producer_epoch` must not be below the producer's
    /// (`checkProducerEpoch`), and its `coordinator_epoch` not below the one of the producer's
    /// last marker (a zombie coordinator). `offset` is where the marker would go (for the
    /// message). A producer the partition does not know passes (an empty transaction).
    ///
    /// Errors: [`LogError::InvalidProducerEpoch`] (`INVALID_PRODUCER_EPOCH`, 47);
    /// [`LogError::TransactionCoordinatorFenced`] (`TRANSACTION_COORDINATOR_FENCED`, 52).
    pub fn check_end_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        offset: i64,
    ) -> Result<(), LogError> {
        let Some(entry) = self.producers.get(&producer_id) else { return Ok(()) };
        if producer_epoch < entry.producer_epoch {
            return Err(LogError::InvalidProducerEpoch {
                partition: self.partition.clone(),
                producer_id,
                producer_epoch,
                current_epoch: entry.producer_epoch,
                offset,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced {
                partition: self.partition.clone(),
                producer_id,
                coordinator_epoch,
                current_coordinator_epoch: entry.coordinator_epoch,
                offset,
            });
        }
        Ok(())
    }

    /// Applies a COMMIT / ABORT marker written at `offset` (checked first by
    /// [`Self::check_end_txn_marker`]; at load it is taken as it is), Kafka's
    /// `appendEndTxnMarker` then `ProducerStateManager.update`: the producer's epoch becomes the
    /// marker's (a higher one clears its retained batches), its coordinator epoch and last
    /// timestamp are the marker's, and its open transaction ends ([`Self::end_txn`]).
    pub fn append_end_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        offset: i64,
        timestamp_ms: i64,
        aborted: bool,
    ) -> CompletedTxn {
        let entry = self.producers.entry(producer_id).or_insert_with(|| ProducerStateEntry::empty(producer_id));
        entry.set_epoch(producer_epoch);
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = timestamp_ms;
        self.end_txn(producer_id, offset, aborted)
    }

    /// Records the coordinator epoch of a marker replayed at load (the epoch and timestamp come
    /// from [`Self::replay`] of its header, the transaction's end from [`Self::end_txn`]).
    pub fn set_coordinator_epoch(&mut self, producer_id: i64, coordinator_epoch: i32) {
        if let Some(e) = self.producers.get_mut(&producer_id) {
            e.coordinator_epoch = coordinator_epoch;
        }
    }

    /// Whether `producer_id` has an open transaction in the partition.
    pub fn has_open_txn(&self, producer_id: i64) -> bool {
        self.open_by_producer.contains_key(&producer_id)
    }

    /// The first offset of the earliest open transaction (Kafka's `firstUnstableOffset`);
    /// `None` when none is open.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// The open transactions, `(first offset, producer id)` by first offset.
    pub fn open_txns(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(o, p)| (*o, *p))
    }

    /// The state of `producer_id`, if the partition has any.
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }
    /// Producers with state.
    pub fn len(&self) -> usize {
        self.producers.len()
    }
    /// Whether no producer has state.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
    /// The largest producer id with state (the producer id manager starts above it).
    pub fn max_producer_id(&self) -> Option<i64> {
        self.producers.keys().copied().max()
    }

    /// Checks the batches of one client append (headers with the offsets the leader assigned), as
    /// Kafka's `UnifiedLog.analyzeAndValidateProducerState` with `AppendOrigin.CLIENT`: duplicates
    /// against the stored state, then epoch and sequence of each batch in order. Batches without a
    /// producer id pass untouched. Nothing changes until [`Self::apply`].
    ///
    /// A set whose batches are all duplicates is [`ProducerCheck::Duplicate`]. A set mixing
    /// duplicates with other batches is refused with [`LogError::OutOfOrderSequence`] (clients
    /// send one batch per partition; Kafka would answer such a set as a duplicate of its first
    /// duplicate batch and silently drop the rest, which this broker does not do).
    ///
    /// Errors: [`LogError::InvalidProducerEpoch`], [`LogError::OutOfOrderSequence`].
    pub fn check_append(&self, headers: &[BatchHeader]) -> Result<ProducerCheck, LogError> {
        if headers.iter().all(|h| h.producer_id < 0) {
            return Ok(ProducerCheck::Append(ProducerUpdate::default()));
        }
        let batches: Vec<Option<ProducerBatch>> = headers.iter().map(ProducerBatch::from_header).collect();
        let duplicates: Vec<Option<BatchMetadata>> = batches
            .iter()
            .map(|b| b.and_then(|b| self.producers.get(&b.producer_id).and_then(|e| e.find_duplicate(&b))))
            .collect();
        let n_dup = duplicates.iter().filter(|d| d.is_some()).count();
        if n_dup > 0 && n_dup == duplicates.len() {
            let metas: Vec<BatchMetadata> = duplicates.into_iter().flatten().collect();
            let first = metas[0];
            let last = metas[metas.len() - 1];
            return Ok(ProducerCheck::Duplicate(BatchMetadata {
                first_seq: first.first_seq,
                last_seq: last.last_seq,
                first_offset: first.first_offset,
                last_offset: last.last_offset,
                max_timestamp: metas.iter().map(|m| m.max_timestamp).max().unwrap_or(-1),
            }));
        }
        if n_dup > 0 {
            let (b, _) = batches.iter().zip(&duplicates).find(|(_, d)| d.is_some()).expect("counted");
            let b = b.expect("a duplicate has a producer id");
            return Err(
                self.out_of_order(&b, "the record set mixes a batch already written with new batches".to_string())
            );
        }
        // (current entry, updated entry) per producer, in first-seen order.
        let mut updates: Vec<(ProducerStateEntry, ProducerStateEntry)> = Vec::new();
        // Producers whose transactional batch came earlier in this set.
        let mut txn_in_set: Vec<i64> = Vec::new();
        for (header, b) in headers.iter().zip(&batches).filter_map(|(h, b)| b.as_ref().map(|b| (h, b))) {
            let i = match updates.iter().position(|(c, _)| c.producer_id == b.producer_id) {
                Some(i) => i,
                None => {
                    let current = self
                        .producers
                        .get(&b.producer_id)
                        .cloned()
                        .unwrap_or_else(|| ProducerStateEntry::empty(b.producer_id));
                    let mut updated = ProducerStateEntry::empty(b.producer_id);
                    updated.producer_epoch = current.producer_epoch;
                    updated.last_timestamp = current.last_timestamp;
                    updates.push((current, updated));
                    updates.len() - 1
                }
            };
            let (current, updated) = &mut updates[i];
            self.check_batch(current, updated, b)?;
            // Kafka's `ProducerAppendInfo.appendDataBatch`: a producer with an open transaction
            // writes only transactional batches until its marker.
            let txn_open = self.open_by_producer.contains_key(&b.producer_id) || txn_in_set.contains(&b.producer_id);
            if header.attributes.is_transactional() {
                txn_in_set.push(b.producer_id);
            } else if txn_open {
                return Err(LogError::InvalidTxnState {
                    partition: self.partition.clone(),
                    producer_id: b.producer_id,
                    offset: b.first_offset,
                    reason: "a non-transactional batch from a producer with an open transaction".into(),
                });
            }
            updated.add_batch(b);
        }
        Ok(ProducerCheck::Append(ProducerUpdate { entries: updates.into_iter().map(|(_, u)| u).collect() }))
    }

    /// Kafka's `checkProducerEpoch` then `checkSequence` for one client batch.
    fn check_batch(
        &self,
        current: &ProducerStateEntry,
        updated: &ProducerStateEntry,
        b: &ProducerBatch,
    ) -> Result<(), LogError> {
        if b.producer_epoch < updated.producer_epoch {
            return Err(LogError::InvalidProducerEpoch {
                partition: self.partition.clone(),
                producer_id: b.producer_id,
                producer_epoch: b.producer_epoch,
                current_epoch: updated.producer_epoch,
                offset: b.first_offset,
            });
        }
        if b.producer_epoch != updated.producer_epoch {
            if b.first_seq != 0 && updated.producer_epoch != NO_PRODUCER_EPOCH {
                return Err(self.out_of_order(
                    b,
                    format!(
                        "a new epoch must start at sequence 0 (request epoch {}, current epoch {})",
                        b.producer_epoch, updated.producer_epoch
                    ),
                ));
            }
        } else {
            let current_last_seq = if !updated.is_empty() {
                updated.last_seq()
            } else if b.producer_epoch == current.producer_epoch {
                current.last_seq()
            } else {
                NO_SEQUENCE
            };
            // No epoch stored: an unknown producer (or one whose batches are all gone) may start
            // at any sequence (KIP-360).
            if current.producer_epoch != NO_PRODUCER_EPOCH && !in_sequence(current_last_seq, b.first_seq) {
                return Err(self.out_of_order(b, format!("{current_last_seq} (current end sequence number)")));
            }
        }
        Ok(())
    }

    fn out_of_order(&self, b: &ProducerBatch, reason: String) -> LogError {
        LogError::OutOfOrderSequence {
            partition: self.partition.clone(),
            producer_id: b.producer_id,
            producer_epoch: b.producer_epoch,
            sequence: b.first_seq,
            offset: b.first_offset,
            reason,
        }
    }

    /// Applies a checked update after its batches were written (Kafka's `ProducerStateManager.update`:
    /// a new epoch clears the stored batches, then the new batches are added, keeping the last 5).
    pub fn apply(&mut self, update: ProducerUpdate) {
        for next in update.entries {
            let entry =
                self.producers.entry(next.producer_id).or_insert_with(|| ProducerStateEntry::empty(next.producer_id));
            entry.set_epoch(next.producer_epoch);
            for m in next.batches {
                if entry.batches.len() == NUM_BATCHES_TO_RETAIN {
                    entry.batches.pop_front();
                }
                entry.batches.push_back(m);
            }
            entry.last_timestamp = next.last_timestamp;
        }
    }

    /// Adds a batch already in the log without checks (log load, and appends that keep their
    /// offsets; Kafka's `AppendOrigin.REPLICATION`). Batches without a producer id are ignored.
    /// An epoch going backwards is taken as it is, with a warning, as Kafka does for replication.
    /// A control batch (a transaction marker, written by a coordinator) only sets the epoch and the
    /// timestamp, retaining no batch (Kafka's `appendEndTxnMarker`).
    pub fn replay(&mut self, header: &BatchHeader) {
        let Some(b) = ProducerBatch::from_header(header) else { return };
        let entry = self.producers.entry(b.producer_id).or_insert_with(|| ProducerStateEntry::empty(b.producer_id));
        if header.attributes.is_control() {
            entry.set_epoch(b.producer_epoch);
            entry.last_timestamp = b.max_timestamp;
            return;
        }
        if b.producer_epoch < entry.producer_epoch {
            tracing::warn!(
                "{}: producer {} epoch {} at offset {} is below the last seen epoch {}",
                self.partition,
                b.producer_id,
                b.producer_epoch,
                b.first_offset,
                entry.producer_epoch
            );
        }
        entry.add_batch(&b);
    }

    /// Forgets producers whose latest batch max timestamp is `expiration_ms` or more before
    /// `now_ms` (Kafka's `removeExpiredProducers` with `producer.id.expiration.ms`). Returns how
    /// many were removed.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let open = &self.open_by_producer;
        self.producers.retain(|id, e| open.contains_key(id) || now_ms.saturating_sub(e.last_timestamp) < expiration_ms);
        before - self.producers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::{BatchBuilder, Compression};

    const T: i64 = 1_764_000_000_000;

    /// A header for `n` records of `pid`/`epoch` from `seq`, at `offset`.
    fn header(pid: i64, epoch: i16, seq: i32, n: usize, offset: i64) -> BatchHeader {
        let mut b = BatchBuilder::new(offset, Compression::None).producer(pid, epoch, seq);
        for i in 0..n {
            b.append(T + i as i64, Some(b"k"), Some(b"v"), &[]);
        }
        BatchHeader::parse(&b.build().unwrap()).unwrap()
    }

    fn state() -> ProducerStateManager {
        ProducerStateManager::new("t-0")
    }

    /// Checks and applies one batch; returns its offsets or the error.
    fn append(s: &mut ProducerStateManager, h: BatchHeader) -> Result<ProducerCheck, LogError> {
        let c = s.check_append(&[h])?;
        Ok(match c {
            ProducerCheck::Append(u) => {
                s.apply(u);
                ProducerCheck::Append(ProducerUpdate::default())
            }
            d => d,
        })
    }

    fn is_out_of_order(r: Result<ProducerCheck, LogError>) -> bool {
        matches!(r, Err(LogError::OutOfOrderSequence { .. }))
    }

    #[test]
    fn sequences_must_follow_within_an_epoch() {
        let mut s = state();
        assert!(append(&mut s, header(7, 0, 0, 3, 0)).is_ok());
        assert_eq!(s.entry(7).unwrap().last_seq(), 2);
        assert!(append(&mut s, header(7, 0, 3, 2, 3)).is_ok());
        // A gap, and a sequence going back that is no retained batch.
        assert!(is_out_of_order(append(&mut s, header(7, 0, 6, 1, 5))));
        assert!(is_out_of_order(append(&mut s, header(7, 0, 1, 1, 5))));
        assert!(append(&mut s, header(7, 0, 5, 1, 5)).is_ok());
        assert_eq!(s.entry(7).unwrap().last_data_offset(), 5);
    }

    #[test]
    fn unknown_producers_start_at_any_sequence() {
        let mut s = state();
        assert!(append(&mut s, header(9, 3, 42, 1, 0)).is_ok(), "KIP-360: no state, any sequence");
        assert!(is_out_of_order(append(&mut s, header(9, 3, 44, 1, 1))));
        assert!(append(&mut s, header(9, 3, 43, 1, 1)).is_ok());
    }

    #[test]
    fn a_new_epoch_must_start_at_zero_and_an_old_epoch_is_fenced() {
        let mut s = state();
        append(&mut s, header(1, 0, 0, 2, 0)).unwrap();
        assert!(is_out_of_order(append(&mut s, header(1, 1, 5, 1, 2))));
        assert!(append(&mut s, header(1, 1, 0, 1, 2)).is_ok());
        assert_eq!(s.entry(1).unwrap().producer_epoch(), 1);
        assert_eq!(s.entry(1).unwrap().batches().len(), 1, "a new epoch clears the batches");
        let old = append(&mut s, header(1, 0, 2, 1, 3));
        assert!(
            matches!(old, Err(LogError::InvalidProducerEpoch { producer_epoch: 0, current_epoch: 1, .. })),
            "{old:?}"
        );
    }

    #[test]
    fn duplicates_of_the_last_five_batches_return_the_original_offsets() {
        let mut s = state();
        let mut offset = 100;
        for i in 0..6 {
            append(&mut s, header(5, 0, i * 2, 2, offset)).unwrap();
            offset += 2;
        }
        assert_eq!(s.entry(5).unwrap().batches().len(), NUM_BATCHES_TO_RETAIN);
        // Batch 1 (seq 2-3, offsets 102-103) is still retained: a retry gets its offsets back,
        // whatever offsets the retry would have had.
        match s.check_append(&[header(5, 0, 2, 2, 999)]).unwrap() {
            ProducerCheck::Duplicate(m) => assert_eq!((m.first_offset, m.last_offset, m.first_seq), (102, 103, 2)),
            other => panic!("{other:?}"),
        }
        // The last batch too.
        assert!(
            matches!(s.check_append(&[header(5, 0, 10, 2, 999)]).unwrap(), ProducerCheck::Duplicate(m) if m.first_offset == 110)
        );
        // Batch 0 is gone: its retry is out of order.
        assert!(is_out_of_order(s.check_append(&[header(5, 0, 0, 2, 999)])));
        // Same first sequence, other last sequence: not a duplicate.
        assert!(is_out_of_order(s.check_append(&[header(5, 0, 2, 3, 999)])));
        // Another epoch is never a duplicate.
        assert!(matches!(s.check_append(&[header(5, 1, 10, 2, 999)]), Err(LogError::OutOfOrderSequence { .. })));
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        let mut s = state();
        append(&mut s, header(2, 0, i32::MAX - 1, 2, 0)).unwrap();
        assert_eq!(s.entry(2).unwrap().last_seq(), i32::MAX);
        assert!(is_out_of_order(s.check_append(&[header(2, 0, 1, 1, 2)])));
        assert!(append(&mut s, header(2, 0, 0, 1, 2)).is_ok());
        // A batch spanning the wrap.
        let mut s = state();
        append(&mut s, header(3, 0, i32::MAX - 1, 1, 0)).unwrap();
        append(&mut s, header(3, 0, i32::MAX, 3, 1)).unwrap();
        assert_eq!(s.entry(3).unwrap().last_seq(), 1);
        assert!(
            matches!(s.check_append(&[header(3, 0, i32::MAX, 3, 9)]).unwrap(), ProducerCheck::Duplicate(m) if m.first_offset == 1)
        );
        assert!(append(&mut s, header(3, 0, 2, 1, 4)).is_ok());
    }

    #[test]
    fn batches_of_one_set_are_checked_in_order_and_nothing_changes_on_error() {
        let mut s = state();
        append(&mut s, header(4, 0, 0, 1, 0)).unwrap();
        let set = [header(4, 0, 1, 2, 1), header(4, 0, 3, 1, 3), header(8, 0, 0, 1, 4)];
        let ProducerCheck::Append(u) = s.check_append(&set).unwrap() else { panic!() };
        s.apply(u);
        assert_eq!(s.entry(4).unwrap().last_seq(), 3);
        assert_eq!(s.entry(4).unwrap().batches().len(), 3);
        assert_eq!(s.entry(8).unwrap().last_seq(), 0);
        // Second batch out of order: the whole set is refused and the state is unchanged.
        let bad = [header(4, 0, 4, 1, 5), header(4, 0, 9, 1, 6)];
        assert!(matches!(s.check_append(&bad), Err(LogError::OutOfOrderSequence { sequence: 9, .. })));
        assert_eq!(s.entry(4).unwrap().last_seq(), 3);
        // A set of duplicates answers the span; a mixed set is refused.
        assert!(matches!(
            s.check_append(&[header(4, 0, 1, 2, 50), header(4, 0, 3, 1, 52)]).unwrap(),
            ProducerCheck::Duplicate(m) if (m.first_offset, m.last_offset) == (1, 3)
        ));
        assert!(is_out_of_order(s.check_append(&[header(4, 0, 3, 1, 50), header(4, 0, 4, 1, 51)])));
        // Batches without a producer id pass.
        let plain = BatchHeader::parse(&{
            let mut b = BatchBuilder::new(0, Compression::None);
            b.append(T, None, Some(b"v"), &[]);
            b.build().unwrap()
        })
        .unwrap();
        assert!(matches!(s.check_append(&[plain]).unwrap(), ProducerCheck::Append(u) if u.is_empty()));
    }

    #[test]
    fn replay_rebuilds_without_checks_and_expiry_forgets() {
        let mut s = state();
        s.replay(&header(6, 0, 0, 1, 0));
        s.replay(&header(6, 0, 7, 1, 1)); // a gap (compaction): taken as it is
        s.replay(&header(11, 2, 0, 1, 2));
        assert_eq!(s.entry(6).unwrap().last_seq(), 7);
        assert_eq!(s.max_producer_id(), Some(11));
        assert!(append(&mut s, header(6, 0, 8, 1, 3)).is_ok());
        assert_eq!(s.remove_expired(T + DEFAULT_PRODUCER_ID_EXPIRATION_MS - 1, DEFAULT_PRODUCER_ID_EXPIRATION_MS), 0);
        assert_eq!(s.remove_expired(T + DEFAULT_PRODUCER_ID_EXPIRATION_MS, DEFAULT_PRODUCER_ID_EXPIRATION_MS), 2);
        assert!(s.is_empty());
        // Expired: unknown again, any sequence.
        assert!(append(&mut s, header(6, 0, 100, 1, 4)).is_ok());
        // A transaction marker keeps the data batches and their last sequence.
        let mut m = BatchBuilder::new(5, Compression::None).producer(6, 0, -1).transactional(true).control(true);
        m.append(T, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
        s.replay(&BatchHeader::parse(&m.build().unwrap()).unwrap());
        assert_eq!((s.entry(6).unwrap().last_seq(), s.entry(6).unwrap().batches().len()), (100, 1));
    }
    #[test]
    fn transactions_open_at_their_first_batch_and_end_at_their_marker() {
        let mut m = ProducerStateManager::new("t-0");
        assert_eq!(m.first_unstable_offset(), None);
        m.begin_txn(1, 0);
        m.begin_txn(1, 2); // the same transaction's second batch
        m.begin_txn(2, 5);
        assert_eq!(m.first_unstable_offset(), Some(0));
        assert_eq!(m.open_txns().collect::<Vec<_>>(), [(0, 1), (5, 2)]);
        // Producer 1 aborts at 7: producer 2's open transaction bounds the LSO.
        let done = m.end_txn(1, 7, true);
        assert_eq!(
            done,
            CompletedTxn { producer_id: 1, first_offset: 0, last_offset: 7, is_aborted: true, last_stable_offset: 5 }
        );
        assert_eq!(m.first_unstable_offset(), Some(5));
        let done = m.end_txn(2, 8, false);
        assert_eq!((done.first_offset, done.is_aborted, done.last_stable_offset), (5, false, 9));
        assert_eq!(m.first_unstable_offset(), None);
        // A marker with nothing open: an empty transaction at the marker (Kafka's appendEndTxnMarker).
        assert_eq!(m.end_txn(3, 9, true).first_offset, 9);
    }

    #[test]
    fn markers_are_fenced_by_producer_and_coordinator_epoch() {
        let mut m = ProducerStateManager::new("t-0");
        // Unknown producer: any marker passes (an empty transaction).
        assert!(m.check_end_txn_marker(1, 0, 0, 0).is_ok());
        m.replay(&header(1, 2, 0, 1, 0));
        m.begin_txn(1, 0);
        let low = m.check_end_txn_marker(1, 1, 5, 1);
        assert!(
            matches!(low, Err(LogError::InvalidProducerEpoch { producer_epoch: 1, current_epoch: 2, .. })),
            "{low:?}"
        );
        assert!(m.check_end_txn_marker(1, 2, 5, 1).is_ok());
        let done = m.append_end_txn_marker(1, 2, 5, 1, T, true);
        assert_eq!((done.first_offset, done.last_offset, done.is_aborted), (0, 1, true));
        let e = m.entry(1).unwrap();
        assert_eq!((e.producer_epoch(), e.coordinator_epoch(), e.last_timestamp()), (2, 5, T));
        assert_eq!(e.batches().len(), 1, "a marker in the same epoch keeps the batches");
        // An older coordinator is fenced; the same or a newer one passes.
        let fenced = m.check_end_txn_marker(1, 2, 4, 2);
        assert!(
            matches!(
                fenced,
                Err(LogError::TransactionCoordinatorFenced { coordinator_epoch: 4, current_coordinator_epoch: 5, .. })
            ),
            "{fenced:?}"
        );
        assert!(m.check_end_txn_marker(1, 2, 5, 2).is_ok());
        // A marker of a higher epoch moves the producer to it (Kafka's maybeUpdateProducerEpoch).
        m.append_end_txn_marker(1, 3, 6, 2, T, false);
        assert_eq!((m.entry(1).unwrap().producer_epoch(), m.entry(1).unwrap().batches().len()), (3, 0));
        assert_eq!(m.first_unstable_offset(), None);
    }

    #[test]
    fn a_producer_in_a_transaction_writes_only_transactional_batches() {
        let txn = |pid: i64, seq: i32, offset: i64| {
            let mut b = BatchBuilder::new(offset, Compression::None).producer(pid, 0, seq).transactional(true);
            b.append(T, None, Some(b"v"), &[]);
            BatchHeader::parse(&b.build().unwrap()).unwrap()
        };
        let mut m = ProducerStateManager::new("t-0");
        assert!(matches!(m.check_append(&[txn(1, 0, 0)]), Ok(ProducerCheck::Append(_))));
        // Within one set: transactional then plain is refused, nothing applies.
        let mixed = m.check_append(&[txn(1, 0, 0), header(1, 0, 1, 1, 1)]);
        assert!(matches!(mixed, Err(LogError::InvalidTxnState { producer_id: 1, offset: 1, .. })), "{mixed:?}");
        let ProducerCheck::Append(u) = m.check_append(&[txn(1, 0, 0)]).unwrap() else { panic!() };
        m.apply(u);
        m.begin_txn(1, 0);
        assert!(matches!(m.check_append(&[header(1, 0, 1, 1, 1)]), Err(LogError::InvalidTxnState { .. })));
        assert!(m.check_append(&[txn(1, 1, 1)]).is_ok());
        assert!(m.check_append(&[header(2, 0, 0, 1, 1)]).is_ok(), "another producer is not concerned");
        m.end_txn(1, 1, false);
        assert!(m.check_append(&[header(1, 0, 1, 1, 2)]).is_ok(), "after the marker a plain batch is fine");
    }

    #[test]
    fn a_producer_with_an_open_transaction_never_expires() {
        let mut m = ProducerStateManager::new("t-0");
        let mut old = BatchBuilder::new(0, Compression::None).producer(1, 0, 0);
        old.append(1_000, None, Some(b"v"), &[]);
        let bytes = old.build().unwrap();
        let h = *crate::log::batch::RecordBatch::parse(&bytes).unwrap().header();
        m.replay(&h);
        let mut other = h;
        other.producer_id = 2;
        m.replay(&other);
        m.begin_txn(1, 0);
        assert_eq!(m.remove_expired(i64::MAX / 2, 1000), 1, "producer 2 expires");
        assert!(m.entry(1).is_some(), "producer 1's transaction is open");
    }
}
