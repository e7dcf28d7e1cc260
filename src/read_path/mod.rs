//! Read paths: the only place record bytes move, from a segment file to a consumer's socket.
//!
//! Everything before [`ReadPath::transfer`] (index lookup, slice naming) is identical for every
//! path, so the paths are comparable: this module is what fetchbench measures.
//!
//! | kind | mechanism | copies through user space |
//! |---|---|---|
//! | `null` | `write` of zeros from memory (no file): measures the harness itself | no file read at all |
//! | `copy` | `pread` into a reusable buffer, `write` to the socket (Kafka under TLS) | yes |
//! | `mmap` | the file mapped read-only, `write` from the mapping | no read copy; one copy into the socket |
//! | `sendfile` | `sendfile64` loop (Kafka's `FileChannel.transferTo`) | no |
//! | `splice` | `splice(2)` file->pipe, pipe->socket with plain system calls (uring-splice without the ring) | no |
//! | `uring-splice` | io_uring: linked SPLICE file->pipe, pipe->socket | no |
//! | `uring-read-send` | io_uring: READ_FIXED into registered buffers, SEND, chunks in flight (Iggy) | yes |
//! | `uring-send-zc` | io_uring: READ_FIXED into registered buffers, SEND_ZC from them (Linux 6.0+; TCP/UDP only) | one read copy; the send copies only where the kernel must (loopback) |
//! | `msg-zerocopy` | the file mapped read-only, `send(MSG_ZEROCOPY)` from the mapping, completions from the error queue | no, where the kernel does not copy (it does copy on loopback and Unix sockets) |
//! | `direct` | `O_DIRECT` reads into aligned buffers, bypassing the page cache (Redpanda) | yes |
//!
//! ## Files
//!
//! - [`transfer`]: the contract every path implements ([`ReadPath`]: `transfer(slice, socket)`
//!   moves exactly the slice's bytes with blocking-socket semantics and never falls back to
//!   another mechanism) and its counters ([`TransferStats`]);
//! - one file per path ([`null`], [`copy`], [`mmap`], [`sendfile`], [`splice`],
//!   [`uring_splice`], [`uring_read_send`], [`uring_send_zc`], [`msg_zerocopy`], [`direct`]),
//!   each built on [`transfer`] and the socket helpers of `util`; the splice paths share their
//!   pipe (`pipe`), `sendfile` and `splice` their SIGPIPE guard (`sigpipe`);
//! - io_uring pieces the io_uring paths share: `uring` (the one ring setup, its error words,
//!   the opcode probe), `registered_buffers` (a pool of registered buffers, counted) and
//!   `uring_pipeline` (reads into registered buffers and in-order sends, several chunks in
//!   flight: the engine of `uring-read-send` and `uring-send-zc`, and the one path type both
//!   are, parameterised by their send mode);
//! - `test_support` (tests only): the fixtures the paths' unit tests share;
//! - this file: the kinds ([`ReadPathKind`]: names, [`ReadPathKind::probe`],
//!   [`ReadPathKind::create`], never a silent fallback: [`Unsupported`] says why a path cannot
//!   run here) and the enum dispatch over the paths ([`AnyReadPath`]).
//!
//! Measuring a path (a file moved to a loopback receiver, process CPU time, page-cache state)
//! is the harness's job: `crate::bench::loopback` (`fetchbench read-paths`). io_uring runs
//! splice work in kernel `iou-wrk` threads, which belong to the process, so the harness counts
//! CPU time process-wide.

pub(crate) mod copy;
pub(crate) mod direct;
pub(crate) mod mmap;
pub(crate) mod msg_zerocopy;
pub(crate) mod null;
pub(crate) mod pipe;
pub(crate) mod registered_buffers;
pub(crate) mod sendfile;
pub(crate) mod sigpipe;
pub(crate) mod splice;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod transfer;
pub(crate) mod uring;
pub(crate) mod uring_pipeline;
pub(crate) mod uring_read_send;
pub(crate) mod uring_send_zc;
pub(crate) mod uring_splice;
pub(crate) mod util;

pub use transfer::{ReadPath, TransferStats};

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::str::FromStr;

use crate::log::FileSlice;

/// Why a read path cannot run on this machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("read path {kind} is not supported here: {reason}")]
pub struct Unsupported {
    /// The path.
    pub kind: ReadPathKind,
    /// The cause, naming the missing feature or setting (e.g. `kernel.io_uring_disabled=2`).
    pub reason: String,
}

