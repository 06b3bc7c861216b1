"""Iceberg metadata over lakestream tables: DuckDB's ``iceberg_scan`` against our own scan of the
same version, and the exporter's lag behind a stream of commits (issue 51).

**Scan** (``--rows`` rows in ``--appends`` batches, 3 columns):

* *append*: an append table partitioned by region (3 partitions), then a DELETE of
  ``--marked`` of its rows, which marks them with deletion vectors (exported as position
  deletes, which DuckDB must apply);
* *cdc*: a CDC table (4 hash buckets, ``--appends`` upserts, the later ones updating earlier
  keys), compacted (one file per bucket) - the state a CDC table's Iceberg snapshot shows.

Each is exported, then read at that version by ``Table.scan(version=v).to_arrow()`` and by
DuckDB's ``iceberg_scan(<metadata>, snapshot_from_id=<its snapshot>)`` into Arrow, in full and
with a filter (``total < 10``, about 10% of the rows). One warm-up read each, then ``--rounds``
paired rounds, order alternating; the ratio DuckDB / ours is the geometric mean of the paired
ratios with its 95% interval. Both reads must return the same rows (checked). Goal: <= 1.2x.

**Lag**: an append every ``--interval`` seconds for ``--seconds`` seconds (one writer thread,
``--batch`` rows each), and an exporter thread calling ``export_table`` in a loop, as the
compactor's maintenance or ``lakestream tables iceberg`` in a loop would. For each committed
version: the seconds from its commit until an export that shows it returned; for each export:
how many versions it was behind when it returned. Reported as p50/p95.

    python -m bench.iceberg.run [--rows 1000000] [--appends 10] [--rounds 11] [--seconds 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import (
    add_output_args,
    bench_server,
    emit_report,
    environment,
    load_average,
    median_ms,
    package_version,
    percentile_ms,
    progress,
    quiet_logging,
    scratch_dir,
)
from bench.read.small_files import ratio_interval
from catalog import Catalog, Table
from catalog.iceberg import export_table
from jobs.table_compact import compact_table

GOAL_RATIO = 1.2
OURS, DUCKDB = "lakestream", "duckdb"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("region", pa.string()), ("total", pa.float64())]
)
REGIONS = np.array(["eu", "us", "apac"])
FILTER_SQL, FILTER_OURS = "total < 10", [("total", "<", 10.0)]


def batch(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "region": REGIONS[rng.integers(0, len(REGIONS), len(ids))],
            "total": np.round(rng.uniform(0, 100, len(ids)), 2),
        },
        schema=SCHEMA,
    )


def duckdb_connection() -> Any:
    """DuckDB with the iceberg and avro extensions from their PyPI wheels."""
    import duckdb

    conn = duckdb.connect()
    for package in ("duckdb_extension_avro", "duckdb_extension_iceberg"):
        folder = Path(import_module(package).__file__ or "").parent / "extensions"
        for path in sorted(folder.glob("*/*.duckdb_extension")):
            conn.execute(f"LOAD '{path}'")
    return conn


def append_table(catalog: Catalog, args: argparse.Namespace) -> Table:
    rng = np.random.default_rng(1)
    table = catalog.create_table("bench.events", SCHEMA, partition_by=["region"])
    per = args.rows // args.appends
    for i in range(args.appends):
        table.append(batch(rng, np.arange(i * per, (i + 1) * per)))
    marked = rng.choice(args.rows, args.marked, replace=False)
    table.delete(where=[("id", "in", marked.tolist())])  # marks them: deletion vectors
    assert any(f.vector is not None for f in table.plan().files)
    return table


def cdc_table(catalog: Catalog, args: argparse.Namespace) -> Table:
    rng = np.random.default_rng(2)
    table = catalog.create_table(
        "bench.orders", SCHEMA, primary_key=["id"], hash_buckets=4, partition_by=["region"]
    )
    per = args.rows // args.appends
    table.upsert(batch(rng, np.arange(per)))
    for _ in range(1, args.appends):
        table.upsert(batch(rng, rng.choice(args.rows, per, replace=False)))
    compact_table(catalog, table.name)
    return table


@dataclass
class Timings:
    wall: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)


def measure(readers: dict[str, Callable[[], pa.Table]], rounds: int) -> Timings:
    timings = Timings()
    first = {name: read() for name, read in readers.items()}
    ours, theirs = first[OURS], first[DUCKDB]
    if not ours.sort_by("id").equals(theirs.cast(ours.schema).sort_by("id")):
        raise RuntimeError(f"the reads differ: {ours.num_rows} / {theirs.num_rows} rows")
    names = list(readers)
    for r in range(rounds):
        seconds: dict[str, float] = {}
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            readers[name]()
            seconds[name] = time.perf_counter() - start
            timings.wall.setdefault(name, []).append(seconds[name])
        timings.ratios.append(seconds[DUCKDB] / seconds[OURS])
    return timings


def scan_cases(table: Table, conn: Any, rounds: int) -> dict[bool, tuple[Timings, int]]:
    """Full (False) and filtered (True) reads of the version the export shows."""
    report = export_table(table)
    assert report.lag_versions == 0, report
    snapshot_id = report.snapshot_ids[report.version]
    return {
        filtered: scan_case(
            table, conn, rounds, filtered=filtered, version=report.version, source=iceberg_scan
        )
        for filtered in (False, True)
        for iceberg_scan in [
            f"iceberg_scan('{report.metadata_location}', snapshot_from_id={snapshot_id})"
        ]
    }


def scan_case(
    table: Table, conn: Any, rounds: int, *, filtered: bool, version: int, source: str
) -> tuple[Timings, int]:
    where = f" WHERE {FILTER_SQL}" if filtered else ""
    query = f"SELECT id, region, total FROM {source}{where}"
    readers: dict[str, Callable[[], pa.Table]] = {
        OURS: lambda: table.scan(
            version=version, filter=FILTER_OURS if filtered else None
        ).to_arrow(),
        DUCKDB: lambda: conn.execute(query).arrow().read_all(),
    }
    timings = measure(readers, rounds)
    return timings, readers[OURS]().num_rows


@dataclass
class Lag:
    seconds: list[float] = field(default_factory=list)
    versions_behind: list[int] = field(default_factory=list)
    commits: int = 0
    exports: int = 0


def lag_run(catalog: Catalog, dsn: str, warehouse: Path, args: argparse.Namespace) -> Lag:
    """A writer thread appends every ``--interval`` s; an exporter thread exports in a loop."""
    table = catalog.create_table("bench.stream", SCHEMA)
    committed: dict[int, float] = {}
    stop = threading.Event()
    lag = Lag()

    def write() -> None:
        rng = np.random.default_rng(3)
        next_at = time.monotonic()
        n = 0
        while not stop.is_set():
            result = table.append(batch(rng, np.arange(n, n + args.batch)))
            version = result.version_of(str(table.meta.name))
            assert version is not None
            committed[version] = time.monotonic()
            n += args.batch
            next_at += args.interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def export() -> None:
        with Catalog.connect(dsn, warehouse=warehouse) as own:
            mine = own.load_table(str(table.meta.name))
            shown = 0
            while not stop.is_set():
                report = export_table(mine)
                done = time.monotonic()
                lag.exports += 1
                lag.versions_behind.append(mine.current_version() - report.version)
                for version in range(shown + 1, report.version + 1):
                    if version in committed:
                        lag.seconds.append(done - committed[version])
                shown = report.version

    threads = [threading.Thread(target=write), threading.Thread(target=export)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    lag.commits = len(committed)
    return lag


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--appends", type=int, default=10, help="batches the table is written in")
    parser.add_argument("--marked", type=int, default=10_000, help="rows deleted by vectors")
    parser.add_argument("--rounds", type=int, default=11, help="paired rounds after a warm-up")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the lag run")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between commits")
    parser.add_argument("--batch", type=int, default=1_000, help="rows per streamed commit")
    add_output_args(parser)
    return parser.parse_args(argv)


def scan_lines(results: dict[str, tuple[Timings, int]]) -> list[str]:
    out = [
        "| table, read | rows | lakestream p50 ms | DuckDB p50 ms | DuckDB / lakestream (95%) "
        "| goal <= 1.2x |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for case, (timings, rows) in results.items():
        mean, low, high = ratio_interval(timings.ratios)
        verdict = (
            "met" if high <= GOAL_RATIO else ("missed" if low > GOAL_RATIO else "not resolved")
        )
        out.append(
            f"| {case} | {rows:,} | {median_ms(timings.wall[OURS]):.0f} | "
            f"{median_ms(timings.wall[DUCKDB]):.0f} | **{mean:.2f}x** ({low:.2f}-{high:.2f}) "
            f"| {verdict} |"
        )
    return out


def lag_lines(lag: Lag, args: argparse.Namespace) -> list[str]:
    behind = [float(v) for v in lag.versions_behind]
    return [
        f"- lag run: {lag.commits} appends of {args.batch:,} rows every {args.interval} s for "
        f"{args.seconds:.0f} s, {lag.exports} exports in a loop beside them",
        f"- seconds from a commit to the end of the export that shows it: "
        f"p50 **{percentile_ms(lag.seconds, 50) / 1000:.2f} s**, "
        f"p95 **{percentile_ms(lag.seconds, 95) / 1000:.2f} s** (max "
        f"{max(lag.seconds, default=float('nan')):.2f} s)",
        f"- versions behind the latest when an export returned: p50 "
        f"**{statistics.median(behind) if behind else float('nan'):.0f}**, p95 "
        f"**{float(np.percentile(behind, 95)) if behind else float('nan'):.0f}**",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="bench-iceberg-") as work,
        bench_server(work / "warehouse") as server,
    ):
        env = environment("bench.iceberg.run", argv or sys.argv[1:], server.pg_version)
        conn = duckdb_connection()
        results: dict[str, tuple[Timings, int]] = {}
        progress("append table + vectors")
        events = append_table(server.catalog, args)
        for filtered, result in scan_cases(events, conn, args.rounds).items():
            results[f"append + vectors, {'filtered' if filtered else 'full'}"] = result
        progress("cdc table, compacted")
        orders = cdc_table(server.catalog, args)
        for filtered, result in scan_cases(orders, conn, args.rounds).items():
            results[f"cdc compacted, {'filtered' if filtered else 'full'}"] = result
        progress("lag run")
        lag = lag_run(server.catalog, server.dsn, server.warehouse, args)
        lines = [
            *env.lines(load_average()),
            f"- duckdb {package_version('duckdb')}, duckdb-extension-iceberg "
            f"{package_version('duckdb-extension-iceberg')}, pyiceberg "
            f"{package_version('pyiceberg')}",
            f"- tables: {args.rows:,} rows in {args.appends} batches; append: {args.marked:,} "
            "rows marked by vectors (position deletes); cdc: 4 buckets x 3 regions, compacted",
            f"- {args.rounds} paired rounds after one warm-up read each, order alternating; "
            "the reads return the same rows (checked)",
            "",
            *scan_lines(results),
            "",
            *lag_lines(lag, args),
        ]
        emit_report("\n".join(lines), args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
