"""A local Spark session for tests, benchmarks and the local demo.

Local mode needs a few things set before the JVM starts, each learned the hard way:

* Python workers must run this interpreter (``PYSPARK_PYTHON``), or they start the system Python,
  which lacks pyarrow, and fail with "Python worker failed to connect back" (in local mode it
  runs without Spark's zip of pyspark, which every process compiled anew: see
  :mod:`ingest.spark_python`);
* they must be able to import this project's packages (``PYTHONPATH``) when it is used from a
  checkout rather than installed: the Kafka source's classes are unpickled on the workers;
* everything binds to loopback (``SPARK_LOCAL_IP``), and the UI is off - in local mode only: with
  a cluster master (``spark://``, ``k8s://``, ``yarn``) the executors must reach the driver at
  an address of the host, which Spark picks unless ``spark.driver.host`` says otherwise;
* executors of a cluster start from the worker's environment, not the driver's, so the driver's
  ``PYTHONPATH`` goes to them as ``spark.executorEnv.PYTHONPATH`` (right when this project sits
  at the same path on every node; otherwise install it there, or ship it with ``--py-files``);
* the JVM runs in a session (process group) of its own. systemd and container runtimes stop a
  service by sending SIGTERM to its whole process group: a JVM in the driver's group would die
  at once, mid-batch, and take the driver down with a py4j traceback, when the driver wants to
  stop the query between batches. Out of the group, the JVM still dies with the driver: Spark's
  gateway exits when its stdin - a pipe from the driver - closes, however the driver ended
  (even ``kill -9``). It ignores SIGINT as before, so Ctrl-C is the driver's to handle.

What of the machine these depend on (the ``PYTHONPATH`` to pass on, the cache directory, the
Spark installation) comes in a :class:`~ingest.spark_host.SparkHost`: this module reads no
environment variable. It still sets four (:func:`process_environment`) for the JVM it starts,
because pyspark takes them from ``os.environ`` and nowhere else: its gateway launcher copies the
process's environment into the JVM's, and ``SparkContext`` reads ``PYSPARK_PYTHON`` there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from ingest.spark_archive import driver_options, refused
from ingest.spark_host import SparkHost
from ingest.spark_python import worker_python

_LOCAL_CONF = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    # Queries without a checkpoint location (memory sinks in tests) may delete their temp dirs.
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}
_LOOPBACK_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
_SOURCE_ROOT = str(Path(__file__).resolve().parent.parent)


def local_spark(
    app_name: str,
    extra_conf: dict[str, str] | None = None,
    jars: Sequence[Path] = (),
    *,
    host: SparkHost,
) -> SparkSession:
    """Get (or create) the process's local session on ``host`` (a command's is
    :func:`jobs.spark_env.spark_host`); ``extra_conf`` overrides the defaults.

    ``jars`` go on the classpath as ``spark.jars`` (Spark's Kafka source for ``source.reader:
    spark``: :func:`ingest.kafka.spark_source.ensure_connector_jars`). Settings that only a new
    JVM can take (memory, master, jars) apply only if no session exists yet.
    """
    conf = session_conf(app_name, extra_conf or {}, _source_path(host.pythonpath))
    if jars:  # after any spark.jars of extra_conf
        conf["spark.jars"] = ",".join([*conf.get("spark.jars", "").split(","), *map(str, jars)])
        conf["spark.jars"] = conf["spark.jars"].strip(",")
    os.environ.update(process_environment(conf, host))  # read by pyspark (see the module doc)
    if SparkContext._gateway is None:  # no JVM yet (a stopped context keeps its JVM)
        _start_context(conf, host)
    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _start_context(conf: dict[str, str], host: SparkHost) -> SparkContext:
    """A SparkContext whose JVM is started in a new session (see the module doc), from the
    class archive of :mod:`ingest.spark_archive` when there is one; a JVM that refuses the
    archive is started again without it."""
    archive = driver_options(conf, host)
    spark_conf = SparkConf(loadDefaults=False).setAll([*conf.items(), *archive.items()])
    try:
        gateway = _launch(spark_conf)
    except PySparkRuntimeError:
        if not archive:
            raise
        spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
        gateway = _launch(spark_conf)  # raises what is wrong when it was not the archive
        refused(conf, host)
    return SparkContext(conf=spark_conf, gateway=gateway)


def _launch(spark_conf: SparkConf) -> Any:
    """py4j's gateway to a new JVM (py4j has no type hints)."""
    return launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]


def session_conf(app_name: str, extra_conf: dict[str, str], pythonpath: str) -> dict[str, str]:
    """The session's settings: the defaults, loopback for local masters only, the driver's
    ``pythonpath`` for the executors; ``extra_conf`` wins over all of them."""
    local = is_local(extra_conf)
    defaults = {**_LOCAL_CONF, **(_LOOPBACK_CONF if local else {})}
    defaults["spark.executorEnv.PYTHONPATH"] = pythonpath
    return {**defaults, **extra_conf, "spark.app.name": app_name}


def is_local(conf: dict[str, str]) -> bool:
    return conf.get("spark.master", _LOCAL_CONF["spark.master"]).startswith("local")


def _source_path(pythonpath: str) -> str:
    """``pythonpath`` with this project's root first (it may be used from a checkout)."""
    paths = [p for p in pythonpath.split(os.pathsep) if p]
    return os.pathsep.join(paths if _SOURCE_ROOT in paths else [_SOURCE_ROOT, *paths])


def process_environment(conf: dict[str, str], host: SparkHost) -> dict[str, str]:
    """The variables the driver's process needs before pyspark starts a JVM for ``conf``."""
    loopback = is_local(conf)
    env = {
        "PYSPARK_PYTHON": worker_python(local=loopback, host=host),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": conf["spark.executorEnv.PYTHONPATH"],
    }
    if loopback:
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env
