//! The real `.index` and `.timeindex` files Kafka brokers wrote (corpus/kafka-segments), opened
//! read-only: their entries equal the lists in corpus/README.md, they pass the sanity check, and
//! they agree with the batches of their `.log` the way Kafka's `LogSegment.append` builds them.

use std::fs;
use std::path::{Path, PathBuf};

use fetchbench::log::batch::{BatchBoundaries, BatchHeader};
use fetchbench::log::offset_index::{IndexEntry, OffsetIndex};
use fetchbench::log::time_index::{TimeIndex, TimestampOffset};

use crate::common;

/// Every `.index` in the corpus with its entries as (absolute offset, position): corpus/README.md
/// lists the first four and the last of the 14 entries of the first file; the middle ones are
/// read from the file and checked against the `.log` below.
const OFFSET_INDEXES: &[(&str, &[(i64, u32)])] = &[
    (
        "NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000000.index",
        &[
            (60, 4388),
            (120, 8808),
            (180, 13228),
            (240, 17648),
            (300, 22068),
            (360, 26488),
            (415, 30876),
            (475, 35296),
            (535, 39716),
            (595, 44136),
            (655, 48556),
            (715, 52976),
            (770, 57364),
            (830, 61784),
        ],
    ),
    ("Niloufar1171-LDI-POC/__consumer_offsets-6/00000000000000000000.index", &[(3, 4730), (7, 9571)]),
];

/// Every `.timeindex` in the corpus with its entries as (timestamp ms, absolute offset).
///
/// corpus/README.md prints `(1722852681492, 6)` for `00000000000000000862.timeindex`: 6 is the
/// stored relative offset; the absolute offset is 862 + 6 = 868, the last offset of the segment's
/// only batch (asserted against the `.log` in `time_index_entries_follow_kafkas_rule`).
const TIME_INDEXES: &[(&str, &[(i64, i64)])] = &[
    (
        "NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000000.timeindex",
        &[
            (1721325721277, 60),
            (1721325771345, 120),
            (1721325821437, 180),
            (1721325871499, 240),
            (1721325921548, 300),
            (1721325971625, 360),
            (1721326062160, 415),
            (1721326112237, 475),
            (1721326162304, 535),
            (1721326212395, 595),
            (1721326262448, 655),
            (1721326312537, 715),
            (1721326402907, 770),
            (1721326452990, 830),
            (1721659255114, 861),
        ],
    ),
    (
        "NikhilDighe9975-kafka_setup/kafka-logs/__consumer_offsets-12/00000000000000000862.timeindex",
        &[(1722852681492, 868)],
    ),
    ("NikhilDighe9975-kafka_setup/kafka-logs/nikhilDemo-0/00000000000000000000.timeindex", &[(1722857166514, 2)]),
    (
        "Niloufar1171-LDI-POC/__consumer_offsets-6/00000000000000000000.timeindex",
        &[(1769791783399, 3), (1769792518093, 7), (1769793578176, 12)],
    ),
    (
        "William0423-kafka/kafka-logs/debug_topic-0/00000000000000000000.timeindex",
        &[(1534299423772, 29), (1534300904976, 39)],
    ),
    ("sagarrao1-kafka/MultiNode/kafka-logs-2/my_other_topic-2/00000000000000000000.timeindex", &[(1688872222233, 43)]),
];

/// One v2 batch of a `.log`: (position, base offset, last offset, max timestamp).
#[derive(Clone, Copy, Debug)]
struct BatchInfo {
    position: u32,
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
}

fn segments_root() -> Option<PathBuf> {
    common::corpus().map(|c| c.join("kafka-segments"))
}

/// The base offset in a Kafka segment file name (`00000000000000000862.timeindex` -> 862).
fn base_offset_of(path: &Path) -> i64 {
    let name = path.file_name().unwrap().to_str().unwrap();
    name[..20].parse().unwrap_or_else(|e| panic!("{}: not a segment file name: {e}", path.display()))
}

/// The corpus files ending in `suffix`, relative to `root`.
fn relative_files(root: &Path, suffix: &str) -> Vec<String> {
    common::files_with_suffix(root, suffix)
        .into_iter()
        .map(|p| p.strip_prefix(root).unwrap().to_str().unwrap().to_string())
        .collect()
}

