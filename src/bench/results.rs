//! The results file of a benchmark run: one JSON document per resolved workload of `fetchbench
//! run`, or per `fetchbench read-paths` run (the read paths alone, phase `loopback`), its schema
//! ([`Results`], a doc comment per field with its unit), the named figures of an entry that
//! summaries and `fetchbench compare` go by ([`METRICS`]), a validator with clear errors
//! ([`validate`]), a CSV of the entries ([`write_csv`]) and one of the statistics over
//! repetitions ([`write_summary_csv`]).
//!
//! ## Schema (`schema` = [`SCHEMA`], `schema_version` = [`SCHEMA_VERSION`])
//!
//! ```text
//! { schema, schema_version, date,
//!   machine {nproc, kernel, arch, cpu_model, memory_bytes, io_uring},
//!   git {commit, dirty}, command [..], target,
//!   broker {bootstrap, broker_id, configs {NAME: VALUE|null}, metrics, machine {..}|null} | null,
//!   interrupted, notes [..],
//!   workload {every workload key, as in the TOML file} | null,
//!   loopback {file, temp_file, file_size, slice_size, total_bytes, cold_cache, buffer_size,
//!             pipe_size} | null,
//!   limits {source, figures [ {key, label, bytes_per_sec, cpu_seconds_per_gb} ]},
//!   paths [ { server_model, read_path, phase, repetition, seconds, bytes, records, mb_per_sec, records_per_sec,
//!             produced_mb_per_sec,
//!             broker_cpu {user_s_per_gb, sys_s_per_gb}, consumer_cpu {..},
//!             minor_faults_per_gb, major_faults_per_gb, context_switches_per_gb,
//!             syscalls_per_gb, user_copied_bytes_per_gb,
//!             residency_before, broker_rss_bytes,
//!             fetch_latency {summary {count, p50_us, p99_us, p999_us, max_us}, histogram},
//!             fetch_long_poll_latency {..}, fetches_in_flight_at_start,
//!             poll_latency {..},
//!             end_to_end_latency {raw {..}, corrected {..}},
//!             rebalance_ms, ratio_to_limits [ {key, ratio} ],
//!             loopback {requested, passes, transfers, syscalls, syscalls_per_mb,
//!                       cpu_user_seconds, cpu_system_seconds, receiver_cpu_seconds,
//!                       sender_cpu_seconds_per_gb, resident_fraction_min,
//!                       resident_fraction_max, cold_cache_effective} | null,
//!             bound_by,
//!             attribution {method, broker_cpus [..], client_cpus [..], broker_busy, client_busy,
//!                          cpus_busy, broker_split {user, system, softirq, irq, iowait, steal} | null,
//!                          client_split {..}, broker_threads_cpus, client_threads_cpus,
//!                          steal, steal_max, steal_flagged, network_fraction, reason,
//!                          samples [ {t_s, seconds, mb_per_sec, broker_busy, client_busy, steal} ],
//!                          summary {samples, median_mb_per_sec, min_mb_per_sec, max_mb_per_sec, cv}}
//!                         | null } ],
//!   summary [ { server_model, read_path, phase, samples,
//!               figures [ {metric, samples, mean, stddev, ci95_low, ci95_high, cv} ],
//!               ratio_to_copy [ {metric, samples, mean, stddev, ci95_low, ci95_high, cv} ] } ] }
//! ```
//!
//! `paths` holds one entry per (server model, read path, phase, repetition): `fetchbench run`
//! measures every read path under every server model of the workload (`server_models`), and
//! `--repeat N` every combination N times (`repetition` 0 to N-1). `server_model` is the
//! broker's front end that served the entry (`threaded` or `uring`, see
//! [`crate::broker::ServerModel`]); `null` where no broker of fetchbench's served it: an
//! external cluster (`target` `bootstrap:...`) and `fetchbench read-paths` (`target`
//! `loopback`). `summary` holds, per (server model, read path, phase), the statistics over its
//! repetitions of every figure `compare` knows
//! ([`METRICS`], by name): the mean, the sample standard deviation, the 95%
//! confidence interval of the mean (Student's t, n - 1 degrees of freedom) and the
//! coefficient of variation (stddev / mean); `ratio_to_copy` the same over the per-repetition
//! ratios entry / `copy` (same repetition and phase; the `copy` entry under `threaded`, Kafka's
//! model and read+write, the reference every combination is set against, or the `copy` entry
//! with `server_model` `null` in a document without models; empty for that reference itself
//! and in runs without it). With one repetition `stddev`, the interval and `cv` are `null`. The lower
//! bound is clamped to 0 (every figure is non-negative; see [`super::stats`]). A figure no
//! repetition has (`rebalance_ms` of a tail) is left out.
//!
//! ## Two kinds of document
//!
//! - `fetchbench run` (`target` `embedded` or `bootstrap:HOST:PORT`): `workload` is the resolved
//!   workload, `loopback` is `null`, and the entries have the phases `catch_up`, `tail` and
//!   `mixed`, their `loopback` `null`. Against a cluster (`bootstrap:...`) `broker` records
//!   the broker the run connected to ([`BrokerRecord`]: its configs as DescribeConfigs
//!   reported them, and with `--metrics` the endpoint the broker figures came from and the
//!   broker's machine); `null` in an embedded run (the broker is this process, on `machine`)
//!   and in a `read-paths` document. Entries of a run against a `fetchbench serve` with
//!   `--metrics` name the broker's server model and the read path it served with (switched per
//!   combination through IncrementalAlterConfigs, see [`super::run`]); against any other
//!   cluster `server_model` is `null` and `read_path` `external`.
//! - `fetchbench read-paths` (`target` `loopback`, see [`super::read_paths`]): each read path
//!   moves a file to an in-process loopback TCP receiver ([`super::loopback`]), no broker, no
//!   records. `workload` is `null` and `loopback` holds the configuration ([`LoopbackConfig`]);
//!   one entry per measured path, phase `loopback`, repetition 0, its `loopback` holding the
//!   path's own figures ([`LoopbackFigures`]). The shared fields mean: `seconds` and `bytes`
//!   the measured passes (warm-up excluded), `mb_per_sec` their throughput, `broker_cpu` the
//!   whole process (the sending path, its kernel work and `iou-wrk` threads, and the receiver
//!   thread), `residency_before` the page-cache residency before a pass (the lowest of a hot
//!   run, the highest of a cold one), `ratio_to_limits` as in a run. Not measured there, and 0
//!   or empty: `records`, `records_per_sec`, `consumer_cpu`, the fault and context-switch
//!   counts, `broker_rss_bytes`, every latency; `produced_mb_per_sec`,
//!   `fetches_in_flight_at_start` and `rebalance_ms` are `null`. Paths that could not run are in `notes` (`read path K: skipped: ...`, `read path
//!   K: FAILED: ...`), as in a run (there `<model>/<path>: skipped: ...` when the run compares
//!   server models, see [`super::run`]).
//!
//! Units: MB = 1e6 bytes, GB = 1e9 bytes (of record batches served to consumers); CPU seconds
//! are process CPU time (`getrusage`/`/proc`) over the measured interval; latencies are in
//! microseconds in summaries and nanoseconds inside histograms (base64 of the HdrHistogram
//! V2 serialization, see [`super::histogram`]). Every number is finite and non-negative.
//! Unknown fields are refused: a reader of version 4 knows every field of version 4.
//!
//! Version history: 1 (first harness: no limits, notes, target, poll latency or machine
//! details); 2 (one entry per (read path, phase)); 3 (`repetition`, `summary`, phase `mixed`,
//! `produced_mb_per_sec`, `fetch_long_poll_latency` apart from `fetch_latency`,
//! `fetches_in_flight_at_start`); 4 (`fetchbench read-paths` documents: the top-level
//! and per-entry `loopback`, phase `loopback`, `workload` `null` there; before, `read-paths`
//! wrote its own `fetchbench-read-paths` version 1 document, which nothing reads any more);
//! 5 (`server_model` in every entry and summary, the workload key `server_models`,
//! entries keyed by (server model, read path, phase, repetition)); 6 (`broker`); 7 (this one:
//! `bound_by` and `attribution` per entry, see [`super::attribution`]; `null` in phase
//! `loopback`; an entry bound by `client_cpu` has its warning in `notes`).
//! [`Results::from_json`] reads version 2, 3, 4, 5 and 6 files too, converted (version 2: every entry
//! repetition 0, the version 3 path fields empty or `null`, an empty `summary`; 2 and 3: every
//! `loopback` `null`; 2 to 4: `server_model` `threaded` in every entry and summary of an
//! embedded run, the only model there was, `null` for an external cluster and a `read-paths`
//! document; 2 to 5: `broker` `null`, as it was not recorded; 2 to 6: `bound_by` and
//! `attribution` `null` in every entry, not measured then, and the workload key
//! `catch_up_duration` `"0s"` where absent: those runs read the backlog once); [`validate`]
//! takes version 7 only; any other version is refused rather than guessed at. A workload key added since (`transaction_records`, `aborted_transactions`: a
//! transactional backlog) is absent from the `workload` of older files and reads as its
//! default, which is what those runs had (no transactions); the consumers' isolation level is
//! `consumer_config."isolation.level"` when set, else the client's default
//! ([`Workload::read_committed`]).

use std::fmt;
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::stats::{estimate, Estimate};
use super::workload::Workload;
use crate::machine::Machine;
use crate::metrics::{Latency, Summary};

/// The `schema` field of every results file.
pub const SCHEMA: &str = "fetchbench-results";

/// Version of the results schema; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 8;

/// The older versions [`Results::from_json`] still reads (converted to [`SCHEMA_VERSION`]).
pub const READABLE_OLD_VERSIONS: [u32; 6] = [2, 3, 4, 5, 6, 7];

/// One results file: a run of one resolved workload over its read paths, or a `fetchbench
/// read-paths` run (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Results {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the run started, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The machine the run was on.
    pub machine: Machine,
    /// The source the binary was built from.
    pub git: Git,
    /// The exact command, as its argument vector (program first).
    pub command: Vec<String>,
    /// What was measured: `embedded` (the in-process broker), `bootstrap:HOST:PORT` (an
    /// external cluster, `--bootstrap`) or `loopback` (`fetchbench read-paths`: the read paths
    /// alone, to an in-process receiver).
    pub target: String,
    /// The broker of a run against a cluster (`target` `bootstrap:...`), `null` otherwise (see
    /// the [module docs](self)).
    pub broker: Option<BrokerRecord>,
    /// Whether the run was stopped early (Ctrl-C): `paths` holds what was measured until then.
    pub interrupted: bool,
    /// What the run noticed and the reader should know: skipped read paths, a drain shorter
    /// than the warmup, figures not measured on this target.
    pub notes: Vec<String>,
    /// The resolved workload, with every key as in a workload file (see
    /// [`Workload::to_table`]); [`Results::workload`] parses it. `null` in a `fetchbench
    /// read-paths` document.
    pub workload: Value,
    /// What `fetchbench read-paths` measured with; `null` in a `fetchbench run` document (and in
    /// a file read from version 2 or 3).
    pub loopback: Option<LoopbackConfig>,
    /// This machine's limits, when known (`scripts/baseline-limits.sh`).
    pub limits: LimitsResult,
    /// One entry per (server model, read path, phase, repetition), in the order they ran.
    pub paths: Vec<PathResult>,
    /// Statistics over the repetitions, one entry per (server model, read path, phase) in the
    /// order of their first entries ([`summarize`]); empty in a file read from version 2.
    pub summary: Vec<SummaryEntry>,
}

/// The broker a run against a cluster (`--bootstrap`) connected to, as it described itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerRecord {
    /// `host:port` of `--bootstrap`.
    pub bootstrap: String,
    /// Its node id (Metadata); -1 when it could not be asked.
    pub broker_id: i32,
    /// Every broker config DescribeConfigs returned when the run started, name to value
    /// (`null`: sensitive or unset); empty when the broker refused DescribeConfigs (a note
    /// says why).
    pub configs: std::collections::BTreeMap<String, Option<String>>,
    /// `host:port` of the metrics endpoint (`--metrics`) the broker figures were read from;
    /// `null` without `--metrics` (broker figures 0, not measured).
    pub metrics: Option<String>,
    /// The broker's machine, as its endpoint's `machine_info` describes it; `null` without
    /// `--metrics` or when the endpoint could not be read.
    pub machine: Option<Machine>,
}

/// Which way is better for a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Throughput: lower is a regression.
    Higher,
    /// Cost and latency: higher is a regression.
    Lower,
}

/// One compared metric: its name (unit suffix included), direction and getter.
pub struct Metric {
    /// Column name, e.g. `mb_per_sec`, `e2e_corrected_p99_us`.
    pub name: &'static str,
    /// Which way is better.
    pub better: Better,
    /// The value in an entry; `None` when the entry has none (no rebalance measured, a latency
    /// without samples such as end-to-end in a catch-up).
    pub get: fn(&PathResult) -> Option<f64>,
}

