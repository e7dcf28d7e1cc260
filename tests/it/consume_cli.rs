//! `fetchbench consume` (`client::consume_cmd`), mostly as a child process (issue 12, items 5
//! and 7): `--max-records` in a group commits exactly what it printed, internal topics
//! (`__consumer_offsets`) are readable by assignment, `exclude.internal.topics` keeps them out of
//! pattern subscriptions, and a partition without a leader is reported instead of waited for in
//! silence; `--exit-at-end` on empty and filled partitions (in process), and SIGINT committing
//! what was printed and leaving the group.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fetchbench::broker::BrokerHandle;
use fetchbench::client::consume_cmd::{self, ConsumeArgs};
use fetchbench::client::consumer::{Consumer, ConsumerConfig, TopicPartition};

use crate::common::{run_with_timeout, start_group_broker, ChildOutput};
use crate::consumer_positions::{config, produce, start_in, WAIT};

/// A generous bound for one `consume --exit-at-end` run (each takes well under a second here).
const RUN: Duration = Duration::from_secs(60);

/// `__consumer_offsets` partitions of the test brokers (Kafka's default is 50; fewer keep the
/// whole-topic runs small).
const OFFSETS_PARTITIONS: i32 = 5;

/// A broker for consumer groups with 3 partitions per auto-created topic and a small
/// `__consumer_offsets` ([`OFFSETS_PARTITIONS`]).
fn start_with_small_offsets_topic(dir: &Path) -> BrokerHandle {
    start_group_broker(dir, "127.0.0.1:0".parse().unwrap(), |c| {
        c.num_partitions = 3;
        c.offsets_topic_num_partitions = OFFSETS_PARTITIONS;
    })
}

fn consumer_config(addr: SocketAddr, pairs: &[(&str, &str)]) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(addr.to_string());
    for (k, v) in [
        ("fetch.max.wait.ms", "100"),
        ("heartbeat.interval.ms", "300"),
        ("session.timeout.ms", "6000"),
        ("request.timeout.ms", "5000"),
    ]
    .iter()
    .chain(pairs)
    {
        c.set(k, v).unwrap();
    }
    c
}

/// The committed offsets of `group` for `partitions`, read back through OffsetFetch.
fn committed(addr: SocketAddr, group: &str, partitions: &[TopicPartition]) -> Vec<Option<i64>> {
    let mut c = Consumer::new(consumer_config(addr, &[("group.id", group)])).unwrap();
    let got = c.committed(partitions).unwrap();
    partitions.iter().map(|tp| got[tp]).collect()
}

/// Runs `fetchbench consume --bootstrap addr <args>` (short fetch waits and session timeout).
fn consume(addr: SocketAddr, args: &[&str], timeout: Duration) -> ChildOutput {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fetchbench"));
    cmd.args(["consume", "--bootstrap", &addr.to_string()]).args(args).args([
        "-X",
        "fetch.max.wait.ms=100",
        "-X",
        "session.timeout.ms=6000",
        "-X",
        "heartbeat.interval.ms=300",
    ]);
    run_with_timeout(&mut cmd, None, timeout)
}

/// The `partition:offset` pairs of output lines in the format `%p:%o:%s\n`.
fn printed(stdout: &str) -> Vec<(i32, i64)> {
    stdout
        .lines()
        .map(|l| {
            let mut f = l.splitn(3, ':');
            (f.next().unwrap().parse().unwrap(), f.next().unwrap().parse().unwrap())
        })
        .collect()
}

