//! [`BrokerError`]: the errors of starting, configuring and stopping the broker (the broker
//! layer's `thiserror` enum). The Kafka error codes the broker answers requests with are
//! another matter: they live in [`errors`](super::errors).

use std::io;
use std::net::SocketAddr;

use crate::log::LogError;

/// Errors starting or stopping the broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// Binding the listen address failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A thread of the broker (acceptor, network, io, purgatory timer, group coordinator) could
    /// not be started.
    #[error("starting the {what} thread(s): {source}")]
    Thread {
        /// Which threads.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Opening or closing the log directory failed.
    #[error("log directory: {source}")]
    Log {
        /// The cause.
        #[from]
        source: LogError,
    },
    /// The configured read path cannot run here (never a silent fallback).
    #[error("read path: {source}")]
    ReadPath {
        /// The cause.
        #[source]
        source: crate::read_path::CreateError,
    },
    /// The server model cannot run here, or cannot run the configured read path (never a
    /// silent fallback).
    #[error(transparent)]
    ServerModel(#[from] crate::broker::server_model::ModelUnsupported),
    /// A broker config (`-X key=value`) is unknown or invalid.
    #[error("invalid broker config {key}={value}: {reason}")]
    Config {
        /// The Kafka config name.
        key: String,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
}
