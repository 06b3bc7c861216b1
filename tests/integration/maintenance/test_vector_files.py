"""Vector files under expiry and vacuum: they live and die with the file entries that name them.

No writer produces vectors yet, so the commits here are what a resolver or a DML statement will
commit (design D3): a ``compaction`` that names the partition's files again, one of them with a
vector, and rewrites no data.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    Table,
    VectorRef,
)
from catalog.files.vectors import load_vector, store_vectors
from catalog.snapshots import all_partition_heads, load_snapshots
from tests.fixtures.compaction import files_on_disk

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])
ZERO = dt.timedelta(0)
EU = "region=eu"


def append(table: Table, *ids: int) -> None:
    table.append(pa.table({"id": list(ids), "region": ["eu"] * len(ids)}, schema=SCHEMA))


def vector_file(table: Table, data_file: DataFile, positions: range) -> VectorRef:
    """A vector of ``data_file`` written to a new vector file of the partition (as a writer
    does before it commits)."""
    refs = store_vectors(
        table.meta.files, {data_file.path: positions}, partition=[("region", "eu")], inline_max=0
    )
    ref = refs[data_file.path]
    assert ref.path is not None
    return ref


def mark(table: Table, data_file: DataFile, ref: VectorRef) -> int:
    """Commit ``ref`` as ``data_file``'s vector, the way a reset op does: the file named again
    with its new entry."""
    marked = data_file.model_copy(update={"vector": ref})
    ops = (
        FileOp(action=FileAction.DELETE, file=data_file),
        FileOp(action=FileAction.ADD, file=marked),
    )
    base = table.current_version()
    result = table.commit(
        CommitOp.COMPACTION, [PartitionCommit(partition_desc=EU, ops=ops)], base_version=base
    )
    version = result.version_of(str(table.meta.name))
    assert version is not None
    return version


def entries_at(catalog: Catalog, table: Table, version: int) -> list[DataFile]:
    """The file entries a version holds, as expiry and the commit protocol read them."""
    with catalog.store.connection() as conn:
        heads = all_partition_heads(conn, table.meta.table_id, version)
        return [f for s in load_snapshots(conn, table.meta.table_id, heads) for f in s.live_files()]


def cleanup_paths(catalog: Catalog) -> set[str]:
    rows = catalog.store.fetch_all("SELECT path FROM cleanup_file", {})
    return {r["path"] for r in rows}


def backdate(table: Table, *paths: str) -> None:
    an_hour_ago = time.time() - 3600
    for rel in paths:
        os.utime(Path(table.meta.location) / rel, (an_hour_ago, an_hour_ago))


def test_expiry_hands_a_vector_file_no_kept_version_names_to_cleanup(catalog: Catalog):
    table = catalog.create_table("logs.marked", SCHEMA, partition_by=["region"])
    append(table, *range(100))
    [data] = table.plan().files
    first = vector_file(table, data, range(0, 100, 2))
    mark(table, data, first)
    second = vector_file(table, data, range(0, 100, 3))
    latest = mark(table, data, second)

    report = table.expire_versions(older_than=ZERO, retain_last=1)

    assert report.horizon == latest
    assert cleanup_paths(catalog) == {first.path}  # not the data file, not the kept vector
    [entry] = entries_at(catalog, table, latest)
    assert entry.path == data.path and entry.vector == second
    assert list(load_vector(table.meta.files, second)) == list(range(0, 100, 3))


def test_a_restarted_chain_keeps_its_entries_vectors_and_their_files(catalog: Catalog):
    table = catalog.create_table("logs.marked", SCHEMA, partition_by=["region"])
    append(table, 1, 2, 3)
    [data] = table.plan().files
    ref = vector_file(table, data, range(1, 2))
    mark(table, data, ref)
    append(table, 4)  # the chain of the latest version now starts at the mark
    latest = table.current_version()
    before = entries_at(catalog, table, latest)

    report = table.expire_versions(older_than=ZERO, retain_last=1)

    assert report.chains_restarted == 1
    assert entries_at(catalog, table, latest) == before  # vector included
    assert ref.path not in cleanup_paths(catalog)
    assert table.vacuum(older_than=ZERO).deleted == 0
    assert ref.path in files_on_disk(table)


def test_vacuum_deletes_an_orphan_vector_file_and_keeps_a_named_one(catalog: Catalog):
    table = catalog.create_table("logs.marked", SCHEMA, partition_by=["region"])
    append(table, *range(10))
    [data] = table.plan().files
    named = vector_file(table, data, range(0, 10, 2))
    mark(table, data, named)
    orphan = vector_file(table, data, range(0, 10, 5))  # a writer that died before preparing
    assert named.path is not None and orphan.path is not None
    backdate(table, named.path, orphan.path, data.path)

    report = table.vacuum(older_than=ZERO)

    assert report.paths == (orphan.path,) and report.orphans == 1
    on_disk = files_on_disk(table)
    assert orphan.path not in on_disk and {named.path, data.path} <= on_disk
    assert list(load_vector(table.meta.files, named)) == [0, 2, 4, 6, 8]
