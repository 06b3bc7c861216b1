"""Entry point of the ingest job: settings -> catalog, Spark session -> run until done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog import (
    Catalog,
    CatalogError,
    CatalogOutageError,
    OutageGuard,
    OutagePolicy,
)
from catalog.logs import get_logger
from ingest.errors import IngestError
from jobs.ingest_config import IngestSettings, describe
from jobs.logs import configure_logging
from jobs.settings import redact_dsn

#: Spark's loggers of streaming query execution (micro-batches, their failures).
STREAMING_LOGGER = "org.apache.spark.sql.execution.streaming"


def main(config_path: Path) -> int:
    """Run the job; a configuration it cannot start with raises :class:`ConfigError` (the
    command line reports it in one line, exit code 2) before anything starts."""
    settings = IngestSettings.from_yaml(config_path)
    configure_logging(settings.log_level)
    log = get_logger("lakestream.ingest")
    for note in settings.notes():
        log.warning("config_deprecated", note=note, config=str(config_path))
    dsn = settings.catalog.dsn.get_secret_value()
    budget = settings.catalog.outage_budget
    log.info("ingest_config", catalog=redact_dsn(dsn), outage_budget_s=budget, **describe(settings))
    from ingest.job import run_ingest

    spark = _spark_session(settings)
    _one_report_of_failures(spark)
    outage = OutagePolicy(budget=budget)
    guard = OutageGuard(redact_dsn(dsn), outage)
    try:
        with Catalog.connect(
            dsn,
            warehouse=settings.catalog.warehouse,
            retry=outage.committer_retry(),
            schema=settings.catalog.db_schema,
        ) as catalog:
            run = run_ingest(settings.job_config(), spark, catalog, guard=guard)
        log.info("ingest_finished", batches=run.batches_committed)
        return 0
    except CatalogOutageError as exc:
        log.error(
            "ingest_failed",
            error=str(exc),
            kind=type(exc).__name__,
            catalog=exc.catalog,
            outage_s=round(exc.outage_s, 1),
        )
        return 1
    except (CatalogError, IngestError) as exc:
        log.error("ingest_failed", error=str(exc), kind=type(exc).__name__)
        return 1
    finally:
        spark.stop()


def _one_report_of_failures(spark: Any) -> None:
    """The job reports a failed query itself, in one line (``ingest_failed``); Spark's
    streaming engine would log the same failure again at ERROR, with a JVM and a Python stack
    trace. A failure that is not the job's own still reaches the user whole, as the query's
    exception."""
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(STREAMING_LOGGER, log4j.Level.OFF)


def _spark_session(settings: IngestSettings) -> Any:
    """A local session, or - with ``spark.master: null`` - the one spark-submit configured."""
    if settings.spark.master is None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(f"lakestream-{settings.job}")
        for key, value in settings.spark.conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    from ingest.spark_session import local_spark

    return local_spark(
        f"lakestream-{settings.job}", {"spark.master": settings.spark.master, **settings.spark.conf}
    )
