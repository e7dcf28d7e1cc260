//! The group coordinator over TCP with the test client: the rebalance protocol's rules that
//! real clients depend on (KIP-394 pending members, a late leader, static membership, session
//! expiry), committed offsets surviving a restart, and a real Kafka broker's
//! `__consumer_offsets` loaded from the corpus.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fetchbench::broker::BrokerHandle;
use fetchbench::protocol::consumer_offsets::partition_for;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::broker::{name, Client};

const MEMBER_ID_REQUIRED: i16 = 79;
const REBALANCE_IN_PROGRESS: i16 = 27;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const FENCED_INSTANCE_ID: i16 = 82;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A broker with benchmark-style group settings: no initial rebalance delay, session timeouts
/// from 500 ms.
fn start_in(dir: &Path) -> BrokerHandle {
    start_with(dir, 0)
}

fn start_with(dir: &Path, initial_rebalance_delay_ms: i32) -> BrokerHandle {
    crate::common::start_group_broker(dir, "127.0.0.1:0".parse().unwrap(), |c| {
        c.group_initial_rebalance_delay_ms = initial_rebalance_delay_ms;
        c.group_min_session_timeout_ms = 500;
    })
}

struct Join {
    member_id: String,
    instance: Option<String>,
    session_ms: i32,
    rebalance_ms: i32,
}

impl Join {
    fn new(member_id: &str) -> Self {
        Join { member_id: member_id.into(), instance: None, session_ms: 6000, rebalance_ms: 10_000 }
    }
}

fn join(c: &mut Client, group: &str, j: &Join) -> JoinGroupResponse {
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(j.session_ms)
        .with_rebalance_timeout_ms(j.rebalance_ms)
        .with_member_id(s(&j.member_id))
        .with_group_instance_id(j.instance.as_deref().map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(b"\0\0\0\0\0\x01\0\x01t\0\0\0\0"))]);
    match c.call(ApiKey::JoinGroup, 5, RequestKind::JoinGroup(req)) {
        ResponseKind::JoinGroup(r) => r,
        other => panic!("{other:?}"),
    }
}

/// JoinGroup v5 the way clients do it: empty member id, MEMBER_ID_REQUIRED, rejoin with it.
fn join_new(c: &mut Client, group: &str, instance: Option<&str>) -> JoinGroupResponse {
    let mut j = Join::new("");
    j.instance = instance.map(str::to_string);
    let r = join(c, group, &j);
    if r.error_code != MEMBER_ID_REQUIRED {
        return r;
    }
    j.member_id = r.member_id.to_string();
    join(c, group, &j)
}

fn sync(
    c: &mut Client,
    group: &str,
    member: &str,
    generation: i32,
    assignments: Vec<(String, Vec<u8>)>,
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            assignments
                .into_iter()
                .map(|(m, a)| SyncGroupRequestAssignment::default().with_member_id(s(&m)).with_assignment(a.into()))
                .collect(),
        );
    match c.call(ApiKey::SyncGroup, 5, RequestKind::SyncGroup(req)) {
        ResponseKind::SyncGroup(r) => r,
        other => panic!("{other:?}"),
    }
}

fn heartbeat(c: &mut Client, group: &str, member: &str, generation: i32, instance: Option<&str>) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_group_instance_id(instance.map(s));
    match c.call(ApiKey::Heartbeat, 4, RequestKind::Heartbeat(req)) {
        ResponseKind::Heartbeat(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

fn describe(c: &mut Client, group: &str) -> describe_groups_response::DescribedGroup {
    let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    match c.call(ApiKey::DescribeGroups, 5, RequestKind::DescribeGroups(req)) {
        ResponseKind::DescribeGroups(mut r) => r.groups.remove(0),
        other => panic!("{other:?}"),
    }
}

fn commit(c: &mut Client, group: &str, member: &str, generation: i32, offsets: &[(&str, i32, i64)]) -> Vec<i16> {
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for &(t, p, o) in offsets {
        topics.entry(t).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(o)
                .with_committed_leader_epoch(0)
                .with_committed_metadata(Some(s("m"))),
        );
    }
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| OffsetCommitRequestTopic::default().with_name(name(t)).with_partitions(ps))
                .collect(),
        );
    match c.call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(req)) {
        ResponseKind::OffsetCommit(r) => {
            r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v7; `topics` None = every committed partition. Returns (topic, partition) ->
/// (offset, error).
fn fetch_offsets(
    c: &mut Client,
    group: &str,
    topics: Option<&[(&str, &[i32])]>,
) -> BTreeMap<(String, i32), (i64, i16)> {
    let req = OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(topics.map(|ts| {
        ts.iter()
            .map(|(t, ps)| OffsetFetchRequestTopic::default().with_name(name(t)).with_partition_indexes(ps.to_vec()))
            .collect()
    }));
    match c.call(ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(req)) {
        ResponseKind::OffsetFetch(r) => {
            assert_eq!(r.error_code, 0, "OffsetFetch of {group}");
            r.topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| ((t.name.to_string(), p.partition_index), (p.committed_offset, p.error_code)))
                })
                .collect()
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn find_coordinator_answers_this_node_for_groups_only() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut c = Client::connect(broker.local_addr());
    for version in [0i16, 3] {
        let req = FindCoordinatorRequest::default().with_key(s("g"));
        let ResponseKind::FindCoordinator(r) =
            c.call(ApiKey::FindCoordinator, version, RequestKind::FindCoordinator(req))
        else {
            panic!()
        };
        assert_eq!((r.error_code, r.node_id.0, r.port), (0, 0, i32::from(broker.local_addr().port())), "v{version}");
    }
    let req = FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![s("a"), s("b")]);
    let ResponseKind::FindCoordinator(r) = c.call(ApiKey::FindCoordinator, 4, RequestKind::FindCoordinator(req)) else {
        panic!()
    };
    assert_eq!(
        r.coordinators.iter().map(|k| (k.key.to_string(), k.error_code)).collect::<Vec<_>>(),
        [("a".to_string(), 0), ("b".to_string(), 0)]
    );
    let req = FindCoordinatorRequest::default().with_key_type(1).with_coordinator_keys(vec![s("txn")]);
    let ResponseKind::FindCoordinator(r) = c.call(ApiKey::FindCoordinator, 4, RequestKind::FindCoordinator(req)) else {
        panic!()
    };
    // A transactional id's coordinator is this node too; an empty id is INVALID_REQUEST (Kafka).
    let port = i32::from(broker.local_addr().port());
    assert_eq!((r.coordinators[0].error_code, r.coordinators[0].node_id.0, r.coordinators[0].port), (0, 0, port));
    for version in [1i16, 3] {
        let req = FindCoordinatorRequest::default().with_key_type(1).with_key(s("txn"));
        let ResponseKind::FindCoordinator(r) =
            c.call(ApiKey::FindCoordinator, version, RequestKind::FindCoordinator(req))
        else {
            panic!()
        };
        assert_eq!((r.error_code, r.node_id.0, r.port), (0, 0, port), "v{version}");
        let req = FindCoordinatorRequest::default().with_key_type(1).with_key(s(""));
        let ResponseKind::FindCoordinator(r) =
            c.call(ApiKey::FindCoordinator, version, RequestKind::FindCoordinator(req))
        else {
            panic!()
        };
        assert_eq!((r.error_code, r.node_id.0), (42, -1), "v{version}: INVALID_REQUEST");
    }
    let req = FindCoordinatorRequest::default().with_key_type(2).with_coordinator_keys(vec![s("share")]);
    let ResponseKind::FindCoordinator(r) = c.call(ApiKey::FindCoordinator, 4, RequestKind::FindCoordinator(req)) else {
        panic!()
    };
    assert_eq!(r.coordinators[0].error_code, COORDINATOR_NOT_AVAILABLE, "no share group coordinator");
    broker.shutdown().unwrap();
}

