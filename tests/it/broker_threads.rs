//! The broker's threads and connections under load (issue 15): a fixed number of threads
//! whatever the connections (Kafka's network threads + request handler pool), long polls that
//! hold no thread and are dropped when their client goes away, and `connections.max.idle.ms`.
//!
//! Waits poll a broker query (`fetches_in_flight`, `open_connections`, `delayed_operations`)
//! with a generous deadline; no sleep stands in for a state.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle};
use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::protocol::frame;
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, FetchRequest, RequestHeader, RequestKind, ResponseKind};

use crate::broker::{batch, metadata, name, produce, Client};

fn start_with(configure: impl FnOnce(&mut BrokerConfig)) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Sendfile);
    configure(&mut config);
    (tmp, Broker::start(config).unwrap())
}

/// A Fetch v12 frame of `topic`-0 at `offset`, waiting up to `max_wait_ms` for 1 byte.
fn fetch_frame(topic: &str, offset: i64, max_wait_ms: i32, correlation_id: i32) -> Vec<u8> {
    let req = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            FetchPartition::default().with_partition(0).with_fetch_offset(offset).with_partition_max_bytes(1 << 20),
        ])]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(12)
        .with_correlation_id(correlation_id);
    frame::encode_request(&header, &RequestKind::Fetch(req)).unwrap().to_vec()
}

/// Polls `done` every 2 ms until it holds or `limit` passes; returns how long it took (None: it
/// never held).
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    done().then(|| start.elapsed())
}

/// Whether the broker closed `stream` (end of file or reset), waiting up to `limit`; the time it
/// took.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => Some(start.elapsed()),
        Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut => {
            Some(start.elapsed())
        }
        _ => None,
    }
}

fn api_versions_answered(addr: SocketAddr) -> bool {
    let mut c = Client::connect(addr);
    matches!(
        c.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default())),
        ResponseKind::ApiVersions(r) if r.error_code == 0
    )
}

