"""``lakestream tables changes``: a look at a table's change feed from the shell."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog
from tests.fixtures.cli import lakestream

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("total", pa.float64())])


def _orders(catalog_dsn: str, warehouse: Path) -> None:
    with Catalog.connect(catalog_dsn, warehouse=str(warehouse)) as cat:
        orders = cat.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2)
        orders.upsert(pa.table({"id": [1, 2], "total": [1.0, 2.0]}, schema=SCHEMA))  # v1
        orders.upsert(pa.table({"id": [1], "total": [1.5]}, schema=SCHEMA))  # v2
        orders.delete(pa.table({"id": pa.array([2], pa.int64())}))  # v3
        orders.upsert(pa.table({"id": [3], "total": [3.0]}, schema=SCHEMA))  # v4
        orders.expire_versions(older_than=dt.timedelta(0), retain_last=2)  # keeps 3 and 4


def test_changes_as_json_and_as_text(catalog_dsn, warehouse):
    _orders(catalog_dsn, warehouse)
    out = lakestream("tables", "changes", "shop.orders", "--from", "4", "--json", dsn=catalog_dsn)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert (row["id"], row["_change_type"], row["_commit_version"]) == (3, "insert", 4)
    assert dt.datetime.fromisoformat(row["_commit_timestamp"]).tzinfo is not None

    text = lakestream(
        "tables", "changes", "shop.orders", "--from", "4", "--to", "4", dsn=catalog_dsn
    )
    assert text.returncode == 0, text.stderr
    header, line, count = text.stdout.splitlines()
    assert header.split() == ["version", "change", "id", "total"]
    assert line.split() == ["4", "insert", "3", "3.0"] and count == "(1 changes)"


def test_expired_versions_and_bad_ranges_are_one_line(catalog_dsn, warehouse):
    _orders(catalog_dsn, warehouse)
    expired = lakestream("tables", "changes", "shop.orders", "--from", "2", dsn=catalog_dsn)
    assert expired.returncode == 1
    assert "changes from version 2 need version 1, but versions below 3 were expired" in (
        expired.stderr
    )
    assert len(expired.stderr.strip().splitlines()) == 1
    backwards = lakestream(
        "tables", "changes", "shop.orders", "--from", "4", "--to", "3", dsn=catalog_dsn
    )
    assert backwards.returncode == 2 and "--to 3 is below --from 4" in backwards.stderr
    missing = lakestream("tables", "changes", "shop.orders", dsn=catalog_dsn)
    assert missing.returncode == 2 and "--from" in missing.stderr
    future = lakestream(
        "tables", "changes", "shop.orders", "--from", "1", "--to", "9", dsn=catalog_dsn
    )
    assert future.returncode == 1 and "not 9" in future.stderr
