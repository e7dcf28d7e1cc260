//! The broker's metrics registry ([`BrokerMetrics`]) and its text ([`BrokerMetrics::encode`]):
//! what `GET /metrics` answers ([`super::metrics_endpoint`]) and
//! [`BrokerHandle::metrics_text`](super::server::BrokerHandle::metrics_text) returns, the same
//! bytes in-process and over HTTP.
//!
//! ## Format
//!
//! The OpenMetrics 1.0 text format (the successor of Prometheus' text format 0.0.4, which every
//! Prometheus server since 2.5 scrapes), written by the `prometheus-client` crate (the
//! Prometheus project's official Rust client; it writes OpenMetrics text only): `# HELP`,
//! `# TYPE` and `# UNIT` lines, counters as `NAME_total` samples, histograms as cumulative
//! `NAME_bucket{le=..}` / `NAME_sum` / `NAME_count`, info metrics as `NAME_info{labels} 1`, and a
//! final `# EOF`.
//!
//! ## Metrics (all prefixed `fetchbench_`; counters count from the broker's start, or the
//! process's start for `process_*`)
//!
//! | name (samples) | type | unit | labels | what |
//! |---|---|---|---|---|
//! | `process_cpu_user_seconds_total` | counter | seconds | | user CPU of the whole process (`getrusage(RUSAGE_SELF)`, getrusage(2)) |
//! | `process_cpu_system_seconds_total` | counter | seconds | | system CPU of the whole process (same) |
//! | `process_resident_memory_bytes` | gauge | bytes | | resident set size now (`VmRSS` of `/proc/self/status`) |
//! | `process_minor_page_faults_total` | counter | faults | | `ru_minflt` |
//! | `process_major_page_faults_total` | counter | faults | | `ru_majflt` |
//! | `process_voluntary_context_switches_total` | counter | switches | | `ru_nvcsw` |
//! | `process_involuntary_context_switches_total` | counter | switches | | `ru_nivcsw` |
//! | `read_path_bytes_total` | counter | bytes | `read_path` | record bytes moved to sockets by the read path ([`TransferStats::bytes`]) |
//! | `read_path_transfers_total` | counter | transfers | `read_path` | `transfer` calls, one per record set (file slice) sent ([`TransferStats::transfers`]) |
//! | `read_path_syscalls_total` | counter | syscalls | `read_path` | system calls (io_uring paths: SQEs + `io_uring_enter`) of those transfers ([`TransferStats::syscalls`]); `server.model=threaded` only |
//! | `read_path_user_copied_bytes_total` | counter | bytes | `read_path` | record bytes the read path read into user-space memory before sending them ([`TransferStats::user_copied`]: `copy`, `direct`, `uring-read-send`, `uring-send-zc`), under both server models; a path that reads nothing into user space has no sample |
//! | `request_total_time_ms` | histogram | milliseconds | `api` | Kafka's `RequestMetrics` `TotalTimeMs`: frame completely read -> response completely written |
//! | `fetch_consumer_time_ms` | histogram | milliseconds | `records` (`yes`, `no`) | consumer Fetch total time as `FetchConsumer` above, split by whether the response carried record bytes (`no`: long polls that waited at the log end, fetches woken with nothing, error answers); fine buckets ([`fetch_time_buckets_ms`]) so that a remote `fetchbench run --metrics` can take percentiles from differences of scrapes |
//! | `fetch_requests_in_flight` | gauge | requests | | Fetch requests decoded and not yet answered (parked ones included) |
//! | `purgatory_size` | gauge | requests | | requests waiting in the purgatory now (Kafka's `DelayedOperationPurgatory` `PurgatorySize`): parked Fetch, JoinGroup, SyncGroup |
//! | `connections` | gauge | connections | | client connections open now (Kafka's `connection-count`) |
//! | `broker_start_time_seconds` | gauge | seconds | | Unix time the broker started (its registry was made; as Prometheus' `process_start_time_seconds`): a scraper that sees it change knows the counters started again |
//! | `broker_info` | info | | `server_model`, `read_path`, `version` | how the broker serves (both current: `server.model` and `read.path` are dynamic; `server_model` is the front end of new connections) |
//! | `machine_info` | info | | `nproc`, `kernel`, `arch`, `cpu_model`, `memory_bytes`, `io_uring` | [`Machine`], as a results file records it |
//!
//! `api` is Kafka's request name: the API key's name (`Produce`, `Metadata`, `ListOffsets`,
//! ...), with Fetch split as Kafka splits it into `FetchConsumer` (`replica_id` < 0) and
//! `FetchFollower`. Counted: every request answered by a completely written response. Not
//! counted: requests never answered (a write that failed, a connection closed first) and those
//! answered without being decoded (ApiVersions at a version not served). Buckets (ms):
//! [`TOTAL_TIME_BUCKETS_MS`]. Unlike
//! [`BrokerHandle::take_fetch_latency`](super::server::BrokerHandle::take_fetch_latency) (reset at
//! each take, for one process's measured intervals), these histograms are never reset: a scraper
//! takes differences between scrapes.
//!
//! The read path counters are labelled by the path that moved the bytes (`read.path` is dynamic:
//! after a change, a response still being written is counted under the path it started on, the
//! next ones under the new path). Under `server.model=threaded` each io thread adds what its path counted
//! after each Fetch response, also for a write that failed part way (the bytes that moved).
//! Under `server.model=uring` the cores add the record sets (transfers) and their bytes of each
//! response completely written; they do not count system calls per transfer, so
//! `read_path_syscalls_total` has no sample for such a path (never a made-up 0).
//!
//! A labelled family (`request_total_time_ms`, `read_path_*`) appears in the text with its first
//! sample: the first request of an API, the first transfer of a path.
//!
//! Recording costs one histogram observation per request, two per consumer Fetch (each a read
//! lock of its family and atomic adds), and three atomic adds per Fetch response; the process
//! figures are read when scraped.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use nix::sys::resource::{getrusage, UsageWho};
use prometheus_client::encoding::text::{encode, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::machine::{rss_bytes, Machine};
use crate::read_path::TransferStats;

/// Upper bounds (milliseconds) of the `request_total_time_ms` buckets, `+Inf` added by the
/// encoder: from 0.1 ms (a Metadata on loopback) to 30 s (the clients' `request.timeout.ms`),
/// long polls (`fetch.max.wait.ms`, 500 ms by default) in between.
pub(crate) const TOTAL_TIME_BUCKETS_MS: [f64; 17] =
    [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0];

/// Upper bounds (milliseconds) of the `fetch_consumer_time_ms` buckets, `+Inf` added by the
/// encoder: 5 us times 2^(k/4) for k = 0..=94 (up to ~70 s, past the 60 s a Fetch latency is
/// clamped to), so a percentile read from a bucket's upper bound is at most 19% above the
/// sample it stands for.
pub(crate) fn fetch_time_buckets_ms() -> impl Iterator<Item = f64> {
    (0..=94).map(|k| 0.005 * 2f64.powf(k as f64 / 4.0))
}

/// The `records` label of `fetch_consumer_time_ms`: `yes` when the response carried record
/// bytes.
type RecordsLabel = [(&'static str, &'static str); 1];

/// The `api` label of `request_total_time_ms`: Kafka's `RequestMetrics` name of a request (see
/// the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RequestName {
    api_key: ApiKey,
    /// A Fetch from a follower (`replica_id` >= 0): `FetchFollower`.
    follower_fetch: bool,
}

