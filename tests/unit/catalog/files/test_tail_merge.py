"""The tail merge of a CDC bucket (design D6): a resolved prefix read minus its vectors, the
pending runs merged alone and applied by key. Small buckets written to a temporary directory,
the prefix resolved by the brute-force reference resolver's marks, read with
:func:`catalog.files.reader.read_merged` and compared with the merge of the same runs with
vectors ignored (the old read) and with what a user expects."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.pruning import Predicate
from catalog.files.reader import read_merged, read_tail_group
from catalog.files.tail import beating, key_mask, split_partial
from catalog.files.vectors import encode_vector
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNSET_COLUMN,
    UNSET_TYPE,
    DataFile,
    VectorRef,
)
from tests.fixtures.reference_resolver import marks_of

SCHEMA = pa.schema(
    [("id", pa.int64()), ("value", pa.int64()), ("tag", pa.string()), ("seq", pa.int64())]
)
RUN = pa.schema([*SCHEMA, pa.field(ROW_KIND_COLUMN, pa.int8()), pa.field(UNSET_COLUMN, UNSET_TYPE)])
#: A change: (id, value, tag, seq), a delete ("-", id, seq) or a partial change leaving tag out
#: ("~", id, value, seq).
Change = tuple[Any, ...]


def run_table(changes: list[Change]) -> pa.Table:
    rows = []
    for c in changes:
        if c[0] == "-":
            rows.append({"id": c[1], "seq": c[2], ROW_KIND_COLUMN: ROW_KIND_DELETE})
        elif c[0] == "~":
            row = {"id": c[1], "value": c[2], "seq": c[3], ROW_KIND_COLUMN: ROW_KIND_UPSERT}
            rows.append({**row, UNSET_COLUMN: ["tag"]})
        else:
            row = dict(zip(SCHEMA.names, c, strict=True))
            rows.append({**row, ROW_KIND_COLUMN: ROW_KIND_UPSERT})
    return pa.Table.from_pylist(rows, schema=RUN)


def bucket(
    tmp: Path, runs: list[list[Change]], resolved: int, sequence: str | None
) -> list[DataFile]:
    """The runs written oldest first, the first ``resolved`` resolved as the contract says."""
    tables = [prepare_merge_run(run_table(r), ["id"], sequence) for r in runs]
    files = [
        write_data_file(t, tmp, bucket=0, sorted_by=["id"], options=WriteOptions(fsync=False))
        for t in tables
    ]
    if not resolved:
        return files
    marks = marks_of(tables[:resolved], ["id"], sequence)
    out = list(files)
    for i, positions in enumerate(marks):
        vector = None
        if positions:
            blob = base64.b64encode(encode_vector(positions)).decode("ascii")
            vector = VectorRef(cardinality=len(positions), inline=blob)
        out[i] = files[i].model_copy(update={"vector": vector, "resolved": True})
    return out


def read(tmp: Path, files: list[DataFile], sequence: str | None, **kw: Any) -> list[dict[str, Any]]:
    batches = read_merged(tmp, files, SCHEMA, ["id"], sequence_column=sequence, **kw)
    return sorted(pa.Table.from_batches(list(batches)).to_pylist(), key=lambda r: r.get("id", 0))


def bare(files: list[DataFile]) -> list[DataFile]:
    return [f.model_copy(update={"vector": None, "resolved": None}) for f in files]


def test_a_replay_below_a_resolved_tombstone_does_not_come_back(tmp_path: Path) -> None:
    runs = [[(1, 10, "a", 5), (2, 20, "b", 5)], [("-", 1, 8)], [(1, 11, "old", 6)]]
    files = bucket(tmp_path, runs, resolved=2, sequence="seq")

    assert read(tmp_path, files, "seq") == [{"id": 2, "value": 20, "tag": "b", "seq": 5}]
    assert read(tmp_path, files, "seq") == read(tmp_path, bare(files), "seq")


def test_a_key_deleted_in_the_prefix_comes_back_when_inserted_again(tmp_path: Path) -> None:
    runs = [[(1, 10, "a", 5)], [("-", 1, 8)], [(1, 12, "new", 8)], [(3, 30, "c", 9)]]
    for sequence in ("seq", None):
        files = bucket(tmp_path, runs, resolved=2, sequence=sequence)
        got = read(tmp_path, files, sequence)
        assert [(r["id"], r["tag"]) for r in got] == [(1, "new"), (3, "c")]


def test_a_resolved_live_row_beats_a_stale_tail_row_and_loses_to_a_newer(tmp_path: Path) -> None:
    runs = [[(1, 10, "a", 5), (2, 20, "b", 5)], [(1, 9, "stale", 4), (2, 21, "newer", 6)]]
    files = bucket(tmp_path, runs, resolved=1, sequence="seq")

    got = read(tmp_path, files, "seq")
    assert [(r["id"], r["tag"]) for r in got] == [(1, "a"), (2, "newer")]
    assert read(tmp_path, files, None) == read(tmp_path, bare(files), None)  # no sequence: newest
    assert [r["tag"] for r in read(tmp_path, files, None)] == ["stale", "newer"]


def test_a_partial_tail_row_is_filled_from_the_resolved_live_row(tmp_path: Path) -> None:
    runs = [
        [(1, 10, "a", 5), (2, 20, "b", 5)],
        [(1, 11, "a2", 6)],
        [("~", 1, 12, 7), ("~", 3, 3, 7)],
    ]
    files = bucket(tmp_path, runs, resolved=2, sequence="seq")

    got = read(tmp_path, files, "seq")
    assert got == [
        {"id": 1, "value": 12, "tag": "a2", "seq": 7},
        {"id": 2, "value": 20, "tag": "b", "seq": 5},
        {"id": 3, "value": 3, "tag": None, "seq": 7},
    ]
    assert got == read(tmp_path, bare(files), "seq")


def test_non_key_predicates_apply_after_the_tail_merge(tmp_path: Path) -> None:
    """Key 1's resolved row matches ``tag = a`` but its tail row does not: neither may show;
    key 2's tail row matches while its resolved row does not."""
    runs = [[(1, 10, "a", 5), (2, 20, "b", 5), (4, 40, "a", 5)], [(1, 11, "x", 6), (2, 21, "a", 6)]]
    files = bucket(tmp_path, runs, resolved=1, sequence="seq")

    got = read(tmp_path, files, "seq", row_filter=[Predicate("tag", "=", "a")])
    assert [(r["id"], r["value"]) for r in got] == [(2, 21), (4, 40)]
    by_expression = read(tmp_path, files, "seq", row_filter=pc.field("tag") == "a")
    assert by_expression == got


