"""``lakestream``: a Spark batch reader of lakestream tables on PySpark's Python Data Source API.

Where each step runs, and why it is there:

* ``load()`` - :meth:`LakestreamDataSource.schema`, in a Python worker of the driver: checks the
  options, looks the table up and resolves the version to read (``versionAsOf``,
  ``timestampAsOf`` or the latest) to a number. Spark keeps the data source as pickled after
  this call, so every action on the DataFrame reads that same version, with the schema it was
  loaded with; load again to see newer commits.
* planning, once per action - :meth:`LakestreamReader.pushFilters` turns the filters it can
  apply exactly into catalog predicates; :meth:`LakestreamReader.partitions` plans the pinned
  version (one catalog connection) and prunes partitions, buckets and files by those
  predicates (see :mod:`ingest.spark_read.planning`).
* tasks - :meth:`LakestreamReader.read`, on the executors, reads the files of one input partition
  (merge-on-read for CDC buckets) straight into Arrow batches. Executors never connect to the
  catalog: Spark pickles the reader to them *before* it asks for the partitions, so the
  partitions carry all they need, and the DSN stays on the driver.

Filter pushdown needs ``spark.sql.python.filterPushdown.enabled``; :func:`register` turns it on.
Spark's Python data sources cannot prune columns yet: pass a schema (``.schema("id BIGINT, ...")``)
naming a subset of the columns to read only those.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import SecretStr
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from catalog import (
    Scan,
    ScanFilter,
    Table,
    feed_schema,
    partition_filter,
    without_internal,
)
from catalog.files import Predicate
from catalog.logs import get_logger
from ingest.spark_read.changes import (
    ChangeBatchReader,
    ChangePlanner,
    ChangeSpec,
    ChangeStreamReader,
    change_columns,
)
from ingest.spark_read.connection import connect
from ingest.spark_read.errors import ReadOptionError, TableReplacedError
from ingest.spark_read.filters import ColumnRef, split_filters
from ingest.spark_read.options import (
    CATALOG,
    ReadOptions,
    check_change_options,
    is_change_read,
    parse_options,
    parse_stream_options,
)
from ingest.spark_read.planning import LakestreamPartition, ReadSpec, input_partitions
from ingest.spark_read.read import read_partition
from ingest.spark_read.types import spark_schema

SOURCE_NAME = "lakestream"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("lakestream")`` available in ``spark``.

    Also turns on Python data source filter pushdown for the session: without it Spark refuses
    any Python reader that implements ``pushFilters`` instead of ignoring it.
    """
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(LakestreamDataSource)


def _log() -> Any:
    # Fetched per call: these objects are pickled to Spark workers and cached loggers do not pickle.
    return get_logger("lakestream.ingest.spark_read")


@dataclass(frozen=True)
class PinnedTable:
    """The table a DataFrame reads and the version it reads, resolved once."""

    name: str
    table_id: uuid.UUID
    version: int
    schema: pa.Schema
    """The stored schema, internal columns included (a user-given schema may name them)."""


class LakestreamDataSource(DataSource):
    """The data source Spark instantiates per ``load()``."""

    _pinned: PinnedTable | None = None

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def settings(self) -> ReadOptions:
        """The parsed options (a :class:`ReadOptionError` for any bad one)."""
        return parse_options(self.options)

    def schema(self) -> StructType:
        """The table's current schema in Spark types, without lakestream's internal columns
        (a user-given schema may name them); pins the version this DataFrame reads. A change
        read (stream or batch) adds ``_change_type``, ``_commit_version``, ``_commit_timestamp``."""
        if is_change_read(self.options):
            settings = check_change_options(self.options)
            with connect(settings.dsn, settings.catalog_schema) as catalog:
                meta = catalog.load_table(settings.table).meta
            return spark_schema(feed_schema(meta))
        return spark_schema(without_internal(self._pin().schema))

    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader of one query; from here on only the reader holds the DSN.

        Spark pickles this data source, too, into the function it runs on the executors, so
        the ``catalog`` option is dropped from it once the reader has the DSN.
        """
        settings = self.settings()
        if settings.changes is not None:
            return ChangeBatchReader(self._change_planner(settings, schema))
        pinned = self._pinned or self._pin()  # a user-given schema skips schema()
        columns = column_refs(schema, pinned.schema)
        output = to_arrow_schema(schema, timezone="UTC")  # what Spark checks batches against
        self.options.pop(CATALOG, None)
        return LakestreamReader(settings, pinned, columns, output)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The reader of a stream of the table's changes (see :mod:`ingest.spark_read.changes`)."""
        return ChangeStreamReader(self._change_planner(parse_stream_options(self.options), schema))

    def _change_planner(self, settings: ReadOptions, schema: StructType) -> ChangePlanner:
        with connect(settings.dsn, settings.catalog_schema) as catalog:
            meta = catalog.load_table(settings.table).meta
        output = to_arrow_schema(schema, timezone="UTC")
        spec = ChangeSpec(meta, change_columns(output, meta.user_schema), output)
        self.options.pop(CATALOG, None)
        return ChangePlanner(settings, spec)

    def _pin(self) -> PinnedTable:
        settings = self.settings()
        with connect(settings.dsn, settings.catalog_schema) as catalog:
            table = catalog.load_table(settings.table)
            version = table.resolve_version(settings.version, settings.as_of)
        self._pinned = PinnedTable(table.name, table.meta.table_id, version, table.meta.schema)
        return self._pinned


