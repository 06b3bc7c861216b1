"""The book against a model of a Debezium source: random transactions over several tables, their
events spread over several partitions (each in commit order), END markers on one partition, all
read in batches cut at random points of every partition, as a micro-batch job reads them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.transactions import (
    Decision,
    MarkerStatus,
    OnTimeout,
    PartitionTail,
    TransactionBook,
    TransactionMarker,
    TxnEvents,
    TxnState,
)
from ingest.transactions import book as book_module
from ingest.transactions.book import BuiltEnds, build_ends
from tests.unit.ingest.transactions.support import begin, end

TABLES = ("public.a", "public.b", "public.c")
#: data partitions the job reads: (table, partition number)
PARTITIONS = tuple((table, n) for table in TABLES for n in range(2))
#: a table of the source the job does not subscribe to
UNREAD = ("public.z", 0)
Event = tuple[str | None, int]  # (transaction, rank); None: a snapshot read


@dataclass
class Source:
    """What Debezium wrote: per data partition its events, and the transaction topic."""

    order: list[str]
    events: dict[str, int]
    partitions: dict[tuple[str, int], list[Event]] = field(default_factory=dict)
    markers: list[TransactionMarker] = field(default_factory=list)


@st.composite
def sources(draw: st.DrawFn) -> Source:
    count = draw(st.integers(1, 8))
    source = Source([f"T{i}" for i in range(count)], {})
    source.partitions = {p: [] for p in (*PARTITIONS, UNREAD)}
    homes_of = st.sampled_from(PARTITIONS + (UNREAD,) * draw(st.integers(0, 1)))
    for p in draw(st.lists(st.sampled_from(PARTITIONS), max_size=3, unique=True)):
        source.partitions[p].append((None, 0))  # snapshot reads come first
    for txn in source.order:
        homes = draw(st.lists(homes_of, min_size=1, max_size=5))
        per_table: dict[str, int] = {}
        for rank, home in enumerate(homes, start=1):
            source.partitions[home].append((txn, rank))
            per_table[home[0]] = per_table.get(home[0], 0) + 1
        source.events[txn] = sum(1 for home in homes if home != UNREAD)
        marker = end(txn, len(homes), *per_table.items())
        if draw(st.booleans()):  # a commit position (PostgreSQL ids carry one; others not)
            marker = marker._replace(position=f"{len(source.markers):032x}")
        source.markers += [begin(txn), marker]
    ends = [m for m in source.markers if m.status is MarkerStatus.END]
    for repeated in draw(st.lists(st.sampled_from(ends), max_size=2)):  # a producer's retry
        at = draw(st.integers(source.markers.index(repeated) + 1, len(source.markers)))
        source.markers.insert(at, repeated)
    return source


Cuts = list[dict[object, int]]


@st.composite
def batches(draw: st.DrawFn, source: Source) -> Cuts:
    """How many records each batch reads of each partition (the last batch reads the rest)."""
    logs: dict[object, int] = {p: len(source.partitions[p]) for p in PARTITIONS}
    logs["txn"] = len(source.markers)
    cuts: Cuts = []
    for _ in range(draw(st.integers(0, 6))):
        cuts.append({p: draw(st.integers(0, size)) for p, size in logs.items()})
    cuts.append({p: size for p, size in logs.items()})
    # positions must not go backwards: a batch reads from where the last one stopped
    running = {p: 0 for p in logs}
    for cut in cuts:
        for p in cut:
            running[p] = max(running[p], cut[p])
            cut[p] = running[p]
    return cuts


@dataclass
class Run:
    """One job reading ``source`` batch by batch; records what a checker needs."""

    source: Source
    book: TransactionBook = field(default_factory=lambda: TransactionBook(collections=TABLES))
    read: dict[object, int] = field(default_factory=dict)
    delivered: dict[str, set[int]] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    candidates: list[tuple[str, ...]] = field(default_factory=list)

    def batch(self, cut: dict[object, int], now: float, hold: float, on: OnTimeout) -> None:
        start = {p: self.read.get(p, 0) for p in cut}
        markers = self.source.markers[start["txn"] : cut["txn"]]
        added = self.book.add_markers(markers, now)
        assert _added_as_built(self.book, markers, now) == added
        self.book = added
        chunks = {p: self.source.partitions[p][start[p] : cut[p]] for p in PARTITIONS}
        tails = {
            p: _tail(p, chunk, self.source.partitions[p][cut[p] :]) for p, chunk in chunks.items()
        }
        self.candidates.append(self.book.frontier_candidates(tails))
        seen: dict[str, list[int]] = {}
        for chunk in chunks.values():
            for txn, rank in chunk:
                if txn is not None:
                    seen.setdefault(txn, []).append(rank)
                    self.delivered.setdefault(txn, set()).add(rank)
        masks = {t: TxnEvents.of(r).ranks for t, r in seen.items()}
        settled = self.book.settle(masks, now, hold, on)  # the sink's one step
        self.book = self.book.add_events({t: TxnEvents(m) for t, m in masks.items()}, now)
        decision = self.book.decide(now, hold, on)
        assert settled == (decision, self.book.apply(decision))
        restored = TransactionBook.from_json(json.loads(json.dumps(self.book.to_json())))
        assert restored == self.book
        assert restored.decide(now, hold, on) == decision
        self.decisions.append(decision)
        self.book = self.book.apply(decision)
        self.read = dict(cut)

    def complete(self, txn: str) -> bool:
        return len(self.delivered.get(txn, ())) == self.source.events[txn]


def _added_as_built(
    book: TransactionBook, markers: list[TransactionMarker], now: float
) -> TransactionBook:
    """``book`` with ``markers`` taken in by :meth:`TransactionBook.add_built`, their states
    built ahead as a read-ahead builds them (split in two runs, as read in chunks)."""
    wanted = None if book.collections is None else frozenset(book.collections)
    ends = [m for m in markers if m.status is MarkerStatus.END]
    half = len(markers) // 2
    states: list[TxnState] = []
    ids = frozenset[str]()
    for run in (markers[:half], markers[half:]):  # each run's ENDs, as MarkerRun.ends_only
        run_ends = [m for m in run if m.status is MarkerStatus.END]
        run_states, run_ids = build_ends(run_ends, wanted, now)
        states += run_states
        ids |= run_ids
    return book.add_built(ends, BuiltEnds(states, ids, wanted), now)


def _tail(partition: tuple[str, int], chunk: list[Event], rest: list[Event]) -> PartitionTail:
    """What the peek finds: the last event of the batch's range and, when the partition holds
    more already, the transaction of the event after it."""
    if not chunk:
        return PartitionTail(idle=True, collection=partition[0])
    after = rest[0][0] if rest else None
    return PartitionTail(chunk[-1][0], collection=partition[0], after=after)


@st.composite
def runs(draw: st.DrawFn) -> tuple[Source, Cuts]:
    source = draw(sources())
    return source, draw(batches(source))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_without_timeouts_whole_transactions_are_published_in_commit_order(
    case: tuple[Source, Cuts],
) -> None:
    source, cuts = case
    run = Run(source)
    published: list[str] = []
    for i, cut in enumerate(cuts):
        run.batch(cut, now=float(i), hold=math.inf, on=OnTimeout.WAIT)
        decision, candidates = run.decisions[-1], run.candidates[-1]
        assert not set(decision.publish) & set(decision.held)
        assert decision.exceptions == ()
        assert all(run.complete(txn) for txn in decision.publish)
        assert decision.publish[: len(candidates)] == candidates
        published += decision.publish
        assert published == source.order[: len(published)]  # a prefix, each once
    assert published == source.order
    assert run.book.summary() == {
        "transactions": 0,
        "events": 0,
        "oldest_first_seen": None,
        "blocking": None,
    }


@settings(max_examples=300, deadline=None)
@given(runs(), st.floats(0, 4))
def test_with_publish_on_timeout_every_incomplete_publication_is_named(
    case: tuple[Source, Cuts], hold: float
) -> None:
    source, cuts = case
    run = Run(source)
    first: list[str] = []
    for i, cut in enumerate(cuts):
        run.batch(cut, now=float(i), hold=hold, on=OnTimeout.PUBLISH)
        decision = run.decisions[-1]
        for txn in decision.publish:
            assert run.complete(txn) or txn in decision.exceptions
            if txn not in decision.exceptions:  # a clean publication closes a prefix
                assert set(source.order[: source.order.index(txn)]) <= set(first)
            if txn not in first:
                first.append(txn)
        assert not set(decision.publish) & set(decision.held)
    assert sorted(first) == sorted(source.order)  # each published, at the latest when whole
    assert run.book.summary()["transactions"] == 0


@settings(max_examples=200, deadline=None)
@given(runs())
def test_replayed_batches_change_nothing_that_was_published(case: tuple[Source, Cuts]) -> None:
    """A batch read twice (events and markers again, as after a producer retry) publishes
    duplicates only of what was already published and keeps the order of the rest."""
    source, cuts = case
    run = Run(source)
    published: list[str] = []
    for i, cut in enumerate(cuts):
        before = dict(run.read)
        run.batch(cut, now=float(2 * i), hold=math.inf, on=OnTimeout.WAIT)
        new = [t for t in run.decisions[-1].publish if t not in published]
        published += new
        run.read = before  # the same ranges again
        run.batch(cut, now=float(2 * i + 1), hold=math.inf, on=OnTimeout.WAIT)
        again = run.decisions[-1]
        assert all(run.complete(txn) for txn in again.publish)
        assert set(again.publish) <= set(published) | set(source.order[len(published) :])
        published += [t for t in again.publish if t not in published]
        assert published == source.order[: len(published)]
    assert published == source.order


@settings(max_examples=200, deadline=None)
@given(runs())
def test_a_job_not_told_its_tables_waits_for_events_of_tables_it_does_not_read(
    case: tuple[Source, Cuts],
) -> None:
    """Without :attr:`TransactionBook.collections` every counted event is awaited: a
    transaction touching an unread table holds the prefix (until a timeout), and the direct
    path never claims it."""
    source, cuts = case
    run = Run(source, book=TransactionBook())
    published: list[str] = []
    for i, cut in enumerate(cuts):
        run.batch(cut, now=float(i), hold=math.inf, on=OnTimeout.WAIT)
        decision, candidates = run.decisions[-1], run.candidates[-1]
        assert decision.publish[: len(candidates)] == candidates
        published += decision.publish
    unread = [t for t in source.order if _touches(source, t)]
    cut_at = source.order.index(unread[0]) if unread else len(source.order)
    assert published == source.order[:cut_at]


def _touches(source: Source, txn: str) -> bool:
    return any(t == txn for t, _ in source.partitions[UNREAD])


@settings(max_examples=200, deadline=None)
@given(runs(), st.floats(0, 4))
def test_settle_keeps_the_order_of_what_the_book_remembers_when_it_forgets(
    case: tuple[Source, Cuts], hold: float
) -> None:
    """:meth:`TransactionBook.settle` equals add_events + decide + apply (checked in every
    run's batches) also when the remembered ids and late transactions overflow their limits."""
    source, cuts = case
    run = Run(source)
    with patch.object(book_module, "RECENT_LIMIT", 2), patch.object(book_module, "LATE_LIMIT", 1):
        for i, cut in enumerate(cuts):
            run.batch(cut, now=float(i), hold=hold, on=OnTimeout.PUBLISH)
    assert len(run.book.recent) <= 2
