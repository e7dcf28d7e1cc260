//! [`FrontEnds`]: the broker's two front ends (`server.model`, a dynamic broker config) on one
//! set of listening sockets, and the switch between them.
//!
//! ## The listening sockets
//!
//! At start the broker binds one listening socket per `uring` core (`server.uring.cores`, 0:
//! one per CPU), all on the same address with `SO_REUSEPORT` (`uring/start.rs`'s `bind`: the
//! kernel spreads new connections over them), whatever the model, and keeps every one open
//! until it stops: closing a listener of a `SO_REUSEPORT` group drops the connections queued on
//! it (unless `net.ipv4.tcp_migrate_req` is set), so a switch never closes one. Each front end
//! accepts on all of them, through its own descriptors (`dup`s of the same sockets):
//!
//! - `threaded`: the acceptor thread (`fetchbench-accept`) polls every listener and its wake-up
//!   `eventfd` (`poll(2)`), accepts from the ready ones and hands each connection to a network
//!   thread in turn (connection limits first). While the model is `uring` it polls only its
//!   `eventfd`: the listeners are left to the cores.
//! - `uring`: core `i` arms a multishot `ACCEPT` on listener `i` in its ring; while the model is
//!   `threaded` a core cancels it and arms none.
//!
//! ## A switch ([`FrontEndSwitch`], driven by IncrementalAlterConfigs of `server.model`)
//!
//! 1. [`FrontEndSwitch::prepare`]: the new model's front end is started if it never ran (the
//!    cores with their rings and buffers, or the network threads, the write-deadline watchdog
//!    and the acceptor), accepting nothing yet; under `uring` every core is prepared for the
//!    read path (`uring/start.rs`'s `prepare_cores`). A failure refuses the request, nothing
//!    changed (what was started stays, idle).
//! 2. The effective model (and read path) is stored ([`DynamicConfig`](super::dynamic_config::DynamicConfig)).
//! 3. [`FrontEndSwitch::accept_on`]: the old front end stops accepting, and the switch waits
//!    until it did (the acceptor no longer polls the listeners; each core's multishot `ACCEPT`
//!    has ended), then the new one starts. Meanwhile connections wait in the listeners' queues
//!    (backlog 1024), never dropped; every connection made after the answer is accepted by the
//!    new front end. Should an `accept(2)` of the acceptor ever find a queue another front end
//!    emptied after its `poll`, `SO_RCVTIMEO` (200 ms) on the listeners bounds that wait (an
//!    accepted socket inherits it: both front ends clear it on theirs).
//!
//! Connections stay on the front end that accepted them until they close, as Kafka's
//! connections stay on a listener removed dynamically until they close: a network thread or a
//! core keeps serving its own. While the model is `threaded` and cores still serve connections
//! of a `uring` period, a `read.path` no core runs (`sendfile`, ...) leaves each core on its last
//! `uring-*` path for them (logged; the per-path counters name what ran).
//!
//! Threads, in the end: those of every model that ever ran; a front end is never stopped before
//! the broker stops.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::Token;

use super::connection::{Connection, Inbox, InboxMessage};
use super::dynamic_config::FrontEndSwitch;
use super::error::BrokerError;
use super::network::{self, NetworkControl};
use super::server_model::{ModelUnsupported, ServerModel};
use super::shared::Shared;
use super::uring::send::Engine;
use super::uring::start::{self as uring_start, Cores};
use super::write_deadline::SEND_TIMEOUT;
use crate::read_path::ReadPathKind;

/// How long the acceptor's `accept(2)` waits when a core took the connection its `poll` saw
/// (`SO_RCVTIMEO` on the listeners; see the [module docs](self)).
const ACCEPT_TIMEOUT: Duration = Duration::from_millis(200);

/// The broker's front ends and their listening sockets (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct FrontEnds {
    shared: Arc<Shared>,
    /// One per core, a `SO_REUSEPORT` group; open until the broker stops.
    listeners: Vec<TcpListener>,
    threaded: Option<Threaded>,
    cores: Option<Cores>,
}

/// The threaded front end: network threads, their control, the acceptor.
#[derive(Debug)]
struct Threaded {
    control: Arc<NetworkControl>,
    inboxes: Vec<Arc<Inbox>>,
    gate: Arc<AcceptGate>,
    acceptor: Option<JoinHandle<()>>,
}

