"""A compaction that rewrites files with deletion vectors drops the rows they mark: its
outputs hold the live rows only and carry no vector, and every version reads as before."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import Catalog
from compaction.task import CompactionKind, OutcomeStatus
from tests.fixtures.compaction import compact_all, every_version, rows_at
from tests.fixtures.vectors import mark_rows

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


def batch(start: int, n: int, region: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": pa.array([region] * n, pa.string()),
            "amount": pa.array([i * 0.5 for i in range(n)], pa.float64()),
        }
    )


def test_bin_packing_marked_files_drops_the_marked_rows(catalog: Catalog):
    events = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    for i in range(4):
        events.append(batch(i * 10, 10, "eu"))
    mark_rows(events, {0, 1, 15}, inline_max=1024)
    mark_rows(events, {39}, inline_max=0)
    before = every_version(events)

    outcomes = compact_all(catalog, events)

    assert [(o.status, o.task.kind) for o in outcomes] == [
        (OutcomeStatus.COMMITTED, CompactionKind.BIN_PACK)
    ]
    assert outcomes[0].rows_in == outcomes[0].rows_out == 36
    (output,) = events.plan().files
    assert (output.row_count, output.vector) == (36, None)
    assert rows_at(events) == before[max(before)]
    assert [r[0] for r in rows_at(events)] == [i for i in range(40) if i not in {0, 1, 15, 39}]
    for version, rows in before.items():
        assert rows_at(events, version) == rows


def test_merging_a_bucket_with_a_marked_run_masks_it_before_the_merge(catalog: Catalog):
    orders = catalog.create_table("shop.orders", EVENTS, primary_key=["id"], hash_buckets=1)
    orders.upsert(batch(0, 5, "eu"))
    orders.upsert(pa.table({"id": [1, 2], "region": ["us", "us"], "amount": [9.0, 9.5]}))
    mark_rows(orders, {"us"}, column="region")  # the newer run's rows: keys 1 and 2 as before
    mark_rows(orders, {4}, inline_max=0)  # key 4 gone
    before = rows_at(orders)

    outcomes = compact_all(catalog, orders)

    assert [o.status for o in outcomes] == [OutcomeStatus.COMMITTED]
    assert rows_at(orders) == before == [(i, "eu", i * 0.5) for i in range(4)]
    assert [f.vector for f in orders.plan().files] == [None]
