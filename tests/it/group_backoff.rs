//! A coordinator that cannot store the group's assignment (`__consumer_offsets` cannot be
//! written, as on a full disk) answers every SyncGroup COORDINATOR_NOT_AVAILABLE. Our consumer
//! must back off between rejoins (`retry.backoff.ms` doubling to `retry.backoff.max.ms`, as
//! Kafka's `AbstractCoordinator`), let `poll` return at its timeout meanwhile, and when it gives
//! up (the rebalances failed for `max.poll.interval.ms`) send LeaveGroup before the error.
//! It used to rejoin 100 times in under 0.5 s and fail without leaving.

use std::time::{Duration, Instant};

use fetchbench::client::consumer::{Consumer, ConsumerConfig};

const GROUP: &str = "stuck";

#[test]
fn rejoins_back_off_while_the_assignment_cannot_be_stored_and_the_member_leaves_on_give_up() {
    let dir = tempfile::tempdir().unwrap();
    let broker = crate::common::start_group_broker(dir.path(), "127.0.0.1:0".parse().unwrap(), |_| {});
    // A file where the first partition of __consumer_offsets would go: creating the topic (on
    // the coordinator's first write, the leader's assignment) fails every time.
    std::fs::write(dir.path().join("__consumer_offsets-0"), b"not a directory").unwrap();

    let mut config = ConsumerConfig::new(broker.local_addr().to_string());
    for (k, v) in [
        ("group.id", GROUP),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "300"),
        ("max.poll.interval.ms", "3000"),
        ("retry.backoff.ms", "100"),
        ("retry.backoff.max.ms", "1000"),
    ] {
        config.set(k, v).unwrap();
    }
    let mut consumer = Consumer::new(config).unwrap();
    consumer.subscribe(&["backoff"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut empty_polls = 0;
    let error = loop {
        assert!(Instant::now() < deadline, "the consumer neither formed the group nor gave up");
        match consumer.poll(Duration::from_millis(200)) {
            Ok(records) => {
                assert!(records.is_empty(), "no group can form, so nothing is assigned");
                empty_polls += 1;
            }
            Err(e) => break e,
        }
    };
    let described = broker.test_support().coordinator().describe_group(GROUP);
    assert!(error.to_string().contains("did not stabilize"), "{error}");
    // Each rejoin completes a join round (a new generation); 3 s of 100-1000 ms backoffs make
    // about 6, rejoining without a pause made 100.
    assert!(
        (2..=20).contains(&described.generation_id),
        "{} join rounds before giving up: rejoins are not spaced by the backoff",
        described.generation_id
    );
    assert!(empty_polls >= 2, "poll returned at its timeout while backing off ({empty_polls} polls)");
    // LeaveGroup was sent: the member is gone at once, not after session.timeout.ms.
    assert!(described.members.is_empty(), "the member did not leave: {:?} in {}", described.members, described.state);
    drop(consumer);
    broker.shutdown().unwrap();
}
