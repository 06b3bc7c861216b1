"""Lag maths and the held summary that ``lakestream status`` and ``/metrics`` show."""

from __future__ import annotations

import datetime as dt

from ingest.freshness import Held, partition_lags
from ingest.kafka.offsets import PartitionId

P0, P1, P2 = PartitionId("t", 0), PartitionId("t", 1), PartitionId("t", 2)


def test_lag_is_end_minus_committed_and_its_age_is_the_next_records():
    lags = partition_lags(
        {P0: 40, P1: 10},
        {P0: (0, 100), P1: (0, 10)},
        next_times_ms={P0: 1_000},
        now_ms=31_000,
    )
    assert [(p.lag, p.lag_s) for p in lags] == [(60, 30.0), (0, 0.0)]


def test_a_partition_never_committed_lags_from_its_earliest_offset():
    (lag,) = partition_lags({}, {P2: (5, 12)}, now_ms=0)
    assert (lag.committed, lag.lag, lag.lag_s) == (None, 7, None)


def test_offsets_beyond_the_end_or_below_the_start_never_give_odd_lags():
    """A recreated topic (committed past its end) is not ahead; records deleted by retention
    (committed below the earliest) are not waiting to be read."""
    lags = partition_lags({P0: 500, P1: 2}, {P0: (0, 10), P1: (8, 10)}, now_ms=0)
    assert [p.lag for p in lags] == [0, 2]


def test_held_summary_reads_the_sinks_job_state():
    now = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
    held = Held.from_job_state(
        {
            "transactions": {"ignored": "the book itself"},
            "held": {
                "transactions": 3,
                "events": 7,
                "oldest_first_seen": "2026-11-24T11:55:00+00:00",
                "blocking": "571:9",
            },
        }
    )
    assert held is not None
    assert (held.transactions, held.events, held.blocking) == (3, 7, "571:9")
    assert held.oldest_age_s(now) == 300.0


def test_no_held_state_is_none_and_nothing_held_has_no_age():
    assert Held.from_job_state(None) is None and Held.from_job_state({"other": 1}) is None
    empty = Held.from_job_state(
        {"held": {"transactions": 0, "events": 0, "oldest_first_seen": None, "blocking": None}}
    )
    assert empty is not None and empty.oldest_age_s(dt.datetime.now(dt.UTC)) is None
