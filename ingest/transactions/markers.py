"""Debezium's transaction metadata, read: the BEGIN/END markers of the ``<prefix>.transaction``
topic and the ``transaction`` block of each change event.

With ``provide.transaction.metadata=true`` Debezium writes, per source transaction, a BEGIN and an
END record to the transaction topic (key ``{"id": ...}``; the END carries ``event_count`` and the
per-table ``data_collections`` counts) and gives every change event a block ``{"id", "total_order",
"data_collection_order"}``. Records come with or without the JsonConverter's schema envelope.

Transaction ids are *normalised* before anything compares them. Debezium 3.x's PostgreSQL
connector names a transaction ``<txId>:<lsn>`` where the LSN is that of the record at hand: a
capture of one transaction of three events gave BEGIN ``733:26386320``, events ``733:26386320``,
``733:26386400``, ``733:26386504`` and END ``733:26386680``. Only ``txId`` names the transaction;
the END's LSN is its commit position, which this module keeps as the marker's source position
(the PostgreSQL layout of :mod:`ingest.debezium.position`). Ids of any other shape (SQL Server's
``00000025:00000d08:0025``, MySQL GTIDs ``<uuid>:<n>``, plain numbers) are taken as they are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal, NamedTuple

import msgspec
import orjson

from ingest.debezium.fastpath import MSGSPEC_REFUSALS
from ingest.debezium.position import LSN_LIMIT
from ingest.errors import IngestError

__all__ = [
    "BadTransactionMetadata",
    "MarkerStatus",
    "TransactionMarker",
    "TransactionRef",
    "decode_end",
    "decode_ends",
    "end_markers",
    "decode_marker",
    "is_transaction_topic",
    "normalise_id",
    "TRANSACTION_TOPIC_PATTERN",
    "transaction_ref",
]

_TOPIC_SUFFIX = ".transaction"
#: :func:`is_transaction_topic` as a regex matched against whole names (a source option): built
#: from the same suffix, ``(?s)`` so that it holds for any name, as the suffix test does.
TRANSACTION_TOPIC_PATTERN = r"(?s).+" + re.escape(_TOPIC_SUFFIX)
#: A BEGIN marker as Debezium writes it without a schema envelope: half of the transaction
#: topic, read by the driver, and the book ignores BEGIN markers: passed over unparsed.
_BEGIN_PREFIX = b'{"status":"BEGIN","id":"'


class BadTransactionMetadata(IngestError, ValueError):
    """A transaction marker or a change event's ``transaction`` block that cannot be read.

    The sink turns it into a dead letter of the record; ``reason`` says what was wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MarkerStatus(StrEnum):
    BEGIN = "BEGIN"
    END = "END"


class TransactionMarker(NamedTuple):
    """One record of the transaction topic, decoded.

    ``event_count`` and ``collections`` (data collection -> its events) are given by END markers
    only; ``position`` (32 hex digits, the 16-byte source position) only where the id carries one.
    A named tuple, not a frozen dataclass: the driver decodes tens of thousands per batch, and
    a frozen dataclass took a microsecond each to build.
    """

    status: MarkerStatus
    id: str
    event_count: int | None = None
    collections: tuple[tuple[str, int], ...] = ()
    ts_ms: int | None = None
    position: str | None = None

    def count_for(self, collections: frozenset[str] | None) -> int | None:
        """The events of this transaction in ``collections`` (None: all of them), that is, the
        events a job reading only those tables will see; None for a BEGIN marker.

        A marker without per-collection counts gives its whole count: nothing tells which of
        its events the job reads, so it waits for all of them."""
        if self.event_count is None:
            return None
        if collections is None or not self.collections:
            return self.event_count
        return sum([n for name, n in self.collections if name in collections])


@dataclass(frozen=True)
class TransactionRef:
    """The ``transaction`` block of a change event: its transaction and its rank in it (1-based,
    over the events of every table of the transaction)."""

    id: str
    total_order: int


def is_transaction_topic(topic: str) -> bool:
    """True for a topic named ``<something>.transaction``, Debezium's default name."""
    return topic.endswith(_TOPIC_SUFFIX) and len(topic) > len(_TOPIC_SUFFIX)


def normalise_id(raw: str) -> str:
    """The id that names a transaction in every record of it (see the module docstring).

    :func:`_pg_id`'s test, inlined: tasks call this for every event."""
    tx_id, colon, lsn = raw.partition(":")
    return tx_id if colon and tx_id.isdecimal() and lsn.isdecimal() else raw


