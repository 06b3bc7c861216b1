"""The ingest job's Prometheus metrics and health (``jobs.httpserve`` serves them).

Two kinds of figures:

* counted as batches commit, from the sink's ``batch_committed`` figures (the sink calls
  :meth:`IngestMetrics.observe_batch`): batches, records, rows per table, dead letters, commit
  latency;
* read at scrape time from what outlives the process (:mod:`ingest.freshness`): lag per
  topic-partition in offsets and seconds, held transactions and the age of the oldest, the
  source watermark's age, seconds since the last commit. A scrape therefore costs one catalog
  query and a few broker requests; a failed read is reported (``..._freshness_up`` 0, and
  ``/healthz`` 503 with the reason), never raised into the HTTP server.

``/healthz`` is 200 while batches commit; 503 when the query failed, when the freshness read
failed, or when no batch committed for longer than ``stale_after_s`` while records wait (an
idle source is healthy however long it stays idle).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from catalog.logs import get_logger
from ingest.freshness import JobFreshness

log = get_logger("lakestream.ingest")

_COMMIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

#: Reads the job's freshness (catalog + brokers); ``None`` while the job has never committed.
FreshnessRead = Callable[[], JobFreshness | None]


@dataclass(frozen=True)
class IngestHealth:
    ok: bool
    detail: Mapping[str, Any]


@dataclass
class _Last:
    """The last freshness read, kept so that /healthz and /metrics tell the same story."""

    found: JobFreshness | None = None
    error: str | None = None
    at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class IngestMetrics:
    def __init__(
        self,
        job: str,
        read: FreshnessRead,
        *,
        stale_after_s: float = 300.0,
        cache_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.job = job
        self.registry = registry or CollectorRegistry()
        self._read = read
        self._stale_after_s = stale_after_s
        self._cache_s = cache_s
        self._clock = clock
        self._started = clock()
        self._failure: str | None = None
        self._last = _Last()
        r = self.registry
        self.batches = Counter("lakestream_ingest_batches", "Batches committed", registry=r)
        self.records = Counter(
            "lakestream_ingest_records", "Kafka records of committed batches", registry=r
        )
        self.rows = Counter(
            "lakestream_ingest_rows", "Rows (changes) committed per table", ["table"], registry=r
        )
        self.dead_letters = Counter(
            "lakestream_ingest_dead_letters", "Records sent to the dead-letter table", registry=r
        )
        self.commit_seconds = Histogram(
            "lakestream_ingest_commit_seconds",
            "Catalog commit latency of a batch",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        r.register(_FreshnessCollector(self))

    # -- fed by the sink and the entry point -----------------------------------------------

    def observe_batch(self, figures: Mapping[str, Any]) -> None:
        """The sink's ``batch_committed`` figures (an observer: must never fail the batch)."""
        try:
            self.batches.inc()
            self.records.inc(int(figures.get("records") or 0))
            self.dead_letters.inc(int(figures.get("dead_letters") or 0))
            for table, counts in (figures.get("tables") or {}).items():
                self.rows.labels(table).inc(int(counts.get("rows") or 0))
            self.commit_seconds.observe(float(figures.get("commit_ms") or 0) / 1000)
        except (TypeError, ValueError, AttributeError) as exc:
            log.warning("metrics_figures_unreadable", error=str(exc))

    def failed(self, reason: str) -> None:
        """The query stopped with a failure: /healthz turns 503 until the process exits."""
        self._failure = reason

    # -- read per scrape -------------------------------------------------------------------

    def freshness(self) -> tuple[JobFreshness | None, str | None]:
        """The job's freshness and the error of reading it, re-read at most every ``cache_s``."""
        last = self._last
        with last.lock:
            now = self._clock()
            if now - last.at >= self._cache_s:
                try:
                    last.found, last.error = self._read(), None
                except Exception as exc:  # a scrape reports a failed read, never raises it
                    last.found, last.error = None, f"{type(exc).__name__}: {exc}"
                last.at = now
            return last.found, last.error

    def health(self) -> IngestHealth:
        if self._failure is not None:
            return IngestHealth(
                False, {"job": self.job, "reason": f"query failed: {self._failure}"}
            )
        found, error = self.freshness()
        if error is not None:
            return IngestHealth(False, {"job": self.job, "reason": f"freshness read: {error}"})
        since = found.since_commit_s(self.now()) if found else self._clock() - self._started
        waiting = found.total_lag if found else None
        detail = {
            "job": self.job,
            "batch_id": found.batch_id if found else None,
            "seconds_since_commit": round(since, 1),
            "lag": waiting,
        }
        if since > self._stale_after_s and (waiting is None or waiting > 0):
            reason = f"no batch committed for {since:.0f}s (threshold {self._stale_after_s:g}s)"
            return IngestHealth(False, {**detail, "reason": reason})
        return IngestHealth(True, detail)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self._clock(), dt.UTC)


class _FreshnessCollector(Collector):
    def __init__(self, metrics: IngestMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        found, error = self._metrics.freshness()
        up = GaugeMetricFamily(
            "lakestream_ingest_freshness_up",
            "1 when the last read of the job's progress and the brokers' offsets succeeded",
        )
        up.add_metric([], 0.0 if error else 1.0)
        yield up
        if found is None:
            return
        yield from _lag_metrics(found)
        yield from _job_metrics(found, self._metrics.now())


def _lag_metrics(found: JobFreshness) -> Iterator[Metric]:
    lag = GaugeMetricFamily(
        "lakestream_ingest_lag_records",
        "Records behind the broker's end offset, per topic-partition",
        labels=["topic", "partition"],
    )
    lag_s = GaugeMetricFamily(
        "lakestream_ingest_lag_seconds",
        "Age of the oldest unread record, per topic-partition (0 when caught up)",
        labels=["topic", "partition"],
    )
    for p in found.lags:
        labels = [p.partition.topic, str(p.partition.partition)]
        lag.add_metric(labels, p.lag)
        if p.lag_s is not None:
            lag_s.add_metric(labels, p.lag_s)
    yield from (lag, lag_s)


def _job_metrics(found: JobFreshness, now: dt.datetime) -> Iterator[Metric]:
    since = GaugeMetricFamily(
        "lakestream_ingest_seconds_since_commit", "Seconds since the job's last batch committed"
    )
    since.add_metric([], found.since_commit_s(now))
    yield since
    age = found.watermark_age_s(now)
    if age is not None:
        mark = GaugeMetricFamily(
            "lakestream_ingest_source_watermark_age_seconds",
            "Now minus the source time up to which the tables hold whole transactions",
        )
        mark.add_metric([], age)
        yield mark
    if found.held is not None:
        held = GaugeMetricFamily(
            "lakestream_ingest_held_transactions", "Source transactions held back, incomplete"
        )
        held.add_metric([], found.held.transactions)
        events = GaugeMetricFamily(
            "lakestream_ingest_held_events", "Change events of the held transactions"
        )
        events.add_metric([], found.held.events)
        oldest = GaugeMetricFamily(
            "lakestream_ingest_held_oldest_age_seconds",
            "How long the oldest held transaction has been held (0 when none is)",
        )
        oldest.add_metric([], found.held.oldest_age_s(now) or 0.0)
        yield from (held, events, oldest)
