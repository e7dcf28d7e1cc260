//! `fetchbench read-paths`: measure each requested read path with [`measure`], then report the
//! results as a table or as a JSON document, each path also as a ratio to this machine's limits
//! (the JSON printed by `scripts/baseline-limits.sh`).
//!
//! [`run`] does the whole command except argument parsing and printing: it loads the limits,
//! creates the temp file ([`TempFile`]) when no file is given, measures every path (a path that
//! cannot run here is *skipped* with the probe's reason, never replaced by another one) and
//! returns a [`Report`]. [`Report::table`] and [`Report::json`] render it.
//!
//! ## The JSON document ([`Report::to_json`])
//!
//! An object with, in this order: `schema` (`"fetchbench-read-paths"`), `schema_version`
//! ([`SCHEMA_VERSION`]), `date` (UTC, `YYYY-MM-DDTHH:MM:SSZ`), `command` (the argument vector),
//! `command_line` (shell-quoted), `git_commit` (or `null`), `machine` (`nproc`, `kernel`,
//! `arch`), `config` (`file`, `temp_file`, `file_size`, `slice_size`, `total_bytes` in bytes,
//! `cold_cache`, `buffer_size` and `pipe_size` in bytes, `units`), `results` (one object per
//! requested path: `status` = `measured` with every [`Measurement`] figure and
//! `ratio_to_limits`, `skipped` with `reason`, or `failed` with `error`) and `limits` (`null`
//! without `--limits`; else `file`, `date` and `machine` copied from the limits file, and
//! `figures`: per [`Limit::key`], `bytes_per_sec`, `cpu_seconds_per_gb` and `error`).
//! A figure that is not a finite number is written as `null`.
//!
//! Units: GB = 1e9 bytes, MB = 1e6 bytes; seconds are wall-clock; CPU is process-wide and
//! includes the loopback receiver thread (see [`super::loopback`]).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::limits::{Limit, Limits, LimitsFileError};
use super::loopback::{measure, MeasureError, Measurement};
use super::results::{utc_timestamp, Git, Machine};
use crate::read_path::{CreateError, ReadPathConfig, ReadPathKind};

/// Above this page-cache residency before a pass, a `--cold` figure is flagged as not cold.
pub const NOT_COLD_FRACTION: f64 = 0.01;

/// Version of the JSON document ([`Report::to_json`]); bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

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
        date: utc_timestamp(std::time::SystemTime::now()),
        machine: Machine::current(),
        git_commit: Git::current().commit,
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
    /// When the measurements ended, UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// The machine measured on.
    pub machine: Machine,
    /// The commit of the source tree the binary was built from ([`Git::current`]), when known.
    pub git_commit: Option<String>,
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
                    let cached = if m.cold_cache { m.resident_fraction_max } else { m.resident_fraction_min };
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

    /// The JSON document described in the module docs.
    pub fn to_json(&self) -> Value {
        let limits = self.limit_figures();
        let results: Vec<Value> = self
            .outcomes
            .iter()
            .map(|o| match o {
                Outcome::Measured(m) => json!({
                    "status": "measured",
                    "requested": m.requested.name(),
                    "path": m.path.name(),
                    "passes": m.passes,
                    "bytes": m.bytes,
                    "seconds": num(m.seconds),
                    "gb_per_sec": num(m.gb_per_sec),
                    "cpu_user_seconds": num(m.cpu_user_seconds),
                    "cpu_system_seconds": num(m.cpu_system_seconds),
                    "cpu_seconds_per_gb": num(m.cpu_seconds_per_gb),
                    "cpu_user_seconds_per_gb": num(m.cpu_user_seconds_per_gb),
                    "cpu_system_seconds_per_gb": num(m.cpu_system_seconds_per_gb),
                    "receiver_cpu_seconds": opt(m.receiver_cpu_seconds),
                    "sender_cpu_seconds_per_gb": opt(m.sender_cpu_seconds_per_gb),
                    "transfers": m.stats.transfers,
                    "syscalls": m.syscalls,
                    "syscalls_per_mb": num(m.syscalls_per_mb),
                    "resident_fraction_min": num(m.resident_fraction_min),
                    "resident_fraction_max": num(m.resident_fraction_max),
                    "cold_cache_effective": m.cold_cache && m.resident_fraction_max <= NOT_COLD_FRACTION,
                    "ratio_to_limits": limits
                        .iter()
                        .map(|l| (l.key.to_string(), opt(l.ratio(m.gb_per_sec))))
                        .collect::<serde_json::Map<_, _>>(),
                }),
                Outcome::Skipped { kind, reason } => {
                    json!({ "status": "skipped", "requested": kind.name(), "reason": reason })
                }
                Outcome::Failed { kind, error } => {
                    json!({ "status": "failed", "requested": kind.name(), "error": error })
                }
            })
            .collect();
        let limits = self.limits.as_ref().map(|l| {
            json!({
                "file": l.path.display().to_string(),
                "date": l.doc.get("date"),
                "machine": l.doc.get("machine"),
                "figures": l
                    .figures
                    .iter()
                    .map(|f| {
                        let v = json!({
                            "bytes_per_sec": opt(f.bytes_per_sec),
                            "cpu_seconds_per_gb": opt(f.cpu_seconds_per_gb),
                            "error": f.error,
                        });
                        (f.key.to_string(), v)
                    })
                    .collect::<serde_json::Map<_, _>>(),
            })
        });
        json!({
            "schema": "fetchbench-read-paths",
            "schema_version": SCHEMA_VERSION,
            "date": self.date,
            "command": self.command,
            "command_line": self.command_line(),
            "git_commit": self.git_commit,
            "machine": {
                "nproc": self.machine.nproc,
                "kernel": self.machine.kernel,
                "arch": self.machine.arch,
            },
            "config": {
                "file": self.file.display().to_string(),
                "temp_file": self.temp_file,
                "file_size": self.file_size,
                "slice_size": self.slice_size,
                "total_bytes": self.total_bytes,
                "cold_cache": self.cold_cache,
                "buffer_size": self.config.buffer_size,
                "pipe_size": self.config.pipe_size,
                "units": "GB = 1e9 bytes, MB = 1e6 bytes; CPU is process-wide incl. the receiver thread; sender = minus the receiver thread",
            },
            "results": results,
            "limits": limits,
        })
    }

    /// [`Report::to_json`] pretty-printed (two-space indent), with a final newline.
    pub fn json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.to_json()).expect("a serde_json::Value always serializes");
        s.push('\n');
        s
    }
}

