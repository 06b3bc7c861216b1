"""Readers apply deletion vectors: a file reads as its rows minus the positions its vector marks,
positions counting the file's rows as written, whatever the projection, filter, row groups and
batch size (design D6, step 2)."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.pruning import Predicate
from catalog.files.reader import read_file_as_written, read_files, read_merged, read_whole_files
from catalog.files.vectors import encode_vector, keep_mask
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.manifest import FileManifest
from catalog.model import DataFile, VectorRef

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.int64()), ("tag", pa.string())])


def rows(n: int) -> pa.Table:
    ids = list(range(n))
    return pa.table(
        {"id": ids, "value": [(i * 37) % 101 for i in ids], "tag": [f"t{i % 5}" for i in ids]},
        schema=SCHEMA,
    )


def marked(file: DataFile, positions: set[int]) -> DataFile:
    inline = base64.b64encode(encode_vector(positions)).decode("ascii")
    return file.model_copy(update={"vector": VectorRef(cardinality=len(positions), inline=inline)})


@given(
    positions=st.lists(st.integers(0, 2**40), max_size=40).map(sorted),
    start=st.integers(0, 2**40),
    length=st.integers(0, 300),
)
def test_keep_mask_leaves_alive_exactly_the_unmarked_rows_of_the_range(
    positions: list[int], start: int, length: int
) -> None:
    array = np.unique(np.array(positions, dtype=np.uint64))
    keep = keep_mask(array, start, length)

    assert keep.tolist() == [start + i not in set(positions) for i in range(length)]


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 200),
    marks=st.sets(st.integers(0, 199), max_size=80),
    group_rows=st.integers(1, 64),
    batch_size=st.integers(1, 100),
    threshold=st.none() | st.integers(-1, 101),
    columns=st.none() | st.lists(st.sampled_from(SCHEMA.names), unique=True),
    as_manifest=st.booleans(),
    expression=st.booleans(),
)
def test_a_vectored_file_reads_as_its_rows_minus_the_marks_then_filtered(
    *,
    n: int,
    marks: set[int],
    group_rows: int,
    batch_size: int,
    threshold: int | None,
    columns: list[str] | None,
    as_manifest: bool,
    expression: bool,
) -> None:
    marks = {p for p in marks if p < n}
    data = rows(n)
    options = WriteOptions(fsync=False, row_group_rows=group_rows)
    with tempfile.TemporaryDirectory() as tmp:
        file = marked(write_data_file(data, tmp, options=options), marks)
        plain = write_data_file(rows(3), tmp, options=options)  # read beside it, unmasked
        files = [plain, file, plain]
        row_filter: pc.Expression | list[Predicate] | None = None
        if threshold is not None:
            predicate = Predicate("value", ">", threshold)
            row_filter = pc.field("value") > threshold if expression else [predicate]
        read = read_files(
            tmp,
            FileManifest.of(files) if as_manifest else files,
            SCHEMA,
            columns=columns,
            row_filter=row_filter,
            batch_size=batch_size,
            schema_id=0,
        )
        got = pa.Table.from_batches(list(read), schema=_project(columns))

    alive = data.filter(pa.array([i not in marks for i in range(n)], pa.bool_()))
    expected = pa.concat_tables([rows(3), alive, rows(3)])
    if threshold is not None:
        expected = expected.filter(pc.field("value") > threshold)
    assert got.to_pylist() == expected.select(_project(columns).names).to_pylist()


def _project(columns: list[str] | None) -> pa.Schema:
    return pa.schema([SCHEMA.field(c) for c in columns]) if columns is not None else SCHEMA


def test_a_whole_file_read_drops_the_marked_rows(tmp_path: Path) -> None:
    options = WriteOptions(fsync=False, row_group_rows=4)
    file = marked(write_data_file(rows(10), tmp_path, options=options), {0, 5, 9})
    plain = write_data_file(rows(2), tmp_path, options=options)

    table = read_whole_files(tmp_path, [plain, file, plain], SCHEMA, schema_id=0)

    assert table.column("id").to_pylist() == [0, 1, 1, 2, 3, 4, 6, 7, 8, 0, 1]


@pytest.mark.parametrize("key_filter", [False, True])
def test_a_marked_row_of_a_run_is_masked_before_the_merge(tmp_path: Path, key_filter: bool):
    """The newer run's row of key 2 is marked: the older run's row of key 2 is the one left."""
    old = pa.table({"id": [1, 2, 3], "value": [10, 20, 30], "tag": ["a", "b", "c"]}, SCHEMA)
    new = pa.table({"id": [2, 3], "value": [21, 31], "tag": ["b2", "c2"]}, SCHEMA)
    runs = [
        write_data_file(prepare_merge_run(t, ["id"]), tmp_path, bucket=0, options=WriteOptions())
        for t in (old, new)
    ]
    runs[1] = marked(runs[1], {0})
    row_filter = [Predicate("id", "in", (2, 3))] if key_filter else None

    merged = pa.Table.from_batches(
        list(read_merged(tmp_path, runs, SCHEMA, ["id"], row_filter=row_filter, ordered=True))
    )

    expected = [(2, 20), (3, 31)] if key_filter else [(1, 10), (2, 20), (3, 31)]
    assert list(zip(*merged.select(["id", "value"]).to_pydict().values(), strict=True)) == expected


def test_a_vectored_file_of_an_older_schema_is_masked_then_aligned(tmp_path: Path) -> None:
    older = rows(6).drop_columns(["tag"])  # written before "tag" was added
    file = marked(write_data_file(older, tmp_path, options=WriteOptions(fsync=False)), {1, 4})

    got = pa.Table.from_batches(
        list(read_files(tmp_path, [file], SCHEMA, row_filter=[Predicate("id", ">", 0)])),
        schema=SCHEMA,
    )

    assert got.to_pylist() == [{"id": i, "value": (i * 37) % 101, "tag": None} for i in (2, 3, 5)]


def test_a_file_as_written_keeps_its_marked_rows_and_says_which_they_are(tmp_path: Path) -> None:
    """What a writer of vectors reads: positions count every row, the marked ones included."""
    options = WriteOptions(fsync=False, row_group_rows=3)
    file = marked(write_data_file(rows(8), tmp_path, options=options), {1, 6})

    got, keep = read_file_as_written(tmp_path, file, SCHEMA, columns=["value"])

    assert got.schema == pa.schema([SCHEMA.field("value")])
    assert got.column("value").to_pylist() == [(i * 37) % 101 for i in range(8)]
    assert keep.tolist() == [i not in (1, 6) for i in range(8)]


def test_a_file_as_written_without_the_column_reads_nulls_for_every_row(tmp_path: Path) -> None:
    older = write_data_file(rows(4).drop_columns(["tag"]), tmp_path, options=WriteOptions())

    got, keep = read_file_as_written(tmp_path, older, SCHEMA, columns=["tag"])

    assert got.column("tag").to_pylist() == [None] * 4 and keep.all()
