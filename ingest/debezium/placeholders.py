"""Debezium's placeholder for a value it did not send: an unchanged TOASTed PostgreSQL column.

Under the default ``REPLICA IDENTITY``, PostgreSQL's logical decoding leaves out the values of
large columns stored out of line (TOASTed) that an UPDATE did not change, and Debezium puts
``__debezium_unavailable_value`` in their place: as the text itself for text-like columns,
base64-encoded for binary ones, and as a one-element list for arrays. Writing the placeholder
would overwrite the stored value in the lake; the decoder writes such a change as a *partial*
row instead (see :mod:`catalog.files.partial`), completed from the key's previous change.

Detection runs per column over a whole batch (a C-level ``in`` scan of the column's values),
not per message: scanning every message's bytes for the marker cost more than a third of
parsing them.
"""

from __future__ import annotations

import base64

from ingest.debezium.codecs import BinaryCodec, Codec, ListCodec, StringCodec

UNAVAILABLE_MARKER = "__debezium_unavailable_value"
UNAVAILABLE_MARKER_B64 = base64.b64encode(UNAVAILABLE_MARKER.encode()).decode()


def placeholders_of(codec: Codec) -> tuple[object, ...]:
    """The forms the placeholder takes in a column of this codec; none for types PostgreSQL
    never stores out of line (numbers, dates, booleans ...), whose columns are not scanned."""
    if isinstance(codec, StringCodec):
        return (UNAVAILABLE_MARKER,)
    if isinstance(codec, BinaryCodec):
        return (UNAVAILABLE_MARKER_B64,)
    if isinstance(codec, ListCodec):
        return ([UNAVAILABLE_MARKER], [UNAVAILABLE_MARKER_B64])
    return ()


def placeholder_rows(values: list[object], placeholders: tuple[object, ...]) -> list[int]:
    """Positions of a column's values that are the placeholder (usually none: one scan)."""
    if not any(placeholder in values for placeholder in placeholders):
        return []
    return [i for i, value in enumerate(values) if value in placeholders]
