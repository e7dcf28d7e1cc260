//! One blocking connection to a Kafka broker: size-prefixed request frames out, responses matched
//! by correlation id in order (Kafka answers one connection's requests in order).
//!
//! [`KafkaConnection::connect`] sends ApiVersions v3 first (retrying with v0 when the broker
//! answers UNSUPPORTED_VERSION, KIP-511) and keeps the broker's ranges; [`KafkaConnection::version`]
//! then picks, for an API, the highest version that both the broker and the caller support.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::client::consumer::drain::{read_fetch_frame, CrcCheck, DrainError, DrainedResponse, SocketSource};
use crate::protocol::frame::{self, ProtocolError};

/// The largest response frame accepted (Kafka's consumer has no such limit beyond
/// `fetch.max.bytes`; this guards against a corrupt size prefix).
pub(crate) const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// `UNSUPPORTED_VERSION` (35).
const UNSUPPORTED_VERSION: i16 = 35;

/// Errors of a client connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting, reading or writing failed (timeouts included).
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`connecting to 127.0.0.1:9092`).
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A frame could not be encoded or decoded.
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
    /// The broker closed the connection.
    #[error("the broker closed the connection (waiting for the answer to {api:?})")]
    Closed {
        /// The request that was not answered.
        api: ApiKey,
    },
    /// The broker does not serve any version of `api` that this client knows.
    #[error("the broker does not support {api:?} in versions {min}..={max}")]
    Unsupported {
        /// The API.
        api: ApiKey,
        /// Lowest version this client can use.
        min: i16,
        /// Highest version this client can use.
        max: i16,
    },
    /// The broker answered with a Kafka error code where the caller needs success.
    #[error("{context}: Kafka error {code}")]
    Kafka {
        /// The request and object (`DescribeGroups g`).
        context: String,
        /// The Kafka error code.
        code: i16,
    },
}

/// A connection to one broker.
#[derive(Debug)]
pub struct KafkaConnection {
    stream: TcpStream,
    addr: SocketAddr,
    client_id: String,
    next_correlation_id: i32,
    versions: HashMap<i16, (i16, i16)>,
}

