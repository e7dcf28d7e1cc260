//! A pool of io_uring registered ("fixed") buffers: `count` buffers of `size` bytes each, in one
//! page-aligned allocation, registered with one ring by `IORING_REGISTER_BUFFERS`, handed out by
//! index and counted, so a caller can tell (and a test can assert) that every buffer came back.
//!
//! Registration pins the buffers' pages in the kernel, which charges them to `RLIMIT_MEMLOCK`
//! (unless the process holds `CAP_IPC_LOCK`); a `READ_FIXED`/`WRITE_FIXED` or a `SEND_ZC` with
//! `IORING_RECVSEND_FIXED_BUF` then names a buffer by its index and skips the per-request page
//! pinning. Source: `io_uring_register(2)` (`IORING_REGISTER_BUFFERS`),
//! `io_uring_prep_read_fixed(3)`, `io_uring_prep_send_zc_fixed(3)`.
//!
//! A buffer handed out ([`RegisteredBuffers::acquire`]) is held once; an owner may add holds
//! ([`RegisteredBuffers::hold`], e.g. one per `SEND_ZC` whose notification has not come yet),
//! and the buffer is free again when the last hold is released.
//!
//! ## What the kernel holds
//!
//! From registration until the ring is closed (or the buffers unregistered) the kernel holds
//! the pages, and a request in flight writes into or reads from them. So the memory must
//! outlive the registration: [`RegisteredBuffers::register`] is `unsafe` and says so, and an
//! owner keeps the ring in a field declared before the pool (fields drop in declaration order),
//! or closes the ring first. When a ring has to be dropped with requests still in flight (the
//! ring was rejected by `io_uring_enter`), the pool is [`RegisteredBuffers::leak`]ed instead of
//! freed: the kernel cancels those requests asynchronously and may still write into it.
//!
//! The pool is the same for a synchronous read path (one ring per path, `uring_pipeline`) and
//! for a core's ring that drives many transfers (the `uring` server model, whose
//! `broker::uring::buffers::FixedBuffers` adds its gauges): it knows nothing of transfers.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::io;

use io_uring::Submitter;

/// The alignment of the buffers' allocation: a page (4 KiB on every architecture Linux
/// io_uring runs on; larger pages are multiples of it).
const ALIGN: usize = 4096;

/// Page-aligned zeroed memory of a fixed size, freed on drop (unless leaked).
pub(crate) struct PageMemory {
    ptr: *mut u8,
    layout: Layout,
}

impl PageMemory {
    /// `len` zeroed bytes (at least 1), aligned to [`ALIGN`]. Errors: `OutOfMemory` when the
    /// allocation fails, `Other` for a size the allocator cannot describe (above `isize::MAX`).
    pub(crate) fn new(len: usize) -> io::Result<PageMemory> {
        let layout = Layout::from_size_align(len.max(1), ALIGN).map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, format!("cannot allocate {len} bytes")));
        }
        Ok(PageMemory { ptr, layout })
    }

    /// The start of the memory.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for PageMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated with exactly this layout and is freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// The buffers, their registration state, and which are in use. See the module docs.
pub(crate) struct RegisteredBuffers {
    /// `count * size` bytes, page-aligned; buffer `i` at `i * size`. Never moves.
    memory: PageMemory,
    /// Bytes per buffer.
    size: usize,
    /// Indexes of the free buffers (a stack: the most recently freed is reused first, its
    /// pages still warm in the cache).
    free: Vec<u16>,
    /// Holds per buffer (0 = free).
    holds: Vec<u16>,
}

