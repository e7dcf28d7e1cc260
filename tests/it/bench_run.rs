//! `fetchbench run` and `fetchbench sweep` end to end on small workloads: the default flow
//! (catch-up and tail per read path on the embedded broker) writes JSON that validates, CSV and
//! SVG; the coordinated-omission correction through the real producer and consumers; a sweep
//! grid; an external target (`--bootstrap` to a `fetchbench serve` process); Ctrl-C writing what
//! was measured (also in the tail's warmup). And what the harness review (issue 7) found: the
//! tail phase uses `payload_file`, `git` in the results is the build's source, `--quiet` prints
//! nothing, runs in the same second keep their own results files, and an unknown
//! `[consumer_config]` key is refused when the workload loads.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fetchbench::bench::results::Results;
use fetchbench::bench::workload::Workload;

/// The fetchbench binary of this build, without the caller's `RUST_LOG`.
pub(crate) fn fetchbench() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fetchbench"));
    c.env_remove("RUST_LOG");
    c
}

/// A finished child's stdout and stderr, for assertion messages.
pub(crate) fn text(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The files in `dir` with extension `ext`, sorted.
pub(crate) fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == ext)).collect())
        .unwrap_or_default();
    v.sort();
    v
}

pub(crate) fn only_results(dir: &Path) -> Results {
    let json = files(dir, "json");
    assert_eq!(json.len(), 1, "{json:?}");
    Results::from_json(&std::fs::read_to_string(&json[0]).unwrap()).unwrap()
}

