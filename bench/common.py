"""Shared pieces of the benchmarks: the workload, a throwaway catalog, timing, figures, and the
harness every run repeats (its scratch folder and report, phase clocks, writer processes).

The upsert and read benchmarks run lakestream and deltalake on the *same* generated change
batches, so the systems differ only in how they store and merge them. Run the benchmarks as
modules from the repository root (``python -m bench.upsert.run``) so that this module imports as
``bench.common``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import multiprocessing as mp
import os
import platform
import queue as queue_module
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import psycopg
import pyarrow as pa
from deltalake import DeltaTable

from bench.machine import cpu_model, git_head, ram_gib
from catalog import Catalog
from jobs.localpg import LocalPostgres

#: A realistic order row: a key, two strings, a float, an int and a timestamp.
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("status", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("quantity", pa.int32()),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    ]
)
PRIMARY_KEY = ["id"]
_STATUSES = np.array(["new", "paid", "shipped", "delivered", "returned", "cancelled"])
_EPOCH_US = 1_700_000_000_000_000
_BENCH_DB = "bench"

P = ParamSpec("P")
T = TypeVar("T")


def quiet_logging() -> None:
    """Drop the catalog's one-info-line-per-commit: printing it would be timed with the commit."""
    logging.getLogger("lakestream").setLevel(logging.WARNING)


# ------------------------------------------------------------------------------- workload


def payload(keys: np.ndarray, rng: np.random.Generator, batch: int) -> pa.Table:
    """Rows for ``keys`` with random values; ``updated_at`` grows with the batch number."""
    n = len(keys)
    customers = np.char.add("customer-", rng.integers(0, 10**7, n).astype(str))
    stamps = _EPOCH_US + batch * 1_000_000 + np.arange(n)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "customer": pa.array(customers),
            "status": pa.array(_STATUSES[rng.integers(0, len(_STATUSES), n)]),
            "amount": pa.array(np.round(rng.random(n) * 1000, 2)),
            "quantity": pa.array(rng.integers(1, 100, n, dtype=np.int32)),
            "updated_at": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        },
        schema=SCHEMA,
    )


def change_batches(batches: int, rows: int, update_share: float, seed: int = 42) -> list[pa.Table]:
    """``batches`` upsert batches of ``rows`` distinct keys each.

    The first batch inserts only (nothing exists yet); in every later one ``update_share`` of
    the rows update keys drawn uniformly from all keys inserted before (a realistic CDC stream
    touches old rows too, which is what makes copy-on-write merges expensive), the rest insert
    new keys. Keys are distinct within a batch, as a MERGE source must be. Rows come shuffled,
    as they would from a topic.
    """
    rng = np.random.default_rng(seed)
    out = []
    next_key = 0
    for batch in range(batches):
        updates = 0 if batch == 0 else min(int(rows * update_share), next_key)
        old = rng.choice(next_key, updates, replace=False) if updates else np.zeros(0, np.int64)
        new = np.arange(next_key, next_key + rows - updates)
        next_key += rows - updates
        keys = rng.permutation(np.concatenate([old, new]).astype(np.int64))
        out.append(payload(keys, rng, batch))
    return out


def expected_final(batches: Sequence[pa.Table]) -> int:
    """Distinct keys after applying every batch (the row count both systems must end with)."""
    return len(np.unique(np.concatenate([b.column("id").to_numpy() for b in batches])))


# ------------------------------------------------------------------------------- delta-rs


def delta_create(path: Path) -> DeltaTable:
    """An empty Delta table of :data:`SCHEMA` (default settings: checkpoint every 100 commits)."""
    return DeltaTable.create(str(path), SCHEMA)


