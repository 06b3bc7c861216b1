"""CDC reads of resolved buckets (issue 49 step 4, design D6): a resolved prefix scanned minus
its vectors, pending runs merged against it (the tail), against the merge of the same version
with vectors ignored and against a dict model (hypothesis, real catalog).

Programs mix upserts (stale replays below a key's sequence value among them), partial upserts,
predicate DELETE/UPDATE (which read the merged state) and resolutions of a random prefix of
each bucket by the brute-force reference resolver (:mod:`tests.fixtures.reference_resolver`).
Then every version reads the same through Arrow (columns, filters on key and non-key columns,
an Arrow expression), DuckDB and Polars on the reader, and time travel.
"""

from __future__ import annotations

import itertools
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import Catalog, CommitOp
from catalog.files.reader import read_merged
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_UPSERT, UNSET_COLUMN, UNSET_TYPE
from catalog.table import Table
from catalog.writes import changes, stage_changes
from jobs.table_compact import compact_table
from tests.fixtures.reference_resolver import resolve
from tests.fixtures.resolved import assert_resolved_invariants

pytestmark = pytest.mark.integration
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("status", pa.string()),
        pa.field("total", pa.int64()),
        pa.field("seq", pa.int64()),
    ]
)
Row = dict[str, Any]
names = itertools.count()

ids = st.integers(0, 5)
rows = st.lists(
    st.fixed_dictionaries(
        {"id": ids, "status": st.sampled_from(["a", "b", None]), "total": st.integers(0, 3)}
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda r: r["id"],
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.tuples(rows, st.integers(-30, 0))),
        st.tuples(st.just("partial"), rows),
        st.tuples(st.just("delete"), st.integers(0, 3)),
        st.tuples(st.just("update"), st.integers(0, 3)),
        st.tuples(st.just("resolve"), st.none() | st.integers(1, 4)),
    ),
    min_size=2,
    max_size=9,
)


class Model:
    """Every change of each key, in commit order; a key reads as its winner - the highest
    sequence value, ties to the newer change (without a sequence column, the newest) - with a
    partial winner's ``status`` taken from the nearest older change in that order that has it
    (a delete ends the search: None)."""

    def __init__(self, sequenced: bool) -> None:
        self.sequenced = sequenced
        self.changes: dict[int, list[tuple[int, int, str, Row]]] = {}
        self.clock = 10
        self.order = itertools.count()

    def rows(self) -> list[Row]:
        return [row for row in map(self._state, self.changes.values()) if row is not None]

    def _state(self, changes: list[tuple[int, int, str, Row]]) -> Row | None:
        ordered = sorted(changes, key=lambda c: (c[0], c[1]) if self.sequenced else c[1])
        _, _, kind, row = ordered[-1]
        if kind == "delete":
            return None
        if kind == "partial":
            older = [c for c in ordered[:-1] if c[2] != "partial"]
            last = older[-1] if older else None
            status = last[3]["status"] if last is not None and last[2] == "upsert" else None
            row = {**row, "status": status}
        return row

    def add(self, kind: str, row: Row) -> None:
        self.changes.setdefault(row["id"], []).append((row["seq"], next(self.order), kind, row))


