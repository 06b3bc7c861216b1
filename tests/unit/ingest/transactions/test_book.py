"""The transaction book by example: what a commit publishes, holds, and records."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from unittest.mock import patch

import pytest

from catalog import SourcePoint
from ingest.transactions import (
    BadTransactionState,
    OnTimeout,
    PartitionTail,
    TransactionBook,
    TransactionMarker,
    TxnEvents,
    TxnState,
)
from ingest.transactions import book as book_module
from ingest.transactions.book import BuiltEnds, build_ends
from tests.unit.ingest.transactions.support import begin, end, seen

WAIT, PUBLISH = OnTimeout.WAIT, OnTimeout.PUBLISH
HOLD = 300.0


def published(book: TransactionBook, now: float, on_timeout: OnTimeout = WAIT) -> tuple[str, ...]:
    return book.decide(now, HOLD, on_timeout).publish


def test_a_complete_transaction_behind_an_incomplete_one_is_held() -> None:
    """T1: A-=10, B+=10 (B's event not here yet); T2: A-=5, C+=5 complete. T2's image of A
    includes T1: publishing T2 without T1's B would show a sum off by 10."""
    book = TransactionBook().add_markers([end("T1", 2), end("T2", 2)], now=0)
    book = book.add_events({"T1": seen([1]), "T2": seen([1, 2])}, now=0)

    decision = book.decide(1, HOLD, WAIT)

    assert decision.publish == ()
    assert decision.held == ("T1", "T2")
    assert decision.blocking == "T1"
    assert decision.watermark is None

    book = book.apply(decision).add_events({"T1": seen([2])}, now=5)
    assert published(book, 6) == ("T1", "T2")


def test_events_without_an_end_wait_after_every_ended_transaction() -> None:
    book = TransactionBook().add_events({"T9": seen([1])}, now=0)
    book = book.add_markers([begin("T1"), end("T1", 1)], now=0).add_events({"T1": seen([1])}, 0)

    decision = book.decide(1, HOLD, WAIT)

    assert decision.publish == ("T1",)
    assert decision.held == ("T9",)
    assert decision.blocking == "T9"


def test_the_watermark_is_the_last_published_transactions_commit() -> None:
    book = TransactionBook().add_markers(
        [end("T1", 1, ts_ms=1_000), end("T2", 1, ts_ms=2_000), end("T3", 1, ts_ms=3_000)], 0
    )
    book = book.add_events({"T1": seen([1], 10), "T2": seen([1], 20), "T3": seen([], 30)}, 0)

    watermark = book.decide(1, HOLD, WAIT).watermark

    assert watermark == SourcePoint(
        position=f"{20:032x}",
        source_time=dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC),
        transaction="T2",
    )


def test_the_watermark_stays_when_a_batch_publishes_nothing() -> None:
    book = TransactionBook().add_markers([end("T1", 1)], 0).add_events({"T1": seen([1], 7)}, 0)
    book = book.apply(book.decide(1, HOLD, WAIT))
    book = book.add_markers([end("T2", 2)], 2).add_events({"T2": seen([1], 9)}, 2)

    decision = book.decide(3, HOLD, WAIT)

    assert decision.publish == ()
    assert decision.watermark is not None and decision.watermark.transaction == "T1"


def test_wait_keeps_holding_past_max_hold_and_warns_once_a_minute() -> None:
    book = TransactionBook().add_markers([end("T1", 2), end("T2", 1)], now=0)
    book = book.add_events({"T1": seen([1]), "T2": seen([1])}, now=0)

    early = book.decide(HOLD - 1, HOLD, WAIT)
    assert early.warning is None

    late = book.decide(HOLD + 10, HOLD, WAIT)
    assert late.publish == ()
    assert late.warning is not None
    assert late.warning.count == 2 and late.warning.ids == ("T1", "T2")
    assert late.warning.oldest_age_s == HOLD + 10

    book = book.apply(late)
    assert book.decide(HOLD + 40, HOLD, WAIT).warning is None
    assert book.decide(HOLD + 70, HOLD, WAIT).warning is not None


