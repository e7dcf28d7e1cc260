//! The key and value schemas Kafka's transaction coordinator writes to `__transaction_state`
//! (Kafka's `TransactionLog` with the generated `TransactionLogKey` and `TransactionLogValue` of
//! `transaction-coordinator/src/main/resources/common/message`, Kafka 4.0).
//!
//! Every key and value starts with a big-endian `i16` version, followed by the fields of that
//! version in Kafka's protocol encoding (big-endian integers; `string` = `i16` length + UTF-8,
//! arrays = `i32` count, -1 = null). Value v1 is flexible (KIP-482): compact lengths (unsigned
//! varint of length + 1, 0 = null) and a tagged-field section at the end of every struct.
//!
//! ```text
//! key   v0    TransactionLogKey      transactional_id: string
//!
//! value v0, v1  TransactionLogValue
//!   producer_id: i64
//!   producer_epoch: i16
//!   transaction_timeout_ms: i32
//!   transaction_status: i8                 Kafka's TransactionState id (0 Empty .. 7 PrepareEpochFence)
//!   transaction_partitions: [topic: string, partition_ids: [i32]]?   null when the state is Empty
//!   transaction_last_update_timestamp_ms: i64
//!   transaction_start_timestamp_ms: i64     -1 before the first partition is added
//!   tagged fields (v1): 0 previous_producer_id: i64 (default -1)
//!                       1 next_producer_id: i64 (default -1)
//!                       2 client_transaction_version: i16 (default 0)
//! ```
//!
//! Tagged fields are written only when they differ from their default, in tag order, as Kafka's
//! generated `write` does; a tagged field this decoder does not know is kept and written back.
//! A record with a null value is a tombstone: the transactional id expired
//! (`transactional.id.expiration.ms`, Kafka's `TransactionStateManager.removeExpiredTransactionalIds`)
//! and compaction removes the key after `delete.retention.ms`.
//!
//! Which versions Kafka writes (`TransactionVersion.transactionLogValueVersion`): key v0 always;
//! value v0 until the `transaction.version` feature is 1 or more (Kafka 4.0 with KIP-890), v1 then.
//!
//! The topic: [`TRANSACTION_STATE_TOPIC`], Kafka's default partition count
//! [`DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS`] (`transaction.state.log.num.partitions`), and
//! [`partition_for`], the partition that holds a transactional id's records
//! (`TransactionStateManager.partitionFor`: `Utils.abs(transactionalId.hashCode) %
//! transactionTopicPartitionCount`), the same function as the group coordinator's
//! ([`super::consumer_offsets::partition_for`]).
//!
//! ## Why in `protocol`
//!
//! Beside [`super::consumer_offsets`], for the same reasons: the broker's transaction coordinator
//! writes and replays these records, and `log dump` and the admin client may read them; `protocol`
//! is the one layer all of them may use. What the status byte means (the state machine) lives
//! with the coordinator (`broker::txn_coordinator::metadata`).
//!
//! Decoding is defensive: every length is checked against the bytes left before anything is
//! allocated, and no input makes it panic. As in Kafka's readers, bytes after the last field are
//! ignored.

use super::consumer_offsets;
use super::primitives::{read_version, DecodeError, EncodeError, Reader, TaggedField, Writer};

/// The internal topic holding the transaction coordinator's state (Kafka's
/// `Topic.TRANSACTION_STATE_TOPIC_NAME`).
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// Kafka's default `transaction.state.log.num.partitions`
/// (`TransactionLogConfig.TRANSACTIONS_TOPIC_PARTITIONS_DEFAULT`).
pub const DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS: i32 = 50;
/// The only key version (`TransactionLogKey` v0).
pub const TRANSACTION_LOG_KEY_V0: i16 = 0;

/// The `__transaction_state` partition of `transactional_id`: `Utils.abs(transactionalId.hashCode)
/// % transaction.state.log.num.partitions` (Kafka's `TransactionStateManager.partitionFor`; Java's
/// `String.hashCode` over UTF-16 code units, `Utils.abs` maps `Integer.MIN_VALUE` to 0).
///
/// `num_partitions` must be positive (a non-positive count is taken as 1).
pub fn partition_for(transactional_id: &str, num_partitions: i32) -> i32 {
    consumer_offsets::partition_for(transactional_id, num_partitions)
}

