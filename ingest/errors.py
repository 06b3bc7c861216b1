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


class QueryFailed(IngestError):
    """The streaming query stopped with an error that is not the job's own (a Spark or Python
    worker failure); ``kind`` names the error the failure came from, when it can be told."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