/// Whether the acceptor accepts, whether it must end, the `eventfd` that wakes it, and whether
/// it has seen that it must not accept (`paused`, for [`AcceptGate::set_accepting`] to wait on).
#[derive(Debug)]
struct AcceptGate {
    accepting: AtomicBool,
    stop: AtomicBool,
    paused: Mutex<bool>,
    changed: Condvar,
    /// Non-blocking, close-on-exec `eventfd(2)`.
    wake: OwnedFd,
}

impl AcceptGate {
    fn new(accepting: bool) -> io::Result<AcceptGate> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(AcceptGate {
            accepting: AtomicBool::new(accepting),
            stop: AtomicBool::new(false),
            paused: Mutex::new(!accepting),
            changed: Condvar::new(),
            wake,
        })
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to a descriptor this gate owns.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer from a descriptor we own.
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }

    /// Lets the acceptor accept, or stops it and waits (at most 2 s: an `accept` in progress
    /// waits [`ACCEPT_TIMEOUT`] at most) until it no longer polls the listeners. Errors: it did
    /// not stop in time.
    fn set_accepting(&self, accepting: bool) -> Result<(), String> {
        self.accepting.store(accepting, Ordering::SeqCst);
        self.wake();
        if accepting {
            return Ok(());
        }
        let paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        let (paused, _) =
            self.changed.wait_timeout_while(paused, Duration::from_secs(2), |p| !*p).unwrap_or_else(|e| e.into_inner());
        if *paused {
            Ok(())
        } else {
            Err("the acceptor did not stop accepting within 2 s".into())
        }
    }

    /// The acceptor's report, at the top of each turn: whether it polls the listeners now.
    fn report(&self, accepting: bool) {
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        if *paused == accepting {
            *paused = !accepting;
            self.changed.notify_all();
        }
    }
}

/// `dup`s of `listeners` (the same sockets), for a front end to own.
fn clones(listeners: &[TcpListener]) -> io::Result<Vec<TcpListener>> {
    listeners.iter().map(TcpListener::try_clone).collect()
}

impl FrontEnds {
    /// Starts the front end of `model` on `listeners` (one per core, bound by the caller),
    /// accepting; the cores run read path `path`. Errors: [`BrokerError::Thread`] (what could
    /// not be started; what was started is stopped), [`BrokerError::ServerModel`] (`uring` and
    /// a path no core engine drives).
    pub(crate) fn start(
        shared: Arc<Shared>,
        listeners: Vec<TcpListener>,
        model: ServerModel,
        path: ReadPathKind,
    ) -> Result<FrontEnds, BrokerError> {
        for listener in &listeners {
            set_accept_timeout(listener).map_err(|source| BrokerError::Thread { what: "acceptor", source })?;
        }
        let mut front = FrontEnds { shared, listeners, threaded: None, cores: None };
        let started = match model {
            ServerModel::Uring => front.start_cores(path, true),
            _ => front.start_threaded(true),
        };
        if let Err(e) = started {
            front.stop();
            return Err(e);
        }
        Ok(front)
    }

    fn start_cores(&mut self, path: ReadPathKind, accepting: bool) -> Result<(), BrokerError> {
        let engine = Engine::for_path(path).ok_or_else(|| {
            BrokerError::ServerModel(ModelUnsupported {
                model: ServerModel::Uring,
                read_path: Some(path),
                reason: "no core engine drives this path".into(),
            })
        })?;
        let listeners =
            clones(&self.listeners).map_err(|source| BrokerError::Thread { what: "core listener", source })?;
        let cores = Cores::start(&self.shared, listeners, engine, accepting)
            .map_err(|(what, source)| BrokerError::Thread { what, source })?;
        self.cores = Some(cores);
        Ok(())
    }

