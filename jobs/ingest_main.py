"""Entry point of the ingest job: settings -> catalog -> brokers -> Spark session -> run until done.

The catalog and the brokers are checked before Spark starts (Spark costs ~6 s and a JVM), so a
wrong DSN or broker address is one ``ingest_failed`` line within seconds. Whatever stops the
run - a catalog or broker outage beyond its budget, a failed batch, a Spark failure - ends in
one ``ingest_failed`` line and exit code 1 (2 for a source set up in a way the configured mode
cannot work with, such as a partitioned transaction topic without commit positions); SIGTERM
stops it between batches with exit code 0.
"""

from __future__ import annotations

import contextlib
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
from ingest.freshness import JobWatch
from ingest.kafka.errors import BrokerUnavailableError
from ingest.kafka.options import Subscription
from ingest.metrics import IngestMetrics
from ingest.transactions import TransactionConfigError, TransactionMode
from jobs.httpserve import MetricsServer
from jobs.ingest_config import IngestSettings, describe
from jobs.logs import configure_logging
from jobs.reach import check_catalog_reachable
from jobs.settings import ConfigError, redact_dsn

#: Spark's loggers of streaming query execution (micro-batches, their failures).
STREAMING_LOGGER = "org.apache.spark.sql.execution.streaming"
#: Seconds the start-up check waits for the catalog database to accept a connection.


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
    try:
        batches = _run(settings)
    except CatalogOutageError as exc:
        log.error(
            "ingest_failed",
            error=str(exc),
            kind=type(exc).__name__,
            catalog=exc.catalog,
            outage_s=round(exc.outage_s, 1),
        )
        return 1
    except BrokerUnavailableError as exc:
        log.error(
            "ingest_failed",
            error=str(exc),
            kind=type(exc).__name__,
            bootstrap_servers=exc.bootstrap_servers,
            outage_s=round(exc.outage_s, 1),
        )
        return 1
    except TransactionConfigError as exc:  # the source's set-up, not a failure of the run
        log.error("ingest_failed", error=str(exc), kind=type(exc).__name__)
        return 2
    except IngestError as exc:
        log.error("ingest_failed", error=str(exc), kind=getattr(exc, "kind", type(exc).__name__))
        return 1
    except CatalogError as exc:
        log.error("ingest_failed", error=str(exc), kind=type(exc).__name__)
        return 1
    log.info("ingest_finished", batches=batches)
    return 0


def _run(settings: IngestSettings) -> int:
    """Check the catalog and the brokers, then start Spark and run; the batches committed."""
    from ingest.job import run_ingest, source_options
    from ingest.kafka.brokerview import check_brokers
    from ingest.kafka.options import parse_options
    from ingest.sink.consistent import check_order_at_start

    dsn = settings.catalog.dsn.get_secret_value()
    outage = OutagePolicy(budget=settings.catalog.outage_budget)
    job = settings.job_config()
    with contextlib.ExitStack() as stack:
        catalog = stack.enter_context(_open_catalog(settings, outage))
        check_brokers({**job.kafka_options, "bootstrap.servers": job.bootstrap_servers})
        if job.transaction_mode is TransactionMode.CONSISTENT:  # refused before Spark starts
            check_order_at_start(parse_options(source_options(job, job.starting_offsets)))
        metrics = _serve_metrics(settings, catalog, stack)
        spark = _spark_session(settings)
        stack.callback(spark.stop)
        _one_report_of_failures(spark)
        guard = OutageGuard(redact_dsn(dsn), outage)
        observer = metrics.observe_batch if metrics else None
        try:
            return _spark_failures_as_one_line(
                lambda: run_ingest(job, spark, catalog, guard=guard, observer=observer)
            )
        except Exception as exc:
            if metrics is not None:
                metrics.failed(str(exc))
            raise


def _serve_metrics(
    settings: IngestSettings, catalog: Catalog, stack: contextlib.ExitStack
) -> IngestMetrics | None:
    """``/metrics`` and ``/healthz`` on ``metrics.port`` (0: none), closed with the stack.

    Raises:
        ConfigError: the port cannot be bound (in use, or not allowed).
    """
    section = settings.metrics
    if not section.port:
        return None
    job = settings.job_config()
    watch = JobWatch(
        catalog,
        job.job,
        {**job.kafka_options, "bootstrap.servers": job.bootstrap_servers},
        Subscription(topics=job.topics, pattern=job.topic_pattern),
    )
    stack.callback(watch.close)
    metrics = IngestMetrics(job.job, watch, stale_after_s=section.stale_after_s)
    try:
        server = MetricsServer(metrics.exposition, metrics.health, section.host, section.port)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {section.host}:{section.port}: {exc}") from exc
    stack.callback(server.close)
    server.start()
    get_logger("lakestream.ingest").info("metrics_serving", host=section.host, port=server.port)
    return metrics


def _open_catalog(settings: IngestSettings, outage: OutagePolicy) -> Catalog:
    """The catalog, after a quick connect: the pool's own wait for an unreachable database
    takes its full connect timeout and logs every attempt."""
    dsn = settings.catalog.dsn.get_secret_value()
    check_catalog_reachable(dsn)
    return Catalog.connect(
        dsn,
        warehouse=settings.catalog.warehouse,
        storage=settings.catalog.storage,
        retry=outage.committer_retry(),
        schema=settings.catalog.db_schema,
    )


def _spark_failures_as_one_line(run: Any) -> int:
    """``run()``'s batches; a failure of Spark itself (the JVM gone, a py4j error) becomes a
    :class:`QueryFailed`, so that it too ends in one line."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    from ingest.errors import QueryFailed

    try:
        batches: int = run().batches_committed
    except (Py4JError, PySparkException) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        raise QueryFailed(" ".join(first.split())[:500], kind=type(exc).__name__) from None
    return batches


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
    from ingest.kafka.spark_source import SourceReader, ensure_connector_jars
    from ingest.spark_session import local_spark
    from jobs.spark_env import spark_host

    jars = ensure_connector_jars() if settings.source.reader is SourceReader.SPARK else []
    return local_spark(
        f"lakestream-{settings.job}",
        {"spark.master": settings.spark.master, **settings.spark.conf},
        jars=jars,
        host=spark_host(),
    )
