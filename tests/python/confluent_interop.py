"""confluent-kafka (librdkafka) against a fetchbench broker; run by tests/it/python_clients.rs.

Usage: confluent_interop.py BOOTSTRAP

Per codec (none, gzip, snappy, lz4, zstd; one topic each, ck-<codec>), and on ck-idempotent with
enable.idempotence=true (InitProducerId, producer id and sequences in the batches): produce RECORDS keyed records with
set timestamps, check every delivery report (no error, offsets 0..RECORDS-1 in order), consume
them with assign() from offset 0 and from a middle offset and compare keys, values, offsets and
timestamps exactly, and check offsets_for_times. Then list_topics. Any mismatch raises (exit 1)
with a message naming the topic; success prints one JSON line (the summary the Rust side checks).
Every wait is bounded, so a misbehaving broker fails the run in seconds, never hangs it.
"""

import json
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

RECORDS = 40
# topic -> producer settings beyond the common ones
TOPICS = {f"ck-{codec}": {"compression.type": codec} for codec in ["none", "gzip", "snappy", "lz4", "zstd"]}
TOPICS["ck-idempotent"] = {"enable.idempotence": True, "compression.type": "lz4"}
BASE_TS = 1_700_000_000_000  # record i has timestamp BASE_TS + 1000 * i
TIMEOUT = 10.0  # seconds for one flush / consume / admin call


# Errors librdkafka reports through error_cb (a closed connection, a failed request, ...): a
# healthy run has none, so any fails the run.
CLIENT_ERRORS = []


def on_error(err):
    CLIENT_ERRORS.append(str(err))


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


def produce(bootstrap, topic, settings):
    reports = []

    def on_delivery(err, msg):
        reports.append((err, msg.offset() if err is None else None, msg.key()))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "error_cb": on_error,
            **settings,
            "linger.ms": 50,
            "message.timeout.ms": int(TIMEOUT * 1000),
            "socket.timeout.ms": int(TIMEOUT * 1000),
        }
    )
    for key, value, ts in records(topic):
        producer.produce(topic, value=value, key=key, partition=0, timestamp=ts, on_delivery=on_delivery)
    left = producer.flush(TIMEOUT)
    if left:
        fail(f"{topic}: {left} records still in flight after flush({TIMEOUT})")
    if len(reports) != RECORDS:
        fail(f"{topic}: {len(reports)} delivery reports, want {RECORDS}")
    errors = [(k, str(e)) for e, _, k in reports if e is not None]
    if errors:
        fail(f"{topic}: delivery errors: {errors[:5]}")
    offsets = [o for _, o, _ in reports]
    if offsets != list(range(RECORDS)):
        fail(f"{topic}: delivered offsets {offsets}, want 0..{RECORDS - 1}")


def new_consumer(bootstrap):
    # librdkafka requires group.id; the group is never joined (assign(), no commits), so the
    # broker's missing group coordinator must not matter.
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "error_cb": on_error,
            "group.id": "fetchbench-interop",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "socket.timeout.ms": int(TIMEOUT * 1000),
            "fetch.wait.max.ms": 100,
        }
    )


def consume_from(consumer, topics, start):
    """Assigns every topic at offset start, reads until each has all its records from start on,
    and compares them exactly. One assign() for all topics: librdkafka starts fetching a topic new
    to the consumer only at its next 1 s metadata/coordinator tick, so one assign costs one tick."""
    consumer.assign([TopicPartition(topic, 0, start) for topic in topics])
    want = {
        topic: [(start + i, k, v, confluent_kafka.TIMESTAMP_CREATE_TIME, ts) for i, (k, v, ts) in
                enumerate(records(topic)[start:])]
        for topic in topics
    }
    got = {topic: [] for topic in topics}
    deadline = time.monotonic() + TIMEOUT
    while any(len(got[t]) < len(want[t]) for t in topics) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            fail(f"{msg.topic()}: consume from {start}: error {msg.error()}")
        ts_type, ts = msg.timestamp()
        if msg.topic() not in got or msg.partition() != 0:
            fail(f"consume from {start}: a record of {msg.topic()}-{msg.partition()}, not assigned")
        got[msg.topic()].append((msg.offset(), msg.key(), msg.value(), ts_type, ts))
    consumer.unassign()
    for topic in topics:
        g, w = got[topic], want[topic]
        if g != w:
            first = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            fail(
                f"{topic}: consume from {start}: got {len(g)} records, want {len(w)}; first difference "
                f"at #{first}: got {g[first] if first < len(g) else None}, "
                f"want {w[first] if first < len(w) else None}"
            )
    return sum(len(g) for g in got.values())


