"""Broker outages and failures as the job reports them: bounded, logged retries; librdkafka's
lines through logging, rate limited; a failed query as one line, not a Java stack.

No broker: the guard gets an injected clock and sleep, librdkafka a closed port.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from ingest.job import query_failure
from ingest.kafka.errors import BrokerQueryError, BrokerUnavailableError
from ingest.kafka.options import KafkaOptionError, parse_options
from ingest.kafka.outage import BrokerGuard, BrokerOutagePolicy, is_unreachable
from ingest.logs import KAFKA_LOGGER, kafka_logger
from tests.fixtures.logcapture import capture_events
from tests.fixtures.racing import FakeTime

UNREACHABLE = KafkaException(KafkaError(KafkaError._TRANSPORT))


def guard(time: FakeTime, budget: float) -> BrokerGuard:
    policy = BrokerOutagePolicy(budget=budget, base_delay=1.0, max_delay=4.0, call_timeout=2.0)
    return BrokerGuard(
        "b1:9092,b2:9092", policy, clock=time.clock, sleep=time.sleep, rand=lambda: 1
    )


def failing(time: FakeTime, failures: int) -> object:
    """A broker call that times out ``failures`` times (2 s each), then answers."""
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] <= failures:
            time.now += 2.0
            raise BrokerQueryError("could not list topics") from UNREACHABLE
        return "metadata"

    return call


def test_an_outage_within_the_budget_is_waited_out_with_one_warning_per_retry() -> None:
    time = FakeTime()
    with capture_events() as events:
        assert guard(time, budget=30).call("list topics", failing(time, 3)) == "metadata"  # type: ignore[arg-type]
    retries = [e for e in events if e["event"] == "kafka_unavailable"]
    assert [(r["attempt"], r["wait_s"]) for r in retries] == [(1, 1.0), (2, 2.0), (3, 4.0)]
    assert all(r["bootstrap_servers"] == "b1:9092,b2:9092" for r in retries)
    (back,) = [e for e in events if e["event"] == "kafka_available"]
    assert back["attempts"] == 3 and back["outage_s"] == 13.0


def test_an_outage_beyond_the_budget_fails_naming_the_brokers() -> None:
    time = FakeTime()
    with pytest.raises(BrokerUnavailableError) as raised:
        guard(time, budget=10).call("list topics", failing(time, 100))  # type: ignore[arg-type]
    assert raised.value.bootstrap_servers == "b1:9092,b2:9092"
    assert "b1:9092,b2:9092 unreachable" in str(raised.value)
    assert time.now <= 10 + 2  # no attempt starts after the budget; the last may end 1 call later
    assert raised.value.attempts == len(time.sleeps) + 1


def test_a_zero_budget_fails_at_the_first_unreachable_call() -> None:
    time = FakeTime()
    with pytest.raises(BrokerUnavailableError):
        guard(time, budget=0).call("list topics", failing(time, 1))  # type: ignore[arg-type]
    assert time.sleeps == []


def test_a_broker_dropped_from_the_metadata_mid_call_counts_as_an_outage() -> None:
    # CI saw a stopped broker fail a watermark query this way, and the job quit without a retry.
    dropped = KafkaException(KafkaError(KafkaError._DESTROY_BROKER))
    assert "destroyed without termination" in dropped.args[0].str()
    wrapped = BrokerQueryError("could not read the offsets of t-0")
    wrapped.__cause__ = dropped
    assert is_unreachable(wrapped)
    closed = KafkaException(KafkaError(KafkaError._DESTROY))  # our own close(): no outage
    assert not is_unreachable(closed)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError._NODE_UPDATE,
    ],
)
def test_a_leader_election_in_a_rolling_restart_is_waited_out(code: int) -> None:
    time = FakeTime()
    calls = {"n": 0}

    def call() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise BrokerQueryError("could not read the offsets") from KafkaException(
                KafkaError(code)
            )
        return "offsets"

    assert guard(time, budget=30).call("read the offsets", call) == "offsets"
    assert time.sleeps == [1.0]


def test_errors_that_waiting_cannot_mend_are_raised_at_once() -> None:
    refused = KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED))
    assert not is_unreachable(refused)
    assert is_unreachable(BrokerQueryError("no offsets in time", timed_out=True))

    def call() -> str:
        raise refused

    time = FakeTime()
    with pytest.raises(KafkaException):
        guard(time, budget=60).call("list topics", call)
    assert time.sleeps == []


def test_the_budget_option_is_checked() -> None:
    base = {"kafka.bootstrap.servers": "b:1", "subscribe": "t"}
    assert parse_options({**base, "brokerOutageBudgetMs": "2500"}).broker_outage_budget_s == 2.5
    with pytest.raises(KafkaOptionError, match="brokerOutageBudgetMs"):
        parse_options({**base, "brokerOutageBudgetMs": "-1"})


def test_librdkafka_lines_go_through_logging_rate_limited() -> None:
    """Each failed connect of a client to a closed port is one librdkafka line; routed through
    ``lakestream.kafka``, a kind (facility) passes once per 30 s however many clients fail."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logging.getLogger(KAFKA_LOGGER).addHandler(keep)
    try:
        for _ in range(3):
            consumer = Consumer(
                {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "logger": kafka_logger()}
            )
            with pytest.raises(KafkaException):
                consumer.list_topics(timeout=0.5)
            consumer.close()  # serves the queued log lines
    finally:
        logging.getLogger(KAFKA_LOGGER).removeHandler(keep)
    failures = [r for r in records if r.getMessage().startswith("librdkafka FAIL: ")]
    assert len(failures) == 1, [r.getMessage() for r in records]
    assert "127.0.0.1:9" in failures[0].getMessage()


