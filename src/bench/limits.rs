//! This machine's limits, for `fetchbench run` and `fetchbench read-paths`: the document of
//! `scripts/baseline-limits.sh` (fio sequential reads and iperf3 over loopback) parsed
//! ([`Limits`]: every figure, a tool's error included, as the `read-paths` table shows them), as
//! the results' [`LimitsResult`], and each path's throughput as a ratio to them ([`ratios`],
//! `PathResult::ratio_to_limits`).
//!
//! Two sources: a limits file the user measured before ([`load`], `--limits FILE`), or a short
//! run of the script itself ([`measure`], about 7 x [`SHORT_RUNTIME`] seconds plus writing a
//! [`SHORT_SIZE`] file) when fio and iperf3 are installed. [`measure`] never installs anything:
//! it checks the tools on `PATH` first and refuses without them ([`LimitsError::NotInstalled`]),
//! so the script's own `apt-get install` (as root) never runs from `fetchbench run`.
//!
//! The figures are those [`Limits::parse`] reads, fio direct included (the disk without the page
//! cache), minus any figure with neither a throughput nor a CPU cost (the tool failed there; its
//! error is logged as a `tracing` warning, [`LimitFigure`] has no place for it).
//! Units: throughput in bytes/s, CPU in CPU seconds per GB (1e9 bytes).

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::results::{LimitFigure, LimitRatio, LimitsResult};

/// `LIMITS_SIZE` of the short run of [`measure`]: the size of the file fio reads.
pub(crate) const SHORT_SIZE: &str = "256M";

/// `LIMITS_RUNTIME` of the short run of [`measure`]: seconds per fio job and per iperf3 run.
pub(crate) const SHORT_RUNTIME: &str = "1";

/// The [`LimitsResult::source`] of a [`measure`] run.
pub(crate) const MEASURED_SOURCE: &str = "scripts/baseline-limits.sh (LIMITS_SIZE=256M LIMITS_RUNTIME=1)";

/// The tools the script measures with, in the order [`LimitsError::NotInstalled`] lists them.
pub(crate) const TOOLS: [&str; 2] = ["fio", "iperf3"];

/// How long [`measure`] lets the script run before stopping it (SIGTERM, then SIGKILL): the
/// short run takes about 10 s; this only guards against a hung fio or iperf3.
pub(crate) const MEASURE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why there are no limits: the file or the script failed, or the tools are missing.
/// `fetchbench run` records [`LimitsError::note`] in the results' notes and goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum LimitsError {
    /// fio or iperf3 is not on `PATH` ([`measure`] does not install them).
    #[error("install {} (scripts/baseline-limits.sh installs them as root) or pass --limits FILE", missing.join(" and "))]
    NotInstalled {
        /// The missing tools, from [`TOOLS`].
        missing: Vec<&'static str>,
    },
    /// The limits file could not be read, is not JSON or has another `schema_version` (also
    /// for the script's output).
    #[error(transparent)]
    Limits(#[from] LimitsFileError),
    /// The script could not be started or its output read.
    #[error("running {}: {source}", script.display())]
    Spawn {
        /// The script.
        script: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The script exited unsuccessfully or was stopped after [`MEASURE_TIMEOUT`].
    #[error("{} failed ({status}): {stderr}", script.display())]
    Failed {
        /// The script.
        script: PathBuf,
        /// Its exit status, or `timed out after N s`.
        status: String,
        /// The last lines of its stderr (at most 500 bytes).
        stderr: String,
    },
}

impl LimitsError {
    /// The note for the results file: `machine limits: not measured: <this error>`.
    pub(crate) fn note(&self) -> String {
        format!("machine limits: not measured: {self}")
    }
}

/// The `schema_version` of the `scripts/baseline-limits.sh` output that [`Limits`] reads.
pub(crate) const LIMITS_SCHEMA_VERSION: u32 = 1;

/// One reference figure from the limits file (a column of the `fetchbench read-paths` table).
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// Column label (`fio psync`, `iperf3 -Z`, ...).
    pub label: &'static str,
    /// JSON key (`fio_psync`, `iperf3_loopback_sendfile`, ...).
    pub key: &'static str,
    /// Throughput, in bytes per second.
    pub bytes_per_sec: Option<f64>,
    /// CPU seconds per GB (1e9 bytes) moved; for iperf3 the sending host's CPU.
    pub cpu_seconds_per_gb: Option<f64>,
    /// The tool's error, when it failed.
    pub error: Option<String>,
}

