//! The write side of transactions in the log (KIP-98; Kafka's `UnifiedLog.append` with
//! `AppendOrigin.CLIENT` for transactional batches and `AppendOrigin.COORDINATOR` for markers,
//! `ProducerAppendInfo.appendEndTxnMarker`, `LogSegment.updateTxnIndex`): what the transaction
//! coordinator calls. Transactional appends from two producers, one committed and one aborted
//! with `append_txn_marker`; the last stable offset at each step (published by `Partition`);
//! the aborted transactions and the `.txnindex` bytes; read_committed slices; a roll between a
//! transaction's data and its marker; fencing; the cleaner below the first unstable offset;
//! and a reopen after a kill rebuilding exactly the same state.

use std::path::{Path, PathBuf};

use fetchbench::log::batch::{BatchBoundaries, BatchBuilder, Compression, RecordBatch};
use fetchbench::log::cleaner;
use fetchbench::log::partition::{OpenOptions, Partition};

use fetchbench::log::txn_index::{self, end_marker, marker_coordinator_epoch, AbortedTxn};
use fetchbench::log::{CompletedTxn, LogConfig, LogError, PartitionLog};

const T: i64 = 1_764_000_000_000;

fn open(dir: &Path, config: LogConfig, clean: bool) -> PartitionLog {
    PartitionLog::open(dir, config, OpenOptions { had_clean_shutdown: clean, ..Default::default() }).unwrap().0
}

