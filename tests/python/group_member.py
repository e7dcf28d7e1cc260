"""One confluent-kafka (librdkafka) consumer group member, driven by tests/it/group_clients.rs.

Usage: group_member.py BOOTSTRAP GROUP TOPIC[,TOPIC...] [SETTINGS_JSON]

SETTINGS_JSON: librdkafka settings over the defaults below, plus the script's own keys:
  "max_records": N   stop after processing N records (committed), then close() and exit 0.

The member subscribes, consumes with consume() and, after each batch, commits the next offset of
every partition in it synchronously (so a record is committed once processed). It writes one JSON
object per line to stdout, each with "t" = time.time() (the Rust side compares these times across
processes on the same machine):
  {"ev": "started"}
  {"ev": "assign", "parts": [[topic, partition], ...], "gen": G}  on_assign (eager: the new
                                                           assignment) in generation G
  {"ev": "revoke", "parts": [...], "gen": G} / {"ev": "lost", "parts": [...], "gen": G}
  {"ev": "msgs", "recs": [[topic, partition, offset], ...]}  records processed, in order
  {"ev": "commit", "offs": [[topic, partition, next offset, error or null], ...]}
  {"ev": "commit_error", "error": "..."}                     the whole commit failed
  {"ev": "error", "error": "..."}                            librdkafka's error_cb
  {"ev": "closing"} then {"ev": "closed"}                    around consumer.close()
Commands on stdin, one per line: "close" (consumer.close(), which sends LeaveGroup unless the
member is static, then exit 0), "nocommit" (stop committing; processed records stay uncommitted).
End of stdin (the test went away) exits at once, so no member outlives its test.
"""

import json
import queue
import struct
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def emit(ev, **fields):
    print(json.dumps({"ev": ev, "t": time.time(), **fields}), flush=True)


def parts(partitions):
    return [[tp.topic, tp.partition] for tp in partitions]


def generation(consumer):
    """The generation id librdkafka holds now (-1: none), read from the serialized
    consumer_group_metadata(): b"CGMDv2:" then the generation id as a native int32
    (rd_kafka_consumer_group_metadata_write)."""
    cgmd = consumer.consumer_group_metadata()
    if not isinstance(cgmd, bytes) or not cgmd.startswith(b"CGMDv2:"):
        return None
    return struct.unpack("=i", cgmd[7:11])[0]


def read_commands(commands):
    for line in sys.stdin:
        commands.put(line.strip())
    commands.put("eof")


def main():
    bootstrap, group, topics = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    settings = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    max_records = settings.pop("max_records", None)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
        "error_cb": lambda err: emit("error", error=str(err)),
        **settings,
    }
    consumer = Consumer(config)
    consumer.subscribe(
        topics,
        on_assign=lambda c, ps: emit("assign", parts=parts(ps), gen=generation(c)),
        on_revoke=lambda c, ps: emit("revoke", parts=parts(ps), gen=generation(c)),
        on_lost=lambda c, ps: emit("lost", parts=parts(ps), gen=generation(c)),
    )
    emit("started")
    commands = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
    committing = True
    processed = 0
    while True:
        try:
            command = commands.get_nowait()
        except queue.Empty:
            command = None
        if command == "eof":
            return
        if command == "nocommit":
            committing = False
        if command == "close" or (max_records is not None and processed >= max_records):
            emit("closing")
            consumer.close()
            emit("closed")
            return
        want = 500 if max_records is None else max(1, min(500, max_records - processed))
        msgs = consumer.consume(num_messages=want, timeout=0.05)
        recs = []
        for m in msgs:
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    emit("error", error=str(m.error()))
                continue
            recs.append([m.topic(), m.partition(), m.offset()])
        if not recs:
            continue
        processed += len(recs)
        emit("msgs", recs=recs)
        if not committing:
            continue
        nexts = {}
        for topic, partition, offset in recs:
            nexts[(topic, partition)] = max(nexts.get((topic, partition), 0), offset + 1)
        try:
            done = consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in nexts.items()], asynchronous=False
            )
            emit(
                "commit",
                offs=[[tp.topic, tp.partition, tp.offset, str(tp.error) if tp.error else None] for tp in done],
            )
        except KafkaException as e:
            emit("commit_error", error=str(e))


if __name__ == "__main__":
    main()
