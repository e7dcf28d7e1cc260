//! fetchbench's own load producer, modelled on Kafka's `KafkaProducer` and split as Kafka's
//! producer is: [`Producer`] (here) is the API; records are appended to per-partition batches
//! (`accumulator`, Kafka's `RecordAccumulator`), a sender thread drains ready batches into
//! Produce requests (`sender`, Kafka's `Sender`) and completes each record's [`DeliveryHandle`]
//! (`delivery`).
//!
//! - Configuration (`config`): [`ProducerConfig`], with Kafka's names and defaults (Kafka 4:
//!   `linger.ms=5`, `enable.idempotence=true`, `acks=all`); errors (`error`): [`ProducerError`].
//! - Metadata: bootstrap, then Metadata for each topic on its first send (auto-creation allowed,
//!   as `allow.auto.create.topics=true`); batches go to each partition's leader.
//! - Partitioner (`partitioner`, Kafka's `BuiltInPartitioner`): a keyed record goes to
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
//! - Transactions (KIP-98, Kafka's `TransactionManager`; `transaction`), with
//!   `transactional.id`: [`Producer::init_transactions`], [`Producer::begin_transaction`],
//!   [`Producer::send`]s (each new partition joins the transaction with AddPartitionsToTxn
//!   before its first record is queued), [`Producer::send_offsets_to_transaction`],
//!   [`Producer::commit_transaction`] / [`Producer::abort_transaction`]; the state is
//!   [`TransactionState`] (Kafka's states and transitions). Fencing and authorization errors
//!   are fatal, a failed record makes the transaction abortable. Batches carry the
//!   transactional attribute and Produce the transactional id.
//!
//! Not implemented: metadata refresh after a leader change (retriable errors are
//! retried against the same leader), per-record callbacks (use [`DeliveryHandle`] or
//! [`Producer::stats`]).

