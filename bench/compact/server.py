"""A throwaway catalog whose DSN other processes can reach (the compactor service runs apart).

``bench.common.bench_catalog`` yields the catalog only; the steady-state benchmark must hand the
DSN to the compactor's own process, as a deployment hands it ``LAKESTREAM_CATALOG_DSN``. The
server is the same (``jobs.localpg``: fsync off, synchronous_commit off).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from catalog import Catalog
from jobs.localpg import LocalPostgres

_BENCH_DB = "bench"


@dataclass(frozen=True)
class BenchServer:
    catalog: Catalog
    dsn: str
    warehouse: Path
    pg_version: str


@contextmanager
def bench_server(warehouse: Path) -> Iterator[BenchServer]:
    """A catalog on a fresh local PostgreSQL, its DSN and the server version; all torn down."""
    pg = LocalPostgres.start()
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {_BENCH_DB}")
            row = conn.execute("SHOW server_version").fetchone()
        dsn = pg.dsn(_BENCH_DB)
        catalog = Catalog.connect(dsn, warehouse=warehouse)
        try:
            yield BenchServer(catalog, dsn, warehouse, str(row[0]) if row else "?")
        finally:
            catalog.close()
    finally:
        pg.stop()
