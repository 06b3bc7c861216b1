"""A lakestream table's schema, partition spec and name mapping as Iceberg sees them.

**Field ids** are a function of the table's schema history alone: walking the schemas in id
order, each column gets the next ids the first time its name appears (its own id, then its
nested fields' ids, depth first). A column keeps its id for ever after: schema evolution only
adds columns, widens types or drops them, and a dropped name can never come back (the catalog
refuses it), so a name names one column for the table's whole life. Ids therefore never change
from one export to the next, nor between two exporters, and a Parquet writer that knows the
table's metadata can stamp the same ids into ``PARQUET:field_id`` without reading Iceberg's.

Files carry no field ids today, so every Iceberg schema comes with its **name mapping**
(``schema.name-mapping.default``): readers (pyiceberg, DuckDB, Spark) resolve file columns by
name through it. Columns a file holds but the schema does not (lakestream's internal ``_ls_*``
columns) are unmapped, so readers skip them.

**Partitions**: each range column is an identity partition field. A CDC table's hash bucket is
the Iceberg bucket transform of its key when the key is one column (lakestream computes buckets
with Iceberg's hash: ``catalog/files/bucketing.py``), so engines prune buckets on key
predicates; a composite key chains the hash through its columns, which no Iceberg transform
expresses, and its buckets are then not exposed: their files are plain data files of the range
partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.partitioning import PartitionField, PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import MappedField, NameMapping, apply_name_mapping
from pyiceberg.transforms import BucketTransform, IdentityTransform

from catalog.meta import TableMeta, is_internal_column
from catalog.model import ROW_KIND_COLUMN, SEQUENCE_COLUMN, UNSET_COLUMN, UNSET_TYPE
from catalog.partitioning import PartitionValue, typed_value

#: The first id of partition fields (Iceberg's convention: 1000 and up).
PARTITION_FIELD_BASE = 1000
#: Ids of lakestream's own file columns, far above any user column's: they are in the name
#: mapping only (pyiceberg refuses a file column the mapping does not name), never in the
#: schema, so readers skip them.
INTERNAL_FIELD_IDS = {
    SEQUENCE_COLUMN: 1_000_000_001,
    ROW_KIND_COLUMN: 1_000_000_002,
    UNSET_COLUMN: 1_000_000_003,
    f"{UNSET_COLUMN}.element": 1_000_000_004,
}


def field_ids(schemas: Mapping[int, pa.Schema]) -> dict[str, int]:
    """Path of every field ever seen (``a``, ``a.element``, ``s.x``) -> its Iceberg field id."""
    ids: dict[str, int] = {}
    for schema_id in sorted(schemas):
        for field in schemas[schema_id]:
            if is_internal_column(field.name) or field.name in ids:
                continue
            for path in _paths(field.name, field.type):
                ids[path] = len(ids) + 1
    return ids


def _paths(path: str, arrow_type: pa.DataType) -> Iterator[str]:
    yield path
    for name, child in _children(arrow_type):
        yield from _paths(f"{path}.{name}", child)


def _children(arrow_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """Nested fields under Iceberg's names: a list's ``element``, a map's ``key``/``value``."""
    if pa.types.is_struct(arrow_type):
        return [
            (arrow_type.field(i).name, arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        ]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [("element", arrow_type.value_type)]
    if pa.types.is_map(arrow_type):
        return [("key", arrow_type.key_type), ("value", arrow_type.item_type)]
    return []


def name_mapping(meta: TableMeta) -> NameMapping:
    """The mapping of the current schema's columns (by name) to their ids, and of lakestream's
    internal file columns to ids no schema holds."""
    ids = {**field_ids(meta.schemas), **INTERNAL_FIELD_IDS}
    internal = [
        (SEQUENCE_COLUMN, pa.binary(16)),
        (ROW_KIND_COLUMN, pa.int8()),
        (UNSET_COLUMN, UNSET_TYPE),
    ]
    return NameMapping(
        [_mapped(f.name, f.type, ids) for f in meta.user_schema]
        + [_mapped(name, arrow_type, ids) for name, arrow_type in internal]
    )


def _mapped(path: str, arrow_type: pa.DataType, ids: Mapping[str, int]) -> MappedField:
    name = path.rsplit(".", 1)[-1]
    children = [_mapped(f"{path}.{n}", t, ids) for n, t in _children(arrow_type)]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        # Parquet names a list's element "element" (Iceberg) or "item" (Arrow's default)
        children = [children[0].model_copy(update={"names": ["element", "item"]})]
    return MappedField(field_id=ids[path], names=[name], fields=children)


def iceberg_schema(meta: TableMeta) -> Schema:
    """The current user schema with the ids of :func:`field_ids`."""
    arrow = meta.user_schema
    without_ids = _pyarrow_to_schema_without_ids(arrow, downcast_ns_timestamp_to_us=True)
    schema = apply_name_mapping(without_ids, name_mapping(meta))
    return Schema(*schema.fields, schema_id=meta.current_schema_id)


def bucket_exposed(meta: TableMeta) -> bool:
    """Whether the hash bucket is an Iceberg partition field (a one-column key)."""
    return meta.spec.bucketed and len(meta.primary_key) == 1


def partition_spec(meta: TableMeta) -> PartitionSpec:
    ids = field_ids(meta.schemas)
    fields = [
        PartitionField(
            source_id=ids[column],
            field_id=PARTITION_FIELD_BASE + i,
            transform=IdentityTransform(),
            name=column,
        )
        for i, column in enumerate(meta.spec.columns)
    ]
    if bucket_exposed(meta):
        key = meta.primary_key[0]
        fields.append(
            PartitionField(
                source_id=ids[key],
                field_id=PARTITION_FIELD_BASE + len(fields),
                transform=BucketTransform(num_buckets=meta.spec.hash_buckets),
                name=f"{key}_bucket",
            )
        )
    return PartitionSpec(*fields, spec_id=0)


def partition_values(
    meta: TableMeta, desc: str, spec: PartitionSpec, schema: Schema
) -> list[PartitionValue | int | None]:
    """A leaf partition's values in Iceberg's partition-record form (dates as days, ...)."""
    texts, bucket = meta.spec.parse(desc)
    values: list[PartitionValue | int | None] = []
    for field, column in zip(spec.fields, meta.spec.columns, strict=False):
        value = typed_value(texts[column], meta.schema.field(column).type)
        values.append(partition_record_value(field, value, schema))
    if bucket_exposed(meta):
        values.append(bucket)
    return values
