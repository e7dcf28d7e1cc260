//! The broker of `fetchbench run --bootstrap HOST:PORT`, seen from the run: what DescribeConfigs
//! says of it ([`RemoteBroker::describe`]), its read path switched per combination through
//! IncrementalAlterConfigs ([`RemoteBroker::set_serving`], with its server model when the run
//! compares models) and, with `--metrics HOST:PORT`,
//! its resource use read from a `fetchbench serve` metrics endpoint ([`MetricsEndpoint`]).
//!
//! ## Broker figures from the endpoint
//!
//! A phase scrapes the endpoint (`GET /metrics`, the OpenMetrics text of
//! [`crate::broker::metrics_registry`]) when its measured interval starts and when it ends;
//! [`Scrape::since`] turns the two into the interval's broker figures, as an embedded run
//! measures them in-process:
//!
//! | figure | from |
//! |---|---|
//! | broker CPU user / sys | `fetchbench_process_cpu_{user,system}_seconds_total`, end - start |
//! | minor / major faults | `fetchbench_process_{minor,major}_page_faults_total`, end - start |
//! | context switches | `fetchbench_process_{voluntary,involuntary}_context_switches_total`, end - start |
//! | RSS | `fetchbench_process_resident_memory_bytes` at the end |
//! | record bytes read into user space | `fetchbench_read_path_user_copied_bytes_total`, every `read_path` summed, end - start (no sample: 0, the family appears with its first byte) |
//! | fetches in flight at the start | `fetchbench_fetch_requests_in_flight` at the start |
//! | broker-side fetch latency | `fetchbench_fetch_consumer_time_ms{records=yes\|no}` buckets, end - start |
//!
//! The process is the `fetchbench serve` process: the broker alone (an embedded run subtracts
//! its client threads instead). The fetch latency histograms are rebuilt from bucket counts:
//! every Fetch of a bucket counts as the bucket's upper bound (buckets grow by 2^(1/4), so a
//! percentile is at most 19% above the recorded one; the `+Inf` bucket counts as 60 s, the
//! clamp of [`crate::metrics::Latency`]). A run says so in a note.
//!
//! The remote machine is the endpoint's `fetchbench_machine_info`; the server model and the read
//! path that serves are `fetchbench_broker_info`'s.
//!
//! ## Bad endpoints
//!
//! An endpoint that cannot be reached, answers other than `200`, does not answer whole within
//! 10 s, or answers text without the families above ([`ScrapeError`]) gives no broker figure:
//! the phase keeps its broker figures at 0 (as for any external cluster) and says why in a note;
//! what the run measured itself (throughput, client CPU, client latencies) stands. So does an
//! interval over which the broker restarted (`fetchbench_broker_start_time_seconds` changed:
//! its counters started again). An endpoint that is not the `--bootstrap` broker's is found
//! when it does not show the read path the run just set there
//! ([`RemoteBroker::check_endpoint`]): the run stops with that error.
//!
//! ## The HTTP exchange
//!
//! One `GET /metrics HTTP/1.1` with `Connection: close` per scrape, over `std::net::TcpStream`,
//! the body read to its `Content-Length` (or the end of the stream), at most
//! [`MAX_SCRAPE_BYTES`], the whole exchange within [`SCRAPE_TIMEOUT`] (an endpoint that trickles
//! bytes cannot hold a run longer); chunked bodies are refused (the endpoint never sends one).
//! Hand-written: one request against fetchbench's own endpoint does not justify an HTTP client
//! crate and its dependency tree. The samples are parsed by the `prometheus-parse` crate; the
//! labels of the two info metrics are read here ([`info_labels`]), since that crate splits a
//! label set at every comma, also one inside a quoted value (a CPU model can hold one).

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_parse::{HistogramCount, Value};

use super::usage::Usage;
use crate::broker::FetchLatencies;
use crate::client::admin::{
    alter_broker_configs, connected_broker_id, describe_broker_configs, describe_broker_dynamic_configs,
};
use crate::client::{ClientError, KafkaConnection};
use crate::machine::Machine;
use crate::metrics::Latency;

