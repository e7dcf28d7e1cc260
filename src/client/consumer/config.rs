//! The consumer's configuration (Kafka's `ConsumerConfig`): [`ConsumerConfig`] with Kafka's
//! names, defaults and ranges, set by name ([`ConsumerConfig::set`], [`CONFIG_KEYS`]), and
//! [`OffsetReset`].

use super::drain::CrcCheck;
use super::error::ConsumerError;
use crate::client::assignor::{assignor_by_name, ASSIGNOR_NAMES};

/// `auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetReset {
    /// The log start offset.
    Earliest,
    /// The log end offset (high watermark; last stable offset under read_committed).
    Latest,
    /// No reset: [`ConsumerError::NoOffset`] / [`ConsumerError::OffsetOutOfRange`].
    None,
}

/// The consumer's configuration, with Kafka's names and defaults (Kafka 3.x):
///
/// | key | default |
/// | --- | --- |
/// | `bootstrap.servers` | (required) `host:port[,host:port...]` |
/// | `group.id` | none |
/// | `group.instance.id` | none (static membership, KIP-345) |
/// | `client.id` | `fetchbench-consumer` |
/// | `enable.auto.commit` | `true` (only with `group.id`) |
/// | `auto.commit.interval.ms` | 5000 |
/// | `auto.offset.reset` | `latest` (`earliest`, `latest`, `none`) |
/// | `fetch.min.bytes` | 1 |
/// | `fetch.max.wait.ms` | 500 |
/// | `fetch.max.bytes` | 52428800 |
/// | `max.partition.fetch.bytes` | 1048576 |
/// | `max.poll.records` | 500 |
/// | `session.timeout.ms` | 45000 |
/// | `heartbeat.interval.ms` | 3000 |
/// | `max.poll.interval.ms` | 300000 (also the rebalance timeout) |
/// | `partition.assignment.strategy` | `range,cooperative-sticky` (names of [`crate::client::assignor::ASSIGNOR_NAMES`]) |
/// | `check.crcs` | `true` |
/// | `isolation.level` | `read_uncommitted` (`read_committed`) |
/// | `request.timeout.ms` | 30000 |
/// | `client.rack` | none |
/// | `retry.backoff.ms` | 100 (first wait before rejoining after a retriable JoinGroup/SyncGroup error) |
/// | `retry.backoff.max.ms` | 1000 (the wait doubles per failure up to this, KIP-580) |
/// | `exclude.internal.topics` | `true` (pattern subscriptions skip internal topics such as `__consumer_offsets`) |
/// | `fetchbench.fetch.mode` | `decode` (`drain`: [`super::Consumer::poll_batches`], see [`super::drain`]; not a Kafka config) |
/// | `fetchbench.drain.crc` | `1/16` (`all`, `none`, `1/N`: the batches whose CRC a drain checks; `check.crcs=false` makes it `none`) |
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// `group.id`.
    pub group_id: Option<String>,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// `enable.auto.commit`.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval_ms: u64,
    /// `auto.offset.reset`.
    pub auto_offset_reset: OffsetReset,
    /// `fetch.min.bytes`.
    pub fetch_min_bytes: i32,
    /// `fetch.max.wait.ms`.
    pub fetch_max_wait_ms: i32,
    /// `fetch.max.bytes`.
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records`.
    pub max_poll_records: usize,
    /// `session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms`.
    pub max_poll_interval_ms: i32,
    /// `partition.assignment.strategy`, in preference order.
    pub partition_assignment_strategy: Vec<String>,
    /// `check.crcs`.
    pub check_crcs: bool,
    /// `isolation.level=read_committed`.
    pub read_committed: bool,
    /// `request.timeout.ms`.
    pub request_timeout_ms: u64,
    /// `client.rack`.
    pub client_rack: Option<String>,
    /// `exclude.internal.topics`: a pattern subscription never matches the topics Metadata
    /// marks internal (`__consumer_offsets`, `__transaction_state`). Subscribing by name and
    /// `assign` are not affected (Kafka's `ConsumerConfig.EXCLUDE_INTERNAL_TOPICS_CONFIG`).
    pub exclude_internal_topics: bool,
    /// `retry.backoff.ms`: the first wait, in ms, before rejoining after a retriable
    /// JoinGroup/SyncGroup error (a coordinator that cannot store the assignment, a moved
    /// coordinator); doubled per failure in a row (Kafka's `AbstractCoordinator`, KIP-580).
    pub retry_backoff_ms: u64,
    /// `retry.backoff.max.ms`: the longest such wait, in ms.
    pub retry_backoff_max_ms: u64,
    /// `fetchbench.fetch.mode`: decode records (Kafka's consumer) or drain batches.
    pub fetch_mode: FetchMode,
    /// `fetchbench.drain.crc`: which drained batches have their CRC checked.
    pub drain_crc: CrcCheck,
}

/// `fetchbench.fetch.mode`: how Fetch responses are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchMode {
    /// `decode`: every record decoded into a [`super::ConsumerRecord`] ([`super::Consumer::poll`]).
    Decode,
    /// `drain`: batch headers read, record bytes discarded in the kernel
    /// ([`super::Consumer::poll_batches`], [`super::drain`]).
    Drain,
}

impl ConsumerConfig {
    /// The CRC checks of a drain (`None` when decoding): `fetchbench.drain.crc`, or none with
    /// `check.crcs=false`.
    pub fn drain_checks(&self) -> Option<CrcCheck> {
        match self.fetch_mode {
            FetchMode::Decode => None,
            FetchMode::Drain if !self.check_crcs => Some(CrcCheck::None),
            FetchMode::Drain => Some(self.drain_crc),
        }
    }
}

impl ConsumerConfig {
    /// Kafka's defaults with `bootstrap.servers`.
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        ConsumerConfig {
            bootstrap_servers: bootstrap_servers.into(),
            group_id: None,
            group_instance_id: None,
            client_id: "fetchbench-consumer".into(),
            enable_auto_commit: true,
            auto_commit_interval_ms: 5000,
            auto_offset_reset: OffsetReset::Latest,
            fetch_min_bytes: 1,
            fetch_max_wait_ms: 500,
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            max_poll_records: 500,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3000,
            max_poll_interval_ms: 300_000,
            partition_assignment_strategy: vec!["range".into(), "cooperative-sticky".into()],
            check_crcs: true,
            read_committed: false,
            request_timeout_ms: 30_000,
            client_rack: None,
            exclude_internal_topics: true,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1000,
            fetch_mode: FetchMode::Decode,
            drain_crc: CrcCheck::OneIn(16),
        }
    }

    /// Builds a config from `key=value` pairs with Kafka's names (`bootstrap.servers` required).
    ///
    /// Errors: [`ConsumerError::Config`] for unknown keys and invalid values.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, ConsumerError> {
        let mut config = ConsumerConfig::new("");
        for (k, v) in pairs {
            config.set(k, v)?;
        }
        if config.bootstrap_servers.is_empty() {
            return Err(ConsumerError::Config {
                key: "bootstrap.servers".into(),
                value: String::new(),
                reason: "expected a host:port list (required)".into(),
            });
        }
        Ok(config)
    }

    /// Sets one config by Kafka's name.
    ///
    /// Integers are checked against Kafka's ranges (`ConsumerConfig`'s `ConfigDef`:
    /// `Range.atLeast(1)` for `max.poll.records` and `max.poll.interval.ms`, at least 0 for the
    /// other byte counts and times; `INT` keys up to 2147483647, the `LONG` keys
    /// `retry.backoff.ms` and `retry.backoff.max.ms` up to 9223372036854775807).
    ///
    /// Errors: [`ConsumerError::Config`] for an unknown key or an invalid value; its reason says
    /// what the key accepts (`expected an integer from 0 to 2147483647`, `expected true or
    /// false`, `expected a consumer config name fetchbench knows (known: ...)`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<&mut Self, ConsumerError> {
        let bad = |reason: &str| ConsumerError::Config { key: key.into(), value: value.into(), reason: reason.into() };
        // An integer in `min..=max`, as the field's type (the bounds fit every field's type).
        fn num<T: TryFrom<i64>>(
            v: &str,
            min: i64,
            max: i64,
            bad: impl Fn(&str) -> ConsumerError,
        ) -> Result<T, ConsumerError> {
            let err = || bad(&format!("expected an integer from {min} to {max}"));
            let n: i64 = v.trim().parse().map_err(|_| err())?;
            if n < min || n > max {
                return Err(err());
            }
            T::try_from(n).map_err(|_| err())
        }
        const INT: i64 = i32::MAX as i64;
        const LONG: i64 = i64::MAX;
        let boolean = |v: &str| match v {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad("expected true or false")),
        };
        let opt = |v: &str| (!v.is_empty()).then(|| v.to_string());
        match key {
            "bootstrap.servers" => self.bootstrap_servers = value.into(),
            "group.id" => self.group_id = opt(value),
            "group.instance.id" => self.group_instance_id = opt(value),
            "client.id" => self.client_id = value.into(),
            "client.rack" => self.client_rack = opt(value),
            "enable.auto.commit" => self.enable_auto_commit = boolean(value)?,
            "auto.commit.interval.ms" => self.auto_commit_interval_ms = num(value, 0, INT, bad)?,
            "auto.offset.reset" => {
                self.auto_offset_reset = match value {
                    "earliest" | "smallest" | "beginning" => OffsetReset::Earliest,
                    "latest" | "largest" | "end" => OffsetReset::Latest,
                    "none" | "error" => OffsetReset::None,
                    _ => return Err(bad("expected earliest, latest or none")),
                }
            }
            "fetch.min.bytes" => self.fetch_min_bytes = num(value, 0, INT, bad)?,
            "fetch.max.wait.ms" => self.fetch_max_wait_ms = num(value, 0, INT, bad)?,
            "fetch.max.bytes" => self.fetch_max_bytes = num(value, 0, INT, bad)?,
            "max.partition.fetch.bytes" => self.max_partition_fetch_bytes = num(value, 0, INT, bad)?,
            "max.poll.records" => self.max_poll_records = num(value, 1, INT, bad)?,
            "session.timeout.ms" => self.session_timeout_ms = num(value, 0, INT, bad)?,
            "heartbeat.interval.ms" => self.heartbeat_interval_ms = num(value, 0, INT, bad)?,
            "max.poll.interval.ms" => self.max_poll_interval_ms = num(value, 1, INT, bad)?,
            "request.timeout.ms" => self.request_timeout_ms = num(value, 0, INT, bad)?,
            "retry.backoff.ms" => self.retry_backoff_ms = num(value, 0, LONG, bad)?,
            "retry.backoff.max.ms" => self.retry_backoff_max_ms = num(value, 0, LONG, bad)?,
            "partition.assignment.strategy" => {
                let names: Vec<String> =
                    value.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect();
                if names.is_empty() {
                    return Err(bad(&format!(
                        "expected assignor names, comma-separated (known: {})",
                        ASSIGNOR_NAMES.join(", ")
                    )));
                }
                for n in &names {
                    if assignor_by_name(n).is_none() {
                        return Err(bad(&format!(
                            "expected assignor names, comma-separated; {n:?} is not one (known: {})",
                            ASSIGNOR_NAMES.join(", ")
                        )));
                    }
                }
                self.partition_assignment_strategy = names;
            }
            "check.crcs" => self.check_crcs = boolean(value)?,
            "fetchbench.fetch.mode" => {
                self.fetch_mode = match value {
                    "decode" => FetchMode::Decode,
                    "drain" => FetchMode::Drain,
                    _ => return Err(bad("expected decode or drain")),
                }
            }
            "fetchbench.drain.crc" => self.drain_crc = CrcCheck::parse(value).map_err(|e| bad(&e))?,
            "exclude.internal.topics" => self.exclude_internal_topics = boolean(value)?,
            "isolation.level" => {
                self.read_committed = match value {
                    "read_committed" => true,
                    "read_uncommitted" => false,
                    _ => return Err(bad("expected read_committed or read_uncommitted")),
                }
            }
            _ => {
                return Err(bad(&format!(
                    "expected a consumer config name fetchbench knows (known: {})",
                    CONFIG_KEYS.join(", ")
                )))
            }
        }
        Ok(self)
    }
}

