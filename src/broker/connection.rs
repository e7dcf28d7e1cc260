//! One client connection, as the threads that serve it share it ([`Connection`]), and what happens
//! to the bytes a client sends.
//!
//! A connection belongs to one network thread ([`super::network`]), which reads its requests and
//! notices when its peer goes away; while a request of it is in flight the connection is MUTED (not
//! read), so responses leave in request order (Kafka's `SocketServer` mutes a channel the same
//! way). The io thread that handles the request writes the response itself and then unmutes the
//! connection ([`Connection::unmute`]), or closes it ([`Connection::close`]). Bad input never
//! panics and affects only this connection:
//!
//! | input                                             | answer                                   |
//! |---------------------------------------------------|------------------------------------------|
//! | frame size negative or over `socket.request.max.bytes` | connection closed when the 4 size bytes are in, nothing allocated (Kafka: `InvalidReceiveException`) |
//! | no complete request for `connections.max.idle.ms` (silent, or stuck inside a frame) | connection closed (Kafka's idle expiry) |
//! | ApiVersions at a version this broker does not know | ApiVersions v0 response, `UNSUPPORTED_VERSION` (KIP-511) |
//! | unknown API key, other unsupported version, undecodable header or body | connection closed (Kafka does the same) |
//! | an API this broker does not implement yet        | connection closed                         |
//! | acks=0 produce that fails                         | connection closed (the client learns of it that way, as in Kafka) |
//! | a response the peer takes no byte of for [`SEND_TIMEOUT`](super::write_deadline::SEND_TIMEOUT), or does not take whole within it (the [`write_deadline`](super::write_deadline) watchdog) | connection closed |
//! | the peer hangs up (FIN, RST) while a request is in flight | a request waiting in the purgatory is dropped at once, unanswered, and the connection closed; a request being handled is answered if the socket still takes it, the requests sent before the hang-up are read and answered, and the end of the stream closes it |
//!
//! Every close is logged with the peer address and the reason (a frame over
//! `socket.request.max.bytes` names that limit, an idle close `connections.max.idle.ms`). A
//! connection past `max.connections` or `max.connections.per.ip` never gets here: the accept
//! loop ([`super::front_end`]) closes it at once, unread, with a warning naming the limit; the
//! place this connection holds in those limits is freed when the last holder of its
//! [`Connection`] drops it (its network thread, and the request in flight if any).
//!
//! A peer that shuts down only its sending side (half-close) cannot be told from one that closed:
//! a hang-up noticed while a request waits in the purgatory drops it (a client gone from a long
//! poll frees its socket, its place and its request at once, not at `max_wait_ms`); requests
//! that do not wait are still answered, so a client that sends and then shuts down its side
//! gets its answers.
//!
//! Each consumer Fetch (`replica_id` < 0) is timed from the completion of its frame's read to the
//! return of the response's last write and recorded by the io thread that wrote it
//! ([`super::BrokerHandle::take_fetch_latency`]), in the half of the responses that carried
//! record bytes or in the half that carried none ([`super::BrokerHandle::take_fetch_latencies`]);
//! a Fetch closed instead of answered, or whose write fails, is not recorded. Every Fetch is
//! counted in [`super::BrokerHandle::fetches_in_flight`] from its decode to the end of its
//! response's write (or until it is given up).

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mio::{Token, Waker};

use super::shared::ConnectionSlot;
use super::write_deadline::WriteTarget;

/// What io threads and the acceptor tell a network thread.
#[derive(Debug)]
pub(crate) enum InboxMessage {
    /// A new connection to serve (from the acceptor).
    Accepted(Arc<Connection>),
    /// The response of this connection's request is written: read it again.
    Unmute(Token),
    /// This connection was closed by an io thread: forget it.
    Close(Token),
}

/// A network thread's inbox: messages and the waker of its `mio::Poll`.
#[derive(Debug)]
pub(crate) struct Inbox {
    messages: Mutex<Vec<InboxMessage>>,
    waker: Waker,
}

impl Inbox {
    /// An empty inbox that wakes the poll `waker` belongs to.
    pub(crate) fn new(waker: Waker) -> Inbox {
        Inbox { messages: Mutex::new(Vec::new()), waker }
    }

