//! An SVG chart of one results file ([`Results`]), drawn with `plotters`' SVG backend.
//!
//! One [`WIDTH`] x [`HEIGHT`] pixel SVG document with a two-line title, the workload first
//! (its `name`, record size, topics and partitions, consumers as groups x members per group,
//! page cache, and each phase: the catch-up's backlog, the rate of the others; see
//! [`describe_workload`]), then `results.date` and the machine (`cpu_model`, `nproc`); and
//! three panels, each saying on its value axis whether higher or lower is better:
//!
//! - top left: throughput of each read path in the `catch_up` phase, then in the `mixed`
//!   phase (its drain's MB/s; bars lighter, labelled `<read path> mixed`), bars;
//! - top right: broker CPU of the same entries, CPU seconds per GB (1e9 bytes), `user` and
//!   `sys` stacked (for `mixed`, per GB of the drain's and the tail records' bytes);
//! - bottom: latency percentile curves, one per read path, latency on a log axis against the
//!   percentile on the usual log "1/(1-q)" axis (ticks at 0%, 50%, 90%, 99%, 99.9%, 99.99%).
//!   The curves are the end-to-end latency of the `tail` entries and of the `mixed` entries'
//!   tail records (`<read path> mixed`, dashed when tail curves are drawn too), coordinated
//!   omission corrected as solid lines, raw as lighter thin lines, when any such entry has
//!   samples; otherwise the `catch_up` phase's broker-side Fetch latency, or its consumer
//!   `poll` latency when no Fetch latency was recorded (an external target). The panel's
//!   title says which; it says "no latency samples" when every histogram is empty.
//!
//! A run that compares server models ([`Results::compares_models`]: its workload or an entry
//! names a model other than `threaded`) draws one
//! bar and one curve per (server model, read path), named `model/path` (`uring/uring-splice`,
//! `threaded/copy`; [`combination_label`]); a run of `threaded` alone names them by the read
//! path, as before. Each bar's broker CPU is that combination's.
//!
//! A repeated run (`--repeat N`: several entries of a (server model, read path, phase)) draws
//! one bar per (server model, read path, phase): the mean over the repetitions, with the 95% confidence interval of the
//! mean (Student's t, from `results.summary`, see [`super::results::summarize`]) as an error
//! bar, and a legend "mean of N runs, bars: 95% CI". Its latency curves are those of the
//! repetitions' histograms merged (HdrHistogram add: percentiles of all the values together,
//! never an average of percentiles), and the panel's title ends "histograms of N runs
//! merged". With one repetition there are no error bars and no such notes.
//!
//! Values are written by magnitude with 3 significant digits ([`format_value`]): throughput
//! in B/s, KB/s, MB/s or GB/s (decimal: 1 KB = 1e3 bytes, as MB everywhere in fetchbench),
//! latency in us, ms or s, CPU in s/GB (0.003 stays 0.003). A value axis takes the unit of
//! the largest value it shows.
//!
//! Values come from the histograms (ns, decoded with [`Latency::decode`]), not the summaries.
//! Latencies below 1 us (the histograms' lowest discernible value, [`LOWEST_NS`]) are drawn
//! at 1 us so the log axis has no zero. Non-finite numbers (never in a validated file) are
//! drawn as 0, so the SVG never holds `NaN`. Colours are fixed by read path name
//! ([`PATH_COLORS`]; a name outside it takes [`OTHER_COLORS`] in order of first appearance)
//! and are the same in every panel; a series under server model `uring` takes its read path's
//! colour darkened ([`URING_SHADE`]), so `threaded/uring-splice` and `uring/uring-splice`
//! differ; the CPU stacks have their own grays ([`CPU_USER_COLOR`],
//! [`CPU_SYS_COLOR`]), so no two series of a chart share a colour.
//!
//! Text is written as SVG `<text>` elements in the viewer's `sans-serif` font: plotters is
//! built without its `ttf` feature, and only estimates text widths for layout.

use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::results::{combination_label, summarize, EntryKey, FigureStats, LatencyResult, PathResult, Results};
use super::workload::{Client, Compression, PageCache, Phase, Rate, Workload};
use crate::metrics::{HistogramError, Latency, LOWEST_NS};

/// Width of the chart, pixels.
pub(crate) const WIDTH: u32 = 1200;
/// Height of the chart, pixels.
pub(crate) const HEIGHT: u32 = 800;

/// Highest percentile drawn, in "nines" (`log10(1/(1-q))`): 4 = 99.99%.
const MAX_NINES: f64 = 4.0;
/// Points per latency curve (evenly spaced in nines from 0 to [`MAX_NINES`]).
const CURVE_POINTS: usize = 161;
/// The colour of each read path by name (Tableau 10's first seven), `external` being an
/// external cluster's entries.
pub(crate) const PATH_COLORS: [(&str, RGBColor); 11] = [
    ("copy", RGBColor(31, 119, 180)),            // blue
    ("mmap", RGBColor(255, 127, 14)),            // orange
    ("sendfile", RGBColor(44, 160, 44)),         // green
    ("splice", RGBColor(188, 189, 34)),          // olive
    ("uring-splice", RGBColor(214, 39, 40)),     // red
    ("uring-read-send", RGBColor(23, 190, 207)), // cyan
    ("uring-send-zc", RGBColor(0, 0, 128)),      // navy
    ("msg-zerocopy", RGBColor(0, 128, 128)),     // teal
    ("direct", RGBColor(148, 103, 189)),         // purple
    ("null", RGBColor(140, 86, 75)),             // brown
    ("external", RGBColor(227, 119, 194)),       // pink
];
/// The factor a series under server model `uring` scales its read path's colour by (darker).
pub(crate) const URING_SHADE: f64 = 0.6;
/// Colours of read paths not in [`PATH_COLORS`], in order of first appearance (lime and
/// magenta; repeated beyond two such paths).
pub(crate) const OTHER_COLORS: [RGBColor; 2] = [RGBColor(128, 255, 0), RGBColor(200, 0, 200)];
/// The broker CPU panel's `user` stack (dark gray).
pub(crate) const CPU_USER_COLOR: RGBColor = RGBColor(64, 64, 64);
/// The broker CPU panel's `sys` stack (light gray).
pub(crate) const CPU_SYS_COLOR: RGBColor = RGBColor(176, 176, 176);
/// The error bars (95% confidence intervals) of a repeated run's bars (near-black).
pub(crate) const ERROR_BAR_COLOR: RGBColor = RGBColor(32, 32, 32);
/// The phases drawn as bars, in this order: those whose throughput is a drain's (`mixed`:
/// its catch-up groups' drain while the producers write).
const BAR_PHASES: [&str; 2] = ["catch_up", "mixed"];
/// The phases whose end-to-end latency is drawn, in this order (`mixed`: its tail records').
const E2E_PHASES: [&str; 2] = ["tail", "mixed"];

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// A latency histogram of the results does not decode (never in a validated file).
    #[error("{read_path} {phase} {which}: {source}")]
    Histogram {
        /// The entry's [`PathResult::read_path`].
        read_path: String,
        /// The entry's [`PathResult::phase`].
        phase: String,
        /// Which histogram: `fetch_latency`, `poll_latency`, `end_to_end_latency.raw` or
        /// `end_to_end_latency.corrected`.
        which: &'static str,
        /// The decoder's error.
        #[source]
        source: HistogramError,
    },
    /// plotters failed to draw (its error, as text).
    #[error("drawing the chart failed: {0}")]
    Draw(String),
}

