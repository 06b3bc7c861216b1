"""Upsert latency of a lakestream CDC table vs deltalake (delta-rs) MERGE, on the same batches.

Workload: ``--upserts`` batches of ``--rows`` rows; the first inserts only, every later one
updates ``--updates`` of its rows (keys drawn uniformly from all earlier keys) and inserts the
rest (see :func:`bench.common.change_batches`). lakestream commits each batch with
``Table.upsert`` (one sorted run per touched bucket + one catalog commit); delta-rs runs the
documented ``merge(...).when_matched_update_all().when_not_matched_insert_all()``. The two
systems alternate batch by batch (which goes first alternates too), so both see the same load on
a shared machine. Each system is warmed up on a scratch table first, so the first-50 window
measures the steady state rather than one-time imports. delta-rs rewrites every file holding an
updated key, so its cost grows with the table: it stops after ``--peer-budget-seconds`` of
merging (the report says so); lakestream always runs every upsert.

    python -m bench.upsert.run [--upserts 1000] [--rows 1000] [--peer-budget-seconds 1800]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa
from deltalake import DeltaTable

from bench.common import (
    PRIMARY_KEY,
    SCHEMA,
    Environment,
    add_output_args,
    bench_catalog,
    change_batches,
    delta_create,
    delta_upsert,
    emit_report,
    environment,
    expected_final,
    load_average,
    median_ms,
    percentile_ms,
    progress,
    quiet_logging,
    same_rows,
    scratch_dir,
    timed,
)
from bench.upsert.phases import PHASES, PhasedUpserter
from catalog import Catalog, Table
from catalog.files.writer import WriteOptions

#: Size of the windows compared for flatness (first N vs last N upserts).
WINDOW = 50
_WARMUP_BATCHES = 3


class Upserter(Protocol):
    """One system's table, taking the benchmark's batches in order."""

    name: str
    #: Whether --peer-budget-seconds caps this system (the peer; lakestream runs in full).
    budgeted: bool
    #: Index of the first batch the table being read holds (0 unless it was replaced).
    history_start: int

    def before(self, index: int) -> None:
        """Untimed preparation before batch ``index``."""

    def upsert(self, batch: pa.Table) -> None: ...

    def read(self) -> pa.Table: ...


class LakestreamUpserter:
    """``Table.upsert`` with default write options, or without fsync like delta-rs (see below)."""

    budgeted = False
    history_start = 0

    def __init__(self, catalog: Catalog, table_name: str, buckets: int, *, fsync: bool) -> None:
        self.name = "lakestream" if fsync else "lakestream, fsync off"
        self.options = WriteOptions(fsync=fsync)
        self.table: Table = catalog.create_table(
            table_name, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=buckets
        )

    def before(self, index: int) -> None:
        pass

    def upsert(self, batch: pa.Table) -> None:
        self.table.upsert(batch, options=self.options)

    def read(self) -> pa.Table:
        return self.table.scan().to_arrow()


class ControlUpserter:
    """``Table.upsert`` into a table replaced by a new, empty one every :data:`WINDOW` upserts.

    Its cost cannot grow with table history, only with machine load: the load control that tells
    a slower last window caused by a longer history from one caused by busier neighbours.
    """

    name = "lakestream, load control"
    budgeted = False

    def __init__(self, catalog: Catalog, buckets: int) -> None:
        self.catalog = catalog
        self.buckets = buckets
        self.history_start = 0
        self.table: Table | None = None

    def before(self, index: int) -> None:
        if index % WINDOW:
            return
        if self.table is not None:
            self.catalog.drop_table(self.table.name)
        self.history_start = index
        self.table = self.catalog.create_table(
            f"control.orders_{index}", SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=self.buckets
        )

    def upsert(self, batch: pa.Table) -> None:
        assert self.table is not None
        self.table.upsert(batch)

    def read(self) -> pa.Table:
        assert self.table is not None
        return self.table.scan().to_arrow()


class DeltaUpserter:
    name = "deltalake"
    budgeted = True
    history_start = 0

    def __init__(self, path: Path) -> None:
        self.path = path
        self.table = delta_create(path)

    def before(self, index: int) -> None:
        pass

    def upsert(self, batch: pa.Table) -> None:
        delta_upsert(self.table, batch)

    def read(self) -> pa.Table:
        return DeltaTable(str(self.path)).to_pyarrow_table()


@dataclass
class Series:
    """Per-upsert wall times of one system, in batch order."""

    name: str
    seconds: list[float] = field(default_factory=list)
    stopped_by_budget: bool = False

    @property
    def done(self) -> int:
        return len(self.seconds)

    def p50(self) -> float:
        return median_ms(self.seconds)

    def p99(self) -> float:
        return percentile_ms(self.seconds, 99)

    def first(self) -> float:
        return median_ms(self.seconds[:WINDOW])

    def last(self) -> float:
        return median_ms(self.seconds[-WINDOW:])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upserts", type=int, default=1000, help="upsert batches per system")
    parser.add_argument("--rows", type=int, default=1000, help="rows per upsert batch")
    parser.add_argument("--updates", type=float, default=0.5, help="share of updates per batch")
    parser.add_argument("--buckets", type=int, default=4, help="hash buckets of the CDC table")
    parser.add_argument(
        "--peer-budget-seconds",
        type=float,
        default=1800.0,
        help="merge-time cap for deltalake (lakestream is not capped)",
    )
    add_output_args(parser)
    parser.add_argument("--raw", type=Path, help="also write every timing to this JSON file")
    args = parser.parse_args(argv)
    if args.upserts < 2 * WINDOW:
        parser.error(f"--upserts must be at least {2 * WINDOW} (first and last windows)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    with scratch_dir(args.workdir, keep=args.keep, prefix="lakestream-bench-upsert-") as work:
        batches = change_batches(args.upserts, args.rows, args.updates)
        with bench_catalog(work / "warehouse") as (catalog, pg_version):
            env = environment("bench.upsert.run", _argv_text(args), pg_version)
            warm_up(catalog, work, args)
            phased = PhasedUpserter(catalog, "bench.orders_phased", args.buckets)
            systems: list[Upserter] = [
                LakestreamUpserter(catalog, "bench.orders", args.buckets, fsync=True),
                DeltaUpserter(work / "delta" / "orders"),
                LakestreamUpserter(catalog, "bench.orders_nofsync", args.buckets, fsync=False),
                phased,
                ControlUpserter(catalog, args.buckets),
            ]
            series = run_interleaved(systems, batches, args.peer_budget_seconds)
            checks = verify(systems, series, batches)
    text = render(env, args, series, checks, phased.clock.times)
    emit_report(text, args.markdown)
    if args.raw:
        write_raw(args.raw, series, phased.clock.times)
    return 0


def warm_up(catalog: Catalog, work: Path, args: argparse.Namespace) -> None:
    """A few untimed upserts per system on scratch tables: imports, plans, connection pools."""
    scratch = change_batches(_WARMUP_BATCHES, args.rows, args.updates, seed=7)
    systems: list[Upserter] = [
        LakestreamUpserter(catalog, "warmup.orders", args.buckets, fsync=True),
        DeltaUpserter(work / "delta" / "warmup"),
    ]
    for batch in scratch:
        for system in systems:
            system.upsert(batch)


def run_interleaved(
    systems: Sequence[Upserter], batches: Sequence[pa.Table], budget_s: float
) -> list[Series]:
    """Batch i goes to every system before batch i+1; the order of systems rotates."""
    series = [Series(s.name) for s in systems]
    pairs = list(zip(systems, series, strict=True))
    for i, batch in enumerate(batches):
        shift = i % len(pairs)
        for system, out in pairs[shift:] + pairs[:shift]:
            if out.stopped_by_budget:
                continue
            system.before(i)
            out.seconds.append(timed(system.upsert, batch))
            if system.budgeted and sum(out.seconds) >= budget_s:
                out.stopped_by_budget = i + 1 < len(batches)
        if (i + 1) % 100 == 0:
            progress(
                f"upsert {i + 1:,}/{len(batches):,}: "
                + ", ".join(f"{s.name} last-50 p50 {s.last():.1f} ms" for s in series)
                + f"; load {load_average()}"
            )
    return series


def verify(
    systems: Sequence[Upserter], series: Sequence[Series], batches: Sequence[pa.Table]
) -> list[str]:
    """Each system holds one row per key of the batches it took; finished systems agree."""
    lines = []
    finals: list[pa.Table] = []
    for system, out in zip(systems, series, strict=True):
        rows = system.read()
        wanted = expected_final(batches[system.history_start : out.done])
        verdict = "ok" if rows.num_rows == wanted else "WRONG"
        lines.append(f"{system.name}: {rows.num_rows:,} rows, expected {wanted:,}: {verdict}")
        if out.done == len(batches) and system.history_start == 0:
            finals.append(rows)
    if len(finals) > 1:
        agree = all(same_rows(finals[0], other) for other in finals[1:])
        lines.append(f"final contents of the systems: {'identical' if agree else 'DIFFERENT'}")
    return lines


# ------------------------------------------------------------------------------- report


def render(
    env: Environment,
    args: argparse.Namespace,
    series: Sequence[Series],
    checks: Sequence[str],
    phases: dict[str, list[float]],
) -> str:
    parts = ["#### Setup", "", *env.lines(load_average()), ""]
    parts += [f"- {c}" for c in checks] + [""]
    parts += ["#### Per-upsert latency", "", *latency_table(series, args.upserts), ""]
    parts += [*ratio_lines(series), ""]
    parts += ["#### p50 per 100 upserts (ms)", "", *window_table(series, phases), ""]
    parts += ["#### Where a lakestream upsert spends its time", ""]
    parts += [*phase_table(phases), ""]
    return "\n".join(parts)


def latency_table(series: Sequence[Series], planned: int) -> list[str]:
    rows = [
        "| system | upserts | p50 ms | p99 ms | mean ms | first-50 p50 ms | last-50 p50 ms "
        "| last / first | total s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in series:
        done = f"{s.done:,}" + (f" of {planned:,} (budget hit)" if s.stopped_by_budget else "")
        mean = sum(s.seconds) / s.done * 1000
        rows.append(
            f"| {s.name} | {done} | {s.p50():.1f} | {s.p99():.1f} | {mean:.1f} "
            f"| {s.first():.1f} | {s.last():.1f} | {s.last() / s.first():.2f}x "
            f"| {sum(s.seconds):.1f} |"
        )
    return rows


def ratio_lines(series: Sequence[Series]) -> list[str]:
    """The goal ratio of each lakestream variant against the peer, over the upserts both ran
    (all of them unless the peer's budget ran out), then the flatness of every system."""
    by_name = {s.name: s for s in series}
    peer = by_name[DeltaUpserter.name]
    lines = []
    for ours in (by_name["lakestream"], by_name["lakestream, fsync off"]):
        common = min(ours.done, peer.done)
        mine, theirs = median_ms(ours.seconds[:common]), median_ms(peer.seconds[:common])
        first = ours.first() / peer.first()
        tail = slice(max(0, common - WINDOW), common)
        last = median_ms(ours.seconds[tail]) / median_ms(peer.seconds[tail])
        goal = "met" if mine / theirs <= 0.5 else "MISSED"
        lines += [
            f"- **{ours.name} p50 / {peer.name} p50 = {mine / theirs:.3f}** over upserts "
            f"1-{common:,} ({mine:.1f} ms vs {theirs:.1f} ms); goal <= 0.5: **{goal}**; "
            f"in the first 50 upserts {first:.3f}, in the last 50 both ran {last:.3f}",
        ]
    flat = ", ".join(f"{s.name} {s.last() / s.first():.2f}x" for s in series)
    control = by_name[ControlUpserter.name]
    drift = control.last() / control.first()
    adjusted = ", ".join(
        f"{s.name} {s.last() / s.first() / drift:.2f}x"
        for s in series
        if s is not control and not s.stopped_by_budget
    )
    return [
        *lines,
        f"- flatness (last-50 p50 / first-50 p50): {flat}",
        f"- the load control's drift ({drift:.2f}x) is the machine getting busier; flatness "
        f"divided by it (growth with table history): {adjusted}",
    ]


def window_table(series: Sequence[Series], phases: dict[str, list[float]]) -> list[str]:
    """How each system's cost moves along the run; the load control shows the machine's part."""
    columns = [(s.name, s.seconds) for s in series if s.name != PhasedUpserter.name]
    columns += [(f"phase `{name}`", phases[name]) for name in ("write", "commit")]
    rows = [
        "| upserts | " + " | ".join(name for name, _ in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    longest = max(len(seconds) for _, seconds in columns)
    for start in range(0, longest, 100):
        cells = [
            f"{median_ms(seconds[start : start + 100]):.1f}" if len(seconds) > start else "-"
            for _, seconds in columns
        ]
        rows.append(f"| {start + 1}-{min(start + 100, longest)} | " + " | ".join(cells) + " |")
    return rows


def phase_table(phases: dict[str, list[float]]) -> list[str]:
    total = [sum(step) for step in zip(*phases.values(), strict=True)]
    rows = [
        f"The `{PhasedUpserter.name}` table: its {len(total):,} upserts done step by step with "
        "the package's own functions (bench/upsert/phases.py), in turn with the others.",
        "",
        "| phase | what | p50 ms | p99 ms | share of p50 sum | first-50 p50 ms | last-50 p50 ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    medians = {name: median_ms(times) for name, times in phases.items()}
    for name, times in [*phases.items(), ("total", total)]:
        what = PHASES.get(name, "one upsert")
        share = f"{medians[name] / sum(medians.values()):.0%}" if name in medians else ""
        rows.append(
            f"| {name} | {what} | {median_ms(times):.2f} | {percentile_ms(times, 99):.2f} "
            f"| {share} | {median_ms(times[:WINDOW]):.2f} | {median_ms(times[-WINDOW:]):.2f} |"
        )
    return rows


def write_raw(path: Path, series: Sequence[Series], phases: dict[str, list[float]]) -> None:
    """Every timing, for a second look without a second run."""
    raw = {
        "upserts": {s.name: s.seconds for s in series},
        "phases": phases,
    }
    path.write_text(json.dumps(raw))


def _argv_text(args: argparse.Namespace) -> list[str]:
    return [
        f"--upserts {args.upserts}",
        f"--rows {args.rows}",
        f"--updates {args.updates:g}",
        f"--buckets {args.buckets}",
        f"--peer-budget-seconds {args.peer_budget_seconds:g}",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
