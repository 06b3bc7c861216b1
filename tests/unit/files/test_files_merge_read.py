"""Merge-on-read against a dict model, filters around the merge, and plain scans."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.merge import merge_runs
from catalog.files.pruning import Predicate
from catalog.files.reader import read_files, read_merged, read_merged_buckets
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT, DataFile

FAST = WriteOptions(fsync=False)


@dataclass(frozen=True)
class Change:
    key: int
    delete: bool
    value: int
    seq: int


changes = st.builds(
    Change,
    key=st.integers(0, 12),
    delete=st.booleans(),
    value=st.integers(-1000, 1000),
    seq=st.integers(0, 6),
)
histories = st.lists(st.lists(changes, max_size=12), min_size=1, max_size=6)
KEY_KINDS = ["int", "string", "composite"]


def key_columns(kind: str, keys: Sequence[int]) -> dict[str, pa.Array]:
    if kind == "int":
        return {"id": pa.array(keys, pa.int64())}
    if kind == "string":
        return {"id": pa.array([f"key-{k:03d}" for k in keys], pa.string())}
    return {
        "tenant": pa.array([f"t{k % 3}" for k in keys], pa.string()),
        "id": pa.array(keys, pa.int32()),
    }


def primary_key(kind: str) -> list[str]:
    return ["tenant", "id"] if kind == "composite" else ["id"]


def model_key(kind: str, key: int) -> tuple[object, ...]:
    if kind == "int":
        return (key,)
    if kind == "string":
        return (f"key-{key:03d}",)
    return (f"t{key % 3}", key)


def change_table(kind: str, run: Sequence[Change], with_seq: bool) -> pa.Table:
    columns = key_columns(kind, [c.key for c in run])
    columns["v"] = pa.array([None if c.delete else c.value for c in run], pa.int64())
    if with_seq:
        columns["lsn"] = pa.array([c.seq for c in run], pa.int64())
    kinds = [ROW_KIND_DELETE if c.delete else ROW_KIND_UPSERT for c in run]
    columns[ROW_KIND_COLUMN] = pa.array(kinds, pa.int8())
    return pa.table(columns)


def dict_model(
    kind: str, history: Sequence[Sequence[Change]], with_seq: bool
) -> dict[tuple[object, ...], int]:
    """Last change per key wins (highest seq, ties to the later change); deletes remove."""
    best: dict[tuple[object, ...], Change] = {}
    for run in history:
        for change in run:
            key = model_key(kind, change.key)
            if not with_seq or key not in best or change.seq >= best[key].seq:
                best[key] = change
    return {k: c.value for k, c in best.items() if not c.delete}


def merged_rows(table: pa.Table, kind: str) -> dict[tuple[object, ...], int]:
    pk = primary_key(kind)
    rows = table.to_pylist()
    result = {tuple(r[c] for c in pk): r["v"] for r in rows}
    assert len(result) == len(rows), "a key came out twice"
    return result


def table_schema(kind: str, with_seq: bool) -> pa.Schema:
    sample = change_table(kind, [Change(0, False, 0, 0)], with_seq)
    return sample.schema.remove(sample.schema.get_field_index(ROW_KIND_COLUMN))


@settings(max_examples=120, deadline=None)
@given(
    history=histories,
    kind=st.sampled_from(KEY_KINDS),
    with_seq=st.booleans(),
    ordered=st.booleans(),
)
def test_merge_on_read_matches_the_dict_model(
    history: list[list[Change]], kind: str, with_seq: bool, ordered: bool
) -> None:
    sequence = "lsn" if with_seq else None
    pk = primary_key(kind)
    with tempfile.TemporaryDirectory() as location:
        runs = [
            write_data_file(
                prepare_merge_run(change_table(kind, run, with_seq), pk, sequence),
                location,
                bucket=0,
                sorted_by=pk,
                options=FAST,
            )
            for run in history
            if run
        ]
        batches = list(
            read_merged(
                location,
                runs,
                table_schema(kind, with_seq),
                pk,
                sequence_column=sequence,
                ordered=ordered,
            )
        )
    schema = table_schema(kind, with_seq)
    merged = pa.Table.from_batches(batches, schema=schema)
    assert ROW_KIND_COLUMN not in merged.column_names
    assert merged_rows(merged, kind) == dict_model(kind, history, with_seq)
    if ordered:
        keys = [tuple(r[c] for c in pk) for r in merged.select(pk).to_pylist()]
        assert keys == sorted(keys)


@settings(max_examples=150, deadline=None)
@given(
    history=st.lists(st.lists(changes, max_size=40), min_size=1, max_size=10),
    kind=st.sampled_from(KEY_KINDS),
    with_seq=st.booleans(),
)
def test_merge_kernel_matches_the_dict_model(
    history: list[list[Change]], kind: str, with_seq: bool
) -> None:
    sequence = "lsn" if with_seq else None
    pk = primary_key(kind)
    runs = [prepare_merge_run(change_table(kind, run, with_seq), pk, sequence) for run in history]
    merged = merge_runs(runs, pk, sequence)
    assert merged_rows(merged, kind) == dict_model(kind, history, with_seq)
    with_deletes = merge_runs(runs, pk, sequence, keep_deletes=True, ordered=True)
    kept = with_deletes.filter(pc.equal(with_deletes[ROW_KIND_COLUMN], ROW_KIND_UPSERT))
    assert merged_rows(kept, kind) == dict_model(kind, history, with_seq)


# ------------------------------------------------------------------------ fixed scenarios

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("note", pa.string()),
    ]
)


def write_run(location: Path, rows: list[tuple[int, int | None, str | None, int]]) -> DataFile:
    table = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "note": pa.array([r[2] for r in rows], pa.string()),
            ROW_KIND_COLUMN: pa.array([r[3] for r in rows], pa.int8()),
        }
    )
    return write_data_file(prepare_merge_run(table, ["id"]), location, bucket=0, options=FAST)


@pytest.fixture
def three_runs(tmp_path: Path) -> list[DataFile]:
    return [
        write_run(tmp_path, [(1, 10, "one", 0), (2, 20, "two", 0), (3, 30, "three", 0)]),
        write_run(tmp_path, [(1, 1, "one again", 0), (2, None, None, 1), (4, 40, "four", 0)]),
        write_run(tmp_path, [(3, 33, "three again", 0), (5, 50, "five", 0)]),
    ]


def read_all(
    location: Path, files: Sequence[DataFile | str], **kwargs: object
) -> list[dict[str, object]]:
    batches = list(read_merged(location, files, SCHEMA, ["id"], ordered=True, **kwargs))  # type: ignore[arg-type]
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def test_merge_read_of_three_runs(tmp_path: Path, three_runs: list[DataFile]) -> None:
    assert read_all(tmp_path, three_runs) == [
        {"id": 1, "v": 1, "note": "one again"},
        {"id": 3, "v": 33, "note": "three again"},
        {"id": 4, "v": 40, "note": "four"},
        {"id": 5, "v": 50, "note": "five"},
    ]


@pytest.mark.parametrize(
    "row_filter", [[Predicate("v", ">", 5)], pc.field("v") > 5], ids=["predicate", "expression"]
)
def test_a_non_key_filter_never_resurrects_an_old_version(
    tmp_path: Path, three_runs: list[DataFile], row_filter: object
) -> None:
    rows = read_all(tmp_path, three_runs, row_filter=row_filter)
    assert [r["id"] for r in rows] == [3, 4, 5]  # key 1 is now v=1; its v=10 must not come back


def test_key_filters_prune_runs_before_the_merge(
    tmp_path: Path, three_runs: list[DataFile]
) -> None:
    missing = three_runs[2].model_copy(update={"path": "data/missing.parquet"})
    runs = [*three_runs[:2], missing]  # the third run holds keys 3..5 only
    rows = read_all(tmp_path, runs, row_filter=[Predicate("id", "<=", 2)])
    assert rows == [{"id": 1, "v": 1, "note": "one again"}]


def test_projection_and_row_kinds(tmp_path: Path, three_runs: list[DataFile]) -> None:
    rows = read_all(tmp_path, three_runs, columns=["note"], include_row_kind=True)
    assert rows == [
        {"note": "one again", ROW_KIND_COLUMN: 0},
        {"note": None, ROW_KIND_COLUMN: 1},
        {"note": "three again", ROW_KIND_COLUMN: 0},
        {"note": "four", ROW_KIND_COLUMN: 0},
        {"note": "five", ROW_KIND_COLUMN: 0},
    ]


def test_merge_read_yields_bounded_batches(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, [(i, i, None, 0) for i in range(j, 1000, 3)]) for j in range(3)]
    batches = list(read_merged(tmp_path, runs, SCHEMA, ["id"], batch_size=100))
    assert all(b.num_rows <= 100 for b in batches)
    assert sum(b.num_rows for b in batches) == 1000


def test_merge_read_of_no_runs_yields_nothing(tmp_path: Path) -> None:
    assert list(read_merged(tmp_path, [], SCHEMA, ["id"])) == []


def test_runs_without_a_row_kind_column_are_upserts(tmp_path: Path) -> None:
    base = write_data_file(
        pa.table({"id": [1, 2], "v": [1, 2], "note": ["a", "b"]}, SCHEMA), tmp_path, options=FAST
    )
    later = write_run(tmp_path, [(2, None, None, 1)])
    assert read_all(tmp_path, [base, later]) == [{"id": 1, "v": 1, "note": "a"}]


# ------------------------------------------------------------------------ several buckets


@pytest.fixture
def arrow_threads() -> Iterator[Callable[[int], None]]:
    """Set Arrow's CPU thread count for one test (the bucket read-ahead sizes its pool by it)."""
    before = pa.cpu_count()
    yield pa.set_cpu_count
    pa.set_cpu_count(before)


