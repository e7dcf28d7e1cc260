//! The network threads (Kafka's `SocketServer` processors, `num.network.threads` of them): each
//! serves its share of the connections with its own `mio::Poll`.
//!
//! For each connection a network thread:
//!
//! - reads the next request without blocking (`MSG_DONTWAIT`) into the connection's
//!   [`FrameReceive`] (the size checked against `socket.request.max.bytes` before anything is
//!   allocated; the payload buffer grows with the bytes received);
//! - when a whole frame is in, MUTES the connection (reads nothing more of it) and queues the
//!   request for the io threads ([`IoPool::send_request`](super::io_pool::IoPool::send_request),
//!   waiting while `queued.max.requests` are queued); the io thread that answers unmutes it (its
//!   inbox message), and the next request is read: responses leave in request order;
//! - notices a peer that hangs up (FIN, RST, error: `EPOLLRDHUP` / `EPOLLHUP` / `EPOLLERR`)
//!   even while the connection is muted: it marks the connection's peer gone and asks the
//!   purgatory to drop the request of it that waits there ([`Purgatory::connection_closed`]),
//!   which closes the connection; a request being handled instead is answered, and what the peer
//!   sent before hanging up is still read (pipelined requests, e.g. a LeaveGroup behind a
//!   Heartbeat) until the end of the stream closes the connection;
//! - closes it after `connections.max.idle.ms` without a complete request while unmuted
//!   (nothing in flight), including when it is stuck inside a frame; checked every tenth of
//!   the setting (10 ms ..= 1 s).
//!
//! It never writes: the io threads write responses themselves (see
//! [`responder`](super::responder)). A network thread ends once the broker shut down and its
//! last connection is gone; the last one to end closes the io pool.
//!
//! [`Purgatory::connection_closed`]: super::purgatory::Purgatory::connection_closed

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::conn_handle::ConnHandle;
use super::connection::{is_disconnect, Connection, Inbox, InboxMessage};
use super::request_handler;
use super::shared::Shared;
use crate::protocol::frame::{FrameReceive, ProtocolError, ReceiveProgress};

/// The token of each poll's waker (connections get tokens from a counter, never this).
const WAKER: Token = Token(usize::MAX);

/// What the broker tells its network threads as a whole.
#[derive(Debug)]
pub(crate) struct NetworkControl {
    /// Set once no connection will be accepted any more (shutdown, after the acceptor ended):
    /// a network thread with no connection left then ends.
    stop: AtomicBool,
    /// Network threads still running.
    running: AtomicUsize,
}

impl NetworkControl {
    /// The control of `threads` network threads.
    pub(crate) fn new(threads: usize) -> NetworkControl {
        NetworkControl { stop: AtomicBool::new(false), running: AtomicUsize::new(threads) }
    }

    /// No more connections come: network threads end once their connections are gone (wake them
    /// with [`Inbox::wake`]).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Starts network thread `index` of `shared`; returns its inbox (new connections, unmutes and
/// closes go there) and its handle.
///
/// Errors: the poll, its waker or the thread could not be made.
pub(crate) fn start(
    index: usize,
    shared: Arc<Shared>,
    control: Arc<NetworkControl>,
) -> io::Result<(Arc<Inbox>, JoinHandle<()>)> {
    let poll = Poll::new()?;
    let waker = Waker::new(poll.registry(), WAKER)?;
    let inbox = Arc::new(Inbox::new(waker));
    let processor =
        Processor { shared, control, poll, inbox: Arc::clone(&inbox), connections: HashMap::new(), idle: None };
    let handle = std::thread::Builder::new().name(format!("fetchbench-net{index}")).spawn(move || processor.run())?;
    Ok((inbox, handle))
}

/// A connection as its network thread sees it.
struct Served {
    conn: Arc<Connection>,
    receive: FrameReceive,
    /// A request of it is in flight: not read until its response is written.
    muted: bool,
    /// The last complete request read, or response written (or the accept).
    last_active: Instant,
}

/// One network thread's state.
struct Processor {
    shared: Arc<Shared>,
    control: Arc<NetworkControl>,
    poll: Poll,
    inbox: Arc<Inbox>,
    connections: HashMap<Token, Served>,
    /// `connections.max.idle.ms` and how often it is checked.
    idle: Option<(Duration, Duration)>,
}

/// A socket read with `MSG_DONTWAIT`: `WouldBlock` instead of waiting, whatever the socket's
/// mode.
struct DontWait<'a>(BorrowedFd<'a>);

