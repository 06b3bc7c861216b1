"""A table of the catalog: reads, time travel, row writes, schema changes and maintenance.

Separate from :mod:`catalog.catalog` so that each stays readable; a :class:`Table` always belongs to
the :class:`~catalog.catalog.Catalog` that loaded it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.changes import ChangeFeed, resolve_range
from catalog.dml import StatementResult, WhereSpec, run_statement
from catalog.errors import (
    CommitConflict,
    ConflictKind,
    MaintenanceConfigError,
    SchemaError,
    TableNotFoundError,
    VersionNotFoundError,
)
from catalog.files.writer import WriteOptions
from catalog.logs import get_logger
from catalog.maintenance.expiry import ExpiryReport, expire_versions
from catalog.maintenance.policy import MaintenancePolicy, check_retain_last, ttl_column
from catalog.maintenance.ttl import TtlReport, drop_expired_partitions
from catalog.maintenance.vacuum import Vacuum, VacuumReport
from catalog.meta import TableMeta, is_internal_column
from catalog.model import (
    CommitOp,
    CommitRequest,
    CommitResult,
    IdempotencyKey,
    PartitionCommit,
    SourcePoint,
    TableCommit,
)
from catalog.planning import PartitionFilter, ScanPlan, plan_scan
from catalog.retry import REBASE_RETRY, RetryPolicy, lost_to_concurrent_write
from catalog.scan import FilterSpec, Scan, ScanFilter, partition_filter
from catalog.schema_changes import plan_schema_change
from catalog.table_store import (
    bytes_by_op,
    change_schema,
    head_version,
    history_rows,
    iceberg_state,
    require_unexpired,
    snapshots_at,
    version_at,
)
from catalog.writes import (
    DEFAULT_WRITE_OPTIONS,
    conform,
    deletes,
    key_and_partition_columns,
    stage_append,
    stage_changes,
    upserts,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as IcebergCatalog

    from catalog.catalog import Catalog
    from catalog.iceberg import IcebergExport

log = get_logger("lakestream.catalog")


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a table's history."""

    version: int
    op: CommitOp
    committed_at: dt.datetime
    commit_id: uuid.UUID
    writer_id: str
    batch_id: int
    summary: Mapping[str, Any]

    @property
    def files_added(self) -> int:
        return int(self.summary.get("files_added", 0))

    @property
    def rows_added(self) -> int:
        return int(self.summary.get("rows_added", 0))

    @property
    def source_watermark(self) -> SourcePoint | None:
        """Up to where this version holds the source's transactions whole (ingest jobs in
        ``transactions: consistent`` mode); ``None`` for any other commit."""
        mark = self.summary.get("source_watermark")
        if not mark:
            return None
        return SourcePoint.model_validate({k: v for k, v in mark.items() if k != "exceptions"})

    @property
    def watermark_exceptions(self) -> tuple[str, ...]:
        """Transactions this version published incomplete (``on_timeout: publish``)."""
        mark = self.summary.get("source_watermark") or {}
        return tuple(mark.get("exceptions", ()))


@dataclass(frozen=True)
class OpBytes:
    """What one kind of commit added and wrote over a window of a table's versions."""

    versions: int
    bytes_added: int
    """The files its versions name as added, at full size (a file named again counts)."""
    bytes_written: int
    """What its writers wrote: new data files and new vectors (``summary.bytes_written``)."""


