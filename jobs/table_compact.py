"""``lakestream tables compact`` and ``lakestream compact``: compact tables now and say what it did.

Both plan the same way (:func:`plan_compaction`): ``force=True`` at the table's current version
(every partition with more than one small file, every bucket with more than one run;
``compaction.enabled=false`` is still obeyed), each task with a fresh id so its commit key is
stable. Each task runs the compactor's own routine (:func:`compaction.rewrite.compact`) - in this
process one after another (the ``local`` engine, and ``tables compact``), or as Spark tasks
(:mod:`jobs.compact_spark`). Concurrent writers are never failed by it; a task that loses to
another compaction is reported as discarded. ``tables compact`` stops at the first failed task;
``compact`` runs every task, reports the failed ones and exits 1.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from catalog import Catalog, Table
from catalog.errors import InvalidPartitionError
from catalog.files import WriteOptions
from catalog.planning import PartitionScan
from compaction.planner import plan_table
from compaction.policy import ENABLED, CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionOutcome, CompactionTask, OutcomeStatus
from jobs.compact_engine import FAILED, Engine, TaskResult, local_engine
from jobs.settings import CommandSettings


class UsageError(Exception):
    """The user asked for something this table cannot do (exit code 2)."""


@dataclass(frozen=True)
class CompactReport:
    table: str
    base_version: int
    outcomes: tuple[CompactionOutcome, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "base_version": self.base_version,
            "tasks": [_outcome_json(o) for o in self.outcomes],
        }

    def lines(self) -> list[str]:
        if not self.outcomes:
            return [f"{self.table}: nothing to compact at version {self.base_version}"]
        lines = [f"{self.table}: compacting at version {self.base_version}"]
        for o in self.outcomes:
            where = o.task.partition_desc or "(unpartitioned)"
            version = f", version {o.version}" if o.version is not None else ""
            detail = f" ({o.detail})" if o.detail and o.version is None else ""
            lines.append(
                f"  {where}: files {len(o.task.inputs)} -> {len(o.outputs)}, "
                f"rows {o.rows_in} -> {o.rows_out}, {o.status.value}{version}{detail}"
            )
        return lines


def _outcome_json(o: CompactionOutcome) -> dict[str, Any]:
    return {
        "partition": o.task.partition_desc,
        "kind": o.task.kind.value,
        "outcome": o.status.value,
        "version": o.version,
        "files_in": len(o.task.inputs),
        "files_out": len(o.outputs),
        "rows_in": o.rows_in,
        "rows_out": o.rows_out,
        "bytes_in": o.bytes_in,
        "bytes_out": o.bytes_out,
        "duration_s": round(o.duration_s, 3),
        "detail": o.detail,
    }


def compact_table(
    catalog: Catalog,
    name: str,
    partition: str | None = None,
    *,
    options: WriteOptions | None = None,
) -> CompactReport:
    """Plan (forced) at the current version and run every task here, stopping at the first that
    raises; raises UsageError for a partition the table does not have or a table whose
    compaction is disabled. ``options`` are the file writer's (the benchmarks turn fsync off)."""
    plan = plan_compaction(catalog, name, partition)
    outcomes = tuple(compact(catalog, task, options=options) for task in plan.tasks)
    return CompactReport(plan.table, plan.base_version, outcomes)


@dataclass(frozen=True)
class TablePlan:
    """The tasks of one table at one version; ``skipped`` says why a table has none on purpose."""

    table: str
    base_version: int
    tasks: tuple[CompactionTask, ...]
    skipped: str = ""


def plan_compaction(
    catalog: Catalog, name: str, partition: str | None = None, *, skip_disabled: bool = False
) -> TablePlan:
    """The one planning path of every ``compact`` command: forced, at the current version, each
    task with a fresh id (history shows ``compactor:<task id>``, and a re-run of the same task -
    a Spark retry - is recognised by that key). A table whose compaction is disabled raises
    UsageError, or with ``skip_disabled`` (``--all``) is planned empty and says so."""
    table = catalog.load_table(name)
    policy = CompactionPolicy.from_properties(table.meta.properties, table=table.name)
    plan = table.plan()
    if not policy.enabled:
        why = f"compaction is disabled for {table.name} (table property {ENABLED}=false)"
        if skip_disabled:
            return TablePlan(table.name, plan.table_version, (), skipped=why)
        raise UsageError(why)
    wanted = _wanted(table, plan.partitions, partition)
    tasks = tuple(
        replace(task, task_id=uuid.uuid4())
        for task in plan_table(table.meta, plan, policy, force=True)
        if wanted is None or task.partition_desc in wanted
    )
    return TablePlan(table.name, plan.table_version, tasks)


