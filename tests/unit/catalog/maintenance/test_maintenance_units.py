"""Pure pieces of maintenance: durations, the expiry horizon, TTL's expiry test."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.maintenance.durations import format_duration, parse_duration
from catalog.maintenance.horizon import choose_horizon
from catalog.maintenance.ttl import expired


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("45s", 45), ("30m", 1800), ("1h", 3600), ("7d", 604800), ("2w", 1209600),
     ("1.5h", 5400), (" 10 M ", 600)],
)  # fmt: skip
def test_durations(text: str, seconds: float):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "7", "7x", "-1h", "h", "1 day", "1h30m"])
def test_bad_durations_say_how_to_write_one(text: str):
    with pytest.raises(ValueError, match=r"e\.g\. 30s, 15m, 1h, 7d, 2w"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**8))
def test_format_and_parse_round_trip(seconds: int):
    value = dt.timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


@given(
    latest=st.integers(min_value=0, max_value=1000),
    oldest_gap=st.integers(min_value=0, max_value=1000),
    retain_last=st.integers(min_value=1, max_value=1200),
    cut_gap=st.none() | st.integers(min_value=0, max_value=1000),
    keep_gap=st.none() | st.integers(min_value=0, max_value=1000),
)
def test_horizon_keeps_every_rule(latest, oldest_gap, retain_last, cut_gap, keep_gap):
    oldest = max(0, latest - oldest_gap)
    cut = None if cut_gap is None else max(oldest, latest - cut_gap)
    keep = None if keep_gap is None else max(0, latest - keep_gap)
    h = choose_horizon(
        latest=latest, oldest=oldest, retain_last=retain_last, version_at_cut=cut, keep=keep
    )
    assert oldest <= h <= latest  # never backwards, never the latest
    assert h == oldest or latest - h + 1 >= retain_last  # the newest retain_last stay
    assert h == oldest or (cut is not None and h <= cut)  # the version a read at the cut sees
    assert h == oldest or keep is None or h <= keep
    # and it expires as much as the rules allow
    bound = min(latest - retain_last + 1, cut if cut is not None else oldest)
    if keep is not None:
        bound = min(bound, keep)
    assert h == max(oldest, bound)


def test_retain_last_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        choose_horizon(latest=5, oldest=0, retain_last=0, version_at_cut=5)


def test_ttl_expiry_of_dates_and_timestamps():
    cutoff = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
    assert expired(dt.date(2026, 11, 21), cutoff)
    assert not expired(dt.date(2026, 11, 22), cutoff)  # the cutoff's own day is kept
    assert expired(dt.datetime(2026, 11, 22, 11, 59, tzinfo=dt.UTC), cutoff)
    assert not expired(dt.datetime(2026, 11, 22, 12, 0), cutoff)  # naive: taken as UTC
    assert not expired(None, cutoff)
