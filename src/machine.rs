//! The machine this process runs on ([`Machine`]: CPUs, kernel, architecture, CPU model,
//! memory, io_uring) and this process's resident memory ([`rss_bytes`]), read from `/proc` and
//! `uname`-like sources, for both the results of a run (`bench::results`, the `machine` object)
//! and the broker's metrics endpoint (`broker::metrics_registry`): one reader, so the two never
//! describe the same machine differently.
//!
//! Layering: uses `read_path` (the io_uring probe) only; used by `broker`, `bench` and `main`.

use serde::{Deserialize, Serialize};

use crate::read_path::ReadPathKind;

/// Facts about the machine, as a results file records them (`machine` of
/// [`crate::bench::results`]) and the broker's metrics endpoint shows them
/// (`fetchbench_machine_info`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// CPUs this process could use.
    pub nproc: u64,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// The CPU's model name (`/proc/cpuinfo`), empty when unknown.
    pub cpu_model: String,
    /// Total memory (`MemTotal` of `/proc/meminfo`), bytes; 0 when unknown.
    pub memory_bytes: u64,
    /// Whether an io_uring could be created here (the `uring-splice` read path's probe).
    pub io_uring: bool,
}

impl Machine {
    /// The machine this process runs on.
    pub fn current() -> Machine {
        let kernel =
            std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default();
        let nproc = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim()))
            .unwrap_or_default()
            .to_string();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        Machine {
            nproc: nproc as u64,
            kernel,
            arch: std::env::consts::ARCH.to_string(),
            cpu_model,
            memory_bytes,
            io_uring: ReadPathKind::UringSplice.probe().is_ok(),
        }
    }
}

/// The resident set size of this process now (`VmRSS` of `/proc/self/status`, proc(5)), bytes;
/// 0 when unreadable.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}