/// The configs [`ConsumerConfig::set`] knows, by Kafka's names.
pub const CONFIG_KEYS: [&str; 25] = [
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "bootstrap.servers",
    "group.id",
    "group.instance.id",
    "client.id",
    "client.rack",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "auto.offset.reset",
    "fetch.min.bytes",
    "fetch.max.wait.ms",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "max.poll.records",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "request.timeout.ms",
    "partition.assignment.strategy",
    "check.crcs",
    "isolation.level",
    "exclude.internal.topics",
    "fetchbench.fetch.mode",
    "fetchbench.drain.crc",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `-X` errors (`fetchbench consume`) name the key, the value and what the key accepts.
    #[test]
    fn config_errors_name_the_key_the_value_and_what_is_accepted() {
        let mut c = ConsumerConfig::new("127.0.0.1:9092");
        let e = c.set("fetch.max.wait.ms", "abc").unwrap_err().to_string();
        assert_eq!(e, "consumer config fetch.max.wait.ms=\"abc\": expected an integer from 0 to 2147483647");
        let e = c.set("fetch.min.bytes", "-1").unwrap_err().to_string();
        assert_eq!(e, "consumer config fetch.min.bytes=\"-1\": expected an integer from 0 to 2147483647");
        let e = c.set("fetch.max.bytes", "2147483648").unwrap_err().to_string();
        assert_eq!(e, "consumer config fetch.max.bytes=\"2147483648\": expected an integer from 0 to 2147483647");
        let e = c.set("max.poll.records", "0").unwrap_err().to_string();
        assert_eq!(e, "consumer config max.poll.records=\"0\": expected an integer from 1 to 2147483647");
        let e = c.set("retry.backoff.ms", "x").unwrap_err().to_string();
        assert_eq!(e, "consumer config retry.backoff.ms=\"x\": expected an integer from 0 to 9223372036854775807");
        let e = c.set("fetch.min.bytez", "1").unwrap_err().to_string();
        assert!(
            e.starts_with("consumer config fetch.min.bytez=\"1\": expected a consumer config name fetchbench knows"),
            "{e}"
        );
        c.set("fetch.max.wait.ms", " 20 ").unwrap().set("max.poll.records", "1").unwrap();
        assert_eq!((c.fetch_max_wait_ms, c.max_poll_records), (20, 1));
    }

    #[test]
    fn exclude_internal_topics_defaults_to_true_and_is_settable() {
        let mut c = ConsumerConfig::new("127.0.0.1:9092");
        assert!(c.exclude_internal_topics);
        c.set("exclude.internal.topics", "false").unwrap();
        assert!(!c.exclude_internal_topics);
        assert!(c.set("exclude.internal.topics", "maybe").is_err());
        assert!(CONFIG_KEYS.contains(&"exclude.internal.topics"));
    }

    #[test]
    fn the_fetch_mode_and_the_drain_crc_checks_are_settable() {
        let mut c = ConsumerConfig::new("127.0.0.1:9092");
        assert_eq!((c.fetch_mode, c.drain_checks()), (FetchMode::Decode, None));
        c.set("fetchbench.fetch.mode", "drain").unwrap();
        assert_eq!(c.drain_checks(), Some(CrcCheck::OneIn(16)));
        c.set("fetchbench.drain.crc", "all").unwrap();
        assert_eq!(c.drain_checks(), Some(CrcCheck::All));
        c.set("check.crcs", "false").unwrap();
        assert_eq!(c.drain_checks(), Some(CrcCheck::None), "check.crcs=false checks none");
        let e = c.set("fetchbench.fetch.mode", "fast").unwrap_err().to_string();
        assert!(e.ends_with("expected decode or drain"), "{e}");
        let e = c.set("fetchbench.drain.crc", "half").unwrap_err().to_string();
        assert!(e.contains("expected all, none or 1/N"), "{e}");
    }
}
