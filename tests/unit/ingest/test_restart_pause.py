"""The pause before a query is started again after Spark's 10 s worker timeout: random, within
its bound, longer with each attempt - jobs that timed out together must not all start again at
the same instant (they would time out together again)."""

from __future__ import annotations

import statistics

from ingest.job import RESTART_PAUSE_S, START_ATTEMPTS, restart_pause


def test_each_pause_is_within_its_attempts_bound() -> None:
    for attempt in range(1, START_ATTEMPTS):
        pauses = [restart_pause(attempt) for _ in range(500)]
        assert all(0 <= p <= RESTART_PAUSE_S * attempt for p in pauses)


def test_jobs_failing_together_spread_out_and_more_so_each_time() -> None:
    first = [restart_pause(1) for _ in range(500)]
    third = [restart_pause(3) for _ in range(500)]
    assert statistics.pstdev(first) > RESTART_PAUSE_S / 10  # not one instant for all
    assert statistics.mean(third) > statistics.mean(first)
