//! Regression tests from the storage-engine review of issue 2. Tests marked `#[ignore]` demonstrate
//! open defects (the reason names the bug); run them with `cargo test --test it review_regressions -- --ignored`.
//! Remove the `#[ignore]` when the bug is fixed.
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
/// (offset delta, key, value) of one raw record.
type RawRecord<'a> = (i32, &'a [u8], Option<&'a [u8]>);

fn raw_batch(records: &[RawRecord<'_>], last_offset_delta: i32, attrs: i16, ts: i64) -> Vec<u8> {
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
    // Record deltas 1, 0, 2, 3 (CRC-valid). `append` now refuses it (Kafka's LogValidator), but
    // data written before that check, or by another writer, can still hold it: put it in the log
    // with `append_with_offsets`, which does not validate records.
    let evil = raw_batch(
        &[(1, b"b", Some(b"1")), (0, b"c", Some(b"2")), (2, b"a", Some(b"3")), (3, b"a", Some(b"4"))],
        3,
        0,
        1000,
    );
    assert!(log.append(&evil, 0).is_err(), "append validates record offset deltas");
    log.append_with_offsets(&evil, 0).unwrap();
    log.roll(0).unwrap();
    log.append(&batch(1, 10, 1000, Compression::None), 0).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cleaner::compact(&mut log, 10_000)));
    let r = r.expect("compaction panicked on a batch in the log");
    eprintln!("{r:?}");
    assert!(matches!(r, Err(LogError::Batch { .. })), "the rewrite failure is a batch error: {r:?}");
    assert!(fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".cleaned")));
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
#[ignore = "Kafka's behaviour, kept: after a clean shutdown, data below the recovery point is trusted, not re-read at start-up (clients verify CRCs: check.crcs); `log dump --verify` finds it"]
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
    let b = log
        .active_segment()
        .batches_from(0)
        .map(|b| b.unwrap())
        .map(|b| (b.position, b.base_offset, b.last_offset))
        .collect();
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
    assert!(first.base_offset() <= off + 1 && first.last_offset() > off);
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
    assert!(later.0 <= next_pos);
    idx[e + 4..e + 8].copy_from_slice(&later.0.to_be_bytes());
    fs::write(&p, &idx).unwrap();
    let log = open(&dir, config(&[("index.interval.bytes", "100")]), true);
    let s = log.read(off, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let first = RecordBatch::parse(&data).unwrap();
    assert!(
        first.base_offset() <= off,
        "fetch at {off} starts at batch {}..{}: offsets skipped",
        first.base_offset(),
        first.last_offset()
    );
}

#[test]
fn r09_garbage_recovery_point_checkpoint_does_not_block_open() {
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
        log.reopen_check(off);
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
    // The source segments were last modified two hours ago (as on a broker whose segments are
    // old); their cleaned copies must keep that time (Kafka's cleanSegments), not get "now".
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for s in log.segments().filter(|s| s.base_offset() != log.active_segment().base_offset()) {
        fs::File::options().write(true).open(s.log_path()).unwrap().set_modified(two_hours_ago).unwrap();
    }
    let before: Vec<_> = log.segments().map(|s| (s.base_offset(), s.size(), s.largest_timestamp())).collect();
    cleaner::compact(&mut log, now).unwrap();
    let after: Vec<_> = log.segments().map(|s| (s.base_offset(), s.size(), s.largest_timestamp())).collect();
    eprintln!("before {before:?}\nafter {after:?}");
    let old_ms = now - 7_200_000;
    for &(base, size, largest) in &after[..after.len() - 1] {
        if size == 0 {
            assert!((largest - old_ms).abs() < 5_000, "emptied segment {base}: mtime {largest}, source's {old_ms}");
        }
    }
    let out = cleaner::apply_retention(&mut log, now + 60_000).unwrap();
    eprintln!("{out:?}");
    // All record timestamps are from 1970: every inactive segment is past retention.ms.
    assert_eq!(log.segments().count(), 1, "retention.ms blocked by cleaned empty segments whose mtime is now");
}

