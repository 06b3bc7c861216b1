"""The resolver (compaction kind ``resolve``): a CDC bucket's pending runs resolved by marking
what they replace, with no data rewritten; reads unchanged at every version; and the rows of
the conflict matrix that involve it, provoked by real commits landing between a task's
planning and its commit (docs/design/deletion-vectors.md, D4 and D5)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog import ROW_KIND_COLUMN, ROW_KIND_UPSERT, UNSET_COLUMN, Catalog, CommitOp, Table
from catalog.writes import changes, stage_changes
from compaction.policy import CompactionPolicy
from compaction.rewrite import compact
from compaction.task import CompactionKind, OutcomeStatus
from tests.fixtures.compaction import files_on_disk, leftover_paths, plan_tasks
from tests.fixtures.racing import racing_pair
from tests.fixtures.resolved import assert_resolved_invariants
from tests.integration.compaction.support import reads

pytestmark = pytest.mark.integration
ROWS = pa.schema([("id", pa.int64()), ("v", pa.string()), ("doc", pa.string())])
SEQ = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.string())])
RESOLVE_ONLY = CompactionPolicy(max_sorted_runs=100, max_read_amplification=100.0)


def rows(ids, v: str) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [f"{v}{i}" for i in ids],
            "doc": [f"doc{i}" for i in ids],
        }
    )


def seq_rows(pairs, v: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i for i, _ in pairs], pa.int64()),
            "seq": pa.array([s for _, s in pairs], pa.int64()),
            "v": [f"{v}{i}" for i, _ in pairs],
        }
    )


def orders(catalog: Catalog, *, inline_max: int | None = None) -> Table:
    props = {} if inline_max is None else {"vectors.inline-max-bytes": str(inline_max)}
    table = catalog.create_table(
        "shop.orders", ROWS, primary_key=["id"], hash_buckets=1, properties=props
    )
    table.upsert(rows(range(20), "a"))
    table.upsert(rows(range(5, 10), "b"))
    table.delete(pa.table({"id": pa.array([1, 6], pa.int64())}))
    return table


def resolve(catalog: Catalog, table: Table):
    [task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    assert task.kind is CompactionKind.RESOLVE
    return task, compact(catalog, task)


def every_read(table: Table) -> dict[int, list]:
    return {v: reads(table, v) for v in range(table.current_version() + 1)}


def test_a_resolve_marks_what_the_runs_replace_and_every_read_stays(catalog: Catalog):
    table = orders(catalog)
    before = every_read(table)

    task, outcome = resolve(catalog, table)

    assert outcome.status is OutcomeStatus.COMMITTED and outcome.outputs == ()
    # 5 rows superseded, 2 deleted (their old rows and the delete rows themselves)
    assert outcome.figures["rows_marked"] == 5 + 2 + 2
    assert outcome.figures["runs_resolved"] == 3
    files = table.refresh().plan().partitions[0].files
    assert [f.path for f in files] == [f.path for f in task.inputs]
    assert all(f.resolved for f in files)
    assert [f.vector.cardinality if f.vector else 0 for f in files] == [6, 1, 2]
    assert_resolved_invariants(table)
    assert reads(table) == before[max(before)]
    for version, found in before.items():
        assert reads(table, version) == found
    assert plan_tasks(table, RESOLVE_ONLY, force=False) == []  # nothing pending any more
    assert table.changes(outcome.version, outcome.version).num_rows == 0  # no row changed


def test_later_runs_resolve_against_the_resolved_prefix(catalog: Catalog):
    table = orders(catalog)
    resolve(catalog, table)
    table.upsert(rows([1, 2, 30], "c"))  # 1 comes back after its delete
    _, outcome = resolve(catalog, table)

    assert outcome.figures == {**outcome.figures, "runs_resolved": 1, "rows_marked": 1}
    assert_resolved_invariants(table)
    ids = sorted(r[0] for r in reads(table))
    assert ids == sorted({*range(20), 30} - {6})
    assert dict((r[0], r[1]) for r in reads(table))[1] == "c1"


def seq_table(catalog: Catalog) -> Table:
    table = catalog.create_table(
        "shop.seq", SEQ, primary_key=["id"], hash_buckets=1, properties={"sequence-column": "seq"}
    )
    table.upsert(seq_rows([(1, 5), (2, 5), (3, 5)], "a"))
    table.delete(pa.table({"id": pa.array([1], pa.int64()), "seq": pa.array([7], pa.int64())}))
    return table


def test_a_tombstone_keeps_a_stale_replay_out_after_resolution(catalog: Catalog):
    table = seq_table(catalog)
    resolve(catalog, table)
    table.upsert(seq_rows([(1, 6), (2, 4), (3, 9)], "stale"))  # 1 and 2 are replays

    assert [r[:2] for r in reads(table)] == [(2, 5), (3, 9)]  # pending: the merge path
    _, outcome = resolve(catalog, table)

    assert outcome.figures["rows_marked"] == 3  # the two replays, and 3's older row
    assert_resolved_invariants(table)
    assert [r[:2] for r in reads(table)] == [(2, 5), (3, 9)]
    resolved = sorted((r["id"], r["seq"]) for r in table.scan().to_arrow().to_pylist())
    assert resolved == [(2, 5), (3, 9)]  # all resolved: the plain reader agrees


def partial_update(table: Table, ids: list[int], v: str) -> None:
    """Changes that leave ``doc`` out (an unchanged TOASTed column), as ingest writes them."""
    data = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [f"{v}{i}" for i in ids],
            "doc": pa.nulls(len(ids), pa.string()),
            ROW_KIND_COLUMN: pa.array([ROW_KIND_UPSERT] * len(ids), pa.int8()),
            UNSET_COLUMN: pa.array([["doc"]] * len(ids), pa.list_(pa.string())),
        }
    )
    table.refresh()
    staged = stage_changes(table.meta, changes(table.meta, data))
    table.commit(CommitOp.MERGE, staged.partitions)


def test_a_partial_run_is_rewritten_filled_from_the_rows_it_supersedes(catalog: Catalog):
    table = orders(catalog)
    partial_update(table, [2, 6, 40], "p")  # 6 was deleted, 40 never existed
    before = every_read(table)

    task, outcome = resolve(catalog, table)

    assert outcome.status is OutcomeStatus.COMMITTED and len(outcome.outputs) == 1
    files = table.refresh().plan().partitions[0].files
    rewritten = files[-1]
    assert rewritten.path == outcome.outputs[0].path != task.inputs[-1].path
    written = pq.read_table(table.meta.files.path(rewritten.path)).to_pylist()
    assert [(r["id"], r["doc"], r[UNSET_COLUMN]) for r in written] == [
        (2, "doc2", None),
        (6, None, None),
        (40, None, None),
    ]
    assert_resolved_invariants(table)
    for version, found in before.items():
        assert reads(table, version) == found
    assert table.changes(outcome.version, outcome.version).num_rows == 0


def test_a_fold_of_a_resolved_bucket_ignores_vectors_and_is_resolved(catalog: Catalog):
    table = seq_table(catalog)
    resolve(catalog, table)
    table.upsert(seq_rows([(1, 6)], "stale"))  # pending replay behind a marked tombstone
    expected = reads(table)

    [task] = plan_tasks(table)  # forced: a fold
    assert task.kind is CompactionKind.MERGE_BUCKET
    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    [output] = table.refresh().plan().partitions[0].files
    assert output.resolved is True
    assert reads(table) == expected == [(2, 5, "a2"), (3, 5, "a3")]
    assert_resolved_invariants(table)


# --------------------------------------------------------------------- D5: racing commits


def test_resolver_after_resolver_is_discarded_and_its_vector_file_cleaned_up(catalog: Catalog):
    table = orders(catalog, inline_max=0)  # every vector in a vector file
    [first] = plan_tasks(table, RESOLVE_ONLY, force=False)
    second = replace(first, task_id=uuid.uuid4())
    expected = reads(table)
    assert compact(catalog, first).status is OutcomeStatus.COMMITTED
    on_disk = files_on_disk(table)

    outcome = compact(catalog, second)

    assert outcome.status is OutcomeStatus.DISCARDED
    [vector_file] = files_on_disk(table) - on_disk
    assert vector_file.endswith(".puffin")
    assert vector_file in leftover_paths(catalog)
    live = {p for f in table.refresh().plan().files for p in f.paths}
    assert not live & leftover_paths(catalog), "a discarded resolve hands over only its outputs"
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_fold_after_resolver_is_discarded(catalog: Catalog):
    table = orders(catalog)
    [resolve_task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    [fold] = plan_tasks(table)
    expected = reads(table)
    assert compact(catalog, resolve_task).status is OutcomeStatus.COMMITTED

    assert compact(catalog, fold).status is OutcomeStatus.DISCARDED
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_resolver_after_fold_is_discarded(catalog: Catalog):
    table = orders(catalog)
    [resolve_task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    [fold] = plan_tasks(table)
    expected = reads(table)
    assert compact(catalog, fold).status is OutcomeStatus.COMMITTED

    outcome = compact(catalog, resolve_task)
    assert outcome.status in (OutcomeStatus.DISCARDED, OutcomeStatus.REPLAN)
    assert reads(table) == expected
    assert_resolved_invariants(table)


def test_merge_landing_before_a_resolve_commits_is_reordered_behind_it(catalog: Catalog):
    table = orders(catalog)
    [task] = plan_tasks(table, RESOLVE_ONLY, force=False)
    table.upsert(rows([2, 3, 50], "late"))  # lands after the task's base
    expected = reads(table)

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    files = table.refresh().plan().partitions[0].files
    assert [f.resolved for f in files] == [True, True, True, None]  # the merge stays pending
    for version in range(table.current_version() + 1):
        assert_resolved_invariants(table, version)
    assert reads(table) == expected
    [again] = plan_tasks(table, RESOLVE_ONLY, force=False)
    assert compact(catalog, again).status is OutcomeStatus.COMMITTED
    assert_resolved_invariants(table)
    assert reads(table) == expected


def test_a_merge_staged_before_a_resolve_lands_rebased_after_it(catalog: Catalog):
    table = orders(catalog)
    base = table.current_version()
    upserts = rows([4, 60], "m").append_column(ROW_KIND_COLUMN, pa.array([0, 0], pa.int8()))
    staged = stage_changes(table.meta, changes(table.meta, upserts), base_version=base)
    resolve(catalog, table)

    result = table.commit(CommitOp.MERGE, staged.partitions, base_version=base)

    assert result.version_of(str(table.meta.name)) == table.current_version()
    assert_resolved_invariants(table)
    found = dict((r[0], r[1]) for r in reads(table))
    assert (found[4], found[60], found[5]) == ("m4", "m60", "b5")


# -------------------------------------------- D5 at the moment of the resolver's own commit


def test_merges_and_a_resolver_racing_at_its_commit_are_reordered_and_discarded(
    catalog_dsn: str, warehouse: Path
):
    """A rival's merge, then a rival's resolve of the same base, land just before the
    resolver's commit each time it commits (RacingCatalog): the first lands reordered before
    the merge; the second is discarded behind the rival's resolve, its vector file handed to
    cleanup; the prefix invariant holds at every version."""
    with racing_pair(catalog_dsn, warehouse) as (mine, rival):
        table = orders(mine, inline_max=0)
        theirs = rival.load_table("shop.orders")
        mine.race_with(lambda _: theirs.upsert(rows([2, 70], "raced")))
        [task] = plan_tasks(table, RESOLVE_ONLY, force=False)

        outcome = compact(mine, task)

        assert outcome.status is OutcomeStatus.COMMITTED
        assert outcome.version == task.base_version + 2  # after the raced merge
        files = table.refresh().plan().partitions[0].files
        assert [f.resolved for f in files] == [True, True, True, None]
        for version in range(table.current_version() + 1):
            assert_resolved_invariants(table, version)
        expected = reads(table)
        assert dict((r[0], r[1]) for r in expected)[2] == "raced2"

        [again] = plan_tasks(table, RESOLVE_ONLY, force=False)
        rival_task = replace(again, task_id=uuid.uuid4())
        mine.race_with(lambda _: compact(rival, rival_task))
        on_disk = files_on_disk(table)

        outcome = compact(mine, again)

        assert outcome.status is OutcomeStatus.DISCARDED
        new_files = files_on_disk(table) - on_disk
        live = {p for f in table.refresh().plan().files for p in f.paths}
        [discarded_vectors] = new_files - live
        assert discarded_vectors in leftover_paths(mine)
        assert_resolved_invariants(table)
        assert reads(table) == expected
