"""The compactor's settings, table patterns and metrics: pure pieces of the service."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from pydantic import ValidationError

from catalog import (
    CatalogUnavailableError,
    CommitOp,
    OpBytes,
    OutageGuard,
    OutagePolicy,
    UnavailableKind,
)
from compaction.amplification import WriteAmplification
from compaction.coordinator import matches
from compaction.metrics import ServiceMetrics
from compaction.queue import TaskResult
from jobs.compactor_settings import CompactorSettings


def test_settings_come_from_the_environment_and_flags_win(monkeypatch):
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_WORKERS", "5")
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_TABLES", "Shop.*, logs.events")
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_LEASE_SECONDS", "12")
    from_env = CompactorSettings()
    assert from_env.workers == 5 and from_env.patterns() == ["shop.*", "logs.events"]
    assert from_env.queue().lease == dt.timedelta(seconds=12)
    assert CompactorSettings(workers=0).workers == 0  # a flag overrides the environment


@pytest.mark.parametrize(
    ("field", "value"),
    [("workers", -1), ("poll_seconds", 0), ("tables", " , "), ("metrics_port", 70000)],
)
def test_bad_settings_are_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        CompactorSettings(**{field: value})


@pytest.mark.parametrize(
    ("name", "patterns", "served"),
    [
        ("shop.orders", ["*"], True),
        ("shop.orders", ["shop.*"], True),
        ("shop.orders", ["logs.*", "shop.ord?rs"], True),
        ("shop.orders", ["shop.order"], False),
        ("shopx.orders", ["shop.*"], False),
        ("shop.orders", ["SHOP.*"], True),
    ],
)
def test_tables_are_served_by_fnmatch_on_the_qualified_name(name, patterns, served):
    assert matches(name, patterns) is served


def result(outcome: str, expiries: int = 0, kind: str = "merge-bucket") -> TaskResult:
    return TaskResult(
        task_id=uuid.uuid4(),
        table="shop.orders",
        table_id=uuid.uuid4(),
        partition_desc="bucket=0000",
        kind=kind,
        outcome=outcome,
        finished_at=dt.datetime.now(dt.UTC),
        attempts=1 + expiries,
        lease_expiries=expiries,
        rows_in=100,
        rows_out=60,
        bytes_in=1000,
        bytes_out=400,
        duration_s=1.5,
        error=None,
    )


def test_finished_tasks_feed_the_counters():
    metrics = ServiceMetrics()
    metrics.observe_finished([result("committed"), result("committed", 2), result("replan")])
    metrics.observe_queue({"queued": 4, "running": 1})
    text = metrics.exposition().decode()
    assert 'lakestream_compactor_task_outcomes_total{outcome="committed"} 2.0' in text
    assert 'lakestream_compactor_task_outcomes_total{outcome="replan"} 1.0' in text
    assert "lakestream_compactor_lease_expiries_total 2.0" in text
    assert 'lakestream_compactor_rows_total{direction="written"} 180.0' in text
    assert 'lakestream_compactor_task_duration_seconds_count{kind="merge-bucket"} 3.0' in text
    assert 'lakestream_compactor_queue_depth{state="queued"} 4.0' in text


def test_bytes_written_are_counted_per_table_and_kind():
    metrics = ServiceMetrics()
    metrics.observe_finished([result("committed"), result("committed", kind="resolve")] * 2)
    text = metrics.exposition().decode()
    for kind in ("merge-bucket", "resolve"):
        assert (
            f'lakestream_compaction_bytes_written_total{{kind="{kind}",table="shop.orders"}} 800.0'
            in text
        )
    assert 'lakestream_compactor_task_duration_seconds_count{kind="resolve"} 2.0' in text


def test_write_amplification_is_a_gauge_per_table_absent_without_ingest():
    metrics = ServiceMetrics()
    metrics.observe_amplification({"shop.orders": 2.5, "shop.quiet": None})
    text = metrics.exposition().decode()
    assert 'lakestream_write_amplification{table="shop.orders"} 2.5' in text
    assert 'table="shop.quiet"' not in text
    metrics.observe_amplification({"shop.quiet": 1.0})  # a table no longer served goes away
    text = metrics.exposition().decode()
    assert 'table="shop.orders"' not in text
    assert 'lakestream_write_amplification{table="shop.quiet"} 1.0' in text


def test_write_amplification_divides_compaction_writes_by_ingest_adds():
    by_op = {
        CommitOp.APPEND: OpBytes(versions=2, bytes_added=300, bytes_written=300),
        CommitOp.MERGE: OpBytes(versions=3, bytes_added=700, bytes_written=700),
        CommitOp.COMPACTION: OpBytes(versions=4, bytes_added=9000, bytes_written=2500),
        CommitOp.UPDATE: OpBytes(versions=1, bytes_added=50, bytes_written=50),
    }
    found = WriteAmplification.of(by_op)
    assert (found.compaction_bytes_written, found.ingest_bytes_added) == (2500, 1000)
    assert found.ratio == 2.5
    assert WriteAmplification.of({CommitOp.COMPACTION: by_op[CommitOp.COMPACTION]}).ratio is None


def test_the_outage_budget_comes_from_the_environment(monkeypatch):
    assert CompactorSettings().outage().budget == 300.0
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_OUTAGE_BUDGET", "45")
    assert CompactorSettings().outage().budget == 45.0
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_OUTAGE_BUDGET", "-1")
    with pytest.raises(ValidationError, match="outage_budget"):
        CompactorSettings()


def test_the_catalog_availability_is_exported_from_the_guard():
    clock = {"now": 100.0}
    guard = OutageGuard(
        "catalog", OutagePolicy(budget=60), clock=lambda: clock["now"], sleep=lambda s: None
    )
    metrics = ServiceMetrics()
    metrics.watch_catalog(guard.stats)
    assert "lakestream_compactor_catalog_seconds_since_success NaN" in metrics.exposition().decode()

    failures = iter(
        [UnavailableKind.CONNECTION, UnavailableKind.CONNECTION, UnavailableKind.RESTARTING]
    )

    def flaky() -> int:
        kind = next(failures, None)
        if kind is None:
            return 1
        clock["now"] += 2.0
        raise CatalogUnavailableError("catalog connection failed: refused", kind=kind)

    guard.call("heads", flaky)
    clock["now"] += 7.5
    text = metrics.exposition().decode()
    assert "lakestream_compactor_catalog_seconds_since_success 7.5" in text
    assert 'lakestream_compactor_catalog_retries_total{kind="connection"} 2.0' in text
    assert 'lakestream_compactor_catalog_retries_total{kind="restarting"} 1.0' in text
    assert "lakestream_compactor_catalog_outages_total 1.0" in text
    assert "lakestream_compactor_catalog_outage_seconds 0.0" in text
