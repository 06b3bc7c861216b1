"""The driver's share of ``transactions: consistent``: what a batch may publish, and the held
events it publishes.

Per batch (see :class:`ingest.sink.batch.BatchSink`), before the tasks run:

1. the book is read from the job's last commit (``job_state["transactions"]``), so a restart
   resumes from the catalog alone;
2. the batch's range of the transaction topic (two small records per source transaction) is
   read here and its END markers are added to the book - in topic order when the topic has one
   partition, in commit order once every partition was read past them when it has several
   (:func:`ordered_into`) - (the tasks skip that range; the driver reports its records);
3. the last record of each data partition's range and the record after it are peeked, and
   the book names the transactions that can have no event beyond the batch
   (``frontier_candidates``): the tasks write those straight into the target tables, hold every
   other tagged event.

The transaction topic's next range is read ahead while the batch's tasks run
(:class:`~ingest.sink.readahead.MarkerReadAhead`): the one piece of step 2 worth moving off the
driver's critical path (it is most of a batch's driver-side reading).

The held files of earlier batches are dissolved by the task of the batch's first range
(:attr:`ingest.sink.plan.Holding.dissolve`): it writes their events of candidates with its own
records and holds the others again in its held file.

After the tasks, :meth:`BatchTransactions.decide` takes in what they saw. A candidate that the
decision does not publish (an event straggled in late) makes the sink write the batch again with
the candidates cut before it: target rows of an unpublished transaction are never committed.
Held transactions the decision publishes beyond the candidates are read back from the held files
(the tasks' new ones; the committed ones too when no task dissolved them), decoded and written
here with the tasks' own code, and what is still held stays in one file - all in the batch's
one commit, which also removes the committed held files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple, overload

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from catalog import (
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    SourceWatermark,
    TableCommit,
    TableMeta,
    WriterProgress,
)
from catalog.files import read_whole_files
from catalog.logs import get_logger
from ingest import startpoint
from ingest.errors import IngestError
from ingest.kafka.brokerview import BrokerView, consumer_config
from ingest.kafka.offsets import OffsetRange, PartitionId
from ingest.kafka.options import SourceOptions
from ingest.kafka.reader import read_messages
from ingest.sink.held import HELD_SCHEMA, chunks_of, event_ref, split_held
from ingest.sink.plan import ShippedIds
from ingest.sink.readahead import MarkerReadAhead, MarkerRun, latest_offsets, read_records
from ingest.sink.report import (
    TaskReport,
    TopicFigures,
    WrittenFile,
    merged_masks,
)
from ingest.transactions.book import (
    BuiltEnds,
    Decision,
    PartitionTail,
    TransactionBook,
    TxnState,
)
from ingest.transactions.markers import (
    BadTransactionMetadata,
    MarkerStatus,
    TransactionMarker,
    decode_marker,
    is_transaction_topic,
)
from ingest.transactions.order import UnorderedTransactions
from ingest.transactions.policy import (
    DEFAULT_PARTITION_IDLE_S,
    OnTimeout,
    TransactionConfigError,
)

log = get_logger("lakestream.ingest")


class CandidateNotPublished(IngestError):
    """A transaction the tasks wrote directly is not published by the decision: write again."""

    def __init__(self, txn: str) -> None:
        super().__init__(f"transaction {txn} turned out incomplete; writing the batch again")
        self.txn = txn


@dataclass(frozen=True)
class TxnPolicy:
    max_hold_s: float
    on_timeout: OnTimeout
    partition_idle_s: float = DEFAULT_PARTITION_IDLE_S
    """With a multi-partition transaction topic: how long after an END was read a partition
    read to its end counts as past it (:mod:`ingest.transactions.order`)."""


def load_book(
    progress: WriterProgress | None, collections: Sequence[str] | None
) -> TransactionBook:
    """The book stored with the job's last commit (an empty one at first)."""
    state = progress.job_state if progress is not None else None
    stored = state.get("transactions") if isinstance(state, Mapping) else None
    book = TransactionBook.from_json(stored) if isinstance(stored, Mapping) else TransactionBook()
    if collections is not None and book.collections is None:
        book = replace(book, collections=tuple(sorted(collections)))
    return book