def test_an_unconfigured_process_sees_no_librdkafka_line() -> None:
    code = (
        "from confluent_kafka import Consumer\n"
        "from ingest.logs import kafka_logger\n"
        "c = Consumer({'bootstrap.servers': '127.0.0.1:9', 'group.id': 'g',"
        " 'logger': kafka_logger()})\n"
        "try:\n    c.list_topics(timeout=0.5)\nexcept Exception:\n    pass\n"
        "c.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "")


def test_a_failed_query_is_reported_by_the_error_our_code_raised() -> None:
    spark_text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
        "[PYTHON_DATA_SOURCE_ERROR] Failed when Python streaming data source perform "
        "latestOffset: Traceback (most recent call last):\n"
        '  File "/x/ingest/kafka/source.py", line 140, in latestOffset\n'
        "    newest = self._newest_offsets()\n"
        "ingest.kafka.errors.BrokerUnavailableError: kafka brokers b:1 unreachable for 12s\n"
        "\tat org.apache.spark.sql.execution.python.PythonStreamingSourceRunner.x(Foo.scala:1)\n"
    )
    failure = query_failure(RuntimeError(spark_text))
    assert failure.kind == "BrokerUnavailableError"
    assert str(failure) == "kafka brokers b:1 unreachable for 12s"

    other = query_failure(RuntimeError("[SOMETHING] it broke\n\tat org.apache.X(X.java:1)"))
    assert (other.kind, str(other)) == ("RuntimeError", "[SOMETHING] it broke")


def test_an_answer_the_metadata_contradicts_is_an_outage() -> None:
    """A broker shutting down answers a partition unknown once before its connections close;
    the view asks the metadata again and, finding the partition there, calls it transient."""
    assert is_unreachable(BrokerQueryError("unknown partition", transient=True))
    gone = KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
    assert not is_unreachable(BrokerQueryError("unknown partition"))
    wrapped = BrokerQueryError("unknown partition")
    wrapped.__cause__ = gone
    assert not is_unreachable(wrapped)  # a partition really gone: refused at once