impl Limit {
    /// `gb_per_sec` (GB = 1e9 bytes) as a ratio to this limit's throughput; `None` when the
    /// limit has no positive throughput.
    pub fn ratio(&self, gb_per_sec: f64) -> Option<f64> {
        self.bytes_per_sec.filter(|&b| b > 0.0).map(|b| gb_per_sec * 1e9 / b)
    }
}

/// The limits file (`scripts/baseline-limits.sh` output), parsed: every figure, a tool's error
/// included (the `fetchbench read-paths` table shows them; [`LimitsResult`] keeps the measured ones).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// The file it was read from.
    pub path: PathBuf,
    /// The whole document.
    pub doc: Value,
    /// The figures, in column order: fio psync, mmap, splice and io_uring from the page cache,
    /// fio direct (cold-cache runs only), iperf3 loopback copy and sendfile (`-Z`).
    pub figures: Vec<Limit>,
}

impl Limits {
    /// Reads and parses the limits file at `path`; `cold_cache` adds the fio direct figure.
    ///
    /// Errors: [`LimitsFileError::Io`] reading it, else as [`Limits::parse`].
    pub fn load(path: &Path, cold_cache: bool) -> Result<Limits, LimitsFileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| LimitsFileError::Io { path: path.to_path_buf(), source })?;
        Limits::parse(path, &text, cold_cache)
    }

    /// Parses `text`, the contents of the limits file `path`. Missing figures are `None`.
    ///
    /// Errors: [`LimitsFileError::LimitsJson`] when it is not JSON,
    /// [`LimitsFileError::LimitsSchemaVersion`] when its `schema_version` is not
    /// [`LIMITS_SCHEMA_VERSION`].
    pub fn parse(path: &Path, text: &str, cold_cache: bool) -> Result<Limits, LimitsFileError> {
        let doc: Value = serde_json::from_str(text)
            .map_err(|source| LimitsFileError::LimitsJson { path: path.to_path_buf(), source })?;
        let version = doc.get("schema_version").and_then(Value::as_f64);
        if version != Some(f64::from(LIMITS_SCHEMA_VERSION)) {
            return Err(LimitsFileError::LimitsSchemaVersion {
                path: path.to_path_buf(),
                found: version,
                expected: LIMITS_SCHEMA_VERSION,
            });
        }
        let f64_at = |v: Option<&Value>, key: &str| v.and_then(|v| v.get(key)).and_then(Value::as_f64);
        let error_at = |v: Option<&Value>| v.and_then(|v| v.get("error")).and_then(Value::as_str).map(str::to_string);
        let mut figures = Vec::new();
        let mut fio = |label, key, pointer: &str| {
            let v = doc.pointer(pointer);
            figures.push(Limit {
                label,
                key,
                bytes_per_sec: f64_at(v, "bandwidth_bytes_per_sec"),
                cpu_seconds_per_gb: f64_at(v, "cpu_seconds_per_gb"),
                error: error_at(v),
            });
        };
        fio("fio psync", "fio_psync", "/fio_page_cache/psync");
        fio("fio mmap", "fio_mmap", "/fio_page_cache/mmap");
        fio("fio splice", "fio_splice", "/fio_page_cache/splice");
        fio("fio uring", "fio_io_uring", "/fio_page_cache/io_uring");
        if cold_cache {
            fio("fio direct", "fio_direct", "/fio_direct");
        }
        for (label, key, run) in
            [("iperf3", "iperf3_loopback", "copy"), ("iperf3 -Z", "iperf3_loopback_sendfile", "sendfile")]
        {
            let v = doc.get("iperf3_loopback").and_then(|v| v.get(run));
            let bytes_per_sec = f64_at(v, "bytes_per_sec");
            // % of one CPU on the sending host over the run -> CPU seconds per GB sent.
            let cpu = f64_at(v, "cpu_host_total_percent");
            figures.push(Limit {
                label,
                key,
                bytes_per_sec,
                cpu_seconds_per_gb: match (cpu, bytes_per_sec) {
                    (Some(c), Some(b)) if b > 0.0 => Some(c / 100.0 / (b / 1e9)),
                    _ => None,
                },
                error: error_at(v),
            });
        }
        Ok(Limits { path: path.to_path_buf(), doc, figures })
    }

    /// One line naming the file and where it was measured: `FILE (DATE, kernel K, nproc N,
    /// FIO_VERSION)`, `?` for what the file lacks.
    pub fn describe(&self) -> String {
        let s = |pointer: &str| match self.doc.pointer(pointer) {
            None => "?".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        format!(
            "{} ({}, kernel {}, nproc {}, {})",
            self.path.display(),
            s("/date"),
            s("/machine/kernel"),
            s("/machine/nproc"),
            s("/machine/fio_version")
        )
    }
}