/// `fetchbench run --no-limits ARGS --results-dir RESULTS WORKLOAD`, which must succeed; its
/// one results file (validated). `what` prefixes the failure message.
pub(crate) fn run_ok(workload: &Path, results_dir: &Path, args: &[&str], what: &str) -> Results {
    let out = fetchbench()
        .args(["run", "--no-limits"])
        .args(args)
        .arg("--results-dir")
        .arg(results_dir)
        .arg(workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{what} failed:\n{}", text(&out));
    only_results(results_dir)
}

/// Writes `text` as `dir/workload.toml`.
pub(crate) fn write_workload(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("workload.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn tiny_workload_catch_up_and_tail_writes_json_csv_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "tiny"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "4MiB"
consumers_per_group = 2
rate = 1000
warmup = "500ms"
duration = "2s"
read_paths = ["copy", "sendfile"]

# The decoding consumer (the default is the drain consumer, see the windowed test).
[consumer_config]
"fetchbench.fetch.mode" = "decode"
"#,
    );
    let results_dir = dir.path().join("results");
    let out =
        fetchbench().args(["run", "--no-limits", "--results-dir"]).arg(&results_dir).arg(&workload).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("MB/s") && stdout.contains("catch_up") && stdout.contains("tail"), "{}", text(&out));
    let json = files(&results_dir, "json");
    assert_eq!(json.len(), 1);
    assert!(json[0].file_name().unwrap().to_string_lossy().ends_with("-tiny.json"), "{json:?}");
    assert!(json[0].with_extension("csv").is_file() && json[0].with_extension("svg").is_file());
    let svg = std::fs::read_to_string(json[0].with_extension("svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("sendfile"), "{}", &svg[..svg.len().min(300)]);
    assert!(svg.contains("tiny: 1 KiB records, 2 partitions, 1x2 consumers, page cache hot; catch_up of a 4 MiB"));
    assert!(svg.contains("(higher is better)") && svg.contains("(lower is better)"));
    let results = only_results(&results_dir);
    assert_eq!(results.target, "embedded");
    assert!(!results.interrupted);
    assert!(results.notes.iter().any(|n| n.contains("catch-up consumers: decode")), "{:?}", results.notes);
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("copy", "catch_up"), ("copy", "tail"), ("sendfile", "catch_up"), ("sendfile", "tail")]);
    for p in results.paths.iter().filter(|p| p.phase == "catch_up") {
        assert_eq!(p.records, 4096, "4 MiB of 1 KiB records, read once: {p:?}");
        assert!(p.bytes >= 4 << 20 && p.mb_per_sec > 0.0 && p.seconds > 0.0, "{p:?}");
        // Broker-side fetch latency from the broker, poll latency from the consumers.
        assert!(p.fetch_latency.summary.count > 0 && p.poll_latency.summary.count > 0, "{p:?}");
        assert!(p.rebalance_ms.is_some() && p.broker_rss_bytes > 0, "{p:?}");
        assert_eq!(p.end_to_end_latency.corrected.summary.count, 0);
    }
    for p in results.paths.iter().filter(|p| p.phase == "tail") {
        // 1000 records/s for a 2 s window: about 2000 records (the schedule is exact; allow
        // for the window's edges).
        assert!((1900..=2100).contains(&p.records), "{p:?}");
        assert_eq!(p.end_to_end_latency.corrected.summary.count, p.records);
        assert_eq!(p.end_to_end_latency.raw.summary.count, p.records);
        // Corrected latency is never below raw (intended <= actual send time).
        let (raw, corrected) = (&p.end_to_end_latency.raw.summary, &p.end_to_end_latency.corrected.summary);
        assert!(corrected.max_us >= raw.max_us && corrected.p50_us >= raw.p50_us, "{p:?}");
        assert!((p.seconds - 2.0).abs() < 0.01, "{p:?}");
    }
    let csv = std::fs::read_to_string(json[0].with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    // What limited each entry: a bound, its evidence and samples; a client-bound entry always
    // carries its warning in the table and the notes (whatever ran: no speed is asserted).
    assert!(stdout.contains("bound by"), "{stdout}");
    for p in &results.paths {
        let a = p.attribution.as_ref().unwrap_or_else(|| panic!("no attribution: {p:?}"));
        assert!(p.bound_by.is_some(), "{p:?}");
        assert!(!a.samples.is_empty() && a.summary.samples > 0 && !a.reason.is_empty(), "{a:?}");
        assert!((0.0..=1.0).contains(&a.client_busy), "{a:?}");
        let bytes: f64 = a.samples.iter().map(|s| s.mb_per_sec * 1e6 * s.seconds).sum();
        assert!((bytes - p.bytes as f64).abs() <= 1.0 + 1e-6 * p.bytes as f64, "samples add up to bytes: {a:?}");
        if p.bound_by == Some(fetchbench::bench::results::BoundBy::ClientCpu) {
            let w = format!("WARNING: {} {} was bound by the clients' CPU", p.read_path, p.phase);
            assert!(stdout.contains(&w) && results.notes.iter().any(|n| n.starts_with(&w)), "{stdout}");
        }
    }
}

/// Issue 29: the catch-up measured by time. With `catch_up_duration = "2s"` over a 4 MiB
/// backlog the groups read every partition again and again (staggered starts, back to the log
/// start at the end) for exactly the window; each pass is checked exact (a gap or a duplicate
/// fails the run), the records counted are those of polls inside the window (more than one
/// read of the backlog), and the bytes are their record-batch bytes.
#[test]
fn a_windowed_catch_up_reads_the_backlog_again_for_the_whole_window() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "window"
catch_up_duration = "2s"
partitions = 3
record_size = "1KiB"
backlog = "4MiB"
consumers_per_group = 2
warmup = "300ms"
phases = ["catch_up"]
read_paths = ["copy", "sendfile"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out =
        fetchbench().args(["run", "--no-limits", "--results-dir"]).arg(&results_dir).arg(&workload).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    assert_eq!(results.workload().unwrap().catch_up_duration, Duration::from_secs(2));
    assert_eq!(results.paths.len(), 2, "{:?}", results.paths);
    for p in &results.paths {
        assert!((p.seconds - 2.0).abs() < 1e-6, "the window is the clock: {p:?}");
        assert!(p.records > 4096, "more than one read of the 4096 records in 2 s: {p:?}");
        let per_record = p.bytes as f64 / p.records as f64;
        assert!((1024.0..1200.0).contains(&per_record), "record-batch bytes per 1 KiB record: {p:?}");
    }
    assert!(
        results.notes.iter().any(|n| n.contains("catch-up measured for 2.0 s") && n.contains("passes per partition")),
        "{:?}",
        results.notes
    );
    // The default consumers: drain mode, and the run says so.
    assert!(
        results.notes.iter().any(|n| n.contains("catch-up consumers: drain") && n.contains("1/16 batches")),
        "{:?}",
        results.notes
    );
}

/// `--repeat 3` (over the workload's `repeat = 2`: the flag wins): every read path measured 3
/// times in a rotated order over one backlog, each entry with its repetition; a summary per
/// path whose 95% intervals hold their means, the means those of the entries; the summary CSV
/// and the statistics table; the chart of the means, their intervals and merged histograms.
#[test]
fn repeats_give_rotated_entries_and_intervals_around_the_means() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "repeats"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "1MiB"
consumers_per_group = 1
phases = ["catch_up"]
warmup = 0
read_paths = ["copy", "sendfile"]
repeat = 2
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--repeat", "3", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = only_results(&results_dir);
    assert_eq!(r.workload().unwrap().repeat, 3, "the results say how many repetitions ran");
    let entries: Vec<(&str, u32)> = r.paths.iter().map(|p| (p.read_path.as_str(), p.repetition)).collect();
    assert_eq!(
        entries,
        [("copy", 0), ("sendfile", 0), ("sendfile", 1), ("copy", 1), ("copy", 2), ("sendfile", 2)],
        "rotated order"
    );
    assert!(r.paths.iter().all(|p| p.phase == "catch_up" && p.records == 1024), "{:?}", r.paths);
    assert_eq!(r.summary.len(), 2);
    for s in &r.summary {
        assert_eq!(s.samples, 3, "{s:?}");
        let values: Vec<f64> = r.paths.iter().filter(|p| p.read_path == s.read_path).map(|p| p.mb_per_sec).collect();
        let mb = s.figures.iter().find(|f| f.metric == "mb_per_sec").unwrap();
        let mean = values.iter().sum::<f64>() / 3.0;
        assert!((mb.mean - mean).abs() <= 1e-9 * mean, "{mb:?} vs {values:?}");
        assert!(mb.ci95_low.is_some(), "{mb:?}");
        for f in s.figures.iter().chain(&s.ratio_to_copy) {
            match (f.ci95_low, f.ci95_high) {
                (Some(lo), Some(hi)) => assert!(lo <= f.mean && f.mean <= hi, "{f:?}"),
                // A figure some repetitions lack (a ratio to a copy figure of 0): one sample.
                _ => assert!(f.samples < 2, "{f:?}"),
            }
        }
        assert_eq!(s.ratio_to_copy.is_empty(), s.read_path == "copy", "{s:?}");
    }
    let json = files(&results_dir, "json");
    let stem = json[0].file_stem().unwrap().to_string_lossy().to_string();
    let summary_csv = std::fs::read_to_string(results_dir.join(format!("{stem}-summary.csv"))).unwrap();
    assert!(summary_csv.starts_with("server_model,read_path,phase,of,metric,samples,mean,"), "{summary_csv}");
    assert!(summary_csv.contains("\nthreaded,sendfile,catch_up,ratio_to_copy,mb_per_sec,3,"), "{summary_csv}");
    let csv = std::fs::read_to_string(json[0].with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 7, "a line per entry: {csv}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("MB/s (mean ± 95% CI)") && stdout.contains(" ± "), "{stdout}");
    // The chart: one bar per path (the mean of all 3 repetitions, with its interval), one
    // Fetch latency curve per path from the repetitions' merged histograms.
    let svg = std::fs::read_to_string(json[0].with_extension("svg")).unwrap();
    assert_eq!(svg.matches(">\nmean of 3 runs, bars: 95% CI\n</text>").count(), 2, "{svg}");
    assert!(svg.contains("catch_up broker Fetch latency (no tail samples), histograms of 3 runs merged"), "{svg}");
    assert_eq!(svg.matches(">\nsendfile\n</text>").count(), 3, "two bar labels and a legend entry: {svg}");
}

/// The issue's coordinated-omission test, through the real tail phase: every producer stalls 1 s
/// inside a 1,000 records/s open-loop schedule. Measured from the intended send times, the
/// records due during the stall waited up to a second: p99.9 is at least ~500 ms. Measured from
/// the actual send times (raw), they did not.
#[test]
fn a_stalled_producer_shows_in_the_corrected_histogram_only() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "stall"
catch_up_duration = 0
partitions = 2
record_size = 100
consumers_per_group = 1
phases = ["tail"]
rate = 1000
warmup = 0
duration = "4s"
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--producer-stall", "1500:1000", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    assert_eq!(results.paths.len(), 1);
    let p = &results.paths[0];
    let (raw, corrected) = (&p.end_to_end_latency.raw.summary, &p.end_to_end_latency.corrected.summary);
    assert!(corrected.p999_us >= 500_000.0, "corrected p99.9 {} us: {p:?}", corrected.p999_us);
    assert!(corrected.max_us >= 900_000.0, "the first record due in the stall waited ~1 s: {corrected:?}");
    assert!(raw.p999_us < 500_000.0, "raw p99.9 {} us should not see the stall: {raw:?}", raw.p999_us);
}

