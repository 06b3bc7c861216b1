"""Partition specs and the canonical ``partition_desc`` of a leaf partition.

A leaf partition is named by its range values in spec order, then its hash bucket:
``region=eu,day=2026-11-22,bucket=0003``. Values are percent-encoded so that any value - one
holding ``=``, ``,``, ``/`` or ``%``, an empty string, non-ASCII text - round-trips, and so that the
descriptor doubles as a safe relative directory path. ``NULL`` is written as ``%N``, which no
encoded value can produce (a real ``%`` is always followed by two hex digits), so a null and the
string "null" never collide.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

import pyarrow as pa

from catalog.errors import InvalidPartitionError
from catalog.model import UNAWARE_BUCKET

NULL_TOKEN = "%N"
BUCKET_KEY = "bucket"
_SAFE = "-_.~:+ @"  # kept readable; everything else outside [A-Za-z0-9] is escaped

PartitionValue = str | int | bool | dt.date | dt.datetime | decimal.Decimal | None


def encode_value(value: PartitionValue) -> str:
    """The canonical text of one partition value."""
    if value is None:
        return NULL_TOKEN
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dt.datetime):
        text = value.isoformat()
    elif isinstance(value, dt.date | int | decimal.Decimal | str):
        text = str(value) if not isinstance(value, dt.date) else value.isoformat()
    else:
        raise InvalidPartitionError(f"unsupported partition value type {type(value).__name__}")
    return quote(text, safe=_SAFE)


def decode_value(text: str) -> str | None:
    """Inverse of :func:`encode_value`, as text (typed by :meth:`PartitionSpec.typed_values`)."""
    if text == NULL_TOKEN:
        return None
    return unquote(text, errors="strict")


@dataclass(frozen=True)
class PartitionSpec:
    """Range columns plus the hash bucket count (``-1``: unaware of buckets)."""

    columns: tuple[str, ...] = ()
    hash_buckets: int = UNAWARE_BUCKET

    def __post_init__(self) -> None:
        if self.hash_buckets != UNAWARE_BUCKET and not 1 <= self.hash_buckets <= 65536:
            raise InvalidPartitionError(
                f"hash_buckets must be between 1 and 65536, or -1; got {self.hash_buckets}"
            )
        if BUCKET_KEY in self.columns:
            raise InvalidPartitionError(f"{BUCKET_KEY!r} is reserved for the hash bucket")
        if len(set(self.columns)) != len(self.columns):
            raise InvalidPartitionError("a partition column is named twice")

    @property
    def bucketed(self) -> bool:
        return self.hash_buckets != UNAWARE_BUCKET

    def desc(self, values: Mapping[str, PartitionValue], bucket: int | None = None) -> str:
        """The canonical descriptor of the leaf partition holding ``values`` (and ``bucket``)."""
        missing = [c for c in self.columns if c not in values]
        if missing:
            raise InvalidPartitionError(f"partition values missing for columns {missing}")
        parts = [f"{c}={encode_value(values[c])}" for c in self.columns]
        if self.bucketed:
            if bucket is None or not 0 <= bucket < self.hash_buckets:
                raise InvalidPartitionError(
                    f"bucket must be in [0, {self.hash_buckets}); got {bucket}"
                )
            parts.append(f"{BUCKET_KEY}={bucket:04d}")
        elif bucket is not None:
            raise InvalidPartitionError("this table is unaware of buckets; bucket must be None")
        return ",".join(parts)

    def parse(self, desc: str) -> tuple[dict[str, str | None], int | None]:
        """Split a descriptor into its (text) range values and its bucket; validate the shape."""
        pieces = desc.split(",") if desc else []
        expected = [*self.columns, *([BUCKET_KEY] if self.bucketed else [])]
        if len(pieces) != len(expected):
            raise InvalidPartitionError(f"partition {desc!r} does not match spec {expected}")
        values: dict[str, str | None] = {}
        bucket: int | None = None
        for piece, column in zip(pieces, expected, strict=True):
            key, sep, text = piece.partition("=")
            if key != column or not sep:
                raise InvalidPartitionError(
                    f"partition {desc!r}: expected {column}=..., got {piece!r}"
                )
            if column == BUCKET_KEY and self.bucketed:
                bucket = self._parse_bucket(desc, text)
            else:
                values[column] = self._parse_value(desc, text)
        return values, bucket

    def validate(self, desc: str) -> str:
        """Return ``desc`` if it is the canonical descriptor of a partition of this spec."""
        values, bucket = self.parse(desc)
        if self.desc(values, bucket) != desc:
            raise InvalidPartitionError(f"partition {desc!r} is not in canonical form")
        return desc

    def _parse_bucket(self, desc: str, text: str) -> int:
        if not (text.isdigit() and len(text) >= 4):
            raise InvalidPartitionError(f"partition {desc!r}: bad bucket {text!r}")
        bucket = int(text)
        if bucket >= self.hash_buckets:
            raise InvalidPartitionError(f"partition {desc!r}: bucket out of range")
        return bucket

    @staticmethod
    def _parse_value(desc: str, text: str) -> str | None:
        try:
            return decode_value(text)
        except UnicodeDecodeError as exc:
            raise InvalidPartitionError(f"partition {desc!r}: bad escape in {text!r}") from exc


def typed_value(text: str | None, arrow_type: pa.DataType) -> PartitionValue:
    """Convert a decoded descriptor value back to a Python value of the column's Arrow type."""
    if text is None:
        return None
    try:
        result: PartitionValue = pa.scalar(text).cast(arrow_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidPartitionError(f"value {text!r} is not a valid {arrow_type}") from exc
    return result


PARTITION_TYPES = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_date,
    pa.types.is_boolean,
    pa.types.is_decimal,
    pa.types.is_timestamp,
)


def check_partition_type(column: str, arrow_type: pa.DataType) -> None:
    if not any(check(arrow_type) for check in PARTITION_TYPES):
        raise InvalidPartitionError(
            f"column {column!r} of type {arrow_type} cannot be a range partition column"
        )


def partition_path(desc: str) -> str:
    """The relative directory of a partition: its descriptor with ``,`` as the path separator.

    Values are percent-encoded, so they hold neither ``,`` nor ``/``; the mapping is one-to-one.
    """
    return desc.replace(",", "/") if desc else ""


def values_of(desc: str, spec: PartitionSpec) -> Sequence[str | None]:
    values, _ = spec.parse(desc)
    return [values[c] for c in spec.columns]
