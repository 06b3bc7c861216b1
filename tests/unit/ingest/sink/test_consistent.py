"""The driver's decisions in consistent mode: what is written directly, and the second pass when
a transaction written directly turns out incomplete (a straggler)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from catalog import DataFile, WriterProgress
from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec
from ingest.errors import IngestError
from ingest.kafka.offsets import OffsetRange
from ingest.sink.consistent import (
    BatchTransactions,
    CandidateNotPublished,
    TxnPolicy,
    collection_of,
    first_range,
    load_book,
    merged_ranks,
    planned_ranges,
    resumed_start,
)
from ingest.sink.held import HELD_SCHEMA
from ingest.sink.plan import Holding
from ingest.sink.report import TaskReport, TxnRanks
from ingest.sink.whole import _dissolved as dissolved
from ingest.transactions import MarkerStatus, OnTimeout, TransactionBook, TransactionMarker
from ingest.transactions.ranges import from_mask, to_mask

POLICY = TxnPolicy(max_hold_s=300.0, on_timeout=OnTimeout.WAIT)


def end(txn: str, count: int, lsn: int) -> TransactionMarker:
    return TransactionMarker(
        MarkerStatus.END, txn, event_count=count, ts_ms=1000 + lsn, position=f"{lsn:032x}"
    )


def report(**seen: list[tuple[int, int]]) -> TaskReport:
    return TaskReport(txn_ranks=TxnRanks.of({t: to_mask(tuple(r)) for t, r in seen.items()}))


def batch(book: TransactionBook, candidates: tuple[str, ...]) -> BatchTransactions:
    return BatchTransactions(book, POLICY, now=10.0, candidates=candidates, settled=frozenset())


def test_tasks_reports_are_merged_per_transaction() -> None:
    merged = merged_ranks([report(T1=[(1, 1)]), report(T1=[(2, 3)], T2=[(1, 1)])])
    assert from_mask(merged["T1"]) == ((1, 3),)
    assert from_mask(merged["T2"]) == ((1, 1),)


def test_ranks_survive_the_report_json_and_count_once_across_tasks() -> None:
    """A task's masks go back to the driver as JSON; a rank two tasks saw (a replayed event)
    counts once, and a transaction of a million events costs no million-digit number."""
    huge = TxnRanks.of({"T1": to_mask(((1, 1_000_000),)), "T2": to_mask(((1, 2), (5, 5)))})
    back = TaskReport.model_validate_json(TaskReport(txn_ranks=huge).model_dump_json())
    merged = merged_ranks([back, report(T2=[(2, 3)])])
    assert from_mask(merged["T1"]) == ((1, 1_000_000),)
    assert from_mask(merged["T2"]) == ((1, 3), (5, 5))


def test_a_straggler_in_an_earlier_transaction_holds_back_every_later_one() -> None:
    """T1: A-=10, B+=10 (3 events, one not yet read); T2: A-=5, C+=5 complete. T2's image of A
    includes T1, so publishing T2 without T1's B would show a sum off by 10: neither goes."""
    book = TransactionBook().add_markers([end("T1", 3, 100), end("T2", 2, 200)], now=1.0)
    txn = batch(book, ("T1", "T2"))
    reports = [report(T1=[(1, 2)]), report(T2=[(1, 2)])]

    with pytest.raises(CandidateNotPublished) as raised:
        txn.decide(reports)
    assert raised.value.txn == "T1"
    assert txn.publish == frozenset()  # the next pass writes neither directly

    decision = txn.decide(reports)
    assert decision.publish == ()
    assert decision.blocking == "T1"
    assert txn.job_state()["held"] == {
        "transactions": 2,
        "events": 4,
        "oldest_first_seen": dt.datetime.fromtimestamp(1.0, tz=dt.UTC).isoformat(),
        "blocking": "T1",
    }
    assert txn.watermark(["public.accounts"]) is None  # nothing published yet


def test_complete_candidates_publish_with_the_watermark_of_the_last() -> None:
    book = TransactionBook().add_markers([end("T1", 1, 100), end("T2", 2, 200)], now=1.0)
    txn = batch(book, ("T1", "T2"))
    decision = txn.decide([report(T1=[(1, 1)], T2=[(1, 2)])])
    assert decision.publish == ("T1", "T2")
    mark = txn.watermark(["public.a", "public.b"])
    assert mark is not None and mark.consistent
    assert mark.batch.transaction == "T2" and mark.batch.position == f"{200:032x}"
    assert set(mark.tables) == {"public.a", "public.b"}
    assert txn.changed()


