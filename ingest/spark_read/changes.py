"""Change reads from Spark: ``spark.readStream.format("lakestream")`` and the batch form
``spark.read.format("lakestream").option("startingVersion", N)``.

Rows are the table's columns plus ``_change_type``, ``_commit_version`` and
``_commit_timestamp`` (:mod:`catalog.changes` says how each kind of commit maps to changes).

Where each step runs, and why:

* the driver's reader (Spark's Python source process for a stream) holds the catalog
  connection: it finds the latest version, chooses where a micro-batch ends, checks that the
  versions a batch needs were not expired, and plans each version as
  :class:`~catalog.changes.VersionDelta` s - one per partition the version changed, whose
  snapshots before and after name the files;
* executors derive each delta's rows from the files alone
  (:func:`catalog.changes.derive_changes`) and never connect to the catalog, as batch reads.

Offsets are ``{"version": N}``: every change up to and including version ``N`` was emitted.
A stream starting from the table as it is has the initial offset ``{"snapshot": "pending"}``;
its first micro-batch ends at the version current then, ``{"version": S}``, and is the table
at ``S`` as inserts. Offsets live in Spark's checkpoint, so a restarted query replays or
resumes exactly where it stood. A ``consumerId`` also registers the stream's position in the
catalog: expiry keeps what it has not read, and a query started without a checkpoint resumes
after the position its consumer last committed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pydantic import SecretStr
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from catalog import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    Catalog,
    ConsumerNotFoundError,
    Scan,
    Table,
    TableMeta,
    VersionDelta,
    VersionEntry,
    check_base,
    derive_changes,
    finish_changes,
    first_version_since,
    list_versions,
    plan_delta,
)
from catalog.logs import get_logger
from ingest.spark_read.connection import connect
from ingest.spark_read.errors import ReadOptionError, TableReplacedError
from ingest.spark_read.options import (
    CONSUMER_ID,
    DEFAULT_MAX_SPLIT_BYTES,
    ENDING_VERSION,
    ChangeOptions,
    ReadOptions,
)
from ingest.spark_read.planning import LakestreamPartition, ReadSpec, input_partitions
from ingest.spark_read.read import conform, read_partition

CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
PENDING_SNAPSHOT: dict[str, Any] = {"snapshot": "pending"}


def _log() -> Any:
    # Fetched per call: these objects are pickled to Spark workers and cached loggers do not pickle.
    return get_logger("lakestream.ingest.spark_read")


@dataclass(frozen=True)
class ChangeSpec:
    """What every task of one change read shares."""

    meta: TableMeta
    """The table as loaded on the driver; its storage options travel with it."""
    columns: tuple[str, ...]
    """The table columns asked for, in the order of the Spark schema."""
    output: pa.Schema
    """The Arrow form of the Spark schema: batches must match it exactly."""

    @property
    def data_output(self) -> pa.Schema:
        return pa.schema([f for f in self.output if f.name not in CHANGE_COLUMNS])


@dataclass(frozen=True)
class DeltaPartition(InputPartition):
    """One task: the changes one version made to one partition."""

    spec: ChangeSpec
    delta: VersionDelta


@dataclass(frozen=True)
class SnapshotPartition(InputPartition):
    """One task of a stream's first micro-batch: part of the table at a version, as inserts."""

    spec: ChangeSpec
    part: LakestreamPartition
    version: int
    committed_at: dt.datetime


def change_columns(output: pa.Schema, table_schema: pa.Schema) -> tuple[str, ...]:
    """The table columns of a change read's Spark schema, in its order (names match
    case-insensitively, as Spark's do); the change columns may be left out."""
    by_lower = {name.lower(): name for name in table_schema.names}
    columns = []
    for name in output.names:
        if name in CHANGE_COLUMNS:
            continue
        found = name if name in table_schema.names else by_lower.get(name.lower())
        if found is None:
            raise ReadOptionError("schema", f"column {name!r} is not in the table")
        columns.append(found)
    return tuple(columns)