def _pg_id(raw: str) -> tuple[str, str] | None:
    """``(txId, lsn)`` of a PostgreSQL id ``<txId>:<lsn>``, None for any other shape.

    ``isdecimal`` is exactly the regex ``\\d`` of a str pattern (Unicode decimal digits)."""
    tx_id, colon, lsn = raw.partition(":")
    return (tx_id, lsn) if colon and tx_id.isdecimal() and lsn.isdecimal() else None


def decode_marker(key: bytes | None, value: bytes | None) -> TransactionMarker | None:
    """The marker in one record of the transaction topic; None for a tombstone.

    Raises:
        BadTransactionMetadata: the value is not a BEGIN/END marker Debezium writes.
    """
    del key  # the key repeats the id; the value is what counts
    if value is None:
        return None
    body = _payload(_json(value))
    if not isinstance(body, dict):
        raise BadTransactionMetadata("a transaction marker must be a JSON object")
    status = body.get("status")
    if status not in ("BEGIN", "END"):
        raise BadTransactionMetadata(f"transaction marker status {status!r} is not BEGIN or END")
    raw_id = _text(body.get("id"), "id")
    ts_ms = _count(body.get("ts_ms"), "ts_ms", optional=True)
    pg_id = _pg_id(raw_id)
    txn = raw_id if pg_id is None else pg_id[0]
    if status == "BEGIN":
        return TransactionMarker(MarkerStatus.BEGIN, txn, ts_ms=ts_ms)
    return TransactionMarker(
        MarkerStatus.END,
        txn,
        _count(body.get("event_count"), "event_count"),
        _collections(body.get("data_collections")),
        ts_ms,
        None if pg_id is None else _position(int(pg_id[1])),
    )


def decode_ends(values: Iterable[bytes | None]) -> list[TransactionMarker]:
    """The END markers among records of the transaction topic, in order: what the book takes.

    A BEGIN marker as Debezium writes it without a schema envelope is passed over by its first
    bytes, unparsed (half the topic, read by the driver on every batch); an END as Debezium
    writes it is read by a msgspec decoder typed for it (a quarter of the time of a parse into
    dicts); any other record is decoded whole by :func:`decode_marker`, which also says what is
    wrong with a bad one.

    Raises:
        BadTransactionMetadata: a record is not a BEGIN/END marker Debezium writes.
    """
    return [m for m in end_markers(list(values)) if m is not None]


def end_markers(values: Sequence[bytes | None]) -> list[TransactionMarker | None]:
    """:func:`decode_end` of each record.

    Raises:
        BadTransactionMetadata: a record is not a BEGIN/END marker Debezium writes.
    """
    return list(map(decode_end, values))


def decode_end(value: bytes | None) -> TransactionMarker | None:
    """The END marker in one record of the transaction topic; None for a BEGIN or a tombstone
    (see :func:`decode_ends`).

    Raises:
        BadTransactionMetadata: the record is not a BEGIN/END marker Debezium writes.
    """
    if not value or value.startswith(_BEGIN_PREFIX):
        return None
    # _typed_end, _collections_of, _pg_id and _position inlined: the driver decodes tens of
    # thousands of ENDs a batch, and the calls were a sixth of the time
    try:
        end = _END.decode(value)
    except MSGSPEC_REFUSALS:
        end = None
    collections = None if end is None else _SEEN_COLLECTIONS.get(bytes(end.data_collections))
    if end is None or collections is None:
        marker = _typed_end(value) or decode_marker(None, value)
        return marker if marker is not None and marker.status is MarkerStatus.END else None
    txn = end.id
    tx_id, colon, lsn = txn.partition(":")
    position = None
    if colon and tx_id.isdecimal() and lsn.isdecimal():
        txn, number = tx_id, int(lsn)
        position = f"{number:016x}{_ZERO_HEX}" if number < LSN_LIMIT else None
    fields = (MarkerStatus.END, txn, end.event_count, collections, end.ts_ms, position)
    return _new_marker(TransactionMarker, fields)


_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]


class _Collection(msgspec.Struct, gc=False):
    data_collection: _Name
    event_count: _NonNegative


class _End(msgspec.Struct, gc=False):
    """An END marker as :func:`decode_marker` accepts it, checked by msgspec in C; its
    ``data_collections`` are kept raw and read once per distinct text (:func:`_collections_of`):
    a job's transactions touch few combinations of tables and counts."""

    status: Literal["END"]
    id: _Name
    event_count: _NonNegative
    data_collections: msgspec.Raw = msgspec.Raw()
    ts_ms: _NonNegative | None = None


