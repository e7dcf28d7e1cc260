"""confluent-kafka's AdminClient (librdkafka) against a fetchbench broker's dynamic broker
configs; run by tests/it/dynamic_config.rs.

Usage: confluent_configs.py BOOTSTRAP FROM_PATH TO_PATH [MODEL]

The broker starts with read.path=FROM_PATH under server.model=MODEL (default threaded). Produce RECORDS records to the topic `dc`; consume
them; describe the broker resource "0" (read.path: FROM_PATH, STATIC_BROKER_CONFIG, not read-only;
server.model=MODEL, dynamic too) and the topic; refuse a read-only key (num.io.threads) and an unknown key
and check nothing changed; validate_only to TO_PATH changes nothing; then SET read.path=TO_PATH,
describe again (DYNAMIC_BROKER_CONFIG, the static value as a synonym) and consume again: the
records must come back identical. Prints one JSON line, which the Rust side checks against the
broker's per-path transfer counters. Any mismatch raises (exit 1). Every wait is bounded.
"""

import json
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

RECORDS = 40
TOPIC = "dc"
TIMEOUT = 10.0  # seconds for one flush / consume / admin call


def fail(msg):
    raise AssertionError(msg)


def consume(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dc-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    out = []
    while len(out) < RECORDS:
        msgs = consumer.consume(RECORDS, timeout=TIMEOUT)
        if not msgs:
            fail(f"consumed {len(out)} of {RECORDS} records")
        for m in msgs:
            if m.error():
                fail(f"consume: {m.error()}")
            out.append((m.offset(), m.key(), m.value()))
    consumer.close()
    return out


def broker_configs(admin):
    res = ConfigResource(ResourceType.BROKER, "0")
    return admin.describe_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)


def alter(admin, entries, validate_only=False):
    """Returns None on success, else the KafkaError of the broker resource."""
    res = ConfigResource(ResourceType.BROKER, "0", incremental_configs=entries)
    fut = admin.incremental_alter_configs([res], validate_only=validate_only, request_timeout=TIMEOUT)[res]
    try:
        fut.result(timeout=TIMEOUT)
        return None
    except KafkaException as e:
        return e.args[0]


def src(source):
    """A ConfigEntry's source as its wire number (an enum or an int, by client version)."""
    return getattr(source, "value", source)


def set_op(name, value):
    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)


def main():
    bootstrap, from_path, to_path = sys.argv[1:4]
    model = sys.argv[4] if len(sys.argv) > 4 else "threaded"
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=(f"value-{i}-" + "x" * 200).encode())
    if producer.flush(TIMEOUT) != 0:
        fail("produce: records left unsent")
    before = consume(bootstrap)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = broker_configs(admin)
    rp = configs["read.path"]
    if (rp.value, src(rp.source), rp.is_read_only) != (from_path, ConfigSource.STATIC_BROKER_CONFIG.value, False):
        fail(f"read.path before: {rp.value} source {rp.source} read-only {rp.is_read_only}")
    if configs["server.model"].is_read_only or configs["server.model"].value != model:
        fail(f"server.model: {configs['server.model']}")
    topic_res = ConfigResource(ResourceType.TOPIC, TOPIC)
    topic_configs = admin.describe_configs([topic_res], request_timeout=TIMEOUT)[topic_res].result(timeout=TIMEOUT)
    if topic_configs["retention.ms"].value != "604800000":
        fail(f"topic retention.ms: {topic_configs['retention.ms']}")

    refused = {}
    for name, entries in [
        ("read_only", [set_op("read.path", to_path), set_op("num.io.threads", "2")]),
        ("unknown", [set_op("no.such.config", "1")]),
        ("bad_value", [set_op("read.path", "warp-drive")]),
    ]:
        err = alter(admin, entries)
        if err is None:
            fail(f"{name}: accepted")
        refused[name] = {"code": err.code(), "message": err.str()}
        if broker_configs(admin)["read.path"].value != from_path:
            fail(f"{name}: read.path changed although refused")
    if alter(admin, [set_op("read.path", to_path)], validate_only=True) is not None:
        fail("validate_only refused")
    if broker_configs(admin)["read.path"].value != from_path:
        fail("validate_only changed read.path")

    err = alter(admin, [set_op("read.path", to_path)])
    if err is not None:
        fail(f"SET read.path={to_path}: {err}")
    rp = broker_configs(admin)["read.path"]
    synonyms = [(s.value, src(s.source)) for s in rp.synonyms.values()] if isinstance(rp.synonyms, dict) else []
    if (rp.value, src(rp.source)) != (to_path, ConfigSource.DYNAMIC_BROKER_CONFIG.value):
        fail(f"read.path after: {rp.value} source {rp.source}")
    after = consume(bootstrap)
    if after != before:
        fail("records read after the switch differ from those read before")
    print(
        json.dumps(
            {
                "consumed_before": len(before),
                "consumed_after": len(after),
                "refused": refused,
                "synonyms_after": [[v, s] for v, s in synonyms],
                "read_path_after": rp.value,
            }
        )
    )


if __name__ == "__main__":
    main()
