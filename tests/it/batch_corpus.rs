//! Batches, codecs and the mixed-magic walker against bytes real Kafka brokers wrote
//! (`../shared/corpus`, see its README.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fetchbench::log::batch::compression::XERIAL_MAGIC;
use fetchbench::log::batch::mixed::{decode_entry, DecodeOptions, DecodedBatch, DecodedRecord, MixedBatches};
use fetchbench::log::batch::{
    BatchBoundaries, Compression, PartialRecord, RecordBatch, RecordStream, DEFAULT_MAX_UNCOMPRESSED,
};

use crate::common;

/// One row of the table in corpus/README.md.
struct Expected {
    path: &'static str,
    bytes: usize,
    batches: usize,
    records: usize,
    first_offset: i64,
    last_offset: i64,
    codec: Compression,
    control_batches: usize,
    producer_ids: &'static [i64],
}

const fn row(
    path: &'static str,
    (bytes, batches, records): (usize, usize, usize),
    (first_offset, last_offset): (i64, i64),
    codec: Compression,
    control_batches: usize,
    producer_ids: &'static [i64],
) -> Expected {
    Expected { path, bytes, batches, records, first_offset, last_offset, codec, control_batches, producer_ids }
}

use Compression::{None as NONE, Snappy as SNAPPY};

/// corpus/README.md, `kafka-segments/` table, verbatim.
#[rustfmt::skip]
const TABLE: &[Expected] = &[
    row("Bheem6005-kafka/kafka-logs/__consumer_offsets-0/00000000000000000000.log", (468, 2, 2), (0, 1), NONE, 0, &[-1]),
    row("Bheem6005-kafka/kafka-logs/__consumer_offsets-2/00000000000000000000.log", (465, 2, 2), (0, 1), NONE, 0, &[-1]),
    row("Bheem6005-kafka/kafka-logs/__consumer_offsets-31/00000000000000000000.log", (468, 2, 2), (0, 1), NONE, 0, &[-1]),
    row("Bheem6005-kafka/kafka-logs/__consumer_offsets-34/00000000000000000000.log", (468, 2, 2), (0, 1), NONE, 0, &[-1]),
    row("Bheem6005-kafka/kafka-logs/cities-0/00000000000000000000.log", (820, 11, 11), (0, 10), NONE, 0, &[-1]),
    row("KAIPASUBHASH-kafka-logs/__consumer_offsets-2/00000000000000000000.log", (573, 3, 3), (0, 2), NONE, 0, &[-1]),
    row("KAIPASUBHASH-kafka-logs/__consumer_offsets-26/00000000000000000000.log", (1263, 8, 8), (0, 7), NONE, 0, &[-1]),
    row("KAIPASUBHASH-kafka-logs/__consumer_offsets-46/00000000000000000000.log", (1263, 8, 8), (0, 7), NONE, 0, &[-1]),
    row("KAIPASUBHASH-kafka-logs/subhash-0/00000000000000000000.log", (221, 3, 3), (0, 2), NONE, 0, &[-1]),
    row("NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000000.log", (64548, 147, 862), (0, 861), NONE, 0, &[-1]),
    row("NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000862.log", (317, 1, 7), (862, 868), NONE, 0, &[-1]),
    row("NikhilDighe9975-kafka_setup/kafka-logs/nikhilDemo-0/00000000000000000000.log", (209, 3, 3), (0, 2), NONE, 0, &[7000, 10000]),
    row("Niloufar1171-LDI-POC/TestTopicPatient-0/00000000000000000000.log", (3271, 3, 3), (0, 2), NONE, 0, &[1, 2, 3]),
    row("Niloufar1171-LDI-POC/__cluster_metadata-0/00000000000000000000.log", (353439, 4814, 4929), (0, 4928), NONE, 1, &[-1]),
    row("Niloufar1171-LDI-POC/__consumer_offsets-6/00000000000000000000.log", (13751, 13, 13), (0, 12), NONE, 0, &[-1]),
    row("William0423-kafka/kafka-logs/debug_topic-0/00000000000000000000.log", (883, 3, 40), (0, 39), NONE, 0, &[-1]),
    row("sagarrao1-kafka/MultiNode/kafka-logs-2/my_other_topic-2/00000000000000000000.log", (2312, 32, 45), (0, 44), NONE, 0, &[-1]),
    row("seanorth-kafka-server/kafka-logs/some-topic-0/00000000000000000000.log", (1989, 9, 9), (0, 8), SNAPPY, 0, &[-1]),
];

