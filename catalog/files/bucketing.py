"""Primary key -> hash bucket: a stable, documented, vectorised hash.

A CDC table spreads its keys over ``N`` hash buckets, and every engine that writes or prunes the
table (Spark executors through ``mapInArrow``, the compactor, a plain Python or a Flink/Trino
reader) must put a key in the same bucket. So the hash is defined on the *canonical bytes* of the
key values, never on an engine's own hash (Python's ``hash()`` is salted per process, Spark's and
DuckDB's hashes are engine-specific).

The algorithm is Apache Iceberg's bucket transform hash (spec, "Appendix B: 32-bit Hash
Requirements"), extended to composite keys. A single-column key therefore lands in the same
bucket as Iceberg's ``bucket[N]`` transform of that column.

Algorithm
---------
``murmur3_32(bytes, seed)`` is MurmurHash3 x86 32-bit (Austin Appleby), the function behind
Guava's ``Hashing.murmur3_32_fixed(seed)`` and Python's ``mmh3.hash(bytes, seed, signed=False)``.

Canonical bytes of one non-null value, per Arrow type:

=========================================  ================================================
Arrow type                                 bytes hashed
=========================================  ================================================
int8/16/32/64, uint8/16/32                 the value as int64, 8 bytes little-endian
uint64                                     its 8 bytes little-endian (= int64 bit pattern)
bool                                       int64 1 (true) or 0 (false), 8 bytes LE
float16/32/64                              the value as float64, IEEE-754 bits, 8 bytes LE;
                                           -0.0 hashed as 0.0, every NaN as 0x7ff8000000000000
decimal32/64/128/256 (any scale)           unscaled value, minimal two's-complement
                                           big-endian bytes (Java ``BigInteger.toByteArray``)
date32 / date64                            days since 1970-01-01 as int64, 8 bytes LE
time32 / time64                            microseconds since midnight as int64, 8 bytes LE
timestamp (any unit, with or without tz)   microseconds since the epoch (UTC instant) as int64,
                                           8 bytes LE; nanoseconds are floor-divided by 1000
string / large_string / string_view        UTF-8 bytes
binary / large_binary / binary_view        the bytes
fixed_size_binary, uuid extension          the bytes (a UUID: its 16 bytes, big-endian)
dictionary<T>                              as T (the decoded value)
=========================================  ================================================

A null key value is refused (:class:`catalog.errors.SchemaError`): primary keys are never null.
Other types (nested, null, duration, ...) are refused as well.

Key hash for key columns ``k1..kn`` (in primary-key order)::

    h = 0
    for each key column ki:  h = murmur3_32(canonical_bytes(ki), seed=h)

Bucket: ``(h & 0x7FFFFFFF) % N`` (``h`` read as an unsigned 32-bit number).

Golden values (from the Iceberg spec, signed 32-bit as Iceberg prints them): int64 ``34`` ->
2017239379, string ``"iceberg"`` -> 1210000089, decimal ``14.20`` -> -500754589, date
``2017-11-16`` -> -653330422, timestamp ``2017-11-16T22:31:08`` -> -2047944441, binary
``00 01 02 03`` -> -188683207, uuid ``f79c3e09-677c-4bbd-a479-3f349cb785e7`` -> 1488055340.

Implementation: numpy over the Arrow buffers (zero-copy views), wrapping uint32 arithmetic; a
variable-length column is hashed block-by-block over all rows at once, the rows sorted by length
so that block ``j`` touches only the rows that have it. No per-row Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import SchemaError

U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_N = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_TAIL_MASKS = np.array([0x0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
_CANONICAL_NAN = np.int64(0x7FF8000000000000)
_MICROS_PER_DAY = 86_400_000_000
_TO_MICROS = {"s": (1_000_000, 1), "ms": (1_000, 1), "us": (1, 1), "ns": (1, 1_000)}


def _rotl(x: U32, r: int) -> U32:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_block(h: U32, k: U32) -> U32:
    """One murmur3 body round: mixes a 4-byte little-endian block ``k`` into ``h``."""
    k = _rotl(k * _C1, 15) * _C2
    h = _rotl(h ^ k, 13)
    return h * np.uint32(5) + _N


def _mix_tail(h: U32, tail: U32) -> U32:
    """The murmur3 tail step; a zero tail (no remaining bytes) leaves ``h`` unchanged."""
    return h ^ (_rotl(tail * _C1, 15) * _C2)


def _finalize(h: U32, length: npt.NDArray[np.uint32]) -> U32:
    h = h ^ length
    h = (h ^ (h >> np.uint32(16))) * _F1
    h = (h ^ (h >> np.uint32(13))) * _F2
    return h ^ (h >> np.uint32(16))


def _murmur3_int64(values: I64, seed: U32) -> U32:
    """murmur3_32 of each value's 8 little-endian bytes (two blocks, no tail)."""
    words = np.ascontiguousarray(values, dtype="<i8").view("<u4").reshape(-1, 2)
    with np.errstate(over="ignore"):
        h = _mix_block(seed.copy(), words[:, 0].astype(np.uint32))
        h = _mix_block(h, words[:, 1].astype(np.uint32))
        return _finalize(h, np.full(len(values), 8, dtype=np.uint32))


