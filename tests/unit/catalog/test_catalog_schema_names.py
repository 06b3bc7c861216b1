"""Which PostgreSQL schema names a catalog may use (they go into connection options)."""

from __future__ import annotations

import pytest

from catalog import StoreSettings
from catalog.errors import InvalidNameError
from catalog.store import check_schema_name
from jobs.settings import CatalogSettings


@pytest.mark.parametrize("name", ["lakestream", "lake_2", "_lake", "public", "a" * 63])
def test_plain_lower_case_identifiers_are_accepted(name):
    assert check_schema_name(name) == name
    assert StoreSettings(schema=name).schema == name


@pytest.mark.parametrize(
    "name", ["", "Lake", "lake-house", "lake house", "lake;drop", "1lake", "pg_lake", "a" * 64]
)
def test_anything_else_is_refused(name):
    with pytest.raises(InvalidNameError):
        StoreSettings(schema=name)


def test_the_setting_defaults_to_lakestream_and_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("LAKESTREAM_CATALOG_SCHEMA", raising=False)
    assert CatalogSettings().catalog_schema == "lakestream" == StoreSettings().schema
    monkeypatch.setenv("LAKESTREAM_CATALOG_SCHEMA", "lake_b")
    assert CatalogSettings().catalog_schema == "lake_b"
    monkeypatch.setenv("LAKESTREAM_CATALOG_SCHEMA", "Lake-B")
    with pytest.raises(ValueError, match="LAKESTREAM_CATALOG_SCHEMA"):
        CatalogSettings()
