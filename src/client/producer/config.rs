//! The producer's configuration (Kafka's `ProducerConfig`): [`ProducerConfig`] with Kafka's
//! names and defaults (Kafka 4: `linger.ms=5`, `enable.idempotence=true`, `acks=all`), parsed
//! from `key=value` pairs by Kafka's names ([`CONFIG_KEYS`]), with Kafka's rules between keys
//! (idempotence needs `acks=all` and at most 5 requests in flight; `transactional.id` needs
//! idempotence; `delivery.timeout.ms` at least `linger.ms + request.timeout.ms`) and the record
//! size check of `KafkaProducer.ensureValidRecordSize`.

use super::error::ProducerError;
use crate::log::batch::{Compression, HEADER_SIZE};

/// `acks`: how many acknowledgements the leader waits for before answering a Produce request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no answer; deliveries complete when the request is written, with offset -1.
    None,
    /// `acks=1`: the leader's append.
    Leader,
    /// `acks=all` (`-1`): every in-sync replica (on a single node, the leader).
    All,
}

impl Acks {
    /// The wire value: 0, 1 or -1.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Producer configuration with Kafka's names and defaults (Kafka 4's `ProducerConfig`); build
/// it with [`ProducerConfig::from_pairs`] or [`ProducerConfig::new`] and the fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerConfig {
    /// `bootstrap.servers`: `host:port` list; the first that answers is used.
    pub bootstrap_servers: Vec<String>,
    /// `client.id` (default `fetchbench-producer`).
    pub client_id: String,
    /// `acks` (default all, `-1`).
    pub acks: Acks,
    /// `batch.size`: uncompressed bytes at which a partition's batch is closed (default 16384).
    /// A record larger than this gets a batch of its own.
    pub batch_size: usize,
    /// `linger.ms`: how long a batch that is not full waits for more records (default 5).
    pub linger_ms: u64,
    /// `compression.type` (default none).
    pub compression: Compression,
    /// `enable.idempotence` (default true; turned off when not set and `acks` is not all or
    /// `max.in.flight.requests.per.connection` is above 5, as Kafka 3+ does).
    pub enable_idempotence: bool,
    /// `max.in.flight.requests.per.connection` (default 5; at most 5 with idempotence).
    pub max_in_flight: usize,
    /// `request.timeout.ms`: the Produce request timeout and the socket read timeout (default 30000).
    pub request_timeout_ms: u64,
    /// `delivery.timeout.ms`: how long a batch may be retried before it fails (default 120000).
    pub delivery_timeout_ms: u64,
    /// `buffer.memory`: bytes of records waiting to be delivered before
    /// [`Producer::send`](super::Producer::send) blocks (default 33554432).
    pub buffer_memory: usize,
    /// `max.block.ms`: how long `send` waits for metadata or buffer space (default 60000).
    pub max_block_ms: u64,
    /// `max.request.size`: largest record, and the batches one request carries (default 1048576).
    pub max_request_size: usize,
    /// `retries` (default 2147483647; `delivery.timeout.ms` bounds them).
    pub retries: u32,
    /// `retry.backoff.ms`: wait before a retry (default 100).
    pub retry_backoff_ms: u64,
    /// `transactional.id` (default none): makes the producer transactional (KIP-98; the
    /// transactional API of [`Producer`](super::Producer), `init_transactions` first). Implies
    /// idempotence. Not empty.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms`: how long the transaction coordinator lets a transaction stay
    /// open before it aborts it (default 60000; the broker refuses a value above its
    /// `transaction.max.timeout.ms` with `INVALID_TRANSACTION_TIMEOUT`).
    pub transaction_timeout_ms: i32,
}

/// `ProducerConfig` keys this producer understands.
pub const CONFIG_KEYS: [&str; 17] = [
    "bootstrap.servers",
    "client.id",
    "acks",
    "batch.size",
    "linger.ms",
    "compression.type",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
    "request.timeout.ms",
    "delivery.timeout.ms",
    "buffer.memory",
    "max.block.ms",
    "max.request.size",
    "retries",
    "retry.backoff.ms",
    "transactional.id",
    "transaction.timeout.ms",
];

impl ProducerConfig {
    /// Kafka's defaults with `bootstrap.servers` set.
    pub fn new(bootstrap_servers: &str) -> Self {
        ProducerConfig {
            bootstrap_servers: split_servers(bootstrap_servers),
            client_id: "fetchbench-producer".into(),
            acks: Acks::All,
            batch_size: 16384,
            linger_ms: 5,
            compression: Compression::None,
            enable_idempotence: true,
            max_in_flight: 5,
            request_timeout_ms: 30_000,
            delivery_timeout_ms: 120_000,
            buffer_memory: 32 << 20,
            max_block_ms: 60_000,
            max_request_size: 1 << 20,
            retries: i32::MAX as u32,
            retry_backoff_ms: 100,
            transactional_id: None,
            transaction_timeout_ms: 60_000,
        }
    }