/// The figures of an entry by name, in table order: what [`summarize`] takes the statistics of
/// and `fetchbench compare` (`super::compare`) compares.
pub const METRICS: &[Metric] = &[
    Metric { name: "mb_per_sec", better: Better::Higher, get: |p| Some(p.mb_per_sec) },
    Metric { name: "records_per_sec", better: Better::Higher, get: |p| Some(p.records_per_sec) },
    Metric {
        name: "broker_cpu_s_per_gb",
        better: Better::Lower,
        get: |p| Some(p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb),
    },
    Metric { name: "broker_cpu_user_s_per_gb", better: Better::Lower, get: |p| Some(p.broker_cpu.user_s_per_gb) },
    Metric { name: "broker_cpu_sys_s_per_gb", better: Better::Lower, get: |p| Some(p.broker_cpu.sys_s_per_gb) },
    Metric { name: "consumer_cpu_user_s_per_gb", better: Better::Lower, get: |p| Some(p.consumer_cpu.user_s_per_gb) },
    Metric { name: "consumer_cpu_sys_s_per_gb", better: Better::Lower, get: |p| Some(p.consumer_cpu.sys_s_per_gb) },
    Metric { name: "minor_faults_per_gb", better: Better::Lower, get: |p| Some(p.minor_faults_per_gb) },
    Metric { name: "major_faults_per_gb", better: Better::Lower, get: |p| Some(p.major_faults_per_gb) },
    Metric { name: "context_switches_per_gb", better: Better::Lower, get: |p| Some(p.context_switches_per_gb) },
    Metric { name: "syscalls_per_gb", better: Better::Lower, get: |p| p.syscalls_per_gb },
    Metric { name: "user_copied_bytes_per_gb", better: Better::Lower, get: |p| p.user_copied_bytes_per_gb },
    Metric { name: "broker_rss_bytes", better: Better::Lower, get: |p| Some(p.broker_rss_bytes as f64) },
    Metric { name: "fetch_p50_us", better: Better::Lower, get: |p| sampled(&p.fetch_latency, |s| s.p50_us) },
    Metric { name: "fetch_p99_us", better: Better::Lower, get: |p| sampled(&p.fetch_latency, |s| s.p99_us) },
    Metric { name: "fetch_p999_us", better: Better::Lower, get: |p| sampled(&p.fetch_latency, |s| s.p999_us) },
    Metric {
        name: "e2e_corrected_p50_us",
        better: Better::Lower,
        get: |p| sampled(&p.end_to_end_latency.corrected, |s| s.p50_us),
    },
    Metric {
        name: "e2e_corrected_p99_us",
        better: Better::Lower,
        get: |p| sampled(&p.end_to_end_latency.corrected, |s| s.p99_us),
    },
    Metric {
        name: "e2e_corrected_p999_us",
        better: Better::Lower,
        get: |p| sampled(&p.end_to_end_latency.corrected, |s| s.p999_us),
    },
    Metric { name: "rebalance_ms", better: Better::Lower, get: |p| p.rebalance_ms },
];

/// A percentile of `l`, `None` when it has no samples (end-to-end latency in a catch-up, fetch
/// latency of an external cluster): nothing to compare or summarize, rather than a 0.
fn sampled(l: &LatencyResult, f: fn(&Summary) -> f64) -> Option<f64> {
    (l.summary.count > 0).then(|| f(&l.summary))
}

/// The statistics of one (server model, read path, phase) over its repetitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryEntry {
    /// The server model ([`PathResult::server_model`]).
    pub server_model: Option<String>,
    /// The read path.
    pub read_path: String,
    /// The phase.
    pub phase: String,
    /// Entries (repetitions) of this read path and phase.
    pub samples: u64,
    /// Every figure of [`METRICS`] some repetition has, in that order.
    pub figures: Vec<FigureStats>,
    /// The same for the ratio entry / reference `copy` of each repetition (the `copy` entry
    /// under `threaded`, see the [module docs](self); empty for that entry and in runs without
    /// it).
    pub ratio_to_copy: Vec<FigureStats>,
}

/// One figure over the repetitions (see [`super::stats::estimate`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureStats {
    /// The figure: a [`Metric::name`], with its unit (`mb_per_sec`).
    pub metric: String,
    /// Values the statistics are over.
    pub samples: u64,
    /// Their mean, in the figure's unit (a plain ratio in `ratio_to_copy`).
    pub mean: f64,
    /// Sample standard deviation (n - 1); `null` for one value.
    pub stddev: Option<f64>,
    /// Lower bound of the 95% confidence interval of the mean (Student's t), clamped to 0;
    /// `null` for one value.
    pub ci95_low: Option<f64>,
    /// Upper bound of that interval; `null` for one value.
    pub ci95_high: Option<f64>,
    /// Coefficient of variation, stddev / mean; `null` for one value or a mean of 0.
    pub cv: Option<f64>,
}

impl FigureStats {
    fn of(metric: &str, e: Estimate) -> FigureStats {
        FigureStats {
            metric: metric.to_string(),
            samples: e.samples as u64,
            mean: e.mean,
            stddev: e.stddev,
            ci95_low: e.ci95.map(|c| c.0),
            ci95_high: e.ci95.map(|c| c.1),
            cv: e.cv,
        }
    }
}

/// Whether `p` is the reference of `ratio_to_copy` and the within-run ratios: the `copy`
/// entry under `threaded` (Kafka's model and read+write), or with no model (an external
/// cluster, `fetchbench read-paths`).
pub fn is_copy_reference(p: &PathResult) -> bool {
    p.read_path == "copy" && p.server_model.as_deref().is_none_or(|m| m == "threaded")
}

/// The (server model, read path, phase) of an entry: what `summary`, `compare` and the chart
/// group repetitions by.
pub type EntryKey<'a> = (Option<&'a str>, &'a str, &'a str);

impl PathResult {
    /// This entry's [`EntryKey`].
    pub fn key(&self) -> EntryKey<'_> {
        (self.server_model.as_deref(), self.read_path.as_str(), self.phase.as_str())
    }
}

/// The name of a (server model, read path) in tables, notes and charts: `model/path` when
/// `qualified`, else the read path alone (what a run of only `threaded` has always shown).
pub fn combination_label(server_model: Option<&str>, read_path: &str, qualified: bool) -> String {
    match server_model {
        Some(m) if qualified => format!("{m}/{read_path}"),
        _ => read_path.to_string(),
    }
}

/// Whether labels of these entries need their server model ([`combination_label`]): some
/// entry ran under a model other than `threaded`.
pub fn models_compared<'a>(paths: impl IntoIterator<Item = &'a PathResult>) -> bool {
    paths.into_iter().any(|p| p.server_model.as_deref().is_some_and(|m| m != "threaded"))
}

/// The [`SummaryEntry`]s of `paths` (see the [module docs](self)): one per (server model, read
/// path, phase) in the order of their first entries.
pub fn summarize(paths: &[PathResult]) -> Vec<SummaryEntry> {
    let mut keys: Vec<EntryKey<'_>> = Vec::new();
    for p in paths {
        if !keys.contains(&p.key()) {
            keys.push(p.key());
        }
    }
    keys.into_iter()
        .map(|key| {
            let (server_model, read_path, phase) = key;
            let entries: Vec<&PathResult> = paths.iter().filter(|p| p.key() == key).collect();
            let reference = entries.first().is_some_and(|p| is_copy_reference(p));
            let figures = METRICS
                .iter()
                .filter_map(|m| {
                    let values: Vec<f64> = entries.iter().filter_map(|p| (m.get)(p)).collect();
                    (!values.is_empty()).then(|| FigureStats::of(m.name, estimate(&values)))
                })
                .collect();
            let ratio_to_copy = if reference {
                Vec::new()
            } else {
                METRICS
                    .iter()
                    .filter_map(|m| {
                        let values: Vec<f64> = entries
                            .iter()
                            .filter_map(|p| {
                                let copy = paths.iter().find(|c| {
                                    is_copy_reference(c) && c.phase == phase && c.repetition == p.repetition
                                })?;
                                match ((m.get)(p), (m.get)(copy)) {
                                    (Some(x), Some(c)) if c > 0.0 => Some(x / c),
                                    _ => None,
                                }
                            })
                            .collect();
                        (!values.is_empty()).then(|| FigureStats::of(m.name, estimate(&values)))
                    })
                    .collect()
            };
            SummaryEntry {
                server_model: server_model.map(str::to_string),
                read_path: read_path.to_string(),
                phase: phase.to_string(),
                samples: entries.len() as u64,
                figures,
                ratio_to_copy,
            }
        })
        .collect()
}

/// The machine's limits a run was set against: reference figures for moving bytes (fio from
/// the page cache, iperf3 over loopback), as [`super::limits::Limits`] reads them from
/// `scripts/baseline-limits.sh` output.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsResult {
    /// Where the figures came from (the limits file or the script run), `null` when the run
    /// had none (fio / iperf3 not installed and no `--limits`).
    pub source: Option<String>,
    /// The figures, empty without a source.
    pub figures: Vec<LimitFigure>,
}

/// One reference figure of [`LimitsResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitFigure {
    /// Key (`fio_psync`, `fio_mmap`, `fio_splice`, `fio_io_uring`, `fio_direct`,
    /// `iperf3_loopback`, `iperf3_loopback_sendfile`).
    pub key: String,
    /// Column label (`fio psync`, `iperf3 -Z`).
    pub label: String,
    /// Throughput, bytes/s; `null` when the tool failed.
    pub bytes_per_sec: Option<f64>,
    /// CPU seconds per GB moved; `null` when not reported.
    pub cpu_seconds_per_gb: Option<f64>,
}

/// A path's throughput as a fraction of one limit (`mb_per_sec * 1e6 / bytes_per_sec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitRatio {
    /// The [`LimitFigure::key`].
    pub key: String,
    /// The ratio (1.0 = as fast as the limit).
    pub ratio: f64,
}

/// The git state of the working tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Git {
    /// `git rev-parse HEAD` of the source tree the binary was built from, `null` when unknown.
    pub commit: Option<String>,
    /// Whether `git status --porcelain` listed changes (the binary may not be `commit`).
    pub dirty: bool,
}

