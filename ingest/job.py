"""The streaming ingest job: Kafka topics -> decoded changes -> tables, one commit per batch.

Exactly-once across restarts rests on four things: Spark's checkpoint replays an unfinished
batch with the same id and offsets; batch 0's start is decided once and saved before the query
runs, so a replayed batch 0 reads the same range (:mod:`ingest.startpoint`); the sink recognises
an already committed (writer, batch); and every commit stores the batch's offsets under the job's
name. If the checkpoint is lost, Spark restarts batch ids at 0, so the job starts a new
*incarnation* (a new writer id, so old keys cannot be mistaken for new batches) and starts reading
at the offsets in the catalog.
"""

from __future__ import annotations

import json
import random
import re
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from catalog import Catalog, CatalogError, OutageGuard
from catalog.logs import get_logger
from ingest import startpoint
from ingest.collector import collector_for_batches
from ingest.config import IngestJobConfig
from ingest.errors import IngestError, QueryFailed
from ingest.failpoints import Failpoint
from ingest.kafka.offsets import OffsetsJson
from ingest.kafka.options import (
    BROKER_OUTAGE_BUDGET_MS,
    EMIT,
    LOG_LEVEL,
    POLL_TIMEOUT_MS,
    SHARED_TASK_PATTERN,
    Emit,
    parse_options,
)
from ingest.kafka.source import SOURCE_NAME, register, starting_offsets_now
from ingest.kafka.spark_source import (
    SPARK_KAFKA_FORMAT,
    SourceReader,
    spark_source_options,
    spark_starting_offsets,
    subscription_options,
)
from ingest.logs import driver_level
from ingest.sink.batch import BatchSink, SinkSettings
from ingest.transactions.markers import TRANSACTION_TOPIC_PATTERN
from ingest.transactions.policy import TransactionMode

__all__ = ["IngestJobConfig", "IngestRun", "run_ingest", "source_options"]

log = get_logger("lakestream.ingest.job")


@dataclass
class IngestRun:
    batches_committed: int
    incarnation: str
    records_read: int = 0
    """Kafka records the run's batches read and committed (replays of landed batches read none)."""
    start: startpoint.StartOrigin = startpoint.StartOrigin.CHECKPOINT


def run_ingest(
    config: IngestJobConfig,
    spark: Any,
    catalog: Catalog,
    stop: threading.Event | None = None,
    guard: OutageGuard | None = None,
    *,
    observer: Callable[[Mapping[str, Any]], None] | None = None,
) -> IngestRun:
    """Run the query until AvailableNow is done, ``stop`` is set, or SIGTERM arrives.

    ``guard`` waits out catalog outages in the batches (default: fail at the first one);
    ``observer`` is told each committed batch's figures (the job's metrics).

    A query whose Python source runner did not start within Spark's fixed 10 s (a machine too
    busy to import PySpark in that time) is started again, up to :data:`START_ATTEMPTS` times
    in all: it fails while Spark plans its first batch, and a start from the checkpoint and the
    catalog is exactly what a restarted job does. Each restart waits a random pause first
    (:func:`restart_pause`): queries that timed out together, because they started together,
    would otherwise start together again and time out again.
    """
    attempt = 1
    while True:
        try:
            return _run(config, spark, catalog, stop, guard, observer=observer)
        except QueryFailed as failure:
            if attempt == START_ATTEMPTS or _WORKER_START_TIMEOUT not in str(failure):
                raise
            pause = restart_pause(attempt)
            log.warning(
                "ingest_restarting",
                job=config.job,
                attempt=attempt,
                pause_s=round(pause, 1),
                reason=str(failure),
                hint="Spark's Python worker did not connect back within 10 s: the machine is busy",
            )
            (stop or threading.Event()).wait(pause)
            attempt += 1


def restart_pause(attempt: int) -> float:
    """Seconds to wait before start ``attempt + 1``: random, up to :data:`RESTART_PAUSE_S`
    times ``attempt``, so that jobs that failed together spread out, more so each time."""
    return random.uniform(0, RESTART_PAUSE_S * attempt)  # spreading starts, not secrecy


#: Starts of the query, in all, when Spark's Python worker times out connecting back.
START_ATTEMPTS = 5
#: The longest pause before the second start; before the n-th, n - 1 times it.
RESTART_PAUSE_S = 5.0
#: What Spark says when a Python worker it started did not connect back within its 10 s (fixed
#: in ``PythonWorkerFactory.createSimpleWorker``; the streaming source's runner starts this way).
_WORKER_START_TIMEOUT = "Python worker failed to connect back"


