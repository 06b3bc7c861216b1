"""``source.reader: spark``: Spark's built-in Kafka source feeding the sink, against the real
broker, Spark and catalog; the same tables as the Python reader, committed data only, offsets
past a transaction's markers."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.formats import SourceFormat
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.spark_source import SourceReader
from tests.integration.ingest.test_ingest_job import Source, table_state

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DLQ = "reader.dead_letters"


def _cdc_config(kafka, topic: str, table: str, home: Path, reader: SourceReader) -> IngestJobConfig:
    return IngestJobConfig(
        job=f"reader-{reader.value}-{table}",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=home / reader.value / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: table}),
        hash_buckets=2,
        max_offsets_per_trigger=70,
        source_reader=reader,
    )


@pytest.mark.slow
def test_both_readers_make_the_same_cdc_table(catalog: Catalog, kafka, spark, tmp_path: Path):
    topic = kafka.topic(partitions=2)
    source, rng = Source(), random.Random(3)
    for i in range(1, 41):
        source.insert(i, f"c{i}@example.com")
    for _ in range(60):
        i = rng.choice(sorted(source.rows))
        source.update(i, f"{rng.random():.6f}@example.com")
    for i in rng.sample(sorted(source.rows), 10):
        source.delete(i)
    kafka.produce(topic, [*source.take(), (b'{"id": 5}', b"{not json"), (b'{"id": 6}', None)])

    runs = {
        reader: run_ingest(
            _cdc_config(kafka, topic, f"reader.cdc_{reader.value}", tmp_path, reader),
            spark,
            catalog,
        )
        for reader in SourceReader
    }

    assert table_state(catalog, "reader.cdc_spark") == source.rows
    assert table_state(catalog, "reader.cdc_python") == source.rows
    assert runs[SourceReader.SPARK].records_read == runs[SourceReader.PYTHON].records_read == 112
    assert runs[SourceReader.SPARK].batches_committed >= 2  # maxOffsetsPerTrigger split it
    stored = {r: catalog.writer_progress(f"reader-{r.value}-reader.cdc_{r.value}") for r in runs}
    assert stored[SourceReader.SPARK].source_offsets == stored[SourceReader.PYTHON].source_offsets
    dead = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
    assert sorted((d["writer"].split(":")[0], d["reason"]) for d in dead) == [
        ("reader-python-reader.cdc_python", "malformed_json"),
        ("reader-spark-reader.cdc_spark", "malformed_json"),
    ]


def test_both_readers_make_the_same_append_table(catalog: Catalog, kafka, spark, tmp_path: Path):
    topic = kafka.topic(partitions=3)
    kafka.produce(
        topic, [(str(i).encode(), orjson.dumps({"id": i, "kind": "click"})) for i in range(200)]
    )
    tables = {}
    for reader in SourceReader:
        table = f"reader.clicks_{reader.value}"
        config = IngestJobConfig(
            job=f"reader-clicks-{reader.value}",
            bootstrap_servers=kafka.bootstrap_servers,
            checkpoint=tmp_path / reader.value,
            dead_letter_table=DLQ,
            topics=(topic,),
            source_format=SourceFormat.JSON,
            json_tables={topic: table},
            source_reader=reader,
        )
        run_ingest(config, spark, catalog)
        tables[reader] = catalog.load_table(table).scan().to_arrow()
    spark_rows, python_rows = (tables[r].sort_by("id").to_pylist() for r in SourceReader)
    assert spark_rows == python_rows and [r["id"] for r in spark_rows] == list(range(200))


def _transactional(kafka, topic: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": txn_id})
    producer.init_transactions()
    return producer


def _send_transaction(producer: Producer, topic: str, ids: range, *, commit: bool) -> None:
    producer.begin_transaction()
    for i in ids:
        producer.produce(topic, orjson.dumps({"id": i}), str(i).encode(), partition=0)
    producer.flush()  # aborting drops what is still queued: these must reach the log
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


@pytest.mark.slow
def test_an_aborted_transaction_at_the_end_of_a_range_is_skipped_and_passed(
    catalog: Catalog, kafka, spark, tmp_path: Path
):
    topic = kafka.topic(partitions=1)
    producer = _transactional(kafka, topic, f"txn-{topic}")
    _send_transaction(producer, topic, range(0, 10), commit=True)  # offsets 0-9, marker 10
    _send_transaction(producer, topic, range(100, 105), commit=False)  # 11-15, abort marker 16
    config = IngestJobConfig(
        job="reader-aborted",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        source_format=SourceFormat.JSON,
        json_tables={topic: "reader.txn"},
        source_reader=SourceReader.SPARK,
    )

    first = run_ingest(config, spark, catalog)

    def ids() -> list[int]:
        return sorted(catalog.load_table("reader.txn").scan().to_arrow().column("id").to_pylist())

    assert ids() == list(range(10)) and first.records_read == 10
    # the batch ended after the abort marker, where no record was returned: its end is Spark's
    assert catalog.writer_progress(config.job).source_offsets == {topic: {"0": 17}}

    _send_transaction(producer, topic, range(10, 15), commit=True)  # 17-21, marker 22
    second = run_ingest(config, spark, catalog)
    assert second.records_read == 5, "the next batch read the aborted range or the markers again"
    assert ids() == list(range(15))
    assert catalog.writer_progress(config.job).source_offsets == {topic: {"0": 23}}

    # with the checkpoint lost the job restarts from the catalog's offsets alone
    _send_transaction(producer, topic, range(15, 18), commit=True)
    third = run_ingest(replace(config, checkpoint=tmp_path / "new-checkpoint"), spark, catalog)
    assert third.records_read == 3 and ids() == list(range(18))


def _grow(bootstrap_servers: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=30).topics[topic].partitions) != total:
        assert time.monotonic() < deadline, "the new partition never showed in the metadata"
        time.sleep(0.1)


def test_with_the_checkpoint_lost_a_partition_the_catalog_lacks_starts_at_its_earliest(
    catalog: Catalog, kafka, spark, tmp_path: Path
):
    """Spark's source needs every subscribed partition in ``startingOffsets``: the catalog's
    offsets are completed with the new partition at its earliest offset, as the Python reader
    reads a partition it has no offset for."""
    topic = kafka.topic(partitions=1)

    def events(ids: range) -> list[tuple[bytes, bytes]]:
        return [(str(i).encode(), orjson.dumps({"id": i})) for i in ids]

    kafka.produce(topic, events(range(20)), partition=0)
    config = IngestJobConfig(
        job="reader-grown",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        source_format=SourceFormat.JSON,
        json_tables={topic: "reader.grown"},
        source_reader=SourceReader.SPARK,
    )
    assert run_ingest(config, spark, catalog).records_read == 20
    _grow(kafka.bootstrap_servers, topic, 2)
    kafka.produce(topic, events(range(20, 30)), partition=0)
    kafka.produce(topic, events(range(30, 45)), partition=1)

    again = run_ingest(replace(config, checkpoint=tmp_path / "lost"), spark, catalog)

    assert again.records_read == 25, "the catalog's offsets were not where it started"
    ids = catalog.load_table("reader.grown").scan().to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(45))
    assert catalog.writer_progress(config.job).source_offsets == {topic: {"0": 30, "1": 15}}
