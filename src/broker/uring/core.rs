//! One core's loop: its ring, its listening socket, its connections (see the
//! [`uring` docs](super) for the design).
//!
//! Each turn of the loop: drain the mailbox (responses to write, closes, preparations for a new
//! `read.path`, the stop), re-arm the
//! receives that ran out of provided buffers, give the connections waiting for a registered
//! buffer their turn, run the timers (write deadline, idle connections, the stop's grace),
//! submit what was queued and wait for at least one completion (or the next timer tick, with
//! `IORING_ENTER_EXT_ARG`), then handle every completion. Nothing on the loop blocks: sockets
//! and files are touched only through the ring, except `shutdown(2)` on a closing socket,
//! `getpeername`/`setsockopt` on an accepted one and the eventfd read, which never wait.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use io_uring::types::{CancelBuilder, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, types, IoUring, Probe};
use kafka_protocol::messages::RequestKind;

use super::buffers::{FixedBuffers, PipePool, ProvidedRing};
use super::conn::{Buffered, Conn, PAUSE_BYTES};
use super::mailbox::{ConnId, CoreMailbox, CoreMessage, FetchContext, UringConn};
use super::ops::{
    tag, untag, OP_ACCEPT, OP_CANCEL, OP_POLL_OUT, OP_READ, OP_RECV, OP_SEND, OP_SEND_ZC, OP_SPLICE, OP_WAKE,
};
use super::send::{Engine, IoShared, Transfer};
use crate::broker::conn_handle::ConnHandle;
use crate::broker::handler::dispatch::dispatch;
use crate::broker::request_handler;
use crate::broker::responder::Responder;
use crate::broker::response::Response;
use crate::broker::shared::Shared;
use crate::broker::write_deadline::SEND_TIMEOUT;
use crate::protocol::frame::{DecodedRequest, ProtocolError, ReceiveProgress};
use crate::read_path::ReadPathKind;

/// Submission queue entries of a core's ring.
const RING_ENTRIES: u32 = 1024;
/// Completion queue entries of a core's ring.
const CQ_ENTRIES: u32 = 8192;
/// Provided receive buffers per core (a power of two) and their size in bytes.
const PROVIDED_BUFFERS: u16 = 256;
const PROVIDED_BUFFER_BYTES: u32 = 16 * 1024;
/// Registered buffers per core (`uring-read-send`, `uring-send-zc`).
pub(crate) const FIXED_BUFFERS: u16 = 64;
/// The buffer group of the receives.
const BGID: u16 = 0;
/// The cap on each kind of io-wq worker thread (bounded: regular-file reads that missed the
/// page cache; unbounded: `SPLICE`s) a core's ring may start (`IORING_REGISTER_IOWQ_MAX_WORKERS`,
/// Linux 5.15). No operation a core submits waits for a peer on a worker (sends and receives
/// poll; pipe -> socket splices are non-blocking), so a worker is held only for a disk read: the
/// cap bounds the core's threads whatever its peers do, at the price of at most this many
/// concurrent disk reads per core.
pub(crate) const IOWQ_MAX_WORKERS: u32 = 16;
/// How long a stopping core lets the responses in progress finish before it closes them.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a core is started with.
pub(crate) struct CoreSetup {
    /// Its index.
    pub(crate) index: usize,
    /// The broker.
    pub(crate) shared: Arc<Shared>,
    /// Its mailbox.
    pub(crate) mailbox: Arc<CoreMailbox>,
    /// Its listening socket (`SO_REUSEPORT`, bound to the broker's address).
    pub(crate) listener: std::net::TcpListener,
    /// How it moves record bytes at start (then `read.path`'s current value: dynamic).
    pub(crate) engine: Engine,
    /// Whether it accepts new connections at start (`server.model` is `uring`).
    pub(crate) accepting: bool,
}

/// One core's state (see the [module docs](self)). The ring is declared first: it is dropped
/// before the buffers it may write (fields drop in declaration order).
pub(crate) struct Core {
    ring: IoUring,
    provided: ProvidedRing,
    /// The entries to submit, the registered buffers, the pipes and the page size: what a
    /// transfer borrows for a step ([`IoShared::io`]). After the ring: dropped after it.
    io: IoShared,
    index: usize,
    shared: Arc<Shared>,
    mailbox: Arc<CoreMailbox>,
    listener: Option<std::net::TcpListener>,
    /// The engine of the transfers started from now on: `read.path`'s current value, looked at
    /// before each response ([`Self::engine_now`]); a transfer keeps the one it started with.
    engine: Engine,
    conns: Vec<Option<Conn>>,
    generations: Vec<u32>,
    free_slots: Vec<u32>,
    /// The core's own operations in flight (accept, wake poll, cancels).
    own_inflight: u32,
    /// Whether new connections are accepted (`server.model` is `uring`): the multishot ACCEPT
    /// is armed only then.
    accepting: bool,
    accept_armed: bool,
    /// Who waits for the ACCEPT to end ([`Self::set_accepting`] to false).
    accept_stopped: Vec<mpsc::Sender<usize>>,
    /// The `read.path` this core does not run that it last logged keeping its own path for
    /// (the model is `threaded` and the core serves what is left of a `uring` period).
    kept_for: Option<ReadPathKind>,
    wake_armed: bool,
    wake_cancelled: bool,
    /// Set at the stop: the time after which every connection is closed.
    stop_deadline: Option<Instant>,
    starved: VecDeque<ConnId>,
    rearm: Vec<ConnId>,
    idle: Option<Duration>,
    tick: Duration,
}