fn lcg(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *seed >> 33
}

#[test]
fn r16_fuzz_open_read_dump_no_panic() {
    use fetchbench::log::dump::{dump_paths, DumpOptions};
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src-0");
    let cfg = config(&[("segment.bytes", "2000"), ("index.interval.bytes", "100")]);
    let mut log = open(&src, cfg.clone(), true);
    for i in 0..40 {
        let codec = Compression::from_id((i % 5) as u8).unwrap();
        log.append(&batch(1 + i % 3, 50 + i * 3, 1000 + i as i64, codec), 0).unwrap();
    }
    log.close().unwrap();
    let files: Vec<PathBuf> = {
        let mut v: Vec<_> = fs::read_dir(&src).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        for f in &v {
            eprintln!("{}", f.display());
        }
        v
    };
    let mut seed = std::env::var("REVIEW_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(12345u64);
    for iter in 0..std::env::var("REVIEW_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(300) {
        let d = tmp.path().join(format!("f{iter}")).join("t-0");
        fs::create_dir_all(&d).unwrap();
        for f in &files {
            fs::copy(f, d.join(f.file_name().unwrap())).unwrap();
        }
        // mutate 1-4 files
        for _ in 0..(1 + lcg(&mut seed) % 4) {
            let segs: Vec<_> = files
                .iter()
                .filter(|f| f.extension().is_some_and(|e| e == "log" || e == "index" || e == "timeindex"))
                .collect();
            let f = segs[(lcg(&mut seed) as usize) % segs.len()];
            let p = d.join(f.file_name().unwrap());
            let Ok(mut b) = fs::read(&p) else { continue };
            match lcg(&mut seed) % 5 {
                0 if !b.is_empty() => {
                    let i = lcg(&mut seed) as usize % b.len();
                    b[i] ^= 1 << (lcg(&mut seed) % 8);
                }
                1 => {
                    let n = if b.is_empty() { 0 } else { lcg(&mut seed) as usize % b.len() };
                    b.truncate(n);
                }
                2 if b.len() >= 12 => {
                    let i = (lcg(&mut seed) as usize % (b.len() - 4)) & !3;
                    b[i..i + 4].copy_from_slice(&(lcg(&mut seed) as u32 | 0x7000_0000).to_be_bytes());
                }
                3 => b.extend((0..(lcg(&mut seed) % 100)).map(|_| lcg(&mut seed) as u8)),
                _ => {
                    let _ = fs::remove_file(&p);
                    continue;
                }
            }
            fs::write(&p, &b).unwrap();
        }
        let mut out = Vec::new();
        let _ = dump_paths(std::slice::from_ref(&d), &DumpOptions { verify: true, ..Default::default() }, &mut out);
        let _ =
            dump_paths(std::slice::from_ref(&d), &DumpOptions { print_records: true, ..Default::default() }, &mut out);
        // read-only open
        if let Ok((ro, _)) = PartitionLog::open(&d, cfg.clone(), OpenOptions { read_only: true, ..Default::default() })
        {
            for off in (ro.log_start_offset()..=ro.log_end_offset()).take(200).chain([ro.log_end_offset()]) {
                let _ = ro.read(off, 500, true);
                let _ = ro.fetch_offset_by_timestamp(1000 + off);
            }
        }
        // writable unclean open
        let (rw, _) = match PartitionLog::open(&d, cfg.clone(), OpenOptions::default()) {
            Ok(x) => x,
            Err(e) => panic!("iter {iter}: unclean open failed: {e}"),
        };
        if rw.log_end_offset() > 200 {
            eprintln!("iter {iter}: unclean-open LEO {}", rw.log_end_offset());
        }
        for off in (rw.log_start_offset()..=rw.log_end_offset()).take(200).chain([rw.log_end_offset()]) {
            let s = rw.read(off, u32::MAX, true).unwrap_or_else(|e| panic!("iter {iter}: read {off}: {e}"));
            let data = s.read_to_vec().unwrap();
            for b in BatchBoundaries::new(&data) {
                let bb = RecordBatch::parse(&data[b.position..b.position + b.size]).unwrap();
                assert!(bb.is_crc_valid(), "iter {iter}: bad CRC served at {off}");
            }
            let _ = rw.fetch_offset_by_timestamp(1000 + off).unwrap();
        }
        drop(rw);
        fs::remove_dir_all(tmp.path().join(format!("f{iter}"))).unwrap();
    }
}

#[test]

fn r17_flipped_base_offset_in_older_segment_skips_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("segment.bytes", "1000"), ("index.interval.bytes", "100")]);
    let mut log = open(&dir, cfg.clone(), true);
    for i in 0..30 {
        log.append(&batch(1, 100, 1000 + i, Compression::None), 0).unwrap();
    }
    let leo = log.log_end_offset();
    let seg0_last = log.segments().next().unwrap().batches_from(0).map(|b| b.unwrap()).last().unwrap();
    drop(log); // unclean
    let p = dir.join("00000000000000000000.log");
    let mut b = fs::read(&p).unwrap();
    b[seg0_last.position as usize + 4] ^= 0x01; // base offset += 2^24
    fs::write(&p, &b).unwrap();
    let (log, rep) = PartitionLog::open(&dir, cfg, OpenOptions::default()).unwrap();
    eprintln!("{rep:?} leo {}", log.log_end_offset());
    let mut pos = 0;
    let mut got = Vec::new();
    while pos < log.log_end_offset() {
        let s = log.read(pos, u32::MAX, true).unwrap();
        let data = s.read_to_vec().unwrap();
        let mut next = pos;
        for bb in BatchBoundaries::new(&data) {
            let rb = RecordBatch::parse(&data[bb.position..bb.position + bb.size]).unwrap();
            for r in rb.records().unwrap().iter() {
                let r = r.unwrap();
                if r.offset >= pos {
                    got.push(r.offset);
                }
            }
            next = rb.next_offset();
        }
        if next == pos {
            break;
        }
        pos = next;
    }
    eprintln!("consumed {} offsets, last {:?}, leo was {leo}", got.len(), got.last());
    // The damaged batch's true offsets are unknowable (no CRC covers the base offset): recovery
    // cuts its segment there, but the later segments are intact and must all be served, in order,
    // with nothing past the old log end.
    assert!(got.windows(2).all(|w| w[0] < w[1]), "offsets served in order");
    assert!(got.iter().all(|&o| o < leo), "nothing past the old log end: {got:?}");
    let seg1_base = seg0_last.last_offset + 1;
    let later: Vec<i64> = got.iter().copied().filter(|&o| o >= seg1_base).collect();
    assert_eq!(later, (seg1_base..leo).collect::<Vec<_>>(), "later segments are served whole");
    assert_eq!(got.len() as i64, leo - 1, "only the damaged batch is lost");
}

