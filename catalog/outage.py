"""Riding out a catalog outage: a long-running process's catalog calls wait for the database.

A managed PostgreSQL failover takes 20-120 s. An ingest job or a compactor that failed on the
first refused connection would need a person to restart it after every one, so each catalog
call such a process makes goes through an :class:`OutageGuard`: a call that fails because the
database is unreachable is tried again, with jittered back-off capped at a few seconds, until
the database answers or the outage has lasted longer than the budget
(``catalog.outage_budget``, 5 minutes by default). Then :class:`CatalogOutageError` says how long
it lasted, and the process ends with one line.

The budget belongs to the outage, not to the call: it starts at the first failure after the last
success (of any call, on any thread of the process) and ends at the next success. So a batch
that meets the outage in its planning and again in its commit does not get two budgets.

Only unavailability is waited out (:attr:`catalog.errors.UnavailableKind.is_outage`, or a commit
that gave up with :class:`CatalogUnavailableError`). A busy table (``UnavailableKind.LOCK_BUSY``),
a conflict or any other error passes through at once: those are the caller's to decide. Retrying
is safe because every call a guard wraps either reads, or commits under an idempotency key (a
commit retried after an unknown outcome is recognised, never landed twice).

One attempt waits for a pooled connection no longer than what is left of the budget
(:func:`connection_wait`): with the database down, the pool's own wait (``connect_timeout``, 10 s)
would otherwise let a budget of 4 s run to 10.

Interactive readers (``Table.scan``, the CLI, the Spark reader's planning) use no guard: they
fail fast with :class:`CatalogUnavailableError` and leave waiting to the person.

Each retry is one ``catalog_unavailable`` line; the first success after an outage is one
``catalog_available`` line with its length. :meth:`OutageGuard.stats` gives the figures a
metrics exporter needs (time since the last success, retries by kind).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from catalog.errors import CatalogOutageError, CatalogUnavailableError
from catalog.logs import get_logger
from catalog.retry import RetryPolicy

T = TypeVar("T")

DEFAULT_OUTAGE_BUDGET_S = 300.0
#: Seconds of the outage budget left for the guarded attempt running in this context.
_BUDGET_LEFT: ContextVar[float | None] = ContextVar("catalog_budget_left", default=None)


def connection_wait(default: float) -> float:
    """How long a catalog call may wait for a pooled connection: ``default`` (the store's
    ``connect_timeout``), or what is left of the outage budget of the guarded attempt it runs
    in, when that is less.

    A call made after its outage's budget was spent (a caller that caught the
    :class:`CatalogOutageError` and went on) makes one attempt, with the whole ``default``: a
    pool reconnecting to a database that is back needs that long, and a call that never got it
    would leave the outage unended for good."""
    left = _BUDGET_LEFT.get()
    if left is None or left <= 0:
        return default
    return min(default, left)


@contextmanager
def _budget_left(seconds: float) -> Iterator[None]:
    token = _BUDGET_LEFT.set(seconds)
    try:
        yield
    finally:
        _BUDGET_LEFT.reset(token)


class _Log(Protocol):
    def info(self, event: str, **fields: object) -> object: ...

    def warning(self, event: str, **fields: object) -> object: ...


@dataclass(frozen=True)
class OutagePolicy:
    """How long and how patiently a process waits for its catalog."""

    budget: float = DEFAULT_OUTAGE_BUDGET_S
    """Seconds an outage may last before the process gives up; 0: never wait (fail fast)."""
    base_delay: float = 0.25
    max_delay: float = 4.0
    """The back-off's cap: a database that returns is noticed within about this long."""

    def committer_retry(self, base: RetryPolicy | None = None) -> RetryPolicy:
        """The committer's own retries (lock waits, a blip) kept within the budget, so that an
        outage is the guard's to wait out, one ``catalog_unavailable`` line per retry."""
        base = base or RetryPolicy()
        return replace(base, deadline=min(base.deadline, max(self.budget, 1.0)))

    def __post_init__(self) -> None:
        if self.budget < 0:
            raise ValueError("the outage budget cannot be negative")
        if not 0 < self.base_delay <= self.max_delay:
            raise ValueError("outage back-off needs 0 < base_delay <= max_delay")


FAIL_FAST = OutagePolicy(budget=0)


@dataclass(frozen=True)
class OutageStats:
    """A snapshot of a guard's figures (for metrics and health checks)."""

    seconds_since_success: float | None
    """Since the last successful guarded call; None before the first one."""
    outage_s: float | None
    """How long the current outage has lasted; None while the catalog answers."""
    retries: Mapping[str, int]
    """Retries by kind (``connection``, ``restarting``, ``no_connection``, ...)."""
    outages: int
    """Outages survived (ended by a success) since the guard was made."""


@dataclass
class _State:
    last_success: float | None = None
    outage_started: float | None = None
    outage_attempts: int = 0
    outages: int = 0
    retries: Counter[str] = field(default_factory=Counter)


