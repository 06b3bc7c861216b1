"""Faults the commit protocol must survive without losing or duplicating a commit."""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitOp,
    CommitRejected,
    CommitResult,
    IdempotencyKey,
    RetryPolicy,
    StoreSettings,
)
from catalog.committer import Committer
from jobs.localpg import LocalPostgres
from tests.fixtures.commits import adds, file_names, landing_while_deciding
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.postgres import catalog_connection
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
PATIENT = RetryPolicy(attempts=40, base_delay=0.02, max_delay=0.5, deadline=60)


def dbname(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


@pytest.fixture
def proxy(pg_server: LocalPostgres):
    fault_proxy = FaultProxy(pg_server.port)
    yield fault_proxy
    fault_proxy.close()


class DecidesUnderLocks(Committer):
    """Skips the unlocked decision: takes the table locks first, as a stale one falls back to."""

    def _decided_under_locks(self, request):
        return True


@pytest.mark.parametrize("locked", [False, True], ids=["decided-unlocked", "decided-under-locks"])
@pytest.mark.parametrize("delivered", [True, False], ids=["commit-landed", "commit-lost"])
def test_connection_dies_during_commit(catalog_dsn, warehouse, proxy, delivered, locked):
    """Commit sent, connection cut before the answer: resolved by key, exactly one commit."""
    cat = Catalog.connect(proxy.dsn(dbname(catalog_dsn)), warehouse=warehouse, retry=PATIENT)
    if locked:
        cat._committer = DecidesUnderLocks(cat.store, cat._committer._policy)
    table = cat.create_table("logs.events", SCHEMA)
    table.commit(CommitOp.APPEND, [adds("", "before")])
    rule = proxy.cut_at_commit(deliver_commit=delivered)
    key = IdempotencyKey(writer_id="job-1", batch_id=7)

    result = table.commit(CommitOp.APPEND, [adds("", "batch7")], key=key)

    assert rule.fired
    assert result.version_of("logs.events") == 2 and not result.replayed
    # landed: the first attempt's outcome, found by its key; lost: the second attempt's
    assert result.attempts == (1 if delivered else 2)
    assert file_names(table.plan().files) == ["before", "batch7"]
    assert [v.version for v in table.history()] == [2, 1]
    assert cat.resolve_commit("job-1", 7).commit_id == result.commit_id
    cat.close()


def test_a_cut_commit_still_waiting_for_its_lock_is_ended_before_the_retry(
    catalog_dsn, warehouse, proxy, caplog
):
    """The publishing statement reached the server but waits behind another commit's lock when
    the network fails, and the server does not notice. Left alone it would land whenever that
    lock frees, possibly after the key was looked up; so the backend is ended first, and the
    retry lands the batch once."""
    cat = Catalog.connect(proxy.dsn(dbname(catalog_dsn)), warehouse=warehouse, retry=PATIENT)
    table = cat.create_table("logs.events", SCHEMA)
    table.commit(CommitOp.APPEND, [adds("", "before")])
    holder = catalog_connection(catalog_dsn)
    holder.execute(
        "SELECT version FROM table_head WHERE table_id = %s FOR UPDATE", (table.meta.table_id,)
    )
    threading.Timer(2.0, holder.close).start()  # the other commit finishes (rolls back) later
    rule = proxy.cut_at_commit(deliver_commit=True, silent=True)

    with caplog.at_level(logging.WARNING, logger="lakestream"):
        result = table.commit(
            CommitOp.APPEND, [adds("", "batch")], key=IdempotencyKey(writer_id="w", batch_id=1)
        )

    assert rule.fired
    ended = [r for r in caplog.records if r.getMessage().startswith("commit_backend_ended")]
    assert len(ended) == 1 and "ended=True" in ended[0].getMessage()
    assert result.version_of("logs.events") == 2
    assert file_names(table.plan().files) == ["before", "batch"]
    assert [v.version for v in table.history()] == [2, 1]
    cat.close()


def test_a_table_dropped_while_the_commit_decides_is_refused(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    with (
        landing_while_deciding(lambda: catalog.drop_table("logs.events")) as fired,
        pytest.raises(CommitRejected, match="was dropped"),
    ):
        table.commit(CommitOp.APPEND, [adds("", "late")])
    assert fired


def test_a_key_committed_while_the_commit_decides_makes_it_a_replay(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    key = IdempotencyKey(writer_id="job-1", batch_id=3)
    first: list[CommitResult] = []
    with landing_while_deciding(
        lambda: first.append(table.commit(CommitOp.APPEND, [adds("", "first")], key=key))
    ):
        again = table.commit(CommitOp.APPEND, [adds("", "second")], key=key)
    assert again.replayed and again.commit_id == first[0].commit_id
    assert file_names(table.plan().files) == ["first"]
    assert table.current_version() == 1


def test_replayed_batch_returns_the_first_commit(catalog: Catalog, catalog_dsn: str):
    table = catalog.create_table("logs.events", SCHEMA)
    key = IdempotencyKey(writer_id="job-1", batch_id=1)
    first = table.commit(CommitOp.APPEND, [adds("", "a")], key=key, source_offsets={"t": {"0": 5}})
    again = table.commit(CommitOp.APPEND, [adds("", "a-recomputed")], key=key)
    assert again.replayed and again.commit_id == first.commit_id
    assert file_names(table.plan().files) == ["a"]
    progress = catalog.writer_progress("job-1")
    assert progress.batch_id == 1 and progress.source_offsets == {"t": {"0": 5}}
    assert progress.table_ids == [table.meta.table_id]
    table.commit(CommitOp.APPEND, [adds("", "one-off")])  # anonymous: no progress row kept
    with catalog_connection(catalog_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM writer_progress").fetchone() == (1,)


def test_a_key_reused_for_another_table_is_refused(catalog: Catalog):
    old = catalog.create_table("logs.events", SCHEMA)
    key = IdempotencyKey(writer_id="job-1", batch_id=1)
    old.commit(CommitOp.APPEND, [adds("", "a")], key=key)
    catalog.drop_table("logs.events")
    new = catalog.create_table("logs.events", SCHEMA)
    with pytest.raises(CommitRejected, match="already committed to other tables"):
        new.commit(CommitOp.APPEND, [adds("", "b")], key=key)
    assert new.current_version() == 0


CRASH_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from catalog import Catalog, CommitOp, CommitRequest, TableCommit, IdempotencyKey
    from catalog.committer import _Publication
    from tests.fixtures.commits import adds

    def dies_before_publishing(self, plans):  # the prepare committed with the reads
        os.kill(os.getpid(), signal.SIGKILL)

    _Publication._decision = dies_before_publishing
    cat = Catalog.connect(sys.argv[1])
    cat.commit(CommitRequest(
        tables=(TableCommit(table="logs.events", op=CommitOp.APPEND,
                            partitions=(adds("", "orphan"),)),),
        key=IdempotencyKey(writer_id="crashy", batch_id=1)))
""")


def test_writer_killed_between_commit_rows_and_publishing(catalog: Catalog, catalog_dsn):
    table = catalog.create_table("logs.events", SCHEMA)
    table.commit(CommitOp.APPEND, [adds("", "kept")])
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, catalog_dsn],
        cwd=Path(__file__).parents[3],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]

    assert table.current_version() == 1
    assert file_names(table.plan().files) == ["kept"]
    assert catalog.resolve_commit("crashy", 1) is None
    leftovers = catalog.leftovers(older_than=dt.timedelta(0))
    assert [lo.paths for lo in leftovers] == [("orphan.parquet",)]
    assert leftovers[0].reason == "commit never published"
    # the table is not blocked: the next writer commits normally
    table.commit(CommitOp.APPEND, [adds("", "next")])
    assert file_names(table.plan().files) == ["kept", "next"]


def test_writer_killed_inside_the_publish_transaction_releases_the_table(catalog, catalog_dsn):
    """A backend holding the head lock dies: PostgreSQL rolls back, the next commit proceeds."""
    table = catalog.create_table("logs.events", SCHEMA)
    holder = catalog_connection(catalog_dsn)
    holder.execute(
        "SELECT version FROM table_head WHERE table_id = %s FOR UPDATE", (table.meta.table_id,)
    )
    done = threading.Event()
    threading.Thread(
        target=lambda: (table.commit(CommitOp.APPEND, [adds("", "x")]), done.set())
    ).start()
    assert not done.wait(0.5)  # blocked behind the lock holder
    with psycopg.connect(catalog_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (holder.info.backend_pid,))
    assert done.wait(10)
    holder.close()
    assert file_names(table.plan().files) == ["x"]


WAITING_WRITER = textwrap.dedent("""
    import sys
    from catalog import Catalog, CommitOp, CommitRequest, TableCommit, IdempotencyKey
    from tests.fixtures.commits import adds

    Catalog.connect(sys.argv[1]).commit(CommitRequest(
        tables=(TableCommit(table="logs.events", op=CommitOp.APPEND,
                            partitions=(adds("", "zombie"),)),),
        key=IdempotencyKey(writer_id="zombie", batch_id=1)))
""")


def test_a_writer_killed_while_its_commit_waits_for_a_lock_never_publishes(
    catalog: Catalog, catalog_dsn
):
    """The publishing statement commits by itself once it has the locks. A writer killed while
    it waits must not publish when the lock frees - a restarted writer may already have read
    the catalog's offsets and started over from them - so its backend gives the statement up."""
    table = catalog.create_table("logs.events", SCHEMA)
    holder = catalog_connection(catalog_dsn)
    holder.execute(
        "SELECT version FROM table_head WHERE table_id = %s FOR UPDATE", (table.meta.table_id,)
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", WAITING_WRITER, catalog_dsn], cwd=Path(__file__).parents[3]
    )
    with psycopg.connect(catalog_dsn, autocommit=True) as admin:
        waiting = wait_for(
            lambda: backend_waiting(admin, "publish_commit", "Lock"),
            "the writer's commit waiting for the lock",
            timeout=60,
            every=0.05,
        )
        writer.kill()
        writer.wait(timeout=10)
        time.sleep(1.0)  # well within lock_timeout (5 s): a waiting statement would still wait
        holder.close()  # the lock frees
        wait_for(
            lambda: backend_gone(admin, waiting),
            "the dead writer's statement to end",
            timeout=10,
            every=0.05,
        )

    assert catalog.resolve_commit("zombie", 1) is None
    assert table.current_version() == 0
    table.commit(CommitOp.APPEND, [adds("", "next")])
    assert file_names(table.plan().files) == ["next"]


def backend_waiting(admin: psycopg.Connection, query_part: str, wait_type: str) -> int | None:
    row = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND wait_event_type = %s",
        (f"%{query_part}%", wait_type),
    ).fetchone()
    return None if row is None else int(row[0])


def backend_gone(admin: psycopg.Connection, pid: int) -> bool:
    return admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is None


def test_database_restart_loses_and_duplicates_nothing(pg_server, catalog_dsn, warehouse):
    cat = Catalog.connect(
        catalog_dsn, warehouse=warehouse, retry=PATIENT, settings=StoreSettings(pool_size=2)
    )
    table = cat.create_table("logs.events", SCHEMA)
    errors: list[BaseException] = []

    def writer():
        try:
            for batch in range(60):
                table.commit(
                    CommitOp.APPEND,
                    [adds("", f"b{batch}")],
                    key=IdempotencyKey(writer_id="w", batch_id=batch),
                )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    while table.current_version() < 20:
        pass
    pg_server.restart()
    thread.join(120)
    assert not errors
    assert sorted(file_names(table.plan().files)) == sorted(f"b{i}" for i in range(60))
    assert [v.version for v in table.history(limit=1000)] == list(range(60, 0, -1))
    cat.close()
