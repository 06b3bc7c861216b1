"""A seeded soak: producers keep writing while ingest jobs are SIGKILLed at random moments.

Two jobs run side by side - Debezium changes into a CDC table and JSON events into an append
table - each killed (``kill -9`` of its whole process group: driver, JVM, Python workers) several
times, once after its checkpoint was deleted. At the end the CDC table equals the source and the
append table holds the exact multiset of events, so a message read twice shows up as a duplicate.
The two jobs read Kafka differently (:data:`READERS`): the CDC job with lakestream's Python
source, the append job with Spark's own (``source.reader: spark``), so both readers are soaked
without a third and fourth job on two cores.

``LAKESTREAM_SOAK_KILLS`` sets the kill rounds per job (default 3, at least 2): every run still
kills both jobs with their checkpoint kept and once with it deleted; more rounds soak longer.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from catalog import Catalog
from tests.fixtures.feeds import Feed, stored_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
KILLS_ENV = "LAKESTREAM_SOAK_KILLS"


def kill_rounds() -> int:
    """Kill rounds per job: 3 by default, enough for a kill with the checkpoint kept and one
    after it was deleted in every run; ``$LAKESTREAM_SOAK_KILLS`` soaks longer (a CI run must
    stay short on 2 cores, so the default is not larger)."""
    rounds = int(os.environ.get(KILLS_ENV, "3"))
    if rounds < 2:  # the round that deletes the checkpoint is never the first
        raise ValueError(f"{KILLS_ENV} must be at least 2, not {rounds}")
    return rounds


KILLS = kill_rounds()
#: ``source.reader`` of each job.
READERS = {"cdc": "python", "append": "spark"}
#: Offsets per batch of the final drain (the killed runs read 120 a batch).
DRAIN_BATCH = 1000


@dataclass
class Job:
    feed: Feed
    config: Path
    checkpoint: Path
    table: str
    log: Path

    def start(self) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as err:
            return subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(self.config)],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    def kill_repeatedly(self, rng: random.Random) -> int:
        """Start and SIGKILL the job KILLS times; once, delete its checkpoint first."""
        lost_checkpoint_at = rng.randrange(1, KILLS)
        for round_ in range(KILLS):
            if round_ == lost_checkpoint_at:
                shutil.rmtree(self.checkpoint, ignore_errors=True)
            job = self.start()
            time.sleep(rng.uniform(4, 14))  # from JVM start-up to several batches in
            assert job.poll() is None, self.log.read_text()[-3000:]
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        return lost_checkpoint_at

    def drain(self) -> None:
        """Restart after the last kill and run to the end of the topic with AvailableNow.

        The batch the last kill interrupted is replayed as the checkpoint planned it; the
        backlog after it is read in batches of ``DRAIN_BATCH`` rather than 120 offsets: no kill
        comes any more, and thirty-odd small batches per job were most of the test's time."""
        env = {
            **os.environ,
            "LAKESTREAM_INGEST_TRIGGER": "available_now",
            "LAKESTREAM_INGEST__SOURCE__MAX_OFFSETS_PER_TRIGGER": str(DRAIN_BATCH),
        }
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(self.config)],
            cwd=ROOT,
            capture_output=True,
            timeout=600,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]


def make_job(kind: str, feed: Feed, *, dsn: str, warehouse: Path, kafka, home: Path) -> Job:
    home.mkdir()
    table = f"soak.{kind}"
    tables = {"topic_tables": {feed.topic: table}, "hash_buckets": 3}
    config = {
        "job": f"soak-{kind}",
        "catalog": {"dsn": dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "source": {
            "format": "debezium" if kind == "cdc" else "json",
            "topics": [feed.topic],
            "max_offsets_per_trigger": 120,
            "reader": READERS[kind],
        },
        "tables": tables,
        "checkpoint": str(home / "checkpoint"),
        "trigger": "1 seconds",
        "log_level": "WARNING",
    }
    path = home / "ingest.yaml"
    path.write_text(yaml.safe_dump(config))
    return Job(feed, path, home / "checkpoint", table, home / "job.log")


def check_lake(catalog: Catalog, job: Job) -> None:
    job.feed.assert_lake_holds_it(catalog, job.table)
    assert stored_offsets(catalog, f"soak-{job.feed.kind}", job.feed.topic) == job.feed.ends


@pytest.mark.slow
def test_jobs_killed_at_random_moments_lose_and_duplicate_nothing(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka, tmp_path: Path
):
    rng = random.Random(20261124)
    feeds = [
        Feed(kind, kafka.topic(partitions=3), random.Random(rng.random()), keys=300)
        for kind in ("cdc", "append")
    ]
    jobs = [
        make_job(
            f.kind, f, dsn=catalog_dsn, warehouse=warehouse, kafka=kafka, home=tmp_path / f.kind
        )
        for f in feeds
    ]
    stop = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        producers = [pool.submit(f.produce_until, kafka, stop) for f in feeds]
        killers = [pool.submit(j.kill_repeatedly, random.Random(rng.random())) for j in jobs]
        try:
            for killer in killers:
                killer.result()
        finally:
            stop.set()
        for producer in producers:
            producer.result()
    with ThreadPoolExecutor(len(jobs)) as pool:  # independent jobs: drain them side by side
        for drained in [pool.submit(job.drain) for job in jobs]:
            drained.result()
    for job in jobs:
        check_lake(catalog, job)
