"""``source.converter: avro`` through the real job (Kafka, Spark, the catalog), as far as it
goes without a schema registry.

No registry can be run here (docs/ingest.md, "How this was tested"), and these tests stand
none in: what they check needs none. Messages that are not in Confluent's wire format are
dead letters before any schema is asked for; a message that is in it sends the real registry
client to a registry that does not answer, and the batch must then fail whole rather than
dead-letter or drop anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.debezium.avro import AvroDecoding, frame
from ingest.job import IngestJobConfig, run_ingest
from tests.fixtures.debezium_events import customer, customer_change
from tests.fixtures.http import free_port

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DLQ = "lakestream.dead_letters"


def avro_config(kafka, topic: str, tmp_path: Path, registry: str) -> IngestJobConfig:
    decoding = AvroDecoding.of(registry, {"max.retries": "0", "timeout": "5"})
    return IngestJobConfig(
        job="customers-avro",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: "shop.customers"}, avro=decoding),
        hash_buckets=2,
    )


@pytest.mark.slow
def test_json_on_an_avro_job_is_dead_letters_and_a_silent_registry_fails_the_batch(
    catalog: Catalog, kafka, spark, tmp_path: Path
) -> None:
    topic = kafka.topic(partitions=1)
    json_events = [customer_change("c", i, lsn=100 + i, after=customer(i)) for i in (1, 2)]
    kafka.produce(topic, [(e.key, e.value) for e in json_events])
    registry = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    config = avro_config(kafka, topic, tmp_path, registry)

    first = run_ingest(config, spark, catalog)
    assert first.batches_committed == 1
    dead = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
    assert [(d["offset"], d["reason"], d["table"]) for d in dead] == [
        (0, "bad_wire_format", "shop.customers"),
        (1, "bad_wire_format", "shop.customers"),
    ]
    assert [d["value"] for d in dead] == [e.value for e in json_events]
    assert "magic byte 0x7b" in dead[0]["error"]
    assert not catalog.table_exists("shop.customers")
    progress = catalog.writer_progress("customers-avro")
    assert progress.source_offsets[topic] == {"0": 2}

    kafka.produce(topic, [(None, frame(5, b"\x02"))])  # an Avro value: its schema is asked for
    with pytest.raises(Exception, match=r"did not give schema 5") as failed:
        run_ingest(config, spark, catalog)
    assert registry.removesuffix("/apis/ccompat/v7") in str(failed.value)
    after = catalog.writer_progress("customers-avro")
    assert after.source_offsets[topic] == {"0": 2}  # the failed batch committed nothing
    assert catalog.load_table(DLQ).scan().to_arrow().num_rows == 2
