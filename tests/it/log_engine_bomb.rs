//! Decompression bombs cost a produce bounded memory (issue 15, "Bad input"): validating a client's
//! compressed batch (Kafka's `LogValidator`) walks its records from a streaming decompressor
//! (`log::batch::RecordStream`, Kafka's `skipKeyValueIterator`) instead of inflating the whole
//! batch into one buffer.
//!
//! Each case appends one small zstd (or gzip) batch that inflates to 250 MiB to a
//! [`PartitionLog`] in a child process (this test binary run again on this one test, with
//! [`CHILD`] naming the case), so that the child's peak resident set (`VmHWM` of
//! `/proc/self/status`) measures the append alone. The bound asserted is generous (a quarter of
//! the inflated size); the figures are printed.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use fetchbench::log::batch::record::{write_varint, write_varlong};
use fetchbench::log::batch::{
    Attributes, BatchHeader, Compression, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
};
use fetchbench::log::partition::OpenOptions;
use fetchbench::log::{LogConfig, PartitionLog};

/// Environment variable set in the child: `<case> <batch file> <log dir>`.
const CHILD: &str = "FETCHBENCH_BOMB_CHILD";

/// Records per bomb, each with a value of [`VALUE_LEN`] zero bytes: 250 MiB inflated.
const RECORDS: usize = 250;
const VALUE_LEN: usize = 1 << 20;

/// The most a validation may add to the child's peak resident set: a quarter of the bomb.
const BOUND: u64 = 64 << 20;

/// A streaming compressor of a bomb's records section.
trait Finish: Write {
    fn finish(self: Box<Self>) -> Vec<u8>;
}

impl Finish for zstd::stream::write::Encoder<'_, Vec<u8>> {
    fn finish(self: Box<Self>) -> Vec<u8> {
        (*self).finish().unwrap()
    }
}

impl Finish for flate2::write::GzEncoder<Vec<u8>> {
    fn finish(self: Box<Self>) -> Vec<u8> {
        (*self).finish().unwrap()
    }
}

/// A `codec` (zstd or gzip) v2 batch of `records` records (offset deltas 0, 1, ...; key `k<i>`, or
/// a null key for the last record when `null_last_key`), each value `value_len` zero bytes,
/// compressed as a stream so that the inflated records are never in memory here either.
fn bomb(codec: Compression, records: usize, value_len: usize, null_last_key: bool) -> Vec<u8> {
    let mut z: Box<dyn Finish> = match codec {
        Compression::Zstd => Box::new(zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap()),
        Compression::Gzip => Box::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best())),
        other => panic!("no bomb of {other}"),
    };
    let zeros = vec![0u8; 64 << 10];
    for i in 0..records {
        let key = (!(null_last_key && i == records - 1)).then(|| format!("k{i}"));
        let mut head = vec![0u8]; // attributes
        write_varlong(&mut head, i as i64); // timestamp delta
        write_varint(&mut head, i as i32); // offset delta
        match &key {
            Some(k) => {
                write_varint(&mut head, k.len() as i32);
                head.extend_from_slice(k.as_bytes());
            }
            None => write_varint(&mut head, -1),
        }
        write_varint(&mut head, value_len as i32);
        let mut len = Vec::new();
        write_varint(&mut len, (head.len() + value_len + 1) as i32);
        z.write_all(&len).unwrap();
        z.write_all(&head).unwrap();
        let mut left = value_len;
        while left > 0 {
            let n = left.min(zeros.len());
            z.write_all(&zeros[..n]).unwrap();
            left -= n;
        }
        z.write_all(&[0]).unwrap(); // no headers
    }
    let section = z.finish();
    let mut out = vec![0u8; HEADER_SIZE];
    out.extend_from_slice(&section);
    let header = BatchHeader {
        base_offset: 0,
        batch_length: (out.len() - LOG_OVERHEAD) as i32,
        partition_leader_epoch: 0,
        magic: MAGIC_V2,
        crc: 0,
        attributes: Attributes::default().with_compression(codec),
        last_offset_delta: records as i32 - 1,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_000 + records as i64 - 1,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: records as i32,
    };
    header.encode(&mut out);
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// A `kB` line of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix(field)).unwrap_or_else(|| panic!("no {field}"));
    line.trim_start_matches(':').trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

