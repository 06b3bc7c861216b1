"""``lakestream ingest`` stops cleanly when a catalog outage outlasts its budget, and a restart
resumes exactly.

The job runs as an operator runs it (a subprocess, its budget from the YAML file, a
processing-time trigger) while a producer keeps writing; the catalog's PostgreSQL is stopped with
``-m immediate``. Riding out shorter outages is ``test_ingest_outage_streaming.py``'s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog import Catalog, TableNotFoundError
from jobs.settings import redact_dsn
from tests.fixtures.feeds import Feed, stored_offsets
from tests.fixtures.jsonlog import events_named
from tests.fixtures.outage import CrashablePostgres
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
TABLE = "outage.events"
SECRET = "s3cret-pw"


class Job:
    """One ``lakestream ingest`` process and its JSON log."""

    def __init__(self, home: Path, config: dict[str, Any]) -> None:
        self.config_path = home / "ingest.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log = home / "job.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, **env: str) -> Job:
        with self.log.open("ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(self.config_path)],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        assert self.process is not None
        return self.process.poll() is None

    def wait(self, timeout: float = 180.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> int:
        assert self.process is not None
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        if self.process is not None and self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def text(self) -> str:
        return self.log.read_text()

    def events(self, name: str) -> list[dict[str, Any]]:
        return events_named(self.text(), name)


def job_config(dsn: str, warehouse: Path, kafka, topic: str, *, budget: float) -> dict:
    return {
        "job": "outage-job",
        "catalog": {"dsn": dsn, "warehouse": str(warehouse), "outage_budget": budget},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "source": {"format": "json", "topics": [topic], "max_offsets_per_trigger": 500},
        "tables": {"topic_tables": {topic: TABLE}},
        "trigger": "1 seconds",
        "checkpoint": str(warehouse.parent / "checkpoint"),
        "log_level": "INFO",
    }


def masked(dsn: str) -> str:
    """How the job names its catalog: the DSN with the password masked."""
    return redact_dsn(dsn)


def versions(catalog: Catalog) -> int:
    try:
        return catalog.load_table(TABLE).current_version()
    except TableNotFoundError:
        return 0


@contextmanager
def producing(feed: Feed, kafka) -> Iterator[threading.Event]:
    """A producer writing until the block ends (or the returned event is set)."""
    stop = threading.Event()
    thread = threading.Thread(target=feed.produce_until, args=(kafka, stop, 5), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(60)


def assert_each_batch_landed_once(catalog: Catalog) -> None:
    history = catalog.load_table(TABLE).history(limit=10_000)
    batches = Counter((v.writer_id, v.batch_id) for v in history)
    assert batches and max(batches.values()) == 1, "a batch was committed twice"


@pytest.mark.slow
def test_an_outage_longer_than_the_budget_stops_the_job_with_one_line_and_a_restart_resumes(
    outage_pg: CrashablePostgres, kafka, warehouse: Path, tmp_path: Path
):
    dsn = outage_pg.database(password=SECRET)
    feed = Feed("append", kafka.topic(partitions=2))
    job = Job(tmp_path, job_config(dsn, warehouse, kafka, feed.topic, budget=4))
    job.start()
    try:
        with producing(feed, kafka):
            with Catalog.connect(dsn) as catalog:
                wait_for(
                    lambda: versions(catalog) >= 2 or not job.alive(), "the first commits", 180
                )
                assert job.alive(), job.text()[-3000:]
            outage_pg.crash()
            code = job.wait()
        outage_pg.recover()
        assert code == 1, job.text()[-3000:]
        [failed] = job.events("ingest_failed")
        assert failed["kind"] == "CatalogOutageError"
        assert failed["catalog"] == masked(dsn)
        retries = job.events("catalog_unavailable")
        assert retries and failed["outage_s"] >= retries[-1]["waited_s"]
        # the budget holds though the pool would wait 10 s for a connection
        assert failed["outage_s"] < 8, failed
        assert "outage budget is 4 s" in failed["error"]
        assert SECRET not in job.text()
        assert "Traceback" not in job.text(), job.text()[-3000:]

        # the restart reads to the end of the topic: the lake holds every event once
        job.start(LAKESTREAM_INGEST_TRIGGER="available_now")
        assert job.wait(300) == 0, job.text()[-3000:]
    finally:
        job.kill()
    with Catalog.connect(dsn) as catalog:
        feed.assert_lake_holds_it(catalog, TABLE)
        assert stored_offsets(catalog, "outage-job", feed.topic) == feed.ends
        assert_each_batch_landed_once(catalog)
