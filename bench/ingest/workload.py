"""The ingest benchmark's workload: Debezium change events of one table, produced into Kafka.

Events are those of a PostgreSQL ``customers`` table as Debezium 3.x writes them with the
JsonConverter: the full envelope (``before``, ``after``, the ``source`` block with ``lsn``,
``txId`` and friends, ``op``, ``ts_ms``, ``transaction``), either bare (``schemas.enable=false``,
~450 B) or with the embedded Connect schema (``schemas.enable=true``, ~3 KB). Keys are
``{"id": N}`` (with their own schema in the second case); the topic has one partition per
``id % partitions``, so all changes of a key are in one partition and in source order.

Every key is created once and then updated at random: the first event of a key is a create
(``op: c``), the others updates (``op: u``, ``before: null`` as with PostgreSQL's default
replica identity). An update changes ``email`` and ``updated_at``; the last event of a key gives
its final row, which :func:`expected_row` rebuilds from the key and the event's number.

Producing: one batched producer (linger 20 ms, large local queue), as a real feed sends. The end
offsets are checked against the produced counts afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition

from ingest.debezium import DecoderConfig, RawRecord, decode_records
from tests.fixtures.debezium_events import envelope_schema, field, pg_source

Row = dict[str, Any]

#: Columns of the source table (Kafka Connect field schemas, as Debezium would declare them).
FIELDS = [
    field("id", "int64", optional=False),
    field("first_name", "string", optional=False),
    field("last_name", "string", optional=False),
    field("email", "string"),
    field("updated_at", "int64", logical="io.debezium.time.MicroTimestamp"),
]
KEY_FIELDS = [field("id", "int64", optional=False)]
PRIMARY_KEY = ("id",)
SOURCE_TABLE = "public.customers"

_FIRST = ("Sally", "George", "Edward", "Anne", "Ali", "Mei", "Olga", "Kwame", "Lucia", "Tomas")
_LAST = ("Thomas", "Bailey", "Walker", "Kretchmar", "Novak", "Chen", "Okafor", "Silva")
_EPOCH_US = 1_718_000_000_000_000
_LSN_BASE = 24_000_000_000
_LSN_STEP = 64
_TS_MS = 1_718_000_000_000


@dataclass(frozen=True)
class Workload:
    """What was generated: the sequence of keys, hence every event and the final state."""

    events: int
    keys: int
    partitions: int
    embedded_schema: bool
    seed: int
    #: The key of event ``i``.
    key_of: np.ndarray
    #: Whether event ``i`` is the first of its key (a create).
    is_create: np.ndarray

    @property
    def distinct_keys(self) -> int:
        return int(self.is_create.sum())

    def per_partition(self) -> list[int]:
        counts = np.bincount(self.key_of % self.partitions, minlength=self.partitions)
        return [int(c) for c in counts]

    def last_event_of(self) -> dict[int, int]:
        """Key -> number of its last event (whose ``after`` is the key's final row)."""
        reversed_keys = self.key_of[::-1]
        uniques, first_from_end = np.unique(reversed_keys, return_index=True)
        last = len(self.key_of) - 1 - first_from_end
        return dict(zip(uniques.tolist(), last.tolist(), strict=True))


def generate(
    events: int, keys: int, partitions: int, *, embedded_schema: bool, seed: int = 42
) -> Workload:
    """The key sequence: every key once, the rest uniform over all keys, shuffled."""
    rng = np.random.default_rng(seed)
    if events <= keys:
        sequence = rng.permutation(keys)[:events]
    else:
        sequence = rng.permutation(
            np.concatenate([np.arange(keys), rng.integers(0, keys, events - keys)])
        )
    sequence = sequence.astype(np.int64)
    _, first = np.unique(sequence, return_index=True)
    is_create = np.zeros(events, dtype=bool)
    is_create[first] = True
    return Workload(events, keys, partitions, embedded_schema, seed, sequence, is_create)


def expected_row(key: int, event: int) -> Row:
    """The ``after`` row of event number ``event`` (of key ``key``)."""
    first = _FIRST[key % len(_FIRST)]
    return {
        "id": key,
        "first_name": first,
        "last_name": _LAST[(key // 7) % len(_LAST)],
        "email": f"{first.lower()}.{key}.v{event}@example.com",
        "updated_at": _EPOCH_US + event * 1_000,
    }


#: The value of one event without an embedded schema, as bytes %-formatting fills it in (about
#: 5x faster than building the dicts and serialising them; :func:`event_body` is the same event
#: as a dict, and :func:`check_encoding` proves the two agree).
_VALUE = (
    b'{"before":null,"after":{"id":%d,"first_name":"%s","last_name":"%s","email":"%s",'
    b'"updated_at":%d},"source":{"version":"3.0.7.Final","connector":"postgresql",'
    b'"name":"dbserver1","ts_ms":%d,"snapshot":"false","db":"inventory",'
    b'"sequence":"[\\"%d\\",\\"%d\\"]","ts_us":%d,"ts_ns":%d,"schema":"public",'
    b'"table":"customers","txId":%d,"lsn":%d,"xmin":null},"transaction":null,"op":"%s",'
    b'"ts_ms":%d}'
)


def event_body(key: int, event: int, create: bool) -> Row:
    """Event number ``event`` (of key ``key``) as a dict: the reference for :data:`_VALUE`."""
    lsn = _LSN_BASE + event * _LSN_STEP
    source = pg_source(lsn, tx=_tx(event))
    source_ms = _TS_MS + event // 100 - 20
    source.update(ts_ms=source_ms, ts_us=source_ms * 1000, ts_ns=source_ms * 1_000_000)
    return {
        "before": None,
        "after": expected_row(key, event),
        "source": source,
        "transaction": None,
        "op": "c" if create else "u",
        "ts_ms": _TS_MS + event // 100,
    }


def _tx(event: int) -> int:
    return 1_000 + event // 4  # a few changes per transaction


class _Encoder:
    """Message bytes; with an embedded schema, the (constant) schema JSON is spliced in."""

    def __init__(self, embedded_schema: bool) -> None:
        self.embedded = embedded_schema
        self.value_prefix = b'{"schema":' + orjson.dumps(envelope_schema(FIELDS)) + b',"payload":'
        key_schema = {
            "type": "struct",
            "fields": KEY_FIELDS,
            "optional": False,
            "name": f"dbserver1.{SOURCE_TABLE}.Key",
        }
        self.key_prefix = b'{"schema":' + orjson.dumps(key_schema) + b',"payload":'
        self.firsts = [n.encode() for n in _FIRST]
        self.lowers = [n.lower().encode() for n in _FIRST]
        self.lasts = [n.encode() for n in _LAST]

    def value(self, key: int, event: int, create: bool) -> bytes:
        lsn = _LSN_BASE + event * _LSN_STEP
        source_ms = _TS_MS + event // 100 - 20
        first = key % len(_FIRST)
        raw = _VALUE % (
            key, self.firsts[first], self.lasts[(key // 7) % len(_LAST)],
            b"%s.%d.v%d@example.com" % (self.lowers[first], key, event),
            _EPOCH_US + event * 1_000,
            source_ms, lsn - 8, lsn, source_ms * 1000, source_ms * 1_000_000, _tx(event), lsn,
            b"c" if create else b"u", _TS_MS + event // 100,
        )  # fmt: skip
        return self.value_prefix + raw + b"}" if self.embedded else raw

    def key(self, key: int) -> bytes:
        raw = b'{"id":%d}' % key
        return self.key_prefix + raw + b"}" if self.embedded else raw


def messages(workload: Workload) -> Iterator[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` of every event, in source order."""
    encoder = _Encoder(workload.embedded_schema)
    partitions = workload.partitions
    keys = workload.key_of.tolist()
    creates = workload.is_create.tolist()
    for i, (key, create) in enumerate(zip(keys, creates, strict=True)):
        yield key % partitions, encoder.key(key), encoder.value(key, i, create)


def check_encoding() -> None:
    """The fast byte template must give exactly the JSON of :func:`event_body`."""
    for embedded in (False, True):
        encoder = _Encoder(embedded)
        for key, event, create in ((0, 0, True), (123_457, 987_654, False)):
            document = orjson.loads(encoder.value(key, event, create))
            body = document["payload"] if embedded else document
            if body != event_body(key, event, create):
                raise AssertionError(f"template and dict disagree: {body}")
            if embedded and document["schema"] != envelope_schema(FIELDS):
                raise AssertionError("embedded schema differs")
            key_doc = orjson.loads(encoder.key(key))
            if (key_doc["payload"] if embedded else key_doc) != {"id": key}:
                raise AssertionError(f"bad key {key_doc}")


@dataclass(frozen=True)
class Produced:
    topic: str
    events: int
    value_bytes: int
    seconds: float
    end_offsets: list[int]

    @property
    def mean_value_bytes(self) -> float:
        return self.value_bytes / self.events if self.events else 0.0


def produce(bootstrap: str, topic: str, workload: Workload) -> Produced:
    """Send every event (batched) and check the end offsets against the produced counts."""
    started = time.perf_counter()
    batched = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    total_bytes = 0
    for partition, key, value in messages(workload):
        total_bytes += len(value)
        send(batched, topic, partition, key, value)
    if batched.flush(300) != 0:
        raise RuntimeError("the batched producer did not deliver everything")
    seconds = time.perf_counter() - started
    ends = end_offsets(bootstrap, topic, workload.partitions)
    expected = workload.per_partition()
    if ends != expected:
        raise RuntimeError(f"end offsets {ends} differ from the produced counts {expected}")
    return Produced(topic, workload.events, total_bytes, seconds, ends)


def send(producer: Producer, topic: str, partition: int, key: bytes | None, value: bytes) -> None:
    """Produce one record, waiting out a full local queue."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ingest-check"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def decoder_config(topic_tables: dict[str, str]) -> DecoderConfig:
    """What the job decodes with: for schemaless messages the schema and key must be given.

    The schema is the one the decoder derives from an embedded Connect schema, so both variants
    of the workload produce identical tables.
    """
    schema = source_schema()
    tables = set(topic_tables.values())
    return DecoderConfig(
        topic_tables=topic_tables,
        schemas=dict.fromkeys(tables, schema),
        primary_keys=dict.fromkeys(tables, PRIMARY_KEY),
    )


def source_schema() -> pa.Schema:
    """The Arrow schema of the data columns, as the decoder derives it from :data:`FIELDS`."""
    encoder = _Encoder(embedded_schema=True)
    value = encoder.value(1, 0, True)
    record = RawRecord("dbserver1.public.customers", 0, 0, encoder.key(1), value)
    decoded = decode_records([record], DecoderConfig())
    if decoded.dead_letters:
        raise RuntimeError(f"sample event did not decode: {decoded.dead_letters[0].error}")
    return decoded.tables[0].source_schema
