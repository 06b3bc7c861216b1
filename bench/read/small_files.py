"""Full read of an append table of many small files: lakestream vs DuckLake over the same files.

The table is a never-compacted append table: ``--files`` one-append files of ``--rows`` order
rows in ``--partitions`` partitions, built as ``bench.compact.backlog`` builds it. DuckLake, with
its catalog in another database of the same throwaway PostgreSQL server, registers the very same
Parquet files (``ducklake_add_data_files``, one commit), so both read identical bytes and differ
only in how they plan and read them. Writes are not timed; both catalogs run on the one server
(fsync off), so durability is alike.

Timed: ``Table.scan().to_arrow()`` (a fresh plan each time, as a user's read) against DuckLake's
``SELECT * FROM lake.t`` into an Arrow table. Each is read once to warm up (files in the page
cache, DuckDB's extensions loaded), then ``--rounds`` paired rounds, the order alternating
per round. Reported: medians, process CPU (all threads), and the ratio lakestream / DuckLake
as the geometric mean of the per-round ratios with its 95% interval. Both reads must return
the same rows (checked).

    python -m bench.read.small_files [--files 2000] [--partitions 16] [--rows 50] [--rounds 15]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psycopg
import pyarrow as pa
from psycopg.conninfo import conninfo_to_dict

from bench.catalog_scale.ducklake import LAKE, LakeAddress, available
from bench.common import (
    add_output_args,
    bench_server,
    emit_report,
    environment,
    load_average,
    median_ms,
    package_version,
    progress,
    quiet_logging,
    same_rows,
    scratch_dir,
)
from bench.compact.backlog import build
from catalog import Table
from catalog.files.storage import storage_for

#: The goal: lakestream's read at most this many times DuckLake's.
GOAL_RATIO = 1.0
LAKESTREAM, DUCKLAKE = "lakestream", "ducklake"
_DUCKLAKE_DB = "ducklake"
_TABLE = "bench.small"
# t for a 95% interval, by degrees of freedom 1..30 (1.96 beyond)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
_COLUMNS = (
    "id BIGINT NOT NULL, customer VARCHAR, status VARCHAR, amount DOUBLE, quantity INTEGER, "
    "updated_at TIMESTAMPTZ, part BIGINT"
)


@dataclass
class Timings:
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rows", type=int, default=50, help="rows per file")
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds after a warm-up")
    add_output_args(parser)
    return parser.parse_args(argv)


def file_paths(table: Table) -> list[str]:
    """Every live file of the table, as a path DuckLake can open."""
    storage = storage_for(table.meta.files)
    return [storage.path(path) for path in table.plan().manifest.paths]


def ducklake_table(address: LakeAddress, paths: Sequence[str]) -> None:
    """The DuckLake table over ``paths``, partitioned like lakestream's (one commit)."""
    conn = address.connect()
    try:
        conn.execute(f"CREATE TABLE {LAKE}.t ({_COLUMNS})")
        conn.execute(f"ALTER TABLE {LAKE}.t SET PARTITIONED BY (part)")
        conn.execute("BEGIN")
        conn.execute(f"CALL ducklake_add_data_files('{LAKE}', 't', ?)", [list(paths)])
        conn.execute("COMMIT")
    finally:
        conn.close()


def ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """The geometric mean of paired ratios and its 95% interval (t over the log ratios)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    df = len(logs) - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def measure(readers: dict[str, Callable[[], pa.Table]], rounds: int) -> Timings:
    """One warm-up read each, then ``rounds`` pairs, the order alternating per round."""
    timings = Timings()
    for read in readers.values():
        read()
    names = list(readers)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        seconds: dict[str, float] = {}
        for name in order:
            wall, cpu = time.perf_counter(), time.process_time()
            readers[name]()
            seconds[name] = time.perf_counter() - wall
            timings.wall.setdefault(name, []).append(seconds[name])
            timings.cpu.setdefault(name, []).append(time.process_time() - cpu)
        timings.ratios.append(seconds[LAKESTREAM] / seconds[DUCKLAKE])
    return timings


def report(timings: Timings, args: argparse.Namespace, rows: int, lines: list[str]) -> str:
    mean, low, high = ratio_interval(timings.ratios)
    met = high <= GOAL_RATIO
    verdict = "met" if met else ("missed" if low > GOAL_RATIO else "not resolved")
    out = [
        *lines,
        f"- duckdb {package_version('duckdb')}, duckdb-extension-ducklake "
        f"{package_version('duckdb-extension-ducklake')}",
        f"- table: {args.files:,} files x {args.rows} rows in {args.partitions} partitions "
        f"({rows:,} rows), never compacted; DuckLake registers the same files; both reads "
        f"return the same rows (checked)",
        f"- {args.rounds} paired rounds after one warm-up read each, order alternating",
        "",
        "| reader | wall p50 ms | min ms | max ms | CPU p50 ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, label in ((LAKESTREAM, "lakestream `scan().to_arrow()`"), (DUCKLAKE, "DuckLake")):
        wall = timings.wall[name]
        out.append(
            f"| {label} | {median_ms(wall):.0f} | {min(wall) * 1000:.0f} | "
            f"{max(wall) * 1000:.0f} | {median_ms(timings.cpu[name]):.0f} |"
        )
    out += [
        "",
        f"- lakestream / DuckLake: **{mean:.2f}x** (geometric mean of {len(timings.ratios)} "
        f"paired ratios, 95% {low:.2f}-{high:.2f}; median ratio "
        f"{statistics.median(timings.ratios):.2f}x); goal <= {GOAL_RATIO:.1f}x: **{verdict}**",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not available():
        print("DuckLake's wheels are not installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    quiet_logging()
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="bench-small-files-") as work,
        bench_server(work / "warehouse") as server,
    ):
        env = environment("bench.read.small_files", argv or sys.argv[1:], server.pg_version)
        progress(f"building {_TABLE}: {args.files} files")
        table = build(server.catalog, _TABLE, args.files, args.partitions, args.rows)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {_DUCKLAKE_DB}")
        port = int(conninfo_to_dict(server.dsn)["port"] or 0)
        address = LakeAddress(port, _DUCKLAKE_DB, str(work / "ducklake_data"))
        progress("registering the same files with DuckLake")
        ducklake_table(address, file_paths(table))
        lake = address.connect()
        try:
            readers: dict[str, Callable[[], pa.Table]] = {
                LAKESTREAM: lambda: table.scan().to_arrow(),
                DUCKLAKE: lambda: lake.execute(f"SELECT * FROM {LAKE}.t").arrow().read_all(),
            }
            ours, theirs = readers[LAKESTREAM](), readers[DUCKLAKE]()
            rows = args.files * args.rows
            if not (ours.num_rows == theirs.num_rows == rows and same_rows(ours, theirs)):
                raise RuntimeError(f"the reads differ: {ours.num_rows} / {theirs.num_rows} rows")
            progress(f"{args.rounds} paired rounds")
            timings = measure(readers, args.rounds)
        finally:
            lake.close()  # before the server stops: a connection closed after it aborts
        emit_report(report(timings, args, rows, env.lines(load_average())), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
