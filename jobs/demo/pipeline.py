"""``lakestream demo``: the main job end to end on this machine, with nothing to configure.

PostgreSQL (one local server: the ``shop`` source database, with ``wal_level=logical``, and the
``lakestream`` catalog database) -> Debezium's PostgreSQL connector in a Kafka Connect worker,
registered with ``docker/connector.json`` as the Docker deployment registers it (only the
connection and the topic prefix differ) -> a local Apache Kafka broker (one KRaft node) ->
``lakestream ingest`` streaming
with a processing-time trigger into CDC tables -> ``lakestream compactor run`` folding their
runs, while a workload changes the source. Then the lake is checked against the source table
by table.

Everything lives under the home directory (wiped at the start of each run) and everything is
stopped at the end, or on Ctrl-C (exit code 130): nothing keeps running. ``--explore`` starts
the kept PostgreSQL again so the printed commands work afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import psycopg
from psycopg import sql

from catalog import Catalog
from ingest.kafka.apache_kafka import (
    ApacheKafka,
    ApacheKafkaError,
    create_topic,
    ensure_kafka_jars,
    find_java,
)
from ingest.kafka.connect import (
    ConnectError,
    LocalConnect,
    ensure_connect_jars,
    ensure_postgres_plugin,
    load_connector_json,
)
from ingest.kafka.maven import JarFetchError
from jobs.demo.check import check_table, explore_lines, time_travel
from jobs.demo.debezium import (
    CONNECTOR_JSON,
    PostgresSource,
    connector_config,
    create_publication,
    topic_partitions,
)
from jobs.demo.progress import LakeWatch, Progress
from jobs.demo.services import (
    DemoFailed,
    Job,
    TopicCount,
    compactor_env,
    stop_jobs,
    write_ingest_config,
)
from jobs.demo.workload import TABLES, Shop, Workload
from jobs.localpg import LocalPostgres, LocalPostgresError, free_port

EXIT_OK, EXIT_FAILED, EXIT_SETUP, EXIT_INTERRUPTED = 0, 1, 2, 130
CONNECTOR = "demo"  # topic prefix, slot and publication stem
TOPICS = [f"{CONNECTOR}.public.{t}" for t in TABLES]
LAKE_TABLES = tuple(f"shop.{t}" for t in TABLES)
#: What the demo owns under its home directory (removed at the start of a run).
OWNED = ("pg", "warehouse", "checkpoint", "connect", "logs", "ingest.yaml", "port")
CATCH_UP_TIMEOUT_S = 120.0
DEAD_LETTERS = "lakestream.dead_letters"


@dataclass(frozen=True)
class DemoConfig:
    home: Path
    duration: float = 60.0
    """Seconds the workload runs once the snapshot is in the broker."""
    rate: float = 100.0
    """Source transactions per second."""
    trigger_seconds: float = 1.0
    seed_customers: int = 200
    seed_orders: int = 300


@dataclass
class Parts:
    """What is running, for the progress loop's health checks."""

    connect: LocalConnect
    connector: str
    topics: TopicCount
    jobs: list[Job]
    shop: Shop
    workload: Workload | None = None

    def check(self) -> None:
        try:
            status = self.connect.status(self.connector)
        except ConnectError as exc:
            raise DemoFailed(f"Kafka Connect failed: {exc}") from exc
        states = [status.get("connector", {}).get("state")]
        states += [task.get("state") for task in status.get("tasks", [])]
        if "FAILED" in states:
            raise DemoFailed(
                f"Debezium's connector failed (log: {self.connect.log_path}): " + str(status)[:500]
            )
        for job in self.jobs:
            job.check_running()
        if self.workload is not None and self.workload.failure is not None:
            raise DemoFailed(f"the workload failed: {self.workload.failure!r}")


