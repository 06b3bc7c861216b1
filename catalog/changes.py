"""The change feed: what each version of a table changed, read from the catalog and its files.

Nothing is written for it at commit time: every version's changes are derived when read, from
what the catalog already keeps (each version's partitions, their files, the states before and
after). Per version of the range, in commit order:

* **append tables**: the rows of the files the version added, less the rows of the files it
  removed, compared whole as a multiset. An append is all inserts; a DELETE or UPDATE (or a TTL
  drop) is deletes and inserts of the rows that differ - rows a copy-on-write rewrite carried
  over cancel out, and so do the unmarked rows of a file named again with a new vector. With
  no key, an updated row cannot be told from a deleted one plus an inserted one, so updates are
  a ``delete`` and an ``insert``, never pre/post-images.
* **CDC tables**: the merged state of the partitions the version touched, before (the version
  below) and after, compared by primary key. A key that did not exist before is an ``insert``,
  one gone after a ``delete`` (carrying its whole last row), one whose values changed an
  ``update_preimage`` then ``update_postimage``. This is the effective change: a run's row that
  lost to a higher ``sequence-column`` value, an upsert that rewrote identical values, a delete
  of an absent key show as nothing; a key that moved partition is one update.
* **compaction** versions (and partitions a commit compacted) change no row and emit nothing;
  expiry commits no version at all. The exception is a file a compaction names again with a
  new deletion vector (a resolver's or a statement's marks, design D3): its old and new
  entries read the same file minus different marks, so the newly marked rows come out as
  deletes (append tables) or as the keys' effective changes (CDC tables).

The table property ``changes.preimages`` (``true`` by default) decides whether updates carry
their pre-image. Pre-images are not stored, so keeping them costs nothing at write time and
nothing in storage; dropping them (``false``) halves the rows an update emits but saves no
read: a CDC version's state below it is read either way, since that alone tells an insert from
an update and gives a delete its row. That read is the feed's cost. With a one-column key it is
a lookup: the keys of the files the version added or removed (only their merged state can
differ) are pushed below the merge, so merging costs what the touched keys cost, though the
bucket's files are still scanned for them (measured on 400k rows, 4 buckets, 1% of keys
changed per version: one version's changes 0.16 s against 0.09 s for a full scan). With a
composite key, or more than :data:`LOOKUP_MAX_KEYS` touched rows, the touched partitions are
read whole at both versions (each partition version once: the state after one version is the
state before the next). Reaching a cost proportional to the changed rows alone needs stored
pre-images (a changelog written at commit or compaction time); that is not built.

A range is ``start_version`` to ``end_version``, both included (Delta's
``startingVersion``/``endingVersion``); reading it needs the state at ``start_version - 1``, so
that version must not be expired. A streaming reader keeps the last version it read as its
offset and asks for ``(offset + 1, latest)``; an empty range (start above end) is no change.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from catalog.changefeed import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    POSTIMAGE,
    PREIMAGE,
    change_schema,
    empty_changes,
    keyed_diff,
    multiset_diff,
    net_changes,
)
from catalog.errors import ChangeFeedError, ChangesExpiredError, SchemaError
from catalog.files.pruning import Predicate, to_expression
from catalog.files.reader import read_files
from catalog.maintenance.expiry import mquery
from catalog.meta import TableMeta
from catalog.model import CommitOp, DataFile
from catalog.planning import plan_scan
from catalog.queries import NamedQueries
from catalog.scan import FilterSpec, Scan, ScanFilter
from catalog.snapshots import PartitionSnapshot
from catalog.store import PgStore
from catalog.table_store import snapshots_at

cquery = NamedQueries("catalog", "sql/changes.sql")

_KIND, _RANK = "__ls_kind_order", "__ls_rank"
#: Above this many rows in the files a CDC version added or removed, its changes are found by
#: reading the touched partitions whole rather than by looking their keys up.
LOOKUP_MAX_KEYS = 200_000
#: Table property: whether updates carry their pre-image (``true``, the default, or ``false``).
PREIMAGES_PROPERTY = "changes.preimages"


@dataclass(frozen=True)
class VersionEntry:
    """One version of the range: what it did and to which partitions."""

    version: int
    op: CommitOp
    committed_at: dt.datetime
    partitions: tuple[str, ...]
    partition_ops: tuple[CommitOp, ...]
    rows_added: int = 0
    """Rows of the files the version added: a rate limit's estimate of its changes."""
    vector_partitions: tuple[str, ...] = ()
    """Partitions it compacted whose entries carry deletion vectors: a vector it added or
    grew deletes the rows it marks."""

    @property
    def changed_partitions(self) -> list[str]:
        """The partitions whose rows may have changed: a compaction's only where its entries
        carry vectors (a rewrite changes no row)."""
        return [
            d
            for d, op in zip(self.partitions, self.partition_ops, strict=True)
            if op != CommitOp.COMPACTION or d in self.vector_partitions
        ]

    @property
    def compacted_partitions(self) -> frozenset[str]:
        """Partitions whose files it rewrote: only changed vectors count there."""
        return frozenset(
            d
            for d, op in zip(self.partitions, self.partition_ops, strict=True)
            if op == CommitOp.COMPACTION
        )


