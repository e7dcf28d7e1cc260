//! Broker load figures (issue 15): what a `fetchbench serve` process costs and how it answers
//! under hostile and heavy load, measured over TCP from outside, so that the same tool measures
//! any `fetchbench` binary (the broker before a change and after it).
//!
//! ```sh
//! cargo bench --bench broker_load                                       # this tree's release binary
//! cargo bench --bench broker_load -- --broker-bin /path/to/fetchbench   # any other binary
//! cargo bench --bench broker_load -- --broker-bin B --scenarios bomb,idle --json out.json
//! ```
//!
//! Each scenario starts the binary as a child process, `B serve --listen 127.0.0.1:0 --log-dir
//! <temp dir> --read-path sendfile -X max.connections=1000000 -X max.connections.per.ip=1000000`
//! (its stderr in the temp dir, quoted when it fails), after raising this process's
//! `RLIMIT_NOFILE` soft limit to its hard limit (the child inherits it), and stops it with
//! SIGTERM afterwards. The temp dir is made in `--temp-dir` (default `/dev/shm`, a tmpfs, when
//! it exists): on a disk shared with other work the broker's per-partition fsyncs
//! (`partition.metadata` at creation, the leader-epoch checkpoint at a partition's first append,
//! every partition at shutdown) took 10-40 s for 1,000 partitions and dominated the run; the
//! figures here are about threads, locks and memory, not the disk. Nothing is pinned to a CPU.
//! Progress goes to stderr, a table to stdout, the figures as JSON to `--json FILE`. Nothing
//! here asserts a speed.
//!
//! Scenarios (`--scenarios`, comma-separated, default all, in this order):
//!
//! - `bomb`: topics `bomb` (4 partitions) and `healthy` (1 partition, 10 small records). A
//!   *healthy client* on its own connection sends, every 1 ms (closed loop: the next pair
//!   starts when both answers are in), a Fetch of `healthy`-0 from offset 0 (max wait 0) and
//!   a ListOffsets (latest) of it, each timed from send to answer read. Meanwhile bomb rounds:
//!   1 bomber, then 4 bombers at once (each on its own connection and partition, released
//!   together), each producing ONE batch (`acks=1`): a zstd RecordBatch v2 of one record whose
//!   value is `--bomb-mib` MiB (default 250) of zeros, about 8 KB on the wire (as in
//!   `tests/it/broker.rs` `r14_decompression_bomb_stalls_other_clients`), `--rounds` rounds of
//!   each (default 3). A round's window runs from the first bomb sent to the last answer read;
//!   the healthy requests overlapping a window count. Figures per bomber count: the healthy
//!   client's **max** and **p99** latency over the windows (issue 15's target: under 5 ms), their
//!   sample count, the longest bomb Produce round trip and the Produce error codes (0 when
//!   accepted); `baseline`: the same latencies over the 1 s before any bomb.
//! - `idle`: threads (entries of `/proc/<pid>/task`) and RSS (`VmRSS` of `/proc/<pid>/status`)
//!   of the broker just started, then after `--connections` (default 5,000) connections were
//!   opened, each answering one ApiVersions (so the broker has accepted and served it) and then
//!   left idle; the "after" figures are read once the thread count has not changed for 0.5 s
//!   (at most 5 s). Also: seconds to open them, and a fresh client's connect + ApiVersions +
//!   Metadata time with all of them open.
//! - `partitions`: topic `wide` of `--partitions` (default 1,000) partitions, created with
//!   CreateTopics and filled with 2 batches of 16 KiB a partition; one producer sends every
//!   5 ms a Produce (`acks=1`) of one 10-record batch (100-byte values, about 1.1 KB) to each of
//!   the next 10 partitions (round robin: about 2.2 MB/s, a partition gets a batch every
//!   0.5 s); `--consumers` (default 4) consumers, each on its own connection and each fetching
//!   ALL the partitions in every Fetch (4 independent readers, as 4 groups of one member would),
//!   from offset 0, with Kafka's consumer defaults (`fetch.min.bytes` 1, `fetch.max.wait.ms` 500,
//!   `fetch.max.bytes` 50 MiB, `max.partition.fetch.bytes` 1 MiB). After 3 s of warmup (the
//!   consumers catch up with the 32 MiB) `--seconds` (default 10) are measured: **Fetch
//!   latency** p50/p99/max of the Fetches that returned records, measured by the consumer from
//!   send to the whole answer read (the broker's own Fetch histogram is not exported by `serve`,
//!   so this is the client-side round trip on loopback, long-poll wait for the next append
//!   included, as Kafka's `FetchConsumer` `TotalTimeMs` includes it), the number of empty
//!   Fetches (long polls that expired), the Produce round-trip p99, MB/s fetched, and the
//!   broker's RSS, peak RSS (`VmHWM`) and threads at the end.
//! - `mixed`: `B run <workload> --json --no-limits --results-dir <temp>` with
//!   `fixtures/workloads/broker-load-mixed.toml` (the harness's `mixed` phase only: producers at
//!   10,000 records/s read at the head while a group of 4 drains a 2 GiB backlog; see
//!   `src/bench/mixed.rs`), run by the binary itself (its embedded broker, CPU pinning `auto`).
//!   Figures from its results JSON: **catch-up MB/s** (the drain's), **e2e p99** (and p50,
//!   p99.9; corrected for coordinated omission), the broker's Fetch p99, the producers' MB/s
//!   and the process's RSS.
//!
//! Without `--bench` and `--broker-bin` (that is, under `cargo test --benches`), it runs every
//! scenario once at toy sizes (a 4 MiB bomb, 50 connections, 20 partitions for 1 s, an 8 MiB
//! mixed backlog) against this tree's own `fetchbench` binary: a check that the tool works, not a
//! measurement. `--quick` asks for the same sizes explicitly.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use fetchbench::client::{admin, KafkaConnection};
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::metrics::Latency;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, ListOffsetsRequest, MetadataRequest, ProduceRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

