//! The transactional producer's states ([`TransactionState`], Kafka's
//! `TransactionManager.State`) and the transitions Kafka allows between them.

/// A transactional producer's state (Kafka's `TransactionManager.State`); shown by Kafka's
/// names (`IN_TRANSACTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransactionState {
    /// Before `init_transactions`.
    Uninitialized,
    /// `init_transactions` under way (or timed out: call it again).
    Initializing,
    /// A producer id is held; no transaction is open.
    Ready,
    /// Between `begin_transaction` and commit or abort.
    InTransaction,
    /// `commit_transaction` under way (or timed out: call it again).
    CommittingTransaction,
    /// `abort_transaction` under way (or timed out: call it again).
    AbortingTransaction,
    /// The transaction hit an error; only `abort_transaction` helps.
    AbortableError,
    /// Fenced or refused: every call fails; close the producer.
    FatalError,
}

impl TransactionState {
    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Uninitialized => "UNINITIALIZED",
            TransactionState::Initializing => "INITIALIZING",
            TransactionState::Ready => "READY",
            TransactionState::InTransaction => "IN_TRANSACTION",
            TransactionState::CommittingTransaction => "COMMITTING_TRANSACTION",
            TransactionState::AbortingTransaction => "ABORTING_TRANSACTION",
            TransactionState::AbortableError => "ABORTABLE_ERROR",
            TransactionState::FatalError => "FATAL_ERROR",
        }
    }

    /// Whether `self -> target` is a transition Kafka's `State.isTransitionValid` allows.
    pub fn can_transition_to(self, target: TransactionState) -> bool {
        use TransactionState::*;
        match target {
            Uninitialized => matches!(self, Ready | AbortableError),
            Initializing => matches!(self, Uninitialized | CommittingTransaction | AbortingTransaction),
            Ready => matches!(self, Initializing | CommittingTransaction | AbortingTransaction),
            InTransaction => self == Ready,
            CommittingTransaction => self == InTransaction,
            AbortingTransaction => matches!(self, InTransaction | AbortableError),
            AbortableError => matches!(self, InTransaction | CommittingTransaction | AbortableError | Initializing),
            FatalError => true,
        }
    }
}

impl std::fmt::Display for TransactionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