def arrow(batch: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(batch, schema=SCHEMA)


def write_partial(table: Table, batch: list[Row]) -> None:
    """Partial upserts as the ingest job writes them: ``status`` named in ``_ls_unset``."""
    data = arrow(batch).append_column(
        pa.field(ROW_KIND_COLUMN, pa.int8()), pa.array([ROW_KIND_UPSERT] * len(batch), pa.int8())
    )
    data = data.append_column(
        pa.field(UNSET_COLUMN, UNSET_TYPE), pa.array([["status"]] * len(batch), UNSET_TYPE)
    )
    staged = stage_changes(table.meta, changes(table.meta, data))
    table.commit(CommitOp.MERGE, staged.partitions)


def run_step(table: Table, model: Model, step: tuple[str, Any]) -> None:
    kind, arg = step
    if kind == "write":
        batch, lag = arg
        model.clock += 5
        sent = [{**r, "seq": model.clock + lag} for r in batch]  # lag < 0: a stale replay
        table.upsert(arrow(sent))
        for row in sent:
            model.add("upsert", row)
    elif kind == "partial":
        model.clock += 5
        sent = [{**row, "seq": model.clock, "status": None} for row in arg]
        write_partial(table, sent)
        for row in sent:
            model.add("partial", row)
    elif kind in ("delete", "update"):
        hit = [r for r in model.rows() if r["total"] <= arg]
        if kind == "delete":
            table.delete(where=[("total", "<=", arg)])
            for row in hit:  # a delete at the row's sequence value
                model.add("delete", row)
        else:
            table.update(where=[("total", "<=", arg)], set={"status": "u"})
            for row in hit:  # a whole row at the row's sequence value
                model.add("upsert", {**row, "status": "u"})
    elif kind == "resolve":
        resolve(table, runs=arg)
        assert_resolved_invariants(table)  # the contract's state (helper-b1's checker)


def reference(table: Table, version: int) -> list[Row]:
    """The version merged as before resolution: every bucket's files, vectors and resolved
    flags ignored (every mark a resolver writes is a row this merge drops anyway)."""
    meta = table.meta
    runs = pa.schema(
        [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
    )
    found: list[Row] = []
    for part in table.plan(version=version).partitions:
        bare = [f.model_copy(update={"vector": None, "resolved": None}) for f in part.files]
        for batch in read_merged(
            meta.files,
            bare,
            runs,
            meta.primary_key,
            sequence_column=meta.sequence_column,
            columns=SCHEMA.names,
        ):
            found += batch.to_pylist()
    return found


def by_id(found: list[Row]) -> list[Row]:
    return sorted(found, key=lambda r: r["id"])


def check_reads(table: Table, version: int, expected: list[Row]) -> None:
    def scan(**kw: Any) -> list[Row]:
        return by_id(table.scan(version=version, **kw).to_arrow().to_pylist())

    assert scan(columns=SCHEMA.names) == expected
    assert scan(columns=SCHEMA.names, filter=[("total", ">=", 2)]) == [
        r for r in expected if r["total"] >= 2
    ]
    assert scan(columns=SCHEMA.names, filter=[("status", "=", "a"), ("id", "<=", 5)]) == [
        r for r in expected if r["status"] == "a" and r["id"] <= 5
    ]
    assert scan(columns=SCHEMA.names, filter=[("id", "in", [1, 2, 8])]) == [
        r for r in expected if r["id"] in (1, 2, 8)
    ]
    assert scan(columns=SCHEMA.names, filter=pc.field("total") < 2) == [
        r for r in expected if r["total"] < 2
    ]
    totals = table.scan(version=version, columns=["total"]).to_arrow().column(0).to_pylist()
    assert sorted(totals) == sorted(r["total"] for r in expected)
    reader = table.scan(version=version).to_reader()  # noqa: F841 - DuckDB finds it by name
    got = duckdb.sql("SELECT count(*), coalesce(sum(id), 0) FROM reader").fetchall()
    assert got == [(len(expected), sum(r["id"] for r in expected))]
    frame = pl.from_arrow(
        table.scan(version=version, columns=["id", "status"]).to_reader().read_all()
    )
    assert isinstance(frame, pl.DataFrame)
    assert frame.sort("id").to_dicts() == [{"id": r["id"], "status": r["status"]} for r in expected]


@pytest.mark.parametrize("sequenced", [True, False], ids=["sequence-column", "no-sequence"])
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps)
def test_resolved_buckets_read_as_the_merge_and_the_model(
    catalog: Catalog, sequenced: bool, program: list[tuple[str, Any]]
) -> None:
    table = catalog.create_table(
        f"resolved.t{next(names)}",
        SCHEMA,
        primary_key=["id"],
        hash_buckets=2,
        properties={"sequence-column": "seq"} if sequenced else None,
    )
    model = Model(sequenced)
    models: dict[int, list[Row]] = {}
    for step in [*program, ("resolve", None)]:
        run_step(table, model, step)
        models[table.current_version()] = by_id(model.rows())
    for version, expected in models.items():
        assert by_id(reference(table, version)) == expected
        check_reads(table, version, expected)


def test_a_replay_below_a_resolved_tombstone_stays_deleted(catalog: Catalog) -> None:
    """Key 1 deleted at seq 20 and resolved (its rows marked); a replay at seq 15 in a pending
    run must not bring it back, nor may masking the tombstone first let it in."""
    table = catalog.create_table(
        "resolved.replay",
        SCHEMA,
        primary_key=["id"],
        hash_buckets=1,
        properties={"sequence-column": "seq"},
    )
    table.upsert(
        arrow(
            [
                {"id": 1, "status": "a", "total": 1, "seq": 20},
                {"id": 2, "status": "b", "total": 2, "seq": 20},
            ]
        )
    )
    table.delete(where=[("id", "=", 1)])
    resolve(table)
    assert not table.plan().partitions[0].merge  # fully resolved: a plain scan
    table.upsert(
        arrow(
            [
                {"id": 1, "status": "old", "total": 0, "seq": 15},
                {"id": 2, "status": "new", "total": 5, "seq": 25},
            ]
        )
    )
    part = table.plan().partitions[0]
    assert part.merge and len(part.tail) == 1

    assert by_id(table.scan(columns=SCHEMA.names).to_arrow().to_pylist()) == [
        {"id": 2, "status": "new", "total": 5, "seq": 25}
    ]
    table.upsert(arrow([{"id": 1, "status": "again", "total": 3, "seq": 20}]))  # a tie: newer wins
    assert by_id(table.scan(columns=["id", "status"]).to_arrow().to_pylist()) == [
        {"id": 1, "status": "again"},
        {"id": 2, "status": "new"},
    ]


def test_compaction_folds_a_bucket_with_a_resolved_prefix_and_a_tail(catalog: Catalog) -> None:
    table = catalog.create_table(
        "resolved.fold",
        SCHEMA,
        primary_key=["id"],
        hash_buckets=1,
        properties={"sequence-column": "seq", "compaction.max-sorted-runs": "2"},
    )
    table.upsert(arrow([{"id": i, "status": "a", "total": i, "seq": 10} for i in range(6)]))
    table.delete(where=[("id", "in", [0, 1])])
    resolve(table)
    table.upsert(
        arrow(
            [
                {"id": 0, "status": "stale", "total": 0, "seq": 5},
                {"id": 2, "status": "b", "total": 9, "seq": 11},
            ]
        )
    )
    before = by_id(table.scan(columns=SCHEMA.names).to_arrow().to_pylist())

    compact_table(catalog, table.name)

    table.refresh()
    assert all(len(p.files) == 1 for p in table.plan().partitions)
    assert by_id(table.scan(columns=SCHEMA.names).to_arrow().to_pylist()) == before
    assert [r["id"] for r in before] == [2, 3, 4, 5]
