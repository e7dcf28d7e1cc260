//! The transactional producer's state (Kafka's `TransactionManager`, KIP-98): the state machine
//! ([`TransactionState`]), the transaction coordinator and its requests, and which answers are
//! retried, fatal or abortable ([`classify`]).
//!
//! - `init_transactions`: FindCoordinator (key type 1, the transactional id), then
//!   InitProducerId with the id and `transaction.timeout.ms`: the producer id and epoch of
//!   every later batch (the coordinator bumps the epoch, fencing an older producer with the id).
//! - A partition joins the transaction before its first record is queued: AddPartitionsToTxn
//!   (v0-3) is sent from `send`, and the record is appended only after it succeeded, so no batch
//!   of a partition not in the transaction is ever sent (Kafka sends it when the batch drains).
//! - `send_offsets_to_transaction`: AddOffsetsToTxn to the transaction coordinator, then
//!   FindCoordinator (key type 0, the group) and TxnOffsetCommit to the group coordinator.
//! - `commit_transaction` / `abort_transaction`: the accumulator is flushed (abort first
//!   discards the batches not sent yet, as Kafka's `abortUndrainedBatches`), then EndTxn; a
//!   transaction that added nothing ends without EndTxn, as in Kafka.
//! - Retried until the call's deadline: `COORDINATOR_LOAD_IN_PROGRESS`,
//!   `CONCURRENT_TRANSACTIONS` (and `UNKNOWN_TOPIC_OR_PARTITION` for AddPartitionsToTxn and
//!   TxnOffsetCommit); `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE` and a broken connection
//!   after a new FindCoordinator. Fatal (`FATAL_ERROR`: every later call fails with the error):
//!   `PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`, `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`,
//!   `INVALID_TXN_STATE`, `FENCED_INSTANCE_ID` and unexpected codes. Abortable
//!   (`ABORTABLE_ERROR`: the transaction must be aborted): `UNKNOWN_PRODUCER_ID`,
//!   `INVALID_PRODUCER_ID_MAPPING`, `TRANSACTION_ABORTABLE`, the group's and topics'
//!   authorization failures, `UNKNOWN_MEMBER_ID` / `ILLEGAL_GENERATION` of TxnOffsetCommit, and
//!   any failed batch (fatal when the batch failed with a fencing or authorization error).
//! - A call that times out leaves the state as it is: calling it again resumes it (Kafka's
//!   `TimeoutException` from `initTransactions` / `commitTransaction` / `abortTransaction`).
//!
//! Not implemented: the epoch bump after an abortable error of an idempotent producer
//! (KIP-360), transaction version 2 (KIP-890: EndTxn v5, implicit AddPartitionsToTxn through
//! Produce v12), two-phase commit (KIP-939).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, InitProducerIdRequest, ProducerId, RequestKind,
    ResponseKind, TopicName, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::accumulator::RecordAccumulator;
use super::error::{code, is_fatal_batch_error, ProducerError};
pub use super::txn_state::TransactionState;
use crate::client::connection::KafkaConnection;

/// The consumer group whose offsets [`Producer::send_offsets_to_transaction`] commits (Kafka's
/// `ConsumerGroupMetadata`). With the generation and member id of a group member, the group
/// coordinator fences a zombie member's commit (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`);
/// [`ConsumerGroupMetadata::new`] has only the group id (generation -1, no member), as Kafka's
/// deprecated `sendOffsetsToTransaction(offsets, groupId)`.
///
/// [`Producer::send_offsets_to_transaction`]: super::Producer::send_offsets_to_transaction
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// The member's generation id, -1 for none.
    pub generation_id: i32,
    /// The member id, empty for none.
    pub member_id: String,
    /// `group.instance.id` (KIP-345), when static.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Only the group id: generation -1, no member id, no instance id.
    pub fn new(group_id: &str) -> Self {
        ConsumerGroupMetadata {
            group_id: group_id.to_string(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }
}

/// The transaction requests (for [`classify`] and the errors' names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TxnApi {
    FindCoordinator,
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    TxnOffsetCommit,
    EndTxn,
}

impl TxnApi {
    fn name(self) -> &'static str {
        match self {
            TxnApi::FindCoordinator => "FindCoordinator",
            TxnApi::InitProducerId => "InitProducerId",
            TxnApi::AddPartitionsToTxn => "AddPartitionsToTxn",
            TxnApi::AddOffsetsToTxn => "AddOffsetsToTxn",
            TxnApi::TxnOffsetCommit => "TxnOffsetCommit",
            TxnApi::EndTxn => "EndTxn",
        }
    }
}

/// What to do with an answer's error code (Kafka's `TxnRequestHandler.handleResponse` of each
/// request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// No error.
    Done,
    /// Send it again after a backoff.
    Retry,
    /// Find the coordinator again, then send it again.
    Relookup,
    /// The transaction must be aborted (`ABORTABLE_ERROR`).
    Abortable,
    /// The producer is unusable (`FATAL_ERROR`).
    Fatal,
    /// Not an error for this request (`OPERATION_NOT_ATTEMPTED` of a batched answer).
    Ignore,
}

