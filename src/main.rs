//! The `fetchbench` command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use fetchbench::bench::read_paths;
use fetchbench::client::produce_cmd::parse_bytes;
use fetchbench::log::dump::{self, DumpOptions};
use fetchbench::protocol::consumer_offsets;
use fetchbench::read_path::{ReadPathConfig, ReadPathKind};

/// fetchbench: what it costs to move Kafka log data from disk to consumers.
#[derive(Parser)]
#[command(name = "fetchbench", version, about)]
struct Cli {
    /// Log level filter (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn")]
    log_level: tracing::Level,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tools for Kafka log directories and segment files.
    #[command(subcommand)]
    Log(LogCommand),
    /// Measure each read path moving a page-cached file to a loopback TCP receiver: GB/s, CPU
    /// seconds per GB (process-wide, so io_uring worker threads count), system calls per MB, and,
    /// with `--limits`, each path as a ratio to this machine's limits (scripts/baseline-limits.sh).
    ReadPaths(ReadPathsArgs),
    /// Run a single-node Kafka broker (node 0, leader of every partition, coordinator of every
    /// group and transactional id) on the wire protocol: topics (Metadata, CreateTopics), produce
    /// (idempotent and transactional), fetch (long polling, through `--read-path`; read_committed),
    /// offsets (ListOffsets, OffsetForLeaderEpoch), the classic consumer-group coordinator and the
    /// transaction coordinator; README lists the API versions. Runs until SIGINT or SIGTERM, then shuts down cleanly (logs flushed,
    /// checkpoints and `.kafka_cleanshutdown` written) and exits 0; a second signal during that
    /// shutdown is ignored (SIGKILL stops at once, and the next start recovers).
    Serve(ServeArgs),
    /// Consumer groups of a running broker (any Kafka broker): without `--group`, every group
    /// with its state; with `--group`, its state, generation, protocol, members and their
    /// assignments, and committed offsets with log end offsets and lag.
    Groups(GroupsArgs),
    /// Load a topic with fetchbench's producer (any Kafka broker) and print records, bytes,
    /// seconds, records/s, MB/s and errors; each value starts with its send time (8-byte
    /// big-endian ns since the Unix epoch), see `client::produce_cmd`.
    Produce(fetchbench::client::produce_cmd::ProduceArgs),
    /// Consume a topic with fetchbench's consumer, one record per line like kcat (`--count`:
    /// throughput only); see `client::consume_cmd`.
    Consume(fetchbench::client::consume_cmd::ConsumeArgs),
    /// Compare two results files of `fetchbench run` (or two of `read-paths --json`) side by side
    /// with ratios. A metric is a regression when it moved the wrong way by more than
    /// `--threshold` and, when both files have 2 or more repetitions (`run --repeat`), a
    /// one-sided Welch t-test finds it worse at alpha 0.05; with one sample on a side the
    /// threshold alone decides. Every metric is gated unless `--metrics` names some (each test
    /// can flag noise: gate few). Exit 0 none, 1 a regression, 2 bad input.
    Compare(fetchbench::bench::compare::CompareArgs),
    /// Write one self-contained HTML page (no network access to view it) of results files of
    /// `fetchbench run` or `read-paths --json`: the runs side by side (machine, command,
    /// workload), a warning when they come from different machines, each path's ratio to
    /// `copy`, every entry's figures (with 95% intervals over repeats) and the charts; see
    /// `bench::report`. Exit 0 written, 2 bad input.
    Report(fetchbench::bench::report::ReportArgs),
    /// Run a workload (the default one without a file): per read path, an embedded broker
    /// (or `--bootstrap` a cluster), a catch-up read of the backlog and a tail read behind a
    /// rate-limited producer; writes `<results-dir>/<UTC time>-<name>.json`, `.csv`, `.svg`
    /// and prints a table; see `bench::run`.
    Run(fetchbench::bench::run::RunArgs),
    /// Run every grid point of a sweep workload (list values expand to a grid), each
    /// writing its results files, plus a summary CSV.
    Sweep(fetchbench::bench::run::SweepArgs),
}

