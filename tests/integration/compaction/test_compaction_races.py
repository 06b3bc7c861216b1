"""Every pair of the conflict matrix that involves a compaction, provoked with real commits
landing between a real task's planning and its commit, and with writers racing in threads."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog import Catalog, CommitOp, FileAction, FileOp, PartitionCommit, Table
from catalog.files.writer import write_data_file
from compaction.rewrite import compact
from compaction.task import OutcomeStatus
from tests.fixtures.compaction import (
    every_version,
    files_on_disk,
    leftover_paths,
    plan_tasks,
    rows_at,
)

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("v", pa.string())])


def batch(start: int, n: int = 10, v: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [v] * n})


def append_table(catalog: Catalog, files: int = 5) -> Table:
    table = catalog.create_table("logs.events", EVENTS)
    for i in range(files):
        table.append(batch(i * 10))
    return table


def cdc_table(catalog: Catalog, runs: int = 3) -> Table:
    table = catalog.create_table("shop.orders", EVENTS, primary_key=["id"], hash_buckets=1)
    for i in range(runs):
        table.upsert(batch(0, 20, f"r{i}"))
    return table


def update_file(table: Table, victim_path: str) -> None:
    """A copy-on-write UPDATE of one file (v := 'updated'), planned at the current version."""
    base = table.current_version()
    [part] = table.plan().partitions
    victim = next(f for f in part.files if f.path == victim_path)
    rows = pq.read_table(Path(table.meta.location) / victim.path)
    rows = rows.set_column(1, "v", pa.array(["updated"] * rows.num_rows))
    new = write_data_file(rows, table.meta.location, schema_id=table.meta.current_schema_id)
    ops = (FileOp(action=FileAction.DELETE, file=victim), FileOp(action=FileAction.ADD, file=new))
    table.commit(CommitOp.UPDATE, [PartitionCommit(partition_desc="", ops=ops)], base_version=base)


def test_append_then_compaction_reorders_the_compaction_first(catalog: Catalog):
    table = append_table(catalog)
    [task] = plan_tasks(table)
    table.append(batch(1000))  # lands after the task's base
    racing = table.plan().partitions[0].files[-1]
    before = every_version(table)

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    assert outcome.version == table.current_version() == task.base_version + 2
    files = table.plan().partitions[0].files
    assert [f.path for f in files] == [*(o.path for o in outcome.outputs), racing.path]
    assert rows_at(table) == before[task.base_version + 1]
    for version, rows in before.items():
        assert rows_at(table, version) == rows


def test_merge_then_compaction_reorders_and_the_newer_merge_still_wins(catalog: Catalog):
    table = cdc_table(catalog)
    [task] = plan_tasks(table)
    table.upsert(batch(10, 20, "racing"))  # keys 10..29 change after the base
    table.delete(pa.table({"id": pa.array([0, 1], pa.int64())}))
    before = every_version(table)

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    latest = rows_at(table)
    assert latest == before[task.base_version + 2]
    assert latest == sorted(
        [(i, "r2") for i in range(2, 10)] + [(i, "racing") for i in range(10, 30)]
    )
    for version, rows in before.items():
        assert rows_at(table, version) == rows
    assert len(table.plan().partitions[0].files) == 3  # compacted base + the two racing runs


def test_update_then_compaction_discards_it_and_records_its_outputs(catalog: Catalog):
    table = append_table(catalog)
    [task] = plan_tasks(table)
    update_file(table, task.inputs[2].path)
    version = table.current_version()
    before = every_version(table)

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.DISCARDED and outcome.version is None
    assert table.current_version() == version
    assert rows_at(table) == before[version]
    assert "updated" in {r[1] for r in rows_at(table)}
    outputs = {f.path for f in outcome.outputs}
    assert outputs and outputs <= files_on_disk(table)
    assert outputs <= leftover_paths(catalog)  # maintenance will delete them


def test_compaction_then_compaction_discards_the_second(catalog: Catalog):
    table = append_table(catalog)
    [first] = plan_tasks(table)
    second = replace(first, task_id=uuid.uuid4())  # the same work planned twice

    won, lost = compact(catalog, first), compact(catalog, second)

    assert won.status is OutcomeStatus.COMMITTED
    assert lost.status is OutcomeStatus.DISCARDED
    assert table.current_version() == won.version
    assert {f.path for f in lost.outputs} <= leftover_paths(catalog)
    assert not {f.path for f in won.outputs} & leftover_paths(catalog)
    assert len(rows_at(table)) == 50


def test_a_task_whose_inputs_are_gone_is_replanned_and_leaves_nothing(catalog: Catalog):
    table = append_table(catalog)
    [stale] = plan_tasks(table)
    assert compact(catalog, replace(stale, task_id=uuid.uuid4())).status is OutcomeStatus.COMMITTED
    on_disk, version = files_on_disk(table), table.current_version()
    rebased = replace(stale, base_version=version, task_id=uuid.uuid4())  # inputs compacted away

    outcome = compact(catalog, rebased)

    assert outcome.status is OutcomeStatus.REPLAN and "not in" in outcome.detail
    assert outcome.outputs == () and table.current_version() == version
    assert files_on_disk(table) == on_disk
    assert leftover_paths(catalog) == set()


def test_a_dropped_table_is_replanned(catalog: Catalog):
    table = append_table(catalog)
    [task] = plan_tasks(table)
    catalog.drop_table(table.name)
    catalog.create_table(table.name, EVENTS)  # same name, another table
    assert compact(catalog, task).status is OutcomeStatus.REPLAN


@pytest.mark.parametrize("kind", ["append", "merge"])
def test_writers_racing_compaction_rounds_lose_nothing(catalog: Catalog, kind: str):
    """Writers commit in a thread while compaction rounds run: every row is there after, each
    writer commit landed, and every compaction output is either live or recorded."""
    table = append_table(catalog) if kind == "append" else cdc_table(catalog)
    start = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        start.wait()
        try:
            for i in range(12):
                if kind == "append":
                    table.append(batch(100 + i * 10))
                else:
                    table.upsert(batch(i * 3, 5, f"w{i}"))
        except BaseException as exc:  # a failed writer fails the test
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    start.set()
    outcomes = []
    while writer.is_alive():
        outcomes += [compact(catalog, t) for t in plan_tasks(table)]
    writer.join()
    outcomes += [compact(catalog, t) for t in plan_tasks(table)]

    assert errors == []
    assert {o.status for o in outcomes} <= {OutcomeStatus.COMMITTED, OutcomeStatus.DISCARDED}
    assert any(o.status is OutcomeStatus.COMMITTED for o in outcomes)
    if kind == "append":
        assert sorted(r[0] for r in rows_at(table)) == sorted([*range(50), *range(100, 220)])
    else:
        expected = {i: "r2" for i in range(20)}
        for i in range(12):
            expected.update({k: f"w{i}" for k in range(i * 3, i * 3 + 5)})
        assert rows_at(table) == sorted(expected.items())
    recorded = leftover_paths(catalog)
    for outcome in outcomes:
        paths = {f.path for f in outcome.outputs}
        if outcome.status is OutcomeStatus.COMMITTED:  # referenced by the version it created
            assert paths <= {f.path for f in table.plan(version=outcome.version).files}
        else:
            assert paths <= recorded
