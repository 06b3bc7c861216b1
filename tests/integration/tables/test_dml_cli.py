"""``lakestream tables delete/update`` as a user runs them: a subprocess against a real catalog."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog import Catalog
from tests.fixtures.cli import lakestream

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.date32())])


@pytest.fixture
def events(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA, partition_by=["region"])
    table.append(
        pa.table(
            {
                "id": pa.array(range(6), pa.int64()),
                "region": ["eu", "us"] * 3,
                "day": pa.array([19000 + i for i in range(6)], pa.int32()).cast(pa.date32()),
            }
        )
    )
    return table


def test_delete_then_update(events, catalog_dsn: str):
    deleted = lakestream("tables", "delete", "logs.events", "--where", "region = 'eu' AND id > 0",
                         dsn=catalog_dsn)  # fmt: skip
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == (
        "logs.events: deleted 2 rows (read 1 files, marked 1, wrote 0), version 2"
    )
    updated = lakestream("tables", "update", "logs.events", "--where", "day >= '2022-01-11'",
                         "--set", "region='eu'", "--json", dsn=catalog_dsn)  # fmt: skip
    assert updated.returncode == 0, updated.stderr
    report = json.loads(updated.stdout)
    assert (report["kind"], report["rows"], report["version"]) == ("update", 2, 3)
    rows = events.scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["region"]) for r in rows) == [
        (0, "eu"), (1, "us"), (3, "eu"), (5, "eu")
    ]  # fmt: skip
    nothing = lakestream("tables", "delete", "logs.events", "--where", "id IN (100, 200)",
                         dsn=catalog_dsn)  # fmt: skip
    assert nothing.returncode == 0
    assert "nothing matched at version 3; nothing committed" in nothing.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["delete", "logs.events", "--where", "region = eu"],
         "error: --where: expected a value ('text', a number, true or false), "
         "found 'eu' at position 10"),
        (["delete", "logs.events", "--where", "region = 'eu' OR id = 1"],
         "error: --where: expected AND (OR is not supported: run one statement per "
         "alternative), found 'OR' at position 15"),
        (["delete", "logs.events", "--where", "colour = 'red'"],
         "error: column 'colour' is not in the table (columns: id, region, day)"),
        (["delete", "logs.events", "--where", "day < 'soon'"],
         "error: column 'day' is date32[day]; 'soon' is not a date32[day] value"),
        (["update", "logs.events", "--where", "id = 1", "--set", "id = 'x'"],
         "error: column 'id' is int64; 'x' is not a int64 value"),
        (["update", "logs.events", "--where", "id = 1", "--set", "region"],
         "error: --set: expected '=' after the column, found the end"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(events, catalog_dsn: str, args, message: str):
    result = lakestream("tables", *args, dsn=catalog_dsn)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == message
    assert events.current_version() == 1


def test_missing_option_and_missing_table(events, catalog_dsn: str):
    no_where = lakestream("tables", "delete", "logs.events", dsn=catalog_dsn)
    assert no_where.returncode == 2 and "--where" in no_where.stderr
    missing = lakestream("tables", "delete", "logs.nope", "--where", "id = 1", dsn=catalog_dsn)
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == "error: deleting from logs.nope failed: table 'logs.nope' does not exist"
    )
