"""The transaction book: which source transactions a job has seen, which are complete, and which
the next commit publishes.

The rule (issue 13, ``transactions: consistent``): publication is a *prefix of commit order*.
Commit order is the order in which the book takes END markers: the transaction topic's order
when it has one partition (written in commit order), else the order
:mod:`ingest.transactions.order` puts them in (by commit position, each only once every
partition was read past it). A transaction is published in the first batch in which it and
every transaction before it are complete - END seen and ``event_count`` distinct
``total_order`` ranks seen, over this batch and the held ones. Why a prefix and not "every
complete transaction": with T1 (A-=10, B+=10) held and T2 (A-=5, C+=5) complete, T2's row
image of A already includes T1, so publishing T2 alone shows A and C without B - the sum is off
by 10.

Transactions whose END is not seen yet ("open") come after every END-known one in commit order:
the transaction topic is read in order, so an END before a known END is known too. They wait at
the tail. A transaction blocking the prefix for longer than ``max_hold`` (counted from when the
job first saw any of its records) is published incomplete with ``on_timeout: publish`` and named
in the commit's exceptions; events of it that come later are published at once and named again.

The book is a value: every operation returns a new book, :meth:`TransactionBook.to_json` /
:meth:`TransactionBook.from_json` store it with each catalog commit (so a restarted job resumes
exactly), and published transactions are forgotten so that it stays small - only the last
:data:`RECENT_LIMIT` ids are kept, to recognise duplicates of them.

The order of a batch, for the sink: :meth:`~TransactionBook.add_markers` (the batch's range of
the transaction topic), :meth:`~TransactionBook.frontier_candidates` (what tasks may write to the
target tables directly), :meth:`~TransactionBook.add_events` (what the tasks saw),
:meth:`~TransactionBook.decide`, then :meth:`~TransactionBook.apply` of that decision, whose
result's :meth:`~TransactionBook.to_json` and :meth:`~TransactionBook.summary` go into the
commit's ``job_state``. The sink does the last three in one step, :meth:`~TransactionBook.settle`
(same result, less work for the many transactions a batch both ends and completes), and the
first with the ENDs' states built ahead, as it read them, :meth:`~TransactionBook.add_built`
(same result but for the time they were first seen).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, NamedTuple, TypeVar

from pydantic import BeforeValidator, PlainSerializer, TypeAdapter, ValidationError

from catalog import SourcePoint, SourceWatermark
from ingest.errors import IngestError
from ingest.transactions import ranges
from ingest.transactions.markers import (
    MarkerStatus,
    TransactionMarker,
    decode_end,
)
from ingest.transactions.order import EndOrder
from ingest.transactions.policy import OnTimeout
from ingest.transactions.ranges import Ranges

__all__ = [
    "LATE_LIMIT",
    "RECENT_LIMIT",
    "WARN_EVERY_S",
    "BadTransactionState",
    "BuiltEnds",
    "Decision",
    "HoldWarning",
    "PartitionTail",
    "Point",
    "TransactionBook",
    "TxnEvents",
    "TxnState",
    "build_ends",
    "build_ends_at",
    "build_ends_of",
]

#: Ids of published transactions remembered, so that duplicates of their events pass through.
RECENT_LIMIT = 256
#: Transactions published incomplete remembered, so that their late events are named again.
LATE_LIMIT = 1024
#: Seconds between two warnings about transactions held longer than ``max_hold``.
WARN_EVERY_S = 60.0
_FORMAT = 1
#: A data partition, as the caller names it (topic and partition, say).
_Key = TypeVar("_Key", bound=Hashable)


class BadTransactionState(IngestError, ValueError):
    """A stored book (``job_state["transactions"]``) that cannot be read back."""


def _stored_ranges(value: object) -> int:
    """A mask from its stored form, a list of ``[lo, hi]`` pairs (see :mod:`ranges`)."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"ranks must be a list of [lo, hi] pairs, not {value!r:.40}")
    pairs = []
    for pair in value:
        if not (
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(type(n) is int and n >= 0 for n in pair)
            and pair[0] <= pair[1] <= ranges.MAX_RANK
        ):
            raise ValueError(
                f"ranks pair {pair!r:.40} is not [lo, hi] with 0 <= lo <= hi <= {ranges.MAX_RANK}"
            )
        pairs.append((pair[0], pair[1]))
    return ranges.to_mask(tuple(pairs))


