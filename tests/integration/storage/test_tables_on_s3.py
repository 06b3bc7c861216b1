"""Tables whose warehouse is an S3 bucket (moto's server): write, read, compact, DML, vacuum.

Every test runs the same code paths as on a local disk, against a real S3 REST server over
HTTP, and checks what a user checks: rows, versions, and the objects in the bucket.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import duckdb_extension_httpfs
import polars as pl
import pyarrow as pa
import pytest

from catalog import Catalog, IdempotencyKey
from tests.fixtures.compaction import compact_all, files_on_disk, rows_at
from tests.fixtures.s3 import S3Server
from tests.fixtures.vectors import mark_rows

pytestmark = pytest.mark.integration
ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])
ZERO = dt.timedelta(0)


def orders(*records: tuple[int, str, float]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(ORDERS.names, r, strict=True)) for r in records], schema=ORDERS
    )


def as_set(table: pa.Table) -> set[tuple[object, ...]]:
    return {tuple(r.values()) for r in table.to_pylist()}


def test_the_warehouse_is_the_bucket_and_only_its_uri_is_stored(
    s3_catalog: Catalog, s3_server: S3Server, s3_bucket: str, catalog_dsn: str
):
    events = s3_catalog.create_table("shop.events", ORDERS, partition_by=["region"])
    events.append(orders((1, "eu", 1.0), (2, "us", 2.0)))

    assert events.meta.location.startswith(f"s3://{s3_bucket}/warehouse/shop/events-")
    keys = s3_server.keys(s3_bucket)
    assert len(keys) == 2 and all(k.endswith(".parquet") for k in keys)
    assert not any("/." in k or k.endswith(".tmp") for k in keys), "no temporary names on S3"
    stored = s3_catalog.store.fetch_all("SELECT key, value FROM catalog_property", {})
    assert {r["key"]: r["value"] for r in stored}["warehouse"] == f"s3://{s3_bucket}/warehouse"
    assert "lakestream-test-secret" not in repr(stored) + repr(events.meta) + repr(s3_catalog)
    with Catalog.connect(catalog_dsn, create=False, storage=s3_server.options()) as reader:
        assert reader.warehouse == f"s3://{s3_bucket}/warehouse"
        assert as_set(reader.load_table("shop.events").scan().to_arrow()) == {
            (1, "eu", 1.0),
            (2, "us", 2.0),
        }


def test_append_upsert_delete_and_time_travel(s3_catalog: Catalog):
    cdc = s3_catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    cdc.upsert(orders((1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)))
    cdc.upsert(orders((2, "us", 20.0), (4, "us", 4.0)))
    cdc.delete(pa.table({"id": [1]}))

    assert rows_at(cdc) == [(2, "us", 20.0), (3, "eu", 3.0), (4, "us", 4.0)]
    assert rows_at(cdc, 1) == [(1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)]
    assert cdc.scan(filter=[("id", "=", 2)]).to_arrow().column("total").to_pylist() == [20.0]
    log = s3_catalog.create_table("shop.log", ORDERS)
    log.append(orders((1, "eu", 1.0)), key=IdempotencyKey(writer_id="w", batch_id=1))
    log.append(orders((1, "eu", 1.0)), key=IdempotencyKey(writer_id="w", batch_id=1))
    assert log.scan().count() == 1, "a replayed batch lands once"


def test_duckdb_and_polars_read_through_arrow(s3_catalog: Catalog):
    table = s3_catalog.create_table("shop.orders", ORDERS, primary_key=["id"])
    table.upsert(orders((1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)))
    table.upsert(orders((3, "eu", 30.0)))

    reader = table.scan().to_reader()  # noqa: F841 - DuckDB finds it by name
    totals = duckdb.sql("SELECT region, sum(total) FROM reader GROUP BY region ORDER BY 1")
    assert totals.fetchall() == [("eu", 31.0), ("us", 2.0)]
    frame = pl.from_arrow(table.scan(columns=["id", "total"]).to_arrow())
    assert isinstance(frame, pl.DataFrame)
    assert frame.sort("id")["total"].to_list() == [1.0, 2.0, 30.0]


def httpfs_extension() -> Path:
    """DuckDB's httpfs extension as the ``duckdb-extension-httpfs`` wheel ships it."""
    folder = Path(duckdb_extension_httpfs.__file__ or "").parent / "extensions"
    [path] = sorted(folder.glob("*/*.duckdb_extension"))
    return path


