"""How ``lakestream compact --engine spark`` deals compaction tasks to Spark tasks."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from catalog import DataFile
from compaction.task import CompactionKind, CompactionTask
from jobs.compact_spark import ExecutorCatalog, default_groups, group_tasks


def task(size: int) -> CompactionTask:
    return CompactionTask(
        table="logs.events",
        table_id=uuid.uuid4(),
        partition_desc=f"p={uuid.uuid4().hex[:6]}",
        kind=CompactionKind.BIN_PACK,
        base_version=1,
        inputs=(DataFile(path=f"data/{uuid.uuid4().hex}.parquet", size_bytes=size, row_count=1),),
        task_id=uuid.uuid4(),
    )


@given(st.lists(st.integers(0, 10_000), max_size=60), st.integers(1, 16))
def test_every_task_lands_in_exactly_one_of_at_most_n_even_groups(sizes, groups):
    tasks = [task(size) for size in sizes]

    dealt = group_tasks(tasks, groups)

    ids = [t.task_id for group in dealt for t in group]
    assert sorted(map(str, ids)) == sorted(str(t.task_id) for t in tasks)
    assert len(dealt) <= groups and all(dealt)
    loads = [sum(max(t.input_bytes, 1) for t in group) for group in dealt]
    if len(dealt) == groups:  # greedy, largest first: no group exceeds another by a whole task
        assert max(loads) - min(loads) <= max(max(s, 1) for s in sizes)


def test_no_tasks_no_groups():
    assert group_tasks([], 4) == []


def test_the_dsn_is_not_in_what_spark_or_a_log_would_show():
    target = ExecutorCatalog(
        dsn="postgresql://app:s3cret@db:5432/lake", warehouse="/w", schema="lakestream"
    )
    assert "s3cret" not in repr(target)
    assert target.secrets() == ["s3cret"]


def test_a_big_backlog_is_spread_wider_than_the_default_parallelism():
    assert default_groups(10, cores=2) == 4  # 2 per core
    assert default_groups(1000, cores=2) == 125  # at most 8 compaction tasks a Spark task
