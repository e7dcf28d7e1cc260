//! Real-client interop: kcat (librdkafka) against the in-process broker, for every read path.
//!
//! Each test starts a broker on 127.0.0.1:0 with a temporary log directory, then runs kcat as a
//! subprocess (killed after [`KCAT_TIMEOUT`], so the suite never hangs): `-L` lists the broker,
//! `-P -K:` produces keyed records (uncompressed and with every codec), `-C -o beginning -e`
//! consumes them back, compared exactly (keys, values, offsets). The codec of the stored batches
//! is checked in the segment file, so a client that silently fell back to no compression fails.
//!
//! kcat missing: the tests fail in CI (`CI` set, not `false`) and skip with a notice elsewhere.

use std::path::Path;
use std::time::Duration;

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::read_path::ReadPathKind;

use crate::common::{self, kcat_available};

/// The longest one kcat run may take before it is killed.
const KCAT_TIMEOUT: Duration = Duration::from_secs(30);
/// Records produced per topic.
const RECORDS: usize = 50;
/// `(kcat -z name, Kafka codec id in the batch attributes)`.
const CODECS: [(&str, u8); 4] = [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)];

/// Runs kcat and asserts it exited successfully in time; returns stdout.
fn kcat_ok(args: &[&str], stdin: &str) -> String {
    common::kcat(args, stdin, KCAT_TIMEOUT).expect_success(&format!("kcat {args:?}"))
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
        // On a loaded machine the linger can still split the input: librdkafka then sends a
        // small batch uncompressed (it did: [0, 1]). The codec must be stored as sent: at least
        // one batch with it, and any other batch uncompressed.
        let as_sent =
            stored.contains(codec_id) && stored.iter().all(|c| c == codec_id || (stored.len() > 1 && *c == 0));
        assert!(as_sent, "{kind}: {topic}: stored codecs {stored:?}, want {codec_id}");

        let got = kcat_ok(&["-b", b, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-f", "%k:%s:%o\n"], "");
        let want: String = recs.iter().enumerate().map(|(i, (k, v))| format!("{k}:{v}:{i}\n")).collect();
        assert_eq!(got, want, "{kind}: {topic}: consumed records differ");
    }

    let listing = kcat_ok(&["-b", b, "-L"], "");
    for (topic, _, _) in &topics {
        assert!(listing.contains(&format!("topic \"{topic}\" with 1 partitions")), "{kind}: -L output:\n{listing}");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
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

/// The io_uring read-then-send paths under kcat (librdkafka) over loopback TCP; skipped with the
/// probe's reason where the kernel lacks them.
#[test]
fn kcat_uring_read_send_and_send_zc() {
    for kind in [ReadPathKind::UringReadSend, ReadPathKind::UringSendZc] {
        match kind.probe() {
            Ok(()) => produce_consume(kind),
            Err(e) => eprintln!("SKIP: read path {kind}: {}", e.reason),
        }
    }
}
