//! Record batches: Kafka's on-disk and on-wire record format.
//!
//! RecordBatch v2 (magic 2, Kafka's `DefaultRecordBatch`) is viewed in place, zero-copy; legacy
//! message sets (magic 0 and 1) are decoded read-only. One file per concept:
//!
//! | file | Kafka class | what |
//! |---|---|---|
//! | `header` | `DefaultRecordBatch` (header fields) | the v2 layout, [`Attributes`], [`BatchHeader`], [`check_offset_range`] |
//! | `error` | `CorruptRecordException`, `InvalidRecordException` | [`BatchError`] |
//! | `record_batch` | `DefaultRecordBatch` | [`RecordBatch`] (a batch viewed in place, CRC-32C) and its [`Records`] |
//! | [`record`] | `DefaultRecord` | one record: varint layout, [`Record`], [`Header`] |
//! | `record_stream` | `DefaultRecordBatch.skipKeyValueIterator`, `PartialDefaultRecord` | [`RecordStream`]: a batch's records walked from a streaming decompressor in bounded memory, as [`PartialRecord`]s |
//! | `boundaries` | `FileRecords.batches()` | [`BatchBoundaries`]: walking batches of any magic by their length field |
//! | [`compression`] | `CompressionType` | the codecs, bounded decompression |
//! | [`builder`] | `MemoryRecordsBuilder` | [`BatchBuilder`]: writing v2 batches |
//! | [`legacy`] | `LegacyRecord`, `AbstractLegacyRecordBatch` | magic 0/1 message sets, read-only |
//! | [`mixed`] | `CompletedFetch` over `MemoryRecords.batches()` | record sets of mixed magics decoded to uniform records |
//!
//! The layout of a v2 batch and the rules for untrusted headers are on [`BatchHeader`]'s file,
//! `header.rs`. The files import each other from the defining file; this one only declares and
//! re-exports them.

mod boundaries;
pub mod builder;
pub mod compression;
mod error;
mod header;
pub mod legacy;
pub mod mixed;
pub mod record;
mod record_batch;
mod record_stream;

pub use boundaries::{BatchBoundaries, Boundary};
pub use builder::BatchBuilder;
pub use compression::{Compression, DEFAULT_MAX_UNCOMPRESSED};
pub use error::BatchError;
pub(crate) use header::{be_i32, be_i64};
pub use header::{
    check_offset_range, Attributes, BatchHeader, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD,
    MAGIC_OFFSET, MAGIC_V2, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
pub use record::{Header, Record};
pub use record_batch::{RecordBatch, Records};
pub use record_stream::{PartialRecord, RecordStream};

/// Tests across the files: a crafted header refused by the header parser, the batch view and the
/// mixed-magic decoder alike.
#[cfg(test)]
mod tests {
    use super::*;

    /// A one-record batch at `base_offset` with its last offset delta, base timestamp and first
    /// record's offset delta and timestamp delta as given (CRC recomputed): what a crafted header
    /// looks like.
    pub(crate) fn crafted(
        base_offset: i64,
        last_offset_delta: i32,
        base_timestamp: i64,
        record: (i32, i64),
    ) -> Vec<u8> {
        let mut records = Vec::new();
        record::encode_record(&mut records, record.0, record.1, Some(b"k"), Some(b"v"), &[]);
        let mut out = vec![0u8; HEADER_SIZE];
        out.extend_from_slice(&records);
        let header = BatchHeader {
            base_offset,
            batch_length: (out.len() - LOG_OVERHEAD) as i32,
            partition_leader_epoch: 0,
            magic: MAGIC_V2,
            crc: 0,
            attributes: Attributes::default(),
            last_offset_delta,
            base_timestamp,
            max_timestamp: base_timestamp,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            records_count: 1,
        };
        header.encode(&mut out);
        let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    #[test]
    fn a_header_whose_offsets_overflow_is_refused_when_parsed() {
        // The header: `log dump` printed lastOffset 9223372035109945351 (wrapped).
        for (base, delta) in [(i64::MAX - 5, 10), (i64::MAX, 0), (i64::MAX - 1, 1), (0, -1), (100, i32::MIN)] {
            let bytes = crafted(base, delta, 0, (0, 0));
            for err in [BatchHeader::parse(&bytes).unwrap_err(), RecordBatch::parse(&bytes).unwrap_err()] {
                match err {
                    BatchError::InvalidOffsetRange { base_offset, last_offset_delta, .. } => {
                        assert_eq!((base_offset, last_offset_delta), (base, delta))
                    }
                    other => panic!("({base}, {delta}): {other:?}"),
                }
            }
            assert!(mixed::decode_entry(&bytes, 0, mixed::DecodeOptions::default()).is_err());
        }
        // The largest possible range: the next offset is exactly i64::MAX.
        let h = BatchHeader::parse(&crafted(i64::MAX - 11, 10, 0, (0, 0))).unwrap();
        assert_eq!((h.last_offset(), h.next_offset()), (i64::MAX - 1, i64::MAX));
        let h = BatchHeader::parse(&crafted(i64::MIN, 0, 0, (0, 0))).unwrap();
        assert_eq!(h.next_offset(), i64::MIN + 1);
        assert!(check_offset_range(i64::MAX - 1, 0).is_ok());
        assert!(check_offset_range(i64::MAX - 1, 1).is_err());
    }

    #[test]
    fn accessors_saturate_on_a_hand_built_header() {
        let mut h = BatchHeader::parse(&crafted(0, 0, 0, (0, 0))).unwrap();
        h.base_offset = i64::MAX;
        h.last_offset_delta = i32::MAX;
        assert_eq!((h.last_offset(), h.next_offset()), (i64::MAX, i64::MAX));
    }

    #[test]
    fn record_offset_and_timestamp_overflow_are_invalid_records() {
        // Offset delta -1 below base offset i64::MIN.
        let bytes = crafted(i64::MIN, 0, 0, (-1, 0));
        let batch = RecordBatch::parse(&bytes).unwrap();
        batch.verify_crc().unwrap();
        let err = batch.records().unwrap().to_vec().unwrap_err();
        assert!(
            matches!(&err, BatchError::InvalidRecord { reason, .. } if reason.contains("offset delta -1")),
            "{err}"
        );
        assert!(mixed::decode_entry(&bytes, 0, mixed::DecodeOptions::default()).is_err());
        // Timestamp delta 1 above base timestamp i64::MAX (wrapped to i64::MIN before).
        let bytes = crafted(0, 0, i64::MAX, (0, 1));
        let err = RecordBatch::parse(&bytes).unwrap().records().unwrap().to_vec().unwrap_err();
        assert!(
            matches!(&err, BatchError::InvalidRecord { reason, .. } if reason.contains("timestamp delta 1")),
            "{err}"
        );
        // Both in range: decoded exactly.
        let bytes = crafted(i64::MAX - 1, 0, i64::MAX - 1, (0, 1));
        let records = RecordBatch::parse(&bytes).unwrap().records().unwrap();
        let recs = records.to_vec().unwrap();
        assert_eq!((recs[0].offset, recs[0].timestamp), (i64::MAX - 1, i64::MAX));
    }
}
