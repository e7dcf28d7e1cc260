"""A producer that keeps writing during the group churn test (tests/it/group_churn.rs), with
confluent-kafka (librdkafka).

Usage: churn_producer.py BOOTSTRAP TOPIC

Writes keyed, numbered records (key b"k<i % 97>", value b"n<i>") with acks=all, about 200 a
second, until a "stop" line (or the end) of stdin; then flushes. Every acknowledged record is
reported as it is acknowledged, one JSON object per line:
  {"ev": "acked", "recs": [[partition, offset, i], ...]}
  {"ev": "failed", "error": "...", "i": i}     a delivery report with an error (not acknowledged)
  {"ev": "done", "produced": N, "acked": N, "in_flight": N}   after the flush
"""

import json
import queue
import sys
import threading
import time

from confluent_kafka import Producer


def emit(ev, **fields):
    print(json.dumps({"ev": ev, "t": time.time(), **fields}), flush=True)


def read_commands(commands):
    for line in sys.stdin:
        commands.put(line.strip())
    commands.put("stop")


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 30000,
        }
    )
    acked, pending = [], []

    def on_delivery(err, msg):
        i = int(msg.value()[1:])
        if err is not None:
            emit("failed", error=str(err), i=i)
        else:
            pending.append([msg.partition(), msg.offset(), i])
            acked.append(i)

    def report():
        if pending:
            emit("acked", recs=list(pending))
            pending.clear()

    commands = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
    produced = 0
    while commands.empty():
        for _ in range(10):
            producer.produce(topic, key=f"k{produced % 97}".encode(), value=f"n{produced}".encode(), on_delivery=on_delivery)
            produced += 1
        producer.poll(0)
        report()
        time.sleep(0.05)
    left = producer.flush(30)
    report()
    emit("done", produced=produced, acked=len(acked), in_flight=left)


if __name__ == "__main__":
    main()