def _run(
    config: IngestJobConfig,
    spark: Any,
    catalog: Catalog,
    stop: threading.Event | None,
    guard: OutageGuard | None,
    *,
    observer: Callable[[Mapping[str, Any]], None] | None,
) -> IngestRun:
    state = startpoint.read_state(config.checkpoint)
    incarnation = startpoint.incarnation(config.checkpoint, state)
    start = startpoint.decide(
        state,
        _catalog_offsets(config, catalog),
        config.starting_offsets,
        lambda: _configured_start(config),
    )
    startpoint.save(config.checkpoint, start, config.starting_offsets)
    starting = config.starting_offsets if start.offsets is None else json.dumps(start.offsets)
    options = source_options(config, starting)
    sink = BatchSink(
        catalog, _sink_settings(config, incarnation, options), guard, observer=observer
    )
    log.info(
        "ingest_started",
        job=config.job,
        incarnation=incarnation,
        start=start.origin.value,
        starting_offsets=start.offsets,
    )
    if config.fail_at is not None:
        config.fail_at.trip(Failpoint.BEFORE_QUERY)
    with collector_for_batches():
        sink.read_ahead_first(start.offsets)
        try:
            query = _start(config, spark, sink, options)
        except BaseException:
            sink.close()
            raise
        try:
            _await(query, stop or threading.Event())
        except Exception as exc:
            failure = sink.failure or exc
            if isinstance(failure, (IngestError, CatalogError)):  # the job's own: as it was raised
                raise failure from None
            raise query_failure(failure) from None
        finally:
            sink.close()
    return IngestRun(sink.batches_committed, incarnation, sink.records_read, start.origin)


def _configured_start(config: IngestJobConfig) -> OffsetsJson:
    return starting_offsets_now(parse_options(source_options(config, config.starting_offsets)))


def _sink_settings(
    config: IngestJobConfig, incarnation: str, options: dict[str, str]
) -> SinkSettings:
    return SinkSettings(config=config, incarnation=incarnation, kafka=parse_options(options))


def _catalog_offsets(config: IngestJobConfig, catalog: Catalog) -> OffsetsJson | None:
    """The offsets stored with the job's last commit, if the tables it went to still live."""
    progress = catalog.writer_progress(config.job)
    if progress is None or not progress.source_offsets:
        return None
    alive = catalog.live_table_ids(progress.table_ids)
    if alive != set(progress.table_ids):
        log.warning(
            "progress_ignored",
            job=config.job,
            reason="tables it was committed to were dropped or recreated",
        )
        return None
    return {
        topic: {str(p): int(o) for p, o in parts.items()}
        for topic, parts in progress.source_offsets.items()
    }


def source_options(config: IngestJobConfig, starting: str) -> dict[str, str]:
    """The ``lakestream-kafka`` options of the job: ranges out, read by the sink's tasks. In
    ``transactions: consistent`` the driver reads the transaction topic, so its range shares
    another range's task rather than make a task that does nothing (on 2 cores it ran alone at
    the end of most batches' jobs, up to ~100 ms)."""
    budget_ms = round(config.broker_outage_budget_s * 1000)
    options = {
        "kafka.bootstrap.servers": config.bootstrap_servers,
        "startingOffsets": starting,
        EMIT: Emit.RANGES.value,
        BROKER_OUTAGE_BUDGET_MS: str(budget_ms),
        # a read that makes no progress because the brokers are gone fails within the budget too
        POLL_TIMEOUT_MS: str(max(budget_ms, 1000)),
        LOG_LEVEL: driver_level(),
        **subscription_options(config),
    }
    if config.transaction_mode is TransactionMode.CONSISTENT:
        options[SHARED_TASK_PATTERN] = TRANSACTION_TOPIC_PATTERN
    options.update({f"kafka.{key}": value for key, value in config.kafka_options.items()})
    return options


#: The last line of a Python traceback raised by lakestream's code: ``package.module.Class: text``.
_OWN_ERROR_LINE = re.compile(r"^\s*((?:ingest|catalog|compaction|jobs)\.[\w.]*\.(\w+)): (.+)$")


def query_failure(error: BaseException) -> QueryFailed:
    """A failed query as one line: the error our code raised in a Spark Python worker (the last
    ``module.Class: message`` of the traceback Spark carried across the JVM), else Spark's own
    first line - never the Java stack."""
    text = str(error)
    own = [m for m in map(_OWN_ERROR_LINE.match, text.splitlines()) if m is not None]
    if own:
        return QueryFailed(" ".join(own[-1].group(3).split()), kind=own[-1].group(2))
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    return QueryFailed(" ".join(first.split())[:500], kind=type(error).__name__)


def _start(config: IngestJobConfig, spark: Any, sink: BatchSink, options: dict[str, str]) -> Any:
    if config.source_reader is SourceReader.SPARK:  # Spark's Kafka source: the batch has records
        reader = spark.readStream.format(SPARK_KAFKA_FORMAT).options(
            **spark_source_options(config, _spark_starting(config, options["startingOffsets"]))
        )
    else:
        register(spark)
        reader = spark.readStream.format(SOURCE_NAME).options(**options)
    writer = (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(config.checkpoint))
        .queryName(config.job)
    )
    if config.trigger_seconds is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    return writer.start()


def _spark_starting(config: IngestJobConfig, starting: str) -> str:
    """``startingOffsets`` for Spark's Kafka source: ``earliest``/``latest`` as they are, offsets
    the job decided (the catalog's, the configured start resolved) completed with every
    partition subscribed now, as Spark requires (:func:`spark_starting_offsets`)."""
    if not starting.lstrip().startswith("{"):
        return starting
    return spark_starting_offsets(json.loads(starting), _configured_start(config))


def _await(query: Any, stop: threading.Event) -> None:
    previous = _on_sigterm(stop)
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
        if query.isActive:
            log.info("ingest_stopping", reason="stop requested")
            query.stop()
        error = query.exception()
        if error is not None:
            raise error
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _on_sigterm(stop: threading.Event) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    return signal.signal(signal.SIGTERM, handler)