/// Largest scrape body read, bytes (fetchbench's is ~15 KB).
pub(crate) const MAX_SCRAPE_BYTES: usize = 16 << 20;

/// How long a whole scrape may take: connecting, the request, the whole answer.
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// `read.path`, fetchbench's dynamic broker key.
pub(crate) const READ_PATH_KEY: &str = "read.path";

/// `server.model`, fetchbench's dynamic broker key of the front end.
pub(crate) const SERVER_MODEL_KEY: &str = "server.model";

/// Why a scrape gave no figures.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScrapeError {
    /// Resolving, connecting, writing or reading.
    #[error("metrics endpoint {addr}: {source}")]
    Io {
        /// The endpoint.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// An answer that is not a `200` HTTP response with a body fetchbench can read.
    #[error("metrics endpoint {addr}: {problem}")]
    Http {
        /// The endpoint.
        addr: String,
        /// What was wrong, with the status line when there was one.
        problem: String,
    },
    /// A body without the families of a fetchbench broker.
    #[error("metrics endpoint {addr}: not a fetchbench broker's metrics: {problem}")]
    NotMetrics {
        /// The endpoint.
        addr: String,
        /// The first family missing or malformed.
        problem: String,
    },
    /// The broker restarted between two scrapes: its counters started again.
    #[error(
        "metrics endpoint {addr}: the broker restarted during the interval (its start time went from \
         {from:.3} to {to:.3}, Unix seconds)"
    )]
    Restarted {
        /// The endpoint.
        addr: String,
        /// `fetchbench_broker_start_time_seconds` at the first scrape.
        from: f64,
        /// At the second.
        to: f64,
    },
}

/// A `fetchbench serve` metrics endpoint (`metrics.listen`), `host:port`.
#[derive(Debug)]
pub(crate) struct MetricsEndpoint {
    /// `host:port`.
    pub addr: String,
    /// Intervals whose broker figures came from it ([`RemoteWindow::close`]).
    measured: AtomicU64,
}

impl MetricsEndpoint {
    /// The endpoint at `addr` (`host:port`), not contacted yet.
    pub(crate) fn new(addr: impl Into<String>) -> MetricsEndpoint {
        MetricsEndpoint { addr: addr.into(), measured: AtomicU64::new(0) }
    }

    /// How many measured intervals took their broker figures from the endpoint so far.
    pub(crate) fn intervals_measured(&self) -> u64 {
        self.measured.load(Ordering::Relaxed)
    }

    /// Scrapes the endpoint now.
    ///
    /// Errors: [`ScrapeError`].
    pub(crate) fn scrape(&self) -> Result<Scrape, ScrapeError> {
        let body = self.get()?;
        Scrape::parse(&body).map_err(|problem| ScrapeError::NotMetrics { addr: self.addr.clone(), problem })
    }

    fn get(&self) -> Result<String, ScrapeError> {
        let io = |source| ScrapeError::Io { addr: self.addr.clone(), source };
        let http = |problem: String| ScrapeError::Http { addr: self.addr.clone(), problem };
        let sock =
            self.addr.to_socket_addrs().map_err(io)?.next().ok_or_else(|| {
                io(std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolves to no address"))
            })?;
        let deadline = Instant::now() + SCRAPE_TIMEOUT;
        let left = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero());
        let late = |read: usize| http(format!("no whole answer within {SCRAPE_TIMEOUT:?} ({read} bytes read)"));
        let mut s = TcpStream::connect_timeout(&sock, SCRAPE_TIMEOUT).map_err(io)?;
        s.set_write_timeout(Some(left().ok_or_else(|| late(0))?)).map_err(io)?;
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr).map_err(io)?;
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        // The answer's whole length once its head is read: head + Content-Length.
        let mut whole: Option<usize> = None;
        loop {
            let wait = left().ok_or_else(|| late(raw.len()))?;
            s.set_read_timeout(Some(wait)).map_err(io)?;
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => return Err(io(e)),
            }
            if raw.len() > MAX_SCRAPE_BYTES {
                return Err(http(format!("the answer is longer than {MAX_SCRAPE_BYTES} bytes")));
            }
            if whole.is_none() {
                whole = answer_length(&raw);
            }
            if whole.is_some_and(|w| raw.len() >= w) {
                break;
            }
        }
        let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Err(http(format!("not an HTTP response (no header end in {} bytes)", raw.len())));
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
        let status = head.lines().next().unwrap_or_default().to_string();
        let mut parts = status.split_whitespace();
        if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
            return Err(http(format!("not an HTTP response: {:?}", truncate(&status))));
        }
        if parts.next() != Some("200") {
            return Err(http(format!("answered {:?}", truncate(&status))));
        }
        let header = |name: &str| {
            head.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            return Err(http("a chunked body (fetchbench's endpoint sends Content-Length)".into()));
        }
        let mut body = &raw[head_end + 4..];
        if let Some(len) = header("content-length") {
            let len: usize = len.parse().map_err(|_| http(format!("Content-Length {len:?}")))?;
            if body.len() < len {
                return Err(http(format!("the body ended after {} of {len} bytes", body.len())));
            }
            body = &body[..len];
        }
        String::from_utf8(body.to_vec()).map_err(|e| http(format!("the body is not UTF-8: {e}")))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The whole length of the HTTP answer that starts `raw`, once its head is complete and says
