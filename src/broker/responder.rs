//! [`Responder`]: the right to answer one request on one connection, and the io threads' read
//! paths.
//!
//! The io thread that decodes a request makes its Responder and hands it to the handler
//! ([`dispatch`](super::handler::dispatch::dispatch)). A handler that can answer at once calls
//! [`Responder::send`]; one that must wait (a Fetch short of `min_bytes`) parks the Responder
//! in the [`purgatory`](super::purgatory) and returns, and whichever io thread completes the
//! operation sends it. Sending writes the response on the calling thread (always an io thread:
//! completions run on the io pool), records the Fetch metrics and the request's total time and
//! read path counters for the metrics endpoint ([`super::metrics_registry`]), then unmutes the connection so its
//! next request is read. Dropping a Responder unsent closes the connection (a handler that
//! panicked, a waiting request whose client went away).
//!
//! Under `server.model=uring` the Responder holds a [`UringConn`](super::uring::mailbox::UringConn)
//! instead ([`ConnHandle`]): [`Responder::send`] writes nothing, it posts the response with the
//! request's Fetch bookkeeping (received time, consumer fetch, in-flight guard) to the
//! connection's core, which writes it asynchronously on its ring, then records the latency,
//! drops the guard and unmutes (see [`super::uring`]). Dropping it unsent posts a close.
//!
//! ## Read paths per io thread
//!
//! A Fetch response's record sets move through the calling io thread's own
//! [`AnyReadPath`] of the broker's current kind (`read.path`, changed at runtime by
//! IncrementalAlterConfigs:
//! [`DynamicConfig::read_path`](super::dynamic_config::DynamicConfig::read_path)), made at the first Fetch that thread answers
//! and made again at the first Fetch after the kind changed (never a fallback: a path that
//! cannot be made closes that connection, with the reason logged, and the next Fetch tries
//! again). What each path moved is counted per kind
//! ([`BrokerMetrics::record_transfers`](super::metrics_registry::BrokerMetrics::record_transfers)).
//! A path's resources, e.g. `uring-splice`'s ring and pipe, are thus
//! held per io thread (`num.io.threads` of them), no longer per connection.
//!
//! ## Writes
//!
//! The connection is muted, so its io thread is the only one touching the socket, which is
//! blocking with `SO_SNDTIMEO` = [`SEND_TIMEOUT`]: a plain write that moves no byte for that long
//! fails (`TimedOut`) and the connection is closed; the read paths wait out `EAGAIN` for
//! writability instead (their contract, [`ReadPath::transfer`]),
//! and a peer that takes a few bytes now and then would restart that timer at every send anyway.
//! So the whole response write is bounded, by the same time: past it the
//! [`write_deadline`](super::write_deadline) watchdog closes the connection and the write fails
//! at once. A client that stops reading holds an io thread for at most [`SEND_TIMEOUT`] (30 s,
//! the Kafka clients' default `request.timeout.ms`: they give up on the request by then anyway). A peer that hung up while its request was handled
//! still gets the write (it may only have shut down its sending side), and the requests it sent
//! before are still read and answered; its end of stream then closes the connection.

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::RequestKind;

use super::conn_handle::ConnHandle;
use super::connection::{is_disconnect, Connection};
use super::io_pool::Job;
use super::metrics_registry::RequestName;
use super::request_metrics::FetchInFlight;
use super::response::Response;
use super::shared::Shared;
use super::uring::mailbox::FetchContext;
use super::write_deadline::{WriteTarget, SEND_TIMEOUT};
use crate::protocol::frame::DecodedRequest;
use crate::read_path::{AnyReadPath, ReadPath};

thread_local! {
    /// This io thread's read path, made at its first Fetch response.
    static READ_PATH: RefCell<Option<AnyReadPath>> = const { RefCell::new(None) };
}

