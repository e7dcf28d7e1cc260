//! `fetchbench serve` as a process: SIGKILL in the middle of a produce loop loses no acknowledged
//! record, SIGTERM/SIGINT shut down cleanly (exit 0, `.kafka_cleanshutdown`), `--config` takes a
//! Kafka `server.properties`, and the connection limits (`max.connections`,
//! `max.connections.per.ip`) over TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::broker::{Broker, BrokerConfig};
use fetchbench::log::batch::mixed::MixedBatches;
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::log::RecordBatch;
use fetchbench::protocol::frame;
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, FetchRequest, ProduceRequest, RequestHeader, RequestKind, ResponseKind,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::broker::{metadata, name, produce, Client};

/// How long a started process may take to print its listen address, or to exit after a signal.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `fetchbench serve`, killed (SIGKILL) when dropped.
pub(crate) struct ServeProcess {
    child: Option<Child>,
    stderr_path: PathBuf,
    pub(crate) addr: SocketAddr,
}

impl ServeProcess {
    /// Starts `fetchbench serve` with `args` (stderr into `work/<name>.stderr`) and waits for its
    /// "listening on" line.
    pub(crate) fn start(work: &Path, name: &str, args: &[&str]) -> ServeProcess {
        let stderr_path = work.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawning fetchbench serve");
        let mut process = ServeProcess { child: Some(child), stderr_path, addr: "0.0.0.0:0".parse().unwrap() };
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            let text = process.stderr();
            if let Some(rest) = text.split("listening on ").nth(1) {
                if let Some(addr) = rest.split_whitespace().next().and_then(|a| a.parse().ok()) {
                    process.addr = addr;
                    return process;
                }
            }
            if let Some(status) = process.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("fetchbench serve {args:?} exited ({status}) before listening:\n{text}");
            }
            assert!(Instant::now() < deadline, "fetchbench serve {args:?} did not listen in time:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id of the running `fetchbench serve`.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub(crate) fn signal(&self, signal: Signal) {
        let pid = self.child.as_ref().unwrap().id();
        kill(Pid::from_raw(pid as i32), signal).unwrap();
    }

    /// Waits for the process to exit (panics after [`PROCESS_TIMEOUT`]).
    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        let child = self.child.as_mut().unwrap();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "fetchbench serve did not exit in time:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status when the process has exited (it is then reaped), `None` while it runs.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().unwrap()?;
        self.child = None;
        Some(status)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(crate) fn serve_args(log_dir: &Path) -> Vec<String> {
    vec!["--listen".into(), "127.0.0.1:0".into(), "--log-dir".into(), log_dir.display().to_string()]
}

pub(crate) fn start_on(work: &Path, name: &str, log_dir: &Path) -> ServeProcess {
    let args = serve_args(log_dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ServeProcess::start(work, name, &args)
}

/// A batch of `n` records whose values are `value(request, i)`.
fn distinct_batch(request: usize, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    for i in 0..n {
        let key = format!("k{request}-{i}");
        b.append(1_700_000_000_000 + request as i64, Some(key.as_bytes()), Some(value(request, i).as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn value(request: usize, i: usize) -> String {
    format!("value {i} of request {request}")
}

/// Produces `records` to `topic`-0 with acks=1: (error code, base offset), or `None` when the
/// connection failed (the broker was killed) before the answer came.
fn try_produce(client: &mut Client, topic: &str, records: Vec<u8>) -> Option<(i16, i64)> {
    let req =
        ProduceRequest::default().with_acks(1).with_timeout_ms(5000).with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records)))])]);
    let correlation_id = client.next_correlation_id;
    client.next_correlation_id += 1;
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(9)
        .with_correlation_id(correlation_id);
    let bytes = frame::encode_request(&header, &RequestKind::Produce(req)).unwrap();
    client.stream.write_all(&bytes).ok()?;
    let payload = frame::read_frame(&mut client.stream, 1 << 20).ok()??;
    let decoded = frame::decode_response(payload, ApiKey::Produce, 9).unwrap();
    assert_eq!(decoded.header.correlation_id, correlation_id);
    let ResponseKind::Produce(r) = decoded.body else { panic!() };
    let p = &r.responses[0].partition_responses[0];
    Some((p.error_code, p.base_offset))
}