def _ranges_to_store(mask: int) -> list[list[int]]:
    return [[lo, hi] for lo, hi in ranges.from_mask(mask)]


#: A set of ranks as a bit mask in memory, as ranges when stored.
Mask = Annotated[
    int,
    BeforeValidator(_stored_ranges),
    PlainSerializer(_ranges_to_store, return_type=list[list[int]]),
]


@dataclass(frozen=True)
class TxnEvents:
    """What a batch's tasks saw of one transaction: the ranks of its events (a mask: bit n for
    rank n), and the greatest source position (32 hex digits) and source time among them."""

    ranks: int
    max_position: str | None = None
    max_ts_ms: int | None = None

    @classmethod
    def of(
        cls, orders: Iterable[int], max_position: str | None = None, max_ts_ms: int | None = None
    ) -> TxnEvents:
        return cls(ranges.mask_of(orders), max_position, max_ts_ms)

    @property
    def orders(self) -> Ranges:
        return ranges.from_mask(self.ranks)


class TxnState(NamedTuple):
    """One transaction not yet published whole: held, or published incomplete (late).

    A named tuple (:meth:`see` and :meth:`end` return new states): a batch builds one for each
    of its tens of thousands of END markers, and building a dataclass (its ``__init__`` a
    Python call) was most of :meth:`TransactionBook.add_markers`; a tuple is built in C
    (:data:`_new_state`). Stored as an object of its fields (:data:`_StoredState`)."""

    id: str
    first_seen: float
    """Epoch seconds when the job first saw a record of it (event or END)."""
    seen: Mask = 0
    """The ranks seen (a mask: bit n for rank n)."""
    ended: bool = False
    total: int | None = None
    """The END's ``event_count``: ranks run 1..total."""
    expected: int | None = None
    """Events of it the job reads (the END's counts of the job's tables)."""
    touched: tuple[str, ...] = ()
    """The data collections the END lists (empty: not known)."""
    ts_ms: int | None = None
    end_position: str | None = None
    max_position: str | None = None
    max_ts_ms: int | None = None

    @property
    def events(self) -> int:
        return self.seen.bit_count()

    @property
    def complete(self) -> bool:
        return (
            self.expected is not None and ranges.count_mask(self.seen, self.total) >= self.expected
        )

    def see(self, events: TxnEvents) -> TxnState:
        position, ts_ms = self.max_position, self.max_ts_ms
        if events.max_position is not None or events.max_ts_ms is not None:
            position = _max(position, events.max_position)
            ts_ms = _max(ts_ms, events.max_ts_ms)
        # id and first_seen; seen; ended .. end_position as they are; the newest position
        fields = (*self[:2], self.seen | events.ranks, *self[3:9], position, ts_ms)
        return _new_state(TxnState, fields)

    def end(self, marker: TransactionMarker, collections: frozenset[str] | None) -> TxnState:
        return _ended(
            marker,
            collections,
            self.first_seen,
            seen=self.seen,
            max_position=self.max_position,
            max_ts_ms=self.max_ts_ms,
        )


#: A state built from its fields in C, without the named tuple's ``__new__`` (a Python call).
_new_state = tuple.__new__


def _state_to_store(state: TxnState) -> dict[str, Any]:
    stored = state._asdict()
    stored["seen"] = _ranges_to_store(state.seen)
    return stored


#: A state in a stored book: an object of its fields (as when it was a dataclass), its ranks
#: as ``[lo, hi]`` pairs; read back from that object.
_StoredState = Annotated[TxnState, PlainSerializer(_state_to_store, return_type=dict[str, Any])]


@dataclass(frozen=True)
class Point:
    """The end of the published prefix: its last transaction, where and when it committed."""

    txn: str
    position: str | None = None
    ts_ms: int | None = None

    def source_point(self) -> SourcePoint | None:
        if self.position is None:
            return None
        time = None
        if self.ts_ms is not None:
            time = dt.datetime.fromtimestamp(self.ts_ms / 1000, tz=dt.UTC)
        return SourcePoint(position=self.position, source_time=time, transaction=self.txn)


