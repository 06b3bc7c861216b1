"""The dead-letter guard's verdict on a batch: which topic, if any, makes it fail."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.errors import IngestError
from ingest.sink.guard import DeadLetterGuard, TooManyDeadLetters
from ingest.sink.report import TaskReport, TopicFigures, topic_figures


def figures(records: int, **dead: int) -> TopicFigures:
    return TopicFigures(
        records=records,
        dead=dead,
        examples={reason: f"shop.items: column 'price': bad {reason}" for reason in dead},
    )


def test_a_topic_mostly_dead_letters_fails_the_batch_naming_topic_reason_and_remedy() -> None:
    verdict = DeadLetterGuard().check(
        {"good": figures(1000, malformed_json=3), "bad": figures(40, no_schema=30, bad_key=2)}
    )
    assert isinstance(verdict, TooManyDeadLetters) and isinstance(verdict, IngestError)
    assert (verdict.topic, verdict.reason, verdict.dead_letters, verdict.records) == (
        "bad",
        "no_schema",
        32,
        40,
    )
    line = str(verdict)
    assert "\n" not in line
    assert "topic 'bad': 32 of 40 records" in line
    assert "commonest reason no_schema (shop.items: column 'price': bad no_schema)" in line
    assert "tables.declare" in line and "dead_letters.max_ratio" in line


def test_healthy_topics_do_not_hide_a_dead_one() -> None:
    """Judged per topic: 30 dead letters among 10,040 records of the batch still fail it."""
    batch = {"big": figures(10_000), "bad": figures(40, type_mismatch=30)}
    verdict = DeadLetterGuard().check(batch)
    assert verdict is not None and verdict.topic == "bad"
    assert "fix the column in tables.declare" in str(verdict)


def test_exactly_at_the_ratio_passes() -> None:
    assert DeadLetterGuard(max_ratio=0.5).check({"t": figures(40, no_schema=20)}) is None
    assert DeadLetterGuard(max_ratio=0.5).check({"t": figures(40, no_schema=21)}) is not None


def test_a_lone_poison_message_does_not_stop_the_job() -> None:
    assert DeadLetterGuard().check({"quiet": figures(1, malformed_json=1)}) is None
    assert DeadLetterGuard(min_count=1).check({"quiet": figures(1, malformed_json=1)}) is not None


def test_null_turns_the_guard_off() -> None:
    assert DeadLetterGuard(max_ratio=None).check({"t": figures(100, no_schema=100)}) is None


@pytest.mark.parametrize("bad", [{"max_ratio": 1.5}, {"max_ratio": -0.1}, {"min_count": 0}])
def test_a_guard_that_cannot_work_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        DeadLetterGuard(**bad)  # type: ignore[arg-type]


def test_task_reports_add_up_per_topic() -> None:
    reports = [
        TaskReport(topics={"a": figures(10, no_schema=4)}),
        TaskReport(topics={"a": figures(5, no_schema=1, bad_key=2), "b": figures(7)}),
    ]
    total = topic_figures(reports)
    assert total["a"].records == 15 and total["a"].dead == {"no_schema": 5, "bad_key": 2}
    assert total["b"] == figures(7)


topic_counts = st.integers(min_value=0, max_value=500).flatmap(
    lambda records: st.tuples(st.just(records), st.integers(min_value=0, max_value=records))
)


@given(
    batch=st.dictionaries(st.sampled_from("abcdef"), topic_counts, max_size=6),
    ratio=st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
    min_count=st.integers(min_value=1, max_value=20),
)
def test_the_batch_fails_exactly_when_some_topic_is_over_both_limits(
    batch: dict[str, tuple[int, int]], ratio: float | None, min_count: int
) -> None:
    verdict = DeadLetterGuard(max_ratio=ratio, min_count=min_count).check(
        {topic: figures(records, no_schema=dead) for topic, (records, dead) in batch.items()}
    )
    over = {
        topic
        for topic, (records, dead) in batch.items()
        if ratio is not None and dead >= min_count and dead > ratio * records
    }
    assert (verdict is not None) == bool(over)
    if verdict is not None:
        assert verdict.topic in over
        worst = max(batch[t][1] / batch[t][0] for t in over)
        assert verdict.dead_letters / verdict.records == worst