#[test]
fn kip394_vanished_joiners_do_not_grow_the_group() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    for _ in 0..5 {
        let mut ghost = Client::connect(broker.local_addr());
        let r = join(&mut ghost, "g394", &Join::new(""));
        assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
        assert!(!r.member_id.is_empty(), "a member id comes with MEMBER_ID_REQUIRED");
        drop(ghost);
    }
    let mut real = Client::connect(broker.local_addr());
    let r = join_new(&mut real, "g394", None);
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    assert_eq!(r.members.len(), 1, "exactly one member: the pending ones are not members");
    assert_eq!(r.leader, r.member_id);
    let d = describe(&mut real, "g394");
    assert_eq!((d.group_state.as_str(), d.members.len()), ("CompletingRebalance", 1));
    broker.shutdown().unwrap();
}

#[test]
fn join_group_rejects_session_timeouts_outside_the_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut c = Client::connect(broker.local_addr());
    let mut j = Join::new("");
    j.session_ms = 100;
    assert_eq!(join(&mut c, "gs", &j).error_code, INVALID_SESSION_TIMEOUT);
    j.session_ms = 1_800_001;
    assert_eq!(join(&mut c, "gs", &j).error_code, INVALID_SESSION_TIMEOUT);
    // A member id the group does not know.
    assert_eq!(join(&mut c, "gs", &Join::new("nobody")).error_code, UNKNOWN_MEMBER_ID);
    broker.shutdown().unwrap();
}

