"""Options of change reads from Spark: which read is a change read, what a batch and a stream
accept, and the one-line refusals a user sees at ``load()``."""

from __future__ import annotations

import datetime as dt

import pytest

from ingest.spark_read.errors import ReadOptionError
from ingest.spark_read.options import (
    check_change_options,
    is_change_read,
    parse_options,
    parse_stream_options,
)

BASE = {"table": "shop.orders", "catalog": "postgresql://reader:s3cret@db/lake"}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, False),
        ({"versionAsOf": "3"}, False),
        ({"readChangeFeed": "true"}, True),
        ({"READCHANGEFEED": "true"}, True),
        ({"readChangeFeed": "false"}, False),
        ({"startingVersion": "0"}, True),
        ({"startingTimestamp": "2026-12-01"}, True),
        ({"consumerId": "x"}, True),
        ({"maxVersionsPerTrigger": "2"}, True),
    ],
)
def test_a_change_read_is_told_by_its_options(extra, expected):
    assert is_change_read({**BASE, **extra}) is expected


def test_a_batch_change_read_takes_a_range():
    read = parse_options({**BASE, "startingVersion": "3", "endingVersion": "5"})
    assert read.changes is not None
    assert (read.changes.start_version, read.changes.end_version) == (3, 5)
    assert parse_options(BASE).changes is None
    at = parse_options({**BASE, "startingTimestamp": "2026-12-01T10:00:00"}).changes
    assert at is not None and at.start_time == dt.datetime(2026, 12, 1, 10, tzinfo=dt.UTC)


def test_a_stream_starts_from_the_snapshot_unless_told_otherwise():
    default = parse_stream_options({**BASE, "readChangeFeed": "true"}).changes
    assert default is not None and default.snapshot_first
    latest = parse_stream_options({**BASE, "startingVersion": "LATEST"}).changes
    assert latest is not None and latest.latest and not latest.snapshot_first
    limited = parse_stream_options(
        {**BASE, "startingVersion": "7", "maxRowsPerTrigger": "1000", "consumerId": " idx "}
    ).changes
    assert limited is not None
    assert (limited.start_version, limited.max_rows, limited.consumer_id) == (7, 1000, "idx")


@pytest.mark.parametrize(
    ("parse", "extra", "option", "message"),
    [
        (parse_options, {"maxVersionsPerTrigger": "1"}, "maxVersionsPerTrigger", "readStream"),
        (parse_options, {"consumerId": "x"}, "consumerId", "readStream only"),
        (parse_options, {"readChangeFeed": "true"}, "startingVersion", "needs a version"),
        (parse_options, {"startingVersion": "latest"}, "startingVersion", "needs a version"),
        (parse_options, {"endingVersion": "3"}, "endingVersion", "needs startingVersion"),
        (parse_options, {"readChangeFeed": "maybe"}, "readChangeFeed", "true or false"),
        (
            parse_options,
            {"startingVersion": "1", "readChangeFeed": "false"},
            "readChangeFeed",
            "a starting point",
        ),
        (
            parse_options,
            {"startingVersion": "1", "versionAsOf": "1"},
            "versionAsOf",
            "startingVersion",
        ),
        (
            parse_options,
            {"startingVersion": "1", "startingTimestamp": "2026-01-01"},
            "startingVersion",
            "not both",
        ),
        (parse_options, {"startingVersion": "-2"}, "startingVersion", "start at 0"),
        (parse_stream_options, {}, "readChangeFeed", "add .option"),
        (
            parse_stream_options,
            {"startingVersion": "1", "versionAsOf": "2"},
            "versionAsOf",
            "batch",
        ),
        (parse_stream_options, {"maxRowsPerTrigger": "0"}, "maxRowsPerTrigger", "positive"),
        (parse_stream_options, {"consumerId": "  "}, "consumerId", "1 to 200"),
    ],
)
def test_bad_change_options_are_refused_naming_the_option(parse, extra, option, message):
    with pytest.raises(ReadOptionError, match=message) as caught:
        parse({**BASE, **extra})
    assert caught.value.option == option
    assert "s3cret" not in str(caught.value)


def test_load_checks_a_change_read_as_the_read_it_can_be():
    # batch-only options: checked as a batch at load
    with pytest.raises(ReadOptionError, match="startingVersion"):
        check_change_options({**BASE, "startingVersion": "1", "versionAsOf": "1"})
    # otherwise as a stream (a batch read re-checks its options whole when it runs)
    assert check_change_options({**BASE, "readChangeFeed": "true"}).changes is not None
