"""Change reads from Spark - ``spark.read`` with a starting version and ``spark.readStream`` -
against a real catalog, real files and real local Spark.

What a user relies on: the rows Spark returns are exactly ``Table.changes`` of the same range;
a stream starts with the table as inserts and then emits every later change once, across
restarts from its checkpoint, within its rate limits; a stream with a ``consumerId`` holds
expiry back and resumes from the catalog when its checkpoint is lost.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from catalog import Catalog, Table
from catalog.changefeed import CHANGE_TYPE, COMMIT_VERSION
from ingest.spark_read import SOURCE_NAME, register
from tests.fixtures.vectors import mark_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])


@pytest.fixture(scope="module")
def lakestream(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def orders(*records: tuple[object, ...]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(ORDERS.names, r, strict=True)) for r in records], schema=ORDERS
    )


@pytest.fixture
def order_book(catalog: Catalog) -> Table:
    """A CDC table with inserts (v1), updates (v2), deletes (v3) and a key back (v4)."""
    table = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    table.upsert(orders(*((i, "eu" if i % 2 else "us", 10.0 * i) for i in range(1, 9))))
    table.upsert(orders((2, "us", 21.0), (3, "eu", 31.0), (9, "us", 90.0)))
    table.delete(pa.table({"id": pa.array([1, 9, 42], pa.int64())}))
    table.upsert(orders((1, "eu", 11.0), (4, "us", 41.0)))
    return table


def change_rows(table: pa.Table) -> Counter[tuple[object, ...]]:
    """Change rows as a multiset, without the commit time (Spark's and Arrow's agree on it,
    but comparing it adds nothing the version does not say)."""
    rows = table.drop_columns(["_commit_timestamp"]).to_pylist()
    return Counter(tuple(r.values()) for r in rows)


def read_changes(session: SparkSession, dsn: str, table: str, **options: object) -> DataFrame:
    reader = session.read.format(SOURCE_NAME).option("table", table).option("catalog", dsn)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


class Stream:
    """A change stream of one table into a list of micro-batches, run to what is there now
    (``Trigger.AvailableNow``) from one checkpoint."""

    def __init__(
        self, session: SparkSession, dsn: str, table: str, checkpoint: Path, **options: object
    ) -> None:
        self.session, self.dsn, self.table, self.checkpoint = session, dsn, table, checkpoint
        self.options = {"readChangeFeed": "true", **options}
        self.batches: list[pa.Table] = []

    def run(self) -> list[pa.Table]:
        """One AvailableNow run; the micro-batches it produced."""
        before = len(self.batches)
        reader = self.session.readStream.format(SOURCE_NAME)
        reader = reader.option("table", self.table).option("catalog", self.dsn)
        for key, value in self.options.items():
            reader = reader.option(key, str(value))

        def keep(frame: DataFrame, batch_id: int) -> None:
            self.batches.append(frame.toArrow())

        query = (
            reader.load()
            .writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return [b for b in self.batches[before:] if b.num_rows]


def applied(state: dict[Any, dict[str, Any]], changes: pa.Table) -> None:
    """Apply change rows to a key -> row dict, in commit order."""
    rows = sorted(changes.to_pylist(), key=lambda r: r[COMMIT_VERSION])
    for row in rows:
        kind = row.pop(CHANGE_TYPE)
        data = {k: v for k, v in row.items() if not k.startswith("_commit")}
        if kind in ("insert", "update_postimage"):
            state[data["id"]] = data
        else:
            state.pop(data["id"], None)


def as_state(table: Table) -> dict[Any, dict[str, Any]]:
    return {r["id"]: r for r in table.scan().to_arrow().to_pylist()}


# -- batch change reads -------------------------------------------------------------------------


def test_a_batch_change_read_is_table_changes_of_the_same_range(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    frame = read_changes(lakestream, catalog_dsn, "shop.orders", startingVersion=2)
    assert frame.columns == [*ORDERS.names, "_change_type", "_commit_version", "_commit_timestamp"]
    got = frame.toArrow()
    assert change_rows(got) == change_rows(order_book.changes(2))
    assert Counter(got.column(CHANGE_TYPE).to_pylist()) == {
        "update_preimage": 3,  # 2 and 3 at v2, 4 at v4
        "update_postimage": 3,
        "insert": 2,  # 9 at v2, 1 back at v4
        "delete": 2,  # 1 and 9 at v3 (42 never existed)
    }
    ranged = read_changes(
        lakestream, catalog_dsn, "shop.orders", startingVersion=2, endingVersion=3
    )
    assert change_rows(ranged.toArrow()) == change_rows(order_book.changes(2, 3))


def test_a_batch_change_read_of_an_append_table_and_a_subset_of_columns(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str
):
    table = catalog.create_table("logs.orders", ORDERS, partition_by=["region"])
    table.append(orders((1, "eu", 1.0), (2, "us", 2.0)))
    table.append(orders((3, "eu", 3.0)))
    table.delete(where=[("id", "=", 1)])
    reader = lakestream.read.format(SOURCE_NAME).schema(
        "id BIGINT, _change_type STRING, _commit_version BIGINT"
    )
    frame = reader.option("catalog", catalog_dsn).option("startingVersion", 2).load("logs.orders")
    got = Counter(tuple(r) for r in frame.collect())
    assert got == Counter({(3, "insert", 2): 1, (1, "delete", 3): 1})


def test_a_vector_version_reads_in_spark_as_in_table_changes(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str, order_book: Table
):
    """A compaction that only marks rows: its marked rows are deletes (append table) and the
    marked keys' effective change (CDC table), derived on the executors as in Table.changes."""
    log = catalog.create_table("logs.orders", ORDERS, partition_by=["region"])
    log.append(orders((1, "eu", 1.0), (2, "us", 2.0), (3, "eu", 3.0)))
    marked_log = mark_rows(log, {1, 2})
    marked_book = mark_rows(order_book, {41.0, 80.0}, column="total", inline_max=0)

    log_changes = read_changes(lakestream, catalog_dsn, "logs.orders", startingVersion=marked_log)
    book_changes = read_changes(
        lakestream, catalog_dsn, "shop.orders", startingVersion=marked_book
    ).toArrow()

    assert {(r.id, r._change_type) for r in log_changes.collect()} == {
        (1, "delete"),
        (2, "delete"),
    }
    assert change_rows(book_changes) == change_rows(order_book.changes(marked_book))
    assert change_rows(book_changes) == Counter(
        {
            (4, "us", 41.0, "update_preimage", marked_book): 1,
            (4, "us", 40.0, "update_postimage", marked_book): 1,
            (8, "us", 80.0, "delete", marked_book): 1,
        }
    )


