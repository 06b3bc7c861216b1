"""``lakestream tables compact``: compact one table now, in this process, and say what it did.

It plans with ``force=True`` at the table's current version (every partition with more than one
small file, every bucket with more than one run; ``compaction.enabled=false`` is still obeyed)
and runs each task with the compactor's own routine, one after another. Concurrent writers are
never failed by it; a task that loses to another compaction is reported as discarded.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from catalog import Catalog, Table
from catalog.errors import InvalidPartitionError
from catalog.files import WriteOptions
from catalog.planning import PartitionScan
from compaction.planner import plan_table
from compaction.policy import ENABLED, CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionOutcome


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
    """Plan (forced) at the current version and run every task; raises UsageError for a
    partition the table does not have or a table whose compaction is disabled. ``options``
    are the file writer's (the benchmarks turn fsync off)."""
    table = catalog.load_table(name)
    policy = CompactionPolicy.from_properties(table.meta.properties, table=table.name)
    if not policy.enabled:
        raise UsageError(
            f"compaction is disabled for {table.name} (table property {ENABLED}=false)"
        )
    plan = table.plan()
    wanted = _wanted(table, plan.partitions, partition)
    tasks = [
        replace(task, task_id=uuid.uuid4())  # a stable key: history shows compactor:<task id>
        for task in plan_table(table.meta, plan, policy, force=True)
        if wanted is None or task.partition_desc in wanted
    ]
    outcomes = tuple(compact(catalog, task, options=options) for task in tasks)
    return CompactReport(table.name, plan.table_version, outcomes)


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