impl RequestName {
    /// The name of a request of `api_key`; `consumer_fetch` says, for a Fetch, whether it came
    /// from a consumer (`FetchConsumer`) or a follower (`FetchFollower`).
    pub(crate) fn new(api_key: ApiKey, consumer_fetch: bool) -> RequestName {
        RequestName { api_key, follower_fetch: api_key == ApiKey::Fetch && !consumer_fetch }
    }
}

impl EncodeLabelValue for RequestName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        match (self.api_key, self.follower_fetch) {
            (ApiKey::Fetch, false) => encoder.write_str("FetchConsumer"),
            (ApiKey::Fetch, true) => encoder.write_str("FetchFollower"),
            // The enum's variant names are Kafka's `ApiKeys` names (`Produce`, `ListOffsets`).
            (key, _) => write!(encoder, "{key:?}"),
        }
    }
}

impl EncodeLabelSet for RequestName {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        EncodeLabelSet::encode(&[("api", *self)], encoder)
    }
}

/// The `read_path` label of the read path counters: the path's name (`sendfile`, `copy`, ...).
type PathLabel = [(&'static str, &'static str); 1];

/// The histogram of one `api`, with [`TOTAL_TIME_BUCKETS_MS`].
fn total_time_histogram() -> Histogram {
    Histogram::new(TOTAL_TIME_BUCKETS_MS)
}