_END = msgspec.json.Decoder(_End)
_COLLECTIONS = msgspec.json.Decoder(list[_Collection] | None)
#: ``data_collections`` texts read, and what they said (cleared when it grows past the limit).
_SEEN_COLLECTIONS: dict[bytes, tuple[tuple[str, int], ...]] = {}
_SEEN_LIMIT = 4096
_new_marker = tuple.__new__  # a named tuple built without its Python-level __new__


def _typed_end(value: bytes) -> TransactionMarker | None:
    """The END marker of a schemaless record, when msgspec reads it as one; None for anything
    else (which :func:`decode_marker` then reads, or names what is wrong with it)."""
    try:
        end = _END.decode(value)
        collections = _collections_of(bytes(end.data_collections))
    except MSGSPEC_REFUSALS:
        return None
    pg_id = _pg_id(end.id)
    return _new_marker(
        TransactionMarker,
        (
            MarkerStatus.END,
            end.id if pg_id is None else pg_id[0],
            end.event_count,
            collections,
            end.ts_ms,
            None if pg_id is None else _position(int(pg_id[1])),
        ),
    )


def _collections_of(raw: bytes) -> tuple[tuple[str, int], ...]:
    """``data_collections`` as (name, count) pairs; the same tuple for the same text.

    Raises:
        MSGSPEC_REFUSALS: it is not a list of Debezium's collection objects.
    """
    found = _SEEN_COLLECTIONS.get(raw)
    if found is None:
        items = _COLLECTIONS.decode(raw) if raw else None
        found = tuple([(c.data_collection, c.event_count) for c in items or ()])
        if len(_SEEN_COLLECTIONS) >= _SEEN_LIMIT:
            _SEEN_COLLECTIONS.clear()
        _SEEN_COLLECTIONS[raw] = found
    return found


def transaction_ref(payload: Mapping[str, object]) -> TransactionRef | None:
    """The ``transaction`` block of a change event's payload (schema envelope already removed);
    None when the event has none (snapshot reads, sources without transaction metadata).

    Raises:
        BadTransactionMetadata: the block is there but does not name a transaction and a rank.
    """
    block = payload.get("transaction")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise BadTransactionMetadata("the event's transaction block is not an object")
    raw_id = _text(block.get("id"), "transaction.id")
    order = _count(block.get("total_order"), "transaction.total_order")
    if order is None or order < 1:
        raise BadTransactionMetadata(f"transaction.total_order {order!r} is not 1 or more")
    return TransactionRef(id=normalise_id(raw_id), total_order=order)


def _json(value: bytes) -> object:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise BadTransactionMetadata(f"not JSON: {exc}") from None


def _payload(body: object) -> object:
    """The payload of a JsonConverter schema envelope, or ``body`` itself."""
    if isinstance(body, dict) and body.keys() == {"schema", "payload"}:
        return body["payload"]
    return body


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadTransactionMetadata(f"{name} {value!r} is not a non-empty string")
    return value


def _count(value: object, name: str, *, optional: bool = False) -> int | None:
    """A non-negative integer, also from a string of digits (older Debezium wrote strings)."""
    if value is None:
        if optional:
            return None
        raise BadTransactionMetadata(f"{name} is missing")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if type(value) is not int or value < 0:
        raise BadTransactionMetadata(f"{name} {value!r} is not a non-negative integer")
    return value


def _collections(value: object) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise BadTransactionMetadata("data_collections is not a list")
    return tuple(_collection(item) for item in value)


def _collection(item: object) -> tuple[str, int]:
    if type(item) is dict:
        name, count = item.get("data_collection"), item.get("event_count")
        if type(name) is str and name and type(count) is int and count >= 0:
            return name, count  # as Debezium writes it: checked in one go
        parsed = _count(count, "data_collections.event_count")
        assert parsed is not None  # _count raises for a missing count
        return _text(name, "data_collection"), parsed
    raise BadTransactionMetadata("a data_collections item is not an object")


def _position(lsn: int) -> str | None:
    """``postgres_position(lsn).hex()``: the LSN's 16 hex digits, then the 16 of a zero."""
    return None if lsn >= LSN_LIMIT else f"{lsn:016x}{_ZERO_HEX}"


_ZERO_HEX = "0" * 16
