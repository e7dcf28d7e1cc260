//! One transactional id's state as a pure state machine: Kafka's `TransactionState`,
//! `TransactionMetadata` and `TxnTransitMetadata` (`core/.../coordinator/transaction/
//! TransactionMetadata.scala`, Kafka 4.0), without the lock (the owner holds it) and without a
//! clock (every call that stamps a time takes `now_ms`).
//!
//! Kafka changes a transactional id in two steps, and so does this module:
//!
//! 1. `prepare_*` checks that the target state may follow the current one
//!    ([`TransactionState::valid_previous_states`]), marks it as the *pending* state (no other
//!    change may start meanwhile: [`TransactionMetadata::pending_transition_in_progress`]) and
//!    returns the target as a [`TxnTransitMetadata`], which becomes a `__transaction_state`
//!    record ([`TxnTransitMetadata::to_record_value`], Kafka's `TransactionLog.valueToBytes`);
//! 2. after that record was appended, [`TransactionMetadata::complete_transition_to`] applies it
//!    (Kafka's `completeTransitionTo`, with its checks); if the append failed,
//!    [`TransactionMetadata::abort_pending_transition`] forgets the pending state.
//!
//! ```text
//!   Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
//!     ^  (InitProducerId:      |  \--EndTxn(abort)----> PrepareAbort ---markers--> CompleteAbort
//!     |   epoch bump)          |                         ^
//!     |                        +--InitProducerId / timeout: PrepareEpochFence (never written;
//!     |                           it becomes PrepareAbort at once, with the bumped epoch)
//!   Empty, CompleteCommit, CompleteAbort --InitProducerId--> Empty; --AddPartitions--> Ongoing;
//!   --transactional.id.expiration.ms--> Dead (a tombstone).
//! ```
//!
//! Kafka throws `IllegalStateException` when a transition breaks these rules (a coordinator bug,
//! never a client's fault); here that is a [`TransitionError`], returned.
//!
//! Not here: the epoch bump on every EndTxn of `transaction.version` 2 (KIP-890 part 2, EndTxn v5):
//! this broker advertises no `transaction.version` feature, so clients use the classic protocol,
//! in which the epoch only changes at InitProducerId and when a producer is fenced.
//! [`TransactionMetadata::client_transaction_version`] is carried to and from the record only.

use std::collections::BTreeSet;
use std::fmt;

use crate::protocol::transaction_state::{TransactionLogValue, TxnPartitions};

/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub(crate) const NO_PRODUCER_ID: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub(crate) const NO_PRODUCER_EPOCH: i16 = -1;

/// A partition in a transaction: topic name and partition index.
pub(crate) type TopicPartition = (String, i32);

/// The state of a transactional id (Kafka's `TransactionState`); [`TransactionState::id`] is
/// the `transaction_status` byte of the `__transaction_state` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TransactionState {
    /// No transaction open (id 0).
    Empty,
    /// A transaction is open: partitions were added (id 1).
    Ongoing,
    /// EndTxn(commit) accepted; COMMIT markers are being written (id 2).
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout; ABORT markers are being written (id 3).
    PrepareAbort,
    /// The COMMIT markers are written (id 4).
    CompleteCommit,
    /// The ABORT markers are written (id 5).
    CompleteAbort,
    /// The transactional id expired and is being removed (id 6).
    Dead,
    /// The epoch is being bumped to fence the producer (id 7); only ever a pending state.
    PrepareEpochFence,
}

impl TransactionState {
    /// Every state, in id order.
    pub(crate) const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// The state's id in the `__transaction_state` record (Kafka's `TransactionState.id`).
    pub(crate) fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    /// The state of an id (Kafka's `TransactionState.fromId`); `None` for an unknown id.
    pub(crate) fn from_id(id: i8) -> Option<TransactionState> {
        usize::try_from(id).ok().and_then(|i| Self::ALL.get(i).copied())
    }

