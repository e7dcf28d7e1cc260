//! The memory and pipes a core lends to the kernel, each with its in-use count
//! ([`UringGauges`]):
//!
//! - [`ProvidedRing`]: the receive buffers of the core's multishot `RECV`s, an io_uring buffer
//!   ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19; `io_uring_register_buf_ring(3)`): the kernel
//!   picks a buffer per completion; the core copies the bytes into the connection's frame and
//!   gives the buffer back at once ([`ProvidedRing::recycle`]). When the ring runs dry a receive
//!   ends with `ENOBUFS`: the core re-arms it after the buffers of that turn came back.
//! - [`FixedBuffers`]: the registered buffers (`IORING_REGISTER_BUFFERS`) that
//!   `uring-read-send` and `uring-send-zc` read file bytes into (`READ_FIXED`) and send from:
//!   the read paths' pool (`read_path::registered_buffers`) with the core's gauges. A core
//!   registers them at start when its path needs them, else at the first change of `read.path`
//!   to such a path, and keeps them until it ends.
//!   A buffer is held by the transfer piece that reads into it, plus one hold per `SEND_ZC`
//!   whose notification has not come yet; it is free again when the last hold is released.
//!   Registered pages are pinned and count against `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`.
//! - [`PipePool`]: the pipes of `uring-splice`, one per transfer in progress, kept for the next
//!   transfer when they come back empty, closed when a transfer failed (their bytes are not
//!   worth reading back) and when the core leaves `uring-splice` ([`PipePool::close_idle`]).
//!
//! Memory given to the kernel is freed only after the ring that may write it is gone: the core
//! declares its ring before these (fields drop in declaration order) and waits for every
//! completion before it ends.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use nix::fcntl::{FcntlArg, OFlag};

use super::gauges::UringGauges;
use crate::read_path::registered_buffers::{PageMemory, RegisteredBuffers};

/// The receive buffers of one core (see the [module docs](self)).
pub(crate) struct ProvidedRing {
    /// The ring of `entries` buffer descriptors (16 bytes each), shared with the kernel.
    ring: PageMemory,
    /// `entries` buffers of `buf_len` bytes each.
    bufs: PageMemory,
    entries: u16,
    buf_len: u32,
    /// The tail we publish (the kernel consumes from its head).
    tail: u16,
    gauges: Arc<UringGauges>,
}

impl ProvidedRing {
    /// Registers `entries` (a power of two, at most 32768) buffers of `buf_len` bytes as buffer
    /// group `bgid` of `ring`, every buffer given to the kernel. Errors: the allocation, and
    /// `IORING_REGISTER_PBUF_RING`'s error (`EINVAL` before Linux 5.19).
    pub(crate) fn new(
        ring: &IoUring,
        entries: u16,
        buf_len: u32,
        bgid: u16,
        gauges: Arc<UringGauges>,
    ) -> io::Result<ProvidedRing> {
        let descriptors = PageMemory::new(usize::from(entries) * std::mem::size_of::<BufRingEntry>())?;
        let bufs = PageMemory::new(usize::from(entries) * buf_len as usize)?;
        let mut this = ProvidedRing { ring: descriptors, bufs, entries, buf_len, tail: 0, gauges };
        // SAFETY: the descriptor memory is page-aligned, holds `entries` descriptors and lives as
        // long as the ring that uses it (the core drops its ring first, see the module docs).
        unsafe { ring.submitter().register_buf_ring_with_flags(this.ring.ptr() as u64, entries, bgid, 0) }
            .map_err(|e| io::Error::new(e.kind(), format!("IORING_REGISTER_PBUF_RING (Linux 5.19+): {e}")))?;
        for bid in 0..entries {
            this.push(bid);
        }
        this.publish();
        Ok(this)
    }

