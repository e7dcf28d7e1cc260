//! `uring-read-send`: Apache Iggy's model on one ring. io_uring `READ_FIXED` reads the segment
//! file into registered buffers ([`BUFFERS`] of `ReadPathConfig::buffer_size` bytes, registered
//! once with `IORING_REGISTER_BUFFERS`), then `IORING_OP_SEND` (with `MSG_NOSIGNAL`) sends the
//! bytes to the socket, with the next chunks being read while one is sent. The bytes pass
//! through user memory, as in `copy` (page cache -> buffer -> socket buffer: two copies), but
//! the read of a registered buffer skips pinning its pages per request and the reads run ahead
//! of the socket, several in flight on one ring. Beside `copy` it tells the io_uring effect
//! (batched, overlapped submission) from the copy effect; beside `uring-send-zc` what sending
//! from the buffer's pages saves.
//!
//! How a transfer runs, every outcome (short reads and sends, `EINTR`, `EAGAIN`, end of file,
//! peer gone) and what the kernel holds: the shared engine, `uring_pipeline` (its module docs).
//! `transfer` never returns while a request is in flight, and every buffer is back in the pool
//! when it returns ([`UringReadSendPath::buffers_in_use`] is 0), also after an error.
//!
//! ## One ring per path
//!
//! Each path owns one ring (`uring::setup_ring`, the one place a read path sets a ring up) and
//! its registered buffers, used by one thread at a time (`transfer` takes `&mut self`): create
//! one path per worker thread. Registration pins `BUFFERS x buffer_size` bytes (256 KiB at the
//! default 64 KiB), charged to `RLIMIT_MEMLOCK`: a limit too small for them makes
//! [`UringReadSendPath::new`] fail naming it.
//!
//! ## SIGPIPE
//!
//! Sends carry `MSG_NOSIGNAL`, so a peer that went away gives `BrokenPipe` and no signal, also
//! when the send runs in an `iou-wrk` thread (checked with SIGPIPE at its default disposition by
//! the conformance tests).

use io_uring::opcode;

use super::uring::{self, Op};
use super::uring_pipeline::{PipelinePath, SendMode, SendOp};

/// Registered buffers per path: up to this many chunks in flight (one being sent, the others
/// being read or waiting to be sent).
pub(crate) const BUFFERS: usize = 4;

/// The operations this path needs.
pub(crate) const OPS: [Op; 2] = [
    Op { code: opcode::ReadFixed::CODE, name: "IORING_OP_READ_FIXED", since: "5.1" },
    Op { code: opcode::Send::CODE, name: "IORING_OP_SEND", since: "5.6" },
];

/// Whether io_uring with `IORING_OP_READ_FIXED` and `IORING_OP_SEND` works here; `Err` names the
/// cause: io_uring missing, disabled (`kernel.io_uring_disabled`) or blocked (seccomp), or the
/// missing operation (`uring::probe_ops`).
pub(crate) fn probe() -> Result<(), String> {
    uring::probe_ops(&OPS).map(drop)
}

/// The [`SendMode`] of this path: `IORING_OP_SEND`, [`BUFFERS`] buffers.
#[derive(Debug)]
pub enum ReadSend {}

impl SendMode for ReadSend {
    const OP: SendOp = SendOp::Send;
    const NAME: &'static str = "uring-read-send";
    const BUFFERS: usize = BUFFERS;
}

/// See the module docs; the type and its methods (`new`, `buffers_in_use`) are
/// [`PipelinePath`]'s.
pub(crate) type UringReadSendPath = PipelinePath<ReadSend>;

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use crate::read_path::test_support::*;
    use crate::read_path::transfer::ReadPath;

    fn path() -> Option<UringReadSendPath> {
        match probe() {
            Ok(()) => Some(UringReadSendPath::new(64 * 1024).unwrap()),
            Err(reason) => {
                eprintln!("skipping: uring-read-send is not supported here: {reason}");
                None
            }
        }
    }

    #[test]
    fn probe_names_a_cause_or_succeeds() {
        match probe() {
            Ok(()) => eprintln!("uring-read-send probe: supported"),
            Err(reason) => assert!(reason.contains("io_uring") || reason.contains("IORING_OP_"), "{reason}"),
        }
    }

    #[test]
    fn bytes_arrive_and_every_buffer_comes_back() {
        let Some(mut path) = path() else { return };
        let (seg, data) = segment(600_000);
        for transport in [Transport::Unix, Transport::Tcp] {
            for &(position, len) in &[(0u64, 1u64), (13, 4097), (4095, 65_536), (1, 65_537), (7, 599_993), (0, 600_000)]
            {
                let (tx, rx) = transport.pair(false);
                let r = reader(rx, None);
                assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
                drop(tx);
                assert!(r.join().unwrap() == data[position as usize..(position + len) as usize], "{transport:?}");
                assert_eq!(path.buffers_in_use(), 0);
            }
        }
    }

    #[test]
    fn buffers_come_back_after_errors() {
        let Some(mut path) = path() else { return };
        buffers_come_back_after_errors_with(&mut path, |p| p.buffers_in_use(), &[Transport::Unix, Transport::Tcp]);
    }

    #[test]
    fn non_blocking_socket_with_a_tiny_send_buffer() {
        let Some(mut path) = path() else { return };
        tiny_nonblocking_with(&mut path, |p| p.buffers_in_use(), &[Transport::Unix, Transport::Tcp]);
    }
}