impl fmt::Debug for RegisteredBuffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredBuffers")
            .field("count", &self.count())
            .field("size", &self.size())
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl RegisteredBuffers {
    /// The most buffers a pool holds: the kernel's limit per ring (`IORING_MAX_REG_BUFFERS`,
    /// 16 Ki) and the `u16` index of an SQE's `buf_index`.
    pub(crate) const MAX_COUNT: usize = 16 * 1024;
    /// The largest buffer: the kernel refuses registered buffers above 1 GiB (`EFAULT`), and a
    /// request's length is a `u32`.
    pub(crate) const MAX_SIZE: usize = 1 << 30;

    /// `count` zeroed buffers of `size` bytes each (one page-aligned allocation), not yet
    /// registered. Errors: `InvalidInput` when `count` is 0 or above [`Self::MAX_COUNT`], or
    /// `size` is 0 or above [`Self::MAX_SIZE`]; `OutOfMemory` when the allocation fails.
    pub(crate) fn new(count: usize, size: usize) -> io::Result<RegisteredBuffers> {
        if count == 0 || count > Self::MAX_COUNT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{count} registered buffers: between 1 and {} are allowed", Self::MAX_COUNT),
            ));
        }
        if size == 0 || size > Self::MAX_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a registered buffer of {size} bytes: between 1 byte and {} bytes (1 GiB, the kernel's limit) are allowed",
                    Self::MAX_SIZE
                ),
            ));
        }
        let bytes = count.checked_mul(size).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{count} registered buffers of {size} bytes"))
        })?;
        Ok(RegisteredBuffers {
            memory: PageMemory::new(bytes)?,
            size,
            free: (0..count as u16).rev().collect(),
            holds: vec![0; count],
        })
    }

    /// Registers every buffer with the ring of `submitter`, buffer `i` as fixed buffer index `i`
    /// (`IORING_REGISTER_BUFFERS`). Errors: the kernel's, with the cause named: `ENOMEM` is
    /// `RLIMIT_MEMLOCK` (named with the bytes asked for), `EBUSY` a ring that already has
    /// buffers registered.
    ///
    /// # Safety
    ///
    /// `self` must outlive the registration: the ring must be closed (or its buffers
    /// unregistered) before `self` is dropped, or `self` must be [`Self::leak`]ed. Between
    /// registration and then, the kernel may read and write the buffers whenever a request
    /// naming them is in flight.
    pub(crate) unsafe fn register(&mut self, submitter: &Submitter<'_>) -> io::Result<()> {
        let iovecs: Vec<libc::iovec> = (0..self.count())
            .map(|i| libc::iovec {
                // SAFETY: i < count: the buffer lies inside the allocation.
                iov_base: unsafe { self.memory.ptr().add(i * self.size) }.cast(),
                iov_len: self.size,
            })
            .collect();
        // SAFETY: every iovec names memory of this allocation of its length, which the caller
        // keeps alive as long as the registration (see `# Safety`).
        unsafe { submitter.register_buffers(&iovecs) }.map_err(|e| {
            let total = self.count() * self.size();
            let cause = match e.raw_os_error() {
                Some(libc::ENOMEM) => format!(
                    ": the {total} bytes to pin exceed RLIMIT_MEMLOCK (`ulimit -l`, {}) without CAP_IPC_LOCK; \
                     raise the limit or use fewer or smaller buffers",
                    memlock_limit()
                ),
                Some(libc::EBUSY) => ": this ring already has registered buffers".to_string(),
                _ => String::new(),
            };
            io::Error::new(
                e.kind(),
                format!(
                    "registering {} buffers of {} bytes with io_uring (IORING_REGISTER_BUFFERS) failed: {e}{cause}",
                    self.count(),
                    self.size()
                ),
            )
        })
    }

    /// Gives up the memory without freeing it, for a ring dropped with requests in flight (see
    /// the module docs): the kernel may still write into it while it cancels them.
    pub(crate) fn leak(self) {
        std::mem::forget(self.memory);
    }

    /// Takes a free buffer, held once; `None` when every buffer is in use.
    pub(crate) fn acquire(&mut self) -> Option<u16> {
        let index = self.free.pop()?;
        self.holds[index as usize] = 1;
        Some(index)
    }

    /// One more hold on buffer `index`, which is in use (e.g. a `SEND_ZC` waiting for its
    /// notification); each hold is released by [`Self::release`]. Holding a free buffer (or
    /// one out of range) is a bug and is ignored (a debug assertion in tests).
    pub(crate) fn hold(&mut self, index: u16) {
        match self.holds.get_mut(index as usize) {
            Some(holds) if *holds > 0 => *holds += 1,
            _ => debug_assert!(false, "held buffer {index}, which is not in use"),
        }
    }

    /// Releases one hold on buffer `index`; the last one returns it to the pool, and then this
    /// returns `true`. The caller must hold no request in flight that names it once it is
    /// free. Releasing a buffer that is not in use (or out of range) is a bug and is ignored
    /// (a debug assertion in tests).
    pub(crate) fn release(&mut self, index: u16) -> bool {
        match self.holds.get_mut(index as usize) {
            Some(holds) if *holds > 0 => {
                *holds -= 1;
                if *holds == 0 {
                    self.free.push(index);
                    return true;
                }
                false
            }
            _ => {
                debug_assert!(false, "released buffer {index}, which is not in use");
                false
            }
        }
    }

    /// Buffers handed out and not yet released.
    pub(crate) fn in_use(&self) -> usize {
        self.count() - self.free.len()
    }

    /// Free buffers.
    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Buffers in the pool.
    pub(crate) fn count(&self) -> usize {
        self.holds.len()
    }

    /// Bytes per buffer.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The address of byte `offset` of buffer `index`, for an SQE (`READ_FIXED`, `SEND`,
    /// `SEND_ZC`); the request must stay inside the buffer (`offset + len <= size`). Panics if
    /// `index` is out of range or `offset` beyond the buffer (a bug of the caller).
    pub(crate) fn ptr(&self, index: u16, offset: usize) -> *mut u8 {
        assert!((index as usize) < self.count() && offset <= self.size, "buffer {index} + {offset} out of range");
        // SAFETY: index < count and offset <= size: inside (or one past the end of) buffer
        // `index`, inside the allocation.
        unsafe { self.memory.ptr().add(index as usize * self.size + offset) }
    }
}

