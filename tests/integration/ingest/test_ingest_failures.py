"""``lakestream ingest`` failing fast and clearly, and stopping cleanly, as an operator sees it.

The job runs as a subprocess in a process group of its own, as systemd or a container runtime
runs it; its stderr is read line by line while it runs. What a user relies on: a wrong catalog or
broker address is one ``ingest_failed`` line within seconds, before Spark starts; a broker that
goes away mid-stream is retried (one warning per retry) and then fails with one line; SIGTERM to
the whole group stops the job between batches with exit code 0; and no JVM outlives the driver,
however the driver ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog import Catalog
from ingest.kafka.apache_kafka import ApacheKafka, create_topic, free_port
from tests.fixtures.broker import KafkaTestHelper, produce, unique_topic
from tests.fixtures.jsonlog import split_log
from tests.fixtures.waits import wait_for
from tests.integration.ingest.test_ingest_cli import changes

pytestmark = [pytest.mark.integration, pytest.mark.spark]
TABLE = "shop.customers"


class Job:
    """``lakestream ingest`` running in the background in its own process group."""

    def __init__(self, config: dict[str, Any], path: Path) -> None:
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(path)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in split_log("\n".join(self.lines))[0] if e.get("event") == name]

    def other(self) -> list[str]:
        return split_log("\n".join(self.lines))[1]

    def wait(self, timeout: float = 120) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code

    def descendants(self) -> set[int]:
        """The driver's processes (the JVM, Spark's Python workers), found through /proc."""
        return descendants(self.process.pid)

    def describe(self) -> str:
        return f"exit {self.process.returncode}\n" + "\n".join(self.lines[-60:])


def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def run_to_end(config: dict[str, Any], path: Path) -> Job:
    job = Job(config, path)
    job.wait()
    return job


def config_for(
    dsn: str, tmp_path: Path, bootstrap: str, topic: str, **extra: Any
) -> dict[str, Any]:
    return {
        "job": "failing-job",
        "catalog": {"dsn": dsn, "warehouse": str(tmp_path / "warehouse")},
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"topics": [topic]},
        "tables": {"topic_tables": {topic: TABLE}},
        "checkpoint": str(tmp_path / "checkpoint"),
        **extra,
    }


def streaming(config: dict[str, Any], kafka_budget: float | None = None) -> dict[str, Any]:
    config["trigger"] = "1 seconds"
    if kafka_budget is not None:
        config["kafka"]["outage_budget"] = kafka_budget
    return config


@pytest.mark.slow
def test_an_unreachable_broker_fails_within_seconds_in_one_line(
    catalog_dsn: str, tmp_path: Path
) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    job = run_to_end(config_for(catalog_dsn, tmp_path, bootstrap, "t"), tmp_path / "job.yaml")
    elapsed = time.monotonic() - job.started

    assert job.process.returncode == 1, job.describe()
    assert elapsed < 15, job.describe()
    (failed,) = job.events("ingest_failed")
    assert bootstrap in failed["error"] and failed["bootstrap_servers"] == bootstrap
    assert len(job.lines) < 20, job.describe()  # was 752 lines, 579 of them librdkafka's
    assert not job.other(), job.describe()  # no raw librdkafka line, no Spark, no traceback


def test_an_unreachable_catalog_fails_before_spark_starts(tmp_path: Path) -> None:
    dsn = f"postgresql://lake:s3cret@127.0.0.1:{free_port()}/lake"
    job = run_to_end(config_for(dsn, tmp_path, "127.0.0.1:9", "t"), tmp_path / "job.yaml")
    elapsed = time.monotonic() - job.started

    assert job.process.returncode == 1, job.describe()
    assert elapsed < 10, job.describe()
    (failed,) = job.events("ingest_failed")
    assert "cannot connect to the catalog" in failed["error"]
    assert "dbname=lake" in failed["error"] and "s3cret" not in "\n".join(job.lines)
    assert not job.other(), job.describe()  # Spark never started: none of its lines


@pytest.mark.slow
def test_a_broker_outage_is_retried_then_fails_in_one_line(
    catalog: Catalog, catalog_dsn: str, tmp_path: Path
) -> None:
    budget = 12.0  # two or three attempts of 5 s each
    with ApacheKafka.start() as broker:
        topic = unique_topic("outage")
        create_topic(broker.bootstrap_servers, topic)
        produce(broker.bootstrap_servers, topic, changes(1, 10, lsn=1000))
        config = config_for(catalog_dsn, tmp_path, broker.bootstrap_servers, topic)
        job = Job(streaming(config, kafka_budget=budget), tmp_path / "job.yaml")
        wait_for(lambda: job.events("batch_committed"), "the first batch", timeout=90)
        processes = job.descendants()
        broker.stop()
        stopped = time.monotonic()
        code = job.wait()
        failed_after = time.monotonic() - stopped

    assert code == 1, job.describe()
    retries = job.events("kafka_unavailable")
    assert len(retries) >= 2, job.describe()
    assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
    assert all(
        r["wait_s"] > 0 and r["bootstrap_servers"] == broker.bootstrap_servers for r in retries
    )
    (failed,) = job.events("ingest_failed")
    assert failed["kind"] == "BrokerUnavailableError", job.describe()
    assert broker.bootstrap_servers in failed["error"]
    assert failed_after < budget + 20, job.describe()
    assert not [line for line in job.other() if "Traceback" in line], job.describe()
    wait_for(lambda: not alive(processes), "the JVM and Spark's workers to end", timeout=20)
    assert catalog.load_table(TABLE).scan().to_arrow().num_rows == 10


@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_between_batches(
    catalog: Catalog, catalog_dsn: str, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic()
    kafka.produce(topic, changes(1, 10, lsn=1000))
    job = Job(
        streaming(config_for(catalog_dsn, tmp_path, kafka.bootstrap_servers, topic)),
        tmp_path / "job.yaml",
    )
    wait_for(lambda: job.events("batch_committed"), "the first batch", timeout=90)
    kafka.produce(topic, changes(11, 20, lsn=1000))
    wait_for(lambda: len(job.events("batch_committed")) >= 2, "the second batch", timeout=60)
    processes = job.descendants()
    os.killpg(job.process.pid, signal.SIGTERM)  # what systemd and container runtimes do

    assert job.wait() == 0, job.describe()
    assert job.events("ingest_finished"), job.describe()
    assert not job.events("ingest_failed"), job.describe()
    assert not [line for line in job.other() if "Traceback" in line], job.describe()
    progress = catalog.writer_progress("failing-job")
    assert progress is not None and progress.source_offsets == {topic: {"0": 20}}
    assert catalog.load_table(TABLE).scan().to_arrow().num_rows == 20
    wait_for(lambda: not alive(processes), "the JVM and Spark's workers to end", timeout=20)


def test_a_killed_driver_leaves_no_jvm_behind(
    catalog_dsn: str, kafka: KafkaTestHelper, tmp_path: Path
) -> None:
    topic = kafka.topic()
    job = Job(
        streaming(config_for(catalog_dsn, tmp_path, kafka.bootstrap_servers, topic)),
        tmp_path / "job.yaml",
    )
    wait_for(lambda: job.events("ingest_started"), "Spark to start", timeout=90)
    processes = job.descendants()
    assert processes, job.describe()  # the JVM is the driver's child
    job.process.kill()
    job.wait()
    wait_for(lambda: not alive(processes), "the JVM and Spark's workers to end", timeout=20)
