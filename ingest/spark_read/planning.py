"""Spark input partitions of one table version, planned once on the driver.

* A CDC bucket with pending runs and no resolved file is ONE input partition: the newest
  change of a key may sit in any run, so its runs are merged on one executor, whole.
* A bucket with a resolved prefix and pending runs (a *tail*, design D6) is split like a plain
  partition into groups of its resolved files; every task merges the small tail itself, drops
  from its group the keys the tail decides (looking them up in all the bucket's resolved files)
  and only the first group's task emits the tail's winners
  (:func:`catalog.files.reader.read_tail_group`).
* A plain partition (an append table's partition, a compacted or fully resolved bucket) is
  split into groups of consecutive files of at most ``max_split_bytes`` (a larger file is a
  group of its own), after files whose statistics exclude the filter have been left out. A
  resolved bucket's files hold at most one live row per key once their vectors are applied
  (design D6), so its groups are read in parallel like an append partition's.

Each input partition carries everything its executor needs - the table location, the storage
options to reach it, the schema, primary key, sequence column, the files as
:class:`~catalog.model.DataFile` JSON, the columns and the pushed predicates - so executors never
connect to the catalog, and every task reads the same version: the one resolved once on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from catalog import DataFile, PartitionScan, StorageOptions
from catalog.files import DEFAULT_STORAGE, Predicate, Storage, may_contain, storage_for


@dataclass(frozen=True)
class ReadSpec:
    """What every task of one read shares."""

    table: str
    version: int
    location: str
    schema: pa.Schema
    """The table's current schema: files written under older schemas are read under it."""
    primary_key: tuple[str, ...]
    sequence_column: str | None
    columns: tuple[str, ...]
    """Table columns in the order of the Spark schema."""
    predicates: tuple[Predicate, ...]
    """Filters Spark pushed and left to the reader: they must filter rows exactly."""
    output: pa.Schema
    """The Arrow form of the Spark schema: batches must match it exactly."""
    storage: StorageOptions = field(default=DEFAULT_STORAGE, repr=False)
    """How executors reach an object-store location (keys are secrets, masked in repr)."""

    def files(self) -> Storage:
        return storage_for(self.location, self.storage)


@dataclass(frozen=True)
class LakestreamPartition(InputPartition):
    """One Spark task: a merged bucket, or a group of plain files of one partition."""

    spec: ReadSpec
    partition_desc: str
    files: tuple[str, ...]
    """DataFile JSON, in commit order (for a merge: oldest run first; for a group of a bucket
    with a tail: some of its resolved files)."""
    merge: bool
    tail: tuple[str, ...] = ()
    """A group of a bucket with a tail: the bucket's pending runs (DataFile JSON)."""
    resolved: tuple[str, ...] = ()
    """... and every resolved file of the bucket, which the tail's keys are looked up in."""
    winners: bool = False
    """... and whether this group emits the tail's winners (the bucket's first group)."""

    def data_files(self) -> list[DataFile]:
        return [DataFile.model_validate_json(f) for f in self.files]

    def tail_files(self) -> list[DataFile]:
        return [DataFile.model_validate_json(f) for f in self.tail]

    def resolved_files(self) -> list[DataFile]:
        return [DataFile.model_validate_json(f) for f in self.resolved]


def input_partitions(
    spec: ReadSpec, partitions: Iterable[PartitionScan], max_split_bytes: int
) -> list[LakestreamPartition]:
    """The input partitions of the (already pruned) partitions of a scan plan."""
    found: list[LakestreamPartition] = []
    for part in partitions:
        if part.merge and part.resolved_count:
            found += _tail_groups(spec, part, max_split_bytes)
            continue
        if part.merge:
            found.append(_partition(spec, part, part.files, merge=True))
            continue
        files = [f for f in part.files if may_contain(f, spec.predicates, spec.schema)]
        for group in split_files(files, max_split_bytes):
            found.append(_partition(spec, part, group, merge=False))
    return found


def _tail_groups(
    spec: ReadSpec, part: PartitionScan, max_split_bytes: int
) -> list[LakestreamPartition]:
    """A bucket with a resolved prefix and pending runs (design D6): its resolved files in
    groups, each task merging the small tail against its group; the first emits the tail's
    winners. Groups are not pruned by statistics here (the first must exist to emit the
    winners); each task's scan prunes its own files."""
    resolved = part.files[: part.resolved_count]
    tail = tuple(f.model_dump_json() for f in part.tail)
    every = tuple(f.model_dump_json() for f in resolved)
    return [
        LakestreamPartition(
            spec=spec,
            partition_desc=part.partition_desc,
            files=tuple(f.model_dump_json() for f in group),
            merge=True,
            tail=tail,
            resolved=every,
            winners=i == 0,
        )
        for i, group in enumerate(split_files(list(resolved), max_split_bytes))
    ]


def split_files(files: Sequence[DataFile], max_bytes: int) -> list[list[DataFile]]:
    """Consecutive files grouped greedily into groups of at most ``max_bytes`` (order kept)."""
    groups: list[list[DataFile]] = []
    size = 0
    for file in files:
        if not groups or size + file.size_bytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(file)
        size += file.size_bytes
    return groups


def _partition(
    spec: ReadSpec, part: PartitionScan, files: Sequence[DataFile], *, merge: bool
) -> LakestreamPartition:
    return LakestreamPartition(
        spec=spec,
        partition_desc=part.partition_desc,
        files=tuple(f.model_dump_json() for f in files),
        merge=merge,
    )
