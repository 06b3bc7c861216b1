"""Iceberg's Spark runtime, so that Spark reads the Iceberg metadata lakestream publishes.

:mod:`catalog.iceberg` writes Iceberg v2 metadata over a table's files; any Spark with Iceberg's
runtime on its classpath reads it (``spark.read.format("iceberg").load(<metadata JSON>)``),
without lakestream's own data source. The tests and the docs' example need that runtime, so it
is fetched from Maven Central once by :func:`ensure_iceberg_runtime_jars` (dev/setup does it;
:mod:`ingest.kafka.maven`'s cache, so a second run works offline).

Which runtime: Iceberg publishes one per Spark minor line (``iceberg-spark-runtime-4.1_2.13``);
there is none for Spark 4.3, pyspark's version here. On 2026-12-06 Maven Central served the
4.1 runtime of Iceberg 1.11.0 and 1.12.0 and the 4.0 runtime up to 1.10.1 (1.12.0's 4.0 runtime
is not published). The 4.1 runtime of Iceberg 1.12.0 reads on pyspark 4.3.0 (the integration
test runs it there) through a catalog, not by path: its path reads
(``format("iceberg").load(<path>)``) fail on Spark 4.3 with ``IncompatibleClassChangeError:
Found interface org.apache.spark.sql.connector.catalog.CatalogManager, but class was expected``
(``IcebergSource.catalogAndIdentifier``: Spark 4.3 made ``CatalogManager`` an interface). The
catalog is Iceberg's JDBC catalog on lakestream's PostgreSQL: pyiceberg's SQL catalog, where
``lakestream tables iceberg --register`` publishes tables, keeps the same tables
(``iceberg_tables``), so Spark finds what the export registered. Hence PostgreSQL's JDBC driver
beside the runtime. Both jars are self-contained (the runtime shades its dependencies), so each
comes alone.
"""

from __future__ import annotations

from pathlib import Path

from ingest.kafka.maven import MavenArtifact, fetch_jars

__all__ = ["ICEBERG_RUNTIME", "POSTGRES_JDBC", "ensure_iceberg_runtime_jars"]

#: The Iceberg Spark runtime that reads on pyspark's Spark (see the module doc).
ICEBERG_RUNTIME = MavenArtifact(
    "org.apache.iceberg", "iceberg-spark-runtime-4.1_2.13", "1.12.0", transitive=False
)

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
