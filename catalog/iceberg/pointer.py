"""The Iceberg table's pointer kept in lakestream's catalog: a pyiceberg catalog of one table.

pyiceberg commits through a catalog (``Transaction.commit_transaction`` ends in
``Catalog.commit_table``); this one keeps the current metadata location in the
``iceberg_metadata`` row of the table and moves it by compare-and-set, as pyiceberg's SQL
catalog does with its own row. Metadata files are written by pyiceberg itself
(``MetastoreCatalog._update_and_stage_table`` and ``_write_metadata``), so nothing here
serialises metadata JSON or Avro.
"""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse
from pyiceberg.table import Table as IcebergTable
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

from catalog.queries import NamedQueries
from catalog.store import PgStore, Row, translate_errors

iquery = NamedQueries("catalog", "sql/iceberg.sql")


class PointerCatalog(MetastoreCatalog):
    """One lakestream table's Iceberg metadata, its pointer in the ``iceberg_metadata`` row."""

    def __init__(
        self, store: PgStore, table_id: uuid.UUID, identifier: Identifier, **properties: str
    ) -> None:
        super().__init__("lakestream", **properties)
        self._store = store
        self._table_id = table_id
        self._identifier = identifier

    def pointer(self) -> Row | None:
        return self._store.fetch_one(iquery("iceberg_pointer"), {"table_id": self._table_id})

    def create(self, metadata: TableMetadata, metadata_location: str) -> IcebergTable:
        """Write the first metadata file and point at it (a concurrent creator loses)."""
        io = self._load_file_io(metadata.properties, metadata_location)
        self._write_metadata(metadata, io, metadata_location)
        with self._store.connection() as conn, translate_errors():
            done = conn.execute(
                iquery("iceberg_pointer_insert"),
                {"table_id": self._table_id, "location": metadata_location},
            ).rowcount
        if done != 1:
            raise CommitFailedException(f"{self._name()}: created by another exporter")
        return self.load_table(self._identifier)

    def load_table(self, identifier: str | Identifier) -> IcebergTable:
        row = self.pointer()
        if row is None:
            raise NoSuchTableError(f"{self._name()} has no Iceberg metadata yet")
        location = str(row["metadata_location"])
        io = load_file_io(properties=self.properties, location=location)
        metadata = FromInputFile.table_metadata(io.new_input(location))
        return IcebergTable(
            identifier=self._identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def commit_table(
        self,
        table: IcebergTable,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        current = self.load_table(self._identifier)
        staged = self._update_and_stage_table(current, self._identifier, requirements, updates)
        if staged.metadata == current.metadata:
            return CommitTableResponse(
                metadata=current.metadata, metadata_location=current.metadata_location
            )
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        with self._store.connection() as conn, translate_errors():
            moved = conn.execute(
                iquery("iceberg_pointer_swap"),
                {
                    "table_id": self._table_id,
                    "location": staged.metadata_location,
                    "previous": current.metadata_location,
                },
            ).rowcount
        if moved != 1:
            raise CommitFailedException(f"{self._name()}: another exporter committed first")
        return CommitTableResponse(
            metadata=staged.metadata, metadata_location=staged.metadata_location
        )

    def _name(self) -> str:
        return ".".join(self._identifier)

    # -- the rest of pyiceberg's catalog interface: one table, nothing else to list or make ----

    def _unsupported(self, *_: Any, **__: Any) -> NoReturn:
        raise NotImplementedError("lakestream's pointer catalog holds one exported table")

    create_table = _unsupported
    register_table = _unsupported
    drop_table = _unsupported
    purge_table = _unsupported
    rename_table = _unsupported
    create_namespace = _unsupported
    drop_namespace = _unsupported
    list_tables = _unsupported
    list_namespaces = _unsupported
    list_views = _unsupported
    load_view = _unsupported
    drop_view = _unsupported
    view_exists = _unsupported
    register_view = _unsupported
    create_view = _unsupported
    load_namespace_properties = _unsupported
    update_namespace_properties = _unsupported


def record_export(
    store: PgStore, table_id: uuid.UUID, location: str, version: int, lag: int
) -> None:
    """Where the export stands (and, after a commit through another catalog, its location)."""
    with store.connection() as conn, translate_errors():
        conn.execute(
            iquery("iceberg_pointer_record"),
            {"table_id": table_id, "location": location, "version": version, "lag": lag},
        )
