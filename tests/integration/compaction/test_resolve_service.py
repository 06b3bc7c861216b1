"""The resolver run by the compactor's queue: a worker killed between writing its vector file
and its commit leaves nothing visible and the task is re-run after its lease; coordinator
rounds and a worker beside a writer keep the resolved prefix growing, reads equal to a model."""

from __future__ import annotations

import datetime as dt
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
from tests.fixtures.compaction import files_on_disk, leftover_paths
from tests.fixtures.resolved import assert_resolved_invariants
from tests.integration.compaction.support import DOOMED_WORKER, reads

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
ORDERS = pa.schema([("id", pa.int64()), ("total", pa.float64())])
#: The fold stays away: the resolver does the work.
RESOLVE_ONLY = {"compaction.max-sorted-runs": "100", "compaction.max-read-amplification": "100"}


def batch(ids, total: float) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "total": [total] * len(ids)}, schema=ORDERS)


def test_a_resolver_killed_before_its_commit_leaves_nothing_and_is_run_again(
    catalog: Catalog, catalog_dsn: str, warehouse: Path
):
    orders = catalog.create_table(
        "shop.orders",
        ORDERS,
        primary_key=["id"],
        hash_buckets=1,
        properties={**RESOLVE_ONLY, "vectors.inline-max-bytes": "0"},
    )
    orders.upsert(batch(range(10), 1.0))
    orders.upsert(batch(range(5, 12), 2.0))
    orders.delete(pa.table({"id": [3]}))
    expected = reads(orders)
    version = orders.current_version()
    queue = TaskQueue(catalog.store, QueueSettings(lease=dt.timedelta(seconds=1)))
    assert Coordinator(catalog, queue).round().tasks_queued == 1
    before = files_on_disk(orders)

    doomed = subprocess.run(
        [sys.executable, "-c", DOOMED_WORKER, catalog_dsn, str(warehouse)],
        cwd=ROOT, capture_output=True, check=False, timeout=120,
    )  # fmt: skip

    assert doomed.returncode == -signal.SIGKILL, doomed.stderr.decode()[-3000:]
    [stuck] = queue.live()
    assert (stuck.kind, stuck.state, stuck.worker_id) == ("resolve", "running", "doomed")
    assert orders.refresh().current_version() == version  # nothing visible
    assert not any(f.resolved or f.vector for f in orders.plan().files)
    [vector_file] = files_on_disk(orders) - before
    live = {p for f in orders.plan().files for p in f.paths}
    assert vector_file.endswith(".puffin")
    # the dead commit's prepared row names the bucket's whole state: its vector file and the
    # live files it named again (kept by vacuum: retained rows name them too)
    assert leftover_paths(catalog) == {vector_file, *live}

    time.sleep(1.5)  # the lease (1 s, on the database clock) lapses
    stats = Worker(catalog, queue, settings=WorkerSettings(drain=True)).run()

    assert dict(stats.outcomes) == {"committed": 1}
    files = orders.refresh().plan().files
    assert all(f.resolved for f in files)
    assert vector_file not in {p for f in files for p in f.paths}  # the re-run wrote its own
    assert_resolved_invariants(orders)
    assert reads(orders) == expected


def pending(catalog: Catalog, name: str) -> int:
    table = catalog.load_table(name)
    return sum(1 for f in table.plan().files if f.resolved is not True)


def test_the_compactor_resolves_buckets_beside_a_writer(
    catalog: Catalog, catalog_dsn: str, warehouse: Path
):
    orders = catalog.create_table(
        "shop.orders", ORDERS, primary_key=["id"], hash_buckets=2, properties=RESOLVE_ONLY
    )
    queue = TaskQueue(catalog.store)
    coordinator = Coordinator(catalog, queue, patterns=["shop.orders"])
    worker_catalog = Catalog.connect(catalog_dsn, warehouse=warehouse)
    stop = threading.Event()
    worker = Worker(
        worker_catalog, TaskQueue(worker_catalog.store), settings=WorkerSettings(idle_sleep=0.05),
        stop=stop,
    )  # fmt: skip
    thread = threading.Thread(target=worker.run, name="resolver-worker")
    thread.start()
    model: dict[int, float] = {}
    models: dict[int, list] = {}
    try:
        for i in range(10):  # ingest-like merge commits while the service runs
            landed = orders.upsert(batch(range(i * 3, i * 3 + 8), float(i)))
            model.update({k: float(i) for k in range(i * 3, i * 3 + 8)})
            models[landed.version_of("shop.orders")] = sorted(model.items())
            if i % 3 == 2:
                landed = orders.delete(pa.table({"id": [i * 3, i * 3 + 1]}))
                model.pop(i * 3), model.pop(i * 3 + 1)
                models[landed.version_of("shop.orders")] = sorted(model.items())
            coordinator.round()
        deadline = time.monotonic() + 60
        while pending(catalog, "shop.orders") and time.monotonic() < deadline:
            coordinator.round()
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(timeout=60)
        worker_catalog.close()
    assert pending(catalog, "shop.orders") == 0, "every bucket ends resolved"
    results = queue.recent_results(per_table=1000)
    kinds = [r.kind for r in results]  # tier folds of the small resolved files too (D8)
    assert set(kinds) <= {"resolve", "fold-resolved"} and kinds.count("resolve") >= 2
    assert {r.outcome for r in queue.recent_results()} <= {"committed", "discarded", "replan"}
    orders.refresh()
    for version in range(orders.current_version() + 1):
        assert_resolved_invariants(orders, version)
        found = [(r[0], r[1]) for r in reads(orders, version)]
        landed = max((v for v in models if v <= version), default=None)
        expected = models.get(landed, []) if landed is not None else []
        assert sorted(found) == expected, f"version {version}"
