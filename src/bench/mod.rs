//! The benchmark harness (issue 7): workload files ([`workload`]), latency histograms
//! ([`histogram`]), the results JSON schema ([`results`]) and comparing two results files
//! ([`compare`], `fetchbench compare`).
//!
//! The runner that turns a workload into a results file builds on these.

pub mod compare;
pub mod histogram;
pub mod results;
pub mod workload;
