//! `fetchbench read-paths`, the harness's loopback mode: measure each requested read path alone
//! with [`measure`] (a file moved to an in-process loopback TCP receiver, no broker), then report
//! the results as a table or as a results document, each path also as a ratio to this machine's
//! limits (the JSON printed by `scripts/baseline-limits.sh`, read by [`super::limits`]).
//!
//! [`run`] does the whole command except argument parsing and printing: it loads the limits,
//! creates the temp file ([`TempFile`]) when no file is given, measures every path (a path that
//! cannot run here is *skipped* with the probe's reason, never replaced by another one) and
//! returns a [`Report`]. [`Report::table`] and [`Report::json`] render it.
//!
//! ## The JSON document ([`Report::results`])
//!
//! A `fetchbench-results` document ([`super::results`], the schema of `fetchbench run`, version 4
//! and later) with `target` `loopback`, `workload` `null`, the run's configuration in `loopback`
//! ([`LoopbackConfig`]) and one entry per measured path of phase `loopback`, its own figures in
//! the entry's `loopback` ([`LoopbackFigures`]); paths skipped or failed are `notes`. The results
//! module docs say which shared fields mean what here. `fetchbench compare` compares two of
//! them like any results files. (Before version 4 of the results schema, `read-paths` wrote a
//! `fetchbench-read-paths` version 1 document; `compare` refuses those, naming the file.)
//!
//! Units: GB = 1e9 bytes, MB = 1e6 bytes; seconds are wall-clock; CPU is process-wide and
//! includes the loopback receiver thread (see [`super::loopback`]).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::limits::{self, Limit, Limits, LimitsFileError};
use super::loopback::{measure, MeasureError, Measurement};
use super::results::{
    summarize, utc_timestamp, CpuPerGb, EndToEnd, Git, LatencyResult, LimitsResult, LoopbackConfig, LoopbackFigures,
    PathResult, Results, SCHEMA, SCHEMA_VERSION,
};
use crate::machine::Machine;
use crate::read_path::{CreateError, ReadPathConfig, ReadPathKind};

/// Above this page-cache residency before a pass, a `--cold` figure is flagged as not cold.
pub const NOT_COLD_FRACTION: f64 = 0.01;

/// Errors of `fetchbench read-paths` outside the measurements themselves (a path that fails to
/// measure is an [`Outcome::Failed`], not an error). Each names the file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadPathsError {
    /// An I/O operation on `path` failed (the measured file, the temp file).
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done ("reading", "creating", "writing", "syncing").
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The limits file cannot be read, is not JSON or has another `schema_version`.
    #[error(transparent)]
    Limits(#[from] LimitsFileError),
    /// The options cannot describe a run (a zero size, slice or total).
    #[error("{reason}")]
    InvalidArgument {
        /// What is wrong, naming the command-line option.
        reason: &'static str,
    },
}

impl ReadPathsError {
    fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ReadPathsError + 'a {
        move |source| ReadPathsError::Io { op, path: path.to_path_buf(), source }
    }
}

/// What `fetchbench read-paths` was asked to do.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The file to move (read only); `None` creates a [`TempFile`] of `temp_size` bytes.
    pub file: Option<PathBuf>,
    /// Size of the temp file, in bytes (used when `file` is `None`; must be at least 1).
    pub temp_size: u64,
    /// Directory of the temp file; `None` is [`std::env::temp_dir`].
    pub temp_dir: Option<PathBuf>,
    /// Bytes per `transfer` call (at least 1).
    pub slice_size: u64,
    /// Bytes to move per path after the warm-up pass (at least 1).
    pub total_bytes: u64,
    /// The paths to measure, in report order; empty means [`ReadPathKind::ALL`].
    pub kinds: Vec<ReadPathKind>,
    /// Evict the file from the page cache before each measured pass.
    pub cold_cache: bool,
    /// This machine's limits: a `scripts/baseline-limits.sh` output file.
    pub limits: Option<PathBuf>,
    /// The command line, recorded in the report (normally `std::env::args()`).
    pub command: Vec<String>,
    /// Tunables of the read paths.
    pub config: ReadPathConfig,
}

