"""The sink's tasks for ``source.reader: spark``: the batch holds records, the tasks decode them.

With Spark's built-in Kafka source (:mod:`ingest.kafka.spark_source`) the ``foreachBatch``
DataFrame holds the records themselves (``topic, partition, offset, key, value, timestamp``). A
``mapInArrow`` task turns its Arrow batches into the decoder's :class:`RecordChunk` s and hands
them to the same decode-and-write path the Python reader's tasks use
(:func:`ingest.sink.task.write_records`); only the report goes back to the driver.

Why no repartition: Spark's Kafka source makes one input partition per topic-partition of the
batch (as long as ``minPartitions`` and ``maxRecordsPerPartition`` are not set; the job sets
neither and the user's options cannot, they are ``kafka.*`` only), and ``mapInArrow`` keeps the
partitioning. So all changes of a key in a batch - Debezium keys a topic by primary key - are in
one task, in offset order, as with the Python reader; a shuffle by topic-partition would send
every record through Spark's shuffle to get what is already there.

The batch's end offsets come from Spark's offset log (:func:`batch_end_offsets`), never from the
records: the last offsets of a range may be control records or aborted data, which a
``read_committed`` consumer does not return.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc

from ingest.config import IngestJobConfig
from ingest.debezium import RecordChunk
from ingest.errors import IngestError
from ingest.kafka.offsets import OffsetsJson
from ingest.kafka.spark_source import SourceReader
from ingest.sink.plan import SinkPlan
from ingest.sink.report import TaskReport, report_row
from ingest.sink.task import TaskClock, write_records

__all__ = [
    "RECORD_COLUMNS",
    "OffsetLogUnreadable",
    "batch_end_offsets",
    "chunks_of_records",
    "records_task",
    "spark_batch_ends",
    "write_spark_batch",
]

#: The columns of Spark's Kafka source the tasks read (its ``headers`` are not asked for).
RECORD_COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp")


class OffsetLogUnreadable(IngestError):
    """Spark's offset log has no end offsets for a batch: its commit cannot say where it ends."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no end offsets in Spark's offset log {path}: cannot commit the batch")
        self.path = path


def write_spark_batch(df: Any, plan: SinkPlan, report_type: Any) -> list[Any]:
    """Run the batch's tasks over the records of Spark's Kafka source; their report rows."""
    records = df.select(*RECORD_COLUMNS)
    return list(records.mapInArrow(partial(records_task, plan=plan), report_type).collect())


def batch_end_offsets(checkpoint: Path, batch_id: int) -> OffsetsJson:
    """Where ``batch_id`` ends in every partition, from Spark's offset log (the Kafka source's
    JSON, written before the batch runs and the same on a replay).

    Raises:
        OffsetLogUnreadable: the batch's log is missing or is not the Kafka source's JSON.
    """
    from ingest.sink.consistent import batch_ends  # the job's one reader of the offset log

    ends = batch_ends(checkpoint, batch_id)
    if not ends:
        raise OffsetLogUnreadable(checkpoint / "offsets" / str(batch_id))
    out: OffsetsJson = {}
    for (topic, partition), end in sorted(ends.items()):
        out.setdefault(topic, {})[str(partition)] = int(end)
    return out


def spark_batch_ends(config: IngestJobConfig, batch_id: int) -> list[TaskReport]:
    """With ``source.reader: spark``, one report carrying only the batch's end offsets, which
    the driver adds to its tasks' (whose offsets are empty); nothing with the Python reader,
    whose tasks report their ranges' ends."""
    if config.source_reader is not SourceReader.SPARK:
        return []
    return [TaskReport(offsets=batch_end_offsets(config.checkpoint, batch_id))]


def records_task(batches: Iterator[pa.RecordBatch], plan: SinkPlan) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Spark's Kafka records in, decoded and written; one report row out.

    The report's offsets stay empty: the driver takes the batch's ends from Spark's offset log.
    """
    clock = TaskClock.start(plan)
    chunks = [chunk for batch in batches for chunk in chunks_of_records(batch)]
    yield report_row(write_records(chunks, plan, clock, offsets={}))


def chunks_of_records(batch: pa.RecordBatch) -> list[RecordChunk]:
    """A batch of Spark's Kafka rows as chunks: one per run of one topic-partition.

    Values are taken out at once (every one is parsed); keys and timestamps are read from the
    Arrow arrays only where the decoder asks (deletes, dead letters, positions without an LSN).
    """
    if batch.num_rows == 0:
        return []
    topics, partitions = batch.column("topic"), batch.column("partition")
    chunks = []
    for start, stop in _runs(topics, partitions):
        part = batch.slice(start, stop - start)
        offsets = part.column("offset")
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        contiguous = last - first + 1 == part.num_rows
        millis = pc.divide(part.column("timestamp").cast(pa.int64()), 1000)
        chunks.append(
            RecordChunk(
                str(topics[start].as_py()),
                int(partitions[start].as_py()),
                range(first, last + 1) if contiguous else offsets.to_pylist(),
                ArrowField(part.column("key")),
                part.column("value").to_pylist(),
                ArrowField(millis),
            )
        )
    return chunks


def _runs(topics: pa.Array, partitions: pa.Array) -> list[tuple[int, int]]:
    """``[start, stop)`` of each run of equal (topic, partition); one run in the usual case
    (a task reads one topic-partition), found without a Python loop over the rows."""
    n = len(topics)
    if pc.count_distinct(topics).as_py() == 1 and pc.count_distinct(partitions).as_py() == 1:
        return [(0, n)]
    names, numbers = topics.to_pylist(), partitions.to_pylist()
    starts = [
        0,
        *(i for i in range(1, n) if (names[i], numbers[i]) != (names[i - 1], numbers[i - 1])),
    ]
    return list(zip(starts, [*starts[1:], n], strict=True))


class ArrowField(Sequence[Any]):
    """One column of a chunk read from its Arrow array only where asked (see
    :class:`ingest.kafka.reader.MessageField`, the Python reader's counterpart)."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __len__(self) -> int:
        return len(self._array)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._array[index].to_pylist()
        return self._array[index].as_py()
