//! `fetchbench run [WORKLOAD.toml]` and `fetchbench sweep WORKLOAD.toml`: run resolved
//! workloads and write their results.
//!
//! Flow of one run:
//!
//! 1. **Backlog.** Embedded (the default): generated straight into a temporary log directory
//!    ([`super::backlog::generate`]), or a copy of an existing Kafka log directory
//!    (`log_dir` / `--log-dir`, [`super::backlog::copy_log_dir`]). External (`--bootstrap`):
//!    topics named `fetchbench-<name>-<unix time>-<n>` are created with CreateTopics and the
//!    backlog is produced over the network by fetchbench's producer (`acks=all`).
//! 2. **Per (server model, read path)** (embedded): every read path of `read_paths` under
//!    every model of `server_models` (`--server-model`), model by model
//!    ([`combination_order`]). A combination runs when the model's probe
//!    ([`ServerModel::probe`]), the model's support of the path ([`ServerModel::supports`])
//!    and the path's probe pass and the broker starts with them; otherwise it is skipped with
//!    a note naming the reason (`<model>/<path>: skipped: ...`, once per run), never swapped
//!    for another (`null` is skipped too: consumers cannot decode its zeros). A broker that
//!    refuses the model at start ([`BrokerError::ServerModel`], e.g. a front end this build
//!    does not have) is such a skip; any other start error fails the run. Before each
//!    combination the log directory is synced (`syncfs`: what earlier combinations wrote is
//!    written back now, not inside this one's windows; a run note gives the total time) and,
//!    with CPU pinning, a fixed CPU probe runs on the broker's CPUs
//!    ([`super::usage::cpu_probe_gb_per_s`], a `cpu probe` note per combination: the CPU's own
//!    speed, which the repetitions' spread follows on a shared host). Each combination
//!    gets an embedded broker serving the directory with that model and path
//!    (`group.initial.rebalance.delay.ms=0`; its threads pinned to the broker CPUs);
//!    `page_cache = "cold"` then evicts the segment files (`fdatasync` +
//!    `posix_fadvise(DONTNEED)`, after the broker's start-up reads and before anything maps
//!    them; `residency_before` reports what `mincore` still sees); then the workload's phases: [`super::catch_up`] (groups drain the
//!    backlog), [`super::tail`] (producers at a rate, consumers at the head) and
//!    [`super::mixed`] (both at once). External (`--bootstrap`): the broker's configs are
//!    recorded (DescribeConfigs, the results' `broker`); without `--metrics` the phases run
//!    once, read path `external`, server model `null`, broker figures 0. With `--metrics
//!    HOST:PORT` (a `fetchbench serve` with `metrics.listen`; a broker without `read.path` is
//!    refused): every read path of `read_paths` under the broker's `server.model` (or, when the
//!    workload's `server_models` / `--server-model` name others than the default, under each
//!    of those), in [`combination_order`], each after one IncrementalAlterConfigs request set
//!    the broker's `read.path` (and `server.model` when models are compared) to it (a
//!    combination the broker refuses, e.g. a path its model cannot run, is skipped with the
//!    broker's reason); the broker's figures come from its endpoint ([`super::remote`]); after
//!    the last combination (or a failure) both keys are set back to what DescribeConfigs
//!    reported at the start.
//!
//!    Entries, notes, progress lines and error contexts name the combination: the entry's
//!    `server_model` and `read_path`; notes `<model>/<path> (<phase>): ...` when the run
//!    compares models (any other than `threaded`), `<path> (<phase>): ...` otherwise;
//!    progress and errors always `<model>/<path>`; group ids `fetchbench-run-<model>-<path>`.
//!
//!    **Repeats** (`repeat` / `--repeat N`): step 2 runs N times over the same backlog (written
//!    once); repetition `r` (0-based) takes the combinations in their order rotated left by
//!    `r` (`copy, mmap, sendfile` then `mmap, sendfile, copy`, ...), so a drift of the
//!    machine over the run (page cache, thermals, neighbours) spreads over every combination
//!    instead of weighing on the last one. Each entry carries its `repetition`; groups get ids
//!    of their own per repetition. External: the phases run N times (`server_model` `null`:
//!    the cluster's server is its own; `server_models` other than `["threaded"]` is refused
//!    there).
//! 3. **Results** (every entry with its `server_model`; the table's `model` column, the CSV's
//!    `server_model`): machine limits (`--limits FILE`, else `scripts/baseline-limits.sh` with a
//!    short setting when fio and iperf3 are installed; see [`super::limits`]) and each path's
//!    ratio to them; the statistics over the repetitions ([`super::results::summarize`]);
//!    `<results-dir>/<UTC time>-<name>.json` (schema of [`super::results`], validated before
//!    writing), `.csv` (one line per entry), with repeats `-summary.csv` (the statistics) and
//!    `.svg` ([`super::chart`]; with repeats the means, 95% intervals and merged histograms); a
//!    table on stdout.
//!
//! Ctrl-C stops the current phase: what was measured is written, with `interrupted: true`,
//! and the command exits 130; a second Ctrl-C kills the process.
//!
//! Measurement rules: see [`super::catch_up`], [`super::tail`] and [`super::mixed`]. CPU: the process's
//! `getrusage` minus the client threads (the consumers and producers share the process with
//! the embedded broker); io_uring's `iou-wrk` kernel threads belong to the process, so they
//! are counted as broker. Counts per GB (system calls of the broker's threads, bytes its read
//! paths read into user space): [`super::counters`]; a run where the kernel cannot count
//! system calls says why in a note, and its entries' `syscalls_per_gb` are `null`.

use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};

use super::backlog::Backlog;
use super::catch_up::Target;
use super::remote::RemoteBroker;
use super::results::{self, utc_timestamp, BrokerRecord, Git, LimitsResult, PathResult, Results};
use super::tail::Stall;
use super::usage::{allowed_cpus, pin_current_thread};
use super::workload::{expand_sweep, Client, CpuPinning, PageCache, Phase, Workload};
use crate::broker::server_model::ServerModel;
use crate::broker::{Broker, BrokerConfig, BrokerError};
use crate::machine::Machine;
use crate::read_path::ReadPathKind;

/// Arguments of `fetchbench run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The workload file (TOML, see `bench::workload`); the default workload when omitted.
    pub workload: Option<PathBuf>,
    /// Print the results JSON on stdout (instead of the table).
    #[arg(long)]
    pub json: bool,
    /// Print no table, notes or progress (errors still go to stderr).
    #[arg(long)]
    pub quiet: bool,
    /// Where the results JSON, CSV and SVG are written.
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
    /// Serve a copy of this Kafka log directory as the backlog (overrides `log_dir`).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
    /// Run against this Kafka-compatible cluster (`host:port`) instead of the embedded broker.
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// With `--bootstrap` at a `fetchbench serve`: its metrics endpoint (`metrics.listen`,
    /// `host:port`). The run then switches the broker's read path per combination
    /// (IncrementalAlterConfigs `read.path`) and reads broker CPU, faults, RSS and fetch
    /// latency from the endpoint.
    #[arg(long, value_name = "HOST:PORT", requires = "bootstrap")]
    pub metrics: Option<String>,
    /// This machine's limits: a `scripts/baseline-limits.sh` output file. Without it the
    /// script runs (short setting) when fio and iperf3 are installed.
    #[arg(long)]
    pub limits: Option<PathBuf>,
    /// Do not measure or load machine limits.
    #[arg(long, conflicts_with = "limits")]
    pub no_limits: bool,
    /// Measure every read path N times (rotating their order), for means with 95% confidence
    /// intervals; overrides the workload's `repeat`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Server models to compare, repeatable or comma-separated (`threaded`, `uring`); overrides
    /// the workload's `server_models`. With `--bootstrap`, only with `--metrics` (the remote
    /// fetchbench serve's `server.model` is switched per combination).
    #[arg(long = "server-model", value_name = "MODEL", value_delimiter = ',')]
    pub server_models: Vec<String>,
    /// Tests only: every producer of the tail phase stalls `AT_MS:LENGTH_MS` once.
    #[arg(long, hide = true, value_parser = parse_stall)]
    pub producer_stall: Option<Stall>,
    /// Limits already measured (a sweep measures them once for all its points).
    #[arg(skip)]
    pub preloaded_limits: Option<LimitsResult>,
}

