"""The tasks' rank masks on their way to the driver: packed, through the report's JSON, merged."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.sink.report import (
    TaskReport,
    TxnRanks,
    merged_masks,
    read_report,
    report_row,
)

ids = st.sampled_from(["1", "2", "mysql-bin.000003:1234", "é\x00\"'\n", ""])
#: Ranks start at 1; rank 63 is the widest that travels as uint64, 64 the narrowest wide one.
ranks = st.sets(st.sampled_from([1, 2, 5, 62, 63, 64, 65, 200, 5000]), min_size=1)
task_masks = st.dictionaries(ids, ranks.map(lambda rs: sum(1 << r for r in rs)), max_size=5)


def through_json(masks: dict[str, int]) -> TxnRanks:
    report = TaskReport(txn_ranks=TxnRanks.of(masks))
    return TaskReport.model_validate_json(report.model_dump_json()).txn_ranks


@given(st.lists(task_masks, max_size=4))
def test_the_driver_gets_the_union_of_every_tasks_ranks(tasks: list[dict[str, int]]) -> None:
    """Whatever the ids, however wide the masks, a rank two tasks saw counts once and no rank
    is lost between a task's masks and the driver's union."""
    expected: dict[str, int] = {}
    for masks in tasks:
        for txn, mask in masks.items():
            expected[txn] = expected.get(txn, 0) | mask
    assert merged_masks(through_json(masks) for masks in tasks) == expected


@given(task_masks)
def test_a_report_gives_back_the_masks_it_was_made_of(masks: dict[str, int]) -> None:
    back = through_json(masks)
    assert dict(back.items()) == masks


@given(st.lists(st.tuples(ids, ranks.map(lambda rs: sum(1 << r for r in rs))), max_size=12))
def test_a_task_may_report_an_id_more_than_once(pairs: list[tuple[str, int]]) -> None:
    """A task reports a run of a transaction's events at a time: an id may repeat, narrow and
    wide masks of it mixed; the driver and ``items`` or them per id."""
    expected: dict[str, int] = {}
    for txn, mask in pairs:
        expected[txn] = expected.get(txn, 0) | mask
    report = TaskReport(txn_ranks=TxnRanks.of_pairs([t for t, _ in pairs], [m for _, m in pairs]))
    back = TaskReport.model_validate_json(report.model_dump_json()).txn_ranks
    assert merged_masks([back]) == expected
    assert dict(back.items()) == expected


@given(st.lists(st.tuples(ids, ranks.map(lambda rs: sum(1 << r for r in rs))), max_size=12))
def test_a_tasks_row_gives_the_driver_the_report_it_made(pairs: list[tuple[str, int]]) -> None:
    """A task's row carries its packed ranks as bytes beside the report's JSON, not in it."""
    made = TaskReport(
        records=7, txn_ranks=TxnRanks.of_pairs([t for t, _ in pairs], [m for _, m in pairs])
    )
    row = report_row(made).to_pylist()[0]

    assert read_report(row["report"], row["ranks"]) == made
    assert read_report(row["report"], bytearray(row["ranks"])) == made  # as Spark collects
    assert TaskReport.model_validate_json(row["report"]).txn_ranks.packed == b""


def test_only_masks_past_64_bits_travel_as_hex() -> None:
    ranks = TxnRanks.of({"narrow": 1 << 63, "wide": 1 << 64})
    assert ranks.wide_ids == ["wide"]
    assert ranks.narrow()["id"].to_pylist() == ["narrow"]


def test_no_reports_merge_to_nothing() -> None:
    assert merged_masks([]) == {}
    assert merged_masks([TxnRanks(), TxnRanks.of({})]) == {}
