"""Pruning by statistics: decisions on fixed stats, and soundness against the real filter."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import SchemaError
from catalog.files.pruning import Predicate, may_contain, may_match, to_expression
from catalog.files.stats import column_stats
from catalog.model import ColumnStats, DataFile

INTS = ColumnStats(min=10, max=20, null_count=0)


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("=", 9, False),
        ("=", 10, True),
        ("=", 20, True),
        ("=", 21, False),
        ("!=", 15, True),
        ("<", 10, False),
        ("<", 11, True),
        ("<=", 10, True),
        ("<=", 9, False),
        (">", 20, False),
        (">", 19, True),
        (">=", 20, True),
        (">=", 21, False),
        ("in", (1, 2, 30), False),
        ("in", (1, 15), True),
        ("in", (), False),
        ("is_null", None, False),
        ("is_not_null", None, True),
    ],
)
def test_integer_bounds(op: str, value: object, expected: bool) -> None:
    predicate = Predicate("x", op, value)  # type: ignore[arg-type]
    assert may_match(predicate, INTS, pa.int64(), row_count=5) is expected


def test_not_equal_prunes_only_a_constant_column() -> None:
    constant = ColumnStats(min=3, max=3)
    assert not may_match(Predicate("x", "!=", 3), constant, pa.int64(), 4)
    assert may_match(Predicate("x", "!=", 3), constant, pa.float64(), 4)  # NaN != 3


def test_all_null_columns_match_only_null_tests() -> None:
    nulls = ColumnStats(null_count=4)
    assert not may_match(Predicate("x", "=", 1), nulls, pa.int64(), 4)
    assert may_match(Predicate("x", "is_null"), nulls, pa.int64(), 4)
    assert not may_match(Predicate("x", "is_not_null"), nulls, pa.int64(), 4)


def test_unknown_stats_never_prune() -> None:
    assert may_match(Predicate("x", "=", 1), None, pa.int64(), 4)
    assert may_match(Predicate("x", "=", 1), ColumnStats(), pa.int64(), 4)
    assert may_match(Predicate("x", "=", "not a number"), INTS, pa.int64(), 4)
    assert may_match(Predicate("b", "=", b"x"), ColumnStats(), pa.binary(), 4)
    garbled = ColumnStats(min="yesterday", max="today")
    assert may_match(Predicate("d", "=", dt.date(2024, 1, 1)), garbled, pa.date32(), 4)


def test_typed_bounds() -> None:
    day = ColumnStats(min="2024-01-01", max="2024-01-31")
    assert not may_match(Predicate("d", ">", dt.date(2024, 2, 1)), day, pa.date32(), 1)
    assert may_match(Predicate("d", "=", dt.date(2024, 1, 15)), day, pa.date32(), 1)
    ts = ColumnStats(min="2024-01-01T00:00:00.000000001Z", max="2024-01-01T00:00:00.000000002Z")
    ns = pa.timestamp("ns", tz="UTC")
    assert not may_match(Predicate("t", "<", pa.scalar(1, ns)), ts, ns, 1)
    money = ColumnStats(min="1.10", max="2.50")
    dec = pa.decimal128(5, 2)
    assert not may_match(Predicate("m", ">", decimal.Decimal("2.5")), money, dec, 1)
    assert may_match(Predicate("m", ">=", decimal.Decimal("2.5")), money, dec, 1)
    text = ColumnStats(min="apple", max="melon")
    assert not may_match(Predicate("s", "=", "zebra"), text, pa.string(), 1)
    assert may_match(Predicate("s", ">", "b"), text, pa.string(), 1)


def test_may_contain_combines_predicates_and_ignores_unknown_columns() -> None:
    file = DataFile(
        path="data/f.parquet",
        size_bytes=1,
        row_count=5,
        stats={"x": INTS, "y": ColumnStats(min="a", max="c")},
    )
    schema = pa.schema([("x", pa.int64()), ("y", pa.string())])
    assert may_contain(file, [Predicate("x", ">", 15), Predicate("y", "<", "b")], schema)
    assert not may_contain(file, [Predicate("x", ">", 15), Predicate("y", ">", "d")], schema)
    assert may_contain(file, [Predicate("nope", "=", 1)], schema)


def test_predicates_become_expressions() -> None:
    table = pa.table({"x": [1, 2, None, 4]})
    expression = to_expression([Predicate("x", ">=", 2), Predicate("x", "in", (2, 3, 4))])
    assert expression is not None
    assert table.filter(expression).column("x").to_pylist() == [2, 4]
    nulls = to_expression([Predicate("x", "is_null")])
    assert table.filter(nulls).num_rows == 1
    assert to_expression([]) is None


def test_values_take_the_column_type_so_naive_datetimes_compare_with_zoned_columns() -> None:
    zone = dt.timezone(dt.timedelta(hours=2))
    table = pa.table(
        {
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 3, tzinfo=dt.UTC)],
                pa.timestamp("us", tz="UTC"),
            ),
            "f": pa.array([1.0, 2.5], pa.float64()),
        }
    )
    cases = [
        (Predicate("ts", ">=", dt.datetime(2024, 1, 2)), [1]),  # naive: taken as UTC
        (Predicate("ts", "<", dt.datetime(2024, 1, 2, 1, tzinfo=zone)), [0]),
        (Predicate("ts", "in", [dt.datetime(2024, 1, 3)]), [1]),
        (Predicate("f", ">", 2), [1]),
    ]
    for predicate, rows in cases:
        expression = to_expression([predicate], table.schema)
        assert expression is not None
        got = table.append_column("i", pa.array([0, 1])).filter(expression)
        assert got.column("i").to_pylist() == rows, predicate
    with pytest.raises(pa.ArrowInvalid, match="timezone"):  # untyped: Arrow refuses
        table.filter(Predicate("ts", ">=", dt.datetime(2024, 1, 2)).to_expression())


def test_invalid_predicates_are_refused() -> None:
    with pytest.raises(ValueError, match="operator"):
        Predicate("x", "~", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="collection"):
        Predicate("x", "in", 1)


OPS = ["=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null"]


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=20),
    op=st.sampled_from(OPS),
    value=st.integers(-60, 60),
    others=st.lists(st.integers(-60, 60), max_size=3),
)
def test_pruning_never_skips_a_file_with_matches(
    values: list[int | None], op: str, value: int, others: list[int]
) -> None:
    table = pa.table({"x": pa.array(values, pa.int64())})
    operand: object = (value, *others) if op == "in" else value
    predicate = Predicate("x", op, operand)  # type: ignore[arg-type]
    matches = table.filter(predicate.to_expression()).num_rows
    stats = column_stats(table)["x"]
    if matches:
        assert may_match(predicate, stats, pa.int64(), table.num_rows)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.text(max_size=80), min_size=1, max_size=10),
    op=st.sampled_from(["=", "<", "<=", ">", ">="]),
    value=st.text(max_size=80),
)
def test_pruning_of_truncated_strings_is_sound(values: list[str], op: str, value: str) -> None:
    table = pa.table({"s": pa.array(values, pa.string())})
    predicate = Predicate("s", op, value)  # type: ignore[arg-type]
    if table.filter(predicate.to_expression()).num_rows:
        assert may_match(predicate, column_stats(table)["s"], pa.string(), table.num_rows)


def test_float_nan_does_not_hide_matches() -> None:
    table = pa.table({"f": [float("nan"), 1.0]})
    stats = column_stats(table)["f"]
    predicate = Predicate("f", "!=", 1.0)
    assert table.filter(pc.field("f") != 1.0).num_rows == 1
    assert may_match(predicate, stats, pa.float64(), 2)


def test_text_against_a_date_column_is_parsed_like_a_literal_and_a_misspelt_one_refused():
    schema = pa.schema([("day", pa.date32()), ("n", pa.int64())])
    days = pa.table({"day": [dt.date(2026, 1, 1), dt.date(2026, 1, 2)], "n": [1, 2]}, schema=schema)
    on_day = Predicate("day", "=", "2026-01-01").to_expression(schema)
    assert days.filter(on_day).column("n").to_pylist() == [1]
    among = Predicate("day", "in", ("2026-01-02", None)).to_expression(schema)
    assert days.filter(among).column("n").to_pylist() == [2]
    assert days.filter(Predicate("n", "<", "2").to_expression(schema)).num_rows == 1
    with pytest.raises(SchemaError, match=r"filter on 'day': '2026-13-01' is not a value"):
        Predicate("day", ">", "2026-13-01").to_expression(schema)
    assert days.filter(Predicate("n", "=", 1.5).to_expression(schema)).num_rows == 0
    assert days.filter(Predicate("n", "<", 1.5).to_expression(schema)).num_rows == 1


def test_a_fraction_never_prunes_the_integers_below_it():
    stats = column_stats(pa.table({"n": pa.array([1, 1], pa.int64())}))
    file = DataFile(path="f.parquet", size_bytes=1, row_count=2, stats=stats)
    schema = pa.schema([("n", pa.int64())])
    assert may_contain(file, [Predicate("n", "<", 1.5)], schema)
    assert not may_contain(file, [Predicate("n", ">", 2)], schema)  # whole numbers still prune