def preimages_wanted(meta: TableMeta) -> bool:
    value = meta.properties.get(PREIMAGES_PROPERTY, "true").strip().lower()
    if value not in ("true", "false"):
        raise ChangeFeedError(
            f"{meta.name}: table property {PREIMAGES_PROPERTY} must be true or false, not "
            f"{value!r}",
            table=str(meta.name),
        )
    return value == "true"


def first_version_since(store: PgStore, meta: TableMeta, at: dt.datetime) -> int | None:
    """The first version committed at or after ``at`` (None: none yet)."""
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    row = store.fetch_one(cquery("first_version_since"), {"table_id": meta.table_id, "at": at})
    return None if row is None or row["version"] is None else int(row["version"])


def check_base(
    store: PgStore, meta: TableMeta, start: int, *, consumer_id: str | None = None
) -> None:
    """Raise :class:`ChangesExpiredError` when the state changes from ``start`` are computed
    against (``start - 1``) lies below the expiry horizon."""
    base = max(start - 1, 0)
    row = store.fetch_one(mquery("expiry_horizon"), {"table_id": meta.table_id})
    if row is None or base >= row["oldest_version"]:
        return
    oldest = int(row["oldest_version"])
    who = f"consumer {consumer_id!r} of " if consumer_id else ""
    raise ChangesExpiredError(
        f"{who}{meta.name}: changes from version {start} need version {base}, but versions "
        f"below {oldest} were expired; read from version {oldest + 1} or later",
        table=str(meta.name),
        start_version=start,
        oldest_version=oldest,
        oldest_committed_at=row["oldest_committed_at"],
        consumer_id=consumer_id,
    )


@dataclass(frozen=True)
class VersionDelta:
    """What one version did to some partitions: their snapshots before and after it.

    Planning it needs the catalog; deriving its rows (:func:`derive_changes`) needs the files
    alone, so a delta travels to a Spark executor (see :mod:`ingest.spark_read.changes`)."""

    entry: VersionEntry
    before: tuple[PartitionSnapshot, ...]
    after: tuple[PartitionSnapshot, ...]

    def by_bucket(self, meta: TableMeta) -> list[VersionDelta]:
        """The delta in independent parts: per hash bucket on a CDC table (a key hashes to one
        bucket number in every range partition, so a key that moved partition stays in one
        part, and stays one update), per partition on an append table (no key pairs rows
        across partitions). Each part's keys are looked up in that part's files only."""

        def group(desc: str) -> str:
            _, bucket = meta.spec.parse(desc)
            return str(bucket) if meta.is_cdc and bucket is not None else desc

        groups = sorted({group(s.partition_desc) for s in (*self.before, *self.after)})
        return [
            VersionDelta(
                self.entry,
                tuple(s for s in self.before if group(s.partition_desc) == g),
                tuple(s for s in self.after if group(s.partition_desc) == g),
            )
            for g in groups
        ]