impl From<ChartError> for io::Error {
    fn from(e: ChartError) -> io::Error {
        let kind = match e {
            ChartError::Histogram { .. } => io::ErrorKind::InvalidData,
            ChartError::Draw(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

fn draw_err(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// Renders `results` as one SVG document (see the [module docs](self) for what it shows).
/// Errors: a histogram that does not decode ([`ChartError::Histogram`]), or plotters failing
/// ([`ChartError::Draw`]).
pub(crate) fn render_svg(results: &Results) -> Result<String, ChartError> {
    let latency = latency_curves(results)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (headline, subtitle) = title(results);
        let body = root.titled(&headline, ("sans-serif", 20).into_font()).map_err(draw_err)?;
        let body = body.titled(&subtitle, ("sans-serif", 15).into_font()).map_err(draw_err)?;
        let (top, bottom) = body.split_vertically(HEIGHT as i32 * 2 / 5);
        let (left, right) = top.split_horizontally(WIDTH as i32 / 2);
        let bars = bars(results);
        let colors = Palette::of(results);
        draw_throughput(&left, &bars, &colors)?;
        draw_cpu(&right, &bars)?;
        draw_latency(&bottom, &latency, &colors)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Renders `results` ([`render_svg`]) and writes the SVG to `path` (created or truncated).
/// Errors: those of [`render_svg`] (a histogram that does not decode is
/// [`io::ErrorKind::InvalidData`]) and of writing the file.
pub(crate) fn write_svg(results: &Results, path: &Path) -> io::Result<()> {
    let svg = render_svg(results)?;
    std::fs::write(path, svg)
}

/// The chart's title: the workload ([`describe_workload`], or its `name` alone when the
/// results' workload does not parse), then the date and the machine.
fn title(results: &Results) -> (String, String) {
    let name = results.workload.get("name").and_then(|v| v.as_str()).unwrap_or("unnamed workload");
    let mut headline = match results.workload() {
        Some(w) => describe_workload(&w),
        None => name.to_string(),
    };
    if results.interrupted {
        headline.push_str(" [interrupted]");
    }
    let cpu = if results.machine.cpu_model.is_empty() { "unknown CPU" } else { &results.machine.cpu_model };
    let subtitle = format!("fetchbench run {} on {cpu} ({} CPUs)", results.date, results.machine.nproc);
    (headline, subtitle)
}

/// One line naming a workload: `<name>: <record size> records, <partitions> partitions,
/// <groups>x<members> consumers, page cache <hot|cold>; <phases>`, e.g. `default: 1 KiB
/// records, 8 partitions, 1x4 consumers, page cache hot; catch_up of a 1 GiB backlog, tail
/// at 10000 records/s`. Topics show as `<topics> topics x <partitions> partitions` when more
/// than one; a compression other than none and the librdkafka client are named; a catch-up
/// of a log directory says so.
pub(crate) fn describe_workload(w: &Workload) -> String {
    let plural = |n: u32, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let partitions = if w.topics > 1 {
        format!("{} x {}", plural(w.topics, "topic"), plural(w.partitions, "partition"))
    } else {
        plural(w.partitions, "partition")
    };
    let client = if w.client == Client::Librdkafka { " (librdkafka)" } else { "" };
    let mut t = format!(
        "{}: {} records, {partitions}, {}x{} consumers{client}, page cache {}",
        w.name,
        binary_size(w.record_size),
        w.consumer_groups,
        w.consumers_per_group,
        match w.page_cache {
            PageCache::Hot => "hot",
            PageCache::Cold => "cold",
        }
    );
    if w.compression != Compression::None {
        let _ = write!(t, ", {} compression", w.compression.name());
    }
    let rate = match w.rate {
        Rate::Unlimited => "an unlimited rate".to_string(),
        Rate::RecordsPerSec(n) => format!("{n} records/s"),
        Rate::MegabytesPerSec(mb) => format!("{mb} MB/s"),
    };
    let phases: Vec<String> = w
        .phases
        .iter()
        .map(|p| match (p, &w.log_dir) {
            (Phase::CatchUp, Some(_)) => "catch_up of a log_dir copy".to_string(),
            (Phase::CatchUp, None) => format!("catch_up of a {} backlog", binary_size(w.backlog_bytes)),
            _ => format!("{} at {rate}", p.name()),
        })
        .collect();
    if !phases.is_empty() {
        let _ = write!(t, "; {}", phases.join(", "));
    }
    t
}

/// `1 KiB`, `1 GiB` for a whole number of a binary unit, else bytes: `1000 B`.
fn binary_size(bytes: u64) -> String {
    for (unit, m) in [("TiB", 1u64 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{} {unit}", bytes / m);
        }
    }
    format!("{bytes} B")
}

/// The colour of each read path of a chart: [`PATH_COLORS`] by name, else [`OTHER_COLORS`]
/// in order of first appearance in `results.paths`.
struct Palette {
    others: Vec<String>,
}

impl Palette {
    fn of(results: &Results) -> Palette {
        let mut others: Vec<String> = Vec::new();
        for p in &results.paths {
            if path_color(&p.read_path).is_none() && !others.contains(&p.read_path) {
                others.push(p.read_path.clone());
            }
        }
        Palette { others }
    }

    fn color(&self, read_path: &str) -> RGBColor {
        path_color(read_path).unwrap_or_else(|| {
            let i = self.others.iter().position(|c| c == read_path).unwrap_or(0);
            OTHER_COLORS[i % OTHER_COLORS.len()]
        })
    }

    /// The colour of a series: its read path's, darkened under `uring` ([`URING_SHADE`]).
    fn series_color(&self, s: &Series) -> RGBColor {
        let c = self.color(&s.read_path);
        if s.server_model.as_deref() == Some("uring") {
            let shade = |x: u8| (f64::from(x) * URING_SHADE).round() as u8;
            RGBColor(shade(c.0), shade(c.1), shade(c.2))
        } else {
            c
        }
    }
}

/// A (server model, read path) of a chart: its bars and curves.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    server_model: Option<String>,
    read_path: String,
    /// `model/path` in a run comparing models, else the read path ([`combination_label`]).
    name: String,
}

impl Series {
    fn of(p: &PathResult, qualified: bool) -> Series {
        Series {
            server_model: p.server_model.clone(),
            read_path: p.read_path.clone(),
            name: combination_label(p.server_model.as_deref(), &p.read_path, qualified),
        }
    }

    fn key(&self) -> (Option<&str>, &str) {
        (self.server_model.as_deref(), self.read_path.as_str())
    }
}

/// The [`PATH_COLORS`] entry of `read_path`.
fn path_color(read_path: &str) -> Option<RGBColor> {
    PATH_COLORS.iter().find(|(n, _)| *n == read_path).map(|(_, c)| *c)
}

/// What a chart value measures: its base unit and the units it is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quantity {
    /// Throughput given in MB/s (1e6 bytes/s): written in B/s, KB/s, MB/s or GB/s (decimal).
    Throughput,
    /// Latency given in microseconds: written in us, ms or s.
    Latency,
    /// CPU seconds per GB (1e9 bytes): written in s/GB.
    CpuPerGb,
}

impl Quantity {
    /// (size of the unit in the base unit, its name), smallest first.
    fn units(self) -> &'static [(f64, &'static str)] {
        match self {
            Quantity::Throughput => &[(1e-6, "B/s"), (1e-3, "KB/s"), (1.0, "MB/s"), (1e3, "GB/s")],
            Quantity::Latency => &[(1.0, "us"), (1e3, "ms"), (1e6, "s")],
            Quantity::CpuPerGb => &[(1.0, "s/GB")],
        }
    }

    /// The unit for a value of magnitude `v`: the largest not above it (the smallest for 0).
    fn unit(self, v: f64) -> (f64, &'static str) {
        let units = self.units();
        let v = v.abs();
        units.iter().rev().find(|(size, _)| v >= *size * (1.0 - 5e-4)).copied().unwrap_or(units[0])
    }
}

/// `v` (in `q`'s base unit) written by magnitude with 3 significant digits, trailing zeros
/// dropped: `4.2 MB/s` for 4.2, `4.2 KB/s` for 0.0042, `1.44 GB/s` for 1440 (throughput in
/// MB/s); `850us`, `12.3ms`, `1.5s` (latency in us); `0.003 s/GB`. Non-finite values are 0.
pub(crate) fn format_value(v: f64, q: Quantity) -> String {
    let v = if v.is_finite() { v } else { 0.0 };
    let (size, unit) = q.unit(v);
    let sep = if q == Quantity::Latency { "" } else { " " };
    format!("{}{sep}{unit}", significant(v / size, 3))
}

/// `x` with `digits` significant digits (more when its integer part is longer), trailing
/// zeros after the point dropped, never in exponent form: `0.00312`, `4.2`, `1440`, `0`.
fn significant(x: f64, digits: i32) -> String {
    if !x.is_finite() || x == 0.0 {
        return "0".into();
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let text = format!("{x:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}

/// An f64 axis, linear or logarithmic, with given tick positions (plotters' own
/// `with_key_points` and `log_scale` lose the default label formatting `configure_mesh` needs,
/// or pick few ticks on short log ranges).
struct Ticked {
    range: Range<f64>,
    ticks: Vec<f64>,
    log: bool,
}

impl Ticked {
    /// A linear axis over `range` with ticks at `ticks`.
    fn linear(range: Range<f64>, ticks: Vec<f64>) -> Ticked {
        Ticked { range, ticks, log: false }
    }

    /// A log10 axis over `range` (both ends > 0) with ticks at 1-2-5 steps of each decade
    /// (more on a short range, powers of 10 only on a long one).
    fn log(range: Range<f64>) -> Ticked {
        let (lo, hi) = (range.start, range.end);
        let steps = |mantissas: &[f64]| -> Vec<f64> {
            let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
            (first..=last)
                .flat_map(|d| mantissas.iter().map(move |m| m * 10f64.powi(d)))
                .filter(|v| *v >= lo && *v <= hi)
                .collect()
        };
        let mut ticks = steps(&[1.0, 2.0, 5.0]);
        if ticks.len() < 4 {
            ticks = steps(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
            if ticks.len() > 12 {
                ticks = steps(&[1.0, 2.0, 3.0, 5.0]);
            }
        } else if ticks.len() > 12 {
            ticks = steps(&[1.0]);
        }
        Ticked { range, ticks, log: true }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        if self.log {
            let range = self.range.start.log10()..self.range.end.log10();
            RangedCoordf64::from(range).map(&value.max(f64::MIN_POSITIVE).log10(), limit)
        } else {
            RangedCoordf64::from(self.range.clone()).map(value, limit)
        }
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// The x axis of a bar panel of `n` bars at 0, 1, .., n - 1, at least 3 bars wide.
fn bar_axis(n: usize) -> Ticked {
    let pad = 3usize.saturating_sub(n) as f64 / 2.0;
    Ticked::linear(-0.5 - pad..n as f64 - 0.5 + pad, (0..n).map(|i| i as f64).collect())
}

/// A value axis tick (already in the axis' unit): up to 4 significant digits, so ticks such as
/// 0.0005 or 0.25 never read 0.
fn tick_label(v: f64) -> String {
    significant(v, 4)
}

/// `x` if finite and non-negative, else 0.
fn clean(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// An upper bound for an axis showing values up to `max` (room for the labels above bars,
/// and for a legend box of three lines when `legend`).
fn axis_max(max: f64, legend: bool) -> f64 {
    if max > 0.0 {
        max * if legend { 1.45 } else { 1.2 }
    } else {
        1.0
    }
}

/// Shows `message` in the middle of `area`, under `caption`.
fn draw_empty(area: &DrawingArea<SVGBackend, Shift>, caption: &str, message: &str) -> Result<(), ChartError> {
    let inner = area.titled(caption, ("sans-serif", 18).into_font()).map_err(draw_err)?;
    let (w, h) = inner.dim_in_pixel();
    let style = ("sans-serif", 16).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Center));
    inner.draw(&Text::new(message.to_string(), (w as i32 / 2, h as i32 / 2), style)).map_err(draw_err)
}

/// A figure of one bar: the mean over the repetitions (the value itself for one) and the
/// 95% confidence interval of the mean (`None` for one repetition), all [`clean`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct BarValue {
    mean: f64,
    ci95: Option<(f64, f64)>,
}

impl BarValue {
    fn one(v: f64) -> BarValue {
        BarValue { mean: clean(v), ci95: None }
    }

    /// From a summary's figure (0 when the summary lacks it).
    fn of(f: Option<&FigureStats>) -> BarValue {
        match f {
            Some(f) => BarValue {
                mean: clean(f.mean),
                ci95: f.ci95_low.zip(f.ci95_high).map(|(lo, hi)| (clean(lo), clean(hi))),
            },
            None => BarValue { mean: 0.0, ci95: None },
        }
    }

    /// The top of the bar with its error bar.
    fn top(&self) -> f64 {
        self.ci95.map_or(self.mean, |(_, hi)| hi.max(self.mean))
    }
}

/// One bar of the bar panels: a (server model, read path, phase of [`BAR_PHASES`]) over its
/// repetitions.
#[derive(Clone, Debug, PartialEq)]
struct Bar {
    series: Series,
    phase: String,
    /// Repetitions the figures are over.
    samples: u64,
    /// Throughput, MB/s (`mb_per_sec`).
    mb_per_sec: BarValue,
    /// Broker CPU, s/GB: the means of `user` and `sys`.
    cpu_user: f64,
    cpu_sys: f64,
    /// Their sum (`broker_cpu_s_per_gb`), with its interval.
    cpu: BarValue,
    /// Some entry of the bar was bound by the clients' CPU ([`crate::bench::attribution`]):
    /// its value is labelled `!` and the panel says what that means.
    client_bound: bool,
}

impl Bar {
    /// The bar's axis label: the series' name, `<name> mixed` for a mixed entry.
    fn label(&self) -> String {
        if self.phase == "catch_up" {
            self.series.name.clone()
        } else {
            format!("{} {}", self.series.name, self.phase)
        }
    }
}

/// The bars of `results`: one per (server model, read path, phase) of [`BAR_PHASES`], phase by
/// phase, combinations in order of first appearance. One entry gives its own figures; several (a repeated
/// run) give the mean and 95% interval of their [`results.summary`](Results::summary) entry,
/// or of [`summarize`] when the file has none that covers exactly these entries.
fn bars(results: &Results) -> Vec<Bar> {
    let mut bars = Vec::new();
    let qualified = results.compares_models();
    for phase in BAR_PHASES {
        let mut keys: Vec<EntryKey<'_>> = Vec::new();
        for p in results.paths.iter().filter(|p| p.phase == phase) {
            if !keys.contains(&p.key()) {
                keys.push(p.key());
            }
        }
        for key in keys {
            let entries: Vec<&PathResult> = results.paths.iter().filter(|p| p.key() == key).collect();
            let series = Series::of(entries[0], qualified);
            let bar = if let [p] = entries.as_slice() {
                let (user, sys) = (clean(p.broker_cpu.user_s_per_gb), clean(p.broker_cpu.sys_s_per_gb));
                Bar {
                    series,
                    phase: phase.to_string(),
                    samples: 1,
                    client_bound: p.bound_by == Some(crate::bench::results::BoundBy::ClientCpu),
                    mb_per_sec: BarValue::one(p.mb_per_sec),
                    cpu_user: user,
                    cpu_sys: sys,
                    cpu: BarValue::one(user + sys),
                }
            } else {
                let n = entries.len() as u64;
                let summary = results
                    .summary
                    .iter()
                    .find(|s| {
                        (s.server_model.as_deref(), s.read_path.as_str(), s.phase.as_str()) == key && s.samples == n
                    })
                    .cloned()
                    .or_else(|| {
                        let owned: Vec<PathResult> = entries.iter().map(|p| (*p).clone()).collect();
                        summarize(&owned).into_iter().next()
                    });
                let figure =
                    |metric: &str| summary.as_ref().and_then(|s| s.figures.iter().find(|f| f.metric == metric));
                Bar {
                    series,
                    phase: phase.to_string(),
                    samples: n,
                    client_bound: entries.iter().any(|p| p.bound_by == Some(crate::bench::results::BoundBy::ClientCpu)),
                    mb_per_sec: BarValue::of(figure("mb_per_sec")),
                    cpu_user: BarValue::of(figure("broker_cpu_user_s_per_gb")).mean,
                    cpu_sys: BarValue::of(figure("broker_cpu_sys_s_per_gb")).mean,
                    cpu: BarValue::of(figure("broker_cpu_s_per_gb")),
                }
            };
            bars.push(bar);
        }
    }
    bars
}

/// A bar panel's caption: `<phases> <what>`, with `mixed_note` after it when a mixed bar is
/// shown (`catch_up throughput`, `catch_up and mixed throughput (mixed: its drain)`).
fn bar_caption(bars: &[Bar], what: &str, mixed_note: &str) -> String {
    let has = |phase: &str| bars.iter().any(|b| b.phase == phase);
    match (has("catch_up"), has("mixed")) {
        (_, false) => format!("catch_up {what}"),
        (false, true) => format!("mixed {what} ({mixed_note})"),
        (true, true) => format!("catch_up and mixed {what} (mixed: {mixed_note})"),
    }
}

/// `N runs` (or `N-M runs` when the bars differ) when some bar is over more than one
/// repetition, for the error bars' legend: `mean of 3 runs, bars: 95% CI`.
fn runs_legend(counts: impl Iterator<Item = u64> + Clone) -> Option<String> {
    let (lo, hi) = counts.fold((u64::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    (hi > 1).then(|| {
        let n = if lo == hi { hi.to_string() } else { format!("{lo}-{hi}") };
        format!("mean of {n} runs, bars: 95% CI")
    })
}

/// An error bar from `lo` to `hi` at `x` (an I shape, caps 0.2 bars wide).
fn error_bar(x: f64, (lo, hi): (f64, f64)) -> PathElement<(f64, f64)> {
    let points = vec![(x - 0.1, hi), (x + 0.1, hi), (x, hi), (x, lo), (x - 0.1, lo), (x + 0.1, lo)];
    PathElement::new(points, ERROR_BAR_COLOR.stroke_width(2))
}

/// The legend mark of the error bars.
fn error_bar_mark((x, y): (i32, i32)) -> PathElement<(i32, i32)> {
    let points = vec![(x + 3, y - 6), (x + 11, y - 6), (x + 7, y - 6), (x + 7, y + 6), (x + 3, y + 6), (x + 11, y + 6)];
    PathElement::new(points, ERROR_BAR_COLOR.stroke_width(2))
}

/// Draws the error bars of `values` (scaled by `1 / size`), one per value with an interval,
/// labelled `legend` in the series labels.
fn draw_error_bars<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<Ticked, RangedCoordf64>>,
    values: &[BarValue],
    size: f64,
    legend: &str,
) -> Result<(), ChartError> {
    let elements: Vec<_> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.ci95.map(|(lo, hi)| error_bar(i as f64, (lo / size, hi / size))))
        .collect();
    chart.draw_series(elements).map_err(draw_err)?.label(legend).legend(error_bar_mark);
    Ok(())
}

/// Bars of `mb_per_sec` (the means, with 95% error bars in a repeated run), each labelled with
/// its value; the axis in the unit of the largest ([`Quantity::Throughput`]). Mixed bars are
/// lighter.
fn draw_throughput(area: &DrawingArea<SVGBackend, Shift>, bars: &[Bar], colors: &Palette) -> Result<(), ChartError> {
    let caption = bar_caption(bars, "throughput", "its drain");
    if bars.is_empty() {
        return draw_empty(area, &caption, "no catch_up entries");
    }
    let values: Vec<BarValue> = bars.iter().map(|b| b.mb_per_sec).collect();
    let legend = runs_legend(bars.iter().map(|b| b.samples));
    let max = values.iter().map(BarValue::top).fold(0.0, f64::max);
    let (size, unit) = Quantity::Throughput.unit(max);
    let top = axis_max(max / size, legend.is_some());
    let n = bars.len();
    let names: Vec<String> = bars.iter().map(Bar::label).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(bar_axis(n), 0.0..top)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .disable_x_mesh()
        .x_label_formatter(&|x| index_label(&names, *x))
        .y_label_formatter(&|y| tick_label(*y))
        .y_desc(format!("{unit} (higher is better)"))
        .draw()
        .map_err(draw_err)?;
    chart
        .draw_series(bars.iter().zip(&values).enumerate().map(|(i, (b, v))| {
            let x = i as f64;
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, v.mean / size)], bar_style(colors.series_color(&b.series), b))
        }))
        .map_err(draw_err)?;
    if let Some(legend) = &legend {
        draw_error_bars(&mut chart, &values, size, legend)?;
    }
    let label = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(values.iter().zip(bars).enumerate().map(|(i, (v, b))| {
            let mark = if b.client_bound { " !" } else { "" };
            Text::new(
                format!("{}{mark}", format_value(v.mean, Quantity::Throughput)),
                (i as f64, v.top() / size),
                label.clone(),
            )
        }))
        .map_err(draw_err)?;
    if bars.iter().any(|b| b.client_bound) {
        // The legend line of the mark: a client-bound bar measures the consumers.
        let note = ("sans-serif", 13).into_font().color(&RED).pos(Pos::new(HPos::Left, VPos::Top));
        chart
            .draw_series(std::iter::once(Text::new(
                "! bound by the clients' CPU: measures the consumers, not the read path".to_string(),
                (-0.45, top * 0.98),
                note,
            )))
            .map_err(draw_err)?;
    }
    if legend.is_some() {
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    Ok(())
}

/// A bar's fill: its read path's colour, lighter for a mixed entry.
fn bar_style(color: RGBColor, bar: &Bar) -> ShapeStyle {
    if bar.phase == "catch_up" {
        color.filled()
    } else {
        color.mix(0.55).filled()
    }
}

/// The series labels of a panel, at `position`.
fn draw_legend<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<Ticked, RangedCoordf64>>,
    position: SeriesLabelPosition,
) -> Result<(), ChartError> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(draw_err)
}

/// Stacked bars of broker CPU (`user` below, `sys` above; the means in a repeated run, with
/// a 95% error bar of their sum), s/GB.
fn draw_cpu(area: &DrawingArea<SVGBackend, Shift>, bars: &[Bar]) -> Result<(), ChartError> {
    let caption = bar_caption(bars, "broker CPU", "per GB of drain + tail");
    if bars.is_empty() {
        return draw_empty(area, &caption, "no catch_up entries");
    }
    let cpu: Vec<(f64, f64)> = bars.iter().map(|b| (b.cpu_user, b.cpu_sys)).collect();
    let totals: Vec<BarValue> = bars.iter().map(|b| b.cpu).collect();
    let legend = runs_legend(bars.iter().map(|b| b.samples));
    let tops = cpu.iter().zip(&totals).map(|((u, s), t)| (u + s).max(t.top()));
    let top = axis_max(tops.fold(0.0, f64::max), legend.is_some());
    let n = bars.len();
    let names: Vec<String> = bars.iter().map(Bar::label).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(bar_axis(n), 0.0..top)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .disable_x_mesh()
        .x_label_formatter(&|x| index_label(&names, *x))
        .y_label_formatter(&|y| tick_label(*y))
        .y_desc("CPU s/GB (lower is better)")
        .draw()
        .map_err(draw_err)?;
    let (user_color, sys_color) = (CPU_USER_COLOR, CPU_SYS_COLOR);
    chart
        .draw_series(cpu.iter().enumerate().map(|(i, (u, _))| {
            let x = i as f64;
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, *u)], user_color.filled())
        }))
        .map_err(draw_err)?
        .label("user")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], user_color.filled()));
    chart
        .draw_series(cpu.iter().enumerate().map(|(i, (u, s))| {
            let x = i as f64;
            Rectangle::new([(x - 0.3, *u), (x + 0.3, u + s)], sys_color.filled())
        }))
        .map_err(draw_err)?
        .label("sys")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], sys_color.filled()));
    if let Some(legend) = &legend {
        draw_error_bars(&mut chart, &totals, 1.0, legend)?;
    }
    let label = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(cpu.iter().zip(&totals).enumerate().map(|(i, ((u, s), t))| {
            Text::new(format_value(u + s, Quantity::CpuPerGb), (i as f64, (u + s).max(t.top())), label.clone())
        }))
        .map_err(draw_err)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// The label of the bar nearest to `x`: its read path name.
