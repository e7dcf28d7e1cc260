//! io_uring pieces shared by the io_uring read paths (`uring-splice`, `uring-read-send`,
//! `uring-send-zc`): the one function that sets a ring up ([`setup_ring`]), the words for why
//! that failed ([`describe_setup_error`]), the opcode probe ([`probe_ops`]) and how to read an
//! `io_uring_enter` error ([`enter_error_is_transient`]), and the builders of the read and send
//! entries on registered buffers ([`read_fixed_entry`], [`send_entry`], [`send_zc_entry`]),
//! used by `uring_pipeline` and by the `uring` server model's cores alike.
//!
//! Every ring of these paths is a plain interrupt-driven ring: not `SQPOLL` (a kernel thread
//! spinning on the queue would hide its CPU time from the comparison and take one of few cores)
//! and not `IOPOLL` (sockets cannot be polled for completion); completions are reaped by the
//! thread that submits. Source: `io_uring_setup(2)`, `io_uring_enter(2)`,
//! `io_uring_register(2)`.

use std::io;

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, IoUring};

use super::util::read_setting;

/// The kernel setting that disables io_uring (Linux 6.6+): 0 enabled, 1 only for
/// `kernel.io_uring_group` or `CAP_SYS_ADMIN`, 2 disabled for everyone.
const IO_URING_DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";

/// Creates one ring of `entries` submission queue entries (rounded up to a power of two by the
/// kernel; the completion queue gets twice as many), without `SQPOLL` or `IOPOLL` (see the
/// module docs). One ring belongs to one path, and a path to one thread at a time.
///
/// This is the only place a read path sets a ring up; the probes call it too, so a probe checks
/// exactly what creating the path does. Errors: the `io_uring_setup` error (`ENOSYS`, `EPERM`,
/// `ENOMEM`, ...); [`describe_setup_error`] names its cause.
pub(crate) fn setup_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder().build(entries)
}

/// [`setup_ring`] with the error's cause named in its message (kind kept).
pub(crate) fn setup_ring_described(entries: u32) -> io::Result<IoUring> {
    setup_ring(entries).map_err(|e| io::Error::new(e.kind(), describe_setup_error(&e)))
}

/// Why `io_uring_setup` failed, in words that name the cause.
pub(crate) fn describe_setup_error(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => format!(
            "io_uring_setup failed with ENOSYS ({err}): this kernel lacks io_uring \
             (CONFIG_IO_URING off, or older than Linux 5.1), or a seccomp filter answers ENOSYS"
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let cause = match read_setting(IO_URING_DISABLED).as_deref() {
                Some("2") => "io_uring is disabled for every process: kernel.io_uring_disabled=2".to_string(),
                Some("1") => {
                    let group = read_setting("/proc/sys/kernel/io_uring_group").unwrap_or_else(|| "?".into());
                    format!(
                        "kernel.io_uring_disabled=1: only members of kernel.io_uring_group \
                         (gid {group}) or holders of CAP_SYS_ADMIN may create rings"
                    )
                }
                Some(value) => format!(
                    "kernel.io_uring_disabled={value} allows io_uring, so a seccomp filter or a security \
                     module (e.g. a container runtime's default profile) blocks io_uring_setup"
                ),
                None => format!(
                    "{IO_URING_DISABLED} does not exist (kernel before 6.6), so a seccomp filter or a \
                     security module (e.g. a container runtime's default profile) blocks io_uring_setup"
                ),
            };
            format!("io_uring_setup was refused ({err}): {cause}")
        }
        Some(libc::ENOMEM) => format!(
            "io_uring_setup failed with ENOMEM ({err}): out of memory, or RLIMIT_MEMLOCK too small \
             for the ring (kernels before 5.12 charge rings to it)"
        ),
        _ => format!("io_uring_setup failed: {err}"),
    }
}

/// One io_uring operation a path needs: its opcode, its name in the kernel's headers and the
/// Linux release that added it (for the probe's message).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    /// The opcode (`io_uring::opcode::X::CODE`).
    pub(crate) code: u8,
    /// The kernel's name, e.g. `IORING_OP_SEND_ZC`.
    pub(crate) name: &'static str,
    /// The Linux release that added it, e.g. `6.0`.
    pub(crate) since: &'static str,
}

