"""Compaction benchmarks of issue 8: append compaction vs delta-rs, and a CDC steady state.

``append``: ``--appends`` appends of ``--rows`` rows into a lakestream append table and a
delta-rs table (the same batches), then one full compaction each, timed: lakestream through
``lakestream tables compact``'s code path (``compaction.rewrite.compact`` over
``plan_table(..., force=True)``), delta-rs ``optimize.compact()``. Fresh tables per repeat,
order rotating. Goal: lakestream at most 1.0x delta-rs.

``steady``: ``--commits`` upserts of ``--rows`` rows (50% updates) into a CDC table while the
compactor service runs beside the writer in a process of its own; every ``--every`` commits the
latest version is read and compared with a fully compacted copy of the same version. Goals: the
ratio stays <= 1.2x with no upward trend; reported with the compaction lag and the compactor's
CPU per ingested row.

    python -m bench.compact.run [--scenarios append steady] [--commits 1000] [--markdown out.md]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.common import (
    add_output_args,
    bench_server,
    emit_report,
    environment,
    load_average,
    progress,
    quiet_logging,
    scratch_dir,
)
from bench.compact.append import render_append, run_append
from bench.compact.report import render_steady
from bench.compact.steady import SteadyArgs, run_steady

SCENARIOS = ("append", "steady")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--appends", type=int, default=500, help="append: commits per table")
    parser.add_argument("--append-rows", type=int, default=1000, help="append: rows per commit")
    parser.add_argument("--repeats", type=int, default=3, help="append: fresh tables per system")
    parser.add_argument(
        "--append-target-mib",
        type=float,
        help="append: both systems' target file size (default: each's own, 128 / 100 MiB)",
    )
    parser.add_argument("--commits", type=int, default=1000, help="steady: upserts")
    parser.add_argument("--rows", type=int, default=1000, help="steady: rows per upsert")
    parser.add_argument("--updates", type=float, default=0.5, help="steady: share of updates")
    parser.add_argument("--buckets", type=int, default=4, help="steady: hash buckets")
    parser.add_argument("--every", type=int, default=50, help="steady: commits per checkpoint")
    parser.add_argument(
        "--interval",
        type=float,
        default=0.5,
        help="steady: seconds from one upsert's start to the next (0: back to back)",
    )
    parser.add_argument("--read-repeats", type=int, default=3, help="steady: reads per layout")
    parser.add_argument("--workers", type=int, default=1, help="steady: compactor workers")
    add_output_args(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    sections: list[str] = []
    with (
        scratch_dir(args.workdir, keep=args.keep, prefix="lakestream-bench-compact-") as work,
        bench_server(work / "warehouse") as server,
    ):
        env = environment("bench.compact.run", _argv_text(args), server.pg_version)
        if "append" in args.scenarios:
            progress("[append] building and compacting ...")
            target = int(args.append_target_mib * 2**20) if args.append_target_mib else None
            result = run_append(
                server.catalog,
                work,
                args.appends,
                args.append_rows,
                args.repeats,
                target_bytes=target,
            )
            sections += ["#### Append compaction vs deltalake", "", *render_append(result)]
            sections.append("")
        if "steady" in args.scenarios:
            steady = run_steady(server, work, _steady_args(args))
            sections += ["#### Steady state: CDC upserts with the compactor running", ""]
            sections += [*render_steady(steady), ""]
    text = "\n".join(["#### Setup", "", *env.lines(load_average()), "", *sections])
    emit_report(text, args.markdown)
    return 0


def _steady_args(args: argparse.Namespace) -> SteadyArgs:
    return SteadyArgs(
        commits=args.commits,
        rows=args.rows,
        updates=args.updates,
        buckets=args.buckets,
        every=args.every,
        interval=args.interval,
        read_repeats=args.read_repeats,
        workers=args.workers,
    )


def _argv_text(args: argparse.Namespace) -> list[str]:
    parts = ["--scenarios " + " ".join(args.scenarios)]
    if "append" in args.scenarios:
        parts += [
            f"--appends {args.appends}",
            f"--append-rows {args.append_rows}",
            f"--repeats {args.repeats}",
        ]
        if args.append_target_mib:
            parts.append(f"--append-target-mib {args.append_target_mib:g}")
    if "steady" in args.scenarios:
        parts += [
            f"--commits {args.commits}",
            f"--rows {args.rows}",
            f"--updates {args.updates:g}",
            f"--buckets {args.buckets}",
            f"--every {args.every}",
            f"--interval {args.interval:g}",
            f"--read-repeats {args.read_repeats}",
            f"--workers {args.workers}",
        ]
    return parts


if __name__ == "__main__":
    raise SystemExit(main())
