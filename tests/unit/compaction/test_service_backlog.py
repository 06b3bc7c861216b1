"""Backlog figures and waiting partitions, against the planner they must agree with."""

from __future__ import annotations

import uuid

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import DataFile
from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec
from catalog.planning import PartitionScan, ScanPlan
from compaction.backlog import backlog, waiting_partitions
from compaction.planner import plan_table
from compaction.policy import CompactionPolicy

MB = 1 << 20
POLICY = CompactionPolicy(target_file_size=100 * MB, min_file_num=4, force_after_rounds=3)
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def meta(*, cdc: bool) -> TableMeta:
    return TableMeta(
        table_id=uuid.UUID(int=1),
        name=TableName("shop", "t"),
        location="/nowhere",
        spec=PartitionSpec(("day",), 4 if cdc else -1),
        primary_key=("id",) if cdc else (),
        properties={},
        schemas={0: SCHEMA},
        current_schema_id=0,
    )


def scan_plan(table: TableMeta, sizes_mb: list[list[int]]) -> ScanPlan:
    partitions = []
    for i, sizes in enumerate(sizes_mb):
        bucket = i if table.is_cdc else None
        desc = table.spec.desc({"day": f"d{i}"}, bucket=bucket)
        files = tuple(
            DataFile(path=f"p{i}/f{j}.parquet", size_bytes=s * MB, row_count=10)
            for j, s in enumerate(sizes)
        )
        values, _ = table.spec.parse(desc)
        partitions.append(PartitionScan(desc, 1, files, table.is_cdc, values, bucket))
    return ScanPlan(table, 5, tuple(partitions))


def test_append_backlog_counts_small_files_only():
    table = meta(cdc=False)
    plan = scan_plan(table, [[1, 2, 90, 120], [69, 70], []])
    found = backlog(table, plan, POLICY)
    assert (found.small_files, found.max_runs_per_bucket, found.files) == (3, 0, 6)


def test_cdc_backlog_counts_runs_of_buckets_with_more_than_one():
    table = meta(cdc=True)
    plan = scan_plan(table, [[500], [1, 1, 1], [1, 2]])
    found = backlog(table, plan, POLICY)
    assert (found.small_files, found.max_runs_per_bucket, found.files) == (5, 3, 6)
    assert waiting_partitions(table, plan, POLICY, planned=[]) == set()


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 150), max_size=8), min_size=1, max_size=5),
    waited=st.integers(0, 5),
)
def test_every_append_partition_with_small_files_is_planned_or_waiting(sizes, waited):
    table = meta(cdc=False)
    plan = scan_plan(table, sizes)
    idle = {p.partition_desc: waited for p in plan.partitions}
    tasks = plan_table(table, plan, POLICY, idle_rounds=idle)
    planned = {t.partition_desc for t in tasks}
    waiting = waiting_partitions(table, plan, POLICY, planned)
    assert not planned & waiting
    for part in plan.partitions:
        small = sum(POLICY.is_small(f.size_bytes) for f in part.files)
        has_work = planned | waiting
        if small >= 2 and part.partition_desc not in has_work:
            # only bins of one file each: nothing to gain, so neither planned nor waiting
            raise AssertionError(f"{part.partition_desc} with {small} small files is lost")
        if part.partition_desc in waiting:
            # waiting means too few small files and not yet waited long enough
            assert small < POLICY.min_file_num and waited < POLICY.force_after_rounds
