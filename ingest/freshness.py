"""How fresh a job's tables are: its last commit (from the catalog) against the brokers.

``lakestream status`` and the ingest job's ``/metrics`` both show these figures; they come from
what any process can read, never from the job's memory, so the status of a stopped or crashed
job is as right as that of a running one:

* the writer's progress in the catalog: its last batch and when it committed, the offsets it
  committed (the next offset to read per topic-partition), the source watermark, and the held
  transactions (``job_state["held"]``, written by the sink in ``transactions: consistent`` mode);
* the brokers' end offsets, so lag in offsets = end - committed; lag in seconds = now - the
  timestamp of the next unread record (fetched only for partitions that lag: one small read).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from catalog import Catalog, SourceWatermark, WriterProgress
from ingest.kafka.brokerview import BrokerView, consumer_config
from ingest.kafka.offsets import PartitionId, from_json
from ingest.kafka.options import Subscription
from ingest.kafka.outage import BrokerOutagePolicy

#: Broker questions of a status or a scrape wait briefly: a stale figure beats a hung scrape.
PROBE_POLICY = BrokerOutagePolicy(budget=5.0, base_delay=0.2, max_delay=1.0, call_timeout=2.0)


@dataclass(frozen=True)
class PartitionLag:
    partition: PartitionId
    committed: int | None
    """The next offset the job will read (``None``: the job never committed one)."""
    end: int
    """The broker's end offset (high watermark): the offset the next record will get."""
    lag: int
    lag_s: float | None = None
    """Age of the oldest unread record (``None``: not asked, or it could not be read)."""


@dataclass(frozen=True)
class Held:
    """What the job holds back in ``transactions: consistent`` mode (its last commit's view)."""

    transactions: int
    events: int
    oldest_first_seen: dt.datetime | None
    blocking: str | None

    @classmethod
    def from_job_state(cls, state: Mapping[str, object] | None) -> Held | None:
        held = (state or {}).get("held")
        if not isinstance(held, Mapping):
            return None
        first = held.get("oldest_first_seen")
        return cls(
            transactions=int(str(held.get("transactions") or 0)),
            events=int(str(held.get("events") or 0)),
            oldest_first_seen=dt.datetime.fromisoformat(first) if isinstance(first, str) else None,
            blocking=str(held["blocking"]) if held.get("blocking") else None,
        )

    def oldest_age_s(self, now: dt.datetime) -> float | None:
        if self.oldest_first_seen is None:
            return None
        return max(0.0, (now - _aware(self.oldest_first_seen)).total_seconds())


@dataclass(frozen=True)
class JobFreshness:
    job: str
    batch_id: int
    committed_at: dt.datetime
    watermark: SourceWatermark | None
    held: Held | None
    lags: list[PartitionLag] = field(default_factory=list)

    def since_commit_s(self, now: dt.datetime) -> float:
        return max(0.0, (now - _aware(self.committed_at)).total_seconds())

    def watermark_age_s(self, now: dt.datetime) -> float | None:
        if self.watermark is None or self.watermark.batch.source_time is None:
            return None
        return max(0.0, (now - _aware(self.watermark.batch.source_time)).total_seconds())

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.lags)