/// The read paths fetchbench knows, selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ReadPathKind {
    /// Zeros from memory: the harness's own cost.
    Null,
    /// `pread` + `write` through a buffer.
    Copy,
    /// `write` from a read-only mapping.
    Mmap,
    /// `sendfile64`.
    Sendfile,
    /// `splice(2)` through a pipe, plain system calls.
    Splice,
    /// io_uring linked splices through a pipe.
    UringSplice,
    /// io_uring `READ_FIXED` into registered buffers, then `SEND`.
    UringReadSend,
    /// io_uring `READ_FIXED` into registered buffers, then `SEND_ZC` (Linux 6.0+).
    UringSendZc,
    /// `send(MSG_ZEROCOPY)` from a read-only mapping, completions from the error queue.
    MsgZerocopy,
    /// `O_DIRECT` reads into aligned buffers, then `write`.
    Direct,
}

impl ReadPathKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [ReadPathKind; 10] = [
        ReadPathKind::Null,
        ReadPathKind::Copy,
        ReadPathKind::Mmap,
        ReadPathKind::Sendfile,
        ReadPathKind::Splice,
        ReadPathKind::UringSplice,
        ReadPathKind::UringReadSend,
        ReadPathKind::UringSendZc,
        ReadPathKind::MsgZerocopy,
        ReadPathKind::Direct,
    ];

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            ReadPathKind::Null => "null",
            ReadPathKind::Copy => "copy",
            ReadPathKind::Mmap => "mmap",
            ReadPathKind::Sendfile => "sendfile",
            ReadPathKind::Splice => "splice",
            ReadPathKind::UringSplice => "uring-splice",
            ReadPathKind::UringReadSend => "uring-read-send",
            ReadPathKind::UringSendZc => "uring-send-zc",
            ReadPathKind::MsgZerocopy => "msg-zerocopy",
            ReadPathKind::Direct => "direct",
        }
    }

    /// Whether this path can run here; the error names the cause.
    pub fn probe(self) -> Result<(), Unsupported> {
        let fail = |reason: String| Err(Unsupported { kind: self, reason });
        match self {
            ReadPathKind::UringSplice => uring_splice::probe().or_else(fail),
            ReadPathKind::UringReadSend => uring_read_send::probe().or_else(fail),
            ReadPathKind::UringSendZc => uring_send_zc::probe().or_else(fail),
            ReadPathKind::MsgZerocopy => msg_zerocopy::probe().or_else(fail),
            ReadPathKind::Direct => direct::probe().or_else(fail),
            _ => Ok(()),
        }
    }

    /// Creates the path with `config`. Errors: [`CreateError::Unsupported`] when the probe fails
    /// (never a silent fallback), [`CreateError::Io`] when setting it up failed.
    pub fn create(self, config: &ReadPathConfig) -> Result<AnyReadPath, CreateError> {
        self.probe()?;
        Ok(match self {
            ReadPathKind::Null => AnyReadPath::Null(null::NullPath::new(config.buffer_size)),
            ReadPathKind::Copy => AnyReadPath::Copy(copy::CopyPath::new(config.buffer_size)),
            ReadPathKind::Mmap => AnyReadPath::Mmap(mmap::MmapPath::new()),
            ReadPathKind::Sendfile => AnyReadPath::Sendfile(sendfile::SendfilePath::new()),
            ReadPathKind::Splice => AnyReadPath::Splice(
                splice::SplicePath::new(config.pipe_size).map_err(|source| CreateError::Io { kind: self, source })?,
            ),
            ReadPathKind::UringSplice => AnyReadPath::UringSplice(
                uring_splice::UringSplicePath::new(config.pipe_size)
                    .map_err(|source| CreateError::Io { kind: self, source })?,
            ),
            ReadPathKind::UringReadSend => AnyReadPath::UringReadSend(
                uring_read_send::UringReadSendPath::new(config.buffer_size)
                    .map_err(|source| CreateError::Io { kind: self, source })?,
            ),
            ReadPathKind::UringSendZc => AnyReadPath::UringSendZc(
                uring_send_zc::UringSendZcPath::new(config.buffer_size)
                    .map_err(|source| CreateError::Io { kind: self, source })?,
            ),
            ReadPathKind::MsgZerocopy => AnyReadPath::MsgZerocopy(msg_zerocopy::MsgZerocopyPath::new()),
            ReadPathKind::Direct => AnyReadPath::Direct(direct::DirectPath::new(config.buffer_size)),
        })
    }
}

