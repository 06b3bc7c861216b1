"""Schema evolution as a catalog operation: a new schema id, recorded under the table lock.

Columns are matched by name when old files are read under a newer schema. So that a dropped
column can never come back to life with its old values, a name that was dropped may not be
added again. Primary-key and partition columns never change: they decide where rows live.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import psycopg
import pyarrow as pa
from psycopg.rows import DictRow

from catalog import schemas
from catalog.errors import SchemaError, TableNotFoundError
from catalog.files.evolution import check_evolution, require_allowed
from catalog.meta import TableMeta
from catalog.names import check_column_name
from catalog.queries import query


def plan_schema_change(
    meta: TableMeta, new_schema: pa.Schema, *, allow_drop: bool = False
) -> pa.Schema | None:
    """Validate a change of ``meta``'s schema; None when there is nothing to change."""
    table = str(meta.name)
    for field in new_schema:
        check_column_name(field.name)
    keys = set(meta.primary_key)
    # key columns are NOT NULL in every table; a source's schema need not say so
    new_schema = pa.schema(
        [f.with_nullable(False) if f.name in keys else f for f in new_schema],
        metadata=new_schema.metadata,
    )
    changes = check_evolution(
        meta.schema, new_schema, primary_key=meta.primary_key, allow_drop=allow_drop
    )
    require_allowed(changes, table=table)
    if not changes:
        return None
    touched = {c.column.split(".", 1)[0] for c in changes}
    frozen = touched & set(meta.spec.columns)
    if frozen:
        raise SchemaError(
            f"partition column {sorted(frozen)[0]!r} cannot change",
            table=table,
            column=sorted(frozen)[0],
        )
    _refuse_resurrection(meta.schemas, meta.schema, new_schema, table)
    return new_schema


def _refuse_resurrection(
    history: Mapping[int, pa.Schema], current: pa.Schema, new: pa.Schema, table: str
) -> None:
    ever = {name for schema in history.values() for name in schema.names}
    dropped = ever - set(current.names)
    back = sorted(dropped & set(new.names))
    if back:
        raise SchemaError(
            f"column {back[0]!r} was dropped earlier and cannot be added again "
            "(old files still hold its values); choose another name",
            table=table,
            column=back[0],
        )


def record_schema(
    conn: psycopg.Connection[DictRow],
    table_id: uuid.UUID,
    expected_schema_id: int,
    schema: pa.Schema,
) -> int | None:
    """Store ``schema`` as the next schema id, if the current one is still the expected one.

    Runs inside the caller's transaction after the table head is locked, so schema ids are
    contiguous and two concurrent changes cannot both build on the same old schema. Returns the
    new id, or None if the schema moved on meanwhile (the caller re-plans against it).
    """
    row = conn.execute(query("table_by_id"), {"table_id": table_id}).fetchone()
    if row is None or row["dropped_at"] is not None:
        raise TableNotFoundError(str(table_id))
    if row["current_schema_id"] != expected_schema_id:
        return None
    new_id = expected_schema_id + 1
    conn.execute(
        query("insert_schema"),
        {"table_id": table_id, "schema_id": new_id, "arrow_schema": schemas.serialize(schema)},
    )
    conn.execute(query("set_current_schema"), {"table_id": table_id, "schema_id": new_id})
    return new_id
