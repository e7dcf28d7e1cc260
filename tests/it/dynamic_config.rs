//! Dynamic broker configs over the wire: DescribeConfigs (broker and topic resources, synonyms,
//! sources, read-only flags), IncrementalAlterConfigs with each of Kafka's refusals (unknown key,
//! read-only key, bad value, APPEND on a non-list key, validate_only, a path the server model
//! cannot run), each leaving the config as it was, and the switch itself: `read.path` altered
//! from copy to sendfile, after which new Fetch responses move through sendfile (the broker's
//! per-path transfer counters) and the records read back byte-identical. Under
//! `server.model=uring` the same between the cores' paths (every core switches, a transfer in
//! flight finishes on its path, a path the model or the cores cannot run is refused). Then
//! confluent-kafka's AdminClient doing the same from Python (tests/python/confluent_configs.py),
//! under both models. `server.model` switched at runtime: new connections move to the new front
//! end, open ones (our client's, and confluent-kafka's producer and consumer) stay on theirs
//! without reconnecting (tests/python/confluent_model_switch.py).

use fetchbench::broker::{BrokerHandle, ServerModel};
use fetchbench::read_path::ReadPathKind;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest, RequestKind, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{batch, fetch, produce, Client};

const BROKER: i8 = 4;
const TOPIC: i8 = 2;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's ConfigSource wire values.
const DYNAMIC_BROKER_CONFIG: i8 = 2;
const DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
const TOPIC_CONFIG: i8 = 1;

fn describe(client: &mut Client, resource_type: i8, name: &str, version: i16) -> DescribeConfigsResult {
    let req = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_include_documentation(version >= 3)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configuration_keys(None)]);
    let ResponseKind::DescribeConfigs(r) =
        client.call(ApiKey::DescribeConfigs, version, RequestKind::DescribeConfigs(req))
    else {
        panic!()
    };
    assert_eq!(r.results.len(), 1);
    r.results.into_iter().next().unwrap()
}

fn entry<'a>(result: &'a DescribeConfigsResult, name: &str) -> &'a DescribeConfigsResourceResult {
    result.configs.iter().find(|c| c.name.as_str() == name).unwrap_or_else(|| panic!("no {name} in {result:?}"))
}

fn value(e: &DescribeConfigsResourceResult) -> &str {
    e.value.as_ref().map(|v| v.as_str()).unwrap_or("<null>")
}

/// (value, source) of each synonym.
fn synonyms(e: &DescribeConfigsResourceResult) -> Vec<(String, i8)> {
    e.synonyms.iter().map(|s| (s.value.as_ref().unwrap().as_str().to_string(), s.source)).collect()
}

/// One op: `(op, key, value)`, op 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
type Op<'a> = (i8, &'a str, Option<&'a str>);

/// Alters broker resource `name` with `ops`; returns its (error code, message).
fn alter(client: &mut Client, name: &str, ops: &[Op<'_>], validate_only: bool) -> (i16, String) {
    let configs = ops
        .iter()
        .map(|(op, key, value)| {
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_config_operation(*op)
                .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
        })
        .collect();
    let req = IncrementalAlterConfigsRequest::default().with_validate_only(validate_only).with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(BROKER)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(configs),
    ]);
    let ResponseKind::IncrementalAlterConfigs(r) =
        client.call(ApiKey::IncrementalAlterConfigs, 1, RequestKind::IncrementalAlterConfigs(req))
    else {
        panic!()
    };
    let r = &r.responses[0];
    (r.error_code, r.error_message.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default())
}

fn read_path_of(client: &mut Client) -> String {
    value(entry(&describe(client, BROKER, "0", 4), "read.path")).to_string()
}

#[test]
fn api_versions_advertise_describe_and_incremental_alter_configs() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    let mut client = Client::connect(broker.local_addr());
    let ResponseKind::ApiVersions(r) =
        client.call(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(ApiVersionsRequest::default()))
    else {
        panic!()
    };
    let range =
        |key: ApiKey| r.api_keys.iter().find(|k| k.api_key == key as i16).map(|k| (k.min_version, k.max_version));
    assert_eq!(range(ApiKey::DescribeConfigs), Some((1, 4)));
    assert_eq!(range(ApiKey::IncrementalAlterConfigs), Some((0, 1)));
    broker.shutdown().unwrap();
}