/// Issue 12 item 5. Finding: `consume --max-records 2 --group g` printed offsets 0 and 1 but
/// committed the position after every record the last poll returned (up to
/// `max.poll.records`), so a restart in the group skipped the records returned but never
/// printed. Kafka's console consumer and kcat (`-c 2` commits 2) commit what was delivered.
/// Fixed: the CLI caps `max.poll.records` at `--max-records` and seeks every partition back to
/// its first record that was not printed before the closing commit.
#[test]
fn max_records_in_a_group_commits_exactly_what_was_printed() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "mr", 0, &["a", "b", "c", "d", "e", "f"]);
    let tp: TopicPartition = ("mr".into(), 0);
    let format = ["--format", "%p:%o:%s\\n"];
    let group = ["--topic", "mr", "--group", "g-mr", "--from-beginning"];

    let first =
        consume(addr, &[&group[..], &format, &["--max-records", "2"]].concat(), RUN).expect_success("first run");
    assert_eq!(first, "0:0:a\n0:1:b\n");
    assert_eq!(committed(addr, "g-mr", std::slice::from_ref(&tp)), [Some(2)], "committed = last printed + 1");

    let second =
        consume(addr, &[&group[..], &format, &["--max-records", "3"]].concat(), RUN).expect_success("second run");
    assert_eq!(second, "0:2:c\n0:3:d\n0:4:e\n", "the restart reads from exactly the committed offset");
    assert_eq!(committed(addr, "g-mr", std::slice::from_ref(&tp)), [Some(5)]);

    // Auto-commit during the run (every poll, interval 0) must not run ahead either.
    let third =
        consume(addr, &[&group[..], &format, &["--max-records", "1", "-X", "auto.commit.interval.ms=0"]].concat(), RUN)
            .expect_success("third run");
    assert_eq!(third, "0:5:f\n");
    assert_eq!(committed(addr, "g-mr", std::slice::from_ref(&tp)), [Some(6)]);
    broker.shutdown().unwrap();
}

/// Item 5 across partitions: a poll hands out records of several partitions; those not printed
/// (beyond `--max-records`) are not committed in any partition, so the next run of the group
/// prints exactly the rest, each record once.
#[test]
fn max_records_across_partitions_leaves_the_unprinted_records_to_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    for p in 0..3 {
        produce(addr, "mrp", p, &["a", "b", "c", "d"]);
    }
    let all: BTreeSet<(i32, i64)> = (0..3).flat_map(|p| (0..4).map(move |o| (p, o))).collect();
    let base = ["--topic", "mrp", "--group", "g-mrp", "--from-beginning", "--format", "%p:%o:%s\\n"];
    // A large max.poll.records given by the user is capped by --max-records too.
    let first = consume(addr, &[&base[..], &["--max-records", "5", "-X", "max.poll.records=500"]].concat(), RUN)
        .expect_success("first run");
    let first = printed(&first);
    assert_eq!(first.len(), 5, "{first:?}");
    let rest = consume(addr, &[&base[..], &["--exit-at-end"]].concat(), RUN).expect_success("second run");
    let rest = printed(&rest);
    let mut seen: Vec<(i32, i64)> = first.iter().chain(&rest).copied().collect();
    seen.sort();
    assert_eq!(seen, all.into_iter().collect::<Vec<_>>(), "every record exactly once over both runs");
    broker.shutdown().unwrap();
}

/// Commits offsets of `topic`-0 in `group` (a simple consumer: assign + commit), which writes
/// an offset commit record to the group's `__consumer_offsets` partition; returns that partition.
fn commit_offsets(broker: &BrokerHandle, group: &str, topic: &str, offset: i64) -> i32 {
    let addr = broker.local_addr();
    let tp: TopicPartition = (topic.into(), 0);
    let mut c = Consumer::new(consumer_config(addr, &[("group.id", group)])).unwrap();
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.commit_offsets(&[(tp, offset)].into_iter().collect(), true).unwrap();
    c.close().unwrap();
    broker.test_support().coordinator().partition_for(group)
}

