"""The dead-letter guard: a batch that dead-letters most of a topic fails instead of committing.

Dead letters exist so that one bad message cannot stop a stream. A *misconfigured* job, though -
schemaless messages without a schema, a wrong column type, a topic in another format - sends
whole topics there while its offsets advance, and "succeeds". The guard tells the two apart by
proportion: a topic whose dead letters in one batch exceed ``max_ratio`` of that topic's records
fails the batch before anything is committed (no rows, no dead letters, no offsets), so the
next start reads the same records again once the configuration is fixed.

The ratio is judged per topic, not over the whole batch: a job reading fifty healthy topics and
one misconfigured one would otherwise stay under any ratio. ``min_count`` keeps a lone poison
message in a quiet moment (one record, one dead letter: a ratio of 1) from stopping the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ingest.debezium import DeadLetterReason
from ingest.errors import IngestError
from ingest.sink.report import TopicFigures

#: What the operator can change, by the commonest reason of a tripped topic.
_HINTS: dict[str, str] = {
    DeadLetterReason.NO_SCHEMA: (
        "the messages carry no schema (value.converter.schemas.enable=false): declare the "
        "table under tables.declare, or create it first"
    ),
    DeadLetterReason.TYPE_MISMATCH: (
        "values do not fit the table's column types: fix the column in tables.declare, or the "
        "table's schema if it already exists"
    ),
    DeadLetterReason.SCHEMA_MISMATCH: (
        "the messages hold columns the table lacks: add them to tables.declare, or to the "
        "table (Table.add_column) if it already exists"
    ),
    DeadLetterReason.UNMAPPED_TOPIC: (
        "map the topic to a table in tables.debezium_topic_tables (or json_topic_tables)"
    ),
    DeadLetterReason.MALFORMED_JSON: "check that the topic holds source.format messages",
    DeadLetterReason.BAD_ENVELOPE: "check that the topic holds source.format messages",
}
_DEFAULT_HINT = "see the dead-letter table for the records and errors"


@dataclass(frozen=True)
class DeadLetterGuard:
    """``max_ratio`` None turns the guard off; a topic is judged from ``min_count`` dead letters
    on."""

    max_ratio: float | None = 0.5
    min_count: int = 10

    def __post_init__(self) -> None:
        if self.max_ratio is not None and not 0 <= self.max_ratio <= 1:
            raise ValueError(f"max_ratio must be within [0, 1], not {self.max_ratio}")
        if self.min_count < 1:
            raise ValueError(f"min_count must be at least 1, not {self.min_count}")

    def check(self, figures: Mapping[str, TopicFigures]) -> TooManyDeadLetters | None:
        """The verdict on one batch: the worst topic over the limit, or None if the batch may
        be committed."""
        if self.max_ratio is None:
            return None
        limit = self.max_ratio
        over = [
            (f.dead_letters / f.records, topic)
            for topic, f in figures.items()
            if f.dead_letters >= self.min_count and f.dead_letters > limit * f.records
        ]
        if not over:
            return None
        _, topic = max(over)
        return TooManyDeadLetters(topic, figures[topic], limit)


class TooManyDeadLetters(IngestError):
    """A batch dead-lettered more of a topic than ``dead_letters.max_ratio`` allows; nothing of
    it was committed. The message is the one line an operator needs."""

    def __init__(self, topic: str, figures: TopicFigures, max_ratio: float) -> None:
        self.topic = topic
        self.records = figures.records
        self.dead_letters = figures.dead_letters
        self.max_ratio = max_ratio
        self.reason = max(sorted(figures.dead), key=lambda r: figures.dead[r])
        self.example = _one_line(figures.examples.get(self.reason, ""))
        hint = _HINTS.get(self.reason, _DEFAULT_HINT)
        super().__init__(
            f"topic {topic!r}: {self.dead_letters} of {self.records} records in one batch are "
            f"dead letters (over dead_letters.max_ratio {max_ratio:g}); commonest reason "
            f"{self.reason} ({self.example}); {hint}; or raise dead_letters.max_ratio (null "
            "turns the guard off). Nothing of the batch was committed: the next start reads it "
            "again"
        )


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