fn index_label(names: &[String], x: f64) -> String {
    let i = x.round();
    if i >= 0.0 && (i as usize) < names.len() && (x - i).abs() < 1e-6 {
        names[i as usize].clone()
    } else {
        String::new()
    }
}

/// The latency panel's data: its title and curves.
struct LatencyPanel {
    title: String,
    curves: Vec<Curve>,
}

/// One percentile curve: (nines, latency us) points.
struct Curve {
    series: Series,
    /// The legend's text: the series' name, `<name> mixed` for a mixed entry, ` raw` after
    /// a raw curve.
    label: String,
    /// `true` for the raw (not corrected) end-to-end view, drawn lighter.
    raw: bool,
    /// `true` for a mixed entry's curve when tail curves are drawn too.
    dashed: bool,
    points: Vec<(f64, f64)>,
}

fn decode(p: &PathResult, which: &'static str, l: &LatencyResult) -> Result<Latency, ChartError> {
    Latency::decode(&l.histogram).map_err(|source| ChartError::Histogram {
        read_path: p.read_path.clone(),
        phase: p.phase.clone(),
        which,
        source,
    })
}

/// The percentile curve of `latency` in (nines, us), [`CURVE_POINTS`] points.
fn curve_points(latency: &Latency) -> Vec<(f64, f64)> {
    let floor_us = LOWEST_NS as f64 / 1e3;
    (0..CURVE_POINTS)
        .map(|i| {
            let nines = MAX_NINES * i as f64 / (CURVE_POINTS - 1) as f64;
            let q = (1.0 - 10f64.powf(-nines)).clamp(0.0, 1.0);
            (nines, (latency.quantile_ns(q) as f64 / 1e3).max(floor_us))
        })
        .collect()
}

