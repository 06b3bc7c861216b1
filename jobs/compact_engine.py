"""How a planned compaction task runs on an engine, and what became of it: the types and the
local engine that ``lakestream compact`` (:mod:`jobs.table_compact`) and its Spark engine
(:mod:`jobs.compact_spark`) share. A leaf, so that neither of the two imports the other."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from catalog import Catalog
from catalog.files import WriteOptions
from compaction.rewrite import compact
from compaction.task import CompactionOutcome, CompactionTask

__all__ = ["FAILED", "Engine", "TaskResult", "describe_failure", "local_engine", "run_task"]

FAILED = "failed"


@dataclass(frozen=True)
class TaskResult:
    """What became of one task on whichever engine ran it: its outcome, or the one-line error
    of a task that raised (the other tasks still run)."""

    task: CompactionTask
    outcome: CompactionOutcome | None = None
    error: str = ""

    @property
    def status(self) -> str:
        return FAILED if self.outcome is None else self.outcome.status.value


#: Runs planned tasks and returns one result per task, in any order.
Engine = Callable[[Sequence[CompactionTask]], list[TaskResult]]


def run_task(
    catalog: Catalog,
    task: CompactionTask,
    *,
    options: WriteOptions | None = None,
    secrets: Sequence[str] = (),
) -> TaskResult:
    """One task through the compactor's routine; a failure becomes the task's result (with
    ``secrets`` masked in its message) so that one bad partition does not stop a backlog."""
    try:
        return TaskResult(task, compact(catalog, task, options=options))
    except Exception as exc:
        return TaskResult(task, None, describe_failure(exc, secrets))


def describe_failure(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """One line naming the error, with ``secrets`` (a DSN's password) masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in secrets:
        text = text.replace(secret, "***")
    return f"{type(exc).__name__}: {text}"


def local_engine(catalog: Catalog, options: WriteOptions | None = None) -> Engine:
    """The tasks one after another in this process (``--engine local``)."""

    def run(tasks: Sequence[CompactionTask]) -> list[TaskResult]:
        return [run_task(catalog, task, options=options) for task in tasks]

    return run