/// The right to answer ONE request on one connection (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Responder {
    shared: Arc<Shared>,
    conn: ConnHandle,
    correlation_id: i32,
    api_version: i16,
    /// When the request's frame was completely read (Kafka's TotalTimeMs starts there).
    received: Instant,
    /// A Fetch from a consumer: its total time is recorded.
    consumer_fetch: bool,
    /// The request's name for the metrics endpoint's total-time histograms (`None`: answered
    /// undecoded, not recorded there).
    api: Option<RequestName>,
    /// Set for every Fetch: counted in flight until answered or given up.
    in_flight: Option<FetchInFlight>,
    sent: bool,
}

/// How a response write ended short of success.
enum WriteEnd {
    Close,
    Io(io::Error),
}

impl Responder {
    /// The Responder of `request`, read from `conn` at `received`. A Fetch is counted in
    /// flight from now on.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        conn: ConnHandle,
        request: &DecodedRequest,
        received: Instant,
    ) -> Responder {
        let mut responder = Responder::for_correlation_id(shared, conn, request.correlation_id(), received);
        responder.api_version = request.api_version();
        if matches!(request.body, RequestKind::Fetch(_)) {
            responder.consumer_fetch = is_consumer_fetch(request);
            responder.in_flight = Some(shared.fetch_in_flight());
        }
        responder.api = Some(RequestName::new(request.api_key, responder.consumer_fetch));
        responder
    }

    /// The Responder of a request known only by its correlation id (one that could not be
    /// decoded but is answered, as ApiVersions at an unknown version).
    pub(crate) fn for_correlation_id(
        shared: &Arc<Shared>,
        conn: ConnHandle,
        correlation_id: i32,
        received: Instant,
    ) -> Responder {
        Responder {
            shared: Arc::clone(shared),
            conn,
            correlation_id,
            api_version: 0,
            received,
            consumer_fetch: false,
            api: None,
            in_flight: None,
            sent: false,
        }
    }

    /// The correlation id to echo.
    pub(crate) fn correlation_id(&self) -> i32 {
        self.correlation_id
    }

    /// The client's address.
    pub(crate) fn peer(&self) -> std::net::SocketAddr {
        self.conn.peer()
    }

    /// The broker this request came to.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether the connection is gone: its peer hung up (the network thread noticed) or the
    /// broker closed it. A waiting request of such a connection is dropped, not answered.
    #[allow(dead_code)] // the DESIGN contract; the coordinator's delayed operations use it
    pub(crate) fn is_closed(&self) -> bool {
        self.conn.is_gone()
    }

    /// A handle that tells whether this Responder's connection is gone ([`Self::is_closed`])
    /// without holding the Responder (for a delayed operation that keeps its Responder behind a
    /// lock).
    pub(crate) fn connection_probe(&self) -> ConnectionProbe {
        ConnectionProbe(self.conn.clone())
    }

    /// Runs `job` on the io pool of `shared` (completions of delayed operations).
    #[allow(dead_code)] // the DESIGN contract; the coordinator's delayed operations use it
    pub(crate) fn submit(shared: &Shared, job: Job) {
        shared.io_pool().submit(job);
    }

    /// Writes `response` (nothing for [`Response::None`], a close for [`Response::Close`]) on
    /// the calling thread, records the Fetch metrics, and unmutes the connection; on a write
    /// error, or when the peer hung up, closes it instead. Errors are logged with the peer.
    ///
    /// Under `server.model=uring` the response goes to the connection's core instead, which
    /// does all of this on its ring (see the [module docs](self)).
    pub(crate) fn send(mut self, response: Response) {
        self.sent = true;
        let conn = match &self.conn {
            ConnHandle::Threaded(conn) => Arc::clone(conn),
            ConnHandle::Uring(conn) => {
                if conn.is_closed() {
                    tracing::debug!(
                        "{}: connection closed before the response to correlation id {}",
                        conn.peer(),
                        self.correlation_id
                    );
                    return;
                }
                let context = FetchContext {
                    received: self.received,
                    consumer_fetch: self.consumer_fetch,
                    api: self.api,
                    in_flight: self.in_flight.take(),
                };
                conn.respond(response, context);
                return;
            }
        };
        let peer = conn.peer();
        if conn.is_closed() {
            tracing::debug!("{peer}: connection closed before the response to correlation id {}", self.correlation_id);
            return;
        }
        let answers = !matches!(response, Response::None | Response::Close);
        let with_records = matches!(&response, Response::Fetch(f) if f.record_bytes() > 0);
        // The whole write is bounded: past its deadline the watchdog closes the connection.
        let deadline = self.shared.write_deadlines().begin(Arc::clone(&conn) as Arc<dyn WriteTarget>);
        let written = write_response(&self.shared, &conn, response);
        drop(deadline);
        if answers && written.is_ok() {
            let total = self.received.elapsed();
            if self.consumer_fetch {
                self.shared.record_fetch_latency(total, with_records);
            }
            if let Some(api) = self.api {
                self.shared.metrics().record_request(api, total);
            }
        }
        // Out of flight before the next request can be read.
        self.in_flight = None;
        match written {
            // Also when the peer hung up: what it sent before is still read, then its end.
            Ok(()) => conn.unmute(),
            Err(WriteEnd::Close) => {
                tracing::info!("{peer}: closing after a request that cannot be answered");
                conn.close();
            }
            // A client that goes away mid-answer (a closed consumer) is routine.
            Err(WriteEnd::Io(e)) if is_disconnect(&e) => {
                tracing::debug!("{peer}: writing a response: {e}; closing");
                conn.close();
            }
            Err(WriteEnd::Io(e)) => {
                tracing::warn!("{peer}: writing a response: {e}; closing");
                conn.close();
            }
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.sent {
            if !self.conn.is_gone() {
                tracing::debug!(
                    "{}: the request with correlation id {} was given up unanswered; closing",
                    self.conn.peer(),
                    self.correlation_id
                );
            }
            self.conn.close();
        }
    }
}