#[test]
fn r18_retained_empty_batch_matches_kafka_write_empty_header() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("cleanup.policy", "compact")]), true);
    let mut b = BatchBuilder::new(0, Compression::Gzip).producer(7, 0, 0);
    b.append(1000, Some(b"k"), Some(b"old"), &[]);
    log.append(&b.build().unwrap(), 0).unwrap();
    log.append(&keyed(&["k"], 2000, false), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&keyed(&["z"], 3000, false), 0).unwrap();
    cleaner::compact(&mut log, 10_000).unwrap();
    let s = log.read(0, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let rb = RecordBatch::parse(&data).unwrap();
    let h = rb.header();
    eprintln!("{h:?} size {}", h.total_size());
    assert_eq!(h.records_count, 0);
    assert_eq!(h.total_size(), 61, "Kafka's writeEmptyHeader: 61 bytes, codec none");
    assert_eq!(h.attributes.codec_id(), 0);
    assert_eq!(h.base_timestamp, -1);
    assert!(rb.is_crc_valid());
    assert_eq!((h.base_offset, h.last_offset_delta, h.max_timestamp), (0, 0, 1000), "original offsets, max timestamp");
    assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (7, 0, 0), "producer state kept");
    assert!(!h.attributes.has_delete_horizon() && !h.attributes.is_log_append_time());
}

