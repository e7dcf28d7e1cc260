//! `fetchbench compare BASE.json NEW.json [--threshold 10%]`: two results files side by side.
//!
//! [`compare`] matches the entries of both files by (read path, phase) and puts every metric
//! of [`METRICS`] side by side with the ratio new / base. A metric is a *regression* when it
//! moved the wrong way by more than the threshold: a throughput below `base * (1 - t)`, a cost
//! or latency above `base * (1 + t)`. A metric whose base is 0 has no ratio and is never
//! flagged (0 -> 5 major faults per GB is shown, not gated). An entry of the base missing from
//! the new file is a regression too: a path that stopped running is not faster.
//!
//! The report also gives *within-run* ratios: each path relative to `copy` in the same file
//! and phase, the figures that hold on noisy machines (see DESIGN.md, Measuring).
//!
//! Exit codes of the command: 0 no regression, 1 a regression, 2 bad input (a file that is
//! missing, not JSON or not a valid results document, or a bad threshold).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::results::{PathResult, Results, ValidationError};

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
    /// The value in an entry; `None` when the entry has none (no rebalance measured).
    pub get: fn(&PathResult) -> Option<f64>,
}

/// The compared metrics, in table order.
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
    Metric { name: "broker_rss_bytes", better: Better::Lower, get: |p| Some(p.broker_rss_bytes as f64) },
    Metric { name: "fetch_p50_us", better: Better::Lower, get: |p| Some(p.fetch_latency.summary.p50_us) },
    Metric { name: "fetch_p99_us", better: Better::Lower, get: |p| Some(p.fetch_latency.summary.p99_us) },
    Metric { name: "fetch_p999_us", better: Better::Lower, get: |p| Some(p.fetch_latency.summary.p999_us) },
    Metric {
        name: "e2e_corrected_p50_us",
        better: Better::Lower,
        get: |p| Some(p.end_to_end_latency.corrected.summary.p50_us),
    },
    Metric {
        name: "e2e_corrected_p99_us",
        better: Better::Lower,
        get: |p| Some(p.end_to_end_latency.corrected.summary.p99_us),
    },
    Metric {
        name: "e2e_corrected_p999_us",
        better: Better::Lower,
        get: |p| Some(p.end_to_end_latency.corrected.summary.p999_us),
    },
    Metric { name: "rebalance_ms", better: Better::Lower, get: |p| p.rebalance_ms },
];

/// Metrics shown in the within-run table (each path / `copy`).
const WITHIN_RUN: [&str; 3] = ["mb_per_sec", "broker_cpu_s_per_gb", "e2e_corrected_p99_us"];

/// One metric of one entry, base beside new.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Read path.
    pub read_path: String,
    /// Phase.
    pub phase: String,
    /// [`Metric::name`].
    pub metric: &'static str,
    /// Base value.
    pub base: Option<f64>,
    /// New value.
    pub new: Option<f64>,
    /// `new / base`, when both exist and base > 0.
    pub ratio: Option<f64>,
    /// Moved the wrong way beyond the threshold.
    pub regression: bool,
}

/// One path relative to `copy` in the same file and phase.
#[derive(Clone, Debug, PartialEq)]
pub struct WithinRun {
    /// `base` or `new`.
    pub file: &'static str,
    /// Read path.
    pub read_path: String,
    /// Phase.
    pub phase: String,
    /// `(metric, path / copy)` for the within-run metrics that exist in both.
    pub ratios: Vec<(&'static str, f64)>,
}

/// What [`compare`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The threshold as a fraction (0.10 = 10%).
    pub threshold: f64,
    /// Every metric of every entry found in both files.
    pub rows: Vec<Row>,
    /// Entries `read_path/phase` of the base missing from the new file (regressions).
    pub missing: Vec<String>,
    /// Entries only in the new file (not compared).
    pub added: Vec<String>,
    /// Within-run ratios of both files.
    pub within_run: Vec<WithinRun>,
    /// Differences of context that make absolute figures incomparable (machine, workload).
    pub notes: Vec<String>,
}

impl Report {
    /// Whether any metric regressed or any entry is missing.
    pub fn has_regressions(&self) -> bool {
        !self.missing.is_empty() || self.rows.iter().any(|r| r.regression)
    }

