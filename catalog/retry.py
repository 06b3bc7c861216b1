"""A pure, frozen retry policy: bounded attempts, exponential backoff with full jitter, deadline.

:meth:`RetryPolicy.run` is lakestream's one rebase-and-retry loop: ``Table.append`` / ``upsert``
/ ``delete`` / ``update`` / ``evolve_schema``, partition TTL, the ingest sink and the compactor
commit through it, each with its own policy and its own idea of what is worth another attempt
(usually :func:`lost_to_concurrent_write`). The clock, sleep and random source are injectable so
that tests prove retries happen (and stop) without waiting for real time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from catalog.errors import CommitConflict, ConflictKind

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    base_delay: float = 0.01
    max_delay: float = 1.0
    deadline: float = 60.0
    """Seconds from the first attempt after which no new attempt starts."""
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    rand: Callable[[], float] = field(default=random.random, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy needs at least one attempt")
        if self.base_delay < 0 or self.max_delay < self.base_delay or self.deadline <= 0:
            raise ValueError("retry delays must satisfy 0 <= base_delay <= max_delay, deadline > 0")

    def delay(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max_delay, base_delay * 2**attempt))."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return float(ceiling * self.rand())

    def attempts_iter(self) -> Iterator[int]:
        """Yield attempt numbers 1, 2, ...; sleeps between them; stops at the bound or deadline.

        The caller breaks out on success; when the iterator ends, the last failure stands.
        """
        start = self.clock()
        for attempt in range(1, self.attempts + 1):
            yield attempt
            if attempt == self.attempts:
                return
            pause = self.delay(attempt)
            if self.clock() + pause - start > self.deadline:
                return
            self.sleep(pause)

    def run(self, fn: Callable[[int], T], *, retry_if: Callable[[Exception], bool]) -> T:
        """``fn(attempt)`` until it returns. An error ``retry_if`` accepts is tried again after
        a jittered pause while the policy lasts; any other error is raised at once.

        ``fn`` gets the attempt number (from 1), so a caller rebases before trying again: it
        re-reads the table's version and re-stages, or moves the same files onto it.

        Raises:
            Exception: the last error ``retry_if`` accepted, once the attempts or the deadline
                are spent (typed as ``fn`` raised it, e.g. :class:`CommitConflict`); any error
                it does not accept, at once.
        """
        last: Exception | None = None
        for attempt in self.attempts_iter():
            try:
                return fn(attempt)
            except Exception as exc:
                if not retry_if(exc):
                    raise
                last = exc
        assert last is not None  # the iterator yields at least one attempt
        raise last


NO_RETRY = RetryPolicy(attempts=1)

REBASE_RETRY = RetryPolicy(attempts=5, base_delay=0.01, max_delay=0.5, deadline=60.0)
"""Row writes and schema changes that lost to a concurrent commit: rebase, try again soon."""


def lost_to_concurrent_write(error: Exception) -> bool:
    """A commit that lost to a concurrent write: rebased on the new version it may land."""
    return isinstance(error, CommitConflict) and error.kind is ConflictKind.CONCURRENT_WRITE
