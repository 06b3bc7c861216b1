"""Partial changes (columns left out, e.g. Debezium's unchanged TOASTed values) are completed
from the key's older changes in every merge: one batch, runs merged on read, compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.files.merge import merge_runs
from catalog.files.partial import has_partial_rows
from catalog.files.reader import read_merged
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNSET_COLUMN,
    UNSET_TYPE,
)

FAST = WriteOptions(fsync=False)
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("v", pa.int64()),
        ("note", pa.string()),
        ("doc", pa.string()),
        ("seq", pa.int64()),
        (ROW_KIND_COLUMN, pa.int8()),
        (UNSET_COLUMN, UNSET_TYPE),
    ]
)


def change(
    key: int, v: int | None, note: str | None = None, doc: str | None = None, *,
    seq: int = 0, unset: list[str] | None = None, delete: bool = False,
) -> dict[str, Any]:  # fmt: skip
    kind = ROW_KIND_DELETE if delete else ROW_KIND_UPSERT
    return {"id": key, "v": v, "note": note, "doc": doc, "seq": seq, ROW_KIND_COLUMN: kind,
            UNSET_COLUMN: unset}  # fmt: skip


def run(*changes: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(list(changes), schema=SCHEMA)


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(
        (r["id"], r["v"], r["note"], r["doc"], r[UNSET_COLUMN]) for r in table.to_pylist()
    )


def test_a_partial_update_keeps_the_values_it_left_out_from_the_run_before() -> None:
    older = run(change(1, 0, "long text", "{}"), change(2, 0, "other", "[]"))
    newer = run(change(1, 1, unset=["note", "doc"]), change(2, 5, "short", unset=["doc"]))

    merged = merge_runs([older, newer], ["id"])

    assert rows(merged) == [(1, 1, "long text", "{}", None), (2, 5, "short", "[]", None)]


def test_partial_changes_chain_back_to_the_newest_change_holding_each_column() -> None:
    runs = [
        run(change(1, 0, "a", "x")),
        run(change(1, 1, "b", unset=["doc"])),
        run(change(1, 2, unset=["note", "doc"])),
    ]

    assert rows(merge_runs(runs, ["id"])) == [(1, 2, "b", "x", None)]


def test_within_one_batch_a_full_change_then_a_partial_one_reduce_to_a_full_row() -> None:
    batch = run(change(7, 1, "big", "d"), change(7, 2, unset=["note"]))  # doc: set to null

    assert rows(prepare_merge_run(batch, ["id"])) == [(7, 2, "big", None, None)]


def test_the_sequence_column_decides_which_change_is_older_not_the_run_order() -> None:
    # The partial change is in the older run but has the higher source position: it wins and
    # takes `note` from the change that precedes it in source order.
    runs = [run(change(1, 9, seq=20, unset=["note"])), run(change(1, 1, "kept", seq=10))]

    assert rows(merge_runs(runs, ["id"], "seq")) == [(1, 9, "kept", None, None)]


def test_a_delete_in_between_ends_the_search() -> None:
    runs = [
        run(change(1, 0, "before delete")),
        run(change(1, None, delete=True)),
        run(change(1, 3, unset=["note"])),
    ]

    assert rows(merge_runs(runs, ["id"])) == [(1, 3, None, None, None)]


def test_a_column_found_nowhere_stays_named_so_a_later_merge_with_older_files_fills_it() -> None:
    oldest = run(change(1, 0, "from the base file"))
    recent = [run(change(1, 1, unset=["note"])), run(change(1, 2, unset=["note"]))]

    compacted = merge_runs(recent, ["id"], keep_deletes=True)
    assert rows(compacted) == [(1, 2, None, None, ["note"])], "unknown here: null, still named"

    assert rows(merge_runs([oldest, compacted], ["id"])) == [
        (1, 2, "from the base file", None, None)
    ]


def test_a_winning_delete_stays_a_delete_and_complete_rows_are_untouched() -> None:
    runs = [
        run(change(1, 0, "a"), change(2, 0, "b"), change(3, 0, "c")),
        run(change(1, None, delete=True), change(2, 4, "new"), change(3, 5, unset=["note"])),
    ]

    merged = merge_runs(runs, ["id"], keep_deletes=True)

    assert [r[ROW_KIND_COLUMN] for r in merged.to_pylist()] == [1, 0, 0]
    assert rows(merged)[1:] == [(2, 4, "new", None, None), (3, 5, "c", None, None)]
    assert not has_partial_rows(merged)


def test_multi_column_keys_group_by_the_whole_key() -> None:
    schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("note", pa.string()),
                        (ROW_KIND_COLUMN, pa.int8()), (UNSET_COLUMN, UNSET_TYPE)])  # fmt: skip
    older = pa.Table.from_pylist(
        [{"a": 1, "b": "x", "note": "1x", ROW_KIND_COLUMN: 0},
         {"a": 1, "b": "y", "note": "1y", ROW_KIND_COLUMN: 0}],
        schema=schema,
    )  # fmt: skip
    newer = pa.Table.from_pylist(
        [{"a": 1, "b": "y", "note": None, ROW_KIND_COLUMN: 0, UNSET_COLUMN: ["note"]}],
        schema=schema,
    )

    merged = merge_runs([older, newer], ["a", "b"])

    assert sorted((r["b"], r["note"]) for r in merged.to_pylist()) == [("x", "1x"), ("y", "1y")]


_CHANGE = st.tuples(
    st.integers(0, 3),  # key
    st.sampled_from(["full", "partial", "delete"]),
    st.integers(0, 1000),  # seq
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_CHANGE, max_size=6), min_size=1, max_size=5))
def test_merging_runs_equals_applying_the_changes_one_by_one(
    plan: list[list[tuple[int, str, int]]],
) -> None:
    """Model: apply every change in (seq, run order); a partial change keeps `note` as it was."""
    runs: list[pa.Table] = []
    history: list[tuple[int, int, int, int, str]] = []  # seq, run, row, key, what
    for number, changes in enumerate(plan):
        table = []
        for row, (key, what, seq) in enumerate(changes):
            note = f"n{number}.{row}"
            table.append(
                change(key, number, None if what != "full" else note, seq=seq,
                       unset=["note"] if what == "partial" else None, delete=what == "delete")
            )  # fmt: skip
            history.append((seq, number, row, key, what))
        runs.append(run(*table))
    model: dict[int, tuple[int, str | None]] = {}
    for _seq, number, row, key, what in sorted(history):
        if what == "delete":
            model.pop(key, None)
        elif what == "full":
            model[key] = (number, f"n{number}.{row}")
        else:
            model[key] = (number, model[key][1] if key in model else None)

    merged = merge_runs(runs, ["id"], "seq")

    assert {r["id"]: (r["v"], r["note"]) for r in merged.to_pylist()} == model


@pytest.mark.parametrize("present", [False, True])
def test_tables_without_partial_rows_take_the_usual_path(present: bool) -> None:
    table = run(change(1, 0, "a"))
    if not present:
        table = table.drop_columns([UNSET_COLUMN])
    assert not has_partial_rows(table)


def test_merge_on_read_of_run_files_fills_partial_rows_and_hides_the_system_column(
    tmp_path: Path,
) -> None:
    table_schema = pa.schema(list(SCHEMA)[:5])
    base = run(change(1, 0, "big one", "{}"), change(2, 0, "big two", "[]"))
    files = [
        # written by a writer that never met a partial change: no unset column at all
        write_data_file(
            prepare_merge_run(base.drop_columns([UNSET_COLUMN]), ["id"]), tmp_path, bucket=0,
            options=FAST,
        ),
        write_data_file(
            prepare_merge_run(run(change(1, 1, unset=["note"])), ["id"]), tmp_path, bucket=0,
            options=FAST,
        ),
    ]  # fmt: skip

    for columns in (None, ["id", "note"], ["id", "v"]):
        merged = pa.Table.from_batches(
            list(read_merged(tmp_path, files, table_schema, ["id"], columns=columns))
        )
        assert merged.column_names == (columns or table_schema.names)
        got = {r["id"]: r for r in merged.to_pylist()}
        assert got[1].get("note", "big one") == "big one"
        assert got[1].get("v", 1) == 1
        assert got[2].get("note", "big two") == "big two"

    compacted = pa.Table.from_batches(
        list(read_merged(tmp_path, files[1:], table_schema, ["id"], include_row_kind=True))
    )
    assert compacted.column(UNSET_COLUMN).to_pylist() == [["note"]], "kept for a later merge"
