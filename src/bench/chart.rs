//! An SVG chart of one results file ([`Results`]), drawn with `plotters`' SVG backend.
//!
//! One [`WIDTH`] x [`HEIGHT`] pixel SVG document with a title (`results.date`, the workload's
//! `name`, the machine's `cpu_model` and `nproc`) and three panels:
//!
//! - top left: throughput of each read path in the `catch_up` phase, MB/s (1e6 bytes), bars;
//! - top right: broker CPU of the same entries, s/GB (1e9 bytes), `user` and `sys` stacked;
//! - bottom: latency percentile curves, one per read path, latency in microseconds on a
//!   log axis against the percentile on the usual log "1/(1-q)" axis (ticks at 0%, 50%, 90%,
//!   99%, 99.9%, 99.99%). The curves are the `tail` phase's end-to-end latency (coordinated
//!   omission corrected as solid lines, raw as lighter thin lines) when any tail entry has
//!   samples; otherwise the `catch_up` phase's broker-side Fetch latency, or its consumer
//!   `poll` latency when no Fetch latency was recorded (an external target). The panel's title
//!   says which; it says "no latency samples" when every histogram is empty.
//!
//! Values come from the histograms (ns, decoded with [`Latency::decode`]), not the summaries.
//! Latencies below 1 us (the histograms' lowest discernible value, [`LOWEST_NS`]) are drawn
//! at 1 us so the log axis has no zero. Non-finite numbers (never in a validated file) are
//! drawn as 0, so the SVG never holds `NaN`. Colours follow each read path's first appearance
//! in `results.paths` and are the same in every panel.
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
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::histogram::{HistogramError, Latency, LOWEST_NS};
use super::results::{LatencyResult, PathResult, Results};

/// Width of the chart, pixels.
pub const WIDTH: u32 = 1200;
/// Height of the chart, pixels.
pub const HEIGHT: u32 = 800;

/// Highest percentile drawn, in "nines" (`log10(1/(1-q))`): 4 = 99.99%.
const MAX_NINES: f64 = 4.0;
/// Points per latency curve (evenly spaced in nines from 0 to [`MAX_NINES`]).
const CURVE_POINTS: usize = 161;
/// Line colours, by read path (Tableau 10).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

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
pub fn render_svg(results: &Results) -> Result<String, ChartError> {
    let latency = latency_curves(results)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let body = root.titled(&title(results), ("sans-serif", 22).into_font()).map_err(draw_err)?;
        let (top, bottom) = body.split_vertically(HEIGHT as i32 * 2 / 5);
        let (left, right) = top.split_horizontally(WIDTH as i32 / 2);
        let catch_up: Vec<&PathResult> = results.paths.iter().filter(|p| p.phase == "catch_up").collect();
        let colors = path_colors(results);
        draw_throughput(&left, &catch_up, &colors)?;
        draw_cpu(&right, &catch_up)?;
        draw_latency(&bottom, &latency, &colors)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Renders `results` ([`render_svg`]) and writes the SVG to `path` (created or truncated).
/// Errors: those of [`render_svg`] (a histogram that does not decode is
/// [`io::ErrorKind::InvalidData`]) and of writing the file.
pub fn write_svg(results: &Results, path: &Path) -> io::Result<()> {
    let svg = render_svg(results)?;
    std::fs::write(path, svg)
}

/// The chart's title: date, workload name and machine.
fn title(results: &Results) -> String {
    let workload = results.workload.get("name").and_then(|v| v.as_str()).unwrap_or("unnamed workload");
    let cpu = if results.machine.cpu_model.is_empty() { "unknown CPU" } else { &results.machine.cpu_model };
    let mut t = format!("fetchbench: {workload}, {} on {cpu} ({} CPUs)", results.date, results.machine.nproc);
    if results.interrupted {
        t.push_str(" [interrupted]");
    }
    t
}

/// Each distinct read path, in order of first appearance: its index picks its colour.
fn path_colors(results: &Results) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &results.paths {
        if !names.contains(&p.read_path) {
            names.push(p.read_path.clone());
        }
    }
    names
}

