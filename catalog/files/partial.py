"""Partial changes: rows that leave some columns out, filled from the key's previous change.

Debezium cannot send a PostgreSQL column that is stored out of line (TOASTed) and that an
UPDATE left unchanged (under the default ``REPLICA IDENTITY``); it sends a placeholder instead.
Such a change is written as a *partial* row: the columns it lacks hold nulls and are named in
the row's :data:`~catalog.model.UNSET_COLUMN` (null for a complete row).

Whenever changes of a key are merged - a batch reduced to one change per key, a bucket's runs
merged on read or compacted - a winning partial row takes each unset column from the newest
older change of the same key that has it (the same order that picks the winner). A delete in
between ends the search: the key was gone, there is no value to keep. A column found nowhere
among the merged changes stays null *and stays named*, so that a later merge that includes
older files (a compaction of recent runs only, say) can still fill it; a plain read shows it as
null. Like Hudi's PostgreSQL Debezium payload, this keeps the stored value instead of the
placeholder.

Only merges whose input holds a partial row take this path (one extra sort); the others never
see it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from catalog.files.keyorder import key_changes, sort_spec
from catalog.model import UNSET_COLUMN, UNSET_TYPE

Indices = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def has_partial_rows(data: pa.Table) -> bool:
    """Whether any row of ``data`` names unset columns."""
    if UNSET_COLUMN not in data.column_names:
        return False
    column = data.column(UNSET_COLUMN)
    return bool(column.null_count < len(column))


def take_filled(
    data: pa.Table,
    winners: Indices,
    primary_key: Sequence[str],
    sequence_column: str | None,
) -> pa.Table:
    """``data.take(winners)`` with each winner's unset columns filled from older changes.

    ``data`` holds changes oldest first (the order ties are broken by); ``winners`` are the rows
    :func:`catalog.files.merge.last_change_per_key` chose.
    """
    out = data.take(pa.array(winners))
    if not has_partial_rows(data) or len(winners) == 0:
        return out
    order, group_start = _sorted_groups(data, primary_key, sequence_column)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    at = rank[winners]  # the winners' positions in sorted order
    lacking = _lacking(data.column(UNSET_COLUMN))
    still: dict[str, Mask] = {}
    for name, missing in lacking.items():
        if name not in data.column_names:
            continue
        source, unresolved = _sources(missing, order, group_start, at, winners)
        column = data.column(name).take(pa.array(source))
        if unresolved.any():
            column = pc.if_else(pa.array(unresolved), pa.scalar(None, column.type), column)
        out = out.set_column(out.schema.get_field_index(name), out.schema.field(name), column)
        still[name] = unresolved
    index = out.schema.get_field_index(UNSET_COLUMN)
    return out.set_column(index, out.schema.field(index), _unset_column(still, len(winners)))


def _sorted_groups(
    data: pa.Table, primary_key: Sequence[str], sequence_column: str | None
) -> tuple[Indices, Indices]:
    """Rows sorted as the merge sorts them (key, then sequence; stable), and for each sorted
    position the position where its key's group starts."""
    spec = sort_spec(primary_key, sequence_column)
    order = np.asarray(pc.sort_indices(data, sort_keys=spec).to_numpy(), dtype=np.int64)
    n = len(order)
    starts = np.zeros(n, dtype=np.bool_)
    starts[0] = True
    for name in primary_key:
        starts[1:] |= key_changes(data.column(name).take(pa.array(order)))
    positions = np.where(starts, np.arange(n, dtype=np.int64), 0)
    return order, np.maximum.accumulate(positions)


def _lacking(unset: pa.ChunkedArray) -> dict[str, Mask]:
    """Per column named anywhere in ``unset``: which rows lack it."""
    flat = unset.combine_chunks() if isinstance(unset, pa.ChunkedArray) else unset
    names = np.asarray(pc.list_flatten(flat).to_numpy(zero_copy_only=False), dtype=object)
    parents = np.asarray(pc.list_parent_indices(flat).to_numpy(), dtype=np.int64)
    lacking: dict[str, Mask] = {}
    for name in dict.fromkeys(names.tolist()):
        missing = np.zeros(len(flat), dtype=np.bool_)
        missing[parents[names == name]] = True
        lacking[str(name)] = missing
    return lacking


def _sources(
    missing: Mask, order: Indices, group_start: Indices, at: Indices, winners: Indices
) -> tuple[Indices, Mask]:
    """For each winner, the row to take the column from (itself when it has it), and which
    winners lack it with no older change of their key to take it from."""
    n = len(order)
    has_it = ~missing[order]  # deletes count: their null ends the search
    last_with = np.maximum.accumulate(np.where(has_it, np.arange(n, dtype=np.int64), -1))
    found_at = last_with[at]
    needs = missing[winners]
    found = found_at >= group_start[at]
    source = np.where(needs & found, order[np.maximum(found_at, 0)], winners)
    return source, needs & ~found


def _unset_column(still: dict[str, Mask], length: int) -> pa.Array:
    """The winners' unset lists after filling: the columns no older change could give."""
    if not any(mask.any() for mask in still.values()):
        return pa.nulls(length, UNSET_TYPE)
    names: list[list[str] | None] = [None] * length
    for name, mask in still.items():
        for row in np.flatnonzero(mask).tolist():
            names[row] = [*(names[row] or []), name]
    return pa.array(names, UNSET_TYPE)
