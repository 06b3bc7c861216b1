"""The change feed against the tables' own scans (hypothesis), on both table kinds, real catalog.

Programs mix appends or upserts (keys moving between partitions), key deletes, predicate
DELETE/UPDATE (copy-on-write on append tables, merge runs on CDC tables), compactions and
expiry. Then, for every pair of readable versions a < b: applying ``changes(a + 1, b)`` to the
scan at ``a`` gives the scan at ``b`` (each delete and pre-image removes a row that is there),
and ``changes(a + 1, b, net=True)`` is exactly the difference of the two scans.
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

from catalog import Catalog, ChangesExpiredError, VersionExpiredError
from catalog.table import Table
from jobs.table_compact import compact_table

pytestmark = pytest.mark.integration
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("total", pa.int64()),
        pa.field("seq", pa.int64()),
    ]
)
COLUMNS = SCHEMA.names
Row = tuple[Any, ...]
names = itertools.count()

ids = st.integers(0, 7)
regions = st.sampled_from(["eu", "us"])
totals = st.integers(0, 3)
rows = st.lists(
    st.fixed_dictionaries({"id": ids, "region": regions, "total": totals, "seq": totals}),
    min_size=1,
    max_size=4,
    unique_by=lambda r: r["id"],
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), rows),
        st.tuples(st.just("delete_keys"), st.lists(ids, min_size=1, max_size=3)),
        st.tuples(st.just("delete_where"), st.tuples(st.just("total"), st.just("<="), totals)),
        st.tuples(st.just("update_where"), st.tuples(regions, totals)),
        st.tuples(st.just("compact"), st.none()),
        st.tuples(st.just("expire"), st.integers(2, 4)),
    ),
    min_size=2,
    max_size=7,
)


def scan_rows(table: Table, version: int) -> list[Row]:
    data = table.scan(columns=COLUMNS, version=version).to_arrow().to_pylist()
    return [tuple(r[c] for c in COLUMNS) for r in data]


def change_rows(changes: pa.Table) -> list[tuple[str, int, Row]]:
    out = []
    for r in changes.to_pylist():
        out.append((r["_change_type"], r["_commit_version"], tuple(r[c] for c in COLUMNS)))
    return out


def apply_keyed(
    state: list[Row], changes: list[tuple[str, int, Row]], *, preimages: bool = True
) -> list[Row]:
    """Changes applied by key; without pre-images a post-image replaces the key's row."""
    keyed = {r[0]: r for r in state}
    for kind, _, row in changes:
        if kind in ("delete", "update_preimage"):
            assert keyed.pop(row[0]) == row, (kind, row)
        elif kind == "update_postimage" and not preimages:
            assert row[0] in keyed and keyed[row[0]] != row, (kind, row)
            keyed[row[0]] = row
        else:
            assert row[0] not in keyed, (kind, row)
            keyed[row[0]] = row
    return sorted(keyed.values())


def apply_multiset(state: list[Row], changes: list[tuple[str, int, Row]]) -> list[Row]:
    counts = Counter(state)
    for kind, _, row in changes:
        if kind in ("delete", "update_preimage"):
            assert counts[row] > 0, (kind, row)
            counts[row] -= 1
        else:
            counts[row] += 1
    return sorted(counts.elements())


def net_of_scans(cdc: bool, old: list[Row], new: list[Row]) -> Counter[tuple[str, Row]]:
    if not cdc:
        gone, came = Counter(old) - Counter(new), Counter(new) - Counter(old)
        return Counter({("delete", r): n for r, n in gone.items()}) + Counter(
            {("insert", r): n for r, n in came.items()}
        )
    before, after = {r[0]: r for r in old}, {r[0]: r for r in new}
    out: Counter[tuple[str, Row]] = Counter()
    for key in before.keys() | after.keys():
        b, a = before.get(key), after.get(key)
        if b == a:
            continue
        if b is None:
            out["insert", a] += 1
        elif a is None:
            out["delete", b] += 1
        else:
            out["update_preimage", b] += 1
            out["update_postimage", a] += 1
    return out


