//! What other threads tell a core, and a connection as they see it.
//!
//! - [`CoreMailbox`]: a core's queue (a mutex-guarded `Vec`) and the `eventfd` the core watches
//!   with a multishot `POLL_ADD` on its ring: io threads (and the core itself, for the requests
//!   it answers inline) post responses and closes there; IncrementalAlterConfigs posts the
//!   preparation for a new `read.path` ([`CoreMessage::Prepare`]); the broker posts the stop.
//! - [`UringConn`]: a `uring` connection as a [`Responder`](crate::broker::responder::Responder)
//!   holds it (its id on its core, its peer, whether it is gone), the counterpart of the threaded
//!   model's [`Connection`](crate::broker::connection::Connection). Writing never happens
//!   here: [`UringConn::respond`] posts the response to the core, which writes it on its ring.
//!
//! This file names no other broker file but the ones below it (response, request metrics), so
//! the responder can import it without a cycle.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use crate::broker::metrics_registry::RequestName;
use crate::broker::request_metrics::FetchInFlight;
use crate::broker::response::Response;
use crate::read_path::ReadPathKind;

/// A connection's key on its core: its slot in the core's table (low 32 bits) and the slot's
/// generation (high 32 bits), so a message for a connection closed meanwhile never reaches the
/// slot's next tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConnId {
    /// Index in the core's connection table.
    pub(crate) slot: u32,
    /// Generation of that slot when the connection was accepted.
    pub(crate) generation: u32,
}

/// What the core needs to finish a request's bookkeeping once its response is written: Kafka's
/// `TotalTimeMs` start and the in-flight guard of a Fetch (see
/// [`BrokerHandle::take_fetch_latency`](crate::broker::BrokerHandle::take_fetch_latency)).
#[derive(Debug)]
pub(crate) struct FetchContext {
    /// When the request's frame was completely received.
    pub(crate) received: Instant,
    /// A consumer Fetch: its total time is recorded once the response is written.
    pub(crate) consumer_fetch: bool,
    /// The request's name for the metrics endpoint's total-time histograms (`None`: a request
    /// answered undecoded, not recorded).
    pub(crate) api: Option<RequestName>,
    /// Every Fetch: counted in flight until the response is written (or given up: dropping the
    /// context drops the guard).
    pub(crate) in_flight: Option<FetchInFlight>,
}

/// A message for a core.
#[derive(Debug)]
pub(crate) enum CoreMessage {
    /// Write `response` on the connection, then finish `context` and unmute it.
    Respond {
        /// The connection.
        conn: ConnId,
        /// What to write.
        response: Response,
        /// The request's bookkeeping.
        context: FetchContext,
    },
    /// Close the connection (a request given up unanswered, a close asked by a handler).
    Close(ConnId),
    /// Get ready to run read path `path` (IncrementalAlterConfigs of `read.path`, before the
    /// change is made): check the opcodes its engine issues against the core's ring and
    /// register the buffers it needs; answer `(core index, Ok or the reason)` on `reply`.
    Prepare {
        /// The read path about to become current.
        path: ReadPathKind,
        /// Where the core answers.
        reply: mpsc::Sender<(usize, Result<(), String>)>,
    },
    /// Accept new connections or stop accepting them (the multishot `ACCEPT` cancelled, the
    /// connections open go on): `server.model` changed. The core sends its index on `done`
    /// once armed (accepting) or once its `ACCEPT` has ended (not accepting: from then on it
    /// takes no new connection).
    Accept {
        /// Whether to accept.
        accepting: bool,
        /// Where the core says it is done.
        done: mpsc::Sender<usize>,
    },
    /// The broker is shutting down: stop accepting, finish or close every connection, end.
    Stop,
}

thread_local! {
    /// The mailbox of the core running on this thread (its address), 0 elsewhere: a core posting
    /// to itself needs no wake-up (it drains its mailbox on every turn of its loop).
    static ON_CORE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A core's queue of [`CoreMessage`]s and the `eventfd` that wakes it (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct CoreMailbox {
    /// Messages and whether the core has ended (then posts are dropped at once).
    messages: Mutex<(Vec<CoreMessage>, bool)>,
    /// Non-blocking, close-on-exec `eventfd(2)`.
    eventfd: OwnedFd,
}

