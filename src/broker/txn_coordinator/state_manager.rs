//! [`TransactionStateManager`]: the metadata of every transactional id, sharded by
//! `__transaction_state` partition ([`partition_for`]), and the request operations that run one
//! decision of [`decisions`], append its record through a [`TxnStateStorage`]
//! and complete it (Kafka's `TransactionStateManager` with the `TransactionCoordinator`
//! callbacks around `appendTransactionToLog`, and the recovery of `TransactionMarkerChannelManager`).
//!
//! ```text
//! operation (InitProducerId, AddPartitionsToTxn, EndTxn, a timeout abort, an expiry)
//!   shard lock ─> decision: refuse (answer now) or a transition, left pending ─> unlock
//!   TxnStateStorage::append(record of the transition)            (no lock held)
//!   shard lock ─> ok: complete_transition_to (and, after a Prepare*, prepare the Complete*)
//!              | error: abort_pending_transition, answer append_error_code(log's code) ─> unlock
//! EndTxn / fence / timeout / load ─> TxnMarkers: the handler writes a COMMIT/ABORT marker to
//!   each partition (Partition::append_txn_marker), then complete_markers appends Complete*.
//! ```
//!
//! ## Locks
//!
//! One mutex per `__transaction_state` partition (a leaf: nothing else is taken while it is
//! held, never two at once, never held across [`TxnStateStorage::append`]). A transactional id's
//! pending state ([`TransactionMetadata::pending_transition_in_progress`]) keeps a second change
//! of that id from starting while its record is appended (it answers `CONCURRENT_TRANSACTIONS`),
//! so the records of one id reach the log in the order of its transitions; records of different
//! ids of one partition may interleave in any order (replay keeps the last record per id). The
//! storage takes the log's locks (the log map, then the partition's). Producer ids are generated
//! with no shard lock held (the broker's generator takes the log manager's locks): InitProducerId
//! looks first, generates one when the id is unknown or its epoch exhausted, then decides.
//!
//! ## Loading
//!
//! Every shard starts loading: its operations answer `COORDINATOR_LOAD_IN_PROGRESS` until
//! [`TransactionStateManager::load`] replays its partition (Kafka's
//! `loadTransactionsForTxnTopicPartition`): the last record of an id wins, a tombstone removes
//! the id, keys of unknown versions are skipped (Kafka's `UnknownKey`), undecodable records are
//! skipped with a warning. Ids left in PrepareCommit / PrepareAbort get their Complete
//! transition prepared and are returned as [`TxnMarkers`], to be (re)written. A partition that
//! cannot be read answers `NOT_COORDINATOR` (Kafka does not own a partition it failed to load).
//!
//! Records are written as `TransactionLogValue` v0 ([`TRANSACTION_LOG_VALUE_VERSION`]): this
//! broker advertises no `transaction.version` feature (see [`metadata`](super::metadata)).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

use super::decisions::{
    self, append_error_code, check_init_producer_id, AddPartitionsOutcome, EndTxnOutcome, InitProducerIdTransit,
    ProducerIdAndEpoch, TxnApi, TxnError, TxnResult, DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
};
use super::metadata::{TopicPartition, TransactionMetadata, TransactionState, TxnTransitMetadata};
use super::storage::TxnStateStorage;
use crate::broker::errors;
use crate::protocol::transaction_state::{
    decode_record, partition_for, TransactionLogKey, TransactionLogRecord, DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
};

/// The `TransactionLogValue` version written: 0 (Kafka writes v1 only once the
/// `transaction.version` feature is 1 or more, which this broker does not advertise).
pub(crate) const TRANSACTION_LOG_VALUE_VERSION: i16 = 0;

/// The manager's configuration, with Kafka's names and defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxnStateConfig {
    /// The partition count of `__transaction_state` (`transaction.state.log.num.partitions`, 50;
    /// the existing topic's count when it exists, see
    /// [`existing_partition_count`](super::runtime::existing_partition_count)). Non-positive is
    /// taken as 1.
    pub num_partitions: i32,
    /// `transaction.max.timeout.ms` (900000): the largest `transaction.timeout.ms` accepted.
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms` (604800000 = 7 days): an id in Empty, CompleteCommit or
    /// CompleteAbort not updated for this long is removed (a tombstone).
    pub transactional_id_expiration_ms: i64,
    /// The coordinator epoch written in the markers (Kafka: the leader epoch of the
    /// `__transaction_state` partition; a single node that never changes leader uses 0).
    pub coordinator_epoch: i32,
}

impl Default for TxnStateConfig {
    fn default() -> Self {
        TxnStateConfig {
            num_partitions: DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS,
            transaction_max_timeout_ms: DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            transactional_id_expiration_ms: i64::from(DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS),
            coordinator_epoch: 0,
        }
    }
}

/// An error of an operation: a refusal of the decision, a failed append, or a shard that is not
/// ready. [`StateError::code_for`] is what the handler answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum StateError {
    /// The decision refused the request (nothing written).
    #[error(transparent)]
    Refused(#[from] TxnError),
    /// Appending the record failed; the state is as before the request.
    #[error("appending to {TRANSACTION_STATE_TOPIC}-{partition} failed (log error {log_code}): {message}")]
    Append {
        /// The `__transaction_state` partition.
        partition: i32,
        /// The log's error code ([`decisions::append_error_code`] maps it).
        log_code: i16,
        /// The log's message.
        message: String,
    },
    /// The partition is still being replayed: `COORDINATOR_LOAD_IN_PROGRESS`.
    #[error("{TRANSACTION_STATE_TOPIC}-{partition} is loading")]
    LoadInProgress {
        /// The `__transaction_state` partition.
        partition: i32,
    },
    /// The record cannot be encoded (a transactional id or topic name over 32767 bytes):
    /// `INVALID_REQUEST`; nothing was written, the state is as before.
    #[error("the {TRANSACTION_STATE_TOPIC} record cannot be encoded: {message}")]
    Encode {
        /// The encoder's message.
        message: String,
    },
    /// The partition could not be loaded, or the id vanished during the append: `NOT_COORDINATOR`.
    #[error("not the coordinator of {TRANSACTION_STATE_TOPIC}-{partition}: {reason}")]
    NotCoordinator {
        /// The `__transaction_state` partition.
        partition: i32,
        /// Why.
        reason: String,
    },
}

impl StateError {
    /// The Kafka error code.
    pub(crate) fn code(&self) -> i16 {
        match self {
            StateError::Refused(e) => e.code(),
            StateError::Append { log_code, .. } => append_error_code(*log_code),
            StateError::LoadInProgress { .. } => errors::COORDINATOR_LOAD_IN_PROGRESS,
            StateError::NotCoordinator { .. } => errors::NOT_COORDINATOR,
            StateError::Encode { .. } => errors::INVALID_REQUEST,
        }
    }

    /// The code for `api` at request `version` ([`TxnError::code_for`]: `PRODUCER_FENCED` becomes
    /// `INVALID_PRODUCER_EPOCH` for old clients).
    pub(crate) fn code_for(&self, api: TxnApi, version: i16) -> i16 {
        match self {
            StateError::Refused(e) => e.code_for(api, version),
            other => other.code(),
        }
    }
}

/// The COMMIT / ABORT markers of one transaction, to write to each of its partitions with
/// `Partition::append_txn_marker(producer_id, producer_epoch, coordinator_epoch, aborted, now)`
/// (Kafka's `TransactionMarkerChannelManager.addTxnMarkersToSend`), then to hand back to
/// [`TransactionStateManager::complete_markers`], which writes the Complete* record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxnMarkers {
    /// The transactional id.
    pub transactional_id: String,
    /// Its `__transaction_state` partition.
    pub txn_partition: i32,
    /// The producer id of the markers.
    pub producer_id: i64,
    /// The epoch of the markers (after a fence or a timeout, the bumped one).
    pub producer_epoch: i16,
    /// The coordinator epoch of the markers.
    pub coordinator_epoch: i32,
    /// Commit or abort.
    pub result: TxnResult,
    /// The partitions to write a marker to (those of AddOffsetsToTxn are `__consumer_offsets`
    /// partitions).
    pub partitions: BTreeSet<TopicPartition>,
    /// The CompleteCommit / CompleteAbort transition pending until the markers are written.
    complete: TxnTransitMetadata,
}

/// What InitProducerId answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InitProducerIdAnswer {
    /// `NONE` with this producer id and epoch.
    Ready(ProducerIdAndEpoch),
    /// A transaction of the id was open: its producer is fenced and the abort is prepared;
    /// answer `CONCURRENT_TRANSACTIONS` (the client retries) and write these markers.
    AbortingOpenTransaction(TxnMarkers),
}

/// What EndTxn answers (`NONE`): the producer id and epoch, and the markers to write (`None` for
/// a retry of an EndTxn whose outcome is already complete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EndTxnAnswer {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The markers to write.
    pub markers: Option<TxnMarkers>,
}

/// A transaction open longer than its timeout (Kafka's `TransactionalIdAndProducerIdEpoch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TimedOutTxn {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id when found.
    pub producer_id: i64,
    /// Its epoch when found.
    pub producer_epoch: i16,
}

