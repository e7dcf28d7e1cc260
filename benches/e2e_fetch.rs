//! End-to-end fetch benches: an embedded broker and fetchbench's own consumer, per read path.
//!
//! `cargo bench --bench e2e_fetch` (`-- e2e_fetch/sendfile` to pick one; a short run:
//! `cargo bench --bench e2e_fetch -- --measurement-time 3 --warm-up-time 1`). Speed is measured
//! here, never asserted.
//!
//! Setup, once: a backlog of 32 MiB of 1 KiB values (32,768 records) over 4 partitions of topic
//! `bench-0`, written straight into a temp log directory through the public log API
//! ([`LogManager`], [`BatchBuilder`], `Partition::append`) as the harness's
//! `bench::backlog::generate` does: uncompressed batches of about 16 KiB (15 records), null keys
//! spread round-robin, each value starting with its write time (8-byte big-endian ns). Then, per
//! read path (copy, mmap, sendfile, uring-splice, uring-read-send, uring-send-zc; `null` and
//! `direct` are left out, a path whose
//! `probe()` fails here is skipped with the reason printed), a [`Broker`] on `127.0.0.1:0`
//! serving that directory with that path.
//!
//! One iteration: a new [`Consumer`] (Kafka's defaults, `check.crcs=true`) connects, `assign`s the
//! 4 partitions, seeks each to offset 0 and polls until it has every record of the backlog, each
//! offset exactly once in order (checked; a stall of 60 s fails the bench). Throughput is the
//! backlog's record-batch bytes on disk (what the broker moves). The page cache is hot: the
//! backlog was just written and every iteration reads all of it.
//!
//! The broker and the consumer share the machine: the figure is the whole pipeline (read path,
//! loopback TCP, the consumer's CRC checks and decoding), not the read path alone (for that:
//! `cargo bench --bench read_paths`).
//!
//! Samples are few (10, flat sampling, 5 s of measurement by default) so that
//! `cargo bench --bench e2e_fetch -- --test` (and `cargo test --benches`, one iteration per path)
//! stays quick.

use std::collections::HashMap;
use std::hint::black_box;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use fetchbench::broker::{Broker, BrokerConfig};
use fetchbench::client::consumer::{Consumer, ConsumerConfig, OffsetReset, TopicPartition};
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::log::manager::LogManager;
use fetchbench::log::LogConfig;
use fetchbench::read_path::ReadPathKind;

/// The topic the backlog is written to.
const TOPIC: &str = "bench-0";
/// Partitions of [`TOPIC`].
const PARTITIONS: i32 = 4;
/// Value bytes of the backlog.
const BACKLOG_BYTES: u64 = 32 << 20;
/// Bytes of one record's value.
const RECORD_SIZE: u64 = 1024;
/// Target size of one written batch (the producer's default `batch.size`).
const BATCH_BYTES: u64 = 16 * 1024;
/// The read paths measured, in report order.
const KINDS: [ReadPathKind; 6] = [
    ReadPathKind::Copy,
    ReadPathKind::Mmap,
    ReadPathKind::Sendfile,
    ReadPathKind::UringSplice,
    ReadPathKind::UringReadSend,
    ReadPathKind::UringSendZc,
];
/// A consumer that receives nothing for this long fails the bench.
const STALL: Duration = Duration::from_secs(60);

