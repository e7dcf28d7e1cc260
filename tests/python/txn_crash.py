"""confluent-kafka transactions around a SIGKILL of the broker (issue 18); run by
tests/it/txn_clients.rs, which kills and restarts `fetchbench serve` between the modes.

Usage: txn_crash.py MODE BOOTSTRAP TOPIC PARTITIONS

- `open`: creates TOPIC, commits one transaction (`committed-p{p}-{i}` on every partition) and
  leaves a second one open with its records delivered (`open-p{p}-{i}`); the producer's
  transaction.timeout.ms is 3000. Prints {"open": true} and exits at once (os._exit: no
  abort, no flush on close), so the transaction stays open for the coordinator to time out.
- `offsets-open`: as `open`, and each transaction also sends offsets of `TOPIC-in` (created
  too) for the group `crash-group-TOPIC` with send_offsets_to_transaction: 2 per partition with
  the committed transaction, 5 with the open one.
- `commit`: creates TOPIC, commits one transaction (`commit-p{p}-{i}`); prints as soon as
  commit_transaction returns (EndTxn answered) and exits at once.
- `read`: read_uncommitted reads every partition to its high watermark, then read_committed
  reads until the end it reports reaches that high watermark on every partition (the last stable
  offset passed the open transaction: it was completed), within 50 s; then a new producer
  with the same transactional.id commits `after-p{p}` and read_committed reads again.
  `read-offsets` also reads the group's committed offsets of `TOPIC-in` (require_stable) once
  read_committed passed the open transaction ("group_offsets").
  Prints {"read_uncommitted": {...}, "read_committed": {...}, "after": {...}} with values,
  the reported ends (`eof`) and high watermarks per partition.
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30.0
READ_TIMEOUT = 50.0
RECORDS = 5


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _, future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT).items():
        try:
            future.result(TIMEOUT)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def producer(bootstrap, topic):
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"crash-{topic}",
            "transaction.timeout.ms": 3000,
            "linger.ms": 5,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def send(p, topic, partitions, prefix):
    delivered = []
    for i in range(RECORDS):
        for part in range(partitions):
            p.produce(topic, value=f"{prefix}-p{part}-{i}", partition=part, on_delivery=lambda e, m: delivered.append(e))
    if p.flush(TIMEOUT) or len(delivered) != RECORDS * partitions or any(delivered):
        raise AssertionError(f"{prefix}: deliveries {delivered}")


def exit_now(out):
    print(json.dumps(out), flush=True)
    os._exit(0)


def open_txn(bootstrap, topic, partitions):
    create_topic(bootstrap, topic, partitions)
    p = producer(bootstrap, topic)
    p.begin_transaction()
    send(p, topic, partitions, "committed")
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    send(p, topic, partitions, "open")
    exit_now({"open": True})


def group_of(topic):
    return f"crash-group-{topic}"


def offsets_open(bootstrap, topic, partitions):
    create_topic(bootstrap, topic, partitions)
    create_topic(bootstrap, f"{topic}-in", partitions)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group_of(topic)})
    meta = member.consumer_group_metadata()
    p = producer(bootstrap, topic)
    for prefix, offset in (("committed", 2), ("open", 5)):
        p.begin_transaction()
        send(p, topic, partitions, prefix)
        offsets = [TopicPartition(f"{topic}-in", part, offset) for part in range(partitions)]
        p.send_offsets_to_transaction(offsets, meta, TIMEOUT)
        if prefix == "committed":
            p.commit_transaction(TIMEOUT)
    exit_now({"open": True})


def committed_offsets(bootstrap, topic, partitions):
    """The group's committed offsets of `{topic}-in` (OffsetFetch with require_stable: librdkafka
    asks for stable offsets under read_committed, retrying UNSTABLE_OFFSET_COMMIT)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_of(topic), "isolation.level": "read_committed"})
    tps = [TopicPartition(f"{topic}-in", part) for part in range(partitions)]
    out = {tp.partition: tp.offset for tp in c.committed(tps, timeout=TIMEOUT)}
    c.close()
    return out


def commit_txn(bootstrap, topic, partitions):
    create_topic(bootstrap, topic, partitions)
    p = producer(bootstrap, topic)
    p.begin_transaction()
    send(p, topic, partitions, "commit")
    p.commit_transaction(TIMEOUT)
    exit_now({"committed": True})


def read(bootstrap, topic, partitions, isolation, until=None):
    """Values, reported ends and high watermarks of every partition from offset 0 under
    `isolation`: until every partition reports its end, (given `until`) at or past until[p]."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-read-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }
    )
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    c.assign(tps)
    values = {p: [] for p in range(partitions)}
    # The offset of each partition's latest end-of-partition event (its end when it was
    # reported: the last stable offset under read_committed), -1 after a record.
    eof = {p: -1 for p in range(partitions)}
    deadline = time.monotonic() + READ_TIMEOUT
    while not all(eof[p] >= 0 and (until is None or eof[p] >= until[p]) for p in range(partitions)):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{isolation}: {topic}: ends reported {eof}, wanted {until}, after {READ_TIMEOUT} s: {values}"
            )
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof[m.partition()] = m.offset()
                continue
            raise AssertionError(f"{isolation}: {topic}: {m.error()}")
        eof[m.partition()] = -1
        values[m.partition()].append(m.value().decode())
    high = {}
    for p in range(partitions):
        _, high[p] = c.get_watermark_offsets(TopicPartition(topic, p), cached=False, timeout=10)
    out = {"values": values, "eof": eof, "high": high}
    c.close()
    return out


def read_after(bootstrap, topic, partitions, offsets=False):
    partitions = int(partitions)
    uncommitted = read(bootstrap, topic, partitions, "read_uncommitted")
    t = time.monotonic()
    committed = read(bootstrap, topic, partitions, "read_committed", until=uncommitted["high"])
    committed["seconds"] = time.monotonic() - t
    group_offsets = committed_offsets(bootstrap, topic, partitions) if offsets else None
    p = producer(bootstrap, topic)
    p.begin_transaction()
    for part in range(partitions):
        p.produce(topic, value=f"after-p{part}", partition=part)
    p.commit_transaction(TIMEOUT)
    after = read(bootstrap, topic, partitions, "read_committed")
    out = {"read_uncommitted": uncommitted, "read_committed": committed, "after": after}
    if offsets:
        out["group_offsets"] = group_offsets
    print(json.dumps(out))


def main():
    mode, bootstrap, topic, partitions = sys.argv[1:5]
    if mode == "open":
        open_txn(bootstrap, topic, int(partitions))
    elif mode == "commit":
        commit_txn(bootstrap, topic, int(partitions))
    elif mode == "offsets-open":
        offsets_open(bootstrap, topic, int(partitions))
    elif mode == "read":
        read_after(bootstrap, topic, partitions)
    elif mode == "read-offsets":
        read_after(bootstrap, topic, partitions, offsets=True)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
