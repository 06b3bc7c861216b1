"""The one compaction routine: rewrite a task's input files and commit them as ``compaction``.

The service's workers, ``lakestream tables compact``, the demo and the benchmarks all call
:func:`compact`. It writes through :mod:`catalog.files` (temporary name, fsync, rename,
statistics, schema id, zstd) and commits through the catalog's conflict matrix, so what it
guarantees is what the matrix guarantees:

* reads are unchanged by a compaction, at the new version and at every earlier one (old files
  are only dropped from the new snapshot, never from the old ones);
* a commit that landed after the task's base is never failed by it: appends and merges are
  reordered after the compaction, a landed compaction or update discards it;
* it leaves no file nobody knows about: outputs of a definite failure are deleted at once, those
  of a discarded commit are recorded by the committer for cleanup (``Catalog.leftovers()``),
  and only an unknown commit outcome keeps them (the commit may have landed).

Append partitions are rewritten bin by bin (:func:`compaction.planner.bins_of`) in commit
order, each bin's rows into files of the target size; memory holds one bin. A CDC bucket's runs
are merged in sequence order (partial rows filled, newest change per key), deletes dropped only
when the task says every run of the bucket is an input, otherwise kept with the row-kind column
so a later merge still applies them; memory holds the bucket, as merge-on-read does. The
fold's output is flagged ``resolved`` (it holds one row per key, no delete); a bucket that has
a resolved prefix is folded ignoring its vectors, because a masked tombstone would let an older
replay in a pending run win again (every mark a resolver writes is a row the merge drops).

A resolve task (:mod:`compaction.resolve`) writes no data file, only the vectors of the rows its
pending runs replace (and filled rewrites of partial runs); its commit names every entry of the
bucket again, so it meets the matrix as any compaction does (discarded behind a landed
compaction or update, merges reordered behind it). Its vector file is an output like any other:
deleted on a definite failure, recorded for cleanup when discarded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from catalog import (
    Catalog,
    CatalogUnavailableError,
    CommitConflict,
    CommitOp,
    CommitRejected,
    CommitResult,
    ConflictKind,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    RetryPolicy,
    Table,
    TableMeta,
    TableNotFoundError,
    VersionExpiredError,
)
from catalog.files import (
    WriteOptions,
    read_merged,
    read_whole_files,
    write_data_file,
    write_data_files,
)
from catalog.logs import get_logger
from compaction.errors import CompactionError
from compaction.planner import bins_of
from compaction.resolve import Resolution, resolve_bucket
from compaction.task import CompactionKind, CompactionOutcome, CompactionTask, OutcomeStatus
from compaction.tiers import TierFold, fold_resolved

log = get_logger("lakestream.compaction")

#: A commit that found the table locked past the committer's own retries: the outputs are kept
#: and the same commit tried again a little later, before the task is given up.
BUSY_RETRY = RetryPolicy(attempts=3, base_delay=0.5, max_delay=5.0, deadline=60.0)


class InvalidTaskError(CompactionError, ValueError):
    """A task that cannot be run as it is (a planning bug, never a race): nothing was written."""

    def __init__(self, task: CompactionTask, message: str) -> None:
        super().__init__(f"compaction task for {task.table} {task.partition_desc!r}: {message}")
        self.table = task.table
        self.partition_desc = task.partition_desc


@dataclass(frozen=True)
class _Landing:
    status: OutcomeStatus
    version: int | None
    detail: str = ""


def compact(
    catalog: Catalog,
    task: CompactionTask,
    *,
    options: WriteOptions | None = None,
    retry: RetryPolicy = BUSY_RETRY,
) -> CompactionOutcome:
    """Run one task: skip if task.key() already landed (ALREADY_DONE); read inputs; write outputs
    through catalog.files; commit op COMPACTION at task.base_version with key task.key();
    COMMITTED / DISCARDED (outputs recorded for cleanup) / REPLAN (inputs gone, or the table was
    dropped meanwhile; outputs removed). Raises only for real failures (CatalogError, IO errors).

    ``options`` are the file writer's (compression, fsync, row groups); the target file size is
    always the task's. ``retry`` bounds the attempts at a commit that finds the table busy.

    Raises:
        InvalidTaskError: a task no snapshot could justify (a planning bug); nothing written.
        CommitConflict: the table stayed locked (kind ``busy``) through every attempt of
            ``retry``; the outputs were deleted.
        CommitStateUnknown: the connection died during COMMIT; the outputs are kept (a rerun
            resolves the task's key first).
        CatalogUnavailableError: the catalog database could not be reached.
        OSError: reading inputs or writing outputs failed; the outputs were deleted.
    """
    started = time.monotonic()
    write = replace(options or WriteOptions(), target_file_bytes=task.target_file_size)
    try:
        landing, outputs, resolution = _run(catalog, task, write, retry)
    except Exception as exc:
        _log(task, started, None, error=exc)
        raise
    rows_out = sum(f.row_count for f in outputs)
    bytes_out = sum(f.size_bytes for f in outputs)
    figures: dict[str, int] = {}
    if isinstance(resolution, TierFold):  # its vector file is written too
        bytes_out = resolution.bytes_written if outputs else 0
        rows_out = sum(f.row_count - (f.vector.cardinality if f.vector else 0) for f in outputs)
        figures = {"rows_dropped": resolution.rows_dropped, "tombstones": resolution.tombstones}
    elif resolution is not None:  # a resolve writes vectors: its rows are the inputs' live rows
        rows_out = task.input_rows - resolution.rows_marked
        bytes_out = resolution.bytes_written
        figures = {
            "runs_resolved": resolution.runs_resolved,
            "rows_marked": resolution.rows_marked,
            "vector_bytes": resolution.vector_bytes,
            "index_rows": resolution.index_rows,
            "runs_rewritten": len(resolution.rewritten),
        }
    outcome = CompactionOutcome(
        task=task,
        status=landing.status,
        version=landing.version,
        outputs=outputs,
        rows_in=task.input_rows,
        rows_out=rows_out,
        bytes_in=task.input_bytes,
        bytes_out=bytes_out,
        duration_s=time.monotonic() - started,
        detail=landing.detail,
        figures=figures,
    )
    _log(task, started, outcome)
    return outcome


def _run(
    catalog: Catalog, task: CompactionTask, options: WriteOptions, retry: RetryPolicy
) -> tuple[_Landing, tuple[DataFile, ...], Resolution | TierFold | None]:
    earlier = _landed_before(catalog, task)
    if earlier is not None:
        return earlier, (), None
    table = _live_table(catalog, task)
    if table is None:
        return _Landing(OutcomeStatus.REPLAN, None, "the table was dropped or recreated"), (), None
    missing = _check_inputs(table, task)
    if missing:
        return _Landing(OutcomeStatus.REPLAN, None, missing), (), None
    if task.kind is CompactionKind.RESOLVE:
        return _run_resolve(table, task, options, retry)
    if task.kind is CompactionKind.FOLD_RESOLVED:
        return _run_tier(table, task, options, retry)
    outputs = _write(table.meta, task, options)
    landing = _land(table, task, outputs, retry)
    if landing.status in (OutcomeStatus.COMMITTED, OutcomeStatus.DISCARDED):
        return landing, outputs, None  # live, or recorded for cleanup
    return landing, (), None  # _land deleted them


def _run_resolve(
    table: Table, task: CompactionTask, options: WriteOptions, retry: RetryPolicy
) -> tuple[_Landing, tuple[DataFile, ...], Resolution | None]:
    """Resolve the bucket's pending runs and commit every entry of it again."""
    values, bucket = _partition_values(table.meta, task)
    resolution = resolve_bucket(
        table.meta, task.inputs, partition=values, bucket=bucket, options=options
    )
    if not resolution.changed:
        table.meta.files.discard(resolution.written)
        return _Landing(OutcomeStatus.REPLAN, None, "no pending run"), (), resolution
    ops = [FileOp(action=FileAction.DELETE, file=f) for f in task.inputs]
    ops += [FileOp(action=FileAction.ADD, file=f) for f in resolution.entries]
    landing = _land_ops(table, task, ops, resolution.written, retry)
    rewritten = tuple(resolution.rewritten.values())
    if landing.status in (OutcomeStatus.COMMITTED, OutcomeStatus.DISCARDED):
        return landing, rewritten, resolution
    return landing, (), resolution


def _run_tier(
    table: Table, task: CompactionTask, options: WriteOptions, retry: RetryPolicy
) -> tuple[_Landing, tuple[DataFile, ...], TierFold]:
    """Fold the task's stretch of resolved files into one and commit every entry of the bucket
    again, the output in the stretch's place (:mod:`compaction.tiers`)."""
    meta = table.meta
    values, bucket = _partition_values(meta, task)
    fold = fold_resolved(
        meta,
        task.inputs,
        drop_deletes=task.drop_deletes,
        partition=values,
        bucket=bucket,
        options=options,
    )
    entries = _bucket_files(table, task)
    first = [f.path for f in entries].index(task.inputs[0].path)
    output = fold.outputs
    kept = (*entries[:first], *output, *entries[first + len(task.inputs) :])
    ops = [FileOp(action=FileAction.DELETE, file=f) for f in entries]
    ops += [FileOp(action=FileAction.ADD, file=f) for f in kept]
    landing = _land_ops(table, task, ops, fold.written, retry)
    if landing.status in (OutcomeStatus.COMMITTED, OutcomeStatus.DISCARDED):
        return landing, output, fold
    return landing, (), fold


def _bucket_files(table: Table, task: CompactionTask) -> tuple[DataFile, ...]:
    """Every file of the task's bucket at its base version, in chain order."""
    plan = table.plan(version=task.base_version, partitions=[task.partition_desc])
    return tuple(f for part in plan.partitions for f in part.files)


# ---------------------------------------------------------------------------- before writing


def _landed_before(catalog: Catalog, task: CompactionTask) -> _Landing | None:
    """The outcome of an earlier run of this task whose commit landed (a re-claimed task)."""
    key = task.key()
    if key.is_anonymous:
        return None
    found = catalog.resolve_commit(key.writer_id, key.batch_id)
    if found is None:
        return None
    mine = next((t for t in found.tables if t.table_id == task.table_id), None)
    if mine is None or mine.discarded:
        return _Landing(OutcomeStatus.DISCARDED, None, "an earlier run of this task was discarded")
    return _Landing(OutcomeStatus.ALREADY_DONE, mine.version, f"landed as version {mine.version}")


def _live_table(catalog: Catalog, task: CompactionTask) -> Table | None:
    try:
        table = catalog.load_table(task.table)
    except TableNotFoundError:
        return None
    return table if table.meta.table_id == task.table_id else None


def _check_inputs(table: Table, task: CompactionTask) -> str:
    """Why the task must be replanned ('' if it can run): its inputs are read from the base
    version's snapshot, so a missing one means the task is stale. Raises InvalidTaskError for
    a task no snapshot could justify (see :func:`_check_bucket_inputs`)."""
    if not task.inputs:
        raise InvalidTaskError(task, "a task needs inputs")
    try:
        plan = table.plan(version=task.base_version, partitions=[task.partition_desc])
    except VersionExpiredError as exc:  # planned before an expiry moved the horizon past it
        return str(exc)
    live = [f.path for part in plan.partitions for f in part.files]
    gone = [f.path for f in task.inputs if f.path not in live]
    if gone:
        return (
            f"{len(gone)} input file(s) not in {task.partition_desc!r} at version "
            f"{task.base_version} (first: {gone[0]})"
        )
    if task.kind is CompactionKind.MERGE_BUCKET:
        _check_bucket_inputs(table.meta, task, live)
    elif task.kind is CompactionKind.RESOLVE:
        if not table.meta.is_cdc or [f.path for f in task.inputs] != live:
            raise InvalidTaskError(task, "a resolve names every file of a CDC bucket, in order")
    elif task.kind is CompactionKind.FOLD_RESOLVED:
        _check_stretch(table, task, plan.partitions[0].files)
    elif table.meta.is_cdc:
        raise InvalidTaskError(task, "the runs of a CDC bucket are merged, never bin-packed")
    return ""


def _check_stretch(table: Table, task: CompactionTask, files: Sequence[DataFile]) -> None:
    """A tier's inputs are consecutive files of the bucket's resolved prefix (its output takes
    their place, so the prefix stays one, R1); deletes may be dropped only as
    :func:`compaction.planner.tier_drops_deletes` allows."""
    meta = table.meta
    if not meta.is_cdc:
        raise InvalidTaskError(task, "a resolved-file fold needs a CDC table")
    paths = [f.path for f in files]
    first = paths.index(task.inputs[0].path)
    stretch = files[first : first + len(task.inputs)]
    if [f.path for f in stretch] != [f.path for f in task.inputs]:
        raise InvalidTaskError(task, "a resolved-file fold takes consecutive files of its bucket")
    if not all(f.resolved is True for f in files[: first + len(stretch)]):
        raise InvalidTaskError(task, "a resolved-file fold takes files of the resolved prefix")
    if task.drop_deletes and (first != 0 or meta.sequence_column is not None):
        raise InvalidTaskError(
            task, "tombstones are dropped only from the bucket's oldest files, without sequence"
        )


def _check_bucket_inputs(meta: TableMeta, task: CompactionTask, live: Sequence[str]) -> None:
    """A bucket's merged runs take the place of the newest ones in the snapshot (the commit
    lists kept files first), so the inputs must be every run (then deletes may be dropped) or
    the newest runs in commit order (then deletes are kept)."""
    inputs = [f.path for f in task.inputs]
    if not meta.is_cdc:
        raise InvalidTaskError(task, "a bucket merge needs a CDC table")
    if inputs != list(live[len(live) - len(inputs) :]):
        raise InvalidTaskError(
            task, "bucket inputs must be the newest runs of the bucket, oldest first"
        )
    if task.drop_deletes and len(inputs) != len(live):
        raise InvalidTaskError(
            task, "deletes can only be dropped when every run of the bucket is an input"
        )


# ----------------------------------------------------------------------------------- writing


def _write(meta: TableMeta, task: CompactionTask, options: WriteOptions) -> tuple[DataFile, ...]:
    """The task's output files; on any failure, the ones written so far are deleted."""
    written: list[DataFile] = []
    try:
        if task.kind is CompactionKind.BIN_PACK:
            for group in bins_of(task.inputs, task.target_file_size):
                written += _pack(meta, task, group, options)
        else:
            written += _merge_bucket(meta, task, options)
    except BaseException:
        _remove(meta, written)
        raise
    return tuple(written)


def _partition_values(
    meta: TableMeta, task: CompactionTask
) -> tuple[list[tuple[str, object]], int]:
    values, bucket = meta.spec.parse(task.partition_desc)
    return list(values.items()), -1 if bucket is None else bucket


def _pack(
    meta: TableMeta, task: CompactionTask, files: Sequence[DataFile], options: WriteOptions
) -> list[DataFile]:
    """One bin: its files' rows in commit order, read under the current schema."""
    rows = read_whole_files(meta.files, files, meta.schema, meta.current_schema_id)
    values, bucket = _partition_values(meta, task)
    return write_data_files(
        rows,
        meta.files,
        partition=values,
        bucket=bucket,
        schema_id=meta.current_schema_id,
        field_ids=meta.field_ids,
        options=options,
    )


def _merge_bucket(meta: TableMeta, task: CompactionTask, options: WriteOptions) -> list[DataFile]:
    """The bucket's runs merged into one key-sorted file (none if every key was deleted),
    flagged resolved when it is the whole bucket. A bucket with resolved files is read ignoring
    their vectors (see the module doc): by paths, which carry none."""
    keep_deletes = not task.drop_deletes
    resolved = any(f.resolved for f in task.inputs)
    runs: Sequence[DataFile | str] = [f.path for f in task.inputs] if resolved else task.inputs
    batches = list(
        read_merged(
            meta.files,
            runs,
            meta.schema,
            meta.primary_key,
            sequence_column=meta.sequence_column,
            include_row_kind=keep_deletes,
            ordered=True,
        )
    )
    if not batches or sum(b.num_rows for b in batches) == 0:
        return []
    merged = pa.Table.from_batches(batches)
    values, bucket = _partition_values(meta, task)
    output = write_data_file(
        merged,
        meta.files,
        partition=values,
        bucket=bucket,
        schema_id=meta.current_schema_id,
        field_ids=meta.field_ids,
        sorted_by=meta.primary_key,
        options=options,
    )
    return [output.model_copy(update={"resolved": True}) if task.drop_deletes else output]


def _remove(meta: TableMeta, files: Sequence[DataFile]) -> None:
    meta.files.discard(file.path for file in files)


def _replace_ops(task: CompactionTask, outputs: Sequence[DataFile]) -> list[FileOp]:
    ops = [FileOp(action=FileAction.DELETE, file=f) for f in task.inputs]
    return ops + [FileOp(action=FileAction.ADD, file=f) for f in outputs]


# ---------------------------------------------------------------------------------- landing


def _land(
    table: Table,
    task: CompactionTask,
    outputs: tuple[DataFile, ...],
    retry: RetryPolicy = BUSY_RETRY,
) -> _Landing:
    """Commit the task's inputs replaced by ``outputs``."""
    written = [f.path for f in outputs]
    return _land_ops(table, task, _replace_ops(task, outputs), written, retry)


def _land_ops(
    table: Table,
    task: CompactionTask,
    ops: Sequence[FileOp],
    written: Sequence[str],
    retry: RetryPolicy = BUSY_RETRY,
) -> _Landing:
    """Commit ``ops``; ``written`` are the files this task wrote for them (deleted when the
    commit definitely did not land, recorded for cleanup by the committer when discarded)."""
    commit = PartitionCommit(partition_desc=task.partition_desc, ops=tuple(ops))

    def attempt(_: int) -> CommitResult:
        return table.commit(
            CommitOp.COMPACTION,
            [commit],
            base_version=task.base_version,
            key=task.key(),
            record_progress=False,  # a task is a one-off writer: see CommitRequest
        )

    try:
        result = retry.run(attempt, retry_if=_table_busy)
    except CommitConflict as exc:  # did not land, definitely
        table.meta.files.discard(written)
        if exc.kind is ConflictKind.INPUT_FILES_GONE:
            return _Landing(OutcomeStatus.REPLAN, None, str(exc))
        raise
    except CommitRejected as exc:  # did not land, definitely
        table.meta.files.discard(written)
        if exc.table == task.table and _live_table(table.catalog, task) is None:
            return _Landing(OutcomeStatus.REPLAN, None, "the table was dropped meanwhile")
        raise
    except CatalogUnavailableError:  # did not land, definitely
        table.meta.files.discard(written)
        raise
    # CommitStateUnknown and anything unexpected propagate with the files kept: it may have
    # landed (the key tells later), and deleting a referenced file would lose data.
    mine = next(t for t in result.tables if t.table_id == task.table_id)
    if result.replayed:  # an earlier run landed between our check and our commit
        table.meta.files.discard(written)  # ours did not land, nobody references them
        status = OutcomeStatus.DISCARDED if mine.discarded else OutcomeStatus.ALREADY_DONE
        return _Landing(status, mine.version, "an earlier run of this task landed first")
    if mine.discarded:
        return _Landing(
            OutcomeStatus.DISCARDED,
            None,
            f"a compaction or update of {task.partition_desc!r} landed after version "
            f"{task.base_version}; outputs recorded for cleanup",
        )
    return _Landing(OutcomeStatus.COMMITTED, mine.version)


def _table_busy(error: Exception) -> bool:
    """A compaction never loses to a write (the matrix reorders or discards it), but it can find
    the table locked past the committer's patience: the same commit, same key, tries again."""
    return isinstance(error, CommitConflict) and error.kind is ConflictKind.BUSY


def _log(
    task: CompactionTask,
    started: float,
    outcome: CompactionOutcome | None,
    *,
    error: BaseException | None = None,
) -> None:
    """The one line per task: what went in, what came out, how long, how it ended."""
    fields: dict[str, object] = {
        "table": task.table,
        "partition": task.partition_desc,
        "kind": task.kind.value,
        "task_id": str(task.task_id) if task.task_id else None,
        "base_version": task.base_version,
        "files_in": len(task.inputs),
        "rows_in": task.input_rows,
        "bytes_in": task.input_bytes,
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if outcome is None:
        log.error("compaction_task", outcome="failed", error=repr(error), **fields)
        return
    log.info(
        "compaction_task",
        outcome=outcome.status.value,
        version=outcome.version,
        files_out=len(outcome.outputs),
        rows_out=outcome.rows_out,
        bytes_out=outcome.bytes_out,
        detail=outcome.detail or None,
        **outcome.figures,
        **fields,
    )
