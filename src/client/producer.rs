//! fetchbench's own load producer, modelled on Kafka's `KafkaProducer`: records are appended to
//! per-partition batches (Kafka's `RecordAccumulator`), a sender thread drains ready batches into
//! Produce requests (Kafka's `Sender`) and completes each record's [`DeliveryHandle`].
//!
//! - Configuration: [`ProducerConfig`], with Kafka's names and defaults (Kafka 4:
//!   `linger.ms=5`, `enable.idempotence=true`, `acks=all`).
//! - Metadata: bootstrap, then Metadata for each topic on its first send (auto-creation allowed,
//!   as `allow.auto.create.topics=true`); batches go to each partition's leader.
//! - Partitioner (Kafka's `BuiltInPartitioner`): a keyed record goes to
//!   `toPositive(murmur2(key)) % partitions` ([`murmur2`], [`partition_for_key`]); an unkeyed one
//!   sticks to one partition until its batch is full, then moves to the next (round robin).
//! - Batching: a batch is closed at `batch.size` uncompressed bytes and sent when closed, when it
//!   is `linger.ms` old, or on [`Producer::flush`] / [`Producer::close`]. One Produce request
//!   carries one ready batch of every partition of a leader (up to `max.request.size`); up to
//!   `max.in.flight.requests.per.connection` requests are pipelined on a connection.
//! - Timestamps are CreateTime: the caller's, else the wall clock (ms since the Unix epoch).
//! - `acks=0`: requests are written and not answered; deliveries complete with offset -1.
//! - Idempotence (KIP-98): InitProducerId once; each batch gets the partition's next sequence
//!   number when it is drained and keeps it on every retry, so the broker writes it once (a
//!   duplicate is answered with the original offsets).
//!
//! Records are encoded straight into the batch buffer (no per-record allocation); a compressed
//! batch is compressed once, by the sender thread, when it is drained.
//!
//! Not implemented: transactions, metadata refresh after a leader change (retriable errors are
//! retried against the same leader), per-record callbacks (use [`DeliveryHandle`] or
//! [`Producer::stats`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, MetadataRequest, ProduceRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{ClientError, KafkaConnection};
use crate::log::batch::record::{varlong_size, write_nullable, write_varint, write_varlong};
use crate::log::batch::{
    Attributes, BatchHeader, Compression, Header, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

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
    /// `buffer.memory`: bytes of records waiting to be delivered before [`Producer::send`]
    /// blocks (default 33554432).
    pub buffer_memory: usize,
    /// `max.block.ms`: how long `send` waits for metadata or buffer space (default 60000).
    pub max_block_ms: u64,
    /// `max.request.size`: largest record, and the batches one request carries (default 1048576).
    pub max_request_size: usize,
    /// `retries` (default 2147483647; `delivery.timeout.ms` bounds them).
    pub retries: u32,
    /// `retry.backoff.ms`: wait before a retry (default 100).
    pub retry_backoff_ms: u64,
}

/// `ProducerConfig` keys this producer understands.
pub const CONFIG_KEYS: [&str; 15] = [
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
        }
    }

    /// Builds a config from `key=value` pairs (later pairs win) over Kafka's defaults, checked as
    /// Kafka's `ProducerConfig` does: `bootstrap.servers` is required; `enable.idempotence=true`
    /// given explicitly with `acks` other than all or more than 5 requests in flight is refused,
    /// while the default idempotence is quietly turned off then.
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
    /// off. What `fetchbench run` does with a workload's `[producer_config]` over its own
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
    /// [`record_size_upper_bound`]) can be sent with this config, as `KafkaProducer.ensureValidRecordSize`:
    /// its batch (the record plus a batch header) within `max.request.size`, the record within
    /// `buffer.memory` (the whole buffer cannot hold it).
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
            _ => return Err(bad(&format!("unknown producer config; known: {}", CONFIG_KEYS.join(", ")))),
        }
        Ok(())
    }

    /// Kafka 3+'s idempotence default: turned off when `acks` is not all or more than 5
    /// requests may be in flight, unless it was set explicitly (`explicit`): then an error.
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
        Ok(())
    }
}

fn split_servers(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// Errors of the producer. Cloneable: one batch's error is the result of each of its records.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// A configuration key has a bad value, is unknown, or conflicts with another.
    #[error("producer config {key}={value:?}: {reason}")]
    Config {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A request could not be sent or answered (connection, encoding, version negotiation).
    #[error("{context}: {source}")]
    Client {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: Arc<ClientError>,
    },
    /// The broker answered with a Kafka error code that is not retried (or retries ran out).
    #[error("{context} {topic}-{partition}: Kafka error {code}")]
    Kafka {
        /// The request (`Produce`, `Metadata`, `InitProducerId`).
        context: &'static str,
        /// Topic.
        topic: String,
        /// Partition (-1 when the error is the topic's).
        partition: i32,
        /// The Kafka error code.
        code: i16,
    },
    /// A record names a partition the topic does not have.
    #[error("topic {topic} has {partitions} partitions; partition {partition} does not exist")]
    UnknownPartition {
        /// Topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// Partitions the topic has.
        partitions: i32,
    },
    /// A record is larger than `max.request.size` (or `buffer.memory`).
    #[error("a record of about {size} bytes is larger than {limit} bytes ({setting})")]
    RecordTooLarge {
        /// The record's encoded size, an upper bound.
        size: usize,
        /// The limit.
        limit: usize,
        /// The setting that sets the limit.
        setting: &'static str,
    },
    /// Waiting for metadata, buffer space or a delivery took too long.
    #[error("{what}: timed out after {timeout_ms} ms")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The limit, ms.
        timeout_ms: u64,
    },
    /// Compressing a batch failed.
    #[error("compressing a batch with {codec}: {message}")]
    Compression {
        /// The codec.
        codec: Compression,
        /// The encoder's message.
        message: String,
    },
    /// The producer is closed (or its sender thread died).
    #[error("the producer is closed")]
    Closed,
}