/// Why a limits file (or the script's output) is not usable. Each names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsFileError {
    /// Reading the file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The limits file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The limits file is not JSON.
    #[error("parsing {} as JSON: {source}", path.display())]
    LimitsJson {
        /// The limits file.
        path: PathBuf,
        /// Where and why parsing failed.
        #[source]
        source: serde_json::Error,
    },
    /// The limits file has another (or no) `schema_version` than [`LIMITS_SCHEMA_VERSION`].
    #[error(
        "{}: schema_version {found:?}, expected {expected} (the output of scripts/baseline-limits.sh)",
        path.display()
    )]
    LimitsSchemaVersion {
        /// The limits file.
        path: PathBuf,
        /// The version found (`None` when missing or not a number).
        found: Option<f64>,
        /// [`LIMITS_SCHEMA_VERSION`].
        expected: u32,
    },
}

/// Reads a limits file (the output of `scripts/baseline-limits.sh`) with [`Limits::load`],
/// fio direct included. `source` is `path` as given.
///
/// Errors: [`LimitsError::Limits`] when it cannot be read, is not JSON or its
/// `schema_version` is not [`LIMITS_SCHEMA_VERSION`].
pub(crate) fn load(path: &Path) -> Result<LimitsResult, LimitsError> {
    let limits = Limits::load(path, true)?;
    Ok(result(&limits, path.display().to_string()))
}

/// Runs `script` (`scripts/baseline-limits.sh`) in its short configuration (`LIMITS_SIZE` =
/// [`SHORT_SIZE`], `LIMITS_RUNTIME` = [`SHORT_RUNTIME`]: about 10 s; the file goes to
/// `LIMITS_DIR`, default `/var/tmp`) and parses the JSON it prints. `source` is
/// [`MEASURED_SOURCE`]. The script's progress (stderr) is kept for errors only.
///
/// Errors: [`LimitsError::NotInstalled`] when fio or iperf3 is not on `PATH` (checked before
/// anything runs: nothing is installed); [`LimitsError::Spawn`] when bash cannot start;
/// [`LimitsError::Failed`] when the script exits non-zero (e.g. missing, no python3) or runs
/// longer than [`MEASURE_TIMEOUT`]; [`LimitsError::Limits`] when its output does not parse.
pub(crate) fn measure(script: &Path) -> Result<LimitsResult, LimitsError> {
    measure_with(script, &std::env::var_os("PATH").unwrap_or_default(), MEASURE_TIMEOUT)
}

/// The progress line `fetchbench run` shows while [`measure`] runs.
pub(crate) const MEASURING: &str = "measuring this machine's limits (fio, iperf3; about 10 s)";

