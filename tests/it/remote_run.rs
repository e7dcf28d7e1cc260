//! `fetchbench run --bootstrap HOST:PORT --metrics HOST:PORT` (issue 17): against a broker with
//! a metrics endpoint the run switches the broker's read path per combination through
//! IncrementalAlterConfigs, reads the broker's figures from the endpoint, records the broker
//! (configs, endpoint, machine) and sets `read.path` back; an endpoint that answers garbage is
//! said in the notes and no broker figure is made up.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use fetchbench::broker::{Broker, BrokerConfig, BrokerHandle, ServerModel};
use fetchbench::client::admin::{alter_broker_configs, describe_broker_configs, describe_broker_dynamic_configs};
use fetchbench::client::KafkaConnection;
use fetchbench::machine::Machine;
use fetchbench::read_path::ReadPathKind;

use crate::bench_run::{run_ok, write_workload};

/// A broker serving `sendfile` with `metrics.listen=127.0.0.1:0` (as `serve -X` sets it),
/// rebalances at once.
fn start() -> (tempfile::TempDir, BrokerHandle) {
    start_model(ReadPathKind::Sendfile, ServerModel::Threaded)
}

/// [`start`] with read path `kind` under `model`.
fn start_model(kind: ReadPathKind, model: ServerModel) -> (tempfile::TempDir, BrokerHandle) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new("127.0.0.1:0".parse().unwrap(), tmp.path().join("logs"), kind);
    config.server_model = model;
    let props = BTreeMap::from([
        ("metrics.listen".to_string(), "127.0.0.1:0".to_string()),
        ("group.initial.rebalance.delay.ms".to_string(), "0".to_string()),
    ]);
    config.apply_props(&props).unwrap();
    (tmp, Broker::start(config).unwrap())
}

const WORKLOAD: &str = r#"
name = "remote"
catch_up_duration = 0
partitions = 2
backlog = "2MiB"
consumers_per_group = 2
rate = 500
warmup = "200ms"
duration = "1s"
read_paths = ["copy", "mmap"]
"#;

/// The broker's `read.path` as DescribeConfigs reports it.
fn read_path_config(broker: &BrokerHandle) -> Option<String> {
    config(broker, "read.path")
}

/// The broker's config `key` as DescribeConfigs reports it.
fn config(broker: &BrokerHandle, key: &str) -> Option<String> {
    let mut conn = KafkaConnection::connect(broker.local_addr(), "test", Duration::from_secs(10)).unwrap();
    describe_broker_configs(&mut conn, 0).unwrap().get(key).cloned().flatten()
}

/// The broker's per-broker dynamic values (DescribeConfigs' `DYNAMIC_BROKER_CONFIG` entries).
fn dynamic(broker: &BrokerHandle) -> BTreeMap<String, String> {
    let mut conn = KafkaConnection::connect(broker.local_addr(), "test", Duration::from_secs(10)).unwrap();
    describe_broker_dynamic_configs(&mut conn, 0).unwrap()
}

