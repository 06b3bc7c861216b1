"""Helpers of the compaction tests: reads at every version, tasks with ids, files on disk."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from catalog import Catalog, Table
from compaction.planner import plan_table
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionOutcome, CompactionTask


def rows_at(table: Table, version: int | None = None) -> list[tuple[Any, ...]]:
    """Every row of a version, as sorted tuples (append tables keep no row order)."""
    data = table.scan(version=version).to_arrow()
    return sorted((tuple(r.values()) for r in data.to_pylist()), key=_nulls_first)


def _nulls_first(row: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is not None, v if v is not None else 0) for v in row)


def every_version(table: Table) -> dict[int, list[tuple[Any, ...]]]:
    return {v: rows_at(table, v) for v in range(table.current_version() + 1)}


def plan_tasks(
    table: Table, policy: CompactionPolicy | None = None, *, force: bool = True
) -> list[CompactionTask]:
    """Tasks at the current version, each with an id (so its commit key is stable)."""
    table.refresh()
    policy = policy or CompactionPolicy.from_properties(table.meta.properties)
    tasks = plan_table(table.meta, table.plan(), policy, force=force)
    return [replace(t, task_id=uuid.uuid4()) for t in tasks]


def compact_all(
    catalog: Catalog, table: Table, policy: CompactionPolicy | None = None
) -> list[CompactionOutcome]:
    return [compact(catalog, task) for task in plan_tasks(table, policy)]


def files_on_disk(table: Table) -> set[str]:
    """Relative paths of every file under the table location (temporary ones included)."""
    root = Path(table.meta.location)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def leftover_paths(catalog: Catalog) -> set[str]:
    import datetime as dt

    return {p for left in catalog.leftovers(older_than=dt.timedelta(0)) for p in left.paths}