    /// The regressed rows.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.regression)
    }

    /// The side-by-side table, the within-run ratios and a verdict line.
    pub fn table(&self) -> String {
        let mut s = String::new();
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
        let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let _ = writeln!(s, "{:<24} {:<27} {:>14} {:>14} {:>8}", "path/phase", "metric", "base", "new", "new/base");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<24} {:<27} {:>14} {:>14} {:>8}{}",
                format!("{}/{}", r.read_path, r.phase),
                r.metric,
                num(r.base),
                num(r.new),
                r.ratio.map_or("-".to_string(), |x| format!("{x:.3}")),
                if r.regression { "  REGRESSION" } else { "" }
            );
        }
        for m in &self.missing {
            let _ = writeln!(s, "{m:<24} missing from the new results  REGRESSION");
        }
        for a in &self.added {
            let _ = writeln!(s, "{a:<24} only in the new results (not compared)");
        }
        if !self.within_run.is_empty() {
            let _ = writeln!(s, "\nwithin-run ratios (path / copy, same file and phase):");
            for w in &self.within_run {
                let ratios: Vec<String> = w.ratios.iter().map(|(m, x)| format!("{m} {x:.3}")).collect();
                let _ =
                    writeln!(s, "  {:<4} {:<24} {}", w.file, format!("{}/{}", w.read_path, w.phase), ratios.join("  "));
            }
        }
        let n = self.regressions().count() + self.missing.len();
        let pct = self.threshold * 100.0;
        if n == 0 {
            let _ = writeln!(s, "\nno regression beyond {pct:.1}%");
        } else {
            let _ = writeln!(s, "\n{n} regression(s) beyond {pct:.1}%");
        }
        s
    }
}

/// Compares `new` against `base` with `threshold` as a fraction (0.10 = 10%), gating every
/// metric; see the [module docs](self).
pub fn compare(base: &Results, new: &Results, threshold: f64) -> Report {
    compare_gated(base, new, threshold, None)
}

/// As [`compare`], but only the metrics named in `gated` (names of [`METRICS`]) can be
/// regressions; the others are still shown side by side. `None` gates every metric.
pub fn compare_gated(base: &Results, new: &Results, threshold: f64, gated: Option<&[String]>) -> Report {
    let key = |p: &PathResult| format!("{}/{}", p.read_path, p.phase);
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for b in &base.paths {
        let Some(n) = new.paths.iter().find(|n| key(n) == key(b)) else {
            missing.push(key(b));
            continue;
        };
        for m in METRICS {
            let (bv, nv) = ((m.get)(b), (m.get)(n));
            let ratio = match (bv, nv) {
                (Some(bv), Some(nv)) if bv > 0.0 => Some(nv / bv),
                _ => None,
            };
            let is_gated = gated.is_none_or(|g| g.iter().any(|x| x == m.name));
            let regression = is_gated
                && ratio.is_some_and(|r| match m.better {
                    Better::Higher => r < 1.0 - threshold,
                    Better::Lower => r > 1.0 + threshold,
                });
            rows.push(Row {
                read_path: b.read_path.clone(),
                phase: b.phase.clone(),
                metric: m.name,
                base: bv,
                new: nv,
                ratio,
                regression,
            });
        }
    }
    let added = new.paths.iter().map(key).filter(|k| !base.paths.iter().any(|b| key(b) == *k)).collect();
    let mut within_run = within(base, "base");
    within_run.extend(within(new, "new"));
    let mut notes = Vec::new();
    if base.machine != new.machine {
        notes.push(format!(
            "the machines differ (base {} {} nproc {}, new {} {} nproc {}): compare within-run ratios",
            base.machine.kernel,
            base.machine.arch,
            base.machine.nproc,
            new.machine.kernel,
            new.machine.arch,
            new.machine.nproc
        ));
    }
    if base.workload != new.workload {
        notes.push("the workloads differ: absolute figures are not comparable".into());
    }
    if new.git.dirty {
        notes.push("the new results come from a working tree with uncommitted changes".into());
    }
    Report { threshold, rows, missing, added, within_run, notes }
}

fn within(r: &Results, file: &'static str) -> Vec<WithinRun> {
    let mut out = Vec::new();
    for p in r.paths.iter().filter(|p| p.read_path != "copy") {
        let Some(copy) = r.paths.iter().find(|c| c.read_path == "copy" && c.phase == p.phase) else { continue };
        let ratios = METRICS
            .iter()
            .filter(|m| WITHIN_RUN.contains(&m.name))
            .filter_map(|m| match ((m.get)(p), (m.get)(copy)) {
                (Some(x), Some(c)) if c > 0.0 => Some((m.name, x / c)),
                _ => None,
            })
            .collect();
        out.push(WithinRun { file, read_path: p.read_path.clone(), phase: p.phase.clone(), ratios });
    }
    out
}

/// Parses a threshold: `10%`, `2.5%`, or a plain number of percent (`10`). Must be from 0 to
/// 100%.
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let pct: f64 = t
        .strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse()
        .map_err(|_| format!("--threshold: expected a percentage like 10% or 2.5%, found {s:?}"))?;
    if !(0.0..=100.0).contains(&pct) {
        return Err(format!("--threshold: expected from 0% to 100%, found {s:?}"));
    }
    Ok(pct / 100.0)
}

