"""The driver's connection to the catalog, shared by batch and change reads."""

from __future__ import annotations

from pydantic import SecretStr

from catalog import Catalog, StoreSettings


def connect(dsn: SecretStr, schema: str) -> Catalog:
    """A small, read-only use of the catalog: one connection; it creates and migrates nothing."""
    return Catalog.connect(
        dsn.get_secret_value(), settings=StoreSettings(pool_size=1, schema=schema), create=False
    )
