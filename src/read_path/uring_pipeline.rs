//! The engine of `uring-read-send` and `uring-send-zc`: io_uring `READ_FIXED` from the segment
//! file into registered buffers, then a send of those bytes to the socket (`IORING_OP_SEND`, or
//! `IORING_OP_SEND_ZC` naming the fixed buffer), with several chunks in flight on one ring.
//! Both paths are one type, [`PipelinePath`], told apart by a [`SendMode`] (the send operation,
//! the name, the buffer count); their files keep what differs (the probe, the docs, the mode).
//!
//! ## How a transfer runs
//!
//! The slice is cut into chunks of at most the buffer size, chunk `k` at slice offset
//! `k * size`. Each chunk takes a free registered buffer ([`RegisteredBuffers`]); while a buffer
//! is free and bytes remain unread, a `READ_FIXED` of the next chunk is queued, so up to `count`
//! reads run ahead of the socket. Sends go in slice order with at most one send in flight, always
//! for the oldest chunk not yet sent: a stream socket must receive the chunks in order, and two
//! unlinked sends on one socket may complete in either order, while a linked chain is cut by the
//! first short send. So chunk `k` is being sent while chunks `k+1 ..` are being read. Each
//! round queues what can start, then one `io_uring_enter` submits it and waits for at least one
//! completion, and every completion that arrived is handled.
//!
//! Outcomes, per completion:
//!
//! * a read shorter than its chunk: the rest is read again (into the same buffer, at the same
//!   offsets plus the bytes already read); `EINTR`/`EAGAIN`: read again.
//! * a read of 0 bytes: the file ended before the slice did (truncated under the reader). No
//!   chunk past that point is sent (their buffers come back when their reads complete); every
//!   byte before it is sent, then the error is `UnexpectedEof` (`util::truncated`). A read error
//!   ends the data the same way, and is returned instead.
//! * a short send: the rest of the chunk is sent next. `EINTR`: sent again. `EAGAIN` (a
//!   non-blocking socket whose buffer is full): `util::wait_writable` polls for `POLLOUT`, then
//!   the send is queued again. A send that moves 0 bytes: `WriteZero`.
//! * `EPIPE` / `ECONNRESET`: the peer went away; returned as `BrokenPipe` / `ConnectionReset`,
//!   after every request in flight completed. Sends pass `MSG_NOSIGNAL`: no `SIGPIPE`, also from
//!   the kernel's `iou-wrk` threads, which belong to this process.
//!
//! ## SEND_ZC and its notifications
//!
//! A `SEND_ZC` completes twice (`io_uring_prep_send_zc(3)`): its result (bytes sent or
//! `-errno`) with `IORING_CQE_F_MORE` set when a notification will follow, then the
//! notification (`IORING_CQE_F_NOTIF`, same `user_data`) once the kernel no longer references
//! the buffer's pages (the data left the machine, or was copied). A buffer is reused only after
//! every notification of every send from it arrived, and `transfer` returns only after every
//! notification arrived. With `IORING_SEND_ZC_REPORT_USAGE` (Linux 6.2+) a notification's result
//! carries `IORING_NOTIF_USAGE_ZC_COPIED` when the kernel copied the bytes after all; those are
//! counted in [`ZcCounters::copied`] (only for sends that moved bytes: the kernel marks the
//! notification of a send that moved nothing as copied too).
//!
//! ## What the kernel holds
//!
//! The registered buffers (memory) and three descriptors: the ring, the slice's file and the
//! socket. `transfer` never returns while a request is in flight: it waits for every completion
//! and every notification, on error paths too, so the file and the socket (borrowed for the
//! call) and the buffers are never referenced by the kernel after it returns. The one exception
//! is a ring that `io_uring_enter` itself rejects (an error other than `EINTR`, `EAGAIN` or
//! `EBUSY`: the ring was misused and cannot be waited on): then the ring is closed, which makes
//! the kernel cancel what is outstanding, its buffers are leaked rather than freed (the kernel
//! may write into them until the cancellation finished), the error says so, and the next
//! transfer builds a new ring and buffers. The ring is declared before the buffers in
//! [`FixedRing`], so dropping a path closes the ring (unregistering the buffers) before their
//! memory is freed.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

