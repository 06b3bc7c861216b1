"""Reading a table version as Arrow: partition and bucket pruning, then plain or merged reads.

A filter is a list of simple predicates (``("region", "=", "eu")`` or
:class:`~catalog.files.pruning.Predicate`), which prune partitions, buckets and files, or a
``pyarrow.compute`` expression, which filters rows (pyarrow cannot take an expression apart, so
it prunes nothing). Predicates on non-key columns are applied after merge-on-read, so they never
bring back an older version of a key.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import SchemaError
from catalog.files.bucketing import bucket_ids
from catalog.files.pruning import Predicate, may_match
from catalog.files.reader import read_files, read_merged_buckets
from catalog.files.stats import encode_stat
from catalog.manifest import FileManifest
from catalog.meta import TableMeta
from catalog.model import ColumnStats
from catalog.partitioning import typed_value
from catalog.planning import PartitionFilter, PartitionScan, ScanPlan

FilterSpec: TypeAlias = pc.Expression | Sequence[Predicate | tuple[str, str, object]] | None


@dataclass(frozen=True)
class ScanFilter:
    predicates: tuple[Predicate, ...] = ()
    expression: pc.Expression | None = None

    @classmethod
    def of(cls, spec: FilterSpec) -> ScanFilter:
        if spec is None:
            return cls()
        if isinstance(spec, pc.Expression):
            return cls(expression=spec)
        predicates = tuple(p if isinstance(p, Predicate) else Predicate(*p) for p in spec)
        return cls(predicates=predicates)

    @property
    def row_filter(self) -> pc.Expression | Sequence[Predicate] | None:
        return self.expression if self.expression is not None else (self.predicates or None)


def partition_may_match(meta: TableMeta, part: PartitionScan, scan_filter: ScanFilter) -> bool:
    """Whether a partition can hold matching rows, judged by its exact partition values."""
    return values_may_match(meta, part.values, scan_filter)


def values_may_match(
    meta: TableMeta, values: Mapping[str, str | None], scan_filter: ScanFilter
) -> bool:
    """Whether rows with these partition values (as the partition path holds them) can match.

    Every row of a partition holds the same value, so one row stands for all of them.
    """
    for predicate in scan_filter.predicates:
        if predicate.column not in meta.spec.columns:
            continue
        arrow_type = meta.schema.field(predicate.column).type
        value = typed_value(values[predicate.column], arrow_type)
        if value is None:
            stats = ColumnStats(null_count=1)
        else:
            encoded = encode_stat(pa.scalar(value, arrow_type))
            stats = ColumnStats(min=encoded, max=encoded, null_count=0)
        if not may_match(predicate, stats, arrow_type, 1):
            return False
    return True


def partition_filter(meta: TableMeta, scan_filter: ScanFilter) -> PartitionFilter | None:
    """A filter for :meth:`catalog.Table.plan` that skips partitions before their snapshots are
    loaded; None when no predicate is on a partition column."""
    if not any(p.column in meta.spec.columns for p in scan_filter.predicates):
        return None
    return lambda values: values_may_match(meta, values, scan_filter)


def wanted_buckets(meta: TableMeta, scan_filter: ScanFilter) -> set[int] | None:
    """Buckets a key lookup (``id = x`` or ``id in [...]`` on a one-column key) can touch."""
    if len(meta.primary_key) != 1 or not meta.spec.bucketed:
        return None
    key = meta.primary_key[0]
    for predicate in scan_filter.predicates:
        if predicate.column == key and predicate.op in ("=", "in"):
            values = predicate.value if predicate.op == "in" else [predicate.value]
            keys = pa.table({key: pa.array(list(values), meta.schema.field(key).type)})  # type: ignore[call-overload]
            return set(bucket_ids(keys, [key], meta.spec.hash_buckets).to_pylist())
    return None


@dataclass
class Scan:
    """A read of one table version; iterate it lazily or collect it.

    Without ``columns`` it returns the columns users see: lakestream's internal ones (the
    ``_ls_seq`` source position) only with ``include_internal`` or when ``columns`` names them.
    Filters may use any column.
    """

    meta: TableMeta
    plan: ScanPlan
    columns: Sequence[str] | None = None
    scan_filter: ScanFilter = field(default_factory=ScanFilter)
    include_internal: bool = False

    def __post_init__(self) -> None:
        for name in [*(self.columns or ()), *(p.column for p in self.scan_filter.predicates)]:
            if name not in self.meta.schema.names:
                raise SchemaError(
                    f"column {name!r} is not in {self.meta.name}",
                    table=str(self.meta.name),
                    column=name,
                )

    @property
    def version(self) -> int:
        return self.plan.table_version

    @property
    def schema(self) -> pa.Schema:
        schema = self.meta.schema
        columns = self._read_columns
        if columns is None:
            return schema
        return pa.schema([schema.field(c) for c in columns])

    @property
    def _read_columns(self) -> Sequence[str] | None:
        """The columns read: as asked, or the visible ones (None: every stored column)."""
        if self.columns is not None or self.include_internal or not self.meta.internal_columns:
            return self.columns
        visible: list[str] = self.meta.user_schema.names
        return visible

    def partitions(self) -> list[PartitionScan]:
        buckets = wanted_buckets(self.meta, self.scan_filter)
        return [
            p
            for p in self.plan.partitions
            if (buckets is None or p.bucket in buckets)
            and partition_may_match(self.meta, p, self.scan_filter)
        ]

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Batches of the result, partition by partition, in plan order.

        Plain partitions stream in file order, the files of the current schema read ahead
        together by Arrow (:func:`~catalog.files.reader.read_files`); merge-on-read buckets are
        read ahead on a thread pool (:func:`~catalog.files.reader.read_merged_buckets`: memory
        bounded by a few buckets).
        """
        target = self.schema
        for batches in self._partition_batches():
            for batch in batches:
                yield batch if batch.schema.equals(target) else batch.cast(target)

    def to_reader(self) -> pa.RecordBatchReader:
        """A streaming reader (DuckDB and Polars scan it without materialising the table)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def count(self) -> int:
        return sum(batch.num_rows for batch in self.to_batches())

    def _partition_batches(self) -> Iterator[Iterable[pa.RecordBatch]]:
        """Each merge-on-read bucket's batches, and each run of consecutive plain partitions'
        batches as one read (its files read ahead together), in plan order."""
        parts = self.partitions()
        merged = self._read_merged([p for p in parts if p.merge])
        try:
            for merge, group in itertools.groupby(parts, key=lambda part: part.merge):
                if merge:
                    yield from (next(merged) for _ in group)
                else:
                    yield self._read_plain(list(group))
        finally:
            merged.close()

    def _read_merged(
        self, parts: Sequence[PartitionScan]
    ) -> Generator[list[pa.RecordBatch], None, None]:
        meta = self.meta
        # runs hold delete rows that carry only their key: read them as the run schema
        runs = pa.schema(
            [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
        )
        return read_merged_buckets(
            meta.files,
            [part.files for part in parts],
            runs,
            meta.primary_key,
            sequence_column=meta.sequence_column,
            columns=self._read_columns,
            row_filter=self.scan_filter.row_filter,
        )

    def _read_plain(self, parts: Sequence[PartitionScan]) -> Iterator[pa.RecordBatch]:
        meta = self.meta
        return read_files(
            meta.files,
            FileManifest(pa.concat_tables([part.manifest.table for part in parts])),
            meta.schema,
            columns=self._read_columns,
            row_filter=self.scan_filter.row_filter,
            schema_id=meta.current_schema_id,
        )
