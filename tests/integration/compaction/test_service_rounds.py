"""Coordinator rounds and workers against a real catalog: tables get compacted through the queue,
unchanged tables cost no planning, waiting partitions are forced after their rounds, work that
did not land is replanned, and a stopping worker finishes or releases its task."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from catalog import Catalog
from compaction.coordinator import Coordinator
from compaction.queue import TaskQueue
from compaction.rewrite import compact
from compaction.task import CompactionOutcome, CompactionTask, OutcomeStatus
from compaction.worker import RELEASED, Worker, WorkerSettings
from tests.fixtures.compaction import rows_at

pytestmark = pytest.mark.integration

EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string())])
ORDERS = pa.schema([("id", pa.int64()), ("total", pa.float64())])


def events_batch(start: int, n: int, region: str) -> pa.Table:
    return pa.table({"id": range(start, start + n), "region": [region] * n}, schema=EVENTS)


def orders_batch(ids: range, total: float) -> pa.Table:
    return pa.table({"id": list(ids), "total": [total] * len(ids)}, schema=ORDERS)


def drain(catalog: Catalog, queue: TaskQueue) -> dict[str, int]:
    stats = Worker(catalog, queue, settings=WorkerSettings(drain=True)).run()
    return dict(stats.outcomes)


@pytest.fixture
def queue(catalog: Catalog) -> TaskQueue:
    return TaskQueue(catalog.store)


def test_served_tables_are_compacted_through_the_queue(catalog: Catalog, queue: TaskQueue):
    events = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    ignored = catalog.create_table("tmp.scratch", EVENTS)
    for i in range(6):
        events.append(events_batch(i * 10, 10, "eu"))
        ignored.append(events_batch(i * 10, 10, "eu"))
    for i in range(5):
        orders.upsert(orders_batch(range(i * 5, i * 5 + 20), float(i)))
    orders.delete(pa.table({"id": [0, 1]}))
    expected = {t.name: rows_at(t) for t in (events, orders)}

    coordinator = Coordinator(catalog, queue, patterns=["logs.*", "shop.orders"])
    report = coordinator.round()
    assert (report.tables, report.planned_tables, report.tasks_queued) == (2, 2, 3)
    assert {s.head.name: s.backlog.max_runs_per_bucket for s in coordinator.tables.values()} == {
        "logs.events": 0,
        "shop.orders": 6,
    }
    assert drain(catalog, queue) == {"committed": 3}

    assert len(events.plan().files) == 1 and len(orders.plan().files) == 2
    assert {t.name: rows_at(t) for t in (events, orders)} == expected
    assert len(ignored.plan().files) == 6  # not served
    after = coordinator.round()
    assert {r.outcome for r in after.finished} == {"committed"}
    assert sum(r.rows_out for r in after.finished) == len(expected["logs.events"]) + len(
        expected["shop.orders"]
    )
    assert after.tasks_queued == 0


def test_a_table_without_commits_costs_no_planning(catalog: Catalog, queue: TaskQueue):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    orders.upsert(orders_batch(range(10), 1.0))
    coordinator = Coordinator(catalog, queue)
    assert coordinator.round().planned_tables == 1
    for _ in range(3):
        assert coordinator.round().planned_tables == 0
    orders.upsert(orders_batch(range(5), 2.0))
    assert coordinator.round().planned_tables == 1


def test_a_waiting_partition_is_forced_after_its_rounds(catalog: Catalog, queue: TaskQueue):
    events = catalog.create_table(
        "logs.events",
        EVENTS,
        properties={"compaction.min-file-num": "5", "compaction.force-after-rounds": "3"},
    )
    for i in range(3):  # three small files: fewer than min-file-num
        events.append(events_batch(i * 10, 10, "eu"))
    coordinator = Coordinator(catalog, queue)
    queued = [coordinator.round().tasks_queued for _ in range(4)]
    # rounds 1 and 2 wait; the third waited round forces it, without the table changing
    assert queued == [0, 0, 1, 0]
    assert drain(catalog, queue) == {"committed": 1}
    assert len(events.plan().files) == 1


def test_work_that_did_not_land_is_planned_again(catalog: Catalog, queue: TaskQueue):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    for i in range(5):
        orders.upsert(orders_batch(range(i, i + 3), float(i)))
    coordinator = Coordinator(catalog, queue)
    assert coordinator.round().tasks_queued == 1

    def broken(cat: Catalog, task: CompactionTask) -> CompactionOutcome:
        raise OSError("disk full")

    stats = Worker(catalog, queue, settings=WorkerSettings(drain=True), compact=broken).run()
    assert stats.failed == 1
    report = coordinator.round()  # the table did not change, but its work did not land
    assert [r.outcome for r in report.finished] == ["failed"]
    assert "disk full" in (report.finished[0].error or "")
    assert (report.planned_tables, report.tasks_queued) == (1, 1)
    assert drain(catalog, queue) == {"committed": 1}


def test_a_stopping_worker_finishes_within_grace_or_releases(catalog: Catalog, queue: TaskQueue):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    for i in range(5):
        orders.upsert(orders_batch(range(i * 4, i * 4 + 8), float(i)))
    Coordinator(catalog, queue).round()
    started = threading.Event()
    gates = [threading.Event(), threading.Event()]  # one per attempt

    def slow(cat: Catalog, task: CompactionTask) -> CompactionOutcome:
        gate = gates.pop(0)
        started.set()
        gate.wait(30)
        if not gates:  # the second attempt
            return compact(cat, task)
        raise RuntimeError("abandoned attempt")  # (in a real worker the process has exited)

    def stopped_worker(grace: float) -> tuple[threading.Thread, list[str | None]]:
        started.clear()
        worker = Worker(catalog, queue, settings=WorkerSettings(grace=grace), compact=slow)
        result: list[str | None] = []
        thread = threading.Thread(target=lambda: result.append(worker.run_one()))
        thread.start()
        assert started.wait(30)
        worker.stop.set()  # what SIGTERM does
        return thread, result

    first, second = gates
    # grace runs out: the task goes back to the queue at once, claimable without a lease lapse
    thread, result = stopped_worker(grace=0.2)
    thread.join(30)
    assert result == [RELEASED]
    assert {t.state for t in queue.live()} == {"queued"}
    # within grace: the running task is finished and recorded
    thread, result = stopped_worker(grace=30)
    second.set()
    thread.join(30)
    first.set()
    assert result == [OutcomeStatus.COMMITTED.value]


def test_a_task_of_a_dropped_table_goes_with_it(catalog: Catalog, queue: TaskQueue):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    for i in range(5):
        orders.upsert(orders_batch(range(i, i + 3), float(i)))
    coordinator = Coordinator(catalog, queue)
    coordinator.round()
    [live] = queue.live()
    catalog.drop_table("shop.orders")
    # the worker runs it; the rewrite finds the table gone and asks for a replan, which the
    # coordinator no longer plans: the table is not served any more
    outcomes = drain(catalog, queue)
    assert outcomes == {"replan": 1}
    report = coordinator.round()
    assert (report.tables, report.tasks_queued) == (0, 0)
    assert coordinator.tables == {}
    assert live.table == "shop.orders"


def test_the_service_stays_healthy_while_it_waits_out_an_outage_within_its_budget(
    catalog: Catalog,
):
    from catalog import CatalogUnavailableError, OutageGuard, OutagePolicy
    from compaction.metrics import ServiceMetrics
    from compaction.service import CoordinatorLoop, LoopSettings

    now = [0.0]
    guard = OutageGuard(
        "catalog", OutagePolicy(budget=300), clock=lambda: now[0], sleep=lambda s: None
    )
    coordinator = Coordinator(catalog, TaskQueue(catalog.store), clock=lambda: now[0], guard=guard)
    loop = CoordinatorLoop(
        coordinator, ServiceMetrics(), settings=LoopSettings(poll_seconds=1), clock=lambda: now[0]
    )
    loop.run_round()
    assert loop.health().ok
    seen = []

    def catalog_down_for_200_s() -> None:
        if not seen:
            seen.append(loop.health())
            now[0] = 200.0  # well past /healthz's staleness (63 s here), within the budget
            raise CatalogUnavailableError("connection refused")
        seen.append(loop.health())

    guard.call("round", catalog_down_for_200_s)
    during = seen[1]
    assert during.ok and during.detail["catalog_outage_s"] == 200.0
    assert not loop.health().ok  # the outage is over and still no round: stale again
