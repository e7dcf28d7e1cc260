//! Issue 12 (6): group membership churn with real clients. librdkafka members (confluent-kafka,
//! one `tests/python/group_member.py` process each) are started, closed (`consumer.close()`:
//! LeaveGroup) and SIGKILLed at seeded-random moments every 0.2-2.5 s on a 12-partition topic
//! while `tests/python/churn_producer.py` writes keyed, numbered records with acks=all and
//! reports every acknowledged one. Up to 14 members live at once; most kills are followed at once
//! by new members, and SIGKILL prefers members waiting in a rebalance: their parked JoinGroups and
//! the dead members the rebalance waits on share session deadlines, the trace of the bug. Then at
//! most nine stay and three stable members join. (With the original `Group::tick` this failed 3 of
//! 3 runs, the group stuck in PreparingRebalance with ghosts; the 3-10-member churn before never did.)
//!
//! What must hold (the campaign's failure: dead members kept forever by a stale timer in
//! `Group::tick`, so the group sat in PreparingRebalance with dozens of ghosts until the
//! rebalance timeout):
//! - the group is Stable with exactly the live members, each holding what the coordinator says
//!   it holds, within [`STABLE_WITHIN`] (five session timeouts) of the churn's end: dead members
//!   expire after their session timeout, not after the rebalance timeout (`max.poll.interval.ms`,
//!   set well above that bound so a ghost cannot hide behind it);
//! - no partition is assigned to two members in the same generation (the members' `on_assign`
//!   callbacks, with the generation librdkafka holds);
//! - every acknowledged record is consumed by some member (at least once; the killed members'
//!   uncommitted records are consumed again, so duplicates are allowed).
//!
//! Python or confluent-kafka missing: fails in CI, skips with a notice elsewhere
//! ([`crate::python_clients::python_with`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::group_clients::{diagnostics, stable_generation, Member, PARTITIONS};
use crate::python_clients::python_with;

/// The churn phase.
const CHURN: Duration = Duration::from_secs(35);
/// `session.timeout.ms` of every member (`heartbeat.interval.ms` is a third of it, Kafka's ratio).
const SESSION_TIMEOUT_MS: u64 = 6000;
/// `max.poll.interval.ms` (librdkafka's JoinGroup rebalance timeout): far beyond
/// [`STABLE_WITHIN`], so only session expiry can make the group stable in time.
const MAX_POLL_INTERVAL_MS: u64 = 90_000;
/// How soon after the churn the group must be Stable with the live members.
const STABLE_WITHIN: Duration = Duration::from_millis(5 * SESSION_TIMEOUT_MS);
/// How long the members may take to consume the last acknowledged records.
const DRAIN_WITHIN: Duration = Duration::from_secs(60);
/// The seed of the churn's choices (printed; `FETCHBENCH_CHURN_SEED` overrides it).
const SEED: u64 = 0x1212_c4a7;

/// SplitMix64: the seeded choices of the churn (no dependency for a few dozen draws).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// The producer process: every acknowledged (partition, offset) as it reports them.
struct Producer {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<Vec<Value>>>,
}