use io_uring::{cqueue, squeue, IoUring};

use super::registered_buffers::RegisteredBuffers;
use super::transfer::{ReadPath, TransferStats};
use super::uring;
use super::util;
use crate::log::FileSlice;

/// `IORING_SEND_ZC_REPORT_USAGE` (`include/uapi/linux/io_uring.h`, Linux 6.2+): ask the kernel
/// to report in each notification whether it copied the bytes. Not exported by the `io-uring`
/// crate.
pub(crate) const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED` (`include/uapi/linux/io_uring.h`): set in a notification's
/// result when the kernel copied the data instead of sending from the buffer's pages.
pub(crate) const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// How the bytes of a buffer go to the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IORING_OP_SEND` (Linux 5.6+): the kernel copies from the buffer into the socket.
    Send,
    /// `IORING_OP_SEND_ZC` with the fixed buffer's index (Linux 6.0+) and
    /// `IORING_SEND_ZC_REPORT_USAGE` (6.2+): the socket sends from the buffer's pages, which the
    /// kernel holds until the notification.
    SendZc,
}

/// What the `SEND_ZC` notifications said, cumulative since the path was made or the counters
/// last taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZcCounters {
    /// Notifications received (one per `SEND_ZC` whose result carried `IORING_CQE_F_MORE`).
    pub notifications: u64,
    /// Notifications of sends that moved bytes, where the kernel reported
    /// `IORING_NOTIF_USAGE_ZC_COPIED`: it copied those bytes after all (loopback and any
    /// socket delivered locally, or a device without scatter-gather).
    pub copied: u64,
}

/// Builds the send of `len` bytes at `ptr` (inside fixed buffer `index`) to `socket` with
/// `MSG_NOSIGNAL`, as `op` says ([`uring::send_entry`], [`uring::send_zc_entry`] with
/// `IORING_SEND_ZC_REPORT_USAGE`), with `user_data`.
fn send_entry(op: SendOp, socket: RawFd, ptr: *const u8, len: u32, index: u16, user_data: u64) -> squeue::Entry {
    match op {
        SendOp::Send => uring::send_entry(socket, ptr, len),
        SendOp::SendZc => uring::send_zc_entry(socket, ptr, len, index, IORING_SEND_ZC_REPORT_USAGE),
    }
    .user_data(user_data)
}

/// A ring and the buffers registered with it. The ring is declared first, so it is closed
/// (and the registration ended) before the buffers' memory is freed.
struct FixedRing {
    ring: IoUring,
    buffers: RegisteredBuffers,
}

impl FixedRing {
    /// A ring ([`uring::setup_ring`]) with `count` buffers of `size` bytes registered.
    fn new(count: usize, size: usize) -> io::Result<FixedRing> {
        let mut buffers = RegisteredBuffers::new(count, size)?;
        // Each buffer has at most one read or one send in flight: `count` reads plus one send.
        let entries = (count as u32 + 1).next_power_of_two();
        let ring = uring::setup_ring_described(entries)?;
        // SAFETY: `buffers` moves into the same `FixedRing` as `ring`, declared after it, so the
        // ring closes first; `discard` leaks the buffers instead when requests may be in flight.
        unsafe { buffers.register(&ring.submitter()) }?;
        Ok(FixedRing { ring, buffers })
    }

    /// Closes the ring with requests possibly in flight: the kernel cancels them, and the
    /// buffers are leaked, since it may still write into them meanwhile.
    fn discard(self) {
        let FixedRing { ring, buffers } = self;
        drop(ring);
        buffers.leak();
    }
}

