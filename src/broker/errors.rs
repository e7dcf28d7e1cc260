//! Kafka error codes, and the ONE place where storage errors become them.
//!
//! Codes and names are Kafka's (`org.apache.kafka.common.protocol.Errors`); the mapping follows
//! what Kafka's `ReplicaManager.appendToLocalLog` / `readFromLog` return for the matching
//! exceptions.

use crate::log::{BatchError, LogError};

/// No error.
pub const NONE: i16 = 0;
/// `UNKNOWN_SERVER_ERROR`: an unexpected failure on the broker.
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
/// `OFFSET_OUT_OF_RANGE`: the fetch offset is below the log start offset or above the log end offset.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// `CORRUPT_MESSAGE`: a batch failed its CRC, length or magic check.
pub const CORRUPT_MESSAGE: i16 = 2;
/// `UNKNOWN_TOPIC_OR_PARTITION`: this broker does not host the partition.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// `COORDINATOR_NOT_AVAILABLE`: the group or transaction coordinator is not available (retriable).
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// `MESSAGE_TOO_LARGE`: a batch is larger than `max.message.bytes`.
pub const MESSAGE_TOO_LARGE: i16 = 10;
/// `INVALID_TOPIC_EXCEPTION`: the topic name is not legal.
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
/// `RECORD_LIST_TOO_LARGE`: the record set does not fit a segment (`segment.bytes`).
pub const RECORD_LIST_TOO_LARGE: i16 = 18;
/// `INVALID_REQUIRED_ACKS`: `acks` is not 0, 1 or -1.
pub const INVALID_REQUIRED_ACKS: i16 = 21;
/// `UNSUPPORTED_VERSION`: the API version is not served.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// `INVALID_CONFIG`: a configuration value is not valid.
pub const INVALID_CONFIG: i16 = 40;
/// `INVALID_REQUEST`: the request is malformed or asks for something not served.
pub const INVALID_REQUEST: i16 = 42;
/// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`: transactional produce (not supported here).
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// `KAFKA_STORAGE_ERROR`: a disk error while reading or writing the log.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// `FETCH_SESSION_ID_NOT_FOUND`: a fetch named a session this broker does not have (KIP-227).
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// `INVALID_RECORD`: a record inside a valid batch is invalid (KIP-467).
pub const INVALID_RECORD: i16 = 87;

/// The Kafka error code for a storage error.
///
/// | `LogError`                          | code                        |
/// |-------------------------------------|-----------------------------|
/// | `Batch` (CRC, length, magic, codec) | `CORRUPT_MESSAGE` (2)       |
/// | `Batch` (`InvalidRecord`)           | `INVALID_RECORD` (87)       |
/// | `OffsetOutOfRange`                  | `OFFSET_OUT_OF_RANGE` (1)   |
/// | `InvalidAppend`                     | `CORRUPT_MESSAGE` (2), `RECORD_LIST_TOO_LARGE` (18) when it does not fit a segment |
/// | `Io`, `CorruptIndex`                | `KAFKA_STORAGE_ERROR` (56)  |
/// | `Layout`                            | `INVALID_TOPIC_EXCEPTION` (17) |
/// | `InvalidConfig`                     | `INVALID_CONFIG` (40)       |
pub fn log_error_code(error: &LogError) -> i16 {
    match error {
        LogError::Batch { source, .. } => batch_error_code(source),
        LogError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        LogError::InvalidAppend { reason, .. } if reason.contains("do not fit a segment") => RECORD_LIST_TOO_LARGE,
        LogError::InvalidAppend { .. } => CORRUPT_MESSAGE,
        LogError::Io { .. } | LogError::CorruptIndex { .. } => KAFKA_STORAGE_ERROR,
        LogError::Layout { .. } => INVALID_TOPIC_EXCEPTION,
        LogError::InvalidConfig { .. } => INVALID_CONFIG,
    }
}

/// The Kafka error code for an invalid batch (Kafka's `LogValidator`: `CorruptRecordException`
/// for the batch framing and CRC, `InvalidRecordException` for a bad record inside).
pub fn batch_error_code(error: &BatchError) -> i16 {
    match error {
        BatchError::InvalidRecord { .. } => INVALID_RECORD,
        _ => CORRUPT_MESSAGE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_out_of_range_maps_to_1() {
        let e =
            LogError::OffsetOutOfRange { partition: "t-0".into(), offset: 9, log_start_offset: 0, log_end_offset: 3 };
        assert_eq!(log_error_code(&e), OFFSET_OUT_OF_RANGE);
        let e = LogError::io("read", "/x", std::io::Error::other("boom"));
        assert_eq!(log_error_code(&e), KAFKA_STORAGE_ERROR);
    }
}
