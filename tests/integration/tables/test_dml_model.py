"""Predicate DELETE/UPDATE against a model (hypothesis), on both table kinds, real catalog.

Programs mix writes (appends; upserts that move keys between partitions; partial upserts that
leave a column out; key deletes), compactions and statements; a statement may race a write or
a compaction landed between its files and its commit. After every step the table must read
exactly as the model, which applies a raced write first and the statement after it (the
statement lost and was evaluated again) - a compaction changes nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import Catalog, CommitConflict, CommitOp, RetryPolicy
from catalog.dml import run_statement
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_UPSERT, UNSET_COLUMN, UNSET_TYPE
from catalog.table import Table
from catalog.writes import changes, stage_changes
from jobs.table_compact import compact_table

pytestmark = pytest.mark.integration
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("status", pa.string()),
        pa.field("total", pa.int64()),
    ]
)
Row = dict[str, Any]
names = itertools.count()

ids = st.integers(0, 11)
regions = st.sampled_from(["eu", "us", "ap"])
statuses = st.sampled_from(["a", "b", None])
totals = st.integers(0, 9)
rows = st.lists(
    st.fixed_dictionaries({"id": ids, "region": regions, "status": statuses, "total": totals}),
    min_size=1,
    max_size=6,
    unique_by=lambda r: r["id"],  # one upsert call holding a key twice in two partitions
)  # keeps both (a limit of Table.upsert, not of statements)
predicates = st.lists(
    st.one_of(
        st.tuples(st.just("region"), st.just("="), regions),
        st.tuples(st.just("status"), st.just("="), st.sampled_from(["a", "b"])),
        st.tuples(st.just("status"), st.sampled_from(["is_null", "is_not_null"]), st.none()),
        st.tuples(st.just("total"), st.sampled_from([">", "<=", "!="]), totals),
        st.tuples(st.just("id"), st.just("in"), st.lists(ids, min_size=1, max_size=4)),
    ),
    min_size=1,
    max_size=2,
)
assignments = st.dictionaries(
    st.sampled_from(["region", "status", "total"]),
    st.one_of(statuses, totals),
    min_size=1,
    max_size=2,
).filter(
    lambda a: (
        all(
            (isinstance(v, int) and c == "total") or (not isinstance(v, int) and c != "total")
            for c, v in a.items()
        )
        and a.get("region", "eu") is not None
    )
)
statements = st.tuples(st.sampled_from(["delete", "update"]), predicates, assignments)
races = st.sampled_from([None, "write", "compact"])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), rows),
        st.tuples(st.just("partial"), rows),
        st.tuples(st.just("delete_keys"), st.lists(ids, min_size=1, max_size=3)),
        st.tuples(st.just("compact"), st.none()),
        st.tuples(st.just("statement"), st.tuples(statements, races, rows)),
    ),
    min_size=1,
    max_size=8,
)


def matches(row: Row, where: list[tuple[str, str, Any]]) -> bool:
    """SQL semantics: a null never satisfies a comparison."""
    for column, op, value in where:
        v = row[column]
        if op == "is_null":
            ok = v is None
        elif op == "is_not_null":
            ok = v is not None
        elif v is None:
            ok = False
        elif op == "in":
            ok = v in value
        else:
            ok = {"=": v == value, "!=": v != value, ">": v > value, "<=": v <= value}[op]
        if not ok:
            return False
    return True


class Model:
    """What the table must read: keyed rows (CDC) or a multiset of rows (append)."""

    def __init__(self, cdc: bool) -> None:
        self.cdc = cdc
        self.keyed: dict[int, Row] = {}
        self.plain: list[Row] = []

    def rows(self) -> list[Row]:
        return list(self.keyed.values()) if self.cdc else list(self.plain)

    def write(self, batch: list[Row]) -> None:
        if self.cdc:
            for row in batch:  # the last row of a key wins within a batch
                self.keyed[row["id"]] = dict(row)
        else:
            self.plain += [dict(r) for r in batch]

    def partial(self, batch: list[Row]) -> list[Row]:
        """Partial changes leave ``status`` out; they keep the key's partition (as a stream's
        partial change does) and are filled from the key's previous change."""
        sent = []
        for row in {r["id"]: r for r in batch}.values():
            old = self.keyed.get(row["id"])
            region = old["region"] if old else row["region"]
            self.keyed[row["id"]] = {**row, "region": region, "status": old and old["status"]}
            sent.append({**row, "region": region})
        return sent

    def delete_keys(self, keys: list[int]) -> None:
        for key in keys:
            self.keyed.pop(key, None)

    def statement(self, kind: str, where: list, assigned: dict[str, Any]) -> int:
        hit = [r for r in self.rows() if matches(r, where)]
        if kind == "delete":
            if self.cdc:
                for r in hit:
                    del self.keyed[r["id"]]
            else:
                self.plain = [r for r in self.plain if not matches(r, where)]
        else:
            for r in hit:
                r.update(assigned)
        return len(hit)


