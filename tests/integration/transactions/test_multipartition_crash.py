"""kill -9 of a consistent job whose transaction topic has 3 partitions, at a commit that keeps
END markers back for commit order (issue 46): the restarted job resumes from that commit's book -
each partition's reach, the ENDs still pending - and the lake ends equal to the source, every
version a consistent cut published in commit order, nothing lost or published twice; then the
checkpoint is lost and the job resumes from the catalog alone.

The killed job and its restart are ``lakestream ingest`` processes; the run after the checkpoint
is deleted runs the same YAML file in-process (see test_consistent_crash.py)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from catalog import Catalog
from tests.fixtures.ingest_cli import run_file_in_process
from tests.integration.transactions.support import (
    Bank,
    held_and_pending,
    new_topics,
    split_versions,
    watermark_faults,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
JOB = "bank_crash_multi"
ACCOUNTS = 6


def write_config(path: Path, bank: Bank, *, dsn: str, warehouse: Path, bootstrap: str) -> Path:
    config = {
        "job": JOB,
        "catalog": {"dsn": dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"topics": list(bank.topics.all()), "max_offsets_per_trigger": 20},
        "transactions": {"mode": "consistent", "partition_idle_s": 0.2},
        "checkpoint": str(path.parent / "checkpoint"),
        "log_level": "WARNING",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def command(config: Path) -> list[str]:
    return [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)]


def kill_while_ends_wait(catalog: Catalog, config: Path, log: Path) -> tuple[int, int]:
    """Run the job until a commit keeps END markers back for commit order, kill -9 it there;
    returns what that commit held (transactions, pending ENDs)."""
    with log.open("wb") as err:
        job = subprocess.Popen(
            command(config), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while (found := held_and_pending(catalog, JOB))[1] == 0:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no commit kept an END back in time"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: the assertion says why
            os.killpg(job.pid, signal.SIGKILL)  # the JVM and Python workers die mid-stream
        job.wait(30)
    return found


def table(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    """The table's rows by id; no id twice (nothing published twice)."""
    rows = catalog.load_table(name).scan().to_arrow().to_pylist()
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), f"{name} holds {len(rows) - len(by_id)} rows twice"
    return by_id


def assert_lake_is_the_bank(catalog: Catalog, bank: Bank) -> None:
    assert table(catalog, "public.accounts") == bank.accounts
    assert table(catalog, "public.audit") == bank.audit
    assert held_and_pending(catalog, JOB) == (0, 0)
    count, bad = split_versions(catalog, ACCOUNTS)
    assert count >= 5
    assert bad == []
    marked, faults = watermark_faults(catalog)
    assert marked >= 10 and faults == []


@pytest.mark.slow
def test_kill_minus_nine_while_ends_wait_for_the_other_partitions(
    catalog: Catalog,
    catalog_dsn: str,
    warehouse: Path,
    kafka: Any,
    spark: SparkSession,
    *,
    tmp_path: Path,
) -> None:
    bank = Bank(new_topics(transaction_partitions=3), marker_rng=random.Random(31))
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    rng = random.Random(21)
    for _ in range(40):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    args = {"dsn": catalog_dsn, "warehouse": warehouse, "bootstrap": kafka.bootstrap_servers}
    config = write_config(tmp_path / "ingest.yaml", bank, **args)

    _, pending = kill_while_ends_wait(catalog, config, tmp_path / "job.log")
    assert pending > 0 and held_and_pending(catalog, JOB)[1] == pending  # the catalog keeps them

    done = subprocess.run(
        command(config), cwd=ROOT, capture_output=True, timeout=900, check=False
    )  # the same checkpoint: Spark replays the unfinished batch
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert_lake_is_the_bank(catalog, bank)

    # the checkpoint is lost: the job resumes from the offsets and book of its last commit
    shutil.rmtree(tmp_path / "checkpoint")
    for _ in range(10):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    run_file_in_process(config, spark, catalog)
    assert_lake_is_the_bank(catalog, bank)
