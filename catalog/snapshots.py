"""From partition versions to files: snapshot chains, commit file ops, live file sets.

A partition version's snapshot is the commit ids of its chain (see ``partition_info`` in the
migration); the files it holds are the fold of those commits' file ops in commit order. These
functions take a connection so that the commit protocol can use them inside its transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.rows import DictRow, tuple_row

from catalog.manifest import FileManifest, fold_ops, parse_ops, vectored
from catalog.model import CommitOp, DataFile
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
class PartitionSnapshot:
    head: PartitionHead
    ops: tuple[CommitOp, ...]
    """The op of each commit of the chain, in commit order."""
    files: FileManifest
    """The live files, folded from the chain's file ops (see :func:`catalog.manifest.fold_ops`)."""
    has_vectors: bool = False
    """Whether a live file has a deletion vector: found for every snapshot of a load at once, so
    a plan of many partitions without vectors does not look at each one."""

    @property
    def partition_desc(self) -> str:
        return self.head.partition_desc

    @property
    def has_merge(self) -> bool:
        return CommitOp.MERGE in self.ops

    def live_files(self) -> list[DataFile]:
        """Files of this snapshot in commit order (the order merge-on-read relies on)."""
        return list(self.files.data_files())


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
    return heads_from_rows(send_partition_heads(conn, table_id, descs, table_version).fetchall())


def send_partition_heads(
    conn: psycopg.Connection[DictRow],
    table_id: uuid.UUID,
    descs: Sequence[str],
    table_version: int,
) -> psycopg.Cursor[DictRow]:
    """The query of :func:`partition_heads`, rows unread: in pipeline mode it is only queued,
    so it can travel in one round trip with other statements (see the commit protocol)."""
    return conn.execute(
        query("partition_heads"),
        {"table_id": table_id, "descs": list(descs), "table_version": table_version},
    )


def heads_from_rows(rows: Iterable[DictRow]) -> dict[str, PartitionHead | None]:
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
    """Resolve heads to their live files: one indexed query for any number of heads, and a
    fold on columns (no Python object per file: a full plan of a million files must fit in a
    second)."""
    heads = list(heads)
    if not heads:
        return []
    owners, ops, blobs = _snapshot_manifests(conn, table_id, heads)
    counts = np.fromiter((blob.count(b"\n") for blob in blobs), np.int64, len(blobs))
    live, groups = fold_ops(parse_ops(blobs), np.repeat(owners, counts))
    bounds = np.searchsorted(groups, np.arange(len(heads) + 1))
    flags = vectored(live)
    marked = np.zeros(len(bounds), np.int64)
    if flags is not None:
        marked = np.concatenate([[0], np.cumsum(flags)])[bounds]
    ops_of: list[list[CommitOp]] = [[] for _ in heads]
    for owner, op in zip(owners.tolist(), ops, strict=True):
        ops_of[owner].append(op)
    return [
        PartitionSnapshot(
            head,
            tuple(ops_of[i]),
            live.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])),
            has_vectors=bool(marked[i + 1] > marked[i]),
        )
        for i, head in enumerate(heads)
    ]


def _snapshot_manifests(
    conn: psycopg.Connection[DictRow], table_id: uuid.UUID, heads: Sequence[PartitionHead]
) -> tuple[npt.NDArray[np.int64], list[CommitOp], list[bytes]]:
    """Each commit row of the heads' chains in order: the index of its head, its op, its
    manifest. A binary cursor: manifests arrive as bytes, never decoded as text."""
    with conn.cursor(binary=True, row_factory=tuple_row) as cur:
        rows = cur.execute(
            query("snapshot_manifests"),
            {
                "table_id": table_id,
                "descs": [h.partition_desc for h in heads],
                "starts": [h.snapshot_start for h in heads],
                "ends": [h.version for h in heads],
            },
        ).fetchall()
    missing = [(heads[r[0] - 1].partition_desc, r[1]) for r in rows if r[3] is None]
    if missing:
        raise RuntimeError(f"catalog is inconsistent: commit rows missing for {missing[:3]}")
    owners = np.fromiter((r[0] - 1 for r in rows), np.int64, len(rows))
    return owners, [CommitOp(r[2]) for r in rows], [r[3] for r in rows]
