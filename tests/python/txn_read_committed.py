"""confluent-kafka consumers reading a partition that holds transactions (an aborted one, a
committed one, one still open at the log end); run by tests/it/transactions.rs.

Usage: txn_read_committed.py BOOTSTRAP TOPIC

Reads partition 0 from offset 0 twice, with isolation.level=read_committed (librdkafka's
default) and read_uncommitted, each until the end of the partition is reported (or 20 s), and
also asks each isolation level for the high watermark (get_watermark_offsets, which for
read_committed librdkafka answers with the last stable offset it was given). Prints one JSON
line: {"read_committed": {"offsets": [...], "values": [...], "high": H}, "read_uncommitted": ...}.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

TIMEOUT = 20.0


def read(bootstrap, topic, isolation):
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-" + isolation,
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    offsets, values = [], []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            raise AssertionError(f"{isolation}: {m.error()}")
        offsets.append(m.offset())
        values.append(m.value().decode())
    else:
        raise AssertionError(f"{isolation}: no end of partition within {TIMEOUT} s (got {offsets})")
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), cached=False, timeout=10)
    c.close()
    return {"offsets": offsets, "values": values, "high": high}


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    out = {iso: read(bootstrap, topic, iso) for iso in ("read_committed", "read_uncommitted")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
