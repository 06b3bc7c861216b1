"""Riding out an outage: a long-running process's calls to a service wait for it, within a budget.

A managed PostgreSQL failover takes 20-120 s; a Kafka rolling restart makes metadata and offset
queries fail for a while. An ingest job or a compactor that failed on the first refused
connection would need a person to restart it after every one, so each call such a process makes
to its catalog, and each broker query of the ingest driver, goes through a guard: a call that
fails because the service is unreachable is tried again, with jittered back-off capped at a few
seconds, until the service answers or the outage has lasted longer than the budget (the
catalog's ``catalog.outage_budget``, 5 minutes by default). Then an error says how long it
lasted (:class:`CatalogOutageError` for the catalog), and the process ends with one line.

One loop, :class:`ServiceGuard`, serves every service; an :class:`OutageRules` says what counts
as an outage of one service (its classifier), how the guard tells of it (log events, the field
naming the service) and what it raises when the budget is spent. :class:`OutageGuard` is the
catalog's guard; ``ingest.kafka.outage.BrokerGuard`` the brokers' (this package imports no
Kafka: the brokers' rules live with the Kafka source).

The budget belongs to the outage, not to the call: it starts at the first failure after the last
success (of any call, on any thread of the process) and ends at the next success. So a batch
that meets the outage in its planning and again in its commit does not get two budgets. The
back-off restarts with each call (from ``base_delay``); no attempt starts once the outage plus
the pause before it would outlast the budget.

For the catalog, only unavailability is waited out (:attr:`catalog.errors.UnavailableKind.
is_outage`, or a commit that gave up with :class:`CatalogUnavailableError`). A busy table
(``UnavailableKind.LOCK_BUSY``), a conflict or any other error passes through at once: those are
the caller's to decide. Retrying is safe because every call a guard wraps either reads, or
commits under an idempotency key (a commit retried after an unknown outcome is recognised, never
landed twice).

One attempt waits for a pooled connection no longer than what is left of the budget
(:func:`connection_wait`): with the database down, the pool's own wait (``connect_timeout``, 10 s)
would otherwise let a budget of 4 s run to 10.

Interactive readers (``Table.scan``, the CLI, the Spark reader's planning) use no guard: they
fail fast with :class:`CatalogUnavailableError` and leave waiting to the person.

Each failed attempt of a catalog call is one ``catalog_unavailable`` line (the last one too, so
an outage that ends the process is always logged); the first success after an outage is one
``catalog_available`` line with its length. :meth:`ServiceGuard.stats` gives the figures a
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
    ``connect_timeout``), or what is left of the outage budget of the (innermost) guarded
    attempt it runs in, when that is less.

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
    """How long and how patiently a process waits for a service (by default, its catalog)."""

    budget: float = DEFAULT_OUTAGE_BUDGET_S
    """Seconds an outage may last before the process gives up; 0: never wait (fail fast)."""
    base_delay: float = 0.25
    max_delay: float = 4.0
    """The back-off's cap: a service that returns is noticed within about this long."""
    min_delay: float = 0.0
    """The shortest pause between attempts, whatever the jitter draws (the brokers' guard keeps
    half its ``base_delay``, so a retry never hammers a broker that is restarting)."""

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
        if not 0 <= self.min_delay <= self.max_delay:
            raise ValueError("outage back-off needs 0 <= min_delay <= max_delay")


FAIL_FAST = OutagePolicy(budget=0)


@dataclass(frozen=True)
class OutageStats:
    """A snapshot of a guard's figures (for metrics and health checks)."""

    seconds_since_success: float | None
    """Since the last successful guarded call; None before the first one."""
    outage_s: float | None
    """How long the current outage has lasted; None while the service answers."""
    retries: Mapping[str, int]
    """Retries by kind (``connection``, ``restarting``, ``no_connection``, ...)."""
    outages: int
    """Outages survived (ended by a success) since the guard was made."""


