//! Integration tests, one binary to keep link time down. Each module owns one area.
//!
//! Tests that read the real corpus (`../shared/corpus`, or `FETCHBENCH_CORPUS`) fail loudly when
//! it is missing in CI (`CI` set) and skip with a printed notice elsewhere.

mod batch_corpus;
mod bench_compare;
mod bench_drain;
mod bench_kcat;
mod bench_prodmix;
mod bench_run;
mod broker;
mod broker_apis;
mod broker_metrics;
mod broker_threads;
mod common;
mod consume_cli;
mod consumer;
mod consumer_offsets_corpus;
mod consumer_positions;
mod damaged_files;
mod disk_full;
mod drain_consumer;
mod dump_cli;
mod dynamic_config;
mod fetch_response;
mod group_backoff;
mod group_churn;
mod group_clients;
mod groups;
mod idempotence;
mod index_corpus;
mod kcat;
mod layering;
mod log_engine;
mod log_engine_bomb;
mod metrics_endpoint;
mod producer;
mod producer_txn;
mod protocol_corpus;
mod python_clients;
mod read_paths;
mod remote_run;
mod report;
mod serve_corpus;
mod serve_process;
mod transactions;
mod two_hosts;
mod txn_clients;
mod txn_log;
mod uring_model;
