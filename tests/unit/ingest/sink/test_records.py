"""Spark's Kafka rows as the decoder's chunks (``source.reader: spark``), and the batch's end
offsets read from Spark's offset log, not from the records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.sink.records import OffsetLogUnreadable, batch_end_offsets, chunks_of_records

ROWS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.timestamp("us", tz="UTC")),
])  # fmt: skip


def _batch(rows: list[tuple[str, int, int, bytes | None, bytes | None, int]]) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    stamps = [datetime.fromtimestamp(ms / 1000, tz=UTC) for ms in columns[5]]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip([*columns[:5], stamps], ROWS, strict=True)],
        schema=ROWS,
    )


def test_one_partitions_rows_make_one_chunk_with_contiguous_offsets_as_a_range() -> None:
    batch = _batch(
        [("t", 1, 5 + i, b"k%d" % i, b"v%d" % i, 1_700_000_000_123 + i) for i in range(4)]
    )

    [chunk] = chunks_of_records(batch)

    assert (chunk.topic, chunk.partition, chunk.offsets) == ("t", 1, range(5, 9))
    assert list(chunk.values) == [b"v0", b"v1", b"v2", b"v3"]
    assert chunk.keys[2] == b"k2" and list(chunk.keys[1:3]) == [b"k1", b"k2"]
    assert chunk.timestamps_ms[-1] == 1_700_000_000_126
    assert chunk.record(0).timestamp_ms == 1_700_000_000_123


def test_gaps_keep_their_offsets_and_each_partition_run_is_a_chunk() -> None:
    # a transaction's marker left a gap at offset 2; a second partition follows
    batch = _batch([
        ("t", 0, 0, None, b"a", 1), ("t", 0, 1, None, b"b", 2), ("t", 0, 3, None, None, 3),
        ("t", 1, 0, b"x", b"c", 4), ("u", 1, 9, b"y", b"d", 5),
    ])  # fmt: skip

    chunks = chunks_of_records(batch)

    assert [(c.topic, c.partition, list(c.offsets)) for c in chunks] == [
        ("t", 0, [0, 1, 3]),
        ("t", 1, [0]),
        ("u", 1, [9]),
    ]
    assert chunks[0].values[2] is None and chunks[0].keys[0] is None  # a tombstone, no key
    assert chunks_of_records(batch.slice(0, 0)) == []


def _offset_log(checkpoint: Path, batch_id: int, body: str) -> None:
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    (offsets / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{body}\n')


def test_a_batch_ends_where_sparks_offset_log_says(tmp_path: Path) -> None:
    _offset_log(tmp_path, 3, json.dumps({"b": {"1": 40, "0": 17}, "a": {"0": 5}}))

    assert batch_end_offsets(tmp_path, 3) == {"a": {"0": 5}, "b": {"0": 17, "1": 40}}


@pytest.mark.parametrize("body", [None, "not json", "[1]"])
def test_a_batch_without_a_readable_offset_log_cannot_commit(
    tmp_path: Path, body: str | None
) -> None:
    if body is not None:
        _offset_log(tmp_path, 0, body)
    with pytest.raises(OffsetLogUnreadable, match="offsets/0"):
        batch_end_offsets(tmp_path, 0)