/// Every record of `topic`-0 from offset 0 to the high watermark as (offset, value), fetched in
/// small responses (so batches are cut at the end of some), checking every complete batch's
/// CRC-32C.
fn fetch_all(client: &mut Client, topic: &str) -> Vec<(i64, String)> {
    fetch_partition(client, topic, 0, 4096)
}

/// Every record of `topic`-`partition` from offset 0 to the high watermark as (offset, value),
/// fetched in responses of at most `max_bytes` (so batches are cut at the end of some), checking
/// every complete batch's CRC-32C.
pub(crate) fn fetch_partition(client: &mut Client, topic: &str, partition: i32, max_bytes: i32) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let req =
            FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_max_bytes(max_bytes).with_topics(vec![
                FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(max_bytes)]),
            ]);
        let ResponseKind::Fetch(r) = client.call(ApiKey::Fetch, 12, RequestKind::Fetch(req)) else { panic!() };
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch of {topic}-{partition} at {offset}");
        let mut bytes: &[u8] = p.records.as_deref().unwrap_or(&[]);
        if bytes.is_empty() {
            assert_eq!(offset, p.high_watermark, "no data below the high watermark at {offset}");
            return out;
        }
        let mut progressed = false;
        while let Ok(batch) = RecordBatch::parse(bytes) {
            batch.verify_crc().unwrap_or_else(|e| panic!("batch at {}: {e}", batch.base_offset()));
            for rec in batch.records().unwrap().to_vec().unwrap() {
                if rec.offset >= offset {
                    out.push((rec.offset, String::from_utf8(rec.value.unwrap().to_vec()).unwrap()));
                }
            }
            offset = batch.next_offset();
            progressed = true;
            bytes = &bytes[batch.as_bytes().len()..];
        }
        // Whatever is left is a batch cut by the size limit (KIP-74), never garbage.
        assert!(progressed, "a {max_bytes}-byte response held no whole batch at {offset}");
        let mut rest = MixedBatches::new(bytes);
        assert!(rest.next().is_none(), "only a cut batch may follow the whole ones");
        assert_eq!(rest.partial_tail(), !bytes.is_empty());
    }
}

#[test]
fn serve_sigkill_mid_produce_loses_no_acknowledged_record() {
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("logs");
    let mut first = start_on(work.path(), "first", &log_dir);
    let addr = first.addr;
    let mut c = Client::connect(addr);
    assert_eq!(metadata(&mut c, "crash", 12).topics[0].error_code, 0);
    let producer = std::thread::spawn(move || {
        let mut acked: Vec<(i64, String)> = Vec::new();
        for request in 0.. {
            let n = 1 + request % 4;
            match try_produce(&mut c, "crash", distinct_batch(request, n)) {
                Some((0, base)) => acked.extend((0..n).map(|i| (base + i as i64, value(request, i)))),
                Some((code, _)) => panic!("produce {request}: error {code}"),
                None => return acked, // the broker is gone
            }
        }
        unreachable!()
    });
    // Let a few hundred requests be acknowledged, then kill the broker mid-loop.
    std::thread::sleep(Duration::from_millis(700));
    first.signal(Signal::SIGKILL);
    let status = first.wait();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(Signal::SIGKILL as i32));
    let acked = producer.join().unwrap();
    assert!(acked.len() > 10, "only {} records acknowledged before the kill", acked.len());
    assert!(!log_dir.join(".kafka_cleanshutdown").exists());

    let second = start_on(work.path(), "second", &log_dir);
    assert!(second.stderr().contains("recovered"), "{}", second.stderr());
    let mut c = Client::connect(second.addr);
    let stored = fetch_all(&mut c, "crash");
    // Offsets are dense from 0 (records written but not acknowledged may be there too).
    for (i, (offset, _)) in stored.iter().enumerate() {
        assert_eq!(*offset, i as i64, "offsets after recovery");
    }
    for (offset, value) in &acked {
        let got = stored.get(*offset as usize).map(|(_, v)| v.as_str());
        assert_eq!(got, Some(value.as_str()), "acknowledged record at offset {offset}");
    }
    // The log takes new records after the recovered end.
    assert_eq!(produce(&mut c, "crash", distinct_batch(1 << 20, 1), 1), Some((0, stored.len() as i64)));
}