/// How Kafka's `TransactionManager` handles error `code` in an answer to `api`: see the module
/// docs. Unexpected codes are fatal, as Kafka's "Unexpected error in ...Response".
pub(super) fn classify(api: TxnApi, code: i16) -> Action {
    use code::*;
    use TxnApi::*;
    match (api, code) {
        (_, 0) => Action::Done,
        (_, PRODUCER_FENCED | INVALID_PRODUCER_EPOCH | TRANSACTIONAL_ID_AUTHORIZATION_FAILED) => Action::Fatal,
        (FindCoordinator, COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS) => Action::Retry,
        (FindCoordinator, GROUP_AUTHORIZATION_FAILED) => Action::Abortable,
        (_, COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR) => Action::Relookup,
        (TxnOffsetCommit, REQUEST_TIMED_OUT) => Action::Relookup,
        (TxnOffsetCommit, COORDINATOR_LOAD_IN_PROGRESS | UNKNOWN_TOPIC_OR_PARTITION) => Action::Retry,
        (TxnOffsetCommit, CONCURRENT_TRANSACTIONS) => Action::Retry,
        (TxnOffsetCommit, UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION | GROUP_AUTHORIZATION_FAILED) => Action::Abortable,
        (TxnOffsetCommit, FENCED_INSTANCE_ID) => Action::Fatal,
        (_, COORDINATOR_LOAD_IN_PROGRESS | CONCURRENT_TRANSACTIONS) => Action::Retry,
        (AddPartitionsToTxn, UNKNOWN_TOPIC_OR_PARTITION) => Action::Retry,
        (AddPartitionsToTxn, OPERATION_NOT_ATTEMPTED) => Action::Ignore,
        (AddPartitionsToTxn, TOPIC_AUTHORIZATION_FAILED) => Action::Abortable,
        (AddOffsetsToTxn, GROUP_AUTHORIZATION_FAILED) => Action::Abortable,
        (
            AddPartitionsToTxn | AddOffsetsToTxn | TxnOffsetCommit | EndTxn,
            UNKNOWN_PRODUCER_ID | INVALID_PRODUCER_ID_MAPPING | TRANSACTION_ABORTABLE,
        ) => Action::Abortable,
        _ => Action::Fatal,
    }
}

/// The error of answer `code` to `api`: fencing and authorization codes get their own variants.
fn txn_error(api: TxnApi, transactional_id: &str, target: Option<String>, code: i16) -> ProducerError {
    let transactional_id = transactional_id.to_string();
    match code {
        code::PRODUCER_FENCED | code::INVALID_PRODUCER_EPOCH => {
            ProducerError::ProducerFenced { operation: api.name(), transactional_id, code }
        }
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => {
            ProducerError::TransactionalIdAuthorizationFailed { operation: api.name(), transactional_id }
        }
        _ => ProducerError::Transaction { operation: api.name(), transactional_id, target, code },
    }
}

/// The error of a failed batch as the transaction sees it: fencing gets its own variant.
fn batch_error(e: ProducerError, transactional_id: &str) -> ProducerError {
    match e {
        ProducerError::Kafka { code: c @ (code::PRODUCER_FENCED | code::INVALID_PRODUCER_EPOCH), .. } => {
            ProducerError::ProducerFenced {
                operation: "Produce",
                transactional_id: transactional_id.to_string(),
                code: c,
            }
        }
        ProducerError::Kafka { code: code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, .. } => {
            ProducerError::TransactionalIdAuthorizationFailed {
                operation: "Produce",
                transactional_id: transactional_id.to_string(),
            }
        }
        e => e,
    }
}

/// A failed transaction request: its error and what it does to the state.
#[derive(Debug)]
pub(super) enum Failure {
    /// The call ran out of time or connections: the state is kept, the call may be repeated.
    Retriable(ProducerError),
    /// `ABORTABLE_ERROR`.
    Abortable(ProducerError),
    /// `FATAL_ERROR`.
    Fatal(ProducerError),
}

/// Which coordinator a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coordinator {
    Transaction,
    Group,
}

/// The transaction coordinator, as [`TransactionManager::call`] names it.
const TXN: (Coordinator, Option<&str>) = (Coordinator::Transaction, None);

/// The top-level error code of an InitProducerId, AddOffsetsToTxn or EndTxn answer.
fn top_level_error(r: &ResponseKind) -> (i16, Option<String>) {
    match r {
        ResponseKind::InitProducerId(r) => (r.error_code, None),
        ResponseKind::AddOffsetsToTxn(r) => (r.error_code, None),
        ResponseKind::EndTxn(r) => (r.error_code, None),
        _ => (0, None),
    }
}

/// FindCoordinator for `key` of `key_type` (0 group, 1 transaction) at `version` (v4+ asks with
/// `coordinator_keys`).
pub(super) fn find_coordinator_request(version: i16, key: &str, key_type: i8) -> FindCoordinatorRequest {
    let req = FindCoordinatorRequest::default().with_key_type(key_type);
    if version >= 4 {
        req.with_coordinator_keys(vec![StrBytes::from_string(key.to_string())])
    } else {
        req.with_key(StrBytes::from_string(key.to_string()))
    }
}

