"""The bucket hash: golden values, an independent reference implementation, refusals."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
import uuid

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.errors import SchemaError
from catalog.files.bucketing import bucket_ids, key_hashes, split_by_bucket

MASK32 = 0xFFFFFFFF


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """Reference MurmurHash3 x86 32-bit, written straight from the published algorithm."""
    c1, c2 = 0xCC9E2D51, 0x1B873593

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & MASK32

    h = seed & MASK32
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = rotl((k * c1) & MASK32, 15) * c2 & MASK32
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & MASK32
    tail = int.from_bytes(data[whole:], "little")
    if len(data) % 4:
        h ^= rotl((tail * c1) & MASK32, 15) * c2 & MASK32
    h ^= len(data)
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & MASK32
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & MASK32
    return h ^ (h >> 16)


def signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


def long_bytes(v: int) -> bytes:
    return struct.pack("<q", v)


def one_hash(array: pa.Array) -> int:
    return signed(int(key_hashes(pa.table({"k": array}), ["k"])[0]))


# Golden values of Iceberg's spec (Appendix B): a single-column key hashes exactly as Iceberg.
ICEBERG_GOLDEN = [
    (pa.array([34], pa.int32()), 2017239379),
    (pa.array([34], pa.int64()), 2017239379),
    (pa.array([decimal.Decimal("14.20")], pa.decimal128(9, 2)), -500754589),
    (pa.array([dt.date(2017, 11, 16)], pa.date32()), -653330422),
    (pa.array([dt.time(22, 31, 8)], pa.time64("us")), -662762989),
    (pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us")), -2047944441),
    (
        pa.array(
            [dt.datetime(2017, 11, 16, 22, 31, 8, tzinfo=dt.UTC)],
            pa.timestamp("us", tz="America/Los_Angeles"),
        ),
        -2047944441,
    ),
    (pa.array(["iceberg"]), 1210000089),
    (
        pa.array([uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7").bytes], pa.binary(16)),
        1488055340,
    ),
    (pa.array([b"\x00\x01\x02\x03"], pa.binary()), -188683207),
]


@pytest.mark.parametrize(("array", "expected"), ICEBERG_GOLDEN, ids=lambda v: str(v)[:30])
def test_iceberg_spec_golden_hashes(array: pa.Array, expected: int) -> None:
    assert one_hash(array) == expected


def test_golden_buckets_of_integer_keys() -> None:
    keys = pa.table({"id": pa.array([0, 1, 2, 3, 42, -1, 2**40, -(2**63)], pa.int64())})
    assert bucket_ids(keys, ["id"], 16).to_pylist() == [12, 4, 4, 3, 14, 8, 2, 5]
    assert bucket_ids(keys, ["id"], 7).to_pylist() == [1, 5, 2, 1, 3, 5, 6, 4]


def test_golden_buckets_of_string_keys() -> None:
    keys = pa.table(
        {"k": ["", "a", "iceberg", "customer-000000001", "Zürich", "日本語", "x" * 100]}
    )
    assert bucket_ids(keys, ["k"], 16).to_pylist() == [0, 2, 9, 1, 1, 7, 2]


def test_golden_buckets_of_composite_keys() -> None:
    keys = pa.table({"tenant": ["acme", "acme", "globex"], "id": [1, 2, 1]})
    assert bucket_ids(keys, ["tenant", "id"], 8).to_pylist() == [3, 7, 6]


def test_composite_key_chains_the_seed() -> None:
    keys = pa.table({"tenant": ["acme"], "id": [7]})
    first = murmur3_32(b"acme")
    expected = murmur3_32(long_bytes(7), seed=first)
    assert int(key_hashes(keys, ["tenant", "id"])[0]) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=50), st.integers(0, 5))
def test_strings_match_the_reference(values: list[str], offset: int) -> None:
    array = pa.array([""] * offset + values).slice(offset)
    hashes = key_hashes(pa.table({"k": array}), ["k"])
    assert [int(h) for h in hashes] == [murmur3_32(v.encode()) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=70), min_size=1, max_size=50))
def test_binaries_match_the_reference(values: list[bytes]) -> None:
    for kind in (pa.binary(), pa.large_binary()):
        hashes = key_hashes(pa.table({"k": pa.array(values, kind)}), ["k"])
        assert [int(h) for h in hashes] == [murmur3_32(v) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=50))
def test_int64_match_the_reference(values: list[int]) -> None:
    hashes = key_hashes(pa.table({"k": pa.array(values, pa.int64())}), ["k"])
    assert [int(h) for h in hashes] == [murmur3_32(long_bytes(v)) for v in values]


def _min_big_endian(unscaled: int) -> bytes:
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return unscaled.to_bytes(length, "big", signed=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(10**38) + 1, 10**38 - 1), min_size=1, max_size=50))
def test_decimals_match_the_reference(unscaled: list[int]) -> None:
    values = [decimal.Decimal(u).scaleb(-4, decimal.Context(prec=60)) for u in unscaled]
    for kind in (pa.decimal128(38, 4), pa.decimal256(40, 4)):
        hashes = key_hashes(pa.table({"k": pa.array(values, kind)}), ["k"])
        assert [int(h) for h in hashes] == [murmur3_32(_min_big_endian(u)) for u in unscaled]


def test_representations_of_the_same_value_share_a_bucket() -> None:
    same = [
        [pa.array([5], pa.int8()), pa.array([5], pa.int32()), pa.array([5], pa.uint16())],
        [pa.array(["k"]), pa.array(["k"], pa.large_string()), pa.array(["k"], pa.string_view())],
        [pa.array(["k"]).dictionary_encode(), pa.array(["k"])],
        [pa.array([1_000_000], pa.timestamp("us")), pa.array([1_000], pa.timestamp("ms"))],
        [pa.array([1_000_000_123], pa.timestamp("ns")), pa.array([1_000_000], pa.timestamp("us"))],
        [
            pa.array([dt.date(2020, 1, 2)], pa.date32()),
            pa.array([dt.date(2020, 1, 2)], pa.date64()),
        ],
        [pa.array([True]), pa.array([1], pa.int64())],
        [pa.array([-0.0]), pa.array([0.0], pa.float32())],
        [
            pa.array([decimal.Decimal("1.5")], pa.decimal32(5, 1)),
            pa.array([decimal.Decimal("1.5")], pa.decimal128(20, 1)),
        ],
    ]
    for group in same:
        assert len({one_hash(a) for a in group}) == 1, group


def test_chunked_and_sliced_columns_hash_like_contiguous_ones() -> None:
    values = [f"key-{i}" for i in range(100)]
    chunked = pa.table({"k": pa.chunked_array([values[:33], values[33:]])})
    contiguous = pa.table({"k": values})
    assert list(key_hashes(chunked, ["k"])) == list(key_hashes(contiguous, ["k"]))
    sliced = pa.table({"k": pa.array(values).slice(10, 20)})
    assert list(key_hashes(sliced, ["k"])) == list(key_hashes(contiguous, ["k"]))[10:30]


def test_null_keys_are_refused() -> None:
    with pytest.raises(SchemaError) as err:
        key_hashes(pa.table({"id": [1, None]}), ["id"])
    assert err.value.column == "id"


def test_unsupported_key_types_and_missing_columns_are_refused() -> None:
    with pytest.raises(SchemaError):
        key_hashes(pa.table({"k": pa.array([[1]])}), ["k"])
    with pytest.raises(SchemaError):
        key_hashes(pa.table({"k": [1]}), ["nope"])
    with pytest.raises(SchemaError):
        key_hashes(pa.table({"k": [1]}), [])
    with pytest.raises(ValueError, match="num_buckets"):
        bucket_ids(pa.table({"k": [1]}), ["k"], 0)


def test_buckets_are_in_range_and_spread() -> None:
    table = pa.table({"id": pa.array(range(10_000), pa.int64())})
    buckets = bucket_ids(table, ["id"], 16).to_pylist()
    assert min(buckets) >= 0
    assert max(buckets) < 16
    counts = [buckets.count(b) for b in range(16)]
    assert min(counts) > 500  # 625 expected per bucket


def test_split_by_bucket_partitions_the_rows() -> None:
    table = pa.table({"id": list(range(1000)), "v": [str(i) for i in range(1000)]})
    parts = split_by_bucket(table, ["id"], 8)
    assert sum(p.num_rows for p in parts.values()) == 1000
    for bucket, part in parts.items():
        assert set(bucket_ids(part, ["id"], 8).to_pylist()) == {bucket}
        ids = part.column("id").to_pylist()
        assert ids == sorted(ids)  # input order kept within a bucket


def test_record_batches_hash_like_tables() -> None:
    """Spark's mapInArrow hands over RecordBatches: the same function, the same buckets."""
    table = pa.table({"tenant": ["a", "b", "c"], "id": [1, 2, 3]})
    batch = table.to_batches()[0]
    assert bucket_ids(batch, ["tenant", "id"], 5).equals(bucket_ids(table, ["tenant", "id"], 5))
