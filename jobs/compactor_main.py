"""Entry points of the compactor: the service (coordinator + worker pool + /metrics) and the
standalone worker. Processes, signals and logging are set up here and nowhere below.

SIGTERM (or SIGINT) stops the service: the coordinator stops planning, each worker process gets
SIGTERM, stops claiming, lets its running task finish within the grace period or releases it,
and exits 0; the service then exits 0.

A catalog outage is waited out (``LAKESTREAM_COMPACTOR__OUTAGE_BUDGET``, 5 minutes by default) by
every process on its own guard; when one outlasts it, the process logs one ``compactor_failed``
line naming the catalog (password masked) and the outage's length, and exits 1.
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
import threading
import time
from multiprocessing.context import SpawnProcess
from types import FrameType

from catalog import Catalog, CatalogError, CatalogOutageError, OutageGuard
from catalog.logs import get_logger
from compaction.coordinator import Coordinator
from compaction.errors import CompactionError
from compaction.listener import CommitListener
from compaction.maintenance import MaintenanceScheduler
from compaction.metrics import ServiceMetrics
from compaction.queue import TASK_CHANNEL, TaskQueue
from compaction.service import CoordinatorLoop
from compaction.worker import Worker, default_worker_id
from jobs.compactor_settings import CompactorSettings
from jobs.httpserve import MetricsServer
from jobs.logs import configure_logging
from jobs.settings import redact_dsn

log = get_logger("lakestream.compactor")

#: Exit codes: 0 done (or stopped cleanly), 1 a task or the service failed at run time.
EXIT_OK, EXIT_FAILED = 0, 1


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set ``stop``; the loops notice it and wind down."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def connect(dsn: str, warehouse: str | None, settings: CompactorSettings) -> Catalog:
    """The catalog in the schema the settings name (``--schema`` sets it in the environment, so
    the worker processes, which inherit it, open the same one)."""
    retry = settings.outage().committer_retry()
    return Catalog.connect(
        dsn,
        warehouse=warehouse,
        storage=settings.catalog.storage,
        retry=retry,
        schema=settings.catalog.db_schema,
    )


def outage_guard(dsn: str, settings: CompactorSettings) -> OutageGuard:
    """The process's guard: its catalog calls wait out an outage within the budget."""
    return OutageGuard(redact_dsn(dsn), settings.outage())


def report_outage(exc: CatalogOutageError, event: str = "compactor_failed") -> int:
    """The one line a process ends with when the catalog stayed away too long."""
    log.error(
        event,
        error=str(exc),
        kind=type(exc).__name__,
        catalog=exc.catalog,
        outage_s=round(exc.outage_s, 1),
    )
    return EXIT_FAILED


# -- the worker processes ---------------------------------------------------------------------


def worker_process(
    dsn: str, warehouse: str | None, settings: CompactorSettings, log_level: str, drain: bool
) -> None:
    """Body of one pool process (spawned: it opens its own catalog)."""
    configure_logging(log_level)
    stop = threading.Event()
    install_stop_handlers(stop)
    # the service reports its own failure (compactor_failed); a pool worker's is a detail of it
    try:
        code = run_worker(dsn, warehouse, settings, drain=drain, stop=stop, failed="worker_failed")
    except CatalogError as exc:  # no catalog at the start: one line, not a traceback
        log.error("worker_failed", error=str(exc), kind=type(exc).__name__, catalog=redact_dsn(dsn))
        code = EXIT_FAILED
    raise SystemExit(code)


def run_worker(
    dsn: str,
    warehouse: str | None,
    settings: CompactorSettings,
    *,
    drain: bool = False,
    stop: threading.Event | None = None,
    failed: str = "compactor_failed",
) -> int:
    """Claim and run tasks until stopped (or, draining, until the queue is empty); ``failed``
    names the line logged when a catalog outage outlasts the budget.

    Raises:
        CatalogError: the catalog could not be opened at the start.
    """
    listener = None if drain else CommitListener(dsn, channel=TASK_CHANNEL, debounce_s=0.0)
    with connect(dsn, warehouse, settings) as catalog:
        worker = Worker(
            catalog,
            TaskQueue(catalog.store, settings.queue(), outage_guard(dsn, settings)),
            worker_id=default_worker_id(),
            settings=settings.worker(drain=drain),
            stop=stop,
            wake=None if listener is None else listener.wait,
        )
        try:
            stats = worker.run()
        except CatalogOutageError as exc:
            return report_outage(exc, failed)
        finally:
            if listener is not None:
                listener.close()
    return EXIT_FAILED if drain and stats.failed else EXIT_OK