#[test]
fn describe_configs_reports_broker_and_topic_configs_with_sources_and_synonyms() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    let mut client = Client::connect(broker.local_addr());
    for version in [1, 4] {
        let r = describe(&mut client, BROKER, "0", version);
        assert_eq!(r.error_code, 0, "{r:?}");
        let rp = entry(&r, "read.path");
        assert_eq!(
            (value(rp), rp.config_source, rp.read_only, rp.is_sensitive),
            ("copy", STATIC_BROKER_CONFIG, false, false)
        );
        assert_eq!(synonyms(rp), [("copy".to_string(), STATIC_BROKER_CONFIG)]);
        let model = entry(&r, "server.model");
        assert_eq!((value(model), model.config_source, model.read_only), ("threaded", DEFAULT_CONFIG, false));
        let io = entry(&r, "num.io.threads");
        assert_eq!((value(io), io.read_only), ("8", true));
        let segment = entry(&r, "log.segment.bytes");
        assert_eq!((value(segment), segment.config_source), ("1073741824", DEFAULT_CONFIG));
        if version >= 3 {
            assert_eq!(rp.config_type, 2, "STRING");
            assert_eq!(io.config_type, 3, "INT");
            assert!(rp.documentation.as_ref().is_some_and(|d| d.contains("Fetch")), "{rp:?}");
        }
    }
    // The cluster-default resource lists only dynamic default values: none yet.
    let r = describe(&mut client, BROKER, "", 4);
    assert_eq!((r.error_code, r.configs.len()), (0, 0), "{r:?}");
    // Another broker id, a name that is not an id.
    let r = describe(&mut client, BROKER, "7", 4);
    assert_eq!(r.error_code, INVALID_REQUEST);
    assert_eq!(
        r.error_message.as_ref().map(|m| m.as_str()),
        Some("Unexpected broker id, expected 0 or empty string, but received 7")
    );
    let r = describe(&mut client, BROKER, "x", 4);
    assert_eq!((r.error_code, r.configs.len()), (INVALID_REQUEST, 0));
    // Topics: an unknown one, then one at the broker defaults.
    let r = describe(&mut client, TOPIC, "nope", 4);
    assert_eq!(r.error_code, UNKNOWN_TOPIC_OR_PARTITION, "{r:?}");
    broker.test_support().create_topic("described", 1).unwrap();
    let r = describe(&mut client, TOPIC, "described", 4);
    assert_eq!(r.error_code, 0, "{r:?}");
    let retention = entry(&r, "retention.ms");
    assert_eq!((value(retention), retention.config_source, retention.read_only), ("604800000", DEFAULT_CONFIG, false));
    assert_eq!(retention.synonyms[0].name.as_str(), "log.retention.ms");
    assert_eq!(entry(&r, "cleanup.policy").config_type, 7, "LIST");
    // configuration_keys keeps only the named keys (unknown names left out).
    let req = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(BROKER)
        .with_resource_name(StrBytes::from_static_str("0"))
        .with_configuration_keys(Some(vec![
            StrBytes::from_static_str("read.path"),
            StrBytes::from_static_str("x.y"),
        ]))]);
    let ResponseKind::DescribeConfigs(r) = client.call(ApiKey::DescribeConfigs, 1, RequestKind::DescribeConfigs(req))
    else {
        panic!()
    };
    let names: Vec<&str> = r.results[0].configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["read.path"]);
    assert!(r.results[0].configs[0].synonyms.is_empty(), "include_synonyms false");
    broker.shutdown().unwrap();
}

#[test]
fn describe_configs_reports_a_topic_override() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    let mut client = Client::connect(broker.local_addr());
    let req = kafka_protocol::messages::CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        kafka_protocol::messages::create_topics_request::CreatableTopic::default()
            .with_name(crate::broker::name("overridden"))
            .with_num_partitions(1)
            .with_replication_factor(-1)
            .with_configs(vec![kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("1234")))]),
    ]);
    let ResponseKind::CreateTopics(r) = client.call(ApiKey::CreateTopics, 7, RequestKind::CreateTopics(req)) else {
        panic!()
    };
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
    let r = describe(&mut client, TOPIC, "overridden", 4);
    let retention = entry(&r, "retention.ms");
    assert_eq!((value(retention), retention.config_source), ("1234", TOPIC_CONFIG));
    assert_eq!(synonyms(retention), [("1234".to_string(), TOPIC_CONFIG), ("604800000".to_string(), DEFAULT_CONFIG)]);
    broker.shutdown().unwrap();
}

