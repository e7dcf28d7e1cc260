//! Scratch review tests.
#![allow(dead_code, unused_imports)]
use std::fs;
use std::path::{Path, PathBuf};

use fetchbench::log::batch::record::encode_record;
use fetchbench::log::batch::{BatchBoundaries, BatchBuilder, BatchHeader, Compression, RecordBatch};
use fetchbench::log::partition::OpenOptions;
use fetchbench::log::{cleaner, LogConfig, LogError, PartitionLog};

use crate::log_engine::{batch, config, open};

fn recrc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A raw v2 batch from explicit (delta, key, value) records and a forced last_offset_delta.
fn raw_batch(records: &[(i32, &[u8], Option<&[u8]>)], last_offset_delta: i32, attrs: i16, ts: i64) -> Vec<u8> {
    let mut body = Vec::new();
    for (d, k, v) in records {
        encode_record(&mut body, *d, 0, Some(k), *v, &[]);
    }
    let mut out = vec![0u8; 61];
    out.extend_from_slice(&body);
    let h = BatchHeader {
        base_offset: 0,
        batch_length: (out.len() - 12) as i32,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: fetchbench::log::batch::Attributes(attrs),
        last_offset_delta,
        base_timestamp: ts,
        max_timestamp: ts,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: records.len() as i32,
    };
    h.encode(&mut out);
    recrc(&mut out);
    out
}

#[test]
fn r01_negative_last_offset_delta_moves_leo_backwards() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    for _ in 0..5 {
        log.append(&batch(2, 10, 1000, Compression::None), 0).unwrap();
    }
    assert_eq!(log.log_end_offset(), 10);
    // A CRC-valid batch claiming last_offset_delta = -8: Kafka's LogValidator refuses it
    // ("Batch has an invalid offset range"), fetchbench accepts it.
    let evil = raw_batch(&[(0, b"x", Some(b"y"))], -8, 0, 1000);
    let r = log.append(&evil, 0);
    eprintln!("append result: {r:?}; leo now {}", log.log_end_offset());
    let leo = log.log_end_offset();
    let next = log.append(&batch(1, 10, 1000, Compression::None), 0);
    eprintln!("next append: {next:?}; leo {}", log.log_end_offset());
    assert!(r.is_err(), "negative last_offset_delta accepted; LEO went from 10 to {leo}");
}

#[test]
fn r02_record_count_mismatch_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    // 3 records, last_offset_delta = 0: Kafka refuses (count != lastOffset-baseOffset+1).
    let evil = raw_batch(&[(0, b"a", Some(b"1")), (1, b"b", Some(b"2")), (2, b"c", Some(b"3"))], 0, 0, 1000);
    let r = log.append(&evil, 0);
    eprintln!("append result: {r:?}; leo {}", log.log_end_offset());
    assert!(r.is_err(), "record count 3 with last_offset_delta 0 accepted");
}

#[test]
fn r03_compaction_panics_on_non_increasing_record_deltas() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("cleanup.policy", "compact")]), true);
    // Record deltas 0, 0 (CRC-valid; accepted by append since records are not validated).
    let evil = raw_batch(&[(1, b"b", Some(b"1")), (0, b"c", Some(b"2")), (2, b"a", Some(b"3")), (3, b"a", Some(b"4"))], 3, 0, 1000);
    log.append(&evil, 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(1, 10, 1000, Compression::None), 0).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cleaner::compact(&mut log, 10_000)));
    assert!(r.is_ok(), "compaction panicked on a batch that append accepted");
}

#[test]
fn r04_compaction_drops_log_append_time() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("cleanup.policy", "compact")]), true);
    // LogAppendTime batch (attr bit 3), two records same key -> rewritten by compaction.
    let mut b = raw_batch(&[(0, b"k", Some(b"1")), (1, b"k", Some(b"2"))], 1, 0x08, 5000);
    // max timestamp = append time 9000
    b[35..43].copy_from_slice(&9000i64.to_be_bytes());
    recrc(&mut b);
    log.append(&b, 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(1, 10, 1000, Compression::None), 0).unwrap();
    cleaner::compact(&mut log, 10_000).unwrap();
    let s = log.read(0, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let batch = RecordBatch::parse(&data).unwrap();
    eprintln!("after compaction attrs {:?} max_ts {}", batch.header().attributes, batch.header().max_timestamp);
    assert!(batch.header().attributes.is_log_append_time(), "LogAppendTime lost by compaction");
}

