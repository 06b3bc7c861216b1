"""``lakestream ingest`` with ``metrics.port``: a user's Prometheus sees batches, rows and lag of
the real job, and /healthz says it is well, while it runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from catalog import Catalog
from ingest.kafka.apache_kafka import create_topic
from tests.fixtures.broker import KafkaTestHelper, unique_topic
from tests.fixtures.debezium_events import customer, customer_change
from tests.fixtures.http import free_port, get, scrape
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def inserts(first: int, last: int) -> list[tuple[bytes, bytes]]:
    events = []
    for id_ in range(first, last + 1):
        record = customer_change("c", id_, lsn=1000 + id_, after=customer(id_, f"c{id_}@x"))
        assert record.key is not None and record.value is not None
        events.append((record.key, record.value))
    return events


@pytest.mark.slow
def test_a_running_job_serves_its_figures_and_health(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = f"{unique_topic('cdc').replace('-', '_')}.public.customers"
    create_topic(kafka.bootstrap_servers, topic)
    kafka.produce(topic, inserts(1, 40))
    port = free_port()
    config = {
        "job": "metered",
        "catalog": {"dsn": catalog_dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "checkpoint": str(tmp_path / "checkpoint"),
        "source": {"topics": [topic]},
        "tables": {"namespaces": {"public": "shop"}, "hash_buckets": 1},
        "trigger": "1 seconds",
        "metrics": {"port": port, "host": "127.0.0.1"},
    }
    path = tmp_path / "ingest.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "ingest.log"
    with log.open("w") as err:
        job = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(path)],
            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    rows = 'lakestream_ingest_rows_total{table="shop.customers"}'
    lag = f'lakestream_ingest_lag_records{{partition="0",topic="{topic}"}}'
    try:
        first = wait_for(
            lambda: (m := scrape(f"{base}/metrics")).get(rows) == 40 and m.get(lag) == 0 and m,
            f"40 rows and no lag on /metrics: {log.read_text()[-2000:]}",
            timeout=300,
        )
        assert first["lakestream_ingest_batches_total"] >= 1
        assert first["lakestream_ingest_commit_seconds_count"] >= 1
        assert first["lakestream_ingest_freshness_up"] == 1
        status, body = get(f"{base}/healthz")
        assert status == 200 and json.loads(body)["lag"] == 0

        kafka.produce(topic, inserts(41, 50))
        wait_for(lambda: scrape(f"{base}/metrics").get(rows) == 50, "10 more rows", timeout=120)
        assert catalog.load_table("shop.customers").scan().to_arrow().num_rows == 50
    finally:
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
