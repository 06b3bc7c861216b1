"""Full read of a CDC table held in N runs per bucket vs the same table compacted, + delta-rs.

Workload (per ``--updates`` variant): ``--runs`` upserts of ``--rows``/``--runs`` rows each into
a CDC table of ``--buckets`` buckets, so every bucket holds ``--runs`` sorted runs; the first
upsert inserts only, each later one updates that share of its rows (keys drawn uniformly from
all earlier keys) and inserts the rest. The bench then compacts the table with the
compactor's routine (``compaction.rewrite.compact``: per bucket, its runs merged into one file
and one COMPACTION commit at ``base_version``), so the same table can be read at two versions
with ``Table.scan``: before (merge-on-read of the runs) and after (one plain file per
bucket). delta-rs takes the same batches as MERGEs and is read with ``to_pyarrow_table()``
as a peer reference. Each read is timed ``--repeats`` times after one warm-up (files in the
OS page cache), the readers taking turns in a rotating order; the figures are medians.
Phase-timed copies of the two lakestream reads, in the same rotation, show where the time
goes.

    python -m bench.read.run [--rows 1000000] [--runs 10] [--updates 0.5 0.1] [--repeats 11]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from bench.common import (
    PRIMARY_KEY,
    SCHEMA,
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
    progress,
    quiet_logging,
    same_rows,
    scratch_dir,
    timed,
)
from bench.read.compact import compact
from bench.read.phases import PHASES, compacted_phases, merged_phases
from catalog import Catalog, DataFile, Table

#: The goal: merge-on-read of the runs at most this many times the compacted read.
GOAL_RATIO = 1.5
MERGED, COMPACTED, DELTA = "lakestream, runs (merge-on-read)", "lakestream, compacted", "deltalake"


@dataclass(frozen=True)
class Setup:
    """One variant's tables, written and verified, ready to be read."""

    update_share: float
    table: Table
    runs_version: int
    compacted_version: int
    delta_path: Path
    facts: tuple[str, ...] = ()


@dataclass
class Timings:
    """Seconds per reader (whole reads) and per phase of the phase-timed reads."""

    reads: dict[str, list[float]] = field(default_factory=dict)
    #: Process CPU seconds (all threads) of the same reads: the work done, whatever the load.
    cpu: dict[str, list[float]] = field(default_factory=dict)
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="change rows over all runs")
    parser.add_argument("--runs", type=int, default=10, help="upserts = runs per bucket")
    parser.add_argument("--buckets", type=int, default=4, help="hash buckets of the CDC table")
    parser.add_argument(
        "--updates",
        type=float,
        nargs="+",
        default=[0.5, 0.1],
        help="update shares, one variant each",
    )
    parser.add_argument("--repeats", type=int, default=11, help="timed reads per reader")
    parser.add_argument(
        "--threads", type=int, help="Arrow CPU and IO threads (default: Arrow's, one per core)"
    )
    add_output_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    if args.threads:  # lakestream's run reader sizes its thread pool by pa.cpu_count() too
        pa.set_cpu_count(args.threads)
        pa.set_io_thread_count(args.threads)
    sections = []
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="lakestream-bench-read-") as work,
        bench_catalog(work / "warehouse") as (catalog, pg_version),
    ):
        env = environment("bench.read.run", _argv_text(args), pg_version)
        for share in args.updates:
            setup = build(catalog, work, args, share)
            timings = measure(setup, args.repeats)
            sections.append(render_variant(args, setup, timings))
    text = "\n".join(["#### Setup", "", *env.lines(load_average()), "", *sections])
    emit_report(text, args.markdown)
    return 0


# ------------------------------------------------------------------------------- setup