fn batches_of(log: &Path) -> Vec<BatchInfo> {
    let bytes = fs::read(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let mut walk = BatchBoundaries::new(&bytes);
    let out: Vec<BatchInfo> = walk
        .by_ref()
        .map(|b| {
            let h = BatchHeader::parse(&bytes[b.position..]).unwrap();
            BatchInfo {
                position: b.position as u32,
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
            }
        })
        .collect();
    assert!(!walk.partial_tail(), "{}: partial batch at the end", log.display());
    assert!(!out.is_empty(), "{}: no batches", log.display());
    out
}

fn log_of(index: &Path) -> PathBuf {
    index.with_extension("log")
}

#[test]
fn every_offset_index_matches_the_readme() {
    let Some(root) = segments_root() else { return };
    let mut expected_files: Vec<String> = OFFSET_INDEXES.iter().map(|(f, _)| f.to_string()).collect();
    expected_files.sort();
    assert_eq!(relative_files(&root, ".index"), expected_files, "the corpus' .index files");

    for (file, expected) in OFFSET_INDEXES {
        let path = root.join(file);
        let base = base_offset_of(&path);
        let idx = OffsetIndex::open_read_only(&path, base).unwrap();
        let expected: Vec<IndexEntry> =
            expected.iter().map(|&(offset, position)| IndexEntry { offset, position }).collect();
        assert_eq!(idx.iter().collect::<Vec<_>>(), expected, "{file}");
        assert_eq!(idx.entries(), expected.len());
        assert_eq!(idx.length(), fs::metadata(&path).unwrap().len());
        assert_eq!(idx.size_in_bytes() as u64, idx.length(), "{file}: trimmed by Kafka at roll");
        assert_eq!(idx.last_offset(), expected.last().unwrap().offset);
        assert!(idx.is_full() && !idx.is_writable());
        idx.sanity_check().unwrap_or_else(|e| panic!("{file}: {e}"));

        // lookups: before the first entry, on each entry, and between entries
        assert_eq!(idx.lookup(base), IndexEntry { offset: base, position: 0 });
        assert_eq!(idx.lookup(expected[0].offset - 1), IndexEntry { offset: base, position: 0 });
        for (n, e) in expected.iter().enumerate() {
            assert_eq!(idx.lookup(e.offset), *e, "{file}");
            let upto = expected.get(n + 1).map_or(e.offset + 1000, |next| next.offset - 1);
            assert_eq!(idx.lookup(upto), *e, "{file}");
        }
    }
}

#[test]
fn every_time_index_matches_the_readme() {
    let Some(root) = segments_root() else { return };
    let mut expected_files: Vec<String> = TIME_INDEXES.iter().map(|(f, _)| f.to_string()).collect();
    expected_files.sort();
    assert_eq!(relative_files(&root, ".timeindex"), expected_files, "the corpus' .timeindex files");

    for (file, expected) in TIME_INDEXES {
        let path = root.join(file);
        let base = base_offset_of(&path);
        let idx = TimeIndex::open_read_only(&path, base).unwrap();
        let expected: Vec<TimestampOffset> =
            expected.iter().map(|&(timestamp, offset)| TimestampOffset { timestamp, offset }).collect();
        assert_eq!(idx.iter().collect::<Vec<_>>(), expected, "{file}");
        assert_eq!(idx.last_entry(), *expected.last().unwrap());
        assert_eq!(idx.size_in_bytes() as u64, fs::metadata(&path).unwrap().len(), "{file}: trimmed by Kafka");
        assert!(idx.is_full());
        idx.sanity_check().unwrap_or_else(|e| panic!("{file}: {e}"));

        assert_eq!(idx.lookup(expected[0].timestamp - 1), TimestampOffset { timestamp: -1, offset: base });
        for (n, e) in expected.iter().enumerate() {
            assert_eq!(idx.lookup(e.timestamp), *e, "{file}");
            let upto = expected.get(n + 1).map_or(i64::MAX, |next| next.timestamp - 1);
            assert_eq!(idx.lookup(upto), *e, "{file}");
        }
    }
}

/// Kafka's `LogSegment.append`: an offset-index entry is (last offset of an appended batch, the
/// position where that batch starts), and more than `index.interval.bytes` (4096) bytes separate
/// an entry from the previous one (or from the start of the segment).
#[test]
fn offset_index_entries_point_at_batches() {
    let Some(root) = segments_root() else { return };
    for (file, _) in OFFSET_INDEXES {
        let path = root.join(file);
        let idx = OffsetIndex::open_read_only(&path, base_offset_of(&path)).unwrap();
        let batches = batches_of(&log_of(&path));
        let mut previous_position = 0u32;
        for e in idx.iter() {
            let batch = batches
                .iter()
                .find(|b| b.position == e.position)
                .unwrap_or_else(|| panic!("{file}: entry {e:?} is not at a batch start"));
            assert_eq!(batch.last_offset, e.offset, "{file}: entry {e:?}");
            assert!(e.position - previous_position > 4096, "{file}: entry {e:?} closer than index.interval.bytes");
            previous_position = e.position;
        }
        // every batch is found through the index: the entry looked up for its last offset lies
        // at or before it, so a forward scan from there reaches it
        for b in &batches {
            let found = idx.lookup(b.last_offset);
            assert!(found.position <= b.position && found.offset <= b.last_offset, "{file}: {b:?} -> {found:?}");
            let next_entry = idx.iter().find(|e| e.offset > b.last_offset);
            assert!(next_entry.is_none_or(|n| n.position > b.position), "{file}: {b:?} skipped");
        }
    }
}

/// Kafka's `TimeIndex` contract: an entry (T, O) means T is the largest timestamp up to offset O;
/// O lies in a batch whose max timestamp is T (its last offset in Kafka 3.x, the offset of the
/// record with the max timestamp in older brokers, as in the sagarrao1 segment).
#[test]
fn time_index_entries_follow_kafkas_rule() {
    let Some(root) = segments_root() else { return };
    for (file, _) in TIME_INDEXES {
        let path = root.join(file);
        let idx = TimeIndex::open_read_only(&path, base_offset_of(&path)).unwrap();
        let batches = batches_of(&log_of(&path));
        for e in idx.iter() {
            let batch = batches
                .iter()
                .find(|b| b.base_offset <= e.offset && e.offset <= b.last_offset)
                .unwrap_or_else(|| panic!("{file}: entry {e:?} is in no batch"));
            assert_eq!(batch.max_timestamp, e.timestamp, "{file}: entry {e:?}");
            let max_so_far = batches.iter().filter(|b| b.base_offset <= e.offset).map(|b| b.max_timestamp).max();
            assert_eq!(max_so_far, Some(e.timestamp), "{file}: entry {e:?}");
        }
        // the entry appended at roll: the segment's max timestamp (every corpus time index ends
        // with it; the last batch holds it)
        let max = batches.iter().map(|b| b.max_timestamp).max().unwrap();
        assert_eq!(idx.last_entry().timestamp, max, "{file}");
    }
}
