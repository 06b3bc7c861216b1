"""Vacuum and partition TTL against a real catalog and real files."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitConflict,
    CommitOp,
    ConflictKind,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    RetryPolicy,
)
from catalog.errors import MaintenanceConfigError
from catalog.maintenance.ttl import drop_expired_partitions
from catalog.maintenance.vacuum import Vacuum
from tests.fixtures.compaction import compact_all, every_version, files_on_disk, rows_at
from tests.integration.maintenance.support import row_counts

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])
ZERO = dt.timedelta(0)
AN_HOUR_AGO = time.time() - 3600


def _append(table, start: int) -> None:
    table.append(pa.table({"id": [start, start + 1], "region": ["eu", "us"], "v": [1.0, 2.0]}))


def _backdate(root: Path, rel: str, when: float = AN_HOUR_AGO) -> None:
    os.utime(root / rel, (when, when))


def test_vacuum_deletes_expired_and_orphan_files_and_keeps_what_versions_need(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    for i in range(6):
        _append(table, i * 10)
    compact_all(catalog, table)
    _append(table, 100)
    root = Path(table.meta.location)
    eu = sorted(p for p in files_on_disk(table) if "eu" in p)[0]
    orphan = (root / eu).parent / "part-dead-writer.parquet"
    orphan.write_bytes(b"written by a writer that died before preparing")
    _backdate(root, str(orphan.relative_to(root)))
    before = every_version(table)
    expiry = table.expire_versions(older_than=ZERO, retain_last=2)
    assert expiry.files_to_cleanup == 12  # the small files only the expired versions held

    # dry run: says what would go, deletes nothing
    on_disk = files_on_disk(table)
    dry = table.vacuum(older_than=ZERO, dry_run=True)
    assert files_on_disk(table) == on_disk and dry.deleted == 13
    assert row_counts(catalog)["cleanup_file"] == 12

    report = table.vacuum(older_than=ZERO)
    assert report.deleted == 13 and report.orphans == 1 and report.cleanup_due == 12
    assert set(report.paths) == set(dry.paths)
    assert not orphan.exists()
    assert row_counts(catalog)["cleanup_file"] == 0
    for version in range(expiry.horizon, table.current_version() + 1):
        assert rows_at(table, version) == before[version]  # reads every file it needs
    assert table.vacuum(older_than=ZERO).deleted == 0


def test_vacuum_honours_the_threshold_for_orphans_and_cleanup_entries(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    for i in range(3):
        _append(table, i * 10)
    table.expire_versions(older_than=ZERO, retain_last=1)
    root = Path(table.meta.location)
    (root / "fresh-orphan.parquet").write_bytes(b"x")
    # orphans are judged by age; entries handed to cleanup by when they were handed over,
    # even if the file itself is old (a reader of the expired version gets the grace period)
    for rel in [str(p.relative_to(root)) for p in root.rglob("*.parquet")]:
        _backdate(root, rel)
    (root / "fresh-orphan.parquet").touch()
    report = table.vacuum(older_than=dt.timedelta(minutes=30))
    assert report.deleted == 0 and report.orphans == 0
    assert report.cleanup_due == 0


def test_vacuum_spares_prepared_commits_and_a_commit_publishing_after_the_listing(
    catalog: Catalog,
):
    """The race the ordering exists for: files written long ago (a slow writer), listed as
    candidates, and their commit prepares and publishes before vacuum reads the catalog."""
    table = catalog.create_table("logs.events", SCHEMA)
    root = Path(table.meta.location)
    root.mkdir(parents=True, exist_ok=True)
    (root / "slow.parquet").write_bytes(b"data of a slow writer")
    _backdate(root, "slow.parquet")
    vacuum = Vacuum(catalog.store, table.meta, older_than=dt.timedelta(minutes=1))
    listing = vacuum.list_files()
    assert "slow.parquet" in listing.files
    file = DataFile(path="slow.parquet", size_bytes=21, row_count=1)
    table.commit(
        CommitOp.APPEND,
        [PartitionCommit(partition_desc="", ops=(FileOp(action=FileAction.ADD, file=file),))],
    )
    decision = vacuum.decide(listing)
    assert "slow.parquet" not in decision.orphans
    vacuum.apply(listing, decision, dry_run=False)
    assert (root / "slow.parquet").exists()

    # a prepared but unpublished commit (its writer is between prepare and publish) names its
    # files: they are not orphans however old
    (root / "prepared.parquet").write_bytes(b"p")
    _backdate(root, "prepared.parquet")
    catalog.store.fetch_all(
        "INSERT INTO data_commit_info (table_id, partition_desc, commit_id, commit_op, file_ops)"
        " VALUES (%(t)s, '', gen_random_uuid(), 'append', %(ops)s::jsonb) RETURNING 1",
        {
            "t": table.meta.table_id,
            "ops": '[{"action": "add", "file": {"path": "prepared.parquet", "size_bytes": 1,'
            ' "row_count": 1}}]',
        },
    )
    assert table.vacuum(older_than=ZERO).deleted == 0
    assert (root / "prepared.parquet").exists()


DAY_SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("v", pa.float64())])


def _days(table, days: list[dt.date]) -> None:
    table.append(
        pa.table(
            {"id": list(range(len(days))), "day": days, "v": [1.0] * len(days)},
            schema=DAY_SCHEMA,
        )
    )


def test_partition_ttl_drops_old_partitions_with_an_update_commit(catalog: Catalog):
    today = dt.date(2026, 11, 22)
    now = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
    table = catalog.create_table(
        "logs.daily", DAY_SCHEMA, partition_by=["day"], properties={"partition.ttl": "30d"}
    )
    _days(table, [today - dt.timedelta(days=d) for d in (0, 1, 29, 30, 31, 60)])
    _days(table, [today - dt.timedelta(days=d) for d in (31, 2)])
    before = table.current_version()
    full = rows_at(table)

    dry = table.drop_expired_partitions(now=now, dry_run=True)
    assert dry is not None and dry.partitions_dropped == 2 and table.current_version() == before
    report = table.drop_expired_partitions(now=now)
    assert report is not None
    assert sorted(report.partitions) == ["day=2026-09-23", "day=2026-10-22"]
    assert report.rows_dropped == 3 and report.version == before + 1
    assert table.history(limit=1)[0].op is CommitOp.UPDATE
    kept = {r[1] for r in rows_at(table)}
    assert min(kept) == today - dt.timedelta(days=30)
    assert rows_at(table, before) == full  # time travel still sees them
    assert table.drop_expired_partitions(now=now).partitions_dropped == 0  # type: ignore[union-attr]

    # their files go to cleanup once the versions holding them expire; the rows go too
    expiry = table.expire_versions(older_than=ZERO, retain_last=1)
    assert expiry.partitions_removed == 2 and expiry.files_to_cleanup == 3
    assert table.vacuum(older_than=ZERO).deleted == 3
    assert {r[1] for r in rows_at(table)} == kept


def test_partition_ttl_needs_a_date_or_timestamp_partition(catalog: Catalog):
    table = catalog.create_table(
        "logs.events", SCHEMA, partition_by=["region"], properties={"partition.ttl": "7d"}
    )
    with pytest.raises(MaintenanceConfigError, match="no date or timestamp range partition"):
        table.drop_expired_partitions()
    plain = catalog.create_table("logs.plain", SCHEMA)
    assert plain.drop_expired_partitions() is None


def test_partition_ttl_on_a_cdc_table_drops_every_bucket(catalog: Catalog):
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    table = catalog.create_table(
        "shop.events",
        schema,
        primary_key=["id"],
        hash_buckets=3,
        partition_by=["ts"],
        properties={"partition.ttl": "1h"},
    )
    old = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    new = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)
    table.upsert(pa.table({"id": list(range(9)), "ts": [old] * 5 + [new] * 4}, schema=schema))
    report = table.drop_expired_partitions(now=new)
    assert report is not None and report.rows_dropped == 5
    assert len(report.partitions) >= 2
    assert {r[1] for r in rows_at(table)} == {new}
    assert len(rows_at(table, report.version - 1)) == 9  # type: ignore[operator]


def _append_after_the_plan(table, monkeypatch: pytest.MonkeyPatch, late: dt.date) -> None:
    """A writer appends a row of ``late`` right after the TTL's first plan of ``table``, before
    its commit (the conflict the matrix names: update after a concurrent append)."""
    writer = table.catalog.load_table(table.name)
    plan, planned = table.plan, []

    def plan_then_append(*args, **kwargs):
        result = plan(*args, **kwargs)
        if not planned:
            planned.append(True)
            _days(writer, [late])
        return result

    monkeypatch.setattr(table, "plan", plan_then_append)


TODAY, OLD = dt.date(2026, 11, 22), dt.date(2026, 10, 13)  # OLD: 40 days before
NOON = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)


def _ttl_racing_an_append(catalog: Catalog, monkeypatch: pytest.MonkeyPatch):
    """A 30-day TTL table with a row of TODAY and one of OLD; a writer appends another row of
    OLD between the TTL's first plan and its commit."""
    table = catalog.create_table(
        "logs.daily", DAY_SCHEMA, partition_by=["day"], properties={"partition.ttl": "30d"}
    )
    _days(table, [TODAY, OLD])
    _append_after_the_plan(table, monkeypatch, OLD)
    return table