def plan_delta(store: PgStore, meta: TableMeta, entry: VersionEntry) -> VersionDelta:
    """The snapshots of the partitions ``entry``'s version changed, before and after it."""
    descs = entry.changed_partitions
    if not descs:
        return VersionDelta(entry, (), ())
    before = snapshots_at(store, meta, entry.version - 1, partitions=descs)
    after = snapshots_at(store, meta, entry.version, partitions=descs)
    return VersionDelta(entry, tuple(before), tuple(after))


def list_versions(store: PgStore, meta: TableMeta, first: int, last: int) -> list[VersionEntry]:
    """The versions ``first`` to ``last`` (both included) with what each did."""
    if first > last:
        return []
    rows = store.fetch_all(
        cquery("versions_between"), {"table_id": meta.table_id, "first": first, "last": last}
    )
    return [
        VersionEntry(
            version=int(r["version"]),
            op=CommitOp(r["commit_op"]),
            committed_at=r["committed_at"],
            partitions=tuple(r["partitions"]),
            partition_ops=tuple(CommitOp(o) for o in r["partition_ops"]),
            rows_added=int(r["rows_added"] or 0),
            vector_partitions=tuple(r["vector_partitions"]),
        )
        for r in rows
    ]


def feed_schema(meta: TableMeta, columns: Sequence[str] | None = None) -> pa.Schema:
    """The schema of a change read: the (chosen) user columns, nullable, then the three."""
    user = meta.user_schema
    if columns is not None:
        user = pa.schema([user.field(c) for c in columns])
    return change_schema(pa.schema([f.with_nullable(True) for f in user]))


def check_columns(meta: TableMeta, columns: Sequence[str] | None, scan_filter: ScanFilter) -> None:
    names = meta.user_schema.names
    for name in [*(columns or ()), *(p.column for p in scan_filter.predicates)]:
        if name not in names:
            raise SchemaError(
                f"column {name!r} is not in {meta.name}", table=str(meta.name), column=name
            )


def finish_changes(
    meta: TableMeta,
    changes: pa.Table,
    *,
    columns: Sequence[str] | None = None,
    scan_filter: ScanFilter | None = None,
) -> pa.Table:
    """Pre-images dropped if the table says so, then the filter and the columns."""
    if not preimages_wanted(meta) and changes.num_rows:
        changes = changes.filter(pc.not_equal(changes.column(CHANGE_TYPE), PREIMAGE))
    expression = scan_filter.expression if scan_filter is not None else None
    if expression is None and scan_filter is not None and scan_filter.predicates:
        expression = to_expression(scan_filter.predicates, meta.user_schema)
    if expression is not None and changes.num_rows:
        changes = changes.filter(expression)
    wanted = [*(columns or meta.user_schema.names)]
    out = changes.select([*wanted, CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP])
    return out.cast(feed_schema(meta, columns))


