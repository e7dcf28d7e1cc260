//! `fetchbench report RESULTS.json... [-o FILE.html]`: one self-contained HTML page of one or
//! more results files ([`super::results`], of `fetchbench run` or `fetchbench read-paths
//! --json`, of the current schema version or one [`Results::from_json`] still reads; loaded as
//! `compare` loads them, [`super::compare::load`]).
//!
//! The page ([`render`]), top to bottom:
//!
//! - a warning when the files come from different machines (their `machine` records differ in
//!   CPU model, CPUs, memory, kernel or architecture, see
//!   [`crate::machine::Machine::differences`]): how many machines, and each field that
//!   differs with the runs of each value. Absolute figures are then not comparable across
//!   runs; the ratios to `copy` inside each run are;
//! - the runs side by side, one column per file: file, date, target, the machine (each field
//!   with io_uring, a value that differs from the first run's marked), git commit, command, workload
//!   (as the chart's title describes it, or the `read-paths` configuration), repetitions,
//!   interrupted, limits, notes;
//! - each (server model, read path, phase)'s ratio to the reference `copy` in its own run
//!   (`threaded`'s copy, [`super::results::is_copy_reference`]): the `ratio_to_copy` of the
//!   results' summary (the mean over the repetitions of the per-repetition ratio, with its 95%
//!   interval when there are repeats), for the metrics `compare` lists as within-run ratios
//!   (MB/s, broker CPU s/GB, corrected end-to-end p99), one column group per run; `reference`
//!   in the reference's own row, `-` where a run has no such entry or no ratio;
//! - per run: with repeats, the statistics of every figure over the repetitions (the
//!   results' `summary`: mean and 95% confidence interval, Student's t); the table of every
//!   entry (MB/s, records/s, broker CPU s/GB user + sys, user and sys, consumer CPU s/GB user and sys,
//!   minor and major faults per GB, RSS, broker-side fetch, consumer poll and corrected
//!   end-to-end latency percentiles, rebalance); and the run's chart, the SVG of
//!   [`super::chart`] inline (none for a `read-paths` document: the chart draws the phases
//!   `catch_up`, `tail` and `mixed`, its entries are phase `loopback`).
//!
//! A version 2 file has no summary: its statistics and ratios are computed from its entries
//! with [`super::results::summarize`], as a run computes them.
//!
//! Formats: MB/s with one decimal, records/s whole, CPU s/GB with three decimals, faults per
//! GB with one, RSS in MiB with one, latencies as the chart writes them
//! ([`super::chart::format_value`]: `850us`, `12.3ms`), ratios with three decimals; an
//! interval follows its mean as `[low, high]` in the same format; `-` where a figure does not
//! exist (a latency without samples).
//!
//! Self-contained: one file, no script, no external stylesheet, font, image or link: the
//! style is one inline `<style>`, the charts inline `<svg>` elements, text in the viewer's
//! `sans-serif` font. It opens offline.
//!
//! HTML is written by hand ([`Html`]) rather than with a template crate: the page is a few
//! tables, and a writer that only takes markup as `&'static str` and every other string
//! through [`escape`] makes injection impossible by construction (a results file is input: a
//! CPU model, a note or a workload name may hold `<script>`). The inline SVG is plotters'
//! output, which escapes text and attribute values itself (plotters-svg's `escape_and_push`);
//! the tests check a hostile results file renders as text.
//!
//! Exit codes of the command: 0 written, 2 bad input (a file missing, not JSON or not a valid
//! results document) or the page could not be written.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::chart::{describe_workload, format_value, render_svg, ChartError, Quantity};
use super::compare::{load, LoadError, WITHIN_RUN};
use super::results::{combination_label, summarize, FigureStats, PathResult, Results, SummaryEntry, METRICS};
use crate::metrics::Summary;

/// One results file of a report: the name it is shown under (the path as given) and its
/// contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The file, as given on the command line.
    pub file: String,
    /// Its results (validated, converted to the current schema version).
    pub results: Results,
}

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A results file could not be read or is not valid ([`load`]).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A run's chart could not be drawn (a histogram that does not decode: never in a
    /// validated file; or plotters failing).
    #[error("{file}: the chart: {source}")]
    Chart {
        /// The results file.
        file: String,
        /// The chart's error.
        #[source]
        source: ChartError,
    },
    /// Writing the page failed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The output file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// `s` with the five characters that mean something in HTML text or a quoted attribute value
/// replaced by their character references (`&` `<` `>` `"` `'`).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page being written: markup only as `&'static str` (written by this module), any other
/// text through [`escape`] ([`Html::text`]), so nothing read from a results file can become
/// markup.
struct Html {
    out: String,
}

impl Html {
    /// Markup: a literal of this module.
    fn raw(&mut self, markup: &'static str) {
        self.out.push_str(markup);
    }

    /// Text, escaped.
    fn text(&mut self, text: &str) {
        self.out.push_str(&escape(text));
    }