/// The histogram `which` (`get`) of the entries of `phase`, merged per (server model, read
/// path) (HdrHistogram add, so the percentiles are those of every repetition's values
/// together, never an average of percentiles): (series, merged histogram, entries merged), in
/// order of first appearance.
fn merged(
    results: &Results,
    phase: &str,
    which: &'static str,
    get: fn(&PathResult) -> &LatencyResult,
) -> Result<Vec<(Series, Latency, usize)>, ChartError> {
    let qualified = results.compares_models();
    let mut out: Vec<(Series, Latency, usize)> = Vec::new();
    for p in results.paths.iter().filter(|p| p.phase == phase) {
        let h = decode(p, which, get(p))?;
        match out.iter_mut().find(|(s, _, _)| s.key() == (p.server_model.as_deref(), p.read_path.as_str())) {
            Some((_, merged, n)) => {
                merged.merge(&h);
                *n += 1;
            }
            None => out.push((Series::of(p, qualified), h, 1)),
        }
    }
    Ok(out)
}

/// `, histograms of N runs merged` (`N-M` when the curves differ) when a curve merges more
/// than one repetition.
fn merged_note(counts: &[usize]) -> String {
    let (lo, hi) = counts.iter().fold((usize::MAX, 0), |(lo, hi), n| (lo.min(*n), hi.max(*n)));
    match hi {
        0 | 1 => String::new(),
        _ if lo == hi => format!(", histograms of {hi} runs merged"),
        _ => format!(", histograms of {lo}-{hi} runs merged"),
    }
}

