//! fetchbench's producer (`client::producer`) and `fetchbench produce` against the embedded
//! broker: murmur2 and config parsing; keyed records with every codec read back exactly by kcat
//! and by confluent-kafka (librdkafka); idempotent batches (producer id, epoch and sequences in
//! the stored batches); `acks=0`; the CLI end to end; null and empty keys, headers and
//! timestamps round-tripping to fetchbench's consumer with every codec.
//!
//! kcat or confluent-kafka missing: those tests fail in CI (`CI` set) and skip with a notice
//! elsewhere, as in `kcat.rs` and `python_clients.rs`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::client::consumer::{Consumer, TopicPartition};
use fetchbench::client::producer::{
    murmur2, partition_for_key, Acks, Producer, ProducerConfig, ProducerError, RecordMetadata,
};
use fetchbench::log::batch::{Compression, Header};
use fetchbench::log::RecordBatch;
use fetchbench::read_path::ReadPathKind;

use crate::consumer::poll_n;
use crate::consumer_positions::{config, start_in};

fn in_ci() -> bool {
    std::env::var("CI").map(|v| !v.is_empty() && v != "false").unwrap_or(false)
}

/// A broker with `num.partitions` = `partitions`.
fn start(partitions: u32) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Copy);
    config.apply_props(&[("num.partitions".to_string(), partitions.to_string())].into_iter().collect()).unwrap();
    (tmp, Broker::start(config).unwrap())
}

fn producer(broker: &BrokerHandle, extra: &[(&str, &str)]) -> Producer {
    let bootstrap = broker.local_addr().to_string();
    let mut pairs = vec![("bootstrap.servers", bootstrap.as_str())];
    pairs.extend_from_slice(extra);
    Producer::new(ProducerConfig::from_pairs(&pairs).unwrap()).unwrap()
}