/// Errors of loading a results file for `compare`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Reading the file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON or not a valid results document.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        #[source]
        source: ValidationError,
    },
}

/// Reads and validates a results file.
pub fn load(path: &Path) -> Result<Results, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    Results::from_json(&text).map_err(|source| LoadError::Invalid { path: path.to_path_buf(), source })
}

/// Arguments of `fetchbench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The reference results file (e.g. the committed baseline).
    pub base: PathBuf,
    /// The results file to judge.
    pub new: PathBuf,
    /// How far a metric may move the wrong way before it is a regression: `10%`, `2.5%`.
    #[arg(long, default_value = "10%")]
    pub threshold: String,
    /// Gate only these metrics (comma-separated names of the table's metric column, e.g.
    /// `mb_per_sec,broker_cpu_sys_s_per_gb`); the others are shown, never flagged. Default: all.
    #[arg(long, value_delimiter = ',')]
    pub metrics: Option<Vec<String>>,
}

/// Checks `--metrics` names against [`METRICS`]. Errors: the first unknown name, with the
/// known ones.
pub fn check_metrics(names: &[String]) -> Result<(), String> {
    match names.iter().find(|n| !METRICS.iter().any(|m| m.name == n.as_str())) {
        Some(bad) => Err(format!(
            "--metrics: unknown metric {bad:?} (known: {})",
            METRICS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
        )),
        None => Ok(()),
    }
}

