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
//! An endpoint that cannot be reached, answers other than `200`, or answers text without the
//! families above ([`ScrapeError`]) gives no broker figure: the phase keeps its broker figures
//! at 0 (as for any external cluster) and says why in a note; what the run measured itself
//! (throughput, client CPU, client latencies) stands.
//!
//! ## The HTTP exchange
//!
//! One `GET /metrics HTTP/1.1` with `Connection: close` per scrape, over `std::net::TcpStream`,
//! the body read to the end of the stream (or its `Content-Length`), at most
//! [`MAX_SCRAPE_BYTES`]; chunked bodies are refused (the endpoint never sends one). Hand-written:
//! one request against fetchbench's own endpoint does not justify an HTTP client crate and its
//! dependency tree. The text is parsed by the `prometheus-parse` crate; it splits label sets
//! at commas, so a label value holding a comma (a CPU model could) is cut there.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use prometheus_parse::{HistogramCount, Sample, Value};

use super::usage::Usage;
use crate::broker::FetchLatencies;
use crate::client::admin::{alter_broker_configs, connected_broker_id, describe_broker_configs};
use crate::client::{ClientError, KafkaConnection};
use crate::machine::Machine;
use crate::metrics::Latency;

/// Largest scrape body read, bytes (fetchbench's is ~15 KB).
pub(crate) const MAX_SCRAPE_BYTES: usize = 16 << 20;

/// How long a scrape may take to connect, and to read or write each part.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

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
}

/// A `fetchbench serve` metrics endpoint (`metrics.listen`), `host:port`.
#[derive(Clone, Debug)]
pub(crate) struct MetricsEndpoint {
    /// `host:port`.
    pub addr: String,
}

impl MetricsEndpoint {
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
        let mut s = TcpStream::connect_timeout(&sock, SCRAPE_TIMEOUT).map_err(io)?;
        s.set_read_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
        s.set_write_timeout(Some(SCRAPE_TIMEOUT)).map_err(io)?;
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr).map_err(io)?;
        let mut raw = Vec::new();
        (&mut s).take(MAX_SCRAPE_BYTES as u64 + 1).read_to_end(&mut raw).map_err(io)?;
        if raw.len() > MAX_SCRAPE_BYTES {
            return Err(http(format!("the answer is longer than {MAX_SCRAPE_BYTES} bytes")));
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
    /// `machine_info`, as the broker's machine describes itself.
    pub machine: Machine,
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
        let info = |name: &str| -> Result<&Sample, String> { find(name).ok_or_else(|| format!("no {name}")) };
        let label =
            |s: &Sample, k: &str| s.labels.get(k).map(str::to_string).ok_or_else(|| format!("{}: no {k}", s.metric));
        let broker = info("fetchbench_broker_info")?;
        let machine = info("fetchbench_machine_info")?;
        let uint = |s: &Sample, k: &str| -> Result<u64, String> {
            label(s, k)?.parse().map_err(|_| format!("{}: {k} is not a number", s.metric))
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
            read_path: label(broker, "read_path")?,
            machine: Machine {
                nproc: uint(machine, "nproc")?,
                kernel: label(machine, "kernel")?,
                arch: label(machine, "arch")?,
                cpu_model: label(machine, "cpu_model")?,
                memory_bytes: uint(machine, "memory_bytes")?,
                io_uring: label(machine, "io_uring")? == "true",
            },
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
    /// endpoint, or with a note in `notes` when either scrape failed (the broker figures are
    /// then not measured: 0, never made up). A note also says so when the broker's read path
    /// at either end was not `read_path` (someone else altered `read.path` meanwhile).
    pub(crate) fn close(
        self,
        endpoint: Option<&MetricsEndpoint>,
        read_path: &str,
        notes: &mut Vec<String>,
    ) -> Option<BrokerInterval> {
        let (Some(endpoint), Some(start)) = (endpoint, self.start) else { return None };
        let figures = start.and_then(|start| {
            let end = endpoint.scrape()?;
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
            Ok(f) => Some(f),
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

/// A histogram of the Fetches counted in the cumulative buckets `end` and not in `start`: each
/// bucket's new count at its upper bound (ms -> ns; `+Inf` at the 60 s clamp).
fn latency_between(start: &[(f64, f64)], end: &[(f64, f64)]) -> Latency {
    let before = |le: f64| start.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c);
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
        Ok(RemoteBroker {
            bootstrap: bootstrap.to_string(),
            broker_id,
            configs,
            metrics: metrics.map(|m| MetricsEndpoint { addr: m.to_string() }),
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

    /// Sets `server.model` and `read.path` back to the values of [`Self::configs`] (what
    /// DescribeConfigs reported when the run started); `server.model` only when
    /// `model_changed`.
    ///
    /// Errors: as [`Self::set_serving`].
    pub(crate) fn restore(&self, model_changed: bool) -> Result<(), ClientError> {
        let original = |k: &str| self.configs.get(k).cloned().flatten();
        let (model, path) = (original(SERVER_MODEL_KEY), original(READ_PATH_KEY));
        let mut changes = Vec::new();
        if model_changed {
            changes.push((SERVER_MODEL_KEY, model.as_deref()));
        }
        changes.push((READ_PATH_KEY, path.as_deref()));
        self.alter(&changes)
    }

    fn alter(&self, changes: &[(&str, Option<&str>)]) -> Result<(), ClientError> {
        let mut conn = KafkaConnection::connect(&self.bootstrap, "fetchbench-run-admin", Duration::from_secs(10))?;
        alter_broker_configs(&mut conn, self.broker_id, changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::metrics_registry::{BrokerMetrics, LiveValues};

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
        let down = MetricsEndpoint { addr: format!("127.0.0.1:{port}") }.scrape().unwrap_err();
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
        let endpoint = MetricsEndpoint { addr };
        let garbage = endpoint.scrape().unwrap_err().to_string();
        assert!(garbage.contains("not an HTTP response"), "{garbage}");
        let not_found = endpoint.scrape().unwrap_err().to_string();
        assert!(not_found.contains("404"), "{not_found}");
        server.join().unwrap();
    }
}
