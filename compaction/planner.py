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
never folded. With ``compaction.resolve`` on, both triggers count only what a reader pays for
(:func:`reader_due`): the pending runs (files not flagged ``resolved`` after the resolved
prefix), read against the prefix's live rows; resolved files, however many, are a plain scan
and are tidied by the tiers instead, so a resolved bucket is not folded again and again as
runs accumulate (the write amplification issue 49 removes). Otherwise, in this order:

* tier 1 (:func:`tier_fold_inputs`): ``tier_min_files`` consecutive small resolved files of
  about one size tier are folded (kind ``fold-resolved``);
* tier 2 (:func:`worn_resolved`): a resolved file at or above the small-file size whose vector
  marks more than ``rewrite_deleted_ratio`` of its rows is rewritten alone (same kind);
* a bucket with pending runs is *resolved* (:func:`resolve_inputs`, kind ``resolve``): cheap,
  frequent, no data rewritten; the fold stays the safety valve.

A tier goes before a resolve because it is rare (it needs files to accumulate) and names the
pending runs unchanged, while a resolve is due at almost every round under steady ingest: the
other order would starve the tiers.

The tiers' size rule keeps write amplification low but does not bound a bucket's file count,
so a *crowded* bucket (:func:`crowded`: ``max_sorted_runs`` files or more, resolved and
pending) with no tier due folds its newest small resolved files whatever their tiers
(:func:`crowded_inputs`), else is resolved, else is folded whole; and one of
``CROWDED_CAP x max_sorted_runs`` files is folded whole at once. A caught-up bucket thus holds
fewer than ``max_sorted_runs`` files, as with ``compaction.resolve`` off.

At most one task per (table, partition_desc): a partition's task holds all of its work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from catalog import ROW_KIND_COLUMN, ROW_KIND_DELETE, DataFile, PartitionScan, ScanPlan, TableMeta
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
                task = _tier_or_resolve(meta, plan, part, policy)
                if task is not None:
                    tasks.append(task)
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
    if force:
        return tuple(runs)
    if policy.resolve:
        capped = len(runs) >= CROWDED_CAP * policy.max_sorted_runs
        return tuple(runs) if capped or reader_due(meta, part, policy) else ()
    due = (
        len(runs) >= policy.max_sorted_runs
        or read_amplification(meta, runs) > policy.max_read_amplification
    )
    return tuple(runs) if due else ()


def reader_due(meta: TableMeta, part: PartitionScan, policy: CompactionPolicy) -> bool:
    """Whether a bucket of a resolving table is owed a fold: its pending runs number
    ``max_sorted_runs``, or a read of it (the resolved prefix's live rows as one base, plus the
    pending runs merged) decodes more than ``max_read_amplification`` x its live rows. Marked
    rows and the count of resolved files do not count: tiers 1 and 2 deal with them."""
    pending = pending_runs(part)
    if not pending:
        return False
    if len(pending) >= policy.max_sorted_runs:
        return True
    prefix = part.files[: len(part.files) - len(pending)]
    items = [(f.row_count, _key_range(meta, f)) for f in pending]
    if prefix:
        live = sum(f.row_count - (f.vector.cardinality if f.vector else 0) for f in prefix)
        items.append((live, _union_range([_key_range(meta, f) for f in prefix])))
    return _amplification(items) > policy.max_read_amplification


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
    return _amplification([(f.row_count, _key_range(meta, f)) for f in runs])


KeyRange = tuple[Any, Any]
#: A run as the estimate sees it: its row count and its first key column's range (None: unknown).
RunShape = tuple[int, KeyRange | None]


def _amplification(runs: Sequence[RunShape]) -> float:
    total = sum(rows for rows, _ in runs)
    live = sum(max(rows for rows, _ in group) for group in _overlapping_groups(runs))
    return total / live if live else 1.0


def _union_range(ranges: Sequence[KeyRange | None]) -> KeyRange | None:
    """The smallest range holding every one of ``ranges``; None when one is unknown."""
    known = [r for r in ranges if r is not None]
    if len(known) < len(ranges) or not known:
        return None
    try:
        return min(low for low, _ in known), max(high for _, high in known)
    except TypeError:  # values that do not compare
        return None


def _key_range(meta: TableMeta, file: DataFile) -> KeyRange | None:
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


def _overlapping_groups(runs: Sequence[RunShape]) -> list[list[RunShape]]:
    """Runs grouped so that key ranges of different groups are disjoint."""
    known = [(r, run) for run in runs if (r := run[1]) is not None]
    if len(known) < len(runs):  # a run of unknown range may overlap any other
        return [list(runs)]
    try:
        return _sweep(sorted(known, key=lambda item: item[0][0]))
    except TypeError:  # values that do not compare: assume the worst
        return [list(runs)]


