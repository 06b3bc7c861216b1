"""The ingest job's /metrics figures and /healthz verdicts (ingest.metrics), on a fake clock."""

from __future__ import annotations

import datetime as dt

from prometheus_client.parser import text_string_to_metric_families

from ingest.freshness import Held, JobFreshness, PartitionLag
from ingest.kafka.offsets import PartitionId
from ingest.metrics import IngestMetrics

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def fresh(since_commit_s: float, lag: int) -> JobFreshness:
    committed = dt.datetime.fromtimestamp(T0 - since_commit_s, dt.UTC)
    return JobFreshness(
        job="bank",
        batch_id=7,
        committed_at=committed,
        watermark=None,
        held=Held(1, 3, committed - dt.timedelta(seconds=20), "tx-1"),
        lags=[PartitionLag(PartitionId("orders", 0), 10, 10 + lag, lag, 4.0 if lag else 0.0)],
    )


def samples(metrics: IngestMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_batch_figures_are_counted():
    metrics = IngestMetrics("bank", lambda: fresh(1, 0), clock=Clock())
    figures = {
        "records": 120,
        "dead_letters": 2,
        "commit_ms": 40,
        "tables": {"shop.orders": {"rows": 100}, "shop.audit": {"rows": 18}},
    }
    metrics.observe_batch(figures)
    metrics.observe_batch(figures)
    got = samples(metrics)
    assert got[("lakestream_ingest_batches_total", ())] == 2
    assert got[("lakestream_ingest_records_total", ())] == 240
    assert got[("lakestream_ingest_rows_total", (("table", "shop.orders"),))] == 200
    assert got[("lakestream_ingest_dead_letters_total", ())] == 4
    assert got[("lakestream_ingest_commit_seconds_count", ())] == 2
    assert got[("lakestream_ingest_commit_seconds_bucket", (("le", "0.05"),))] == 2


def test_lag_and_held_figures_are_read_at_scrape_time():
    got = samples(IngestMetrics("bank", lambda: fresh(5, 30), clock=Clock()))
    part = (("partition", "0"), ("topic", "orders"))
    assert got[("lakestream_ingest_lag_records", part)] == 30
    assert got[("lakestream_ingest_lag_seconds", part)] == 4.0
    assert got[("lakestream_ingest_held_transactions", ())] == 1
    assert got[("lakestream_ingest_held_oldest_age_seconds", ())] == 25.0
    assert got[("lakestream_ingest_seconds_since_commit", ())] == 5.0
    assert got[("lakestream_ingest_freshness_up", ())] == 1


def test_healthy_while_batches_commit_and_while_idle():
    assert IngestMetrics("bank", lambda: fresh(10, 50), clock=Clock()).health().ok
    idle = IngestMetrics("bank", lambda: fresh(3600, 0), clock=Clock()).health()
    assert idle.ok and idle.detail["lag"] == 0


def test_unhealthy_when_records_wait_and_nothing_commits():
    state = IngestMetrics("bank", lambda: fresh(301, 5), clock=Clock()).health()
    assert not state.ok
    assert state.detail["reason"] == "no batch committed for 301s (threshold 300s)"


def test_unhealthy_when_the_query_failed_or_the_read_fails():
    metrics = IngestMetrics("bank", lambda: fresh(1, 0), clock=Clock())
    metrics.failed("SchemaChangeRefused: shop.orders")
    assert metrics.health().detail["reason"] == "query failed: SchemaChangeRefused: shop.orders"

    def broken() -> JobFreshness:
        raise OSError("catalog gone")

    down = IngestMetrics("bank", broken, clock=Clock())
    assert down.health().detail["reason"] == "freshness read: OSError: catalog gone"
    assert samples(down)[("lakestream_ingest_freshness_up", ())] == 0


def test_a_job_that_never_committed_turns_unhealthy_after_the_threshold():
    clock = Clock()
    metrics = IngestMetrics("bank", lambda: None, clock=clock, cache_s=0)
    assert metrics.health().ok
    clock.now += 301
    assert not metrics.health().ok
