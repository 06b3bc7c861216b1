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

from catalog import ScanPlan, TableMeta
from compaction.planner import small_files
from compaction.policy import CompactionPolicy


@dataclass(frozen=True)
class Backlog:
    small_files: int
    max_runs_per_bucket: int
    files: int


def backlog(meta: TableMeta, plan: ScanPlan, policy: CompactionPolicy) -> Backlog:
    files = sum(len(p.files) for p in plan.partitions)
    if meta.is_cdc:
        runs = [len(p.files) for p in plan.partitions]
        return Backlog(
            small_files=sum(n for n in runs if n > 1),
            max_runs_per_bucket=max(runs, default=0),
            files=files,
        )
    small = sum(len(small_files(p.files, policy)) for p in plan.partitions)
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
        if p.partition_desc not in has_task and len(small_files(p.files, policy)) >= 2
    }
