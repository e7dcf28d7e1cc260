//! The transaction coordinator (issue 18): Kafka's `TransactionMetadata` state machine and
//! `TransactionCoordinator`'s decisions, pure (time passed in, no I/O, no locks), and Kafka's
//! `TransactionStateManager` over them (the ids sharded by `__transaction_state` partition, the
//! records appended to and replayed from that topic).
//!
//! Wired: [`runtime`] holds the broker's coordinator (in `Shared`), its thread and the marker
//! writing; [`handlers`] serves FindCoordinator(TRANSACTION), InitProducerId with a
//! transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, and verifies transactional
//! Produce.
//!
//! - [`metadata`]: [`TransactionState`](metadata::TransactionState) (Kafka's ids, names and
//!   valid previous states) and [`TransactionMetadata`](metadata::TransactionMetadata), one
//!   transactional id's state, changed in Kafka's two steps (prepare a
//!   [`TxnTransitMetadata`](metadata::TxnTransitMetadata), write it, complete it); conversion to
//!   and from the `__transaction_state` value (Kafka's `valueToBytes` / `readTxnRecordValue`);
//!   the `transaction.timeout.ms` and `transactional.id.expiration.ms` checks.
//! - [`decisions`]: what InitProducerId (new id, epoch bump, producer id rotation at epoch
//!   exhaustion, fencing and abort of an open transaction, KIP-360 retries),
//!   AddPartitionsToTxn (every version, and v4+ verify-only), AddOffsetsToTxn, EndTxn and the
//!   timeout abort decide, with the error code of every refusal as Kafka answers it
//!   ([`TxnError::code_for`](decisions::TxnError::code_for) maps `PRODUCER_FENCED` to
//!   `INVALID_PRODUCER_EPOCH` for old request versions).
//! - [`state_manager`]: [`TransactionStateManager`](state_manager::TransactionStateManager), the
//!   metadata of every transactional id, a lock per `__transaction_state` partition; each request
//!   operation runs one decision, appends its record with no lock held, then completes it (or
//!   undoes it on a failed append); EndTxn, fences and timeouts return the COMMIT/ABORT
//!   [`TxnMarkers`](state_manager::TxnMarkers) to write; the start-up replay; the timeout scan and
//!   the transactional id expiry.
//! - [`storage`]: [`TxnStateStorage`](storage::TxnStateStorage), one record appended to a
//!   `__transaction_state` partition or a partition read back, and its implementation over the
//!   broker's log ([`LogStorage`](log_storage::LogStorage), creating the compacted topic on the first write).
//! - [`runtime`]: [`TxnCoordinator`](runtime::TxnCoordinator), the manager over the broker's
//!   log, the COMMIT / ABORT markers written to each partition of a transaction (before EndTxn is
//!   answered), the coordinator's thread (start-up replay, transactions left prepared completed,
//!   markers retried, `transaction.timeout.ms` aborts, transactional id expiry).
//! - [`handlers`]: the wire APIs.
//!
//! The records' schemas, the topic name, its default partition count (50) and which partition
//! holds a transactional id ([`partition_for`](crate::protocol::transaction_state::partition_for))
//! live in [`crate::protocol::transaction_state`].

pub(crate) mod decisions;
pub(crate) mod handlers;
pub(crate) mod log_storage;
pub(crate) mod markers;
pub(crate) mod metadata;
pub(crate) mod runtime;
pub(crate) mod state_manager;
pub(crate) mod storage;