/// Every refusal leaves `read.path` at `copy`, with nothing stored at either level.
#[test]
fn incremental_alter_configs_refuses_with_kafkas_errors_and_changes_nothing() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    let mut client = Client::connect(broker.local_addr());
    let cases: [(&str, &[Op<'_>], i16, &str); 8] = [
        ("0", &[(0, "no.such.config", Some("1"))], INVALID_CONFIG, "Unknown config name: no.such.config"),
        (
            "0",
            &[(0, "read.path", Some("sendfile")), (0, "server.model", Some("uring"))],
            INVALID_REQUEST,
            "Invalid value sendfile for configuration read.path: server.model=uring cannot run read path sendfile",
        ),
        ("0", &[(0, "num.io.threads", Some("2"))], INVALID_REQUEST, "Cannot update these configs dynamically"),
        ("0", &[(0, "read.path", Some("warp"))], INVALID_REQUEST, "Invalid value warp for configuration read.path"),
        ("0", &[(0, "read.path", Some("null"))], INVALID_REQUEST, "sends zeros"),
        (
            "0",
            &[(2, "read.path", Some("mmap"))],
            INVALID_CONFIG,
            "Config value append is not allowed for config key: read.path",
        ),
        ("7", &[(0, "read.path", Some("mmap"))], INVALID_REQUEST, "Unexpected broker id, expected 0, but received 7"),
        ("b", &[(0, "read.path", Some("mmap"))], INVALID_REQUEST, "Node id must be an integer, but it is: b"),
    ];
    for (name, ops, code, message) in cases {
        let (got, text) = alter(&mut client, name, ops, false);
        assert_eq!(got, code, "{ops:?}: {text}");
        assert!(text.contains(message), "{ops:?}: {text}");
        assert_eq!(read_path_of(&mut client), "copy", "{ops:?} changed read.path");
        assert_eq!(broker.test_support().read_path(), ReadPathKind::Copy);
    }
    assert_eq!(alter(&mut client, "0", &[(0, "read.path", Some("sendfile"))], true), (0, String::new()));
    assert_eq!(read_path_of(&mut client), "copy", "validate_only changed read.path");
    assert_eq!(describe(&mut client, BROKER, "", 4).configs.len(), 0, "nothing at the default level");
    broker.shutdown().unwrap();
}

/// Reads the 200 records of `topic`-0 from offset 0.
fn read_all(client: &mut Client, topic: &str) -> Vec<(i64, String, String)> {
    let (code, hw, records) = fetch(client, topic, 0, 12);
    assert_eq!((code, hw), (0, 200));
    records
}

fn transfers(broker: &BrokerHandle, kind: ReadPathKind) -> u64 {
    broker.test_support().read_path_transfers(kind).0
}

/// Waits (up to 10 s) until `kind` has made at least `min` transfers and returns the count: a
/// response's transfers are counted when its write returns, which may be just after the client
/// read it.
fn transfers_reach(broker: &BrokerHandle, kind: ReadPathKind, min: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = transfers(broker, kind);
        if n >= min || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn altering_read_path_switches_new_fetch_responses_to_the_new_path() {
    let (_tmp, broker) = crate::broker::start(ReadPathKind::Copy);
    broker.test_support().create_topic("switch", 1).unwrap();
    let mut client = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut client, "switch", batch(200), 1), Some((0, 0)));
    let before = read_all(&mut client, "switch");
    assert_eq!(before.len(), 200);
    // One Fetch response, one slice: one transfer, counted once its write returned.
    let copy_before = transfers_reach(&broker, ReadPathKind::Copy, 1);
    assert!(copy_before == 1 && transfers(&broker, ReadPathKind::Sendfile) == 0, "copy: {copy_before}");

    assert_eq!(alter(&mut client, "0", &[(0, "read.path", Some("sendfile"))], false), (0, String::new()));
    assert_eq!(broker.test_support().read_path(), ReadPathKind::Sendfile);
    let metrics = broker.metrics_text().unwrap();
    let info = metrics.lines().find(|l| l.starts_with("fetchbench_broker_info{")).expect("broker_info");
    assert!(info.contains("read_path=\"sendfile\""), "broker_info names another path: {info}");
    let r = describe(&mut client, BROKER, "0", 4);
    let rp = entry(&r, "read.path");
    assert_eq!((value(rp), rp.config_source), ("sendfile", DYNAMIC_BROKER_CONFIG));
    assert_eq!(synonyms(rp), [("sendfile".into(), DYNAMIC_BROKER_CONFIG), ("copy".into(), STATIC_BROKER_CONFIG)]);
    // A second connection, and the first one again: both now go through sendfile.
    let mut other = Client::connect(broker.local_addr());
    assert_eq!(read_all(&mut other, "switch"), before, "records differ after the switch");
    assert_eq!(read_all(&mut client, "switch"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::Sendfile, 2), 2);
    assert_eq!(transfers(&broker, ReadPathKind::Copy), copy_before, "copy moved bytes after the switch");

    // The cluster default under the per-broker value, then DELETE of the per-broker value: the
    // default shows through; DELETE of the default: the static value again.
    assert_eq!(alter(&mut client, "", &[(0, "read.path", Some("mmap"))], false).0, 0);
    assert_eq!(broker.test_support().read_path(), ReadPathKind::Sendfile, "per broker wins");
    let r = describe(&mut client, BROKER, "", 4);
    assert_eq!(r.configs.len(), 1);
    assert_eq!((value(&r.configs[0]), r.configs[0].config_source), ("mmap", DYNAMIC_DEFAULT_BROKER_CONFIG));
    assert_eq!(alter(&mut client, "0", &[(1, "read.path", None)], false).0, 0);
    assert_eq!(broker.test_support().read_path(), ReadPathKind::Mmap);
    assert_eq!(read_all(&mut client, "switch"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::Mmap, 1), 1);
    assert_eq!(alter(&mut client, "", &[(1, "read.path", None)], false).0, 0);
    assert_eq!(read_path_of(&mut client), "copy");
    assert_eq!(read_all(&mut client, "switch"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::Copy, copy_before + 1), copy_before + 1);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Whether a uring broker runs here (a notice when not; in CI a failure).
fn uring_runs() -> bool {
    match ServerModel::Uring.probe() {
        Ok(()) => true,
        Err(e) => {
            assert!(!crate::common::in_ci(), "CI must run the server.model=uring tests: {e}");
            eprintln!("SKIP: server.model=uring: {e}");
            false
        }
    }
}

/// The `read_path` label of the `broker_info` sample of the broker's metrics exposition.
fn info_read_path(broker: &BrokerHandle) -> String {
    let metrics = broker.metrics_text().unwrap();
    let info = metrics.lines().find(|l| l.starts_with("fetchbench_broker_info{")).expect("broker_info");
    let at = info.find("read_path=\"").unwrap_or_else(|| panic!("no read_path label: {info}")) + "read_path=\"".len();
    info[at..].split('"').next().unwrap().to_string()
}

/// Under uring, on two cores: read.path altered uring-splice -> uring-read-send -> uring-send-zc
/// -> (DELETE) uring-splice; after each switch new Fetch responses, on a new connection and on
/// the one that altered (the cores spread them), move through the new path only (the metrics
/// registry's per-path transfer counters), broker_info names it, and the records read back
/// identical.
#[test]
fn under_uring_altering_read_path_switches_every_core() {
    if !uring_runs() {
        return;
    }
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::UringSplice, ServerModel::Uring, |c| {
        c.uring_cores = 2;
    });
    broker.test_support().create_topic("switch", 1).unwrap();
    let mut client = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut client, "switch", batch(200), 1), Some((0, 0)));
    let before = read_all(&mut client, "switch");
    assert_eq!(before.len(), 200);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, 1), 1);
    assert_eq!(info_read_path(&broker), "uring-splice");
    let mut expected = vec![(ReadPathKind::UringSplice, 1)];
    let steps: [(Op<'_>, ReadPathKind); 3] = [
        ((0, "read.path", Some("uring-read-send")), ReadPathKind::UringReadSend),
        ((0, "read.path", Some("uring-send-zc")), ReadPathKind::UringSendZc),
        ((1, "read.path", None), ReadPathKind::UringSplice),
    ];
    for (op, kind) in steps {
        if kind == ReadPathKind::UringSendZc && crate::uring_model::uring_path("uring-send-zc").is_none() {
            continue;
        }
        assert_eq!(alter(&mut client, "0", &[op], false), (0, String::new()), "{op:?}");
        assert_eq!(broker.test_support().read_path(), kind);
        assert_eq!(read_path_of(&mut client), kind.name());
        assert_eq!(info_read_path(&broker), kind.name(), "broker_info after {op:?}");
        // Several new connections (SO_REUSEPORT spreads them over both cores) and the first one.
        let mut reads = 1;
        assert_eq!(read_all(&mut client, "switch"), before, "records differ on {kind}");
        for _ in 0..3 {
            let mut other = Client::connect(broker.local_addr());
            assert_eq!(read_all(&mut other, "switch"), before, "records differ on {kind}");
            reads += 1;
        }
        match expected.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += reads,
            None => expected.push((kind, reads)),
        }
        for (k, n) in &expected {
            assert_eq!(transfers_reach(&broker, *k, *n), *n, "{k} after the switch to {kind}");
        }
    }
    assert_eq!(describe(&mut client, BROKER, "0", 4).error_code, 0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    drop(client);
    crate::uring_model::wait_until_released(&broker, 0, "after the switches");
    broker.shutdown().unwrap();
}

