"""Spark with Iceberg's runtime (from Maven Central) reads what the export published, through
Iceberg's JDBC catalog (where ``--register`` puts the table) and by the metadata file's path, at
the latest snapshot and travelling to an older one; deletion vectors arrive as position deletes.

The Spark is 4.1 (pyspark from PyPI, in a process of its own): no Iceberg runtime is published
for Spark 4.3, the project's own pyspark, and the 4.1 runtime does not load in 4.3
(``ingest/iceberg_runtime.py`` says what fails). dev/setup installs both.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from psycopg.conninfo import conninfo_to_dict

from catalog import Catalog
from catalog.iceberg import export_table
from ingest.iceberg_runtime import (
    ICEBERG_SPARK_VERSION,
    ensure_iceberg_runtime_jars,
    ensure_iceberg_spark,
)
from tests.fixtures.vectors import mark_rows
from tests.integration.iceberg.support import SCHEMA, closing_sql_catalog, multiset, rows

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]
COLUMNS = SCHEMA.names
READER = Path(__file__).parents[2] / "fixtures" / "iceberg_spark_read.py"


def _spark41_read(request: dict[str, object], tmp_path: Path) -> dict[str, object]:
    """Run :mod:`tests.fixtures.iceberg_spark_read` under pyspark 4.1 with the runtime's jars;
    its JSON answer."""
    home = ensure_iceberg_spark()
    (tmp_path / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env |= {"PYTHONPATH": str(home), "SPARK_HOME": str(home / "pyspark")}
    env |= {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(READER), str(tmp_path / "request.json"), str(tmp_path / "out.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    failure = [line for line in done.stderr.splitlines() if "Error" in line or "Exception" in line]
    assert done.returncode == 0, "\n".join(failure[-10:]) or done.stderr[-3000:]
    answer: dict[str, object] = json.loads((tmp_path / "out.json").read_text())
    return answer


def _table(read: object) -> pa.Table:
    assert isinstance(read, list)
    return pa.Table.from_pylist(read, schema=SCHEMA)


def test_spark_with_iceberg_reads_the_export_latest_and_as_of_a_snapshot(
    catalog: Catalog, catalog_dsn: str, tmp_path: Path
) -> None:
    rng = random.Random(31)
    events = catalog.create_table("shop.events", SCHEMA, partition_by=["region"])
    events.append(rows(rng, range(10)))
    early = events.append(rows(rng, range(10, 20))).version_of("shop.events")
    mark_rows(events, [1, 11, 12])  # position deletes Spark must apply
    events.append(rows(rng, [30, 31]))
    with closing_sql_catalog(catalog_dsn) as registry:
        report = export_table(events, sql_catalog=registry)
    assert early is not None and early in report.snapshot_ids
    parts = conninfo_to_dict(catalog_dsn)
    jdbc = {
        "uri": f"jdbc:postgresql://{parts.get('host')}:{parts.get('port')}/{parts.get('dbname')}",
        "user": str(parts.get("user") or ""),
        "password": str(parts.get("password") or ""),
    }
    request = {
        "jars": [str(jar) for jar in ensure_iceberg_runtime_jars()],
        "jdbc": jdbc,
        "warehouse": (tmp_path / "warehouse").as_uri(),  # the catalog wants one; reads ignore it
        "table": "shop.events",
        "metadata": report.metadata_location,
        "snapshot_id": report.snapshot_ids[early],
    }
    read = _spark41_read(request, tmp_path)

    assert str(read["spark"]).startswith(ICEBERG_SPARK_VERSION.rsplit(".", 1)[0])
    now = multiset(events.scan().to_arrow(), COLUMNS)
    then = multiset(events.scan(version=early).to_arrow(), COLUMNS)
    assert multiset(_table(read["latest"]), COLUMNS) == now
    assert multiset(_table(read["by_path"]), COLUMNS) == now
    assert multiset(_table(read["at"]), COLUMNS) == then
    assert multiset(_table(read["by_path_at"]), COLUMNS) == then
    assert sum(now.values()) == 19 and sum(then.values()) == 20  # 3 marked, one after `early`