/// The mixed workload of the full run (also a fixture: `fetchbench run` it by hand).
const MIXED_WORKLOAD: &str = include_str!("../fixtures/workloads/broker-load-mixed.toml");

/// The mixed workload of the toy run: a few seconds, sizes of `tests/it/bench_prodmix.rs`.
const MIXED_WORKLOAD_QUICK: &str = r#"name = "broker-load-mixed-quick"
partitions = 2
record_size = "1KiB"
backlog = "8MiB"
consumers_per_group = 2
phases = ["mixed"]
rate = 2000
warmup = "300ms"
read_paths = ["sendfile"]
"#;

/// Timeout of every client read and write (a bomb's Produce included).
const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// The scenarios, in the order they run.
const SCENARIOS: [&str; 4] = ["bomb", "idle", "partitions", "mixed"];

/// What to run, from the command line.
struct Options {
    broker_bin: PathBuf,
    scenarios: Vec<String>,
    json: Option<PathBuf>,
    read_path: String,
    temp_dir: PathBuf,
    quick: bool,
    bomb_mib: usize,
    rounds: usize,
    connections: usize,
    partitions: i32,
    consumers: usize,
    seconds: f64,
}

fn usage() -> &'static str {
    "usage: broker_load [--broker-bin PATH] [--scenarios bomb,idle,partitions,mixed] [--json FILE] \
     [--read-path NAME] [--temp-dir DIR] [--bomb-mib N] [--rounds N] [--connections N] [--partitions N] \
     [--consumers N] [--seconds S] [--quick]"
}

impl Options {
    fn parse() -> Result<Options> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let bench = args.iter().any(|a| a == "--bench");
        let explicit = args.iter().any(|a| a == "--broker-bin");
        // `cargo test --benches`: no `--bench`; its own arguments (filters, flags) are ignored.
        let quick = args.iter().any(|a| a == "--quick") || (!bench && !explicit);
        let mut o = Options {
            broker_bin: PathBuf::from(env!("CARGO_BIN_EXE_fetchbench")),
            scenarios: SCENARIOS.iter().map(|s| s.to_string()).collect(),
            json: None,
            read_path: "sendfile".into(),
            temp_dir: default_temp_dir(),
            quick,
            bomb_mib: if quick { 4 } else { 250 },
            rounds: if quick { 1 } else { 3 },
            connections: if quick { 50 } else { 5000 },
            partitions: if quick { 20 } else { 1000 },
            consumers: 4,
            seconds: if quick { 1.0 } else { 10.0 },
        };
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = || it.next().ok_or_else(|| anyhow!("{arg} needs a value\n{}", usage()));
            match arg.as_str() {
                "--bench" | "--quick" => {}
                "--broker-bin" => o.broker_bin = PathBuf::from(value()?),
                "--json" => o.json = Some(PathBuf::from(value()?)),
                "--read-path" => o.read_path = value()?,
                "--temp-dir" => o.temp_dir = PathBuf::from(value()?),
                "--scenarios" => {
                    o.scenarios = value()?.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                    if let Some(bad) = o.scenarios.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
                        bail!("unknown scenario {bad:?}: expected some of {}", SCENARIOS.join(","));
                    }
                }
                "--bomb-mib" => o.bomb_mib = value()?.parse().context("--bomb-mib")?,
                "--rounds" => o.rounds = value()?.parse().context("--rounds")?,
                "--connections" => o.connections = value()?.parse().context("--connections")?,
                "--partitions" => o.partitions = value()?.parse().context("--partitions")?,
                "--consumers" => o.consumers = value()?.parse().context("--consumers")?,
                "--seconds" => o.seconds = value()?.parse().context("--seconds")?,
                _ if quick => {}
                other => bail!("unknown argument {other:?}\n{}", usage()),
            }
        }
        if o.rounds == 0 || o.consumers == 0 || o.partitions < 1 || o.seconds <= 0.0 {
            bail!("--rounds, --consumers, --partitions and --seconds must be positive");
        }
        Ok(o)
    }
}

