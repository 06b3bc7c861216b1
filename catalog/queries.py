"""Named SQL queries, kept together in ``sql/queries.sql`` rather than scattered in code."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, str]:
    text = resources.files("catalog").joinpath("sql/queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise RuntimeError(f"query {name!r} is defined twice")
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        queries[name] = "\n".join(lines)
    return queries


def query(name: str) -> LiteralString:
    """The SQL text of a named query. It comes from our own package file, never from input."""
    return _load()[name]
