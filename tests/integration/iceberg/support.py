"""Random histories, and reading the exported Iceberg snapshots as other engines do."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable

from catalog import Catalog, Table
from catalog.iceberg import sql_catalog
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionKind
from jobs.table_compact import compact_table
from tests.fixtures.compaction import plan_tasks
from tests.fixtures.vectors import mark_rows

#: A policy under which the planner resolves pending runs and folds nothing.
RESOLVE_ONLY = CompactionPolicy(max_sorted_runs=100, max_read_amplification=100.0)

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("region", pa.string()), ("total", pa.float64())]
)
REGIONS = ["eu", "us", None]


def rows(rng: random.Random, ids: Iterable[int]) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "region": [rng.choice(REGIONS) for _ in ids],
            "total": [round(rng.uniform(0, 100), 2) for _ in ids],
        },
        schema=SCHEMA,
    )


def random_history(catalog: Catalog, table: Table, rng: random.Random, steps: int) -> None:
    """Appends/upserts, deletes, updates, deletion vectors and compactions in a random order.
    Vectors: rows of an append table marked; on a CDC table, pending buckets resolved by the
    compactor's resolver (their superseded rows and deletes marked, every file ``resolved``)."""
    for _ in range(steps):
        action = rng.choice(["write", "write", "write", "delete", "update", "vector", "compact"])
        if action == "write":
            ids = rng.sample(range(40), rng.randint(1, 6))
            if table.meta.is_cdc:
                table.upsert(rows(rng, ids))
            else:
                table.append(rows(rng, ids))
        elif action == "delete":
            table.delete(where=[("total", "<", rng.uniform(0, 30))])
        elif action == "update":
            table.update(where=[("id", "<", rng.randint(0, 40))], set={"total": 1.5})
        elif action == "vector":
            mark_some(catalog, table, rng)
        else:
            compact_table(catalog, table.name)
    compact_table(catalog, table.name)  # the last version of a CDC table is expressible


def resolve(catalog: Catalog, table: Table) -> int:
    """Resolve every pending CDC bucket with the compactor's resolver; how many were."""
    tasks = [
        t for t in plan_tasks(table, RESOLVE_ONLY, force=False) if t.kind is CompactionKind.RESOLVE
    ]
    for task in tasks:
        compact(catalog, task)
    return len(tasks)


def mark_some(catalog: Catalog, table: Table, rng: random.Random) -> None:
    """Deletion vectors as the resolver (CDC) or a DELETE (append) commits them."""
    if table.meta.is_cdc:
        resolve(catalog, table)
        return
    live = sorted(set(table.scan().to_arrow().column("id").to_pylist()))
    if live:
        mark_rows(table, rng.sample(live, min(len(live), rng.randint(1, 4))))


def multiset(table: pa.Table, columns: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[c] for c in columns) for r in table.select(columns).to_pylist())


def static(metadata_location: str) -> StaticTable:
    return StaticTable.from_metadata(metadata_location)


def snapshot_versions(iceberg: StaticTable) -> dict[int, int]:
    """Iceberg snapshot id -> the lakestream version it shows."""
    return {
        s.snapshot_id: int(s.summary["lakestream.version"] or -1)
        for s in iceberg.snapshots()
        if s.summary is not None
    }


def duckdb_connection() -> Any:
    """DuckDB with the iceberg extension from its PyPI wheel (and the avro one it reads
    manifests with); ImportError when a wheel is missing."""
    from importlib import import_module

    import duckdb

    conn = duckdb.connect()
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        folder = Path(import_module(package).__file__ or "").parent / "extensions"
        for path in sorted(folder.glob("*/*.duckdb_extension")):
            conn.execute(f"LOAD '{path}'")
    return conn


def table_files(location: str) -> set[str]:
    root = Path(location)
    return {str(p) for p in root.rglob("*.parquet")}


@contextmanager
def closing_sql_catalog(dsn: str) -> Iterator[SqlCatalog]:
    """pyiceberg's SQL catalog, its connection pool closed afterwards."""
    registry = sql_catalog(dsn)
    try:
        yield registry
    finally:
        registry.engine.dispose()
