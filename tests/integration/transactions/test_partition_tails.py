"""The driver's peek at the last record of each data partition's range and at the record after it
(``peek_ends``), against the broker: exact values wherever the range ends - inside a multi-record
batch, at a record larger than the peek's small fetch limit, at the end of the partition (no
record after it)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions
from ingest.sink.consistent import RangeEnd, peek_ends

pytestmark = pytest.mark.integration


def test_the_peek_reads_the_exact_last_record_of_every_range(kafka):
    topic = kafka.topic(partitions=2)
    values = {p: [b"%d-%05d-" % (p, i) * (1 + (i % 7) * 150) for i in range(400)] for p in (0, 1)}
    # linger: multi-record batches for certain, the partition's last record inside one
    batched = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 50})
    for p, items in values.items():
        for value in items:
            batched.produce(topic, value, partition=p)
    assert batched.flush(30) == 0
    options = SourceOptions(kafka_config={"bootstrap.servers": kafka.bootstrap_servers})

    for ends in ((1, 1), (137, 250), (6, 399), (400, 400), (57, 13)):
        ranges = [OffsetRange(topic, p, 0, end) for p, end in enumerate(ends)]
        found = peek_ends(ranges, options)
        assert found == {
            (topic, p): RangeEnd(values[p][end - 1], values[p][end] if end < 400 else None)
            for p, end in enumerate(ends)
        }
    assert max(len(v) for v in values[0]) > 4096  # some records exceed the fetch limit