fn parse_stall(s: &str) -> Result<Stall, String> {
    let (at, length) = s.split_once(':').ok_or("expected AT_MS:LENGTH_MS")?;
    let ms = |x: &str| x.parse::<u64>().map(Duration::from_millis).map_err(|e| format!("{x}: {e}"));
    Ok(Stall { at: ms(at)?, length: ms(length)? })
}

/// Set by the SIGINT handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // A second Ctrl-C kills: the default action from now on (async-signal-safe).
    // SAFETY: `signal` with SIG_DFL is async-signal-safe and touches no Rust state.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

fn install_sigint() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(SigHandler::Handler(on_sigint), SaFlags::SA_RESTART, SigSet::empty());
    // SAFETY: the handler only stores to an atomic and calls `signal`, both async-signal-safe.
    let _ = unsafe { sigaction(Signal::SIGINT, &action) };
}

/// `fetchbench run`: exit 0 on success, 130 when interrupted (the results written), 2 on an
/// error (printed on stderr).
pub fn main(args: RunArgs) -> ExitCode {
    install_sigint();
    let outcome = Workload::from_optional(args.workload.as_deref()).map_err(anyhow::Error::from).and_then(|w| {
        if !w.is_resolved() {
            bail!(
                "the workload is a sweep ({} axes): run it with `fetchbench sweep`, or give one value per key",
                w.sweep.len()
            );
        }
        run_one(&args, &w, &std::env::args().collect::<Vec<_>>())
    });
    match outcome {
        Ok(r) if r.interrupted => ExitCode::from(130),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail("run", &e),
    }
}

fn fail(command: &str, e: &anyhow::Error) -> ExitCode {
    // The chain, leaving out causes the message before already spells out.
    let mut msg = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if cause.starts_with(&msg) {
            msg = cause; // the cause repeats the context and says more
        } else if !msg.ends_with(&cause) {
            msg += &format!(": {cause}");
        }
    }
    eprintln!("fetchbench {command}: {msg}");
    ExitCode::from(2)
}

impl Workload {
    /// The workload in `path`, or the default one.
    fn from_optional(path: Option<&Path>) -> Result<Workload, super::workload::WorkloadError> {
        match path {
            Some(p) => Workload::from_file(p),
            None => Ok(Workload::default()),
        }
    }
}

/// Progress on stderr (indicatif), hidden with `--quiet` / `--json` or when stderr is not a
/// terminal.
struct Progress {
    bar: indicatif::ProgressBar,
    show_lines: bool,
}

impl Progress {
    fn new(args: &RunArgs) -> Progress {
        let quiet = args.quiet || args.json;
        let bar = if quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new_spinner() };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        if !bar.is_hidden() {
            // A ticker thread, counted as broker CPU: 5 wakeups/s, negligible.
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Progress { bar, show_lines: !quiet }
    }

    fn step(&self, msg: String) {
        if self.show_lines && self.bar.is_hidden() {
            eprintln!("fetchbench: {msg}");
        }
        self.bar.set_message(msg);
    }
}

