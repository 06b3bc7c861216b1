"""Reads are interactive: with the catalog down they fail at once with CatalogUnavailableError
(a CatalogError), and a guarded call waits the same outage out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CatalogError,
    CatalogOutageError,
    CatalogUnavailableError,
    CommitOp,
    OutageGuard,
    OutagePolicy,
    StoreSettings,
    Table,
    UnavailableKind,
)
from tests.fixtures.commits import adds, file_names
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.outage import CrashablePostgres

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
QUICK = StoreSettings(pool_size=2, connect_timeout=2)


@pytest.mark.slow
def test_reads_fail_fast_while_a_guarded_call_waits_for_the_database(
    outage_pg: CrashablePostgres, tmp_path: Path
):
    dsn = outage_pg.database()
    with Catalog.connect(dsn, warehouse=tmp_path, settings=QUICK) as catalog:
        table = catalog.create_table("logs.events", SCHEMA)
        table.commit(CommitOp.APPEND, [adds("", "a")])
        outage_pg.crash()
        try:
            for read in (
                table.scan,
                table.plan,
                table.history,
                lambda: catalog.load_table("logs.events"),
            ):
                with pytest.raises(CatalogUnavailableError) as raised:
                    read()
                assert isinstance(raised.value, CatalogError)
                assert raised.value.kind is not None and raised.value.kind.is_outage
        finally:
            outage_pg.recover()

        guard = OutageGuard("catalog", OutagePolicy(budget=60, max_delay=0.5))
        outage = outage_pg.outage(3)
        files = guard.call("plan", lambda: file_names(table.plan().files))
        outage.wait()
        assert files == ["a"]
        stats = guard.stats()
        assert stats.outages == 1 and sum(stats.retries.values()) >= 1


def test_a_read_through_a_cut_network_is_a_catalog_error(
    outage_pg: CrashablePostgres, tmp_path: Path
):
    """The catalog boundary translates what the driver raises (issue 11): a read whose
    connection is cut raises CatalogUnavailableError, never a psycopg error."""
    dsn = outage_pg.database()
    proxy = FaultProxy(outage_pg.port)
    try:
        with Catalog.connect(
            proxy.dsn(dsn.rsplit("/", 1)[1]), warehouse=tmp_path, settings=QUICK
        ) as catalog:
            table = catalog.create_table("logs.events", SCHEMA)
            proxy.partition()
            with pytest.raises(CatalogUnavailableError) as raised:  # no budget is waited out
                table.scan()
            assert raised.value.kind in {UnavailableKind.CONNECTION, UnavailableKind.NO_CONNECTION}
            proxy.heal()
            assert table.scan().to_arrow().num_rows == 0
    finally:
        proxy.close()


READS_AND_WHAT_THEY_SEND: dict[str, tuple[bytes, Callable[[Catalog, Table], object]]] = {
    "load_table": (
        b"current_schema_id, partition_columns, hash_buckets",
        lambda catalog, _: catalog.load_table("logs.events"),
    ),
    "plan": (b"READ ONLY", lambda _, table: table.plan()),
    "scan": (b"READ ONLY", lambda _, table: table.scan().to_arrow()),
    "history": (b"commit_op, committed_at, writer_id, batch_id", lambda _, table: table.history()),
}


@pytest.mark.parametrize("read", sorted(READS_AND_WHAT_THEY_SEND))
def test_a_connection_cut_during_a_read_is_one_catalog_error(
    outage_pg: CrashablePostgres, tmp_path: Path, read: str
):
    """Cut mid-read, after the statement left the client: the caller gets exactly
    CatalogUnavailableError - no psycopg error, no store-internal type - and the next read
    works on a fresh connection."""
    marker, call = READS_AND_WHAT_THEY_SEND[read]
    dsn = outage_pg.database()
    proxy = FaultProxy(outage_pg.port)
    try:
        with Catalog.connect(
            proxy.dsn(dsn.rsplit("/", 1)[1]), warehouse=tmp_path, settings=QUICK
        ) as catalog:
            table = catalog.create_table("logs.events", SCHEMA)
            table.commit(CommitOp.APPEND, [adds("", "a")])
            rule = proxy.cut_when_sent(marker)
            with pytest.raises(Exception) as raised:
                call(catalog, table)
            assert rule.fired
            assert type(raised.value) is CatalogUnavailableError
            assert not isinstance(raised.value, psycopg.Error)
            assert raised.value.kind is UnavailableKind.CONNECTION
            assert isinstance(raised.value.__cause__, psycopg.OperationalError)
            assert file_names(table.plan().files) == ["a"]
    finally:
        proxy.close()


def test_concurrent_guarded_calls_share_one_outage(outage_pg: CrashablePostgres, tmp_path: Path):
    dsn = outage_pg.database()
    with Catalog.connect(dsn, warehouse=tmp_path, settings=QUICK) as catalog:
        catalog.create_table("logs.events", SCHEMA)
        guard = OutageGuard("catalog", OutagePolicy(budget=60, max_delay=0.5))
        outage = outage_pg.outage(3, noticed=lambda: guard.stats().outage_s is not None)
        found: list[list[str]] = []
        threads = [
            threading.Thread(target=lambda: found.append(guard.call("list", catalog.list_tables)))
            for _ in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        outage.wait()
        assert found == [["logs.events"]] * 3
        assert guard.stats().outages >= 1


def test_a_budget_shorter_than_the_connection_wait_ends_the_outage_on_time(
    outage_pg: CrashablePostgres, tmp_path: Path
):
    dsn = outage_pg.database()
    settings = StoreSettings(pool_size=2)  # the pool waits up to 10 s for a connection
    with Catalog.connect(dsn, warehouse=tmp_path, settings=settings) as catalog:
        catalog.create_table("logs.events", SCHEMA)
        guard = OutageGuard("catalog", OutagePolicy(budget=2, max_delay=0.5))
        outage_pg.crash()
        try:
            began = time.monotonic()
            with pytest.raises(CatalogOutageError) as raised:
                guard.call("list", catalog.list_tables)
            took = time.monotonic() - began
        finally:
            outage_pg.recover()
        assert settings.connect_timeout == 10
        # each attempt waited for a connection only as long as the budget had left
        assert raised.value.outage_s <= 2.5 and took < 6
        assert guard.call("list", catalog.list_tables) == ["logs.events"]
