"""The catalog at scale: many tables, a million-file table, 32 concurrent writers; lakestream
against DuckLake's catalog on the same PostgreSQL server in the same run.

Per system, one after another (never in parallel: the machine has 2 cores), on a fresh
database of one throwaway server (bench.common.bench_server: fsync off, synchronous_commit off,
for both systems): create ``tables`` small partitioned tables; build the big table in commits of
``batch_partitions`` partitions; plan it whole and one partition at a time; then commit one file
per commit from 1 writer, from W writers each on a partition of its own and from W writers all
on one partition, each run on a fresh table of its own. See README.md.

    python -m bench.catalog_scale.run [--quick] [--systems lakestream ducklake] [--markdown F]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg

from bench.catalog_scale import ducklake
from bench.catalog_scale.lakestream import LakestreamSide
from bench.catalog_scale.report import Figures, render
from bench.catalog_scale.sizes import FULL, QUICK, Sizes
from bench.catalog_scale.systems import SYSTEM_NAMES, Mode, Side
from bench.catalog_scale.writers import run_writers
from bench.common import (
    BenchServer,
    bench_server,
    environment,
    load_average,
    progress,
    scratch_dir,
    timed,
)
from bench.common import quiet_logging as quiet_catalog_logging

_DUCKLAKE_DB = "ducklake"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    sizes = _sizes(args)
    quiet_catalog_logging()
    workdir = Path(args.workdir) if args.workdir else None
    with scratch_dir(workdir, keep=workdir is not None, prefix="catalog_scale_") as work:
        with bench_server(work / "warehouse") as server:
            env = environment("bench.catalog_scale.run", argv, server.pg_version)
            figures = [_run_system(name, server, work, sizes) for name in args.systems]
        text = render(env, load_average(), sizes, figures)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (well under a minute)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEM_NAMES, default=list(SYSTEM_NAMES))
    parser.add_argument("--tables", type=int)
    parser.add_argument("--partitions", type=int, help="partitions of lakestream's big table")
    parser.add_argument("--ducklake-partitions", type=int)
    parser.add_argument("--writers", type=int)
    parser.add_argument("--commits-per-writer", type=int)
    parser.add_argument("--markdown", help="also write the report to this file")
    parser.add_argument("--workdir", help="keep the scratch files here")
    return parser


def _sizes(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    overrides = {
        "tables": args.tables,
        "partitions": args.partitions,
        "ducklake_partitions": args.ducklake_partitions,
        "writers": args.writers,
        "commits_per_writer": args.commits_per_writer,
    }
    return dataclasses.replace(sizes, **{k: v for k, v in overrides.items() if v is not None})


def _open_side(name: str, server: BenchServer, work: Path) -> Side:
    if name == "lakestream":
        return LakestreamSide(server.catalog, server.dsn)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {_DUCKLAKE_DB}")
    port = int(server.dsn.rsplit(":", 1)[1].split("/")[0])
    address = ducklake.LakeAddress(port, _DUCKLAKE_DB, str(work / "ducklake_data"))
    return ducklake.DuckLakeSide(address, work / "ducklake_files")


def _run_system(name: str, server: BenchServer, work: Path, sizes: Sizes) -> Figures:
    side = _open_side(name, server, work)
    try:
        return _measure(side, sizes)
    finally:
        side.close()


def _measure(side: Side, sizes: Sizes) -> Figures:
    partitions = sizes.partitions if side.name == "lakestream" else sizes.ducklake_partitions
    figures = Figures(system=side.name, load_at_start=load_average())
    progress(f"{side.name}: {sizes.tables} tables")
    figures.tables_s = timed(side.create_tables, sizes.tables)
    progress(f"{side.name}: big table, {partitions} x {sizes.files_per_partition} files")
    figures.big_files = partitions * sizes.files_per_partition
    figures.big_setup_s = timed(
        side.build_big, partitions, sizes.files_per_partition, sizes.batch_partitions
    )
    progress(f"{side.name}: plans")
    figures.full_plan_s, figures.full_plan_files = _repeat(side.plan_full, sizes.plan_repeats)
    days = [(i * 7919) % partitions for i in range(20)]  # spread over the table
    figures.one_plan_s, figures.one_plan_files = _repeat_each(side.plan_one, days)
    for label, mode, writers, commits in _runs(sizes):
        progress(f"{side.name}: {label}")
        context = side.writer_context(mode, writers, commits)
        result = run_writers(side.name, context, writers, commits)
        figures.runs[label] = result
        figures.in_table[label] = side.committed(context)
    figures.load_at_end = load_average()
    return figures


def _runs(sizes: Sizes) -> list[tuple[str, Mode, int, int]]:
    w = sizes.writers
    return [
        ("1 writer", Mode.DISTINCT, 1, sizes.single_commits),
        (f"{w} writers, distinct partitions", Mode.DISTINCT, w, sizes.commits_per_writer),
        (f"{w} writers, one partition", Mode.ONE, w, sizes.commits_per_writer),
    ]


def _repeat(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    """Median seconds over ``repeats`` calls, and what the last call returned."""
    times, found = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        found = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), found


def _repeat_each(fn: Callable[[int], int], days: Sequence[int]) -> tuple[float, int]:
    fn(days[0])  # warm: the first call pays for connections and caches
    times, found = [], 0
    for day in days:
        start = time.perf_counter()
        found = fn(day)
        times.append(time.perf_counter() - start)
    return statistics.median(times), found


if __name__ == "__main__":
    raise SystemExit(main())