    /// `open`, the text escaped, `close`.
    fn el(&mut self, open: &'static str, text: &str, close: &'static str) {
        self.raw(open);
        self.text(text);
        self.raw(close);
    }

    /// A chart of [`render_svg`] (plotters escapes its text and attribute values), without an
    /// XML declaration should plotters ever write one.
    fn svg(&mut self, svg: &str) {
        let start = svg.find("<svg").unwrap_or(0);
        self.out.push_str(&svg[start..]);
    }

    /// A table cell.
    fn cell(&mut self, c: &Cell) {
        self.raw(match c.class {
            CellClass::Text => "<td>",
            CellClass::Num => "<td class=\"num\">",
            CellClass::Differs => "<td class=\"differs\">",
        });
        self.text(&c.text);
        if let Some(ci) = &c.ci {
            self.el("<span class=\"ci\"> ", ci, "</span>");
        }
        self.raw("</td>");
    }

    /// A table with a header row and rows of cells, in a horizontally scrolling box.
    fn table(&mut self, header: &[String], rows: &[Vec<Cell>]) {
        self.raw("<div class=\"scroll\"><table>\n<thead><tr>");
        for h in header {
            self.el("<th>", h, "</th>");
        }
        self.raw("</tr></thead>\n<tbody>\n");
        for row in rows {
            self.raw("<tr>");
            for c in row {
                self.cell(c);
            }
            self.raw("</tr>\n");
        }
        self.raw("</tbody></table></div>\n");
    }
}

/// How a cell is shown.
#[derive(Clone, Copy, Debug, PartialEq)]
enum CellClass {
    /// Left-aligned text.
    Text,
    /// A right-aligned number.
    Num,
    /// A value that differs from the first run's (marked).
    Differs,
}

/// One table cell: its text, and the 95% interval after a mean.
#[derive(Clone, Debug, PartialEq)]
struct Cell {
    text: String,
    ci: Option<String>,
    class: CellClass,
}

impl Cell {
    fn text(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), ci: None, class: CellClass::Text }
    }

    fn num(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), ci: None, class: CellClass::Num }
    }
}

/// The unit of a figure, which decides how it is written (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    /// MB/s (1e6 bytes), one decimal.
    MbPerSec,
    /// Records/s, whole.
    PerSec,
    /// CPU seconds per GB (1e9 bytes), three decimals.
    CpuPerGb,
    /// Counts per GB, one decimal.
    PerGb,
    /// Bytes, written in MiB with one decimal.
    Bytes,
    /// Microseconds, as the chart writes latencies.
    Micros,
    /// Milliseconds, whole, `ms`.
    Millis,
    /// A plain ratio, three decimals.
    Ratio,
}

impl Unit {
    /// The unit of a [`METRICS`] name.
    fn of_metric(name: &str) -> Unit {
        match name {
            "mb_per_sec" => Unit::MbPerSec,
            "records_per_sec" => Unit::PerSec,
            "broker_rss_bytes" => Unit::Bytes,
            "rebalance_ms" => Unit::Millis,
            n if n.ends_with("_s_per_gb") => Unit::CpuPerGb,
            n if n.ends_with("_per_gb") => Unit::PerGb,
            n if n.ends_with("_us") => Unit::Micros,
            _ => Unit::Ratio,
        }
    }

    /// `v` written in this unit.
    fn format(self, v: f64) -> String {
        match self {
            Unit::MbPerSec | Unit::PerGb => format!("{v:.1}"),
            Unit::PerSec => format!("{v:.0}"),
            Unit::CpuPerGb | Unit::Ratio => format!("{v:.3}"),
            Unit::Bytes => format!("{:.1} MiB", v / (1u64 << 20) as f64),
            Unit::Micros => format_value(v, Quantity::Latency),
            Unit::Millis => format!("{v:.0} ms"),
        }
    }

    /// A statistic as a cell: the mean, then `[low, high]` when it has an interval.
    fn stat(self, f: Option<&FigureStats>) -> Cell {
        match f {
            None => Cell::num("-"),
            Some(f) => Cell {
                text: self.format(f.mean),
                ci: f.ci95_low.zip(f.ci95_high).map(|(l, h)| format!("[{}, {}]", self.format(l), self.format(h))),
                class: CellClass::Num,
            },
        }
    }
}

/// The summary of `results` (per server model, read path and phase): the file's, or
/// [`summarize`]d from its entries when it has none (a version 2 file).
fn summary_of(results: &Results) -> Vec<SummaryEntry> {
    if results.summary.is_empty() {
        summarize(&results.paths)
    } else {
        results.summary.clone()
    }
}

/// `p50 / p99 / p99.9` (and `/ max` when `max`) of a latency summary, `-` without samples.
fn percentiles(s: &Summary, max: bool) -> String {
    if s.count == 0 {
        return "-".into();
    }
    let mut values = vec![s.p50_us, s.p99_us, s.p999_us];
    if max {
        values.push(s.max_us);
    }
    values.iter().map(|v| Unit::Micros.format(*v)).collect::<Vec<_>>().join(" / ")
}

