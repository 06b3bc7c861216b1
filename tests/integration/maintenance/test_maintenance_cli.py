"""``lakestream tables expire|vacuum|ttl`` as a user runs them: subprocesses, real catalog."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from catalog import Catalog
from tests.fixtures.cli import lakestream
from tests.fixtures.compaction import files_on_disk, rows_at
from tests.integration.maintenance.support import row_counts

pytestmark = pytest.mark.integration
DAY = pa.schema([("id", pa.int64()), ("day", pa.date32())])


def daily_table(catalog: Catalog, properties: dict[str, str] | None = None):
    table = catalog.create_table(
        "logs.daily", DAY, partition_by=["day"], properties=properties or {"partition.ttl": "30d"}
    )
    for i in range(6):
        day = dt.date(2020, 1, 1) + dt.timedelta(days=i % 2)
        table.append(pa.table({"id": pa.array([i], pa.int64()), "day": [day]}, schema=DAY))
    table.append(pa.table({"id": pa.array([99], pa.int64()), "day": [dt.date.today()]}, schema=DAY))
    return table


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["expire", "logs.daily", "--older-than", "7x"], "--older-than: '7x' is not a duration"),
        (["expire", "logs.daily", "--retain-last", "0"], "--retain-last must be at least 1"),
        (["expire", "logs.daily", "--retain-last", "ten"], "--retain-last takes a whole number"),
        (["vacuum", "logs.daily", "--older-than", "-1h"], "--older-than: '-1h' is not a duration"),
        (["ttl", "logs.plain"], "logs.plain has no partition.ttl property"),
        (["expire", "logs.badprop"], "snapshot.retain-last must be a whole number"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(catalog: Catalog, catalog_dsn, args, says):
    daily_table(catalog)
    catalog.create_table("logs.plain", DAY)
    catalog.create_table("logs.badprop", DAY, properties={"snapshot.retain-last": "many"})
    counts = row_counts(catalog)
    result = lakestream("tables", *args, dsn=catalog_dsn)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert row_counts(catalog) == counts


def test_a_missing_table_is_a_runtime_failure(catalog_dsn):
    result = lakestream("tables", "vacuum", "no.such", dsn=catalog_dsn)
    assert result.returncode == 1
    assert result.stderr.strip() == "error: no.such: table 'no.such' does not exist"


def test_dry_runs_change_nothing_then_the_real_runs_do(catalog: Catalog, catalog_dsn):
    table = daily_table(catalog)
    counts, disk, latest = row_counts(catalog), files_on_disk(table), table.current_version()
    for command in (
        ["ttl", "logs.daily"],
        ["expire", "logs.daily", "--older-than", "0", "--retain-last", "1"],
        ["vacuum", "logs.daily", "--older-than", "0"],
    ):
        dry = lakestream("tables", *command, "--dry-run", "--json", dsn=catalog_dsn)
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["dry_run"] is True
        assert row_counts(catalog) == counts and files_on_disk(table) == disk
        assert table.current_version() == latest

    ttl = lakestream("tables", "ttl", "logs.daily", dsn=catalog_dsn)
    assert ttl.returncode == 0, ttl.stderr
    assert "dropped 2 partition(s) of day" in ttl.stdout
    expire = lakestream("tables", "expire", "logs.daily", "--older-than", "0s",
                        "--retain-last", "1", "--json", dsn=catalog_dsn)  # fmt: skip
    assert expire.returncode == 0, expire.stderr
    report = json.loads(expire.stdout)
    assert report["horizon"] == latest + 1 and report["files_to_cleanup"] == 6
    vacuum = lakestream("tables", "vacuum", "logs.daily", "--older-than", "0", dsn=catalog_dsn)
    assert vacuum.returncode == 0, vacuum.stderr
    assert "deleted 6 file(s)" in vacuum.stdout
    assert [r[0] for r in rows_at(table)] == [99]
    again = lakestream("tables", "expire", "logs.daily", dsn=catalog_dsn)
    assert "nothing to expire" in again.stdout