/// Where the brokers' log directories go: `/dev/shm` (tmpfs) when it is a directory, else the
/// system's temp directory.
fn default_temp_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

fn main() {
    let result = Options::parse().and_then(|o| run(&o));
    if let Err(e) = result {
        eprintln!("broker_load: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(o: &Options) -> Result<()> {
    let nofile = raise_nofile_limit();
    eprintln!(
        "broker_load: broker {} (read path {}, log directories in {}), RLIMIT_NOFILE {nofile}{}",
        o.broker_bin.display(),
        o.read_path,
        o.temp_dir.display(),
        if o.quick { ", toy sizes (a check of the tool, not a measurement)" } else { "" }
    );
    let mut figures = serde_json::Map::new();
    let mut table = String::new();
    for s in &o.scenarios {
        eprintln!("broker_load: scenario {s}");
        let started = Instant::now();
        let v = match s.as_str() {
            "bomb" => bomb(o),
            "idle" => idle(o),
            "partitions" => partitions(o),
            "mixed" => mixed(o),
            _ => unreachable!("checked when parsed"),
        }
        .with_context(|| format!("scenario {s}"))?;
        eprintln!("broker_load: scenario {s} took {:.1} s", started.elapsed().as_secs_f64());
        table.push_str(&rows(s, &v));
        figures.insert(s.clone(), v);
    }
    let doc = json!({
        "schema": "fetchbench-broker-load",
        "schema_version": 1,
        "broker_bin": o.broker_bin.display().to_string(),
        "read_path": o.read_path,
        "temp_dir": o.temp_dir.display().to_string(),
        "quick": o.quick,
        "rlimit_nofile": nofile,
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        "command": std::env::args().collect::<Vec<_>>(),
        "scenarios": figures,
    });
    print!("{:<28} {:<48} value\n{table}", "scenario", "figure");
    if let Some(path) = &o.json {
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("broker_load: wrote {}", path.display());
    }
    Ok(())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (children inherit it); returns the soft
/// limit now in force.
fn raise_nofile_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Err(_) => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// The broker process

/// A `fetchbench serve` child over a temp log directory; SIGTERM then wait on [`Self::stop`],
/// SIGKILL when dropped still running.
struct Broker {
    child: Option<Child>,
    addr: SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start(o: &Options) -> Result<Broker> {
        let dir = tempfile::Builder::new()
            .prefix("broker-load-")
            .tempdir_in(&o.temp_dir)
            .with_context(|| format!("creating a temp dir in {}", o.temp_dir.display()))?;
        let stderr = dir.path().join("serve.stderr");
        let file = std::fs::File::create(&stderr)?;
        let child = Command::new(&o.broker_bin)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--read-path", &o.read_path, "--log-dir"])
            .arg(dir.path().join("logs"))
            .args(["-X", "max.connections=1000000", "-X", "max.connections.per.ip=1000000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {} serve", o.broker_bin.display()))?;
        let mut broker = Broker { child: Some(child), addr: "0.0.0.0:0".parse()?, stderr, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = broker.stderr_text();
            if let Some(addr) = text.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next()) {
                broker.addr = addr.parse().with_context(|| format!("the listen address in {text:?}"))?;
                return Ok(broker);
            }
            if let Some(status) = broker.child.as_mut().expect("running").try_wait()? {
                bail!("the broker exited ({status}) before listening:\n{text}");
            }
            if Instant::now() > deadline {
                bail!("the broker did not print its listen address in 30 s:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Entries of `/proc/<pid>/task`.
    fn threads(&self) -> Result<usize> {
        let dir = format!("/proc/{}/task", self.pid());
        Ok(std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))?.count())
    }

    /// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes.
    fn status_bytes(&self, key: &str) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid());
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| anyhow!("no {key} in {path}"))
    }

    /// Fails (with the broker's stderr) when the broker has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.as_mut().expect("running").try_wait()? {
            bail!("the broker exited ({status}):\n{}", self.stderr_text());
        }
        Ok(())
    }

    /// SIGTERM, then waits up to 60 s for a clean exit (SIGKILL after that).
    fn stop(mut self) -> Result<()> {
        let mut child = self.child.take().expect("running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                eprintln!("broker_load: the broker stopped in {:.1} s after SIGTERM", started.elapsed().as_secs_f64());
                if !status.success() {
                    eprintln!("broker_load: note: the broker exited {status} on SIGTERM:\n{}", self.stderr_text());
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("the broker did not exit within 60 s of SIGTERM (killed)")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

fn connect(addr: SocketAddr) -> Result<KafkaConnection> {
    Ok(KafkaConnection::connect(addr, "broker-load", IO_TIMEOUT)?)
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A batch of `n` uncompressed records with `value_bytes`-byte values.
fn plain_batch(n: usize, value_bytes: usize) -> Result<Bytes> {
    let value = vec![b'v'; value_bytes];
    let mut b = BatchBuilder::new(0, Compression::None);
    for _ in 0..n {
        b.append(1_700_000_000_000, None, Some(&value), &[]);
    }
    Ok(Bytes::from(b.build()?))
}

/// Produce (`acks=1`) of one batch per `(partition, batch)` of `topic`; the error codes.
fn produce(conn: &mut KafkaConnection, topic: &str, batches: &[(i32, Bytes)]) -> Result<Vec<i16>> {
    let version = conn.version(ApiKey::Produce, (3, 12))?;
    let req = ProduceRequest::default().with_acks(1).with_timeout_ms(30_000).with_topic_data(vec![
        TopicProduceData::default().with_name(topic_name(topic)).with_partition_data(
            batches
                .iter()
                .map(|(p, b)| PartitionProduceData::default().with_index(*p).with_records(Some(b.clone())))
                .collect(),
        ),
    ]);
    let ResponseKind::Produce(r) = conn.call(ApiKey::Produce, version, RequestKind::Produce(req))? else {
        unreachable!("decode_response returns the requested API")
    };
    Ok(r.responses.iter().flat_map(|t| t.partition_responses.iter().map(|p| p.error_code)).collect())
}

/// Fails unless every code is 0.
fn all_ok(codes: &[i16], what: &str) -> Result<()> {
    match codes.iter().find(|&&c| c != 0) {
        Some(c) => bail!("{what}: Kafka error {c}"),
        None => Ok(()),
    }
}

/// A Fetch request of `topic` at `offsets` (one per partition, index = partition).
fn fetch_request(topic: &str, offsets: &[i64], max_wait_ms: i32, partition_max: i32) -> FetchRequest {
    FetchRequest::default().with_max_wait_ms(max_wait_ms).with_min_bytes(1).with_max_bytes(50 << 20).with_topics(vec![
        FetchTopic::default().with_topic(topic_name(topic)).with_partitions(
            offsets
                .iter()
                .enumerate()
                .map(|(p, &o)| {
                    FetchPartition::default()
                        .with_partition(p as i32)
                        .with_fetch_offset(o)
                        .with_partition_max_bytes(partition_max)
                })
                .collect(),
        ),
    ])
}

/// The offset after the last whole batch in `records` (`None` when it holds none): each batch
/// is base offset (8 bytes), length (4), ..., last offset delta (4 bytes at 23).
fn next_offset(mut records: &[u8]) -> Option<i64> {
    let mut next = None;
    while records.len() >= 27 {
        let base = i64::from_be_bytes(records[0..8].try_into().expect("8 bytes"));
        let len = i32::from_be_bytes(records[8..12].try_into().expect("4 bytes"));
        let total = 12 + usize::try_from(len).ok()?;
        if len < 15 || total > records.len() {
            break;
        }
        let delta = i32::from_be_bytes(records[23..27].try_into().expect("4 bytes"));
        next = Some(base + i64::from(delta) + 1);
        records = &records[total..];
    }
    next
}

/// Latency summary as JSON, in milliseconds.
fn ms_summary(l: &Latency) -> Value {
    let s = l.summary();
    json!({"count": s.count, "p50_ms": s.p50_us / 1e3, "p99_ms": s.p99_us / 1e3, "p999_ms": s.p999_us / 1e3,
           "max_ms": s.max_us / 1e3})
}

// ---------------------------------------------------------------------------------------------
// bomb

/// One healthy request: when it was sent and how long its answer took.
type Sample = (Instant, Duration);

fn bomb(o: &Options) -> Result<Value> {
    let started = Instant::now();
    let bomb = {
        let zeros = vec![0u8; o.bomb_mib << 20];
        let mut b = BatchBuilder::new(0, Compression::Zstd);
        b.append(1_700_000_000_000, Some(b"k"), Some(&zeros), &[]);
        Bytes::from(b.build()?)
    };
    eprintln!(
        "broker_load: bomb: {} bytes of zstd inflating to {} MiB (built in {:.1} s)",
        bomb.len(),
        o.bomb_mib,
        started.elapsed().as_secs_f64()
    );
    let mut broker = Broker::start(o)?;
    let addr = broker.addr;
    let mut admin_conn = connect(addr)?;
    admin::create_topics(&mut admin_conn, &[("bomb".into(), 4), ("healthy".into(), 1)], 30_000)?;
    all_ok(&produce(&mut admin_conn, "healthy", &[(0, plain_batch(10, 100)?)])?, "producing to healthy")?;

    let stop = Arc::new(AtomicBool::new(false));
    let healthy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || healthy_client(addr, &stop))
    };
    let baseline = Duration::from_millis(if o.quick { 200 } else { 1000 });
    std::thread::sleep(baseline);
    let baseline_end = Instant::now();
    // (bombers, window start, window end, longest Produce, error codes)
    let mut rounds: Vec<(usize, Instant, Instant, Duration, Vec<i16>)> = Vec::new();
    for bombers in [1usize, 4] {
        for round in 0..o.rounds {
            let conns = (0..bombers).map(|_| connect(addr)).collect::<Result<Vec<_>>>()?;
            let barrier = Arc::new(Barrier::new(bombers));
            let threads: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    let (barrier, bomb) = (Arc::clone(&barrier), bomb.clone());
                    std::thread::spawn(move || -> Result<(Instant, Instant, i16)> {
                        barrier.wait();
                        let t0 = Instant::now();
                        let codes = produce(&mut c, "bomb", &[(i as i32, bomb)])?;
                        Ok((t0, Instant::now(), codes.first().copied().unwrap_or(-1)))
                    })
                })
                .collect();
            let mut results = Vec::new();
            for t in threads {
                results.push(t.join().map_err(|_| anyhow!("a bomber panicked"))??);
            }
            let start = results.iter().map(|r| r.0).min().expect("bombers >= 1");
            let end = results.iter().map(|r| r.1).max().expect("bombers >= 1");
            let longest = results.iter().map(|r| r.1 - r.0).max().expect("bombers >= 1");
            let codes: Vec<i16> = results.iter().map(|r| r.2).collect();
            eprintln!(
                "broker_load: bomb: {bombers} bomber(s), round {}: {:.0} ms, error codes {codes:?}",
                round + 1,
                (end - start).as_secs_f64() * 1e3
            );
            rounds.push((bombers, start, end, longest, codes));
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    stop.store(true, Ordering::SeqCst);
    let samples = healthy.join().map_err(|_| anyhow!("the healthy client panicked"))??;
    broker.check_alive()?;
    let rss = broker.status_bytes("VmHWM")?;
    broker.stop()?;

    let mut base = Latency::new();
    for (_, d) in samples.iter().filter(|(t, d)| *t + *d <= baseline_end) {
        base.record_ns(d.as_nanos() as u64);
    }
    let mut out = serde_json::Map::new();
    out.insert("bomb_bytes".into(), json!(bomb.len()));
    out.insert("inflated_mib".into(), json!(o.bomb_mib));
    out.insert("rounds".into(), json!(o.rounds));
    out.insert("baseline".into(), ms_summary(&base));
    for bombers in [1usize, 4] {
        let mut lat = Latency::new();
        let mut longest = Duration::ZERO;
        let mut codes = Vec::new();
        let mut windows_ms = Vec::new();
        for (_, start, end, l, c) in rounds.iter().filter(|r| r.0 == bombers) {
            for (t, d) in &samples {
                if *t < *end && *t + *d > *start {
                    lat.record_ns(d.as_nanos() as u64);
                }
            }
            longest = longest.max(*l);
            codes.extend_from_slice(c);
            windows_ms.push((*end - *start).as_secs_f64() * 1e3);
        }
        out.insert(
            format!("bombers_{bombers}"),
            json!({"healthy": ms_summary(&lat), "longest_produce_ms": longest.as_secs_f64() * 1e3,
                   "windows_ms": windows_ms, "produce_error_codes": codes}),
        );
    }
    out.insert("broker_peak_rss_bytes".into(), json!(rss));
    Ok(Value::Object(out))
}

/// Fetch + ListOffsets of `healthy`-0, a pair every 1 ms (closed loop), until `stop`.
fn healthy_client(addr: SocketAddr, stop: &AtomicBool) -> Result<Vec<Sample>> {
    let mut c = connect(addr)?;
    let fetch_v = c.version(ApiKey::Fetch, (4, 12))?;
    let list_v = c.version(ApiKey::ListOffsets, (1, 7))?;
    let mut samples = Vec::new();
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let ResponseKind::Fetch(r) =
            c.call(ApiKey::Fetch, fetch_v, RequestKind::Fetch(fetch_request("healthy", &[0], 0, 1 << 20)))?
        else {
            unreachable!("decode_response returns the requested API")
        };
        samples.push((t, t.elapsed()));
        let p = &r.responses[0].partitions[0];
        if p.error_code != 0 || p.records.as_ref().is_none_or(|b| b.is_empty()) {
            bail!("healthy Fetch: error {} or no records", p.error_code);
        }
        let req =
            ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name("healthy"))
                .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)])]);
        let t = Instant::now();
        let ResponseKind::ListOffsets(r) = c.call(ApiKey::ListOffsets, list_v, RequestKind::ListOffsets(req))? else {
            unreachable!("decode_response returns the requested API")
        };
        samples.push((t, t.elapsed()));
        all_ok(&[r.topics[0].partitions[0].error_code], "healthy ListOffsets")?;
        next += Duration::from_millis(1);
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok(samples)
}