/// `value` escaped for a label value of the text format (OpenMetrics and Prometheus 0.0.4 alike:
/// `\` -> `\\`, `"` -> `\"`, newline -> `\n`): `prometheus-client` 0.25 writes label values
/// as they are, and a CPU model name or kernel release is text from the machine.
pub(crate) fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// What the broker knows only when scraped, handed to [`BrokerMetrics::encode`] by the caller
/// (which holds the broker's state).
#[derive(Clone, Debug)]
pub(crate) struct LiveValues {
    /// Client connections open now.
    pub connections: usize,
    /// Fetch requests decoded and not yet answered.
    pub fetches_in_flight: u64,
    /// Requests waiting in the purgatory.
    pub purgatory_size: usize,
    /// `server.model` now (its name; dynamic: the front end of new connections).
    pub server_model: String,
    /// The read path's name.
    pub read_path: String,
}

/// The broker's recorded metrics (see the [module docs](self)): the per-API total-time
/// histograms and the per-path transfer counters, recorded by the io threads and cores; the
/// rest is read when encoded.
pub(crate) struct BrokerMetrics {
    /// The recorded families, registered once.
    registry: Registry,
    total_time: Family<RequestName, Histogram, fn() -> Histogram>,
    path_bytes: Family<PathLabel, Counter>,
    path_transfers: Family<PathLabel, Counter>,
    path_syscalls: Family<PathLabel, Counter>,
    path_user_copied: Family<PathLabel, Counter>,
    fetch_time: Family<RecordsLabel, Histogram, fn() -> Histogram>,
    /// [`Machine::current`], read at the first encode (it probes io_uring).
    machine: OnceLock<Machine>,
    /// When the registry was made (the broker's start), seconds since the Unix epoch.
    started_unix_s: f64,
}

impl fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerMetrics").field("machine", &self.machine.get()).finish_non_exhaustive()
    }
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        BrokerMetrics::new()
    }
}

