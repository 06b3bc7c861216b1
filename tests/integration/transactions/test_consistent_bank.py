"""``transactions: consistent`` against a real broker, Spark and catalog: transfers between
accounts, each one source transaction over two tables, split across partitions and batches.

At every lake version the bank's invariants hold in consistent mode; the same stream ingested
with ``eventual`` breaks them at some version (so the consistent test can fail)."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from catalog import Catalog
from catalog.logs import EVENT_ATTRIBUTE
from compaction.policy import CompactionPolicy
from ingest.job import IngestJobConfig, run_ingest
from ingest.sink.held import held_table_name
from ingest.transactions import OnTimeout, TransactionMode
from tests.fixtures.cli import lakestream
from tests.integration.transactions.support import (
    Bank,
    broken,
    cuts,
    new_topics,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ACCOUNTS = 6
TABLES = ("public.accounts", "public.audit")


def config(kafka: Any, bank: Bank, tmp_path: Path, job: str, **extra: Any) -> IngestJobConfig:
    return IngestJobConfig(
        job=job,
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / f"checkpoint-{job}",
        dead_letter_table="lakestream.dead_letters",
        topics=bank.topics.all(),
        hash_buckets=2,
        max_offsets_per_trigger=extra.pop("max_offsets_per_trigger", 13),
        **extra,
    )


def opened_bank(kafka: Any) -> Bank:
    bank = Bank(new_topics())
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(ACCOUNTS)
    bank.send(kafka.bootstrap_servers)
    return bank


def rows(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in catalog.load_table(name).scan().to_arrow().to_pylist()}


def last_batch(catalog: Catalog) -> int:
    return max(b for b, _ in cuts(catalog))


@pytest.mark.slow
def test_every_version_is_a_consistent_cut(catalog, kafka, spark, tmp_path, caplog):
    bank = opened_bank(kafka)
    job = config(kafka, bank, tmp_path, "bank")
    run_ingest(job, spark, catalog)  # the snapshot: no transactions
    snapshot_done = last_batch(catalog)
    rng = random.Random(13)
    for _ in range(40):
        bank.transfer(rng)
    sent = bank.send(kafka.bootstrap_servers)

    with caplog.at_level(logging.DEBUG, logger="lakestream.ingest"):
        run = run_ingest(job, spark, catalog)

    assert run.batches_committed >= 5  # transfers straddled many batches
    lines = [getattr(r, EVENT_ATTRIBUTE) for r in caplog.records if hasattr(r, EVENT_ATTRIBUTE)]
    batches = [line for line in lines if line["event"] == "batch_transactions"]
    timings = [line for line in lines if line["event"] == "batch_transactions_timings"]
    assert len(timings) == len(batches)
    # events held by one batch were published or held again by a task of the next
    assert any(line["dissolved"] > 0 for line in batches)
    # the restarted job's first batch found its markers read while the query started
    assert batches[0]["markers"] > 0 and batches[0]["markers_read_ahead"] > 0
    # each batch after the first took the held files from the commit before (the restarted
    # job's first asked the catalog): the invariants below hold with them
    assert [line["held_files_from"] for line in timings] == ["catalog"] + ["last_commit"] * (
        len(timings) - 1
    )
    # the first batch's read-ahead began at once; each one after it waited as long as the
    # batch before took to start its first task (from the tasks' reports), a second at most
    assert timings[0]["read_ahead_after_ms"] == 0
    assert all(0 < line["read_ahead_after_ms"] <= 1000 for line in timings[1:])
    # the driver reads the transaction topic for the tasks, and counts it as they would
    assert run.records_read == sent
    checked = [(b, broken(s, ACCOUNTS)) for b, s in cuts(catalog) if b > snapshot_done]
    assert len(checked) >= 5
    assert [c for c in checked if c[1] is not None] == []
    assert rows(catalog, "public.accounts") == bank.accounts
    assert rows(catalog, "public.audit") == bank.audit
    held = catalog.load_table(held_table_name("bank"))
    assert held.scan().to_arrow().num_rows == 0
    # the compactor leaves it alone: the sink's own commits rewrite its files
    assert CompactionPolicy.from_properties(held.meta.properties).enabled is False
    progress = catalog.writer_progress("bank")
    assert progress is not None and progress.job_state is not None
    assert progress.job_state["held"] == {
        "transactions": 0,
        "events": 0,
        "oldest_first_seen": None,
        "blocking": None,
    }
    history = catalog.load_table("public.accounts").history(limit=1)
    point = history[0].source_watermark
    assert point is not None and point.transaction == str(bank.txid)  # the last transfer


@pytest.mark.slow
def test_eventual_mode_shows_transfers_cut_in_half(catalog, kafka, spark, tmp_path):
    bank = opened_bank(kafka)
    job = config(kafka, bank, tmp_path, "bank_eventual", transactions=TransactionMode.EVENTUAL)
    run_ingest(job, spark, catalog)
    snapshot_done = last_batch(catalog)
    rng = random.Random(13)
    for _ in range(40):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)

    run_ingest(job, spark, catalog)

    found = [broken(s, ACCOUNTS) for b, s in cuts(catalog) if b > snapshot_done]
    assert any(reason is not None for reason in found)
    assert rows(catalog, "public.accounts") == bank.accounts  # eventually equal


def stalled_bank(kafka: Any) -> tuple[Bank, str]:
    """Three transfers; the audit event of the second is stalled (its partition lags)."""
    bank = opened_bank(kafka)
    rng = random.Random(5)
    bank.transfer(rng)
    stuck = bank.transfer(rng, stall_audit=True)
    bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    return bank, stuck


def test_on_timeout_wait_keeps_an_incomplete_transaction_and_those_after_it_held(
    catalog, catalog_dsn, kafka, spark, tmp_path, *, caplog
):
    bank, stuck = stalled_bank(kafka)
    waiting = config(
        kafka, bank, tmp_path, "bank_wait", max_hold_s=0.001, on_timeout=OnTimeout.WAIT,
        max_offsets_per_trigger=1000,
    )  # fmt: skip
    run_ingest(waiting, spark, catalog)
    state = catalog.writer_progress("bank_wait")
    assert state is not None and state.job_state is not None
    assert state.job_state["held"]["blocking"] == stuck
    assert state.job_state["held"]["transactions"] == 2  # the stuck one and the one after it
    assert len(rows(catalog, "public.audit")) == 1  # the first transfer only
    assert broken({t: list(rows(catalog, t).values()) for t in TABLES}, ACCOUNTS) is None
    held = held_table_name("bank_wait")
    assert (
        catalog.load_table(held).scan().to_arrow().num_rows == 5
    )  # the stalled one's 2 events, the next one's 3
    listed = lakestream("tables", "list", dsn=catalog_dsn).stdout.split()
    assert held not in listed and "public.accounts" in listed  # the held table is the job's own
    assert held in lakestream("tables", "list", "--all", dsn=catalog_dsn).stdout.split()

    bank.release_stalled()
    bank.send(kafka.bootstrap_servers)
    with caplog.at_level(logging.INFO, logger="lakestream.ingest"):
        run_ingest(waiting, spark, catalog)
    assert rows(catalog, "public.accounts") == bank.accounts
    assert rows(catalog, "public.audit") == bank.audit
    # the restarted job's first batch started from the book of the last commit (the held
    # ones), and published what that book held
    first = next(
        line
        for r in caplog.records
        if (line := getattr(r, EVENT_ATTRIBUTE, None)) and line["event"] == "batch_transactions"
    )
    assert first["dissolved"] == 5


@pytest.mark.slow
def test_on_timeout_publish_publishes_it_incomplete_and_says_so(catalog, kafka, spark, tmp_path):
    bank, stuck = stalled_bank(kafka)
    # the first run holds it: its max_hold is longer than any run (the END is first seen when
    # read ahead, as the query starts, and Spark's first batch may take seconds to begin)
    patient = config(
        kafka, bank, tmp_path, "bank_publish", max_hold_s=3600, on_timeout=OnTimeout.PUBLISH,
        max_offsets_per_trigger=1000,
    )  # fmt: skip
    run_ingest(patient, spark, catalog)
    assert len(rows(catalog, "public.audit")) == 1  # held behind the stalled one: not timed out

    publishing = replace(patient, max_hold_s=0.5)
    time.sleep(0.6)  # past max_hold; the next batch (any new event) publishes it as it is
    bank.transfer(random.Random(9))
    bank.send(kafka.bootstrap_servers)
    run_ingest(publishing, spark, catalog)
    assert len(rows(catalog, "public.audit")) == 3  # all but the stalled audit row
    newest = catalog.load_table("public.accounts").history(limit=1)[0]
    assert stuck in newest.watermark_exceptions

    bank.release_stalled()  # the late event is published at once, and named again
    bank.send(kafka.bootstrap_servers)
    run_ingest(publishing, spark, catalog)
    assert rows(catalog, "public.audit") == bank.audit
    assert rows(catalog, "public.accounts") == bank.accounts
    newest = catalog.load_table("public.audit").history(limit=1)[0]
    assert stuck in newest.watermark_exceptions
