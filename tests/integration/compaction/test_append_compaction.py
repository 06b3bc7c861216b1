"""Append tables: small files bin-packed, reads equal before and after at every version."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog import Catalog, CommitOp
from compaction.policy import CompactionPolicy
from compaction.task import COMPACTOR_WRITER_PREFIX, CompactionKind, OutcomeStatus
from tests.fixtures.compaction import (
    compact_all,
    every_version,
    files_on_disk,
    leftover_paths,
    plan_tasks,
    rows_at,
)

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("amount", pa.float64())])


def batch(start: int, n: int, region: str | None) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "region": pa.array([region] * n, pa.string()),
            "amount": pa.array([i * 0.5 for i in range(n)], pa.float64()),
        }
    )


def test_small_files_of_each_partition_fold_and_every_version_reads_the_same(
    catalog: Catalog,
):
    events = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    for i in range(6):
        events.append(batch(i * 100, 100, ("eu", "us", None)[i % 3]))
    events.add_column("note", pa.string())  # files before and after a schema change
    for i in range(6, 12):
        data = batch(i * 100, 100, ("eu", "us", None)[i % 3])
        events.append(data.append_column("note", pa.array([f"n{i}"] * 100)))
    before = every_version(events)
    files_before = len(events.plan().files)

    outcomes = compact_all(catalog, events)

    assert [o.status for o in outcomes] == [OutcomeStatus.COMMITTED] * 3
    assert all(o.task.kind is CompactionKind.BIN_PACK for o in outcomes)
    assert files_before == 12 and len(events.plan().files) == 3
    assert rows_at(events) == before[max(before)]
    for version, rows in before.items():  # time travel before the compaction is untouched
        assert rows_at(events, version) == rows
    assert sum(o.rows_in for o in outcomes) == sum(o.rows_out for o in outcomes) == 1200
    history = events.history(limit=3)
    assert {v.op for v in history} == {CommitOp.COMPACTION}
    assert all(v.writer_id.startswith(COMPACTOR_WRITER_PREFIX) for v in history)
    schema_id = events.meta.current_schema_id
    for out in (f for o in outcomes for f in o.outputs):
        assert out.schema_id == schema_id and out.stats["id"].min is not None
        path = f"{events.meta.location}/{out.path}"
        assert pq.read_metadata(path).row_group(0).column(0).compression == "ZSTD"
    assert leftover_paths(catalog) == set()


def test_bins_close_at_twice_the_target_and_outputs_come_near_it(catalog: Catalog):
    events = catalog.create_table("logs.events", EVENTS)
    for i in range(12):
        events.append(batch(i * 2000, 2000, "eu"))
    sizes = [f.size_bytes for f in events.plan().files]
    target = 3 * max(sizes)  # bins of ~6 files, each written as ~2 files of the target
    policy = CompactionPolicy(target_file_size=target)
    before = rows_at(events)

    [task] = plan_tasks(events, policy, force=False)
    outcomes = compact_all(catalog, events, policy)

    assert len(task.inputs) == 12
    assert [o.status for o in outcomes] == [OutcomeStatus.COMMITTED]
    outputs = outcomes[0].outputs
    assert 2 <= len(outputs) < 12
    assert rows_at(events) == before
    assert all(f.size_bytes <= 2 * target for f in outputs)


def test_a_partition_with_few_small_files_waits_unless_forced(catalog: Catalog):
    events = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    for i in range(3):
        events.append(batch(i * 10, 10, "eu"))
    assert plan_tasks(events, force=False) == []
    [task] = plan_tasks(events, force=True)
    assert len(task.inputs) == 3


def test_a_rerun_of_a_landed_task_is_already_done_and_writes_nothing(catalog: Catalog):
    events = catalog.create_table("logs.events", EVENTS)
    for i in range(5):
        events.append(batch(i * 10, 10, "eu"))
    [task] = plan_tasks(events)
    from compaction.rewrite import compact

    first = compact(catalog, task)
    on_disk = files_on_disk(events)
    again = compact(catalog, task)

    assert first.status is OutcomeStatus.COMMITTED
    assert again.status is OutcomeStatus.ALREADY_DONE and again.version == first.version
    assert again.outputs == () and files_on_disk(events) == on_disk
    assert events.current_version() == first.version
