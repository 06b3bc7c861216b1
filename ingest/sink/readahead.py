"""The transaction topic, read ahead: the next batch's markers, read and decoded on a driver thread
while this batch's tasks run.

In ``transactions: consistent`` mode the driver must know a batch's END markers before its tasks
start (they decide which events the tasks may write directly), and reading and decoding them is
the largest part of the mode's work before the tasks (~200 ms for 30,000 records). The next batch
starts where this one ends, so that range can be read while the driver would otherwise wait for
the tasks. The thread starts with the batch and waits until its tasks run before it reads
(:func:`~ingest.sink.consistent.read_ahead_next` says why), or until a batch asks for the
records. Only what the broker holds when it begins is read, up to a limit.

A read-ahead is an optimisation, never a source of truth: :meth:`MarkerReadAhead.records` uses
it only when it began exactly at the batch's start offset, and reads what it lacks (or all, if it
failed) synchronously, so the batch gets the same records either way.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from confluent_kafka import Message

from catalog.logs import get_logger
from ingest.kafka.brokerview import STARTUP_CHECK, BrokerView
from ingest.kafka.offsets import OffsetRange, PartitionId, next_end
from ingest.kafka.options import SourceOptions
from ingest.kafka.reader import message_millis, read_messages
from ingest.kafka.schema import offset_of
from ingest.transactions.book import TxnState, build_ends_at
from ingest.transactions.markers import (
    BadTransactionMetadata,
    TransactionMarker,
    end_markers,
    is_transaction_topic,
)

log = get_logger("lakestream.ingest")

#: How long a batch waits for a read-ahead still running before it reads the rest itself (it
#: normally ended during the tasks; one still reading is slow, or waits on a broker outage).
WAIT_S = 5.0


class MarkerRun:
    """Records of the transaction topic read in one go, as the driver needs them: their
    offsets, values and END markers (None for a BEGIN or a tombstone), in parallel lists.

    Lists per run, not an object per record: a batch reads tens of thousands of records here,
    and building a named tuple for each was a tenth of the driver's work on them. The END
    markers' states for the book are built when first asked for, straight from the records
    (:meth:`states`), the markers themselves only if asked (:attr:`ends`: the book takes the
    few ENDs of transactions it knows already from them); a read-ahead builds the states as
    soon as it has read a run (:meth:`build_ahead`).
    """

    __slots__ = ("_built", "_ends", "_found", "_tombstones", "messages", "offsets", "values")

    def __init__(
        self,
        messages: Sequence[Message],
        offsets: Sequence[int],
        values: list[bytes | None],
        ends: list[TransactionMarker | None] | None = None,
        built: _Built | None = None,
    ) -> None:
        self.messages = messages
        self.offsets = offsets
        self.values = values
        self._ends = ends
        self._built = built
        self._found: list[TransactionMarker] | None = None
        self._tombstones: int | None = None

    @classmethod
    def of(cls, messages: Sequence[Message]) -> MarkerRun:
        values = [m.value() for m in messages]
        first, last = offset_of(messages[0]), offset_of(messages[-1])
        contiguous = last - first + 1 == len(messages)
        offsets = range(first, last + 1) if contiguous else [offset_of(m) for m in messages]
        return cls(messages, offsets, values)

    @property
    def ends(self) -> list[TransactionMarker | None]:
        """The END marker of each record, None for the others.

        Raises:
            BadTransactionMetadata: a record is no marker (see ``end_markers``).
        """
        ends = self._ends
        if ends is None:  # two threads may both decode: the same result, set once either way
            ends = self._ends = end_markers(self.values)
        return ends

    @property
    def ends_only(self) -> list[TransactionMarker]:
        """The END markers alone, in order (:attr:`ends` without the Nones).

        Raises:
            BadTransactionMetadata: a record is no marker (see ``end_markers``).
        """
        found = self._found
        if found is None:
            found = self._found = [end for end in self.ends if end is not None]
        return found

    def build_ahead(self, collections: frozenset[str] | None) -> None:
        """Build the END markers' transaction states for a book reading ``collections`` now,
        on the read-ahead's thread (straight from the records: no marker is made; first seen
        now, when read), and count the tombstones, rather than in the next batch's start.
        Nothing when a record is no marker (the batch that asks raises, as it would have)."""
        _ = self.tombstones
        with contextlib.suppress(BadTransactionMetadata):
            self.states(collections, time.time())

    def states(
        self, collections: frozenset[str] | None, now: float
    ) -> tuple[list[TxnState], frozenset[str]]:
        """The transaction states of the run's END markers (in order) for a book reading
        ``collections``, and their ids: built ahead, else now (first seen ``now``).

        Raises:
            BadTransactionMetadata: a record is no marker (see ``end_markers``).
        """
        built = self._built
        if built is None or built.collections != collections:
            found = build_ends_at(self.values, collections, now)
            records = [at for at, state in enumerate(found) if state is not None]
            states = [state for state in found if state is not None]
            ids = frozenset([state[0] for state in states])
            built = self._built = _Built(collections, states, ids, records)
        return built.states, built.ids

    @property
    def end_count(self) -> int:
        """How many END markers the run holds (from its states where built).

        Raises:
            BadTransactionMetadata: a record is no marker (see ``end_markers``).
        """
        built = self._built
        return len(built.states) if built is not None else len(self.ends_only)

    def before(self, end: int) -> MarkerRun:
        """The records of this run below offset ``end``."""
        cut = bisect.bisect_left(self.offsets, end)
        if cut == len(self.offsets):
            return self
        built = None if self._built is None else self._built.before(cut)
        ends = None if self._ends is None else self._ends[:cut]
        run = MarkerRun(self.messages[:cut], self.offsets[:cut], self.values[:cut], ends, built)
        if self._found is not None and ends is not None:
            run._found = self._found[: cut - ends.count(None)]  # the ENDs before the cut
        return run

    @property
    def records(self) -> int:
        return len(self.offsets)

    @property
    def tombstones(self) -> int:
        """Records without a value (counted once)."""
        if self._tombstones is None:
            self._tombstones = self.values.count(None) + self.values.count(b"")
        return self._tombstones

    @property
    def last_timestamp_ms(self) -> int | None:
        return message_millis(self.messages[-1]) if self.messages else None


class _Built(NamedTuple):
    """A run's END states built for a book reading ``collections``, and the records they were
    built of (their places in the run; see :meth:`MarkerRun.build_ahead`)."""

    collections: frozenset[str] | None
    states: list[TxnState]
    ids: frozenset[str]
    records: list[int]

    def before(self, cut: int) -> _Built:
        """Those of the records before ``cut``."""
        count = bisect.bisect_left(self.records, cut)
        if count == len(self.states):
            return self
        states = self.states[:count]
        ids = frozenset([s.id for s in states])
        return _Built(self.collections, states, ids, self.records[:count])


@dataclass
class _Ahead:
    """One read-ahead of a partition: the records of ``[start, covered)``, guarded by
    ``changed`` (the thread notifies it after every chunk and when it ends). Its thread waits
    ``delay_s`` before it reads, or until ``go`` is set (a batch asks for the records)."""

    start: int
    delay_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    runs: list[MarkerRun] = field(default_factory=list)
    covered: int = -1
    finished: bool = False
    failed: BaseException | None = None

    def __post_init__(self) -> None:
        self.covered = self.start

    def wait_for(self, end: int) -> tuple[list[MarkerRun], int, BaseException | None]:
        """The records before ``end`` once covered (or the thread ended), where the read-ahead
        got to, and its failure; then it is told to stop. A read-ahead still waiting to begin
        begins now."""
        self.go.set()
        with self.changed:
            self.changed.wait_for(lambda: self.covered >= end or self.finished, WAIT_S)
            self.stop.set()
            found = [run.before(end) for run in self.runs if run.offsets and run.offsets[0] < end]
            return found, self.covered, self.failed

    def cancel(self) -> None:
        """Stop reading (a thread still waiting to begin ends without reading)."""
        self.stop.set()
        self.go.set()


class MarkerReadAhead:
    """Per transaction-topic partition, at most one read-ahead (see the module docstring)."""

    def __init__(self, kafka: SourceOptions, collections: Iterable[str] | None = None) -> None:
        """``collections``: the data collections the job's book reads (its ``collections``),
        None when unknown; the END states are built ahead for them."""
        self.kafka = kafka
        self.collections = None if collections is None else frozenset(collections)
        self._ahead: dict[tuple[str, int], _Ahead] = {}
        #: Records the last :meth:`records` took from a read-ahead (the batch's log line).
        self.last_served = 0

    def records(self, rng: OffsetRange) -> list[MarkerRun]:
        """The records of ``rng`` in offset order, from the read-ahead where it covers them."""
        self.last_served = 0
        ahead = self._ahead.pop((rng.topic, rng.partition), None)
        if ahead is None or ahead.start != rng.start:
            if ahead is not None:
                ahead.cancel()
            return read_records(rng, self.kafka)
        found, covered, failed = ahead.wait_for(rng.end)
        if failed is not None:
            log.warning("transaction_read_ahead_failed", topic=rng.topic, error=str(failed))
            return read_records(rng, self.kafka)
        self.last_served = sum(run.records for run in found)
        if covered < rng.end:
            rest = OffsetRange(rng.topic, rng.partition, max(covered, rng.start), rng.end)
            found += read_records(rest, self.kafka)
        return found

    def begin(self, rng: OffsetRange, limit: int, *, after_s: float = 0.0) -> None:
        """Start reading the partition of ``rng`` from its end, at most ``limit`` records, in
        ``after_s`` seconds (at once when a batch asks for them before)."""
        pid = PartitionId(rng.topic, rng.partition)
        ends = rng.end + limit
        self._launch(pid, rng.end, lambda: min(_high_watermark(pid, self.kafka), ends), after_s)

    def begin_first(self, start: Mapping[PartitionId, int], max_rows: int | None) -> None:
        """Start reading, for a job's first batch, each transaction-topic partition of
        ``start`` (where the job starts in every partition it reads) up to where that batch
        will likely end: the source's split of ``max_rows`` over the partitions' backlogs
        (:func:`~ingest.kafka.offsets.next_end`), with the ends the broker has now.

        Why: nothing ran before the first batch to read its markers ahead, and a job restarted
        after a while finds a backlog; this reads it while Spark starts the query. A batch that
        ends elsewhere cuts what was read, or reads the rest, as any batch does."""
        for pid, offset in start.items():
            if is_transaction_topic(pid.topic):
                self._launch(pid, offset, partial(_first_end, pid, start, max_rows, self.kafka))

    def _launch(
        self, pid: PartitionId, start: int, end_of: Callable[[], int], after_s: float = 0.0
    ) -> None:
        """A thread reading ``pid`` from ``start`` up to ``end_of()`` (asked in the thread,
        once it begins: ``after_s`` from now)."""
        key = (pid.topic, pid.partition)
        previous = self._ahead.pop(key, None)
        if previous is not None:
            previous.cancel()
        ahead = _Ahead(start=start, delay_s=after_s)
        self._ahead[key] = ahead
        thread = threading.Thread(
            target=self._read,
            args=(pid, ahead, end_of),
            name=f"lakestream-readahead-{pid.topic}-{pid.partition}",
            daemon=True,
        )
        thread.start()

    def close(self) -> None:
        for ahead in self._ahead.values():
            ahead.cancel()
        self._ahead.clear()

    def _read(self, pid: PartitionId, ahead: _Ahead, end_of: Callable[[], int]) -> None:
        try:
            ahead.go.wait(ahead.delay_s)
            if ahead.stop.is_set():
                return
            end = end_of()
            if end > ahead.start:
                self._fill(OffsetRange(pid.topic, pid.partition, ahead.start, end), ahead)
        except Exception as exc:  # the batch reads synchronously instead
            with ahead.changed:
                ahead.failed = exc
        finally:
            with ahead.changed:
                ahead.finished = True
                ahead.changed.notify_all()

    def _fill(self, rng: OffsetRange, ahead: _Ahead) -> None:
        for messages in read_messages(rng, self.kafka):
            found = MarkerRun.of(messages)
            found.build_ahead(self.collections)
            with ahead.changed:
                ahead.runs.append(found)
                ahead.covered = offset_of(messages[-1]) + 1
                ahead.changed.notify_all()
            if ahead.stop.is_set():
                return
        with ahead.changed:  # gaps at the end of the range (real Kafka's markers) are covered
            ahead.covered = rng.end


def read_records(rng: OffsetRange, kafka: SourceOptions) -> list[MarkerRun]:
    """The records of ``rng`` in offset order, read now."""
    return [MarkerRun.of(messages) for messages in read_messages(rng, kafka)]


def _high_watermark(pid: PartitionId, kafka: SourceOptions) -> int:
    """Where the partition ends now; briefly patient with the broker (the batch reads for
    itself what a read-ahead that failed did not)."""
    return latest_offsets([pid], kafka)[pid]


def _first_end(
    pid: PartitionId, start: Mapping[PartitionId, int], max_rows: int | None, kafka: SourceOptions
) -> int:
    """Where the first batch will likely end in ``pid`` (see ``begin_first``)."""
    return next_end(start, latest_offsets(list(start), kafka), {}, max_rows)[pid]


def latest_offsets(pids: list[PartitionId], kafka: SourceOptions) -> dict[PartitionId, int]:
    """Where each of ``pids`` ends now, briefly patient with the broker (a read-ahead that
    fails is no loss: the batch reads for itself)."""
    view = BrokerView(kafka.kafka_config, STARTUP_CHECK)
    try:
        return view.latest(pids)
    finally:
        view.close()


__all__ = ["WAIT_S", "MarkerReadAhead", "MarkerRun", "latest_offsets", "read_records"]
