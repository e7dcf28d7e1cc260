//! [`UringGauges`]: what the `uring` model's cores hold right now, counted so that tests (and a
//! curious operator) can see every buffer and pipe come back: registered buffers lent to a
//! transfer, provided receive buffers handed out by the kernel and not yet returned to the
//! buffer ring, and pipes taken by a `uring-splice` transfer. Summed over the broker's cores.
//!
//! Each core changes the counters of its own resources only (relaxed atomics; a reader may see a
//! value a few microseconds old). All three are 0 whenever no transfer is in flight and no
//! receive completion is being processed: a connection dropped with transfers in flight gives
//! its buffers back once every completion of its operations has arrived.

use std::sync::atomic::{AtomicI64, Ordering};

/// The counters (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct UringGauges {
    registered_buffers: AtomicI64,
    provided_buffers: AtomicI64,
    pipes: AtomicI64,
}

/// A snapshot of [`UringGauges`], summed over the cores: what is in use, not what exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringResources {
    /// Registered (fixed) buffers lent to a read or a send, or waiting for a `SEND_ZC`
    /// notification (`uring-read-send`, `uring-send-zc`).
    pub registered_buffers: i64,
    /// Provided receive buffers the kernel filled and the core has not yet returned to the
    /// buffer ring.
    pub provided_buffers: i64,
    /// Pipes taken by a `uring-splice` transfer (idle pipes kept by a core for the next transfer
    /// are not counted).
    pub pipes: i64,
}

impl UringGauges {
    /// Adds `delta` registered buffers in use.
    pub(crate) fn registered(&self, delta: i64) {
        self.registered_buffers.fetch_add(delta, Ordering::Relaxed);
    }

    /// Adds `delta` provided buffers in use.
    pub(crate) fn provided(&self, delta: i64) {
        self.provided_buffers.fetch_add(delta, Ordering::Relaxed);
    }

    /// Adds `delta` pipes in use.
    pub(crate) fn pipes(&self, delta: i64) {
        self.pipes.fetch_add(delta, Ordering::Relaxed);
    }

    /// The counters now.
    pub(crate) fn snapshot(&self) -> UringResources {
        UringResources {
            registered_buffers: self.registered_buffers.load(Ordering::Relaxed),
            provided_buffers: self.provided_buffers.load(Ordering::Relaxed),
            pipes: self.pipes.load(Ordering::Relaxed),
        }
    }
}
