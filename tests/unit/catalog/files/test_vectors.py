"""Deletion vector bytes: Iceberg's deletion-vector-v1 blob around a portable Roaring64 bitmap,
kept inline or in a Puffin vector file, compatible with what Delta and Iceberg write."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap64

from catalog.files.storage import storage_for
from catalog.files.vectors import (
    MAGIC,
    MAX_POSITION,
    VectorConfigError,
    VectorFormatError,
    VectorsNotReadableError,
    decode_vector,
    encode_vector,
    entry_paths,
    inline_max_bytes,
    load_vector,
    read_puffin_blobs,
    refuse_vectors,
    store_vectors,
    vector_positions,
)
from catalog.manifest import FileManifest
from catalog.model import DataFile, VectorRef

# Delta's PROTOCOL.md, "Deletion Vector Descriptor Schema", JSON Example 3 - Inline: a vector of
# sizeInBytes 40 and cardinality 6 whose "row indexes encoded in this DV are: 3, 4, 7, 11, 18, 29"
DELTA_INLINE_EXAMPLE = "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"
DELTA_EXAMPLE_ROWS = [3, 4, 7, 11, 18, 29]
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85_decode(text: str) -> bytes:
    """Z85 (ZeroMQ RFC 32), the encoding of Delta's inline vectors."""
    out = bytearray()
    for at in range(0, len(text), 5):
        value = 0
        for char in text[at : at + 5]:
            value = value * 85 + Z85.index(char)
        out += value.to_bytes(4, "big")
    return bytes(out)


POSITIONS = st.sets(
    st.one_of(
        st.integers(0, 70_000),  # several 16-bit containers of the first 32-bit bitmap
        st.integers(0, MAX_POSITION),  # positions past 2**32: more than one 32-bit bitmap
    ),
    max_size=200,
)


@given(POSITIONS)
def test_a_blob_gives_back_the_positions_it_was_made_of(positions):
    blob = encode_vector(positions)
    bitmap = decode_vector(blob)
    assert set(bitmap) == positions
    assert vector_positions(bitmap).tolist() == sorted(positions)
    assert int.from_bytes(blob[:4], "big") == len(blob) - 8 and blob[4:8] == MAGIC


@given(st.integers(0, 10_000_000), st.integers(1, 200_000))
def test_a_range_of_deleted_rows_is_stored_as_a_run(start, count):
    blob = encode_vector(range(start, start + count))
    assert len(blob) <= 128  # one run container per 65,536 rows, however many are marked
    assert decode_vector(blob) == BitMap64(range(start, start + count))


def test_delta_inline_example_holds_the_same_32_bit_bitmap_as_our_blob():
    """Byte compatibility with Delta's documented inline vector.

    The example is written in Delta's older "native" RoaringBitmapArray layout with a
    big-endian header (magic 1681511376, a bitmap count, then each 32-bit bitmap with its size)
    rather than the portable layout Delta's writers use today (magic 1681511377 little-endian,
    then Roaring64: a u64 count and each bitmap with its u32 key), which is our blob's body.
    Both hold the same portable 32-bit Roaring bitmap byte for byte.
    """
    example = z85_decode(DELTA_INLINE_EXAMPLE)
    assert len(example) == 40  # its sizeInBytes
    assert int.from_bytes(example[0:4], "big") == 1681511376  # native magic
    assert int.from_bytes(example[4:8], "big") == 1  # one 32-bit bitmap
    size = int.from_bytes(example[8:12], "big")
    delta_bitmap = example[12 : 12 + size]
    assert len(example) == 12 + size

    blob = encode_vector(DELTA_EXAMPLE_ROWS)
    body = blob[4:-4]
    assert body[:4] == (1681511377).to_bytes(4, "little")  # Delta's portable magic
    assert int.from_bytes(body[4:12], "little") == 1 and int.from_bytes(body[12:16], "little") == 0
    assert body[16:] == delta_bitmap
    # so the example's bitmap, framed as our blob, decodes to the rows Delta's protocol states
    ours = MAGIC + (1).to_bytes(8, "little") + (0).to_bytes(4, "little") + delta_bitmap
    framed = len(ours).to_bytes(4, "big") + ours + zlib.crc32(ours).to_bytes(4, "big")
    assert framed == blob
    assert list(decode_vector(framed)) == DELTA_EXAMPLE_ROWS


