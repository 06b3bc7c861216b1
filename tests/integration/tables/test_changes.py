"""The change feed on a real catalog: what each kind of commit emits, ranges, options, and the
consumer registry that keeps expiry and vacuum from removing what a reader has not read."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    ChangeFeedError,
    ChangesExpiredError,
    ConsumerNotFoundError,
    VersionNotFoundError,
)
from catalog.table import Table
from jobs.table_compact import compact_table

pytestmark = pytest.mark.integration
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("total", pa.float64()),
    ]
)
ZERO = dt.timedelta(0)


def rows(*values: tuple[int, str, float]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "region": r, "total": t} for i, r, t in values], schema=SCHEMA
    )


def seen(changes: pa.Table) -> list[tuple[str, int, int, str, float]]:
    return sorted(
        (r["_change_type"], r["_commit_version"], r["id"], r["region"], r["total"])
        for r in changes.to_pylist()
    )


def cdc_table(catalog: Catalog, **properties: str) -> Table:
    return catalog.create_table(
        "shop.orders",
        SCHEMA,
        primary_key=["id"],
        hash_buckets=2,
        partition_by=["region"],
        properties=properties or None,
    )


def test_append_table_inserts_and_copy_on_write_rewrites(catalog: Catalog):
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    events.append(rows((1, "eu", 1.0), (2, "eu", 2.0), (3, "us", 3.0)))  # v1
    events.append(rows((4, "eu", 4.0)))  # v2
    compact_table(catalog, events.name)
    compacted = events.current_version()
    events.delete(where=[("id", "=", 2)])  # rewrites eu: the other eu rows carry over
    deleted = events.current_version()
    events.update(where=[("id", "=", 3)], set={"total": 30.0})
    updated = events.current_version()

    assert seen(events.changes(1, 2)) == [
        ("insert", 1, 1, "eu", 1.0),
        ("insert", 1, 2, "eu", 2.0),
        ("insert", 1, 3, "us", 3.0),
        ("insert", 2, 4, "eu", 4.0),
    ]
    assert events.changes(3, compacted).num_rows == 0, "a compaction changes no row"
    assert seen(events.changes(compacted + 1)) == [
        ("delete", deleted, 2, "eu", 2.0),
        ("delete", updated, 3, "us", 3.0),  # no key: an update is a delete and an insert
        ("insert", updated, 3, "us", 30.0),
    ]
    net = events.changes(1, net=True)
    assert seen(net) == [
        ("insert", 1, 1, "eu", 1.0),
        ("insert", 2, 4, "eu", 4.0),
        ("insert", updated, 3, "us", 30.0),
    ]
    history = {v.version: v.committed_at for v in events.history()}
    stamps = events.changes(1).to_pylist()
    assert all(r["_commit_timestamp"] == history[r["_commit_version"]] for r in stamps)


@pytest.mark.parametrize("reads", ["key lookups", "whole partitions"])
def test_cdc_table_updates_carry_pre_images_and_moves_are_updates(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, reads: str
):
    if reads == "whole partitions":  # what a version touching many keys does
        monkeypatch.setattr("catalog.changes.LOOKUP_MAX_KEYS", 0)
    orders = cdc_table(catalog)
    orders.upsert(rows((1, "eu", 1.0), (2, "eu", 2.0)))  # v1
    orders.upsert(rows((1, "us", 1.5), (3, "us", 3.0)))  # v2: 1 moves partition
    orders.upsert(rows((3, "us", 3.0)))  # v3: the same values again: no change
    orders.delete(pa.table({"id": pa.array([2], pa.int64())}))  # v4
    orders.update(where=[("region", "=", "us")], set={"total": 9.0})  # v5

    assert seen(orders.changes(2)) == [
        ("delete", 4, 2, "eu", 2.0),
        ("insert", 2, 3, "us", 3.0),
        ("update_postimage", 2, 1, "us", 1.5),
        ("update_postimage", 5, 1, "us", 9.0),
        ("update_postimage", 5, 3, "us", 9.0),
        ("update_preimage", 2, 1, "eu", 1.0),
        ("update_preimage", 5, 1, "us", 1.5),
        ("update_preimage", 5, 3, "us", 3.0),
    ]
    one = orders.changes(2, 2).to_pylist()
    assert [r["_change_type"] for r in one if r["id"] == 1] == [
        "update_preimage",
        "update_postimage",
    ]
    assert seen(orders.changes(2, net=True)) == [
        ("delete", 4, 2, "eu", 2.0),
        ("insert", 5, 3, "us", 9.0),
        ("update_postimage", 5, 1, "us", 9.0),
        ("update_preimage", 5, 1, "eu", 1.0),
    ]


def test_options_columns_filter_as_of_reader_and_ranges(catalog: Catalog):
    orders = cdc_table(catalog, **{"changes.preimages": "false"})
    orders.upsert(rows((1, "eu", 1.0)))  # v1
    time.sleep(0.01)
    between = dt.datetime.now(dt.UTC)
    orders.upsert(rows((1, "eu", 2.0), (2, "us", 5.0)))  # v2

    assert seen(orders.changes(2)) == [
        ("insert", 2, 2, "us", 5.0),
        ("update_postimage", 2, 1, "eu", 2.0),  # no pre-image: the property says so
    ]
    assert seen(orders.changes(as_of=between)) == seen(orders.changes(2))
    picked = orders.changes(1, columns=["id"], filter=[("region", "=", "us")])
    assert picked.column_names == ["id", "_change_type", "_commit_version", "_commit_timestamp"]
    assert picked.column("id").to_pylist() == [2]
    reader = orders.changes_reader(1)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.read_all().num_rows == orders.changes(1).num_rows
    assert orders.changes(3).num_rows == 0, "an empty range (start above the latest): no change"
    with pytest.raises(VersionNotFoundError, match="not 9"):
        orders.changes(1, 9)
    with pytest.raises(ChangeFeedError):
        orders.changes()
    with pytest.raises(ChangeFeedError):
        orders.changes(1, as_of=between)


def _orders_with_versions(catalog: Catalog, n: int) -> Table:
    orders = cdc_table(catalog)
    for i in range(n):
        orders.upsert(rows((i % 3, "eu", float(i))))
    return orders


def test_expiry_and_vacuum_keep_what_a_live_consumer_has_not_read(catalog: Catalog):
    orders = _orders_with_versions(catalog, 8)
    before = orders.changes(4)
    consumer = catalog.register_consumer(orders.name, "indexer", 3)
    assert (consumer.version, consumer.next_version, consumer.alive) == (3, 4, True)

    report = orders.expire_versions(older_than=ZERO, retain_last=1)
    orders.vacuum(older_than=ZERO)

    assert report.horizon == 3, "the consumer's position and every newer version stay"
    assert orders.changes(4).equals(before)
    catalog.advance_consumer(orders, "indexer", 6)
    assert orders.expire_versions(older_than=ZERO, retain_last=1).horizon == 6
    orders.vacuum(older_than=ZERO)
    assert orders.changes(7).equals(before.filter(pa.compute.greater(before["_commit_version"], 6)))
    assert [c.consumer_id for c in catalog.consumers(orders.name)] == ["indexer"]
    assert catalog.drop_consumer(orders.name, "indexer")
    assert orders.expire_versions(older_than=ZERO, retain_last=1).horizon == 8


def test_a_consumer_dead_past_its_ttl_protects_nothing_and_fails_naming_both_versions(
    catalog: Catalog,
):
    orders = _orders_with_versions(catalog, 6)
    catalog.register_consumer(orders.name, "stale", 2, ttl=dt.timedelta(milliseconds=1))
    time.sleep(0.05)
    assert not catalog.consumer(orders.name, "stale").alive

    assert orders.expire_versions(older_than=ZERO, retain_last=2).horizon == 5

    message = "consumer 'stale' of shop.orders: changes from version 3 need version 2"
    with pytest.raises(ChangesExpiredError, match=message) as caught:
        catalog.consumer(orders.name, "stale")
    assert "below 5" in str(caught.value) and "\n" not in str(caught.value)
    assert (caught.value.start_version, caught.value.oldest_version) == (3, 5)
    with pytest.raises(ChangesExpiredError, match="changes from version 3 need version 2"):
        orders.changes(3)
    with pytest.raises(ChangesExpiredError, match="consumer 'stale'"):
        catalog.advance_consumer(orders.name, "stale", 4)
    with pytest.raises(ChangesExpiredError, match="consumer 'late'"):
        catalog.register_consumer(orders.name, "late", 1)
    catalog.register_consumer(orders.name, "late", 5)
    with pytest.raises(ConsumerNotFoundError):
        catalog.advance_consumer(orders.name, "nobody", 5)
    with pytest.raises(ChangeFeedError, match="cannot be at 9"):
        catalog.advance_consumer(orders.name, "late", 9)


def test_a_consumer_registered_while_expiry_decides_keeps_its_versions(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
):
    """Expiry read no consumer when it chose its horizon; one registers before the horizon is
    recorded. Expiry re-reads the consumers under the head lock and expires less."""
    from catalog.maintenance.expiry import _ExpiryRun

    orders = _orders_with_versions(catalog, 6)
    before = orders.changes(3)
    decide = _ExpiryRun.state

    def decide_then_register(run: _ExpiryRun, older_than: dt.timedelta):  # type: ignore[no-untyped-def]
        state = decide(run, older_than)
        catalog.register_consumer(orders.name, "late-comer", 2)
        return state

    monkeypatch.setattr(_ExpiryRun, "state", decide_then_register)
    report = orders.expire_versions(older_than=ZERO, retain_last=1)

    assert report.horizon == 2 and report.versions_expired == 1  # version 1 (0 has no row)
    assert orders.changes(3).equals(before)
    assert catalog.consumer(orders.name, "late-comer").version == 2
