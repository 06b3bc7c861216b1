"""Options of the ``lakestream-kafka`` source, parsed and checked once at ``load()``.

The names follow Spark's built-in Kafka source (``subscribe``, ``subscribePattern``,
``startingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``,
``kafkaConsumer.pollTimeoutMs`` and ``kafka.*``), so a job can move between the two by changing
the format name; ``emit``, ``brokerOutageBudgetMs``, ``logLevel`` and ``sharedTaskPattern`` are
lakestream's own (see :class:`Emit`, :mod:`ingest.kafka.outage`, :mod:`ingest.logs` and
:func:`ingest.kafka.offsets.group_ranges`). Spark hands options over
case-insensitively with lower-cased keys; unknown options are refused, because a misspelt
``startingOffsets`` would otherwise silently read from the default position.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from ingest.kafka.errors import DEFAULT_BROKER_OUTAGE_BUDGET_S, KafkaOptionError
from ingest.kafka.offsets import EARLIEST, LATEST, PartitionId

SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
STARTING_OFFSETS = "startingOffsets"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
INCLUDE_HEADERS = "includeHeaders"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
POLL_TIMEOUT_MS = "kafkaConsumer.pollTimeoutMs"
EMIT = "emit"
BROKER_OUTAGE_BUDGET_MS = "brokerOutageBudgetMs"
LOG_LEVEL = "logLevel"
SHARED_TASK_PATTERN = "sharedTaskPattern"
KAFKA_PREFIX = "kafka."

_OWN_OPTIONS = (
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    STARTING_OFFSETS,
    MAX_OFFSETS_PER_TRIGGER,
    INCLUDE_HEADERS,
    FAIL_ON_DATA_LOSS,
    POLL_TIMEOUT_MS,
    EMIT,
    BROKER_OUTAGE_BUDGET_MS,
    LOG_LEVEL,
    SHARED_TASK_PATTERN,
)
_BY_LOWER = {name.lower(): name for name in _OWN_OPTIONS}

#: librdkafka settings the source decides itself: a reader never commits, always knows where a
#: partition ends, and chooses what happens at an out-of-range offset from ``failOnDataLoss``.
_MANAGED_KAFKA_KEYS = frozenset(
    {
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "auto.offset.reset",
    }
)
_SECRET_MARKERS = ("password", "secret", "token", "jaas", "key.pem", "private")
_DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's Kafka source default (spark.network.timeout)

StartingSpec = Literal["earliest", "latest"] | Mapping[PartitionId, int]


class Emit(StrEnum):
    """What the source's rows are (lakestream's own option; Spark's Kafka source has no such).

    ``records``: one row per Kafka record (Spark's Kafka row schema). ``ranges``: one row per
    planned offset range, ``topic, partition, startOffset, endOffset``, for a sink that reads
    its range itself with :func:`ingest.kafka.reader.read_messages` - the records then never
    pass through the JVM, which costs as much CPU as the whole rest of a simple pipeline.
    """

    RECORDS = "records"
    RANGES = "ranges"


@dataclass(frozen=True)
class Subscription:
    """Which topics the query reads: a fixed list, or every non-internal topic matching a regex."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            # Like Kafka's pattern subscription: whole-name match, internal topics left out.
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True)
class SourceOptions:
    """Everything the driver and the executors need; picklable, secrets included (never logged)."""

    kafka_config: Mapping[str, str] = field(repr=False)  # may hold credentials
    subscription: Subscription = field(default_factory=Subscription)
    starting: StartingSpec = "latest"
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS
    emit: Emit = Emit.RECORDS
    broker_outage_budget_s: float = DEFAULT_BROKER_OUTAGE_BUDGET_S
    """How long the driver's broker queries wait out a broker outage before the query fails."""
    log_level: str | None = None
    """Set: the source process logs lakestream's lines (JSON, this level) on the job's behalf."""
    shared_task_pattern: str | None = None
    """Topics (a regex, whole names) whose ranges share another range's input partition instead
    of taking one of their own (:func:`~ingest.kafka.offsets.group_ranges`)."""

    def shares_task(self, topic: str) -> bool:
        """Whether ``topic``'s ranges ride in another range's input partition."""
        pattern = self.shared_task_pattern
        return pattern is not None and re.fullmatch(pattern, topic) is not None

    def redacted_kafka_config(self) -> dict[str, str]:
        """The librdkafka settings with secret values masked, for logs and error messages."""
        return {key: "***" if is_secret(key) else value for key, value in self.kafka_config.items()}