/// Runs `fetchbench read-paths`: loads the limits, creates the temp file if `options.file` is
/// `None` (removed again before this returns), then probes and measures each path in turn.
/// `progress` receives one line per step (`read-paths: copy: moving ... bytes ...`, `SKIPPED`
/// and `FAILED` lines with the reason), for stderr.
///
/// Errors: [`ReadPathsError::Io`] reading the file, or writing the temp file;
/// [`ReadPathsError::Limits`] for a limits file that cannot be read or is not a limits document;
/// [`ReadPathsError::InvalidArgument`] for a zero `slice_size`, `total_bytes` or `temp_size`.
/// A path that cannot run or fails is recorded in [`Report::outcomes`], not returned as an error.
pub fn run(options: &RunOptions, mut progress: impl FnMut(&str)) -> Result<Report, ReadPathsError> {
    let date = utc_timestamp(std::time::SystemTime::now());
    let limits = options.limits.as_deref().map(|p| Limits::load(p, options.cold_cache)).transpose()?;
    if options.slice_size == 0 || options.total_bytes == 0 {
        return Err(ReadPathsError::InvalidArgument { reason: "--slice and --total must be at least 1 byte" });
    }
    let kinds = if options.kinds.is_empty() { ReadPathKind::ALL.to_vec() } else { options.kinds.clone() };
    let (file, temp) = match &options.file {
        Some(f) => (f.clone(), None),
        None => {
            let dir = options.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
            if options.temp_size == 0 {
                return Err(ReadPathsError::InvalidArgument { reason: "--size must be at least 1 byte" });
            }
            progress(&format!("read-paths: writing a {}-byte temp file in {}", options.temp_size, dir.display()));
            let t = TempFile::create(&dir, options.temp_size)?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let file_size = std::fs::metadata(&file).map_err(ReadPathsError::io("reading", &file))?.len();

    let mut outcomes = Vec::new();
    for kind in kinds {
        if let Err(u) = kind.probe() {
            progress(&format!("read-paths: {kind}: SKIPPED: {}", u.reason));
            outcomes.push(Outcome::Skipped { kind, reason: u.reason });
            continue;
        }
        progress(&format!(
            "read-paths: {kind}: moving {} bytes in {}-byte slices ...",
            options.total_bytes, options.slice_size
        ));
        match measure(kind, &options.config, &file, options.slice_size, options.total_bytes, options.cold_cache) {
            Ok(m) => outcomes.push(Outcome::Measured(Box::new(m))),
            Err(MeasureError::Create(CreateError::Unsupported(u))) => {
                progress(&format!("read-paths: {kind}: SKIPPED: {}", u.reason));
                outcomes.push(Outcome::Skipped { kind, reason: u.reason });
            }
            Err(e) => {
                progress(&format!("read-paths: {kind}: FAILED: {e}"));
                outcomes.push(Outcome::Failed { kind, error: e.to_string() });
            }
        }
    }
    drop(temp);

    Ok(Report {
        date,
        machine: Machine::current(),
        git: Git::current(),
        command: options.command.clone(),
        file,
        file_size,
        temp_file: options.file.is_none(),
        slice_size: options.slice_size,
        total_bytes: options.total_bytes,
        cold_cache: options.cold_cache,
        config: options.config,
        limits,
        outcomes,
    })
}

/// For `msg-zerocopy`: how many of its sends the kernel copied after all (every one on loopback,
/// see `read_path::msg_zerocopy`), so the figure is not read as zero copy.
fn zerocopy_note(m: &Measurement) -> Option<String> {
    let z = m.zerocopy?;
    Some(format!(
        "read path {}: the kernel copied {} of {} sends (SO_EE_CODE_ZEROCOPY_COPIED{}; loopback always copies, \
         zero copy needs a NIC with scatter-gather)",
        m.path,
        z.copied_sends,
        z.sends,
        if z.unsupported_sends > 0 {
            format!(", {} on a socket without SO_ZEROCOPY", z.unsupported_sends)
        } else {
            String::new()
        },
    ))
}

/// A file of real blocks (a byte pattern, no holes) in the page cache, removed on drop.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Creates `fetchbench-read-paths-<pid>.dat` in `dir` with `size` bytes of a byte pattern and
    /// syncs it, so the page cache holds it clean (evictable for a cold-cache run).
    ///
    /// Errors: [`ReadPathsError::Io`] naming the file (it already exists, the disk is full, ...);
    /// a partly written file is removed.
    pub fn create(dir: &Path, size: u64) -> Result<TempFile, ReadPathsError> {
        let path = dir.join(format!("fetchbench-read-paths-{}.dat", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(ReadPathsError::io("creating", &path))?;
        let guard = TempFile { path };
        let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let mut position = 0u64;
        while position < size {
            let n = (size - position).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..n], position).map_err(ReadPathsError::io("writing", &guard.path))?;
            position += n as u64;
        }
        file.sync_data().map_err(ReadPathsError::io("syncing", &guard.path))?;
        Ok(guard)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What happened to one requested path.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It ran; the figures.
    Measured(Box<Measurement>),
    /// It cannot run here (its probe failed); the probe's reason.
    Skipped {
        /// The path asked for.
        kind: ReadPathKind,
        /// Why it cannot run (e.g. `kernel.io_uring_disabled=2`).
        reason: String,
    },
    /// Measuring it failed; the [`MeasureError`] message.
    Failed {
        /// The path asked for.
        kind: ReadPathKind,
        /// The error, naming the file and slice.
        error: String,
    },
}

/// The outcome of a `fetchbench read-paths` run and everything its report names.
#[derive(Clone, Debug)]
pub struct Report {
    /// When the run started, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The machine measured on.
    pub machine: Machine,
    /// The source the binary was built from ([`Git::current`]).
    pub git: Git,
    /// The command line (argument vector).
    pub command: Vec<String>,
    /// The measured file (for a temp file: the path it had; it is removed by now).
    pub file: PathBuf,
    /// Its size, in bytes.
    pub file_size: u64,
    /// Whether the file was a temp file created for the run.
    pub temp_file: bool,
    /// Bytes per `transfer` call.
    pub slice_size: u64,
    /// Bytes moved per path after the warm-up pass.
    pub total_bytes: u64,
    /// Whether the page cache was cold.
    pub cold_cache: bool,
    /// Tunables of the read paths.
    pub config: ReadPathConfig,
    /// This machine's limits, when given.
    pub limits: Option<Limits>,
    /// One outcome per requested path, in the order requested.
    pub outcomes: Vec<Outcome>,
}

impl Report {
    /// Whether any path failed (the command then exits 1).
    pub fn any_failed(&self) -> bool {
        self.outcomes.iter().any(|o| matches!(o, Outcome::Failed { .. }))
    }

    /// [`Report::command`] shell-quoted into one line.
    pub fn command_line(&self) -> String {
        self.command.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
    }

    fn limit_figures(&self) -> &[Limit] {
        self.limits.as_ref().map(|l| l.figures.as_slice()).unwrap_or(&[])
    }

    /// The human-readable report: a header (date, machine, command, file), one row per path
    /// (GB/s, CPU s/GB, user, sys, sender, syscall/MB, cached %, then `x LIMIT` ratio columns),
    /// notes on the units, and the limits with a warning when they come from another kernel.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let cache = if self.cold_cache { "COLD (fdatasync + fadvise DONTNEED before each pass)" } else { "hot" };
        s += &format!(
            "fetchbench read-paths  {}  kernel {}  nproc {}\n",
            self.date, self.machine.kernel, self.machine.nproc
        );
        s += &format!("command: {}\n", self.command_line());
        s += &format!(
            "file: {} ({}{}), slice {}, {} per path after a warm-up pass, page cache {cache}\n\n",
            self.file.display(),
            human_bytes(self.file_size),
            if self.temp_file { ", temp" } else { "" },
            human_bytes(self.slice_size),
            human_bytes(self.total_bytes),
        );
        let limits = self.limit_figures();
        s += &format!(
            "{:<13} {:>7} {:>8} {:>6} {:>6} {:>7} {:>10} {:>7}",
            "path", "GB/s", "CPU s/GB", "user", "sys", "sender", "syscall/MB", "cached"
        );
        for l in limits {
            s += &format!(" {:>10}", format!("x {}", l.label));
        }
        s += "\n";
        for o in &self.outcomes {
            match o {
                Outcome::Measured(m) => {
                    let name = if m.path == m.requested {
                        m.path.name().to_string()
                    } else {
                        format!("{} (ran {})", m.requested, m.path)
                    };
                    let cached = cached(m);
                    s += &format!(
                        "{:<13} {:>7.2} {:>8.3} {:>6.3} {:>6.3} {:>7} {:>10.1} {:>6.0}%",
                        name,
                        m.gb_per_sec,
                        m.cpu_seconds_per_gb,
                        m.cpu_user_seconds_per_gb,
                        m.cpu_system_seconds_per_gb,
                        m.sender_cpu_seconds_per_gb.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into()),
                        m.syscalls_per_mb,
                        cached * 100.0
                    );
                    for l in limits {
                        let r = l.ratio(m.gb_per_sec);
                        s += &format!(" {:>10}", r.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into()));
                    }
                    s += "\n";
                }
                Outcome::Skipped { kind, reason } => s += &format!("{:<13} skipped: {reason}\n", kind.name()),
                Outcome::Failed { kind, error } => s += &format!("{:<13} FAILED: {error}\n", kind.name()),
            }
        }
        s += "\nGB = 1e9 bytes. CPU s/GB is process-wide (io_uring workers included) and includes the \
              loopback receiver thread;\n\"sender\" subtracts the receiver thread's own CPU clock (on loopback much of the receiving TCP \
              stack still runs in the sender's context;\nthe null path's figures are the socket's whole cost). \
              \"cached\": page-cache residency of the file before a pass (mincore).\n\
              Compare paths as ratios inside one run.\n";
        // A cold run whose eviction did not take (tmpfs, pinned pages) must not pass for cold.
        for o in &self.outcomes {
            if let Outcome::Measured(m) = o {
                if let Some(note) = zerocopy_note(m) {
                    s += &format!("{note}\n");
                }
                if m.cold_cache && m.resident_fraction_max > NOT_COLD_FRACTION {
                    s += &format!(
                        "WARNING: {}: up to {:.0}% of the file was still cached before a pass: NOT a cold-cache figure\n",
                        m.path,
                        m.resident_fraction_max * 100.0
                    );
                }
            }
        }
        if let Some(l) = &self.limits {
            s += &format!("\nx LIMIT = path GB/s / limit GB/s. Limits: {}\n", l.describe());
            for f in &l.figures {
                match (&f.error, f.bytes_per_sec) {
                    (Some(e), _) => s += &format!("  {:<11} error: {e}\n", f.label),
                    (None, Some(b)) => {
                        s += &format!(
                            "  {:<11} {:>7.2} GB/s  {:>6} CPU s/GB\n",
                            f.label,
                            b / 1e9,
                            f.cpu_seconds_per_gb.map(|c| format!("{c:.3}")).unwrap_or_else(|| "-".into())
                        )
                    }
                    (None, None) => s += &format!("  {:<11} missing\n", f.label),
                }
            }
            if l.doc.pointer("/machine/kernel").and_then(Value::as_str) != Some(self.machine.kernel.as_str()) {
                s += "  WARNING: the limits were measured on another kernel (machine?): ratios are not meaningful\n";
            }
        }
        s
    }

    /// The results document described in the module docs (it passes
    /// [`super::results::validate`]).
    pub fn results(&self) -> Results {
        let limits = match &self.limits {
            Some(l) => limits::result(l, l.path.display().to_string()),
            None => LimitsResult::default(),
        };
        let mut notes = Vec::new();
        let mut paths = Vec::new();
        for o in &self.outcomes {
            match o {
                Outcome::Measured(m) => {
                    if m.cold_cache && m.resident_fraction_max > NOT_COLD_FRACTION {
                        notes.push(format!(
                            "read path {}: up to {:.0}% of the file was still cached before a pass: not a cold-cache figure",
                            m.path,
                            m.resident_fraction_max * 100.0
                        ));
                    }
                    notes.extend(zerocopy_note(m));
                    paths.push(entry(m, &limits));
                }
                Outcome::Skipped { kind, reason } => notes.push(format!("read path {kind}: skipped: {reason}")),
                Outcome::Failed { kind, error } => notes.push(format!("read path {kind}: FAILED: {error}")),
            }
        }
        if let Some(l) = &self.limits {
            let kernel = l.doc.pointer("/machine/kernel").and_then(Value::as_str);
            if kernel != Some(self.machine.kernel.as_str()) {
                notes.push(format!(
                    "machine limits: measured on another kernel ({}): ratios are not meaningful",
                    kernel.unwrap_or("unknown")
                ));
            }
        }
        Results {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            date: self.date.clone(),
            machine: self.machine.clone(),
            git: self.git.clone(),
            command: self.command.clone(),
            target: "loopback".into(),
            broker: None,
            interrupted: false,
            notes,
            workload: Value::Null,
            loopback: Some(LoopbackConfig {
                file: self.file.display().to_string(),
                temp_file: self.temp_file,
                file_size: self.file_size,
                slice_size: self.slice_size,
                total_bytes: self.total_bytes,
                cold_cache: self.cold_cache,
                buffer_size: self.config.buffer_size as u64,
                pipe_size: self.config.pipe_size as u64,
            }),
            limits,
            summary: summarize(&paths),
            paths,
        }
    }

    /// [`Report::results`] pretty-printed (two-space indent), with a final newline.
    pub fn json(&self) -> String {
        self.results().to_json() + "\n"
    }
}