class WorkerPool:
    """N worker processes (spawn context); dead ones are replaced, SIGTERM is passed on."""

    def __init__(
        self, size: int, dsn: str, warehouse: str | None, settings: CompactorSettings, level: str
    ) -> None:
        self.size = size
        self._args = (dsn, warehouse, settings, level)
        self._ctx = multiprocessing.get_context("spawn")
        self.processes: list[SpawnProcess] = []

    def start(self, *, drain: bool = False) -> None:
        self.processes = [self._spawn(drain) for _ in range(self.size)]

    def _spawn(self, drain: bool) -> SpawnProcess:
        process = self._ctx.Process(
            target=worker_process, args=(*self._args, drain), name="compactor-worker", daemon=False
        )
        process.start()
        return process

    def alive(self) -> tuple[int, int]:
        return sum(p.is_alive() for p in self.processes), self.size

    def replace_dead(self) -> None:
        for i, process in enumerate(self.processes):
            if not process.is_alive():
                log.error("worker_process_died", pid=process.pid, exitcode=process.exitcode)
                self.processes[i] = self._spawn(drain=False)

    def join(self, stop: threading.Event, grace: float) -> list[int]:
        """Wait for every process to exit; a stop request is passed on to them."""
        while any(p.is_alive() for p in self.processes):
            if stop.wait(0.5):
                self.stop(grace)
        return [p.exitcode if p.exitcode is not None else -1 for p in self.processes]

    def stop(self, grace: float) -> None:
        """SIGTERM every worker; wait for them to finish or release their tasks."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + grace + 15.0
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():  # stuck past its grace: its lease will lapse
                log.error("worker_process_killed", pid=process.pid)
                process.kill()
                process.join()


# -- the service ------------------------------------------------------------------------------


def run_service(
    dsn: str,
    warehouse: str | None,
    settings: CompactorSettings,
    *,
    once: bool,
    log_level: str,
    stop: threading.Event | None = None,
) -> int:
    """``lakestream compactor run``: coordinator, worker pool and /metrics until SIGTERM;
    with ``once``: one round, run what is queued, exit (1 if a task failed, or the catalog
    stayed away longer than the outage budget)."""
    stop = stop or threading.Event()
    pool = WorkerPool(settings.workers, dsn, warehouse, settings, log_level)
    guard = outage_guard(dsn, settings)
    with connect(dsn, warehouse, settings) as catalog:
        queue = TaskQueue(catalog.store, settings.queue(), guard)
        coordinator = Coordinator(
            catalog,
            queue,
            patterns=settings.patterns(),
            coordinator_id=f"coordinator:{socket.gethostname()}:{default_worker_id()}",
        )
        listener = None if once else CommitListener(dsn)
        metrics = ServiceMetrics()
        metrics.watch_catalog(guard.stats)
        loop = CoordinatorLoop(
            coordinator,
            metrics,
            listener=listener,
            settings=settings.loop(),
            stop=stop,
            workers_alive=pool.alive,
        )
        maintenance = MaintenanceScheduler(
            catalog,
            queue,
            settings.patterns(),
            settings.maintenance_settings(),
            on_run=lambda run: metrics.observe_maintenance(run.figures()),
        )
        server = _metrics_server(settings, loop)
        log.info(
            "compactor_started",
            tables=settings.tables,
            workers=settings.workers,
            once=once,
            metrics_port=server.port if server else None,
        )
        try:
            if once:
                code = _once(loop, pool, catalog, queue, settings)
                maintenance.run_due()
                return code
            pool.start()
            while not stop.is_set():
                loop.run_round()
                maintenance.run_due()
                pool.replace_dead()
                loop.wait_for_work()
            return EXIT_OK
        except CatalogOutageError as exc:
            return report_outage(exc)
        finally:
            pool.stop(settings.grace_seconds)
            if listener is not None:
                listener.close()
            if server is not None:
                server.close()
            log.info("compactor_stopped")


def _once(
    loop: CoordinatorLoop,
    pool: WorkerPool,
    catalog: Catalog,
    queue: TaskQueue,
    settings: CompactorSettings,
) -> int:
    report = loop.run_round()
    if report is None:
        return EXIT_FAILED
    if settings.workers == 0:
        worker = Worker(catalog, queue, settings=settings.worker(drain=True), stop=loop.stop)
        failed = worker.run().failed
    else:
        pool.start(drain=True)
        failed = sum(code != 0 for code in pool.join(loop.stop, settings.grace_seconds))
    loop.run_round()  # record what finished (metrics, the round's log line)
    return EXIT_FAILED if failed else EXIT_OK


def _metrics_server(settings: CompactorSettings, loop: CoordinatorLoop) -> MetricsServer | None:
    if settings.metrics_port is None:
        return None
    try:
        server = MetricsServer(
            loop.metrics.exposition, loop.health, settings.metrics_host, settings.metrics_port
        )
    except OSError as exc:
        raise CompactionError(
            f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: {exc}"
        ) from exc
    return server.start()
