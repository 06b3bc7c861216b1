"""A throwaway single-node Apache Kafka (KRaft, broker and controller in one JVM) on a loopback
port: the broker of the tests, the demo and the benchmarks, the one the code is written for.

There is no Kafka distribution on the project's machines, but Maven Central is reachable: the
broker's jars are fetched once by :func:`ensure_kafka_jars` (:mod:`ingest.kafka.maven`) into
``~/.cache/lakestream/kafka-<version>/lib`` and later starts use that cache without Maven. The
broker runs as ``java -cp 'lib/*' kafka.Kafka server.properties`` after a one-time
``kafka.tools.StorageTool format`` of its data directory: the same two classes the
distribution's ``kafka-storage.sh`` and ``kafka-server-start.sh`` run.

The settings (:func:`server_properties`) are for one broker on a small machine: a 512 MB heap,
internal topics with replication 1 and one partition (fewer logs to create before the first
group or transaction), no initial rebalance delay, and no auto-created topics: a test or demo
that forgets to create its topic should fail at once rather than get a one-partition topic by
accident. Everything is in a data directory (a temporary one by default, deleted on stop; a given
one is kept, so a broker started again on it finds its topics and records).

This module reads no environment variable: the Java binary, Maven and the cache are parameters.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from catalog.logs import get_logger
from ingest.errors import IngestError
from ingest.kafka.maven import MavenArtifact, fetch_jars
from ingest.logs import kafka_logger

log = get_logger("lakestream.ingest.kafka")

KAFKA_VERSION = "4.4.0"
#: kafka_2.13's pom names slf4j-api 1.7 and no binding, so the broker would log nothing; the
#: distribution ships slf4j 2 with log4j2's binding, at the log4j-core version Kafka depends on.
SLF4J_VERSION = "2.0.17"
LOG4J_VERSION = "2.25.5"
#: ``kafka.Kafka``'s node id; the controller quorum is this node alone.
NODE_ID = 1
_READY_TIMEOUT_S = 60.0
_FORMAT_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 20.0
_DATA = "kafka-logs"
_SERVER_PROPERTIES = "server.properties"
_LOG4J_PROPERTIES = "log4j2.properties"
_LOG = "broker.log"
#: Warnings and errors only (at INFO a start writes ~2,400 lines of configuration dumps), plus
#: the one line that says the server started.
_LOG4J_CONFIG = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""


class ApacheKafkaError(IngestError, RuntimeError):
    """Java or the data directory is missing, the broker did not start or answer, or a topic
    did not appear. (Jars Maven could not fetch raise :class:`ingest.kafka.maven.JarFetchError`.)
    """


def kafka_artifacts(version: str = KAFKA_VERSION) -> tuple[MavenArtifact, ...]:
    """What a KRaft broker needs at run time: the server (``kafka_2.13`` brings the raft,
    metadata, storage and coordinator modules) and a logging binding for its slf4j calls."""
    return (
        MavenArtifact("org.apache.kafka", "kafka_2.13", version),
        MavenArtifact("org.slf4j", "slf4j-api", SLF4J_VERSION),
        MavenArtifact("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    )


def default_lib_dir(version: str = KAFKA_VERSION) -> Path:
    return Path.home() / ".cache" / "lakestream" / f"kafka-{version}" / "lib"


def ensure_kafka_jars(
    version: str = KAFKA_VERSION,
    lib: Path | None = None,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
) -> Path:
    """The directory of the broker's jars, fetched with Maven unless the cache is complete."""
    return fetch_jars(
        kafka_artifacts(version),
        lib or default_lib_dir(version),
        mvn=mvn,
        maven_repo=maven_repo,
        offline=offline,
    )


def jvm_command(java: str, heap: str, log4j: Path, lib: Path) -> list[str]:
    """The JVM of a local Kafka process (the broker, a Connect worker) up to its main class:
    a small heap, the serial GC (two cores: no parallel GC threads competing with the tests),
    out of memory ending the process, its jars, its log4j configuration."""
    return [
        java,
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:-UsePerfData",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{lib}/*",
    ]


