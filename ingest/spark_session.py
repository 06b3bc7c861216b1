"""A local Spark session for tests, benchmarks and the local demo.

Local mode needs a few things set before the JVM starts, each learned the hard way:

* Python workers must run this interpreter (``PYSPARK_PYTHON``), or they start the system Python,
  which lacks pyarrow, and fail with "Python worker failed to connect back";
* they must be able to import this project's packages (``PYTHONPATH``) when it is used from a
  checkout rather than installed: the Kafka source's classes are unpickled on the workers;
* everything binds to loopback (``SPARK_LOCAL_IP``), and the UI is off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

_LOCAL_CONF = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    # Queries without a checkpoint location (memory sinks in tests) may delete their temp dirs.
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
_SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)


def local_spark(app_name: str, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """Get (or create) the process's local session; ``extra_conf`` overrides the defaults.

    Settings that only a new JVM can take (memory, master) apply only if no session exists yet.
    """
    _prepare_environment()
    builder = SparkSession.builder.appName(app_name)
    for key, value in {**_LOCAL_CONF, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _prepare_environment() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if _SOURCE_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([_SOURCE_ROOT, *paths])
