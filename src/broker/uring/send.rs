//! [`Transfer`]: one response being written by a core, asynchronously, with the state machine of
//! the read path that was current when it started ([`Engine`]; `read.path` is dynamic: a
//! transfer keeps its engine to its end, the next one takes the new path). Bytes in memory (an encoded response, a Fetch response's
//! header and fields) go out with `SEND` (`MSG_NOSIGNAL`), continued after a short send; a Fetch
//! response's record sets (`File` chunks) go through the engine:
//!
//! - `uring-splice` ([`Engine::Splice`]): a pipe from the core's [`PipePool`], and a CHAIN of
//!   linked (`IOSQE_IO_LINK`) `SPLICE` pairs file -> pipe, pipe -> socket, up to
//!   [`SPLICE_CHAIN_PAIRS`] pairs in one submission, so several chunks are in flight per
//!   connection (and, across connections, many per ring). Each file -> pipe splice asks for at
//!   most the pipe's room minus the position's offset in its page (a page-cache splice fills one
//!   pipe slot per page), so it never waits for room. A short splice fails the link: the rest of
//!   the chain completes with `ECANCELED`; once every completion of the chain is in, the results
//!   are applied in order, and the next chain first drains what the pipe still holds (as
//!   `uring_splice.rs` does). The pipe -> socket splices are non-blocking (the
//!   core makes every socket `O_NONBLOCK`, which the kernel's `splice_to_socket` honours;
//!   `SPLICE_F_NONBLOCK`, also set, only concerns the pipe): io_uring runs every `SPLICE` on an
//!   io-wq worker thread, and a blocking one to a full socket would park that kernel thread
//!   until the peer reads (one `iou-wrk` thread per stalled peer). A full socket ends the splice
//!   with `EAGAIN` instead;
//!   the transfer then waits with a one-shot `POLL_ADD` for `POLLOUT` (no thread) and goes on
//!   from its completion. A worker is thus held only while a file -> pipe splice reads the
//!   page cache or the disk, and the core caps its ring's workers
//!   ([`IOWQ_MAX_WORKERS`](super::core::IOWQ_MAX_WORKERS)).
//! - `uring-read-send` ([`Engine::ReadSend`]): `READ_FIXED` into the core's registered buffers
//!   ([`FixedBuffers`]), up to [`READS_PER_CONNECTION`] buffers per connection (reads in flight,
//!   buffers read and not yet sent and, under `uring-send-zc`, buffers sent and waiting for their
//!   notification; the reads complete in any order), and a `SEND` of each
//!   buffer in file order, one send in flight per connection (the socket's byte order). A
//!   connection reads ahead beyond its first buffer only while more than
//!   [`read_ahead_reserve`] (a quarter) of the core's
//!   [`FIXED_BUFFERS`](super::core::FIXED_BUFFERS) are free, so the last buffers go one per
//!   connection. A connection whose peer stopped reading thus holds at most
//!   `READS_PER_CONNECTION` buffers, and once the pool is low only one; the core's other file
//!   transfers wait for a buffer only with more than 22 stalled peers on the core (48 / 8 + 16),
//!   until the write deadline (`SEND_TIMEOUT`) closes a stalled one (the limit of a bounded
//!   pool; bytes-only responses never wait; `threaded` has the same limit at `num.io.threads`
//!   stalled peers, each holding an io thread).
//! - `uring-send-zc` ([`Engine::SendZc`]): the same reads, then `SEND_ZC` from the registered
//!   buffer (`IORING_RECVSEND_FIXED_BUF`); the buffer is held until the notification completion
//!   (`IORING_CQE_F_NOTIF`), handled by the core even after the transfer ended. Those holds count
//!   against the connection's [`READS_PER_CONNECTION`] ([`Io::zc_notifs`]): a zerocopy send's
//!   pages stay in the socket's queue until the peer's window takes them, so without it one
//!   stalled reader pins the core's whole pool (its send completes at once, its notification
//!   only when the bytes leave) and every other connection starves until the write deadline.
//!
//! A read or a file -> pipe splice that returns 0 before the slice's end means the file was
//! truncated under the transfer: the transfer fails (`UnexpectedEof`), the core closes that
//! connection (the client holds a partial frame, as under `threaded`). A send error (`EPIPE`,
//! `ECONNRESET`) fails it too. After a failure nothing more is submitted; the operations in
//! flight complete (or are cancelled by the core) and only then are their buffers and pipe given
//! back ([`Transfer::release`]): memory the kernel may still write is never reused.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use bytes::Bytes;
use io_uring::{opcode, squeue, types};