def build(catalog: Catalog, work: Path, args: argparse.Namespace, share: float) -> Setup:
    """Write both systems' tables from the same batches, compact lakestream's, verify all."""
    tag = f"u{round(share * 100)}"
    batches = change_batches(args.runs, args.rows // args.runs, share)
    progress(f"[{tag}] writing {args.runs} upserts of {args.rows // args.runs:,} rows ...")
    table = catalog.create_table(
        f"read.orders_{tag}", SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=args.buckets
    )
    delta_path = work / "delta" / tag
    delta = delta_create(delta_path)
    for batch in batches:
        table.upsert(batch)
        delta_upsert(delta, batch)
    runs_version = table.current_version()
    compacted_version = compact(table, runs_version)
    setup = Setup(share, table, runs_version, compacted_version, delta_path)
    return replace(setup, facts=tuple(describe(setup, expected_final(batches))))


def describe(setup: Setup, expected_rows: int) -> list[str]:
    """File counts and sizes of each layout, and a check that all three reads agree."""
    table = setup.table
    runs = table.plan(version=setup.runs_version)
    compacted = table.plan(version=setup.compacted_version)
    delta = DeltaTable(str(setup.delta_path))
    reads = {name: fn() for name, fn in readers(setup).items()}
    merged, plain, peer = reads[MERGED], reads[COMPACTED], reads[DELTA]
    agree = same_rows(merged, plain) and same_rows(merged, peer)
    if merged.num_rows != expected_rows or not agree:
        raise AssertionError(
            f"reads disagree: {merged.num_rows:,} rows, expected {expected_rows:,}"
        )
    actions = pa.table(delta.get_add_actions(flatten=True))  # arro3 -> pyarrow (C stream)
    delta_bytes = pc.sum(actions.column("size_bytes")).as_py()
    return [
        f"result: {expected_rows:,} rows; the three reads return identical rows",
        f"runs: {_files(runs.files)} (buckets: "
        + ", ".join(str(len(p.files)) for p in runs.partitions)
        + " runs)",
        f"compacted: {_files(compacted.files)}; rows decoded, runs / compacted: "
        f"{_rows(runs.files) / _rows(compacted.files):.2f}x",
        f"deltalake: {len(delta.file_uris())} live files, {delta_bytes / 2**20:.1f} MiB, "
        f"{delta.version()} commits",
    ]


def _files(files: Sequence[DataFile]) -> str:
    size = sum(f.size_bytes for f in files)
    return f"{len(files)} files, {_rows(files):,} rows, {size / 2**20:.1f} MiB"


def _rows(files: Sequence[DataFile]) -> int:
    return sum(f.row_count for f in files)


# ------------------------------------------------------------------------------- timing


def readers(setup: Setup) -> dict[str, Callable[[], pa.Table]]:
    """The three full reads compared, as a user would call them."""
    table = setup.table
    return {
        MERGED: lambda: table.scan(version=setup.runs_version).to_arrow(),
        COMPACTED: lambda: table.scan(version=setup.compacted_version).to_arrow(),
        DELTA: lambda: DeltaTable(str(setup.delta_path)).to_pyarrow_table(),
    }


def measure(setup: Setup, repeats: int) -> Timings:
    """Every reader once to warm up, then ``repeats`` rounds, the order rotating per round."""
    timings = Timings()
    plain = list(readers(setup).items())
    phased: list[tuple[str, Callable[[], dict[str, float]]]] = [
        (MERGED, lambda: merged_phases(setup.table, setup.runs_version)),
        (COMPACTED, lambda: compacted_phases(setup.table, setup.compacted_version)),
    ]
    jobs: list[Callable[[], None]] = [
        *(_whole(timings, name, fn) for name, fn in plain),
        *(_phased(timings, name, fn) for name, fn in phased),
    ]
    for job in jobs:  # warm-up: page cache, imports, thread pools
        job()
    timings.reads.clear()
    timings.cpu.clear()
    timings.phases.clear()
    for round_ in range(repeats):
        shift = round_ % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:
            job()
        progress(f"[u{round(setup.update_share * 100)}] round {round_ + 1}/{repeats}")
    return timings


def _whole(timings: Timings, name: str, fn: Callable[[], pa.Table]) -> Callable[[], None]:
    def job() -> None:
        cpu = time.process_time()
        timings.reads.setdefault(name, []).append(timed(fn))
        timings.cpu.setdefault(name, []).append(time.process_time() - cpu)

    return job


def _phased(timings: Timings, name: str, fn: Callable[[], dict[str, float]]) -> Callable[[], None]:
    def job() -> None:
        for phase, seconds in fn().items():
            timings.phases.setdefault(name, {}).setdefault(phase, []).append(seconds)

    return job


# ------------------------------------------------------------------------------- report


def render_variant(args: argparse.Namespace, setup: Setup, timings: Timings) -> str:
    share = f"{setup.update_share:.0%}"
    title = f"#### {share} updates: {args.rows:,} change rows in {args.runs} runs per bucket"
    parts = [title, "", *(f"- {f}" for f in setup.facts), "", *read_table(timings), ""]
    parts += [*goal_lines(timings), "", *phase_table(timings), ""]
    return "\n".join(parts)


def read_table(timings: Timings) -> list[str]:
    base = median_ms(timings.reads[COMPACTED])
    rows = [
        "| read | p50 ms | min ms | max ms | vs compacted (p50) | CPU p50 ms | CPU vs compacted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    cpu_base = median_ms(timings.cpu[COMPACTED])
    for name, seconds in timings.reads.items():
        p50, cpu = median_ms(seconds), median_ms(timings.cpu[name])
        rows.append(
            f"| {name} | {p50:.1f} | {min(seconds) * 1000:.1f} | {max(seconds) * 1000:.1f} "
            f"| {p50 / base:.2f}x | {cpu:.1f} | {cpu / cpu_base:.2f}x |"
        )
    return rows


def goal_lines(timings: Timings) -> list[str]:
    merged, compacted = median_ms(timings.reads[MERGED]), median_ms(timings.reads[COMPACTED])
    delta = median_ms(timings.reads[DELTA])
    ratio = merged / compacted
    verdict = "met" if ratio <= GOAL_RATIO else "MISSED"
    return [
        f"- **merge-on-read / compacted = {ratio:.2f}x** (p50); goal <= {GOAL_RATIO}x: "
        f"**{verdict}**",
        f"- peer reference: merge-on-read / deltalake = {merged / delta:.2f}x, "
        f"compacted / deltalake = {compacted / delta:.2f}x",
    ]


def phase_table(timings: Timings) -> list[str]:
    workers = pa.cpu_count()
    overlap = (
        f"the real merge-on-read overlaps them on {workers} workers"
        if workers > 1
        else "as the real read does on one worker"
    )
    rows = [
        "Phase-timed copies of the two lakestream reads (bench/read/phases.py), same rotation;"
        f" buckets one after another ({overlap}):",
        "",
        "| phase | what | runs p50 ms | compacted p50 ms |",
        "| --- | --- | ---: | ---: |",
    ]
    merged, compacted = timings.phases[MERGED], timings.phases[COMPACTED]
    for phase, what in PHASES.items():
        rows.append(
            f"| {phase} | {what} | {_phase_ms(merged, phase)} | {_phase_ms(compacted, phase)} |"
        )
    return rows


def _phase_ms(phases: dict[str, list[float]], phase: str) -> str:
    return f"{median_ms(phases[phase]):.1f}" if phase in phases else "-"


def _argv_text(args: argparse.Namespace) -> list[str]:
    return [
        f"--rows {args.rows}",
        f"--runs {args.runs}",
        f"--buckets {args.buckets}",
        "--updates " + " ".join(f"{u:g}" for u in args.updates),
        f"--repeats {args.repeats}",
        *([f"--threads {args.threads}"] if args.threads else []),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