impl KafkaConnection {
    /// Connects to `addr` (the first address it resolves to), with `timeout` for the connect
    /// and for every read and write, and negotiates API versions.
    ///
    /// Errors: [`ClientError::Io`], [`ClientError::Protocol`], [`ClientError::Kafka`] when
    /// ApiVersions fails.
    pub fn connect(addr: impl ToSocketAddrs, client_id: &str, timeout: Duration) -> Result<Self, ClientError> {
        let io = |context: String| move |source| ClientError::Io { context, source };
        let addr =
            addr.to_socket_addrs().map_err(io("resolving the bootstrap address".into()))?.next().ok_or_else(|| {
                ClientError::Io {
                    context: "resolving the bootstrap address".into(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
                }
            })?;
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(io(format!("connecting to {addr}")))?;
        stream.set_read_timeout(Some(timeout)).map_err(io(format!("configuring {addr}")))?;
        stream.set_write_timeout(Some(timeout)).map_err(io(format!("configuring {addr}")))?;
        let _ = stream.set_nodelay(true);
        let mut conn = KafkaConnection {
            stream,
            addr,
            client_id: client_id.to_string(),
            next_correlation_id: 0,
            versions: HashMap::new(),
        };
        conn.negotiate()?;
        Ok(conn)
    }

    fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("fetchbench"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut version = 3;
        loop {
            let body = RequestKind::ApiVersions(request.clone());
            let ResponseKind::ApiVersions(r) = self.call(ApiKey::ApiVersions, version, body)? else {
                unreachable!("decode_response returns the requested API")
            };
            if r.error_code == UNSUPPORTED_VERSION && version > 0 {
                version = 0;
                continue;
            }
            if r.error_code != 0 {
                return Err(ClientError::Kafka { context: "ApiVersions".into(), code: r.error_code });
            }
            self.versions = r.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
            return Ok(());
        }
    }

    /// The broker's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the read timeout of the socket (`None`: block forever), e.g. for a JoinGroup that
    /// may wait for the whole rebalance timeout.
    ///
    /// Errors: [`ClientError::Io`].
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|source| ClientError::Io { context: format!("configuring {}", self.addr), source })
    }

    /// Waits up to `timeout` for the answer to a request in flight to start arriving; `true`
    /// when bytes (or the end of the stream) are there to read, so [`Self::receive`] will not
    /// wait for the broker to decide. Used to poll a long-poll Fetch without blocking past a
    /// caller's deadline. The read timeout is restored to `restore` afterwards.
    ///
    /// Errors: [`ClientError::Io`] for socket errors other than the timeout.
    pub fn wait_readable(&self, timeout: Duration, restore: Option<Duration>) -> Result<bool, ClientError> {
        let io = |source| ClientError::Io { context: format!("waiting for {}", self.addr), source };
        self.stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1)))).map_err(io)?;
        let mut byte = [0u8; 1];
        let ready = match self.stream.peek(&mut byte) {
            Ok(_) => true,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => false,
            Err(e) => return Err(io(e)),
        };
        self.stream.set_read_timeout(restore).map_err(io)?;
        Ok(ready)
    }

    /// The highest version of `api` within `ours` (inclusive) that the broker serves.
    ///
    /// Errors: [`ClientError::Unsupported`] when the ranges do not meet.
    pub fn version(&self, api: ApiKey, ours: (i16, i16)) -> Result<i16, ClientError> {
        let codec = api.valid_versions();
        let (min, max) = (ours.0.max(codec.min), ours.1.min(codec.max));
        let unsupported = ClientError::Unsupported { api, min, max };
        let &(broker_min, broker_max) = self.versions.get(&(api as i16)).ok_or(unsupported)?;
        let v = max.min(broker_max);
        if v < min.max(broker_min) {
            return Err(ClientError::Unsupported { api, min, max });
        }
        Ok(v)
    }

    /// Sends a request without waiting for its answer (pipelining); returns its correlation id.
    ///
    /// Errors: [`ClientError::Protocol`] encoding, [`ClientError::Io`] writing.
    pub fn send(&mut self, api: ApiKey, version: i16, body: RequestKind) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let bytes = frame::encode_request(&header, &body)?;
        self.stream
            .write_all(&bytes)
            .map_err(|source| ClientError::Io { context: format!("sending {api:?} to {}", self.addr), source })?;
        Ok(correlation_id)
    }

    /// Reads the answer to the oldest request in flight, which must be `correlation_id`.
    ///
    /// Errors: [`ClientError::Closed`], [`ClientError::Io`] (a read timeout included),
    /// [`ClientError::Protocol`] for an undecodable answer or another correlation id.
    pub fn receive(&mut self, api: ApiKey, version: i16, correlation_id: i32) -> Result<ResponseKind, ClientError> {
        let payload = frame::read_frame(&mut self.stream, MAX_RESPONSE_BYTES)?.ok_or(ClientError::Closed { api })?;
        let decoded = frame::decode_response(payload, api, version)?;
        if decoded.header.correlation_id != correlation_id {
            return Err(ClientError::Io {
                context: format!("reading the answer to {api:?} from {}", self.addr),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("correlation id {} where {correlation_id} was expected", decoded.header.correlation_id),
                ),
            });
        }
        Ok(decoded.body)
    }

    /// Reads the answer to the oldest request in flight, a Fetch of `version` that must be
    /// `correlation_id`, in drain mode ([`crate::client::consumer::drain`]): headers into user
    /// space, record bytes discarded in the kernel except for the batches `crc` checks;
    /// `batch_counter` counts this connection's batches for [`CrcCheck::OneIn`].
    ///
    /// Errors: [`ClientError::Closed`] when the stream ends before a frame, [`ClientError::Io`]
    /// for a read error, a timeout, a malformed frame or another correlation id.
    pub fn receive_fetch_drained(
        &mut self,
        version: i16,
        correlation_id: i32,
        crc: CrcCheck,
        batch_counter: &mut u64,
    ) -> Result<DrainedResponse, ClientError> {
        let context = || format!("reading the answer to Fetch from {}", self.addr);
        let mut src = SocketSource::new(&self.stream);
        let (got, response) = match read_fetch_frame(&mut src, MAX_RESPONSE_BYTES, version, crc, batch_counter) {
            Ok(r) => r,
            Err(DrainError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Closed { api: ApiKey::Fetch })
            }
            Err(DrainError::Io(source)) => return Err(ClientError::Io { context: context(), source }),
            Err(e @ DrainError::Malformed(_)) => {
                return Err(ClientError::Io {
                    context: context(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                })
            }
        };
        if got != correlation_id {
            return Err(ClientError::Io {
                context: context(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("correlation id {got} where {correlation_id} was expected"),
                ),
            });
        }
        Ok(response)
    }

    /// Sends a request and waits for its answer.
    ///
    /// Errors: those of [`Self::send`] and [`Self::receive`].
    pub fn call(&mut self, api: ApiKey, version: i16, body: RequestKind) -> Result<ResponseKind, ClientError> {
        let id = self.send(api, version, body)?;
        self.receive(api, version, id)
    }
}