/// Three members; the leader sends its SyncGroup a second after the followers: they wait, and
/// everyone gets its assignment in the same generation. Five rebalances (the first forms the
/// group within `group.initial.rebalance.delay.ms`; each later one is started by the leader
/// rejoining, the followers rejoining once the rebalance began), never REBALANCE_IN_PROGRESS.
#[test]
fn followers_wait_for_a_late_leader() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with(&tmp.path().join("logs"), 1000);
    let addr = broker.local_addr();
    let mut member_ids: Vec<String> = vec![String::new(); 3];
    let mut leader_id = String::new();
    let mut last_generation = 0;
    for round in 0..5 {
        let shared = broker.test_support().clone();
        let shared = &shared;
        let results: Vec<(JoinGroupResponse, SyncGroupResponse, Instant, Instant)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|i| {
                    let member_id = member_ids[i].clone();
                    let is_old_leader = !leader_id.is_empty() && member_id == leader_id;
                    scope.spawn(move || {
                        let mut c = Client::connect(addr);
                        let r = if member_id.is_empty() {
                            join_new(&mut c, "late", None)
                        } else {
                            if !is_old_leader {
                                // Rejoin once the leader's JoinGroup started the rebalance.
                                let deadline = Instant::now() + Duration::from_secs(20);
                                while shared.coordinator().describe_group("late").state != "PreparingRebalance" {
                                    assert!(Instant::now() < deadline, "round {round}: no rebalance started");
                                    std::thread::sleep(Duration::from_millis(5));
                                }
                            }
                            join(&mut c, "late", &Join::new(&member_id))
                        };
                        assert_eq!(r.error_code, 0, "round {round} member {i}");
                        let me = r.member_id.to_string();
                        let mut sent = Instant::now();
                        let s = if r.leader == r.member_id {
                            std::thread::sleep(Duration::from_secs(1));
                            sent = Instant::now();
                            let assignments = r
                                .members
                                .iter()
                                .map(|m| (m.member_id.to_string(), m.member_id.as_bytes().to_vec()))
                                .collect();
                            sync(&mut c, "late", &me, r.generation_id, assignments)
                        } else {
                            sync(&mut c, "late", &me, r.generation_id, vec![])
                        };
                        (r, s, sent, Instant::now())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let generation = results[0].0.generation_id;
        assert!(generation > last_generation, "round {round}: a new generation");
        last_generation = generation;
        let leader_sent = results.iter().find(|(j, ..)| j.leader == j.member_id).expect("a leader").2;
        for (j, s, _, answered) in &results {
            assert_eq!(j.generation_id, generation, "round {round}: one generation");
            assert_ne!(s.error_code, REBALANCE_IN_PROGRESS, "round {round}");
            assert_eq!(s.error_code, 0, "round {round}");
            assert_eq!(s.assignment.as_ref(), j.member_id.as_bytes(), "round {round}: each member gets its own");
            if j.leader != j.member_id {
                assert!(*answered >= leader_sent, "round {round}: a follower was answered before the leader synced");
            }
        }
        member_ids = results.iter().map(|(j, ..)| j.member_id.to_string()).collect();
        leader_id = results[0].0.leader.to_string();
    }
    broker.shutdown().unwrap();
}

#[test]
fn static_member_restart_keeps_its_generation_and_fences_the_old_id() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut c = Client::connect(broker.local_addr());
    let r = join_new(&mut c, "static", Some("instance-1"));
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    let old = r.member_id.to_string();
    let s1 = sync(&mut c, "static", &old, 1, vec![(old.clone(), b"mine".to_vec())]);
    assert_eq!(s1.error_code, 0);
    // The process restarts: a new connection, no member id, the same group.instance.id.
    let mut c2 = Client::connect(broker.local_addr());
    let r2 = join_new(&mut c2, "static", Some("instance-1"));
    assert_eq!((r2.error_code, r2.generation_id), (0, 1), "no rebalance");
    assert_ne!(r2.member_id.to_string(), old);
    let s2 = sync(&mut c2, "static", &r2.member_id, 1, vec![]);
    assert_eq!((s2.error_code, s2.assignment.as_ref()), (0, &b"mine"[..]));
    assert_eq!(heartbeat(&mut c, "static", &old, 1, Some("instance-1")), FENCED_INSTANCE_ID);
    assert_eq!(describe(&mut c2, "static").group_state.as_str(), "Stable");
    broker.shutdown().unwrap();
}

#[test]
fn a_silent_member_is_removed_after_its_session_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut c = Client::connect(broker.local_addr());
    let mut j = Join::new("");
    j.session_ms = 800;
    let r = join(&mut c, "silent", &j);
    j.member_id = r.member_id.to_string();
    let r = join(&mut c, "silent", &j);
    assert_eq!(r.error_code, 0);
    // The session restarts when the SyncGroup is handled: measure from before it is sent, so a
    // slow test thread cannot make the removal look early.
    let start = Instant::now();
    let s1 = sync(&mut c, "silent", &j.member_id, r.generation_id, vec![]);
    assert_eq!(s1.error_code, 0);
    while describe(&mut c, "silent").group_state.as_str() != "Empty" {
        assert!(start.elapsed() < Duration::from_secs(10), "the member was not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(start.elapsed() >= Duration::from_millis(750), "removed too early: {:?}", start.elapsed());
    assert_eq!(heartbeat(&mut c, "silent", &j.member_id, r.generation_id, None), UNKNOWN_MEMBER_ID);
    broker.shutdown().unwrap();
}

#[test]
fn committed_offsets_survive_a_restart_and_unknown_partitions_are_minus_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let broker = start_in(&dir);
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(commit(&mut c, "offs", "", -1, &[("t", 0, 17), ("t", 1, 4), ("u", 0, 9)]), vec![0, 0, 0]);
    assert_eq!(commit(&mut c, "offs", "", -1, &[("t", 0, 18)]), vec![0]);
    let got = fetch_offsets(&mut c, "offs", Some(&[("t", &[0, 1, 2])]));
    assert_eq!(got[&("t".into(), 0)], (18, 0));
    assert_eq!(got[&("t".into(), 2)], (-1, 0), "no commit: -1 and no error");
    broker.shutdown().unwrap();
    // The commits are in __consumer_offsets-<partitionFor("offs")>.
    assert!(dir.join(format!("__consumer_offsets-{}", partition_for("offs", 50))).is_dir());
    let broker = start_in(&dir);
    let mut c = Client::connect(broker.local_addr());
    let all = fetch_offsets(&mut c, "offs", None);
    let want: BTreeMap<(String, i32), (i64, i16)> =
        [(("t".into(), 0), (18, 0)), (("t".into(), 1), (4, 0)), (("u".into(), 0), (9, 0))].into_iter().collect();
    assert_eq!(all, want);
    broker.shutdown().unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// The last committed offset per (group, topic, partition) as `fetchbench log dump
/// --print-records` decodes the partition's records (tombstones remove).
fn offsets_from_log_dump(partition_dir: &Path) -> BTreeMap<(String, String, i32), i64> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["log", "dump", "--print-records"])
        .arg(partition_dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut offsets = BTreeMap::new();
    for line in text.lines() {
        let Some(key) = line.split("key: offset_commit::").nth(1) else { continue };
        // group=G,partition=T-P payload: offset=N ...   |   ... payload: <tombstone or null>
        let (key, rest) = key.split_once(" payload: ").unwrap_or((key, ""));
        let group = key.strip_prefix("group=").unwrap().rsplit_once(",partition=").unwrap();
        let (topic, partition) = group.1.rsplit_once('-').unwrap();
        let k = (group.0.to_string(), topic.to_string(), partition.parse::<i32>().unwrap());
        match rest.strip_prefix("offset=") {
            Some(v) => {
                let n: i64 = v.split(|c: char| !c.is_ascii_digit() && c != '-').next().unwrap().parse().unwrap();
                offsets.insert(k, n);
            }
            None => {
                offsets.remove(&k);
            }
        }
    }
    offsets
}

#[test]
fn a_real_kafka_consumer_offsets_loads_with_the_offsets_log_dump_decodes() {
    let Some(corpus) = crate::common::corpus() else { return };
    let mut checked = 0;
    for dir in crate::common::files_with_suffix(&corpus.join("kafka-segments"), ".log")
        .iter()
        .filter_map(|p| p.parent())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("__consumer_offsets-"))
        .map(Path::to_path_buf)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let expected = offsets_from_log_dump(&dir);
        if expected.is_empty() {
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("logs");
        copy_dir(&dir, &logs.join(dir.file_name().unwrap()));
        let broker = start_in(&logs);
        let mut c = Client::connect(broker.local_addr());
        let groups: std::collections::BTreeSet<&String> = expected.keys().map(|(g, _, _)| g).collect();
        for group in groups {
            let got = fetch_offsets(&mut c, group, None);
            let want: BTreeMap<(String, i32), (i64, i16)> = expected
                .iter()
                .filter(|((g, _, _), _)| g == group)
                .map(|((_, t, p), o)| ((t.clone(), *p), (*o, 0)))
                .collect();
            assert_eq!(got, want, "group {group} from {}", dir.display());
            checked += want.len();
        }
        broker.shutdown().unwrap();
    }
    assert!(checked > 0, "the corpus has committed offsets");
    eprintln!("{checked} committed offsets of real Kafka groups loaded");
}