impl CoreMailbox {
    /// An empty mailbox with a fresh `eventfd`. Errors: `eventfd(2)`'s.
    pub(crate) fn new() -> io::Result<CoreMailbox> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(CoreMailbox { messages: Mutex::new((Vec::new(), false)), eventfd })
    }

    /// The `eventfd` the core polls.
    pub(crate) fn eventfd(&self) -> &OwnedFd {
        &self.eventfd
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<CoreMessage>, bool)> {
        // Pushes and takes are single statements: a poisoned lock still holds a valid queue.
        self.messages.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `message` and wakes the core (unless posted from the core itself, or the queue
    /// already had messages: the core was woken for them). After the core ended, the message is
    /// dropped (a response's guards with it).
    pub(crate) fn post(&self, message: CoreMessage) {
        let mut queue = self.lock();
        if queue.1 {
            drop(queue);
            drop(message);
            return;
        }
        let wake = queue.0.is_empty() && ON_CORE.get() != self as *const CoreMailbox as usize;
        queue.0.push(message);
        drop(queue);
        if wake {
            self.wake();
        }
    }

    /// Wakes the core (adds 1 to the eventfd; a full counter already wakes it).
    pub(crate) fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to a descriptor this mailbox owns.
        let _ = unsafe { libc::write(self.eventfd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Resets the eventfd's counter (non-blocking read; the core calls it when woken).
    pub(crate) fn clear_wake(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from a descriptor we own.
        let _ = unsafe { libc::read(self.eventfd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }

    /// The queued messages, in order (the core's drain).
    pub(crate) fn take(&self) -> Vec<CoreMessage> {
        std::mem::take(&mut self.lock().0)
    }

    /// Marks this thread as the mailbox's core (posts from it skip the wake-up).
    pub(crate) fn enter_core_thread(&self) {
        ON_CORE.set(self as *const CoreMailbox as usize);
    }

    /// The core has ended: later posts are dropped; returns what was still queued.
    pub(crate) fn close(&self) -> Vec<CoreMessage> {
        let mut queue = self.lock();
        queue.1 = true;
        std::mem::take(&mut queue.0)
    }
}

/// A `uring` connection as the threads that answer its requests hold it (see the
/// [module docs](self)).
#[derive(Debug)]
pub(crate) struct UringConn {
    id: ConnId,
    peer: SocketAddr,
    mailbox: std::sync::Arc<CoreMailbox>,
    /// The core saw the peer hang up (receive returned 0 or an error).
    peer_gone: AtomicBool,
    /// The broker closed it (or asked its core to): nothing more is written.
    closed: AtomicBool,
}

impl UringConn {
    /// Connection `id` from `peer`, served by the core of `mailbox`.
    pub(crate) fn new(id: ConnId, peer: SocketAddr, mailbox: std::sync::Arc<CoreMailbox>) -> UringConn {
        UringConn { id, peer, mailbox, peer_gone: AtomicBool::new(false), closed: AtomicBool::new(false) }
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Records that the peer hung up (its core calls this).
    pub(crate) fn set_peer_gone(&self) {
        self.peer_gone.store(true, Ordering::SeqCst);
    }

    /// Records that the core closed the connection (no message: the core knows).
    pub(crate) fn set_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the broker closed the connection.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the connection is of no more use: the peer hung up or the broker closed it.
    pub(crate) fn is_gone(&self) -> bool {
        self.peer_gone.load(Ordering::SeqCst) || self.is_closed()
    }

    /// Hands `response` to the connection's core, which writes it, records the Fetch latency
    /// (`context`), drops the in-flight guard and unmutes the connection.
    pub(crate) fn respond(&self, response: Response, context: FetchContext) {
        self.mailbox.post(CoreMessage::Respond { conn: self.id, response, context });
    }

    /// Asks the core to close the connection. Idempotent.
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.mailbox.post(CoreMessage::Close(self.id));
        }
    }
}