impl fmt::Display for ReadPathKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown read path name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown read path {name:?}; known: {}", known_names())]
pub struct UnknownReadPath {
    /// The name given.
    pub name: String,
}

/// The names of [`ReadPathKind::ALL`], comma-separated, for [`UnknownReadPath`]'s message.
fn known_names() -> String {
    ReadPathKind::ALL.map(ReadPathKind::name).join(", ")
}

impl FromStr for ReadPathKind {
    type Err = UnknownReadPath;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReadPathKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownReadPath { name: s.to_string() })
    }
}

/// Errors creating a read path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    /// The path cannot run on this machine.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// Setting it up failed (ring creation, pipe, ...).
    #[error("setting up read path {kind}: {source}")]
    Io {
        /// The path.
        kind: ReadPathKind,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Tunables of the read paths.
#[derive(Clone, Copy, Debug)]
pub struct ReadPathConfig {
    /// Buffer size of `copy`, `direct` and `null`, and of each registered buffer of
    /// `uring-read-send` and `uring-send-zc`, in bytes (default 64 KiB).
    pub buffer_size: usize,
    /// Pipe size of `splice` and `uring-splice`, in bytes, set with `F_SETPIPE_SZ` (default 1 MiB).
    pub pipe_size: usize,
}

impl Default for ReadPathConfig {
    fn default() -> Self {
        ReadPathConfig { buffer_size: 64 * 1024, pipe_size: 1024 * 1024 }
    }
}

/// Enum dispatch over every read path, for the hot path and the CLI.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyReadPath {
    /// See [`null::NullPath`].
    Null(null::NullPath),
    /// See [`copy::CopyPath`].
    Copy(copy::CopyPath),
    /// See [`mmap::MmapPath`].
    Mmap(mmap::MmapPath),
    /// See [`sendfile::SendfilePath`].
    Sendfile(sendfile::SendfilePath),
    /// See [`splice::SplicePath`].
    Splice(splice::SplicePath),
    /// See [`uring_splice::UringSplicePath`].
    UringSplice(uring_splice::UringSplicePath),
    /// See [`uring_read_send::UringReadSendPath`].
    UringReadSend(uring_read_send::UringReadSendPath),
    /// See [`uring_send_zc::UringSendZcPath`].
    UringSendZc(uring_send_zc::UringSendZcPath),
    /// See [`msg_zerocopy::MsgZerocopyPath`].
    MsgZerocopy(msg_zerocopy::MsgZerocopyPath),
    /// See [`direct::DirectPath`].
    Direct(direct::DirectPath),
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyReadPath::Null($p) => $e,
            AnyReadPath::Copy($p) => $e,
            AnyReadPath::Mmap($p) => $e,
            AnyReadPath::Sendfile($p) => $e,
            AnyReadPath::Splice($p) => $e,
            AnyReadPath::UringSplice($p) => $e,
            AnyReadPath::UringReadSend($p) => $e,
            AnyReadPath::UringSendZc($p) => $e,
            AnyReadPath::MsgZerocopy($p) => $e,
            AnyReadPath::Direct($p) => $e,
        }
    };
}

impl AnyReadPath {
    /// The kind that actually runs (recorded with every measurement).
    pub fn kind(&self) -> ReadPathKind {
        match self {
            AnyReadPath::Null(_) => ReadPathKind::Null,
            AnyReadPath::Copy(_) => ReadPathKind::Copy,
            AnyReadPath::Mmap(_) => ReadPathKind::Mmap,
            AnyReadPath::Sendfile(_) => ReadPathKind::Sendfile,
            AnyReadPath::Splice(_) => ReadPathKind::Splice,
            AnyReadPath::UringSplice(_) => ReadPathKind::UringSplice,
            AnyReadPath::UringReadSend(_) => ReadPathKind::UringReadSend,
            AnyReadPath::UringSendZc(_) => ReadPathKind::UringSendZc,
            AnyReadPath::MsgZerocopy(_) => ReadPathKind::MsgZerocopy,
            AnyReadPath::Direct(_) => ReadPathKind::Direct,
        }
    }
}

impl ReadPath for AnyReadPath {
    fn name(&self) -> &'static str {
        dispatch!(self, p => p.name())
    }
    #[inline]
    fn transfer(&mut self, slice: &FileSlice, socket: BorrowedFd<'_>) -> io::Result<u64> {
        dispatch!(self, p => p.transfer(slice, socket))
    }
    fn take_stats(&mut self) -> TransferStats {
        dispatch!(self, p => p.take_stats())
    }
}
