"""A table's metadata as loaded from the catalog: identity, location, spec, schemas, properties."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from catalog.conflicts import CONCURRENT_MERGE_PROPERTY, Relaxations
from catalog.field_ids import field_ids
from catalog.files.storage import DEFAULT_STORAGE, Storage, StorageOptions, storage_for
from catalog.names import RESERVED_COLUMN_PREFIX, TableName
from catalog.partitioning import PartitionSpec

#: Table property naming the column whose value orders changes of one key (CDC tables).
SEQUENCE_COLUMN_PROPERTY = "sequence-column"
#: Table property: ``on`` has the compactor's maintenance keep the table's Iceberg metadata
#: current (:mod:`catalog.iceberg`).
ICEBERG_METADATA_PROPERTY = "iceberg.metadata"


def is_internal_column(name: str) -> bool:
    """lakestream's own columns (``_ls_seq``, the source position of ingested changes) are in
    the stored schema but not in what users see; only they may carry the reserved prefix."""
    return name.startswith(RESERVED_COLUMN_PREFIX)


def without_internal(schema: pa.Schema) -> pa.Schema:
    """``schema`` as users see it: lakestream's internal columns left out."""
    hidden = [i for i, name in enumerate(schema.names) if is_internal_column(name)]
    for index in reversed(hidden):
        schema = schema.remove(index)
    return schema


@dataclass(frozen=True)
class TableMeta:
    table_id: uuid.UUID
    name: TableName
    location: str
    spec: PartitionSpec
    primary_key: tuple[str, ...]
    properties: Mapping[str, str]
    schemas: Mapping[int, pa.Schema]
    current_schema_id: int
    created_at: dt.datetime | None = field(default=None, compare=False)
    storage: StorageOptions = field(default=DEFAULT_STORAGE, compare=False, repr=False)
    """How this process reaches the location (the catalog connection's options, never stored:
    the catalog holds the location URI only). Travels with the metadata to Spark executors."""

    @property
    def files(self) -> Storage:
        """The table's files, through the storage seam (:mod:`catalog.files.storage`)."""
        return storage_for(self.location, self.storage)

    @property
    def schema(self) -> pa.Schema:
        """The stored schema, lakestream's internal columns included: what files hold, and what
        writers, compaction and ingest work with."""
        return self.schemas[self.current_schema_id]

    @property
    def field_ids(self) -> dict[str, int]:
        """Iceberg field id of every user column path ever in the schema (nested fields too):
        what every data file carries as ``PARQUET:field_id`` (:mod:`catalog.field_ids`). Not
        cached: a walk over a few schemas, where a cache would ride along in ``__dict__``."""
        return field_ids(self.schemas)

    @property
    def user_schema(self) -> pa.Schema:
        """The schema users see (scans, ``Table.schema``): without internal columns."""
        return without_internal(self.schema)

    @property
    def internal_columns(self) -> tuple[str, ...]:
        return tuple(name for name in self.schema.names if is_internal_column(name))

    @property
    def is_cdc(self) -> bool:
        return bool(self.primary_key)

    @property
    def sequence_column(self) -> str | None:
        return self.properties.get(SEQUENCE_COLUMN_PROPERTY)

    @property
    def relaxations(self) -> Relaxations:
        flag = self.properties.get(CONCURRENT_MERGE_PROPERTY, "false").lower() == "true"
        return Relaxations(concurrent_merge=flag)

    @property
    def publishes_iceberg(self) -> bool:
        return self.properties.get(ICEBERG_METADATA_PROPERTY, "off").lower() == "on"

    @property
    def kind(self) -> str:
        return "cdc" if self.is_cdc else "append"