/// Issue 12 item 7. Finding: `consume --topic __consumer_offsets` hung silently with
/// `--offset 0`, failed "no leader found" with `--offset beginning` and "no such topic" for the
/// whole topic: the consumer dropped internal topics from every Metadata answer. Kafka's
/// consumer reads internal topics by assignment (only pattern subscriptions leave them out,
/// `exclude.internal.topics`). Fixed: Metadata keeps internal topics; they are only left out
/// of pattern matches.
#[test]
fn consume_reads_consumer_offsets_by_assignment() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "committed-topic", 0, &["x", "y", "z"]);
    let partition = commit_offsets(&broker, "g-internal", "committed-topic", 2);
    let partition_arg = partition.to_string();
    // Raw keys: an offset commit key (v1) holds the group id and the topic name as strings.
    let format = ["--format", "%t:%p:%o:%k\\n"];
    let runs: [(&str, Vec<&str>); 4] = [
        ("--partition P --offset 0", vec!["--partition", &partition_arg, "--offset", "0"]),
        ("--partition P --offset beginning", vec!["--partition", &partition_arg, "--offset", "beginning"]),
        ("whole topic --offset beginning", vec!["--offset", "beginning"]),
        ("whole topic --offset 0", vec!["--offset", "0"]),
    ];
    for (what, args) in runs {
        let started = Instant::now();
        let out =
            consume(addr, &[&["--topic", "__consumer_offsets", "--exit-at-end"][..], &format, &args].concat(), RUN);
        let text = out.expect_success(what);
        let prefix = format!("__consumer_offsets:{partition}:0:");
        assert!(text.starts_with(&prefix), "{what}: the commit record printed first:\n{text}");
        assert!(text.contains("g-internal") && text.contains("committed-topic"), "{what}: raw key printed:\n{text}");
        assert!(started.elapsed() < RUN, "{what}");
    }
    // Subscribed by name in a group (only pattern subscriptions exclude internal topics).
    let args = ["--topic", "__consumer_offsets", "--group", "g-reader", "--from-beginning", "--exit-at-end"];
    let text = consume(addr, &[&args[..], &format].concat(), RUN).expect_success("in a group");
    assert!(
        text.contains(&format!("__consumer_offsets:{partition}:0:")),
        "in a group: the commit record printed:\n{text}"
    );
    broker.shutdown().unwrap();
}

/// Item 7, Kafka's `exclude.internal.topics` (default true): a pattern subscription matching
/// everything is not given `__consumer_offsets`; with `exclude.internal.topics=false` it is.
/// Explicit subscription by name is never affected (Kafka's `ConsumerConfig`).
#[test]
fn pattern_subscriptions_exclude_internal_topics_unless_told_otherwise() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "visible", 0, &["v"]);
    commit_offsets(&broker, "g-other", "visible", 1);
    let assigned_topics = |exclude: &str, group: &str| -> BTreeSet<String> {
        let settings = [("group.id", group), ("exclude.internal.topics", exclude), ("auto.offset.reset", "earliest")];
        let mut c = Consumer::new(consumer_config(addr, &settings)).unwrap();
        c.subscribe_pattern(".*").unwrap();
        let deadline = Instant::now() + RUN;
        while c.assignment().is_empty() {
            assert!(Instant::now() < deadline, "no assignment for the pattern subscription");
            c.poll(Duration::from_millis(200)).unwrap();
        }
        let topics = c.assignment().into_iter().map(|(t, _)| t).collect();
        c.close().unwrap();
        topics
    };
    let excluded = assigned_topics("true", "g-pattern-default");
    assert!(excluded.contains("visible"), "{excluded:?}");
    assert!(!excluded.contains("__consumer_offsets"), "internal topics stay out of patterns: {excluded:?}");
    let included = assigned_topics("false", "g-pattern-internal");
    assert!(included.contains("__consumer_offsets") && included.contains("visible"), "{included:?}");
    broker.shutdown().unwrap();
}

/// Item 7: a fetch that cannot find a leader must not wait in silence. A partition the topic
/// does not have, at an explicit offset (no ListOffsets, straight to Fetch), is reported on
/// stderr within a bounded time while the consumer keeps retrying.
#[test]
fn a_partition_without_a_leader_is_reported_not_waited_for_in_silence() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "three", 0, &["a"]);
    // Killed after 15 s: the report comes after 5 s without a leader.
    let out = consume(addr, &["--topic", "three", "--partition", "7", "--offset", "0"], Duration::from_secs(15));
    assert!(out.status.is_none(), "consume keeps waiting for a leader (Kafka's consumer retries): {}", out.stderr);
    assert!(
        out.stderr.contains("no leader for three-7") && out.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "the missing leader is reported:\n{}",
        out.stderr
    );
    broker.shutdown().unwrap();
}