/// The coordinator of a FindCoordinator answer: `Ok(host:port)` or `Err(error code)`.
pub(super) fn coordinator_address(version: i16, r: &FindCoordinatorResponse) -> Result<String, i16> {
    let (code, host, port) = if version >= 4 {
        match r.coordinators.first() {
            Some(c) => (c.error_code, c.host.as_str(), c.port),
            None => (code::COORDINATOR_NOT_AVAILABLE, "", -1),
        }
    } else {
        (r.error_code, r.host.as_str(), r.port)
    };
    if code != 0 {
        return Err(code);
    }
    Ok(format!("{host}:{port}"))
}

/// AddPartitionsToTxn (v0-3) adding `partitions` of `topic`.
pub(super) fn add_partitions_request(
    transactional_id: &str,
    producer: (i64, i16),
    topic: &str,
    partitions: &[i32],
) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(transactional_id.to_string())))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(partitions.to_vec())])
}

/// The worst per-partition error of an AddPartitionsToTxn (v0-3) answer for `topic`
/// `partitions` (as `(code, "topic-partition")`), `None` when all were added. A partition the
/// answer leaves out is `UNKNOWN_SERVER_ERROR` (-1).
pub(super) fn add_partitions_error(
    r: &AddPartitionsToTxnResponse,
    topic: &str,
    partitions: &[i32],
) -> Option<(i16, String)> {
    let mut worst: Option<(i16, String)> = None;
    for &p in partitions {
        let code = r
            .results_by_topic_v3_and_below
            .iter()
            .filter(|t| t.name.0.as_str() == topic)
            .flat_map(|t| t.results_by_partition.iter())
            .find(|r| r.partition_index == p)
            .map_or(-1, |r| r.partition_error_code);
        let action = classify(TxnApi::AddPartitionsToTxn, code);
        if matches!(action, Action::Done | Action::Ignore) {
            continue;
        }
        let rank = |a: Action| match a {
            Action::Fatal => 3,
            Action::Abortable => 2,
            _ => 1,
        };
        if worst.as_ref().is_none_or(|(c, _)| rank(classify(TxnApi::AddPartitionsToTxn, *c)) < rank(action)) {
            worst = Some((code, format!("{topic}-{p}")));
        }
    }
    worst
}

/// TxnOffsetCommit of `offsets` (next offsets to consume) for `group` (v3+ carry its
/// generation, member and instance id).
pub(super) fn txn_offset_commit_request(
    transactional_id: &str,
    producer: (i64, i16),
    group: &ConsumerGroupMetadata,
    offsets: &BTreeMap<(String, i32), i64>,
) -> TxnOffsetCommitRequest {
    let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
    for ((topic, partition), &offset) in offsets {
        let p = TxnOffsetCommitRequestPartition::default()
            .with_partition_index(*partition)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(-1)
            .with_committed_metadata(Some(StrBytes::from_static_str("")));
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == topic => t.partitions.push(p),
            _ => topics.push(
                TxnOffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![p]),
            ),
        }
    }
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(transactional_id.to_string())))
        .with_group_id(GroupId(StrBytes::from_string(group.group_id.clone())))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_generation_id(group.generation_id)
        .with_member_id(StrBytes::from_string(group.member_id.clone()))
        .with_group_instance_id(group.group_instance_id.clone().map(StrBytes::from_string))
        .with_topics(topics)
}

/// The worst per-partition error of a TxnOffsetCommit answer, as `(code, "topic-partition")`.
fn txn_offset_commit_error(r: &TxnOffsetCommitResponse) -> Option<(i16, String)> {
    let mut worst: Option<(i16, String)> = None;
    for t in &r.topics {
        for p in &t.partitions {
            let action = classify(TxnApi::TxnOffsetCommit, p.error_code);
            let rank = |a: Action| match a {
                Action::Fatal => 3,
                Action::Abortable => 2,
                Action::Done | Action::Ignore => 0,
                _ => 1,
            };
            if rank(action) > 0
                && worst.as_ref().is_none_or(|(c, _)| rank(classify(TxnApi::TxnOffsetCommit, *c)) < rank(action))
            {
                worst = Some((p.error_code, format!("{}-{}", t.name.0.as_str(), p.partition_index)));
            }
        }
    }
    worst
}

/// The state of a transactional producer (Kafka's `TransactionManager`), behind the producer's
/// transaction lock. Lock order: this, then the producer's metadata connection, then the
/// accumulator's state.
pub(super) struct TransactionManager {
    pub(super) transactional_id: String,
    state: TransactionState,
    /// The error of `FATAL_ERROR` / `ABORTABLE_ERROR`.
    last_error: Option<ProducerError>,
    /// The transaction coordinator's connection.
    txn_conn: Option<KafkaConnection>,
    /// The group coordinator's connection and its group.
    group_conn: Option<(String, KafkaConnection)>,
    /// Partitions in the transaction: (topic index in the accumulator, partition).
    partitions: HashSet<(usize, i32)>,
    /// Whether the transaction added a partition or offsets (else it ends without EndTxn).
    started: bool,
}

/// What a transaction request needs of the producer.
pub(super) struct Ctx<'a> {
    pub(super) shared: &'a RecordAccumulator,
    pub(super) bootstrap: &'a Mutex<KafkaConnection>,
}