#[test]
fn serve_sigterm_and_sigint_shut_down_cleanly() {
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("logs");
    for (round, signal) in [Signal::SIGTERM, Signal::SIGINT].into_iter().enumerate() {
        let mut broker = start_on(work.path(), &format!("round{round}"), &log_dir);
        if round > 0 {
            assert!(broker.stderr().contains("clean shutdown"), "restart after a signal:\n{}", broker.stderr());
            assert!(!log_dir.join(".kafka_cleanshutdown").exists(), "the marker is removed at start");
        }
        let mut c = Client::connect(broker.addr);
        metadata(&mut c, "t", 12);
        assert_eq!(produce(&mut c, "t", distinct_batch(round, 3), 1), Some((0, 3 * round as i64)));
        broker.signal(signal);
        if round == 1 {
            // A second signal during the shutdown is ignored (it may also come after the exit).
            let _ = kill(Pid::from_raw(broker.child.as_ref().unwrap().id() as i32), signal);
        }
        let status = broker.wait();
        let stderr = broker.stderr();
        assert_eq!(status.code(), Some(0), "{signal}: {status}\n{stderr}");
        assert!(stderr.contains(&format!("{}: shutting down", signal.as_str())), "{stderr}");
        assert!(stderr.contains("shut down cleanly"), "{stderr}");
        assert!(log_dir.join(".kafka_cleanshutdown").is_file(), "{signal}");
        assert!(log_dir.join("recovery-point-offset-checkpoint").is_file());
    }
    let broker = start_on(work.path(), "last", &log_dir);
    assert!(broker.stderr().contains("(1 partitions, clean shutdown)"), "{}", broker.stderr());
    let mut c = Client::connect(broker.addr);
    assert_eq!(fetch_all(&mut c, "t").len(), 6);
}

/// Kafka 4.0's `config/server.properties` (KRaft, combined broker and controller), as shipped.
const KAFKA_4_SERVER_PROPERTIES: &str = r"# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.

############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:9093

############################# Socket Server Settings #############################

# The address the socket server listens on.
#   FORMAT:
#     listeners = listener_name://host_name:port
#   EXAMPLE:
#     listeners = PLAINTEXT://your.host.name:9092
listeners=PLAINTEXT://:9092,CONTROLLER://:9093

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

# Listener name, hostname and port the broker or the controller will advertise to clients.
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093

# A comma-separated list of the names of the listeners used by the controller.
controller.listener.names=CONTROLLER

# Maps listener names to security protocols, the default is for them to be the same.
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

# The number of threads that the server uses for receiving requests from the network and sending responses to the network
num.network.threads=3

# The number of threads that the server uses for processing requests, which may include disk I/O
num.io.threads=8

# The send buffer (SO_SNDBUF) used by the socket server
socket.send.buffer.bytes=102400

# The receive buffer (SO_RCVBUF) used by the socket server
socket.receive.buffer.bytes=102400

# The maximum size of a request that the socket server will accept (protection against OOM)
socket.request.max.bytes=104857600

############################# Log Basics #############################

# A comma separated list of directories under which to store log files
log.dirs=/tmp/kraft-combined-logs

# The default number of log partitions per topic.
num.partitions=1

# The number of threads per data directory to be used for log recovery at startup and flushing at shutdown.
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Flush Policy #############################

#log.flush.interval.messages=10000
#log.flush.interval.ms=1000

############################# Log Retention Policy #############################

log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";

/// The lines of Kafka 3.x's `config/kraft/server.properties` that differ from Kafka 4's.
const KAFKA_3_KRAFT_EXTRA: &str = "controller.quorum.voters=1@localhost:9093\ngroup.initial.rebalance.delay.ms=0\n";

fn props(text: &str) -> std::collections::BTreeMap<String, String> {
    fetchbench::log::config::parse_properties(text)
}

