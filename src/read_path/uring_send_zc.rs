//! `uring-send-zc`: the reads of `uring-read-send` (io_uring `READ_FIXED` into [`BUFFERS`]
//! registered buffers of `ReadPathConfig::buffer_size` bytes), then `IORING_OP_SEND_ZC` naming
//! the fixed buffer (`buf_index`, Linux 6.0+): the socket sends from the buffer's pages instead
//! of copying them into socket buffers, so a byte is copied once (page cache -> buffer) instead
//! of twice. The kernel holds the pages until it no longer needs them and then posts a
//! notification; a buffer is reused only after every notification of its sends arrived, and
//! `transfer` returns only after every notification arrived. The engine (chunks in flight,
//! every outcome, what the kernel holds) is `uring_pipeline`; see its module docs.
//!
//! ## Where the kernel copies anyway
//!
//! Zero-copy needs a device that sends from the pages (scatter-gather). For a socket whose data
//! is delivered on the same machine (loopback TCP, `fetchbench read-paths`, a consumer on the
//! broker's host) the kernel copies the bytes when it queues them on the receiving socket
//! (`skb_orphan_frags_rx`): the send is correct, and only the bookkeeping of zero-copy is added.
//! Each notification says which happened (`IORING_SEND_ZC_REPORT_USAGE`, Linux 6.2+): the
//! path counts notifications, and those where the kernel copied, in
//! [`UringSendZcPath::take_zc_counters`] ([`ZcCounters`]). On loopback every notification of a
//! send that moved bytes reports a copy, so loopback measures the cost of the mechanism, not its
//! benefit; the benefit needs a real NIC.
//!
//! A receiver on the same host with a tiny receive buffer (4 KiB) can stall such a connection:
//! the copied segments take whole pages, the window the receiver can offer from 4 KiB falls
//! below one MSS, and TCP waits in window probes (seen on Linux 6.18 in the conformance tests,
//! which give this path the default receive buffer for that reason). Copying sends pack the
//! receiver's memory better and do not hit it.
//!
//! ## Unix sockets: refused, not emulated
//!
//! The kernel does zero-copy sends only from sockets flagged `SOCK_SUPPORT_ZC` (TCP and UDP over
//! IPv4/IPv6); `SEND_ZC` on an `AF_UNIX` socket fails with `EOPNOTSUPP`. This path does not fall
//! back to a copying send (a benchmark must not measure another mechanism than the one named):
//! a transfer to such a socket fails with `ErrorKind::Unsupported`, naming `IORING_OP_SEND_ZC`
//! and the socket's family, after sending nothing. `uring-read-send` is the copying variant.
//!
//! ## Probe
//!
//! [`probe`] checks `IORING_OP_READ_FIXED` and `IORING_OP_SEND_ZC` with `IORING_REGISTER_PROBE`
//! ("IORING_OP_SEND_ZC not supported by this kernel (needs Linux 6.0)"), then submits one
//! `SEND_ZC` with `IORING_SEND_ZC_REPORT_USAGE` on `/dev/null`: a kernel that knows the flag
//! (6.2+) answers `ENOTSOCK`, one that does not answers `EINVAL`, and the probe names the flag.
//!
//! ## SIGPIPE
//!
//! Sends carry `MSG_NOSIGNAL`: a peer that went away gives `BrokenPipe`, no signal.

use std::fs::File;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, types, IoUring};

use super::uring::{self, Op};
use super::uring_pipeline::{PipelinePath, SendMode, SendOp, ZcCounters, IORING_SEND_ZC_REPORT_USAGE};

/// Registered buffers per path (as `uring-read-send`): up to this many chunks in flight.
pub(crate) const BUFFERS: usize = 4;

/// The operations this path needs.
pub(crate) const OPS: [Op; 2] = [
    Op { code: opcode::ReadFixed::CODE, name: "IORING_OP_READ_FIXED", since: "5.1" },
    Op { code: opcode::SendZc::CODE, name: "IORING_OP_SEND_ZC", since: "6.0" },
];

/// Whether this path can run here; `Err` names the cause: io_uring missing, disabled or blocked,
/// a missing operation ("IORING_OP_SEND_ZC not supported by this kernel (needs Linux 6.0)"), or
/// a `SEND_ZC` without `IORING_SEND_ZC_REPORT_USAGE` (Linux 6.0 and 6.1). See the module docs.
pub(crate) fn probe() -> Result<(), String> {
    let mut ring = uring::probe_ops(&OPS)?;
    probe_report_usage(&mut ring)
}