/// What a segment file holds, counted batch by batch with the v2 view.
#[derive(Debug, Default)]
struct Summary {
    batches: usize,
    records: usize,
    record_offsets: Vec<i64>,
    codecs: BTreeSet<u8>,
    control_batches: usize,
    producer_ids: BTreeSet<i64>,
}

/// Walks a whole `.log` with the v2 view: every entry must be magic 2 with a valid CRC-32C, and
/// every record must decode.
fn summarize_v2(path: &Path, bytes: &[u8]) -> Summary {
    let mut s = Summary::default();
    let mut walk = BatchBoundaries::new(bytes);
    let mut end = 0;
    for b in walk.by_ref() {
        assert_eq!(b.magic, 2, "{}: magic {} at position {}", path.display(), b.magic, b.position);
        assert_eq!(b.position, end, "{}: entries are contiguous", path.display());
        end = b.position + b.size;
        let batch = RecordBatch::parse(&bytes[b.position..]).unwrap();
        batch.verify_crc().unwrap_or_else(|e| panic!("{} at {}: {e}", path.display(), b.position));
        let h = *batch.header();
        s.batches += 1;
        s.codecs.insert(h.attributes.codec_id());
        s.control_batches += h.attributes.is_control() as usize;
        s.producer_ids.insert(h.producer_id);
        let records = batch.records().unwrap();
        let records = records.to_vec().unwrap_or_else(|e| panic!("{} at {}: {e}", path.display(), b.position));
        assert_eq!(records.len(), h.records_count as usize, "{}", path.display());
        for r in &records {
            assert!(r.offset >= h.base_offset && r.offset <= h.last_offset(), "{}: record offset", path.display());
            s.record_offsets.push(r.offset);
        }
        s.records += records.len();
    }
    assert!(!walk.partial_tail(), "{}: partial trailing batch", path.display());
    assert_eq!(end, bytes.len(), "{}: trailing bytes", path.display());
    s
}

fn segments_dir() -> Option<PathBuf> {
    Some(common::corpus()?.join("kafka-segments"))
}

#[test]
fn every_segment_matches_the_readme_table() {
    let Some(dir) = segments_dir() else { return };
    let files = common::files_with_suffix(&dir, ".log");
    let found: BTreeSet<String> =
        files.iter().map(|p| p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned()).collect();
    let expected: BTreeSet<String> = TABLE.iter().map(|e| e.path.to_string()).collect();
    assert_eq!(found, expected, "the .log files in the corpus are the README's table");

    for e in TABLE {
        let path = dir.join(e.path);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), e.bytes, "{}: size", e.path);
        let s = summarize_v2(&path, &bytes);
        assert_eq!(s.batches, e.batches, "{}: batches", e.path);
        assert_eq!(s.records, e.records, "{}: records", e.path);
        assert_eq!(s.record_offsets.first().copied(), Some(e.first_offset), "{}: first offset", e.path);
        assert_eq!(s.record_offsets.last().copied(), Some(e.last_offset), "{}: last offset", e.path);
        assert!(s.record_offsets.windows(2).all(|w| w[0] < w[1]), "{}: offsets increase", e.path);
        assert_eq!(s.codecs, BTreeSet::from([e.codec.id()]), "{}: codec", e.path);
        assert_eq!(s.control_batches, e.control_batches, "{}: control batches", e.path);
        assert_eq!(s.producer_ids, e.producer_ids.iter().copied().collect(), "{}: producer ids", e.path);

        // The mixed walker, which the consumer and `log dump` use, sees the same log.
        let batches: Vec<DecodedBatch> = MixedBatches::new(&bytes)
            .collect::<Result<_, _>>()
            .unwrap_or_else(|err| panic!("{}: mixed walk: {err}", e.path));
        assert_eq!(batches.len(), e.batches, "{}", e.path);
        let offsets: Vec<i64> = batches.iter().flat_map(|b| b.records.iter().map(|r| r.offset)).collect();
        assert_eq!(offsets, s.record_offsets, "{}", e.path);
        let data_records = MixedBatches::new(&bytes).records().count();
        let control_records: usize = batches.iter().filter(|b| b.is_control).map(|b| b.records.len()).sum();
        assert_eq!(data_records + control_records, e.records, "{}", e.path);
    }
}