#[test]
fn groups_cli_lists_and_describes_with_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    let mut c = Client::connect(broker.local_addr());
    crate::broker::metadata(&mut c, "lagged", 12);
    crate::broker::produce(&mut c, "lagged", crate::broker::batch(10), 1);
    // A member joins and takes partition 0; it commits offset 4 of 10.
    let r = join_new(&mut c, "cli-group", None);
    assert_eq!(r.error_code, 0);
    let me = r.member_id.to_string();
    // ConsumerProtocolAssignment v0: [topic "lagged" [0]], no user data.
    let mut assignment = vec![0, 0, 0, 0, 0, 1, 0, 6];
    assignment.extend_from_slice(b"lagged");
    assignment.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(sync(&mut c, "cli-group", &me, r.generation_id, vec![(me.clone(), assignment)]).error_code, 0);
    assert_eq!(commit(&mut c, "cli-group", &me, r.generation_id, &[("lagged", 0, 4)]), vec![0]);
    let bootstrap = broker.local_addr().to_string();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
            .args(["groups", "--bootstrap", &bootstrap])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = run(&[]);
    assert!(
        listed.lines().any(|l| l.starts_with("cli-group") && l.contains("Stable") && l.contains("consumer")),
        "{listed}"
    );
    let report = run(&["--group", "cli-group"]);
    assert!(
        report.contains("STATE Stable") && report.contains("GENERATION 1") && report.contains("PROTOCOL range"),
        "{report}"
    );
    let row: Vec<&str> =
        report.lines().find(|l| l.starts_with("lagged")).expect("a row for lagged-0").split_whitespace().collect();
    assert_eq!(&row[..5], ["lagged", "0", "4", "10", "6"], "{report}");
    assert_eq!(row[5], me);
    assert!(report.contains("lagged-0"), "the member's assignment is shown: {report}");
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["groups", "--bootstrap", &format!("127.0.0.1:1,{bootstrap}"), "--group", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "a group that does not exist");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    broker.shutdown().unwrap();
}

/// `fetchbench groups` finds the group's metadata record with the broker's own
/// `offsets.topic.num.partitions` (learned from Metadata), not Kafka's default of 50: with 7
/// partitions, "few-offsets" lives in partition 4, where 50 would have looked in partition 43.
#[test]
fn groups_cli_uses_the_brokers_offsets_partition_count() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = crate::common::start_group_broker(&tmp.path().join("logs"), "127.0.0.1:0".parse().unwrap(), |c| {
        c.group_initial_rebalance_delay_ms = 0;
        c.offsets_topic_num_partitions = 7;
    });
    let group = "few-offsets";
    assert_eq!((partition_for(group, 7), partition_for(group, 50)), (4, 43));
    let mut c = Client::connect(broker.local_addr());
    crate::broker::metadata(&mut c, "seven", 12);
    let r = join_new(&mut c, group, None);
    assert_eq!(r.error_code, 0);
    let me = r.member_id.to_string();
    // ConsumerProtocolAssignment v0: [topic "seven" [0]], no user data.
    let mut assignment = vec![0, 0, 0, 0, 0, 1, 0, 5];
    assignment.extend_from_slice(b"seven");
    assignment.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(sync(&mut c, group, &me, r.generation_id, vec![(me.clone(), assignment)]).error_code, 0);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["groups", "--bootstrap", &broker.local_addr().to_string(), "--group", group])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(report.contains("GENERATION 1"), "{report}");
    assert!(report.contains("COORDINATOR-PARTITION __consumer_offsets-4"), "{report}");
    broker.shutdown().unwrap();
}

