//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real-world corpus directory, or `None` (with a printed notice) when it is absent outside
/// CI. In CI (`CI` set to anything but `false`/empty) a missing corpus panics: the tests that
/// prove compatibility must not silently skip.
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("FETCHBENCH_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    if dir.join("README.md").is_file() {
        return Some(dir);
    }
    let in_ci = std::env::var("CI").map(|v| !v.is_empty() && v != "false").unwrap_or(false);
    if in_ci {
        panic!("corpus not found at {} (set FETCHBENCH_CORPUS); CI must run the corpus tests", dir.display());
    }
    eprintln!("SKIP: corpus not found at {}; set FETCHBENCH_CORPUS to run this test", dir.display());
    None
}

/// Every file under `dir` (recursively) whose name ends with `suffix`, sorted.
pub fn files_with_suffix(dir: &std::path::Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().unwrap().to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Whether this is a CI run (`CI` set to anything but `false` or empty): real-client tests then
/// fail instead of skipping when their client is missing.
pub fn in_ci() -> bool {
    std::env::var("CI").map(|v| !v.is_empty() && v != "false").unwrap_or(false)
}

/// What a child process did.
pub struct ChildOutput {
    /// Exit status; `None` when it was killed at the timeout.
    pub status: Option<std::process::ExitStatus>,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr (lossy UTF-8).
    pub stderr: String,
}

impl ChildOutput {
    /// stdout as text (lossy UTF-8).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Panics with both outputs unless the child exited 0 in time; returns stdout as text.
    pub fn expect_success(self, what: &str) -> String {
        let out = self.stdout_text();
        match self.status {
            None => panic!("{what}: killed at its timeout\nstdout:\n{out}\nstderr:\n{}", self.stderr),
            Some(s) if !s.success() => panic!("{what}: failed ({s})\nstdout:\n{out}\nstderr:\n{}", self.stderr),
            Some(_) => out,
        }
    }
}

/// Runs `cmd` with `stdin` (none: `/dev/null`), collecting stdout and stderr on threads so a
/// chatty child never blocks, and kills it after `timeout` so the suite never hangs.
pub fn run_with_timeout(
    cmd: &mut std::process::Command,
    stdin: Option<&[u8]>,
    timeout: std::time::Duration,
) -> ChildOutput {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let mut child = cmd
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let writer = stdin.map(|data| {
        let mut input = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = input.write_all(&data);
        })
    });
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait().expect("waiting for a child process") {
            Some(status) => break Some(status),
            None if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    if let Some(w) = writer {
        let _ = w.join();
    }
    ChildOutput { status, stdout: out_reader.join().unwrap(), stderr: err_reader.join().unwrap() }
}

/// Whether kcat can run; `false` (with a notice) outside CI, a panic in CI (scripts/test.sh
/// installs it).
pub fn kcat_available() -> bool {
    let found = std::process::Command::new("kcat")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return true;
    }
    if in_ci() {
        panic!("kcat not found: CI must run the kcat interop tests (apt-get install kcat)");
    }
    eprintln!("SKIP: kcat not found; install the Debian package kcat to run this test");
    false
}

/// Runs kcat with `args` and `stdin`, killed after `timeout`.
pub fn kcat(args: &[&str], stdin: &str, timeout: std::time::Duration) -> ChildOutput {
    run_with_timeout(std::process::Command::new("kcat").args(args), Some(stdin.as_bytes()), timeout)
}

/// Starts a broker on `addr` over `dir` with no initial rebalance delay (as benchmarks run
/// groups), after `configure` adjusts the config, and waits until the group coordinator has
/// replayed `__consumer_offsets`.
pub fn start_group_broker(
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    configure: impl FnOnce(&mut fetchbench::broker::BrokerConfig),
) -> fetchbench::broker::BrokerHandle {
    use fetchbench::broker::{Broker, BrokerConfig};
    let mut config = BrokerConfig::new(addr, dir, fetchbench::read_path::ReadPathKind::Sendfile);
    config.group_initial_rebalance_delay_ms = 0;
    configure(&mut config);
    let broker = Broker::start(config).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while broker.test_support().coordinator().is_loading() {
        assert!(std::time::Instant::now() < deadline, "the coordinator did not finish loading");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    broker
}

/// Makes the next close of `stream` a reset instead of a FIN (`SO_LINGER` 0).
pub fn reset_on_close(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket fd and a correctly sized `linger` for SO_LINGER.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_LINGER): {}", std::io::Error::last_os_error());
}