/// Whether io_uring works here and has every operation of `ops`; `Err` names the cause: no
/// io_uring in the kernel (`ENOSYS`), io_uring disabled (`kernel.io_uring_disabled`, named with
/// its value) or blocked (seccomp), or the first missing operation with the release that added
/// it, e.g. "IORING_OP_SEND_ZC not supported by this kernel (needs Linux 6.0)". Uses
/// `IORING_REGISTER_PROBE` (Linux 5.6+) on a ring made by [`setup_ring`].
pub(crate) fn probe_ops(ops: &[Op]) -> Result<IoUring, String> {
    let ring = setup_ring(4).map_err(|e| describe_setup_error(&e))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        let needed: Vec<String> = ops.iter().map(|op| format!("{} (Linux {}+)", op.name, op.since)).collect();
        match e.raw_os_error() {
            Some(libc::EINVAL) => format!(
                "io_uring works but cannot list its operations (IORING_REGISTER_PROBE: {e}; kernel \
                 before 5.6), so it lacks {}",
                needed.join(", ")
            ),
            _ => format!("io_uring works but listing its operations failed (IORING_REGISTER_PROBE: {e})"),
        }
    })?;
    if let Some(op) = ops.iter().find(|op| !probe.is_supported(op.code)) {
        return Err(format!("{} not supported by this kernel (needs Linux {})", op.name, op.since));
    }
    Ok(ring)
}

/// Whether an `io_uring_enter` error is transient, so the caller reaps what completed and
/// enters again: `EINTR` (a signal; the entries were submitted or stay queued), `EAGAIN` (out of
/// request memory) and `EBUSY` (completions not yet flushed to the queue). Any other error means
/// the ring was misused and cannot be waited on (`io_uring_enter(2)`).
pub(crate) fn enter_error_is_transient(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY))
}

/// The `READ_FIXED` of `len` bytes at file `offset` of `file` into fixed buffer `index` at `ptr`
/// (inside that buffer). `IORING_OP_READ_FIXED` (Linux 5.1+, `pread` semantics: a short count
/// only at end of file, or when interrupted). The caller sets `user_data`.
pub(crate) fn read_fixed_entry(file: RawFd, ptr: *mut u8, len: u32, index: u16, offset: u64) -> squeue::Entry {
    opcode::ReadFixed::new(types::Fd(file), ptr, len, index).offset(offset).build()
}

/// The `IORING_OP_SEND` (Linux 5.6+) of `len` bytes at `ptr` to `socket` with `MSG_NOSIGNAL`
/// (a peer gone gives `EPIPE`, no `SIGPIPE`): the kernel copies them into the socket. The
/// caller sets `user_data`.
pub(crate) fn send_entry(socket: RawFd, ptr: *const u8, len: u32) -> squeue::Entry {
    opcode::Send::new(types::Fd(socket), ptr, len).flags(libc::MSG_NOSIGNAL).build()
}

/// The `IORING_OP_SEND_ZC` (Linux 6.0+) of `len` bytes at `ptr`, inside fixed buffer `index`,
/// to `socket` with `MSG_NOSIGNAL` and `zc_flags` (`IORING_SEND_ZC_REPORT_USAGE`, Linux 6.2+,
/// or 0): the socket sends from the buffer's pages, held until the notification. The caller
/// sets `user_data`.
pub(crate) fn send_zc_entry(socket: RawFd, ptr: *const u8, len: u32, index: u16, zc_flags: u16) -> squeue::Entry {
    opcode::SendZc::new(types::Fd(socket), ptr, len)
        .buf_index(Some(index))
        .flags(libc::MSG_NOSIGNAL)
        .zc_flags(zc_flags)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_errors_name_their_cause() {
        let text = describe_setup_error(&io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(text.contains("ENOSYS") && text.contains("lacks io_uring"), "{text}");
        let text = describe_setup_error(&io::Error::from_raw_os_error(libc::EPERM));
        assert!(text.contains("io_uring_disabled") || text.contains("seccomp"), "{text}");
        eprintln!("an EPERM here would read: {text}");
    }

    #[test]
    fn a_missing_operation_is_named_with_its_release() {
        let missing = Op { code: u8::MAX, name: "IORING_OP_FROM_THE_FUTURE", since: "99.0" };
        match probe_ops(&[missing]) {
            Ok(_) => panic!("opcode 255 is supported?"),
            Err(reason) => {
                eprintln!("probe: {reason}");
                // Either the ring could not be made here (the setup error), or the op is named.
                assert!(
                    reason.contains("io_uring_setup")
                        || reason.contains("IORING_OP_FROM_THE_FUTURE not supported by this kernel (needs Linux 99.0)"),
                    "{reason}"
                );
            }
        }
    }

    #[test]
    fn transient_enter_errors() {
        for errno in [libc::EINTR, libc::EAGAIN, libc::EBUSY] {
            assert!(enter_error_is_transient(&io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EBADF, libc::EFAULT, libc::EINVAL] {
            assert!(!enter_error_is_transient(&io::Error::from_raw_os_error(errno)));
        }
    }
}
