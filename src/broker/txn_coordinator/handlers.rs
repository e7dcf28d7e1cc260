//! The transaction APIs (Kafka's `KafkaApis.handle*` for them, over the
//! [`TransactionStateManager`](super::state_manager::TransactionStateManager)):
//! FindCoordinator(TRANSACTION) ([`find_coordinator_error`]), InitProducerId with a transactional
//! id, AddPartitionsToTxn v0-4, AddOffsetsToTxn v0-4, EndTxn v0-4, and the check of a
//! transactional Produce ([`verify_produce`], KIP-890 part 1's verification).
//!
//! Versions: EndTxn, AddPartitionsToTxn and TxnOffsetCommit v5 belong to KIP-890 part 2
//! (`transaction.version` 2, the partitions added by the Produce itself), a feature this broker
//! does not advertise; clients then use v4 and below.
//!
//! Error codes as Kafka's: a refusal of the coordinator ([`StateError::code_for`](super::state_manager::StateError::code_for): `PRODUCER_FENCED`
//! becomes `INVALID_PRODUCER_EPOCH` for old versions), `COORDINATOR_LOAD_IN_PROGRESS` while
//! `__transaction_state` is replayed, `CONCURRENT_TRANSACTIONS` while another change of the id
//! (or its markers) is under way.

use std::collections::BTreeSet;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
};

use super::decisions::{TxnApi, TxnResult};
use super::markers::{storage, write_markers};
use super::metadata::TopicPartition;
use super::state_manager::InitProducerIdAnswer;
use crate::broker::errors;
use crate::broker::shared::Shared;
use crate::log::partition::now_ms;
use crate::protocol::consumer_offsets::OFFSETS_TOPIC;

/// FindCoordinator(TRANSACTION) for `transactional_id`: `None` when this broker is its
/// coordinator (always, on one node), or the error code and message: `INVALID_REQUEST` for an
/// empty id (Kafka's `KafkaApis.getCoordinator`).
pub(crate) fn find_coordinator_error(transactional_id: &str) -> Option<(i16, String)> {
    transactional_id.is_empty().then(|| (errors::INVALID_REQUEST, "the transactional id must not be empty".to_string()))
}

/// InitProducerId with a transactional id (Kafka's `handleInitProducerId`): a new producer id
/// (epoch 0) for a new id, the epoch bumped for a known one (fencing the producer of the
/// previous epoch), a new id when the epoch is exhausted. A transaction the id still had open is
/// aborted first: its ABORT markers are written in the request and the decision is taken again,
/// so the producer is answered in one round trip (Kafka answers `CONCURRENT_TRANSACTIONS` and
/// the client retries; that is still the answer when the markers cannot be written now).
/// Errors carry producer id -1 and epoch -1.
pub(crate) fn init_producer_id(
    shared: &Shared,
    transactional_id: &str,
    request: &InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let error = |code: i16| {
        InitProducerIdResponse::default().with_error_code(code).with_producer_id((-1).into()).with_producer_epoch(-1)
    };
    if shared.logs().is_none() {
        return error(errors::COORDINATOR_NOT_AVAILABLE);
    }
    let manager = shared.txn_coordinator().manager();
    // At most: one abort of the open transaction, then the answer.
    for _ in 0..2 {
        let answer = manager.init_producer_id(
            &storage(shared),
            transactional_id,
            request.transaction_timeout_ms,
            request.producer_id.0,
            request.producer_epoch,
            now_ms(),
        );
        match answer {
            Ok(InitProducerIdAnswer::Ready(p)) => {
                tracing::debug!(transactional_id, "InitProducerId: producer id {} epoch {}", p.producer_id, p.epoch);
                return InitProducerIdResponse::default()
                    .with_error_code(errors::NONE)
                    .with_producer_id(p.producer_id.into())
                    .with_producer_epoch(p.epoch);
            }
            Ok(InitProducerIdAnswer::AbortingOpenTransaction(markers)) => {
                tracing::info!(transactional_id, "InitProducerId: aborting the transaction the id had open");
                if !write_markers(shared, markers) {
                    return error(errors::CONCURRENT_TRANSACTIONS);
                }
            }
            Err(e) => {
                tracing::debug!(transactional_id, "InitProducerId: {e}");
                return error(e.code_for(TxnApi::InitProducerId, version));
            }
        }
    }
    error(errors::CONCURRENT_TRANSACTIONS)
}