@dataclass(frozen=True)
class HoldWarning:
    """Transactions held longer than ``max_hold`` (the job logs ``transactions_held_too_long``)."""

    count: int
    oldest_age_s: float
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Decision:
    """What the commit of a batch publishes (see :meth:`TransactionBook.decide`)."""

    decided_at: float
    publish: tuple[str, ...]
    """Transactions whose events go into the target tables now: the prefix in commit order,
    then events of transactions published before (late ones and duplicates)."""
    exceptions: tuple[str, ...]
    """Those of ``publish`` that are incomplete (``SourceWatermark.exceptions``)."""
    held: tuple[str, ...]
    """Transactions that stay held, in commit order (END-known first)."""
    blocking: str | None
    """The first held transaction: it keeps every later one back."""
    frontier: Point | None
    warning: HoldWarning | None = None
    out_of_order: tuple[str, ...] = ()
    """Those of ``publish`` that committed before the frontier they are published after (an
    END that came later than the idleness rule of :mod:`ingest.transactions.order` allowed):
    named in ``exceptions`` too, and the frontier stays where it was."""

    @property
    def watermark(self) -> SourcePoint | None:
        """The batch's source point: the last transaction of the published prefix; None while
        nothing was ever published (then the commit carries no watermark)."""
        return None if self.frontier is None else self.frontier.source_point()

    def source_watermark(self, tables: Iterable[str]) -> SourceWatermark | None:
        """``CommitRequest.source_watermark`` for a commit writing ``tables``: the same point for
        each (a prefix is consistent for every table), and the exceptions."""
        point = self.watermark
        if point is None:
            return None
        return SourceWatermark(
            batch=point, tables=dict.fromkeys(tables, point), exceptions=self.exceptions
        )


@dataclass(frozen=True)
class PartitionTail:
    """What the batch read of one data partition, for :meth:`TransactionBook.frontier_candidates`.

    ``txn``: the (normalised) transaction of the last event of the partition's range, None when
    that event has none (a snapshot read). ``idle``: the range was empty. ``collection``: the
    data collection of the partition's topic as END markers name it (``public.orders``); None
    when unknown - the partition is then taken to hold events of every transaction. ``after``:
    the transaction of the record right after the range, when the broker already held one
    with a transaction block (None: no such record, a tombstone, an event without a block).
    """

    txn: str | None = None
    idle: bool = False
    collection: str | None = None
    after: str | None = None


