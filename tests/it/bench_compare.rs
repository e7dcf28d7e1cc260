//! `fetchbench compare` on the committed results fixtures (fixtures/results/, made by
//! `bench::compare`'s `results_fixtures_are_current` test): exit 1 on a regression, 0 within
//! the threshold, 2 on bad input; on repeated results written here from
//! `results::example_repeated` (deterministic spread and shift): Welch's t-test; on a version 2
//! file: the threshold rule; version 3 and 4 files (and the committed CI baseline) still read,
//! as `threaded`;
//! `fetchbench read-paths` documents compare, the old `fetchbench-read-paths` v1 ones are refused.
//! A file with the same (read path, phase) twice is refused (exit 2), and the CI gate's committed
//! baseline (`results/baseline.json`) is a valid results file.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::bench_run::fetchbench;

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
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", base, "--attempts", "3"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("REGRESSION") && stdout.contains("beyond 10.0%"), "the compare table: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ci-gate: FAILED: the regression showed in all 3 attempts"), "{}", text(&out));
    assert_eq!(stderr.matches("attempt ").count(), 3, "three attempts: {}", text(&out));
    // By default one attempt: the repeats of one run carry the noise.
    let out = gate(&["--skip-run", "fixtures/results/slower-20pct.json", "--baseline", base]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ci-gate: FAILED: a regression beyond 10%"), "{}", text(&out));
    assert_eq!(stderr.matches("attempt ").count(), 1, "one attempt: {}", text(&out));
    let out = gate(&["--skip-run", "fixtures/results/within-2pct.json", "--baseline", base, "--repeat", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--repeat: expected a positive integer"), "{}", text(&out));
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
    assert_eq!(w.phases, [Phase::CatchUp]);
    assert_eq!(w.backlog_bytes, 1 << 30);
    assert_eq!((w.warmup.as_secs(), w.catch_up_duration.as_secs()), (1, 3));
    assert_eq!(w.consumers_per_group, 2);
    let paths: Vec<&str> = w.read_paths.iter().map(|p| p.name()).collect();
    assert_eq!(paths, ["copy", "mmap", "sendfile", "uring-splice"]);
}

/// Repeated results with a deterministic spread of +-12% (sample sd 9.5%) per file, written
/// into `dir`: `base` at speed 1, `slower` 20% slower (the same deviations in another order),
/// `noise` the same deviations in a third order (no shift).
fn repeated_files(dir: &std::path::Path) -> [PathBuf; 3] {
    use fetchbench::bench::results::example_repeated;
    let spread = [-0.12, -0.06, 0.0, 0.06, 0.12];
    let speeds = |scale: f64, order: [usize; 5]| order.map(|i| scale * (1.0 + spread[i]));
    let files = [
        ("repeated-base.json", speeds(1.0, [0, 1, 2, 3, 4])),
        ("repeated-slower-20pct.json", speeds(0.8, [3, 0, 4, 2, 1])),
        ("repeated-noise.json", speeds(1.0, [4, 2, 0, 1, 3])),
    ];
    files.map(|(name, s)| {
        let p = dir.join(name);
        std::fs::write(&p, example_repeated(&s).to_json()).unwrap();
        p
    })
}

/// The test: a real 20% regression with 5 samples each is flagged (Welch's t-test,
/// named with its p-value), noise of the same spread with no shift is not, also through
/// `scripts/ci-gate.sh`.
#[test]
fn repeated_samples_are_judged_by_welchs_t_test() {
    let dir = tempfile::tempdir().unwrap();
    let [base, slower, noise] = repeated_files(dir.path());
    let run = |b: &PathBuf, n: &PathBuf| {
        Command::new(env!("CARGO_BIN_EXE_fetchbench")).arg("compare").arg(b).arg(n).output().unwrap()
    };
    let out = run(&base, &slower);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let copy_mb = stdout.lines().find(|l| l.starts_with("copy/catch_up") && l.contains(" mb_per_sec ")).unwrap();
    assert!(copy_mb.contains("5/5") && copy_mb.contains("welch t-test, p = 0.00"), "{copy_mb}");
    assert!(copy_mb.ends_with("REGRESSION"), "{copy_mb}");
    assert!(stdout.contains("one-sided Welch t-test significant at alpha 0.05"), "{stdout}");
    assert!(stdout.contains("mb_per_sec 1.600 [1.600, 1.600]"), "within-run ratios with intervals: {stdout}");

    let out = run(&base, &noise);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("no regression beyond 10.0%") && !stdout.contains("REGRESSION"), "{stdout}");
    assert!(stdout.contains("welch t-test, p = 0.500"), "{stdout}");

    let root = env!("CARGO_MANIFEST_DIR");
    let gate = |new: &PathBuf| {
        Command::new("bash")
            .arg("scripts/ci-gate.sh")
            .arg("--skip-run")
            .arg(new)
            .arg("--baseline")
            .arg(&base)
            .current_dir(root)
            .env("FETCHBENCH_BIN", env!("CARGO_BIN_EXE_fetchbench"))
            .output()
            .unwrap()
    };
    let out = gate(&slower);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("welch t-test"), "{}", text(&out));
    assert_eq!(gate(&noise).status.code(), Some(0));
}