#[derive(clap::Args, Debug)]
struct GroupsArgs {
    /// The broker, `host:port` (a comma-separated list: the first that answers).
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// The group to describe.
    #[arg(long)]
    group: Option<String>,
    /// Seconds to wait for the broker's answers.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (port 0: any free port, printed at start). Default: the first
    /// PLAINTEXT entry of `listeners` in the config, else 127.0.0.1:9092.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The log directory (created when missing). Default: the first of `log.dirs` (or `log.dir`)
    /// in the config; one of the two is required.
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// A Kafka `server.properties` file (Java properties). Its keys are applied as `-X` keys are,
    /// and `-X` wins over it; Kafka keys that do not apply to one node (replication, KRaft,
    /// threads, ...) are logged once each and ignored, unknown keys are refused.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How Fetch responses move record bytes: copy, mmap, sendfile, splice, uring-splice,
    /// uring-read-send, uring-send-zc, msg-zerocopy, direct [default: sendfile]. Wins over
    /// `read.path` in the config (a dynamic broker config: IncrementalAlterConfigs changes it).
    #[arg(long)]
    read_path: Option<ReadPathKind>,
    /// How connections are run: `threaded` (Kafka's network and io threads) or `uring` (one
    /// io_uring loop per core). Wins over `server.model` in the config (a dynamic broker
    /// config: IncrementalAlterConfigs moves new connections to another model).
    #[arg(long)]
    server_model: Option<fetchbench::broker::ServerModel>,
    /// A broker config with Kafka's name, `key=value` (repeatable): `num.partitions`,
    /// `auto.create.topics.enable`, `socket.request.max.bytes`, `max.connections`,
    /// `max.connections.per.ip`, `group.*`, `offsets.topic.num.partitions`,
    /// `offsets.retention.minutes`, `offset.metadata.max.bytes`, `transaction.*` (the transaction
    /// coordinator), `log.dirs`, `listeners`, `advertised.listeners`, `log.*`, `server.model`, `read.path`, `metrics.listen`.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

#[derive(Subcommand)]
enum LogCommand {
    /// Print batches, records and index entries of `.log`, `.index`, `.timeindex` and `.txnindex` files, like
    /// Kafka's `kafka-dump-log.sh --deep-iteration`. Exits 1 when any CRC, batch or index entry is
    /// invalid, when offsets are missing between two segments of a topic not known to be
    /// compacted, or when nothing was found to check, naming the file and position; 2 on an I/O
    /// error.
    Dump(DumpArgs),
}

#[derive(Args)]
struct DumpArgs {
    /// Files (`.log`, `.index`, `.timeindex`, `.txnindex`) or directories (searched recursively).
    #[arg(required_unless_present = "files")]
    paths: Vec<PathBuf>,
    /// Kafka's spelling: comma-separated files to dump (same as the positional paths).
    #[arg(long, value_delimiter = ',')]
    files: Vec<PathBuf>,
    /// Decode every record (decompressing) and check every index entry against its `.log`;
    /// print one line per file, the problems and a summary.
    #[arg(long)]
    verify: bool,
    /// Print record keys and values: `__consumer_offsets` records decoded, control records and
    /// KRaft metadata records described (Kafka: `--print-data-log`).
    #[arg(long, alias = "print-data-log")]
    print_records: bool,
    /// Comma-separated topics whose `cleanup.policy` includes `compact`: offsets missing between
    /// their segments are expected, not a hole (a log directory does not record topic configs;
    /// Kafka's internal topics and logs whose batches show compaction are never flagged).
    #[arg(long, value_delimiter = ',', value_name = "TOPIC")]
    compacted: Vec<String>,
    /// Accepted for Kafka compatibility: records are always iterated (Kafka's `--deep-iteration`).
    #[arg(long, hide = true)]
    deep_iteration: bool,
    /// Accepted for Kafka compatibility: `__consumer_offsets` partitions are always decoded
    /// (Kafka's `--offsets-decoder`).
    #[arg(long, hide = true)]
    offsets_decoder: bool,
}

#[derive(Args)]
struct ReadPathsArgs {
    /// The file to move (any file; read only). Default: a temp file of `--size` bytes.
    #[arg(long, conflicts_with = "size")]
    file: Option<PathBuf>,
    /// Size of the temp file to create (bytes; K/M/G/KiB/MiB/GiB suffixes are powers of 1024).
    #[arg(long, value_parser = parse_bytes, default_value = "256MiB")]
    size: u64,
    /// Directory for the temp file (it must be on the disk under test, not tmpfs, for `--cold`).
    #[arg(long)]
    temp_dir: Option<PathBuf>,
    /// Bytes per `transfer` call.
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB")]
    slice: u64,
    /// Bytes to move per path, after a warm-up pass over the file.
    #[arg(long, value_parser = parse_bytes, default_value = "2GiB")]
    total: u64,
    /// Buffer size of `copy` and `direct`, and of each of the 4 registered buffers of
    /// `uring-read-send` and `uring-send-zc` (`null` uses at least 1 MiB).
    #[arg(long, value_parser = parse_bytes, default_value = "64KiB")]
    buffer_size: u64,
    /// Pipe size of `splice` and `uring-splice`, set with F_SETPIPE_SZ (bounded by /proc/sys/fs/pipe-max-size).
    #[arg(long, value_parser = parse_bytes, default_value = "1MiB")]
    pipe_size: u64,
    /// Comma-separated read paths (null, copy, mmap, sendfile, splice, uring-splice,
    /// uring-read-send, uring-send-zc, msg-zerocopy, direct), also as
    /// `--read-path NAME` (repeatable). Default: all.
    #[arg(long, alias = "read-path", value_delimiter = ',')]
    paths: Vec<ReadPathKind>,
    /// Page cache cold: fdatasync + posix_fadvise(DONTNEED) before each pass over the file,
    /// checked with mincore.
    #[arg(long)]
    cold: bool,
    /// This machine's limits: the JSON printed by scripts/baseline-limits.sh.
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Print the results document instead of the table: JSON of the same schema as `fetchbench
    /// run` (`fetchbench-results`, target `loopback`, one entry per path of phase `loopback`), which
    /// `fetchbench compare` reads.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.command {
        Command::Log(LogCommand::Dump(a)) => log_dump(a),
        Command::Serve(a) => match serve(a) {
            Ok(code) => code,
            Err(e) => {
                say(format_args!("error: {}", error_chain(&e)));
                ExitCode::from(2)
            }
        },
        Command::Produce(a) => fetchbench::client::produce_cmd::main(a),
        Command::Consume(a) => fetchbench::client::consume_cmd::main(a),
        Command::Compare(a) => fetchbench::bench::compare::main(a),
        Command::Report(a) => fetchbench::bench::report::main(a),
        Command::Run(a) => fetchbench::bench::run::main(a),
        Command::Sweep(a) => fetchbench::bench::run::sweep_main(a),
        Command::Groups(a) => match groups(a) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                say(format_args!("error: {e}"));
                ExitCode::from(2)
            }
        },
        Command::ReadPaths(a) => match read_paths(a) {
            Ok(code) => code,
            Err(e) => {
                // The outermost message only: the library's errors name their cause themselves.
                say(format_args!("error: {e}"));
                ExitCode::from(2)
            }
        },
    }
}

