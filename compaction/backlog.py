"""What a table's latest snapshot owes the compactor, from its scan plan alone (pure).

The figures ``lakestream compactor status`` prints and the service exports as metrics:

* small-file backlog: append tables - files below ``small_file_ratio x target_file_size``;
  CDC tables - the runs of buckets holding more than one (the files a merge would fold);
* max runs per bucket (CDC tables; 0 for append tables): what a merge-on-read decodes at worst;
* waiting partitions: append partitions that have small files to pack but too few of them yet,
  the ones whose coordinator rounds count towards ``compaction.force-after-rounds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.compute as pc

from catalog import PartitionScan, ScanPlan, TableMeta
from compaction.policy import CompactionPolicy


@dataclass(frozen=True)
class Backlog:
    small_files: int
    max_runs_per_bucket: int
    files: int


def backlog(meta: TableMeta, plan: ScanPlan, policy: CompactionPolicy) -> Backlog:
    """Counted on the plan's columns: the compactor asks every round for every table, and
    building a DataFile per file would make that cost grow with the table's file count."""
    files = plan.file_count
    if meta.is_cdc:
        runs = [p.file_count for p in plan.partitions]
        return Backlog(
            small_files=sum(n for n in runs if n > 1),
            max_runs_per_bucket=max(runs, default=0),
            files=files,
        )
    small = sum(_small_file_count(p, policy) for p in plan.partitions)
    return Backlog(small_files=small, max_runs_per_bucket=0, files=files)


def waiting_partitions(
    meta: TableMeta, plan: ScanPlan, policy: CompactionPolicy, planned: Iterable[str]
) -> set[str]:
    """Append partitions with at least two small files that got no task this round."""
    if meta.is_cdc or not policy.enabled:
        return set()
    has_task = set(planned)
    return {
        p.partition_desc
        for p in plan.partitions
        if p.partition_desc not in has_task and _small_file_count(p, policy) >= 2
    }


def _small_file_count(partition: PartitionScan, policy: CompactionPolicy) -> int:
    """What ``compaction.planner.small_files`` would count, from the size column."""
    sizes = partition.manifest.table.column("size_bytes")
    return int(pc.sum(pc.less(sizes, policy.small_file_bytes)).as_py() or 0)
