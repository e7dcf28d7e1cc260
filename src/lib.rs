//! # fetchbench
//!
//! fetchbench measures what it costs to move Kafka log data from disk to consumers. It holds a
//! segment log in Apache Kafka's own on-disk format and moves fetched bytes to sockets through
//! swappable read paths, driven by a broker that speaks the Kafka wire protocol.
//!
//! ## The data flow of one fetch
//!
//! ```text
//! protocol::frame                 size-prefixed frame, header and body decoded once
//! broker::handler::fetch          one function per API
//! log::PartitionLog::read(fetch_offset, max_bytes, min_one_batch)
//!      -> OffsetIndex::lookup(offset)       -> (offset, position)   mmapped sparse index
//!      -> Segment::translate_offset(offset)  -> first batch whose last offset >= fetch_offset
//!      -> FileSlice { segment, position, len }   a view: NO record bytes are read here
//! protocol::fetch_response        header bytes + FileSlice chunks
//! read_path::ReadPath::transfer   the only place record bytes move (copy, mmap, sendfile, ...)
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
//! - [`machine`]: the machine description a results file records and the broker's metrics
//!   endpoint shows ([`machine::Machine`]), and this process's resident memory.
//! - [`bench`](mod@bench): the benchmark harness: workload files with sweeps, latency histograms with
//!   coordinated-omission correction, the results JSON schema, `fetchbench compare`, `fetchbench
//!   report` (one HTML page of several results files), and
//!   `fetchbench read-paths` (each read path alone, its loopback mode).
//!
//! ## Layering
//!
//! Each layer uses only the layers below it, and no files import each other (no cycle, not even
//! through a `mod.rs`: a `mod.rs` declares, re-exports and documents; the files of a module import
//! from the file that defines an item):
//!
//! ```text
//! main.rs (the CLI)   -> bench and the commands (client::{produce_cmd, consume_cmd, admin}, log::dump, broker)
//! bench               -> client, broker, protocol, read_path, log, metrics, machine
//! broker              -> protocol, read_path, log, metrics, machine never bench, never client
//! client              -> protocol, log::batch                       never broker, never read_path
//! protocol            -> read_path, log                             wire formats: frames, the zero-copy Fetch
//!                                                                   response, the consumer protocol,
//!                                                                   the __consumer_offsets records
//! read_path           -> log                                        moves a FileSlice's bytes
//! log                 -> nothing of ours                            the storage engine; no wire format
//! metrics             -> nothing of ours                            used by broker and bench only
//! machine             -> read_path                                  the machine and this process (/proc)
//! ```
//!
//! `lib.rs` only declares the top-level modules (nothing is imported from or through it).
//! `tests/it/layering.rs` checks every `use crate::` / `super::` / child-module path of `src/`
//! against this table and for file cycles (and refuses `#[path]` / `include!`, which would hide
//! an edge), and fails naming the file and line.
//!
//! ## The public API
//!
//! The modules that `main.rs`, `benches/`, `tests/` and `fuzz/` name are public, and so are the
//! types their signatures need; every other module is `pub(crate)`, and `unreachable_pub` (an
//! error under `clippy -D warnings`) makes an item of a private module say `pub(crate)`. Inside
//! the public modules (`log::batch`, `log::checkpoint`, `bench::results`, ...) some items are
//! still `pub` that no outside user names. Integration tests reach broker internals only through
//! `BrokerHandle::test_support()` (`broker/test_support.rs`), never through the broker's locks.
#![forbid(unsafe_op_in_unsafe_fn)]
// The module docs map the internals (crate-private files included): read them with
// `cargo doc --document-private-items`, where these links resolve.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod bench;
pub mod broker;
pub mod client;
pub mod log;
pub mod machine;
pub mod metrics;
pub mod protocol;
pub mod read_path;