def run(config: DemoConfig, out: TextIO | None = None) -> int:
    """The whole demo; returns the exit code (0 the lake equals the source, 1 a failure or a
    difference, 2 something to install, 130 interrupted)."""
    out = out or sys.stdout
    try:
        find_java()
        # Maven the first time (dev/setup does it), the cache after
        ensure_kafka_jars()
        ensure_connect_jars()
        ensure_postgres_plugin()
    except (ApacheKafkaError, JarFetchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    if not CONNECTOR_JSON.is_file():  # the demo runs from a clone (dev/demo), not a wheel
        print(
            f"error: no {CONNECTOR_JSON}: run the demo from a clone of the repository (dev/demo)",
            file=sys.stderr,
        )
        return EXIT_SETUP
    with _interrupts_as_keyboard_interrupt():
        started = time.monotonic()
        try:
            code = _run(config, out)
        except KeyboardInterrupt:
            print("\ninterrupted: everything the demo started is stopped", file=out)
            return EXIT_INTERRUPTED
        except (DemoFailed, LocalPostgresError, ApacheKafkaError, ConnectError) as exc:
            print(f"\nerror: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(f"\ndemo took {time.monotonic() - started:.0f} s", file=out)
        return code


@contextlib.contextmanager
def _interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM stops the demo as Ctrl-C does; once stopping, further signals are ignored so
    that the clean-up itself is not cut short."""

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler), signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _run(config: DemoConfig, out: TextIO) -> int:
    home = config.home
    _fresh_home(home)
    with contextlib.ExitStack() as stack:
        print(f"Starting PostgreSQL (source and catalog) under {home / 'pg'} ...", file=out)
        (home / "pg").mkdir()
        server = LocalPostgres.start(data_dir=home / "pg", port=_port(home))
        stack.callback(server.stop, remove=False)
        (home / "port").write_text(str(server.port))
        catalog_dsn = _create_databases(server)
        warehouse = home / "warehouse"
        catalog = stack.enter_context(Catalog.connect(catalog_dsn, warehouse=warehouse))
        conn = stack.enter_context(psycopg.connect(server.dsn("shop"), autocommit=True))
        shop = Shop(conn, random.Random(20261122))
        shop.create()
        shop.seed(config.seed_customers, config.seed_orders)
        progress = Progress(LakeWatch(catalog, "demo-cdc", LAKE_TABLES), out)
        with contextlib.ExitStack() as services:
            earlier = _stream(
                config,
                server=server,
                catalog_dsn=catalog_dsn,
                shop=shop,
                progress=progress,
                services=services,
            )
        out.write("Pipeline stopped (Kafka Connect, ingest, compactor, broker).\n\n")
        code = _report(
            config, conn=conn, catalog=catalog, earlier=earlier, port=server.port, out=out
        )
    return code


def _stream(
    config: DemoConfig,
    *,
    server: LocalPostgres,
    catalog_dsn: str,
    shop: Shop,
    progress: Progress,
    services: contextlib.ExitStack,
) -> dt.datetime:
    """Start the pipeline, snapshot, run the workload, catch up; returns the time halfway
    through the workload (for the time-travel query)."""
    home = config.home
    progress.say(
        "Starting the broker (Apache Kafka), Kafka Connect, the ingest job and the compactor ..."
    )
    broker = ApacheKafka.start()
    services.callback(broker.stop)
    for topic in TOPICS:  # as Connect would create them (the connector's topic.creation.*)
        create_topic(broker.bootstrap_servers, topic, partitions=topic_partitions())
    jobs = _start_jobs(config, catalog_dsn, broker.bootstrap_servers)
    services.callback(stop_jobs, jobs)
    connect = LocalConnect.start(broker.bootstrap_servers, data_dir=home / "connect")
    services.callback(connect.stop)  # before the broker: the task commits its offsets
    topics = TopicCount(broker.bootstrap_servers, TOPICS)
    services.callback(topics.close)
    source = PostgresSource(server.port, "shop")
    connector_name, _ = load_connector_json(CONNECTOR_JSON)
    connector = connector_config(source, CONNECTOR)
    create_publication(source, connector)
    connect.register(connector_name, connector)
    parts = Parts(connect, connector_name, topics, jobs, shop)
    progress.say(
        f"Debezium ({CONNECTOR_JSON.relative_to(CONNECTOR_JSON.parents[1])}) snapshots "
        f"{shop.expected_events} rows of {', '.join(TABLES)}; Spark starts the ingest job ..."
    )
    progress.say("  (versions are customers/orders/payments; lag = source events not in the lake)")
    _loop(parts, progress, until=lambda: topics.refresh() >= shop.expected_events, timeout=120)
    progress.say("Snapshot in the broker; waiting for the ingest job's first batch ...")
    watch = progress.watch
    _loop(parts, progress, until=lambda: watch.records_in_lake() >= topics.count, timeout=180)
    progress.say(f"Snapshot in the lake. Workload: {config.duration:.0f} s of changes ...")
    parts.workload = Workload(shop, config.rate).start()
    services.callback(parts.workload.stop)
    halfway = time.monotonic() + config.duration / 2
    earlier: list[dt.datetime] = []

    def note_halfway() -> bool:
        if not earlier and time.monotonic() >= halfway:
            earlier.append(dt.datetime.now(dt.UTC))
        return False

    _loop(parts, progress, until=note_halfway, timeout=config.duration, expire_ok=True)
    parts.workload.stop()
    progress.say(
        f"Workload stopped after {parts.workload.transactions} transactions; "
        "waiting for the lake to catch up ..."
    )
    _loop(
        parts,
        progress,
        until=lambda: (
            topics.refresh() >= shop.expected_events and watch.records_in_lake() >= topics.count
        ),
        timeout=CATCH_UP_TIMEOUT_S,
    )
    progress.show(progress.sample(topics.count, shop.expected_events))
    progress.say(f"Caught up: {topics.count} events in the lake.")
    return earlier[0] if earlier else dt.datetime.now(dt.UTC)


def _loop(
    parts: Parts,
    progress: Progress,
    *,
    until: Callable[[], bool],
    timeout: float,
    expire_ok: bool = False,
) -> None:
    """Show progress every ~2 s and check every part's health until ``until()`` holds; after
    ``timeout`` seconds: done (``expire_ok``) or a failure."""
    deadline = time.monotonic() + timeout
    while not until():
        parts.check()
        if time.monotonic() >= deadline:
            if expire_ok:
                return
            raise DemoFailed(f"no progress within {timeout:.0f} s (logs: {progress_logs(parts)})")
        if progress.due():
            progress.show(progress.sample(parts.topics.refresh(), parts.shop.expected_events))
        time.sleep(0.2)


def progress_logs(parts: Parts) -> str:
    return ", ".join([str(parts.connect.log_path), *(str(job.log) for job in parts.jobs)])


def _start_jobs(config: DemoConfig, dsn: str, bootstrap_servers: str) -> list[Job]:
    home = config.home
    write_ingest_config(
        home / "ingest.yaml",
        dsn=dsn,
        warehouse=home / "warehouse",
        bootstrap_servers=bootstrap_servers,
        topics=TOPICS,
        checkpoint=home / "checkpoint",
        trigger_seconds=config.trigger_seconds,
    )
    logs = home / "logs"
    ingest = Job.start(
        "ingest job", ["ingest", "--config", str(home / "ingest.yaml")], logs / "ingest.log", {}
    )
    compactor = Job.start(
        "compactor",
        ["compactor", "run"],
        logs / "compactor.log",
        compactor_env(dsn, home / "warehouse"),
    )
    return [ingest, compactor]


def _report(
    config: DemoConfig,
    *,
    conn: psycopg.Connection[Any],
    catalog: Catalog,
    earlier: dt.datetime,
    port: int,
    out: TextIO,
) -> int:
    out.write("The lake against the source, table by table:\n")
    checks = [check_table(conn, catalog, t, f"shop.{t}") for t in TABLES]
    for check in checks:
        out.write(check.line() + "\n")
    dead = _dead_letters(catalog)
    out.write(f"  {DEAD_LETTERS:<24} {dead or 'none'}\n")
    out.write("\n" + "\n".join(time_travel(catalog, "shop.orders", earlier)) + "\n\n")
    out.write("\n".join(explore_lines(config.home, port, config.home / "warehouse")) + "\n")
    different = [c.table for c in checks if not c.ok] + ([DEAD_LETTERS] if dead else [])
    if different:
        print(f"error: the lake differs from the source in {', '.join(different)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _dead_letters(catalog: Catalog) -> int:
    """Messages the ingest job could not decode (none expected: every event is a change)."""
    if not catalog.table_exists(DEAD_LETTERS):
        return 0
    rows: int = catalog.load_table(DEAD_LETTERS).scan().to_arrow().num_rows
    return rows


def _fresh_home(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    for name in OWNED:
        path = home / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _port(home: Path) -> int:
    """The port of the last run if it is free (so printed DSNs keep working), else a new one."""
    with contextlib.suppress(OSError, ValueError):
        saved = int((home / "port").read_text())
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", saved))
        return saved
    return free_port()


def _create_databases(server: LocalPostgres) -> str:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for name in ("lakestream", "shop"):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.dsn("lakestream")


def explore(home: Path, out: TextIO | None = None) -> int:
    """Start the demo's PostgreSQL again on its kept data and wait for Ctrl-C."""
    out = out or sys.stdout
    if not (home / "pg" / "pgdata" / "PG_VERSION").exists():
        print(f"error: no demo data under {home}: run `lakestream demo` first", file=sys.stderr)
        return EXIT_SETUP
    server = LocalPostgres.start(data_dir=home / "pg", port=_port(home))
    try:
        (home / "port").write_text(str(server.port))
        out.write("\n".join(explore_lines(home, server.port, home / "warehouse")[3:]) + "\n")
        out.write(f"\nPostgreSQL runs on port {server.port} until you press Ctrl-C.\n")
        out.flush()
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    finally:
        server.stop(remove=False)
    return EXIT_OK
