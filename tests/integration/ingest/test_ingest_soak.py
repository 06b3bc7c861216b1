"""A seeded soak: producers keep writing while ingest jobs are SIGKILLed at random moments.

Two jobs run side by side - Debezium changes into a CDC table and JSON events into an append
table - each killed (``kill -9`` of its whole process group: driver, JVM, Python workers) several
times, once after its checkpoint was deleted. At the end the CDC table equals the source and the
append table holds the exact multiset of events, so a message read twice shows up as a duplicate.
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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import yaml

from catalog import Catalog
from tests.unit.ingest.debezium_events import customer, customer_change

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
KILLS = 4


@dataclass
class Feed:
    """One topic, the producer writing it, and the model of what the lake must hold."""

    kind: str
    topic: str
    rng: random.Random
    rows: dict[int, dict] = field(default_factory=dict)
    events: Counter[int] = field(default_factory=Counter)
    ends: dict[str, int] = field(default_factory=dict)
    lsn: int = 1_000
    next_id: int = 0

    def produce_until(self, kafka, stop: threading.Event) -> None:
        while not stop.is_set():
            self.produce(kafka, 20)
            time.sleep(self.rng.uniform(0.05, 0.3))

    def produce(self, kafka, n: int) -> None:
        records = [self._change() if self.kind == "cdc" else self._event() for _ in range(n)]
        for sent in kafka.produce(self.topic, records):
            part = str(sent.partition)
            self.ends[part] = max(self.ends.get(part, 0), sent.offset + 1)

    def _event(self) -> tuple[bytes, bytes]:
        self.next_id += 1
        self.events[self.next_id] += 1
        return str(self.next_id).encode(), orjson.dumps({"id": self.next_id, "at": self.lsn})

    def _change(self) -> tuple[bytes, bytes]:
        self.lsn += 8
        id_ = self.rng.randrange(300)
        if id_ in self.rows and self.rng.random() < 0.2:
            del self.rows[id_]
            before = {"id": id_, "first_name": "", "last_name": "", "email": None}
            record = customer_change("d", id_, lsn=self.lsn, before=before)
        else:
            op = "u" if id_ in self.rows else "c"
            self.rows[id_] = customer(id_, f"{self.lsn}@example.com")
            record = customer_change(op, id_, lsn=self.lsn, after=self.rows[id_])
        return record.key, record.value


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
        """Run to the end of the topic with AvailableNow."""
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(self.config)],
            cwd=ROOT,
            capture_output=True,
            timeout=600,
            check=False,
            env={**os.environ, "LAKESTREAM_INGEST_TRIGGER": "available_now"},
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
    feed = job.feed
    rows = catalog.load_table(job.table).scan().to_arrow().to_pylist()
    if feed.kind == "cdc":
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)), "a key appears twice"
        assert {r["id"]: r["email"] for r in rows} == {i: r["email"] for i, r in feed.rows.items()}
    else:
        counts = Counter(r["id"] for r in rows)
        assert counts == feed.events, (
            f"duplicated: {sum((counts - feed.events).values())}, "
            f"missing: {sum((feed.events - counts).values())}"
        )
    progress = catalog.writer_progress(f"soak-{feed.kind}")
    assert progress is not None and progress.source_offsets[feed.topic] == feed.ends


def test_jobs_killed_at_random_moments_lose_and_duplicate_nothing(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka, tmp_path: Path
):
    rng = random.Random(20261124)
    feeds = [
        Feed(kind, kafka.topic(partitions=3), random.Random(rng.random()))
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
    for job in jobs:
        job.drain()
        check_lake(catalog, job)