def table_rows(table: Table) -> list[tuple]:
    data = table.scan(columns=SCHEMA.names).to_arrow().to_pylist()
    return sorted((tuple(r.values()) for r in data), key=repr)


def as_tuples(rows_: list[Row]) -> list[tuple]:
    return sorted((tuple(r[c] for c in SCHEMA.names) for r in rows_), key=repr)


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


def run_step(catalog: Catalog, table: Table, model: Model, step: tuple) -> None:
    kind, arg = step
    if kind == "write":
        (table.upsert if model.cdc else table.append)(arrow(arg))
        model.write(arg)
    elif kind == "partial" and model.cdc:
        write_partial(table, model.partial(arg))
    elif kind == "delete_keys" and model.cdc:
        present = [k for k in arg if k in model.keyed]  # Table.delete(keys) of absent keys in
        if present:  # a partitioned table commits nothing and is refused (a known limit)
            table.delete(pa.table({"id": pa.array(present, pa.int64())}))
            model.delete_keys(present)
    elif kind == "compact":
        compact_table(catalog, table.name)
    elif kind == "statement":
        _statement(catalog, table, model, arg)


def _statement(catalog: Catalog, table: Table, model: Model, arg: tuple) -> None:
    """``arg``: the statement, the race (None, a write or a compaction) and the raced rows.

    A raced write that lands in a partition the statement commits to makes it lose and run
    again (the model: write, then statement); one that lands only elsewhere does not conflict,
    and the statement applies to the rows it read (the model: statement, then write)."""
    (kind, where, assigned), race, raced_rows = arg
    raced: list[set[str]] = []

    def land(attempt: int) -> None:
        if attempt > 1 or race is None:
            return
        if race == "write":
            other = catalog.load_table(table.name)
            landed = (other.upsert if model.cdc else other.append)(arrow(raced_rows))
            raced.append(set(landed.tables[0].partition_versions))
        else:
            raced.append(set())
            compact_table(catalog, table.name)

    result = run_statement(
        table,
        where,
        assigned if kind == "update" else None,
        retry=RetryPolicy(attempts=3, sleep=lambda _: None),
        before_commit=land,
    )
    wrote_first = race == "write" and bool(raced) and result.attempts == 2
    if wrote_first:
        model.write(raced_rows)
    expected = model.statement(kind, where, assigned)
    if race == "write" and raced and not wrote_first:
        model.write(raced_rows)
    assert result.rows == expected
    assert result.attempts <= 2
    if result.attempts == 1 and raced and result.commit is not None:
        mine = set(result.commit.tables[0].partition_versions)
        assert not raced[0] & mine, "a write to the statement's partitions must make it lose"


@pytest.mark.parametrize("kind", ["append", "cdc"])
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps)
def test_statements_match_the_model(catalog: Catalog, kind: str, program: list[tuple]):
    name = f"model.t{next(names)}"
    if kind == "cdc":
        table = catalog.create_table(
            name, SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
        )
    else:
        table = catalog.create_table(name, SCHEMA, partition_by=["region"])
    model = Model(cdc=kind == "cdc")
    for step in program:
        run_step(catalog, table, model, step)
        assert table_rows(table) == as_tuples(model.rows()), step