def test_duckdb_and_polars_open_files_by_uri(s3_catalog: Catalog, s3_server: S3Server):
    """The documented direct route for an append table: its planned files are plain Parquet
    that DuckDB (an httpfs secret) and Polars (storage_options) open by their URIs."""
    table = s3_catalog.create_table("shop.log", ORDERS)
    table.append(orders((1, "eu", 1.0), (2, "us", 2.0)))
    table.append(orders((3, "eu", 3.0)))
    storage = table.meta.files
    uris = [storage.uri_of(f.path) for f in table.plan().files]

    con = duckdb.connect()
    con.execute(f"LOAD '{httpfs_extension()}'")  # from its wheel: no download here
    con.execute(
        "CREATE SECRET moto (TYPE s3, KEY_ID $k, SECRET $s, REGION 'us-east-1', "
        "ENDPOINT $e, URL_STYLE 'path', USE_SSL false)",
        {"k": "lakestream-test-key", "s": "lakestream-test-secret", "e": s3_server.endpoint[7:]},
    )
    got = con.execute("SELECT sum(total) FROM read_parquet($u)", {"u": uris}).fetchone()
    assert got == (6.0,)
    options = {
        "aws_access_key_id": "lakestream-test-key",
        "aws_secret_access_key": "lakestream-test-secret",
        "aws_region": "us-east-1",
        "aws_endpoint_url": s3_server.endpoint,
        "aws_allow_http": "true",
    }
    frame = pl.read_parquet(uris, storage_options=options)
    assert sorted(frame["id"].to_list()) == [1, 2, 3]


def test_compaction_rewrites_on_s3_and_readers_see_the_same_rows(
    s3_catalog: Catalog, s3_server: S3Server, s3_bucket: str
):
    cdc = s3_catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    for i in range(4):
        cdc.upsert(orders((i, "eu", float(i)), (100, "us", float(i))))
    before = rows_at(cdc)
    runs = len(cdc.plan().files)

    outcomes = compact_all(s3_catalog, cdc)

    assert [o.status.value for o in outcomes] == ["committed"]
    assert rows_at(cdc) == before
    assert len(cdc.plan().files) == 1 < runs
    assert len(s3_server.keys(s3_bucket)) == runs + 1, "inputs stay until vacuum"


def test_update_and_delete_statements_rewrite_files_on_s3(s3_catalog: Catalog):
    log = s3_catalog.create_table("shop.log", ORDERS, partition_by=["region"])
    log.append(orders((1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)))

    updated = log.update(where=[("id", "=", 1)], set={"total": 10.0})
    deleted = log.delete(where=[("region", "=", "us")])

    assert updated.rows == 1 and deleted.rows == 1
    assert rows_at(log) == [(1, "eu", 10.0), (3, "eu", 3.0)]
    assert rows_at(log, 1) == [(1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)]


def test_vacuum_deletes_expired_files_and_orphans_from_the_bucket(
    s3_catalog: Catalog, s3_server: S3Server, s3_bucket: str
):
    log = s3_catalog.create_table("shop.log", ORDERS)
    for i in range(3):
        log.append(orders((i, "eu", float(i))))
    compact_all(s3_catalog, log)
    storage = log.meta.files
    orphan = storage.open_output("data/part-dead-writer.parquet")
    orphan.sink.write(b"written by a writer that died before preparing its commit")
    orphan.commit()
    log.expire_versions(older_than=ZERO, retain_last=1)
    assert len(files_on_disk(log)) == 5

    report = log.vacuum(older_than=ZERO)

    assert report.orphans == 1 and report.cleanup_due == 3 and report.deleted == 4
    assert files_on_disk(log) == {f.path for f in log.plan().files}
    # pyarrow leaves an empty "data/" marker where a deletion empties a folder: not a file
    assert len([k for k in s3_server.keys(s3_bucket) if not k.endswith("/")]) == 1
    assert rows_at(log) == [(0, "eu", 0.0), (1, "eu", 1.0), (2, "eu", 2.0)]


def test_deletion_vectors_inline_and_in_vector_files_on_the_bucket(s3_catalog: Catalog):
    """Vectors kept in the bucket are read through the storage seam, as the data files are."""
    events = s3_catalog.create_table("shop.events", ORDERS, partition_by=["region"])
    events.append(orders((1, "eu", 1.0), (2, "eu", 2.0), (3, "us", 3.0), (4, "us", 4.0)))
    events.append(orders((5, "eu", 5.0), (6, "us", 6.0)))  # two files a partition: a bin
    mark_rows(events, {1})
    mark_rows(events, {4}, inline_max=0)
    alive = [(2, "eu", 2.0), (3, "us", 3.0), (5, "eu", 5.0), (6, "us", 6.0)]

    assert rows_at(events) == alive
    assert len(rows_at(events, 2)) == 6
    assert any(f.endswith(".puffin") for f in files_on_disk(events))
    compact_all(s3_catalog, events)
    assert rows_at(events) == alive
    assert all(f.vector is None for f in events.plan().files)
