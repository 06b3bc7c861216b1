"""Iceberg's Spark runtime, so that Spark reads the Iceberg metadata lakestream publishes.

:mod:`catalog.iceberg` writes Iceberg v2 metadata over a table's files; any Spark with Iceberg's
runtime on its classpath reads it (``spark.read.format("iceberg").load(<metadata JSON>)``),
without lakestream's own data source. The tests and the docs' example need that runtime, so it
is fetched from Maven Central once by :func:`ensure_iceberg_runtime_jars` (dev/setup does it;
:mod:`ingest.kafka.maven`'s cache, so a second run works offline).

Which runtime: Iceberg publishes one per Spark minor line (``iceberg-spark-runtime-4.1_2.13``);
there is none for Spark 4.3, pyspark's version here. On 2026-12-06 Maven Central served the
4.1 runtime of Iceberg 1.11.0 and 1.12.0 and the 4.0 runtime up to 1.10.1 (1.12.0's 4.0 runtime
is not published). None loads in Spark 4.3: path reads fail with ``IncompatibleClassChangeError:
Found interface org.apache.spark.sql.connector.catalog.CatalogManager, but class was expected``
(``IcebergSource.catalogAndIdentifier``), catalog reads with ``SparkView can not implement
org.apache.spark.sql.connector.catalog.View`` (both became different kinds of type in 4.3). So
the reader is the Spark the runtime is built for: pyspark :data:`ICEBERG_SPARK_VERSION` (4.1,
from PyPI, installed beside the project's own pyspark into the cache by
:func:`ensure_iceberg_spark`, never on ``sys.path`` of a lakestream process) in a process of its
own. That is what a user with an Iceberg-on-Spark-4.1 cluster runs. It reads through Iceberg's
JDBC catalog on lakestream's PostgreSQL - pyiceberg's SQL catalog, where ``lakestream tables
iceberg --register`` publishes tables, keeps the same tables (``iceberg_tables``) - and by the
metadata file's path; hence PostgreSQL's JDBC driver beside the runtime. Both jars are
self-contained (the runtime shades its dependencies), so each comes alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest.errors import IngestError
from ingest.kafka.maven import MavenArtifact, fetch_jars

__all__ = [
    "ICEBERG_RUNTIME",
    "ICEBERG_SPARK_VERSION",
    "POSTGRES_JDBC",
    "IcebergSparkError",
    "ensure_iceberg_runtime_jars",
    "ensure_iceberg_spark",
]

#: The Iceberg Spark runtime that reads on pyspark's Spark (see the module doc).
ICEBERG_RUNTIME = MavenArtifact(
    "org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0", transitive=False
)

#: The Spark line :data:`ICEBERG_RUNTIME` is built for: pyspark from PyPI, kept apart from ours.
ICEBERG_SPARK_VERSION = "4.1.4"

#: Iceberg's JDBC catalog on PostgreSQL needs the driver (the version Debezium's plugin ships).
POSTGRES_JDBC = MavenArtifact("org.postgresql", "postgresql", "42.7.11", transitive=False)


def default_lib_dir(artifact: MavenArtifact = ICEBERG_RUNTIME) -> Path:
    return Path.home() / ".cache" / "lakestream" / f"{artifact.artifact}-{artifact.version}"


def ensure_iceberg_runtime_jars(
    lib: Path | None = None,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
) -> list[Path]:
    """The runtime's and the JDBC driver's jars (for ``spark.jars``), fetched with Maven unless
    cached.

    Raises:
        JarFetchError: no Maven, or Maven could not resolve it.
    """
    fetched = fetch_jars(
        (ICEBERG_RUNTIME, POSTGRES_JDBC),
        lib or default_lib_dir(),
        mvn=mvn,
        maven_repo=maven_repo,
        offline=offline,
    )
    return sorted(fetched.glob("*.jar"))


class IcebergSparkError(IngestError):
    """pyspark :data:`ICEBERG_SPARK_VERSION` could not be installed into the cache."""


def iceberg_spark_dir() -> Path:
    """Where :func:`ensure_iceberg_spark` keeps its pyspark: a directory for ``PYTHONPATH``."""
    return Path.home() / ".cache" / "lakestream" / f"pyspark-{ICEBERG_SPARK_VERSION}"


def ensure_iceberg_spark(target: Path | None = None) -> Path:
    """pyspark :data:`ICEBERG_SPARK_VERSION` installed (``pip --target``, no dependencies: py4j
    is the project's) into ``target``, once; its directory, for a child process's
    ``PYTHONPATH``. Installed into a temporary sibling and renamed, so an interrupted install
    is never taken for a finished one.

    Raises:
        IcebergSparkError: pip failed (its last lines say why).
    """
    where = target or iceberg_spark_dir()
    if (where / "pyspark" / "__init__.py").exists():
        return where
    where.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{where.name}-", dir=where.parent))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    command += ["--target", str(staging), f"pyspark=={ICEBERG_SPARK_VERSION}"]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-5:])
        raise IcebergSparkError(f"pip could not install pyspark {ICEBERG_SPARK_VERSION}: {tail}")
    if (where / "pyspark" / "__init__.py").exists():  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(where, ignore_errors=True)  # what an interrupted rename left, if any
        staging.rename(where)
    return where
