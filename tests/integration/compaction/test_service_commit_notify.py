"""Every publish notifies LISTENers with the table id, inside the commit; nothing else does."""

from __future__ import annotations

import uuid

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from catalog import Catalog, CommitConflict, CommitOp
from catalog.committer import COMMIT_CHANNEL
from tests.fixtures.commits import adds, rewrite

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64())])


def received(conn: psycopg.Connection[tuple[object, ...]]) -> list[uuid.UUID]:
    return [uuid.UUID(n.payload) for n in conn.notifies(timeout=0.5, stop_after=10)]


def test_each_published_commit_notifies_its_tables(catalog: Catalog, catalog_dsn: str):
    events = catalog.create_table("logs.events", SCHEMA)
    other = catalog.create_table("logs.other", SCHEMA)
    with psycopg.connect(catalog_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(COMMIT_CHANNEL)))
        events.commit(CommitOp.APPEND, [adds("", "a")])
        assert received(listener) == [events.meta.table_id]

        with catalog.transaction() as tx:
            tx.commit_files(events, CommitOp.APPEND, [adds("", "b")])
            tx.commit_files(other, CommitOp.APPEND, [adds("", "c")])
        assert sorted(received(listener)) == sorted([events.meta.table_id, other.meta.table_id])

        # a commit that does not land sends nothing
        with pytest.raises(CommitConflict):
            events.commit(CommitOp.COMPACTION, [rewrite("", ["gone"], ["x"])], base_version=2)
        assert received(listener) == []
