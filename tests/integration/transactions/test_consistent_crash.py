"""kill -9 of a consistent job while transactions are held: after a restart the lake equals the
source, every version is still a consistent cut, and nothing held was lost or published twice;
then the checkpoint is lost and the job resumes from the catalog alone (book and held events).

The killed job and its restart are ``lakestream ingest`` processes. The run after the checkpoint
is deleted proves what the job does without it, not what a process does: it runs the job of the
same YAML file in-process, on the session's Spark (a subprocess costs ~15 s more)."""

from __future__ import annotations

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
from ingest.sink.held import held_table_name
from tests.fixtures.ingest_cli import run_file_in_process
from tests.integration.transactions.support import Bank, broken, cuts, new_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
JOB = "bank_crash"
ACCOUNTS = 6


def write_config(path: Path, bank: Bank, *, dsn: str, warehouse: Path, bootstrap: str,
                 **extra: object) -> Path:  # fmt: skip
    config = {
        "job": JOB,
        "catalog": {"dsn": dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"topics": list(bank.topics.all()), "max_offsets_per_trigger": 20},
        "transactions": "consistent",
        "checkpoint": str(path.parent / "checkpoint"),
        "log_level": "WARNING",
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def run_to_end(config: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)],
        cwd=ROOT, capture_output=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]


def held_now(catalog: Catalog) -> int:
    progress = catalog.writer_progress(JOB)
    if progress is None or not progress.job_state:
        return 0
    held = progress.job_state.get("held")
    return int(held["transactions"]) if isinstance(held, dict) else 0


def kill_while_held(catalog: Catalog, config: Path, log: Path) -> None:
    with log.open("wb") as err:
        job = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 300
    try:
        while held_now(catalog) == 0:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no commit held a transaction in time"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # the JVM and Python workers die mid-stream
        job.wait(30)


def table(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in catalog.load_table(name).scan().to_arrow().to_pylist()}


@pytest.mark.slow
def test_kill_minus_nine_while_transactions_are_held(
    catalog: Catalog,
    catalog_dsn: str,
    warehouse: Path,
    kafka: Any,
    spark: SparkSession,
    *,
    tmp_path: Path,
) -> None:
    bank = Bank(new_topics())
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    rng = random.Random(21)
    for _ in range(60):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    args = {"dsn": catalog_dsn, "warehouse": warehouse, "bootstrap": kafka.bootstrap_servers}
    config = write_config(tmp_path / "ingest.yaml", bank, **args)

    kill_while_held(catalog, config, tmp_path / "job.log")
    assert held_now(catalog) > 0  # the catalog holds them, nothing else does

    run_to_end(config)  # the same checkpoint: Spark replays the unfinished batch
    assert table(catalog, "public.accounts") == bank.accounts
    assert table(catalog, "public.audit") == bank.audit
    assert held_now(catalog) == 0
    held = catalog.load_table(held_table_name(JOB)).scan().to_arrow()
    assert held.num_rows == 0

    # the checkpoint is lost: the job resumes from the offsets and book of its last commit
    shutil.rmtree(tmp_path / "checkpoint")
    for _ in range(15):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    run_file_in_process(config, spark, catalog)
    assert table(catalog, "public.accounts") == bank.accounts
    assert table(catalog, "public.audit") == bank.audit
    # every version after the snapshot (not transactional) is a consistent cut
    after_snapshot = [(b, s) for b, s in cuts(catalog) if len(s["public.accounts"]) == ACCOUNTS]
    assert len(after_snapshot) >= 5
    assert [(b, broken(s, ACCOUNTS)) for b, s in after_snapshot if broken(s, ACCOUNTS)] == []
