"""``lakestream-kafka``: a Spark Structured Streaming source for Kafka on PySpark's Python Data
Source API, reading with confluent-kafka.

Spark's own Kafka source is a JVM jar from Maven, which is not reachable everywhere this runs; this
source has the same option names and row schema (see :mod:`ingest.kafka.options` and
:mod:`ingest.kafka.schema`), so a job can use either.

How a micro-batch is made:

* the driver-side reader (in Spark's long-running Python source process) lists the partitions
  matching ``subscribe`` / ``subscribePattern`` and their watermarks, and chooses the end offsets
  (all there is, at most ``maxOffsetsPerTrigger`` offsets split over partitions by backlog, or
  the target fixed when ``Trigger.AvailableNow`` began). Partitions it has not seen before -
  new topics matching the pattern, new partitions - start at their earliest offset;
* each partition's ``[start, end)`` becomes one Spark input partition, read on an executor by
  :func:`ingest.kafka.reader.read_range` into Arrow batches - or, with ``emit=ranges``, handed on
  as one row naming the range for the sink's own task to read (the records then never cross
  into the JVM and back). Ranges of topics matching ``sharedTaskPattern`` share the input
  partition of another range instead (:func:`~ingest.kafka.offsets.group_ranges`): the ingest
  job in ``transactions: consistent`` names the transaction topic, which its driver reads;
* offsets live in Spark's checkpoint (and, with each commit, in the catalog); the source never
  commits consumer-group offsets;
* a broker outage is waited out by the driver's queries within ``brokerOutageBudgetMs`` (one
  ``kafka_unavailable`` warning per retry, see :mod:`ingest.kafka.outage`), then the query fails
  with :class:`~ingest.kafka.errors.BrokerUnavailableError`. With ``logLevel`` set, Spark's
  source process logs lakestream's lines (and librdkafka's, rate limited) at that level.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from catalog.logs import get_logger
from ingest.kafka.brokerview import BrokerView
from ingest.kafka.errors import DataLossError, KafkaOptionError
from ingest.kafka.offsets import (
    EARLIEST,
    OffsetRange,
    Offsets,
    OffsetsJson,
    PartitionId,
    from_json,
    group_ranges,
    next_end,
    plan_ranges,
    to_json,
)
from ingest.kafka.options import Emit, SourceOptions, parse_options
from ingest.kafka.outage import BrokerOutagePolicy
from ingest.kafka.reader import read_range
from ingest.kafka.schema import arrow_schema, range_batch, source_schema
from ingest.logs import configure_worker_logging

SOURCE_NAME = "lakestream-kafka"


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("lakestream-kafka")`` available in ``spark``."""
    spark.dataSource.register(KafkaDataSource)


def _log() -> Any:
    # Fetched per call: these objects are pickled to Spark workers and cached loggers do not pickle.
    return get_logger("lakestream.ingest.kafka")