/// `fetchbench compare`: prints the report; exit 0 no regression, 1 regression, 2 bad input.
pub fn main(args: CompareArgs) -> ExitCode {
    let loaded = parse_threshold(&args.threshold).and_then(|t| {
        check_metrics(args.metrics.as_deref().unwrap_or_default())?;
        Ok((t, load(&args.base).map_err(|e| e.to_string())?, load(&args.new).map_err(|e| e.to_string())?))
    });
    match loaded {
        Ok((threshold, base, new)) => {
            let report = compare_gated(&base, &new, threshold, args.metrics.as_deref());
            print!("{}", report.table());
            if report.has_regressions() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("fetchbench compare: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::results::{example, Results};
    use super::*;

    /// `base` with every throughput scaled by `factor` and every cost and latency by
    /// `1 / factor` (histograms untouched: only summaries are compared).
    fn scaled(base: &Results, factor: f64) -> Results {
        let mut r = base.clone();
        for p in &mut r.paths {
            p.mb_per_sec *= factor;
            p.records_per_sec *= factor;
            p.broker_cpu.user_s_per_gb /= factor;
            p.broker_cpu.sys_s_per_gb /= factor;
            p.end_to_end_latency.corrected.summary.p99_us /= factor;
        }
        r
    }

    #[test]
    fn only_gated_metrics_are_regressions() {
        let base = example(1.0);
        let mut new = scaled(&base, 0.8); // throughput down 20%, costs and latencies down too
        for p in &mut new.paths {
            p.broker_rss_bytes *= 2; // a cost up 100%
        }
        let gated = vec!["broker_rss_bytes".to_string()];
        let report = compare_gated(&base, &new, 0.10, Some(&gated));
        assert!(report.regressions().all(|r| r.metric == "broker_rss_bytes"));
        assert_eq!(report.regressions().count(), base.paths.len());
        // The throughput rows are still there, unflagged.
        assert!(report.rows.iter().any(|r| r.metric == "mb_per_sec" && r.ratio.is_some_and(|x| x < 0.85)));
        let throughput = vec!["mb_per_sec".to_string()];
        assert!(compare_gated(&base, &new, 0.10, Some(&throughput)).has_regressions());
        assert!(!compare_gated(&base, &new, 0.10, Some(&["fetch_p50_us".to_string()])).has_regressions());
        assert!(check_metrics(&throughput).is_ok());
        let e = check_metrics(&["speed".to_string()]).unwrap_err();
        assert!(e.contains("unknown metric \"speed\"") && e.contains("mb_per_sec"), "{e}");
    }

    #[test]
    fn flags_a_20_percent_regression_and_not_a_2_percent_change() {
        let base = example(1.0);
        let slower = scaled(&base, 0.8);
        let report = compare(&base, &slower, 0.10);
        assert!(report.has_regressions());
        let flagged: Vec<&str> = report.regressions().map(|r| r.metric).collect();
        assert!(flagged.contains(&"mb_per_sec"), "{flagged:?}");
        assert!(flagged.contains(&"broker_cpu_sys_s_per_gb"), "cost up is a regression: {flagged:?}");
        assert!(flagged.contains(&"e2e_corrected_p99_us"), "latency up is a regression: {flagged:?}");
        assert!(report.table().contains("REGRESSION"));
        let row = report.rows.iter().find(|r| r.metric == "mb_per_sec").unwrap();
        assert!((row.ratio.unwrap() - 0.8).abs() < 1e-9);

        for factor in [0.98, 1.02] {
            let report = compare(&base, &scaled(&base, factor), 0.10);
            assert!(!report.has_regressions(), "{}", report.table());
            assert!(report.table().contains("no regression beyond 10.0%"));
        }
        // Faster is never a regression, however large.
        assert!(!compare(&base, &scaled(&base, 3.0), 0.10).has_regressions());
        // A 20% change under a 25% threshold is not flagged.
        assert!(!compare(&base, &slower, 0.25).has_regressions());
    }

    #[test]
    fn a_missing_path_is_a_regression_and_zero_bases_are_not_gated() {
        let base = example(1.0);
        let mut new = base.clone();
        new.paths.retain(|p| p.read_path != "sendfile");
        new.paths[0].major_faults_per_gb = 5.0;
        let report = compare(&base, &new, 0.10);
        assert_eq!(report.missing, ["sendfile/catch_up", "sendfile/tail"]);
        assert!(report.has_regressions());
        assert_eq!(report.regressions().count(), 0, "0 -> 5 major faults has no ratio");
        let faults = report.rows.iter().find(|r| r.metric == "major_faults_per_gb").unwrap();
        assert_eq!((faults.base, faults.new, faults.ratio), (Some(0.0), Some(5.0), None));
    }

    #[test]
    fn within_run_ratios_are_relative_to_copy() {
        let base = example(1.0);
        let report = compare(&base, &base, 0.10);
        let sendfile = report
            .within_run
            .iter()
            .find(|w| w.file == "new" && w.read_path == "sendfile" && w.phase == "catch_up")
            .unwrap();
        let mb = sendfile.ratios.iter().find(|(m, _)| *m == "mb_per_sec").unwrap().1;
        assert!((mb - 1.6).abs() < 1e-9, "{mb}");
        assert!(report.within_run.iter().all(|w| w.read_path != "copy"));
        assert!(report.table().contains("within-run ratios"));
        assert!(report.notes.is_empty());
    }

    #[test]
    fn thresholds_parse() {
        assert_eq!(parse_threshold("10%").unwrap(), 0.10);
        assert_eq!(parse_threshold("2.5%").unwrap(), 0.025);
        assert_eq!(parse_threshold("10").unwrap(), 0.10);
        assert!(parse_threshold("ten").unwrap_err().contains("expected a percentage"));
        assert!(parse_threshold("-5%").unwrap_err().contains("from 0% to 100%"));
    }

    #[test]
    fn invalid_input_gets_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "this is not json").unwrap();
        let e = load(&garbage).unwrap_err().to_string();
        assert!(
            e.contains(
                "garbage.json: not a valid fetchbench-results v2 document: not JSON: expected ident at line 1 column 2"
            ),
            "{e}"
        );
        let wrong = dir.path().join("wrong.json");
        std::fs::write(&wrong, r#"{"schema": "fetchbench-read-paths", "schema_version": 2}"#).unwrap();
        let e = load(&wrong).unwrap_err().to_string();
        assert!(e.contains("/schema: expected \"fetchbench-results\", found \"fetchbench-read-paths\""), "{e}");
        assert!(e.contains("/paths: missing"), "{e}");
        let e = load(&dir.path().join("absent.json")).unwrap_err().to_string();
        assert!(e.starts_with("reading ") && e.contains("absent.json"), "{e}");
    }

    /// The committed fixtures of `tests/it/bench_compare.rs` are what this generator makes.
    #[test]
    fn results_fixtures_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
        let expected = fixtures();
        if std::env::var_os("FETCHBENCH_WRITE_FIXTURES").is_some() {
            for (name, text) in &expected {
                std::fs::write(dir.join(name), text).unwrap();
            }
        }
        for (name, text) in &expected {
            let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            let first_diff = on_disk.lines().zip(text.lines()).position(|(a, b)| a != b);
            assert!(
                on_disk == *text,
                "fixtures/results/{name} is stale (first difference at line {:?}): rerun with FETCHBENCH_WRITE_FIXTURES=1",
                first_diff.map(|i| i + 1)
            );
        }
    }

    fn fixtures() -> Vec<(&'static str, String)> {
        let base = example(1.0);
        vec![
            ("base.json", base.to_json() + "\n"),
            ("slower-20pct.json", example(0.8).to_json() + "\n"),
            ("within-2pct.json", example(0.98).to_json() + "\n"),
            ("garbage.json", "{\"schema\": \"fetchbench-results\", \"schema_version\": 1, \"paths\": [\n".into()),
        ]
    }
}