#[test]
fn r19_transactional_last_data_batch_dropped() {
    // Kafka retains (empty) the batch holding an active producer's lastDataOffset even when a
    // COMMIT marker follows; fetchbench keys "last batch" on the marker.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("cleanup.policy", "compact")]), true);
    let mut b = BatchBuilder::new(0, Compression::None).producer(9, 0, 0).transactional(true);
    b.append(1000, Some(b"k"), Some(b"old"), &[]);
    log.append(&b.build().unwrap(), 0).unwrap();
    // COMMIT marker: control record key = version 0, type 1. Clients may not write control
    // batches; the coordinator's marker goes in with its offset, as Kafka's coordinator append.
    let mut m = BatchBuilder::new(1, Compression::None).producer(9, 0, -1).transactional(true).control(true);
    m.append(1001, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    log.append_with_offsets(&m.build().unwrap(), 0).unwrap();
    log.append(&keyed(&["k"], 2000, false), 0).unwrap();
    log.roll(0).unwrap();
    log.append(&keyed(&["z"], 3000, false), 0).unwrap();
    cleaner::compact(&mut log, 10_000).unwrap();
    let s = log.read(0, u32::MAX, true).unwrap();
    let data = s.read_to_vec().unwrap();
    let hs: Vec<_> =
        BatchBoundaries::new(&data).map(|bb| *RecordBatch::parse(&data[bb.position..]).unwrap().header()).collect();
    for h in &hs {
        eprintln!(
            "base {} pid {} ctrl {} count {}",
            h.base_offset,
            h.producer_id,
            h.attributes.is_control(),
            h.records_count
        );
    }
    assert!(
        hs.iter().any(|h| h.producer_id == 9 && !h.attributes.is_control()),
        "producer 9's last data batch was dropped"
    );
}

#[test]

fn r20_index_after_recovery_then_append_differs_from_kafka() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("index.interval.bytes", "1000")]);
    let mut log = open(&dir, cfg.clone(), true);
    for i in 0..5 {
        log.append(&batch(1, 300, 1000 + i, Compression::None), 0).unwrap();
    }
    drop(log); // unclean
    let mut log = open(&dir, cfg.clone(), false);
    let before = log.active_segment().offset_index().entries();
    log.append(&batch(1, 300, 2000, Compression::None), 0).unwrap();
    log.append(&batch(1, 300, 2001, Compression::None), 0).unwrap();
    let after = log.active_segment().offset_index().entries();
    eprintln!("entries before {before} after {after}");
    // Kafka: a freshly loaded LogSegment has bytesSinceLastIndexEntry = 0 (recover() does not set it),
    // so the first append after recovery never adds an entry.
    assert_eq!(after, before, "fetchbench added an index entry Kafka would not");
}

fn all_records(log: &PartitionLog) -> Vec<(i64, Vec<u8>)> {
    let mut pos = log.log_start_offset();
    let mut got = Vec::new();
    while pos < log.high_watermark() {
        let s = log.read(pos, u32::MAX, true).unwrap();
        let data = s.read_to_vec().unwrap();
        let mut next = pos;
        for bb in BatchBoundaries::new(&data) {
            let rb = RecordBatch::parse(&data[bb.position..bb.position + bb.size]).unwrap();
            assert!(rb.is_crc_valid());
            for r in rb.records().unwrap().iter() {
                let r = r.unwrap();
                if r.offset >= pos {
                    got.push((r.offset, r.key.unwrap_or(b"").to_vec()));
                }
            }
            next = rb.next_offset();
        }
        assert!(next > pos);
        pos = next;
    }
    got
}

#[test]

