"""``lakestream status JOB``: how fresh a job's tables are, on one screen (or as JSON).

Read from the catalog (the job's last commit: batch, time, offsets, source watermark, held
transactions) and, given the brokers' address, from the brokers (end offsets, so lag per
topic-partition in offsets and, by the next unread record's timestamp, in seconds). A job that
never committed is unknown to the catalog: the command says so in one line and exits 2.

Also the formatting of source watermarks that ``lakestream tables history`` shares.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from catalog import Catalog, SourcePoint
from jobs.settings import ConfigError

if TYPE_CHECKING:  # the broker client is the Spark extra's: `tables history` runs without it
    from ingest.freshness import JobFreshness, PartitionLag


class UnknownJobError(ConfigError):
    """No commit of the job is in the catalog (a typo, another catalog, or it never ran)."""

    def __init__(self, job: str) -> None:
        super().__init__(
            f"no job named {job!r} has committed to this catalog; check the name (the 'job' key "
            "of its ingest YAML) and --dsn"
        )
        self.job = job


def collect(catalog: Catalog, job: str, kafka_config: Mapping[str, str] | None) -> JobFreshness:
    """The job's freshness; without ``kafka_config`` the lag is left out.

    Raises:
        UnknownJobError: the catalog holds no progress of the job.
        BrokerUnavailableError: the brokers did not answer within a few seconds.
    """
    from ingest.freshness import BrokerProbe, freshness

    progress = catalog.writer_progress(job)
    if progress is None:
        raise UnknownJobError(job)
    lags: list[PartitionLag] = []
    if kafka_config is not None:
        probe = BrokerProbe(kafka_config)
        try:
            lags = probe.lags(progress.source_offsets)
        finally:
            probe.close()
    return freshness(job, progress, lags)


def short_position(position: str) -> str:
    """A 16-byte source position as its two 8-byte halves in hex, without leading zeros
    (``1a2b3c:0`` is PostgreSQL's LSN 0x1a2b3c): short, and still ordered like the source."""
    high, low = int(position[:16], 16), int(position[16:], 16)
    return f"{high:x}:{low:x}"


def watermark_text(point: SourcePoint | None, exceptions: tuple[str, ...] = ()) -> str:
    """One cell: position, source time, and whether the version published transactions
    incomplete (then it is no consistent cut)."""
    if point is None:
        return "-"
    text = short_position(point.position)
    if point.source_time is not None:
        text += f" @{_utc(point.source_time):%Y-%m-%d %H:%M:%S}"
    if exceptions:
        text += f" exceptions:{len(exceptions)}"
    return text


def to_json(status: JobFreshness, now: dt.datetime) -> dict[str, Any]:
    mark = status.watermark
    held = status.held
    return {
        "job": status.job,
        "batch_id": status.batch_id,
        "committed_at": _utc(status.committed_at).isoformat(),
        "since_commit_s": round(status.since_commit_s(now), 3),
        "source_watermark": mark.model_dump(mode="json") if mark else None,
        "source_watermark_age_s": _round(status.watermark_age_s(now)),
        "held": None
        if held is None
        else {
            "transactions": held.transactions,
            "events": held.events,
            "oldest_first_seen": held.oldest_first_seen.isoformat()
            if held.oldest_first_seen
            else None,
            "oldest_age_s": _round(held.oldest_age_s(now)),
            "blocking": held.blocking,
        },
        "lag": [
            {
                "topic": p.partition.topic,
                "partition": p.partition.partition,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
                "lag_s": _round(p.lag_s),
            }
            for p in status.lags
        ],
        "total_lag": status.total_lag,
    }


def render(status: JobFreshness, now: dt.datetime, *, brokers: bool) -> list[str]:
    """The screen: the last commit, the watermark, what is held, then one line per partition."""
    lines = [
        f"job {status.job}",
        f"  last batch   {status.batch_id} committed {_utc(status.committed_at):%Y-%m-%d %H:%M:%S}"
        f" UTC ({_age(status.since_commit_s(now))} ago)",
        f"  watermark    {_watermark_line(status, now)}",
        f"  held         {_held_text(status, now)}",
    ]
    if not brokers:
        lines.append("  lag          (give --bootstrap-servers to see the lag per partition)")
        return lines
    lines.append(f"  lag          {status.total_lag} record(s) in all")
    lines.append(f"    {'topic-partition':<40} {'committed':>10} {'end':>10} {'lag':>8} {'age':>8}")
    for p in status.lags:
        done = "-" if p.committed is None else str(p.committed)
        age = "-" if p.lag_s is None else _age(p.lag_s)
        lines.append(f"    {p.partition!s:<40} {done:>10} {p.end:>10} {p.lag:>8} {age:>8}")
    return lines


def _watermark_line(status: JobFreshness, now: dt.datetime) -> str:
    mark = status.watermark
    if mark is None:
        return "- (eventual mode: no source watermark)"
    text = watermark_text(mark.batch, mark.exceptions)
    age = status.watermark_age_s(now)
    if age is not None:
        text += f" ({_age(age)} behind the source)"
    if mark.batch.transaction:
        text += f", transaction {mark.batch.transaction}"
    return text


def _held_text(status: JobFreshness, now: dt.datetime) -> str:
    held = status.held
    if held is None:
        return "- (nothing held: eventual mode, or no held state recorded)"
    text = f"{held.transactions} transaction(s), {held.events} event(s)"
    age = held.oldest_age_s(now)
    if age is not None:
        text += f", oldest for {_age(age)}"
    if held.blocking:
        text += f", blocking: {held.blocking}"
    return text


def _age(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h01m``, ``3d04h``: readable at a glance, sortable by eye."""
    whole = int(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC) if moment.tzinfo is not None else moment
