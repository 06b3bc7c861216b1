"""Many writers at once: nothing lost, nothing duplicated, versions contiguous, reads consistent."""

from __future__ import annotations

import multiprocessing
import threading

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitConflict,
    CommitOp,
    CommitRequest,
    IdempotencyKey,
    RetryPolicy,
    StoreSettings,
    TableCommit,
)
from tests.fixtures.commits import adds, file_names, rewrite

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _writer(dsn: str, writer: int, commits: int) -> int:
    cat = Catalog.connect(
        dsn, settings=StoreSettings(pool_size=1), retry=RetryPolicy(attempts=20, deadline=120)
    )
    table = cat.load_table("logs.events")
    for batch in range(commits):
        table.commit(
            CommitOp.APPEND,
            [adds("day=1", f"w{writer}-b{batch}")],
            key=IdempotencyKey(writer_id=f"w{writer}", batch_id=batch),
        )
    cat.close()
    return commits


def test_eight_processes_hundred_commits_each_to_one_partition(catalog: Catalog, catalog_dsn):
    table = catalog.create_table(
        "logs.events", SCHEMA.append(pa.field("day", pa.int32())), partition_by=["day"]
    )
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        done = pool.starmap(_writer, [(catalog_dsn, w, 100) for w in range(8)])
    assert done == [100] * 8

    files = file_names(table.plan().files)
    expected = {f"w{w}-b{b}" for w in range(8) for b in range(100)}
    assert len(files) == 800 and set(files) == expected
    history = table.history(limit=10_000)
    assert [v.version for v in history] == list(range(800, 0, -1))
    times = [v.committed_at for v in reversed(history)]
    assert times == sorted(times) and len(set(times)) == 800
    # every writer's own commits landed in its batch order
    for w in range(8):
        mine = [f for f in files if f.startswith(f"w{w}-")]
        assert mine == [f"w{w}-b{b}" for b in range(100)]


def test_multi_table_commit_is_all_or_nothing(catalog: Catalog):
    orders = catalog.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2)
    events = catalog.create_table("logs.events", SCHEMA)
    events.commit(CommitOp.APPEND, [adds("", "e0")])
    stale_base = events.current_version()
    events.commit(CommitOp.UPDATE, [rewrite("", ["e0"], ["e0b"])], base_version=stale_base)

    # the second table's part conflicts (append after a concurrent update): neither lands
    with pytest.raises(CommitConflict), catalog.transaction() as tx:
        tx.commit_files(
            orders, CommitOp.MERGE, [adds("bucket=0000", "o1"), adds("bucket=0001", "o2")]
        )
        tx.commit_files(events, CommitOp.APPEND, [adds("", "e1")], base_version=stale_base)
    assert orders.current_version() == 0 and orders.plan().files == []
    assert file_names(events.plan().files) == ["e0b"]

    with catalog.transaction(key=IdempotencyKey(writer_id="job", batch_id=1)) as tx:
        tx.commit_files(orders, CommitOp.MERGE, [adds("bucket=0000", "o1")])
        tx.commit_files(events, CommitOp.APPEND, [adds("", "e1")])
    assert tx.result is not None
    assert {t.table: t.version for t in tx.result.tables} == {"shop.orders": 1, "logs.events": 3}
    assert len({orders.history()[0].committed_at, events.history()[0].committed_at}) == 1


def test_readers_always_see_both_tables_of_a_commit_or_neither(catalog: Catalog):
    a = catalog.create_table("ns.a", SCHEMA)
    b = catalog.create_table("ns.b", SCHEMA)
    stop = threading.Event()
    seen: list[tuple[int, int]] = []

    def reader():
        while not stop.is_set():
            point = catalog.read_point(["ns.a", "ns.b"])
            files_a = len(a.plan(version=point["ns.a"]).files)
            files_b = len(b.plan(version=point["ns.b"]).files)
            seen.append((files_a, files_b))

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(150):
        request = CommitRequest(
            tables=(
                TableCommit(table="ns.a", op=CommitOp.APPEND, partitions=(adds("", f"a{i}"),)),
                TableCommit(table="ns.b", op=CommitOp.APPEND, partitions=(adds("", f"b{i}"),)),
            )
        )
        catalog.commit(request)
    stop.set()
    thread.join()
    assert seen and all(x == y for x, y in seen)
    assert seen[-1][0] <= 150
    # as-of-time reads agree across the two tables too
    for version in a.history(limit=200)[::10]:
        at = version.committed_at
        assert len(a.plan(as_of=at).files) == len(b.plan(as_of=at).files) == version.version