// ---------------------------------------------------------------------------------------------
// idle

fn idle(o: &Options) -> Result<Value> {
    let mut broker = Broker::start(o)?;
    std::thread::sleep(Duration::from_millis(300));
    let (threads_before, rss_before) = (broker.threads()?, broker.status_bytes("VmRSS")?);
    let started = Instant::now();
    let mut conns = Vec::with_capacity(o.connections);
    let mut error = None;
    for i in 0..o.connections {
        match connect(broker.addr) {
            Ok(c) => conns.push(c),
            Err(e) => {
                eprintln!("broker_load: idle: connection {} failed: {e:#}", i + 1);
                error = Some(format!("connection {}: {e:#}", i + 1));
                break;
            }
        }
    }
    let open_s = started.elapsed().as_secs_f64();
    // Settled: the thread count unchanged for 0.5 s, at most 5 s.
    let (mut last, mut since, deadline) = (broker.threads()?, Instant::now(), Instant::now() + Duration::from_secs(5));
    while since.elapsed() < Duration::from_millis(500) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = broker.threads()?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    let (threads_after, rss_after) = (broker.threads()?, broker.status_bytes("VmRSS")?);
    let t = Instant::now();
    let fresh = connect(broker.addr).and_then(|mut c| {
        let version = c.version(ApiKey::Metadata, (1, 12))?;
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic_name("idle-probe")))]))
            .with_allow_auto_topic_creation(false);
        c.call(ApiKey::Metadata, version, RequestKind::Metadata(req))?;
        Ok(())
    });
    let fresh_ms = t.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "broker_load: idle: {} connections in {open_s:.2} s: threads {threads_before} -> {threads_after}, \
         RSS {:.1} -> {:.1} MiB",
        conns.len(),
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0
    );
    let open = conns.len();
    drop(conns);
    broker.check_alive()?;
    broker.stop()?;
    Ok(json!({
        "connections_requested": o.connections, "connections_open": open,
        "open_error": error, "open_seconds": open_s,
        "threads_before": threads_before, "threads_after": threads_after,
        "rss_before_bytes": rss_before, "rss_after_bytes": rss_after,
        "fresh_client_ms": fresh.as_ref().map(|()| fresh_ms).ok(),
        "fresh_client_error": fresh.err().map(|e| format!("{e:#}")),
    }))
}

