//! The producer's batches (Kafka's `RecordAccumulator`): what [`Producer::send`] and the
//! [`Sender`] thread share.
//!
//! - Per partition: the open batch (records encoded straight into its buffer after a header
//!   placeholder, Kafka's `DefaultRecord.writeTo`: [`OpenBatch`]) and a queue of closed batches
//!   and batches put back for a retry ([`PartitionState`]).
//! - Append: a batch is closed at `batch.size` uncompressed bytes ([`State::append`],
//!   [`PartitionState::close_if_full`]); `buffer.memory` bounds the bytes waiting for delivery.
//! - Drain ([`RecordAccumulator::drain`]): per leader ready for another request, one sendable
//!   batch of each partition, up to `max.request.size`, after closing the batches whose
//!   `linger.ms` is over (all of them while flushing). A batch gets its partition's next
//!   sequence number when it is first drained and keeps it on every retry
//!   ([`State::reenqueue`] puts a retried batch back in sequence order).
//! - Completion ([`RecordAccumulator::finish`]): the batch's [`BatchDelivery`] is set, its
//!   buffer space released and the [`Counters`] counted.
//!
//! [`Producer::send`]: super::Producer::send
//! [`Sender`]: super::sender::Sender

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI16, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::config::ProducerConfig;
use super::delivery::{BatchDelivery, DeliveryHandle};
use super::error::{is_fatal_batch_error, ProducerError};
use super::partitioner::StickyPartition;
use crate::log::batch::record::{varlong_size, write_nullable, write_varint, write_varlong};
use crate::log::batch::{
    Attributes, BatchHeader, Compression, Header, ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
    NO_SEQUENCE,
};

/// The producer's counters, read as a [`ProducerStats`](super::ProducerStats).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) records_sent: AtomicU64,
    pub(super) records_acked: AtomicU64,
    pub(super) records_failed: AtomicU64,
    pub(super) batches_sent: AtomicU64,
    pub(super) requests_sent: AtomicU64,
    pub(super) batch_bytes_sent: AtomicU64,
    pub(super) retries: AtomicU64,
}

/// A batch being filled: the records encoded after a 61-byte header placeholder.
#[derive(Debug)]
pub(super) struct OpenBatch {
    pub(super) buf: Vec<u8>,
    pub(super) count: i32,
    pub(super) base_timestamp: i64,
    pub(super) max_timestamp: i64,
    pub(super) created: Instant,
    pub(super) reserved: usize,
    pub(super) delivery: Arc<BatchDelivery>,
}

