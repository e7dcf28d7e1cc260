"""confluent-kafka (librdkafka) clients across runtime switches of server.model; run by
tests/it/dynamic_config.rs.

Usage: confluent_model_switch.py BOOTSTRAP

The broker starts with server.model=threaded, read.path=copy. A producer and a consumer (A,
assigned partition 0 of `ms` from offset 0) connect and stay connected throughout:

1. produce BATCH records, A consumes them;
2. the AdminClient sets server.model=uring and read.path=uring-splice in one request (uring
   alone is refused: copy is a blocking path) and describes them back (DYNAMIC_BROKER_CONFIG);
3. produce BATCH more, A consumes them over its open connection (still served by the threaded
   front end); a new consumer B (accepted by a uring core) consumes everything so far;
4. the AdminClient deletes both values (back to threaded, copy);
5. produce BATCH more; A and B consume them over their open connections; a new consumer C
   (threaded again) consumes everything.

Every consumer must read the same records in the same order; the producer's and A's
connection counts (librdkafka's statistics: `connects`, `disconnects` of the broker
connections) are printed, and the Rust side requires no disconnect. Prints one JSON line. Any mismatch raises (exit 1). Every wait
is bounded.
"""

import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

BATCH = 30
TOPIC = "ms"
TIMEOUT = 10.0  # seconds for one flush / consume / admin call


def fail(msg):
    raise AssertionError(msg)


class Stats:
    """The latest librdkafka statistics of one client (stats_cb)."""

    def __init__(self):
        self.latest = None

    def cb(self, text):
        self.latest = json.loads(text)

    def broker_counts(self):
        """(connects, disconnects) summed over the real broker connections (not the bootstrap
        placeholder once it is decommissioned; nodeid >= 0)."""
        if self.latest is None:
            fail("no statistics yet")
        brokers = [b for b in self.latest["brokers"].values() if b.get("nodeid", -1) >= 0]
        return sum(b["connects"] for b in brokers), sum(b["disconnects"] for b in brokers)


def consumer(bootstrap, stats=None):
    conf = {"bootstrap.servers": bootstrap, "group.id": "ms-check", "enable.auto.commit": False}
    if stats is not None:
        conf.update({"statistics.interval.ms": 100, "stats_cb": stats.cb})
    c = Consumer(conf)
    c.assign([TopicPartition(TOPIC, 0, 0)])
    return c


def take(c, n, what):
    out = []
    while len(out) < n:
        msgs = c.consume(n - len(out), timeout=TIMEOUT)
        if not msgs:
            fail(f"{what}: consumed {len(out)} of {n} records")
        for m in msgs:
            if m.error():
                fail(f"{what}: {m.error()}")
            out.append((m.offset(), m.key(), m.value()))
    return out


def produce(p, start, n):
    for i in range(start, start + n):
        p.produce(TOPIC, key=f"k{i}".encode(), value=(f"value-{i}-" + "y" * 300).encode())
    if p.flush(TIMEOUT) != 0:
        fail("produce: records left unsent")


def alter(admin, entries):
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=entries)
    fut = admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res]
    try:
        fut.result(timeout=TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0]


def described(admin):
    res = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    return {k: (configs[k].value, getattr(configs[k].source, "value", configs[k].source)) for k in
            ("server.model", "read.path")}


def op(name, value, kind=AlterConfigOpType.SET):
    return ConfigEntry(name, value, incremental_operation=kind)


def main():
    bootstrap = sys.argv[1]
    p_stats, a_stats = Stats(), Stats()
    producer = Producer({"bootstrap.servers": bootstrap, "statistics.interval.ms": 100, "stats_cb": p_stats.cb})
    a = consumer(bootstrap, a_stats)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    produce(producer, 0, BATCH)
    seen_a = take(a, BATCH, "A before the switch")

    refused = alter(admin, [op("server.model", "uring")])
    if refused is None:
        fail("server.model=uring accepted while read.path=copy")
    err = alter(admin, [op("server.model", "uring"), op("read.path", "uring-splice")])
    if err is not None:
        fail(f"server.model=uring with read.path=uring-splice: {err}")
    after_first = described(admin)

    produce(producer, BATCH, BATCH)
    seen_a += take(a, BATCH, "A across the switch to uring")
    b = consumer(bootstrap)
    seen_b = take(b, 2 * BATCH, "B (new, under uring)")

    err = alter(admin, [op("server.model", None, AlterConfigOpType.DELETE),
                        op("read.path", None, AlterConfigOpType.DELETE)])
    if err is not None:
        fail(f"deleting server.model and read.path: {err}")
    after_second = described(admin)

    produce(producer, 2 * BATCH, BATCH)
    seen_a += take(a, BATCH, "A across the switch back to threaded")
    seen_b += take(b, BATCH, "B across the switch back to threaded")
    c = consumer(bootstrap)
    seen_c = take(c, 3 * BATCH, "C (new, under threaded)")

    if not (seen_a == seen_b == seen_c):
        fail("the consumers read different records")
    if [o for o, _, _ in seen_a] != list(range(3 * BATCH)):
        fail(f"offsets: {[o for o, _, _ in seen_a]}")
    # Let a last statistics report come, then read the connection counts.
    a.consume(1, timeout=0.3)
    producer.poll(0.3)
    summary = {
        "consumed": len(seen_a),
        "refused_alone": {"code": refused.code(), "message": refused.str()},
        "after_switch": after_first,
        "after_delete": after_second,
        "producer_connects_disconnects": p_stats.broker_counts(),
        "a_connects_disconnects": a_stats.broker_counts(),
    }
    for c_ in (a, b, c):
        c_.close()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