def collection_of(topic: str) -> str | None:
    """The data collection (``schema.table``) Debezium names for a data topic."""
    parts = topic.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 3 else None


def batch_ranges(df: Any, checkpoint: Path, batch_id: int) -> list[OffsetRange]:
    """The offset ranges of a batch: from Spark's offset log when it tells them (a file read),
    else from the batch itself (``emit=ranges``: one tiny row per range, but a Spark job)."""
    planned = planned_ranges(checkpoint, batch_id)
    if planned is not None:
        return planned
    rows = df.collect()
    return [
        OffsetRange(r["topic"], int(r["partition"]), int(r["startOffset"]), int(r["endOffset"]))
        for r in rows
    ]


def planned_ranges(checkpoint: Path, batch_id: int) -> list[OffsetRange] | None:
    """The ranges Spark planned for ``batch_id``: ``offsets/<batch_id>`` holds their ends (the
    source's offset JSON, written before the batch runs, the same on a replay) and the batch
    before, or batch 0's saved start (:mod:`ingest.startpoint`), their starts. None when either
    is missing or a partition has no start (the caller then asks the batch)."""
    end = _logged_offsets(checkpoint / "offsets" / str(batch_id))
    start = _batch_start(checkpoint, batch_id)
    if end is None or start is None:
        return None
    ranges = []
    for topic, parts in sorted(end.items()):
        for partition, stop in sorted(parts.items(), key=lambda item: int(item[0])):
            begin = start.get(topic, {}).get(str(partition))
            if begin is None or begin < 0:
                return None
            if stop > begin:
                ranges.append(OffsetRange(topic, int(partition), int(begin), int(stop)))
    return ranges


def resumed_start(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    """Where the query's next batch starts by Spark's logs: the end of the last planned batch
    once it committed, else (it runs again) the start of that batch. None when there is no
    batch yet or a log cannot be read: then nothing reads ahead for it."""
    planned = _last_batch(checkpoint / "offsets")
    if planned is None:
        return None
    if _last_batch(checkpoint / "commits") == planned:
        return _logged_offsets(checkpoint / "offsets" / str(planned))
    return _batch_start(checkpoint, planned)


def batch_ends(checkpoint: Path, batch_id: int) -> dict[tuple[str, int], int]:
    """Where ``batch_id`` ends in every partition it reads, those without a range too (Spark's
    offset log; empty when it cannot be read): which partitions of the transaction topic a
    batch's order must wait for, and how far each was read."""
    logged = _logged_offsets(checkpoint / "offsets" / str(batch_id)) or {}
    return {(topic, int(p)): end for topic, parts in logged.items() for p, end in parts.items()}


def _batch_start(checkpoint: Path, batch_id: int) -> dict[str, dict[str, int]] | None:
    """Where ``batch_id`` starts: the end of the batch before, or batch 0's saved start."""
    if batch_id > 0:
        return _logged_offsets(checkpoint / "offsets" / str(batch_id - 1))
    saved = startpoint.read_state(checkpoint).saved
    return saved.offsets if saved is not None else None


def _last_batch(log_dir: Path) -> int | None:
    try:
        return max((int(e.name) for e in log_dir.iterdir() if e.name.isdigit()), default=None)
    except OSError:
        return None


def _logged_offsets(path: Path) -> dict[str, dict[str, int]] | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 3 or lines[0] != "v1":
        return None
    try:
        body = json.loads(lines[2])
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in body.items()}