/// its `Content-Length` (`None` before, or without one: then the answer ends with the stream).
fn answer_length(raw: &[u8]) -> Option<usize> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..head_end]).ok()?;
    let len = head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
    })?;
    Some(head_end + 4 + len)
}

/// The labels of info metric `sample` (e.g. `fetchbench_machine_info`): its first sample line
/// `NAME{k="v",...} 1` read with the text format's escapes (`\\`, `\"`, `\n`), so that a value
/// may hold a comma, a brace or a quote.
///
/// Errors: no such line, or a label set that does not parse (which, named).
pub(crate) fn info_labels(text: &str, sample: &str) -> Result<BTreeMap<String, String>, String> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix('{')))
        .ok_or_else(|| format!("no {sample}"))?;
    let bad = |why: &str| format!("{sample}: {why}");
    let mut labels = BTreeMap::new();
    let mut chars = line.chars().peekable();
    loop {
        match chars.peek() {
            Some('}') => return Ok(labels),
            None => return Err(bad("the label set does not end")),
            _ => {}
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad(&format!("label name {name:?}")));
        }
        if chars.next() != Some('"') {
            return Err(bad(&format!("{name}: the value is not quoted")));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('"') => break,
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    other => return Err(bad(&format!("{name}: escape {other:?}"))),
                },
                Some(c) => value.push(c),
                None => return Err(bad(&format!("{name}: the value does not end"))),
            }
        }
        labels.insert(name, value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// One scrape of a fetchbench broker's endpoint: the figures a run takes differences of.
#[derive(Clone, Debug)]
pub(crate) struct Scrape {
    /// The `fetchbench serve` process's CPU, faults and context switches since it started.
    pub process: Usage,
    /// Its RSS now, bytes.
    pub rss_bytes: u64,
    /// Fetch requests in flight now.
    pub fetches_in_flight: u64,
    /// `fetch_consumer_time_ms{records="yes"}` buckets: (upper bound ms, cumulative count).
    pub fetch_with_records: Vec<(f64, f64)>,
    /// `fetch_consumer_time_ms{records="no"}` buckets.
    pub fetch_without_records: Vec<(f64, f64)>,
    /// `broker_info`'s `read_path`: the path serving now.
    pub read_path: String,
    /// `broker_info`'s `server_model`: the front end of new connections now.
    pub server_model: String,
    /// `fetchbench_broker_start_time_seconds` (Unix seconds; `None` from a broker without it).
    pub started: Option<f64>,
    /// `machine_info`, as the broker's machine describes itself.
    pub machine: Machine,
    /// `read_path_user_copied_bytes_total` summed over its paths.
    pub user_copied: f64,
}

/// The broker's figures over one measured interval ([`Scrape::since`]).
#[derive(Debug)]
pub(crate) struct BrokerInterval {
    /// CPU, faults and context switches of the broker process over the interval.
    pub usage: Usage,
    /// Its RSS at the end, bytes.
    pub rss_bytes: u64,
    /// Fetch requests in flight at the start.
    pub fetches_in_flight_at_start: u64,
    /// Consumer Fetch latencies over the interval (bucket upper bounds, see the module docs).
    pub fetch: FetchLatencies,
    /// Record bytes its read paths read into user space over the interval.
    pub user_copied: u64,
}

impl Scrape {
    /// Parses an endpoint's text.
    ///
    /// Errors: the first family of the [module docs](self) table (or `broker_info`,
    /// `machine_info`) that is missing or not a number, named.
    pub(crate) fn parse(text: &str) -> Result<Scrape, String> {
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).map_err(|e| e.to_string())?;
        let samples = &scrape.samples;
        let find = |name: &str| samples.iter().find(|s| s.metric == name);
        let number = |name: &str| -> Result<f64, String> {
            match find(name).map(|s| &s.value) {
                Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) if v.is_finite() && *v >= 0.0 => Ok(*v),
                Some(other) => Err(format!("{name}: not a non-negative number: {other:?}")),
                None => Err(format!("no {name}")),
            }
        };
        let broker = ("fetchbench_broker_info", info_labels(text, "fetchbench_broker_info")?);
        let machine = ("fetchbench_machine_info", info_labels(text, "fetchbench_machine_info")?);
        let label = |(metric, labels): &(&str, BTreeMap<String, String>), k: &str| {
            labels.get(k).cloned().ok_or_else(|| format!("{metric}: no {k}"))
        };
        let uint = |info: &(&str, BTreeMap<String, String>), k: &str| -> Result<u64, String> {
            label(info, k)?.parse().map_err(|_| format!("{}: {k} is not a number", info.0))
        };
        let buckets = |records: &str| -> Vec<(f64, f64)> {
            samples
                .iter()
                .filter(|s| s.metric == "fetchbench_fetch_consumer_time_ms" && s.labels.get("records") == Some(records))
                .find_map(|s| match &s.value {
                    Value::Histogram(h) => Some(sorted(h)),
                    _ => None,
                })
                .unwrap_or_default()
        };
        Ok(Scrape {
            process: Usage {
                user: number("fetchbench_process_cpu_user_seconds_total")?,
                sys: number("fetchbench_process_cpu_system_seconds_total")?,
                minflt: number("fetchbench_process_minor_page_faults_total")?,
                majflt: number("fetchbench_process_major_page_faults_total")?,
                csw: number("fetchbench_process_voluntary_context_switches_total")?
                    + number("fetchbench_process_involuntary_context_switches_total")?,
            },
            rss_bytes: number("fetchbench_process_resident_memory_bytes")? as u64,
            fetches_in_flight: number("fetchbench_fetch_requests_in_flight")? as u64,
            fetch_with_records: buckets("yes"),
            fetch_without_records: buckets("no"),
            read_path: label(&broker, "read_path")?,
            server_model: label(&broker, "server_model")?,
            started: number("fetchbench_broker_start_time_seconds").ok(),
            machine: Machine {
                nproc: uint(&machine, "nproc")?,
                kernel: label(&machine, "kernel")?,
                arch: label(&machine, "arch")?,
                cpu_model: label(&machine, "cpu_model")?,
                memory_bytes: uint(&machine, "memory_bytes")?,
                io_uring: label(&machine, "io_uring")? == "true",
            },
            user_copied: samples
                .iter()
                .filter(|s| s.metric == "fetchbench_read_path_user_copied_bytes_total")
                .filter_map(|s| match s.value {
                    Value::Counter(v) | Value::Untyped(v) if v.is_finite() && v >= 0.0 => Some(v),
                    _ => None,
                })
                .sum(),
        })
    }

    /// The broker's figures from `start` (an earlier scrape of the same endpoint) to `self`.
    /// Counters that went down (the broker restarted in between) count from 0.
    pub(crate) fn since(&self, start: &Scrape) -> BrokerInterval {
        BrokerInterval {
            usage: self.process.minus_part(start.process),
            rss_bytes: self.rss_bytes,
            fetches_in_flight_at_start: start.fetches_in_flight,
            fetch: FetchLatencies {
                with_records: latency_between(&start.fetch_with_records, &self.fetch_with_records),
                without_records: latency_between(&start.fetch_without_records, &self.fetch_without_records),
            },
            user_copied: (self.user_copied - start.user_copied).max(0.0) as u64,
        }
    }
}

