"""Debezium's topics with ``cleanup.policy=compact``, after the broker's log cleaner ran.

Deployments often compact CDC topics: Kafka keeps the last record of each key, so a table topic
stays as large as the table. A job that starts from the beginning then reads offsets with gaps
(superseded changes removed), tombstones instead of the changes before them, and a tail that
the cleaner has not reached yet. Here Debezium's connector (in the session's Kafka Connect
worker, ``docker/connector.json``'s settings) creates its topic compacted through
``topic.creation.default.*``, with segments that roll every 500 ms and any dirty ratio worth
cleaning; the test waits until the cleaner really removed records (offsets are missing), then
ingests from the earliest offset: the lake equals the source table, the stored offset is the
high watermark, and a later run reads exactly the records written after it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.connect import LocalConnect
from jobs.localpg import LocalPostgres
from tests.fixtures.debezium import (
    DebeziumCapture,
    PostgresSource,
    create_source_database,
    drop_source_database,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LAKE_TABLE = "compacted.items"
#: The topic as a deployment would compact it, but cleaned within seconds: segments roll
#: every 500 ms and any dirty share is worth cleaning. Tombstones are kept (an hour), so the
#: cleaner's result is stable once it has run.
COMPACTED = {
    "topic.creation.default.partitions": "1",
    "topic.creation.default.cleanup.policy": "compact",
    "topic.creation.default.segment.ms": "500",
    "topic.creation.default.min.cleanable.dirty.ratio": "0.01",
    "topic.creation.default.min.compaction.lag.ms": "0",
    "topic.creation.default.delete.retention.ms": "3600000",
}
#: The broker's cleaner sleeps ``log.cleaner.backoff.ms`` (15 s) when it finds nothing to do.
CLEANER_TIMEOUT_S = 90.0
ROLL_S = 0.8


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


def offsets_in(bootstrap_servers: str, topic: str, end: int) -> list[int]:
    """The offsets of the records partition 0 holds now, read from its start up to ``end``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"{topic}: read {len(found)} records in 30 s"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message.offset())
    finally:
        consumer.close()
    return found


def wait_for_compaction(bootstrap_servers: str, topic: str, end: int) -> list[int]:
    """Block until the cleaner removed records below ``end``; returns the offsets left."""
    deadline = time.monotonic() + CLEANER_TIMEOUT_S
    while True:
        left = offsets_in(bootstrap_servers, topic, end)
        if len(left) < end:
            return left
        assert time.monotonic() < deadline, f"{topic}: not compacted in {CLEANER_TIMEOUT_S} s"
        time.sleep(2)


def high_watermark(bootstrap_servers: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "hw"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def source_rows(conn: psycopg.Connection[Any]) -> dict[int, tuple[int, str | None]]:
    return {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, note FROM items")}


def lake_rows(catalog: Catalog) -> dict[int, tuple[int, str | None]]:
    rows = catalog.load_table(LAKE_TABLE).scan().to_arrow().to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a key appears twice"
    return {r["id"]: (r["v"], r["note"]) for r in rows}


@pytest.mark.slow
def test_a_compacted_debezium_topic_read_from_the_start_gives_the_tables_last_state(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    name = f"cp{uuid.uuid4().hex[:8]}"
    topic = f"{name}.public.items"
    bootstrap = kafka.bootstrap_servers
    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
        conn.execute("INSERT INTO items SELECT i, 0, 'seed' FROM generate_series(1, 10) i")

        def update(ids: str, v: int) -> None:
            conn.execute(f"UPDATE items SET v = %s, note = %s WHERE id {ids}", (v, f"v{v}"))

        with DebeziumCapture(connect_worker, source_db, name, overrides=COMPACTED) as capture:
            capture.wait_for(10, timeout=90)  # the snapshot: 10 r
            update("BETWEEN 1 AND 10", 1)  # 10 u
            time.sleep(ROLL_S)  # each round in a segment of its own
            update("BETWEEN 1 AND 10", 2)  # 10 u
            time.sleep(ROLL_S)
            conn.execute("DELETE FROM items WHERE id <= 3")  # 3 d + 3 tombstones
            update("BETWEEN 4 AND 10", 3)  # 7 u
            time.sleep(ROLL_S)
            conn.execute("INSERT INTO items VALUES (11, 4, NULL), (12, 4, 'new')")  # 2 c
            update("BETWEEN 4 AND 10", 4)  # 7 u
            time.sleep(ROLL_S)
            # the last segment stays active (never cleaned): deletes of keys whose
            # changes before lie in cleaned segments - the job must apply them
            conn.execute("DELETE FROM items WHERE id IN (4, 5)")  # 2 d + 2 tombstones
            capture.wait_for(56)
        produced = 56
        assert high_watermark(bootstrap, topic) == produced

        left = wait_for_compaction(bootstrap, topic, produced)
        assert left != list(range(left[0], produced)), "no gaps: nothing was compacted"
        assert left[-4:] == [52, 53, 54, 55]  # the active segment's deletes and tombstones

        config = IngestJobConfig(
            job="compacted",
            bootstrap_servers=bootstrap,
            checkpoint=tmp_path / "checkpoint",
            dead_letter_table="compacted.dead_letters",
            topics=(topic,),
            starting_offsets="earliest",
            decoder=DecoderConfig(topic_tables={topic: LAKE_TABLE}),
            hash_buckets=2,
            max_offsets_per_trigger=7,  # batches end inside gaps
        )
        first = run_ingest(config, spark, catalog)
        assert first.records_read == len(left)
        assert lake_rows(catalog) == source_rows(conn)
        assert set(lake_rows(catalog)) == {6, 7, 8, 9, 10, 11, 12}
        progress = catalog.writer_progress("compacted")
        assert progress is not None and progress.source_offsets[topic] == {"0": produced}
        assert catalog.load_table("compacted.dead_letters").scan().to_arrow().num_rows == 0

        # the connector resumed: a run reads exactly the records after the stored offset
        with DebeziumCapture(connect_worker, source_db, name, overrides=COMPACTED) as capture:
            conn.execute("INSERT INTO items VALUES (20, 5, 'late'), (21, 5, NULL)")  # 2 c
            capture.wait_for(2)
        second = run_ingest(config, spark, catalog)
        assert second.records_read == 2
        assert lake_rows(catalog) == source_rows(conn)
        progress = catalog.writer_progress("compacted")
        assert progress is not None and progress.source_offsets[topic] == {"0": produced + 2}
