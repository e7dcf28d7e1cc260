//! The replay of one `__consumer_offsets` partition into the records the group coordinator
//! applies ([`LoadedRecord`]): [`TxnOffsets`] resolves transactional offset commits by their
//! markers as Kafka's `GroupMetadataManager.doLoadGroupsAndOffsets` / 4's
//! `OffsetMetadataManager.replay` do (see [`super::storage`]). Pure: batches in, records out; the
//! start-up load ([`super::storage::load`]) and the coordinator's tests feed it.

use bytes::Bytes;

/// One record of a `__consumer_offsets` replay ([`GroupCoordinator::load_records`](super::runtime::GroupCoordinator::load_records)), in the
/// order the coordinator applies them (transactional commits resolved by their markers:
/// [`TxnOffsets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedRecord {
    /// The offset of the record's batch in the partition (what a committed offset's
    /// [`CommittedOffset::record_offset`](super::runtime::CommittedOffset::record_offset) becomes).
    pub batch_offset: i64,
    /// `Some(producer id)`: a transactional offset commit whose transaction has no marker in
    /// the log yet; it is loaded pending, as Kafka's loader keeps it
    /// (`pendingTransactionalOffsets`), until [`GroupCoordinator::complete_txn_offsets`](super::runtime::GroupCoordinator::complete_txn_offsets).
    pub pending_producer: Option<i64>,
    /// The record's key.
    pub key: Option<Bytes>,
    /// The record's value (`None`: a tombstone).
    pub value: Option<Bytes>,
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