@dataclass(frozen=True)
class OutageSpent:
    """What a guard knows when an outage outlasted its budget: the fields of the error the
    service's :attr:`OutageRules.spent` makes of it."""

    subject: str
    """The service as the guard names it (a masked DSN, the bootstrap servers)."""
    operation: str
    outage_s: float
    budget_s: float
    attempts: int
    """Failed attempts in this outage, over every call that met it."""
    error: str
    """The last error, on one line."""


@dataclass(frozen=True)
class OutageRules:
    """What counts as an outage of one service, and how a :class:`ServiceGuard` tells of it."""

    classify: Callable[[Exception], str | None]
    """The retries-by-kind label of an error that means the service is unreachable; None for
    any other error (raised at once: waiting would not mend it)."""
    spent: Callable[[OutageSpent], Exception]
    """The error raised when an outage outlasts the budget (the last failure is its cause)."""
    unavailable_event: str
    """The warning logged per failed attempt (``catalog_unavailable``)."""
    available_event: str
    """The line logged by the first success after an outage (``catalog_available``)."""
    subject_field: str
    """The log field naming the service (``catalog``, ``bootstrap_servers``)."""
    logger: str
    """The stdlib logger the lines go to."""
    log_last_failure: bool = True
    """Log the attempt that spends the budget too (without ``wait_s``: none follows). Off where
    the error the process ends with reports it anyway, so every line is a retry."""


@dataclass
class _State:
    last_success: float | None = None
    outage_started: float | None = None
    outage_attempts: int = 0
    outages: int = 0
    retries: Counter[str] = field(default_factory=Counter)


class ServiceGuard:
    """Runs one process's calls to one service, waiting out its outages within one budget.

    Thread-safe: threads that share a guard (the ingest coordinator, the lease heartbeat and
    the worker) share one outage and one budget.
    """

    def __init__(
        self,
        subject: str,
        policy: OutagePolicy,
        rules: OutageRules,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        log: _Log | None = None,
    ) -> None:
        """``subject`` names the service in log lines and errors: never a secret (pass a DSN
        with its password masked). ``log`` replaces the rules' logger (tests); without it the
        logger is looked up at each line, so a guard holds no logger of its own."""
        self.subject = subject
        self.policy = policy
        self.rules = rules
        self._clock = clock
        self._sleep = sleep
        self._log = log
        # the pause between attempts is the retry policy's: full jitter, doubling to a cap
        self._backoff = RetryPolicy(
            base_delay=policy.base_delay, max_delay=policy.max_delay, rand=rand
        )
        self._lock = threading.Lock()
        self._state = _State()

    def call(self, operation: str, fn: Callable[[], T]) -> T:
        """``fn()``, tried again while the service is unreachable and the budget lasts.

        Raises:
            Exception: the rules' ``spent`` error once the outage outlasted the budget (the last
                error is its cause); whatever ``fn`` raised that is not an outage, at once.
        """
        return self._run(operation, fn, self.rules.classify)

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

    def _run(
        self, operation: str, fn: Callable[[], T], classify: Callable[[Exception], str | None]
    ) -> T:
        """The one outage loop: attempt, classify a failure, pause or give up."""
        attempt = 0
        while True:
            attempt += 1
            began = self._clock()
            try:
                with _budget_left(self._left(began)):
                    result = fn()
            except Exception as exc:
                kind = classify(exc)
                if kind is None:
                    raise
                pause = self._failed(operation, kind, exc, began, attempt)
                if pause is None:
                    raise self._spent(operation, exc) from exc
                self._sleep(pause)
                continue
            self._succeeded(operation)
            return result

    def _left(self, now: float) -> float:
        """Seconds left of the current outage's budget (all of it while the service answers)."""
        with self._lock:
            started = self._state.outage_started
        return self.policy.budget - (0.0 if started is None else now - started)

    def _failed(
        self, operation: str, kind: str, error: Exception, began: float, attempt: int
    ) -> float | None:
        """Count and log one failed attempt (the ``attempt``-th of this call); the pause before
        the next one, or None when it would start after the budget. The outage starts when its
        first failed attempt began."""
        now = self._clock()
        with self._lock:
            state = self._state
            if state.outage_started is None:
                state.outage_started = began
            state.outage_attempts += 1
            state.retries[kind] += 1
            attempts, waited = state.outage_attempts, now - state.outage_started
        pause = max(self.policy.min_delay, self._backoff.delay(attempt))
        retrying = waited + pause <= self.policy.budget
        if retrying or self.rules.log_last_failure:
            pause_field = {"wait_s": round(pause, 1)} if retrying else {}
            self._logger().warning(
                self.rules.unavailable_event,
                **{self.rules.subject_field: self.subject},
                operation=operation,
                attempt=attempts,
                **pause_field,
                waited_s=round(waited, 1),
                budget_s=self.policy.budget,
                kind=kind,
                error=one_line(error),
            )
        return pause if retrying else None

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
            self._logger().info(
                self.rules.available_event,
                **{self.rules.subject_field: self.subject},
                operation=operation,
                outage_s=round(now - started, 1),
                attempts=attempts,
            )

    def _spent(self, operation: str, last: Exception) -> Exception:
        now = self._clock()
        with self._lock:
            started = self._state.outage_started
            attempts = self._state.outage_attempts
        return self.rules.spent(
            OutageSpent(
                subject=self.subject,
                operation=operation,
                outage_s=0.0 if started is None else now - started,
                budget_s=self.policy.budget,
                attempts=attempts,
                error=one_line(last),
            )
        )

    def _logger(self) -> _Log:
        return self._log or get_logger(self.rules.logger)


