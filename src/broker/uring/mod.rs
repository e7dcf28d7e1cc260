//! The `uring` server model's front end: thread per core on io_uring (Redpanda / Seastar,
//! Apache Iggy), beside the threaded one. One broker, two front ends: the handlers
//! ([`dispatch`](super::handler::dispatch::dispatch)), the log, the coordinator, the purgatory
//! and the Fetch response framing are the threaded model's; only accepting, receiving and
//! writing responses differ.
//!
//! ## Why hand-written on the `io-uring` crate
//!
//! The point of this model is to measure what io_uring itself does with a deep queue per core,
//! so the code must decide exactly which SQEs each read path issues (linked splice chains,
//! `READ_FIXED` + `SEND`, `SEND_ZC` with its notifications), count every buffer and pipe lent to
//! the kernel per connection, and have no hidden fallback or helper thread. A runtime (compio
//! as Iggy uses it, monoio, glommio) would add a large dependency with its own I/O choices
//! (buffer management, when to punt to a thread pool, its own timers), which is what we would
//! then be measuring.
//!
//! ## Threads
//!
//! `server.uring.cores` cores (0: one per CPU in the process's affinity mask), threads
//! `fetchbench-core-N`, each with its own ring (no `SQPOLL`: a kernel thread spinning on the
//! queue would hide its CPU time and take a core), plus the threads both models share: the
//! `num.io.threads` io threads, the purgatory's timer, the log scheduler and the group
//! coordinator's. No acceptor, no network threads, no write-deadline watchdog (a core bounds
//! its own writes), unless the broker ran `server.model=threaded` before a switch to `uring`
//! (then they serve the connections they accepted: `front_end.rs`). The kernel's `iou-wrk` threads run the splices (io_uring always punts
//! `SPLICE` to them) and the reads that miss the page cache, at most
//! [`IOWQ_MAX_WORKERS`](self::core::IOWQ_MAX_WORKERS) of each kind per core (none waits for a peer:
//! the sockets are `O_NONBLOCK`, see `send.rs`), and are counted in the process's CPU time.
//!
//! ## A core
//!
//! ```text
//! listening socket (SO_REUSEPORT, one per core, same address; bound at start under either
//!   model; armed only while server.model is uring) --multishot ACCEPT-->
//!   max.connections / max.connections.per.ip (Shared::acquire_slot) --> Conn
//! Conn --multishot RECV (provided buffer ring; ENOBUFS: re-armed after the buffers return)-->
//!   FrameReceive (size checked against socket.request.max.bytes first) --> whole frame: MUTE
//!   --> decode on the core --> Fetch, ApiVersions, ListOffsets, Metadata (not creating topics):
//!          handler::dispatch inline, on the core
//!       --> every other API (Produce, group APIs, CreateTopics, InitProducerId, ...: they write
//!          files or wait on locks): the io pool (IoPool::submit, never waits; bounded by the
//!          connections, each with one request in flight)
//!   --> Responder::send posts (conn, Response, Fetch context) to the core's mailbox (eventfd,
//!       multishot POLL_ADD) --> Transfer on the core's ring (send.rs), with the engine of
//!       `read.path` as it is when the transfer starts --> record the Fetch
//!       latency in the core's own slot, drop the in-flight guard, UNMUTE (parse what came
//!       meanwhile)
//! peer hang-up (RECV 0 / error) while muted --> 'gone': the purgatory drops a waiting Fetch
//! timer (checked each turn, 10-250 ms): a write past SEND_TIMEOUT (30 s) closes the
//!   connection; connections.max.idle.ms closes idle ones
//! ```
//!
//! Responses on a connection leave in request order (one request in flight per connection, as
//! a muted Kafka channel). Many transfers are in flight per ring: every connection's, each with
//! several operations (a chain of splices, several reads).
//!
//! ## No blocking call on a core's loop
//!
//! Sockets and segment files are read and written only through the ring. The one exception is
//! the Fetch handler's index lookup, which runs inline: it takes a partition's read lock briefly
//! (never held across I/O; an append holds it for its write) and reads the mmapped offset index
//! pages (a page fault if they left the page cache). ApiVersions, ListOffsets and Metadata read
//! only memory. Everything else goes to the io pool.
//!
//! ## Closing and shutdown
//!
//! A connection is closed (bad frame, write error, truncated segment, idle, write deadline,
//! a handler's close): `shutdown(SHUT_RDWR)` on its socket and `ASYNC_CANCEL` of every operation
//! on it; it is dropped, and its buffers and pipe given back, only when the last completion of
//! its operations has arrived: memory the kernel may still write is never freed or reused
//! ([`gauges`] counts what is lent). `BrokerHandle::shutdown` posts a stop to every core: it
//! stops accepting, closes idle connections, lets the responses in progress finish for up to
//! 5 s, closes the rest, waits for every completion, and ends.
//!
//! ## A change of `read.path`
//!
//! `read.path` is dynamic (IncrementalAlterConfigs, [`dynamic_config`](super::dynamic_config)).
//! Before the change is made, [`start::prepare_cores`] posts a `Prepare` to every core and waits
//! for all the answers: each core checks the new engine's opcodes on its own ring and, for
//! `uring-read-send` / `uring-send-zc`, registers its registered buffers if it has none yet
//! (kept from then on until the core ends); one core's refusal refuses the request, nothing
//! changed. Then each core reads the current path (one atomic load) before every response it
//! starts: a transfer keeps the engine it started with to its end and gives its buffers and
//! pipe back as usual; a core that leaves `uring-splice` closes its idle pipes.
//!
//! ## Files
//!
//! - [`start`]: the core count, the listening sockets, starting and stopping the cores, getting
//!   them ready for a new `read.path`.
//! - [`core`]: one core's loop (accept, receive, dispatch, completions, timers, close).
//! - [`conn`]: a connection as its core holds it, and the buffered-bytes reader for framing.
//! - [`send`]: the response writer and the three engines' state machines.
//! - [`buffers`]: the provided buffer ring, the registered buffers, the pipes.
//! - [`mailbox`]: the core's mailbox and the connection handle Responders hold.
//! - [`ops`]: the `user_data` packing of every operation.
//! - [`gauges`]: the in-use counters of buffers and pipes.

pub(crate) mod buffers;
pub(crate) mod conn;
pub(crate) mod core;
pub(crate) mod gauges;
pub(crate) mod mailbox;
pub(crate) mod ops;
pub(crate) mod send;
pub(crate) mod start;
