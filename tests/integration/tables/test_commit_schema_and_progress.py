"""Schema changes published with the data, and progress stored under a stable job name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitRejected,
    CommitRequest,
    IdempotencyKey,
    SourcePoint,
    SourceWatermark,
    WatermarkRegressed,
)
from catalog.schemas import to_base64
from catalog.writes import stage_append, stage_changes, upserts

pytestmark = pytest.mark.integration
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int32())])


def test_a_new_column_lands_with_the_rows_that_carry_it(catalog: Catalog):
    table = catalog.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2)
    table.upsert(pa.table({"id": [1], "v": pa.array([1], pa.int32())}))
    wider = SCHEMA.append(pa.field("note", pa.string()))
    rows = pa.table({"id": [2], "v": pa.array([2], pa.int32()), "note": ["new"]}, schema=wider)
    evolved = table.meta.__class__(
        **{**table.meta.__dict__, "schemas": {0: wider}, "current_schema_id": 0}
    )
    commit = stage_changes(evolved, upserts(evolved, rows)).model_copy(
        update={"evolve_to": to_base64(wider)}
    )
    catalog.commit(CommitRequest(tables=(commit,)))
    table.refresh()
    assert table.schema.names == ["id", "v", "note"] and table.meta.current_schema_id == 1
    got = {r["id"]: r["note"] for r in table.scan().to_arrow().to_pylist()}
    assert got == {1: None, 2: "new"}


def test_an_incompatible_change_fails_the_commit_naming_the_column(catalog: Catalog):
    table = catalog.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=2)
    narrower = pa.schema([("id", pa.int64()), ("v", pa.int8())])
    commit = stage_changes(
        table.meta, upserts(table.meta, pa.table({"id": [1], "v": pa.array([1], pa.int32())}))
    ).model_copy(update={"evolve_to": to_base64(narrower)})
    with pytest.raises(CommitRejected, match="'v'"):
        catalog.commit(CommitRequest(tables=(commit,)))
    assert table.current_version() == 0 and table.refresh().meta.current_schema_id == 0


def test_progress_is_kept_under_the_job_name_across_key_incarnations(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    data = pa.table({"id": [1], "v": pa.array([1], pa.int32())})
    for incarnation, batch, offset in [("a", 0, 10), ("a", 1, 20), ("b", 0, 30)]:
        catalog.commit(
            CommitRequest(
                tables=(stage_append(table.meta, data),),
                key=IdempotencyKey(writer_id=f"job:{incarnation}", batch_id=batch),
                source_offsets={"t": {"0": offset}},
                progress_key="job",
            )
        )
    progress = catalog.writer_progress("job")
    assert progress.source_offsets == {"t": {"0": 30}}
    assert table.scan().count() == 3


def test_watermark_and_job_state_are_stored_with_the_commit(catalog: Catalog):
    """What a restarted job resumes from (its state) and what readers ask about (how far the lake
    is transaction-consistent) land in the same transaction as the data."""
    orders = catalog.create_table("shop.orders", SCHEMA)
    audit = catalog.create_table("shop.audit", SCHEMA)
    data = pa.table({"id": [1], "v": pa.array([1], pa.int32())})
    batch = SourcePoint(position="00" * 15 + "2a", transaction="tx-42")
    mark = SourceWatermark(
        batch=batch, tables={"shop.audit": SourcePoint(position="00" * 15 + "29")}
    )
    catalog.commit(
        CommitRequest(
            tables=(stage_append(orders.meta, data), stage_append(audit.meta, data)),
            key=IdempotencyKey(writer_id="job:a", batch_id=0),
            progress_key="job",
            source_watermark=mark,
            job_state={"held": {"transactions": 1}},
        )
    )
    progress = catalog.writer_progress("job")
    assert progress.source_watermark == mark and progress.job_state == {"held": {"transactions": 1}}
    assert orders.history()[0].source_watermark == batch
    assert audit.history()[0].source_watermark == mark.tables["shop.audit"]
    assert orders.history()[0].watermark_exceptions == ()


def test_a_commit_without_a_watermark_shows_none(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    table.append(pa.table({"id": [1], "v": pa.array([1], pa.int32())}))
    assert table.history()[0].source_watermark is None


def test_a_watermark_that_would_move_back_is_rejected_and_nothing_lands(catalog: Catalog):
    """Issue 46: a commit whose source watermark lies before the writer's last one does not land
    (the sign of transactions published out of commit order); an equal one, or none, does."""
    table = catalog.create_table("shop.orders", SCHEMA)
    data = pa.table({"id": [1], "v": pa.array([1], pa.int32())})

    def commit(batch: int, position: str | None) -> None:
        mark = None
        if position is not None:
            mark = SourceWatermark(batch=SourcePoint(position=position, transaction=f"t{batch}"))
        catalog.commit(
            CommitRequest(
                tables=(stage_append(table.meta, data),),
                key=IdempotencyKey(writer_id="job:a", batch_id=batch),
                progress_key="job",
                source_offsets={"t": {"0": batch}},
                source_watermark=mark,
            )
        )

    commit(0, "00" * 15 + "2a")
    commit(1, "00" * 15 + "2a")  # the same point again (nothing new published): fine
    with pytest.raises(WatermarkRegressed, match="would move back") as caught:
        commit(2, "00" * 15 + "29")
    assert isinstance(caught.value, CommitRejected) and caught.value.writer_id == "job:a"
    assert table.current_version() == 2 and table.scan().count() == 2
    assert catalog.writer_progress("job").source_offsets == {"t": {"0": 1}}
    commit(2, None)  # a batch that publishes no transaction carries no watermark
    commit(3, "00" * 14 + "012b")
    assert table.scan().count() == 4
