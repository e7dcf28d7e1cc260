//! `fetchbench compare BASE.json NEW.json [--threshold 10%]`: two results files side by side.
//!
//! [`compare`] matches the entries of both files by (server model, read path, phase) — all
//! repetitions of an entry form its sample — and puts every metric of [`METRICS`] side by side: the mean of
//! each side and the ratio new / base of the means. Which test decides depends on the samples:
//!
//! - **Welch's t-test** when both sides have at least 2 samples of the metric (`fetchbench run
//!   --repeat N`, N >= 2): the metric is a *regression* when the one-sided Welch t-test
//!   (unequal variances, Welch–Satterthwaite degrees of freedom; see [`super::stats::welch`])
//!   finds the new mean worse than the base mean at significance [`ALPHA`] = 0.05 (lower for a
//!   throughput, higher for a cost or latency: H1 is "new is worse") **and** the mean moved
//!   the wrong way by more than the threshold (the threshold is the minimum effect that
//!   matters: a significant 2% change under a 10% threshold passes). The p-value is shown.
//! - **The threshold rule** otherwise (one sample on a side, e.g. a version 2 file or a run
//!   without repeats): a regression when the mean moved the wrong way by more than the
//!   threshold: a throughput below `base * (1 - t)`, a cost or latency above `base * (1 + t)`.
//!
//! A metric whose base is 0 has no ratio and is never flagged (0 -> 5 major faults per GB is
//! shown, not gated). An entry of the base missing from the new file is a regression too: a
//! path that stopped running is not faster.
//!
//! The report also gives *within-run* ratios: each combination relative to the reference
//! `copy` (`threaded`'s, see [`is_copy_reference`]) in the same file, phase and repetition,
//! the figures that hold on noisy machines (see DESIGN.md, Measuring); with repeats as the
//! mean of the per-repetition ratios and its 95% confidence interval.
//!
//! Notes above the table say what makes absolute figures incomparable, and the verdict still
//! stands: machines that differ (each differing field of the `machine` records, both values:
//! [`machines_note`]), workloads or read-paths configurations that differ, a dirty working
//! tree, an interrupted run.
//!
//! Entries are named `path/phase` (`copy/catch_up`), or `model/path/phase`
//! (`uring/uring-splice/catch_up`) when either file has an entry under a server model other
//! than `threaded` ([`models_compared`]). A file from before server models (version 2 to 4)
//! reads as `threaded` ([`Results::from_json`]), so an old baseline still matches a new run's
//! `threaded` entries.
//!
//! Both files are results documents ([`super::results`]): of `fetchbench run`, or of `fetchbench
//! read-paths` (phase `loopback`), of the current version or one [`Results::from_json`] still
//! reads. The `fetchbench-read-paths` version 1 documents `read-paths --json` wrote before the
//! results schema's version 4 are refused with what to do ([`LoadError::OldReadPaths`]).
//!
//! Exit codes of the command: 0 no regression, 1 a regression, 2 bad input (a file that is
//! missing, not JSON or not a valid results document, or a bad threshold).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::results::{
    combination_label, is_copy_reference, models_compared, Better, EntryKey, Metric, Results, ValidationError, METRICS,
    SCHEMA, SCHEMA_VERSION,
};
use super::stats::{estimate, welch, Estimate};
use super::workload::Workload;
use crate::machine::Machine;

/// The significance level of the one-sided Welch t-test (a 5% chance of flagging a metric
/// that did not get worse, per metric and entry).
pub const ALPHA: f64 = 0.05;

/// Metrics shown in the within-run table (each path / `copy`); `fetchbench report`'s ratio table
/// shows the same.
pub(crate) const WITHIN_RUN: [&str; 3] = ["mb_per_sec", "broker_cpu_s_per_gb", "e2e_corrected_p99_us"];

/// How a [`Row`] was judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Test {
    /// The one-sided Welch t-test (both sides have >= 2 samples) with its p-value, plus the
    /// threshold as the minimum effect.
    Welch {
        /// One-sided p-value of "new is worse than base".
        p: f64,
    },
    /// The threshold rule alone (a side has fewer than 2 samples).
    Threshold,
}

impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Test::Welch { p } if *p < 0.001 => write!(f, "welch t-test, p < 0.001"),
            Test::Welch { p } => write!(f, "welch t-test, p = {p:.3}"),
            Test::Threshold => f.write_str("threshold"),
        }
    }
}