/// InitProducerId's next step after its decision.
enum InitStep {
    /// Write this Empty transition.
    Write(TxnTransitMetadata),
    /// Write the abort of the fenced open transaction.
    AbortOpen(EndTxnOutcome),
}

/// Whether a shard may be used.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ShardStatus {
    Loading,
    Loaded,
    /// The partition could not be read: why.
    Failed(String),
}

/// One `__transaction_state` partition's transactional ids.
#[derive(Debug)]
struct ShardState {
    status: ShardStatus,
    txns: HashMap<String, TransactionMetadata>,
}

/// The producer id source (the broker's: `LogManager::generate_producer_id`, its error mapped to
/// [`TxnError::ProducerIdUnavailable`]).
pub(crate) type ProducerIdSource = Box<dyn Fn() -> Result<i64, TxnError> + Send + Sync>;

/// The transaction coordinator's state (see the module docs).
pub(crate) struct TransactionStateManager {
    config: TxnStateConfig,
    shards: Vec<Mutex<ShardState>>,
    generate_producer_id: ProducerIdSource,
}

impl std::fmt::Debug for TransactionStateManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionStateManager").field("config", &self.config).finish_non_exhaustive()
    }
}

/// The record of a transition: key, and value (`None`, a tombstone, for Dead).
fn record_of(t: &TxnTransitMetadata) -> Result<(Vec<u8>, Option<Vec<u8>>), StateError> {
    let encode = |e: crate::protocol::primitives::EncodeError| StateError::Encode { message: e.to_string() };
    let key = TransactionLogKey::new(t.transactional_id.clone()).encode().map_err(encode)?;
    if t.txn_state == TransactionState::Dead {
        return Ok((key, None));
    }
    let value = t.to_record_value(TRANSACTION_LOG_VALUE_VERSION).map_err(TxnError::from)?.encode().map_err(encode)?;
    Ok((key, Some(value)))
}

