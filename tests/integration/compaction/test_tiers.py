"""Tiers 1 and 2 of design D8 (kind ``fold-resolved``): a stretch of a CDC bucket's resolved
files rewritten as one, marked rows dropped and tombstones kept; reads unchanged at every
version, R1, R2 and I1 kept, and the conflict-matrix rows a tier adds provoked by real
commits landing between a task's planning and its commit."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp, DataFile, Table
from compaction.amplification import write_amplification
from compaction.planner import only_deletes
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionKind, CompactionTask, OutcomeStatus
from tests.fixtures.compaction import leftover_paths, plan_tasks
from tests.fixtures.resolved import assert_resolved_invariants
from tests.integration.compaction.support import reads

pytestmark = pytest.mark.integration
ROWS = pa.schema([("id", pa.int64()), ("v", pa.string())])
SEQ = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.string())])
#: no fold owed, every file small (1 MB target): a tier when due, else a resolve
TIERS = CompactionPolicy(target_file_size=1 << 20, max_sorted_runs=100, max_read_amplification=100)
RESOLVE_ONLY = replace(TIERS, tier_min_files=1000)


def rows(ids, v: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{v}{i}" for i in ids]})


def seq_rows(pairs, v: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i for i, _ in pairs], pa.int64()),
            "seq": pa.array([s for _, s in pairs], pa.int64()),
            "v": [f"{v}{i}" for i, _ in pairs],
        }
    )


def files(table: Table) -> tuple[DataFile, ...]:
    [part] = table.refresh().plan().partitions
    return part.files


def every_read(table: Table) -> dict[int, list]:
    return {v: reads(table, v) for v in range(table.current_version() + 1)}


def resolve(catalog: Catalog, table: Table) -> None:
    [task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    assert task.kind is CompactionKind.RESOLVE
    assert compact(catalog, task).status is OutcomeStatus.COMMITTED


def tier(table: Table, policy: CompactionPolicy = TIERS) -> CompactionTask:
    [task] = plan_tasks(table, policy, force=False)
    assert task.kind is CompactionKind.FOLD_RESOLVED
    return task


def orders(catalog: Catalog) -> Table:
    """Four runs, resolved: updates, deletes and a key deleted then written again."""
    table = catalog.create_table("shop.orders", ROWS, primary_key=["id"], hash_buckets=1)
    table.upsert(rows(range(20), "a"))
    table.upsert(rows(range(5, 10), "b"))
    table.delete(pa.table({"id": pa.array([1, 6, 7], pa.int64())}))
    table.upsert(rows([7, 30], "c"))
    resolve(catalog, table)
    return table


def test_tier_one_folds_small_resolved_files_into_one_and_every_read_stays(catalog: Catalog):
    table = orders(catalog)
    before = every_read(table)
    task = tier(table)
    assert [f.path for f in task.inputs] == [f.path for f in files(table)]
    assert task.drop_deletes  # the oldest files of a table without a sequence column

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    [output] = files(table)
    assert output.resolved is True and output.vector is None  # no tombstone needed
    assert output.row_count == len(before[max(before)]) == outcome.rows_out == 19
    assert outcome.figures == {"rows_dropped": 20 + 5 + 3 + 2 - 19, "tombstones": 0}
    assert outcome.bytes_out == output.size_bytes
    assert_resolved_invariants(table)
    for version, found in before.items():
        assert reads(table, version) == found
    assert table.changes(outcome.version, outcome.version).num_rows == 0


def test_a_tombstone_kept_by_a_tier_fold_keeps_an_older_row_out_of_a_whole_bucket_fold(
    catalog: Catalog,
):
    table = catalog.create_table("shop.orders", ROWS, primary_key=["id"], hash_buckets=1)
    table.upsert(rows(range(2000), "a"))  # a large base: not part of the stretch
    table.upsert(rows([1, 2], "b"))
    table.delete(pa.table({"id": pa.array([3], pa.int64())}))
    table.upsert(rows([4], "c"))
    table.upsert(rows([5], "d"))
    resolve(catalog, table)
    base = files(table)[0]
    policy = replace(TIERS, target_file_size=base.size_bytes)
    task = tier(table, policy)
    assert [f.path for f in task.inputs] == [f.path for f in files(table)[1:]]
    assert not task.drop_deletes  # the base below still holds 3's (marked) row
    expected = reads(table)

    assert compact(catalog, task).status is OutcomeStatus.COMMITTED

    kept, live, tombstones = files(table)
    assert kept.path == base.path and live.resolved is tombstones.resolved is True
    assert live.vector is None and live.row_count == 4  # 1, 2 (b), 4 and 5
    assert tombstones.row_count == tombstones.vector.cardinality == 1  # 3's tombstone
    assert only_deletes(tombstones) and not only_deletes(live)
    assert reads(table) == expected
    assert_resolved_invariants(table)
    [fold] = plan_tasks(table)  # forced: the whole bucket, merged ignoring vectors
    assert fold.kind is CompactionKind.MERGE_BUCKET
    assert compact(catalog, fold).status is OutcomeStatus.COMMITTED
    assert reads(table) == expected and 3 not in {r[0] for r in expected}


def test_a_tier_fold_reads_tombstones_of_a_table_with_a_required_column(catalog: Catalog):
    # a delete row carries only its key: a required column is null in it (issue 49's streaming
    # table failed every tier fold with "declared non-nullable but contains nulls")
    required = pa.schema([("id", pa.int64()), pa.field("v", pa.string(), nullable=False)])
    table = catalog.create_table("shop.orders", required, primary_key=["id"], hash_buckets=1)
    table.upsert(rows(range(2000), "a").cast(required))  # a large base: tombstones are kept
    table.upsert(rows([1, 2], "b").cast(required))
    table.delete(pa.table({"id": pa.array([3], pa.int64())}))
    table.upsert(rows([4], "c").cast(required))
    table.upsert(rows([5], "d").cast(required))
    resolve(catalog, table)
    task = tier(table, replace(TIERS, target_file_size=files(table)[0].size_bytes))
    assert not task.drop_deletes
    expected = reads(table)

    assert compact(catalog, task).status is OutcomeStatus.COMMITTED

    _, _, tombstones = files(table)
    assert only_deletes(tombstones) and reads(table) == expected
    assert_resolved_invariants(table)


def test_a_tombstone_kept_by_a_tier_fold_stops_an_older_replay(catalog: Catalog):
    table = catalog.create_table(
        "shop.seq", SEQ, primary_key=["id"], hash_buckets=1, properties={"sequence-column": "seq"}
    )
    table.upsert(seq_rows([(1, 5), (2, 5), (3, 5)], "a"))
    table.delete(pa.table({"id": pa.array([1], pa.int64()), "seq": pa.array([7], pa.int64())}))
    table.upsert(seq_rows([(4, 1)], "b"))
    table.upsert(seq_rows([(2, 9)], "c"))
    resolve(catalog, table)
    task = tier(table)
    assert not task.drop_deletes  # a sequence column: a later replay may need the tombstone
    assert compact(catalog, task).status is OutcomeStatus.COMMITTED
    live, tombstones = files(table)
    assert (live.row_count, live.vector) == (3, None)
    assert tombstones.row_count == tombstones.vector.cardinality == 1

    table.upsert(seq_rows([(1, 6), (3, 4)], "stale"))  # replays below the delete and the row

    expected = [(2, 9, "c2"), (3, 5, "a3"), (4, 1, "b4")]
    assert reads(table) == expected
    resolve(catalog, table)
    assert_resolved_invariants(table)
    assert reads(table) == expected
    plain = sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())
    assert plain == expected  # all resolved: the plain reader agrees


def test_tier_two_rewrites_a_worn_file_alone_in_its_place(catalog: Catalog):
    table = catalog.create_table("shop.orders", ROWS, primary_key=["id"], hash_buckets=1)
    table.upsert(rows(range(200), "a"))
    table.upsert(rows(range(100), "b"))  # half of the base superseded
    resolve(catalog, table)
    base, run = files(table)
    assert base.vector is not None and base.vector.cardinality == 100
    table.upsert(rows([500], "c"))  # pending: it stays where it is
    expected = reads(table)
    task = tier(table, replace(TIERS, target_file_size=base.size_bytes))
    assert [f.path for f in task.inputs] == [base.path]

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    output, kept, pending = files(table)
    assert (output.row_count, output.vector, output.resolved) == (100, None, True)
    assert kept == run and pending.resolved is not True
    assert reads(table) == expected
    assert_resolved_invariants(table)


# --------------------------------------------------------------------- D5: racing commits


def test_tier_fold_after_resolver_is_discarded(catalog: Catalog):
    table = orders(catalog)
    table.upsert(rows([2, 40], "late"))  # pending
    task = tier(table)
    [resolver] = plan_tasks(table, RESOLVE_ONLY, force=False)
    expected = reads(table)
    assert compact(catalog, resolver).status is OutcomeStatus.COMMITTED

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.DISCARDED
    [output] = outcome.outputs
    assert output.path in leftover_paths(catalog)
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_resolver_after_tier_fold_is_discarded(catalog: Catalog):
    table = orders(catalog)
    table.upsert(rows([2, 40], "late"))
    task = tier(table)
    [resolver] = plan_tasks(table, RESOLVE_ONLY, force=False)
    expected = reads(table)
    assert compact(catalog, task).status is OutcomeStatus.COMMITTED

    outcome = compact(catalog, resolver)

    assert outcome.status in (OutcomeStatus.DISCARDED, OutcomeStatus.REPLAN)
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_a_merge_landing_after_a_tier_base_is_reordered_behind_it(catalog: Catalog):
    table = orders(catalog)
    task = tier(table)
    table.upsert(rows([2, 3, 50], "late"))  # lands after the task's base
    expected = reads(table)

    assert compact(catalog, task).status is OutcomeStatus.COMMITTED

    output, run = files(table)
    assert output.resolved is True and run.resolved is not True  # R1: the run stays pending
    assert reads(table) == expected
    assert_resolved_invariants(table)
    resolve(catalog, table)
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_a_file_of_tombstones_is_not_worn_unless_they_may_go(catalog: Catalog):
    table = catalog.create_table(
        "shop.seq", SEQ, primary_key=["id"], hash_buckets=1, properties={"sequence-column": "seq"}
    )
    table.upsert(seq_rows([(i, 1) for i in range(300)], "a"))
    table.delete(pa.table({"id": pa.array(range(100), pa.int64()), "seq": pa.array([2] * 100)}))
    table.upsert(seq_rows([(1000, 1)], "b"))
    table.upsert(seq_rows([(1001, 1)], "c"))
    resolve(catalog, table)
    # every file small: tier 1 folds the four into live rows and 100 tombstones
    assert compact(catalog, tier(table)).status is OutcomeStatus.COMMITTED
    live, tombstones = files(table)
    assert tombstones.vector.cardinality == tombstones.row_count == 100
    # with a target that makes both large, the tombstones (ratio 1.0) are no tier-2 input
    small = min(live.size_bytes, tombstones.size_bytes)
    assert plan_tasks(table, replace(TIERS, target_file_size=small), force=False) == []


def test_a_rerun_of_a_landed_tier_task_is_already_done(catalog: Catalog):
    table = orders(catalog)
    task = replace(tier(table), task_id=uuid.uuid4())
    first = compact(catalog, task)
    assert first.status is OutcomeStatus.COMMITTED
    again = compact(catalog, task)
    assert (again.status, again.version) == (OutcomeStatus.ALREADY_DONE, first.version)


# ------------------------------------------------------------------- write amplification


def vector_bytes(entry: DataFile) -> int:
    vector = entry.vector
    assert vector is not None and vector.inline is not None  # small: inline
    return len(base64.b64decode(vector.inline))


def test_write_amplification_from_a_known_history(catalog: Catalog):
    table = catalog.create_table("shop.orders", ROWS, primary_key=["id"], hash_buckets=1)
    table.upsert(rows(range(20), "a"))
    table.upsert(rows(range(5, 10), "b"))
    table.delete(pa.table({"id": pa.array([1, 6], pa.int64())}))
    table.upsert(rows([30], "c"))
    ingested = sum(f.size_bytes for f in files(table))
    [resolve_task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    resolved = compact(catalog, resolve_task)
    marked = [f for f in files(table) if f.vector is not None]
    resolve_bytes = sum(vector_bytes(f) for f in marked)
    tiered = compact(catalog, tier(table, replace(TIERS, rewrite_deleted_ratio=1.0)))
    [output] = files(table)
    assert output.vector is None  # the oldest files: tombstones dropped

    history = {v.version: v.summary for v in table.history()}
    resolve_summary, tier_summary = history[resolved.version], history[tiered.version]
    assert resolve_summary["bytes_written"] == resolve_bytes == resolved.bytes_out
    assert resolve_summary["bytes_added"] == ingested  # every entry named again, full size
    assert tier_summary["bytes_written"] == output.size_bytes == tiered.bytes_out
    found = write_amplification(table)
    assert found.ingest_bytes_added == ingested
    assert found.compaction_bytes_written == resolve_bytes + output.size_bytes
    assert found.ratio == pytest.approx((resolve_bytes + output.size_bytes) / ingested)
    by_op = table.bytes_by_op()
    assert by_op[CommitOp.MERGE].versions == 4 and by_op[CommitOp.COMPACTION].versions == 2
    assert table.bytes_by_op(dt.timedelta(0))[CommitOp.COMPACTION].versions == 1  # the newest