/// Whether `fetchbench run` (no `--limits FILE`) measures the limits: `Ok(`[`MEASURING`]`)`,
/// the line to announce before [`measure`], when fio and iperf3 ([`TOOLS`]) are executable
/// files on `path_var` (a `PATH` value); else [`LimitsError::NotInstalled`], whose
/// [`LimitsError::note`] (recorded once in the results' notes) says how to get them, and
/// nothing is announced or run.
pub(crate) fn announcement(path_var: &OsStr) -> Result<&'static str, LimitsError> {
    let missing: Vec<&'static str> = TOOLS.into_iter().filter(|t| find_program(t, path_var).is_none()).collect();
    if !missing.is_empty() {
        return Err(LimitsError::NotInstalled { missing });
    }
    Ok(MEASURING)
}

/// [`measure`] with the tools, bash and the script's programs looked up in `path_var`.
fn measure_with(script: &Path, path_var: &OsStr, timeout: Duration) -> Result<LimitsResult, LimitsError> {
    announcement(path_var)?;
    let spawn_error = |source| LimitsError::Spawn { script: script.to_path_buf(), source };
    let bash = find_program("bash", path_var)
        .ok_or_else(|| spawn_error(io::Error::new(io::ErrorKind::NotFound, "bash is not on PATH")))?;
    let mut child = Command::new(bash)
        .arg(script)
        .env("PATH", path_var)
        .env("LIMITS_SIZE", SHORT_SIZE)
        .env("LIMITS_RUNTIME", SHORT_RUNTIME)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    // Each pipe is read into a shared buffer by its own thread: after a timeout a process the
    // script left behind may hold the pipes open, so the threads are joined only after a normal exit.
    let reader = |mut pipe: Box<dyn Read + Send>| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&buf);
        let thread = std::thread::spawn(move || -> io::Result<()> {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => return Ok(()),
                    Ok(n) => shared.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        });
        (buf, thread)
    };
    let (stdout, stdout_thread) = reader(Box::new(child.stdout.take().expect("stdout is piped")));
    let (stderr, stderr_thread) = reader(Box::new(child.stderr.take().expect("stderr is piped")));
    let take = |buf: &Mutex<Vec<u8>>| std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner()));
    let status = match wait_with_timeout(&mut child, timeout).map_err(spawn_error)? {
        Some(s) => {
            stdout_thread.join().expect("reader thread").map_err(spawn_error)?;
            stderr_thread.join().expect("reader thread").map_err(spawn_error)?;
            if s.success() {
                let text = String::from_utf8_lossy(&take(&stdout)).into_owned();
                let limits = Limits::parse(script, &text, true)?;
                return Ok(result(&limits, MEASURED_SOURCE.to_string()));
            }
            s.to_string()
        }
        None => format!("timed out after {} s", timeout.as_secs()),
    };
    let stderr = take(&stderr);
    let stderr = String::from_utf8_lossy(&stderr);
    let tail = stderr.trim_end();
    let mut start = tail.len().saturating_sub(500);
    while !tail.is_char_boundary(start) {
        start += 1;
    }
    Err(LimitsError::Failed { script: script.to_path_buf(), status, stderr: tail[start..].replace('\n', " | ") })
}

