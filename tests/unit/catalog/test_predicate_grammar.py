"""The --where / --set language of ``lakestream tables delete/update``: text to predicates."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.files.pruning import Predicate
from jobs.predicates import (
    PredicateSyntaxError,
    parse_assignments,
    parse_where,
    typed_assignments,
    typed_predicates,
)

names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n not in {"and", "or", "not", "in", "is", "null", "true", "false"}
)
literals = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10),
    st.integers(-(10**12), 10**12),
    st.booleans(),
)


def render(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


conditions = st.one_of(
    st.tuples(names, st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), literals),
    st.tuples(names, st.just("in"), st.lists(literals, min_size=1, max_size=4).map(tuple)),
    st.tuples(names, st.sampled_from(["is_null", "is_not_null"]), st.none()),
)


def render_condition(c: tuple[str, str, object]) -> str:
    column, op, value = c
    if op == "in":
        assert isinstance(value, tuple)
        return f"{column} IN ({', '.join(render(v) for v in value)})"
    if op == "is_null":
        return f"{column} is null"
    if op == "is_not_null":
        return f"{column} IS NOT NULL"
    return f"{column} {op} {render(value)}"


@given(st.lists(conditions, min_size=1, max_size=4))
def test_rendered_conditions_parse_back(found: list[tuple[str, str, object]]):
    text = " and ".join(render_condition(c) for c in found)
    assert parse_where(text) == found


@given(st.dictionaries(names, st.one_of(literals, st.none()), min_size=1, max_size=4))
def test_rendered_assignments_parse_back(assigned: dict[str, object]):
    text = ", ".join(f"{c}={'null' if v is None else render(v)}" for c, v in assigned.items())
    assert parse_assignments([text]) == assigned


def test_sql_spellings():
    assert parse_where("region <> 'it''s' AND \"odd name\" >= -1.5e3") == [
        ("region", "!=", "it's"),
        ("odd name", ">=", -1500.0),
    ]
    assert parse_assignments(["status='void'", "total = 0"]) == {"status": "void", "total": 0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("region", "expected an operator"),
        ("region = ", "expected a value"),
        ("region = eu", "expected a value"),
        ("region = 'eu' OR region = 'us'", "OR is not supported"),
        ("region = 'eu' region = 'us'", "expected AND"),
        ("region == 'eu'", "expected a value"),
        ("id IN (1, 2", "expected ',' or ')'"),
        ("id NOT IN (1)", "NOT IN is not supported"),
        ("region = 'eu", 'unexpected "\'"'),
        ("= 'eu'", "expected a column name"),
        ("and = 1", "expected a column name"),
        ("region = null", "expected a value"),
    ],
)
def test_bad_where_says_what_was_expected(text: str, message: str):
    with pytest.raises(PredicateSyntaxError, match=re.escape(message)):
        parse_where(text)


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "at least one assignment"),
        (["status"], "'=' after the column"),
        (["status = 'a' total = 1"], "',' between assignments"),
        (["status='a'", "status='b'"], "assigned twice"),
    ],
)
def test_bad_set(texts: list[str], message: str):
    with pytest.raises(PredicateSyntaxError, match=message):
        parse_assignments(texts)


SCHEMA = pa.schema(
    [
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("price", pa.decimal128(10, 2)),
        ("n", pa.int32()),
        ("ok", pa.bool_()),
    ]
)


def test_literals_take_the_column_type():
    where = "day = '2026-11-22' AND at >= '2026-11-22T10:00:00Z' AND price IN ('1.50', 2) AND n < 3"
    assert typed_predicates(parse_where(where), SCHEMA) == [
        Predicate("day", "=", dt.date(2026, 11, 22)),
        Predicate("at", ">=", dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)),
        Predicate("price", "in", (Decimal("1.50"), Decimal("2.00"))),
        Predicate("n", "<", 3),
    ]
    assert typed_assignments({"ok": True, "n": None}, SCHEMA) == {"ok": True, "n": None}


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("day = 'tomorrow'", "column 'day' is date32\\[day\\]; 'tomorrow' is not a"),
        ("n = 3000000000", "column 'n' is int32; 3000000000 is not a int32 value"),
        ("nope = 1", "column 'nope' is not in the table \\(columns: day, at, price, n, ok\\)"),
    ],
)
def test_values_that_do_not_fit_are_refused_naming_the_column(where: str, message: str):
    with pytest.raises(PredicateSyntaxError, match=message):
        typed_predicates(parse_where(where), SCHEMA)