/// A client that closes its socket while its Fetch waits (max wait 2^31-1 ms) frees everything
/// within a second: the Fetch leaves `fetches_in_flight` and the purgatory, the connection its
/// place. Repeated, so it is no accident of one wake-up.
#[test]
fn a_closed_clients_parked_fetch_releases_its_resources_within_a_second() {
    let (_tmp, broker) = start_with(|_| {});
    let mut setup = Client::connect(broker.local_addr());
    metadata(&mut setup, "gone", 12);
    let support = broker.test_support();
    for round in 0..5 {
        let mut client = TcpStream::connect(broker.local_addr()).unwrap();
        client.write_all(&fetch_frame("gone", 0, i32::MAX, 1)).unwrap();
        assert!(within(Duration::from_secs(10), || broker.fetches_in_flight() == 1).is_some(), "round {round}");
        assert_eq!(support.delayed_operations(), 1, "round {round}: the Fetch waits in the purgatory");
        assert_eq!(support.open_connections(), 2);
        drop(client); // FIN, no RST: a plain close
        let took = within(Duration::from_secs(10), || broker.fetches_in_flight() == 0);
        assert!(took.is_some_and(|t| t < Duration::from_secs(1)), "round {round}: released after {took:?}");
        assert!(within(Duration::from_secs(1), || support.open_connections() == 1).is_some(), "round {round}");
        assert_eq!(support.delayed_operations(), 0, "round {round}");
    }
    // Nothing was answered for the dropped fetches.
    assert_eq!(broker.take_fetch_latency().count(), 0);
    // Connect, Fetch, close at once (the hang-up may arrive with the request): 200 times.
    for _ in 0..200 {
        let mut client = TcpStream::connect(broker.local_addr()).unwrap();
        client.write_all(&fetch_frame("gone", 0, i32::MAX, 1)).unwrap();
    }
    let took = within(Duration::from_secs(10), || broker.fetches_in_flight() == 0 && support.open_connections() == 1);
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(1)),
        "after 200 connect-fetch-close: {} fetches in flight, {} connections, after {took:?}",
        broker.fetches_in_flight(),
        support.open_connections()
    );
    assert_eq!(support.delayed_operations(), 0);
    assert_eq!(support.connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// `connections.max.idle.ms` (300 ms here) closes a silent connection and one stuck after two
/// bytes of a size prefix; a connection whose Fetch waits longer than that (muted: a request in
/// flight) and one that keeps sending requests stay open.
#[test]
fn idle_connections_are_closed_at_connections_max_idle_ms() {
    const IDLE: Duration = Duration::from_millis(300);
    let (_tmp, broker) = start_with(|c| c.connections_max_idle_ms = Some(300));
    let addr = broker.local_addr();
    let mut setup = Client::connect(addr);
    metadata(&mut setup, "idle", 12);
    drop(setup);

    let silent = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        closed_within(&mut s, Duration::from_secs(10))
    });
    let stuck = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&[0, 0]).unwrap(); // two bytes of a size prefix, then nothing
        closed_within(&mut s, Duration::from_secs(10))
    });
    let parked = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        let start = Instant::now();
        let id = c.send(ApiKey::Fetch, 12, RequestKind::Fetch(fetch_req("idle", 1_000)));
        let ResponseKind::Fetch(r) = c.receive(ApiKey::Fetch, 12, id) else { panic!() };
        let waited = start.elapsed();
        assert_eq!(r.responses[0].partitions[0].error_code, 0);
        // Still open after a wait of three idle periods.
        assert!(matches!(
            c.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default())),
            ResponseKind::ApiVersions(_)
        ));
        waited
    });
    let active = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        let start = Instant::now();
        while start.elapsed() < IDLE * 4 {
            c.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()));
            std::thread::sleep(IDLE / 3);
        }
    });
    for (what, closed) in [("silent", silent.join().unwrap()), ("stuck inside a frame", stuck.join().unwrap())] {
        let closed = closed.unwrap_or_else(|| panic!("{what}: not closed within 10 s"));
        assert!(closed >= IDLE, "{what}: closed after {closed:?}, before connections.max.idle.ms");
    }
    assert!(parked.join().unwrap() >= Duration::from_millis(900), "the parked Fetch waited its max wait");
    active.join().unwrap();
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

fn fetch_req(topic: &str, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default().with_max_wait_ms(max_wait_ms).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
        FetchTopic::default().with_topic(name(topic)).with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(1 << 20)]),
    ])
}

/// Raises this process's open-file limit to its hard limit; returns the soft limit now.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    getrlimit(Resource::RLIMIT_NOFILE).unwrap().0
}

/// Threads of process `pid` now (`/proc/<pid>/task`).
fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count()
}

