//! ApiVersions (API key 18): the APIs and versions this broker serves.
//!
//! Each advertised range is the intersection of what `kafka-protocol` can decode
//! (`ApiKey::valid_versions`, Apache Kafka 4.x's message specs) with what the handlers implement
//! ([`HANDLED`]). A request at a version the broker does not know is answered with an
//! ApiVersions **v0** response carrying `UNSUPPORTED_VERSION` (35) and the broker's ApiVersions
//! range, so the client can retry with a version both know (KIP-511; Kafka's
//! `ApiVersionsRequest.getErrorResponse`).
//!
//! Like Kafka 4 (KAFKA-18659), Produce is advertised from v0 although v0-v2 are refused
//! ([`ADVERTISED_REFUSED`]): librdkafka (kcat) only enables compression when those versions are
//! listed. The codec (Kafka 4's specs) cannot decode Produce v0-v2, so such a request closes
//! the connection, as any undecodable request does.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseKind};

use crate::broker::errors;
use crate::broker::response::{encode, Response};

/// The APIs with a handler and the versions the handler implements, inclusive: Produce v3-v13
/// and Fetch v4-v18 (topics by name below v13, by topic id from v13, KIP-516); ListOffsets v1-v10;
/// Metadata v0-v12; ApiVersions v0-v4; the group coordinator's APIs (FindCoordinator v0-v6, JoinGroup
/// v0-v9, SyncGroup v0-v5, Heartbeat v0-v4, LeaveGroup v0-v5, OffsetCommit v2-v9, OffsetFetch v1-v9,
/// TxnOffsetCommit v0-v4, ListGroups v0-v5, DescribeGroups v0-v6, DeleteGroups v0-v2:
/// [`crate::broker::coordinator`]); CreateTopics v2-v7; OffsetForLeaderEpoch v2-v4 (KIP-320);
/// InitProducerId v0-v5 (v6 cannot be decoded by the codec); the transaction coordinator's
/// AddPartitionsToTxn v0-v4, AddOffsetsToTxn v0-v4 and EndTxn v0-v4
/// ([`crate::broker::txn_coordinator::handlers`]; v5 of these and of TxnOffsetCommit is KIP-890
/// part 2's `transaction.version` 2, not advertised); DescribeConfigs v1-v4 and
/// IncrementalAlterConfigs v0-v1 (the dynamic broker configs: `describe_configs`,
/// `incremental_alter_configs`).
pub(crate) const HANDLED: [(ApiKey, i16, i16); 24] = [
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::TxnOffsetCommit, 0, 4),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 4),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
];

/// Versions advertised in ApiVersions below the served range but refused with
/// `UNSUPPORTED_VERSION` (Kafka 4, KAFKA-18659): `(api, min, max)` inclusive.
pub(crate) const ADVERTISED_REFUSED: [(ApiKey, i16, i16); 1] = [(ApiKey::Produce, 0, 2)];

/// Whether `version` of `api_key` is advertised but refused ([`ADVERTISED_REFUSED`]).
#[cfg(test)]
pub(crate) fn is_advertised_refused(api_key: ApiKey, version: i16) -> bool {
    ADVERTISED_REFUSED.iter().any(|&(k, min, max)| k == api_key && (min..=max).contains(&version))
}

/// The versions of `api_key` this broker serves, `(min, max)` inclusive, or `None` when it
/// does not serve the API (or the intersection with the codec's range is empty).
pub(crate) fn served_range(api_key: ApiKey) -> Option<(i16, i16)> {
    let &(_, min, max) = HANDLED.iter().find(|(k, _, _)| *k == api_key)?;
    let codec = api_key.valid_versions();
    let (min, max) = (min.max(codec.min), max.min(codec.max));
    (min <= max).then_some((min, max))
}

/// Every served API with its advertised range (the served one, extended down by
/// [`ADVERTISED_REFUSED`]), in API key order.
pub(crate) fn served_versions() -> Vec<ApiVersion> {
    let mut out: Vec<ApiVersion> = HANDLED
        .iter()
        .filter_map(|&(key, _, _)| {
            served_range(key).map(|(min, max)| {
                let min = ADVERTISED_REFUSED
                    .iter()
                    .filter(|&&(k, _, hi)| k == key && hi + 1 >= min)
                    .fold(min, |m, &(_, lo, _)| m.min(lo));
                ApiVersion::default().with_api_key(key as i16).with_min_version(min).with_max_version(max)
            })
        })
        .collect();
    out.sort_by_key(|v| v.api_key);
    out
}

/// Answers an ApiVersions request (any served version; the client software name and version
/// of v3+ are not used).
pub(crate) fn handle(_request: &ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_error_code(errors::NONE).with_api_keys(served_versions())
}

/// The answer to an ApiVersions request at a version this broker does not serve: a v0 response
/// with `UNSUPPORTED_VERSION` and the ApiVersions range only (Kafka's behaviour).
pub(crate) fn unsupported_version_response(correlation_id: i32) -> Response {
    let range = served_range(ApiKey::ApiVersions).unwrap_or((0, 0));
    let body = ApiVersionsResponse::default().with_error_code(errors::UNSUPPORTED_VERSION).with_api_keys(vec![
        ApiVersion::default()
            .with_api_key(ApiKey::ApiVersions as i16)
            .with_min_version(range.0)
            .with_max_version(range.1),
    ]);
    encode(ApiKey::ApiVersions, 0, correlation_id, &ResponseKind::ApiVersions(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_ranges_are_within_the_codec() {
        for v in served_versions() {
            let key = ApiKey::try_from(v.api_key).unwrap();
            let codec = key.valid_versions();
            let min = served_range(key).unwrap().0;
            assert!(codec.min <= min && v.max_version <= codec.max, "{key:?}");
        }
        assert_eq!(served_range(ApiKey::Produce), Some((3, 13)));
        assert_eq!(served_range(ApiKey::JoinGroup), Some((0, 9)));
        assert_eq!(served_range(ApiKey::AlterConfigs), None);
        let produce = served_versions().into_iter().find(|v| v.api_key == ApiKey::Produce as i16).unwrap();
        assert_eq!(produce.min_version, 0, "Produce v0-v2 advertised (KAFKA-18659)");
        assert!(is_advertised_refused(ApiKey::Produce, 2) && !is_advertised_refused(ApiKey::Produce, 3));
    }
}