# ---------------------------------------------------------------------- races, one by one


def _table(catalog: Catalog, kind: str, properties: dict[str, str] | None = None) -> Table:
    if kind == "cdc":
        return catalog.create_table(
            "shop.t", SCHEMA, primary_key=["id"], hash_buckets=2, properties=properties
        )
    return catalog.create_table("shop.t", SCHEMA)


def _lands(action: Callable[[], object]) -> Callable[[int], None]:
    def land(attempt: int) -> None:
        if attempt == 1:
            action()

    return land


@pytest.mark.parametrize("kind", ["append", "cdc"])
def test_a_statement_that_keeps_losing_leaves_nothing(catalog: Catalog, kind: str, warehouse):
    table = _table(catalog, kind)
    write = table.upsert if kind == "cdc" else table.append
    write(arrow([{"id": 1, "region": "eu", "status": "a", "total": 1}]))
    counter = itertools.count(100)

    def always(attempt: int) -> None:
        write(arrow([{"id": next(counter), "region": "eu", "status": "a", "total": 1}]))

    with pytest.raises(CommitConflict) as lost:
        run_statement(
            table,
            [("region", "=", "eu")],
            None,
            retry=RetryPolicy(attempts=3, sleep=lambda _: None),
            before_commit=always,
        )
    assert lost.value.winning_op == ("merge" if kind == "cdc" else "append")
    assert table.scan().count() == 4, "the three writes landed; nothing of the statement"
    live = {f.path for f in table.plan().files}
    on_disk = {
        str(p.relative_to(table.meta.location))
        for p in Path(table.meta.location).rglob("*.parquet")
    }
    assert on_disk == live, "the statement's files of every attempt were deleted"


def test_cdc_statement_rebases_on_tables_ordered_by_source_position(catalog: Catalog):
    """``commit.concurrent-merge`` (the tables the ingest job makes): a statement and a
    concurrent merge rebase on each other as two streams do; the result is the serial order
    statement -> merge, because the statement's rows keep their rows' sequence values."""
    schema = SCHEMA.append(pa.field("seq", pa.int64(), nullable=False))
    table = catalog.create_table(
        "shop.t",
        schema,
        primary_key=["id"],
        hash_buckets=2,
        properties={"sequence-column": "seq", "commit.concurrent-merge": "true"},
    )

    def batch(items: list[tuple[int, str, int]]) -> pa.Table:
        return pa.Table.from_pylist(
            [{"id": i, "region": "eu", "status": s, "total": 0, "seq": q} for i, s, q in items],
            schema=schema,
        )

    table.upsert(batch([(1, "a", 10), (2, "a", 10), (3, "a", 10)]))
    later = batch([(1, "b", 20), (4, "a", 20)])  # the source changed 1 and made 4 meanwhile
    result = run_statement(
        table,
        [("status", "=", "a")],
        {"status": "void"},
        before_commit=_lands(lambda: catalog.load_table("shop.t").upsert(later)),
    )
    assert (result.rows, result.attempts) == (3, 1)
    got = {r["id"]: r["status"] for r in table.scan().to_arrow().to_pylist()}
    assert got == {1: "b", 2: "void", 3: "void", 4: "a"}


@pytest.mark.parametrize("kind", ["append", "cdc"])
def test_a_compaction_landed_mid_statement_is_not_lost_or_doubled(catalog: Catalog, kind: str):
    table = _table(catalog, kind)
    write = table.upsert if kind == "cdc" else table.append
    for i in range(4):
        write(arrow([{"id": i, "region": "eu", "status": "a", "total": i}]))
    result = run_statement(
        table,
        [("total", ">=", 2)],
        None,
        before_commit=_lands(lambda: compact_table(catalog, "shop.t")),
    )
    assert (result.rows, result.attempts) == (2, 1)  # update overwrites / merge rebases
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == [0, 1]
    ops = [v.op for v in table.history(limit=2)]
    assert ops[1] is CommitOp.COMPACTION
