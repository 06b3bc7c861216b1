"""Snapshot expiry against a real catalog: retained versions read exactly as before, expired
ones fail naming the horizon, rows shrink, keys stay where a writer needs them."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import uuid

import pyarrow as pa
import pytest

from catalog import Catalog, CommitConflict, CommitOp, ConflictKind, IdempotencyKey, committer
from catalog.errors import MaintenanceConfigError, VersionExpiredError, VersionNotFoundError
from tests.fixtures.commits import adds, landing_while_deciding, rewrite
from tests.fixtures.compaction import compact_all, every_version, rows_at
from tests.integration.maintenance.support import plan_files, row_counts, snapshot_everything

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])
ZERO = dt.timedelta(0)


def _append_rows(table, start: int, n: int = 3) -> None:
    regions = ["eu", "us"]
    table.append(
        pa.table(
            {
                "id": list(range(start, start + n)),
                "region": [regions[(start + i) % 2] for i in range(n)],
                "v": [float(start + i) for i in range(n)],
            }
        )
    )


def test_retained_versions_read_the_same_and_expired_ones_name_the_horizon(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    for i in range(12):
        _append_rows(table, i * 10)
        if i in (4, 9):
            compact_all(catalog, table)
    before = every_version(table)
    plans = snapshot_everything(table)
    latest = table.current_version()
    counts = row_counts(catalog)

    report = table.expire_versions(older_than=ZERO, retain_last=4)

    assert report.horizon == latest - 3 and report.versions_expired == latest - 4
    assert report.partition_rows_removed > 0 and report.commit_rows_removed > 0
    for version in range(report.horizon, latest + 1):
        assert rows_at(table, version) == before[version]
        assert plan_files(table, version) == plans[version]
    for version in (0, report.horizon - 1):
        with pytest.raises(VersionExpiredError) as caught:
            table.scan(version=version)
        assert caught.value.oldest_version == report.horizon
        assert f"oldest version kept is {report.horizon}" in str(caught.value)
        assert isinstance(caught.value, VersionNotFoundError)
    after = row_counts(catalog)
    assert after["table_version"] == latest - report.horizon + 1
    assert after["partition_info"] < counts["partition_info"]
    assert after["data_commit_info"] < counts["data_commit_info"]
    assert after["commit_key"] < counts["commit_key"]
    # leftovers() must not take a retained commit for an unpublished one
    assert not [x for x in catalog.leftovers(older_than=ZERO) if x.reason.startswith("commit")]
    assert report.files_to_cleanup > 0


def test_time_travel_by_time_across_the_horizon(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    for i in range(6):
        _append_rows(table, i * 10)
    history = {v.version: v.committed_at for v in table.history()}
    report = table.expire_versions(older_than=ZERO, retain_last=2)
    horizon = report.horizon
    assert horizon == 5
    at = history[horizon] + dt.timedelta(microseconds=1)
    assert table.resolve_version(as_of=at) == horizon
    with pytest.raises(VersionExpiredError, match="oldest version kept is 5"):
        table.scan(as_of=history[horizon] - dt.timedelta(microseconds=1))
    # a read inside the time window keeps the version it needs even if it is not among the last
    newer = catalog.create_table("logs.newer", SCHEMA)
    for i in range(4):
        _append_rows(newer, i * 10)
    kept = newer.expire_versions(older_than=dt.timedelta(hours=1), retain_last=1)
    assert kept.horizon == kept.previous_horizon == 0 and kept.versions_expired == 0


def test_cdc_merge_on_read_and_reordered_compactions_survive(catalog: Catalog):
    table = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    for i in range(10):
        ids = list(range(i, i + 6))
        table.upsert(
            pa.table({"id": ids, "region": ["eu"] * 6, "v": [float(i)] * 6}),
        )
        if i % 3 == 2:
            table.delete(pa.table({"id": [i]}))
        if i == 5:
            compact_all(catalog, table)
    before, plans = every_version(table), snapshot_everything(table)
    latest = table.current_version()
    report = table.expire_versions(older_than=ZERO, retain_last=5)
    assert report.chains_restarted > 0
    for version in range(report.horizon, latest + 1):
        assert rows_at(table, version) == before[version]
        assert plan_files(table, version) == plans[version]
    # and the table keeps working: more commits, a compaction, a second expiry
    table.upsert(pa.table({"id": [1000], "region": ["eu"], "v": [1.0]}))
    compact_all(catalog, table)
    expected = rows_at(table)
    again = table.expire_versions(older_than=ZERO, retain_last=1)
    assert again.horizon == table.current_version()
    assert rows_at(table) == expected


def _compaction_base_behind_two_appends(catalog: Catalog):
    """Files a, b (a compaction's base: version 2), then c and d appended after it."""
    table = catalog.create_table("logs.events", SCHEMA)
    table.commit(CommitOp.APPEND, [adds("", "a")])
    table.commit(CommitOp.APPEND, [adds("", "b")])
    base = table.current_version()
    table.commit(CommitOp.APPEND, [adds("", "c")])
    table.commit(CommitOp.APPEND, [adds("", "d")])
    return table, base


def test_a_reordered_compaction_keeps_the_commits_it_names(catalog: Catalog):
    """Compaction planned at v2 lands after two appends: its row names them. Expiring the
    appends' versions must keep their commit rows, or the compaction's snapshot breaks."""
    table, base = _compaction_base_behind_two_appends(catalog)
    table.commit(CommitOp.COMPACTION, [rewrite("", ["a", "b"], ["ab"])], base_version=base)
    table.commit(CommitOp.APPEND, [adds("", "e")])
    plans = snapshot_everything(table)
    assert plans[5] == [("", ("ab.parquet", "c.parquet", "d.parquet"), False)]
    report = table.expire_versions(older_than=ZERO, retain_last=3)
    assert report.horizon == 4
    for version in (4, 5, 6):
        assert plan_files(table, version) == plans[version]
    later = table.expire_versions(older_than=ZERO, retain_last=1)
    assert plan_files(table, 6) == plans[6]
    assert later.files_to_cleanup >= 2  # a and b: only expired versions held them


def test_expiry_while_a_reordered_compaction_decides(catalog: Catalog, monkeypatch):
    """Expiry restarts the chain a compaction is building on, after the compaction read the
    partition's head: the compaction still lands whole and names only commit rows that exist
    (its decision is made under the head lock, so expiry waits for it)."""
    table, base = _compaction_base_behind_two_appends(catalog)
    expiry: list[object] = []
    done = threading.Event()

    def expire() -> None:
        try:
            expiry.append(table.expire_versions(older_than=ZERO, retain_last=1))
        except Exception as exc:
            expiry.append(exc)
        done.set()

    read_snapshots = committer.load_snapshots

    def expiry_strikes_first(*args, **kwargs):
        if not expiry:
            threading.Thread(target=expire).start()
            done.wait(1.0)  # as long as expiry needs here, unless it waits for a lock
        return read_snapshots(*args, **kwargs)

    monkeypatch.setattr(committer, "load_snapshots", expiry_strikes_first)
    result = table.commit(CommitOp.COMPACTION, [rewrite("", ["a", "b"], ["ab"])], base_version=base)
    assert done.wait(30)

    assert result.version_of("logs.events") == 5
    assert not isinstance(expiry[0], Exception), expiry[0]
    assert plan_files(table, 5) == [("", ("ab.parquet", "c.parquet", "d.parquet"), False)]
    table.commit(CommitOp.APPEND, [adds("", "e")])
    assert plan_files(table, 6) == [
        ("", ("ab.parquet", "c.parquet", "d.parquet", "e.parquet"), False)
    ]


@pytest.mark.parametrize("when", ["before-its-snapshot", "before-its-publish"])
def test_expiry_while_an_update_decides_without_the_locks(catalog: Catalog, monkeypatch, when):
    """An update on the head with nothing landed since its base decides without the locks.
    Expiry restarts the chain of that head meanwhile - between the read of the head and of its
    snapshot, or before the publish - without a new version: the update still lands the head's
    whole file set less what it rewrote, and the retained head reads as before."""
    table = catalog.create_table("logs.events", SCHEMA)
    for name in ("a", "b", "c", "d"):
        table.commit(CommitOp.APPEND, [adds("", name)])
    base = table.current_version()
    head = plan_files(table, base)
    expiry: list[object] = []

    def expire() -> None:
        expiry.append(table.expire_versions(older_than=ZERO, retain_last=1))

    if when == "before-its-snapshot":
        read_snapshots = committer.load_snapshots

        def expiry_strikes_first(*args, **kwargs):
            if not expiry:
                expire()
            return read_snapshots(*args, **kwargs)

        monkeypatch.setattr(committer, "load_snapshots", expiry_strikes_first)
        window: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    else:
        window = landing_while_deciding(expire)
    with window:
        result = table.commit(CommitOp.UPDATE, [rewrite("", ["a"], ["a2"])], base_version=base)

    assert expiry[0].horizon == base and expiry[0].partition_rows_removed > 0
    assert result.version_of("logs.events") == base + 1
    assert plan_files(table, base) == head
    assert plan_files(table, base + 1) == [
        ("", ("b.parquet", "c.parquet", "d.parquet", "a2.parquet"), False)
    ]


def test_a_writers_last_key_survives_and_a_replay_is_recognised(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    for batch in range(1, 9):
        table.commit(
            CommitOp.APPEND,
            [adds("", f"f{batch}")],
            key=IdempotencyKey(writer_id="job:inc-1", batch_id=batch),
            source_offsets={"t": {"0": batch}},
        )
    report = table.expire_versions(older_than=ZERO, retain_last=1)
    assert report.keys_removed >= 6
    assert catalog.resolve_commit("job:inc-1", 8) is not None
    assert catalog.resolve_commit("job:inc-1", 2) is None
    replay = table.commit(
        CommitOp.APPEND,
        [adds("", "f8-again")],
        key=IdempotencyKey(writer_id="job:inc-1", batch_id=8),
    )
    assert replay.replayed and table.current_version() == 8
    progress = catalog.writer_progress("job:inc-1")
    assert progress is not None and progress.batch_id == 8


def test_a_compaction_planned_below_the_horizon_is_told_to_replan(catalog: Catalog):
    table, base = _compaction_base_behind_two_appends(catalog)
    table.expire_versions(older_than=ZERO, retain_last=1)
    with pytest.raises(CommitConflict) as caught:
        table.commit(CommitOp.COMPACTION, [rewrite("", ["a", "b"], ["ab"])], base_version=base)
    assert caught.value.kind is ConflictKind.INPUT_FILES_GONE
    files = ("a.parquet", "b.parquet", "c.parquet", "d.parquet")
    assert plan_files(table, 4) == [("", files, False)]


def test_dry_run_changes_nothing_and_predicts_the_real_run(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    for i in range(8):
        _append_rows(table, i * 10)
    counts = row_counts(catalog)
    dry = table.expire_versions(older_than=ZERO, retain_last=2, dry_run=True)
    assert row_counts(catalog) == counts
    assert table.scan(version=0).to_arrow().num_rows == 0  # still readable
    real = table.expire_versions(older_than=ZERO, retain_last=2)
    assert dry.dry_run and not real.dry_run
    figures = ("horizon", "versions_expired", "partition_rows_removed", "commit_rows_removed")
    assert {f: getattr(dry, f) for f in figures} == {f: getattr(real, f) for f in figures}


def test_defaults_come_from_table_properties_and_bad_ones_are_named(catalog: Catalog):
    table = catalog.create_table(
        "logs.events",
        SCHEMA,
        properties={"snapshot.retain-last": "3", "snapshot.time-retained": "0"},
    )
    for i in range(6):
        _append_rows(table, i * 10)
    assert table.expire_versions().horizon == 4
    bad = catalog.create_table("logs.bad", SCHEMA, properties={"snapshot.time-retained": "a week"})
    with pytest.raises(MaintenanceConfigError, match=r"snapshot\.time-retained"):
        bad.expire_versions()
    with pytest.raises(MaintenanceConfigError, match="at least 1"):
        table.expire_versions(retain_last=0)


def test_multi_table_commit_keeps_its_key_until_every_table_expired(catalog: Catalog):
    a = catalog.create_table("ns.a", SCHEMA)
    b = catalog.create_table("ns.b", SCHEMA)
    key = IdempotencyKey(writer_id=f"w-{uuid.uuid4().hex[:6]}", batch_id=1)
    with catalog.transaction(key=key) as tx:
        tx.commit_files(a, CommitOp.APPEND, [adds("", "a1")])
        tx.commit_files(b, CommitOp.APPEND, [adds("", "b1")])
    for i in range(3):
        a.commit(CommitOp.APPEND, [adds("", f"a{i + 2}")])
        b.commit(CommitOp.APPEND, [adds("", f"b{i + 2}")])
    # the writer's next batch becomes its last one, so batch 1's key is no longer protected
    next_batch = IdempotencyKey(writer_id=key.writer_id, batch_id=2)
    a.commit(CommitOp.APPEND, [adds("", "a9")], key=next_batch)
    a.expire_versions(older_than=ZERO, retain_last=1)
    assert catalog.resolve_commit(key.writer_id, 1) is not None  # b still holds its rows
    assert not [x for x in catalog.leftovers(older_than=ZERO) if x.reason.startswith("commit")]
    b.expire_versions(older_than=ZERO, retain_last=1)
    assert catalog.resolve_commit(key.writer_id, 1) is None
    assert catalog.resolve_commit(key.writer_id, 2) is not None
