//! The fetch half of the consumer (Kafka's `Fetcher` / `AbstractFetch` and `CompletedFetch`):
//! per-partition fetch state, one Fetch request in flight per broker connection, and the
//! decoding of a partition's record set into [`ConsumerRecord`]s.
//!
//! Positions: a partition has a *position* (the offset of the next record [`poll`] hands out,
//! what `position()` returns and what a commit stores) and a *fetch position* (the offset the
//! next Fetch asks for). They differ while fetched records wait in the buffer: the fetch that
//! follows is sent before those records are handed out, so fetching overlaps processing.
//!
//! Decoding a partition ([`parse_records`]) follows Kafka's `CompletedFetch`:
//!
//! * entries of any magic and codec are decoded by [`MixedBatches`], CRCs checked when
//!   `check.crcs` is set;
//! * a batch whose last offset is below the fetch offset is skipped, and in the first batch
//!   the records below the fetch offset (the broker returns whole batches);
//! * the fetch position moves to `last_offset + 1` of every complete batch, also past control
//!   batches and batches compaction emptied (their records are not delivered), so compaction
//!   gaps are crossed;
//! * a last batch cut by the response's size limit is dropped and fetched again;
//! * `isolation.level=read_committed`: records of aborted transactions are dropped, as
//!   `CompletedFetch.nextFetchedRecord` does with the response's aborted transactions.
//!
//! [`poll`]: super::Consumer::poll

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::AbortedTransaction;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, RequestKind, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::drain::{CrcCheck, DrainedBatch, DrainedPartition};
use super::error::ConsumerError;
use super::record::ConsumerRecord;
use crate::client::assignor::TopicPartition;
use crate::client::connection::KafkaConnection;
use crate::log::batch::mixed::{DecodeOptions, MixedBatches};

/// `OFFSET_OUT_OF_RANGE`.
pub(crate) const OFFSET_OUT_OF_RANGE: i16 = 1;

/// The records of one partition of a Fetch response, decoded by [`parse_records`].
#[derive(Debug, Default)]
pub struct ParsedRecords {
    /// The records at or above the fetch offset, control and aborted records left out.
    pub records: Vec<ConsumerRecord>,
    /// The next fetch offset: `last_offset + 1` of the last complete batch (the fetch offset
    /// when there was none).
    pub next_offset: i64,
    /// Whether the record set ended with a batch cut by the response's size limit (dropped).
    pub partial_tail: bool,
}

/// Decodes the record set `bytes` of `topic`-`partition` fetched from `fetch_offset` (see the
/// module docs). `aborted` is the response's aborted transactions, given only for
/// `read_committed`.
///
/// Errors: [`ConsumerError::Corrupt`] when the first entry that is not skipped fails to decode
/// (a CRC mismatch, an unknown codec, ...). Records before a corrupt entry are returned and the
/// position stops at it, so the next fetch reports the error.
pub fn parse_records(
    topic: &Arc<str>,
    partition: i32,
    fetch_offset: i64,
    bytes: Bytes,
    check_crcs: bool,
    aborted: Option<&[AbortedTransaction]>,
) -> Result<ParsedRecords, ConsumerError> {
    let options = DecodeOptions { verify_crc: check_crcs, ..DecodeOptions::default() };
    let mut batches = MixedBatches::shared(bytes, options);
    let mut out = ParsedRecords { records: Vec::new(), next_offset: fetch_offset, partial_tail: false };
    // read_committed: aborted transactions by first offset; producers inside an aborted one.
    let mut pending: BinaryHeap<Reverse<(i64, i64)>> =
        aborted.unwrap_or(&[]).iter().map(|a| Reverse((a.first_offset, a.producer_id.0))).collect();
    let mut aborting: HashSet<i64> = HashSet::new();
    for batch in &mut batches {
        let batch = match batch {
            Ok(b) => b,
            Err(source) if out.records.is_empty() => {
                return Err(ConsumerError::Corrupt {
                    topic: topic.to_string(),
                    partition,
                    offset: out.next_offset,
                    source,
                })
            }
            Err(_) => return Ok(out),
        };
        if batch.last_offset < out.next_offset {
            continue;
        }
        while let Some(Reverse((first, pid))) = pending.peek().copied() {
            if first > batch.last_offset {
                break;
            }
            aborting.insert(pid);
            pending.pop();
        }
        let next = batch.next_offset();
        if batch.is_control {
            // An ABORT marker (control record key: version i16, type i16 = 0) ends the
            // producer's aborted transaction.
            let abort_marker = batch
                .records
                .first()
                .and_then(|r| r.key.as_ref())
                .is_some_and(|k| k.len() >= 4 && i16::from_be_bytes([k[2], k[3]]) == 0);
            if abort_marker {
                aborting.remove(&batch.producer_id);
            }
        } else if !(batch.is_transactional && aborting.contains(&batch.producer_id)) {
            for r in batch.records {
                if r.offset < out.next_offset {
                    continue;
                }
                out.records.push(ConsumerRecord {
                    topic: Arc::clone(topic),
                    partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    timestamp_type: r.timestamp_type,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                });
            }
        }
        out.next_offset = next;
    }
    out.partial_tail = batches.partial_tail();
    Ok(out)
}

