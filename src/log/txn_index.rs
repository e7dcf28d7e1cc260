//! The transaction index (`<base offset>.txnindex`): the aborted transactions whose ABORT marker
//! is in a segment, Kafka's `TransactionIndex` and `AbortedTxn`
//! (`storage/src/main/java/org/apache/kafka/storage/internals/log/`).
//!
//! ## Format
//!
//! A sequence of 34-byte entries, big-endian, no header:
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 2 | version | 0 (the only one Kafka writes; another is an error) |
//! | 8 | producer id | the producer whose transaction was aborted |
//! | 8 | first offset | the offset of the transaction's first batch in this partition |
//! | 8 | last offset | the offset of its ABORT marker |
//! | 8 | last stable offset | the partition's last stable offset once the marker was written |
//!
//! Entries are in marker order. Kafka appends one when a segment receives an ABORT marker
//! (`LogSegment.updateTxnIndex`), rebuilds a segment's file when it recovers the segment, and
//! checks only that the size is a multiple of 34 (`sanityCheck`). fetchbench does the same: an
//! ABORT marker written at runtime ([`super::partition::PartitionLog::append_txn_marker`])
//! appends its entry to the `.txnindex` of the segment holding the MARKER ([`append`]; fsynced
//! with the segment's other index files); and the entries are rebuilt from the markers whenever
//! a partition is opened (every batch header is replayed), a segment's file written back whole
//! ([`write()`]) when it is missing or says otherwise ([`super::partition::PartitionLog::open`]),
//! so a crash between a marker and its entry loses nothing. A file that knows more than the
//! replay (first offsets and last stable offsets from below the log start offset, or of
//! batches the cleaner removed, as Kafka and fetchbench's cleaner leave them) is kept; a file
//! larger than the markers its segment can hold is not read.

use std::path::Path;

use crate::log::error::LogError;
use crate::log::segment::TXN_INDEX_SUFFIX;

/// Size of one entry, bytes (Kafka's `AbortedTxn.TOTAL_SIZE`).
pub const ENTRY_SIZE: usize = 34;

/// The only entry version (Kafka's `AbortedTxn.CURRENT_VERSION`).
pub const CURRENT_VERSION: i16 = 0;

/// One aborted transaction of a partition (Kafka's `AbortedTxn`): offsets are absolute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer id.
    pub producer_id: i64,
    /// Offset of the transaction's first batch in the partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The partition's last stable offset after the marker (the first offset of the earliest
    /// transaction still open, or the marker's offset + 1).
    pub last_stable_offset: i64,
}