/// Tells whether a connection is gone (see [`Responder::connection_probe`]).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionProbe(ConnHandle);

impl ConnectionProbe {
    /// Whether the peer hung up or the broker closed the connection.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.is_gone()
    }
}

/// Whether `request` is a Fetch from a consumer: `replica_id` (below v15) and
/// `replica_state.replica_id` (v15+, KIP-903) both negative. The field a version does not carry
/// decodes as its default, -1, so one test covers every version (Kafka's `FetchRequest.isFromFollower`
/// and the `FetchConsumer` / `FetchFollower` split of `RequestMetrics`).
fn is_consumer_fetch(request: &DecodedRequest) -> bool {
    match &request.body {
        RequestKind::Fetch(r) => r.replica_id.0 < 0 && r.replica_state.replica_id.0 < 0,
        _ => false,
    }
}

fn write_response(shared: &Shared, conn: &Connection, response: Response) -> Result<(), WriteEnd> {
    let timed_out = |e: io::Error| {
        if e.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer took no byte for {}s (SO_SNDTIMEO)", SEND_TIMEOUT.as_secs()),
            )
        } else {
            e
        }
    };
    match response {
        Response::None => Ok(()),
        Response::Close => Err(WriteEnd::Close),
        Response::Encoded(bytes) => {
            let mut stream = conn.stream();
            stream.write_all(&bytes).map_err(|e| WriteEnd::Io(timed_out(e)))
        }
        Response::Fetch(frame) => READ_PATH.with_borrow_mut(|path| {
            // The broker's current read path (`read.path`, dynamic): one atomic load; a thread
            // whose path is of another kind makes a new one.
            let kind = shared.dynamic_config().read_path();
            if path.as_ref().is_none_or(|p| p.kind() != kind) {
                *path = None;
                let created = kind.create(&shared.config.read_path_config).map_err(|e| {
                    tracing::error!("cannot create read path {kind}: {e}");
                    WriteEnd::Close
                })?;
                *path = Some(created);
            }
            let path = path.as_mut().expect("created above");
            let written = frame.write_to(conn.fd(), path);
            // What the path moved, also of a write that failed part way.
            let stats = path.take_stats();
            shared.metrics().record_transfers(path.name(), &stats);
            crate::broker::planted::spin(shared.config.planted_fetch_cost_ns_per_mib, stats.bytes);
            written.map(|_| ()).map_err(|e| WriteEnd::Io(timed_out(e)))
        }),
    }
}