/// Every batch header and its records' (offset, key, value) in the segment files of
/// `topic`-`partition`, in offset order.
#[allow(clippy::type_complexity)]
fn stored(
    log_dir: &Path,
    topic: &str,
    partition: i32,
) -> Vec<(fetchbench::log::batch::BatchHeader, Vec<(i64, String, String)>)> {
    let dir = log_dir.join(format!("{topic}-{partition}"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let mut rest: &[u8] = &bytes;
        while rest.len() >= 61 {
            let batch = RecordBatch::parse(rest).unwrap();
            batch.verify_crc().unwrap();
            let s = |b: Option<&[u8]>| b.map_or(String::new(), |b| String::from_utf8_lossy(b).into_owned());
            let records =
                batch.records().unwrap().to_vec().unwrap().iter().map(|r| (r.offset, s(r.key), s(r.value))).collect();
            out.push((*batch.header(), records));
            rest = &rest[batch.as_bytes().len()..];
        }
    }
    out
}

/// `(key, value)` of record `i` of `topic`: values long enough that every codec shrinks a batch.
fn record(topic: &str, i: usize) -> (String, String) {
    (format!("{topic}-key-{i}"), format!("value {i} of {topic}: {}", "xyz".repeat(20 + i % 13)))
}

#[test]
fn murmur2_and_partitions_follow_kafka() {
    // Kafka's UtilsTest.testMurmur2.
    assert_eq!(murmur2(b"21"), -973932308);
    assert_eq!(murmur2(b"foobar"), -790332482);
    assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
    assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
    assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
    assert_eq!(murmur2(b"abc"), 479470107);
    // toPositive clears the sign bit (it is not abs()).
    assert_eq!(partition_for_key(b"21", 1000), (-973932308i32 & 0x7fff_ffff) % 1000);
    assert_eq!(partition_for_key(b"abc", 7), 479470107 % 7);
}

#[test]
fn config_parsing_follows_kafka() {
    let c = ProducerConfig::from_pairs(&[("bootstrap.servers", "a:1, b:2")]).unwrap();
    assert_eq!(c.bootstrap_servers, vec!["a:1", "b:2"]);
    assert_eq!((c.acks, c.batch_size, c.linger_ms, c.max_in_flight), (Acks::All, 16384, 5, 5));
    assert!(c.enable_idempotence);
    assert_eq!((c.compression, c.buffer_memory, c.request_timeout_ms), (Compression::None, 32 << 20, 30_000));
    let c = ProducerConfig::from_pairs(&[
        ("bootstrap.servers", "h:9092"),
        ("acks", "1"),
        ("compression.type", "ZSTD"),
        ("batch.size", "65536"),
        ("linger.ms", "0"),
        ("client.id", "me"),
    ])
    .unwrap();
    // acks=1 quietly turns the default idempotence off, as Kafka 3+.
    assert_eq!((c.acks, c.compression, c.batch_size, c.linger_ms), (Acks::Leader, Compression::Zstd, 65536, 0));
    assert!(!c.enable_idempotence);
    assert_eq!(c.client_id, "me");
    for acks in ["all", "-1"] {
        assert_eq!(
            ProducerConfig::from_pairs(&[("bootstrap.servers", "h:1"), ("acks", acks)]).unwrap().acks,
            Acks::All
        );
    }
    let c = ProducerConfig::from_pairs(&[("bootstrap.servers", "h:1"), ("acks", "0")]).unwrap();
    assert_eq!((c.acks, c.enable_idempotence), (Acks::None, false));
    let refused = |pairs: &[(&str, &str)], key: &str| match ProducerConfig::from_pairs(pairs) {
        Err(ProducerError::Config { key: k, .. }) => assert_eq!(k, key, "{pairs:?}"),
        other => panic!("{pairs:?}: {other:?}"),
    };
    refused(&[("bootstrap.servers", "h:1"), ("acks", "1"), ("enable.idempotence", "true")], "enable.idempotence");
    refused(
        &[("bootstrap.servers", "h:1"), ("max.in.flight.requests.per.connection", "6"), ("enable.idempotence", "true")],
        "enable.idempotence",
    );
    refused(&[("bootstrap.servers", "h:1"), ("acks", "2")], "acks");
    refused(&[("bootstrap.servers", "h:1"), ("compression.type", "brotli")], "compression.type");
    refused(&[("bootstrap.servers", "h:1"), ("batch.size", "-1")], "batch.size");
    refused(&[("bootstrap.servers", "h:1"), ("no.such.key", "1")], "no.such.key");
    refused(&[("client.id", "x")], "bootstrap.servers");
}

/// Produces `n` keyed records of `topic` (one partition) with `compression.type` = `codec`,
/// checks the delivered offsets and the stored codec, returns the records.
fn produce_codec(broker: &BrokerHandle, log_dir: &Path, topic: &str, codec: Compression, n: usize) {
    let p = producer(broker, &[("compression.type", codec.name()), ("linger.ms", "20")]);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (k, v) = record(topic, i);
            let h = [Header { key: b"h", value: Some(b"1") }];
            p.send(topic, None, Some(k.as_bytes()), Some(v.as_bytes()), &h, Some(1_700_000_000_000 + i as i64)).unwrap()
        })
        .collect();
    p.flush().unwrap();
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(h.wait().unwrap(), RecordMetadata { partition: 0, offset: i as i64 }, "{topic}");
    }
    p.close().unwrap();
    let batches = stored(log_dir, topic, 0);
    assert!(!batches.is_empty());
    for (h, _) in &batches {
        assert_eq!(h.attributes.codec_id(), codec.id(), "{topic}: stored codec");
    }
    let records: Vec<(i64, String, String)> = batches.into_iter().flat_map(|(_, r)| r).collect();
    let want: Vec<(i64, String, String)> = (0..n).map(|i| (i as i64, record(topic, i).0, record(topic, i).1)).collect();
    assert_eq!(records, want, "{topic}: stored records");
}