@dataclass(frozen=True)
class TransactionBook:
    """The job's transaction bookkeeping between two commits (see the module docstring)."""

    ended: tuple[_StoredState, ...] = ()
    """END known, not published: commit order."""
    open: tuple[_StoredState, ...] = ()
    """Events seen, no END yet: order first seen."""
    late: tuple[_StoredState, ...] = ()
    """Published incomplete, still missing events."""
    recent: tuple[str, ...] = ()
    """The last published complete transactions (oldest first)."""
    arrivals: tuple[str, ...] = ()
    """Late or recent transactions with events since the last decision."""
    frontier: Point | None = None
    warned_at: float | None = None
    collections: tuple[str, ...] | None = field(default=None)
    """The data collections the job reads, when known: END counts of others are not awaited."""
    order: EndOrder = field(default_factory=EndOrder)
    """ENDs of a multi-partition transaction topic not yet in commit order's reach (see
    :mod:`ingest.transactions.order`); empty with one partition."""

    # -- feeding -----------------------------------------------------------------------------

    def add_markers(self, markers: Iterable[TransactionMarker], now: float) -> TransactionBook:
        """The book with the END markers of a batch (in topic order) taken in; BEGIN markers
        and ENDs of transactions already known to be ended or published are ignored."""
        wanted = None if self.collections is None else frozenset(self.collections)
        end_status = MarkerStatus.END
        ends = [marker for marker in markers if marker[0] is end_status]
        states, ids = build_ends(ends, wanted, now)
        return self._take_ends(ends, states, ids, wanted)

    def add_built(
        self, markers: Sequence[TransactionMarker], built: BuiltEnds, now: float
    ) -> TransactionBook:
        """:meth:`add_markers` of a batch's END markers whose states were built before the
        batch asked (``built``, see :class:`BuiltEnds`): the states appended as built where
        the book names none of their transactions, those it names taken in as
        :meth:`add_markers` takes them. When a transaction is named twice among ``markers``
        or the states were built for other collections than the book's: :meth:`add_markers`
        of ``markers`` (every state then first seen ``now``).

        Why: building the states was ~28 ms of a batch's start, in the gap between two
        batches, where the driver's CPU costs the most wall time; built on the read-ahead's
        thread they cost it while the batch before runs its tasks, and what is left here is
        a check against the few transactions the book holds."""
        wanted = None if self.collections is None else frozenset(self.collections)
        states, ids = built.states, built.ids
        if built.collections != wanted or not len(states) == len(ids) == len(markers):
            return self.add_markers(markers, now)
        return self._take_ends(markers, states, ids, wanted)

    def _take_ends(
        self,
        ends: Sequence[TransactionMarker],
        states: Sequence[TxnState],
        ids: frozenset[str],
        wanted: frozenset[str] | None,
    ) -> TransactionBook:
        """The book with ``ends`` (END markers, in topic order) taken in, ``states`` their
        states as :func:`build_ends` built them (``ids``: their set). Those the book does not
        name, in one step; the few it names (``meeting``: a transaction a batch's events left
        open before its END came, a late one, an END already known or published) and those
        named twice, one by one: an END-known or published one ignored, a late one ended, an
        open one ended from its state, a new one as built (once)."""
        named = {t.id for t in (*self.ended, *self.open, *self.late)}
        named.update(self.recent)
        meeting = ids & named
        if len(ids) < len(states):  # an END read twice: its second is ignored
            counts = Counter(state.id for state in states)
            meeting |= {txn for txn, count in counts.items() if count > 1}
        if not meeting:
            return replace(self, ended=self.ended + tuple(states))
        taken: list[TxnState | None] = list(states)
        open_, late = {t.id: t for t in self.open}, {t.id: t for t in self.late}
        known = {t.id for t in self.ended} | set(self.recent)
        for at in [i for i, state in enumerate(states) if state[0] in meeting]:
            marker = ends[at]
            txn = marker.id
            if txn in known:
                taken[at] = None
            elif txn in late:
                late[txn], taken[at] = late[txn].end(marker, wanted), None
            else:
                known.add(txn)
                state = open_.pop(txn, None)
                if state is not None:
                    taken[at] = state.end(marker, wanted)
        return replace(
            self,
            ended=self.ended + tuple([t for t in taken if t is not None]),
            open=tuple(open_.values()),
            late=tuple(late.values()),
        )

    def add_events(self, events: Mapping[str, TxnEvents], now: float) -> TransactionBook:
        """The book with a batch's events (per transaction id, merged over tasks) taken in."""
        ended = {t.id: t for t in self.ended}
        open_ = {t.id: t for t in self.open}
        late = {t.id: t for t in self.late}
        recent, arrivals = set(self.recent), dict.fromkeys(self.arrivals)
        for txn, seen in events.items():
            if txn in ended:
                ended[txn] = ended[txn].see(seen)
            elif txn in late:
                late[txn] = late[txn].see(seen)
                arrivals[txn] = None
            elif txn in recent:
                arrivals[txn] = None
            else:
                open_[txn] = open_.get(txn, TxnState(txn, first_seen=now)).see(seen)
        return replace(
            self,
            ended=tuple(ended.values()),
            open=tuple(open_.values()),
            late=tuple(late.values()),
            arrivals=tuple(arrivals),
        )

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, now: float, max_hold: float, on_timeout: OnTimeout) -> Decision:
        """What to publish now: the longest prefix of complete transactions (with ``publish``,
        timed-out ones count as complete and are named as exceptions), then late arrivals."""
        publish: list[str] = []
        exceptions: list[str] = []
        out_of_order: list[str] = []
        frontier, blocking = self.frontier, None
        for state in self.ended:
            if not state.complete and not self._gives_up(state, now, max_hold, on_timeout):
                blocking = state
                break
            publish.append(state.id)
            if _before(state, frontier):
                out_of_order.append(state.id)
                exceptions.append(state.id)
                continue
            if not state.complete:
                exceptions.append(state.id)
            frontier = _point(state, frontier)
        if blocking is None:
            for state in self.open:
                if not self._gives_up(state, now, max_hold, on_timeout):
                    blocking = state
                    break
                publish.append(state.id)
                exceptions.append(state.id)
        late = {t.id for t in self.late}
        for txn in self.arrivals:
            publish.append(txn)
            if txn in late:
                exceptions.append(txn)
        published = set(publish)
        held = [t for t in (*self.ended, *self.open) if t.id not in published]
        return Decision(
            decided_at=now,
            publish=tuple(publish),
            exceptions=tuple(exceptions),
            held=tuple(t.id for t in held),
            blocking=None if blocking is None else blocking.id,
            frontier=frontier,
            warning=self._warning(held, now, max_hold),
            out_of_order=tuple(out_of_order),
        )

    @staticmethod
    def _gives_up(state: TxnState, now: float, max_hold: float, on_timeout: OnTimeout) -> bool:
        return on_timeout is OnTimeout.PUBLISH and now - state.first_seen >= max_hold

    def _warning(self, held: list[TxnState], now: float, max_hold: float) -> HoldWarning | None:
        if self.warned_at is not None and now - self.warned_at < WARN_EVERY_S:
            return None
        over = sorted((t for t in held if now - t.first_seen >= max_hold), key=_age_key)
        if not over:
            return None
        return HoldWarning(len(over), now - over[0].first_seen, tuple(t.id for t in over[:10]))

    def apply(self, decision: Decision) -> TransactionBook:
        """The book after ``decision`` was committed. ``decision`` must come from this book's
        :meth:`decide`, with nothing added in between."""
        published = set(decision.publish)
        exceptions = set(decision.exceptions)
        late_ids = {t.id for t in self.late}
        recent = list(self.recent)
        late: list[TxnState] = []
        for state in (*self.late, *self.ended, *self.open):
            if state.id not in published and state.id not in late_ids:
                continue  # still held
            doubtful = state.id in exceptions or state.id in late_ids
            if not doubtful or state.complete:
                recent.append(state.id)  # whole in the lake: forgotten
            else:
                late.append(state)  # published incomplete: its events are still to come
        return replace(
            self,
            ended=tuple(t for t in self.ended if t.id not in published),
            open=tuple(t for t in self.open if t.id not in published),
            late=tuple(late[-LATE_LIMIT:]),
            recent=tuple(recent[-RECENT_LIMIT:]),
            arrivals=(),
            frontier=decision.frontier,
            warned_at=decision.decided_at if decision.warning is not None else self.warned_at,
        )

    def settle(
        self, seen: Mapping[str, int], now: float, max_hold: float, on_timeout: OnTimeout
    ) -> tuple[Decision, TransactionBook]:
        """:meth:`add_events` of a batch's ranks (``seen``: a mask per transaction, without
        positions), :meth:`decide` and :meth:`apply` in one step, with the same result: the
        decision and the book after it.

        Why a step of its own: most transactions of a batch END in it and complete in it, at
        the head of commit order, and the three steps built two states and three dictionaries
        for each (~45 ms of a batch of 20,000 transactions). Here that complete head is counted
        off first, without new states, and the three steps run on what is left."""
        return self.settle_head(*self.split_head(seen), now, max_hold, on_timeout)

    def settle_head(
        self,
        head: int,
        rest: Mapping[str, int],
        now: float,
        max_hold: float,
        on_timeout: OnTimeout,
    ) -> tuple[Decision, TransactionBook]:
        """:meth:`settle` for a caller that counted the complete head itself: ``head`` is
        :meth:`complete_head` of the batch's ranks, ``rest`` the ranks of every transaction
        but those ``head`` END-known ones."""
        if not head:
            book = self.add_events(_ranks_only(rest), now)
            decision = book.decide(now, max_hold, on_timeout)
            return decision, book.apply(decision)
        states = self.ended[:head]
        head_ids = tuple([t.id for t in states])
        if _out_of_order(states, self.frontier):  # decided one by one, with their exceptions
            whole = tuple([t._replace(seen=t.seen | _all_ranks(t.total)) for t in states])
            book = replace(self, ended=whole + self.ended[head:]).add_events(_ranks_only(rest), now)
            decision = book.decide(now, max_hold, on_timeout)
            return decision, book.apply(decision)
        tail = replace(self, ended=self.ended[head:], frontier=_prefix_point(states, self.frontier))
        book = tail.add_events(_ranks_only(rest), now)
        decision = book.decide(now, max_hold, on_timeout)
        after = replace(book, recent=()).apply(decision)
        # apply() lists the late transactions it forgets first, then those of commit order
        late = {t.id for t in self.late}
        n_late = next((i for i, txn in enumerate(after.recent) if txn not in late), None)
        n_late = len(after.recent) if n_late is None else n_late
        recent = (*self.recent, *after.recent[:n_late], *head_ids, *after.recent[n_late:])
        return (
            replace(decision, publish=head_ids + decision.publish),
            replace(after, recent=recent[-RECENT_LIMIT:]),
        )

    def split_head(self, seen: Mapping[str, int]) -> tuple[int, dict[str, int]]:
        """:meth:`complete_head` of ``seen``, and ``seen`` without that head's transactions:
        what :meth:`settle_head` takes."""
        head = self.complete_head(seen)
        taken = {t.id for t in self.ended[:head]}
        return head, {txn: mask for txn, mask in seen.items() if txn not in taken}

    def complete_head(self, seen: Mapping[str, int], start: int = 0) -> int:
        """How many END-known transactions, from the first, are complete with ``seen`` added;
        ``start``: the first ``start`` of them are known to be."""
        count = start
        get = seen.get
        for state in self.ended[start:]:
            expected, total = state.expected, state.total
            if expected is None:
                break
            mask = state.seen | get(state.id, 0)
            if total is not None:  # ranges.count_mask inlined: ~20,000 states a batch
                mask &= (2 << total) - 2
            if mask.bit_count() < expected:
                break
            count += 1
        return count

    # -- the direct path ---------------------------------------------------------------------

    def frontier_candidates(self, tails: Mapping[_Key, PartitionTail]) -> tuple[str, ...]:
        """The END-known transactions that can have no event beyond the batch's ranges: the
        longest prefix of commit order whose every transaction each partition has passed.

        ``tails`` must name every data partition the job reads (idle ones too). Assumes that
        within one partition events come in commit order, so a partition has passed every
        transaction committed before the one of its last event. A partition whose last event
        belongs to an open transaction has passed every END-known one; an idle partition, or
        one whose last event has no transaction or one published already, has passed none.
        A partition constrains only the transactions whose END lists its data collection
        (every one when either is unknown). A transaction with events in a collection that no
        partition names (a table the job does not read, unless :attr:`collections` leaves it
        out) cannot complete, so it is never a candidate: give every partition its collection.
        Markers of the batch must be added first, its events after.

        """
        ended = self.ended
        places = {state.id: at for at, state in enumerate(ended)}  # an id's last place wins

        def place(txn: str) -> float:
            return places.get(txn, math.inf)

        settled = {t.id for t in self.late} | set(self.recent)
        # how far the slowest partition of each collection got (None: of an unknown one)
        reach: dict[str | None, float] = {}
        for tail in tails.values():
            upto = _passed(tail, place, settled)
            reach[tail.collection] = min(reach.get(tail.collection, math.inf), upto)
        anywhere = min(reach.values(), default=math.inf)
        unknown = reach.get(None, math.inf)
        wanted = None if self.collections is None else frozenset(self.collections)
        # the limit depends only on the collections a transaction touches: asked once for each
        # combination (a batch's tens of thousands of transactions touch a handful)
        limits: dict[tuple[str, ...], float] = {}
        for at, state in enumerate(ended):
            bound = limits.get(state.touched)
            if bound is None:
                bound = limits[state.touched] = _limit(
                    state.touched, reach=reach, anywhere=anywhere, unknown=unknown, wanted=wanted
                )
            if at >= bound:
                return tuple([t.id for t in ended[:at]])
        return tuple([t.id for t in ended])

    # -- storing -----------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The ``held`` figures of ``job_state`` (status command, metrics)."""
        held = (*self.ended, *self.open)
        oldest = min((t.first_seen for t in held), default=None)
        blocking = next((t.id for t in held if not t.complete), None)
        return {
            "transactions": len(held),
            "events": sum(t.events for t in held),
            "oldest_first_seen": None if oldest is None else _iso(oldest),
            "blocking": blocking,
        }

    def job_state(self) -> dict[str, Any]:
        """``CommitRequest.job_state`` of the commit that leaves the job with this book."""
        return {"transactions": self.to_json(), "held": self.summary()}

    @classmethod
    def from_job_state(
        cls, job_state: Mapping[str, Any] | None, collections: Iterable[str] | None = None
    ) -> TransactionBook:
        """The book a job's last commit stored (``WriterProgress.job_state``); an empty one
        when there is none. ``collections``: the tables the job reads now (the configuration
        may have changed since), None when not known.

        Raises:
            BadTransactionState: the stored book cannot be read.
        """
        stored = None if job_state is None else job_state.get("transactions")
        book = cls() if stored is None else cls.from_json(stored)
        return replace(book, collections=None if collections is None else tuple(collections))

    def to_json(self) -> dict[str, Any]:
        """The book as JSON values (``job_state["transactions"]``)."""
        body: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return {"format": _FORMAT, **body}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TransactionBook:
        """The book :meth:`to_json` gave.

        Raises:
            BadTransactionState: ``data`` is not a stored book of this format.
        """
        body = dict(data)
        if body.pop("format", None) != _FORMAT:
            raise BadTransactionState(f"stored transaction book of unknown format: {data!r:.80}")
        try:
            return _ADAPTER.validate_python(body)
        except ValidationError as exc:
            raise BadTransactionState(f"stored transaction book is invalid: {exc}") from None


