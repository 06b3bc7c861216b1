"""The compactor service beside the benchmark's writer, run as a deployment runs it.

The process body calls ``jobs.compactor_main.run_service`` - the code behind ``lakestream
compactor run``: the stateless coordinator (woken by the commit notification, polling as a
fallback) in this process, and ``workers`` worker processes of its pool claiming tasks from the
PostgreSQL queue - with the default settings and every table's default thresholds; only the
served tables are narrowed to the benchmark's table. SIGTERM stops it as it stops the service.

Its CPU is measured inside the process when the service has returned: ``RUSAGE_SELF`` is the
coordinator (and the service's threads), ``RUSAGE_CHILDREN`` the worker processes, which the
pool has joined by then. The catalog database's own CPU is not counted (it serves the writer
and the readers too).
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import threading
import time
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from pathlib import Path

from jobs.compactor_main import install_stop_handlers, run_service
from jobs.compactor_settings import CompactorSettings
from jobs.logs import configure_logging

#: Seconds given to the service to stop after SIGTERM (its grace period is 30 s by default).
_STOP_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class CompactorUsage:
    coordinator_cpu_s: float
    workers_cpu_s: float
    exit_code: int | None
    alive_s: float

    @property
    def cpu_s(self) -> float:
        return self.coordinator_cpu_s + self.workers_cpu_s


def serve(dsn: str, warehouse: str, tables: str, workers: int, usage_path: str) -> None:
    """Body of the compactor process (spawned, so it imports and connects on its own)."""
    configure_logging("WARNING", json=True)
    stop = threading.Event()
    install_stop_handlers(stop)
    settings = CompactorSettings(tables=tables, workers=workers)
    code = run_service(dsn, warehouse, settings, once=False, log_level="WARNING", stop=stop)
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {
        "coordinator_cpu_s": me.ru_utime + me.ru_stime,
        "workers_cpu_s": children.ru_utime + children.ru_stime,
    }
    Path(usage_path).write_text(json.dumps(usage))
    raise SystemExit(code)


class CompactorProcess:
    """Start the service in a process of its own; stop it and collect its CPU."""

    def __init__(
        self, dsn: str, warehouse: Path, *, tables: str, workers: int, usage_path: Path
    ) -> None:
        self._args = (dsn, str(warehouse), tables, workers, str(usage_path))
        self._usage_path = usage_path
        self._process: SpawnProcess | None = None
        self._started = 0.0

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._process = ctx.Process(target=serve, args=self._args, name="bench-compactor")
        self._process.start()
        self._started = time.monotonic()

    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def stop(self) -> CompactorUsage:
        assert self._process is not None, "start() first"
        self._process.terminate()  # SIGTERM: the service's own stop path
        self._process.join(_STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        alive = time.monotonic() - self._started
        found = json.loads(self._usage_path.read_text()) if self._usage_path.exists() else {}
        return CompactorUsage(
            coordinator_cpu_s=float(found.get("coordinator_cpu_s", float("nan"))),
            workers_cpu_s=float(found.get("workers_cpu_s", float("nan"))),
            exit_code=self._process.exitcode,
            alive_s=alive,
        )