impl BrokerMetrics {
    /// Empty histograms and counters, registered.
    pub(crate) fn new() -> BrokerMetrics {
        let total_time: Family<RequestName, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(total_time_histogram);
        let path_bytes = Family::<PathLabel, Counter>::default();
        let path_transfers = Family::<PathLabel, Counter>::default();
        let path_syscalls = Family::<PathLabel, Counter>::default();
        let path_user_copied = Family::<PathLabel, Counter>::default();
        let fetch_time: Family<RecordsLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(fetch_time_buckets_ms()));
        let mut registry = Registry::default();
        registry.register_with_unit(
            "fetchbench_request_total_time",
            "Request total time per API, frame completely read to response completely written \
             (Kafka RequestMetrics TotalTimeMs)",
            Unit::Other("ms".into()),
            total_time.clone(),
        );
        registry.register_with_unit(
            "fetchbench_read_path",
            "Record bytes moved to sockets by the read path",
            Unit::Bytes,
            path_bytes.clone(),
        );
        registry.register(
            "fetchbench_read_path_transfers",
            "Read path transfer calls, one per record set sent",
            path_transfers.clone(),
        );
        registry.register(
            "fetchbench_read_path_syscalls",
            "System calls (io_uring: SQEs and io_uring_enter calls) of the read path's transfers",
            path_syscalls.clone(),
        );
        registry.register_with_unit(
            "fetchbench_read_path_user_copied",
            "Record bytes the read path read into user-space memory before sending them",
            Unit::Bytes,
            path_user_copied.clone(),
        );
        registry.register_with_unit(
            "fetchbench_fetch_consumer_time",
            "Consumer Fetch total time by whether the response carried record bytes (fine buckets)",
            Unit::Other("ms".into()),
            fetch_time.clone(),
        );
        BrokerMetrics {
            registry,
            total_time,
            path_bytes,
            path_transfers,
            path_syscalls,
            path_user_copied,
            fetch_time,
            machine: OnceLock::new(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| (d.as_millis() as f64) / 1000.0),
        }
    }

    /// Records one request's total time under `name`.
    pub(crate) fn record_request(&self, name: RequestName, total: Duration) {
        self.total_time.get_or_create(&name).observe(total.as_secs_f64() * 1000.0);
    }

    /// Records one consumer Fetch's total time in `fetch_consumer_time_ms`, labelled by
    /// whether its response carried record bytes.
    pub(crate) fn record_fetch(&self, total: Duration, with_records: bool) {
        let label = [("records", if with_records { "yes" } else { "no" })];
        self.fetch_time.get_or_create(&label).observe(total.as_secs_f64() * 1000.0);
    }

    /// Adds what read path `path` did for one response: `stats` as the path counted them
    /// (system calls included).
    pub(crate) fn record_transfers(&self, path: &'static str, stats: &TransferStats) {
        self.record_transfers_without_syscalls(path, stats.transfers, stats.bytes, stats.user_copied);
        self.path_syscalls.get_or_create(&[("read_path", path)]).inc_by(stats.syscalls);
    }

    /// Adds `transfers` transfers of `bytes` record bytes by read path `path`, `user_copied` of
    /// them read into user space first, system calls not counted (the `uring` cores').
    pub(crate) fn record_transfers_without_syscalls(
        &self,
        path: &'static str,
        transfers: u64,
        bytes: u64,
        user_copied: u64,
    ) {
        if transfers == 0 && bytes == 0 && user_copied == 0 {
            return;
        }
        let label = [("read_path", path)];
        self.path_bytes.get_or_create(&label).inc_by(bytes);
        self.path_transfers.get_or_create(&label).inc_by(transfers);
        if user_copied > 0 {
            self.path_user_copied.get_or_create(&label).inc_by(user_copied);
        }
    }

    /// Record bytes every read path read into user-space memory since the broker started
    /// (`read_path_user_copied_bytes_total` summed over its paths; reading creates no sample).
    pub(crate) fn user_copied_bytes(&self) -> u64 {
        crate::read_path::ReadPathKind::ALL
            .iter()
            .filter_map(|k| self.path_user_copied.get(&[("read_path", k.name())]).map(|c| c.get()))
            .sum()
    }

    /// `(transfers, bytes)` read path `path` moved since the broker started (0 before its first
    /// transfer; reading creates no sample).
    pub(crate) fn path_counts(&self, path: &'static str) -> (u64, u64) {
        let label = [("read_path", path)];
        let get = |family: &Family<PathLabel, Counter>| family.get(&label).map_or(0, |c| c.get());
        (get(&self.path_transfers), get(&self.path_bytes))
    }

    /// The whole exposition: the recorded families, then the process, the broker's `live`
    /// state and the machine, then `# EOF`.
    ///
    /// Errors: the encoder's `fmt::Error` (not expected: it writes to a `String`; a label value
    /// it cannot write would be one).
    pub(crate) fn encode(&self, live: &LiveValues) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(8192);
        encode_registry(&mut out, &self.registry)?;
        let mut now = Registry::default();
        register_process(&mut now);
        let gauge = |value: i64| {
            let g: Gauge = Gauge::default();
            g.set(value);
            g
        };
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        now.register(
            "fetchbench_fetch_requests_in_flight",
            "Fetch requests decoded and not yet answered, parked ones included",
            gauge(int(live.fetches_in_flight)),
        );
        now.register(
            "fetchbench_purgatory_size",
            "Requests waiting in the purgatory (parked Fetch, JoinGroup, SyncGroup)",
            gauge(int(live.purgatory_size as u64)),
        );
        now.register("fetchbench_connections", "Client connections open now", gauge(int(live.connections as u64)));
        let started: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
        started.set(self.started_unix_s);
        now.register_with_unit(
            "fetchbench_broker_start_time",
            "Unix time the broker started (a change means its counters started again)",
            Unit::Seconds,
            started,
        );
        now.register(
            "fetchbench_broker",
            "How the broker serves: server model, read path, fetchbench version",
            Info::new(vec![
                ("server_model", escape_label_value(&live.server_model)),
                ("read_path", escape_label_value(&live.read_path)),
                ("version", env!("CARGO_PKG_VERSION").to_string()),
            ]),
        );
        let machine = self.machine.get_or_init(Machine::current);
        now.register(
            "fetchbench_machine",
            "The machine the broker runs on, as a fetchbench results file records it",
            Info::new(vec![
                ("nproc", machine.nproc.to_string()),
                ("kernel", escape_label_value(&machine.kernel)),
                ("arch", escape_label_value(&machine.arch)),
                ("cpu_model", escape_label_value(&machine.cpu_model)),
                ("memory_bytes", machine.memory_bytes.to_string()),
                ("io_uring", machine.io_uring.to_string()),
            ]),
        );
        encode(&mut out, &now)?;
        Ok(out)
    }
}

