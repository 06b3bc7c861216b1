"""A compaction backlog: ``lakestream compact --engine local`` vs ``--engine spark``.

The first compaction of a table ingested for months without one: ``files`` one-append files of
``rows`` rows spread over ``partitions`` partitions, built the same for every run (identical
tables, one per run: a compaction runs once per table). Timed:

* ``lakestream compact TABLE --engine local`` and ``--engine spark --master local[2]`` as a user
  runs them (a subprocess each: wall time, the Spark one including its JVM's start);
* the Spark engine in this process on a session started beforehand (``spark warm``): the time a
  long-lived driver, or a cluster with its executors up, would see.

Every table must read the same rows afterwards, with one file per partition.

    python -m bench.compact.backlog --files 2000 --partitions 16 --rows 50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import SCHEMA, environment, load_average, payload, progress, quiet_logging
from catalog import DEFAULT_SCHEMA, Catalog, Table
from jobs.compact_spark import ExecutorCatalog, spark_engine
from jobs.table_compact import compact_backlog


def build(catalog: Catalog, name: str, files: int, partitions: int, rows: int) -> Table:
    schema = SCHEMA.append(SCHEMA.field("id").with_name("part").with_type(SCHEMA.field("id").type))
    table = catalog.create_table(name, schema, partition_by=["part"])
    rng = np.random.default_rng(7)
    for i in range(files):
        batch = payload(np.arange(i * rows, (i + 1) * rows), rng, i)
        table.append(batch.append_column("part", [[i % partitions] * rows]))
    return table


def cli(dsn: str, *args: str) -> tuple[float, dict[str, object]]:
    env = {**os.environ, "LAKESTREAM_CATALOG_DSN": dsn, "LAKESTREAM_LOG_LEVEL": "WARNING"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "compact", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - started, json.loads(done.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rows", type=int, default=50)
    args = parser.parse_args(argv)
    quiet_logging()
    from bench.common import bench_server

    with tempfile.TemporaryDirectory() as tmp, bench_server(Path(tmp)) as server:
        env = environment("bench.compact.backlog", argv or sys.argv[1:], server.pg_version)
        cat = server.catalog
        runs = ("local", "spark", "spark_warm")
        tables = {}
        for run in runs:
            progress(f"building bench.{run}: {args.files} files")
            tables[run] = build(cat, f"bench.{run}", args.files, args.partitions, args.rows)
        expected = tables["local"].scan().to_arrow().num_rows
        figures: dict[str, float] = {}
        progress("compact --engine local")
        figures["local"], local = cli(server.dsn, "bench.local", "--engine", "local")
        progress("compact --engine spark --master local[2]")
        figures["spark"], spark = cli(
            server.dsn, "bench.spark", "--engine", "spark", "--master", "local[2]"
        )
        figures["spark_warm"] = warm(cat, server.dsn, tmp)
        for run, table in tables.items():
            table.refresh()
            parts = table.plan().partitions
            assert table.scan().to_arrow().num_rows == expected, run
            assert all(len(p.files) == 1 for p in parts), run
        lines = env.lines(load_average())
        lines += [
            f"- table: {args.files} files x {args.rows} rows in {args.partitions} partitions "
            f"({expected:,} rows); after each run: one file per partition, same rows (checked)",
            f"- `compact --engine local` (CLI wall): {figures['local']:.1f} s "
            f"(report: {local['duration_s']} s)",
            f"- `compact --engine spark --master local[2]` (CLI wall, JVM start included): "
            f"{figures['spark']:.1f} s (report: {spark['duration_s']} s)",
            f"- spark engine on a started local[2] session: {figures['spark_warm']:.1f} s",
        ]
        print("\n".join(lines))
    return 0


def warm(cat: Catalog, dsn: str, warehouse: str) -> float:
    from ingest.spark_session import local_spark
    from jobs.spark_env import spark_host

    spark = local_spark("bench-compact-backlog", host=spark_host())
    spark.sparkContext.parallelize([1, 2], 2).count()  # the first job's start-up cost, untimed
    try:
        target = ExecutorCatalog(dsn, warehouse, DEFAULT_SCHEMA, log_level="WARNING")
        started = time.perf_counter()
        report = compact_backlog(
            cat, ["bench.spark_warm"], spark_engine(spark, target, cat), engine_name="spark"
        )
        assert report.failed == 0
        return time.perf_counter() - started
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
