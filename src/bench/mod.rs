//! The benchmark harness (issue 7): workload files ([`workload`]), latency histograms
//! ([`histogram`]), the results JSON schema ([`results`]) and comparing two results files
//! ([`compare`], `fetchbench compare`).
//!
//! [`run`] (`fetchbench run`) turns a workload into a results file (catch-up phase so far).

pub mod compare;
pub mod histogram;
pub mod results;
pub mod run;
pub mod workload;