#[test]
fn a_sweep_runs_every_grid_point() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "grid"
catch_up_duration = 0
partitions = [1, 2]
record_size = ["512B", "1KiB"]
backlog = "1MiB"
consumers_per_group = 1
phases = ["catch_up"]
warmup = 0
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["sweep", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let json = files(&results_dir, "json");
    assert_eq!(json.len(), 4, "{json:?}");
    let mut points = Vec::new();
    for j in &json {
        let r = Results::from_json(&std::fs::read_to_string(j).unwrap()).unwrap();
        let w = r.workload().unwrap();
        assert_eq!(r.paths[0].records, (1 << 20) / w.record_size, "{j:?}");
        points.push((w.partitions, w.record_size));
    }
    points.sort();
    assert_eq!(points, [(1, 512), (1, 1024), (2, 512), (2, 1024)]);
    let summary = files(&results_dir, "csv").into_iter().find(|p| p.to_string_lossy().ends_with("-grid-sweep.csv"));
    let summary = std::fs::read_to_string(summary.expect("the sweep summary")).unwrap();
    assert_eq!(summary.lines().count(), 5, "{summary}");
    assert!(summary.contains("partitions=2 record_size=512B") || summary.contains("partitions=2"), "{summary}");
}

/// A free loopback port (bound, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub(crate) struct Serve(pub(crate) std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_external_cluster_by_bootstrap() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let serve = Serve(
        fetchbench()
            .args(["serve", "--read-path", "sendfile", "-X", "group.initial.rebalance.delay.ms=0", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--log-dir")
            .arg(dir.path().join("logs"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let workload = write_workload(
        dir.path(),
        r#"
name = "external"
catch_up_duration = 0
partitions = 2
backlog = "2MiB"
consumers_per_group = 2
rate = 500
warmup = 0
duration = "1s"
"#,
    );
    let bootstrap = format!("127.0.0.1:{port}");
    let results = run_ok(&workload, &dir.path().join("results"), &["--bootstrap", &bootstrap], "the external run");
    drop(serve);
    assert_eq!(results.target, format!("bootstrap:127.0.0.1:{port}"));
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("external", "catch_up"), ("external", "tail")]);
    assert_eq!(results.paths[0].records, 2048);
    assert!(results.paths[1].records >= 450, "{:?}", results.paths[1]);
    assert!(results.paths[1].end_to_end_latency.corrected.summary.count > 0);
    // Nothing of the broker is measured from outside.
    assert_eq!(results.paths[0].fetch_latency.summary.count, 0);
    assert!(results.notes.iter().any(|n| n.contains("external cluster")), "{:?}", results.notes);
}

#[test]
fn ctrl_c_writes_what_was_measured() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "interrupted"
catch_up_duration = 0
partitions = 2
backlog = "2MiB"
consumers_per_group = 1
rate = 500
warmup = 0
duration = "120s"
read_paths = ["copy", "sendfile"]
"#,
    );
    let results_dir = dir.path().join("results");
    let mut child = fetchbench()
        .args(["run", "--no-limits", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Progress lines go to stderr (not a terminal): wait for the tail phase of copy.
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines.next().expect("stderr ended before the tail phase").unwrap();
        seen.push(line.clone());
        if line.contains("copy: tail") {
            break;
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "Ctrl-C took {:?}", started.elapsed());
    assert_eq!(status.code(), Some(130), "{seen:?} {rest:?}");
    let results = only_results(&results_dir);
    assert!(results.interrupted);
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("copy", "catch_up"), ("copy", "tail")], "sendfile never started");
    let tail = &results.paths[1];
    assert!(tail.seconds > 1.0 && tail.seconds < 30.0 && tail.records > 0, "{tail:?}");
    assert!(files(&results_dir, "csv").len() == 1 && files(&results_dir, "svg").len() == 1);
    // The records the interrupted schedule never sent are the interruption's, not the producers'.
    let notes = &results.notes;
    assert!(notes.iter().any(|n| n.starts_with("copy (tail): interrupted (Ctrl-C)")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("keep to the schedule") || n.contains("fell behind")), "{notes:?}");
}

