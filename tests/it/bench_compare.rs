//! `fetchbench compare` on the committed results fixtures (fixtures/results/, made by
//! `bench::compare`'s `results_fixtures_are_current` test): exit 1 on a regression, 0 within
//! the threshold, 2 on bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/results").join(name)
}

fn compare(base: &str, new: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .arg("compare")
        .arg(fixture(base))
        .arg(fixture(new))
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn twenty_percent_slower_is_a_regression() {
    let out = compare("base.json", "slower-20pct.json", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("copy/catch_up") && stdout.contains("mb_per_sec"), "{stdout}");
    assert!(stdout.contains("REGRESSION") && stdout.contains("beyond 10.0%"), "{stdout}");
    // The same change passes a looser gate.
    let out = compare("base.json", "slower-20pct.json", &["--threshold", "30%"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

#[test]
fn two_percent_is_not_a_regression() {
    let out = compare("base.json", "within-2pct.json", &["--threshold", "10%"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no regression beyond 10.0%") && !stdout.contains("REGRESSION"), "{stdout}");
    assert!(stdout.contains("within-run ratios"), "{stdout}");
}

#[test]
fn bad_input_exits_2_with_a_clear_error() {
    let out = compare("base.json", "garbage.json", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("garbage.json: not a valid fetchbench-results v1 document: not JSON"), "{stderr}");
    let out = compare("base.json", "absent.json", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent.json"), "{}", text(&out));
    let out = compare("base.json", "base.json", &["--threshold", "lots"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threshold: expected a percentage"), "{}", text(&out));
}
