"""The key index of one CDC bucket: where each key's highest resolved row is (design D1).

A resolver (:mod:`compaction.rewrite`, kind ``resolve``) builds a :class:`BucketIndex` in memory
from the key, sequence and row-kind columns of a bucket's *resolved* files and their deletion
vectors, then applies the bucket's pending runs to it oldest first. Each application returns the
rows to mark (file ordinal -> positions): the older live rows a run's winners supersede, the
run's own losing rows (stale replays, a key written twice), and the run's delete rows
(tombstones). The index is never stored: at version V it is a pure function of the files and
vectors the catalog names at V, so any worker rebuilds exactly the same one.

Per key the index holds one entry: the file ordinal and row position of the key's highest
resolved row, its sequence value and row kind, and whether it is live. A dead entry is a
tombstone; it stays because it keeps an older replay of the key from coming back.

The winner of a key is decided by the read kernel (:func:`catalog.files.merge.last_change_per_key`),
the one rule every merge of the table uses; this module only lays the index's entries (older)
and the run's rows (newer) end to end for it.

Lookups: a single integer-like key is kept as a sorted numpy array searched with
``searchsorted``; a single key of another type is looked up with Arrow's hash-based
``pc.index_in``; a composite key with Arrow's hash join (``index_in`` has no kernel for struct
values).

Pure: no database, no storage. Callers read the columns (:func:`index_columns`) and vectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from catalog.files.keyorder import key_changes
from catalog.files.merge import last_change_per_key
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT

Positions = npt.NDArray[np.int64]
#: Marks a resolution adds: file ordinal (build order, then one per applied run) -> positions.
Marks = dict[int, Positions]

FILE = "_ix_file"
POSITION = "_ix_pos"
LIVE = "_ix_live"
_ROW = "_ix_row"


def index_columns(primary_key: Sequence[str], sequence_column: str | None) -> list[str]:
    """The columns a file is read with to build or apply the index (row kind read if present)."""
    columns = list(primary_key)
    if sequence_column is not None and sequence_column not in columns:
        columns.append(sequence_column)
    return columns


def _int_key(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.int64] | None:
    t = column.type
    if not pa.types.is_integer(t) or pa.types.is_uint64(t):
        return None
    return np.asarray(column.to_numpy(), dtype=np.int64)


class BucketIndex:
    """Key -> (file ordinal, position, sequence, row kind, live) of the key's highest resolved
    row. Build it with :meth:`build`, then :meth:`apply_run` each pending run, oldest first."""

    def __init__(
        self, primary_key: Sequence[str], sequence_column: str | None, entries: pa.Table, files: int
    ) -> None:
        self.primary_key = tuple(primary_key)
        self.sequence_column = sequence_column
        self.files = files
        """Ordinals handed out so far: the next applied run gets this one."""
        self._columns = index_columns(primary_key, sequence_column)
        self._entries = entries
        self._sorted: npt.NDArray[np.int64] | None = None
        self._sort()

    # ------------------------------------------------------------------------------ building

    @classmethod
    def build(
        cls,
        primary_key: Sequence[str],
        sequence_column: str | None,
        files: Sequence[pa.Table],
        vectors: Sequence[npt.NDArray[np.integer] | None],
    ) -> BucketIndex:
        """The index of resolved files (chain order; file ``i`` gets ordinal ``i``), each given
        as its :func:`index_columns` (+ row kind when it has one) and its vector's positions.

        Per key the entry is its live row when it has one (by I1 at most one, the key's winner);
        otherwise, all its rows marked, the one with the highest sequence, ties going to a
        delete row: that is the tombstone that ended the key. Chain order among resolved files
        is not relied on (a resolver's commit moves the files it names to the end of the reset
        row), only for a last tie-break.
        """
        columns = index_columns(primary_key, sequence_column)
        pieces = [
            _tagged(_with_kind(f, columns), i, _live(f.num_rows, v))
            for i, (f, v) in enumerate(zip(files, vectors, strict=True))
        ]
        empty = cls(primary_key, sequence_column, _empty(columns, files), len(files))
        if not pieces or sum(p.num_rows for p in pieces) == 0:
            return empty
        rows = pa.concat_tables(pieces, promote_options="permissive")
        return cls(primary_key, sequence_column, _highest(rows, primary_key, columns), len(files))

    def _sort(self) -> None:
        """Keep entries sorted by key when the key is one integer column (searchsorted)."""
        if len(self.primary_key) != 1 or not self._entries.num_columns:
            return
        key = _int_key(self._entries.column(self.primary_key[0]))
        if key is None:
            return
        order = np.argsort(key, kind="stable")
        self._entries = self._entries.take(pa.array(order))
        self._sorted = key[order]

    # ------------------------------------------------------------------------------- reading

    def __len__(self) -> int:
        rows: int = self._entries.num_rows
        return rows

    @property
    def entries(self) -> pa.Table:
        """Key columns, sequence, row kind, file ordinal, position and live flag per key."""
        return self._entries

    @property
    def live_count(self) -> int:
        return int(np.count_nonzero(self._entries.column(LIVE).to_numpy(zero_copy_only=False)))

    def locations(self) -> tuple[Positions, Positions]:
        """File ordinal and position of every entry, in :attr:`entries` order."""
        if not self._entries.num_columns:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        ordinals = np.asarray(self._entries.column(FILE).to_numpy(), dtype=np.int64)
        positions = np.asarray(self._entries.column(POSITION).to_numpy(), dtype=np.int64)
        return ordinals, positions

    def lookup(self, keys: pa.Table) -> Positions:
        """For each row of ``keys`` (the key columns), its entry's row in :attr:`entries`, or -1."""
        n = keys.num_rows
        if n == 0 or len(self) == 0:
            return np.full(n, -1, dtype=np.int64)
        if self._sorted is not None:
            wanted = _int_key(keys.column(self.primary_key[0]))
            if wanted is not None:
                at = np.searchsorted(self._sorted, wanted)
                clipped = np.minimum(at, len(self._sorted) - 1)
                found = (at < len(self._sorted)) & (self._sorted[clipped] == wanted)
                return np.where(found, clipped, -1).astype(np.int64)
        if len(self.primary_key) == 1:
            name = self.primary_key[0]
            column = keys.column(name).cast(self._entries.schema.field(name).type)
            at = pc.index_in(column, value_set=self._entries.column(name).combine_chunks())
            return np.asarray(at.fill_null(-1).to_numpy(), dtype=np.int64)
        return self._joined(keys)

    def _joined(self, keys: pa.Table) -> Positions:
        probe = keys.select(list(self.primary_key)).append_column(
            _ROW, pa.array(np.arange(keys.num_rows, dtype=np.int64))
        )
        held = self._entries.select(list(self.primary_key)).append_column(
            FILE + "_at", pa.array(np.arange(len(self), dtype=np.int64))
        )
        joined = probe.join(held, keys=list(self.primary_key), join_type="inner")
        out = np.full(keys.num_rows, -1, dtype=np.int64)
        rows = np.asarray(joined.column(_ROW).to_numpy(), dtype=np.int64)
        out[rows] = np.asarray(joined.column(FILE + "_at").to_numpy(), dtype=np.int64)
        return out

    # ------------------------------------------------------------------------------ applying

    def apply_run(self, run: pa.Table) -> Marks:
        """Resolve one pending run (its :func:`index_columns`, + row kind when it has one)
        against the index; the run becomes the next file ordinal. Returns the marks to add:
        superseded older live rows, the run's losing rows and the run's delete rows."""
        ordinal = self.files
        self.files += 1
        rows = _tagged(_with_kind(run, self._columns), ordinal, np.ones(run.num_rows, np.bool_))
        if not self._entries.num_columns:  # built from no file: the run's types are the index's
            self._entries = rows.schema.empty_table()
        rows = rows.cast(self._entries.schema)
        found = self.lookup(rows)
        older = np.unique(found[found >= 0])
        data = pa.concat_tables([self._entries.take(pa.array(older)), rows])
        winners = last_change_per_key(data, self.primary_key, self.sequence_column)
        won = np.zeros(data.num_rows, dtype=np.bool_)
        won[winners] = True
        marks = self._marks(data, won, len(older))
        self._replace(older[~won[: len(older)]], data.filter(pa.array(won)), len(older), won)
        return marks

    def _marks(self, data: pa.Table, won: npt.NDArray[np.bool_], older: int) -> Marks:
        """Losing live rows, and winning delete rows of the run (tombstones)."""
        live = np.asarray(data.column(LIVE).to_numpy(zero_copy_only=False), dtype=np.bool_)
        kind = np.asarray(data.column(ROW_KIND_COLUMN).to_numpy(), dtype=np.int8)
        from_run = np.arange(data.num_rows) >= older
        marked = (live & ~won) | (from_run & won & (kind == ROW_KIND_DELETE))
        files = np.asarray(data.column(FILE).to_numpy(), dtype=np.int64)[marked]
        positions = np.asarray(data.column(POSITION).to_numpy(), dtype=np.int64)[marked]
        return {int(f): np.sort(positions[files == f]) for f in np.unique(files)}

    def _replace(
        self,
        lost: Positions,
        winners: pa.Table,
        older: int,
        won: npt.NDArray[np.bool_],
    ) -> None:
        """Entries that lost leave; the run's winners come in (deletes as dead entries)."""
        keep = np.ones(len(self), dtype=np.bool_)
        keep[lost] = False
        run_won = int(won[older:].sum())
        fresh = winners.slice(winners.num_rows - run_won)  # the run's rows come last in data
        kind = pc.equal(fresh.column(ROW_KIND_COLUMN), ROW_KIND_UPSERT)
        fresh = fresh.set_column(fresh.schema.get_field_index(LIVE), LIVE, kind)
        kept = self._entries.filter(pa.array(keep))
        self._entries = pa.concat_tables([kept, fresh.cast(kept.schema)])
        self._sort()

    def as_dict(self) -> dict[tuple[object, ...], tuple[object, ...]]:
        """key -> (sequence, row kind, live, file, position): what tests compare."""
        out: dict[tuple[object, ...], tuple[object, ...]] = {}
        seq = self.sequence_column
        for row in self._entries.to_pylist():
            key = tuple(row[c] for c in self.primary_key)
            seq_value = row[seq] if seq is not None else None
            out[key] = (seq_value, row[ROW_KIND_COLUMN], row[LIVE], row[FILE], row[POSITION])
        return out


# ---------------------------------------------------------------------------------- helpers


def _with_kind(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The index columns and the row kind (files written without one hold upserts only)."""
    out = table.select(list(columns))
    if ROW_KIND_COLUMN in table.column_names:
        kind = table.column(ROW_KIND_COLUMN).cast(pa.int8())
    else:
        kind = pa.array(np.full(table.num_rows, ROW_KIND_UPSERT, dtype=np.int8))
    return out.append_column(ROW_KIND_COLUMN, kind)


def _tagged(table: pa.Table, ordinal: int, live: npt.NDArray[np.bool_]) -> pa.Table:
    n = table.num_rows
    table = table.append_column(FILE, pa.array(np.full(n, ordinal, dtype=np.int32)))
    table = table.append_column(POSITION, pa.array(np.arange(n, dtype=np.int64)))
    return table.append_column(LIVE, pa.array(live))


def _live(rows: int, vector: npt.NDArray[np.integer] | None) -> npt.NDArray[np.bool_]:
    live = np.ones(rows, dtype=np.bool_)
    if vector is not None and len(vector):
        live[np.asarray(vector, dtype=np.int64)] = False
    return live


def _empty(columns: Sequence[str], files: Sequence[pa.Table]) -> pa.Table:
    """No entry; without a file to take the key types from, no column either (the first run
    gives them)."""
    if not files:
        return pa.table({})
    fields = [files[0].schema.field(c) for c in columns]
    schema = pa.schema(
        [
            *fields,
            pa.field(ROW_KIND_COLUMN, pa.int8()),
            pa.field(FILE, pa.int32()),
            pa.field(POSITION, pa.int64()),
            pa.field(LIVE, pa.bool_()),
        ]
    )
    return schema.empty_table()


def _highest(rows: pa.Table, primary_key: Sequence[str], columns: Sequence[str]) -> pa.Table:
    """Per key its entry row (see :meth:`BucketIndex.build`): sorted so it comes last."""
    is_delete = pc.equal(rows.column(ROW_KIND_COLUMN), ROW_KIND_DELETE)
    ranked = rows.append_column("_ix_delete", is_delete)
    spec = [(c, "ascending") for c in primary_key]
    spec.append((LIVE, "ascending"))
    spec += [(c, "ascending") for c in columns if c not in primary_key]
    spec += [("_ix_delete", "ascending"), (FILE, "ascending"), (POSITION, "ascending")]
    order = pc.sort_indices(ranked, sort_keys=spec)
    ordered = rows.take(order)
    last = np.ones(ordered.num_rows, dtype=np.bool_)
    if ordered.num_rows > 1:
        changed = np.zeros(ordered.num_rows - 1, dtype=np.bool_)
        for column in primary_key:
            changed |= key_changes(ordered.column(column))
        last[:-1] = changed
    return ordered.filter(pa.array(last))


def marks_by_path(marks: Mapping[int, Positions], paths: Sequence[str]) -> dict[str, Positions]:
    """Marks keyed by the data file path of each ordinal."""
    return {paths[ordinal]: positions for ordinal, positions in marks.items()}