class OutageGuard:
    """Runs catalog calls of one process, waiting out catalog outages within one budget.

    Thread-safe: the coordinator, the lease heartbeat and the worker share one guard, and so
    one outage and one budget.
    """

    def __init__(
        self,
        catalog: str,
        policy: OutagePolicy = OutagePolicy(),
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        log: _Log | None = None,
    ) -> None:
        """``catalog`` names the database in log lines and errors: pass the DSN with its
        password masked (the guard never sees the secret)."""
        self.catalog = catalog
        self.policy = policy
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self._log: _Log = log or get_logger("lakestream.catalog.outage")
        self._lock = threading.Lock()
        self._state = _State()

    @classmethod
    def fail_fast(cls, catalog: str = "catalog") -> OutageGuard:
        """A guard that never waits: every failure is raised as it is."""
        return cls(catalog, FAIL_FAST)

    def call(
        self,
        operation: str,
        fn: Callable[[], T],
        *,
        retry_also: tuple[type[Exception], ...] = (),
    ) -> T:
        """``fn()``, tried again while the catalog is unavailable and the budget lasts.

        ``retry_also`` names further errors that are safe to retry for this call only (a
        compaction's ``CommitStateUnknown``: its rerun resolves the task's key first).

        Raises:
            CatalogOutageError: the outage outlasted the budget (the last error is its cause).
            Exception: whatever ``fn`` raised that is not an outage, at once.
        """
        if self.policy.budget <= 0:
            return fn()
        last: Exception | None = None
        for _ in self._retry_policy().attempts_iter():
            began = self._clock()
            try:
                with _budget_left(self._left(began)):
                    result = fn()
            except Exception as exc:
                kind = _retry_kind(exc, retry_also)
                if kind is None:
                    raise
                last = exc
                self._failed(operation, kind, exc, began)
                continue
            self._succeeded(operation)
            return result
        assert last is not None  # the policy runs at least one attempt
        raise self._spent(operation, last) from last

    def stats(self) -> OutageStats:
        now = self._clock()
        with self._lock:
            state = self._state
            return OutageStats(
                seconds_since_success=None
                if state.last_success is None
                else now - state.last_success,
                outage_s=None if state.outage_started is None else now - state.outage_started,
                retries=dict(state.retries),
                outages=state.outages,
            )

    def _left(self, now: float) -> float:
        """Seconds left of the current outage's budget (all of it while the catalog answers)."""
        with self._lock:
            started = self._state.outage_started
        return self.policy.budget - (0.0 if started is None else now - started)

    def _retry_policy(self) -> RetryPolicy:
        """Back-off for this call, its deadline what is left of the current outage's budget."""
        left = self._left(self._clock())
        return RetryPolicy(
            attempts=1_000_000,  # bounded by the deadline
            base_delay=self.policy.base_delay,
            max_delay=self.policy.max_delay,
            deadline=max(left, 1e-6),
            clock=self._clock,
            sleep=self._sleep,
            rand=self._rand,
        )

    def _failed(self, operation: str, kind: str, error: Exception, began: float) -> None:
        """Count and log one failed attempt; the outage starts when the first one began."""
        now = self._clock()
        with self._lock:
            state = self._state
            if state.outage_started is None:
                state.outage_started = began
            state.outage_attempts += 1
            state.retries[kind] += 1
            attempt, waited = state.outage_attempts, now - state.outage_started
        self._log.warning(
            "catalog_unavailable",
            catalog=self.catalog,
            operation=operation,
            attempt=attempt,
            waited_s=round(waited, 1),
            budget_s=self.policy.budget,
            kind=kind,
            error=one_line(error),
        )

    def _succeeded(self, operation: str) -> None:
        now = self._clock()
        with self._lock:
            state = self._state
            started, attempts = state.outage_started, state.outage_attempts
            state.last_success = now
            if started is not None:
                state.outage_started, state.outage_attempts = None, 0
                state.outages += 1
        if started is not None:
            self._log.info(
                "catalog_available",
                catalog=self.catalog,
                operation=operation,
                outage_s=round(now - started, 1),
                attempts=attempts,
            )

    def _spent(self, operation: str, last: Exception) -> CatalogOutageError:
        now = self._clock()
        with self._lock:
            started = self._state.outage_started
            attempts = self._state.outage_attempts
        return CatalogOutageError(
            catalog=self.catalog,
            operation=operation,
            outage_s=0.0 if started is None else now - started,
            budget_s=self.policy.budget,
            attempts=attempts,
            error=one_line(last),
        )


def _retry_kind(error: Exception, retry_also: tuple[type[Exception], ...]) -> str | None:
    """The retries-by-kind label of an error worth waiting out; None for any other error."""
    if isinstance(error, CatalogOutageError):
        return None  # a guard further in already gave up: the budget is spent
    if isinstance(error, CatalogUnavailableError):
        if error.kind is None:
            return "unavailable"  # a commit or connect that gave up on its own retries
        return error.kind.value if error.kind.is_outage else None
    if retry_also and isinstance(error, retry_also):
        return _snake(type(error).__name__)
    return None


def one_line(error: BaseException) -> str:
    """An error's message on one line, for a log field."""
    return " ".join(str(error).split()) or type(error).__name__


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
