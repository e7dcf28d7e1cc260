//! The legacy message set decoder (magic 0 and 1, Kafka's `LegacyRecord` and
//! `AbstractLegacyRecordBatch`) on untrusted bytes: one entry, its CRC, its deep records
//! (compressed wrappers decompressed, bounded to 1 MiB; wrapper and inner offsets checked), and a
//! walk over concatenated entries. Errors are fine; a panic is a finding.
#![no_main]

use fetchbench::log::batch::legacy::{decode_legacy_entry, LegacyMessage};
use fetchbench::log::batch::mixed::{DecodeOptions, MixedBatches};
use libfuzzer_sys::fuzz_target;

/// Bound on a wrapper's decompressed bytes: hostile input must not allocate more.
const MAX_UNCOMPRESSED: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok((m, size)) = decode_legacy_entry(rest) {
        let _ = (m.verify_crc(), m.timestamp_type(), m.compression());
        if let Ok(records) = m.deep_records(MAX_UNCOMPRESSED) {
            for r in &records {
                let _ = (r.verify_crc(), r.offset, r.timestamp);
            }
        }
        rest = &rest[size..];
    }
    let _ = LegacyMessage::parse(data).map(|m| m.total_size());
    let options = DecodeOptions { verify_crc: false, max_uncompressed: MAX_UNCOMPRESSED };
    for b in MixedBatches::with_options(data, options) {
        let Ok(b) = b else { break };
        let _ = b.next_offset();
    }
});