impl Producer {
    fn spawn(python: &Path, bootstrap: &str, topic: &str) -> Producer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/churn_producer.py");
        let mut child = Command::new(python)
            .arg(&script)
            .args([bootstrap, topic])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", script.display()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(serde_json::from_str(&line).unwrap_or(Value::String(line)));
            }
        });
        Producer { stdin: child.stdin.take(), child, events }
    }

    /// Asks the producer to stop, waits for its flush; returns the acknowledged records.
    fn stop(&mut self, topic: &str) -> Vec<(String, i32, i64)> {
        let mut stdin = self.stdin.take().expect("producer running");
        writeln!(stdin, "stop").unwrap();
        drop(stdin);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the producer did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        let events = self.events.lock().unwrap().clone();
        let done = events.iter().find(|e| e["ev"] == "done").unwrap_or_else(|| panic!("producer: {events:?}"));
        eprintln!("churn producer: {done}");
        assert_eq!(done["in_flight"], 0, "records still in flight after the flush");
        events
            .iter()
            .filter(|e| e["ev"] == "acked")
            .flat_map(|e| e["recs"].as_array().unwrap().clone())
            .map(|r| (topic.to_string(), r[0].as_i64().unwrap() as i32, r[1].as_i64().unwrap()))
            .collect()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (generation, partition) -> the members whose `on_assign` of that generation held it.
fn owners_by_generation(members: &[Member]) -> BTreeMap<(i64, i32), Vec<String>> {
    let mut owners: BTreeMap<(i64, i32), Vec<String>> = BTreeMap::new();
    for m in members {
        for e in m.events_named("assign") {
            let generation =
                e["gen"].as_i64().unwrap_or_else(|| panic!("{}: assign without a generation: {e}", m.name));
            for p in e["parts"].as_array().unwrap() {
                owners.entry((generation, p[1].as_i64().unwrap() as i32)).or_default().push(m.name.clone());
            }
        }
    }
    owners
}

/// The index in `live` of the member to SIGKILL: one waiting in a rebalance (its last
/// `revoke` came after its last `assign`) if there is one, else any.
fn pick_victim(members: &[Member], live: &[usize], rng: &mut Rng) -> usize {
    let last = |m: &Member, ev: &str| m.events_named(ev).last().and_then(|e| e["t"].as_f64()).unwrap_or(0.0);
    let waiting: Vec<usize> = (0..live.len())
        .filter(|&k| {
            let m = &members[live[k]];
            last(m, "revoke") > last(m, "assign")
        })
        .collect();
    match waiting.is_empty() {
        true => rng.range(0, live.len() as u64) as usize,
        false => waiting[rng.range(0, waiting.len() as u64) as usize],
    }
}

#[test]
fn dead_members_expire_under_churn_and_the_group_settles() {
    let Some(python) = python_with("confluent_kafka") else { return };
    let seed = std::env::var("FETCHBENCH_CHURN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED);
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let broker = crate::common::start_group_broker(tmp.path(), "127.0.0.1:0".parse().unwrap(), |_| {});
    let (group, topic) = ("churn", "churn-topic");
    {
        broker.test_support().create_topic(topic, PARTITIONS).unwrap();
    }
    let bootstrap = broker.local_addr().to_string();
    let settings = json!({
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": SESSION_TIMEOUT_MS / 3,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
    });
    let mut producer = Producer::spawn(&python, &bootstrap, topic);
    let coordinator = broker.test_support().coordinator();

    // Churn: every 0.2-2.5 s start one to three members, SIGKILL one to three (then, most
    // often, start one or two at once, so the rebalance they begin waits on the dead ones while
    // the live ones sit in it), or close one; 4 to 14 live members (SIGKILL prefers
    // members waiting in a rebalance: revoked, not assigned since).
    let mut members: Vec<Member> = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    let mut closing: Vec<usize> = Vec::new();
    let (mut started, mut closed, mut killed, mut most_members) = (0, 0, 0, 0);
    let churn_start = Instant::now();
    let mut start = |members: &mut Vec<Member>, live: &mut Vec<usize>| {
        let name = format!("churn{started}");
        members.push(Member::spawn(&python, &broker, group, topic, settings.clone(), &name));
        live.push(members.len() - 1);
        started += 1;
    };
    while churn_start.elapsed() < CHURN {
        std::thread::sleep(Duration::from_millis(rng.range(200, 2500)));
        let roll = rng.range(0, 100);
        if live.len() < 4 || (live.len() < 12 && roll < 40) {
            for _ in 0..rng.range(1, 4) {
                start(&mut members, &mut live);
            }
        } else if roll < 85 {
            for _ in 0..rng.range(1, 4).min(live.len() as u64 - 1) {
                let i = live.swap_remove(pick_victim(&members, &live, &mut rng));
                members[i].kill();
                killed += 1;
            }
            if rng.range(0, 100) < 60 {
                for _ in 0..rng.range(1, 3) {
                    start(&mut members, &mut live);
                }
            }
        } else {
            // close() sends LeaveGroup; the process exits on its own (checked at the end).
            let i = live.swap_remove(rng.range(0, live.len() as u64) as usize);
            members[i].command("close");
            closing.push(i);
            closed += 1;
        }
        let desc = coordinator.describe_group(group);
        most_members = most_members.max(desc.members.len());
    }
    // At most nine stay, so that with the three stable ones every member gets a partition.
    while live.len() > 9 {
        let i = live.swap_remove(pick_victim(&members, &live, &mut rng));
        members[i].kill();
        killed += 1;
    }
    let desc = coordinator.describe_group(group);
    eprintln!(
        "churn (seed {seed:#x}): {started} started, {closed} closed, {killed} killed, {} alive; the group \
         had up to {most_members} members; at the end {} with {} members (generation {})",
        live.len(),
        desc.state,
        desc.members.len(),
        desc.generation_id
    );

    // Three stable members join; the group must settle with exactly the live members.
    let churn_end = Instant::now();
    for i in 0..3 {
        members.push(Member::spawn(&python, &broker, group, topic, settings.clone(), &format!("stable{i}")));
        live.push(members.len() - 1);
    }
    let generation = loop {
        let refs: Vec<&Member> = live.iter().map(|&i| &members[i]).collect();
        if let Some(generation) = stable_generation(&broker, group, topic, &refs) {
            break generation;
        }
        if churn_end.elapsed() > STABLE_WITHIN {
            let desc = coordinator.describe_group(group);
            panic!(
                "the group did not settle with its {} live members within {STABLE_WITHIN:?} of the churn's end: \
                 {} with {} members (generation {})\n{}",
                live.len(),
                desc.state,
                desc.members.len(),
                desc.generation_id,
                diagnostics(&refs)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "churn: Stable with the {} live members (generation {generation}) {:.2} s after the churn",
        live.len(),
        churn_end.elapsed().as_secs_f64()
    );

    // Every acknowledged record is consumed by some member.
    let acked = producer.stop(topic);
    assert!(acked.len() > 1000, "the producer wrote only {} records", acked.len());
    let drain_start = Instant::now();
    loop {
        let consumed: BTreeSet<(String, i32, i64)> = members.iter().flat_map(|m| m.records()).collect();
        let missing: Vec<_> = acked.iter().filter(|r| !consumed.contains(*r)).collect();
        if missing.is_empty() {
            break;
        }
        if drain_start.elapsed() > DRAIN_WITHIN {
            let refs: Vec<&Member> = live.iter().map(|&i| &members[i]).collect();
            panic!(
                "{} of {} acknowledged records never consumed, e.g. {:?}\n{}",
                missing.len(),
                acked.len(),
                &missing[..missing.len().min(5)],
                diagnostics(&refs)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let total: usize = members.iter().map(|m| m.records().len()).sum();
    eprintln!("churn: {} acknowledged records all consumed ({total} deliveries)", acked.len());

    // No partition owned twice in one generation.
    let owners = owners_by_generation(&members);
    let twice: Vec<_> = owners.iter().filter(|(_, who)| who.len() > 1).collect();
    assert!(twice.is_empty(), "partitions assigned to two members in one generation: {twice:?}");
    assert!(owners.keys().any(|(g, _)| i64::from(generation) == *g), "no member reported generation {generation}");

    // The closed members exited cleanly; the live ones close; nothing is left running.
    for &i in &closing {
        members[i].wait_exit();
    }
    for &i in &live {
        members[i].close();
    }
    assert_eq!(broker.test_support().connection_panics(), 0);
    broker.shutdown().unwrap();
}
