"""Steady state: a CDC table upserted continuously while the compactor service runs beside it.

The writer (this process) upserts ``commits`` batches of ``rows`` rows (50% updates of keys
drawn from all earlier keys, as bench/upsert makes them) into a table of ``buckets`` buckets,
one commit every ``interval`` seconds (0: as fast as it can), as a streaming job's micro-batches
land. The compactor service runs in a process of its own (:mod:`bench.compact.compactor`) with
its defaults: it merges a bucket once it holds 5 runs or its read amplification exceeds 1.5.

Every ``every`` commits the writer pauses and pins the table's head version ``v``. It reads the
table at ``v`` as a user would (``Table.scan(version=v).to_arrow()``: merge-on-read of whatever
runs the compactor has not folded yet), and a fully compacted copy of the same version: the
rows read at ``v`` upserted into a fresh table in two halves (two runs per bucket) and compacted
with the compactor's routine (``bench.read.compact.compact``), so its layout is exactly what a
compaction leaves: one key-sorted zstd file per bucket. The two reads alternate for
``read_repeats`` rounds after a warm-up; the checkpoint keeps their medians and checks they hold
the same rows. The service keeps running meanwhile: the pause is not counted as ingest time.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.common import (
    PRIMARY_KEY,
    SCHEMA,
    BenchServer,
    change_batches,
    expected_final,
    load_average,
    median_ms,
    progress,
    same_rows,
)
from bench.compact.compactor import CompactorProcess, CompactorUsage
from bench.compact.lag import Compaction, Lag, Upsert, compactions, lags
from bench.read.compact import compact
from bench.read.phases import merged_phases as read_phases
from catalog import Catalog, CommitOp, Table
from compaction.amplification import WriteAmplification, write_amplification

#: Goals: merge-on-read of the latest version at most this many times the compacted read...
GOAL_RATIO = 1.2
#: ...with no upward trend: the last third's median ratio at most this much above the first's.
TREND_TOLERANCE = 0.05
TABLE = "steady.orders"
#: Served by the service too: its first compaction tells that coordinator and worker are up.
READY_TABLE = "steady.ready"
#: Seconds the service may take to spawn, connect and land its first compaction.
READY_TIMEOUT_S = 120.0
#: Write amplification is reported over every version of the run.
RUN_WINDOW = dt.timedelta(days=365)
#: Issue 49's goal for it.
GOAL_WRITE_AMPLIFICATION = 10.0


@dataclass(frozen=True)
class SteadyArgs:
    commits: int
    rows: int
    updates: float
    buckets: int
    every: int
    interval: float
    read_repeats: int
    workers: int


@dataclass(frozen=True)
class Checkpoint:
    commits: int
    version: int
    runs: tuple[int, ...]
    """Files per bucket at the pinned version (1: compacted; more: merge-on-read)."""
    rows_decoded: float
    """Rows in the runs / rows in the compacted copy."""
    latest_ms: float
    compacted_ms: float
    equal: bool
    load: float
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    """Layout ("latest", "compacted") -> phase -> median ms of the phase-timed reads."""

    @property
    def ratio(self) -> float:
        return self.latest_ms / self.compacted_ms


@dataclass
class SteadyResult:
    args: SteadyArgs
    checkpoints: list[Checkpoint] = field(default_factory=list)
    upsert_s: list[float] = field(default_factory=list)
    ingest_cpu_s: float = 0.0
    ingest_wall_s: float = 0.0
    lags: list[Lag] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    usage: CompactorUsage | None = None
    final_rows_ok: bool = False
    checks: list[str] = field(default_factory=list)
    amplification: WriteAmplification | None = None
    """Over the whole run: bytes compaction wrote / bytes the upserts added (design D8)."""


def run_steady(server: BenchServer, work: Path, args: SteadyArgs) -> SteadyResult:
    catalog = server.catalog
    batches = change_batches(args.commits, args.rows, args.updates)
    table = catalog.create_table(TABLE, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=args.buckets)
    service = CompactorProcess(
        server.dsn,
        server.warehouse,
        tables="steady.*",
        workers=args.workers,
        usage_path=work / "compactor-usage.json",
    )
    result = SteadyResult(args)
    upserts: list[Upsert] = []
    service.start()
    try:
        _warm_up(catalog, args.buckets)
        _wait_for_service(catalog, args.buckets, service)
        _ingest(
            catalog,
            table,
            batches=batches,
            args=args,
            result=result,
            upserts=upserts,
            service=service,
        )
    finally:
        result.usage = service.stop()
    result.compactions = compactions(table)
    result.amplification = write_amplification(table, RUN_WINDOW)
    result.lags = lags(upserts, result.compactions)
    final = table.scan().to_arrow()
    wanted = expected_final(batches)
    result.final_rows_ok = final.num_rows == wanted
    verdict = "ok" if result.final_rows_ok else "WRONG"
    result.checks.append(f"final rows {final.num_rows:,}, expected {wanted:,}: {verdict}")
    equal = sum(c.equal for c in result.checkpoints)
    result.checks.append(
        f"checkpoints whose latest read equals its compacted copy: {equal} of "
        f"{len(result.checkpoints)}"
    )
    result.checks.append(f"compactor exit code {result.usage.exit_code} (0: stopped cleanly)")
    return result


def _warm_up(catalog: Catalog, buckets: int) -> None:
    """One scratch copy and read, so the first checkpoint does not pay imports and pools."""
    rows = change_batches(1, 1000, 0.0, seed=7)[0]
    copy, version = _compacted_copy(catalog, "warmup.orders", rows, buckets)
    copy.scan(version=version).to_arrow()
    _drop(catalog, copy)


def _wait_for_service(catalog: Catalog, buckets: int, service: CompactorProcess) -> None:
    """Upsert a scratch table until the service compacts it: then its coordinator listens and
    its worker claims, and the measured stream does not start before the compactor does. The
    table is kept (dropping it would fail the service's tasks still queued for it); with no
    more commits it costs the service nothing."""
    table = catalog.create_table(READY_TABLE, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=buckets)
    for batch in change_batches(6, 200, 0.5, seed=11):
        table.upsert(batch)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not any(h.op is CommitOp.COMPACTION for h in table.history(limit=100)):
        if not service.alive() or time.monotonic() > deadline:
            raise RuntimeError("the compactor service did not start compacting")
        time.sleep(0.2)


def _ingest(
    catalog: Catalog,
    table: Table,
    *,
    batches: Sequence[pa.Table],
    args: SteadyArgs,
    result: SteadyResult,
    upserts: list[Upsert],
    service: CompactorProcess,
) -> None:
    next_at = time.monotonic()
    for i, batch in enumerate(batches):
        if args.interval:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + args.interval, time.monotonic())
        cpu, wall = time.process_time(), time.perf_counter()
        commit = table.upsert(batch)
        result.upsert_s.append(time.perf_counter() - wall)
        result.ingest_cpu_s += time.process_time() - cpu
        mine = commit.tables[0]
        assert mine.version is not None, "an upsert is never discarded"
        upserts.append(Upsert(mine.version, commit.committed_at, tuple(mine.partition_versions)))
        if (i + 1) % args.every == 0:
            if not service.alive():
                raise RuntimeError("the compactor service died; see its log on stderr")
            point = checkpoint(catalog, table, i + 1, args)
            result.checkpoints.append(point)
            progress(
                f"[steady] commit {i + 1:,}/{len(batches):,}: runs/bucket {list(point.runs)}, "
                f"latest {point.latest_ms:.0f} ms vs compacted {point.compacted_ms:.0f} ms "
                f"= {point.ratio:.2f}x; load {load_average()}"
            )
            next_at = time.monotonic()  # the pause is not ingest time
    result.ingest_wall_s = sum(result.upsert_s)


def checkpoint(catalog: Catalog, table: Table, commits: int, args: SteadyArgs) -> Checkpoint:
    """Pin the head; time the latest read against a compacted copy of the same version."""
    version = table.current_version()
    plan = table.plan(version=version)
    rows = table.scan(version=version).to_arrow()
    copy, copy_version = _compacted_copy(catalog, f"copy.orders_{commits}", rows, args.buckets)
    try:
        readers: list[tuple[str, Callable[[], pa.Table]]] = [
            ("latest", lambda: table.scan(version=version).to_arrow()),
            ("compacted", lambda: copy.scan(version=copy_version).to_arrow()),
        ]
        times = _alternate(readers, args.read_repeats)
        phased = _alternate_phases(
            [
                ("latest", lambda: read_phases(table, version)),
                ("compacted", lambda: read_phases(copy, copy_version)),
            ],
            args.read_repeats,
        )
        equal = same_rows(rows, copy.scan(version=copy_version).to_arrow())
    finally:
        _drop(catalog, copy)
    return Checkpoint(
        commits=commits,
        version=version,
        runs=tuple(len(p.files) for p in plan.partitions),
        rows_decoded=sum(f.row_count for f in plan.files) / max(1, rows.num_rows),
        latest_ms=median_ms(times["latest"]),
        compacted_ms=median_ms(times["compacted"]),
        equal=equal,
        load=float(load_average().split(" / ")[0]),
        phases=phased,
    )


def _compacted_copy(catalog: Catalog, name: str, rows: pa.Table, buckets: int) -> tuple[Table, int]:
    """``rows`` as a table in the layout a compaction leaves (one file per bucket).

    A scan returns rows bucket by bucket, so the two upserts take every other row: each bucket
    gets two runs, which the forced plan merges (a bucket of one run would stay a merge run).
    """
    copy = catalog.create_table(name, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=buckets)
    index = np.arange(rows.num_rows)
    copy.upsert(rows.take(index[0::2]))
    copy.upsert(rows.take(index[1::2]))
    version = compact(copy, copy.current_version())
    if any(p.merge for p in copy.plan(version=version).partitions):
        raise AssertionError(f"{name} is not fully compacted at version {version}")
    return copy, version


def _drop(catalog: Catalog, table: Table) -> None:
    catalog.drop_table(table.name)
    shutil.rmtree(table.meta.location, ignore_errors=True)


def _alternate(
    readers: Sequence[tuple[str, Callable[[], pa.Table]]], repeats: int
) -> dict[str, list[float]]:
    """One warm-up read each, then ``repeats`` rounds, the order swapping every round."""
    for _, read in readers:
        read()
    times: dict[str, list[float]] = {name: [] for name, _ in readers}
    for round_ in range(repeats):
        ordered = readers if round_ % 2 == 0 else list(reversed(readers))
        for name, read in ordered:
            start = time.perf_counter()
            read()
            times[name].append(time.perf_counter() - start)
    return times


def _alternate_phases(
    readers: Sequence[tuple[str, Callable[[], dict[str, float]]]], repeats: int
) -> dict[str, dict[str, float]]:
    """The phase-timed reads, alternating like the whole reads; median ms per phase."""
    seen: dict[str, dict[str, list[float]]] = {name: {} for name, _ in readers}
    for round_ in range(repeats):
        ordered = readers if round_ % 2 == 0 else list(reversed(readers))
        for name, read in ordered:
            for phase, seconds in read().items():
                seen[name].setdefault(phase, []).append(seconds)
    return {
        name: {phase: median_ms(values) for phase, values in phases.items()}
        for name, phases in seen.items()
    }


# ------------------------------------------------------------------------------- figures


def ratios(result: SteadyResult) -> list[float]:
    return [c.ratio for c in result.checkpoints]


def trend(result: SteadyResult) -> tuple[float, float, float]:
    """(first-third median, last-third median, least-squares slope per 1,000 commits)."""
    values = ratios(result)
    third = max(1, len(values) // 3)
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    if len(values) < 2:
        return first, last, 0.0
    x = np.array([c.commits for c in result.checkpoints], dtype=float)
    slope = float(np.polyfit(x, np.array(values), 1)[0]) * 1000
    return first, last, slope


def lag_seconds(result: SteadyResult) -> list[float]:
    return [lag.seconds for lag in result.lags if lag.seconds is not None]


def lag_commits(result: SteadyResult) -> list[float]:
    return [float(lag.commits) for lag in result.lags if lag.commits is not None]