def _unaligned_words(data: U8) -> U32:
    """A view of every (unaligned) 4-byte little-endian word starting at each byte of ``data``."""
    padded = np.concatenate([data, np.zeros(4, dtype=np.uint8)])
    count = len(padded) - 3
    return np.ndarray(shape=(count,), dtype="<u4", buffer=padded, strides=(1,))


def _murmur3_bytes(data: U8, starts: I64, lengths: I64, seed: U32) -> U32:
    """murmur3_32 of ``data[starts[i] : starts[i] + lengths[i]]`` for every row ``i``."""
    words = _unaligned_words(data)
    blocks = lengths // 4
    order = np.argsort(-blocks, kind="stable")
    s_starts, s_blocks = starts[order], blocks[order]
    h = seed[order].astype(np.uint32)
    max_blocks = int(s_blocks[0]) if len(s_blocks) else 0
    # Rows with at least j+1 blocks form a prefix of ``order``: searchsorted on -blocks.
    active = np.searchsorted(-s_blocks, -np.arange(1, max_blocks + 1), side="right")
    with np.errstate(over="ignore"):
        for j, count in enumerate(active.tolist()):
            k = words[s_starts[:count] + 4 * j].astype(np.uint32)
            h[:count] = _mix_block(h[:count], k)
        tail = words[s_starts + 4 * s_blocks] & _TAIL_MASKS[lengths[order] & 3]
        h = _finalize(_mix_tail(h, tail.astype(np.uint32)), lengths[order].astype(np.uint32))
    out = np.empty_like(h)
    out[order] = h
    return out


def _buffer_bytes(buf: pa.Buffer | None) -> U8:
    if buf is None:
        return np.zeros(0, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _hash_varlen(arr: pa.Array, seed: U32) -> U32:
    """Strings and binaries: hash the value bytes straight from the Arrow buffers."""
    if pa.types.is_string_view(arr.type) or pa.types.is_binary_view(arr.type):
        target = pa.large_string() if pa.types.is_string_view(arr.type) else pa.large_binary()
        arr = pc.cast(arr, target)
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    bufs = arr.buffers()
    raw = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)
    offsets: I64 = np.asarray(raw[arr.offset : arr.offset + len(arr) + 1], dtype=np.int64)
    return _murmur3_bytes(_buffer_bytes(bufs[2]), offsets[:-1], np.diff(offsets), seed)


def _hash_fixed_binary(arr: pa.Array, seed: U32) -> U32:
    width = arr.type.byte_width
    data = _buffer_bytes(arr.buffers()[1])
    starts = (np.arange(len(arr), dtype=np.int64) + arr.offset) * width
    return _murmur3_bytes(data, starts, np.full(len(arr), width, dtype=np.int64), seed)


def _hash_decimal(arr: pa.Array, seed: U32) -> U32:
    """Unscaled value as minimal two's-complement big-endian bytes, as Java's BigInteger."""
    if arr.type.bit_width < 128:
        arr = pc.cast(arr, pa.decimal128(arr.type.precision, arr.type.scale))
    width = arr.type.bit_width // 8
    raw = _buffer_bytes(arr.buffers()[1])[arr.offset * width : (arr.offset + len(arr)) * width]
    big_endian = np.ascontiguousarray(raw.reshape(-1, width)[:, ::-1])
    # Bytes equal to the sign byte (0x00 or 0xFF) are redundant at the front, as long as the
    # next byte still carries the sign in its top bit.
    magnitude = big_endian ^ np.where(big_endian[:, :1] >= 0x80, 0xFF, 0x00).astype(np.uint8)
    nonzero = magnitude != 0
    first = np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), width - 1)
    top_bit = magnitude[np.arange(len(magnitude)), first] >= 0x80
    start_in_row = np.maximum(first - top_bit.astype(np.int64), 0)
    lengths = (width - start_in_row).astype(np.int64)
    starts = np.arange(len(magnitude), dtype=np.int64) * width + start_in_row
    return _murmur3_bytes(big_endian.reshape(-1), starts, lengths, seed)


