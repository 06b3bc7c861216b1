"""A batch's start worked out in the gap before it (``prepare_start``) is the start the batch
would work out itself (``start_batch``) - the same ranges, markers, book, candidates - and a
batch that ends elsewhere or reads other partitions does not take it. Tails peeked while the
batch before ran (``peek_next``) give the same start, and are not taken for other ranges."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from ingest.kafka.brokerview import STARTUP_CHECK, BrokerView
from ingest.kafka.offsets import OffsetRange, PartitionId, next_end, plan_ranges
from ingest.kafka.options import SourceOptions
from ingest.sink.consistent import (
    PeekedTails,
    PreparedStart,
    TxnPolicy,
    peek_next,
    prepare_start,
    start_batch,
)
from ingest.sink.readahead import MarkerReadAhead
from ingest.transactions import OnTimeout, TransactionBook
from tests.integration.transactions.support import Bank, new_topics

pytestmark = pytest.mark.integration

POLICY = TxnPolicy(max_hold_s=300.0, on_timeout=OnTimeout.WAIT)
LIMIT = 40


@pytest.fixture
def bank(kafka) -> Bank:
    bank = Bank(new_topics())
    bank.topics.create(kafka.bootstrap_servers)
    bank.open_accounts(6)
    rng = random.Random(7)
    for _ in range(60):
        bank.transfer(rng)
    bank.send(kafka.bootstrap_servers)
    return bank


def test_a_prepared_start_is_the_start_the_batch_works_out(kafka, bank: Bank) -> None:
    options = SourceOptions(
        kafka_config={"bootstrap.servers": kafka.bootstrap_servers}, max_offsets_per_trigger=LIMIT
    )
    pids = [
        PartitionId(topic, p)
        for topic, parts in (
            (bank.topics.accounts, 3),
            (bank.topics.audit, 2),
            (bank.topics.transaction, 1),
        )
        for p in range(parts)
    ]
    broker = BrokerView(options.kafka_config, STARTUP_CHECK)
    latest = broker.latest(pids)
    book = TransactionBook(collections=("public.accounts", "public.audit"))
    start = dict.fromkeys(pids, 0)
    for _ in range(4):  # batch after batch, each from where the one before ended
        end = next_end(start, latest, {}, LIMIT)  # as the source's latestOffset splits it
        ranges = plan_ranges(start, end, start.__getitem__)
        partitions = sorted((pid.topic, pid.partition) for pid in pids)
        json_start = {
            t: {str(p.partition): start[p] for p in pids if p.topic == t} for t, _ in partitions
        }

        prepared = prepare_start(
            book,
            json_start,
            options,
            base=None,
            policy=POLICY,
            readahead=MarkerReadAhead(options),
            broker=broker,
        )
        itself = start_batch(book, ranges, partitions, options, POLICY)

        assert prepared.fits(ranges, partitions)
        assert not prepared.fits(ranges, [*partitions, ("new-topic", 0)])  # a new partition
        last = ranges[-1]
        shorter = [*ranges[:-1], OffsetRange(last.topic, last.partition, last.start, last.end - 1)]
        assert not prepared.fits(shorter, partitions)  # a batch that ends elsewhere
        assert prepared.partitions == tuple(partitions)
        taken = prepared.adopted()
        assert taken.candidates == itself.candidates and taken.candidates
        assert taken.settled == itself.settled
        assert taken.markers == itself.markers > 0
        assert taken.marker_report == itself.marker_report
        assert taken.owner == itself.owner
        assert _ignoring_time(taken.book) == _ignoring_time(itself.book)
        assert taken.timings["prepared_ms"] >= 0
        book = itself.book  # as if the batch published nothing: its markers stay in the book
        start = {pid: end[pid] for pid in pids}
    assert start != dict.fromkeys(pids, 0)
    broker.close()


def _ignoring_time(book: TransactionBook) -> object:
    """The book with each state's ``first_seen`` (when it was read) left out."""
    return [(s.id, s.seen, s.total, s.expected, s.touched, s.end_position) for s in book.ended]


def test_tails_peeked_during_the_batch_before_give_the_start_peeked_now(kafka, bank: Bank) -> None:
    options = SourceOptions(
        kafka_config={"bootstrap.servers": kafka.bootstrap_servers}, max_offsets_per_trigger=LIMIT
    )
    parts = ((bank.topics.accounts, 3), (bank.topics.audit, 2), (bank.topics.transaction, 1))
    start = {topic: {str(p): 0 for p in range(n)} for topic, n in parts}
    broker = BrokerView(options.kafka_config, STARTUP_CHECK)
    book = TransactionBook(collections=("public.accounts", "public.audit"))

    def prepared(peeked: PeekedTails | None) -> PreparedStart:
        return prepare_start(
            book,
            start,
            options,
            base=None,
            policy=POLICY,
            readahead=MarkerReadAhead(options),
            broker=broker,
            peeked=peeked,
        )

    peeked = peek_next(start, options, broker)
    now = prepared(None).txn
    early = prepared(peeked)
    assert early.ranges == peeked.ranges
    assert early.txn.candidates == now.candidates and now.candidates
    assert early.txn.timings["peeked_ms"] == peeked.peeked_ms
    assert "tails_ms" not in early.txn.timings
    # a peek of other ranges (the broker moved on since) is not taken: every partition idle
    # would leave no candidate at all if it were
    idle = {
        key: replace(tail, txn=None, after=None, idle=True) for key, tail in peeked.tails.items()
    }
    shorter = frozenset(list(peeked.ranges)[1:])
    stale = prepared(replace(peeked, ranges=shorter, tails=idle)).txn
    assert stale.candidates == now.candidates and "tails_ms" in stale.timings
    assert prepared(replace(peeked, tails=idle)).txn.candidates == ()  # as it would be, if taken
    broker.close()


def test_a_peek_told_to_wait_begins_when_the_tasks_end_or_its_time_comes(kafka, bank: Bank) -> None:
    """The batch begins its peek with its start and tells it to wait as long as its tasks
    take to start; the end of the tasks (``go``) begins a peek still waiting at once."""
    options = SourceOptions(
        kafka_config={"bootstrap.servers": kafka.bootstrap_servers}, max_offsets_per_trigger=LIMIT
    )
    parts = ((bank.topics.accounts, 3), (bank.topics.audit, 2), (bank.topics.transaction, 1))
    start = {topic: {str(p): 0 for p in range(n)} for topic, n in parts}
    broker = BrokerView(options.kafka_config, STARTUP_CHECK)
    now = peek_next(start, options, broker)
    with ThreadPoolExecutor(1) as pool:
        go = threading.Event()
        began = time.monotonic()
        waiting = pool.submit(peek_next, start, options, broker, after_s=30.0, go=go)
        time.sleep(0.3)
        assert not waiting.done()  # still waiting: nothing asked of the broker yet
        go.set()
        told = waiting.result(timeout=10)
        assert time.monotonic() - began < 10
        began = time.monotonic()
        timed = pool.submit(peek_next, start, options, broker, after_s=0.4, go=threading.Event())
        on_its_own = timed.result(timeout=10)
        took_ms = (time.monotonic() - began) * 1000
    assert took_ms >= 400
    assert on_its_own.peeked_ms <= took_ms - 400 + 1  # the wait is not the peek's time
    for peeked in (told, on_its_own):
        assert peeked.ranges == now.ranges and peeked.tails == now.tails
    broker.close()
