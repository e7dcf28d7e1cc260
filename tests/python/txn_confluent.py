"""confluent-kafka's transactional producer against a fetchbench broker (issue 18); run by
tests/it/txn_clients.rs, which checks the printed JSON exactly.

Usage: txn_confluent.py MODE BOOTSTRAP TOPIC [ARGS...]

Modes (each prints one JSON line; any client error it does not expect exits non-zero):

- `commit-abort BOOTSTRAP TOPIC PARTITIONS CODEC`: one transactional producer (compression.type
  CODEC), five transactions over
  every partition of TOPIC (created with PARTITIONS partitions), round 2 aborted, the others
  committed; the value of record i of round r on partition p is `r{r}-p{p}-{i}`. Then reads every
  partition from offset 0 with read_committed and read_uncommitted consumers until each partition
  reports its end: {"read_committed": {"values": {p: [...]}, "offsets": {...}, "eof": {p: the
  offset of its end}, "high": {...}}, "read_uncommitted": {...}}.
- `zombie BOOTSTRAP TOPIC late|direct`: producer A (transactional.id X) begins a transaction and
  delivers `zombie-{i}` to partition 0; producer B with the same id runs init_transactions
  (fencing A and aborting its transaction), then commits `b-{i}`; A sends `zombie-late` (`late`;
  the Produce with the old epoch fails) or not (`direct`: EndTxn with the old epoch), then tries
  to commit:
  {"a_commit": {"error", "code", "fatal", ...}, "a_late_delivery": error name or null, "read_...": ...}.
- `interleaved BOOTSTRAP TOPIC PARTITIONS`: three transactional producers whose transactions
  overlap in every partition (each delivers a record to every partition in turn, 3 times), four
  rounds; producer n commits in round r when n + r is even, else aborts (ending in reverse
  order). Prints "committed": the committed `t{n}-r{r}` prefixes, and both isolation levels'
  reads (values `t{n}-r{r}-p{p}-{i}`).
- `timeout BOOTSTRAP TOPIC`: a producer with transaction.timeout.ms=2000 delivers `late-{i}` to
  partition 0 in a transaction, waits 6 s (the broker aborts it) and tries to commit: "commit"
  is the error (null if it committed) and both isolation levels' reads.
- `ctp BOOTSTRAP IN OUT GROUP PARTITIONS`: consume-transform-produce. Writes 30 records to IN
  (plain producer), a read_committed group member of GROUP consumes them, the transactional
  producer writes `{value upper}|round1` to OUT (same partition) and sends the member's positions
  with send_offsets_to_transaction, commits; the group's committed offsets are then read (a new
  consumer's committed() and AdminClient.list_consumer_group_offsets). Round 2: 9 more records
  in IN, transformed as `|round2`, offsets sent, aborted: committed offsets read again. Round 3:
  the member seeks back to the committed offsets, re-reads, writes `|round3`, commits. Prints the
  committed offsets after each round, the ends of IN and what read_committed sees of OUT.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30.0
RECORDS = 5
ROUNDS = 5
ABORTED_ROUND = 2


def fail(msg):
    raise AssertionError(msg)


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT).items():
        try:
            future.result(TIMEOUT)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return admin


def txn_producer(bootstrap, txid, extra=None):
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txid, "transaction.timeout.ms": 60000, "linger.ms": 5}
    conf.update(extra or {})
    p = Producer(conf)
    p.init_transactions(TIMEOUT)
    return p


def error_info(e):
    err = e.args[0]
    return {
        "error": err.name(),
        "code": err.code(),
        "fatal": err.fatal(),
        "retriable": err.retriable(),
        "abortable": err.txn_requires_abort(),
        "str": err.str(),
    }


def read(bootstrap, topic, partitions, isolation, group=None):
    """Every record of the partitions from offset 0 under `isolation`, until each reports its end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"txn-read-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values = {p: [] for p in range(partitions)}
    offsets = {p: [] for p in range(partitions)}
    # The offset at which each partition last reported its end (the last stable offset under
    # read_committed), -1 after a record.
    eof = {p: -1 for p in range(partitions)}
    deadline = time.monotonic() + TIMEOUT
    while min(eof.values()) < 0:
        if time.monotonic() > deadline:
            fail(f"{isolation}: {topic}: ends reported {eof} in {TIMEOUT} s: {values}")
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof[m.partition()] = m.offset()
                continue
            fail(f"{isolation}: {topic}: {m.error()}")
        eof[m.partition()] = -1
        values[m.partition()].append(m.value().decode())
        offsets[m.partition()].append(m.offset())
    high = {}
    for p in range(partitions):
        _, high[p] = c.get_watermark_offsets(TopicPartition(topic, p), cached=False, timeout=10)
    c.close()
    return {"values": values, "offsets": offsets, "eof": eof, "high": high}