/// The opcodes an engine needs beyond the model's own ([`ServerModel::probe`](crate::broker::ServerModel::probe)).
fn engine_opcodes(engine: Engine) -> &'static [(u8, &'static str)] {
    match engine {
        Engine::Splice => &[(opcode::Splice::CODE, "IORING_OP_SPLICE (Linux 5.7)")],
        Engine::ReadSend => &[(opcode::ReadFixed::CODE, "IORING_OP_READ_FIXED (Linux 5.1)")],
        Engine::SendZc => &[
            (opcode::ReadFixed::CODE, "IORING_OP_READ_FIXED (Linux 5.1)"),
            (opcode::SendZc::CODE, "IORING_OP_SEND_ZC (Linux 6.0)"),
        ],
    }
}

/// Checks that `ring`'s kernel runs every opcode `engine` issues ([`engine_opcodes`]). Errors:
/// `IORING_REGISTER_PROBE`'s, or `Unsupported` naming the missing opcode.
fn check_engine_opcodes(ring: &IoUring, engine: Engine) -> io::Result<()> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    match engine_opcodes(engine).iter().find(|(code, _)| !probe.is_supported(*code)) {
        Some((_, name)) => {
            Err(io::Error::new(io::ErrorKind::Unsupported, format!("this kernel does not support {name}")))
        }
        None => Ok(()),
    }
}

/// Registers the core's [`FIXED_BUFFERS`] buffers of `read_path_config.buffer_size` bytes (at
/// least 4096) with `ring`. Errors: [`FixedBuffers::new`]'s.
fn register_fixed(ring: &IoUring, shared: &Shared) -> io::Result<FixedBuffers> {
    let len = u32::try_from(shared.config.read_path_config.buffer_size.max(4096)).unwrap_or(u32::MAX);
    FixedBuffers::new(ring, FIXED_BUFFERS, len, shared.uring_gauges_arc())
}