// ---------------------------------------------------------------------------------------------
// Key.

/// The key of every `__transaction_state` record: the transactional id (`TransactionLogKey` v0).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TransactionLogKey {
    /// The key version (0).
    pub version: i16,
    /// The producer's `transactional.id`.
    pub transactional_id: String,
}

impl TransactionLogKey {
    const SCHEMA: &'static str = "TransactionLogKey";

    /// A key of version 0 (Kafka's `TransactionLog.keyToBytes`).
    pub fn new(transactional_id: impl Into<String>) -> Self {
        TransactionLogKey { version: TRANSACTION_LOG_KEY_V0, transactional_id: transactional_id.into() }
    }

    /// Decodes a key whose version prefix is 0.
    ///
    /// Errors: [`DecodeError`] naming the field and byte position; another version is
    /// [`DecodeError::UnsupportedVersion`] (see [`decode_record`], which keeps such keys as
    /// [`TransactionLogRecord::Unknown`] instead, as Kafka's `readTxnRecordKey` does).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 0, 0, i16::MAX)?;
        Ok(TransactionLogKey { version: r.version(), transactional_id: r.string("transactional_id")? })
    }

    /// Encodes the key, version prefix included.
    ///
    /// Errors: [`EncodeError`] for a version other than 0 or an id over 32767 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut w = Writer::new(Self::SCHEMA, self.version, false);
        if self.version != TRANSACTION_LOG_KEY_V0 {
            return Err(w.err("version", "transaction log keys have version 0"));
        }
        w.string("transactional_id", &self.transactional_id)?;
        Ok(w.finish())
    }
}

// ---------------------------------------------------------------------------------------------
// Value.

/// The partitions of one topic in a transaction (`TransactionLogValue.PartitionsSchema`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnPartitions {
    /// The topic name.
    pub topic: String,
    /// The partition indexes of that topic in the transaction.
    pub partition_ids: Vec<i32>,
    /// Tagged fields of v1 this decoder does not interpret.
    pub unknown_tagged_fields: Vec<TaggedField>,
}

/// A transactional id's state (`TransactionLogValue` v0/v1): what Kafka's
/// `TransactionLog.valueToBytes` writes from a `TxnTransitMetadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionLogValue {
    /// Value version, 0 or 1 (see the module docs for which Kafka writes).
    pub version: i16,
    /// The producer id in use by the transactional id.
    pub producer_id: i64,
    /// Tag 0, v1 only: the producer id of the last committed transaction (-1 = none).
    pub previous_producer_id: i64,
    /// Tag 1, v1 only: the latest producer id sent to the producer (-1 = none; KIP-890).
    pub next_producer_id: i64,
    /// The epoch of `producer_id`.
    pub producer_epoch: i16,
    /// The producer's `transaction.timeout.ms`.
    pub transaction_timeout_ms: i32,
    /// The state id (Kafka's `TransactionState.id`: 0 Empty, 1 Ongoing, 2 PrepareCommit,
    /// 3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence), not
    /// checked here.
    pub transaction_status: i8,
    /// The partitions in the transaction, grouped by topic; `None` (null) in state Empty.
    pub transaction_partitions: Option<Vec<TxnPartitions>>,
    /// When the state last changed (ms since the epoch).
    pub transaction_last_update_timestamp_ms: i64,
    /// When the transaction started (its first partition was added; ms), -1 for none.
    pub transaction_start_timestamp_ms: i64,
    /// Tag 2, v1 only: the `transaction.version` the client used (default 0).
    pub client_transaction_version: i16,
    /// Tagged fields of v1 this decoder does not interpret (tags other than 0, 1, 2).
    pub unknown_tagged_fields: Vec<TaggedField>,
}

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// Smallest encoding of one `TxnPartitions` element: v0 empty topic (2) + empty array (4); v1
/// compact empty topic (1) + compact empty array (1) + no tagged fields (1).
const MIN_PARTITIONS_SIZE_V0: usize = 2 + 4;
const MIN_PARTITIONS_SIZE_V1: usize = 3;