    /// Queues `message` and wakes the network thread (once per batch: a thread that has not
    /// drained the earlier messages yet is already woken).
    pub(crate) fn send(&self, message: InboxMessage) {
        let mut messages = self.messages.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let wake = messages.is_empty();
        messages.push(message);
        drop(messages);
        if wake {
            if let Err(e) = self.waker.wake() {
                tracing::error!("waking a network thread: {e}");
            }
        }
    }

    /// Wakes the network thread without a message (shutdown: it checks the broker's state).
    pub(crate) fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::error!("waking a network thread: {e}");
        }
    }

    /// The queued messages, in order; the inbox is left empty.
    pub(crate) fn take(&self) -> Vec<InboxMessage> {
        std::mem::take(&mut *self.messages.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// One client connection as its network thread and the io thread answering its request share
/// it: the socket, the peer, whether the peer went away or the broker closed it.
///
/// The socket stays in BLOCKING mode with [`SEND_TIMEOUT`](super::write_deadline::SEND_TIMEOUT) as `SO_SNDTIMEO`, for the io threads'
/// writes (a muted connection is written by one io thread and read by nobody); the network thread
/// reads it with `MSG_DONTWAIT`, which never blocks whatever the mode. So no `fcntl` runs per
/// request. Dropping the last holder closes the socket and frees its place in the connection
/// limits.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    token: Token,
    inbox: Arc<Inbox>,
    /// The network thread saw the peer hang up (FIN, RST, error).
    peer_gone: AtomicBool,
    /// The broker closed it: nothing more is written.
    closed: AtomicBool,
    _slot: ConnectionSlot,
}

impl Connection {
    /// A connection on `stream` (blocking, [`SEND_TIMEOUT`](super::write_deadline::SEND_TIMEOUT) set by the caller), served by the
    /// network thread of `inbox` under `token`.
    pub(crate) fn new(
        stream: TcpStream,
        peer: SocketAddr,
        token: Token,
        inbox: Arc<Inbox>,
        slot: ConnectionSlot,
    ) -> Connection {
        Connection {
            stream,
            peer,
            token,
            inbox,
            peer_gone: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            _slot: slot,
        }
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The key of this connection in its network thread.
    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// The socket, for writes (io threads) and `MSG_DONTWAIT` reads (the network thread).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// The socket as a stream, for plain writes.
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Records that the peer hung up (called by the network thread).
    pub(crate) fn set_peer_gone(&self) {
        self.peer_gone.store(true, Ordering::SeqCst);
    }

    /// Whether the peer hung up (the response to a request in flight may still be written: it
    /// may only have shut down its sending side).
    pub(crate) fn is_peer_gone(&self) -> bool {
        self.peer_gone.load(Ordering::SeqCst)
    }

    /// Whether the broker closed the connection (nothing more is written).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the connection is of no more use: the peer hung up or the broker closed it.
    pub(crate) fn is_gone(&self) -> bool {
        self.is_peer_gone() || self.is_closed()
    }

    /// Unmutes the connection: its network thread reads the next request.
    pub(crate) fn unmute(&self) {
        self.inbox.send(InboxMessage::Unmute(self.token));
    }

    /// Closes the connection (both directions at once, whoever still holds it) and tells its
    /// network thread to forget it. Idempotent.
    pub(crate) fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.stream.shutdown(Shutdown::Both);
            self.inbox.send(InboxMessage::Close(self.token));
        }
    }

    /// [`Self::close`] from the network thread itself (no message to itself).
    pub(crate) fn close_here(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.stream.shutdown(Shutdown::Both);
        }
    }
}

/// Whether `e` is the peer going away (reset, broken pipe, aborted), not a fault.
pub(crate) fn is_disconnect(e: &io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted)
}

impl WriteTarget for Connection {
    fn peer(&self) -> std::net::SocketAddr {
        Connection::peer(self)
    }

    fn is_closed(&self) -> bool {
        Connection::is_closed(self)
    }

    fn close(&self) {
        Connection::close(self)
    }
}
