"""A pure, frozen retry policy: bounded attempts, exponential backoff with full jitter, deadline.

The clock, sleep and random source are injectable so that tests prove retries happen (and stop)
without waiting for real time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

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
        """``fn(attempt)`` until it returns. An error ``retry_if`` accepts is tried again while
        the policy lasts, then raised; any other error is raised at once.

        ``fn`` gets the attempt number, so a caller can rebase before trying again.
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