// ---------------------------------------------------------------------------------------------
// partitions

/// What one consumer measured.
#[derive(Default)]
struct ConsumerFigures {
    with_records: Latency,
    empty: u64,
    bytes: u64,
    partition_errors: u64,
}

fn partitions(o: &Options) -> Result<Value> {
    const TOPIC: &str = "wide";
    let n = o.partitions;
    let mut broker = Broker::start(o)?;
    let addr = broker.addr;
    let mut c = connect(addr)?;
    let t = Instant::now();
    admin::create_topics(&mut c, &[(TOPIC.into(), n)], 120_000)?;
    let create_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let fill = plain_batch(16, 1000)?;
    for _ in 0..2 {
        for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
            let batches: Vec<(i32, Bytes)> = chunk.iter().map(|&p| (p, fill.clone())).collect();
            all_ok(&produce(&mut c, TOPIC, &batches)?, "filling the partitions")?;
        }
    }
    let fill_s = t.elapsed().as_secs_f64();
    eprintln!("broker_load: partitions: {n} partitions created in {create_s:.1} s, filled in {fill_s:.1} s");

    let warmup = Duration::from_secs_f64(if o.quick { 0.3 } else { 3.0 });
    let measure_from = Instant::now() + warmup;
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..o.consumers)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> Result<ConsumerFigures> {
                let mut c = connect(addr)?;
                let version = c.version(ApiKey::Fetch, (4, 12))?;
                let mut offsets = vec![0i64; n as usize];
                let mut f = ConsumerFigures::default();
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let req = fetch_request(TOPIC, &offsets, 500, 1 << 20);
                    let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, version, RequestKind::Fetch(req))? else {
                        unreachable!("decode_response returns the requested API")
                    };
                    let took = t.elapsed();
                    all_ok(&[r.error_code], "Fetch")?;
                    let mut bytes = 0;
                    for p in r.responses.iter().flat_map(|t| t.partitions.iter()) {
                        if p.error_code != 0 {
                            f.partition_errors += 1;
                            continue;
                        }
                        let records = p.records.as_deref().unwrap_or(&[]);
                        bytes += records.len() as u64;
                        if let Some(next) = next_offset(records) {
                            offsets[p.partition_index as usize] = next;
                        }
                    }
                    if t >= measure_from {
                        f.bytes += bytes;
                        if bytes > 0 {
                            f.with_records.record_ns(took.as_nanos() as u64);
                        } else {
                            f.empty += 1;
                        }
                    }
                }
                Ok(f)
            })
        })
        .collect();
    let producer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> Result<Latency> {
            let mut c = connect(addr)?;
            let batch = plain_batch(10, 100)?;
            let mut lat = Latency::new();
            let (mut next_partition, mut next) = (0i32, Instant::now());
            while !stop.load(Ordering::SeqCst) {
                let batches: Vec<(i32, Bytes)> = (0..10).map(|i| ((next_partition + i) % n, batch.clone())).collect();
                next_partition = (next_partition + 10) % n;
                let t = Instant::now();
                all_ok(&produce(&mut c, TOPIC, &batches)?, "producing")?;
                if t >= measure_from {
                    lat.record_ns(t.elapsed().as_nanos() as u64);
                }
                next += Duration::from_millis(5);
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            Ok(lat)
        })
    };
    std::thread::sleep(warmup + Duration::from_secs_f64(o.seconds));
    let (rss, peak, threads) = (broker.status_bytes("VmRSS")?, broker.status_bytes("VmHWM")?, broker.threads()?);
    stop.store(true, Ordering::SeqCst);
    let measured = measure_from.elapsed().as_secs_f64();
    let produce_lat = producer.join().map_err(|_| anyhow!("the producer panicked"))??;
    let mut total = ConsumerFigures::default();
    for h in consumers {
        let f = h.join().map_err(|_| anyhow!("a consumer panicked"))??;
        total.with_records.merge(&f.with_records);
        total.empty += f.empty;
        total.bytes += f.bytes;
        total.partition_errors += f.partition_errors;
    }
    broker.check_alive()?;
    broker.stop()?;
    eprintln!(
        "broker_load: partitions: fetch p99 {:.2} ms over {} fetches with records, RSS {:.1} MiB",
        total.with_records.quantile_ns(0.99) as f64 / 1e6,
        total.with_records.count(),
        rss as f64 / 1048576.0
    );
    Ok(json!({
        "partitions": n, "consumers": o.consumers, "measured_seconds": measured, "create_seconds": create_s, "fill_seconds": fill_s,
        "fetch_with_records": ms_summary(&total.with_records), "fetch_empty": total.empty,
        "fetch_partition_errors": total.partition_errors,
        "fetched_mb_per_sec": total.bytes as f64 / 1e6 / measured,
        "produce": ms_summary(&produce_lat),
        "rss_bytes": rss, "peak_rss_bytes": peak, "threads": threads,
    }))
}

