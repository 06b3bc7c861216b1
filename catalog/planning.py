"""Scan planning: from a table version to the files each partition contributes.

A partition whose snapshot holds merge commits needs merge-on-read (its files are sorted runs of
one bucket, applied in commit order); every other partition is a plain scan of its live files.

A CDC bucket's files split into a *resolved prefix* (``DataFile.resolved``: the rows they no
longer count are marked in their vectors, design D4/D6 of docs/design/deletion-vectors.md) and
the *pending runs* after it (its :attr:`PartitionScan.tail`). A bucket with no pending run reads
like an append partition - a plain scan minus vectors - so it is no merge; one with a tail needs
the merge path, which merges the tail alone against the resolved files
(:mod:`catalog.files.reader`).

A file's deletion vector rides in its entry (``DataFile.vector``, the manifest's ``vector``
column): plans carry it as they carry the path, and every reader applies it
(:mod:`catalog.files.reader`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from catalog.manifest import FileManifest
from catalog.meta import TableMeta
from catalog.model import DataFile
from catalog.snapshots import PartitionSnapshot


@dataclass(frozen=True)
class PartitionScan:
    partition_desc: str
    version: int
    listing: FileManifest | Sequence[DataFile]
    """In commit order: for merge-on-read, oldest run first. Plans hold the columnar form;
    :attr:`files` builds DataFile objects from it on first use."""
    merge: bool
    values: dict[str, str | None]
    bucket: int | None
    resolved_count: int = 0
    """How many leading files form the resolved prefix (the rest are pending runs)."""

    @property
    def tail(self) -> tuple[DataFile, ...]:
        """The pending runs after the resolved prefix, oldest first (empty when resolved)."""
        return self.files[self.resolved_count :]

    @cached_property
    def manifest(self) -> FileManifest:
        listing = self.listing
        return listing if isinstance(listing, FileManifest) else FileManifest.of(listing)

    @cached_property
    def files(self) -> tuple[DataFile, ...]:
        listing = self.listing
        return listing.data_files() if isinstance(listing, FileManifest) else tuple(listing)

    @property
    def file_count(self) -> int:
        return len(self.listing)

    @property
    def row_count(self) -> int:
        return self.manifest.row_count


@dataclass(frozen=True)
class ScanPlan:
    table: TableMeta
    table_version: int
    partitions: tuple[PartitionScan, ...]

    @property
    def files(self) -> list[DataFile]:
        """Every file as a DataFile (a few microseconds each: large plans prefer
        :attr:`manifest` or :attr:`file_count`)."""
        return [f for p in self.partitions for f in p.files]

    @property
    def file_count(self) -> int:
        return sum(p.file_count for p in self.partitions)

    @property
    def manifest(self) -> FileManifest:
        """Every file in columns, partition by partition."""
        if not self.partitions:
            return FileManifest.empty()
        return FileManifest(pa.concat_tables([p.manifest.table for p in self.partitions]))

    @property
    def merge_partitions(self) -> list[PartitionScan]:
        return [p for p in self.partitions if p.merge]


PartitionFilter = Callable[[dict[str, str | None]], bool]


def plan_scan(
    meta: TableMeta, table_version: int, snapshots: Sequence[PartitionSnapshot]
) -> ScanPlan:
    """The scan of these partition snapshots."""
    scans = []
    for snapshot in snapshots:
        values, bucket = meta.spec.parse(snapshot.partition_desc)
        files = snapshot.files
        if not len(files):
            continue
        resolved = resolved_prefix(files) if meta.is_cdc else 0
        scans.append(
            PartitionScan(
                partition_desc=snapshot.partition_desc,
                version=snapshot.head.version,
                listing=files,
                # several runs of a keyed bucket must be merged, whichever op added them,
                # unless every one is resolved: then it is a plain scan minus vectors
                merge=meta.is_cdc
                and (snapshot.has_merge or len(files) > 1)
                and resolved < len(files),
                values=values,
                bucket=bucket,
                resolved_count=resolved,
            )
        )
    return ScanPlan(meta, table_version, tuple(scans))


def resolved_prefix(files: FileManifest) -> int:
    """How many leading files of a bucket are resolved (design R1: resolved files form a
    prefix; a resolved file after a pending one does not extend it)."""
    flags = files.table.column("resolved")
    if flags.null_count == len(flags):  # entries from before resolution: the common answer
        return 0
    pending = np.flatnonzero(~np.asarray(flags.fill_null(False).to_numpy(zero_copy_only=False)))
    return int(pending[0]) if len(pending) else len(flags)