class StateCache:
    """Merged partition states by partition version, so consecutive versions of one read
    read each state once: the state after one version is the state before the next that
    touches the partition. Only the last version's states are kept."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], pa.Table] = {}

    def states(
        self, meta: TableMeta, version: int, snapshots: Sequence[PartitionSnapshot]
    ) -> pa.Table:
        """The merged rows of these partitions at ``version`` (one row per key)."""
        parts, kept = [], {}
        for snapshot in snapshots:
            handle = (snapshot.partition_desc, snapshot.head.version)
            state = self._states.get(handle)
            if state is None:
                plan = plan_scan(meta, version, [snapshot])
                state = Scan(meta, plan, meta.user_schema.names).to_arrow()
            kept[handle] = state
            parts.append(state)
        self._states = kept
        if not parts:
            return meta.user_schema.empty_table()
        return pa.concat_tables(parts)


def derive_changes(
    meta: TableMeta, delta: VersionDelta, cache: StateCache | None = None
) -> pa.Table:
    """Every change ``delta``'s version made to its partitions, pre-images included, all user
    columns - from the files alone (no catalog)."""
    entry = delta.entry
    if not delta.before and not delta.after:
        return empty_changes(meta.user_schema)
    at = entry.committed_at.astimezone(dt.UTC)
    removed, added = _file_changes(delta.before, delta.after, entry.compacted_partitions)
    if not removed and not added:  # a compaction's entries named again with the same vectors
        return empty_changes(meta.user_schema)
    if not meta.is_cdc:
        return multiset_diff(_rows(meta, removed), _rows(meta, added), entry.version, at)
    lookup = _key_lookup(meta, [*removed, *added])
    if lookup is None:
        cache = cache or StateCache()
        old = cache.states(meta, entry.version - 1, delta.before)
        new = cache.states(meta, entry.version, delta.after)
    else:
        old = _lookup(meta, entry.version - 1, delta.before, lookup)
        new = _lookup(meta, entry.version, delta.after, lookup)
    return keyed_diff(old, new, meta.primary_key, entry.version, at)


def in_version_order(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """One version's changes as :func:`keyed_diff` orders them: deletes, then updates (each
    pre-image right before its post-image), then inserts, each kind by key; append tables'
    deletes then inserts keep their order."""
    rank = pc.index_in(changes.column(CHANGE_TYPE), pa.array([DELETE, PREIMAGE, POSTIMAGE, INSERT]))
    kind = pc.if_else(pc.equal(rank, 2), 1, rank)  # a post-image sorts with its pre-image
    ordered = changes.append_column(_KIND, kind).append_column(_RANK, rank)
    by = [(_KIND, "ascending"), *((k, "ascending") for k in key), (_RANK, "ascending")]
    return ordered.sort_by(by).drop_columns([_KIND, _RANK])


def _key_lookup(meta: TableMeta, files: Sequence[DataFile]) -> ScanFilter | None:
    """A filter on the keys the files a version added or removed hold: only those keys'
    merged state can differ, and the merge reader pushes a key filter below the merge, so
    merging costs what the touched keys cost. None (read the whole state) for a composite
    key, or when the files hold so many keys that a lookup would cost more than a read."""
    key = meta.primary_key
    if len(key) != 1:
        return None
    if not files:
        return ScanFilter(predicates=(Predicate(key[0], "in", ()),))
    if sum(f.row_count for f in files) > LOOKUP_MAX_KEYS:
        return None
    runs = pa.schema([meta.schema.field(key[0])])
    batches = read_files(meta.files, files, runs, columns=list(key))
    values = pa.Table.from_batches(list(batches), schema=runs).column(0)
    unique = pc.unique(values.combine_chunks()).to_pylist()
    return ScanFilter(predicates=(Predicate(key[0], "in", tuple(unique)),))


def _lookup(
    meta: TableMeta, version: int, snapshots: Sequence[PartitionSnapshot], keys: ScanFilter
) -> pa.Table:
    """The merged rows of the looked-up keys in these partitions at ``version``."""
    plan = plan_scan(meta, version, snapshots)
    return Scan(meta, plan, meta.user_schema.names, keys).to_arrow()


def _rows(meta: TableMeta, files: Sequence[DataFile]) -> pa.Table:
    schema = meta.user_schema
    if not files:
        return schema.empty_table()
    batches = read_files(meta.files, files, meta.schema, columns=schema.names)
    return pa.Table.from_batches(list(batches), schema=schema)


@dataclass
class ChangeFeed:
    """The changes of versions ``first`` to ``last`` (both included) of one table.

    Built by :meth:`catalog.Table.changes`; ``to_batches`` reads version by version (each
    version's changes are one unit), so a stream can hold one version's rows at a time;
    ``net`` needs the whole range first.
    """

    store: PgStore
    meta: TableMeta
    first: int
    last: int
    net: bool = False
    columns: Sequence[str] | None = None
    filter: FilterSpec = None

    def __post_init__(self) -> None:
        self._filter = ScanFilter.of(self.filter)
        check_columns(self.meta, self.columns, self._filter)
        preimages_wanted(self.meta)  # a bad property fails here, before any read
        self._cache = StateCache()

    @property
    def schema(self) -> pa.Schema:
        return feed_schema(self.meta, self.columns)

    def versions(self) -> list[VersionEntry]:
        return list_versions(self.store, self.meta, self.first, self.last)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        if self.net:
            yield from self.to_arrow().to_batches()
            return
        for entry in self.versions():
            changes = self._finish(self.version_changes(entry))
            yield from changes.to_batches()

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        if not self.net:
            return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)
        parts = [self.version_changes(e) for e in self.versions()]
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return self.schema.empty_table()
        folded = net_changes(pa.concat_tables(parts), self.meta.primary_key)
        return self._finish(folded)

    def version_changes(self, entry: VersionEntry) -> pa.Table:
        """Every change ``entry``'s version made, pre-images included, all user columns: its
        parts derived one by one (as Spark's tasks do), then in the order of one version's
        changes (deletes, updates, inserts, each by key)."""
        delta = plan_delta(self.store, self.meta, entry)
        parts = [
            derive_changes(self.meta, part, self._cache) for part in delta.by_bucket(self.meta)
        ]
        if len(parts) <= 1:
            return parts[0] if parts else empty_changes(self.meta.user_schema)
        return in_version_order(pa.concat_tables(parts), self.meta.primary_key)

    def _finish(self, changes: pa.Table) -> pa.Table:
        return finish_changes(self.meta, changes, columns=self.columns, scan_filter=self._filter)


def _file_changes(
    before: Sequence[PartitionSnapshot],
    after: Sequence[PartitionSnapshot],
    compacted: Collection[str] = (),
) -> tuple[list[DataFile], list[DataFile]]:
    """The file entries (as DataFiles) a version removed and added, over the given partitions.

    A file named again with another deletion vector is both: its old entry removed, its new one
    added, so the rows its new vector marks read as deleted (the two entries read the same file
    minus different marks). In ``compacted`` partitions only such entries count: a rewrite
    changes no row, so its outputs and inputs would only cancel out at the cost of reading them.
    """
    old = {f.path: (s.partition_desc, f) for s in before for f in s.live_files()}
    new = {f.path: (s.partition_desc, f) for s in after for f in s.live_files()}
    removed, added = [], []
    for path, (desc, file) in old.items():
        now = new.get(path)
        if now is None:
            if desc not in compacted:
                removed.append(file)
        elif now[1].vector != file.vector:
            removed.append(file)
            added.append(now[1])
    added += [f for p, (d, f) in new.items() if p not in old and d not in compacted]
    return removed, added


def resolve_range(
    store: PgStore,
    meta: TableMeta,
    latest: int,
    start_version: int | None,
    *,
    end_version: int | None,
    as_of: dt.datetime | None,
) -> tuple[int, int]:
    """``(first, last)`` of a change read, checked: both versions exist, the base state
    (``first - 1``) is not expired."""
    from catalog.errors import VersionNotFoundError

    name = str(meta.name)
    if (start_version is None) == (as_of is None):
        raise ChangeFeedError("changes() takes start_version or as_of (one of them)", table=name)
    if as_of is not None:
        found = first_version_since(store, meta, as_of)
        start = latest + 1 if found is None else found
    else:
        assert start_version is not None
        start = start_version
    if start < 0:
        raise ChangeFeedError(f"{name}: start_version must be >= 0, not {start}", table=name)
    end = latest if end_version is None else end_version
    if end > latest:
        raise VersionNotFoundError(f"{name} has versions 0..{latest}, not {end}")
    if start <= end:
        check_base(store, meta, start)
    return start, end
