"""A compaction worker: claim a task, keep its lease alive while the rewrite runs, record what it
did. Many workers (processes of the service's pool, ``lakestream compactor worker`` on other
hosts) share one queue; SKIP LOCKED and the lease keep a task on one of them at a time.

The worker never retries a task itself. A compaction that lost (DISCARDED) or whose inputs went
away (REPLAN) is recorded as such and the coordinator plans the partition again from the latest
snapshot; a task that raised is recorded as failed and replanned the same way. That keeps a
compaction from ever pushing against a streaming writer: the commit protocol already reorders or
discards it, and nobody insists.

A catalog outage is waited out within the queue guard's budget: the claim, the lease renewals,
the compaction's catalog calls and the finish all go through it. A lease that lapsed during the
outage is taken over by another worker; whichever run commits second finds the task's commit
key already landed and records ALREADY_DONE (:func:`compaction.rewrite.compact`), so no task is
committed twice. When the budget is spent, ``run`` raises ``CatalogOutageError``: nothing is
recorded (the queue is unreachable) and the lease lapses.

Stopping (SIGTERM, handled by the entry point, which sets ``stop``): no new claims; the running
task may finish within ``grace`` seconds, otherwise it is released back to the queue at once
(its partial output files are found by ``Catalog.leftovers()``; the commit key makes a late
landing of the abandoned attempt harmless).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from structlog.contextvars import bound_contextvars

from catalog import Catalog, CatalogOutageError, CommitStateUnknown
from catalog.logs import get_logger
from compaction.queue import FAILED, Claim, QueueUnavailable, TaskQueue
from compaction.task import CompactionOutcome, CompactionTask

log = get_logger("lakestream.compaction.worker")

CompactFn = Callable[[Catalog, CompactionTask], CompactionOutcome]
RELEASED = "released"


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def rewrite_compact(catalog: Catalog, task: CompactionTask) -> CompactionOutcome:
    """The table format's one compaction routine (imported on first use)."""
    from compaction.rewrite import compact

    return compact(catalog, task)


@dataclass(frozen=True)
class WorkerSettings:
    idle_sleep: float = 2.0
    """Seconds between claims while the queue is empty."""
    grace: float = 30.0
    """Seconds a stop request lets the running task finish before releasing it."""
    drain: bool = False
    """Stop when the queue is empty (``--once``) instead of waiting for work."""


@dataclass
class WorkerStats:
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return self.outcomes[FAILED]


class Worker:
    def __init__(
        self,
        catalog: Catalog,
        queue: TaskQueue,
        *,
        worker_id: str | None = None,
        settings: WorkerSettings | None = None,
        compact: CompactFn = rewrite_compact,
        stop: threading.Event | None = None,
        wake: Callable[[float], object] | None = None,
    ) -> None:
        self.catalog = catalog
        self.queue = queue
        self.worker_id = worker_id or default_worker_id()
        self.settings = settings or WorkerSettings()
        self.stop = stop or threading.Event()
        self._compact = compact
        self._wake = wake  # blocks until work may be queued or the timeout passes (a LISTEN)
        self.stats = WorkerStats()

    def run(self) -> WorkerStats:
        """Work until ``stop`` is set (or, draining, until the queue is empty).

        Raises:
            CatalogOutageError: the catalog stayed unreachable longer than the outage budget.
        """
        log.info("worker_started", worker_id=self.worker_id, drain=self.settings.drain)
        while not self.stop.is_set():
            try:
                outcome = self.run_one()
            except QueueUnavailable as exc:
                log.warning("queue_unavailable", worker_id=self.worker_id, error=str(exc))
                outcome = None
            if outcome is None:
                if self.settings.drain:
                    break
                self._idle()
        log.info("worker_stopped", worker_id=self.worker_id, **self.stats.outcomes)
        return self.stats

    def _idle(self) -> None:
        if self._wake is None:
            self.stop.wait(self.settings.idle_sleep)
        else:
            self._wake(self.settings.idle_sleep)

    def run_one(self) -> str | None:
        """Claim and run one task; its outcome (or ``released``), None if there was none."""
        if self.stop.is_set():
            return None
        claim = self.queue.claim(self.worker_id)
        if claim is None:
            return None
        outcome = _Attempt(self, claim).run()
        self.stats.outcomes[outcome] += 1
        return outcome