def bucket_runs(location: Path, buckets: int) -> list[list[DataFile]]:
    """Buckets of three overlapping runs each; bucket ``b`` holds keys ``b*100 ..``."""
    return [
        [
            write_run(location, [(b * 100 + i, r, f"r{r}", 0) for i in range(r, 40, r + 1)])
            for r in range(3)
        ]
        for b in range(buckets)
    ]


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("buckets", [0, 1, 3, 6])
def test_several_buckets_read_as_each_bucket_alone(
    tmp_path: Path, arrow_threads: Callable[[int], None], threads: int, buckets: int
) -> None:
    arrow_threads(threads)
    runs = bucket_runs(tmp_path, buckets)
    row_filter = [Predicate("v", ">", 0)]
    each = [
        list(read_merged(tmp_path, r, SCHEMA, ["id"], row_filter=row_filter, batch_size=7))
        for r in runs
    ]
    together = list(
        read_merged_buckets(tmp_path, runs, SCHEMA, ["id"], row_filter=row_filter, batch_size=7)
    )
    assert len(together) == buckets
    for alone, read in zip(each, together, strict=True):
        assert pa.Table.from_batches(read, SCHEMA).equals(pa.Table.from_batches(alone, SCHEMA))
        assert all(b.num_rows <= 7 for b in read)


