"""The decoder's fast path for the common event, decoded by msgspec into a tuple of values.

Most messages of a CDC topic are creates, snapshot reads and updates of a table whose schema is
configured (schemaless JsonConverter output). For those, parsing every field of the envelope
into dicts - above all the ``source`` block, whose fifteen fields the decoder never reads but
for the LSN - was the largest cost of a task after reading Kafka. Here a msgspec decoder typed
for exactly what the table needs (``op``, the ``after`` row's columns, ``source.lsn``) skips
the rest without building it, and returns the row as a tuple in the layout's column order;
rows are transposed into the column lists in one C-level pass.

Messages that embed their Connect schema (the JsonConverter's default) take the same path once
the general path has met their schema: the schema part is kept as raw bytes (never parsed) and
compared with the one the table's rows were decoded under; a message with another schema takes
the general path, which re-arms the fast path for it.

Anything else - deletes, a row with columns the schema lacks, an ``after``
that is not an object, a missing or odd LSN, malformed JSON - is not decided here: the message
goes through the general path (:meth:`ingest.debezium.rows.TableRows.add`), which accepts it
or makes it a dead letter with the precise reason. Values are taken as JSON gives them; the
column codecs check them exactly as on the general path.
"""

from __future__ import annotations

import keyword
from functools import lru_cache
from typing import Any

import msgspec

from ingest.debezium.model import UPSERT_OPS
from ingest.debezium.position import LSN_LIMIT, pack_pair


class _Source(msgspec.Struct):
    lsn: Any = None


class TransactionBlock(msgspec.Struct, gc=False):
    """The envelope's ``transaction`` block, its fields as JSON gives them (checked by the one
    who reads them: only ``transactions: consistent`` does, see ``ingest.sink.held``)."""

    id: Any = None
    total_order: Any = None


#: A ``transaction`` block as the fast path hands it over: its JSON text, exactly as it stands
#: in the envelope (empty when the envelope has none).
BlockText = msgspec.Raw


@lru_cache(maxsize=256)
def _decoder(names: tuple[str, ...], blocks: bool = True) -> msgspec.json.Decoder[Any]:
    """A decoder of envelopes whose ``after`` holds only ``names`` (unknown ones are refused).

    ``blocks``: also hand over the ``transaction`` block, as its text (:data:`BlockText`).
    Without, msgspec skips it unbuilt: a struct per event for a reader that never looks at it
    was ~2% of a task's decode. As text it costs ~70 ns an event against ~95 as a struct, and
    the reader (the tasks' hold, ``ingest.sink.held.HeldSplit.fast``) reads it with msgspec."""
    fields = [(f"c{i}", Any, None) for i in range(len(names))]
    rename = {f"c{i}": name for i, name in enumerate(names)}
    row = msgspec.defstruct("Row", fields, rename=rename, forbid_unknown_fields=True)
    parts: list[tuple[str, Any, Any]] = [
        ("op", Any, None),
        ("after", row | None, None),
        ("source", _Source | None, None),
    ]
    if blocks:
        parts.append(("transaction", BlockText, BlockText()))
    return msgspec.json.Decoder(msgspec.defstruct("Envelope", parts))


@lru_cache(maxsize=256)
def _embedded_decoder(names: tuple[str, ...], blocks: bool = True) -> msgspec.json.Decoder[Any]:
    """A decoder of ``{"schema": ..., "payload": envelope}`` keeping the schema as raw bytes."""
    envelope = _decoder(names, blocks).type
    message = msgspec.defstruct(
        "Message", [("schema", msgspec.Raw, msgspec.Raw()), ("payload", envelope | None, None)]
    )
    return msgspec.json.Decoder(message)


class _SchemaPart(msgspec.Struct):
    schema: msgspec.Raw = msgspec.Raw()


_SCHEMA_PART = msgspec.json.Decoder(_SchemaPart)
#: What msgspec raises for a text it does not read as the type asked for (every msgspec reader
#: of records catches these and leaves the record to slower code). Invalid UTF-8 in a string it
#: builds raises UnicodeDecodeError, not a DecodeError: one such change event failed its whole
#: batch (the general path dead-letters it), one such END or block raised past the error naming
#: it.
MSGSPEC_REFUSALS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError)


def embedded_schema(value: bytes) -> bytes | None:
    """The raw JSON of a message's embedded schema (the rest of the message is skipped)."""
    try:
        part = _SCHEMA_PART.decode(value)
    except MSGSPEC_REFUSALS:
        return None
    raw = bytes(part.schema)
    return raw or None


def usable(names: tuple[str, ...]) -> bool:
    """Whether msgspec can name these columns (any JSON name maps through ``rename``, but
    keep to plain names: anything unusual takes the general path)."""
    return all(n.isidentifier() and not keyword.iskeyword(n) for n in names)


class FastRows:
    """Decodes one table's common events into value tuples, with their PostgreSQL position.

    ``schema``: the raw embedded schema the messages must carry, or None for schemaless ones.
    ``blocks``: hand over each event's ``transaction`` block as its text (``transactions:
    consistent`` reads them); without, :meth:`decode` gives None for it and never reads it.
    """

    def __init__(
        self, names: tuple[str, ...], schema: bytes | None = None, *, blocks: bool = True
    ) -> None:
        self.schema = schema
        self._raw = None if schema is None else msgspec.Raw(schema)
        decoder = _decoder(names, blocks) if schema is None else _embedded_decoder(names, blocks)
        self._decode = decoder.decode
        self._blocks = blocks
        self._errors = MSGSPEC_REFUSALS

    def decode(self, value: bytes) -> tuple[tuple[object, ...], bytes, BlockText | None] | None:
        """``(row values, encoded position, transaction block's text)``, or None to leave the
        message to the general path. The block is not checked here: its reader does."""
        try:
            envelope = self._decode(value)
        except self._errors:
            return None
        if self._raw is not None:
            if envelope.schema != self._raw or envelope.payload is None:
                return None
            envelope = envelope.payload
        after, source = envelope.after, envelope.source
        if after is None or source is None or envelope.op not in UPSERT_OPS:
            return None
        lsn = source.lsn
        if type(lsn) is not int or not 0 <= lsn < LSN_LIMIT:
            return None
        block = envelope.transaction if self._blocks else None
        return msgspec.structs.astuple(after), pack_pair(lsn, 0), block