def partition_lags(
    committed: Mapping[PartitionId, int],
    ends: Mapping[PartitionId, tuple[int, int]],
    next_times_ms: Mapping[PartitionId, int] | None = None,
    now_ms: int | None = None,
) -> list[PartitionLag]:
    """Per partition the broker knows (``ends``: earliest and end offsets), how far the job is
    behind. A partition the job never committed is behind from its earliest offset; an offset
    beyond the end (the topic was recreated) counts as no lag rather than a negative one."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    found = []
    for pid in sorted(ends):
        low, end = ends[pid]
        done = committed.get(pid)
        lag = max(0, end - (low if done is None else max(done, low)))
        lag_s = None
        if lag == 0:
            lag_s = 0.0
        elif next_times_ms and pid in next_times_ms:
            lag_s = max(0.0, (now_ms - next_times_ms[pid]) / 1000)
        found.append(PartitionLag(pid, done, end, lag, lag_s))
    return found


def freshness(
    job: str, progress: WriterProgress, lags: Iterable[PartitionLag] = ()
) -> JobFreshness:
    return JobFreshness(
        job=job,
        batch_id=progress.batch_id,
        committed_at=progress.updated_at,
        watermark=progress.source_watermark,
        held=Held.from_job_state(progress.job_state),
        lags=list(lags),
    )


class BrokerProbe:
    """End offsets and the timestamps of next unread records; :meth:`close` it after use."""

    def __init__(
        self, kafka_config: Mapping[str, str], policy: BrokerOutagePolicy = PROBE_POLICY
    ) -> None:
        self._config = dict(kafka_config)
        self._view = BrokerView(kafka_config, policy)
        self._timeout_s = policy.call_timeout
        self._reader: Consumer | None = None

    def lags(
        self,
        committed_json: Mapping[str, Mapping[str, int]] | None,
        subscription: Subscription | None = None,
        *,
        seconds: bool = True,
    ) -> list[PartitionLag]:
        """Lag of every partition the job committed, and of every partition ``subscription``
        matches (new partitions included).

        Raises:
            BrokerUnavailableError: the brokers did not answer within the probe's budget.
        """
        committed = from_json(committed_json)
        partitions = set(committed)
        if subscription is not None:
            partitions |= set(self._view.partitions(subscription))
        ends = self._view.watermarks(sorted(partitions))
        behind = [p for p, (low, end) in ends.items() if end > max(committed.get(p, low), low)]
        times = self._next_times(committed, behind) if seconds else {}
        return partition_lags(committed, ends, times)

    def close(self) -> None:
        self._view.close()
        if self._reader is not None:
            self._reader.close()

    def _next_times(
        self, committed: Mapping[PartitionId, int], partitions: Iterable[PartitionId]
    ) -> dict[PartitionId, int]:
        """Kafka timestamps of the next unread record of each partition, where one arrives in
        time (a partition whose next offset is a transaction marker or gone is left out)."""
        found = {}
        for pid in partitions:
            stamp = self._timestamp_at(pid, committed.get(pid))
            if stamp is not None:
                found[pid] = stamp
        return found

    def _timestamp_at(self, pid: PartitionId, offset: int | None) -> int | None:
        reader = self._reader or Consumer(consumer_config(self._config))
        self._reader = reader
        start = offset if offset is not None else -2  # OFFSET_BEGINNING
        try:
            reader.assign([KafkaPartition(pid.topic, pid.partition, start)])
            message = reader.poll(self._timeout_s)
        except KafkaException:
            return None
        if message is None or message.error() is not None:
            return None
        kind, stamp = message.timestamp()
        return int(stamp) if kind != 0 and stamp >= 0 else None


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


class JobWatch:
    """A running job's freshness, read on demand (per scrape); :meth:`close` it after use."""

    def __init__(
        self,
        catalog: Catalog,
        job: str,
        kafka_config: Mapping[str, str],
        subscription: Subscription | None = None,
    ) -> None:
        self._catalog = catalog
        self._job = job
        self._kafka_config = dict(kafka_config)
        self._subscription = subscription
        self._probe: BrokerProbe | None = None

    def __call__(self) -> JobFreshness | None:
        """``None`` while the job has never committed.

        Raises:
            CatalogUnavailableError: the catalog could not be reached.
            BrokerUnavailableError: the brokers did not answer within the probe's budget.
        """
        progress = self._catalog.writer_progress(self._job)
        if progress is None:
            return None
        self._probe = self._probe or BrokerProbe(self._kafka_config)
        return freshness(
            self._job, progress, self._probe.lags(progress.source_offsets, self._subscription)
        )

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
