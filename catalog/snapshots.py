"""From partition versions to files: snapshot chains, commit file ops, live file sets.

A partition version's snapshot is the commit ids of its chain (see ``partition_info`` in the
migration); the files it holds are the fold of those commits' file ops in commit order. These
functions take a connection so that the commit protocol can use them inside its transaction.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow

from catalog.model import CommitOp, DataFile, FileAction, FileOp
from catalog.queries import query


@dataclass(frozen=True)
class PartitionHead:
    """The version of one partition that a read (or a commit) sees."""

    partition_desc: str
    version: int
    table_version: int
    snapshot_start: int
    commit_op: CommitOp


@dataclass(frozen=True)
class SnapshotCommit:
    commit_id: uuid.UUID
    op: CommitOp
    ops: tuple[FileOp, ...]


@dataclass(frozen=True)
class PartitionSnapshot:
    head: PartitionHead
    commits: tuple[SnapshotCommit, ...]

    @property
    def partition_desc(self) -> str:
        return self.head.partition_desc

    @property
    def has_merge(self) -> bool:
        return any(c.op is CommitOp.MERGE for c in self.commits)

    def live_files(self) -> list[DataFile]:
        """Files of this snapshot in commit order (the order merge-on-read relies on)."""
        live: dict[str, DataFile] = {}
        for commit in self.commits:
            for op in commit.ops:
                if op.action is FileAction.ADD:
                    live[op.file.path] = op.file
                else:
                    live.pop(op.file.path, None)
        return list(live.values())


def head_from_row(row: DictRow) -> PartitionHead:
    return PartitionHead(
        partition_desc=row["partition_desc"],
        version=row["version"],
        table_version=row["table_version"],
        snapshot_start=row["snapshot_start"],
        commit_op=CommitOp(row["commit_op"]),
    )


def partition_heads(
    conn: psycopg.Connection[DictRow],
    table_id: uuid.UUID,
    descs: Sequence[str],
    table_version: int,
) -> dict[str, PartitionHead | None]:
    """Latest version at or before ``table_version`` of each named partition (None: none yet)."""
    rows = conn.execute(
        query("partition_heads"),
        {"table_id": table_id, "descs": list(descs), "table_version": table_version},
    ).fetchall()
    return {r["partition_desc"]: head_from_row(r) if r["version"] else None for r in rows}


def all_partition_heads(
    conn: psycopg.Connection[DictRow], table_id: uuid.UUID, table_version: int
) -> list[PartitionHead]:
    rows = conn.execute(
        query("all_partition_heads"), {"table_id": table_id, "table_version": table_version}
    ).fetchall()
    return [head_from_row(r) for r in rows]


def load_snapshots(
    conn: psycopg.Connection[DictRow], table_id: uuid.UUID, heads: Iterable[PartitionHead]
) -> list[PartitionSnapshot]:
    """Resolve heads to their commits and file ops: two indexed queries for any number of heads."""
    heads = list(heads)
    if not heads:
        return []
    chains = _chain_ids(conn, table_id, heads)
    pairs = [(pd, cid) for pd, ids in chains.items() for cid in ids]
    file_ops = _file_ops(conn, table_id, pairs)
    snapshots = []
    for head in heads:
        ids = chains.get(head.partition_desc, [])
        commits = tuple(file_ops[(head.partition_desc, cid)] for cid in ids)
        snapshots.append(PartitionSnapshot(head, commits))
    return snapshots


def _chain_ids(
    conn: psycopg.Connection[DictRow], table_id: uuid.UUID, heads: Sequence[PartitionHead]
) -> dict[str, list[uuid.UUID]]:
    rows = conn.execute(
        query("chain_rows"),
        {
            "table_id": table_id,
            "descs": [h.partition_desc for h in heads],
            "starts": [h.snapshot_start for h in heads],
            "ends": [h.version for h in heads],
        },
    ).fetchall()
    chains: dict[str, list[uuid.UUID]] = defaultdict(list)
    for row in rows:  # ordered by partition, version: the chain's first row holds its base
        chains[row["partition_desc"]].extend(row["commit_ids"])
    return chains


def _file_ops(
    conn: psycopg.Connection[DictRow], table_id: uuid.UUID, pairs: Sequence[tuple[str, uuid.UUID]]
) -> dict[tuple[str, uuid.UUID], SnapshotCommit]:
    rows = conn.execute(
        query("commit_file_ops"),
        {
            "table_id": table_id,
            "descs": [pd for pd, _ in pairs],
            "commit_ids": [cid for _, cid in pairs],
        },
    ).fetchall()
    found = {
        (r["partition_desc"], r["commit_id"]): SnapshotCommit(
            r["commit_id"],
            CommitOp(r["commit_op"]),
            tuple(FileOp.model_validate(op) for op in r["file_ops"]),
        )
        for r in rows
    }
    missing = [pair for pair in pairs if pair not in found]
    if missing:
        raise RuntimeError(f"catalog is inconsistent: commit rows missing for {missing[:3]}")
    return found