impl Read for DontWait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        nix::sys::socket::recv(self.0.as_raw_fd(), buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT)
            .map_err(io::Error::from)
    }
}

impl Processor {
    fn run(mut self) {
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve()));
        if served.is_err() {
            // A bug: its connections are closed (dropped with the thread's state).
            self.shared.count_connection_panic();
            tracing::error!("a network thread panicked (a bug); its {} connections are closed", self.connections.len());
            for served in self.connections.values() {
                served.conn.close_here();
            }
        }
        // Messages that came after the last drain name connections this thread no longer has.
        drop(self.inbox.take());
        if self.control.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.shared.io_pool().close();
        }
    }

    /// The event loop, until the broker stopped and the last connection is gone.
    fn serve(&mut self) {
        self.idle = self.shared.config.connections_max_idle_ms.map(|ms| {
            let idle = Duration::from_millis(ms);
            (idle, (idle / 10).clamp(Duration::from_millis(10), Duration::from_secs(1)))
        });
        let mut next_idle_check = self.idle.map(|(_, every)| Instant::now() + every);
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = next_idle_check.map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("network thread: polling failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            for event in events.iter() {
                if event.token() != WAKER {
                    let hung_up =
                        event.is_read_closed() || (event.is_error() && self.socket_error_pending(event.token()));
                    self.on_event(event.token(), hung_up);
                }
            }
            for message in self.inbox.take() {
                self.on_message(message);
            }
            if let (Some(at), Some((idle, every))) = (next_idle_check, self.idle) {
                let now = Instant::now();
                if now >= at {
                    self.close_idle(now, idle);
                    next_idle_check = Some(now + every);
                }
            }
            if self.control.stop.load(Ordering::SeqCst) && self.connections.is_empty() {
                return;
            }
        }
    }

    /// Whether the socket of `token` holds a pending error (`SO_ERROR`, which reading clears:
    /// a reset the next write would report). `EPOLLERR` alone is not a hang-up: a socket with
    /// `SO_ZEROCOPY` raises it for every completion queued on its error queue (`msg-zerocopy`
    /// reads those itself, on the io thread), with no error pending and the peer still there.
    fn socket_error_pending(&self, token: Token) -> bool {
        let Some(served) = self.connections.get(&token) else { return false };
        !matches!(nix::sys::socket::getsockopt(&served.conn.fd(), nix::sys::socket::sockopt::SocketError), Ok(0))
    }

    fn on_event(&mut self, token: Token, hung_up: bool) {
        let Some(served) = self.connections.get(&token) else { return };
        if !served.muted {
            self.read(token);
            // The hang-up came with the request just read (a client that sends a Fetch and
            // closes at once): no later event will tell of it, so it is noted now.
            if !hung_up || !self.connections.get(&token).is_some_and(|s| s.muted) {
                return;
            }
        }
        let Some(served) = self.connections.get(&token) else { return };
        if hung_up && !served.conn.is_peer_gone() {
            served.conn.set_peer_gone();
            tracing::debug!("{}: the peer hung up while a request of it was in flight", served.conn.peer());
            // A request of it waiting in the purgatory is dropped now, not at its deadline (which
            // closes the connection). A request being handled is answered; then the requests the
            // peer sent before it hung up are read, and the end of the stream closes it.
            self.shared.purgatory().connection_closed();
        }
        // Otherwise: a pipelined request waits until the response is written.
    }

    fn on_message(&mut self, message: InboxMessage) {
        match message {
            InboxMessage::Accepted(conn) => {
                let token = conn.token();
                let fd = conn.fd().as_raw_fd();
                if let Err(e) = self.poll.registry().register(&mut SourceFd(&fd), token, Interest::READABLE) {
                    tracing::warn!("{}: cannot watch the connection ({e}); closed", conn.peer());
                    conn.close_here();
                    return;
                }
                let served = Served { conn, receive: FrameReceive::new(), muted: false, last_active: Instant::now() };
                self.connections.insert(token, served);
                self.read(token);
            }
            InboxMessage::Unmute(token) => {
                if let Some(served) = self.connections.get_mut(&token) {
                    served.muted = false;
                    served.last_active = Instant::now();
                    // Bytes that came while muted raised no new event: read them now.
                    self.read(token);
                }
            }
            InboxMessage::Close(token) => self.forget(token),
        }
    }

    /// Reads the connection's next request, if it is there.
    fn read(&mut self, token: Token) {
        let max_bytes = self.shared.config.socket_request_max_bytes;
        let Some(served) = self.connections.get_mut(&token) else { return };
        let peer = served.conn.peer();
        let progress = served.receive.read_from(&mut DontWait(served.conn.fd()), max_bytes);
        match progress {
            Ok(ReceiveProgress::Pending) => {}
            Ok(ReceiveProgress::Frame(payload)) => {
                // Kafka's TotalTimeMs starts when the request's receive completes.
                let received = Instant::now();
                served.muted = true;
                served.last_active = received;
                let conn = Arc::clone(&served.conn);
                let shared = Arc::clone(&self.shared);
                let job =
                    Box::new(move || request_handler::handle(&shared, ConnHandle::Threaded(conn), payload, received));
                if self.shared.io_pool().send_request(job).is_err() {
                    tracing::info!("{peer}: the broker has stopped serving requests; closing");
                    self.close(token);
                }
            }
            Ok(ReceiveProgress::Closed) => {
                tracing::debug!("{peer}: closed by the peer");
                self.close(token);
            }
            // A client that resets its connection is routine; other read errors are worth a
            // warning, with their cause.
            Err(ProtocolError::Io { source }) if is_disconnect(&source) => {
                tracing::debug!("{peer}: reading a frame: {source}; closing");
                self.close(token);
            }
            Err(e) => {
                let cause = std::error::Error::source(&e).map(|c| format!(": {c}")).unwrap_or_default();
                tracing::warn!("{peer}: {e}{cause}; closing");
                self.close(token);
            }
        }
    }

    /// Closes the unmuted connections without a complete request for `idle`.
    fn close_idle(&mut self, now: Instant, idle: Duration) {
        let expired: Vec<Token> = self
            .connections
            .iter()
            .filter(|(_, s)| !s.muted && now.duration_since(s.last_active) >= idle)
            .map(|(&token, _)| token)
            .collect();
        for token in expired {
            if let Some(served) = self.connections.get(&token) {
                let inside = match served.receive.received() {
                    0 => String::new(),
                    n => format!(", {n} bytes of a frame received"),
                };
                tracing::info!(
                    "{}: no request for {} ms (connections.max.idle.ms{inside}); closing",
                    served.conn.peer(),
                    idle.as_millis()
                );
            }
            self.close(token);
        }
    }

    /// Closes a connection this thread serves, and forgets it.
    fn close(&mut self, token: Token) {
        if let Some(served) = self.connections.get(&token) {
            served.conn.close_here();
        }
        self.forget(token);
    }

    /// Stops watching a connection; the socket closes when its last holder drops it.
    fn forget(&mut self, token: Token) {
        if let Some(served) = self.connections.remove(&token) {
            let fd = served.conn.fd().as_raw_fd();
            if let Err(e) = self.poll.registry().deregister(&mut SourceFd(&fd)) {
                tracing::debug!("{}: deregistering: {e}", served.conn.peer());
            }
        }
    }
}