#[test]
fn serve_config_applies_kafka_server_properties() {
    let mut config = BrokerConfig::new("127.0.0.1:1".parse().unwrap(), "/nowhere", ReadPathKind::Copy);
    config.apply_props(&props(KAFKA_4_SERVER_PROPERTIES)).unwrap();
    assert_eq!(config.log_dir, PathBuf::from("/tmp/kraft-combined-logs"));
    assert_eq!(config.listen, "0.0.0.0:9092".parse().unwrap(), "PLAINTEXT://:9092 binds every interface");
    assert_eq!(
        config.advertised_listener,
        Some(("localhost".to_string(), 9092)),
        "clients are told advertised.listeners' PLAINTEXT entry"
    );
    assert_eq!(config.socket_request_max_bytes, 104_857_600);
    assert_eq!(config.log_config.retention_ms, 168 * 3_600_000);
    // Kafka's defaults for the group coordinator.
    assert_eq!(config.group_initial_rebalance_delay_ms, 3000);
    assert_eq!(config.group_min_session_timeout_ms, 6000);
    assert_eq!(config.group_max_session_timeout_ms, 1_800_000);
    assert_eq!(config.group_max_size, i32::MAX);
    assert_eq!(config.offsets_topic_num_partitions, 50);
    assert_eq!((config.max_connections, config.max_connections_per_ip), (i32::MAX as usize, i32::MAX as usize));
    // The file's thread counts; Kafka's defaults for the queue and the idle timeout.
    assert_eq!((config.num_network_threads, config.num_io_threads), (3, 8));
    assert_eq!((config.queued_max_requests, config.connections_max_idle_ms), (500, Some(600_000)));
    config
        .apply_props(&props(
            "num.network.threads=1\nnum.io.threads=2\nqueued.max.requests=7\nconnections.max.idle.ms=300\n",
        ))
        .unwrap();
    assert_eq!((config.num_network_threads, config.num_io_threads, config.queued_max_requests), (1, 2, 7));
    assert_eq!(config.connections_max_idle_ms, Some(300));
    config.apply_props(&props("connections.max.idle.ms=-1\n")).unwrap();
    assert_eq!(config.connections_max_idle_ms, None, "negative: never");

    let three = format!("{KAFKA_4_SERVER_PROPERTIES}{KAFKA_3_KRAFT_EXTRA}offsets.topic.num.partitions=4\n");
    config.apply_props(&props(&three)).unwrap();
    assert_eq!((config.group_initial_rebalance_delay_ms, config.offsets_topic_num_partitions), (0, 4));

    // A listener named other than PLAINTEXT, mapped to PLAINTEXT; log.dir when log.dirs is absent.
    config
        .apply_props(&props(
            "listeners=CONTROLLER://127.0.0.1:9093,BROKER://127.0.0.1:19092\n\
             listener.security.protocol.map=BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             controller.listener.names=CONTROLLER\nlog.dir=/data/a\n",
        ))
        .unwrap();
    assert_eq!((config.listen, config.log_dir.as_path()), ("127.0.0.1:19092".parse().unwrap(), Path::new("/data/a")));

    for (bad, key) in [
        ("num.partitions=1\nlog.retention.horus=1\n", "log.retention.horus"),
        ("listeners=SSL://:9093\n", "listeners"),
        ("max.connections=-1\n", "max.connections"),
        ("num.io.threads=0\n", "num.io.threads"),
        ("connections.max.idle.ms=soon\n", "connections.max.idle.ms"),
        ("group.min.session.timeout.ms=9\ngroup.max.session.timeout.ms=8\n", "group.min.session.timeout.ms"),
    ] {
        let err = config.apply_props(&props(bad)).unwrap_err().to_string();
        assert!(err.contains(key), "{bad:?}: {err}");
    }
}

