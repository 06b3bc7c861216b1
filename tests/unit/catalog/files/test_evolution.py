"""Schema evolution: the allow/refuse matrix, and files of three schema versions read as one."""

from __future__ import annotations

import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from catalog.errors import SchemaError
from catalog.files.evolution import (
    ChangeKind,
    align_to_schema,
    check_evolution,
    is_widening,
    require_allowed,
)
from catalog.files.reader import read_files, read_merged
from catalog.files.writer import WriteOptions, prepare_merge_run, write_data_file
from catalog.model import ROW_KIND_COLUMN

FAST = WriteOptions(fsync=False)
D = decimal.Decimal

# Three versions of one CDC table (primary key: id).
V1 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("price", pa.decimal128(8, 2)),
    ]
)
V2 = pa.schema(  # qty widened, score added
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("price", pa.decimal128(8, 2)),
        pa.field("score", pa.float32()),
    ]
)
V3 = pa.schema(  # name dropped, price and score widened, tags added
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int64()),
        pa.field("price", pa.decimal128(12, 3)),
        pa.field("score", pa.float64()),
        pa.field("tags", pa.list_(pa.string())),
    ]
)


def test_three_schema_versions_are_allowed_steps() -> None:
    assert all(c.allowed for c in check_evolution(V1, V2, primary_key=["id"]))
    changes = check_evolution(V2, V3, primary_key=["id"], allow_drop=True)
    assert all(c.allowed for c in changes)
    assert {(c.kind, c.column) for c in changes} == {
        (ChangeKind.DROP_COLUMN, "name"),
        (ChangeKind.WIDEN_TYPE, "price"),
        (ChangeKind.WIDEN_TYPE, "score"),
        (ChangeKind.ADD_COLUMN, "tags"),
    }


def test_align_reads_every_version_under_the_latest() -> None:
    v1 = pa.record_batch(
        [
            pa.array([1], pa.int64()),
            pa.array([2], pa.int32()),
            pa.array(["a"]),
            pa.array([D("1.25")], pa.decimal128(8, 2)),
        ],
        schema=V1,
    )
    v2 = pa.record_batch(
        [
            pa.array([2], pa.int64()),
            pa.array([3], pa.int64()),
            pa.array(["b"]),
            pa.array([D("2.50")], pa.decimal128(8, 2)),
            pa.array([0.5], pa.float32()),
        ],
        schema=V2,
    )
    aligned = [align_to_schema(b, V3) for b in (v1, v2)]
    assert all(b.schema.equals(V3) for b in aligned)
    assert [b.to_pylist()[0] for b in aligned] == [
        {"id": 1, "qty": 2, "price": D("1.250"), "score": None, "tags": None},
        {"id": 2, "qty": 3, "price": D("2.500"), "score": 0.5, "tags": None},
    ]


def _write(location: Path, schema: pa.Schema, rows: list[dict[str, object]], cdc: bool) -> str:
    table = pa.Table.from_pylist(rows, schema=schema)
    if cdc:
        table = prepare_merge_run(table, ["id"])
    return write_data_file(table, location, bucket=0, options=FAST).path


def test_plain_and_merge_reads_span_schema_versions(tmp_path: Path) -> None:
    rows = [
        (
            V1,
            [
                {"id": 1, "qty": 1, "name": "a", "price": D("1.00")},
                {"id": 2, "qty": 2, "name": "b", "price": D("2.00")},
            ],
        ),
        (V2, [{"id": 2, "qty": 20, "name": "b", "price": D("2.00"), "score": 2.5}]),
        (V3, [{"id": 3, "qty": 3, "price": D("3.125"), "score": 3.5, "tags": ["x"]}]),
    ]
    for cdc in (False, True):
        paths = [_write(tmp_path, schema, data, cdc) for schema, data in rows]
        if cdc:
            batches = read_merged(tmp_path, paths, V3, ["id"], ordered=True)
        else:
            batches = read_files(tmp_path, paths, V3)
        table = pa.Table.from_batches(list(batches))
        assert table.schema.equals(V3)
        expected_qty = [1, 20, 3] if cdc else [1, 2, 20, 3]
        assert table.column("qty").to_pylist() == expected_qty
        assert table.column("tags").to_pylist()[-1] == ["x"]