/// A transactional batch of `pid`/`epoch` from sequence `seq`, one record per `(key, value)`.
fn txn(pid: i64, epoch: i16, seq: i32, records: &[(&str, &str)]) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None).producer(pid, epoch, seq).transactional(true);
    for (k, v) in records {
        b.append(T, Some(k.as_bytes()), Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn plain(records: &[(&str, &str)]) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for (k, v) in records {
        b.append(T, Some(k.as_bytes()), Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// `(offset, value)` of every record of data batches in `bytes`, with the control batches'
/// `(offset, "COMMIT"/"ABORT")`.
fn records_of(bytes: &[u8]) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for b in BatchBoundaries::new(bytes) {
        let raw = &bytes[b.position..b.position + b.size];
        let batch = RecordBatch::parse(raw).unwrap();
        if batch.attributes().is_control() {
            let kind = if end_marker(raw).unwrap() == Some(true) { "ABORT" } else { "COMMIT" };
            out.push((batch.base_offset(), kind.to_string()));
            continue;
        }
        for r in batch.records().unwrap().iter() {
            let r = r.unwrap();
            out.push((r.offset, String::from_utf8_lossy(r.value.unwrap_or_default()).into_owned()));
        }
    }
    out
}

/// Kafka's 34-byte `AbortedTxn` layout, written by hand.
fn entry_bytes(pid: i64, first: i64, last: i64, lso: i64) -> Vec<u8> {
    [&0i16.to_be_bytes()[..], &pid.to_be_bytes(), &first.to_be_bytes(), &last.to_be_bytes(), &lso.to_be_bytes()]
        .concat()
}

fn txn_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.txnindex"))
}

#[test]
fn two_producers_one_commits_one_aborts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let p = Partition::new(open(&dir, LogConfig::default(), true));
    let lso = |p: &Partition| (p.last_stable_offset(), p.log().last_stable_offset(), p.high_watermark());

    let a = p.append_transactional(&txn(1, 0, 0, &[("a", "p1-0"), ("a", "p1-1")]), T).unwrap();
    assert_eq!((a.first_offset, a.last_offset), (0, 1));
    assert_eq!(lso(&p), (0, 0, 2), "producer 1's open transaction holds the LSO at its first offset");
    let b = p.append_transactional(&txn(2, 0, 0, &[("b", "p2-2"), ("b", "p2-3")]), T).unwrap();
    assert_eq!((b.first_offset, b.last_offset), (2, 3));
    // A second batch of producer 1's transaction: still open at 0.
    assert_eq!(p.append_transactional(&txn(1, 0, 2, &[("a", "p1-4")]), T).unwrap().first_offset, 4);
    assert_eq!(p.append(&plain(&[("c", "plain-5")]), T).unwrap().first_offset, 5);
    assert_eq!(lso(&p), (0, 0, 6));
    assert_eq!(p.log().producer_state().open_txns().collect::<Vec<_>>(), [(0, 1), (2, 2)]);
    // read_committed: nothing is stable yet.
    let (slice, aborted) = p.read_committed(0, 1 << 20, true).unwrap();
    assert_eq!((slice.len, aborted), (0, vec![]));

    // Producer 1 commits at 6: producer 2's transaction (first offset 2) bounds the LSO.
    let (offset, done) = p.append_txn_marker(1, 0, 7, false, T + 1).unwrap();
    assert_eq!(offset, 6);
    assert_eq!(
        done,
        CompletedTxn { producer_id: 1, first_offset: 0, last_offset: 6, is_aborted: false, last_stable_offset: 2 }
    );
    assert_eq!(lso(&p), (2, 2, 7));
    let (slice, aborted) = p.read_committed(0, 1 << 20, true).unwrap();
    assert_eq!(records_of(&slice.read_to_vec().unwrap()), [(0, "p1-0".into()), (1, "p1-1".into())]);
    assert_eq!(aborted, []);
    assert!(!txn_index_path(&dir, 0).exists(), "a COMMIT writes no .txnindex entry");

    // Producer 2 aborts at 7: nothing open, the LSO is the high watermark.
    let (offset, done) = p.append_txn_marker(2, 0, 7, true, T + 2).unwrap();
    assert_eq!(offset, 7);
    assert_eq!(
        done,
        CompletedTxn { producer_id: 2, first_offset: 2, last_offset: 7, is_aborted: true, last_stable_offset: 8 }
    );
    assert_eq!(lso(&p), (8, 8, 8));
    let expected = AbortedTxn { producer_id: 2, first_offset: 2, last_offset: 7, last_stable_offset: 8 };
    assert_eq!(p.log().aborted_txns(), [expected]);
    assert_eq!(std::fs::read(txn_index_path(&dir, 0)).unwrap(), entry_bytes(2, 2, 7, 8));

    // read_committed returns everything with the aborted transaction for the consumer to drop.
    let (slice, aborted) = p.read_committed(0, 1 << 20, true).unwrap();
    let bytes = slice.read_to_vec().unwrap();
    assert_eq!(
        records_of(&bytes),
        [
            (0, "p1-0".into()),
            (1, "p1-1".into()),
            (2, "p2-2".into()),
            (3, "p2-3".into()),
            (4, "p1-4".into()),
            (5, "plain-5".into()),
            (6, "COMMIT".into()),
            (7, "ABORT".into())
        ]
    );
    assert_eq!(aborted, [expected]);
    // The markers are Kafka's: transactional control batches of the producer, its epoch, the
    // coordinator epoch in the value, the partition leader epoch stamped.
    let last = BatchBoundaries::new(&bytes).last().unwrap();
    let marker = &bytes[last.position..last.position + last.size];
    let h = *RecordBatch::parse(marker).unwrap().header();
    assert!(h.attributes.is_control() && h.attributes.is_transactional());
    assert_eq!((h.producer_id, h.producer_epoch, h.base_offset, h.max_timestamp), (2, 0, 7, T + 2));
    assert_eq!(h.partition_leader_epoch, p.leader_epoch());
    assert_eq!(marker_coordinator_epoch(marker), Ok(7));
    let (_, aborted) = p.read_committed(8, 1 << 20, true).unwrap();
    assert_eq!(aborted, [], "an empty slice carries no aborted transaction");
    let entry = p.log().producer_state().entry(2).unwrap().clone();
    assert_eq!((entry.producer_epoch(), entry.coordinator_epoch()), (0, 7));
}

#[test]
fn a_roll_between_data_and_marker_puts_the_entry_in_the_markers_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let mut log = open(&dir, LogConfig::default(), true);
    log.append_transactional(&txn(4, 0, 0, &[("k", "v0"), ("k", "v1")]), T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("x", "v2")]), T).unwrap();
    assert_eq!(log.last_stable_offset(), 0);
    let (offset, done) = log.append_txn_marker(4, 0, 0, true, T).unwrap();
    assert_eq!((offset, done.first_offset, done.last_stable_offset), (3, 0, 4));
    assert!(!txn_index_path(&dir, 0).exists(), "the data's segment gets no entry");
    assert_eq!(std::fs::read(txn_index_path(&dir, 2)).unwrap(), entry_bytes(4, 0, 3, 4));
    // Rolled again before the next marker: each entry stays with its marker.
    log.append_transactional(&txn(4, 0, 2, &[("k", "v4")]), T).unwrap();
    log.roll(T).unwrap();
    log.append_txn_marker(4, 0, 0, true, T).unwrap();
    assert_eq!(std::fs::read(txn_index_path(&dir, 2)).unwrap(), entry_bytes(4, 0, 3, 4));
    assert_eq!(std::fs::read(txn_index_path(&dir, 5)).unwrap(), entry_bytes(4, 4, 5, 6));
    // A slice stays in its segment: from 0 the first transaction (its range ends at segment 2's
    // base), from 4 the second.
    let (_, aborted) = log.read_committed(0, 1 << 20, true).unwrap();
    assert_eq!(aborted.iter().map(|t| t.first_offset).collect::<Vec<_>>(), [0]);
    let (_, aborted) = log.read_committed(4, 1 << 20, true).unwrap();
    assert_eq!(aborted.iter().map(|t| t.first_offset).collect::<Vec<_>>(), [4]);
    // A flush (fsync of every segment's files, the .txnindex included) and a clean reopen agree.
    log.flush(T).unwrap();
    let before = log.aborted_txns().to_vec();
    log.close().unwrap();
    let mut log = open(&dir, LogConfig::default(), true);
    assert_eq!(log.aborted_txns(), before);
    // Retention (bounded by the high watermark, as Kafka's) deletes the segment holding an open
    // transaction's first batch: the LSO counts from the log start offset, never below it.
    log.append_transactional(&txn(4, 0, 3, &[("k", "v6")]), T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("y", "v7")]), T).unwrap();
    assert_eq!(log.last_stable_offset(), 6);
    assert_eq!(log.delete_oldest_segments(|_, _| true).unwrap(), [0, 2, 5]);
    assert_eq!((log.log_start_offset(), log.last_stable_offset()), (7, 7));
    assert_eq!(log.aborted_txns(), [], "their markers went with the segments");
}

