//! InitProducerId (API key 22, v0-v5): a producer id for an idempotent producer.
//!
//! Kafka's `TransactionCoordinator.handleInitProducerId` with a null transactional id: "always
//! blindly accept the request and return a new producerId from the producer id manager", epoch 0.
//! The v3+ `producer_id` / `producer_epoch` fields (KIP-360 epoch bumps) are ignored then, as
//! Kafka ignores them: the producer gets a fresh id. Ids come from
//! [`LogManager::generate_producer_id`](crate::log::manager::LogManager::generate_producer_id):
//! blocks of 1000 persisted in the log directory, so they stay unique across restarts.
//!
//! A non-null transactional id goes to the transaction coordinator
//! ([`txn_coordinator::handlers::init_producer_id`](crate::broker::txn_coordinator::handlers::init_producer_id):
//! epoch bumps, fencing, the abort of an open transaction); an empty one is `INVALID_REQUEST`
//! (42), as Kafka answers. Errors carry producer id -1 and epoch -1 (Kafka's
//! `initTransactionError`). v6 (KIP-939's `keep_prepared_txn`) is not served: the codec cannot
//! decode it.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use crate::broker::errors;
use crate::broker::shared::Shared;

/// Answers an InitProducerId request (see the module docs).
pub(crate) fn handle(shared: &Shared, request: &InitProducerIdRequest, version: i16) -> InitProducerIdResponse {
    let error = |code: i16| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id((-1).into()).with_producer_epoch(-1)
    };
    if let Some(txn_id) = &request.transactional_id {
        if txn_id.0.is_empty() {
            return error(errors::INVALID_REQUEST);
        }
        return crate::broker::txn_coordinator::handlers::init_producer_id(shared, txn_id.0.as_str(), request, version);
    }
    let Some(logs) = shared.logs() else {
        // Shutting down: a retriable error, the client asks again (elsewhere).
        return error(errors::COORDINATOR_NOT_AVAILABLE);
    };
    match logs.generate_producer_id() {
        Ok(id) => {
            tracing::debug!("InitProducerId: producer id {id}, epoch 0");
            InitProducerIdResponse::default()
                .with_error_code(errors::NONE)
                .with_producer_id(id.into())
                .with_producer_epoch(0)
        }
        // The log directory closed under the request (shutdown): retriable, as above.
        Err(crate::log::LogError::Closed { .. }) => error(errors::COORDINATOR_NOT_AVAILABLE),
        Err(e) => {
            log_failure(&e);
            error(errors::UNKNOWN_SERVER_ERROR)
        }
    }
}

/// At most one failure logged per this interval: clients retry InitProducerId every few hundred
/// milliseconds, and the cause (a full disk, an exhausted id space) lasts.
const FAILURE_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// When the last failure was logged, and how many were not logged since.
static LAST_FAILURE_LOG: std::sync::Mutex<(Option<std::time::Instant>, u64)> = std::sync::Mutex::new((None, 0));

/// Logs a failed InitProducerId at error, rate-limited to one line per [`FAILURE_LOG_INTERVAL`]
/// with the count of the failures not logged in between.
fn log_failure(e: &crate::log::LogError) {
    let mut last = LAST_FAILURE_LOG.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = std::time::Instant::now();
    if last.0.is_some_and(|t| now.duration_since(t) < FAILURE_LOG_INTERVAL) {
        last.1 += 1;
        return;
    }
    let suppressed = std::mem::take(&mut last.1);
    last.0 = Some(now);
    tracing::error!(
        "InitProducerId: no producer id: {e} ({suppressed} more failure(s) not logged in the last {} s)",
        FAILURE_LOG_INTERVAL.as_secs()
    );
}
