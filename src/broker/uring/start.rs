//! Starting and stopping the cores: [`core_count`] (`server.uring.cores`), [`bind`] (one
//! listening socket per core, `SO_REUSEPORT`), [`Cores::start`] and [`Cores::stop`]; and
//! [`prepare_cores`], which gets every core ready for a new `read.path` before it is changed.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::socket::{self, sockopt, AddressFamily, Backlog, SockFlag, SockType};

use super::core::{Core, CoreSetup};
use super::mailbox::{CoreMailbox, CoreMessage};
use super::send::Engine;
use crate::broker::shared::Shared;
use crate::read_path::ReadPathKind;

/// How long [`prepare_cores`] waits for all the cores' answers (a core answers within one turn
/// of its loop, at most a tick of 250 ms when idle; this bounds a stuck one).
const PREPARE_TIMEOUT: Duration = Duration::from_secs(10);

/// The number of cores to run: `configured`, or with 0 one per CPU in the process's affinity
/// mask (`sched_getaffinity(2)`; 1 if it cannot be read).
pub(crate) fn core_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count()).filter(|&cpu| set.is_set(cpu).unwrap_or(false)).count().max(1),
        Err(_) => 1,
    }
}

/// A listening socket on `addr` with `SO_REUSEADDR` and `SO_REUSEPORT` (so every core can have
/// its own on the same address; the kernel spreads the connections over them).
fn listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let family = if addr.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    let fd = socket::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
    bind_fd(&fd, addr)?;
    socket::listen(&fd, Backlog::new(1024).map_err(io::Error::from)?)?;
    Ok(TcpListener::from(fd))
}

