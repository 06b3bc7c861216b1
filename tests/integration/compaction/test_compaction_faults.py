"""The connection dies while a compaction's COMMIT is in flight: exactly one compaction lands
and its outputs are the ones the table references."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp, RetryPolicy
from compaction.rewrite import compact
from compaction.task import OutcomeStatus
from jobs.localpg import LocalPostgres
from tests.fixtures.compaction import files_on_disk, plan_tasks, rows_at
from tests.fixtures.faultproxy import FaultProxy

pytestmark = pytest.mark.integration
PATIENT = RetryPolicy(attempts=40, base_delay=0.02, max_delay=0.5, deadline=60)


@pytest.fixture
def proxy(pg_server: LocalPostgres):
    fault_proxy = FaultProxy(pg_server.port)
    yield fault_proxy
    fault_proxy.close()


@pytest.mark.parametrize("delivered", [True, False], ids=["commit-landed", "commit-lost"])
def test_connection_cut_at_the_compaction_commit(catalog_dsn, warehouse, proxy, delivered):
    cat: Catalog = Catalog.connect(
        proxy.dsn(catalog_dsn.rsplit("/", 1)[1]), warehouse=warehouse, retry=PATIENT
    )
    with cat:
        table = cat.create_table("logs.events", pa.schema([("id", pa.int64())]))
        for i in range(5):
            table.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
        before = rows_at(table)
        [task] = plan_tasks(table)
        rule = proxy.cut_at_commit(deliver_commit=delivered)

        outcome = compact(cat, task)

        assert rule.fired
        assert outcome.status is OutcomeStatus.COMMITTED and outcome.version == 6
        assert [v.op for v in table.history()][:2] == [CommitOp.COMPACTION, CommitOp.APPEND]
        assert table.current_version() == 6
        assert [f.path for f in table.plan().files] == [f.path for f in outcome.outputs]
        assert rows_at(table) == before
        live = {f.path for f in table.plan().files}
        inputs = {f.path for f in task.inputs}
        assert files_on_disk(table) == live | inputs  # nothing else was written


def test_a_table_dropped_while_its_compaction_is_written_ends_as_replan(catalog: Catalog):
    # The worker's view: the inputs checked out and the outputs are on disk when the drop lands.
    from catalog.files import WriteOptions
    from compaction.rewrite import _land, _write

    table = catalog.create_table("logs.events", pa.schema([("id", pa.int64())]))
    for i in range(5):
        table.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))
    [task] = plan_tasks(table)
    outputs = _write(table.meta, task, WriteOptions(target_file_bytes=task.target_file_size))
    written = files_on_disk(table)
    catalog.drop_table("logs.events")

    landing = _land(table, task, outputs)

    assert landing.status is OutcomeStatus.REPLAN and "dropped" in landing.detail
    assert files_on_disk(table) == written - {f.path for f in outputs}  # outputs removed
