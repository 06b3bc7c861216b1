"""The bucket key index (catalog/index.py): the marks a resolution adds, and an index rebuilt
from the files after any sequence of runs equals the one kept incrementally."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.merge import last_change_per_key
from catalog.index import BucketIndex
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT

U, D = ROW_KIND_UPSERT, ROW_KIND_DELETE
INT = pa.int64()


def run(
    rows: Sequence[tuple[object, ...]], *, seq: bool = True, key_type: pa.DataType = INT
) -> pa.Table:
    """Rows of (key, seq, kind) or (key, kind) without a sequence column."""
    columns: dict[str, pa.Array] = {"id": pa.array([r[0] for r in rows], key_type)}
    if seq:
        columns["seq"] = pa.array([r[1] for r in rows], pa.int64())
    columns[ROW_KIND_COLUMN] = pa.array([r[-1] for r in rows], pa.int8())
    return pa.table(columns)


def marks(m: dict[int, np.ndarray]) -> dict[int, list[int]]:
    return {f: p.tolist() for f, p in m.items()}


def test_a_newer_change_marks_the_row_it_supersedes():
    index = BucketIndex.build(["id"], "seq", [run([(1, 5, U), (2, 5, U)])], [None])
    assert marks(index.apply_run(run([(2, 6, U), (3, 6, U)]))) == {0: [1]}
    assert index.as_dict()[(2,)] == (6, U, True, 1, 0)
    assert index.live_count == 3


def test_a_stale_replay_loses_and_is_marked_in_its_own_run():
    index = BucketIndex.build(["id"], "seq", [run([(1, 5, U)])], [None])
    assert marks(index.apply_run(run([(1, 4, U)]))) == {1: [0]}
    assert index.as_dict()[(1,)] == (5, U, True, 0, 0)


def test_equal_sequence_goes_to_the_newer_run():
    index = BucketIndex.build(["id"], "seq", [run([(1, 5, U)])], [None])
    assert marks(index.apply_run(run([(1, 5, U)]))) == {0: [0]}
    assert index.as_dict()[(1,)][3] == 1


def test_a_delete_is_a_marked_tombstone_that_stops_an_older_replay():
    index = BucketIndex.build(["id"], "seq", [run([(1, 5, U), (2, 5, U)])], [None])
    assert marks(index.apply_run(run([(1, 7, D)]))) == {0: [0], 1: [0]}
    assert index.as_dict()[(1,)] == (7, D, False, 1, 0)
    assert marks(index.apply_run(run([(1, 6, U)]))) == {2: [0]}  # older replay: loses
    assert index.live_count == 1


def test_a_reinsert_after_a_delete_is_live_again():
    index = BucketIndex.build(["id"], "seq", [run([(1, 5, U)])], [None])
    index.apply_run(run([(1, 6, D)]))
    assert marks(index.apply_run(run([(1, 8, U)]))) == {}  # the tombstone was marked already
    assert index.as_dict()[(1,)] == (8, U, True, 2, 0)


def test_without_a_sequence_column_the_newer_run_always_wins():
    index = BucketIndex.build(["id"], None, [run([(1, U), (2, U)], seq=False)], [None])
    assert marks(index.apply_run(run([(1, U), (2, D), (3, D)], seq=False))) == {
        0: [0, 1],
        1: [1, 2],
    }
    assert {k: v[2] for k, v in index.as_dict().items()} == {(1,): True, (2,): False, (3,): False}


def test_a_key_twice_in_one_run_keeps_its_last_change():
    index = BucketIndex.build(["id"], None, [], [])
    assert marks(index.apply_run(run([(1, U), (1, U)], seq=False))) == {0: [0]}


def test_string_keys_are_looked_up_by_hash():
    index = BucketIndex.build(
        ["id"], "seq", [run([("a", 1, U), ("b", 1, U)], key_type=pa.string())], [None]
    )
    assert marks(index.apply_run(run([("b", 2, U), ("c", 2, U)], key_type=pa.string()))) == {0: [1]}
    found = index.lookup(pa.table({"id": ["c", "z", "a"]})).tolist()
    assert found[1] == -1 and found[0] >= 0 and found[2] >= 0
    assert index.entries.column("id").take(pa.array([found[0], found[2]])).to_pylist() == [
        "c",
        "a",
    ]


def composite(rows: Sequence[tuple[int, str, int, int]]) -> pa.Table:
    return pa.table(
        {
            "tenant": pa.array([r[0] for r in rows], pa.int32()),
            "id": pa.array([r[1] for r in rows], pa.string()),
            "seq": pa.array([r[2] for r in rows], pa.int64()),
            ROW_KIND_COLUMN: pa.array([r[3] for r in rows], pa.int8()),
        }
    )


def test_composite_keys_match_on_every_column():
    base = composite([(1, "a", 1, U), (2, "a", 1, U)])
    index = BucketIndex.build(["tenant", "id"], "seq", [base], [None])
    assert marks(index.apply_run(composite([(2, "a", 2, U), (1, "b", 2, D)]))) == {
        0: [1],
        1: [1],
    }
    assert index.as_dict()[(1, "a")][2] is True
    assert index.as_dict()[(2, "a")][3] == 1


def test_built_from_files_whose_vectors_mark_rows():
    files = [run([(1, 1, U), (2, 1, U)]), run([(1, 2, U), (2, 3, D)])]
    index = BucketIndex.build(["id"], "seq", files, [np.array([0, 1]), np.array([1])])
    assert index.as_dict() == {(1,): (2, U, True, 1, 0), (2,): (3, D, False, 1, 1)}


# ---------------------------------------------------------------------------- property test

change = st.tuples(
    st.integers(0, 6), st.integers(0, 4), st.sampled_from([U, U, D])
)  # key, sequence, kind
runs = st.lists(st.lists(change, min_size=0, max_size=6), min_size=1, max_size=6)


def _brute_force_live(files: Sequence[pa.Table], seq: str | None) -> set[tuple[int, int]]:
    """(file, position) of each key's winning upsert, merging every file ignoring vectors."""
    data = pa.concat_tables(files)
    winners = last_change_per_key(data, ["id"], seq)
    where = [(f, p) for f, t in enumerate(files) for p in range(t.num_rows)]
    kinds = data.column(ROW_KIND_COLUMN).to_pylist()
    return {where[w] for w in winners.tolist() if kinds[w] == U}


