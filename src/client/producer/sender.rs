//! The sender thread (Kafka's `Sender`): drains ready batches from the
//! [`RecordAccumulator`] into Produce requests, one request carrying one batch of every
//! partition of a leader (up to `max.request.size`), pipelines up to
//! `max.in.flight.requests.per.connection` requests on each leader's connection, reads the
//! answers in order and completes each batch's delivery. Compressed batches are compressed here,
//! once, when first drained.
//!
//! - `acks=0`: requests are written and not answered; deliveries complete with offset -1.
//! - Retries: a retriable Kafka error or a broken connection puts the batch (and every request
//!   in flight on that connection) back for a retry after `retry.backoff.ms`, keeping its
//!   sequence number, until `retries` or `delivery.timeout.ms` run out. A batch answered
//!   `DUPLICATE_SEQUENCE_NUMBER` was written before: success, as in Kafka's producer. A batch
//!   refused with another error gives its sequences back when no later batch took any.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestKind, ResponseKind, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;

use super::accumulator::{BuiltBatch, Fresh, NodeWork, RecordAccumulator, Sent};
use super::config::Acks;
use super::error::{retriable, ProducerError, DUPLICATE_SEQUENCE_NUMBER};
use crate::client::connection::KafkaConnection;

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
pub(super) struct Sender {
    shared: Arc<RecordAccumulator>,
    nodes: HashMap<i32, Node>,
}

enum Step {
    Send(Vec<(i32, NodeWork)>),
    Receive(i32),
    Stop,
}

impl Sender {
    /// A sender of `shared`'s batches, with no connections yet.
    pub(super) fn new(shared: Arc<RecordAccumulator>) -> Self {
        Sender { shared, nodes: HashMap::new() }
    }

    /// The thread's body: sends until the producer closes, then fails what is left.
    pub(super) fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_loop()));
        let mut st = shared.lock();
        st.sender_dead = true;
        // Fail whatever is left (only after a panic or a close with undelivered records).
        let left = st.take_incomplete();
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
            let max_in_flight = shared.config.max_in_flight;
            let node_ready = |node| self.nodes.get(&node).map_or(0, |n| n.in_flight.len()) < max_in_flight;
            let (work, next_wake) = shared.drain(&mut st, now, node_ready);
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

    /// Builds the fresh batches and writes one Produce request to `node`.
    fn send(&mut self, node: i32, mut batches: Vec<Sent>, fresh: Vec<Fresh>) {
        let shared = Arc::clone(&self.shared);
        let config = &shared.config;
        for (topic, topic_name, partition, open, seq) in fresh {
            let (delivery, count, reserved, created) =
                (Arc::clone(&open.delivery), open.count, open.reserved, open.created);
            let producer = (shared.producer_id.load(Ordering::Acquire), shared.producer_epoch.load(Ordering::Acquire));
            match open.build(config.compression, (producer.0, producer.1, seq), config.transactional_id.is_some()) {
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
            .with_transactional_id(
                config.transactional_id.as_ref().map(|id| TransactionalId(StrBytes::from_string(id.clone()))),
            )
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
                c => {
                    // Refused, not written: its sequences go to the next batch.
                    shared.lock().rewind_sequence(s.topic, s.partition, s.batch.base_sequence, s.batch.records);
                    shared.finish(&s.batch.delivery, s.batch.records, s.batch.reserved, Err(kafka(c)))
                }
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
        shared.lock().reenqueue(s);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::client::producer::accumulator::{OpenBatch, PartitionState, Queued, State, TopicState};
    use crate::client::producer::config::ProducerConfig;
    use crate::client::producer::delivery::DeliveryHandle;

    fn test_shared(config: ProducerConfig) -> Arc<RecordAccumulator> {
        let mut state = State::default();
        let mut partition = PartitionState::default();
        partition.queue.push_back(Queued::Closed(OpenBatch::new(100, 0)));
        state.topics.push(TopicState { name: Arc::from("t"), partitions: vec![partition], sticky: Default::default() });
        state.pending_batches = 3;
        let accumulator = RecordAccumulator::new(config, 7, 0);
        *accumulator.lock() = state;
        Arc::new(accumulator)
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
        let handle = DeliveryHandle::new(Arc::clone(&s.batch.delivery), 0);
        Sender::new(Arc::clone(&shared)).retry_or_fail(s, ProducerError::Closed);
        assert!(matches!(handle.try_result(), Some(Err(ProducerError::Closed))));
        assert_eq!(shared.lock().pending_batches, 2);
    }
}
