"""A local Spark's Python workers import pyspark from the installed package, whose compiled
modules they load, not from Spark's zip, which every new process compiled anew
(:mod:`ingest.spark_python`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _origins(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import py4j
    import pyspark as workers_pyspark

    for _ in batches:
        pass
    yield pa.record_batch({"pyspark": [workers_pyspark.__file__], "py4j": [py4j.__file__]})


def test_workers_import_the_installed_pyspark_not_sparks_zip(spark: SparkSession) -> None:
    rows = spark.range(0, 2, 1, 2).mapInArrow(_origins, "pyspark string, py4j string").collect()
    assert {row["pyspark"] for row in rows} == {pyspark.__file__}
    assert not any(".zip" in row["py4j"] for row in rows)
    assert all(Path(row["pyspark"]).is_file() for row in rows)
