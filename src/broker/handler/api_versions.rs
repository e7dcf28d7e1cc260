//! ApiVersions (API key 18): the APIs and versions this broker serves.
//!
//! Each advertised range is the intersection of what `kafka-protocol` can decode
//! (`ApiKey::valid_versions`, Apache Kafka 4.x's message specs) with what the handlers implement
//! ([`HANDLED`]). A request at a version the broker does not know is answered with an
//! ApiVersions **v0** response carrying `UNSUPPORTED_VERSION` (35) and the broker's ApiVersions
//! range, so the client can retry with a version both know (KIP-511; Kafka's
//! `ApiVersionsRequest.getErrorResponse`).
//!
//! Not yet: Kafka 4 also lists Produce v0-v2, which it refuses (KAFKA-18659), because older
//! librdkafka only enables compression when they are listed.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseKind};

use super::encode;
use crate::broker::connection::Response;
use crate::broker::errors;

/// The APIs with a handler and the versions the handler implements, inclusive: Produce v3-v12
/// and Fetch v4-v12 address topics by name (v13+ by topic id, not yet); ListOffsets v1-v10;
/// Metadata v0-v12; ApiVersions v0-v4.
pub const HANDLED: [(ApiKey, i16, i16); 5] = [
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
];

/// The versions of `api_key` this broker serves, `(min, max)` inclusive, or `None` when it
/// does not serve the API (or the intersection with the codec's range is empty).
pub fn served_range(api_key: ApiKey) -> Option<(i16, i16)> {
    let &(_, min, max) = HANDLED.iter().find(|(k, _, _)| *k == api_key)?;
    let codec = api_key.valid_versions();
    let (min, max) = (min.max(codec.min), max.min(codec.max));
    (min <= max).then_some((min, max))
}

/// Every served API with its range, in API key order.
pub fn served_versions() -> Vec<ApiVersion> {
    let mut out: Vec<ApiVersion> = HANDLED
        .iter()
        .filter_map(|&(key, _, _)| {
            served_range(key).map(|(min, max)| {
                ApiVersion::default().with_api_key(key as i16).with_min_version(min).with_max_version(max)
            })
        })
        .collect();
    out.sort_by_key(|v| v.api_key);
    out
}

/// Answers an ApiVersions request (any served version; the client software name and version
/// of v3+ are not used).
pub fn handle(_request: &ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_error_code(errors::NONE).with_api_keys(served_versions())
}

/// The answer to an ApiVersions request at a version this broker does not serve: a v0 response
/// with `UNSUPPORTED_VERSION` and the ApiVersions range only (Kafka's behaviour).
pub fn unsupported_version_response(correlation_id: i32) -> Response {
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
            assert!(codec.min <= v.min_version && v.max_version <= codec.max, "{key:?}");
        }
        assert_eq!(served_range(ApiKey::Produce), Some((3, 12)));
        assert_eq!(served_range(ApiKey::JoinGroup), None);
    }
}
