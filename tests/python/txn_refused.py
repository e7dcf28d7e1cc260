"""Transactional producers against a fetchbench broker, which has no transaction coordinator
yet: FindCoordinator(TRANSACTION) and InitProducerId with a transactional id are answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers a transactional id the client may not
use, so the clients fail at once instead of retrying; run by tests/it/python_clients.rs.

Usage: txn_refused.py BOOTSTRAP

confluent-kafka: init_transactions(30 s) must raise a fatal error with that code long before
its timeout (a retriable answer made it time out after the whole 30 s). kafka-python:
init_transactions() must raise TransactionalIdAuthorizationFailedError. Then an idempotent
producer (no transactional id) on the same broker still delivers. Prints one JSON line with
what each client raised and how long it took; the Rust side checks it. Every wait is bounded.
"""

import json
import sys
import time

from confluent_kafka import KafkaException, Producer

TIMEOUT = 30.0


def confluent(bootstrap):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fb-txn-refused", "transaction.timeout.ms": 60000})
    t = time.monotonic()
    try:
        p.init_transactions(TIMEOUT)
    except KafkaException as e:
        err = e.args[0]
        return {"error": err.name(), "fatal": err.fatal(), "retriable": err.retriable(), "seconds": time.monotonic() - t}
    raise AssertionError("confluent-kafka: init_transactions succeeded against a broker without transactions")


def kafka_python(bootstrap):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KpError

    t = time.monotonic()
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="fb-txn-refused-kp", max_block_ms=int(TIMEOUT * 1000))
    try:
        p.init_transactions()
    except KpError as e:
        return {"error": type(e).__name__, "seconds": time.monotonic() - t}
    finally:
        p.close(timeout=5)
    raise AssertionError("kafka-python: init_transactions succeeded against a broker without transactions")


def idempotent(bootstrap):
    delivered = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        p.produce("txn-refused-idem", value=b"v%d" % i, on_delivery=lambda err, msg: delivered.append(err is None))
    left = p.flush(TIMEOUT)
    if left or len(delivered) != 10 or not all(delivered):
        raise AssertionError(f"idempotent producer: {left} not flushed, deliveries {delivered}")
    return len(delivered)


def main():
    bootstrap = sys.argv[1]
    out = {"confluent": confluent(bootstrap), "kafka_python": kafka_python(bootstrap), "idempotent": idempotent(bootstrap)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