use super::buffers::{FixedBuffers, Pipe, PipePool};
use super::mailbox::ConnId;
use super::ops::{tag, OP_POLL_OUT, OP_READ, OP_SEND, OP_SEND_ZC, OP_SPLICE};
use crate::broker::response::Response;
use crate::log::segment::SegmentFile;
use crate::protocol::fetch_response::Chunk;
use crate::read_path::uring;
use crate::read_path::ReadPathKind;

/// Linked file -> pipe / pipe -> socket pairs submitted at once per `uring-splice` transfer.
pub(crate) const SPLICE_CHAIN_PAIRS: usize = 4;
/// Registered buffer holds a connection has at most (`uring-read-send`, `uring-send-zc`): reads
/// in flight, buffers read and not yet sent, and `SEND_ZC` notifications not yet come (one hold
/// each, so a buffer sent in two parts counts twice until both notifications are in).
pub(crate) const READS_PER_CONNECTION: u16 = 8;
/// The free registered buffers below which a connection that already holds one reads no
/// further ahead: a quarter of the core's pool. Stalled readers (peers that stop reading) then
/// take all buffers only when there are more of them than `(total - reserve) /
/// READS_PER_CONNECTION + reserve` (22 of 64) on one core, rather than 8; below that every other
/// connection still gets a buffer at once.
pub(crate) fn read_ahead_reserve(total: usize) -> usize {
    total / 4
}
/// Chains in a row that moved no byte and met no error before a transfer gives up (a guard
/// against a loop of interrupted splices; never reached in the tests).
const MAX_STALLS: u32 = 1000;

/// How a core moves a Fetch response's record sets (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// `uring-splice`.
    Splice,
    /// `uring-read-send`.
    ReadSend,
    /// `uring-send-zc`.
    SendZc,
}

impl Engine {
    /// The engine of read path `kind`, `None` for a path a core cannot drive (refused before:
    /// [`ServerModel::supports`](crate::broker::server_model::ServerModel::supports)).
    pub(crate) fn for_path(kind: ReadPathKind) -> Option<Engine> {
        match kind {
            ReadPathKind::UringSplice => Some(Engine::Splice),
            ReadPathKind::UringReadSend => Some(Engine::ReadSend),
            ReadPathKind::UringSendZc => Some(Engine::SendZc),
            _ => None,
        }
    }

    /// Whether the engine reads into registered buffers.
    pub(crate) fn uses_fixed_buffers(self) -> bool {
        matches!(self, Engine::ReadSend | Engine::SendZc)
    }

    /// The read path this engine runs (the `read_path` label of its counters).
    pub(crate) fn path(self) -> ReadPathKind {
        match self {
            Engine::Splice => ReadPathKind::UringSplice,
            Engine::ReadSend => ReadPathKind::UringReadSend,
            Engine::SendZc => ReadPathKind::UringSendZc,
        }
    }
}

/// What a transfer needs of its core while it submits: the SQE backlog, the core's buffers and
/// pipes, the socket, and the connection's in-flight count.
pub(crate) struct Io<'a> {
    /// Entries to submit (the core pushes them to its ring in order).
    pub(crate) sqes: &'a mut Vec<squeue::Entry>,
    /// The registered buffers (`None` under `uring-splice`).
    pub(crate) fixed: Option<&'a mut FixedBuffers>,
    /// The pipes.
    pub(crate) pipes: &'a mut PipePool,
    /// The connection's socket.
    pub(crate) socket: RawFd,
    /// The connection.
    pub(crate) conn: ConnId,
    /// Its operations in flight (each submission adds one; the core subtracts at the last
    /// completion of each).
    pub(crate) inflight: &'a mut u32,
    /// Its `SEND_ZC` notifications not yet come, each holding a registered buffer (counted
    /// against [`READS_PER_CONNECTION`]; may outlive the transfer that sent them).
    pub(crate) zc_notifs: u32,
    /// The system's page size in bytes.
    pub(crate) page_size: u64,
    /// Set when the transfer waits for a free registered buffer.
    pub(crate) starved: bool,
}