/// Under uring, a transfer in flight when read.path changes finishes on the path it started
/// on, and gives back its pipe: a reader asks for 16 MiB on uring-splice and stops reading
/// (its transfer holds a pipe), read.path becomes uring-read-send, then the reader takes the
/// whole response: it is counted on uring-splice, nothing on uring-read-send, the pipe is back;
/// the next Fetch goes through uring-read-send.
#[test]
fn under_uring_a_transfer_in_flight_finishes_on_its_path() {
    use std::io::Read;
    if !uring_runs() {
        return;
    }
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::UringSplice, ServerModel::Uring, |c| {
        c.uring_cores = 1;
    });
    broker.test_support().create_topic("big", 1).unwrap();
    let mut client = Client::connect(broker.local_addr());
    crate::uring_model::produce_big(&mut client, "big", 32, 4, 128 * 1024);
    let mut reader = crate::uring_model::raw_fetch(broker.local_addr(), "big");
    let mut size = [0u8; 4];
    reader.read_exact(&mut size).unwrap();
    let size = u32::from_be_bytes(size) as usize;
    assert!(size > 16 << 20, "the response holds the 16 MiB: {size}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while broker.test_support().uring_resources().pipes == 0 {
        assert!(std::time::Instant::now() < deadline, "no pipe held for the stalled reader");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(alter(&mut client, "0", &[(0, "read.path", Some("uring-read-send"))], false), (0, String::new()));
    assert!(broker.test_support().uring_resources().pipes > 0, "the transfer was no longer in flight at the switch");
    let mut rest = vec![0u8; size];
    reader.read_exact(&mut rest).unwrap();
    assert_eq!(i32::from_be_bytes(rest[..4].try_into().unwrap()), 7, "correlation id");
    // The response's record sets, all on the path the response started on.
    let spliced = transfers_reach(&broker, ReadPathKind::UringSplice, 1);
    assert!(spliced >= 1, "the stalled response was not counted on uring-splice");
    assert_eq!(transfers(&broker, ReadPathKind::UringReadSend), 0);
    let (_, bytes) = broker.test_support().read_path_transfers(ReadPathKind::UringSplice);
    assert!(bytes >= 16 << 20, "uring-splice moved the 16 MiB: {bytes}");
    crate::uring_model::wait_until_released(&broker, 2, "the finished transfer");
    broker.test_support().create_topic("after", 1).unwrap();
    assert_eq!(produce(&mut client, "after", batch(200), 1), Some((0, 0)));
    assert_eq!(read_all(&mut client, "after").len(), 200);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringReadSend, 1), 1, "the next Fetch went elsewhere");
    assert_eq!(transfers(&broker, ReadPathKind::UringSplice), spliced);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Under uring, a path the model cannot run (sendfile: a blocking call) and one the cores