def test_publish_on_timeout_publishes_the_blocker_incomplete_and_names_it() -> None:
    book = TransactionBook().add_markers([end("T1", 2), end("T2", 1)], now=0)
    book = book.add_events({"T1": seen([1], 5), "T2": seen([1], 6)}, now=100)

    assert published(book, HOLD - 1, PUBLISH) == ()
    decision = book.decide(HOLD, HOLD, PUBLISH)

    assert decision.publish == ("T1", "T2")
    assert decision.exceptions == ("T1",)
    assert decision.held == ()
    assert decision.watermark is not None and decision.watermark.transaction == "T2"


def test_late_events_of_a_timed_out_transaction_are_published_at_once_and_named_again() -> None:
    book = TransactionBook().add_markers([end("T1", 3)], 0).add_events({"T1": seen([1])}, 0)
    book = book.apply(book.decide(HOLD, HOLD, PUBLISH))

    book = book.add_events({"T1": seen([2])}, HOLD + 1)
    decision = book.decide(HOLD + 1, HOLD, PUBLISH)
    assert decision.publish == ("T1",) and decision.exceptions == ("T1",)
    book = book.apply(decision)
    assert book.late[0].id == "T1"

    book = book.add_events({"T1": seen([3])}, HOLD + 2)
    book = book.apply(book.decide(HOLD + 2, HOLD, PUBLISH))
    assert book.late == ()  # whole at last: forgotten
    assert book.summary()["transactions"] == 0


def test_the_end_of_a_transaction_published_before_its_end_tells_when_it_is_whole() -> None:
    """Timed out while open (no END yet), published incomplete: its END, read later, gives
    the count its late events are checked against; whole at last, it is forgotten."""
    book = TransactionBook().add_events({"T1": seen([1])}, now=0)
    book = book.apply(book.decide(HOLD, HOLD, PUBLISH))
    assert book.late[0].expected is None

    book = book.add_markers([end("T1", 2)], HOLD + 1)
    assert book.late[0].ended and book.late[0].expected == 2 and book.ended == ()

    book = book.add_events({"T1": seen([2])}, HOLD + 2)
    book = book.apply(book.decide(HOLD + 2, HOLD, PUBLISH))
    assert book.late == () and "T1" in book.recent


def test_open_transactions_time_out_too_with_publish() -> None:
    """The transaction topic not subscribed: nothing ever ends, events are published when the
    hold runs out, named as exceptions, and the watermark does not move."""
    book = TransactionBook().add_events({"T1": seen([1, 2])}, now=0)

    decision = book.decide(HOLD, HOLD, PUBLISH)

    assert decision.publish == ("T1",) and decision.exceptions == ("T1",)
    assert decision.watermark is None


def test_replayed_events_and_markers_count_once() -> None:
    book = TransactionBook().add_markers([end("T1", 3)], 0)
    book = book.add_events({"T1": seen([1, 2])}, 0).add_events({"T1": seen([2, 1])}, 1)
    book = book.add_markers([end("T1", 3)], 1)

    assert published(book, 2) == ()
    assert book.summary()["events"] == 2

    book = book.add_events({"T1": seen([3])}, 2)
    book = book.apply(book.decide(3, HOLD, WAIT))

    duplicate = book.add_markers([end("T1", 3)], 4).add_events({"T1": seen([3])}, 4)
    decision = duplicate.decide(5, HOLD, WAIT)
    assert decision.publish == ("T1",)  # passes through: the merge keeps one copy
    assert decision.exceptions == () and decision.held == ()
    assert duplicate.apply(decision).summary()["transactions"] == 0


def test_ranks_beyond_the_end_count_do_not_complete_a_transaction() -> None:
    book = TransactionBook().add_markers([end("T1", 2)], 0).add_events({"T1": seen([1, 7])}, 0)

    assert published(book, 1) == ()


def built(
    markers: list[TransactionMarker], collections: frozenset[str] | None, first_seen: float
) -> BuiltEnds:
    states, ids = build_ends(markers, collections, first_seen)
    return BuiltEnds(states, ids, collections)


def test_states_built_ahead_are_taken_as_built_when_the_book_names_none_of_them() -> None:
    """Built when read (first seen then, before the batch's ``now``), as add_markers builds
    them otherwise."""
    book = TransactionBook(collections=("public.acct",))
    ends = [end("T1", 3, ("public.acct", 2), ("public.other", 1)), end("T2", 1, ts_ms=4)]

    taken = book.add_built(ends, built(ends, frozenset(["public.acct"]), 5), now=9)

    assert taken.ended == tuple(s._replace(first_seen=5) for s in book.add_markers(ends, 9).ended)
    assert [(s.id, s.expected, s.first_seen) for s in taken.ended] == [("T1", 2, 5), ("T2", 1, 5)]