/// What a partition's fetching is at.
#[derive(Clone, Debug)]
pub(crate) struct PartitionState {
    /// The topic name shared by the partition's records.
    pub topic: Arc<str>,
    /// Offset of the next record handed out; `None` until initialized (committed offset or
    /// `auto.offset.reset`).
    pub position: Option<i64>,
    /// Offset the next Fetch asks for.
    pub fetch_position: Option<i64>,
    /// Paused by the application.
    pub paused: bool,
    /// The high watermark of the last Fetch response.
    pub high_watermark: Option<i64>,
    /// The last stable offset of the last Fetch response (`None` before one, or when the
    /// broker sent -1, as Fetch v0-v3 brokers do).
    pub last_stable_offset: Option<i64>,
    /// The position must be reset by `auto.offset.reset` (no committed offset, or out of range).
    pub needs_reset: bool,
    /// Changed (from the fetcher's counter) by every seek, pause and (re)assignment: a Fetch
    /// answer for an older epoch is stale even when its offset matches again (a seek back to
    /// the offset an in-flight request asked for).
    pub epoch: u64,
}

impl PartitionState {
    pub(crate) fn new(topic: Arc<str>) -> Self {
        PartitionState {
            topic,
            position: None,
            fetch_position: None,
            paused: false,
            high_watermark: None,
            last_stable_offset: None,
            needs_reset: false,
            epoch: 0,
        }
    }
}

/// Records of one partition waiting to be handed out.
#[derive(Debug)]
struct Chunk {
    tp: TopicPartition,
    records: VecDeque<ConsumerRecord>,
    /// Drain mode: the partition's batches (and no records).
    batches: VecDeque<DrainedBatch>,
    /// The position once every record of the chunk was handed out.
    next_offset: i64,
}

/// A Fetch in flight on a node's connection.
#[derive(Debug)]
struct InFlight {
    correlation_id: i32,
    version: i16,
    /// The fetch offset asked for each partition, and the partition's epoch then.
    sent: HashMap<TopicPartition, (i64, u64)>,
}

/// One broker's fetch connection.
#[derive(Debug)]
struct NodeConn {
    conn: KafkaConnection,
    in_flight: Option<InFlight>,
    /// Drain mode: the connection's batches so far (for [`CrcCheck::OneIn`]).
    batches: u64,
}

/// Fetch settings (Kafka's names in the docs of [`super::ConsumerConfig`]).
#[derive(Clone, Debug)]
pub(crate) struct FetchSettings {
    pub client_id: String,
    pub min_bytes: i32,
    pub max_wait_ms: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub check_crcs: bool,
    pub read_committed: bool,
    pub request_timeout: Duration,
    /// `fetchbench.fetch.mode=drain`: the CRC checks of the drain; `None`: decode records.
    pub drain: Option<CrcCheck>,
}

