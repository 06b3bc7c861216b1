"""The change feed's pure logic: one commit's changes from two states, and folding to net changes.

No database and no files here: :mod:`catalog.changes` reads the states and hands them over, so
these functions are what the unit tests pin down.

A change table has the table's columns plus :data:`CHANGE_TYPE`, :data:`COMMIT_VERSION` and
:data:`COMMIT_TIMESTAMP` (Spark 4.2's names; Delta's Change Data Feed uses the same ones). Its
rows apply in order: ``insert`` and ``update_postimage`` add a row, ``delete`` and
``update_preimage`` remove one. On a keyed (CDC) table each key's changes chain: a change's
before-state is the previous change's after-state.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
INSERT = "insert"
DELETE = "delete"
PREIMAGE = "update_preimage"
POSTIMAGE = "update_postimage"
CHANGE_TYPES = (INSERT, PREIMAGE, POSTIMAGE, DELETE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_WEIGHT = "__ls_weight"
_OLD, _NEW = "__ls_old", "__ls_new"


def change_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of the changes of a table with ``schema`` (its columns, then the three)."""
    return (
        schema.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False))
        .append(pa.field(COMMIT_VERSION, pa.int64(), nullable=False))
        .append(pa.field(COMMIT_TIMESTAMP, TIMESTAMP_TYPE, nullable=False))
    )


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def labelled(rows: pa.Table, kind: str, version: int, at: dt.datetime) -> pa.Table:
    """``rows`` as changes of one kind, made by ``version`` at ``at``."""
    n = rows.num_rows
    return (
        rows.append_column(CHANGE_TYPE, pa.array([kind] * n, pa.string()))
        .append_column(COMMIT_VERSION, pa.array(np.full(n, version, np.int64)))
        .append_column(COMMIT_TIMESTAMP, pa.array([at] * n, TIMESTAMP_TYPE))
    )


def empty_changes(schema: pa.Schema) -> pa.Table:
    return change_schema(_nullable(schema)).empty_table()


