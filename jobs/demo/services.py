"""The demo's moving parts besides the database, Kafka Connect and the broker: a count of what
Debezium wrote to the broker, and the ingest job and compactor service as the subprocesses a
user would run.

Why subprocesses: ``lakestream ingest --config`` and ``lakestream compactor run`` are the
commands a user deploys, so the demo runs exactly those (its ingest YAML is left under the home
directory to read and reuse), each with its own log file, and each in a session of its own: a
Ctrl-C on the terminal reaches only the demo, which then stops them in order with SIGTERM (the
ingest job stops between batches) instead of every process dying at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

#: How long a stopped job may take to finish its batch and exit before it is killed.
STOP_TIMEOUT_S = 40.0


class DemoFailed(RuntimeError):
    """A part of the demo failed; the message is the one line the user sees."""


class TopicCount:
    """How many records Debezium's connector wrote to the demo's topics so far: the sum of their
    high watermarks (Connect writes them without transactions, so every offset is a record)."""

    def __init__(self, bootstrap_servers: str, topics: list[str]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": "lakestream-demo-count",
                "enable.auto.commit": False,
                # librdkafka's own lines (a disconnect when the broker stops first) stay off
                # the terminal
                "log_level": 0,
            }
        )
        metadata = self._consumer.list_topics(timeout=30)
        self._partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            for partition in metadata.topics[topic].partitions
        ]
        self.count = 0

    def refresh(self) -> int:
        """Ask the broker again; returns the new count (the last one if the broker is slow)."""
        from confluent_kafka import KafkaException

        total = 0
        try:
            for partition in self._partitions:
                total += self._consumer.get_watermark_offsets(partition, timeout=5)[1]
        except KafkaException:  # the broker briefly busy: keep the last count, ask again later
            return self.count
        self.count = total
        return total

    def close(self) -> None:
        self._consumer.close()


@dataclass
class Job:
    """A ``lakestream`` subprocess in a session of its own, logging to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, args: list[str], log: Path, env: Mapping[str, str]) -> Job:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                start_new_session=True,
            )
        return cls(name, process, log)

    def check_running(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise DemoFailed(
                f"the {self.name} exited with code {code}: {self.last_line()} (log: {self.log})"
            )

    def last_line(self) -> str:
        with contextlib.suppress(OSError):
            lines = self.log.read_text(errors="replace").strip().splitlines()
            return lines[-1][:300] if lines else "(no output)"
        return "(no log)"

    def terminate(self) -> None:
        """SIGTERM to the job's own process (not its group: the job stops its children)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Wait for the job to exit; then kill whatever its session left behind (a JVM, pool
        workers), so nothing keeps running after the demo."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()


def stop_jobs(jobs: list[Job]) -> None:
    """Stop jobs together: all get SIGTERM first, then each is waited for."""
    for job in jobs:
        job.terminate()
    for job in jobs:
        job.wait()


def write_ingest_config(
    path: Path,
    *,
    dsn: str,
    warehouse: Path,
    bootstrap_servers: str,
    topics: list[str],
    checkpoint: Path,
    trigger_seconds: float,
) -> None:
    """The ingest job's YAML: the demo's topics into the ``shop`` namespace, a micro-batch
    every ``trigger_seconds``."""
    config = {
        "job": "demo-cdc",
        "catalog": {"dsn": dsn, "warehouse": str(warehouse), "outage_budget": 10},
        "kafka": {"bootstrap_servers": bootstrap_servers},
        "source": {"topics": topics},
        "tables": {"namespaces": {"public": "shop"}, "hash_buckets": 2},
        "trigger": f"{trigger_seconds} seconds",
        "checkpoint": str(checkpoint),
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def compactor_env(dsn: str, warehouse: Path) -> dict[str, str]:
    """The compactor service for a short demo: one worker, rounds at least every 2 s (commits
    wake it sooner), no maintenance (snapshot expiry would remove the versions the demo's
    time-travel query reads), and short waits when it is stopped."""
    return {
        "LAKESTREAM_CATALOG__DSN": dsn,
        "LAKESTREAM_CATALOG__WAREHOUSE": str(warehouse),
        "LAKESTREAM_COMPACTOR__WORKERS": "1",
        "LAKESTREAM_COMPACTOR__POLL_SECONDS": "2",
        "LAKESTREAM_COMPACTOR__IDLE_SLEEP_SECONDS": "0.5",
        "LAKESTREAM_COMPACTOR__MAINTENANCE": "false",
        "LAKESTREAM_COMPACTOR__OUTAGE_BUDGET": "10",
        "LAKESTREAM_COMPACTOR__GRACE_SECONDS": "5",
    }
