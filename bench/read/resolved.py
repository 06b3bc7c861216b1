"""Reads of resolved CDC buckets (issue 49 step 4, design D6) against their baselines.

Two questions, each answered by paired rounds (both sides timed in the same round, order
alternating) and reported as the median per-round ratio with its min-max over the rounds:

* **tail**: a bucket whose base (``--rows`` keys, one key-sorted file, resolved) has a pending
  run of ``--tail`` of the rows (half updates of random base keys, half new keys), read as the
  reader reads it - the base scanned plain, the run merged against it - vs the compacted read of
  the same rows (the merged result in one file). Goal (issue 49): <= 1.1x.
* **delete**: the same base after a CDC DELETE of ``--deleted`` of its keys (scattered), the
  delete run resolved - the base's vector marks the deleted rows, the run's tombstones are
  marked too, so the bucket is a plain scan minus vectors - vs the read of the base before the
  delete. Goal: <= 1.1x. The same delete still pending (the tail merge) is timed beside it.

Resolution here is the brute-force reference resolver's (``tests/fixtures/reference_resolver.py``:
every non-winning row and every delete row marked), not helper-b1's resolver: the reader's
cost depends on the marks, not on who wrote them. Files are written with the project's writer
and read with the project's readers, in the OS page cache (one warm-up read each).

    python3 bench/read/resolved.py [--rows 1000000] [--tail 0.01] [--deleted 0.01] [--rounds 9]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from bench.read.merge_vs_compacted import SCHEMA, _payload
from catalog.files import (
    merge_runs,
    prepare_merge_run,
    read_files,
    read_merged,
    write_data_file,
)
from catalog.files.vectors import encode_vector
from catalog.model import ROW_KIND_COLUMN, DataFile, VectorRef
from tests.fixtures.reference_resolver import marks_of


def _count(batches: Iterator[pa.RecordBatch]) -> int:
    return sum(b.num_rows for b in batches)


def _changes(upserts: pa.Table, deletes: pa.Table | None = None) -> pa.Table:
    kinds = pa.array(np.zeros(upserts.num_rows, np.int8))
    changes = upserts.append_column(ROW_KIND_COLUMN, kinds)
    if deletes is not None:
        kinds = pa.array(np.ones(deletes.num_rows, np.int8))
        changes = pa.concat_tables([changes, deletes.append_column(ROW_KIND_COLUMN, kinds)])
    return prepare_merge_run(changes, ["id"])


def _resolved(files: list[DataFile], tables: list[pa.Table]) -> list[DataFile]:
    """The files flagged resolved, each with the reference resolver's marks as its vector."""
    out = []
    for file, marks in zip(files, marks_of(tables, ["id"], None), strict=True):
        vector = None
        if marks:
            inline = base64.b64encode(encode_vector(marks)).decode("ascii")
            vector = VectorRef(cardinality=len(marks), inline=inline)
        out.append(file.model_copy(update={"vector": vector, "resolved": True}))
    return out


def _paired(
    a: Callable[[], int], b: Callable[[], int], rounds: int, *, same_rows: bool = True
) -> tuple[list[float], list[float], int]:
    """Per-round ratios a / b of wall time and of process CPU time (all threads: the work done,
    which other load on a shared machine disturbs less), after one warm-up read each, the two
    sides alternating which goes first; and the rows ``a`` reads."""
    rows = a()
    assert b() == rows or not same_rows, "both sides must read the same rows"
    wall, cpu = [], []
    for i in range(rounds):
        times: dict[str, tuple[float, float]] = {}
        for name, fn in (("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a)):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[name] = (time.perf_counter() - start, time.process_time() - start_cpu)
        wall.append(times["a"][0] / times["b"][0])
        cpu.append(times["a"][1] / times["b"][1])
    return wall, cpu, rows


def _report(label: str, wall: list[float], cpu: list[float], rows: int) -> None:
    def figure(ratios: list[float]) -> str:
        inner = sorted(ratios)[len(ratios) // 4 : len(ratios) - len(ratios) // 4]
        return (
            f"median {statistics.median(ratios):.2f}x "
            f"(interquartile {inner[0]:.2f}-{inner[-1]:.2f}x)"
        )

    rounds = len(wall)
    print(f"{label}: wall {figure(wall)}, CPU {figure(cpu)}; {rounds} paired rounds, {rows:,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="keys in the base")
    parser.add_argument("--tail", type=float, default=0.01, help="pending run, share of rows")
    parser.add_argument("--deleted", type=float, default=0.01, help="DELETE, share of keys")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(49)
    n = args.rows
    with tempfile.TemporaryDirectory() as location:

        def write(table: pa.Table) -> DataFile:
            return write_data_file(table, location, bucket=0, sorted_by=["id"])

        base_table = _changes(_payload(np.arange(n, dtype=np.int64), rng))
        base = write(base_table)
        tail_rows = int(n * args.tail)
        updated = rng.choice(n, tail_rows // 2, replace=False)
        fresh = np.arange(n, n + tail_rows - len(updated))
        tail_table = _changes(_payload(np.concatenate([updated, fresh]).astype(np.int64), rng))
        tail = write(tail_table)
        compacted = write(
            merge_runs([base_table, tail_table], ["id"], ordered=True).drop_columns(
                [ROW_KIND_COLUMN]
            )
        )
        (resolved_base,) = _resolved([base], [base_table])

        def tail_read() -> int:
            return _count(read_merged(location, [resolved_base, tail], SCHEMA, ["id"]))

        def compacted_read() -> int:
            return _count(read_files(location, [compacted], SCHEMA))

        gone = rng.choice(n, int(n * args.deleted), replace=False).astype(np.int64)
        delete_table = _changes(_payload(gone[:0], rng), _payload(gone, rng))
        delete_run = write(delete_table)
        after = _resolved([base, delete_run], [base_table, delete_table])

        def before_read() -> int:
            return _count(read_files(location, [base], SCHEMA))

        def after_resolved() -> int:  # fully resolved: the plan's plain scan minus vectors
            return _count(read_files(location, after, SCHEMA))

        def after_pending() -> int:  # the delete run not yet resolved: the tail merge
            return _count(read_merged(location, [resolved_base, delete_run], SCHEMA, ["id"]))

        assert after_resolved() == after_pending() == n - len(gone)
        print(f"base: 1 file, {n:,} rows, {base.size_bytes / 2**20:.1f} MiB")
        _report(
            f"tail of {tail.row_count:,} changes / compacted",
            *_paired(tail_read, compacted_read, args.rounds),
        )
        _report(
            f"after a resolved DELETE of {len(gone):,} keys / before",
            *_paired(after_resolved, before_read, args.rounds, same_rows=False),
        )
        _report(
            "the same DELETE pending (tail merge) / before",
            *_paired(after_pending, before_read, args.rounds, same_rows=False),
        )


if __name__ == "__main__":
    main()
