"""A throwaway Kafka Connect worker running Debezium's PostgreSQL connector, as users deploy it.

Users run Debezium inside Kafka Connect (``docker/compose.yaml``: a distributed worker, the
connector registered over REST from ``docker/connector.json``). :class:`LocalConnect` is that
worker without Docker: ``org.apache.kafka.connect.cli.ConnectDistributed`` as a subprocess on a
free loopback REST port, against a given broker (:class:`~ingest.kafka.apache_kafka.ApacheKafka`
in the tests). Distributed mode, so that the connectors' configurations, source offsets and
statuses live in Kafka topics and a new worker of the same group resumes where the last one
stopped - the same as a deployment.

Jars come from Maven Central through :func:`~ingest.kafka.maven.fetch_jars` into two stamp-cached
directories under ``~/.cache/lakestream/``:

* the worker's classpath, ``connect-<kafka version>/lib``: ``connect-runtime`` and
  ``connect-json`` at the broker's version (:data:`~ingest.kafka.apache_kafka.KAFKA_VERSION`),
  plus slf4j 2 with log4j2's binding (as the broker has);
* the plugin, ``debezium-<version>/plugins/debezium-connector-postgres``:
  ``io.debezium:debezium-connector-postgres`` and its runtime dependencies (21 jars, among them
  the PostgreSQL JDBC driver). ``plugin.path`` names its parent, so Connect loads it in an
  isolated class loader, as it loads an unpacked Debezium archive. The copy also holds
  ``kafka-clients``, ``connect-api`` and ``slf4j-api`` of Debezium's build; Connect never loads
  those from a plugin (their packages always come from the worker), so they are dead weight only.
  ``mvn dependency:get`` of the connector fails on ``debezium-storage-chronicle-queue``; the
  runtime scope of ``copy-dependencies`` does not reach it.

Known noise: on start the worker logs one ERROR, "Failed to discover Converter ...
CloudEventsConverter could not be instantiated": Debezium 3.6's CloudEvents converter looks up
``JsonConverter.convertToConnect(Schema, JsonNode)`` by reflection, and Kafka 4.4 gave that
private method a third parameter. Only that converter is unusable; the connector is not affected.

This module reads no environment variable: Java, Maven, the caches and the worker's settings are
parameters.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catalog.logs import get_logger
from ingest.errors import IngestError
from ingest.kafka.apache_kafka import (
    KAFKA_VERSION,
    LOG4J_VERSION,
    SLF4J_VERSION,
    end,
    find_java,
    free_port,
    jvm_command,
    render_properties,
    spawn,
    tail_of,
)
from ingest.kafka.maven import MavenArtifact, fetch_jars

log = get_logger("lakestream.ingest.kafka")

DEBEZIUM_VERSION = "3.6.1.Final"
POSTGRES_CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
#: The plugin's directory under ``plugin.path``.
POSTGRES_PLUGIN = "debezium-connector-postgres"
RUNNING = "RUNNING"
STOPPED = "STOPPED"
FAILED = "FAILED"

_READY_TIMEOUT_S = 120.0
_RUNNING_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_HTTP_TIMEOUT_S = 30.0
_WORKER_PROPERTIES = "connect-distributed.properties"
_LOG4J_PROPERTIES = "log4j2.properties"
_LOG = "connect.log"
#: Warnings and errors, what Debezium says about its snapshot and stream (a few lines per
#: connector start), and Connect's "started" line. At INFO for everything a start writes
#: ~1,400 lines, mostly configuration dumps.
_LOG4J_CONFIG = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.connect.name = org.apache.kafka.connect.runtime.Connect
logger.connect.level = info
logger.debezium.name = io.debezium
logger.debezium.level = info
"""


class ConnectError(IngestError, RuntimeError):
    """The Connect worker did not start or answer, or a connector did not reach a state."""


class ConnectRequestError(ConnectError):
    """The REST API refused a request: its HTTP status and Connect's error message."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.method = method
        self.path = path
        self.status = status
        self.message = message


class ConnectorFailedError(ConnectError):
    """A connector or one of its tasks is FAILED; ``trace`` is the worker's stack trace."""

    def __init__(self, name: str, status: Mapping[str, Any]) -> None:
        self.name = name
        self.status = dict(status)
        self.trace = _first_trace(status)
        super().__init__(f"connector {name} failed: {self.trace[:2000]}")


