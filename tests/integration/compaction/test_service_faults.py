"""Faults and concurrency of the service: a worker killed mid-task, and two coordinators with
three worker processes beside a writer that never stops."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog
from compaction.coordinator import Coordinator
from compaction.queue import QueueSettings, TaskQueue
from compaction.worker import Worker, WorkerSettings
from tests.fixtures.compaction import leftover_paths, rows_at
from tests.fixtures.postgres import catalog_connection
from tests.integration.compaction.support import DOOMED_WORKER

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
ORDERS = pa.schema([("id", pa.int64()), ("total", pa.float64())])
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string())])


def test_a_worker_killed_mid_task_is_replaced_and_leaves_only_leftovers(
    catalog: Catalog, catalog_dsn: str, warehouse: Path
):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    for i in range(5):
        orders.upsert(pa.table({"id": range(i * 2, i * 2 + 6), "total": [float(i)] * 6}))
    orders.delete(pa.table({"id": [3]}))
    expected = rows_at(orders)
    queue = TaskQueue(catalog.store, QueueSettings(lease=dt.timedelta(seconds=1)))
    assert Coordinator(catalog, queue).round().tasks_queued == 1

    doomed = subprocess.run(
        [sys.executable, "-c", DOOMED_WORKER, catalog_dsn, str(warehouse)],
        cwd=ROOT, capture_output=True, check=False, timeout=120,
    )  # fmt: skip
    assert doomed.returncode == -signal.SIGKILL, doomed.stderr.decode()[-3000:]
    [stuck] = queue.live()
    assert (stuck.state, stuck.worker_id) == ("running", "doomed")
    assert orders.current_version() == 6  # nothing landed
    dead_files = leftover_paths(catalog)
    assert len(dead_files) == 1  # the dead worker's output, listed for maintenance

    time.sleep(1.5)  # the lease (1 s, on the database clock) lapses
    stats = Worker(catalog, queue, settings=WorkerSettings(drain=True)).run()
    assert dict(stats.outcomes) == {"committed": 1}

    assert rows_at(orders) == expected  # no duplicate, no lost row, the delete still applied
    [live_file] = orders.plan().files
    assert live_file.path not in dead_files
    assert leftover_paths(catalog) == dead_files
    [result] = queue.recent_results()
    assert (result.outcome, result.attempts, result.lease_expiries) == ("committed", 2, 1)


def worker_process(dsn: str, warehouse: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "LAKESTREAM_CATALOG_DSN": dsn,
        "LAKESTREAM_WAREHOUSE": str(warehouse),
        "LAKESTREAM_LOG_LEVEL": "WARNING",
        "LAKESTREAM_COMPACTOR_IDLE_SLEEP_SECONDS": "0.1",
        "LAKESTREAM_COMPACTOR_LEASE_SECONDS": "20",
    }
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "compactor", "worker"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def test_two_coordinators_and_three_workers_beside_a_writer(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, tmp_path: Path
):
    props = {"compaction.max-sorted-runs": "3", "compaction.min-file-num": "3"}
    orders = catalog.create_table(
        "shop.orders", ORDERS, primary_key=["id"], hash_buckets=4, properties=props
    )
    events = catalog.create_table("logs.events", EVENTS, partition_by=["region"], properties=props)
    model: dict[int, float] = {}
    appended: list[tuple[int, str]] = []
    writing = threading.Event()
    writing.set()

    def writer() -> None:  # a streaming writer: any failure of its commits fails the test
        rng = random.Random(7)
        for batch in range(40):
            ids = sorted(rng.sample(range(200), 25))
            orders.upsert(pa.table({"id": ids, "total": [float(batch)] * len(ids)}))
            model.update(dict.fromkeys(ids, float(batch)))
            rows = [(batch * 10 + j, ("eu", "us")[j % 2]) for j in range(10)]
            events.append(pa.table({"id": [r[0] for r in rows], "region": [r[1] for r in rows]}))
            appended.extend(rows)
        writing.clear()

    def coordinate(name: str) -> None:
        with Catalog.connect(catalog_dsn) as own:
            coordinator = Coordinator(own, TaskQueue(own.store), coordinator_id=name)
            while writing.is_set():
                coordinator.round()
                time.sleep(0.05)

    workers = [worker_process(catalog_dsn, warehouse, tmp_path / f"w{i}.log") for i in range(3)]
    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=coordinate, args=(f"coordinator-{c}",)) for c in "ab"
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not writing.is_set()
        # settle: plan what the last commits left until nothing is queued or running
        queue = TaskQueue(catalog.store)
        settle = Coordinator(catalog, queue)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            report = settle.round()
            if report.tasks_queued == 0 and queue.depth() == {"queued": 0, "running": 0}:
                break
            time.sleep(0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=120) for w in workers]
    logs = "".join((tmp_path / f"w{i}.log").read_text() for i in range(3))
    assert codes == [0, 0, 0], logs[-3000:]

    with catalog_connection(catalog_dsn) as conn:
        tasks = conn.execute(
            "SELECT table_name, partition_desc, base_version, worker_id, attempts, outcome,"
            " started_at, finished_at, planned_by FROM compaction_task"
        ).fetchall()
    assert tasks and all(t[5] is not None for t in tasks)  # everything finished
    # no task planned twice: one task per (table, partition, base version)
    planned = [(t[0], t[1], t[2]) for t in tasks]
    assert len(planned) == len(set(planned))
    # no task run twice, and no partition compacted by two workers at once
    assert {t[4] for t in tasks} == {1}
    assert "failed" not in {t[5] for t in tasks}
    by_partition: dict[tuple[str, str], list[tuple[dt.datetime, dt.datetime]]] = {}
    for t in tasks:
        by_partition.setdefault((t[0], t[1]), []).append((t[6], t[7]))
    for windows in by_partition.values():
        windows.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(windows))
    assert len({t[3] for t in tasks}) >= 2  # the work was shared

    # the lake equals what was written, and the runs per bucket stayed bounded
    assert sorted(rows_at(orders)) == sorted(model.items())
    assert sorted(rows_at(events)) == sorted(appended)
    assert max(len(p.files) for p in orders.plan().partitions) < 3
