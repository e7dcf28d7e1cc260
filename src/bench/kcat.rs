//! The `librdkafka` client of the harness: consumers are `kcat` processes (librdkafka's
//! command-line client) in balanced consumer groups (`kcat -G`). Not implemented in this
//! commit: both phases refuse with an error naming the key.

use std::sync::Arc;

use super::catch_up::Target;
use super::results::PathResult;
use super::tail::{TailMembers, TailShared};

/// Catch-up phase with kcat consumers. Errors: always (not implemented yet).
pub(crate) fn catch_up(_t: &Target<'_>) -> anyhow::Result<(PathResult, Vec<String>)> {
    anyhow::bail!("client: librdkafka is not supported yet")
}

/// Tail-phase consumer members as kcat processes. Errors: always (not implemented yet).
pub(crate) fn tail_members(_t: &Target<'_>, _sh: &Arc<TailShared>) -> anyhow::Result<TailMembers> {
    anyhow::bail!("client: librdkafka is not supported yet")
}