@dataclass
class BatchTransactions:
    """The transaction state of one batch on the driver, across its write passes."""

    book: TransactionBook
    """With the batch's markers added; tasks' events are added per pass."""
    policy: TxnPolicy
    now: float
    candidates: tuple[str, ...]
    settled: frozenset[str]
    """Published before (late or recent): their events pass straight through."""
    decision: Decision | None = None
    after: TransactionBook | None = None
    loaded: TransactionBook = field(default_factory=TransactionBook)
    """The book of the job's last commit, before this batch."""
    markers: int = 0
    marker_report: TaskReport = field(default_factory=TaskReport)
    """The transaction topic's records this driver read (the tasks skip them)."""
    markers_read_ahead: int = 0
    """Of those, the records a read-ahead had read before the batch asked."""
    timings: dict[str, int] = field(default_factory=dict)
    """Milliseconds of the work before the tasks, for the batch's log line."""
    owner: tuple[str, int, int] | None = None
    """The batch's first range (topic, partition, start): its task dissolves the held files."""
    cut: int | None = field(default=None)
    """How many candidates the tasks may write directly (None: all)."""
    _published: tuple[int | None, ShippedIds] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def direct(self) -> tuple[str, ...]:
        """The candidates the tasks write directly: those before :attr:`cut`."""
        return self.candidates if self.cut is None else self.candidates[: self.cut]

    @property
    def publish(self) -> ShippedIds:
        """The transactions whose events the tasks write directly: :attr:`direct` and those
        published before (built once per cut: ~20,000 ids a batch)."""
        if self._published is None or self._published[0] != self.cut:
            shipped = ShippedIds(chain(self.direct, sorted(self.settled)))
            self._published = (self.cut, shipped)
        return self._published[1]

    def decide(self, reports: Sequence[TaskReport]) -> Decision:
        """Take in what the tasks saw; raise :class:`CandidateNotPublished` if one of the
        transactions written directly is not published (the batch is written again)."""
        policy = self.policy
        seen = merged_masks([r.txn_ranks for r in reports])
        decision, after = self.book.settle(seen, self.now, policy.max_hold_s, policy.on_timeout)
        direct = self.direct
        if decision.publish[: len(direct)] != direct:  # candidates are commit order's first
            published = set(decision.publish)
            for i, txn in enumerate(direct):
                if txn not in published:
                    self.cut = i
                    raise CandidateNotPublished(txn)
        self.decision, self.after = decision, after
        return decision

    def job_state(self) -> dict[str, object]:
        assert self.after is not None
        return {"transactions": self.after.to_json(), "held": self.after.summary()}

    def watermark(self, tables: Iterable[str]) -> SourceWatermark | None:
        assert self.decision is not None
        point = self.decision.watermark
        if point is None:
            return None
        return SourceWatermark(
            batch=point,
            tables=dict.fromkeys(sorted(tables), point),
            exceptions=self.decision.exceptions,
        )

    def changed(self) -> bool:
        """Whether the book to commit differs from the one the batch started from."""
        return self.after is not None and self.after.to_json() != self.loaded.to_json()


def start_batch(
    book: TransactionBook,
    ranges: Sequence[OffsetRange],
    partitions: Iterable[tuple[str, int]],
    kafka: SourceOptions,
    policy: TxnPolicy,
    *,
    readahead: MarkerReadAhead | None = None,
    read_after_s: float = 0.0,
    ends: Mapping[tuple[str, int], int] | None = None,
) -> BatchTransactions:
    """Steps 1-3 of the module docstring for one batch. With ``readahead``, the transaction
    topic's range was mostly read during the batch before, and the next batch's is begun here,
    to read once the tasks run (``read_after_s``, see :func:`read_ahead_next`)."""
    now = time.time()
    started = time.monotonic()
    timings: dict[str, int] = {}
    partitions = tuple(partitions)
    # the data partitions' tails and the transaction topic's range both wait on the broker:
    # read at the same time (one short-lived thread, for this call only)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakestream-tails") as pool:
        tails_read = pool.submit(partition_tails, ranges, partitions, kafka)
        markers = read_markers(ranges, kafka, readahead)
        timings["markers_ms"] = _ms_since(started)
        loaded = book
        txn_topic = ordered_topic(partitions)
        if txn_topic is None:
            book = markers.into(book, now)
        else:
            book = ordered_into(
                book,
                markers,
                ranges,
                txn_topic,
                kafka=kafka,
                idle_s=policy.partition_idle_s,
                now=now,
                ends=ends,
            )
        tails = tails_read.result()
        timings["tails_ms"] = _ms_since(started)
    candidates = book.frontier_candidates(tails) if tails else tuple(t.id for t in book.ended)
    settled = frozenset(t.id for t in book.late) | frozenset(book.recent)
    txn = BatchTransactions(
        book,
        policy,
        now,
        candidates,
        settled,
        loaded=loaded,
        markers=len(markers.ends),
        marker_report=markers.report,
        markers_read_ahead=markers.read_ahead,
        owner=first_range(ranges),
        timings=timings,
    )
    if readahead is not None:
        read_ahead_next(ranges, readahead, after_s=read_after_s)
    return txn