def test_a_projection_without_key_columns(tmp_path: Path) -> None:
    runs = [[(1, 10, "a", 5), (2, 20, "b", 5)], [(1, 11, "x", 6), ("-", 2, 6), (3, 30, "c", 6)]]
    files = bucket(tmp_path, runs, resolved=1, sequence="seq")

    got = pa.Table.from_batches(
        list(read_merged(tmp_path, files, SCHEMA, ["id"], sequence_column="seq", columns=["tag"]))
    )
    assert got.column_names == ["tag"]
    assert sorted(got.column("tag").to_pylist()) == ["c", "x"]


def test_a_fully_resolved_bucket_reads_its_live_rows_in_key_order_when_asked(
    tmp_path: Path,
) -> None:
    runs = [[(3, 30, "c", 5), (1, 10, "a", 5)], [(2, 20, "b", 6), ("-", 3, 6)]]
    files = bucket(tmp_path, runs, resolved=2, sequence="seq")

    got = pa.Table.from_batches(
        list(read_merged(tmp_path, files, SCHEMA, ["id"], sequence_column="seq", ordered=True))
    )
    assert got.column("id").to_pylist() == [1, 2]


def test_winning_deletes_asked_for_come_from_the_merge_ignoring_vectors(tmp_path: Path) -> None:
    """A feed or DML reads deletes: a resolved tombstone is a winning delete, not masked."""
    runs = [[(1, 10, "a", 5), (2, 20, "b", 5)], [("-", 1, 8)], [(2, 21, "c", 9)]]
    files = bucket(tmp_path, runs, resolved=2, sequence="seq")

    got = read(tmp_path, files, "seq", include_row_kind=True)
    assert [(r["id"], r[ROW_KIND_COLUMN]) for r in got] == [(1, ROW_KIND_DELETE), (2, 0)]


changes = st.lists(
    st.one_of(
        st.tuples(
            st.integers(0, 6), st.integers(0, 3), st.sampled_from(["a", "b"]), st.integers(0, 9)
        ),
        st.tuples(st.just("-"), st.integers(0, 6), st.integers(0, 9)),
    ),
    min_size=1,
    max_size=6,
)
#: Partial changes come in a last run of their own (when any): a resolved prefix never holds
#: one, and mixing them into every run would leave nothing to resolve.
partials = st.lists(
    st.tuples(st.just("~"), st.integers(0, 6), st.integers(0, 3), st.integers(0, 9)), max_size=3
)


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(changes, min_size=1, max_size=5),
    partial=partials,
    resolved=st.integers(0, 5),
    sequence=st.sampled_from(["seq", None]),
    tag=st.none() | st.sampled_from(["a", "b"]),
    columns=st.none() | st.just(["value", "tag"]),
)
def test_any_bucket_reads_as_the_merge_with_vectors_ignored(
    *,
    tmp_path_factory: pytest.TempPathFactory,
    runs: list[list[Change]],
    partial: list[Change],
    resolved: int,
    sequence: str | None,
    tag: str | None,
    columns: list[str] | None,
) -> None:
    tmp = tmp_path_factory.mktemp("bucket")
    runs = [*runs, partial] if partial else runs
    resolved = min(resolved, len(runs) - 1 if partial else len(runs))
    files = bucket(tmp, runs, resolved, sequence)
    kw: dict[str, Any] = {"columns": columns}
    if tag is not None:
        kw["row_filter"] = [Predicate("tag", "=", tag)]

    def rows(found: list[DataFile]) -> list[tuple[Any, ...]]:
        batches = read_merged(tmp, found, SCHEMA, ["id"], sequence_column=sequence, **kw)
        found_rows = [b.to_pylist() for b in batches]
        return sorted((tuple(r.values()) for rows_ in found_rows for r in rows_), key=repr)

    assert rows(files) == rows(bare(files))
    if 0 < resolved < len(files):  # one task per resolved file, the first emitting winners
        groups = [
            read_tail_group(
                tmp,
                files[:resolved],
                files[resolved:],
                SCHEMA,
                ["id"],
                scan=[file],
                winners=i == 0,
                sequence_column=sequence,
                **kw,
            )
            for i, file in enumerate(files[:resolved])
        ]
        found = sorted(
            (tuple(r.values()) for g in groups for b in g for r in b.to_pylist()), key=repr
        )
        assert found == rows(files)


