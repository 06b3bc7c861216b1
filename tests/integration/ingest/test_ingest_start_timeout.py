"""A Spark Python worker that does not connect back in time: the job starts its query again.

Spark gives the Python process that runs a streaming source 10 s to connect back to the JVM
(fixed in ``PythonWorkerFactory.createSimpleWorker``), then fails the query while it plans its
first batch. On a busy machine that process can spend that long importing PySpark - seen in
the suite, with two test workers and four jobs sharing 2 cores. Here the runner really is that
slow, once: a ``sitecustomize`` on the job's ``PYTHONPATH`` (inherited by the JVM and every
Python process it starts) sleeps past the deadline in the first runner process only.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from catalog import Catalog
from ingest.job import RESTART_PAUSE_S
from ingest.kafka.apache_kafka import create_topic
from tests.fixtures.broker import KafkaTestHelper, unique_topic
from tests.fixtures.ingest_cli import run_ingest_cli
from tests.integration.ingest.test_ingest_cli import assert_ran, changes, job_config

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
#: Sleeps in the first streaming source runner only (the flag file says it has slept).
SLOW_RUNNER = """
import os, sys, time
if "pyspark.sql.streaming.python_streaming_source_runner" in sys.orig_argv:
    flag = os.environ["SLOW_RUNNER_FLAG"]
    if not os.path.exists(flag):
        open(flag, "w").close()
        time.sleep(14)
"""


@pytest.mark.slow
def test_a_source_runner_too_slow_to_connect_back_costs_a_restart_not_the_job(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = f"{unique_topic('cdc').replace('-', '_')}.public.customers"
    create_topic(kafka.bootstrap_servers, topic, 1)
    kafka.produce(topic, changes(1, 30, lsn=1000))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_RUNNER)
    flag = tmp_path / "runner-slept"
    config = job_config(
        catalog_dsn,
        warehouse,
        tmp_path,
        kafka,
        source={"topics": [topic], "max_offsets_per_trigger": 10},
        tables={"namespaces": {"public": "shop"}, "hash_buckets": 2},
    )
    path = os.pathsep.join([str(hook), str(ROOT), os.environ.get("PYTHONPATH", "")])
    run = run_ingest_cli(
        config,
        tmp_path / "ingest.yaml",
        env={"PYTHONPATH": path.rstrip(os.pathsep), "SLOW_RUNNER_FLAG": str(flag)},
    )

    assert flag.exists(), "the runner never slept: the fault was not provoked"
    assert_ran(run)
    restarts = run.named("ingest_restarting")
    assert [e["attempt"] for e in restarts] == [1], run.describe()
    assert "Python worker failed to connect back" in restarts[0]["reason"]
    assert 0 <= restarts[0]["pause_s"] <= RESTART_PAUSE_S
    batches = run.named("batch_committed")
    assert [e["batch"] for e in batches] == [0, 1, 2], run.describe()
    rows = catalog.load_table("shop.customers").scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(1, 31))  # each once