def test_projection_and_filters_on_added_columns_of_old_files(tmp_path: Path) -> None:
    old = _write(tmp_path, V1, [{"id": 1, "qty": 1, "name": "a", "price": D("1.00")}], False)
    new = _write(tmp_path, V3, [{"id": 2, "qty": 2, "price": D("1.00"), "score": 9.0}], False)
    import pyarrow.compute as pc

    batches = read_files(tmp_path, [old, new], V3, columns=["id"], row_filter=pc.field("score") > 1)
    assert pa.Table.from_batches(list(batches)).column("id").to_pylist() == [2]


@pytest.mark.parametrize(
    ("data", "target", "column"),
    [
        (pa.table({"x": pa.array([1], pa.int64())}), pa.schema([("x", pa.int32())]), "x"),
        (pa.table({"x": ["1"]}), pa.schema([("x", pa.int64())]), "x"),
        (pa.table({"x": [1]}), pa.schema([pa.field("y", pa.int64(), nullable=False)]), "y"),
        (pa.table({"x": [1, None]}), pa.schema([pa.field("x", pa.int64(), nullable=False)]), "x"),
        (
            pa.table({"s": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))}),
            pa.schema([("s", pa.struct([("a", pa.int16())]))]),
            "s.a",
        ),
    ],
    ids=["narrowing", "other-type", "missing-required", "nulls-in-required", "nested"],
)
def test_align_refuses_what_cannot_be_read(data: pa.Table, target: pa.Schema, column: str) -> None:
    with pytest.raises(SchemaError) as err:
        align_to_schema(data, target)
    assert err.value.column == column
    assert column in str(err.value)


def test_align_evolves_structs_by_field_name() -> None:
    old = pa.table({"s": pa.array([{"a": 1}, None], pa.struct([("a", pa.int32())]))})
    target = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.string())]))])
    aligned = align_to_schema(old, target)
    assert aligned.column("s").to_pylist() == [{"a": 1, "b": None}, None]


def f(name: str, t: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, t, nullable=nullable)


BASE = [f("id", pa.int64(), False), f("x", pa.int32())]

# (change to the base schema, expected kind, allowed)
MATRIX = [
    ([*BASE, f("y", pa.string())], ChangeKind.ADD_COLUMN, True),
    ([*BASE, f("y", pa.string(), False)], ChangeKind.ADD_COLUMN, False),
    ([*BASE, f("_ls_extra", pa.string())], ChangeKind.ADD_COLUMN, False),
    ([BASE[0]], ChangeKind.DROP_COLUMN, True),  # with allow_drop=True
    ([BASE[0], f("x", pa.int64())], ChangeKind.WIDEN_TYPE, True),
    ([BASE[0], f("x", pa.float64())], ChangeKind.WIDEN_TYPE, True),
    ([BASE[0], f("x", pa.float32())], ChangeKind.CHANGE_TYPE, False),
    ([BASE[0], f("x", pa.int16())], ChangeKind.CHANGE_TYPE, False),
    ([BASE[0], f("x", pa.string())], ChangeKind.CHANGE_TYPE, False),
    ([BASE[0], f("x", pa.decimal128(10, 0))], ChangeKind.WIDEN_TYPE, True),
    ([BASE[0], f("x", pa.decimal128(10, 1))], ChangeKind.CHANGE_TYPE, False),
    ([BASE[0], f("x", pa.int32(), False)], ChangeKind.MAKE_REQUIRED, False),
    ([f("id", pa.int64(), True), BASE[1]], ChangeKind.MAKE_NULLABLE, False),  # primary key
    ([f("id", pa.decimal128(20, 0), False), BASE[1]], ChangeKind.WIDEN_TYPE, False),  # pk
    ([BASE[1]], ChangeKind.DROP_COLUMN, False),  # dropping the primary key
]