// ---------------------------------------------------------------------------------------------
// mixed

fn mixed(o: &Options) -> Result<Value> {
    let dir = tempfile::Builder::new().prefix("broker-load-mixed-").tempdir()?;
    let workload = dir.path().join("broker-load-mixed.toml");
    std::fs::write(&workload, if o.quick { MIXED_WORKLOAD_QUICK } else { MIXED_WORKLOAD })?;
    let stderr = dir.path().join("run.stderr");
    let out = Command::new(&o.broker_bin)
        .arg("run")
        .arg(&workload)
        .args(["--json", "--no-limits", "--results-dir"])
        .arg(dir.path().join("results"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&stderr)?)
        .output()
        .with_context(|| format!("running {} run", o.broker_bin.display()))?;
    let err_text = std::fs::read_to_string(&stderr).unwrap_or_default();
    if !out.status.success() {
        bail!("`fetchbench run` failed ({}):\n{err_text}", out.status);
    }
    let doc: Value = serde_json::from_slice(&out.stdout).context("the results JSON of `fetchbench run`")?;
    let entry = doc["paths"]
        .as_array()
        .and_then(|p| p.iter().find(|e| e["phase"] == "mixed"))
        .ok_or_else(|| anyhow!("no mixed entry in the results:\n{err_text}"))?;
    let e2e = &entry["end_to_end_latency"]["corrected"]["summary"];
    let fetch = &entry["fetch_latency"]["summary"];
    let ms = |v: &Value| v.as_f64().map(|us| us / 1e3);
    Ok(json!({
        "read_path": entry["read_path"], "seconds": entry["seconds"],
        "catch_up_mb_per_sec": entry["mb_per_sec"], "produced_mb_per_sec": entry["produced_mb_per_sec"],
        "e2e_p50_ms": ms(&e2e["p50_us"]), "e2e_p99_ms": ms(&e2e["p99_us"]), "e2e_p999_ms": ms(&e2e["p999_us"]),
        "e2e_count": e2e["count"],
        "broker_fetch_p99_ms": ms(&fetch["p99_us"]), "broker_fetch_count": fetch["count"],
        "process_rss_bytes": entry["broker_rss_bytes"],
        "notes": doc["notes"],
    }))
}

