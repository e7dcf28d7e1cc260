//! Record-batch benches: the per-batch work of the log and of the consumer.
//!
//! `cargo bench --bench batch` (`-- batch_decode/lz4` to pick some; a short run:
//! `cargo bench --bench batch -- --measurement-time 3 --warm-up-time 1`; one iteration each:
//! `cargo bench --bench batch -- --test`). Speed is measured here, never asserted. Groups and
//! what one iteration is:
//!
//! - `batch_crc32c`: one CRC-32C validation ([`RecordBatch::verify_crc`], bytes 21..end) of a
//!   16 KiB batch (16 x 1 KiB records) or a 1 MiB batch (1024 x 1 KiB records), uncompressed.
//!   Throughput in bytes of the whole batch.
//! - `batch_decode`: one full decode of one batch as the consumer decodes a fetched record set
//!   ([`parse_records`]: CRC checked as with `check.crcs=true`, decompressed, every record turned
//!   into a `ConsumerRecord`), for 16 x 1 KiB and 160 x 100 B records, compression none, lz4 and
//!   zstd. Throughput in records.
//! - `batch_header`: the header-only parse of the fetch path: [`BatchHeader::parse`] of one
//!   61-byte header in memory (throughput: 1 header), and
//!   [`Segment::batches_from`](fetchbench::log::segment::Segment::batches_from) over a
//!   page-cached segment of 64 batches of 16 KiB (a 61-byte `pread` plus the parse per batch,
//!   what `Segment::translate_offset` does to find a fetch's first batch; throughput: 64
//!   headers).
//! - `batch_corpus`: [`parse_records`] of a real segment written by Kafka (snappy, xerial
//!   framing): `kafka-segments/seanorth-kafka-server/kafka-logs/some-topic-0/00000000000000000000.log`
//!   under `$FETCHBENCH_CORPUS` (default `../shared/corpus`, relative to the crate root where
//!   `cargo bench` runs). Read at start, never copied into the repository; skipped with a notice
//!   when missing. Throughput in records.
//!
//! Inputs are built with the crate's own [`BatchBuilder`]: null keys, no headers, text values
//! (words picked pseudo-randomly from a 32-word vocabulary: lz4 and zstd find matches, but no
//! single repeated pattern collapses the batch). The on-wire size of each batch is printed at
//! start.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fetchbench::client::consumer::fetcher::parse_records;
use fetchbench::log::batch::mixed::MixedBatches;
use fetchbench::log::batch::{BatchBuilder, BatchHeader, Compression, RecordBatch, HEADER_SIZE};
use fetchbench::log::partition::OpenOptions;
use fetchbench::log::{LogConfig, PartitionLog};

/// The Kafka-written segment of the corpus, relative to `$FETCHBENCH_CORPUS`.
const CORPUS_SEGMENT: &str = "kafka-segments/seanorth-kafka-server/kafka-logs/some-topic-0/00000000000000000000.log";
/// Record timestamps (ms): a fixed instant, so inputs are the same on every run.
const TIMESTAMP_MS: i64 = 1_700_000_000_000;

/// A value of `len` bytes of text: words picked pseudo-randomly (seeded by `seed`) from a
/// 32-word vocabulary, separated by spaces, cut at `len`.
fn value(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "alpha",
        "bravo",
        "charlie",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
        "mike",
        "november",
        "oscar",
        "papa",
        "quebec",
        "romeo",
        "sierra",
        "tango",
        "uniform",
        "victor",
        "whiskey",
        "xray",
        "yankee",
        "zulu",
        "offset",
        "partition",
        "segment",
        "broker",
        "consumer",
        "record",
    ];
    let mut x = seed.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x >> 59) as usize].as_bytes());
        out.push(b' ');
    }
    out.truncate(len);
    out
}

/// One batch of `count` records of `size`-byte values, base offset 0, built by [`BatchBuilder`].
fn batch(count: usize, size: usize, compression: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, compression);
    for i in 0..count {
        b.append(TIMESTAMP_MS + i as i64, None, Some(&value(size, i as u64)), &[]);
    }
    b.build().expect("build the batch")
}