/// Issue 15: a waiting JoinGroup or SyncGroup holds no thread. Twelve members join one group
/// on a broker with `num.io.threads=2`, each on its own connection, all sent before any answer
/// is read: the twelve joins wait in the purgatory, and meanwhile another client's Metadata,
/// Fetch and DescribeGroups are answered at once (if a waiting join held an io thread, two of them
/// would stall every other client until the rebalance ends). Then all twelve get generation 1
/// with one leader; eleven followers' SyncGroups wait in the purgatory too, another client is
/// still served, and the leader's SyncGroup answers every one with its own assignment.
/// DescribeGroups reports each member's `client_host` as the peer of its connection.
#[test]
fn more_members_than_io_threads_rebalance_while_other_clients_are_served() {
    const MEMBERS: usize = 12;
    let tmp = tempfile::tempdir().unwrap();
    // An initial delay long enough for the test to look at the waiting joins; extended (within
    // the rebalance timeout) while members keep arriving.
    let broker = crate::common::start_group_broker(&tmp.path().join("logs"), "127.0.0.1:0".parse().unwrap(), |c| {
        c.num_io_threads = 2;
        c.group_initial_rebalance_delay_ms = 3000;
    });
    let addr = broker.local_addr();
    let support = broker.test_support();
    let mut other = Client::connect(addr);
    assert_eq!(crate::broker::metadata(&mut other, "other", 12).topics[0].error_code, 0);
    assert_eq!(crate::broker::produce(&mut other, "other", crate::broker::batch(3), 1), Some((0, 0)));
    // Served at once (generous bound): Metadata, a Fetch of 3 records, DescribeGroups.
    let served_at_once = |other: &mut Client, what: &str| {
        let start = Instant::now();
        assert_eq!(crate::broker::metadata(other, "other", 12).topics[0].error_code, 0);
        let (error, high_watermark, records) = crate::broker::fetch(other, "other", 0, 12);
        assert_eq!((error, high_watermark, records.len()), (0, 3, 3));
        let _ = describe(other, "twelve");
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "{what}: another client waited {took:?}");
    };

    let mut members: Vec<Client> = (0..MEMBERS).map(|_| Client::connect(addr)).collect();
    let join_request = |member_id: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("twelve")))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(member_id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"\0\0\0\0\0\x01\0\x01t\0\0\0\0"))])
    };
    // KIP-394: the first JoinGroup (no member id) is answered at once with the member id...
    let member_ids: Vec<String> = members
        .iter_mut()
        .map(|c| {
            let r = join(c, "twelve", &Join::new(""));
            assert_eq!(r.error_code, MEMBER_ID_REQUIRED);
            r.member_id.to_string()
        })
        .collect();
    // ...the second waits for the rebalance: all twelve sent before any answer is read.
    let joins: Vec<i32> = members
        .iter_mut()
        .zip(&member_ids)
        .map(|(c, id)| c.send(ApiKey::JoinGroup, 5, RequestKind::JoinGroup(join_request(id))))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while support.delayed_operations() < MEMBERS {
        assert!(
            Instant::now() < deadline,
            "the joins are not waiting in the purgatory: {}",
            support.delayed_operations()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(support.coordinator().describe_group("twelve").state, "PreparingRebalance");
    served_at_once(&mut other, "while twelve joins wait");

    let joined: Vec<JoinGroupResponse> = members
        .iter_mut()
        .zip(joins)
        .map(|(c, id)| match c.receive(ApiKey::JoinGroup, 5, id) {
            ResponseKind::JoinGroup(r) => r,
            other => panic!("{other:?}"),
        })
        .collect();
    let leader = joined[0].leader.to_string();
    for (i, r) in joined.iter().enumerate() {
        assert_eq!((r.error_code, r.generation_id), (0, 1), "member {i}");
        assert_eq!(r.member_id.as_str(), member_ids[i], "member {i}");
        assert_eq!(r.leader.as_str(), leader, "member {i}: one leader");
    }
    let leader_index = joined.iter().position(|r| r.member_id.as_str() == leader).expect("the leader is a member");
    assert_eq!(joined[leader_index].members.len(), MEMBERS);

    // The followers' SyncGroups wait for the leader's, holding no thread either.
    let sync_request = |member_id: &str, assignments: Vec<(String, Vec<u8>)>| {
        SyncGroupRequest::default()
            .with_group_id(GroupId(s("twelve")))
            .with_generation_id(1)
            .with_member_id(s(member_id))
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(m, a)| SyncGroupRequestAssignment::default().with_member_id(s(&m)).with_assignment(a.into()))
                    .collect(),
            )
    };
    let mut syncs: Vec<Option<i32>> = vec![None; MEMBERS];
    for (i, c) in members.iter_mut().enumerate().filter(|(i, _)| *i != leader_index) {
        syncs[i] = Some(c.send(ApiKey::SyncGroup, 5, RequestKind::SyncGroup(sync_request(&member_ids[i], vec![]))));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while support.delayed_operations() < MEMBERS - 1 {
        assert!(Instant::now() < deadline, "the followers' syncs are not waiting: {}", support.delayed_operations());
        std::thread::sleep(Duration::from_millis(5));
    }
    served_at_once(&mut other, "while eleven syncs wait");
    let assignments = member_ids.iter().map(|m| (m.clone(), m.as_bytes().to_vec())).collect();
    let s_leader = sync(&mut members[leader_index], "twelve", &leader, 1, assignments);
    assert_eq!((s_leader.error_code, s_leader.assignment.as_ref()), (0, leader.as_bytes()));
    for (i, c) in members.iter_mut().enumerate() {
        let Some(id) = syncs[i] else { continue };
        let ResponseKind::SyncGroup(r) = c.receive(ApiKey::SyncGroup, 5, id) else { panic!("member {i}") };
        assert_eq!((r.error_code, r.assignment.as_ref()), (0, member_ids[i].as_bytes()), "member {i}");
    }
    // Each answered request leaves the purgatory just after its answer is written.
    let deadline = Instant::now() + Duration::from_secs(20);
    while support.delayed_operations() > 0 {
        assert!(Instant::now() < deadline, "answered requests stay in the purgatory: {}", support.delayed_operations());
        std::thread::sleep(Duration::from_millis(5));
    }

    let described = describe(&mut other, "twelve");
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.members.len(), MEMBERS);
    for m in &described.members {
        assert_eq!(m.client_host.as_str(), "/127.0.0.1", "{m:?}");
    }
    drop(members);
    drop(other);
    broker.shutdown().unwrap();
}