/// `entries` as the bytes of a `.txnindex` file.
pub fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_SIZE);
    for e in entries {
        out.extend_from_slice(&CURRENT_VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

/// The entries of a `.txnindex` file's bytes.
///
/// Errors (a description): a size that is not a multiple of [`ENTRY_SIZE`] (Kafka's
/// `sanityCheck`), an entry version other than 0 (Kafka's `AbortedTxn` constructor).
pub fn decode(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
    if !bytes.len().is_multiple_of(ENTRY_SIZE) {
        return Err(format!("{} bytes is not a multiple of the entry size {ENTRY_SIZE}", bytes.len()));
    }
    let i64_at = |c: &[u8], at: usize| i64::from_be_bytes(c[at..at + 8].try_into().expect("8 bytes"));
    bytes
        .chunks_exact(ENTRY_SIZE)
        .enumerate()
        .map(|(i, c)| {
            let version = i16::from_be_bytes([c[0], c[1]]);
            if version != CURRENT_VERSION {
                return Err(format!("entry {i}: version {version} (only {CURRENT_VERSION} is known)"));
            }
            Ok(AbortedTxn {
                producer_id: i64_at(c, 2),
                first_offset: i64_at(c, 10),
                last_offset: i64_at(c, 18),
                last_stable_offset: i64_at(c, 26),
            })
        })
        .collect()
}

/// `ControlRecordType.ABORT`: the type of an ABORT marker's key.
pub const ABORT_MARKER: i16 = 0;
/// `ControlRecordType.COMMIT`.
pub const COMMIT_MARKER: i16 = 1;

/// What the control batch `bytes` (one whole batch) marks, from its first record's key (Kafka's
/// `ControlRecordType.parse`: version i16, type i16): `Some(true)` for ABORT, `Some(false)` for
/// COMMIT, `None` for another control type (a KRaft leader change, ...), which ends no
/// transaction.
///
/// Errors (a description): not a control batch, no record, a key shorter than 4 bytes, a batch
/// that does not decode.
pub fn end_marker(bytes: &[u8]) -> Result<Option<bool>, String> {
    let batch = crate::log::batch::RecordBatch::parse(bytes).map_err(|e| e.to_string())?;
    if !batch.attributes().is_control() {
        return Err("not a control batch".into());
    }
    let records = batch.records().map_err(|e| e.to_string())?;
    let first = records.iter().next().ok_or("a control batch without a record")?.map_err(|e| e.to_string())?;
    let key = first.key.filter(|k| k.len() >= 4).ok_or("a control record key shorter than 4 bytes")?;
    match i16::from_be_bytes([key[2], key[3]]) {
        ABORT_MARKER => Ok(Some(true)),
        COMMIT_MARKER => Ok(Some(false)),
        _ => Ok(None),
    }
}

/// The bytes of a COMMIT or ABORT marker batch (Kafka's `MemoryRecords.withEndTransactionMarker`):
/// one control record at `offset`, key (version 0, type), value `EndTransactionMarker` (version
/// 0, `coordinator_epoch`), the batch transactional and control, of `producer_id` / `epoch`.
pub fn marker_batch(
    offset: i64,
    producer_id: i64,
    epoch: i16,
    aborted: bool,
    coordinator_epoch: i32,
    now_ms: i64,
) -> Vec<u8> {
    let kind = if aborted { ABORT_MARKER } else { COMMIT_MARKER };
    let key = [0i16.to_be_bytes(), kind.to_be_bytes()].concat();
    let value = [&0i16.to_be_bytes()[..], &coordinator_epoch.to_be_bytes()].concat();
    let mut b = crate::log::batch::BatchBuilder::new(offset, crate::log::batch::Compression::None)
        .producer(producer_id, epoch, -1)
        .transactional(true)
        .control(true);
    b.append(now_ms, Some(&key), Some(&value), &[]);
    b.build().expect("one small record")
}

/// The path of the transaction index of the segment whose log file is `log_path`
/// (`00000000000000000000.log` -> `00000000000000000000.txnindex`).
pub fn path_for(log_path: &Path) -> std::path::PathBuf {
    log_path.with_extension(&TXN_INDEX_SUFFIX[1..])
}

/// Reads the file at `path`: `Ok(None)` when there is none.
///
/// Errors: [`LogError::Io`] reading; [`LogError::CorruptIndex`] when [`decode`] refuses the bytes.
pub fn read(path: &Path) -> Result<Option<Vec<AbortedTxn>>, LogError> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes).map(Some).map_err(|reason| LogError::CorruptIndex {
            path: path.to_path_buf(),
            reason: format!("transaction index: {reason}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LogError::io("read", path, e)),
    }
}

/// Writes `entries` to `path` whole (a temporary file renamed over it, then the directory
/// synced), or removes the file when `entries` is empty (Kafka leaves an empty file; an absent
/// one reads the same).
///
/// Errors: [`LogError::Io`].
pub fn write(path: &Path, entries: &[AbortedTxn]) -> Result<(), LogError> {
    if entries.is_empty() {
        return match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(LogError::io("remove", path, e)),
        };
    }
    let tmp = path.with_extension("txnindex.tmp");
    std::fs::write(&tmp, encode(entries)).map_err(|e| LogError::io("write", &tmp, e))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(|e| LogError::io("fsync", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| LogError::io("rename", path, e))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(|e| LogError::io("fsync", dir, e))?;
    }
    Ok(())
}

/// Appends one entry (34 bytes) to the file at `path`, creating it when absent: Kafka's
/// `TransactionIndex.append`, called by `LogSegment.updateTxnIndex` when an ABORT marker is
/// written ([`PartitionLog::append_txn_marker`](super::partition::PartitionLog::append_txn_marker)).
/// Not fsynced here: like the segment's other index files, the file is fsynced when its
/// segment is flushed ([`Segment::flush`](crate::log::segment::Segment::flush)); after a crash
/// the entries are rebuilt from the markers at open.
///
/// Errors: [`LogError::Io`] / [`LogError::OutOfSpace`] naming the file.
pub fn append(path: &Path, entry: &AbortedTxn) -> Result<(), LogError> {
    use std::io::Write;
    let mut f =
        std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| LogError::io("open", path, e))?;
    f.write_all(&encode(std::slice::from_ref(entry))).map_err(|e| LogError::io("append to", path, e))
}

