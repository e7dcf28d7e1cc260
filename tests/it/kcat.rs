//! Real-client interop: kcat (librdkafka) against the in-process broker, for every read path.
//!
//! Each test starts a broker on 127.0.0.1:0 with a temporary log directory, then runs kcat as a
//! subprocess (killed after [`KCAT_TIMEOUT`], so the suite never hangs): `-L` lists the broker,
//! `-P -K:` produces keyed records (uncompressed and with every codec), `-C -o beginning -e`
//! consumes them back, compared exactly (keys, values, offsets). The codec of the stored batches
//! is checked in the segment file, so a client that silently fell back to no compression fails.
//!
//! kcat missing: the tests fail in CI (`CI` set, not `false`) and skip with a notice elsewhere.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::read_path::ReadPathKind;

/// The longest one kcat run may take before it is killed.
const KCAT_TIMEOUT: Duration = Duration::from_secs(30);
/// Records produced per topic.
const RECORDS: usize = 50;
/// `(kcat -z name, Kafka codec id in the batch attributes)`.
const CODECS: [(&str, u8); 4] = [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)];

/// Whether kcat can run; `false` (with a notice) outside CI, a panic in CI.
fn kcat_available() -> bool {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return true;
    }
    let in_ci = std::env::var("CI").map(|v| !v.is_empty() && v != "false").unwrap_or(false);
    if in_ci {
        panic!("kcat not found: CI must run the kcat interop tests (apt-get install kcat)");
    }
    eprintln!("SKIP: kcat not found (`which kcat` fails); install the Debian package kcat to run this test");
    false
}

struct Output {
    status: Option<std::process::ExitStatus>,
    stdout: String,
    stderr: String,
}

/// Runs kcat with `args`, feeding `stdin`, killing it after [`KCAT_TIMEOUT`].
fn kcat(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning kcat");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(data.as_bytes());
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + KCAT_TIMEOUT;
    let status = loop {
        match child.try_wait().expect("waiting for kcat") {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let _ = writer.join();
    Output { status, stdout: out_reader.join().unwrap(), stderr: err_reader.join().unwrap() }
}

/// Runs kcat and asserts it exited successfully in time; returns stdout.
fn kcat_ok(args: &[&str], stdin: &str) -> String {
    let out = kcat(args, stdin);
    match out.status {
        None => panic!("kcat {args:?} killed after {KCAT_TIMEOUT:?}\nstdout:\n{}\nstderr:\n{}", out.stdout, out.stderr),
        Some(s) if !s.success() => {
            panic!("kcat {args:?} failed ({s})\nstdout:\n{}\nstderr:\n{}", out.stdout, out.stderr)
        }
        Some(_) => out.stdout,
    }
}

/// `key-i:value-i` lines for `topic` (values with spaces and punctuation, not `:` in keys).
fn records(topic: &str) -> Vec<(String, String)> {
    (0..RECORDS).map(|i| (format!("{topic}-key-{i}"), format!("value {i} of {topic}: {}", "x".repeat(i * 7)))).collect()
}

/// The codec id of every batch in the partition's first segment file.
fn stored_codecs(log_dir: &Path, topic: &str) -> Vec<u8> {
    let bytes = std::fs::read(log_dir.join(format!("{topic}-0")).join("00000000000000000000.log")).unwrap();
    let mut codecs = Vec::new();
    let mut pos = 0;
    while pos + 23 <= bytes.len() {
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        codecs.push(bytes[pos + 22] & 0x07);
        pos += 12 + len;
    }
    codecs
}

fn start(kind: ReadPathKind) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), kind);
    let handle = Broker::start(config).unwrap();
    (tmp, handle)
}

fn produce_consume(kind: ReadPathKind) {
    if !kcat_available() {
        return;
    }
    let (tmp, broker) = start(kind);
    let bootstrap = broker.local_addr().to_string();
    let b = bootstrap.as_str();

    let listing = kcat_ok(&["-b", b, "-L"], "");
    assert!(listing.contains(&format!("broker 0 at {bootstrap}")), "{kind}: -L output:\n{listing}");

    let mut topics = vec![("plain".to_string(), None, 0u8)];
    topics.extend(CODECS.iter().map(|&(name, id)| (format!("z-{name}"), Some(name), id)));
    for (topic, codec, codec_id) in &topics {
        let recs = records(topic);
        let input: String = recs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        // One batch per topic (kcat flushes at end of input), so each is worth compressing:
        // librdkafka sends a batch uncompressed when compression does not make it smaller.
        let mut args = vec!["-b", b, "-t", topic, "-P", "-K:", "-X", "linger.ms=100"];
        if let Some(z) = codec {
            args.extend(["-z", z]);
        }
        kcat_ok(&args, &input);

        let stored = stored_codecs(&tmp.path().join("logs"), topic);
        assert!(!stored.is_empty(), "{kind}: {topic}: nothing stored");
        assert!(stored.iter().all(|c| c == codec_id), "{kind}: {topic}: stored codecs {stored:?}, want {codec_id}");

        let got = kcat_ok(&["-b", b, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-f", "%k:%s:%o\n"], "");
        let want: String = recs.iter().enumerate().map(|(i, (k, v))| format!("{k}:{v}:{i}\n")).collect();
        assert_eq!(got, want, "{kind}: {topic}: consumed records differ");
    }

    let listing = kcat_ok(&["-b", b, "-L"], "");
    for (topic, _, _) in &topics {
        assert!(listing.contains(&format!("topic \"{topic}\" with 1 partitions")), "{kind}: -L output:\n{listing}");
    }
    assert_eq!(broker.shared().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn kcat_copy() {
    produce_consume(ReadPathKind::Copy);
}

#[test]
fn kcat_sendfile() {
    produce_consume(ReadPathKind::Sendfile);
}

#[test]
fn kcat_mmap() {
    produce_consume(ReadPathKind::Mmap);
}

#[test]
fn kcat_uring_splice() {
    match ReadPathKind::UringSplice.probe() {
        Ok(()) => produce_consume(ReadPathKind::UringSplice),
        Err(e) => eprintln!("SKIP: read path {}: {}", ReadPathKind::UringSplice, e.reason),
    }
}