    /// The name DescribeTransactions and ListTransactions report (Kafka's `TransactionState.name`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The states this one may follow (Kafka's `validPreviousStates`).
    pub(crate) fn valid_previous_states(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether a transactional id in this state may expire after `transactional.id.expiration.ms`
    /// without updates (Kafka's `isExpirationAllowed`: Empty, CompleteCommit, CompleteAbort).
    pub(crate) fn is_expiration_allowed(self) -> bool {
        matches!(self, TransactionState::Empty | TransactionState::CompleteCommit | TransactionState::CompleteAbort)
    }
}

impl fmt::Display for TransactionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A transition Kafka refuses with `IllegalStateException` / `IllegalArgumentException`: a
/// coordinator bug or a corrupt record, never a client error (the client gets
/// `UNKNOWN_SERVER_ERROR`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TransitionError {
    /// A transition was prepared while another is pending.
    #[error("transactional id {transactional_id}: cannot prepare {target} while {pending} is pending")]
    PendingTransition {
        /// The transactional id.
        transactional_id: String,
        /// The pending target.
        pending: TransactionState,
        /// The refused target.
        target: TransactionState,
    },
    /// The target state may not follow the current one.
    #[error("transactional id {transactional_id}: {to} may not follow {from}")]
    InvalidTransition {
        /// The transactional id.
        transactional_id: String,
        /// The current state.
        from: TransactionState,
        /// The refused target.
        to: TransactionState,
    },
    /// A target producer id or epoch is negative.
    #[error(
        "transactional id {transactional_id}: illegal producer id {producer_id} / epoch {producer_epoch} for {target}"
    )]
    IllegalProducerIdOrEpoch {
        /// The transactional id.
        transactional_id: String,
        /// The target producer id.
        producer_id: i64,
        /// The target epoch.
        producer_epoch: i16,
        /// The target state.
        target: TransactionState,
    },
    /// The epoch cannot be bumped: fencing at `i16::MAX`, or an increment of an exhausted epoch.
    #[error("transactional id {transactional_id}: producer {producer_id} epoch {producer_epoch} cannot be bumped")]
    EpochOverflow {
        /// The transactional id.
        transactional_id: String,
        /// The producer id.
        producer_id: i64,
        /// The current epoch.
        producer_epoch: i16,
    },
    /// Producer id rotation while a transaction is open.
    #[error("transactional id {transactional_id}: cannot rotate the producer id in state {state}")]
    PendingTransaction {
        /// The transactional id.
        transactional_id: String,
        /// The current state.
        state: TransactionState,
    },
    /// `complete_transition_to` without a pending state, or with another target than the pending one.
    #[error("transactional id {transactional_id}: completing {target}, but the pending state is {pending:?}")]
    NotPending {
        /// The transactional id.
        transactional_id: String,
        /// The target completed.
        target: TransactionState,
        /// The pending state.
        pending: Option<TransactionState>,
    },
    /// The completed target does not match the metadata (Kafka's `throwStateTransitionFailure`).
    #[error("transactional id {transactional_id}: unexpected metadata completing {target}: {reason}")]
    UnexpectedMetadata {
        /// The transactional id.
        transactional_id: String,
        /// The target completed.
        target: TransactionState,
        /// Which check failed.
        reason: &'static str,
    },
    /// A record's status byte is no known state.
    #[error("transactional id {transactional_id}: unknown transaction state id {id}")]
    UnknownState {
        /// The transactional id.
        transactional_id: String,
        /// The status byte.
        id: i8,
    },
    /// An Empty target with partitions (Kafka's `valueToBytes` refuses it).
    #[error("transactional id {transactional_id}: state Empty with {count} partitions")]
    PartitionsInEmpty {
        /// The transactional id.
        transactional_id: String,
        /// How many partitions.
        count: usize,
    },
}

/// The target of a transition (Kafka's `TxnTransitMetadata`): what is written to
/// `__transaction_state` and, once written, applied by
/// [`TransactionMetadata::complete_transition_to`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxnTransitMetadata {
    /// The transactional id.
    pub(crate) transactional_id: String,
    /// The producer id after the transition.
    pub(crate) producer_id: i64,
    /// The producer id before it (Kafka sets the current one).
    pub(crate) prev_producer_id: i64,
    /// KIP-890's next producer id (always -1 here).
    pub(crate) next_producer_id: i64,
    /// The epoch after the transition.
    pub(crate) producer_epoch: i16,
    /// The previous epoch, for an idempotent retry of InitProducerId (-1 = none; not in the record).
    pub(crate) last_producer_epoch: i16,
    /// `transaction.timeout.ms`.
    pub(crate) txn_timeout_ms: i32,
    /// The target state.
    pub(crate) txn_state: TransactionState,
    /// The partitions of the transaction after the transition.
    pub(crate) topic_partitions: BTreeSet<TopicPartition>,
    /// When the transaction started (ms), -1 for none.
    pub(crate) txn_start_timestamp_ms: i64,
    /// The time of the transition (ms).
    pub(crate) txn_last_update_timestamp_ms: i64,
    /// The client's `transaction.version` (0 here).
    pub(crate) client_transaction_version: i16,
}

impl TxnTransitMetadata {
    /// The `__transaction_state` value of this transition at `value_version` (0 or 1; Kafka's
    /// `TransactionLog.valueToBytes`): partitions grouped by topic, null in state Empty.
    ///
    /// Kafka writes v0 until the `transaction.version` feature is 1 or more; this broker
    /// advertises no such feature, so its coordinator should write v0. In v1 the tagged fields
    /// (previous / next producer id, client transaction version) are filled from the transition,
    /// as `readTxnRecordValue` reads them back; the Kafka source read for this (trunk, October
    /// 2024) sets only the client transaction version, and the others stay at their defaults there.
    ///
    /// Errors: [`TransitionError::PartitionsInEmpty`] for an Empty target with partitions.
    pub(crate) fn to_record_value(&self, value_version: i16) -> Result<TransactionLogValue, TransitionError> {
        let transaction_partitions = if self.txn_state == TransactionState::Empty {
            if !self.topic_partitions.is_empty() {
                return Err(TransitionError::PartitionsInEmpty {
                    transactional_id: self.transactional_id.clone(),
                    count: self.topic_partitions.len(),
                });
            }
            None
        } else {
            let mut topics: Vec<TxnPartitions> = Vec::new();
            for (topic, partition) in &self.topic_partitions {
                match topics.last_mut() {
                    Some(t) if &t.topic == topic => t.partition_ids.push(*partition),
                    _ => topics.push(TxnPartitions {
                        topic: topic.clone(),
                        partition_ids: vec![*partition],
                        unknown_tagged_fields: Vec::new(),
                    }),
                }
            }
            Some(topics)
        };
        let flexible = value_version >= 1;
        Ok(TransactionLogValue {
            version: value_version,
            producer_id: self.producer_id,
            previous_producer_id: if flexible { self.prev_producer_id } else { NO_PRODUCER_ID },
            next_producer_id: if flexible { self.next_producer_id } else { NO_PRODUCER_ID },
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.txn_timeout_ms,
            transaction_status: self.txn_state.id(),
            transaction_partitions,
            transaction_last_update_timestamp_ms: self.txn_last_update_timestamp_ms,
            transaction_start_timestamp_ms: self.txn_start_timestamp_ms,
            client_transaction_version: if flexible { self.client_transaction_version } else { 0 },
            unknown_tagged_fields: Vec::new(),
        })
    }
}