class _Attempt:
    """One claimed task: the rewrite in a thread, the heartbeat in another, the lease here."""

    def __init__(self, worker: Worker, claim: Claim) -> None:
        self.worker = worker
        self.claim = claim
        self.queue = worker.queue
        self.done = threading.Event()
        self.lease_lost = False
        self.outcome: CompactionOutcome | None = None
        self.error: BaseException | None = None
        self.log = log.bind(
            worker_id=worker.worker_id,
            task_id=str(claim.task_id),
            table=claim.task.table,
            partition=claim.task.partition_desc,
        )

    def run(self) -> str:
        started = time.monotonic()
        heartbeat = threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True)
        runner = threading.Thread(target=self._rewrite, name="compaction", daemon=True)
        heartbeat.start()
        runner.start()
        if not self._wait(runner):
            self.done.set()
            return self._release(time.monotonic() - started)
        self.done.set()
        heartbeat.join()
        if isinstance(self.error, CatalogOutageError):
            raise self.error  # nothing can be recorded: the lease lapses, the task is claimed again
        return self._record(time.monotonic() - started)

    def _rewrite(self) -> None:
        context = bound_contextvars(
            worker_id=self.worker.worker_id,
            attempt=self.claim.attempt,
            took_over=self.claim.took_over,
        )
        try:
            with context:
                self.outcome = self.worker.queue.guard.call(
                    "compact",
                    lambda: self.worker._compact(self.worker.catalog, self.claim.task),
                    # a rerun resolves the task's commit key before anything else
                    retry_also=(CommitStateUnknown,),
                )
        except Exception as exc:  # recorded as the task's failure; the coordinator replans
            self.error = exc
        finally:
            self.done.set()

    def _wait(self, runner: threading.Thread) -> bool:
        """True when the rewrite ended; False when a stop's grace period ran out first."""
        deadline: float | None = None
        while runner.is_alive():
            if deadline is None and self.worker.stop.is_set():
                deadline = time.monotonic() + self.worker.settings.grace
                self.log.info("stop_requested_task_running", grace_s=self.worker.settings.grace)
            if deadline is not None and time.monotonic() >= deadline:
                return False
            runner.join(0.1)
        return True

    def _heartbeat(self) -> None:
        period = self.queue.settings.lease.total_seconds() / 3
        while not self.done.wait(period):
            try:
                if not self.queue.renew(self.claim):
                    self.lease_lost = True
                    self.log.warning("lease_lost")
                    return
            except QueueUnavailable as exc:  # keep trying: the lease may still hold
                self.log.warning("lease_renewal_failed", error=str(exc))
            except CatalogOutageError:  # the worker's own calls meet the same spent budget
                return

    def _release(self, duration: float) -> str:
        try:
            self.queue.release(self.claim)
        except QueueUnavailable as exc:  # the lease lapses instead
            self.log.warning("release_failed", error=str(exc))
        self.log.warning("task_released", duration_s=round(duration, 3), attempt=self.claim.attempt)
        return RELEASED

    def _record(self, duration: float) -> str:
        """Store the outcome. The rewrite logged the task's line (with this worker's context);
        only what the queue adds is logged here: a result it refused (the lease was lost)."""
        if self.outcome is not None:
            status = self.outcome.status.value
            recorded = self.queue.finish(self.claim, self.outcome)
        else:
            status = FAILED
            error = "".join(traceback.format_exception_only(self.error)).strip()
            recorded = self.queue.fail(self.claim, error, duration)
        if not recorded:
            self.log.warning("task_result_not_recorded", outcome=status, reason="lease lost")
        return status