def spawn(argv: Sequence[str], cwd: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (a terminal's Ctrl-C is the caller's), ended with
    this process, its output appended to ``log_path`` - a file, never a pipe nobody drains: a
    full pipe would stall it."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            [*_parent_death_guard(), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )


def end(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM (a clean shutdown), SIGKILL after ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def tail_of(path: Path, chars: int) -> str:
    """The last ``chars`` characters of a log file ("" when it cannot be read)."""
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-chars:]
    return ""


def server_properties(
    *,
    port: int,
    controller_port: int,
    log_dir: Path,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The broker's ``server.properties``: one node that is broker and sole controller."""
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # two cores: fewer threads than the defaults (3 network, 8 I/O, 10 background)
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        # the cleaner's dedupe buffer (128 MB by default) comes out of the 512 MB heap
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    }
    properties.update(overrides or {})
    return properties


def render_properties(properties: Mapping[str, str]) -> str:
    """``key=value`` lines in ``java.util.Properties``' syntax (backslashes and line breaks
    escaped: a data directory's path is written as given)."""

    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

    return "".join(f"{escape(k)}={escape(v)}\n" for k, v in properties.items())


def new_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` makes one (a UUID in unpadded URL-safe
    base64), without a JVM start for it; never one that starts with '-', which the tool's
    argument parser would read as an option."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass
class ApacheKafka:
    """A running Kafka broker; :meth:`start` makes one, :meth:`stop` ends it."""

    port: int
    controller_port: int
    process: subprocess.Popen[bytes]
    data_dir: Path
    owns_data_dir: bool

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / _LOG

    @property
    def log_dirs(self) -> Path:
        """Kafka's ``log.dirs``: the topics' segments and the cluster metadata log."""
        return self.data_dir / _DATA

    @classmethod
    def start(
        cls,
        port: int | None = None,
        *,
        data_dir: Path | None = None,
        version: str = KAFKA_VERSION,
        lib: Path | None = None,
        java: Path | None = None,
        mvn: Path | None = None,
        heap: str = "512m",
        overrides: Mapping[str, str] | None = None,
        ready_timeout: float = _READY_TIMEOUT_S,
    ) -> ApacheKafka:
        """Start a broker on ``port`` (a free one by default) and wait until it serves metadata.

        ``data_dir`` holds the data, the configuration and the broker's log; a temporary
        directory by default (deleted by :meth:`stop`). A ``data_dir`` that a broker used before
        is not formatted again: its topics and records are still there. Pass the earlier
        ``port`` too if clients should find the broker where it was.

        ``lib`` is a directory of the broker's jars (fetched with :func:`ensure_kafka_jars` into
        the default cache when not given; ``mvn`` is the Maven that fetches them).
        """
        java_bin = find_java(java)
        jars = lib if lib is not None else ensure_kafka_jars(version, mvn=mvn)
        owns_data_dir = data_dir is None
        root = Path(tempfile.mkdtemp(prefix="lakestream-kafka-")) if data_dir is None else data_dir
        try:
            return cls._start_in(
                root,
                owns_data_dir=owns_data_dir,
                port=port,
                java=java_bin,
                lib=jars,
                heap=heap,
                overrides=overrides,
                ready_timeout=ready_timeout,
            )
        except BaseException:
            if owns_data_dir:
                shutil.rmtree(root, ignore_errors=True)
            raise

    @classmethod
    def _start_in(
        cls,
        root: Path,
        *,
        owns_data_dir: bool,
        port: int | None,
        java: str,
        lib: Path,
        heap: str,
        overrides: Mapping[str, str] | None,
        ready_timeout: float,
    ) -> ApacheKafka:
        started = time.monotonic()
        port = port or free_port()
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
        root.mkdir(parents=True, exist_ok=True)
        data = root / _DATA
        config = root / _SERVER_PROPERTIES
        config.write_text(
            render_properties(
                server_properties(
                    port=port, controller_port=controller_port, log_dir=data, overrides=overrides
                )
            )
        )
        log4j = root / _LOG4J_PROPERTIES
        log4j.write_text(_LOG4J_CONFIG)
        jvm = jvm_command(java, heap, log4j, lib)
        formatted = (data / "meta.properties").exists()
        if not formatted:
            _format(jvm, config)
        process = spawn([*jvm, "kafka.Kafka", str(config)], root, root / _LOG)
        broker = cls(port, controller_port, process, root, owns_data_dir)
        try:
            broker.wait_ready(ready_timeout)
        except BaseException:
            broker.stop()
            raise
        log.info(
            "kafka_broker_started",
            bootstrap_servers=broker.bootstrap_servers,
            data_dir=str(root),
            restarted=formatted,
            seconds=round(time.monotonic() - started, 2),
        )
        return broker

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Block until the broker answers a metadata request naming itself; fail if it exits or
        never does."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise ApacheKafkaError(
                    f"kafka exited with {self.process.returncode}: {self.log_tail()}"
                )
            if _lists_a_broker(self.bootstrap_servers):
                return
            if time.monotonic() > deadline:
                raise ApacheKafkaError(f"kafka did not answer within {timeout}s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, chars: int = 3000) -> str:
        return tail_of(self.log_path, chars)

    def stop(self) -> None:
        """Shut the broker down (SIGTERM: a controlled shutdown that closes its logs cleanly;
        SIGKILL after a while) and remove its data directory if it made it."""
        end(self.process, _STOP_TIMEOUT_S)
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ApacheKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_java(java: Path | None = None) -> str:
    """``java`` if it is a file, else the ``java`` on ``PATH``.

    Raises:
        ApacheKafkaError: there is none.
    """
    found = str(java) if java is not None else shutil.which("java")
    if found is None or not Path(found).is_file():
        raise ApacheKafkaError(
            f"no Java found{f' at {java}' if java else ' on PATH'}: Kafka 4 needs Java 17 or newer"
        )
    return found


def _format(jvm: list[str], config: Path) -> None:
    """Write the data directory's ``meta.properties`` and bootstrap metadata, as
    ``kafka-storage.sh format`` does; needed once per data directory."""
    # C1 only: the tool runs for a second, too short for C2 to pay off (~0.15 s less)
    argv = [
        *jvm,
        "-XX:TieredStopAtLevel=1",
        "kafka.tools.StorageTool",
        "format",
        "-t",
        new_cluster_id(),
        "-c",
        str(config),
    ]
    try:
        run = subprocess.run(
            [*_parent_death_guard(), *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_FORMAT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ApacheKafkaError(
            f"formatting {config.parent} took over {_FORMAT_TIMEOUT_S}s"
        ) from exc
    if run.returncode != 0:
        output = (run.stdout + run.stderr)[-3000:]
        raise ApacheKafkaError(f"formatting {config.parent} failed ({run.returncode}): {output}")


def _lists_a_broker(bootstrap_servers: str) -> bool:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "log_level": 0}
    config["logger"] = kafka_logger()
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=1.0)
    except KafkaException:
        return False
    return bool(metadata.brokers)


@contextlib.contextmanager
def apache_kafka(port: int | None = None, *, data_dir: Path | None = None) -> Iterator[ApacheKafka]:
    """A broker for the duration of a ``with`` block."""
    broker = ApacheKafka.start(port, data_dir=data_dir)
    try:
        yield broker
    finally:
        broker.stop()


def free_port() -> int:
    """A loopback port that was free a moment ago (the broker binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def create_topic(
    bootstrap_servers: str, name: str, partitions: int = 1, timeout: float = 10.0
) -> None:
    """Create ``name`` with ``partitions`` partitions and wait until its metadata shows them
    (topics are never auto-created: :func:`server_properties`).

    Raises:
        KafkaException: the broker refused to create it (it exists already, say).
        ApacheKafkaError: the topic's metadata did not show ``partitions`` partitions in time.
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
            raise ApacheKafkaError(f"topic {name!r} did not show {partitions} partitions")
        time.sleep(0.05)