def _concat(parts: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    target = change_schema(_nullable(schema))
    tables = [p.cast(target) for p in parts if p.num_rows]
    return pa.concat_tables(tables) if tables else target.empty_table()


def rows_differ(left: pa.Table, right: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Per row of two equally long tables with the same columns: whether any value differs
    (two nulls are equal, a null and a value are not)."""
    differs: pa.ChunkedArray | pa.Array = pa.array(np.zeros(left.num_rows, bool))
    for name in left.column_names:
        a, b = left.column(name), right.column(name)
        one = pc.fill_null(pc.not_equal(a, b), pc.xor(pc.is_null(a), pc.is_null(b)))
        differs = pc.or_(differs, one)
    return differs


def _interleaved(pre: pa.Table, post: pa.Table) -> pa.Table:
    """Each pre-image right before its post-image (the order Delta and Spark emit them in)."""
    n = pre.num_rows
    order = np.empty(2 * n, np.int64)
    order[0::2] = np.arange(n)
    order[1::2] = np.arange(n, 2 * n)
    return pa.concat_tables([pre, post]).take(pa.array(order))


def keyed_diff(
    old: pa.Table, new: pa.Table, key: Sequence[str], version: int, at: dt.datetime
) -> pa.Table:
    """The changes that turn ``old`` into ``new`` (both one row per key, same columns): a key
    only in ``new`` is an insert, only in ``old`` a delete (with its whole old row), in both
    with any value changed an update pre-image then post-image; an unchanged key is no change.
    Deletes, then updates, then inserts, each in key order."""
    schema = old.schema
    old_keys = old.select(list(key)).append_column(_OLD, pa.array(np.arange(old.num_rows)))
    new_keys = new.select(list(key)).append_column(_NEW, pa.array(np.arange(new.num_rows)))
    joined = old_keys.join(new_keys, keys=list(key), join_type="full outer", use_threads=False)
    joined = joined.sort_by([(k, "ascending") for k in key])  # a join's order is arbitrary
    i_old, i_new = joined.column(_OLD), joined.column(_NEW)
    both = pc.and_(pc.is_valid(i_old), pc.is_valid(i_new))
    deleted = old.take(pc.drop_null(pc.filter(i_old, pc.is_null(i_new))))
    inserted = new.take(pc.drop_null(pc.filter(i_new, pc.is_null(i_old))))
    pre = old.take(pc.filter(i_old, both))
    post = new.take(pc.filter(i_new, both))
    changed = rows_differ(pre, post)
    pre, post = pre.filter(changed), post.filter(changed)
    parts = [
        labelled(deleted, DELETE, version, at),
        labelled(_interleaved(pre, post), PREIMAGE, version, at),
        labelled(inserted, INSERT, version, at),
    ]
    if pre.num_rows:  # relabel the interleaved post-images
        updates = parts[1]
        kinds = np.array([PREIMAGE, POSTIMAGE] * pre.num_rows, dtype=object)
        parts[1] = updates.set_column(
            updates.schema.get_field_index(CHANGE_TYPE), CHANGE_TYPE, pa.array(kinds, pa.string())
        )
    return _concat(parts, schema)


def multiset_diff(removed: pa.Table, added: pa.Table, version: int, at: dt.datetime) -> pa.Table:
    """The changes between the rows of the files a commit removed and those it added, on a
    table without a key: rows are compared whole, as a multiset, so rows a rewrite carried over
    unchanged cancel out and what remains is deletes and inserts (no key pairs them into
    updates)."""
    schema = removed.schema
    weighted = pa.concat_tables(
        [
            removed.append_column(_WEIGHT, pa.array(np.full(removed.num_rows, -1, np.int64))),
            added.append_column(_WEIGHT, pa.array(np.full(added.num_rows, 1, np.int64))),
        ]
    )
    counts = _net_counts(weighted, schema.names)
    return _concat(
        [
            labelled(_repeat(counts, pc.negate(counts.column(_WEIGHT))), DELETE, version, at),
            labelled(_repeat(counts, counts.column(_WEIGHT)), INSERT, version, at),
        ],
        schema,
    )


def _net_counts(weighted: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Per distinct row of ``columns``: the sum of its weights (grouping keeps nulls as values)."""
    grouped = weighted.group_by(list(columns), use_threads=False).aggregate([(_WEIGHT, "sum")])
    return grouped.rename_columns([*columns, _WEIGHT]).select([*columns, _WEIGHT])


def _repeat(counts: pa.Table, times: pa.ChunkedArray | pa.Array) -> pa.Table:
    """Each row of ``counts`` (weight column dropped) repeated ``times`` times (<= 0: none)."""
    n = np.maximum(np.asarray(pc.fill_null(times, 0).to_numpy(zero_copy_only=False)), 0)
    rows = counts.drop_columns([_WEIGHT])
    return rows.take(pa.array(np.repeat(np.arange(rows.num_rows), n)))


def net_changes(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    """Fold ``changes`` (in commit order) to the net change of each key, or, without a key,
    of each distinct row.

    Keyed: a key's net before-state is the pre-image of its first change (none when that is an
    insert), its net after-state the last change's post-image (none when that is a delete); so
    a key inserted then deleted inside the range vanishes, and one changed back to where it
    started too. The net rows carry the version and time of the key's last change. Without a
    key, the rows are counted: inserts +1, deletes -1, and the net count remains."""
    if changes.num_rows == 0:
        return changes
    if key:
        return _net_keyed(changes, key)
    return _net_multiset(changes)


def _net_keyed(changes: pa.Table, key: Sequence[str]) -> pa.Table:
    columns = [c for c in changes.column_names if c not in (CHANGE_TYPE, COMMIT_VERSION)]
    columns = [c for c in columns if c != COMMIT_TIMESTAMP]
    kinds = changes.column(CHANGE_TYPE).to_pylist()
    keys = changes.select(list(key)).to_pylist()
    first_before: dict[tuple[object, ...], int | None] = {}
    last_after: dict[tuple[object, ...], int | None] = {}
    last_change: dict[tuple[object, ...], int] = {}
    for i, (kind, row) in enumerate(zip(kinds, keys, strict=True)):
        k = tuple(row.values())
        if kind in {POSTIMAGE, INSERT}:
            last_after[k] = i
        elif kind == DELETE:
            last_after[k] = None
        if k not in first_before:
            first_before[k] = None if kind == INSERT else i
        last_change[k] = i
    deletes, inserts, pre, post, stamps_update, stamps_del, stamps_ins = ([] for _ in range(7))
    for k, before in first_before.items():
        after = last_after.get(k)
        stamp = last_change[k]
        if before is None and after is None:
            continue
        if before is None:
            inserts.append(after)
            stamps_ins.append(stamp)
        elif after is None:
            deletes.append(before)
            stamps_del.append(stamp)
        else:
            pre.append(before)
            post.append(after)
            stamps_update.append(stamp)
    data = changes.select(columns)
    pre_rows, post_rows = (
        data.take(pa.array(pre, pa.int64())),
        data.take(pa.array(post, pa.int64())),
    )
    changed = rows_differ(pre_rows, post_rows)
    keep = (
        np.asarray(changed.to_numpy(zero_copy_only=False), bool) if len(pre) else np.zeros(0, bool)
    )
    pre_idx = np.asarray(pre, np.int64)[keep]
    post_idx = np.asarray(post, np.int64)[keep]
    upd_stamps = np.asarray(stamps_update, np.int64)[keep]
    parts = [
        _restamped(changes, deletes, stamps_del, DELETE),
        _restamped_updates(changes, pre_idx, post_idx, upd_stamps),
        _restamped(changes, inserts, stamps_ins, INSERT),
    ]
    return pa.concat_tables(parts)


def _restamped(
    changes: pa.Table, rows: Sequence[int | None], stamps: Sequence[int], kind: str
) -> pa.Table:
    """Rows of ``changes`` as ``kind``, with the version and time of the rows at ``stamps``."""
    picked = changes.take(pa.array([r for r in rows if r is not None], pa.int64()))
    stamp_rows = changes.take(pa.array(list(stamps), pa.int64()))
    return _with_meta(picked, [kind] * picked.num_rows, stamp_rows)


def _restamped_updates(
    changes: pa.Table,
    pre: np.ndarray,
    post: np.ndarray,
    stamps: np.ndarray,
) -> pa.Table:
    n = len(pre)
    order = np.empty(2 * n, np.int64)
    order[0::2], order[1::2] = pre, post
    picked = changes.take(pa.array(order))
    stamp_rows = changes.take(pa.array(np.repeat(stamps, 2)))
    return _with_meta(picked, [PREIMAGE, POSTIMAGE] * n, stamp_rows)


def _with_meta(picked: pa.Table, kinds: Sequence[str], stamp_rows: pa.Table) -> pa.Table:
    out = picked.set_column(
        picked.schema.get_field_index(CHANGE_TYPE), CHANGE_TYPE, pa.array(kinds, pa.string())
    )
    for name in (COMMIT_VERSION, COMMIT_TIMESTAMP):
        out = out.set_column(out.schema.get_field_index(name), name, stamp_rows.column(name))
    return out


def _net_multiset(changes: pa.Table) -> pa.Table:
    columns = [c for c in changes.column_names if c not in (CHANGE_TYPE, COMMIT_VERSION)]
    columns = [c for c in columns if c != COMMIT_TIMESTAMP]
    inserted = pc.is_in(changes.column(CHANGE_TYPE), pa.array([INSERT, POSTIMAGE]))
    weights = pc.if_else(inserted, 1, -1).cast(pa.int64())
    weighted = changes.select(columns).append_column(_WEIGHT, weights)
    grouped = weighted.append_column(COMMIT_VERSION, changes.column(COMMIT_VERSION))
    grouped = grouped.append_column(COMMIT_TIMESTAMP, changes.column(COMMIT_TIMESTAMP))
    sums = grouped.group_by(columns, use_threads=False).aggregate(
        [(_WEIGHT, "sum"), (COMMIT_VERSION, "max"), (COMMIT_TIMESTAMP, "max")]
    )
    sums = sums.rename_columns(
        [
            {
                f"{_WEIGHT}_sum": _WEIGHT,
                f"{COMMIT_VERSION}_max": COMMIT_VERSION,
                f"{COMMIT_TIMESTAMP}_max": COMMIT_TIMESTAMP,
            }.get(c, c)
            for c in sums.column_names
        ]
    )
    stamps = sums.select([COMMIT_VERSION, COMMIT_TIMESTAMP])
    rows = sums.select([*columns, _WEIGHT])
    parts = []
    for kind, times in (
        (DELETE, pc.negate(rows.column(_WEIGHT))),
        (INSERT, rows.column(_WEIGHT)),
    ):
        n = np.maximum(np.asarray(pc.fill_null(times, 0).to_numpy(zero_copy_only=False)), 0)
        idx = pa.array(np.repeat(np.arange(rows.num_rows), n))
        picked = rows.drop_columns([_WEIGHT]).take(idx)
        picked = picked.append_column(CHANGE_TYPE, pa.array([kind] * picked.num_rows, pa.string()))
        for name in (COMMIT_VERSION, COMMIT_TIMESTAMP):
            picked = picked.append_column(name, stamps.column(name).take(idx))
        parts.append(picked.cast(changes.schema))
    return pa.concat_tables(parts)
