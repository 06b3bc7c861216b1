"""Field ids stamped into the Parquet schema: what pyarrow writes and reads back."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from catalog.field_ids import FIELD_ID_KEY, INTERNAL_FIELD_IDS, field_ids, with_field_ids

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int32())),
        ("at", pa.struct([("x", pa.int8()), ("y", pa.string())])),
        ("_ls_kind", pa.int8()),
    ]
)


def _parquet_ids(path: Path) -> dict[str, int]:
    """Field path -> its Parquet field id, as pyarrow reads the file's footer back."""
    found: dict[str, int] = {}

    def walk(field: pa.Field, path: str) -> None:
        if field.metadata and FIELD_ID_KEY in field.metadata:
            found[path] = int(field.metadata[FIELD_ID_KEY])
        kind = field.type
        if pa.types.is_struct(kind):
            for child in kind:
                walk(child, f"{path}.{child.name}")
        elif pa.types.is_list(kind):
            walk(kind.value_field, f"{path}.element")
        elif pa.types.is_map(kind):
            walk(kind.key_field, f"{path}.key")
            walk(kind.item_field, f"{path}.value")

    for field in pq.read_schema(path):
        walk(field, field.name)
    return found


def test_every_field_and_nested_field_is_written_with_its_id(tmp_path: Path) -> None:
    ids = field_ids({0: SCHEMA})
    assert ids == {
        "id": 1,
        "tags": 2,
        "tags.element": 3,
        "attrs": 4,
        "attrs.key": 5,
        "attrs.value": 6,
        "at": 7,
        "at.x": 8,
        "at.y": 9,
    }
    stamped = with_field_ids(SCHEMA, ids)
    assert stamped.field("id").metadata == {FIELD_ID_KEY: b"1"}
    row = {"id": 1, "tags": ["a"], "attrs": [("k", 1)], "at": {"x": 1, "y": "b"}, "_ls_kind": 0}
    pq.write_table(pa.Table.from_pylist([row], schema=stamped), tmp_path / "f.parquet")
    assert _parquet_ids(tmp_path / "f.parquet") == {
        **ids,
        "_ls_kind": INTERNAL_FIELD_IDS["_ls_kind"],
    }
    back = pq.read_table(tmp_path / "f.parquet")
    assert back.schema.equals(SCHEMA)  # metadata aside, the same schema
    assert back.to_pylist() == [row | {"attrs": [("k", 1)]}]


def test_a_field_without_an_id_keeps_no_metadata() -> None:
    stamped = with_field_ids(pa.schema([("new", pa.int32())]), {})
    assert stamped.field("new").metadata is None
