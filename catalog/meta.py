"""A table's metadata as loaded from the catalog: identity, location, spec, schemas, properties."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from catalog.conflicts import CONCURRENT_MERGE_PROPERTY, Relaxations
from catalog.names import TableName
from catalog.partitioning import PartitionSpec

#: Table property naming the column whose value orders changes of one key (CDC tables).
SEQUENCE_COLUMN_PROPERTY = "sequence-column"


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

    @property
    def schema(self) -> pa.Schema:
        return self.schemas[self.current_schema_id]

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
    def kind(self) -> str:
        return "cdc" if self.is_cdc else "append"
