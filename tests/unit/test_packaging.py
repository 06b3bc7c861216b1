"""Files the packages read at run time must be shipped in wheels, not only in the checkout."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("package", ["catalog", "compaction"])
def test_every_sql_file_is_package_data(package: str):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"][package]
    sql_files = [p.relative_to(ROOT / package).as_posix() for p in (ROOT / package).rglob("*.sql")]
    assert sql_files
    missing = [
        f
        for f in sql_files
        if not any(fnmatch.fnmatch(f, p) and f.count("/") == p.count("/") for p in patterns)
    ]
    assert missing == []