/// One buffer's chunk of the slice.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The buffer is taken from the pool for this chunk.
    held: bool,
    /// The chunk's offset in the slice, in bytes.
    off: u64,
    /// Its length (at most the buffer size).
    want: u32,
    /// Bytes read into the buffer.
    filled: u32,
    /// Bytes of it sent.
    sent: u32,
    /// A read into it is in flight.
    reading: bool,
    /// A send from it is in flight.
    sending: bool,
    /// Notifications still to come (`SEND_ZC` results with `IORING_CQE_F_MORE`, less the
    /// notifications received).
    notifs: u32,
    /// The file ended (or a read failed) inside this chunk: no more reads into it.
    ended: bool,
    /// Not to be sent (past the end of the data, or fully sent): the buffer comes back once
    /// nothing is in flight for it.
    retired: bool,
}

impl Slot {
    fn busy(&self) -> bool {
        self.reading || self.sending || self.notifs > 0
    }
}

/// `user_data` layout: bits 0..2 the operation, 2..18 the buffer, 18.. a sequence number (so
/// each send's notification is told apart from another's on the same buffer).
const OP_READ: u64 = 1;
const OP_SEND: u64 = 2;

fn user_data(op: u64, index: u16, seq: u64) -> u64 {
    op | (index as u64) << 2 | seq << 18
}

fn decode(user_data: u64) -> (u64, u16) {
    (user_data & 3, (user_data >> 2) as u16)
}

/// The engine: one ring, its registered buffers, and the state of the transfer in progress.
/// See the module docs.
pub(crate) struct Pipeline {
    /// `None` after `io_uring_enter` rejected the ring; rebuilt by the next transfer. Boxed:
    /// the ring's handle is large.
    fixed: Option<Box<FixedRing>>,
    op: SendOp,
    count: usize,
    size: usize,
    slots: Vec<Slot>,
    /// Buffers of the chunks to send, in slice order.
    order: VecDeque<u16>,
    /// `user_data` of `SEND_ZC`s that moved bytes and whose notification is still to come.
    moved: Vec<u64>,
    seq: u64,
    zc: ZcCounters,
    /// Bytes the reads of the current transfer put into the buffers (added to its
    /// [`TransferStats::user_copied`] when it ends).
    user_copied: u64,
    /// Completions of one round (`user_data`, result, flags), kept to reuse the allocation.
    cqes: Vec<(u64, i32, u32)>,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("ring", &self.fixed.as_ref().map(|r| r.ring.as_raw_fd()))
            .field("op", &self.op)
            .field("buffers", &self.count)
            .field("buffer_size", &self.size)
            .field("buffers_in_use", &self.buffers_in_use())
            .field("zc", &self.zc)
            .finish_non_exhaustive()
    }
}

/// The state of one transfer between rounds.
struct Run<'a> {
    slice: &'a FileSlice,
    file: RawFd,
    socket: BorrowedFd<'a>,
    /// Slice offset of the next chunk to start reading.
    next_read: u64,
    /// Slice offset where the data ends (end of file or a read error), and that error.
    end: Option<(u64, io::Error)>,
    /// The error that stops the transfer (a send error, `io_uring` trouble).
    failed: Option<io::Error>,
    /// The last send returned `EAGAIN`: poll for `POLLOUT` before the next.
    wait_writable: bool,
}

impl Run<'_> {
    fn data_end(&self) -> u64 {
        self.end.as_ref().map_or(self.slice.len, |(at, _)| *at)
    }
}

