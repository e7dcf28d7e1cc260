"""kafka-python's transactional producer against a fetchbench broker (issue 18); run by
tests/it/txn_clients.rs, which checks the printed JSON exactly.

Usage: txn_kafka_python.py BOOTSTRAP TOPIC PARTITIONS

A KafkaProducer with a transactional_id runs init_transactions, then four transactions over
every partition of TOPIC (created with PARTITIONS partitions): rounds 0, 1 and 3 committed,
round 2 aborted; record i of round r on partition p has the value `r{r}-p{p}-{i}`. Then
KafkaConsumers with isolation_level read_committed and read_uncommitted read every partition
from the beginning until their positions reach end_offsets (for read_committed the last stable
offset). Then send_offsets_to_transaction (a bare group id) of offset 3 for every partition in a
committed transaction and of 7 in an aborted one, each followed by a KafkaConsumer's
committed(). Prints {"read_committed": {"values": {p: [...]}, "end": {p: offset}},
"read_uncommitted": ..., "offsets": {"commit": {p: offset}, "abort": {p: offset}}}.
"""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

TIMEOUT = 30.0
RECORDS = 4
ROUNDS = 4
ABORTED_ROUND = 2


def read(bootstrap, topic, partitions, isolation):
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        consumer_timeout_ms=500,
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    end = c.end_offsets(tps)
    values = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + TIMEOUT
    while any(c.position(tp) < end[tp] for tp in tps):
        if time.monotonic() > deadline:
            positions = {tp.partition: c.position(tp) for tp in tps}
            raise AssertionError(f"{isolation}: positions {positions}, ends {end} after {TIMEOUT} s: {values}")
        for tp, records in c.poll(timeout_ms=500).items():
            values[tp.partition].extend(r.value.decode() for r in records)
    c.close()
    return {"values": values, "end": {tp.partition: end[tp] for tp in tps}}


def main():
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-txn-{topic}", max_block_ms=int(TIMEOUT * 1000))
    p.init_transactions()
    for r in range(ROUNDS):
        p.begin_transaction()
        futures = [
            p.send(topic, key=f"k{i}".encode(), value=f"r{r}-p{part}-{i}".encode(), partition=part)
            for i in range(RECORDS)
            for part in range(partitions)
        ]
        if r == ABORTED_ROUND:
            p.flush(timeout=TIMEOUT)
            for f in futures:
                f.get(timeout=TIMEOUT)  # delivered before the abort: the abort must hide them
            p.abort_transaction()
        else:
            p.commit_transaction()
    out = {iso: read(bootstrap, topic, partitions, iso) for iso in ("read_committed", "read_uncommitted")}
    out["offsets"] = send_offsets(bootstrap, p, topic, partitions)
    p.close(timeout=10)
    print(json.dumps(out))


def committed(bootstrap, group, topic, partitions):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    out = {p: c.committed(TopicPartition(topic, p), timeout_ms=int(TIMEOUT * 1000)) for p in range(partitions)}
    c.close()
    return out


def send_offsets(bootstrap, p, topic, partitions):
    """send_offsets_to_transaction with a bare group id: offsets 3 per partition committed, then
    offsets 7 sent in an aborted transaction; the group's committed offsets after each."""
    group = f"kp-txn-group-{topic}"
    out = {}
    for offset, commit in ((3, True), (7, False)):
        p.begin_transaction()
        p.send(topic, value=f"offsets-{offset}".encode(), partition=0)
        offsets = {TopicPartition(topic, part): OffsetAndMetadata(offset, "", -1) for part in range(partitions)}
        p.send_offsets_to_transaction(offsets, group)
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
        out["commit" if commit else "abort"] = committed(bootstrap, group, topic, partitions)
    return out


if __name__ == "__main__":
    main()
