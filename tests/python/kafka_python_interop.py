"""kafka-python against a fetchbench broker; run by tests/it/python_clients.rs.

Usage: kafka_python_interop.py BOOTSTRAP [--no-idempotence]

The producer keeps kafka-python's defaults (3.x: enable_idempotence=True, acks='all'), so the
broker must serve InitProducerId and idempotent produce; --no-idempotence is for debugging the
rest without them. Two topics: kp-none with every producer default, kp-gzip with
compression_type='gzip' as the only change (gzip is the codec kafka-python has without extra
packages). Per topic: RECORDS keyed records with set timestamps, each send's metadata checked
(offset i for record i); consumed with KafkaConsumer(group_id=None), assign() +
seek_to_beginning() and assign() + seek() to a middle offset, compared exactly (keys, values,
offsets, timestamps); offsets_for_times, beginning_offsets and end_offsets checked. Any mismatch
raises (exit 1) naming the topic; success prints one JSON line the Rust side checks. Every wait
is bounded, so a misbehaving broker fails the run in seconds.
"""

import json
import logging
import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

RECORDS = 40
BASE_TS = 1_700_000_000_000  # record i has timestamp BASE_TS + 1000 * i
TIMEOUT = 10.0  # seconds for one send / flush / consume


class Complaints(logging.Handler):
    """Collects what kafka-python logs at WARNING or above (a closed connection, an error the
    broker answered, a retried request, ...): a healthy run has none, so any fails the run."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


COMPLAINTS = Complaints()
logging.getLogger("kafka").addHandler(COMPLAINTS)


def fail(msg):
    raise AssertionError(msg)


def records(topic):
    """(key, value, timestamp) of every record of topic. Each value compresses well even alone:
    the clients send a batch uncompressed when compressing does not shrink it, and the Rust side
    checks that every stored batch carries the codec."""
    return [
        (f"{topic}-key-{i}".encode(), f"value {i} of {topic}: {'x' * (100 + i * 7)}".encode(), BASE_TS + 1000 * i)
        for i in range(RECORDS)
    ]


def produce(bootstrap, topic, extra):
    producer = KafkaProducer(bootstrap_servers=bootstrap, **extra)
    try:
        futures = [
            producer.send(topic, key=k, value=v, partition=0, timestamp_ms=ts) for k, v, ts in records(topic)
        ]
        producer.flush(timeout=TIMEOUT)
        offsets = []
        for i, f in enumerate(futures):
            try:
                md = f.get(timeout=TIMEOUT)
            except Exception as e:  # the error the broker answered, or a timeout
                fail(f"{topic}: send #{i} failed: {type(e).__name__}: {e}")
            if (md.topic, md.partition) != (topic, 0):
                fail(f"{topic}: send #{i} went to {md.topic}-{md.partition}")
            offsets.append(md.offset)
        if offsets != list(range(RECORDS)):
            fail(f"{topic}: send offsets {offsets}, want 0..{RECORDS - 1}")
        idempotent = bool(producer.config.get("enable_idempotence"))
        acks = producer.config.get("acks")
    finally:
        producer.close(timeout=TIMEOUT)
    return {"idempotent": idempotent, "acks": acks}


def consume(consumer, topic, start):
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    if start == 0:
        consumer.seek_to_beginning(tp)
    else:
        consumer.seek(tp, start)
    want = [(start + i, k, v, ts) for i, (k, v, ts) in enumerate(records(topic)[start:])]
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < len(want) and time.monotonic() < deadline:
        for _, msgs in consumer.poll(timeout_ms=200).items():
            for m in msgs:
                if m.timestamp_type != 0:
                    fail(f"{topic}: record {m.offset} has timestamp type {m.timestamp_type}, want 0 (CreateTime)")
                got.append((m.offset, m.key, m.value, m.timestamp))
    consumer.assign([])
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        fail(
            f"{topic}: consume from {start}: got {len(got)} records, want {len(want)}; first difference at "
            f"#{first}: got {got[first] if first < len(got) else None}, want {want[first] if first < len(want) else None}"
        )
    return len(got)


def check_offsets(consumer, topic):
    tp = TopicPartition(topic, 0)
    recs = records(topic)
    cases = [(recs[0][2], 0), (recs[7][2], 7), (recs[7][2] + 1, 8), (BASE_TS - 5000, 0), (recs[-1][2], RECORDS - 1)]
    for ts, want in cases:
        res = consumer.offsets_for_times({tp: ts})
        got = res.get(tp)
        if got is None or got.offset != want:
            fail(f"{topic}: offsets_for_times({ts}) = {got}, want offset {want}")
        if got.timestamp != recs[want][2]:
            fail(f"{topic}: offsets_for_times({ts}) timestamp {got.timestamp}, want {recs[want][2]}")
    after = consumer.offsets_for_times({tp: recs[-1][2] + 1}).get(tp)
    if after is not None:
        fail(f"{topic}: offsets_for_times(after the last record) = {after}, want None")
    begin, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
    if (begin, end) != (0, RECORDS):
        fail(f"{topic}: beginning/end offsets ({begin}, {end}), want (0, {RECORDS})")
    if consumer.partitions_for_topic(topic) != {0}:
        fail(f"{topic}: partitions_for_topic = {consumer.partitions_for_topic(topic)}, want {{0}}")
    return len(cases) + 1


def main():
    bootstrap = sys.argv[1]
    extra = {"enable_idempotence": False} if "--no-idempotence" in sys.argv[2:] else {}
    topics = {"kp-none": dict(extra), "kp-gzip": dict(extra, compression_type="gzip")}
    producers = {topic: produce(bootstrap, topic, cfg) for topic, cfg in topics.items()}
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=int(TIMEOUT * 1000),
    )
    consumed = 0
    time_lookups = 0
    try:
        for topic in topics:
            consumed += consume(consumer, topic, 0)
            consumed += consume(consumer, topic, RECORDS // 2 + 1)
            time_lookups += check_offsets(consumer, topic)
        listed = sorted(consumer.topics())
    finally:
        consumer.close()
    if COMPLAINTS.messages:
        fail(f"kafka-python logged warnings or errors: {COMPLAINTS.messages}")
    print(
        json.dumps(
            {
                "client": "kafka-python",
                "version": kafka.__version__,
                "producers": producers,
                "topics": {t: RECORDS for t in topics},
                "consumed": consumed,
                "offsets_for_times": time_lookups,
                "listed_topics": listed,
            }
        )
    )


if __name__ == "__main__":
    main()
