#!/usr/bin/env python3
"""Produces NDJSON events read from stdin to a Kafka topic, one message per line, keyed by the
event's scope (the documented producer convention), with the confluent-kafka client.

    kafka_produce.py BROKERS TOPIC [PARTITIONS] < events.ndjson

With PARTITIONS the topic is created first (an existing one is kept). Prints the number of
messages delivered; exits 1 if any was not delivered within 60 s.
"""
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    brokers, topic = sys.argv[1], sys.argv[2]
    partitions = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if partitions:
        admin = AdminClient({"bootstrap.servers": brokers})
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        )
        for f in futures.values():
            try:
                f.result(30)
            except Exception as e:  # an existing topic is fine
                if "exist" not in str(e).lower():
                    raise
    producer = Producer(
        {"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5}
    )
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(str(err))

    sent = 0
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            key = json.loads(line).get("scope")
        except (ValueError, AttributeError):
            key = None
        while True:
            try:
                producer.produce(topic, key=key, value=line, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        producer.poll(0)
    left = producer.flush(60)
    if left or failed:
        print(f"{left} messages undelivered; errors: {failed[:5]}", file=sys.stderr)
        sys.exit(1)
    print(sent)


if __name__ == "__main__":
    main()
