//! The benchmark harness: `fetchbench run` / `fetchbench sweep` ([`run`]) turn workload files
//! ([`workload`]) into results files ([`results`], versioned JSON with full HdrHistograms
//! ([`crate::metrics::Latency`]; recording with coordinated-omission correction and the
//! open-loop schedule: [`histogram`]), CSV and an SVG chart ([`chart`])), measured per server model and read path
//! (`server_models` x `read_paths`) against an embedded broker or an external cluster: the backlog ([`backlog`]), the catch-up phase
//! ([`catch_up`]), the tail phase with end-to-end latency ([`tail`]; what its threads share,
//! whichever client: [`tail_shared`]), both at once ([`mixed`]), librdkafka consumers as kcat
//! processes ([`kcat`]), resource accounting and the page cache ([`usage`]), this machine's
//! limits ([`limits`]), the broker behind `--bootstrap` and its metrics endpoint ([`remote`]),
//! and what limited each measured interval ([`attribution`]: a sampler of per-CPU and per-role
//! CPU beside every measured interval, `bound_by` per results entry, the warning a
//! client-bound figure carries).
//!
//! `fetchbench read-paths` ([`read_paths`]) is the harness's loopback mode: each read path
//! alone moving a file to an in-process loopback receiver ([`loopback`]), no broker, reported
//! as a table or as a results document of the same schema (phase `loopback`).
//!
//! `fetchbench compare` ([`compare`]) sets two results files side by side; repeated runs are
//! summarised and tested with [`stats`]. `fetchbench report` ([`report`]) makes one
//! self-contained HTML page of any number of results files: the runs side by side, their
//! tables, ratios to `copy` and charts.

pub mod attribution;
pub(crate) mod backlog;
pub(crate) mod catch_up;
pub(crate) mod chart;
pub mod compare;
pub mod counters;
pub(crate) mod histogram;
pub(crate) mod kcat;
pub(crate) mod limits;
pub mod loopback;
pub(crate) mod mixed;
pub mod read_paths;
pub(crate) mod remote;
pub mod report;
pub mod results;
pub mod run;
pub(crate) mod stats;
pub(crate) mod tail;
pub(crate) mod tail_shared;
pub mod usage;
pub mod workload;
