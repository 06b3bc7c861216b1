"""Scan planning: from a table version to the files each partition contributes.

A partition whose snapshot holds merge commits needs merge-on-read (its files are sorted runs of
one bucket, applied in commit order); every other partition is a plain scan of its live files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from catalog.meta import TableMeta
from catalog.model import DataFile
from catalog.snapshots import PartitionSnapshot


@dataclass(frozen=True)
class PartitionScan:
    partition_desc: str
    version: int
    files: tuple[DataFile, ...]
    """In commit order: for merge-on-read, oldest run first."""
    merge: bool
    values: dict[str, str | None]
    bucket: int | None

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)


@dataclass(frozen=True)
class ScanPlan:
    table: TableMeta
    table_version: int
    partitions: tuple[PartitionScan, ...]

    @property
    def files(self) -> list[DataFile]:
        return [f for p in self.partitions for f in p.files]

    @property
    def merge_partitions(self) -> list[PartitionScan]:
        return [p for p in self.partitions if p.merge]


PartitionFilter = Callable[[dict[str, str | None]], bool]


def plan_scan(
    meta: TableMeta, table_version: int, snapshots: Sequence[PartitionSnapshot]
) -> ScanPlan:
    scans = []
    for snapshot in snapshots:
        values, bucket = meta.spec.parse(snapshot.partition_desc)
        files = tuple(snapshot.live_files())
        if not files:
            continue
        scans.append(
            PartitionScan(
                partition_desc=snapshot.partition_desc,
                version=snapshot.head.version,
                files=files,
                # several runs of a keyed bucket must be merged, whichever op added them
                merge=meta.is_cdc and (snapshot.has_merge or len(files) > 1),
                values=values,
                bucket=bucket,
            )
        )
    return ScanPlan(meta, table_version, tuple(scans))