def _wanted(
    table: Table, partitions: Sequence[PartitionScan], partition: str | None
) -> set[str] | None:
    """The leaf partitions ``--partition`` names: itself, or for a CDC table given only its
    range values, every bucket of them."""
    if partition is None:
        return None
    spec = table.meta.spec
    leaf = partition
    if spec.bucketed and not _names_bucket(partition):  # check its shape with any bucket
        leaf = ",".join(p for p in (partition, "bucket=0000") if p)
    try:
        spec.validate(leaf)
    except InvalidPartitionError as exc:
        raise UsageError(f"--partition {partition!r}: {exc}") from exc
    leaves = {
        p.partition_desc
        for p in partitions
        if p.partition_desc == partition
        or (spec.bucketed and _range_part(p.partition_desc) == partition)
    }
    if not leaves:
        raise UsageError(
            f"{table.name} has no partition {partition!r} with files "
            "(descriptors look like 'region=eu' or 'region=eu,bucket=0003')"
        )
    return leaves


def _names_bucket(desc: str) -> bool:
    return desc.rsplit(",", maxsplit=1)[-1].startswith("bucket=")


def _range_part(desc: str) -> str:
    return ",".join(desc.split(",")[:-1])


# ------------------------------------------------------------------- lakestream compact


class EngineName(StrEnum):
    LOCAL = "local"
    """Every task in this process, one after another."""
    SPARK = "spark"
    """Every task as a Spark task (:mod:`jobs.compact_spark`); needs ``lakestream[spark]``."""


class CompactSettings(CommandSettings):
    """``lakestream compact``: flags, or ``LAKESTREAM_COMPACT__ENGINE`` / ``__MASTER`` /
    ``__SPARK_TASKS``."""

    command: ClassVar[str | None] = "compact"

    engine: EngineName = EngineName.LOCAL
    master: str = "local[2]"
    """The Spark master: ``local[N]``, or a cluster's (``spark://host:7077``)."""
    spark_tasks: int | None = Field(default=None, ge=1)
    """Spark tasks the compaction tasks are grouped into (default: 2 per core Spark offers,
    at most 8 compaction tasks in one)."""


def check_engine(settings: CompactSettings) -> None:
    """Raises ModuleNotFoundError (``pyspark``) for ``--engine spark`` without the Spark extra,
    before the catalog is opened; the command line turns it into one line (exit 2)."""
    if settings.engine is EngineName.SPARK:
        from jobs.compact_spark import require_pyspark

        require_pyspark()


def run_compact(
    catalog: Catalog, settings: CompactSettings, dsn: str, names: Sequence[str] | None
) -> BacklogReport:
    """``lakestream compact``: the backlog of ``names`` (``None``: every table) on the engine
    the settings name. The Spark session is started only once there is work, and stopped."""
    if settings.engine is EngineName.LOCAL:
        return compact_backlog(catalog, names, local_engine(catalog), engine_name="local")
    check_engine(settings)
    from jobs import compact_spark

    target = compact_spark.ExecutorCatalog(
        dsn=dsn,
        warehouse=None if settings.catalog.warehouse is None else str(settings.catalog.warehouse),
        schema=settings.catalog.db_schema,
        log_level=settings.log_level.value,
    )
    session: list[Any] = []

    def on_spark(tasks: Sequence[CompactionTask]) -> list[TaskResult]:
        session.append(compact_spark.spark_session(settings.master))
        run = compact_spark.spark_engine(
            session[0], target, catalog, spark_tasks=settings.spark_tasks
        )
        return run(tasks)

    try:
        return compact_backlog(catalog, names, on_spark, engine_name=f"spark {settings.master}")
    finally:
        for spark in session:
            spark.stop()


