"""Merge-on-read against a dict model, filters around the merge, and plain scans."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.merge import DENSE_SLOTS_PER_ROW, merge_runs, newest_rows
from catalog.files.pruning import Predicate
from catalog.files.reader import (
    _late_strings,
    read_files,
    read_merged,
    read_merged_buckets,
    small_dictionary,
)
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.manifest import FileManifest
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNSET_COLUMN,
    UNSET_TYPE,
    DataFile,
)

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


def last_occurrences(keys: Sequence[int]) -> list[bool]:
    last = {key: row for row, key in enumerate(keys)}
    return [last[key] == row for row, key in enumerate(keys)]


@settings(max_examples=200, deadline=None)
@given(
    runs=st.lists(st.lists(st.integers(0, 40), unique=True), min_size=1, max_size=8),
    base=st.sampled_from([0, -(2**63), 2**63 - 64, -(10**12)]),
)
def test_counting_finds_the_last_row_of_every_key(runs: list[list[int]], base: int) -> None:
    keys = [base + k for run in runs for k in sorted(run)]  # sorted runs, oldest first
    newest = newest_rows(np.array(keys, dtype=np.int64))
    if newest is None:  # declined: the keys spread over too many values
        assert max(keys) - min(keys) + 1 > DENSE_SLOTS_PER_ROW * len(keys)
    else:
        assert newest.tolist() == last_occurrences(keys)


def test_counting_declines_sparse_keys_and_unsorted_rows() -> None:
    sparse = np.array([0, 10**9], dtype=np.int64)
    assert newest_rows(sparse) is None
    unsorted = np.array([3, 1, 2, 0] * 300, dtype=np.int64)  # 900 stretches
    assert newest_rows(unsorted) is None
    assert newest_rows(np.zeros(0, dtype=np.int64)) is not None


def test_counting_numbers_up_to_256_stretches() -> None:
    stretches = [[s % 7, 7 + s % 5] for s in range(256)]  # 256 runs of 2 keys, overlapping
    keys = [k for run in stretches for k in run]
    newest = newest_rows(np.array(keys, dtype=np.int64))
    assert newest is not None and newest.tolist() == last_occurrences(keys)
    assert newest_rows(np.array([*keys, 0], dtype=np.int64)) is None  # a 257th stretch


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


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "run-order"])
def test_deletes_merge_under_columns_the_table_declares_not_null(
    tmp_path: Path, three_runs: list[DataFile], ordered: bool
) -> None:
    # A delete row carries only its key; the table still says "note" and "v" are never null.
    required = pa.schema([f.with_nullable(False) for f in SCHEMA])
    batches = list(read_merged(tmp_path, three_runs, required, ["id"], ordered=ordered))
    merged = pa.Table.from_batches(batches)
    assert merged.schema == required
    assert sorted(merged.column("id").to_pylist()) == [1, 3, 4, 5]


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


# ------------------------------------------------------------------------ late strings

STATUSES = ["new", "paid", "shipped"]


def status_run(location: Path, keys: range, version: int, deleted: Sequence[int] = ()) -> DataFile:
    """A run of ``keys`` whose low-cardinality ``note`` is a status, ``deleted`` keys deleted."""
    rows = [(k, k * 10 + version, STATUSES[(k + version) % 3], 0) for k in keys]
    rows += [(k, None, None, 1) for k in deleted]
    return write_run(location, rows)


def expected_status(keys: int, runs: int, deleted: set[int]) -> dict[int, tuple[int, str]]:
    """Key -> (v, note) after runs 0..runs-1 of :func:`status_runs` (run r writes keys r..)."""
    out = {}
    for key in range(keys):
        version = min(key, runs - 1)
        out[key] = (key * 10 + version, STATUSES[(key + version) % 3])
    return {k: v for k, v in out.items() if k not in deleted}


@pytest.fixture
def status_runs(tmp_path: Path) -> list[DataFile]:
    """Three runs of 2,000 keys: run r rewrites keys r.. and the last one deletes keys 5..9."""
    return [
        status_run(tmp_path, range(r, 2000), r, deleted=range(5, 10) if r == 2 else ())
        for r in range(3)
    ]


def test_small_dictionaries_are_told_from_other_string_columns(
    tmp_path: Path, status_runs: list[DataFile]
) -> None:
    footer = pq.read_metadata(tmp_path / status_runs[0].path)
    chunks = {footer.row_group(0).column(i).path_in_schema: i for i in range(footer.num_columns)}
    assert small_dictionary(footer.row_group(0).column(chunks["note"]))
    assert not small_dictionary(footer.row_group(0).column(chunks["id"]))
    footers = [pq.read_metadata(tmp_path / f.path) for f in status_runs]
    assert _late_strings(footers, SCHEMA, compared=["id"]) == ["note"]
    assert _late_strings(footers, SCHEMA, compared=["id", "note"]) == []
    unique = write_run(tmp_path, [(k, k, f"note {k}", 0) for k in range(2000)])
    footers.append(pq.read_metadata(tmp_path / unique.path))
    assert _late_strings(footers, SCHEMA, compared=["id"]) == []  # one run holds many notes
    older = SCHEMA.remove(SCHEMA.get_field_index("v"))
    old = write_data_file(status_table(older), tmp_path, bucket=0, options=FAST)
    footers[-1] = pq.read_metadata(tmp_path / old.path)
    assert _late_strings(footers, SCHEMA, compared=["id"]) == []  # a run of an older schema


def status_table(schema: pa.Schema) -> pa.Table:
    rows = [{"id": k, "v": k, "note": STATUSES[k % 3]} for k in range(2000)]
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize(
    "row_filter",
    [None, [Predicate("note", "=", "paid")], pc.field("note") == "paid"],
    ids=["all", "predicate", "expression"],
)
def test_low_cardinality_strings_read_back_as_strings(
    tmp_path: Path, status_runs: list[DataFile], ordered: bool, row_filter: object
) -> None:
    batches = list(
        read_merged(tmp_path, status_runs, SCHEMA, ["id"], ordered=ordered, row_filter=row_filter)  # type: ignore[arg-type]
    )
    merged = pa.Table.from_batches(batches)
    assert merged.schema.equals(SCHEMA)
    expected = expected_status(2000, 3, deleted=set(range(5, 10)))
    if row_filter is not None:
        expected = {k: v for k, v in expected.items() if v[1] == "paid"}
    assert {r["id"]: (r["v"], r["note"]) for r in merged.to_pylist()} == expected


def test_low_cardinality_strings_keep_deletes_and_projections(
    tmp_path: Path, status_runs: list[DataFile]
) -> None:
    batches = read_merged(
        tmp_path, status_runs, SCHEMA, ["id"], columns=["note"], include_row_kind=True, ordered=True
    )
    merged = pa.Table.from_batches(list(batches))
    assert merged.schema.field("note").type == pa.string()
    kinds = merged.column(ROW_KIND_COLUMN).to_pylist()
    assert kinds.count(ROW_KIND_DELETE) == 5 and merged.num_rows == 2000
    assert merged.column("note").to_pylist()[:3] == ["new", "shipped", "paid"]


def test_late_strings_fill_partial_changes(tmp_path: Path) -> None:
    """A partial change that left the (dictionary-read) status out takes it from the older run."""
    fields = [*SCHEMA, pa.field(ROW_KIND_COLUMN, pa.int8()), pa.field(UNSET_COLUMN, UNSET_TYPE)]

    def run(rows: list[tuple[int, int, str | None, list[str] | None]]) -> DataFile:
        table = pa.Table.from_pylist(
            [
                {"id": k, "v": v, "note": n, ROW_KIND_COLUMN: 0, UNSET_COLUMN: u}
                for k, v, n, u in rows
            ],
            schema=pa.schema(fields),
        )
        return write_data_file(prepare_merge_run(table, ["id"]), tmp_path, bucket=0, options=FAST)

    older = run([(k, 0, STATUSES[k % 3], None) for k in range(2000)])
    newer = run([(k, 1, None, ["note"]) for k in range(0, 2000, 2)] + [(5000, 1, None, ["note"])])
    footers = [pq.read_metadata(tmp_path / f.path) for f in (older, newer)]
    assert _late_strings(footers, SCHEMA, compared=["id"]) == ["note"]
    merged = pa.Table.from_batches(list(read_merged(tmp_path, [older, newer], SCHEMA, ["id"])))
    expected = {k: (1 - k % 2, STATUSES[k % 3]) for k in range(2000)} | {5000: (1, None)}
    assert {r["id"]: (r["v"], r["note"]) for r in merged.to_pylist()} == expected


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


def test_whole_files_keep_file_order_and_read_old_schemas_aligned(tmp_path: Path) -> None:
    from catalog.files.reader import read_whole_files

    old = pa.schema([("id", pa.int32())])
    new = pa.schema([("id", pa.int64()), ("note", pa.string())])
    files = []
    for i in range(6):  # files 2 and 3 predate the widening and the new column
        schema, schema_id = (old, 0) if i in (2, 3) else (new, 1)
        rows = {"id": pa.array(range(i * 10, i * 10 + 10), schema.field("id").type)}
        if schema_id:
            rows["note"] = pa.array([f"n{i}"] * 10)
        written = write_data_file(pa.table(rows, schema=schema), tmp_path, options=FAST)
        files.append(written.model_copy(update={"schema_id": schema_id}))

    table = read_whole_files(tmp_path, files, new, schema_id=1)

    assert table.schema == new
    assert table.column("id").to_pylist() == list(range(60))
    assert table.column("note").to_pylist()[20:40] == [None] * 20


def evolved_files(location: Path, count: int, old_ones: Sequence[int]) -> list[DataFile]:
    """``count`` files of 5 rows (ids in file order); those in ``old_ones`` written under schema
    0 (``id`` int32, no ``note``), the others under schema 1 (:data:`EVOLVED`)."""
    old = pa.schema([("id", pa.int32())])
    files = []
    for i in range(count):
        schema, schema_id = (old, 0) if i in old_ones else (EVOLVED, 1)
        rows = {"id": pa.array(range(i * 5, i * 5 + 5), schema.field("id").type)}
        if schema_id:
            rows["note"] = pa.array([f"n{i}"] * 5)
        written = write_data_file(pa.table(rows, schema=schema), location, options=FAST)
        files.append(written.model_copy(update={"schema_id": schema_id}))
    return files


EVOLVED = pa.schema([("id", pa.int64()), ("note", pa.string())])


@pytest.mark.parametrize("listing", ["data_files", "manifest"])
def test_plain_scan_of_many_files_keeps_file_order_across_schemas(
    tmp_path: Path, listing: str
) -> None:
    written = evolved_files(tmp_path, 40, old_ones=(10, 11, 30))
    files = FileManifest.of(written) if listing == "manifest" else written

    batches = list(read_files(tmp_path, files, EVOLVED, schema_id=1))

    table = pa.Table.from_batches(batches)
    assert table.schema == EVOLVED
    assert table.column("id").to_pylist() == list(range(200))
    notes = table.column("note").to_pylist()
    assert notes[50:60] == [None] * 10 and notes[150:155] == [None] * 5
    assert notes[60:65] == ["n12"] * 5


@pytest.mark.parametrize("listing", ["data_files", "manifest"])
def test_plain_scan_of_many_files_prunes_filters_and_projects(tmp_path: Path, listing: str) -> None:
    written = evolved_files(tmp_path, 40, old_ones=(30,))
    gone = written[0].model_copy(update={"path": "data/gone.parquet"})  # pruned, never opened
    listed = [gone, *written[1:]]
    files = FileManifest.of(listed) if listing == "manifest" else listed
    predicates = [Predicate("id", ">=", 148), Predicate("id", "<", 153)]

    batches = read_files(
        tmp_path, files, EVOLVED, columns=["note"], row_filter=predicates, schema_id=1
    )

    assert pa.Table.from_batches(list(batches)).to_pydict() == {
        "note": ["n29", "n29", None, None, None]
    }
