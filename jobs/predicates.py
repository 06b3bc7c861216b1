"""The small predicate language of ``lakestream tables delete/update``: text to predicates.

Grammar (keywords are case-insensitive)::

    where      := condition ( AND condition )*
    condition  := column op literal
                | column [NOT] IN ( literal [, literal]* )
                | column IS [NOT] NULL
    op         := = | != | <> | < | <= | > | >=
    assignments:= column = literal ( , column = literal )*     (--set; repeatable)
    literal    := 'text' ('' inside is a quote) | number | true | false | null (--set only)
    column     := name | "quoted name"

A text literal against a non-text column is converted to the column's type (``'2026-11-22'``
for a date, ``'2026-11-22T10:00:00Z'`` for a timestamp, ``'12.50'`` for a decimal); a value
that does not convert is refused naming the column. OR, NOT (other than NOT IN / IS NOT NULL)
and expressions are not in the language: run one statement per disjunct.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from catalog.files.pruning import Predicate

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
      | (?P<op><=|>=|<>|!=|=|<|>)
      | (?P<punct>[(),])
      | (?P<quoted>"(?:[^"]|"")+")
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<bad>\S)
    )""",
    re.VERBOSE,
)


class PredicateSyntaxError(ValueError):
    """Text that is not in the language; the message says where and what was expected."""


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int

    def value(self) -> object:
        if self.kind == "string":
            return self.text[1:-1].replace("''", "'")
        if self.kind == "number":
            return float(self.text) if re.search(r"[.eE]", self.text) else int(self.text)
        word = self.text.lower()
        if word in ("true", "false"):
            return word == "true"
        return None  # null


def _tokens(text: str) -> list[_Token]:
    found = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        token = _Token(kind, match.group(kind), match.start(kind))
        if kind == "bad":
            raise PredicateSyntaxError(f"unexpected {token.text!r} at position {token.at + 1}")
        found.append(token)
    return found


