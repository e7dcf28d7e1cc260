//! The metrics endpoint (`metrics.listen`, `broker::metrics_endpoint`): a broker started with
//! `metrics.listen=127.0.0.1:0` is produced to and fetched from with the test client, then
//! scraped over HTTP, twice: counters and histograms never go down, the FetchConsumer histogram
//! counted the fetches, the read path moved at least the bytes fetched, the process CPU seconds
//! lie between two `getrusage(RUSAGE_SELF)` readings taken around the scrape (this test runs in
//! the broker's process), and bad requests get an HTTP error without breaking the endpoint. The
//! Python test parses the scrape with the `prometheus-client` package's OpenMetrics parser.
//!
//! A request is recorded just after its response is written, before its connection is read
//! again, so each test sends one more request (a Metadata) on the same connection before it
//! scrapes: its answer proves the Fetches before it are recorded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::read_path::ReadPathKind;
use nix::sys::resource::{getrusage, UsageWho};

use crate::broker::{batch, fetch, metadata, produce, Client};

/// Records in the one batch produced; every Fetch below returns that whole batch.
const RECORDS: usize = 10;

/// A broker with `metrics.listen=127.0.0.1:0` (set as `serve -X` sets it).
fn start(kind: ReadPathKind) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), kind);
    let props = BTreeMap::from([("metrics.listen".to_string(), "127.0.0.1:0".to_string())]);
    config.apply_props(&props).unwrap();
    let handle = Broker::start(config).unwrap();
    (tmp, handle)
}

/// One raw HTTP exchange: sends `request`, reads until the server closes; returns (status line,
/// headers, body).
fn http(addr: SocketAddr, request: &[u8]) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head in {text:?}"));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// `GET /metrics`: the body, checked to be a 200 with the OpenMetrics Content-Type.
fn scrape(addr: SocketAddr) -> String {
    let (status, headers, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}\n{body}");
    assert!(headers.contains("Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"), "{headers}");
    assert!(headers.contains(&format!("Content-Length: {}", body.len())), "{headers}");
    body
}

/// Every sample line of an exposition: `name{labels}` -> value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("sample line {l:?}"));
            (key.to_string(), value.parse().unwrap_or_else(|e| panic!("sample line {l:?}: {e}")))
        })
        .collect()
}