def read_ahead_next(
    ranges: Sequence[OffsetRange], readahead: MarkerReadAhead, *, after_s: float = 0.0
) -> None:
    """Begin reading the next batch's range of each transaction topic (from this one's end) in
    ``after_s`` seconds: when the batch's tasks have started (a read begun with the batch
    competed with the batch's serial start, the plan and Spark launching the tasks)."""
    for rng in ranges:
        if is_transaction_topic(rng.topic):
            readahead.begin(rng, limit=rng.end - rng.start, after_s=after_s)


@dataclass(frozen=True)
class OrderedTopic:
    """The transaction topic when it has several partitions: its END markers are put in commit
    order (:mod:`ingest.transactions.order`) before the book takes them."""

    topic: str
    partitions: tuple[int, ...]


def ordered_topic(partitions: Iterable[tuple[str, int]]) -> OrderedTopic | None:
    """The subscription's transaction topic when it has more than one partition (None: one
    partition, whose order is commit order).

    Raises:
        TransactionConfigError: several transaction topics, one of them partitioned: no
            commit order holds across two sources.
    """
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        if is_transaction_topic(topic):
            topics.setdefault(topic, []).append(partition)
    many = [t for t, parts in topics.items() if len(parts) > 1]
    if not many:
        return None
    if len(topics) > 1:
        raise TransactionConfigError(
            f"the job reads {len(topics)} transaction topics and {many[0]} has "
            f"{len(topics[many[0]])} partitions: commit order is known only within one source "
            "with a partitioned transaction topic; run one job per source, or recreate the topic "
            "with 1 partition"
        )
    return OrderedTopic(many[0], tuple(sorted(topics[many[0]])))


def ordered_into(
    book: TransactionBook,
    markers: BatchMarkers,
    ranges: Sequence[OffsetRange],
    topic: OrderedTopic,
    *,
    kafka: SourceOptions,
    idle_s: float,
    now: float,
    ends: Mapping[tuple[str, int], int] | None = None,
) -> TransactionBook:
    """``book`` with the batch's END markers taken in commit order: those every partition of
    the transaction topic has been read past (:class:`~ingest.transactions.order.EndOrder`).

    A partition read to its end counts as past the ENDs read ``partition_idle_s`` before; when
    only such partitions keep ENDs back, the batch waits out what is left of that time (at
    most ``partition_idle_s``, only while a partition is idle: a light load) and looks again,
    so that the last transactions of a burst are published with it, not with the next one.

    Raises:
        UnorderedTransactions: an END carries no commit position.
    """
    # how far the batch reads each partition: its end offsets (``ends``), those without a range
    # too - a partition with nothing new was still read to there
    read_to = {p: end for (t, p), end in (ends or {}).items() if t == topic.topic}
    read_to.update({r.partition: r.end for r in ranges if r.topic == topic.topic})
    order = book.order.take(
        markers.ends_by_partition(), read_to, now, topic.topic, len(topic.partitions)
    )
    read_upto = dict(order.read_to)
    released: list[TransactionMarker] = []
    for patient in (False, True):
        out, order = order.release(topic.partitions)
        released += out
        blocked = order.blocked_by(topic.partitions)
        if not blocked:
            break
        newest = max(end.read_at for end in order.pending)
        if patient:
            time.sleep(max(0.0, min(idle_s, newest + idle_s - time.time())))
        observed = time.time()
        idle = caught_up(topic.topic, blocked, read_upto, kafka)
        order = order.pass_idle(idle, read_by=observed - idle_s)
        if len(idle) < len(blocked):
            break  # a partition with more to read: its next batch moves it
    out, order = order.release(topic.partitions)
    released += out
    log.debug(
        "transaction_ends_ordered",
        topic=topic.topic,
        released=len(released),
        pending=len(order.pending),
        blocked_by=list(order.blocked_by(topic.partitions)),
    )
    book = replace(book, order=order)
    return book.add_markers(released, now) if released else book


