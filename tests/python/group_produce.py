"""Creates a topic and/or produces records for the group tests (tests/it/group_clients.rs), with
confluent-kafka (librdkafka).

Usage: group_produce.py BOOTSTRAP TOPIC PARTITIONS COUNT [--create]

--create: CreateTopics TOPIC with PARTITIONS partitions first (an existing topic is an error).
Then COUNT records: record i goes to partition i % PARTITIONS with value b"record-<i>". Every
delivery report is checked. Prints one JSON line: {"delivered": [[partition, offset], ...]}.
"""

import json
import sys

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 10.0


def main():
    bootstrap, topic, partitions, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if "--create" in sys.argv[5:]:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for name, future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=TIMEOUT).items():
            future.result(timeout=TIMEOUT)
    delivered, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append([msg.partition(), msg.offset()])

    if count:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": int(TIMEOUT * 1000)})
        for i in range(count):
            producer.produce(topic, value=f"record-{i}".encode(), partition=i % partitions, on_delivery=on_delivery)
            producer.poll(0)
        left = producer.flush(TIMEOUT)
        if left or errors or len(delivered) != count:
            sys.exit(f"FAIL: {topic}: {left} in flight, {len(delivered)} delivered of {count}, errors {errors[:5]}")
    print(json.dumps({"delivered": delivered}))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        sys.exit(f"FAIL: KafkaException: {e}")