impl Ctx<'_> {
    fn producer(&self) -> (i64, i16) {
        (self.shared.producer_id.load(Ordering::Acquire), self.shared.producer_epoch.load(Ordering::Acquire))
    }
}

impl TransactionManager {
    /// A manager in `UNINITIALIZED` for `transactional_id`.
    pub(super) fn new(transactional_id: String) -> Self {
        TransactionManager {
            transactional_id,
            state: TransactionState::Uninitialized,
            last_error: None,
            txn_conn: None,
            group_conn: None,
            partitions: HashSet::new(),
            started: false,
        }
    }

    /// The current state.
    pub(super) fn state(&self) -> TransactionState {
        self.state
    }

    fn transition(&mut self, target: TransactionState, operation: &'static str) -> Result<(), ProducerError> {
        if !self.state.can_transition_to(target) {
            return Err(ProducerError::IllegalTransactionState { operation, state: self.state, transactional: true });
        }
        self.state = target;
        Ok(())
    }

    fn fail(&mut self, failure: Failure) -> ProducerError {
        match failure {
            Failure::Retriable(e) => e,
            Failure::Abortable(e) if self.state.can_transition_to(TransactionState::AbortableError) => {
                self.state = TransactionState::AbortableError;
                self.last_error = Some(e.clone());
                e
            }
            Failure::Abortable(e) | Failure::Fatal(e) => {
                self.state = TransactionState::FatalError;
                self.last_error = Some(e.clone());
                e
            }
        }
    }

    /// Takes in the failed batches the sender recorded: fatal ones move to `FATAL_ERROR`, others
    /// make an open or committing transaction abortable (ignored while aborting).
    pub(super) fn absorb_batch_errors(&mut self, shared: &RecordAccumulator) {
        let taken = shared.txn_batch_error.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(e) = taken else { return };
        let e = batch_error(e, &self.transactional_id);
        if is_fatal_batch_error(&e) {
            self.state = TransactionState::FatalError;
            self.last_error = Some(e);
        } else if self.state != TransactionState::AbortingTransaction
            && self.state.can_transition_to(TransactionState::AbortableError)
        {
            self.state = TransactionState::AbortableError;
            self.last_error = Some(e);
        }
    }

    /// Kafka's `maybeFailWithError`: the fatal error itself, or `TransactionAbortable`.
    fn fail_if_error(&self, operation: &'static str) -> Result<(), ProducerError> {
        match (self.state, &self.last_error) {
            (TransactionState::FatalError, Some(e)) => Err(e.clone()),
            (TransactionState::AbortableError, Some(e)) => {
                Err(ProducerError::TransactionAbortable { operation, source: Arc::new(e.clone()) })
            }
            _ => Ok(()),
        }
    }

    /// Kafka's `failIfNotReadyForSend`: a record may be sent only in `IN_TRANSACTION`.
    pub(super) fn check_send(&mut self, shared: &RecordAccumulator) -> Result<(), ProducerError> {
        self.absorb_batch_errors(shared);
        self.fail_if_error("send")?;
        if self.state != TransactionState::InTransaction {
            return Err(ProducerError::IllegalTransactionState {
                operation: "send",
                state: self.state,
                transactional: true,
            });
        }
        Ok(())
    }