impl Pipeline {
    /// A ring with `count` registered buffers of `size` bytes, sending with `op`. Errors:
    /// `InvalidInput` for a bad shape ([`RegisteredBuffers::new`]); the `io_uring_setup` error
    /// with its cause named; the registration error (`RLIMIT_MEMLOCK` named).
    pub(crate) fn new(op: SendOp, count: usize, size: usize) -> io::Result<Pipeline> {
        let fixed = FixedRing::new(count, size)?;
        Ok(Pipeline {
            fixed: Some(Box::new(fixed)),
            op,
            count,
            size,
            slots: vec![Slot::default(); count],
            order: VecDeque::with_capacity(count),
            moved: Vec::new(),
            seq: 0,
            zc: ZcCounters::default(),
            user_copied: 0,
            cqes: Vec::with_capacity(2 * count + 2),
        })
    }

    /// Registered buffers handed out and not yet returned: 0 between transfers (a transfer
    /// returns every buffer before it returns, also on errors), unless the ring was rejected
    /// and its buffers leaked with it (then 0 as well: a new pool comes with the next ring).
    pub(crate) fn buffers_in_use(&self) -> usize {
        self.fixed.as_ref().map_or(0, |f| f.buffers.in_use())
    }

    /// The `SEND_ZC` counters so far, reset to zero.
    pub(crate) fn take_zc(&mut self) -> ZcCounters {
        std::mem::take(&mut self.zc)
    }