_ADAPTER: TypeAdapter[TransactionBook] = TypeAdapter(TransactionBook)


def _limit(
    touched: tuple[str, ...],
    *,
    reach: Mapping[str | None, float],
    anywhere: float,
    unknown: float,
    wanted: frozenset[str] | None,
) -> float:
    """The first index in commit order a transaction touching ``touched`` cannot have passed:
    -1 when one of its collections has no partition (it can never complete)."""
    if any(c not in reach and (wanted is None or c in wanted) for c in touched):
        return -1
    upto = min((reach.get(c, math.inf) for c in touched), default=anywhere)
    return min(upto, unknown)


def _passed(tail: PartitionTail, place: Callable[[str], float], settled: set[str]) -> float:
    """How many END-known transactions (a prefix of them) the partition has passed.

    A transaction neither END-known nor published (``settled``) is open, or first seen in this
    batch: it commits after every END-known one. A duplicate of a transaction published so long
    ago that the book forgot it looks the same; that is the one case this cannot tell.

    The transaction of the last event is passed too when the record after the range is of a
    transaction committed after it: a transaction's events follow each other in a partition,
    so none of it comes later. (One committed before it - a producer's retry repeating an
    older event - tells nothing.)"""
    if tail.idle or tail.txn is None or tail.txn in settled:
        return 0
    last = place(tail.txn)
    after = tail.after
    if after is None or after in settled or last == math.inf:
        return last
    return last + 1 if place(after) > last else last


