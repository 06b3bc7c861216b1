"""Where data files live under a table location.

Layout (relative to the table location; this relative path is what :class:`DataFile` records)::

    data/<partition path>/bucket-NNNN/part-<uuid hex>.parquet    CDC table (bucket >= 0)
    data/<partition path>/part-<uuid hex>.parquet                append table (bucket -1)
    data/<partition path>[/bucket-NNNN]/dv-<uuid hex>.puffin     deletion vectors of a commit

* ``<partition path>`` is one ``name=value`` segment per range-partition column, in partition
  spec order, left out when the table has no range partitions. Names and values are
  percent-encoded (RFC 3986: everything but ``A-Z a-z 0-9 - . _ ~`` becomes ``%XX`` of its UTF-8
  bytes), so any value - ``/``, ``..``, ``=``, ``%``, spaces, non-ASCII - gives one safe path
  segment. A null value is written ``__null__``; a segment longer than
  :data:`MAX_SEGMENT_BYTES` keeps a prefix plus a SHA-256 digest of the full segment.
* The path is informative and unique (a random UUID per file); nothing parses partition values
  back from it: the catalog records each file's partition and relative path.
* ``data/`` keeps data files apart from anything else a table location may hold, so orphan
  cleanup lists one tree. On a local disk files are written as ``.part-<uuid>.parquet.tmp`` in the
  same folder and renamed when complete; leftovers of that kind are never referenced and are safe
  to delete. On an object store there is no temporary name (see :mod:`catalog.files.storage`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import uuid
from collections.abc import Sequence
from urllib.parse import quote

from catalog.model import UNAWARE_BUCKET

DATA_DIR = "data"
NULL_SEGMENT_VALUE = "__null__"
MAX_SEGMENT_BYTES = 200
TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"

#: (column name, value) pairs of a leaf partition, in partition-spec order.
PartitionValues = Sequence[tuple[str, object]]


def format_partition_value(value: object) -> str:
    """The canonical text of a partition value (before percent-encoding)."""
    if value is None:
        return NULL_SEGMENT_VALUE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _segment(name: str, value: object) -> str:
    text = format_partition_value(value)
    encoded = text if value is None else quote(text, safe="")
    segment = f"{quote(name, safe='')}={encoded}"
    if len(segment) <= MAX_SEGMENT_BYTES:
        return segment
    digest = hashlib.sha256(segment.encode()).hexdigest()[:32]
    prefix = segment[: MAX_SEGMENT_BYTES - len(digest) - 1]
    prefix = prefix[: prefix.rfind("%")] if "%" in prefix[-2:] else prefix
    return f"{prefix}~{digest}"


def partition_path(values: PartitionValues) -> str:
    """``name=value/...`` for a leaf partition, each segment safe for any value."""
    return "/".join(_segment(name, value) for name, value in values)


def bucket_dir(bucket: int) -> str:
    """``bucket-0003`` for bucket 3; empty for tables unaware of buckets (bucket -1)."""
    if bucket == UNAWARE_BUCKET:
        return ""
    if bucket < 0:
        raise ValueError(f"invalid bucket {bucket}")
    return f"bucket-{bucket:04d}"


def new_data_file_path(partition: PartitionValues = (), bucket: int = UNAWARE_BUCKET) -> str:
    """A fresh, unique relative path for a data file of this partition and bucket."""
    parts = [DATA_DIR, partition_path(partition), bucket_dir(bucket)]
    name = f"part-{uuid.uuid4().hex}.parquet"
    return "/".join([p for p in parts if p] + [name])


def new_vector_file_path(partition: PartitionValues = (), bucket: int = UNAWARE_BUCKET) -> str:
    """A fresh, unique relative path for a Puffin vector file of this leaf partition: beside
    the data files whose vectors it holds, so a partition's directory holds all of its files
    (partition TTL and vacuum's listing find them there; see :mod:`catalog.files.vectors`)."""
    parts = [DATA_DIR, partition_path(partition), bucket_dir(bucket)]
    name = f"dv-{uuid.uuid4().hex}.puffin"
    return "/".join([p for p in parts if p] + [name])


def temp_name(final_name: str) -> str:
    """The name a file is written under before it is renamed to ``final_name``."""
    return f"{TEMP_PREFIX}{final_name}{TEMP_SUFFIX}"