def check_offsets_for_times(consumer, topic):
    recs = records(topic)
    cases = [
        (recs[0][2], 0),  # the first record's timestamp
        (recs[7][2], 7),  # an exact timestamp
        (recs[7][2] + 1, 8),  # between two records: the next one
        (BASE_TS - 5000, 0),  # before every record
        (recs[-1][2], RECORDS - 1),  # the last record
        (recs[-1][2] + 1, -1),  # after every record: no offset (OFFSET_END)
    ]
    for ts, want in cases:
        res = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
        if len(res) != 1 or res[0].error is not None:
            fail(f"{topic}: offsets_for_times({ts}): {res}")
        if res[0].offset != want:
            fail(f"{topic}: offsets_for_times({ts}) = {res[0].offset}, want {want}")
    lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
    if (lo, hi) != (0, RECORDS):
        fail(f"{topic}: watermark offsets ({lo}, {hi}), want (0, {RECORDS})")
    return len(cases)


def check_metadata(bootstrap, topics):
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": on_error})
    md = producer.list_topics(timeout=TIMEOUT)
    host, port = bootstrap.rsplit(":", 1)
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    if brokers != {0: (host, int(port))}:
        fail(f"metadata brokers {brokers}, want {{0: ({host!r}, {port})}}")
    if md.controller_id not in (0, -1):
        fail(f"metadata controller id {md.controller_id}")
    for topic in topics:
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            fail(f"metadata: topic {topic} missing or in error: {t and t.error}; topics {sorted(md.topics)}")
        if sorted(t.partitions) != [0]:
            fail(f"metadata: {topic} partitions {sorted(t.partitions)}, want [0]")
        p = t.partitions[0]
        if p.error is not None or p.leader != 0 or list(p.replicas) != [0] or list(p.isrs) != [0]:
            fail(f"metadata: {topic}-0 error {p.error}, leader {p.leader}, replicas {p.replicas}, isr {p.isrs}")
    one = producer.list_topics(topic=topics[0], timeout=TIMEOUT)
    if list(one.topics) != [topics[0]]:
        fail(f"metadata for {topics[0]} only: topics {list(one.topics)}")
    return sorted(md.topics)


def main():
    bootstrap = sys.argv[1]
    topics = []
    consumed = 0
    time_lookups = 0
    for topic, settings in TOPICS.items():
        topics.append(topic)
        produce(bootstrap, topic, settings)
    consumer = new_consumer(bootstrap)
    try:
        consumed += consume_from(consumer, topics, 0)
        consumed += consume_from(consumer, topics, RECORDS // 2 + 1)
        for topic in topics:
            time_lookups += check_offsets_for_times(consumer, topic)
    finally:
        consumer.close()
    listed = check_metadata(bootstrap, topics)
    if CLIENT_ERRORS:
        fail(f"librdkafka reported errors: {CLIENT_ERRORS}")
    print(
        json.dumps(
            {
                "client": "confluent-kafka",
                "version": confluent_kafka.__version__,
                "librdkafka": confluent_kafka.libversion()[0],
                "topics": {t: RECORDS for t in topics},
                "consumed": consumed,
                "offsets_for_times": time_lookups,
                "listed_topics": listed,
            }
        )
    )


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        sys.exit(f"FAIL: KafkaException: {e}")