@pytest.mark.parametrize("case", ["other collections", "an END twice"])
def test_states_built_for_another_book_or_naming_one_twice_are_not_taken(case: str) -> None:
    """The markers are taken in as add_markers takes them, first seen ``now``."""
    book = TransactionBook(collections=("public.acct",))
    ends = [end("T1", 2, ("public.acct", 2)), end("T2", 1, ("public.acct", 1))]
    wanted: frozenset[str] | None = frozenset(["public.acct"])
    if case == "other collections":
        wanted = None
    else:
        ends.append(ends[0])

    taken = book.add_built(ends, built(ends, wanted, 5), now=9)

    assert taken == book.add_markers(ends, 9)
    assert [s.first_seen for s in taken.ended] == [9, 9]


@pytest.mark.parametrize("case", ["END-known", "open", "late", "recent"])
def test_states_built_ahead_give_way_where_the_book_names_their_transaction(case: str) -> None:
    """The END of a transaction the book names is taken in as add_markers takes it; the
    others as built (first seen 5, when read)."""
    book = TransactionBook(collections=("public.acct",))
    if case == "END-known":
        book = book.add_markers([end("T2", 1, ("public.acct", 1))], now=1)
    elif case == "open":
        book = book.add_events({"T2": seen([1])}, now=1)
    else:
        book = book.add_events({"T2": seen([1])}, now=1)
        on_timeout = PUBLISH if case == "late" else WAIT
        book = book.apply(book.decide(1_000, 1.0, on_timeout))
        if case == "recent":
            book = book.add_markers([end("T2", 1, ("public.acct", 1))], now=1)
            book = book.apply(book.decide(1_000, 1.0, WAIT))
    named = {
        "END-known": [t.id for t in book.ended],
        "open": [t.id for t in book.open],
        "late": [t.id for t in book.late],
        "recent": list(book.recent),
    }
    assert named[case] == ["T2"]
    ends = [end(t, 1, ("public.acct", 1)) for t in ("T1", "T2", "T3")]

    taken = book.add_built(ends, built(ends, frozenset(["public.acct"]), 5), now=9)

    expected = book.add_markers(ends, 9)
    assert taken == replace(expected, ended=tuple(_seen_at(5, t, "T2") for t in expected.ended))
    assert {"T1", "T3"} <= {t.id for t in taken.ended}


def _seen_at(first_seen: float, state: TxnState, but: str) -> TxnState:
    return state if state.id == but else state._replace(first_seen=first_seen)


def test_only_the_jobs_tables_are_awaited() -> None:
    book = TransactionBook(collections=("public.acct",))
    book = book.add_markers([end("T1", 3, ("public.acct", 2), ("public.other", 1))], 0)
    book = book.add_events({"T1": seen([1, 3])}, 0)

    assert published(book, 1) == ("T1",)


def test_restored_mid_stream_the_book_decides_the_same() -> None:
    book = TransactionBook().add_markers([end("T1", 2, ts_ms=5), end("T2", 1)], now=10)
    book = book.add_events({"T1": seen([2], 3), "T2": seen([1], 4), "T3": seen([1])}, now=11)
    book = book.apply(book.decide(12, HOLD, WAIT))

    restored = TransactionBook.from_json(book.to_json())

    assert restored == book
    more = {"T1": seen([1], 1)}
    assert restored.add_events(more, 20).decide(21, HOLD, WAIT) == book.add_events(more, 20).decide(
        21, HOLD, WAIT
    )


def test_a_stored_book_of_another_format_is_refused() -> None:
    with pytest.raises(BadTransactionState):
        TransactionBook.from_json({"format": 99})
    with pytest.raises(BadTransactionState):
        TransactionBook.from_json({"format": 1, "ended": "nonsense"})


def test_a_stored_state_is_an_object_of_its_fields() -> None:
    """The stored form jobs' catalogs already hold (format 1): a state is an object, whatever
    the class is in memory, and a stored one is read back into the same state."""
    book = TransactionBook().add_markers([end("T1", 2, ("public.a", 2), ts_ms=5)], now=10)
    stored = json.loads(json.dumps(book.to_json()))
    assert stored["ended"] == [
        {
            "id": "T1",
            "first_seen": 10,
            "seen": [],
            "ended": True,
            "total": 2,
            "expected": 2,
            "touched": ["public.a"],
            "ts_ms": 5,
            "end_position": None,
            "max_position": None,
            "max_ts_ms": None,
        }
    ]
    assert TransactionBook.from_json(stored) == book