impl Core {
    /// Sets up the core's ring, buffers and pipes. Errors: `io_uring_setup`, an opcode the
    /// engine needs missing (named), the buffer ring or the registered buffers refused.
    pub(crate) fn new(setup: CoreSetup) -> io::Result<Core> {
        let ring = IoUring::builder().setup_cqsize(CQ_ENTRIES).build(RING_ENTRIES)?;
        // The kernel's default bound for unbounded io-wq workers is RLIMIT_NPROC; a core's
        // threads stay bounded by its own cap (a kernel older than 5.15 lacks the call: the
        // default stays, logged).
        let mut workers = [IOWQ_MAX_WORKERS, IOWQ_MAX_WORKERS];
        if let Err(e) = ring.submitter().register_iowq_max_workers(&mut workers) {
            tracing::warn!("io-wq worker cap not set ({e}); the kernel's default bound applies");
        }
        check_engine_opcodes(&ring, setup.engine)?;
        let gauges = setup.shared.uring_gauges_arc();
        let provided = ProvidedRing::new(&ring, PROVIDED_BUFFERS, PROVIDED_BUFFER_BYTES, BGID, Arc::clone(&gauges))?;
        // Registered at start when the engine needs them, else at the first Prepare for an
        // engine that does (a `read.path` change); kept until the core ends.
        let fixed = if setup.engine.uses_fixed_buffers() { Some(register_fixed(&ring, &setup.shared)?) } else { None };
        let pipes = PipePool::new(setup.shared.config.read_path_config.pipe_size, gauges);
        // SAFETY: `sysconf` reads a constant of the system; it takes no pointers.
        let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|p| *p > 0);
        let idle = setup.shared.config.connections_max_idle_ms.map(Duration::from_millis);
        let tick = idle.map_or(Duration::from_millis(250), |i| {
            (i / 10).clamp(Duration::from_millis(10), Duration::from_millis(250))
        });
        Ok(Core {
            ring,
            provided,
            io: IoShared { sqes: Vec::new(), fixed, pipes, page_size: page_size.unwrap_or(4096) },
            index: setup.index,
            shared: setup.shared,
            mailbox: setup.mailbox,
            listener: Some(setup.listener),
            engine: setup.engine,
            conns: Vec::new(),
            generations: Vec::new(),
            free_slots: Vec::new(),
            own_inflight: 0,
            accepting: setup.accepting,
            accept_armed: false,
            accept_stopped: Vec::new(),
            kept_for: None,
            wake_armed: false,
            wake_cancelled: false,
            stop_deadline: None,
            starved: VecDeque::new(),
            rearm: Vec::new(),
            idle,
            tick,
        })
    }

    /// Runs the loop until the stop, every connection closed and every completion in.
    pub(crate) fn run(mut self) {
        self.mailbox.enter_core_thread();
        self.arm_accept();
        self.arm_wake();
        let mut next_tick = Instant::now() + self.tick;
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
        loop {
            self.drain_mailbox();
            for id in std::mem::take(&mut self.rearm) {
                if let Some(conn) = self.conn_mut(id) {
                    if !conn.recv_armed && !conn.recv_paused && !conn.peer_closed && !conn.closing {
                        self.arm_recv(id);
                    }
                }
            }
            self.feed_starved();
            let now = Instant::now();
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + self.tick;
            }
            if self.stop_deadline.is_some() && self.conns.iter().all(Option::is_none) && !self.accept_armed {
                if self.wake_armed && !self.wake_cancelled {
                    self.wake_cancelled = true;
                    self.cancel(tag(OP_WAKE, None, 0));
                }
                if self.own_inflight == 0 {
                    break;
                }
            }
            if let Err(e) = self.submit_and_wait(next_tick.saturating_duration_since(Instant::now())) {
                tracing::error!("core {}: io_uring_enter failed: {e}", self.index);
                std::thread::sleep(Duration::from_millis(10));
            }
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(user_data, result, flags) in &cqes {
                self.on_completion(user_data, result, flags);
            }
        }
        drop(self.mailbox.close());
        self.listener = None;
        tracing::debug!("core {} stopped", self.index);
    }

    fn submit_and_wait(&mut self, timeout: Duration) -> io::Result<()> {
        let mut i = 0;
        while i < self.io.sqes.len() {
            {
                let mut sq = self.ring.submission();
                while i < self.io.sqes.len() {
                    // SAFETY: every entry names memory and descriptors its owner keeps alive
                    // until the entry's last completion (the transfer's pieces, chains and
                    // buffers, the connection's socket, the core's buffers and listener).
                    if unsafe { sq.push(&self.io.sqes[i]) }.is_err() {
                        break;
                    }
                    i += 1;
                }
            }
            if i < self.io.sqes.len() {
                self.ring.submit()?;
            }
        }
        self.io.sqes.clear();
        if !self.ring.completion().is_empty() {
            self.ring.submit()?;
            return Ok(());
        }
        let ts = Timespec::from(timeout.max(Duration::from_micros(100)));
        let args = SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn arm_accept(&mut self) {
        if !self.accepting || self.accept_armed || self.stop_deadline.is_some() {
            return;
        }
        let Some(listener) = &self.listener else { return };
        let entry = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd())).flags(libc::SOCK_CLOEXEC).build();
        self.io.sqes.push(entry.user_data(tag(OP_ACCEPT, None, 0)));
        self.own_inflight += 1;
        self.accept_armed = true;
    }

    fn arm_wake(&mut self) {
        let entry = opcode::PollAdd::new(types::Fd(self.mailbox.eventfd().as_raw_fd()), libc::POLLIN as u32)
            .multi(true)
            .build();
        self.io.sqes.push(entry.user_data(tag(OP_WAKE, None, 0)));
        self.own_inflight += 1;
        self.wake_armed = true;
    }

    /// Cancels the operation(s) tagged `user_data`.
    fn cancel(&mut self, user_data: u64) {
        let entry = opcode::AsyncCancel::new(user_data).build();
        self.io.sqes.push(entry.user_data(tag(OP_CANCEL, None, 0)));
        self.own_inflight += 1;
    }

    fn arm_recv(&mut self, id: ConnId) {
        let Some(conn) = self.conn_mut(id) else { return };
        let fd = conn.stream.as_raw_fd();
        conn.recv_armed = true;
        conn.inflight += 1;
        let entry = opcode::RecvMulti::new(types::Fd(fd), BGID).build().user_data(tag(OP_RECV, Some(id), 0));
        self.io.sqes.push(entry);
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        let slot = id.slot as usize;
        if self.generations.get(slot) != Some(&id.generation) {
            return None;
        }
        self.conns.get_mut(slot)?.as_mut()
    }

    /// The connection of a completion (its generation's low 16 bits).
    fn conn_of(&self, slot: u32, generation: u16) -> Option<ConnId> {
        let full = *self.generations.get(slot as usize)?;
        (full as u16 == generation && self.conns[slot as usize].is_some()).then_some(ConnId { slot, generation: full })
    }

    fn drain_mailbox(&mut self) {
        loop {
            let messages = self.mailbox.take();
            if messages.is_empty() {
                return;
            }
            for message in messages {
                match message {
                    CoreMessage::Respond { conn, response, context } => self.on_response(conn, response, context),
                    CoreMessage::Close(id) => self.close(id, Why::Normal("a handler closed it".into())),
                    CoreMessage::Prepare { path, reply } => {
                        let answer = self.prepare(path);
                        if let Err(reason) = &answer {
                            tracing::warn!("core {}: cannot run read path {path}: {reason}", self.index);
                        }
                        // The asker may have given up waiting: nothing to do then.
                        let _ = reply.send((self.index, answer));
                    }
                    CoreMessage::Accept { accepting, done } => self.set_accepting(accepting, done),
                    CoreMessage::Stop => self.on_stop(),
                }
            }
        }
    }

    /// Starts or stops accepting ([`CoreMessage::Accept`]): arms the multishot ACCEPT, or
    /// cancels it (connections it completes before the cancel are served as usual); says so on
    /// `done` at once, or, when stopping, once the ACCEPT's last completion came.
    fn set_accepting(&mut self, accepting: bool, done: mpsc::Sender<usize>) {
        if self.accepting != accepting {
            self.accepting = accepting;
            let what = if accepting { "accepting" } else { "no longer accepting" };
            tracing::info!("core {}: {what} new connections", self.index);
            if accepting {
                self.arm_accept();
            } else if self.accept_armed {
                self.cancel(tag(OP_ACCEPT, None, 0));
            }
        }
        if !accepting && self.accept_armed {
            self.accept_stopped.push(done);
        } else {
            // The asker may have given up waiting: nothing to do then.
            let _ = done.send(self.index);
        }
    }

    fn on_stop(&mut self) {
        if self.stop_deadline.is_some() {
            return;
        }
        self.stop_deadline = Some(Instant::now() + STOP_GRACE);
        if self.accept_armed {
            self.cancel(tag(OP_ACCEPT, None, 0));
        }
        let idle: Vec<ConnId> =
            self.conns.iter().flatten().filter(|c| !c.muted && c.transfer.is_none()).map(|c| c.id).collect();
        for id in idle {
            self.close(id, Why::Normal("the broker stops (an idle connection)".into()));
        }
    }

    /// Gets the core ready to run read path `path` ([`CoreMessage::Prepare`]): its engine's
    /// opcodes are checked against this ring and, for an engine that reads into registered
    /// buffers, the core's [`FixedBuffers`] are registered unless they already are. Errors: the
    /// path has no engine here, an opcode missing, `IORING_REGISTER_BUFFERS` refused (e.g.
    /// `RLIMIT_MEMLOCK`), each as a sentence.
    fn prepare(&mut self, path: ReadPathKind) -> Result<(), String> {
        let engine = Engine::for_path(path).ok_or_else(|| format!("no core engine drives {path}"))?;
        check_engine_opcodes(&self.ring, engine).map_err(|e| e.to_string())?;
        if engine.uses_fixed_buffers() && self.io.fixed.is_none() {
            let fixed = register_fixed(&self.ring, &self.shared).map_err(|e| format!("registering buffers: {e}"))?;
            self.io.fixed = Some(fixed);
        }
        Ok(())
    }

    /// The engine for a transfer starting now: `read.path`'s current value (one atomic load).
    /// IncrementalAlterConfigs changes it only after every core prepared it
    /// ([`Self::prepare`]), so the core has what the engine needs; a switch is logged once per
    /// core, and switching away from `uring-splice` closes the idle pipes. Errors: a path no
    /// engine drives or whose buffers are missing (a bug: never a fallback to another path).
    fn engine_now(&mut self) -> Result<Engine, String> {
        let path = self.shared.dynamic_config().read_path();
        if path == self.engine.path() {
            return Ok(self.engine);
        }
        let Some(engine) = Engine::for_path(path) else {
            // server.model is threaded now (a uring model accepts no other path): the
            // connections this core still serves stay on its path.
            if self.kept_for != Some(path) {
                self.kept_for = Some(path);
                tracing::info!(
                    "core {}: read.path {path} is not a core's path (server.model is threaded now); the connections \
                     this core still serves stay on {}",
                    self.index,
                    self.engine.path()
                );
            }
            return Ok(self.engine);
        };
        if engine.uses_fixed_buffers() && self.io.fixed.is_none() {
            return Err(format!("read.path {path} needs registered buffers this core has not got (a bug)"));
        }
        tracing::info!(
            "core {}: read.path {} -> {path} for the responses started from now",
            self.index,
            self.engine.path()
        );
        self.engine = engine;
        if engine != Engine::Splice {
            self.io.pipes.close_idle();
        }
        Ok(engine)
    }

    fn on_response(&mut self, id: ConnId, response: Response, context: FetchContext) {
        let engine = match self.engine_now() {
            Ok(engine) => engine,
            Err(why) => {
                drop(context);
                return self.close(id, Why::Fault(why));
            }
        };
        let Some(conn) = self.conn_mut(id) else { return };
        if conn.closing {
            return;
        }
        let close = matches!(response, Response::Close);
        match Transfer::new(response, engine) {
            Some(transfer) => {
                conn.transfer = Some((transfer, context));
                conn.write_started = Some(Instant::now());
                self.progress(id);
            }
            None if close => self.close(id, Why::Normal("after a request that cannot be answered".into())),
            None => {
                drop(context);
                self.unmute(id);
            }
        }
    }

    /// Pumps the connection's transfer, and finishes it (or closes the connection) when it
    /// ended.
    fn progress(&mut self, id: ConnId) {
        let Some(slot) = self.conns.get_mut(id.slot as usize) else { return };
        let Some(conn) = slot.as_mut().filter(|c| c.id == id) else { return };
        if conn.closing {
            return self.maybe_finalize(id);
        }
        let Some((transfer, _)) = conn.transfer.as_mut() else { return };
        let mut io = self.io.io(id, conn.stream.as_raw_fd(), &mut conn.inflight, conn.zc_notifs);
        transfer.pump(&mut io);
        let starved = io.starved;
        if let Some(error) = transfer.failure() {
            let why = format!("writing a response: {error}");
            let why = if crate::broker::connection::is_disconnect(error) { Why::Peer(why) } else { Why::Fault(why) };
            return self.close(id, why);
        }
        if transfer.is_done() {
            let (transfer, context) = conn.transfer.take().expect("checked above");
            conn.write_started = None;
            let total = context.received.elapsed();
            if context.consumer_fetch {
                self.shared.record_core_fetch_latency(self.index, total, transfer.with_records);
            }
            if let Some(api) = context.api {
                self.shared.metrics().record_request(api, total);
            }
            let (record_sets, record_bytes) = transfer.record_sets;
            // The cores do not count their system calls per transfer: bytes, transfers and the
            // bytes read into user space, under the path the transfer ran on.
            self.shared.metrics().record_transfers_without_syscalls(
                transfer.engine().path().name(),
                record_sets,
                record_bytes,
                transfer.user_copied,
            );
            crate::broker::planted::spin(self.shared.config.planted_fetch_cost_ns_per_mib, record_bytes);
            if transfer.engine() == Engine::Splice && self.engine != Engine::Splice {
                // A uring-splice transfer that outlived a switch: its pipe is not kept.
                self.io.pipes.close_idle();
            }
            // Out of flight before the next request can be parsed.
            drop(context.in_flight);
            self.unmute(id);
        } else if starved && !conn.waits_for_buffer {
            // Queued once: a connection progressed by its own completions while it waits must
            // not take more places in the queue.
            conn.waits_for_buffer = true;
            self.starved.push_back(id);
        }
    }

    fn feed_starved(&mut self) {
        let mut rounds = self.starved.len();
        while rounds > 0 {
            rounds -= 1;
            let free = self.io.fixed.as_ref().is_some_and(|f| f.has_free());
            if !free {
                return;
            }
            let Some(id) = self.starved.pop_front() else { return };
            if let Some(conn) = self.conn_mut(id) {
                conn.waits_for_buffer = false;
            }
            self.progress(id);
        }
    }

    fn unmute(&mut self, id: ConnId) {
        let stopping = self.stop_deadline.is_some();
        let Some(conn) = self.conn_mut(id) else { return };
        conn.muted = false;
        conn.last_active = Instant::now();
        conn.recv_paused = false;
        if stopping {
            return self.close(id, Why::Normal("the broker stops (its response was written)".into()));
        }
        let rearm = !conn.recv_armed && !conn.peer_closed;
        self.parse(id);
        if rearm && self.conn_mut(id).is_some_and(|c| !c.closing && !c.recv_armed) {
            self.arm_recv(id);
        }
    }

    /// Parses the buffered bytes while the connection is not muted: a whole frame is handled
    /// (and mutes it), the end of the stream or a bad frame closes it.
    fn parse(&mut self, id: ConnId) {
        let max_bytes = self.shared.config.socket_request_max_bytes;
        loop {
            let Some(conn) = self.conn_mut(id) else { return };
            if conn.muted || conn.closing {
                return;
            }
            let mut reader = Buffered { buf: &mut conn.inbuf, eof: conn.peer_closed };
            match conn.receive.read_from(&mut reader, max_bytes) {
                Ok(ReceiveProgress::Pending) => return,
                Ok(ReceiveProgress::Frame(payload)) => {
                    let received = Instant::now();
                    conn.muted = true;
                    conn.last_active = received;
                    let handle = ConnHandle::Uring(Arc::clone(&conn.handle));
                    self.handle_request(handle, payload, received);
                }
                Ok(ReceiveProgress::Closed) => return self.close(id, Why::Peer("closed by the peer".into())),
                Err(e) => {
                    let cause = std::error::Error::source(&e).map(|c| format!(": {c}")).unwrap_or_default();
                    let why = match e {
                        ProtocolError::Truncated { .. } => Why::Peer(e.to_string()),
                        _ => Why::Fault(format!("{e}{cause}")),
                    };
                    return self.close(id, why);
                }
            }
        }
    }

    /// Decodes a request on the core; runs it here when it only reads (Fetch, ApiVersions,
    /// Metadata that creates no topic, ListOffsets), else on the io pool.
    fn handle_request(&mut self, conn: ConnHandle, payload: bytes::Bytes, received: Instant) {
        let shared = Arc::clone(&self.shared);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            request_handler::handle_with(&shared, conn, payload, received, route);
        }));
        if outcome.is_err() {
            // The Responder was dropped while unwinding: its connection is being closed.
            shared.count_connection_panic();
            tracing::error!("core {}: a request panicked (a bug); its connection is closed", self.index);
        }
    }

    fn on_completion(&mut self, user_data: u64, result: i32, flags: u32) {
        let t = untag(user_data);
        match t.kind {
            OP_ACCEPT => {
                if !cqueue::more(flags) {
                    self.accept_armed = false;
                    self.own_inflight -= 1;
                    // Whoever waited for the ACCEPT to end: it has (a re-arm below is another).
                    for done in self.accept_stopped.drain(..) {
                        let _ = done.send(self.index);
                    }
                }
                if result >= 0 {
                    self.on_accept(result);
                } else if result != -libc::ECANCELED {
                    tracing::warn!("core {}: accept failed: {}", self.index, io::Error::from_raw_os_error(-result));
                }
                if !self.accept_armed {
                    if self.stop_deadline.is_none() {
                        self.arm_accept();
                    } else {
                        self.listener = None;
                    }
                }
            }
            OP_WAKE => {
                self.mailbox.clear_wake();
                if !cqueue::more(flags) {
                    self.wake_armed = false;
                    self.own_inflight -= 1;
                    if !self.wake_cancelled {
                        self.arm_wake();
                    }
                }
            }
            OP_CANCEL => self.own_inflight -= 1,
            _ => {
                let Some(id) = self.conn_of(t.slot, t.generation) else {
                    tracing::error!("core {}: a completion for no connection (kind {}; a bug)", self.index, t.kind);
                    return;
                };
                self.on_conn_completion(id, t.kind, t.aux, result, flags);
            }
        }
    }

    fn on_conn_completion(&mut self, id: ConnId, kind: u8, aux: u16, result: i32, flags: u32) {
        if kind == OP_RECV {
            return self.on_recv(id, result, flags);
        }
        let Some(conn) = self.conns[id.slot as usize].as_mut() else { return };
        match kind {
            OP_SEND_ZC if cqueue::notif(flags) => {
                conn.inflight -= 1;
                conn.zc_notifs = conn.zc_notifs.saturating_sub(1);
                if let Some(fixed) = self.io.fixed.as_mut() {
                    fixed.release(aux);
                }
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    transfer.clear_backoff();
                }
            }
            OP_SEND_ZC => {
                if cqueue::more(flags) {
                    conn.zc_notifs += 1;
                    if let Some(fixed) = self.io.fixed.as_mut() {
                        fixed.hold(aux);
                    }
                } else {
                    conn.inflight -= 1;
                }
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    transfer.on_send(result, self.io.fixed.as_mut());
                }
            }
            OP_SEND => {
                conn.inflight -= 1;
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    transfer.on_send(result, self.io.fixed.as_mut());
                }
            }
            OP_READ => {
                conn.inflight -= 1;
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    let mut io = self.io.io(id, conn.stream.as_raw_fd(), &mut conn.inflight, conn.zc_notifs);
                    transfer.on_read(aux, result, &mut io);
                }
            }
            OP_SPLICE => {
                conn.inflight -= 1;
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    transfer.on_splice(aux, result);
                }
            }
            OP_POLL_OUT => {
                conn.inflight -= 1;
                if let Some((transfer, _)) = conn.transfer.as_mut() {
                    transfer.on_poll_out(result);
                }
            }
            _ => {
                tracing::error!("core {}: a completion of unknown kind {kind} (a bug)", self.index);
                return;
            }
        }
        self.progress(id);
    }

    fn on_accept(&mut self, fd: i32) {
        // SAFETY: a successful accept completion's result is a new descriptor nobody else owns.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        if self.stop_deadline.is_some() {
            return;
        }
        let peer = match stream.peer_addr() {
            Ok(peer) => peer,
            Err(e) => {
                tracing::debug!("accepted a connection without a peer address ({e}: it was reset at once); closed");
                return;
            }
        };
        let slot = match Shared::acquire_slot(&self.shared, peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                tracing::warn!("connection from {peer} closed: {limit}");
                return;
            }
        };
        let _ = stream.set_nodelay(true);
        // An accepted socket inherits the listener's SO_RCVTIMEO (the threaded acceptor's).
        let _ = stream.set_read_timeout(None);
        // O_NONBLOCK: what makes a pipe -> socket `SPLICE` non-blocking (the kernel's
        // `splice_to_socket` reads the socket's file flags; `SPLICE_F_NONBLOCK` only concerns
        // the pipe). io_uring's own SEND/RECV ignore it (they poll a full socket either way).
        if let Err(e) = stream.set_nonblocking(true) {
            tracing::warn!("connection from {peer} closed: O_NONBLOCK refused: {e}");
            return;
        }
        let index = match self.free_slots.pop() {
            Some(index) => index,
            None => {
                self.conns.push(None);
                self.generations.push(0);
                (self.conns.len() - 1) as u32
            }
        };
        if index > 0xff_ffff {
            tracing::warn!("connection from {peer} closed: core {} has no slot left", self.index);
            self.free_slots.push(index);
            return;
        }
        let id = ConnId { slot: index, generation: self.generations[index as usize] };
        let handle = Arc::new(UringConn::new(id, peer, Arc::clone(&self.mailbox)));
        self.conns[index as usize] = Some(Conn::new(id, stream, handle, slot));
        self.arm_recv(id);
    }

    fn on_recv(&mut self, id: ConnId, result: i32, flags: u32) {
        let shared = Arc::clone(&self.shared);
        let Some(conn) = self.conns[id.slot as usize].as_mut() else { return };
        if !cqueue::more(flags) {
            conn.recv_armed = false;
            conn.inflight -= 1;
        }
        let mut hung_up = false;
        match result {
            n if n > 0 => {
                if let Some(bid) = cqueue::buffer_select(flags) {
                    let data = self.provided.filled(bid, n as usize);
                    if !conn.closing {
                        conn.inbuf.extend_from_slice(data);
                    }
                    self.provided.recycle(bid);
                }
            }
            0 => hung_up = true,
            e if e == -libc::ENOBUFS => {
                // The buffer ring ran dry: re-armed once this turn's buffers are back.
                self.rearm.push(id);
            }
            e if e == -libc::ECANCELED => {}
            e => {
                tracing::debug!("{}: receiving: {}", conn.handle.peer(), io::Error::from_raw_os_error(-e));
                hung_up = true;
            }
        }
        if conn.closing {
            return self.maybe_finalize(id);
        }
        if hung_up && !conn.peer_closed {
            conn.peer_closed = true;
            conn.handle.set_peer_gone();
            if conn.muted {
                tracing::debug!("{}: the peer hung up while a request of it was in flight", conn.handle.peer());
                shared.purgatory().connection_closed();
            }
        }
        if conn.muted {
            if conn.recv_armed && !conn.recv_paused && conn.inbuf.len() >= PAUSE_BYTES {
                conn.recv_paused = true;
                self.cancel(tag(OP_RECV, Some(id), 0));
            }
            return;
        }
        let rearm = !conn.recv_armed && !conn.peer_closed && result != -libc::ENOBUFS;
        self.parse(id);
        if rearm && self.conn_mut(id).is_some_and(|c| !c.closing && !c.recv_armed && !c.muted) {
            self.arm_recv(id);
        } else if rearm {
            // Muted now: the unmute re-arms.
        }
    }

    /// Closes a connection: nothing more is submitted, its socket is shut down and its
    /// operations cancelled; it is dropped once every completion of it came. Logs `why`, with
    /// what the connection and the core hold (a stalled transfer shows what it waited for).
    fn close(&mut self, id: ConnId, why: Why) {
        let free = self.io.fixed.as_ref().map(FixedBuffers::free_count);
        let starved = self.starved.len();
        let Some(conn) = self.conn_mut(id) else { return };
        if conn.closing {
            return;
        }
        let peer = conn.handle.peer();
        let state = || {
            let transfer = conn.transfer.as_ref().map_or_else(|| "none".to_string(), |(t, _)| t.describe());
            let core = free.map_or_else(String::new, |f| {
                format!("; core: {f} registered buffers free, {starved} connections waiting for one")
            });
            format!(
                "{} operations in flight, {} SEND_ZC notifications pending; transfer: {transfer}{core}",
                conn.inflight, conn.zc_notifs
            )
        };
        match why {
            Why::Peer(why) => tracing::debug!("{peer}: closing: {why} ({})", state()),
            Why::Normal(why) => tracing::info!("{peer}: closing: {why} ({})", state()),
            Why::Fault(why) => tracing::warn!("{peer}: closing: {why} ({})", state()),
        }
        conn.closing = true;
        conn.handle.set_closed();
        let fd = conn.stream.as_raw_fd();
        let muted = conn.muted;
        let inflight = conn.inflight;
        // SAFETY: shutdown takes a descriptor the connection owns; it never blocks.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        if inflight > 0 {
            let entry = opcode::AsyncCancel2::new(CancelBuilder::fd(types::Fd(fd)).all()).build();
            self.io.sqes.push(entry.user_data(tag(OP_CANCEL, None, 0)));
            self.own_inflight += 1;
        }
        if muted {
            // A request of it may wait in the purgatory: dropped now, not at its deadline.
            self.shared.purgatory().connection_closed();
        }
        self.maybe_finalize(id);
    }

    /// Drops a closing connection once none of its operations is in flight, giving back what
    /// its transfer held.
    fn maybe_finalize(&mut self, id: ConnId) {
        let slot = id.slot as usize;
        let ready =
            self.conns.get(slot).and_then(Option::as_ref).is_some_and(|c| c.id == id && c.closing && c.inflight == 0);
        if !ready {
            return;
        }
        let Some(mut conn) = self.conns[slot].take() else { return };
        if let Some((mut transfer, context)) = conn.transfer.take() {
            transfer.release(self.io.fixed.as_mut(), &mut self.io.pipes);
            drop(context);
        }
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        self.free_slots.push(id.slot);
        drop(conn);
    }

    fn on_tick(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for conn in self.conns.iter().flatten().filter(|c| !c.closing) {
            if conn.write_started.is_some_and(|s| now.duration_since(s) >= SEND_TIMEOUT) {
                let why = format!(
                    "a response write took more than {} s (the peer reads too slowly or not at all)",
                    SEND_TIMEOUT.as_secs()
                );
                expired.push((conn.id, Why::Fault(why)));
            } else if let Some(idle) = self.idle {
                if !conn.muted && conn.transfer.is_none() && now.duration_since(conn.last_active) >= idle {
                    let inside = match conn.receive.received() {
                        0 => String::new(),
                        n => format!(", {n} bytes of a frame received"),
                    };
                    let why = format!("no request for {} ms (connections.max.idle.ms{inside})", idle.as_millis());
                    expired.push((conn.id, Why::Normal(why)));
                }
            }
        }
        let backoff: Vec<ConnId> = self
            .conns
            .iter_mut()
            .flatten()
            .filter_map(|c| match c.transfer.as_mut() {
                Some((t, _)) if t.in_backoff() => {
                    t.clear_backoff();
                    Some(c.id)
                }
                _ => None,
            })
            .collect();
        for id in backoff {
            self.progress(id);
        }
        if self.stop_deadline.is_some_and(|d| now >= d) {
            let why = || Why::Normal(format!("the broker stops ({} s grace ended)", STOP_GRACE.as_secs()));
            expired.extend(self.conns.iter().flatten().filter(|c| !c.closing).map(|c| (c.id, why())));
        }
        for (id, why) in expired {
            self.close(id, why);
        }
    }
}