/// The default workload's flow over a copy of a real Kafka broker's log directory: the
/// catch-up phase drains exactly the records Kafka wrote (cities-0: 11 records, offsets 0..10,
/// per the corpus README), the tail phase produces into the copied topic, and the source
/// directory is left as it was.
#[test]
fn a_copy_of_a_real_kafka_log_dir_is_the_backlog() {
    let Some(corpus) = crate::common::corpus() else { return };
    let src = corpus.join("kafka-segments/Bheem6005-kafka/kafka-logs");
    let before: Vec<(PathBuf, u64)> = walk(&src);
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "real"
catch_up_duration = 0
consumers_per_group = 1
rate = 500
warmup = 0
duration = "1s"
read_paths = ["copy", "mmap"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--results-dir"])
        .arg(&results_dir)
        .arg("--log-dir")
        .arg(&src)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let results = only_results(&results_dir);
    let paths: Vec<(&str, &str)> = results.paths.iter().map(|p| (p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(paths, [("copy", "catch_up"), ("copy", "tail"), ("mmap", "catch_up"), ("mmap", "tail")]);
    for p in results.paths.iter().filter(|p| p.phase == "catch_up") {
        assert_eq!((p.records, p.bytes), (11, 820), "cities-0: 11 records in 820 bytes: {p:?}");
    }
    for p in results.paths.iter().filter(|p| p.phase == "tail") {
        assert!(p.records >= 450 && p.end_to_end_latency.corrected.summary.count == p.records, "{p:?}");
    }
    assert_eq!(results.workload().unwrap().log_dir.as_deref(), Some(src.as_path()));
    assert_eq!(walk(&src), before, "the source log directory is untouched");
}

/// Every file under `dir` with its size, sorted.
fn walk(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push((p.clone(), p.metadata().unwrap().len()));
        }
    }
    out.sort();
    out
}

/// `payload_file` is a workload property ("values are cut from this file instead of generated
/// bytes"): the tail phase's producers must use it too. With an incompressible payload and
/// zstd, each tail record costs about `record_size` bytes of batch, as in the catch-up phase;
/// the reviewed harness sent its generated, highly compressible pattern instead (56 B per
/// 1 KiB record, while the catch-up backlog of the same workload took 1038 B per record).
#[test]
fn tail_phase_uses_the_payload_file() {
    let dir = tempfile::tempdir().unwrap();
    // Incompressible bytes (xorshift), 256 KiB.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let payload: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let payload_path = dir.path().join("payload.bin");
    std::fs::write(&payload_path, payload).unwrap();
    let workload = write_workload(
        dir.path(),
        &format!(
            r#"
name = "payload"
catch_up_duration = 0
partitions = 2
record_size = 1024
payload_file = "{}"
compression = "zstd"
rate = 1000
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "2s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
            payload_path.display()
        ),
    );
    let r = run_ok(&workload, &dir.path().join("results"), &["--quiet"], "the run");
    let tail = r.paths.iter().find(|p| p.phase == "tail").expect("a tail entry");
    assert!(tail.records > 0, "{tail:?}");
    let per_record = tail.bytes as f64 / tail.records as f64;
    assert!(
        per_record >= 0.9 * 1024.0,
        "tail: {per_record:.1} batch bytes per record of an incompressible 1 KiB payload under zstd: \
         the producers did not use payload_file"
    );
}

/// `git` in the results is "the source the binary was built from" (results.rs); the reviewed
/// harness ran `git rev-parse HEAD` in the current directory, so a run started inside any
/// other repository recorded that repository's commit and dirty flag.
#[test]
fn results_git_is_not_the_working_directorys_repository() {
    let has_git = Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_git {
        eprintln!("skipped: no git");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("other-repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.email=r@example.com", "-c", "user.name=review"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "unrelated"]);
    let other_head = git(&["rev-parse", "HEAD"]);
    let workload = write_workload(
        dir.path(),
        r#"
name = "git"
catch_up_duration = 0
partitions = 1
record_size = 64
rate = 200
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "1s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = only_results(&results_dir);
    assert_ne!(
        r.git.commit.as_deref(),
        Some(other_head.as_str()),
        "the results name the commit of the directory the run started in, not fetchbench's"
    );
}

/// `--quiet` is "for scripts": a successful run prints nothing. The reviewed harness let the
/// embedded broker's `WARN ... reading a frame; closing` log lines (a tail consumer closing)
/// through to stderr on every such run.
#[test]
fn quiet_run_prints_nothing_on_success() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "quiet"
catch_up_duration = 0
partitions = 2
record_size = 256
rate = 500
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "1s"
consumers_per_group = 2
read_paths = ["copy", "mmap", "sendfile"]

[consumer_config]
"fetch.max.wait.ms" = 10
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "--quiet printed:\n{}", text(&out));
}