/// A JSON number for `v`: integral values written without a fraction (`1`, not `1.0`), as
/// schema version 1 always has; non-finite values become `null`.
fn num(v: f64) -> Value {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        Value::from(v)
    }
}

/// [`num`], or `null` for `None`.
fn opt(v: Option<f64>) -> Value {
    v.map(num).unwrap_or(Value::Null)
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
            stats: TransferStats { transfers: 32, bytes: 2 << 20, syscalls: 64, wall: Default::default() },
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
            git_commit: None,
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
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, r.to_json());
        let keys: Vec<_> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "schema",
                "schema_version",
                "date",
                "command",
                "command_line",
                "git_commit",
                "machine",
                "config",
                "results",
                "limits"
            ]
        );
        assert_eq!(v["schema"], "fetchbench-read-paths");
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["command_line"], "fetchbench read-paths --file 'a b'");
        assert_eq!(v["git_commit"], Value::Null);
        assert_eq!(v["machine"], json!({"nproc": 8, "kernel": "6.1.0-test", "arch": "x86_64"}));
        assert_eq!(v["config"]["file_size"], 1 << 20);
        assert_eq!(v["config"]["temp_file"], false);
        assert_eq!(v["config"]["buffer_size"], 65536);

        let m = &v["results"][0];
        assert_eq!(m["status"], "measured");
        assert_eq!(m["requested"], "copy");
        assert_eq!(m["passes"], 2);
        assert_eq!(m["bytes"], 2 << 20);
        assert_eq!(m["transfers"], 32);
        assert_eq!(m["gb_per_sec"], 2.0);
        assert_eq!(m["cpu_user_seconds"], 0.000005);
        assert_eq!(m["receiver_cpu_seconds"], Value::Null);
        // Not a finite number: null.
        assert_eq!(m["sender_cpu_seconds_per_gb"], Value::Null);
        assert_eq!(m["ratio_to_limits"]["fio_psync"], 0.4);
        assert_eq!(m["ratio_to_limits"]["fio_splice"], Value::Null);
        assert_eq!(m["ratio_to_limits"].as_object().unwrap().len(), 6);
        assert_eq!(
            v["results"][1],
            json!({"status": "skipped", "requested": "uring-splice", "reason": "io_uring \"disabled\""})
        );
        assert_eq!(v["results"][2], json!({"status": "failed", "requested": "direct", "error": "EINVAL"}));

        assert_eq!(v["limits"]["file"], "l.json");
        assert_eq!(v["limits"]["machine"]["fio_version"], "fio-3.36");
        assert_eq!(
            v["limits"]["figures"]["fio_psync"],
            json!({"bytes_per_sec": 5_000_000_000u64, "cpu_seconds_per_gb": 0.2, "error": null})
        );
        assert_eq!(v["limits"]["figures"]["fio_splice"]["error"], "no splice");

        // Integral figures are written as integers, as schema version 1 always has.
        assert!(text.contains("\"resident_fraction_min\": 1,\n"), "{text}");
        assert!(text.contains("\"bytes_per_sec\": 5000000000,\n"), "{text}");

        assert_eq!(report(None).to_json()["limits"], Value::Null);
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
