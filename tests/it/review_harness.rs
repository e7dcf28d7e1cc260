//! Regressions from the adversarial review of the benchmark harness (issue 7: `fetchbench run`,
//! workloads, results, `compare`). Each test states the expected behaviour; each failed against
//! the harness as reviewed (commit 925a6ad).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fetchbench::bench::workload::Workload;

use crate::bench_run::{fetchbench, only_results, run_ok, text, write_workload};

/// `payload_file` is a workload property ("values are cut from this file instead of generated
/// bytes"): the tail phase's producers must use it too. With an incompressible payload and
/// zstd, each tail record costs about `record_size` bytes of batch, as in the catch-up phase;
/// the reviewed harness sent its generated, highly compressible pattern instead (56 B per
/// 1 KiB record, while the catch-up backlog of the same workload took 1038 B per record).
#[test]
fn tail_phase_uses_the_payload_file() {
    let dir = tempfile::tempdir().unwrap();
    // Incompressible bytes (xorshift), 256 KiB.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let payload: Vec<u8> = (0..256 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let payload_path = dir.path().join("payload.bin");
    std::fs::write(&payload_path, payload).unwrap();
    let workload = write_workload(
        dir.path(),
        &format!(
            r#"
name = "payload"
partitions = 2
record_size = 1024
payload_file = "{}"
compression = "zstd"
rate = 1000
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "2s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
            payload_path.display()
        ),
    );
    let r = run_ok(&workload, &dir.path().join("results"), &["--quiet"], "the run");
    let tail = r.paths.iter().find(|p| p.phase == "tail").expect("a tail entry");
    assert!(tail.records > 0, "{tail:?}");
    let per_record = tail.bytes as f64 / tail.records as f64;
    assert!(
        per_record >= 0.9 * 1024.0,
        "tail: {per_record:.1} batch bytes per record of an incompressible 1 KiB payload under zstd: \
         the producers did not use payload_file"
    );
}

/// `git` in the results is "the source the binary was built from" (results.rs); the reviewed
/// harness ran `git rev-parse HEAD` in the current directory, so a run started inside any
/// other repository recorded that repository's commit and dirty flag.
#[test]
fn results_git_is_not_the_working_directorys_repository() {
    let has_git = Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success());
    if !has_git {
        eprintln!("skipped: no git");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("other-repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(["-c", "user.email=r@example.com", "-c", "user.name=review"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "unrelated"]);
    let other_head = git(&["rev-parse", "HEAD"]);
    let workload = write_workload(
        dir.path(),
        r#"
name = "git"
partitions = 1
record_size = 64
rate = 200
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "1s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r = only_results(&results_dir);
    assert_ne!(
        r.git.commit.as_deref(),
        Some(other_head.as_str()),
        "the results name the commit of the directory the run started in, not fetchbench's"
    );
}

/// `--quiet` is "for scripts": a successful run prints nothing. The reviewed harness let the
/// embedded broker's `WARN ... reading a frame; closing` log lines (a tail consumer closing)
/// through to stderr on every such run.
#[test]
fn quiet_run_prints_nothing_on_success() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "quiet"
partitions = 2
record_size = 256
rate = 500
phases = ["tail"]
backlog = 0
warmup = "0s"
duration = "1s"
consumers_per_group = 2
read_paths = ["copy", "mmap", "sendfile"]

[consumer_config]
"fetch.max.wait.ms" = 10
"#,
    );
    let results_dir = dir.path().join("results");
    let out = fetchbench()
        .args(["run", "--no-limits", "--quiet", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "--quiet printed:\n{}", text(&out));
}

/// Ctrl-C while the tail phase is still in its warmup: nothing was measured, so the results
/// must not hold an entry claiming broker CPU per GB computed over 0 bytes (the reviewed
/// harness wrote `seconds = 1e-9`, `bytes = 0` and broker CPU of ~1e11 s/GB, which `compare`
/// and the chart then treat as a measurement).
#[test]
fn ctrl_c_in_tail_warmup_reports_no_cost_over_zero_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "int"
partitions = 1
record_size = 256
rate = 500
phases = ["tail"]
backlog = 0
warmup = "30s"
duration = "5s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let mut child = fetchbench()
        .args(["run", "--no-limits", "--results-dir"])
        .arg(&results_dir)
        .arg(&workload)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // stderr is not a terminal: progress comes as `fetchbench: copy: tail` lines.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("copy: tail") {
                let _ = tx.send(());
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the tail phase started");
    // Past the group join, inside the 30 s warmup.
    std::thread::sleep(Duration::from_secs(3));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let r = only_results(&results_dir);
    assert!(r.interrupted);
    for p in &r.paths {
        if p.bytes == 0 {
            let costs = [
                p.broker_cpu.user_s_per_gb,
                p.broker_cpu.sys_s_per_gb,
                p.consumer_cpu.user_s_per_gb,
                p.consumer_cpu.sys_s_per_gb,
                p.context_switches_per_gb,
                p.minor_faults_per_gb,
            ];
            assert!(
                costs.iter().all(|&c| c == 0.0),
                "{} {}: 0 bytes measured in {} s, yet per-GB costs {costs:?}",
                p.read_path,
                p.phase,
                p.seconds
            );
        }
    }
}

/// "A bad workload file gets an error that names the key and the allowed values": a
/// `[consumer_config]` name no consumer knows must be refused when the file is loaded (the
/// reviewed harness accepted it, wrote the backlog, started the broker, and only then failed
/// with `consumer_config.foo.bar: ... unknown consumer config`).
#[test]
fn unknown_consumer_config_is_refused_when_the_workload_loads() {
    let e = Workload::parse("[consumer_config]\n\"fetch.min.bytez\" = 1\n")
        .expect_err("an unknown consumer config name must be refused at load time");
    let msg = e.to_string();
    assert!(msg.contains("fetch.min.bytez"), "{msg}");
    let e = Workload::parse("[consumer_config]\n\"fetch.min.bytes\" = \"abc\"\n")
        .expect_err("a consumer config value the client cannot take must be refused at load time");
    assert!(e.to_string().contains("fetch.min.bytes"), "{e}");
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

/// Results files are named `<UTC second>-<workload name>.json`: two runs of one workload that
/// start in the same second (parallel runs, scripts looping over short runs) must not
/// overwrite each other's results. The reviewed harness wrote both to the same three files
/// and exited 0 twice, silently losing one run.
#[test]
fn runs_in_the_same_second_do_not_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(
        dir.path(),
        r#"
name = "same-second"
partitions = 1
record_size = 64
backlog = "64KiB"
phases = ["catch_up"]
warmup = "0s"
consumers_per_group = 1
read_paths = ["copy"]
"#,
    );
    let results_dir = dir.path().join("results");
    let children: Vec<_> = (0..3)
        .map(|_| {
            fetchbench()
                .args(["run", "--no-limits", "--quiet", "--results-dir"])
                .arg(&results_dir)
                .arg(&workload)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let json = std::fs::read_dir(&results_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|e| e == "json"))
        .count();
    assert_eq!(json, 3, "3 successful runs, {json} results files");
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