/// What the transfers of one core share, borrowed by each step through [`IoShared::io`]: the
/// entries to submit, the registered buffers, the pipes, the page size. The core owns it,
/// declared after its ring (the ring closes before the buffers are freed).
pub(crate) struct IoShared {
    /// Entries to submit (the core pushes them to its ring in order).
    pub(crate) sqes: Vec<squeue::Entry>,
    /// The registered buffers (`None` under `uring-splice`).
    pub(crate) fixed: Option<FixedBuffers>,
    /// The pipes.
    pub(crate) pipes: PipePool,
    /// The system's page size in bytes.
    pub(crate) page_size: u64,
}

impl IoShared {
    /// The [`Io`] of connection `conn`'s transfer for one step: its `socket`, its operations in
    /// flight (`inflight`, incremented by each submission) and its `SEND_ZC` notifications
    /// still to come (`zc_notifs`); not starved.
    pub(crate) fn io<'a>(&'a mut self, conn: ConnId, socket: RawFd, inflight: &'a mut u32, zc_notifs: u32) -> Io<'a> {
        Io {
            sqes: &mut self.sqes,
            fixed: self.fixed.as_mut(),
            pipes: &mut self.pipes,
            socket,
            conn,
            inflight,
            zc_notifs,
            page_size: self.page_size,
            starved: false,
        }
    }
}

impl Io<'_> {
    fn submit(&mut self, entry: squeue::Entry, kind: u8, aux: u16) {
        self.sqes.push(entry.user_data(tag(kind, Some(self.conn), aux)));
        *self.inflight += 1;
    }
}

/// One piece of the response, in wire order, once started.
enum Piece {
    /// Bytes in memory; `sent` of them sent.
    Bytes { bytes: Bytes, sent: usize },
    /// A registered buffer holding (or being filled with) `want` bytes of a file at `position`.
    Buf { index: u16, segment: Arc<SegmentFile>, position: u64, want: u32, filled: u32, sent: u32, reading: bool },
}

/// One splice of a chain.
struct ChainOp {
    into_pipe: bool,
    result: Option<i32>,
}

/// The linked splices in flight of a `uring-splice` transfer.
struct Chain {
    ops: Vec<ChainOp>,
    pending: usize,
    /// Keeps the segment file open until every splice completed.
    _segment: Arc<SegmentFile>,
}

/// One response being written (see the [module docs](self)).
pub(crate) struct Transfer {
    /// The engine it was started with: it keeps it to its end, whatever `read.path` becomes.
    engine: Engine,
    chunks: VecDeque<Chunk>,
    /// Bytes of the front `File` chunk already read (or spliced into the pipe).
    front_off: u64,
    pieces: VecDeque<Piece>,
    sending: bool,
    reads: u16,
    chain: Option<Chain>,
    pipe: Option<Pipe>,
    pipe_bytes: u64,
    /// A pipe -> socket splice met a full socket (`EAGAIN`): the next chain waits for `POLLOUT`.
    want_writable: bool,
    /// The `POLL_ADD` for `POLLOUT` is in flight.
    polling: bool,
    stalls: u32,
    /// A `SEND_ZC` got `ENOBUFS` (the socket's zerocopy accounting, `optmem_max`, is full until
    /// notifications come back): no send until [`Self::clear_backoff`].
    backoff: bool,
    failed: Option<io::Error>,
    /// Whether the response carried record bytes (the latency histogram it goes to).
    pub(crate) with_records: bool,
    /// Record sets (`File` chunks) of the response and their bytes, for the read path counters
    /// once it is completely written.
    pub(crate) record_sets: (u64, u64),
    /// Record bytes the `READ_FIXED`s of the transfer read into registered buffers (user-space
    /// memory; [`crate::read_path::TransferStats::user_copied`]): 0 under `uring-splice`.
    pub(crate) user_copied: u64,
}