/// A member whose waiting JoinGroup's connection closes is dropped from the purgatory at once
/// (within the purgatory's sweep) but stays in the group, as Kafka keeps it: the rebalance
/// completes with it, and its session then times out without heartbeats.
#[test]
fn a_closed_members_waiting_join_is_dropped_and_its_member_expires_with_its_session() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = crate::common::start_group_broker(&tmp.path().join("logs"), "127.0.0.1:0".parse().unwrap(), |c| {
        c.group_initial_rebalance_delay_ms = 2000;
        c.group_min_session_timeout_ms = 500;
    });
    let addr = broker.local_addr();
    let support = broker.test_support();
    let mut stays = Client::connect(addr);
    let mut goes = Client::connect(addr);
    let mut j = Join::new("");
    j.session_ms = 1000;
    let stays_id = join(&mut stays, "closing", &j).member_id.to_string();
    let goes_id = join(&mut goes, "closing", &j).member_id.to_string();
    let joins = [&stays_id, &goes_id].map(|id| {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s("closing")))
            .with_session_timeout_ms(1000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(s(id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from_static(b"\0\0\0\0\0\x01\0\x01t\0\0\0\0"))]);
        RequestKind::JoinGroup(req)
    });
    let [stays_join, goes_join] = joins;
    let stays_cid = stays.send(ApiKey::JoinGroup, 5, stays_join);
    goes.send(ApiKey::JoinGroup, 5, goes_join);
    let deadline = Instant::now() + Duration::from_secs(20);
    while support.delayed_operations() < 2 {
        assert!(Instant::now() < deadline, "the joins are not waiting");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(goes);
    let closed = Instant::now();
    while support.delayed_operations() > 1 {
        assert!(closed.elapsed() < Duration::from_secs(5), "the closed member's join was not dropped");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The rebalance completes with both members (the closed one counts as joined).
    let ResponseKind::JoinGroup(r) = stays.receive(ApiKey::JoinGroup, 5, stays_cid) else { panic!() };
    assert_eq!((r.error_code, r.generation_id), (0, 1));
    let group = support.coordinator().describe_group("closing");
    assert_eq!(group.members.len(), 2, "{group:?}");
    // The leader syncs and heartbeats; the closed member's session (1 s) expires: a rebalance.
    let me = r.member_id.to_string();
    if r.leader == r.member_id {
        let all = r.members.iter().map(|m| (m.member_id.to_string(), vec![1])).collect();
        assert_eq!(sync(&mut stays, "closing", &me, 1, all).error_code, 0);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ids: Vec<String> =
            support.coordinator().describe_group("closing").members.iter().map(|m| m.member_id.clone()).collect();
        if !ids.contains(&goes_id) {
            break;
        }
        assert!(Instant::now() < deadline, "the closed member never expired: {ids:?}");
        let _ = heartbeat(&mut stays, "closing", &me, 1, None);
        std::thread::sleep(Duration::from_millis(100));
    }
    broker.shutdown().unwrap();
}

// ---- Transactional offset commits (issue 18) ----

const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const INVALID_GROUP_ID: i16 = 24;

/// TxnOffsetCommit `version` of transactional id `id`'s `producer` (id, epoch) outside any
/// generation: the error of each (partition, offset) of topic `t`, in order.
fn txn_commit(
    c: &mut Client,
    version: i16,
    id: &str,
    group: &str,
    producer: (i64, i16),
    parts: &[(i32, i64)],
) -> Vec<i16> {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let partitions = parts
        .iter()
        .map(|&(p, o)| TxnOffsetCommitRequestPartition::default().with_partition_index(p).with_committed_offset(o))
        .collect();
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default().with_name(name("t")).with_partitions(partitions)]);
    match c.call(ApiKey::TxnOffsetCommit, version, RequestKind::TxnOffsetCommit(req)) {
        ResponseKind::TxnOffsetCommit(r) => {
            r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// InitProducerId v4 of transactional id `id` (timeout 60 s): its producer id and epoch.
fn txn_init(c: &mut Client, id: &str) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    match c.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req)) {
        ResponseKind::InitProducerId(r) => {
            assert_eq!(r.error_code, 0, "{r:?}");
            (r.producer_id.0, r.producer_epoch)
        }
        other => panic!("{other:?}"),
    }
}

/// AddOffsetsToTxn v3 of `group` to the transaction of `id` / `producer`: its error.
fn add_offsets(c: &mut Client, id: &str, producer: (i64, i16), group: &str) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_group_id(GroupId(s(group)));
    match c.call(ApiKey::AddOffsetsToTxn, 3, RequestKind::AddOffsetsToTxn(req)) {
        ResponseKind::AddOffsetsToTxn(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

/// EndTxn v3 of `id` / `producer`: its error (the markers are written before the answer).
fn end_txn(c: &mut Client, id: &str, producer: (i64, i16), commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit);
    match c.call(ApiKey::EndTxn, 3, RequestKind::EndTxn(req)) {
        ResponseKind::EndTxn(r) => r.error_code,
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v8 (one group) with `require_stable`: (partition, offset, error) of topic `t`'s
/// `parts`, after checking the group's error is NONE.
fn fetch_stable_v8(c: &mut Client, group: &str, parts: &[i32], require_stable: bool) -> Vec<(i32, i64, i16)> {
    use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
    let topics = vec![OffsetFetchRequestTopics::default().with_name(name("t")).with_partition_indexes(parts.to_vec())];
    let req = OffsetFetchRequest::default()
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(topics))])
        .with_require_stable(require_stable);
    match c.call(ApiKey::OffsetFetch, 8, RequestKind::OffsetFetch(req)) {
        ResponseKind::OffsetFetch(r) => {
            assert_eq!(r.groups[0].error_code, 0, "the group's error");
            r.groups[0]
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (p.partition_index, p.committed_offset, p.error_code)))
                .collect()
        }
        other => panic!("{other:?}"),
    }
}

