"""Maintenance keeps a streaming table bounded: catalog rows, warehouse files and commit time
over many commits, with maintenance against the same table without it, in the same run.

Two append tables (4 day partitions) get the same commits in turn: small appends (10 rows), a
compaction of every partition every ``--compact-every`` commits. The *maintained* table also
runs snapshot expiry (``--retain`` newest versions, no time window) and vacuum (no grace) every
``--maintain-every`` commits; the *baseline* never does. Every ``--report-every`` commits both
tables' figures are taken: their catalog rows (versions, partition versions, commit rows,
idempotency keys, cleanup entries), files in their warehouse directory, and the mean commit time
of the last window. At the end every retained version of the maintained table is read and
compared with the baseline's read of the same version (same commits, so the same rows).

    python -m bench.maint.run                   # 5,000 commits, retention 100
    python -m bench.maint.run --commits 500 --markdown /tmp/maint.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from bench.common import bench_catalog, emit_report, load_average, progress, quiet_logging
from bench.machine import cpu_model, git_head, ram_gib
from catalog import Catalog, Table
from compaction.planner import plan_table
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.float64())])
DAYS = [dt.date(2026, 11, 19) + dt.timedelta(days=d) for d in range(4)]
ZERO = dt.timedelta(0)


@dataclass
class Side:
    name: str
    table: Table
    maintain: bool
    commit_s: list[float] = field(default_factory=list)
    maintenance_s: list[float] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=5000)
    parser.add_argument("--retain", type=int, default=100)
    parser.add_argument("--maintain-every", type=int, default=100)
    parser.add_argument("--compact-every", type=int, default=50)
    parser.add_argument("--report-every", type=int, default=500)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    quiet_logging()
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp, bench_catalog(Path(tmp)) as (catalog, pg):
        sides = [
            Side("maintained", _table(catalog, "bench.maintained"), True),
            Side("baseline", _table(catalog, "bench.baseline"), False),
        ]
        rows = []
        for n in range(1, args.commits + 1):
            for side in sides if n % 2 else reversed(sides):  # alternate who goes first
                _commit(side, n)
                if n % args.compact_every == 0:
                    _compact(catalog, side.table)
                if side.maintain and n % args.maintain_every == 0:
                    started = time.perf_counter()
                    side.table.expire_versions(older_than=ZERO, retain_last=args.retain)
                    side.table.vacuum(older_than=ZERO)
                    side.maintenance_s.append(time.perf_counter() - started)
            if n % args.report_every == 0:
                rows.append((n, {s.name: _figures(catalog, s, args.report_every) for s in sides}))
                progress(f"{n} commits: {rows[-1][1]}")
        checked = _compare(sides, args.retain)
        text = _markdown(args, rows, sides, checked=checked, pg=pg, load_before=load_before)
    emit_report(text, args.markdown)


def _table(catalog: Catalog, name: str) -> Table:
    return catalog.create_table(
        name, SCHEMA, partition_by=["day"], properties={"compaction.min-file-num": "2"}
    )


def _commit(side: Side, n: int) -> None:
    data = pa.table(
        {
            "id": list(range(n * 10, n * 10 + 10)),
            "day": [DAYS[n % len(DAYS)]] * 10,
            "v": [float(n)] * 10,
        },
        schema=SCHEMA,
    )
    started = time.perf_counter()
    side.table.append(data)
    side.commit_s.append(time.perf_counter() - started)


def _compact(catalog: Catalog, table: Table) -> None:
    table.refresh()
    policy = CompactionPolicy.from_properties(table.meta.properties)
    for task in plan_table(table.meta, table.plan(), policy, force=True):
        compact(catalog, replace(task, task_id=uuid.uuid4()))


def _figures(catalog: Catalog, side: Side, window: int) -> dict[str, float]:
    table_id = side.table.meta.table_id
    out: dict[str, float] = {}
    for name in ("table_version", "partition_info", "data_commit_info", "cleanup_file"):
        found = catalog.store.fetch_one(
            f"SELECT count(*) AS n FROM {name} WHERE table_id = %(t)s",
            {"t": table_id},
        )
        out[name] = int(found["n"]) if found else 0
    keys = catalog.store.fetch_one(
        "SELECT count(*) AS n FROM commit_key WHERE result -> 'tables' @> %(t)s::jsonb",
        {"t": f'[{{"table_id": "{table_id}"}}]'},
    )
    out["commit_key"] = int(keys["n"]) if keys else 0
    root = Path(side.table.meta.location)
    out["files"] = sum(1 for p in root.rglob("*") if p.is_file())
    recent = side.commit_s[-window:]
    out["commit_ms"] = round(1000 * sum(recent) / len(recent), 2)
    return out


def _compare(sides: list[Side], retain: int) -> int:
    """Every retained version of the maintained table reads as the baseline's same version."""
    maintained, baseline = sides[0].table, sides[1].table
    latest = maintained.current_version()
    assert latest == baseline.current_version(), "the two tables got different commits"
    checked = 0
    for version in range(max(0, latest - retain + 1), latest + 1):
        a = maintained.scan(version=version).to_arrow().sort_by("id")
        b = baseline.scan(version=version).to_arrow().sort_by("id")
        if not a.equals(b):
            raise AssertionError(f"version {version} differs between the tables")
        checked += 1
    return checked


def _markdown(  # type: ignore[no-untyped-def]
    args, rows, sides, *, checked, pg, load_before
) -> str:
    load_after = load_average()
    lines = [
        "## Maintenance: bounded catalog and warehouse over many commits (`bench/maint/run.py`)",
        "",
        f"{args.commits:,} commits to each of two append tables (4 day partitions, 10-row "
        f"appends, a compaction of every partition every {args.compact_every} commits), "
        "taking turns commit by commit. The *maintained* table runs `expire_versions(older_than=0, "
        f"retain_last={args.retain})` and `vacuum(older_than=0)` every {args.maintain_every} "
        "commits; the *baseline* never does. Catalog rows are this table's (keys: those naming "
        "it); files: everything under its location; commit ms: mean `Table.append` time of the "
        "last window.",
        "",
        "```bash",
        " ".join(["python -m bench.maint.run", *sys.argv[1:]]),
        "```",
        "",
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; lakestream commit {git_head()}",
        f"- machine: {os.cpu_count()} CPUs ({cpu_model()}), {ram_gib():.0f} GiB RAM",
        f"- PostgreSQL {pg} (jobs.localpg: fsync off), Python {sys.version.split()[0]}, "
        f"pyarrow {pa.__version__}",
        f"- load average (1/5/15 min, shared machine): {load_before} at start, {load_after} at end",
        f"- check: every retained version of the maintained table ({checked}) reads exactly as "
        "the baseline's same version",
        "",
        "| commits | table | versions | partition versions | commit rows | keys | cleanup "
        "| files | commit ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, by_side in rows:
        for name, f in by_side.items():
            lines.append(
                f"| {n:,} | {name} | {f['table_version']:,} | {f['partition_info']:,} "
                f"| {f['data_commit_info']:,} | {f['commit_key']:,} | {f['cleanup_file']:,} "
                f"| {f['files']:,} | {f['commit_ms']} |"
            )
    runs = sides[0].maintenance_s
    lines += [
        "",
        f"Maintenance runs: {len(runs)}, mean {1000 * sum(runs) / max(1, len(runs)):.0f} ms "
        f"(expiry + vacuum), max {1000 * max(runs, default=0):.0f} ms.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