fn r21_swap_crash_points() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(&[("cleanup.policy", "compact"), ("segment.bytes", "300")]);
    let src = tmp.path().join("src-0");
    let mut log = open(&src, cfg.clone(), true);
    log.append(&keyed(&["unique"], 999, false), 0).unwrap();
    for round in 0..4 {
        for k in ["a", "b", "c"] {
            log.append(&keyed(&[k], 1000 + round, false), 0).unwrap();
        }
    }
    log.roll(0).unwrap();
    log.append(&keyed(&["z"], 3000, false), 0).unwrap();
    log.close().unwrap();
    // compacted copy
    let cmp = tmp.path().join("cmp-0");
    copy_flat(&src, &cmp);
    let mut clog = open(&cmp, cfg.clone(), true);
    cleaner::compact(&mut clog, 10_000).unwrap();
    let want = all_records(&clog);
    clog.close().unwrap();
    let bases: Vec<String> = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .map(|n| n[..20].to_string())
        .collect();
    let mut bases = bases;
    bases.sort();
    let cleaned_bases = &bases[..bases.len() - 1];
    // Scenario A: old segments + all cleaned as .swap (crash after cleaned->swap renames).
    // Scenario B: old first segment already deleted (.deleted), others old+swap.
    // Scenario C: first swap already renamed (.log only), its index still .swap.
    let mut bad = Vec::new();
    for scen in ["A", "B", "C"] {
        let d = tmp.path().join(format!("s{scen}")).join("t-0");
        copy_flat(&src, &d);
        for (i, b) in cleaned_bases.iter().enumerate() {
            for suf in [".log", ".index", ".timeindex"] {
                let from = cmp.join(format!("{b}{suf}"));
                let to_swap = d.join(format!("{b}{suf}.swap"));
                match (scen, i) {
                    ("B", 0) => {
                        fs::rename(d.join(format!("{b}{suf}")), d.join(format!("{b}{suf}.deleted"))).unwrap();
                        fs::copy(&from, &to_swap).unwrap();
                    }
                    ("C", 0) => {
                        let _ = fs::remove_file(d.join(format!("{b}{suf}")));
                        if suf == ".log" {
                            fs::copy(&from, d.join(format!("{b}{suf}"))).unwrap();
                        } else {
                            fs::copy(&from, &to_swap).unwrap();
                        }
                    }
                    _ => {
                        fs::copy(&from, &to_swap).unwrap();
                    }
                }
            }
        }
        let (l, rep) =
            PartitionLog::open(&d, cfg.clone(), OpenOptions { had_clean_shutdown: true, ..Default::default() })
                .unwrap();
        let got = all_records(&l);
        let leftover: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".swap") || n.ends_with(".deleted") || n.ends_with(".cleaned"))
            .collect();
        eprintln!("scenario {scen}: swapped {:?} leftovers {leftover:?} records {}", rep.swapped, got.len());
        eprintln!(
            "scenario {scen}: got offsets {:?} want {:?}",
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            want.iter().map(|g| g.0).collect::<Vec<_>>()
        );
        bad.push(got != want);
    }
    assert!(!bad.iter().any(|b| *b), "{bad:?}");
}

#[test]

fn r22_orphan_indexes_are_not_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    log.append(&batch(1, 10, 1000, Compression::None), 0).unwrap();
    log.close().unwrap();
    fs::write(dir.join("00000000000000000077.index"), [0u8; 16]).unwrap();
    fs::write(dir.join("00000000000000000077.timeindex"), [0u8; 24]).unwrap();
    let (_l, rep) =
        PartitionLog::open(&dir, LogConfig::default(), OpenOptions { had_clean_shutdown: true, ..Default::default() })
            .unwrap();
    eprintln!("{:?}", rep.removed_files);
    assert!(!dir.join("00000000000000000077.index").exists(), "orphan index (no .log) kept");
}

#[test]