impl TransactionLogValue {
    const SCHEMA: &'static str = "TransactionLogValue";
    /// Highest version known.
    pub const MAX_VERSION: i16 = 1;

    /// Decodes a value of version 0 or 1 (Kafka's `TransactionLog.readTxnRecordValue`, which
    /// refuses other versions).
    ///
    /// Errors: [`DecodeError`] naming the field and byte position; a known tagged field of the
    /// wrong size is [`DecodeError::Invalid`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::versioned(Self::SCHEMA, bytes, 0, Self::MAX_VERSION, 1)?;
        let version = r.version();
        let producer_id = r.i64("producer_id")?;
        let producer_epoch = r.i16("producer_epoch")?;
        let transaction_timeout_ms = r.i32("transaction_timeout_ms")?;
        let transaction_status = r.i8("transaction_status")?;
        let min = if r.flexible() { MIN_PARTITIONS_SIZE_V1 } else { MIN_PARTITIONS_SIZE_V0 };
        let transaction_partitions = match r.nullable_array_len("transaction_partitions", min)? {
            None => None,
            Some(n) => {
                let mut topics = Vec::with_capacity(n);
                for _ in 0..n {
                    let topic = r.string("topic")?;
                    let count = r.array_len("partition_ids", 4)?;
                    let mut partition_ids = Vec::with_capacity(count);
                    for _ in 0..count {
                        partition_ids.push(r.i32("partition_ids")?);
                    }
                    let unknown_tagged_fields = r.tagged_fields()?;
                    topics.push(TxnPartitions { topic, partition_ids, unknown_tagged_fields });
                }
                Some(topics)
            }
        };
        let transaction_last_update_timestamp_ms = r.i64("transaction_last_update_timestamp_ms")?;
        let transaction_start_timestamp_ms = r.i64("transaction_start_timestamp_ms")?;
        let mut value = TransactionLogValue {
            version,
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch,
            transaction_timeout_ms,
            transaction_status,
            transaction_partitions,
            transaction_last_update_timestamp_ms,
            transaction_start_timestamp_ms,
            client_transaction_version: 0,
            unknown_tagged_fields: Vec::new(),
        };
        for field in r.tagged_fields()? {
            let wrong_size = |expected: usize| DecodeError::Invalid {
                schema: Self::SCHEMA,
                version,
                field: "tagged fields",
                position: bytes.len(),
                reason: format!("tag {} holds {} bytes, its type needs {expected}", field.tag, field.data.len()),
            };
            match field.tag {
                TAG_PREVIOUS_PRODUCER_ID | TAG_NEXT_PRODUCER_ID => {
                    let b: [u8; 8] = field.data.as_slice().try_into().map_err(|_| wrong_size(8))?;
                    if field.tag == TAG_PREVIOUS_PRODUCER_ID {
                        value.previous_producer_id = i64::from_be_bytes(b);
                    } else {
                        value.next_producer_id = i64::from_be_bytes(b);
                    }
                }
                TAG_CLIENT_TRANSACTION_VERSION => {
                    let b: [u8; 2] = field.data.as_slice().try_into().map_err(|_| wrong_size(2))?;
                    value.client_transaction_version = i16::from_be_bytes(b);
                }
                _ => value.unknown_tagged_fields.push(field),
            }
        }
        Ok(value)
    }

    /// Encodes the value at `self.version`, version prefix included. In v0 the tagged fields
    /// must hold their defaults (-1, -1, 0, none unknown): v0 cannot carry them.
    ///
    /// Errors: [`EncodeError`] for an unknown version, a topic name over 32767 bytes in v0, or
    /// a tagged field away from its default in v0.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let v = self.version;
        let flexible = v >= 1;
        let mut w = Writer::new(Self::SCHEMA, v, flexible);
        if !(0..=Self::MAX_VERSION).contains(&v) {
            return Err(w.err("version", "known versions are 0 and 1"));
        }
        w.i64(self.producer_id);
        w.i16(self.producer_epoch);
        w.i32(self.transaction_timeout_ms);
        w.i8(self.transaction_status);
        w.nullable_array_len("transaction_partitions", self.transaction_partitions.as_ref().map(Vec::len))?;
        for t in self.transaction_partitions.iter().flatten() {
            w.string("topic", &t.topic)?;
            w.array_len("partition_ids", t.partition_ids.len())?;
            for p in &t.partition_ids {
                w.i32(*p);
            }
            w.tagged_fields(&t.unknown_tagged_fields)?;
        }
        w.i64(self.transaction_last_update_timestamp_ms);
        w.i64(self.transaction_start_timestamp_ms);
        let mut tagged = Vec::new();
        if self.previous_producer_id != -1 {
            tagged.push(TaggedField {
                tag: TAG_PREVIOUS_PRODUCER_ID,
                data: self.previous_producer_id.to_be_bytes().to_vec(),
            });
        }
        if self.next_producer_id != -1 {
            tagged.push(TaggedField { tag: TAG_NEXT_PRODUCER_ID, data: self.next_producer_id.to_be_bytes().to_vec() });
        }
        if self.client_transaction_version != 0 {
            tagged.push(TaggedField {
                tag: TAG_CLIENT_TRANSACTION_VERSION,
                data: self.client_transaction_version.to_be_bytes().to_vec(),
            });
        }
        if !flexible && !tagged.is_empty() {
            return Err(w.err(
                "tagged fields",
                "previous/next producer id and client transaction version need value version 1",
            ));
        }
        if let Some(f) = self.unknown_tagged_fields.iter().find(|f| f.tag <= TAG_CLIENT_TRANSACTION_VERSION) {
            return Err(w.err("tagged fields", format!("tag {} is a known field, not an unknown one", f.tag)));
        }
        tagged.extend(self.unknown_tagged_fields.iter().cloned());
        tagged.sort_by_key(|f| f.tag);
        w.tagged_fields(&tagged)?;
        Ok(w.finish())
    }
}

