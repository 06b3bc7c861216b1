"""``lakestream compactor ...``: the compactor service's settings.

Environment variables ``LAKESTREAM_COMPACTOR__<FIELD>`` (e.g. ``LAKESTREAM_COMPACTOR__WORKERS=4``;
the older ``LAKESTREAM_COMPACTOR_WORKERS`` is still read), overridden by the command's flags. The
catalog and the log level are the keys every command shares (``LAKESTREAM_CATALOG__DSN``,
``LAKESTREAM_LOG_LEVEL``: :mod:`jobs.settings`).
"""

from __future__ import annotations

import datetime as dt
from typing import ClassVar

from pydantic import Field, field_validator

from catalog.outage import DEFAULT_OUTAGE_BUDGET_S, OutagePolicy
from compaction.maintenance import MaintenanceSettings
from compaction.queue import QueueSettings
from compaction.service import LoopSettings
from compaction.worker import WorkerSettings
from jobs.settings import CommandSettings


class CompactorSettings(CommandSettings):
    """``lakestream compactor run|worker|status``."""

    command: ClassVar[str | None] = "compactor"

    tables: str = "*"
    """Which tables the coordinator serves: fnmatch patterns on ``namespace.table``, comma
    separated (``shop.*,logs.events``)."""
    workers: int = Field(default=2, ge=0, le=256)
    """Worker processes of the service (0: coordinator only, workers run elsewhere)."""
    poll_seconds: float = Field(default=30.0, gt=0)
    """Rounds run at least this often; commits wake the coordinator sooner."""
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve /metrics and /healthz here (None: no HTTP server)."""
    lease_seconds: float = Field(default=60.0, gt=0)
    """A claim lapses after this long without a heartbeat (renewed every third of it)."""
    grace_seconds: float = Field(default=30.0, ge=0)
    """On SIGTERM, how long a running task may finish before it is released."""
    max_attempts: int = Field(default=3, ge=1)
    """Claims of one task before it is given up (lapsed leases: workers dying on it)."""
    idle_sleep_seconds: float = Field(default=2.0, gt=0)
    """How often an idle worker asks the queue for work."""
    keep_finished: int = Field(default=10, ge=1)
    """Finished tasks kept per partition for status (older ones are pruned)."""
    maintenance: bool = True
    """Run table maintenance (partition TTL, snapshot expiry, vacuum) on a schedule."""
    maintenance_interval_seconds: float = Field(default=600.0, gt=0)
    """Each served table's maintenance runs this often (first runs spread over it)."""
    maintenance_tables_per_round: int = Field(default=5, ge=1)
    """At most this many tables' maintenance per coordinator round."""
    outage_budget: float = Field(default=DEFAULT_OUTAGE_BUDGET_S, ge=0)
    """Seconds a catalog outage is waited out before the service (or a worker) stops with exit
    code 1; 0: stop at the first failed catalog call."""

    @field_validator("tables")
    @classmethod
    def _patterns(cls, value: str) -> str:
        if not [p for p in value.split(",") if p.strip()]:
            raise ValueError("tables needs at least one pattern, e.g. '*' or 'shop.*'")
        return value

    def patterns(self) -> list[str]:
        return [p.strip().lower() for p in self.tables.split(",") if p.strip()]

    def queue(self) -> QueueSettings:
        return QueueSettings(
            lease=dt.timedelta(seconds=self.lease_seconds),
            max_attempts=self.max_attempts,
            keep_per_partition=self.keep_finished,
        )

    def worker(self, *, drain: bool = False) -> WorkerSettings:
        return WorkerSettings(
            idle_sleep=self.idle_sleep_seconds, grace=self.grace_seconds, drain=drain
        )

    def maintenance_settings(self) -> MaintenanceSettings:
        return MaintenanceSettings(
            enabled=self.maintenance,
            interval=dt.timedelta(seconds=self.maintenance_interval_seconds),
            tables_per_round=self.maintenance_tables_per_round,
        )

    def outage(self) -> OutagePolicy:
        return OutagePolicy(budget=self.outage_budget)

    def loop(self) -> LoopSettings:
        return LoopSettings(poll_seconds=self.poll_seconds)
