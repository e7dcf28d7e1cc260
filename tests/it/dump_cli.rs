//! `fetchbench log dump` end to end: the real corpus verifies with the counts its README lists,
//! and a copy with one flipped byte fails naming the file and position.

use std::path::Path;
use std::process::Command;

use fetchbench::log::dump::{dump_paths, DumpOptions};
use fetchbench::protocol::consumer_offsets::dump_record;

use crate::common;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fetchbench"))
}

/// The corpus README's table: relative path -> (bytes, batches, records, first offset, last offset).
fn readme_table(corpus: &Path) -> Vec<(String, u64, u64, u64, i64, i64)> {
    let text = std::fs::read_to_string(corpus.join("README.md")).unwrap();
    let mut rows = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 8 || !cells[1].ends_with(".log`") {
            continue;
        }
        let path = cells[1].trim_matches('`').to_string();
        let (first, last) = cells[5].split_once("..").unwrap();
        rows.push((
            path,
            cells[2].parse().unwrap(),
            cells[3].parse().unwrap(),
            cells[4].parse().unwrap(),
            first.parse().unwrap(),
            last.parse().unwrap(),
        ));
    }
    rows
}

#[test]
fn dump_verify_over_the_corpus_matches_its_readme() {
    let Some(corpus) = common::corpus() else { return };
    let segs = corpus.join("kafka-segments");
    let mut out = Vec::new();
    // With the CLI's decoder, so the corpus's __consumer_offsets records are checked too.
    let opts = DumpOptions { verify: true, offsets_decoder: Some(dump_record), ..Default::default() };
    let summary = dump_paths(std::slice::from_ref(&segs), &opts, &mut out).unwrap();
    assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    let table = readme_table(&corpus);
    assert_eq!(table.len(), 18, "the README lists 18 segments");
    assert_eq!(summary.per_log.len(), table.len(), "every .log in the corpus is in the README table");
    for (rel, bytes, batches, records, first, last) in table {
        let path = segs.join(&rel);
        let (_, got) = summary.per_log.iter().find(|(p, _)| p == &path).unwrap_or_else(|| panic!("{rel} not dumped"));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes, "{rel}");
        assert_eq!(
            (got.batches, got.records, got.first_offset, got.last_offset),
            (batches, records, first, last),
            "{rel}"
        );
    }
    // The CLI agrees and exits 0.
    let st = bin().args(["log", "dump", "--verify"]).arg(&segs).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    assert!(String::from_utf8_lossy(&st.stdout).contains("problems=0"));
}

#[test]
fn dump_names_the_position_of_a_flipped_byte() {
    let Some(corpus) = common::corpus() else { return };
    let src = corpus.join("kafka-segments/William0423-kafka/kafka-logs/debug_topic-0");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("debug_topic-0");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["00000000000000000000.log", "00000000000000000000.timeindex"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let log = dir.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&log).unwrap();
    // Walk to the second batch and flip a byte inside its records.
    let first_len = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize + 12;
    bytes[first_len + 70] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    let st = bin().args(["log", "dump", "--verify"]).arg(&dir).output().unwrap();
    assert_eq!(st.status.code(), Some(1), "a flipped byte must fail the dump");
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains(&format!("at position {first_len}")), "names the batch position: {err}");
    assert!(err.contains("CRC mismatch"), "{err}");
    assert!(err.contains("00000000000000000000.log"), "{err}");
    // An index entry pointing past the end of the log is named too.
    let mut ts = std::fs::read(dir.join("00000000000000000000.timeindex")).unwrap();
    ts[8..12].copy_from_slice(&1000u32.to_be_bytes());
    std::fs::write(dir.join("00000000000000000000.timeindex"), &ts).unwrap();
    let st = bin().args(["log", "dump", "--verify"]).arg(dir.join("00000000000000000000.timeindex")).output().unwrap();
    assert_eq!(st.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&st.stderr).contains("timeindex at position 0"),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn dump_decodes_consumer_offsets_records() {
    let Some(corpus) = common::corpus() else { return };
    let f = corpus.join("kafka-segments/KAIPASUBHASH-kafka-logs/__consumer_offsets-26/00000000000000000000.log");
    let st = bin().args(["log", "dump", "--print-records"]).arg(&f).output().unwrap();
    assert!(st.status.success());
    let out = String::from_utf8_lossy(&st.stdout);
    assert!(out.contains("offset_commit::") || out.contains("group_metadata::"), "{out}");
}

