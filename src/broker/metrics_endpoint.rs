//! The metrics endpoint ([`MetricsEndpoint`]): with `metrics.listen=HOST:PORT`, one thread
//! (`fetchbench-metrics`) answers `GET /metrics` with the broker's metrics
//! ([`BrokerMetrics::encode`](super::metrics_registry::BrokerMetrics::encode), OpenMetrics text,
//! `Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8`), what a
//! Prometheus server (or `curl`) scrapes. Off by default.
//!
//! ## HTTP, bounded
//!
//! A plain `std::net::TcpListener` and a hand-written HTTP/1.x exchange: a scrape is one
//! request and one response, and an HTTP crate (hyper, tiny_http) would add a runtime or a
//! dozen dependencies to the build on a 2-core machine for what is 60 lines here. One request
//! per connection (`Connection: close`), connections served one at a time by the one thread, so
//! the endpoint holds one connection's memory at most and never takes CPU from the broker beyond
//! one scrape at a time:
//!
//! - the request head (request line and headers, up to the blank line) is read with a
//!   [`READ_TIMEOUT`] and at most [`MAX_REQUEST_BYTES`]; a body is never read;
//! - `GET /metrics` (a query string is ignored) -> `200` with the text; `HEAD` is not served;
//! - another method -> `405 Method Not Allowed` (`Allow: GET`); another path -> `404`; a head
//!   past the limit -> `431`; a request line that is not `METHOD TARGET HTTP/1.x`, or a
//!   connection closed or silent before the head ended -> `400` (when the peer still reads);
//! - the response is written with a [`WRITE_TIMEOUT`]; any I/O error ends that connection only
//!   (logged at debug), never the endpoint, and nothing here panics on what a peer sends.
//!
//! [`MetricsEndpoint::stop`] (called by the broker's shutdown) sets a flag and connects to the
//! endpoint to wake its `accept`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::shared::Shared;

/// The longest a request head may take to arrive.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a response write may stall.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read, in bytes (request line and headers).
pub(crate) const MAX_REQUEST_BYTES: usize = 8192;
/// The `Content-Type` of the metrics (OpenMetrics 1.0 text, what `prometheus-client` writes).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The running endpoint (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct MetricsEndpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsEndpoint {
    /// Starts the endpoint's thread on `listener` (bound to `metrics.listen`), serving the
    /// metrics of `shared`.
    ///
    /// Errors: `local_addr` of the listener, or spawning the thread.
    pub(crate) fn start(listener: TcpListener, shared: Arc<Shared>) -> io::Result<MetricsEndpoint> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("fetchbench-metrics".into())
            .spawn(move || serve(listener, &shared, &thread_stop))?;
        tracing::info!("metrics endpoint on http://{addr}/metrics");
        Ok(MetricsEndpoint { addr, stop, thread: Some(thread) })
    }

    /// The address the endpoint listens on (the real port when `metrics.listen` said 0).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread (after the scrape it is serving, if any) and waits for it.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let wake = match self.addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port()),
            IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.addr.port()),
            _ => self.addr,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts and answers connections one at a time until `stop` is set.
fn serve(listener: TcpListener, shared: &Shared, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match stream {
            Ok(stream) => {
                let peer = stream.peer_addr().ok();
                if let Err(e) = answer(stream, shared) {
                    tracing::debug!("metrics endpoint: {peer:?}: {e}");
                }
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("metrics endpoint: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Metrics,
    NotFound,
    MethodNotAllowed,
    BadRequest,
    TooLarge,
}

/// Reads one request head from `stream` and writes the answer.
fn answer(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let ask = match read_head(&mut stream) {
        Ok(Some(head)) => parse(&head),
        Ok(None) => Ask::TooLarge,
        // Closed or silent before the head ended: a 400 if it still reads.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ask::BadRequest
        }
        Err(e) => return Err(e),
    };
    let (status, body, extra) = match ask {
        Ask::Metrics => match shared.metrics_text() {
            Ok(text) => ("200 OK", text, ""),
            Err(e) => ("500 Internal Server Error", format!("encoding the metrics failed: {e}\n"), ""),
        },
        Ask::NotFound => ("404 Not Found", "not found: the metrics are at /metrics\n".into(), ""),
        Ask::MethodNotAllowed => ("405 Method Not Allowed", "only GET is served\n".into(), "Allow: GET\r\n"),
        Ask::BadRequest => ("400 Bad Request", "bad request\n".into(), ""),
        Ask::TooLarge => {
            ("431 Request Header Fields Too Large", format!("request head over {MAX_REQUEST_BYTES} bytes\n"), "")
        }
    };
    let content_type =
        if ask == Ask::Metrics && status.starts_with("200") { CONTENT_TYPE } else { "text/plain; charset=utf-8" };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()?;
    // Let the peer read everything before the close (no RST over unread request bytes).
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Reads up to the end of the request head (a blank line); `None` when it is longer than
/// [`MAX_REQUEST_BYTES`].
///
/// Errors: `UnexpectedEof` when the peer closed first; a read timeout (`WouldBlock` /
/// `TimedOut`) after [`READ_TIMEOUT`] of silence; other read errors.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head_end(&head) {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() > MAX_REQUEST_BYTES {
            return Ok(None);
        }
    }
}

/// Where the head ends (the index of its blank line), `\r\n\r\n` or a bare `\n\n`.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the request line of `head` asks for.
fn parse(head: &[u8]) -> Ask {
    let Ok(text) = std::str::from_utf8(head) else { return Ask::BadRequest };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ask::BadRequest;
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") || method.is_empty() || !target.starts_with('/') {
        return Ask::BadRequest;
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    match (method, path) {
        ("GET", "/metrics") => Ask::Metrics,
        ("GET", _) => Ask::NotFound,
        _ => Ask::MethodNotAllowed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_lines() {
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nHost: x"), Ask::Metrics);
        assert_eq!(parse(b"GET /metrics?x=1 HTTP/1.0"), Ask::Metrics);
        assert_eq!(parse(b"GET / HTTP/1.1"), Ask::NotFound);
        assert_eq!(parse(b"GET /metricsx HTTP/1.1"), Ask::NotFound);
        assert_eq!(parse(b"POST /metrics HTTP/1.1"), Ask::MethodNotAllowed);
        assert_eq!(parse(b"GET /metrics"), Ask::BadRequest);
        assert_eq!(parse(b"GET /metrics HTTP/2.0"), Ask::BadRequest);
        assert_eq!(parse(b"GET metrics HTTP/1.1"), Ask::BadRequest);
        assert_eq!(parse(b"GET  /metrics HTTP/1.1"), Ask::BadRequest);
        assert_eq!(parse(b"\xff\xfe"), Ask::BadRequest);
        assert_eq!(parse(b""), Ask::BadRequest);
    }

    #[test]
    fn finds_the_end_of_the_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nbody"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