def compact_backlog(
    catalog: Catalog, names: Sequence[str] | None, engine: Engine, *, engine_name: str
) -> BacklogReport:
    """Plan every named table (``None``: every live table, skipping those whose compaction is
    disabled), hand all tasks to ``engine`` at once, and report per table."""
    started = time.monotonic()
    every = names is None
    targets = catalog.list_tables() if names is None else names
    plans = tuple(plan_compaction(catalog, name, skip_disabled=every) for name in targets)
    tasks = [task for plan in plans for task in plan.tasks]
    results = engine(tasks) if tasks else []
    return BacklogReport(engine_name, plans, tuple(results), time.monotonic() - started)


@dataclass(frozen=True)
class BacklogReport:
    engine: str
    plans: tuple[TablePlan, ...]
    results: tuple[TaskResult, ...]
    duration_s: float

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if r.status == FAILED)

    def of(self, plan: TablePlan) -> list[TaskResult]:
        ids = {task.task_id for task in plan.tasks}
        return [r for r in self.results if r.task.task_id in ids]

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "duration_s": round(self.duration_s, 3),
            "failed": self.failed,
            "tables": [self._table_json(plan) for plan in self.plans],
        }

    def _table_json(self, plan: TablePlan) -> dict[str, Any]:
        results = self.of(plan)
        tasks = [
            {**_outcome_json(r.outcome), "error": ""} if r.outcome else _failed_json(r)
            for r in results
        ]
        return {
            "table": plan.table,
            "base_version": plan.base_version,
            "skipped": plan.skipped,
            **_totals(results),
            "tasks": tasks,
        }

    def lines(self) -> list[str]:
        tasks = sum(len(p.tasks) for p in self.plans)
        lines = [
            f"compact ({self.engine}): {len(self.plans)} table(s), {tasks} task(s), "
            f"{self.failed} failed, {self.duration_s:.1f}s"
        ]
        for plan in self.plans:
            lines += self._table_lines(plan)
        return lines

    def _table_lines(self, plan: TablePlan) -> list[str]:
        if plan.skipped:
            return [f"{plan.table}: skipped, {plan.skipped}"]
        if not plan.tasks:
            return [f"{plan.table}: nothing to compact at version {plan.base_version}"]
        results = self.of(plan)
        t = _totals(results)
        counts = ", ".join(f"{k} {v}" for k, v in t["outcomes"].items() if v or k in _ALWAYS)
        lines = [
            f"{plan.table} at version {plan.base_version}: {t['tasks']} task(s), files "
            f"{t['files_in']} -> {t['files_out']}, bytes {_size(t['bytes_in'])} -> "
            f"{_size(t['bytes_out'])}, {counts}"
        ]
        for r in results:  # the ones a user must look at
            if r.outcome is None:
                lines.append(f"  {r.task.partition_desc or '(unpartitioned)'}: failed: {r.error}")
            elif r.outcome.status not in (OutcomeStatus.COMMITTED, OutcomeStatus.ALREADY_DONE):
                where = r.task.partition_desc or "(unpartitioned)"
                lines.append(f"  {where}: {r.status} ({r.outcome.detail})")
        return lines


_ALWAYS = (OutcomeStatus.COMMITTED.value, OutcomeStatus.DISCARDED.value, FAILED)


def _totals(results: Sequence[TaskResult]) -> dict[str, Any]:
    done = [r.outcome for r in results if r.outcome is not None]
    outcomes = {s.value: 0 for s in OutcomeStatus} | {FAILED: 0}
    for r in results:
        outcomes[r.status] += 1
    return {
        "tasks": len(results),
        "files_in": sum(len(r.task.inputs) for r in results),
        "files_out": sum(len(o.outputs) for o in done),
        "bytes_in": sum(r.task.input_bytes for r in results),
        "bytes_out": sum(o.bytes_out for o in done),
        "outcomes": outcomes,
    }


def _failed_json(result: TaskResult) -> dict[str, Any]:
    task = result.task
    return {
        "partition": task.partition_desc,
        "kind": task.kind.value,
        "outcome": FAILED,
        "version": None,
        "files_in": len(task.inputs),
        "files_out": 0,
        "rows_in": task.input_rows,
        "rows_out": 0,
        "bytes_in": task.input_bytes,
        "bytes_out": 0,
        "duration_s": None,
        "detail": "",
        "error": result.error,
    }


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