impl Git {
    /// The state of the source tree this binary was built from (`CARGO_MANIFEST_DIR` at build
    /// time), whatever the working directory; `commit: null` when that tree is gone or is not
    /// a git repository (an installed binary).
    pub fn current() -> Git {
        Git::of(std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// The state of the git repository at `dir`.
    pub fn of(dir: &std::path::Path) -> Git {
        let run = |args: &[&str]| {
            let out = std::process::Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        // Only when `dir` is the repository's top level (not a directory inside another one).
        let top = run(&["rev-parse", "--show-toplevel"]);
        let same = top.is_some_and(|t| std::fs::canonicalize(t).ok() == std::fs::canonicalize(dir).ok());
        let commit = if same { run(&["rev-parse", "HEAD"]) } else { None };
        let dirty = commit.is_some() && run(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
        Git { commit, dirty }
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (UTC): the format of [`Results::date`].
pub fn utc_timestamp(t: SystemTime) -> String {
    utc_date(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs())
}

/// `secs` since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, proleptic Gregorian).
pub fn utc_date(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// CPU time of a process per GB served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuPerGb {
    /// User CPU seconds per GB.
    pub user_s_per_gb: f64,
    /// System (kernel) CPU seconds per GB.
    pub sys_s_per_gb: f64,
}

/// A latency summary with the histogram it was taken from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyResult {
    /// Percentiles in microseconds.
    pub summary: Summary,
    /// The histogram (ns), base64 of its V2 serialization ([`Latency::encode`]).
    pub histogram: String,
}

impl LatencyResult {
    /// The summary and encoding of `latency`.
    pub fn of(latency: &Latency) -> LatencyResult {
        LatencyResult { summary: latency.summary(), histogram: latency.encode() }
    }

    /// No samples.
    pub fn empty() -> LatencyResult {
        LatencyResult::of(&Latency::new())
    }
}

/// Produce-to-consume latency, both views (see [`super::histogram::LatencyRecorder`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndToEnd {
    /// From the actual send time.
    pub raw: LatencyResult,
    /// From the intended send time of the schedule (coordinated omission corrected).
    pub corrected: LatencyResult,
}

/// The measurements of one read path under one server model in one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathResult {
    /// The server model that actually ran ([`crate::broker::ServerModel::name`]: `threaded`,
    /// `uring`); `null` for an external cluster and in a `fetchbench read-paths` document (no
    /// broker of fetchbench's); `threaded` in an embedded run read from version 2 to 4.
    pub server_model: Option<String>,
    /// The read path that actually ran ([`crate::read_path::ReadPathKind::name`]).
    pub read_path: String,
    /// The phase: `catch_up`, `tail` or `mixed` (see [`super::mixed`]: there `seconds`,
    /// `bytes`, `records` and the throughputs are the drain's, end-to-end latency the tail
    /// consumers').
    pub phase: String,
    /// Which repetition of the run this is, from 0 (`--repeat N`: 0 to N-1).
    pub repetition: u32,
    /// Measured wall-clock time, s.
    pub seconds: f64,
    /// Record-batch bytes delivered to consumers (all groups), bytes.
    pub bytes: u64,
    /// Records delivered to consumers (all groups).
    pub records: u64,
    /// Throughput, MB/s (1e6 bytes).
    pub mb_per_sec: f64,
    /// Throughput, records/s.
    pub records_per_sec: f64,
    /// Record-batch MB/s (1e6 bytes, after compression) the producers wrote over the measured
    /// interval (`tail` and `mixed`); `null` for `catch_up` and in a version 2 file.
    pub produced_mb_per_sec: Option<f64>,
    /// CPU of the broker process, s/GB.
    pub broker_cpu: CpuPerGb,
    /// CPU of the consumer processes together, s/GB.
    pub consumer_cpu: CpuPerGb,
    /// Minor page faults of the broker, per GB.
    pub minor_faults_per_gb: f64,
    /// Major page faults (disk reads through faults) of the broker, per GB.
    pub major_faults_per_gb: f64,
    /// Voluntary + involuntary context switches of the broker, per GB.
    pub context_switches_per_gb: f64,
    /// System calls of the embedded broker's threads, per GB, counted by the kernel (the
    /// `raw_syscalls:sys_enter` tracepoint, [`super::counters`]); `null` where they cannot be
    /// counted (an external broker, no tracefs or no permission: a note says why) and in a
    /// version 7 file.
    pub syscalls_per_gb: Option<f64>,
    /// Record bytes the broker's read path read into user-space memory before sending them,
    /// per GB delivered ([`crate::read_path::TransferStats::user_copied`]: about 1e9 for
    /// `copy`, 0 for `sendfile`); `null` for an external broker without a fetchbench metrics
    /// endpoint and in a version 7 file.
    pub user_copied_bytes_per_gb: Option<f64>,
    /// Fraction (0..=1) of the backlog's pages in the page cache when the path started.
    pub residency_before: f64,
    /// Resident set size of the broker process at the end of the path, bytes (embedded: the
    /// fetchbench process, consumers included; 0 for an external target).
    pub broker_rss_bytes: u64,
    /// Broker-side Fetch latency of the Fetches whose response carried record bytes: request
    /// read to response written (Kafka's Fetch `TotalTimeMs`, any long-poll wait included);
    /// empty for an external target.
    pub fetch_latency: LatencyResult,
    /// Broker-side latency of the Fetches whose response carried no record bytes (long polls
    /// that waited at the log end, fetches woken with nothing for them); `fetch_latency` holds
    /// the Fetches that returned data. Empty for an external target and in a version 2 file.
    pub fetch_long_poll_latency: LatencyResult,
    /// Fetch requests the embedded broker held (received, not yet answered) when the measured
    /// interval started: 0 in a catch-up (no Fetch of the warmup left); in the tail, consumers
    /// already waiting at the log end. `null` for an external cluster and in a version 2 file.
    pub fetches_in_flight_at_start: Option<u64>,
    /// Client-side: the duration of each consumer `poll` that returned records.
    pub poll_latency: LatencyResult,
    /// Produce-to-consume latency.
    pub end_to_end_latency: EndToEnd,
    /// Time from the first JoinGroup to every member having its assignment, ms; `null` when
    /// no rebalance was measured.
    pub rebalance_ms: Option<f64>,
    /// `mb_per_sec` against each limit with a throughput (empty without limits).
    pub ratio_to_limits: Vec<LimitRatio>,
    /// The read path's own figures of phase `loopback` (`fetchbench read-paths`); `null` in the
    /// other phases (and in a file read from version 2 or 3).
    pub loopback: Option<LoopbackFigures>,
    /// What limited this entry's figures ([`super::attribution`]): `broker_cpu`, `client_cpu`,
    /// `network`, `disk`, `producer_rate` or `none`; `null` in phase `loopback` and in a file
    /// read from version 2 to 6 (not measured then).
    #[serde(default)]
    pub bound_by: Option<BoundBy>,
    /// The utilisations and per-interval throughput samples `bound_by` was decided from;
    /// `null` where `bound_by` is.
    #[serde(default)]
    pub attribution: Option<Attribution>,
}

/// What limited a measured interval ([`PathResult::bound_by`]; decided by
/// [`super::attribution::classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundBy {
    /// The broker's CPUs were saturated (>= [`super::attribution::SATURATED`] busy).
    BrokerCpu,
    /// The clients' (consumers', producers') CPUs were saturated: the figure measures the
    /// clients, not the read path.
    ClientCpu,
    /// Throughput at >= [`super::attribution::NETWORK_FRACTION`] of the measured loopback TCP
    /// limit (iperf3).
    Network,
    /// A cold page cache with the broker's CPUs waiting on I/O, or throughput at the fio
    /// O_DIRECT limit.
    Disk,
    /// A rate-limited tail that kept up with its producers' rate.
    ProducerRate,
    /// Nothing saturated.
    #[serde(rename = "none")]
    Nothing,
}

impl BoundBy {
    /// The JSON name (`broker_cpu`, ..., `none`).
    pub fn name(self) -> &'static str {
        match self {
            BoundBy::BrokerCpu => "broker_cpu",
            BoundBy::ClientCpu => "client_cpu",
            BoundBy::Network => "network",
            BoundBy::Disk => "disk",
            BoundBy::ProducerRate => "producer_rate",
            BoundBy::Nothing => "none",
        }
    }

    /// Every value, in documentation order.
    pub const ALL: [BoundBy; 6] = [
        BoundBy::BrokerCpu,
        BoundBy::ClientCpu,
        BoundBy::Network,
        BoundBy::Disk,
        BoundBy::ProducerRate,
        BoundBy::Nothing,
    ];
}

/// The evidence of [`PathResult::bound_by`] (see [`super::attribution`] for how each figure is
/// taken). Fractions are 0..=1 of the CPU time of the CPUs named (ticks of `/proc/stat`), over
/// the whole measured interval unless said otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attribution {
    /// How the roles' CPU was told apart: `pinned` (the broker and the clients on disjoint CPUs:
    /// per-CPU `/proc/stat`), `shared` (unpinned or overlapping CPUs: the roles' threads' CPU
    /// seconds, over the CPUs this process may use), `external` (`--bootstrap`: the clients'
    /// CPUs only; the broker's from its metrics endpoint when there is one).
    pub method: String,
    /// The broker's CPUs (empty for `shared` and `external`).
    pub broker_cpus: Vec<u64>,
    /// The clients' CPUs (`pinned`, `external` with pinning); for `shared` every CPU the process
    /// may use.
    pub client_cpus: Vec<u64>,
    /// Busy fraction of the broker's CPUs (`pinned`: non-idle, non-iowait time, steal
    /// included; `shared`: its threads' CPU seconds over the shared CPUs' time; `external`: the
    /// endpoint's process CPU over the broker machine's CPUs); `null` when not measured.
    pub broker_busy: Option<f64>,
    /// Busy fraction of the clients' CPUs (as `broker_busy`).
    pub client_busy: f64,
    /// Busy fraction of every CPU the roles ran on (`shared`: what saturation is judged by).
    pub cpus_busy: f64,
    /// The broker CPUs' time split (`pinned`); `null` otherwise.
    pub broker_split: Option<CpuSplit>,
    /// The client CPUs' time split (`shared`: of all the shared CPUs).
    pub client_split: CpuSplit,
    /// The broker threads' CPU, CPU-seconds per second (1.0 = one CPU); `null` for an external
    /// broker.
    pub broker_threads_cpus: Option<f64>,
    /// The client threads' CPU in this process, CPU-seconds per second (kcat processes not
    /// included).
    pub client_threads_cpus: f64,
    /// Steal (time the hypervisor ran something else) over the CPUs the roles ran on.
    pub steal: f64,
    /// The highest steal of one sample.
    pub steal_max: f64,
    /// Whether `steal` or a sample's exceeded [`super::attribution::STEAL_FLAG`] (a note says so).
    pub steal_flagged: bool,
    /// `mb_per_sec` over the loopback TCP limit (iperf3) when limits are known, else `null`.
    pub network_fraction: Option<f64>,
    /// Why `bound_by` is what it is, one sentence.
    pub reason: String,
    /// One sample per sampling interval (1 s; the last one shorter), in order.
    pub samples: Vec<AttributionSample>,
    /// The per-sample throughput summarised.
    pub summary: ThroughputSummary,
}

/// A CPU time split, fractions (0..=1) of the CPUs' time (`/proc/stat`; `nice` counted in
/// `user`, `guest` already inside `user`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSplit {
    /// User (and nice) time.
    pub user: f64,
    /// System time (system calls, page faults; not interrupts).
    pub system: f64,
    /// Softirq time: on loopback the TCP receive work, also of the other side's sockets.
    pub softirq: f64,
    /// Hard interrupt time.
    pub irq: f64,
    /// Idle with I/O outstanding.
    pub iowait: f64,
    /// Stolen by the hypervisor.
    pub steal: f64,
}

/// One sampling interval of [`Attribution::samples`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributionSample {
    /// Its end, s from the interval's start.
    pub t_s: f64,
    /// Its length, s.
    pub seconds: f64,
    /// Delivered MB/s (1e6 bytes) in it (scaled so the samples add up to the entry's `bytes`).
    pub mb_per_sec: f64,
    /// The broker's busy fraction in it (as [`Attribution::broker_busy`]).
    pub broker_busy: Option<f64>,
    /// The clients' busy fraction in it.
    pub client_busy: f64,
    /// Steal in it.
    pub steal: f64,
}

/// The per-sample MB/s of [`Attribution::samples`] summarised: over the samples at least half
/// a sampling interval long (all when none is).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputSummary {
    /// Samples summarised.
    pub samples: u64,
    /// Their median, MB/s.
    pub median_mb_per_sec: f64,
    /// Their lowest, MB/s.
    pub min_mb_per_sec: f64,
    /// Their highest, MB/s.
    pub max_mb_per_sec: f64,
    /// Coefficient of variation (sample stddev / mean); `null` for fewer than 2 or a mean of 0.
    pub cv: Option<f64>,
}

/// The configuration of a `fetchbench read-paths` run ([`Results::loopback`]). Sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopbackConfig {
    /// The measured file (a temp file: the path it had; it is removed by now).
    pub file: String,
    /// Whether the file was a temp file created for the run (`--size`).
    pub temp_file: bool,
    /// Its size.
    pub file_size: u64,
    /// Bytes per `transfer` call (the last slice of a pass may be shorter).
    pub slice_size: u64,
    /// Bytes moved per path after the warm-up pass.
    pub total_bytes: u64,
    /// Whether the page cache was cold (evicted before each measured pass).
    pub cold_cache: bool,
    /// Buffer size of `copy`, `direct` and `null`.
    pub buffer_size: u64,
    /// Pipe size of `uring-splice`.
    pub pipe_size: u64,
}

impl LoopbackConfig {
    /// Whether `self` and `other` measured the same way: every field equal, except the names of
    /// two temp files (each run makes its own).
    pub fn same_measurement(&self, other: &LoopbackConfig) -> bool {
        let file_matters = !(self.temp_file && other.temp_file);
        self == &LoopbackConfig {
            file: if file_matters { other.file.clone() } else { self.file.clone() },
            ..other.clone()
        }
    }
}

/// One read path's own figures in a `fetchbench read-paths` document ([`PathResult::loopback`]);
/// see [`super::loopback`] for what a pass is and what the CPU figures include. GB = 1e9 bytes,
/// MB = 1e6 bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopbackFigures {
    /// The path asked for ([`PathResult::read_path`] is the one that ran: never another one).
    pub requested: String,
    /// Measured passes over the file (the warm-up pass excluded).
    pub passes: u64,
    /// `transfer` calls in the measured passes.
    pub transfers: u64,
    /// System calls (or SQEs plus `io_uring_enter` calls) the path counted.
    pub syscalls: u64,
    /// `syscalls` per MB moved.
    pub syscalls_per_mb: f64,
    /// Process user CPU over the measured passes, s (receiver thread included).
    pub cpu_user_seconds: f64,
    /// Process system CPU over the measured passes, s (receiver thread included).
    pub cpu_system_seconds: f64,
    /// The receiver thread's own CPU (user + system) over the measured passes, s; `null` when
    /// its clock could not be read.
    pub receiver_cpu_seconds: Option<f64>,
    /// Process CPU minus the receiver thread's, s/GB: the sending side; `null` without
    /// `receiver_cpu_seconds`.
    pub sender_cpu_seconds_per_gb: Option<f64>,
    /// The smallest fraction (0..=1) of the file's pages in the page cache before a measured
    /// pass (`mincore`).
    pub resident_fraction_min: f64,
    /// The largest such fraction: for a cold-cache run, how well eviction worked (0 = fully).
    pub resident_fraction_max: f64,
    /// A cold-cache run whose eviction took (`resident_fraction_max` at most
    /// [`super::read_paths::NOT_COLD_FRACTION`]); `false` for a hot run.
    pub cold_cache_effective: bool,
}

impl PathResult {
    /// Whether an interrupted phase's entry measured nothing (no record, or a window under 1 ms):
    /// `fetchbench run` drops such an entry from the results, and the phase's notes about its
    /// window are not given.
    pub(crate) fn measured_nothing(&self) -> bool {
        self.records == 0 || self.seconds < 1e-3
    }
}

/// Why a results document is not valid: every problem found, each with its JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// `"/pointer: what is wrong"`, in document order.
    pub problems: Vec<String>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a valid {SCHEMA} v{SCHEMA_VERSION} document: {}", self.problems.join("; "))
    }
}

impl std::error::Error for ValidationError {}

/// The shape of a document, for [`validate`]: type names where values go, one element for
/// arrays. `uint` is a non-negative integer, `number` a finite non-negative number, `broker`
/// the object of [`broker_shape`], `machine` that of [`Machine`], `bound_by` a
/// [`BoundBy`] name, `attribution` the object of [`attribution_shape`] and `cpu_split` its
/// `client_split`,
/// `server_model` a [`crate::broker::ServerModel`] name,
/// `histogram` a base64 V2 histogram, `workload` a workload table, `loopback_config` and
/// `loopback_figures` the objects of [`loopback_shapes`]; `|null` allows `null`.
pub fn schema_shape() -> Value {
    let latency = json!({
        "summary": {"count": "uint", "p50_us": "number", "p99_us": "number", "p999_us": "number", "max_us": "number"},
        "histogram": "histogram",
    });
    let cpu = json!({"user_s_per_gb": "number", "sys_s_per_gb": "number"});
    let stats = json!([{
        "metric": "string", "samples": "uint", "mean": "number", "stddev": "number|null",
        "ci95_low": "number|null", "ci95_high": "number|null", "cv": "number|null",
    }]);
    // Apart: one json! of the whole document is deeper than the macro's recursion limit.
    let paths = json!([{
        "server_model": "server_model|null",
        "read_path": "string",
        "phase": "string",
        "repetition": "uint",
        "seconds": "number",
        "bytes": "uint",
        "records": "uint",
        "mb_per_sec": "number",
        "records_per_sec": "number",
        "produced_mb_per_sec": "number|null",
        "broker_cpu": cpu,
        "consumer_cpu": cpu,
        "minor_faults_per_gb": "number",
        "major_faults_per_gb": "number",
        "context_switches_per_gb": "number",
        "syscalls_per_gb": "number|null",
        "user_copied_bytes_per_gb": "number|null",
        "residency_before": "number",
        "broker_rss_bytes": "uint",
        "fetch_latency": latency,
        "fetch_long_poll_latency": latency,
        "fetches_in_flight_at_start": "uint|null",
        "poll_latency": latency,
        "end_to_end_latency": {"raw": latency, "corrected": latency},
        "rebalance_ms": "number|null",
        "ratio_to_limits": [{"key": "string", "ratio": "number"}],
        "loopback": "loopback_figures|null",
        "bound_by": "bound_by|null",
        "attribution": "attribution|null",
    }]);
    json!({
        "schema": "string",
        "schema_version": "uint",
        "date": "string",
        "machine": machine_shape(),
        "git": {"commit": "string|null", "dirty": "bool"},
        "command": ["string"],
        "target": "string",
        "broker": "broker|null",
        "interrupted": "bool",
        "notes": ["string"],
        "workload": "workload|null",
        "loopback": "loopback_config|null",
        "limits": {
            "source": "string|null",
            "figures": [{"key": "string", "label": "string", "bytes_per_sec": "number|null", "cpu_seconds_per_gb": "number|null"}],
        },
        "paths": paths,
        "summary": [{
            "server_model": "server_model|null",
            "read_path": "string",
            "phase": "string",
            "samples": "uint",
            "figures": stats,
            "ratio_to_copy": stats,
        }],
    })
}

