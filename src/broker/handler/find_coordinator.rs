//! FindCoordinator (API key 10): there is no group or transaction coordinator here yet.
//!
//! Every key is answered with `COORDINATOR_NOT_AVAILABLE` (15), node -1, host "", port -1:
//! Kafka's answer while the coordinator (its `__consumer_offsets` or `__transaction_state`
//! partition) is not available, which clients treat as retriable. Serving the API at all
//! matters for librdkafka: it enables LZ4 compression only when FindCoordinator v0 is listed in
//! ApiVersions (its `RD_KAFKA_FEATURE_LZ4` dates LZ4 support by that API). Versions 0-3 carry
//! one key; v4+ (KIP-699) a list of keys, each answered in `coordinators`.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use crate::broker::errors;

const MESSAGE: &str = "fetchbench has no group or transaction coordinator";

/// Answers every key with `COORDINATOR_NOT_AVAILABLE`.
pub fn handle(request: &FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let message = || Some(StrBytes::from_static_str(MESSAGE));
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                Coordinator::default()
                    .with_key(key.clone())
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1)
                    .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
                    .with_error_message(message())
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let response = FindCoordinatorResponse::default()
        .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
        .with_node_id(BrokerId(-1))
        .with_host(StrBytes::default())
        .with_port(-1);
    if version >= 1 {
        response.with_error_message(message())
    } else {
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiKey, ResponseKind};

    #[test]
    fn every_version_encodes() {
        for version in 0..=6 {
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_static_str("g"))
                .with_coordinator_keys(vec![StrBytes::from_static_str("g")]);
            let body = ResponseKind::FindCoordinator(handle(&request, version));
            let encoded = crate::protocol::frame::encode_response(ApiKey::FindCoordinator, version, 7, &body);
            assert!(encoded.is_ok(), "v{version}: {encoded:?}");
        }
    }
}