/// The fetch state of every assigned partition and the fetch connections.
#[derive(Debug)]
pub(crate) struct Fetcher {
    pub(crate) partitions: BTreeMap<TopicPartition, PartitionState>,
    settings: FetchSettings,
    buffer: VecDeque<Chunk>,
    buffered: usize,
    nodes: HashMap<i32, NodeConn>,
    /// A response named a partition this broker does not lead (or an unknown one).
    pub(crate) metadata_stale: bool,
    /// The last [`PartitionState::epoch`] handed out.
    epochs: u64,
}

impl Fetcher {
    pub(crate) fn new(settings: FetchSettings) -> Self {
        Fetcher {
            partitions: BTreeMap::new(),
            settings,
            buffer: VecDeque::new(),
            buffered: 0,
            nodes: HashMap::new(),
            metadata_stale: false,
            epochs: 0,
        }
    }

    /// Records waiting in the buffer.
    pub(crate) fn buffered(&self) -> usize {
        self.buffered
    }

    /// Whether chunks (possibly without records: position moves) wait to be handed out.
    pub(crate) fn has_chunks(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// Whether any Fetch is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.nodes.values().any(|n| n.in_flight.is_some())
    }

    /// Adds partitions (without a position).
    pub(crate) fn add(&mut self, tp: TopicPartition) {
        let topic: Arc<str> = Arc::from(tp.0.as_str());
        self.epochs += 1;
        let epoch = self.epochs;
        self.partitions.entry(tp).or_insert_with(|| PartitionState { epoch, ..PartitionState::new(topic) });
    }

    /// Removes a partition and its buffered records.
    pub(crate) fn remove(&mut self, tp: &TopicPartition) {
        self.partitions.remove(tp);
        self.drop_buffered(tp);
    }

    /// Drops the buffered records of `tp` (seek, pause, revocation).
    pub(crate) fn drop_buffered(&mut self, tp: &TopicPartition) {
        let mut dropped = 0;
        self.buffer.retain(|c| {
            if &c.tp == tp {
                dropped += c.len();
                false
            } else {
                true
            }
        });
        self.buffered -= dropped;
    }

    /// Sets the position and fetch position of `tp` (seek), dropping its buffered records.
    pub(crate) fn seek(&mut self, tp: &TopicPartition, offset: i64) {
        self.drop_buffered(tp);
        self.epochs += 1;
        if let Some(s) = self.partitions.get_mut(tp) {
            s.position = Some(offset);
            s.fetch_position = Some(offset);
            s.needs_reset = false;
            s.epoch = self.epochs;
        }
    }

    /// Pauses `tp`: its buffered records are dropped and fetching resumes from its position.
    pub(crate) fn pause(&mut self, tp: &TopicPartition) {
        self.drop_buffered(tp);
        self.epochs += 1;
        if let Some(s) = self.partitions.get_mut(tp) {
            s.paused = true;
            s.fetch_position = s.position;
            s.epoch = self.epochs;
        }
    }