/// The partitions of `topics` that exist here, and an answer for each partition (Kafka's
/// `handleAddPartitionsToTxnRequest`): when one does not exist it is
/// `UNKNOWN_TOPIC_OR_PARTITION` and every other one `OPERATION_NOT_ATTEMPTED`; an internal topic
/// (`__consumer_offsets`, `__transaction_state`) is `TOPIC_AUTHORIZATION_FAILED` (the `Err`
/// answers: nothing is added).
fn known_partitions(
    shared: &Shared,
    topics: &[AddPartitionsToTxnTopic],
) -> Result<BTreeSet<TopicPartition>, Vec<AddPartitionsToTxnTopicResult>> {
    let exists = |name: &str, p: i32| shared.logs().is_some_and(|logs| logs.partition(name, p).is_some());
    // The coordinators' topics are not a client's to write (Kafka's
    // `handleAddPartitionsToTxnRequest`: TOPIC_AUTHORIZATION_FAILED for an internal topic).
    let internal = |name: &str| crate::broker::topics::INTERNAL_TOPICS.contains(&name);
    if topics.iter().any(|t| internal(t.name.0.as_str())) {
        return Err(answer_each(topics, |name, _| {
            if internal(name) {
                errors::TOPIC_AUTHORIZATION_FAILED
            } else {
                errors::OPERATION_NOT_ATTEMPTED
            }
        }));
    }
    let all_known = topics.iter().all(|t| t.partitions.iter().all(|&p| exists(t.name.0.as_str(), p)));
    if all_known {
        return Ok(topics.iter().flat_map(|t| t.partitions.iter().map(|&p| (t.name.0.to_string(), p))).collect());
    }
    Err(answer_each(topics, |name, p| {
        if exists(name, p) {
            errors::OPERATION_NOT_ATTEMPTED
        } else {
            errors::UNKNOWN_TOPIC_OR_PARTITION
        }
    }))
}

/// Each partition of `topics` answered `code_of(topic, partition)`, in the request's order.
fn answer_each(
    topics: &[AddPartitionsToTxnTopic],
    code_of: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code_of(t.name.0.as_str(), p))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(results)
        })
        .collect()
}

/// Every partition of `topics` answered `code`.
fn all_partitions(topics: &[AddPartitionsToTxnTopic], code: i16) -> Vec<AddPartitionsToTxnTopicResult> {
    answer_each(topics, |_, _| code)
}

/// One transaction of AddPartitionsToTxn: added (or, `verify_only`, checked), answered per
/// partition.
fn add_partitions_one(
    shared: &Shared,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let manager = shared.txn_coordinator().manager();
    let partitions = match known_partitions(shared, topics) {
        Ok(p) => p,
        Err(results) => return results,
    };
    if verify_only {
        return match manager.verify_partitions(transactional_id, producer_id, producer_epoch, &partitions) {
            Ok(codes) => {
                let code_of = |name: &str, p: i32| {
                    codes.iter().find(|((t, q), _)| t == name && *q == p).map_or(errors::NONE, |(_, c)| *c)
                };
                answer_each(topics, code_of)
            }
            Err(e) => all_partitions(topics, e.code_for(TxnApi::AddPartitionsToTxn, version)),
        };
    }
    let code = match manager.add_partitions(
        &storage(shared),
        transactional_id,
        producer_id,
        producer_epoch,
        &partitions,
        now_ms(),
    ) {
        Ok(()) => errors::NONE,
        Err(e) => {
            tracing::debug!(transactional_id, "AddPartitionsToTxn: {e}");
            e.code_for(TxnApi::AddPartitionsToTxn, version)
        }
    };
    all_partitions(topics, code)
}

