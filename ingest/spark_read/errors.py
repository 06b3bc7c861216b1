"""Errors of the Spark batch reader.

:class:`SparkReadError` is the reader's root; like the Kafka source's and the Debezium decoder's
roots it derives from the ``ingest`` package's root, :class:`~ingest.errors.IngestError`.
Catalog errors (an unknown table, a version the table does not have) are raised as the
catalog's own types, unwrapped, so a caller can tell them apart the same way everywhere.
"""

from __future__ import annotations

from ingest.errors import IngestError


class SparkReadError(IngestError):
    """Root of every error raised by ``ingest.spark_read``."""


class ReadOptionError(SparkReadError, ValueError):
    """A reader option is missing, unknown, contradictory or malformed; raised at ``load()``."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"lakestream option {option!r}: {reason}")
        self.option = option
        self.reason = reason


class UnsupportedTypeError(SparkReadError, TypeError):
    """A table column whose Arrow type has no faithful Spark type; raised at ``load()``."""

    def __init__(self, column: str, arrow_type: object, reason: str = "") -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(
            f"column {column!r} has type {arrow_type}, which Spark cannot read{detail}"
        )
        self.column = column
        self.arrow_type = arrow_type


class TableReplacedError(SparkReadError):
    """The table was dropped (and maybe recreated) after the DataFrame was loaded."""

    def __init__(self, table: str) -> None:
        super().__init__(
            f"table {table!r} was dropped or replaced after the DataFrame was loaded; load it again"
        )
        self.table = table


class ColumnReadError(SparkReadError):
    """Values of a column do not fit the Spark type they are read as (e.g. nanoseconds)."""

    def __init__(self, column: str, reason: str) -> None:
        super().__init__(f"column {column!r} cannot be read as its Spark type: {reason}")
        self.column = column
        self.reason = reason
