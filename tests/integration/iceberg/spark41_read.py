"""Spark with Iceberg's runtime reading what lakestream's export published - run as a script in
a process whose ``PYTHONPATH`` puts pyspark 4.1 first (``ingest.iceberg_runtime``), so it imports
nothing of lakestream: what it sees is what any Iceberg-on-Spark user sees.

Arguments: the JSON file of what to read (``jars``, ``jdbc`` settings, ``warehouse``, ``table``,
``metadata`` location, ``snapshot_id``) and the JSON file to write the rows to.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyspark.sql import SparkSession


def _rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def main(request_path: str, out_path: str) -> None:
    with open(request_path) as f:
        request = json.load(f)
    prefix = "spark.sql.catalog.lakestream"
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("iceberg-read")
        .config("spark.jars", ",".join(request["jars"]))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config(prefix, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{prefix}.type", "jdbc")
        .config(f"{prefix}.uri", request["jdbc"]["uri"])
        .config(f"{prefix}.warehouse", request["warehouse"])
        .config(f"{prefix}.jdbc.user", request["jdbc"]["user"])
        .config(f"{prefix}.jdbc.password", request["jdbc"]["password"])
    )
    spark = builder.getOrCreate()
    name = f"lakestream.{request['table']}"
    snapshot = int(request["snapshot_id"])
    result = {
        "spark": spark.version,
        "latest": _rows(spark.table(name)),
        "at": _rows(spark.sql(f"SELECT * FROM {name} VERSION AS OF {snapshot}")),
        "by_path": _rows(spark.read.format("iceberg").load(request["metadata"])),
        "by_path_at": _rows(
            spark.read.format("iceberg").option("versionAsOf", snapshot).load(request["metadata"])
        ),
    }
    with open(out_path, "w") as f:
        json.dump(result, f, default=str)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
