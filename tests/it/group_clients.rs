//! Real clients in consumer groups against the group coordinator (issue 5): librdkafka through
//! confluent-kafka (one Python process per member, `tests/python/group_member.py`, so a member
//! can be SIGKILLed), kafka-python's `KafkaConsumer(group_id=...)`, and `kcat -G`.
//!
//! Each test starts its own broker on 127.0.0.1:0 with a temporary log directory and
//! `group.initial.rebalance.delay.ms=0`. The members report their rebalance callbacks
//! (`on_assign` / `on_revoke` / `on_lost`), every record they processed and every commit as JSON
//! lines with `time.time()` stamps; the tests compare those with what the producer delivered and
//! with the coordinator's own view ([`GroupCoordinator::describe_group`], its assignments decoded
//! from the consumer protocol). The bounds are generous (behaviours, not performance; DESIGN.md
//! rule 11); the measured reassignment times are printed (`--nocapture`).
//!
//! Clients missing: the tests fail in CI and skip with a notice elsewhere, as
//! [`crate::python_clients`] and [`crate::kcat`] do.
//!
//! [`GroupCoordinator::describe_group`]: fetchbench::broker::coordinator::GroupCoordinator::describe_group

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fetchbench::broker::BrokerHandle;
use serde_json::{json, Value};

use crate::python_clients::{python_with, run_script_args};

/// Partitions of the topics of the confluent-kafka tests.
pub(crate) const PARTITIONS: i32 = 12;
/// The longest a behaviour may take before the test fails (a rebalance takes a second or two).
const WAIT: Duration = Duration::from_secs(30);
/// `session.timeout.ms` of the members (and `heartbeat.interval.ms` below).
const SESSION_TIMEOUT_MS: u64 = 6000;
const HEARTBEAT_INTERVAL_MS: u64 = 500;

/// (topic, partition).
type Tp = (String, i32);
/// (topic, partition, offset).
type Rec = (String, i32, i64);

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// A broker in `dir` with no initial rebalance delay, its coordinator loaded.
fn start_in(dir: &Path) -> BrokerHandle {
    crate::common::start_group_broker(dir, "127.0.0.1:0".parse().unwrap(), |_| {})
}

/// Creates `topic` with `partitions` partitions in the broker's log (as CreateTopics does).
fn create_topic(broker: &BrokerHandle, topic: &str, partitions: i32) {
    broker.test_support().create_topic(topic, partitions).unwrap();
}