impl Transfer {
    /// The transfer of `response` through `engine` (kept to its end: a change of `read.path`
    /// applies to the transfers started after it); `None` for a response with nothing to
    /// write ([`Response::None`], [`Response::Close`]).
    pub(crate) fn new(response: Response, engine: Engine) -> Option<Transfer> {
        let record_sets = match &response {
            Response::Fetch(frame) => {
                (frame.chunks().iter().filter(|c| matches!(c, Chunk::File(_))).count() as u64, frame.record_bytes())
            }
            _ => (0, 0),
        };
        let (chunks, with_records): (VecDeque<Chunk>, bool) = match response {
            Response::None | Response::Close => return None,
            Response::Encoded(bytes) => ([Chunk::Bytes(bytes.freeze())].into(), false),
            Response::Fetch(frame) => (frame.chunks().iter().cloned().collect(), frame.record_bytes() > 0),
        };
        Some(Transfer {
            engine,
            chunks,
            front_off: 0,
            pieces: VecDeque::new(),
            sending: false,
            reads: 0,
            chain: None,
            pipe: None,
            pipe_bytes: 0,
            want_writable: false,
            polling: false,
            stalls: 0,
            backoff: false,
            failed: None,
            with_records,
            record_sets,
            user_copied: 0,
        })
    }

    /// The error that ended the transfer, if one did.
    pub(crate) fn failure(&self) -> Option<&io::Error> {
        self.failed.as_ref()
    }

    /// Whether every byte was written (and no operation of the transfer is in flight; a
    /// `SEND_ZC` notification may still be, which the core handles).
    pub(crate) fn is_done(&self) -> bool {
        self.failed.is_none()
            && self.chunks.is_empty()
            && self.pieces.is_empty()
            && !self.sending
            && self.reads == 0
            && self.chain.is_none()
            && !self.polling
    }

    fn fail(&mut self, error: io::Error) {
        if self.failed.is_none() {
            self.failed = Some(error);
        }
    }

    /// The engine the transfer runs on.
    pub(crate) fn engine(&self) -> Engine {
        self.engine
    }

    /// Submits what can be submitted now, with the transfer's own engine.
    pub(crate) fn pump(&mut self, io: &mut Io<'_>) {
        if self.failed.is_some() {
            return;
        }
        let engine = self.engine;
        match engine {
            Engine::Splice => self.pump_splice(io),
            Engine::ReadSend | Engine::SendZc => self.pump_reads(io),
        }
        if self.failed.is_none() && !self.sending && !self.backoff {
            self.send_front(engine, io);
        }
        if self.is_done() {
            if let Some(pipe) = self.pipe.take() {
                io.pipes.give_back(pipe, self.pipe_bytes == 0);
            }
        }
    }

    /// `uring-read-send` / `uring-send-zc`: pieces for the chunks, reads into free buffers.
    fn pump_reads(&mut self, io: &mut Io<'_>) {
        while let Some(front) = self.chunks.front() {
            match front {
                Chunk::Bytes(bytes) => {
                    self.pieces.push_back(Piece::Bytes { bytes: bytes.clone(), sent: 0 });
                    self.chunks.pop_front();
                }
                Chunk::File(slice) => {
                    // Reads in flight, buffers read but not yet sent and buffers sent by SEND_ZC
                    // waiting for their notification together: a reader that stopped reading
                    // holds at most this many of the core's buffers.
                    let pieces = self.pieces.iter().filter(|p| matches!(p, Piece::Buf { .. })).count();
                    let held = pieces.saturating_add(io.zc_notifs as usize);
                    if held >= usize::from(READS_PER_CONNECTION) {
                        return;
                    }
                    let Some(fixed) = io.fixed.as_deref_mut() else {
                        self.fail(io::Error::other("no registered buffers on this core (a bug)"));
                        return;
                    };
                    // Read-ahead only while the pool is not low: a connection that already
                    // holds a buffer takes another only while more than the reserve is free, so
                    // the last buffers go one per connection. Its own completions pump it again.
                    if held > 0 && fixed.free_count() <= read_ahead_reserve(fixed.total()) {
                        return;
                    }
                    let Some(index) = fixed.take() else {
                        io.starved = true;
                        return;
                    };
                    let want = (slice.len - self.front_off).min(u64::from(fixed.buf_len())) as u32;
                    let position = slice.position + self.front_off;
                    let segment = Arc::clone(&slice.segment);
                    let entry = read_entry(fixed, index, &segment, position, 0, want);
                    self.pieces.push_back(Piece::Buf {
                        index,
                        segment,
                        position,
                        want,
                        filled: 0,
                        sent: 0,
                        reading: true,
                    });
                    io.submit(entry, OP_READ, index);
                    self.reads += 1;
                    self.front_off += u64::from(want);
                    if self.front_off == slice.len {
                        self.chunks.pop_front();
                        self.front_off = 0;
                    }
                }
            }
        }
    }