/// Runs one resolved workload `w` (see the module docs), writes its files and prints; returns
/// the results (with `interrupted` set when Ctrl-C stopped it).
///
/// Errors: an unsupported workload combination (named by key), the backlog, a phase
/// (consumer, producer or broker error, lost or duplicated records), writing the files.
pub fn run_one(args: &RunArgs, w: &Workload, command: &[String]) -> anyhow::Result<Results> {
    let date = utc_timestamp(SystemTime::now());
    let mut w = w.clone();
    if let Some(d) = &args.log_dir {
        w.log_dir = Some(d.clone());
    }
    w.name = run_name(&w);
    if let Some(n) = args.repeat {
        w.repeat = n; // the results' workload says how many repetitions ran
    }
    if !args.server_models.is_empty() {
        // Checked as the workload key is (known names, distinct), named by the flag.
        let names = toml::Value::Array(args.server_models.iter().map(|m| toml::Value::String(m.clone())).collect());
        w.server_models = super::workload::server_models("--server-model", &names)?;
    }
    check_supported(&w, args)?;
    let progress = Progress::new(args);
    let mut notes = Vec::new();
    let mut paths = Vec::new();
    let target = match &args.bootstrap {
        Some(b) => format!("bootstrap:{b}"),
        None => "embedded".to_string(),
    };
    let pinning = resolve_pinning(&w.cpu_pinning);
    if let Some((b, c)) = &pinning {
        notes.push(match &args.bootstrap {
            Some(_) => format!("cpu pinning: clients on CPUs {c:?} (the broker is external)"),
            None => format!("cpu pinning: broker on CPUs {b:?}, clients on CPUs {c:?}"),
        });
    } else if w.cpu_pinning == CpuPinning::Auto {
        notes.push("cpu pinning: none (fewer than 2 CPUs allowed)".into());
    }
    let fill_start = Instant::now();
    let mut broker_record = None;
    if let Some(bootstrap) = &args.bootstrap {
        progress.step(format!("writing the backlog to {bootstrap}"));
        let backlog = external_backlog(&w, bootstrap).context("writing the backlog")?;
        notes.push(format!(
            "backlog: {} records produced to {bootstrap} in {:.1} s (topics {})",
            backlog.records,
            fill_start.elapsed().as_secs_f64(),
            backlog.topics.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(", ")
        ));
        if w.page_cache == PageCache::Cold {
            notes.push("page_cache cold: not possible on an external cluster; its page cache is as it is".into());
        }
        let remote = describe_remote(bootstrap, args.metrics.as_deref(), &mut notes)?;
        broker_record = Some(BrokerRecord {
            bootstrap: bootstrap.clone(),
            broker_id: remote.as_ref().map_or(-1, |r| r.broker_id),
            configs: remote.as_ref().map(|r| r.configs.clone()).unwrap_or_default(),
            metrics: args.metrics.clone(),
            machine: None,
        });
        let stamp = unix_secs();
        match remote.filter(|r| r.metrics.is_some()) {
            Some(remote) => {
                // The models compared: the workload's when it names others than the default
                // (`server_models`, `--server-model`; the broker's `server.model` is switched
                // per combination), else the broker's own; the results' workload names them.
                let compare_models = w.server_models != [ServerModel::Threaded];
                if !compare_models {
                    w.server_models = vec![remote_model(&remote)?];
                }
                let machine = run_on_fetchbench_broker(
                    &w, &remote, &backlog, stamp, &pinning, args, &progress, &mut paths, &mut notes,
                )?;
                if let Some(record) = &mut broker_record {
                    record.machine = machine;
                }
            }
            None => {
                notes.push(
                    "external cluster: broker CPU, faults, RSS, page-cache residency (reported as 1) and \
                     broker-side fetch latency are not measured (0 / empty; a fetchbench serve measures them \
                     with --metrics); consumer_cpu is this process (all clients); the topics created stay on \
                     the cluster"
                        .into(),
                );
                for r in 0..w.repeat {
                    if INTERRUPTED.load(Ordering::SeqCst) {
                        break;
                    }
                    let t = Target {
                        w: &w,
                        backlog: &backlog,
                        read_path: "external".into(),
                        server_model: None,
                        bootstrap: bootstrap.clone(),
                        broker: None,
                        metrics: None,
                        interrupted: &INTERRUPTED,
                        group_prefix: repetition_prefix(format!("fetchbench-run-{stamp}"), r),
                        pin_clients: pinning.as_ref().map(|(_, c)| c.clone()),
                    };
                    let (p0, n0) = (paths.len(), notes.len());
                    let outcome = run_phases(&t, None, args, &progress, &mut paths, &mut notes);
                    mark_repetition(&w, r, &mut paths[p0..], &mut notes[n0..]);
                    outcome?;
                }
            }
        }
    } else {
        let dir = TempDir::new()?;
        let backlog = match &w.log_dir {
            Some(src) => {
                progress.step(format!("copying {}", src.display()));
                let b = super::backlog::copy_log_dir(src, dir.path())
                    .with_context(|| format!("log_dir {}", src.display()))?;
                notes.push(format!(
                    "backlog: a copy of {} ({} records in {}, {} batch bytes)",
                    src.display(),
                    b.records,
                    b.topics.iter().map(|(t, p)| format!("{t} x{p}")).collect::<Vec<_>>().join(", "),
                    b.disk_bytes
                ));
                if b.committed_records != b.records {
                    notes.push(format!(
                        "backlog: {} of its records are read_committed (the others are of aborted or open \
                         transactions); the consumers read with isolation.level={}",
                        b.committed_records,
                        w.isolation_level()
                    ));
                }
                b
            }
            None => {
                // Without a catch-up or mixed phase nothing reads the backlog: the topics only.
                let mut gen = w.clone();
                if !w.phases.contains(&Phase::CatchUp) && !w.phases.contains(&Phase::Mixed) {
                    gen.backlog_bytes = 0;
                }
                progress.step(format!("writing the backlog ({} bytes)", gen.backlog_bytes));
                let b = super::backlog::generate(&gen, dir.path()).context("writing the backlog")?;
                notes.push(format!(
                    "backlog: {} records, {} batch bytes on disk, written in {:.1} s",
                    b.records,
                    b.disk_bytes,
                    fill_start.elapsed().as_secs_f64()
                ));
                if gen.transaction_records > 0 {
                    notes.push(transactions_note(&gen, &b));
                }
                b
            }
        };
        // A planted cost (scripts/gate-calibration.sh): from the environment only, and said.
        let planted = match std::env::var(crate::broker::planted::ENV) {
            Ok(v) => crate::broker::planted::parse_env_value(&v).map_err(|e| anyhow::anyhow!(e))?,
            Err(_) => 0,
        };
        if planted > 0 {
            notes.push(format!(
                "PLANTED COST: the broker busy-spins {:.3} us per MiB of record bytes after each Fetch \
                 response ({}): a calibration of a performance gate, not a measurement of a read path",
                planted as f64 / 1e3,
                crate::broker::planted::ENV
            ));
        }
        if let Err(why) = super::counters::probe() {
            notes.push(format!("syscalls_per_gb not counted (null in every entry): {why}"));
        }
        // Notes name the model only when the run compares models (module docs).
        let qualified = w.server_models.iter().any(|m| *m != ServerModel::Threaded);
        // `read path copy: skipped: ...` as ever in a run of `threaded` alone.
        let label = |model: ServerModel, kind: ReadPathKind| match qualified {
            true => format!("{model}/{}", kind.name()),
            false => format!("read path {}", kind.name()),
        };
        let mut synced = Duration::ZERO;
        // Why a combination cannot run, found once (probes) or at its first start (refused).
        let mut skipped: Vec<((ServerModel, ReadPathKind), String)> = Vec::new();
        for (r, model, kind) in combination_order(&w.server_models, &w.read_paths, w.repeat) {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            let combo = format!("{model}/{}", kind.name());
            if skipped.iter().any(|(k, _)| *k == (model, kind)) {
                continue;
            }
            if let Err(reason) = can_run(model, kind) {
                notes.push(format!("{}: skipped: {reason}", label(model, kind)));
                skipped.push(((model, kind), reason));
                continue;
            }
            if w.repeat > 1 {
                progress.step(format!("repetition {}/{}: {combo}", r + 1, w.repeat));
            }
            // What earlier combinations wrote (the backlog, the tails' topics) reaches the disk
            // now, not during this combination's windows: the kernel's writeback of hundreds of
            // MB, once past `vm.dirty_expire_centisecs` or the background threshold, took tens
            // of ms of CPU and I/O inside later tails (README, "Repeatability").
            let sync_start = Instant::now();
            fs::File::open(dir.path())
                .and_then(|d| nix::unistd::syncfs(&d).map_err(io::Error::from))
                .with_context(|| format!("syncfs of the log directory {}", dir.path().display()))?;
            synced += sync_start.elapsed();
            let mut config = BrokerConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), dir.path(), kind);
            config.server_model = model;
            config.group_initial_rebalance_delay_ms = 0;
            config.planted_fetch_cost_ns_per_mib = planted;
            // The broker's threads inherit this thread's CPU mask.
            if let Some((b, _)) = &pinning {
                pin_current_thread(b)?;
            }
            let started = Broker::start(config);
            if pinning.is_some() {
                pin_current_thread(&allowed_cpus_cached())?;
            }
            let broker = match started {
                Ok(b) => b,
                // The model cannot run here (or not with this path): a skipped combination,
                // like a failed probe; never another model in its place.
                Err(BrokerError::ServerModel(e)) => {
                    notes.push(format!("{}: skipped: the broker refused to start: {e}", label(model, kind)));
                    skipped.push(((model, kind), e.to_string()));
                    continue;
                }
                Err(e) => return Err(e).with_context(|| format!("{combo}: starting the broker")),
            };
            if w.page_cache == PageCache::Cold {
                // After the broker opened the log (its start-up reads batch headers, which
                // pulls pages back in); it maps no segment until a fetch does.
                progress.step(format!("{combo}: dropping the backlog from the page cache"));
                for f in &backlog.segment_files {
                    super::usage::evict_from_page_cache(&fs::File::open(f)?)?;
                }
            }
            let t = Target {
                w: &w,
                backlog: &backlog,
                read_path: kind.name().to_string(),
                server_model: Some(model),
                bootstrap: broker.local_addr().to_string(),
                broker: Some(&broker),
                metrics: None,
                interrupted: &INTERRUPTED,
                group_prefix: repetition_prefix(format!("fetchbench-run-{model}-{}", kind.name()), r),
                pin_clients: pinning.as_ref().map(|(_, c)| c.clone()),
            };
            let (p0, n0) = (paths.len(), notes.len());
            // The same CPU work before every combination, on the broker's CPUs: what the CPU
            // itself did between repetitions (README, "Repeatability").
            if let Some((b, _)) = &pinning {
                pin_current_thread(b)?;
                let probe = super::usage::cpu_probe_gb_per_s();
                pin_current_thread(&allowed_cpus_cached())?;
                notes.push(format!(
                    "{}: cpu probe: crc32c at {probe:.2} GB/s on the broker's CPUs {b:?} before the combination",
                    label(model, kind)
                ));
            }
            let outcome = run_phases(&t, Some(dir.path()), args, &progress, &mut paths, &mut notes);
            mark_repetition(&w, r, &mut paths[p0..], &mut notes[n0..]);
            broker.shutdown().with_context(|| format!("{combo}: stopping the broker"))?;
            outcome?;
        }
        notes.push(format!(
            "log directory synced (syncfs) before every combination, outside the measured windows: {:.2} s in all",
            synced.as_secs_f64()
        ));
    }
    progress.bar.finish_and_clear();
    let interrupted = INTERRUPTED.load(Ordering::SeqCst);
    if paths.is_empty() && !interrupted {
        bail!("no combination of server model and read path of the workload could run here: {}", notes.join("; "));
    }
    let limits = match (&args.preloaded_limits, args.no_limits) {
        (_, true) => LimitsResult::default(),
        (Some(l), false) => l.clone(),
        (None, false) => machine_limits(args, &progress, &mut notes)?,
    };
    for p in &mut paths {
        p.ratio_to_limits = super::limits::ratios(&limits, p.mb_per_sec);
    }
    // What limited each entry, now that the limits are known; client-bound entries' warnings
    // and steal flags go into the notes.
    let broker_nproc = broker_record.as_ref().and_then(|b| b.machine.as_ref()).map(|m| m.nproc);
    let qualified = results::models_compared(&paths) || w.server_models.iter().any(|m| *m != ServerModel::Threaded);
    let cold = w.page_cache == PageCache::Cold && args.bootstrap.is_none();
    notes.extend(super::attribution::attribute(&mut paths, &limits, &w, cold, broker_nproc, qualified));
    let results = Results {
        schema: results::SCHEMA.into(),
        schema_version: results::SCHEMA_VERSION,
        date: date.clone(),
        machine: Machine::current(),
        git: Git::current(),
        command: command.to_vec(),
        target,
        broker: broker_record,
        interrupted,
        notes: notes.clone(),
        workload: Results::workload_value(&w),
        loopback: None,
        limits,
        summary: results::summarize(&paths),
        paths,
    };
    let doc = serde_json::to_value(&results)?;
    results::validate(&doc).map_err(|e| anyhow!("internal error: the results do not validate: {e}"))?;
    let files = write_files(&results, &args.results_dir, &date, &w.name)?;
    if args.json {
        println!("{}", results.to_json());
    } else if !args.quiet {
        print!("{}", table(&results));
    }
    if !args.quiet {
        for n in &notes {
            eprintln!("note: {n}");
        }
        if interrupted {
            eprintln!("interrupted: the results hold what was measured until Ctrl-C");
        }
        eprintln!("wrote {}", files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(results)
}

/// DescribeConfigs of the broker at `bootstrap` (its id from Metadata), with `metrics` its
/// endpoint. A broker that cannot be described is a note and `None` without `--metrics`
/// (any Kafka-compatible cluster may refuse it); with `--metrics` it is an error, as is a
/// broker without `read.path` (not a fetchbench broker: nothing to switch, no endpoint of
/// ours to read).
fn describe_remote(
    bootstrap: &str,
    metrics: Option<&str>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<RemoteBroker>> {
    let remote = match RemoteBroker::describe(bootstrap, metrics) {
        Ok(r) => r,
        Err(e) if metrics.is_none() => {
            notes.push(format!("broker configs not recorded: {e}"));
            return Ok(None);
        }
        Err(e) => return Err(e).context("--metrics: describing the broker's configs"),
    };
    if metrics.is_some() && !remote.has_read_path() {
        bail!(
            "--metrics: the broker at {bootstrap} reports no {} config (DescribeConfigs): not a fetchbench \
             serve, whose read path and metrics endpoint the option is for; drop --metrics",
            super::remote::READ_PATH_KEY
        );
    }
    Ok(Some(remote))
}

/// The server model of a fetchbench broker: its `server.model` config (`threaded` when it
/// reports none, the model before the key existed).
///
/// Errors: a name this build does not know.
fn remote_model(remote: &RemoteBroker) -> anyhow::Result<ServerModel> {
    let name = remote.configs.get("server.model").cloned().flatten();
    let name = name.unwrap_or_else(|| ServerModel::Threaded.name().to_string());
    name.parse().map_err(|e| anyhow!("the broker's server.model {name:?}: {e}"))
}

/// Runs the phases against a `fetchbench serve` with a metrics endpoint (`remote`): every read
/// path of the workload under every model of `w.server_models` (the broker's own model alone
/// unless the run compares models), the combinations in [`combination_order`], each after one
/// IncrementalAlterConfigs request set `read.path` (and, when the run compares models,
/// `server.model`) to it (a combination the broker refuses is skipped with its reason, once);
/// then both are set back to what the broker had. Returns the broker's machine from its endpoint (`None`, with a
/// note, when the endpoint cannot be read).
///
/// Errors: an unknown server model in the configs, an alter that fails for another reason
/// than the broker's refusal (connection), a phase's error.
#[allow(clippy::too_many_arguments)]
fn run_on_fetchbench_broker(
    w: &Workload,
    remote: &RemoteBroker,
    backlog: &Backlog,
    stamp: u64,
    pinning: &Option<(Vec<usize>, Vec<usize>)>,
    args: &RunArgs,
    progress: &Progress,
    paths: &mut Vec<PathResult>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<Machine>> {
    let endpoint = remote.metrics.as_ref().ok_or_else(|| anyhow!("internal error: no metrics endpoint"))?;
    let own = remote_model(remote)?;
    let switch_models = w.server_models != [own];
    let machine = match endpoint.scrape() {
        Ok(s) => Some(s.machine),
        Err(e) => {
            notes.push(format!("the broker's machine is not recorded: {e}"));
            None
        }
    };
    // Notes name the combination as an embedded run's do: `model/path` when models are compared.
    let label = |model: ServerModel, kind: ReadPathKind| match switch_models {
        true => format!("{model}/{}", kind.name()),
        false => format!("read path {}", kind.name()),
    };
    let mut skipped: Vec<(ServerModel, ReadPathKind)> = Vec::new();
    let mut outcome = Ok(());
    for (r, model, kind) in combination_order(&w.server_models, &w.read_paths, w.repeat) {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        if skipped.contains(&(model, kind)) {
            continue;
        }
        if kind == ReadPathKind::Null {
            notes.push(format!("{}: skipped: it sends zeros, which consumers cannot decode", label(model, kind)));
            skipped.push((model, kind));
            continue;
        }
        if w.repeat > 1 {
            progress.step(format!("repetition {}/{}: {model}/{}", r + 1, w.repeat, kind.name()));
        }
        match remote.set_serving(switch_models.then(|| model.name()), kind.name()) {
            Ok(()) => {}
            Err(e @ crate::client::ClientError::Kafka { .. }) => {
                notes.push(format!("{}: skipped: the broker refused it: {e}", label(model, kind)));
                skipped.push((model, kind));
                continue;
            }
            Err(e) => {
                outcome = Err(anyhow::Error::from(e).context(format!("setting the broker to {model}/{}", kind.name())));
                break;
            }
        }
        if let Err(e) = remote.check_endpoint(model.name(), kind.name()) {
            outcome = Err(anyhow!("--metrics: {e}"));
            break;
        }
        let t = Target {
            w,
            backlog,
            read_path: kind.name().to_string(),
            server_model: Some(model),
            bootstrap: remote.bootstrap.clone(),
            broker: None,
            metrics: Some(endpoint),
            interrupted: &INTERRUPTED,
            group_prefix: repetition_prefix(format!("fetchbench-run-{stamp}-{model}-{}", kind.name()), r),
            pin_clients: pinning.as_ref().map(|(_, c)| c.clone()),
        };
        let (p0, n0) = (paths.len(), notes.len());
        let phases = run_phases(&t, None, args, progress, paths, notes);
        mark_repetition(w, r, &mut paths[p0..], &mut notes[n0..]);
        if let Err(e) = phases {
            outcome = Err(e);
            break;
        }
    }
    // The broker as it was, also after a failure.
    if let Err(e) = remote.restore(switch_models) {
        notes.push(format!("the broker's read.path / server.model could not be set back: {e}"));
    }
    if endpoint.intervals_measured() > 0 {
        notes.push(format!(
            "broker figures from the metrics endpoint {} ({} measured intervals; one whose note says its \
             broker figures were not measured has them at 0): the fetchbench serve process's CPU, faults, \
             context switches and RSS; broker-side fetch latency percentiles are histogram bucket upper \
             bounds (at most 19% above the true value); page-cache residency is not measured (reported as \
             1); consumer_cpu is this process (all clients); the topics created stay on the broker",
            endpoint.addr,
            endpoint.intervals_measured()
        ));
    } else {
        notes.push(format!(
            "no broker figures: no measured interval could read the metrics endpoint {} (the notes say why)",
            endpoint.addr
        ));
    }
    outcome.map(|()| machine)
}

/// `(repetition, server model, read path)` in the order a run measures them: the
/// combinations model by model (every read path of `read_paths` under `server_models[0]`, then
/// under `server_models[1]`, ...), and repetition `r` (0 to `repeat - 1`) takes that list
/// rotated left by `r mod len`.
pub fn combination_order(
    server_models: &[ServerModel],
    read_paths: &[ReadPathKind],
    repeat: u32,
) -> Vec<(u32, ServerModel, ReadPathKind)> {
    let combos: Vec<(ServerModel, ReadPathKind)> =
        server_models.iter().flat_map(|m| read_paths.iter().map(move |p| (*m, *p))).collect();
    let mut out = Vec::new();
    for r in 0..repeat {
        let mut order = combos.clone();
        if !order.is_empty() {
            let by = r as usize % order.len();
            order.rotate_left(by);
        }
        out.extend(order.into_iter().map(|(m, k)| (r, m, k)));
    }
    out
}

/// Whether `model` can serve Fetches with `path` here, before a broker is started: `Err` with
/// the reason when `path` is `null` (consumers cannot decode its zeros), the model's probe
/// fails ([`ServerModel::probe`]: io_uring or an opcode missing), the model refuses the path
/// ([`ServerModel::supports`]: a blocking call on a core's loop) or the path's probe fails.
fn can_run(model: ServerModel, path: ReadPathKind) -> Result<(), String> {
    if path == ReadPathKind::Null {
        return Err("it sends zeros, which consumers cannot decode".into());
    }
    model.probe().map_err(|e| e.to_string())?;
    model.supports(path).map_err(|e| e.to_string())?;
    path.probe().map_err(|e| format!("read path {}: {}", path.name(), e.reason))
}

/// Group ids of repetition `r`: the path's prefix, with `-r<r>` after the first repetition.
fn repetition_prefix(prefix: String, r: u32) -> String {
    if r == 0 {
        prefix
    } else {
        format!("{prefix}-r{r}")
    }
}

/// Sets `repetition` on the entries of repetition `r` and, in a repeated run, says which
/// repetition its notes are from.
fn mark_repetition(w: &Workload, r: u32, paths: &mut [PathResult], notes: &mut [String]) {
    for p in paths {
        p.repetition = r;
    }
    if w.repeat > 1 {
        for n in notes {
            *n = format!("repetition {r}: {n}");
        }
    }
}

/// The JSON, CSV and SVG of `results` in `dir` as `<date>-<name>.*` (and `-summary.csv`
/// when an entry was repeated); returns their paths.
fn write_files(results: &Results, dir: &Path, date: &str, name: &str) -> anyhow::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // `<date>-<name>`, or `<date>-<name>-2`, ... when a run of the same second has it: the
    // JSON is claimed with create_new, so parallel runs never overwrite each other.
    let base = format!("{}-{}", date.replace(':', ""), file_safe(name));
    let mut n = 1;
    let (stem, mut json_file) = loop {
        let stem = if n == 1 { base.clone() } else { format!("{base}-{n}") };
        match fs::File::create_new(dir.join(format!("{stem}.json"))) {
            Ok(f) => break (stem, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => {
                return Err(e).with_context(|| format!("creating {}", dir.join(format!("{stem}.json")).display()))
            }
        }
    };
    let json_path = dir.join(format!("{stem}.json"));
    let csv_path = dir.join(format!("{stem}.csv"));
    let svg_path = dir.join(format!("{stem}.svg"));
    {
        use std::io::Write as _;
        json_file
            .write_all((results.to_json() + "\n").as_bytes())
            .with_context(|| format!("writing {}", json_path.display()))?;
    }
    let mut csv = Vec::new();
    results::write_csv(results, &mut csv)?;
    fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    let mut written = vec![json_path, csv_path];
    if results.summary.iter().any(|s| s.samples > 1) {
        let summary_path = dir.join(format!("{stem}-summary.csv"));
        let mut csv = Vec::new();
        results::write_summary_csv(results, &mut csv)?;
        fs::write(&summary_path, csv).with_context(|| format!("writing {}", summary_path.display()))?;
        written.push(summary_path);
    }
    // Every repetition: the chart draws the means with their intervals and merged histograms.
    super::chart::write_svg(results, &svg_path).with_context(|| format!("writing {}", svg_path.display()))?;
    written.push(svg_path);
    Ok(written)
}

/// Runs the workload's phases on `t`, appending results and notes (prefixed by the
/// combination, see the module docs).
fn run_phases(
    t: &Target<'_>,
    dir: Option<&Path>,
    args: &RunArgs,
    progress: &Progress,
    paths: &mut Vec<PathResult>,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let model = t.server_model.map(ServerModel::name);
    // Progress and errors name the model always; notes when the run compares models.
    let combo = results::combination_label(model, &t.read_path, true);
    let qualified = t.w.server_models.iter().any(|m| *m != ServerModel::Threaded);
    let prefix = results::combination_label(model, &t.read_path, qualified);
    for phase in &t.w.phases {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        progress.step(format!("{combo}: {}", phase.name()));
        let run = || match phase {
            Phase::CatchUp if t.w.client == Client::Librdkafka => super::kcat::catch_up(t),
            Phase::CatchUp => super::catch_up::catch_up(t),
            Phase::Tail => super::tail::tail(t, dir, args.producer_stall),
            Phase::Mixed => super::mixed::mixed(t, dir),
        };
        // A rebalance inside a drain is handled in the drain (committed positions, redeliveries
        // not counted), not by measuring again.
        let (result, phase_notes) = run().with_context(|| format!("{combo} ({})", phase.name()))?;
        notes.extend(phase_notes.into_iter().map(|n| format!("{prefix} ({}): {n}", phase.name())));
        if INTERRUPTED.load(Ordering::SeqCst) && result.measured_nothing() {
            // Stopped before its window: figures over nothing (0 bytes) would be nonsense.
            notes.push(format!("{prefix} ({}): interrupted before anything was measured: no entry", phase.name()));
            continue;
        }
        paths.push(result);
    }
    Ok(())
}

/// The machine limits of this run: `--limits FILE` (an error when it cannot be read: it was
/// asked for), else the script when its tools are installed, else none (with a note saying how
/// to get them).
fn machine_limits(args: &RunArgs, progress: &Progress, notes: &mut Vec<String>) -> anyhow::Result<LimitsResult> {
    if let Some(file) = &args.limits {
        return super::limits::load(file).with_context(|| format!("--limits {}", file.display()));
    }
    // Announced only when fio and iperf3 are installed; else one note says how to get them.
    match super::limits::announcement(&std::env::var_os("PATH").unwrap_or_default()) {
        Ok(line) => progress.step(line.into()),
        Err(e) => {
            notes.push(e.note());
            return Ok(LimitsResult::default());
        }
    }
    // The repository's script: from the working directory, else where this binary was built.
    let script = [Path::new("scripts/baseline-limits.sh"), Path::new(LIMITS_SCRIPT)]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or(Path::new(LIMITS_SCRIPT));
    let outcome = super::limits::measure(script);
    progress.bar.finish_and_clear();
    Ok(match outcome {
        Ok(l) => l,
        Err(e) => {
            notes.push(e.note());
            LimitsResult::default()
        }
    })
}

/// `scripts/baseline-limits.sh` in the source tree this binary was built from.
const LIMITS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/baseline-limits.sh");

fn check_supported(w: &Workload, args: &RunArgs) -> anyhow::Result<()> {
    if args.bootstrap.is_some() && w.log_dir.is_some() {
        bail!("log_dir: cannot be served by an external cluster (--bootstrap); drop one of them");
    }
    if w.transaction_records > 0 && (args.bootstrap.is_some() || w.log_dir.is_some()) {
        bail!(
            "transaction_records: a transactional backlog is generated into the embedded broker's log \
             (not produced to an external cluster, --bootstrap, nor with --log-dir); set it to 0 or drop the flag"
        );
    }
    if args.bootstrap.is_some() && args.metrics.is_none() && w.server_models != [ServerModel::Threaded] {
        bail!(
            "server_models: an external cluster (--bootstrap) runs its own server, not fetchbench's models \
             (a fetchbench serve's are switched with --metrics); drop server_models / --server-model or --bootstrap"
        );
    }
    for phase in [Phase::CatchUp, Phase::Mixed] {
        if w.phases.contains(&phase) && w.log_dir.is_none() && w.backlog_bytes < w.record_size {
            bail!(
                "backlog: the {} phase needs a backlog of at least one record ({} bytes)",
                phase.name(),
                w.record_size
            );
        }
    }
    if w.phases.contains(&Phase::Tail) || w.phases.contains(&Phase::Mixed) {
        super::tail::check(w)?;
    }
    if let CpuPinning::Cpus { broker, clients } = &w.cpu_pinning {
        let allowed = allowed_cpus_cached();
        if let Some(c) = broker.iter().chain(clients).find(|c| !allowed.contains(c)) {
            bail!("cpu_pinning: CPU {c} is not available to this process (allowed: {allowed:?})");
        }
    }
    Ok(())
}

/// The note on a transactional backlog `b` of `w`: its transactions, how many were aborted and
/// what the consumers receive at their isolation level.
fn transactions_note(w: &Workload, b: &Backlog) -> String {
    format!(
        "backlog: transactions of {} records per partition ({} of them aborted): {} records committed, {} \
         aborted; the consumers read with isolation.level={} and receive {} per group",
        w.transaction_records,
        w.aborted_transactions,
        b.committed_records,
        b.records - b.committed_records,
        w.isolation_level(),
        b.records_for(w),
    )
}

/// The CPUs this process could use at start (before any pinning).
fn allowed_cpus_cached() -> Vec<usize> {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(allowed_cpus).clone()
}

/// `(broker CPUs, client CPUs)`, or `None` for no pinning. `auto`: the first half of the
/// allowed CPUs for the broker (rounded up), the rest for the clients, when at least 2.
fn resolve_pinning(p: &CpuPinning) -> Option<(Vec<usize>, Vec<usize>)> {
    match p {
        CpuPinning::None => None,
        CpuPinning::Cpus { broker, clients } => Some((broker.clone(), clients.clone())),
        CpuPinning::Auto => {
            let cpus = allowed_cpus_cached();
            (cpus.len() >= 2).then(|| {
                let half = cpus.len().div_ceil(2);
                (cpus[..half].to_vec(), cpus[half..].to_vec())
            })
        }
    }
}

fn unix_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// The backlog on an external cluster: new topics, `backlog / record_size` records produced
/// as fast as possible (values as the generated backlog's) by a producer with the workload's
/// `compression` and `[producer_config]` over Kafka's defaults (`acks=all`).
fn external_backlog(w: &Workload, bootstrap: &str) -> anyhow::Result<Backlog> {
    use crate::client::producer::Producer;
    let stamp = unix_secs();
    let topics: Vec<(String, i32)> = (0..w.topics)
        .map(|t| (format!("fetchbench-{}-{stamp}-{t}", file_safe(&w.name)), w.partitions as i32))
        .collect();
    let mut conn = crate::client::KafkaConnection::connect(bootstrap, "fetchbench-run", Duration::from_secs(10))
        .with_context(|| format!("connecting to {bootstrap}"))?;
    crate::client::admin::create_topics(&mut conn, &topics, 30_000)?;
    let drained = w.phases.contains(&Phase::CatchUp) || w.phases.contains(&Phase::Mixed);
    let records = if drained { w.backlog_bytes / w.record_size } else { 0 };
    // The workload's [producer_config] too: the backlog's batches as its producers write them.
    let pc = w.producer_config_for(bootstrap, "fetchbench-run-backlog").map_err(|e| anyhow!("producer_config: {e}"))?;
    let producer = Producer::new(pc)?;
    let mut value = vec![0u8; w.record_size as usize];
    for (i, b) in value.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut payload = w.payload_file.as_deref().map(super::backlog::Payload::read).transpose()?;
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut handles = Vec::new();
    for i in 0..records {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted while writing the backlog");
        }
        let (topic, partitions) = &topics[(i % topics.len() as u64) as usize];
        // As the generated backlog: null keys round-robin over the partitions, keys by the
        // producer's murmur2 partitioner; values from payload_file when set.
        let key = super::tail::record_key(w.key_distribution, i, &mut rng);
        let partition = key.is_none().then(|| ((i / topics.len() as u64) % *partitions as u64) as i32);
        if let Some(p) = payload.as_mut() {
            p.fill(&mut value);
        }
        handles.push(producer.send(topic, partition, key.as_deref().map(str::as_bytes), Some(&value), &[], None)?);
        if handles.len() >= 8192 {
            for h in handles.drain(..) {
                h.wait()?;
            }
        }
    }
    producer.flush()?;
    for h in handles {
        h.wait()?;
    }
    let stats = producer.stats();
    producer.close()?;
    Ok(Backlog {
        topics,
        records,
        committed_records: records,
        disk_bytes: stats.batch_bytes_sent,
        segment_files: Vec::new(),
        dense_offsets: true,
        aborted_ranges: Default::default(),
    })
}

/// Arguments of `fetchbench sweep`.
#[derive(clap::Args, Debug)]
pub struct SweepArgs {
    /// The workload file with list values (see `bench::workload`, "Sweeps").
    pub workload: PathBuf,
    /// Everything else as `fetchbench run`.
    #[command(flatten)]
    pub run: SweepRunArgs,
}

/// The `fetchbench run` options a sweep passes to each grid point.
#[derive(clap::Args, Debug)]
pub struct SweepRunArgs {
    /// Print no tables, notes or progress.
    #[arg(long)]
    pub quiet: bool,
    /// Where the results files (one set per grid point) and the sweep summary are written.
    #[arg(long, default_value = "results")]
    pub results_dir: PathBuf,
    /// Run against this cluster instead of the embedded broker.
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// The metrics endpoint of the `fetchbench serve` at `--bootstrap` (see `fetchbench run
    /// --metrics`).
    #[arg(long, value_name = "HOST:PORT", requires = "bootstrap")]
    pub metrics: Option<String>,
    /// Machine limits file (see `fetchbench run --limits`).
    #[arg(long)]
    pub limits: Option<PathBuf>,
    /// Do not measure or load machine limits.
    #[arg(long, conflicts_with = "limits")]
    pub no_limits: bool,
    /// Measure every read path of every grid point N times (see `fetchbench run --repeat`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Server models of every grid point (see `fetchbench run --server-model`).
    #[arg(long = "server-model", value_name = "MODEL", value_delimiter = ',')]
    pub server_models: Vec<String>,
}

/// `fetchbench sweep`: runs every grid point of the workload in turn (each writes its own
/// results files, labelled with its swept values), then prints and writes a summary
/// (`<date>-<name>-sweep.csv`: label, server model, read path, phase, repetition, MB/s, records/s, broker
/// CPU s/GB, e2e corrected p99 ms, the date of the point's results files; one line per entry,
/// so per repetition). The points run quietly (their
/// tables and notes are in their results files); the summary goes to stdout. Exit codes as
/// `fetchbench run`.
pub fn sweep_main(args: SweepArgs) -> ExitCode {
    install_sigint();
    match sweep(&args) {
        Ok(true) => ExitCode::from(130),
        Ok(false) => ExitCode::SUCCESS,
        Err(e) => fail("sweep", &e),
    }
}

fn sweep(args: &SweepArgs) -> anyhow::Result<bool> {
    let w = Workload::from_file(&args.workload)?;
    let points = expand_sweep(&w);
    let date = utc_timestamp(SystemTime::now());
    let command: Vec<String> = std::env::args().collect();
    let run_args = RunArgs {
        workload: Some(args.workload.clone()),
        json: false,
        quiet: true,
        results_dir: args.run.results_dir.clone(),
        log_dir: None,
        bootstrap: args.run.bootstrap.clone(),
        metrics: args.run.metrics.clone(),
        limits: args.run.limits.clone(),
        no_limits: args.run.no_limits,
        repeat: args.run.repeat,
        server_models: args.run.server_models.clone(),
        producer_stall: None,
        preloaded_limits: None,
    };
    // The machine's limits once, for every point.
    let mut run_args = run_args;
    if !run_args.no_limits {
        let mut notes = Vec::new();
        let quiet = RunArgs { quiet: true, ..run_args.clone() };
        let limits = machine_limits(&run_args, &Progress::new(&quiet), &mut notes)?;
        for n in notes {
            eprintln!("note: {n}");
        }
        run_args.preloaded_limits = Some(limits);
    }
    // Limits once for the whole sweep (they are the machine's, not the point's).
    let mut summary = String::from(
        "label,server_model,read_path,phase,repetition,mb_per_sec,records_per_sec,broker_cpu_s_per_gb,e2e_corrected_p99_ms,results_date\n",
    );
    let mut interrupted = false;
    for (i, point) in points.iter().enumerate() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let label = if point.label.is_empty() { "-".to_string() } else { point.label.join(" ") };
        if !args.run.quiet {
            eprintln!("fetchbench sweep: point {}/{}: {label}", i + 1, points.len());
        }
        let mut point = point.clone();
        point.name = format!("{}-{}", w.name, i + 1);
        let r = run_one(&run_args, &point, &command).with_context(|| format!("sweep point {}: {label}", i + 1))?;
        for p in &r.paths {
            summary += &format!(
                "\"{}\",{},{},{},{},{:.1},{:.0},{:.4},{:.3},{}\n",
                label.replace('"', "\"\""),
                p.server_model.as_deref().unwrap_or_default(),
                p.read_path,
                p.phase,
                p.repetition,
                p.mb_per_sec,
                p.records_per_sec,
                p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb,
                p.end_to_end_latency.corrected.summary.p99_us / 1e3,
                r.date
            );
        }
        interrupted |= r.interrupted;
    }
    fs::create_dir_all(&args.run.results_dir)?;
    let path = args.run.results_dir.join(format!("{}-{}-sweep.csv", date.replace(':', ""), file_safe(&w.name)));
    fs::write(&path, &summary).with_context(|| format!("writing {}", path.display()))?;
    if !args.run.quiet {
        print!("{summary}");
        eprintln!("wrote {} ({} grid points)", path.display(), points.len());
    }
    Ok(interrupted)
}

/// A latency in microseconds, short: `850us`, `12.3ms`, `1.20s`; `-` for no samples.
fn short_latency(us: f64, count: u64) -> String {
    if count == 0 {
        "-".into()
    } else if us < 1e3 {
        format!("{us:.0}us")
    } else if us < 1e6 {
        format!("{:.1}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

/// The results as a table: server model (`-` for an external cluster), read path and phase, MB/s, records/s, broker CPU s/GB (user+sys),
/// broker-side fetch latency p50/p99/p99.9, end-to-end (corrected) p50/p99/p99.9/max,
/// rebalance ms, what limited the entry (`bound by`, see [`super::attribution`]: ` !` after a
/// client-bound one, ` (steal)` after a steal-flagged one), and the ratio to the loopback TCP
/// limit (iperf3; else the fastest limit) when limits are known; below the rows, one `! WARNING:
/// ...` line per client-bound entry (its MB/s marked ` !`). A run with repeats gets, below that table of every entry, the
/// statistics table of [`summary_table`].
pub fn table(r: &Results) -> String {
    let mut out = entries_table(r);
    if r.summary.iter().any(|s| s.samples > 1) {
        out.push('\n');
        out += &summary_table(r);
    }
    out
}

/// `mean ± half-width of the 95% interval` (the upper half: the lower bound may be clamped at
/// 0), or the mean alone for one sample; `decimals` digits.
fn mean_ci(f: Option<&results::FigureStats>, decimals: usize) -> String {
    match f {
        None => "-".into(),
        Some(f) => match f.ci95_high {
            Some(high) => format!("{:.decimals$} ± {:.decimals$}", f.mean, high - f.mean),
            None => format!("{:.decimals$}", f.mean),
        },
    }
}

/// `mean [low, high]` of a ratio, or the mean alone for one sample.
fn ratio_ci(f: Option<&results::FigureStats>) -> String {
    match f {
        None => "-".into(),
        Some(f) => match (f.ci95_low, f.ci95_high) {
            (Some(l), Some(h)) => format!("{:.3} [{l:.3}, {h:.3}]", f.mean),
            _ => format!("{:.3}", f.mean),
        },
    }
}

/// The coefficient of variation as a percentage, `-` when there is none.
fn cv_pct(f: Option<&results::FigureStats>) -> String {
    f.and_then(|f| f.cv).map_or("-".into(), |cv| format!("{:.1}%", cv * 100.0))
}

/// The statistics over the repetitions, one line per (server model, read path, phase): the
/// number of samples; MB/s and broker CPU s/GB (user + sys) as `mean ± half-width` of the 95%
/// confidence interval (Student's t) with their coefficient of variation; the ratio of both to
/// the reference `copy` (`threaded`'s; per repetition, then averaged) as `mean [low, high]`.
pub fn summary_table(r: &Results) -> String {
    let header = [
        "model",
        "read path",
        "phase",
        "n",
        "MB/s (mean ± 95% CI)",
        "cv",
        "broker CPU s/GB",
        "cv",
        "MB/s / copy [95% CI]",
        "CPU / copy [95% CI]",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = vec![header];
    for s in &r.summary {
        let fig = |list: &'_ [results::FigureStats], m: &str| list.iter().find(|f| f.metric == m).cloned();
        let (mb, cpu) = (fig(&s.figures, "mb_per_sec"), fig(&s.figures, "broker_cpu_s_per_gb"));
        let (rmb, rcpu) = (fig(&s.ratio_to_copy, "mb_per_sec"), fig(&s.ratio_to_copy, "broker_cpu_s_per_gb"));
        rows.push(vec![
            s.server_model.clone().unwrap_or_else(|| "-".into()),
            s.read_path.clone(),
            s.phase.clone(),
            s.samples.to_string(),
            mean_ci(mb.as_ref(), 1),
            cv_pct(mb.as_ref()),
            mean_ci(cpu.as_ref(), 3),
            cv_pct(cpu.as_ref()),
            ratio_ci(rmb.as_ref()),
            ratio_ci(rcpu.as_ref()),
        ]);
    }
    format_rows(rows)
}

/// Columns padded to their widest cell (counted in characters): the first three (model, read
/// path, phase) left-aligned, the others right-aligned.
fn format_rows(rows: Vec<Vec<String>>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..columns).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| if i < 3 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// The table of every entry (see [`table`]); with repeats, a `rep` column after the phase.
/// Broker CPU s/GB is per entry, so per (server model, read path) combination.
fn entries_table(r: &Results) -> String {
    // The loopback TCP limit (iperf3) is the ceiling of a consumer over loopback; without it,
    // the fastest figure.
    let usable = || r.limits.figures.iter().filter(|f| f.bytes_per_sec.is_some_and(|b| b > 0.0));
    let best_limit = usable().find(|f| f.key == "iperf3_loopback").or_else(|| {
        usable().max_by(|a, b| a.bytes_per_sec.partial_cmp(&b.bytes_per_sec).unwrap_or(std::cmp::Ordering::Equal))
    });
    let repeated = r.paths.iter().any(|p| p.repetition > 0);
    let mut header: Vec<String> = [
        "model",
        "read path",
        "phase",
        "MB/s",
        "records/s",
        "broker CPU s/GB",
        "fetch p50/p99/p99.9",
        "e2e p50/p99/p99.9/max",
        "rebalance",
        "bound by",
    ]
    .map(String::from)
    .to_vec();
    if let Some(l) = best_limit {
        header.push(format!("x {}", l.label));
    }
    if repeated {
        header.insert(3, "rep".into());
    }
    let qualified = r.compares_models();
    let mut rows = vec![header.clone()];
    let mut warnings = Vec::new();
    for p in &r.paths {
        let f = &p.fetch_latency.summary;
        let e = &p.end_to_end_latency.corrected.summary;
        // The figure and its warning come together (a client-bound figure is never alone).
        let shown = super::attribution::show_mb_per_sec(p, 1, qualified);
        warnings.extend(shown.warning);
        let mut row = vec![
            p.server_model.clone().unwrap_or_else(|| "-".into()),
            p.read_path.clone(),
            p.phase.clone(),
            shown.text,
            format!("{:.0}", p.records_per_sec),
            format!("{:.3}", p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb),
            [f.p50_us, f.p99_us, f.p999_us].map(|x| short_latency(x, f.count)).join("/"),
            [e.p50_us, e.p99_us, e.p999_us, e.max_us].map(|x| short_latency(x, e.count)).join("/"),
            p.rebalance_ms.map_or("-".into(), |x| format!("{x:.0}ms")),
            shown.bound,
        ];
        if let Some(l) = best_limit {
            let ratio = p.ratio_to_limits.iter().find(|x| x.key == l.key).map(|x| x.ratio);
            row.push(ratio.map_or("-".into(), |x| format!("{x:.2}")));
        }
        if repeated {
            row.insert(3, p.repetition.to_string());
        }
        rows.push(row);
    }
    let mut out = format_rows(rows);
    for w in warnings {
        out += &format!("! {w}\n");
    }
    out
}

/// The name of a run of `w` (its results files `<date>-<name>.*` and the results' workload
/// `name`): `w.name`, except that a workload whose `name` is the default (`"default"`: no
/// workload file, or a file without `name`) serving a log directory (`--log-dir` or `log_dir`)
/// is named `log-dir-<the directory's last path component>`, file-safe ([`file_safe`]);
/// `log-dir` when the path has no last component (`/`).
fn run_name(w: &Workload) -> String {
    match &w.log_dir {
        Some(dir) if w.name == Workload::default().name => {
            let last = dir
                .file_name()
                .map(|n| n.to_owned())
                .or_else(|| fs::canonicalize(dir).ok()?.file_name().map(|n| n.to_owned()));
            match last {
                Some(n) => format!("log-dir-{}", file_safe(&n.to_string_lossy())),
                None => "log-dir".to_string(),
            }
        }
        _ => w.name.clone(),
    }
}

/// `name` with every character other than an ASCII letter, digit, `-` or `_` replaced by `_`.
fn file_safe(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> io::Result<TempDir> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let p = std::env::temp_dir().join(format!("fetchbench-run-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(UNIX_EPOCH + Duration::from_secs(1_796_027_883)), "2026-11-30T08:38:03Z");
    }

    #[test]
    fn latencies_print_short() {
        assert_eq!(short_latency(850.0, 1), "850us");
        assert_eq!(short_latency(12_345.0, 1), "12.3ms");
        assert_eq!(short_latency(1_200_000.0, 1), "1.20s");
        assert_eq!(short_latency(5.0, 0), "-");
    }

    #[test]
    fn auto_pinning_splits_the_allowed_cpus() {
        let cpus = allowed_cpus_cached();
        match resolve_pinning(&CpuPinning::Auto) {
            Some((b, c)) => {
                assert!(cpus.len() >= 2);
                assert_eq!(b.len(), cpus.len().div_ceil(2));
                assert!(!c.is_empty() && b.iter().all(|x| !c.contains(x)));
                assert_eq!([b, c].concat(), cpus);
            }
            None => assert!(cpus.len() < 2),
        }
        assert_eq!(resolve_pinning(&CpuPinning::None), None);
    }

    #[test]
    fn a_default_workload_on_a_log_dir_is_named_after_it() {
        let mut w = Workload::default();
        assert_eq!(run_name(&w), "default");
        w.log_dir = Some(PathBuf::from("/data/kafka logs.1/"));
        assert_eq!(run_name(&w), "log-dir-kafka_logs_1");
        w.log_dir = Some(PathBuf::from("/"));
        assert_eq!(run_name(&w), "log-dir");
        let dir = tempfile::tempdir().unwrap();
        w.log_dir = Some(dir.path().join("."));
        let last = dir.path().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(run_name(&w), format!("log-dir-{}", file_safe(&last)));
        // A name the workload sets is kept.
        w.name = "mine".into();
        assert_eq!(run_name(&w), "mine");
    }

    /// Model by model, every read path under each; repetitions rotate the whole list of
    /// combinations (so each model's paths move together, and a drift spreads over both
    /// models).
    #[test]
    fn combinations_go_model_by_model_and_repetitions_rotate_them() {
        use ReadPathKind::{Copy, Sendfile, UringSplice};
        use ServerModel::{Threaded, Uring};
        let order = combination_order(&[Threaded, Uring], &[Sendfile, UringSplice], 3);
        let rep = |r: u32| order.iter().filter(|c| c.0 == r).map(|c| (c.1, c.2)).collect::<Vec<_>>();
        assert_eq!(rep(0), [(Threaded, Sendfile), (Threaded, UringSplice), (Uring, Sendfile), (Uring, UringSplice)]);
        assert_eq!(rep(1), [(Threaded, UringSplice), (Uring, Sendfile), (Uring, UringSplice), (Threaded, Sendfile)]);
        assert_eq!(rep(2)[0], (Uring, Sendfile));
        assert_eq!(order.len(), 12);
        // One model: the read paths' rotation of before.
        let one: Vec<_> =
            combination_order(&[Threaded], &[Copy, Sendfile], 2).into_iter().map(|c| (c.0, c.2)).collect();
        assert_eq!(one, [(0, Copy), (0, Sendfile), (1, Sendfile), (1, Copy)]);
        assert!(combination_order(&[], &[Copy], 2).is_empty());
    }

    /// A combination that cannot run says why: `null` (zeros), a model that refuses the path
    /// (the blocking call), before any broker starts.
    #[test]
    fn combinations_that_cannot_run_name_the_reason() {
        assert!(can_run(ServerModel::Threaded, ReadPathKind::Null).unwrap_err().contains("zeros"));
        assert_eq!(can_run(ServerModel::Threaded, ReadPathKind::Copy), Ok(()));
        // uring: its probe may fail on this machine (then that is the reason); it never runs
        // sendfile.
        let e = can_run(ServerModel::Uring, ReadPathKind::Sendfile).unwrap_err();
        assert!(e.starts_with("server.model=uring cannot run"), "{e}");
        if ServerModel::Uring.probe().is_ok() {
            assert!(e.contains("read path sendfile") && e.contains("blocking"), "{e}");
        }
    }

    #[test]
    fn stall_argument_parses() {
        assert_eq!(
            parse_stall("2000:1000").unwrap(),
            Stall { at: Duration::from_secs(2), length: Duration::from_secs(1) }
        );
        assert!(parse_stall("2000").is_err());
    }
}