def read_both(bootstrap, topic, partitions):
    return {iso: read(bootstrap, topic, partitions, iso) for iso in ("read_committed", "read_uncommitted")}


def commit_abort(bootstrap, topic, partitions, compression="none"):
    partitions = int(partitions)
    create_topic(bootstrap, topic, partitions)
    p = txn_producer(bootstrap, f"ck-txn-{topic}", {"compression.type": compression})
    for r in range(ROUNDS):
        p.begin_transaction()
        # Interleaved over the partitions, so each transaction's batches go out together.
        for i in range(RECORDS):
            for part in range(partitions):
                # A long key makes every batch compressible (librdkafka sends a batch that the
                # codec would make larger uncompressed).
                p.produce(topic, key=f"k{i}-" + "x" * 200, value=f"r{r}-p{part}-{i}", partition=part)
        if r == ABORTED_ROUND:
            if p.flush(TIMEOUT):
                fail("round {r}: records not delivered before the abort")
            p.abort_transaction(TIMEOUT)
        else:
            p.commit_transaction(TIMEOUT)
    p.flush(TIMEOUT)
    out = read_both(bootstrap, topic, partitions)
    print(json.dumps(out))


def zombie(bootstrap, topic, late_send):
    create_topic(bootstrap, topic, 1)
    txid = f"ck-zombie-{topic}"
    a = txn_producer(bootstrap, txid)
    a.begin_transaction()
    delivered = []
    for i in range(RECORDS):
        a.produce(topic, value=f"zombie-{i}", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    if a.flush(TIMEOUT) or len(delivered) != RECORDS or any(delivered):
        fail(f"producer A: deliveries {delivered}")
    b = txn_producer(bootstrap, txid)
    b.begin_transaction()
    for i in range(RECORDS):
        b.produce(topic, value=f"b-{i}", partition=0)
    b.commit_transaction(TIMEOUT)
    late = []
    if late_send == "late":
        try:
            a.produce(topic, value="zombie-late", partition=0, on_delivery=lambda err, msg: late.append(err))
            a.flush(TIMEOUT)
        except (KafkaException, SystemError) as e:
            # The fatal fenced error is raised from flush (confluent-kafka raises it while the
            # delivery callback runs: a SystemError whose cause is the KafkaException).
            cause = e if isinstance(e, KafkaException) else e.__cause__
            if not isinstance(cause, KafkaException):
                raise
            late.append(cause.args[0])
    a_commit = None
    try:
        a.commit_transaction(TIMEOUT)
    except KafkaException as e:
        a_commit = error_info(e)
    if a_commit is None:
        fail("producer A (fenced) committed its transaction")
    out = {
        "a_commit": a_commit,
        "a_late_delivery": [None if e is None else e.name() for e in late],
        **read_both(bootstrap, topic, 1),
    }
    print(json.dumps(out))


def interleaved(bootstrap, topic, partitions):
    partitions = int(partitions)
    create_topic(bootstrap, topic, partitions)
    producers = [txn_producer(bootstrap, f"ck-inter-{topic}-{n}") for n in range(3)]
    committed = []
    for r in range(4):
        for p in producers:
            p.begin_transaction()
        for i in range(3):
            for n, p in enumerate(producers):
                for part in range(partitions):
                    p.produce(topic, value=f"t{n}-r{r}-p{part}-{i}", partition=part)
                if p.flush(TIMEOUT):
                    fail(f"producer {n}: records not delivered")
        for n in reversed(range(3)):
            if (n + r) % 2 == 0:
                producers[n].commit_transaction(TIMEOUT)
                committed.append(f"t{n}-r{r}")
            else:
                producers[n].abort_transaction(TIMEOUT)
    print(json.dumps({"committed": committed, **read_both(bootstrap, topic, partitions)}))


def timeout(bootstrap, topic):
    create_topic(bootstrap, topic, 1)
    p = txn_producer(bootstrap, f"ck-timeout-{topic}", {"transaction.timeout.ms": 2000})
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(topic, value=f"late-{i}", partition=0)
    if p.flush(TIMEOUT):
        fail("records not delivered")
    time.sleep(6)
    commit = None
    try:
        p.commit_transaction(TIMEOUT)
    except KafkaException as e:
        commit = error_info(e)
    print(json.dumps({"commit": commit, **read_both(bootstrap, topic, 1)}))


def committed_offsets(bootstrap, admin, group, topic, partitions):
    """The group's committed offsets of `topic` two ways: a new consumer's committed() and the admin."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    by_consumer = {tp.partition: tp.offset for tp in c.committed(tps, timeout=TIMEOUT)}
    c.close()
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=TIMEOUT)
    by_admin = {}
    for _, future in futures.items():
        for tp in future.result(TIMEOUT).topic_partitions:
            if tp.error:
                fail(f"list_consumer_group_offsets {group}: {tp}: {tp.error}")
            by_admin[tp.partition] = tp.offset
    return {"consumer": by_consumer, "admin": by_admin}


def consume_n(c, n, what):
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < n:
        if time.monotonic() > deadline:
            fail(f"{what}: {len(got)} of {n} records in {TIMEOUT} s")
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            fail(f"{what}: {m.error()}")
        got.append(m)
    return got


def ctp(bootstrap, in_topic, out_topic, group, partitions):
    partitions = int(partitions)
    admin = create_topic(bootstrap, in_topic, partitions)
    create_topic(bootstrap, out_topic, partitions)
    plain = Producer({"bootstrap.servers": bootstrap})
    sent = [0]

    def write_input(n):
        for _ in range(n):
            i = sent[0]
            plain.produce(in_topic, key=f"k{i}", value=f"in-{i}", partition=i % partitions)
            sent[0] += 1
        if plain.flush(TIMEOUT):
            fail("input records not delivered")

    write_input(30)
    member = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    member.subscribe([in_topic])
    producer = txn_producer(bootstrap, f"ck-ctp-{group}")
    out = {"rounds": []}

    def transform(round_no, n, commit):
        msgs = consume_n(member, n, f"round {round_no}")
        producer.begin_transaction()
        for m in msgs:
            producer.produce(out_topic, key=m.key(), value=f"{m.value().decode().upper()}|round{round_no}", partition=m.partition())
        positions = member.position(member.assignment())
        producer.send_offsets_to_transaction(positions, member.consumer_group_metadata(), TIMEOUT)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
        ends = {}
        for p in range(partitions):
            _, ends[p] = member.get_watermark_offsets(TopicPartition(in_topic, p), cached=False, timeout=10)
        out["rounds"].append(
            {
                "round": round_no,
                "commit": commit,
                "consumed": len(msgs),
                "positions": {tp.partition: tp.offset for tp in positions},
                "in_ends": ends,
                "committed": committed_offsets(bootstrap, admin, group, in_topic, partitions),
            }
        )

    transform(1, 30, True)
    write_input(9)
    transform(2, 9, False)
    # As an application does after an abort: back to the group's committed offsets.
    committed = member.committed(member.assignment(), timeout=TIMEOUT)
    for tp in committed:
        member.seek(tp)
    transform(3, 9, True)
    member.close()
    out["out"] = read(bootstrap, out_topic, partitions, "read_committed", group=f"{group}-check")["values"]
    print(json.dumps(out))


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    {"commit-abort": commit_abort, "zombie": zombie, "interleaved": interleaved, "timeout": timeout, "ctp": ctp}[mode](*args)


if __name__ == "__main__":
    main()
