"""Helpers of the maintenance tests: catalog row counts and plans compared file by file."""

from __future__ import annotations

from typing import Any

from catalog import Catalog, Table

COUNTED = (
    "table_version",
    "partition_info",
    "data_commit_info",
    "commit_key",
    "table_partition",
    "cleanup_file",
    "writer_progress",
)


def row_counts(catalog: Catalog) -> dict[str, int]:
    """Rows of every catalog table maintenance touches (the whole database: one test each)."""
    counts = {}
    for name in COUNTED:
        rows = catalog.store.fetch_all(f"SELECT count(*) AS n FROM {name}", {})
        counts[name] = int(rows[0]["n"])
    return counts


def plan_files(table: Table, version: int) -> list[tuple[str, tuple[str, ...], bool]]:
    """Per partition of a version: its files in commit order and whether it is merged on read."""
    return [
        (p.partition_desc, tuple(f.path for f in p.files), p.merge)
        for p in table.plan(version=version).partitions
    ]


def snapshot_everything(table: Table) -> dict[int, Any]:
    return {v: plan_files(table, v) for v in range(table.current_version() + 1)}