/// The shape of [`Attribution`], as in [`schema_shape`].
fn attribution_shape() -> Value {
    let split = json!({
        "user": "number", "system": "number", "softirq": "number", "irq": "number",
        "iowait": "number", "steal": "number",
    });
    json!({
        "method": "string", "broker_cpus": ["uint"], "client_cpus": ["uint"],
        "broker_busy": "number|null", "client_busy": "number", "cpus_busy": "number",
        "broker_split": "cpu_split|null", "client_split": split,
        "broker_threads_cpus": "number|null", "client_threads_cpus": "number",
        "steal": "number", "steal_max": "number", "steal_flagged": "bool",
        "network_fraction": "number|null", "reason": "string",
        "samples": [{
            "t_s": "number", "seconds": "number", "mb_per_sec": "number",
            "broker_busy": "number|null", "client_busy": "number", "steal": "number",
        }],
        "summary": {
            "samples": "uint", "median_mb_per_sec": "number", "min_mb_per_sec": "number",
            "max_mb_per_sec": "number", "cv": "number|null",
        },
    })
}

/// The shape of [`Machine`], as in [`schema_shape`].
fn machine_shape() -> Value {
    json!({
        "nproc": "uint", "kernel": "string", "arch": "string",
        "cpu_model": "string", "memory_bytes": "uint", "io_uring": "bool",
    })
}

/// The shape of [`BrokerRecord`], as in [`schema_shape`]: `int` any integer, `string_map` an
/// object of strings or `null`s.
fn broker_shape() -> Value {
    json!({
        "bootstrap": "string", "broker_id": "int", "configs": "string_map",
        "metrics": "string|null", "machine": "machine|null",
    })
}

/// The shapes of [`LoopbackConfig`] and [`LoopbackFigures`], as in [`schema_shape`].
pub fn loopback_shapes() -> (Value, Value) {
    let config = json!({
        "file": "string", "temp_file": "bool", "file_size": "uint", "slice_size": "uint",
        "total_bytes": "uint", "cold_cache": "bool", "buffer_size": "uint", "pipe_size": "uint",
    });
    let figures = json!({
        "requested": "string", "passes": "uint", "transfers": "uint", "syscalls": "uint",
        "syscalls_per_mb": "number", "cpu_user_seconds": "number", "cpu_system_seconds": "number",
        "receiver_cpu_seconds": "number|null", "sender_cpu_seconds_per_gb": "number|null",
        "resident_fraction_min": "number", "resident_fraction_max": "number",
        "cold_cache_effective": "bool",
    });
    (config, figures)
}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!(
            "{}...",
            &s[..s.char_indices().take_while(|(i, _)| *i < 37).last().map_or(0, |(i, c)| i + c.len_utf8())]
        )
    } else {
        s
    }
}

fn walk(shape: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
    let mut bad = |expected: &str| problems.push(format!("{at}: expected {expected}, found {}", describe(v)));
    match shape {
        Value::Object(fields) => {
            let Some(obj) = v.as_object() else { return bad("an object") };
            for (k, s) in fields {
                match obj.get(k) {
                    Some(x) => walk(s, x, &format!("{at}/{k}"), problems),
                    None => problems.push(format!("{at}/{k}: missing")),
                }
            }
            for k in obj.keys().filter(|k| !fields.contains_key(*k)) {
                problems.push(format!(
                    "{at}/{k}: unknown field (known: {})",
                    fields.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Value::Array(elem) => {
            let Some(items) = v.as_array() else { return bad("an array") };
            for (i, x) in items.iter().enumerate() {
                walk(&elem[0], x, &format!("{at}/{i}"), problems);
            }
        }
        Value::String(kind) => match kind.as_str() {
            "string" if v.is_string() => {}
            "string" => bad("a string"),
            "string|null" if v.is_string() || v.is_null() => {}
            "string|null" => bad("a string or null"),
            "bool" if v.is_boolean() => {}
            "bool" => bad("true or false"),
            "uint" | "uint|null" if v.is_u64() => {}
            "uint|null" if v.is_null() => {}
            "uint" => bad("a non-negative integer"),
            "uint|null" => bad("a non-negative integer or null"),
            "number|null" if v.is_null() => {}
            "number" | "number|null" => match v.as_f64() {
                Some(x) if x.is_finite() && x >= 0.0 => {}
                _ => bad("a finite non-negative number"),
            },
            "histogram" => match v.as_str().map(Latency::decode) {
                Some(Ok(_)) => {}
                Some(Err(e)) => problems.push(format!("{at}: {e}")),
                None => bad("a base64 histogram string"),
            },
            "workload|null"
            | "loopback_config|null"
            | "loopback_figures|null"
            | "server_model|null"
            | "broker|null"
            | "machine|null"
            | "bound_by|null"
            | "attribution|null"
            | "cpu_split|null"
                if v.is_null() => {}
            "bound_by|null" => {
                if !BoundBy::ALL.iter().any(|b| v.as_str() == Some(b.name())) {
                    let known: Vec<&str> = BoundBy::ALL.iter().map(|b| b.name()).collect();
                    bad(&format!("one of {} or null", known.join(", ")))
                }
            }
            "attribution|null" => walk(&attribution_shape(), v, at, problems),
            "cpu_split|null" => walk(&attribution_shape()["client_split"], v, at, problems),
            "broker|null" => walk(&broker_shape(), v, at, problems),
            "machine|null" => walk(&machine_shape(), v, at, problems),
            "int" if v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => {}
            "int" => bad("an integer of 32 bits (-2147483648 to 2147483647)"),
            "string_map" => match v.as_object() {
                Some(map) => {
                    for (k, x) in map.iter().filter(|(_, x)| !x.is_string() && !x.is_null()) {
                        problems.push(format!("{at}/{k}: expected a string or null, found {}", describe(x)));
                    }
                }
                None => bad("an object of strings"),
            },
            "server_model|null" => {
                if v.as_str().and_then(|m| m.parse::<crate::broker::ServerModel>().ok()).is_none() {
                    let known: Vec<&str> = crate::broker::ServerModel::ALL.iter().map(|m| m.name()).collect();
                    bad(&format!("a server model ({}) or null", known.join(", ")))
                }
            }
            "loopback_config|null" => walk(&loopback_shapes().0, v, at, problems),
            "loopback_figures|null" => walk(&loopback_shapes().1, v, at, problems),
            "workload" | "workload|null" => {
                let parsed = serde_json::from_value::<toml::Table>(v.clone())
                    .map_err(|e| e.to_string())
                    .and_then(|t| Workload::from_table(&t).map_err(|e| e.to_string()));
                match parsed {
                    Ok(w) if w.is_resolved() => {}
                    Ok(_) => problems.push(format!("{at}: a sweep, expected a resolved workload")),
                    Err(e) => problems.push(format!("{at}: {e}")),
                }
            }
            other => unreachable!("shape type {other}"),
        },
        _ => unreachable!("shape values are objects, arrays and type names"),
    }
}

/// Checks `doc` against the schema and returns it as [`Results`]. Errors list every problem
/// with its JSON pointer: wrong `schema` or `schema_version`, a missing or unknown field, a
/// value of the wrong type, a negative or non-finite number, a histogram that does not
/// decode, a workload that does not parse, a `residency_before` or resident fraction above 1,
/// an unknown phase, a `fetchbench read-paths` document (`loopback` set, `workload` `null`)
/// with an entry of another phase or a run's with a `loopback` entry, an entry whose
/// `loopback` figures do not match its phase, an unknown `server_model`, one that is not
/// `null` in a `read-paths` document or `null` in an embedded run, a `broker` record that is
/// not `null` outside a run against a cluster (`target` `bootstrap:...`), two entries for the same (server model, read path, phase,
/// repetition), a summary interval that does not hold its mean, two summaries of the same
/// (server model, read path, phase), an entry bound by `client_cpu` whose warning
/// ([`warning`]) is not in `notes`.
pub fn validate(doc: &Value) -> Result<Results, ValidationError> {
    let mut problems = Vec::new();
    if doc.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
        problems.push(format!(
            "/schema: expected \"{SCHEMA}\", found {}",
            doc.get("schema").map_or("nothing".into(), describe)
        ));
    }
    if let Some(version) = doc.get("schema_version").filter(|v| v.as_u64() != Some(SCHEMA_VERSION.into())) {
        problems.push(format!("/schema_version: expected {SCHEMA_VERSION}, found {}", describe(version)));
        return Err(ValidationError { problems }); // another version: its fields mean other things
    }
    walk(&schema_shape(), doc, "", &mut problems);
    // A read-paths document: `loopback` set and `workload` null; a run's: the other way round.
    let read_paths = doc.get("loopback").is_some_and(|l| !l.is_null());
    if doc.get("workload").is_some_and(Value::is_null) != read_paths {
        problems.push(if read_paths {
            "/loopback: expected null beside a workload (a fetchbench run document)".to_string()
        } else {
            "/workload: expected a workload (null only in a fetchbench read-paths document, with loopback)".to_string()
        });
    }
    // A run on fetchbench's own broker: every entry names its server model.
    let embedded = doc.get("target").and_then(Value::as_str) == Some("embedded");
    let cluster = doc.get("target").and_then(Value::as_str).is_some_and(|t| t.starts_with("bootstrap:"));
    if !cluster && doc.get("broker").is_some_and(|b| !b.is_null()) {
        problems.push("/broker: expected null outside a run against a cluster (target bootstrap:...)".to_string());
    }
    if let Some(paths) = doc.get("paths").and_then(Value::as_array) {
        for (i, p) in paths.iter().enumerate() {
            if p.get("residency_before").and_then(Value::as_f64).is_some_and(|r| r > 1.0) {
                problems.push(format!("/paths/{i}/residency_before: expected a fraction from 0 to 1"));
            }
            let phase = p.get("phase").and_then(Value::as_str);
            if let Some(phase) = phase.filter(|s| !["catch_up", "tail", "mixed", "loopback"].contains(s)) {
                problems.push(format!(
                    "/paths/{i}/phase: expected one of catch_up, tail, mixed, loopback, found \"{phase}\""
                ));
            } else if phase.is_some_and(|ph| (ph == "loopback") != read_paths) {
                problems.push(format!(
                    "/paths/{i}/phase: expected {}",
                    if read_paths {
                        "loopback in a fetchbench read-paths document"
                    } else {
                        "catch_up, tail or mixed in a fetchbench run document"
                    }
                ));
            }
            let figures = p.get("loopback").filter(|l| !l.is_null());
            if phase.is_some() && figures.is_some() != (phase == Some("loopback")) {
                problems.push(format!(
                    "/paths/{i}/loopback: expected {}",
                    if phase == Some("loopback") {
                        "the figures of phase loopback"
                    } else {
                        "null outside phase loopback"
                    }
                ));
            }
            for k in ["resident_fraction_min", "resident_fraction_max"] {
                if figures.and_then(|l| l.get(k)).and_then(Value::as_f64).is_some_and(|r| r > 1.0) {
                    problems.push(format!("/paths/{i}/loopback/{k}: expected a fraction from 0 to 1"));
                }
            }
            let model = p.get("server_model");
            // A cluster's entries (`bootstrap:...`) may name a model: a fetchbench serve's.
            if model.is_some_and(|m| (embedded && m.is_null()) || (read_paths && !m.is_null())) {
                problems.push(format!(
                    "/paths/{i}/server_model: expected {}",
                    if embedded {
                        "the server model that ran (an embedded run)"
                    } else {
                        "null (no broker: a fetchbench read-paths document)"
                    }
                ));
            }
            let key = (model, p.get("read_path"), p.get("phase"), p.get("repetition"));
            if paths[..i]
                .iter()
                .any(|q| (q.get("server_model"), q.get("read_path"), q.get("phase"), q.get("repetition")) == key)
            {
                problems.push(format!(
                    "/paths/{i}: a second entry for server model {} read path {} phase {} repetition {}",
                    key.0.map_or("?".into(), describe),
                    key.1.map_or("?".into(), describe),
                    key.2.map_or("?".into(), describe),
                    key.3.map_or("?".into(), describe)
                ));
            }
        }
    }
    if let Some(summary) = doc.get("summary").and_then(Value::as_array) {
        for (i, s) in summary.iter().enumerate() {
            let key = (s.get("server_model"), s.get("read_path"), s.get("phase"));
            if summary[..i].iter().any(|q| (q.get("server_model"), q.get("read_path"), q.get("phase")) == key) {
                problems.push(format!(
                    "/summary/{i}: a second summary of server model {} read path {} phase {}",
                    key.0.map_or("?".into(), describe),
                    key.1.map_or("?".into(), describe),
                    key.2.map_or("?".into(), describe)
                ));
            }
            for list in ["figures", "ratio_to_copy"] {
                for (j, f) in s.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
                    let num = |k: &str| f.get(k).and_then(Value::as_f64);
                    let (mean, low, high) = (num("mean"), num("ci95_low"), num("ci95_high"));
                    // A little slack: the bounds are computed from the same mean in floating point.
                    let slack = 1e-9 * mean.unwrap_or(0.0).abs();
                    let outside =
                        mean.is_some_and(|m| low.is_some_and(|l| l > m + slack) || high.is_some_and(|h| h < m - slack));
                    if outside || low.is_some() != high.is_some() {
                        problems.push(format!(
                            "/summary/{i}/{list}/{j}: expected ci95_low <= mean <= ci95_high (both or neither null)"
                        ));
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(ValidationError { problems });
    }
    let results: Results =
        serde_json::from_value(doc.clone()).map_err(|e| ValidationError { problems: vec![format!("/: {e}")] })?;
    // A client-bound figure never goes without its warning.
    let qualified = results.compares_models();
    for (i, p) in results.paths.iter().enumerate() {
        let label = combination_label(p.server_model.as_deref(), &p.read_path, qualified);
        if let Some(w) = warning(p, &label) {
            if !results.notes.iter().any(|n| n.contains(&w)) {
                problems.push(format!("/paths/{i}/bound_by: client_cpu without its warning in /notes ({w})"));
            }
        }
    }
    if !problems.is_empty() {
        return Err(ValidationError { problems });
    }
    Ok(results)
}

impl Results {
    /// Parses and validates a results document. Errors: not JSON (with line and column),
    /// or every problem [`validate`] finds.
    ///
    /// Version 2, 3, 4 and 5 documents ([`READABLE_OLD_VERSIONS`]) are read too, converted: a
    /// version 2 document to version 3 (every entry gets `repetition` 0, an empty
    /// `fetch_long_poll_latency`, `null` `produced_mb_per_sec` and `fetches_in_flight_at_start`;
    /// `summary` is empty), a version 3 one to version 4 (`loopback` `null`, at the top and in
    /// every entry: every version 3 document is a `fetchbench run`'s), a version 4 one to
    /// version 5 (`server_model` in every entry and summary: `threaded` in an embedded run,
    /// the only model before version 5, else `null`), a version 5 one to version 6 (`broker`
    /// `null`: version 5 recorded no broker), a version 6 one to version 7 (`bound_by` and
    /// `attribution` `null` in every entry: not measured then), a version 7 one to version 8
    /// (`syscalls_per_gb` and `user_copied_bytes_per_gb` `null` in every entry: not counted
    /// then); then validated.
    pub fn from_json(text: &str) -> Result<Results, ValidationError> {
        let mut doc: Value =
            serde_json::from_str(text).map_err(|e| ValidationError { problems: vec![format!("not JSON: {e}")] })?;
        if doc.get("schema_version").and_then(Value::as_u64) == Some(2) {
            upgrade_v2(&mut doc);
        }
        if doc.get("schema_version").and_then(Value::as_u64) == Some(3) {
            upgrade_v3(&mut doc);
        }
        if doc.get("schema_version").and_then(Value::as_u64) == Some(4) {
            upgrade_v4(&mut doc);
        }
        if doc.get("schema_version").and_then(Value::as_u64) == Some(5) {
            upgrade_v5(&mut doc);
        }
        if doc.get("schema_version").and_then(Value::as_u64) == Some(6) {
            upgrade_v6(&mut doc);
        }
        if doc.get("schema_version").and_then(Value::as_u64) == Some(7) {
            upgrade_v7(&mut doc);
        }
        validate(&doc)
    }

    /// The document, pretty-printed.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results always serialize")
    }

    /// The run's workload (validated documents always have one that parses).
    pub fn workload(&self) -> Option<Workload> {
        let table = serde_json::from_value::<toml::Table>(self.workload.clone()).ok()?;
        Workload::from_table(&table).ok()
    }

    /// Whether this document compares server models: its workload's `server_models` names one
    /// other than `threaded` (even when that model's combinations were all skipped), or an
    /// entry ran under one ([`models_compared`]). Charts then name entries `model/path`.
    pub fn compares_models(&self) -> bool {
        let workload = self.workload().is_some_and(|w| w.server_models.iter().any(|m| m.name() != "threaded"));
        workload || models_compared(&self.paths)
    }

    /// The machine the broker ran on, when known: this run's `machine` for the embedded broker
    /// and for `read-paths` (the paths ran here), the broker record's `machine` for a cluster
    /// (known with `--metrics` at a fetchbench serve, else `None`).
    pub fn broker_machine(&self) -> Option<&Machine> {
        match &self.broker {
            Some(b) => b.machine.as_ref(),
            None if self.target.starts_with("bootstrap:") => None,
            None => Some(&self.machine),
        }
    }

    /// The JSON form of `workload` for [`Results::workload`] (the workload file's keys).
    pub fn workload_value(workload: &Workload) -> Value {
        serde_json::to_value(workload.to_table()).expect("a TOML table is JSON")
    }
}

/// Converts a version 2 document in place to version 3 (see [`Results::from_json`]); what
/// is not an object is left for [`validate`] to report.
fn upgrade_v2(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(3));
    if let Some(paths) = obj.get_mut("paths").and_then(Value::as_array_mut) {
        for p in paths.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("repetition").or_insert(json!(0));
            // Fields new in version 3: not measured then.
            p.entry("produced_mb_per_sec").or_insert(Value::Null);
            p.entry("fetch_long_poll_latency")
                .or_insert_with(|| serde_json::to_value(LatencyResult::empty()).expect("serializes"));
            p.entry("fetches_in_flight_at_start").or_insert(Value::Null);
        }
    }
    obj.entry("summary").or_insert(json!([]));
}

/// Converts a version 3 document in place to version 4 (see [`Results::from_json`]): the
/// top-level `loopback` and every entry's `null`. What is not an object is left for
/// [`validate`] to report.
fn upgrade_v3(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(4));
    obj.entry("loopback").or_insert(Value::Null);
    if let Some(paths) = obj.get_mut("paths").and_then(Value::as_array_mut) {
        for p in paths.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("loopback").or_insert(Value::Null);
        }
    }
}

/// Converts a version 4 document in place to version 5 (see [`Results::from_json`]): a
/// `server_model` first in every entry and summary, `threaded` in an embedded run (`target`
/// `embedded`), else `null`; the workload's `server_models` (after `read_paths`) is
/// `["threaded"]`, what ran (and the key's default). What is not an object is left for
/// [`validate`] to report.
fn upgrade_v4(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(5));
    if let Some(w) = obj.get_mut("workload").and_then(Value::as_object_mut) {
        if !w.contains_key("server_models") {
            let at = w.keys().position(|k| k == "read_paths").map_or(w.len(), |i| i + 1);
            w.shift_insert(at, "server_models".into(), json!([crate::broker::ServerModel::Threaded.name()]));
        }
    }
    let model = match obj.get("target").and_then(Value::as_str) {
        Some("embedded") => json!(crate::broker::ServerModel::Threaded.name()),
        _ => Value::Null,
    };
    for list in ["paths", "summary"] {
        if let Some(items) = obj.get_mut(list).and_then(Value::as_array_mut) {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                if !item.contains_key("server_model") {
                    item.shift_insert(0, "server_model".into(), model.clone());
                }
            }
        }
    }
}

