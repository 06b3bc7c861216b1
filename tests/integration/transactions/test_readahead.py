"""The transaction topic read ahead gives every batch exactly the records a synchronous read of
its range gives: when it covers the range, when it covers part of it, when the next batch starts
elsewhere (a restart, a replay), when records arrive after it started, and when it fails."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from ingest.kafka.apache_kafka import create_topic
from ingest.kafka.offsets import OffsetRange, PartitionId, next_end
from ingest.kafka.options import SourceOptions
from ingest.sink import readahead
from ingest.sink.consistent import read_markers
from ingest.sink.readahead import MarkerReadAhead, MarkerRun, read_records
from ingest.transactions import BadTransactionMetadata, TransactionBook, TransactionMarker, TxnState
from tests.fixtures.broker import KafkaTestHelper

pytestmark = pytest.mark.integration


def markers(first: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    """BEGIN and END of transactions ``first`` .. ``first + count - 1`` (two records each)."""
    records: list[tuple[bytes | None, bytes | None]] = []
    for txn in range(first, first + count):
        records.append((None, b'{"status":"BEGIN","id":"%d:%d"}' % (txn, txn * 100)))
        end = {"status": "END", "id": f"{txn}:{txn * 100 + 8}", "event_count": 1,
               "data_collections": [{"data_collection": "public.t", "event_count": 1}]}  # fmt: skip
        records.append((None, orjson.dumps(end)))
    return records


def ids(found: list[MarkerRun]) -> list[str]:
    """The transactions of the END markers among ``found``, after checking every record is
    there, in order."""
    offsets = [offset for run in found for offset in run.offsets]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True
    return [end.id for run in found for end in run.ends if end is not None]


def forbid_own_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on a batch that reads its range itself (not served by the read-ahead) fails."""

    def no_reading(*_: object) -> list[object]:
        raise AssertionError("the batch read its range itself")

    monkeypatch.setattr(readahead, "read_records", no_reading)


@pytest.fixture
def topic(kafka: KafkaTestHelper) -> tuple[str, SourceOptions]:
    name = kafka.topic()
    kafka.produce(name, markers(1, 300), partition=0)  # offsets 0..599
    return name, SourceOptions(kafka_config={"bootstrap.servers": kafka.bootstrap_servers})