def read_changes(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The executor side of both change partitions."""
    if isinstance(partition, DeltaPartition):
        return _delta_batches(partition)
    if isinstance(partition, SnapshotPartition):
        return _snapshot_batches(partition)
    return iter(())  # Spark's stand-in partition when a read has none


def _delta_batches(partition: DeltaPartition) -> Iterator[pa.RecordBatch]:
    spec = partition.spec
    changes = derive_changes(spec.meta, partition.delta)
    changes = finish_changes(spec.meta, changes, columns=list(spec.columns))
    picked = changes.select([*spec.columns, *_present(spec.output)])
    for batch in picked.to_batches():
        yield conform(_named(batch, spec.output), spec.output)


def _snapshot_batches(partition: SnapshotPartition) -> Iterator[pa.RecordBatch]:
    spec = partition.spec
    at = partition.committed_at.astimezone(dt.UTC)
    for batch in read_partition(partition.part):
        n = batch.num_rows
        extra = {
            CHANGE_TYPE: pa.array(["insert"] * n, pa.string()),
            COMMIT_VERSION: pa.array([partition.version] * n, pa.int64()),
            COMMIT_TIMESTAMP: pa.array([at] * n, pa.timestamp("us", tz="UTC")),
        }
        columns = [*batch.columns, *(extra[c] for c in _present(spec.output))]
        yield conform(pa.RecordBatch.from_arrays(columns, schema=_raw(batch, spec)), spec.output)


def _present(output: pa.Schema) -> list[str]:
    """The change columns the Spark schema holds, in its order."""
    return [name for name in output.names if name in CHANGE_COLUMNS]


def _raw(batch: pa.RecordBatch, spec: ChangeSpec) -> pa.Schema:
    extra = {
        CHANGE_TYPE: pa.string(),
        COMMIT_VERSION: pa.int64(),
        COMMIT_TIMESTAMP: pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([*batch.schema, *(pa.field(c, extra[c]) for c in _present(spec.output))])


def _named(batch: pa.RecordBatch, output: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the Spark schema's column names (table names may differ in case)."""
    return pa.RecordBatch.from_arrays(batch.columns, names=output.names)


class ChangePlanner:
    """The driver's side of a change read: one catalog connection, the table pinned by id."""

    def __init__(self, settings: ReadOptions, spec: ChangeSpec) -> None:
        self.settings = settings
        self.spec = spec
        self._catalog: Catalog | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled to executors with the reader: the connection and the DSN stay on the driver.
        state = self.__dict__.copy()
        state["_catalog"] = None
        state["settings"] = replace(self.settings, dsn=SecretStr(""))
        return state

    @property
    def changes(self) -> ChangeOptions:
        assert self.settings.changes is not None
        return self.settings.changes

    def table(self) -> Table:
        if self._catalog is None:
            if not self.settings.dsn.get_secret_value():
                raise RuntimeError("planning runs on the driver, which holds the catalog DSN")
            self._catalog = connect(self.settings.dsn, self.settings.catalog_schema)
        table = self._catalog.load_table(str(self.spec.meta.name))
        if table.meta.table_id != self.spec.meta.table_id:
            raise TableReplacedError(table.name)
        return table

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def start_version(self, table: Table) -> int:
        """The first version whose changes a read from the options' starting point emits."""
        changes = self.changes
        if changes.start_time is not None:
            found = first_version_since(table.catalog.store, table.meta, changes.start_time)
            return table.current_version() + 1 if found is None else found
        if changes.latest or changes.start_version is None:
            return table.current_version() + 1
        return max(changes.start_version, 1)  # version 0 is the empty table's creation

    def delta_partitions(self, table: Table, first: int, last: int) -> list[InputPartition]:
        """The changes of versions ``first`` to ``last``, a task per version and partition."""
        if first > last:
            return []
        store = table.catalog.store
        check_base(store, table.meta, first, consumer_id=self.changes.consumer_id)
        spec = replace(self.spec, meta=table.meta)
        parts: list[InputPartition] = []
        for entry in list_versions(store, table.meta, first, last):
            for delta in plan_delta(store, table.meta, entry).by_bucket(table.meta):
                parts.append(DeltaPartition(spec, delta))
        _log().info(
            "lakestream changes planned",
            table=table.name,
            first_version=first,
            last_version=last,
            tasks=len(parts),
        )
        return parts

    def snapshot_partitions(self, table: Table, version: int) -> list[InputPartition]:
        """The table at ``version`` as inserts: the batch reader's plan of that version."""
        meta = table.meta
        scan = Scan(meta, table.plan(version=version), list(self.spec.columns))
        read = ReadSpec(
            table=table.name,
            version=version,
            location=meta.location,
            schema=meta.schema,
            primary_key=meta.primary_key,
            sequence_column=meta.sequence_column,
            columns=self.spec.columns,
            predicates=(),
            output=self.spec.data_output,
            storage=meta.storage,
        )
        entry = _entry(table, version)
        spec = replace(self.spec, meta=meta)
        parts: list[InputPartition] = [
            SnapshotPartition(spec, p, version, entry.committed_at)
            for p in input_partitions(read, scan.partitions(), DEFAULT_MAX_SPLIT_BYTES)
        ]
        _log().info(
            "lakestream change stream snapshot planned",
            table=table.name,
            version=version,
            tasks=len(parts),
        )
        return parts


def _entry(table: Table, version: int) -> VersionEntry:
    found = list_versions(table.catalog.store, table.meta, version, version)
    if not found:
        raise ReadOptionError("startingVersion", f"{table.name} has no version {version}")
    return found[0]


class ChangeBatchReader(DataSourceReader):
    """``spark.read.format("lakestream").option("startingVersion", N)``: versions ``N`` to
    ``endingVersion`` (default: the latest when the read is planned), both included."""

    def __init__(self, planner: ChangePlanner) -> None:
        self._planner = planner

    def partitions(self) -> list[InputPartition]:
        planner = self._planner
        try:
            table = planner.table()
            latest = table.current_version()
            end = planner.changes.end_version
            if end is not None and end > latest:
                raise ReadOptionError(ENDING_VERSION, f"{table.name} has versions 0..{latest}")
            return planner.delta_partitions(
                table, planner.start_version(table), latest if end is None else end
            )
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_changes(partition)


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("lakestream")``: micro-batches of whole versions."""

    def __init__(self, planner: ChangePlanner) -> None:
        self._planner = planner
        self._target: int | None = None  # the Trigger.AvailableNow end
        self._latest: int | None = None  # for progress reports
        self._advanced: int | None = None  # the consumer's position, once this run moved it
        self._initial: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        """Where a query without a checkpoint starts: after its consumer's position when it
        has one, else at the options' starting point.

        Spark may ask more than once before the first batch is done, and asks again after a
        restart that replays the first batch, so the answer must not change until a batch is
        done: the consumer is registered only once one is (:meth:`_advance`), never here."""
        if self._initial is not None:
            return dict(self._initial)
        planner, changes = self._planner, self._planner.changes
        table = planner.table()
        position = self._consumer_position(table)
        if position is not None:
            offset: dict[str, Any] = {"version": position}
        elif changes.snapshot_first:
            offset = dict(PENDING_SNAPSHOT)
        else:
            offset = {"version": planner.start_version(table) - 1}
        _log().info(
            "lakestream change stream starts",
            table=table.name,
            offset=offset,
            consumer_id=changes.consumer_id,
        )
        self._initial = offset
        return dict(offset)

    def getDefaultReadLimit(self) -> ReadLimit:
        rows = self._planner.changes.max_rows
        return ReadAllAvailable() if rows is None else ReadMaxRows(rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._planner.table().current_version()
        _log().info("lakestream change stream available-now target", version=self._target)

    def latestOffset(self, start: Mapping[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch (``start`` itself when nothing is new)."""
        table = self._planner.table()
        latest = self._target if self._target is not None else table.current_version()
        self._latest = latest
        if "version" in start:  # Spark asks once the batch ending at start has finished
            self._advance(table, int(start["version"]))
        if "version" not in start:
            return {"version": latest}  # the snapshot batch
        done = int(start["version"])
        if latest <= done:
            return dict(start)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return {"version": self._batch_end(table, done, latest, max_rows)}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else {"version": self._latest}

    def partitions(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> list[InputPartition]:
        table = self._planner.table()
        last = int(end["version"])
        if "version" not in start:
            return self._planner.snapshot_partitions(table, last)
        return self._planner.delta_partitions(table, int(start["version"]) + 1, last)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_changes(partition)

    def commit(self, end: Mapping[str, Any]) -> None:
        """Spark finished the batch ending at ``end``: its consumer moves there."""
        if "version" in end:
            self._advance(self._planner.table(), int(end["version"]))

    def stop(self) -> None:
        self._planner.close()

    def _advance(self, table: Table, version: int) -> None:
        """Move the consumer (if any) forward to ``version``, the end of a finished batch.

        Spark tells a source a batch is done (``commit``) only while it plans the next one, so
        the last batch of a run would never be told; ``latestOffset(start)`` is asked only
        after the batch ending at ``start`` finished (a restart re-runs an unfinished batch
        before asking), so it moves the consumer too. Never backwards within a run. The first
        finished batch registers the consumer: until then it protects nothing, and a query
        that dies before it starts over from its options."""
        consumer = self._planner.changes.consumer_id
        if consumer is None or (self._advanced is not None and version <= self._advanced):
            return
        table.catalog.register_consumer(table, consumer, version)  # renews its ttl as well
        self._advanced = version

    def _batch_end(self, table: Table, done: int, latest: int, max_rows: int | None) -> int:
        """The last version of the batch after ``done``: all up to ``latest``, at most
        ``maxVersionsPerTrigger`` of them, and while their added rows stay within
        ``max_rows`` (at least one version, so a large version still moves on)."""
        changes = self._planner.changes
        last = latest if changes.max_versions is None else min(latest, done + changes.max_versions)
        if max_rows is None:
            return last
        rows = 0
        for entry in list_versions(table.catalog.store, table.meta, done + 1, last):
            rows += entry.rows_added if entry.changed_partitions else 0  # compactions emit none
            if rows > max_rows and entry.version > done + 1:
                return entry.version - 1
        return last

    def _consumer_position(self, table: Table) -> int | None:
        consumer = self._planner.changes.consumer_id
        if consumer is None:
            return None
        try:
            found = table.catalog.consumer(table, consumer)
        except ConsumerNotFoundError:
            return None
        _log().info(
            "lakestream change stream resumes from its consumer",
            table=table.name,
            consumer_id=consumer,
            version=found.version,
            option=CONSUMER_ID,
        )
        return found.version