@pytest.mark.parametrize("bad", [[[1]], [[3, 2]], [[1, 2**40]], 7, [[1, "2"]]])
def test_stored_ranks_are_ranges_and_bounded(bad: object) -> None:
    """Ranks live as masks in memory but are stored as ranges: a stored range is read back
    exactly, and one that would make a mask of a trillion bits is refused, not allocated."""
    book = TransactionBook().add_events({"T1": seen([1, 2, 5])}, now=0)
    stored = book.to_json()
    assert stored["open"][0]["seen"] == [[1, 2], [5, 5]]
    assert TransactionBook.from_json(stored) == book
    stored["open"][0]["seen"] = bad
    with pytest.raises(BadTransactionState):
        TransactionBook.from_json(stored)


def test_the_summary_has_the_shape_the_status_command_reads() -> None:
    book = TransactionBook().add_markers([end("T1", 2)], now=0)
    book = book.add_events({"T1": seen([1]), "T2": seen([1, 2])}, now=60)

    assert book.summary() == {
        "transactions": 2,
        "events": 3,
        "oldest_first_seen": "1970-01-01T00:00:00+00:00",
        "blocking": "T1",
    }
    assert TransactionBook().summary() == {
        "transactions": 0,
        "events": 0,
        "oldest_first_seen": None,
        "blocking": None,
    }


# -- frontier candidates ------------------------------------------------------------------------


def _ended(*ids: str) -> TransactionBook:
    tables = (("public.a", 1), ("public.b", 1))
    return TransactionBook().add_markers([end(txn, 2, *tables) for txn in ids], now=0)


def a(txn: str | None) -> PartitionTail:
    return PartitionTail(txn, collection="public.a")


def b(txn: str | None) -> PartitionTail:
    return PartitionTail(txn, collection="public.b")


def test_candidates_stop_at_the_earliest_last_event() -> None:
    book = _ended("T1", "T2", "T3")

    assert book.frontier_candidates({0: a("T3"), 1: b("T2")}) == ("T1",)


def test_a_partition_ending_in_an_open_transaction_has_passed_every_ended_one() -> None:
    book = _ended("T1", "T2")

    assert book.frontier_candidates({0: a("T7"), 1: b("T2")}) == ("T1",)
    assert book.frontier_candidates({0: a("T7"), 1: b("T8")}) == ("T1", "T2")


def test_a_partition_whose_next_record_is_of_a_later_transaction_has_passed_its_last() -> None:
    """The record after the range tells whether the last event's transaction goes on there."""
    book = _ended("T1", "T2", "T3")

    def last_t2(after: str | None) -> PartitionTail:
        return PartitionTail("T2", collection="public.a", after=after)

    assert book.frontier_candidates({0: last_t2("T3"), 1: b("T9")}) == ("T1", "T2")
    assert book.frontier_candidates({0: last_t2("T8"), 1: b("T9")}) == ("T1", "T2")  # open
    assert book.frontier_candidates({0: last_t2("T2"), 1: b("T9")}) == ("T1",)  # goes on
    assert book.frontier_candidates({0: last_t2("T1"), 1: b("T9")}) == ("T1",)  # a retry
    assert book.frontier_candidates({0: last_t2(None), 1: b("T9")}) == ("T1",)  # unknown
    settled = book.add_events({"T1": seen([1, 2])}, 0)
    settled = settled.apply(settled.decide(1, HOLD, WAIT))  # T1 published
    assert settled.frontier_candidates({0: last_t2("T1"), 1: b("T9")}) == ()


def test_idle_or_snapshot_partitions_hold_back_the_transactions_of_their_table() -> None:
    book = _ended("T1", "T2").add_markers([end("T3", 1, ("public.c", 1))], now=0)
    c_idle = PartitionTail(idle=True, collection="public.c")

    assert book.frontier_candidates({0: PartitionTail(idle=True), 1: a("T9"), 2: b("T9")}) == ()
    assert book.frontier_candidates({0: a(None), 1: b("T9")}) == ()
    a_idle = PartitionTail(idle=True, collection="public.a")
    assert book.frontier_candidates({0: a_idle, 1: a("T9"), 2: b("T9"), 3: c_idle}) == ()
    assert book.frontier_candidates({0: c_idle, 1: a("T9"), 2: b("T9")}) == ("T1", "T2")