#: What an END's data collections tell the book: the events the job awaits, the collections.
_Shape = tuple[int | None, tuple[str, ...]]


class BuiltEnds(NamedTuple):
    """END markers' transactions as :meth:`TransactionBook.add_markers` builds them when the
    book names none of them, built ahead (:func:`build_ends`): ``states`` in the markers'
    order, ``ids`` the set of their ids (fewer than the states: an id named twice), and
    the ``collections`` they were built for (the book's ``collections``)."""

    states: Sequence[TxnState]
    ids: frozenset[str]
    collections: frozenset[str] | None


def build_ends_of(
    values: Sequence[bytes | None], collections: frozenset[str] | None, first_seen: float
) -> tuple[list[TxnState], frozenset[str]]:
    """:func:`build_ends` of the END markers among records of the transaction topic, decoded
    (:func:`~ingest.transactions.markers.decode_end`).

    Raises:
        BadTransactionMetadata: a record is not a BEGIN/END marker Debezium writes.
    """
    states = [state for state in build_ends_at(values, collections, first_seen) if state]
    return states, frozenset([state[0] for state in states])


def build_ends_at(
    values: Sequence[bytes | None], collections: frozenset[str] | None, first_seen: float
) -> list[TxnState | None]:
    """:func:`build_ends_of` record by record: the state of each END, None for any other
    record.

    Raises:
        BadTransactionMetadata: a record is not a BEGIN/END marker Debezium writes.
    """
    shapes: dict[tuple[tuple[str, int], ...], _Shape] = {}
    return [
        None if m is None else _ended(m, collections, first_seen, shapes)
        for m in map(decode_end, values)
    ]