/// Chooses the latency panel's data (see the [module docs](self)) and decodes its histograms,
/// those of the repetitions of a (read path, phase) merged into one curve ([`merged`]).
fn latency_curves(results: &Results) -> Result<LatencyPanel, ChartError> {
    let mut e2e = Vec::new();
    let mut counts = Vec::new();
    let mut phases = Vec::new();
    for phase in E2E_PHASES {
        let corrected = merged(results, phase, "end_to_end_latency.corrected", |p| &p.end_to_end_latency.corrected)?;
        let raw = merged(results, phase, "end_to_end_latency.raw", |p| &p.end_to_end_latency.raw)?;
        for ((series, corrected, n), (_, raw, _)) in corrected.into_iter().zip(raw) {
            let label = if phase == "tail" { series.name.clone() } else { format!("{} {phase}", series.name) };
            let curve = |raw: bool, label: String, h: &Latency| Curve {
                series: series.clone(),
                label,
                raw,
                dashed: phase == "mixed",
                points: curve_points(h),
            };
            if corrected.count() > 0 {
                e2e.push(curve(false, label.clone(), &corrected));
                counts.push(n);
                if !phases.contains(&phase) {
                    phases.push(phase);
                }
            }
            if raw.count() > 0 {
                e2e.push(curve(true, format!("{label} raw"), &raw));
            }
        }
    }
    if !phases.is_empty() {
        let what = match phases.as_slice() {
            ["tail"] => "tail end-to-end latency (corrected solid, raw light",
            ["mixed"] => "mixed end-to-end latency of the tail records (corrected solid, raw light",
            _ => "tail and mixed end-to-end latency (corrected solid, raw light; mixed dashed",
        };
        if phases.len() == 1 {
            e2e.iter_mut().for_each(|c| c.dashed = false);
        }
        return Ok(LatencyPanel { title: format!("{what}){}", merged_note(&counts)), curves: e2e });
    }
    let fetch = merged(results, "catch_up", "fetch_latency", |p| &p.fetch_latency)?;
    let poll = merged(results, "catch_up", "poll_latency", |p| &p.poll_latency)?;
    let curves = |hists: Vec<(Series, Latency, usize)>| -> (Vec<Curve>, Vec<usize>) {
        hists
            .into_iter()
            .filter(|(_, h, _)| h.count() > 0)
            .map(|(series, h, n)| {
                let points = curve_points(&h);
                let label = series.name.clone();
                (Curve { series, label, raw: false, dashed: false, points }, n)
            })
            .unzip()
    };
    let (fetch, fetch_counts) = curves(fetch);
    let (poll, poll_counts) = curves(poll);
    Ok(if !fetch.is_empty() {
        let title = format!("catch_up broker Fetch latency (no tail samples){}", merged_note(&fetch_counts));
        LatencyPanel { title, curves: fetch }
    } else if !poll.is_empty() {
        let title = format!("catch_up consumer poll latency (no tail or Fetch samples){}", merged_note(&poll_counts));
        LatencyPanel { title, curves: poll }
    } else {
        LatencyPanel { title: "latency".into(), curves: Vec::new() }
    })
}