#[test]
fn fenced_markers_and_refused_batches_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let mut log = open(&dir, LogConfig::default(), true);
    // The default append refuses transactional batches (the Produce handler's path).
    let refused = log.append(&txn(1, 1, 0, &[("k", "v")]), T);
    assert!(matches!(refused, Err(LogError::TransactionalNotAllowed { producer_id: 1, .. })), "{refused:?}");
    // A transactional batch needs a producer id.
    let mut no_pid = BatchBuilder::new(0, Compression::None).transactional(true);
    no_pid.append(T, None, Some(b"v"), &[]);
    let refused = log.append_transactional(&no_pid.build().unwrap(), T);
    assert!(matches!(refused, Err(LogError::Batch { .. })), "{refused:?}");
    assert_eq!(log.log_end_offset(), 0);

    log.append_transactional(&txn(1, 1, 0, &[("k", "v")]), T).unwrap();
    // A batch of an older epoch is fenced.
    let old = log.append_transactional(&txn(1, 0, 1, &[("k", "v")]), T);
    assert!(matches!(old, Err(LogError::InvalidProducerEpoch { producer_epoch: 0, current_epoch: 1, .. })), "{old:?}");
    // A non-transactional batch of the producer while its transaction is open.
    let mut idem = BatchBuilder::new(0, Compression::None).producer(1, 1, 1);
    idem.append(T, None, Some(b"v"), &[]);
    let bad = log.append(&idem.build().unwrap(), T);
    assert!(matches!(bad, Err(LogError::InvalidTxnState { producer_id: 1, .. })), "{bad:?}");
    // A marker of an older producer epoch: refused, nothing written, the transaction still open.
    let size = log.size_in_bytes();
    let fenced = log.append_txn_marker(1, 0, 3, true, T);
    assert!(matches!(fenced, Err(LogError::InvalidProducerEpoch { producer_epoch: 0, .. })), "{fenced:?}");
    assert_eq!((log.log_end_offset(), log.size_in_bytes(), log.last_stable_offset()), (1, size, 0));
    assert!(log.aborted_txns().is_empty() && !txn_index_path(&dir, 0).exists());
    assert!(matches!(log.append_txn_marker(-1, 0, 3, true, T), Err(LogError::InvalidAppend { .. })));
    // Committed by coordinator epoch 3; a later marker from coordinator epoch 2 is fenced.
    assert_eq!(log.append_txn_marker(1, 1, 3, false, T).unwrap().0, 1);
    log.append_transactional(&txn(1, 1, 1, &[("k", "v")]), T).unwrap();
    let zombie = log.append_txn_marker(1, 1, 2, true, T);
    assert!(
        matches!(
            zombie,
            Err(LogError::TransactionCoordinatorFenced { coordinator_epoch: 2, current_coordinator_epoch: 3, .. })
        ),
        "{zombie:?}"
    );
    assert_eq!((log.log_end_offset(), log.last_stable_offset()), (3, 2));
    assert!(log.aborted_txns().is_empty());
    // The fence survives a reopen (the coordinator epoch is read back from the marker).
    drop(log);
    let mut log = open(&dir, LogConfig::default(), false);
    assert!(matches!(log.append_txn_marker(1, 1, 2, true, T), Err(LogError::TransactionCoordinatorFenced { .. })));
    assert_eq!(log.append_txn_marker(1, 1, 3, true, T).unwrap().0, 3);
}