/// The results entry of one measured path (see the results module docs for what the shared
/// fields mean in phase `loopback`). A figure that is not a finite number (none is, from a
/// real measurement) is 0, or `null` where the schema allows it.
fn entry(m: &Measurement, limits: &LimitsResult) -> PathResult {
    let finite = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
    let mb_per_sec = finite(m.gb_per_sec * 1e3);
    let none = LatencyResult::empty;
    PathResult {
        server_model: None,
        read_path: m.path.name().to_string(),
        phase: "loopback".into(),
        repetition: 0,
        seconds: finite(m.seconds),
        bytes: m.bytes,
        records: 0,
        mb_per_sec,
        records_per_sec: 0.0,
        produced_mb_per_sec: None,
        broker_cpu: CpuPerGb {
            user_s_per_gb: finite(m.cpu_user_seconds_per_gb),
            sys_s_per_gb: finite(m.cpu_system_seconds_per_gb),
        },
        consumer_cpu: CpuPerGb::default(),
        minor_faults_per_gb: 0.0,
        major_faults_per_gb: 0.0,
        context_switches_per_gb: 0.0,
        // The loopback's own counts (self-counted system calls per MB) are in `loopback`.
        syscalls_per_gb: None,
        user_copied_bytes_per_gb: None,
        residency_before: finite(cached(m)).min(1.0),
        broker_rss_bytes: 0,
        fetch_latency: none(),
        fetch_long_poll_latency: none(),
        fetches_in_flight_at_start: None,
        poll_latency: none(),
        end_to_end_latency: EndToEnd { raw: none(), corrected: none() },
        rebalance_ms: None,
        ratio_to_limits: limits::ratios(limits, mb_per_sec),
        loopback: Some(LoopbackFigures {
            requested: m.requested.name().to_string(),
            passes: u64::from(m.passes),
            transfers: m.stats.transfers,
            syscalls: m.syscalls,
            syscalls_per_mb: finite(m.syscalls_per_mb),
            cpu_user_seconds: finite(m.cpu_user_seconds),
            cpu_system_seconds: finite(m.cpu_system_seconds),
            receiver_cpu_seconds: m.receiver_cpu_seconds.filter(|v| v.is_finite()),
            sender_cpu_seconds_per_gb: m.sender_cpu_seconds_per_gb.filter(|v| v.is_finite()),
            resident_fraction_min: finite(m.resident_fraction_min).min(1.0),
            resident_fraction_max: finite(m.resident_fraction_max).min(1.0),
            cold_cache_effective: m.cold_cache && m.resident_fraction_max <= NOT_COLD_FRACTION,
        }),
        bound_by: None,
        attribution: None,
    }
}

