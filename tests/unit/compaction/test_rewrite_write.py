"""Writing one large bin's outputs at once: row order kept, nothing left behind on failure."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog.files import WriteOptions, storage_for, write_data_files
from catalog.model import DataFile
from compaction.rewrite import _slices, _write_concurrently

FAST = WriteOptions(fsync=False)


def rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64())})


def on_disk(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("n", "count", "lengths"), [(10, 3, [4, 4, 2]), (2, 5, [1, 1]), (0, 2, [0])]
)
def test_slices_cover_the_rows_in_order(n: int, count: int, lengths: list[int]) -> None:
    pieces = _slices(rows(n), count)

    assert [p.num_rows for p in pieces] == lengths
    assert pa.concat_tables(pieces).column("id").to_pylist() == list(range(n))


def test_pieces_written_at_once_come_back_in_piece_order(tmp_path: Path) -> None:
    pieces = _slices(rows(9000), 3)

    def write(piece: pa.Table) -> list[DataFile]:
        return write_data_files(piece, tmp_path, options=FAST)

    files = _write_concurrently(storage_for(tmp_path), pieces, write)

    assert [f.row_count for f in files] == [3000, 3000, 3000]
    assert [f.stats["id"].min for f in files] == [0, 3000, 6000]
    assert len(on_disk(tmp_path)) == 3


def test_a_failed_piece_leaves_no_file_of_the_others(tmp_path: Path) -> None:
    pieces = _slices(rows(9000), 3)

    def write(piece: pa.Table) -> list[DataFile]:
        if piece.column("id")[0].as_py() == 3000:
            raise OSError("no space left on device")
        return write_data_files(piece, tmp_path, options=FAST)

    with pytest.raises(OSError, match="no space"):
        _write_concurrently(storage_for(tmp_path), pieces, write)

    assert on_disk(tmp_path) == set()