class Table:
    """A handle on one table; metadata is as loaded (call :meth:`refresh` for newer schema)."""

    def __init__(self, catalog: Catalog, meta: TableMeta) -> None:
        self.catalog = catalog
        self.meta = meta

    def __repr__(self) -> str:
        return f"Table({self.name!r}, kind={self.meta.kind}, id={self.meta.table_id})"

    @property
    def name(self) -> str:
        return str(self.meta.name)

    @property
    def schema(self) -> pa.Schema:
        """The columns users see; ``meta.schema`` adds lakestream's internal ones (``_ls_seq``),
        which writers, compaction and ingest work with."""
        return self.meta.user_schema

    def refresh(self) -> Table:
        self.meta = self.catalog.load_table(self.name).meta
        return self

    def current_version(self) -> int:
        """The table's latest version.

        Raises:
            TableNotFoundError: the table was dropped.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        version = head_version(self.catalog.store, self.meta.table_id)
        if version is None:
            raise TableNotFoundError(self.name)
        return version

    def resolve_version(self, version: int | None = None, as_of: dt.datetime | None = None) -> int:
        """The table version a read at ``version`` / ``as_of`` (default: latest) sees.

        Raises:
            VersionNotFoundError: the table has no such version.
            VersionExpiredError: below the expiry horizon (see :meth:`expire_versions`); it
                names the oldest version kept.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        if version is not None and as_of is not None:
            raise ValueError("give version or as_of, not both")
        latest = self.current_version()
        if version is not None:
            if not 0 <= version <= latest:
                raise VersionNotFoundError(f"{self.name} has versions 0..{latest}, not {version}")
            require_unexpired(self.catalog.store, self.meta, version, f"version {version}")
            return version
        if as_of is not None:
            at = as_of if as_of.tzinfo else as_of.replace(tzinfo=dt.UTC)
            found = version_at(self.catalog.store, self.meta.table_id, at)
            require_unexpired(self.catalog.store, self.meta, found, f"time {at.isoformat()}")
            return found
        return latest

    def plan(
        self,
        *,
        version: int | None = None,
        as_of: dt.datetime | None = None,
        partitions: Sequence[str] | None = None,
        partition_filter: PartitionFilter | None = None,
    ) -> ScanPlan:
        """Which files a read of this table at a version sees, partition by partition.

        Raises:
            VersionNotFoundError: the table has no such version (``VersionExpiredError``: it
                was expired).
            CatalogUnavailableError: the catalog database could not be reached. Reads fail
                fast (they are interactive); long-running writers wait outages out with
                :class:`catalog.OutageGuard` instead.
        """
        table_version = self.resolve_version(version, as_of)
        spec, keep = self.meta.spec, partition_filter
        snapshots = snapshots_at(
            self.catalog.store,
            self.meta,
            table_version,
            partitions=partitions,
            keep=None if keep is None else lambda h: keep(spec.parse(h.partition_desc)[0]),
        )
        return plan_scan(self.meta, table_version, snapshots)

    def bytes_by_op(self, window: dt.timedelta = dt.timedelta(hours=1)) -> dict[CommitOp, OpBytes]:
        """Bytes added and written per commit op over the versions committed within ``window``
        of the newest one: the figures of write amplification (``compaction.amplification``).

        Raises:
            CatalogUnavailableError: the catalog database could not be reached.
        """
        rows = bytes_by_op(self.catalog.store, self.meta.table_id, window)
        return {
            CommitOp(r["commit_op"]): OpBytes(
                versions=r["versions"],
                bytes_added=r["bytes_added"],
                bytes_written=r["bytes_written"],
            )
            for r in rows
        }

    def history(self, limit: int = 100, after: int = 0) -> list[VersionInfo]:
        """Versions newest first: op, time, writer and batch, files and rows.

        Raises:
            CatalogUnavailableError: the catalog database could not be reached (reads fail
                fast; see :meth:`plan`).
        """
        rows = history_rows(self.catalog.store, self.meta.table_id, limit=limit, after=after)
        return [
            VersionInfo(
                version=r["version"],
                op=CommitOp(r["commit_op"]),
                committed_at=r["committed_at"],
                commit_id=r["commit_id"],
                writer_id=r["writer_id"],
                batch_id=r["batch_id"],
                summary=r["summary"],
            )
            for r in rows
        ]

    def commit(
        self,
        op: CommitOp,
        partitions: Sequence[PartitionCommit],
        *,
        base_version: int | None = None,
        key: IdempotencyKey | None = None,
        source_offsets: dict[str, object] | None = None,
        record_progress: bool = True,
    ) -> CommitResult:
        """Commit file operations to this table (the low-level API; see Catalog.commit).
        ``record_progress=False``: a one-off writer that keeps no progress row."""
        request = CommitRequest(
            tables=(
                TableCommit(
                    table=self.name, op=op, partitions=tuple(partitions), base_version=base_version
                ),
            ),
            key=key or IdempotencyKey.anonymous(),
            source_offsets=source_offsets,
            record_progress=record_progress,
        )
        return self.catalog.commit(request, known={self.name: self.meta})

    # -- data -------------------------------------------------------------------------------

    def scan(
        self,
        columns: Sequence[str] | None = None,
        filter: FilterSpec = None,
        version: int | None = None,
        as_of: dt.datetime | None = None,
        *,
        include_internal: bool = False,
    ) -> Scan:
        """Read the table at the latest version, a version, or a point in time.

        ``filter`` takes predicates such as ``[("region", "=", "eu"), ("id", ">", 10)]``
        (they prune partitions, buckets and files) or a ``pyarrow.compute`` expression.
        lakestream's internal columns (``_ls_seq``) are left out unless ``include_internal``
        or ``columns`` names them.

        Raises:
            TableNotFoundError: the table was dropped.
            VersionNotFoundError: the table has no such version (``VersionExpiredError``: it
                was expired).
            CatalogUnavailableError: the catalog database could not be reached (within the
                store's ``connect_timeout``). A read never waits out an outage: it is
                interactive, so it fails fast and leaves retrying to its caller.
        """
        self.refresh()
        scan_filter = ScanFilter.of(filter)
        pruned = partition_filter(self.meta, scan_filter)  # before any snapshot is loaded
        plan = self.plan(version=version, as_of=as_of, partition_filter=pruned)
        return Scan(self.meta, plan, columns, scan_filter, include_internal)

    def changes(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        net: bool = False,
        columns: Sequence[str] | None = None,
        filter: FilterSpec = None,
        as_of: dt.datetime | None = None,
    ) -> pa.Table:
        """The rows versions ``start_version`` to ``end_version`` (both included; default: to
        the latest) changed, in commit order, with ``_change_type`` (``insert``,
        ``update_preimage``, ``update_postimage``, ``delete``), ``_commit_version`` and
        ``_commit_timestamp`` (UTC) after the table's columns - Spark 4.2's and Delta's names.
        ``as_of`` starts at the first version committed at or after that time instead.

        ``net`` folds the range to one net change per key (append tables: per distinct row),
        so a row inserted and deleted inside it vanishes. ``columns`` and ``filter`` (as in
        :meth:`scan`) apply to the change rows. Compactions emit nothing, except for the rows
        a deletion vector they add marks (deletes). How each kind of
        commit maps to changes, and what it costs: :mod:`catalog.changes`.

        Raises:
            ChangesExpiredError: version ``start_version - 1``, which the changes are computed
                against, was expired (it names both versions).
            VersionNotFoundError: ``end_version`` is above the latest version.
            ChangeFeedError: neither or both of ``start_version`` and ``as_of``, a negative
                start, a bad ``changes.preimages`` property.
            SchemaError: ``columns`` or ``filter`` names a column the table lacks.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        return self._change_feed(start_version, end_version, net, columns, filter, as_of).to_arrow()

    def changes_reader(
        self,
        start_version: int | None = None,
        end_version: int | None = None,
        *,
        net: bool = False,
        columns: Sequence[str] | None = None,
        filter: FilterSpec = None,
        as_of: dt.datetime | None = None,
    ) -> pa.RecordBatchReader:
        """:meth:`changes` as a stream, one version at a time (``net`` reads the range first)."""
        feed = self._change_feed(start_version, end_version, net, columns, filter, as_of)
        return feed.to_reader()

    def _change_feed(  # noqa: PLR0917 - the private twin of changes(), same order
        self,
        start_version: int | None,
        end_version: int | None,
        net: bool,
        columns: Sequence[str] | None,
        filter: FilterSpec,
        as_of: dt.datetime | None,
    ) -> ChangeFeed:
        self.refresh()
        store = self.catalog.store
        first, last = resolve_range(
            store,
            self.meta,
            self.current_version(),
            start_version,
            end_version=end_version,
            as_of=as_of,
        )
        return ChangeFeed(store, self.meta, first, last, net=net, columns=columns, filter=filter)

    def append(
        self,
        data: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult:
        """Append rows to an append table: files near the target size, one append commit.
        A commit that loses to a concurrent one lands the same files on the new version
        (bounded by ``retry``, default :data:`catalog.retry.REBASE_RETRY`).

        Raises:
            CommitConflict: a concurrent commit won every attempt of ``retry`` (the table's
                rows were rebased onto each new version in between; kind ``busy``: the table
                stayed locked).
            CommitRejected: the table was dropped, or the commit can never land as it is.
            CommitStateUnknown: the connection died during COMMIT; resolve by ``key``.
            CatalogUnavailableError: the catalog database could not be reached.
            SchemaError: the data does not fit the table's schema.
            TableNotFoundError: the table was dropped.
        """
        self.refresh()
        return self._commit_rebasing(
            lambda base: stage_append(self.meta, data, options or DEFAULT_WRITE_OPTIONS, base),
            key,
            depends_on_state=False,
            retry=retry,
        )

    def upsert(
        self,
        data: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult:
        """Insert or replace rows by primary key: one sorted run per touched bucket. A commit
        that loses to a concurrent one is rebased and tried again (bounded by ``retry``,
        default :data:`catalog.retry.REBASE_RETRY`).

        Raises:
            CommitConflict: a concurrent commit won every attempt of ``retry`` (the table's
                rows were rebased onto each new version in between; kind ``busy``: the table
                stayed locked).
            CommitRejected: the table was dropped, or the commit can never land as it is.
            CommitStateUnknown: the connection died during COMMIT; resolve by ``key``.
            CatalogUnavailableError: the catalog database could not be reached.
            SchemaError: the data does not fit the table's schema.
            TableNotFoundError: the table was dropped.
        """
        self.refresh()
        moves = not set(self.meta.spec.columns) <= set(self.meta.primary_key)

        def stage(base: int) -> TableCommit:
            changes = upserts(self.meta, data)
            if moves:  # a key whose partition value changed leaves its old partition
                changes = self._with_moved_key_deletes(changes, base)
            return stage_changes(self.meta, changes, options or DEFAULT_WRITE_OPTIONS, base)

        return self._commit_rebasing(stage, key, depends_on_state=moves, retry=retry)

    @overload
    def delete(
        self,
        keys: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult: ...

    @overload
    def delete(
        self,
        *,
        where: WhereSpec,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> StatementResult: ...

    def delete(
        self,
        keys: pa.Table | None = None,
        *,
        where: WhereSpec | None = None,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult | StatementResult:
        """Delete rows by primary key (``keys``, CDC tables; partition columns are looked up
        when not given; a table with a ``sequence-column`` needs that column too, the value the
        delete is ordered at), or every row matching ``where`` (both table kinds, one commit;
        see :mod:`catalog.dml`). Either way a commit that loses to a concurrent one is rebased
        and tried again, bounded by ``retry``.

        Raises:
            CommitConflict: a concurrent commit won every attempt of ``retry``.
            CommitRejected: the table was dropped, or the commit can never land as it is.
            CommitStateUnknown: the connection died during COMMIT; resolve by ``key``.
            CatalogUnavailableError: the catalog database could not be reached.
            SchemaError: the keys lack a key column (or the sequence column), or do not fit
                the table's schema.
            StatementError: ``where`` names no column of the table or cannot be evaluated.
        """
        if (keys is None) == (where is None):
            raise TypeError("delete() takes keys (a pyarrow Table) or where=..., not both")
        if where is not None:
            return run_statement(self, where, None, key=key, options=options, retry=retry)
        assert keys is not None
        return self._delete_keys(keys, key=key, options=options, retry=retry)

    def update(
        self,
        *,
        where: WhereSpec,
        set: Mapping[str, object],
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> StatementResult:
        """Set columns of every row matching ``where`` (both table kinds, one commit).

        Append tables rewrite the files holding matches (an ``update`` commit); CDC tables
        write the matching keys' new rows as a merge run. A statement that loses to a
        concurrent append or merge is evaluated again on the new version, bounded by ``retry``
        (see :mod:`catalog.dml`).

        Raises:
            CommitConflict: a concurrent commit won every attempt of ``retry`` (kind ``busy``:
                the table stayed locked; it is not retried).
            CommitRejected: the table was dropped, or the commit can never land as it is.
            CommitStateUnknown: the connection died during COMMIT; resolve by ``key``.
            CatalogUnavailableError: the catalog database could not be reached.
            StatementError: ``where`` or ``set`` names no column of the table, or a value does
                not fit its column.
        """
        return run_statement(self, where, set, key=key, options=options, retry=retry)

    def _delete_keys(
        self,
        keys: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult:
        self.refresh()
        lookup = not set(self.meta.spec.columns) <= set(keys.column_names)

        def stage(base: int) -> TableCommit:
            located = self._locate(keys, base) if lookup else keys
            return stage_changes(
                self.meta, deletes(self.meta, located), options or DEFAULT_WRITE_OPTIONS, base
            )

        return self._commit_rebasing(stage, key, depends_on_state=lookup, retry=retry)

    def _commit_rebasing(
        self,
        stage: Callable[[int], TableCommit],
        key: IdempotencyKey | None,
        *,
        depends_on_state: bool,
        retry: RetryPolicy | None,
    ) -> CommitResult:
        """Commit, and on a concurrent-write conflict rebase: re-stage only if the written
        content depended on the table's state (a key lookup); otherwise the same files land on
        the new version, which is what re-running the write would produce."""
        staged: list[TableCommit] = []

        def attempt(number: int) -> CommitResult:
            base = self.current_version()
            if number == 1 or depends_on_state:
                staged.append(stage(base))
            else:
                staged.append(staged[-1].model_copy(update={"base_version": base}))
            request = CommitRequest(tables=(staged[-1],), key=key or IdempotencyKey.anonymous())
            return self.catalog.commit(request, known={self.name: self.meta})

        return (retry or REBASE_RETRY).run(attempt, retry_if=lost_to_concurrent_write)

    def _locate(self, keys: pa.Table, version: int, *, stored: Sequence[str] = ()) -> pa.Table:
        """The given keys as they exist at ``version``, with their partition columns and the
        ``stored`` ones (and the sequence column when ``keys`` give it: a delete is ordered at
        the caller's value)."""
        pk = list(self.meta.primary_key)
        missing = [c for c in pk if c not in keys.column_names]
        if missing:
            raise SchemaError(
                f"deletes need key column {missing[0]!r}", table=self.name, column=missing[0]
            )
        columns = [*key_and_partition_columns(self.meta), *stored]
        seq = self.meta.sequence_column
        given = [seq] if seq is not None and seq in keys.column_names and seq not in columns else []
        wanted = conform(self.meta, keys.select([*pk, *given]), keys_only=True)
        if wanted.num_rows == 0:
            return pa.schema([self.meta.schema.field(c) for c in [*columns, *given]]).empty_table()
        found = Scan(
            self.meta,
            self.plan(version=version),
            columns,
            ScanFilter.of([(pk[0], "in", pc.unique(wanted.column(pk[0])).to_pylist())]),
        ).to_arrow()
        return found.join(wanted, keys=pk, join_type="inner")

    def _with_moved_key_deletes(self, changes: pa.Table, version: int) -> pa.Table:
        """``changes`` and deletes of the keys they move out of their partition at ``version``.

        On a sequence-ordered table a delete carries its new row's sequence value: it is the
        same change as the upsert, so it orders like it against the old partition's row. A new
        row ordered below the key's stored row (a replay) is dropped with its delete: the
        delete would lose in the old partition, but nothing would overrule the row in its new
        one, leaving the key in both."""
        pk = list(self.meta.primary_key)
        parts = [c for c in self.meta.spec.columns if c not in pk]
        seq = self.meta.sequence_column
        carried = (
            [seq] if seq is not None and seq not in key_and_partition_columns(self.meta) else []
        )
        located = self._locate(changes.select(pk), version, stored=carried)
        if located.num_rows == 0:
            return changes
        located = located.rename_columns(
            [f"__old_{c}" if c in carried else c for c in located.column_names]
        )
        new = changes.select([*pk, *parts, *carried]).rename_columns(
            [*pk, *(f"__new_{c}" for c in parts), *carried]
        )
        new = new.append_column("__row", pa.array(np.arange(changes.num_rows)))
        joined = located.join(new, keys=pk, join_type="inner")
        moved = None
        for column in parts:
            old_v, new_v = joined.column(column), joined.column(f"__new_{column}")
            differs = pc.fill_null(
                pc.not_equal(old_v, new_v), pc.xor(pc.is_null(old_v), pc.is_null(new_v))
            )
            moved = differs if moved is None else pc.or_(moved, differs)
        for column in carried:
            stale = pc.fill_null(
                pc.less(joined.column(column), joined.column(f"__old_{column}")), False
            )
            keep = np.ones(changes.num_rows, dtype=np.bool_)
            keep[joined.filter(pc.and_(moved, stale)).column("__row").to_numpy()] = False
            changes = changes.filter(pa.array(keep))
            moved = pc.and_(moved, pc.invert(stale))
        moving = deletes(self.meta, joined.filter(moved).select([*pk, *parts, *carried]))
        return pa.concat_tables([changes, moving])

    def evolve_schema(
        self, new_schema: pa.Schema, *, allow_drop: bool = False, retry: RetryPolicy | None = None
    ) -> Table:
        """Change the schema: add nullable columns, widen types, drop (if allowed) columns.

        Files written under older schemas read under the new one (added columns null, widened
        types cast). A change that races another schema change is planned again on the schema
        that won (bounded by ``retry``).

        Raises:
            SchemaError: the change is incompatible (it names the column).
            CommitConflict: other schema changes won every attempt of ``retry``.
            CatalogUnavailableError: the catalog database could not be reached.
        """

        def attempt(_: int) -> Table:
            self.refresh()
            target = plan_schema_change(self.meta, new_schema, allow_drop=allow_drop)
            if target is None:
                return self
            new_id = change_schema(self.catalog.store, self.meta, target)
            if new_id is None:  # another schema change landed since the refresh
                raise CommitConflict(
                    kind=ConflictKind.CONCURRENT_WRITE, table=self.name, winning_op="schema change"
                )
            log.info("schema_changed", table=self.name, schema_id=new_id)
            return self.refresh()

        return (retry or REBASE_RETRY).run(attempt, retry_if=lost_to_concurrent_write)

    def add_column(self, name: str, arrow_type: pa.DataType) -> Table:
        """Add a nullable column (old rows read it as null)."""
        self.refresh()
        schema = self.meta.schema
        return self.evolve_schema(schema.append(pa.field(name, arrow_type, nullable=True)))

    def widen_column(self, name: str, arrow_type: pa.DataType) -> Table:
        """Widen a column's type (int32 -> int64, float32 -> float64, larger decimal, ...)."""
        index = self._column_index(name)
        field = self.meta.schema.field(index)
        return self.evolve_schema(self.meta.schema.set(index, field.with_type(arrow_type)))

    def drop_column(self, name: str) -> Table:
        """Drop a column (its name can never be reused in this table)."""
        index = self._column_index(name)
        return self.evolve_schema(self.meta.schema.remove(index), allow_drop=True)

    def _column_index(self, name: str) -> int:
        """The position of a user column in the stored schema (internal ones are not changed)."""
        self.refresh()
        index = self.meta.schema.get_field_index(name)
        if index < 0 or is_internal_column(name):
            raise SchemaError(
                f"column {name!r} is not in {self.name}", table=self.name, column=name
            )
        return int(index)

    # -- maintenance ------------------------------------------------------------------------

    def expire_versions(
        self,
        *,
        older_than: dt.timedelta | None = None,
        retain_last: int | None = None,
        keep: int | None = None,
        dry_run: bool = False,
    ) -> ExpiryReport:
        """Expire versions older than ``older_than`` beyond the newest ``retain_last`` (defaults:
        the ``snapshot.time-retained`` / ``snapshot.retain-last`` properties, 7d / 100).

        Never the latest version, ``keep`` or newer, a writer's last idempotency key, or a
        prepared commit's rows. Files only expired versions used are handed to cleanup;
        :meth:`vacuum` deletes them. Time travel below the new horizon then raises
        :class:`VersionExpiredError`. See :mod:`catalog.maintenance.expiry`."""
        self.refresh()
        policy = MaintenancePolicy.of(self.meta)
        if older_than is not None and older_than < dt.timedelta(0):
            raise MaintenanceConfigError("older_than must not be negative", table=self.name)
        last = policy.retain_last if retain_last is None else retain_last
        return expire_versions(
            self.catalog.store,
            self.meta,
            older_than=policy.time_retained if older_than is None else older_than,
            retain_last=check_retain_last(last, self.name, "retain_last"),
            keep=keep,
            dry_run=dry_run,
        )

    def vacuum(
        self, *, older_than: dt.timedelta | None = None, dry_run: bool = False
    ) -> VacuumReport:
        """Delete files handed to cleanup and orphan files, older than ``older_than`` (default:
        the ``vacuum.older-than`` property, 1h), that no retained version and no prepared commit
        names. See :mod:`catalog.maintenance.vacuum` for why concurrent commits are safe."""
        self.refresh()
        threshold = MaintenancePolicy.of(self.meta).vacuum_older_than
        if older_than is not None and older_than < dt.timedelta(0):
            raise MaintenanceConfigError("older_than must not be negative", table=self.name)
        return Vacuum(
            self.catalog.store,
            self.meta,
            older_than=threshold if older_than is None else older_than,
        ).run(dry_run=dry_run)

    def drop_expired_partitions(
        self,
        *,
        ttl: dt.timedelta | None = None,
        now: dt.datetime | None = None,
        dry_run: bool = False,
    ) -> TtlReport | None:
        """Drop the partitions older than ``ttl`` (default: the ``partition.ttl`` property) in
        one ``update`` commit; None when the table has no TTL."""
        self.refresh()
        policy = MaintenancePolicy.of(self.meta)
        window = ttl if ttl is not None else policy.partition_ttl
        if window is None:
            return None
        return drop_expired_partitions(
            self, ttl=window, column=ttl_column(self.meta), now=now, dry_run=dry_run
        )

    def export_iceberg(self, *, sql_catalog: IcebergCatalog | None = None) -> IcebergExport:
        """Publish this table's versions as Iceberg v2 metadata in its location (needs the
        ``iceberg`` extra); see :func:`catalog.iceberg.export_table`."""
        from catalog.iceberg import export_table

        return export_table(self, sql_catalog=sql_catalog)

    def describe(self) -> dict[str, Any]:
        meta = self.meta
        return {
            "name": self.name,
            "table_id": str(meta.table_id),
            "kind": meta.kind,
            "location": meta.location,
            "primary_key": list(meta.primary_key),
            "partition_by": list(meta.spec.columns),
            "hash_buckets": meta.spec.hash_buckets,
            "schema_id": meta.current_schema_id,
            "schema": [
                {"name": f.name, "type": str(f.type), "nullable": f.nullable}
                for f in meta.user_schema
            ],
            "internal_columns": list(meta.internal_columns),
            "properties": dict(meta.properties),
            "version": self.current_version(),
            "iceberg": self._iceberg_state(),
        }

    def _iceberg_state(self) -> dict[str, Any] | None:
        row = iceberg_state(self.catalog.store, self.meta.table_id)
        if row is None:
            return None
        return {
            "metadata_location": row["metadata_location"],
            "version": row["version"],
            "lag_versions": row["lag_versions"],
            "exported_at": row["exported_at"].isoformat(),
        }