/// Ctrl-C while the tail phase is still in its warmup: nothing was measured, so the results
/// must not hold an entry claiming broker CPU per GB computed over 0 bytes (the reviewed
/// harness wrote `seconds = 1e-9`, `bytes = 0` and broker CPU of ~1e11 s/GB, which `compare`
/// and the chart then treat as a measurement).
#[test]
fn ctrl_c_in_tail_warmup_reports_no_cost_over_zero_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "int"
catch_up_duration = 0
partitions = 1
record_size = 256
rate = 500
phases = ["tail"]
backlog = 0
warmup = "30s"
duration = "5s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let mut child = fetchbench()
        .args(["run", "--no-limits", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stderr is not a terminal: progress comes as `fetchbench: copy: tail` lines.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("copy: tail") {
                let _ = tx.send(());
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the tail phase started");
    // Past the group join, inside the 30 s warmup.
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let r = only_results(&results_dir);
    assert!(r.interrupted);
    for p in &r.paths {
        if p.bytes == 0 {
            let costs = [
                p.broker_cpu.user_s_per_gb,
                p.broker_cpu.sys_s_per_gb,
                p.consumer_cpu.user_s_per_gb,
                p.consumer_cpu.sys_s_per_gb,
                p.context_switches_per_gb,
                p.minor_faults_per_gb,
            ];
            assert!(
                costs.iter().all(|&c| c == 0.0),
                "{} {}: 0 bytes measured in {} s, yet per-GB costs {costs:?}",
                p.read_path,
                p.phase,
                p.seconds
            );
        }
    }
}

/// Results files are named `<UTC second>-<workload name>.json`: two runs of one workload that
/// start in the same second (parallel runs, scripts looping over short runs) must not
/// overwrite each other's results. The reviewed harness wrote both to the same three files
/// and exited 0 twice, silently losing one run.
#[test]
fn runs_in_the_same_second_do_not_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "same-second"
catch_up_duration = 0
partitions = 1
record_size = 64
backlog = "64KiB"
phases = ["catch_up"]
warmup = "0s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let children: Vec<_> = (0..3)
        .map(|_| {
            fetchbench()
                .args(["run", "--no-limits", "--quiet", "--results-dir"])
                .arg(&results_dir)
                .arg(&workload)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let json = std::fs::read_dir(&results_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|e| e == "json"))
        .count();
    assert_eq!(json, 3, "3 successful runs, {json} results files");
}

/// "A bad workload file gets an error that names the key and the allowed values": a
/// `[consumer_config]` name no consumer knows must be refused when the file is loaded (the
/// reviewed harness accepted it, wrote the backlog, started the broker, and only then failed
/// with `consumer_config.foo.bar: ... unknown consumer config`).
#[test]
fn unknown_consumer_config_is_refused_when_the_workload_loads() {
    let e = Workload::parse("[consumer_config]\n\"fetch.min.bytez\" = 1\n")
        .expect_err("an unknown consumer config name must be refused at load time");
    let msg = e.to_string();
    assert!(msg.contains("fetch.min.bytez"), "{msg}");
    let e = Workload::parse("[consumer_config]\n\"fetch.min.bytes\" = \"abc\"\n")
        .expect_err("a consumer config value the client cannot take must be refused at load time");
    assert!(e.to_string().contains("fetch.min.bytes"), "{e}");
}

/// Issue 16: one run over server model x read path. `threaded` runs both paths; `uring` refuses
/// `sendfile` (a blocking call on a core's loop: skipped with that reason, never swapped for
/// another path or model); `uring/uring-splice` either runs (entries under `uring`) or is
/// skipped with the reason the broker gave at start (a front end not built, or io_uring missing
/// here). Every entry names its model, in the JSON, the CSV and the table.
#[test]
fn server_models_times_read_paths_in_one_run() {
    use fetchbench::broker::ServerModel;
    use fetchbench::read_path::ReadPathKind;
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "models"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "1MiB"
consumers_per_group = 1
phases = ["catch_up"]
warmup = 0
read_paths = ["sendfile", "uring-splice"]
server_models = ["threaded", "uring"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out =
        fetchbench().args(["run", "--no-limits", "--results-dir"]).arg(&results_dir).arg(&workload).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = only_results(&results_dir);
    assert_eq!(r.workload().unwrap().server_models, [ServerModel::Threaded, ServerModel::Uring]);
    let ran: Vec<(Option<&str>, &str)> =
        r.paths.iter().map(|p| (p.server_model.as_deref(), p.read_path.as_str())).collect();
    let splice_here = ReadPathKind::UringSplice.probe().is_ok();
    let mut expected = vec![(Some("threaded"), "sendfile")];
    if splice_here {
        expected.push((Some("threaded"), "uring-splice"));
    } else {
        assert!(r.notes.iter().any(|n| n.starts_with("threaded/uring-splice: skipped: ")), "{:?}", r.notes);
    }
    let note = |prefix: &str| r.notes.iter().find(|n| n.starts_with(prefix)).cloned();
    // uring/sendfile: never run, the reason named (the model's probe when it cannot run here).
    let sendfile = note("uring/sendfile: skipped: server.model=uring cannot run").expect("uring/sendfile note");
    if ServerModel::Uring.probe().is_ok() {
        assert!(sendfile.contains("read path sendfile") && sendfile.contains("blocking"), "{sendfile}");
    }
    assert!(!ran.contains(&(Some("uring"), "sendfile")), "{ran:?}");
    // uring/uring-splice: a real result, or skipped with the broker's (or a probe's) reason.
    match note("uring/uring-splice: skipped: ") {
        Some(n) => assert!(n.contains("server.model=uring cannot run"), "{n}"),
        None => expected.push((Some("uring"), "uring-splice")),
    }
    assert_eq!(ran, expected, "notes: {:?}", r.notes);
    assert_eq!(r.notes.iter().filter(|n| n.contains(": skipped: ")).count(), 4 - expected.len(), "{:?}", r.notes);
    assert!(r.paths.iter().all(|p| p.records == 1024), "{:?}", r.paths);
    assert_eq!(r.summary.len(), expected.len());
    assert!(r.summary.iter().zip(&expected).all(|(s, e)| (s.server_model.as_deref(), s.read_path.as_str()) == *e));
    let json = files(&results_dir, "json");
    let csv = std::fs::read_to_string(json[0].with_extension("csv")).unwrap();
    assert!(csv.starts_with("server_model,read_path,phase,"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().starts_with("threaded,sendfile,catch_up,0,"), "{csv}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let header = stdout.lines().next().unwrap();
    assert!(header.starts_with("model") && header.contains("broker CPU s/GB"), "{stdout}");
    assert!(stdout.lines().nth(1).unwrap().starts_with("threaded  sendfile"), "{stdout}");
    let svg = std::fs::read_to_string(json[0].with_extension("svg")).unwrap();
    assert!(svg.contains(">\nthreaded/sendfile\n</text>"), "labels name the combination: {svg}");

    // --server-model wins over the workload; an unknown model is refused naming the known.
    let out = fetchbench()
        .args(["run", "--no-limits", "--server-model", "threaded,reactor", "--results-dir"])
        .arg(dir.path().join("refused"))
        .arg(&workload)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--server-model: expected a non-empty list of distinct server models from threaded, uring, found \"reactor\""
        ),
        "{stderr}"
    );
    let solo = run_ok(&workload, &dir.path().join("solo"), &["--server-model", "threaded"], "--server-model threaded");
    assert_eq!(solo.workload().unwrap().server_models, [ServerModel::Threaded]);
    assert!(solo.paths.iter().all(|p| p.server_model.as_deref() == Some("threaded")), "{:?}", solo.paths);
    assert!(solo.notes.iter().all(|n| !n.contains("uring/")), "{:?}", solo.notes);
}

/// Issue 29, item 6: the counts per GB that do not depend on time, under both server models.
/// Record bytes read into user space: about 1 per byte delivered for `copy` and
/// `uring-read-send` (a `pread` / `READ_FIXED` of every record byte), exactly 0 for `sendfile`
/// and `uring-splice`. System calls, counted by the kernel on the broker's threads: where
/// tracefs is mounted (`scripts/test.sh` says so in `FETCHBENCH_EXPECT_SYSCALL_COUNTS`) every
/// entry has them, and `copy` (a `pread` and a `write` per 64 KiB) makes more per GB than
/// `sendfile` (one call per record set); elsewhere every entry's is `null` and a note says why.
#[test]
fn counts_per_gb_under_both_server_models() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "counts"
catch_up_duration = "1s"
partitions = 2
record_size = "1KiB"
backlog = "16MiB"
consumers_per_group = 1
phases = ["catch_up"]
warmup = 0
read_paths = ["copy", "sendfile", "uring-read-send", "uring-splice"]
server_models = ["threaded", "uring"]
"#,
    );
    let r = run_ok(&workload, &dir.path().join("results"), &[], "counts");
    let expect = std::env::var_os(fetchbench::bench::counters::EXPECT_ENV).is_some();
    let counted = r.paths.iter().any(|p| p.syscalls_per_gb.is_some());
    assert!(counted || !expect, "tracefs is mounted but nothing was counted: {:?}", r.notes);
    let note = r.notes.iter().find(|n| n.starts_with("syscalls_per_gb not counted"));
    assert_eq!(note.is_some(), !counted, "{:?}", r.notes);
    let mut seen = Vec::new();
    for p in &r.paths {
        let what = format!("{}/{}", p.server_model.as_deref().unwrap_or("-"), p.read_path);
        let per_byte =
            p.user_copied_bytes_per_gb.unwrap_or_else(|| panic!("{what}: no user_copied_bytes_per_gb")) / 1e9;
        match p.read_path.as_str() {
            "copy" | "uring-read-send" => {
                assert!((0.95..1.2).contains(&per_byte), "{what}: {per_byte} bytes read per byte")
            }
            _ => assert_eq!(per_byte, 0.0, "{what}"),
        }
        assert_eq!(p.syscalls_per_gb.is_some(), counted, "{what}");
        if let Some(n) = p.syscalls_per_gb {
            assert!(n > 1_000.0, "{what}: {n} system calls per GB");
        }
        seen.push(what);
    }
    // Under uring the cores serve the io_uring paths (the others are skipped, named).
    for combo in ["threaded/copy", "threaded/sendfile", "uring/uring-read-send", "uring/uring-splice"] {
        let ran = seen.iter().any(|s| s == combo);
        let skipped = r.notes.iter().any(|n| n.starts_with(&format!("{combo}: skipped: ")));
        assert!(ran || skipped, "{combo}: neither measured nor skipped: {seen:?} {:?}", r.notes);
    }
    let syscalls = |path: &str| {
        r.paths.iter().find(|p| p.server_model.as_deref() == Some("threaded") && p.read_path == path)?.syscalls_per_gb
    };
    if let (Some(copy), Some(sendfile)) = (syscalls("copy"), syscalls("sendfile")) {
        assert!(copy > sendfile, "copy {copy} vs sendfile {sendfile} system calls per GB");
    }
    // The CSV carries both, the last two columns.
    let json = files(&dir.path().join("results"), "json");
    let csv = std::fs::read_to_string(json[0].with_extension("csv")).unwrap();
    assert!(csv.lines().next().unwrap().ends_with(",bound_by,syscalls_per_gb,user_copied_bytes_per_gb"), "{csv}");
}

/// Issue 18: `fixtures/workloads/read-committed.toml` shrunk to a tiny backlog (its sweep over
/// `isolation.level` kept): a transactional backlog of 2 partitions x 1024 records in
/// transactions of 64, one in four aborted, drained on two read paths. read_uncommitted
/// consumers receive all 2048 records; read_committed ones exactly the 1536 committed ones (12
/// committed transactions of 64 per partition) and no more (the run fails when a consumer
/// delivers a record of an aborted transaction, or more records than the committed ones); both
/// fetch the same bytes.
#[test]
fn read_committed_consumers_receive_the_committed_records_of_a_transactional_backlog() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/read-committed.toml");
    let mut w = Workload::from_file(&fixture).unwrap();
    assert_eq!(w.sweep.len(), 1, "the fixture sweeps the isolation level: {:?}", w.sweep);
    w.name = "rc".into();
    w.partitions = 2;
    w.backlog_bytes = 2 << 20;
    w.transaction_records = 64;
    w.aborted_transactions = 0.25;
    w.catch_up_duration = Duration::ZERO; // one drain: the counts below are one read of the backlog
    w.consumers_per_group = 2;
    w.warmup = Duration::from_millis(300);
    w.read_paths = vec![fetchbench::read_path::ReadPathKind::Copy, fetchbench::read_path::ReadPathKind::Sendfile];
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), &w.to_toml());
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["sweep", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut got = Vec::new();
    for j in files(&results_dir, "json") {
        let r = Results::from_json(&std::fs::read_to_string(&j).unwrap()).unwrap();
        let w = r.workload().unwrap();
        assert_eq!((w.transaction_records, w.aborted_transactions), (64, 0.25), "the results name the backlog");
        assert!(
            r.notes.iter().any(|n| n.contains("transactions of 64 records per partition")
                && n.contains("1536 records committed, 512 aborted")),
            "{:?}",
            r.notes
        );
        let entries: Vec<(String, String, u64, u64)> =
            r.paths.iter().map(|p| (p.read_path.clone(), p.phase.clone(), p.records, p.bytes)).collect();
        got.push((w.isolation_level().to_string(), entries));
    }
    got.sort();
    assert_eq!(got.len(), 2, "{got:?}");
    let (committed, uncommitted) = (&got[0], &got[1]);
    assert_eq!(committed.0, "read_committed");
    assert_eq!(uncommitted.0, "read_uncommitted");
    for (level, entries) in [committed, uncommitted] {
        let records = if level == "read_committed" { 1536 } else { 2048 };
        let paths: Vec<(&str, &str, u64)> = entries.iter().map(|e| (e.0.as_str(), e.1.as_str(), e.2)).collect();
        assert_eq!(paths, [("copy", "catch_up", records), ("sendfile", "catch_up", records)], "{level}");
    }
    // The same bytes served at both levels (the aborted batches and the markers included).
    let bytes = |entries: &[(String, String, u64, u64)]| entries.iter().map(|e| e.3).collect::<Vec<_>>();
    assert_eq!(bytes(&committed.1), bytes(&uncommitted.1));
    assert!(committed.1.iter().all(|e| e.3 > 2 << 20), "{committed:?}");
}
