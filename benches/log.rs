//! Storage-engine benches: append throughput, offset-index lookup, CRC-32C validation.
//!
//! `cargo bench --bench log`. Speed is measured here, never asserted in tests.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fetchbench::log::batch::{BatchBuilder, Compression, RecordBatch};
use fetchbench::log::offset_index::OffsetIndex;
use fetchbench::log::partition::OpenOptions;
use fetchbench::log::{LogConfig, PartitionLog};

/// A 16 KiB batch of sixteen 1 KiB records (Kafka's default `batch.size`).
fn batch_16k() -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    let value = vec![0x5au8; 1000];
    for i in 0..16 {
        b.append(1_700_000_000_000 + i, Some(format!("key-{i:04}").as_bytes()), Some(&value), &[]);
    }
    b.build().unwrap()
}

fn append(c: &mut Criterion) {
    let batch = batch_16k();
    let mut g = c.benchmark_group("append");
    const PER_ITER: usize = 64; // 1 MiB per iteration
    g.throughput(Throughput::Bytes((batch.len() * PER_ITER) as u64));
    g.bench_function("1KiB records, 16KiB batches, page cache (no fsync)", |b| {
        b.iter_custom(|iters| {
            let tmp = tempfile::tempdir().unwrap();
            let mut n = 0u64;
            let mut total = Duration::ZERO;
            while n < iters {
                // A fresh log every 256 MiB keeps the disk footprint bounded.
                let dir = tmp.path().join(format!("bench-{n}"));
                let (mut log, _) = PartitionLog::open(&dir, LogConfig::default(), OpenOptions::default()).unwrap();
                let chunk = (iters - n).min(256);
                let start = Instant::now();
                for _ in 0..chunk {
                    for _ in 0..PER_ITER {
                        black_box(log.append(&batch, 0).unwrap());
                    }
                }
                total += start.elapsed();
                n += chunk;
                drop(log);
                std::fs::remove_dir_all(&dir).unwrap();
            }
            total
        })
    });
    g.finish();
}

fn index_lookup(c: &mut Criterion) {
    // The index of a full 1 GiB segment written with index.interval.bytes=4096 and 16 KiB batches:
    // one entry per batch after the first 4 KiB, i.e. 65,535 entries.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("00000000000000000000.index");
    let mut idx = OffsetIndex::open(&path, 0, 10 * 1024 * 1024).unwrap();
    let batch_size = 16 * 1024 + 61;
    let batches = (1u64 << 30) / batch_size as u64;
    for i in 1..batches {
        idx.append(i as i64 * 16 + 15, (i * batch_size as u64) as u32).unwrap();
    }
    let entries = idx.entries();
    let max_offset = batches as i64 * 16;
    let mut g = c.benchmark_group("offset_index");
    g.bench_function(format!("lookup in a full 1GiB segment ({entries} entries)"), |b| {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        b.iter(|| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            black_box(idx.lookup((x % max_offset as u64) as i64))
        })
    });
    g.finish();
}

fn crc(c: &mut Criterion) {
    let mut b = BatchBuilder::new(0, Compression::None);
    let value = vec![0x33u8; 1024];
    for i in 0..1024 {
        b.append(i, None, Some(&value), &[]);
    }
    let bytes = b.build().unwrap();
    let mut g = c.benchmark_group("crc32c");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("validate a 1 MiB batch", |bn| {
        bn.iter_batched(|| (), |_| black_box(RecordBatch::parse(&bytes).unwrap().is_crc_valid()), BatchSize::SmallInput)
    });
    g.finish();
}

criterion_group!(benches, append, index_lookup, crc);
criterion_main!(benches);