/// A measured interval on an external broker with a metrics endpoint: a scrape at its start
/// ([`RemoteWindow::open`]) and one at its end ([`RemoteWindow::close`]).
#[derive(Debug)]
pub(crate) struct RemoteWindow {
    start: Option<Result<Scrape, ScrapeError>>,
}

impl RemoteWindow {
    /// Scrapes `endpoint` now (nothing without one).
    pub(crate) fn open(endpoint: Option<&MetricsEndpoint>) -> RemoteWindow {
        RemoteWindow { start: endpoint.map(MetricsEndpoint::scrape) }
    }

    /// Scrapes `endpoint` again and returns the interval's broker figures; `None` without an
    /// endpoint, or with a note in `notes` when either scrape failed or the broker restarted in
    /// between (the broker figures are then not measured: 0, never made up). A note also says
    /// so when the broker's read path at either end was not `read_path` (someone else altered
    /// `read.path` meanwhile).
    pub(crate) fn close(
        self,
        endpoint: Option<&MetricsEndpoint>,
        read_path: &str,
        notes: &mut Vec<String>,
    ) -> Option<BrokerInterval> {
        let (Some(endpoint), Some(start)) = (endpoint, self.start) else { return None };
        let figures = start.and_then(|start| {
            let end = endpoint.scrape()?;
            if let (Some(from), Some(to)) = (start.started, end.started) {
                if from != to {
                    return Err(ScrapeError::Restarted { addr: endpoint.addr.clone(), from, to });
                }
            }
            for (at, s) in [("start", &start), ("end", &end)] {
                if s.read_path != read_path {
                    notes.push(format!(
                        "the broker's read path at the interval's {at} was {}, not {read_path}: read.path was \
                         altered by someone else during the run",
                        s.read_path
                    ));
                }
            }
            Ok(end.since(&start))
        });
        match figures {
            Ok(f) => {
                endpoint.measured.fetch_add(1, Ordering::Relaxed);
                Some(f)
            }
            Err(e) => {
                notes.push(format!(
                    "broker figures not measured (CPU, faults, RSS, fetch latency reported as 0 / empty): {e}"
                ));
                None
            }
        }
    }
}