/// What [`write_backlog`] wrote.
struct Backlog {
    /// Records per partition (offsets 0..n, dense).
    per_partition: Vec<i64>,
    /// Records in all.
    records: u64,
    /// Record-batch bytes on disk over every partition.
    disk_bytes: u64,
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Writes the backlog (see the module docs) into the log directory `dir`, as the harness's
/// `bench::backlog::generate` does for a workload with these settings.
fn write_backlog(dir: &Path) -> Backlog {
    let (logs, _) = LogManager::open(dir, LogConfig::default(), |_| None, false).expect("open the log directory");
    let parts = PARTITIONS as usize;
    for p in 0..PARTITIONS {
        logs.get_or_create(TOPIC, p, None).expect("create the partition");
    }
    let total = BACKLOG_BYTES / RECORD_SIZE;
    let per_batch = (BATCH_BYTES / (RECORD_SIZE + 20)).max(1) as usize;
    let mut value: Vec<u8> = (0..RECORD_SIZE as usize).map(|i| (i % 251) as u8).collect();
    let mut open: Vec<Option<BatchBuilder>> = (0..parts).map(|_| None).collect();
    let flush = |logs: &LogManager, p: usize, b: BatchBuilder| {
        let bytes = b.build().expect("build a batch");
        let log = logs.partition(TOPIC, p as i32).expect("created above");
        log.append(&bytes, now().as_millis() as i64).expect("append a batch");
    };
    let mut per_partition = vec![0i64; parts];
    for i in 0..total {
        // Null keys: spread evenly, as the sticky partitioner does over time.
        let p = (i % parts as u64) as usize;
        let t = now();
        value[..8].copy_from_slice(&(t.as_nanos() as u64).to_be_bytes());
        let b = open[p].get_or_insert_with(|| BatchBuilder::new(0, Compression::None));
        b.append(t.as_millis() as i64, None, Some(&value), &[]);
        per_partition[p] += 1;
        if b.len() >= per_batch {
            let b = open[p].take().expect("just used");
            flush(&logs, p, b);
        }
    }
    for (p, b) in open.iter_mut().enumerate() {
        if let Some(b) = b.take() {
            flush(&logs, p, b);
        }
    }
    let mut disk_bytes = 0;
    for log in logs.partitions() {
        disk_bytes += log.log().size_in_bytes();
    }
    for log in logs.partitions() {
        let p = log.partition() as usize;
        assert_eq!(log.log_end_offset(), per_partition[p], "{TOPIC}-{p}: log end offset");
    }
    logs.shutdown().expect("shut the log directory down");
    Backlog { per_partition, records: total, disk_bytes }
}

/// One iteration: a consumer reads the whole backlog from `addr`; returns the records received.
///
/// # Panics
/// On a consumer error, an offset out of order or repeated, or a stall of [`STALL`].
fn consume_all(addr: SocketAddr, backlog: &Backlog) -> u64 {
    let mut config = ConsumerConfig::new(addr.to_string());
    config.auto_offset_reset = OffsetReset::None;
    let mut consumer = Consumer::new(config).expect("connect the consumer");
    let partitions: Vec<TopicPartition> = (0..PARTITIONS).map(|p| (TOPIC.to_string(), p)).collect();
    consumer.assign(&partitions).expect("assign");
    for tp in &partitions {
        consumer.seek(tp, 0).expect("seek to 0");
    }
    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut received = 0u64;
    let mut last_progress = Instant::now();
    while received < backlog.records {
        let records = consumer.poll(Duration::from_millis(100)).expect("poll");
        if records.is_empty() {
            assert!(last_progress.elapsed() < STALL, "no record for {STALL:?}, {received} of {}", backlog.records);
            continue;
        }
        last_progress = Instant::now();
        for r in &records {
            let expected = next.entry(r.partition).or_insert(0);
            assert_eq!(r.offset, *expected, "{}-{}: offset out of order", r.topic, r.partition);
            *expected += 1;
        }
        received += records.len() as u64;
        black_box(records);
    }
    for (p, &n) in backlog.per_partition.iter().enumerate() {
        assert_eq!(next.get(&(p as i32)).copied().unwrap_or(0), n, "{TOPIC}-{p}: records received");
    }
    consumer.close().expect("close the consumer");
    received
}

fn e2e_fetch(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("logs");
    let backlog = write_backlog(&dir);
    eprintln!(
        "e2e_fetch: backlog of {} records ({} MiB of values, {} B of batches on disk) over {TOPIC} x {PARTITIONS}",
        backlog.records,
        BACKLOG_BYTES >> 20,
        backlog.disk_bytes
    );
    let mut g = c.benchmark_group("e2e_fetch");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(backlog.disk_bytes));
    for kind in KINDS {
        if let Err(e) = kind.probe() {
            eprintln!("e2e_fetch/{kind}: skipped: {e}");
            continue;
        }
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        let broker = match Broker::start(BrokerConfig::new(listen, &dir, kind)) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("e2e_fetch/{kind}: skipped: the broker did not start: {e}");
                continue;
            }
        };
        let addr = broker.local_addr();
        g.bench_function(BenchmarkId::new(kind.name(), format!("{} MiB, 1KiB records", BACKLOG_BYTES >> 20)), |b| {
            b.iter(|| consume_all(addr, &backlog))
        });
        broker.shutdown().expect("shut the broker down");
    }
    g.finish();
}

criterion_group!(benches, e2e_fetch);
criterion_main!(benches);