fn value(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples.get(key).unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

/// User + system CPU seconds of this process (`getrusage(RUSAGE_SELF)`).
fn cpu_seconds() -> f64 {
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    s(u.user_time()) + s(u.system_time())
}

/// Produces one batch of [`RECORDS`] to `topic`; returns its size in bytes.
fn produce_batch(c: &mut Client, topic: &str) -> u64 {
    metadata(c, topic, 12);
    let records = batch(RECORDS);
    let len = records.len() as u64;
    assert_eq!(produce(c, topic, records, 1), Some((0, 0)));
    len
}

/// `n` Fetches of the whole batch, then a Metadata: all of them recorded when it returns.
fn fetch_n(c: &mut Client, topic: &str, n: usize) {
    for _ in 0..n {
        let (code, _, records) = fetch(c, topic, 0, 12);
        assert_eq!((code, records.len()), (0, RECORDS));
    }
    metadata(c, topic, 12);
}

#[test]
fn scrapes_are_monotonic_and_count_what_was_fetched() {
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let addr = broker.metrics_addr().expect("metrics.listen set");
    assert_ne!(addr.port(), 0);
    let mut c = Client::connect(broker.local_addr());
    let batch_bytes = produce_batch(&mut c, "me");
    fetch_n(&mut c, "me", 5);

    let before = cpu_seconds();
    let first = samples(&scrape(addr));
    let after = cpu_seconds();
    fetch_n(&mut c, "me", 3);
    let second_text = scrape(addr);
    let second = samples(&second_text);

    // Counters and histograms never go down, and none vanishes.
    for (key, v) in &first {
        let monotonic = key.split('{').next().unwrap();
        if monotonic.ends_with("_total") || monotonic.ends_with("_bucket") || monotonic.ends_with("_count") {
            let later = value(&second, key);
            assert!(later >= *v, "{key}: {v} -> {later}");
        }
    }
    // The fetches, each counted once (this connection's only consumer Fetches).
    let fetches = "fetchbench_request_total_time_ms_count{api=\"FetchConsumer\"}";
    assert_eq!((value(&first, fetches), value(&second, fetches)), (5.0, 8.0));
    assert_eq!(value(&second, "fetchbench_request_total_time_ms_bucket{le=\"+Inf\",api=\"FetchConsumer\"}"), 8.0);
    assert!(value(&second, "fetchbench_request_total_time_ms_count{api=\"Produce\"}") >= 1.0);
    assert!(value(&second, "fetchbench_request_total_time_ms_count{api=\"Metadata\"}") >= 1.0);
    // The read path moved at least the record bytes fetched, one transfer per Fetch here.
    let bytes = "fetchbench_read_path_bytes_total{read_path=\"sendfile\"}";
    assert!(value(&first, bytes) >= 5.0 * batch_bytes as f64, "{first:#?}");
    assert!(value(&second, bytes) - value(&first, bytes) >= 3.0 * batch_bytes as f64, "{second:#?}");
    let transfers = "fetchbench_read_path_transfers_total{read_path=\"sendfile\"}";
    assert_eq!(value(&second, transfers) - value(&first, transfers), 3.0);
    let syscalls = "fetchbench_read_path_syscalls_total{read_path=\"sendfile\"}";
    assert!(value(&second, syscalls) - value(&first, syscalls) >= 3.0, "at least one sendfile per transfer");
    // CPU: this process's, read between two getrusage readings (generous: 0.05 s either side
    // for the kernel's user/system split, which is an estimate per reading).
    let cpu = value(&first, "fetchbench_process_cpu_user_seconds_total")
        + value(&first, "fetchbench_process_cpu_system_seconds_total");
    assert!(cpu >= before - 0.05 && cpu <= after + 0.05, "scraped {cpu} s, getrusage {before} .. {after} s");
    assert!(value(&second, "fetchbench_process_resident_memory_bytes") > 0.0);
    assert!(value(&second, "fetchbench_connections") >= 1.0, "this test's connection is open");
    assert_eq!(value(&second, "fetchbench_fetch_requests_in_flight"), 0.0);
    assert_eq!(value(&second, "fetchbench_purgatory_size"), 0.0);
    assert!(second_text.contains("fetchbench_broker_info{server_model=\"threaded\",read_path=\"sendfile\""));
    assert!(second_text.contains("fetchbench_machine_info{nproc=\""), "{second_text}");
    assert!(second_text.ends_with("# EOF\n"));
    // In process: the same registry, the same families.
    let in_process = broker.metrics_text().unwrap();
    let families = |t: &str| t.lines().filter(|l| l.starts_with("# TYPE")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(families(&in_process), families(&second_text));
    assert!(value(&samples(&in_process), fetches) >= 8.0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn bad_requests_get_errors_and_the_endpoint_goes_on() {
    let (_tmp, broker) = start(ReadPathKind::Copy);
    let addr = broker.metrics_addr().unwrap();
    let status = |request: &[u8]| http(addr, request).0;
    assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
    assert_eq!(status(b"GET /metrics/x HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
    let (line, headers, _) = http(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    assert_eq!((line.as_str(), headers.contains("Allow: GET")), ("HTTP/1.1 405 Method Not Allowed", true));
    assert_eq!(status(b"\x00\x01\xff garbage\r\n\r\n"), "HTTP/1.1 400 Bad Request");
    assert_eq!(status(b"GET /metrics SPDY/9\r\n\r\n"), "HTTP/1.1 400 Bad Request");
    // A head past the limit (never ending): refused once 8 KiB arrived.
    let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9000));
    assert_eq!(status(&huge), "HTTP/1.1 431 Request Header Fields Too Large");
    // A peer that closes half way, and one that closes at once.
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /met").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = String::new();
        let _ = s.read_to_string(&mut rest);
        assert!(rest.is_empty() || rest.starts_with("HTTP/1.1 400"), "{rest}");
    }
    drop(TcpStream::connect(addr).unwrap());
    // Still serving, and HTTP/1.0 with a query string is a scrape too.
    let (line, _, body) = http(addr, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    assert_eq!(line, "HTTP/1.1 200 OK");
    assert!(body.ends_with("# EOF\n"));
    scrape(addr);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
    // Stopped with the broker.
    assert!(TcpStream::connect(addr).is_err(), "the endpoint still listens after shutdown");
}

#[test]
fn no_endpoint_unless_configured_but_the_text_is_there() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    assert_eq!(broker.metrics_addr(), None);
    let text = broker.metrics_text().unwrap();
    assert!(text.contains("# TYPE fetchbench_process_cpu_user_seconds counter"), "{text}");
    // No request yet: a labelled family appears with its first sample.
    assert!(!text.contains("fetchbench_request_total_time_ms"), "{text}");
    assert!(text.ends_with("# EOF\n"));
    broker.shutdown().unwrap();
}

#[test]
fn a_bad_metrics_listen_is_a_config_error() {
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), "/nonexistent", ReadPathKind::Copy);
    for bad in ["", "localhost", "127.0.0.1", "127.0.0.1:99999"] {
        let props = BTreeMap::from([("metrics.listen".to_string(), bad.to_string())]);
        let err = config.apply_props(&props).unwrap_err().to_string();
        assert!(err.contains("metrics.listen"), "{bad:?}: {err}");
    }
}

/// The scrape, parsed by the `prometheus-client` Python package's OpenMetrics parser
/// (`tests/python/metrics_scrape.py`): in CI a missing package fails the test.
#[test]
fn python_prometheus_client_parses_the_scrape() {
    let Some(python) = crate::python_clients::python_with("prometheus_client") else { return };
    let (_tmp, broker) = start(ReadPathKind::Sendfile);
    let addr = broker.metrics_addr().unwrap();
    let mut c = Client::connect(broker.local_addr());
    let batch_bytes = produce_batch(&mut c, "mp");
    fetch_n(&mut c, "mp", 4);
    let url = format!("http://{addr}/metrics");
    let summary =
        crate::python_clients::run_script_args(&python, "metrics_scrape.py", &[&url, "4"], "prometheus-client parser");
    assert!(summary["families"].as_u64().unwrap() >= 16, "{summary}");
    assert_eq!(summary["fetch_consumer"].as_f64(), Some(4.0), "{summary}");
    assert!(summary["read_path_bytes"].as_f64().unwrap() >= 4.0 * batch_bytes as f64, "{summary}");
    assert!(summary["cpu_seconds"].as_f64().unwrap() > 0.0, "{summary}");
    broker.shutdown().unwrap();
}

/// Under `server.model=uring` the cores record the total times and the read path's bytes and
/// transfers (not its system calls: no sample rather than a made-up 0).
#[test]
fn uring_cores_record_requests_and_transfers() {
    if let Err(e) = fetchbench::broker::ServerModel::Uring.probe() {
        assert!(!crate::common::in_ci(), "CI must run the server.model=uring tests: {e}");
        eprintln!("SKIP: server.model=uring: {e}");
        return;
    }
    let (_tmp, broker) =
        crate::uring_model::start_model(ReadPathKind::UringSplice, fetchbench::broker::ServerModel::Uring, |c| {
            c.uring_cores = 1;
            c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        });
    let mut c = Client::connect(broker.local_addr());
    let batch_bytes = produce_batch(&mut c, "mu");
    fetch_n(&mut c, "mu", 3);
    let text = scrape(broker.metrics_addr().unwrap());
    let s = samples(&text);
    assert_eq!(value(&s, "fetchbench_request_total_time_ms_count{api=\"FetchConsumer\"}"), 3.0);
    assert!(value(&s, "fetchbench_read_path_bytes_total{read_path=\"uring-splice\"}") >= 3.0 * batch_bytes as f64);
    assert_eq!(value(&s, "fetchbench_read_path_transfers_total{read_path=\"uring-splice\"}"), 3.0);
    assert!(!text.contains("fetchbench_read_path_syscalls_total{read_path=\"uring-splice\"}"), "{text}");
    assert!(text.contains("fetchbench_broker_info{server_model=\"uring\",read_path=\"uring-splice\""), "{text}");
    broker.shutdown().unwrap();
}
