"""The Kafka source's pure parts: option checks, batch planning, range ends, Arrow conversion.

No broker and no Spark: librdkafka ``Message`` objects are built directly, which is how the
reader's handling of gaps, end-of-partition events and lost offsets is pinned down beyond what
a test can provoke from a real broker.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given
from hypothesis import strategies as st

from ingest.kafka.errors import DataLossError, KafkaOptionError
from ingest.kafka.offsets import (
    OffsetRange,
    PartitionId,
    allocate,
    from_json,
    group_ranges,
    next_end,
    plan_ranges,
    to_json,
)
from ingest.kafka.options import Emit, Subscription, parse_options
from ingest.kafka.reader import _Progress
from ingest.kafka.schema import arrow_schema, kafka_schema, record_batch

A0, A1, B0 = PartitionId("a", 0), PartitionId("a", 1), PartitionId("b", 0)


def _record(offset: int, value: bytes = b"v", timestamp: tuple[int, int] = (1, 1000)) -> Message:
    return Message(
        topic="a", partition=0, offset=offset, key=b"k", value=value, timestamp=timestamp
    )


def _event(code: int, offset: int) -> Message:
    return Message(topic="a", partition=0, offset=offset, error=KafkaError(code))


# -- options -------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_kafka_settings_pass_through() -> None:
    parsed = parse_options(
        {
            "kafka.bootstrap.servers": "h:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.password": "hunter2",
            "subscribepattern": "cdc\\..*",
            "STARTINGOFFSETS": "earliest",
            "maxoffsetspertrigger": "500",
        }
    )
    assert parsed.kafka_config["security.protocol"] == "SASL_SSL"
    assert parsed.subscription == Subscription(pattern="cdc\\..*")
    assert (parsed.starting, parsed.max_offsets_per_trigger) == ("earliest", 500)
    assert "hunter2" not in repr(parsed)
    assert parsed.redacted_kafka_config()["sasl.password"] == "***"


def test_emit_defaults_to_records_and_takes_ranges() -> None:
    base = {"kafka.bootstrap.servers": "h:9092", "subscribe": "t"}
    assert parse_options(base).emit is Emit.RECORDS
    assert parse_options({**base, "EMIT": "Ranges"}).emit is Emit.RANGES
    with pytest.raises(KafkaOptionError, match=r"emit.*records, ranges"):
        parse_options({**base, "emit": "rows"})


def test_starting_offsets_json_is_parsed_and_checked_against_the_subscription() -> None:
    parsed = parse_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "a, b",
            "startingOffsets": '{"a": {"1": 7}}',
        }
    )
    assert parsed.subscription.topics == ("a", "b")
    assert parsed.starting == {A1: 7}
    with pytest.raises(KafkaOptionError, match="not subscribed"):
        parse_options(
            {
                "kafka.bootstrap.servers": "h:1",
                "subscribe": "a",
                "startingOffsets": '{"c": {"0": 1}}',
            }
        )
    with pytest.raises(KafkaOptionError, match="must be >= 0"):
        parse_options(
            {
                "kafka.bootstrap.servers": "h:1",
                "subscribe": "a",
                "startingOffsets": '{"a": {"0": -3}}',
            }
        )


def test_pattern_matches_whole_names_and_skips_internal_topics() -> None:
    pattern = Subscription(pattern="cdc\\..*")
    assert pattern.matches("cdc.orders")
    assert not pattern.matches("x.cdc.orders")
    assert not Subscription(pattern=".*").matches("__consumer_offsets")


# -- planning ------------------------------------------------------------------------------


def test_offsets_json_is_sorted_and_round_trips() -> None:
    offsets = {B0: 3, A1: 2, A0: 1}
    assert list(to_json(offsets)) == ["a", "b"]
    assert list(to_json(offsets)["a"]) == ["0", "1"]
    assert from_json(to_json(offsets)) == offsets


@given(
    st.dictionaries(st.sampled_from([A0, A1, B0]), st.integers(0, 10_000), min_size=1),
    st.integers(1, 20_000),
)
def test_allocate_never_exceeds_the_limit_or_what_a_partition_has(
    available: dict[PartitionId, int], limit: int
) -> None:
    shares = allocate(available, limit)
    assert sum(shares.values()) == min(limit, sum(available.values()))
    assert all(0 <= shares[pid] <= available[pid] for pid in available)


def test_next_end_starts_new_partitions_at_earliest_and_keeps_vanished_ones() -> None:
    start = {A0: 10, B0: 4}  # b-0 has vanished from the newest offsets
    newest = {A0: 30, A1: 8}
    end = next_end(start, newest, earliest={A1: 2}, limit=None)
    assert end == {A0: 30, A1: 8, B0: 4}
    limited = next_end(start, newest, earliest={A1: 2}, limit=13)
    assert limited == {A0: 20, A1: 5, B0: 4}  # 20 and 6 available, 13 shared by backlog


def test_plan_ranges_reads_new_or_reset_partitions_from_earliest() -> None:
    ranges = plan_ranges({A0: 5, B0: 9}, {A0: 8, A1: 4, B0: 3}, earliest=lambda pid: 1)
    assert ranges == [
        OffsetRange("a", 0, 5, 8),
        OffsetRange("a", 1, 1, 4),
        OffsetRange("b", 0, 1, 3),
    ]
    assert plan_ranges({A0: 5}, {A0: 5}, earliest=lambda pid: 0) == []


_RANGE = st.builds(
    OffsetRange,
    st.sampled_from(["a", "b", "s.transaction"]),
    st.integers(0, 3),
    st.just(0),
    st.integers(1, 50),
)


@given(st.lists(_RANGE, max_size=8, unique_by=lambda r: (r.topic, r.partition)))
def test_ranges_of_shared_task_topics_ride_with_the_smallest_other_range(
    ranges: list[OffsetRange],
) -> None:
    groups = group_ranges(ranges, lambda topic: topic.endswith(".transaction"))

    flat = [rng for group in groups for rng in group]
    assert sorted(flat, key=repr) == sorted(ranges, key=repr), "every range exactly once"
    own = [rng for rng in ranges if not rng.topic.endswith(".transaction")]
    riding = [rng for rng in ranges if rng.topic.endswith(".transaction")]
    if not own:
        assert groups == ([tuple(riding)] if riding else [])
        return
    assert [group[0] for group in groups] == own, "a partition per other range, in order"
    host = next(group for group in groups if len(group) > 1) if riding else None
    if host is not None:
        assert host[0].size == min(rng.size for rng in own)
        assert list(host[1:]) == riding


def test_options_name_shared_task_topics_by_a_whole_name_regex() -> None:
    base = {"kafka.bootstrap.servers": "h:9092", "subscribe": "s.t,s.transaction"}
    assert not parse_options(base).shares_task("s.transaction")
    shared = parse_options({**base, "SHAREDTASKPATTERN": r".+\.transaction"})
    assert shared.shares_task("s.transaction")
    assert not shared.shares_task("s.transactions")
    with pytest.raises(KafkaOptionError, match=r"sharedTaskPattern.*not a valid regex"):
        parse_options({**base, "sharedTaskPattern": "(s"})


# -- range ends ----------------------------------------------------------------------------


def test_a_contiguous_run_is_taken_whole() -> None:
    progress = _Progress(OffsetRange("a", 0, 10, 13), fail_on_data_loss=True)
    batch = [_record(10), _record(11), _record(12)]
    assert progress.accept(batch) == batch
    assert progress.done and progress.records == 3


def test_gaps_are_skipped_and_records_past_the_end_dropped() -> None:
    progress = _Progress(OffsetRange("a", 0, 0, 6), fail_on_data_loss=True)
    kept = progress.accept([_record(0), _record(2), _record(5), _record(6), _record(7)])
    assert [m.offset() for m in kept] == [0, 2, 5]
    assert progress.done and progress.gaps == 3


def test_end_of_partition_at_or_past_the_end_completes_a_range_with_a_trailing_gap() -> None:
    progress = _Progress(OffsetRange("a", 0, 0, 4), fail_on_data_loss=True)
    progress.accept([_record(0), _record(1), _event(KafkaError._PARTITION_EOF, 2)])
    assert not progress.done, "the broker's end (2) is before the range end: keep waiting"
    progress.accept([_record(2), _event(KafkaError._PARTITION_EOF, 4)])  # offset 3: a marker
    assert progress.done and progress.records == 3


def test_an_offset_reset_is_data_loss_unless_accepted() -> None:
    lost = _event(KafkaError._AUTO_OFFSET_RESET, -1001)
    with pytest.raises(DataLossError, match="a-0"):
        _Progress(OffsetRange("a", 0, 0, 4), fail_on_data_loss=True).accept([lost])
    tolerant = _Progress(OffsetRange("a", 0, 0, 4), fail_on_data_loss=False)
    assert tolerant.accept([lost]) == []


# -- Arrow ---------------------------------------------------------------------------------


def test_record_batch_has_the_schema_spark_checks_for() -> None:
    target = arrow_schema(kafka_schema(include_headers=True))
    messages = [
        Message(
            topic="a",
            partition=2,
            offset=7,
            key=None,
            value=b"x",
            timestamp=(0, 0),
            headers=[("h", b"1"), ("h", None)],
        ),
        Message(
            topic="a", partition=2, offset=8, key=b"k", value=b"y", timestamp=(2, 1_700_000_000_123)
        ),
    ]
    batch = record_batch(messages, target)
    assert batch.schema.equals(target)
    rows = batch.to_pylist()
    assert rows[0]["timestamp"] is None
    assert rows[1]["timestamp"].timestamp() == 1_700_000_000.123
    assert [r["timestampType"] for r in rows] == [-1, 1]
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}, {"key": "h", "value": None}]
    assert (rows[0]["key"], rows[0]["partition"], rows[0]["offset"]) == (None, 2, 7)