    /// Moves `slice` to `socket` (see the module docs). `sent` grows by every byte the kernel
    /// took, also when an error ends the transfer; `stats` counts SQEs, `io_uring_enter` and
    /// `poll` calls. Errors as [`super::ReadPath::transfer`] says, plus, for `SEND_ZC` on a
    /// socket that cannot send zero-copy (e.g. `AF_UNIX`), `Unsupported` naming it.
    pub(crate) fn transfer(
        &mut self,
        slice: &FileSlice,
        socket: BorrowedFd<'_>,
        stats: &mut TransferStats,
        sent: &mut u64,
    ) -> io::Result<()> {
        if slice.len == 0 {
            return Ok(());
        }
        if slice.position.checked_add(slice.len).is_none_or(|end| end > i64::MAX as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slice at position {} of {} bytes ends beyond i64::MAX", slice.position, slice.len),
            ));
        }
        if self.fixed.is_none() {
            self.fixed = Some(Box::new(FixedRing::new(self.count, self.size)?));
        }
        let mut run = Run {
            slice,
            file: slice.segment.file().as_raw_fd(),
            socket,
            next_read: 0,
            end: None,
            failed: None,
            wait_writable: false,
        };
        loop {
            if run.failed.is_none() {
                self.queue(&mut run, stats);
            }
            if !self.slots.iter().any(Slot::busy) {
                break;
            }
            let fixed = self.fixed.as_mut().expect("the ring exists during a transfer");
            stats.syscalls += 1;
            if let Err(e) = fixed.ring.submit_and_wait(1) {
                if !uring::enter_error_is_transient(&e) {
                    let outstanding = self.slots.iter().filter(|s| s.busy()).count();
                    if let Some(fixed) = self.fixed.take() {
                        fixed.discard();
                    }
                    self.reset();
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "io_uring_enter rejected the ring ({e}) with requests on {outstanding} buffers \
                             outstanding; the ring was closed, which cancels them, its buffers were leaked \
                             (the kernel may write into them until cancelled), and the next transfer builds \
                             new ones"
                        ),
                    ));
                }
                if e.raw_os_error() != Some(libc::EINTR) {
                    std::thread::yield_now();
                }
            }
            self.reap(&mut run, sent);
        }
        stats.user_copied += std::mem::take(&mut self.user_copied);
        // Nothing is in flight: return every buffer, sent or not.
        debug_assert!(!self.slots.iter().any(Slot::busy));
        self.reset();
        if let Some(e) = run.failed {
            return Err(e);
        }
        if let Some((at, e)) = run.end {
            debug_assert_eq!(*sent, at);
            return Err(e);
        }
        debug_assert_eq!(*sent, slice.len);
        Ok(())
    }

    /// Returns every buffer to the pool, if the ring still exists, and forgets the chunks. Nothing
    /// may be in flight, unless the ring (and with it the pool) was discarded.
    fn reset(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.held {
                if let Some(fixed) = self.fixed.as_mut() {
                    fixed.buffers.release(index as u16);
                }
            }
            *slot = Slot::default();
        }
        self.order.clear();
        self.moved.clear();
    }

    /// Queues the requests that can start: reads of new chunks into free buffers, reads of the
    /// rest of short-read chunks, and the send of the oldest unsent chunk.
    fn queue(&mut self, run: &mut Run<'_>, stats: &mut TransferStats) {
        let fixed = self.fixed.as_mut().expect("the ring exists during a transfer");
        // New chunks into free buffers, in slice order.
        while run.next_read < run.data_end() {
            let Some(index) = fixed.buffers.acquire() else { break };
            let want = (run.data_end() - run.next_read).min(self.size as u64) as u32;
            self.slots[index as usize] = Slot { held: true, off: run.next_read, want, ..Slot::default() };
            self.order.push_back(index);
            run.next_read += want as u64;
        }
        // Reads: new chunks and the rest of short reads.
        for &index in &self.order {
            let slot = &mut self.slots[index as usize];
            if slot.reading || slot.ended || slot.filled == slot.want {
                continue;
            }
            let ptr = fixed.buffers.ptr(index, slot.filled as usize);
            let offset = run.slice.position + slot.off + slot.filled as u64;
            let entry = uring::read_fixed_entry(run.file, ptr, slot.want - slot.filled, index, offset)
                .user_data(user_data(OP_READ, index, 0));
            // SAFETY: the entry names fixed buffer `index` at `ptr` for `want - filled` bytes,
            // inside that registered buffer, which lives as long as the ring (`FixedRing`); the
            // file is kept open by `run.slice` for this call, which waits for the completion
            // before returning (or closes the ring and leaks the buffers: module docs).
            if unsafe { fixed.ring.submission().push(&entry) }.is_err() {
                break; // full: queued again next round (cannot happen: one entry per buffer + one send)
            }
            slot.reading = true;
            stats.syscalls += 1;
        }
        // The send of the oldest chunk, once its read is complete.
        if self.slots.iter().any(|s| s.sending) {
            return;
        }
        let Some(&index) = self.order.front() else { return };
        let slot = self.slots[index as usize];
        let complete = slot.filled == slot.want || slot.ended;
        if slot.reading || !complete || slot.sent >= slot.filled {
            return;
        }
        if run.wait_writable {
            run.wait_writable = false;
            if let Err(e) = util::wait_writable(run.socket, stats) {
                run.failed = Some(e);
                return;
            }
        }
        self.seq += 1;
        let ptr = fixed.buffers.ptr(index, slot.sent as usize);
        let entry = send_entry(
            self.op,
            run.socket.as_raw_fd(),
            ptr,
            slot.filled - slot.sent,
            index,
            user_data(OP_SEND, index, self.seq),
        );
        // SAFETY: the entry names `filled - sent` bytes of registered buffer `index` from `ptr`
        // (inside it), alive as long as the ring; the socket is borrowed for this call, which
        // waits for the result and every notification before returning (module docs).
        if unsafe { fixed.ring.submission().push(&entry) }.is_ok() {
            self.slots[index as usize].sending = true;
            stats.syscalls += 1;
        }
    }

    /// Handles every completion in the queue.
    fn reap(&mut self, run: &mut Run<'_>, sent: &mut u64) {
        let mut cqes = std::mem::take(&mut self.cqes);
        if let Some(fixed) = self.fixed.as_mut() {
            cqes.extend(fixed.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        }
        for &(data, result, flags) in &cqes {
            let (op, index) = decode(data);
            let Some(slot) = self.slots.get(index as usize).copied() else { continue };
            match op {
                OP_READ => self.read_done(run, index, slot, result),
                OP_SEND if cqueue::notif(flags) => {
                    let s = &mut self.slots[index as usize];
                    s.notifs = s.notifs.saturating_sub(1);
                    self.zc.notifications += 1;
                    if let Some(at) = self.moved.iter().position(|&u| u == data) {
                        self.moved.swap_remove(at);
                        if result as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0 {
                            self.zc.copied += 1;
                        }
                    }
                }
                OP_SEND => self.send_done(run, index, result, flags, data, sent),
                _ => {}
            }
            self.release_if_idle(index);
        }
        cqes.clear();
        self.cqes = cqes;
    }

    fn read_done(&mut self, run: &mut Run<'_>, index: u16, slot: Slot, result: i32) {
        self.slots[index as usize].reading = false;
        if slot.retired {
            return;
        }
        match result {
            n if n > 0 => {
                self.slots[index as usize].filled += n as u32;
                self.user_copied += n as u64;
            }
            0 => {
                let at = slot.off + slot.filled as u64;
                self.end_data(run, index, util::truncated(run.slice.len - at));
            }
            e if e == -libc::EINTR || e == -libc::EAGAIN => {}
            e => {
                let err = io::Error::from_raw_os_error(-e);
                let err = io::Error::new(
                    err.kind(),
                    format!(
                        "io_uring READ_FIXED of {} at position {} failed: {err}",
                        run.slice.segment.path().display(),
                        run.slice.position + slot.off + slot.filled as u64
                    ),
                );
                self.end_data(run, index, err);
            }
        }
    }

    /// The data ends inside the chunk of buffer `index` (after what it holds), with `err`: no
    /// later chunk is sent, and no more reads start.
    fn end_data(&mut self, run: &mut Run<'_>, index: u16, err: io::Error) {
        let slot = &mut self.slots[index as usize];
        slot.ended = true;
        let at = slot.off + slot.filled as u64;
        if run.end.as_ref().is_some_and(|(end, _)| *end <= at) {
            return;
        }
        run.end = Some((at, err));
        let empty = slot.filled == 0;
        let slots = &mut self.slots;
        self.order.retain(|&i| {
            let s = &mut slots[i as usize];
            let keep = s.off < at && !(i == index && empty);
            if !keep {
                s.retired = true;
            }
            keep
        });
        for i in 0..self.count as u16 {
            self.release_if_idle(i);
        }
    }

    fn send_done(&mut self, run: &mut Run<'_>, index: u16, result: i32, flags: u32, user_data: u64, sent: &mut u64) {
        let slot = &mut self.slots[index as usize];
        slot.sending = false;
        let zc_notif = self.op == SendOp::SendZc && cqueue::more(flags);
        if zc_notif {
            slot.notifs += 1;
        }
        match result {
            n if n > 0 => {
                slot.sent += n as u32;
                *sent += n as u64;
                if zc_notif {
                    self.moved.push(user_data);
                }
                if slot.sent >= slot.filled && (slot.filled == slot.want || slot.ended) {
                    slot.retired = true;
                    self.order.pop_front();
                }
            }
            0 => {
                run.failed.get_or_insert_with(|| {
                    io::Error::new(io::ErrorKind::WriteZero, "io_uring send to the socket moved 0 bytes")
                });
            }
            e if e == -libc::EINTR => {}
            e if e == -libc::EAGAIN => run.wait_writable = true,
            e if e == -libc::EOPNOTSUPP && self.op == SendOp::SendZc => {
                run.failed.get_or_insert_with(|| zc_unsupported(run.socket));
            }
            e => {
                run.failed.get_or_insert_with(|| io::Error::from_raw_os_error(-e));
            }
        }
    }

    /// Returns buffer `index` to the pool when its chunk is retired (sent, or past the end of
    /// the data) and nothing is in flight for it.
    fn release_if_idle(&mut self, index: u16) {
        let slot = &mut self.slots[index as usize];
        if slot.held && slot.retired && !slot.busy() {
            if let Some(fixed) = self.fixed.as_mut() {
                fixed.buffers.release(index);
            }
            *slot = Slot::default();
        }
    }
}

