"""``lakestream tables compact`` as a user runs it: a subprocess against a real catalog."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp
from tests.fixtures.cli import lakestream
from tests.fixtures.compaction import rows_at

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string())])


def events_table(catalog: Catalog, properties: dict[str, str] | None = None):
    table = catalog.create_table(
        "logs.events", EVENTS, partition_by=["region"], properties=properties
    )
    for i in range(8):
        region = ("eu", "us")[i % 2]
        table.append(pa.table({"id": pa.array([i], pa.int64()), "region": [region]}))
    return table


def test_compact_one_partition_then_the_rest(catalog: Catalog, catalog_dsn: str):
    table = events_table(catalog)
    before = rows_at(table)

    eu = lakestream("tables", "compact", "logs.events", "--partition", "region=eu", "--json",
                    dsn=catalog_dsn)  # fmt: skip
    assert eu.returncode == 0, eu.stderr
    report = json.loads(eu.stdout)
    assert report["base_version"] == 8
    [task] = report["tasks"]
    assert (task["partition"], task["outcome"], task["version"]) == ("region=eu", "committed", 9)
    assert (task["files_in"], task["files_out"], task["rows_in"], task["rows_out"]) == (4, 1, 4, 4)

    rest = lakestream("tables", "compact", "logs.events", dsn=catalog_dsn)
    assert rest.returncode == 0, rest.stderr
    assert "region=us: files 4 -> 1, rows 4 -> 4, committed, version 10" in rest.stdout
    assert rows_at(table) == before
    assert [v.op for v in table.history(limit=2)] == [CommitOp.COMPACTION] * 2

    again = lakestream("tables", "compact", "logs.events", dsn=catalog_dsn)
    assert again.returncode == 0
    assert "nothing to compact at version 10" in again.stdout


def test_cdc_buckets_by_range_partition(catalog: Catalog, catalog_dsn: str):
    table = catalog.create_table(
        "shop.orders", EVENTS, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    for _ in range(3):
        table.upsert(pa.table({"id": pa.array(range(10), pa.int64()), "region": ["eu"] * 10}))
    result = lakestream("tables", "compact", "shop.orders", "--partition", "region=eu",
                        "--json", dsn=catalog_dsn)  # fmt: skip
    assert result.returncode == 0, result.stderr
    tasks = json.loads(result.stdout)["tasks"]
    assert sorted(t["partition"] for t in tasks) == [
        "region=eu,bucket=0000",
        "region=eu,bucket=0001",
    ]
    assert all(t["kind"] == "merge-bucket" and t["files_out"] == 1 for t in tasks)
    assert sum(t["rows_out"] for t in tasks) == 10


@pytest.mark.parametrize(
    ("args", "properties", "message"),
    [
        (["--partition", "country=fr"], None, "--partition 'country=fr'"),
        (["--partition", "region=mars"], None, "has no partition 'region=mars'"),
        (
            [],
            {"compaction.min-file-num": "lots"},
            "'compaction.min-file-num' of table logs.events",
        ),
        ([], {"compaction.enabled": "false"}, "compaction is disabled for logs.events"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(catalog, catalog_dsn, args, properties, message):
    events_table(catalog, properties)
    result = lakestream("tables", "compact", "logs.events", *args, dsn=catalog_dsn)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert len(catalog.load_table("logs.events").plan().files) == 8


def test_a_missing_table_exits_1(catalog_dsn: str):
    result = lakestream("tables", "compact", "shop.nothing", dsn=catalog_dsn)
    assert result.returncode == 1
    assert "table 'shop.nothing' does not exist" in result.stderr
    assert "Traceback" not in result.stderr