/// Why a core closes a connection, logged by [`Core::close`] at the level its variant names.
enum Why {
    /// The peer ended it (end of stream, reset, a frame cut short): debug, as under `threaded`.
    Peer(String),
    /// The broker ended it in the normal course (a handler's close, idle, the stop): info.
    Normal(String),
    /// A fault of the peer or the broker (a bad frame, a write error, the write deadline): warn.
    Fault(String),
}

/// Where a decoded request runs: on the core when it only reads (no file write, no lock
/// waited on): Fetch, ApiVersions, ListOffsets, and Metadata unless it may create topics; on
/// the io pool otherwise (Produce, the group APIs, CreateTopics, InitProducerId, ...).
fn route(shared: &Arc<Shared>, request: DecodedRequest, responder: Responder) {
    let inline = match &request.body {
        RequestKind::Fetch(_) | RequestKind::ApiVersions(_) | RequestKind::ListOffsets(_) => true,
        RequestKind::Metadata(m) => {
            !(shared.config.auto_create_topics_enable
                && m.allow_auto_topic_creation
                && m.topics.as_ref().is_some_and(|t| !t.is_empty()))
        }
        _ => false,
    };
    if inline {
        dispatch(shared, request, responder);
    } else {
        let pool_shared = Arc::clone(shared);
        shared.io_pool().submit(Box::new(move || dispatch(&pool_shared, request, responder)));
    }
}
