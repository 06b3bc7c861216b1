"""Named SQL queries, kept together in ``.sql`` files rather than scattered in code.

The catalog's are in ``sql/queries.sql``; other packages that keep tables in the catalog
database (the compactor's queue) load their own file the same way with :class:`NamedQueries`.
"""

from __future__ import annotations

import re
from functools import cached_property
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


class NamedQueries:
    """The ``-- name: NAME`` blocks of one packaged ``.sql`` file, read once."""

    def __init__(self, package: str, resource: str) -> None:
        self._package = package
        self._resource = resource

    @cached_property
    def _queries(self) -> dict[str, str]:
        text = resources.files(self._package).joinpath(self._resource).read_text(encoding="utf-8")
        parts = _HEADER.split(text)
        queries: dict[str, str] = {}
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in queries:
                raise RuntimeError(f"query {name!r} is defined twice in {self._resource}")
            lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
            queries[name] = "\n".join(lines)
        return queries

    def __call__(self, name: str) -> LiteralString:
        """The SQL text of a named query. It comes from a package file, never from input."""
        return self._queries[name]

    def names(self) -> list[str]:
        return sorted(self._queries)


query = NamedQueries("catalog", "sql/queries.sql")