    /// `init_transactions`: see [`Producer::init_transactions`](super::Producer::init_transactions).
    pub(super) fn init(&mut self, ctx: &Ctx<'_>, deadline: Instant) -> Result<(), ProducerError> {
        const OP: &str = "init_transactions";
        self.fail_if_error(OP)?;
        if self.state != TransactionState::Initializing {
            self.transition(TransactionState::Initializing, OP)?;
        }
        let id = self.transactional_id.clone();
        let timeout_ms = ctx.shared.config.transaction_timeout_ms;
        let build = || {
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.clone()))))
                    .with_transaction_timeout_ms(timeout_ms)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
        };
        let r = self.call(ctx, TXN, TxnApi::InitProducerId, (0, 5), deadline, build, top_level_error);
        let r = match r {
            Ok(ResponseKind::InitProducerId(r)) => r,
            Ok(_) => unreachable!("decode_response returns the requested API"),
            Err(f) => return Err(self.fail(f)),
        };
        ctx.shared.producer_id.store(r.producer_id.0, Ordering::Release);
        ctx.shared.producer_epoch.store(r.producer_epoch, Ordering::Release);
        self.transition(TransactionState::Ready, OP)
    }

    /// `begin_transaction`: `READY` -> `IN_TRANSACTION`, no request.
    pub(super) fn begin(&mut self, shared: &RecordAccumulator) -> Result<(), ProducerError> {
        self.absorb_batch_errors(shared);
        self.fail_if_error("begin_transaction")?;
        self.transition(TransactionState::InTransaction, "begin_transaction")
    }

    /// Whether partition `partition` of the topic at `topic` in the accumulator is in the
    /// transaction already.
    pub(super) fn has_partition(&self, topic: usize, partition: i32) -> bool {
        self.partitions.contains(&(topic, partition))
    }

    /// AddPartitionsToTxn for one partition (call only in `IN_TRANSACTION`, after
    /// [`TransactionManager::check_send`]).
    pub(super) fn add_partition(
        &mut self,
        ctx: &Ctx<'_>,
        topic: (usize, &str),
        partition: i32,
        deadline: Instant,
    ) -> Result<(), ProducerError> {
        if self.has_partition(topic.0, partition) {
            return Ok(());
        }
        let id = self.transactional_id.clone();
        let producer = ctx.producer();
        let name = topic.1.to_string();
        let build = || RequestKind::AddPartitionsToTxn(add_partitions_request(&id, producer, &name, &[partition]));
        let error_of = |r: &ResponseKind| match r {
            ResponseKind::AddPartitionsToTxn(r) => {
                add_partitions_error(r, &name, &[partition]).map_or((0, None), |(c, t)| (c, Some(t)))
            }
            _ => (0, None),
        };
        let r = self.call(ctx, TXN, TxnApi::AddPartitionsToTxn, (0, 3), deadline, build, error_of);
        match r {
            Ok(_) => {
                self.partitions.insert((topic.0, partition));
                self.started = true;
                Ok(())
            }
            Err(f) => Err(self.fail(f)),
        }
    }

    /// `send_offsets_to_transaction`: AddOffsetsToTxn, then TxnOffsetCommit to the group's
    /// coordinator.
    pub(super) fn send_offsets(
        &mut self,
        ctx: &Ctx<'_>,
        offsets: &BTreeMap<(String, i32), i64>,
        group: &ConsumerGroupMetadata,
        deadline: Instant,
    ) -> Result<(), ProducerError> {
        const OP: &str = "send_offsets_to_transaction";
        self.absorb_batch_errors(ctx.shared);
        self.fail_if_error(OP)?;
        if self.state != TransactionState::InTransaction {
            return Err(ProducerError::IllegalTransactionState {
                operation: OP,
                state: self.state,
                transactional: true,
            });
        }
        let id = self.transactional_id.clone();
        let producer = ctx.producer();
        let group_id = group.group_id.clone();
        let build = || {
            RequestKind::AddOffsetsToTxn(
                AddOffsetsToTxnRequest::default()
                    .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
                    .with_producer_id(ProducerId(producer.0))
                    .with_producer_epoch(producer.1)
                    .with_group_id(GroupId(StrBytes::from_string(group_id.clone()))),
            )
        };
        let error_of = |r: &ResponseKind| (top_level_error(r).0, Some(format!("group {group_id}")));
        let r = self.call(ctx, TXN, TxnApi::AddOffsetsToTxn, (0, 4), deadline, build, error_of);
        if let Err(f) = r {
            return Err(self.fail(f));
        }
        self.started = true;
        if offsets.is_empty() {
            return Ok(());
        }
        if self.group_conn.as_ref().is_some_and(|(g, _)| *g != group.group_id) {
            self.group_conn = None;
        }
        let build = || RequestKind::TxnOffsetCommit(txn_offset_commit_request(&id, producer, group, offsets));
        let error_of = |r: &ResponseKind| match r {
            ResponseKind::TxnOffsetCommit(r) => txn_offset_commit_error(r).map_or((0, None), |(c, t)| (c, Some(t))),
            _ => (0, None),
        };
        let to = (Coordinator::Group, Some(group.group_id.as_str()));
        let r = self.call(ctx, to, TxnApi::TxnOffsetCommit, (0, 4), deadline, build, error_of);
        match r {
            Ok(_) => Ok(()),
            Err(f) => Err(self.fail(f)),
        }
    }

    /// `commit_transaction` (`commit`) or `abort_transaction`: see the producer's methods.
    pub(super) fn end(&mut self, ctx: &Ctx<'_>, commit: bool, deadline: Instant) -> Result<(), ProducerError> {
        let (op, target) = if commit {
            ("commit_transaction", TransactionState::CommittingTransaction)
        } else {
            ("abort_transaction", TransactionState::AbortingTransaction)
        };
        self.absorb_batch_errors(ctx.shared);
        if self.state != target {
            if commit || self.state == TransactionState::FatalError {
                self.fail_if_error(op)?;
            }
            self.transition(target, op)?;
        }
        if !commit {
            ctx.shared.abort_undrained();
        }
        ctx.shared.flush_until(Some(deadline), "waiting for the transaction's batches")?;
        self.absorb_batch_errors(ctx.shared);
        if commit || self.state == TransactionState::FatalError {
            self.fail_if_error(op)?;
        }
        if self.started {
            let id = self.transactional_id.clone();
            let producer = ctx.producer();
            let build = || {
                RequestKind::EndTxn(
                    EndTxnRequest::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(id.clone())))
                        .with_producer_id(ProducerId(producer.0))
                        .with_producer_epoch(producer.1)
                        .with_committed(commit),
                )
            };
            let r = self.call(ctx, TXN, TxnApi::EndTxn, (0, 4), deadline, build, top_level_error);
            if let Err(f) = r {
                return Err(self.fail(f));
            }
        }
        self.partitions.clear();
        self.started = false;
        self.last_error = None;
        ctx.shared.txn_batch_error.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.transition(TransactionState::Ready, op)
    }

    /// The connection to `which` coordinator, found with FindCoordinator when there is none.
    fn coordinator(
        &mut self,
        ctx: &Ctx<'_>,
        which: Coordinator,
        group: Option<&str>,
    ) -> Result<&mut KafkaConnection, Failure> {
        let has = match which {
            Coordinator::Transaction => self.txn_conn.is_some(),
            Coordinator::Group => self.group_conn.is_some(),
        };
        if !has {
            let (key, key_type) = match which {
                Coordinator::Transaction => (self.transactional_id.as_str(), 1),
                Coordinator::Group => (group.unwrap_or_default(), 0),
            };
            let addr = {
                let mut conn = ctx.bootstrap.lock().unwrap_or_else(|e| e.into_inner());
                let version = conn
                    .version(ApiKey::FindCoordinator, (1, 6))
                    .map_err(|e| Failure::Fatal(ProducerError::client("FindCoordinator", e)))?;
                let r = match conn.call(
                    ApiKey::FindCoordinator,
                    version,
                    RequestKind::FindCoordinator(find_coordinator_request(version, key, key_type)),
                ) {
                    Ok(ResponseKind::FindCoordinator(r)) => r,
                    Ok(_) => unreachable!("decode_response returns the requested API"),
                    Err(e) => return Err(Failure::Retriable(ProducerError::client("FindCoordinator", e))),
                };
                match coordinator_address(version, &r) {
                    Ok(a) => a,
                    Err(code) => {
                        let target = (key_type == 0).then(|| format!("group {key}"));
                        let e = txn_error(TxnApi::FindCoordinator, &self.transactional_id, target, code);
                        return Err(match classify(TxnApi::FindCoordinator, code) {
                            Action::Retry | Action::Relookup => Failure::Retriable(e),
                            Action::Abortable => Failure::Abortable(e),
                            _ => Failure::Fatal(e),
                        });
                    }
                }
            };
            let config = &ctx.shared.config;
            let conn = KafkaConnection::connect(
                addr.as_str(),
                &config.client_id,
                Duration::from_millis(config.request_timeout_ms),
            )
            .map_err(|e| Failure::Retriable(ProducerError::client(format!("connecting to coordinator {addr}"), e)))?;
            match which {
                Coordinator::Transaction => self.txn_conn = Some(conn),
                Coordinator::Group => self.group_conn = Some((group.unwrap_or_default().to_string(), conn)),
            }
        }
        Ok(match which {
            Coordinator::Transaction => self.txn_conn.as_mut().expect("set"),
            Coordinator::Group => &mut self.group_conn.as_mut().expect("set").1,
        })
    }

    fn drop_coordinator(&mut self, which: Coordinator) {
        match which {
            Coordinator::Transaction => self.txn_conn = None,
            Coordinator::Group => self.group_conn = None,
        }
    }

    /// Sends `api` (versions `range`, built by `build` for the negotiated version) to `which`
    /// coordinator (of `group` for the group coordinator) until it is answered without a
    /// retried error (`error_of`: the answer's worst code and what it is about) or `deadline`
    /// passes.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        ctx: &Ctx<'_>,
        (which, group): (Coordinator, Option<&str>),
        api: TxnApi,
        range: (i16, i16),
        deadline: Instant,
        build: impl Fn() -> RequestKind,
        error_of: impl Fn(&ResponseKind) -> (i16, Option<String>),
    ) -> Result<ResponseKind, Failure> {
        let key = match api {
            TxnApi::InitProducerId => ApiKey::InitProducerId,
            TxnApi::AddPartitionsToTxn => ApiKey::AddPartitionsToTxn,
            TxnApi::AddOffsetsToTxn => ApiKey::AddOffsetsToTxn,
            TxnApi::TxnOffsetCommit => ApiKey::TxnOffsetCommit,
            TxnApi::EndTxn => ApiKey::EndTxn,
            TxnApi::FindCoordinator => ApiKey::FindCoordinator,
        };
        let backoff = Duration::from_millis(ctx.shared.config.retry_backoff_ms.max(1));
        loop {
            let attempt = match self.coordinator(ctx, which, group) {
                Ok(conn) => match conn.version(key, range) {
                    Ok(version) => conn.call(key, version, build()).map_err(|e| {
                        Failure::Retriable(ProducerError::client(format!("{} to the coordinator", api.name()), e))
                    }),
                    Err(e) => Err(Failure::Fatal(ProducerError::client(api.name(), e))),
                },
                Err(f) => Err(f),
            };
            let (error, action) = match attempt {
                Ok(r) => {
                    let (code, target) = error_of(&r);
                    let action = classify(api, code);
                    if matches!(action, Action::Done | Action::Ignore) {
                        return Ok(r);
                    }
                    (txn_error(api, &self.transactional_id, target, code), action)
                }
                Err(Failure::Retriable(e)) => {
                    self.drop_coordinator(which);
                    (e, Action::Retry)
                }
                Err(f) => return Err(f),
            };
            match action {
                Action::Fatal => return Err(Failure::Fatal(error)),
                Action::Abortable => return Err(Failure::Abortable(error)),
                Action::Relookup => self.drop_coordinator(which),
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Failure::Retriable(ProducerError::TransactionTimeout {
                    operation: api.name(),
                    last_error: Arc::new(error),
                }));
            }
            let wait = match &error {
                ProducerError::Transaction { code: code::CONCURRENT_TRANSACTIONS, .. } => {
                    backoff.min(Duration::from_millis(20))
                }
                _ => backoff,
            };
            std::thread::sleep(wait.min(deadline - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransactionState::*;

    const ALL: [TransactionState; 8] = [
        Uninitialized,
        Initializing,
        Ready,
        InTransaction,
        CommittingTransaction,
        AbortingTransaction,
        AbortableError,
        FatalError,
    ];

    #[test]
    fn transitions_are_kafkas() {
        let allowed: Vec<(TransactionState, TransactionState)> = ALL
            .iter()
            .flat_map(|&a| ALL.iter().map(move |&b| (a, b)))
            .filter(|(a, b)| a.can_transition_to(*b) && *b != FatalError)
            .collect();
        assert_eq!(
            allowed,
            vec![
                (Uninitialized, Initializing),
                (Initializing, Ready),
                (Initializing, AbortableError),
                (Ready, Uninitialized),
                (Ready, InTransaction),
                (InTransaction, CommittingTransaction),
                (InTransaction, AbortingTransaction),
                (InTransaction, AbortableError),
                (CommittingTransaction, Initializing),
                (CommittingTransaction, Ready),
                (CommittingTransaction, AbortableError),
                (AbortingTransaction, Initializing),
                (AbortingTransaction, Ready),
                (AbortableError, Uninitialized),
                (AbortableError, AbortingTransaction),
                (AbortableError, AbortableError),
            ]
        );
        assert!(ALL.iter().all(|s| s.can_transition_to(FatalError)));
        assert_eq!(CommittingTransaction.to_string(), "COMMITTING_TRANSACTION");
    }

    #[test]
    fn answers_are_classified_as_kafkas_transaction_manager() {
        use TxnApi::*;
        for api in [FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn] {
            assert_eq!(classify(api, 0), Action::Done, "{api:?}");
            for fatal in [90, 47, 53] {
                assert_eq!(classify(api, fatal), Action::Fatal, "{api:?} {fatal}");
            }
            assert_eq!(classify(api, 15), if api == FindCoordinator { Action::Retry } else { Action::Relookup });
            assert_eq!(classify(api, 14), Action::Retry, "{api:?}");
            assert_eq!(classify(api, -1), Action::Fatal, "{api:?}: unexpected errors are fatal");
        }
        assert_eq!(classify(InitProducerId, 16), Action::Relookup);
        assert_eq!(classify(InitProducerId, 51), Action::Retry);
        assert_eq!(classify(EndTxn, 51), Action::Retry);
        assert_eq!(classify(EndTxn, 48), Action::Fatal, "INVALID_TXN_STATE");
        assert_eq!(classify(EndTxn, 59), Action::Abortable, "UNKNOWN_PRODUCER_ID");
        assert_eq!(classify(InitProducerId, 50), Action::Fatal, "INVALID_TRANSACTION_TIMEOUT");
        assert_eq!(classify(AddPartitionsToTxn, 3), Action::Retry);
        assert_eq!(classify(AddPartitionsToTxn, 55), Action::Ignore);
        assert_eq!(classify(AddPartitionsToTxn, 29), Action::Abortable);
        assert_eq!(classify(AddPartitionsToTxn, 120), Action::Abortable);
        assert_eq!(classify(AddOffsetsToTxn, 30), Action::Abortable);
        assert_eq!(classify(TxnOffsetCommit, 22), Action::Abortable, "ILLEGAL_GENERATION");
        assert_eq!(classify(TxnOffsetCommit, 25), Action::Abortable, "UNKNOWN_MEMBER_ID");
        assert_eq!(classify(TxnOffsetCommit, 82), Action::Fatal, "FENCED_INSTANCE_ID");
        assert_eq!(classify(TxnOffsetCommit, 7), Action::Relookup);
        assert_eq!(classify(FindCoordinator, 30), Action::Abortable);
    }

    #[test]
    fn errors_get_kafkas_exceptions() {
        let e = txn_error(TxnApi::EndTxn, "t", None, 47);
        assert!(matches!(e, ProducerError::ProducerFenced { operation: "EndTxn", code: 47, .. }), "{e:?}");
        let e = txn_error(TxnApi::FindCoordinator, "t", None, 53);
        assert!(matches!(e, ProducerError::TransactionalIdAuthorizationFailed { .. }), "{e:?}");
        let e = txn_error(TxnApi::AddPartitionsToTxn, "t", Some("x-1".into()), 48);
        assert_eq!(e.to_string(), "AddPartitionsToTxn for transactional.id \"t\" (x-1): INVALID_TXN_STATE (48)");
        let produce = |code| ProducerError::Kafka { context: "Produce", topic: "x".into(), partition: 0, code };
        assert!(is_fatal_batch_error(&produce(90)));
        assert!(is_fatal_batch_error(&produce(47)));
        assert!(!is_fatal_batch_error(&produce(10)), "MESSAGE_TOO_LARGE makes the transaction abortable");
        assert!(!is_fatal_batch_error(&ProducerError::Closed));
        assert!(matches!(batch_error(produce(90), "t"), ProducerError::ProducerFenced { operation: "Produce", .. }));
    }

    #[test]
    fn batch_errors_move_the_state() {
        let shared = RecordAccumulator::new(crate::client::producer::config::ProducerConfig::new("x"), 1, 0);
        let mut tm = TransactionManager::new("t".into());
        tm.state = InTransaction;
        let produce = |code| ProducerError::Kafka { context: "Produce", topic: "x".into(), partition: 0, code };
        *shared.txn_batch_error.lock().unwrap() = Some(produce(10));
        let e = tm.check_send(&shared).unwrap_err();
        assert_eq!(tm.state(), AbortableError);
        assert!(matches!(e, ProducerError::TransactionAbortable { operation: "send", .. }), "{e:?}");
        // Commit is refused, abort is allowed.
        assert!(tm.fail_if_error("commit_transaction").is_err());
        assert!(tm.state.can_transition_to(AbortingTransaction));
        // A fencing error is fatal and every later call fails with it.
        *shared.txn_batch_error.lock().unwrap() = Some(produce(90));
        tm.absorb_batch_errors(&shared);
        assert_eq!(tm.state(), FatalError);
        let e = tm.begin(&shared).unwrap_err();
        assert!(matches!(e, ProducerError::ProducerFenced { code: 90, .. }), "{e:?}");
        let e = tm.check_send(&shared).unwrap_err();
        assert!(matches!(e, ProducerError::ProducerFenced { code: 90, .. }), "{e:?}");
        // Outside a transaction, send is refused with the state.
        let mut tm = TransactionManager::new("t".into());
        let e = tm.check_send(&shared).unwrap_err();
        assert_eq!(e.to_string(), "cannot send in transaction state UNINITIALIZED");
        tm.state = Ready;
        tm.begin(&shared).unwrap();
        assert_eq!(tm.state(), InTransaction);
        let e = tm.begin(&shared).unwrap_err();
        assert!(matches!(e, ProducerError::IllegalTransactionState { state: InTransaction, .. }), "{e:?}");
    }

    #[test]
    fn requests_are_built_for_the_version() {
        let r = find_coordinator_request(3, "tx", 1);
        assert_eq!((r.key.as_str(), r.key_type, r.coordinator_keys.len()), ("tx", 1, 0));
        let r = find_coordinator_request(4, "g", 0);
        assert_eq!((r.key.as_str(), r.key_type), ("", 0));
        assert_eq!(r.coordinator_keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), vec!["g"]);

        let mut resp = FindCoordinatorResponse::default().with_host(StrBytes::from_static_str("h")).with_port(9);
        assert_eq!(coordinator_address(3, &resp), Ok("h:9".into()));
        resp.error_code = 53;
        assert_eq!(coordinator_address(3, &resp), Err(53));
        assert_eq!(coordinator_address(4, &resp), Err(15), "v4+ answers in coordinators");

        let r = add_partitions_request("tx", (7, 2), "t", &[3]);
        assert_eq!(r.v3_and_below_transactional_id.0.as_str(), "tx");
        assert_eq!((r.v3_and_below_producer_id.0, r.v3_and_below_producer_epoch), (7, 2));
        assert_eq!(r.v3_and_below_topics[0].partitions, vec![3]);

        use kafka_protocol::messages::add_partitions_to_txn_response::{
            AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
        };
        let answer = |codes: &[(i32, i16)]| {
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_results_by_partition(
                        codes
                            .iter()
                            .map(|&(p, c)| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(c)
                            })
                            .collect(),
                    ),
            ])
        };
        assert_eq!(add_partitions_error(&answer(&[(0, 0), (1, 0)]), "t", &[0, 1]), None);
        assert_eq!(add_partitions_error(&answer(&[(0, 55), (1, 90)]), "t", &[0, 1]), Some((90, "t-1".into())));
        assert_eq!(add_partitions_error(&answer(&[(0, 0)]), "t", &[0, 1]), Some((-1, "t-1".into())));

        let mut offsets = BTreeMap::new();
        offsets.insert(("a".to_string(), 1), 10);
        offsets.insert(("a".to_string(), 0), 5);
        offsets.insert(("b".to_string(), 0), 7);
        let group = ConsumerGroupMetadata {
            group_id: "g".into(),
            generation_id: 3,
            member_id: "m".into(),
            group_instance_id: Some("i".into()),
        };
        let r = txn_offset_commit_request("tx", (7, 2), &group, &offsets);
        assert_eq!((r.group_id.0.as_str(), r.generation_id, r.member_id.as_str()), ("g", 3, "m"));
        assert_eq!(r.group_instance_id.as_ref().map(|s| s.as_str()), Some("i"));
        let flat: Vec<(String, i32, i64)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| (t.name.0.to_string(), p.partition_index, p.committed_offset))
            })
            .collect();
        assert_eq!(flat, vec![("a".into(), 0, 5), ("a".into(), 1, 10), ("b".into(), 0, 7)]);
        assert_eq!(ConsumerGroupMetadata::new("g").generation_id, -1);
    }
}
