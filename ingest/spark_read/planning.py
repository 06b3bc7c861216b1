"""Spark input partitions of one table version, planned once on the driver.

* A partition needing merge-on-read (a CDC bucket with pending runs) is ONE input partition:
  the newest change of a key may sit in any run, so the bucket is read on one executor - its
  resolved prefix minus vectors and its pending runs merged against it (the tail merge of
  :mod:`catalog.files.tail`), or all its runs merged when none is resolved.
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
    """DataFile JSON, in commit order (for a merge: oldest run first)."""
    merge: bool

    def data_files(self) -> list[DataFile]:
        return [DataFile.model_validate_json(f) for f in self.files]


def input_partitions(
    spec: ReadSpec, partitions: Iterable[PartitionScan], max_split_bytes: int
) -> list[LakestreamPartition]:
    """The input partitions of the (already pruned) partitions of a scan plan."""
    found: list[LakestreamPartition] = []
    for part in partitions:
        if part.merge:
            found.append(_partition(spec, part, part.files, merge=True))
            continue
        files = [f for f in part.files if may_contain(f, spec.predicates, spec.schema)]
        for group in split_files(files, max_split_bytes):
            found.append(_partition(spec, part, group, merge=False))
    return found


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