fn color_of(colors: &[String], read_path: &str) -> RGBColor {
    let i = colors.iter().position(|c| c == read_path).unwrap_or(0);
    COLORS[i % COLORS.len()]
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

/// A value axis label: no decimals from 10 up, 2 significant-ish decimals below.
fn number_label(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// `x` if finite and non-negative, else 0.
fn clean(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

/// An upper bound for an axis showing values up to `max` (room for the labels above bars).
fn axis_max(max: f64) -> f64 {
    if max > 0.0 {
        max * 1.2
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

/// Bars of `mb_per_sec` for the catch-up entries, each labelled with its value.
fn draw_throughput(
    area: &DrawingArea<SVGBackend, Shift>,
    entries: &[&PathResult],
    colors: &[String],
) -> Result<(), ChartError> {
    let caption = "catch_up throughput, MB/s";
    if entries.is_empty() {
        return draw_empty(area, caption, "no catch_up entries");
    }
    let values: Vec<f64> = entries.iter().map(|p| clean(p.mb_per_sec)).collect();
    let top = axis_max(values.iter().copied().fold(0.0, f64::max));
    let n = entries.len();
    let names: Vec<String> = entries.iter().map(|p| p.read_path.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
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
        .y_label_formatter(&|y| number_label(*y))
        .y_desc("MB/s")
        .draw()
        .map_err(draw_err)?;
    chart
        .draw_series(entries.iter().zip(&values).enumerate().map(|(i, (p, v))| {
            let x = i as f64;
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, *v)], color_of(colors, &p.read_path).filled())
        }))
        .map_err(draw_err)?;
    let label = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(
            values.iter().enumerate().map(|(i, v)| Text::new(format!("{v:.0}"), (i as f64, *v), label.clone())),
        )
        .map_err(draw_err)?;
    Ok(())
}

/// Stacked bars of broker CPU (`user` below, `sys` above), s/GB, for the catch-up entries.
fn draw_cpu(area: &DrawingArea<SVGBackend, Shift>, entries: &[&PathResult]) -> Result<(), ChartError> {
    let caption = "catch_up broker CPU, s/GB";
    if entries.is_empty() {
        return draw_empty(area, caption, "no catch_up entries");
    }
    let cpu: Vec<(f64, f64)> =
        entries.iter().map(|p| (clean(p.broker_cpu.user_s_per_gb), clean(p.broker_cpu.sys_s_per_gb))).collect();
    let top = axis_max(cpu.iter().map(|(u, s)| u + s).fold(0.0, f64::max));
    let n = entries.len();
    let names: Vec<String> = entries.iter().map(|p| p.read_path.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
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
        .y_label_formatter(&|y| number_label(*y))
        .y_desc("CPU s/GB")
        .draw()
        .map_err(draw_err)?;
    let user_color = RGBColor(90, 90, 90);
    let sys_color = RGBColor(214, 39, 40);
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
    let label = ("sans-serif", 14).into_font().color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(
            cpu.iter()
                .enumerate()
                .map(|(i, (u, s))| Text::new(format!("{:.2}", u + s), (i as f64, u + s), label.clone())),
        )
        .map_err(draw_err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(draw_err)?;
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
    title: &'static str,
    curves: Vec<Curve>,
}

/// One percentile curve: (nines, latency us) points.
struct Curve {
    read_path: String,
    /// `true` for the raw (not corrected) end-to-end view, drawn lighter.
    raw: bool,
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

/// Chooses the latency panel's data (see the [module docs](self)) and decodes its histograms.
fn latency_curves(results: &Results) -> Result<LatencyPanel, ChartError> {
    let mut tail = Vec::new();
    for p in results.paths.iter().filter(|p| p.phase == "tail") {
        let corrected = decode(p, "end_to_end_latency.corrected", &p.end_to_end_latency.corrected)?;
        let raw = decode(p, "end_to_end_latency.raw", &p.end_to_end_latency.raw)?;
        if corrected.count() > 0 {
            tail.push(Curve { read_path: p.read_path.clone(), raw: false, points: curve_points(&corrected) });
        }
        if raw.count() > 0 {
            tail.push(Curve { read_path: p.read_path.clone(), raw: true, points: curve_points(&raw) });
        }
    }
    if tail.iter().any(|c| !c.raw) {
        return Ok(LatencyPanel { title: "tail end-to-end latency (corrected solid, raw light)", curves: tail });
    }
    let mut fetch = Vec::new();
    let mut poll = Vec::new();
    for p in results.paths.iter().filter(|p| p.phase == "catch_up") {
        let f = decode(p, "fetch_latency", &p.fetch_latency)?;
        if f.count() > 0 {
            fetch.push(Curve { read_path: p.read_path.clone(), raw: false, points: curve_points(&f) });
        }
        let l = decode(p, "poll_latency", &p.poll_latency)?;
        if l.count() > 0 {
            poll.push(Curve { read_path: p.read_path.clone(), raw: false, points: curve_points(&l) });
        }
    }
    Ok(if !fetch.is_empty() {
        LatencyPanel { title: "catch_up broker Fetch latency (no tail samples)", curves: fetch }
    } else if !poll.is_empty() {
        LatencyPanel { title: "catch_up consumer poll latency (no tail or Fetch samples)", curves: poll }
    } else {
        LatencyPanel { title: "latency", curves: Vec::new() }
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

/// "500us", "2ms", "1.5s" for a latency in microseconds.
fn latency_label(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "us")
    };
    let text = format!("{v:.1}");
    format!("{}{unit}", text.trim_end_matches('0').trim_end_matches('.'))
}

/// The percentile curves on a log latency axis against a log 1/(1-q) axis.
fn draw_latency(
    area: &DrawingArea<SVGBackend, Shift>,
    panel: &LatencyPanel,
    colors: &[String],
) -> Result<(), ChartError> {
    if panel.curves.is_empty() {
        return draw_empty(area, panel.title, "no latency samples");
    }
    let values = panel.curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = (lo / 1.5, hi * 1.5);
    let ticks = [0.0, 2f64.log10(), 1.0, 2.0, 3.0, 4.0];
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 18))
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
        .y_label_formatter(&|y| latency_label(*y))
        .x_desc("percentile")
        .y_desc("latency")
        .draw()
        .map_err(draw_err)?;
    for curve in &panel.curves {
        let color = color_of(colors, &curve.read_path);
        let (style, label) = if curve.raw {
            (color.mix(0.4).stroke_width(1), format!("{} raw", curve.read_path))
        } else {
            (color.stroke_width(2), curve.read_path.clone())
        };
        chart
            .draw_series(std::iter::once(PathElement::new(curve.points.clone(), style)))
            .map_err(draw_err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
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
    use crate::bench::results::{example, LatencyResult};

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
        let workload = results.workload["name"].as_str().unwrap();
        assert!(svg.contains(&title(&results)), "title");
        assert!(svg.contains(workload) && svg.contains("Example CPU @ 2.00GHz (2 CPUs)"), "title");
        assert!(svg.contains("tail end-to-end latency"));
        assert!(svg.contains("99.9%") && svg.contains("50%"), "percentile ticks");
        // The catch_up throughput of sendfile (900 * 1.6 MB/s) labels its bar.
        assert!(svg.contains(">\n1440\n</text>"), "bar label");
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
        assert_eq!(latency_label(1.0), "1us");
        assert_eq!(latency_label(2_500.0), "2.5ms");
        assert_eq!(latency_label(3e6), "3s");
        assert_eq!(number_label(1440.4), "1440");
        assert_eq!(number_label(0.5), "0.5");
        assert_eq!(Ticked::log(250.0..4_500.0).ticks[..3], [300.0, 400.0, 500.0]);
        assert_eq!(Ticked::log(50.0..5_000.0).ticks, [50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0]);
        assert_eq!(Ticked::log(1.0..1e9).ticks.len(), 10);
        let axis = Ticked::log(10.0..1_000.0);
        assert_eq!((axis.map(&10.0, (0, 100)), axis.map(&100.0, (0, 100)), axis.map(&1_000.0, (0, 100))), (0, 50, 100));
        assert_eq!(bar_axis(1).range(), -1.5..1.5);
        assert_eq!(index_label(&["a".into(), "b".into()], 1.0), "b");
        assert_eq!(index_label(&["a".into()], 0.5), "");
    }
}