/// "50%", "99.9%" for a position in nines.
fn percentile_label(nines: f64) -> String {
    let pct = 100.0 * (1.0 - 10f64.powf(-nines));
    let mut s = String::new();
    for decimals in 0..=4 {
        s.clear();
        let _ = write!(s, "{pct:.decimals$}");
        if (s.parse::<f64>().unwrap_or(0.0) - pct).abs() < 1e-6 {
            break;
        }
    }
    s.push('%');
    s
}

/// The percentile curves on a log latency axis against a log 1/(1-q) axis.
fn draw_latency(
    area: &DrawingArea<SVGBackend, Shift>,
    panel: &LatencyPanel,
    colors: &Palette,
) -> Result<(), ChartError> {
    if panel.curves.is_empty() {
        return draw_empty(area, &panel.title, "no latency samples");
    }
    let values = panel.curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = (lo / 1.5, hi * 1.5);
    let ticks = [0.0, 2f64.log10(), 1.0, 2.0, 3.0, 4.0];
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(10)
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(Ticked::linear(0.0..MAX_NINES, ticks.to_vec()), Ticked::log(lo..hi))
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .label_style(("sans-serif", 13))
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format_value(*y, Quantity::Latency))
        .x_desc("percentile")
        .y_desc("latency (lower is better)")
        .draw()
        .map_err(draw_err)?;
    for curve in &panel.curves {
        let color = colors.series_color(&curve.series);
        let style = if curve.raw { color.mix(0.4).stroke_width(1) } else { color.stroke_width(2) };
        if curve.dashed {
            chart
                .draw_series(std::iter::once(DashedPathElement::new(curve.points.clone(), 8, 5, style)))
                .map_err(draw_err)?
                .label(curve.label.clone())
                .legend(move |(x, y)| DashedPathElement::new(vec![(x, y), (x + 20, y)], 8, 4, style));
        } else {
            chart
                .draw_series(std::iter::once(PathElement::new(curve.points.clone(), style)))
                .map_err(draw_err)?
                .label(curve.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_bound_bar_is_marked_with_its_legend_line() {
        let r = crate::bench::results::tests::example_attributed();
        let svg = render_svg(&r).unwrap();
        assert_eq!(
            svg.matches("bound by the clients&apos;").count() + svg.matches("bound by the clients'").count(),
            1,
            "one legend line"
        );
        assert!(svg.contains(" !"), "the client-bound value is marked");
        let plain = render_svg(&crate::bench::results::example(1.0)).unwrap();
        assert!(!plain.contains("bound by the clients"), "no mark without a client-bound entry");
    }
    use crate::bench::results::{example, example_repeated, example_with_uring, LatencyResult};

    fn empty_latency() -> LatencyResult {
        LatencyResult::of(&Latency::new())
    }

    fn assert_clean(svg: &str) {
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("NaN"), "NaN in the SVG");
        assert!(!svg.contains("inf"), "infinity in the SVG");
    }

    #[test]
    fn the_example_shows_every_path_the_title_and_tail_latency() {
        let results = example(1.0);
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        for name in ["copy", "mmap", "sendfile"] {
            assert!(svg.contains(&format!(">\n{name}\n</text>")), "axis label {name}");
            assert!(svg.contains(&format!("{name} raw")), "legend of the raw curve of {name}");
        }
        let (headline, subtitle) = title(&results);
        assert!(svg.contains(&headline) && svg.contains(&subtitle), "title");
        assert!(
            headline.starts_with("default: 1 KiB records, 8 partitions, 1x4 consumers, page cache hot"),
            "{headline}"
        );
        assert!(subtitle.ends_with("Example CPU @ 2.00GHz (2 CPUs)"), "{subtitle}");
        assert!(svg.contains("tail end-to-end latency"));
        assert!(svg.contains("99.9%") && svg.contains("50%"), "percentile ticks");
        // The catch_up throughput of sendfile (900 * 1.6 MB/s) labels its bar, by magnitude.
        assert!(svg.contains(">\n1.44 GB/s\n</text>"), "bar label");
        assert!(svg.contains(">\nGB/s (higher is better)\n</text>"), "throughput axis");
        assert!(svg.contains(">\nCPU s/GB (lower is better)\n</text>"), "CPU axis");
        assert!(svg.contains(">\nlatency (lower is better)\n</text>"), "latency axis");
        // One repetition: no means, error bars or merged curves.
        assert!(!svg.contains("95% CI") && !svg.contains("#202020") && !svg.contains("merged"));
    }

    /// The mixed entries of `results`: each catch_up entry at half its throughput, with the
    /// end-to-end latency of the tail entry of its read path and repetition.
    fn mixed_entries(results: &Results) -> Vec<PathResult> {
        results
            .paths
            .iter()
            .filter(|p| p.phase == "catch_up")
            .map(|p| {
                let tail = results
                    .paths
                    .iter()
                    .find(|t| t.phase == "tail" && t.read_path == p.read_path && t.repetition == p.repetition)
                    .unwrap();
                PathResult {
                    phase: "mixed".into(),
                    mb_per_sec: p.mb_per_sec / 2.0,
                    produced_mb_per_sec: Some(10.5),
                    end_to_end_latency: tail.end_to_end_latency.clone(),
                    ..p.clone()
                }
            })
            .collect()
    }

    /// A repeated run: one bar per read path (the mean) with its 95% error bar, one curve per
    /// read path and view (the repetitions' histograms merged), and the chart says so.
    #[test]
    fn repeats_draw_means_with_intervals_and_merged_curves() {
        let results = example_repeated(&[1.0, 1.3, 0.8]);
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        for name in ["copy", "mmap", "sendfile"] {
            let labels = svg.matches(&format!(">\n{name}\n</text>")).count();
            assert_eq!(labels, 3, "{name}: a bar in each bar panel, one legend entry");
            assert_eq!(svg.matches(&format!(">\n{name} raw\n</text>")).count(), 1, "{name}: one raw curve");
        }
        // sendfile's mean: 900 * 1.6 * (1.0 + 1.3 + 0.8) / 3 = 1488 MB/s.
        assert!(svg.contains(">\n1.49 GB/s\n</text>"), "mean label");
        assert_eq!(svg.matches(">\nmean of 3 runs, bars: 95% CI\n</text>").count(), 2, "bar panels' legends");
        // 3 error bars in each bar panel, and the two legend marks.
        assert_eq!(svg.matches("stroke=\"#202020\"").count(), 3 + 3 + 2);
        assert!(svg
            .contains(">\ntail end-to-end latency (corrected solid, raw light), histograms of 3 runs merged\n</text>"));
    }

    /// The bars are the summary's means and intervals (or [`summarize`]'s without one), the
    /// curves those of the merged histograms, not of repetition 0.
    #[test]
    fn bars_are_the_summary_and_curves_the_merged_histograms() {
        let results = example_repeated(&[1.0, 1.3, 0.8]);
        let drawn = bars(&results);
        let keys: Vec<(&str, &str, u64)> =
            drawn.iter().map(|b| (b.series.read_path.as_str(), b.phase.as_str(), b.samples)).collect();
        assert_eq!(keys, [("copy", "catch_up", 3), ("mmap", "catch_up", 3), ("sendfile", "catch_up", 3)]);
        for b in &drawn {
            let s =
                results.summary.iter().find(|s| s.read_path == b.series.read_path && s.phase == "catch_up").unwrap();
            let figure = |m: &str| s.figures.iter().find(|f| f.metric == m).unwrap();
            let mb = figure("mb_per_sec");
            assert_eq!(
                b.mb_per_sec,
                BarValue { mean: mb.mean, ci95: Some((mb.ci95_low.unwrap(), mb.ci95_high.unwrap())) }
            );
            let values: Vec<f64> = results
                .paths
                .iter()
                .filter(|p| p.read_path == b.series.read_path && p.phase == "catch_up")
                .map(|p| p.mb_per_sec)
                .collect();
            let mean = values.iter().sum::<f64>() / 3.0;
            let (lo, hi) = b.mb_per_sec.ci95.unwrap();
            assert!((b.mb_per_sec.mean - mean).abs() < 1e-9 * mean && lo < mean && mean < hi, "{b:?} {values:?}");
            let cpu = figure("broker_cpu_s_per_gb");
            assert_eq!(b.cpu.mean, cpu.mean);
            assert!((b.cpu_user + b.cpu_sys - cpu.mean).abs() < 1e-9, "{b:?}");
            assert!(b.cpu.ci95.is_some_and(|(lo, hi)| lo < cpu.mean && cpu.mean < hi), "{b:?}");
        }
        let mut bare = results.clone();
        bare.summary.clear();
        assert_eq!(bars(&bare), drawn, "without a summary, the same statistics");

        let panel = latency_curves(&results).unwrap();
        assert_eq!(panel.curves.len(), 6, "corrected and raw per read path");
        let tails = || results.paths.iter().filter(|p| p.read_path == "copy" && p.phase == "tail");
        let mut all = Latency::new();
        for p in tails() {
            all.merge(&Latency::decode(&p.end_to_end_latency.corrected.histogram).unwrap());
        }
        assert_eq!(all.count(), 3_000);
        let curve = panel.curves.iter().find(|c| c.label == "copy").unwrap();
        assert_eq!(curve.points, curve_points(&all));
        let first = tails().find(|p| p.repetition == 0).unwrap();
        let first = Latency::decode(&first.end_to_end_latency.corrected.histogram).unwrap();
        assert_ne!(curve.points, curve_points(&first), "not repetition 0's curve");
    }

    /// Mixed entries are bars (their drain's MB/s, lighter) and end-to-end curves (dashed when
    /// tail curves are drawn too), each named `<read path> mixed`.
    #[test]
    fn mixed_entries_are_drawn_and_named() {
        let mut results = example(1.0);
        let mixed = mixed_entries(&results);
        results.paths.extend(mixed.clone());
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains(">\ncatch_up and mixed throughput (mixed: its drain)\n</text>"), "throughput caption");
        assert!(svg.contains(">\ncatch_up and mixed broker CPU (mixed: per GB of drain + tail)\n</text>"));
        assert_eq!(svg.matches(">\ncopy mixed\n</text>").count(), 3, "two bar labels and a legend entry");
        assert!(svg.contains(">\ncopy mixed raw\n</text>"));
        assert!(svg.contains(">\n450 MB/s\n</text>"), "copy's mixed drain");
        assert!(
            svg.contains(">\ntail and mixed end-to-end latency (corrected solid, raw light; mixed dashed)\n</text>")
        );
        assert!(svg.contains(">\ncopy\n</text>"), "the catch_up bars keep their names");

        results.paths = mixed;
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains(">\nmixed throughput (its drain)\n</text>"), "throughput caption");
        assert!(svg.contains(">\nmixed broker CPU (per GB of drain + tail)\n</text>"));
        assert!(svg.contains(">\nmixed end-to-end latency of the tail records (corrected solid, raw light)\n</text>"));
        assert!(!svg.contains("no catch_up entries") && svg.contains(">\nsendfile mixed\n</text>"));
    }

    #[test]
    fn empty_histograms_draw_placeholders() {
        let mut results = example(1.0);
        for p in &mut results.paths {
            p.fetch_latency = empty_latency();
            p.poll_latency = empty_latency();
            p.end_to_end_latency.raw = empty_latency();
            p.end_to_end_latency.corrected = empty_latency();
        }
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains("no latency samples"));
        assert!(svg.contains("sendfile"));

        results.paths.clear();
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains("no catch_up entries"));
    }

    #[test]
    fn without_tail_samples_the_fetch_then_poll_latency_is_drawn() {
        let mut results = example(1.0);
        results.paths.retain(|p| p.phase == "catch_up");
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains("catch_up broker Fetch latency"));
        for p in &mut results.paths {
            p.fetch_latency = empty_latency();
        }
        let svg = render_svg(&results).unwrap();
        assert!(svg.contains("catch_up consumer poll latency"));
    }

    #[test]
    fn a_single_path_and_odd_numbers() {
        let mut results = example(2.0);
        results.paths.retain(|p| p.read_path == "mmap");
        results.paths[0].mb_per_sec = f64::NAN;
        results.paths[0].broker_cpu.sys_s_per_gb = 0.0;
        results.paths[0].broker_cpu.user_s_per_gb = 0.0;
        results.machine.cpu_model = String::new();
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains("mmap") && !svg.contains("copy") && svg.contains("unknown CPU"));
    }

    #[test]
    fn a_bad_histogram_is_an_error() {
        let mut results = example(1.0);
        results.paths[1].end_to_end_latency.raw.histogram = "!!".into();
        let e = render_svg(&results).unwrap_err();
        assert!(e.to_string().starts_with("copy tail end_to_end_latency.raw: histogram is not valid base64"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = write_svg(&results, &dir.path().join("x.svg")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn write_svg_writes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.svg");
        write_svg(&example(1.0), &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() > 5_000, "{} bytes", text.len());
        assert_eq!(text, render_svg(&example(1.0)).unwrap());
        assert!(write_svg(&example(1.0), &dir.path().join("missing/results.svg")).is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(percentile_label(0.0), "0%");
        assert_eq!(percentile_label(2f64.log10()), "50%");
        assert_eq!(percentile_label(3.0), "99.9%");
        assert_eq!(percentile_label(4.0), "99.99%");
        assert_eq!(format_value(1.0, Quantity::Latency), "1us");
        assert_eq!(format_value(2_500.0, Quantity::Latency), "2.5ms");
        assert_eq!(format_value(3e6, Quantity::Latency), "3s");
        assert_eq!(tick_label(1440.4), "1440");
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(0.0005), "0.0005");
        assert_eq!(Ticked::log(250.0..4_500.0).ticks[..3], [300.0, 400.0, 500.0]);
        assert_eq!(Ticked::log(50.0..5_000.0).ticks, [50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0]);
        assert_eq!(Ticked::log(1.0..1e9).ticks.len(), 10);
        let axis = Ticked::log(10.0..1_000.0);
        assert_eq!((axis.map(&10.0, (0, 100)), axis.map(&100.0, (0, 100)), axis.map(&1_000.0, (0, 100))), (0, 50, 100));
        assert_eq!(bar_axis(1).range(), -1.5..1.5);
        assert_eq!(index_label(&["a".into(), "b".into()], 1.0), "b");
        assert_eq!(index_label(&["a".into()], 0.5), "");
    }

    /// Values by magnitude, small ones included (the old labels read them as 0).
    #[test]
    fn values_format_by_magnitude() {
        use Quantity::*;
        assert_eq!(format_value(0.0042 * 1e3, Throughput), "4.2 MB/s"); // 0.0042 GB/s
        assert_eq!(format_value(0.0042, Throughput), "4.2 KB/s");
        assert_eq!(format_value(0.0000042, Throughput), "4.2 B/s");
        assert_eq!(format_value(1440.4, Throughput), "1.44 GB/s");
        assert_eq!(format_value(12_345.0, Throughput), "12.3 GB/s");
        assert_eq!(format_value(999.9, Throughput), "1 GB/s"); // rounds up to the next unit
        assert_eq!(format_value(999.0, Throughput), "999 MB/s");
        assert_eq!(format_value(0.0, Throughput), "0 B/s");
        assert_eq!(format_value(f64::NAN, Throughput), "0 B/s");
        assert_eq!(format_value(0.003, CpuPerGb), "0.003 s/GB");
        assert_eq!(format_value(0.012345, CpuPerGb), "0.0123 s/GB");
        assert_eq!(format_value(1.2345, CpuPerGb), "1.23 s/GB");
        assert_eq!(format_value(850.0, Latency), "850us");
        assert_eq!(format_value(0.5, Latency), "0.5us");
        assert_eq!(format_value(12_345.0, Latency), "12.3ms");
        assert_eq!(format_value(1_500_000.0, Latency), "1.5s");
        assert_eq!(significant(-0.0001, 3), "-0.0001");
    }

    /// A run of small figures: bar labels and axis ticks carry their digits, not 0.
    #[test]
    fn small_values_do_not_read_zero() {
        let mut results = example(1.0);
        for p in &mut results.paths {
            p.mb_per_sec = 0.0042;
            p.broker_cpu.user_s_per_gb = 0.001;
            p.broker_cpu.sys_s_per_gb = 0.002;
        }
        let svg = render_svg(&results).unwrap();
        assert_clean(&svg);
        assert!(svg.contains(">\n4.2 KB/s\n</text>"), "bar label");
        assert!(svg.contains(">\nKB/s (higher is better)\n</text>"), "axis unit");
        assert!(svg.contains(">\n0.003 s/GB\n</text>"), "CPU bar label");
        // Ticks of 0..5.04 KB/s and 0..0.0036 s/GB: e.g. 1 and 0.001, besides 0.
        assert!(svg.contains(">\n1\n</text>") && svg.contains(">\n0.001\n</text>"), "ticks");
    }

    #[test]
    fn the_title_names_the_workload() {
        let mut w = Workload::default();
        assert_eq!(
            describe_workload(&w),
            "default: 1 KiB records, 8 partitions, 1x4 consumers, page cache hot; catch_up of a 1 GiB backlog, \
             tail at 10000 records/s"
        );
        w.name = "big".into();
        w.topics = 2;
        w.partitions = 1;
        w.record_size = 1000;
        w.consumer_groups = 3;
        w.consumers_per_group = 1;
        w.page_cache = PageCache::Cold;
        w.compression = Compression::Lz4;
        w.client = Client::Librdkafka;
        w.rate = Rate::MegabytesPerSec(7.5);
        w.phases = vec![Phase::Tail];
        assert_eq!(
            describe_workload(&w),
            "big: 1000 B records, 2 topics x 1 partition, 3x1 consumers (librdkafka), page cache cold, lz4 \
             compression; tail at 7.5 MB/s"
        );
        w.phases = vec![Phase::CatchUp];
        w.log_dir = Some("/data/kafka".into());
        assert!(describe_workload(&w).ends_with("; catch_up of a log_dir copy"));
        let mut results = example(1.0);
        results.interrupted = true;
        assert!(title(&results).0.ends_with("tail at 10000 records/s [interrupted]"), "{:?}", title(&results));
    }

    /// A run comparing server models: a bar and a curve per (model, path), named `model/path`,
    /// each bar with that combination's broker CPU; the uring series darker than its path's.
    #[test]
    fn combinations_of_server_models_are_named_model_slash_path() {
        let results = example_with_uring(1.0, |q| q.broker_cpu.sys_s_per_gb /= 2.0);
        let drawn = bars(&results);
        let labels: Vec<String> = drawn.iter().map(Bar::label).collect();
        assert_eq!(labels, ["threaded/copy", "threaded/mmap", "threaded/sendfile", "uring/uring-splice"]);
        let sendfile = drawn[2].cpu.mean;
        assert!((drawn[3].cpu.mean - (sendfile - 0.25 / 1.6)).abs() < 1e-9, "{drawn:?}");
        let svg = render_svg(&results).unwrap();
        assert!(svg.contains(">\nuring/uring-splice\n</text>") && svg.contains(">\nthreaded/copy\n</text>"), "{svg}");
        let dark = Palette::of(&results).series_color(&drawn[3].series);
        assert_eq!(dark, RGBColor(128, 23, 24), "uring-splice's red x 0.6");
        assert!(svg.contains("#801718"), "the uring series' colour is drawn");
        // threaded alone: names as before.
        assert_eq!(bars(&example(1.0))[0].label(), "copy");
    }

    /// No two series of a chart share a colour: every read path (and `external`), the other
    /// paths' colours and the CPU stacks are distinct, and far apart (RGB distance).
    #[test]
    fn the_palette_colours_are_distinct() {
        let mut named: Vec<(String, RGBColor)> = crate::read_path::ReadPathKind::ALL
            .iter()
            .map(|k| {
                (k.name().to_string(), path_color(k.name()).unwrap_or_else(|| panic!("{} has no colour", k.name())))
            })
            .collect();
        named.push(("external".into(), path_color("external").unwrap()));
        named.push(("user".into(), CPU_USER_COLOR));
        named.push(("sys".into(), CPU_SYS_COLOR));
        for (i, c) in OTHER_COLORS.iter().enumerate() {
            named.push((format!("other {i}"), *c));
        }
        for (i, (a, ca)) in named.iter().enumerate() {
            for (b, cb) in &named[i + 1..] {
                let d = ((ca.0 as f64 - cb.0 as f64).powi(2)
                    + (ca.1 as f64 - cb.1 as f64).powi(2)
                    + (ca.2 as f64 - cb.2 as f64).powi(2))
                .sqrt();
                assert!(d > 60.0, "{a} {ca:?} and {b} {cb:?} are too close ({d:.0})");
            }
        }
        // Unknown paths take the other colours in order of first appearance.
        let mut results = example(1.0);
        results.paths[0].read_path = "future".into();
        results.paths[2].read_path = "later".into();
        let palette = Palette::of(&results);
        assert_eq!((palette.color("future"), palette.color("later")), (OTHER_COLORS[0], OTHER_COLORS[1]));
        assert_eq!(palette.color("uring-splice"), RGBColor(214, 39, 40));
        // In the SVG: the sys stack's colour is not uring-splice's red.
        let svg = render_svg(&example(1.0)).unwrap();
        assert!(svg.contains("#B0B0B0") && svg.contains("#404040"), "CPU stacks' grays");
        assert!(!svg.contains("#D62728"), "uring-splice's red with no uring-splice entry");
    }
}