/// AddPartitionsToTxn (API key 24): v0-3, one transaction (what producers send); v4, a batch of
/// transactions, each added or (`verify_only`) checked (KIP-890 part 1, sent by brokers).
pub(crate) fn add_partitions_to_txn(
    shared: &Shared,
    request: &AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let results = add_partitions_one(
            shared,
            request.v3_and_below_transactional_id.0.as_str(),
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            &request.v3_and_below_topics,
            version,
        );
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    let results = request
        .transactions
        .iter()
        .map(|t| {
            let topic_results = add_partitions_one(
                shared,
                t.transactional_id.0.as_str(),
                t.producer_id.0,
                t.producer_epoch,
                t.verify_only,
                &t.topics,
                version,
            );
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topic_results)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_error_code(errors::NONE).with_results_by_transaction(results)
}

/// AddOffsetsToTxn (API key 25): adds the group's `__consumer_offsets` partition to the
/// transaction (Kafka's `handleAddOffsetsToTxnRequest`), so its EndTxn writes a marker there and
/// the offsets the producer commits with TxnOffsetCommit become visible (or are dropped) with it.
pub(crate) fn add_offsets_to_txn(
    shared: &Shared,
    request: &AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let group = request.group_id.0.as_str();
    let offsets_partition = shared.coordinator().partition_for(&request.group_id.0);
    let partitions = BTreeSet::from([(OFFSETS_TOPIC.to_string(), offsets_partition)]);
    let code = match shared.txn_coordinator().manager().add_partitions(
        &storage(shared),
        request.transactional_id.0.as_str(),
        request.producer_id.0,
        request.producer_epoch,
        &partitions,
        now_ms(),
    ) {
        Ok(()) => errors::NONE,
        Err(e) => {
            tracing::debug!(transactional_id = request.transactional_id.0.as_str(), group, "AddOffsetsToTxn: {e}");
            e.code_for(TxnApi::AddOffsetsToTxn, version)
        }
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}

/// EndTxn (API key 26): commits or aborts the transaction (Kafka's `handleEndTransaction`):
/// PrepareCommit / PrepareAbort is written, then the markers (see the
/// [runtime](super::runtime) docs: before the answer), then CompleteCommit / CompleteAbort.
/// `NONE` once the decision is written, even when a marker must be retried later (the decision
/// stands, as in Kafka).
pub(crate) fn end_txn(shared: &Shared, request: &EndTxnRequest, version: i16) -> EndTxnResponse {
    let id = request.transactional_id.0.as_str();
    let result = if request.committed { TxnResult::Commit } else { TxnResult::Abort };
    let answer = shared.txn_coordinator().manager().end_txn(
        &storage(shared),
        id,
        request.producer_id.0,
        request.producer_epoch,
        result,
        now_ms(),
    );
    match answer {
        Ok(a) => {
            if let Some(markers) = a.markers {
                write_markers(shared, markers);
            }
            EndTxnResponse::default()
                .with_error_code(errors::NONE)
                .with_producer_id(a.producer_id.into())
                .with_producer_epoch(a.producer_epoch)
        }
        Err(e) => {
            tracing::debug!(transactional_id = id, "EndTxn {result:?}: {e}");
            EndTxnResponse::default()
                .with_error_code(e.code_for(TxnApi::EndTxn, version))
                .with_producer_id((-1).into())
                .with_producer_epoch(-1)
        }
    }
}

/// Whether a transactional batch of `producer_id` / `producer_epoch` for `topic`-`partition`
/// may be appended: the producer is the transactional id's current one and the partition was
/// added to its ongoing transaction (Kafka's KIP-890 part 1 verification in
/// `ReplicaManager.appendRecords`, with the coordinator's answer mapped as its
/// `postVerificationCallback` and `AddPartitionsToTxnManager` map it).
///
/// Errors: `INVALID_TXN_STATE` for a partition not in the transaction (or no transaction
/// open), `INVALID_PRODUCER_EPOCH` for another epoch, `INVALID_PRODUCER_ID_MAPPING` for an
/// unknown id or another producer id, `NOT_ENOUGH_REPLICAS` (retriable for every client) while the
/// coordinator is loading or the transaction is being ended.
pub(crate) fn verify_produce(
    shared: &Shared,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    topic: &str,
    partition: i32,
) -> Result<(), (i16, String)> {
    let partitions = BTreeSet::from([(topic.to_string(), partition)]);
    let answer = shared.txn_coordinator().manager().verify_partitions(
        transactional_id,
        producer_id,
        producer_epoch,
        &partitions,
    );
    let code = match &answer {
        Ok(codes) => codes.first().map_or(errors::NONE, |(_, c)| *c),
        Err(e) => e.code(),
    };
    let mapped = match code {
        errors::NONE => return Ok(()),
        errors::TRANSACTION_ABORTABLE | errors::INVALID_TXN_STATE => errors::INVALID_TXN_STATE,
        errors::PRODUCER_FENCED => errors::INVALID_PRODUCER_EPOCH,
        errors::CONCURRENT_TRANSACTIONS
        | errors::COORDINATOR_LOAD_IN_PROGRESS
        | errors::COORDINATOR_NOT_AVAILABLE
        | errors::NOT_COORDINATOR => errors::NOT_ENOUGH_REPLICAS,
        other => other,
    };
    let why = match answer {
        Ok(_) => format!("{topic}-{partition} was not added to the transaction of {transactional_id:?}"),
        Err(e) => format!("unable to verify the transaction of {transactional_id:?}: {e}"),
    };
    Err((mapped, why))
}