def test_the_blob_is_icebergs_deletion_vector_layout():
    blob = encode_vector([1, 2**32 + 5])
    roaring = blob[8:-4]
    assert int.from_bytes(roaring[:8], "little") == 2  # two 32-bit bitmaps, keys 0 and 1
    assert roaring == BitMap64([1, 2**32 + 5]).serialize()
    assert int.from_bytes(blob[-4:], "big") == zlib.crc32(blob[4:-4])


@pytest.mark.parametrize("at", [9, 20, -5])
def test_a_corrupt_byte_fails_the_crc(at):
    blob = bytearray(encode_vector(range(0, 1000, 3)))
    blob[at] ^= 0x01
    with pytest.raises(VectorFormatError, match="CRC-32 mismatch"):
        decode_vector(bytes(blob))


def test_a_wrong_magic_is_refused_before_anything_is_read():
    blob = bytearray(encode_vector([1, 2, 3]))
    blob[4:8] = (1681511376).to_bytes(4, "big")  # Delta's native magic is not ours
    with pytest.raises(VectorFormatError, match="not a deletion vector: magic 64 39 d3 d0"):
        decode_vector(bytes(blob), location="data/dv-x.puffin@4")


def test_a_truncated_blob_is_refused_by_its_length():
    blob = encode_vector(range(100))
    with pytest.raises(VectorFormatError, match="length field"):
        decode_vector(blob[:-1])
    with pytest.raises(VectorFormatError, match="too short"):
        decode_vector(blob[:10])


def test_positions_outside_the_64_bit_range_are_refused():
    with pytest.raises(ValueError, match="2\\*\\*63"):
        encode_vector([-1])
    with pytest.raises(ValueError, match="past"):
        encode_vector([2**63])


def test_small_vectors_go_inline_and_large_ones_into_one_vector_file(tmp_path: Path):
    storage = storage_for(tmp_path)
    scattered = list(range(0, 200_000, 7))  # no runs: a few kB
    refs = store_vectors(
        storage,
        {"data/a.parquet": [1, 5], "data/b.parquet": scattered, "data/c.parquet": [0, 9, 99]},
        partition=[("region", "eu")],
        bucket=3,
    )

    assert refs["data/a.parquet"].inline is not None and refs["data/a.parquet"].cardinality == 2
    assert refs["data/c.parquet"].inline is not None
    big = refs["data/b.parquet"]
    assert big.inline is None and big.cardinality == len(scattered)
    assert big.path is not None and big.path.startswith("data/region=eu/bucket-0003/dv-")
    assert big.path.endswith(".puffin")
    assert [f.path for f in storage.list_files()] == [big.path]  # no temporary left behind
    for name, positions in [("data/a.parquet", [1, 5]), ("data/b.parquet", scattered)]:
        assert vector_positions(load_vector(storage, refs[name])).tolist() == positions


def test_a_vector_file_is_a_puffin_file_naming_each_blobs_data_file(tmp_path: Path):
    storage = storage_for(tmp_path)
    vectors = {"data/x.parquet": range(0, 50_000, 3), "data/y.parquet": range(1, 50_000, 5)}
    refs = store_vectors(storage, vectors, inline_max=0)
    path = refs["data/x.parquet"].path
    assert path is not None and refs["data/y.parquet"].path == path

    data = (tmp_path / path).read_bytes()
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1" and data[-8:-4] == bytes(4)
    footer_size = int.from_bytes(data[-12:-8], "little")
    footer = json.loads(data[-12 - footer_size : -12])
    assert [b["properties"]["referenced-data-file"] for b in footer["blobs"]] == list(vectors)
    for described in footer["blobs"]:
        assert described["type"] == "deletion-vector-v1" and described["fields"] == []
        assert described["snapshot-id"] == -1 and described["sequence-number"] == -1
        assert "compression-codec" not in described
    blobs = read_puffin_blobs(storage, path)
    for blob, (name, positions) in zip(blobs, vectors.items(), strict=True):
        ref = refs[name]
        assert (blob.offset, blob.length, blob.cardinality) == (
            ref.offset,
            ref.length,
            len(positions),
        )
        raw = data[blob.offset : blob.offset + blob.length]
        assert list(decode_vector(raw)) == list(positions)


