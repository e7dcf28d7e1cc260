//! Fixtures shared by the read paths' unit tests (compiled for tests only): a segment file of
//! known bytes, slices of it, connected socket pairs (Unix and loopback TCP), a reader thread
//! that collects what arrives, the probe-or-skip check, and the error and slow-reader checks of
//! the `uring_pipeline` paths.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::log::segment::SegmentFile;
use crate::log::FileSlice;
use crate::read_path::transfer::ReadPath;

/// A temp file of `len` pseudo-random bytes, as a segment, and its contents.
pub(crate) fn segment(len: usize) -> (Arc<SegmentFile>, Vec<u8>) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ len as u64;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&data).unwrap();
    (Arc::new(SegmentFile::from_file(file, PathBuf::from("read-path-test"))), data)
}

pub(crate) fn slice(segment: &Arc<SegmentFile>, position: u64, len: u64) -> FileSlice {
    FileSlice { segment: segment.clone(), position, len }
}

/// The socket kinds a test runs over.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transport {
    Unix,
    Tcp,
}

impl Transport {
    /// A connected (sending end, receiving end).
    pub(crate) fn pair(self, nonblocking: bool) -> (OwnedFd, OwnedFd) {
        let (tx, rx): (OwnedFd, OwnedFd) = match self {
            Transport::Unix => {
                let (a, b) = UnixStream::pair().unwrap();
                (a.into(), b.into())
            }
            Transport::Tcp => {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
                let (b, _) = listener.accept().unwrap();
                (a.into(), b.into())
            }
        };
        if nonblocking {
            nix::fcntl::fcntl(&tx, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        }
        (tx, rx)
    }
}

/// A connected loopback TCP pair: (accepted end, connecting end).
pub(crate) fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (server, client)
}

/// Whether the path `name` can run here (`probe`); prints why `test` is skipped when it cannot.
pub(crate) fn supported(test: &str, name: &str, probe: Result<(), String>) -> bool {
    match probe {
        Ok(()) => true,
        Err(reason) => {
            eprintln!("skipping {test}: {name} is not supported here: {reason}");
            false
        }
    }
}

/// Reads `rx` (a socket) to its end (or, with `stop_after`, closes it after that many bytes,
/// with an RST for TCP: `SO_LINGER` 0) on a thread; returns what arrived.
pub(crate) fn reader(rx: impl Into<OwnedFd>, stop_after: Option<usize>) -> thread::JoinHandle<Vec<u8>> {
    reader_paced(rx, stop_after, false)
}

/// [`reader`], pausing 1 ms every 64 reads of 1000 bytes when `slow`.
pub(crate) fn reader_paced(
    rx: impl Into<OwnedFd>,
    stop_after: Option<usize>,
    slow: bool,
) -> thread::JoinHandle<Vec<u8>> {
    let rx: OwnedFd = rx.into();
    thread::spawn(move || {
        let mut stream = std::fs::File::from(rx);
        let mut out = Vec::new();
        let mut buf = vec![0u8; if slow { 1000 } else { 256 * 1024 }];
        let mut reads = 0u32;
        loop {
            if stop_after.is_some_and(|n| out.len() >= n) {
                let linger = libc::linger { l_onoff: 1, l_linger: 0 };
                let _ = nix::sys::socket::setsockopt(&stream.as_fd(), nix::sys::socket::sockopt::Linger, &linger);
                return out;
            }
            match stream.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => panic!("reader: {e}"),
            }
            reads += 1;
            if slow && reads.is_multiple_of(64) {
                thread::sleep(Duration::from_millis(1));
            }
        }
    })
}

/// A file shorter than the slice, a slice entirely past the end, and a peer that resets or
/// closes mid-transfer: each gives its error, and `in_use(path)` is 0 after each; a transfer
/// afterwards is exact.
pub(crate) fn buffers_come_back_after_errors_with<P: ReadPath>(
    path: &mut P,
    in_use: impl Fn(&P) -> usize,
    transports: &[Transport],
) {
    let (seg, data) = segment(300_000);
    let (big, _) = segment(8 * 1024 * 1024);
    for &transport in transports {
        // The file ends 100 bytes into the slice's last buffer-size chunk, and entirely.
        for (position, len, existing) in [(100u64, 400_000u64, 299_900usize), (300_000, 1, 0), (299_999, 70_000, 1)] {
            let (tx, rx) = transport.pair(false);
            let r = reader(rx, None);
            let err = path.transfer(&slice(&seg, position, len), tx.as_fd()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{transport:?}: {err}");
            assert_eq!(in_use(path), 0, "{transport:?}: buffers held after end of file");
            drop(tx);
            let got = r.join().unwrap();
            assert!(
                got == data[position as usize..position as usize + existing],
                "{transport:?}: the bytes that existed"
            );
        }
        // The peer goes away after 100 KB of 8 MiB.
        let (tx, rx) = transport.pair(false);
        let r = reader(rx, Some(100_000));
        let err = path.transfer(&slice(&big, 0, 8 * 1024 * 1024), tx.as_fd()).unwrap_err();
        r.join().unwrap();
        assert!(
            matches!(err.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset),
            "{transport:?}: {err} ({:?})",
            err.kind()
        );
        assert_eq!(in_use(path), 0, "{transport:?}: buffers held after the peer reset");
        // And the path still works.
        let (tx, rx) = transport.pair(false);
        let r = reader(rx, None);
        assert_eq!(path.transfer(&slice(&seg, 3, 200_000), tx.as_fd()).unwrap(), 200_000);
        drop(tx);
        assert!(r.join().unwrap() == data[3..200_003]);
        assert_eq!(in_use(path), 0);
    }
}

/// A non-blocking socket with a 4 KiB send buffer and a slow reader (`EAGAIN` and short
/// sends): the bytes arrive exactly, and every buffer comes back.
pub(crate) fn tiny_nonblocking_with<P: ReadPath>(path: &mut P, in_use: impl Fn(&P) -> usize, transports: &[Transport]) {
    let (seg, data) = segment(2 * 1024 * 1024 + 777);
    for &transport in transports {
        let (tx, rx) = transport.pair(true);
        nix::sys::socket::setsockopt(&tx, nix::sys::socket::sockopt::SndBuf, &4096).unwrap();
        let r = reader_paced(rx, None, true);
        let len = data.len() as u64 - 333;
        assert_eq!(path.transfer(&slice(&seg, 333, len), tx.as_fd()).unwrap(), len);
        assert_eq!(in_use(path), 0);
        drop(tx);
        assert!(r.join().unwrap() == data[333..], "{transport:?}");
    }
}