/// One metric of one entry, base beside new.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Server model (`None`: an external cluster or a `read-paths` document).
    pub server_model: Option<String>,
    /// Read path.
    pub read_path: String,
    /// Phase.
    pub phase: String,
    /// [`Metric::name`].
    pub metric: &'static str,
    /// Base value: the mean over the base's repetitions.
    pub base: Option<f64>,
    /// New value: the mean over the new file's repetitions.
    pub new: Option<f64>,
    /// `new / base`, when both exist and base > 0.
    pub ratio: Option<f64>,
    /// Samples (repetitions with the metric) in the base.
    pub base_samples: usize,
    /// Samples in the new file.
    pub new_samples: usize,
    /// The test that decided (see the [module docs](self)).
    pub test: Test,
    /// A regression by that test.
    pub regression: bool,
}

/// One combination relative to the reference `copy` in the same file and phase.
#[derive(Clone, Debug, PartialEq)]
pub struct WithinRun {
    /// `base` or `new`.
    pub file: &'static str,
    /// Server model.
    pub server_model: Option<String>,
    /// Read path.
    pub read_path: String,
    /// Phase.
    pub phase: String,
    /// `(metric, path / copy)` for the within-run metrics that exist in both: the statistics
    /// over the per-repetition ratios.
    pub ratios: Vec<(&'static str, Estimate)>,
}

/// What [`compare`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The threshold as a fraction (0.10 = 10%).
    pub threshold: f64,
    /// Whether entries are named with their server model (see the [module docs](self)).
    pub qualified: bool,
    /// Every metric of every entry found in both files.
    pub rows: Vec<Row>,
    /// Entries `[model/]read_path/phase` of the base missing from the new file (regressions).
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
        let name = |m: &Option<String>, path: &str, phase: &str| {
            format!("{}/{phase}", combination_label(m.as_deref(), path, self.qualified))
        };
        let _ = writeln!(
            s,
            "{:<24} {:<27} {:>14} {:>14} {:>8} {:>5}  test",
            if self.qualified { "model/path/phase" } else { "path/phase" },
            "metric",
            "base",
            "new",
            "new/base",
            "n"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<24} {:<27} {:>14} {:>14} {:>8} {:>5}  {}{}",
                name(&r.server_model, &r.read_path, &r.phase),
                r.metric,
                num(r.base),
                num(r.new),
                r.ratio.map_or("-".to_string(), |x| format!("{x:.3}")),
                format!("{}/{}", r.base_samples, r.new_samples),
                r.test,
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
            let _ = writeln!(
                s,
                "\nwithin-run ratios (path / copy{}, same file, phase and repetition; with repeats the mean [95% CI]):",
                if self.qualified { " under threaded" } else { "" }
            );
            for w in &self.within_run {
                let ratios: Vec<String> = w
                    .ratios
                    .iter()
                    .map(|(m, e)| match e.ci95 {
                        Some((l, h)) => format!("{m} {:.3} [{l:.3}, {h:.3}]", e.mean),
                        None => format!("{m} {:.3}", e.mean),
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "  {:<4} {:<24} {}",
                    w.file,
                    name(&w.server_model, &w.read_path, &w.phase),
                    ratios.join("  ")
                );
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
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    let qualified = models_compared(base.paths.iter().chain(&new.paths));
    let name =
        |(model, read_path, phase): EntryKey<'_>| format!("{}/{phase}", combination_label(model, read_path, qualified));
    let (base_keys, new_keys) = (entry_keys(base), entry_keys(new));
    for &key in &base_keys {
        let (server_model, read_path, phase) = key;
        if !new_keys.contains(&key) {
            missing.push(name(key));
            continue;
        }
        for m in METRICS {
            let (bs, ns) = (samples(base, key, m), samples(new, key, m));
            let mean = |v: &[f64]| (!v.is_empty()).then(|| estimate(v).mean);
            let (bv, nv) = (mean(&bs), mean(&ns));
            let ratio = match (bv, nv) {
                (Some(bv), Some(nv)) if bv > 0.0 => Some(nv / bv),
                _ => None,
            };
            let is_gated = gated.is_none_or(|g| g.iter().any(|x| x == m.name));
            let beyond = ratio.is_some_and(|r| match m.better {
                Better::Higher => r < 1.0 - threshold,
                Better::Lower => r > 1.0 + threshold,
            });
            let (test, significant) = match welch(&bs, &ns) {
                Some(w) => {
                    let p = match m.better {
                        Better::Higher => w.p_lower,
                        Better::Lower => w.p_higher,
                    };
                    (Test::Welch { p }, p < ALPHA)
                }
                None => (Test::Threshold, true),
            };
            rows.push(Row {
                server_model: server_model.map(str::to_string),
                read_path: read_path.to_string(),
                phase: phase.to_string(),
                metric: m.name,
                base: bv,
                new: nv,
                ratio,
                base_samples: bs.len(),
                new_samples: ns.len(),
                test,
                regression: is_gated && beyond && significant,
            });
        }
    }
    let added = new_keys.iter().filter(|k| !base_keys.contains(k)).map(|k| name(*k)).collect();
    let mut within_run = within(base, "base");
    within_run.extend(within(new, "new"));
    let mut notes = Vec::new();
    if let Some(note) = machines_note(base, new) {
        notes.push(note);
    }
    if let Some(note) = broker_machines_note(base, new) {
        notes.push(note);
    }
    // The number of repetitions is not part of what was measured.
    let same_workload = match (base.workload(), new.workload()) {
        (Some(b), Some(n)) => b == Workload { repeat: b.repeat, ..n },
        _ => base.workload == new.workload,
    };
    let kind = |r: &Results| if r.loopback.is_some() { "fetchbench read-paths" } else { "fetchbench run" };
    match (&base.loopback, &new.loopback) {
        (Some(b), Some(n)) if !b.same_measurement(n) => notes.push(
            "the read-paths configurations differ (file, sizes or page cache): absolute figures are not comparable"
                .into(),
        ),
        (Some(_), Some(_)) => {}
        (None, None) if !same_workload => {
            notes.push("the workloads differ: absolute figures are not comparable".into())
        }
        (None, None) => {}
        _ => notes.push(format!(
            "the base is a {} document and the new one a {} document: their entries never match",
            kind(base),
            kind(new)
        )),
    }
    if new.git.dirty {
        notes.push("the new results come from a working tree with uncommitted changes".into());
    }
    for (side, r) in [("base", base), ("new", new)] {
        if r.interrupted {
            notes.push(format!(
                "the {side} run was interrupted (Ctrl-C): its entries cover part of a phase, and phases or paths \
                 it did not reach are missing"
            ));
        }
    }
    if rows.iter().any(|r| r.test == Test::Threshold) {
        notes.push(format!(
            "entries with fewer than 2 samples on a side (a run without --repeat, a version 2 file) are judged by \
             the threshold rule alone: a mean that moved the wrong way by more than {:.1}%",
            threshold * 100.0
        ));
    }
    if rows.iter().any(|r| matches!(r.test, Test::Welch { .. })) {
        notes.push(format!(
            "entries with 2 or more samples on both sides: a regression is a one-sided Welch t-test significant at \
             alpha {ALPHA} (new worse than base) and a mean that moved the wrong way by more than {:.1}%",
            threshold * 100.0
        ));
    }
    Report { threshold, qualified, rows, missing, added, within_run, notes }
}

/// The note of [`compare`] when the two files come from different machines
/// ([`crate::machine::Machine::differences`]: CPU model, CPUs, memory, kernel, architecture):
/// each field that differs with both values, e.g. `the machines differ (cpu_model:
/// base "A", new "B"; nproc: base "2", new "8"): absolute figures are not comparable across
/// them; compare the within-run ratios`. `None` for the same machine.
pub fn machines_note(base: &Results, new: &Results) -> Option<String> {
    differences_note(
        "the machines",
        &base.machine,
        &new.machine,
        "absolute figures are not comparable across them; compare the within-run ratios",
    )
}

/// The note of [`compare`] when the brokers ran on different machines
/// ([`Results::broker_machine`]: a run against a remote `fetchbench serve` with `--metrics`
/// knows the broker's), e.g. `the brokers' machines differ (nproc: base "2", new "16"): broker
/// CPU s/GB, faults and fetch latency are not comparable across them`. `None` when they are the
/// same or either is unknown.
pub fn broker_machines_note(base: &Results, new: &Results) -> Option<String> {
    differences_note(
        "the brokers' machines",
        base.broker_machine()?,
        new.broker_machine()?,
        "broker CPU s/GB, faults and fetch latency are not comparable across them",
    )
}

/// `<what> differ (<field>: base "A", new "B"; ...): <consequence>`, or `None` when `base` and
/// `new` describe the same machine.
fn differences_note(what: &str, base: &Machine, new: &Machine, consequence: &str) -> Option<String> {
    let differences = base.differences(new);
    if differences.is_empty() {
        return None;
    }
    let fields: Vec<String> = differences.iter().map(|(name, b, n)| format!("{name}: base {b:?}, new {n:?}")).collect();
    Some(format!("{what} differ ({}): {consequence}", fields.join("; ")))
}

/// The (server model, read path, phase) keys of `r`, in the order of their first entries.
fn entry_keys(r: &Results) -> Vec<EntryKey<'_>> {
    let mut keys = Vec::new();
    for p in &r.paths {
        if !keys.contains(&p.key()) {
            keys.push(p.key());
        }
    }
    keys
}

/// The values of metric `m` over the repetitions of the entry `key` in `r`.
fn samples(r: &Results, key: EntryKey<'_>, m: &Metric) -> Vec<f64> {
    r.paths.iter().filter(|p| p.key() == key).filter_map(|p| (m.get)(p)).collect()
}

/// Each combination relative to the reference `copy` ([`is_copy_reference`]) per repetition
/// (same phase), for the [`WITHIN_RUN`] metrics; phases without the reference are left out.
fn within(r: &Results, file: &'static str) -> Vec<WithinRun> {
    let mut out = Vec::new();
    for key in entry_keys(r) {
        let (server_model, read_path, phase) = key;
        let reference = r.paths.iter().find(|p| p.key() == key).is_some_and(is_copy_reference);
        if reference || !r.paths.iter().any(|c| is_copy_reference(c) && c.phase == phase) {
            continue;
        }
        let ratios = METRICS
            .iter()
            .filter(|m| WITHIN_RUN.contains(&m.name))
            .filter_map(|m| {
                let values: Vec<f64> = r
                    .paths
                    .iter()
                    .filter(|p| p.key() == key)
                    .filter_map(|p| {
                        let copy = r
                            .paths
                            .iter()
                            .find(|c| is_copy_reference(c) && c.phase == phase && c.repetition == p.repetition)?;
                        match ((m.get)(p), (m.get)(copy)) {
                            (Some(x), Some(c)) if c > 0.0 => Some(x / c),
                            _ => None,
                        }
                    })
                    .collect();
                (!values.is_empty()).then(|| (m.name, estimate(&values)))
            })
            .collect();
        out.push(WithinRun {
            file,
            server_model: server_model.map(str::to_string),
            read_path: read_path.to_string(),
            phase: phase.to_string(),
            ratios,
        });
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
    /// The file is a `fetchbench-read-paths` version 1 document: what `fetchbench read-paths
    /// --json` wrote before it wrote results documents (results schema version 4).
    #[error(
        "{}: a {OLD_READ_PATHS_SCHEMA} v1 document (the output of `fetchbench read-paths --json` before \
         {SCHEMA} v{SCHEMA_VERSION}) is no longer read: re-run `fetchbench read-paths --json` (same options) \
         for a {SCHEMA} document to compare",
        path.display()
    )]
    OldReadPaths {
        /// The file.
        path: PathBuf,
    },
}

