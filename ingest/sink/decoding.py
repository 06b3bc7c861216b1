"""The decoder a batch runs with: the job's configuration, plus the schema of every target table
that exists.

Schemaless Debezium JSON (``value.converter.schemas.enable=false``) carries values without
types; a message can only be decoded into a schema the job already has. For a table that exists
that schema is the catalog's - it decides what the JSON cannot say (a decimal's scale, a time
zone, the unit of a plain-number time) - and it wins over a declaration in the configuration,
which only serves to create a table that does not exist yet. Messages that embed their schema
are decoded by it as before; the table's schema only adds a fast-path miss per table and task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pyarrow as pa

from catalog import TableMeta
from catalog.logs import get_logger
from ingest.debezium import DecoderConfig
from ingest.debezium.layout import UnsupportedSchema, codec_for_arrow

log = get_logger("lakestream.ingest")
_OWN_PREFIX = "_ls_"

#: What identifies a set of table schemas: name, table incarnation and schema id of each.
_Key = tuple[tuple[str, str, int], ...]


class BatchDecoders:
    """Builds (and reuses while the tables' schemas stay the same) each batch's decoder."""

    def __init__(self, configured: DecoderConfig) -> None:
        self.configured = configured
        self._key: _Key | None = None
        self._decoder = configured
        self._warned: set[tuple[str, int]] = set()

    def for_tables(self, tables: Mapping[str, TableMeta]) -> DecoderConfig:
        """The configured decoder, with the schema and key of every existing CDC table."""
        cdc = {name: meta for name, meta in sorted(tables.items()) if meta.is_cdc}
        key = tuple((n, str(m.table_id), m.current_schema_id) for n, m in cdc.items())
        if key != self._key:
            self._decoder = self._build(cdc)
            self._key = key
        return self._decoder

    def _build(self, tables: Mapping[str, TableMeta]) -> DecoderConfig:
        base = self.configured
        schemas, keys = dict(base.schemas), dict(base.primary_keys)
        for name, meta in tables.items():
            data = data_columns(meta.schema)
            problem = undecodable(data)
            if problem is not None:
                self._warn(meta, "table_not_decodable_without_schema", problem)
                continue
            declared = schemas.get(name)
            if declared is not None and not same_columns(declared, data):
                self._warn(meta, "declaration_ignored", "the table exists: its schema decides")
            schemas[name] = data
            keys[name] = tuple(meta.primary_key)
        return replace(base, schemas=schemas, primary_keys=keys)

    def _warn(self, meta: TableMeta, event: str, reason: str) -> None:
        once = (str(meta.name), meta.current_schema_id)
        if once not in self._warned:
            self._warned.add(once)
            log.warning(event, table=str(meta.name), reason=reason)


def data_columns(schema: pa.Schema) -> pa.Schema:
    """A table's columns without lakestream's own (``_ls_seq`` and the like)."""
    fields = [f for f in schema if not f.name.startswith(_OWN_PREFIX)]
    return pa.schema(fields, metadata=schema.metadata)


def undecodable(schema: pa.Schema) -> str | None:
    """Why schemaless Debezium JSON cannot be decoded into ``schema``, or None if it can."""
    for field in schema:
        try:
            codec_for_arrow(field)
        except (UnsupportedSchema, ValueError) as exc:
            return str(exc)
    return None


def same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names and types, in any order (nullability and metadata aside)."""
    return {f.name: f.type for f in a} == {f.name: f.type for f in b}