/// An error and its causes, `a: b: c`, leaving out a cause whose text the message already
/// contains (the library's errors name their cause in their message and as `source`).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
    }
    out
}

/// `fetchbench groups`: ListGroups, or one group's report (`client::admin`). `Ok(false)`: the
/// group does not exist (Kafka's tool says so too).
fn groups(args: GroupsArgs) -> Result<bool, fetchbench::client::ClientError> {
    use fetchbench::client::{admin, KafkaConnection};
    let timeout = std::time::Duration::from_secs(args.timeout.max(1));
    // A bootstrap list: the first broker that answers.
    let mut last_error = None;
    let mut conn = None;
    for broker in args.bootstrap.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        match KafkaConnection::connect(broker, "fetchbench-groups", timeout) {
            Ok(c) => {
                conn = Some(c);
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let Some(mut conn) = conn else {
        return Err(last_error.unwrap_or(fetchbench::client::ClientError::Io {
            context: "--bootstrap".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no broker address given"),
        }));
    };
    match args.group {
        Some(group) => {
            let report = admin::describe_group(&mut conn, &group)?;
            if report.state == "Dead" && report.members.is_empty() && report.partitions.is_empty() {
                say(format_args!("consumer group {group:?} does not exist"));
                return Ok(false);
            }
            print!("{}", admin::format_report(&report));
        }
        None => {
            let listed = admin::list_groups(&mut conn)?;
            println!("{:<40} {:<20} {:<14}", "GROUP", "STATE", "PROTOCOL-TYPE");
            for g in listed {
                let state = if g.state.is_empty() { "-" } else { g.state.as_str() };
                let kind = if g.protocol_type.is_empty() { "-" } else { g.protocol_type.as_str() };
                println!("{:<40} {:<20} {:<14}", g.group_id, state, kind);
            }
        }
    }
    Ok(true)
}

/// Writes a line to stderr, ignoring a closed stderr (never panics, unlike `eprintln!`).
fn say(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

fn log_dump(a: DumpArgs) -> ExitCode {
    let opts = DumpOptions {
        verify: a.verify,
        print_records: a.print_records,
        compacted_topics: a.compacted,
        offsets_decoder: Some(consumer_offsets::dump_record),
    };
    let paths: Vec<PathBuf> = a.paths.into_iter().chain(a.files).collect();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = dump::dump_paths(&paths, &opts, &mut out).and_then(|s| {
        out.flush().map_err(|e| fetchbench::log::LogError::io("write", "<output>", e))?;
        Ok(s)
    });
    match result {
        Ok(summary) if summary.problems.is_empty() => ExitCode::SUCCESS,
        Ok(summary) => {
            for p in &summary.problems {
                say(format_args!("invalid: {p}"));
            }
            ExitCode::from(1)
        }
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Err(fetchbench::log::LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(format_args!("error: {e}"));
            ExitCode::from(2)
        }
    }
}

/// `fetchbench serve`: start the broker, serve until SIGINT or SIGTERM, then shut down cleanly.
///
/// Signals: SIGINT and SIGTERM are blocked here, before the broker starts any thread (every
/// thread inherits the mask, so none of them takes the signal), and this thread waits for them
/// with `sigwait` ([`SigSet::wait`]): no signal handler runs, so nothing async-signal-unsafe can
/// happen in one. After the first signal the signals stay blocked: a second one during the
/// shutdown is ignored and the shutdown finishes (it is bounded: flush, checkpoints, marker);
/// SIGKILL ends the process at once, and the next start recovers the logs.
fn serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use fetchbench::broker::{Broker, BrokerConfig, DEFAULT_LISTEN};
    use nix::sys::signal::{SigSet, Signal};

    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().context("blocking SIGINT and SIGTERM")?;

    let mut props = std::collections::BTreeMap::new();
    if let Some(path) = &a.config {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading --config {}", path.display()))?;
        props = fetchbench::log::config::parse_properties(&text);
    }
    for kv in &a.overrides {
        let Some((key, value)) = kv.split_once('=') else {
            anyhow::bail!("-X {kv}: expected key=value");
        };
        props.insert(key.trim().to_string(), value.trim().to_string());
    }
    let default_listen = DEFAULT_LISTEN.parse().expect("DEFAULT_LISTEN is an address");
    let mut config = BrokerConfig::new(default_listen, PathBuf::new(), ReadPathKind::Sendfile);
    config.apply_props(&props).with_context(|| match &a.config {
        Some(path) => format!("broker config (--config {} and -X)", path.display()),
        None => "broker config (-X)".to_string(),
    })?;
    if let Some(listen) = a.listen {
        config.listen = listen;
    }
    if let Some(dir) = a.log_dir {
        config.log_dir = dir;
    }
    if let Some(model) = a.server_model {
        config.server_model = model;
    }
    if let Some(path) = a.read_path {
        config.read_path = path;
    }
    if config.log_dir.as_os_str().is_empty() {
        anyhow::bail!("no log directory: give --log-dir, or log.dirs in --config or -X");
    }
    let log_dir = config.log_dir.clone();
    let server_model = config.server_model;
    let read_path = config.read_path;
    if config.read_path == ReadPathKind::Null {
        anyhow::bail!("--read-path null sends zeros, not records: it is a baseline for `read-paths` only");
    }
    let handle = Broker::start(config)?;
    say(format_args!(
        "fetchbench broker: opened log directory {} ({} partitions, {})",
        log_dir.display(),
        handle.partitions_loaded(),
        match (handle.partitions_loaded(), handle.had_clean_shutdown()) {
            (0, false) => "new or empty log directory",
            (_, true) => "clean shutdown",
            (_, false) => "recovered: no clean shutdown marker",
        }
    ));
    say(format_args!(
        "fetchbench broker listening on {} (server model {}, read path {})",
        handle.local_addr(),
        server_model,
        read_path
    ));
    if let Some(addr) = handle.metrics_addr() {
        say(format_args!("fetchbench broker: metrics at http://{addr}/metrics"));
    }
    let signal = signals.wait().context("waiting for SIGINT or SIGTERM")?;
    say(format_args!("fetchbench broker: {}: shutting down (a second signal is ignored)", signal.as_str()));
    handle.shutdown()?;
    say(format_args!(
        "fetchbench broker: shut down cleanly (logs flushed, checkpoints and .kafka_cleanshutdown written)"
    ));
    Ok(ExitCode::SUCCESS)
}

/// `fetchbench read-paths`: measure each read path ([`read_paths::run`]), print the table or the JSON
/// document. Exits 1 when a path failed.
fn read_paths(a: ReadPathsArgs) -> anyhow::Result<ExitCode> {
    let options = read_paths::RunOptions {
        file: a.file,
        temp_size: a.size,
        temp_dir: a.temp_dir,
        slice_size: a.slice,
        total_bytes: a.total,
        kinds: a.paths,
        cold_cache: a.cold,
        limits: a.limits,
        command: std::env::args().collect(),
        config: ReadPathConfig { buffer_size: a.buffer_size as usize, pipe_size: a.pipe_size as usize },
    };
    let report = read_paths::run(&options, |line| say(format_args!("{line}")))?;
    let out = if a.json { report.json() } else { report.table() };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let message = format!("writing the results: {e}");
            return Err(anyhow::Error::new(e).context(message));
        }
        // Written, or the reader went away (`| head`): stop quietly, as Unix tools do.
        _ => {}
    }
    Ok(if report.any_failed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