    fn start_threaded(&mut self, accepting: bool) -> Result<(), BrokerError> {
        let thread_error = |what| move |source| BrokerError::Thread { what, source };
        let threads = self.shared.config.num_network_threads.max(1);
        let control = Arc::new(NetworkControl::new(threads));
        let gate = Arc::new(AcceptGate::new(accepting).map_err(thread_error("acceptor eventfd"))?);
        let mut threaded = Threaded { control, inboxes: Vec::new(), gate, acceptor: None };
        let result = (|| {
            self.shared.write_deadlines().start().map_err(thread_error("write deadline"))?;
            for index in 0..threads {
                let (inbox, _thread) = network::start(index, Arc::clone(&self.shared), Arc::clone(&threaded.control))
                    .map_err(thread_error("network"))?;
                threaded.inboxes.push(inbox);
            }
            let listeners = clones(&self.listeners).map_err(thread_error("acceptor listener"))?;
            let shared = Arc::clone(&self.shared);
            let inboxes = threaded.inboxes.clone();
            let gate = Arc::clone(&threaded.gate);
            threaded.acceptor = Some(
                std::thread::Builder::new()
                    .name("fetchbench-accept".into())
                    .spawn(move || accept_loop(&listeners, &gate, &shared, &inboxes))
                    .map_err(thread_error("acceptor"))?,
            );
            Ok(())
        })();
        // Kept even when it failed part way, so that stop() ends what started.
        self.threaded = Some(threaded);
        result
    }

    /// Gets `model`'s front end ready for new connections with read path `path`, accepting
    /// nothing yet ([`FrontEndSwitch::prepare`]). Errors: what could not be started, or a
    /// core's refusal of `path`, as a sentence.
    pub(crate) fn prepare(&mut self, model: ServerModel, path: ReadPathKind) -> Result<(), String> {
        match model {
            ServerModel::Uring => match &self.cores {
                None => self.start_cores(path, false).map_err(|e| e.to_string()),
                Some(cores) => uring_start::prepare_cores(&cores.mailboxes(), path),
            },
            _ => {
                // Cores still serving the connections of a `uring` period get ready for a
                // `uring-*` path too (other paths leave them on theirs).
                if let (Some(cores), Some(_)) = (&self.cores, Engine::for_path(path)) {
                    uring_start::prepare_cores(&cores.mailboxes(), path)?;
                }
                match self.threaded {
                    None => self.start_threaded(false).map_err(|e| e.to_string()),
                    Some(_) => Ok(()),
                }
            }
        }
    }

    /// New connections go to `model` ([`FrontEndSwitch::accept_on`]): the other front end stops
    /// accepting and this waits until it did (no accept of it is in progress any more), then
    /// `model`'s front end accepts. Meanwhile new connections wait in the listeners' queues, so
    /// every connection made after this returns is accepted by `model`'s front end. A front end
    /// not started is left alone ([`Self::prepare`] starts it). A front end that did not
    /// confirm in time is logged (the switch goes on: the config has changed).
    pub(crate) fn accept_on(&mut self, model: ServerModel) {
        let uring = model == ServerModel::Uring;
        let stopped = if uring {
            self.threaded.as_ref().map(|t| t.gate.set_accepting(false))
        } else {
            self.cores.as_ref().map(|c| c.set_accepting(false))
        };
        if let Some(Err(e)) = stopped {
            tracing::warn!("server.model -> {model}: {e}");
        }
        let started = if uring {
            self.cores.as_ref().map(|c| c.set_accepting(true))
        } else {
            self.threaded.as_ref().map(|t| t.gate.set_accepting(true))
        };
        if let Some(Err(e)) = started {
            tracing::warn!("server.model -> {model}: {e}");
        }
    }

    /// Stops accepting and the cores (each finishes or closes its connections, see
    /// `uring/start.rs`), ends the acceptor; the network threads end once their last
    /// connection is gone. Returns whether the threaded front end ever ran (its network threads
    /// may still submit requests to the io pool).
    pub(crate) fn stop(&mut self) -> bool {
        if let Some(mut cores) = self.cores.take() {
            cores.stop();
        }
        let Some(threaded) = self.threaded.as_mut() else { return false };
        threaded.gate.stop.store(true, Ordering::SeqCst);
        threaded.gate.wake();
        if let Some(t) = threaded.acceptor.take() {
            let _ = t.join();
        }
        threaded.control.stop();
        for inbox in &threaded.inboxes {
            inbox.wake();
        }
        true
    }

    /// Blocks until the acceptor and the cores end (after a [`Self::stop`] elsewhere, or when
    /// accepting fails for good).
    pub(crate) fn join(&mut self) {
        if let Some(t) = self.threaded.as_mut().and_then(|t| t.acceptor.take()) {
            let _ = t.join();
        }
        if let Some(cores) = self.cores.as_mut() {
            cores.join();
        }
    }
}