fn r23_orphan_index_reused_by_new_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("segment.bytes", "400"), ("index.interval.bytes", "50")]);
    let mut log = open(&dir, cfg.clone(), true);
    log.append(&batch(1, 10, 1000, Compression::None), 0).unwrap();
    log.close().unwrap();
    // Leftover from a crash between unlinking a .log and its .index (e.g. segments deleted after
    // a corrupt one): the index of a segment at base 3, entry (rel 100, pos 5000).
    let mut idx = Vec::new();
    idx.extend_from_slice(&0u32.to_be_bytes());
    idx.extend_from_slice(&5000u32.to_be_bytes());
    fs::write(dir.join("00000000000000000002.index"), &idx).unwrap();
    let mut log = open(&dir, cfg.clone(), true);
    let mut errs = Vec::new();
    for i in 0..20 {
        if let Err(e) = log.append(&batch(1, 100, 1000 + i, Compression::None), 0) {
            errs.push(e.to_string());
        }
    }
    let segs: Vec<_> = log.segments().map(|s| (s.base_offset(), s.offset_index().entries())).collect();
    eprintln!("segments {segs:?} errs {errs:?}");
    for off in 0..log.log_end_offset() {
        let s = log.read(off, u32::MAX, true);
        match s {
            Ok(s) => {
                let d = s.read_to_vec().unwrap();
                let b = RecordBatch::parse(&d).unwrap();
                assert!(
                    b.base_offset() <= off && off <= b.last_offset(),
                    "read {off} got {}..{}",
                    b.base_offset(),
                    b.last_offset()
                );
            }
            Err(e) => panic!("read {off}: {e}"),
        }
    }
    assert!(errs.is_empty());
}

fn copy_flat(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

fn keyed(keys: &[&str], ts: i64, tombstone: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for (i, k) in keys.iter().enumerate() {
        b.append(ts + i as i64, Some(k.as_bytes()), if tombstone { None } else { Some(b"v".as_slice()) }, &[]);
    }
    b.build().unwrap()
}

// Second review round.

/// A produce request (or a follower's fetched chunk) with several batches for one partition:
/// Kafka indexes the whole append as (largest offset of the append, start position).
#[test]
fn r2_01_multi_batch_append_index_rejected_by_own_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = config(&[("index.interval.bytes", "100")]);
    let mut log = open(&dir, cfg.clone(), true);
    for i in 0..10 {
        let mut set = batch(3, 60, 1000 + i, Compression::None);
        set.extend(batch(3, 60, 1000 + i, Compression::None));
        log.append(&set, 0).unwrap();
    }
    let idx: Vec<_> = log.active_segment().offset_index().iter().collect();
    eprintln!("index {idx:?}");
    assert!(!idx.is_empty());
    // Kafka semantics: entry = (last offset of the 2-batch append, position of its first batch)
    let seg = log.active_segment();
    let e = idx[idx.len() - 1];
    let b = seg.batch_at(e.position, seg.size()).unwrap().unwrap();
    assert_ne!(b.last_offset, e.offset, "entry points at the first batch of the append");
    // fetchbench's own check now rejects the index it wrote
    let own = seg.sanity_check();
    eprintln!("sanity_check: {own:?}");
    log.close().unwrap();
    let (_log, report) =
        PartitionLog::open(&dir, cfg, OpenOptions { had_clean_shutdown: true, ..Default::default() }).unwrap();
    assert!(report.rebuilt_indexes.is_empty(), "clean reopen rebuilt indexes it wrote itself: {report:?}");
}

/// The partition leader epoch is outside the CRC; Kafka's LogValidator stamps the leader's
/// epoch on every client batch. fetchbench keeps the client's value and records it.
#[test]
fn r2_02_client_leader_epoch_pollutes_epoch_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    let mut b = BatchBuilder::new(0, Compression::None).partition_leader_epoch(2_000_000_000);
    b.append(1000, Some(b"k"), Some(b"v"), &[]);
    log.append(&b.build().unwrap(), 0).unwrap();
    let mut b = BatchBuilder::new(0, Compression::None).partition_leader_epoch(5);
    b.append(1000, Some(b"k"), Some(b"v"), &[]);
    log.append(&b.build().unwrap(), 0).unwrap();
    eprintln!("{:?}", log.leader_epochs());
    let cp = fs::read_to_string(dir.join("leader-epoch-checkpoint")).unwrap_or_default();
    eprintln!("checkpoint:\n{cp}");
    assert!(log.leader_epochs().iter().all(|e| e.epoch < 1000), "client-chosen epoch recorded");
}