@settings(max_examples=150, deadline=None)
@given(history=runs, with_seq=st.booleans(), base_runs=st.integers(0, 2))
def test_rebuilt_index_equals_the_incremental_one(history, with_seq, base_runs):
    seq = "seq" if with_seq else None
    tables = [
        run(r if with_seq else [(k, kind) for k, _, kind in r], seq=with_seq) for r in history
    ]
    # the first base_runs files are "resolved" by an index built from nothing but them
    base = tables[:base_runs]
    index = BucketIndex.build(["id"], seq, [], [])
    vectors: list[set[int]] = []
    for table in tables:
        if index.files == base_runs:  # the resolved prefix so far: a cold worker rebuilds it
            index = BucketIndex.build(["id"], seq, base, [np.array(sorted(v)) for v in vectors])
        vectors.append(set())
        for f, positions in index.apply_run(table).items():
            assert not vectors[f] & set(positions.tolist()), "a row is marked once"
            vectors[f] |= set(positions.tolist())
        if index.files <= base_runs:
            continue
        rebuilt = BucketIndex.build(
            ["id"], seq, tables[: index.files], [np.array(sorted(v)) for v in vectors]
        )
        assert rebuilt.as_dict() == index.as_dict()
        live = {(f, p) for f, t in enumerate(tables[: index.files]) for p in range(t.num_rows)}
        live -= {(f, p) for f, v in enumerate(vectors) for p in v}
        assert live == _brute_force_live(tables[: index.files], seq)  # I1 and R2