#[test]
fn r05_clean_open_serves_flipped_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    for _ in 0..5 {
        log.append(&batch(2, 100, 1000, Compression::None), 0).unwrap();
    }
    log.close().unwrap();
    let p = dir.join("00000000000000000000.log");
    let mut bytes = fs::read(&p).unwrap();
    bytes[100] ^= 1;
    fs::write(&p, &bytes).unwrap();
    let log = open(&dir, LogConfig::default(), true);
    let s = log.read(0, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let mut bad = 0;
    for b in BatchBoundaries::new(&data) {
        if !RecordBatch::parse(&data[b.position..b.position + b.size]).unwrap().is_crc_valid() {
            bad += 1;
        }
    }
    assert_eq!(bad, 0, "a batch with a bad CRC was served after a clean-shutdown open");
}

#[test]
fn r06_read_only_open_serves_flipped_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    for _ in 0..5 {
        log.append(&batch(2, 100, 1000, Compression::None), 0).unwrap();
    }
    log.close().unwrap();
    let p = dir.join("00000000000000000000.log");
    let mut bytes = fs::read(&p).unwrap();
    bytes[100] ^= 1;
    fs::write(&p, &bytes).unwrap();
    let (log, _) =
        PartitionLog::open(&dir, LogConfig::default(), OpenOptions { read_only: true, ..Default::default() }).unwrap();
    let s = log.read(0, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let bad = BatchBoundaries::new(&data)
        .filter(|b| !RecordBatch::parse(&data[b.position..b.position + b.size]).unwrap().is_crc_valid())
        .count();
    assert_eq!(bad, 0, "read-only open served a batch with a bad CRC");
}

/// Builds a clean-shutdown log with many index entries; returns dir and batch (position, last offset).
fn indexed_log(tmp: &tempfile::TempDir) -> (PathBuf, Vec<(u32, i64, i64)>) {
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("index.interval.bytes", "100")]), true);
    for i in 0..40 {
        log.append(&batch(3, 60, 1000 + i, Compression::None), 0).unwrap();
    }
    let b = log.active_segment().batches_from(0).map(|b| b.unwrap()).map(|b| (b.position, b.base_offset, b.last_offset)).collect();
    log.close().unwrap();
    (dir, b)
}

#[test]
fn r07_middle_index_entry_off_boundary_is_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _batches) = indexed_log(&tmp);
    let p = dir.join("00000000000000000000.index");
    let mut idx = fs::read(&p).unwrap();
    let n = idx.len() / 8;
    assert!(n > 6, "{n}");
    // entry 3: position + 5 (still increasing, not a batch boundary)
    let e = 3 * 8;
    let pos = u32::from_be_bytes(idx[e + 4..e + 8].try_into().unwrap());
    let off = u32::from_be_bytes(idx[e..e + 4].try_into().unwrap()) as i64;
    idx[e + 4..e + 8].copy_from_slice(&(pos + 5).to_be_bytes());
    fs::write(&p, &idx).unwrap();
    let log = open(&dir, config(&[("index.interval.bytes", "100")]), true);
    let r = log.read(off + 1, u32::MAX, true);
    eprintln!("{:?}", r.as_ref().map(|s| (s.position, s.len)));
    let s = r.expect("read failed because the index was trusted");
    let data = s.read_to_vec().unwrap();
    let first = RecordBatch::parse(&data).expect("slice does not start at a batch");
    assert!(first.base_offset() <= off + 1 && first.last_offset() >= off + 1);
}

