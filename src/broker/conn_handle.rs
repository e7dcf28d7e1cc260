//! [`ConnHandle`]: the connection a [`Responder`](super::responder::Responder) answers on,
//! whichever front end serves it: a threaded [`Connection`] (written by the calling io thread)
//! or a `uring` connection ([`UringConn`]: the response is posted to its core, which writes it
//! on its ring). One type so that the handlers, the purgatory and the coordinator stay the same
//! for both server models.

use std::net::SocketAddr;
use std::sync::Arc;

use super::connection::Connection;
use super::uring::mailbox::UringConn;

/// A connection of either server model (see the [module docs](self)).
#[derive(Clone, Debug)]
pub(crate) enum ConnHandle {
    /// `server.model=threaded`: served by a network thread, written by io threads.
    Threaded(Arc<Connection>),
    /// `server.model=uring`: owned by one core.
    Uring(Arc<UringConn>),
}

impl ConnHandle {
    /// The client's address.
    pub(crate) fn peer(&self) -> SocketAddr {
        match self {
            ConnHandle::Threaded(c) => c.peer(),
            ConnHandle::Uring(c) => c.peer(),
        }
    }

    /// Whether the broker closed the connection (nothing more is written).
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            ConnHandle::Threaded(c) => c.is_closed(),
            ConnHandle::Uring(c) => c.is_closed(),
        }
    }

    /// Whether the peer hung up or the broker closed the connection.
    pub(crate) fn is_gone(&self) -> bool {
        match self {
            ConnHandle::Threaded(c) => c.is_gone(),
            ConnHandle::Uring(c) => c.is_gone(),
        }
    }

    /// Closes the connection (threaded: at once; uring: its core closes it). Idempotent.
    pub(crate) fn close(&self) {
        match self {
            ConnHandle::Threaded(c) => c.close(),
            ConnHandle::Uring(c) => c.close(),
        }
    }
}
