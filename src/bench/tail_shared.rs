//! What the threads of a tail phase share, whichever client the consumer members use
//! (fetchbench's own in [`super::tail`], kcat processes in [`super::kcat`]): the phase's state
//! ([`TailShared`]), what each member hands back ([`TailMemberReport`]), the clock of the send,
//! intended and receive times ([`mono_ns`]) and the record headers that carry them for clients
//! that cannot hand back value bytes ([`SENT_HEADER`], [`INTENDED_HEADER`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::histogram::LatencyRecorder;
use crate::metrics::Latency;

/// Nanoseconds on the process's monotonic clock (`Instant`, from the first call): the clock
/// of the send, intended and receive times of the tail phase.
pub(crate) fn mono_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// State shared by the threads of one tail phase. A consumer member (whatever its client):
/// once it is positioned at the log end of its partitions, adds 1 to `ready` (the producers
/// start when every member did); then adds the records it receives to `received[group]`
/// (and their value bytes to `delivered_bytes`),
/// records those whose intended time is inside `window` in its [`TailMemberReport`], and ends
/// when `done` (or `failed`) is set. On an error it sets `failed`.
pub(crate) struct TailShared {
    /// Per member: (group, generation, partitions assigned), for the stability check.
    pub members: Mutex<Vec<(usize, i32, usize)>>,
    /// Groups found stable.
    pub stable: AtomicUsize,
    /// Number of groups.
    pub groups: usize,
    /// Set by whoever fails: everyone stops.
    pub failed: AtomicBool,
    /// Members at the log end, ready for the producers.
    pub ready: AtomicUsize,
    /// The producers' schedule start (mono ns); 0 until they start.
    pub start_ns: AtomicU64,
    /// Records acknowledged by the producers once they are done; u64::MAX before.
    pub produced: AtomicU64,
    /// Records received per group.
    pub received: Vec<AtomicU64>,
    /// Value bytes received (all groups): the attribution sampler's counter
    /// ([`super::attribution`]).
    pub delivered_bytes: std::sync::Arc<AtomicU64>,
    /// Set when every group has every record (or on failure / interrupt): members close.
    pub done: AtomicBool,
    /// The window, as intended-time bounds (mono ns): `[window.0, window.1)`.
    pub window: (AtomicU64, AtomicU64),
}

/// What a tail consumer member hands back.
#[derive(Default)]
pub(crate) struct TailMemberReport {
    /// End-to-end latencies of the window's records.
    pub latency: LatencyRecorder,
    /// Durations of the polls that returned records (client-side).
    pub polls: Latency,
    /// Records of the window received.
    pub window_records: u64,
    /// Their value bytes.
    pub window_value_bytes: u64,
}

/// Consumer members of one tail phase, one thread each, as handles to join.
pub(crate) type TailMembers = Vec<std::thread::JoinHandle<anyhow::Result<TailMemberReport>>>;

/// Record header with the actual send time (decimal mono ns) when `stamp_headers` is on.
pub(crate) const SENT_HEADER: &str = "fetchbench.sent";
/// Record header with the intended send time (decimal mono ns) when `stamp_headers` is on.
pub(crate) const INTENDED_HEADER: &str = "fetchbench.intended";
