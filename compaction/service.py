"""The coordinator's loop: a round, its metrics, then sleep until a commit or the poll interval.

Processes, signals and logging belong to the entry point (``jobs/compactor_main.py``); this loop
only needs a ``stop`` event, so tests and ``--once`` drive it directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from catalog import CatalogError, CatalogOutageError
from catalog.logs import get_logger
from compaction.coordinator import Coordinator, RoundReport
from compaction.errors import CompactionError
from compaction.listener import CommitListener
from compaction.metrics import Health, ServiceMetrics

log = get_logger("lakestream.compaction.service")

#: The longest a stop request waits for the loop to notice it.
_STOP_CHECK_S = 0.5


@dataclass(frozen=True)
class LoopSettings:
    poll_seconds: float = 30.0
    """Rounds run at least this often, commits or not (the fallback when no notification)."""

    @property
    def stale_after_s(self) -> float:
        """/healthz fails when no round has succeeded for this long."""
        return 3 * self.poll_seconds + 60.0


class CoordinatorLoop:
    def __init__(
        self,
        coordinator: Coordinator,
        metrics: ServiceMetrics,
        *,
        listener: CommitListener | None = None,
        settings: LoopSettings | None = None,
        stop: threading.Event | None = None,
        workers_alive: Callable[[], tuple[int, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordinator = coordinator
        self.metrics = metrics
        self.listener = listener
        self.settings = settings or LoopSettings()
        self.stop = stop or threading.Event()
        self._workers_alive = workers_alive
        self._clock = clock
        self._last_ok: float | None = None
        self._last_error: str | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            self.run_round()
            self.wait_for_work()

    def run_round(self) -> RoundReport | None:
        """One round and its metrics. A catalog outage is waited out inside the round (the
        queue's guard); a failure it does not wait out is logged and tried next round.

        Raises:
            CatalogOutageError: the outage outlasted the budget; the service should stop.
        """
        try:
            report = self.coordinator.round()
            self.metrics.observe_finished(report.finished)
            self.metrics.observe_queue(self.coordinator.queue.depth())
            self.metrics.observe_backlog(
                {s.head.name: (s.backlog, s.meta.is_cdc) for s in self.coordinator.tables.values()}
            )
            self.metrics.observe_amplification(
                {
                    s.head.name: s.amplification.ratio if s.amplification else None
                    for s in self.coordinator.tables.values()
                }
            )
            self.metrics.tasks_queued.inc(report.tasks_queued)
            self.metrics.rounds.inc()
        except CatalogOutageError:
            raise
        except (CatalogError, CompactionError) as exc:
            self._last_error = str(exc)
            log.error("round_failed", error=str(exc))
            return None
        self._last_ok = self._clock()
        self._last_error = None
        return report

    def health(self) -> Health:
        age = None if self._last_ok is None else self._clock() - self._last_ok
        detail: dict[str, object] = {"last_round_age_s": None if age is None else round(age, 1)}
        ok = age is not None and age < self.settings.stale_after_s
        if self._last_error:
            detail["last_error"] = self._last_error
        outage = self.coordinator.guard.stats().outage_s
        if outage is not None:  # the round is waiting for the catalog (within the budget)
            detail["catalog_outage_s"] = round(outage, 1)
            # Healthy while the outage is waited out: the budget, not an orchestrator restarting
            # the service mid-failover, decides when to give up (the process exits then).
            ok = age is not None
        if self._workers_alive is not None:
            alive, wanted = self._workers_alive()
            self.metrics.workers_alive.set(alive)
            detail["workers"] = {"alive": alive, "wanted": wanted}
            ok = ok and alive == wanted
        return Health(ok=ok, detail=detail)

    def wait_for_work(self) -> None:
        """Until a commit is notified, the poll interval passes, or stop is set."""
        deadline = self._clock() + self.settings.poll_seconds
        while not self.stop.is_set():
            left = deadline - self._clock()
            if left <= 0:
                return
            step = min(left, _STOP_CHECK_S)
            if self.listener is None:
                self.stop.wait(step)
            elif self.listener.wait(step):
                return
