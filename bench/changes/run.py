"""Reading the changes of the last K versions of a CDC table vs a full scan of the same table.

Workload: a CDC table of ``--rows`` keys (the shared order payload of ``bench.common``,
``--buckets`` hash buckets) loaded by upserts of ``--chunk`` rows, compacted with the
compactor's routine (one file per bucket), then ``--versions`` K upserts that each change
``--changed`` of the keys: all but ``--inserts`` of them update existing keys (drawn uniformly,
distinct within a version, every value new), the rest insert new keys. Deletes are left out: a
key delete is a commit, and so a version, of its own.

Timed, in one process, once to warm up and then ``--repeats`` rounds in a rotating order:
``Table.changes(latest - K + 1).num_rows``, the same range through ``changes_reader`` (every
batch consumed), ``Table.changes(latest).num_rows`` (the last version alone) and
``Table.scan().to_arrow()`` at the latest version (the compacted file and K runs per bucket,
merged on read) as the baseline. Not timed: the load, the compaction, the K upserts and the
checks of the changes (counts per version and change type against what was written).

    python -m bench.changes.run [--rows 10000000] [--versions 10] [--changed 0.01] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from bench.common import (
    PRIMARY_KEY,
    SCHEMA,
    add_output_args,
    bench_catalog,
    emit_report,
    environment,
    load_average,
    median_ms,
    payload,
    progress,
    quiet_logging,
    scratch_dir,
    timed,
)
from bench.read.compact import compact
from catalog import Catalog, DataFile, Table

#: The goal: one version's changes, with 1% of the keys changed, in at most this share of a
#: full scan's time (proportional to the changed rows).
GOAL_RATIO = 0.1
SCAN = "full scan (`scan().to_arrow()`)"
CHANGES_K = "changes, last K versions (`changes(...)`)"
READER_K = "changes, last K versions (`changes_reader(...)`)"
CHANGES_1 = "changes, last version (`changes(latest)`)"


@dataclass(frozen=True)
class Written:
    """What one of the K versions wrote: its version and its updated and inserted keys."""

    version: int
    updated: int
    inserted: int


@dataclass(frozen=True)
class Setup:
    table: Table
    first: int
    latest: int
    versions: tuple[Written, ...]
    rows: int
    facts: tuple[str, ...] = ()


@dataclass
class Timings:
    wall: dict[str, list[float]] = field(default_factory=dict)
    #: Process CPU seconds (all threads) of the same calls: the work done, whatever the load.
    cpu: dict[str, list[float]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="keys loaded")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows per load upsert")
    parser.add_argument("--buckets", type=int, default=4, help="hash buckets of the CDC table")
    parser.add_argument("--versions", type=int, default=10, help="K: versions of changes read")
    parser.add_argument("--changed", type=float, default=0.01, help="share of keys per version")
    parser.add_argument(
        "--inserts", type=float, default=0.01, help="share of a version's changes that insert"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds")
    parser.add_argument("--seed", type=int, default=7)
    add_output_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="lakestream-bench-changes-") as work,
        bench_catalog(work / "warehouse") as (catalog, pg_version),
    ):
        env = environment("bench.changes.run", _argv_text(args), pg_version)
        setup = build(catalog, args)
        timings = measure(setup, args.repeats)
    text = "\n".join(
        ["#### Setup", "", *env.lines(load_average()), "", *render(args, setup, timings)]
    )
    emit_report(text, args.markdown)
    return 0


# ------------------------------------------------------------------------------- setup


def build(catalog: Catalog, args: argparse.Namespace) -> Setup:
    """Load, compact, then commit the K versions of changes; check what the feed returns."""
    rng = np.random.default_rng(args.seed)
    table = catalog.create_table(
        "changes.orders", SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=args.buckets
    )
    clock = time.perf_counter()
    for batch, start in enumerate(range(0, args.rows, args.chunk)):
        keys = np.arange(start, min(start + args.chunk, args.rows), dtype=np.int64)
        table.upsert(payload(keys, rng, batch))
        progress(f"loaded {start + len(keys):,} / {args.rows:,} rows")
    loaded = time.perf_counter() - clock
    compacted = compact(table, table.current_version())
    progress(f"compacted at version {compacted} ({time.perf_counter() - clock:.0f} s so far)")
    written, next_key = [], args.rows
    per_version = max(1, round(args.rows * args.changed))
    inserts = round(per_version * args.inserts)
    for k in range(args.versions):
        old = rng.choice(args.rows, per_version - inserts, replace=False).astype(np.int64)
        new = np.arange(next_key, next_key + inserts, dtype=np.int64)
        next_key += inserts
        keys = rng.permutation(np.concatenate([old, new]))
        table.upsert(payload(keys, rng, 1_000 + k))
        written.append(Written(table.current_version(), len(old), len(new)))
    latest = table.current_version()
    setup = Setup(table, latest - args.versions + 1, latest, tuple(written), next_key)
    facts = check(setup) + describe(setup, compacted, loaded)
    return Setup(setup.table, setup.first, setup.latest, setup.versions, setup.rows, tuple(facts))


def check(setup: Setup) -> list[str]:
    """The feed's rows per version and change type equal what the K upserts wrote (every
    update writes new values, so each is a pre-image and a post-image), and the reader, the
    last-version read and the scan agree with it."""
    table = setup.table
    changes = table.changes(setup.first)
    got = Counter(
        zip(
            changes.column("_commit_version").to_pylist(),
            changes.column("_change_type").to_pylist(),
            strict=True,
        )
    )
    want: Counter[tuple[int, str]] = Counter()
    for w in setup.versions:
        want[w.version, "update_preimage"] = w.updated
        want[w.version, "update_postimage"] = w.updated
        want[w.version, "insert"] = w.inserted
    if +got != +want:
        raise AssertionError(f"changes disagree with the writes: {sorted((+got).items())}")
    streamed = sum(b.num_rows for b in table.changes_reader(setup.first))
    last = table.changes(setup.latest).num_rows
    scanned = table.scan().to_arrow().num_rows
    w = setup.versions[-1]
    if streamed != changes.num_rows or last != 2 * w.updated + w.inserted:
        raise AssertionError(f"reader {streamed:,} / last version {last:,} rows disagree")
    if scanned != setup.rows:
        raise AssertionError(f"scan holds {scanned:,} rows, expected {setup.rows:,}")
    updated = sum(w.updated for w in setup.versions)
    inserted = sum(w.inserted for w in setup.versions)
    return [
        f"changes checked: per version and change type equal to the writes; {updated:,} "
        f"updates ({updated:,} pre-images, {updated:,} post-images) and {inserted:,} inserts "
        f"in {len(setup.versions)} versions; the reader yields the same {changes.num_rows:,} "
        f"rows; the scan holds {scanned:,} rows",
    ]


def describe(setup: Setup, compacted: int, loaded: float) -> list[str]:
    compacted_files = setup.table.plan(version=compacted).files
    latest = setup.table.plan(version=setup.latest).files
    kept = {f.path for f in compacted_files}
    runs = [f for f in latest if f.path not in kept]
    return [
        f"load: {loaded:.0f} s; latest version {setup.latest} (compaction at {compacted}, "
        f"changes read from {setup.first})",
        f"files at the latest version: {_files(compacted_files)} compacted, and the K versions' "
        f"{_files(runs)} as runs",
    ]


def _files(files: Sequence[DataFile]) -> str:
    size = sum(f.size_bytes for f in files)
    return f"{len(files)} files, {sum(f.row_count for f in files):,} rows, {size / 2**20:.1f} MiB"


# ------------------------------------------------------------------------------- timing


def calls(setup: Setup) -> dict[str, Callable[[], int]]:
    """The reads compared, as a user would call them; each returns the rows it read."""
    table = setup.table
    return {
        SCAN: lambda: table.scan().to_arrow().num_rows,
        CHANGES_K: lambda: table.changes(setup.first).num_rows,
        READER_K: lambda: sum(b.num_rows for b in table.changes_reader(setup.first)),
        CHANGES_1: lambda: table.changes(setup.latest).num_rows,
    }


def measure(setup: Setup, repeats: int) -> Timings:
    """Every call once to warm up, then ``repeats`` rounds, the order rotating per round."""
    timings = Timings()
    jobs = list(calls(setup).items())
    for name, fn in jobs:  # warm-up: page cache, imports, thread pools
        timings.rows[name] = fn()
    for round_ in range(repeats):
        shift = round_ % len(jobs)
        for name, fn in jobs[shift:] + jobs[:shift]:
            cpu = time.process_time()
            timings.wall.setdefault(name, []).append(timed(fn))
            timings.cpu.setdefault(name, []).append(time.process_time() - cpu)
        progress(f"round {round_ + 1}/{repeats}")
    return timings


# ------------------------------------------------------------------------------- report


def render(args: argparse.Namespace, setup: Setup, timings: Timings) -> list[str]:
    k = args.versions
    title = (
        f"#### {args.rows:,} keys, {args.buckets} buckets; K = {k} versions each changing "
        f"{args.changed:.1%} of the keys"
    )
    base, cpu_base = median_ms(timings.wall[SCAN]), median_ms(timings.cpu[SCAN])
    rows = [
        "| read | rows | p50 ms | min ms | max ms | vs scan (p50) | CPU p50 ms | CPU vs scan |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds in timings.wall.items():
        p50, cpu = median_ms(seconds), median_ms(timings.cpu[name])
        rows.append(
            f"| {name} | {timings.rows[name]:,} | {p50:.0f} | {min(seconds) * 1000:.0f} | "
            f"{max(seconds) * 1000:.0f} | {p50 / base:.2f}x | {cpu:.0f} | {cpu / cpu_base:.2f}x |"
        )
    one = median_ms(timings.wall[CHANGES_1]) / base
    many = median_ms(timings.wall[CHANGES_K]) / base
    verdict = "met" if one <= GOAL_RATIO else "MISSED"
    goal = [
        f"- **one version's changes / full scan = {one:.2f}x** (p50); goal <= {GOAL_RATIO}x "
        f"with {args.changed:.0%} of the keys changed: **{verdict}**",
        f"- K = {k} versions / full scan = {many:.2f}x; {many / k:.3f}x per version "
        f"(proportional to the changed rows would be <= {GOAL_RATIO * k:.1f}x for K = {k})",
    ]
    return [title, "", *(f"- {f}" for f in setup.facts), "", *rows, "", *goal]


def _argv_text(args: argparse.Namespace) -> list[str]:
    return [
        f"--rows {args.rows}",
        f"--chunk {args.chunk}",
        f"--buckets {args.buckets}",
        f"--versions {args.versions}",
        f"--changed {args.changed:g}",
        f"--inserts {args.inserts:g}",
        f"--repeats {args.repeats}",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