/// `bind(2)` of `fd` to `addr` (nix's socket address types need its `net` feature; this is the
/// one place a raw address is built).
fn bind_fd(fd: &OwnedFd, addr: SocketAddr) -> io::Result<()> {
    // SAFETY: zeroed sockaddr structs are valid (all-integer fields); each is filled below and
    // passed with its own size.
    let rc = unsafe {
        match addr {
            SocketAddr::V4(a) => {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_port = a.port().to_be();
                sa.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
            SocketAddr::V6(a) => {
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sa.sin6_port = a.port().to_be();
                sa.sin6_addr.s6_addr = a.ip().octets();
                sa.sin6_flowinfo = a.flowinfo();
                sa.sin6_scope_id = a.scope_id();
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in6).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `count` listening sockets on `addr`: the first binds it, the others the resolved address.
/// The address is first bound once without `SO_REUSEPORT` (and at once released): that fails
/// with `EADDRINUSE` when another socket holds it (another broker's listeners, which a
/// `SO_REUSEPORT` group of the same user would silently join and share connections with), and
/// resolves a port 0. Errors: `socket`, `setsockopt`, `bind` (`EADDRINUSE`), `listen`.
pub(crate) fn bind(addr: SocketAddr, count: usize) -> io::Result<Vec<TcpListener>> {
    let resolved = TcpListener::bind(addr)?.local_addr()?;
    let first = listener(resolved)?;
    let mut all = vec![first];
    for _ in 1..count {
        all.push(listener(resolved)?);
    }
    Ok(all)
}

/// The running cores: each one's mailbox and thread.
#[derive(Debug)]
pub(crate) struct Cores {
    cores: Vec<(Arc<CoreMailbox>, Option<JoinHandle<()>>)>,
}

impl Cores {
    /// Starts one core per listener, threads `fetchbench-core-N`, each setting up its own ring
    /// and buffers, accepting new connections when `accepting`; returns once every core is
    /// ready. Errors: the first core that could not be
    /// set up (the cores already started are stopped), with what failed.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        listeners: Vec<TcpListener>,
        engine: Engine,
        accepting: bool,
    ) -> Result<Cores, (&'static str, io::Error)> {
        let mut cores = Cores { cores: Vec::new() };
        for (index, listener) in listeners.into_iter().enumerate() {
            let mailbox = match CoreMailbox::new() {
                Ok(m) => Arc::new(m),
                Err(e) => {
                    cores.stop();
                    return Err(("core mailbox (eventfd)", e));
                }
            };
            let (ready_tx, ready_rx) = mpsc::channel();
            let setup = CoreSetup {
                index,
                shared: Arc::clone(shared),
                mailbox: Arc::clone(&mailbox),
                listener,
                engine,
                accepting,
            };
            let spawned = std::thread::Builder::new().name(format!("fetchbench-core-{index}")).spawn(move || {
                match Core::new(setup) {
                    Ok(core) => {
                        let _ = ready_tx.send(Ok(()));
                        core.run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
            let thread = match spawned {
                Ok(t) => t,
                Err(e) => {
                    cores.stop();
                    return Err(("core thread", e));
                }
            };
            let ready = ready_rx.recv().unwrap_or_else(|_| Err(io::Error::other("the core thread ended at its start")));
            if let Err(e) = ready {
                let _ = thread.join();
                cores.stop();
                return Err(("core ring setup", e));
            }
            cores.cores.push((mailbox, Some(thread)));
        }
        Ok(cores)
    }

    /// Stops every core (each stops accepting, lets responses in progress finish for a few
    /// seconds, closes its connections, waits for every completion of its ring) and joins them.
    pub(crate) fn stop(&mut self) {
        for (mailbox, _) in &self.cores {
            mailbox.post(CoreMessage::Stop);
        }
        self.join();
    }

    /// Tells every core to accept new connections or to stop accepting them
    /// ([`CoreMessage::Accept`]; `server.model` changed) and waits until each did (stopped: its
    /// multishot `ACCEPT` has ended, so it takes no new connection), at most
    /// [`PREPARE_TIMEOUT`]. Errors: the cores that did not answer in time (or ended).
    pub(crate) fn set_accepting(&self, accepting: bool) -> Result<(), String> {
        let (done, answers) = mpsc::channel();
        for (mailbox, _) in &self.cores {
            mailbox.post(CoreMessage::Accept { accepting, done: done.clone() });
        }
        drop(done);
        let deadline = Instant::now() + PREPARE_TIMEOUT;
        let mut answered = 0;
        while answered < self.cores.len() {
            match answers.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(_) => answered += 1,
                Err(e) => {
                    return Err(format!(
                        "{} of {} cores did not confirm they {} accepting ({e})",
                        self.cores.len() - answered,
                        self.cores.len(),
                        if accepting { "started" } else { "stopped" }
                    ))
                }
            }
        }
        Ok(())
    }

    /// Every core's mailbox, in core order (for [`prepare_cores`]).
    pub(crate) fn mailboxes(&self) -> Vec<Arc<CoreMailbox>> {
        self.cores.iter().map(|(mailbox, _)| Arc::clone(mailbox)).collect()
    }

    /// Waits for every core thread to end.
    pub(crate) fn join(&mut self) {
        for (_, thread) in &mut self.cores {
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Asks every core (their `mailboxes`) to get ready to run read path `path`
/// ([`CoreMessage::Prepare`]: its engine's opcodes checked on the core's own ring, registered
/// buffers registered if the engine needs them) and waits for all of them, at most
/// [`PREPARE_TIMEOUT`] in all. Called by IncrementalAlterConfigs on an io thread, before
/// `read.path` changes: a core never blocks, so it answers within a turn of its loop. Never call
/// it from a core (it would wait for itself). Errors, each a sentence naming the core: its
/// reason, no answer in time, or the core ended (the broker is stopping).
pub(crate) fn prepare_cores(mailboxes: &[Arc<CoreMailbox>], path: ReadPathKind) -> Result<(), String> {
    let (reply, answers) = mpsc::channel();
    for mailbox in mailboxes {
        mailbox.post(CoreMessage::Prepare { path, reply: reply.clone() });
    }
    drop(reply);
    let deadline = Instant::now() + PREPARE_TIMEOUT;
    let mut answered = vec![false; mailboxes.len()];
    for _ in mailboxes {
        match answers.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((core, Ok(()))) => {
                if let Some(a) = answered.get_mut(core) {
                    *a = true;
                }
            }
            Ok((core, Err(reason))) => return Err(format!("core {core} cannot run it: {reason}")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let silent: Vec<String> =
                    answered.iter().enumerate().filter(|(_, a)| !**a).map(|(i, _)| i.to_string()).collect();
                return Err(format!(
                    "core(s) {} did not answer within {} s",
                    silent.join(", "),
                    PREPARE_TIMEOUT.as_secs()
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err("a core has ended (the broker is stopping)".to_string());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_address_is_refused_not_joined() {
        let first = bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = first[0].local_addr().unwrap();
        assert!(first.iter().all(|l| l.local_addr().unwrap() == addr));
        let e = bind(addr, 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    }
}