/// Converts a version 5 document in place to version 6 (see [`Results::from_json`]): `broker`
/// `null` after `target` (not recorded before version 6). What is not an object is left for
/// [`validate`] to report.
fn upgrade_v5(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(6));
    if !obj.contains_key("broker") {
        let at = obj.keys().position(|k| k == "target").map_or(obj.len(), |i| i + 1);
        obj.shift_insert(at, "broker".into(), Value::Null);
    }
}

/// Converts a version 6 document in place to version 7 (see [`Results::from_json`]): every
/// entry's `bound_by` and `attribution` `null` (version 6 did not measure what limited a
/// figure), and a workload without `catch_up_duration` given `"0s"` (its catch-up was one drain
/// of the backlog, not the default window). What is not an object is left for [`validate`] to
/// report.
fn upgrade_v6(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(7));
    if let Some(w) = obj.get_mut("workload").and_then(Value::as_object_mut) {
        w.entry("catch_up_duration").or_insert(json!("0s"));
    }
    if let Some(paths) = obj.get_mut("paths").and_then(Value::as_array_mut) {
        for p in paths.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("bound_by").or_insert(Value::Null);
            p.entry("attribution").or_insert(Value::Null);
        }
    }
}

/// Converts a version 7 document in place to version 8 (see [`Results::from_json`]): every
/// entry's `syscalls_per_gb` and `user_copied_bytes_per_gb` `null` (not counted before version
/// 8), after `context_switches_per_gb`. What is not an object is left for [`validate`] to
/// report.
fn upgrade_v7(doc: &mut Value) {
    let Some(obj) = doc.as_object_mut() else { return };
    obj.insert("schema_version".into(), json!(SCHEMA_VERSION));
    if let Some(paths) = obj.get_mut("paths").and_then(Value::as_array_mut) {
        for p in paths.iter_mut().filter_map(Value::as_object_mut) {
            let at = p.keys().position(|k| k == "context_switches_per_gb").map_or(p.len(), |i| i + 1);
            if !p.contains_key("syscalls_per_gb") {
                p.shift_insert(at, "syscalls_per_gb".into(), Value::Null);
            }
            if !p.contains_key("user_copied_bytes_per_gb") {
                p.shift_insert((at + 1).min(p.len()), "user_copied_bytes_per_gb".into(), Value::Null);
            }
        }
    }
}

/// The warning a figure of `p` must be shown with (`label`: its combination's name, see
/// [`combination_label`]), or `None`: an entry bound by the clients' CPU measured the
/// consumers, not the read path.
pub fn warning(p: &PathResult, label: &str) -> Option<String> {
    if p.bound_by != Some(BoundBy::ClientCpu) {
        return None;
    }
    let a = p.attribution.as_ref();
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let client = a.map_or(String::new(), |a| pct(a.client_busy));
    let broker = a.and_then(|a| a.broker_busy).map_or("not measured".into(), pct);
    let rep = if p.repetition > 0 { format!(" (repetition {})", p.repetition) } else { String::new() };
    Some(format!(
        "WARNING: {label} {}{rep} was bound by the clients' CPU (clients {client} busy, broker {broker}): it measures \
         the consumers, not the read path",
        p.phase
    ))
}