    /// Builds a config from `key=value` pairs (later pairs win) over Kafka's defaults, checked as
    /// Kafka's `ProducerConfig` does: `bootstrap.servers` is required; `enable.idempotence=true`
    /// given explicitly with `acks` other than all or more than 5 requests in flight is refused,
    /// while the default idempotence is quietly turned off then; a `transactional.id` without
    /// idempotence (turned off explicitly or by that rule) is refused.
    ///
    /// Errors: [`ProducerError::Config`] naming the key for an unknown key, a bad value or a
    /// conflict.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Result<Self, ProducerError> {
        let mut c = ProducerConfig::new("");
        for (k, v) in pairs {
            c.set(k.as_ref(), v.as_ref())?;
        }
        if c.bootstrap_servers.is_empty() {
            return Err(ProducerError::Config {
                key: "bootstrap.servers".into(),
                value: String::new(),
                reason: "required".into(),
            });
        }
        c.settle_idempotence(pairs.iter().any(|(k, _)| k.as_ref().trim() == "enable.idempotence"))?;
        c.settle_delivery_timeout(pairs.iter().any(|(k, _)| k.as_ref().trim() == "delivery.timeout.ms"))?;
        Ok(c)
    }

    /// Applies `key=value` pairs over this config (later pairs win), then Kafka's idempotence
    /// rule as [`ProducerConfig::from_pairs`]: an explicit `enable.idempotence=true` with `acks`
    /// other than all or more than 5 requests in flight is refused, the default one is turned
    /// off; a `transactional.id` without idempotence is refused. What `fetchbench run` does with a workload's `[producer_config]` over its own
    /// settings.
    ///
    /// Errors: [`ProducerError::Config`] naming the key (unknown key, bad value, conflict).
    pub fn apply_pairs<K: AsRef<str>, V: AsRef<str>>(&mut self, pairs: &[(K, V)]) -> Result<(), ProducerError> {
        for (k, v) in pairs {
            self.set(k.as_ref(), v.as_ref())?;
        }
        self.settle_idempotence(pairs.iter().any(|(k, _)| k.as_ref().trim() == "enable.idempotence"))?;
        self.settle_delivery_timeout(pairs.iter().any(|(k, _)| k.as_ref().trim() == "delivery.timeout.ms"))
    }

    /// Kafka's delivery-timeout rule (`KafkaProducer.configureDeliveryTimeout`):
    /// `delivery.timeout.ms` must be at least `linger.ms + request.timeout.ms`. Set explicitly
    /// (`explicit`) below that, it is refused (Kafka's ConfigException "delivery.timeout.ms
    /// should be equal to or larger than linger.ms + request.timeout.ms"); the default is raised
    /// to the sum instead.
    fn settle_delivery_timeout(&mut self, explicit: bool) -> Result<(), ProducerError> {
        let least = self.linger_ms.saturating_add(self.request_timeout_ms);
        if self.delivery_timeout_ms < least {
            if explicit {
                return Err(ProducerError::Config {
                    key: "delivery.timeout.ms".into(),
                    value: self.delivery_timeout_ms.to_string(),
                    reason: format!(
                        "expected a value equal to or larger than linger.ms + request.timeout.ms ({least}), as Kafka's ProducerConfig"
                    ),
                });
            }
            self.delivery_timeout_ms = least;
        }
        Ok(())
    }

    /// Whether a record of `size` bytes (its upper bound in a batch, see
    /// [`record_size_upper_bound`](super::record_size_upper_bound)) can be sent with this config,
    /// as `KafkaProducer.ensureValidRecordSize`: its batch (the record plus a batch header) within
    /// `max.request.size`, the record within `buffer.memory` (the whole buffer cannot hold it).
    ///
    /// Errors: [`ProducerError::RecordTooLarge`] naming the setting.
    pub fn check_record_size(&self, size: usize) -> Result<(), ProducerError> {
        if size + HEADER_SIZE > self.max_request_size {
            return Err(ProducerError::RecordTooLarge {
                size,
                limit: self.max_request_size,
                setting: "max.request.size",
            });
        }
        if size > self.buffer_memory {
            return Err(ProducerError::RecordTooLarge { size, limit: self.buffer_memory, setting: "buffer.memory" });
        }
        Ok(())
    }

    /// Sets one config by its Kafka name (one of [`CONFIG_KEYS`]; surrounding spaces of name
    /// and value are ignored). No rule between keys is applied: see
    /// [`ProducerConfig::apply_pairs`].
    ///
    /// Errors: [`ProducerError::Config`] naming the key for an unknown key or a bad value (the
    /// reason says what the key accepts).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ProducerError> {
        let (key, value) = (key.trim(), value.trim());
        let bad = |reason: &str| ProducerError::Config {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let num = |min: u64| -> Result<u64, ProducerError> {
            match value.parse::<u64>() {
                Ok(n) if n >= min => Ok(n),
                _ => Err(bad(&format!("expected an integer >= {min}"))),
            }
        };
        match key {
            "bootstrap.servers" => self.bootstrap_servers = split_servers(value),
            "client.id" => self.client_id = value.to_string(),
            "acks" => {
                self.acks = match value.to_ascii_lowercase().as_str() {
                    "0" => Acks::None,
                    "1" => Acks::Leader,
                    "-1" | "all" => Acks::All,
                    _ => return Err(bad("expected 0, 1, -1 or all")),
                }
            }
            "batch.size" => self.batch_size = num(0)? as usize,
            "linger.ms" => self.linger_ms = num(0)?,
            "compression.type" => self.compression = value.parse().map_err(|e| bad(&format!("{e}")))?,
            "enable.idempotence" => {
                self.enable_idempotence = match value.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("expected true or false")),
                }
            }
            "max.in.flight.requests.per.connection" => self.max_in_flight = num(1)? as usize,
            "request.timeout.ms" => self.request_timeout_ms = num(1)?,
            "delivery.timeout.ms" => self.delivery_timeout_ms = num(0)?,
            "buffer.memory" => self.buffer_memory = num(1)? as usize,
            "max.block.ms" => self.max_block_ms = num(0)?,
            "max.request.size" => self.max_request_size = num(1)? as usize,
            "retries" => self.retries = num(0)?.min(u32::MAX as u64) as u32,
            "retry.backoff.ms" => self.retry_backoff_ms = num(0)?,
            "transactional.id" if value.is_empty() => {
                return Err(bad("expected a non-empty string (Kafka's NonEmptyString); leave it unset for none"))
            }
            "transactional.id" => self.transactional_id = Some(value.to_string()),
            "transaction.timeout.ms" => self.transaction_timeout_ms = num(1)?.min(i32::MAX as u64) as i32,
            _ => return Err(bad(&format!("unknown producer config; known: {}", CONFIG_KEYS.join(", ")))),
        }
        Ok(())
    }

    /// Kafka 3+'s idempotence default: turned off when `acks` is not all or more than 5
    /// requests may be in flight, unless it was set explicitly (`explicit`): then an error.
    /// Then, as Kafka's `ProducerConfig.postProcessAndValidateIdempotenceConfigs`, a
    /// `transactional.id` without idempotence is refused ("Cannot set a transactional.id
    /// without also enabling idempotence").
    fn settle_idempotence(&mut self, explicit: bool) -> Result<(), ProducerError> {
        let conflict = self.acks != Acks::All || self.max_in_flight > 5;
        if conflict && self.enable_idempotence {
            if explicit {
                return Err(ProducerError::Config {
                    key: "enable.idempotence".into(),
                    value: "true".into(),
                    reason: "idempotence needs acks=all and max.in.flight.requests.per.connection <= 5".into(),
                });
            }
            self.enable_idempotence = false;
        }
        if let (Some(id), false) = (&self.transactional_id, self.enable_idempotence) {
            return Err(ProducerError::Config {
                key: "transactional.id".into(),
                value: id.clone(),
                reason: format!(
                    "cannot set a transactional.id without also enabling idempotence ({})",
                    if conflict {
                        "idempotence needs acks=all and max.in.flight.requests.per.connection <= 5"
                    } else {
                        "enable.idempotence=false"
                    }
                ),
            });
        }
        Ok(())
    }
}