def build_ends(
    ends: Sequence[TransactionMarker],
    collections: frozenset[str] | None,
    first_seen: float,
) -> tuple[list[TxnState], frozenset[str]]:
    """The state of the transaction of each END marker of ``ends`` (END markers only, in
    order: :meth:`TransactionBook._take_ends` pairs each state with its marker) as the book
    builds it for one it does not name, first seen at ``first_seen`` (when the caller read
    them), and the set of their ids. An id named twice gets a state each time (``_take_ends``
    then takes its first END only)."""
    shapes: dict[tuple[tuple[str, int], ...], _Shape] = {}
    states: list[TxnState] = []
    append = states.append
    for marker in ends:
        shape = shapes.get(marker[3])
        if shape is None:
            append(_ended(marker, collections, first_seen, shapes))
        else:  # _ended inlined for the common END: tens of thousands a batch
            _, txn, count, _, ts_ms, position = marker
            fields = (txn, first_seen, 0, True, count, *shape, ts_ms, position, None, None)
            append(_new_state(TxnState, fields))
    return states, frozenset([state[0] for state in states])


def _ended(
    marker: TransactionMarker,
    collections: frozenset[str] | None,
    first_seen: float,
    shapes: dict[tuple[tuple[str, int], ...], _Shape] | None = None,
    *,
    seen: int = 0,
    max_position: str | None = None,
    max_ts_ms: int | None = None,
) -> TxnState:
    """The state of ``marker``'s transaction once its END is known; built in one step (most
    transactions are first seen by their END: the driver reads markers before the tasks).
    ``shapes``: what earlier markers' collections gave, reused (a batch's tens of thousands of
    markers name few combinations of tables and counts)."""
    shape = None if shapes is None else shapes.get(marker.collections)
    if shape is None:
        shape = (marker.count_for(collections), tuple([name for name, _ in marker.collections]))
        if shapes is not None and collections is not None and marker.collections:
            shapes[marker.collections] = shape  # otherwise the count is the marker's own
    fields = (marker.id, first_seen, seen, True, marker.event_count, *shape, marker.ts_ms)
    return _new_state(TxnState, (*fields, marker.position, max_position, max_ts_ms))


