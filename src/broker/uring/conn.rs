//! [`Conn`]: one connection as its core holds it: the socket, the frame being received, the
//! bytes received while muted, the response being written and every operation in flight.
//!
//! Receiving reuses the threaded model's frame assembly ([`FrameReceive`]: the size checked
//! against `socket.request.max.bytes` before anything is allocated, the payload growing with
//! the bytes received): the bytes a multishot `RECV` delivers are appended to [`Conn::inbuf`]
//! and read from there by [`Buffered`], a reader that says `WouldBlock` when it runs dry.
//! While a request is in flight the connection is MUTED: nothing is parsed, the bytes that come
//! are kept in `inbuf`, and once it holds [`PAUSE_BYTES`] the receive is cancelled until the
//! response is written (so at most one frame's worth is buffered; the peer then waits on TCP
//! flow control, as a muted Kafka channel makes it).

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};

use super::mailbox::{ConnId, FetchContext, UringConn};
use super::send::Transfer;
use crate::broker::shared::ConnectionSlot;
use crate::protocol::frame::FrameReceive;

/// Bytes buffered while muted past which the receive is paused until the unmute.
pub(crate) const PAUSE_BYTES: usize = 64 * 1024;

/// One connection on its core (see the [module docs](self)).
pub(crate) struct Conn {
    /// Its key.
    pub(crate) id: ConnId,
    /// The socket (closed when the connection is dropped, after its last completion).
    pub(crate) stream: TcpStream,
    /// What Responders hold.
    pub(crate) handle: Arc<UringConn>,
    /// The frame being received.
    pub(crate) receive: FrameReceive,
    /// Bytes received and not yet parsed (those that came while muted).
    pub(crate) inbuf: BytesMut,
    /// A request of it is in flight: no frame is parsed until its response is written.
    pub(crate) muted: bool,
    /// The peer's end of stream (or a receive error) came.
    pub(crate) peer_closed: bool,
    /// The multishot receive is armed (its last completion has not come).
    pub(crate) recv_armed: bool,
    /// The receive was cancelled because too much came while muted.
    pub(crate) recv_paused: bool,
    /// The response being written and its request's bookkeeping.
    pub(crate) transfer: Option<(Transfer, FetchContext)>,
    /// When the response write began (bounded by `SEND_TIMEOUT`).
    pub(crate) write_started: Option<Instant>,
    /// The last complete request received or response written (or the accept).
    pub(crate) last_active: Instant,
    /// Operations of this connection whose last completion has not come.
    pub(crate) inflight: u32,
    /// `SEND_ZC` notifications (`IORING_CQE_F_NOTIF`) of this connection not yet come, each
    /// holding a registered buffer (counted in `inflight` too).
    pub(crate) zc_notifs: u32,
    /// In the core's queue of connections waiting for a free registered buffer.
    pub(crate) waits_for_buffer: bool,
    /// Closing: nothing more is submitted; dropped once `inflight` is 0.
    pub(crate) closing: bool,
    /// Its place in `max.connections` / `max.connections.per.ip`, freed on drop.
    pub(crate) _slot: ConnectionSlot,
}

impl Conn {
    /// A connection just accepted.
    pub(crate) fn new(id: ConnId, stream: TcpStream, handle: Arc<UringConn>, slot: ConnectionSlot) -> Conn {
        Conn {
            id,
            stream,
            handle,
            receive: FrameReceive::new(),
            inbuf: BytesMut::new(),
            muted: false,
            peer_closed: false,
            recv_armed: false,
            recv_paused: false,
            transfer: None,
            write_started: None,
            last_active: Instant::now(),
            inflight: 0,
            zc_notifs: 0,
            waits_for_buffer: false,
            closing: false,
            _slot: slot,
        }
    }
}

/// Reads the bytes buffered in a connection: `WouldBlock` when none are left, end of file once
/// the peer's end of stream came and every byte was read.
pub(crate) struct Buffered<'a> {
    /// The bytes.
    pub(crate) buf: &'a mut BytesMut,
    /// The peer closed: an empty buffer is the end of the stream.
    pub(crate) eof: bool,
}

impl Read for Buffered<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf.is_empty() {
            return if self.eof { Ok(0) } else { Err(io::ErrorKind::WouldBlock.into()) };
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{ProtocolError, ReceiveProgress};

    #[test]
    fn frames_are_assembled_from_buffered_bytes_and_oversized_ones_refused() {
        let mut receive = FrameReceive::new();
        let mut buf = BytesMut::from(&[0u8, 0, 0, 3, b'a'][..]);
        let progress = receive.read_from(&mut Buffered { buf: &mut buf, eof: false }, 100).unwrap();
        assert_eq!(progress, ReceiveProgress::Pending);
        buf.extend_from_slice(b"bc\0\0\0\x01z");
        let progress = receive.read_from(&mut Buffered { buf: &mut buf, eof: false }, 100).unwrap();
        assert_eq!(progress, ReceiveProgress::Frame(bytes::Bytes::from_static(b"abc")));
        // The next frame stays buffered until asked for.
        assert_eq!(&buf[..], b"\0\0\0\x01z");
        let progress = receive.read_from(&mut Buffered { buf: &mut buf, eof: true }, 100).unwrap();
        assert_eq!(progress, ReceiveProgress::Frame(bytes::Bytes::from_static(b"z")));
        let progress = receive.read_from(&mut Buffered { buf: &mut buf, eof: true }, 100).unwrap();
        assert_eq!(progress, ReceiveProgress::Closed);
        let mut big = BytesMut::from(&[0u8, 0, 1, 0][..]);
        let err = FrameReceive::new().read_from(&mut Buffered { buf: &mut big, eof: false }, 100).unwrap_err();
        assert!(matches!(err, ProtocolError::FrameTooLarge { .. }), "{err}");
    }
}
