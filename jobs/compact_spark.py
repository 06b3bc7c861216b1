"""``lakestream compact --engine spark``: a backlog of compaction tasks run as Spark tasks.

The shape of Paimon's Spark compact procedure - plan on the driver, rewrite on the executors -
with one difference on purpose: there is no single commit on the driver. Each executor runs the
compactor's own routine (:func:`jobs.compact_engine.run_task` around
:func:`compaction.rewrite.compact`): rewrite, then its own ``compaction`` commit under the task's
idempotency key, exactly what a ``lakestream compactor worker`` does. Why: a backlog's tasks are
independent partitions, so one commit would gain nothing but make the job all-or-nothing over
thousands of partitions, and a race with one streaming writer's compaction would discard all of
it; per-task commits keep the conflict matrix's per-partition answers (reorder after a
concurrent append, discard after a concurrent compaction) and make every finished task stick.

Retries: task ids are set on the driver before the tasks are shipped, so Spark's re-run of a
task (executor lost, or a speculative copy) carries the same commit key. A re-run after the
first attempt landed finds the key and writes nothing (``already-done``); two attempts at once
are serialised by the committer's head lock, and the second sees its key replayed and deletes
its own outputs. No task is ever committed twice.
A job that fails as a whole (local mode never retries a task;
a cluster gives up after ``spark.task.maxFailures``) loses every task's report, so the driver
asks the catalog, task by task, whether its key landed: the report stays true, and running the
command again plans only what is left.

Grouping: tasks are dealt largest first (by input bytes) to the lightest of at most
``spark_tasks`` groups, one group per Spark task, so a backlog of thousands of small tasks pays
one Python worker round trip and one catalog connection per group, not per task, while the
groups stay even. A failed task does not fail its group: its error is its result.

The executors open their own catalog from :class:`ExecutorCatalog`, which carries the DSN: never
shown by its repr, never logged, and masked in any error a task reports. pyspark is imported
only here and in :mod:`ingest.spark_session`: ``compaction/`` stays engine-free.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from catalog import Catalog
from catalog.store import StoreSettings
from compaction.task import CompactionOutcome, CompactionTask, OutcomeStatus
from ingest.logs import configure_worker_logging
from jobs.compact_engine import Engine, TaskResult, describe_failure, run_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Connections an executor's catalog holds: a task uses one at a time.
EXECUTOR_POOL_SIZE = 2
#: Groups per core Spark offers, when ``spark_tasks`` is not given: enough to even out
#: tasks of different sizes, few enough that each group amortises its connection.
GROUPS_PER_CORE = 2
#: ...and at most this many compaction tasks in a group, so that a big backlog spreads over a
#: cluster's executors even when ``spark.default.parallelism`` is set low (as in local mode).
MAX_TASKS_PER_GROUP = 8


def require_pyspark() -> None:
    """Raises ModuleNotFoundError (named ``pyspark``) before anything is planned; the command
    line turns it into one line saying to install ``lakestream[spark]``."""
    import pyspark  # noqa: F401


@dataclass(frozen=True)
class ExecutorCatalog:
    """How an executor opens the catalog: shipped with the tasks, so it must pickle."""

    dsn: str = field(repr=False)
    warehouse: str | None
    schema: str
    log_level: str = "INFO"

    def connect(self) -> Catalog:
        return Catalog.connect(
            self.dsn,
            warehouse=self.warehouse,
            schema=self.schema,
            settings=StoreSettings(pool_size=EXECUTOR_POOL_SIZE, schema=self.schema),
            create=False,
        )

    def secrets(self) -> list[str]:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(self.dsn).get("password")
        return [str(password)] if password else []


def spark_session(master: str, app_name: str = "lakestream-compact") -> SparkSession:
    """The session the command runs on: ``local[N]`` here, or a cluster's master URL."""
    from ingest.spark_session import local_spark
    from jobs.spark_env import spark_host

    return local_spark(app_name, {"spark.master": master}, host=spark_host())


