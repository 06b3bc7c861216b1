"""The ingest job end to end: a real broker, real Spark, a real catalog, Parquet files."""

from __future__ import annotations

import gc
import random
from pathlib import Path

import orjson
import pytest

from catalog import Catalog
from ingest.collector import YOUNG_THRESHOLD
from ingest.debezium import DecoderConfig
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, run_ingest
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    customer,
    customer_change,
    field,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DLQ = "lakestream.dead_letters"


class Source:
    """A model of the source table, emitting the Debezium events of each change."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}
        self.lsn = 1_000
        self.events: list[tuple[bytes, bytes]] = []
        self.fields = None  # set when a column is added: every later event carries it

    def _emit(self, op: str, id_: int, before=None, after=None) -> None:
        self.lsn += 8
        fields = self.fields
        record = customer_change(op, id_, lsn=self.lsn, before=before, after=after)
        if fields is not None:  # a schema with more columns
            body = orjson.loads(record.value)
            body["schema"]["fields"][0]["fields"] = fields
            body["schema"]["fields"][1]["fields"] = fields
            record = record.__class__(record.topic, 0, 0, record.key, orjson.dumps(body), None)
        self.events.append((record.key, record.value))

    def insert(self, id_: int, email: str, **extra) -> None:
        if extra:  # ALTER TABLE ADD COLUMN at the source
            self.fields = _fields(extra)
            for row in self.rows.values():
                row.update(dict.fromkeys(extra))
        self.rows[id_] = {**customer(id_, email), **extra}
        self._emit("c", id_, after=self.rows[id_])

    def update(self, id_: int, email: str) -> None:
        self.rows[id_] = {**self.rows[id_], "email": email}
        self._emit("u", id_, after=self.rows[id_])  # before is null: default REPLICA IDENTITY

    def delete(self, id_: int) -> None:
        self.rows.pop(id_)
        self._emit("d", id_, before={"id": id_, "first_name": "", "last_name": "", "email": None})

    def take(self) -> list[tuple[bytes, bytes]]:
        events, self.events = self.events, []
        return events


def _fields(extra: dict) -> list | None:
    if not extra:
        return None
    return [*CUSTOMER_FIELDS, *(field(name, "string") for name in extra)]


def cdc_config(kafka, topic: str, tmp_path: Path) -> IngestJobConfig:
    return IngestJobConfig(
        job="customers-cdc",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: "shop.customers"}),
        hash_buckets=3,
        max_offsets_per_trigger=60,
    )


def table_state(catalog: Catalog, name: str) -> dict[int, dict]:
    rows = catalog.load_table(name).scan().to_arrow().to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_ls_")} for r in rows}


@pytest.mark.slow
def test_cdc_stream_keeps_the_table_equal_to_the_source(catalog, kafka, spark, tmp_path):
    topic = kafka.topic(partitions=2)
    source, rng = Source(), random.Random(7)
    for i in range(1, 61):
        source.insert(i, f"c{i}@example.com")
    for _ in range(80):
        i = rng.choice(sorted(source.rows))
        source.update(i, f"{rng.random():.6f}@example.com")
    for i in rng.sample(sorted(source.rows), 15):
        source.delete(i)
    source.delete(sorted(source.rows)[0])  # a primary-key change: delete + insert
    source.insert(1000, "moved@example.com")
    kafka.produce(topic, source.take())
    config = cdc_config(kafka, topic, tmp_path)

    first = run_ingest(config, spark, catalog)
    assert first.batches_committed >= 2  # maxOffsetsPerTrigger split the backlog
    assert table_state(catalog, "shop.customers") == source.rows

    # the next round: a malformed message, a tombstone, and a column the source added
    source.insert(2000, "new@example.com", phone="555-0100")
    source.update(2000, "newer@example.com")
    kafka.produce(topic, [(b'{"id": 5}', b"{not json"), (b'{"id": 6}', None), *source.take()])
    second = run_ingest(config, spark, catalog)
    assert second.incarnation == first.incarnation  # same checkpoint, same writer
    table = catalog.load_table("shop.customers")
    assert "phone" in table.schema.names
    state = table_state(catalog, "shop.customers")
    assert state[2000]["phone"] == "555-0100" and state[2000]["email"] == "newer@example.com"
    assert state == source.rows  # old rows read the new column as null
    dead = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
    assert [(d["topic"], d["value"], d["reason"]) for d in dead] == [
        (topic, b"{not json", "malformed_json")
    ]
    progress = catalog.writer_progress("customers-cdc")
    delivered = sum(progress.source_offsets[topic].values())
    assert delivered == 60 + 80 + 16 + 1 + 2 + 2  # every offset of both rounds is accounted for


def test_the_driver_heap_is_frozen_while_the_query_runs_and_handed_back(
    catalog, kafka, spark, tmp_path
):
    topic = kafka.topic(partitions=1)
    source = Source()
    for i in range(1, 41):
        source.insert(i, f"c{i}@example.com")
    kafka.produce(topic, source.take())
    in_batches: list[tuple[int, tuple[int, ...]]] = []
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0

    run = run_ingest(
        cdc_config(kafka, topic, tmp_path),
        spark,
        catalog,
        observer=lambda _: in_batches.append((gc.get_freeze_count(), gc.get_threshold())),
    )

    assert run.batches_committed >= 1 and len(in_batches) == run.batches_committed
    # the collector skipped what the driver held before the query (full collections walked
    # it every batch) and collected young objects rarely (the book's states were walked again
    # and again), and the process has its heap and thresholds back as they were
    assert all(count > 10_000 for count, _ in in_batches)
    assert all(during == (YOUNG_THRESHOLD, *thresholds[1:]) for _, during in in_batches)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
    assert table_state(catalog, "shop.customers") == source.rows


def test_json_events_into_an_append_table(catalog, kafka, spark, tmp_path):
    topic = kafka.topic(partitions=3)
    events = [
        (str(i).encode(), orjson.dumps({"id": i, "kind": "click", "ms": i * 10}))
        for i in range(300)
    ]
    kafka.produce(topic, events)
    config = IngestJobConfig(
        job="clicks",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "cp",
        dead_letter_table=DLQ,
        topics=(topic,),
        source_format=SourceFormat.JSON,
        json_tables={topic: "logs.clicks"},
    )
    run_ingest(config, spark, catalog)
    rows = catalog.load_table("logs.clicks").scan().to_arrow()
    assert rows.num_rows == 300 and sorted(rows.column("id").to_pylist()) == list(range(300))
    assert catalog.load_table("logs.clicks").meta.kind == "append"
