"""The measured pipelines, each reading the whole topic once and counting what it delivered.

* :func:`raw_consume` - confluent-kafka alone: assign every partition at offset 0, ``consume``
  in chunks of 10k, count the messages. The ceiling for anything that reads with librdkafka
  from Python.
* :func:`bare_parquet` - Spark + the ``lakestream-kafka`` source (or, with ``spark_source=True``,
  Spark's built-in Kafka source, ``format("kafka")``) + a plain
  ``writeStream.format("parquet")`` (Trigger.AvailableNow): the Kafka rows as they come (key and
  value bytes, topic, partition, offset, timestamp), no decoding, no catalog. With
  ``from_json=True`` Spark's own JSON parser (JVM) also decodes the envelope into columns
  (``after.*``, ``op``, ``source.lsn``): an append log of changes, not a merged table.
* :func:`skeleton` - the shape of the lakestream job without its work: ``foreachBatch`` running
  ``mapInArrow`` over the batch and collecting one row per task, as the job's sink does, but the
  task only counts rows. It prices the Spark plumbing (JVM -> Python worker Arrow transfer).
* :func:`lakestream` - :func:`ingest.job.run_ingest` into a CDC table, with either
  ``source.reader``.

Spark pipelines are timed end to end (``query.start()`` to termination: includes starting the
Python source's planner process, ~1-3 s) and, from the query progress events, inside
micro-batches.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener

from bench.ingest import cpu
from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.source import SOURCE_NAME, register
from ingest.kafka.spark_source import SPARK_KAFKA_FORMAT, SourceReader

_CHUNK = 10_000
_STALL_S = 60.0
#: The envelope as Spark's from_json reads it (only what a bare pipeline would keep).
ENVELOPE_FIELDS = (
    "after: STRUCT<id: BIGINT, first_name: STRING, last_name: STRING, email: STRING, "
    "updated_at: BIGINT>, op: STRING, source: STRUCT<lsn: BIGINT, txId: BIGINT>, ts_ms: BIGINT"
)


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch of a query, from Spark's progress event."""

    batch_id: int
    rows: int
    duration_ms: dict[str, int]


@dataclass
class Measurement:
    """One pipeline's pass over the topic."""

    name: str
    events: int
    seconds: float
    """Wall seconds end to end."""
    batches: list[BatchProgress] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def in_batch_seconds(self) -> float | None:
        """Seconds inside micro-batches with rows (Spark's ``triggerExecution``)."""
        timed = [b.duration_ms.get("triggerExecution", 0) for b in self.batches if b.rows]
        return sum(timed) / 1000 if timed else None

    @property
    def in_batch_rate(self) -> float | None:
        seconds = self.in_batch_seconds
        return self.events / seconds if seconds else None

    @property
    def data_batches(self) -> int:
        return sum(1 for b in self.batches if b.rows)


# -- raw confluent-kafka ---------------------------------------------------------------------


def raw_consume(bootstrap: str, topic: str, partitions: int, expected: int) -> Measurement:
    """Count every message of the topic with one consumer in this process."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    count = 0
    try:
        cpu_before = cpu.snapshot()
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last_progress = time.monotonic()
        while count < expected:
            messages = consumer.consume(min(_CHUNK, expected - count), timeout=1.0)
            good = len(messages) - sum([m.error() is not None for m in messages])
            count += good
            if good:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > _STALL_S:
                raise RuntimeError(f"raw consume stalled at {count} of {expected} messages")
        seconds = time.perf_counter() - started
        used = cpu.delta(cpu_before, cpu.snapshot())
    finally:
        consumer.close()
    if count != expected:
        raise RuntimeError(f"raw consume got {count} messages, expected {expected}")
    return Measurement("raw confluent-kafka consume", count, seconds, notes={"cpu": used})


# -- Spark -------------------------------------------------------------------------------------


class ProgressRecorder(StreamingQueryListener):
    """Keeps every progress event per query name, and which queries terminated."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._progress: dict[str, list[BatchProgress]] = {}
        self._names: dict[str, str] = {}
        self._terminated: set[str] = set()

    def onQueryStarted(self, event: Any) -> None:
        with self._lock:
            self._names[str(event.id)] = str(event.name)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        entry = BatchProgress(
            int(progress.batchId), int(progress.numInputRows), dict(progress.durationMs)
        )
        with self._lock:
            self._progress.setdefault(str(progress.name), []).append(entry)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            name = self._names.get(str(event.id))
            if name is not None:
                self._terminated.add(name)

    def batches(self, name: str, timeout: float = 15.0) -> list[BatchProgress]:
        """The progress of query ``name``, once its termination event arrived (events come in
        order on Spark's listener bus, so every progress event is in by then)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if name in self._terminated:
                    return list(self._progress.get(name, []))
            time.sleep(0.05)
        with self._lock:
            return list(self._progress.get(name, []))


def source_frame(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    max_offsets: int | None,
    *,
    spark_source: bool = False,
) -> Any:
    """The topic's Kafka rows from ``lakestream-kafka``, or from Spark's own Kafka source
    (``read_committed`` as the job's ``source.reader: spark`` sets it)."""
    if spark_source:
        reader = spark.readStream.format(SPARK_KAFKA_FORMAT).option(
            "kafka.isolation.level", "read_committed"
        )
    else:
        register(spark)
        reader = spark.readStream.format(SOURCE_NAME)
    reader = (
        reader.option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load()


def run_query(
    writer: Any, name: str, recorder: ProgressRecorder
) -> tuple[float, list[BatchProgress], dict[str, float]]:
    """Run to the end; wall seconds, batches and CPU seconds by component."""
    cpu_before = cpu.snapshot()
    started = time.perf_counter()
    query = writer.queryName(name).trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - started
    used = cpu.delta(cpu_before, cpu.snapshot())
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"query {name} failed: {error}")
    return seconds, recorder.batches(name), used


def bare_parquet(
    spark: SparkSession,
    recorder: ProgressRecorder,
    *,
    bootstrap: str,
    topic: str,
    expected: int,
    max_offsets: int | None,
    workdir: Path,
    from_json: bool = False,
    embedded_schema: bool = False,
    name: str | None = None,
    spark_source: bool = False,
) -> Measurement:
    """Kafka rows -> Parquet files, no catalog; checks the files hold every event (and, with
    ``from_json``, that every event was parsed). ``spark_source``: Spark's own Kafka source."""
    label = name or ("bare-from-json" if from_json else "bare-parquet")
    frame = source_frame(spark, bootstrap, topic, max_offsets, spark_source=spark_source)
    if from_json:
        ddl = f"STRUCT<{ENVELOPE_FIELDS}>"
        if embedded_schema:  # {"schema": ..., "payload": envelope}; the schema is skipped
            ddl = f"STRUCT<payload: {ddl}>"
        root = "e.payload" if embedded_schema else "e"
        envelope = F.from_json(F.col("value").cast("string"), ddl)
        frame = frame.select(envelope.alias("e"), "partition", "offset", "timestamp").select(
            f"{root}.after.*",
            F.col(f"{root}.op").alias("op"),
            F.col(f"{root}.source.lsn").alias("lsn"),
            "partition",
            "offset",
            "timestamp",
        )
    out = workdir / label / "out"
    writer = (
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(workdir / label / "checkpoint"))
    )
    seconds, batches, used = run_query(writer, label, recorder)
    written = spark.read.parquet(str(out))
    rows = written.count()
    if rows != expected:
        raise RuntimeError(f"{label}: the Parquet files hold {rows} rows, expected {expected}")
    if from_json and (parsed := written.where("id IS NOT NULL").count()) != expected:
        raise RuntimeError(f"{label}: only {parsed} of {rows} rows were parsed")
    files = len(list(out.glob("*.parquet")))
    title = "bare Spark -> Parquet" + (" (+ from_json)" if from_json else "")
    if spark_source:
        title = "bare Spark (format kafka) -> Parquet" + (" (+ from_json)" if from_json else "")
    return Measurement(title, rows, seconds, batches, {"files": files, "cpu": used})