def test_key_mask_finds_keys_of_one_or_several_columns() -> None:
    table = pa.table({"a": [1, 2, 3, 2], "b": ["x", "y", "x", "x"]})
    keys = pa.table({"a": [2, 3], "b": ["x", "x"]})

    assert key_mask(table, keys, ["a"]).tolist() == [False, True, True, True]
    assert key_mask(table, keys, ["a", "b"]).tolist() == [False, False, True, True]
    assert key_mask(table, keys.slice(0, 0), ["a"]).tolist() == [False] * 4


def test_beating_compares_with_the_highest_resolved_row_ties_to_the_tail() -> None:
    winners = pa.table({"id": [1, 2, 3, 4], "seq": [5, 5, 5, 5]})
    resolved = pa.table({"id": [1, 1, 2, 3], "seq": [3, 6, 5, 4]})

    assert beating(winners, resolved, ["id"], "seq").tolist() == [False, True, True, True]
    assert beating(winners, resolved, ["id"], None).tolist() == [True] * 4
    assert beating(winners, None, ["id"], "seq").tolist() == [True] * 4


def test_split_partial_takes_every_tail_row_of_a_key_with_a_partial_change() -> None:
    tail = run_table([(1, 1, "a", 1), (2, 2, "b", 1), ("~", 1, 3, 2)])

    whole, partial = split_partial(tail, ["id"])

    assert whole.column("id").to_pylist() == [2]
    assert partial.column("id").to_pylist() == [1, 1]
    assert split_partial(whole, ["id"])[1].num_rows == 0


def test_a_composite_key_bucket_with_a_tail_reads_as_the_merge(tmp_path: Path) -> None:
    """Two key columns: the lookup and the dropping of decided keys go through a hash join."""
    schema = pa.schema(
        [("a", pa.int64()), ("b", pa.string()), ("v", pa.int64()), ("s", pa.int64())]
    )
    key = ["a", "b"]

    def run(rows: list[tuple[int, str, int | None, int, int]]) -> pa.Table:
        table = pa.table(
            {
                "a": [r[0] for r in rows],
                "b": [r[1] for r in rows],
                "v": [r[2] for r in rows],
                "s": [r[3] for r in rows],
                ROW_KIND_COLUMN: pa.array([r[4] for r in rows], pa.int8()),
            }
        )
        return prepare_merge_run(table, key, "s")

    tables = [
        run([(1, "x", 10, 5, 0), (1, "y", 11, 5, 0), (2, "x", 20, 5, 0)]),
        run([(1, "y", None, 7, 1), (2, "x", 21, 6, 0)]),
        run([(1, "y", 12, 6, 0), (1, "x", 13, 6, 0), (3, "z", 30, 6, 0)]),  # 1/y: below its delete
    ]
    files = [
        write_data_file(t, tmp_path, bucket=0, sorted_by=key, options=WriteOptions(fsync=False))
        for t in tables
    ]
    marks = marks_of(tables[:2], key, "s")
    resolved = [
        f.model_copy(
            update={
                "resolved": True,
                "vector": VectorRef(
                    cardinality=len(m), inline=base64.b64encode(encode_vector(m)).decode("ascii")
                )
                if m
                else None,
            }
        )
        for f, m in zip(files, marks, strict=False)
    ]
    files = [*resolved, files[2]]

    def rows(found: list[DataFile], **kw: Any) -> list[tuple[Any, ...]]:
        batches = read_merged(tmp_path, found, schema, key, sequence_column="s", **kw)
        return sorted(tuple(r.values()) for b in batches for r in b.to_pylist())

    assert rows(files) == [(1, "x", 13, 6), (2, "x", 21, 6), (3, "z", 30, 6)]
    assert rows(files) == rows(bare(files))
    assert rows(files, row_filter=[Predicate("v", ">", 20)]) == [(2, "x", 21, 6), (3, "z", 30, 6)]
