"""The tail merge of a CDC bucket (design D6 of docs/design/deletion-vectors.md): the rules that
decide, from the pending runs merged alone, which resolved rows still count.

A bucket's resolved prefix minus its vectors holds exactly its live rows, at most one per key,
each its key's winner among the resolved rows (invariant I1); a key's highest resolved row,
ignoring vectors, is that live row or a marked tombstone. The pending runs after it (the *tail*)
are merged alone into winners W with keys K. Then, key by key:

- a live resolved row of a key in K no longer counts when W's row beats it;
- W's row counts (if an upsert) only when it beats its key's highest resolved row, live or
  dead, so a stale replay below a tombstone never comes back.

"Beats" is the merge kernel's rule: a higher sequence value, ties going to the newer row (W,
the tail comes after every resolved file); without a sequence column W always beats. Keys with
a partial change in the tail are merged exactly instead: their resolved rows (vectors ignored)
and tail rows through the kernel, which fills the partial row from the newest older change.

The functions here are pure (Arrow tables in, masks and tables out); the reader
(:mod:`catalog.files.reader`) finds the rows they need in the files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from catalog.files.partial import has_partial_rows
from catalog.model import UNSET_COLUMN

Mask = npt.NDArray[np.bool_]

_ROW = "_ls_tail_row"
_SEQ = "_ls_tail_seq"
_HIGHEST = "_ls_tail_highest"


def key_mask(table: pa.Table, keys: pa.Table, primary_key: Sequence[str]) -> Mask:
    """Per row of ``table``, whether its key is one of ``keys``' rows (hash lookups, in row
    order)."""
    if table.num_rows == 0 or keys.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.bool_)
    if len(primary_key) == 1:
        name = primary_key[0]
        values = keys.column(name).combine_chunks()
        if not values.type.equals(table.schema.field(name).type):
            values = values.cast(table.schema.field(name).type)
        found = pc.is_in(table.column(name), value_set=values)
        return np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.bool_)
    left = table.select(list(primary_key)).append_column(
        _ROW, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    right = keys.select(list(primary_key)).group_by(list(primary_key)).aggregate([])
    hits = left.join(right, keys=list(primary_key), join_type="left semi")
    mask = np.zeros(table.num_rows, dtype=np.bool_)
    mask[np.asarray(hits.column(_ROW).to_numpy(), dtype=np.int64)] = True
    return mask


def split_partial(tail: pa.Table, primary_key: Sequence[str]) -> tuple[pa.Table, pa.Table]:
    """The tail's rows of keys without a partial change, and of keys with one (those are merged
    exactly, with their resolved rows)."""
    if not has_partial_rows(tail):
        return tail, tail.slice(0, 0)
    partial = tail.filter(pc.is_valid(tail.column(UNSET_COLUMN)))
    of_partial = key_mask(tail, partial, primary_key)
    return tail.filter(pa.array(~of_partial)), tail.filter(pa.array(of_partial))


def beating(
    winners: pa.Table,
    resolved: pa.Table | None,
    primary_key: Sequence[str],
    sequence_column: str | None,
) -> Mask:
    """Per tail winner, whether it beats its key's highest resolved row, live or dead.

    ``resolved`` holds key and sequence columns of resolved rows, vectors ignored (any rows:
    only the keys of ``winners`` matter). A winner beats when its key has no resolved row, when
    its sequence value is at least the highest (a tie goes to the newer row, the tail's), and
    always without a sequence column.
    """
    if (
        sequence_column is None
        or sequence_column in primary_key
        or resolved is None
        or resolved.num_rows == 0
        or winners.num_rows == 0
    ):
        return np.ones(winners.num_rows, dtype=np.bool_)
    key = list(primary_key)
    highest = (
        resolved.select([*key, sequence_column])
        .group_by(key)
        .aggregate([(sequence_column, "max")])
        .rename_columns([*key, _HIGHEST])
    )
    left = winners.select(key).append_column(_SEQ, winners.column(sequence_column))
    left = left.append_column(_ROW, pa.array(np.arange(winners.num_rows, dtype=np.int64)))
    joined = left.join(highest, keys=key, join_type="left outer")
    # no resolved row (null): beats; ``or_kleene`` because null >= x is null, not false
    beats = pc.or_kleene(
        pc.is_null(joined.column(_HIGHEST)),
        pc.greater_equal(joined.column(_SEQ), joined.column(_HIGHEST)),
    )
    mask = np.zeros(winners.num_rows, dtype=np.bool_)
    rows = np.asarray(joined.column(_ROW).to_numpy(), dtype=np.int64)
    mask[rows] = np.asarray(beats.to_numpy(zero_copy_only=False), dtype=np.bool_)
    return mask