/// `RLIMIT_MEMLOCK`'s soft limit in words, for the registration error.
fn memlock_limit() -> String {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == libc::RLIM_INFINITY => "unlimited".into(),
        Ok((soft, _)) => format!("{soft} bytes"),
        Err(e) => format!("unreadable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_and_release_count_the_buffers() {
        let mut pool = RegisteredBuffers::new(3, 4096).unwrap();
        assert_eq!((pool.count(), pool.size(), pool.in_use()), (3, 4096, 0));
        let a = pool.acquire().unwrap();
        let b = pool.acquire().unwrap();
        let c = pool.acquire().unwrap();
        assert_eq!(pool.acquire(), None);
        assert_eq!(pool.in_use(), 3);
        let mut seen = [a, b, c];
        seen.sort();
        assert_eq!(seen, [0, 1, 2]);
        pool.hold(b);
        assert!(!pool.release(b), "one hold left");
        assert_eq!(pool.in_use(), 3);
        assert!(pool.release(b));
        assert_eq!(pool.in_use(), 2);
        assert_eq!(pool.acquire(), Some(b), "the most recently freed buffer is reused first");
        for i in [a, b, c] {
            pool.release(i);
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn bad_shapes_are_refused() {
        for (count, size) in [(0, 4096), (RegisteredBuffers::MAX_COUNT + 1, 4096), (1, 0), (1, (1 << 30) + 1)] {
            let err = RegisteredBuffers::new(count, size).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{count} x {size}: {err}");
        }
    }

    #[test]
    fn registers_with_a_ring() {
        let ring = match crate::read_path::uring::setup_ring(4) {
            Ok(ring) => ring,
            Err(e) => {
                eprintln!("skipping registers_with_a_ring: no io_uring here: {e}");
                return;
            }
        };
        let mut pool = RegisteredBuffers::new(4, 64 * 1024).unwrap();
        // SAFETY: `ring` is dropped explicitly below, before `pool`.
        unsafe { pool.register(&ring.submitter()) }.unwrap();
        // A second registration on the same ring is refused, and the error names why.
        let mut again = RegisteredBuffers::new(1, 4096).unwrap();
        // SAFETY: as above; `again` is dropped after `ring` below.
        let err = unsafe { again.register(&ring.submitter()) }.unwrap_err();
        assert!(err.to_string().contains("IORING_REGISTER_BUFFERS"), "{err}");
        drop(ring);
        drop((pool, again));
    }
}
