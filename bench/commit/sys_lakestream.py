"""lakestream: ``Table.commit(CommitOp.APPEND, ...)`` against the PostgreSQL catalog.

Each commit names its writer and batch (an idempotency key), as a streaming writer would, so a
commit retried after a raised error can never land twice.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness import Env, Verification
from workload import (
    DAY,
    PARTITION_DIR,
    TABLE_SCHEMA,
    FileFacts,
    commit_id_of,
    file_name,
    write_files,
)

from catalog import (
    Catalog,
    ColumnStats,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    Table,
)

TABLE = "bench.events"


@dataclass(frozen=True)
class LakestreamContext:
    dsn: str
    partition_desc: str
    facts: FileFacts
    commits: int


def _relative_path(commit_id: int) -> str:
    return f"data/{PARTITION_DIR}/{file_name(commit_id)}"


class LakestreamWriter:
    def __init__(self, context: LakestreamContext, writer_index: int, items: Sequence[int]):
        self._catalog = Catalog.connect(context.dsn, create=False)
        self._table: Table = self._catalog.load_table(TABLE)
        self._desc = context.partition_desc
        self._writer_id = f"bench-writer-{writer_index}"
        self._retries = 0
        stats = {
            name: ColumnStats(min=low, max=high, null_count=nulls)
            for name, (low, high, nulls) in context.facts.stats.items()
        }
        self._files = {
            i: DataFile(
                path=_relative_path(i),
                size_bytes=context.facts.size_bytes,
                row_count=context.facts.row_count,
                stats=stats,
            )
            for i in items
        }

    def commit(self, commit_id: int) -> None:
        op = FileOp(action=FileAction.ADD, file=self._files[commit_id])
        result = self._table.commit(
            CommitOp.APPEND,
            [PartitionCommit(partition_desc=self._desc, ops=(op,))],
            key=IdempotencyKey(writer_id=self._writer_id, batch_id=commit_id),
        )
        self._retries += int(result.attempts) - 1

    def internal_retries(self) -> int:
        """Attempts beyond the first that the committer's retry loop reported."""
        return self._retries

    def recover(self) -> None:
        self._table.refresh()

    def close(self) -> None:
        self._catalog.close()


class LakestreamSystem:
    name = "lakestream"
    budgeted = False

    def version(self) -> str:
        return f"lakestream {metadata.version('lakestream')} (this working tree)"

    def setup(self, env: Env, tag: str, commits: int) -> LakestreamContext:
        dsn = env.create_database(f"lakestream_{tag}")
        with Catalog.connect(dsn, warehouse=env.work / f"lakestream_{tag}") as catalog:
            table = catalog.create_table(TABLE, TABLE_SCHEMA, partition_by=["day"])
            desc = table.meta.spec.desc({"day": DAY})
            folder = Path(table.meta.location) / "data" / PARTITION_DIR
        facts, _ = write_files(folder, commits)
        return LakestreamContext(dsn=dsn, partition_desc=desc, facts=facts, commits=commits)

    def open_writer(
        self, context: LakestreamContext, writer_index: int, items: Sequence[int]
    ) -> LakestreamWriter:
        return LakestreamWriter(context, writer_index, items)

    def verify(self, context: LakestreamContext) -> Verification:
        """Files a reader sees, contiguous versions, and no prepared-but-unpublished commits."""
        with Catalog.connect(context.dsn, create=False) as catalog:
            table = catalog.load_table(TABLE)
            visible = [commit_id_of(f.path) for f in table.plan().files]
            versions = sorted(v.version for v in table.history(limit=context.commits + 10))
            latest = table.current_version()
            pending = catalog.leftovers(older_than=dt.timedelta(0))
        contiguous = versions == list(range(1, latest + 1))
        notes = [
            f"table versions 1..{latest}: {'contiguous' if contiguous else 'NOT contiguous'}",
            f"prepared but unpublished commits: {len(pending)}",
        ]
        return Verification(visible=visible, notes=notes)


SYSTEM = LakestreamSystem()