#[test]
fn a_run_with_metrics_switches_the_read_path_and_reports_the_brokers_figures() {
    let (dir, broker) = start();
    let metrics = broker.metrics_addr().expect("metrics.listen set").to_string();
    let bootstrap = broker.local_addr().to_string();
    let workload = write_workload(dir.path(), WORKLOAD);
    let before: Vec<(u64, u64)> = [ReadPathKind::Copy, ReadPathKind::Mmap]
        .iter()
        .map(|k| broker.test_support().read_path_transfers(*k))
        .collect();
    let results = run_ok(
        &workload,
        &dir.path().join("results"),
        &["--bootstrap", &bootstrap, "--metrics", &metrics],
        "the run with --metrics",
    );
    let entries: Vec<(Option<&str>, &str, &str)> =
        results.paths.iter().map(|p| (p.server_model.as_deref(), p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(
        entries,
        [
            (Some("threaded"), "copy", "catch_up"),
            (Some("threaded"), "copy", "tail"),
            (Some("threaded"), "mmap", "catch_up"),
            (Some("threaded"), "mmap", "tail"),
        ],
        "{:#?}",
        results.notes
    );
    // Each path moved the records of its combination on the broker.
    for (kind, (transfers0, bytes0)) in [ReadPathKind::Copy, ReadPathKind::Mmap].iter().zip(before) {
        let (transfers, bytes) = broker.test_support().read_path_transfers(*kind);
        assert!(
            transfers > transfers0 && bytes >= bytes0 + 2 * 1024 * 1024,
            "{kind:?}: {transfers} transfers, {bytes} bytes"
        );
    }
    for p in &results.paths {
        let cpu = p.broker_cpu.user_s_per_gb + p.broker_cpu.sys_s_per_gb;
        assert!(cpu > 0.0, "{} {}: broker CPU from the endpoint: {cpu}", p.read_path, p.phase);
        assert!(p.broker_rss_bytes > 0, "{} {}", p.read_path, p.phase);
        assert!(p.fetch_latency.summary.count > 0, "{} {}: broker-side fetch latency", p.read_path, p.phase);
        assert!(p.fetches_in_flight_at_start.is_some(), "{} {}", p.read_path, p.phase);
    }
    assert_eq!(results.paths[0].records, 2048);
    let record = results.broker.as_ref().expect("the broker is recorded");
    assert_eq!(record.bootstrap, bootstrap);
    assert_eq!(record.broker_id, 0);
    assert_eq!(record.metrics.as_deref(), Some(metrics.as_str()));
    assert_eq!(record.machine.as_ref(), Some(&Machine::current()), "the endpoint's machine_info");
    assert_eq!(record.configs.get("read.path"), Some(&Some("sendfile".to_string())), "as it was when the run started");
    assert_eq!(record.configs.get("server.model"), Some(&Some("threaded".to_string())));
    assert!(
        !results.notes.iter().any(|n| n.contains("broker figures not measured") || n.contains("someone else")),
        "{:#?}",
        results.notes
    );
    assert!(
        results.notes.iter().any(|n| n.contains("broker figures from the metrics endpoint")),
        "{:#?}",
        results.notes
    );
    assert_eq!(read_path_config(&broker).as_deref(), Some("sendfile"), "read.path set back after the run");
    assert_eq!(dynamic(&broker), BTreeMap::new(), "at its level: the run's dynamic value deleted, none left");
}

/// `--metrics` naming another broker's endpoint: right after the first switch the endpoint does
/// not show the path just set, so the run stops with that error (never figures of the wrong
/// process), and the `--bootstrap` broker's read path is set back.
#[test]
fn an_endpoint_of_another_broker_is_found_and_the_run_stops() {
    let (dir, broker) = start();
    let (_other_dir, other) = start_model(ReadPathKind::Splice, ServerModel::Threaded);
    let wrong = other.metrics_addr().expect("metrics.listen set").to_string();
    let workload = write_workload(dir.path(), WORKLOAD);
    let out = crate::bench_run::fetchbench()
        .args(["run", "--no-limits", "--bootstrap", &broker.local_addr().to_string(), "--metrics", &wrong])
        .arg("--results-dir")
        .arg(dir.path().join("results"))
        .arg(&workload)
        .output()
        .unwrap();
    let text = crate::bench_run::text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("it is not that broker's endpoint") && text.contains("read.path splice"), "{text}");
    assert_eq!(read_path_config(&broker).as_deref(), Some("sendfile"), "set back");
    assert_eq!(dynamic(&broker), BTreeMap::new());
    assert_eq!(config(&other, "read.path").as_deref(), Some("splice"), "the other broker untouched");
}

/// Answers every connection with `answer` until the test ends.
fn bad_endpoint(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(n) if n > 0 => request.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let _ = s.write_all(answer);
        }
    });
    addr
}