def _sweep(ranged: Sequence[tuple[KeyRange, RunShape]]) -> list[list[RunShape]]:
    """Connected groups of closed intervals sorted by their low end."""
    groups: list[list[RunShape]] = []
    high: Any = None
    for (low, run_high), run in ranged:
        if groups and low <= high:
            groups[-1].append(run)
            high = max(high, run_high)
        else:
            groups.append([run])
            high = run_high
    return groups


# ---------------------------------------------------------------------- CDC buckets: resolve


def pending_runs(part: PartitionScan) -> tuple[DataFile, ...]:
    """The bucket's files after its resolved prefix (R1 of docs/design/deletion-vectors.md),
    as the plan counted it (:attr:`~catalog.planning.PartitionScan.tail`). A bucket read
    without a merge (one file, no merge commit) counts as resolved."""
    return part.tail if part.merge else ()


def resolve_inputs(part: PartitionScan) -> tuple[DataFile, ...]:
    """The inputs of a bucket's resolve task: every file of the bucket (the commit names each
    entry again), or nothing when no run is pending."""
    return tuple(part.files) if pending_runs(part) else ()


# ------------------------------------------------------------ CDC buckets: tiers 1 and 2 (D8)


def resolved_files(part: PartitionScan) -> tuple[DataFile, ...]:
    """The bucket's resolved prefix: the leading files flagged ``resolved`` (R1)."""
    files = part.files
    return files[: next((i for i, f in enumerate(files) if f.resolved is not True), len(files))]


#: A file joins the younger small files after it in a tier-1 fold only when it is at most this
#: many times their total size (the size ratio of Paimon's universal compaction, loosened so
#: that files of about one size always group): a large file is rewritten only once the young
#: ones have caught up with it, so each byte is rewritten a logarithmic number of times, not
#: at every fold of the bucket (the write amplification issue 49 removes).
TIER_SIZE_RATIO = 1.5


def tier_fold_inputs(part: PartitionScan, policy: CompactionPolicy) -> tuple[DataFile, ...]:
    """Tier 1: ``tier_min_files`` or more consecutive small resolved files of about one size
    tier (:func:`size_tiers`), the newest such group first; empty when there is none.
    Consecutive (in chain order) because the output takes the group's place in the chain:
    every file keeps its order relative to the others, so the prefix stays a prefix (R1) and a
    merge that ignores vectors (the whole-bucket fold) still sees each tombstone above the
    older rows it ended."""
    stretches: list[list[DataFile]] = [[]]
    for file in resolved_files(part):
        if policy.is_small(file.size_bytes):
            stretches[-1].append(file)
        elif stretches[-1]:
            stretches.append([])
    for stretch in reversed(stretches):
        for group in size_tiers(stretch, policy.target_file_size):
            if len(group) >= policy.tier_min_files:
                return tuple(group)
    return ()


def size_tiers(files: Sequence[DataFile], target_file_size: int) -> list[list[DataFile]]:
    """``files`` (consecutive, chain order) cut into groups from the newest back: a file joins
    the group after it while it is at most :data:`TIER_SIZE_RATIO` x the group's size and the
    group holds less than :data:`BIN_TARGETS` x the target size. Newest group first; each in
    chain order."""
    groups: list[list[DataFile]] = []
    current: list[DataFile] = []
    total = 0
    for file in reversed(files):
        full = total >= BIN_TARGETS * target_file_size
        if current and (full or file.size_bytes > total * TIER_SIZE_RATIO):
            groups.append(current[::-1])
            current, total = [], 0
        current.append(file)
        total += file.size_bytes
    if current:
        groups.append(current[::-1])
    return groups


def worn_resolved(
    meta: TableMeta, part: PartitionScan, policy: CompactionPolicy
) -> tuple[DataFile, ...]:
    """Tier 2: the first resolved file at or above the small-file size whose vector marks more
    than ``rewrite_deleted_ratio`` of its rows, alone; empty when none is. Small files are left
    to tier 1, which drops their marked rows as well. A file of tombstones only (a tier's
    output, by its row-kind statistics) is left alone unless they may be dropped: a rewrite
    would keep every row of it."""
    for file in resolved_files(part):
        if (
            file.vector is not None
            and file.row_count > 0
            and not policy.is_small(file.size_bytes)
            and file.vector.cardinality / file.row_count > policy.rewrite_deleted_ratio
            and not (only_deletes(file) and not tier_drops_deletes(meta, part, (file,)))
        ):
            return (file,)
    return ()