class LakestreamReader(DataSourceReader):
    """Plans a read of the pinned version on the driver; reads input partitions on executors."""

    def __init__(
        self,
        settings: ReadOptions,
        pinned: PinnedTable,
        columns: Mapping[str, ColumnRef],
        output: pa.Schema,
    ) -> None:
        self._dsn: SecretStr | None = settings.dsn
        self._catalog_schema = settings.catalog_schema
        self._pinned = pinned
        self._columns = dict(columns)
        self._output = output
        self._max_split_bytes = settings.max_split_bytes
        self._storage = settings.storage
        self._predicates: list[Predicate] = []

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to the executors, which never connect: the DSN stays here.
        state = self.__dict__.copy()
        state["_dsn"] = None
        return state

    def pushFilters(self, filters: Sequence[Filter]) -> list[Filter]:
        """Keep the filters the reader applies exactly; return the rest for Spark."""
        self._predicates, left = split_filters(filters, self._columns)
        return left

    def partitions(self) -> list[InputPartition]:
        """Plan the read on the driver.

        Raises:
            CatalogUnavailableError: the catalog could not be reached. Planning a read fails
                fast, as every interactive read does; it never waits out an outage.
        """
        if self._dsn is None:
            raise RuntimeError("partitions() runs on the driver, which holds the catalog DSN")
        with connect(self._dsn, self._catalog_schema) as catalog:
            table = catalog.load_table(self._pinned.name)
            if table.meta.table_id != self._pinned.table_id:
                raise TableReplacedError(self._pinned.name)
            scan_filter = ScanFilter(predicates=tuple(self._predicates))
            pruned = partition_filter(table.meta, scan_filter)  # before snapshots load
            scan = Scan(
                table.meta,
                table.plan(version=self._pinned.version, partition_filter=pruned),
                [c.name for c in self._columns.values()],
                scan_filter,
            )
        parts = input_partitions(self._spec(table), scan.partitions(), self._max_split_bytes)
        self._log_plan(scan, parts)
        return list(parts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LakestreamPartition):
            return iter(())  # Spark's stand-in partition when a read has none
        return read_partition(partition)

    def _spec(self, table: Table) -> ReadSpec:
        meta = table.meta
        return ReadSpec(
            table=table.name,
            version=self._pinned.version,
            location=meta.location,
            schema=meta.schema,
            primary_key=meta.primary_key,
            sequence_column=meta.sequence_column,
            columns=tuple(c.name for c in self._columns.values()),
            predicates=tuple(self._predicates),
            output=self._output,
            storage=self._storage,
        )

    def _log_plan(self, scan: Scan, parts: Sequence[LakestreamPartition]) -> None:
        _log().info(
            "lakestream read planned",
            table=self._pinned.name,
            version=self._pinned.version,
            table_partitions=len(scan.plan.partitions),
            input_partitions=len(parts),
            merged=sum(p.merge for p in parts),
            files=sum(len(p.files) for p in parts),
            pushed=[f"{p.column} {p.op}" for p in self._predicates],  # values may be personal
        )


def column_refs(schema: StructType, table_schema: pa.Schema) -> dict[str, ColumnRef]:
    """Each Spark column with the table column it reads (names match case-insensitively)."""
    by_lower = {name.lower(): name for name in table_schema.names}
    refs: dict[str, ColumnRef] = {}
    for spark_name in schema.fieldNames():
        name = spark_name if spark_name in table_schema.names else by_lower.get(spark_name.lower())
        if name is None:
            raise ReadOptionError("schema", f"column {spark_name!r} is not in the table")
        refs[spark_name] = ColumnRef(name, table_schema.field(name).type)
    return refs