/// Item 5 when a later poll returns more than remain: the first poll hands out the 2 records
/// there are, then 5 more arrive and the next poll (capped at `--max-records 3`) hands out 3,
/// of which 1 is printed. The 2 returned but unprinted must not be committed: the closing
/// commit is 3, not the position after the poll (5).
#[test]
fn max_records_rewinds_a_poll_that_returned_more_than_remain() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_with_small_offsets_topic(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "rw", 0, &["a", "b"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["consume", "--bootstrap", &addr.to_string(), "--topic", "rw", "--group", "g-rw", "--from-beginning"])
        .args(["--max-records", "3", "--format", "%p:%o:%s\\n", "-X", "fetch.max.wait.ms=100"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "0:0:a");
    assert_eq!(lines.next().unwrap().unwrap(), "0:1:b");
    produce(addr, "rw", 0, &["c", "d", "e", "f", "g"]);
    assert_eq!(lines.next().unwrap().unwrap(), "0:2:c");
    let deadline = Instant::now() + RUN;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("consume --max-records 3 did not exit after 3 records");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lines.next().is_none(), "nothing printed after the third record");
    let tp: TopicPartition = ("rw".into(), 0);
    assert_eq!(committed(addr, "g-rw", std::slice::from_ref(&tp)), [Some(3)], "committed = last printed + 1");
    broker.shutdown().unwrap();
}

fn consume_args(addr: SocketAddr, topic: &str) -> ConsumeArgs {
    ConsumeArgs {
        bootstrap: addr.to_string(),
        topic: topic.into(),
        group: None,
        partition: None,
        offset: None,
        from_beginning: false,
        exit_at_end: true,
        count: false,
        max_records: None,
        format: "%p:%o:%s\\n".into(),
        config: vec!["fetch.max.wait.ms=100".into()],
    }
}

/// `--exit-at-end` (kcat `-e`) on a topic whose partitions are empty exits at once with
/// nothing, and from the beginning prints every record and exits.
#[test]
fn consume_exit_at_end_on_empty_and_filled_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "eof", 2, &["x", "y"]);
    let mut args = consume_args(addr, "eof");
    args.from_beginning = true;
    let started = Instant::now();
    let mut out = Vec::new();
    let summary = consume_cmd::run(&args, &mut out).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(summary.records, 2);
    assert_eq!(String::from_utf8(out).unwrap(), "2:0:x\n2:1:y\n");

    // An offset past the end of one partition: auto.offset.reset (latest) applies, nothing is
    // printed, and the run still ends.
    let mut args = consume_args(addr, "eof");
    args.partition = Some(2);
    args.offset = Some("100".into());
    let mut out = Vec::new();
    let summary = consume_cmd::run(&args, &mut out).unwrap();
    assert_eq!(summary.records, 0);
    drop(broker);
}

/// Finding: Ctrl-C (SIGINT) or SIGTERM killed `fetchbench consume --group` on the spot: no
/// commit of what it printed (auto-commit) and no LeaveGroup, so the group waited out
/// `session.timeout.ms` and the next member re-read the records. kcat and Kafka's
/// console consumer close the consumer on SIGINT. Fixed: the first signal ends the run,
/// which closes the consumer (commit + LeaveGroup).
///
/// Also a finding: the records were held in a 64 KiB stdout buffer until exit (a tailing
/// `consume | ...` showed nothing); now each poll's records are flushed, as kcat's are.
#[test]
fn consume_cli_sigint_commits_and_leaves_the_group() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_in(tmp.path());
    let addr = broker.local_addr();
    produce(addr, "sigint", 0, &["a", "b", "c"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_fetchbench"))
        .args(["consume", "--bootstrap", &addr.to_string(), "--topic", "sigint", "--group", "g-sigint"])
        .args(["--from-beginning", "-X", "fetch.max.wait.ms=100", "-X", "session.timeout.ms=30000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for want in ["a", "b", "c"] {
        assert_eq!(lines.next().unwrap().unwrap(), want);
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("consume did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = status;
    let group = broker.test_support().coordinator().describe_group("g-sigint");
    assert_eq!(group.state, "Empty", "LeaveGroup sent: no member waits for its session timeout");
    let mut c = Consumer::new(config(addr, &[("group.id", "g-sigint")])).unwrap();
    let tp: TopicPartition = ("sigint".into(), 0);
    assert_eq!(c.committed(std::slice::from_ref(&tp)).unwrap()[&tp], Some(3), "the printed records committed");
    drop(c);
    broker.shutdown().unwrap();
}