def connect_artifacts(version: str = KAFKA_VERSION) -> tuple[MavenArtifact, ...]:
    """A distributed worker's classpath: the runtime (REST server, herder, the Kafka-backed
    stores), the JSON converter, and a logging binding for slf4j."""
    return (
        MavenArtifact("org.apache.kafka", "connect-runtime", version),
        MavenArtifact("org.apache.kafka", "connect-json", version),
        MavenArtifact("org.slf4j", "slf4j-api", SLF4J_VERSION),
        MavenArtifact("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    )


def postgres_plugin_artifacts(version: str = DEBEZIUM_VERSION) -> tuple[MavenArtifact, ...]:
    return (MavenArtifact("io.debezium", "debezium-connector-postgres", version),)


def default_connect_lib(version: str = KAFKA_VERSION) -> Path:
    return Path.home() / ".cache" / "lakestream" / f"connect-{version}" / "lib"


def default_plugin_path(version: str = DEBEZIUM_VERSION) -> Path:
    """The ``plugin.path`` directory; the connector's jars are in its ``POSTGRES_PLUGIN``."""
    return Path.home() / ".cache" / "lakestream" / f"debezium-{version}" / "plugins"


def ensure_connect_jars(
    version: str = KAFKA_VERSION,
    lib: Path | None = None,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
) -> Path:
    """The directory of the worker's jars, fetched with Maven unless the cache is complete."""
    return fetch_jars(
        connect_artifacts(version),
        lib or default_connect_lib(version),
        mvn=mvn,
        maven_repo=maven_repo,
        offline=offline,
    )


def ensure_postgres_plugin(
    version: str = DEBEZIUM_VERSION,
    plugin_path: Path | None = None,
    *,
    mvn: Path | None = None,
    maven_repo: Path | None = None,
    offline: bool = False,
) -> Path:
    """A ``plugin.path`` directory holding Debezium's PostgreSQL connector, fetched with Maven
    unless the cache is complete; returns the ``plugin.path`` (not the plugin's own directory)."""
    root = plugin_path or default_plugin_path(version)
    fetch_jars(
        postgres_plugin_artifacts(version),
        root / POSTGRES_PLUGIN,
        mvn=mvn,
        maven_repo=maven_repo,
        offline=offline,
    )
    return root


def worker_properties(
    *,
    bootstrap_servers: str,
    rest_port: int,
    group_id: str,
    plugin_path: Path,
    exactly_once: bool = False,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The worker's ``connect-distributed.properties``: one worker of group ``group_id``, its
    internal topics named after the group (``<group>-configs``, ``-offsets``, ``-status``), with
    replication 1 and one partition each (a one-broker cluster; fewer logs to create).

    Two settings differ from Connect's defaults, both for a worker that runs alone:
    ``offset.flush.interval.ms`` is 1 s, not 60 s (a restart re-sends at most a second of
    changes), and ``scheduled.rebalance.max.delay.ms`` is 0: a worker that comes back after a
    crash gets the dead member's connectors at once instead of after 5 minutes (the delay is
    for a cluster whose other workers could take them over).

    ``exactly_once`` sets ``exactly.once.source.support=enabled``: each task writes its records
    and offsets in Kafka transactions (topics then hold commit markers between batches).
    """
    properties = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "config.storage.topic": f"{group_id}-configs",
        "offset.storage.topic": f"{group_id}-offsets",
        "status.storage.topic": f"{group_id}-status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "listeners": f"http://127.0.0.1:{rest_port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(rest_port),
        "rest.advertised.listener": "http",
        "plugin.path": str(plugin_path),
        # Debezium's jars carry ServiceLoader manifests: no reflective scan of every class
        "plugin.discovery": "service_load",
        "offset.flush.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
        "topic.creation.enable": "true",
    }
    if exactly_once:
        properties["exactly.once.source.support"] = "enabled"
    properties.update(overrides or {})
    return properties


def postgres_connector_config(
    *,
    port: int,
    database: str,
    tables: str,
    prefix: str,
    user: str = "postgres",
    password: str = "",
    host: str = "127.0.0.1",
    schemas: bool = True,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A PostgreSQL connector's configuration in the shape of ``docker/connector.json``:
    ``pgoutput``, a slot and a filtered publication named after ``prefix`` (created by the
    connector), topics ``<prefix>.<schema>.<table>`` created by Connect with one partition, and
    the JsonConverter with ``schemas.enable`` = ``schemas`` for keys and values."""
    name = prefix.replace(".", "_").replace("-", "_")
    config = {
        "connector.class": POSTGRES_CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": database,
        "topic.prefix": prefix,
        "table.include.list": tables,
        "plugin.name": "pgoutput",
        "slot.name": f"{name}_slot",
        "publication.name": f"{name}_pub",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "tombstones.on.delete": "true",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": str(schemas).lower(),
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": str(schemas).lower(),
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }
    config.update(overrides or {})
    return config


#: The connection keys of a deployed connector's JSON that a local copy replaces: where the
#: database is, who connects, and the names that must be unique per copy (topic prefix, slot,
#: publication). ``docker/connector.json`` gives them as ``${env:...}`` or service names.
DEPLOYMENT_OVERRIDES = (
    "database.hostname",
    "database.port",
    "database.dbname",
    "database.user",
    "database.password",
    "topic.prefix",
    "slot.name",
    "publication.name",
)


def load_connector_json(path: Path) -> tuple[str, dict[str, str]]:
    """A connector's ``name`` and configuration from a JSON file in the shape
    ``register-connector.sh`` PUTs (``docker/connector.json``: one flat object, the name in it);
    every value as a string, as Connect stores them."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise ConnectError(f"{path}: not a connector configuration with a name")
    config = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    return config.pop("name"), config


def deployment_connector_config(
    path: Path,
    *,
    host: str,
    port: int,
    database: str,
    user: str,
    password: str,
    prefix: str,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The deployment's connector configuration (``path``, e.g. ``docker/connector.json``) for a
    local database: only :data:`DEPLOYMENT_OVERRIDES` are replaced (slot and publication named
    ``<prefix>_slot`` / ``<prefix>_pub``, with ``.`` and ``-`` as ``_``), then ``overrides``
    (what a test varies on purpose, e.g. ``schema.include.list``). Everything else - converters,
    snapshot mode, type handling, tombstones, topic creation, heartbeats - is the deployment's,
    so what runs locally is what runs there.

    Raises:
        ConnectError: a ``${...}`` placeholder is left (a config provider the local worker does
            not have).
    """
    _, config = load_connector_json(path)
    stem = prefix.replace(".", "_").replace("-", "_")
    config.update(
        {
            "database.hostname": host,
            "database.port": str(port),
            "database.dbname": database,
            "database.user": user,
            "database.password": password,
            "topic.prefix": prefix,
            "slot.name": f"{stem}_slot",
            "publication.name": f"{stem}_pub",
        }
    )
    config.update(overrides or {})
    left = sorted(key for key, value in config.items() if "${" in value)
    if left:
        raise ConnectError(f"{path}: placeholders left in {', '.join(left)}")
    return config


@dataclass
class LocalConnect:
    """A running Kafka Connect worker; :meth:`start` makes one, :meth:`stop` ends it."""

    bootstrap_servers: str
    port: int
    group_id: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    owns_data_dir: bool

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / _LOG

    @classmethod
    def start(
        cls,
        bootstrap_servers: str,
        *,
        port: int | None = None,
        group_id: str | None = None,
        exactly_once: bool = False,
        overrides: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
        lib: Path | None = None,
        plugin_path: Path | None = None,
        java: Path | None = None,
        mvn: Path | None = None,
        heap: str = "384m",
        ready_timeout: float = _READY_TIMEOUT_S,
    ) -> LocalConnect:
        """Start a worker against ``bootstrap_servers`` and wait until its REST API lists
        connectors (which it does once the worker joined its group and read the config topic).

        ``group_id`` (a new unique one by default) names the group and its three topics: a
        worker started with the group of one that stopped or died takes over its connectors
        and their offsets. ``data_dir`` holds the properties and the worker's log (a temporary
        directory by default, deleted by :meth:`stop`); the worker keeps no state there.
        ``lib`` and ``plugin_path`` default to the Maven-fetched caches.
        """
        java_bin = find_java(java)
        jars = lib if lib is not None else ensure_connect_jars(mvn=mvn)
        plugins = plugin_path if plugin_path is not None else ensure_postgres_plugin(mvn=mvn)
        owns_data_dir = data_dir is None
        root = (
            Path(tempfile.mkdtemp(prefix="lakestream-connect-")) if data_dir is None else data_dir
        )
        started = time.monotonic()
        try:
            root.mkdir(parents=True, exist_ok=True)
            rest_port = port or free_port()
            group = group_id or f"lakestream-connect-{uuid.uuid4().hex[:8]}"
            config = root / _WORKER_PROPERTIES
            config.write_text(
                render_properties(
                    worker_properties(
                        bootstrap_servers=bootstrap_servers,
                        rest_port=rest_port,
                        group_id=group,
                        plugin_path=plugins,
                        exactly_once=exactly_once,
                        overrides=overrides,
                    )
                )
            )
            log4j = root / _LOG4J_PROPERTIES
            log4j.write_text(_LOG4J_CONFIG)
            main = ["org.apache.kafka.connect.cli.ConnectDistributed", str(config)]
            process = spawn([*jvm_command(java_bin, heap, log4j, jars), *main], root, root / _LOG)
        except BaseException:
            if owns_data_dir:
                shutil.rmtree(root, ignore_errors=True)
            raise
        worker = cls(bootstrap_servers, rest_port, group, process, root, owns_data_dir)
        try:
            worker.wait_ready(ready_timeout)
        except BaseException:
            worker.stop()
            raise
        log.info(
            "kafka_connect_started",
            url=worker.url,
            group_id=group,
            exactly_once=exactly_once,
            seconds=round(time.monotonic() - started, 2),
        )
        return worker

    # -- lifecycle -------------------------------------------------------------------------------

    def wait_ready(self, timeout: float = _READY_TIMEOUT_S) -> None:
        """Block until ``GET /connectors`` answers 200; fail if the worker exits or never does."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            with contextlib.suppress(ConnectError, OSError):
                self._request("GET", "/connectors", timeout=2.0)
                return
            if time.monotonic() > deadline:
                raise ConnectError(
                    f"kafka connect did not answer within {timeout}s: {self.log_tail()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the worker (SIGTERM: it stops its tasks, which commit their offsets, and leaves
        its group; SIGKILL after a while) and remove its data directory if it made it."""
        end(self.process, _STOP_TIMEOUT_S)
        if self.owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """End the worker at once (SIGKILL), as a crash would: no offsets flushed, no goodbye
        to the group. The data directory stays until :meth:`stop`."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(_STOP_TIMEOUT_S)

    def __enter__(self) -> LocalConnect:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 3000) -> str:
        return tail_of(self.log_path, chars)

    # -- connectors ------------------------------------------------------------------------------

    def register(
        self, name: str, config: Mapping[str, str], timeout: float = _RUNNING_TIMEOUT_S
    ) -> dict[str, Any]:
        """Create connector ``name`` (``POST /connectors``) and wait until it and all its tasks
        run; returns its status.

        Raises:
            ConnectRequestError: Connect refused the config (409: the name exists; 400: the
                config is invalid, with the validation messages).
            ConnectorFailedError: the connector or a task failed while starting.
        """
        self._request("POST", "/connectors", {"name": name, "config": dict(config)})
        return self.wait_running(name, timeout)

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/<name>/status``: the connector's and each task's state."""
        return self._request("GET", f"/connectors/{_quote(name)}/status") or {}

    def connectors(self) -> list[str]:
        names: list[str] = self._request("GET", "/connectors") or []
        return names

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """``GET /connectors/<name>/offsets``: the source offsets Connect stored in Kafka (each
        ``{"partition": ..., "offset": ...}``; for Debezium's PostgreSQL connector the offset
        holds the LSN it resumes from)."""
        body = self._request("GET", f"/connectors/{_quote(name)}/offsets") or {}
        found: list[dict[str, Any]] = body.get("offsets", [])
        return found

    def wait_running(self, name: str, timeout: float = _RUNNING_TIMEOUT_S) -> dict[str, Any]:
        """Block until the connector and at least one task are RUNNING, with no task in
        another state; returns the status.

        Raises:
            ConnectorFailedError: the connector or a task is FAILED.
            ConnectError: not running within ``timeout``, or the worker exited.
        """
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while True:
            self._check_alive()
            try:
                last = self.status(name)
            except ConnectRequestError as exc:
                if exc.status != 404:  # 404: not yet in the status topic
                    raise
            states = _states(last)
            if FAILED in states:
                raise ConnectorFailedError(name, last)
            if len(states) >= 2 and all(state == RUNNING for state in states):
                return last
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} not running after {timeout}s: {last}")
            time.sleep(0.2)

    def restart(
        self, name: str, *, include_tasks: bool = True, timeout: float = _RUNNING_TIMEOUT_S
    ) -> dict[str, Any]:
        """Restart the connector and (by default) its tasks, then wait until they run again.

        A task's restart stops it (its records so far are flushed and their offsets committed)
        and starts it from the offsets in Kafka."""
        query = urllib.parse.urlencode({"includeTasks": str(include_tasks).lower()})
        self._request("POST", f"/connectors/{_quote(name)}/restart?{query}")
        # the status topic may still say RUNNING from before the restart for a moment; the
        # restart is asynchronous (202) and shows as RESTARTING first
        time.sleep(0.5)
        return self.wait_running(name, timeout)

    def stop_connector(self, name: str, timeout: float = _RUNNING_TIMEOUT_S) -> dict[str, Any]:
        """Stop the connector (``PUT /connectors/<name>/stop``): its tasks stop, flushing their
        records and committing their source offsets, and the connector stays registered with
        state STOPPED until :meth:`resume`. Waits until the status says STOPPED."""
        self._request("PUT", f"/connectors/{_quote(name)}/stop")
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            last = self.status(name)
            states = _states(last)
            if FAILED in states:
                raise ConnectorFailedError(name, last)
            if states[:1] == [STOPPED] and len(states) == 1:  # no task left
                return last
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} not stopped after {timeout}s: {last}")
            time.sleep(0.2)

    def resume(self, name: str, timeout: float = _RUNNING_TIMEOUT_S) -> dict[str, Any]:
        """Resume a stopped (or paused) connector; its tasks start from the stored offsets.
        Waits until it and its tasks run."""
        self._request("PUT", f"/connectors/{_quote(name)}/resume")
        time.sleep(0.5)  # the status topic may still show the state from before
        return self.wait_running(name, timeout)

    def delete(self, name: str, timeout: float = _RUNNING_TIMEOUT_S) -> None:
        """Delete the connector (its tasks stop; its offsets stay in Kafka) and wait until the
        worker no longer lists it. The replication slot stays in PostgreSQL: drop it there."""
        self._request("DELETE", f"/connectors/{_quote(name)}")
        deadline = time.monotonic() + timeout
        while name in self.connectors():
            if time.monotonic() > deadline:
                raise ConnectError(f"connector {name} still listed after {timeout}s")
            time.sleep(0.2)

    # -- the REST client -------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise ConnectError(
                f"kafka connect exited with {self.process.returncode}: {self.log_tail()}"
            )

    def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        timeout: float = _HTTP_TIMEOUT_S,
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read().decode(errors="replace")
            try:
                message = str(json.loads(raw).get("message", raw))
            except ValueError:
                message = raw
            raise ConnectRequestError(method, path, exc.code, message) from exc
        try:
            return json.loads(text) if text else None
        except ValueError as exc:
            raise ConnectError(f"{method} {path}: not JSON: {text[:200]!r}") from exc


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _states(status: Mapping[str, Any]) -> list[str]:
    """The connector's state, then each task's; empty before the connector has one."""
    connector = status.get("connector")
    if not isinstance(connector, Mapping):
        return []
    states = [str(connector.get("state"))]
    tasks = status.get("tasks") or []
    states.extend(str(task.get("state")) for task in tasks if isinstance(task, Mapping))
    return states


def _first_trace(status: Mapping[str, Any]) -> str:
    parts = [status.get("connector") or {}, *(status.get("tasks") or [])]
    for part in parts:
        if isinstance(part, Mapping) and part.get("state") == FAILED:
            return str(part.get("trace") or "")
    return ""


@contextlib.contextmanager
def local_connect(bootstrap_servers: str, **kwargs: Any) -> Iterator[LocalConnect]:
    """A worker for the duration of a ``with`` block."""
    worker = LocalConnect.start(bootstrap_servers, **kwargs)
    try:
        yield worker
    finally:
        worker.stop()