def test_each_batch_gets_what_a_synchronous_read_gets(topic: tuple[str, SourceOptions]) -> None:
    name, options = topic
    ahead = MarkerReadAhead(options)
    # batch sizes: as the last one, larger (the rest is read then), smaller (it stops early)
    bounds = [0, 100, 200, 400, 450, 600]
    for start, end in itertools.pairwise(bounds):
        rng = OffsetRange(name, 0, start, end)
        got = ahead.records(rng)
        ahead.begin(rng, limit=end - start)
        assert (
            ids(got)
            == ids(read_records(rng, options))
            == [str(t) for t in range(start // 2 + 1, end // 2 + 1)]
        )
    ahead.close()


def test_the_next_batch_is_served_by_the_read_ahead(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, options = topic
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 0, 100)
    ahead.records(first)
    ahead.begin(first, limit=100)
    forbid_own_reads(monkeypatch)
    assert ids(ahead.records(OffsetRange(name, 0, 100, 200))) == [str(t) for t in range(51, 101)]


def test_a_batch_elsewhere_or_beyond_what_was_there_reads_for_itself(
    kafka: KafkaTestHelper, topic: tuple[str, SourceOptions]
) -> None:
    name, options = topic
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 500, 600)
    ahead.records(first)
    ahead.begin(first, limit=400)  # the broker ends at 600: it reads nothing
    kafka.produce(name, markers(301, 50), partition=0)  # offsets 600..699, after it started
    rng = OffsetRange(name, 0, 600, 700)
    assert ids(ahead.records(rng)) == [str(t) for t in range(301, 351)]
    ahead.begin(rng, limit=100)
    replay = OffsetRange(name, 0, 300, 400)  # a replayed batch: not where the read-ahead began
    assert ids(ahead.records(replay)) == [str(t) for t in range(151, 201)]
    ahead.close()


def test_a_failed_read_ahead_costs_only_time(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, options = topic

    def broker_gone(*_: object) -> int:
        raise RuntimeError("the broker went away")

    monkeypatch.setattr(readahead, "_high_watermark", broker_gone)
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 0, 100)
    ahead.records(first)
    ahead.begin(first, limit=100)
    rng = OffsetRange(name, 0, 100, 200)
    assert ids(ahead.records(rng)) == [str(t) for t in range(51, 101)]


@pytest.fixture
def job_topics(kafka: KafkaTestHelper) -> tuple[str, str, SourceOptions]:
    """A transaction topic (offsets 0..199) and a data topic (0..299) of one job."""
    name = kafka.topic()
    txn = f"{name}.transaction"
    create_topic(kafka.bootstrap_servers, txn, 1)
    kafka.produce(txn, markers(1, 100), partition=0)
    kafka.produce(name, [(None, b"{}")] * 300, partition=0)
    return txn, name, SourceOptions(kafka_config={"bootstrap.servers": kafka.bootstrap_servers})


def test_the_first_batch_is_served_by_a_read_ahead_begun_as_the_job_starts(
    job_topics: tuple[str, str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It reads from where the job starts up to where the source's split of
    maxOffsetsPerTrigger over the backlogs ends the first batch; data topics are not read."""
    txn, data, options = job_topics
    start = {PartitionId(txn, 0): 50, PartitionId(data, 0): 0}
    end = next_end(start, {PartitionId(txn, 0): 200, PartitionId(data, 0): 300}, {}, 120)
    assert 50 < end[PartitionId(txn, 0)] < 200  # the limit splits over both topics
    ahead = MarkerReadAhead(options)
    ahead.begin_first(start, max_rows=120)
    forbid_own_reads(monkeypatch)
    first = OffsetRange(txn, 0, 50, end[PartitionId(txn, 0)])
    got = ahead.records(first)
    assert ids(got) == [str(t) for t in range(26, first.end // 2 + 1)]
    assert ahead.last_served == first.end - first.start
    ahead.close()


def test_a_first_batch_larger_than_the_read_ahead_reads_the_rest(
    job_topics: tuple[str, str, SourceOptions],
) -> None:
    txn, data, options = job_topics
    ahead = MarkerReadAhead(options)
    ahead.begin_first({PartitionId(txn, 0): 0, PartitionId(data, 0): 0}, max_rows=100)
    assert ids(ahead.records(OffsetRange(txn, 0, 0, 200))) == [str(t) for t in range(1, 101)]
    assert 0 < ahead.last_served < 200
    ahead.close()


def test_what_is_read_ahead_is_built_on_its_thread_and_no_marker_is_made(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead builds the END markers' states as it reads, beside the batch's tasks,
    straight from the records; the next batch's start (between batches, where the driver's CPU
    costs the most) builds none, and no marker is decoded until one is asked for."""
    name, options = topic
    building: list[str] = []
    decoding: list[str] = []
    real_build, real_decode = readahead.build_ends_at, readahead.end_markers

    def built(values: Sequence[bytes | None], *args: Any) -> list[TxnState | None]:
        building.append(threading.current_thread().name)
        return real_build(values, *args)

    def decoded(values: Sequence[bytes | None]) -> list[TransactionMarker | None]:
        decoding.append(threading.current_thread().name)
        return real_decode(values)

    monkeypatch.setattr(readahead, "build_ends_at", built)
    monkeypatch.setattr(readahead, "end_markers", decoded)
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 0, 100)
    ahead.records(first)
    building.clear()  # only the read-ahead's range counts, not the first batch's own read
    ahead.begin(first, limit=100)
    got = ahead.records(OffsetRange(name, 0, 100, 200))
    batch = threading.current_thread().name
    assert building and batch not in building  # built, all on the read-ahead's thread
    states = [state.id for run in got for state in run.states(None, 0.0)[0]]
    assert batch not in building and decoding == []  # as built: nothing built again, no marker
    assert states == ids(got) == [str(t) for t in range(51, 101)]  # markers when asked
    ahead.close()


def test_the_read_ahead_builds_the_books_states_and_a_batch_only_what_it_read_itself(
    kafka: KafkaTestHelper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The states of the transactions the read-ahead's ENDs end are built on its thread as
    it reads (first seen then); a batch takes them in as ``add_markers`` would, and builds
    only those of records it read itself: batches as large as the read-ahead's range (none),
    smaller (none: cut), larger (the rest), and the first (all)."""
    name = f"{kafka.topic()}.transaction"
    create_topic(kafka.bootstrap_servers, name, 1)
    kafka.produce(name, markers(1, 300), partition=0)  # offsets 0..599
    options = SourceOptions(kafka_config={"bootstrap.servers": kafka.bootstrap_servers})
    building: list[tuple[str, int]] = []
    real = readahead.build_ends_at

    def watched(values: Sequence[bytes | None], *args: Any) -> list[TxnState | None]:
        states = real(values, *args)
        building.append((threading.current_thread().name, sum(s is not None for s in states)))
        return states

    monkeypatch.setattr(readahead, "build_ends_at", watched)
    ahead = MarkerReadAhead(options, ["public.t"])
    book = TransactionBook(collections=("public.t",))
    # (batch's start, end, END states it builds itself): the first; as the read-ahead's range
    # (100 records); larger (200: it reads 100 itself); smaller (50); as the last (50)
    batches = [(0, 100, 50), (100, 200, 0), (200, 400, 50), (400, 450, 0), (450, 500, 0)]
    for start, end, own in batches:
        rng = OffsetRange(name, 0, start, end)
        building.clear()
        got = read_markers([rng], options, ahead)
        now = time.time()
        taken = got.into(book, now)
        ahead.begin(rng, limit=end - start)
        batch = threading.current_thread().name
        assert sum(n for thread, n in building if thread == batch) == own
        new = taken.ended[len(book.ended) :]
        assert [t._replace(first_seen=now) for t in new] == list(
            book.add_markers(got.ends, now).ended[len(book.ended) :]
        )
        assert len(new) == (end - start) // 2
        assert all(t.first_seen <= now for t in new)
        assert (own == len(new)) == all(t.first_seen == now for t in new)
        book = taken
    assert [t.id for t in book.ended] == [str(t) for t in range(1, 251)]
    ahead.close()


def test_a_bad_record_read_ahead_fails_the_batch_that_reads_it(
    kafka: KafkaTestHelper, topic: tuple[str, SourceOptions]
) -> None:
    name, options = topic
    kafka.produce(name, [(None, b'{"status":"END","id":"x"}')], partition=0)  # offset 600
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 500, 600)
    ahead.records(first)
    ahead.begin(first, limit=100)

    with pytest.raises(BadTransactionMetadata, match="event_count"):
        ids(ahead.records(OffsetRange(name, 0, 600, 601)))
    ahead.close()


def watched_ends(monkeypatch: pytest.MonkeyPatch) -> list[PartitionId]:
    """The partitions whose end a read-ahead asked the broker for: its first step of reading."""
    asked: list[PartitionId] = []
    real = readahead._high_watermark

    def watched(pid: PartitionId, options: SourceOptions) -> int:
        asked.append(pid)
        return real(pid, options)

    monkeypatch.setattr(readahead, "_high_watermark", watched)
    return asked


def test_a_delayed_read_ahead_begins_when_the_batch_asks(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-ahead told to wait for the batch's tasks reads nothing until then; a batch that
    asks sooner (its tasks ended first) is served at once, not after the wait."""
    name, options = topic
    asked = watched_ends(monkeypatch)
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 0, 100)
    ahead.records(first)
    ahead.begin(first, limit=100, after_s=600)
    time.sleep(0.3)
    assert asked == []  # still waiting
    forbid_own_reads(monkeypatch)
    started = time.monotonic()
    assert ids(ahead.records(OffsetRange(name, 0, 100, 200))) == [str(t) for t in range(51, 101)]
    assert time.monotonic() - started < readahead.WAIT_S
    assert ahead.last_served == 100 and asked == [PartitionId(name, 0)]
    ahead.close()


def test_a_delayed_read_ahead_reads_on_its_own_when_its_time_comes(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, options = topic
    asked = watched_ends(monkeypatch)
    ahead = MarkerReadAhead(options)
    first = OffsetRange(name, 0, 0, 100)
    ahead.records(first)
    ahead.begin(first, limit=100, after_s=0.2)
    deadline = time.monotonic() + 10
    while not asked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asked == [PartitionId(name, 0)]  # begun without the batch asking
    assert ids(ahead.records(OffsetRange(name, 0, 100, 200))) == [str(t) for t in range(51, 101)]
    assert ahead.last_served == 100
    ahead.close()


def test_a_read_ahead_closed_or_replaced_while_it_waits_never_reads(
    topic: tuple[str, SourceOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query ended (close) or a batch started elsewhere (begin again): the waiting thread
    ends at once, without asking the broker anything."""
    name, options = topic
    asked = watched_ends(monkeypatch)
    ahead = MarkerReadAhead(options)
    ahead.begin(OffsetRange(name, 0, 0, 100), limit=100, after_s=600)
    ahead.begin(OffsetRange(name, 0, 300, 400), limit=100, after_s=600)  # replaces the first
    ahead.close()
    deadline = time.monotonic() + 10
    while _waiting_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _waiting_threads() == [] and asked == []


def _waiting_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("lakestream-readahead-")]
