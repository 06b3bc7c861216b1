"""Deletion vectors: their bytes, where they are kept, and which files name them.

A deletion vector is the set of row positions of one data file that no longer count
(docs/design/deletion-vectors.md). Its bytes are Iceberg's ``deletion-vector-v1`` blob::

    length (u32 BE) | D1 D3 39 64 | Roaring64 bitmap, portable format | CRC-32 (u32 BE)

``length`` counts the magic and the bitmap; the CRC covers the same bytes. The bitmap is
pyroaring's ``BitMap64.serialize()``, which is the portable Roaring64 layout (u64 LE count of
32-bit bitmaps, then per bitmap its u32 LE key and the portable 32-bit bitmap). Why these
bytes: they are Iceberg v3's, and magic plus bitmap is exactly what Delta's writers put in a
vector (``RoaringBitmapArrayFormat.Portable``), so a future publisher to either format points
at our blobs instead of converting them.

Where a vector is kept (a :class:`~catalog.model.VectorRef` in the file's catalog entry):

* **inline**, base64 in the entry, when the blob is at most :data:`DEFAULT_INLINE_MAX_BYTES`
  (table property :data:`INLINE_MAX_PROPERTY`): a few marked rows cost no storage round trip.
  The cap exists because a reset op copies every entry of its partition and every plan parses
  the entries: large inline vectors would make every commit and plan pay for them.
* otherwise in a **vector file**, a Puffin file (``PFA1``, the blobs, a JSON footer naming each
  blob's ``referenced-data-file`` and ``cardinality``), one per commit and leaf partition,
  beside the partition's data files (:func:`catalog.files.layout.new_vector_file_path`). The
  entry names the file and the blob's byte range. Vector files are immutable: a changed vector
  is a new blob in a new file.

A vector shares its file's entry, so it lives and dies with it: expiry hands a vector file to
cleanup when no remaining entry names it, vacuum keeps every vector file an entry names, and
a vector can never outlive its data file (:func:`entry_paths`).

Readers apply vectors (:mod:`catalog.files.reader`): a vectored file is read row group by row
group, each batch masked by :func:`keep_mask` before any row filter, so positions always count
the file's rows as written. No writer produces vectors yet (design step 3 and on).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.compute as pc
from pyroaring import BitMap64

from catalog.errors import CatalogError
from catalog.files.layout import PartitionValues, new_vector_file_path
from catalog.files.storage import Storage
from catalog.manifest import FileManifest
from catalog.model import UNAWARE_BUCKET, VectorRef

#: The magic of a ``deletion-vector-v1`` blob (Delta's portable magic 1681511377, little-endian).
MAGIC = bytes.fromhex("d1d33964")
BLOB_TYPE = "deletion-vector-v1"
PUFFIN_MAGIC = b"PFA1"
#: Table property: the largest blob kept inline in a file's catalog entry, in bytes.
INLINE_MAX_PROPERTY = "vectors.inline-max-bytes"
DEFAULT_INLINE_MAX_BYTES = 1024
#: Positions are non-negative 64-bit integers (Iceberg: the most significant bit must be 0).
MAX_POSITION = 2**63 - 1
_FRAME = 12  # length, magic, CRC
_FOOTER_TAIL = 12  # payload size, flags, magic


class VectorFormatError(CatalogError, ValueError):
    """Bytes that are not a valid deletion vector or vector file (wrong length, magic or CRC,
    an unreadable bitmap or footer, a cardinality that differs from the catalog's)."""

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(f"{location}: {message}" if location else message)
        self.location = location


class VectorsNotReadableError(CatalogError):
    """A consumer that cannot apply deletion vectors met a file with one: taking the file
    whole would bring its deleted rows back (see :func:`refuse_vectors`)."""

    def __init__(self, *, table: str, partition: str, path: str) -> None:
        super().__init__(
            f"{table}: file {path!r} of partition {partition!r} has a deletion vector, which "
            "this consumer cannot apply (it takes data files whole); read the table through "
            "lakestream's readers, which apply deletion vectors"
        )
        self.table = table
        self.partition = partition
        self.path = path


class VectorConfigError(CatalogError, ValueError):
    """A vector table property with a value that cannot be used."""


# -- blobs -------------------------------------------------------------------------------------


def encode_vector(positions: Iterable[int]) -> bytes:
    """The ``deletion-vector-v1`` blob of a set of row positions.

    Raises:
        ValueError: a position below 0 or above :data:`MAX_POSITION`.
    """
    try:
        bitmap = BitMap64(positions)  # a copy: run_optimize below changes it
    except OverflowError:
        raise ValueError("row positions must be integers from 0 to 2**63 - 1") from None
    if bitmap and bitmap.max() > MAX_POSITION:
        raise ValueError(f"row position {bitmap.max()} is past {MAX_POSITION}")
    bitmap.run_optimize()  # runs of deleted rows (a range DELETE) shrink to a few bytes
    body = MAGIC + bitmap.serialize()
    crc = zlib.crc32(body)
    return len(body).to_bytes(4, "big") + body + crc.to_bytes(4, "big")


def decode_vector(blob: bytes | memoryview, *, location: str | None = None) -> BitMap64:
    """The positions of a ``deletion-vector-v1`` blob, its framing checked first.

    Raises:
        VectorFormatError: a length, magic or CRC that does not match, or an unreadable bitmap.
    """
    data = bytes(blob)
    if len(data) < _FRAME + 8:
        raise VectorFormatError(
            f"a deletion vector blob of {len(data)} bytes is too short", location=location
        )
    length = int.from_bytes(data[:4], "big")
    if length != len(data) - 8:
        raise VectorFormatError(
            f"deletion vector length field says {length} bytes, the blob holds {len(data) - 8}",
            location=location,
        )
    if data[4:8] != MAGIC:
        raise VectorFormatError(
            f"not a deletion vector: magic {data[4:8].hex(' ')}, expected {MAGIC.hex(' ')}",
            location=location,
        )
    expected = int.from_bytes(data[-4:], "big")
    actual = zlib.crc32(data[4:-4])
    if actual != expected:
        raise VectorFormatError(
            f"deletion vector CRC-32 mismatch (stored {expected:08x}, computed {actual:08x}):"
            " the blob is corrupt",
            location=location,
        )
    try:
        return BitMap64.deserialize(data[8:-4])
    except (ValueError, OverflowError) as exc:
        raise VectorFormatError(f"unreadable Roaring64 bitmap: {exc}", location=location) from None


def vector_positions(bitmap: BitMap64) -> npt.NDArray[np.uint64]:
    """The positions in ascending order, as readers mask batches with them."""
    return np.frombuffer(bitmap.to_array(), dtype=np.uint64)


def keep_mask(positions: npt.NDArray[np.uint64], start: int, length: int) -> npt.NDArray[np.bool_]:
    """Which of the file's rows ``start`` to ``start + length - 1`` its vector leaves alive.

    ``positions`` are sorted (:func:`vector_positions`), so the marks falling in the batch are
    found by two binary searches: a batch costs its own length, never the vector's.
    """
    keep = np.ones(length, dtype=np.bool_)
    bounds = np.array([start, start + length], dtype=np.uint64)
    lo, hi = np.searchsorted(positions, bounds)
    if hi > lo:
        keep[(positions[lo:hi] - np.uint64(start)).astype(np.int64)] = False
    return keep


# -- where vectors are kept --------------------------------------------------------------------


def inline_max_bytes(properties: Mapping[str, str]) -> int:
    """The table's inline cap (:data:`INLINE_MAX_PROPERTY`), in bytes.

    Raises:
        VectorConfigError: a value that is not a non-negative integer.
    """
    text = properties.get(INLINE_MAX_PROPERTY)
    if text is None:
        return DEFAULT_INLINE_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise VectorConfigError(
            f"table property {INLINE_MAX_PROPERTY} must be a number of bytes (0 or more), "
            f"not {text!r}"
        )
    return value


@dataclass(frozen=True)
class PuffinBlob:
    """One blob of a vector file, as its footer describes it."""

    type: str
    referenced_data_file: str
    offset: int
    length: int
    cardinality: int


def store_vectors(
    storage: Storage,
    vectors: Mapping[str, Iterable[int]],
    *,
    partition: PartitionValues = (),
    bucket: int = UNAWARE_BUCKET,
    inline_max: int = DEFAULT_INLINE_MAX_BYTES,
) -> dict[str, VectorRef]:
    """Encode each data file's vector (keyed by the file's relative path) and keep it inline,
    or, above ``inline_max``, in one new vector file of the partition. Written before the
    commit that names it, like a data file: a vector file no commit names is an orphan that
    vacuum removes."""
    refs: dict[str, VectorRef] = {}
    large: list[tuple[str, bytes, int]] = []
    for data_file, positions in vectors.items():
        bitmap = BitMap64(positions)
        blob = encode_vector(bitmap)
        if len(blob) <= inline_max:
            refs[data_file] = VectorRef(
                cardinality=len(bitmap), inline=base64.b64encode(blob).decode("ascii")
            )
        else:
            large.append((data_file, blob, len(bitmap)))
    if large:
        path = new_vector_file_path(partition, bucket)
        refs.update(
            zip((f for f, _, _ in large), write_vector_file(storage, path, large), strict=True)
        )
    return refs


def write_vector_file(
    storage: Storage, path: str, blobs: Sequence[tuple[str, bytes, int]]
) -> list[VectorRef]:
    """Write a Puffin file of ``(referenced data file, blob, cardinality)`` at ``path``; return
    each blob's reference, in order. ``referenced-data-file`` is the path relative to the table
    location, as the catalog records it (so a table can move)."""
    out = storage.open_output(path)
    try:
        sink: Any = out.sink
        sink.write(PUFFIN_MAGIC)
        offset = len(PUFFIN_MAGIC)
        refs, described = [], []
        for data_file, blob, cardinality in blobs:
            sink.write(blob)
            refs.append(
                VectorRef(cardinality=cardinality, path=path, offset=offset, length=len(blob))
            )
            described.append(
                {
                    "type": BLOB_TYPE,
                    "fields": [],
                    "snapshot-id": -1,
                    "sequence-number": -1,
                    "offset": offset,
                    "length": len(blob),
                    "properties": {
                        "referenced-data-file": data_file,
                        "cardinality": str(cardinality),
                    },
                }
            )
            offset += len(blob)
        payload = json.dumps(
            {"blobs": described, "properties": {"created-by": "lakestream"}},
            separators=(",", ":"),
        ).encode()
        sink.write(PUFFIN_MAGIC + payload)
        sink.write(len(payload).to_bytes(4, "little") + bytes(4) + PUFFIN_MAGIC)
        out.commit()
    except BaseException:
        out.abort()
        raise
    return refs


def read_puffin_blobs(storage: Storage, path: str) -> tuple[PuffinBlob, ...]:
    """The blobs a vector file's footer describes.

    Raises:
        VectorFormatError: not a Puffin file, a compressed or unreadable footer.
    """
    with storage.open_input(path) as f:
        size = f.size()
        if size < 2 * len(PUFFIN_MAGIC) + _FOOTER_TAIL:
            raise VectorFormatError("too short for a Puffin file", location=path)
        tail = f.read_at(_FOOTER_TAIL, size - _FOOTER_TAIL)
        payload_size = int.from_bytes(tail[:4], "little")
        footer_at = size - _FOOTER_TAIL - payload_size - len(PUFFIN_MAGIC)
        if tail[8:] != PUFFIN_MAGIC or f.read_at(4, 0) != PUFFIN_MAGIC or footer_at < 4:
            raise VectorFormatError("not a Puffin file (magic PFA1 missing)", location=path)
        if tail[4] & 1:
            raise VectorFormatError("compressed Puffin footers are not supported", location=path)
        footer = f.read_at(payload_size + len(PUFFIN_MAGIC), footer_at)
    if footer[:4] != PUFFIN_MAGIC:
        raise VectorFormatError("Puffin footer magic missing", location=path)
    try:
        described = json.loads(footer[4:])["blobs"]
        return tuple(
            PuffinBlob(
                type=b["type"],
                referenced_data_file=b["properties"]["referenced-data-file"],
                offset=int(b["offset"]),
                length=int(b["length"]),
                cardinality=int(b["properties"]["cardinality"]),
            )
            for b in described
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise VectorFormatError(f"unreadable Puffin footer: {exc!r}", location=path) from None


def load_vector(storage: Storage, ref: VectorRef) -> BitMap64:
    """The positions a reference names, checked against the cardinality the catalog recorded.

    Raises:
        VectorFormatError: see :func:`decode_vector`; also a cardinality that differs.
    """
    if ref.inline is not None:
        location = "inline vector"
        bitmap = decode_vector(base64.b64decode(ref.inline), location=location)
    else:
        assert ref.path is not None and ref.offset is not None and ref.length is not None
        location = f"{ref.path}@{ref.offset}"
        with storage.open_input(ref.path) as f:
            blob = f.read_at(ref.length, ref.offset)
        bitmap = decode_vector(blob, location=location)
    if len(bitmap) != ref.cardinality:
        raise VectorFormatError(
            f"vector holds {len(bitmap)} positions, the catalog records {ref.cardinality}",
            location=location,
        )
    return bitmap


# -- what the catalog does with them -----------------------------------------------------------


def entry_paths(entry: Mapping[str, Any]) -> list[str]:
    """The files one file entry of a commit row's ``file_ops`` names (as stored JSON): its
    data file and its vector file, if any. What expiry, cleanup and leftovers collect."""
    paths = [str(entry["path"])]
    vector = entry.get("vector")
    if isinstance(vector, Mapping) and vector.get("path") is not None:
        paths.append(str(vector["path"]))
    return paths


def refuse_vectors(table: str, partitions: Sequence[tuple[str, FileManifest]]) -> None:
    """Refuse a file set that holds a file with a deletion vector, for a consumer that takes
    files whole and cannot apply vectors (an export that publishes data files as they are would
    otherwise return deleted rows). Every reader of :mod:`catalog.files.reader` applies them.
    Callers pass only the partitions that may hold one
    (:attr:`catalog.snapshots.PartitionSnapshot.has_vectors`, found for a whole load at once).

    Raises:
        VectorsNotReadableError: naming the first such file.
    """
    for desc, manifest in partitions:
        marked = pc.not_equal(manifest.table.column("vector"), "")
        if pc.any(marked).as_py():
            first = int(pc.index(marked, True).as_py())
            raise VectorsNotReadableError(table=table, partition=desc, path=manifest.paths[first])
