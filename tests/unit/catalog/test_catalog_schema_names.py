"""Which PostgreSQL schema names a catalog may use (they go into connection options)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from catalog import StoreSettings
from catalog.errors import InvalidNameError
from catalog.store import check_schema_name
from jobs.settings import CommandSettings


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


@pytest.mark.parametrize("env", ["LAKESTREAM_CATALOG__SCHEMA", "LAKESTREAM_CATALOG_SCHEMA"])
def test_the_setting_defaults_to_lakestream_and_is_read_from_the_environment(monkeypatch, env):
    for name in ("LAKESTREAM_CATALOG__SCHEMA", "LAKESTREAM_CATALOG_SCHEMA"):
        monkeypatch.delenv(name, raising=False)
    assert CommandSettings().catalog.db_schema == "lakestream" == StoreSettings().schema
    monkeypatch.setenv(env, "lake_b")
    assert CommandSettings().catalog.db_schema == "lake_b"
    monkeypatch.setenv(env, "Lake-B")
    with pytest.raises(ValidationError, match="schema"):
        CommandSettings()
