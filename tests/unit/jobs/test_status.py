"""How ``lakestream status`` and ``tables history`` write positions, watermarks and ages."""

from __future__ import annotations

import datetime as dt

from catalog import SourcePoint, SourceWatermark
from ingest.freshness import Held, JobFreshness, PartitionLag
from ingest.kafka.offsets import PartitionId
from jobs.status import render, short_position, to_json, watermark_text

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
POINT = SourcePoint(
    position=f"{0x16B3748:016x}{0:016x}",
    source_time=NOW - dt.timedelta(minutes=2, seconds=5),
    transaction="571:53195829",
)


def test_a_position_is_shown_as_its_two_halves_without_leading_zeros():
    assert short_position(POINT.position) == "16b3748:0"
    assert short_position(f"{0:016x}{0x2A:016x}") == "0:2a"


def test_a_watermark_cell_names_time_and_exceptions():
    assert watermark_text(POINT) == "16b3748:0 @2026-11-24 11:57:55"
    assert watermark_text(POINT, ("a", "b")).endswith(" exceptions:2")
    assert watermark_text(None) == "-"


def status(**changes: object) -> JobFreshness:
    base = JobFreshness(
        job="bank",
        batch_id=41,
        committed_at=NOW - dt.timedelta(seconds=12),
        watermark=SourceWatermark(batch=POINT),
        held=Held(2, 5, NOW - dt.timedelta(hours=1, minutes=2), "571:53195900"),
        lags=[PartitionLag(PartitionId("orders", 0), 10, 25, 15, 3725.0)],
    )
    return JobFreshness(**{**base.__dict__, **changes})


def test_the_screen_tells_batch_watermark_held_and_lag():
    screen = "\n".join(render(status(), NOW, brokers=True))
    assert "41 committed 2026-11-24 11:59:48 UTC (12s ago)" in screen
    assert (
        "16b3748:0 @2026-11-24 11:57:55 (2m05s behind the source), transaction 571:5319" in screen
    )
    assert "2 transaction(s), 5 event(s), oldest for 1h02m, blocking: 571:53195900" in screen
    assert "15 record(s) in all" in screen and "1h02m" in screen.splitlines()[-1]


def test_an_eventual_job_says_it_has_no_watermark_and_holds_nothing():
    screen = "\n".join(render(status(watermark=None, held=None), NOW, brokers=False))
    assert "no source watermark" in screen and "nothing held" in screen
    assert "--bootstrap-servers" in screen


def test_json_carries_the_full_point_and_ages():
    found = to_json(status(), NOW)
    assert found["source_watermark"]["batch"]["position"] == POINT.position
    assert found["source_watermark_age_s"] == 125.0 and found["held"]["oldest_age_s"] == 3720.0
    assert found["lag"] == [
        {
            "topic": "orders",
            "partition": 0,
            "committed": 10,
            "end": 25,
            "lag": 15,
            "lag_s": 3725.0,
        }
    ]
