"""A lakestream table's schema, partition spec and name mapping as Iceberg sees them.

**Field ids** are a function of the table's schema history alone (:mod:`catalog.field_ids`,
which needs no pyiceberg): every Parquet file written since issue 51 carries them
(``PARQUET:field_id``), stamped by the writers from the same function.

Older files carry none, so every Iceberg schema comes with its **name mapping**
(``schema.name-mapping.default``): readers (pyiceberg, DuckDB, Spark) resolve the columns of a
file without ids by name through it. lakestream's internal ``_ls_*`` columns have ids (in files
and in the mapping) that no schema holds, so readers skip them.

**Partitions**: each range column is an identity partition field. A CDC table's hash bucket is
the Iceberg bucket transform of its key when the key is one column (lakestream computes buckets
with Iceberg's hash: ``catalog/files/bucketing.py``), so engines prune buckets on key
predicates; a composite key chains the hash through its columns, which no Iceberg transform
expresses, and its buckets are then not exposed: their files are plain data files of the range
partition.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.partitioning import PartitionField, PartitionSpec, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import MappedField, NameMapping, apply_name_mapping
from pyiceberg.transforms import BucketTransform, IdentityTransform

from catalog.field_ids import INTERNAL_FIELD_IDS, children, field_ids
from catalog.meta import TableMeta
from catalog.model import ROW_KIND_COLUMN, SEQUENCE_COLUMN, UNSET_COLUMN, UNSET_TYPE
from catalog.partitioning import PartitionValue, typed_value

#: The first id of partition fields (Iceberg's convention: 1000 and up).
PARTITION_FIELD_BASE = 1000


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
    nested = [_mapped(f"{path}.{n}", t, ids) for n, t in children(arrow_type)]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        # Parquet names a list's element "element" (Iceberg) or "item" (Arrow's default)
        nested = [nested[0].model_copy(update={"names": ["element", "item"]})]
    return MappedField(field_id=ids[path], names=[name], fields=nested)


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
