//! A planted cost on the fetch path, for calibrating a performance gate (issue 29): after each
//! Fetch response the thread that wrote it busy-spins for a fixed time per MiB of record bytes
//! it moved ([`BrokerConfig::planted_fetch_cost_ns_per_mib`](super::BrokerConfig)), under both
//! server models. A known, repeatable extra CPU cost per byte served: `scripts/gate-calibration.sh`
//! sizes it to a share of a path's broker CPU per GB and checks that `scripts/ci-gate.sh` flags it.
//!
//! Off by default (0) and impossible to enable by accident: it is no `-X` / `server.properties`
//! key and no dynamic config; only the harness's embedded broker sets it, and only from the
//! environment variable [`ENV`], and a run that does says so in its notes.

use std::time::{Duration, Instant};

/// The environment variable `fetchbench run` reads the planted cost from: microseconds of spin
/// per MiB of record bytes served (a decimal number, e.g. `88.5`).
pub const ENV: &str = "FETCHBENCH_PLANTED_FETCH_COST_US_PER_MIB";

/// The spin for `bytes` record bytes at `ns_per_mib` nanoseconds per MiB (2^20 bytes).
pub(crate) fn spin_time(ns_per_mib: u64, bytes: u64) -> Duration {
    Duration::from_nanos(((ns_per_mib as u128 * bytes as u128) >> 20).min(u64::MAX as u128) as u64)
}

/// Busy-spins the calling thread for [`spin_time`] (`ns_per_mib` 0: returns at once). The
/// thread stays on its CPU (no sleep), so the time is counted as the broker's user CPU.
pub(crate) fn spin(ns_per_mib: u64, bytes: u64) {
    if ns_per_mib == 0 || bytes == 0 {
        return;
    }
    let until = Instant::now() + spin_time(ns_per_mib, bytes);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Parses [`ENV`]'s value: microseconds per MiB (>= 0, finite) to nanoseconds per MiB.
///
/// Errors: a message naming the variable and the value.
pub fn parse_env_value(value: &str) -> Result<u64, String> {
    match value.trim().parse::<f64>() {
        Ok(us) if (0.0..1e9).contains(&us) => Ok((us * 1e3).round() as u64),
        _ => Err(format!("{ENV}={value:?}: expected microseconds per MiB, a number from 0")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spin_is_proportional_to_the_bytes() {
        assert_eq!(spin_time(1_000, 1 << 20), Duration::from_micros(1));
        assert_eq!(spin_time(88_500, 3 << 20), Duration::from_nanos(265_500));
        assert_eq!(spin_time(1_000, 512 << 10), Duration::from_nanos(500));
        assert_eq!(spin_time(0, 1 << 30), Duration::ZERO);
        // The spin takes at least its time.
        let t = Instant::now();
        spin(2_000_000, 1 << 20);
        assert!(t.elapsed() >= Duration::from_millis(2));
    }

    #[test]
    fn the_environment_value_is_microseconds_per_mib() {
        assert_eq!(parse_env_value("88.5"), Ok(88_500));
        assert_eq!(parse_env_value("0"), Ok(0));
        for bad in ["", "-1", "NaN", "inf", "10us"] {
            let e = parse_env_value(bad).unwrap_err();
            assert!(e.contains(ENV), "{e}");
        }
    }
}