def delta_upsert(table: DeltaTable, batch: pa.Table) -> None:
    """One MERGE, the way delta-rs documents an upsert; the handle follows the new version."""
    (
        table.merge(batch, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def same_rows(left: pa.Table, right: pa.Table) -> bool:
    """Whether two results hold the same rows (order and string/timestamp flavours aside)."""
    a = left.select(SCHEMA.names).cast(SCHEMA).sort_by("id")
    b = right.select(SCHEMA.names).cast(SCHEMA).sort_by("id")
    return bool(a.equals(b))


# ------------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class BenchServer:
    catalog: Catalog
    dsn: str
    """For processes of their own (the compactor service), as a deployment hands them
    ``LAKESTREAM_CATALOG_DSN``."""
    warehouse: Path
    pg_version: str


@contextmanager
def bench_server(warehouse: Path) -> Iterator[BenchServer]:
    """A catalog on a throwaway PostgreSQL server (fsync off, see jobs.localpg), its DSN and the
    server version; all torn down."""
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


@contextmanager
def bench_catalog(warehouse: Path) -> Iterator[tuple[Catalog, str]]:
    """A catalog on a throwaway PostgreSQL server, and its version (see :func:`bench_server`)."""
    with bench_server(warehouse) as server:
        yield server.catalog, server.pg_version


# ------------------------------------------------------------------------------- figures


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds), q)) * 1000 if seconds else float("nan")


def median_ms(seconds: Sequence[float]) -> float:
    return percentile_ms(seconds, 50)


def timed(fn: Callable[..., object], *args: object) -> float:
    """Wall seconds of one call (perf_counter: monotonic, highest resolution)."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


class PhaseClock:
    """Adds the wall time (``perf_counter``) of each step to its phase: ``seconds[phase]``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, phase: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start
        return result


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


@dataclass(frozen=True)
class Environment:
    """What is needed to judge or repeat the figures, captured at the start of a run."""

    command: str
    started: dt.datetime
    load_at_start: str
    pg_version: str

    def lines(self, load_at_end: str) -> list[str]:
        versions = ", ".join(f"{p} {package_version(p)}" for p in ("deltalake", "pyarrow", "numpy"))
        return [
            f"- command: `{self.command}`",
            f"- date: {self.started:%Y-%m-%d %H:%M} UTC; lakestream commit {git_head()}",
            f"- machine: {os.cpu_count()} CPUs ({cpu_model()}), {ram_gib():.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}",
            f"- PostgreSQL {self.pg_version} (jobs.localpg: fsync off, synchronous_commit off), "
            f"Python {platform.python_version()}, {versions}",
            f"- load average (1/5/15 min; 2 cores, shared with other sessions): "
            f"{self.load_at_start} at start, {load_at_end} at end",
        ]


def environment(module: str, argv: Sequence[str], pg_version: str) -> Environment:
    command = " ".join(["python -m", module, *argv])
    return Environment(command, dt.datetime.now(dt.UTC), load_average(), pg_version)


def package_version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


# ------------------------------------------------------------------------------- a run's harness


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """``--workdir``, ``--keep`` and ``--markdown``, worded alike wherever they are taken."""
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")


@contextmanager
def scratch_dir(workdir: Path | None, *, keep: bool, prefix: str) -> Iterator[Path]:
    """``workdir`` (made if missing), or a new temporary folder named ``prefix...``; removed with
    everything in it at the end unless ``keep``."""
    work = workdir or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def emit_report(text: str, markdown: Path | None) -> None:
    """The report to stdout and, with ``--markdown``, to that file (with a final newline)."""
    print(text)
    if markdown:
        markdown.write_text(text + "\n")


def spawn_writers(target: Callable[..., None], spec: object, writers: int) -> list[Any]:
    """Run ``writers`` spawned processes ``target(spec, index, barrier, queue)`` (named
    ``writer-<index>``; ``spec`` picklable): each waits at ``barrier`` once it is ready, so they
    start together, and puts one report on ``queue``. Their reports, once all have exited."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers)
    queue: Any = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(spec, w, barrier, queue), name=f"writer-{w}")
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    reports = _collect_reports(procs, queue)
    for proc in procs:
        proc.join()
    return reports


def _collect_reports(procs: Sequence[BaseProcess], queue: Any) -> list[Any]:
    """Every writer process's report from ``queue``; fail fast if a writer died without
    sending one."""
    reports: list[Any] = []
    while len(reports) < len(procs):
        try:
            reports.append(queue.get(timeout=5))
        except queue_module.Empty:
            dead = [p.name for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"writer processes died without a report: {dead}") from None
    return reports
