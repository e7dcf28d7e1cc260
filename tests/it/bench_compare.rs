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
    let expected = format!(
        "garbage.json: not a valid fetchbench-results v{} document: not JSON",
        fetchbench::bench::results::SCHEMA_VERSION
    );
    assert!(stderr.contains(&expected), "{stderr}");
    let out = compare("base.json", "absent.json", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absent.json"), "{}", text(&out));
    let out = compare("base.json", "base.json", &["--threshold", "lots"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threshold: expected a percentage"), "{}", text(&out));
}

/// `scripts/ci-gate.sh --skip-run NEW.json`: the gate's compare step on the fixtures, with this
/// build's binary (`FETCHBENCH_BIN`, so nothing is built): exit 1 on a regression, 0 within the
/// threshold, 2 on bad input (before comparing anything).
#[test]
fn ci_gate_exits_with_the_comparison_verdict() {
    let root = env!("CARGO_MANIFEST_DIR");
    let gate = |args: &[&str]| {
        Command::new("bash")
            .arg("scripts/ci-gate.sh")
            .args(args)
            .current_dir(root)
            .env("FETCHBENCH_BIN", env!("CARGO_BIN_EXE_fetchbench"))
            .output()
            .unwrap()
    };
    let base = "fixtures/results/base.json";
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", base]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("REGRESSION") && stdout.contains("beyond 10.0%"), "the compare table: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ci-gate: FAILED: the regression showed in all 3 attempts"), "{}", text(&out));
    assert_eq!(stderr.matches("attempt ").count(), 3, "three attempts: {}", text(&out));
    // Only the gated metrics count: major faults are 0 in both files, never a regression.
    let out = gate(&[
        "--skip-run",
        "fixtures/results/slower-20pct.json",
        "--baseline",
        base,
        "--metrics",
        "major_faults_per_gb",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", base, "--metrics", "speed"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown metric \"speed\""), "{}", text(&out));

    let out = gate(&["--skip-run", "fixtures/results/within-2pct.json", "--baseline", base]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no regression beyond 10.0%"), "{}", text(&out));
    // --threshold reaches compare: 20% slower passes a 30% gate.
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", base, "--threshold=30%"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    let out = gate(&["--skip-run", "fixtures/results/garbage.json", "--baseline", base]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = gate(&["--skip-run", "fixtures/results/within-2pct.json", "--baseline", base, "--threshold", "lots"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threshold: expected a percentage"), "{}", text(&out));
    let out = gate(&["--skip-run", "fixtures/results/within-2pct.json", "--baseline", "fixtures/results/absent.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no baseline at fixtures/results/absent.json"),
        "{}",
        text(&out)
    );
    // --update-baseline copies a valid new file over the baseline (and exits 0 even on a
    // regression), never an invalid one.
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline.json");
    std::fs::copy(fixture("base.json"), &baseline).unwrap();
    let b = baseline.to_str().unwrap();
    let out = gate(&["--skip-run", "fixtures/results/garbage.json", "--baseline", b, "--update-baseline"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(std::fs::read(&baseline).unwrap(), std::fs::read(fixture("base.json")).unwrap());
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", b, "--update-baseline"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("REGRESSION"), "the comparison is shown: {}", text(&out));
    assert_eq!(std::fs::read(&baseline).unwrap(), std::fs::read(fixture("slower-20pct.json")).unwrap());
    let out = gate(&["--no-such-option"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument: --no-such-option"), "{}", text(&out));
}

/// The gate's workload (fixtures/workloads/ci-gate.toml) parses, is one resolved workload and
/// is the short one the script promises.
#[test]
fn ci_gate_workload_is_short_and_resolved() {
    use fetchbench::bench::workload::{Phase, Workload};
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads/ci-gate.toml");
    let w = Workload::from_file(&path).unwrap();
    assert!(w.is_resolved(), "{w:?}");
    assert_eq!(w.phases, [Phase::CatchUp, Phase::Tail]);
    assert_eq!(w.backlog_bytes, 2 << 30);
    assert_eq!((w.warmup.as_secs(), w.duration.as_secs()), (1, 5));
    assert_eq!(w.consumers_per_group, 2);
    let paths: Vec<&str> = w.read_paths.iter().map(|p| p.name()).collect();
    assert_eq!(paths, ["copy", "mmap", "sendfile", "uring-splice"]);
}