    /// `uring-splice`: bytes chunks become pieces (sent by `send_front`); a file chunk gets a
    /// chain once the pieces before it are sent.
    fn pump_splice(&mut self, io: &mut Io<'_>) {
        if self.sending || self.chain.is_some() || self.polling || !self.pieces.is_empty() {
            return;
        }
        if self.want_writable {
            let entry = opcode::PollAdd::new(types::Fd(io.socket), libc::POLLOUT as u32).build();
            io.submit(entry, OP_POLL_OUT, 0);
            self.polling = true;
            return;
        }
        while let Some(front) = self.chunks.front() {
            match front {
                Chunk::Bytes(bytes) => {
                    self.pieces.push_back(Piece::Bytes { bytes: bytes.clone(), sent: 0 });
                    self.chunks.pop_front();
                    return;
                }
                Chunk::File(slice) => {
                    if self.front_off == slice.len && self.pipe_bytes == 0 {
                        self.chunks.pop_front();
                        self.front_off = 0;
                        continue;
                    }
                    let slice = slice.clone();
                    if self.pipe.is_none() {
                        match io.pipes.take() {
                            Ok(pipe) => self.pipe = Some(pipe),
                            Err(e) => return self.fail(e),
                        }
                    }
                    let pipe = self.pipe.as_ref().expect("taken above");
                    let file = slice.segment.file().as_raw_fd();
                    let mut ops = Vec::new();
                    let mut entries = Vec::new();
                    let out = |len: u64| {
                        opcode::Splice::new(types::Fd(pipe.read.as_raw_fd()), -1, types::Fd(io.socket), -1, len as u32)
                            .flags(libc::SPLICE_F_NONBLOCK)
                            .build()
                    };
                    if self.pipe_bytes > 0 {
                        entries.push(out(self.pipe_bytes));
                        ops.push(ChainOp { into_pipe: false, result: None });
                    }
                    let mut off = self.front_off;
                    for _ in 0..SPLICE_CHAIN_PAIRS {
                        if off >= slice.len {
                            break;
                        }
                        let position = slice.position + off;
                        let room = pipe.capacity - position % io.page_size;
                        let len = (slice.len - off).min(room).min(u64::from(u32::MAX));
                        entries.push(
                            opcode::Splice::new(
                                types::Fd(file),
                                position as i64,
                                types::Fd(pipe.write.as_raw_fd()),
                                -1,
                                len as u32,
                            )
                            .build(),
                        );
                        ops.push(ChainOp { into_pipe: true, result: None });
                        entries.push(out(len));
                        ops.push(ChainOp { into_pipe: false, result: None });
                        off += len;
                    }
                    let last = entries.len() - 1;
                    for (i, entry) in entries.into_iter().enumerate() {
                        let entry = if i < last { entry.flags(squeue::Flags::IO_LINK) } else { entry };
                        io.submit(entry, OP_SPLICE, i as u16);
                    }
                    self.chain = Some(Chain { pending: ops.len(), ops, _segment: slice.segment });
                    return;
                }
            }
        }
    }

    /// Sends the front piece if it is ready.
    fn send_front(&mut self, engine: Engine, io: &mut Io<'_>) {
        let Some(front) = self.pieces.front() else { return };
        match front {
            Piece::Bytes { bytes, sent } => {
                let rest = &bytes[*sent..];
                io.submit(uring::send_entry(io.socket, rest.as_ptr(), rest.len() as u32), OP_SEND, 0);
            }
            Piece::Buf { reading: true, .. } => return,
            &Piece::Buf { index, filled, sent, .. } => {
                let Some(fixed) = io.fixed.as_deref() else { return };
                let ptr = fixed.ptr(index, sent);
                let len = filled - sent;
                if engine == Engine::SendZc {
                    // No IORING_SEND_ZC_REPORT_USAGE: the core needs only Linux 6.0's SEND_ZC.
                    io.submit(uring::send_zc_entry(io.socket, ptr, len, index, 0), OP_SEND_ZC, index);
                } else {
                    io.submit(uring::send_entry(io.socket, ptr, len), OP_SEND, index);
                }
            }
        }
        self.sending = true;
    }