def run_step(catalog: Catalog, table: Table, cdc: bool, step: tuple) -> None:
    kind, arg = step
    if kind == "write":
        data = pa.Table.from_pylist(arg, schema=SCHEMA)
        (table.upsert if cdc else table.append)(data)
    elif kind == "delete_keys" and cdc and not table.meta.sequence_column:
        # Table.delete(keys) cannot give a sequence-ordered table the sequence value its
        # deletes need (SchemaError: "sequence column 'seq' holds nulls"); DML deletes can
        present = set(table.scan(columns=["id"]).to_arrow().column("id").to_pylist())
        keys = sorted(set(arg) & present)
        if keys:
            table.delete(pa.table({"id": pa.array(keys, pa.int64())}))
    elif kind == "delete_where":
        table.delete(where=[arg])
    elif kind == "update_where":
        region, total = arg
        table.update(where=[("region", "=", region)], set={"total": total})
    elif kind == "compact":
        compact_table(catalog, table.name)
    elif kind == "expire":
        table.expire_versions(older_than=dt.timedelta(0), retain_last=arg)


#: Table kinds: append; CDC; CDC ordered by a sequence column (a replayed older row loses and
#: changes nothing); CDC without pre-images.
KINDS = {
    "append": None,
    "cdc": {},
    "cdc_sequence": {"sequence-column": "seq"},
    "cdc_no_preimages": {"changes.preimages": "false"},
}


@pytest.mark.parametrize("kind", list(KINDS))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps)
def test_changes_turn_one_scan_into_the_other(catalog: Catalog, kind: str, program: list[tuple]):
    cdc, properties = kind != "append", KINDS[kind]
    preimages = kind != "cdc_no_preimages"
    name = f"feed.t{next(names)}"
    if cdc:
        table = catalog.create_table(
            name,
            SCHEMA,
            primary_key=["id"],
            hash_buckets=2,
            # a key moving partition in a sequence-ordered table is refused by upsert (its
            # delete from the old partition has no sequence value): not partitioned there
            partition_by=[] if kind == "cdc_sequence" else ["region"],
            properties=properties or None,
        )
    else:
        table = catalog.create_table(name, SCHEMA, partition_by=["region"])
    scans = {0: []}
    for step in program:
        run_step(catalog, table, cdc, step)
        version = table.current_version()
        if version not in scans:
            scans[version] = sorted(scan_rows(table, version))
    latest = table.current_version()
    oldest = min(v for v in range(latest + 1) if _readable(table, v))
    for a in range(oldest, latest + 1):
        old = scans.get(a)
        if old is None:
            continue  # a compaction's intermediate version: not recorded
        for b in range(a + 1, latest + 1):
            if b not in scans:
                continue
            changes = change_rows(table.changes(a + 1, b))
            assert all(a < v <= b for _, v, _ in changes)
            assert [v for _, v, _ in changes] == sorted(v for _, v, _ in changes)
            if cdc:
                applied = apply_keyed(old, changes, preimages=preimages)
            else:
                applied = apply_multiset(old, changes)
            assert applied == scans[b], (a, b, changes)
            net = Counter((k, r) for k, _, r in change_rows(table.changes(a + 1, b, net=True)))
            expected = net_of_scans(cdc, old, scans[b])
            if not preimages:
                expected = Counter({c: n for c, n in expected.items() if c[0] != "update_preimage"})
            assert net == expected, (a, b)
            reader = table.changes_reader(a + 1, b).read_all()
            assert change_rows(reader) == changes
    if oldest > 1:
        with pytest.raises(ChangesExpiredError) as caught:
            table.changes(oldest - 1)
        assert f"version {oldest - 1}" in str(caught.value)
        assert f"below {oldest}" in str(caught.value)


def _readable(table: Table, version: int) -> bool:
    try:
        table.plan(version=version)
    except VersionExpiredError:
        return False
    return True
