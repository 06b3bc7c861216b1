"""A quick look at the catalog database before a command opens its pool.

The pool waits its whole connect timeout for an unreachable database and logs every attempt; a
command that is about to fail anyway should say so at once, in one line.
"""

from __future__ import annotations

import psycopg

from catalog import CatalogUnavailableError, one_line
from jobs.settings import redact_dsn

CATALOG_CHECK_TIMEOUT_S = 5


def check_catalog_reachable(dsn: str, timeout_s: float = CATALOG_CHECK_TIMEOUT_S) -> None:
    """Raise :class:`CatalogUnavailableError` (naming the DSN, password masked) unless one
    connection to ``dsn`` opens within ``timeout_s``."""
    try:
        psycopg.connect(dsn, connect_timeout=max(1, round(timeout_s))).close()
    except psycopg.Error as exc:
        raise CatalogUnavailableError(
            f"cannot connect to the catalog {redact_dsn(dsn)}: {one_line(exc)}"
        ) from None
