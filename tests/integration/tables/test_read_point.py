"""``Catalog.read_point(..., consistent=True)``: the newest cut holding whole source transactions,
over commits built by hand as a consistent-mode ingest job makes them (issue 13)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitRequest,
    IdempotencyKey,
    NoConsistentCutError,
    ReadPoint,
    SourcePoint,
    SourceWatermark,
    Table,
)
from catalog.writes import stage_append

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("amount", pa.int64())])


def at(n: int) -> SourcePoint:
    return SourcePoint(position=f"{n:032x}", transaction=f"tx{n}")


def commit(
    catalog: Catalog,
    batch: int,
    rows: dict[Table, list[int]],
    mark: int,
    *,
    exceptions: tuple[str, ...] = (),
    job: str = "bank",
) -> None:
    tables = tuple(
        stage_append(t.meta, pa.table({"amount": amounts}, schema=SCHEMA))
        for t, amounts in rows.items()
    )
    catalog.commit(
        CommitRequest(
            tables=tables,
            key=IdempotencyKey(writer_id=f"{job}:inc1", batch_id=batch),
            progress_key=job,
            source_watermark=SourceWatermark(batch=at(mark), exceptions=exceptions),
        )
    )


def balanced(catalog: Catalog, cut: ReadPoint) -> bool:
    """The invariant every transfer keeps in the source: money left = money arrived."""
    debits = catalog.load_table("bank.debits").scan(version=cut.versions["bank.debits"])
    credits = catalog.load_table("bank.credits").scan(version=cut.versions["bank.credits"])
    return _sum(debits.to_arrow()) == _sum(credits.to_arrow())


def _sum(rows: pa.Table) -> int:
    return sum(rows.column("amount").to_pylist())


def test_the_cut_steps_back_past_versions_published_with_exceptions(catalog: Catalog):
    debits = catalog.create_table("bank.debits", SCHEMA)
    credits = catalog.create_table("bank.credits", SCHEMA)
    commit(catalog, 0, {debits: [10], credits: [10]}, 1)
    first = catalog.read_point(["bank.debits", "bank.credits"], consistent=True)
    # T2's credit has not arrived after max_hold; on_timeout: publish sends the debit alone
    commit(catalog, 1, {debits: [5]}, 2, exceptions=("T2",))
    # the late credit (named again) with a whole T3
    commit(catalog, 2, {debits: [7], credits: [5, 7]}, 3, exceptions=("T2",))
    held_back = catalog.read_point(["bank.debits", "bank.credits"], consistent=True)
    heads = catalog.read_point(["bank.debits", "bank.credits"])
    assert held_back == first and held_back.watermark == at(1)
    assert heads == {"bank.debits": 3, "bank.credits": 2}
    assert balanced(catalog, held_back)
    commit(catalog, 3, {debits: [1], credits: [1]}, 4)
    latest = catalog.read_point(["bank.debits", "bank.credits"], consistent=True)
    assert latest.versions == catalog.read_point(["bank.debits", "bank.credits"])
    assert latest.watermark == at(4) and balanced(catalog, latest)


def test_a_table_the_last_batch_did_not_touch_is_read_at_its_head(catalog: Catalog):
    debits = catalog.create_table("bank.debits", SCHEMA)
    credits = catalog.create_table("bank.credits", SCHEMA)
    commit(catalog, 0, {debits: [10], credits: [10]}, 1)
    audit = catalog.create_table("bank.audit", SCHEMA)
    commit(catalog, 1, {audit: [0]}, 2)
    cut = catalog.read_point(["bank.debits", "bank.credits", "bank.audit"], consistent=True)
    assert cut.versions == {"bank.debits": 1, "bank.credits": 1, "bank.audit": 1}
    assert cut.watermark == at(2)


def test_tables_without_a_watermark_are_refused_by_name(catalog: Catalog):
    debits = catalog.create_table("bank.debits", SCHEMA)
    commit(catalog, 0, {debits: [10]}, 1)
    events = catalog.create_table("logs.events", SCHEMA)
    events.append(pa.table({"amount": [1]}, schema=SCHEMA))
    with pytest.raises(NoConsistentCutError, match=r"logs\.events") as caught:
        catalog.read_point(["bank.debits", "logs.events"], consistent=True)
    assert caught.value.tables == ("logs.events",)


def test_tables_of_two_jobs_meet_at_the_slower_jobs_point(catalog: Catalog):
    debits = catalog.create_table("bank.debits", SCHEMA)
    credits = catalog.create_table("bank.credits", SCHEMA)
    commit(catalog, 0, {debits: [1]}, 10, job="fast")
    commit(catalog, 0, {credits: [1]}, 20, job="slow")
    commit(catalog, 1, {debits: [1]}, 30, job="fast")
    cut = catalog.read_point(["bank.debits", "bank.credits"], consistent=True)
    assert cut.versions == {"bank.debits": 1, "bank.credits": 1}
    assert cut.watermark == at(10)


def test_a_point_far_back_in_a_long_history_is_found(catalog: Catalog):
    """The first read covers a table's newest 64 versions; the cut may lie further back."""
    debits = catalog.create_table("bank.debits", SCHEMA)
    commit(catalog, 0, {debits: [10]}, 1)
    for _ in range(70):  # batch writes: no watermark, so no consistent point
        debits.append(pa.table({"amount": [1]}, schema=SCHEMA))
    cut = catalog.read_point(["bank.debits"], consistent=True)
    assert cut.versions == {"bank.debits": 1} and cut.watermark == at(1)