@pytest.mark.parametrize(
    ("fields", "kind", "allowed"), MATRIX, ids=[f"{m[1].value}-{i}" for i, m in enumerate(MATRIX)]
)
def test_check_evolution_matrix(fields: list[pa.Field], kind: ChangeKind, allowed: bool) -> None:
    changes = check_evolution(
        pa.schema(BASE),
        pa.schema(fields),
        primary_key=["id"],
        allow_drop=kind is ChangeKind.DROP_COLUMN,
    )
    assert [(c.kind, c.allowed) for c in changes] == [(kind, allowed)]
    if not allowed:
        with pytest.raises(SchemaError) as err:
            require_allowed(changes, table="shop.orders")
        assert err.value.table == "shop.orders"
        assert err.value.column == changes[0].column
        assert "shop.orders" in str(err.value)
        assert repr(changes[0].column) in str(err.value)


def test_dropping_needs_explicit_permission() -> None:
    old, new = pa.schema(BASE), pa.schema([BASE[0]])
    assert not check_evolution(old, new)[0].allowed
    assert check_evolution(old, new, allow_drop=True)[0].allowed


def test_identical_and_reordered_schemas_have_no_changes() -> None:
    assert check_evolution(pa.schema(BASE), pa.schema(BASE[::-1])) == []
    require_allowed([])


def test_nested_changes_name_the_nested_column() -> None:
    old = pa.schema([("addr", pa.struct([("zip", pa.int32())]))])
    new = pa.schema([("addr", pa.struct([("zip", pa.int64()), ("city", pa.string())]))])
    changes = check_evolution(old, new)
    assert {(c.column, c.kind, c.allowed) for c in changes} == {
        ("addr.zip", ChangeKind.WIDEN_TYPE, True),
        ("addr.city", ChangeKind.ADD_COLUMN, True),
    }
    narrowed = pa.schema([("tags", pa.list_(pa.int32()))])
    wide = pa.schema([("tags", pa.list_(pa.int64()))])
    assert check_evolution(wide, narrowed)[0].column == "tags.element"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (pa.int8(), pa.int64(), True),
        (pa.uint32(), pa.int64(), True),
        (pa.uint32(), pa.int32(), False),
        (pa.int32(), pa.uint64(), False),
        (pa.int64(), pa.float64(), False),
        (pa.int16(), pa.float32(), True),
        (pa.float16(), pa.float64(), True),
        (pa.float64(), pa.float32(), False),
        (pa.decimal128(5, 2), pa.decimal256(40, 2), True),
        (pa.decimal128(5, 2), pa.decimal128(6, 3), True),
        (pa.decimal128(5, 2), pa.decimal128(5, 3), False),
        (pa.int64(), pa.decimal128(19, 0), True),
        (pa.uint64(), pa.decimal128(19, 0), False),
        (pa.string(), pa.large_string(), True),
        (pa.string(), pa.binary(), False),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), True),
        (pa.date32(), pa.date64(), True),
        (pa.timestamp("ms"), pa.timestamp("us"), True),
        (pa.timestamp("us"), pa.timestamp("ns"), False),
        (pa.timestamp("us"), pa.timestamp("ms"), False),
        (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
        (pa.time32("s"), pa.time64("us"), True),
        (pa.null(), pa.string(), True),
        (pa.int32(), pa.null(), False),
    ],
)
def test_widening_rules(old: pa.DataType, new: pa.DataType, expected: bool) -> None:
    assert is_widening(old, new) is expected


def test_row_kind_column_is_not_part_of_the_table_schema() -> None:
    assert ROW_KIND_COLUMN.startswith("_ls_")
