//! A single-node Kafka broker on the wire protocol.
//!
//! One node, node id 0, leader of every partition with leader epoch 0 ([`node`]).
//!
//! ## Threads (Kafka's `SocketServer` + `KafkaRequestHandlerPool`)
//!
//! A fixed number, whatever the connections: 1 acceptor + `num.network.threads` (3) network
//! threads + `num.io.threads` (8) io threads + the purgatory's timer + the write-deadline
//! watchdog ([`write_deadline`]) + the log scheduler + the group coordinator's thread (+ the
//! metrics endpoint's thread with `metrics.listen`, [`metrics_endpoint`]). A
//! request that must wait (a Fetch short of `min_bytes`, a JoinGroup waiting for its
//! rebalance, a follower's SyncGroup waiting for the leader) waits in the purgatory, holding no
//! thread.
//!
//! ```text
//! acceptor: TcpListener --accept (max.connections, max.connections.per.ip)--> network thread (round robin)
//! network thread (mio::Poll, one per thread): FrameReceive (MSG_DONTWAIT, size checked first)
//!     -> whole frame: MUTE the connection -> request queue (queued.max.requests; waits when full)
//!     | hang-up while muted -> peer gone -> purgatory drops its waiting request
//!     | no request for connections.max.idle.ms (stuck inside a frame too) -> close
//! io thread: protocol::frame::decode_request -> Responder -> handler::dispatch
//!     -> handler::{api_versions, metadata, create_topics, produce, fetch, list_offsets,
//!                  offset_for_leader_epoch, init_producer_id, describe_configs,
//!                  incremental_alter_configs} | coordinator::handlers (group APIs)
//!     -> Responder::send: write (blocking socket, SO_SNDTIMEO; Fetch slices through this io
//!        thread's read path) -> record Fetch latency -> UNMUTE (the network thread reads the next)
//!     | Fetch short of min_bytes -> DelayedFetch in the purgatory (no thread held) ->
//!        completed on an io thread by check_and_complete(partition) after an append, by the
//!        timer at max_wait_ms, or dropped when its client hung up
//!     | JoinGroup / SyncGroup that must wait -> DelayedGroupRequest in the purgatory (no
//!        thread held) -> completed on an io thread by check_and_complete(group) after a change
//!        of that group, by the timer at the rebalance timeout (+ margin), or dropped when its
//!        client hung up (its member stays until its session times out, as in Kafka)
//! ```
//!
//! Under `server.model=uring` ([`uring`]) the acceptor, the network threads and the
//! write-deadline watchdog are replaced by `server.uring.cores` core threads
//! (`fetchbench-core-N`, 0: one per CPU of the affinity mask), each with its own io_uring ring,
//! listening socket (`SO_REUSEPORT`) and connections; the io threads, the purgatory's timer, the
//! log scheduler and the coordinator's thread stay. A core decodes each request and handles
//! Fetch, ApiVersions, ListOffsets and Metadata (not creating topics) itself; every other API
//! runs on the io threads; every response is written by the connection's core, asynchronously.
//!
//! `server.model` is a dynamic broker config ([`front_end`]): after a switch new connections go
//! to the new front end (started then if it never ran) and the open ones stay on the one that
//! accepted them until they close, so both may run at once. Both accept on the same listening
//! sockets (one per core, `SO_REUSEPORT`, bound at start under either model), which are never
//! closed before the broker stops.
//!
//! A connection is muted from the moment a whole request is read until its response is written,
//! so the responses on one connection are in request order (as Kafka's `SocketServer` mutes a
//! channel). Bad input affects only its own connection (the table in [`connection`]).
//!
//! ## Files
//!
//! This file is a facade (module declarations, re-exports, these docs); every item lives in its
//! own file, and files import from the defining file, one way (no two files import each other):
//!
//! - [`server`]: [`Broker::start`] (open the log directory, bind, start the threads, the log
//!   scheduler's among them) and the running [`BrokerHandle`] (Fetch latency, fetches in
//!   flight, shutdown).
//! - [`front_end`]: [`FrontEnds`](front_end::FrontEnds), the two front ends on one set of
//!   listening sockets (one per core, `SO_REUSEPORT`), the threaded acceptor with the connection
//!   limits, and the switch of `server.model` at runtime (new connections move, open ones stay).
//! - [`server_model`]: [`ServerModel`] (`server.model`): `threaded` (below) or `uring`, and which
//!   read paths each runs ([`ServerModel::supports`]).
//! - [`config`]: [`BrokerConfig`] with Kafka's names, `server.properties` parsing
//!   ([`BrokerConfig::apply_props`]), [`NOT_APPLICABLE_KEYS`](config::NOT_APPLICABLE_KEYS), [`DEFAULT_LISTEN`], and the
//!   coordinator's configuration derived from it.
//! - [`dynamic_config`]: the dynamic broker configs (KIP-226): the broker keys DescribeConfigs
//!   reports, and `read.path` and `server.model`, the ones IncrementalAlterConfigs changes at
//!   runtime (per broker or cluster default), with Kafka's checks and error codes.
//! - [`error`]: [`BrokerError`], the errors of starting, configuring and stopping the broker.
//! - [`node`]: [`NODE_ID`](node::NODE_ID), [`CLUSTER_ID`](node::CLUSTER_ID) (leader epoch 0).
//! - [`shared`]: [`Shared`](shared::Shared), the state every thread and handler gets (the locks
//!   below, the io pool, the purgatory, the Fetch metrics).
//! - [`connection`]: one client connection as its threads share it
//!   ([`Connection`](connection::Connection)), the network threads' inboxes, and what happens to
//!   bad input.
//! - [`network`]: the network threads (read, mute, hang-ups, idle connections).
//! - [`io_pool`]: the request queue and the io threads ([`IoPool`](io_pool::IoPool)).
//! - [`request_handler`]: what an io thread does with a request (decode, Responder, dispatch).
//! - [`responder`]: [`Responder`](responder::Responder), the right to answer one request; the io
//!   threads' read paths.
//! - [`response`]: [`Response`](response::Response), what a handler answers, and the `encode` /
//!   `fetch` framing helpers.
//! - [`planted`]: a test-only busy spin per MiB after each Fetch response, under both models,
//!   the known cost `scripts/gate-calibration.sh` calibrates the CI gate against.
//! - [`write_deadline`]: [`WriteDeadlines`](write_deadline::WriteDeadlines), the bound on one
//!   whole response write (a watchdog closes a connection whose write passed `SEND_TIMEOUT`).
//! - [`purgatory`]: [`Purgatory`](purgatory::Purgatory), requests that wait holding no thread
//!   (Kafka's `DelayedOperationPurgatory`), watched by [`WatchKey`](purgatory::WatchKey).
//! - [`delayed_fetch`]: long polling (Kafka's `DelayedFetch`): a Fetch short of `min_bytes`
//!   waits in the purgatory, watching its partitions; only an append to one of them tries it.
//! - [`metrics_registry`]: the metrics endpoint's registry ([`BrokerHandle::metrics_text`]):
//!   process CPU, RSS, faults and context switches, per read path bytes / transfers / syscalls,
//!   per API total-time histograms, in-flight and parked requests, connections, the broker and
//!   the machine, in the OpenMetrics text format (`prometheus-client`).
//! - [`metrics_endpoint`]: `metrics.listen=HOST:PORT`: one thread answering `GET /metrics`
//!   (bounded HTTP/1.x on a std `TcpListener`).
//! - [`request_metrics`]: the Fetch latency histograms, one per io thread, merged when taken
//!   ([`FetchLatencies`]), and the Fetch requests in flight.
//! - [`handler`]: the dispatch (Kafka's `KafkaApis`) and one file per API.
//! - [`coordinator`]: the group coordinator: group state machine, runtime (groups and committed
//!   offsets sharded by `__consumer_offsets` partition, a lock each, timers), per-group wakeups,
//!   waiting JoinGroup / SyncGroup requests in the purgatory (`delayed_join`), the group APIs'
//!   handlers, and `__consumer_offsets` storage in the broker's log.
//! - [`txn_coordinator`]: the transaction coordinator's state machine and decisions (Kafka's
//!   `TransactionMetadata` and `TransactionCoordinator`, pure) and its state manager (Kafka's
//!   `TransactionStateManager`: ids sharded by `__transaction_state` partition, records appended
//!   to and replayed from that topic), its runtime (the broker's coordinator, COMMIT / ABORT
//!   markers, its thread: replay, timeout aborts) and the transaction APIs' handlers.
//! - [`uring`]: the `uring` server model's front end (cores, rings, the async response writer).
//! - [`conn_handle`]: [`ConnHandle`](conn_handle::ConnHandle), the connection a Responder answers
//!   on, of either model.
//! - [`topics`]: topic lookup (by name or topic id) and creation, for CreateTopics, Metadata's
//!   auto-create and `__consumer_offsets`.
//! - [`errors`]: the Kafka error codes, and the mapping of log errors to them (one place).
//! - [`test_support`]: what the integration tests may ask of a running broker
//!   ([`BrokerHandle::test_support`]), without its locks (except the one seam that holds a
//!   partition's lock).
//!
//! ## Shared state and lock order
//!
//! The log directory is one shared [`LogManager`](crate::log::manager::LogManager) in
//! [`Shared`](shared::Shared), with no broker-wide lock: the partition is the unit of locking
//! (Kafka's `Partition` / `UnifiedLog` lock, [`Partition`](crate::log::Partition)). A request
//! looks its partitions up under the manager's read-mostly map lock, released at once (never held
//! across I/O), then takes only each partition's own lock:
//!
//! - Fetch reads the high watermark and log start offset without any lock (atomics) and holds the
//!   partition's lock, for reading, only while it looks up the [`FileSlice`](crate::log::FileSlice)
//!   (no record bytes are read then); the slices keep their segment files open, and the bytes
//!   move after the lock is released, through the io thread's own
//!   [`ReadPath`](crate::read_path::ReadPath). ListOffsets latest/earliest and Metadata's leader
//!   epochs take no partition lock at all.
//! - Produce validates every partition's records first, with no lock (CRC-32C, decompression, the
//!   record walk, LogValidator's rules); then each append holds its own partition's lock only to
//!   check producer state, assign offsets and write. Appends to different partitions run in
//!   parallel.
//! - fsyncs (of rolled segments, `flush.*`) and the offset checkpoints run on the log scheduler's
//!   thread ([`crate::log::scheduler`]), never on a request; its fsyncs hold no lock.
//! - Topic creation (CreateTopics, Metadata's auto-create, `__consumer_offsets`) checks and
//!   creates under the manager's creation lock, doing its file I/O outside the map lock.
//! - Shutdown: [`Shared::logs`](shared::Shared::logs) answers `None` from its start (handlers
//!   answer retriable errors); then the manager closes each partition after the append in flight
//!   on it, and later appends get `NOT_LEADER_OR_FOLLOWER`.
//!
//! Locks, in the order they may be taken (never the reverse):
//!
//! 1. a group coordinator shard's write-order mutex ([`coordinator::runtime`], one per
//!    `__consumer_offsets` partition): held by that shard's writers from computing a change to
//!    applying its append's result; under it, briefly, the shard's lock (a leaf: the coordinator
//!    holds no shard lock across an append, and a waiting JoinGroup / SyncGroup holds none: it
//!    waits in the purgatory, holding no lock and no thread, and takes its shard's lock only
//!    briefly when tried, to look for its answer; the timer alarm of [`coordinator::wakeup`] is a
//!    leaf too, and a group's change reaches the purgatory (4.) after the shard lock is
//!    released), then the locks below;
//! 2. a delayed operation's own lock ([`purgatory`]), held while it tries to complete (which
//!    builds a Fetch response: the partition locks below, then the write, holding no other lock);
//! 3. the log directory's locks, in their own order (see [`crate::log::manager`]): the creation
//!    lock, the producer id lock, the map lock, then one partition's lock. A group record
//!    appended to `__consumer_offsets` ([`coordinator::storage`]) takes its partition's lock
//!    under the shard's write-order mutex; nothing that holds a partition's lock takes the map
//!    lock, another partition's lock or a coordinator lock;
//! 4. the purgatory's watch-list shards and its timer's mutex, each taken alone for a short update
//!    (by `check_and_complete` after the partition locks are released, by produce and by the
//!    coordinator's appends under the write-order mutex), never while an operation is tried;
//! 5. the io pool's queue mutex and each network thread's inbox mutex, taken alone, innermost.
//!
//! The connection counts and each io thread's Fetch latency slot have mutexes of their own, each
//! taken alone for one short update (a slot by its io thread, and by
//! [`BrokerHandle::take_fetch_latency`]).
//!
//! ## Limits, signals, metrics
//!
//! Connection limits (Kafka's `ConnectionQuotas`): `max.connections` and
//! `max.connections.per.ip`; a connection past either is closed at once, before it is read, with
//! a warning naming the limit; open connections are unaffected and a closed one frees its place.
//! Idle connections close after `connections.max.idle.ms` (Kafka's default 10 min). Memory per
//! connection is bounded: one request in flight, its frame buffer growing with the bytes that
//! arrived (at most `socket.request.max.bytes`). Signals are handled by `fetchbench serve`
//! (SIGINT/SIGTERM -> [`BrokerHandle::shutdown`]).
//!
//! Fetch latency, the broker's own view (Kafka's
//! `kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer`): every consumer
//! Fetch answered is timed from the moment its request frame was completely read to the moment
//! its response was completely written (queue and long-poll waits included) and recorded by the
//! io thread that wrote it in its own histogram ([`crate::metrics::Latency`]), merged, taken and
//! reset by [`BrokerHandle::take_fetch_latency`].
//!
//! Not here: fetch sessions (KIP-227: every Fetch is a full fetch, see [`handler::fetch`]),
//! KIP-890 part 2 transactions (`transaction.version` 2; [`txn_coordinator`] serves the
//! KIP-98 protocol, AddPartitionsToTxn / EndTxn / TxnOffsetCommit up to v4), the KIP-848 consumer
//! group protocol, replication, and any listener but PLAINTEXT.
//!
//! Tested with real clients: kcat (librdkafka 2.0.2) lists, produces (uncompressed, gzip, snappy, lz4,
//! zstd) and consumes over every read path (`tests/it/kcat.rs`); kcat, confluent-kafka and
//! kafka-python consume in groups (`tests/it/group_clients.rs`); confluent-kafka and kafka-python
//! run transactions (commit, abort, fencing, `send_offsets_to_transaction`, a SIGKILL of the
//! broker mid-transaction) read back with read_committed by them and by kcat
//! (`tests/it/txn_clients.rs`).

pub(crate) mod config;
pub(crate) mod conn_handle;
pub(crate) mod connection;
pub(crate) mod coordinator;
pub(crate) mod delayed_fetch;
pub(crate) mod dynamic_config;
pub(crate) mod error;
pub mod errors;
pub(crate) mod front_end;
pub(crate) mod handler;
pub(crate) mod io_pool;
pub(crate) mod metrics_endpoint;
pub(crate) mod metrics_registry;
pub(crate) mod network;
pub(crate) mod node;
pub mod planted;
pub(crate) mod purgatory;
pub(crate) mod request_handler;
pub(crate) mod request_metrics;
pub(crate) mod responder;
pub(crate) mod response;
pub(crate) mod server;
pub mod server_model;
pub(crate) mod shared;
pub(crate) mod test_support;
pub(crate) mod topics;
pub(crate) mod txn_coordinator;
pub(crate) mod uring;
pub(crate) mod write_deadline;

pub use config::{BrokerConfig, DEFAULT_LISTEN};
pub use error::BrokerError;
pub use request_metrics::FetchLatencies;
pub use server::{Broker, BrokerHandle};
pub use server_model::ServerModel;
pub use uring::gauges::UringResources;
