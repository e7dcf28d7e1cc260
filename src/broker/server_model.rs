//! [`ServerModel`]: how the broker runs its connections, an experiment axis like the read path
//! (`server.model`, issue 16).
//!
//! | model | threads | how a response is written | read paths |
//! |---|---|---|---|
//! | `threaded` | Kafka's: an acceptor, `num.network.threads` network threads (mio), `num.io.threads` io threads that handle requests and write responses with blocking calls | on the io thread, through its own synchronous [`ReadPath`](crate::read_path::ReadPath) | every path |
//! | `uring` | thread per core (Redpanda, Apache Iggy): each core owns one io_uring ring, its connections and their fetch work, with many operations in flight per ring; requests that write the log or wait on the coordinator run on the io threads, their answers go back to the connection's core | by the core's loop, asynchronously on its ring | `uring-splice`, `uring-read-send`, `uring-send-zc` |
//!
//! Both models share the handlers, the log, the coordinator, the purgatory and the Fetch
//! response framing: one broker, two front ends. A combination a model cannot run is refused
//! with the reason ([`ServerModel::supports`]), never swapped for another, at start and when
//! `server.model` or `read.path` is altered at runtime (both are dynamic broker configs: a new
//! model takes the connections accepted after the change, `front_end.rs`).

use std::fmt;
use std::str::FromStr;

use io_uring::{opcode, IoUring, Probe};

use crate::read_path::ReadPathKind;

/// How the broker runs its connections (`server.model`; see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ServerModel {
    /// Kafka's model: network threads and a pool of request handler (io) threads.
    #[default]
    Threaded,
    /// Thread per core on io_uring.
    Uring,
}

/// Why a server model, or a model with a read path, cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("server.model={model} cannot run{}: {reason}", match .read_path { Some(p) => format!(" read path {p}"), None => String::new() })]
pub struct ModelUnsupported {
    /// The model.
    pub model: ServerModel,
    /// The read path refused, when the refusal is about the combination.
    pub read_path: Option<ReadPathKind>,
    /// The cause, naming the missing feature or the blocking call.
    pub reason: String,
}

/// An unknown `server.model` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown server model {name:?}; known: threaded, uring")]
pub struct UnknownServerModel {
    /// The name given.
    pub name: String,
}

/// The io_uring opcodes the `uring` model's core loop issues, with the kernel that brought each
/// (multishot accept 5.19, multishot receive with provided buffers 6.0).
const URING_OPCODES: [(u8, &str); 7] = [
    (opcode::Accept::CODE, "IORING_OP_ACCEPT (multishot: Linux 5.19)"),
    (opcode::RecvMulti::CODE, "IORING_OP_RECV (multishot with provided buffers: Linux 6.0)"),
    (opcode::Send::CODE, "IORING_OP_SEND (Linux 5.6)"),
    (opcode::Read::CODE, "IORING_OP_READ (Linux 5.6)"),
    (opcode::Timeout::CODE, "IORING_OP_TIMEOUT (Linux 5.4)"),
    (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL (Linux 5.5)"),
    (opcode::Close::CODE, "IORING_OP_CLOSE (Linux 5.6)"),
];

impl ServerModel {
    /// Every model, in the order reports list them.
    pub const ALL: [ServerModel; 2] = [ServerModel::Threaded, ServerModel::Uring];

    /// The name used in `server.model`, workloads and results.
    pub fn name(self) -> &'static str {
        match self {
            ServerModel::Threaded => "threaded",
            ServerModel::Uring => "uring",
        }
    }

    /// Whether this model can run here: `threaded` always; `uring` needs a ring (the reason
    /// `uring-splice`'s probe gives when it cannot have one, e.g. `kernel.io_uring_disabled=2`)
    /// and every opcode its core loop issues ([`IORING_REGISTER_PROBE`](https://man7.org/linux/man-pages/man2/io_uring_register.2.html)).
    pub fn probe(self) -> Result<(), ModelUnsupported> {
        let fail = |reason: String| ModelUnsupported { model: self, read_path: None, reason };
        match self {
            ServerModel::Threaded => Ok(()),
            ServerModel::Uring => {
                ReadPathKind::UringSplice.probe().map_err(|e| fail(e.reason))?;
                let ring = IoUring::new(2).map_err(|e| fail(format!("io_uring_setup: {e}")))?;
                let mut probe = Probe::new();
                ring.submitter()
                    .register_probe(&mut probe)
                    .map_err(|e| fail(format!("IORING_REGISTER_PROBE: {e} (kernel before 5.6)")))?;
                match URING_OPCODES.iter().find(|(code, _)| !probe.is_supported(*code)) {
                    Some((_, name)) => Err(fail(format!("this kernel does not support {name}"))),
                    None => Ok(()),
                }
            }
        }
    }

    /// Whether this model can serve Fetch responses with `path` (not whether `path` itself can
    /// run here: that is [`ReadPathKind::probe`]). `threaded` runs every path. `uring` runs the
    /// paths its core loop drives asynchronously on its own ring (`uring-splice`,
    /// `uring-read-send`, `uring-send-zc`) and refuses the others: each is a blocking system call
    /// (`pread`/`write`, `sendfile`, `splice`, `send` with its error-queue wait, `O_DIRECT`
    /// reads), and a core's loop never blocks, or all its connections would wait.
    pub fn supports(self, path: ReadPathKind) -> Result<(), ModelUnsupported> {
        match (self, path) {
            (ServerModel::Threaded, _) => Ok(()),
            (ServerModel::Uring, p) if uring_runs(p) => Ok(()),
            (ServerModel::Uring, p) => Err(ModelUnsupported {
                model: self,
                read_path: Some(p),
                reason: format!(
                    "{p} moves bytes with blocking system calls and a core's loop never blocks; \
                     under server.model=uring use uring-splice, uring-read-send or uring-send-zc, \
                     or run {p} under server.model=threaded"
                ),
            }),
        }
    }
}

/// The read paths the `uring` model's core loop drives on its ring.
fn uring_runs(path: ReadPathKind) -> bool {
    matches!(path, ReadPathKind::UringSplice | ReadPathKind::UringReadSend | ReadPathKind::UringSendZc)
}

impl fmt::Display for ServerModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ServerModel {
    type Err = UnknownServerModel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ServerModel::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| UnknownServerModel { name: s.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_known() {
        for m in ServerModel::ALL {
            assert_eq!(m.name().parse::<ServerModel>(), Ok(m));
        }
        let e = "reactor".parse::<ServerModel>().unwrap_err().to_string();
        assert!(e.contains("\"reactor\"") && e.contains("threaded, uring"), "{e}");
    }

    #[test]
    fn uring_refuses_blocking_paths_with_the_reason_and_threaded_runs_all() {
        for p in ReadPathKind::ALL {
            assert_eq!(ServerModel::Threaded.supports(p), Ok(()));
        }
        assert_eq!(ServerModel::Uring.supports(ReadPathKind::UringSplice), Ok(()));
        let e = ServerModel::Uring.supports(ReadPathKind::Sendfile).unwrap_err();
        assert_eq!(e.read_path, Some(ReadPathKind::Sendfile));
        let msg = e.to_string();
        assert!(msg.starts_with("server.model=uring cannot run read path sendfile: "), "{msg}");
        assert!(msg.contains("blocking"), "{msg}");
        assert!(ServerModel::Uring.supports(ReadPathKind::Copy).is_err());
    }
}