def _ranks_only(seen: Mapping[str, int]) -> dict[str, TxnEvents]:
    return {txn: TxnEvents(mask) for txn, mask in seen.items()}


def _prefix_point(states: tuple[TxnState, ...], before: Point | None) -> Point:
    """:func:`_point` folded over ``states`` (published in this order), in one step: the last
    one, at the newest position any of them (or ``before``) had."""
    last = states[-1]
    position = next(
        (p for t in reversed(states) if (p := t.end_position or t.max_position) is not None),
        None if before is None else before.position,
    )
    return Point(last.id, position, last.ts_ms if last.ts_ms is not None else last.max_ts_ms)


def _out_of_order(states: tuple[TxnState, ...], frontier: Point | None) -> bool:
    """Whether :meth:`TransactionBook.decide` would find one of ``states`` (published in this
    order) committed before the frontier the ones before it moved to: then the head is not
    one prefix of commit order (a producer's retry can repeat a transaction's END after a later
    one's) and :func:`_prefix_point` would move the frontier back to it."""
    newest = None if frontier is None else frontier.position
    for state in states:
        end = state.end_position
        if end is not None and newest is not None and end < newest:
            return True
        newest = end or state.max_position or newest
    return False


def _all_ranks(total: int | None) -> int:
    """The mask of ranks 1..``total`` (0 when not known)."""
    return 0 if total is None else (1 << (total + 1)) - 2


def _before(state: TxnState, frontier: Point | None) -> bool:
    """Whether ``state`` committed before the published ``frontier`` (both positions known)."""
    if frontier is None or frontier.position is None or state.end_position is None:
        return False
    return state.end_position < frontier.position


def _point(state: TxnState, before: Point | None) -> Point:
    position = state.end_position or state.max_position
    if position is None and before is not None:
        position = before.position
    return Point(state.id, position, state.ts_ms if state.ts_ms is not None else state.max_ts_ms)


def _age_key(state: TxnState) -> float:
    return state.first_seen


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).isoformat()


_Comparable = TypeVar("_Comparable", int, str)


def _max(a: _Comparable | None, b: _Comparable | None) -> _Comparable | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