def test_the_stored_book_is_read_back_and_the_collections_set() -> None:
    stored = TransactionBook().add_markers([end("T9", 2, 10)], now=1.0)
    progress = WriterProgress(
        writer_id="job",
        batch_id=3,
        commit_id=uuid.uuid4(),
        source_offsets={},
        updated_at=dt.datetime.now(dt.UTC),
        table_ids=[],
        job_state={"transactions": stored.to_json()},
    )
    book = load_book(progress, ["public.a"])
    assert [t.id for t in book.ended] == ["T9"]
    assert book.collections == ("public.a",)
    assert load_book(None, None) == TransactionBook()


def test_collection_of_a_debezium_topic() -> None:
    assert collection_of("dbserver1.public.accounts") == "public.accounts"
    assert collection_of("dbserver1.transaction") is None


def write_offsets(checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    folder = checkpoint / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offsets)}')


def test_planned_ranges_come_from_spark_offset_log(tmp_path: Path) -> None:
    write_offsets(tmp_path, 4, {"a": {"0": 10, "1": 5}, "t": {"0": 3}})
    write_offsets(tmp_path, 5, {"a": {"0": 20, "1": 5}, "t": {"0": 7}})
    assert planned_ranges(tmp_path, 5) == [OffsetRange("a", 0, 10, 20), OffsetRange("t", 0, 3, 7)]


def test_planned_ranges_are_unknown_without_the_batch_before_or_a_partition_start(
    tmp_path: Path,
) -> None:
    write_offsets(tmp_path, 5, {"a": {"0": 20}})
    assert planned_ranges(tmp_path, 5) is None  # offsets/4 is gone: the batch is asked instead
    write_offsets(tmp_path, 4, {"b": {"0": 1}})
    assert planned_ranges(tmp_path, 5) is None  # a partition the batch before did not have
    assert planned_ranges(tmp_path, 0) is None  # batch 0 without a saved start


def test_a_resumed_query_starts_after_its_last_committed_batch_or_runs_the_last_again(
    tmp_path: Path,
) -> None:
    assert resumed_start(tmp_path) is None  # no batch planned: the job's start decides
    write_offsets(tmp_path, 3, {"a": {"0": 10}})
    write_offsets(tmp_path, 4, {"a": {"0": 20}})
    assert resumed_start(tmp_path) == {"a": {"0": 10}}  # batch 4 is run again
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "4").write_text("v1\n{}")
    assert resumed_start(tmp_path) == {"a": {"0": 20}}  # batch 5 starts where 4 ended
    (tmp_path / "offsets" / "4").write_text("garbage")
    assert resumed_start(tmp_path) is None


def test_the_first_range_dissolves_the_held_files_and_only_its_task() -> None:
    ranges = [
        OffsetRange("db.public.b", 0, 10, 20),
        OffsetRange("db.public.a", 1, 5, 9),
        OffsetRange("db.public.a", 0, 7, 7),  # empty: owns nothing
    ]
    owner = first_range(ranges)
    assert owner == ("db.public.a", 1, 5)
    holding = Holding(held=_held_meta(), publish=frozenset(), dissolve=(_file(),), owner=owner)
    assert holding.owned_by([ranges[1]])
    assert holding.owned_by([OffsetRange("db.public.a", 1, 0, 6)])  # a task's split of it
    assert not holding.owned_by([ranges[0], ranges[2]])
    assert not holding.owned_by([OffsetRange("db.public.a", 1, 6, 9)])
    nothing_held = Holding(held=_held_meta(), publish=frozenset(), owner=owner)
    assert not nothing_held.owned_by([ranges[1]])
    assert first_range([ranges[2]]) is None


def _held_meta() -> TableMeta:
    return TableMeta(
        table_id=uuid.UUID(int=7),
        name=TableName("lakestream_jobs", "j_held"),
        location="/nowhere",
        spec=PartitionSpec((), -1),
        primary_key=(),
        properties={},
        schemas={0: HELD_SCHEMA},
        current_schema_id=0,
    )


def _file() -> DataFile:
    return DataFile(path="f.parquet", size_bytes=1, row_count=1)


def test_held_files_count_as_dissolved_only_when_a_task_read_every_event_back() -> None:
    files = (_file(), DataFile(path="g.parquet", size_bytes=1, row_count=4))
    holding = Holding(held=_held_meta(), publish=frozenset(), dissolve=files, owner=("t", 0, 0))
    assert dissolved(holding, [TaskReport(dissolved=5), TaskReport()]) is True
    assert dissolved(holding, [TaskReport(), TaskReport()]) is False  # the driver reads them
    nothing = Holding(held=_held_meta(), publish=frozenset())
    assert dissolved(nothing, [TaskReport()]) is False
    with pytest.raises(IngestError, match="read back 3 of the 5 held events"):
        dissolved(holding, [TaskReport(dissolved=3)])  # a loss: the batch is not committed
