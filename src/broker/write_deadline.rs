//! [`WriteDeadlines`]: the bound on how long one response write may hold an io thread.
//!
//! Io threads write responses on blocking sockets ([`responder`](super::responder)). The
//! socket's `SO_SNDTIMEO` ([`SEND_TIMEOUT`]) bounds one send
//! call that moves no byte, but a peer that lets a few bytes through now and then (a receive
//! window that opens a little, a client that reads a byte a minute) restarts that timer at every
//! call, and a response of many MiB can then hold its io thread for hours: a few such clients
//! stall every other client. So each write also has a deadline for the WHOLE response: the io
//! thread marks its slot with the connection and the deadline while it writes, and the
//! watchdog thread (`fetchbench-write-deadline`, one per broker) closes a connection whose write
//! is past its deadline (`shutdown(SHUT_RDWR)`, which makes the blocked send fail at once), so
//! its io thread is free again. Kafka's network threads write without blocking and have no such
//! bound to keep; this is the price of writing file slices through the blocking
//! [`ReadPath`](crate::read_path::ReadPath)s.
//!
//! Cost on the hot path: one uncontended mutex per response (the io thread's own slot; the
//! watchdog takes each slot briefly once per [`CHECK_INTERVAL`]).

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a response write may wait for a peer that takes no byte (`SO_SNDTIMEO` on every
/// client socket), and how long one whole response write may take (this module's watchdog: a
/// peer taking a byte now and then restarts `SO_SNDTIMEO`); past either, the connection is
/// closed. The bound on an io thread held by a client that stops reading (Kafka's network threads
/// write without blocking, so Kafka has no such setting; a reading client never comes near it).
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// What a write goes to: a client connection ([`Connection`](super::connection::Connection)
/// implements it; this file names no other broker type, so it sits below them).
pub(crate) trait WriteTarget: Send + Sync + std::fmt::Debug {
    /// The peer's address, for the log line.
    fn peer(&self) -> std::net::SocketAddr;
    /// Whether the connection is closed already.
    fn is_closed(&self) -> bool;
    /// Closes the connection (the blocked write then fails at once).
    fn close(&self);
}

/// How often the watchdog looks at the io threads' writes.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// One io thread's write in progress: its connection and deadline.
type Slot = Mutex<Option<(Arc<dyn WriteTarget>, Instant)>>;

thread_local! {
    /// This thread's slot, with the address of the registry it belongs to (a process may run
    /// several brokers, each with its own io threads).
    static SLOT: RefCell<Option<(usize, Arc<Slot>)>> = const { RefCell::new(None) };
}

/// The io threads' writes in progress and their deadlines (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct WriteDeadlines {
    /// The longest one response write may take, start to end.
    limit: Duration,
    slots: Mutex<Vec<Arc<Slot>>>,
}

/// Marks the calling thread's write in progress until dropped.
pub(crate) struct WriteGuard(Arc<Slot>);

impl Drop for WriteGuard {
    fn drop(&mut self) {
        *lock(&self.0) = None;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl WriteDeadlines {
    /// A registry whose writes may take `limit` each.
    pub(crate) fn new(limit: Duration) -> Arc<WriteDeadlines> {
        Arc::new(WriteDeadlines { limit, slots: Mutex::new(Vec::new()) })
    }

    /// Marks a write to `conn` starting now on the calling thread, until the guard drops.
    pub(crate) fn begin(&self, conn: Arc<dyn WriteTarget>) -> WriteGuard {
        let me = self as *const WriteDeadlines as usize;
        let slot = SLOT.with_borrow_mut(|slot| match slot {
            Some((owner, s)) if *owner == me => Arc::clone(s),
            _ => {
                let s = Arc::new(Mutex::new(None));
                lock(&self.slots).push(Arc::clone(&s));
                *slot = Some((me, Arc::clone(&s)));
                s
            }
        });
        *lock(&slot) = Some((conn, Instant::now() + self.limit));
        WriteGuard(slot)
    }

    /// Closes the connections whose write passed its deadline at `now`; returns how many.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).clone();
        let mut closed = 0;
        for slot in slots {
            let slot = lock(&slot);
            if let Some((conn, deadline)) = slot.as_ref() {
                if now >= *deadline && !conn.is_closed() {
                    tracing::warn!(
                        "{}: a response write took more than {} s (the peer reads too slowly or not at all); closing",
                        conn.peer(),
                        self.limit.as_secs()
                    );
                    conn.close();
                    closed += 1;
                }
            }
        }
        closed
    }

    /// Starts the watchdog thread; it ends when the registry is dropped (the broker's last
    /// thread gone).
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let weak: Weak<WriteDeadlines> = Arc::downgrade(self);
        std::thread::Builder::new().name("fetchbench-write-deadline".into()).spawn(move || loop {
            std::thread::sleep(CHECK_INTERVAL);
            match weak.upgrade() {
                Some(deadlines) => {
                    deadlines.expire(Instant::now());
                }
                None => return,
            }
        })
    }
}