/// Produces `count` records with confluent-kafka, record i to partition i % [`PARTITIONS`];
/// `create`: CreateTopics first. Returns the delivered records.
fn produce(python: &Path, broker: &BrokerHandle, topic: &str, count: usize, create: bool) -> Vec<Rec> {
    let bootstrap = broker.local_addr().to_string();
    let (parts, count_s) = (PARTITIONS.to_string(), count.to_string());
    let mut args = vec![bootstrap.as_str(), topic, parts.as_str(), count_s.as_str()];
    if create {
        args.push("--create");
    }
    let out = run_script_args(python, "group_produce.py", &args, &format!("producing {count} to {topic}"));
    let recs: Vec<Rec> = out["delivered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (topic.to_string(), d[0].as_i64().unwrap() as i32, d[1].as_i64().unwrap()))
        .collect();
    assert_eq!(recs.len(), count);
    recs
}

/// One `group_member.py` process: a confluent-kafka consumer in a group. Killed on drop.
pub(crate) struct Member {
    pub(crate) name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
}

impl Member {
    /// Starts a member of `group` subscribed to `topic`, with librdkafka `settings` over the
    /// script's defaults (session.timeout.ms=6000, heartbeat.interval.ms=500, earliest, manual
    /// synchronous commits).
    pub(crate) fn spawn(
        python: &Path,
        broker: &BrokerHandle,
        group: &str,
        topic: &str,
        settings: Value,
        name: &str,
    ) -> Member {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/group_member.py");
        let mut child = Command::new(python)
            .arg(&script)
            .arg(broker.local_addr().to_string())
            .arg(group)
            .arg(topic)
            .arg(settings.to_string())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {} {}: {e}", python.display(), script.display()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                sink.lock().unwrap().push(v);
            }
        });
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Member { name: name.to_string(), stdin: child.stdin.take(), child, events, stderr }
    }

    fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    pub(crate) fn events_named(&self, ev: &str) -> Vec<Value> {
        self.events().into_iter().filter(|e| e["ev"] == ev).collect()
    }

    /// The member's current assignment: its `assign` events minus its `revoke` / `lost` events.
    pub(crate) fn assignment(&self) -> BTreeSet<Tp> {
        let mut owned = BTreeSet::new();
        for e in self.events() {
            let Some(ps) = e["parts"].as_array() else { continue };
            let ps = ps.iter().map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_i64().unwrap() as i32));
            match e["ev"].as_str() {
                Some("assign") => owned.extend(ps),
                Some("revoke" | "lost") => ps.for_each(|p| {
                    owned.remove(&p);
                }),
                _ => {}
            }
        }
        owned
    }

    /// `time.time()` of the member's last `assign` event.
    fn last_assign_time(&self) -> f64 {
        self.events_named("assign").last().map(|e| e["t"].as_f64().unwrap()).unwrap_or(0.0)
    }

    /// `time.time()` of the member's first `ev` event.
    fn time_of(&self, ev: &str) -> f64 {
        self.events_named(ev).first().unwrap_or_else(|| panic!("{}: no {ev} event", self.name))["t"].as_f64().unwrap()
    }

    /// Every record the member processed, in order.
    pub(crate) fn records(&self) -> Vec<Rec> {
        let mut out = Vec::new();
        for e in self.events_named("msgs") {
            for r in e["recs"].as_array().unwrap() {
                out.push((r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap() as i32, r[2].as_i64().unwrap()));
            }
        }
        out
    }

    /// The highest offset the member committed successfully per partition.
    fn committed(&self) -> BTreeMap<Tp, i64> {
        let mut out = BTreeMap::new();
        for e in self.events_named("commit") {
            for o in e["offs"].as_array().unwrap() {
                if o[3].is_null() {
                    let tp = (o[0].as_str().unwrap().to_string(), o[1].as_i64().unwrap() as i32);
                    let v = out.entry(tp).or_insert(0);
                    *v = (*v).max(o[2].as_i64().unwrap());
                }
            }
        }
        out
    }

    /// The member's records that its own commits do not cover.
    fn uncommitted(&self) -> BTreeSet<Rec> {
        let committed = self.committed();
        self.records()
            .into_iter()
            .filter(|(t, p, o)| *o >= committed.get(&(t.clone(), *p)).copied().unwrap_or(0))
            .collect()
    }

    /// Failed commits and librdkafka errors.
    fn complaints(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| {
                matches!(e["ev"].as_str(), Some("error" | "commit_error"))
                    || e["offs"].as_array().is_some_and(|os| os.iter().any(|o| !o[3].is_null()))
            })
            .collect()
    }

    pub(crate) fn command(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{command}").unwrap_or_else(|e| panic!("{}: {command}: {e}", self.name));
        stdin.flush().unwrap();
    }

    /// SIGKILL; returns the `time.time()`-comparable moment.
    pub(crate) fn kill(&mut self) -> f64 {
        let t = now_s();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        t
    }

    /// `close` (consumer.close(): LeaveGroup unless static) and waits for the exit.
    pub(crate) fn close(&mut self) {
        self.command("close");
        self.wait_exit();
    }

    pub(crate) fn wait_exit(&mut self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{} exited with {status}\n{}", self.name, self.diagnostics());
                return;
            }
            assert!(Instant::now() < deadline, "{} did not exit\n{}", self.name, self.diagnostics());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn diagnostics(&self) -> String {
        let events = self.events();
        let shown: Vec<String> = events
            .iter()
            .filter(|e| e["ev"] != "msgs" && e["ev"] != "commit")
            .map(|e| e.to_string())
            .chain(std::iter::once(format!("{} records processed", self.records().len())))
            .collect();
        let stderr = self.stderr.lock().unwrap();
        let tail = &stderr[stderr.len().saturating_sub(3000)..];
        format!("--- {} events:\n{}\n--- {} stderr:\n{tail}", self.name, shown.join("\n"), self.name)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn diagnostics(members: &[&Member]) -> String {
    members.iter().map(|m| m.diagnostics()).collect::<Vec<_>>().join("\n")
}

/// Polls `done` every 20 ms until it holds (returns the seconds waited) or [`WAIT`] passes
/// (panics with the members' events).
fn wait_until(what: &str, members: &[&Member], mut done: impl FnMut() -> bool) -> f64 {
    let start = Instant::now();
    loop {
        if done() {
            return start.elapsed().as_secs_f64();
        }
        if start.elapsed() > WAIT {
            panic!("{what}: not within {WAIT:?}\n{}", diagnostics(members));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The partitions of a `ConsumerProtocolAssignment` (v0-v3: version, [topic, [partition]],
/// user data).
fn decode_assignment(bytes: &[u8]) -> BTreeSet<Tp> {
    let mut out = BTreeSet::new();
    if bytes.len() < 6 {
        return out;
    }
    let i16_at = |p: usize| i16::from_be_bytes([bytes[p], bytes[p + 1]]);
    let i32_at = |p: usize| i32::from_be_bytes(bytes[p..p + 4].try_into().unwrap());
    let mut pos = 2;
    let topics = i32_at(pos);
    pos += 4;
    for _ in 0..topics.max(0) {
        let len = i16_at(pos) as usize;
        let topic = String::from_utf8(bytes[pos + 2..pos + 2 + len].to_vec()).unwrap();
        pos += 2 + len;
        let n = i32_at(pos);
        pos += 4;
        for _ in 0..n.max(0) {
            out.insert((topic.clone(), i32_at(pos)));
            pos += 4;
        }
    }
    out
}

/// When the group is Stable with exactly `members.len()` members whose assignments (decoded
/// from DescribeGroups) are the ones the members hold (from their callbacks), and split every
/// partition of `topic` among them, each getting some: the generation id.
pub(crate) fn stable_generation(broker: &BrokerHandle, group: &str, topic: &str, members: &[&Member]) -> Option<i32> {
    let desc = broker.test_support().coordinator().describe_group(group);
    if desc.state != "Stable" || desc.members.len() != members.len() {
        return None;
    }
    let mut broker_view: Vec<BTreeSet<Tp>> = desc.members.iter().map(|m| decode_assignment(&m.assignment)).collect();
    let mut member_view: Vec<BTreeSet<Tp>> = members.iter().map(|m| m.assignment()).collect();
    broker_view.sort();
    member_view.sort();
    let all: BTreeSet<Tp> = (0..PARTITIONS).map(|p| (topic.to_string(), p)).collect();
    let union: BTreeSet<Tp> = member_view.iter().flatten().cloned().collect();
    let total: usize = member_view.iter().map(BTreeSet::len).sum();
    let split = union == all && total == all.len() && member_view.iter().all(|a| !a.is_empty());
    (split && broker_view == member_view).then_some(desc.generation_id)
}

/// How often each record was processed, over all `members`.
fn record_counts(members: &[&Member]) -> BTreeMap<Rec, usize> {
    let mut counts = BTreeMap::new();
    for m in members {
        for r in m.records() {
            *counts.entry(r).or_insert(0) += 1;
        }
    }
    counts
}

/// Waits until every record of `want` was processed by one of `members`.
fn wait_consumed(what: &str, members: &[&Member], want: &[Rec]) -> f64 {
    wait_until(what, members, || {
        let counts = record_counts(members);
        want.iter().all(|r| counts.contains_key(r))
    })
}

/// Asserts that `members` processed exactly the records of `want`, each once.
fn assert_exactly_once(what: &str, members: &[&Member], want: &[Rec]) {
    let counts = record_counts(members);
    let want_set: BTreeSet<&Rec> = want.iter().collect();
    let extra: Vec<&Rec> = counts.keys().filter(|r| !want_set.contains(r)).take(5).collect();
    let missing: Vec<&&Rec> = want_set.iter().filter(|r| !counts.contains_key(**r)).take(5).collect();
    let dups: Vec<(&Rec, &usize)> = counts.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(
        extra.is_empty() && missing.is_empty() && dups.is_empty(),
        "{what}: records not processed exactly once: extra {extra:?}, missing {missing:?}, duplicated {dups:?}\n{}",
        diagnostics(members)
    );
}

fn assert_no_complaints(what: &str, members: &[&Member]) {
    for m in members {
        let c = m.complaints();
        assert!(c.is_empty(), "{what}: {}: {c:?}\n{}", m.name, diagnostics(members));
    }
}

/// Runs kcat with `args` and `stdin`, killed after [`WAIT`]; asserts success, returns stdout.
fn kcat_run(args: &[&str], stdin: &str) -> String {
    crate::common::kcat(args, stdin, WAIT).expect_success(&format!("kcat {args:?}"))
}

fn settings() -> Value {
    json!({"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS})
}

/// Issue 5 (1): three librdkafka members split a 12-partition topic (each partition owned by
/// exactly one, as the coordinator and their `on_assign` callbacks agree) and process every
/// record exactly once.
#[test]
fn three_librdkafka_members_split_the_partitions_and_consume_each_record_once() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("split", "split-topic");
    produce(&python, &broker, topic, 0, true); // CreateTopics, 12 partitions
    let start = Instant::now();
    let mut members: Vec<Member> =
        (0..3).map(|i| Member::spawn(&python, &broker, group, topic, settings(), &format!("m{i}"))).collect();
    let refs: Vec<&Member> = members.iter().collect();
    wait_until("three members stable", &refs, || stable_generation(&broker, group, topic, &refs).is_some());
    eprintln!("3 librdkafka members stable after {:.2} s: {:?}", start.elapsed().as_secs_f64(), {
        refs.iter().map(|m| m.assignment().into_iter().map(|(_, p)| p).collect::<Vec<_>>()).collect::<Vec<_>>()
    });
    let want = produce(&python, &broker, topic, 1200, false);
    let took = wait_consumed("1200 records consumed", &refs, &want);
    eprintln!("3 members consumed 1200 records in {took:.2} s");
    assert_exactly_once("three members", &refs, &want);
    assert_no_complaints("three members", &refs);
    let committed: i64 = match broker.test_support().coordinator().fetch_offsets(group, None) {
        Ok(topics) => topics.iter().flat_map(|(_, ps)| ps).map(|(_, c)| c.as_ref().map_or(0, |c| c.offset)).sum(),
        Err(e) => panic!("OffsetFetch: error {e}"),
    };
    assert_eq!(committed, 1200, "committed offsets over all partitions");
    drop(refs);
    members.iter_mut().for_each(|m| m.command("close"));
    members.iter_mut().for_each(Member::wait_exit);
    assert_eq!(broker.test_support().coordinator().describe_group(group).state, "Empty");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Issue 5 (2): a SIGKILLed member's partitions move to the others after `session.timeout.ms`;
/// a closed member's (LeaveGroup) within about a heartbeat interval plus the rejoin. No record
/// is lost; the only duplicates are records processed after their member's last commit.
#[test]
fn killed_member_moves_after_the_session_timeout_and_closed_member_at_once() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("failover", "failover-topic");
    create_topic(&broker, topic, PARTITIONS);
    let mut a = Member::spawn(&python, &broker, group, topic, settings(), "a");
    let mut b = Member::spawn(&python, &broker, group, topic, settings(), "b");
    let mut victim = Member::spawn(&python, &broker, group, topic, settings(), "victim");
    wait_until("three members stable", &[&a, &b, &victim], || {
        stable_generation(&broker, group, topic, &[&a, &b, &victim]).is_some()
    });
    let mut want = produce(&python, &broker, topic, 600, false);
    wait_consumed("first 600 records", &[&a, &b, &victim], &want);
    // The victim keeps processing but stops committing, then dies: its records since its last
    // commit are processed again by the others, nothing else is.
    victim.command("nocommit");
    std::thread::sleep(Duration::from_millis(200));
    want.extend(produce(&python, &broker, topic, 600, false));
    wait_consumed("second 600 records", &[&a, &b, &victim], &want);
    let victim_partitions = victim.assignment();
    let uncommitted = victim.uncommitted();
    assert!(!uncommitted.is_empty(), "the victim processed nothing after it stopped committing");
    let killed_at = victim.kill();
    wait_until("a and b own every partition after the kill", &[&a, &b, &victim], || {
        stable_generation(&broker, group, topic, &[&a, &b]).is_some()
    });
    let sigkill_s = a.last_assign_time().max(b.last_assign_time()) - killed_at;
    eprintln!(
        "SIGKILL: the victim's {} partitions moved {sigkill_s:.2} s after the kill (session.timeout.ms={SESSION_TIMEOUT_MS})",
        victim_partitions.len()
    );
    let session_s = SESSION_TIMEOUT_MS as f64 / 1000.0;
    let heartbeat_s = HEARTBEAT_INTERVAL_MS as f64 / 1000.0;
    assert!(
        sigkill_s >= session_s - heartbeat_s - 0.5 && sigkill_s < session_s + 10.0,
        "SIGKILL reassignment after {sigkill_s:.2} s, want about the session timeout ({session_s} s)"
    );
    wait_consumed("the victim's uncommitted records again", &[&a, &b, &victim], &want);

    // A clean close: LeaveGroup, and the survivor rebalances at its next heartbeat.
    b.close();
    wait_until("a owns every partition after b's close", &[&a, &b], || {
        stable_generation(&broker, group, topic, &[&a]).is_some()
    });
    let leave_s = a.last_assign_time() - b.time_of("closing");
    eprintln!(
        "LeaveGroup: b's partitions moved to a {leave_s:.2} s after b began close() (heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS})"
    );
    assert!(leave_s < 3.0, "LeaveGroup reassignment took {leave_s:.2} s");
    want.extend(produce(&python, &broker, topic, 240, false));
    wait_consumed("last 240 records", &[&a, &b, &victim], &want);

    let all = [&a, &b, &victim];
    let counts = record_counts(&all);
    let want_set: BTreeSet<&Rec> = want.iter().collect();
    assert_eq!(counts.len(), want.len(), "records processed that were never produced");
    assert!(counts.keys().all(|r| want_set.contains(r)));
    let dups: BTreeSet<Rec> = counts.iter().filter(|(_, &n)| n > 1).map(|(r, _)| r.clone()).collect();
    assert!(counts.values().all(|&n| n <= 2), "a record processed three times or more");
    let may_repeat: BTreeSet<Rec> = all.iter().flat_map(|m| m.uncommitted()).collect();
    assert!(
        dups.is_subset(&may_repeat),
        "duplicates of committed records: {:?}",
        dups.difference(&may_repeat).take(5).collect::<Vec<_>>()
    );
    assert!(
        uncommitted.is_subset(&dups),
        "the victim's uncommitted records were not processed again: {:?}",
        uncommitted.difference(&dups).take(5).collect::<Vec<_>>()
    );
    eprintln!("{} records, {} processed twice (all after the victim's last commit)", want.len(), dups.len());
    a.close();
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Issue 5 (3): two groups on one topic each receive every record (one group of two members,
/// one of one).
#[test]
fn two_groups_each_receive_every_record() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let topic = "broadcast";
    create_topic(&broker, topic, PARTITIONS);
    let mut g1a = Member::spawn(&python, &broker, "g1", topic, settings(), "g1a");
    let mut g1b = Member::spawn(&python, &broker, "g1", topic, settings(), "g1b");
    let mut g2 = Member::spawn(&python, &broker, "g2", topic, settings(), "g2");
    let all = [&g1a, &g1b, &g2];
    wait_until("both groups stable", &all, || {
        stable_generation(&broker, "g1", topic, &[&g1a, &g1b]).is_some()
            && stable_generation(&broker, "g2", topic, &[&g2]).is_some()
    });
    let want = produce(&python, &broker, topic, 600, false);
    wait_consumed("g1 has every record", &[&g1a, &g1b], &want);
    wait_consumed("g2 has every record", &[&g2], &want);
    assert_exactly_once("group g1", &[&g1a, &g1b], &want);
    assert_exactly_once("group g2", &[&g2], &want);
    assert_no_complaints("two groups", &all);
    for g in ["g1", "g2"] {
        let offsets = broker.test_support().coordinator().fetch_offsets(g, None).unwrap();
        let sum: i64 = offsets.iter().flat_map(|(_, ps)| ps).map(|(_, c)| c.as_ref().map_or(0, |c| c.offset)).sum();
        assert_eq!(sum, 600, "{g}: committed offsets");
    }
    g1a.command("close");
    g1b.command("close");
    g2.command("close");
    for m in [&mut g1a, &mut g1b, &mut g2] {
        m.wait_exit();
    }
    broker.shutdown().unwrap();
}

/// Issue 5 (4): after a broker restart on the same log directory, the group resumes from its
/// committed offsets (replayed from `__consumer_offsets`), not from the start.
#[test]
fn group_resumes_from_committed_offsets_after_a_broker_restart() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (group, topic) = ("restart", "restart-topic");
    let broker = start_in(tmp.path());
    create_topic(&broker, topic, PARTITIONS);
    let want = produce(&python, &broker, topic, 480, false);
    let mut first =
        Member::spawn(&python, &broker, group, topic, json!({"max_records": 200, "session.timeout.ms": 6000}), "first");
    first.wait_exit();
    let done = first.records();
    assert_eq!(done.len(), 200, "the first member processes exactly max_records");
    assert!(first.uncommitted().is_empty(), "the first member committed what it processed");
    assert_no_complaints("before the restart", &[&first]);
    let before = broker.test_support().coordinator().describe_group(group);
    assert_eq!(before.state, "Empty", "the only member left");
    broker.shutdown().unwrap();

    let broker = start_in(tmp.path());
    let stored: i64 = broker
        .test_support()
        .coordinator()
        .fetch_offsets(group, None)
        .unwrap()
        .iter()
        .flat_map(|(_, ps)| ps)
        .map(|(_, c)| c.as_ref().map_or(0, |c| c.offset))
        .sum();
    assert_eq!(stored, 200, "committed offsets replayed from __consumer_offsets");
    let after = broker.test_support().coordinator().describe_group(group);
    assert_eq!(
        (after.state, after.generation_id),
        ("Empty", before.generation_id),
        "group metadata replayed from __consumer_offsets"
    );
    let mut second = Member::spawn(&python, &broker, group, topic, settings(), "second");
    let rest: Vec<Rec> = want.iter().filter(|r| !done.contains(r)).cloned().collect();
    wait_consumed("the rest after the restart", &[&first, &second], &rest);
    second.close();
    assert_exactly_once("first + second", &[&first, &second], &want);
    assert_no_complaints("after the restart", &[&second]);
    broker.shutdown().unwrap();
}

/// Issue 5 (5): a static member (`group.instance.id`) SIGKILLed and restarted inside its
/// session timeout takes its old partitions back without a rebalance: the generation stays, the
/// other member's callbacks do not fire, also once the old session would have expired.
#[test]
fn static_member_restart_inside_the_session_timeout_does_not_rebalance() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("static", "static-topic");
    create_topic(&broker, topic, PARTITIONS);
    let with_id = |id: &str| {
        let mut s = settings();
        s["group.instance.id"] = json!(id);
        s
    };
    // `a` joins first and leads: its restart is the static leader's (KIP-814 skip_assignment).
    let mut a = Member::spawn(&python, &broker, group, topic, with_id("static-a"), "a");
    wait_until("a alone", &[&a], || !a.assignment().is_empty());
    let mut b = Member::spawn(&python, &broker, group, topic, with_id("static-b"), "b");
    wait_until("a and b stable", &[&a, &b], || stable_generation(&broker, group, topic, &[&a, &b]).is_some());
    let generation = stable_generation(&broker, group, topic, &[&a, &b]).unwrap();
    let a_partitions = a.assignment();
    let b_callbacks =
        b.events().iter().filter(|e| matches!(e["ev"].as_str(), Some("assign" | "revoke" | "lost"))).count();

    let killed_at = a.kill();
    let mut a2 = Member::spawn(&python, &broker, group, topic, with_id("static-a"), "a2");
    wait_until("a2 has a's partitions", &[&a2, &b], || a2.assignment() == a_partitions);
    let back_s = a2.last_assign_time() - killed_at;
    eprintln!(
        "static member: a2 started {:.2} s and held a's {} partitions {back_s:.2} s after the kill of a",
        a2.time_of("started") - killed_at,
        a_partitions.len()
    );
    assert!(back_s * 1000.0 < SESSION_TIMEOUT_MS as f64, "the restart took longer than the session timeout");
    // Past the old member's session timeout: still no rebalance.
    let until = killed_at + SESSION_TIMEOUT_MS as f64 / 1000.0 + 1.5;
    while now_s() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let desc = broker.test_support().coordinator().describe_group(group);
    assert_eq!(
        (desc.state, desc.generation_id),
        ("Stable", generation),
        "the restart rebalanced\n{}",
        diagnostics(&[&a2, &b])
    );
    assert_eq!(stable_generation(&broker, group, topic, &[&a2, &b]), Some(generation));
    let b_now = b.events().iter().filter(|e| matches!(e["ev"].as_str(), Some("assign" | "revoke" | "lost"))).count();
    assert_eq!(b_now, b_callbacks, "b's rebalance callbacks fired\n{}", diagnostics(&[&a2, &b]));
    let mut want = produce(&python, &broker, topic, 240, false);
    wait_consumed("records after the restart", &[&a2, &b], &want);
    assert_exactly_once("a2 + b", &[&a2, &b], &want);

    // A rolling restart: close() of a static member sends no LeaveGroup (KIP-345), so the
    // group does not rebalance either, and a3 resumes at a2's commits.
    let closing = now_s();
    a2.close();
    let mut a3 = Member::spawn(&python, &broker, group, topic, with_id("static-a"), "a3");
    wait_until("a3 has a's partitions", &[&a3, &b], || a3.assignment() == a_partitions);
    eprintln!("static member: a3 held a's partitions {:.2} s after a2 began close()", a3.last_assign_time() - closing);
    let desc = broker.test_support().coordinator().describe_group(group);
    assert_eq!(
        (desc.state, desc.generation_id),
        ("Stable", generation),
        "the close rebalanced\n{}",
        diagnostics(&[&a3, &b])
    );
    want.extend(produce(&python, &broker, topic, 120, false));
    wait_consumed("records after the second restart", &[&a2, &a3, &b], &want);
    assert_exactly_once("a2 + a3 + b", &[&a2, &a3, &b], &want);
    let b_now = b.events().iter().filter(|e| matches!(e["ev"].as_str(), Some("assign" | "revoke" | "lost"))).count();
    assert_eq!(b_now, b_callbacks, "b's rebalance callbacks fired\n{}", diagnostics(&[&a3, &b]));
    assert_no_complaints("static members", &[&a2, &a3, &b]);
    a3.close();
    b.close();
    broker.shutdown().unwrap();
}

/// Issue 5 (6): kafka-python's `KafkaConsumer(group_id=...)` subscribes, consumes and commits,
/// and a second consumer of the group resumes after the commit.
#[test]
fn kafka_python_group_consumer_subscribes_consumes_and_commits() {
    let Some(python) = python_with("kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("kp-group", "kp-group-topic");
    create_topic(&broker, topic, 3);
    let bootstrap = broker.local_addr().to_string();
    let summary = run_script_args(&python, "group_kafka_python.py", &[&bootstrap, topic, group], "kafka-python group");
    eprintln!("kafka-python group: {summary}");
    assert_eq!(summary["first"], 90);
    assert_eq!(summary["second"], 30);
    let committed: i64 = broker
        .test_support()
        .coordinator()
        .fetch_offsets(group, None)
        .unwrap()
        .iter()
        .flat_map(|(_, ps)| ps)
        .map(|(_, c)| c.as_ref().map_or(0, |c| c.offset))
        .sum();
    assert_eq!(committed, 120);
    assert_eq!(broker.test_support().coordinator().describe_group(group).state, "Empty");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// Issue 5 (6): `kcat -G` (librdkafka's balanced consumer) consumes a topic in a group and its
/// commits hold: a second run of the group finds nothing left.
#[test]
fn kcat_balanced_consumer_consumes_in_a_group() {
    if !crate::common::kcat_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("kcat-group", "kcat-topic");
    create_topic(&broker, topic, 3);
    let b = broker.local_addr().to_string();
    let input: String = (0..60).map(|i| format!("key-{i}:value-{i}\n")).collect();
    kcat_run(&["-b", &b, "-t", topic, "-P", "-K:"], &input);
    let ends: Vec<i64> = (0..3).map(|p| broker.test_support().log_end_offset(topic, p).unwrap()).collect();
    assert_eq!(ends.iter().sum::<i64>(), 60);
    assert!(ends.iter().filter(|&&e| e > 0).count() >= 2, "keys spread over the partitions: {ends:?}");
    let args = ["-b", &b, "-G", group, topic, "-e", "-q", "-f", "%p:%o:%s\n", "-X", "auto.offset.reset=earliest"];
    let first = kcat_run(&args, "");
    let mut got: Vec<(i32, i64)> = first
        .lines()
        .map(|l| {
            let mut it = l.splitn(3, ':');
            (it.next().unwrap().parse().unwrap(), it.next().unwrap().parse().unwrap())
        })
        .collect();
    got.sort();
    let want: Vec<(i32, i64)> = (0..3).flat_map(|p| (0..ends[p as usize]).map(move |o| (p, o))).collect();
    assert_eq!(got, want, "kcat -G output:\n{first}");
    let committed: Vec<(i32, i64)> = broker
        .test_support()
        .coordinator()
        .fetch_offsets(group, None)
        .unwrap()
        .into_iter()
        .flat_map(|(_, ps)| ps)
        .map(|(p, c)| (p, c.map_or(-1, |c| c.offset)))
        .collect();
    assert_eq!(committed, (0..3).map(|p| (p, ends[p as usize])).collect::<Vec<_>>(), "kcat's commits");
    let second = kcat_run(&args, "");
    assert_eq!(second, "", "a second kcat -G run of the group re-read committed records");
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}

/// librdkafka's `cooperative-sticky` assignor (KIP-429: incremental rebalances, two JoinGroup
/// rounds when partitions move): three members split the topic; when one closes, only its
/// partitions move (the others keep theirs, no revocation) and every record is processed once.
#[test]
fn cooperative_sticky_members_move_only_the_leavers_partitions() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("coop", "coop-topic");
    create_topic(&broker, topic, PARTITIONS);
    let mut s = settings();
    s["partition.assignment.strategy"] = json!("cooperative-sticky");
    let mut a = Member::spawn(&python, &broker, group, topic, s.clone(), "a");
    let mut b = Member::spawn(&python, &broker, group, topic, s.clone(), "b");
    let mut c = Member::spawn(&python, &broker, group, topic, s, "c");
    wait_until("three cooperative members stable", &[&a, &b, &c], || {
        stable_generation(&broker, group, topic, &[&a, &b, &c]).is_some()
    });
    let mut want = produce(&python, &broker, topic, 600, false);
    wait_consumed("600 records", &[&a, &b, &c], &want);
    let (a_before, b_before) = (a.assignment(), b.assignment());
    let revokes = |m: &Member| m.events_named("revoke").len() + m.events_named("lost").len();
    let (a_revokes, b_revokes) = (revokes(&a), revokes(&b));
    c.close();
    wait_until("a and b own every partition", &[&a, &b, &c], || {
        stable_generation(&broker, group, topic, &[&a, &b]).is_some()
    });
    let moved_s = a.last_assign_time().max(b.last_assign_time()) - c.time_of("closing");
    eprintln!("cooperative-sticky: c's partitions moved {moved_s:.2} s after c began close()");
    assert!(a.assignment().is_superset(&a_before) && b.assignment().is_superset(&b_before), "sticky");
    assert_eq!((revokes(&a), revokes(&b)), (a_revokes, b_revokes), "a and b revoked partitions");
    want.extend(produce(&python, &broker, topic, 240, false));
    wait_consumed("240 more records", &[&a, &b, &c], &want);
    assert_exactly_once("cooperative", &[&a, &b, &c], &want);
    assert_no_complaints("cooperative", &[&a, &b, &c]);
    a.close();
    b.close();
    broker.shutdown().unwrap();
}

/// The leader SIGKILLed just as a new member joins: the rebalance waits for the dead leader only
/// until its session times out (Kafka removes expired members during PreparingRebalance too),
/// not for the rebalance timeout (librdkafka's `max.poll.interval.ms`, 300 s by default); a new
/// leader is elected among the others and every partition is owned again.
#[test]
fn leader_killed_during_a_rebalance_is_dropped_after_its_session_timeout() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let (group, topic) = ("dead-leader", "dead-leader-topic");
    create_topic(&broker, topic, PARTITIONS);
    let mut leader = Member::spawn(&python, &broker, group, topic, settings(), "leader");
    wait_until("the leader alone", &[&leader], || !leader.assignment().is_empty());
    let b = Member::spawn(&python, &broker, group, topic, settings(), "b");
    wait_until("leader and b stable", &[&leader, &b], || {
        stable_generation(&broker, group, topic, &[&leader, &b]).is_some()
    });
    let generation = stable_generation(&broker, group, topic, &[&leader, &b]).unwrap();
    let c = Member::spawn(&python, &broker, group, topic, settings(), "c");
    wait_until("c's JoinGroup began a rebalance", &[&b, &c], || {
        broker.test_support().coordinator().describe_group(group).state == "PreparingRebalance"
    });
    let killed_at = leader.kill();
    wait_until("b and c own every partition", &[&leader, &b, &c], || {
        stable_generation(&broker, group, topic, &[&b, &c]).is_some_and(|g| g > generation)
    });
    let took = b.last_assign_time().max(c.last_assign_time()) - killed_at;
    eprintln!("leader killed during a rebalance: b and c stable {took:.2} s after the kill");
    assert!(took < SESSION_TIMEOUT_MS as f64 / 1000.0 + 10.0, "the rebalance waited {took:.2} s");
    let want = produce(&python, &broker, topic, 240, false);
    wait_consumed("records after the rebalance", &[&b, &c], &want);
    assert_exactly_once("b + c", &[&b, &c], &want);
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