    /// A send's (or a `SEND_ZC`'s result) completion: `res` bytes taken by the socket, or
    /// `-errno`.
    pub(crate) fn on_send(&mut self, res: i32, fixed: Option<&mut FixedBuffers>) {
        self.sending = false;
        if self.failed.is_some() {
            return;
        }
        if res == -libc::EINTR || res == -libc::EAGAIN {
            return; // resent by the next pump
        }
        if res == -libc::ENOBUFS {
            // SEND_ZC past the socket's zerocopy memory: resent after a notification (or the
            // core's next tick) frees some.
            self.backoff = true;
            return;
        }
        if res < 0 {
            return self.fail(io::Error::from_raw_os_error(-res));
        }
        if res == 0 {
            return self.fail(io::Error::new(io::ErrorKind::WriteZero, "the socket took 0 bytes"));
        }
        let n = res as usize;
        let complete = match self.pieces.front_mut() {
            Some(Piece::Bytes { bytes, sent }) => {
                *sent += n;
                *sent >= bytes.len()
            }
            Some(Piece::Buf { filled, sent, .. }) => {
                *sent += n as u32;
                *sent >= *filled
            }
            None => false,
        };
        if complete {
            if let Some(Piece::Buf { index, .. }) = self.pieces.pop_front() {
                if let Some(fixed) = fixed {
                    fixed.release(index);
                }
            }
        }
    }

    /// Whether the transfer waits for zerocopy memory ([`Self::on_send`] got `ENOBUFS`).
    pub(crate) fn in_backoff(&self) -> bool {
        self.backoff
    }

    /// What the transfer holds and waits for, for the log line of a close: record bytes not yet
    /// read, registered buffers held by its pieces (and how many are being read), whether a
    /// send is in flight, the pipe's bytes, the `ENOBUFS` backoff.
    pub(crate) fn describe(&self) -> String {
        let unread: u64 = self
            .chunks
            .iter()
            .map(|c| match c {
                Chunk::File(slice) => slice.len,
                Chunk::Bytes(bytes) => bytes.len() as u64,
            })
            .sum::<u64>()
            .saturating_sub(self.front_off);
        let bufs = self.pieces.iter().filter(|p| matches!(p, Piece::Buf { .. })).count();
        let reading = self.pieces.iter().filter(|p| matches!(p, Piece::Buf { reading: true, .. })).count();
        format!(
            "{unread} bytes not started, {} pieces ({bufs} registered buffers, {reading} being read), send in flight: \
             {}, splice chain: {}, pipe bytes: {}, ENOBUFS backoff: {}",
            self.pieces.len(),
            self.sending,
            self.chain.is_some(),
            self.pipe_bytes,
            self.backoff
        )
    }

    /// Lets the transfer send again after an `ENOBUFS`.
    pub(crate) fn clear_backoff(&mut self) {
        self.backoff = false;
    }

    /// A `READ_FIXED` completion into buffer `index`: `res` bytes or `-errno`. A short read is
    /// continued into the rest of the buffer; a read of 0 before the slice's end is a truncated
    /// file.
    pub(crate) fn on_read(&mut self, index: u16, res: i32, io: &mut Io<'_>) {
        self.reads = self.reads.saturating_sub(1);
        let failed = self.failed.is_some();
        let Some(piece) = self.pieces.iter_mut().find(|p| matches!(p, Piece::Buf { index: i, .. } if *i == index))
        else {
            return;
        };
        let Piece::Buf { segment, position, want, filled, reading, .. } = piece else { return };
        *reading = false;
        if failed {
            return;
        }
        let error = match res {
            n if n > 0 => {
                *filled += n as u32;
                self.user_copied += n as u64;
                None
            }
            0 => Some(crate::read_path::util::truncated(u64::from(*want - *filled))),
            e if e == -libc::EINTR || e == -libc::EAGAIN => None,
            e => Some(io::Error::from_raw_os_error(-e)),
        };
        if let Some(error) = error {
            return self.fail(error);
        }
        if *filled < *want {
            let Some(fixed) = io.fixed.as_deref() else { return };
            let entry = read_entry(fixed, index, segment, *position + u64::from(*filled), *filled, *want - *filled);
            *reading = true;
            io.submit(entry, OP_READ, index);
            self.reads += 1;
        }
    }