def is_secret(kafka_key: str) -> bool:
    """Whether a librdkafka setting holds a credential (``sasl.password``, ``ssl.key.pem`` ...)."""
    lowered = kafka_key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check and convert raw options; every problem is a :class:`KafkaOptionError` naming it."""
    own: dict[str, str] = {}
    kafka: dict[str, str] = {}
    for raw_key, value in options.items():
        key = raw_key.lower()
        if key.startswith(KAFKA_PREFIX):
            kafka[key[len(KAFKA_PREFIX) :]] = value
        elif key in _BY_LOWER:
            own[_BY_LOWER[key]] = value
        else:
            raise KafkaOptionError(
                raw_key,
                f"unknown option; known: {', '.join(_OWN_OPTIONS)} and kafka.<librdkafka setting>",
            )
    _check_kafka_config(kafka)
    subscription = _subscription(own)
    starting = _starting(own.get(STARTING_OFFSETS, "latest"))
    _check_starting_topics(starting, subscription)
    return SourceOptions(
        kafka_config=kafka,
        subscription=subscription,
        starting=starting,
        max_offsets_per_trigger=_positive_int(own, MAX_OFFSETS_PER_TRIGGER),
        include_headers=_bool(own, INCLUDE_HEADERS, default=False),
        fail_on_data_loss=_bool(own, FAIL_ON_DATA_LOSS, default=True),
        poll_timeout_ms=_positive_int(own, POLL_TIMEOUT_MS) or _DEFAULT_POLL_TIMEOUT_MS,
        emit=_emit(own.get(EMIT, Emit.RECORDS.value)),
        broker_outage_budget_s=_budget_s(own),
        log_level=_log_level(own.get(LOG_LEVEL)),
        shared_task_pattern=_pattern(own, SHARED_TASK_PATTERN),
    )


def _check_kafka_config(kafka: Mapping[str, str]) -> None:
    if not kafka.get("bootstrap.servers", "").strip():
        raise KafkaOptionError("kafka.bootstrap.servers", "is required (host:port[,host:port])")
    managed = sorted(_MANAGED_KAFKA_KEYS & kafka.keys())
    if managed:
        raise KafkaOptionError(
            KAFKA_PREFIX + managed[0],
            "is set by the source itself (no commits, end-of-partition events, "
            "auto.offset.reset from failOnDataLoss)",
        )


def _subscription(own: Mapping[str, str]) -> Subscription:
    topics_raw, pattern = own.get(SUBSCRIBE), own.get(SUBSCRIBE_PATTERN)
    if (topics_raw is None) == (pattern is None):
        raise KafkaOptionError(SUBSCRIBE, f"set exactly one of {SUBSCRIBE} and {SUBSCRIBE_PATTERN}")
    if pattern is not None:
        return Subscription(pattern=_pattern(own, SUBSCRIBE_PATTERN))
    assert topics_raw is not None
    topics = tuple(dict.fromkeys(t.strip() for t in topics_raw.split(",") if t.strip()))
    if not topics:
        raise KafkaOptionError(SUBSCRIBE, "names no topic")
    return Subscription(topics=topics)


def _pattern(own: Mapping[str, str], name: str) -> str | None:
    pattern = own.get(name)
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaOptionError(name, f"not a valid regex: {exc}") from exc
    return pattern


def _starting(raw: str) -> StartingSpec:
    text = raw.strip()
    if text.lower() == "earliest":
        return "earliest"
    if text.lower() == "latest":
        return "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaOptionError(
            STARTING_OFFSETS, 'expected earliest, latest or JSON like {"topic": {"0": 42}}'
        ) from exc
    return _explicit_offsets(parsed)


def _explicit_offsets(parsed: object) -> dict[PartitionId, int]:
    if not isinstance(parsed, dict):
        raise KafkaOptionError(STARTING_OFFSETS, "JSON must map topic -> {partition: offset}")
    offsets: dict[PartitionId, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise KafkaOptionError(STARTING_OFFSETS, f"topic {topic!r} must map to an object")
        for partition, offset in partitions.items():
            if not str(partition).isdigit():
                raise KafkaOptionError(STARTING_OFFSETS, f"bad partition {partition!r} in {topic}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise KafkaOptionError(
                    STARTING_OFFSETS,
                    f"offset of {topic}-{partition} must be >= 0, {EARLIEST} (earliest) "
                    f"or {LATEST} (latest), not {offset!r}",
                )
            offsets[PartitionId(topic, int(partition))] = offset
    return offsets


def _check_starting_topics(starting: StartingSpec, subscription: Subscription) -> None:
    if isinstance(starting, str):
        return
    for topic in sorted({tp.topic for tp in starting}):
        if not subscription.matches(topic):
            raise KafkaOptionError(
                STARTING_OFFSETS, f"names topic {topic!r}, which is not subscribed"
            )


def _positive_int(own: Mapping[str, str], name: str) -> int | None:
    raw = own.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise KafkaOptionError(name, f"expected a positive integer, not {raw!r}") from exc
    if value <= 0:
        raise KafkaOptionError(name, f"expected a positive integer, not {raw!r}")
    return value


def _bool(own: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = own.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaOptionError(name, f"expected true or false, not {raw!r}")


def _emit(raw: str) -> Emit:
    try:
        return Emit(raw.strip().lower())
    except ValueError:
        known = ", ".join(e.value for e in Emit)
        raise KafkaOptionError(EMIT, f"expected one of {known}, not {raw!r}") from None


def _budget_s(own: Mapping[str, str]) -> float:
    raw = own.get(BROKER_OUTAGE_BUDGET_MS)
    if raw is None:
        return DEFAULT_BROKER_OUTAGE_BUDGET_S
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise KafkaOptionError(BROKER_OUTAGE_BUDGET_MS, f"expected milliseconds >= 0, not {raw!r}")
    return value / 1000


def _log_level(raw: str | None) -> str | None:
    if raw is None:
        return None
    level = raw.strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise KafkaOptionError(LOG_LEVEL, f"expected DEBUG, INFO, WARNING or ERROR, not {raw!r}")
    return level
