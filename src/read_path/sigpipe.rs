//! SIGPIPE for the paths whose system call has no `MSG_NOSIGNAL`: `sendfile` and `splice` into a
//! socket whose peer is gone raise SIGPIPE (the socket layer signals unless the send carries
//! `MSG_NOSIGNAL`, which `sendfile(2)` and `splice(2)` cannot pass; send(2), socket(7)).
//!
//! Rust programs ignore SIGPIPE, so usually nothing happens and the call fails with `EPIPE`. When
//! this process does not ignore it (an embedding host restored the default), such a path blocks
//! SIGPIPE on its thread for the transfer ([`SigpipeBlock`]) and discards a pending one, so the
//! caller gets `BrokenPipe` instead of being killed. [`sigpipe_ignored`] says which case holds.

use std::io;

/// Whether SIGPIPE's disposition is SIG_IGN in this process.
pub(crate) fn sigpipe_ignored() -> bool {
    // SAFETY: `sigaction` with a null new action only reads the current disposition into `old`,
    // a properly sized, zero-initialised `sigaction` struct owned by this frame.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Blocks SIGPIPE on this thread until dropped; then discards a SIGPIPE raised meanwhile and
/// restores the previous mask.
pub(crate) struct SigpipeBlock {
    old: nix::sys::signal::SigSet,
}

impl SigpipeBlock {
    /// Blocks SIGPIPE on the calling thread. Errors: `pthread_sigmask`'s (`EINVAL`).
    pub(crate) fn new() -> io::Result<Self> {
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGPIPE);
        let old = set.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK).map_err(io::Error::from)?;
        Ok(SigpipeBlock { old })
    }
}

impl Drop for SigpipeBlock {
    fn drop(&mut self) {
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGPIPE);
        // Discard a SIGPIPE that became pending while blocked (zero timeout: never waits).
        let ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `set` is a valid sigset for SIGPIPE; `ts` is a valid zero timeout; a null info
        // pointer is allowed. The call only dequeues a pending SIGPIPE of this thread or process.
        unsafe {
            libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts);
        }
        let _ = self.old.thread_set_mask();
    }
}
