//! Serving a real Kafka broker's data directory as it is (the "serve existing data"): each
//! log directory of the corpus (`kafka-segments/`, written by Apache Kafka 2.5 to 3.8) is copied
//! into a temporary directory, the broker starts on the copy, and kcat (librdkafka) consumes every
//! partition from the beginning (`-C -o beginning -e`). Every record kcat prints must equal, as
//! bytes, the record fetchbench's own log module decodes from the corpus segment files: offset,
//! timestamp, key and value (null distinguished from empty), and nothing more.
//!
//! Partitions include `__consumer_offsets-*` (binary keys and values) and topics of which the
//! directory holds only some partitions (`my_other_topic-2`, `__consumer_offsets-26`): Metadata
//! then lists the missing lower partitions as leaderless, so librdkafka accepts partition 26.
//! `__cluster_metadata-0` (KRaft's log) is not a client topic and is not served. Past the copied
//! records, `__consumer_offsets` partitions may hold records the broker's group coordinator wrote
//! after loading them (expired offsets, groups whose members expired, as in Kafka); nothing else
//! may be added. Every batch of
//! `kafka-segments/` is magic 2 (its README says so); legacy magic 0/1 entries come from the
//! kafka-go fixtures (`protocol/kafka-go-fixtures/*.records.bin`, a Kafka 2.3 broker's on-disk
//! bytes), each served as a one-segment partition: the broker serves entries as stored, any magic,
//! and kcat decodes them.
//!
//! Corpus or kcat missing: fail in CI, skip with a notice elsewhere.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fetchbench::broker::{Broker, BrokerConfig};
use fetchbench::log::batch::mixed::MixedBatches;
use fetchbench::log::manager::CLUSTER_METADATA_TOPIC;
use fetchbench::read_path::ReadPathKind;

use crate::common::{self, kcat_available};

/// The longest one kcat run may take before it is killed.
const KCAT_TIMEOUT: Duration = Duration::from_secs(60);

/// One consumed record: offset, timestamp (ms), key, value.
type Rec = (i64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// `<topic>-<partition>` of a directory name (the topic may contain `-`).
fn topic_partition(name: &str) -> Option<(String, i32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    let partition = partition.parse().ok()?;
    (!topic.is_empty()).then(|| (topic.to_string(), partition))
}

/// The directories under `root` that hold `<topic>-<partition>/*.log`: Kafka log directories.
fn log_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut is_log_dir = false;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.is_dir() {
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let has_log =
                std::fs::read_dir(&path).unwrap().any(|e| e.unwrap().path().extension().is_some_and(|x| x == "log"));
            if topic_partition(&name).is_some() && has_log {
                is_log_dir = true;
            } else {
                stack.push(path);
            }
        }
        if is_log_dir {
            out.push(dir);
        }
    }
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// The records a consumer gets from a partition directory: every `.log` in base offset order,
/// decoded (CRCs verified) by `log::batch::mixed`, control batches skipped.
fn expected_records(partition_dir: &Path) -> Vec<Rec> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut out = Vec::new();
    for log in logs {
        let bytes = std::fs::read(&log).unwrap();
        let (records, partial_tail) = decode_record_set(&bytes, &log.display().to_string());
        assert!(!partial_tail, "{}: a cut batch at the end", log.display());
        out.extend(records);
    }
    out
}

/// The non-control records of a record set of any magics, and whether it ends in a cut entry.
fn decode_record_set(bytes: &[u8], what: &str) -> (Vec<Rec>, bool) {
    let mut out = Vec::new();
    let mut batches = MixedBatches::new(bytes);
    for batch in batches.by_ref() {
        let batch = batch.unwrap_or_else(|e| panic!("{what}: {e}"));
        if batch.is_control {
            continue;
        }
        for r in batch.records {
            out.push((r.offset, r.timestamp, r.key.map(|k| k.to_vec()), r.value.map(|v| v.to_vec())));
        }
    }
    (out, batches.partial_tail())
}

/// Runs kcat to consume `topic`-`partition` from the beginning to the end; returns its raw stdout.
fn kcat_consume(bootstrap: &str, topic: &str, partition: i32) -> Vec<u8> {
    let partition = partition.to_string();
    let args = [
        "-b",
        bootstrap,
        "-t",
        topic,
        "-p",
        &partition,
        "-C",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o %T %K %S\n%k%s\n",
    ];
    let out = common::run_with_timeout(std::process::Command::new("kcat").args(args), None, KCAT_TIMEOUT);
    match out.status {
        Some(s) if s.success() => out.stdout,
        status => panic!("kcat {args:?}: {status:?}\nstderr:\n{}\nstdout:\n{}", out.stderr, out.stdout_text()),
    }
}

