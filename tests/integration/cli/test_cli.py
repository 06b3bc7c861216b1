"""The CLI as a user runs it: a subprocess against a real catalog."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp
from tests.fixtures.cli import lakestream
from tests.fixtures.commits import adds

pytestmark = pytest.mark.integration


def test_init_list_describe_history(catalog_dsn, warehouse):
    assert (
        lakestream("catalog", "init", "--warehouse", str(warehouse), dsn=catalog_dsn).returncode
        == 0
    )
    with Catalog.connect(catalog_dsn) as cat:
        assert cat.warehouse == str(warehouse)
        table = cat.create_table(
            "shop.orders", pa.schema([("id", pa.int64())]), primary_key=["id"], hash_buckets=2
        )
        table.commit(CommitOp.MERGE, [adds("bucket=0001", "a", "b")])

    listed = lakestream("tables", "list", "--json", dsn=catalog_dsn)
    assert json.loads(listed.stdout) == ["shop.orders"]
    described = json.loads(lakestream("tables", "describe", "shop.orders", dsn=catalog_dsn).stdout)
    assert described["primary_key"] == ["id"] and described["version"] == 1
    history = json.loads(
        lakestream("tables", "history", "shop.orders", "--json", dsn=catalog_dsn).stdout
    )
    assert history[0]["op"] == "merge" and history[0]["files_added"] == 2


def test_errors_are_one_clear_line(catalog_dsn):
    missing = lakestream("tables", "describe", "shop.nothing", dsn=catalog_dsn)
    assert missing.returncode == 1
    assert "table 'shop.nothing' does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    bad = lakestream("tables", "history", "x;drop", dsn=catalog_dsn)
    assert bad.returncode == 1 and "invalid name" in bad.stderr


def test_password_never_appears_in_output():
    result = lakestream(
        "tables", "list", dsn="postgresql://u:hunter2@127.0.0.1:1/db?connect_timeout=1"
    )
    assert result.returncode == 2
    assert "hunter2" not in result.stderr + result.stdout
