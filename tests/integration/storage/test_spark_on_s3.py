"""Spark with an s3:// warehouse: the batch reader's executors and the ingest job's executors read
and write the bucket with the storage options they were shipped (never the driver's disk)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.spark_read import SOURCE_NAME, register
from tests.fixtures.broker import KafkaTestHelper
from tests.fixtures.debezium_events import customer, customer_change
from tests.fixtures.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.fixtures.vectors import mark_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])


def orders(*records: tuple[int, str, float]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(ORDERS.names, r, strict=True)) for r in records], schema=ORDERS
    )


def test_the_spark_reader_reads_an_s3_table_at_any_version(
    s3_catalog: Catalog, s3_server: S3Server, catalog_dsn: str, spark: SparkSession
):
    register(spark)
    cdc = s3_catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    cdc.upsert(orders((1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)))
    cdc.upsert(orders((2, "us", 20.0)))  # a second run: merge-on-read on the executors
    cdc.delete(pa.table({"id": [3]}))

    def read(**more: str) -> set[tuple[object, ...]]:
        reader = (
            spark.read.format(SOURCE_NAME)
            .option("table", "shop.orders")
            .option("catalog", catalog_dsn)
            .option("storage.endpoint", s3_server.endpoint)
            .option("storage.region", REGION)
            .option("storage.pathStyle", "true")
            .option("storage.accessKey", ACCESS_KEY)
            .option("storage.secretKey", SECRET_KEY)
        )
        for key, value in more.items():
            reader = reader.option(key, value)
        return {tuple(r) for r in reader.load().select("id", "region", "total").collect()}

    assert read() == {(1, "eu", 1.0), (2, "us", 20.0)}
    assert read(versionAsOf="1") == {(1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)}
    # executors load a vector file from the bucket with the options the driver shipped
    mark_rows(cdc, {20.0}, column="total", inline_max=0)
    assert read() == {(1, "eu", 1.0), (2, "us", 2.0)}


def test_the_ingest_job_writes_its_batches_to_the_bucket(
    s3_catalog: Catalog,
    s3_server: S3Server,
    kafka: KafkaTestHelper,
    spark: SparkSession,
    tmp_path: Path,
):
    topic = kafka.topic(partitions=2)
    rows = {i: customer(i, f"c{i}@example.com") for i in range(1, 41)}
    events = [customer_change("c", i, lsn=1_000 + i, after=row) for i, row in rows.items()]
    gone = {"id": 7, "first_name": "", "last_name": "", "email": None}  # default REPLICA IDENTITY
    events.append(customer_change("d", 7, lsn=2_000, before=gone))
    rows.pop(7)
    kafka.produce(topic, [(e.key, e.value) for e in events])
    config = IngestJobConfig(
        job="customers-cdc",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: "shop.customers"}),
        hash_buckets=2,
        max_offsets_per_trigger=25,
    )

    run = run_ingest(config, spark, s3_catalog)

    assert run.batches_committed >= 2
    got = s3_catalog.load_table("shop.customers").scan(columns=["id", "email"]).to_arrow()
    assert {r["id"]: r["email"] for r in got.to_pylist()} == {
        i: r["email"] for i, r in rows.items()
    }
    bucket = (s3_catalog.warehouse or "").split("/")[2]
    keys = s3_server.keys(bucket, "warehouse/shop/")
    assert keys and all(k.endswith(".parquet") for k in keys)
    planned = s3_catalog.load_table("shop.customers").plan().files
    assert len(planned) == len([k for k in keys if "/customers-" in k])
    assert not any(tmp_path.rglob("*.parquet")), "no data file on the driver's disk"
