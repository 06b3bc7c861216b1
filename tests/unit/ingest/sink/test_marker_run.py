"""A run of transaction-topic records, as the driver keeps it: END markers in order, the figures a
task would report (records, tombstones, newest time), and a cut at a batch's end offset that
keeps exactly the records below it - also across gaps in the offsets (real Kafka's markers)."""

from __future__ import annotations

import orjson
from confluent_kafka import Message

from ingest.sink.consistent import BatchMarkers
from ingest.sink.readahead import MarkerRun
from ingest.sink.report import TaskReport
from ingest.transactions import PartitionTail, TransactionBook, TxnState

CREATE_TIME = 1


def begin(txn: int) -> bytes:
    return b'{"status":"BEGIN","id":"%d:%d"}' % (txn, txn * 100)


def end(txn: int) -> bytes:
    return orjson.dumps(
        {"status": "END", "id": f"{txn}:{txn * 100 + 8}", "event_count": 1,
         "data_collections": [{"data_collection": "public.t", "event_count": 1}]}
    )  # fmt: skip


def message(offset: int, value: bytes | None) -> Message:
    return Message(topic="s.transaction", partition=0, offset=offset, value=value,
                   timestamp=(CREATE_TIME, 1_000 + offset))  # fmt: skip


# offsets 10..17 with a gap at 14 and 15 (say, a transaction marker of the producer)
RUN = MarkerRun.of(
    [
        message(10, begin(1)),
        message(11, end(1)),
        message(12, None),
        message(13, begin(2)),
        message(16, end(2)),
        message(17, b""),
    ]
)


def test_a_run_has_the_end_markers_and_the_figures_of_its_records() -> None:
    assert [e.id for e in RUN.ends if e is not None] == ["1", "2"]
    assert RUN.records == 6
    assert RUN.tombstones == 2
    assert RUN.last_timestamp_ms == 1_017


def test_a_cut_keeps_the_records_below_the_offset() -> None:
    for end_offset, ids, records, tombstones, newest in [
        (10, [], 0, 0, None),
        (12, ["1"], 2, 0, 1_011),
        (15, ["1"], 4, 1, 1_013),  # inside the gap
        (17, ["1", "2"], 5, 1, 1_016),
        (99, ["1", "2"], 6, 2, 1_017),
    ]:
        cut = RUN.before(end_offset)
        assert [e.id for e in cut.ends if e is not None] == ids
        assert (cut.records, cut.tombstones, cut.last_timestamp_ms) == (records, tombstones, newest)
        assert cut.offsets == [o for o in RUN.offsets if o < end_offset]


def test_a_book_takes_the_states_the_runs_built_ahead_and_in_place_where_it_names_one() -> None:
    """The runs' END states, built as they were read, join the book after its kept ones; a
    book that names one of the runs' transactions takes it in place."""
    runs = [MarkerRun.of([message(20 + i, end(txn))]) for i, txn in enumerate((3, 4, 5))]
    wanted = frozenset({"public.t"})
    for run in runs:
        run.build_ahead(wanted)
    places = [("db.transaction", 0)] * len(runs)
    markers = BatchMarkers([m for r in runs for m in r.ends_only], TaskReport(), 3, runs, places)
    kept = TxnState("1", 1.0, seen=0b10, ended=True, total=2, expected=2, touched=("public.t",))
    loaded = TransactionBook(ended=(kept,), collections=("public.t",))
    book = markers.into(loaded, 5.0)
    assert [s.id for s in book.ended] == ["1", "3", "4", "5"]
    tails = {("s.public.t", 0): PartitionTail(txn="4", collection="public.t", after="5")}
    assert book.frontier_candidates(tails) == ("1", "3", "4")

    opened = TransactionBook(open=(TxnState("4", 1.0, seen=0b10),), collections=("public.t",))
    taken = markers.into(opened, 5.0)
    assert [s.seen for s in taken.ended] == [0, 0b10, 0]  # 4 ended from its open state
