"""Named places where a test can make the ingest job fail as if its process died there.

Crash tests need to stop the job at points no signal can hit reliably: between a batch's files
and its catalog commit, or between the catalog commit and Spark's commit log. A tripped failpoint
raises :class:`InjectedFault`; Spark then stops the query without logging the batch as finished,
which leaves the checkpoint and the catalog exactly as a ``kill -9`` at that point would. (The
process itself lives on, so one Spark session can run a whole crash matrix; real ``kill -9`` runs
in the soak test.) Unset in every real deployment: :class:`ingest.job.IngestJobConfig` takes it
only from code, never from configuration files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from ingest.errors import IngestError


class Failpoint(StrEnum):
    BEFORE_QUERY = "before-query"
    """The start of batch 0 is decided and saved; the streaming query has not started."""
    BATCH_WRITTEN = "batch-written"
    """The batch's files are written; its catalog commit has not been made."""
    BATCH_COMMITTED = "batch-committed"
    """The catalog commit landed; Spark has not logged the batch as finished."""


@dataclass(frozen=True)
class FailAt:
    point: Failpoint
    batch: int = 0
    """Which batch of this run trips it (0: the first batch the run processes)."""
    action: Callable[[], None] | None = field(default=None, compare=False)
    """Run this at the point instead of failing: a race test lands a concurrent commit (a
    batch UPDATE, say) exactly between a batch's files and its commit."""

    def trip(self, point: Failpoint, batch_of_run: int = 0) -> None:
        if point is self.point and batch_of_run == self.batch:
            if self.action is not None:
                self.action()
                return
            raise InjectedFault(point, batch_of_run)


class InjectedFault(IngestError):
    def __init__(self, point: Failpoint, batch_of_run: int) -> None:
        super().__init__(f"injected fault at {point.value} in batch {batch_of_run} of this run")
        self.point = point
        self.batch_of_run = batch_of_run