def _count_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


class _CountingSink:
    """``foreachBatch`` body shaped like the lakestream sink's: mapInArrow + collect."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, frame: Any, batch_id: int) -> None:
        collected = frame.mapInArrow(_count_task, "rows long").collect()
        self.rows += sum(row["rows"] for row in collected)


def skeleton(
    spark: SparkSession,
    recorder: ProgressRecorder,
    *,
    bootstrap: str,
    topic: str,
    expected: int,
    max_offsets: int | None,
    workdir: Path,
    name: str = "skeleton",
) -> Measurement:
    """Source -> foreachBatch(mapInArrow(count)): the job's plumbing, without decode or write."""
    sink = _CountingSink()
    writer = (
        source_frame(spark, bootstrap, topic, max_offsets)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(workdir / name / "checkpoint"))
    )
    seconds, batches, used = run_query(writer, name, recorder)
    if sink.rows != expected:
        raise RuntimeError(f"{name}: counted {sink.rows} rows, expected {expected}")
    title = "Spark skeleton: foreachBatch + mapInArrow(count)"
    return Measurement(title, sink.rows, seconds, batches, {"cpu": used})


@dataclass(frozen=True)
class LakestreamSettings:
    table: str
    dead_letter_table: str
    decoder: DecoderConfig
    hash_buckets: int


def lakestream(
    spark: SparkSession,
    recorder: ProgressRecorder,
    catalog: Catalog,
    *,
    bootstrap: str,
    topic: str,
    expected: int,
    max_offsets: int | None,
    settings: LakestreamSettings,
    workdir: Path,
    job: str,
    reader: SourceReader = SourceReader.PYTHON,
) -> Measurement:
    """``run_ingest`` over the topic (AvailableNow) with ``reader``; the caller verifies the
    table."""
    config = IngestJobConfig(
        job=job,
        bootstrap_servers=bootstrap,
        checkpoint=workdir / job / "checkpoint",
        dead_letter_table=settings.dead_letter_table,
        topics=(topic,),
        decoder=settings.decoder,
        hash_buckets=settings.hash_buckets,
        max_offsets_per_trigger=max_offsets,
        starting_offsets="earliest",
        source_reader=reader,
    )
    cpu_before = cpu.snapshot()
    started = time.perf_counter()
    run = run_ingest(config, spark, catalog)
    seconds = time.perf_counter() - started
    used = cpu.delta(cpu_before, cpu.snapshot())
    batches = recorder.batches(job)
    # The Python reader emits one row per offset range (its tasks read the records), so Spark's
    # row counts are ranges, not events; the caller checks the table and committed offsets.
    spark_rows = sum(b.rows for b in batches)
    notes = {"batches_committed": run.batches_committed, "job": job, "cpu": used,
             "spark_input_ranges": spark_rows}  # fmt: skip
    title = "lakestream ingest (run_ingest)"
    if reader is not SourceReader.PYTHON:
        title = f"lakestream ingest (run_ingest, source.reader: {reader.value})"
    return Measurement(title, expected, seconds, batches, notes)