    /// Hands out up to `max` records, moving positions (also past chunks without records).
    pub(crate) fn drain(&mut self, max: usize) -> Vec<ConsumerRecord> {
        let mut out = Vec::with_capacity(max.min(self.buffered));
        while let Some(chunk) = self.buffer.front_mut() {
            let Some(state) = self.partitions.get_mut(&chunk.tp) else {
                let c = self.buffer.pop_front().expect("front exists");
                self.buffered -= c.len();
                continue;
            };
            let take = (max - out.len()).min(chunk.records.len());
            if take > 0 {
                out.extend(chunk.records.drain(..take));
                self.buffered -= take;
                state.position = Some(out.last().expect("took records").offset + 1);
            }
            if chunk.records.is_empty() {
                state.position = Some(chunk.next_offset);
                self.buffer.pop_front();
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// Drain mode: hands out the batches of buffered chunks until they hold at least `max`
    /// records (whole chunks; a chunk is one partition of one response), moving positions to
    /// each chunk's next offset.
    pub(crate) fn drain_batches(&mut self, max: usize) -> Vec<DrainedBatch> {
        let mut out = Vec::new();
        let mut records = 0;
        while records < max {
            let Some(chunk) = self.buffer.pop_front() else { break };
            self.buffered -= chunk.len();
            let Some(state) = self.partitions.get_mut(&chunk.tp) else { continue };
            state.position = Some(chunk.next_offset);
            records += chunk.len();
            out.extend(chunk.batches);
        }
        out
    }

    /// Sends a Fetch to every leader without one in flight, for its fetchable partitions
    /// (assigned, not paused, with a fetch position). `leaders` maps partitions to node ids,
    /// `brokers` node ids to addresses.
    pub(crate) fn send_fetches(
        &mut self,
        leaders: &HashMap<TopicPartition, i32>,
        brokers: &HashMap<i32, String>,
    ) -> Result<(), ConsumerError> {
        let mut by_node: BTreeMap<i32, Vec<(&TopicPartition, i64, u64)>> = BTreeMap::new();
        for (tp, s) in &self.partitions {
            let (false, Some(offset)) = (s.paused, s.fetch_position) else { continue };
            match leaders.get(tp) {
                Some(&node) => by_node.entry(node).or_default().push((tp, offset, s.epoch)),
                None => self.metadata_stale = true,
            }
        }
        for (node, parts) in by_node {
            if self.nodes.get(&node).is_some_and(|n| n.in_flight.is_some()) {
                continue;
            }
            if !self.nodes.contains_key(&node) {
                let Some(addr) = brokers.get(&node) else {
                    self.metadata_stale = true;
                    continue;
                };
                let conn =
                    KafkaConnection::connect(addr.as_str(), &self.settings.client_id, self.settings.request_timeout)?;
                self.nodes.insert(node, NodeConn { conn, in_flight: None, batches: 0 });
            }
            let n = self.nodes.get_mut(&node).expect("inserted");
            let version = n.conn.version(ApiKey::Fetch, (4, 12))?;
            let mut topics: Vec<FetchTopic> = Vec::new();
            let mut sent = HashMap::new();
            for (tp, offset, state_epoch) in parts {
                if topics.last().is_none_or(|t| t.topic.as_str() != tp.0) {
                    topics.push(FetchTopic::default().with_topic(TopicName(StrBytes::from_string(tp.0.clone()))));
                }
                topics.last_mut().expect("pushed").partitions.push(
                    FetchPartition::default()
                        .with_partition(tp.1)
                        .with_fetch_offset(offset)
                        .with_current_leader_epoch(-1)
                        .with_last_fetched_epoch(-1)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(self.settings.partition_max_bytes),
                );
                sent.insert(tp.clone(), (offset, state_epoch));
            }
            let request = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(self.settings.max_wait_ms)
                .with_min_bytes(self.settings.min_bytes)
                .with_max_bytes(self.settings.max_bytes)
                .with_isolation_level(i8::from(self.settings.read_committed))
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(topics);
            let correlation_id = n.conn.send(ApiKey::Fetch, version, RequestKind::Fetch(request))?;
            n.in_flight = Some(InFlight { correlation_id, version, sent });
        }
        Ok(())
    }

    /// Waits until `deadline` for a Fetch response; decodes every response that arrived into
    /// the buffer. Returns whether one arrived.
    ///
    /// Errors: connection errors (the connection is dropped, its partitions fetched again on a
    /// new one), [`ConsumerError::Corrupt`], [`ConsumerError::OffsetOutOfRange`] under
    /// `auto.offset.reset=none`, other partition errors as [`ConsumerError::Kafka`].
    pub(crate) fn wait(&mut self, deadline: Instant, reset_none: bool) -> Result<bool, ConsumerError> {
        let waiting: Vec<i32> = self.nodes.iter().filter(|(_, n)| n.in_flight.is_some()).map(|(&id, _)| id).collect();
        if waiting.is_empty() {
            return Ok(false);
        }
        let slice = if waiting.len() == 1 { None } else { Some(Duration::from_millis(5)) };
        loop {
            for &node in &waiting {
                let now = Instant::now();
                let left = deadline.saturating_duration_since(now);
                let n = self.nodes.get_mut(&node).expect("waiting node");
                let timeout = slice.map_or(left, |s| s.min(left));
                let ready = match n.conn.wait_readable(timeout, Some(self.settings.request_timeout)) {
                    Ok(r) => r,
                    Err(e) => {
                        self.nodes.remove(&node);
                        return Err(e.into());
                    }
                };
                if ready {
                    let flight = n.in_flight.take().expect("in flight");
                    let answer = match self.settings.drain {
                        None => match n.conn.receive(ApiKey::Fetch, flight.version, flight.correlation_id) {
                            Ok(ResponseKind::Fetch(r)) => Ok(Answer::decoded(r)),
                            Ok(_) => unreachable!("decode_response returns the requested API"),
                            Err(e) => Err(e),
                        },
                        Some(crc) => n
                            .conn
                            .receive_fetch_drained(flight.version, flight.correlation_id, crc, &mut n.batches)
                            .map(Answer::drained),
                    };
                    let answer = match answer {
                        Ok(a) => a,
                        Err(e) => {
                            self.nodes.remove(&node);
                            return Err(e.into());
                        }
                    };
                    self.complete(flight, answer, reset_none)?;
                    return Ok(true);
                }
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }

    /// Decodes (or, in drain mode, selects the batches of) one Fetch response into the buffer.
    fn complete(&mut self, flight: InFlight, answer: Answer, reset_none: bool) -> Result<(), ConsumerError> {
        if answer.error_code != 0 {
            return Err(ConsumerError::Kafka { context: "Fetch".into(), code: answer.error_code });
        }
        let mut out_of_range = Vec::new();
        let mut first_error = None;
        for (topic, partitions) in answer.topics {
            for p in partitions {
                let tp = (topic.clone(), p.partition_index);
                let Some(&(sent_offset, sent_epoch)) = flight.sent.get(&tp) else { continue };
                let Some(state) = self.partitions.get_mut(&tp) else { continue };
                // Seeked, paused or reassigned since the request was sent: stale data.
                if state.paused || state.fetch_position != Some(sent_offset) || state.epoch != sent_epoch {
                    continue;
                }
                match p.error_code {
                    0 => {}
                    OFFSET_OUT_OF_RANGE => {
                        if reset_none {
                            out_of_range.push((tp, sent_offset));
                        } else {
                            tracing::info!(
                                "fetch offset {sent_offset} of {}-{} is out of range; resetting",
                                tp.0,
                                tp.1
                            );
                            state.position = None;
                            state.fetch_position = None;
                            state.needs_reset = true;
                            self.drop_buffered(&tp);
                        }
                        continue;
                    }
                    // NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
                    // FENCED/UNKNOWN_LEADER_EPOCH, REPLICA_NOT_AVAILABLE: refresh and retry.
                    3 | 5 | 6 | 9 | 74 | 75 | 100 => {
                        self.metadata_stale = true;
                        continue;
                    }
                    code => {
                        first_error.get_or_insert(ConsumerError::Kafka {
                            context: format!("Fetch {}-{} at offset {sent_offset}", tp.0, tp.1),
                            code,
                        });
                        continue;
                    }
                }
                state.high_watermark = Some(p.high_watermark);
                state.last_stable_offset = (p.last_stable_offset >= 0).then_some(p.last_stable_offset);
                let read_committed = self.settings.read_committed;
                let chunk = match p.payload {
                    Payload::Records { bytes, aborted } => {
                        let aborted = if read_committed { aborted.as_deref() } else { None };
                        let parsed =
                            parse_records(&state.topic, tp.1, sent_offset, bytes, self.settings.check_crcs, aborted)?;
                        Chunk {
                            tp,
                            records: parsed.records.into(),
                            batches: VecDeque::new(),
                            next_offset: parsed.next_offset,
                        }
                    }
                    Payload::Drained(d) => {
                        let (batches, next_offset) =
                            select_batches(&state.topic, tp.1, sent_offset, d, read_committed)?;
                        Chunk { tp, records: VecDeque::new(), batches: batches.into(), next_offset }
                    }
                };
                if chunk.next_offset == sent_offset && chunk.is_empty() {
                    continue;
                }
                state.fetch_position = Some(chunk.next_offset);
                self.buffered += chunk.len();
                self.buffer.push_back(chunk);
            }
        }
        if !out_of_range.is_empty() {
            return Err(ConsumerError::OffsetOutOfRange { partitions: out_of_range });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Chunk {
    /// Records in the chunk: its records, or its batches' records from their first offsets.
    fn len(&self) -> usize {
        self.records.len() + self.batches.iter().map(|b| b.records_from_first() as usize).sum::<usize>()
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.batches.is_empty()
    }
}

/// A Fetch response as [`Fetcher::complete`] takes it: decoded by kafka-protocol, or drained.
struct Answer {
    error_code: i16,
    topics: Vec<(String, Vec<PartitionAnswer>)>,
}

struct PartitionAnswer {
    partition_index: i32,
    error_code: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    payload: Payload,
}

enum Payload {
    Records { bytes: Bytes, aborted: Option<Vec<AbortedTransaction>> },
    Drained(DrainedPartition),
}

impl Answer {
    fn decoded(r: kafka_protocol::messages::FetchResponse) -> Answer {
        let topics = r
            .responses
            .into_iter()
            .map(|t| {
                let parts = t
                    .partitions
                    .into_iter()
                    .map(|p| PartitionAnswer {
                        partition_index: p.partition_index,
                        error_code: p.error_code,
                        high_watermark: p.high_watermark,
                        last_stable_offset: p.last_stable_offset,
                        payload: Payload::Records {
                            bytes: p.records.unwrap_or_default(),
                            aborted: p.aborted_transactions,
                        },
                    })
                    .collect();
                (t.topic.to_string(), parts)
            })
            .collect();
        Answer { error_code: r.error_code, topics }
    }

    fn drained(r: super::drain::DrainedResponse) -> Answer {
        let topics = r
            .topics
            .into_iter()
            .map(|(topic, parts)| {
                let parts = parts
                    .into_iter()
                    .map(|p| PartitionAnswer {
                        partition_index: p.partition,
                        error_code: p.error_code,
                        high_watermark: p.high_watermark,
                        last_stable_offset: p.last_stable_offset,
                        payload: Payload::Drained(p),
                    })
                    .collect();
                (topic, parts)
            })
            .collect();
        Answer { error_code: r.error_code, topics }
    }
}

/// The batches of a drained partition fetched from `fetch_offset` that a poll hands out, and
/// the next fetch offset: the rules of [`parse_records`] applied to batch headers (batches
/// below the fetch offset skipped, control batches and, under `read_committed`, the batches of
/// aborted transactions not handed out but crossed, a cut last batch fetched again).
///
/// Errors: [`ConsumerError::Corrupt`] when the first batch not skipped failed its check (CRC,
/// magic, header); after batches handed out, the position stops at it and the next fetch
/// reports it.
pub fn select_batches(
    topic: &Arc<str>,
    partition: i32,
    fetch_offset: i64,
    d: DrainedPartition,
    read_committed: bool,
) -> Result<(Vec<DrainedBatch>, i64), ConsumerError> {
    let mut out = Vec::new();
    let mut next_offset = fetch_offset;
    let mut pending: BinaryHeap<Reverse<(i64, i64)>> = if read_committed {
        d.aborted.iter().map(|&(pid, first)| Reverse((first, pid))).collect()
    } else {
        BinaryHeap::new()
    };
    let mut aborting: HashSet<i64> = HashSet::new();
    for b in &d.batches {
        let h = &b.header;
        if h.last_offset() < next_offset {
            continue;
        }
        while let Some(Reverse((first, pid))) = pending.peek().copied() {
            if first > h.last_offset() {
                break;
            }
            aborting.insert(pid);
            pending.pop();
        }
        if h.attributes.is_control() {
            if b.control_type == Some(0) {
                aborting.remove(&h.producer_id);
            }
        } else if !(h.attributes.is_transactional() && aborting.contains(&h.producer_id)) {
            out.push(DrainedBatch {
                topic: Arc::clone(topic),
                partition,
                base_offset: h.base_offset,
                first_offset: h.base_offset.max(next_offset),
                last_offset: h.last_offset(),
                records: h.records_count.max(0) as u32,
                bytes: h.total_size() as u32,
                crc_checked: b.crc_checked,
            });
        }
        next_offset = h.next_offset();
    }
    if let Some(source) = d.error {
        if out.is_empty() {
            return Err(ConsumerError::Corrupt { topic: topic.to_string(), partition, offset: next_offset, source });
        }
    }
    Ok((out, next_offset))
}
