"""Spark with Iceberg's runtime (from Maven Central) reads what the export published.

Not yet on pyspark 4.3: no Iceberg runtime for Spark 4.3 is published, and the newest (the 4.1
runtime of Iceberg 1.12.0; 1.11.0's and the 4.0 runtime of 1.10.1 alike) fails to load in
Spark 4.3's catalog code (``IncompatibleClassChangeError``: ``SparkView`` implements
``org.apache.spark.sql.connector.catalog.View``, a class since 4.3; by path,
``IcebergSource.catalogAndIdentifier`` expects ``CatalogManager`` to be a class). The test is
a strict xfail: it passes, and so fails the suite, the day
:data:`ingest.iceberg_runtime.ICEBERG_RUNTIME` names a runtime that works; then drop the mark.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog
from catalog.iceberg import export_table
from tests.fixtures.vectors import mark_rows
from tests.integration.iceberg.support import (
    SCHEMA,
    closing_sql_catalog,
    multiset,
    rows,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]
NO_RUNTIME_FOR_SPARK_4_3 = (
    "Iceberg's newest Spark runtime (4.1, Iceberg 1.12.0) does not load in Spark 4.3: "
    "IncompatibleClassChangeError on org.apache.spark.sql.connector.catalog.View"
)
COLUMNS = SCHEMA.names
ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.xfail(strict=True, reason=NO_RUNTIME_FOR_SPARK_4_3)
def test_spark_reads_the_registered_export_and_travels_to_a_snapshot(
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
    out = tmp_path / "spark.json"
    code = (
        "import sys; from pathlib import Path; "
        "from tests.integration.iceberg.support import spark_iceberg_read; "
        "spark_iceberg_read(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))"
    )
    snapshot_id = str(report.snapshot_ids[early])
    done = subprocess.run(
        [sys.executable, "-c", code, catalog_dsn, "shop.events", snapshot_id, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    failure = [line for line in done.stderr.splitlines() if "Error" in line]
    assert done.returncode == 0, "\n".join(failure[-10:]) or done.stderr[-3000:]
    read = json.loads(out.read_text())
    latest = pa.Table.from_pylist(read["latest"], schema=SCHEMA)
    at = pa.Table.from_pylist(read["at"], schema=SCHEMA)
    assert multiset(latest, COLUMNS) == multiset(events.scan().to_arrow(), COLUMNS)
    assert multiset(at, COLUMNS) == multiset(events.scan(version=early).to_arrow(), COLUMNS)
    assert latest.num_rows == 19 and at.num_rows == 20
