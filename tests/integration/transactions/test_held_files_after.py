"""The held table's files worked out from the sink's own commit (``files_after``) are the files
a plan of the catalog lists at the version that commit made: same files, same order. The
consistent sink plans the next batch's held files that way instead of asking the catalog, so a
file missing from it would publish its events twice, and one too many would fail the commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitOp,
    CommitRequest,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    Table,
    TableCommit,
)
from catalog.writes import stage_append
from ingest.sink.consistent import files_after
from ingest.sink.held import HELD_SCHEMA

pytestmark = pytest.mark.integration


def held_rows(n: int, first: int) -> pa.Table:
    return pa.table(
        {
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": list(range(first, first + n)),
            "key": [b"k"] * n,
            "value": [b"{}"] * n,
            "timestamp_ms": [0] * n,
            "txn_id": [f"{i}:1" for i in range(first, first + n)],
            "total_order": [1] * n,
        },
        schema=HELD_SCHEMA,
    )


def planned(table: Table, version: int) -> list[tuple[str, DataFile]]:
    plan = table.plan(version=version)
    return [(p.partition_desc, f) for p in plan.partitions for f in p.files]


def staged(table: Table, n: int, first: int) -> list[FileOp]:
    commit = stage_append(table.meta, held_rows(n, first))
    return [op for part in commit.partitions for op in part.ops]


def test_the_files_after_each_commit_are_the_ones_the_catalog_plans(catalog: Catalog) -> None:
    table = catalog.create_table("lakestream_jobs.files_after_held", HELD_SCHEMA)
    desc = table.meta.spec.desc({})
    files: list[tuple[str, DataFile]] = []
    # as the sink commits the held table, batch after batch: the tasks' new held files; the
    # committed files dissolved and the rest held again in new files; a batch that adds nothing
    # (the job's state alone); a batch that publishes everything held
    steps = [
        (CommitOp.APPEND, lambda: staged(table, 3, 0) + staged(table, 2, 10)),
        (CommitOp.APPEND, lambda: staged(table, 1, 20)),
        (CommitOp.UPDATE, lambda: deletes_of(files) + staged(table, 4, 30)),
        (CommitOp.APPEND, lambda: []),
        (CommitOp.UPDATE, lambda: deletes_of(files[:1]) + staged(table, 2, 40)),
        (CommitOp.UPDATE, lambda: deletes_of(files)),
    ]
    for batch, (op, ops_of) in enumerate(steps):
        before = table.current_version()
        commit = TableCommit(
            table=str(table.meta.name),
            op=op,
            partitions=(PartitionCommit(partition_desc=desc, ops=tuple(ops_of())),),
            base_version=before,
        )
        result = catalog.commit(
            CommitRequest(tables=(commit,), key=IdempotencyKey(writer_id="w:1", batch_id=batch))
        )
        after = result.version_of(str(table.meta.name))
        assert after == before + 1

        files = files_after(files, commit)

        assert files == planned(table, after)
    assert files == []


def deletes_of(files: list[tuple[str, DataFile]]) -> list[FileOp]:
    return [FileOp(action=FileAction.DELETE, file=f) for _, f in files]
