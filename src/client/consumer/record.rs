//! A record as [`Consumer::poll`](super::Consumer::poll) returns it (Kafka's `ConsumerRecord`).

use std::sync::Arc;

use bytes::Bytes;

use crate::log::batch::mixed::{DecodedHeader, TimestampType};

/// One record as `poll` returns it (Kafka's `ConsumerRecord`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic (shared by the records of a partition).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp in ms (-1 for magic 0).
    pub timestamp: i64,
    /// CreateTime or LogAppendTime (NoTimestampType for magic 0).
    pub timestamp_type: TimestampType,
    /// Key, `None` when null.
    pub key: Option<Bytes>,
    /// Value, `None` when null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers (always empty for magic 0/1).
    pub headers: Vec<DecodedHeader>,
}