def _int64_values(arr: pa.Array) -> I64:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _float_bits(arr: pa.Array) -> I64:
    values = np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), np.float64)
    values = np.where(values == 0.0, 0.0, values)  # -0.0 -> 0.0
    bits = values.view(np.int64)
    return np.where(np.isnan(values), _CANONICAL_NAN, bits)


def _temporal_micros(arr: pa.Array) -> I64:
    """Dates as days; times and timestamps as microseconds (floor for nanoseconds)."""
    t = arr.type
    if pa.types.is_date32(t):
        return _int64_values(pc.cast(arr, pa.int32()))
    if pa.types.is_date64(t):
        return np.floor_divide(_int64_values(pc.cast(arr, pa.int64())), 86_400_000)
    mul, div = _TO_MICROS[t.unit]
    raw = _int64_values(pc.cast(arr, pa.int64() if t.bit_width == 64 else pa.int32()))
    return np.floor_divide(raw * mul, div)


def _canonical_int64(arr: pa.Array) -> I64 | None:
    """The int64 encoding of fixed-width key types, or None if the type hashes as bytes."""
    t = arr.type
    if pa.types.is_uint64(t):
        return _int64_values(pc.cast(arr, pa.int64(), safe=False))
    if pa.types.is_integer(t):
        return _int64_values(pc.cast(arr, pa.int64()))
    if pa.types.is_boolean(t):
        return _int64_values(pc.cast(arr, pa.int64()))
    if pa.types.is_floating(t):
        return _float_bits(arr)
    if pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_timestamp(t):
        return _temporal_micros(arr)
    return None


def _normalise_array(arr: pa.Array, column: str) -> pa.Array:
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.null_count:
        raise SchemaError(f"primary key column {column!r} holds nulls", column=column)
    return arr


def _hash_array(arr: pa.Array, column: str, seed: U32) -> U32:
    arr = _normalise_array(arr, column)
    as_int = _canonical_int64(arr)
    if as_int is not None:
        return _murmur3_int64(as_int, seed)
    t = arr.type
    if pa.types.is_decimal(t):
        return _hash_decimal(arr, seed)
    if pa.types.is_fixed_size_binary(t):
        return _hash_fixed_binary(arr, seed)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    ):
        return _hash_varlen(arr, seed)
    raise SchemaError(f"primary key column {column!r} has unsupported type {t}", column=column)


def _key_column(data: pa.Table | pa.RecordBatch, column: str) -> pa.Array:
    if column not in data.schema.names:
        raise SchemaError(f"primary key column {column!r} is missing", column=column)
    col = data.column(column)
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def key_hashes(data: pa.Table | pa.RecordBatch, primary_key: Sequence[str]) -> U32:
    """The 32-bit key hash of every row (see the module docstring), as unsigned numbers."""
    if not primary_key:
        raise SchemaError("a primary key needs at least one column")
    h = np.zeros(data.num_rows, dtype=np.uint32)
    for column in primary_key:
        h = _hash_array(_key_column(data, column), column, h)
    return h


def bucket_ids(
    data: pa.Table | pa.RecordBatch, primary_key: Sequence[str], num_buckets: int
) -> pa.Int32Array:
    """The bucket in ``[0, num_buckets)`` of every row: ``(hash & 0x7FFFFFFF) % num_buckets``."""
    if num_buckets <= 0:
        raise ValueError(f"num_buckets must be positive, got {num_buckets}")
    h = key_hashes(data, primary_key)
    buckets = (h & np.uint32(0x7FFFFFFF)) % np.uint32(num_buckets)
    return pa.array(buckets.astype(np.int32), type=pa.int32())


def split_by_bucket(
    table: pa.Table, primary_key: Sequence[str], num_buckets: int
) -> dict[int, pa.Table]:
    """Group the rows of ``table`` by bucket (row order kept within a bucket); empty ones left out.

    The writer of a CDC table calls this once per batch, then writes one file per bucket.
    """
    buckets = np.asarray(bucket_ids(table, primary_key, num_buckets).to_numpy(), np.int32)
    order = np.argsort(buckets, kind="stable")
    grouped = table.take(pa.array(order))
    counts = np.bincount(buckets, minlength=num_buckets)
    ends = np.cumsum(counts)
    return {
        int(b): grouped.slice(int(ends[b] - counts[b]), int(counts[b]))
        for b in np.nonzero(counts)[0]
    }