/// Submits a `SEND_ZC` of 0 bytes with `IORING_SEND_ZC_REPORT_USAGE` on `/dev/null` and waits
/// for its result and, if one is announced, its notification. `ENOTSOCK`: the flag is known.
fn probe_report_usage(ring: &mut IoUring) -> Result<(), String> {
    let dev_null = File::open("/dev/null").map_err(|e| format!("opening /dev/null for the SEND_ZC probe: {e}"))?;
    let entry = opcode::SendZc::new(types::Fd(dev_null.as_raw_fd()), std::ptr::null(), 0)
        .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
        .build()
        .user_data(1);
    // SAFETY: the entry names no memory (0 bytes) and `/dev/null`, open until the end of this
    // function, which waits for the result and any notification below.
    unsafe { ring.submission().push(&entry) }.map_err(|_| "the probe ring's queue is full".to_string())?;
    let (mut result, mut expected) = (None, 1);
    while expected > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if uring::enter_error_is_transient(&e) => {}
            Err(e) => {
                // The ring is dropped with `dev_null` still open in this frame: nothing leaks.
                return Err(format!("io_uring_enter failed while probing SEND_ZC: {e}"));
            }
        }
        for cqe in ring.completion() {
            expected -= 1;
            if !cqueue::notif(cqe.flags()) {
                result = Some(cqe.result());
                if cqueue::more(cqe.flags()) {
                    expected += 1;
                }
            }
        }
    }
    match result {
        Some(r) if r == -libc::EINVAL => {
            Err("IORING_OP_SEND_ZC lacks IORING_SEND_ZC_REPORT_USAGE (needs Linux 6.2): the path cannot tell \
             zero-copy sends from copied ones"
                .into())
        }
        _ => Ok(()),
    }
}

/// The [`SendMode`] of this path: `IORING_OP_SEND_ZC`, [`BUFFERS`] buffers.
#[derive(Debug)]
pub enum SendZc {}

impl SendMode for SendZc {
    const OP: SendOp = SendOp::SendZc;
    const NAME: &'static str = "uring-send-zc";
    const BUFFERS: usize = BUFFERS;
}

/// See the module docs; the type and its methods (`new`, `buffers_in_use`: a send's buffer
/// stays in use until its notification) are [`PipelinePath`]'s.
pub(crate) type UringSendZcPath = PipelinePath<SendZc>;

impl UringSendZcPath {
    /// The notifications so far and how many reported a copy, reset to zero (see the module
    /// docs: on loopback the kernel copies).
    pub fn take_zc_counters(&mut self) -> ZcCounters {
        self.take_zc()
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::os::fd::AsFd;

    use super::*;
    use crate::read_path::test_support::*;
    use crate::read_path::transfer::ReadPath;

    fn path() -> Option<UringSendZcPath> {
        match probe() {
            Ok(()) => Some(UringSendZcPath::new(64 * 1024).unwrap()),
            Err(reason) => {
                eprintln!("skipping: uring-send-zc is not supported here: {reason}");
                None
            }
        }
    }

    #[test]
    fn probe_names_a_cause_or_succeeds() {
        match probe() {
            Ok(()) => eprintln!("uring-send-zc probe: supported"),
            Err(reason) => assert!(reason.contains("io_uring") || reason.contains("IORING_"), "{reason}"),
        }
    }

    /// Over loopback TCP: exact bytes, every buffer back, one notification per send that moved
    /// bytes at least, and each of them reports a copy (loopback copies: module docs).
    #[test]
    fn loopback_tcp_bytes_arrive_and_notifications_say_copied() {
        let Some(mut path) = path() else { return };
        let (seg, data) = segment(600_000);
        for &(position, len) in &[(0u64, 1u64), (13, 4097), (4095, 65_536), (1, 65_537), (7, 599_993)] {
            let (tx, rx) = Transport::Tcp.pair(false);
            let r = reader(rx, None);
            assert_eq!(path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap(), len);
            drop(tx);
            assert!(r.join().unwrap() == data[position as usize..(position + len) as usize]);
            assert_eq!(path.buffers_in_use(), 0);
        }
        let zc = path.take_zc_counters();
        // Each transfer sends at least ceil(len / 64 KiB) chunks.
        let chunks: u64 = [1u64, 4097, 65_536, 65_537, 599_993].iter().map(|l| l.div_ceil(64 * 1024)).sum();
        eprintln!("SEND_ZC over loopback: {zc:?}, at least {chunks} sends");
        assert!(zc.notifications >= chunks, "{zc:?}");
        assert_eq!(zc.copied, zc.notifications, "loopback copies every send: {zc:?}");
        assert_eq!(path.take_zc_counters(), ZcCounters::default());
    }

    /// A Unix socket cannot take SEND_ZC: the transfer fails with `Unsupported` naming it, sends
    /// nothing, and returns every buffer.
    #[test]
    fn unix_socket_is_refused_with_the_reason() {
        let Some(mut path) = path() else { return };
        let (seg, _) = segment(200_000);
        let (tx, rx) = Transport::Unix.pair(false);
        let r = reader(rx, None);
        let err = path.transfer(&slice(&seg, 0, 200_000), tx.as_fd()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Unsupported, "{err}");
        let text = err.to_string();
        assert!(text.contains("IORING_OP_SEND_ZC") && text.contains("Unix"), "{text}");
        assert_eq!(path.buffers_in_use(), 0);
        assert_eq!(path.take_stats().bytes, 0);
        drop(tx);
        assert!(r.join().unwrap().is_empty());
    }

    #[test]
    fn buffers_come_back_after_errors() {
        let Some(mut path) = path() else { return };
        buffers_come_back_after_errors_with(&mut path, |p| p.buffers_in_use(), &[Transport::Tcp]);
    }

    #[test]
    fn non_blocking_socket_with_a_tiny_send_buffer() {
        let Some(mut path) = path() else { return };
        tiny_nonblocking_with(&mut path, |p| p.buffers_in_use(), &[Transport::Tcp]);
    }
}
