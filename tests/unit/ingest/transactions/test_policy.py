"""Which jobs are transaction-consistent: ``auto`` decided by the subscription."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingest.config import IngestJobConfig
from ingest.errors import IngestError
from ingest.formats import SourceFormat
from ingest.job import source_options
from ingest.kafka.options import parse_options
from ingest.transactions import OnTimeout, TransactionConfigError, TransactionMode, resolve_mode

AUTO, CONSISTENT, EVENTUAL = (
    TransactionMode.AUTO,
    TransactionMode.CONSISTENT,
    TransactionMode.EVENTUAL,
)


@pytest.mark.parametrize(
    ("topics", "pattern", "expected"),
    [
        (["dbserver1.public.orders", "dbserver1.transaction"], None, CONSISTENT),
        (["dbserver1.public.orders"], None, EVENTUAL),
        (["dbserver1.public.transactions"], None, EVENTUAL),
        ([], r"dbserver1\..*", CONSISTENT),
        ([], r".*", CONSISTENT),
        ([], r"dbserver1\.public\..*", EVENTUAL),
        ([], r"shop\.(public\..*|transaction)", CONSISTENT),
    ],
)
def test_auto_is_consistent_when_the_subscription_includes_a_transaction_topic(
    topics: list[str], pattern: str | None, expected: TransactionMode
) -> None:
    assert resolve_mode(AUTO, topics, pattern) is expected


def test_a_pattern_is_also_judged_by_the_topics_the_broker_has() -> None:
    pattern = r"(a|b)\..*"

    assert resolve_mode(AUTO, [], pattern) is EVENTUAL
    assert resolve_mode(AUTO, [], pattern, known_topics=["b.transaction", "b.x.y"]) is CONSISTENT


def test_an_explicit_mode_is_kept() -> None:
    assert resolve_mode(EVENTUAL, ["s.transaction"], None) is EVENTUAL
    assert resolve_mode(CONSISTENT, ["s.public.t"], None) is CONSISTENT


def _config(tmp_path: Path, **kw: Any) -> IngestJobConfig:
    return IngestJobConfig(
        job="j", bootstrap_servers="b:9092", checkpoint=tmp_path, dead_letter_table="d.l", **kw
    )


def test_the_job_config_resolves_auto_from_its_topics(tmp_path: Path) -> None:
    with_txn = _config(tmp_path, topics=("s.public.t", "s.transaction"))

    assert with_txn.transaction_mode is CONSISTENT
    assert _config(tmp_path, topics=("s.public.t",)).transaction_mode is EVENTUAL
    json = _config(tmp_path, topics=("s.transaction",), source_format=SourceFormat.JSON)
    assert json.transaction_mode is EVENTUAL
    assert with_txn.max_hold_s == 300 and with_txn.on_timeout is OnTimeout.WAIT


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_hold_s": 0.0}, "max_hold_s must be positive"),
        (
            {"transactions": CONSISTENT, "source_format": SourceFormat.JSON},
            "needs Debezium topics",
        ),
    ],
)
def test_a_job_config_that_cannot_work_is_refused(
    tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(TransactionConfigError, match=message) as caught:
        _config(tmp_path, **kw)
    assert isinstance(caught.value, IngestError)


def test_a_consistent_job_gives_the_transaction_topic_no_task_of_its_own(tmp_path: Path) -> None:
    """Its driver reads that topic; the tasks skip it (``ingest.job.source_options``)."""
    topics = ("s.public.t", "s.transaction")
    consistent = parse_options(source_options(_config(tmp_path, topics=topics), "earliest"))
    eventual = _config(tmp_path, topics=topics, transactions=EVENTUAL)

    assert consistent.shares_task("s.transaction")
    assert not consistent.shares_task("s.public.t")
    assert not parse_options(source_options(eventual, "earliest")).shares_task("s.transaction")