#[test]
fn r08_middle_index_entry_wrong_batch_skips_data() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, batches) = indexed_log(&tmp);
    let p = dir.join("00000000000000000000.index");
    let mut idx = fs::read(&p).unwrap();
    // entry 3 -> point at the next index entry's... use a later batch boundary (still < entry 4's position)
    let e = 3 * 8;
    let pos = u32::from_be_bytes(idx[e + 4..e + 8].try_into().unwrap());
    let off = u32::from_be_bytes(idx[e..e + 4].try_into().unwrap()) as i64;
    let next_pos = u32::from_be_bytes(idx[e + 12..e + 16].try_into().unwrap());
    let k = batches.iter().position(|b| b.0 == pos).unwrap();
    let later = batches[k + 1];
    assert!(later.0 < next_pos);
    idx[e + 4..e + 8].copy_from_slice(&later.0.to_be_bytes());
    fs::write(&p, &idx).unwrap();
    let log = open(&dir, config(&[("index.interval.bytes", "100")]), true);
    let s = log.read(off, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let first = RecordBatch::parse(&data).unwrap();
    assert!(first.base_offset() <= off, "fetch at {off} starts at batch {}..{}: offsets skipped", first.base_offset(), first.last_offset());
}

#[test]
fn r09_garbage_recovery_point_checkpoint_blocks_open() {
    use fetchbench::log::manager::LogManager;
    let tmp = tempfile::tempdir().unwrap();
    let (mgr, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
    drop(mgr);
    fs::write(tmp.path().join("recovery-point-offset-checkpoint"), b"0\n3\ngarbage").unwrap();
    fs::write(tmp.path().join("log-start-offset-checkpoint"), b"").unwrap();
    let r = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false);
    assert!(r.is_ok(), "Kafka resets a malformed checkpoint to 0 with a warning; fetchbench: {:?}", r.err());
}

#[test]
fn r10_dump_magic2_short_length_is_io_error() {
    use fetchbench::log::dump::{dump_paths, DumpOptions};
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("00000000000000000000.log");
    let mut b = batch(2, 100, 1000, Compression::None);
    // length 20 (>=14, <49) with magic 2, file long enough for a 61-byte header read
    let mut bad = vec![0u8; 32];
    bad[8..12].copy_from_slice(&20i32.to_be_bytes());
    bad[16] = 2;
    bad.extend_from_slice(&b);
    b = bad;
    fs::write(&p, &b).unwrap();
    let mut out = Vec::new();
    let r = dump_paths(&[p.clone()], &DumpOptions { verify: true, print_records: false }, &mut out);
    eprintln!("{r:?}");
    let s = r.expect("dump aborted with an I/O error instead of reporting a problem");
    assert!(!s.problems.is_empty());
}

#[test]
fn r11_open_with_garbage_leader_epoch_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    log.append(&batch(2, 100, 1000, Compression::None), 0).unwrap();
    log.close().unwrap();
    fs::write(dir.join("leader-epoch-checkpoint"), b"0\n1\n0").unwrap();
    let r = PartitionLog::open(&dir, LogConfig::default(), OpenOptions { had_clean_shutdown: false, ..Default::default() });
    eprintln!("{:?}", r.as_ref().err());
}

#[test]
fn r12_retention_with_empty_active_after_roll() {
    // retention deleting everything but an empty active segment; then read at LSO.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("segment.bytes", "500"), ("retention.ms", "10")]), true);
    for i in 0..10 {
        log.append(&batch(1, 200, 1000 + i, Compression::None), 0).unwrap();
    }
    log.roll(0).unwrap();
    let out = cleaner::apply_retention(&mut log, 1_000_000).unwrap();
    eprintln!("{out:?} segs {} lso {} leo {}", log.segments().count(), log.log_start_offset(), log.log_end_offset());
    assert_eq!(log.log_start_offset(), log.log_end_offset());
    let s = log.read(log.log_start_offset(), 100, true).unwrap();
    assert_eq!(s.len, 0);
}

#[test]
fn r13_hw_below_leo_and_timestamp_lookup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    for i in 0..5 {
        log.append(&batch(1, 10, 1000 + i * 10, Compression::None), 0).unwrap();
    }
    log.set_high_watermark(2).unwrap();
    let latest = log.fetch_offset_by_timestamp(-1).unwrap().unwrap();
    let by_ts = log.fetch_offset_by_timestamp(1040).unwrap();
    eprintln!("latest {latest:?} by_ts {by_ts:?}");
    assert_eq!(latest.offset, 2, "Kafka answers LATEST with the high watermark for consumers");
    assert!(by_ts.is_none(), "Kafka hides offsets at or above the HW from ListOffsets");
}