class _Parser:
    def __init__(self, text: str, what: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.what = what

    def _fail(self, expected: str) -> PredicateSyntaxError:
        if self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            got = f"{token.text!r} at position {token.at + 1}"
        else:
            got = "the end"
        return PredicateSyntaxError(f"{self.what}: expected {expected}, found {got}")

    def peek_word(self, *words: str) -> bool:
        if self.pos >= len(self.tokens):
            return False
        token = self.tokens[self.pos]
        return token.kind == "word" and token.text.lower() in words

    def take(self, kind: str, expected: str, text: str | None = None) -> _Token:
        if self.pos >= len(self.tokens):
            raise self._fail(expected)
        token = self.tokens[self.pos]
        if token.kind != kind or (text is not None and token.text.lower() != text):
            raise self._fail(expected)
        self.pos += 1
        return token

    def column(self) -> str:
        if self.pos < len(self.tokens) and self.tokens[self.pos].kind == "quoted":
            return self.take("quoted", "a column").text[1:-1].replace('""', '"')
        token = self.take("word", "a column name")
        if token.text.lower() in _KEYWORDS:
            self.pos -= 1
            raise self._fail("a column name")
        return token.text

    def literal(self, *, null: bool = False) -> object:
        if self.pos < len(self.tokens):
            token = self.tokens[self.pos]
            words = ("true", "false", "null") if null else ("true", "false")
            if token.kind in ("string", "number") or (
                token.kind == "word" and token.text.lower() in words
            ):
                self.pos += 1
                return token.value()
        raise self._fail("a value ('text', a number, true or false" + (", null)" if null else ")"))

    def done(self) -> bool:
        return self.pos >= len(self.tokens)


_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false"})
_OPS = {"=": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def parse_where(text: str) -> list[tuple[str, str, object]]:
    """``region = 'eu' AND total > 10`` as ``[("region", "=", "eu"), ("total", ">", 10)]``."""
    parser = _Parser(text, "--where")
    if parser.done():
        raise PredicateSyntaxError("--where: empty; give at least one condition")
    found = [_condition(parser)]
    while not parser.done():
        if parser.peek_word("or"):
            raise parser._fail("AND (OR is not supported: run one statement per alternative)")
        parser.take("word", "AND between conditions", "and")
        found.append(_condition(parser))
    return found


def _condition(parser: _Parser) -> tuple[str, str, object]:
    column = parser.column()
    if parser.peek_word("is"):
        parser.pos += 1
        negated = parser.peek_word("not")
        parser.pos += negated
        parser.take("word", "NULL", "null")
        return (column, "is_not_null" if negated else "is_null", None)
    if parser.peek_word("not"):
        raise parser._fail("an operator (NOT IN is not supported)")
    if parser.peek_word("in"):
        parser.pos += 1
        parser.take("punct", "'(' after IN", "(")
        values = [parser.literal()]
        while parser.pos < len(parser.tokens) and parser.tokens[parser.pos].text == ",":
            parser.pos += 1
            values.append(parser.literal())
        parser.take("punct", "',' or ')'", ")")
        return (column, "in", tuple(values))
    op = parser.take("op", "an operator (= != <> < <= > >=, IN, IS [NOT] NULL)")
    return (column, _OPS[op.text], parser.literal())


def parse_assignments(texts: Iterable[str]) -> dict[str, object]:
    """``status = 'void', total = 0`` (each --set may hold several) as a column -> value map."""
    assigned: dict[str, object] = {}
    for text in texts:
        parser = _Parser(text, "--set")
        while True:
            column = parser.column()
            parser.take("op", "'=' after the column", "=")
            if column in assigned:
                raise PredicateSyntaxError(f"--set: column {column!r} is assigned twice")
            assigned[column] = parser.literal(null=True)
            if parser.done():
                break
            parser.take("punct", "',' between assignments", ",")
    if not assigned:
        raise PredicateSyntaxError("--set: give at least one assignment, e.g. status='void'")
    return assigned


def typed(value: object, arrow_type: pa.DataType, column: str) -> object:
    """A literal as a value of the column's type: text is parsed (dates, timestamps, decimals),
    numbers and booleans are cast without loss; anything else is refused naming the column."""
    if value is None:
        return None
    if pa.types.is_decimal(arrow_type) and isinstance(value, int | float):
        value = str(value)  # an int64 never fits decimal(10, 2) as a type; its text may
    try:
        scalar = pa.scalar(value)
        if not scalar.type.equals(arrow_type):
            scalar = scalar.cast(arrow_type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        shown = f"'{value}'" if isinstance(value, str) else str(value).lower()
        raise PredicateSyntaxError(
            f"column {column!r} is {arrow_type}; {shown} is not a {arrow_type} value"
        ) from exc
    return scalar.as_py()


def typed_predicates(
    predicates: Iterable[tuple[str, str, object]], schema: pa.Schema
) -> list[Predicate]:
    """The parsed conditions with their literals converted to the columns' types; a column the
    table lacks is refused (one line naming it)."""
    out = []
    for column, op, value in predicates:
        field = _field(schema, column)
        if op == "in":
            assert isinstance(value, tuple)
            out.append(Predicate(column, "in", tuple(typed(v, field.type, column) for v in value)))
        elif op in ("is_null", "is_not_null"):
            out.append(Predicate(column, op))  # type: ignore[arg-type]
        else:
            out.append(Predicate(column, op, typed(value, field.type, column)))  # type: ignore[arg-type]
    return out


def typed_assignments(assigned: dict[str, object], schema: pa.Schema) -> dict[str, object]:
    return {c: typed(v, _field(schema, c).type, c) for c, v in assigned.items()}


def _field(schema: pa.Schema, column: str) -> pa.Field:
    index = schema.get_field_index(column)
    if index < 0:
        known = ", ".join(schema.names)
        raise PredicateSyntaxError(f"column {column!r} is not in the table (columns: {known})")
    return schema.field(index)