/// Whether `producer_epoch` leaves no room for another bump: the coordinator never hands out
/// `i16::MAX`, so that it can always fence (Kafka's `TransactionMetadata.isEpochExhausted`:
/// `epoch >= Short.MaxValue - 1`).
pub(crate) fn is_epoch_exhausted(producer_epoch: i16) -> bool {
    producer_epoch >= i16::MAX - 1
}

/// One transactional id's state (Kafka's `TransactionMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TransactionMetadata {
    /// The producer's `transactional.id`.
    pub(crate) transactional_id: String,
    /// The producer id in use.
    pub(crate) producer_id: i64,
    /// The producer id before the last change of producer id (-1 = none).
    pub(crate) previous_producer_id: i64,
    /// KIP-890's next producer id (-1 here).
    pub(crate) next_producer_id: i64,
    /// The current epoch (-1 until the first InitProducerId completes).
    pub(crate) producer_epoch: i16,
    /// The epoch before the last InitProducerId bump, for its idempotent retry (-1 = none).
    pub(crate) last_producer_epoch: i16,
    /// `transaction.timeout.ms` of the producer.
    pub(crate) txn_timeout_ms: i32,
    /// The current state.
    pub(crate) state: TransactionState,
    /// The partitions of the open transaction (sorted).
    pub(crate) topic_partitions: BTreeSet<TopicPartition>,
    /// When the open transaction started (ms), -1 for none.
    pub(crate) txn_start_timestamp_ms: i64,
    /// When the state last changed (ms); the clock of `transactional.id.expiration.ms`.
    pub(crate) txn_last_update_timestamp_ms: i64,
    /// The client's `transaction.version` when the state last changed.
    pub(crate) client_transaction_version: i16,
    /// The target of the transition under way, if any.
    pub(crate) pending_state: Option<TransactionState>,
    /// A fence's bumped epoch may not have been written; the next fence does not bump again
    /// (Kafka's `hasFailedEpochFence`).
    pub(crate) has_failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// The metadata InitProducerId creates for an unknown transactional id (Kafka's
    /// `handleInitProducerId`): a fresh producer id, epoch -1, state Empty, updated `now_ms`.
    pub(crate) fn new(transactional_id: impl Into<String>, producer_id: i64, txn_timeout_ms: i32, now_ms: i64) -> Self {
        TransactionMetadata {
            transactional_id: transactional_id.into(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms,
            state: TransactionState::Empty,
            topic_partitions: BTreeSet::new(),
            txn_start_timestamp_ms: -1,
            txn_last_update_timestamp_ms: now_ms,
            client_transaction_version: 0,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a `__transaction_state` value describes (Kafka's
    /// `TransactionLog.readTxnRecordValue`, replayed at start-up): last epoch -1, no pending
    /// state, partitions ignored in state Empty.
    ///
    /// Errors: [`TransitionError::UnknownState`] for a status byte that is no state.
    pub(crate) fn from_record_value(
        transactional_id: impl Into<String>,
        value: &TransactionLogValue,
    ) -> Result<Self, TransitionError> {
        let transactional_id = transactional_id.into();
        let state = TransactionState::from_id(value.transaction_status).ok_or_else(|| {
            TransitionError::UnknownState { transactional_id: transactional_id.clone(), id: value.transaction_status }
        })?;
        let topic_partitions = if state == TransactionState::Empty {
            BTreeSet::new()
        } else {
            value
                .transaction_partitions
                .iter()
                .flatten()
                .flat_map(|t| t.partition_ids.iter().map(move |p| (t.topic.clone(), *p)))
                .collect()
        };
        Ok(TransactionMetadata {
            transactional_id,
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            txn_timeout_ms: value.transaction_timeout_ms,
            state,
            topic_partitions,
            txn_start_timestamp_ms: value.transaction_start_timestamp_ms,
            txn_last_update_timestamp_ms: value.transaction_last_update_timestamp_ms,
            client_transaction_version: value.client_transaction_version,
            pending_state: None,
            has_failed_epoch_fence: false,
        })
    }

    /// Whether a transition is under way (Kafka's `pendingTransitionInProgress`).
    pub(crate) fn pending_transition_in_progress(&self) -> bool {
        self.pending_state.is_some()
    }

    /// Whether the current epoch is exhausted ([`is_epoch_exhausted`]).
    pub(crate) fn is_producer_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// Whether the open transaction passed its timeout: Ongoing, no transition under way, and
    /// `txn_start_timestamp_ms + txn_timeout_ms < now_ms` (Kafka's
    /// `TransactionStateManager.timedOutTransactions`).
    pub(crate) fn is_timed_out(&self, now_ms: i64) -> bool {
        !self.pending_transition_in_progress()
            && self.state == TransactionState::Ongoing
            && self.txn_start_timestamp_ms.saturating_add(i64::from(self.txn_timeout_ms)) < now_ms
    }

    /// Whether the transactional id should expire: its state allows it, no transition is under
    /// way, and it was last updated `transactional_id_expiration_ms` or more ago (Kafka's
    /// `TransactionStateManager.shouldExpire`). The owner then prepares Dead
    /// ([`TransactionMetadata::prepare_dead`]), writes a tombstone and forgets the id.
    pub(crate) fn should_expire(&self, now_ms: i64, transactional_id_expiration_ms: i64) -> bool {
        !self.pending_transition_in_progress()
            && self.state.is_expiration_allowed()
            && self.txn_last_update_timestamp_ms <= now_ms.saturating_sub(transactional_id_expiration_ms)
    }

    /// The transition to PrepareEpochFence with the epoch bumped (not bumped again after a
    /// failed fence): the first step of fencing the producer of an open transaction (Kafka's
    /// `prepareFenceProducerEpoch`). The bumped epoch is never returned to a client.
    ///
    /// Errors: [`TransitionError::EpochOverflow`] at `i16::MAX`; those of the transition.
    pub(crate) fn prepare_fence_producer_epoch(&mut self) -> Result<TxnTransitMetadata, TransitionError> {
        if self.producer_epoch == i16::MAX {
            return Err(self.epoch_overflow());
        }
        let bumped = if self.has_failed_epoch_fence { self.producer_epoch } else { self.producer_epoch + 1 };
        let partitions = self.topic_partitions.clone();
        self.prepare_transition_to(
            TransactionState::PrepareEpochFence,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            partitions,
            self.txn_start_timestamp_ms,
            self.txn_last_update_timestamp_ms,
        )
    }

    /// InitProducerId's epoch bump to Empty with the new timeout (Kafka's
    /// `prepareIncrementProducerEpoch`). Without `expected_producer_epoch` the epoch is bumped
    /// and the last epoch forgotten; with one (KIP-360, a producer recovering): equal to the
    /// current epoch (or no epoch yet) bumps and remembers the current as last; equal to the
    /// last epoch is a retry of a bump that succeeded, answered with the current epoch; anything
    /// else is `Ok(Err(PRODUCER_FENCED))`.
    ///
    /// Errors: [`TransitionError::EpochOverflow`] when the epoch is exhausted (the caller rotates
    /// the producer id instead); those of the transition.
    pub(crate) fn prepare_increment_producer_epoch(
        &mut self,
        new_txn_timeout_ms: i32,
        expected_producer_epoch: Option<i16>,
        now_ms: i64,
    ) -> Result<Result<TxnTransitMetadata, i16>, TransitionError> {
        if self.is_producer_epoch_exhausted() {
            return Err(self.epoch_overflow());
        }
        let bumped = self.producer_epoch + 1;
        let (epoch, last_epoch) = match expected_producer_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => (self.producer_epoch, self.last_producer_epoch),
            Some(_) => return Ok(Err(crate::broker::errors::PRODUCER_FENCED)),
        };
        self.prepare_transition_to(
            TransactionState::Empty,
            self.producer_id,
            epoch,
            last_epoch,
            new_txn_timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        )
        .map(Ok)
    }

    /// InitProducerId when the epoch is exhausted: a new producer id at epoch 0, Empty (Kafka's
    /// `prepareProducerIdRotation`); the current epoch is kept as last when `record_last_epoch`
    /// (the request named its producer id and epoch).
    ///
    /// Errors: [`TransitionError::PendingTransaction`] while a transaction is open; those of the
    /// transition.
    pub(crate) fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: i64,
        new_txn_timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<TxnTransitMetadata, TransitionError> {
        if matches!(
            self.state,
            TransactionState::Ongoing | TransactionState::PrepareAbort | TransactionState::PrepareCommit
        ) {
            return Err(TransitionError::PendingTransaction {
                transactional_id: self.transactional_id.clone(),
                state: self.state,
            });
        }
        let last = if record_last_epoch { self.producer_epoch } else { NO_PRODUCER_EPOCH };
        self.prepare_transition_to(
            TransactionState::Empty,
            new_producer_id,
            0,
            last,
            new_txn_timeout_ms,
            BTreeSet::new(),
            -1,
            now_ms,
        )
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with `added` joined to the partitions; the
    /// transaction starts `now_ms` when it was not open (Kafka's `prepareAddPartitions`).
    ///
    /// Errors: those of the transition (from PrepareCommit, PrepareAbort, Dead).
    pub(crate) fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<TxnTransitMetadata, TransitionError> {
        let start = match self.state {
            TransactionState::Empty | TransactionState::CompleteAbort | TransactionState::CompleteCommit => now_ms,
            _ => self.txn_start_timestamp_ms,
        };
        let partitions = self.topic_partitions.union(added).cloned().collect();
        self.prepare_transition_to(
            TransactionState::Ongoing,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            partitions,
            start,
            now_ms,
        )
    }

    /// EndTxn: PrepareCommit or PrepareAbort with the same producer, epoch and partitions
    /// (Kafka's `prepareAbortOrCommit`, `transaction.version` < 2).
    ///
    /// Errors: those of the transition (`new_state` other than PrepareCommit/PrepareAbort, or
    /// not from Ongoing).
    pub(crate) fn prepare_abort_or_commit(
        &mut self,
        new_state: TransactionState,
        now_ms: i64,
    ) -> Result<TxnTransitMetadata, TransitionError> {
        if !matches!(new_state, TransactionState::PrepareCommit | TransactionState::PrepareAbort) {
            return Err(TransitionError::InvalidTransition {
                transactional_id: self.transactional_id.clone(),
                from: self.state,
                to: new_state,
            });
        }
        let partitions = self.topic_partitions.clone();
        self.prepare_transition_to(
            new_state,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            partitions,
            self.txn_start_timestamp_ms,
            now_ms,
        )
    }

    /// After the markers were written: CompleteCommit from PrepareCommit, CompleteAbort
    /// otherwise, with no partitions (Kafka's `prepareComplete`). Clears the failed-fence flag:
    /// the fence's record was written.
    ///
    /// Errors: those of the transition (not from the matching Prepare state).
    pub(crate) fn prepare_complete(&mut self, now_ms: i64) -> Result<TxnTransitMetadata, TransitionError> {
        let new_state = if self.state == TransactionState::PrepareCommit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        self.has_failed_epoch_fence = false;
        self.prepare_transition_to(
            new_state,
            self.producer_id,
            self.producer_epoch,
            self.producer_epoch,
            self.txn_timeout_ms,
            BTreeSet::new(),
            self.txn_start_timestamp_ms,
            now_ms,
        )
    }

    /// Expiration of the transactional id: Dead, written as a tombstone (Kafka's `prepareDead`).
    ///
    /// Errors: those of the transition (only from Empty, CompleteCommit, CompleteAbort).
    pub(crate) fn prepare_dead(&mut self) -> Result<TxnTransitMetadata, TransitionError> {
        self.prepare_transition_to(
            TransactionState::Dead,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            BTreeSet::new(),
            self.txn_start_timestamp_ms,
            self.txn_last_update_timestamp_ms,
        )
    }

    /// The append of the pending transition's record failed: forget the pending state so the
    /// client's retry may prepare again (Kafka's `appendTransactionToLog` on an error). After a
    /// failed fence, the next fence reuses the bumped epoch (`has_failed_epoch_fence`).
    pub(crate) fn abort_pending_transition(&mut self, was_epoch_fence: bool) {
        self.pending_state = None;
        if was_epoch_fence {
            self.has_failed_epoch_fence = true;
        }
    }

    #[allow(clippy::too_many_arguments)] // Kafka's prepareTransitionTo, field for field
    fn prepare_transition_to(
        &mut self,
        state: TransactionState,
        producer_id: i64,
        producer_epoch: i16,
        last_producer_epoch: i16,
        txn_timeout_ms: i32,
        topic_partitions: BTreeSet<TopicPartition>,
        txn_start_timestamp_ms: i64,
        now_ms: i64,
    ) -> Result<TxnTransitMetadata, TransitionError> {
        if let Some(pending) = self.pending_state {
            return Err(TransitionError::PendingTransition {
                transactional_id: self.transactional_id.clone(),
                pending,
                target: state,
            });
        }
        if producer_id < 0 || (state != TransactionState::Dead && producer_epoch < 0) {
            return Err(TransitionError::IllegalProducerIdOrEpoch {
                transactional_id: self.transactional_id.clone(),
                producer_id,
                producer_epoch,
                target: state,
            });
        }
        if !state.valid_previous_states().contains(&self.state) {
            return Err(TransitionError::InvalidTransition {
                transactional_id: self.transactional_id.clone(),
                from: self.state,
                to: state,
            });
        }
        self.pending_state = Some(state);
        Ok(TxnTransitMetadata {
            transactional_id: self.transactional_id.clone(),
            producer_id,
            prev_producer_id: self.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch,
            last_producer_epoch,
            txn_timeout_ms,
            txn_state: state,
            topic_partitions,
            txn_start_timestamp_ms,
            txn_last_update_timestamp_ms: now_ms,
            client_transaction_version: 0,
        })
    }

    /// Applies a transition whose record was appended (Kafka's `completeTransitionTo`), after
    /// Kafka's checks: the target is the pending state; to Empty the epoch is the same, one
    /// more, or 0 with a new producer id, with no partitions and no start time; to Ongoing the
    /// producer and epoch are the same, the partitions grow and the timeout is unchanged; to
    /// PrepareCommit/PrepareAbort producer, epoch, partitions, timeout and start are unchanged; to
    /// CompleteCommit/CompleteAbort producer, epoch and timeout are unchanged and a start time is
    /// set. PrepareEpochFence and Dead are never completed (a fence becomes PrepareAbort; Dead
    /// removes the id).
    ///
    /// Errors: [`TransitionError::NotPending`], [`TransitionError::UnexpectedMetadata`]; the
    /// metadata is left unchanged.
    pub(crate) fn complete_transition_to(&mut self, t: &TxnTransitMetadata) -> Result<(), TransitionError> {
        let to = match self.pending_state {
            Some(p) if p == t.txn_state => p,
            pending => {
                return Err(TransitionError::NotPending {
                    transactional_id: self.transactional_id.clone(),
                    target: t.txn_state,
                    pending,
                })
            }
        };
        let same_producer = t.producer_epoch == self.producer_epoch && t.producer_id == self.producer_id;
        let unexpected = |reason| TransitionError::UnexpectedMetadata {
            transactional_id: self.transactional_id.clone(),
            target: to,
            reason,
        };
        use TransactionState::*;
        match to {
            Empty => {
                let valid_bump = t.producer_epoch == self.producer_epoch.wrapping_add(1)
                    || (t.producer_epoch == 0 && t.producer_id != self.producer_id);
                if t.producer_epoch != self.producer_epoch && !valid_bump {
                    return Err(unexpected("epoch neither kept, bumped by one, nor 0 with a new producer id"));
                }
                if !t.topic_partitions.is_empty() || t.txn_start_timestamp_ms != -1 {
                    return Err(unexpected("Empty with partitions or a start time"));
                }
                self.txn_timeout_ms = t.txn_timeout_ms;
                self.producer_epoch = t.producer_epoch;
                self.last_producer_epoch = t.last_producer_epoch;
                self.producer_id = t.producer_id;
                self.previous_producer_id = t.prev_producer_id;
            }
            Ongoing => {
                if !same_producer {
                    return Err(unexpected("producer id or epoch changed"));
                }
                if !self.topic_partitions.is_subset(&t.topic_partitions) {
                    return Err(unexpected("partitions removed"));
                }
                if self.txn_timeout_ms != t.txn_timeout_ms {
                    return Err(unexpected("timeout changed"));
                }
                self.txn_start_timestamp_ms = t.txn_start_timestamp_ms;
                self.topic_partitions.extend(t.topic_partitions.iter().cloned());
            }
            PrepareAbort | PrepareCommit => {
                if !same_producer
                    || self.topic_partitions != t.topic_partitions
                    || self.txn_timeout_ms != t.txn_timeout_ms
                    || self.txn_start_timestamp_ms != t.txn_start_timestamp_ms
                {
                    return Err(unexpected("producer, partitions, timeout or start changed"));
                }
            }
            CompleteAbort | CompleteCommit => {
                if !same_producer || self.txn_timeout_ms != t.txn_timeout_ms || t.txn_start_timestamp_ms == -1 {
                    return Err(unexpected("producer or timeout changed, or no start time"));
                }
                self.txn_start_timestamp_ms = t.txn_start_timestamp_ms;
                self.topic_partitions.clear();
            }
            PrepareEpochFence => return Err(unexpected("PrepareEpochFence is never completed")),
            Dead => return Err(unexpected("Dead is never completed: the transactional id is removed")),
        }
        self.client_transaction_version = t.client_transaction_version;
        self.txn_last_update_timestamp_ms = t.txn_last_update_timestamp_ms;
        self.pending_state = None;
        self.state = to;
        Ok(())
    }

    fn epoch_overflow(&self) -> TransitionError {
        TransitionError::EpochOverflow {
            transactional_id: self.transactional_id.clone(),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::errors;
    use crate::protocol::transaction_state::TransactionLogValue;

    fn tp(topic: &str, p: i32) -> TopicPartition {
        (topic.to_string(), p)
    }

    fn set(items: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
        items.iter().map(|(t, p)| tp(t, *p)).collect()
    }

    /// Prepares a transition with `f` and applies it as if its record was written.
    fn complete(
        md: &mut TransactionMetadata,
        f: impl FnOnce(&mut TransactionMetadata) -> Result<TxnTransitMetadata, TransitionError>,
    ) -> TxnTransitMetadata {
        let t = f(md).unwrap();
        md.complete_transition_to(&t).unwrap();
        t
    }

    /// A producer with epoch 0 after its first InitProducerId.
    fn initialized() -> TransactionMetadata {
        let mut md = TransactionMetadata::new("tx", 1000, 60_000, 10);
        let t = md.prepare_increment_producer_epoch(60_000, None, 20).unwrap().unwrap();
        md.complete_transition_to(&t).unwrap();
        md
    }

    #[test]
    fn ids_names_and_previous_states_are_kafkas() {
        for (i, s) in TransactionState::ALL.iter().enumerate() {
            assert_eq!(s.id(), i as i8);
            assert_eq!(TransactionState::from_id(i as i8), Some(*s));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(TransactionState::from_id(-1), None);
        assert_eq!(TransactionState::PrepareEpochFence.name(), "PrepareEpochFence");
        assert_eq!(TransactionState::CompleteCommit.to_string(), "CompleteCommit");
        use TransactionState::*;
        assert_eq!(PrepareAbort.valid_previous_states(), &[Ongoing, PrepareEpochFence]);
        assert_eq!(CompleteCommit.valid_previous_states(), &[PrepareCommit]);
        let expirable: Vec<_> = TransactionState::ALL.into_iter().filter(|s| s.is_expiration_allowed()).collect();
        assert_eq!(expirable, vec![Empty, CompleteCommit, CompleteAbort]);
    }

    #[test]
    fn init_add_commit_complete() {
        let mut md = initialized();
        assert_eq!((md.producer_id, md.producer_epoch, md.state), (1000, 0, TransactionState::Empty));
        assert_eq!(md.txn_last_update_timestamp_ms, 20);

        let t = md.prepare_add_partitions(&set(&[("a", 0)]), 30).unwrap();
        assert_eq!((t.txn_state, t.txn_start_timestamp_ms), (TransactionState::Ongoing, 30));
        assert!(md.pending_transition_in_progress());
        assert_eq!(md.state, TransactionState::Empty, "nothing changes before the record is written");
        md.complete_transition_to(&t).unwrap();
        assert!(!md.pending_transition_in_progress());
        assert_eq!(md.state, TransactionState::Ongoing);
        assert_eq!(md.txn_start_timestamp_ms, 30);
        // A second add keeps the start time and joins the partitions.
        let t = md.prepare_add_partitions(&set(&[("b", 1)]), 40).unwrap();
        md.complete_transition_to(&t).unwrap();
        assert_eq!(md.topic_partitions, set(&[("a", 0), ("b", 1)]));
        assert_eq!((md.txn_start_timestamp_ms, md.txn_last_update_timestamp_ms), (30, 40));

        let t = md.prepare_abort_or_commit(TransactionState::PrepareCommit, 50).unwrap();
        assert_eq!(t.topic_partitions, md.topic_partitions);
        md.complete_transition_to(&t).unwrap();
        assert_eq!(md.state, TransactionState::PrepareCommit);

        let t = md.prepare_complete(60).unwrap();
        assert_eq!(t.txn_state, TransactionState::CompleteCommit);
        assert!(t.topic_partitions.is_empty());
        md.complete_transition_to(&t).unwrap();
        assert_eq!(md.state, TransactionState::CompleteCommit);
        assert!(md.topic_partitions.is_empty());
        assert_eq!((md.producer_id, md.producer_epoch), (1000, 0));

        // The next transaction starts at its first add.
        let t = md.prepare_add_partitions(&set(&[("c", 2)]), 70).unwrap();
        assert_eq!(t.txn_start_timestamp_ms, 70);
    }

    #[test]
    fn abort_path_and_invalid_transitions() {
        let mut md = initialized();
        // EndTxn from Empty is not a transition.
        let e = md.prepare_abort_or_commit(TransactionState::PrepareAbort, 30).unwrap_err();
        assert!(matches!(e, TransitionError::InvalidTransition { from: TransactionState::Empty, .. }), "{e}");
        assert!(!md.pending_transition_in_progress(), "a refused prepare leaves no pending state");
        complete(&mut md, |m| m.prepare_add_partitions(&set(&[("a", 0)]), 30));
        complete(&mut md, |m| m.prepare_abort_or_commit(TransactionState::PrepareAbort, 40));
        // No add while PrepareAbort.
        assert!(matches!(
            md.prepare_add_partitions(&set(&[("b", 0)]), 45),
            Err(TransitionError::InvalidTransition { to: TransactionState::Ongoing, .. })
        ));
        complete(&mut md, |m| m.prepare_complete(50));
        assert_eq!(md.state, TransactionState::CompleteAbort);
        // Only Prepare* targets for prepare_abort_or_commit.
        assert!(md.prepare_abort_or_commit(TransactionState::Ongoing, 60).is_err());
    }

    #[test]
    fn one_transition_at_a_time() {
        let mut md = initialized();
        let t = md.prepare_add_partitions(&set(&[("a", 0)]), 30).unwrap();
        let e = md.prepare_add_partitions(&set(&[("b", 0)]), 31).unwrap_err();
        assert!(matches!(e, TransitionError::PendingTransition { pending: TransactionState::Ongoing, .. }), "{e}");
        // Completing another target than the pending one is refused.
        let mut other = t.clone();
        other.txn_state = TransactionState::PrepareCommit;
        assert!(matches!(md.complete_transition_to(&other), Err(TransitionError::NotPending { .. })));
        // A failed append forgets the pending state.
        md.abort_pending_transition(false);
        assert!(!md.pending_transition_in_progress());
        assert!(matches!(md.complete_transition_to(&t), Err(TransitionError::NotPending { pending: None, .. })));
        assert_eq!(md.state, TransactionState::Empty);
    }

    #[test]
    fn complete_checks_the_metadata() {
        let mut md = initialized();
        let mut t = md.prepare_add_partitions(&set(&[("a", 0)]), 30).unwrap();
        t.producer_epoch = 5;
        let e = md.complete_transition_to(&t).unwrap_err();
        assert!(matches!(e, TransitionError::UnexpectedMetadata { target: TransactionState::Ongoing, .. }), "{e}");
        assert_eq!(md.state, TransactionState::Empty, "left unchanged");
        t.producer_epoch = 0;
        t.txn_timeout_ms = 1;
        assert!(md.complete_transition_to(&t).is_err());
        t.txn_timeout_ms = 60_000;
        md.complete_transition_to(&t).unwrap();
        // Empty may not skip epochs.
        md.state = TransactionState::CompleteAbort;
        md.topic_partitions.clear();
        let mut t = md.prepare_increment_producer_epoch(60_000, None, 40).unwrap().unwrap();
        t.producer_epoch = 3;
        assert!(md.complete_transition_to(&t).is_err());
    }

    #[test]
    fn init_producer_id_epoch_rules() {
        // A new id: epoch -1 -> 0.
        let mut md = TransactionMetadata::new("tx", 7, 1000, 0);
        let t = md.prepare_increment_producer_epoch(2000, None, 5).unwrap().unwrap();
        assert_eq!((t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms), (0, -1, 2000));
        md.complete_transition_to(&t).unwrap();
        assert_eq!(md.txn_timeout_ms, 2000);
        // KIP-360 with the current epoch: bump, remember the current one as last.
        let t = md.prepare_increment_producer_epoch(2000, Some(0), 6).unwrap().unwrap();
        assert_eq!((t.producer_epoch, t.last_producer_epoch), (1, 0));
        md.complete_transition_to(&t).unwrap();
        // A retry with the last epoch: the current epoch again, no bump.
        let t = md.prepare_increment_producer_epoch(2000, Some(0), 7).unwrap().unwrap();
        assert_eq!((t.producer_epoch, t.last_producer_epoch), (1, 0));
        md.complete_transition_to(&t).unwrap();
        // Another epoch: fenced.
        assert_eq!(md.prepare_increment_producer_epoch(2000, Some(9), 8).unwrap(), Err(errors::PRODUCER_FENCED));
        assert!(!md.pending_transition_in_progress());
        // Exhausted: the caller must rotate.
        md.producer_epoch = i16::MAX - 1;
        assert!(md.is_producer_epoch_exhausted());
        assert!(matches!(
            md.prepare_increment_producer_epoch(2000, None, 9),
            Err(TransitionError::EpochOverflow { .. })
        ));
        let t = md.prepare_producer_id_rotation(8, 2000, 9, true).unwrap();
        assert_eq!(
            (t.producer_id, t.producer_epoch, t.last_producer_epoch, t.prev_producer_id),
            (8, 0, i16::MAX - 1, 7)
        );
        md.complete_transition_to(&t).unwrap();
        assert_eq!((md.producer_id, md.previous_producer_id, md.producer_epoch), (8, 7, 0));
        assert!(!is_epoch_exhausted(i16::MAX - 2));
    }

    #[test]
    fn rotation_is_refused_with_an_open_transaction() {
        let mut md = initialized();
        complete(&mut md, |m| m.prepare_add_partitions(&set(&[("a", 0)]), 30));
        assert!(matches!(
            md.prepare_producer_id_rotation(5, 1, 40, false),
            Err(TransitionError::PendingTransaction { state: TransactionState::Ongoing, .. })
        ));
    }

    #[test]
    fn fence_bumps_once_then_becomes_abort() {
        let mut md = initialized();
        complete(&mut md, |m| m.prepare_add_partitions(&set(&[("a", 0)]), 30));
        let t = md.prepare_fence_producer_epoch().unwrap();
        assert_eq!(
            (t.txn_state, t.producer_epoch, t.last_producer_epoch),
            (TransactionState::PrepareEpochFence, 1, -1)
        );
        // PrepareEpochFence is never completed.
        assert!(md.complete_transition_to(&t).is_err());
        // A failed fence: the next one does not bump again.
        md.abort_pending_transition(true);
        md.producer_epoch = 1; // what EndTxn's fence path set before the failed append
        let t = md.prepare_fence_producer_epoch().unwrap();
        assert_eq!(t.producer_epoch, 1);
        md.abort_pending_transition(false);
        md.producer_epoch = i16::MAX;
        assert!(matches!(md.prepare_fence_producer_epoch(), Err(TransitionError::EpochOverflow { .. })));
    }

    #[test]
    fn timeout_and_expiration() {
        let mut md = initialized();
        assert!(!md.is_timed_out(i64::MAX), "Empty never times out");
        complete(&mut md, |m| m.prepare_add_partitions(&set(&[("a", 0)]), 1_000));
        assert!(!md.is_timed_out(61_000), "start + timeout is not yet passed");
        assert!(md.is_timed_out(61_001));
        md.pending_state = Some(TransactionState::PrepareCommit);
        assert!(!md.is_timed_out(61_001), "not while a transition is under way");
        md.pending_state = None;
        assert!(!md.should_expire(i64::MAX, 1), "Ongoing never expires");
        complete(&mut md, |m| m.prepare_abort_or_commit(TransactionState::PrepareAbort, 2_000));
        complete(&mut md, |m| m.prepare_complete(3_000));
        assert!(!md.should_expire(3_999, 1_000));
        assert!(md.should_expire(4_000, 1_000));
        let t = md.prepare_dead().unwrap();
        assert_eq!(t.txn_state, TransactionState::Dead);
        assert!(md.complete_transition_to(&t).is_err(), "Dead is never completed");
    }

    #[test]
    fn record_value_conversion() {
        let mut md = initialized();
        let t = md.prepare_add_partitions(&set(&[("b", 1), ("a", 2), ("a", 0)]), 30).unwrap();
        let v = t.to_record_value(0).unwrap();
        assert_eq!(v.transaction_status, 1);
        let parts = v.transaction_partitions.as_ref().unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!((parts[0].topic.as_str(), parts[0].partition_ids.clone()), ("a", vec![0, 2]));
        assert_eq!((parts[1].topic.as_str(), parts[1].partition_ids.clone()), ("b", vec![1]));
        assert_eq!((v.previous_producer_id, v.next_producer_id), (-1, -1), "v0 has no tagged fields");
        assert!(v.encode().is_ok());
        let v1 = t.to_record_value(1).unwrap();
        assert_eq!(v1.previous_producer_id, 1000);
        // Replayed: the same metadata, without pending state or last epoch.
        md.complete_transition_to(&t).unwrap();
        let back =
            TransactionMetadata::from_record_value("tx", &TransactionLogValue::decode(&v.encode().unwrap()).unwrap())
                .unwrap();
        let mut expected = md.clone();
        expected.last_producer_epoch = NO_PRODUCER_EPOCH; // not in the record
        expected.previous_producer_id = NO_PRODUCER_ID; // a tagged field: v1 only
        assert_eq!(back, expected);
        // Empty: null partitions; partitions in Empty are refused.
        let mut md = initialized();
        let t = md.prepare_increment_producer_epoch(5, None, 40).unwrap().unwrap();
        assert_eq!(t.to_record_value(0).unwrap().transaction_partitions, None);
        let mut bad = t.clone();
        bad.topic_partitions = set(&[("a", 0)]);
        assert!(matches!(bad.to_record_value(0), Err(TransitionError::PartitionsInEmpty { count: 1, .. })));
        // Unknown status byte.
        let mut v = t.to_record_value(0).unwrap();
        v.transaction_status = 9;
        assert!(matches!(
            TransactionMetadata::from_record_value("tx", &v),
            Err(TransitionError::UnknownState { id: 9, .. })
        ));
        // Partitions of an Empty record are ignored, as Kafka's reader does.
        v.transaction_status = 0;
        v.transaction_partitions =
            Some(vec![TxnPartitions { topic: "x".into(), partition_ids: vec![1], unknown_tagged_fields: vec![] }]);
        assert!(TransactionMetadata::from_record_value("tx", &v).unwrap().topic_partitions.is_empty());
    }
}