def test_bucket_read_ahead_stops_when_the_reader_is_closed(
    tmp_path: Path, arrow_threads: Callable[[int], None]
) -> None:
    arrow_threads(2)
    runs = bucket_runs(tmp_path, 6)
    reader = read_merged_buckets(tmp_path, runs, SCHEMA, ["id"])
    first = next(reader)
    reader.close()
    assert first == list(read_merged(tmp_path, runs[0], SCHEMA, ["id"]))
    assert not [t for t in threading.enumerate() if t.name.startswith("lakestream-merge")]


# ------------------------------------------------------------------------ plain scans


def plain_files(location: Path) -> list[DataFile]:
    return [
        write_data_file(
            pa.table(
                {"id": list(range(s, s + 500)), "v": list(range(500)), "note": ["x"] * 500}, SCHEMA
            ),
            location,
            options=FAST,
        )
        for s in (0, 1000, 2000)
    ]


def test_plain_scan_streams_in_bounded_batches(tmp_path: Path) -> None:
    files = plain_files(tmp_path)
    batches = list(read_files(tmp_path, files, SCHEMA, batch_size=128))
    assert all(b.num_rows <= 128 for b in batches)
    ids = pa.Table.from_batches(batches).column("id").to_pylist()
    assert ids == [*range(500), *range(1000, 1500), *range(2000, 2500)]


def test_plain_scan_projects_and_filters(tmp_path: Path) -> None:
    files = plain_files(tmp_path)
    expression = (pc.field("id") >= 1490) & (pc.field("id") < 1500)
    batches = read_files(tmp_path, files, SCHEMA, columns=["v"], row_filter=expression)
    assert pa.Table.from_batches(list(batches)).column("v").to_pylist() == list(range(490, 500))


def test_plain_scan_prunes_files_by_statistics(tmp_path: Path) -> None:
    files = plain_files(tmp_path)
    missing = files[0].model_copy(update={"path": "data/gone.parquet"})
    batches = read_files(
        tmp_path, [missing, *files[1:]], SCHEMA, row_filter=[Predicate("id", ">=", 2498)]
    )
    assert pa.Table.from_batches(list(batches)).column("id").to_pylist() == [2498, 2499]


def test_plain_scan_accepts_relative_paths(tmp_path: Path) -> None:
    files = plain_files(tmp_path)
    batches = list(read_files(tmp_path, [files[0].path], SCHEMA, columns=["id"]))
    assert sum(b.num_rows for b in batches) == 500


def test_unknown_columns_are_refused(tmp_path: Path, three_runs: list[DataFile]) -> None:
    from catalog.errors import SchemaError

    with pytest.raises(SchemaError) as err:
        list(read_files(tmp_path, three_runs, SCHEMA, columns=["nope"]))
    assert err.value.column == "nope"
    with pytest.raises(SchemaError):
        list(read_merged(tmp_path, three_runs, SCHEMA, ["id"], row_filter=[Predicate("z", "=", 1)]))