/// Waits for `child`; after `timeout` sends SIGTERM (the script's trap cleans up its temp dir
/// and iperf3 server), then SIGKILL 5 s later. `None` when it had to be stopped.
fn wait_with_timeout(child: &mut std::process::Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= timeout {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let stopped = Instant::now();
    while stopped.elapsed() < Duration::from_secs(5) {
        if child.try_wait()?.is_some() {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill()?;
    child.wait()?;
    Ok(None)
}

/// The first executable file `name` in the directories of `path_var` (a `PATH` value).
fn find_program(name: &str, path_var: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// The figures of `limits` with a throughput or a CPU cost, as results figures. A value that is
/// not a finite non-negative number (the results schema allows no other) becomes `None`. A
/// figure whose tool failed is logged (`tracing` warning with the tool's error).
pub(crate) fn result(limits: &Limits, source: String) -> LimitsResult {
    for f in limits.figures.iter().filter(|f| f.error.is_some()) {
        tracing::warn!("machine limits: {}: {}", f.label, f.error.as_deref().unwrap_or_default());
    }
    let clean = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
    let figures = limits
        .figures
        .iter()
        .map(|f| LimitFigure {
            key: f.key.to_string(),
            label: f.label.to_string(),
            bytes_per_sec: clean(f.bytes_per_sec),
            cpu_seconds_per_gb: clean(f.cpu_seconds_per_gb),
        })
        .filter(|f| f.bytes_per_sec.is_some() || f.cpu_seconds_per_gb.is_some())
        .collect();
    LimitsResult { source: Some(source), figures }
}

/// A path's throughput (`mb_per_sec`, MB = 1e6 bytes per second) as a ratio to each figure of
/// `limits` with a positive throughput: `mb_per_sec * 1e6 / bytes_per_sec`, in figure order
/// (1.0 = as fast as the limit). Figures without a throughput (CPU only) get no ratio.
pub(crate) fn ratios(limits: &LimitsResult, mb_per_sec: f64) -> Vec<LimitRatio> {
    limits
        .figures
        .iter()
        .filter_map(|f| {
            let b = f.bytes_per_sec.filter(|b| *b > 0.0)?;
            let ratio = mb_per_sec * 1e6 / b;
            ratio.is_finite().then(|| LimitRatio { key: f.key.clone(), ratio })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::ffi::OsString;

    use super::*;

    /// A limits document with every kind of figure: fio throughputs with and without CPU, an
    /// error, an empty job, fio direct, iperf3 copy only.
    pub(crate) const LIMITS: &str = r#"{
        "schema_version": 1,
        "date": "2025-01-02T03:04:05+00:00",
        "machine": {"nproc": 8, "kernel": "6.1.0-test", "arch": "x86_64", "fio_version": "fio-3.36"},
        "fio_page_cache": {
            "psync": {"bandwidth_bytes_per_sec": 5e9, "cpu_seconds_per_gb": 0.2},
            "mmap": {"bandwidth_bytes_per_sec": 4000000000},
            "splice": {"error": "no splice"},
            "io_uring": {}
        },
        "fio_direct": {"bandwidth_bytes_per_sec": 1e9, "cpu_seconds_per_gb": 0.01},
        "iperf3_loopback": {"copy": {"bytes_per_sec": 2e9, "cpu_host_total_percent": 50.0}}
    }"#;

    #[test]
    fn limits_reads_figures_and_checks_the_version() {
        let l = Limits::parse(Path::new("l.json"), LIMITS, true).unwrap();
        let keys: Vec<_> = l.figures.iter().map(|f| f.key).collect();
        assert_eq!(
            keys,
            [
                "fio_psync",
                "fio_mmap",
                "fio_splice",
                "fio_io_uring",
                "fio_direct",
                "iperf3_loopback",
                "iperf3_loopback_sendfile"
            ]
        );
        assert_eq!(l.figures[0].bytes_per_sec, Some(5e9));
        assert_eq!(l.figures[0].cpu_seconds_per_gb, Some(0.2));
        assert_eq!(l.figures[1].bytes_per_sec, Some(4e9));
        assert_eq!(l.figures[2].error.as_deref(), Some("no splice"));
        assert_eq!(
            l.figures[3],
            Limit {
                label: "fio uring",
                key: "fio_io_uring",
                bytes_per_sec: None,
                cpu_seconds_per_gb: None,
                error: None
            }
        );
        // 50% of one CPU at 2 GB/s -> 0.25 CPU s/GB.
        assert_eq!(l.figures[5].cpu_seconds_per_gb, Some(0.25));
        assert_eq!(l.figures[6].bytes_per_sec, None);
        assert_eq!(l.figures[0].ratio(2.5), Some(0.5));
        assert_eq!(l.figures[3].ratio(2.5), None);
        assert_eq!(l.describe(), "l.json (2025-01-02T03:04:05+00:00, kernel 6.1.0-test, nproc 8, fio-3.36)");
        assert_eq!(Limits::parse(Path::new("l.json"), LIMITS, false).unwrap().figures.len(), 6);

        let e = Limits::parse(Path::new("l.json"), r#"{"schema_version": 2}"#, false).unwrap_err();
        assert!(matches!(e, LimitsFileError::LimitsSchemaVersion { found: Some(2.0), expected: 1, .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "l.json: schema_version Some(2.0), expected 1 (the output of scripts/baseline-limits.sh)"
        );
        let e = Limits::parse(Path::new("l.json"), "{\"a\": }", false).unwrap_err();
        assert!(matches!(e, LimitsFileError::LimitsJson { .. }), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let e = Limits::load(Path::new("/nonexistent/l.json"), false).unwrap_err();
        assert!(e.to_string().starts_with("reading /nonexistent/l.json: "), "{e}");
    }

    /// `PATH` made of `dirs`.
    fn path_of(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).unwrap()
    }

    /// A minimal document in the shape `scripts/baseline-limits.sh` prints: mmap has only a
    /// throughput, splice failed, io_uring is empty, the sendfile iperf3 run failed.
    const DOC: &str = r#"{
        "schema": "fetchbench-limits",
        "schema_version": 1,
        "date": "2026-11-30T09:00:00+00:00",
        "machine": {"nproc": 2, "kernel": "6.1.0-test", "arch": "x86_64", "fio_version": "fio-3.33"},
        "config": {"file_size_bytes": 268435456, "block_size": "1M", "runtime_seconds": 1.0},
        "fio_page_cache": {
            "psync": {"bandwidth_bytes_per_sec": 4000000000, "cpu_usr_percent": 10.0, "cpu_sys_percent": 90.0,
                      "cpu_seconds_per_gb": 0.25},
            "mmap": {"bandwidth_bytes_per_sec": 5e9},
            "splice": {"error": "fio job error 22"},
            "io_uring": {}
        },
        "fio_direct": {"bandwidth_bytes_per_sec": 500000000, "cpu_seconds_per_gb": 0.04},
        "iperf3_loopback": {
            "copy": {"bits_per_sec": 16e9, "bytes_per_sec": 2e9, "cpu_host_total_percent": 80.0},
            "sendfile": {"error": "unable to connect to server"}
        }
    }"#;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn executable(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = write(dir, name, text);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn loads_a_limits_file_and_skips_missing_figures() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "limits.json", DOC);
        let l = load(&path).unwrap();
        assert_eq!(l.source.as_deref(), Some(path.to_str().unwrap()));
        let keys: Vec<&str> = l.figures.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["fio_psync", "fio_mmap", "fio_direct", "iperf3_loopback"]);
        assert_eq!(
            l.figures[0],
            LimitFigure {
                key: "fio_psync".into(),
                label: "fio psync".into(),
                bytes_per_sec: Some(4e9),
                cpu_seconds_per_gb: Some(0.25)
            }
        );
        assert_eq!((l.figures[1].bytes_per_sec, l.figures[1].cpu_seconds_per_gb), (Some(5e9), None));
        assert_eq!(l.figures[2].bytes_per_sec, Some(5e8));
        // 80% of one CPU at 2e9 bytes/s -> 0.4 CPU s/GB.
        let iperf = &l.figures[3];
        assert_eq!((iperf.label.as_str(), iperf.bytes_per_sec), ("iperf3", Some(2e9)));
        assert!((iperf.cpu_seconds_per_gb.unwrap() - 0.4).abs() < 1e-12, "{iperf:?}");
    }

    #[test]
    fn ratios_divide_the_throughput_by_each_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = load(&write(dir.path(), "limits.json", DOC)).unwrap();
        // A CPU-only figure and a zero throughput get no ratio.
        l.figures.push(LimitFigure {
            key: "cpu_only".into(),
            label: "cpu".into(),
            bytes_per_sec: None,
            cpu_seconds_per_gb: Some(1.0),
        });
        l.figures.push(LimitFigure {
            key: "zero".into(),
            label: "zero".into(),
            bytes_per_sec: Some(0.0),
            cpu_seconds_per_gb: None,
        });
        let r = ratios(&l, 1000.0);
        let got: Vec<(&str, f64)> = r.iter().map(|r| (r.key.as_str(), r.ratio)).collect();
        assert_eq!(got, [("fio_psync", 0.25), ("fio_mmap", 0.2), ("fio_direct", 2.0), ("iperf3_loopback", 0.5)]);
        assert!(ratios(&LimitsResult { source: None, figures: vec![] }, 1000.0).is_empty());
        assert_eq!(ratios(&l, 0.0)[0].ratio, 0.0);
    }

    #[test]
    fn a_bad_limits_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = write(dir.path(), "v2.json", &DOC.replace("\"schema_version\": 1", "\"schema_version\": 2"));
        let e = load(&v2).unwrap_err();
        assert!(
            matches!(e, LimitsError::Limits(LimitsFileError::LimitsSchemaVersion { found: Some(2.0), .. })),
            "{e:?}"
        );
        assert!(e.to_string().contains("v2.json: schema_version Some(2.0), expected 1"), "{e}");
        let e = load(&write(dir.path(), "bad.json", "{\"schema_version\": ")).unwrap_err();
        assert!(matches!(e, LimitsError::Limits(LimitsFileError::LimitsJson { .. })), "{e:?}");
        let e = load(&dir.path().join("absent.json")).unwrap_err();
        assert!(e.to_string().starts_with("reading ") && e.to_string().contains("absent.json"), "{e}");
    }

    #[test]
    fn measure_refuses_without_the_tools() {
        let dir = tempfile::tempdir().unwrap();
        let e = measure_with(Path::new("scripts/baseline-limits.sh"), &path_of(&[dir.path()]), MEASURE_TIMEOUT)
            .unwrap_err();
        assert!(matches!(&e, LimitsError::NotInstalled { missing } if missing == &["fio", "iperf3"]), "{e:?}");
        assert_eq!(
            e.note(),
            "machine limits: not measured: install fio and iperf3 (scripts/baseline-limits.sh installs them as \
             root) or pass --limits FILE"
        );
        // A file that is not executable is not a tool.
        write(dir.path(), "iperf3", "");
        executable(dir.path(), "fio", "");
        let e = measure_with(Path::new("scripts/baseline-limits.sh"), &path_of(&[dir.path()]), MEASURE_TIMEOUT)
            .unwrap_err();
        assert!(matches!(&e, LimitsError::NotInstalled { missing } if missing == &["iperf3"]), "{e:?}");
        assert!(e.to_string().starts_with("install iperf3 (scripts/"), "{e}");
    }

    /// `run` announces measuring only when both tools are installed; otherwise it records the
    /// note saying how to get them.
    #[test]
    fn the_measuring_is_announced_only_with_both_tools() {
        let dir = tempfile::tempdir().unwrap();
        let e = announcement(&path_of(&[dir.path()])).unwrap_err();
        assert!(e.note().contains("install fio and iperf3"), "{}", e.note());
        executable(dir.path(), "fio", "");
        let e = announcement(&path_of(&[dir.path()])).unwrap_err();
        assert_eq!(e.note(), "machine limits: not measured: install iperf3 (scripts/baseline-limits.sh installs them as root) or pass --limits FILE");
        let other = tempfile::tempdir().unwrap();
        executable(other.path(), "iperf3", "");
        assert_eq!(announcement(&path_of(&[dir.path(), other.path()])).unwrap(), MEASURING);
        assert!(MEASURING.starts_with("measuring this machine's limits"));
    }

    /// A stand-in script on a PATH of stand-in tools: the environment it gets, its output parsed.
    #[test]
    fn measure_runs_the_script_short_and_parses_its_output() {
        let Some(bash) = find_program("bash", &std::env::var_os("PATH").unwrap_or_default()) else {
            panic!("bash is not on PATH");
        };
        let bin = tempfile::tempdir().unwrap();
        executable(bin.path(), "fio", "");
        executable(bin.path(), "iperf3", "");
        std::os::unix::fs::symlink(&bash, bin.path().join("bash")).unwrap();
        let path = path_of(&[bin.path()]);
        // With bash builtins only (PATH holds nothing else), the script checks LIMITS_SIZE and
        // prints the document with LIMITS_RUNTIME in the psync throughput: 1e9 for "1".
        let doc = write(bin.path(), "doc.json", DOC);
        let script = bin.path().join("limits.sh");
        let text = format!(
            "echo 'baseline-limits: progress' >&2\n\
             [ \"$LIMITS_SIZE\" = 256M ] || {{ echo \"LIMITS_SIZE=$LIMITS_SIZE\" >&2; exit 9; }}\n\
             doc=$(<'{}')\n\
             printf '%s\\n' \"${{doc//4000000000/${{LIMITS_RUNTIME}}000000000}}\"\n",
            doc.display()
        );
        std::fs::write(&script, text).unwrap();
        let l = measure_with(&script, &path, MEASURE_TIMEOUT).unwrap();
        assert_eq!(l.source.as_deref(), Some(MEASURED_SOURCE));
        assert_eq!(l.figures[0].bytes_per_sec, Some(1e9), "{l:?}");
        let limits = Limits::parse(&script, &DOC.replace("4000000000", "1000000000"), true).unwrap();
        assert_eq!(l, result(&limits, MEASURED_SOURCE.into()));
        assert_eq!(l.figures.len(), 4);

        // A failing script: its status and the end of its stderr.
        std::fs::write(&script, "echo 'baseline-limits: python3 is needed' >&2\nexit 3\n").unwrap();
        let e = measure_with(&script, &path, MEASURE_TIMEOUT).unwrap_err();
        assert!(matches!(e, LimitsError::Failed { .. }), "{e:?}");
        assert!(e.to_string().contains("exit status: 3") && e.to_string().contains("python3 is needed"), "{e}");
        // Output that is not the limits document.
        std::fs::write(&script, "echo '{\"schema_version\": 7}'\n").unwrap();
        let e = measure_with(&script, &path, MEASURE_TIMEOUT).unwrap_err();
        assert!(matches!(e, LimitsError::Limits(LimitsFileError::LimitsSchemaVersion { .. })), "{e:?}");
        // A script that hangs is stopped.
        std::fs::write(&script, "echo 'baseline-limits: started' >&2\nwhile :; do :; done\n").unwrap();
        let e = measure_with(&script, &path, Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("(timed out after 0 s): baseline-limits: started"), "{e}");
    }

    /// The real script, short configuration (needs fio and iperf3; about 10 s):
    /// `cargo test --lib bench::limits -- --ignored --nocapture`.
    #[test]
    #[ignore = "runs fio and iperf3 for about 10 s"]
    fn measure_this_machine() {
        // Shows the tools' errors (figures left out).
        let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).try_init();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/baseline-limits.sh");
        let start = Instant::now();
        let l = measure(&script).unwrap();
        eprintln!("took {:.1} s", start.elapsed().as_secs_f64());
        for f in &l.figures {
            eprintln!("{:<26} {:>14?} bytes/s {:>10?} CPU s/GB", f.key, f.bytes_per_sec, f.cpu_seconds_per_gb);
        }
        assert!(l.figures.iter().any(|f| f.bytes_per_sec.is_some_and(|b| b > 0.0)), "{l:?}");
    }
}
