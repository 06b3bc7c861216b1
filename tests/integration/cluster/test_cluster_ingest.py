"""The ingest job on a real Spark standalone cluster (a master and two worker JVMs), end to end
from real Debezium: PostgreSQL -> Debezium (pgoutput) -> broker -> ingest on the cluster -> lake.

The job is launched the two ways an operator launches it - ``spark.master: spark://...`` in its
file, and ``spark-submit --master spark://... --py-files`` with ``spark.master: null`` - while
the executors cannot see the driver's disk (:mod:`tests.fixtures.spark_cluster`); an empty
driver disk in the executors' view proves that they never needed the driver's (its checkpoint
included). The spark-submit run and the kill test keep the warehouse on the S3 server (the
deployment the issue asks for); the ``spark.master`` run keeps it in a local directory that the
driver process cannot see, so a lake equal to the source proves that the executors wrote every
data file.

A third test kills one worker, with its executor and Python workers, mid-stream: Spark runs the
lost work on the other worker and the lake still equals the source, every record once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from catalog import Catalog
from catalog.files.storage import StorageOptions
from ingest.kafka.connect import LocalConnect
from jobs.localpg import LocalPostgres
from tests.fixtures.broker import KafkaTestHelper
from tests.fixtures.debezium import (
    CapturedEvent,
    PostgresSource,
    create_source_database,
    drop_source_database,
)
from tests.fixtures.spark_cluster import SparkCluster, SparkWorker
from tests.fixtures.waits import wait_for
from tests.integration.cluster.support import (
    LAKE_TABLE,
    assert_ran,
    capture,
    cli_command,
    dead_letters,
    driver_env,
    finish_driver,
    job_file,
    lake_rows,
    project_zip,
    run_driver,
    source_rows,
    start_driver,
    submit_command,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]
APP_NAME = "lakestream-orders-cdc"


@dataclass(frozen=True)
class Source:
    """A source table captured once for the module: its rows, and Debezium's events of them."""

    db: PostgresSource
    events: list[CapturedEvent]
    rows: dict[object, dict[str, object]]


@pytest.fixture(scope="module")
def source(pg_server: LocalPostgres, connect_worker: LocalConnect) -> Iterator[Source]:
    """2,000 rows snapshotted, then updated, deleted and inserted: ~2,800 events, enough for
    a stream of many small batches. Each test sends them to a topic of its own."""
    name = create_source_database(pg_server)
    db = PostgresSource(pg_server.port, name)
    events = capture(connect_worker, db, f"ls{uuid.uuid4().hex[:8]}", rows=2000)
    yield Source(db, events, source_rows(db))
    drop_source_database(pg_server, name)


@dataclass(frozen=True)
class Setting:
    """What every cluster test uses: the cluster, the catalog, the shared warehouse, a broker."""

    cluster: SparkCluster
    dsn: str
    warehouse: str
    storage: StorageOptions | None
    lake: Catalog
    """The test's own view of the catalog and the warehouse, as a reader on any host has."""
    kafka: KafkaTestHelper

    def job(self, topic: str, master: str | None, **extra: Any) -> Path:
        """A job file in a new directory on the driver's disk (its checkpoint goes beside)."""
        job_dir = self.cluster.driver_dir(f"job-{uuid.uuid4().hex[:8]}")
        return job_file(
            job_dir / "ingest.yaml",
            dsn=self.dsn,
            warehouse=self.warehouse,
            storage=self.storage,
            topic=topic,
            master=master,
            bootstrap_servers=self.kafka.bootstrap_servers,
            **extra,
        )

    def driver(self, argv: list[str]) -> list[str]:
        return self.cluster.driver_command(self.warehouse, argv)


@pytest.fixture
def store() -> str:
    """Where the warehouse is: ``s3`` (the session's S3 server), or ``local`` - a directory the
    driver cannot see, so a lake equal to the source proves the executors wrote every file."""
    return "s3"


@pytest.fixture
def setting(
    request: pytest.FixtureRequest,
    store: str,
    spark_cluster: SparkCluster,
    catalog_dsn: str,
    kafka: KafkaTestHelper,
) -> Iterator[Setting]:
    if store == "s3":
        warehouse = request.getfixturevalue("cluster_warehouse")
        storage = request.getfixturevalue("cluster_storage")
    else:
        shared = request.getfixturevalue("tmp_path") / "shared-warehouse"
        shared.mkdir()
        warehouse, storage = str(shared), None
    lake = Catalog.connect(catalog_dsn, warehouse=warehouse, storage=storage)
    yield Setting(spark_cluster, catalog_dsn, warehouse, storage, lake, kafka)
    lake.close()


def produced(kafka: KafkaTestHelper, source: Source) -> str:
    """A new topic holding the source's events, as Debezium produced them."""
    topic = kafka.topic(partitions=2)
    kafka.produce(topic, [(e.key, e.value) for e in source.events])
    return topic