/// In the child: appends the batch in `file` to a new log in `dir` (a compacted topic for the
/// `compact` case) and prints the outcome and the peak resident set before and after.
fn child(spec: &str) {
    let mut parts = spec.split(' ');
    let (case, file, dir) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let batch = std::fs::read(file).unwrap();
    let mut config = LogConfig::default();
    if case == "compact" {
        config.set("cleanup.policy", "compact").unwrap();
    }
    let (mut log, _) = PartitionLog::open(Path::new(dir), config, OpenOptions::default()).unwrap();
    let before = status_bytes("VmHWM");
    let outcome = match log.append(&batch, 1_700_000_000_000) {
        Ok(info) => format!("appended {}..={}", info.first_offset, info.last_offset),
        Err(e) => format!("refused: {e}"),
    };
    let after = status_bytes("VmHWM");
    // On a line of its own: libtest prints the test's name on the current line.
    println!("\nBOMB-CHILD {before} {after} {outcome}");
}

/// Runs `case` on `batch` in a child process: (peak resident set added by the append, outcome).
fn run_child(case: &str, batch: &[u8]) -> (u64, String) {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bomb.batch");
    std::fs::write(&file, batch).unwrap();
    let dir = tmp.path().join("bomb-0");
    let test = format!(
        "{}::a_decompression_bomb_is_validated_in_bounded_memory",
        module_path!().split_once("::").map_or(module_path!(), |(_, m)| m)
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{case} {} {}", file.display(), dir.display()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("BOMB-CHILD ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no result from the child:\n{stdout}"));
    let mut fields = line.splitn(3, ' ');
    let before: u64 = fields.next().unwrap().parse().unwrap();
    let after: u64 = fields.next().unwrap().parse().unwrap();
    (after - before, fields.next().unwrap().to_string())
}

/// 250 MiB bombs, of zstd (about 12 KiB on the wire) and of gzip (about 250 KiB), are accepted,
/// as Kafka accepts them, and a zstd one in a compacted topic whose last record has no key is
/// refused at that record; no validation raises the peak resident set by more than [`BOUND`] (the
/// whole-buffer walk raised it by the inflated size: 259 MiB for the zstd bomb).
#[test]
fn a_decompression_bomb_is_validated_in_bounded_memory() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec);
    }
    for codec in [Compression::Zstd, Compression::Gzip] {
        let accepted = bomb(codec, RECORDS, VALUE_LEN, false);
        assert!(accepted.len() < 512 << 10, "the {codec} bomb is {} bytes", accepted.len());
        let (peak, outcome) = run_child("accept", &accepted);
        eprintln!(
            "{codec} bomb ({} bytes, {RECORDS} MiB inflated): +{} KiB peak RSS, {outcome}",
            accepted.len(),
            peak >> 10
        );
        assert_eq!(outcome, format!("appended 0..={}", RECORDS - 1));
        assert!(peak < BOUND, "validating a {RECORDS} MiB {codec} bomb raised the peak RSS by {} MiB", peak >> 20);
    }

    let keyless = bomb(Compression::Zstd, RECORDS, VALUE_LEN, true);
    let (peak, outcome) = run_child("compact", &keyless);
    eprintln!("keyless zstd bomb in a compacted topic: +{} KiB peak RSS, {outcome}", peak >> 10);
    assert!(
        outcome.starts_with("refused")
            && outcome.contains(&format!("invalid record {}", RECORDS - 1))
            && outcome.contains("without a key"),
        "{outcome}"
    );
    assert!(peak < BOUND, "validating a {RECORDS} MiB bomb raised the peak RSS by {} MiB", peak >> 20);
}