#[test]
fn xerial_snappy_topic_decodes() {
    let Some(dir) = segments_dir() else { return };
    let bytes =
        std::fs::read(dir.join("seanorth-kafka-server/kafka-logs/some-topic-0/00000000000000000000.log")).unwrap();
    let mut records: Vec<DecodedRecord> = Vec::new();
    for b in BatchBoundaries::new(&bytes) {
        let batch = RecordBatch::parse(&bytes[b.position..]).unwrap();
        assert_eq!(batch.attributes().compression().unwrap(), Compression::Snappy);
        // The Java client's xerial framing, not raw snappy.
        assert_eq!(batch.records_section()[..8], XERIAL_MAGIC, "batch at {}", b.position);
        let decoded = decode_entry(batch.as_bytes(), b.position, DecodeOptions::default()).unwrap();
        assert_eq!(decoded.compression, Compression::Snappy);
        records.extend(decoded.records);
    }
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (0..9).collect::<Vec<_>>());
    for r in &records {
        let key = std::str::from_utf8(r.key.as_deref().unwrap()).unwrap();
        assert!(key.starts_with(r#"{"customerId":"12334568","transactionDate":16417"#), "key {key}");
        assert_eq!(r.value.as_deref(), Some(&br#"{"item":"book","price":"23.9"}"#[..]));
        // Spring Kafka's JsonSerializer names the key's type in a header.
        let headers: Vec<(&[u8], Option<&[u8]>)> = r.headers.iter().map(|h| (&h.key[..], h.value.as_deref())).collect();
        assert_eq!(headers, vec![(&b"__Key_TypeId__"[..], Some(&b"bbejeck.model.PurchaseKey"[..]))]);
    }
    // Re-compressing a decoded records section with our writer gives a section that decodes to
    // the same bytes (xerial framing both ways).
    let first = RecordBatch::parse(&bytes).unwrap();
    let raw = Compression::Snappy.decompress(first.records_section(), 1 << 20).unwrap();
    let again = Compression::Snappy.compress(&raw).unwrap();
    assert_eq!(again[..8], XERIAL_MAGIC);
    assert_eq!(Compression::Snappy.decompress(&again, 1 << 20).unwrap(), raw);
}

#[test]
fn idempotent_producers_and_the_kraft_control_batch() {
    let Some(dir) = segments_dir() else { return };
    let bytes = std::fs::read(dir.join("Niloufar1171-LDI-POC/TestTopicPatient-0/00000000000000000000.log")).unwrap();
    let batches: Vec<DecodedBatch> = MixedBatches::new(&bytes).collect::<Result<_, _>>().unwrap();
    let pids: BTreeSet<i64> = batches.iter().map(|b| b.producer_id).collect();
    assert_eq!(pids, BTreeSet::from([1, 2, 3]));
    assert!(batches.iter().all(|b| b.producer_epoch >= 0 && b.base_sequence >= 0));

    let bytes = std::fs::read(dir.join("Niloufar1171-LDI-POC/__cluster_metadata-0/00000000000000000000.log")).unwrap();
    let batches: Vec<DecodedBatch> = MixedBatches::new(&bytes).collect::<Result<_, _>>().unwrap();
    let control: Vec<&DecodedBatch> = batches.iter().filter(|b| b.is_control).collect();
    assert_eq!(control.len(), 1);
    // KRaft control records have a key of version (i16) and type (i16).
    let key = control[0].records[0].key.as_deref().unwrap();
    assert_eq!(key.len(), 4, "control record key {key:02x?}");
}

const GREEK: [&str; 24] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi",
    "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega",
];

/// (magic, codec) of one part of a fixture name: `v1`, `v1c`, `v2b`, `v2bc`, ...
fn name_part(part: &str) -> (i8, Compression, bool) {
    let magic = match &part[..2] {
        "v1" => 1,
        "v2" => 2,
        other => panic!("unexpected name part {other}"),
    };
    let flags = &part[2..];
    assert!(flags.chars().all(|c| c == 'b' || c == 'c'), "name part {part}");
    let codec = if flags.contains('c') { Compression::Gzip } else { Compression::None };
    (magic, codec, flags.contains('b'))
}

#[test]
fn kafka_go_fixtures_decode_with_the_mixed_walker() {
    let Some(corpus) = common::corpus() else { return };
    let files = common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".records.bin");
    assert_eq!(files.len(), 11);
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().trim_end_matches(".records.bin").to_string();
        let bytes = std::fs::read(&path).unwrap();
        // Default options verify every CRC: CRC-32C of v2 batches, CRC-32 of legacy wrappers and
        // of every inner message.
        let mut walk = MixedBatches::new(&bytes);
        let batches: Vec<DecodedBatch> =
            walk.by_ref().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!walk.partial_tail(), "{name}");
        assert_eq!(walk.position(), bytes.len(), "{name}");
        let records: Vec<&DecodedRecord> = batches.iter().flat_map(|b| &b.records).collect();

        // Offsets are 0..n, timestamps real and non-decreasing (2021, CreateTime).
        assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), (0..records.len() as i64).collect::<Vec<_>>());
        assert!(records.iter().all(|r| r.timestamp > 1_600_000_000_000), "{name}");
        assert!(records.windows(2).all(|w| w[0].timestamp <= w[1].timestamp), "{name}");

        // Keys: Greek letters, in pairs (alpha, beta), (gamma, delta), ...; a producer session may
        // repeat the previous pair, never skip one. Values: {"count":0,"filler":"aaaaaaaaaa"} with
        // the letter of the key's position in the alphabet.
        let idx: Vec<usize> = records
            .iter()
            .map(|r| {
                let key = std::str::from_utf8(r.key.as_deref().unwrap()).unwrap();
                GREEK.iter().position(|g| *g == key).unwrap_or_else(|| panic!("{name}: key {key}"))
            })
            .collect();
        assert_eq!(idx.len() % 2, 0, "{name}");
        let mut pair = 0;
        for (i, p) in idx.chunks(2).enumerate() {
            assert_eq!(p[0] % 2, 0, "{name}: pair {i}");
            assert_eq!(p[1], p[0] + 1, "{name}: pair {i}");
            assert!(p[0] / 2 == pair || p[0] / 2 == pair + 1 || (i == 0 && p[0] == 0), "{name}: pair {i} skips");
            pair = p[0] / 2;
        }
        let mut first_seen = Vec::new();
        for &i in &idx {
            if !first_seen.contains(&i) {
                first_seen.push(i);
            }
        }
        assert_eq!(first_seen, (0..first_seen.len()).collect::<Vec<_>>(), "{name}: alpha, beta, gamma, ... in order");
        for (r, &i) in records.iter().zip(&idx) {
            let filler = String::from_utf8(vec![b'a' + i as u8; 10]).unwrap();
            let expected = format!(r#"{{"count":0,"filler":"{filler}"}}"#);
            assert_eq!(r.value.as_deref(), Some(expected.as_bytes()), "{name}: offset {}", r.offset);
        }

        // The name lists the (magic, codec) kinds present, first and last in place; a `b` part
        // has a multi-record batch of that kind (except uncompressed magic 1, which cannot).
        let parts: Vec<(i8, Compression, bool)> = name.split('-').map(name_part).collect();
        let kinds: Vec<(i8, Compression)> = batches.iter().map(|b| (b.magic, b.compression)).collect();
        let named: BTreeSet<(i8, u8)> = parts.iter().map(|&(m, c, _)| (m, c.id())).collect();
        let seen: BTreeSet<(i8, u8)> = kinds.iter().map(|&(m, c)| (m, c.id())).collect();
        assert_eq!(seen, named, "{name}: kinds of entries");
        assert_eq!(kinds.first().copied(), parts.first().map(|&(m, c, _)| (m, c)), "{name}: first entry");
        assert_eq!(kinds.last().copied(), parts.last().map(|&(m, c, _)| (m, c)), "{name}: last entry");
        for &(m, c, multi) in &parts {
            if multi && (m == 2 || c != Compression::None) {
                assert!(
                    batches.iter().any(|b| b.magic == m && b.compression == c && b.records.len() > 1),
                    "{name}: no multi-record v{m} {c} batch"
                );
            }
        }
        // Timestamp types: CreateTime everywhere (no magic 0 here); no headers in legacy records.
        for b in &batches {
            for r in &b.records {
                assert_eq!(r.timestamp_type, fetchbench::log::batch::mixed::TimestampType::CreateTime);
                if b.magic < 2 {
                    assert!(r.headers.is_empty());
                }
            }
        }
    }
}

