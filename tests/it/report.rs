//! `fetchbench report` (src/bench/report.rs) end to end: results files written here from
//! `results::example_repeated` (deterministic figures; one file from another machine, whose CPU
//! model holds markup), the page rendered by headless Chromium (Debian's `chromium` package,
//! installed by scripts/test.sh): a screenshot that is a PNG of the asked size and not blank
//! (the machines warning's background is in it), and the DOM after rendering, whose text holds
//! the figures of the files as the page formats them, the CPU models (the hostile one as text,
//! no script element) and the ratios to copy. `fetchbench compare` and `report` on files of
//! two machines say so. Bad input exits 2 naming the file.
//!
//! Chromium missing: the browser test fails in CI (`CI` set, not `false`) and skips with a
//! notice elsewhere, as the kcat tests do.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fetchbench::bench::results::{example, example_repeated, Results};

use crate::bench_run::{fetchbench, text};
use crate::common::{in_ci, run_with_timeout};

/// How long one Chromium invocation may take (its headless start is slow on 2 loaded cores).
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(120);
/// The screenshot's size, pixels.
const SHOT: (u32, u32) = (1280, 1600);
/// The machines warning's background (`div.warning`, #ffd7d2).
const WARNING_BACKGROUND: [u8; 3] = [0xff, 0xd7, 0xd2];

/// The run on the other machine: its CPU model holds markup, which must stay text.
const OTHER_CPU: &str = "Other CPU <script>alert(1)</script> @ 3.00GHz";

/// Two results files of two machines: `a.json` repeated three times (intervals), `b.json`
/// one repetition at 1.2 times the speed on [`OTHER_CPU`] with 16 CPUs.
fn write_results(dir: &Path) -> (PathBuf, Results, PathBuf, Results) {
    let a = example_repeated(&[0.9, 1.0, 1.1]);
    let mut b = example(1.2);
    b.machine.cpu_model = OTHER_CPU.into();
    b.machine.nproc = 16;
    let (pa, pb) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::write(&pa, a.to_json()).unwrap();
    std::fs::write(&pb, b.to_json()).unwrap();
    (pa, a, pb, b)
}

/// Whether Chromium can run: `false` (with a notice) outside CI, a panic in CI.
fn chromium_available() -> bool {
    let found = Command::new("chromium")
        .arg("--version")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("Chromium"))
        .unwrap_or(false);
    if found {
        return true;
    }
    if in_ci() {
        panic!("chromium not found: CI must render the report page (apt-get install chromium)");
    }
    eprintln!("SKIP: chromium not found; install the Debian package chromium to run this test");
    false
}

/// Chromium, headless, with its own profile in `profile`, and `args`.
fn chromium(profile: &Path, args: &[String]) -> crate::common::ChildOutput {
    let mut cmd = Command::new("chromium");
    // --disable-dev-shm-usage: a container's /dev/shm may be too small for Chromium.
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args);
    run_with_timeout(&mut cmd, None, CHROMIUM_TIMEOUT)
}