def check_order_at_start(kafka: SourceOptions) -> None:
    """Refuse, before the query starts, a transaction topic of several partitions whose END
    markers carry no commit position (the last few records of each partition are looked at;
    an empty topic passes here, and every batch checks its own ENDs).

    Raises:
        UnorderedTransactions: such an END was found.
    """
    view = BrokerView(kafka.kafka_config)
    try:
        found = view.partitions(kafka.subscription)
        topic = ordered_topic((pid.topic, pid.partition) for pid in found)
        if topic is None:
            return
        pids = [PartitionId(topic.topic, p) for p in topic.partitions]
        marks = view.watermarks(pids)
    finally:
        view.close()
    for pid, (low, high) in marks.items():
        if high <= low:
            continue
        rng = OffsetRange(pid.topic, pid.partition, max(low, high - _START_CHECK_RECORDS), high)
        for messages in read_messages(rng, kafka):
            for message in messages:
                marker = _marker_or_none(message.value())
                end = marker is not None and marker.status is MarkerStatus.END
                if end and marker is not None and marker.position is None:
                    raise UnorderedTransactions(topic.topic, len(pids), marker.id)


#: Records at the end of each partition of a transaction topic read when a job starts.
_START_CHECK_RECORDS = 4


def _marker_or_none(value: bytes | None) -> TransactionMarker | None:
    """The marker in a record; None for a tombstone or a record that is no marker (the batch
    that reads it makes a dead letter of it)."""
    try:
        return decode_marker(None, value)
    except BadTransactionMetadata:
        return None


def caught_up(
    topic: str, partitions: Sequence[int], ends: Mapping[int, int], kafka: SourceOptions
) -> list[int]:
    """The ``partitions`` of ``topic`` the job has read to their end (``ends``: how far; a
    partition it never read from counts as read to 0), as the broker says now."""
    pids = [PartitionId(topic, p) for p in partitions]
    if not pids:
        return []
    latest = latest_offsets(pids, kafka)
    return [pid.partition for pid in pids if ends.get(pid.partition, 0) >= latest[pid]]


def _ms_since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def first_range(ranges: Sequence[OffsetRange]) -> tuple[str, int, int] | None:
    """(topic, partition, start) of the batch's first non-empty range, in a fixed order."""
    starts = [(r.topic, r.partition, r.start) for r in ranges if r.end > r.start]
    return min(starts, default=None)


class BatchMarkers(NamedTuple):
    """What :func:`read_markers` read of a batch's transaction topics."""

    ends: Sequence[TransactionMarker]
    """The END markers, in topic order (:class:`RunEnds`: decoded where asked)."""
    report: TaskReport
    """The figures of the records read, as a task would report them (records, ignored,
    tombstones, newest time)."""
    read_ahead: int
    """How many of the records a read-ahead had read (during the batch before, or as the job
    started)."""
    runs: list[MarkerRun]
    places: list[tuple[str, int]]
    """The topic and partition of each run."""

    def ends_by_partition(self) -> dict[int, list[TransactionMarker]]:
        """The END markers per partition of the transaction topic, each in topic order."""
        ends: dict[int, list[TransactionMarker]] = {}
        for (_, partition), run in zip(self.places, self.runs, strict=True):
            ends.setdefault(partition, []).extend(run.ends_only)
        return ends

    def built(self, collections: frozenset[str] | None, now: float) -> BuiltEnds:
        """The ENDs' transaction states for a book reading ``collections``: those a
        read-ahead built as it read, the others now (first seen ``now``)."""
        states: list[TxnState] = []
        ids: list[frozenset[str]] = []
        for run in self.runs:
            run_states, run_ids = run.states(collections, now)
            states += run_states
            ids.append(run_ids)
        union = ids[0] if len(ids) == 1 else frozenset().union(*ids)
        return BuiltEnds(states, union, collections)

    def into(self, book: TransactionBook, now: float) -> TransactionBook:
        """``book`` with the END markers taken in (:meth:`TransactionBook.add_built`)."""
        if not self.ends:
            return book
        wanted = None if book.collections is None else frozenset(book.collections)
        return book.add_built(self.ends, self.built(wanted, now), now)


