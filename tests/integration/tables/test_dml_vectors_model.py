"""Append tables whose DELETE/UPDATE write deletion vectors, against a multiset model
(hypothesis), real catalog and files (design step 3, docs/design/deletion-vectors.md).

Programs interleave appends, predicate DELETEs and UPDATEs (some moving rows to another
partition), compactions (bin-packing, and rewriting files past the deleted ratio), expiry and
vacuum. Vectors are kept inline or, with ``vectors.inline-max-bytes: 0``, in vector files. After
the program, every version still readable reads as the model did at that version, and the
change feed between consecutive versions is exactly the model's difference: vacuum never
deleted a vector file a live version needs, and a compaction never brought a marked row back.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import Catalog, VersionExpiredError
from catalog.table import Table
from jobs.table_compact import compact_table

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.int64())])
Row = tuple[Any, ...]
names = itertools.count()

regions = st.sampled_from(["eu", "us"])
totals = st.integers(0, 4)
rows = st.lists(st.tuples(st.integers(0, 9), regions, totals), min_size=1, max_size=8)
where = st.one_of(
    st.tuples(st.just("total"), st.sampled_from(["<=", ">", "="]), totals),
    st.tuples(st.just("id"), st.just("in"), st.lists(st.integers(0, 9), min_size=1, max_size=4)),
    st.tuples(st.just("region"), st.just("="), regions),
)
assignments = st.one_of(
    st.fixed_dictionaries({"total": totals}),
    st.fixed_dictionaries({"region": regions}),  # moves rows to the other partition
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), rows),
        st.tuples(st.just("delete"), st.lists(where, min_size=1, max_size=2)),
        st.tuples(
            st.just("update"), st.tuples(st.lists(where, min_size=1, max_size=2), assignments)
        ),
        st.tuples(st.just("compact"), st.none()),
        st.tuples(st.just("expire"), st.integers(1, 3)),
    ),
    min_size=3,
    max_size=10,
)
_OPS = {
    "<=": lambda v, x: v <= x,
    ">": lambda v, x: v > x,
    "=": lambda v, x: v == x,
    "in": lambda v, x: v in x,
}
_COLUMN = {"id": 0, "region": 1, "total": 2}


def matches(row: Row, predicates: list[tuple[str, str, Any]]) -> bool:
    return all(_OPS[op](row[_COLUMN[c]], value) for c, op, value in predicates)


def assigned(row: Row, values: dict[str, Any]) -> Row:
    out = list(row)
    for column, value in values.items():
        out[_COLUMN[column]] = value
    return tuple(out)


def scan(table: Table, version: int) -> list[Row]:
    data = table.scan(columns=SCHEMA.names, version=version).to_arrow().to_pylist()
    return sorted(tuple(r[c] for c in SCHEMA.names) for r in data)


def run_step(catalog: Catalog, table: Table, model: list[Row], step: tuple) -> list[Row]:
    """Run one step on the table and return the model after it."""
    kind, arg = step
    if kind == "append":
        batch = [dict(zip(SCHEMA.names, r, strict=True)) for r in arg]
        table.append(pa.Table.from_pylist(batch, SCHEMA))
        return sorted([*model, *arg])
    if kind == "delete":
        result = table.delete(where=arg)
        assert result.rows == sum(matches(r, arg) for r in model)
        return sorted(r for r in model if not matches(r, arg))
    if kind == "update":
        predicates, values = arg
        result = table.update(where=predicates, set=values)
        assert result.rows == sum(matches(r, predicates) for r in model)
        return sorted(assigned(r, values) if matches(r, predicates) else r for r in model)
    if kind == "compact":
        compact_table(catalog, table.name)
    elif kind == "expire":
        table.expire_versions(older_than=dt.timedelta(0), retain_last=arg)
        table.vacuum(older_than=dt.timedelta(0))
    return model


def feed_difference(table: Table, a: int, b: int) -> tuple[Counter[Row], Counter[Row]]:
    """Rows the change feed says left and came between versions a and b (net)."""
    gone: Counter[Row] = Counter()
    came: Counter[Row] = Counter()
    for r in table.changes(a + 1, b, net=True).to_pylist():
        row = tuple(r[c] for c in SCHEMA.names)
        (gone if r["_change_type"] in ("delete", "update_preimage") else came)[row] += 1
    return gone, came


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps, inline=st.booleans())
def test_append_dml_with_vectors_matches_the_model(
    catalog: Catalog, program: list[tuple], inline: bool
):
    properties = {"compaction.rewrite-deleted-ratio": "0.3"}
    if not inline:
        properties["vectors.inline-max-bytes"] = "0"
    table = catalog.create_table(
        f"dv.t{next(names)}", SCHEMA, partition_by=["region"], properties=properties
    )
    models: dict[int, list[Row]] = {0: []}
    model: list[Row] = []
    for step in program:
        model = run_step(catalog, table, model, step)
        models[table.current_version()] = model
        assert scan(table, table.current_version()) == model, step
    live = [v for v in sorted(models) if _readable(table, v)]
    for version in live:
        assert scan(table, version) == models[version], f"version {version} after vacuum"
    for a, b in itertools.pairwise(live):
        gone, came = feed_difference(table, a, b)
        old, new = Counter(models[a]), Counter(models[b])
        assert (gone, came) == (old - new, new - old), (a, b)


def _readable(table: Table, version: int) -> bool:
    try:
        table.plan(version=version)
    except VersionExpiredError:
        return False
    return True
