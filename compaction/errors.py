"""The compactor's errors: one root, so the service can tell its own failures from the catalog's."""

from __future__ import annotations


class CompactionError(Exception):
    """Root of every error the compactor raises itself."""
