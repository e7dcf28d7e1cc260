//! The pipe of the splice paths (`splice` and `uring-splice`): a close-on-exec pipe raised to the
//! configured size with `F_SETPIPE_SZ` ([`Pipe::new`]), and emptying it after an error
//! ([`Pipe::discard`]) so the next transfer starts clean. [`PathPipe`] is what each splice path
//! holds: the pipe (rebuilt when an error path had to drop it), its size and `/dev/null`.
//!
//! The size is never quietly lowered: a size above `/proc/sys/fs/pipe-max-size` without
//! `CAP_SYS_RESOURCE`, or beyond the user's `fs.pipe-user-pages-hard`, is an error that names the
//! limit and its value (fcntl(2), pipe(7)). A benchmark that ran with another pipe size than the
//! one asked for would measure something else.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags};

use super::transfer::TransferStats;
use super::util::read_setting;

/// The largest pipe an unprivileged process may set with `F_SETPIPE_SZ`.
pub(crate) const PIPE_MAX_SIZE: &str = "/proc/sys/fs/pipe-max-size";

/// `F_SETPIPE_SZ` refused the requested pipe size.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot raise the pipe to {requested} bytes with F_SETPIPE_SZ ({source}){}",
    limit_note(*.max, .source)
)]
struct PipeSizeError {
    /// The size asked for, in bytes.
    requested: usize,
    /// `/proc/sys/fs/pipe-max-size`, when readable.
    max: Option<usize>,
    /// The `fcntl` error.
    #[source]
    source: io::Error,
}

fn limit_note(max: Option<usize>, source: &io::Error) -> String {
    if source.raw_os_error() != Some(libc::EPERM) {
        return String::new();
    }
    let max = max.map_or_else(|| "unreadable".to_string(), |m| format!("{m} bytes"));
    format!(
        ": above fs.pipe-max-size ({PIPE_MAX_SIZE} = {max}) without CAP_SYS_RESOURCE, or this \
         user's pipes exceed fs.pipe-user-pages-hard; ask for a smaller pipe size or raise the limit"
    )
}

/// The pipe between the two splices of a splice path. Both ends are owned; the path holds the
/// write end too, which is what lets a splice from an empty pipe wait rather than see end of file.
#[derive(Debug)]
pub(crate) struct Pipe {
    /// The read end (the source of the pipe -> socket splice).
    pub(crate) read: OwnedFd,
    /// The write end (the destination of the file -> pipe splice).
    pub(crate) write: OwnedFd,
    /// Capacity in bytes, as the kernel set it (a power of two pages).
    pub(crate) capacity: u64,
}

impl Pipe {
    /// A close-on-exec pipe raised to `size` bytes. Errors: `pipe2` errors, and
    /// [`PipeSizeError`] (kind from the errno, e.g. `PermissionDenied`; the message names
    /// `fs.pipe-max-size` and its value) when the size is refused.
    pub(crate) fn new(size: usize) -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let refused = |source: io::Error| {
            let max = read_setting(PIPE_MAX_SIZE).and_then(|s| s.parse().ok());
            io::Error::new(source.kind(), PipeSizeError { requested: size, max, source })
        };
        let arg = libc::c_int::try_from(size)
            .map_err(|_| refused(io::Error::new(io::ErrorKind::InvalidInput, "larger than i32::MAX")))?;
        let capacity = nix::fcntl::fcntl(&write, FcntlArg::F_SETPIPE_SZ(arg)).map_err(|e| refused(e.into()))?;
        Ok(Pipe { read, write, capacity: capacity as u64 })
    }

    /// Empties the pipe (after an error, so the next transfer starts clean) by splicing what it
    /// holds to `sink` (`/dev/null`), non-blocking: `EAGAIN` means empty, as the owner holds the
    /// write end. Counts each `splice` in `stats`. Errors: the `splice` error when the pipe could
    /// not be emptied; the caller then drops the pipe and makes a new one.
    pub(crate) fn discard(&self, sink: BorrowedFd<'_>, stats: &mut TransferStats) -> Result<(), Errno> {
        loop {
            stats.syscalls += 1;
            match nix::fcntl::splice(
                &self.read,
                None,
                sink,
                None,
                self.capacity as usize,
                SpliceFFlags::SPLICE_F_NONBLOCK,
            ) {
                Ok(0) | Err(Errno::EAGAIN) => return Ok(()),
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The pipe of one splice path: the [`Pipe`] (`None` after it could not be emptied, or was
/// closed with a rejected ring; rebuilt by [`PathPipe::ensure`]), the size asked for, and
/// `/dev/null`, where an error path discards what the pipe still holds.
#[derive(Debug)]
pub(crate) struct PathPipe {
    pipe: Option<Pipe>,
    /// The pipe size asked for, in bytes.
    size: usize,
    dev_null: File,
}

impl PathPipe {
    /// A pipe of `size` bytes ([`Pipe::new`]) and `/dev/null` opened for writing. Errors:
    /// [`Pipe::new`]'s, then opening `/dev/null`.
    pub(crate) fn new(size: usize) -> io::Result<PathPipe> {
        let pipe = Pipe::new(size)?;
        let dev_null = File::options().write(true).open(Path::new("/dev/null"))?;
        Ok(PathPipe { pipe: Some(pipe), size, dev_null })
    }

    /// The pipe's capacity in bytes as the kernel set it (the size asked for rounded up to a
    /// power of two pages), or `None` while no pipe exists (after an error, until the next
    /// [`PathPipe::ensure`]).
    pub(crate) fn capacity(&self) -> Option<u64> {
        self.pipe.as_ref().map(|p| p.capacity)
    }

    /// The pipe, made anew (of the size asked for) if an error path dropped it. Errors:
    /// [`Pipe::new`]'s.
    pub(crate) fn ensure(&mut self) -> io::Result<&Pipe> {
        if self.pipe.is_none() {
            self.pipe = Some(Pipe::new(self.size)?);
        }
        self.get()
    }

    /// The pipe; an error ("the pipe is gone") when an error path dropped it.
    pub(crate) fn get(&self) -> io::Result<&Pipe> {
        self.pipe.as_ref().ok_or_else(|| io::Error::other("the pipe is gone"))
    }

    /// Closes the pipe (with its ring, when `io_uring_enter` rejected it); the next
    /// [`PathPipe::ensure`] makes a new one.
    pub(crate) fn close(&mut self) {
        self.pipe = None;
    }

    /// Empties the pipe after an error so the next transfer starts clean ([`Pipe::discard`] to
    /// `/dev/null`, each `splice` counted in `stats`); closes it if that fails (the next
    /// transfer makes a new one).
    pub(crate) fn empty_after_error(&mut self, stats: &mut TransferStats) {
        let Some(pipe) = &self.pipe else { return };
        if pipe.discard(self.dev_null.as_fd(), stats).is_err() {
            self.pipe = None;
        }
    }
}
