"""The ``lakestream-kafka`` streaming source against a real broker (Apache Kafka) and local Spark.

Every test produces into its own topics, runs a real streaming query and checks the rows a user
would check: which (partition, offset, key, value) arrived, how many times, in how many batches.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from ingest.kafka.apache_kafka import create_topic
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import parse_options
from ingest.kafka.reader import read_messages
from ingest.kafka.source import SOURCE_NAME, register
from tests.fixtures.broker import Delivered, KafkaTestHelper, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]

Record = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value
_QUERY_TIMEOUT_S = 120


@dataclass
class Collected:
    """Rows of each non-empty micro-batch a query delivered to ``foreachBatch``."""

    batches: list[list[Row]] = field(default_factory=list)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.collect()
        if rows:
            self.batches.append(rows)

    @property
    def rows(self) -> list[Row]:
        return [row for batch in self.batches for row in batch]

    def records(self) -> list[Record]:
        return sorted((r.partition, r.offset, r.key, r.value) for r in self.rows)


@pytest.fixture(scope="module")
def source(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _options(kafka: KafkaTestHelper, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers, **options}


def _start(
    spark: SparkSession,
    options: dict[str, str],
    checkpoint: Path,
    sink: Collected,
    processing_time: str | None = None,
) -> StreamingQuery:
    """Start a query into ``sink``: Trigger.AvailableNow, or a processing-time trigger."""
    frame = spark.readStream.format(SOURCE_NAME).options(**options).load()
    writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    if processing_time is None:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=processing_time).start()


def run_available_now(spark: SparkSession, options: dict[str, str], checkpoint: Path) -> Collected:
    """Run one Trigger.AvailableNow query to its end and return what it delivered."""
    sink = Collected()
    query = _start(spark, options, checkpoint, sink)
    try:
        assert query.awaitTermination(_QUERY_TIMEOUT_S), "AvailableNow query did not finish"
    finally:
        query.stop()
    return sink


def _expected(deliveries: list[Delivered]) -> list[Record]:
    return sorted((d.partition, d.offset, d.key, d.value) for d in deliveries)


def _keyed(start: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(f"k{i}".encode(), f"v{i}".encode()) for i in range(start, start + count)]


def test_available_now_reads_every_record_exactly_once(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=3)
    deliveries = kafka.produce(topic, _keyed(0, 300), headers=[("h", b"1")])

    options = _options(kafka, subscribe=topic, startingOffsets="earliest", includeHeaders="true")
    got = run_available_now(source, options, tmp_path / "cp")

    assert got.records() == _expected(deliveries)
    assert {len(batch) for batch in got.batches} == {300}, "one batch without a limit"
    row = got.rows[0]
    assert row.topic == topic
    assert row.timestamp is not None and row.timestampType == 0  # CreateTime
    assert [(h.key, h.value) for h in row.headers] == [("h", b"1")]
    assert {r.partition for r in got.rows} == {0, 1, 2}


def test_max_offsets_per_trigger_splits_the_backlog_into_batches(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=3)
    deliveries = [
        d for p in range(3) for d in kafka.produce(topic, _keyed(p * 30, 30), partition=p)
    ]

    options = _options(
        kafka, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="40"
    )
    got = run_available_now(source, options, tmp_path / "cp")

    assert [len(batch) for batch in got.batches] == [40, 40, 10]
    assert got.records() == _expected(deliveries)


def test_starting_offsets_json_starts_each_partition_where_told(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=3)
    deliveries = [
        d for p in range(3) for d in kafka.produce(topic, _keyed(p * 10, 10), partition=p)
    ]

    # Partition 2 is not named: it starts at earliest.
    starting = json.dumps({topic: {"0": 5, "1": 10}})
    got = run_available_now(
        source, _options(kafka, subscribe=topic, startingOffsets=starting), tmp_path / "cp"
    )

    wanted = [d for d in deliveries if (d.partition == 0 and d.offset >= 5) or d.partition == 2]
    assert got.records() == _expected(wanted)


def test_restart_from_checkpoint_reads_only_new_records(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=3)
    first = kafka.produce(topic, _keyed(0, 60))
    options = _options(kafka, subscribe=topic, startingOffsets="earliest")
    assert run_available_now(source, options, tmp_path / "cp").records() == _expected(first)

    second = kafka.produce(topic, _keyed(60, 45))
    again = run_available_now(source, options, tmp_path / "cp")

    assert again.records() == _expected(second)


def test_pattern_picks_up_a_topic_created_while_the_query_runs(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    prefix = unique_topic("pattern")
    first = f"{prefix}.a"
    create_topic(kafka.bootstrap_servers, first, 2)
    options = _options(kafka, subscribePattern=f"{prefix}\\..*", startingOffsets="latest")
    sink = Collected()
    query = _start(source, options, tmp_path / "cp", sink, "200 milliseconds")
    try:
        _wait_for(query, lambda: query.lastProgress is not None)  # "latest" is fixed by now
        early = kafka.produce(first, _keyed(0, 10))
        _wait_for(query, lambda: len(sink.rows) >= 10)

        second = f"{prefix}.b"
        create_topic(kafka.bootstrap_servers, second, 3)
        late = kafka.produce(second, _keyed(10, 20))  # before any trigger saw the new topic
        _wait_for(query, lambda: len(sink.rows) >= 30)
    finally:
        query.stop()

    got = sorted((r.topic, r.partition, r.offset, r.value) for r in sink.rows)
    want = sorted((d.topic, d.partition, d.offset, d.value) for d in early + late)
    assert got == want, "a new topic starts at earliest even with startingOffsets=latest"


def test_emit_ranges_hands_out_ranges_that_read_every_record_exactly_once(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=3)
    deliveries = kafka.produce(topic, _keyed(0, 300))
    options = _options(
        kafka, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="120",
        emit="ranges",
    )  # fmt: skip

    got = run_available_now(source, options, tmp_path / "cp")

    ranges = [OffsetRange(r.topic, r.partition, r.startOffset, r.endOffset) for r in got.rows]
    assert len(got.batches) == 3, "the limit splits the backlog as it does for records"
    assert all(len(batch) <= 3 for batch in got.batches), "one row per partition range"
    settings = parse_options(options)
    read = sorted(
        (rng.partition, m.offset(), m.key(), m.value())
        for rng in ranges
        for chunk in read_messages(rng, settings)
        for m in chunk
    )
    assert read == _expected(deliveries)


@dataclass
class Partitioned:
    """Per micro-batch, the rows of each of its Spark partitions (one task each)."""

    batches: list[list[list[Row]]] = field(default_factory=list)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        parts = frame.rdd.glom().collect()
        if any(parts):
            self.batches.append(parts)


@pytest.mark.parametrize("records", [True, False], ids=["records", "ranges"])
def test_a_shared_task_topic_rides_in_another_ranges_partition(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path, records: bool
) -> None:
    data, side = kafka.topic(partitions=3), kafka.topic(partitions=1)
    deliveries = [
        *kafka.produce(data, _keyed(0, 90)),
        *kafka.produce(side, _keyed(1000, 40), partition=0),
    ]
    options = _options(
        kafka, subscribe=f"{data},{side}", startingOffsets="earliest",
        sharedTaskPattern=re.escape(side), emit="records" if records else "ranges",
    )  # fmt: skip
    sink = Partitioned()
    query = _start(source, options, tmp_path / "cp", sink)
    try:
        assert query.awaitTermination(_QUERY_TIMEOUT_S), "AvailableNow query did not finish"
    finally:
        query.stop()

    (parts,) = sink.batches
    assert len(parts) == 3, "one task per data partition, none of the shared topic's own"
    topics = [sorted({r.topic for r in part}) for part in parts]
    assert sorted(topics, key=len) == [[data], [data], sorted([data, side])]
    if records:  # every record once, the side topic's in the task it shares
        got = sorted((r.topic, r.partition, r.offset, r.value) for p in parts for r in p)
        assert got == sorted((d.topic, d.partition, d.offset, d.value) for d in deliveries)
    else:  # a row per range: the three data ranges and the side topic's, each whole
        ends: dict[tuple[str, int], int] = {}
        for d in deliveries:
            ends[(d.topic, d.partition)] = max(ends.get((d.topic, d.partition), 0), d.offset + 1)
        rows = [r for part in parts for r in part]
        got_ends = {(r.topic, r.partition): r.endOffset for r in rows}
        assert len(rows) == 4 and got_ends == ends


def test_offset_gaps_from_transaction_markers_end_ranges_correctly(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    # Each commit writes a control record that takes an offset: offsets 3 and 6 are markers, and
    # the range ends on one, so it is complete only by the broker's end-of-partition report.
    topic = kafka.topic(partitions=1)
    _produce_transactions(kafka.bootstrap_servers, topic, [[b"a", b"b", b"c"], [b"d", b"e"]])

    got = run_available_now(
        source, _options(kafka, subscribe=topic, startingOffsets="earliest"), tmp_path / "cp"
    )

    assert [(r.offset, r.value) for r in sorted(got.rows, key=lambda r: r.offset)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (4, b"d"),
        (5, b"e"),
    ]


def test_offsets_beyond_the_end_of_a_partition_fail_as_data_loss(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=1)
    kafka.produce(topic, _keyed(0, 5))
    starting = json.dumps({topic: {"0": 50}})  # e.g. a catalog from before the topic was recreated

    with pytest.raises(StreamingQueryException, match=f"data loss in {re.escape(topic)}-0"):
        run_available_now(
            source, _options(kafka, subscribe=topic, startingOffsets=starting), tmp_path / "cp"
        )


def test_with_fail_on_data_loss_off_a_reset_partition_is_read_from_earliest(
    source: SparkSession, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=1)
    deliveries = kafka.produce(topic, _keyed(0, 5))
    options = _options(
        kafka,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 50}}),
        failOnDataLoss="false",
    )

    got = run_available_now(source, options, tmp_path / "cp")

    assert got.records() == _expected(deliveries)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        (
            {"kafka.bootstrap.servers": "x:1", "subscribe": "t", "subscribePattern": "t.*"},
            "exactly one of subscribe and subscribePattern",
        ),
        ({"kafka.bootstrap.servers": "x:1"}, "exactly one of subscribe and subscribePattern"),
        (
            {"kafka.bootstrap.servers": "x:1", "subscribe": "t", "startingOffset": "earliest"},
            "unknown option",
        ),
        (
            {"kafka.bootstrap.servers": "x:1", "subscribe": "t", "startingOffsets": "{bad"},
            "startingOffsets",
        ),
        (
            {
                "kafka.bootstrap.servers": "x:1",
                "subscribe": "t",
                "kafka.enable.auto.commit": "true",
            },
            "set by the source itself",
        ),
        ({"kafka.bootstrap.servers": "x:1", "subscribe": "t", "emit": "rows"}, "emit"),
        (
            {"kafka.bootstrap.servers": "x:1", "subscribe": "t", "sharedTaskPattern": "(x"},
            "sharedTaskPattern.*not a valid regex",
        ),
    ],
    ids=[
        "no-bootstrap",
        "both-subscriptions",
        "no-subscription",
        "unknown",
        "bad-json",
        "managed",
        "bad-emit",
        "bad-shared-task-pattern",
    ],
)
def test_bad_options_fail_at_load(
    source: SparkSession, options: dict[str, str], message: str
) -> None:
    with pytest.raises(AnalysisException, match=message):
        source.readStream.format(SOURCE_NAME).options(**options).load()


def _wait_for(query: StreamingQuery, done: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        failure = query.exception()
        if failure is not None:
            raise failure
        assert time.monotonic() < deadline, "streaming query made no progress in time"
        time.sleep(0.1)


def _produce_transactions(bootstrap: str, topic: str, transactions: list[list[bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    for values in transactions:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value, partition=0)
        producer.commit_transaction(10)
