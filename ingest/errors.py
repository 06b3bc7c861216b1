"""The ingest package's root error; the decoder's and the Kafka source's errors descend from it."""

from __future__ import annotations


class IngestError(Exception):
    """Root of every error raised by ``ingest``."""


class SchemaChangeRefused(IngestError):
    """A source changed a table's schema in a way the table cannot follow: the batch fails."""

    def __init__(self, table: str, column: str | None, reason: str) -> None:
        super().__init__(f"table {table!r}: {reason}")
        self.table = table
        self.column = column
