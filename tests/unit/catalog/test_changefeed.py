"""The change feed's pure logic: one version's diff, and folding a range to net changes."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.changefeed import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    change_schema,
    keyed_diff,
    labelled,
    multiset_diff,
    net_changes,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def table(rows: list[tuple[int, str | None]]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "v": [r[1] for r in rows]}, schema=SCHEMA)


def kinds(changes: pa.Table) -> list[tuple[str, int, str | None]]:
    return [(r[CHANGE_TYPE], r["id"], r["v"]) for r in changes.to_pylist()]


def test_keyed_diff_tells_inserts_updates_and_deletes_apart():
    old = table([(1, "a"), (2, "b"), (3, None)])
    new = table([(2, "B"), (3, None), (4, "d")])
    changes = keyed_diff(old, new, ["id"], 7, T0)
    assert kinds(changes) == [
        ("delete", 1, "a"),
        ("update_preimage", 2, "b"),
        ("update_postimage", 2, "B"),
        ("insert", 4, "d"),
    ]  # key 3 is unchanged (null equals null): no change
    assert set(changes.column(COMMIT_VERSION).to_pylist()) == {7}
    assert changes.schema == change_schema(pa.schema([f.with_nullable(True) for f in SCHEMA]))


def test_a_null_becoming_a_value_is_an_update():
    changes = keyed_diff(table([(1, None)]), table([(1, "x")]), ["id"], 1, T0)
    assert kinds(changes) == [("update_preimage", 1, None), ("update_postimage", 1, "x")]


def test_multiset_diff_cancels_rows_a_rewrite_carried_over():
    removed = table([(1, "a"), (1, "a"), (2, "b")])
    added = table([(1, "a"), (2, "c"), (5, None)])
    assert sorted(kinds(multiset_diff(removed, added, 3, T0))) == [
        ("delete", 1, "a"),
        ("delete", 2, "b"),
        ("insert", 2, "c"),
        ("insert", 5, None),
    ]


def _chain(steps: list[tuple[int, list[tuple[int, str | None]]]]) -> pa.Table:
    """Versions of a keyed table as states; their per-version diffs concatenated."""
    parts, state = [], table([])
    for version, rows in steps:
        new = table(rows)
        parts.append(keyed_diff(state, new, ["id"], version, T0 + dt.timedelta(seconds=version)))
        state = new
    return pa.concat_tables(parts)


def test_net_folds_each_key_to_its_first_before_and_last_after():
    changes = _chain(
        [
            (1, [(1, "a"), (2, "b")]),
            (2, [(1, "a2"), (2, "b"), (3, "c")]),  # 1 updated, 3 inserted
            (3, [(1, "a3"), (2, "b")]),  # 3 deleted again: vanishes
            (4, [(2, "b")]),  # 1 deleted: net insert then delete
        ]
    )
    assert kinds(net_changes(changes, ["id"])) == [("insert", 2, "b")]
    from_two = changes.filter(pa.compute.greater(changes.column(COMMIT_VERSION), 1))
    folded = net_changes(from_two, ["id"])
    assert kinds(folded) == [("delete", 1, "a")]
    assert folded.column(COMMIT_VERSION).to_pylist() == [4]  # the key's last change


def test_net_drops_a_key_changed_back_to_where_it_started():
    changes = _chain([(1, [(1, "a")]), (2, [(1, "b")]), (3, [(1, "a")])])
    later = changes.filter(pa.compute.greater(changes.column(COMMIT_VERSION), 1))
    assert net_changes(later, ["id"]).num_rows == 0


def test_net_without_a_key_counts_rows():
    parts = [
        labelled(table([(1, "a"), (1, "a"), (2, "b")]), "insert", 1, T0),
        labelled(table([(1, "a"), (2, "b")]), "delete", 2, T0),
        labelled(table([(3, "c")]), "delete", 2, T0),
    ]
    folded = net_changes(pa.concat_tables(parts), [])
    assert sorted(kinds(folded)) == [("delete", 3, "c"), ("insert", 1, "a")]


states = st.lists(
    st.dictionaries(st.integers(0, 4), st.sampled_from(["a", "b", None]), max_size=5),
    min_size=1,
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(states=states)
def test_net_of_a_chain_is_the_diff_of_its_ends(states: list[dict[int, str | None]]):
    steps = [(v, sorted(s.items())) for v, s in enumerate(states, start=1)]
    changes = _chain(steps)
    folded = Counter(kinds(net_changes(changes, ["id"])))
    direct = Counter(kinds(keyed_diff(table([]), table(steps[-1][1]), ["id"], 0, T0)))
    assert folded == direct