/// Parses kcat output in the format `%o %T %K %S\n%k%s\n` (binary keys and values are read by
/// their lengths, so any byte may appear in them).
fn parse_kcat(mut out: &[u8]) -> Vec<Rec> {
    let mut recs = Vec::new();
    while !out.is_empty() {
        let nl = out.iter().position(|&b| b == b'\n').expect("a header line");
        let header = std::str::from_utf8(&out[..nl]).unwrap();
        let f: Vec<i64> = header.split(' ').map(|x| x.parse().unwrap()).collect();
        let (offset, timestamp, key_len, value_len) = (f[0], f[1], f[2], f[3]);
        out = &out[nl + 1..];
        let mut take = |len: i64| {
            let n = len.max(0) as usize;
            let bytes = out[..n].to_vec();
            out = &out[n..];
            (len >= 0).then_some(bytes)
        };
        let key = take(key_len);
        let value = take(value_len);
        assert_eq!(out.first(), Some(&b'\n'), "record at {offset}: the line ends after key and value");
        out = &out[1..];
        recs.push((offset, timestamp, key, value));
    }
    recs
}

#[test]
fn serve_corpus_log_dirs_to_kcat() {
    let Some(corpus) = crate::common::corpus() else { return };
    if !kcat_available() {
        return;
    }
    let dirs = log_dirs(&corpus.join("kafka-segments"));
    assert!(dirs.len() >= 7, "log directories found: {dirs:?}");
    let mut checked = 0;
    for source in dirs {
        let tmp = tempfile::tempdir().unwrap();
        let log_dir = tmp.path().join("logs");
        copy_dir(&source, &log_dir);
        let mut partitions: Vec<(String, i32, PathBuf)> = std::fs::read_dir(&source)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| {
                let (t, n) = topic_partition(&p.file_name()?.to_string_lossy())?;
                (p.is_dir() && t != CLUSTER_METADATA_TOPIC).then_some((t, n, p))
            })
            .collect();
        partitions.sort();
        let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), &log_dir, ReadPathKind::Sendfile);
        let broker = Broker::start(config).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        assert_eq!(broker.partitions_loaded(), partitions.len(), "{}", source.display());
        let bootstrap = broker.local_addr().to_string();
        for (topic, partition, dir) in &partitions {
            let want = expected_records(dir);
            assert!(!want.is_empty(), "{}: no records", dir.display());
            let got = parse_kcat(&kcat_consume(&bootstrap, topic, *partition));
            assert!(got.len() >= want.len(), "{}: record count\ngot: {got:?}\nwant: {want:?}", dir.display());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "{}: record at offset {}", dir.display(), w.0);
            }
            // Past the copied data only the broker's own group coordinator may have written, and
            // only to __consumer_offsets: offset commit (key version 0/1) or group metadata (key
            // version 2) records, e.g. tombstones of expired offsets or an expired member's group.
            let extra = &got[want.len()..];
            let coordinator_record = |r: &Rec| {
                let key = r.2.as_deref().unwrap_or_default();
                key.len() >= 2 && matches!(i16::from_be_bytes([key[0], key[1]]), 0..=2)
            };
            assert!(
                extra.is_empty() || (topic == "__consumer_offsets" && extra.iter().all(coordinator_record)),
                "{}: records past the copied log: {extra:?}",
                dir.display()
            );
            let last = want.last().map_or(-1, |r| r.0);
            assert!(extra.iter().map(|r| r.0).eq(last + 1..last + 1 + extra.len() as i64), "{}", dir.display());
            checked += want.len();
        }
        assert_eq!(broker.test_support().connection_panics(), 0);
        broker.shutdown().unwrap();
    }
    eprintln!("serve_corpus: {checked} records compared");
    assert!(checked > 1000, "{checked} records compared");
}

/// Legacy message formats served as stored: each kafka-go fixture's record set (the on-disk bytes
/// a real Kafka 2.3 broker returned: magic 0/1 messages, gzip wrappers, v2 batches, mixed) becomes
/// the one segment of a partition; the broker loads it (recovering it: no index, no marker) and
/// kcat must consume exactly the records our decoder finds in the file. A cut last entry (the
/// fetch response was size-limited) is dropped by recovery and so is not expected either.
#[test]
fn serve_corpus_legacy_magic_record_sets_to_kcat() {
    let Some(corpus) = crate::common::corpus() else { return };
    if !kcat_available() {
        return;
    }
    let fixtures = crate::common::files_with_suffix(&corpus.join("protocol/kafka-go-fixtures"), ".records.bin");
    assert!(fixtures.len() >= 10, "fixtures: {fixtures:?}");
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("logs");
    let mut topics = Vec::new();
    for fixture in &fixtures {
        let name = fixture.file_name().unwrap().to_string_lossy().trim_end_matches(".records.bin").to_string();
        let topic = format!("kafka-go-{name}");
        let dir = log_dir.join(format!("{topic}-0"));
        std::fs::create_dir_all(&dir).unwrap();
        let bytes = std::fs::read(fixture).unwrap();
        std::fs::write(dir.join("00000000000000000000.log"), &bytes).unwrap();
        let (want, _) = decode_record_set(&bytes, &fixture.display().to_string());
        assert!(!want.is_empty(), "{}: no records", fixture.display());
        topics.push((topic, want));
    }
    let config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), &log_dir, ReadPathKind::Sendfile);
    let broker = Broker::start(config).unwrap();
    let bootstrap = broker.local_addr().to_string();
    for (topic, want) in &topics {
        let got = parse_kcat(&kcat_consume(&bootstrap, topic, 0));
        assert_eq!(&got, want, "{topic}");
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
