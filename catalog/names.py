"""Validation of user-supplied names.

Names reach SQL (always as parameters, never spliced), file paths and partition descriptors, so
they are checked once, here, with errors that say what is wrong. Namespace and table names are
ASCII identifiers compared case-insensitively (stored lower-case), as in Hive, Spark and Iceberg.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog.errors import InvalidNameError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_LENGTH = 128
#: Columns with this prefix are lakestream's own (row kind, source sequence); users cannot add them.
RESERVED_COLUMN_PREFIX = "_ls_"


@dataclass(frozen=True, order=True)
class TableName:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"


def check_identifier(value: str, what: str) -> str:
    """Return ``value`` lower-cased if it is a valid identifier, else raise."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(str(value), f"{what} must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidNameError(value, f"{what} is longer than {MAX_NAME_LENGTH} characters")
    if not _IDENTIFIER.fullmatch(value):
        raise InvalidNameError(
            value, f"{what} may hold only ASCII letters, digits and '_' and not start with a digit"
        )
    return value.lower()


def parse_table_name(value: str) -> TableName:
    """Parse ``namespace.table``; both parts are required."""
    if not isinstance(value, str):
        raise InvalidNameError(str(value), "a table name must be a string 'namespace.table'")
    parts = value.split(".")
    if len(parts) != 2:
        raise InvalidNameError(value, "a table name must have the form 'namespace.table'")
    return TableName(check_identifier(parts[0], "namespace"), check_identifier(parts[1], "table"))


def check_column_name(value: str, *, allow_reserved: bool = False) -> str:
    """Column names may be any printable text, but not lakestream's reserved prefix."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(str(value), "a column name must be a non-empty string")
    if len(value) > 255:
        raise InvalidNameError(value, "a column name is longer than 255 characters")
    if not value.isprintable():
        raise InvalidNameError(value, "a column name may not hold control characters")
    if not allow_reserved and value.startswith(RESERVED_COLUMN_PREFIX) and value != "_ls_seq":
        raise InvalidNameError(value, f"the prefix {RESERVED_COLUMN_PREFIX!r} is reserved")
    return value


def check_key_column_name(value: str, what: str) -> str:
    """Partition and key columns appear in partition descriptors and paths: identifiers only."""
    check_column_name(value)
    if not _IDENTIFIER.fullmatch(value):
        raise InvalidNameError(value, f"a {what} column must be an ASCII identifier")
    return value
