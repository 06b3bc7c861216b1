"""``lakestream ingest`` run as a subprocess: restarts of a pattern job, and the dead-letter guard.

The job's own log lines are the evidence: ``batch_committed`` carries ``passes`` (how many times
the batch was written; a table the job did not know before the batch costs a second pass) and
``table_created_from_stream`` appears only when a table is really created. A first run that only
leaves the tables, the checkpoint and a commit behind for the restart runs the same job from the
same YAML file in-process, on the session's Spark (``run_ingest_in_process``); the restarts under
test are the command's own processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from catalog import Catalog
from ingest.kafka.apache_kafka import create_topic
from tests.fixtures.broker import KafkaTestHelper, unique_topic
from tests.fixtures.debezium_events import customer, customer_change
from tests.fixtures.ingest_cli import CliRun, run_ingest_cli, run_ingest_in_process

pytestmark = [pytest.mark.integration, pytest.mark.spark]
DLQ = "lakestream.dead_letters"


def job_config(
    catalog_dsn: str, warehouse: Path, tmp_path: Path, kafka: KafkaTestHelper, **extra: Any
) -> dict[str, Any]:
    return {
        "job": "cli-job",
        "catalog": {"dsn": catalog_dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "checkpoint": str(tmp_path / "checkpoint"),
        **extra,
    }


def changes(first: int, last: int, *, lsn: int, schema: bool = True) -> list[tuple[bytes, bytes]]:
    """Inserts of customers ``first..last`` as Debezium events (key and value bytes)."""
    events = []
    for id_ in range(first, last + 1):
        record = customer_change(
            "c", id_, lsn=lsn + id_, after=customer(id_, f"c{id_}@x"), schema=schema
        )
        assert record.key is not None and record.value is not None
        events.append((record.key, record.value))
    return events


def assert_ran(run: CliRun) -> None:
    assert run.returncode == 0, run.describe()
    assert not run.named("ingest_failed"), run.describe()


@pytest.mark.slow
def test_a_restarted_pattern_job_writes_each_batch_once(
    catalog: Catalog,
    catalog_dsn: str,
    warehouse: Path,
    kafka: KafkaTestHelper,
    spark: SparkSession,
    *,
    tmp_path: Path,
) -> None:
    prefix = unique_topic("cdc").replace("-", "_")
    topics = {f"{prefix}.public.{name}": f"shop.{name}" for name in ("customers", "clients")}
    for topic in topics:
        create_topic(kafka.bootstrap_servers, topic, 2)
    config = job_config(
        catalog_dsn,
        warehouse,
        tmp_path,
        kafka,
        source={"pattern": rf"{prefix}\.public\..*", "max_offsets_per_trigger": 30},
        tables={"namespaces": {"public": "shop"}, "hash_buckets": 2},
    )
    for topic in topics:
        kafka.produce(topic, changes(1, 40, lsn=1000))

    first = run_ingest_in_process(config, tmp_path / "ingest.yaml", spark, catalog)
    assert first.run.batches_committed >= 3  # 80 records, at most 30 a batch
    created = sorted(e["table"] for e in first.named("table_created_from_stream"))
    assert created == sorted(topics.values())  # they did not exist: created, really

    for topic in topics:
        kafka.produce(topic, changes(41, 100, lsn=1000))
    second = run_ingest_cli(config, tmp_path / "ingest.yaml")
    assert_ran(second)
    assert second.named("table_created_from_stream") == [], second.describe()
    committed = second.named("batch_committed")
    assert len(committed) >= 4  # 120 records, at most 30 a batch
    assert [e["passes"] for e in committed] == [1] * len(committed), second.describe()
    for table in topics.values():
        assert catalog.load_table(table).scan().to_arrow().num_rows == 100


@pytest.mark.slow
def test_a_new_checkpoint_also_knows_the_tables_of_the_last_commit(
    catalog: Catalog,
    catalog_dsn: str,
    warehouse: Path,
    kafka: KafkaTestHelper,
    spark: SparkSession,
    *,
    tmp_path: Path,
) -> None:
    """The checkpoint is lost: the job resumes from the catalog, and still writes once."""
    prefix = unique_topic("cdc").replace("-", "_")
    topic = f"{prefix}.public.customers"
    create_topic(kafka.bootstrap_servers, topic, 1)
    config = job_config(
        catalog_dsn,
        warehouse,
        tmp_path,
        kafka,
        source={"pattern": rf"{prefix}\..*"},
        tables={"namespaces": {"public": "shop"}, "hash_buckets": 2},
    )
    kafka.produce(topic, changes(1, 10, lsn=1000))
    first = run_ingest_in_process(config, tmp_path / "ingest.yaml", spark, catalog)
    assert first.run.batches_committed == 1
    kafka.produce(topic, changes(11, 20, lsn=1000))
    config["checkpoint"] = str(tmp_path / "new-checkpoint")
    again = run_ingest_cli(config, tmp_path / "ingest.yaml")
    assert_ran(again)
    assert again.named("table_created_from_stream") == []
    assert [e["passes"] for e in again.named("batch_committed")] == [1], again.describe()
    assert catalog.load_table("shop.customers").scan().to_arrow().num_rows == 20


@pytest.mark.slow
def test_schemaless_messages_without_a_schema_trip_the_guard_and_commit_nothing(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    """What the issue saw: schemaless messages of a table nobody declared went to the dead
    letters while the job exited 0. Now the batch fails, naming topic, reason and remedy."""
    topic = kafka.topic()
    config = job_config(
        catalog_dsn,
        warehouse,
        tmp_path,
        kafka,
        source={"topics": [topic]},
        tables={"topic_tables": {topic: "shop.customers"}},
    )
    kafka.produce(topic, changes(1, 20, lsn=1000, schema=False))

    run = run_ingest_cli(config, tmp_path / "ingest.yaml")
    assert run.returncode == 1, run.describe()
    (failed,) = run.named("ingest_failed")
    assert failed["kind"] == "TooManyDeadLetters"
    assert f"topic {topic!r}: 20 of 20 records" in failed["error"]
    assert "commonest reason no_schema" in failed["error"]
    assert "declare the table under tables.declare" in failed["error"]
    assert "Traceback" not in "\n".join(run.other), run.describe()
    assert not catalog.table_exists("shop.customers")
    assert catalog.load_table(DLQ).scan().to_arrow().num_rows == 0
    assert catalog.writer_progress("cli-job") is None

    # the operator declares the table: the same records are read again, and land
    config["tables"]["declare"] = {
        "shop.customers": {
            "primary_key": ["id"],
            "columns": {
                "id": "int32",
                "first_name": "string",
                "last_name": "string",
                "email": "string",
            },
        }
    }
    fixed = run_ingest_cli(config, tmp_path / "ingest.yaml")
    assert_ran(fixed)
    rows = catalog.load_table("shop.customers").scan().to_arrow().sort_by("id")
    assert rows.column("email").to_pylist() == [f"c{i}@x" for i in range(1, 21)]
    progress = catalog.writer_progress("cli-job")
    assert progress is not None and progress.source_offsets == {topic: {"0": 20}}