#[test]
fn kafka_go_fixture_legacy_crc_damage_is_caught() {
    let Some(corpus) = common::corpus() else { return };
    let bytes = std::fs::read(corpus.join("protocol/kafka-go-fixtures/v2bc-v1-v1c.records.bin")).unwrap();
    let batches: Vec<DecodedBatch> = MixedBatches::new(&bytes).collect::<Result<_, _>>().unwrap();
    // Flip the last byte of each legacy entry (inside its value): its CRC-32 no longer verifies.
    for b in batches.iter().filter(|b| b.magic == 1) {
        let mut bad = bytes.clone();
        bad[b.position + b.size - 1] ^= 0x10;
        let err = MixedBatches::new(&bad).collect::<Result<Vec<_>, _>>().unwrap_err();
        assert!(
            matches!(
                err,
                fetchbench::log::batch::BatchError::CrcMismatch { .. }
                    | fetchbench::log::batch::BatchError::Compression { .. }
            ),
            "entry at {}: {err}",
            b.position
        );
    }
}

/// A few real v2 batches: uncompressed, snappy (xerial), idempotent producer.
fn sample_batches() -> Option<&'static [Vec<u8>]> {
    static BATCHES: OnceLock<Option<Vec<Vec<u8>>>> = OnceLock::new();
    BATCHES
        .get_or_init(|| {
            let dir = segments_dir()?;
            let files = [
                "Bheem6005-kafka/kafka-logs/cities-0/00000000000000000000.log",
                "seanorth-kafka-server/kafka-logs/some-topic-0/00000000000000000000.log",
                "Niloufar1171-LDI-POC/TestTopicPatient-0/00000000000000000000.log",
                "William0423-kafka/kafka-logs/debug_topic-0/00000000000000000000.log",
            ];
            Some(
                files
                    .iter()
                    .map(|f| {
                        let bytes = std::fs::read(dir.join(f)).unwrap();
                        RecordBatch::parse(&bytes).unwrap().as_bytes().to_vec()
                    })
                    .collect(),
            )
        })
        .as_deref()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// A flipped bit anywhere in a real v2 batch is detected: by the CRC-32C (bytes 17..end: CRC
    /// field, attributes, header fields, records), by the length or magic checks, or -- for the
    /// two fields no CRC covers, base offset (0..8) and partition leader epoch (12..16) -- it is
    /// visible in the decoded batch.
    #[test]
    fn a_flipped_bit_in_a_v2_batch_is_detected(which in 0usize..4, pos in proptest::num::usize::ANY, bit in 0u8..8) {
        let Some(batches) = sample_batches() else { return Ok(()) };
        let good = &batches[which];
        let pos = pos % good.len();
        let mut bad = good.clone();
        bad[pos] ^= 1 << bit;
        let original = decode_entry(good, 0, DecodeOptions::default()).unwrap();
        match decode_entry(&bad, 0, DecodeOptions::default()) {
            Err(_) => proptest::prop_assert!(!(0..8).contains(&pos) && !(12..16).contains(&pos), "pos {}", pos),
            Ok(decoded) => {
                proptest::prop_assert!((0..8).contains(&pos) || (12..16).contains(&pos), "undetected flip at {}", pos);
                if pos < 8 {
                    proptest::prop_assert_ne!(decoded.base_offset, original.base_offset);
                } else {
                    proptest::prop_assert_ne!(decoded.partition_leader_epoch, original.partition_leader_epoch);
                }
            }
        }
    }
}