/// cannot prepare (registered buffers of 2 GiB: above the 1 GiB a buffer may have) are refused
/// with INVALID_REQUEST and the reason, validate_only included; nothing changes.
#[test]
fn under_uring_read_path_changes_the_cores_cannot_run_are_refused() {
    if !uring_runs() {
        return;
    }
    let (_tmp, broker) = crate::uring_model::start_model(ReadPathKind::UringSplice, ServerModel::Uring, |c| {
        c.uring_cores = 2;
        c.read_path_config.buffer_size = 2 << 30;
    });
    let mut client = Client::connect(broker.local_addr());
    for validate_only in [false, true] {
        let (code, text) = alter(&mut client, "0", &[(0, "read.path", Some("sendfile"))], validate_only);
        assert_eq!(code, INVALID_REQUEST, "{text}");
        assert!(text.contains("server.model=uring cannot run read path sendfile"), "{text}");
        let (code, text) = alter(&mut client, "0", &[(0, "read.path", Some("uring-read-send"))], validate_only);
        assert_eq!(code, INVALID_REQUEST, "{text}");
        assert!(text.starts_with("Invalid value uring-read-send for configuration read.path: core "), "{text}");
        assert!(text.contains("registering buffers"), "{text}");
        assert_eq!(read_path_of(&mut client), "uring-splice");
        assert_eq!(broker.test_support().read_path(), ReadPathKind::UringSplice);
        assert_eq!(describe(&mut client, BROKER, "", 4).configs.len(), 0, "nothing at the default level");
    }
    assert_eq!(value(entry(&describe(&mut client, BROKER, "0", 4), "server.model")), "uring");
    // The broker still serves on its path.
    broker.test_support().create_topic("still", 1).unwrap();
    assert_eq!(produce(&mut client, "still", batch(200), 1), Some((0, 0)));
    assert_eq!(read_all(&mut client, "still").len(), 200);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, 1), 1);
    broker.shutdown().unwrap();
}