def spark_engine(
    spark: SparkSession,
    target: ExecutorCatalog,
    catalog: Catalog,
    *,
    spark_tasks: int | None = None,
) -> Engine:
    """Runs tasks on ``spark``'s executors, one group of tasks per Spark task. ``catalog`` is
    the driver's: it tells what landed when the Spark job fails as a whole."""

    def run(tasks: Sequence[CompactionTask]) -> list[TaskResult]:
        sc = spark.sparkContext
        wanted = spark_tasks or default_groups(len(tasks), sc.defaultParallelism)
        groups = group_tasks(tasks, wanted)
        sc.setJobDescription(f"lakestream compact: {len(tasks)} task(s) in {len(groups)} group(s)")
        work = sc.parallelize(groups, len(groups)).mapPartitions(partial(run_groups, target))
        try:
            results: list[TaskResult] = work.collect()
        except Exception as exc:  # the job failed past Spark's retries: every report is lost
            reason = f"the Spark job failed: {_first_line(exc, target.secrets())}"
            return [resolve_lost(catalog, task, reason) for task in tasks]
        return results

    return run


def resolve_lost(catalog: Catalog, task: CompactionTask, reason: str) -> TaskResult:
    """A task whose report died with its Spark job: by its commit key, it landed (then its
    version is known; its outputs' figures are not) or it is failed with ``reason``."""
    key = task.key()
    found = catalog.resolve_commit(key.writer_id, key.batch_id)
    mine = (
        None
        if found is None
        else next((t for t in found.tables if t.table_id == task.table_id), None)
    )
    if mine is None:
        return TaskResult(task, None, reason)
    landed = CompactionOutcome(
        task=task,
        status=OutcomeStatus.DISCARDED if mine.discarded else OutcomeStatus.ALREADY_DONE,
        version=None if mine.discarded else mine.version,
        outputs=(),
        rows_in=task.input_rows,
        rows_out=0,
        bytes_in=task.input_bytes,
        bytes_out=0,
        duration_s=0.0,
        detail="landed before the Spark job failed; its figures were lost with the job",
    )
    return TaskResult(task, landed)


def _first_line(exc: BaseException, secrets: Sequence[str]) -> str:
    """Spark's job failure is a page of JVM stack; its first line says what happened."""
    line = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    for secret in secrets:
        line = line.replace(secret, "***")
    return line[:300]


def default_groups(tasks: int, cores: int) -> int:
    """How many Spark tasks a backlog of ``tasks`` becomes when the user does not say."""
    return max(GROUPS_PER_CORE * cores, -(-tasks // MAX_TASKS_PER_GROUP))


def group_tasks(tasks: Sequence[CompactionTask], groups: int) -> list[list[CompactionTask]]:
    """At most ``groups`` non-empty groups of about equal input bytes (largest task first to
    the lightest group); every task in exactly one group."""
    count = max(1, min(groups, len(tasks)))
    bins: list[list[CompactionTask]] = [[] for _ in range(count)]
    loads = [(0, index) for index in range(count)]
    for task in sorted(tasks, key=lambda t: t.input_bytes, reverse=True):
        load, index = heapq.heappop(loads)
        bins[index].append(task)
        heapq.heappush(loads, (load + max(task.input_bytes, 1), index))
    return [group for group in bins if group]


def run_groups(
    target: ExecutorCatalog, groups: Iterable[list[CompactionTask]]
) -> Iterator[TaskResult]:
    """On an executor: every task of the Spark task's groups, through one catalog connection.
    A catalog that cannot be opened fails each task with that reason (masked)."""
    configure_worker_logging(target.log_level)
    secrets = target.secrets()
    tasks = [task for group in groups for task in group]
    try:
        catalog = target.connect()
    except Exception as exc:
        reason = describe_failure(exc, secrets)
        yield from (TaskResult(task, None, reason) for task in tasks)
        return
    with catalog:
        for task in tasks:
            yield run_task(catalog, task, secrets=secrets)