/// `1024` -> "1KiB", `1 << 20` -> "1MiB", `100` -> "100B".
fn label(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch_crc32c");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for (name, count) in [("16KiB", 16), ("1MiB", 1024)] {
        let bytes = batch(count, 1024, Compression::None);
        let parsed = RecordBatch::parse(&bytes).expect("parse the batch");
        parsed.verify_crc().expect("the builder writes a valid CRC");
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(BenchmarkId::new("verify", format!("{name} batch ({count} x 1KiB records)")), |b| {
            b.iter(|| black_box(RecordBatch::parse(black_box(&bytes)).and_then(|r| r.verify_crc())))
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let topic: Arc<str> = Arc::from("bench");
    let mut g = c.benchmark_group("batch_decode");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        for (count, size) in [(16usize, 1024usize), (160, 100)] {
            let bytes = Bytes::from(batch(count, size, compression));
            // The input decodes to every record before it is timed.
            let parsed = parse_records(&topic, 0, 0, bytes.clone(), true, None).expect("decode the batch");
            assert_eq!(parsed.records.len(), count, "{compression:?} {count} x {size}");
            assert_eq!(parsed.next_offset, count as i64);
            g.throughput(Throughput::Elements(count as u64));
            eprintln!("batch_decode/{}: {count} x {size} B records: {} B on the wire", compression.name(), bytes.len());
            let id = BenchmarkId::new(compression.name(), format!("{count} x {} records", label(size)));
            g.bench_function(id, |b| {
                b.iter(|| black_box(parse_records(&topic, 0, 0, black_box(bytes.clone()), true, None)))
            });
        }
    }
    g.finish();
}

fn header(c: &mut Criterion) {
    let mut g = c.benchmark_group("batch_header");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    let bytes = batch(16, 1024, Compression::None);
    let head = &bytes[..HEADER_SIZE];
    assert_eq!(BatchHeader::parse(head).expect("parse the header").records_count, 16);
    g.throughput(Throughput::Elements(1));
    g.bench_function("BatchHeader::parse (61 B in memory)", |b| {
        b.iter(|| black_box(BatchHeader::parse(black_box(head))))
    });

    // A segment of 64 batches (about 1 MiB), page-cached: it was just written.
    const BATCHES: usize = 64;
    let tmp = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = PartitionLog::open(&tmp.path().join("bench-0"), LogConfig::default(), OpenOptions::default())
        .expect("open a partition log");
    for _ in 0..BATCHES {
        log.append(&bytes, TIMESTAMP_MS).expect("append");
    }
    let segment = log.segments().next().expect("one segment");
    let walked: Vec<_> = segment.batches_from(0).collect::<Result<_, _>>().expect("valid headers");
    assert_eq!(walked.len(), BATCHES);
    assert!(walked.iter().all(|b| b.header.is_some_and(|h| h.records_count == 16)));
    g.throughput(Throughput::Elements(BATCHES as u64));
    g.bench_function(format!("Segment::batches_from ({BATCHES} x 16KiB batches, pread 61 B each)"), |b| {
        b.iter(|| black_box(segment.batches_from(0).filter(|b| b.is_ok()).count()))
    });
    g.finish();
}

fn corpus(c: &mut Criterion) {
    let root = std::env::var_os("FETCHBENCH_CORPUS").map(PathBuf::from).unwrap_or_else(|| "../shared/corpus".into());
    let path = root.join(CORPUS_SEGMENT);
    let bytes = match std::fs::read(&path) {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            eprintln!("batch_corpus: skipped: cannot read {} ({e}); set FETCHBENCH_CORPUS", path.display());
            return;
        }
    };
    let topic: Arc<str> = Arc::from("some-topic");
    let parsed = parse_records(&topic, 0, 0, bytes.clone(), true, None)
        .unwrap_or_else(|e| panic!("{}: does not decode: {e}", path.display()));
    assert!(!parsed.records.is_empty(), "{}: no records", path.display());
    let records = parsed.records.len();
    let mut g = c.benchmark_group("batch_corpus");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(records as u64));
    let entries: Vec<String> = MixedBatches::new(&bytes)
        .map(|b| b.map(|b| format!("magic {} {}", b.magic, b.compression.name())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: does not decode: {e}", path.display()));
    eprintln!(
        "batch_corpus: {}: {records} records, {} B, {} entries ({})",
        path.display(),
        bytes.len(),
        entries.len(),
        entries.join(", ")
    );
    g.bench_function("kafka snappy segment", |b| {
        b.iter(|| black_box(parse_records(&topic, 0, 0, black_box(bytes.clone()), true, None)))
    });
    g.finish();
}

criterion_group!(benches, crc, decode, header, corpus);
criterion_main!(benches);
