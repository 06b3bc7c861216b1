"""How long one commit holds its table's head lock, and so how many commits one table can take.

A commit's table lock is held only while ``publish_commit()`` runs in the server (see
``catalog/committer.py``), so that function's mean run time bounds one table's commit rate from
above whatever the number of writers or cores. PostgreSQL times it with ``track_functions``.
One writer commits ``--commits`` one-file appends (after a warm-up on another connection, so
plan compilation is not counted); the report gives the writer's rate, the function's mean time
and the table's ceiling as a multiple of the writer's rate. fsync off (``jobs.localpg``).

    python -m bench.catalog_scale.lock_hold --commits 2000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg

from bench.catalog_scale.lakestream import SCHEMA, partition_commit
from bench.catalog_scale.sizes import PARTITION_COLUMN
from bench.common import bench_server
from catalog import Catalog, CommitOp, IdempotencyKey, Table

_TABLE = "scale.lock_hold"
_WARM_UP = 200
_PARTITIONS = 40


def _commit_many(table: Table, writer: str, count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        part = partition_commit(table, i % _PARTITIONS, [f"{writer}-{i}.parquet"])
        table.commit(CommitOp.APPEND, [part], key=IdempotencyKey(writer_id=writer, batch_id=i))
    return time.perf_counter() - start


def _function_times(dsn: str) -> tuple[int, float]:
    """Calls of publish_commit and their mean time in ms, once the statistics are flushed."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        for _ in range(50):
            row = admin.execute(
                "SELECT calls, total_time FROM pg_stat_user_functions "
                "WHERE funcname = 'publish_commit'"
            ).fetchone()
            if row is not None and row[0] > 0:
                return int(row[0]), float(row[1]) / int(row[0])
            time.sleep(0.2)
    raise RuntimeError("PostgreSQL reported no publish_commit calls")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, bench_server(Path(scratch)) as server:
        server.catalog.create_table(_TABLE, SCHEMA, partition_by=[PARTITION_COLUMN])
        _commit_many(server.catalog.load_table(_TABLE), "warm-up", _WARM_UP)
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET track_functions = 'pl'")
            admin.execute("SELECT pg_reload_conf()")
        with Catalog.connect(server.dsn, warehouse=Path(scratch), create=False) as catalog:
            with psycopg.connect(server.dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_stat_reset()")
            wall = _commit_many(catalog.load_table(_TABLE), "measured", args.commits)
        calls, mean_ms = _function_times(server.dsn)
    rate = args.commits / wall
    ceiling = 1000 / mean_ms
    print(f"1 writer: {args.commits} commits in {wall:.2f} s = {rate:.0f} commits/s")
    print(f"publish_commit: {calls} calls, mean {mean_ms:.3f} ms (the table lock's hold)")
    print(f"one table's ceiling: ~{ceiling:,.0f} commits/s = {ceiling / rate:.1f}x one writer")


if __name__ == "__main__":
    main()