// ---------------------------------------------------------------------------------------------
// The table

fn rows(scenario: &str, v: &Value) -> String {
    let mut out = String::new();
    let mut row = |figure: &str, value: String| {
        let _ = writeln!(out, "{scenario:<28} {figure:<48} {value}");
    };
    let f = |x: &Value| x.as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
    let mib = |x: &Value| x.as_f64().map_or("-".to_string(), |x| format!("{:.1} MiB", x / 1048576.0));
    let lat =
        |x: &Value| format!("{} / {} / {} ms (n={})", f(&x["p50_ms"]), f(&x["p99_ms"]), f(&x["max_ms"]), x["count"]);
    match scenario {
        "bomb" => {
            row("healthy p50 / p99 / max, no bomb", lat(&v["baseline"]));
            for b in [1, 4] {
                let x = &v[format!("bombers_{b}")];
                row(&format!("healthy p50 / p99 / max, {b} bomb(s) at once"), lat(&x["healthy"]));
                row(
                    &format!("longest bomb Produce, {b} at once (errors)"),
                    format!("{} ms ({})", f(&x["longest_produce_ms"]), x["produce_error_codes"]),
                );
            }
            row("broker peak RSS (VmHWM)", mib(&v["broker_peak_rss_bytes"]));
        }
        "idle" => {
            row("threads before -> after", format!("{} -> {}", v["threads_before"], v["threads_after"]));
            row("RSS before -> after", format!("{} -> {}", mib(&v["rss_before_bytes"]), mib(&v["rss_after_bytes"])));
            row(
                "connections open (s to open)",
                format!("{} of {} ({} s)", v["connections_open"], v["connections_requested"], f(&v["open_seconds"])),
            );
            row("fresh client connect+Metadata", format!("{} ms", f(&v["fresh_client_ms"])));
        }
        "partitions" => {
            row("fetch with records p50 / p99 / max", lat(&v["fetch_with_records"]));
            row("empty fetches (expired long polls)", v["fetch_empty"].to_string());
            row("produce p50 / p99 / max", lat(&v["produce"]));
            row("fetched MB/s", f(&v["fetched_mb_per_sec"]));
            row(
                "broker RSS (peak), threads",
                format!("{} ({}), {}", mib(&v["rss_bytes"]), mib(&v["peak_rss_bytes"]), v["threads"]),
            );
        }
        "mixed" => {
            row("catch-up MB/s", f(&v["catch_up_mb_per_sec"]));
            row(
                "e2e p50 / p99 / p99.9",
                format!(
                    "{} / {} / {} ms (n={})",
                    f(&v["e2e_p50_ms"]),
                    f(&v["e2e_p99_ms"]),
                    f(&v["e2e_p999_ms"]),
                    v["e2e_count"]
                ),
            );
            row("broker fetch p99", format!("{} ms", f(&v["broker_fetch_p99_ms"])));
            row("process RSS", mib(&v["process_rss_bytes"]));
        }
        _ => {}
    }
    out
}