#[test]
fn the_cleaner_stops_at_the_first_unstable_offset_and_drops_aborted_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let mut cfg = LogConfig::default();
    cfg.set("cleanup.policy", "compact").unwrap();
    let mut log = open(&dir, cfg, true);
    log.append(&plain(&[("a", "committed-0"), ("a", "committed-1")]), T).unwrap();
    log.roll(T).unwrap();
    log.append_transactional(&txn(1, 0, 0, &[("a", "aborted-2")]), T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("b", "b-3")]), T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("c", "c-4")]), T).unwrap();
    assert_eq!(log.last_stable_offset(), 2);
    // Only the segment wholly below the open transaction is cleaned.
    let out = cleaner::compact(&mut log, T).unwrap();
    assert_eq!((out.cleaned_segments.clone(), out.first_dirty_offset), (vec![0], 2), "{out:?}");
    // The transaction aborts; everything below the active segment is cleanable now.
    log.append_txn_marker(1, 0, 0, true, T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("d", "d-6")]), T).unwrap();
    let out = cleaner::compact(&mut log, T).unwrap();
    assert_eq!(out.cleaned_segments, [0, 2, 3, 4], "{out:?}");
    // A read stops at its segment's end: read on from the next offset.
    let mut all = Vec::new();
    let mut next = 0;
    while next < log.log_end_offset() {
        let bytes = log.read(next, u32::MAX, true).unwrap().read_to_vec().unwrap();
        let last = BatchBoundaries::new(&bytes).last().expect("a batch");
        next = RecordBatch::parse(&bytes[last.position..]).unwrap().next_offset();
        all.extend(bytes);
    }
    // The aborted record neither survives nor hides the committed value of "a"; the marker stays.
    assert_eq!(
        records_of(&all),
        [(1, "committed-1".into()), (3, "b-3".into()), (4, "c-4".into()), (5, "ABORT".into()), (6, "d-6".into())]
    );
    // The marker's .txnindex went through the swap with its cleaned segment.
    assert_eq!(std::fs::read(txn_index_path(&dir, 4)).unwrap(), entry_bytes(1, 2, 5, 6));
    // Fetched segment by segment (a slice never crosses one), the aborted transaction comes
    // with the fetches whose range it overlaps (Kafka's addAbortedTransactions bound).
    let mut seen = Vec::new();
    let mut next = 0;
    while next < log.last_stable_offset() {
        let (slice, aborted) = log.read_committed(next, u32::MAX, true).unwrap();
        let bytes = slice.read_to_vec().unwrap();
        let last = BatchBoundaries::new(&bytes).last().expect("a batch");
        next = RecordBatch::parse(&bytes[last.position..]).unwrap().next_offset();
        for t in aborted {
            if !seen.contains(&t) {
                seen.push(t);
            }
        }
    }
    assert_eq!(seen, [AbortedTxn { producer_id: 1, first_offset: 2, last_offset: 5, last_stable_offset: 6 }]);
}

/// Everything a reopen must rebuild: LSO, open transactions, aborted transactions, each
/// segment's `.txnindex` bytes, the producers' epochs and coordinator epochs.
#[derive(Debug, PartialEq)]
struct TxnState {
    lso: i64,
    leo: i64,
    open: Vec<(i64, i64)>,
    aborted: Vec<AbortedTxn>,
    indexes: Vec<(i64, Option<Vec<u8>>)>,
    producers: Vec<(i64, i16, i32)>,
}