def read_markers(
    ranges: Sequence[OffsetRange], kafka: SourceOptions, readahead: MarkerReadAhead | None = None
) -> BatchMarkers:
    """The END markers of the batch's ranges of transaction topics, with the records read
    (see :class:`BatchMarkers`)."""
    taken: list[MarkerRun] = []
    places: list[tuple[str, int]] = []
    records: dict[str, int] = {}
    tombstones, stamps, ahead = 0, list[int](), 0
    for rng in ranges:
        if not is_transaction_topic(rng.topic):
            continue
        if readahead is None:
            runs = read_records(rng, kafka)
        else:
            runs = readahead.records(rng)
            ahead += readahead.last_served
        runs = [run for run in runs if run.records]
        taken += runs
        places += [(rng.topic, rng.partition)] * len(runs)
        records[rng.topic] = records.get(rng.topic, 0) + sum(run.records for run in runs)
        tombstones += sum(run.tombstones for run in runs)
        stamps.extend(s for run in runs[-1:] if (s := run.last_timestamp_ms) is not None)
    total = sum(records.values())
    report = TaskReport(
        records=total,
        topics={topic: TopicFigures(records=n) for topic, n in records.items()},
        ignored=total - tombstones,
        tombstones=tombstones,
        max_timestamp_ms=max(stamps, default=None),
    )
    return BatchMarkers(RunEnds(taken), report, ahead, taken, places)


class RunEnds(Sequence[TransactionMarker]):
    """The END markers of a batch's runs, in topic order, each run's decoded only when one of
    them is asked for: the book takes ENDs as their states, built straight from the records
    (:meth:`MarkerRun.states`), and reads a marker only for a transaction it names already
    (:meth:`TransactionBook.add_built`), a handful a batch.

    Raises (when made):
        BadTransactionMetadata: a record of a run is no marker.
    """

    def __init__(self, runs: Sequence[MarkerRun]) -> None:
        self._runs = list(runs)
        self._counts = [run.end_count for run in self._runs]

    def __len__(self) -> int:
        return sum(self._counts)

    @overload
    def __getitem__(self, at: int) -> TransactionMarker: ...
    @overload
    def __getitem__(self, at: slice) -> Sequence[TransactionMarker]: ...
    def __getitem__(self, at: int | slice) -> TransactionMarker | Sequence[TransactionMarker]:
        if isinstance(at, slice):
            return list(self)[at]
        if at < 0:
            at += len(self)
        for run, count in zip(self._runs, self._counts, strict=True):
            if at < count:
                return run.ends_only[at]
            at -= count
        raise IndexError("END marker index out of range")

    def __iter__(self) -> Iterator[TransactionMarker]:
        return chain.from_iterable(run.ends_only for run in self._runs)


def partition_tails(
    ranges: Sequence[OffsetRange], partitions: Iterable[tuple[str, int]], kafka: SourceOptions
) -> dict[Hashable, PartitionTail]:
    """Per data partition the job reads, the transaction of the last record of its range and of
    the record after it (when the broker holds one already); partitions without a range in this
    batch are idle."""
    tails: dict[Hashable, PartitionTail] = {}
    for topic, partition in partitions:
        if not is_transaction_topic(topic):
            tails[(topic, partition)] = PartitionTail(idle=True, collection=collection_of(topic))
    data = [r for r in ranges if not is_transaction_topic(r.topic) and r.end > r.start]
    peeked = peek_ends(data, kafka)
    for rng in data:
        found = peeked[(rng.topic, rng.partition)]
        tails[(rng.topic, rng.partition)] = PartitionTail(
            txn=_txn_or_none(found.last),
            collection=collection_of(rng.topic),
            after=_txn_or_none(found.after),
        )
    return tails


def _txn_or_none(value: bytes | None) -> str | None:
    """A record's transaction; a malformed block counts as none (the tasks count it)."""
    try:
        ref = event_ref(value)
    except BadTransactionMetadata:
        return None
    return None if ref is None else ref[0]