mod accumulator;
mod config;
mod delivery;
mod error;
mod partitioner;
mod sender;
mod transaction;
mod txn_state;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, MetadataRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::connection::{ClientError, KafkaConnection};
use crate::log::batch::{Header, NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
pub use accumulator::record_size_upper_bound;
use accumulator::{PartitionState, RecordAccumulator, State, TopicState};
pub use config::{Acks, ProducerConfig, CONFIG_KEYS};
pub use delivery::{DeliveryHandle, RecordMetadata};
use error::retriable;
pub use error::ProducerError;
use partitioner::StickyPartition;
pub use partitioner::{murmur2, partition_for_key};
use sender::Sender;
pub use transaction::{ConsumerGroupMetadata, TransactionState};
use transaction::{Ctx, TransactionManager};

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

/// fetchbench's producer (Kafka's `KafkaProducer`): see the module docs. `send` may be called
/// from several threads; one sender thread does the network I/O.
pub struct Producer {
    shared: Arc<RecordAccumulator>,
    metadata_conn: Mutex<KafkaConnection>,
    sender: Mutex<Option<JoinHandle<()>>>,
    /// With `transactional.id`: the transaction state (lock order: this, `metadata_conn`, the
    /// accumulator's state).
    txn: Option<Mutex<TransactionManager>>,
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

impl Producer {
    /// Connects to the first of `bootstrap.servers` that answers and, with idempotence, gets a
    /// producer id (InitProducerId with a null transactional id), then starts the sender thread.
    /// With `transactional.id` no producer id is asked for: [`Producer::init_transactions`]
    /// does that.
    ///
    /// Errors: [`ProducerError::Client`] when no bootstrap server answers or a request fails,
    /// [`ProducerError::Kafka`] when InitProducerId is refused.
    pub fn new(config: ProducerConfig) -> Result<Self, ProducerError> {
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let mut conn = connect_any(&config.bootstrap_servers, &config.client_id, timeout)?;
        let (producer_id, producer_epoch) = if config.enable_idempotence && config.transactional_id.is_none() {
            init_producer_id(&mut conn, config.max_block_ms)?
        } else {
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        };
        let txn = config.transactional_id.clone().map(|id| Mutex::new(TransactionManager::new(id)));
        let shared = Arc::new(RecordAccumulator::new(config, producer_id, producer_epoch));
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
        Ok(Producer { shared, metadata_conn: Mutex::new(conn), sender: Mutex::new(Some(sender)), txn })
    }

    /// The configuration in use (idempotence as resolved).
    pub fn config(&self) -> &ProducerConfig {
        &self.shared.config
    }

    /// The producer id and epoch from InitProducerId, `(-1, -1)` without idempotence (and
    /// before [`Producer::init_transactions`] with `transactional.id`).
    pub fn producer_id(&self) -> (i64, i16) {
        (self.shared.producer_id.load(Ordering::Acquire), self.shared.producer_epoch.load(Ordering::Acquire))
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
        st.topics.push(TopicState { name: Arc::from(topic), partitions, sticky: StickyPartition::default() });
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
        if let Some(txn) = &self.txn {
            self.lock_txn(txn).check_send(&self.shared)?;
        }
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
            (None, None) => st.topics[t].sticky.partition(n, config.batch_size, size),
        };
        let mut wake = false;
        if st.topics[t].partitions[p as usize].close_if_full(size, config.batch_size) {
            wake = true;
            if partition.is_none() && key.is_none() {
                // Sticky partitioner: the batch is full, move on.
                let topic_state = &mut st.topics[t];
                p = topic_state.sticky.batch_full(n, size);
                topic_state.partitions[p as usize].close_if_full(size, config.batch_size);
            }
        }
        if let Some(txn) = &self.txn {
            // The partition joins the transaction before its first record is queued
            // (AddPartitionsToTxn): no batch of a partition outside the transaction is sent.
            let mut tm = self.lock_txn(txn);
            if !tm.has_partition(t, p) {
                let name = Arc::clone(&st.topics[t].name);
                drop(st);
                let deadline = Instant::now() + Duration::from_millis(config.max_block_ms);
                tm.add_partition(&self.ctx(), (t, &name), p, deadline)?;
                drop(tm);
                st = self.shared.lock();
                if st.closing || st.sender_dead {
                    return Err(ProducerError::Closed);
                }
            }
        }
        let (handle, new_work) = st.append(t, p, timestamp, key, value, headers, size, config.batch_size);
        wake |= new_work;
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
        self.shared.flush_until(None, "flush")
    }

    fn lock_txn<'a>(&self, txn: &'a Mutex<TransactionManager>) -> MutexGuard<'a, TransactionManager> {
        txn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx { shared: &self.shared, bootstrap: &self.metadata_conn }
    }

    /// The transaction manager, or `IllegalTransactionState` naming `operation` without
    /// `transactional.id` (Kafka's "Transactional method invoked on a non-transactional
    /// producer").
    fn txn(&self, operation: &'static str) -> Result<MutexGuard<'_, TransactionManager>, ProducerError> {
        match &self.txn {
            Some(t) => Ok(self.lock_txn(t)),
            None => Err(ProducerError::IllegalTransactionState {
                operation,
                state: TransactionState::Uninitialized,
                transactional: false,
            }),
        }
    }

    /// The transaction state, `None` without `transactional.id`.
    pub fn transaction_state(&self) -> Option<TransactionState> {
        self.txn.as_ref().map(|t| self.lock_txn(t).state())
    }

    /// Kafka's `initTransactions`: finds the transaction coordinator of `transactional.id`
    /// (FindCoordinator, key type 1) and gets the producer id and epoch from it (InitProducerId
    /// with the id and `transaction.timeout.ms`). The coordinator bumps the epoch, which fences
    /// any older producer with the same id and aborts (or completes) its open transaction.
    /// Call once, before any other transactional method; `UNINITIALIZED` -> `READY`.
    ///
    /// Retries `COORDINATOR_LOAD_IN_PROGRESS`, `CONCURRENT_TRANSACTIONS`, and (after a new
    /// FindCoordinator) `NOT_COORDINATOR` / `COORDINATOR_NOT_AVAILABLE`, for up to `timeout`.
    ///
    /// Errors: [`ProducerError::TransactionTimeout`] (call again to resume);
    /// [`ProducerError::TransactionalIdAuthorizationFailed`], [`ProducerError::ProducerFenced`]
    /// and other [`ProducerError::Transaction`] errors (fatal);
    /// [`ProducerError::IllegalTransactionState`] when called twice or without `transactional.id`.
    pub fn init_transactions(&self, timeout: Duration) -> Result<(), ProducerError> {
        let mut tm = self.txn("init_transactions")?;
        tm.init(&self.ctx(), Instant::now() + timeout)
    }

    /// Kafka's `beginTransaction`: `READY` -> `IN_TRANSACTION`; no request is sent (the
    /// partitions join the transaction as records are sent to them).
    ///
    /// Errors: the fatal error of a fenced producer; [`ProducerError::TransactionAbortable`]
    /// after an error in the transaction not yet aborted; [`ProducerError::IllegalTransactionState`]
    /// before `init_transactions` or inside a transaction.
    pub fn begin_transaction(&self) -> Result<(), ProducerError> {
        let mut tm = self.txn("begin_transaction")?;
        tm.begin(&self.shared)
    }

    /// Kafka's `sendOffsetsToTransaction`: commits the consumer `offsets` (topic-partition ->
    /// the next offset to consume) of `group` as part of the transaction: AddOffsetsToTxn to
    /// the transaction coordinator, then TxnOffsetCommit to the group coordinator (FindCoordinator,
    /// key type 0). The group sees the offsets only when the transaction commits. Waits up to
    /// `max.block.ms`.
    ///
    /// Errors: as [`Producer::begin_transaction`] (only in `IN_TRANSACTION`);
    /// [`ProducerError::Transaction`] for `ILLEGAL_GENERATION` / `UNKNOWN_MEMBER_ID` of a stale
    /// group member (the transaction becomes abortable); [`ProducerError::TransactionTimeout`].
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &BTreeMap<(String, i32), i64>,
        group: &ConsumerGroupMetadata,
    ) -> Result<(), ProducerError> {
        let mut tm = self.txn("send_offsets_to_transaction")?;
        let deadline = Instant::now() + Duration::from_millis(self.shared.config.max_block_ms);
        tm.send_offsets(&self.ctx(), offsets, group, deadline)
    }

    /// Kafka's `commitTransaction`: flushes every record sent, then commits the transaction
    /// (EndTxn, committed; the coordinator writes COMMIT markers to its partitions), up to
    /// `timeout`. `IN_TRANSACTION` -> `COMMITTING_TRANSACTION` -> `READY`. A transaction that
    /// sent nothing ends without a request.
    ///
    /// Errors: [`ProducerError::TransactionAbortable`] when a record of the transaction failed
    /// or a request was answered with an abortable error (abort it); the fatal error of a
    /// fenced producer ([`ProducerError::ProducerFenced`], ...); [`ProducerError::Timeout`] /
    /// [`ProducerError::TransactionTimeout`] (call again to resume the commit);
    /// [`ProducerError::IllegalTransactionState`] outside a transaction.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), ProducerError> {
        let mut tm = self.txn("commit_transaction")?;
        tm.end(&self.ctx(), true, Instant::now() + timeout)
    }

    /// Kafka's `abortTransaction`: discards the transaction's batches not sent yet (their
    /// records fail with [`ProducerError::TransactionAborted`]), waits for those in flight,
    /// then aborts it (EndTxn, aborted; the coordinator writes ABORT markers), up to `timeout`.
    /// Works from `IN_TRANSACTION` and `ABORTABLE_ERROR`; -> `READY`.
    ///
    /// Errors: the fatal error of a fenced producer; [`ProducerError::Timeout`] /
    /// [`ProducerError::TransactionTimeout`] (call again to resume);
    /// [`ProducerError::IllegalTransactionState`] outside a transaction.
    pub fn abort_transaction(&self, timeout: Duration) -> Result<(), ProducerError> {
        let mut tm = self.txn("abort_transaction")?;
        tm.end(&self.ctx(), false, Instant::now() + timeout)
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