def test_partition_ttl_replans_after_an_append_into_a_doomed_partition(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
):
    table = _ttl_racing_an_append(catalog, monkeypatch)

    report = table.drop_expired_partitions(now=NOON)

    assert report is not None and report.attempts == 2  # lost once, planned again, landed
    assert report.rows_dropped == 2  # the late row too: nothing expired survives the drop
    assert [r[1] for r in rows_at(table)] == [TODAY]
    assert sorted(r[1] for r in rows_at(table, report.version - 1)) == [OLD, OLD, TODAY]  # type: ignore[operator]


def test_partition_ttl_that_loses_every_attempt_fails_and_changes_nothing(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
):
    table = _ttl_racing_an_append(catalog, monkeypatch)

    with pytest.raises(CommitConflict) as lost:
        drop_expired_partitions(
            table, ttl=dt.timedelta(days=30), column="day", now=NOON, retry=RetryPolicy(attempts=1)
        )

    assert lost.value.kind is ConflictKind.CONCURRENT_WRITE and lost.value.winning_op == "append"
    assert "re-read the table" in str(lost.value)
    assert sorted(r[1] for r in rows_at(table)) == [OLD, OLD, TODAY]  # the append stands
    assert table.history(limit=1)[0].op is CommitOp.APPEND  # and no drop landed
