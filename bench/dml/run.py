"""DELETE of 1% of rows by predicate: lakestream ``Table.delete(where=)`` vs delta-rs
``DeltaTable.delete(predicate)`` on the same data in the same run, then the full read after.

Data: ``--rows`` order rows (:data:`bench.common.SCHEMA`, ids in insertion order) written in
chunks of ``--chunk`` rows, as an append table and as a CDC table (4 hash buckets, compacted to
one file per bucket, as the compactor keeps it), and as one Delta table (delta-rs has no keyed
table: the same Delta table is the peer of both). Predicates, each hitting ~1% of rows:

* ``clustered``: ``id < rows/100`` - the rows of one load, so statistics prune the other files;
* ``scattered``: ``quantity = 7`` - 1/99 of the rows of every file.

Each case runs ``--repeats`` times per system, alternating which system goes first, and each
run starts from the same table: lakestream commits an ``update`` that puts back the files the
statement replaced (untimed), delta-rs ``restore``s the version. Times are medians. After the
last run of each case, the full read of the table (``scan().to_arrow()``, all columns) is timed
against a read of a table holding the same rows written fresh (no deleted rows anywhere).

    python -m bench.dml.run [--rows 10000000] [--chunk 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.common import (
    PRIMARY_KEY,
    SCHEMA,
    bench_catalog,
    environment,
    load_average,
    payload,
    progress,
    quiet_logging,
    scratch_dir,
)
from bench.read.small_files import ratio_interval
from catalog import Catalog, CommitOp, FileAction, FileOp, PartitionCommit, Table
from jobs.table_compact import compact_table

#: Paired rounds of the read after against the fresh read.
READ_ROUNDS = 6
CASES = {"clustered": None, "scattered": ("quantity", "=", 7)}  # clustered: set from --rows


@dataclass
class Case:
    table_kind: str
    name: str
    rows_deleted: int = 0
    lakestream_s: list[float] | None = None
    delta_s: list[float] | None = None
    read_after_s: float = 0.0
    read_fresh_s: float = 0.0
    delta_read_after_s: float = 0.0
    files_read: int = 0
    files_replaced: int = 0
    vectors: int = 0
    read_ratios: list[float] | None = None
    """Per paired round: read after / fresh read."""

    @property
    def ratio(self) -> float:
        assert self.lakestream_s and self.delta_s
        return statistics.median(self.lakestream_s) / statistics.median(self.delta_s)

    @property
    def paired(self) -> str:
        """Geometric mean of the per-repeat delete ratios (each repeat runs both systems) and
        its 95% interval."""
        assert self.lakestream_s and self.delta_s
        return _interval([a / b for a, b in zip(self.lakestream_s, self.delta_s, strict=True)])

    @property
    def read_paired(self) -> str:
        assert self.read_ratios
        return _interval(self.read_ratios)


def _interval(ratios: list[float]) -> str:
    mean, low, high = ratio_interval(ratios)
    return f"{mean:.2f} ({low:.2f}-{high:.2f})"


def chunks(rows: int, size: int) -> list[pa.Table]:
    rng = np.random.default_rng(7)
    return [
        payload(np.arange(start, min(start + size, rows), dtype=np.int64), rng, i)
        for i, start in enumerate(range(0, rows, size))
    ]


def restore(table: Table, base: int) -> None:
    """Put back the entries the statement after ``base`` changed: the files it replaced, and
    the files it named again with a deletion vector (their base entry, without it). One
    untimed ``update``."""
    before = {
        p.partition_desc: {f.path: f for f in p.files} for p in table.plan(version=base).partitions
    }
    now = {p.partition_desc: {f.path: f for f in p.files} for p in table.plan().partitions}
    ops: dict[str, list[FileOp]] = defaultdict(list)
    for desc in before.keys() | now.keys():
        old, new = before.get(desc, {}), now.get(desc, {})
        ops[desc] += [
            FileOp(action=FileAction.DELETE, file=f) for p, f in new.items() if old.get(p) != f
        ]
        ops[desc] += [
            FileOp(action=FileAction.ADD, file=f) for p, f in old.items() if new.get(p) != f
        ]
    parts = [PartitionCommit(partition_desc=d, ops=tuple(o)) for d, o in ops.items() if o]
    if parts:
        table.commit(CommitOp.UPDATE, parts, base_version=table.current_version())


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run_case(
    case: Case, table: Table, delta_path: Path, predicate: tuple[str, str, object], repeats: int
) -> None:
    delta_sql = f"{predicate[0]} {predicate[1]} {predicate[2]}"
    base = table.current_version()
    delta_base = DeltaTable(str(delta_path)).version()
    case.lakestream_s, case.delta_s = [], []
    for repeat in range(repeats):
        order = ["lakestream", "delta"] if repeat % 2 == 0 else ["delta", "lakestream"]
        last = repeat == repeats - 1
        for system in order:
            if system == "lakestream":
                seconds, result = timed(lambda: table.delete(where=[predicate]))
                case.lakestream_s.append(seconds)
                case.rows_deleted = result.rows  # type: ignore[attr-defined]
                case.files_read = result.files_read  # type: ignore[attr-defined]
                case.files_replaced = result.files_replaced  # type: ignore[attr-defined]
                case.vectors = result.vectors_written  # type: ignore[attr-defined]
                if not last:
                    restore(table, base)
            else:
                seconds, _ = timed(partial(DeltaTable(str(delta_path)).delete, delta_sql))
                case.delta_s.append(seconds)
                if not last:
                    DeltaTable(str(delta_path)).restore(delta_base)
        progress(
            f"  {case.table_kind}/{case.name} run {repeat + 1}: "
            f"lakestream {case.lakestream_s[-1]:.2f}s, delta-rs {case.delta_s[-1]:.2f}s"
        )


def read_figures(
    case: Case, catalog: Catalog, table: Table, delta_path: Path, fresh_name: str
) -> None:
    case.read_after_s, after = timed(lambda: table.scan().to_arrow())
    assert isinstance(after, pa.Table)
    kept = after.num_rows
    if table.meta.is_cdc:
        fresh = catalog.create_table(fresh_name, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=4)
        for batch in after.sort_by("id").to_batches(max_chunksize=1_000_000):
            fresh.upsert(pa.Table.from_batches([batch]))
        compact_table(catalog, fresh_name)
    else:
        fresh = catalog.create_table(fresh_name, SCHEMA)
        fresh.append(after.sort_by("id"))
    del after
    reads, again, case.read_ratios = [], [], []
    for round_ in range(READ_ROUNDS):  # paired rounds, the order alternating
        pair = {}
        for name in ("after", "fresh") if round_ % 2 == 0 else ("fresh", "after"):
            source = table if name == "after" else fresh
            pair[name] = timed(lambda: source.scan().to_arrow())[0]  # noqa: B023 (called now)
        again.append(pair["after"])
        reads.append(pair["fresh"])
        case.read_ratios.append(pair["after"] / pair["fresh"])
    case.read_after_s = statistics.median(again)
    case.read_fresh_s = statistics.median(reads)
    delta_reads = [
        timed(lambda: DeltaTable(str(delta_path)).to_pyarrow_table())[0] for _ in range(3)
    ]
    case.delta_read_after_s = statistics.median(delta_reads)
    assert fresh.scan().count() == kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    quiet_logging()
    with (
        scratch_dir(None, keep=False, prefix="bench-dml-") as root,
        bench_catalog(root / "warehouse") as (catalog, pg_version),
    ):
        env = environment("bench.dml.run", _argv(args), pg_version)
        cases = run(catalog, root, args)
        print("\n".join(report(cases, args, env.lines(load_average()))))


def _argv(args: argparse.Namespace) -> list[str]:
    return ["--rows", str(args.rows), "--chunk", str(args.chunk), "--repeats", str(args.repeats)]


def run(catalog: Catalog, root: Path, args: argparse.Namespace) -> list[Case]:
    data = chunks(args.rows, args.chunk)
    predicates = {"clustered": ("id", "<", args.rows // 100), "scattered": CASES["scattered"]}
    progress(f"writing {args.rows:,} rows: append table, CDC table (compacted), Delta tables")
    append = catalog.create_table("bench.events", SCHEMA)
    cdc = catalog.create_table("bench.orders", SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=4)
    delta_path = root / "delta"
    for chunk in data:
        append.append(chunk)
        cdc.upsert(chunk)
        write_deltalake(str(delta_path), chunk, mode="append")
    compact_table(catalog, "bench.orders")
    del data
    cases = []
    for kind, table in (("append", append), ("cdc", cdc)):
        for name, predicate in predicates.items():
            assert predicate is not None
            case = Case(kind, name)
            copy = root / f"delta-{kind}-{name}"
            shutil.copytree(delta_path, copy)
            base = table.current_version()
            run_case(case, table, copy, predicate, args.repeats)
            read_figures(case, catalog, table, copy, f"bench.fresh_{kind}_{name}")
            restore(table, base)
            shutil.rmtree(copy)
            cases.append(case)
    return cases


def report(cases: list[Case], args: argparse.Namespace, env: list[str]) -> list[str]:
    lines = [
        f"### DELETE of ~1% of {args.rows:,} rows by predicate (median of {args.repeats})",
        "",
        *env,
        "",
        "| table | predicate | rows deleted | files read / replaced (vectors) | lakestream s "
        "| delta-rs s | ratio of medians | paired ratio (95%) (goal <= 0.5) | read after s "
        "| fresh read s | read ratio, paired (95%) (goal <= 1.1) | delta-rs read after s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in cases:
        assert c.lakestream_s and c.delta_s
        lines.append(
            f"| {c.table_kind} | {c.name} | {c.rows_deleted:,} | {c.files_read} / "
            f"{c.files_replaced} ({c.vectors}) | {statistics.median(c.lakestream_s):.2f} | "
            f"{statistics.median(c.delta_s):.2f} | {c.ratio:.2f} | {c.paired} | "
            f"{c.read_after_s:.2f} | {c.read_fresh_s:.2f} | {c.read_paired} | "
            f"{c.delta_read_after_s:.2f} |"
        )
    return lines


if __name__ == "__main__":
    main()
