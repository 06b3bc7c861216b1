"""Export a lakestream table's versions as Iceberg v2 snapshots over the same Parquet files.

Each run continues from the lakestream version the current Iceberg snapshot shows (its summary
property ``lakestream.version``; nothing else needs to be trusted after a crash) and turns every
later version that changed the files into one snapshot, all in one Iceberg commit:

* the version's file set (``Table.plan(version=v)``) is compared, by path, with the live files
  of the Iceberg snapshot before it: files only in the plan are added, files only in Iceberg
  are removed. A version that only added files is an ``append`` snapshot; one that removed
  files (a compaction, DML, TTL) or changed a vector is an ``overwrite`` naming the removed
  files (pyiceberg 0.12 cannot summarise a ``replace``, which would tell streaming readers
  that a compaction changed no row; ``lakestream.op`` in the summary says so meanwhile).
  Manifests and manifest lists are written by pyiceberg's writers and snapshot producer
  (:class:`catalog.iceberg.deletes.ExportFiles`), metadata JSON by its catalog code
  (:mod:`catalog.iceberg.pointer`).
* **Deletion vectors** (issue 49) become Iceberg v2 **position-delete files**, one per vectored
  data file, reused while its vector does not change (:mod:`catalog.iceberg.deletes`). Iceberg
  v3 deletion vectors could point at lakestream's Puffin blobs without a copy (the same
  bytes), but pyiceberg 0.12 writes v1/v2 manifests only (it reads v3 vectors, yet takes a
  Puffin file's ``referenced-data-file`` as the data file's location, where lakestream's
  blobs name the path relative to the table), so v2 it is for now.
* **CDC tables**: a bucket whose files are all *resolved* (their vectors mark every row that
  does not count) is plain files minus vectors, which position deletes express; so is one
  whole-row file. Any other bucket (pending runs, a lone run holding deletes or partial rows:
  its rows are changes, not rows) needs merge-on-read, which Iceberg cannot express. Such
  versions are skipped: the Iceberg table shows the newest version it can, and
  ``lag_versions`` says how far behind the latest version that is.
* Iceberg snapshots of versions that lakestream expired are expired too, so vacuum (which
  deletes what expired versions alone needed) never leaves a snapshot naming a deleted file.
  The position-delete files only expired snapshots named are deleted after the commit. The
  current snapshot must stay readable even when expiry outruns the exporter (a lagging CDC
  table): the exporter registers as a change-feed consumer at the version it shows, which
  expiry keeps (see :mod:`catalog.consumers`).

Snapshot timestamps are the export's time, not the commit's (pyiceberg stamps them); the
summary's ``lakestream.version`` and ``lakestream.committed-at`` name the version.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import Catalog as IcebergCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table as IcebergTable
from pyiceberg.table import Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import (
    AddSchemaUpdate,
    SetCurrentSchemaUpdate,
    UpdatesAndRequirements,
    UpdateTableMetadata,
)
from pyiceberg.table.update.snapshot import ExpireSnapshots
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from catalog.errors import ChangesExpiredError, IcebergRegistrationError
from catalog.files.stats import decode_stat
from catalog.iceberg.deletes import (
    ExportFiles,
    delete_file_entry,
    delete_file_path,
    named_delete_files,
    write_delete_file,
)
from catalog.iceberg.pointer import PointerCatalog, record_export
from catalog.iceberg.schema import (
    PARTITION_FIELD_BASE,
    iceberg_schema,
    name_mapping,
    partition_spec,
    partition_values,
)
from catalog.logs import get_logger
from catalog.meta import ICEBERG_METADATA_PROPERTY, TableMeta
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_UPSERT, UNSET_COLUMN, DataFile
from catalog.planning import PartitionScan
from catalog.queries import NamedQueries

if TYPE_CHECKING:
    from catalog.table import Table, VersionInfo

__all__ = ["ICEBERG_METADATA_PROPERTY", "IcebergExport", "IcebergRegistrationError", "export_table"]
log = get_logger("lakestream.catalog.iceberg")
_maintenance_query = NamedQueries("catalog", "sql/maintenance.sql")

#: Snapshot summary properties naming the lakestream version a snapshot shows.
VERSION_SUMMARY = "lakestream.version"
OP_SUMMARY = "lakestream.op"
COMMITTED_SUMMARY = "lakestream.committed-at"
#: Iceberg table property: versions after the current snapshot's that it cannot show yet.
LAG_PROPERTY = "iceberg.lag_versions"
#: The change-feed consumer that pins the version the current snapshot shows against expiry.
CONSUMER_ID = "lakestream:iceberg"
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
#: Metadata files kept beside the current one (readers that hold an older location).
PREVIOUS_METADATA_KEPT = 10


@dataclass(frozen=True)
class IcebergExport:
    """What one export did."""

    table: str
    metadata_location: str
    exported: tuple[int, ...]
    """Versions that became Iceberg snapshots in this run."""
    version: int
    """The lakestream version the current Iceberg snapshot shows (0: the empty table)."""
    latest: int
    lag_versions: int
    snapshots_expired: int
    registered: str | None = None
    """The identifier in the SQL catalog the export was published through, if any."""
    snapshot_ids: Mapping[int, int] = field(default_factory=dict)
    """Lakestream version -> Iceberg snapshot id, of the snapshots this run made."""

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "metadata_location": self.metadata_location,
            "exported": list(self.exported),
            "version": self.version,
            "latest": self.latest,
            "lag_versions": self.lag_versions,
            "snapshots_expired": self.snapshots_expired,
            "registered": self.registered,
            "snapshot_ids": {str(v): s for v, s in self.snapshot_ids.items()},
        }


def export_table(table: Table, *, sql_catalog: IcebergCatalog | None = None) -> IcebergExport:
    """Bring ``table``'s Iceberg metadata up to its latest expressible version.

    With ``sql_catalog`` (pyiceberg's SQL catalog, say on the same PostgreSQL) the table is
    registered there as ``namespace.name`` and every later commit goes through it, so its
    ``load_table`` always returns the current metadata; the location is recorded in
    lakestream's catalog either way. A table once registered should keep being exported
    through that catalog (an export without it moves lakestream's pointer only).

    Raises:
        CommitFailedException: another exporter committed this table's metadata meanwhile
            (run again: the next export continues from the winner's).
        IcebergRegistrationError: the SQL catalog holds another table under this name.
    """
    table.refresh()
    meta = table.meta
    store = table.catalog.store
    identifier = (meta.name.namespace, meta.name.name)
    pointer = PointerCatalog(store, meta.table_id, identifier)
    if pointer.pointer() is None:
        _create(pointer, meta)
    registered = None
    if sql_catalog is not None:
        iceberg = _registered(sql_catalog, identifier, pointer)
        registered = ".".join(identifier)
        if iceberg.metadata.table_uuid != meta.table_id:
            raise IcebergRegistrationError(
                f"{registered} in the SQL catalog {sql_catalog.name!r} is another table "
                f"(uuid {iceberg.metadata.table_uuid}, not {meta.table_id}: dropped and made "
                "again?); drop it there to register this one",
                table=registered,
            )
    else:
        iceberg = pointer.load_table(identifier)

    latest = table.current_version()
    state = _State.of(iceberg)
    tx = iceberg.transaction()
    changed = _evolve(tx, meta, iceberg)
    made = _snapshot_versions(tx, table, state, latest)
    changed = changed or bool(made)
    expired, unnamed = _expire_snapshots(tx, table, state)
    lag = latest - state.version
    if changed or expired or iceberg.properties.get(LAG_PROPERTY) != str(lag):
        tx.set_properties({LAG_PROPERTY: str(lag)})
        iceberg = tx.commit_transaction()
        _drop_delete_files(table, iceberg, unnamed)
    record_export(store, meta.table_id, iceberg.metadata_location, state.version, lag)
    if iceberg.current_snapshot() is not None:  # files an Iceberg reader may open
        _pin(table, state.version)
    ids = {
        int(s.summary[VERSION_SUMMARY] or -1): s.snapshot_id
        for s in iceberg.snapshots()
        if s.summary is not None and int(s.summary[VERSION_SUMMARY] or -1) in made
    }
    log.info(
        "iceberg_export",
        table=str(meta.name),
        exported=len(made),
        version=state.version,
        latest=latest,
        lag_versions=lag,
        snapshots_expired=expired,
        metadata_location=iceberg.metadata_location,
    )
    return IcebergExport(
        table=str(meta.name),
        metadata_location=iceberg.metadata_location,
        exported=tuple(made),
        version=state.version,
        latest=latest,
        lag_versions=lag,
        snapshots_expired=expired,
        registered=registered,
        snapshot_ids=ids,
    )


def _snapshot_versions(tx: Transaction, table: Table, state: _State, latest: int) -> list[int]:
    """One snapshot per version after ``state.version`` that Iceberg can show and that changed
    its files (data files, or the position-delete files of their vectors); the versions that
    got one."""
    meta = table.meta
    made: list[int] = []
    for info in _versions(table, state.version, latest):
        plan = table.plan(version=info.version)
        if not all(_expressible(p) for p in plan.merge_partitions):
            continue
        files = [(p.partition_desc, f) for p in plan.partitions for f in p.files]
        target = {_absolute(meta, f.path): (desc, f) for desc, f in files}
        vectored = {
            _absolute(meta, delete_file_path(f)): (desc, f)
            for desc, f in files
            if f.vector is not None
        }
        added = [path for path in target if path not in state.live]
        removed = [path for path in state.live if path not in target]
        added_deletes = [path for path in vectored if path not in state.deletes]
        removed_deletes = [path for path in state.deletes if path not in vectored]
        state.version = info.version
        if not (added or removed or added_deletes or removed_deletes):
            continue
        properties = {
            VERSION_SUMMARY: str(info.version),
            OP_SUMMARY: info.op.value,
            COMMITTED_SUMMARY: info.committed_at.isoformat(),
        }
        only_appends = not (removed or added_deletes or removed_deletes)
        first = tx.table_metadata.current_snapshot_id is None
        operation = Operation.APPEND if only_appends or first else Operation.OVERWRITE
        producer = ExportFiles(tx, operation=operation, properties=properties)
        for path in removed:
            producer.delete_data_file(state.live.pop(path))
        for path in removed_deletes:
            producer.delete_data_file(state.deletes.pop(path))
        for path in added:
            desc, file = target[path]
            data_file = _data_file(meta, state, path, desc, file)
            producer.append_data_file(data_file)
            state.live[path] = data_file
        for path in added_deletes:
            desc, file = vectored[path]
            delete_file = _delete_file(meta, state, desc, file)
            producer.append_data_file(delete_file)
            state.deletes[path] = delete_file
        producer.commit()
        made.append(info.version)
    return made


def _versions(table: Table, after: int, latest: int) -> list[VersionInfo]:
    """The versions after ``after`` up to ``latest``, oldest first. History comes newest first,
    so commits landing while the export runs would push the oldest out of a page sized to
    ``latest``: pages grow until they reach back to ``after`` (or hold every version left).
    Versions past ``latest`` wait for the next export (so the lag is never negative)."""
    limit = max(latest - after, 1)
    while True:
        history = table.history(limit=limit, after=after)
        if len(history) < limit or min(v.version for v in history) == after + 1:
            break
        limit *= 2
    return sorted((v for v in history if v.version <= latest), key=lambda v: v.version)


@dataclass
class _State:
    """The Iceberg side as the export moves it: the version shown and the live files."""

    version: int
    live: dict[str, IcebergDataFile]
    deletes: dict[str, IcebergDataFile]
    """The live position-delete files, by path (each one data file's vector)."""
    spec: PartitionSpec
    schema: Schema

    @classmethod
    def of(cls, iceberg: IcebergTable) -> _State:
        snapshot = iceberg.current_snapshot()
        live: dict[str, IcebergDataFile] = {}
        deletes: dict[str, IcebergDataFile] = {}
        version = 0
        if snapshot is not None:
            version = int(snapshot.summary[VERSION_SUMMARY] or 0) if snapshot.summary else 0
            for manifest in snapshot.manifests(iceberg.io):
                into = deletes if manifest.content == ManifestContent.DELETES else live
                for entry in manifest.fetch_manifest_entry(iceberg.io, discard_deleted=True):
                    into[entry.data_file.file_path] = entry.data_file
        return cls(version, live, deletes, iceberg.spec(), iceberg.schema())


def _expressible(partition: PartitionScan) -> bool:
    """A bucket Iceberg can show as plain files minus their vectors (position deletes): a
    resolved bucket (every file ``resolved``: its vectors mark every row that does not count,
    and no live row is partial: /work/briefs/contract-cdc-vectors.md, R2), or one file whose
    rows are all rows of the table (a compacted base file, or a lone merge run of upserts of
    whole rows: its statistics say no row is a delete and none is partial)."""
    if not partition.merge or all(f.resolved is True for f in partition.files):
        return True
    if partition.file_count != 1:
        return False
    (file,) = partition.files
    kind = file.stats.get(ROW_KIND_COLUMN)
    unset = file.stats.get(UNSET_COLUMN)
    return (
        kind is not None
        and kind.null_count == 0
        and kind.max == ROW_KIND_UPSERT
        and (unset is None or unset.null_count == file.row_count)
    )


def _absolute(meta: TableMeta, path: str) -> str:
    return f"{meta.location.rstrip('/')}/{path}"


def _data_file(
    meta: TableMeta, state: _State, path: str, desc: str, file: DataFile
) -> IcebergDataFile:
    """An Iceberg data file entry from the catalog's record of the file (path, size, rows,
    partition, column statistics): no file is opened."""
    data_file = IcebergDataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(*partition_values(meta, desc, state.spec, state.schema)),
        record_count=file.row_count,
        file_size_in_bytes=file.size_bytes,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **_metrics(meta, state.schema, file),
    )
    data_file.spec_id = state.spec.spec_id  # kept beside the record, not in it
    return data_file


def _delete_file(meta: TableMeta, state: _State, desc: str, file: DataFile) -> IcebergDataFile:
    """Write the position-delete file of ``file``'s vector, and describe it."""
    data_path = _absolute(meta, file.path)
    relative, size, rows = write_delete_file(meta.files, file, data_path)
    partition = Record(*partition_values(meta, desc, state.spec, state.schema))
    return delete_file_entry(
        _absolute(meta, relative),
        size=size,
        rows=rows,
        data_path=data_path,
        partition=partition,
        spec=state.spec,
    )


#: Iceberg types whose bounds come from the catalog's statistics (whose encoding is exact for
#: them: catalog.files.stats); others get counts only, and readers cannot prune on them.
_BOUNDED = (
    BooleanType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    DateType,
    TimestampType,
    TimestamptzType,
)


def _metrics(meta: TableMeta, schema: Schema, file: DataFile) -> dict[str, Any]:
    """Value and null counts, and lower/upper bounds in Iceberg's single-value encoding, of
    the file's top-level columns from the catalog's statistics. A column a file does not hold
    (added after it was written) gets nothing: unknown, never a wrong bound. String bounds may
    be truncated (the maximum rounded up), which Iceberg allows."""
    values: dict[int, int] = {}
    nulls: dict[int, int] = {}
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    for column in schema.fields:
        stats = file.stats.get(column.name)
        kind = column.field_type
        if stats is None or not isinstance(kind, PrimitiveType):
            continue
        values[column.field_id] = file.row_count
        nulls[column.field_id] = stats.null_count
        arrow_type = meta.schema.field(column.name).type
        if not isinstance(kind, _BOUNDED) or (
            pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns"
        ):
            continue
        for bound, into in ((stats.min, lower), (stats.max, upper)):
            if bound is not None:
                into[column.field_id] = to_bytes(kind, decode_stat(bound, arrow_type).as_py())
    return {
        "value_counts": values,
        "null_value_counts": nulls,
        "lower_bounds": lower,
        "upper_bounds": upper,
    }


def _create(pointer: PointerCatalog, meta: TableMeta) -> None:
    """The first metadata: lakestream's field ids (pyiceberg's ``create_table`` would assign
    its own), no snapshot (version 0, the empty table)."""
    schema = iceberg_schema(meta)
    spec = partition_spec(meta)
    properties = {
        NAME_MAPPING_PROPERTY: name_mapping(meta).model_dump_json(),
        # pyiceberg retries a lost commit by replaying its snapshots on the winner's: an export
        # replayed there would add the winner's files again. The loser exports anew instead.
        "commit.retry.num-retries": "0",
        # every export writes a metadata file: pyiceberg deletes those older than the last ten
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": str(PREVIOUS_METADATA_KEPT),
    }
    metadata = TableMetadataV2(
        location=meta.location.rstrip("/"),
        table_uuid=meta.table_id,
        last_column_id=schema.highest_field_id,
        schemas=[schema],
        current_schema_id=schema.schema_id,
        partition_specs=[spec],
        default_spec_id=spec.spec_id,
        last_partition_id=max((f.field_id for f in spec.fields), default=PARTITION_FIELD_BASE - 1),
        sort_orders=[UNSORTED_SORT_ORDER],
        default_sort_order_id=UNSORTED_SORT_ORDER.order_id,
        properties=properties,
    )
    location = load_location_provider(metadata.location, properties)
    pointer.create(metadata, location.new_table_metadata_file_location(0))


def _registered(
    sql_catalog: IcebergCatalog, identifier: tuple[str, str], pointer: PointerCatalog
) -> IcebergTable:
    """The table as the SQL catalog has it, registered at lakestream's pointer if new there."""
    try:
        return sql_catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        sql_catalog.create_namespace(identifier[0])
    row = pointer.pointer()
    assert row is not None  # created before
    return sql_catalog.register_table(identifier, str(row["metadata_location"]))


class _SetSchema(UpdateTableMetadata["_SetSchema"]):
    """Make ``schema`` (ids already lakestream's) current: pyiceberg's ``update_schema``
    would assign ids of its own to new columns."""

    def __init__(self, transaction: Transaction, schema: Any) -> None:
        super().__init__(transaction)
        self._schema = schema

    def _commit(self) -> UpdatesAndRequirements:
        known = {s.schema_id for s in self._transaction.table_metadata.schemas}
        updates: tuple[Any, ...] = ()
        if self._schema.schema_id not in known:
            updates = (AddSchemaUpdate(schema_=self._schema),)
        return (*updates, SetCurrentSchemaUpdate(schema_id=self._schema.schema_id)), ()


def _evolve(tx: Transaction, meta: TableMeta, iceberg: IcebergTable) -> bool:
    """The current lakestream schema as the Iceberg table's, with its name mapping."""
    schema = iceberg_schema(meta)
    current = iceberg.schema()
    if current.schema_id == schema.schema_id and current == schema:
        return False
    _SetSchema(tx, schema).commit()
    tx.set_properties({NAME_MAPPING_PROPERTY: name_mapping(meta).model_dump_json()})
    return True


def _expire_snapshots(tx: Transaction, table: Table, state: _State) -> tuple[int, set[str]]:
    """Expire the Iceberg snapshots of versions lakestream expired (never the current one);
    how many, and the position-delete files they named (to drop those no snapshot kept names
    once the expiry is committed: :func:`_drop_delete_files`)."""
    row = table.catalog.store.fetch_one(
        _maintenance_query("expiry_horizon"), {"table_id": table.meta.table_id}
    )
    horizon = int(row["oldest_version"]) if row is not None else 0
    metadata = tx.table_metadata
    current = metadata.current_snapshot_id
    doomed = [
        s.snapshot_id
        for s in metadata.snapshots
        if s.snapshot_id != current
        and s.summary is not None
        and int(s.summary[VERSION_SUMMARY] or 0) < horizon
    ]
    named: set[str] = set()
    if doomed:
        io = tx._table.io
        for snapshot_id in doomed:
            snapshot = metadata.snapshot_by_id(snapshot_id)
            assert snapshot is not None
            named |= named_delete_files(snapshot.manifests(io), io)
        ExpireSnapshots(tx).by_ids(doomed).commit()
    return len(doomed), named


def _drop_delete_files(table: Table, iceberg: IcebergTable, candidates: set[str]) -> None:
    """Delete the position-delete files that expired snapshots named and no snapshot left names
    (vacuum never deletes under ``metadata/``: these are the exporter's to delete). Only after
    the commit: a failed one leaves every snapshot, and so every file, in place."""
    if not candidates:
        return
    for snapshot in iceberg.snapshots():
        candidates -= named_delete_files(snapshot.manifests(iceberg.io), iceberg.io)
    root = f"{table.meta.location.rstrip('/')}/"
    table.meta.files.discard(p.removeprefix(root) for p in candidates if p.startswith(root))


def _pin(table: Table, version: int) -> None:
    """Expiry keeps the version the current snapshot shows (and its files) while the exporter
    runs within the consumer's ttl. The price: a CDC table that stays behind (a bucket never
    fully compacted) holds expiry at that version; ``Catalog.drop_consumer`` releases it."""
    try:
        table.catalog.register_consumer(table, CONSUMER_ID, version)
    except ChangesExpiredError:
        log.warning(
            "iceberg_export_behind_horizon",
            table=str(table.meta.name),
            version=version,
        )