fn sorted(h: &[HistogramCount]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = h.iter().map(|b| (b.less_than, b.count)).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// A histogram of the Fetches counted in the cumulative buckets `end` and not in `start` (both
/// sorted by bound): each bucket's new count at its upper bound (ms -> ns; `+Inf` at the 60 s
/// clamp).
fn latency_between(start: &[(f64, f64)], end: &[(f64, f64)]) -> Latency {
    let before = |le: f64| start.binary_search_by(|(l, _)| l.total_cmp(&le)).map_or(0.0, |i| start[i].1);
    let mut latency = Latency::new();
    let mut below = 0.0; // cumulative new count of the buckets below
    for &(le, cumulative) in end {
        let new = (cumulative - before(le)).max(0.0);
        let in_bucket = (new - below).max(0.0);
        below = below.max(new);
        if in_bucket >= 1.0 {
            let ns = if le.is_finite() { (le * 1e6) as u64 } else { u64::MAX };
            latency.record_n_ns(ns, in_bucket.round() as u64);
        }
    }
    latency
}

/// The broker behind `--bootstrap`: its id, its configs as DescribeConfigs reported them when
/// the run started, and its metrics endpoint when `--metrics` names one.
#[derive(Debug)]
pub(crate) struct RemoteBroker {
    /// `host:port` the run connects to.
    pub bootstrap: String,
    /// The node id of that broker (Metadata).
    pub broker_id: i32,
    /// Its configs (DescribeConfigs, every key; `None` for a sensitive or unset value).
    pub configs: BTreeMap<String, Option<String>>,
    /// Its per-broker dynamic values when the run started (`DYNAMIC_BROKER_CONFIG`): what
    /// [`Self::restore`] sets back, every other changed key's dynamic value being deleted.
    pub dynamic: BTreeMap<String, String>,
    /// The metrics endpoint, with `--metrics`.
    pub metrics: Option<MetricsEndpoint>,
}

impl RemoteBroker {
    /// Connects to `bootstrap`, finds the broker's id and describes its configs.
    ///
    /// Errors: connecting, Metadata, DescribeConfigs (its error code and message).
    pub(crate) fn describe(bootstrap: &str, metrics: Option<&str>) -> Result<RemoteBroker, ClientError> {
        let mut conn = KafkaConnection::connect(bootstrap, "fetchbench-run-admin", Duration::from_secs(10))?;
        let broker_id = connected_broker_id(&mut conn)?;
        let configs = describe_broker_configs(&mut conn, broker_id)?;
        let dynamic = describe_broker_dynamic_configs(&mut conn, broker_id)?;
        Ok(RemoteBroker {
            bootstrap: bootstrap.to_string(),
            broker_id,
            configs,
            dynamic,
            metrics: metrics.map(MetricsEndpoint::new),
        })
    }

    /// Whether the broker is a fetchbench broker with a dynamic `read.path`.
    pub(crate) fn has_read_path(&self) -> bool {
        self.configs.contains_key(READ_PATH_KEY)
    }

    /// Sets the broker's `server.model` (when `model` is given) and `read.path` (their
    /// per-broker dynamic values) in one IncrementalAlterConfigs request, which the broker
    /// applies whole or not at all.
    ///
    /// Errors: connecting; the broker's refusal (INVALID_REQUEST with its reason, e.g. a path
    /// its server model cannot run).
    pub(crate) fn set_serving(&self, model: Option<&str>, path: &str) -> Result<(), ClientError> {
        let mut changes = Vec::new();
        if let Some(m) = model {
            changes.push((SERVER_MODEL_KEY, Some(m)));
        }
        changes.push((READ_PATH_KEY, Some(path)));
        self.alter(&changes)
    }

    /// Sets `server.model` and `read.path` back as they were when the run started, at the
    /// level they were set: the per-broker dynamic value of [`Self::dynamic`] again, or, when
    /// the broker had none, that value deleted, so the static or default one serves again (as
    /// `kafka-configs.sh --alter --delete-config` leaves it); `server.model` only when
    /// `model_changed`.
    ///
    /// Errors: as [`Self::set_serving`].
    pub(crate) fn restore(&self, model_changed: bool) -> Result<(), ClientError> {
        let mut changes = Vec::new();
        if model_changed {
            changes.push((SERVER_MODEL_KEY, self.dynamic.get(SERVER_MODEL_KEY).map(String::as_str)));
        }
        changes.push((READ_PATH_KEY, self.dynamic.get(READ_PATH_KEY).map(String::as_str)));
        self.alter(&changes)
    }

    /// Checks that the metrics endpoint is this broker's: right after [`Self::set_serving`] set
    /// `model` / `path` here, the endpoint must show them in `fetchbench_broker_info` (another
    /// broker's endpoint would show its own). A scrape that fails is not a mismatch (each
    /// interval then says so in its note).
    ///
    /// Errors: the endpoint shows another model or path, both named.
    pub(crate) fn check_endpoint(&self, model: &str, path: &str) -> Result<(), String> {
        let Some(endpoint) = &self.metrics else { return Ok(()) };
        let Ok(scrape) = endpoint.scrape() else { return Ok(()) };
        if scrape.read_path != path || scrape.server_model != model {
            return Err(format!(
                "the metrics endpoint {} shows server.model {} and read.path {} right after the broker at {} \
                 was set to {model} and {path}: it is not that broker's endpoint (or another client alters \
                 the broker's configs meanwhile)",
                endpoint.addr, scrape.server_model, scrape.read_path, self.bootstrap
            ));
        }
        Ok(())
    }

    fn alter(&self, changes: &[(&str, Option<&str>)]) -> Result<(), ClientError> {
        let mut conn = KafkaConnection::connect(&self.bootstrap, "fetchbench-run-admin", Duration::from_secs(10))?;
        alter_broker_configs(&mut conn, self.broker_id, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::metrics_registry::{escape_label_value, BrokerMetrics, LiveValues};

    fn live(read_path: &str) -> LiveValues {
        LiveValues {
            connections: 1,
            fetches_in_flight: 3,
            purgatory_size: 0,
            server_model: "threaded".into(),
            read_path: read_path.into(),
        }
    }

    #[test]
    fn parses_the_brokers_own_text_and_takes_differences() {
        let metrics = BrokerMetrics::new();
        metrics.record_fetch(Duration::from_micros(300), true);
        let start = Scrape::parse(&metrics.encode(&live("sendfile")).unwrap()).unwrap();
        assert_eq!(start.read_path, "sendfile");
        assert_eq!(start.fetches_in_flight, 3);
        assert_eq!(start.machine, Machine::current());
        assert!(start.rss_bytes > 0);
        for _ in 0..10 {
            metrics.record_fetch(Duration::from_micros(300), true);
        }
        metrics.record_fetch(Duration::from_millis(2), true);
        metrics.record_fetch(Duration::from_millis(500), false);
        let mut burn = 0u64;
        for i in 0..2_000_000u64 {
            burn = burn.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(burn);
        let end = Scrape::parse(&metrics.encode(&live("copy")).unwrap()).unwrap();
        let interval = end.since(&start);
        assert_eq!(interval.fetch.with_records.count(), 11, "the Fetch before the start is not counted");
        assert_eq!(interval.fetch.without_records.count(), 1);
        // Bucket upper bounds: 300 us falls in (0.269, 0.32] ms, 2 ms in (1.68, 2.0] ms.
        let p50 = interval.fetch.with_records.summary().p50_us;
        assert!((320.0..322.0).contains(&p50), "{p50} (the HdrHistogram keeps 3 digits)");
        let max = interval.fetch.with_records.summary().max_us;
        assert!((2000.0..2160.0).contains(&max), "{max} (2 ms is in the bucket (1.81, 2.15] ms)");
        let long_poll = interval.fetch.without_records.summary().p50_us;
        assert!((500.0e3..600.0e3).contains(&long_poll), "{long_poll}");
        assert!(interval.usage.user + interval.usage.sys >= 0.0);
        assert_eq!(interval.fetches_in_flight_at_start, 3);
        assert_eq!(end.read_path, "copy");
    }

    #[test]
    fn garbage_names_what_is_missing() {
        assert_eq!(Scrape::parse("hello\nworld").unwrap_err(), "no fetchbench_broker_info");
        let text = BrokerMetrics::new().encode(&live("copy")).unwrap();
        let without_cpu: String = text.lines().filter(|l| !l.contains("cpu_user")).map(|l| format!("{l}\n")).collect();
        assert_eq!(Scrape::parse(&without_cpu).unwrap_err(), "no fetchbench_process_cpu_user_seconds_total");
        let negative = text.replace("fetchbench_fetch_requests_in_flight 3", "fetchbench_fetch_requests_in_flight -3");
        assert!(Scrape::parse(&negative).unwrap_err().contains("not a non-negative number"));
    }

    #[test]
    fn a_down_endpoint_and_a_non_http_answer_are_errors() {
        // A port nothing listens on: bind, note the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let down = MetricsEndpoint::new(format!("127.0.0.1:{port}")).scrape().unwrap_err();
        assert!(matches!(down, ScrapeError::Io { .. }), "{down}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            for answer in [&b"garbage garbage"[..], b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"] {
                let (mut s, _) = listener.accept().unwrap();
                // The whole request first: closing with unread bytes would reset the connection.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "the request ended early");
                    request.extend_from_slice(&buf[..n]);
                }
                s.write_all(answer).unwrap();
            }
        });
        let endpoint = MetricsEndpoint::new(addr);
        let garbage = endpoint.scrape().unwrap_err().to_string();
        assert!(garbage.contains("not an HTTP response"), "{garbage}");
        let not_found = endpoint.scrape().unwrap_err().to_string();
        assert!(not_found.contains("404"), "{not_found}");
        server.join().unwrap();
    }
    /// Serves each of `answers` to one connection, after reading its request.
    fn serve(answers: Vec<Vec<u8>>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for answer in answers {
                let (mut s, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(n) if n > 0 => request.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let _ = s.write_all(&answer);
            }
        });
        addr
    }

    fn ok(body: &str) -> Vec<u8> {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn info_labels_keep_commas_braces_and_escapes_in_values() {
        let text = "# TYPE x info\nx_info{cpu_model=\"AMD, Inc. {7} \\\"Zen\\\" a\\\\b\\nc\",nproc=\"2\"} 1\n";
        let labels = info_labels(text, "x_info").unwrap();
        assert_eq!(labels["cpu_model"], "AMD, Inc. {7} \"Zen\" a\\b\nc");
        assert_eq!(labels["nproc"], "2");
        assert_eq!(info_labels(text, "y_info").unwrap_err(), "no y_info");
        assert!(info_labels("x_info{a=b} 1", "x_info").unwrap_err().contains("not quoted"));
        assert!(info_labels("x_info{a=\"b", "x_info").unwrap_err().contains("does not end"));
        // A CPU model with a comma comes through a scrape whole (prometheus-parse would cut it).
        let text = BrokerMetrics::new().encode(&live("copy")).unwrap();
        let cpu = format!("cpu_model=\"{}\"", escape_label_value(&Machine::current().cpu_model));
        assert!(text.contains(&cpu), "{text}");
        let comma = text.replace(&cpu, "cpu_model=\"Vendor, Model 9\"");
        assert_eq!(Scrape::parse(&comma).unwrap().machine.cpu_model, "Vendor, Model 9");
    }

    #[test]
    fn the_answer_ends_at_its_content_length() {
        assert_eq!(answer_length(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"), Some(43));
        assert_eq!(answer_length(b"HTTP/1.1 200 OK\r\nContent-Le"), None);
        assert_eq!(answer_length(b"HTTP/1.1 200 OK\r\n\r\nab"), None, "without one: the end of the stream");
        // An endpoint that answers whole and keeps the connection open is read without waiting.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let text = BrokerMetrics::new().encode(&live("copy")).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(&ok(&text)).unwrap();
            std::thread::sleep(Duration::from_secs(30)); // open, silent
        });
        let t = Instant::now();
        MetricsEndpoint::new(addr).scrape().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(server);
    }

    #[test]
    fn an_endpoint_that_trickles_is_cut_at_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n");
            // One byte every 100 ms: each read returns before a per-read timeout would fire.
            while s.write_all(b"#").is_ok() {
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let t = Instant::now();
        let e = MetricsEndpoint::new(addr).scrape().unwrap_err().to_string();
        assert!(e.contains("no whole answer within"), "{e}");
        assert!(t.elapsed() >= SCRAPE_TIMEOUT && t.elapsed() < SCRAPE_TIMEOUT * 3, "{:?}", t.elapsed());
    }

    #[test]
    fn an_interval_over_a_restart_has_no_figures() {
        let before = BrokerMetrics::new().encode(&live("copy")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let after = BrokerMetrics::new().encode(&live("copy")).unwrap();
        let endpoint = MetricsEndpoint::new(serve(vec![ok(&before), ok(&after), ok(&after), ok(&after)]));
        let mut notes = Vec::new();
        let window = RemoteWindow::open(Some(&endpoint));
        assert!(window.close(Some(&endpoint), "copy", &mut notes).is_none());
        assert!(notes.len() == 1 && notes[0].contains("the broker restarted during the interval"), "{notes:?}");
        assert_eq!(endpoint.intervals_measured(), 0);
        // The same broker at both ends: figures, counted.
        let window = RemoteWindow::open(Some(&endpoint));
        assert!(window.close(Some(&endpoint), "copy", &mut notes).is_some(), "{notes:?}");
        assert_eq!(endpoint.intervals_measured(), 1);
    }
}