/// Registers the process figures of `getrusage(RUSAGE_SELF)` and the RSS, read now (nothing
/// when `getrusage` fails: it cannot for `RUSAGE_SELF`, but a made-up 0 is never shown).
fn register_process(registry: &mut Registry) {
    let counter = |value: u64| {
        let c: Counter = Counter::default();
        c.inc_by(value);
        c
    };
    let seconds = |value: f64| {
        let c: Counter<f64> = Counter::default();
        c.inc_by(value);
        c
    };
    let rss: Gauge = Gauge::default();
    rss.set(i64::try_from(rss_bytes()).unwrap_or(i64::MAX));
    registry.register_with_unit(
        "fetchbench_process_resident_memory",
        "Resident set size of the broker's process (VmRSS)",
        Unit::Bytes,
        rss,
    );
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return;
    };
    let time = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    let count = |n: libc::c_long| u64::try_from(n).unwrap_or(0);
    registry.register_with_unit(
        "fetchbench_process_cpu_user",
        "User CPU time of the broker's process (getrusage RUSAGE_SELF)",
        Unit::Seconds,
        seconds(time(usage.user_time())),
    );
    registry.register_with_unit(
        "fetchbench_process_cpu_system",
        "System CPU time of the broker's process (getrusage RUSAGE_SELF)",
        Unit::Seconds,
        seconds(time(usage.system_time())),
    );
    registry.register(
        "fetchbench_process_minor_page_faults",
        "Minor page faults of the broker's process (ru_minflt)",
        counter(count(usage.minor_page_faults())),
    );
    registry.register(
        "fetchbench_process_major_page_faults",
        "Major page faults of the broker's process (ru_majflt)",
        counter(count(usage.major_page_faults())),
    );
    registry.register(
        "fetchbench_process_voluntary_context_switches",
        "Voluntary context switches of the broker's process (ru_nvcsw)",
        counter(count(usage.voluntary_context_switches())),
    );
    registry.register(
        "fetchbench_process_involuntary_context_switches",
        "Involuntary context switches of the broker's process (ru_nivcsw)",
        counter(count(usage.involuntary_context_switches())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> LiveValues {
        LiveValues {
            connections: 2,
            fetches_in_flight: 1,
            purgatory_size: 1,
            server_model: "threaded".into(),
            read_path: "sendfile".into(),
        }
    }

    /// The value of the sample line starting with `prefix` (name and labels).
    fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn encodes_every_family_once_and_ends_with_eof() {
        let metrics = BrokerMetrics::new();
        metrics.record_request(RequestName::new(ApiKey::Fetch, true), Duration::from_micros(300));
        metrics.record_request(RequestName::new(ApiKey::Fetch, true), Duration::from_millis(700));
        metrics.record_request(RequestName::new(ApiKey::Fetch, false), Duration::from_millis(1));
        metrics.record_request(RequestName::new(ApiKey::ListOffsets, false), Duration::from_millis(1));
        metrics.record_transfers(
            "sendfile",
            &TransferStats { transfers: 2, bytes: 1000, syscalls: 3, user_copied: 0, wall: Duration::ZERO },
        );
        metrics.record_transfers(
            "copy",
            &TransferStats { transfers: 1, bytes: 100, user_copied: 100, ..Default::default() },
        );
        metrics.record_transfers_without_syscalls("uring-splice", 1, 10, 0);
        metrics.record_transfers_without_syscalls("uring-read-send", 1, 20, 20);
        metrics.record_fetch(Duration::from_micros(300), true);
        metrics.record_fetch(Duration::from_millis(500), false);
        let text = metrics.encode(&live()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
        assert_eq!(sample(&text, "fetchbench_request_total_time_ms_count{api=\"FetchConsumer\"}"), Some(2.0));
        assert_eq!(
            sample(&text, "fetchbench_request_total_time_ms_bucket{le=\"0.5\",api=\"FetchConsumer\"}"),
            Some(1.0)
        );
        assert_eq!(sample(&text, "fetchbench_request_total_time_ms_count{api=\"FetchFollower\"}"), Some(1.0));
        assert_eq!(sample(&text, "fetchbench_request_total_time_ms_count{api=\"ListOffsets\"}"), Some(1.0));
        assert_eq!(sample(&text, "fetchbench_read_path_bytes_total{read_path=\"sendfile\"}"), Some(1000.0));
        assert_eq!(sample(&text, "fetchbench_read_path_transfers_total{read_path=\"sendfile\"}"), Some(2.0));
        assert_eq!(sample(&text, "fetchbench_read_path_syscalls_total{read_path=\"sendfile\"}"), Some(3.0));
        assert_eq!(sample(&text, "fetchbench_read_path_bytes_total{read_path=\"uring-splice\"}"), Some(10.0));
        assert_eq!(sample(&text, "fetchbench_read_path_syscalls_total{read_path=\"uring-splice\"}"), None);
        assert_eq!(sample(&text, "fetchbench_read_path_user_copied_bytes_total{read_path=\"copy\"}"), Some(100.0));
        assert_eq!(
            sample(&text, "fetchbench_read_path_user_copied_bytes_total{read_path=\"uring-read-send\"}"),
            Some(20.0)
        );
        assert_eq!(sample(&text, "fetchbench_read_path_user_copied_bytes_total{read_path=\"sendfile\"}"), None);
        assert_eq!(metrics.user_copied_bytes(), 120);
        assert_eq!(sample(&text, "fetchbench_fetch_consumer_time_ms_count{records=\"yes\"}"), Some(1.0));
        assert_eq!(sample(&text, "fetchbench_fetch_consumer_time_ms_count{records=\"no\"}"), Some(1.0));
        assert_eq!(sample(&text, "fetchbench_fetch_consumer_time_ms_bucket{le=\"0.32\",records=\"yes\"}"), Some(1.0));
        assert_eq!(sample(&text, "fetchbench_connections"), Some(2.0));
        assert_eq!(sample(&text, "fetchbench_purgatory_size"), Some(1.0));
        let started = sample(&text, "fetchbench_broker_start_time_seconds").unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(started > now - 600.0 && started <= now + 1.0, "start {started}, now {now}");
        assert!(sample(&text, "fetchbench_process_cpu_user_seconds_total").is_some(), "{text}");
        assert!(sample(&text, "fetchbench_process_resident_memory_bytes").unwrap() > 0.0, "{text}");
        assert!(text.contains("fetchbench_broker_info{server_model=\"threaded\",read_path=\"sendfile\""), "{text}");
        assert!(text.contains("fetchbench_machine_info{nproc=\""), "{text}");
        // One HELP per family: no family is registered twice.
        let mut helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        let n = helps.len();
        helps.sort();
        helps.dedup();
        assert_eq!(helps.len(), n, "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("AMD EPYC"), "AMD EPYC");
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histograms_are_cumulative_and_never_reset_by_encoding() {
        let metrics = BrokerMetrics::new();
        let name = RequestName::new(ApiKey::Produce, false);
        metrics.record_request(name, Duration::from_millis(2));
        let first = metrics.encode(&live()).unwrap();
        metrics.record_request(name, Duration::from_millis(2));
        let second = metrics.encode(&live()).unwrap();
        let count = "fetchbench_request_total_time_ms_count{api=\"Produce\"}";
        assert_eq!((sample(&first, count), sample(&second, count)), (Some(1.0), Some(2.0)));
        assert_eq!(sample(&second, "fetchbench_request_total_time_ms_bucket{le=\"2.5\",api=\"Produce\"}"), Some(2.0));
        assert_eq!(sample(&second, "fetchbench_request_total_time_ms_bucket{le=\"1.0\",api=\"Produce\"}"), Some(0.0));
    }
}