/// The `schema` of the documents `fetchbench read-paths --json` wrote before results schema
/// version 4 (its own version 1; see [`LoadError::OldReadPaths`]).
pub const OLD_READ_PATHS_SCHEMA: &str = "fetchbench-read-paths";

/// Reads and validates a results file. Errors: [`LoadError::Io`], [`LoadError::OldReadPaths`]
/// for an old `read-paths` document, [`LoadError::Invalid`] with every problem otherwise.
pub fn load(path: &Path) -> Result<Results, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    let old_read_paths = serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|doc| {
        doc.get("schema").and_then(serde_json::Value::as_str) == Some(OLD_READ_PATHS_SCHEMA)
            && doc.get("schema_version").and_then(serde_json::Value::as_u64) == Some(1)
    });
    if old_read_paths {
        return Err(LoadError::OldReadPaths { path: path.to_path_buf() });
    }
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
    /// `mb_per_sec,broker_cpu_sys_s_per_gb`); the others are shown, never flagged. Default: all
    /// (about 18 tests per entry at alpha 0.05 each: expect an occasional false flag; gate the
    /// figures that matter, as `scripts/ci-gate.sh` does with `mb_per_sec,broker_cpu_s_per_gb`).
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
    use super::super::results::{example, example_read_paths, example_repeated, Results};
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

    /// Issue 29, item 6: the counts per GB gate like any figure: system calls up 25% is
    /// flagged when gated, and an entry without counts (`null`: an older file, an external
    /// broker) gives no row to flag.
    #[test]
    fn counts_per_gb_can_be_gated() {
        let base = crate::bench::results::tests::example_attributed();
        let mut new = base.clone();
        for p in &mut new.paths {
            p.syscalls_per_gb = p.syscalls_per_gb.map(|x| x * 1.25);
        }
        let gated = vec!["syscalls_per_gb".to_string(), "user_copied_bytes_per_gb".to_string()];
        assert!(check_metrics(&gated).is_ok());
        let report = compare_gated(&base, &new, 0.10, Some(&gated));
        assert_eq!(report.regressions().count(), base.paths.len());
        assert!(report.regressions().all(|r| r.metric == "syscalls_per_gb"));
        // copy reads every byte into user space: twice that is a regression too.
        let mut copies = base.clone();
        for p in copies.paths.iter_mut().filter(|p| p.read_path == "copy") {
            p.user_copied_bytes_per_gb = Some(2e9);
        }
        let report = compare_gated(&base, &copies, 0.10, Some(&gated));
        assert!(report.regressions().all(|r| r.metric == "user_copied_bytes_per_gb" && r.read_path == "copy"));
        assert!(report.has_regressions());
        // Without counts on one side: nothing to compare, nothing flagged.
        let mut uncounted = new.clone();
        for p in &mut uncounted.paths {
            p.syscalls_per_gb = None;
        }
        assert!(!compare_gated(&base, &uncounted, 0.10, Some(&gated)).has_regressions());
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
        let mb = sendfile.ratios.iter().find(|(m, _)| *m == "mb_per_sec").unwrap().1.mean;
        assert!((mb - 1.6).abs() < 1e-9, "{mb}");
        assert!(report.within_run.iter().all(|w| w.read_path != "copy"));
        assert!(report.table().contains("within-run ratios"));
        assert_eq!(report.notes.len(), 1, "only the note on the threshold rule: {:?}", report.notes);
        assert!(report.notes[0].contains("threshold rule alone"), "{:?}", report.notes);
    }

    /// Files from different machines get a note naming each field that differs, first in the
    /// table; the same machine gets none.
    #[test]
    fn different_machines_are_noted() {
        let base = example(1.0);
        let mut new = example(1.0);
        new.machine.cpu_model = "Other CPU @ 3.00GHz".into();
        new.machine.nproc = 16;
        let report = compare(&base, &new, 0.10);
        let note = report.notes.iter().find(|n| n.starts_with("the machines differ")).expect("a machines note");
        assert!(
            note.contains(
                r#"cpu_model: base "Example CPU @ 2.00GHz", new "Other CPU @ 3.00GHz"; nproc: base "2", new "16")"#
            ),
            "{note}"
        );
        assert!(!note.contains("kernel") && !note.contains("memory"), "only what differs: {note}");
        assert!(report.table().starts_with("note: the machines differ ("), "{}", report.table());
        assert!(!report.has_regressions(), "a note, not a verdict");
        new.machine = base.machine.clone();
        new.machine.memory_bytes = 8 << 30;
        assert!(machines_note(&base, &new).unwrap().contains(r#"memory: base "24.0 GiB", new "8.0 GiB""#));
        assert!(machines_note(&base, &base).is_none());
        // A remote broker's machine (run --metrics) is compared too.
        let mut remote = base.clone();
        remote.target = "bootstrap:10.0.0.1:9092".into();
        remote.broker = Some(crate::bench::results::BrokerRecord {
            bootstrap: "10.0.0.1:9092".into(),
            broker_id: 0,
            configs: Default::default(),
            metrics: Some("10.0.0.1:9093".into()),
            machine: Some(crate::machine::Machine { nproc: 64, ..base.machine.clone() }),
        });
        let note = broker_machines_note(&base, &remote).unwrap();
        assert!(note.contains(r#"nproc: base "2", new "64""#), "{note}");
        assert!(machines_note(&base, &remote).is_none(), "the clients ran on the same machine");
        remote.broker.as_mut().unwrap().machine = None;
        assert!(broker_machines_note(&base, &remote).is_none(), "unknown: nothing to say");
        assert!(compare(&base, &base, 0.10).notes.iter().all(|n| !n.contains("machines")));
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
                "garbage.json: not a valid fetchbench-results v8 document: not JSON: expected ident at line 1 column 2"
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
            (
                "base-v2.json",
                serde_json::to_string_pretty(&crate::bench::results::tests::as_version_2(&base)).unwrap() + "\n",
            ),
            (
                "base-v3.json",
                serde_json::to_string_pretty(&crate::bench::results::tests::as_version_3(&base)).unwrap() + "\n",
            ),
            (
                "base-v4.json",
                serde_json::to_string_pretty(&crate::bench::results::tests::as_version_4(&base)).unwrap() + "\n",
            ),
            ("read-paths.json", example_read_paths().to_json() + "\n"),
        ]
    }

    /// Deviations of the repeated examples: a spread of +-12% (sample sd 9.5%), wider than
    /// the 10% threshold, in a fixed order per file.
    const SPREAD: [f64; 5] = [-0.12, -0.06, 0.0, 0.06, 0.12];

    fn speeds(scale: f64, order: [usize; 5]) -> Vec<f64> {
        order.iter().map(|&i| scale * (1.0 + SPREAD[i])).collect()
    }

    #[test]
    fn welch_flags_a_20_percent_shift_over_5_samples_and_not_noise_of_the_same_spread() {
        let base = example_repeated(&speeds(1.0, [0, 1, 2, 3, 4]));
        let slower = example_repeated(&speeds(0.8, [3, 0, 4, 2, 1]));
        let report = compare(&base, &slower, 0.10);
        let row = |r: &Report, path: &str, m: &str| {
            r.rows.iter().find(|x| x.read_path == path && x.phase == "catch_up" && x.metric == m).unwrap().clone()
        };
        let mb = row(&report, "copy", "mb_per_sec");
        assert_eq!((mb.base_samples, mb.new_samples), (5, 5));
        assert!(mb.regression && (mb.ratio.unwrap() - 0.8).abs() < 1e-9, "{mb:?}");
        // t = -0.2 / sqrt((0.0949^2 + 0.0759^2) / 5) = -3.68 on ~7.6 df: p ~ 0.003.
        let Test::Welch { p } = mb.test else { panic!("{mb:?}") };
        assert!(p < 0.01, "{p}");
        assert!(row(&report, "sendfile", "broker_cpu_s_per_gb").regression, "cost up 25% is flagged too");
        assert!(report.table().contains("welch t-test, p = 0.00"), "{}", report.table());
        assert!(report.table().contains("5/5"), "{}", report.table());
        // The tail's MB/s is the producers' rate in every repetition: no spread, no change.
        let tail = report.rows.iter().find(|x| x.phase == "tail" && x.metric == "mb_per_sec").unwrap();
        assert!(!tail.regression && tail.test == Test::Welch { p: 1.0 }, "{tail:?}");

        // Noise: the same spread, in another order, no shift: the means are equal.
        let noise = example_repeated(&speeds(1.0, [4, 2, 0, 1, 3]));
        let report = compare(&base, &noise, 0.10);
        assert!(!report.has_regressions(), "{}", report.table());
        assert!(report.table().contains("no regression beyond 10.0%"));
        let mb = row(&report, "copy", "mb_per_sec");
        let Test::Welch { p } = mb.test else { panic!("{mb:?}") };
        assert!((p - 0.5).abs() < 1e-9, "equal means: p = 0.5, {p}");
        // ... whereas one sample of each, as without repeats, can be flagged: the base's
        // repetition 4 (+12%) against the new file's repetition 2 (-12%) is a 21% drop.
        let one = |r: &Results, rep: u32| {
            let mut r = r.clone();
            r.paths.retain(|p| p.repetition == rep);
            r
        };
        let single = compare(&one(&base, 4), &one(&noise, 2), 0.10);
        assert!(single.has_regressions(), "{}", single.table());
        assert!(single.rows.iter().all(|r| r.test == Test::Threshold));
    }

    #[test]
    fn welch_needs_significance_and_the_minimum_effect() {
        let base = example_repeated(&speeds(1.0, [0, 1, 2, 3, 4]));
        // A 5% shift with a spread of 0.1%: significant, but not beyond the 10% threshold.
        let tight = |scale: f64| example_repeated(&[scale * 0.999, scale, scale * 1.001]);
        let report = compare(&tight(1.0), &tight(0.95), 0.10);
        let mb = report.rows.iter().find(|r| r.metric == "mb_per_sec").unwrap();
        assert!(matches!(mb.test, Test::Welch { p } if p < 0.001), "{mb:?}");
        assert!(!report.has_regressions(), "significant but below the threshold: {}", report.table());
        assert!(compare(&tight(1.0), &tight(0.95), 0.02).has_regressions(), "beyond a 2% threshold it is");
        // A 15% drop of the mean hidden in a huge spread (2 samples each): not significant.
        let wide_base = example_repeated(&[0.5, 1.5]);
        let wide_new = example_repeated(&[0.35, 1.35]);
        let report = compare(&wide_base, &wide_new, 0.10);
        let mb = report.rows.iter().find(|r| r.metric == "mb_per_sec").unwrap();
        assert!(mb.ratio.unwrap() < 0.9 && !mb.regression, "{mb:?}");
        // Mixed: 1 sample against 5 falls back to the threshold rule.
        let report = compare(&example(1.0), &base, 0.10);
        assert!(report.rows.iter().all(|r| r.test == Test::Threshold));
        assert!(report.notes.iter().any(|n| n.contains("threshold rule alone")), "{:?}", report.notes);
        assert!(!report.notes.iter().any(|n| n.contains("workloads differ")), "repeat is not the workload");
    }

    #[test]
    fn within_run_ratios_of_repeats_have_intervals() {
        let r = example_repeated(&speeds(1.0, [0, 1, 2, 3, 4]));
        let report = compare(&r, &r, 0.10);
        let w = report.within_run.iter().find(|w| w.read_path == "mmap" && w.phase == "catch_up").unwrap();
        let (_, e) = w.ratios.iter().find(|(m, _)| *m == "mb_per_sec").unwrap();
        assert_eq!(e.samples, 5);
        assert!((e.mean - 1.15).abs() < 1e-9 && e.ci95.is_some(), "{e:?}");
        assert!(report.table().contains("mb_per_sec 1.150 [1.150, 1.150]"), "{}", report.table());
    }

    #[test]
    fn an_interrupted_run_is_noted() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
        let text = std::fs::read_to_string(dir.join("base-v2.json")).unwrap();
        assert!(text.contains("\"interrupted\": false"));
        let tmp = tempfile::tempdir().unwrap();
        let cut = tmp.path().join("interrupted.json");
        std::fs::write(&cut, text.replace("\"interrupted\": false", "\"interrupted\": true")).unwrap();
        let (whole, cut) = (load(&dir.join("base-v2.json")).unwrap(), load(&cut).unwrap());
        let noted =
            |r: &Report, side: &str| r.notes.iter().any(|n| n.contains(&format!("the {side} run was interrupted")));
        let report = compare(&whole, &cut, 0.10);
        assert!(noted(&report, "new") && !noted(&report, "base"), "{:?}", report.notes);
        let report = compare(&cut, &whole, 0.10);
        assert!(noted(&report, "base") && !noted(&report, "new"), "{:?}", report.notes);
        assert!(!noted(&compare(&whole, &whole, 0.10), "base"));
    }

    /// `fetchbench read-paths` documents compare like run documents (phase `loopback`); against
    /// a run's, every entry is missing, with a note saying why.
    #[test]
    fn read_paths_documents_compare() {
        let base = example_read_paths();
        assert!(!compare(&base, &base, 0.10).has_regressions());
        let slower = scaled(&base, 0.8);
        let report = compare(&base, &slower, 0.10);
        let flagged: Vec<(&str, &str)> = report.regressions().map(|r| (r.read_path.as_str(), r.metric)).collect();
        assert!(flagged.contains(&("sendfile", "mb_per_sec")) && flagged.contains(&("copy", "broker_cpu_s_per_gb")));
        assert!(report.rows.iter().all(|r| r.phase == "loopback"));
        let w = report.within_run.iter().find(|w| w.file == "base" && w.read_path == "sendfile").unwrap();
        assert!((w.ratios[0].1.mean - 2.28 / 1.38).abs() < 1e-9, "{w:?}");
        assert!(report.notes.iter().all(|n| !n.contains("differ")), "{:?}", report.notes);
        let mut other = base.clone();
        other.loopback.as_mut().unwrap().file = "/var/tmp/fetchbench-read-paths-7.dat".into();
        assert!(compare(&base, &other, 0.10).notes.iter().all(|n| !n.contains("differ")), "temp file names differ");
        other.loopback.as_mut().unwrap().slice_size = 4096;
        assert!(compare(&base, &other, 0.10).notes.iter().any(|n| n.contains("read-paths configurations differ")));
        let mixed = compare(&example(1.0), &base, 0.10);
        assert!(mixed.has_regressions() && mixed.missing.len() == 6, "{:?}", mixed.missing);
        assert!(
            mixed
                .notes
                .iter()
                .any(|n| n.contains("the base is a fetchbench run document and the new one a fetchbench read-paths")),
            "{:?}",
            mixed.notes
        );
    }

    /// The `fetchbench-read-paths` v1 document of the old `read-paths --json` (the committed
    /// `fixtures/results/read-paths-v1.json`, as it wrote them) is refused, naming the file, the
    /// old schema and what to do; another version of that schema is just not a results document.
    #[test]
    fn old_read_paths_documents_are_refused_with_what_to_do() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
        let e = load(&dir.join("read-paths-v1.json")).unwrap_err();
        assert!(matches!(&e, LoadError::OldReadPaths { path } if path.ends_with("read-paths-v1.json")), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("read-paths-v1.json: a fetchbench-read-paths v1 document"), "{text}");
        assert!(text.contains("re-run `fetchbench read-paths --json`"), "{text}");
        assert!(text.contains("fetchbench-results v8"), "{text}");
    }

    /// `example(speed)` with its `sendfile` entries also run under `uring` as `uring-splice`,
    /// at `uring_speed` times threaded sendfile's throughput.
    fn with_uring(speed: f64, uring_speed: f64) -> Results {
        crate::bench::results::example_with_uring(speed, |q| q.mb_per_sec *= uring_speed)
    }

    /// Entries match by (server model, read path, phase): a version 4 baseline (threaded, as
    /// it reads) against a run of both models compares the threaded entries and lists the
    /// uring ones as added; a uring entry that got slower is a regression named with its model;
    /// within-run ratios of uring are against threaded's copy.
    #[test]
    fn entries_match_by_server_model() {
        let v4 = crate::bench::results::tests::as_version_4(&example(1.0));
        let old = Results::from_json(&v4.to_string()).unwrap();
        let new = with_uring(1.0, 1.5);
        let report = compare(&old, &new, 0.10);
        assert!(!report.has_regressions(), "{}", report.table());
        assert!(report.qualified);
        assert_eq!(report.added, ["uring/uring-splice/catch_up", "uring/uring-splice/tail"]);
        assert!(report.rows.iter().all(|r| r.server_model.as_deref() == Some("threaded")));
        let table = report.table();
        assert!(table.contains("threaded/copy/catch_up") && table.contains("model/path/phase"), "{table}");
        let w = report.within_run.iter().find(|w| w.file == "new" && w.read_path == "uring-splice").unwrap();
        let mb = w.ratios.iter().find(|(m, _)| *m == "mb_per_sec").unwrap().1.mean;
        assert!((mb - 1.6 * 1.5).abs() < 1e-9 && w.phase == "catch_up", "{mb}");
        // A uring entry that lost 20% against the same model's base.
        let report = compare(&with_uring(1.0, 1.5), &with_uring(1.0, 1.2), 0.10);
        let flagged: Vec<_> = report.regressions().map(|r| (r.server_model.clone(), r.read_path.clone())).collect();
        assert!(flagged.iter().all(|f| *f == (Some("uring".to_string()), "uring-splice".to_string())), "{flagged:?}");
        assert!(!flagged.is_empty());
        // The same read path under another model is another entry: missing, not matched.
        let mut moved = new.clone();
        for p in moved.paths.iter_mut().filter(|p| p.read_path == "uring-splice") {
            p.server_model = Some("threaded".into());
        }
        let report = compare(&new, &moved, 0.10);
        assert_eq!(report.missing, ["uring/uring-splice/catch_up", "uring/uring-splice/tail"]);
        assert_eq!(report.added, ["threaded/uring-splice/catch_up", "threaded/uring-splice/tail"]);
        // Only threaded on both sides: names as before.
        assert!(!compare(&old, &example(1.0), 0.10).table().contains("threaded/"));
    }

    #[test]
    fn version_2_files_still_compare() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
        let v2 = load(&dir.join("base-v2.json")).unwrap();
        assert!(v2.paths.iter().all(|p| p.repetition == 0) && v2.summary.is_empty());
        let report = compare(&v2, &example(0.8), 0.10);
        assert!(report.has_regressions());
        assert!(report.rows.iter().all(|r| r.test == Test::Threshold));
        assert!(!report.notes.iter().any(|n| n.contains("workloads differ")), "{:?}", report.notes);
        assert!(!compare(&v2, &example(1.0), 0.10).has_regressions());
        assert!(compare(&v2, &example_repeated(&[0.8, 0.81]), 0.10).has_regressions());
    }
}