impl ThroughputSummary {
    /// The per-sample MB/s of `samples` summarised: over the samples at least `min_seconds`
    /// long, all of them when none is (median, min, max; cv with 2 samples or more).
    pub fn of(samples: &[AttributionSample], min_seconds: f64) -> ThroughputSummary {
        let long: Vec<f64> = samples.iter().filter(|s| s.seconds >= min_seconds).map(|s| s.mb_per_sec).collect();
        let mut v = if long.is_empty() { samples.iter().map(|s| s.mb_per_sec).collect() } else { long };
        if v.is_empty() {
            return ThroughputSummary::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let mean = v.iter().sum::<f64>() / n as f64;
        let cv = (n >= 2 && mean > 0.0).then(|| {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            var.sqrt() / mean
        });
        ThroughputSummary {
            samples: n as u64,
            median_mb_per_sec: median,
            min_mb_per_sec: v[0],
            max_mb_per_sec: v[n - 1],
            cv,
        }
    }
}

/// The CSV header of [`write_csv`].
pub const CSV_HEADER: &str =
    "server_model,read_path,phase,repetition,seconds,mb_per_sec,records_per_sec,broker_cpu_user_s_per_gb,\
broker_cpu_sys_s_per_gb,consumer_cpu_user_s_per_gb,consumer_cpu_sys_s_per_gb,minor_faults_per_gb,\
major_faults_per_gb,context_switches_per_gb,residency_before,broker_rss_bytes,fetch_p50_us,fetch_p99_us,\
fetch_p999_us,fetch_max_us,e2e_corrected_p50_us,e2e_corrected_p99_us,e2e_corrected_p999_us,\
e2e_corrected_max_us,e2e_raw_p50_us,e2e_raw_p99_us,e2e_raw_p999_us,poll_p50_us,poll_p99_us,rebalance_ms,\
produced_mb_per_sec,bound_by,syscalls_per_gb,user_copied_bytes_per_gb";

/// Writes a CSV of `results`: [`CSV_HEADER`], then one line per path entry, every repetition
/// (units as in [`PathResult`]; a `null` `server_model`, an absent `rebalance_ms`, `produced_mb_per_sec`,
/// `syscalls_per_gb` or `user_copied_bytes_per_gb` and the
/// percentiles of a latency without samples, such as end-to-end in a catch-up phase, are empty
/// cells).
pub fn write_csv(results: &Results, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    // A percentile, or an empty cell when its histogram has no samples.
    let q = |s: &Summary, v: f64| if s.count == 0 { String::new() } else { v.to_string() };
    for p in &results.paths {
        let f = &p.fetch_latency.summary;
        let c = &p.end_to_end_latency.corrected.summary;
        let r = &p.end_to_end_latency.raw.summary;
        let poll = &p.poll_latency.summary;
        let cells = [
            csv_cell(p.server_model.as_deref().unwrap_or_default()),
            csv_cell(&p.read_path),
            csv_cell(&p.phase),
            p.repetition.to_string(),
            p.seconds.to_string(),
            p.mb_per_sec.to_string(),
            p.records_per_sec.to_string(),
            p.broker_cpu.user_s_per_gb.to_string(),
            p.broker_cpu.sys_s_per_gb.to_string(),
            p.consumer_cpu.user_s_per_gb.to_string(),
            p.consumer_cpu.sys_s_per_gb.to_string(),
            p.minor_faults_per_gb.to_string(),
            p.major_faults_per_gb.to_string(),
            p.context_switches_per_gb.to_string(),
            p.residency_before.to_string(),
            p.broker_rss_bytes.to_string(),
            q(f, f.p50_us),
            q(f, f.p99_us),
            q(f, f.p999_us),
            q(f, f.max_us),
            q(c, c.p50_us),
            q(c, c.p99_us),
            q(c, c.p999_us),
            q(c, c.max_us),
            q(r, r.p50_us),
            q(r, r.p99_us),
            q(r, r.p999_us),
            q(poll, poll.p50_us),
            q(poll, poll.p99_us),
            p.rebalance_ms.map(|r| r.to_string()).unwrap_or_default(),
            p.produced_mb_per_sec.map(|r| r.to_string()).unwrap_or_default(),
            p.bound_by.map(|b| b.name().to_string()).unwrap_or_default(),
            p.syscalls_per_gb.map(|r| r.to_string()).unwrap_or_default(),
            p.user_copied_bytes_per_gb.map(|r| r.to_string()).unwrap_or_default(),
        ];
        writeln!(out, "{}", cells.join(","))?;
    }
    Ok(())
}

/// The CSV header of [`write_summary_csv`].
pub const SUMMARY_CSV_HEADER: &str = "server_model,read_path,phase,of,metric,samples,mean,stddev,ci95_low,ci95_high,cv";

/// Writes the statistics of `results.summary` as CSV: [`SUMMARY_CSV_HEADER`], then one line
/// per figure: `of` is `value` (the figure itself) or `ratio_to_copy`; `null`s (a
/// `server_model` too) are empty cells. `fetchbench run` writes it as `<stem>-summary.csv` beside the entries' CSV when the
/// run has more than one repetition.
pub fn write_summary_csv(results: &Results, mut out: impl Write) -> io::Result<()> {
    writeln!(out, "{SUMMARY_CSV_HEADER}")?;
    let opt = |v: Option<f64>| v.map(|x| x.to_string()).unwrap_or_default();
    for s in &results.summary {
        for (of, list) in [("value", &s.figures), ("ratio_to_copy", &s.ratio_to_copy)] {
            for f in list {
                let cells = [
                    csv_cell(s.server_model.as_deref().unwrap_or_default()),
                    csv_cell(&s.read_path),
                    csv_cell(&s.phase),
                    of.to_string(),
                    csv_cell(&f.metric),
                    f.samples.to_string(),
                    f.mean.to_string(),
                    opt(f.stddev),
                    opt(f.ci95_low),
                    opt(f.ci95_high),
                    opt(f.cv),
                ];
                writeln!(out, "{}", cells.join(","))?;
            }
        }
    }
    Ok(())
}

fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `example(speed)` with its `sendfile` entries also run under `uring` as `uring-splice`, each
/// changed by `edit` (what the test varies: throughput, broker CPU), and the summary
/// recomputed. For the tests of reports over both server models.
#[cfg(test)]
pub(crate) fn example_with_uring(speed: f64, edit: impl Fn(&mut PathResult)) -> Results {
    let mut results = example(speed);
    let uring: Vec<PathResult> = results
        .paths
        .iter()
        .filter(|p| p.read_path == "sendfile")
        .map(|p| {
            let mut q = p.clone();
            q.server_model = Some("uring".into());
            q.read_path = "uring-splice".into();
            edit(&mut q);
            q
        })
        .collect();
    results.paths.extend(uring);
    results.summary = summarize(&results.paths);
    results
}

/// A results document with plausible figures, scaled by `speed` (1.0 = the reference): the
/// throughput is multiplied by `speed`, costs and latencies divided by it. For tests, fixtures
/// and examples of the schema. One repetition: [`example_repeated`] of `[speed]`.
pub fn example(speed: f64) -> Results {
    example_repeated(&[speed])
}

/// As [`example`] with one repetition per element of `speeds` (repetition `r` at
/// `speeds[r]`), the read paths `copy`, `mmap`, `sendfile` in the rotated order of a repeated
/// run (repetition `r` starts at path `r mod 3`), and the [`summarize`]d statistics. Its
/// workload reads the backlog once (`catch_up_duration` 0, as the runs of older versions did,
/// so an example converted to an older version reads back as itself).
pub fn example_repeated(speeds: &[f64]) -> Results {
    use super::histogram::LatencyRecorder;
    let workload = Workload {
        repeat: speeds.len().max(1) as u32,
        catch_up_duration: std::time::Duration::ZERO,
        ..Workload::default()
    };
    let mut order = vec![("copy", 1.0), ("mmap", 1.15), ("sendfile", 1.6)];
    let mut paths = Vec::new();
    for (repetition, &speed) in speeds.iter().enumerate() {
        for &(name, factor) in &order {
            for phase in ["catch_up", "tail"] {
                let s = speed * factor;
                let mut fetch = Latency::new();
                let mut long_poll = Latency::new();
                for i in 0..20u64 {
                    long_poll.record_ns(500_000_000 + i * 1_000_000);
                }
                let mut e2e = LatencyRecorder::new();
                for i in 0..1_000u64 {
                    let ns = ((200_000 + (i * 7_919) % 800_000) as f64 / s) as u64;
                    fetch.record_ns(ns);
                    e2e.record(0, (ns / 10).min(1_000), 3 * ns);
                }
                let (mb_per_sec, seconds) = if phase == "tail" { (10.24, 60.0) } else { (900.0 * s, 1.2 / s) };
                paths.push(PathResult {
                    server_model: Some("threaded".into()),
                    read_path: name.to_string(),
                    phase: phase.to_string(),
                    repetition: repetition as u32,
                    seconds,
                    bytes: (mb_per_sec * 1e6 * seconds) as u64,
                    records: (mb_per_sec * 1e6 * seconds / 1024.0) as u64,
                    mb_per_sec,
                    records_per_sec: mb_per_sec * 1e6 / 1024.0,
                    produced_mb_per_sec: (phase == "tail").then_some(10.5),
                    broker_cpu: CpuPerGb { user_s_per_gb: 0.30 / s, sys_s_per_gb: 0.50 / s },
                    consumer_cpu: CpuPerGb { user_s_per_gb: 0.90 / s, sys_s_per_gb: 0.40 / s },
                    minor_faults_per_gb: 1_000.0 / s,
                    major_faults_per_gb: 0.0,
                    context_switches_per_gb: 20_000.0 / s,
                    syscalls_per_gb: None,
                    user_copied_bytes_per_gb: None,
                    residency_before: 1.0,
                    broker_rss_bytes: (64.0 * 1048576.0 / s) as u64,
                    fetch_latency: LatencyResult::of(&fetch),
                    fetch_long_poll_latency: LatencyResult::of(&long_poll),
                    fetches_in_flight_at_start: Some(0),
                    poll_latency: LatencyResult::of(&fetch),
                    end_to_end_latency: EndToEnd {
                        raw: LatencyResult::of(&e2e.raw),
                        corrected: LatencyResult::of(&e2e.corrected),
                    },
                    rebalance_ms: (phase == "catch_up").then_some(120.0 / s),
                    ratio_to_limits: vec![LimitRatio { key: "iperf3_loopback".into(), ratio: mb_per_sec * 1e6 / 4e9 }],
                    loopback: None,
                    bound_by: None,
                    attribution: None,
                });
            }
        }
        order.rotate_left(1);
    }
    let summary = summarize(&paths);
    Results {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        date: "2026-11-30T08:00:00Z".into(),
        machine: Machine {
            nproc: 2,
            kernel: "6.1.0-example".into(),
            arch: "x86_64".into(),
            cpu_model: "Example CPU @ 2.00GHz".into(),
            memory_bytes: 24 << 30,
            io_uring: true,
        },
        git: Git { commit: Some("0123456789abcdef0123456789abcdef01234567".into()), dirty: false },
        command: ["fetchbench", "run", "fixtures/workloads/default.toml"].map(String::from).to_vec(),
        target: "embedded".into(),
        broker: None,
        interrupted: false,
        notes: vec!["an example document".into()],
        workload: Results::workload_value(&workload),
        loopback: None,
        limits: LimitsResult {
            source: Some("limits.json".into()),
            figures: vec![LimitFigure {
                key: "iperf3_loopback".into(),
                label: "iperf3".into(),
                bytes_per_sec: Some(4e9),
                cpu_seconds_per_gb: Some(0.25),
            }],
        },
        paths,
        summary,
    }
}

/// A `fetchbench read-paths` document with plausible figures (see the [module docs](self)):
/// `copy` and `sendfile` moving a 256 MiB temp file in 1 MiB slices, page cache hot, `uring-splice`
/// skipped. For tests, fixtures and examples of the schema.
pub fn example_read_paths() -> Results {
    // The context (machine, git, date, limits) of the run example.
    let run = example(1.0);
    let paths: Vec<PathResult> =
        [("copy", 1.38, 0.014, 0.911, 30.5, 0.722), ("sendfile", 2.28, 0.006, 0.581, 1.0, 0.398)]
            .into_iter()
            .map(|(name, gb_per_sec, user_s_per_gb, sys_s_per_gb, syscalls_per_mb, sender_s_per_gb)| {
                let bytes = 2u64 << 30;
                let gb = bytes as f64 / 1e9;
                let mb_per_sec: f64 = gb_per_sec * 1e3;
                PathResult {
                    server_model: None,
                    read_path: name.into(),
                    phase: "loopback".into(),
                    repetition: 0,
                    seconds: gb / gb_per_sec,
                    bytes,
                    records: 0,
                    mb_per_sec,
                    records_per_sec: 0.0,
                    produced_mb_per_sec: None,
                    broker_cpu: CpuPerGb { user_s_per_gb, sys_s_per_gb },
                    consumer_cpu: CpuPerGb::default(),
                    minor_faults_per_gb: 0.0,
                    major_faults_per_gb: 0.0,
                    context_switches_per_gb: 0.0,
                    syscalls_per_gb: None,
                    user_copied_bytes_per_gb: None,
                    residency_before: 1.0,
                    broker_rss_bytes: 0,
                    fetch_latency: LatencyResult::empty(),
                    fetch_long_poll_latency: LatencyResult::empty(),
                    fetches_in_flight_at_start: None,
                    poll_latency: LatencyResult::empty(),
                    end_to_end_latency: EndToEnd { raw: LatencyResult::empty(), corrected: LatencyResult::empty() },
                    rebalance_ms: None,
                    ratio_to_limits: vec![LimitRatio { key: "iperf3_loopback".into(), ratio: mb_per_sec * 1e6 / 4e9 }],
                    loopback: Some(LoopbackFigures {
                        requested: name.into(),
                        passes: 8,
                        transfers: 2048,
                        syscalls: (syscalls_per_mb * bytes as f64 / 1e6) as u64,
                        syscalls_per_mb,
                        cpu_user_seconds: user_s_per_gb * gb,
                        cpu_system_seconds: sys_s_per_gb * gb,
                        receiver_cpu_seconds: Some(((user_s_per_gb + sys_s_per_gb - sender_s_per_gb) * gb).max(0.0)),
                        sender_cpu_seconds_per_gb: Some(sender_s_per_gb),
                        resident_fraction_min: 1.0,
                        resident_fraction_max: 1.0,
                        cold_cache_effective: false,
                    }),
                    bound_by: None,
                    attribution: None,
                }
            })
            .collect();
    Results {
        command: [
            "fetchbench",
            "read-paths",
            "--limits",
            "limits.json",
            "--paths",
            "copy,sendfile,uring-splice",
            "--json",
        ]
        .map(String::from)
        .to_vec(),
        machine: Machine { io_uring: false, ..run.machine },
        target: "loopback".into(),
        broker: None,
        interrupted: false,
        notes: vec!["read path uring-splice: skipped: io_uring_setup: Operation not permitted".into()],
        workload: Value::Null,
        loopback: Some(LoopbackConfig {
            file: "/var/tmp/fetchbench-read-paths-4242.dat".into(),
            temp_file: true,
            file_size: 256 << 20,
            slice_size: 1 << 20,
            total_bytes: 2 << 30,
            cold_cache: false,
            buffer_size: 64 << 10,
            pipe_size: 1 << 20,
        }),
        summary: summarize(&paths),
        paths,
        ..run
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_results_file_round_trips_and_validates() {
        let r = example(1.0);
        let text = r.to_json();
        let back = Results::from_json(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            back.workload().unwrap(),
            Workload { catch_up_duration: std::time::Duration::ZERO, ..Workload::default() }
        );
        let h = Latency::decode(&back.paths[0].end_to_end_latency.corrected.histogram).unwrap();
        assert_eq!(h.count(), 1_000);
        assert_eq!(h.summary(), back.paths[0].end_to_end_latency.corrected.summary);
        // Every field of the shape is in the document and the other way round.
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            doc["paths"][0].as_object().unwrap().keys().collect::<Vec<_>>(),
            schema_shape()["paths"][0].as_object().unwrap().keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn validation_errors_name_the_field() {
        let good: Value = serde_json::to_value(example(1.0)).unwrap();
        let check = |edit: &dyn Fn(&mut Value), expected: &str| {
            let mut doc = good.clone();
            edit(&mut doc);
            let e = validate(&doc).unwrap_err().to_string();
            assert!(e.contains(expected), "{e}\n  does not contain {expected}");
        };
        check(&|d| d["schema"] = json!("other"), "/schema: expected \"fetchbench-results\", found \"other\"");
        check(&|d| d["schema_version"] = json!(1), "/schema_version: expected 8, found 1");
        check(
            &|d| d["paths"][0]["server_model"] = json!("reactor"),
            "/paths/0/server_model: expected a server model (threaded, uring) or null, found \"reactor\"",
        );
        check(
            &|d| d["paths"][0]["server_model"] = Value::Null,
            "/paths/0/server_model: expected the server model that ran (an embedded run)",
        );
        check(
            &|d| d["summary"][0]["server_model"] = json!(1),
            "/summary/0/server_model: expected a server model (threaded, uring) or null",
        );
        // A cluster's entries may name a fetchbench serve's model; a broker record only there.
        let mut cluster = good.clone();
        cluster["target"] = json!("bootstrap:h:9092");
        cluster["broker"] = json!({
            "bootstrap": "h:9092", "broker_id": 0, "configs": {"read.path": "copy", "ssl.key.password": null},
            "metrics": "h:9093", "machine": good["machine"].clone(),
        });
        validate(&cluster).unwrap();
        let broker = cluster["broker"].clone();
        check(&|d| d["broker"] = broker.clone(), "/broker: expected null outside a run against a cluster");
        let mut bad_broker = cluster.clone();
        bad_broker["broker"]["configs"]["read.path"] = json!(3);
        bad_broker["broker"]["broker_id"] = json!("0");
        let e = validate(&bad_broker).unwrap_err().to_string();
        assert!(e.contains("/broker/configs/read.path: expected a string or null, found 3"), "{e}");
        assert!(e.contains("/broker/broker_id: expected an integer"), "{e}");
        bad_broker["broker"]["broker_id"] = json!(1u64 << 31);
        let e = validate(&bad_broker).unwrap_err().to_string();
        assert!(e.contains("/broker/broker_id: expected an integer of 32 bits"), "{e}");
        // The same read path and phase under another model is another entry.
        let mut other_model = good.clone();
        let mut uring = other_model["paths"][0].clone();
        uring["server_model"] = json!("uring");
        other_model["paths"].as_array_mut().unwrap().push(uring);
        assert!(validate(&other_model).is_ok());
        check(
            &|d| d["paths"][1]["mb_per_sec"] = json!("fast"),
            "/paths/1/mb_per_sec: expected a finite non-negative number, found \"fast\"",
        );
        check(&|d| d["paths"][0]["bytes"] = json!(-1), "/paths/0/bytes: expected a non-negative integer, found -1");
        check(
            &|d| d["paths"][0].as_object_mut().unwrap().remove("broker_cpu").map(drop).unwrap(),
            "/paths/0/broker_cpu: missing",
        );
        check(
            &|d| d["paths"][2]["speed"] = json!(1),
            "/paths/2/speed: unknown field (known: server_model, read_path, phase",
        );
        check(
            &|d| d["paths"][0]["fetch_latency"]["histogram"] = json!("!!"),
            "/paths/0/fetch_latency/histogram: histogram is not valid base64",
        );
        check(&|d| d["paths"][0]["residency_before"] = json!(1.5), "/paths/0/residency_before: expected a fraction");
        check(&|d| d["paths"][0]["phase"] = json!("warm"), "/paths/0/phase: expected one of catch_up, tail, mixed");
        check(
            &|d| d["paths"][1]["produced_mb_per_sec"] = json!(-1.0),
            "/paths/1/produced_mb_per_sec: expected a finite non-negative number",
        );
        let mut mixed = good.clone();
        mixed["paths"][1]["phase"] = json!("mixed");
        assert!(validate(&mixed).is_ok(), "phase mixed is valid");
        check(
            &|d| {
                let first = d["paths"][0].clone();
                d["paths"].as_array_mut().unwrap().push(first)
            },
            "/paths/6: a second entry for server model \"threaded\" read path \"copy\" phase \"catch_up\" repetition 0",
        );
        check(
            &|d| {
                d["paths"][1].as_object_mut().unwrap().remove("produced_mb_per_sec");
            },
            "/paths/1/produced_mb_per_sec: missing",
        );
        check(
            &|d| d["summary"][0]["figures"][0]["ci95_low"] = json!(1e12),
            "/summary/0/figures/0: expected ci95_low <= mean <= ci95_high",
        );
        check(
            &|d| {
                let first = d["summary"][0].clone();
                d["summary"].as_array_mut().unwrap().push(first)
            },
            "/summary/6: a second summary of server model \"threaded\" read path \"copy\" phase \"catch_up\"",
        );
        check(&|d| d["summary"][1]["figures"][0]["cv"] = json!(-0.5), "/summary/1/figures/0/cv: expected a finite");
        check(&|d| d["workload"]["page_cache"] = json!("warm"), "/workload: page_cache: expected one of hot, cold");
        check(&|d| d["workload"]["partitions"] = json!([1, 2]), "/workload: a sweep");
        check(&|d| d["git"]["dirty"] = json!("no"), "/git/dirty: expected true or false");
        check(&|d| d["command"] = json!("fetchbench run"), "/command: expected an array");
        assert!(validate(&json!([1]))
            .unwrap_err()
            .to_string()
            .contains("/schema: expected \"fetchbench-results\", found nothing"));
        let e = Results::from_json("{\"schema\": ").unwrap_err().to_string();
        assert!(e.contains("not JSON: EOF while parsing"), "{e}");
    }

    #[test]
    fn the_fetch_split_fields_are_required_in_version_3_and_checked() {
        let mut doc: Value = serde_json::to_value(example(1.0)).unwrap();
        for p in doc["paths"].as_array_mut().unwrap() {
            let p = p.as_object_mut().unwrap();
            p.remove("fetch_long_poll_latency").unwrap();
            p.remove("fetches_in_flight_at_start").unwrap();
        }
        let e = validate(&doc).unwrap_err().to_string();
        assert!(e.contains("/paths/0/fetch_long_poll_latency: missing"), "{e}");
        assert!(e.contains("/paths/0/fetches_in_flight_at_start: missing"), "{e}");
        // Present, they are checked.
        let mut doc: Value = serde_json::to_value(example(1.0)).unwrap();
        doc["paths"][0]["fetches_in_flight_at_start"] = json!(-1);
        let e = validate(&doc).unwrap_err().to_string();
        assert!(e.contains("/paths/0/fetches_in_flight_at_start: expected a non-negative integer or null"), "{e}");
        doc["paths"][0]["fetches_in_flight_at_start"] = Value::Null;
        assert_eq!(validate(&doc).unwrap().paths[0].fetches_in_flight_at_start, None);
    }

    #[test]
    fn csv_has_a_header_and_a_line_per_path() {
        let mut out = Vec::new();
        write_csv(&example(1.0), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7);
        let columns = CSV_HEADER.split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == columns), "{text}");
        assert!(lines[1].starts_with("threaded,copy,catch_up,0,"), "{text}");
        assert!(
            lines[2].starts_with("threaded,copy,tail,") && lines[2].contains(",,10.5,"),
            "no rebalance in tail: {text}"
        );
        assert!(lines[1].ends_with(",,,"), "no produced MB/s in catch_up, no counts: {text}");
        let mut out = Vec::new();
        write_csv(&example_attributed(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().nth(1).unwrap().ends_with(",client_cpu,40000,1000000000"), "the counts last: {text}");
        assert_eq!(csv_cell("a,\"b\""), "\"a,\"\"b\"\"\"");
    }

    /// `r` as a version 7 file would have it: no `syscalls_per_gb` or
    /// `user_copied_bytes_per_gb`.
    pub(crate) fn as_version_7(r: &Results) -> Value {
        let mut doc = serde_json::to_value(r).unwrap();
        doc["schema_version"] = json!(7);
        for p in doc["paths"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().shift_remove("syscalls_per_gb");
            p.as_object_mut().unwrap().shift_remove("user_copied_bytes_per_gb");
        }
        doc
    }

    /// `r` as a version 6 file would have it: no `bound_by` or `attribution`, and a workload
    /// without `catch_up_duration` (added beside them; `r`'s should be 0 to read back as `r`),
    /// and nothing of version 8.
    pub(crate) fn as_version_6(r: &Results) -> Value {
        let mut doc = as_version_7(r);
        doc["schema_version"] = json!(6);
        if let Some(w) = doc["workload"].as_object_mut() {
            w.shift_remove("catch_up_duration");
        }
        for p in doc["paths"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().shift_remove("bound_by");
            p.as_object_mut().unwrap().shift_remove("attribution");
        }
        doc
    }

    /// `r` as a version 5 file would have it: no `broker` (and nothing of version 7).
    pub(crate) fn as_version_5(r: &Results) -> Value {
        let mut doc = as_version_6(r);
        doc["schema_version"] = json!(5);
        doc.as_object_mut().unwrap().shift_remove("broker");
        doc
    }

    /// `example(1.0)` with an attribution on every entry, its first entry bound by the clients'
    /// CPU and its warning in the notes: a version 7 document.
    pub(crate) fn example_attributed() -> Results {
        let mut r = example(1.0);
        let sample = |t: f64, mb: f64| AttributionSample {
            t_s: t,
            seconds: 1.0,
            mb_per_sec: mb,
            broker_busy: Some(0.61),
            client_busy: 0.97,
            steal: 0.001,
        };
        for (i, p) in r.paths.iter_mut().enumerate() {
            let samples = vec![sample(1.0, p.mb_per_sec * 0.9), sample(2.0, p.mb_per_sec * 1.1)];
            p.bound_by = Some(if i == 0 { BoundBy::ClientCpu } else { BoundBy::BrokerCpu });
            p.syscalls_per_gb = Some(40_000.0 + i as f64);
            p.user_copied_bytes_per_gb = Some(if p.read_path == "copy" { 1e9 } else { 0.0 });
            p.attribution = Some(Attribution {
                method: "pinned".into(),
                broker_cpus: vec![0],
                client_cpus: vec![1],
                broker_busy: Some(if i == 0 { 0.61 } else { 0.95 }),
                client_busy: if i == 0 { 0.97 } else { 0.5 },
                cpus_busy: 0.8,
                broker_split: Some(CpuSplit { user: 0.2, system: 0.3, softirq: 0.1, ..CpuSplit::default() }),
                client_split: CpuSplit { user: 0.5, system: 0.4, ..CpuSplit::default() },
                broker_threads_cpus: Some(0.6),
                client_threads_cpus: 0.95,
                steal: 0.001,
                steal_max: 0.001,
                steal_flagged: false,
                network_fraction: Some(0.2),
                reason: "the clients' CPU saturated".into(),
                summary: ThroughputSummary::of(&samples, 0.5),
                samples,
            });
        }
        let label = combination_label(r.paths[0].server_model.as_deref(), &r.paths[0].read_path, r.compares_models());
        let w = warning(&r.paths[0], &label).unwrap();
        r.notes.push(w);
        r
    }

    #[test]
    fn version_7_attribution_round_trips_and_version_6_reads_without_it() {
        let r = example_attributed();
        let text = r.to_json();
        assert!(text.contains("\"bound_by\": \"client_cpu\""), "JSON names: {text}");
        assert_eq!(Results::from_json(&text).unwrap(), r);
        // Without its warning a client-bound entry does not validate.
        let mut bare = r.clone();
        bare.notes.retain(|n| !n.starts_with("WARNING:"));
        let e = Results::from_json(&bare.to_json()).unwrap_err().to_string();
        assert!(e.contains("/paths/0/bound_by: client_cpu without its warning"), "{e}");
        // An unknown bound and a busy fraction below 0 are refused.
        let mut doc: Value = serde_json::from_str(&text).unwrap();
        doc["paths"][1]["bound_by"] = json!("gpu");
        doc["paths"][1]["attribution"]["client_busy"] = json!(-0.1);
        let e = validate(&doc).unwrap_err().to_string();
        assert!(e.contains("/paths/1/bound_by: expected one of broker_cpu, client_cpu"), "{e}");
        assert!(e.contains("/paths/1/attribution/client_busy"), "{e}");
        // Version 6: the new fields absent, read as null; the catch-up was one drain.
        let v6 = as_version_6(&r);
        assert!(v6["workload"].get("catch_up_duration").is_none());
        assert_eq!(r.workload["catch_up_duration"], json!("0s"));
        assert!(validate(&v6).unwrap_err().to_string().contains("/schema_version: expected 8, found 6"));
        let read = Results::from_json(&v6.to_string()).unwrap();
        assert_eq!(read.schema_version, SCHEMA_VERSION);
        assert!(read.paths.iter().all(|p| p.bound_by.is_none() && p.attribution.is_none()));
        let mut expected = r.clone();
        for p in &mut expected.paths {
            p.bound_by = None;
            p.attribution = None;
            p.syscalls_per_gb = None;
            p.user_copied_bytes_per_gb = None;
        }
        assert_eq!(read, expected);
    }

    #[test]
    fn version_8_counts_round_trip_and_version_7_reads_them_as_null() {
        let r = example_attributed();
        assert!(r.paths.iter().all(|p| p.syscalls_per_gb.is_some() && p.user_copied_bytes_per_gb.is_some()));
        assert_eq!(Results::from_json(&r.to_json()).unwrap(), r);
        let mut doc = serde_json::to_value(&r).unwrap();
        doc["paths"][0]["syscalls_per_gb"] = json!("many");
        assert!(validate(&doc).unwrap_err().to_string().contains("/paths/0/syscalls_per_gb"));
        let v7 = as_version_7(&r);
        assert!(v7["paths"][0].get("syscalls_per_gb").is_none());
        assert!(validate(&v7).unwrap_err().to_string().contains("/schema_version: expected 8, found 7"));
        let read = Results::from_json(&v7.to_string()).unwrap();
        assert_eq!(read.schema_version, SCHEMA_VERSION);
        let mut expected = r.clone();
        for p in &mut expected.paths {
            p.syscalls_per_gb = None;
            p.user_copied_bytes_per_gb = None;
        }
        assert_eq!(read, expected);
        // The fields keep their place, after context_switches_per_gb.
        let text = serde_json::to_string(&read).unwrap();
        let (a, b, c) = (
            text.find("context_switches_per_gb").unwrap(),
            text.find("syscalls_per_gb").unwrap(),
            text.find("user_copied_bytes_per_gb").unwrap(),
        );
        assert!(a < b && b < c, "{text}");
    }

    /// `r` (a `fetchbench run` document) as a version 4 file would have it: no `server_model`
    /// (and nothing of version 6).
    pub(crate) fn as_version_4(r: &Results) -> Value {
        let mut doc = as_version_5(r);
        doc["schema_version"] = json!(4);
        for list in ["paths", "summary"] {
            for item in doc[list].as_array_mut().unwrap() {
                item.as_object_mut().unwrap().shift_remove("server_model");
            }
        }
        doc["workload"].as_object_mut().map(|w| w.shift_remove("server_models"));
        doc
    }

    /// `r` (a `fetchbench run` document) as a version 3 file would have it: no `loopback`
    /// (and nothing of version 5).
    pub(crate) fn as_version_3(r: &Results) -> Value {
        let mut doc = as_version_4(r);
        doc["schema_version"] = json!(3);
        doc.as_object_mut().unwrap().shift_remove("loopback");
        for p in doc["paths"].as_array_mut().unwrap() {
            p.as_object_mut().unwrap().shift_remove("loopback");
        }
        doc
    }

    /// `example(1.0)` as a version 2 file would have it: no `repetition`, no `summary`, no
    /// workload key `repeat` (and nothing of version 4).
    pub(crate) fn as_version_2(r: &Results) -> Value {
        let mut doc = as_version_3(r);
        doc["schema_version"] = json!(2);
        doc.as_object_mut().unwrap().shift_remove("summary");
        doc["workload"].as_object_mut().unwrap().shift_remove("repeat");
        for p in doc["paths"].as_array_mut().unwrap() {
            for field in ["repetition", "produced_mb_per_sec", "fetch_long_poll_latency", "fetches_in_flight_at_start"]
            {
                p.as_object_mut().unwrap().shift_remove(field);
            }
        }
        doc
    }

    #[test]
    fn version_2_documents_are_read_as_repetition_0() {
        let v3 = example(1.0);
        let v2 = as_version_2(&v3);
        assert!(validate(&v2).unwrap_err().to_string().contains("/schema_version: expected 8, found 2"));
        let read = Results::from_json(&v2.to_string()).unwrap();
        assert_eq!(read.schema_version, SCHEMA_VERSION);
        assert!(read.summary.is_empty());
        assert!(read.paths.iter().all(|p| p.repetition == 0));
        let mut expected = v3.paths.clone();
        for p in &mut expected {
            p.produced_mb_per_sec = None;
            p.fetch_long_poll_latency = LatencyResult::empty();
            p.fetches_in_flight_at_start = None;
        }
        assert_eq!(read.paths, expected);
        assert_eq!(read.workload(), v3.workload());
        // A version 2 document with a version 3 field is still refused (unknown field).
        let mut bad = v2.clone();
        bad["paths"][0]["speed"] = json!(1);
        assert!(Results::from_json(&bad.to_string())
            .unwrap_err()
            .to_string()
            .contains("/paths/0/speed: unknown field"));
        // Two entries of one (read path, phase) in a version 2 file are still ambiguous.
        let mut dup = v2;
        let first = dup["paths"][0].clone();
        dup["paths"].as_array_mut().unwrap().push(first);
        assert!(Results::from_json(&dup.to_string()).unwrap_err().to_string().contains("a second entry"));
        // The committed baseline of scripts/ci-gate.sh is a version 2 file.
        let baseline = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/results/baseline.json")).unwrap();
        if baseline.contains("\"schema_version\": 2") {
            assert!(Results::from_json(&baseline).is_ok());
        }
    }

    #[test]
    fn version_3_documents_are_read_without_loopback() {
        let v4 = example_repeated(&[1.0, 1.1]);
        let v3 = as_version_3(&v4);
        assert!(validate(&v3).unwrap_err().to_string().contains("/schema_version: expected 8, found 3"));
        let read = Results::from_json(&v3.to_string()).unwrap();
        assert_eq!(read, v4, "a run's version 3 document is its version 4 document with every loopback null");
        // A version 3 document with a version 4 field is refused (unknown field)...
        let mut bad = v3.clone();
        bad["paths"][0]["speed"] = json!(1);
        assert!(Results::from_json(&bad.to_string())
            .unwrap_err()
            .to_string()
            .contains("/paths/0/speed: unknown field"));
        // ... and so is phase loopback, which version 3 did not have.
        let mut bad = v3;
        bad["paths"][0]["phase"] = json!("loopback");
        let e = Results::from_json(&bad.to_string()).unwrap_err().to_string();
        assert!(e.contains("/paths/0/phase: expected catch_up, tail or mixed in a fetchbench run document"), "{e}");
        // The committed baseline of scripts/ci-gate.sh (a version 3 file when version 4 came)
        // still reads.
        let baseline = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/results/baseline.json")).unwrap();
        if baseline.contains("\"schema_version\": 3") {
            let b = Results::from_json(&baseline).unwrap();
            assert!(b.loopback.is_none() && b.paths.iter().all(|p| p.loopback.is_none()));
        }
    }

    /// Version 4 documents (before server models) read with `server_model` `threaded` in every
    /// entry and summary of an embedded run, `null` in a `read-paths` document and for an
    /// external cluster; the committed CI baseline still reads, as threaded.
    #[test]
    fn version_4_documents_read_as_threaded() {
        let v6 = example_repeated(&[1.0, 1.1]);
        let v5 = as_version_5(&v6);
        assert!(validate(&v5).unwrap_err().to_string().contains("/schema_version: expected 8, found 5"));
        assert!(v5.get("broker").is_none());
        assert_eq!(
            Results::from_json(&v5.to_string()).unwrap(),
            v6,
            "a version 5 document is version 6 without a broker"
        );
        let v4 = as_version_4(&v6);
        assert!(validate(&v4).unwrap_err().to_string().contains("/schema_version: expected 8, found 4"));
        assert!(v4["paths"][0].get("server_model").is_none() && v4["workload"].get("server_models").is_none());
        let read = Results::from_json(&v4.to_string()).unwrap();
        assert_eq!(read, v6, "an embedded version 4 run is its version 6 document under threaded");
        assert!(read.paths.iter().all(|p| p.server_model.as_deref() == Some("threaded")));
        assert!(read.summary.iter().all(|s| s.server_model.as_deref() == Some("threaded")));
        let text = serde_json::to_string_pretty(&Results::from_json(&v4.to_string()).unwrap()).unwrap();
        assert!(text.contains("\"server_model\": \"threaded\",\n      \"read_path\""), "first in an entry");
        // Not embedded: no model of ours ran.
        let mut external = v4.clone();
        external["target"] = json!("bootstrap:127.0.0.1:9092");
        let read = Results::from_json(&external.to_string()).unwrap();
        assert!(read.paths.iter().all(|p| p.server_model.is_none()));
        let rp = example_read_paths();
        let read = Results::from_json(&as_version_4(&rp).to_string()).unwrap();
        assert_eq!(read, rp);
        // A version 4 document that has a server_model keeps it, validated as version 5's.
        let mut given = v4;
        given["paths"][0]["server_model"] = json!("reactor");
        let e = Results::from_json(&given.to_string()).unwrap_err().to_string();
        assert!(e.contains("/paths/0/server_model: expected a server model"), "{e}");
        let baseline = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/results/baseline.json")).unwrap();
        let b = Results::from_json(&baseline).unwrap();
        assert!(b.paths.iter().all(|p| p.server_model.as_deref() == Some("threaded")));
    }

    /// Entries of two server models: one summary per (model, path, phase), and the ratio to
    /// copy of every combination against `threaded`'s `copy` (the reference).
    #[test]
    fn summaries_and_ratios_per_server_model() {
        let mut r = example_repeated(&[1.0, 1.1]);
        let extra: Vec<PathResult> = r
            .paths
            .iter()
            .filter(|p| p.read_path == "sendfile" || p.read_path == "copy")
            .map(|p| {
                let mut q = p.clone();
                q.server_model = Some("uring".into());
                q.read_path = if p.read_path == "copy" { "copy".into() } else { "uring-splice".into() };
                q.mb_per_sec *= 2.0;
                q
            })
            .collect();
        r.paths.extend(extra);
        r.summary = summarize(&r.paths);
        assert_eq!(r.summary.len(), 6 + 4);
        assert_eq!(Results::from_json(&r.to_json()).unwrap(), r, "valid");
        let find = |m: &str, path: &str| {
            r.summary
                .iter()
                .find(|s| s.server_model.as_deref() == Some(m) && s.read_path == path && s.phase == "catch_up")
                .unwrap()
        };
        assert!(find("threaded", "copy").ratio_to_copy.is_empty(), "the reference");
        // uring/copy is not the reference: threaded/copy is; it ran at twice its speed.
        let ratio =
            |m: &str, path: &str| find(m, path).ratio_to_copy.iter().find(|f| f.metric == "mb_per_sec").unwrap().mean;
        assert!((ratio("uring", "copy") - 2.0).abs() < 1e-9);
        assert!((ratio("uring", "uring-splice") - 3.2).abs() < 1e-9, "2 x sendfile's 1.6");
        assert!((ratio("threaded", "sendfile") - 1.6).abs() < 1e-9);
        let mut out = Vec::new();
        write_summary_csv(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\nuring,uring-splice,catch_up,ratio_to_copy,mb_per_sec,2,"), "{text}");
        assert_eq!(combination_label(Some("uring"), "uring-splice", true), "uring/uring-splice");
        assert_eq!(combination_label(Some("threaded"), "copy", false), "copy");
        assert_eq!(combination_label(None, "external", true), "external");
        assert!(models_compared(&r.paths) && !models_compared(&example(1.0).paths));
    }

    /// A `fetchbench read-paths` document (see [`super::super::read_paths`]): `loopback` instead of
    /// a workload, entries of phase `loopback` with their figures; each rule checked.
    #[test]
    fn read_paths_documents_validate_and_mix_with_nothing_else() {
        let good = serde_json::to_value(example_read_paths()).unwrap();
        let r = validate(&good).unwrap();
        assert_eq!(Results::from_json(&r.to_json()).unwrap(), r);
        assert!(r.workload().is_none() && r.paths.iter().all(|p| p.phase == "loopback" && p.loopback.is_some()));
        let check = |edit: &dyn Fn(&mut Value), expected: &str| {
            let mut doc = good.clone();
            edit(&mut doc);
            let e = validate(&doc).unwrap_err().to_string();
            assert!(e.contains(expected), "{e}\n  does not contain {expected}");
        };
        check(
            &|d| d["paths"][0]["phase"] = json!("catch_up"),
            "/paths/0/phase: expected loopback in a fetchbench read-paths document",
        );
        check(
            &|d| d["paths"][0]["loopback"] = Value::Null,
            "/paths/0/loopback: expected the figures of phase loopback",
        );
        check(
            &|d| d["paths"][0]["loopback"]["resident_fraction_max"] = json!(2),
            "/paths/0/loopback/resident_fraction_max: expected a fraction",
        );
        check(
            &|d| d["paths"][0]["loopback"]["passes"] = json!(-1),
            "/paths/0/loopback/passes: expected a non-negative integer",
        );
        check(&|d| d["paths"][0]["loopback"]["speed"] = json!(1), "/paths/0/loopback/speed: unknown field");
        check(
            &|d| d["loopback"]["slice_size"] = json!("1MiB"),
            "/loopback/slice_size: expected a non-negative integer",
        );
        check(&|d| d["workload"] = good_run()["workload"].clone(), "/loopback: expected null beside a workload");
        let run = good_run();
        let mut doc = run.clone();
        doc["workload"] = Value::Null;
        assert!(validate(&doc).unwrap_err().to_string().contains("/workload: expected a workload"));
        let mut doc = run;
        doc["paths"][1]["loopback"] = good["paths"][0]["loopback"].clone();
        assert!(validate(&doc)
            .unwrap_err()
            .to_string()
            .contains("/paths/1/loopback: expected null outside phase loopback"));
    }

    fn good_run() -> Value {
        serde_json::to_value(example(1.0)).unwrap()
    }

    #[test]
    fn the_summary_holds_the_statistics_of_the_repetitions() {
        let speeds = [0.9, 1.0, 1.1, 0.95, 1.05];
        let r = example_repeated(&speeds);
        assert_eq!(r.paths.len(), 5 * 6);
        assert_eq!(r.summary.len(), 6);
        assert_eq!(Results::from_json(&r.to_json()).unwrap(), r);
        // Rotated order: repetition 1 starts with mmap, 2 with sendfile.
        let firsts: Vec<&str> = r.paths.chunks(6).map(|c| c[0].read_path.as_str()).collect();
        assert_eq!(firsts, ["copy", "mmap", "sendfile", "copy", "mmap"]);
        for s in &r.summary {
            assert_eq!(s.samples, 5);
            let entries: Vec<&PathResult> =
                r.paths.iter().filter(|p| p.read_path == s.read_path && p.phase == s.phase).collect();
            let mb = s.figures.iter().find(|f| f.metric == "mb_per_sec").unwrap();
            let mean = entries.iter().map(|p| p.mb_per_sec).sum::<f64>() / 5.0;
            assert!((mb.mean - mean).abs() < 1e-9 * mean, "{mb:?}");
            for f in s.figures.iter().chain(&s.ratio_to_copy) {
                let (lo, hi) = (f.ci95_low.unwrap(), f.ci95_high.unwrap());
                assert!(lo <= f.mean && f.mean <= hi, "{f:?}");
            }
            assert_eq!(s.figures.iter().any(|f| f.metric == "rebalance_ms"), s.phase == "catch_up");
            if s.read_path == "copy" {
                assert!(s.ratio_to_copy.is_empty());
            } else if s.phase == "catch_up" {
                // Every path scales with the repetition's speed: the ratio to copy is exact.
                let ratio = s.ratio_to_copy.iter().find(|f| f.metric == "mb_per_sec").unwrap();
                let factor = if s.read_path == "mmap" { 1.15 } else { 1.6 };
                assert!((ratio.mean - factor).abs() < 1e-9 && ratio.cv.unwrap() < 1e-9, "{ratio:?}");
            }
        }
        // The catch-up MB/s of copy: 900 * speeds, mean 900, sample sd 900 * 0.0791 (by hand).
        let copy = &r.summary[0].figures[0];
        assert_eq!((r.summary[0].read_path.as_str(), copy.metric.as_str()), ("copy", "mb_per_sec"));
        assert!((copy.mean - 900.0).abs() < 1e-9);
        let sd = 900.0 * (0.025f64 / 4.0).sqrt();
        assert!((copy.stddev.unwrap() - sd).abs() < 1e-9 && (copy.cv.unwrap() - sd / 900.0).abs() < 1e-12);
        // One repetition: means only.
        let one = example(1.0);
        assert!(one.summary.iter().flat_map(|s| &s.figures).all(|f| f.ci95_low.is_none() && f.cv.is_none()));
        let mut out = Vec::new();
        write_summary_csv(&r, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let columns = SUMMARY_CSV_HEADER.split(',').count();
        assert!(text.lines().all(|l| l.split(',').count() == columns), "{text}");
        assert!(text.lines().nth(1).unwrap().starts_with("threaded,copy,catch_up,value,mb_per_sec,5,900,"), "{text}");
        assert!(text.contains("threaded,mmap,catch_up,ratio_to_copy,mb_per_sec,5,"), "{text}");
    }
}