def test_change_read_options_are_checked_at_load(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    with pytest.raises(Exception, match=r"versionAsOf.*startingVersion"):
        read_changes(lakestream, catalog_dsn, "shop.orders", startingVersion=1, versionAsOf=1)
    with pytest.raises(Exception, match=r"maxVersionsPerTrigger.*readStream only"):
        read_changes(lakestream, catalog_dsn, "shop.orders", maxVersionsPerTrigger=1).collect()
    with pytest.raises(Exception, match=r"needs a version number or startingTimestamp"):
        read_changes(lakestream, catalog_dsn, "shop.orders", readChangeFeed="true").collect()
    stream = lakestream.readStream.format(SOURCE_NAME).option("catalog", catalog_dsn)
    with pytest.raises(Exception, match=r"add \.option\('readChangeFeed', 'true'\)"):
        stream.load("shop.orders").writeStream.format("noop").start().awaitTermination(60)


# -- streams ------------------------------------------------------------------------------------


def test_a_stream_starts_with_the_table_as_inserts_then_emits_each_change_once(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table, tmp_path: Path
):
    stream = Stream(lakestream, catalog_dsn, "shop.orders", tmp_path / "ck")
    first = stream.run()
    assert len(first) == 1
    assert set(first[0].column(CHANGE_TYPE).to_pylist()) == {"insert"}
    assert set(first[0].column(COMMIT_VERSION).to_pylist()) == {4}
    state: dict[Any, dict[str, Any]] = {}
    applied(state, first[0])
    assert state == as_state(order_book)

    order_book.upsert(orders((5, "eu", 55.0), (10, "us", 100.0)))  # v5
    order_book.delete(pa.table({"id": pa.array([2], pa.int64())}))  # v6
    later = stream.run()  # a new query on the same checkpoint: only what came after
    assert {v for b in later for v in b.column(COMMIT_VERSION).to_pylist()} == {5, 6}
    for batch in later:
        applied(state, batch)
    assert state == as_state(order_book)
    assert stream.run() == []  # nothing new: nothing emitted


def test_a_stream_from_a_version_keeps_its_rate_limit(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table, tmp_path: Path
):
    stream = Stream(
        lakestream,
        catalog_dsn,
        "shop.orders",
        tmp_path / "ck",
        startingVersion=2,
        maxVersionsPerTrigger=1,
    )
    batches = stream.run()
    assert [sorted(set(b.column(COMMIT_VERSION).to_pylist())) for b in batches] == [[2], [3], [4]]
    assert change_rows(pa.concat_tables(batches)) == change_rows(order_book.changes(2))


def test_a_consumer_holds_expiry_back_and_resumes_without_its_checkpoint(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str, order_book: Table, tmp_path: Path
):
    stream = Stream(
        lakestream,
        catalog_dsn,
        "shop.orders",
        tmp_path / "ck1",
        startingVersion=1,
        consumerId="search-index",
    )
    state: dict[Any, dict[str, Any]] = {}
    for batch in stream.run():
        applied(state, batch)
    assert catalog.consumer(order_book, "search-index").version == 4
    order_book.upsert(orders((7, "eu", 77.0)))  # v5
    order_book.upsert(orders((8, "us", 88.0)))  # v6
    order_book.expire_versions(older_than=dt.timedelta(0), retain_last=1)
    assert catalog.consumer(order_book, "search-index").version == 4  # v4 was kept for it
    resumed = Stream(
        lakestream,
        catalog_dsn,
        "shop.orders",
        tmp_path / "ck2",  # a lost checkpoint: a new one
        startingVersion=1,  # ignored: the consumer's position wins
        consumerId="search-index",
    )
    for batch in resumed.run():
        applied(state, batch)
    assert state == as_state(order_book)
    assert catalog.consumer(order_book, "search-index").version == 6


def test_a_stream_behind_expired_versions_fails_naming_both(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table, tmp_path: Path
):
    order_book.expire_versions(older_than=dt.timedelta(0), retain_last=1)
    stream = Stream(lakestream, catalog_dsn, "shop.orders", tmp_path / "ck", startingVersion=2)
    with pytest.raises(Exception, match=r"changes from version 2 need version 1, but versions"):
        stream.run()


def test_max_rows_per_trigger_is_a_soft_limit_of_whole_versions(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table, tmp_path: Path
):
    added = {v.version: v.rows_added for v in order_book.history()}
    stream = Stream(
        lakestream,
        catalog_dsn,
        "shop.orders",
        tmp_path / "ck",
        startingVersion=1,
        maxRowsPerTrigger=4,
    )
    batches = [sorted(set(b.column(COMMIT_VERSION).to_pylist())) for b in stream.run()]
    assert [v for batch in batches for v in batch] == [1, 2, 3, 4]  # every version, in order
    assert len(batches) > 1
    for versions in batches:  # one version however large, or versions within the limit
        assert len(versions) == 1 or sum(added[v] for v in versions) <= 4


def test_a_key_that_moved_partition_is_one_update_in_spark_as_in_table_changes(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str
):
    table = catalog.create_table(
        "shop.placed", ORDERS, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    table.upsert(orders((1, "eu", 1.0), (2, "eu", 2.0), (3, "us", 3.0)))
    table.upsert(orders((1, "us", 1.5), (4, "us", 4.0)))  # 1 moves from eu to us
    spark_changes = read_changes(lakestream, catalog_dsn, "shop.placed", startingVersion=2)
    got = change_rows(spark_changes.toArrow())
    assert got == change_rows(table.changes(2))
    assert got == Counter(
        {
            (1, "eu", 1.0, "update_preimage", 2): 1,
            (1, "us", 1.5, "update_postimage", 2): 1,
            (4, "us", 4.0, "insert", 2): 1,
        }
    )