def _catalog_outage(spent: OutageSpent) -> CatalogOutageError:
    return CatalogOutageError(
        catalog=spent.subject,
        operation=spent.operation,
        outage_s=spent.outage_s,
        budget_s=spent.budget_s,
        attempts=spent.attempts,
        error=spent.error,
    )


def _retry_kind(error: Exception, retry_also: tuple[type[Exception], ...] = ()) -> str | None:
    """The retries-by-kind label of a catalog error worth waiting out; None for any other."""
    if isinstance(error, CatalogOutageError):
        return None  # a guard further in already gave up: the budget is spent
    if isinstance(error, CatalogUnavailableError):
        if error.kind is None:
            return "unavailable"  # a commit or connect that gave up on its own retries
        return error.kind.value if error.kind.is_outage else None
    if retry_also and isinstance(error, retry_also):
        return _snake(type(error).__name__)
    return None


CATALOG_OUTAGES = OutageRules(
    classify=_retry_kind,
    spent=_catalog_outage,
    unavailable_event="catalog_unavailable",
    available_event="catalog_available",
    subject_field="catalog",
    logger="lakestream.catalog.outage",
)
"""The catalog's outages: the database unreachable, restarting, or out of connections."""


class OutageGuard(ServiceGuard):
    """Runs catalog calls of one process, waiting out catalog outages within one budget."""

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
        super().__init__(
            catalog, policy, CATALOG_OUTAGES, clock=clock, sleep=sleep, rand=rand, log=log
        )

    @property
    def catalog(self) -> str:
        return self.subject

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
        compaction's ``CommitStateUnknown``: its rerun resolves the task's key first). A budget
        of 0 is no guard at all: ``fn``'s own error is raised, not :class:`CatalogOutageError`.

        Raises:
            CatalogOutageError: the outage outlasted the budget (the last error is its cause).
            Exception: whatever ``fn`` raised that is not an outage, at once.
        """
        if self.policy.budget <= 0:
            return fn()
        return self._run(operation, fn, lambda error: _retry_kind(error, retry_also))


def one_line(error: BaseException) -> str:
    """An error's message on one line, for a log field."""
    return " ".join(str(error).split()) or type(error).__name__


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