class KafkaDataSource(DataSource):
    """The data source Spark instantiates per ``load()``; it checks the options right away."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def settings(self) -> SourceOptions:
        """The parsed options (a :class:`KafkaOptionError` for any bad one)."""
        return parse_options(self.options)

    def schema(self) -> StructType:
        return _schema_of(self.settings())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        settings = self.settings()
        if schema != _schema_of(settings):
            raise KafkaOptionError("schema", "the source has a fixed schema; do not pass one")
        return KafkaStreamReader(settings, schema)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver and reads their ranges on the executors."""

    def __init__(self, settings: SourceOptions, schema: StructType) -> None:
        self._settings = settings
        self._schema = schema
        self._broker: BrokerView | None = None
        self._target: Offsets | None = None  # the Trigger.AvailableNow end
        self._earliest: Offsets = {}  # first-seen earliest offsets of new partitions
        self._newest: Offsets | None = None  # for progress reports

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to the executors; the driver's consumer stays behind.
        state = self.__dict__.copy()
        state["_broker"] = None
        return state

    @property
    def broker(self) -> BrokerView:
        if self._broker is None:
            if self._settings.log_level is not None:  # Spark's source process: log on our behalf
                configure_worker_logging(self._settings.log_level)
            self._broker = broker_view(self._settings)
        return self._broker

    def initialOffset(self) -> OffsetsJson:
        """Where a query without a checkpoint starts, resolved to numbers now."""
        partitions = self.broker.partitions(self._settings.subscription)
        offsets = resolve_starting(self._settings, partitions, self.broker)
        _log().info(
            "kafka source starts",
            subscription=self._settings.subscription,
            starting=to_json(offsets),
            kafka=self._settings.redacted_kafka_config(),
        )
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._settings.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: the partitions and offsets that exist now."""
        self._target = self.broker.latest(self.broker.partitions(self._settings.subscription))
        _log().info("kafka source available-now target", target=to_json(self._target))

    def latestOffset(self, start: Mapping[str, Mapping[str, int]], limit: ReadLimit) -> OffsetsJson:
        """The end of the next micro-batch (equal to ``start`` when there is nothing new)."""
        current = from_json(start)
        newest = self._newest_offsets()
        self._newest = newest
        current = self._drop_reset_partitions(current, newest)
        earliest = self._earliest_of([pid for pid in newest if pid not in current])
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return to_json(next_end(current, newest, earliest, max_rows))

    def reportLatestOffset(self) -> OffsetsJson | None:
        return None if self._newest is None else to_json(self._newest)

    def partitions(
        self, start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]
    ) -> list[InputPartition]:
        def earliest(pid: PartitionId) -> int:
            return self._earliest_of([pid])[pid]

        ranges = plan_ranges(from_json(start), from_json(end), earliest)
        return [InputPartition(group) for group in group_ranges(ranges, self._settings.shares_task)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of a partition's ranges (one range, or a range and those sharing its task)."""
        target = arrow_schema(self._schema)
        ranges: tuple[OffsetRange, ...] = partition.value
        if self._settings.emit is Emit.RANGES:
            return iter([range_batch(ranges, target)])
        return chain.from_iterable(read_range(rng, self._settings, target) for rng in ranges)

    def commit(self, end: Mapping[str, Mapping[str, int]]) -> None:
        _log().debug("kafka source batch done", end=end)

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None

    def _newest_offsets(self) -> Offsets:
        if self._target is not None:
            return dict(self._target)
        return self.broker.latest(self.broker.partitions(self._settings.subscription))

    def _earliest_of(self, partitions: list[PartitionId]) -> Offsets:
        """Earliest offsets, remembered so that planning and replanning a batch agree."""
        missing = [pid for pid in partitions if pid not in self._earliest]
        if missing:
            self._earliest.update(self.broker.earliest(missing))
        return {pid: self._earliest[pid] for pid in partitions}

    def _drop_reset_partitions(self, current: Offsets, newest: Offsets) -> Offsets:
        """Partitions whose end went below our position: fail, or restart them from earliest."""
        reset = sorted(pid for pid in current if pid in newest and newest[pid] < current[pid])
        if not reset:
            return current
        pid = reset[0]
        reason = (
            f"the partition ends at {newest[pid]}, before the query's position "
            f"{current[pid]} (topic recreated or truncated?)"
        )
        if self._settings.fail_on_data_loss:
            raise DataLossError(pid.topic, pid.partition, reason)
        _log().warning(
            "kafka offsets reset; reading from earliest", partitions=[str(p) for p in reset]
        )
        for gone in reset:  # their earliest offset is looked up again, not taken from before
            self._earliest.pop(gone, None)
        return {p: offset for p, offset in current.items() if p not in reset}


def broker_view(settings: SourceOptions) -> BrokerView:
    """The driver's broker queries, waiting out an outage within the source's budget."""
    policy = BrokerOutagePolicy(budget=settings.broker_outage_budget_s)
    return BrokerView(settings.kafka_config, policy)


def _schema_of(settings: SourceOptions) -> StructType:
    return source_schema(settings.include_headers, ranges=settings.emit is Emit.RANGES)


def starting_offsets_now(settings: SourceOptions) -> OffsetsJson:
    """``startingOffsets`` resolved to numbers against the brokers, for the partitions that
    exist now (the ingest job saves this before its query starts; see :mod:`ingest.startpoint`)."""
    broker = broker_view(settings)
    try:
        partitions = broker.partitions(settings.subscription)
        return to_json(resolve_starting(settings, partitions, broker))
    finally:
        broker.close()


def resolve_starting(
    settings: SourceOptions, partitions: list[PartitionId], broker: BrokerView
) -> Offsets:
    """``startingOffsets`` as numbers for the partitions that exist now.

    Explicit offsets are kept as given (also for partitions not seen yet); existing partitions
    the JSON does not name start at earliest; ``-2``/``-1`` mean earliest/latest, as in Spark.
    """
    spec = settings.starting
    if isinstance(spec, str):
        marks = broker.watermarks(partitions)
        return {pid: marks[pid][0 if spec == "earliest" else 1] for pid in partitions}
    offsets = {pid: offset for pid, offset in spec.items() if offset >= 0}
    sentinels = {pid: spec.get(pid, EARLIEST) for pid in partitions if pid not in offsets}
    marks = broker.watermarks(sentinels)
    for pid, sentinel in sentinels.items():
        offsets[pid] = marks[pid][0 if sentinel == EARLIEST else 1]
    return offsets