#: A fetch that asks for one record needs no more than a few kB back. The broker still returns
#: the whole record batch holding it (KIP-74), but a broker may gather up to librdkafka's default
#: 50 MB limit before it answers (the Kafka-compatible broker the benchmark first ran on took
#: ~15-50 ms per partition, serially: a peek of six partitions 100-390 ms a batch, ~10-30 ms
#: with this limit). A
#: fetch that reaches the end of a partition waits up to ``fetch.wait.max.ms`` for more (500 ms
#: by default: a range ending at the partition's end took that long); the peek waits for none.
_PEEK_FETCH = {"fetch.max.bytes": "4096", "message.max.bytes": "4096", "fetch.wait.max.ms": "10"}


@dataclass(frozen=True)
class RangeEnd:
    """The values of a range's last record and of the record after it (None: a tombstone, or
    for ``after`` also no record there yet)."""

    last: bytes | None
    after: bytes | None = None


def peek_ends(
    ranges: Sequence[OffsetRange], kafka: SourceOptions
) -> dict[tuple[str, int], RangeEnd]:
    """The last record of each range and the one after it, with one consumer for all of them
    (one or two fetch rounds). A range whose last offset is a gap (real Kafka: a transaction
    marker, a compacted record) is read whole instead, and its ``after`` left unknown."""
    found: dict[tuple[str, int], RangeEnd] = {}
    if not ranges:
        return found
    ends = {(r.topic, r.partition): r.end for r in ranges}
    managed: dict[str, str | bool] = {
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        **_PEEK_FETCH,
    }
    consumer = Consumer(consumer_config(kafka.kafka_config, managed))
    deadline = time.monotonic() + kafka.poll_timeout_ms / 1000
    last: dict[tuple[str, int], bytes | None] = {}
    gaps: set[tuple[str, int]] = set()
    try:
        consumer.assign([KafkaPartition(r.topic, r.partition, r.end - 1) for r in ranges])
        pending = set(ends)
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(2 * len(pending), timeout=0.25):
                where = (message.topic(), message.partition())
                if where not in pending:
                    continue
                error, end = message.error(), ends[where]
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    continue
                if where not in last and (error is not None or message.offset() != end - 1):
                    gaps.add(where)  # a gap at the end: the range is read below
                    pending.discard(where)
                elif where not in last:
                    last[where] = message.value()
                    if _high_watermark(consumer, where) <= end:  # nothing after it (yet)
                        found[where] = RangeEnd(last[where])
                        pending.discard(where)
                else:  # the record after the range, or the end of the partition
                    after = None if error is not None else message.value()
                    found[where] = RangeEnd(last[where], after)
                    pending.discard(where)
    finally:
        consumer.close()
    for rng in ranges:
        where = (rng.topic, rng.partition)
        if where not in found:
            value = last[where] if where in last and where not in gaps else _read_last(rng, kafka)
            found[where] = RangeEnd(value)
    return found


def _high_watermark(consumer: Consumer, where: tuple[str, int]) -> int:
    """The partition's end as the last fetch response gave it (no request: waiting for a record
    the broker does not have would take a fetch's full wait). -1 when unknown."""
    try:
        _, high = consumer.get_watermark_offsets(KafkaPartition(*where), cached=True)
    except KafkaException:
        return -1
    return int(high)


def _read_last(rng: OffsetRange, kafka: SourceOptions) -> bytes | None:
    value: bytes | None = None
    for messages in read_messages(rng, kafka):
        value = messages[-1].value()
    return value


def merged_ranks(reports: Sequence[TaskReport]) -> dict[str, int]:
    """Per transaction, the ranks every task saw of it (the union of the tasks' masks)."""
    return merged_masks(r.txn_ranks for r in reports)


# -- publishing held events ----------------------------------------------------------------------


@dataclass(frozen=True)
class HeldRelease:
    """The held events a decision publishes, read back, and the held table's commit."""

    rows: pa.Table
    """Raw records of the published held events (decoded and written by the caller)."""
    commit: TableCommit | None
    """The held table's part of the batch's commit (None: nothing beyond the tasks' files)."""
    replaces_new: bool = False
    """The batch's new held files are not committed: ``commit`` holds what stays of them."""