/// What tells the read paths built on [`Pipeline`] apart: the send operation, the path's name
/// and its buffer count. Implemented by the marker types of `uring-read-send` and
/// `uring-send-zc`.
pub trait SendMode {
    /// How the bytes of a buffer go to the socket.
    const OP: SendOp;
    /// The path's name on the command line and in results ([`ReadPath::name`]).
    const NAME: &'static str;
    /// Registered buffers per path: up to this many chunks in flight.
    const BUFFERS: usize;
}

/// A read path on the engine: one [`Pipeline`] (its ring and registered buffers) sending as
/// `M` says, and its counters. `uring_read_send::UringReadSendPath` and
/// `uring_send_zc::UringSendZcPath` are this type; their module docs say what each does. Used by
/// one thread at a time (`transfer` takes `&mut self`).
#[derive(Debug)]
pub struct PipelinePath<M> {
    pipeline: Pipeline,
    stats: TransferStats,
    mode: PhantomData<fn() -> M>,
}

impl<M: SendMode> PipelinePath<M> {
    /// Sets up the ring and registers `M::BUFFERS` buffers of `buffer_size` bytes. Errors:
    /// `InvalidInput` for a `buffer_size` of 0 or above 1 GiB; the `io_uring_setup` error with
    /// its cause named; the registration error (`RLIMIT_MEMLOCK` named).
    pub fn new(buffer_size: usize) -> io::Result<Self> {
        Ok(PipelinePath {
            pipeline: Pipeline::new(M::OP, M::BUFFERS, buffer_size)?,
            stats: TransferStats::default(),
            mode: PhantomData,
        })
    }

