"""Merge-on-read of one CDC bucket held in N runs vs the same bucket compacted into one file.

Workload: ``--rows`` change rows split evenly over ``--runs`` merge runs of one bucket. The
first run inserts new keys; in every later run ``--updates`` of the rows update keys written by
earlier runs (chosen at random), the rest insert new keys, and ``--deletes`` of the rows delete
earlier keys. Every run is prepared like an ingest batch (deduplicated, key-sorted, row kind) and
written with the project's writer. The compacted baseline is the merged result of those runs,
written as one key-sorted file. Both sides are read in full with the project's readers; each
timing is the median of ``--repeats`` runs after one warm-up (files in the OS page cache).

    python3 bench/read/merge_vs_compacted.py [--rows 1000000] [--runs 10] [--updates 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from catalog.files import (
    merge_runs,
    prepare_merge_run,
    read_files,
    read_merged,
    write_data_file,
)
from catalog.model import ROW_KIND_COLUMN, DataFile

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("quantity", pa.int32()),
        pa.field("updated_at", pa.timestamp("us", tz="UTC")),
        pa.field("status", pa.string()),
    ]
)
STATUSES = np.array(["new", "paid", "shipped", "delivered", "returned"])


def _payload(keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(keys)
    customers = np.char.add("customer-", rng.integers(0, 10**9, n).astype(str))
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "customer": pa.array(customers),
            "amount": pa.array(rng.random(n) * 1000),
            "quantity": pa.array(rng.integers(1, 100, n, dtype=np.int32)),
            "updated_at": pa.array(
                rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, n),
                pa.timestamp("us", tz="UTC"),
            ),
            "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), n)]),
        },
        schema=SCHEMA,
    )


def _run_tables(args: argparse.Namespace, rng: np.random.Generator) -> Iterator[pa.Table]:
    per_run = args.rows // args.runs
    next_key = 0
    for run in range(args.runs):
        updates = 0 if run == 0 else int(per_run * args.updates)
        deletes = 0 if run == 0 else int(per_run * args.deletes)
        inserts = per_run - updates - deletes
        old = rng.choice(next_key, updates + deletes, replace=False) if run else np.array([])
        new = np.arange(next_key, next_key + inserts)
        next_key += inserts
        upserts = _payload(np.concatenate([old[:updates], new]).astype(np.int64), rng)
        kinds = pa.array(np.zeros(upserts.num_rows, np.int8))
        changes = upserts.append_column(ROW_KIND_COLUMN, kinds)
        if deletes:
            gone = _payload(old[updates:].astype(np.int64), rng)
            gone = gone.append_column(ROW_KIND_COLUMN, pa.array(np.ones(deletes, np.int8)))
            changes = pa.concat_tables([changes, gone])
        yield prepare_merge_run(changes, ["id"])


def _timed(fns: list[Callable[[], int]], repeats: int) -> list[tuple[list[float], int]]:
    """Time each function ``repeats`` times, interleaved so both sides see the same machine."""
    results: list[tuple[list[float], int]] = [([], fn()) for fn in fns]  # warm-up
    for _ in range(repeats):
        for fn, (times, _rows) in zip(fns, results, strict=True):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return results


def _count(batches: Iterator[pa.RecordBatch]) -> int:
    return sum(b.num_rows for b in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="change rows over all runs")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--updates", type=float, default=0.5, help="share of updates per run")
    parser.add_argument("--deletes", type=float, default=0.0, help="share of deletes per run")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--ordered", action="store_true", help="merge output in key order")
    args = parser.parse_args()
    rng = np.random.default_rng(42)
    with tempfile.TemporaryDirectory() as location:
        tables = list(_run_tables(args, rng))
        runs: list[DataFile] = [
            write_data_file(t, location, bucket=0, sorted_by=["id"]) for t in tables
        ]
        compacted_table = merge_runs(tables, ["id"], ordered=True).drop_columns([ROW_KIND_COLUMN])
        compacted = write_data_file(compacted_table, location, bucket=0, sorted_by=["id"])

        def merged() -> int:
            return _count(read_merged(location, runs, SCHEMA, ["id"], ordered=args.ordered))

        def plain() -> int:
            return _count(read_files(location, [compacted], SCHEMA))

        (merge_times, n_merge), (plain_times, n_plain) = _timed([merged, plain], args.repeats)
    assert n_merge == n_plain, (n_merge, n_plain)
    t_merge, t_plain = statistics.median(merge_times), statistics.median(plain_times)
    run_rows = sum(r.row_count for r in runs)
    run_mib = sum(r.size_bytes for r in runs) / 2**20
    print(f"runs: {len(runs)} files, {run_rows:,} change rows, {run_mib:.1f} MiB")
    print(
        f"compacted: 1 file, {compacted.row_count:,} rows, {compacted.size_bytes / 2**20:.1f} MiB"
    )
    print(
        f"merge-on-read ({len(runs)} runs): median {t_merge * 1000:7.1f} ms, "
        f"best {min(merge_times) * 1000:7.1f} ms  ({n_merge:,} rows out)"
    )
    print(
        f"compacted read (1 file):  median {t_plain * 1000:7.1f} ms, "
        f"best {min(plain_times) * 1000:7.1f} ms  ({n_plain:,} rows out)"
    )
    print(
        f"ratio merge / compacted:  median {t_merge / t_plain:.2f}x, "
        f"best {min(merge_times) / min(plain_times):.2f}x; "
        f"rows decoded {run_rows / compacted.row_count:.2f}x"
    )


if __name__ == "__main__":
    main()
