"""The run whose JVM writes the driver's class archive (:mod:`ingest.spark_archive`).

Run as ``python -m ingest.spark_archive_workload PATH HOST`` (``HOST``: the
:class:`~ingest.spark_host.SparkHost` as JSON, from :func:`ingest.spark_archive.build`): it
starts a local session whose JVM dumps every class it loaded to PATH at exit, and makes it load
what an ingest job's driver loads - a streaming query from a Python data source into
``foreachBatch``, with tasks in ``mapInArrow`` - then stops the JVM and waits for it (the dump
happens as it exits).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from ingest.spark_host import SparkHost
from ingest.spark_session import local_spark

_BATCHES = 2


class _Counter(DataSource):
    """Two micro-batches of a few numbers: the smallest stream a Python source can make."""

    @classmethod
    def name(cls) -> str:
        return "lakestream_archive_counter"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _CounterReader()


class _CounterReader(DataSourceStreamReader):
    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"n": min(start["n"] + 1, _BATCHES)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(n) for n in range(start["n"], end["n"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield from ((partition.value * 10 + i,) for i in range(10))


def _double(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield pa.record_batch([pc.multiply(batch.column(0), 2)], names=["n"])


def _sink(frame: DataFrame, batch_id: int) -> None:
    frame.mapInArrow(_double, "n long").collect()


def run(spark: SparkSession, checkpoint: Path) -> None:
    spark.dataSource.register(_Counter)
    query = (
        spark.readStream.format(_Counter.name())
        .load()
        .writeStream.foreachBatch(_sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    numbers = spark.range(100)
    numbers.groupBy((numbers.id % 3).alias("k")).count().collect()


def main(argv: list[str]) -> int:
    target, host = argv
    spark = local_spark(
        "lakestream-spark-archive",
        {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={target}"},
        host=SparkHost.from_json(host),
    )
    with tempfile.TemporaryDirectory(prefix="lakestream-archive-") as home:
        run(spark, Path(home) / "checkpoint")
    spark.stop()
    _stop_jvm()
    return 0


def _stop_jvm() -> None:
    """End the JVM and wait for it: it writes the archive as it exits. The gateway exits when
    its stdin (a pipe from this process) closes."""
    gateway: Any = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    gateway.shutdown()
    proc.stdin.close()
    proc.wait(timeout=300)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
