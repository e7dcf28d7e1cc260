"""kafka-python's group consumer against a fetchbench broker; run by tests/it/group_clients.rs.

Usage: group_kafka_python.py BOOTSTRAP TOPIC GROUP

TOPIC exists with 3 partitions. Produces FIRST records (record i to partition i % 3), consumes
them with KafkaConsumer(group_id=GROUP) + subscribe() (JoinGroup / SyncGroup / Heartbeat),
checks the assignment is every partition and every record arrives once, commit()s and checks
committed() equals the end offsets, close()s (LeaveGroup). Then produces SECOND more and a new
consumer of the group must get exactly those (it resumes at the committed offsets). Any mismatch
raises (exit 1); success prints one JSON line. Every wait is bounded.
"""

import json
import logging
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

FIRST, SECOND, PARTITIONS = 90, 30, 3
TIMEOUT = 20.0


# kafka-python's group and metadata log at DEBUG, kept in memory and printed only on failure.
LOG = []


class Keep(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("need_rejoin"):
            return
        LOG.append(f"{record.relativeCreated:.0f} {record.name}: {record.getMessage()}")


for name in ["kafka.coordinator", "kafka.cluster", "kafka.consumer.subscription_state"]:
    logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger(name).addHandler(Keep())


def fail(msg):
    sys.stderr.write("\n".join(LOG[-150:]) + "\n")
    raise AssertionError(msg)


def produce(bootstrap, topic, start, count):
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    futures = [
        producer.send(topic, value=f"record-{i}".encode(), partition=i % PARTITIONS)
        for i in range(start, start + count)
    ]
    producer.flush(TIMEOUT)
    out = [(f.get(TIMEOUT).partition, f.get(TIMEOUT).offset) for f in futures]
    producer.close(TIMEOUT)
    return out


def consume(bootstrap, topic, group, want):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < len(want) and time.monotonic() < deadline:
        # A long poll timeout on purpose: kafka-python 3.0.12 loses a join whose poll() times out
        # while its SyncGroup is in flight when the rejoin was triggered by a metadata change (its
        # first join often precedes the topic's metadata, so it joins twice): need_rejoin() is
        # then False and the finished join task is never awaited, leaving the consumer with no
        # assignment and no heartbeats. poll() returns as soon as records arrive anyway.
        for tp, msgs in consumer.poll(timeout_ms=5000).items():
            got.extend((m.partition, m.offset) for m in msgs)
    assigned = sorted(tp.partition for tp in consumer.assignment())
    if assigned != list(range(PARTITIONS)):
        fail(f"{group}: assignment {assigned}, want every partition")
    if sorted(got) != sorted(want):
        fail(f"{group}: consumed {len(got)} records, want {len(want)}: {sorted(set(got) ^ set(want))[:10]}")
    consumer.commit()
    ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    for tp, end in ends.items():
        committed = consumer.committed(tp)
        if committed != end:
            fail(f"{group}: committed({tp}) = {committed}, want the end offset {end}")
    generation = consumer._coordinator._generation.generation_id
    consumer.close()
    return len(got), generation


def main():
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    first = produce(bootstrap, topic, 0, FIRST)
    n1, gen1 = consume(bootstrap, topic, group, first)
    second = produce(bootstrap, topic, FIRST, SECOND)
    n2, gen2 = consume(bootstrap, topic, group, second)
    print(json.dumps({"client": "kafka-python", "version": kafka.__version__, "first": n1, "second": n2,
                      "generations": [gen1, gen2]}))


if __name__ == "__main__":
    main()
