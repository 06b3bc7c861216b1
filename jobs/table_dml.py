"""``lakestream tables delete/update``: one statement by predicate, in this process, reported."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from catalog import Catalog, SchemaError, StatementError, StatementResult
from jobs.predicates import (
    PredicateSyntaxError,
    parse_assignments,
    parse_where,
    typed_assignments,
    typed_predicates,
)


class DmlUsageError(Exception):
    """A statement the user wrote wrongly (exit code 2): bad grammar, column or value."""


def run_dml(
    catalog: Catalog, name: str, where: str, assignments: Sequence[str] | None = None
) -> StatementResult:
    """Parse, check against the table, and run a DELETE (``assignments`` None) or UPDATE."""
    table = catalog.load_table(name)
    try:
        predicates = typed_predicates(parse_where(where), table.schema)
        values = (
            typed_assignments(parse_assignments(assignments), table.schema)
            if assignments is not None
            else None
        )
    except PredicateSyntaxError as exc:
        raise DmlUsageError(str(exc)) from exc
    try:
        if values is None:
            return table.delete(where=predicates)
        return table.update(where=predicates, set=values)
    except (StatementError, SchemaError) as exc:
        raise DmlUsageError(str(exc)) from exc


def report_line(result: StatementResult) -> str:
    verb = "deleted" if result.kind.value == "delete" else "updated"
    where = (
        f"version {result.version}"
        if result.version is not None
        else f"nothing matched at version {result.base_version}; nothing committed"
    )
    return f"{result.table}: {verb} {result.rows} rows ({_files(result)}), {where}"


def _files(result: StatementResult) -> str:
    """What the statement did to files: marked with a deletion vector (append tables), dropped
    (every row gone) or replaced (copy-on-write; a CDC table's are always 0), and written."""
    read = f"read {result.files_read} files"
    wrote = f"wrote {result.files_written}"
    if not result.vectors_written:
        return f"{read}, replaced {result.files_replaced}, {wrote}"
    dropped = result.files_replaced - result.vectors_written
    marked = f"marked {result.vectors_written}" + (f", dropped {dropped}" if dropped else "")
    return f"{read}, {marked}, {wrote}"


def report_json(result: StatementResult) -> dict[str, Any]:
    data = asdict(result)
    data.pop("commit")
    data["kind"] = result.kind.value
    return data