    /// A splice completion: op `index` of the chain. Once every op of the chain is in, the
    /// results are applied in order.
    pub(crate) fn on_splice(&mut self, index: u16, res: i32) {
        let Some(chain) = self.chain.as_mut() else { return };
        if let Some(op) = chain.ops.get_mut(usize::from(index)) {
            op.result = Some(res);
        }
        chain.pending = chain.pending.saturating_sub(1);
        if chain.pending > 0 {
            return;
        }
        let chain = self.chain.take().expect("checked above");
        if self.failed.is_some() {
            return;
        }
        let mut moved = false;
        for op in &chain.ops {
            let res = op.result.unwrap_or(-libc::ECANCELED);
            match res {
                n if n > 0 => {
                    moved = true;
                    if op.into_pipe {
                        self.pipe_bytes += n as u64;
                        self.front_off += n as u64;
                    } else {
                        self.pipe_bytes = self.pipe_bytes.saturating_sub(n as u64);
                    }
                }
                0 if op.into_pipe => {
                    let missing = match self.chunks.front() {
                        Some(Chunk::File(slice)) => slice.len - self.front_off,
                        _ => 0,
                    };
                    return self.fail(crate::read_path::util::truncated(missing));
                }
                0 => return self.fail(io::Error::new(io::ErrorKind::WriteZero, "splice to the socket moved 0 bytes")),
                e if e == -libc::EAGAIN && !op.into_pipe => {
                    // The socket is full: wait for room (the ops after it were cancelled).
                    self.want_writable = true;
                    moved = true;
                    break;
                }
                e if e == -libc::ECANCELED || e == -libc::EINTR || e == -libc::EAGAIN => {}
                e => return self.fail(io::Error::from_raw_os_error(-e)),
            }
        }
        if moved {
            self.stalls = 0;
        } else {
            self.stalls += 1;
            if self.stalls > MAX_STALLS {
                self.fail(io::Error::other(format!("{MAX_STALLS} splice chains in a row moved no byte")));
            }
        }
    }

    /// The completion of the `POLL_ADD` for `POLLOUT` (`res`: the ready events, or `-errno`).
    /// An error or hang-up event is left to the next splice to report (`EPIPE`, `ECONNRESET`).
    pub(crate) fn on_poll_out(&mut self, res: i32) {
        self.polling = false;
        if res == -libc::ECANCELED || self.failed.is_some() {
            return;
        }
        if res < 0 && res != -libc::EINTR {
            return self.fail(io::Error::from_raw_os_error(-res));
        }
        self.want_writable = false;
    }

    /// Gives back what the transfer holds: every registered buffer of its pieces and its pipe
    /// (closed unless empty). Only once none of its operations is in flight.
    pub(crate) fn release(&mut self, fixed: Option<&mut FixedBuffers>, pipes: &mut PipePool) {
        if let Some(fixed) = fixed {
            for piece in self.pieces.drain(..) {
                if let Piece::Buf { index, .. } = piece {
                    fixed.release(index);
                }
            }
        }
        self.pieces.clear();
        if let Some(pipe) = self.pipe.take() {
            pipes.give_back(pipe, self.pipe_bytes == 0 && self.failed.is_none());
        }
    }
}

/// A `READ_FIXED` of `len` bytes of `segment` at `position` into buffer `index` at `offset`.
fn read_entry(
    fixed: &FixedBuffers,
    index: u16,
    segment: &SegmentFile,
    position: u64,
    offset: u32,
    len: u32,
) -> squeue::Entry {
    uring::read_fixed_entry(segment.file().as_raw_fd(), fixed.ptr(index, offset), len, index, position)
}
