//! The v2 record batch decoder (magic 2, Kafka's `DefaultRecordBatch`) on untrusted bytes: the
//! header (offset range checked on parse), the CRC, the records with decompression bounded to
//! 1 MiB, and the walks a segment and a consumer make over concatenated batches. CRCs are also
//! skipped so mutated batches reach the record decoder. Errors are fine; a panic (an overflow:
//! fuzz builds have debug assertions on) is a finding, and so is a batch the streaming record walk
//! (produce validation's, `RecordStream`) judges otherwise than the whole-buffer walk.
#![no_main]

use fetchbench::log::batch::mixed::{DecodeOptions, MixedBatches};
use fetchbench::log::batch::{BatchBoundaries, BatchError, BatchHeader, PartialRecord, RecordBatch, RecordStream};
use libfuzzer_sys::fuzz_target;

/// Bound on decompressed bytes per batch: hostile input must not allocate more.
const MAX_UNCOMPRESSED: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = BatchHeader::parse(data) {
        let _ = (h.last_offset(), h.next_offset(), h.total_size(), h.attributes.compression());
    }
    if let Ok(batch) = RecordBatch::parse(data) {
        let _ = batch.verify_crc();
        let _ = (batch.last_offset(), batch.next_offset());
        if let Ok(records) = batch.records_with_limit(MAX_UNCOMPRESSED) {
            for r in records.iter() {
                let Ok(r) = r else { break };
                let _ = (r.offset, r.timestamp, r.headers.len());
            }
        }
        let whole = || -> Result<(Vec<PartialRecord>, usize), BatchError> {
            let records = batch.records_with_limit(MAX_UNCOMPRESSED)?;
            let (mut out, mut consumed) = (Vec::new(), 0);
            for r in records.iter() {
                let r = r?;
                consumed += r.size_in_bytes;
                out.push(PartialRecord::from(&r));
            }
            Ok((out, records.data().len() - consumed))
        };
        let mut out = Vec::new();
        let streamed = RecordStream::new(&batch, MAX_UNCOMPRESSED).and_then(|s| {
            s.walk(|_, r| {
                out.push(*r);
                Ok(())
            })
        });
        let streamed = streamed.map(|left| (out, left));
        assert_eq!(format!("{streamed:?}"), format!("{:?}", whole()), "the streaming walk disagrees");
    }
    // The length walk of a segment (Kafka's FileRecords.batches()).
    let mut walk = BatchBoundaries::new(data);
    for b in walk.by_ref() {
        let _ = b.position.checked_add(b.size);
    }
    let _ = walk.partial_tail();
    // A consumer's walk over a fetched record set, with and without CRC checks.
    for verify_crc in [false, true] {
        let options = DecodeOptions { verify_crc, max_uncompressed: MAX_UNCOMPRESSED };
        for b in MixedBatches::with_options(data, options) {
            let Ok(b) = b else { break };
            let _ = (b.next_offset(), b.records.len());
        }
    }
});