/// Kafka's DefaultRecordBatch iterator: "Incorrect declared batch size, records still remaining".
#[test]
fn r2_03_trailing_bytes_after_declared_records_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    let mut b = batch(2, 10, 1000, Compression::None);
    // declare 1 record, last offset delta 0; the second record stays as trailing bytes
    b[57..61].copy_from_slice(&1i32.to_be_bytes());
    b[23..27].copy_from_slice(&0i32.to_be_bytes());
    recrc(&mut b);
    let r = log.append(&b, 0);
    eprintln!("{r:?}");
    assert!(r.is_err(), "batch with undeclared trailing record accepted");
}

/// Kafka's LogValidator: a batch with a producer id needs a base sequence >= 0
/// ("Invalid sequence number"); a transactional batch needs a producer id.
#[test]
fn r2_04_producer_id_without_sequence_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, LogConfig::default(), true);
    let mut b = BatchBuilder::new(0, Compression::None).producer(7, 0, -1);
    b.append(1000, Some(b"k"), Some(b"v"), &[]);
    let r1 = log.append(&b.build().unwrap(), 0);
    eprintln!("{r1:?}");
    assert!(r1.is_err(), "producer id 7 with base sequence -1 accepted");
}

/// A base offset flipped upward (still below the next segment) in an older segment: recovery
/// keeps the damaged batch and cuts the intact batches after it.
#[test]
fn r2_05_flipped_base_offset_cuts_good_batches_keeps_bad() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let cfg = LogConfig::default();
    let mut log = open(&dir, cfg.clone(), true);
    for i in 0..5 {
        log.append(&batch(10, 20, 1000 + i, Compression::None), 0).unwrap();
    }
    log.roll(0).unwrap();
    for i in 0..5 {
        log.append(&batch(10, 20, 2000 + i, Compression::None), 0).unwrap();
    }
    let seg0 = log.segments().next().unwrap();
    let bs: Vec<_> = seg0.batches_from(0).map(|b| b.unwrap()).collect();
    drop(log);
    let p = dir.join("00000000000000000000.log");
    let mut data = fs::read(&p).unwrap();
    // batch 2 (offsets 20..29) claims base 25
    let pos = bs[2].position as usize;
    data[pos..pos + 8].copy_from_slice(&25i64.to_be_bytes());
    fs::write(&p, &data).unwrap();
    let (log, report) = PartitionLog::open(
        &dir,
        cfg,
        OpenOptions { had_clean_shutdown: false, recovery_point: Some(0), ..Default::default() },
    )
    .unwrap();
    let kept: Vec<_> = log
        .segments()
        .next()
        .unwrap()
        .batches_from(0)
        .map(|b| b.unwrap())
        .map(|b| (b.base_offset, b.last_offset))
        .collect();
    eprintln!("report {report:?}\nkept {kept:?}");
    assert!(!kept.contains(&(25, 34)), "damaged batch kept with offsets 25..34 (real 20..29)");
}

/// `message.timestamp.type=LogAppendTime`: Kafka's LogValidator sets the timestamp type bit and
/// max timestamp = now on every client batch.
#[test]
fn r2_06_log_append_time_config_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let mut log = open(&dir, config(&[("message.timestamp.type", "LogAppendTime")]), true);
    let info = log.append(&batch(2, 10, 1000, Compression::None), 5_000_000).unwrap();
    let bytes = log.read(0, u32::MAX, true).unwrap().read_to_vec().unwrap();
    let b = RecordBatch::parse(&bytes).unwrap();
    eprintln!("{info:?} {:?}", b.header());
    assert!(b.header().attributes.is_log_append_time() && b.header().max_timestamp == 5_000_000);
}
