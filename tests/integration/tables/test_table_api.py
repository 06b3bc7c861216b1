"""Table lifecycle, bad input and time travel against a real catalog."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitOp,
    CommitRejected,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    SchemaError,
    TableNotFoundError,
)
from catalog.errors import InvalidNameError, TableAlreadyExistsError, VersionNotFoundError
from catalog.queries import query
from tests.fixtures.commits import adds, file_names
from tests.fixtures.postgres import catalog_connection

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])


def test_create_load_list_describe_drop(catalog: Catalog, warehouse):
    orders = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=4, partition_by=["region"]
    )
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    assert catalog.list_tables() == ["logs.events", "shop.orders"]
    assert catalog.list_tables("shop") == ["shop.orders"]
    assert catalog.list_namespaces() == ["logs", "shop"]

    loaded = catalog.load_table("SHOP.Orders")
    assert loaded.meta == orders.meta
    info = loaded.describe()
    assert info["kind"] == "cdc" and info["hash_buckets"] == 4 and info["version"] == 0
    assert info["location"].startswith(str(warehouse))
    assert not loaded.schema.field("id").nullable  # primary keys are NOT NULL
    assert events.meta.spec.hash_buckets == -1 and events.describe()["kind"] == "append"

    catalog.drop_table("logs.events")
    assert catalog.list_tables() == ["shop.orders"]
    with pytest.raises(TableNotFoundError):
        catalog.load_table("logs.events")
    # a new table of the same name is a new incarnation with its own files
    again = catalog.create_table("logs.events", SCHEMA)
    assert again.meta.table_id != events.meta.table_id
    assert again.meta.location != events.meta.location


def test_commit_to_a_dropped_table_is_rejected(catalog: Catalog):
    events = catalog.create_table("logs.events", SCHEMA)
    catalog.drop_table("logs.events")
    with pytest.raises(CommitRejected, match="dropped"):
        events.commit(CommitOp.APPEND, [adds("", "late")])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "orders"}, InvalidNameError),
        ({"name": "shop.or'ders"}, InvalidNameError),
        ({"name": "shop.x;drop table table_info"}, InvalidNameError),
        ({"name": "shöp.orders"}, InvalidNameError),
        ({"primary_key": ["nope"]}, SchemaError),
        ({"primary_key": ["v"]}, SchemaError),  # float keys are refused
        ({"partition_by": ["nope"]}, SchemaError),
        ({"hash_buckets": 4}, SchemaError),  # buckets without a key
        ({"primary_key": ["id"], "hash_buckets": 0}, Exception),
        ({"primary_key": "id"}, SchemaError),
        ({"schema": pa.schema([("_ls_kind", pa.int8())])}, InvalidNameError),
        ({"schema": pa.schema([("a", pa.int8()), ("a", pa.int16())])}, SchemaError),
        ({"schema": "id int"}, SchemaError),
    ],
)
def test_bad_table_definitions_are_refused_clearly(catalog: Catalog, kwargs, error):
    args = {"name": "shop.orders", "schema": SCHEMA, **kwargs}
    with pytest.raises(error):
        catalog.create_table(args.pop("name"), args.pop("schema"), **args)
    assert catalog.list_tables() == []


def test_duplicate_and_unknown_tables(catalog: Catalog):
    catalog.create_table("shop.orders", SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("shop.orders", SCHEMA)
    with pytest.raises(TableNotFoundError):
        catalog.load_table("shop.nothing")
    with pytest.raises(TableNotFoundError):
        catalog.drop_table("shop.nothing")


def test_bad_commits_are_rejected_and_commit_nothing(catalog: Catalog):
    orders = catalog.create_table(
        "shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    events = catalog.create_table("logs.events", SCHEMA)
    cases = [
        (orders, CommitOp.MERGE, [adds("region=eu", "x")], None),  # no bucket
        (orders, CommitOp.MERGE, [adds("region=eu,bucket=0002", "x")], None),  # out of range
        (orders, CommitOp.MERGE, [adds("bucket=0001,region=eu", "x")], None),  # order
        (events, CommitOp.MERGE, [adds("", "x")], None),  # merge into an append table
        (events, CommitOp.COMPACTION, [adds("", "x")], None),  # compaction without a base
        (events, CommitOp.APPEND, [adds("", "x")], 99),  # base from the future
        (events, CommitOp.APPEND, [], None),
    ]
    for table, op, parts, base in cases:
        with pytest.raises(CommitRejected):
            table.commit(op, parts, base_version=base)
    bad_schema = DataFile(path="y.parquet", size_bytes=1, row_count=1, schema_id=5)
    with pytest.raises(CommitRejected, match="schema id 5"):
        events.commit(
            CommitOp.APPEND,
            [
                PartitionCommit(
                    partition_desc="", ops=(FileOp(action=FileAction.ADD, file=bad_schema),)
                )
            ],
        )
    with pytest.raises(ValueError):
        DataFile(path="/etc/passwd", size_bytes=1, row_count=1)
    with pytest.raises(ValueError):
        DataFile(path="../other/x.parquet", size_bytes=1, row_count=1)
    assert orders.current_version() == events.current_version() == 0


def test_time_travel_by_version_and_time_is_stable(catalog: Catalog):
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    stamps = []
    for i in range(5):
        events.commit(CommitOp.APPEND, [adds(f"region={'eu' if i % 2 else 'us'}", f"f{i}")])
        stamps.append(events.history(limit=1)[0].committed_at)
    before = {v: file_names(events.plan(version=v).files) for v in range(6)}
    assert before[0] == [] and sorted(before[3]) == ["f0", "f1", "f2"]
    events.commit(CommitOp.APPEND, [adds("region=eu", "later")])
    for v in range(6):
        assert file_names(events.plan(version=v).files) == before[v]
    for i, at in enumerate(stamps):
        assert sorted(file_names(events.plan(as_of=at).files)) == sorted(before[i + 1])
        assert events.resolve_version(as_of=at + dt.timedelta(microseconds=-1)) == i
    assert events.plan(as_of=stamps[0] - dt.timedelta(days=1)).files == []
    with pytest.raises(VersionNotFoundError):
        events.plan(version=99)
    eu = events.plan(partition_filter=lambda values: values["region"] == "eu")
    assert sorted(file_names(eu.files)) == ["f1", "f3", "later"]
    assert file_names(events.plan(partitions=["region=us"], version=2).files) == ["f0"]


def test_history_reports_ops_files_and_rows(catalog: Catalog):
    events = catalog.create_table("logs.events", SCHEMA)
    events.commit(CommitOp.APPEND, [adds("", "a", "b")])
    (entry,) = events.history()
    assert entry.version == 1 and entry.op is CommitOp.APPEND
    assert entry.files_added == 2 and entry.rows_added == 20


def test_reads_use_indexes_not_table_scans(catalog: Catalog, catalog_dsn):
    events = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    for i in range(300):
        events.commit(CommitOp.APPEND, [adds(f"region=r{i % 30}", f"f{i}")])
    tid = events.meta.table_id
    heads = events.plan(partitions=["region=r1"]).partitions
    params = {
        "partition_heads": {
            "table_id": tid,
            "descs": ["region=r1", "region=r2"],
            "table_version": 10**9,
        },
        "all_partition_heads": {"table_id": tid, "table_version": 10**9},
        "snapshot_manifests": {
            "table_id": tid,
            "descs": ["region=r1"],
            "starts": [1],
            "ends": [heads[0].version],
        },
        "landed_since": {"table_id": tid, "descs": ["region=r1"], "base": 250},
    }
    with catalog_connection(catalog_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
        plans = {
            name: conn.execute("EXPLAIN " + query(name), args).fetchall()
            for name, args in params.items()
        }
    for name, rows in plans.items():
        text = "\n".join(r[0] for r in rows)
        # the tables that grow with history; table_partition grows only with partitions
        for catalog_table in ("partition_info", "data_commit_info"):
            assert f"Seq Scan on {catalog_table}" not in text, (name, text)
        assert "Index" in text, (name, text)
    assert len(events.plan().files) == 300