    /// Writes buffer `bid`'s descriptor at the tail (not yet visible to the kernel).
    fn push(&mut self, bid: u16) {
        let index = usize::from(self.tail & (self.entries - 1));
        // SAFETY: `index` < `entries`, so the descriptor lies inside the ring memory; the kernel
        // reads only descriptors between its head and the published tail, and this one is past
        // the published tail until `publish`.
        let entry = unsafe { &mut *(self.ring.ptr() as *mut BufRingEntry).add(index) };
        // SAFETY: bid < entries, so the buffer lies inside `bufs`.
        let addr = unsafe { self.bufs.ptr().add(usize::from(bid) * self.buf_len as usize) };
        entry.set_addr(addr as u64);
        entry.set_len(self.buf_len);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes the pushed descriptors visible to the kernel (a release store of the tail).
    fn publish(&self) {
        // SAFETY: the ring memory is page-aligned and the tail field lies in its first
        // descriptor (`BufRingEntry::tail`); the kernel reads it with an acquire load.
        let tail = unsafe { &*(BufRingEntry::tail(self.ring.ptr() as *const BufRingEntry) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// The bytes the kernel put in buffer `bid` (`len` from the completion), counted in use
    /// until [`Self::recycle`].
    pub(crate) fn filled(&self, bid: u16, len: usize) -> &[u8] {
        self.gauges.provided(1);
        let len = len.min(self.buf_len as usize);
        let bid = usize::from(bid % self.entries);
        // SAFETY: the buffer lies inside `bufs`; the kernel wrote `len` bytes to it and does not
        // touch it again until it is recycled (it left the ring when the kernel picked it).
        unsafe { std::slice::from_raw_parts(self.bufs.ptr().add(bid * self.buf_len as usize), len) }
    }

    /// Gives buffer `bid` back to the kernel.
    pub(crate) fn recycle(&mut self, bid: u16) {
        self.push(bid % self.entries);
        self.publish();
        self.gauges.provided(-1);
    }
}

/// The registered buffers of one core (see the [module docs](self)): the read paths' pool
/// ([`RegisteredBuffers`], its holds and free list), counted in the core's gauges while in use.
pub(crate) struct FixedBuffers {
    pool: RegisteredBuffers,
    gauges: Arc<UringGauges>,
}

impl FixedBuffers {
    /// Registers `count` buffers of `buf_len` bytes with `ring`. Errors: the shape refused
    /// ([`RegisteredBuffers::new`]: `InvalidInput`), the allocation, and
    /// `IORING_REGISTER_BUFFERS`' error (`ENOMEM`: `RLIMIT_MEMLOCK` too small, named).
    pub(crate) fn new(ring: &IoUring, count: u16, buf_len: u32, gauges: Arc<UringGauges>) -> io::Result<FixedBuffers> {
        let mut pool = RegisteredBuffers::new(usize::from(count), buf_len as usize)?;
        // SAFETY: the pool outlives the ring: the core declares its ring before these buffers
        // and waits for every completion before it ends (see the module docs).
        unsafe { pool.register(&ring.submitter()) }?;
        Ok(FixedBuffers { pool, gauges })
    }

    /// The size of each buffer, in bytes.
    pub(crate) fn buf_len(&self) -> u32 {
        // At most `RegisteredBuffers::MAX_SIZE` (1 GiB), checked by `new`.
        self.pool.size() as u32
    }

    /// All buffers, free or in use.
    pub(crate) fn total(&self) -> usize {
        self.pool.count()
    }

    /// Free buffers.
    pub(crate) fn free_count(&self) -> usize {
        self.pool.free_count()
    }

    /// Whether a buffer is free.
    pub(crate) fn has_free(&self) -> bool {
        self.pool.free_count() > 0
    }

    /// A free buffer, held once; `None` when every buffer is in use.
    pub(crate) fn take(&mut self) -> Option<u16> {
        let index = self.pool.acquire()?;
        self.gauges.registered(1);
        Some(index)
    }

    /// One more hold on buffer `index` (a `SEND_ZC` waiting for its notification).
    pub(crate) fn hold(&mut self, index: u16) {
        self.pool.hold(index);
    }

    /// Releases one hold on buffer `index`; the last one frees it.
    pub(crate) fn release(&mut self, index: u16) {
        if self.pool.release(index) {
            self.gauges.registered(-1);
        }
    }

    /// The address of buffer `index`, plus `offset` bytes (at most the buffer's length).
    pub(crate) fn ptr(&self, index: u16, offset: u32) -> *mut u8 {
        self.pool.ptr(index, offset as usize)
    }
}

/// A pipe of `uring-splice`: both ends (holding the write end lets a splice from an empty pipe
/// wait instead of seeing end of file) and its capacity.
#[derive(Debug)]
pub(crate) struct Pipe {
    /// The read end (pipe -> socket).
    pub(crate) read: OwnedFd,
    /// The write end (file -> pipe).
    pub(crate) write: OwnedFd,
    /// Capacity in bytes, as `F_SETPIPE_SZ` set it.
    pub(crate) capacity: u64,
}

/// A core's pipes (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct PipePool {
    idle: Vec<Pipe>,
    size: usize,
    gauges: Arc<UringGauges>,
}

/// Idle pipes a core keeps at most.
const IDLE_PIPES: usize = 16;

impl PipePool {
    /// A pool of pipes raised to `size` bytes (`pipe_size`).
    pub(crate) fn new(size: usize, gauges: Arc<UringGauges>) -> PipePool {
        PipePool { idle: Vec::new(), size, gauges }
    }

    /// An empty pipe, idle or new. Errors: `pipe2`, or `F_SETPIPE_SZ` refusing the size
    /// (above `fs.pipe-max-size` without `CAP_SYS_RESOURCE`, or `fs.pipe-user-pages-hard`).
    pub(crate) fn take(&mut self) -> io::Result<Pipe> {
        let pipe = match self.idle.pop() {
            Some(pipe) => pipe,
            None => {
                let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
                let size = libc::c_int::try_from(self.size).map_err(io::Error::other)?;
                let capacity = nix::fcntl::fcntl(&write, FcntlArg::F_SETPIPE_SZ(size)).map_err(|e| {
                    io::Error::new(
                        io::Error::from(e).kind(),
                        format!(
                            "F_SETPIPE_SZ {} bytes: {e} (above fs.pipe-max-size, or fs.pipe-user-pages-hard reached)",
                            self.size
                        ),
                    )
                })?;
                Pipe { read, write, capacity: capacity as u64 }
            }
        };
        self.gauges.pipes(1);
        Ok(pipe)
    }

    /// Closes the idle pipes (the core no longer runs `uring-splice`: `read.path` changed).
    pub(crate) fn close_idle(&mut self) {
        self.idle.clear();
    }

    /// Gives back a pipe: kept when `empty` (and the pool is not full), else closed.
    pub(crate) fn give_back(&mut self, pipe: Pipe, empty: bool) {
        self.gauges.pipes(-1);
        if empty && self.idle.len() < IDLE_PIPES {
            self.idle.push(pipe);
        }
    }
}