def test_a_partition_last_read_in_a_published_transaction_has_passed_none() -> None:
    book = TransactionBook().add_markers([end("T0", 1)], 0).add_events({"T0": seen([1])}, 0)
    book = book.apply(book.decide(1, HOLD, WAIT)).add_markers([end("T1", 1)], 2)

    assert book.frontier_candidates({0: PartitionTail("T0")}) == ()


def test_a_transaction_in_a_table_the_job_does_not_read_is_no_candidate() -> None:
    """It cannot complete: the job never sees its events there (unless told to skip them)."""
    marker = end("T1", 2, ("public.a", 1), ("public.z", 1))
    tails = {0: a("T9")}

    assert TransactionBook().add_markers([marker], 0).frontier_candidates(tails) == ()
    reading_a = TransactionBook(collections=("public.a",)).add_markers([marker], 0)
    assert reading_a.frontier_candidates(tails) == ("T1",)


def test_the_stored_book_stays_small_however_long_the_job_runs() -> None:
    book = TransactionBook()
    for n in range(2_000):
        txn = f"{n}"
        book = book.add_markers([end(txn, 2)], n).add_events({txn: seen([1, 2], n)}, n)
        book = book.apply(book.decide(n, HOLD, WAIT))

    stored = json.dumps(book.to_json())

    assert len(stored) < 8_000
    assert TransactionBook.from_json(json.loads(stored)) == book


def test_the_commit_gets_job_state_and_watermark_in_the_shape_the_catalog_stores() -> None:
    book = TransactionBook().add_markers([end("T1", 1, ts_ms=1_000), end("T2", 2)], 0)
    book = book.add_events({"T1": seen([1], 10), "T2": seen([1], 11)}, 0)
    decision = book.decide(HOLD, HOLD, PUBLISH)
    after = book.apply(decision)

    watermark = decision.source_watermark(["shop.a", "shop.b"])
    state = json.loads(json.dumps(after.job_state()))

    assert watermark is not None
    assert watermark.tables == {"shop.a": watermark.batch, "shop.b": watermark.batch}
    assert watermark.exceptions == ("T2",) and not watermark.consistent
    assert state["held"] == after.summary()
    assert TransactionBook.from_job_state(state) == after
    assert TransactionBook.from_job_state(None) == TransactionBook()
    assert TransactionBook.from_job_state({}, ["public.a"]).collections == ("public.a",)
    assert TransactionBook().decide(0, HOLD, WAIT).source_watermark(["shop.a"]) is None


def test_an_end_repeated_after_a_later_transactions_end_never_moves_the_frontier_back() -> None:
    """A producer's retry can write T4's END again after T5's, when the book has already
    published T4 and forgotten it (past ``RECENT_LIMIT``; T3 carries no position): T4 is then
    listed after T5. Settled in one step (both complete in one batch) the frontier must stay at
    T5's commit, the newest published, as deciding one by one keeps it - not go back to T4's
    (found by the model test)."""
    t4 = end("T4", 1)._replace(position=f"{8:032x}")
    t5 = end("T5", 1)._replace(position=f"{10:032x}")
    with patch.object(book_module, "RECENT_LIMIT", 1):
        _, book = TransactionBook().add_markers([t4], 0).settle({"T4": 0b10}, 0, HOLD, WAIT)
        _, book = book.add_markers([end("T3", 1)], 0).settle({"T3": 0b10}, 0, HOLD, WAIT)
        book = book.add_markers([t5, t4], 1)  # T4 forgotten: its END is news again
        assert [t.id for t in book.ended] == ["T5", "T4"]
        events = {"T4": 0b10, "T5": 0b10}  # T4's event replayed with the retry

        decision, after = book.settle(events, 1, HOLD, WAIT)

        stepwise = book.add_events({t: TxnEvents(m) for t, m in events.items()}, 1)
        expected = stepwise.decide(1, HOLD, WAIT)
        assert (decision, after) == (expected, stepwise.apply(expected))
    assert decision.publish == ("T5", "T4") and decision.out_of_order == ("T4",)
    assert after.frontier is not None and after.frontier.position == f"{10:032x}"
