"""Which partitions and buckets of a table to compact, from one scan plan. Pure: no database,
no files - the catalog's snapshot (file sizes, row counts, statistics) is all it reads.

Append tables (bucket -1, the unaware-bucket rules of Paimon's seed 001):

* a file is *small* below ``small_file_ratio x target_file_size``; large files are never inputs;
* a partition with fewer than ``min_file_num`` small files waits, unless it has waited
  ``force_after_rounds`` coordinator rounds (``idle_rounds``) or the caller forces it;
* small files are packed into bins in commit order (a bin closes once it holds 2 x target),
  so rows are never reordered across files needlessly; a bin of one file is dropped. The task's
  inputs are its bins one after another; :func:`pack_bins` recovers them, and the rewrite
  writes each bin on its own (bounded memory, outputs of about the target size).
* a file whose deletion vector marks more than ``rewrite_deleted_ratio`` of its rows is
  *worn* (:func:`worn_files`, design D8 tier 2): it is an input at once, small or not, binned
  with its small neighbours or rewritten alone, so the rows DML marked stop costing reads and
  bytes. Its output carries no vector (bins are read minus vectors). A file marked below the
  ratio is left alone unless it is small anyway.

CDC buckets: when a bucket holds ``max_sorted_runs`` runs or more, or its read amplification
(:func:`read_amplification`) exceeds ``max_read_amplification``, ALL its runs are merged into
one file (the fold); every run is an input, so deletes can be dropped. A bucket of one file is
never folded. Otherwise a bucket with pending runs (files not flagged ``resolved`` after its
resolved prefix) is *resolved* (:func:`resolve_inputs`, kind ``resolve``): cheap, frequent,
no data rewritten; the fold stays the safety valve.

At most one task per (table, partition_desc): a partition's task holds all of its work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from catalog import DataFile, PartitionScan, ScanPlan, TableMeta
from catalog.files import decode_stat
from compaction.policy import CompactionPolicy
from compaction.task import CompactionKind, CompactionTask

#: A bin closes once it holds this many times the target file size.
BIN_TARGETS = 2


def plan_table(
    meta: TableMeta,
    plan: ScanPlan,
    policy: CompactionPolicy,
    *,
    idle_rounds: Mapping[str, int] | None = None,
    force: bool = False,
) -> list[CompactionTask]:
    """Tasks for one table at plan.table_version (the tasks' base_version). idle_rounds: per
    partition_desc, how many coordinator rounds it has waited with too few small files;
    force=True (``lakestream tables compact``) compacts every partition/bucket with >1 file
    (append: >1 small file; force lifts the waiting rules, not ``compaction.enabled``)."""
    if not policy.enabled:
        return []
    idle = idle_rounds or {}
    tasks = []
    for part in plan.partitions:
        if meta.is_cdc:
            inputs = bucket_inputs(meta, part, policy, force=force)
            if not inputs and policy.resolve:
                resolve = resolve_inputs(part)
                if resolve:
                    tasks.append(_resolve_task(meta, plan, part, policy, resolve))
                    continue
        else:
            waited = idle.get(part.partition_desc, 0)
            inputs = append_inputs(part.files, policy, idle_rounds=waited, force=force)
        if inputs:
            tasks.append(_task(meta, plan, part, policy, inputs))
    return tasks


def _task(
    meta: TableMeta,
    plan: ScanPlan,
    part: PartitionScan,
    policy: CompactionPolicy,
    inputs: tuple[DataFile, ...],
) -> CompactionTask:
    return CompactionTask(
        table=str(meta.name),
        table_id=meta.table_id,
        partition_desc=part.partition_desc,
        kind=CompactionKind.MERGE_BUCKET if meta.is_cdc else CompactionKind.BIN_PACK,
        base_version=plan.table_version,
        inputs=inputs,
        drop_deletes=meta.is_cdc,  # a bucket task takes every run of the bucket
        target_file_size=policy.target_file_size,
    )


# ----------------------------------------------------------------------------- append tables


def small_files(files: Sequence[DataFile], policy: CompactionPolicy) -> list[DataFile]:
    """The small files among ``files``, in their (commit) order."""
    return [f for f in files if policy.is_small(f.size_bytes)]


def bins_of(files: Sequence[DataFile], target_file_size: int) -> list[list[DataFile]]:
    """Consecutive runs of ``files`` (commit order kept), each closed once it holds
    ``BIN_TARGETS x target_file_size`` bytes; the last one may be smaller. Every file is in
    exactly one bin: the rewrite writes a task's inputs bin by bin with this."""
    bins: list[list[DataFile]] = []
    current: list[DataFile] = []
    size = 0
    for file in files:
        current.append(file)
        size += file.size_bytes
        if size >= BIN_TARGETS * target_file_size:
            bins.append(current)
            current, size = [], 0
    if current:
        bins.append(current)
    return bins


def pack_bins(files: Sequence[DataFile], target_file_size: int) -> list[list[DataFile]]:
    """The bins of :func:`bins_of` worth rewriting: a bin of one file gains nothing alone.
    The planner's inputs are these bins one after another, so ``bins_of`` of a task's inputs
    gives them back."""
    return [b for b in bins_of(files, target_file_size) if len(b) > 1]


def append_inputs(
    files: Sequence[DataFile], policy: CompactionPolicy, *, idle_rounds: int, force: bool
) -> tuple[DataFile, ...]:
    """The inputs of an append partition's task (empty: no task)."""
    small = small_files(files, policy)
    waits = len(small) < policy.min_file_num and idle_rounds < policy.force_after_rounds
    packing = len(small) >= 2 and (force or not waits)
    worn = worn_files(files, policy)
    if not worn:
        return (
            tuple(f for b in pack_bins(small, policy.target_file_size) for f in b)
            if packing
            else ()
        )
    return _with_worn(files, small if packing else [], worn, policy)


def worn_files(files: Sequence[DataFile], policy: CompactionPolicy) -> set[str]:
    """Paths of the files whose vector marks more than ``rewrite_deleted_ratio`` of their rows."""
    return {
        f.path
        for f in files
        if f.vector is not None
        and f.row_count > 0
        and f.vector.cardinality / f.row_count > policy.rewrite_deleted_ratio
    }


def _with_worn(
    files: Sequence[DataFile], small: Sequence[DataFile], worn: set[str], policy: CompactionPolicy
) -> tuple[DataFile, ...]:
    """Worn files and the small files due for packing, in commit order, binned as
    :func:`bins_of` bins them; a bin is kept when it holds a worn file or more than one file.
    Every kept bin but the last closes on its own, so ``bins_of`` of the inputs gives the same
    bins back (the rewrite relies on that)."""
    chosen = {f.path for f in small} | worn
    candidates = [f for f in files if f.path in chosen]
    kept = [
        b for b in bins_of(candidates, policy.target_file_size) if len(b) > 1 or b[0].path in worn
    ]
    return tuple(f for b in kept for f in b)


# ------------------------------------------------------------------------------ CDC buckets


def bucket_inputs(
    meta: TableMeta, part: PartitionScan, policy: CompactionPolicy, *, force: bool
) -> tuple[DataFile, ...]:
    """The inputs of a CDC bucket's task: all its runs, or nothing."""
    runs = part.files
    if len(runs) < 2:
        return ()
    due = (
        force
        or len(runs) >= policy.max_sorted_runs
        or read_amplification(meta, runs) > policy.max_read_amplification
    )
    return tuple(runs) if due else ()


def read_amplification(meta: TableMeta, runs: Sequence[DataFile]) -> float:
    """Rows a merge-on-read of these runs decodes / the live rows it returns, estimated.

    The catalog knows each run's row count and its key range (min/max of the first key
    column), not how the runs' keys overlap. The estimate groups runs whose key ranges
    overlap (or are unknown) and assumes that within a group the keys of the smaller runs are
    changes of keys the largest run already holds, while runs of different groups hold
    distinct keys (their ranges prove it). So live rows ~ the sum over groups of each group's
    largest run. It is exact for the two shapes ingest produces most - updates of a base file
    and inserts of ever-growing keys - and otherwise errs high (inserts mixed into updates
    count as updates, deletes are not subtracted), i.e. towards compacting a little early.
    """
    total = sum(f.row_count for f in runs)
    live = sum(max(f.row_count for f in group) for group in _overlapping_groups(meta, runs))
    return total / live if live else 1.0


def _key_range(meta: TableMeta, file: DataFile) -> tuple[Any, Any] | None:
    """(min, max) of the file's first key column as Python values; None when unknown."""
    column = meta.primary_key[0]
    stats = file.stats.get(column)
    if stats is None or stats.min is None or stats.max is None:
        return None
    arrow_type = meta.schema.field(column).type
    try:
        low, high = (decode_stat(v, arrow_type).as_py() for v in (stats.min, stats.max))
    except (TypeError, ValueError, pa.ArrowException):
        return None
    return low, high


def _overlapping_groups(meta: TableMeta, runs: Sequence[DataFile]) -> list[list[DataFile]]:
    """Runs grouped so that key ranges of different groups are disjoint."""
    ranged = [(_key_range(meta, f), f) for f in runs]
    known = [(r, f) for r, f in ranged if r is not None]
    if len(known) < len(ranged):  # a run of unknown range may overlap any other
        return [list(runs)]
    try:
        return _sweep(sorted(known, key=lambda item: item[0][0]))
    except TypeError:  # values that do not compare: assume the worst
        return [list(runs)]


def _sweep(ranged: Sequence[tuple[tuple[Any, Any], DataFile]]) -> list[list[DataFile]]:
    """Connected groups of closed intervals sorted by their low end."""
    groups: list[list[DataFile]] = []
    high: Any = None
    for (low, run_high), file in ranged:
        if groups and low <= high:
            groups[-1].append(file)
            high = max(high, run_high)
        else:
            groups.append([file])
            high = run_high
    return groups


# ---------------------------------------------------------------------- CDC buckets: resolve


def pending_runs(part: PartitionScan) -> tuple[DataFile, ...]:
    """The bucket's files after its resolved prefix (R1 of docs/design/deletion-vectors.md):
    the leading files flagged ``resolved`` are the prefix, every later file is pending. A
    bucket read without a merge (one file, no merge commit) counts as resolved."""
    if not part.merge:
        return ()
    files = part.files
    prefix = next((i for i, f in enumerate(files) if f.resolved is not True), len(files))
    return tuple(files[prefix:])


def resolve_inputs(part: PartitionScan) -> tuple[DataFile, ...]:
    """The inputs of a bucket's resolve task: every file of the bucket (the commit names each
    entry again), or nothing when no run is pending."""
    return tuple(part.files) if pending_runs(part) else ()


def _resolve_task(
    meta: TableMeta,
    plan: ScanPlan,
    part: PartitionScan,
    policy: CompactionPolicy,
    inputs: tuple[DataFile, ...],
) -> CompactionTask:
    return CompactionTask(
        table=str(meta.name),
        table_id=meta.table_id,
        partition_desc=part.partition_desc,
        kind=CompactionKind.RESOLVE,
        base_version=plan.table_version,
        inputs=inputs,
        target_file_size=policy.target_file_size,
    )
