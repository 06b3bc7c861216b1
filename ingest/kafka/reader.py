"""Reading one planned offset range of one partition, on an executor.

A range ``[start, end)`` is read with a private consumer (``assign`` at ``start``, no group, no
commits) and is finished when either

* a record at or beyond ``end - 1`` arrived (the consumer position reached ``end``), or
* the broker reported the end of the partition at an offset ``>= end``: every record below
  ``end`` has then been delivered, and offsets never seen were gaps (compacted-away keys,
  transaction markers, aborted records) - real Kafka has those, so the record count of a range
  is never assumed to be ``end - start``.

Records at or beyond ``end`` belong to the next batch and are dropped. A range that makes no
progress for ``kafkaConsumer.pollTimeoutMs`` raises :class:`RangeIncompleteError`; offsets that
are gone raise :class:`DataLossError` (unless ``failOnDataLoss=false``). Nothing waits forever.

``Consumer.consume(n)`` blocks until it has ``n`` messages or its timeout passes, so a read never
asks for more than the range can still hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaPartition

from catalog.logs import get_logger
from ingest.kafka.brokerview import consumer_config
from ingest.kafka.errors import DataLossError, KafkaSourceError, RangeIncompleteError
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions
from ingest.kafka.schema import offset_of, record_batch

T = TypeVar("T")

_MAX_BATCH = 10_000  # records per Arrow batch handed to Spark
_CONSUME_WAIT_S = 0.25  # per consume() call; a gap at the very end of a partition waits it out
_LOST = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
_GONE = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)


class _Progress:
    """Where the read of a range stands; sorts each consumed message into keep, skip or stop."""

    def __init__(self, rng: OffsetRange, fail_on_data_loss: bool) -> None:
        self.rng = rng
        self.fail_on_data_loss = fail_on_data_loss
        self.next_offset = rng.start
        self.end_of_partition: int | None = None
        self.records = 0
        self.gaps = 0
        self.done = rng.start >= rng.end

    @property
    def remaining(self) -> int:
        """At most this many records are still to come (fewer if there are gaps)."""
        return max(1, self.rng.end - self.next_offset)

    def accept(self, messages: Sequence[Message]) -> Sequence[Message]:
        """The data messages of the range, in order; updates the position and ``done``."""
        if self._plain_run(messages):  # the common case, without a Python step per message
            self.next_offset += len(messages)
            self.records += len(messages)
            self.done = self.next_offset >= self.rng.end
            return messages
        kept = []
        for message in messages:
            error = message.error()
            offset = offset_of(message)
            if error is not None:
                self._on_event(error, offset)
            elif offset >= self.rng.end:
                self.done = True
            elif offset >= self.next_offset:  # older ones were already returned
                self.gaps += offset - self.next_offset
                self.next_offset = offset + 1
                kept.append(message)
                self.done = self.next_offset >= self.rng.end
            if self.done:
                break
        self.records += len(kept)
        return kept

    def _plain_run(self, messages: Sequence[Message]) -> bool:
        """Records only, contiguous from the position, all inside the range (no gaps, no events).

        Offsets of one partition arrive strictly increasing, so first and last tell contiguity.
        """
        if not messages or any([m.error() is not None for m in messages]):
            return False
        first, last = offset_of(messages[0]), offset_of(messages[-1])
        return first == self.next_offset and last == first + len(messages) - 1 < self.rng.end

    def _on_event(self, error: KafkaError, offset: int) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            self.end_of_partition = offset
            self.done = offset >= self.rng.end
        elif code in _LOST:
            self._lost(f"offset {self.next_offset} is no longer available ({error.str()})")
        elif code in _GONE:
            self._lost(f"the partition no longer exists ({error.str()})")
            self.done = True
        elif error.fatal() or (code > 0 and not error.retriable()):  # broker errors are > 0
            raise KafkaSourceError(f"reading {self.rng.topic}-{self.rng.partition}: {error.str()}")
        else:
            get_logger("lakestream.ingest.kafka").warning(
                "kafka consumer event",
                topic=self.rng.topic,
                partition=self.rng.partition,
                error=error.str(),
            )

    def _lost(self, reason: str) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(self.rng.topic, self.rng.partition, reason)
        get_logger("lakestream.ingest.kafka").warning(
            "kafka data loss accepted",
            topic=self.rng.topic,
            partition=self.rng.partition,
            reason=reason,
        )

    def incomplete(self, timeout_s: float) -> RangeIncompleteError:
        rng = self.rng
        return RangeIncompleteError(
            topic=rng.topic,
            partition=rng.partition,
            start=rng.start,
            end=rng.end,
            reached=self.next_offset,
            end_of_partition=self.end_of_partition,
            timeout_s=timeout_s,
        )


def read_range(
    rng: OffsetRange, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow batches of the ``target`` schema (see module doc)."""
    for messages in read_messages(rng, options):
        yield record_batch(messages, target)


def read_messages(rng: OffsetRange, options: SourceOptions) -> Iterator[Sequence[Message]]:
    """Yield the data messages of ``rng`` in offset order, in chunks (see the module doc).

    For a caller that decodes librdkafka's messages itself (``emit=ranges``), skipping Arrow.
    """
    log = get_logger("lakestream.ingest.kafka").bind(
        topic=rng.topic, partition=rng.partition, start=rng.start, end=rng.end
    )
    progress = _Progress(rng, options.fail_on_data_loss)
    reset = "error" if options.fail_on_data_loss else "earliest"
    managed: dict[str, str | bool] = {"enable.partition.eof": True, "auto.offset.reset": reset}
    consumer = Consumer(consumer_config(options.kafka_config, managed))
    started = time.monotonic()
    try:
        consumer.assign([KafkaPartition(rng.topic, rng.partition, rng.start)])
        yield from _consume(consumer, progress, options.poll_timeout_ms / 1000)
    finally:
        consumer.close()
    log.info(
        "kafka range read",
        records=progress.records,
        gaps=progress.gaps,
        seconds=round(time.monotonic() - started, 3),
    )


def _consume(
    consumer: Consumer, progress: _Progress, timeout_s: float
) -> Iterator[Sequence[Message]]:
    wait_s = min(_CONSUME_WAIT_S, timeout_s)
    last_progress = time.monotonic()
    while not progress.done:
        before = progress.next_offset
        messages = consumer.consume(min(_MAX_BATCH, progress.remaining), timeout=wait_s)
        kept = progress.accept(messages)
        if kept:
            yield kept
        if progress.next_offset > before:
            last_progress = time.monotonic()
        elif not progress.done and time.monotonic() - last_progress > timeout_s:
            raise progress.incomplete(timeout_s)


class MessageField(Sequence[T]):
    """One field of consumed messages (keys, timestamps), read from a message only when asked
    for: the decoder needs it for few messages (deletes, dead letters, positions without an
    LSN), and calling into every message costs ~0.1 µs each."""

    def __init__(self, messages: Sequence[Message], read: Callable[[Message], T]) -> None:
        self._messages = messages
        self._read = read

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return [self._read(m) for m in self._messages[index]]
        return self._read(self._messages[index])


def message_key(message: Message) -> bytes | None:
    key: bytes | None = message.key()
    return key


def message_millis(message: Message) -> int | None:
    """The record timestamp in ms, None where the record has none."""
    kind, millis = message.timestamp()
    return millis if kind else None