/// The coordinator epoch a COMMIT / ABORT marker batch carries (the value of its first record:
/// Kafka's `EndTransactionMarker`, version i16 then coordinator epoch i32).
///
/// Errors (a description): a batch that does not decode, no record, a value shorter than 6 bytes.
pub fn marker_coordinator_epoch(bytes: &[u8]) -> Result<i32, String> {
    let batch = crate::log::batch::RecordBatch::parse(bytes).map_err(|e| e.to_string())?;
    let records = batch.records().map_err(|e| e.to_string())?;
    let first = records.iter().next().ok_or("a control batch without a record")?.map_err(|e| e.to_string())?;
    let value = first.value.filter(|v| v.len() >= 6).ok_or("a marker value shorter than 6 bytes")?;
    Ok(i32::from_be_bytes([value[2], value[3], value[4], value[5]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_in_kafkas_layout() {
        let e = AbortedTxn { producer_id: 7, first_offset: 0, last_offset: 3, last_stable_offset: 4 };
        let bytes = encode(&[e, AbortedTxn { producer_id: -1 - i64::from(i32::MAX), ..e }]);
        assert_eq!(bytes.len(), 2 * ENTRY_SIZE);
        // version 0, producer id 7, first 0, last 3, LSO 4: Kafka's AbortedTxn.writeTo.
        assert_eq!(&bytes[..2], &[0, 0]);
        assert_eq!(&bytes[2..10], &7i64.to_be_bytes());
        assert_eq!(&bytes[18..26], &3i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &4i64.to_be_bytes());
        assert_eq!(decode(&bytes).unwrap()[0], e);
        assert_eq!(decode(&bytes[..33]).unwrap_err(), "33 bytes is not a multiple of the entry size 34");
        let mut v1 = bytes.clone();
        v1[1] = 1;
        assert!(decode(&v1).unwrap_err().contains("entry 0: version 1"));
    }

    #[test]
    fn markers_are_read_back_by_their_key() {
        assert_eq!(end_marker(&marker_batch(3, 7, 0, true, 5, 1000)), Ok(Some(true)));
        assert_eq!(end_marker(&marker_batch(3, 7, 0, false, 5, 1000)), Ok(Some(false)));
        let mut data = crate::log::batch::BatchBuilder::new(0, crate::log::batch::Compression::None);
        data.append(1, None, Some(b"v"), &[]);
        assert_eq!(end_marker(&data.build().unwrap()).unwrap_err(), "not a control batch");
        let mut leader_change =
            crate::log::batch::BatchBuilder::new(0, crate::log::batch::Compression::None).control(true);
        leader_change.append(1, Some(&[0, 0, 0, 2]), Some(b""), &[]);
        let leader_change = leader_change.build().unwrap();
        assert_eq!(end_marker(&leader_change), Ok(None));
        assert_eq!(marker_coordinator_epoch(&marker_batch(3, 7, 0, true, 5, 1000)), Ok(5));
        assert_eq!(marker_coordinator_epoch(&leader_change).unwrap_err(), "a marker value shorter than 6 bytes");
    }

    #[test]
    fn append_adds_one_entry_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let a = AbortedTxn { producer_id: 1, first_offset: 0, last_offset: 3, last_stable_offset: 4 };
        let b = AbortedTxn { producer_id: 2, first_offset: 5, last_offset: 9, last_stable_offset: 10 };
        append(&path, &a).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), encode(&[a]));
        append(&path, &b).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), encode(&[a, b]));
        assert_eq!(read(&path).unwrap(), Some(vec![a, b]));
    }

    #[test]
    fn files_are_written_whole_and_an_empty_index_is_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        let path = path_for(&log);
        assert_eq!(path.file_name().unwrap(), "00000000000000000000.txnindex");
        assert_eq!(read(&path).unwrap(), None);
        let e = AbortedTxn { producer_id: 1, first_offset: 5, last_offset: 9, last_stable_offset: 10 };
        write(&path, &[e]).unwrap();
        assert_eq!(read(&path).unwrap(), Some(vec![e]));
        write(&path, &[]).unwrap();
        assert!(!path.exists());
        std::fs::write(&path, [0u8; 35]).unwrap();
        assert!(matches!(read(&path), Err(LogError::CorruptIndex { .. })));
    }
}