/// Records per batch kind across all fixtures, to show the walker met every kind (a guard
/// against a fixture set that silently stops exercising compressed legacy wrappers).
#[test]
fn kafka_go_fixtures_cover_every_entry_kind() {
    let Some(corpus) = common::corpus() else { return };
    let mut kinds: BTreeMap<(i8, &'static str), usize> = BTreeMap::new();
    for path in common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".records.bin") {
        let bytes = std::fs::read(&path).unwrap();
        for b in MixedBatches::new(&bytes) {
            let b = b.unwrap();
            *kinds.entry((b.magic, b.compression.name())).or_default() += b.records.len();
        }
    }
    let keys: Vec<(i8, &str)> = kinds.keys().copied().collect();
    assert_eq!(keys, vec![(1, "gzip"), (1, "none"), (2, "gzip"), (2, "none")]);
    assert!(kinds[&(1, "gzip")] >= 10, "{kinds:?}");
}

/// Every v2 batch of the corpus, each as its own bytes: the segments' (uncompressed and
/// xerial-snappy) and the kafka-go fixtures' (uncompressed and gzip).
fn every_v2_batch(corpus: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for path in common::files_with_suffix(&corpus.join("kafka-segments"), ".log") {
        let bytes = std::fs::read(&path).unwrap();
        for b in BatchBoundaries::new(&bytes) {
            out.push(bytes[b.position..b.position + b.size].to_vec());
        }
    }
    for path in common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".records.bin") {
        let bytes = std::fs::read(&path).unwrap();
        for b in MixedBatches::new(&bytes) {
            let b = b.unwrap();
            if b.magic == 2 {
                out.push(bytes[b.position..b.position + b.size].to_vec());
            }
        }
    }
    out
}

