"""Writing data files: round trips, statistics, layout, splitting, crash safety, merge runs."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from catalog.errors import SchemaError
from catalog.files import writer as writer_module
from catalog.files.layout import new_data_file_path, partition_path
from catalog.files.stats import STRING_STAT_CHARS, decode_stat
from catalog.files.writer import (
    WriteOptions,
    prepare_merge_run,
    write_data_file,
    write_data_files,
)
from catalog.model import ROW_KIND_COLUMN, ColumnStats, DataFile

UTC = dt.UTC


def every_type_table() -> pa.Table:
    return pa.table(
        {
            "b": pa.array([True, False, None]),
            "i8": pa.array([-8, 7, None], pa.int8()),
            "i32": pa.array([-(2**31), 5, 2**31 - 1], pa.int32()),
            "i64": pa.array([-(2**63), 0, 2**63 - 1], pa.int64()),
            "u64": pa.array([0, 2**64 - 1, None], pa.uint64()),
            "f32": pa.array([1.5, -2.25, None], pa.float32()),
            "f64": pa.array([0.1, float("nan"), -1e300]),
            "dec": pa.array(
                [decimal.Decimal("-12.30"), decimal.Decimal("99999.99"), None], pa.decimal128(7, 2)
            ),
            "s": pa.array(["b", "a", "ü"]),
            "ls": pa.array(["x", None, "y"], pa.large_string()),
            "d": pa.array([dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)]),
            "t": pa.array([dt.time(0, 0), dt.time(23, 59, 59, 999999), None], pa.time64("us")),
            "ts_ms": pa.array(
                [dt.datetime(1969, 12, 31, 23, 59, 59, 999000), dt.datetime(2024, 1, 1), None],
                pa.timestamp("ms"),
            ),
            "ts_ns": pa.array([-1, 1, 1_700_000_000_123_456_789], pa.timestamp("ns", tz="UTC")),
            "ts_tz": pa.array(
                [dt.datetime(2024, 5, 1, 12, tzinfo=UTC), None, None],
                pa.timestamp("us", tz="Europe/Paris"),
            ),
            "bin": pa.array([b"\x00", b"\xff", None]),
            "lst": pa.array([[1], [], None], pa.list_(pa.int64())),
            "st": pa.array([{"a": 1}, {"a": 2}, None], pa.struct([("a", pa.int64())])),
        }
    )


EXPECTED_STATS = {
    "b": ColumnStats(min=False, max=True, null_count=1),
    "i8": ColumnStats(min=-8, max=7, null_count=1),
    "i32": ColumnStats(min=-(2**31), max=2**31 - 1),
    "i64": ColumnStats(min=-(2**63), max=2**63 - 1),
    "u64": ColumnStats(min=0, max=2**64 - 1, null_count=1),
    "f32": ColumnStats(min=-2.25, max=1.5, null_count=1),
    "f64": ColumnStats(min=-1e300, max=0.1),
    "dec": ColumnStats(min="-12.30", max="99999.99", null_count=1),
    "s": ColumnStats(min="a", max="ü"),
    "ls": ColumnStats(min="x", max="y", null_count=1),
    "d": ColumnStats(min="0001-01-01", max="9999-12-31"),
    "t": ColumnStats(min="00:00:00.000000", max="23:59:59.999999", null_count=1),
    "ts_ms": ColumnStats(
        min="1969-12-31T23:59:59.999", max="2024-01-01T00:00:00.000", null_count=1
    ),
    "ts_ns": ColumnStats(
        min="1969-12-31T23:59:59.999999999Z", max="2023-11-14T22:13:20.123456789Z"
    ),
    "ts_tz": ColumnStats(
        min="2024-05-01T12:00:00.000000Z", max="2024-05-01T12:00:00.000000Z", null_count=2
    ),
    "bin": ColumnStats(null_count=1),
    "lst": ColumnStats(null_count=1),
    "st": ColumnStats(null_count=1),
}


def test_round_trip_keeps_data_and_describes_the_file(tmp_path: Path) -> None:
    table = every_type_table()
    file = write_data_file(
        table, tmp_path, partition=[("day", "2024-01-01")], bucket=2, schema_id=3
    )
    path = tmp_path / file.path
    assert file.path.startswith("data/day=2024-01-01/bucket-0002/part-")
    assert file.size_bytes == path.stat().st_size
    assert file.row_count == 3
    assert file.schema_id == 3
    read = pq.read_table(path)
    assert read.schema.remove_metadata().equals(table.schema)
    exact = ["f64", "ts_ns"]  # NaN != NaN; nanoseconds do not fit Python datetimes
    assert read.drop_columns(exact).to_pylist() == table.drop_columns(exact).to_pylist()
    for name in exact:
        assert str(read.column(name)) == str(table.column(name))
    assert read.schema.metadata[b"lakestream.schema_id"] == b"3"
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
    assert file.stats == EXPECTED_STATS


@pytest.mark.parametrize("column", [c for c, s in EXPECTED_STATS.items() if s.min is not None])
def test_stats_decode_to_the_column_bounds(column: str) -> None:
    table = every_type_table()
    stats = EXPECTED_STATS[column]
    arrow_type = table.schema.field(column).type
    data = table.column(column)
    if pa.types.is_floating(arrow_type):
        data = pc.filter(data, pc.invert(pc.is_nan(data)))
    bounds = pc.min_max(data)
    assert decode_stat(stats.min, arrow_type).equals(bounds["min"])
    assert decode_stat(stats.max, arrow_type).equals(bounds["max"])


def test_stats_survive_json(tmp_path: Path) -> None:
    file = write_data_file(every_type_table(), tmp_path)
    assert DataFile.model_validate_json(file.model_dump_json()) == file


def test_float_stats_never_hold_nan_or_infinity() -> None:
    from catalog.files.stats import column_stats

    stats = column_stats(pa.table({"x": [float("nan"), float("inf")], "y": [float("nan")] * 2}))
    assert stats["x"].min is None
    assert stats["x"].max is None
    assert stats["y"] == ColumnStats()


def test_long_string_stats_are_truncated_but_still_bound_the_values() -> None:
    from catalog.files.stats import column_stats

    low, high = "a" * 100, "m" * 70 + "z"
    stats = column_stats(pa.table({"s": [low, high]}))["s"]
    assert isinstance(stats.min, str)
    assert isinstance(stats.max, str)
    assert len(stats.min) <= STRING_STAT_CHARS
    assert len(stats.max) <= STRING_STAT_CHARS
    assert stats.min <= low
    assert stats.max >= high


def test_only_string_and_binary_columns_are_dictionary_encoded(tmp_path: Path) -> None:
    rows = 1000
    data = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "qty": pa.array([i % 3 for i in range(rows)], pa.int32()),
            "status": pa.array(["new", "paid"] * (rows // 2)),
            "blob": pa.array([b"x", b"y"] * (rows // 2), pa.large_binary()),
            "address": pa.array(
                [{"city": "Oslo", "zip": i % 2} for i in range(rows)],
                pa.struct([("city", pa.string()), ("zip", pa.int32())]),
            ),
            "tags": pa.array([["a", "b"]] * rows, pa.list_(pa.string())),
            "attrs": pa.array([[("k", 1)]] * rows, pa.map_(pa.string(), pa.int64())),
        }
    )
    file = write_data_file(data, tmp_path, options=WriteOptions(fsync=False))
    footer = pq.read_metadata(tmp_path / file.path)
    chunks = [footer.row_group(0).column(i) for i in range(footer.num_columns)]
    with_dictionary = {c.path_in_schema for c in chunks if c.has_dictionary_page}
    assert with_dictionary == {
        "status",
        "blob",
        "address.city",
        "tags.list.element",
        "attrs.key_value.key",
    }
    assert pq.read_table(tmp_path / file.path).equals(data)


def test_partition_paths_are_safe_for_any_value() -> None:
    nasty = ["../../etc", "a/b", "x=y", "%41", " ", "", "日本", "..", None]
    path = partition_path([(f"c{i}", v) for i, v in enumerate(nasty)])
    segments = path.split("/")
    assert len(segments) == len(nasty)
    assert all(s.count("=") == 1 and s not in (".", "..") for s in segments)
    assert segments[0] == "c0=..%2F..%2Fetc"
    assert segments[-1] == "c8=__null__"
    long_path = partition_path([("p", "é" * 500)])
    assert len(long_path) <= 200
    relative = new_data_file_path([("p", "/abs")], 12)
    assert DataFile(path=relative, size_bytes=0, row_count=0).path == relative
    assert "/bucket-0012/" in relative


def test_append_tables_have_no_bucket_folder() -> None:
    path = new_data_file_path((), -1)
    assert path.startswith("data/part-")
    assert path.endswith(".parquet")


def test_splitter_cuts_files_near_the_target(tmp_path: Path) -> None:
    table = pa.table({"id": range(200_000), "s": [f"value-{i % 977}-{i}" for i in range(200_000)]})
    options = WriteOptions(row_group_rows=10_000, target_file_bytes=256 * 1024, fsync=False)
    files = write_data_files(table, tmp_path, options=options)
    assert len(files) > 3
    assert sum(f.row_count for f in files) == table.num_rows
    for file in files[:-1]:
        assert options.target_file_bytes <= file.size_bytes < 2 * options.target_file_bytes
    parts = [pq.read_table(tmp_path / f.path) for f in files]
    assert pa.concat_tables(parts).select(["id", "s"]).equals(table)
    assert files[1].stats["id"].min == files[0].stats["id"].max + 1  # type: ignore[operator]


def test_splitter_writes_nothing_for_empty_input(tmp_path: Path) -> None:
    assert write_data_files(pa.table({"id": pa.array([], pa.int64())}), tmp_path) == []


def test_a_failed_write_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(pa.ArrowException):
        write_data_file(pa.table({"id": [1]}), tmp_path, options=WriteOptions(compression="nope"))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_split_write_failing_late_removes_the_files_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_commit = writer_module._FileSink.commit
    commits = []

    def commit_then_fail_on_the_third(sink: writer_module._FileSink) -> int:
        commits.append(sink.relative)
        if len(commits) == 3:
            raise OSError("disk full")
        return real_commit(sink)

    monkeypatch.setattr(writer_module._FileSink, "commit", commit_then_fail_on_the_third)
    options = WriteOptions(row_group_rows=100, target_file_bytes=1, fsync=False)
    with pytest.raises(OSError, match="disk full"):
        write_data_files(pa.table({"id": range(1000)}), tmp_path, options=options)
    assert len(commits) == 3
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_no_temporary_file_is_left_after_a_write(tmp_path: Path) -> None:
    write_data_files(pa.table({"id": range(10)}), tmp_path)
    names = [p.name for p in tmp_path.rglob("*") if p.is_file()]
    assert len(names) == 1
    assert names[0].startswith("part-")


def test_merge_run_keeps_the_last_change_per_key_sorted() -> None:
    batch = pa.table(
        {
            "id": [3, 1, 2, 1, 3],
            "v": ["c", "a", "b", "a2", "c2"],
            ROW_KIND_COLUMN: pa.array([0, 0, 0, 0, 1], pa.int8()),
        }
    )
    run = prepare_merge_run(batch, ["id"])
    assert run.to_pylist() == [
        {"id": 1, "v": "a2", ROW_KIND_COLUMN: 0},
        {"id": 2, "v": "b", ROW_KIND_COLUMN: 0},
        {"id": 3, "v": "c2", ROW_KIND_COLUMN: 1},
    ]


def test_merge_run_adds_the_row_kind_column() -> None:
    run = prepare_merge_run(pa.table({"k": ["b", "a"]}), ["k"])
    assert run.schema.field(ROW_KIND_COLUMN).type == pa.int8()
    assert run.to_pylist() == [{"k": "a", ROW_KIND_COLUMN: 0}, {"k": "b", ROW_KIND_COLUMN: 0}]


def test_merge_run_with_a_sequence_keeps_the_highest_sequence() -> None:
    batch = pa.table(
        {
            "t": ["x", "x", "x", "y"],
            "id": [1, 1, 1, 1],
            "lsn": [5, 9, 7, 1],
            "v": ["five", "nine", "seven", "y1"],
        }
    )
    run = prepare_merge_run(batch, ["t", "id"], sequence_column="lsn")
    assert run.select(["t", "v"]).to_pylist() == [{"t": "x", "v": "nine"}, {"t": "y", "v": "y1"}]


def test_merge_run_sequence_ties_go_to_the_later_row() -> None:
    batch = pa.table({"id": [1, 1], "lsn": [4, 4], "v": ["first", "second"]})
    assert prepare_merge_run(batch, ["id"], "lsn").column("v").to_pylist() == ["second"]


@pytest.mark.parametrize(
    ("batch", "column"),
    [
        (pa.table({"id": [1, None]}), "id"),
        (pa.table({"id": [1], "lsn": pa.array([None], pa.int64())}), "lsn"),
        (pa.table({"id": [1], ROW_KIND_COLUMN: pa.array([2], pa.int8())}), ROW_KIND_COLUMN),
        (pa.table({"x": [1]}), "id"),
    ],
)
def test_merge_run_refuses_bad_input(batch: pa.Table, column: str) -> None:
    sequence = "lsn" if "lsn" in batch.column_names else None
    with pytest.raises(SchemaError) as err:
        prepare_merge_run(batch, ["id"], sequence)
    assert err.value.column == column


def test_write_merge_run_writes_a_sorted_bucket_file(tmp_path: Path) -> None:
    from catalog.files.writer import write_merge_run

    changes = pa.table({"id": [5, 1, 5], "v": ["a", "b", "c"]})
    file = write_merge_run(changes, tmp_path, ["id"], bucket=7, options=WriteOptions(fsync=False))
    assert "/bucket-0007/" in file.path
    parquet = pq.ParquetFile(tmp_path / file.path)
    assert parquet.metadata.row_group(0).sorting_columns[0].column_index == 0
    assert parquet.read().select(["id", "v"]).to_pylist() == [
        {"id": 1, "v": "b"},
        {"id": 5, "v": "c"},
    ]


@pytest.mark.parametrize(("run_compression", "expected"), [("lz4", "LZ4"), (None, "ZSTD")])
def test_merge_runs_use_the_run_codec_and_data_files_keep_theirs(
    tmp_path: Path, run_compression: str | None, expected: str
) -> None:
    from catalog.files.writer import write_merge_run

    options = WriteOptions(fsync=False, run_compression=run_compression)
    changes = pa.table({"id": [1, 2], "v": ["a", "b"]})
    run = write_merge_run(changes, tmp_path, ["id"], bucket=0, options=options)
    data = write_data_file(changes, tmp_path, options=options)

    def codec(file: DataFile) -> str:
        return str(pq.ParquetFile(tmp_path / file.path).metadata.row_group(0).column(1).compression)

    assert (codec(run), codec(data)) == (expected, "ZSTD")
    assert pq.read_table(tmp_path / run.path).select(["id", "v"]).equals(changes)