def release_held(
    meta: TableMeta,
    base_version: int,
    committed: Sequence[tuple[str, DataFile]],
    new_files: Sequence[WrittenFile],
    publish: frozenset[str],
    *,
    write_remainder: Any,
    dissolved: bool = False,
) -> HeldRelease:
    """Split the held events (``committed``: the held table's files at ``base_version``, with
    their partitions; plus this batch's ``new_files``) into those ``publish`` names and the
    rest. When some are published, the held table's commit
    removes the committed held files and adds one file of the rest (``write_remainder`` stages
    it: rows -> TableCommit); otherwise it just adds the batch's new held files.

    ``dissolved``: a task read the committed files back (``Holding.dissolve``) and wrote or held
    again every event of them, so only ``new_files`` are read (and only when ``publish`` names
    anything), and the commit removes the committed files in any case."""
    readable = [] if dissolved else [f for _, f in committed]
    rows = _read(meta, [*readable, *(w.file for w in new_files)] if publish else [])
    out, still = split_held(rows, publish)
    if out.num_rows == 0:
        if not (dissolved and committed):
            return HeldRelease(out, None)
        kept = [(w.partition_desc, FileOp(action=FileAction.ADD, file=w.file)) for w in new_files]
        commit = _held_commit(meta, base_version, committed, kept)
        return HeldRelease(out, commit, replaces_new=True)
    adds: TableCommit | None = write_remainder(still) if still.num_rows else None
    parts = adds.partitions if adds is not None else ()
    kept = [(part.partition_desc, op) for part in parts for op in part.ops]
    if not committed and not kept:  # published rows came only from this batch's files
        return HeldRelease(out, None, replaces_new=True)
    return HeldRelease(out, _held_commit(meta, base_version, committed, kept), replaces_new=True)


def _held_commit(
    meta: TableMeta,
    base_version: int,
    committed: Sequence[tuple[str, DataFile]],
    adds: Sequence[tuple[str, FileOp]],
) -> TableCommit:
    """The held table's part of the batch's commit: the committed files go, ``adds`` come."""
    ops: dict[str, list[FileOp]] = {}
    for desc, file in committed:
        ops.setdefault(desc, []).append(FileOp(action=FileAction.DELETE, file=file))
    for desc, op in adds:
        ops.setdefault(desc, []).append(op)
    return TableCommit(
        table=str(meta.name),
        op=CommitOp.UPDATE if committed else CommitOp.APPEND,
        partitions=tuple(
            PartitionCommit(partition_desc=d, ops=tuple(o)) for d, o in sorted(ops.items())
        ),
        base_version=base_version,
    )


def files_after(
    files: Sequence[tuple[str, DataFile]], commit: TableCommit
) -> list[tuple[str, DataFile]]:
    """A table's files (with their partitions) once ``commit`` landed on the version that has
    ``files``, in the order a plan lists them: those it deletes (by path, as the committer
    matches them) gone, those it adds after the rest of their partition."""
    gone = {op.file.path for part in commit.partitions for op in part.ops
            if op.action is FileAction.DELETE}  # fmt: skip
    kept = [(desc, f) for desc, f in files if f.path not in gone]
    added = [(part.partition_desc, op.file) for part in commit.partitions for op in part.ops
             if op.action is FileAction.ADD]  # fmt: skip
    order = {desc: at for at, desc in enumerate(sorted({d for d, _ in (*kept, *added)}))}
    return sorted([*kept, *added], key=lambda pair: order[pair[0]])


def _read(meta: TableMeta, files: Sequence[Any]) -> pa.Table:
    if not files:
        return HELD_SCHEMA.empty_table()
    return read_whole_files(meta.location, files, HELD_SCHEMA, meta.current_schema_id)


__all__ = [
    "BatchTransactions",
    "CandidateNotPublished",
    "HeldRelease",
    "TxnPolicy",
    "batch_ranges",
    "chunks_of",
    "files_after",
    "load_book",
    "read_ahead_next",
    "release_held",
    "resumed_start",
    "start_batch",
]
