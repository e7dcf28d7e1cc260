//! The machine this process runs on ([`Machine`]: CPUs, kernel, architecture, CPU model,
//! memory, io_uring) and this process's resident memory ([`rss_bytes`]), read from `/proc` and
//! `uname`-like sources, for both the results of a run (`bench::results`, the `machine` object)
//! and the broker's metrics endpoint (`broker::metrics_registry`): one reader, so the two never
//! describe the same machine differently. [`Machine::differences`] says in which fields two
//! descriptions differ (`fetchbench compare` and `fetchbench report` say so when results come
//! from different machines).
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

    /// Every field as (name, value as shown to a reader), in a fixed order: `cpu_model`
    /// (`unknown` when empty), `nproc`, `memory` (GiB, one decimal, from `memory_bytes`;
    /// `unknown` for 0), `kernel`, `arch`, `io_uring` (`yes`/`no`). The names are the results
    /// file's (`memory` for `memory_bytes`).
    pub fn fields(&self) -> [(&'static str, String); 6] {
        let or_unknown = |s: &str| if s.is_empty() { "unknown".to_string() } else { s.to_string() };
        let memory = if self.memory_bytes == 0 {
            "unknown".to_string()
        } else {
            format!("{:.1} GiB", self.memory_bytes as f64 / (1u64 << 30) as f64)
        };
        [
            ("cpu_model", or_unknown(&self.cpu_model)),
            ("nproc", self.nproc.to_string()),
            ("memory", memory),
            ("kernel", or_unknown(&self.kernel)),
            ("arch", or_unknown(&self.arch)),
            ("io_uring", if self.io_uring { "yes" } else { "no" }.to_string()),
        ]
    }

    /// The fields that tell machines apart in which `self` and `other` differ, as (name,
    /// `self`'s value, `other`'s value) in the order of [`Machine::fields`]: the CPU model, CPU
    /// count, memory, kernel and architecture, compared as shown there (memory to 0.1 GiB:
    /// `MemTotal` moves by a few MiB between kernels on one machine). Empty for the same
    /// machine. `io_uring` is left out: whether a ring could be created depends on the process's
    /// sandbox (seccomp, `io_uring_disabled`) as much as on the machine.
    pub fn differences(&self, other: &Machine) -> Vec<(&'static str, String, String)> {
        self.fields()
            .into_iter()
            .zip(other.fields())
            .filter(|((name, a), (_, b))| *name != "io_uring" && a != b)
            .map(|((name, a), (_, b))| (name, a, b))
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_field_that_differs() {
        let a = Machine {
            nproc: 2,
            kernel: "6.1.0".into(),
            arch: "x86_64".into(),
            cpu_model: "Example CPU".into(),
            memory_bytes: 24 << 30,
            io_uring: true,
        };
        assert!(a.differences(&a.clone()).is_empty());
        // A few MiB of MemTotal is the same machine.
        assert!(a.differences(&Machine { memory_bytes: (24 << 30) - (3 << 20), ..a.clone() }).is_empty());
        let b = Machine { nproc: 8, cpu_model: "Other CPU".into(), memory_bytes: 0, ..a.clone() };
        assert_eq!(
            a.differences(&b),
            [
                ("cpu_model", "Example CPU".to_string(), "Other CPU".to_string()),
                ("nproc", "2".to_string(), "8".to_string()),
                ("memory", "24.0 GiB".to_string(), "unknown".to_string()),
            ]
        );
        let c = Machine { kernel: "6.12.0".into(), io_uring: false, ..a.clone() };
        let names: Vec<&str> = a.differences(&c).iter().map(|d| d.0).collect();
        assert_eq!(names, ["kernel"], "io_uring is not the machine");
        assert!(a.differences(&Machine { io_uring: false, ..a.clone() }).is_empty());
        assert_eq!(a.fields()[5], ("io_uring", "yes".to_string()));
    }
}
