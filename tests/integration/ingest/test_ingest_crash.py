"""kill -9 of a running ingest job, and a lost checkpoint: nothing lost, nothing duplicated.

The killed job and its restart are ``lakestream ingest`` processes. The run after the checkpoint
is deleted proves what the job does without it (it reads on from the offsets in the catalog), not
what a process does: it runs the job of the same YAML file in-process, on the session's Spark.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.sql import SparkSession

from catalog import Catalog, TableNotFoundError
from tests.fixtures.ingest_cli import run_file_in_process

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]


def write_config(
    path: Path, *, dsn: str, warehouse: Path, bootstrap: str, topic: str, **extra: object
) -> Path:
    config = {
        "job": "clicks-job",
        "catalog": {"dsn": dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"format": "json", "topics": [topic], "max_offsets_per_trigger": 150},
        "tables": {"topic_tables": {topic: "logs.clicks"}},
        "checkpoint": str(path.parent / "checkpoint"),
        "log_level": "WARNING",
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def start_job(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


def run_to_end(config: Path) -> None:
    """Run the job in the foreground until AvailableNow has drained the topic."""
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def versions(catalog: Catalog) -> int:
    try:
        return catalog.load_table("logs.clicks").current_version()
    except TableNotFoundError:
        return 0


def wait_for_versions(catalog: Catalog, job: subprocess.Popen[bytes], log: Path, n: int) -> None:
    """Until the running job has committed ``n`` versions (it must not die meanwhile)."""
    deadline = time.monotonic() + 240
    while versions(catalog) < n:
        assert job.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the job committed nothing in time"
        time.sleep(0.2)


def events(start: int, stop: int) -> list[tuple[bytes, bytes]]:
    return [
        (str(i).encode(), orjson.dumps({"id": i, "page": f"/p/{i % 7}"}))
        for i in range(start, stop)
    ]


def ids(catalog: Catalog) -> list[int]:
    return (
        catalog.load_table("logs.clicks").scan(columns=["id"]).to_arrow().column("id").to_pylist()
    )


@pytest.mark.slow
def test_kill_minus_nine_mid_stream_then_restart_and_lost_checkpoint(
    catalog: Catalog,
    catalog_dsn: str,
    warehouse: Path,
    kafka,
    spark: SparkSession,
    *,
    tmp_path: Path,
):
    topic = kafka.topic(partitions=2)
    kafka.produce(topic, events(0, 900))
    config = write_config(
        tmp_path / "ingest.yaml",
        dsn=catalog_dsn,
        warehouse=warehouse,
        bootstrap=kafka.bootstrap_servers,
        topic=topic,
    )

    log = tmp_path / "job.log"
    job = start_job(config, log)
    wait_for_versions(catalog, job, log, 2)
    os.killpg(job.pid, signal.SIGKILL)  # the JVM and Python workers die mid-batch
    job.wait(30)
    partial = ids(catalog)
    assert 0 < len(partial) < 900 and len(set(partial)) == len(partial)

    run_to_end(config)  # the same checkpoint: Spark replays the unfinished batch
    assert sorted(ids(catalog)) == list(range(900))

    # the checkpoint is lost: the job resumes from the offsets stored with its commits
    shutil.rmtree(tmp_path / "checkpoint")
    kafka.produce(topic, events(900, 1100))
    resumed = run_file_in_process(config, spark, catalog)
    assert resumed.run.records_read == 200  # from the catalog's offsets, not from the start
    assert sorted(ids(catalog)) == list(range(1100))


@pytest.mark.slow
def test_sigterm_stops_a_running_job_cleanly(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka, tmp_path: Path
):
    topic = kafka.topic(partitions=1)
    kafka.produce(topic, events(0, 50))
    config = write_config(
        tmp_path / "ingest.yaml",
        dsn=catalog_dsn,
        warehouse=warehouse,
        bootstrap=kafka.bootstrap_servers,
        topic=topic,
        trigger="1 seconds",
    )
    log = tmp_path / "job.log"
    job = start_job(config, log)
    wait_for_versions(catalog, job, log, 1)  # running, under a trigger that never ends
    job.send_signal(signal.SIGTERM)
    assert job.wait(120) == 0, log.read_text()[-3000:]
    assert sorted(ids(catalog)) == list(range(50))
