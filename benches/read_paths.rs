//! Read-path benches: each read path x slice size (4 KiB, 64 KiB, 1 MiB, 16 MiB), moving a 32 MiB
//! segment file to a loopback TCP receiver thread that drains and discards, page cache hot; and a
//! cold-cache variant (1 MiB slices, the file evicted before every iteration).
//!
//! `cargo bench --bench read_paths` (`-- read_paths_hot/sendfile` to pick one). An iteration is one
//! `transfer` of one slice (hot) or one pass over the whole file (cold), timed until the receiver
//! has the last byte. Paths this machine cannot run (or that fail a first transfer) are skipped
//! with the reason printed. CPU per GB is not measured here: `fetchbench read-paths` reports it
//! (the same harness: `fetchbench::bench::loopback`). Speed is measured here, never asserted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fetchbench::bench::loopback::LoopbackReceiver;
use fetchbench::bench::usage::{evict_from_page_cache, resident_fraction};
use fetchbench::log::segment::SegmentFile;
use fetchbench::log::FileSlice;
use fetchbench::read_path::{AnyReadPath, ReadPath, ReadPathConfig, ReadPathKind};

/// The segment file: small enough to keep `cargo test --benches` cheap, a multiple of every slice.
const FILE_SIZE: u64 = 32 << 20;
const SLICES: [u64; 4] = [4 << 10, 64 << 10, 1 << 20, 16 << 20];
const COLD_SLICE: u64 = 1 << 20;

/// A temp segment file of `FILE_SIZE` bytes: real blocks with a byte pattern, synced (clean pages,
/// so eviction works), and read once (page-cache hot).
struct Fixture {
    _dir: tempfile::TempDir,
    segment: Arc<SegmentFile>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("00000000000000000000.log");
    let file = File::options().read(true).write(true).create_new(true).open(&path).expect("create the segment");
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    for position in (0..FILE_SIZE).step_by(chunk.len()) {
        file.write_all_at(&chunk, position).expect("write the segment");
    }
    file.sync_data().expect("sync the segment");
    drop(file);
    let segment = Arc::new(SegmentFile::open_read_only(&path).expect("open the segment"));
    warm(&path);
    Fixture { _dir: dir, segment }
}

/// Reads the file once so it is page-cached.
fn warm(path: &Path) {
    let file = File::open(path).expect("open");
    let mut buf = vec![0u8; 1 << 20];
    let mut position = 0;
    while position < FILE_SIZE {
        position += file.read_at(&mut buf, position).expect("read") as u64;
    }
}

/// The path, if it can run here and moves a first slice correctly; otherwise the reason.
fn ready(kind: ReadPathKind, segment: &Arc<SegmentFile>) -> Result<AnyReadPath, String> {
    let mut path = kind.create(&ReadPathConfig::default()).map_err(|e| e.to_string())?;
    let receiver = LoopbackReceiver::start().map_err(|e| format!("loopback receiver: {e}"))?;
    let slice = FileSlice { segment: Arc::clone(segment), position: 4096, len: 100_000 };
    let sent = path.transfer(&slice, receiver.socket()).map_err(|e| format!("a first transfer failed: {e}"))?;
    let received = receiver.finish().map_err(|e| format!("loopback receiver: {e}"))?;
    if sent != slice.len || received != slice.len {
        return Err(format!("a first transfer moved {sent} bytes, the receiver got {received}, of {}", slice.len));
    }
    let _ = path.take_stats();
    Ok(path)
}

fn label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}MiB", b >> 20),
        b => format!("{}KiB", b >> 10),
    }
}

fn hot(c: &mut Criterion) {
    let fx = fixture();
    let resident = resident_fraction(fx.segment.file()).expect("mincore");
    if resident < 0.99 {
        eprintln!("read_paths_hot: only {:.0}% of the file is page-cached (memory pressure?)", resident * 100.0);
    }
    let mut g = c.benchmark_group("read_paths_hot");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for kind in ReadPathKind::ALL {
        let mut path = match ready(kind, &fx.segment) {
            Ok(p) => p,
            Err(reason) => {
                eprintln!("read_paths_hot/{kind}: skipped: {reason}");
                continue;
            }
        };
        let receiver = LoopbackReceiver::start().expect("loopback receiver");
        let mut sent = 0u64;
        for slice_size in SLICES {
            // Consecutive slices over the file, built outside the timed loop.
            let slices: Vec<FileSlice> = (0..FILE_SIZE / slice_size)
                .map(|i| FileSlice { segment: Arc::clone(&fx.segment), position: i * slice_size, len: slice_size })
                .collect();
            let mut next = 0usize;
            g.throughput(Throughput::Bytes(slice_size));
            g.bench_function(BenchmarkId::new(kind.name(), label(slice_size)), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let slice = &slices[next];
                        next = (next + 1) % slices.len();
                        sent += path.transfer(slice, receiver.socket()).unwrap_or_else(|e| panic!("{kind}: {e}"));
                    }
                    receiver.wait_for(sent).expect("the receiver");
                    start.elapsed()
                })
            });
        }
        drop(path);
        let received = receiver.finish().expect("the receiver");
        assert_eq!(received, sent, "{kind}: bytes received");
    }
    g.finish();
}

fn cold(c: &mut Criterion) {
    let fx = fixture();
    let slices: Vec<FileSlice> = (0..FILE_SIZE / COLD_SLICE)
        .map(|i| FileSlice { segment: Arc::clone(&fx.segment), position: i * COLD_SLICE, len: COLD_SLICE })
        .collect();
    let mut g = c.benchmark_group("read_paths_cold");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes(FILE_SIZE));
    for kind in ReadPathKind::ALL {
        let mut path = match ready(kind, &fx.segment) {
            Ok(p) => Some(p),
            Err(reason) => {
                eprintln!("read_paths_cold/{kind}: skipped: {reason}");
                continue;
            }
        };
        let receiver = LoopbackReceiver::start().expect("loopback receiver");
        let mut sent = 0u64;
        let mut worst_resident = 0.0f64;
        g.bench_function(BenchmarkId::new(kind.name(), label(COLD_SLICE)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Untimed: drop the path (unmapping what it mapped: mapped pages are not
                    // evicted), fdatasync + fadvise(DONTNEED), check with mincore, recreate it.
                    drop(path.take());
                    evict_from_page_cache(fx.segment.file()).expect("evict");
                    worst_resident = worst_resident.max(resident_fraction(fx.segment.file()).expect("mincore"));
                    let p = path.insert(kind.create(&ReadPathConfig::default()).expect("recreate the path"));
                    let start = Instant::now();
                    for slice in &slices {
                        sent += p.transfer(slice, receiver.socket()).unwrap_or_else(|e| panic!("{kind}: {e}"));
                    }
                    receiver.wait_for(sent).expect("the receiver");
                    total += start.elapsed();
                }
                total
            })
        });
        if worst_resident > 0.01 {
            eprintln!(
                "read_paths_cold/{kind}: up to {:.0}% of the file was still cached before an iteration \
                 (eviction is advisory; tmpfs never evicts): not fully cold",
                worst_resident * 100.0
            );
        }
        drop(path);
        let received = receiver.finish().expect("the receiver");
        assert_eq!(received, sent, "{kind}: bytes received");
    }
    g.finish();
}

criterion_group!(benches, hot, cold);
criterion_main!(benches);