#[test]
fn an_endpoint_answering_garbage_is_said_and_no_broker_figure_is_made_up() {
    let (dir, broker) = start();
    let garbage = bad_endpoint(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world");
    let bootstrap = broker.local_addr().to_string();
    let workload = write_workload(dir.path(), &WORKLOAD.replace("[\"copy\", \"mmap\"]", "[\"copy\"]"));
    let results = run_ok(
        &workload,
        &dir.path().join("results"),
        &["--bootstrap", &bootstrap, "--metrics", &garbage],
        "the run with a garbage endpoint",
    );
    let notes = results.notes.join("\n");
    assert!(
        notes.contains("broker figures not measured") && notes.contains("not a fetchbench broker's metrics"),
        "{notes}"
    );
    assert!(notes.contains("the broker's machine is not recorded"), "{notes}");
    assert_eq!(results.paths.len(), 2, "{notes}");
    for p in &results.paths {
        assert_eq!(p.read_path, "copy", "the read path is still switched through the admin API");
        assert_eq!((p.broker_cpu.user_s_per_gb, p.broker_cpu.sys_s_per_gb), (0.0, 0.0), "{}", p.phase);
        assert_eq!((p.broker_rss_bytes, p.fetch_latency.summary.count), (0, 0), "{}", p.phase);
        assert!(
            p.mb_per_sec > 0.0 && p.consumer_cpu.user_s_per_gb + p.consumer_cpu.sys_s_per_gb > 0.0,
            "what the run measured itself stands"
        );
    }
    assert_eq!(results.broker.as_ref().and_then(|b| b.machine.as_ref()), None);
    assert!(broker.test_support().read_path_transfers(ReadPathKind::Copy).1 >= 2 * 1024 * 1024);
    assert_eq!(read_path_config(&broker).as_deref(), Some("sendfile"));
}

/// Under `server.model=uring` the run takes the broker's model, and a path the model cannot run
/// (`copy`, a blocking one) is skipped with the broker's own reason, not swapped.
#[test]
fn under_uring_a_path_the_broker_refuses_is_skipped_with_its_reason() {
    if let Err(e) = ServerModel::Uring.probe() {
        assert!(!crate::common::in_ci(), "CI must run the server.model=uring tests: {e}");
        eprintln!("SKIP: server.model=uring: {e}");
        return;
    }
    let (dir, broker) = start_model(ReadPathKind::UringSplice, ServerModel::Uring);
    let metrics = broker.metrics_addr().expect("metrics.listen set").to_string();
    let bootstrap = broker.local_addr().to_string();
    let workload = write_workload(
        dir.path(),
        &WORKLOAD
            .replace("[\"copy\", \"mmap\"]", "[\"copy\", \"uring-read-send\"]")
            .replace("duration = \"1s\"", "phases = [\"catch_up\"]"),
    );
    let results = run_ok(
        &workload,
        &dir.path().join("results"),
        &["--bootstrap", &bootstrap, "--metrics", &metrics],
        "the run against a uring broker",
    );
    let entries: Vec<(Option<&str>, &str, &str)> =
        results.paths.iter().map(|p| (p.server_model.as_deref(), p.read_path.as_str(), p.phase.as_str())).collect();
    assert_eq!(entries, [(Some("uring"), "uring-read-send", "catch_up")], "{:#?}", results.notes);
    assert_eq!(results.workload().unwrap().server_models, [ServerModel::Uring], "the model that served");
    let skipped = results
        .notes
        .iter()
        .find(|n| n.starts_with("read path copy: skipped: the broker refused it"))
        .unwrap_or_else(|| panic!("{:#?}", results.notes));
    assert!(skipped.contains("Invalid value copy for configuration read.path"), "{skipped}");
    assert!(results.paths[0].fetch_latency.summary.count > 0 && results.paths[0].broker_rss_bytes > 0);
    assert!(broker.test_support().read_path_transfers(ReadPathKind::UringReadSend).1 >= 2 * 1024 * 1024);
    assert_eq!(read_path_config(&broker).as_deref(), Some("uring-splice"), "read.path set back");
}

/// `--server-model threaded,uring` with `--metrics` compares the models on the remote broker:
/// `server.model` and `read.path` are switched together per combination, a combination the
/// broker refuses (`uring/sendfile`) is skipped with its reason, and both keys are set back.
#[test]
fn server_models_are_switched_on_the_remote_broker() {
    if let Err(e) = ServerModel::Uring.probe() {
        assert!(!crate::common::in_ci(), "CI must run the server.model=uring tests: {e}");
        eprintln!("SKIP: server.model=uring: {e}");
        return;
    }
    let (dir, broker) = start();
    let metrics = broker.metrics_addr().expect("metrics.listen set").to_string();
    let bootstrap = broker.local_addr().to_string();
    // A per-broker dynamic read.path before the run (the static one is sendfile too): set back
    // as a dynamic value, while server.model, static before, has its dynamic value deleted.
    let mut conn = KafkaConnection::connect(broker.local_addr(), "test", Duration::from_secs(10)).unwrap();
    alter_broker_configs(&mut conn, 0, &[("read.path", Some("sendfile"))]).unwrap();
    let workload = write_workload(
        dir.path(),
        &WORKLOAD
            .replace("[\"copy\", \"mmap\"]", "[\"sendfile\", \"uring-splice\"]")
            .replace("duration = \"1s\"", "phases = [\"catch_up\"]"),
    );
    let results = run_ok(
        &workload,
        &dir.path().join("results"),
        &["--bootstrap", &bootstrap, "--metrics", &metrics, "--server-model", "threaded,uring"],
        "the run comparing models remotely",
    );
    let entries: Vec<(Option<&str>, &str)> =
        results.paths.iter().map(|p| (p.server_model.as_deref(), p.read_path.as_str())).collect();
    assert_eq!(
        entries,
        [(Some("threaded"), "sendfile"), (Some("threaded"), "uring-splice"), (Some("uring"), "uring-splice")],
        "{:#?}",
        results.notes
    );
    assert!(
        results.notes.iter().any(|n| n.starts_with("uring/sendfile: skipped: the broker refused it")),
        "{:#?}",
        results.notes
    );
    for p in &results.paths {
        assert_eq!(p.records, 2048, "{:?}", p.server_model);
        assert!(p.fetch_latency.summary.count > 0, "{:?} {}", p.server_model, p.read_path);
    }
    assert_eq!(results.workload().unwrap().server_models, [ServerModel::Threaded, ServerModel::Uring]);
    assert_eq!(config(&broker, "server.model").as_deref(), Some("threaded"), "server.model set back");
    assert_eq!(read_path_config(&broker).as_deref(), Some("sendfile"), "read.path set back");
    assert_eq!(
        dynamic(&broker),
        BTreeMap::from([("read.path".to_string(), "sendfile".to_string())]),
        "each key at its level"
    );
}
