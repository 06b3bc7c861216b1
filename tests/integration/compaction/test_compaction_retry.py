"""A compaction that finds its table locked past the committer's patience keeps its outputs and
commits again with growing back-off (fake time); when the policy is spent it gives up with a
typed CommitConflict (busy) and deletes its outputs, which never landed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog, CommitConflict, ConflictKind, RetryPolicy, StoreSettings, Table
from catalog.queries import query
from compaction.rewrite import compact
from compaction.task import OutcomeStatus
from tests.fixtures.compaction import files_on_disk, plan_tasks, rows_at
from tests.fixtures.postgres import catalog_connection
from tests.fixtures.racing import FakeTime

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def impatient(catalog_dsn: str, warehouse: Path) -> Iterator[Catalog]:
    """A catalog whose committer gives up on a locked table after one 100 ms lock wait."""
    cat = Catalog.connect(
        catalog_dsn,
        warehouse=warehouse,
        retry=RetryPolicy(attempts=1),
        settings=StoreSettings(lock_timeout_ms=100),
    )
    try:
        yield cat
    finally:
        cat.close()


class TableLock:
    """Another committer holding the table's head lock in an open transaction."""

    def __init__(self, dsn: str, table: Table) -> None:
        self.conn = catalog_connection(dsn)  # not autocommit: the lock holds until release
        self.conn.execute(query("lock_tables"), {"table_ids": [table.meta.table_id]})

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def small_files(table: Table) -> None:
    for n in range(3):
        table.append(pa.table({"id": [n], "v": [str(n)]}, schema=SCHEMA))


def test_a_busy_table_is_retried_with_back_off_then_given_up(impatient, catalog_dsn):
    table = impatient.create_table("logs.events", SCHEMA)
    small_files(table)
    [task] = plan_tasks(table)
    before, lock, time = files_on_disk(table), TableLock(catalog_dsn, table), FakeTime()
    try:
        with pytest.raises(CommitConflict) as raised:
            compact(impatient, task, retry=time.policy(3))
    finally:
        lock.release()
    assert raised.value.kind is ConflictKind.BUSY
    assert time.sleeps == [0.1, 0.2]
    assert files_on_disk(table) == before  # the outputs never landed and are gone
    assert table.current_version() == task.base_version


def test_a_busy_table_is_compacted_once_the_lock_is_released(impatient, catalog_dsn):
    table = impatient.create_table("logs.events", SCHEMA)
    small_files(table)
    [task] = plan_tasks(table)
    expected, lock, time = rows_at(table), TableLock(catalog_dsn, table), FakeTime()
    time.on_sleep = lambda n: lock.release() if n == 2 else None
    outcome = compact(impatient, task, retry=time.policy(4))
    assert outcome.status is OutcomeStatus.COMMITTED
    assert time.sleeps == [0.1, 0.2]
    assert rows_at(table) == expected and len(table.plan().files) == 1