@pytest.mark.parametrize(
    ("launch", "store"), [("spark.master setting", "local"), ("spark-submit", "s3")]
)
@pytest.mark.slow
def test_the_job_runs_on_the_cluster_and_the_lake_equals_the_source(
    launch: str, setting: Setting, source: Source
) -> None:
    topic = produced(setting.kafka, source)
    cluster = setting.cluster
    if launch == "spark.master setting":
        config = setting.job(topic, master=cluster.master_url)
        argv, env = cli_command(config), driver_env()
    else:  # nothing on the PYTHONPATH: the project reaches driver and executors as a zip
        config = setting.job(topic, master=None)
        argv = submit_command(cluster, config, project_zip(config.parent / "lakestream.zip"))
        env = {k: v for k, v in driver_env().items() if k != "PYTHONPATH"}

    run = run_driver(setting.driver(argv), env, config.parent / "driver.log")

    assert_ran(run)
    assert sum(e["records"] for e in run.named("batch_committed")) == len(source.events)
    assert lake_rows(setting.lake) == source.rows
    assert dead_letters(setting.lake) == []
    executor_logs = assert_the_work_was_the_executors(cluster, config.parent, setting.lake)
    if launch == "spark-submit":  # the zip came from the driver's file server, no shared disk
        fetched = re.compile(r"Executor: Fetching spark://127\.0\.0\.1:\d+/files/lakestream\.zip ")
        assert any(fetched.search(log.read_text("utf-8", "replace")) for log in executor_logs)


@pytest.mark.slow
def test_a_worker_killed_mid_stream_loses_nothing_and_doubles_nothing(
    setting: Setting, source: Source
) -> None:
    topic = produced(setting.kafka, source)
    cluster, lake = setting.cluster, setting.lake
    # ~20 batches: a stream, not one batch
    config = setting.job(topic, cluster.master_url, source={"max_offsets_per_trigger": 200})
    driver = start_driver(
        setting.driver(cli_command(config)), driver_env(), config.parent / "driver.log"
    )
    try:
        wait_for(lambda: _batches_committed(lake) >= 2, "two batches committed", timeout=180)
        busy = wait_for(lambda: _busy_worker(cluster), "a task running on a worker", every=0.05)
        busy.kill()
        killed_at = _batches_committed(lake)
        in_flight = busy.running_tasks()  # its log as the worker died
        run = finish_driver(driver, config.parent / "driver.log")
    finally:
        _replace_dead_workers(cluster)

    assert_ran(run)
    committed = run.named("batch_committed")
    assert killed_at < len(committed), "the job ended before the worker was killed"
    assert any("Lost executor" in line for line in run.other), run.describe()
    assert in_flight, "the task on the killed worker finished before the kill"
    rerun = {(t.stage, t.index) for w in cluster.live_workers() for t in w.tasks("Finished")}
    assert {(t.stage, t.index) for t in in_flight} <= rerun  # on the other worker
    assert sum(e["records"] for e in committed) == len(source.events)  # each record once
    progress = lake.writer_progress("orders-cdc")
    assert progress is not None
    assert sum(progress.source_offsets[topic].values()) == len(source.events)
    assert lake_rows(lake) == source.rows
    assert dead_letters(lake) == []


def assert_the_work_was_the_executors(
    cluster: SparkCluster, job_dir: Path, lake: Catalog
) -> list[Path]:
    """The data files are where only executors could write them; the executors ran under the
    master; the driver's checkpoint is on the driver's disk and nothing of it reached theirs.
    Returns the logs of the application's executors."""
    table = lake.load_table(LAKE_TABLE)
    listed = {f.path for p in table.scan().partitions() for f in p.files}
    assert listed
    assert listed <= {f.path for f in table.meta.files.list_files()}  # in the warehouse
    assert (job_dir / "checkpoint" / "offsets").is_dir()
    assert cluster.worker_view(cluster.driver_disk) == []
    app = _latest_application(cluster)
    logs = [log for log in cluster.executor_logs() if log.parts[-3] == app]
    assert logs, cluster.state()
    return logs


def _latest_application(cluster: SparkCluster) -> str:
    """The id of the job's newest application, as the master lists them."""
    state = cluster.state()
    apps: list[dict[str, Any]] = [
        app
        for key in ("activeapps", "completedapps")
        for app in state.get(key, [])  # type: ignore[attr-defined]
        if app["name"] == APP_NAME
    ]
    assert apps, state
    return str(max(apps, key=lambda app: int(app["starttime"]))["id"])


def _batches_committed(lake: Catalog) -> int:
    progress = lake.writer_progress("orders-cdc")
    return -1 if progress is None else progress.batch_id + 1


def _busy_worker(cluster: SparkCluster) -> SparkWorker | None:
    return next((w for w in cluster.live_workers() if w.running_tasks()), None)


def _replace_dead_workers(cluster: SparkCluster) -> None:
    """Keep the session's cluster at full strength for the tests that follow."""
    while len(cluster.live_workers()) < 2:
        cluster.start_worker()
    cluster.wait_for_workers(2)
