"""The shared workload: which commit adds which tiny Parquet file, identical for every system.

Each commit adds exactly one already-written 10-row Parquet file to the single partition
``day=1``. Commit ``i`` (0-based) adds the file ``f{i:06d}.parquet``; with W writers, writer ``w``
makes commits ``w, w + W, w + 2W, ...``, so every system sees the same commit ids and a lost
commit can be named by its id. The files are written before any timing starts: the benchmark
measures committing metadata, not writing data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_FILE = 10
DAY = 1
PARTITION_DIR = f"day={DAY}"

#: Table schema shared by all systems; ``day`` is the (identity) partition column.
TABLE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("value", pa.float64()),
        pa.field("day", pa.int32()),
    ]
)

_FILE_RE = re.compile(r"f(\d{6})\.parquet$")


@dataclass(frozen=True)
class FileFacts:
    """What a committer needs to describe a file without reading it again."""

    size_bytes: int
    row_count: int
    #: column -> (min, max, null count), as every system records per-file statistics.
    stats: dict[str, tuple[int | float, int | float, int]]


def file_name(commit_id: int) -> str:
    return f"f{commit_id:06d}.parquet"


def commit_id_of(path: str) -> int:
    """Inverse of :func:`file_name`, for mapping the files a table holds back to commit ids."""
    found = _FILE_RE.search(path)
    if found is None:
        raise ValueError(f"not a benchmark file: {path!r}")
    return int(found.group(1))


def writer_items(commits: int, writers: int, writer_index: int) -> range:
    """The commit ids one writer makes: interleaved so all writers share the history evenly."""
    return range(writer_index, commits, writers)


def sample_table(*, with_partition_column: bool) -> pa.Table:
    """The 10 rows every file holds (Delta keeps partition values out of its files)."""
    columns: dict[str, pa.Array] = {
        "id": pa.array(range(ROWS_PER_FILE), pa.int64()),
        "value": pa.array([float(i) / 2 for i in range(ROWS_PER_FILE)], pa.float64()),
    }
    if with_partition_column:
        columns["day"] = pa.array([DAY] * ROWS_PER_FILE, pa.int32())
    return pa.table(columns)


def write_files(
    folder: Path, commits: int, *, with_partition_column: bool = True
) -> tuple[FileFacts, Sequence[Path]]:
    """Write one tiny Parquet file and hard-link it under the ``commits`` distinct names.

    Hard links give every commit its own path (a table must never hold the same path twice)
    at the cost of one write, so setting up 10,000 files takes a second, not minutes.
    """
    folder.mkdir(parents=True, exist_ok=True)
    data = sample_table(with_partition_column=with_partition_column)
    first = folder / file_name(0)
    pq.write_table(data, first)
    paths = [first]
    for commit_id in range(1, commits):
        path = folder / file_name(commit_id)
        os.link(first, path)
        paths.append(path)
    return _facts(data, first.stat().st_size), paths


def _facts(data: pa.Table, size: int) -> FileFacts:
    stats: dict[str, tuple[int | float, int | float, int]] = {}
    for name in data.column_names:
        values = data.column(name).to_pylist()
        stats[name] = (min(values), max(values), data.column(name).null_count)
    return FileFacts(size_bytes=size, row_count=data.num_rows, stats=stats)
