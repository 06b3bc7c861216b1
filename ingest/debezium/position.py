"""The source position of a change event, encoded so that byte order is source order.

Every decoded row carries its position in :data:`SEQ_COLUMN` as 16 bytes
(``fixed_size_binary(16)``), big-endian, so that comparing two positions byte by byte (as
Parquet statistics, Arrow sorts and SQL ``bytea`` comparison do) orders them like the source
log. The merge keeps, per key, the row with the greatest position: a replayed message or a
re-snapshot older than what a table holds can never regress a key, whatever order Kafka
delivers it in.

Layouts, chosen from the envelope's ``source`` block:

============  ===================================================================================
PostgreSQL    ``source.lsn`` (8 bytes) + 8 bytes of 0. If ``lsn`` is missing: 8 bytes of 0 +
              the last element of ``source.sequence`` (``'["<last commit lsn>", "<lsn>"]'``).
MySQL         binlog file number from ``source.file`` (``mysql-bin.000003`` gives 3; 4 bytes) +
              ``source.pos`` (8 bytes) + ``source.row`` (4 bytes, 0 if missing). A binlog
              rollover raises the file number, so it sorts after every position of older files.
otherwise     ``ts_ms`` of the envelope, else ``source.ts_ms``, else the Kafka timestamp, else 0
              (8 bytes) + the Kafka offset (8 bytes).
============  ===================================================================================

All numbers are unsigned; a negative or oversized number is a bad position (a dead letter),
because a wrapped-around position would silently reorder history.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import orjson

from ingest.debezium.errors import DebeziumError

#: Name of the column holding the encoded source position of each row.
SEQ_COLUMN = "_ls_seq"
#: Width of an encoded position in bytes.
SEQ_WIDTH = 16

_PAIR = struct.Struct(">QQ").pack
#: Packs ``(lsn, 0)`` into a PostgreSQL position; for hot loops that check the LSN themselves.
pack_pair = _PAIR
#: PostgreSQL LSNs are unsigned 64-bit numbers.
LSN_LIMIT = 1 << 64
_BINLOG = struct.Struct(">IQI").pack


class BadPosition(DebeziumError, ValueError):
    """The ``source`` block holds a position that cannot be encoded."""


def encode_position(
    payload: Mapping[str, object], offset: int, timestamp_ms: int | None = None
) -> bytes:
    """The 16-byte position of one Debezium envelope payload (see the module docstring)."""
    source = payload.get("source")
    try:
        if isinstance(source, dict):
            if source.get("lsn") is not None:
                return _PAIR(source["lsn"], 0)
            if source.get("sequence") is not None:
                return _PAIR(0, _last_sequence(source["sequence"]))
            if source.get("file") is not None and source.get("pos") is not None:
                return _binlog(source)
        return _PAIR(_event_time(payload, source, timestamp_ms), offset)
    except (struct.error, TypeError, ValueError) as exc:
        raise BadPosition(f"cannot encode source position: {exc}") from None


def _binlog(source: Mapping[str, object]) -> bytes:
    file = source["file"]
    if not isinstance(file, str):
        raise BadPosition(f"binlog file is not a string: {file!r}")
    number = file.rpartition(".")[2]
    if not number.isdigit():
        raise BadPosition(f"binlog file has no number: {file!r}")
    row = source.get("row")
    return _BINLOG(int(number), source["pos"], 0 if row is None else row)


def _last_sequence(sequence: object) -> int:
    items = orjson.loads(sequence) if isinstance(sequence, str | bytes) else sequence
    if not isinstance(items, list) or not items or items[-1] is None:
        raise BadPosition(f"source.sequence has no last position: {sequence!r}")
    last = items[-1]
    if isinstance(last, bool) or not isinstance(last, int | str):
        raise BadPosition(f"source.sequence ends with {last!r}")
    return int(last)


def _event_time(payload: Mapping[str, object], source: object, timestamp_ms: int | None) -> int:
    for candidate in (
        payload.get("ts_ms"),
        source.get("ts_ms") if isinstance(source, dict) else None,
        timestamp_ms,
    ):
        if candidate is not None:
            if isinstance(candidate, bool) or not isinstance(candidate, int):
                raise BadPosition(f"ts_ms is not an integer: {candidate!r}")
            return candidate
    return 0


def postgres_position(lsn: int) -> bytes:
    """The position of a PostgreSQL event at ``lsn`` (for callers comparing with stored rows)."""
    return _PAIR(lsn, 0)


def binlog_position(file_number: int, pos: int, row: int = 0) -> bytes:
    """The position of a MySQL event at (file number, pos, row)."""
    return _BINLOG(file_number, pos, row)