    /// Registered buffers in use (with `SEND_ZC`, a send's buffer stays in use until its
    /// notification): 0 between transfers, whatever the last one did.
    pub fn buffers_in_use(&self) -> usize {
        self.pipeline.buffers_in_use()
    }

    /// The `SEND_ZC` notifications so far and how many reported a copy, reset to zero (always
    /// zero with `IORING_OP_SEND`).
    pub(crate) fn take_zc(&mut self) -> ZcCounters {
        self.pipeline.take_zc()
    }
}

impl<M: SendMode> ReadPath for PipelinePath<M> {
    fn name(&self) -> &'static str {
        M::NAME
    }
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        let start = Instant::now();
        let mut sent = 0u64;
        let result = self.pipeline.transfer(slice, socket, &mut self.stats, &mut sent);
        self.stats.finish(start, sent, result)
    }
    fn take_stats(&mut self) -> TransferStats {
        std::mem::take(&mut self.stats)
    }
}

/// The error for a socket that `IORING_OP_SEND_ZC` refused with `EOPNOTSUPP`, naming its
/// address family. The kernel sends zero-copy only from sockets flagged `SOCK_SUPPORT_ZC`
/// (TCP and UDP over IPv4 and IPv6, `io_uring/net.c`); an `AF_UNIX` socket is refused.
fn zc_unsupported(socket: BorrowedFd<'_>) -> io::Error {
    use nix::sys::socket::SockaddrLike;
    let family = match nix::sys::socket::getsockname::<nix::sys::socket::SockaddrStorage>(socket.as_raw_fd()) {
        Ok(addr) => match addr.family() {
            Some(family) => format!("a {family:?} socket"),
            None => "a socket of unknown family".to_string(),
        },
        Err(e) => format!("a socket whose family is unknown (getsockname: {e})"),
    };
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "IORING_OP_SEND_ZC refused {family} with EOPNOTSUPP: the kernel sends zero-copy only from TCP \
             and UDP sockets (SOCK_SUPPORT_ZC), not AF_UNIX; uring-send-zc does not fall back to a \
             copying send (that is uring-read-send)"
        ),
    )
}