def only_deletes(file: DataFile) -> bool:
    """Whether the file's row-kind statistics say every row of it is a delete."""
    stats = file.stats.get(ROW_KIND_COLUMN)
    if stats is None or stats.min is None:
        return False
    try:
        return bool(decode_stat(stats.min, pa.int8()).as_py() == ROW_KIND_DELETE)
    except (TypeError, ValueError, pa.ArrowException):
        return False


#: A bucket of a resolving table is folded whole, whatever else is due, once it holds this many
#: times ``max_sorted_runs`` files: the hard bound on its file count (the crowded rule below
#: keeps it near ``max_sorted_runs``; this guards against ingest outrunning it).
CROWDED_CAP = 2


def crowded(part: PartitionScan, policy: CompactionPolicy) -> bool:
    """Whether a bucket of a resolving table holds ``max_sorted_runs`` files or more, resolved
    and pending together: the count a user bounds with that property."""
    return len(part.files) >= max(policy.max_sorted_runs, 2)


#: A crowded bucket's tier-1 fold takes at least this many files: a tier writes up to two (the
#: live rows and the tombstones), so fewer would not shrink the bucket and could repeat forever.
CROWDED_MIN_FILES = 3


def crowded_inputs(part: PartitionScan, policy: CompactionPolicy) -> tuple[DataFile, ...]:
    """A crowded bucket's tier-1 fold: its newest stretch of :data:`CROWDED_MIN_FILES` or more
    consecutive small resolved files, whatever their size tiers and ``tier_min_files`` say
    (those keep write amplification low while the bucket has room; a crowded one must shrink).
    Empty when none."""
    stretches: list[list[DataFile]] = [[]]
    for file in resolved_files(part):
        if policy.is_small(file.size_bytes):
            stretches[-1].append(file)
        elif stretches[-1]:
            stretches.append([])
    return next((tuple(s) for s in reversed(stretches) if len(s) >= CROWDED_MIN_FILES), ())


def _tier_or_resolve(
    meta: TableMeta, plan: ScanPlan, part: PartitionScan, policy: CompactionPolicy
) -> CompactionTask | None:
    """A bucket of a resolving table with no fold due: a tier's task, else a resolve, else none.
    A crowded bucket (:func:`crowded`) folds its newest small resolved files regardless of
    their tiers, and with nothing pending and no such stretch it is folded whole (one file):
    resolves and tiers alone could leave it holding ``max_sorted_runs`` files or more for good
    (issue 49's streaming buckets grew to 29 files)."""
    stretch = tier_fold_inputs(part, policy) or worn_resolved(meta, part, policy)
    if not stretch and crowded(part, policy):
        stretch = crowded_inputs(part, policy)
    if stretch:
        kind, drops = CompactionKind.FOLD_RESOLVED, tier_drops_deletes(meta, part, stretch)
        return _bucket_task(meta, plan, part, policy, kind=kind, inputs=stretch, drop_deletes=drops)
    resolve = resolve_inputs(part)
    if resolve:
        return _bucket_task(meta, plan, part, policy, kind=CompactionKind.RESOLVE, inputs=resolve)
    if crowded(part, policy):
        return _task(meta, plan, part, policy, tuple(part.files))
    return None


def tier_drops_deletes(meta: TableMeta, part: PartitionScan, stretch: Sequence[DataFile]) -> bool:
    """Whether a tier's output may leave its tombstones out: only when nothing is older than the
    stretch (it starts the bucket) and the table has no sequence column. With one, a later
    file of the bucket (resolved with its loser marked, or pending) may hold a stale replay of
    lower sequence that only the tombstone keeps out of a merge; without one, every later
    change of the key wins over the tombstone anyway."""
    return meta.sequence_column is None and part.files[0].path == stretch[0].path


def _bucket_task(
    meta: TableMeta,
    plan: ScanPlan,
    part: PartitionScan,
    policy: CompactionPolicy,
    *,
    kind: CompactionKind,
    inputs: tuple[DataFile, ...],
    drop_deletes: bool = False,
) -> CompactionTask:
    """A resolve or tier task of one bucket, planned at the plan's version."""
    return CompactionTask(
        table=str(meta.name),
        table_id=meta.table_id,
        partition_desc=part.partition_desc,
        kind=kind,
        base_version=plan.table_version,
        inputs=inputs,
        drop_deletes=drop_deletes,
        target_file_size=policy.target_file_size,
    )
