//! The transaction coordinator's foundations (issue 18): Kafka's `TransactionMetadata` state
//! machine and `TransactionCoordinator`'s decisions, pure (time passed in, no I/O, no locks).
//!
//! **Not wired yet.** Nothing in the broker calls this module: FindCoordinator(TRANSACTION)
//! ([`coordinator::handlers`](crate::broker::coordinator::handlers)), InitProducerId with a
//! transactional id ([`handler::init_producer_id`](crate::broker::handler::init_producer_id)) and
//! transactional produce ([`handler::produce`](crate::broker::handler::produce)) are still refused
//! with `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, and AddPartitionsToTxn, AddOffsetsToTxn,
//! TxnOffsetCommit and EndTxn are not served.
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
//!
//! The records' schemas, the topic name, its default partition count (50) and which partition
//! holds a transactional id ([`partition_for`](crate::protocol::transaction_state::partition_for))
//! live in [`crate::protocol::transaction_state`].
//!
//! Left for the wiring: the runtime (transactional ids per `__transaction_state` partition, a
//! lock each, replay at start-up completing PrepareCommit / PrepareAbort ones), the appends of
//! the records to the broker's `__transaction_state` log, the COMMIT/ABORT control batches the
//! broker writes to each partition of a transaction, TxnOffsetCommit's pending offsets in the
//! group coordinator, the timers (timeout abort, id expiration), and the handlers.

pub(crate) mod decisions;
pub(crate) mod metadata;