/// 2,000 connections, each with a Fetch parked for 2^31-1 ms, cost the broker no thread of
/// their own. The broker runs as its own process (`fetchbench serve`, so the count is its own,
/// not that of tests running beside this one): its thread count with 2,000 parked fetches stays
/// within a fixed bound (its fixed threads, generously: fewer than 64 in all), new clients are
/// served meanwhile, no parked Fetch is answered before data arrives, and one append answers
/// every one of them.
#[test]
fn two_thousand_parked_fetches_hold_a_fixed_number_of_threads() {
    const CONNECTIONS: usize = 2_000;
    let limit = raise_fd_limit();
    if limit < (2 * CONNECTIONS + 200) as u64 {
        eprintln!("SKIP: RLIMIT_NOFILE is {limit}, too low for {CONNECTIONS} connections");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The child inherits the raised RLIMIT_NOFILE.
    let serve = crate::serve_process::start_on(tmp.path(), "threads", &tmp.path().join("logs"));
    let (addr, pid) = (serve.addr, serve.pid());
    let idle = threads_of(pid);
    let mut setup = Client::connect(addr);
    metadata(&mut setup, "many", 12);
    let frame = fetch_frame("many", 0, i32::MAX, 1);
    let mut clients: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&frame).unwrap();
            s
        })
        .collect();
    // Every client is connected and its Fetch sent; a fresh client is still served, which needs
    // the broker to have read the connections queued before it.
    assert!(api_versions_answered(addr));
    let during = threads_of(pid);
    eprintln!("broker threads: {idle} idle, {during} with {CONNECTIONS} parked fetches");
    assert!(during < 64, "{during} broker threads with {CONNECTIONS} parked fetches ({idle} idle)");
    // None was answered: there is no data yet.
    for (i, s) in clients.iter_mut().enumerate().step_by(97) {
        s.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let read = s.read(&mut byte);
        assert!(matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "client {i}: {read:?}");
        s.set_nonblocking(false).unwrap();
    }
    // One append answers every parked Fetch (all watch many-0), each with the record.
    assert_eq!(produce(&mut setup, "many", batch(1), 1), Some((0, 0)));
    for (i, s) in clients.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let payload = frame::read_frame(s, 1 << 20).unwrap().unwrap_or_else(|| panic!("client {i}: no answer"));
        let r = frame::decode_response(payload, ApiKey::Fetch, 12).unwrap();
        let ResponseKind::Fetch(r) = r.body else { panic!() };
        assert!(r.responses[0].partitions[0].records.as_ref().is_some_and(|b| !b.is_empty()), "client {i}");
    }
    assert!(threads_of(pid) < 64);
    drop(clients);
    assert!(!serve.stderr().contains("panicked"), "{}", serve.stderr());
}

/// `num.io.threads` clients that send a Fetch with a large answer and never read it hold the io
/// threads writing to them for at most `SEND_TIMEOUT` (30 s) for the whole response: the
/// write-deadline watchdog then closes them and other clients are answered again (a review
/// found them held for good: SO_SNDTIMEO alone restarts at every send that moves a byte).
#[test]
fn clients_that_never_read_hold_an_io_thread_for_one_send_timeout_at_most() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), ReadPathKind::Sendfile);
    config.num_io_threads = 2;
    let broker = Broker::start(config).unwrap();
    let addr = broker.local_addr();
    let mut c = Client::connect(addr);
    metadata(&mut c, "big", 9);
    let value = vec![7u8; 512 << 10];
    for _ in 0..64 {
        let mut b = BatchBuilder::new(0, Compression::None);
        b.append(1_700_000_000_000, None, Some(&value), &[]);
        assert_eq!(produce(&mut c, "big", b.build().unwrap(), 1).unwrap().0, 0);
    }
    // 32 MiB in the log. Two clients ask for all of it and never read.
    let hostile: Vec<TcpStream> = (0..2)
        .map(|i| {
            let req = FetchRequest::default()
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(48 << 20)
                .with_topics(vec![FetchTopic::default().with_topic(name("big")).with_partitions(vec![
                    FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(48 << 20),
                ])]);
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::Fetch as i16)
                .with_request_api_version(12)
                .with_correlation_id(i);
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&frame::encode_request(&header, &RequestKind::Fetch(req)).unwrap()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500)); // let the io threads fill the socket buffers
    let start = Instant::now();
    let mut healthy = Client::connect(addr);
    healthy.stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let answered = healthy.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()));
    let took = start.elapsed();
    assert!(matches!(answered, ResponseKind::ApiVersions(_)));
    // SEND_TIMEOUT (30 s) for the whole write, plus the watchdog's interval; before the write
    // deadline the answer never came (a peer's kernel taking a few bytes now and then restarts
    // SO_SNDTIMEO at every send).
    assert!(took < Duration::from_secs(45), "a healthy ApiVersions waited {took:?} behind clients that never read");
    // The hostile connections were closed by the broker: after the bytes it sent, end of stream.
    for mut s in hostile {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        loop {
            match s.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
