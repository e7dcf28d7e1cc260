//! `scripts/two-hosts.sh` end to end (issue 17): `fetchbench serve` in one network namespace,
//! `fetchbench run --bootstrap` in another over a veth pair shaped with `tc`, and the cleanup
//! (the serve process, both namespaces, the veth pair) after a run that succeeded, a run that
//! failed and a script stopped by SIGTERM. Needs root and iproute2: skipped without them
//! outside CI, a failure in CI (`scripts/test.sh` installs iproute2; CI runs as root).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::bench_run::{only_results, text, write_workload};
use crate::common::in_ci;

/// The script, from the crate's root.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/two-hosts.sh")
}

/// Whether namespaces can be made here: root and `ip`. `false` (with a notice) outside CI, a
/// panic in CI.
fn can_run() -> bool {
    // SAFETY: geteuid reads the process's credentials; it takes no pointers.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if root && ip {
        return true;
    }
    assert!(!in_ci(), "CI must run the two-hosts test (root: {root}, iproute2: {ip})");
    eprintln!("NOTICE: two-hosts test skipped (root: {root}, iproute2: {ip})");
    false
}

/// The script with the test build's binary; the broker starts rebalances at once.
fn two_hosts(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(script())
        .args(["--bin", env!("CARGO_BIN_EXE_fetchbench")])
        .args(["--serve-arg", "-X", "--serve-arg", "group.initial.rebalance.delay.ms=0"])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

/// What of the script's run `pid` is left: its namespaces and its veth end in this namespace.
fn leftovers(pid: u32) -> Vec<String> {
    let namespaces = String::from_utf8(Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
    let links = String::from_utf8(Command::new("ip").args(["-o", "link"]).output().unwrap().stdout).unwrap();
    let mut left: Vec<String> = namespaces
        .lines()
        .filter(|l| l.contains(&format!("fb-srv-{pid}")) || l.contains(&format!("fb-cli-{pid}")))
        .map(str::to_string)
        .collect();
    left.extend(
        links
            .lines()
            .filter(|l| l.contains(&format!("fbs{pid}")) || l.contains(&format!("fbc{pid}")))
            .map(str::to_string),
    );
    left
}

/// Waits for `child` (killed after `limit`).
fn wait_output(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(limit);
        // SAFETY: kill takes a pid and a signal number; a pid already gone yields ESRCH.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    drop(killer);
    out
}

const TINY: &str = r#"
name = "two-hosts"
catch_up_duration = 0
partitions = 2
record_size = "1KiB"
backlog = "4MiB"
consumers_per_group = 2
rate = 1000
warmup = "500ms"
duration = "2s"
read_paths = ["copy", "sendfile"]
"#;

#[test]
fn a_run_across_two_namespaces_reports_and_cleans_up() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workload = write_workload(dir.path(), TINY);
    let results = dir.path().join("results");
    let child = two_hosts(&["--rate", "1gbit", "--", "--no-limits", "--results-dir"])
        .arg(&results)
        .arg(&workload)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = wait_output(child, Duration::from_secs(300));
    assert!(out.status.success(), "two-hosts.sh failed:\n{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("shaping: tbf rate 1gbit each way"), "{}", text(&out));
    let results = only_results(&results);
    assert_eq!(results.target, "bootstrap:10.250.0.1:9092");
    // serve's read path switched per combination, its figures read from its metrics endpoint.
    let entries: Vec<(Option<&str>, &str, &str)> =
        results.paths.iter().map(|p| (p.server_model.as_deref(), p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(
        entries,
        [
            (Some("threaded"), "copy", "catch_up"),
            (Some("threaded"), "copy", "tail"),
            (Some("threaded"), "sendfile", "catch_up"),
            (Some("threaded"), "sendfile", "tail"),
        ],
        "{}",
        text(&out)
    );
    for p in results.paths.iter().filter(|p| p.phase == "catch_up") {
        assert_eq!(p.records, 4096, "the whole 4 MiB backlog of 1 KiB records crossed the veth pair");
        assert!(p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb > 0.0, "{}: broker CPU", p.read_path);
        assert!(p.broker_rss_bytes > 0 && p.fetch_latency.summary.count > 0, "{}: broker figures", p.read_path);
    }
    let broker = results.broker.as_ref().expect("the broker is recorded");
    assert_eq!(broker.metrics.as_deref(), Some("10.250.0.1:9093"));
    assert!(broker.machine.is_some(), "the broker's machine_info");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the script left these behind");
}

#[test]
fn a_failed_run_still_cleans_up() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let child = two_hosts(&["--", "--no-limits", "/nonexistent/workload.toml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = wait_output(child, Duration::from_secs(120));
    assert!(!out.status.success(), "a missing workload must fail the script:\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cleaned up"), "{}", text(&out));
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the script left these behind");
    drop(dir);
}

#[test]
fn a_signal_stops_the_run_and_cleans_up() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A long tail: the script is stopped in the middle of the run.
    let workload = write_workload(dir.path(), &TINY.replace("duration = \"2s\"", "duration = \"120s\""));
    let child = two_hosts(&["--", "--no-limits", "--results-dir"])
        .arg(dir.path().join("results"))
        .arg(&workload)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let namespaces = [format!("fb-srv-{pid}"), format!("fb-cli-{pid}")];
    let deadline = Instant::now() + Duration::from_secs(60);
    let in_namespaces = || -> Vec<i32> {
        namespaces
            .iter()
            .flat_map(|ns| {
                let out = Command::new("ip").args(["netns", "pids", ns]).output().unwrap();
                String::from_utf8(out.stdout)
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect()
    };
    // Both sides running: serve in its namespace, run in the other (taken again after a while:
    // the script's probe of serve's port runs in the client's namespace for a moment).
    while in_namespaces().len() < 2 {
        assert!(Instant::now() < deadline, "serve and run never both started:\n{:?}", leftovers(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let processes = in_namespaces();
    assert!(processes.len() >= 2, "serve and run: {processes:?}");
    // SAFETY: kill takes the script's pid and a signal number.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = wait_output(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(143), "{}", text(&out));
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the script left these behind");
    for p in processes {
        // SAFETY: signal 0 only checks that the pid exists.
        let alive = unsafe { libc::kill(p, 0) } == 0;
        assert!(!alive, "process {p} of the namespaces outlived the script");
    }
}
