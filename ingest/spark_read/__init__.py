"""Spark batch reads of lakestream tables: ``spark.read.format("lakestream")``.

See :mod:`ingest.spark_read.source` for where each step runs, and README.md for usage.
"""

from ingest.spark_read.errors import (
    ColumnReadError,
    ReadOptionError,
    SparkReadError,
    TableReplacedError,
    UnsupportedTypeError,
)
from ingest.spark_read.source import SOURCE_NAME, LakestreamDataSource, register

__all__ = [
    "SOURCE_NAME",
    "ColumnReadError",
    "LakestreamDataSource",
    "ReadOptionError",
    "SparkReadError",
    "TableReplacedError",
    "UnsupportedTypeError",
    "register",
]
