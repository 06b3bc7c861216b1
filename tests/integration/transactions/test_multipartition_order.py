"""``transactions: consistent`` over a transaction topic of 3 partitions (issue 46).

Debezium keys its BEGIN and END markers by transaction id, so a producer spreads them over the
partitions of the transaction topic: each partition is in commit order, the partitions together
are not. The bank of :mod:`support` puts each marker on a random partition; batches of a few
records cut the partitions at different points of commit order. Every lake version is still a
transaction-consistent cut that publishes a prefix of commit order (audit rows ``1..n``), and
the source watermark never moves back nor names an exception. A partition whose markers come
late holds back exactly what commits after the last END read from it. END ids without a commit
position (MySQL GTIDs) cannot be ordered over partitions: the job refuses them, at start and in
the batch that reads the first one, committing nothing.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from pyspark.sql import SparkSession

from catalog import Catalog, TableNotFoundError
from ingest.job import IngestJobConfig, run_ingest
from ingest.transactions import TransactionMode, UnorderedTransactions
from tests.fixtures.jsonlog import split_log
from tests.integration.transactions.support import (
    ACCOUNTS as ACCOUNTS_TABLE,
)
from tests.integration.transactions.support import (
    AUDIT,
    START_BALANCE,
    Bank,
    held_and_pending,
    new_topics,
    split_versions,
    watermark_faults,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[3]
ACCOUNTS = 6
#: A MySQL server uuid: its transaction ids (GTIDs ``<uuid>:<n>``) carry no commit position.
SERVER_UUID = "3E11FA47-71CA-11E1-9E33-C80AA9429562"


class GtidBank(Bank):
    """The bank with transaction ids as MySQL's connector gives them: ``<server uuid>:<n>``,
    the same in every record of a transaction, and no commit position in them."""

    def transaction_id(self, txid: str) -> str:
        return f"{SERVER_UUID}:{txid}"


def three_partition_bank(kafka: Any, seed: int, kind: type[Bank] = Bank) -> Bank:
    """A bank whose transaction topic has 3 partitions, each marker on a random one, with its
    accounts opened (the snapshot, not sent yet)."""
    bank = kind(new_topics(transaction_partitions=3), marker_rng=random.Random(seed))
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    return bank


def config(kafka: Any, bank: Bank, tmp_path: Path, job: str, **extra: Any) -> IngestJobConfig:
    settings: dict[str, Any] = {
        "max_offsets_per_trigger": 13,
        "partition_idle_s": 0.2,
        "transactions": TransactionMode.CONSISTENT,
        **extra,
    }
    return IngestJobConfig(
        job=job,
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / f"checkpoint-{job}",
        dead_letter_table="lakestream.dead_letters",
        topics=bank.topics.all(),
        hash_buckets=2,
        **settings,
    )


def rows(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in catalog.load_table(name).scan().to_arrow().to_pylist()}


def audit_ids(catalog: Catalog) -> list[int]:
    if not catalog.table_exists(AUDIT):
        return []
    return sorted(rows(catalog, AUDIT))


@pytest.mark.slow
def test_ends_spread_over_three_partitions_are_published_in_commit_order(
    catalog: Catalog, kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    bank = three_partition_bank(kafka, seed=46)
    rng = random.Random(17)
    for _ in range(30):
        bank.transfer(rng)
    homes = [partition for _, partition in bank.ends]
    assert sorted(set(homes)) == [0, 1, 2]  # every partition holds ENDs, in uneven runs
    sent = bank.send(kafka.bootstrap_servers)

    run = run_ingest(config(kafka, bank, tmp_path, "spread"), spark, catalog)

    assert run.records_read == sent
    count, bad = split_versions(catalog, ACCOUNTS)
    assert count >= 6  # batches cut the transfers and the partitions everywhere
    assert bad == []
    assert rows(catalog, ACCOUNTS_TABLE) == bank.accounts
    assert rows(catalog, AUDIT) == bank.audit
    marked, faults = watermark_faults(catalog)
    assert marked >= 12 and faults == []  # both tables' versions
    progress = catalog.writer_progress("spread")
    assert progress is not None and progress.source_watermark is not None
    assert progress.source_watermark.batch.transaction == str(bank.txid)  # the last transfer
    assert held_and_pending(catalog, "spread") == (0, 0)


def last_end_sent(bank: Bank, partition: int) -> int:
    """The number in commit order (its audit id) of the last transfer whose END marker was sent
    to ``partition`` of the transaction topic (0: none yet)."""
    kept = [
        value
        for _, value in bank.out.get((bank.topics.transaction, partition), [])
        if value is not None and orjson.loads(value)["status"] == "END"
    ]
    numbers = [n for n, (_, home) in enumerate(bank.ends, start=1) if home == partition]
    sent = numbers[: len(numbers) - len(kept)]
    return sent[-1] if sent else 0


@dataclass
class SendLate:
    """An observer of the job's commits: after the run's first commit, the markers the bank
    kept back are sent - the lagging partition's, after the job read past the others' ENDs
    and before it read its own to their end (``read_then``: how far it had)."""

    bank: Bank
    catalog: Catalog
    job: str
    late: tuple[str, int]
    bootstrap: str
    read_then: int | None = None

    def __call__(self, figures: Mapping[str, Any]) -> None:
        if self.read_then is not None:
            return
        progress = self.catalog.writer_progress(self.job)
        assert progress is not None
        topic, partition = self.late
        offsets = {str(p): int(o) for p, o in progress.source_offsets[topic].items()}
        self.read_then = offsets[str(partition)]
        self.bank.send(self.bootstrap)


@pytest.mark.slow
def test_a_lagging_partition_holds_back_what_commits_after_its_last_end(
    catalog: Catalog, kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    bank = three_partition_bank(kafka, seed=8)
    job = config(kafka, bank, tmp_path, "lagging")
    rng = random.Random(29)
    for lagging in (2, 0):  # one partition lags in each of two runs
        late = (bank.topics.transaction, lagging)
        for _ in range(10):
            bank.transfer(rng)
        bank.send(kafka.bootstrap_servers)
        for _ in range(8):
            bank.transfer(rng)
        bank.send(kafka.bootstrap_servers, keep={late})
        assert bank.out.get(late), "the lagging partition has markers to send late"
        reach = {p: last_end_sent(bank, p) for p in range(3)}
        assert min(reach, key=reach.__getitem__) == lagging  # it, not another, holds back most
        on_time = bank.produced[late]
        send_late = SendLate(bank, catalog, "lagging", late, kafka.bootstrap_servers)

        run = run_ingest(job, spark, catalog, observer=send_late)

        assert run.batches_committed >= 4
        assert send_late.read_then is not None and send_late.read_then < on_time  # not to its end
        # every transfer up to the last END read from the lagging partition, nothing after it
        assert audit_ids(catalog) == list(range(1, reach[lagging] + 1))
        assert reach[lagging] >= 3

    run_ingest(job, spark, catalog)  # the last markers are there: everything is published

    assert rows(catalog, ACCOUNTS_TABLE) == bank.accounts
    assert rows(catalog, AUDIT) == bank.audit
    count, bad = split_versions(catalog, ACCOUNTS)
    assert count >= 6
    assert bad == []
    marked, faults = watermark_faults(catalog)
    assert marked >= 12 and faults == []


# -- END markers without a commit position: refused ----------------------------------------


def refused_config(path: Path, bank: Bank, *, dsn: str, warehouse: Path, bootstrap: str) -> Path:
    config = {
        "job": "gtid",
        "catalog": {"dsn": dsn, "warehouse": str(warehouse)},
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"topics": list(bank.topics.all()), "max_offsets_per_trigger": 13},
        "transactions": {"mode": "consistent", "partition_idle_s": 0.2},
        "checkpoint": str(path.parent / "checkpoint"),
        "log_level": "WARNING",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_ids_without_a_commit_position_are_refused_when_the_job_starts(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, kafka: Any, tmp_path: Path
) -> None:
    bank = three_partition_bank(kafka, seed=3, kind=GtidBank)
    rng = random.Random(3)
    for _ in range(8):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    args = {"dsn": catalog_dsn, "warehouse": warehouse, "bootstrap": kafka.bootstrap_servers}
    path = refused_config(tmp_path / "ingest.yaml", bank, **args)

    done = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip

    assert done.returncode == 2, done.stderr[-3000:]
    # one line says why, the job's last: its ingest_failed event
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    events, _ = split_log(done.stderr)
    failed = [e for e in events if e["event"] == "ingest_failed"]
    assert len(failed) == 1 and json.loads(lines[-1]) == failed[0], done.stderr[-3000:]
    assert failed[0]["kind"] == "UnorderedTransactions"
    why = failed[0]["error"]
    assert f"transaction topic {bank.topics.transaction} has 3 partitions" in why
    assert "commit position" in why and "transactions: eventual" in why
    assert "Traceback" not in done.stderr and "\tat " not in done.stderr
    assert catalog.writer_progress("gtid") is None
    assert not catalog.table_exists(ACCOUNTS_TABLE) and not catalog.table_exists(AUDIT)


@pytest.mark.slow
def test_a_batch_refuses_the_first_end_without_a_commit_position_and_commits_nothing(
    catalog: Catalog, kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    bank = three_partition_bank(kafka, seed=4, kind=GtidBank)
    bank.send(kafka.bootstrap_servers)  # the snapshot: the transaction topic is empty
    rng = random.Random(4)
    for _ in range(6):
        bank.transfer(rng)
    after: list[int] = []

    def send_transfers(_: Mapping[str, Any]) -> None:
        """After the first commit (so after the start's check): the transfers arrive."""
        if not after:
            after.append(bank.send(kafka.bootstrap_servers))

    job = config(
        kafka, bank, tmp_path, "gtid_batch", trigger_seconds=0.2, max_offsets_per_trigger=None
    )
    stop = threading.Event()
    deadline = threading.Timer(60, stop.set)  # no refusal: the run stops, and the test fails
    deadline.start()
    try:
        with pytest.raises(UnorderedTransactions) as refused:
            run_ingest(job, spark, catalog, stop, observer=send_transfers)
    finally:
        deadline.cancel()

    assert after == [30]  # the snapshot's batch committed, then the transfers came
    assert refused.value.topic == bank.topics.transaction
    assert refused.value.partitions == 3
    assert refused.value.txn is not None and refused.value.txn.startswith(SERVER_UUID)
    assert "3 partitions" in str(refused.value)
    progress = catalog.writer_progress("gtid_batch")
    assert progress is not None and progress.batch_id == 0  # the refusing batch: nothing
    history = catalog.load_table(ACCOUNTS_TABLE).history(limit=100)
    assert [v.batch_id for v in history] == [0]
    assert rows(catalog, ACCOUNTS_TABLE) == {
        i: {"id": i, "balance": START_BALANCE, "moves": 0} for i in range(1, ACCOUNTS + 1)
    }
    with pytest.raises(TableNotFoundError):
        catalog.load_table(AUDIT)