/// The page-cache residency the table shows as `cached`: the lowest before a pass of a hot
/// run, the highest of a cold one.
fn cached(m: &Measurement) -> f64 {
    if m.cold_cache {
        m.resident_fraction_max
    } else {
        m.resident_fraction_min
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=,:@%+".contains(c)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::super::limits::tests::LIMITS;
    use super::*;
    use crate::read_path::TransferStats;

    fn measurement() -> Measurement {
        Measurement {
            requested: ReadPathKind::Copy,
            path: ReadPathKind::Copy,
            file: PathBuf::from("/tmp/f"),
            file_size: 1 << 20,
            slice_size: 1 << 16,
            cold_cache: false,
            passes: 2,
            bytes: 2 << 20,
            seconds: 0.5,
            gb_per_sec: 2.0,
            cpu_user_seconds: 0.000005,
            cpu_system_seconds: 0.25,
            cpu_user_seconds_per_gb: 0.1,
            cpu_system_seconds_per_gb: 0.2,
            cpu_seconds_per_gb: 0.3,
            receiver_cpu_seconds: None,
            sender_cpu_seconds_per_gb: Some(f64::NAN),
            syscalls: 64,
            syscalls_per_mb: 30.5,
            stats: TransferStats {
                transfers: 32,
                bytes: 2 << 20,
                syscalls: 64,
                user_copied: 0,
                wall: Default::default(),
            },
            zerocopy: None,
            resident_fraction_min: 1.0,
            resident_fraction_max: 1.0,
        }
    }

    fn report(limits: Option<Limits>) -> Report {
        Report {
            date: "2026-01-01T00:00:00Z".into(),
            machine: Machine {
                nproc: 8,
                kernel: "6.1.0-test".into(),
                arch: "x86_64".into(),
                cpu_model: String::new(),
                memory_bytes: 0,
                io_uring: false,
            },
            git: Git { commit: None, dirty: false },
            command: vec!["fetchbench".into(), "read-paths".into(), "--file".into(), "a b".into()],
            file: PathBuf::from("/tmp/f"),
            file_size: 1 << 20,
            temp_file: false,
            slice_size: 1 << 16,
            total_bytes: 2 << 20,
            cold_cache: false,
            config: ReadPathConfig::default(),
            limits,
            outcomes: vec![
                Outcome::Measured(Box::new(measurement())),
                Outcome::Skipped { kind: ReadPathKind::UringSplice, reason: "io_uring \"disabled\"".into() },
                Outcome::Failed { kind: ReadPathKind::Direct, error: "EINVAL".into() },
            ],
        }
    }

    #[test]
    fn json_has_the_schema_fields() {
        let limits = Limits::parse(Path::new("l.json"), LIMITS, false).unwrap();
        let r = report(Some(limits));
        let text = r.json();
        assert!(text.ends_with("}\n"));
        // A results document of the current version, valid, that reads back as it was written.
        let back = Results::from_json(&text).unwrap();
        assert_eq!(back, r.results());
        let v: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "schema",
                "schema_version",
                "date",
                "machine",
                "git",
                "command",
                "target",
                "broker",
                "interrupted",
                "notes",
                "workload",
                "loopback",
                "limits",
                "paths",
                "summary"
            ]
        );
        assert_eq!(v["schema"], "fetchbench-results");
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["command"], serde_json::json!(["fetchbench", "read-paths", "--file", "a b"]));
        assert_eq!(r.command_line(), "fetchbench read-paths --file 'a b'");
        assert_eq!(v["git"]["commit"], Value::Null);
        assert_eq!(
            (&v["machine"]["nproc"], &v["machine"]["kernel"], &v["machine"]["arch"]),
            (&8.into(), &"6.1.0-test".into(), &"x86_64".into())
        );
        assert_eq!((&v["target"], &v["workload"]), (&"loopback".into(), &Value::Null));
        assert_eq!(v["loopback"]["file_size"], 1 << 20);
        assert_eq!(v["loopback"]["temp_file"], false);
        assert_eq!(v["loopback"]["buffer_size"], 65536);

        let m = &v["paths"][0];
        assert_eq!((&m["phase"], &m["read_path"], &m["repetition"]), (&"loopback".into(), &"copy".into(), &0.into()));
        assert_eq!(m["loopback"]["requested"], "copy");
        assert_eq!(m["loopback"]["passes"], 2);
        assert_eq!(m["bytes"], 2 << 20);
        assert_eq!(m["loopback"]["transfers"], 32);
        assert_eq!(m["mb_per_sec"], 2000.0);
        assert_eq!(m["broker_cpu"]["sys_s_per_gb"], 0.2);
        assert_eq!(m["loopback"]["cpu_user_seconds"], 0.000005);
        assert_eq!(m["loopback"]["syscalls_per_mb"], 30.5);
        assert_eq!(m["loopback"]["receiver_cpu_seconds"], Value::Null);
        // Not a finite number: null.
        assert_eq!(m["loopback"]["sender_cpu_seconds_per_gb"], Value::Null);
        assert_eq!(m["residency_before"], 1.0);
        // A ratio to each limit with a throughput: fio psync, fio mmap, iperf3 (not the failed
        // splice, the empty io_uring job or the missing iperf3 -Z).
        let ratios: Vec<(&str, f64)> =
            back.paths[0].ratio_to_limits.iter().map(|r| (r.key.as_str(), r.ratio)).collect();
        assert_eq!(ratios, [("fio_psync", 0.4), ("fio_mmap", 0.5), ("iperf3_loopback", 1.0)]);
        assert_eq!(v["paths"].as_array().unwrap().len(), 1);
        assert_eq!(
            back.notes,
            ["read path uring-splice: skipped: io_uring \"disabled\"", "read path direct: FAILED: EINVAL"]
        );

        assert_eq!(v["limits"]["source"], "l.json");
        assert_eq!(
            v["limits"]["figures"][0],
            serde_json::json!({"key": "fio_psync", "label": "fio psync", "bytes_per_sec": 5e9, "cpu_seconds_per_gb": 0.2})
        );
        assert_eq!(back.summary.len(), 1);

        assert_eq!(report(None).results().limits, LimitsResult::default());
    }

    /// msg-zerocopy's copied sends are stated under the table and in the JSON notes; other
    /// paths get no such note.
    #[test]
    fn zerocopy_copies_are_stated() {
        let mut r = report(None);
        let mut m = measurement();
        m.requested = ReadPathKind::MsgZerocopy;
        m.path = ReadPathKind::MsgZerocopy;
        m.zerocopy = Some(crate::read_path::msg_zerocopy::ZerocopyStats {
            sends: 4,
            completed_sends: 4,
            copied_sends: 4,
            ..Default::default()
        });
        r.outcomes = vec![Outcome::Measured(Box::new(measurement())), Outcome::Measured(Box::new(m))];
        let want = "read path msg-zerocopy: the kernel copied 4 of 4 sends";
        assert!(r.table().contains(want), "{}", r.table());
        let notes = r.results().notes;
        assert_eq!(notes.iter().filter(|n| n.starts_with(want)).count(), 1, "{notes:?}");
        assert!(!notes.iter().any(|n| n.contains("read path copy")), "{notes:?}");
    }

    #[test]
    fn table_has_a_row_per_outcome_and_a_column_per_limit() {
        let limits = Limits::parse(Path::new("l.json"), LIMITS, false).unwrap();
        let t = report(Some(limits)).table();
        assert!(t.starts_with("fetchbench read-paths  2026-01-01T00:00:00Z  kernel 6.1.0-test  nproc 8\n"), "{t}");
        assert!(t.contains("file: /tmp/f (1 MiB), slice 64 KiB, 2 MiB per path after a warm-up pass, page cache hot\n"));
        assert!(
            t.contains("path             GB/s CPU s/GB   user    sys  sender syscall/MB  cached x fio psync"),
            "{t}"
        );
        assert!(t.contains("\ncopy             2.00    0.300  0.100  0.200     NaN       30.5    100%       0.40       0.50          -"), "{t}");
        assert!(t.contains("\nuring-splice  skipped: io_uring \"disabled\"\n"));
        assert!(t.contains("\ndirect        FAILED: EINVAL\n"));
        assert!(t.contains("  fio splice  error: no splice\n  fio uring   missing\n"), "{t}");
        assert!(!t.contains("WARNING"));
        let mut other = report(Limits::parse(Path::new("l.json"), LIMITS, false).ok());
        other.machine.kernel = "5.15.0".into();
        assert!(other.table().contains("WARNING: the limits were measured on another kernel"));
        assert!(!report(None).table().contains("x LIMIT"));
    }

    #[test]
    fn temp_file_is_written_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let t = TempFile::create(dir.path(), (3 << 20) + 5).unwrap();
        let path = t.path().to_path_buf();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), (3 << 20) + 5);
        let e = TempFile::create(dir.path(), 1).unwrap_err();
        assert!(matches!(e, ReadPathsError::Io { op: "creating", .. }), "{e}");
        drop(t);
        assert!(!path.exists());
    }

    #[test]
    fn run_validates_its_options() {
        let options = RunOptions {
            file: None,
            temp_size: 0,
            temp_dir: None,
            slice_size: 1,
            total_bytes: 1,
            kinds: vec![],
            cold_cache: false,
            limits: None,
            command: vec![],
            config: ReadPathConfig::default(),
        };
        let e = run(&options, |_| {}).unwrap_err();
        assert_eq!(e.to_string(), "--size must be at least 1 byte");
        let e = run(&RunOptions { slice_size: 0, ..options }, |_| {}).unwrap_err();
        assert_eq!(e.to_string(), "--slice and --total must be at least 1 byte");
    }

    #[test]
    fn formats_dates_sizes_and_arguments() {
        use super::super::results::utc_date;
        assert_eq!(utc_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_date(951_782_400 + 3661), "2000-02-29T01:01:01Z");
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes((3 << 20) + 1), "3.0 MiB");
        assert_eq!(human_bytes(1000), "1000 B");
        assert_eq!(shell_quote("--paths=copy,mmap"), "--paths=copy,mmap");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