fn txn_state(log: &PartitionLog) -> TxnState {
    TxnState {
        lso: log.last_stable_offset(),
        leo: log.log_end_offset(),
        open: log.producer_state().open_txns().collect(),
        aborted: log.aborted_txns().to_vec(),
        indexes: log
            .segments()
            .map(|s| (s.base_offset(), std::fs::read(txn_index::path_for(s.log_path())).ok()))
            .collect(),
        producers: [1, 2, 3]
            .iter()
            .filter_map(|&pid| {
                log.producer_state().entry(pid).map(|e| (pid, e.producer_epoch(), e.coordinator_epoch()))
            })
            .collect(),
    }
}

#[test]
fn a_reopen_after_a_kill_rebuilds_the_same_transaction_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let mut log = open(&dir, LogConfig::default(), true);
    log.append_transactional(&txn(1, 0, 0, &[("k", "1-0")]), T).unwrap();
    log.append_transactional(&txn(2, 0, 0, &[("k", "2-1")]), T).unwrap();
    log.append_txn_marker(1, 0, 4, true, T).unwrap();
    log.roll(T).unwrap();
    log.append_transactional(&txn(3, 2, 0, &[("k", "3-3")]), T).unwrap();
    // Killed between producer 2's / 3's data and their markers: no close, no flush.
    let before = txn_state(&log);
    assert_eq!((before.lso, before.open.clone()), (1, vec![(1, 2), (3, 3)]));
    drop(log);
    let mut log = open(&dir, LogConfig::default(), false);
    assert_eq!(txn_state(&log), before);
    // The markers after the reopen, then killed again.
    log.append_txn_marker(2, 0, 4, true, T).unwrap();
    log.append_txn_marker(3, 2, 5, false, T).unwrap();
    let before = txn_state(&log);
    assert_eq!((before.lso, before.leo, before.open.clone()), (6, 6, vec![]));
    assert_eq!(before.indexes[1].1.as_deref(), Some(&entry_bytes(2, 1, 4, 3)[..]));
    drop(log);
    let log = open(&dir, LogConfig::default(), false);
    assert_eq!(txn_state(&log), before);
    // Killed after the marker but before its .txnindex entry: the entry is rebuilt.
    drop(log);
    std::fs::remove_file(txn_index_path(&dir, 3)).unwrap();
    let log = open(&dir, LogConfig::default(), false);
    assert_eq!(txn_state(&log), before);
}

/// The cleaner removes an aborted transaction's first batch (its last one stays, empty, for the
/// producer state): the `.txnindex` it carried through the swap keeps the transaction's real
/// first offset, which the header replay at the next open can no longer see. That file is
/// right, not damaged: it is kept, and the reopened log lists the same aborted transaction.
#[test]
fn a_txnindex_whose_first_batches_the_cleaner_removed_is_kept_at_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("txl-0");
    let mut cfg = LogConfig::default();
    cfg.set("cleanup.policy", "compact").unwrap();
    let mut log = open(&dir, cfg.clone(), true);
    log.append_transactional(&txn(1, 0, 0, &[("a", "aborted-0")]), T).unwrap();
    log.append_transactional(&txn(1, 0, 1, &[("b", "aborted-1")]), T).unwrap();
    log.append_txn_marker(1, 0, 0, true, T).unwrap();
    log.roll(T).unwrap();
    log.append(&plain(&[("c", "c-3")]), T).unwrap();
    let out = cleaner::compact(&mut log, T).unwrap();
    assert_eq!(out.cleaned_segments, [0], "{out:?}");
    let before = log.aborted_txns().to_vec();
    assert_eq!(before, [AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 2, last_stable_offset: 3 }]);
    assert_eq!(std::fs::read(txn_index_path(&dir, 0)).unwrap(), entry_bytes(1, 0, 2, 3));
    log.close().unwrap();
    let (log, report) =
        PartitionLog::open(&dir, cfg, OpenOptions { had_clean_shutdown: true, ..Default::default() }).unwrap();
    assert!(report.damaged.is_empty(), "{report:?}");
    assert_eq!(std::fs::read(txn_index_path(&dir, 0)).unwrap(), entry_bytes(1, 0, 2, 3));
    assert_eq!(log.aborted_txns(), before);
}
