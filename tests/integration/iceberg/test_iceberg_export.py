"""Iceberg metadata over lakestream tables: what pyiceberg and DuckDB read from it."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
)
from pyiceberg.table import StaticTable

from catalog import Catalog
from catalog.iceberg import IcebergRegistrationError, PointerCatalog, export_table
from compaction.maintenance import MaintenanceScheduler, MaintenanceSettings
from compaction.queue import QueueSettings, TaskQueue
from jobs.table_compact import compact_table
from tests.fixtures.cli import lakestream
from tests.fixtures.resolved import assert_resolved_invariants
from tests.fixtures.vectors import mark_rows
from tests.integration.iceberg.support import (
    SCHEMA,
    closing_sql_catalog,
    duckdb_connection,
    multiset,
    random_history,
    resolve,
    rows,
    snapshot_versions,
    static,
)

pytestmark = pytest.mark.integration
COLUMNS = SCHEMA.names


def _check_every_snapshot(table, metadata_location: str) -> dict[int, int]:
    iceberg = static(metadata_location)
    versions = snapshot_versions(iceberg)
    assert versions, "no snapshot was exported"
    for snapshot_id, version in versions.items():
        ours = multiset(table.scan(version=version).to_arrow(), COLUMNS)
        read = iceberg.scan(snapshot_id=snapshot_id).to_arrow()
        assert multiset(read, COLUMNS) == ours, f"snapshot of version {version}"
        if table.meta.is_cdc:
            keys = read.column("id").to_pylist()
            assert len(keys) == len(set(keys)), f"a duplicated key at version {version}"
    return versions


def _delete_files(metadata_location: str) -> dict[int, set[str]]:
    """Iceberg snapshot id -> the position-delete files its scan applies."""
    iceberg = static(metadata_location)
    return {
        s.snapshot_id: {
            d.file_path
            for task in iceberg.scan(snapshot_id=s.snapshot_id).plan_files()
            for d in task.delete_files
        }
        for s in iceberg.snapshots()
    }


@pytest.mark.parametrize("seed", [1, 2])
def test_append_table_every_version_is_a_snapshot(catalog: Catalog, seed: int) -> None:
    rng = random.Random(seed)
    # DELETE/UPDATE mark rows with deletion vectors: exported as position deletes
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    random_history(catalog, events, rng, steps=6)
    first = export_table(events)
    random_history(catalog, events, rng, steps=6)  # the next export continues from there
    second = export_table(events)
    assert second.version == second.latest == events.current_version()
    assert second.lag_versions == 0
    assert set(first.exported).isdisjoint(second.exported)
    versions = _check_every_snapshot(events, second.metadata_location)
    changed = {
        v.version
        for v in events.history(limit=1000)
        if v.summary.get("files_added") or v.summary.get("files_removed")
    }
    assert set(versions.values()) == changed
    assert any(_delete_files(second.metadata_location).values())  # vectors were exported


@pytest.mark.parametrize("seed", [3, 4])
def test_cdc_table_shows_compacted_versions_and_lags(catalog: Catalog, seed: int) -> None:
    rng = random.Random(seed)
    orders = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    random_history(catalog, orders, rng, steps=10)
    report = export_table(orders)
    assert report.lag_versions == orders.current_version() - report.version
    _check_every_snapshot(orders, report.metadata_location)
    clean = report.version
    if report.lag_versions == 0:  # a run of two files in one bucket: not expressible
        orders.upsert(rows(rng, [1]))
        orders.upsert(rows(rng, [1]))
        behind = export_table(orders)
        assert behind.exported == () and behind.version == clean
        assert behind.lag_versions == 2
    lagging = static(export_table(orders).metadata_location)
    assert lagging.properties["iceberg.lag_versions"] == str(orders.current_version() - clean)
    described = orders.describe()["iceberg"]
    assert described["lag_versions"] == orders.current_version() - clean
    assert (described["version"], described["metadata_location"]) == (
        clean,
        lagging.metadata_location,
    )
    compact_table(catalog, orders.name)
    caught_up = export_table(orders)
    assert caught_up.lag_versions == 0 and caught_up.version == orders.current_version()
    _check_every_snapshot(orders, caught_up.metadata_location)
    # key lookups prune by the bucket transform: lakestream's buckets must be Iceberg's
    iceberg = static(caught_up.metadata_location)
    every = len(list(iceberg.scan().plan_files()))
    pruned = len(list(iceberg.scan(row_filter=EqualTo("id", 1)).plan_files()))
    assert pruned < every
    for key in range(40):
        theirs = iceberg.scan(row_filter=EqualTo("id", key)).to_arrow()
        ours = orders.scan(filter=[("id", "=", key)]).to_arrow()
        assert multiset(theirs, COLUMNS) == multiset(ours, COLUMNS), f"key {key}"


@pytest.mark.parametrize("kind", ["append", "cdc"])
def test_duckdb_iceberg_scan_reads_every_snapshot(catalog: Catalog, kind: str) -> None:
    conn = duckdb_connection()
    rng = random.Random(5)
    key = {"primary_key": ["id"], "hash_buckets": 2} if kind == "cdc" else {}
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"], **key)
    random_history(catalog, table, rng, steps=8)
    report = export_table(table)
    versions = snapshot_versions(static(report.metadata_location))
    assert versions
    for snapshot_id, version in versions.items():
        theirs = (
            conn.execute(
                f"SELECT * FROM iceberg_scan('{report.metadata_location}', "
                f"snapshot_from_id={snapshot_id})"
            )
            .arrow()
            .read_all()
        )
        assert multiset(theirs, COLUMNS) == multiset(
            table.scan(version=version).to_arrow(), COLUMNS
        ), f"version {version}"


def test_expiry_and_vacuum_leave_no_snapshot_naming_a_deleted_file(catalog: Catalog) -> None:
    rng = random.Random(6)
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    random_history(catalog, events, rng, steps=10)
    export_table(events)
    events.expire_versions(older_than=dt.timedelta(0), retain_last=2)
    events.vacuum(older_than=dt.timedelta(0))
    report = export_table(events)
    assert report.snapshots_expired > 0
    iceberg = static(report.metadata_location)
    for snapshot in iceberg.snapshots():
        for task in iceberg.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            assert Path(task.file.file_path).exists(), task.file.file_path
            assert all(Path(d.file_path).exists() for d in task.delete_files)
    _check_every_snapshot(events, report.metadata_location)


@pytest.mark.slow
def test_cli_exports_and_registers_in_pyiceberg_sql_catalog(
    catalog_dsn: str, warehouse: Path
) -> None:
    with Catalog.connect(catalog_dsn, warehouse=str(warehouse)) as cat:
        events = cat.create_table("shop.orders", SCHEMA, partition_by=["region"])
        random_history(cat, events, random.Random(7), steps=4)
        latest = events.current_version()
        expected = multiset(events.scan().to_arrow(), COLUMNS)
    out = lakestream("tables", "iceberg", "shop.orders", "--register", "--json", dsn=catalog_dsn)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["version"] == latest and report["lag_versions"] == 0
    assert report["registered"] == "shop.orders" and report["exported"]
    with closing_sql_catalog(catalog_dsn) as registry:
        loaded = registry.load_table("shop.orders")
        assert loaded.metadata_location == report["metadata_location"]
        assert multiset(loaded.scan().to_arrow(), COLUMNS) == expected

    with Catalog.connect(catalog_dsn, warehouse=str(warehouse)) as cat:
        cat.load_table("shop.orders").append(rows(random.Random(8), [100, 101]))
    again = lakestream("tables", "iceberg", "shop.orders", "--register", dsn=catalog_dsn)
    assert again.returncode == 0, again.stderr
    location, exported = again.stdout.splitlines()[:2]
    assert exported.startswith(f"exported versions: {latest + 1};")
    with closing_sql_catalog(catalog_dsn) as registry:
        reloaded = registry.load_table("shop.orders")
        assert location.endswith(reloaded.metadata_location)
        assert len(reloaded.scan().to_arrow()) == sum(expected.values()) + 2


def test_schema_evolution_keeps_field_ids_and_reads_old_files_by_name(
    catalog: Catalog,
) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32())])
    items = catalog.create_table("shop.items", schema)
    items.append(pa.table({"id": [1, 2], "qty": pa.array([5, 6], pa.int32())}))
    first = export_table(items)
    ids_before = {f.name: f.field_id for f in static(first.metadata_location).schema().fields}
    items.add_column("note", pa.string())
    items.widen_column("qty", pa.int64())
    items.append(pa.table({"id": [3], "qty": [7], "note": ["new"]}))
    report = export_table(items)
    iceberg = static(report.metadata_location)
    ids_after = {f.name: f.field_id for f in iceberg.schema().fields}
    assert ids_after == {**ids_before, "note": max(ids_before.values()) + 1}
    assert str(iceberg.schema().find_field("qty").field_type) == "long"
    assert sorted(iceberg.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "qty": 5, "note": None},
        {"id": 2, "qty": 6, "note": None},
        {"id": 3, "qty": 7, "note": "new"},
    ]
    for snapshot_id, version in snapshot_versions(iceberg).items():
        theirs = iceberg.scan(snapshot_id=snapshot_id).to_arrow()
        columns = theirs.column_names  # a snapshot made before the change has its schema
        ours = items.scan(version=version).to_arrow()
        assert multiset(theirs, columns) == multiset(ours, columns), f"version {version}"


def test_compactor_maintenance_exports_between_expiry_and_vacuum(catalog: Catalog) -> None:
    properties = {
        "iceberg.metadata": "on",
        "snapshot.retain-last": "2",
        "snapshot.time-retained": "0",
        "vacuum.older-than": "0",
    }
    events = catalog.create_table(
        "logs.events", SCHEMA, partition_by=["region"], properties=properties
    )
    plain = catalog.create_table("logs.plain", SCHEMA)
    rng = random.Random(9)
    random_history(catalog, events, rng, steps=8)
    export_table(events)  # snapshots of versions the maintenance run is about to expire
    events.append(rows(rng, [50, 51]))
    plain.append(rows(rng, [1]))
    scheduler = MaintenanceScheduler(
        catalog, TaskQueue(catalog.store, QueueSettings()), ["logs.*"], MaintenanceSettings()
    )
    runs = {r.table: r for r in scheduler.run_due()}
    while len(runs) < 2:  # first runs are spread over the interval: make the other one due
        catalog.store.fetch_all(
            "UPDATE maintenance_schedule SET next_at = now() WHERE runs = 0 RETURNING 1", {}
        )
        runs |= {r.table: r for r in scheduler.run_due()}
    assert runs["logs.plain"].iceberg is None
    run = runs["logs.events"]
    assert not run.errors, run.errors
    assert run.iceberg is not None and run.iceberg["version"] == events.current_version()
    assert run.iceberg["snapshots_expired"] > 0
    assert run.vacuum is not None and run.vacuum.deleted > 0
    iceberg = static(run.iceberg["metadata_location"])
    for snapshot in iceberg.snapshots():
        for task in iceberg.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            assert Path(task.file.file_path).exists(), task.file.file_path
            assert all(Path(d.file_path).exists() for d in task.delete_files)
    _check_every_snapshot(events, run.iceberg["metadata_location"])


FILTERS = [
    ("total < 20", LessThan("total", 20.0), [("total", "<", 20.0)]),
    ("total >= 75.5", GreaterThanOrEqual("total", 75.5), [("total", ">=", 75.5)]),
    ("region = 'eu'", EqualTo("region", "eu"), [("region", "=", "eu")]),
    ("region IS NULL", IsNull("region"), [("region", "is_null", None)]),
    ("id > 30", GreaterThan("id", 30), [("id", ">", 30)]),
    ("id = 7", EqualTo("id", 7), [("id", "=", 7)]),
]


@pytest.mark.parametrize("kind", ["append", "cdc"])
def test_filtered_reads_prune_by_the_exported_statistics(catalog: Catalog, kind: str) -> None:
    """Column bounds and null counts come from the catalog's statistics: a wrong one would
    make an engine skip a file that holds matches."""
    conn = duckdb_connection()
    key = {"primary_key": ["id"], "hash_buckets": 2} if kind == "cdc" else {}
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"], **key)
    random_history(catalog, table, random.Random(11), steps=12)
    report = export_table(table)
    iceberg = static(report.metadata_location)
    every = len(list(iceberg.scan().plan_files()))
    planned = []
    for sql, expression, ours in FILTERS:
        expected = multiset(table.scan(filter=ours, version=report.version).to_arrow(), COLUMNS)
        scan = iceberg.scan(row_filter=expression)
        planned.append(len(list(scan.plan_files())))
        assert multiset(scan.to_arrow(), COLUMNS) == expected, sql
        duck = conn.execute(f"SELECT * FROM iceberg_scan('{report.metadata_location}') WHERE {sql}")
        assert multiset(duck.arrow().read_all(), COLUMNS) == expected, sql
    assert min(planned) < every  # the statistics do prune


def test_a_lagging_cdc_table_keeps_the_files_its_snapshot_shows(catalog: Catalog) -> None:
    orders = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    rng = random.Random(12)
    random_history(catalog, orders, rng, steps=6)
    shown = export_table(orders)
    assert shown.lag_versions == orders.current_version() - shown.version
    for _ in range(3):  # two runs in one bucket: not expressible until compacted
        orders.upsert(rows(rng, [1, 2, 3]))
    report = orders.expire_versions(older_than=dt.timedelta(0), retain_last=1)
    assert report.horizon == shown.version  # the exporter's consumer holds expiry there
    orders.vacuum(older_than=dt.timedelta(0))
    behind = export_table(orders)
    assert behind.version == shown.version and behind.lag_versions >= 3
    _check_every_snapshot(orders, behind.metadata_location)


def test_the_pointer_moves_only_from_the_metadata_a_commit_was_made_on(
    catalog: Catalog,
) -> None:
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    events.append(rows(random.Random(13), [1, 2]))
    export_table(events)
    pointer = PointerCatalog(catalog.store, events.meta.table_id, ("logs", "events"))
    stale = pointer.load_table(("logs", "events"))
    events.append(rows(random.Random(14), [3]))
    winner = export_table(events)
    late = stale.transaction()  # an export that read the metadata before the winner's
    late.update_snapshot().fast_append().commit()
    with pytest.raises(CommitFailedException):
        late.commit_transaction()
    assert pointer.load_table(("logs", "events")).metadata_location == winner.metadata_location


def test_old_metadata_files_are_deleted_past_the_last_ten(catalog: Catalog) -> None:
    events = catalog.create_table("logs.events", SCHEMA)
    rng = random.Random(15)
    for i in range(14):
        events.append(rows(rng, [i]))
        report = export_table(events)
    folder = Path(report.metadata_location).parent
    assert len(list(folder.glob("*.metadata.json"))) == 11  # the current one and ten before it
    assert static(report.metadata_location).scan().to_arrow().num_rows == 14


def test_a_table_made_again_under_a_registered_name_is_not_published_over_the_old(
    catalog: Catalog, catalog_dsn: str
) -> None:
    first = catalog.create_table("shop.orders", SCHEMA)
    first.append(rows(random.Random(16), [1]))
    with closing_sql_catalog(catalog_dsn) as registry:
        old = export_table(first, sql_catalog=registry)
        catalog.drop_table("shop.orders")
        again = catalog.create_table("shop.orders", SCHEMA)
        again.append(rows(random.Random(17), [2]))
        with pytest.raises(IcebergRegistrationError, match="is another table"):
            export_table(again, sql_catalog=registry)
        assert registry.load_table("shop.orders").metadata_location == old.metadata_location


def test_dates_timestamps_and_decimals_partition_and_prune(catalog: Catalog) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("price", pa.decimal128(10, 2)),
        ]
    )
    table = catalog.create_table("shop.sales", schema, partition_by=["day"])
    base = dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)
    for batch in range(4):
        ids = list(range(batch * 5, batch * 5 + 5))
        table.append(
            pa.table(
                {
                    "id": ids,
                    "day": [dt.date(2026, 11, 20 + i % 3) for i in ids],
                    "at": [base + dt.timedelta(hours=i) for i in ids],
                    "price": [decimal.Decimal(f"{i}.25") for i in ids],
                },
                schema=schema,
            )
        )
    report = export_table(table)
    iceberg = static(report.metadata_location)
    conn = duckdb_connection()
    names = schema.names
    cases = [
        (
            "day = DATE '2026-11-21'",
            EqualTo("day", "2026-11-21"),
            [("day", "=", dt.date(2026, 11, 21))],
        ),
        (
            "\"at\" >= TIMESTAMPTZ '2026-11-22 22:00:00+00'",
            GreaterThanOrEqual("at", "2026-11-22T22:00:00+00:00"),
            [("at", ">=", base + dt.timedelta(hours=12))],
        ),
        (
            "price < 7.5",
            LessThan("price", decimal.Decimal("7.50")),
            [("price", "<", decimal.Decimal("7.5"))],
        ),
    ]
    for sql, expression, ours in cases:
        expected = multiset(table.scan(filter=ours).to_arrow(), names)
        assert expected, sql
        assert multiset(iceberg.scan(row_filter=expression).to_arrow(), names) == expected, sql
        duck = conn.execute(
            f"SELECT * FROM iceberg_scan('{report.metadata_location}') WHERE {sql}"
        ).arrow()
        assert multiset(duck.read_all(), names) == expected, sql


def _duckdb_rows(conn, metadata_location: str, snapshot_id: int) -> pa.Table:
    query = f"SELECT * FROM iceberg_scan('{metadata_location}', snapshot_from_id={snapshot_id})"
    return conn.execute(query).arrow().read_all()


def test_vectors_become_position_deletes_reused_until_they_change(catalog: Catalog) -> None:
    conn = duckdb_connection()
    rng = random.Random(21)
    events = catalog.create_table("logs.events", SCHEMA)
    events.append(rows(rng, range(10)))
    events.append(rows(rng, range(10, 20)))
    marked = mark_rows(events, [1, 2, 11])  # both files get a vector
    unchanged = events.append(rows(rng, [30])).version_of("logs.events")
    changed = mark_rows(events, [3], inline_max=0)  # the first file's, now in a Puffin file
    report = export_table(events)
    assert {marked, unchanged, changed} <= set(report.exported)
    ids = {v: s for s, v in snapshot_versions(static(report.metadata_location)).items()}
    deletes = _delete_files(report.metadata_location)
    assert len(deletes[ids[marked]]) == 2 and deletes[ids[unchanged]] == deletes[ids[marked]]
    assert len(deletes[ids[changed]]) == 2
    assert len(deletes[ids[changed]] & deletes[ids[marked]]) == 1  # the second file's reused
    for path in deletes[ids[changed]]:
        delete = pq.read_table(path)
        assert delete.schema.field("file_path").metadata[b"PARQUET:field_id"] == b"2147483546"
        assert delete.schema.field("pos").metadata[b"PARQUET:field_id"] == b"2147483545"
        assert delete.column("pos").to_pylist() == sorted(delete.column("pos").to_pylist())
    _check_every_snapshot(events, report.metadata_location)
    for version, snapshot_id in ids.items():
        ours = multiset(events.scan(version=version).to_arrow(), COLUMNS)
        theirs = _duckdb_rows(conn, report.metadata_location, snapshot_id)
        assert multiset(theirs, COLUMNS) == ours, f"version {version}"
    latest = static(report.metadata_location).scan().to_arrow()
    assert not {1, 2, 3, 11} & set(latest.column("id").to_pylist())
    assert latest.num_rows == 17


def test_resolved_cdc_buckets_are_exported_without_a_duplicated_key(catalog: Catalog) -> None:
    conn = duckdb_connection()
    rng = random.Random(22)
    orders = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    orders.upsert(rows(rng, range(12)))
    orders.upsert(rows(rng, range(6, 16)))
    orders.delete(where=[("id", "<", 3)])
    pending = export_table(orders)
    assert pending.lag_versions > 0  # runs not yet resolved: Iceberg cannot show them
    assert resolve(catalog, orders) > 0  # every pending bucket
    resolved = orders.current_version()
    report = export_table(orders)
    assert report.version == resolved and report.lag_versions == 0
    versions = _check_every_snapshot(orders, report.metadata_location)
    snapshot_id = next(s for s, v in versions.items() if v == resolved)
    assert _delete_files(report.metadata_location)[snapshot_id]
    theirs = _duckdb_rows(conn, report.metadata_location, snapshot_id)
    assert multiset(theirs, COLUMNS) == multiset(orders.scan().to_arrow(), COLUMNS)
    assert sorted(theirs.column("id").to_pylist()) == list(range(3, 16))


def test_expiry_drops_the_delete_files_no_snapshot_names(catalog: Catalog) -> None:
    rng = random.Random(23)
    events = catalog.create_table("logs.events", SCHEMA)
    events.append(rows(rng, range(10)))
    mark_rows(events, [1])
    export_table(events)
    first = set(Path(events.meta.location, "metadata", "deletes").glob("*.parquet"))
    mark_rows(events, [2])  # the same file's vector changes: a new delete file
    events.append(rows(rng, [20]))
    export_table(events)
    events.expire_versions(older_than=dt.timedelta(0), retain_last=1)
    events.vacuum(older_than=dt.timedelta(0))
    report = export_table(events)
    assert report.snapshots_expired > 0
    kept = set(Path(events.meta.location, "metadata", "deletes").glob("*.parquet"))
    assert first and first.isdisjoint(kept) and len(kept) == 1
    for snapshot_id, names in _delete_files(report.metadata_location).items():
        assert all(Path(n).exists() for n in names), snapshot_id
    _check_every_snapshot(events, report.metadata_location)


def test_files_carry_the_published_field_ids_and_read_without_the_name_mapping(
    catalog: Catalog,
) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32())])
    items = catalog.create_table("shop.items", schema, primary_key=["id"], hash_buckets=1)
    items.upsert(pa.table({"id": [1, 2], "qty": pa.array([5, 6], pa.int32())}))
    items.add_column("tags", pa.list_(pa.string()))
    items.upsert(pa.table({"id": [2, 3], "qty": [7, 8], "tags": [["a"], None]}))
    compact_table(catalog, items.name)  # a compaction output carries them too
    items.upsert(pa.table({"id": [4], "qty": [9], "tags": [["b", "c"]]}))
    compact_table(catalog, items.name)
    report = export_table(items)
    iceberg = static(report.metadata_location)
    published = {f.name: f.field_id for f in iceberg.schema().fields}
    element_id = iceberg.schema().find_field("tags.element").field_id
    for task in iceberg.scan().plan_files():
        written = pq.read_schema(task.file.file_path)
        ids = {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in written}
        assert {n: ids[n] for n in published} == published
        element = written.field("tags").type.value_field
        assert int(element.metadata[b"PARQUET:field_id"]) == element_id
    properties = {
        k: v for k, v in iceberg.metadata.properties.items() if k != "schema.name-mapping.default"
    }
    unmapped = StaticTable(
        iceberg.name(),
        iceberg.metadata.model_copy(update={"properties": properties}),
        iceberg.metadata_location,
        iceberg.io,
        iceberg.catalog,
    )
    expected = sorted(items.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert sorted(unmapped.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    assert len(expected) == 4


def test_a_commit_landing_during_an_export_is_left_to_the_next(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = catalog.create_table("logs.events", SCHEMA)
    rng = random.Random(24)
    events.append(rows(rng, [1]))
    history = events.history

    def history_after_a_commit(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(events, "history", history)
        events.append(rows(rng, [2]))  # lands after the export read the latest version
        return history(*args, **kwargs)

    monkeypatch.setattr(events, "history", history_after_a_commit)
    report = export_table(events)
    assert (report.version, report.latest, report.lag_versions) == (1, 1, 0)
    again = export_table(events)
    assert (again.version, again.lag_versions, again.exported) == (2, 0, (2,))


def test_buckets_the_compactors_resolver_resolved_are_exported(catalog: Catalog) -> None:
    """The real resolver (compaction kind ``resolve``), on a sequence-column table with a stale
    replay: its resolved buckets are exported with no duplicated key, as lakestream reads them."""
    schema = SCHEMA.append(pa.field("seq", pa.int64()))
    orders = catalog.create_table(
        "shop.orders",
        schema,
        primary_key=["id"],
        hash_buckets=2,
        properties={"sequence-column": "seq"},
    )
    rng = random.Random(25)

    def upsert(ids: range | list[int], seq: int) -> None:
        batch = rows(rng, ids)
        orders.upsert(batch.append_column("seq", pa.array([seq] * batch.num_rows, pa.int64())))

    upsert(range(20), 5)
    upsert(range(5, 12), 7)
    upsert([6, 7], 6)  # a stale replay: loses to seq 7
    orders.delete(pa.table({"id": pa.array([1, 8], pa.int64()), "seq": pa.array([9, 9])}))
    assert export_table(orders).lag_versions > 0  # pending runs: not expressible
    assert resolve(catalog, orders) == 2  # both buckets, by the compactor's resolver
    assert_resolved_invariants(orders)
    report = export_table(orders)
    assert report.lag_versions == 0 and report.version == orders.current_version()
    _check_every_snapshot(orders, report.metadata_location)
    snapshot_id = report.snapshot_ids[report.version]
    assert _delete_files(report.metadata_location)[snapshot_id]
    names = schema.names
    theirs = _duckdb_rows(duckdb_connection(), report.metadata_location, snapshot_id)
    assert multiset(theirs, names) == multiset(orders.scan().to_arrow(), names)
    assert sorted(theirs.column("id").to_pylist()) == sorted(set(range(20)) - {1, 8})