fn keyed(keys: &[&str], ts: i64, tombstone: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for (i, k) in keys.iter().enumerate() {
        b.append(ts + i as i64, Some(k.as_bytes()), if tombstone { None } else { Some(b"v".as_slice()) }, &[]);
    }
    b.build().unwrap()
}

#[test]
fn r14_compaction_reads_at_every_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("cleanup.policy", "compact"), ("segment.bytes", "300"), ("index.interval.bytes", "50")]);
    let mut log = open(&dir, cfg.clone(), true);
    for round in 0..6 {
        for k in ["a", "b", "c", "d"] {
            log.append(&keyed(&[k, "z"], 1000 + round, false), 0).unwrap();
        }
    }
    log.append(&keyed(&["a"], 2000, true), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&keyed(&["q"], 3000, false), 0).unwrap();
    let leo = log.log_end_offset();
    let out = cleaner::compact(&mut log, 10_000).unwrap();
    eprintln!("{out:?}");
    let out2 = cleaner::compact(&mut log, i64::MAX / 4).unwrap();
    eprintln!("{out2:?}");
    for s in log.segments() {
        eprintln!("seg {} size {}", s.base_offset(), s.size());
    }
    assert_eq!(log.log_end_offset(), leo);
    // Every fetch offset: the slice starts at a batch containing it or at the first batch after it.
    let mut all = Vec::new();
    let mut pos = log.log_start_offset();
    while pos < leo {
        let s = log.read(pos, 1, true).unwrap();
        let data = s.read_to_vec().unwrap();
        assert!(!data.is_empty(), "empty read at {pos} < {leo}");
        let b = RecordBatch::parse(&data).unwrap();
        assert!(b.last_offset() >= pos);
        for r in b.records().unwrap().iter() {
            let r = r.unwrap();
            if r.offset >= pos {
                all.push((r.offset, r.key.map(|k| k.to_vec())));
            }
        }
        pos = b.next_offset();
    }
    eprintln!("{all:?}");
    for off in log.log_start_offset()..leo {
        let s = log.reopen_check(off);
        let _ = s;
    }
    // latest per key retained: a tombstone removed, b,c,d,z,q latest present
    let keys: Vec<_> = all.iter().map(|(_, k)| String::from_utf8(k.clone().unwrap()).unwrap()).collect();
    for k in ["b", "c", "d", "z", "q"] {
        assert_eq!(keys.iter().filter(|x| *x == k).count(), 1, "{k} in {keys:?}");
    }
    assert!(!keys.contains(&"a".to_string()), "{keys:?}");
}

trait ReopenCheck {
    fn reopen_check(&self, off: i64);
}
impl ReopenCheck for PartitionLog {
    fn reopen_check(&self, off: i64) {
        let s = self.read(off, 1, true).unwrap();
        let data = s.read_to_vec().unwrap();
        if off < self.high_watermark() {
            assert!(!data.is_empty(), "empty at {off}");
            let b = RecordBatch::parse(&data).unwrap();
            assert!(b.last_offset() >= off, "batch {}..{} for {off}", b.base_offset(), b.last_offset());
        }
    }
}

#[test]
fn r15_compacted_empty_segment_blocks_retention_ms() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("cleanup.policy", "compact,delete"), ("segment.bytes", "300"), ("retention.ms", "3600000")]);
    let mut log = open(&dir, cfg.clone(), true);
    for round in 0..6 {
        for k in ["a", "b"] {
            log.append(&keyed(&[k], 1000 + round, false), 0).unwrap();
        }
    }
    log.roll(0).unwrap();
    log.append(&keyed(&["q"], 3000, false), 0).unwrap();
    let now = fetchbench::log::partition::now_ms();
    let before: Vec<_> = log.segments().map(|s| (s.base_offset(), s.size(), s.largest_timestamp())).collect();
    cleaner::compact(&mut log, now).unwrap();
    let after: Vec<_> = log.segments().map(|s| (s.base_offset(), s.size(), s.largest_timestamp())).collect();
    eprintln!("before {before:?}\nafter {after:?}");
    let out = cleaner::apply_retention(&mut log, now + 60_000).unwrap();
    eprintln!("{out:?}");
    // All record timestamps are from 1970: every inactive segment is past retention.ms.
    assert_eq!(log.segments().count(), 1, "retention.ms blocked by cleaned empty segments whose mtime is now");
}