/// A version 2 results file (the committed `base-v2.json`, as the harness wrote them before
/// repeats) still compares, by the threshold rule, against version 2 and 3 files.
#[test]
fn version_2_files_still_compare() {
    let out = compare("base-v2.json", "slower-20pct.json", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("threshold rule alone") && stdout.contains("REGRESSION"), "{stdout}");
    assert!(!stdout.contains("welch"), "{stdout}");
    assert!(!stdout.contains("the workloads differ"), "{stdout}");
    let out = compare("base-v2.json", "base-v2.json", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = compare("base.json", "base-v2.json", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let dir = tempfile::tempdir().unwrap();
    let [_, slower, _] = repeated_files(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .arg("compare")
        .arg(fixture("base-v2.json"))
        .arg(&slower)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "1 sample against 5: the threshold rule: {}", text(&out));
}

/// Version 3 files (as the harness wrote them before `read-paths` documents) still compare,
/// and so does `results/baseline.json`, the baseline `scripts/ci-gate.sh` compares against.
#[test]
fn version_3_files_and_the_ci_baseline_still_compare() {
    let out = compare("base-v3.json", "slower-20pct.json", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("REGRESSION"), "{}", text(&out));
    let out = compare("base.json", "base-v3.json", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("differ"), "{}", text(&out));
    let baseline = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/baseline.json");
    let out =
        Command::new(env!("CARGO_BIN_EXE_fetchbench")).arg("compare").arg(&baseline).arg(&baseline).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// Version 4 files (before server models) read as `threaded`: they match a version 5 file's
/// `threaded` entries, entry for entry.
#[test]
fn version_4_files_compare_as_threaded() {
    let out = compare("base-v4.json", "slower-20pct.json", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("copy/catch_up"), "{}", text(&out));
    let out = compare("base-v4.json", "base.json", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("only in the new") && !stdout.contains("differ"), "{stdout}");
}

/// Two `fetchbench read-paths` documents compare (phase `loopback`); the `fetchbench-read-paths`
/// v1 document of the old `read-paths --json` is refused (exit 2) naming the file, the old
/// schema and what to do, on either side.
#[test]
fn read_paths_documents_compare_and_old_ones_are_refused() {
    let out = compare("read-paths.json", "read-paths.json", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("sendfile/loopback") && stdout.contains("no regression"), "{stdout}");
    for (base, new) in [("read-paths-v1.json", "read-paths.json"), ("read-paths.json", "read-paths-v1.json")] {
        let out = compare(base, new, &[]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("read-paths-v1.json: a fetchbench-read-paths v1 document"), "{stderr}");
        assert!(stderr.contains("re-run `fetchbench read-paths --json`"), "{stderr}");
    }
}

/// `compare` matches entries by (read path, phase): a file holding the same pair twice is
/// ambiguous (which one is compared?) and must be refused as bad input (exit 2); the reviewed
/// harness compared one of them silently and exited 0.
#[test]
fn compare_refuses_duplicate_entries() {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/results/base.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let paths = doc["paths"].as_array_mut().unwrap();
    let mut dup = paths[0].clone();
    dup["mb_per_sec"] = serde_json::json!(paths[0]["mb_per_sec"].as_f64().unwrap() * 0.5);
    paths.push(dup);
    let dir = tempfile::tempdir().unwrap();
    let doctored = dir.path().join("dup.json");
    std::fs::write(&doctored, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = fetchbench().arg("compare").arg(&base).arg(&doctored).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// "`scripts/ci-gate.sh` runs a short workload and compares it with a baseline committed under
/// `results/`" and "passes against the committed baseline": the script's default baseline,
/// `results/baseline.json`, must be in the tree and be a valid results file (the reviewed tree
/// had only `results/README.md`, so `scripts/ci-gate.sh` exits 2 with "no baseline").
#[test]
fn the_ci_gate_baseline_is_committed_and_valid() {
    let baseline = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/baseline.json");
    assert!(baseline.is_file(), "no committed baseline at {}", baseline.display());
    let out = fetchbench().arg("compare").arg(&baseline).arg(&baseline).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}
