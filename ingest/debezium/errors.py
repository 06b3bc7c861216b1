"""Errors of the Debezium decoder.

Bad *input* never raises: each bad message becomes a :class:`~ingest.debezium.model.DeadLetter`
whose :class:`~ingest.debezium.model.DeadLetterReason` says what was wrong, so that one bad message
cannot stop a batch. Exceptions are for bad *configuration* (a caller's mistake that no retry can
fix) and, internally, to carry one message's failure to the place that files the dead letter.

"""

from __future__ import annotations

from enum import StrEnum

from ingest.errors import IngestError


class DebeziumError(IngestError):
    """Root of every error raised by ``ingest.debezium``."""


class DecoderConfigError(DebeziumError, ValueError):
    """A :class:`~ingest.debezium.model.DecoderConfig` that cannot work (bad schema or key)."""

    def __init__(self, message: str, *, table: str | None = None, column: str | None = None):
        super().__init__(message)
        self.table = table
        self.column = column


class DeadLetterReason(StrEnum):
    """Why a message went to the dead letters; lets the dead-letter table group by cause."""

    MALFORMED_JSON = "malformed_json"
    BAD_ENVELOPE = "bad_envelope"
    UNKNOWN_OP = "unknown_op"
    UNSUPPORTED_OP = "unsupported_op"
    MISSING_ROW = "missing_row"
    MISSING_KEY = "missing_key"
    BAD_KEY = "bad_key"
    NO_SCHEMA = "no_schema"
    UNSUPPORTED_SCHEMA = "unsupported_schema"
    SCHEMA_MISMATCH = "schema_mismatch"
    TYPE_MISMATCH = "type_mismatch"
    BAD_POSITION = "bad_position"
    UNMAPPED_TOPIC = "unmapped_topic"
    UNAVAILABLE_VALUE = "unavailable_value"
    """A primary-key column holds Debezium's placeholder for a value it did not send. (In other
    columns the placeholder makes a partial change, filled from the key's previous change.)"""
    BAD_WIRE_FORMAT = "bad_wire_format"
    """``source.converter: avro``: not magic byte 0 and a schema id (see ingest.debezium.avro)."""
    UNKNOWN_SCHEMA_ID = "unknown_schema_id"
    """``source.converter: avro``: the schema registry has no schema of the message's id."""
    MALFORMED_AVRO = "malformed_avro"
    """``source.converter: avro``: the body does not read under the schema of its id."""


class MessageError(DebeziumError):
    """One message cannot be decoded; becomes a dead letter with ``reason`` and the text."""

    def __init__(self, reason: DeadLetterReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ValueMismatch(DebeziumError, ValueError):
    """A JSON value that does not fit its column's type (wrong JSON type, range, encoding)."""