/// The page of `runs` (see the [module docs](self)), a complete HTML document. Errors: a
/// run's chart could not be drawn ([`ReportError::Chart`]).
pub fn render(runs: &[Run]) -> Result<String, ReportError> {
    let mut h = Html { out: String::new() };
    h.raw("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    h.el("<title>", &format!("fetchbench report: {} results file(s)", runs.len()), "</title>\n");
    h.raw(STYLE);
    h.raw("</head>\n<body>\n");
    h.el("<h1>", "fetchbench report", "</h1>\n");
    h.el(
        "<p class=\"meta\">",
        &format!(
            "{} results file(s), made by fetchbench {}. MB = 1e6 bytes, GB = 1e9 bytes; CPU is seconds of \
             CPU time per GB served; a [low, high] after a mean is its 95% confidence interval over the \
             repetitions (Student's t).",
            runs.len(),
            env!("CARGO_PKG_VERSION")
        ),
        "</p>\n",
    );
    machines_warning(&mut h, runs);
    runs_table(&mut h, runs);
    let qualified = runs.iter().any(|r| r.results.compares_models());
    ratios_table(&mut h, runs, qualified);
    for (i, run) in runs.iter().enumerate() {
        run_section(&mut h, i, run)?;
    }
    h.raw("</body>\n</html>\n");
    Ok(h.out)
}

/// The style sheet, inline.
const STYLE: &str = "<style>
body { font-family: sans-serif; margin: 1.5em; color: #1a1a1a; background: #ffffff; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #cccccc; }
h3 { font-size: 1.05em; margin-top: 1.2em; }
p.meta { color: #555555; font-size: 0.9em; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #cccccc; padding: 0.25em 0.5em; vertical-align: top; }
th { background: #eef1f5; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.differs { background: #ffe08a; font-weight: bold; }
span.ci { color: #666666; font-size: 0.9em; }
ul.notes { margin: 0; padding-left: 1.2em; }
div.warning { background: #ffd7d2; border: 2px solid #c0392b; padding: 0.6em 1em; margin: 1em 0; }
div.warning strong { color: #8e1b10; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #dddddd; }
</style>
";

/// The runs' names in a list: `run 1`, `runs 1, 3`.
fn run_list(indices: &[usize]) -> String {
    let numbers: Vec<String> = indices.iter().map(|i| (i + 1).to_string()).collect();
    format!("{} {}", if indices.len() == 1 { "run" } else { "runs" }, numbers.join(", "))
}

/// How many different machines are among `all`: distinct descriptions as
/// [`crate::machine::Machine::differences`] compares them.
fn machine_count<'a>(all: impl Iterator<Item = &'a crate::machine::Machine>) -> usize {
    let mut machines: Vec<&crate::machine::Machine> = Vec::new();
    for machine in all {
        if !machines.iter().any(|m| m.differences(machine).is_empty()) {
            machines.push(machine);
        }
    }
    machines.len()
}

/// A machine in one line: CPU model, CPUs, memory, kernel.
fn machine_line(m: &crate::machine::Machine) -> String {
    let field = |name: &str| m.fields().into_iter().find(|(n, _)| *n == name).map_or(String::new(), |(_, v)| v);
    format!("{}, {} CPUs, {}, kernel {}", field("cpu_model"), field("nproc"), field("memory"), field("kernel"))
}

/// The warning when the runs come from different machines: how many, and per differing field
/// each value with its runs.
fn machines_warning(h: &mut Html, runs: &[Run]) {
    let Some(first) = runs.first() else { return };
    let machines = machine_count(runs.iter().map(|r| &r.results.machine));
    // The brokers' machines, where known (a remote fetchbench serve's through --metrics).
    let brokers = machine_count(runs.iter().filter_map(|r| r.results.broker_machine()));
    if machines < 2 && brokers < 2 {
        return;
    }
    let fields: Vec<_> = runs.iter().map(|r| r.results.machine.fields()).collect();
    h.raw("<div class=\"warning\" id=\"machines-differ\" role=\"alert\">\n");
    let what = if machines >= 2 {
        format!("These results come from {machines} different machines.")
    } else {
        format!("The brokers of these results ran on {brokers} different machines.")
    };
    h.el("<p><strong>", &what, "</strong> ");
    h.text(
        "Absolute figures (MB/s, CPU s/GB, latencies) are not comparable across them; compare each run's \
         ratios to copy.",
    );
    h.raw("</p>\n<ul>\n");
    for (k, (name, _)) in first.results.machine.fields().iter().enumerate() {
        // Each value of this field with the runs that have it, in order of first appearance.
        let mut values: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            match values.iter_mut().find(|(v, _)| *v == f[k].1) {
                Some((_, runs)) => runs.push(i),
                None => values.push((&f[k].1, vec![i])),
            }
        }
        if values.len() > 1 && *name != "io_uring" {
            let listed: Vec<String> = values.iter().map(|(v, r)| format!("{v:?} ({})", run_list(r))).collect();
            h.el("<li>", &format!("{name}: {}", listed.join("; ")), "</li>\n");
        }
    }
    if brokers >= 2 {
        let listed: Vec<String> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                r.results.broker_machine().map(|m| format!("{} ({})", machine_line(m), run_list(&[i])))
            })
            .collect();
        h.el("<li>", &format!("broker machines: {}", listed.join("; ")), "</li>\n");
    }
    h.raw("</ul>\n</div>\n");
}

/// What a run measured, in words: the workload as the chart's title has it, or the
/// `read-paths` configuration.
fn describe_run(r: &Results) -> String {
    if let Some(w) = r.workload() {
        return describe_workload(&w);
    }
    match &r.loopback {
        Some(l) => format!(
            "read paths alone to a loopback receiver: {} ({} bytes{}), {} byte slices, {} bytes moved per path, \
             page cache {}",
            l.file,
            l.file_size,
            if l.temp_file { ", a temp file" } else { "" },
            l.slice_size,
            l.total_bytes,
            if l.cold_cache { "cold" } else { "hot" }
        ),
        None => "unknown workload".into(),
    }
}

/// The runs side by side: one row per fact, one column per run; machine fields that differ
/// from the first run's are marked.
fn runs_table(h: &mut Html, runs: &[Run]) {
    h.el("<h2 id=\"runs\">", "Runs", "</h2>\n");
    let mut header = vec![String::new()];
    header.extend((1..=runs.len()).map(|i| format!("run {i}")));
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    let mut row = |name: &str, cells: Vec<Cell>| {
        let mut r = vec![Cell::text(name)];
        r.extend(cells);
        rows.push(r);
    };
    let each =
        |f: &dyn Fn(&Results) -> String| -> Vec<Cell> { runs.iter().map(|r| Cell::text(f(&r.results))).collect() };
    row("file", runs.iter().map(|r| Cell::text(&r.file)).collect());
    row("date (UTC)", each(&|r| r.date.clone()));
    row("target", each(&|r| r.target.clone()));
    row(
        "broker",
        each(&|r| match &r.broker {
            Some(b) => format!(
                "{} (node {}), {}",
                b.bootstrap,
                b.broker_id,
                b.metrics.as_ref().map_or("no metrics endpoint: broker figures not measured".into(), |m| {
                    format!("figures from its metrics endpoint {m}")
                })
            ),
            None if r.target == "embedded" => "embedded, in the run's process".into(),
            None => "none".into(),
        }),
    );
    row("broker machine", each(&|r| r.broker_machine().map_or("unknown".into(), machine_line)));
    let machines: Vec<_> = runs.iter().map(|r| r.results.machine.fields()).collect();
    for k in 0..machines.first().map_or(0, |m| m.len()) {
        let cells = machines
            .iter()
            .map(|m| Cell {
                text: m[k].1.clone(),
                ci: None,
                class: if m[k].1 != machines[0][k].1 { CellClass::Differs } else { CellClass::Text },
            })
            .collect();
        row(&format!("machine: {}", machines[0][k].0), cells);
    }
    row(
        "git",
        each(&|r| match &r.git.commit {
            Some(c) if r.git.dirty => format!("{c} (uncommitted changes)"),
            Some(c) => c.clone(),
            None => "unknown".into(),
        }),
    );
    row("command", each(&|r| r.command.join(" ")));
    row("workload", each(&describe_run));
    row("repetitions", each(&|r| r.paths.iter().map(|p| p.repetition + 1).max().unwrap_or(0).to_string()));
    row("interrupted", each(&|r| if r.interrupted { "yes (Ctrl-C): partial".into() } else { "no".into() }));
    row(
        "limits",
        each(&|r| {
            let figures: Vec<String> = r
                .limits
                .figures
                .iter()
                .map(|f| match f.bytes_per_sec {
                    Some(b) => format!("{} {}", f.label, format_value(b / 1e6, Quantity::Throughput)),
                    None => format!("{} failed", f.label),
                })
                .collect();
            match &r.limits.source {
                Some(s) => format!("{}: {}", s, figures.join(", ")),
                None => "none".into(),
            }
        }),
    );
    // Notes are lists: written apart below.
    h.table(&header, &rows);
    if runs.iter().any(|r| !r.results.notes.is_empty()) {
        h.el("<h3>", "Notes of the runs", "</h3>\n");
        h.raw("<ul class=\"notes\">\n");
        for (i, r) in runs.iter().enumerate() {
            for note in &r.results.notes {
                h.el("<li>", &format!("run {}: {note}", i + 1), "</li>\n");
            }
        }
        h.raw("</ul>\n");
    }
}

/// A short label of a [`METRICS`] name in a table header: `MB/s` for `mb_per_sec`, `broker
/// CPU s/GB`, `e2e p99` (corrected); the name itself for the others.
fn metric_label(name: &str) -> &str {
    match name {
        "mb_per_sec" => "MB/s",
        "broker_cpu_s_per_gb" => "broker CPU s/GB",
        "e2e_corrected_p99_us" => "e2e p99",
        other => other,
    }
}

/// The label of a [`SummaryEntry`]'s combination and phase: `model/path phase` or `path phase`.
fn entry_label(server_model: Option<&str>, read_path: &str, phase: &str, qualified: bool) -> String {
    format!("{} {phase}", combination_label(server_model, read_path, qualified))
}

/// Each combination's ratio to the reference `copy` of its run, side by side: one row per
/// (server model, read path, phase) of any run, the [`WITHIN_RUN`] metrics per run.
fn ratios_table(h: &mut Html, runs: &[Run], qualified: bool) {
    h.el("<h2 id=\"ratios\">", "Ratio to copy", "</h2>\n");
    h.el(
        "<p>",
        &format!(
            "Each combination divided by the reference copy{} of its own run (same phase and repetition; with \
             repeats the mean of the per-repetition ratios [95% CI]): the figures to compare across runs and \
             machines. Above 1 is faster for MB/s, costlier or slower for CPU and latency.",
            if qualified { " (under threaded)" } else { "" }
        ),
        "</p>\n",
    );
    let summaries: Vec<Vec<SummaryEntry>> = runs.iter().map(|r| summary_of(&r.results)).collect();
    let mut keys: Vec<(Option<String>, String, String)> = Vec::new();
    for s in summaries.iter().flatten() {
        let key = (s.server_model.clone(), s.read_path.clone(), s.phase.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut header = vec!["combination".to_string()];
    for i in 1..=runs.len() {
        for m in WITHIN_RUN {
            header.push(format!("run {i}: {} / copy", metric_label(m)));
        }
    }
    let mut rows = Vec::new();
    for (model, path, phase) in &keys {
        let mut row = vec![Cell::text(entry_label(model.as_deref(), path, phase, qualified))];
        for (run, summary) in runs.iter().zip(&summaries) {
            let s = summary.iter().find(|s| (&s.server_model, &s.read_path, &s.phase) == (model, path, phase));
            let reference = run.results.paths.iter().any(|p| {
                super::results::is_copy_reference(p)
                    && (&p.server_model, &p.read_path, &p.phase) == (model, path, phase)
            });
            for m in WITHIN_RUN {
                row.push(match s {
                    None => Cell::num("-"),
                    Some(_) if reference => Cell::num("reference"),
                    Some(s) => Unit::Ratio.stat(s.ratio_to_copy.iter().find(|f| f.metric == m)),
                });
            }
        }
        rows.push(row);
    }
    h.table(&header, &rows);
}

/// One run's section: its statistics over repetitions (when repeated), every entry, its chart.
fn run_section(h: &mut Html, i: usize, run: &Run) -> Result<(), ReportError> {
    let r = &run.results;
    h.el("<h2>", &format!("Run {}: {}", i + 1, run.file), "</h2>\n");
    h.el("<p class=\"meta\">", &format!("{}, {} on {}", describe_run(r), r.date, r.target), "</p>\n");
    let summary = summary_of(r);
    if summary.iter().any(|s| s.samples > 1) {
        h.el("<h3>", "Over the repetitions: mean [95% CI]", "</h3>\n");
        let mut header: Vec<String> = ["model", "read path", "phase", "n"].map(String::from).to_vec();
        header.extend(METRICS.iter().map(|m| m.name.to_string()));
        let rows: Vec<Vec<Cell>> = summary
            .iter()
            .map(|s| {
                let mut row = vec![
                    Cell::text(s.server_model.as_deref().unwrap_or("-")),
                    Cell::text(&s.read_path),
                    Cell::text(&s.phase),
                    Cell::num(s.samples.to_string()),
                ];
                row.extend(
                    METRICS.iter().map(|m| Unit::of_metric(m.name).stat(s.figures.iter().find(|f| f.metric == m.name))),
                );
                row
            })
            .collect();
        h.table(&header, &rows);
    }
    h.el("<h3>", "Entries", "</h3>\n");
    let header: Vec<String> = [
        "model",
        "read path",
        "phase",
        "rep",
        "MB/s",
        "records/s",
        "broker CPU s/GB",
        "broker CPU user s/GB",
        "broker CPU sys s/GB",
        "consumer CPU user s/GB",
        "consumer CPU sys s/GB",
        "minor faults/GB",
        "major faults/GB",
        "context switches/GB",
        "syscalls/GB",
        "user-copied bytes/GB",
        "broker RSS",
        "fetch p50 / p99 / p99.9",
        "poll p50 / p99 / p99.9",
        "e2e (corrected) p50 / p99 / p99.9 / max",
        "rebalance",
        "bound by",
    ]
    .map(String::from)
    .to_vec();
    let qualified = r.compares_models();
    let shown: Vec<crate::bench::attribution::Shown> =
        r.paths.iter().map(|p| crate::bench::attribution::show_mb_per_sec(p, 1, qualified)).collect();
    // A client-bound figure is never shown without its warning.
    for w in shown.iter().filter_map(|s| s.warning.as_deref()) {
        h.el("<div class=\"warning\" role=\"alert\"><strong>", w, "</strong></div>\n");
    }
    let rows: Vec<Vec<Cell>> = r.paths.iter().zip(&shown).map(|(p, s)| entry_row(p, s)).collect();
    h.table(&header, &rows);
    h.el("<h3>", "Chart", "</h3>\n");
    if !r.paths.iter().any(|p| CHART_PHASES.contains(&p.phase.as_str())) {
        h.el(
            "<p>",
            "No chart: the chart draws the phases catch_up, tail and mixed, and this run has none (a read-paths \
             document's entries are phase loopback: their figures are in the tables above).",
            "</p>\n",
        );
        return Ok(());
    }
    let svg = render_svg(r).map_err(|source| ReportError::Chart { file: run.file.clone(), source })?;
    h.raw("<figure>\n");
    h.svg(&svg);
    h.raw("</figure>\n");
    Ok(())
}

/// The phases [`render_svg`] draws (bars, curves); a run with none of them gets no chart.
const CHART_PHASES: [&str; 3] = ["catch_up", "tail", "mixed"];

/// The cells of one entry; its MB/s and bound as `shown` renders them (with their warning mark).
fn entry_row(p: &PathResult, shown: &crate::bench::attribution::Shown) -> Vec<Cell> {
    vec![
        Cell::text(p.server_model.as_deref().unwrap_or("-")),
        Cell::text(&p.read_path),
        Cell::text(&p.phase),
        Cell::num(p.repetition.to_string()),
        Cell::num(format!(
            "{}{}",
            Unit::MbPerSec.format(p.mb_per_sec),
            if shown.warning.is_some() { " !" } else { "" }
        )),
        Cell::num(Unit::PerSec.format(p.records_per_sec)),
        Cell::num(Unit::CpuPerGb.format(p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb)),
        Cell::num(Unit::CpuPerGb.format(p.broker_cpu.user_s_per_gb)),
        Cell::num(Unit::CpuPerGb.format(p.broker_cpu.sys_s_per_gb)),
        Cell::num(Unit::CpuPerGb.format(p.consumer_cpu.user_s_per_gb)),
        Cell::num(Unit::CpuPerGb.format(p.consumer_cpu.sys_s_per_gb)),
        Cell::num(Unit::PerGb.format(p.minor_faults_per_gb)),
        Cell::num(Unit::PerGb.format(p.major_faults_per_gb)),
        Cell::num(Unit::PerGb.format(p.context_switches_per_gb)),
        Cell::num(p.syscalls_per_gb.map_or("-".into(), |x| Unit::PerGb.format(x))),
        Cell::num(p.user_copied_bytes_per_gb.map_or("-".into(), |x| Unit::Bytes.format(x))),
        Cell::num(Unit::Bytes.format(p.broker_rss_bytes as f64)),
        Cell::num(percentiles(&p.fetch_latency.summary, false)),
        Cell::num(percentiles(&p.poll_latency.summary, false)),
        Cell::num(percentiles(&p.end_to_end_latency.corrected.summary, true)),
        Cell::num(p.rebalance_ms.map_or("-".into(), |ms| Unit::Millis.format(ms))),
        Cell::text(&shown.bound),
    ]
}

/// Arguments of `fetchbench report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Results files of `fetchbench run` or `fetchbench read-paths --json`, shown in this
    /// order (run 1, run 2, ...).
    #[arg(required = true, value_name = "RESULTS.json")]
    pub files: Vec<PathBuf>,
    /// Where to write the page (created or replaced); `-` writes it to stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE.html", default_value = "report.html")]
    pub output: PathBuf,
}

/// Loads every file of `args`, renders the page and writes it; returns the runs (for the
/// command's summary line). Errors: the first file that does not load, a chart that cannot be
/// drawn, the write.
pub fn report(args: &ReportArgs) -> Result<Vec<Run>, ReportError> {
    let runs = args
        .files
        .iter()
        .map(|f| Ok(Run { file: f.display().to_string(), results: load(f)? }))
        .collect::<Result<Vec<Run>, ReportError>>()?;
    let page = render(&runs)?;
    write_page(&args.output, &page)?;
    Ok(runs)
}

/// Writes `page` to `path`, or to stdout for `-`.
fn write_page(path: &Path, page: &str) -> Result<(), ReportError> {
    let result = if path == Path::new("-") {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        out.write_all(page.as_bytes()).and_then(|()| out.flush())
    } else {
        std::fs::write(path, page)
    };
    result.map_err(|source| ReportError::Write { path: path.to_path_buf(), source })
}

/// `fetchbench report`: writes the page and says so on stderr, with a note when the runs come
/// from different machines (the page's warning). Exit 0 written, 2 bad input or a failed
/// write, with the error and its causes on stderr.
pub fn main(args: ReportArgs) -> ExitCode {
    match report(&args) {
        Ok(runs) => {
            let machines = machine_count(runs.iter().map(|r| &r.results.machine));
            if machines > 1 {
                eprintln!(
                    "note: the results come from {machines} different machines (the page lists what differs): \
                     compare the ratios to copy, not absolute figures"
                );
            }
            let brokers = machine_count(runs.iter().filter_map(|r| r.results.broker_machine()));
            if brokers > 1 {
                eprintln!(
                    "note: the brokers ran on {brokers} different machines (the page lists them): broker CPU s/GB, \
                     faults and fetch latency are not comparable across them"
                );
            }
            eprintln!("fetchbench report: {} results file(s) -> {}", runs.len(), args.output.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                let cause = s.to_string();
                if !text.contains(&cause) {
                    let _ = write!(text, ": {cause}");
                }
                source = s.source();
            }
            eprintln!("fetchbench report: {text}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::results::{example, example_read_paths, example_repeated};
    use super::*;

    fn run(file: &str, results: Results) -> Run {
        Run { file: file.into(), results }
    }

    #[test]
    fn escape_replaces_what_html_reads_as_markup() {
        assert_eq!(escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(escape("Example CPU @ 2.00GHz ±"), "Example CPU @ 2.00GHz ±");
    }

    /// Every string a results file carries (machine, command, notes, workload name, git,
    /// limits, paths) and the file name, hostile: the page shows them as text, in the tables
    /// and in the chart's SVG, and has no element of theirs.
    #[test]
    fn a_hostile_results_file_renders_as_text() {
        const SCRIPT: &str = "<script>alert(1)</script>";
        const IMG: &str = "\"><img src=x onerror=alert(2)>";
        let mut r = example(1.0);
        r.machine.cpu_model = SCRIPT.into();
        r.machine.kernel = IMG.into();
        r.command.push(format!("</td></table>{SCRIPT}"));
        r.notes.push(format!("a note {IMG} {SCRIPT}"));
        r.workload["name"] = serde_json::json!(format!("w{SCRIPT}"));
        r.git.commit = Some(format!("'{SCRIPT}"));
        r.limits.source = Some(IMG.into());
        r.limits.figures[0].label = SCRIPT.into();
        // Still a valid document: what a file may hold.
        let r = Results::from_json(&r.to_json()).unwrap();
        let page = render(&[run(&format!("<i>{SCRIPT}.json"), r)]).unwrap();
        let lower = page.to_lowercase();
        for markup in ["<script", "<img", "<i>", "onerror=alert(2)>"] {
            assert!(!lower.contains(markup), "{markup} got into the page");
        }
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
        // In the chart too (plotters escapes the title's CPU model and workload name).
        let svg = &page[page.find("<svg").unwrap()..];
        assert!(svg.contains("&lt;script&gt;"), "the chart's subtitle names the CPU model");
    }

    /// No script, no link, no external resource: the page opens offline. The only `http` is
    /// the SVG namespace name (not fetched).
    #[test]
    fn the_page_is_self_contained() {
        let page =
            render(&[run("a.json", example_repeated(&[0.9, 1.1])), run("b.json", example_read_paths())]).unwrap();
        let lower = page.to_lowercase();
        for external in ["<script", "<link", "<img", "<iframe", "<object", "src=", "href=", "url(", "@import"] {
            assert!(!lower.contains(external), "{external} in the page");
        }
        assert_eq!(lower.matches("http").count(), lower.matches("xmlns=\"http://www.w3.org/2000/svg\"").count());
        assert_eq!(lower.matches("<svg").count(), 1, "one chart: the read-paths document has none");
        assert!(page.contains("No chart: the chart draws the phases catch_up, tail and mixed"));
        assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));
    }

    /// The warning names each field that differs with its runs; the same machine (io_uring
    /// aside) gets none, but a differing io_uring cell is still marked.
    #[test]
    fn different_machines_get_a_warning() {
        let a = example(1.0);
        let mut b = example(1.0);
        b.machine.cpu_model = "Other CPU @ 3.00GHz".into();
        b.machine.nproc = 16;
        let page = render(&[run("a.json", a.clone()), run("b.json", b), run("c.json", a.clone())]).unwrap();
        assert!(page.contains("id=\"machines-differ\""), "{page}");
        assert!(page.contains("These results come from 2 different machines."));
        assert!(
            page.contains(
                "<li>cpu_model: &quot;Example CPU @ 2.00GHz&quot; (runs 1, 3); &quot;Other CPU @ 3.00GHz&quot; (run 2)</li>"
            ),
            "{page}"
        );
        assert!(page.contains("<li>nproc: &quot;2&quot; (runs 1, 3); &quot;16&quot; (run 2)</li>"));
        assert!(!page.contains("<li>kernel"), "only what differs");
        assert!(page.contains("<td class=\"differs\">Other CPU @ 3.00GHz</td>"));
        let same = render(&[run("a.json", a.clone()), run("c.json", a.clone())]).unwrap();
        assert!(!same.contains("machines-differ") && !same.contains("class=\"differs\""));
        let mut no_uring = a.clone();
        no_uring.machine.io_uring = false;
        let page = render(&[run("a.json", a), run("d.json", no_uring)]).unwrap();
        assert!(!page.contains("machines-differ"), "io_uring alone is not another machine");
        assert!(page.contains("<td class=\"differs\">no</td>"));
    }

    /// A run against a remote fetchbench serve (`--metrics`) names its broker and the broker's
    /// machine; brokers on different machines get the warning though the clients' machine is
    /// the same.
    #[test]
    fn a_remote_brokers_machine_is_shown_and_compared() {
        let a = example(1.0);
        let mut remote = example(1.0);
        remote.target = "bootstrap:10.0.0.1:9092".into();
        remote.broker = Some(crate::bench::results::BrokerRecord {
            bootstrap: "10.0.0.1:9092".into(),
            broker_id: 0,
            configs: Default::default(),
            metrics: Some("10.0.0.1:9093".into()),
            machine: Some(crate::machine::Machine { nproc: 64, cpu_model: "Big CPU".into(), ..a.machine.clone() }),
        });
        let page = render(&[run("a.json", a.clone()), run("r.json", remote.clone())]).unwrap();
        assert!(page.contains("The brokers of these results ran on 2 different machines."), "{page}");
        assert!(page.contains("broker machines: Example CPU @ 2.00GHz, 2 CPUs"), "{page}");
        assert!(page.contains("Big CPU, 64 CPUs"), "{page}");
        assert!(page.contains("10.0.0.1:9092 (node 0), figures from its metrics endpoint 10.0.0.1:9093"), "{page}");
        assert!(page.contains("embedded, in the run&#39;s process"), "{page}");
        remote.broker.as_mut().unwrap().machine = None;
        let page = render(&[run("a.json", a), run("r.json", remote)]).unwrap();
        assert!(!page.contains("machines-differ"), "an unknown broker machine is not another machine");
    }

    /// Every entry's figures, the statistics with their intervals (repeats), and the ratios to
    /// copy from the summary, formatted as the module docs say.
    #[test]
    fn figures_intervals_and_ratios_are_on_the_page() {
        let r = example_repeated(&[0.9, 1.0, 1.1]);
        let page = render(&[run("r.json", r.clone())]).unwrap();
        for p in &r.paths {
            assert!(page.contains(&format!("<td class=\"num\">{:.1}</td>", p.mb_per_sec)), "{}", p.mb_per_sec);
        }
        let copy = r.summary.iter().find(|s| s.read_path == "copy" && s.phase == "catch_up").unwrap();
        let mb = copy.figures.iter().find(|f| f.metric == "mb_per_sec").unwrap();
        let expected = format!(
            "{:.1}<span class=\"ci\"> [{:.1}, {:.1}]</span>",
            mb.mean,
            mb.ci95_low.unwrap(),
            mb.ci95_high.unwrap()
        );
        assert!(page.contains(&expected), "{expected}");
        assert!(page.contains("Over the repetitions: mean [95% CI]"));
        // sendfile / copy is 1.6 in every repetition: an interval of no width.
        assert!(page.contains("<td class=\"num\">1.600<span class=\"ci\"> [1.600, 1.600]</span></td>"));
        assert!(page.contains("<td>sendfile catch_up</td>"));
        assert!(page.contains("<td class=\"num\">reference</td>"));
        // One repetition: no statistics table, ratios without intervals.
        let one = render(&[run("one.json", example(1.0))]).unwrap();
        assert!(!one.contains("Over the repetitions") && one.contains("<td class=\"num\">1.600</td>"));
    }

    /// A version 2 file has no summary: the ratios are computed from its entries.
    #[test]
    fn version_2_files_get_their_ratios_computed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
        let v2 = load(&dir.join("base-v2.json")).unwrap();
        assert!(v2.summary.is_empty());
        let page = render(&[run("base-v2.json", v2)]).unwrap();
        assert!(page.contains("<td class=\"num\">1.600</td>"), "sendfile / copy");
    }

    /// Server models compared: the ratio table names combinations `model/path`, against
    /// threaded's copy.
    #[test]
    fn combinations_of_server_models_are_named() {
        let r = crate::bench::results::example_with_uring(1.0, |q| q.mb_per_sec *= 1.5);
        let page = render(&[run("models.json", r)]).unwrap();
        assert!(page.contains("<td>uring/uring-splice catch_up</td>"), "{page}");
        assert!(page.contains("<td class=\"num\">2.400</td>"), "1.6 x 1.5 against threaded/copy");
        assert!(page.contains("the reference copy (under threaded)"));
    }
}