/// The page's text as a reader sees it: the serialized DOM without its tags, the five
/// entities HTML serialization writes decoded.
fn dom_text(dom: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in dom.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// A decoded PNG: width, height and its pixels' RGB (8-bit RGB or RGBA, not interlaced, as
/// Chromium writes screenshots). Panics on anything else.
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut header, mut data) = (8, None, Vec::new());
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let body = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => header = Some(body.to_vec()),
            b"IDAT" => data.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let header = header.expect("an IHDR chunk");
    let width = u32::from_be_bytes(header[0..4].try_into().unwrap());
    let height = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let (depth, color, interlace) = (header[8], header[9], header[12]);
    assert!(depth == 8 && (color == 2 || color == 6) && interlace == 0, "IHDR {header:?}");
    let bpp = if color == 2 { 3 } else { 4 };
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&data[..]).read_to_end(&mut raw).unwrap();
    let stride = width as usize * bpp;
    assert_eq!(raw.len(), height as usize * (stride + 1), "image data size");
    let mut prev = vec![0u8; stride];
    let mut pixels = Vec::with_capacity(width as usize * height as usize);
    for row in raw.chunks(stride + 1) {
        let (filter, line) = (row[0], &row[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= bpp { cur[i - bpp] } else { 0 };
            let (b, c) = (prev[i], if i >= bpp { prev[i - bpp] } else { 0 });
            let predictor = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => {
                    let p = i16::from(a) + i16::from(b) - i16::from(c);
                    let (pa, pb, pc) = ((p - i16::from(a)).abs(), (p - i16::from(b)).abs(), (p - i16::from(c)).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("PNG filter {f}"),
            };
            cur[i] = line[i].wrapping_add(predictor);
        }
        pixels.extend(cur.chunks(bpp).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    (width, height, pixels)
}

/// The page of two files of two machines in Chromium: a screenshot of the asked size with
/// more than one colour and the warning's background; the rendered text holds every entry's
/// MB/s, a statistic with its interval, both CPU models (the markup one as text), the ratio
/// to copy and the warning; the DOM has no script element.
#[test]
fn the_page_renders_in_chromium_with_the_figures_of_the_files() {
    if !chromium_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (pa, a, pb, b) = write_results(dir.path());
    let page = dir.path().join("report.html");
    let out = fetchbench().arg("report").arg(&pa).arg(&pb).arg("-o").arg(&page).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let url = format!("file://{}", page.display());

    let shot = dir.path().join("shot.png");
    let run = chromium(
        &dir.path().join("profile-shot"),
        &[format!("--screenshot={}", shot.display()), format!("--window-size={},{}", SHOT.0, SHOT.1), url.clone()],
    );
    assert!(run.status.is_some(), "chromium --screenshot: killed at its timeout\n{}", run.stderr);
    let bytes = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}): {}", run.stderr));
    let (width, height, pixels) = decode_png(&bytes);
    assert_eq!((width, height), SHOT);
    let colours: HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(colours.len() > 1, "a blank screenshot");
    let near = |p: &[u8; 3], q: [u8; 3]| p.iter().zip(q).all(|(x, y)| x.abs_diff(y) <= 3);
    let warning = pixels.iter().filter(|p| near(p, WARNING_BACKGROUND)).count();
    assert!(warning > 1000, "the machines warning is not drawn ({warning} pixels of its background)");

    let run = chromium(&dir.path().join("profile-dom"), &["--dump-dom".to_string(), url]);
    let dom = run.stdout_text();
    assert!(run.status.is_some_and(|s| s.success()), "chromium --dump-dom: {:?}\n{}", run.status, run.stderr);
    assert!(dom.contains("</html>"), "{dom}");
    assert!(!dom.to_lowercase().contains("<script"), "a script element got into the DOM");
    let shown = dom_text(&dom);
    for r in [&a, &b] {
        for p in &r.paths {
            assert!(shown.contains(&format!("{:.1}", p.mb_per_sec)), "MB/s {:.1} not shown", p.mb_per_sec);
        }
    }
    let copy = &a.summary.iter().find(|s| s.read_path == "copy" && s.phase == "catch_up").unwrap().figures[0];
    assert_eq!(copy.metric, "mb_per_sec");
    let interval = format!("{:.1} [{:.1}, {:.1}]", copy.mean, copy.ci95_low.unwrap(), copy.ci95_high.unwrap());
    assert!(shown.contains(&interval), "{interval} not shown");
    assert!(shown.contains(&a.machine.cpu_model) && shown.contains(OTHER_CPU), "the CPU models");
    assert!(shown.contains("These results come from 2 different machines."));
    // sendfile / copy in b.json (one repetition): 1.6 in every run of the example.
    let ratio =
        b.summary.iter().find(|s| s.read_path == "sendfile" && s.phase == "catch_up").unwrap().ratio_to_copy[0].mean;
    assert!(shown.contains(&format!("{ratio:.3}")), "the ratio to copy {ratio:.3} not shown");
    assert!(shown.contains("Ratio to copy") && shown.contains("sendfile catch_up"));
}

/// `compare` and `report` on files of two machines say so: compare's first line names the
/// fields, report's stderr and page warn; files of one machine get neither.
#[test]
fn compare_and_report_say_when_the_machines_differ() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, a, pb, _) = write_results(dir.path());
    let out = fetchbench().arg("compare").arg(&pa).arg(&pb).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    let expected = format!(
        "note: the machines differ (cpu_model: base {:?}, new {OTHER_CPU:?}; nproc: base \"2\", new \"16\")",
        a.machine.cpu_model
    );
    assert!(first.starts_with(&expected), "{}", text(&out));
    let page = dir.path().join("page.html");
    let out = fetchbench().arg("report").arg(&pa).arg(&pb).arg("--output").arg(&page).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("note: the results come from 2 different machines"), "{stderr}");
    assert!(stderr.contains(&format!("2 results file(s) -> {}", page.display())), "{stderr}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("id=\"machines-differ\""));

    // One machine: no note, no warning; `-o -` writes the page to stdout.
    let out = fetchbench().arg("compare").arg(&pa).arg(&pa).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("machines differ"), "{}", text(&out));
    let out = fetchbench().arg("report").arg(&pa).arg(&pa).args(["-o", "-"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(html.starts_with("<!DOCTYPE html>") && !html.contains("machines-differ"), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("different machines"));
}

/// A missing file, one that is not a results document, and no file at all: exit 2, naming
/// the file, and no page written.
#[test]
fn report_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, ..) = write_results(dir.path());
    let page = dir.path().join("page.html");
    let garbage = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/results/garbage.json");
    for (bad, expected) in
        [(dir.path().join("absent.json"), "absent.json"), (garbage, "garbage.json: not a valid fetchbench-results")]
    {
        let out = fetchbench().arg("report").arg(&pa).arg(&bad).arg("-o").arg(&page).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains(expected), "{}", text(&out));
        assert!(!page.exists(), "a page was written");
    }
    let out = fetchbench().arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