/// `SO_RCVTIMEO` of [`ACCEPT_TIMEOUT`] on a listening socket: bounds a blocking `accept(2)`
/// (`accept(2)`: `EAGAIN` when the timeout expires).
fn set_accept_timeout(listener: &TcpListener) -> io::Result<()> {
    let tv = libc::timeval { tv_sec: 0, tv_usec: ACCEPT_TIMEOUT.as_micros() as libc::suseconds_t };
    // SAFETY: passes a live timeval with its own size to a descriptor the listener owns.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The [`FrontEndSwitch`] the broker installs in its dynamic config: the front ends, weakly
/// (the broker's handle owns them; after the broker stopped, a switch is refused).
#[derive(Debug)]
pub(crate) struct Switch(pub(crate) Weak<Mutex<FrontEnds>>);

fn locked(front: &Mutex<FrontEnds>) -> MutexGuard<'_, FrontEnds> {
    // Every change of FrontEnds is a single assignment: a poisoned lock still holds a usable value.
    front.lock().unwrap_or_else(|e| e.into_inner())
}

impl FrontEndSwitch for Switch {
    fn prepare(&self, model: ServerModel, path: ReadPathKind) -> Result<(), String> {
        let front = self.0.upgrade().ok_or_else(|| "the broker is stopping".to_string())?;
        let mut front = locked(&front);
        front.prepare(model, path)
    }

    fn accept_on(&self, model: ServerModel) {
        if let Some(front) = self.0.upgrade() {
            locked(&front).accept_on(model);
        }
    }
}

/// The acceptor: while the gate says so, polls every listener and accepts from the ready
/// ones; a connection past `max.connections` or `max.connections.per.ip` is closed at once,
/// unread, with a warning naming the limit; the others get `TCP_NODELAY` and [`SEND_TIMEOUT`]
/// (the socket stays blocking, for the io threads' writes) and go to the network threads in
/// turn. Ends when the gate stops or the broker shuts down.
fn accept_loop(listeners: &[TcpListener], gate: &AcceptGate, shared: &Arc<Shared>, inboxes: &[Arc<Inbox>]) {
    let mut next_token = 0usize;
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(listeners.len() + 1);
    loop {
        if gate.stop.load(Ordering::SeqCst) || shared.is_shutting_down() {
            return;
        }
        fds.clear();
        fds.push(libc::pollfd { fd: gate.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        let accepting = gate.accepting.load(Ordering::SeqCst);
        gate.report(accepting);
        if accepting {
            fds.extend(listeners.iter().map(|l| libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 }));
        }
        // SAFETY: `fds` holds `fds.len()` initialised pollfd structs for live descriptors.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!("the acceptor's poll failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        if fds[0].revents != 0 {
            gate.clear();
            continue;
        }
        let ready: Vec<usize> = fds[1..].iter().enumerate().filter(|(_, p)| p.revents != 0).map(|(i, _)| i).collect();
        for index in ready {
            let (stream, peer) = match listeners[index].accept() {
                Ok(accepted) => accepted,
                // A core took it (a switch in progress): SO_RCVTIMEO ended the wait.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; running connections go on.
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            // Past a limit the connection is closed at once (dropped unread); others go on.
            let slot = match Shared::acquire_slot(shared, peer.ip()) {
                Ok(slot) => slot,
                Err(limit) => {
                    tracing::warn!("connection from {peer} closed: {limit}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            // An accepted socket inherits the listener's SO_RCVTIMEO: not wanted on it.
            let _ = stream.set_read_timeout(None);
            if let Err(e) = stream.set_write_timeout(Some(SEND_TIMEOUT)) {
                tracing::warn!("connection from {peer}: setting SO_SNDTIMEO failed ({e}); closed");
                continue;
            }
            let inbox = &inboxes[next_token % inboxes.len()];
            let token = Token(next_token);
            next_token = next_token.wrapping_add(1) % (usize::MAX - 1);
            let conn = Connection::new(stream, peer, token, Arc::clone(inbox), slot);
            inbox.send(InboxMessage::Accepted(Arc::new(conn)));
        }
    }
}