/// confluent-kafka's AdminClient alters `read.path` from `from` to `to` on a broker of `model`
/// (tests/python/confluent_configs.py), then the broker's per-path transfer counters show the
/// records consumed once on each path.
fn confluent_admin_client_switch(model: ServerModel, from: ReadPathKind, to: ReadPathKind) {
    let Some(python) = crate::python_clients::python_with("confluent_kafka") else { return };
    let (_tmp, broker) = crate::uring_model::start_model(from, model, |c| c.uring_cores = 1);
    let bootstrap = broker.local_addr().to_string();
    let what = format!("confluent-kafka AdminClient, server.model={model}, read.path {from} -> {to}");
    let summary = crate::python_clients::run_script_args(
        &python,
        "confluent_configs.py",
        &[&bootstrap, from.name(), to.name(), model.name()],
        &what,
    );
    eprintln!("{what}: {summary}");
    assert_eq!(summary["consumed_after"], 40, "{summary}");
    assert_eq!(summary["read_path_after"], to.name());
    assert_eq!(summary["refused"]["read_only"]["code"], i64::from(INVALID_REQUEST), "{summary}");
    assert_eq!(summary["refused"]["unknown"]["code"], i64::from(INVALID_CONFIG), "{summary}");
    assert_eq!(summary["refused"]["bad_value"]["code"], i64::from(INVALID_REQUEST), "{summary}");
    assert_eq!(broker.test_support().read_path(), to);
    // Consumed once on each path.
    assert!(transfers_reach(&broker, from, 1) > 0);
    assert!(transfers_reach(&broker, to, 1) > 0, "no Fetch went through {to} after the switch");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

#[test]
fn confluent_admin_client_switches_the_read_path() {
    confluent_admin_client_switch(ServerModel::Threaded, ReadPathKind::Copy, ReadPathKind::Sendfile);
}

#[test]
fn confluent_admin_client_switches_the_read_path_under_uring() {
    if !uring_runs() {
        return;
    }
    confluent_admin_client_switch(ServerModel::Uring, ReadPathKind::UringSplice, ReadPathKind::UringReadSend);
}

/// `fetchbench_read_path_syscalls_total` of `path` in the broker's metrics (0 without a sample):
/// only the threaded model's io threads count system calls, the cores do not, so it tells
/// which front end served a Fetch through a `uring-*` path.
fn syscalls(broker: &BrokerHandle, path: ReadPathKind) -> u64 {
    let metrics = broker.metrics_text().unwrap();
    let prefix = format!("fetchbench_read_path_syscalls_total{{read_path=\"{}\"}} ", path.name());
    metrics.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

/// The `server_model` label of `broker_info`.
fn info_server_model(broker: &BrokerHandle) -> String {
    let metrics = broker.metrics_text().unwrap();
    let info = metrics.lines().find(|l| l.starts_with("fetchbench_broker_info{")).expect("broker_info");
    let at = info.find("server_model=\"").expect("server_model label") + "server_model=\"".len();
    info[at..].split('"').next().unwrap().to_string()
}

/// server.model altered at runtime: threaded -> uring (with read.path in the same request: copy
/// is a blocking path, refused alone) -> threaded (DELETE). New connections go to the new front
/// end (a core's Fetch through uring-splice counts no system calls, an io thread's does); the
/// connections opened before keep working on the front end that accepted them, across both
/// switches, without reconnecting; the records read back identical everywhere.
#[test]
fn server_model_switches_new_connections_and_keeps_the_open_ones() {
    if !uring_runs() {
        return;
    }
    let (_tmp, broker) =
        crate::uring_model::start_model(ReadPathKind::Copy, ServerModel::Threaded, |c| c.uring_cores = 2);
    broker.test_support().create_topic("models", 1).unwrap();
    let mut old = Client::connect(broker.local_addr());
    assert_eq!(produce(&mut old, "models", batch(200), 1), Some((0, 0)));
    let before = read_all(&mut old, "models");
    assert_eq!(info_server_model(&broker), "threaded");

    // uring cannot run copy: refused, nothing changed; validate_only of the pair starts nothing.
    let (code, text) = alter(&mut old, "0", &[(0, "server.model", Some("uring"))], false);
    assert_eq!(code, INVALID_REQUEST, "{text}");
    assert!(text.starts_with("Invalid value uring for configuration server.model: "), "{text}");
    assert!(text.contains("cannot run read path copy"), "{text}");
    let pair: [Op<'_>; 2] = [(0, "server.model", Some("uring")), (0, "read.path", Some("uring-splice"))];
    assert_eq!(alter(&mut old, "0", &pair, true), (0, String::new()));
    assert_eq!(value(entry(&describe(&mut old, BROKER, "0", 4), "server.model")), "threaded");
    assert_eq!(info_server_model(&broker), "threaded");

    assert_eq!(alter(&mut old, "0", &pair, false), (0, String::new()));
    let r = describe(&mut old, BROKER, "0", 4);
    let model = entry(&r, "server.model");
    assert_eq!((value(model), model.config_source, model.read_only), ("uring", DYNAMIC_BROKER_CONFIG, false));
    assert_eq!(synonyms(model), [("uring".into(), DYNAMIC_BROKER_CONFIG), ("threaded".into(), DEFAULT_CONFIG)]);
    assert_eq!((info_server_model(&broker), info_read_path(&broker)), ("uring".into(), "uring-splice".into()));

    // The connection from before the switch: still on its network thread, whose io thread now
    // writes through uring-splice (system calls counted).
    let (t0, s0) = (transfers(&broker, ReadPathKind::UringSplice), syscalls(&broker, ReadPathKind::UringSplice));
    assert_eq!(read_all(&mut old, "models"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, t0 + 1), t0 + 1);
    let s1 = syscalls(&broker, ReadPathKind::UringSplice);
    assert!(s1 > s0, "the open connection's Fetch did not go through an io thread ({s0} -> {s1} syscalls)");
    // New connections: the cores (no system calls counted). Kept open across the switch back.
    let mut on_cores: Vec<Client> = (0..3).map(|_| Client::connect(broker.local_addr())).collect();
    for c in &mut on_cores {
        assert_eq!(read_all(c, "models"), before);
    }
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, t0 + 4), t0 + 4);
    assert_eq!(syscalls(&broker, ReadPathKind::UringSplice), s1, "a new connection went to the threaded front end");

    // Back to threaded (DELETE: the static value); read.path stays uring-splice (threaded runs
    // every path).
    assert_eq!(alter(&mut on_cores[0], "0", &[(1, "server.model", None)], false), (0, String::new()));
    assert_eq!(info_server_model(&broker), "threaded");
    let mut new = Client::connect(broker.local_addr());
    assert_eq!(read_all(&mut new, "models"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, t0 + 5), t0 + 5);
    let s2 = syscalls(&broker, ReadPathKind::UringSplice);
    assert!(s2 > s1, "a new connection did not go to the threaded front end ({s1} -> {s2} syscalls)");
    // The cores still serve the connections they accepted, and the first connection goes on.
    for c in &mut on_cores {
        assert_eq!(read_all(c, "models"), before);
    }
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, t0 + 8), t0 + 8);
    assert_eq!(syscalls(&broker, ReadPathKind::UringSplice), s2, "a core's connection moved to an io thread");
    // A blocking path now: threaded runs it; the cores keep uring-splice for their connections.
    assert_eq!(alter(&mut old, "0", &[(0, "read.path", Some("sendfile"))], false), (0, String::new()));
    assert_eq!(read_all(&mut old, "models"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::Sendfile, 1), 1);
    assert_eq!(read_all(&mut on_cores[1], "models"), before);
    assert_eq!(transfers_reach(&broker, ReadPathKind::UringSplice, t0 + 9), t0 + 9);
    assert_eq!(broker.test_support().connection_panics(), 0);
    drop((old, new, on_cores));
    broker.shutdown().unwrap();
}