def test_a_vector_whose_cardinality_differs_from_the_catalogs_is_refused(tmp_path: Path):
    storage = storage_for(tmp_path)
    ref = store_vectors(storage, {"data/a.parquet": [1, 2, 3]})["data/a.parquet"]
    wrong = ref.model_copy(update={"cardinality": 4})
    with pytest.raises(VectorFormatError, match="catalog records 4"):
        load_vector(storage, wrong)


def test_a_file_that_is_not_puffin_is_refused(tmp_path: Path):
    (tmp_path / "dv.puffin").write_bytes(b"PAR1" + bytes(40) + b"PAR1")
    with pytest.raises(VectorFormatError, match="not a Puffin file"):
        read_puffin_blobs(storage_for(tmp_path), "dv.puffin")


def test_the_inline_cap_comes_from_the_table_property():
    assert inline_max_bytes({}) == 1024
    assert inline_max_bytes({"vectors.inline-max-bytes": "0"}) == 0
    for bad in ("-1", "1k", ""):
        with pytest.raises(VectorConfigError, match=r"vectors\.inline-max-bytes"):
            inline_max_bytes({"vectors.inline-max-bytes": bad})


def test_a_vector_ref_is_inline_or_a_file_range_never_both():
    VectorRef(cardinality=1, inline="AA==")
    VectorRef(cardinality=1, path="data/dv.puffin", offset=4, length=30)
    with pytest.raises(ValueError, match="not both"):
        VectorRef(cardinality=1, inline="AA==", path="data/dv.puffin", offset=4, length=30)
    with pytest.raises(ValueError, match="path, offset and length"):
        VectorRef(cardinality=1, path="data/dv.puffin")
    with pytest.raises(ValueError, match="relative"):
        VectorRef(cardinality=1, path="/abs/dv.puffin", offset=4, length=30)


def test_entries_without_vectors_serialise_as_before():
    plain = DataFile(path="a.parquet", size_bytes=1, row_count=2)
    assert plain.model_dump_json() == (
        '{"path":"a.parquet","size_bytes":1,"row_count":2,"schema_id":0,"stats":{}}'
    )
    assert plain.paths == ("a.parquet",)
    ref = VectorRef(cardinality=2, path="data/dv.puffin", offset=4, length=30)
    marked = plain.model_copy(update={"vector": ref, "resolved": True})
    assert DataFile.model_validate_json(marked.model_dump_json()) == marked
    assert marked.paths == ("a.parquet", "data/dv.puffin")
    stored = json.loads(marked.model_dump_json())
    assert stored["vector"] == {
        "cardinality": 2,
        "path": "data/dv.puffin",
        "offset": 4,
        "length": 30,
    }
    assert entry_paths(stored) == ["a.parquet", "data/dv.puffin"]
    inline = VectorRef(cardinality=2, inline=base64.b64encode(encode_vector([1, 2])).decode())
    assert entry_paths(
        json.loads(plain.model_copy(update={"vector": inline}).model_dump_json())
    ) == ["a.parquet"]


def test_a_plan_with_a_vectored_file_is_refused_naming_the_file():
    plain = FileManifest.of([DataFile(path="a.parquet", size_bytes=1, row_count=2)])
    ref = VectorRef(cardinality=1, inline="AA==")
    marked = FileManifest.of(
        [
            DataFile(path="b.parquet", size_bytes=1, row_count=2),
            DataFile(path="c.parquet", size_bytes=1, row_count=2, vector=ref),
        ]
    )
    refuse_vectors("logs.t", [("p=1", plain), ("p=2", plain)])  # nothing to refuse
    refuse_vectors("logs.t", [])
    with pytest.raises(VectorsNotReadableError, match=r"'c\.parquet' of partition 'p=2'") as raised:
        refuse_vectors("logs.t", [("p=1", plain), ("p=2", marked)])
    assert (raised.value.table, raised.value.partition, raised.value.path) == (
        "logs.t",
        "p=2",
        "c.parquet",
    )


def test_positions_mask_a_batch_by_searchsorted():
    """How readers will use them (design D6): positions of a batch's range, as a mask."""
    bitmap = decode_vector(encode_vector([2, 5, 130, 131]))
    positions = vector_positions(bitmap)
    first, rows = 128, pa.array(range(128, 256))
    lo, hi = np.searchsorted(positions, [first, first + len(rows)])
    keep = np.ones(len(rows), bool)
    keep[(positions[lo:hi] - first).astype(np.int64)] = False
    assert rows.filter(pa.array(keep))[:3].to_pylist() == [128, 129, 132]