#[test]
fn serve_config_file_with_x_overrides_runs_the_broker() {
    let work = tempfile::tempdir().unwrap();
    let log_dir = work.path().join("kraft-combined-logs");
    let text = KAFKA_4_SERVER_PROPERTIES
        .replace("log.dirs=/tmp/kraft-combined-logs", &format!("log.dirs={}", log_dir.display()))
        .replace("listeners=PLAINTEXT://:9092,", "listeners=PLAINTEXT://127.0.0.1:0,");
    let file = work.path().join("server.properties");
    std::fs::write(&file, text).unwrap();
    let file = file.display().to_string();
    let mut broker = ServeProcess::start(
        work.path(),
        "config",
        &["--config", &file, "-X", "num.partitions=3", "-X", "max.connections=7"],
    );
    assert_eq!(broker.addr.ip().to_string(), "127.0.0.1");
    let stderr = broker.stderr();
    // num.network.threads and num.io.threads are applied now (issue 15): no warning for them.
    for key in ["process.roles", "node.id", "socket.send.buffer.bytes", "offsets.topic.replication.factor"] {
        assert_eq!(stderr.matches(&format!("broker config {key}=")).count(), 1, "one warning for {key}:\n{stderr}");
    }
    for key in ["num.network.threads", "num.io.threads"] {
        assert_eq!(stderr.matches(&format!("broker config {key}=")).count(), 0, "{key} is applied:\n{stderr}");
    }
    let mut c = Client::connect(broker.addr);
    // -X num.partitions=3 wins over the file's num.partitions=1.
    assert_eq!(metadata(&mut c, "three", 12).topics[0].partitions.len(), 3);
    assert!(log_dir.join("three-2").is_dir());
    broker.signal(Signal::SIGTERM);
    assert_eq!(broker.wait().code(), Some(0));

    // An unknown key: refused, named, exit 2.
    std::fs::write(work.path().join("bad.properties"), "num.partitions=1\nnum.partitons=2\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["serve", "--log-dir", &log_dir.display().to_string(), "--config"])
        .arg(work.path().join("bad.properties"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("num.partitons"), "{out:?}");
}

/// Whether the broker closed `stream` without answering (EOF or reset), reading for up to 5 s.
fn closed_by_broker(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(0) | Err(_))
}

/// Sends ApiVersions on a new connection; `true` when answered.
fn answered(addr: SocketAddr) -> bool {
    let Ok(stream) = TcpStream::connect(addr) else { return false };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut c = Client { stream, next_correlation_id: 1 };
    c.send(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()));
    matches!(frame::read_frame(&mut c.stream, 1 << 20), Ok(Some(_)))
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_connection_limits_close_new_connections_only() {
    let tmp = tempfile::tempdir().unwrap();
    for (key, limit) in [("max.connections", 2usize), ("max.connections.per.ip", 3)] {
        let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join(key), ReadPathKind::Copy);
        config.apply_props(&props(&format!("{key}={limit}\n"))).unwrap();
        let broker = Broker::start(config).unwrap();
        let addr = broker.local_addr();
        let mut open: Vec<Client> = (0..limit).map(|_| Client::connect(addr)).collect();
        for c in &mut open {
            assert_eq!(metadata(c, "l", 12).topics[0].error_code, 0, "{key}: connections within the limit");
        }
        assert_eq!(broker.test_support().open_connections(), limit);
        // One more: closed at once, unanswered.
        let mut extra = TcpStream::connect(addr).unwrap();
        let _ = extra.write_all(&[0, 0, 0, 0]);
        assert!(closed_by_broker(&mut extra), "{key}: the connection past the limit is closed");
        // The open ones are unaffected.
        for c in &mut open {
            assert_eq!(metadata(c, "l", 12).topics[0].error_code, 0, "{key}: open connections keep working");
        }
        // Closing one frees its place.
        drop(open.pop());
        wait_until("the closed connection's place is free", || broker.test_support().open_connections() < limit);
        assert!(answered(addr), "{key}: a new connection after one closed");
        wait_until("the probe connection is gone", || broker.test_support().open_connections() < limit);
        assert_eq!(broker.test_support().connection_panics(), 0);
        broker.shutdown().unwrap();
    }
}

#[test]
fn serve_oversized_frame_closes_only_that_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Copy);
    config.apply_props(&props("socket.request.max.bytes=1000\n")).unwrap();
    let broker = Broker::start(config).unwrap();
    let mut good = Client::connect(broker.local_addr());
    metadata(&mut good, "o", 12);
    let mut big = TcpStream::connect(broker.local_addr()).unwrap();
    let mut frame = 2000i32.to_be_bytes().to_vec();
    frame.resize(4 + 2000, 0);
    let _ = big.write_all(&frame);
    assert!(closed_by_broker(&mut big), "a frame over socket.request.max.bytes closes its connection");
    assert_eq!(metadata(&mut good, "o", 12).topics[0].error_code, 0);
    broker.shutdown().unwrap();
}
