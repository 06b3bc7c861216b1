"""File lists as columns: how a plan carries a million files without a million Python objects.

A commit row's file ops reach the client as a manifest (migration 0008): one tab-separated line
per op, parsed by pyarrow's CSV reader into columns. Snapshots are folded on those columns
(:func:`fold_ops`), and a :class:`FileManifest` turns rows into :class:`~catalog.model.DataFile`
objects only for the callers that ask for them (readers of a few files, the commit protocol).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from catalog.model import ColumnStats, DataFile, FileAction, StatValue, VectorRef

#: Columns of a manifest line, in order (see migrations 0008 and 0012). ``vector`` is the
#: entry's :class:`~catalog.model.VectorRef` as JSON text, empty when it has none; ``resolved``
#: is null for entries that do not say.
OPS_SCHEMA = pa.schema(
    [
        pa.field("action", pa.string()),
        pa.field("path", pa.string()),
        pa.field("size_bytes", pa.int64()),
        pa.field("row_count", pa.int64()),
        pa.field("schema_id", pa.int32()),
        pa.field("stats", pa.string()),
        pa.field("vector", pa.string()),
        pa.field("resolved", pa.bool_()),
    ]
)
#: Columns of a file list: the ops without their action.
FILES_SCHEMA = pa.schema([f for f in OPS_SCHEMA if f.name != "action"])

# one thread and large blocks: cheapest on a shared 2-core machine (blocks of 1 MB cost ~4x)
_READ = pacsv.ReadOptions(column_names=OPS_SCHEMA.names, use_threads=False, block_size=1 << 26)
_PARSE = pacsv.ParseOptions(delimiter="\t", quote_char=False, escape_char=False)
_CONVERT = pacsv.ConvertOptions(
    column_types=dict(zip(OPS_SCHEMA.names, OPS_SCHEMA.types, strict=True)),
    strings_can_be_null=False,
)


@dataclass(frozen=True)
class FileManifest:
    """Files in columns (:data:`FILES_SCHEMA`), in commit order; stats kept as JSON text
    (``{column: [min, max, null_count]}``, see migration 0008)."""

    table: pa.Table

    @classmethod
    def empty(cls) -> FileManifest:
        return cls(FILES_SCHEMA.empty_table())

    @classmethod
    def of(cls, files: Iterable[DataFile]) -> FileManifest:
        """The columnar form of DataFile objects (for plans built by hand, as tests do)."""
        files = list(files)
        return cls(
            pa.table(
                {
                    "path": [f.path for f in files],
                    "size_bytes": [f.size_bytes for f in files],
                    "row_count": [f.row_count for f in files],
                    "schema_id": [f.schema_id for f in files],
                    "stats": [_stats_json(f) for f in files],
                    "vector": [f.vector.model_dump_json() if f.vector else "" for f in files],
                    "resolved": [f.resolved for f in files],
                },
                schema=FILES_SCHEMA,
            )
        )

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def slice(self, offset: int, length: int) -> FileManifest:
        return FileManifest(self.table.slice(offset, length))

    @property
    def paths(self) -> list[str]:
        return self.table.column("path").to_pylist()  # type: ignore[no-any-return]

    @property
    def row_count(self) -> int:
        return int(pc.sum(self.table.column("row_count")).as_py() or 0)

    @property
    def size_bytes(self) -> int:
        return int(pc.sum(self.table.column("size_bytes")).as_py() or 0)

    def data_files(self) -> tuple[DataFile, ...]:
        """The files as DataFile objects, built without validation: they were validated when
        committed, and validating again is what made planning cost ~20 us a file."""
        columns = [self.table.column(name).to_pylist() for name in FILES_SCHEMA.names]
        return tuple(
            DataFile.model_construct(
                path=path,
                size_bytes=size,
                row_count=rows,
                schema_id=schema_id,
                stats={
                    name: ColumnStats.model_construct(min=lo, max=hi, null_count=nulls)
                    for name, (lo, hi, nulls) in _load_stats(stats).items()
                },
                vector=VectorRef.model_validate_json(vector) if vector else None,
                resolved=resolved,
            )
            for path, size, rows, schema_id, stats, vector, resolved in zip(*columns, strict=True)
        )


def vectored(manifest: FileManifest) -> npt.NDArray[np.bool_] | None:
    """Per file, whether its entry has a deletion vector; None when none has. Every plan asks,
    so the common answer comes without a pass over the files: a column of empty strings holds
    no character data at all."""
    column = manifest.table.column("vector")
    if all(not (chunk.buffers()[2] or b"") for chunk in column.chunks):
        return None
    return np.asarray(pc.not_equal(column, "").to_numpy(zero_copy_only=False), dtype=np.bool_)


def _load_stats(text: str) -> dict[str, tuple[StatValue, StatValue, int]]:
    """Stats as stored; jsonb writes a float such as 1e30 with all its digits, and orjson
    reads a number past 64 bits back as the float it was."""
    found: dict[str, tuple[StatValue, StatValue, int]] = orjson.loads(text)  # lists, unpacked
    return found


def _stats_json(file: DataFile) -> str:
    return orjson.dumps({k: [v.min, v.max, v.null_count] for k, v in file.stats.items()}).decode()


def parse_ops(blobs: Sequence[bytes]) -> pa.Table:
    """The ops of several manifests, concatenated in order, as :data:`OPS_SCHEMA` columns.

    A path arrives as a JSON string when it holds a tab or newline or starts with a quote
    (migration 0008): only then is the column decoded in Python.
    """
    data = b"".join(blobs)
    if not data:
        return OPS_SCHEMA.empty_table()
    # open_csv, not read_csv: read_csv makes SIGINT/SIGTERM cancel the parse when the process
    # has handlers for them, so a service asked to stop would fail a plan with ArrowCancelled
    # instead of finishing it and stopping cleanly
    reader = pacsv.open_csv(
        pa.py_buffer(data), read_options=_READ, parse_options=_PARSE, convert_options=_CONVERT
    )
    table = reader.read_all()
    paths = table.column("path")
    if not pc.any(pc.starts_with(paths, '"')).as_py():
        return table
    paths = pa.chunked_array([pa.array([_path(p) for p in paths.to_pylist()], pa.string())])
    return table.set_column(1, "path", paths)


def _path(field: str) -> str:
    return str(json.loads(field)) if field.startswith('"') else field


#: Ops folded by replaying them in Python, below the columnar fold's fixed cost: its group-by
#: and join cost ~3 ms however few the ops, and a small table's reset op (the held table of
#: ``transactions: consistent``: a dozen ops a commit) paid that on the batch's critical path.
SMALL_FOLD = 256


def _replayed(ops: pa.Table, groups: npt.NDArray[np.int64]) -> list[int]:
    """The rows :func:`fold_ops` keeps, by the replay its docstring names: per group, an
    insertion-ordered dict of path -> the row of its last add."""
    paths = ops.column("path").to_pylist()
    adds = pc.equal(ops.column("action"), FileAction.ADD.value).to_pylist()
    rows: list[int] = []
    live: dict[str, int] = {}
    previous = None
    for at, (group, path, add) in enumerate(zip(groups.tolist(), paths, adds, strict=True)):
        if group != previous:
            rows += live.values()
            live, previous = {}, group
        if add:
            live[path] = at
        else:
            live.pop(path, None)
    return rows + list(live.values())


def fold_ops(
    ops: pa.Table, groups: npt.NDArray[np.int64]
) -> tuple[FileManifest, npt.NDArray[np.int64]]:
    """The live files of each group (a partition snapshot) from its ops in commit order.

    ``groups[i]`` names the snapshot op ``i`` belongs to; ops of a snapshot are in commit order.
    Same result as replaying the ops into an insertion-ordered dict keyed by path: a path is
    live if its last op adds it; it keeps the place of the first add after its last delete and
    the entry of its last add. Returns the live files (grouped, in that order) and their groups.
    """
    if ops.num_rows == 0:
        return FileManifest.empty(), np.zeros(0, np.int64)
    if ops.num_rows <= SMALL_FOLD:
        kept = np.array(_replayed(ops, groups), np.int64)
        return FileManifest(ops.take(pa.array(kept)).drop_columns(["action"])), groups[kept]
    keys = pa.table(
        {"g": groups, "path": ops.column("path"), "seq": np.arange(ops.num_rows, dtype=np.int64)}
    )
    is_add = pc.equal(ops.column("action"), FileAction.ADD.value)
    adds = keys
    if not pc.all(is_add).as_py():
        last_delete = (
            keys.filter(pc.invert(is_add))
            .group_by(["g", "path"], use_threads=False)
            .aggregate([("seq", "max")])
        )
        adds = keys.filter(is_add).join(last_delete, ["g", "path"], join_type="left outer")
        after = pc.or_kleene(
            pc.is_null(adds.column("seq_max")),
            pc.greater(adds.column("seq"), adds.column("seq_max")),
        )
        adds = adds.filter(after).drop_columns(["seq_max"])
    if adds.num_rows == ops.num_rows and not _has_duplicates(adds):
        return FileManifest(ops.drop_columns(["action"])), groups
    if _has_duplicates(adds):
        spans = adds.group_by(["g", "path"], use_threads=False).aggregate(
            [("seq", "min"), ("seq", "max")]
        )
        order = np.argsort(spans.column("seq_min").to_numpy(), kind="stable")
        rows = spans.column("seq_max").to_numpy()[order]
    else:
        rows = np.sort(adds.column("seq").to_numpy())
    live = ops.take(pa.array(rows)).drop_columns(["action"])
    return FileManifest(live), groups[rows]


def _has_duplicates(adds: pa.Table) -> bool:
    """Whether a snapshot adds one path twice (never, when writers name files uniquely)."""
    if adds.num_rows < 2:
        return False
    paths = adds.column("path")
    # unique, not count_distinct: the same hash pass, yet half the time (0.11 s against 0.22 s
    # for 1M paths, pyarrow 26), and a fraction of a grouped count
    if len(pc.unique(paths)) == adds.num_rows:
        return False
    distinct = adds.group_by(["g", "path"], use_threads=False).aggregate([])
    return bool(distinct.num_rows != adds.num_rows)
