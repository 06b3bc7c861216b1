"""Throughput of the ``lakestream-kafka`` source through local Spark (opt-in: a measurement).

Run with::

    python3 -m pytest bench/ingest/source_throughput.py \
        -q -s -p no:cacheprovider -p tests.fixtures.broker -p tests.fixtures.spark

It loads N small records (``LAKESTREAM_BENCH_RECORDS``, default 200k, 100-byte values) into a
3-partition topic, then times a Trigger.AvailableNow query into Spark's ``noop`` sink and into
Parquet after an unmeasured warm-up run, and prints records/s end to end (query start included:
~4 s of it is Spark starting the Python source and planner processes) and inside the
micro-batches.

Records are produced in large batches (fast).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from ingest.kafka.source import SOURCE_NAME, register
from tests.fixtures.broker import KafkaTestHelper

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
]
_PARTITIONS = 3


def _load(bootstrap: str, topic: str, count: int) -> int:
    batched = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = b"x" * 100
    for i in range(count):
        while True:
            try:
                batched.produce(topic, value, str(i).encode(), partition=i % _PARTITIONS)
                break
            except BufferError:
                batched.poll(0.05)
    assert batched.flush(120) == 0
    return count


def _timed_run(
    spark: SparkSession, options: dict[str, str], sink: str, path: Path
) -> tuple[float, int, float]:
    """Wall seconds from start to end, rows read, and seconds spent inside micro-batches."""
    frame = spark.readStream.format(SOURCE_NAME).options(**options).load()
    writer = frame.writeStream.format(sink).option("checkpointLocation", str(path / "cp"))
    if sink == "parquet":
        writer = writer.option("path", str(path / "out"))
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(600)
    seconds = time.monotonic() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return seconds, rows, in_batches


@pytest.mark.parametrize("sink", ["noop", "parquet"])
def test_available_now_throughput(
    spark: SparkSession, kafka: KafkaTestHelper, tmp_path: Path, sink: str
) -> None:
    register(spark)
    count = int(os.environ.get("LAKESTREAM_BENCH_RECORDS", "200000"))
    topic = kafka.topic(partitions=_PARTITIONS)
    total = _load(kafka.bootstrap_servers, topic, count)
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }
    # The first queries of a session pay for worker start-up and JIT warm-up: not measured.
    _timed_run(spark, options, "noop", tmp_path / "warm-up")
    seconds, rows, in_batches = _timed_run(spark, options, sink, tmp_path)
    assert rows == total
    if sink == "parquet":
        assert spark.read.parquet(str(tmp_path / "out")).count() == total
    print(
        f"\n{sink}: {total} records in {seconds:.2f}s = {total / seconds:,.0f} records/s "
        f"end to end; {rows / in_batches:,.0f} records/s inside micro-batches"
    )
