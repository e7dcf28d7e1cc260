//! # fetchbench
//!
//! fetchbench measures what it costs to move Kafka log data from disk to consumers. It holds a
//! segment log in Apache Kafka's own on-disk format and (in later modules) moves fetched bytes to
//! sockets through swappable read paths, driven by a broker that speaks the Kafka wire protocol.
//!
//! ## The data flow of one fetch
//!
//! ```text
//! log::PartitionLog::read(fetch_offset, max_bytes, min_one_batch)
//!      -> OffsetIndex::lookup(offset)       -> (offset, position)   mmapped sparse index
//!      -> Segment::find_batch(position)      -> first batch whose last offset >= fetch_offset
//!      -> FileSlice { segment, position, len }   a view: NO record bytes are read here
//! read path (a later module) moves the slice's bytes to a socket
//! ```
//!
//! This mirrors Kafka's `LogSegment.read` -> `FileRecords.slice` -> `TransferableRecords.writeTo`:
//! the index finds, the slice names, and only the read path moves bytes.
//!
//! ## Module map
//!
//! - [`log`]: the storage engine: RecordBatch v2 ([`log::batch`]), segments and their `.index` /
//!   `.timeindex` files, [`log::PartitionLog`], recovery, retention and compaction, and the
//!   `log dump` tool.
//! - [`protocol`]: the Kafka wire protocol: size-prefixed frames with the `socket.request.max.bytes`
//!   limit, request headers and bodies decoded with the `kafka-protocol` crate
//!   ([`protocol::frame`]), response encoding, and the hand-framed zero-copy Fetch response
//!   ([`protocol::fetch_response`]).
//! - [`read_path`]: the mechanisms that move record bytes from a segment file to a socket (copy,
//!   mmap, sendfile, io_uring splice, O_DIRECT, null) and their per-transfer accounting;
//!   measuring them is the harness's (`bench::loopback`).
//! - [`broker`]: a single-node broker on the Kafka wire protocol, one handler file per API, with
//!   idempotent produce, zero-copy Fetch responses, long polling, and a group coordinator
//!   ([`broker::coordinator`]: consumer groups, rebalances, offsets in `__consumer_offsets`).
//! - [`client`]: fetchbench's own Kafka clients: a version-negotiating connection, the load
//!   producer, the consumer (assign or group membership, assignors), and the admin queries behind
//!   `fetchbench groups`.
//! - [`metrics`]: metric types shared by broker and harness (the [`metrics::Latency`]
//!   HdrHistogram); the bottom layer, importing nothing of the crate.
//! - [`bench`](mod@bench): the benchmark harness: workload files with sweeps, latency histograms with
//!   coordinated-omission correction, the results JSON schema, `fetchbench compare`, and
//!   `fetchbench read-paths` (each read path alone, its loopback mode).
#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(unreachable_pub)]

pub mod bench;
pub mod broker;
pub mod client;
pub mod log;
pub mod metrics;
pub mod protocol;
pub mod read_path;