impl ProducerError {
    fn client(context: impl Into<String>, source: ClientError) -> Self {
        ProducerError::Client { context: context.into(), source: Arc::new(source) }
    }
}

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed `0x9747b28c`, little-endian blocks,
/// returned as Java's signed int.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `BuiltInPartitioner.partitionForKey`: `Utils.toPositive(murmur2(key)) % partitions`
/// (`toPositive` clears the sign bit). `partitions` must be positive.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// Where a record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Partition.
    pub partition: i32,
    /// Offset; -1 with `acks=0` (no answer tells it).
    pub offset: i64,
}

/// The shared outcome of one batch.
#[derive(Debug)]
struct BatchDelivery {
    partition: i32,
    /// `Some(Ok(base offset))` or `Some(Err)` once done.
    result: Mutex<Option<Result<i64, ProducerError>>>,
    done: Condvar,
}

impl BatchDelivery {
    fn complete(&self, result: Result<i64, ProducerError>) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.done.notify_all();
    }
}

/// The delivery result of one record: [`DeliveryHandle::wait`] blocks until its batch is
/// answered. Cheap to hold (a shared pointer to the batch's result and the record's index).
#[derive(Clone, Debug)]
pub struct DeliveryHandle {
    batch: Arc<BatchDelivery>,
    index: i32,
}

impl DeliveryHandle {
    fn map(&self, r: &Result<i64, ProducerError>) -> Result<RecordMetadata, ProducerError> {
        match r {
            Ok(base) => Ok(RecordMetadata {
                partition: self.batch.partition,
                offset: if *base < 0 { -1 } else { base + self.index as i64 },
            }),
            Err(e) => Err(e.clone()),
        }
    }