/// OffsetFetch v7 with `require_stable`: (partition, offset, error) of topic `t`'s `parts`.
fn fetch_stable_v7(c: &mut Client, group: &str, parts: &[i32], require_stable: bool) -> Vec<(i32, i64, i16)> {
    let topics = vec![OffsetFetchRequestTopic::default().with_name(name("t")).with_partition_indexes(parts.to_vec())];
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(topics))
        .with_require_stable(require_stable);
    match c.call(ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(req)) {
        ResponseKind::OffsetFetch(r) => {
            assert_eq!(r.error_code, 0, "the top-level error");
            r.topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (p.partition_index, p.committed_offset, p.error_code)))
                .collect()
        }
        other => panic!("{other:?}"),
    }
}

/// TxnOffsetCommit over the wire with the transaction coordinator (KIP-98, KIP-447): refused
/// until AddOffsetsToTxn added the group's partition (INVALID_TXN_STATE) and for a fenced epoch;
/// then the offsets are pending (OffsetFetch answers the old offset, UNSTABLE_OFFSET_COMMIT under
/// `require_stable` in the v7 and v8 shapes) until EndTxn writes the producer's marker in
/// `__consumer_offsets`; an open transaction survives a restart pending; COMMIT makes them the
/// committed offsets, ABORT drops them; both survive a restart. The same producer commits twice
/// in one transaction and again in the next (its batches' sequences continue in the partition).
#[test]
fn txn_offset_commits_wait_for_their_marker_and_survive_a_restart() {
    const INVALID_TXN_STATE: i16 = 48;
    const INVALID_PRODUCER_EPOCH: i16 = 47;
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let group = "txo";
    let unstable = UNSTABLE_OFFSET_COMMIT;
    let broker = start_in(&logs);
    let mut c = Client::connect(broker.local_addr());
    let p1 = txn_init(&mut c, "tx");
    assert_eq!(txn_commit(&mut c, 0, "tx", "", p1, &[(0, 1)]), [INVALID_GROUP_ID]);
    assert_eq!(txn_commit(&mut c, 3, "tx", group, p1, &[(0, 1)]), [INVALID_TXN_STATE], "not added to the transaction");
    assert_eq!(add_offsets(&mut c, "tx", p1, group), 0);
    assert_eq!(txn_commit(&mut c, 3, "tx", group, (p1.0, p1.1 + 1), &[(0, 1)]), [INVALID_PRODUCER_EPOCH]);
    assert_eq!(txn_commit(&mut c, 3, "tx", group, p1, &[(0, 10), (1, 20)]), [0, 0]);
    assert_eq!(txn_commit(&mut c, 0, "tx", group, p1, &[(0, 11)]), [0], "the same transaction again");
    assert_eq!(fetch_stable_v7(&mut c, group, &[0, 1, 2], false), [(0, -1, 0), (1, -1, 0), (2, -1, 0)]);
    assert_eq!(fetch_stable_v7(&mut c, group, &[0, 1, 2], true), [(0, -1, unstable), (1, -1, unstable), (2, -1, 0)]);
    drop(c);
    broker.shutdown().unwrap();

    // Pending after the restart, until the COMMIT marker.
    let broker = start_in(&logs);
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(fetch_stable_v8(&mut c, group, &[0, 1], true), [(0, -1, unstable), (1, -1, unstable)]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let ended = loop {
        // COORDINATOR_LOAD_IN_PROGRESS (14) until __transaction_state is replayed.
        match end_txn(&mut c, "tx", p1, true) {
            14 if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            code => break code,
        }
    };
    assert_eq!(ended, 0);
    assert_eq!(fetch_stable_v8(&mut c, group, &[0, 1], true), [(0, 11, 0), (1, 20, 0)]);
    // The next transaction of the same producer, and another producer's, both aborted.
    assert_eq!(add_offsets(&mut c, "tx", p1, group), 0);
    assert_eq!(txn_commit(&mut c, 4, "tx", group, p1, &[(1, 21)]), [0]);
    let p2 = txn_init(&mut c, "tx2");
    assert_eq!(add_offsets(&mut c, "tx2", p2, group), 0);
    assert_eq!(txn_commit(&mut c, 2, "tx2", group, p2, &[(0, 99)]), [0]);
    assert_eq!(fetch_stable_v8(&mut c, group, &[0, 1], false), [(0, 11, 0), (1, 20, 0)]);
    assert_eq!(fetch_stable_v8(&mut c, group, &[0, 1], true), [(0, -1, unstable), (1, -1, unstable)]);
    assert_eq!(end_txn(&mut c, "tx", p1, false), 0);
    assert_eq!(fetch_stable_v7(&mut c, group, &[0, 1], true), [(0, -1, unstable), (1, 20, 0)]);
    assert_eq!(end_txn(&mut c, "tx2", p2, false), 0);
    assert_eq!(fetch_stable_v7(&mut c, group, &[0, 1], true), [(0, 11, 0), (1, 20, 0)]);
    drop(c);
    broker.shutdown().unwrap();

    let broker = start_in(&logs);
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(fetch_stable_v7(&mut c, group, &[0, 1], true), [(0, 11, 0), (1, 20, 0)]);
    assert_eq!(fetch_offsets(&mut c, group, None).len(), 2);
    drop(c);
    broker.shutdown().unwrap();
}

/// AddPartitionsToTxn over the wire: v3 (what producers send) adds the partitions, or answers
/// UNKNOWN_TOPIC_OR_PARTITION for one that does not exist and OPERATION_NOT_ATTEMPTED for the
/// others (nothing added); v4 (KIP-890, a batch of transactions) with `verify_only` answers NONE
/// for an added partition and TRANSACTION_ABORTABLE for one that is not, PRODUCER_FENCED for
/// another epoch, and adds nothing.
#[test]
fn add_partitions_to_txn_adds_refuses_and_verifies() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    broker.test_support().create_topic("ap", 2).unwrap();
    let mut c = Client::connect(broker.local_addr());
    let p = txn_init(&mut c, "tx-ap");
    let topics = |parts: &[(&str, &[i32])]| -> Vec<AddPartitionsToTxnTopic> {
        parts
            .iter()
            .map(|(t, ps)| AddPartitionsToTxnTopic::default().with_name(name(t)).with_partitions(ps.to_vec()))
            .collect()
    };
    let v3 = |c: &mut Client, parts: &[(&str, &[i32])]| -> Vec<(String, i32, i16)> {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s("tx-ap")))
            .with_v3_and_below_producer_id(ProducerId(p.0))
            .with_v3_and_below_producer_epoch(p.1)
            .with_v3_and_below_topics(topics(parts));
        let ResponseKind::AddPartitionsToTxn(r) =
            c.call(ApiKey::AddPartitionsToTxn, 3, RequestKind::AddPartitionsToTxn(req))
        else {
            panic!()
        };
        r.results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| {
                t.results_by_partition.iter().map(|p| (t.name.to_string(), p.partition_index, p.partition_error_code))
            })
            .collect()
    };
    let verify = |c: &mut Client, epoch: i16, parts: &[(&str, &[i32])]| -> Vec<(i32, i16)> {
        let txn = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(s("tx-ap")))
            .with_producer_id(ProducerId(p.0))
            .with_producer_epoch(epoch)
            .with_verify_only(true)
            .with_topics(topics(parts));
        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![txn]);
        let ResponseKind::AddPartitionsToTxn(r) =
            c.call(ApiKey::AddPartitionsToTxn, 4, RequestKind::AddPartitionsToTxn(req))
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        r.results_by_transaction[0]
            .topic_results
            .iter()
            .flat_map(|t| t.results_by_partition.iter().map(|p| (p.partition_index, p.partition_error_code)))
            .collect()
    };
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    const OPERATION_NOT_ATTEMPTED: i16 = 55;
    const TRANSACTION_ABORTABLE: i16 = 120;
    const PRODUCER_FENCED: i16 = 90;
    assert_eq!(
        v3(&mut c, &[("ap", &[0, 7])]),
        [("ap".into(), 0, OPERATION_NOT_ATTEMPTED), ("ap".into(), 7, UNKNOWN_TOPIC_OR_PARTITION)]
    );
    assert_eq!(verify(&mut c, p.1, &[("ap", &[0])]), [(0, TRANSACTION_ABORTABLE)], "nothing was added");
    assert_eq!(v3(&mut c, &[("ap", &[0])]), [("ap".into(), 0, 0)]);
    assert_eq!(verify(&mut c, p.1, &[("ap", &[0, 1])]), [(0, 0), (1, TRANSACTION_ABORTABLE)]);
    assert_eq!(verify(&mut c, p.1, &[("ap", &[1])]), [(1, TRANSACTION_ABORTABLE)], "verify_only adds nothing");
    assert_eq!(verify(&mut c, p.1 + 1, &[("ap", &[0])]), [(0, PRODUCER_FENCED)]);
    drop(c);
    broker.shutdown().unwrap();
}

