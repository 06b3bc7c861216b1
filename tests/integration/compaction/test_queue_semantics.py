"""The compaction queue on a real PostgreSQL: one live task per partition, SKIP LOCKED claims,
leases that lapse and leases that are kept, pruning."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest

from catalog import Catalog, Table
from compaction.queue import Claim, QueueSettings, TaskQueue
from compaction.task import CompactionKind, CompactionOutcome, CompactionTask, OutcomeStatus
from tests.fixtures.commits import data_file

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def table(catalog: Catalog) -> Table:
    return catalog.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=8)


def task(table: Table, bucket: int, base: int = 1) -> CompactionTask:
    return CompactionTask(
        table=table.name,
        table_id=table.meta.table_id,
        partition_desc=f"bucket={bucket:04d}",
        kind=CompactionKind.MERGE_BUCKET,
        base_version=base,
        inputs=(data_file(f"b{bucket}-1"), data_file(f"b{bucket}-2")),
        drop_deletes=True,
    )


def outcome(claim: Claim, status: OutcomeStatus = OutcomeStatus.COMMITTED) -> CompactionOutcome:
    return CompactionOutcome(
        task=claim.task,
        status=status,
        version=7 if status is OutcomeStatus.COMMITTED else None,
        outputs=(data_file("out"),),
        rows_in=20,
        rows_out=15,
        bytes_in=2000,
        bytes_out=1500,
        duration_s=0.25,
    )


def queue(catalog: Catalog, **settings: object) -> TaskQueue:
    return TaskQueue(catalog.store, QueueSettings(**settings))  # type: ignore[arg-type]


def test_one_live_task_per_partition(catalog: Catalog, table: Table):
    q = queue(catalog)
    first = q.enqueue([task(table, 0), task(table, 1)], planned_by="a")
    assert [t.partition_desc for t in first] == ["bucket=0000", "bucket=0001"]
    # same partitions again, and twice within one call: nothing new
    assert q.enqueue([task(table, 0), task(table, 0, base=2), task(table, 1)], "b") == []
    assert len(q.live()) == 2

    claim = q.claim("w1")
    assert claim is not None and claim.task.partition_desc == "bucket=0000"
    assert claim.task.inputs == task(table, 0).inputs and claim.task.drop_deletes
    assert q.enqueue([task(table, 0, base=2)], "b") == []  # running is live too
    assert q.finish(claim, outcome(claim))  # landed as version 7
    # done: the same work planned from the same (stale) version is not queued again, nor work
    # planned before the compaction landed (it would only be discarded) ...
    assert q.enqueue([task(table, 0, base=1)], "slow-coordinator") == []
    assert q.enqueue([task(table, 0, base=6)], "slow-coordinator") == []
    # ... but work planned from the version it created, or a newer one, is
    assert len(q.enqueue([task(table, 0, base=7)], "b")) == 1


def test_two_coordinators_racing_never_queue_a_partition_twice(catalog: Catalog, table: Table):
    queues = [queue(catalog) for _ in range(2)]
    start = threading.Barrier(2)
    queued: list[list[CompactionTask]] = [[], []]

    def plan(i: int) -> None:
        start.wait()
        for base in range(1, 20):
            queued[i] += queues[i].enqueue([task(table, b, base) for b in range(8)], f"c{i}")

    threads = [threading.Thread(target=plan, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    live = queues[0].live()
    assert len(live) == 8
    assert Counter(t.partition_desc for t in live) == {f"bucket={b:04d}": 1 for b in range(8)}
    assert len(queued[0]) + len(queued[1]) == 8


def test_concurrent_workers_claim_each_task_exactly_once(catalog: Catalog, table: Table):
    tables = [table] + [
        catalog.create_table(f"shop.t{i}", SCHEMA, primary_key=["id"], hash_buckets=8)
        for i in range(4)
    ]
    q = queue(catalog)
    q.enqueue([task(t, b) for t in tables for b in range(8)], "c")
    claims: list[Claim] = []
    lock = threading.Lock()

    def work(worker: str) -> None:
        own = TaskQueue(catalog.store, q.settings)
        while (claim := own.claim(worker)) is not None:
            with lock:
                claims.append(claim)
            assert own.finish(claim, outcome(claim))

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [c.task_id for c in claims]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert all(c.attempt == 1 and not c.took_over for c in claims)
    assert q.live() == []
    assert len(q.finished_since(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))) == 40


def test_a_lapsed_lease_is_claimed_again_and_counted(catalog: Catalog, table: Table):
    q = queue(catalog, lease=dt.timedelta(milliseconds=300))
    q.enqueue([task(table, 3)], "c")
    dead = q.claim("dead-worker")
    assert dead is not None
    assert q.claim("w2") is None  # leased
    time.sleep(0.6)
    again = q.claim("w2")
    assert again is not None and again.task_id == dead.task_id
    assert again.took_over and again.previous_worker == "dead-worker" and again.attempt == 2
    # the first worker's late heartbeat and result are refused: the task is no longer its own
    assert not q.renew(dead)
    assert not q.finish(dead, outcome(dead))
    assert q.finish(again, outcome(again))
    [result] = q.finished_since(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert (result.outcome, result.attempts, result.lease_expiries) == ("committed", 2, 1)
    assert (result.rows_in, result.rows_out, result.bytes_out) == (20, 15, 1500)


def test_a_renewed_lease_keeps_the_task(catalog: Catalog, table: Table):
    q = queue(catalog, lease=dt.timedelta(milliseconds=400))
    q.enqueue([task(table, 1)], "c")
    claim = q.claim("w1")
    assert claim is not None
    for _ in range(8):  # 1.6 s in all, four leases long
        time.sleep(0.2)
        assert q.renew(claim)
        assert q.claim("w2") is None
    assert q.finish(claim, outcome(claim))


def test_a_task_whose_leases_keep_lapsing_is_given_up(catalog: Catalog, table: Table):
    q = queue(catalog, lease=dt.timedelta(milliseconds=100), max_attempts=2)
    q.enqueue([task(table, 5)], "c")
    assert q.claim("w1") is not None
    time.sleep(0.3)
    assert q.claim("w2") is not None
    time.sleep(0.3)
    assert q.claim("w3") is None  # attempts used up
    assert [r["partition_desc"] for r in q.give_up_lapsed()] == ["bucket=0005"]
    [result] = q.finished_since(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert result.outcome == "failed" and "lease lapsed" in (result.error or "")
    # the partition may be planned again at once
    assert len(q.enqueue([task(table, 5)], "c")) == 1


def test_failed_tasks_are_replanned_a_bounded_number_of_times(catalog: Catalog, table: Table):
    q = queue(catalog, max_failures=2)
    for _ in range(2):
        [queued] = q.enqueue([task(table, 2)], "c")
        claim = q.claim("w")
        assert claim is not None and claim.task_id == queued.task_id
        assert q.fail(claim, "OSError: disk full", 0.1)
    assert q.enqueue([task(table, 2)], "c") == []  # waits for a newer version
    assert len(q.enqueue([task(table, 2, base=2)], "c")) == 1


def test_release_makes_a_task_claimable_at_once(catalog: Catalog, table: Table):
    q = queue(catalog)
    q.enqueue([task(table, 4)], "c")
    claim = q.claim("stopping-worker")
    assert claim is not None and q.release(claim)
    again = q.claim("w2")
    assert again is not None and again.task_id == claim.task_id and not again.took_over


def test_prune_keeps_the_newest_finished_tasks_per_partition(catalog: Catalog, table: Table):
    q = queue(catalog, keep_per_partition=2)
    for base in range(1, 6):
        q.enqueue([task(table, 0, base), task(table, 1, base)], "c")
        while (claim := q.claim("w")) is not None:
            assert q.finish(claim, outcome(claim, OutcomeStatus.DISCARDED))
    assert q.prune() == 6
    kept = q.recent_results(per_table=10)
    assert Counter(r.partition_desc for r in kept) == {"bucket=0000": 2, "bucket=0001": 2}
    assert q.prune() == 0