/// Records and the bytes after them, or the error (Debug), of the whole-buffer walk.
fn whole_walk(batch: &RecordBatch<'_>) -> Result<(Vec<PartialRecord>, usize), String> {
    let run = || -> Result<_, fetchbench::log::batch::BatchError> {
        let records = batch.records()?;
        let (mut out, mut consumed) = (Vec::new(), 0);
        for r in records.iter() {
            let r = r?;
            consumed += r.size_in_bytes;
            out.push(PartialRecord::from(&r));
        }
        Ok((out, records.data().len() - consumed))
    };
    run().map_err(|e| format!("{e:?}"))
}

/// The same from the streaming walk the produce validation uses.
fn streaming_walk(batch: &RecordBatch<'_>) -> Result<(Vec<PartialRecord>, usize), String> {
    let mut out = Vec::new();
    RecordStream::new(batch, DEFAULT_MAX_UNCOMPRESSED)
        .and_then(|s| {
            s.walk(|_, r| {
                out.push(*r);
                Ok(())
            })
        })
        .map(|left| (out, left))
        .map_err(|e| format!("{e:?}"))
}

/// The streaming record walk (produce validation's, bounded memory) and the whole-buffer walk
/// agree on every real v2 batch: the same records, nothing left over; and on every cut and every
/// flipped byte of the compressed ones' records sections, the same verdict and error.
#[test]
fn streaming_record_walk_agrees_with_the_whole_buffer_walk_on_real_batches() {
    let Some(corpus) = common::corpus() else { return };
    let batches = every_v2_batch(&corpus);
    let mut codecs: BTreeMap<&'static str, usize> = BTreeMap::new();
    for bytes in &batches {
        let batch = RecordBatch::parse(bytes).unwrap();
        let codec = batch.attributes().compression().unwrap();
        *codecs.entry(codec.name()).or_default() += 1;
        let whole = whole_walk(&batch);
        let (records, left) = whole.clone().unwrap();
        assert_eq!((records.len(), left), (batch.header().records_count as usize, 0));
        assert_eq!(streaming_walk(&batch), whole, "batch at offset {}", batch.base_offset());
        if codec == Compression::None {
            continue;
        }
        let section = fetchbench::log::batch::HEADER_SIZE;
        for cut in section..bytes.len() {
            let mut cut_bytes = bytes[..cut].to_vec();
            let length = (cut - fetchbench::log::batch::LOG_OVERHEAD) as i32;
            cut_bytes[8..12].copy_from_slice(&length.to_be_bytes());
            let batch = RecordBatch::parse(&cut_bytes).unwrap();
            assert_eq!(streaming_walk(&batch), whole_walk(&batch), "{codec} cut at {cut}");
        }
        for pos in section..bytes.len() {
            for bit in [0x01u8, 0x20, 0x80] {
                let mut bad = bytes.clone();
                bad[pos] ^= bit;
                let batch = RecordBatch::parse(&bad).unwrap();
                assert_eq!(streaming_walk(&batch), whole_walk(&batch), "{codec} flip {bit:#x} at {pos}");
            }
        }
    }
    assert!(codecs["none"] > 4000 && codecs["snappy"] >= 9 && codecs["gzip"] >= 5, "{codecs:?}");
}