    /// The result when the batch was answered, else `None`.
    pub fn try_result(&self) -> Option<Result<RecordMetadata, ProducerError>> {
        self.batch.result.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|r| self.map(r))
    }

    /// Waits for the result: the partition and offset, or the error that failed the batch.
    /// Bounded by `delivery.timeout.ms` plus a request timeout on the producer's side.
    pub fn wait(&self) -> Result<RecordMetadata, ProducerError> {
        let mut g = self.batch.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return self.map(r);
            }
            g = self.batch.done.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Counters of a producer, read with [`Producer::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Records accepted by `send`.
    pub records_sent: u64,
    /// Records whose batch was acknowledged (or written, with `acks=0`).
    pub records_acked: u64,
    /// Records whose batch failed.
    pub records_failed: u64,
    /// Batches written to a socket (retries included).
    pub batches_sent: u64,
    /// Produce requests written.
    pub requests_sent: u64,
    /// Batch bytes written (after compression, retries included).
    pub batch_bytes_sent: u64,
    /// Batches retried.
    pub retries: u64,
}

#[derive(Default)]
struct Counters {
    records_sent: AtomicU64,
    records_acked: AtomicU64,
    records_failed: AtomicU64,
    batches_sent: AtomicU64,
    requests_sent: AtomicU64,
    batch_bytes_sent: AtomicU64,
    retries: AtomicU64,
}

/// A batch being filled: the records encoded after a 61-byte header placeholder.
#[derive(Debug)]
struct OpenBatch {
    buf: Vec<u8>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    created: Instant,
    reserved: usize,
    delivery: Arc<BatchDelivery>,
}

impl OpenBatch {
    fn new(capacity: usize, partition: i32) -> Self {
        let mut buf = Vec::with_capacity(capacity.max(HEADER_SIZE + 64));
        buf.resize(HEADER_SIZE, 0);
        OpenBatch {
            buf,
            count: 0,
            base_timestamp: 0,
            max_timestamp: i64::MIN,
            created: Instant::now(),
            reserved: 0,
            delivery: Arc::new(BatchDelivery { partition, result: Mutex::new(None), done: Condvar::new() }),
        }
    }

    /// Kafka's `DefaultRecord.writeTo`, straight into the batch buffer.
    fn append(&mut self, timestamp: i64, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> i32 {
        if self.count == 0 {
            self.base_timestamp = timestamp;
        }
        let delta = self.count;
        let ts_delta = timestamp.wrapping_sub(self.base_timestamp);
        let nullable = |b: Option<&[u8]>| b.map_or(1, |b| varlong_size(b.len() as i64) + b.len());
        let mut body = 1 + varlong_size(ts_delta) + varlong_size(delta as i64) + nullable(key) + nullable(value);
        body += varlong_size(headers.len() as i64);
        for h in headers {
            body += nullable(Some(h.key)) + nullable(h.value);
        }
        let out = &mut self.buf;
        write_varint(out, body as i32);
        out.push(0);
        write_varlong(out, ts_delta);
        write_varint(out, delta);
        write_nullable(out, key);
        write_nullable(out, value);
        write_varint(out, headers.len() as i32);
        for h in headers {
            write_nullable(out, Some(h.key));
            write_nullable(out, h.value);
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        self.count += 1;
        delta
    }

    /// Writes header and CRC (compressing first): the batch bytes as sent.
    fn build(mut self, compression: Compression, producer: (i64, i16, i32)) -> Result<Bytes, ProducerError> {
        if compression != Compression::None {
            let body = compression
                .compress(&self.buf[HEADER_SIZE..])
                .map_err(|e| ProducerError::Compression { codec: compression, message: e.to_string() })?;
            self.buf.truncate(HEADER_SIZE);
            self.buf.extend_from_slice(&body);
        }
        let header = BatchHeader {
            base_offset: 0,
            batch_length: (self.buf.len() - LOG_OVERHEAD) as i32,
            partition_leader_epoch: -1,
            magic: MAGIC_V2,
            crc: 0,
            attributes: Attributes::default().with_compression(compression),
            last_offset_delta: (self.count - 1).max(0),
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: producer.2,
            records_count: self.count,
        };
        header.encode(&mut self.buf[..HEADER_SIZE]);
        let crc = crc32c::crc32c(&self.buf[ATTRIBUTES_OFFSET..]);
        self.buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(Bytes::from(self.buf))
    }
}

/// Upper bound of a record's encoded size (Kafka's `DefaultRecord.sizeInUpperBound`).
/// The most bytes a record with this key, value and headers takes in a v2 batch (varint
/// fields at their widest).
pub fn record_size_upper_bound(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header<'_>]) -> usize {
    let mut size = 5 + 1 + 10 + 5 + 5 + 5 + 5;
    size += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
    for h in headers {
        size += 10 + h.key.len() + h.value.map_or(0, <[u8]>::len);
    }
    size
}

/// A drained batch: built bytes with their sequence, kept for retries.
#[derive(Debug)]
struct BuiltBatch {
    bytes: Bytes,
    records: i32,
    base_sequence: i32,
    attempts: u32,
    created: Instant,
    not_before: Option<Instant>,
    reserved: usize,
    delivery: Arc<BatchDelivery>,
}

#[derive(Debug)]
enum Queued {
    /// Closed, not yet drained (no sequence yet).
    Closed(OpenBatch),
    /// Drained before and put back for a retry.
    Retry(BuiltBatch),
}

#[derive(Debug, Default)]
struct PartitionState {
    leader: i32,
    open: Option<OpenBatch>,
    queue: VecDeque<Queued>,
    next_sequence: i32,
}

#[derive(Debug)]
struct TopicState {
    name: Arc<str>,
    partitions: Vec<PartitionState>,
    sticky: i32,
    /// Bytes sent to the sticky partition since it was chosen (KIP-794).
    sticky_bytes: usize,
}

#[derive(Debug, Default)]
struct State {
    topics: Vec<TopicState>,
    topic_index: HashMap<String, usize>,
    brokers: HashMap<i32, String>,
    buffered_bytes: usize,
    pending_batches: usize,
    flushing: usize,
    closing: bool,
    sender_dead: bool,
    /// Round-robin start of the drain.
    drain_start: usize,
}

struct Shared {
    config: ProducerConfig,
    producer_id: i64,
    producer_epoch: i16,
    state: Mutex<State>,
    /// The sender waits here for work.
    wake_sender: Condvar,
    /// `send` waits here for buffer space, `flush` for completion.
    progress: Condvar,
    counters: Counters,
    first_error: Mutex<Option<ProducerError>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes a batch and releases its buffer space.
    fn finish(&self, delivery: &Arc<BatchDelivery>, records: i32, reserved: usize, result: Result<i64, ProducerError>) {
        let counter = if result.is_ok() { &self.counters.records_acked } else { &self.counters.records_failed };
        counter.fetch_add(records as u64, Ordering::Relaxed);
        if let Err(e) = &result {
            self.first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| e.clone());
        }
        delivery.complete(result);
        let mut st = self.lock();
        st.buffered_bytes = st.buffered_bytes.saturating_sub(reserved);
        st.pending_batches = st.pending_batches.saturating_sub(1);
        drop(st);
        self.progress.notify_all();
    }
}

/// fetchbench's producer (Kafka's `KafkaProducer`): see the module docs. `send` may be called
/// from several threads; one sender thread does the network I/O.
pub struct Producer {
    shared: Arc<Shared>,
    metadata_conn: Mutex<KafkaConnection>,
    sender: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

fn connect_any(servers: &[String], client_id: &str, timeout: Duration) -> Result<KafkaConnection, ProducerError> {
    let mut last = None;
    for s in servers {
        match KafkaConnection::connect(s.as_str(), client_id, timeout) {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(ProducerError::client(format!("bootstrap {s}"), e)),
        }
    }
    Err(last.unwrap_or(ProducerError::Config {
        key: "bootstrap.servers".into(),
        value: String::new(),
        reason: "required".into(),
    }))
}

/// Kafka errors retried: the retriable exceptions of Kafka's `Errors` a single leader can answer.
fn retriable(code: i16) -> bool {
    matches!(code, 3 | 5 | 6 | 7 | 13 | 14 | 15 | 19 | 20 | 45 | 56)
}

/// `DUPLICATE_SEQUENCE_NUMBER`: the batch was already written; Kafka's producer treats it as success.
const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;

impl Producer {
    /// Connects to the first of `bootstrap.servers` that answers and, with idempotence, gets a
    /// producer id (InitProducerId with a null transactional id), then starts the sender thread.
    ///
    /// Errors: [`ProducerError::Client`] when no bootstrap server answers or a request fails,
    /// [`ProducerError::Kafka`] when InitProducerId is refused.
    pub fn new(config: ProducerConfig) -> Result<Self, ProducerError> {
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let mut conn = connect_any(&config.bootstrap_servers, &config.client_id, timeout)?;
        let (producer_id, producer_epoch) = if config.enable_idempotence {
            init_producer_id(&mut conn, config.max_block_ms)?
        } else {
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        };
        let shared = Arc::new(Shared {
            config,
            producer_id,
            producer_epoch,
            state: Mutex::new(State::default()),
            wake_sender: Condvar::new(),
            progress: Condvar::new(),
            counters: Counters::default(),
            first_error: Mutex::new(None),
        });
        let for_sender = Arc::clone(&shared);
        let sender = std::thread::Builder::new()
            .name("fetchbench-producer".into())
            .spawn(move || Sender::new(for_sender).run())
            .map_err(|e| {
                ProducerError::client(
                    "starting the sender thread",
                    ClientError::Io { context: "spawning a thread".into(), source: e },
                )
            })?;
        Ok(Producer { shared, metadata_conn: Mutex::new(conn), sender: Mutex::new(Some(sender)) })
    }

    /// The configuration in use (idempotence as resolved).
    pub fn config(&self) -> &ProducerConfig {
        &self.shared.config
    }

    /// The producer id and epoch from InitProducerId, `(-1, -1)` without idempotence.
    pub fn producer_id(&self) -> (i64, i16) {
        (self.shared.producer_id, self.shared.producer_epoch)
    }

    /// The partition count of `topic`, fetching its metadata when not known yet.
    ///
    /// Errors: those of the Metadata request (see [`Producer::send`]).
    pub fn partitions(&self, topic: &str) -> Result<i32, ProducerError> {
        let (st, idx) = self.topic(self.shared.lock(), topic)?;
        Ok(st.topics[idx].partitions.len() as i32)
    }

    /// Counters so far.
    pub fn stats(&self) -> ProducerStats {
        let c = &self.shared.counters;
        ProducerStats {
            records_sent: c.records_sent.load(Ordering::Relaxed),
            records_acked: c.records_acked.load(Ordering::Relaxed),
            records_failed: c.records_failed.load(Ordering::Relaxed),
            batches_sent: c.batches_sent.load(Ordering::Relaxed),
            requests_sent: c.requests_sent.load(Ordering::Relaxed),
            batch_bytes_sent: c.batch_bytes_sent.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
        }
    }

    /// The first delivery error, if any batch failed.
    pub fn first_error(&self) -> Option<ProducerError> {
        self.shared.first_error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The index of `topic` in `st.topics`, after a Metadata request when it is new (the state
    /// lock is released during the request).
    fn topic<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        topic: &str,
    ) -> Result<(MutexGuard<'a, State>, usize), ProducerError> {
        if let Some(&i) = st.topic_index.get(topic) {
            return Ok((st, i));
        }
        drop(st);
        let deadline = Instant::now() + Duration::from_millis(self.shared.config.max_block_ms);
        let (brokers, leaders) = self.fetch_metadata(topic, deadline)?;
        let mut st = self.shared.lock();
        st.brokers.extend(brokers);
        if let Some(&i) = st.topic_index.get(topic) {
            return Ok((st, i));
        }
        let partitions = leaders.iter().map(|&leader| PartitionState { leader, ..Default::default() }).collect();
        st.topics.push(TopicState { name: Arc::from(topic), partitions, sticky: 0, sticky_bytes: 0 });
        let i = st.topics.len() - 1;
        st.topic_index.insert(topic.to_string(), i);
        Ok((st, i))
    }

    /// Metadata for `topic` until every partition has a leader: (node id -> `host:port`,
    /// leader of each partition).
    #[allow(clippy::type_complexity)]
    fn fetch_metadata(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<(HashMap<i32, String>, Vec<i32>), ProducerError> {
        let mut conn = self.metadata_conn.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let version = conn.version(ApiKey::Metadata, (1, 12)).map_err(|e| ProducerError::client("Metadata", e))?;
            let req = MetadataRequest::default()
                .with_topics(Some(vec![MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(topic.to_string()))))]))
                .with_allow_auto_topic_creation(true);
            let r = match conn.call(ApiKey::Metadata, version, RequestKind::Metadata(req)) {
                Ok(ResponseKind::Metadata(r)) => r,
                Ok(_) => unreachable!("decode_response returns the requested API"),
                Err(e) => return Err(ProducerError::client(format!("Metadata {topic}"), e)),
            };
            let brokers: HashMap<i32, String> =
                r.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
            let t = r.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic));
            let code = t.map_or(3, |t| t.error_code);
            let mut retry_code = code;
            if code == 0 {
                let t = t.expect("code 0 comes from a topic");
                let n = t.partitions.iter().map(|p| p.partition_index + 1).max().unwrap_or(0);
                let mut leaders = vec![-1; n.max(0) as usize];
                for p in &t.partitions {
                    if p.partition_index >= 0 {
                        leaders[p.partition_index as usize] = p.leader_id.0;
                    }
                }
                if n > 0 && leaders.iter().all(|l| brokers.contains_key(l)) {
                    return Ok((brokers, leaders));
                }
                retry_code = 5; // LEADER_NOT_AVAILABLE
            }
            if !retriable(retry_code) {
                return Err(ProducerError::Kafka {
                    context: "Metadata",
                    topic: topic.to_string(),
                    partition: -1,
                    code,
                });
            }
            if Instant::now() >= deadline {
                return Err(ProducerError::Timeout {
                    what: "waiting for topic metadata",
                    timeout_ms: self.shared.config.max_block_ms,
                });
            }
            std::thread::sleep(Duration::from_millis(self.shared.config.retry_backoff_ms.clamp(10, 1000)));
        }
    }

    /// Appends a record to its partition's batch and returns its delivery handle.
    ///
    /// - `partition`: `Some(p)` sends to `p`; `None` uses the key's murmur2 partition, or the
    ///   sticky partition for an unkeyed record.
    /// - `timestamp`: CreateTime in ms since the Unix epoch; `None` is the wall clock now.
    ///
    /// Blocks (up to `max.block.ms`) for the topic's metadata on its first use and while
    /// `buffer.memory` bytes wait for delivery.
    ///
    /// Errors: [`ProducerError::Closed`], [`ProducerError::RecordTooLarge`],
    /// [`ProducerError::UnknownPartition`], [`ProducerError::Timeout`], and the Metadata
    /// request's [`ProducerError::Client`] / [`ProducerError::Kafka`]. Delivery errors come
    /// through the handle.
    pub fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        timestamp: Option<i64>,
    ) -> Result<DeliveryHandle, ProducerError> {
        let config = &self.shared.config;
        let size = record_size_upper_bound(key, value, headers);
        config.check_record_size(size)?;
        let timestamp = timestamp.unwrap_or_else(now_ms);
        let st = self.shared.lock();
        if st.closing || st.sender_dead {
            return Err(ProducerError::Closed);
        }
        let (mut st, t) = self.topic(st, topic)?;
        // buffer.memory: wait for deliveries to free space.
        if st.buffered_bytes + size > config.buffer_memory {
            let deadline = Instant::now() + Duration::from_millis(config.max_block_ms);
            while st.buffered_bytes + size > config.buffer_memory && st.buffered_bytes > 0 {
                let now = Instant::now();
                if now >= deadline {
                    return Err(ProducerError::Timeout {
                        what: "waiting for buffer.memory",
                        timeout_ms: config.max_block_ms,
                    });
                }
                st = self.shared.progress.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
                if st.sender_dead {
                    return Err(ProducerError::Closed);
                }
            }
        }
        let n = st.topics[t].partitions.len() as i32;
        let mut p = match (partition, key) {
            (Some(p), _) if p < 0 || p >= n => {
                return Err(ProducerError::UnknownPartition { topic: topic.to_string(), partition: p, partitions: n })
            }
            (Some(p), _) => p,
            (None, Some(k)) => partition_for_key(k, n),
            (None, None) => {
                // KIP-794 (Kafka's BuiltInPartitioner): move on once batch.size bytes went to
                // the sticky partition, whether or not linger.ms sent them in smaller batches,
                // so low rates spread over every partition too.
                let ts = &mut st.topics[t];
                if ts.sticky_bytes >= config.batch_size {
                    ts.sticky = (ts.sticky + 1) % n;
                    ts.sticky_bytes = 0;
                }
                ts.sticky_bytes += size;
                ts.sticky
            }
        };
        let mut wake = false;
        let full = |open: &Option<OpenBatch>| {
            open.as_ref().is_some_and(|b| b.count > 0 && b.buf.len() + size > config.batch_size)
        };
        if full(&st.topics[t].partitions[p as usize].open) {
            let ps = &mut st.topics[t].partitions[p as usize];
            let closed = ps.open.take().expect("checked");
            ps.queue.push_back(Queued::Closed(closed));
            wake = true;
            if partition.is_none() && key.is_none() {
                // Sticky partitioner: the batch is full, move on.
                let topic_state = &mut st.topics[t];
                topic_state.sticky = (topic_state.sticky + 1) % n;
                topic_state.sticky_bytes = size;
                p = topic_state.sticky;
                if full(&topic_state.partitions[p as usize].open) {
                    let ps = &mut topic_state.partitions[p as usize];
                    let closed = ps.open.take().expect("checked");
                    ps.queue.push_back(Queued::Closed(closed));
                }
            }
        }
        let st = &mut *st;
        let ps = &mut st.topics[t].partitions[p as usize];
        if ps.open.is_none() {
            ps.open = Some(OpenBatch::new(config.batch_size.max(size + HEADER_SIZE), p));
            st.pending_batches += 1;
            wake = true;
        }
        let open = ps.open.as_mut().expect("just set");
        let index = open.append(timestamp, key, value, headers);
        open.reserved += size;
        st.buffered_bytes += size;
        let handle = DeliveryHandle { batch: Arc::clone(&open.delivery), index };
        if open.buf.len() >= config.batch_size {
            let closed = ps.open.take().expect("checked");
            ps.queue.push_back(Queued::Closed(closed));
            wake = true;
        }
        self.shared.counters.records_sent.fetch_add(1, Ordering::Relaxed);
        if wake {
            self.shared.wake_sender.notify_one();
        }
        Ok(handle)
    }

    /// Sends every batch now (ignoring `linger.ms`) and waits until every record sent before
    /// (and during) the call is delivered or failed, as Kafka's `flush`.
    ///
    /// Errors: [`ProducerError::Closed`] when the sender thread is gone with records undelivered.
    pub fn flush(&self) -> Result<(), ProducerError> {
        let mut st = self.shared.lock();
        st.flushing += 1;
        self.shared.wake_sender.notify_one();
        while st.pending_batches > 0 && !st.sender_dead {
            st = self.shared.progress.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.flushing -= 1;
        if st.pending_batches > 0 {
            return Err(ProducerError::Closed);
        }
        Ok(())
    }

    /// Delivers every record sent (as [`Producer::flush`]), then stops the sender thread and
    /// closes the connections. Later `send`s fail with [`ProducerError::Closed`].
    ///
    /// Errors: [`ProducerError::Closed`] when the sender thread died with records undelivered.
    pub fn close(&self) -> Result<(), ProducerError> {
        let flushed = self.flush();
        {
            let mut st = self.shared.lock();
            st.closing = true;
        }
        self.shared.wake_sender.notify_one();
        if let Some(h) = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
        flushed
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn init_producer_id(conn: &mut KafkaConnection, max_block_ms: u64) -> Result<(i64, i16), ProducerError> {
    let deadline = Instant::now() + Duration::from_millis(max_block_ms);
    loop {
        let version =
            conn.version(ApiKey::InitProducerId, (0, 5)).map_err(|e| ProducerError::client("InitProducerId", e))?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        let r = match conn.call(ApiKey::InitProducerId, version, RequestKind::InitProducerId(req)) {
            Ok(ResponseKind::InitProducerId(r)) => r,
            Ok(_) => unreachable!("decode_response returns the requested API"),
            Err(e) => return Err(ProducerError::client("InitProducerId", e)),
        };
        if r.error_code == 0 {
            return Ok((r.producer_id.0, r.producer_epoch));
        }
        // COORDINATOR_LOAD_IN_PROGRESS (14), COORDINATOR_NOT_AVAILABLE (15), NOT_COORDINATOR (16).
        if !matches!(r.error_code, 14..=16) || Instant::now() >= deadline {
            return Err(ProducerError::Kafka {
                context: "InitProducerId",
                topic: "(transactional.id null)".into(),
                partition: -1,
                code: r.error_code,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// One batch of a request in flight.
struct Sent {
    topic: usize,
    topic_name: Arc<str>,
    partition: i32,
    batch: BuiltBatch,
}

struct InFlight {
    correlation_id: i32,
    version: i16,
    batches: Vec<Sent>,
}

#[derive(Default)]
struct Node {
    conn: Option<KafkaConnection>,
    in_flight: VecDeque<InFlight>,
}

/// The sender thread (Kafka's `Sender`).
struct Sender {
    shared: Arc<Shared>,
    nodes: HashMap<i32, Node>,
}

/// A batch drained for the first time: (topic index, name, partition, batch, base sequence).
type Fresh = (usize, Arc<str>, i32, OpenBatch, i32);

/// Work of one node: retried batches, fresh batches to build, request bytes so far.
type NodeWork = (Vec<Sent>, Vec<Fresh>, usize);

enum Step {
    Send(Vec<(i32, NodeWork)>),
    Receive(i32),
    Stop,
}

impl Sender {
    fn new(shared: Arc<Shared>) -> Self {
        Sender { shared, nodes: HashMap::new() }
    }

    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_loop()));
        let mut st = shared.lock();
        st.sender_dead = true;
        // Fail whatever is left (only after a panic or a close with undelivered records).
        let mut left = Vec::new();
        for t in &mut st.topics {
            for p in &mut t.partitions {
                if let Some(b) = p.open.take() {
                    left.push((b.delivery, b.count, b.reserved));
                }
                for q in p.queue.drain(..) {
                    match q {
                        Queued::Closed(b) => left.push((b.delivery, b.count, b.reserved)),
                        Queued::Retry(b) => left.push((b.delivery, b.records, b.reserved)),
                    }
                }
            }
        }
        drop(st);
        for (d, n, r) in left {
            shared.finish(&d, n, r, Err(ProducerError::Closed));
        }
        shared.progress.notify_all();
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    }

    fn run_loop(&mut self) {
        loop {
            match self.next_step() {
                Step::Stop => return,
                Step::Receive(node) => self.receive(node),
                Step::Send(work) => {
                    for (node, (retries, fresh, _)) in work {
                        self.send(node, retries, fresh);
                    }
                }
            }
        }
    }

    /// Waits for work: ready batches for a node with room in flight, or an answer to read.
    fn next_step(&mut self) -> Step {
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        loop {
            let in_flight: usize = self.nodes.values().map(|n| n.in_flight.len()).sum();
            if st.closing && st.pending_batches == 0 && in_flight == 0 {
                return Step::Stop;
            }
            let now = Instant::now();
            let (work, next_wake) = self.drain(&mut st, now);
            if !work.is_empty() {
                return Step::Send(work.into_iter().collect());
            }
            if in_flight > 0 {
                // The node whose oldest request is oldest: requests are answered in order.
                let node = self
                    .nodes
                    .iter()
                    .filter(|(_, n)| !n.in_flight.is_empty())
                    .min_by_key(|(_, n)| n.in_flight.front().map(|f| f.correlation_id))
                    .map(|(&id, _)| id)
                    .expect("in flight");
                return Step::Receive(node);
            }
            let timeout = next_wake.map_or(Duration::from_secs(1), |w| w.saturating_duration_since(now));
            st = shared.wake_sender.wait_timeout(st, timeout).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Takes, per leader with room in flight, one sendable batch of each partition (up to
    /// `max.request.size`), closing batches whose `linger.ms` is over (all of them while
    /// flushing). Fresh batches get their sequence numbers here. Returns the work and the next
    /// time something becomes due.
    fn drain(&self, st: &mut State, now: Instant) -> (HashMap<i32, NodeWork>, Option<Instant>) {
        let config = &self.shared.config;
        let linger = Duration::from_millis(config.linger_ms);
        let flush = st.flushing > 0 || st.closing;
        let idempotent = self.shared.producer_id >= 0;
        let mut next_wake: Option<Instant> = None;
        let mut wake_at = |t: Instant| next_wake = Some(next_wake.map_or(t, |w: Instant| w.min(t)));
        let mut per_node: HashMap<i32, NodeWork> = HashMap::new();
        let topics = st.topics.len();
        let start = st.drain_start;
        st.drain_start = st.drain_start.wrapping_add(1);
        for i in 0..topics {
            let ti = (start + i) % topics;
            let topic = &mut st.topics[ti];
            for (pi, ps) in topic.partitions.iter_mut().enumerate() {
                if let Some(open) = &ps.open {
                    let due = open.created + linger;
                    if flush || now >= due {
                        let b = ps.open.take().expect("checked");
                        ps.queue.push_back(Queued::Closed(b));
                    } else {
                        wake_at(due);
                    }
                }
                let Some(head) = ps.queue.front() else { continue };
                if let Queued::Retry(b) = head {
                    if let Some(t) = b.not_before.filter(|&t| t > now) {
                        wake_at(t);
                        continue;
                    }
                }
                let leader = ps.leader;
                if self.nodes.get(&leader).map_or(0, |n| n.in_flight.len()) >= config.max_in_flight {
                    continue;
                }
                let entry = per_node.entry(leader).or_default();
                let size = match head {
                    Queued::Closed(b) => b.buf.len(),
                    Queued::Retry(b) => b.bytes.len(),
                };
                if entry.2 > 0 && entry.2 + size > config.max_request_size {
                    continue;
                }
                entry.2 += size;
                match ps.queue.pop_front().expect("checked") {
                    Queued::Retry(b) => entry.0.push(Sent {
                        topic: ti,
                        topic_name: Arc::clone(&topic.name),
                        partition: pi as i32,
                        batch: b,
                    }),
                    Queued::Closed(b) => {
                        let seq = if idempotent {
                            let s = ps.next_sequence;
                            ps.next_sequence = increment_sequence(s, b.count);
                            s
                        } else {
                            NO_SEQUENCE
                        };
                        entry.1.push((ti, Arc::clone(&topic.name), pi as i32, b, seq));
                    }
                }
            }
        }
        (per_node, next_wake)
    }

    /// Builds the fresh batches and writes one Produce request to `node`.
    fn send(&mut self, node: i32, mut batches: Vec<Sent>, fresh: Vec<Fresh>) {
        let shared = Arc::clone(&self.shared);
        let config = &shared.config;
        for (topic, topic_name, partition, open, seq) in fresh {
            let (delivery, count, reserved, created) =
                (Arc::clone(&open.delivery), open.count, open.reserved, open.created);
            match open.build(config.compression, (shared.producer_id, shared.producer_epoch, seq)) {
                Ok(bytes) => batches.push(Sent {
                    topic,
                    topic_name,
                    partition,
                    batch: BuiltBatch {
                        bytes,
                        records: count,
                        base_sequence: seq,
                        attempts: 0,
                        created,
                        not_before: None,
                        reserved,
                        delivery,
                    },
                }),
                Err(e) => shared.finish(&delivery, count, reserved, Err(e)),
            }
        }
        if batches.is_empty() {
            return;
        }
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let entry = self.nodes.entry(node).or_default();
        if entry.conn.is_none() {
            let addr = shared.lock().brokers.get(&node).cloned().unwrap_or_default();
            match KafkaConnection::connect(addr.as_str(), &config.client_id, timeout) {
                Ok(c) => entry.conn = Some(c),
                Err(e) => {
                    let e = ProducerError::client(format!("connecting to node {node} ({addr})"), e);
                    for s in batches {
                        self.retry_or_fail(s, e.clone());
                    }
                    return;
                }
            }
        }
        let conn = entry.conn.as_mut().expect("connected");
        let version = match conn.version(ApiKey::Produce, (3, 12)) {
            Ok(v) => v,
            Err(e) => {
                let e = ProducerError::client("Produce", e);
                for s in batches {
                    shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Err(e.clone()));
                }
                return;
            }
        };
        let mut topic_data: Vec<TopicProduceData> = Vec::new();
        let mut bytes = 0u64;
        for s in &batches {
            bytes += s.batch.bytes.len() as u64;
            let data =
                PartitionProduceData::default().with_index(s.partition).with_records(Some(s.batch.bytes.clone()));
            match topic_data.iter_mut().find(|t| t.name.0.as_str() == &*s.topic_name) {
                Some(t) => t.partition_data.push(data),
                None => topic_data.push(
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(s.topic_name.to_string())))
                        .with_partition_data(vec![data]),
                ),
            }
        }
        let req = ProduceRequest::default()
            .with_acks(config.acks.wire())
            .with_timeout_ms(config.request_timeout_ms.min(i32::MAX as u64) as i32)
            .with_topic_data(topic_data);
        match conn.send(ApiKey::Produce, version, RequestKind::Produce(req)) {
            Ok(correlation_id) => {
                let c = &shared.counters;
                c.requests_sent.fetch_add(1, Ordering::Relaxed);
                c.batches_sent.fetch_add(batches.len() as u64, Ordering::Relaxed);
                c.batch_bytes_sent.fetch_add(bytes, Ordering::Relaxed);
                if config.acks == Acks::None {
                    for s in batches {
                        shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Ok(-1));
                    }
                } else {
                    entry.in_flight.push_back(InFlight { correlation_id, version, batches });
                }
            }
            Err(e) => {
                let e = ProducerError::client(format!("sending Produce to node {node}"), e);
                self.connection_failed(node, batches, e);
            }
        }
    }

    /// Reads the answer to `node`'s oldest request and completes or retries its batches.
    fn receive(&mut self, node: i32) {
        let shared = Arc::clone(&self.shared);
        let entry = self.nodes.get_mut(&node).expect("node with requests in flight");
        let request = entry.in_flight.pop_front().expect("a request in flight");
        let conn = entry.conn.as_mut().expect("requests in flight have a connection");
        let response = match conn.receive(ApiKey::Produce, request.version, request.correlation_id) {
            Ok(ResponseKind::Produce(r)) => r,
            Ok(_) => unreachable!("decode_response returns the requested API"),
            Err(e) => {
                let e = ProducerError::client(format!("reading the Produce answer of node {node}"), e);
                self.connection_failed(node, request.batches, e);
                return;
            }
        };
        for s in request.batches {
            let answer = response.responses.iter().find(|t| t.name.0.as_str() == &*s.topic_name).and_then(|t| {
                t.partition_responses.iter().find(|p| p.index == s.partition).map(|p| (p.error_code, p.base_offset))
            });
            let (code, base_offset) = answer.unwrap_or((13, -1)); // NETWORK_EXCEPTION: no answer for it
            let kafka = |code| ProducerError::Kafka {
                context: "Produce",
                topic: s.topic_name.to_string(),
                partition: s.partition,
                code,
            };
            match code {
                0 | DUPLICATE_SEQUENCE_NUMBER => {
                    shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Ok(base_offset))
                }
                c if retriable(c) => {
                    let e = kafka(c);
                    self.retry_or_fail(s, e);
                }
                c => shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Err(kafka(c))),
            }
        }
    }

    /// Drops `node`'s connection; `batches` and every request in flight on it are retried in
    /// order (their sequences kept).
    fn connection_failed(&mut self, node: i32, batches: Vec<Sent>, error: ProducerError) {
        let mut all = Vec::new();
        if let Some(entry) = self.nodes.get_mut(&node) {
            entry.conn = None;
            for r in entry.in_flight.drain(..) {
                all.extend(r.batches);
            }
        }
        all.extend(batches);
        for s in all {
            self.retry_or_fail(s, error.clone());
        }
    }

    /// Puts a batch back for a retry after `retry.backoff.ms`, in sequence order ahead of the
    /// batches not sent yet, or fails it when `retries` or `delivery.timeout.ms` ran out.
    fn retry_or_fail(&self, mut s: Sent, error: ProducerError) {
        let shared = &self.shared;
        let config = &shared.config;
        s.batch.attempts += 1;
        if s.batch.attempts > config.retries
            || s.batch.created.elapsed() >= Duration::from_millis(config.delivery_timeout_ms)
        {
            shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Err(error));
            return;
        }
        shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        s.batch.not_before = Some(Instant::now() + Duration::from_millis(config.retry_backoff_ms));
        let mut st = shared.lock();
        let ps = &mut st.topics[s.topic].partitions[s.partition as usize];
        let seq = s.batch.base_sequence;
        let at = ps
            .queue
            .iter()
            .position(|q| match q {
                Queued::Closed(_) => true,
                Queued::Retry(b) => seq >= 0 && b.base_sequence > seq,
            })
            .unwrap_or(ps.queue.len());
        ps.queue.insert(at, Queued::Retry(s.batch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test() {
        // Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            (b"abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn sequences_wrap_as_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX - 1, 2), 0);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
    }

    fn test_shared(config: ProducerConfig) -> Arc<Shared> {
        let mut state = State::default();
        let mut partition = PartitionState::default();
        partition.queue.push_back(Queued::Closed(OpenBatch::new(100, 0)));
        state.topics.push(TopicState { name: Arc::from("t"), partitions: vec![partition], sticky: 0, sticky_bytes: 0 });
        state.pending_batches = 3;
        Arc::new(Shared {
            config,
            producer_id: 7,
            producer_epoch: 0,
            state: Mutex::new(state),
            wake_sender: Condvar::new(),
            progress: Condvar::new(),
            counters: Counters::default(),
            first_error: Mutex::new(None),
        })
    }

    fn sent(seq: i32) -> Sent {
        let open = OpenBatch::new(100, 0);
        Sent {
            topic: 0,
            topic_name: Arc::from("t"),
            partition: 0,
            batch: BuiltBatch {
                bytes: Bytes::new(),
                records: 1,
                base_sequence: seq,
                attempts: 0,
                created: Instant::now(),
                not_before: None,
                reserved: 0,
                delivery: open.delivery,
            },
        }
    }

    #[test]
    fn retries_keep_sequence_order_ahead_of_new_batches() {
        let shared = test_shared(ProducerConfig::new("x"));
        let sender = Sender::new(Arc::clone(&shared));
        let error = ProducerError::Closed;
        for seq in [10, 0, 5] {
            sender.retry_or_fail(sent(seq), error.clone());
        }
        let st = shared.lock();
        let order: Vec<Option<i32>> = st.topics[0].partitions[0]
            .queue
            .iter()
            .map(|q| match q {
                Queued::Retry(b) => Some(b.base_sequence),
                Queued::Closed(_) => None,
            })
            .collect();
        assert_eq!(order, vec![Some(0), Some(5), Some(10), None]);
        drop(st);
        assert_eq!(shared.counters.retries.load(Ordering::Relaxed), 3);

        // Out of retries: the batch fails with the error.
        let mut config = ProducerConfig::new("x");
        config.retries = 0;
        let shared = test_shared(config);
        let s = sent(0);
        let handle = DeliveryHandle { batch: Arc::clone(&s.batch.delivery), index: 0 };
        Sender::new(Arc::clone(&shared)).retry_or_fail(s, ProducerError::Closed);
        assert!(matches!(handle.try_result(), Some(Err(ProducerError::Closed))));
        assert_eq!(shared.lock().pending_batches, 2);
    }

    #[test]
    fn batches_parse_with_the_log_module() {
        let mut b = OpenBatch::new(100, 0);
        b.append(1_000, Some(b"k"), Some(b"v"), &[Header { key: b"h", value: None }]);
        b.append(990, None, Some(&[7u8; 300]), &[]);
        for codec in Compression::ALL {
            let mut c = OpenBatch::new(100, 0);
            c.buf.clone_from(&b.buf);
            (c.count, c.base_timestamp, c.max_timestamp) = (b.count, b.base_timestamp, b.max_timestamp);
            let bytes = c.build(codec, (7, 1, 42)).unwrap();
            let batch = crate::log::RecordBatch::parse(&bytes).unwrap();
            batch.verify_crc().unwrap();
            let h = batch.header();
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.records_count), (7, 1, 42, 2));
            assert_eq!((h.base_timestamp, h.max_timestamp, h.last_offset_delta), (1_000, 1_000, 1));
            let recs = batch.records().unwrap();
            let recs = recs.to_vec().unwrap();
            assert_eq!(recs[0].headers[0].key, b"h");
            assert_eq!((recs[1].timestamp, recs[1].value.map(<[u8]>::len)), (990, Some(300)));
        }
    }
}