/// confluent-kafka's producer and consumers across two switches of server.model
/// (tests/python/confluent_model_switch.py): threaded -> uring (with read.path=uring-splice in
/// the same request) -> threaded (both values deleted). The producer and the first consumer
/// stay connected throughout and never reconnect; consumers that connect after each switch
/// read the same records; the broker moved records through uring-splice (the open connection's
/// io thread, system calls counted, and the new one's core) and through copy.
#[test]
fn confluent_clients_across_server_model_switches() {
    if !uring_runs() {
        return;
    }
    let Some(python) = crate::python_clients::python_with("confluent_kafka") else { return };
    let (_tmp, broker) =
        crate::uring_model::start_model(ReadPathKind::Copy, ServerModel::Threaded, |c| c.uring_cores = 2);
    let bootstrap = broker.local_addr().to_string();
    let what = "confluent-kafka across server.model threaded -> uring -> threaded";
    let summary = crate::python_clients::run_script_args(&python, "confluent_model_switch.py", &[&bootstrap], what);
    eprintln!("{what}: {summary}");
    assert_eq!(summary["consumed"], 90, "{summary}");
    assert_eq!(summary["refused_alone"]["code"], i64::from(INVALID_REQUEST), "{summary}");
    assert_eq!(summary["after_switch"]["server.model"], serde_json::json!(["uring", DYNAMIC_BROKER_CONFIG]));
    assert_eq!(summary["after_switch"]["read.path"], serde_json::json!(["uring-splice", DYNAMIC_BROKER_CONFIG]));
    assert_eq!(summary["after_delete"]["server.model"], serde_json::json!(["threaded", DEFAULT_CONFIG]));
    assert_eq!(summary["after_delete"]["read.path"], serde_json::json!(["copy", STATIC_BROKER_CONFIG]));
    for client in ["producer", "a"] {
        let counts = &summary[format!("{client}_connects_disconnects")];
        assert_eq!(counts[1], 0, "{client} lost a connection across the switches: {summary}");
    }
    assert!(transfers_reach(&broker, ReadPathKind::UringSplice, 2) >= 2, "no Fetch went through uring-splice");
    assert!(
        syscalls(&broker, ReadPathKind::UringSplice) > 0,
        "the open connection's io thread did not run uring-splice"
    );
    assert!(transfers_reach(&broker, ReadPathKind::Copy, 1) > 0);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