impl OpenBatch {
    /// An empty batch to `partition` with room for `capacity` bytes.
    pub(super) fn new(capacity: usize, partition: i32) -> Self {
        let mut buf = Vec::with_capacity(capacity.max(HEADER_SIZE + 64));
        buf.resize(HEADER_SIZE, 0);
        OpenBatch {
            buf,
            count: 0,
            base_timestamp: 0,
            max_timestamp: i64::MIN,
            created: Instant::now(),
            reserved: 0,
            delivery: Arc::new(BatchDelivery::new(partition)),
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

    /// Writes header and CRC (compressing first): the batch bytes as sent. `producer` is the
    /// producer id, epoch and base sequence; `transactional` sets the transactional attribute.
    pub(super) fn build(
        mut self,
        compression: Compression,
        producer: (i64, i16, i32),
        transactional: bool,
    ) -> Result<Bytes, ProducerError> {
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
            attributes: Attributes::default().with_compression(compression).with_transactional(transactional),
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
pub(super) struct BuiltBatch {
    pub(super) bytes: Bytes,
    pub(super) records: i32,
    pub(super) base_sequence: i32,
    pub(super) attempts: u32,
    pub(super) created: Instant,
    pub(super) not_before: Option<Instant>,
    pub(super) reserved: usize,
    pub(super) delivery: Arc<BatchDelivery>,
}

#[derive(Debug)]
pub(super) enum Queued {
    /// Closed, not yet drained (no sequence yet).
    Closed(OpenBatch),
    /// Drained before and put back for a retry.
    Retry(BuiltBatch),
}

#[derive(Debug, Default)]
pub(super) struct PartitionState {
    pub(super) leader: i32,
    pub(super) open: Option<OpenBatch>,
    pub(super) queue: VecDeque<Queued>,
    pub(super) next_sequence: i32,
}

impl PartitionState {
    /// Closes the open batch when it holds records and `size` more bytes would take it past
    /// `batch_size`. Returns whether a batch was closed.
    pub(super) fn close_if_full(&mut self, size: usize, batch_size: usize) -> bool {
        if !self.open.as_ref().is_some_and(|b| b.count > 0 && b.buf.len() + size > batch_size) {
            return false;
        }
        let closed = self.open.take().expect("checked");
        self.queue.push_back(Queued::Closed(closed));
        true
    }
}

#[derive(Debug)]
pub(super) struct TopicState {
    pub(super) name: Arc<str>,
    pub(super) partitions: Vec<PartitionState>,
    /// Where unkeyed records go.
    pub(super) sticky: StickyPartition,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) topics: Vec<TopicState>,
    pub(super) topic_index: HashMap<String, usize>,
    pub(super) brokers: HashMap<i32, String>,
    pub(super) buffered_bytes: usize,
    pub(super) pending_batches: usize,
    pub(super) flushing: usize,
    pub(super) closing: bool,
    pub(super) sender_dead: bool,
    /// Round-robin start of the drain.
    drain_start: usize,
}

impl State {
    /// Appends a record of `size` bytes (its upper bound) to the open batch of partition
    /// `partition` of topic `topic`, opening a batch of `batch_size` (or the record's size) when
    /// there is none, and closes the batch once it reaches `batch_size`. Returns the record's
    /// handle and whether the sender has new work (a batch opened or closed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn append(
        &mut self,
        topic: usize,
        partition: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
        size: usize,
        batch_size: usize,
    ) -> (DeliveryHandle, bool) {
        let mut wake = false;
        let ps = &mut self.topics[topic].partitions[partition as usize];
        if ps.open.is_none() {
            ps.open = Some(OpenBatch::new(batch_size.max(size + HEADER_SIZE), partition));
            self.pending_batches += 1;
            wake = true;
        }
        let open = ps.open.as_mut().expect("just set");
        let index = open.append(timestamp, key, value, headers);
        open.reserved += size;
        self.buffered_bytes += size;
        let handle = DeliveryHandle::new(Arc::clone(&open.delivery), index);
        if open.buf.len() >= batch_size {
            let closed = ps.open.take().expect("checked");
            ps.queue.push_back(Queued::Closed(closed));
            wake = true;
        }
        (handle, wake)
    }

    /// Puts a batch back for a retry (Kafka's `RecordAccumulator.reenqueue`): in sequence order
    /// ahead of the batches not sent yet.
    pub(super) fn reenqueue(&mut self, s: Sent) {
        let ps = &mut self.topics[s.topic].partitions[s.partition as usize];
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

    /// Gives back the sequence numbers of a batch the broker refused (it wrote nothing), when no
    /// later batch of the partition got sequences yet (Kafka's
    /// `TransactionManager.adjustSequencesDueToFailedBatch`, its simple case): the next batch
    /// gets them, so it is not answered `OUT_OF_ORDER_SEQUENCE_NUMBER` for a gap.
    pub(super) fn rewind_sequence(&mut self, topic: usize, partition: i32, base_sequence: i32, records: i32) {
        if base_sequence < 0 {
            return;
        }
        let ps = &mut self.topics[topic].partitions[partition as usize];
        if ps.next_sequence == increment_sequence(base_sequence, records) {
            ps.next_sequence = base_sequence;
        }
    }

    /// Takes the batches not sent yet (open and closed, not those put back for a retry: they
    /// were sent and hold sequence numbers), as Kafka's `abortUndrainedBatches`, as (delivery,
    /// records, reserved bytes).
    pub(super) fn take_undrained(&mut self) -> Vec<(Arc<BatchDelivery>, i32, usize)> {
        let mut left = Vec::new();
        for t in &mut self.topics {
            for p in &mut t.partitions {
                if let Some(b) = p.open.take() {
                    left.push((b.delivery, b.count, b.reserved));
                }
                p.queue.retain_mut(|q| match q {
                    Queued::Closed(b) => {
                        left.push((Arc::clone(&b.delivery), b.count, b.reserved));
                        false
                    }
                    Queued::Retry(_) => true,
                });
            }
        }
        left
    }

    /// Takes every batch not delivered (Kafka's `abortIncompleteBatches`): open, closed and
    /// retried, as (delivery, records, reserved bytes).
    pub(super) fn take_incomplete(&mut self) -> Vec<(Arc<BatchDelivery>, i32, usize)> {
        let mut left = Vec::new();
        for t in &mut self.topics {
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
        left
    }
}

/// Kafka's `RecordAccumulator` and what the producer and its sender thread share besides: the
/// configuration, the producer id and epoch (set once: at start-up, or by `init_transactions`
/// before any record), the batches ([`State`], behind one lock), the condition variables they
/// wait on, the counters, the first delivery error and, for a transactional producer, the first
/// batch error the transaction has not seen yet.
pub(super) struct RecordAccumulator {
    pub(super) config: ProducerConfig,
    pub(super) producer_id: AtomicI64,
    pub(super) producer_epoch: AtomicI16,
    pub(super) state: Mutex<State>,
    /// The sender waits here for work.
    pub(super) wake_sender: Condvar,
    /// `send` waits here for buffer space, `flush` for completion.
    pub(super) progress: Condvar,
    pub(super) counters: Counters,
    pub(super) first_error: Mutex<Option<ProducerError>>,
    /// With `transactional.id`: a failed batch's error (a fatal one wins over the first), taken
    /// by the transaction manager (a leaf lock).
    pub(super) txn_batch_error: Mutex<Option<ProducerError>>,
}

impl RecordAccumulator {
    /// An accumulator with no topics yet.
    pub(super) fn new(config: ProducerConfig, producer_id: i64, producer_epoch: i16) -> Self {
        RecordAccumulator {
            config,
            producer_id: AtomicI64::new(producer_id),
            producer_epoch: AtomicI16::new(producer_epoch),
            state: Mutex::new(State::default()),
            wake_sender: Condvar::new(),
            progress: Condvar::new(),
            counters: Counters::default(),
            first_error: Mutex::new(None),
            txn_batch_error: Mutex::new(None),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes a batch and releases its buffer space.
    pub(super) fn finish(
        &self,
        delivery: &Arc<BatchDelivery>,
        records: i32,
        reserved: usize,
        result: Result<i64, ProducerError>,
    ) {
        let counter = if result.is_ok() { &self.counters.records_acked } else { &self.counters.records_failed };
        counter.fetch_add(records as u64, Ordering::Relaxed);
        if let Err(e) = &result {
            self.first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| e.clone());
            if self.config.transactional_id.is_some() {
                let mut txn = self.txn_batch_error.lock().unwrap_or_else(|e| e.into_inner());
                if txn.as_ref().is_none_or(|old| !is_fatal_batch_error(old) && is_fatal_batch_error(e)) {
                    *txn = Some(e.clone());
                }
            }
        }
        delivery.complete(result);
        let mut st = self.lock();
        st.buffered_bytes = st.buffered_bytes.saturating_sub(reserved);
        st.pending_batches = st.pending_batches.saturating_sub(1);
        drop(st);
        self.progress.notify_all();
    }

    /// Sends every batch now (ignoring `linger.ms`) and waits until every batch queued before
    /// (and during) the call is delivered or failed, as Kafka's `flush`, up to `deadline`.
    ///
    /// Errors: [`ProducerError::Closed`] when the sender thread is gone with records
    /// undelivered; [`ProducerError::Timeout`] (`what`) when `deadline` passed first.
    pub(super) fn flush_until(&self, deadline: Option<Instant>, what: &'static str) -> Result<(), ProducerError> {
        let mut st = self.lock();
        st.flushing += 1;
        self.wake_sender.notify_one();
        let start = Instant::now();
        let mut timed_out = false;
        while st.pending_batches > 0 && !st.sender_dead {
            match deadline {
                None => st = self.progress.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        timed_out = true;
                        break;
                    }
                    st = self.progress.wait_timeout(st, d - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
        st.flushing -= 1;
        if timed_out {
            return Err(ProducerError::Timeout { what, timeout_ms: start.elapsed().as_millis() as u64 });
        }
        if st.pending_batches > 0 {
            return Err(ProducerError::Closed);
        }
        Ok(())
    }

    /// Fails the batches not sent yet with [`ProducerError::TransactionAborted`]
    /// ([`State::take_undrained`]; Kafka's `abortUndrainedBatches` when a transaction aborts).
    pub(super) fn abort_undrained(&self) {
        let left = self.lock().take_undrained();
        for (d, n, r) in left {
            self.finish(&d, n, r, Err(ProducerError::TransactionAborted));
        }
    }

    /// Takes, per leader `node_ready` accepts (room in flight), one sendable batch of each
    /// partition (up to `max.request.size`), closing batches whose `linger.ms` is over (all of
    /// them while flushing). Fresh batches get their sequence numbers here. Returns the work and
    /// the next time something becomes due.
    pub(super) fn drain(
        &self,
        st: &mut State,
        now: Instant,
        node_ready: impl Fn(i32) -> bool,
    ) -> (HashMap<i32, NodeWork>, Option<Instant>) {
        let config = &self.config;
        let linger = Duration::from_millis(config.linger_ms);
        let flush = st.flushing > 0 || st.closing;
        let idempotent = self.producer_id.load(Ordering::Acquire) >= 0;
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
                if !node_ready(leader) {
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
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from `i32::MAX` to 0.
pub(super) fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// A built batch of a partition: drained for a retry, or in a request in flight.
pub(super) struct Sent {
    pub(super) topic: usize,
    pub(super) topic_name: Arc<str>,
    pub(super) partition: i32,
    pub(super) batch: BuiltBatch,
}

/// A batch drained for the first time: (topic index, name, partition, batch, base sequence).
pub(super) type Fresh = (usize, Arc<str>, i32, OpenBatch, i32);

/// Work of one node: retried batches, fresh batches to build, request bytes so far.
pub(super) type NodeWork = (Vec<Sent>, Vec<Fresh>, usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_last_batch_gives_its_sequences_back() {
        let mut st = State::default();
        let partition = PartitionState { next_sequence: 15, ..Default::default() };
        st.topics.push(TopicState { name: Arc::from("t"), partitions: vec![partition], sticky: Default::default() });
        st.rewind_sequence(0, 0, 5, 5);
        assert_eq!(st.topics[0].partitions[0].next_sequence, 15, "a later batch took 10..15: kept");
        st.rewind_sequence(0, 0, 10, 5);
        assert_eq!(st.topics[0].partitions[0].next_sequence, 10);
        st.rewind_sequence(0, 0, -1, 5);
        assert_eq!(st.topics[0].partitions[0].next_sequence, 10, "no sequence (not idempotent)");
    }

    #[test]
    fn sequences_wrap_as_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX - 1, 2), 0);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
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
            let bytes = c.build(codec, (7, 1, 42), codec == Compression::Gzip).unwrap();
            let batch = crate::log::batch::RecordBatch::parse(&bytes).unwrap();
            batch.verify_crc().unwrap();
            let h = batch.header();
            assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence, h.records_count), (7, 1, 42, 2));
            assert_eq!((h.base_timestamp, h.max_timestamp, h.last_offset_delta), (1_000, 1_000, 1));
            assert_eq!(h.attributes.is_transactional(), codec == Compression::Gzip, "{codec}");
            let recs = batch.records().unwrap();
            let recs = recs.to_vec().unwrap();
            assert_eq!(recs[0].headers[0].key, b"h");
            assert_eq!((recs[1].timestamp, recs[1].value.map(<[u8]>::len)), (990, Some(300)));
        }
    }
}
