"""Several tables' commits landing as one atomic catalog commit."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from catalog.errors import CatalogError
from catalog.model import (
    CommitOp,
    CommitRequest,
    CommitResult,
    IdempotencyKey,
    PartitionCommit,
    TableCommit,
)
from catalog.names import parse_table_name
from catalog.table import Table

if TYPE_CHECKING:
    from catalog.catalog import Catalog


class Transaction:
    """Collects table commits and lands them as ONE atomic catalog commit on exit.

    If the block raises, nothing is committed (files already written stay as leftovers for
    maintenance). ``result`` holds the :class:`CommitResult` after a successful exit.
    """

    def __init__(
        self,
        catalog: Catalog,
        key: IdempotencyKey | None,
        source_offsets: dict[str, object] | None,
    ) -> None:
        self.catalog = catalog
        self.key = key or IdempotencyKey.anonymous()
        self.source_offsets = source_offsets
        self._tables: dict[str, TableCommit] = {}
        self.result: CommitResult | None = None

    def add(self, commit: TableCommit) -> None:
        name = str(parse_table_name(commit.table))
        if name in self._tables:
            raise CatalogError(f"{name} is already part of this transaction")
        self._tables[name] = commit.model_copy(update={"table": name})

    def commit_files(
        self,
        table: str | Table,
        op: CommitOp,
        partitions: Sequence[PartitionCommit],
        base_version: int | None = None,
    ) -> None:
        name = table.name if isinstance(table, Table) else table
        self.add(
            TableCommit(table=name, op=op, partitions=tuple(partitions), base_version=base_version)
        )

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or not self._tables:
            return
        self.result = self.catalog.commit(
            CommitRequest(
                tables=tuple(self._tables.values()),
                key=self.key,
                source_offsets=self.source_offsets,
            )
        )