// ---------------------------------------------------------------------------------------------
// Whole records.

/// One decoded `__transaction_state` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransactionLogRecord {
    /// A transactional id's state; `value` is `None` for a tombstone (the id expired).
    Transaction {
        /// The transactional id.
        key: TransactionLogKey,
        /// Its state, or `None` for a tombstone.
        value: Option<TransactionLogValue>,
    },
    /// A key version this decoder does not know, kept raw, not an error: Kafka's
    /// `readTxnRecordKey` returns `UnknownKey` and the loader skips it with a warning.
    Unknown {
        /// The key's version prefix.
        key_version: i16,
        /// The whole key.
        key: Vec<u8>,
        /// The whole value, `None` for a tombstone.
        value: Option<Vec<u8>>,
    },
}

/// Decodes one `__transaction_state` record from its key and value (`None` = null).
///
/// Errors: [`DecodeError::MissingKey`] for a null key (Kafka's loader requires a key), and the
/// decoding errors of the key and value; a key version other than 0 is not an error but
/// [`TransactionLogRecord::Unknown`].
pub fn decode_record(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<TransactionLogRecord, DecodeError> {
    let key = key.ok_or(DecodeError::MissingKey)?;
    match read_version("__transaction_state key", key)? {
        TRANSACTION_LOG_KEY_V0 => Ok(TransactionLogRecord::Transaction {
            key: TransactionLogKey::decode(key)?,
            value: value.map(TransactionLogValue::decode).transpose()?,
        }),
        key_version => {
            Ok(TransactionLogRecord::Unknown { key_version, key: key.to_vec(), value: value.map(<[u8]>::to_vec) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(version: i16) -> TransactionLogValue {
        TransactionLogValue {
            version,
            producer_id: 4000,
            previous_producer_id: if version >= 1 { 3999 } else { -1 },
            next_producer_id: if version >= 1 { 4001 } else { -1 },
            producer_epoch: 7,
            transaction_timeout_ms: 60_000,
            transaction_status: 1,
            transaction_partitions: Some(vec![
                TxnPartitions { topic: "orders".into(), partition_ids: vec![0, 2], unknown_tagged_fields: vec![] },
                TxnPartitions {
                    topic: "__consumer_offsets".into(),
                    partition_ids: vec![17],
                    unknown_tagged_fields: if version >= 1 {
                        vec![TaggedField { tag: 5, data: vec![9] }]
                    } else {
                        vec![]
                    },
                },
            ]),
            transaction_last_update_timestamp_ms: 1_764_730_000_123,
            transaction_start_timestamp_ms: 1_764_730_000_000,
            client_transaction_version: if version >= 1 { 2 } else { 0 },
            unknown_tagged_fields: if version >= 1 { vec![TaggedField { tag: 9, data: vec![1, 2] }] } else { vec![] },
        }
    }

    #[test]
    fn every_version_round_trips() {
        for version in 0..=1 {
            let v = sample(version);
            let bytes = v.encode().unwrap();
            assert_eq!(i16::from_be_bytes([bytes[0], bytes[1]]), version);
            let back = TransactionLogValue::decode(&bytes).unwrap();
            assert_eq!(back, v, "v{version}");
            assert_eq!(back.encode().unwrap(), bytes);
            // Empty state: null partitions.
            let mut empty = v.clone();
            empty.transaction_status = 0;
            empty.transaction_partitions = None;
            empty.transaction_start_timestamp_ms = -1;
            assert_eq!(TransactionLogValue::decode(&empty.encode().unwrap()).unwrap(), empty);
            // Complete states: an empty (not null) list.
            let mut complete = v;
            complete.transaction_partitions = Some(vec![]);
            assert_eq!(TransactionLogValue::decode(&complete.encode().unwrap()).unwrap(), complete);
        }
        let key = TransactionLogKey::new("my-txn");
        assert_eq!(TransactionLogKey::decode(&key.encode().unwrap()).unwrap(), key);
    }

    #[test]
    fn key_bytes_by_hand() {
        let expected = vec![
            0x00, 0x00, // key version 0
            0x00, 0x03, // transactional_id length 3
            b't', b'x', b'n', // "txn"
        ];
        assert_eq!(TransactionLogKey::new("txn").encode().unwrap(), expected);
    }

    #[test]
    fn value_v0_bytes_by_hand() {
        let value = TransactionLogValue {
            version: 0,
            producer_id: 1000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 5,
            transaction_timeout_ms: 60_000,
            transaction_status: 1, // Ongoing
            transaction_partitions: Some(vec![TxnPartitions {
                topic: "t".into(),
                partition_ids: vec![0, 3],
                unknown_tagged_fields: vec![],
            }]),
            transaction_last_update_timestamp_ms: 0x0102,
            transaction_start_timestamp_ms: 0x0101,
            client_transaction_version: 0,
            unknown_tagged_fields: vec![],
        };
        let expected: Vec<u8> = vec![
            0x00, 0x00, // value version 0
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // producer_id 1000
            0x00, 0x05, // producer_epoch 5
            0x00, 0x00, 0xea, 0x60, // transaction_timeout_ms 60000
            0x01, // transaction_status 1 (Ongoing)
            0x00, 0x00, 0x00, 0x01, // transaction_partitions: 1 topic
            0x00, 0x01, b't', // topic "t"
            0x00, 0x00, 0x00, 0x02, // partition_ids: 2 elements
            0x00, 0x00, 0x00, 0x00, // partition 0
            0x00, 0x00, 0x00, 0x03, // partition 3
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, // last update 0x0102
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, // start 0x0101
        ];
        assert_eq!(value.encode().unwrap(), expected);
        assert_eq!(TransactionLogValue::decode(&expected).unwrap(), value);
        // The same state in Empty: null partitions (-1).
        let mut empty = value.clone();
        empty.transaction_status = 0;
        empty.transaction_partitions = None;
        let bytes = empty.encode().unwrap();
        assert_eq!(&bytes[16..21], &[0x00, 0xff, 0xff, 0xff, 0xff]); // status 0, null array
    }

    #[test]
    fn value_v1_bytes_by_hand() {
        let value = TransactionLogValue {
            version: 1,
            producer_id: 1000,
            previous_producer_id: 999,
            next_producer_id: -1, // default: not written
            producer_epoch: 5,
            transaction_timeout_ms: 60_000,
            transaction_status: 2, // PrepareCommit
            transaction_partitions: Some(vec![TxnPartitions {
                topic: "t".into(),
                partition_ids: vec![3],
                unknown_tagged_fields: vec![],
            }]),
            transaction_last_update_timestamp_ms: 0x0102,
            transaction_start_timestamp_ms: 0x0101,
            client_transaction_version: 2,
            unknown_tagged_fields: vec![],
        };
        let expected: Vec<u8> = vec![
            0x00, 0x01, // value version 1 (flexible)
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // producer_id 1000
            0x00, 0x05, // producer_epoch 5
            0x00, 0x00, 0xea, 0x60, // transaction_timeout_ms 60000
            0x02, // transaction_status 2 (PrepareCommit)
            0x02, // transaction_partitions: compact array, 1 topic + 1
            0x02, b't', // topic: compact string "t" (length 1 + 1)
            0x02, // partition_ids: compact array, 1 element + 1
            0x00, 0x00, 0x00, 0x03, // partition 3
            0x00, // PartitionsSchema: no tagged fields
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, // last update 0x0102
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, // start 0x0101
            0x02, // 2 tagged fields (next_producer_id holds its default -1: left out)
            0x00, 0x08, // tag 0 previous_producer_id, 8 bytes
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe7, // 999
            0x02, 0x02, // tag 2 client_transaction_version, 2 bytes
            0x00, 0x02, // 2
        ];
        assert_eq!(value.encode().unwrap(), expected);
        assert_eq!(TransactionLogValue::decode(&expected).unwrap(), value);
        // Null partitions in v1: compact length 0.
        let mut empty = value;
        empty.transaction_partitions = None;
        assert_eq!(empty.encode().unwrap()[17], 0x00);
    }

    /// Kafka's `TransactionLogTest.testDeserializeFutureTransactionLogValue`: a v1 value written
    /// by a future schema with unknown tagged fields (100: a string "foo", 101: an int32 4000) in
    /// the value and in its partitions struct is read, the unknown tags are kept.
    #[test]
    fn future_tagged_fields_are_kept() {
        let bytes: Vec<u8> = vec![
            0x00, 0x01, // version 1
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // producer_id 1000
            0x00, 0x64, // producer_epoch 100
            0x00, 0x00, 0x03, 0xe8, // transaction_timeout_ms 1000
            0x04, // CompleteCommit
            0x02, // 1 topic
            0x06, b't', b'o', b'p', b'i', b'c', // compact "topic"
            0x02, 0x00, 0x00, 0x00, 0x01, // partition_ids [1]
            0x02, // 2 tagged fields in the partitions struct
            0x64, 0x05, 0x00, 0x03, b'f', b'o', b'o', // tag 100, 5 bytes: string "foo"
            0x65, 0x04, 0x00, 0x00, 0x0f, 0xa0, // tag 101, 4 bytes: 4000
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0xd0, // last update 2000
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0b, 0xb8, // start 3000
            0x02, // 2 tagged fields in the value
            0x64, 0x05, 0x00, 0x03, b'f', b'o', b'o', // tag 100
            0x65, 0x04, 0x00, 0x00, 0x0f, 0xa0, // tag 101
        ];
        let v = TransactionLogValue::decode(&bytes).unwrap();
        assert_eq!((v.producer_id, v.producer_epoch, v.transaction_timeout_ms), (1000, 100, 1000));
        assert_eq!(v.transaction_status, 4);
        assert_eq!((v.transaction_last_update_timestamp_ms, v.transaction_start_timestamp_ms), (2000, 3000));
        assert_eq!((v.previous_producer_id, v.next_producer_id, v.client_transaction_version), (-1, -1, 0));
        let tags = |f: &[TaggedField]| f.iter().map(|t| t.tag).collect::<Vec<_>>();
        assert_eq!(tags(&v.unknown_tagged_fields), vec![100, 101]);
        let parts = v.transaction_partitions.as_ref().unwrap();
        assert_eq!((parts[0].topic.as_str(), parts[0].partition_ids.as_slice()), ("topic", &[1][..]));
        assert_eq!(tags(&parts[0].unknown_tagged_fields), vec![100, 101]);
        assert_eq!(v.encode().unwrap(), bytes);
    }

    #[test]
    fn records_and_tombstones() {
        let key = TransactionLogKey::new("t1").encode().unwrap();
        let value = sample(1).encode().unwrap();
        let rec = decode_record(Some(&key), Some(&value)).unwrap();
        assert_eq!(
            rec,
            TransactionLogRecord::Transaction { key: TransactionLogKey::new("t1"), value: Some(sample(1)) }
        );
        let tomb = decode_record(Some(&key), None).unwrap();
        assert_eq!(tomb, TransactionLogRecord::Transaction { key: TransactionLogKey::new("t1"), value: None });
        let unknown = decode_record(Some(&[0, 1, 0, 0]), Some(&[7])).unwrap();
        assert_eq!(
            unknown,
            TransactionLogRecord::Unknown { key_version: 1, key: vec![0, 1, 0, 0], value: Some(vec![7]) }
        );
    }

    #[test]
    fn bad_input_gives_errors() {
        assert!(matches!(decode_record(None, None), Err(DecodeError::MissingKey)));
        assert!(matches!(decode_record(Some(&[0]), None), Err(DecodeError::MissingVersion { available: 1, .. })));
        // Key whose id length says 5 bytes but 2 follow.
        let e = TransactionLogKey::decode(&[0, 0, 0, 5, b'a', b'b']).unwrap_err();
        assert!(
            matches!(e, DecodeError::Truncated { field: "transactional_id", position: 4, needed: 5, available: 2, .. }),
            "{e:?}"
        );
        assert!(matches!(TransactionLogKey::decode(&[0, 1, 0, 0]), Err(DecodeError::UnsupportedVersion { .. })));
        // Every truncation of a valid value is an error, never a panic.
        for version in 0..=1 {
            let bytes = sample(version).encode().unwrap();
            for cut in 0..bytes.len() {
                assert!(TransactionLogValue::decode(&bytes[..cut]).is_err(), "v{version} cut at {cut}");
            }
        }
        // Unknown value version.
        let e = TransactionLogValue::decode(&[0, 2, 0]).unwrap_err();
        assert!(matches!(e, DecodeError::UnsupportedVersion { version: 2, min: 0, max: 1, .. }), "{e:?}");
        // A partition count the bytes cannot hold is refused before allocating.
        let mut v = vec![0, 0];
        v.extend_from_slice(&0i64.to_be_bytes());
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(&i32::MAX.to_be_bytes());
        let e = TransactionLogValue::decode(&v).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid { field: "transaction_partitions", position: 17, .. }), "{e:?}");
        // A known tagged field of the wrong size.
        let mut b = sample(1);
        b.previous_producer_id = -1;
        b.next_producer_id = -1;
        b.client_transaction_version = 0;
        b.unknown_tagged_fields = vec![];
        let mut bytes = b.encode().unwrap();
        assert_eq!(bytes.pop(), Some(0)); // no tagged fields
        bytes.extend_from_slice(&[1, 0, 1, 0xff]); // tag 0 with 1 byte
        let e = TransactionLogValue::decode(&bytes).unwrap_err();
        assert!(matches!(e, DecodeError::Invalid { field: "tagged fields", .. }), "{e:?}");
    }

    #[test]
    fn encode_errors() {
        let mut v = sample(0);
        v.previous_producer_id = 1;
        assert_eq!(v.encode().unwrap_err().field, "tagged fields");
        let mut v = sample(1);
        v.unknown_tagged_fields = vec![TaggedField { tag: 1, data: vec![] }];
        assert_eq!(v.encode().unwrap_err().field, "tagged fields");
        let mut v = sample(0);
        v.version = 2;
        assert_eq!(v.encode().unwrap_err().field, "version");
        let mut k = TransactionLogKey::new("x".repeat(40_000));
        assert_eq!(k.encode().unwrap_err().field, "transactional_id");
        k.version = 1;
        assert_eq!(k.encode().unwrap_err().field, "version");
    }

    #[test]
    fn partition_for_is_kafkas() {
        // "txn": 't' 116, 'x' 120, 'n' 110: 116*31^2 + 120*31 + 110 = 111476 + 3720 + 110 = 115306;
        // 115306 % 50 = 6.
        assert_eq!(consumer_offsets::java_string_hash("txn"), 115_306);
        assert_eq!(partition_for("txn", 50), 6);
        // "tx-é" (U+00E9 = 233 is one UTF-16 unit): 116*31^3 + 120*31^2 + 45*31 + 233
        // = 3455756 + 115320 + 1395 + 233 = 3572704; % 50 = 4.
        assert_eq!(consumer_offsets::java_string_hash("tx-\u{e9}"), 3_572_704);
        assert_eq!(partition_for("tx-\u{e9}", 50), 4);
        // "my-txn" hashes negative in Java (-1061187895): abs first, then modulo -> 45.
        assert_eq!(consumer_offsets::java_string_hash("my-txn"), -1_061_187_895);
        assert_eq!(partition_for("my-txn", DEFAULT_TRANSACTION_STATE_NUM_PARTITIONS), 45);
        // Integer.MIN_VALUE maps to partition 0 (Utils.abs).
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        assert_eq!(partition_for("txn", 1), 0);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(key in proptest::collection::vec(any::<u8>(), 0..48),
                                           value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..160))) {
            let _ = decode_record(Some(&key), value.as_deref());
            if let Some(v) = &value {
                let _ = TransactionLogValue::decode(v);
            }
        }

        #[test]
        fn never_panics_on_mutated_values(version in 0i16..=1, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
                                          cut in any::<usize>()) {
            let mut bytes = sample(version).encode().unwrap();
            for (at, b) in flips {
                let n = bytes.len();
                bytes[at % n] ^= b;
            }
            bytes.truncate(cut % (bytes.len() + 1));
            if let Ok(v) = TransactionLogValue::decode(&bytes) {
                // What decodes re-encodes (tags may come back in order).
                let _ = v.encode();
            }
        }

        #[test]
        fn values_round_trip(version in 0i16..=1, producer_id in any::<i64>(), epoch in any::<i16>(), timeout in any::<i32>(),
                             status in any::<i8>(), topics in proptest::option::of(proptest::collection::vec(("[a-z._-]{0,12}", proptest::collection::vec(any::<i32>(), 0..4)), 0..4)),
                             last in any::<i64>(), start in any::<i64>(), prev in any::<i64>(), next in any::<i64>(), ctv in any::<i16>()) {
            let value = TransactionLogValue {
                version,
                producer_id,
                previous_producer_id: if version >= 1 { prev } else { -1 },
                next_producer_id: if version >= 1 { next } else { -1 },
                producer_epoch: epoch,
                transaction_timeout_ms: timeout,
                transaction_status: status,
                transaction_partitions: topics.map(|ts| ts.into_iter().map(|(topic, partition_ids)| TxnPartitions { topic, partition_ids, unknown_tagged_fields: vec![] }).collect()),
                transaction_last_update_timestamp_ms: last,
                transaction_start_timestamp_ms: start,
                client_transaction_version: if version >= 1 { ctv } else { 0 },
                unknown_tagged_fields: vec![],
            };
            let bytes = value.encode().unwrap();
            prop_assert_eq!(TransactionLogValue::decode(&bytes).unwrap(), value);
        }
    }
}