fn split_servers(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<ProducerConfig, ProducerError> {
        let mut all = vec![("bootstrap.servers", "h:9092")];
        all.extend_from_slice(pairs);
        ProducerConfig::from_pairs(&all)
    }

    fn refused_key(r: Result<ProducerConfig, ProducerError>) -> String {
        match r {
            Err(ProducerError::Config { key, .. }) => key,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn transactional_id_implies_idempotence_as_kafka() {
        let c = config(&[("transactional.id", "tx-1")]).unwrap();
        assert_eq!(c.transactional_id.as_deref(), Some("tx-1"));
        assert!(c.enable_idempotence);
        assert_eq!(c.transaction_timeout_ms, 60_000);
        assert_eq!(config(&[]).unwrap().transactional_id, None);
        let c = config(&[("transactional.id", "t"), ("transaction.timeout.ms", "9000")]).unwrap();
        assert_eq!(c.transaction_timeout_ms, 9000);
        // "Cannot set a transactional.id without also enabling idempotence."
        for bad in [
            vec![("transactional.id", "t"), ("enable.idempotence", "false")],
            vec![("transactional.id", "t"), ("acks", "1")],
            vec![("transactional.id", "t"), ("max.in.flight.requests.per.connection", "6")],
        ] {
            assert_eq!(refused_key(config(&bad)), "transactional.id", "{bad:?}");
        }
        assert_eq!(refused_key(config(&[("transactional.id", " ")])), "transactional.id");
        assert_eq!(refused_key(config(&[("transaction.timeout.ms", "0")])), "transaction.timeout.ms");
        assert_eq!(refused_key(config(&[("transaction.timeout.ms", "x")])), "transaction.timeout.ms");
        // apply_pairs applies the same rule.
        let mut c = config(&[]).unwrap();
        let r = c.apply_pairs(&[("transactional.id", "t"), ("acks", "1")]);
        assert!(matches!(r, Err(ProducerError::Config { ref key, .. }) if key == "transactional.id"), "{r:?}");
        assert!(CONFIG_KEYS.contains(&"transactional.id") && CONFIG_KEYS.contains(&"transaction.timeout.ms"));
    }
}