impl TransactionStateManager {
    /// A manager with every shard loading ([`Self::load`] ends it), generating producer ids with
    /// `generate_producer_id`.
    pub(crate) fn new(config: TxnStateConfig, generate_producer_id: ProducerIdSource) -> Self {
        let n = config.num_partitions.max(1);
        let shards =
            (0..n).map(|_| Mutex::new(ShardState { status: ShardStatus::Loading, txns: HashMap::new() })).collect();
        TransactionStateManager { config: TxnStateConfig { num_partitions: n, ..config }, shards, generate_producer_id }
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &TxnStateConfig {
        &self.config
    }

    /// The `__transaction_state` partition of `transactional_id` (Kafka's `partitionFor`).
    pub(crate) fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.config.num_partitions)
    }

    fn lock(&self, partition: i32) -> MutexGuard<'_, ShardState> {
        let i = usize::try_from(partition).unwrap_or(0).min(self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shard of `partition`, locked, when it is loaded.
    fn ready(&self, partition: i32) -> Result<MutexGuard<'_, ShardState>, StateError> {
        let st = self.lock(partition);
        match &st.status {
            ShardStatus::Loaded => Ok(st),
            ShardStatus::Loading => Err(StateError::LoadInProgress { partition }),
            ShardStatus::Failed(reason) => Err(StateError::NotCoordinator { partition, reason: reason.clone() }),
        }
    }

    /// A copy of `transactional_id`'s metadata (DescribeTransactions' source), `None` when
    /// unknown.
    ///
    /// Errors: the shard is loading or failed to load.
    #[cfg(test)]
    pub(crate) fn describe(&self, transactional_id: &str) -> Result<Option<TransactionMetadata>, StateError> {
        Ok(self.ready(self.partition_for(transactional_id))?.txns.get(transactional_id).cloned())
    }

    /// Appends the record of `transit`, with no lock held, then applies `on_written` (or, on a
    /// failed append, `abort_pending_transition(was_fence)`) to the id's metadata under the lock.
    fn write<R>(
        &self,
        storage: &dyn TxnStateStorage,
        partition: i32,
        transit: &TxnTransitMetadata,
        was_fence: bool,
        now_ms: i64,
        on_written: impl FnOnce(&mut TransactionMetadata) -> Result<R, StateError>,
    ) -> Result<R, StateError> {
        let id = transit.transactional_id.as_str();
        let appended = record_of(transit).and_then(|(key, value)| {
            storage.append(partition, key, value, now_ms).map_err(|(log_code, message)| StateError::Append {
                partition,
                log_code,
                message,
            })
        });
        let mut st = self.lock(partition);
        let Some(md) = st.txns.get_mut(id) else {
            return Err(StateError::NotCoordinator { partition, reason: format!("transactional id {id} vanished") });
        };
        match appended {
            Ok(()) => on_written(md),
            Err(e) => {
                tracing::warn!(transactional_id = id, "{e}");
                md.abort_pending_transition(was_fence);
                Err(e)
            }
        }
    }

    /// Applies a written transition; a refusal of `complete_transition_to` (a coordinator bug)
    /// forgets the pending state and is `UNKNOWN_SERVER_ERROR`.
    fn complete(md: &mut TransactionMetadata, transit: &TxnTransitMetadata) -> Result<(), StateError> {
        md.complete_transition_to(transit).map_err(|e| {
            md.pending_state = None;
            StateError::Refused(e.into())
        })
    }

    /// After a PrepareCommit / PrepareAbort is complete: prepares the Complete transition and
    /// says which markers to write.
    fn markers_after_prepare(
        &self,
        md: &mut TransactionMetadata,
        partition: i32,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<TxnMarkers, StateError> {
        let (producer_id, producer_epoch) = (md.producer_id, md.producer_epoch);
        let partitions = md.topic_partitions.clone();
        let complete = decisions::prepare_complete_after_append(md, producer_id, producer_epoch, result, now_ms)?;
        Ok(TxnMarkers {
            transactional_id: md.transactional_id.clone(),
            txn_partition: partition,
            producer_id,
            producer_epoch,
            coordinator_epoch: self.config.coordinator_epoch,
            result,
            partitions,
            complete,
        })
    }

    /// Writes an abort or commit prepared by `outcome` (EndTxn, a fence, a timeout).
    fn write_end(
        &self,
        storage: &dyn TxnStateStorage,
        partition: i32,
        outcome: EndTxnOutcome,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<EndTxnAnswer, StateError> {
        match outcome {
            EndTxnOutcome::AlreadyComplete { producer_id, producer_epoch } => {
                Ok(EndTxnAnswer { producer_id, producer_epoch, markers: None })
            }
            EndTxnOutcome::Append { transit, is_epoch_fence } => {
                self.write(storage, partition, &transit, is_epoch_fence, now_ms, |md| {
                    Self::complete(md, &transit)?;
                    let markers = self.markers_after_prepare(md, partition, result, now_ms)?;
                    Ok(EndTxnAnswer {
                        producer_id: markers.producer_id,
                        producer_epoch: markers.producer_epoch,
                        markers: Some(markers),
                    })
                })
            }
        }
    }

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId`): the request's
    /// checks ([`check_init_producer_id`]), a new metadata with a generated producer id for an
    /// unknown id (kept even when its first record fails to be written, as Kafka keeps it: the
    /// retry reuses the producer id), then [`decisions::prepare_init_producer_id`]. An open
    /// transaction is fenced and its abort written
    /// ([`InitProducerIdAnswer::AbortingOpenTransaction`]).
    ///
    /// Errors: the decision's refusals, a failed append (the state is as before), the shard's
    /// status.
    pub(crate) fn init_producer_id(
        &self,
        storage: &dyn TxnStateStorage,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        producer_id: i64,
        producer_epoch: i16,
        now_ms: i64,
    ) -> Result<InitProducerIdAnswer, StateError> {
        let expected = check_init_producer_id(
            transactional_id,
            transaction_timeout_ms,
            self.config.transaction_max_timeout_ms,
            producer_id,
            producer_epoch,
        )?;
        let partition = self.partition_for(transactional_id);
        // A producer id is generated with no shard lock held (the generator takes the log
        // manager's locks): for an unknown id, or an exhausted epoch that will rotate.
        let needs_id = {
            let st = self.ready(partition)?;
            st.txns.get(transactional_id).is_none_or(TransactionMetadata::is_producer_epoch_exhausted)
        };
        let mut spare = if needs_id { Some((self.generate_producer_id)()?) } else { None };
        let step = {
            let mut st = self.ready(partition)?;
            if !st.txns.contains_key(transactional_id) {
                let id = spare.take().ok_or(TxnError::ConcurrentTransactions)?;
                st.txns.insert(
                    transactional_id.to_string(),
                    TransactionMetadata::new(transactional_id, id, transaction_timeout_ms, now_ms),
                );
            }
            let Some(md) = st.txns.get_mut(transactional_id) else { unreachable!("inserted above") };
            // The state changed since the look: a rotation without a spare id is retried.
            let rotate_id = || spare.take().ok_or(TxnError::ConcurrentTransactions);
            match decisions::prepare_init_producer_id(md, transaction_timeout_ms, expected, now_ms, rotate_id)? {
                InitProducerIdTransit::Append(t) => InitStep::Write(t),
                InitProducerIdTransit::FenceOngoing(fence) => {
                    let abort = decisions::prepare_end_txn(
                        Some(&mut *md),
                        fence.producer_id,
                        fence.producer_epoch,
                        TxnResult::Abort,
                        false,
                        now_ms,
                    );
                    match abort {
                        Ok(outcome) => InitStep::AbortOpen(outcome),
                        Err(e) => {
                            md.pending_state = None;
                            return Err(e.into());
                        }
                    }
                }
            }
        };
        match step {
            InitStep::Write(transit) => self.write(storage, partition, &transit, false, now_ms, |md| {
                Self::complete(md, &transit)?;
                Ok(InitProducerIdAnswer::Ready(ProducerIdAndEpoch {
                    producer_id: transit.producer_id,
                    epoch: transit.producer_epoch,
                }))
            }),
            InitStep::AbortOpen(outcome) => {
                let answer = self.write_end(storage, partition, outcome, TxnResult::Abort, now_ms)?;
                match answer.markers {
                    Some(m) => Ok(InitProducerIdAnswer::AbortingOpenTransaction(m)),
                    None => Err(TxnError::ConcurrentTransactions.into()),
                }
            }
        }
    }

    /// AddPartitionsToTxn (not verify-only) and AddOffsetsToTxn (with the group's
    /// `__consumer_offsets` partition) (Kafka's `handleAddPartitionsToTransaction`): answers
    /// `NONE` once the Ongoing record is written, or at once when every partition is already in.
    ///
    /// Errors: the decision's refusals, a failed append (the state is as before), the shard's
    /// status.
    pub(crate) fn add_partitions(
        &self,
        storage: &dyn TxnStateStorage,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<(), StateError> {
        let partition = self.partition_for(transactional_id);
        let transit = {
            let mut st = self.ready(partition)?;
            match decisions::prepare_add_partitions(
                st.txns.get_mut(transactional_id),
                producer_id,
                producer_epoch,
                partitions,
                now_ms,
            )? {
                AddPartitionsOutcome::AlreadyInTransaction => return Ok(()),
                AddPartitionsOutcome::Append(t) => t,
            }
        };
        self.write(storage, partition, &transit, false, now_ms, |md| Self::complete(md, &transit))
    }

    /// AddPartitionsToTxn v4+ `verify_only` ([`decisions::verify_partitions`]): nothing written.
    ///
    /// Errors: the decision's refusals, the shard's status.
    pub(crate) fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<Vec<(TopicPartition, i16)>, StateError> {
        let st = self.ready(self.partition_for(transactional_id))?;
        Ok(decisions::verify_partitions(st.txns.get(transactional_id), producer_id, producer_epoch, partitions)?)
    }

    /// EndTxn (Kafka's `handleEndTransaction`): writes PrepareCommit / PrepareAbort, then answers
    /// `NONE` with the markers to write; a retry of a completed outcome answers `NONE` without.
    ///
    /// Errors: the decision's refusals, a failed append (the state is as before), the shard's
    /// status.
    pub(crate) fn end_txn(
        &self,
        storage: &dyn TxnStateStorage,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<EndTxnAnswer, StateError> {
        let partition = self.partition_for(transactional_id);
        let outcome = {
            let mut st = self.ready(partition)?;
            decisions::prepare_end_txn(
                st.txns.get_mut(transactional_id),
                producer_id,
                producer_epoch,
                result,
                true,
                now_ms,
            )?
        };
        self.write_end(storage, partition, outcome, result, now_ms)
    }

    /// After every marker of `markers` is written: writes the CompleteCommit / CompleteAbort
    /// record and applies it (Kafka's `TransactionMarkerChannelManager.tryAppendToLog`). On a
    /// failed append the Complete transition stays pending (nothing else may change the id) and
    /// the caller retries with the same `markers` (the markers need not be written again), as
    /// Kafka retries; a restart replays the Prepare* record and writes the markers again.
    ///
    /// Errors: a failed append; `NOT_COORDINATOR` when the id is gone; `UNKNOWN_SERVER_ERROR`
    /// when the metadata no longer expects this Complete transition.
    pub(crate) fn complete_markers(
        &self,
        storage: &dyn TxnStateStorage,
        markers: &TxnMarkers,
        now_ms: i64,
    ) -> Result<(), StateError> {
        let partition = markers.txn_partition;
        let id = markers.transactional_id.as_str();
        let (key, value) = record_of(&markers.complete)?;
        storage
            .append(partition, key, value, now_ms)
            .map_err(|(log_code, message)| StateError::Append { partition, log_code, message })
            .inspect_err(|e| tracing::warn!(transactional_id = id, "writing the end of the transaction: {e}"))?;
        let mut st = self.lock(partition);
        let md = st.txns.get_mut(id).ok_or_else(|| StateError::NotCoordinator {
            partition,
            reason: format!("transactional id {id} vanished"),
        })?;
        Self::complete(md, &markers.complete)
    }

    /// The transactions open longer than their timeout (Kafka's `timedOutTransactions`): Ongoing,
    /// no transition under way, `txn_start_timestamp_ms + txn_timeout_ms < now_ms`; loading
    /// shards are skipped. Each is then aborted with [`Self::abort_timed_out`].
    pub(crate) fn expired_transactions(&self, now_ms: i64) -> Vec<TimedOutTxn> {
        let mut out = Vec::new();
        for p in 0..self.config.num_partitions {
            let st = self.lock(p);
            if st.status != ShardStatus::Loaded {
                continue;
            }
            out.extend(st.txns.values().filter(|md| md.is_timed_out(now_ms)).map(|md| TimedOutTxn {
                transactional_id: md.transactional_id.clone(),
                producer_id: md.producer_id,
                producer_epoch: md.producer_epoch,
            }));
        }
        out
    }

    /// Aborts a transaction found by [`Self::expired_transactions`] (Kafka's
    /// `abortTimedOutTransactions`): unless its producer id or epoch changed, a transition is
    /// under way or it is no longer timed out (then `Ok(None)`), the producer is fenced (epoch
    /// bumped) and PrepareAbort written; returns the ABORT markers to write.
    ///
    /// Errors: the decision's refusals, a failed append (the state is as before, but the next
    /// fence reuses the bumped epoch), the shard's status.
    pub(crate) fn abort_timed_out(
        &self,
        storage: &dyn TxnStateStorage,
        txn: &TimedOutTxn,
        now_ms: i64,
    ) -> Result<Option<TxnMarkers>, StateError> {
        let partition = self.partition_for(&txn.transactional_id);
        let outcome = {
            let mut st = self.ready(partition)?;
            let Some(md) = st.txns.get_mut(&txn.transactional_id) else { return Ok(None) };
            if md.producer_id != txn.producer_id || md.producer_epoch != txn.producer_epoch {
                return Ok(None);
            }
            match decisions::prepare_abort_timed_out(md, now_ms) {
                None => return Ok(None),
                Some(outcome) => outcome?,
            }
        };
        tracing::info!(transactional_id = txn.transactional_id, "aborting a transaction open past its timeout");
        Ok(self.write_end(storage, partition, outcome, TxnResult::Abort, now_ms)?.markers)
    }

    /// Removes the transactional ids not updated for `transactional.id.expiration.ms` in Empty,
    /// CompleteCommit or CompleteAbort (Kafka's `removeExpiredTransactionalIds`): each gets
    /// Dead pending and a tombstone; once written, the id is forgotten unless it changed
    /// meanwhile; a failed write keeps it (and is logged). Shards are visited one at a time.
    /// Returns the ids removed.
    pub(crate) fn remove_expired_transactional_ids(&self, storage: &dyn TxnStateStorage, now_ms: i64) -> Vec<String> {
        let mut removed = Vec::new();
        for p in 0..self.config.num_partitions {
            let dead: Vec<TxnTransitMetadata> = {
                let mut st = self.lock(p);
                if st.status != ShardStatus::Loaded {
                    continue;
                }
                let expiration = self.config.transactional_id_expiration_ms;
                st.txns
                    .values_mut()
                    .filter(|md| md.should_expire(now_ms, expiration))
                    .filter_map(|md| md.prepare_dead().ok())
                    .collect()
            };
            for t in dead {
                let id = t.transactional_id.clone();
                // Dead stays pending after the tombstone is written (no other change may start),
                // so the id is removed under the next lock only if nothing changed it meanwhile
                // (Kafka's check: still Dead pending, the same epoch).
                let written = self.write(storage, p, &t, false, now_ms, |md| {
                    let same = md.producer_epoch == t.producer_epoch;
                    if !same {
                        md.pending_state = None;
                    }
                    Ok(same)
                });
                if let Ok(true) = written {
                    let mut st = self.lock(p);
                    if st.txns.get(&id).is_some_and(|md| md.pending_state == Some(TransactionState::Dead)) {
                        st.txns.remove(&id);
                        removed.push(id);
                    }
                }
            }
        }
        removed
    }

    /// Replays every `__transaction_state` partition from `storage` (see the module docs),
    /// ends the shards' loading, and returns the transactions left in PrepareCommit /
    /// PrepareAbort, their Complete transition pending: write their markers, then
    /// [`Self::complete_markers`]. Each partition is read with no lock held and installed under
    /// its lock.
    pub(crate) fn load(&self, storage: &dyn TxnStateStorage, now_ms: i64) -> Vec<TxnMarkers> {
        let mut pending = Vec::new();
        for p in 0..self.config.num_partitions {
            let records = match storage.read(p) {
                Ok(r) => r,
                Err((code, message)) => {
                    tracing::warn!("{TRANSACTION_STATE_TOPIC}-{p} cannot be loaded ({code}): {message}");
                    self.lock(p).status = ShardStatus::Failed(message);
                    continue;
                }
            };
            let mut txns: HashMap<String, TransactionMetadata> = HashMap::new();
            for (key, value) in &records {
                match decode_record(key.as_deref(), value.as_deref()) {
                    Ok(TransactionLogRecord::Transaction { key, value: None }) => {
                        txns.remove(&key.transactional_id);
                    }
                    Ok(TransactionLogRecord::Transaction { key, value: Some(v) }) => {
                        match TransactionMetadata::from_record_value(key.transactional_id.clone(), &v) {
                            Ok(md) => {
                                txns.insert(key.transactional_id, md);
                            }
                            Err(e) => tracing::warn!("{TRANSACTION_STATE_TOPIC}-{p}: {e}; record skipped"),
                        }
                    }
                    Ok(TransactionLogRecord::Unknown { key_version, .. }) => {
                        tracing::debug!("{TRANSACTION_STATE_TOPIC}-{p}: key version {key_version} skipped");
                    }
                    Err(e) => tracing::warn!("{TRANSACTION_STATE_TOPIC}-{p}: {e}; record skipped"),
                }
            }
            let mut st = self.lock(p);
            for md in txns.values_mut() {
                let result = match md.state {
                    TransactionState::PrepareCommit => TxnResult::Commit,
                    TransactionState::PrepareAbort => TxnResult::Abort,
                    _ => continue,
                };
                match self.markers_after_prepare(md, p, result, now_ms) {
                    Ok(m) => pending.push(m),
                    Err(e) => tracing::warn!(transactional_id = md.transactional_id, "not completed at load: {e}"),
                }
            }
            tracing::debug!("{TRANSACTION_STATE_TOPIC}-{p}: {} transactional ids loaded", txns.len());
            st.txns = txns;
            st.status = ShardStatus::Loaded;
        }
        pending
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    use super::*;
    use crate::broker::txn_coordinator::storage::{MemStorage, StorageError, StoredRecord};
    use crate::protocol::transaction_state::{TransactionLogValue, TxnPartitions};

    const TIMEOUT: i32 = 60_000;

    pub(in crate::broker::txn_coordinator) fn set(items: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
        items.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    /// A loaded manager whose producer ids count from 1000.
    fn manager(config: TxnStateConfig) -> TransactionStateManager {
        let next = Arc::new(AtomicI64::new(1000));
        let m = TransactionStateManager::new(config, Box::new(move || Ok(next.fetch_add(1, Ordering::SeqCst))));
        assert!(m.load(&MemStorage::default(), 0).is_empty());
        m
    }

    /// The decoded records of `id`'s partition: (id, state id or `None` for a tombstone, value).
    fn decoded(
        m: &TransactionStateManager,
        storage: &MemStorage,
        id: &str,
    ) -> Vec<(String, Option<TransactionLogValue>)> {
        storage
            .records(m.partition_for(id))
            .iter()
            .map(|(k, v)| match decode_record(Some(k), v.as_deref()).unwrap() {
                TransactionLogRecord::Transaction { key, value } => (key.transactional_id, value),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn last_state(m: &TransactionStateManager, storage: &MemStorage, id: &str) -> Option<TransactionState> {
        let records = decoded(m, storage, id);
        let (_, value) = records.last().expect("a record");
        value.as_ref().map(|v| TransactionState::from_id(v.transaction_status).unwrap())
    }

    fn ready(answer: InitProducerIdAnswer) -> (i64, i16) {
        match answer {
            InitProducerIdAnswer::Ready(p) => (p.producer_id, p.epoch),
            other => panic!("{other:?}"),
        }
    }

    pub(in crate::broker::txn_coordinator) fn init(
        m: &TransactionStateManager,
        s: &dyn TxnStateStorage,
        id: &str,
        now: i64,
    ) -> (i64, i16) {
        ready(m.init_producer_id(s, id, TIMEOUT, -1, -1, now).unwrap())
    }

    pub(in crate::broker::txn_coordinator) fn state(m: &TransactionStateManager, id: &str) -> TransactionMetadata {
        m.describe(id).unwrap().expect("known id")
    }

    #[test]
    fn commit_writes_each_step_and_returns_the_markers() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        assert_eq!(init(&m, &s, "tx", 10), (1000, 0));
        assert_eq!(last_state(&m, &s, "tx"), Some(TransactionState::Empty));
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0), ("b", 1)]), 20).unwrap();
        let records = decoded(&m, &s, "tx");
        let v = records.last().unwrap().1.as_ref().unwrap();
        assert_eq!((v.transaction_status, v.transaction_start_timestamp_ms, v.version), (1, 20, 0));
        assert_eq!(v.transaction_partitions.as_ref().unwrap().len(), 2);
        // Adding what is already in writes nothing.
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0)]), 21).unwrap();
        assert_eq!(s.len(), 2);

        let answer = m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 30).unwrap();
        let markers = answer.markers.clone().unwrap();
        assert_eq!((answer.producer_id, answer.producer_epoch), (1000, 0));
        assert_eq!(
            (markers.producer_id, markers.producer_epoch, markers.coordinator_epoch, markers.result),
            (1000, 0, 0, TxnResult::Commit)
        );
        assert_eq!(markers.partitions, set(&[("a", 0), ("b", 1)]));
        assert_eq!(markers.txn_partition, m.partition_for("tx"));
        assert_eq!(last_state(&m, &s, "tx"), Some(TransactionState::PrepareCommit));
        let md = state(&m, "tx");
        assert_eq!(
            (md.state, md.pending_state),
            (TransactionState::PrepareCommit, Some(TransactionState::CompleteCommit))
        );
        // Until the markers are written, the id waits.
        let e = m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 31).unwrap_err();
        assert_eq!(e.code(), errors::CONCURRENT_TRANSACTIONS);
        m.complete_markers(&s, &markers, 40).unwrap();
        let records = decoded(&m, &s, "tx");
        let v = records.last().unwrap().1.as_ref().unwrap();
        assert_eq!(v.transaction_status, TransactionState::CompleteCommit.id());
        assert_eq!(v.transaction_partitions, Some(vec![]));
        assert_eq!(s.len(), 4);
        assert_eq!(state(&m, "tx").state, TransactionState::CompleteCommit);
        // A retried EndTxn: NONE, no markers, nothing written.
        let again = m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 50).unwrap();
        assert_eq!(again, EndTxnAnswer { producer_id: 1000, producer_epoch: 0, markers: None });
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn abort_then_a_new_epoch() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        init(&m, &s, "tx", 10);
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("__consumer_offsets", 7)]), 20).unwrap();
        let markers = m.end_txn(&s, "tx", 1000, 0, TxnResult::Abort, 30).unwrap().markers.unwrap();
        assert_eq!((markers.result, markers.partitions.clone()), (TxnResult::Abort, set(&[("__consumer_offsets", 7)])));
        assert_eq!(last_state(&m, &s, "tx"), Some(TransactionState::PrepareAbort));
        m.complete_markers(&s, &markers, 40).unwrap();
        assert_eq!(last_state(&m, &s, "tx"), Some(TransactionState::CompleteAbort));
        // Commit after the abort is INVALID_TXN_STATE; InitProducerId bumps the epoch.
        assert_eq!(m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 45).unwrap_err().code(), errors::INVALID_TXN_STATE);
        assert_eq!(init(&m, &s, "tx", 50), (1000, 1));
        // The old epoch is fenced (INVALID_PRODUCER_EPOCH for AddPartitionsToTxn v1).
        let e = m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0)]), 60).unwrap_err();
        assert_eq!(e.code(), errors::PRODUCER_FENCED);
        assert_eq!(e.code_for(TxnApi::AddPartitionsToTxn, 1), errors::INVALID_PRODUCER_EPOCH);
        // Unknown ids and bad requests.
        assert_eq!(
            m.end_txn(&s, "nobody", 1, 0, TxnResult::Commit, 70).unwrap_err().code(),
            errors::INVALID_PRODUCER_ID_MAPPING
        );
        assert_eq!(
            m.init_producer_id(&s, "tx", TIMEOUT + DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, -1, -1, 80).unwrap_err().code(),
            errors::INVALID_TRANSACTION_TIMEOUT
        );
    }

    #[test]
    fn a_failed_append_leaves_the_state_and_answers_the_mapped_code() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        init(&m, &s, "tx", 10);
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0)]), 20).unwrap();
        let before = state(&m, "tx");
        let written = s.len();
        s.fail_with(Some(errors::KAFKA_STORAGE_ERROR));
        let e = m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 30).unwrap_err();
        assert_eq!(e.code(), errors::NOT_COORDINATOR);
        assert!(matches!(e, StateError::Append { log_code: errors::KAFKA_STORAGE_ERROR, .. }), "{e}");
        assert_eq!(state(&m, "tx"), before);
        s.fail_with(Some(errors::UNKNOWN_TOPIC_OR_PARTITION));
        let e = m.add_partitions(&s, "tx", 1000, 0, &set(&[("b", 0)]), 31).unwrap_err();
        assert_eq!(e.code(), errors::COORDINATOR_NOT_AVAILABLE);
        assert_eq!(state(&m, "tx"), before);
        // A new id's first record fails: the retry reuses its producer id.
        let e = m.init_producer_id(&s, "other", TIMEOUT, -1, -1, 32).unwrap_err();
        assert_eq!(e.code(), errors::COORDINATOR_NOT_AVAILABLE);
        assert_eq!(s.len(), written);
        s.fail_with(None);
        assert_eq!(init(&m, &s, "other", 33), (1001, 0));
        // The client's retry goes through.
        let markers = m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 40).unwrap().markers.unwrap();
        // A failed Complete write keeps it pending; the retry completes.
        s.fail_with(Some(errors::KAFKA_STORAGE_ERROR));
        assert_eq!(m.complete_markers(&s, &markers, 50).unwrap_err().code(), errors::NOT_COORDINATOR);
        assert_eq!(state(&m, "tx").pending_state, Some(TransactionState::CompleteCommit));
        s.fail_with(None);
        m.complete_markers(&s, &markers, 51).unwrap();
        assert_eq!(state(&m, "tx").state, TransactionState::CompleteCommit);
    }

    #[test]
    fn init_with_an_open_transaction_fences_and_returns_abort_markers() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        init(&m, &s, "tx", 10);
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0)]), 20).unwrap();
        let markers = match m.init_producer_id(&s, "tx", TIMEOUT, -1, -1, 30).unwrap() {
            InitProducerIdAnswer::AbortingOpenTransaction(markers) => markers,
            other => panic!("{other:?}"),
        };
        assert_eq!((markers.producer_epoch, markers.result), (1, TxnResult::Abort));
        let records = decoded(&m, &s, "tx");
        let v = records.last().unwrap().1.as_ref().unwrap();
        assert_eq!((v.transaction_status, v.producer_epoch), (TransactionState::PrepareAbort.id(), 1));
        // The old producer is fenced; a retry of InitProducerId waits for the markers.
        assert_eq!(m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 31).unwrap_err().code(), errors::PRODUCER_FENCED);
        assert_eq!(
            m.init_producer_id(&s, "tx", TIMEOUT, -1, -1, 32).unwrap_err().code(),
            errors::CONCURRENT_TRANSACTIONS
        );
        m.complete_markers(&s, &markers, 40).unwrap();
        assert_eq!(init(&m, &s, "tx", 50), (1000, 2));
    }

    #[test]
    fn an_exhausted_epoch_rotates_to_a_new_producer_id() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        assert_eq!(init(&m, &s, "tx", 10), (1000, 0));
        m.lock(m.partition_for("tx")).txns.get_mut("tx").unwrap().producer_epoch = i16::MAX - 1;
        // The id is generated before the decision, with no shard lock held.
        assert_eq!(init(&m, &s, "tx", 20), (1001, 0));
        let md = state(&m, "tx");
        assert_eq!((md.producer_id, md.previous_producer_id, md.producer_epoch), (1001, 1000, 0));
        let records = decoded(&m, &s, "tx");
        let v = records.last().unwrap().1.as_ref().unwrap();
        assert_eq!((v.producer_id, v.producer_epoch), (1001, 0));
        // An ordinary bump generates nothing.
        assert_eq!(init(&m, &s, "tx", 30), (1001, 1));
        assert_eq!(init(&m, &s, "other", 40), (1002, 0));
    }

    #[test]
    fn a_record_that_cannot_be_encoded_is_invalid_request() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        let long = "x".repeat(40_000);
        let e = m.init_producer_id(&s, &long, TIMEOUT, -1, -1, 1).unwrap_err();
        assert_eq!(e.code(), errors::INVALID_REQUEST, "{e}");
        assert_eq!(s.len(), 0);
        assert_eq!(state(&m, &long).pending_state, None);
    }

    /// A `__transaction_state` value for the load tests.
    fn value(state: TransactionState, partitions: &[(&str, i32)], epoch: i16) -> Vec<u8> {
        let transaction_partitions = (state != TransactionState::Empty).then(|| {
            partitions
                .iter()
                .map(|(t, p)| TxnPartitions {
                    topic: t.to_string(),
                    partition_ids: vec![*p],
                    unknown_tagged_fields: vec![],
                })
                .collect()
        });
        TransactionLogValue {
            version: 0,
            producer_id: 7,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: epoch,
            transaction_timeout_ms: TIMEOUT,
            transaction_status: state.id(),
            transaction_partitions,
            transaction_last_update_timestamp_ms: 100,
            transaction_start_timestamp_ms: if state == TransactionState::Empty { -1 } else { 90 },
            client_transaction_version: 0,
            unknown_tagged_fields: vec![],
        }
        .encode()
        .unwrap()
    }

    #[test]
    fn load_replays_tombstones_and_reports_prepared_transactions() {
        let config = TxnStateConfig::default();
        let probe = manager(config.clone());
        let s = MemStorage::default();
        let put = |id: &str, v: Option<Vec<u8>>| {
            s.append(probe.partition_for(id), TransactionLogKey::new(id).encode().unwrap(), v, 0).unwrap()
        };
        use TransactionState::*;
        put("gone", Some(value(Empty, &[], 0)));
        put("gone", Some(value(Ongoing, &[("a", 0)], 0)));
        put("gone", None);
        put("left", Some(value(Ongoing, &[("a", 0), ("b", 2)], 3)));
        put("left", Some(value(PrepareCommit, &[("a", 0), ("b", 2)], 3)));
        put("aborting", Some(value(PrepareAbort, &[("c", 1)], 4)));
        put("done", Some(value(CompleteAbort, &[], 1)));
        // A key of an unknown version and an undecodable value are skipped.
        let p = probe.partition_for("done");
        s.append(p, vec![0, 9, 1, 2], Some(vec![1, 2, 3]), 0).unwrap();
        s.append(p, TransactionLogKey::new("bad").encode().unwrap(), Some(vec![0, 0, 1]), 0).unwrap();

        let m = TransactionStateManager::new(config, Box::new(|| Ok(5000)));
        assert_eq!(m.describe("done").unwrap_err().code(), errors::COORDINATOR_LOAD_IN_PROGRESS);
        assert_eq!(
            m.end_txn(&s, "done", 7, 1, TxnResult::Abort, 1).unwrap_err().code(),
            errors::COORDINATOR_LOAD_IN_PROGRESS
        );
        let mut pending = m.load(&s, 1_000);
        pending.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        assert_eq!(pending.len(), 2, "{pending:?}");
        let (aborting, left) = (&pending[0], &pending[1]);
        assert_eq!(
            (aborting.transactional_id.as_str(), aborting.result, aborting.producer_epoch),
            ("aborting", TxnResult::Abort, 4)
        );
        assert_eq!((left.transactional_id.as_str(), left.result, left.producer_id), ("left", TxnResult::Commit, 7));
        assert_eq!(left.partitions, set(&[("a", 0), ("b", 2)]));
        assert_eq!(m.describe("gone").unwrap(), None);
        assert_eq!(m.describe("bad").unwrap(), None);
        assert_eq!(state(&m, "done").state, CompleteAbort);
        assert_eq!(state(&m, "left").pending_state, Some(CompleteCommit));
        // Completing the recovered transactions.
        for markers in &pending {
            m.complete_markers(&s, markers, 2_000).unwrap();
        }
        assert_eq!(state(&m, "left").state, CompleteCommit);
        assert_eq!(last_state(&m, &s, "aborting"), Some(CompleteAbort));
        // The loaded ids serve requests: "done" gets epoch 2.
        assert_eq!(ready(m.init_producer_id(&s, "done", TIMEOUT, -1, -1, 3_000).unwrap()), (7, 2));
    }

    /// A storage whose partitions cannot be read.
    struct Unreadable;

    impl TxnStateStorage for Unreadable {
        fn append(&self, _: i32, _: Vec<u8>, _: Option<Vec<u8>>, _: i64) -> Result<(), StorageError> {
            Ok(())
        }
        fn read(&self, _: i32) -> Result<Vec<StoredRecord>, StorageError> {
            Err((errors::KAFKA_STORAGE_ERROR, "disk gone".into()))
        }
    }

    #[test]
    fn a_partition_that_cannot_be_read_is_not_coordinated() {
        let m = TransactionStateManager::new(
            TxnStateConfig { num_partitions: 2, ..Default::default() },
            Box::new(|| Ok(1)),
        );
        assert!(m.load(&Unreadable, 0).is_empty());
        assert_eq!(
            m.init_producer_id(&Unreadable, "x", TIMEOUT, -1, -1, 1).unwrap_err().code(),
            errors::NOT_COORDINATOR
        );
    }

    #[test]
    fn timed_out_transactions_are_fenced_and_aborted() {
        let (m, s) = (manager(TxnStateConfig::default()), MemStorage::default());
        init(&m, &s, "tx", 10);
        init(&m, &s, "idle", 10);
        m.add_partitions(&s, "tx", 1000, 0, &set(&[("a", 0)]), 1_000).unwrap();
        assert!(m.expired_transactions(61_000).is_empty());
        let expired = m.expired_transactions(61_001);
        assert_eq!(expired, vec![TimedOutTxn { transactional_id: "tx".into(), producer_id: 1000, producer_epoch: 0 }]);
        // A stale find (another epoch) does nothing.
        let stale = TimedOutTxn { producer_epoch: 5, ..expired[0].clone() };
        assert_eq!(m.abort_timed_out(&s, &stale, 61_001).unwrap(), None);
        // A failed write: nothing changes, the next fence does not bump twice.
        s.fail_with(Some(errors::KAFKA_STORAGE_ERROR));
        assert!(m.abort_timed_out(&s, &expired[0], 61_001).is_err());
        assert_eq!(state(&m, "tx").state, TransactionState::Ongoing);
        s.fail_with(None);
        let expired = m.expired_transactions(61_002);
        let markers = m.abort_timed_out(&s, &expired[0], 61_002).unwrap().unwrap();
        assert_eq!(
            (markers.result, markers.producer_epoch, markers.partitions.clone()),
            (TxnResult::Abort, 1, set(&[("a", 0)]))
        );
        assert!(m.expired_transactions(i64::MAX).is_empty(), "PrepareAbort is no longer Ongoing");
        m.complete_markers(&s, &markers, 61_003).unwrap();
        assert_eq!(
            m.end_txn(&s, "tx", 1000, 0, TxnResult::Commit, 61_004).unwrap_err().code(),
            errors::PRODUCER_FENCED
        );
        assert_eq!(state(&m, "tx").state, TransactionState::CompleteAbort);
    }

    #[test]
    fn transactional_ids_expire_with_a_tombstone() {
        let config = TxnStateConfig { transactional_id_expiration_ms: 1_000, ..Default::default() };
        let (m, s) = (manager(config), MemStorage::default());
        init(&m, &s, "old", 0);
        init(&m, &s, "open", 0);
        m.add_partitions(&s, "open", 1001, 0, &set(&[("a", 0)]), 0).unwrap();
        assert!(m.remove_expired_transactional_ids(&s, 999).is_empty());
        // A failed tombstone keeps the id, usable.
        s.fail_with(Some(errors::KAFKA_STORAGE_ERROR));
        assert!(m.remove_expired_transactional_ids(&s, 1_000).is_empty());
        assert_eq!(state(&m, "old").pending_state, None);
        s.fail_with(None);
        assert_eq!(m.remove_expired_transactional_ids(&s, 1_000), vec!["old".to_string()]);
        assert_eq!(decoded(&m, &s, "old").last().unwrap(), &("old".to_string(), None));
        assert_eq!(m.describe("old").unwrap(), None);
        assert!(m.describe("open").unwrap().is_some(), "an Ongoing transaction never expires");
        // The id starts over with a new producer id.
        assert_eq!(init(&m, &s, "old", 2_000), (1002, 0));
    }

    /// Two ids of different partitions.
    fn ids_in_two_partitions(m: &TransactionStateManager) -> (String, String) {
        let a = "id-0".to_string();
        let b = (1..).map(|i| format!("id-{i}")).find(|b| m.partition_for(b) != m.partition_for(&a)).unwrap();
        (a, b)
    }

    #[test]
    fn ids_of_different_partitions_proceed_under_different_locks() {
        let m = Arc::new(manager(TxnStateConfig::default()));
        let s = Arc::new(MemStorage::default());
        let (a, b) = ids_in_two_partitions(&m);
        let held = m.lock(m.partition_for(&a));
        let spawn = |id: String| {
            let (m, s, (tx, rx)) = (Arc::clone(&m), Arc::clone(&s), mpsc::channel());
            std::thread::spawn(move || tx.send(init(&m, &*s, &id, 1)).unwrap());
            rx
        };
        let rx_a = spawn(a.clone());
        let rx_b = spawn(b.clone());
        assert!(rx_b.recv_timeout(Duration::from_secs(10)).is_ok(), "b's partition is not locked");
        assert!(rx_a.recv_timeout(Duration::from_millis(200)).is_err(), "a waits for its partition's lock");
        drop(held);
        assert!(rx_a.recv_timeout(Duration::from_secs(10)).is_ok());
    }

    /// Blocks the appends of one key until released.
    struct GatedStorage {
        inner: MemStorage,
        gated_key: Vec<u8>,
        entered: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl TxnStateStorage for GatedStorage {
        fn append(
            &self,
            partition: i32,
            key: Vec<u8>,
            value: Option<Vec<u8>>,
            now_ms: i64,
        ) -> Result<(), StorageError> {
            if key == self.gated_key {
                self.entered.lock().unwrap().send(()).unwrap();
                self.release.lock().unwrap().recv_timeout(Duration::from_secs(10)).unwrap();
            }
            self.inner.append(partition, key, value, now_ms)
        }
        fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, StorageError> {
            self.inner.read(partition)
        }
    }

    /// While one id's record is being appended, another id of the same partition is served, and
    /// the first id's next request is told to retry.
    #[test]
    fn an_append_in_flight_blocks_only_its_own_id() {
        let m = Arc::new(manager(TxnStateConfig::default()));
        let a = "id-0".to_string();
        let b = (1..).map(|i| format!("id-{i}")).find(|b| m.partition_for(b) == m.partition_for(&a)).unwrap();
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let s = Arc::new(GatedStorage {
            inner: MemStorage::default(),
            gated_key: TransactionLogKey::new(a.clone()).encode().unwrap(),
            entered: Mutex::new(entered_tx),
            release: Mutex::new(release_rx),
        });
        let first = {
            let (m, s, a) = (Arc::clone(&m), Arc::clone(&s), a.clone());
            std::thread::spawn(move || m.init_producer_id(&*s, &a, TIMEOUT, -1, -1, 1))
        };
        entered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // a's Empty record is in flight: b (same partition) proceeds; a waits.
        assert_eq!(init(&m, &*s, &b, 2), (1001, 0));
        assert_eq!(
            m.init_producer_id(&*s, &a, TIMEOUT, -1, -1, 3).unwrap_err().code(),
            errors::CONCURRENT_TRANSACTIONS
        );
        release_tx.send(()).unwrap();
        assert_eq!(ready(first.join().unwrap().unwrap()), (1000, 0));
        assert_eq!(s.inner.len(), 2);
    }

    /// Records, for every append, whether a shard lock was held.
    struct CheckingStorage<'a> {
        manager: &'a TransactionStateManager,
        inner: MemStorage,
        violations: Mutex<usize>,
    }

    impl TxnStateStorage for CheckingStorage<'_> {
        fn append(
            &self,
            partition: i32,
            key: Vec<u8>,
            value: Option<Vec<u8>>,
            now_ms: i64,
        ) -> Result<(), StorageError> {
            let locked = self.manager.shards.iter().filter(|s| s.try_lock().is_err()).count();
            *self.violations.lock().unwrap() += locked;
            self.inner.append(partition, key, value, now_ms)
        }
        fn read(&self, partition: i32) -> Result<Vec<StoredRecord>, StorageError> {
            let locked = self.manager.shards.iter().filter(|s| s.try_lock().is_err()).count();
            *self.violations.lock().unwrap() += locked;
            self.inner.read(partition)
        }
    }

    #[test]
    fn no_lock_is_held_across_an_append() {
        let config = TxnStateConfig { transactional_id_expiration_ms: 10, ..Default::default() };
        let m = TransactionStateManager::new(config, Box::new(|| Ok(42)));
        let s = CheckingStorage { manager: &m, inner: MemStorage::default(), violations: Mutex::new(0) };
        m.load(&s, 0);
        init(&m, &s, "tx", 0);
        m.add_partitions(&s, "tx", 42, 0, &set(&[("a", 0)]), 0).unwrap();
        let markers = m.abort_timed_out(&s, &m.expired_transactions(TIMEOUT as i64 + 1)[0], 61_000).unwrap().unwrap();
        m.complete_markers(&s, &markers, 61_001).unwrap();
        assert_eq!(m.remove_expired_transactional_ids(&s, 70_000), vec!["tx".to_string()]);
        assert_eq!(s.inner.len(), 5, "Empty, Ongoing, PrepareAbort, CompleteAbort, tombstone");
        assert_eq!(*s.violations.lock().unwrap(), 0);
    }
}