/// The coordinators' topics are the broker's: a Produce to `__consumer_offsets` or
/// `__transaction_state` is INVALID_TOPIC_EXCEPTION and writes nothing (a forged offset commit or
/// a tombstone of a transactional id's state would otherwise be replayed at the next start), and
/// AddPartitionsToTxn of one is TOPIC_AUTHORIZATION_FAILED (the others OPERATION_NOT_ATTEMPTED),
/// as Kafka answers for its internal topics.
#[test]
fn clients_cannot_write_the_coordinators_topics() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(&tmp.path().join("logs"));
    broker.test_support().create_topic("plain", 1).unwrap();
    let mut c = Client::connect(broker.local_addr());
    // Both topics exist: a group commit creates one, a transactional id the other.
    let p = txn_init(&mut c, "tx-int");
    assert_eq!(add_offsets(&mut c, "tx-int", p, "g-int"), 0);
    assert_eq!(txn_commit(&mut c, 3, "tx-int", "g-int", p, &[(0, 1)]), [0]);
    for topic in ["__consumer_offsets", "__transaction_state"] {
        let before = broker.test_support().log_end_offset(topic, 0);
        assert!(before.is_some(), "{topic} exists");
        let mut b = fetchbench::log::batch::BatchBuilder::new(0, fetchbench::log::batch::Compression::None);
        b.append(0, Some(b"forged"), None, &[]);
        let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(5000).with_topic_data(vec![
            TopicProduceData::default().with_name(name(topic)).with_partition_data(vec![
                PartitionProduceData::default().with_index(0).with_records(Some(b.build().unwrap().into())),
            ]),
        ]);
        let ResponseKind::Produce(r) = c.call(ApiKey::Produce, 9, RequestKind::Produce(req)) else { panic!() };
        assert_eq!(r.responses[0].partition_responses[0].error_code, 17, "{topic}: INVALID_TOPIC_EXCEPTION");
        assert_eq!(broker.test_support().log_end_offset(topic, 0), before, "{topic}: nothing written");
    }
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s("tx-int")))
        .with_v3_and_below_producer_id(ProducerId(p.0))
        .with_v3_and_below_producer_epoch(p.1)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default().with_name(name("__consumer_offsets")).with_partitions(vec![0]),
            AddPartitionsToTxnTopic::default().with_name(name("plain")).with_partitions(vec![0]),
        ]);
    let ResponseKind::AddPartitionsToTxn(r) =
        c.call(ApiKey::AddPartitionsToTxn, 3, RequestKind::AddPartitionsToTxn(req))
    else {
        panic!()
    };
    let codes: Vec<i16> =
        r.results_by_topic_v3_and_below.iter().map(|t| t.results_by_partition[0].partition_error_code).collect();
    assert_eq!(codes, [29, 55], "TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED");
    drop(c);
    broker.shutdown().unwrap();
}