/// A batch whose header makes its offsets impossible (base offset `i64::MAX`: the last offset
/// wrapped, `log dump` printed `lastOffset: -9223372036854775807`-like numbers, and a build with
/// overflow checks panicked) is a finding naming the file and position; the batches around it
/// are still dumped.
#[test]
fn dump_reports_a_header_whose_offsets_overflow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("crafted-0");
    std::fs::create_dir_all(&dir).unwrap();
    let good = crate::broker::batch(3);
    let mut bad = crate::broker::batch(2);
    // The base offset is outside the CRC: the crafted batch still passes its CRC check.
    fetchbench::log::batch::builder::set_base_offset(&mut bad, i64::MAX);
    let mut after = crate::broker::batch(1);
    fetchbench::log::batch::builder::set_base_offset(&mut after, 3);
    let mut bytes = good.clone();
    bytes.extend_from_slice(&bad);
    bytes.extend_from_slice(&after);
    let log = dir.join("00000000000000000000.log");
    std::fs::write(&log, &bytes).unwrap();
    let position = good.len();

    let st = bin().args(["log", "dump", "--verify"]).arg(&log).output().unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "{err}");
    assert!(err.contains("00000000000000000000.log"), "{err}");
    assert!(err.contains(&format!("at position {position}")), "{err}");
    assert!(err.contains("impossible offsets"), "{err}");
    assert_eq!(err.matches("invalid:").count(), 1, "only the crafted batch is a finding: {err}");

    let st = bin().args(["log", "dump"]).arg(&log).output().unwrap();
    assert_eq!(st.status.code(), Some(1));
    let out = String::from_utf8_lossy(&st.stdout);
    assert_eq!(out.matches("baseOffset:").count(), 2, "the two valid batches are dumped: {out}");
    assert!(out.contains("baseOffset: 3 lastOffset: 3 "), "{out}");
    assert!(out.contains(&format!("position: {position} size: {} isvalid: false", bad.len())), "{out}");
    assert!(!out.contains("lastOffset: -"), "no wrapped number: {out}");
}

/// A partition directory `name` under `root` with three segments of one 4-record batch each
/// (offsets 0..=3, 4..=7, 8..=11); the middle segment's files are then deleted.
fn holed_partition(root: &Path, name: &str) -> std::path::PathBuf {
    use fetchbench::log::batch::{BatchBuilder, Compression};
    use fetchbench::log::partition::{OpenOptions, PartitionLog};
    let dir = root.join(name);
    let mut config = fetchbench::log::LogConfig::default();
    config.set("segment.bytes", "100").unwrap();
    let (mut log, _) = PartitionLog::open(&dir, config, OpenOptions::default()).unwrap();
    for i in 0..3 {
        let mut b = BatchBuilder::new(0, Compression::None);
        for j in 0..4 {
            b.append(1_700_000_000_000 + i * 4 + j, Some(b"k"), Some(b"v"), &[]);
        }
        log.append(&b.build().unwrap(), 0).unwrap();
    }
    assert_eq!(log.segments().len(), 3);
    log.close().unwrap();
    for suffix in ["log", "index", "timeindex"] {
        let _ = std::fs::remove_file(dir.join(format!("00000000000000000004.{suffix}")));
    }
    dir
}

#[test]
fn dump_verify_finds_a_lost_middle_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = holed_partition(tmp.path(), "orders-0");
    let st = bin().args(["log", "dump", "--verify"]).arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "a hole must fail --verify: {err}");
    assert!(err.contains("offsets 4..=7 are missing"), "{err}");
    assert!(
        err.contains("00000000000000000000.log") && err.contains("00000000000000000008.log"),
        "names both files: {err}"
    );
    assert!(err.contains("--compacted orders"), "says what to do for a compacted topic: {err}");
    // The operator says the topic is compacted: the gap is expected.
    let st = bin().args(["log", "dump", "--verify", "--compacted", "orders"]).arg(&dir).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    // Kafka's internal topics are compacted.
    let internal = holed_partition(tmp.path(), "__transaction_state-3");
    let st = bin().args(["log", "dump", "--verify"]).arg(&internal).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let st = bin().args(["log", "dump"]).arg(&internal).output().unwrap();
    assert!(String::from_utf8_lossy(&st.stdout).contains("Note: offsets 4..=7"), "printed as a note");
}

/// The last batch of a base-0 segment re-based near `i64::MAX` (its CRC still holds: the base
/// offset is outside it) has offsets that do not fit the segment's 32-bit relative offsets:
/// recovery cuts it (Kafka's `LogSegment.canConvertToRelativeOffset`), so `--verify` names it
/// with file and position.
#[test]
fn dump_verify_reports_a_batch_whose_offsets_do_not_fit_its_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("rebased-0");
    std::fs::create_dir_all(&dir).unwrap();
    let good = crate::broker::batch(3);
    let mut bad = crate::broker::batch(2);
    fetchbench::log::batch::builder::set_base_offset(&mut bad, 9_223_372_036_854_775_804);
    let mut bytes = good.clone();
    bytes.extend_from_slice(&bad);
    let log = dir.join("00000000000000000000.log");
    std::fs::write(&log, &bytes).unwrap();
    let st = bin().args(["log", "dump", "--verify"]).arg(&log).output().unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(1), "{err}");
    assert!(err.contains("00000000000000000000.log"), "{err}");
    assert!(err.contains(&format!("at position {}", good.len())), "{err}");
    assert!(err.contains("do not fit this segment"), "{err}");
    // A segment whose name puts the same batch in range is fine.
    let ok = dir.join("09223372036854775000.log");
    std::fs::write(&ok, &bad).unwrap();
    let st = bin().args(["log", "dump", "--verify"]).arg(&ok).output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
}
