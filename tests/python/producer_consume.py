"""confluent-kafka (librdkafka) reads back what fetchbench's producer wrote; run by tests/it/producer.rs.

Usage: producer_consume.py BOOTSTRAP TOPIC:PARTITIONS:COUNT [TOPIC:PARTITIONS:COUNT ...]

Assigns every partition of every topic from offset 0 and reads until COUNT records per topic
arrived (bounded wait). Prints one JSON line: {"records": {topic: [[partition, offset, key,
value, timestamp], ...]}} with keys and values decoded as UTF-8 (None for null), sorted by
partition and offset; the Rust side compares them exactly with what it sent. Any consumer error
fails the run (exit 1).
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

TIMEOUT = 15.0
ERRORS = []


def main():
    bootstrap = sys.argv[1]
    wanted = {}
    for spec in sys.argv[2:]:
        topic, partitions, count = spec.rsplit(":", 2)
        wanted[topic] = (int(partitions), int(count))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "error_cb": lambda err: ERRORS.append(str(err)),
            "group.id": "fetchbench-producer-test",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for t, (n, _) in wanted.items() for p in range(n)])
    got = {t: [] for t in wanted}
    deadline = time.monotonic() + TIMEOUT
    while any(len(got[t]) < c for t, (_, c) in wanted.items()) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"{msg.topic()}: error {msg.error()}")
        dec = lambda b: None if b is None else b.decode()
        got[msg.topic()].append([msg.partition(), msg.offset(), dec(msg.key()), dec(msg.value()), msg.timestamp()[1]])
    consumer.close()
    if ERRORS:
        raise AssertionError(f"client errors: {ERRORS}")
    for t in got:
        got[t].sort()
    print(json.dumps({"records": got}))


if __name__ == "__main__":
    main()