/// Runs `program args`, killed after 30 s: (success, stdout, stderr).
fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (o.join().unwrap(), e.join().unwrap());
    (status.is_some_and(|s| s.success()), stdout, stderr)
}

fn kcat_available() -> bool {
    let found = Command::new("kcat").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if found.is_ok_and(|s| s.success()) {
        return true;
    }
    if in_ci() {
        panic!("kcat not found: CI must run the producer interop tests (apt-get install kcat)");
    }
    eprintln!("SKIP: kcat not found; install the Debian package kcat to run this test");
    false
}

const N: usize = 300;

#[test]
fn every_codec_read_back_by_kcat_and_confluent_kafka() {
    let (tmp, broker) = start(1);
    let logs = tmp.path().join("logs");
    let bootstrap = broker.local_addr().to_string();
    let topics: Vec<(String, Compression)> =
        Compression::ALL.iter().map(|&c| (format!("fp-{}", c.name()), c)).collect();
    for (topic, codec) in &topics {
        produce_codec(&broker, &logs, topic, *codec, N);
    }
    if kcat_available() {
        for (topic, _) in &topics {
            let (ok, got, err) =
                run("kcat", &["-b", &bootstrap, "-t", topic, "-C", "-o", "beginning", "-e", "-q", "-f", "%k:%s:%o\n"]);
            assert!(ok, "kcat {topic}: {err}");
            let want: String = (0..N)
                .map(|i| {
                    let (k, v) = record(topic, i);
                    format!("{k}:{v}:{i}\n")
                })
                .collect();
            assert_eq!(got, want, "kcat {topic}");
        }
    }
    if let Some(python) = crate::python_clients::python_with("confluent_kafka") {
        let mut args = vec![bootstrap.clone()];
        args.extend(topics.iter().map(|(t, _)| format!("{t}:1:{N}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let summary = crate::python_clients::run_script_args(&python, "producer_consume.py", &args, "producer");
        for (topic, _) in &topics {
            let want: Vec<serde_json::Value> = (0..N)
                .map(|i| {
                    let (k, v) = record(topic, i);
                    serde_json::json!([0, i, k, v, 1_700_000_000_000i64 + i as i64])
                })
                .collect();
            assert_eq!(summary["records"][topic].as_array().unwrap(), &want, "confluent-kafka {topic}");
        }
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn idempotent_batches_carry_producer_id_and_sequences() {
    let (tmp, broker) = start(3);
    let logs = tmp.path().join("logs");
    // Small batches: many batches per partition, several per request, pipelined.
    let p = producer(&broker, &[("batch.size", "2048"), ("linger.ms", "50"), ("compression.type", "lz4")]);
    assert!(p.config().enable_idempotence);
    let (pid, epoch) = p.producer_id();
    assert!(pid >= 0 && epoch >= 0, "{pid} {epoch}");
    let n = 2000;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (k, v) = record("idem", i);
            (k.clone(), p.send("idem", None, Some(k.as_bytes()), Some(v.as_bytes()), &[], None).unwrap())
        })
        .collect();
    // Unkeyed records: the sticky partitioner.
    let unkeyed: Vec<_> =
        (0..300).map(|i| p.send("idem", None, None, Some(format!("u{i}").as_bytes()), &[], None).unwrap()).collect();
    // An explicit partition.
    let explicit = p.send("idem", Some(2), Some(b"to-2"), Some(b"v"), &[], None).unwrap();
    assert!(matches!(p.send("idem", Some(3), None, None, &[], None), Err(ProducerError::UnknownPartition { .. })));
    p.close().unwrap();
    let stats = p.stats();
    assert_eq!((stats.records_sent, stats.records_acked, stats.records_failed), (2301, 2301, 0));
    assert!(stats.batches_sent > stats.requests_sent, "{stats:?}: several batches per request");
    for (k, h) in &handles {
        assert_eq!(h.wait().unwrap().partition, partition_for_key(k.as_bytes(), 3), "{k}");
    }
    let mut unkeyed_partitions: Vec<i32> = unkeyed.iter().map(|h| h.wait().unwrap().partition).collect();
    unkeyed_partitions.dedup();
    assert!(unkeyed_partitions.len() > 1, "sticky partitioner moved on: {unkeyed_partitions:?}");
    assert_eq!(explicit.wait().unwrap().partition, 2);
    let mut total = 0;
    for partition in 0..3 {
        let batches = stored(&logs, "idem", partition);
        let mut sequence = 0;
        let mut offset = 0;
        for (h, records) in &batches {
            assert_eq!((h.producer_id, h.producer_epoch), (pid, epoch), "partition {partition}");
            assert_eq!(h.base_sequence, sequence, "partition {partition}: sequences continue");
            assert_eq!(h.base_offset, offset);
            assert_eq!(h.attributes.codec_id(), Compression::Lz4.id());
            sequence += h.records_count;
            offset += h.records_count as i64;
            total += records.len();
        }
        // Every delivered offset points at the record sent.
        for (k, handle) in &handles {
            let m = handle.wait().unwrap();
            if m.partition == partition {
                let rec = batches.iter().flat_map(|(_, r)| r).find(|r| r.0 == m.offset).unwrap();
                assert_eq!(&rec.1, k);
            }
        }
    }
    assert_eq!(total, 2301);
    broker.shutdown().unwrap();
}

#[test]
fn acks_zero_fires_and_forgets() {
    let (tmp, broker) = start(1);
    let p = producer(&broker, &[("acks", "0")]);
    assert!(!p.config().enable_idempotence);
    assert_eq!(p.producer_id(), (-1, -1));
    let handles: Vec<_> =
        (0..1000).map(|i| p.send("zero", None, None, Some(format!("v{i}").as_bytes()), &[], None).unwrap()).collect();
    p.close().unwrap();
    for h in &handles {
        assert_eq!(h.wait().unwrap(), RecordMetadata { partition: 0, offset: -1 });
    }
    // The broker appends without answering: wait (bounded) for the records to land.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let count: usize = stored(&tmp.path().join("logs"), "zero", 0).iter().map(|(_, r)| r.len()).sum();
        if count == 1000 {
            break;
        }
        assert!(Instant::now() < deadline, "{count} of 1000 records stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    let batches = stored(&tmp.path().join("logs"), "zero", 0);
    assert!(batches.iter().all(|(h, _)| h.producer_id == -1 && h.base_sequence == -1));
    broker.shutdown().unwrap();
}

#[test]
fn produce_cli_end_to_end() {
    let (tmp, broker) = start(2);
    let bootstrap = broker.local_addr().to_string();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let (ok, out, err) = run(
        env!("CARGO_BIN_EXE_fetchbench"),
        &[
            "produce",
            "--bootstrap",
            &bootstrap,
            "--topic",
            "cli",
            "--num-records",
            "20000",
            "--record-size",
            "64",
            "--key-distribution",
            "random:100",
            "--compression",
            "snappy",
            "-X",
            "linger.ms=2",
        ],
    );
    assert!(ok, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.starts_with("20000 records, 1280000 bytes in "), "{out}");
    assert!(out.contains(" records/s, ") && out.contains(" MB/s, 0 errors"), "{out}");
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let logs = tmp.path().join("logs");
    let mut count = 0;
    for partition in 0..2 {
        for (h, _) in stored(&logs, "cli", partition) {
            assert_eq!(h.attributes.codec_id(), Compression::Snappy.id());
            count += h.records_count;
        }
    }
    assert_eq!(count, 20000);
    // The value layout: 8-byte big-endian send time in ns, then filler (the store keeps bytes).
    let bytes = std::fs::read(logs.join("cli-0/00000000000000000000.log")).unwrap();
    let batch = RecordBatch::parse(&bytes).unwrap();
    let recs = batch.records().unwrap();
    let recs = recs.to_vec().unwrap();
    let v = recs[0].value.unwrap();
    assert_eq!(v.len(), 64);
    let sent = u64::from_be_bytes(v[..8].try_into().unwrap());
    assert!((before..=after).contains(&sent), "{before} <= {sent} <= {after}");
    assert!(v[8..].iter().all(u8::is_ascii_uppercase));
    let key: u64 = std::str::from_utf8(recs[0].key.unwrap()).unwrap().parse().unwrap();
    assert!(key < 100);

    // --bytes and a bad argument.
    let (ok, out, err) = run(
        env!("CARGO_BIN_EXE_fetchbench"),
        &["produce", "--bootstrap", &bootstrap, "--topic", "cli2", "--bytes", "100KiB", "--record-size", "1KiB"],
    );
    assert!(ok && out.starts_with("100 records, 102400 bytes"), "{out}{err}");
    let (ok, _, err) = run(
        env!("CARGO_BIN_EXE_fetchbench"),
        &["produce", "--bootstrap", &bootstrap, "--topic", "t", "--num-records", "1", "--record-size", "4"],
    );
    assert!(!ok && err.contains("below 8 bytes"), "{err}");
    broker.shutdown().unwrap();
}

/// A TCP proxy in front of `broker` that relays frames both ways and, on its first connection
/// only, drops the connection instead of relaying response frame number `drop_at` (1-based):
/// the broker has appended the request, the producer never hears of it.
fn lossy_proxy(broker: std::net::SocketAddr, drop_at: usize) -> std::net::SocketAddr {
    use std::io::Write;
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let upstream = TcpStream::connect(broker).unwrap();
            // One write per frame and no Nagle: the relay must not add delayed-ACK stalls.
            let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
            let (mut c_in, mut u_out) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut u_out);
                let _ = u_out.shutdown(Shutdown::Write);
            });
            let (mut u_in, mut c_out) = (upstream, client);
            std::thread::spawn(move || {
                let mut responses = 0;
                loop {
                    let mut size = [0u8; 4];
                    if u_in.read_exact(&mut size).is_err() {
                        break;
                    }
                    let mut frame = size.to_vec();
                    frame.resize(4 + i32::from_be_bytes(size) as usize, 0);
                    if u_in.read_exact(&mut frame[4..]).is_err() {
                        break;
                    }
                    responses += 1;
                    if n == 0 && responses == drop_at {
                        let _ = c_out.shutdown(Shutdown::Both);
                        let _ = u_in.shutdown(Shutdown::Both);
                        return;
                    }
                    if c_out.write_all(&frame).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

#[test]
fn a_lost_answer_is_retried_with_the_same_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    // Bind the proxy first: the broker advertises it, so the producer's sender goes through it.
    let placeholder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let broker_addr = placeholder.local_addr().unwrap();
    drop(placeholder);
    // Response 1 is ApiVersions; response 4 is the third Produce answer.
    let proxy = lossy_proxy(broker_addr, 4);
    let mut config = BrokerConfig::new(broker_addr, tmp.path().join("logs"), ReadPathKind::Copy);
    config.advertised_listener = Some(("127.0.0.1".to_string(), proxy.port()));
    let broker = Broker::start(config).unwrap();
    let p = producer(&broker, &[("batch.size", "1024"), ("linger.ms", "1"), ("retry.backoff.ms", "10")]);
    let n = 3000;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (k, v) = record("lossy", i);
            p.send("lossy", None, Some(k.as_bytes()), Some(v.as_bytes()), &[], None).unwrap()
        })
        .collect();
    p.close().unwrap();
    let stats = p.stats();
    assert!(stats.retries > 0, "{stats:?}: the lost answer was retried");
    assert_eq!((stats.records_acked, stats.records_failed), (n as u64, 0), "{stats:?}");
    // Offsets as first written: every record once, in order, no duplicates in the log.
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(h.wait().unwrap(), RecordMetadata { partition: 0, offset: i as i64 });
    }
    let batches = stored(&tmp.path().join("logs"), "lossy", 0);
    let records: Vec<(i64, String, String)> = batches.iter().flat_map(|(_, r)| r.clone()).collect();
    let want: Vec<(i64, String, String)> =
        (0..n).map(|i| (i as i64, record("lossy", i).0, record("lossy", i).1)).collect();
    assert_eq!(records, want);
    let mut sequence = 0;
    for (h, _) in &batches {
        assert_eq!(h.base_sequence, sequence);
        sequence += h.records_count;
    }
    broker.shutdown().unwrap();
}

/// KIP-794: unkeyed records move to the next partition once `batch.size` bytes went to the
/// sticky one, even when linger.ms sends them in small batches (a slow producer): waiting for
/// each record, 1 KiB records with batch.size=4096 change partition every 4 or so records.
#[test]
fn slow_unkeyed_records_spread_over_partitions() {
    let (_tmp, broker) = start(3);
    let p = producer(&broker, &[("batch.size", "4096"), ("linger.ms", "0")]);
    let value = vec![7u8; 1000];
    let mut partitions = Vec::new();
    for _ in 0..24 {
        let h = p.send("slow", None, None, Some(&value), &[], None).unwrap();
        partitions.push(h.wait().unwrap().partition);
    }
    p.close().unwrap();
    let mut counts = [0; 3];
    for &x in &partitions {
        counts[x as usize] += 1;
    }
    // 24 records of ~1 KiB at ~4 per 4 KiB: every partition gets some, none all.
    assert!(counts.iter().all(|&c| (4..=12).contains(&c)), "{partitions:?}");
    // Each switch comes after a run of records, not per record.
    let switches = partitions.windows(2).filter(|w| w[0] != w[1]).count();
    assert!((3..=8).contains(&switches), "{partitions:?}");
}

/// Our producer to our consumer: a null key and an empty key stay apart, a null value stays
/// null, headers (a null header value included) and CreateTime timestamps round-trip, for
/// every codec.
#[test]
fn null_and_empty_keys_headers_and_timestamps_round_trip() {
    use fetchbench::client::producer::{Producer, ProducerConfig};
    use fetchbench::log::batch::Header;
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    for (i, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        let topic = format!("roundtrip-{codec}");
        let producer = Producer::new(
            ProducerConfig::from_pairs(&[
                ("bootstrap.servers", addr.to_string().as_str()),
                ("compression.type", codec),
            ])
            .unwrap(),
        )
        .unwrap();
        let h = [Header { key: b"h1", value: Some(b"v1") }, Header { key: b"h2", value: None }];
        producer.send(&topic, Some(0), None, Some(b"null-key"), &h, Some(1_000)).unwrap();
        producer.send(&topic, Some(0), Some(b""), Some(b"empty-key"), &[], Some(2_000)).unwrap();
        producer.send(&topic, Some(0), Some(b"k"), None, &[], Some(3_000)).unwrap();
        producer.flush().unwrap();
        producer.close().unwrap();
        let tp: TopicPartition = (topic.clone(), 0);
        let mut c = Consumer::new(config(addr, &[("auto.offset.reset", "earliest")])).unwrap();
        c.assign(std::slice::from_ref(&tp)).unwrap();
        let got = poll_n(&mut c, 3);
        assert_eq!(got[0].key, None, "{codec}: null key");
        assert_eq!(got[1].key.as_deref(), Some(&b""[..]), "{codec}: empty key");
        assert_eq!(got[2].value, None, "{codec}: null value");
        assert_eq!(got.iter().map(|r| r.timestamp).collect::<Vec<_>>(), [1_000, 2_000, 3_000], "{codec}");
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            got[0].headers.iter().map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec()))).collect();
        assert_eq!(headers, [(b"h1".to_vec(), Some(b"v1".to_vec())), (b"h2".to_vec(), None)], "{codec}");
        assert!(got[1].headers.is_empty() && i < 5);
    }
    broker.shutdown().unwrap();
}
