"""The columnar file list: manifest lines parsed into columns, snapshots folded on columns.

The fold must give exactly what replaying each snapshot's ops into an insertion-ordered dict
gives (the reference below, which is how snapshots were folded before plans went columnar).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import manifest
from catalog.manifest import FileManifest, fold_ops, parse_ops
from catalog.model import ColumnStats, DataFile, FileAction, VectorRef

ADD, DEL = FileAction.ADD, FileAction.DELETE


def data_file(path: str, size: int = 100) -> DataFile:
    stats = {"id": ColumnStats(min=1, max=size, null_count=0), "name": ColumnStats(min="a")}
    return DataFile(path=path, size_bytes=size, row_count=size // 10, schema_id=2, stats=stats)


def line(action: FileAction, file: DataFile) -> bytes:
    """A manifest line as migration 0012 writes it (JSON-quoted path when it must be; the
    vector as JSON text and ``resolved`` as true/false, each empty when the entry has none)."""
    path = file.path
    if any(c in path for c in "\t\n\r") or path.startswith('"'):
        path = json.dumps(path)
    stats = json.dumps({k: [v.min, v.max, v.null_count] for k, v in file.stats.items()})
    sizes = [str(n) for n in (file.size_bytes, file.row_count, file.schema_id)]
    vector = file.vector.model_dump_json() if file.vector else ""
    resolved = "" if file.resolved is None else str(file.resolved).lower()
    fields = [action.value, path, *sizes, stats, vector, resolved]
    return ("\t".join(fields) + "\n").encode()


def fold(groups: list[list[tuple[FileAction, DataFile]]]) -> list[list[DataFile]]:
    """Each group's ops through parse_ops and fold_ops, back as DataFiles per group."""
    blobs = [b"".join(line(a, f) for a, f in ops) for ops in groups]
    counts = [len(ops) for ops in groups]
    live, owners = fold_ops(parse_ops(blobs), np.repeat(np.arange(len(groups)), counts))
    files = live.data_files()
    return [[f for f, g in zip(files, owners, strict=True) if g == i] for i in range(len(groups))]


def reference(ops: list[tuple[FileAction, DataFile]]) -> list[DataFile]:
    live: dict[str, DataFile] = {}
    for action, file in ops:
        if action is ADD:
            live[file.path] = file
        else:
            live.pop(file.path, None)
    return list(live.values())


def test_adds_come_back_in_commit_order_with_their_stats():
    files = [data_file(f"data/f{i}.parquet", 100 + i) for i in (3, 1, 2)]
    assert fold([[(ADD, f) for f in files]]) == [files]


def test_a_delete_removes_an_earlier_add_but_not_a_later_one():
    a, b = data_file("a.parquet"), data_file("b.parquet")
    ops = [(ADD, a), (ADD, b), (DEL, a)]
    assert fold([ops]) == [[b]]
    assert fold([[*ops, (ADD, a)]]) == [[b, a]]  # re-added: it goes to the end


def test_groups_are_folded_apart():
    shared = data_file("data/same-name.parquet")
    other = data_file("data/other.parquet")
    assert fold([[(ADD, shared), (ADD, other)], [(ADD, shared)], [(DEL, shared)]]) == [
        [shared, other],
        [shared],
        [],
    ]


def test_a_reset_chain_holds_the_kept_files_then_its_own_ops():
    # a compaction's row (see committer._materialize): kept files, then the inputs it deleted
    # and the output it added; later appends come after it in the chain
    kept, inputs = data_file("kept.parquet"), [data_file(f"in{i}.parquet") for i in range(3)]
    output, later = data_file("out.parquet", 300), data_file("later.parquet")
    chain = [(ADD, kept), *[(DEL, f) for f in inputs], (ADD, output), (ADD, later)]
    assert fold([chain]) == [[kept, output, later]]


def test_a_path_added_twice_keeps_its_first_place_and_its_last_entry():
    first, again = data_file("x.parquet", 100), data_file("x.parquet", 200)
    y = data_file("y.parquet")
    assert fold([[(ADD, first), (ADD, y), (ADD, again)]]) == [[again, y]]


def test_paths_with_tabs_newlines_and_quotes_survive_the_line_format():
    names = ["a\tb.parquet", "c\nd.parquet", '"quoted".parquet', "día=é/ü.parquet"]
    odd = [data_file(p) for p in names]
    plain = data_file("plain.parquet")
    assert fold([[(ADD, f) for f in [*odd, plain]]]) == [[*odd, plain]]


def test_statistics_keep_their_types():
    stats = {"f": ColumnStats(min=0.5, max=7.0), "s": ColumnStats(min="a", max=None)}
    file = DataFile(path="p.parquet", size_bytes=1, row_count=1, stats=stats)
    [[back]] = fold([[(ADD, file)]])
    assert back == file and isinstance(back.stats["f"].max, float)


def test_a_float_past_64_bits_written_in_full_comes_back_as_that_float():
    # jsonb writes 1e30 as 1000000000000000000000000000000 (migration 0008 keeps its text)
    text = "add\tp.parquet\t1\t1\t0\t" + '{"f": [0, 1000000000000000000000000000000, 0]}\t\t\n'
    [file] = fold_ops(parse_ops([text.encode()]), np.zeros(1, np.int64))[0].data_files()
    assert file.stats["f"].max == 1e30


def test_vectors_and_resolved_flags_come_back_with_their_entries():
    inline = VectorRef(cardinality=2, inline="AAAAJNHTOWQ=")
    in_file = VectorRef(cardinality=900, path="data/dv-1.puffin", offset=4, length=1800)
    files = [
        DataFile(path="a.parquet", size_bytes=1, row_count=5, vector=inline, resolved=True),
        DataFile(path="b.parquet", size_bytes=1, row_count=1000, vector=in_file),
        DataFile(path="c.parquet", size_bytes=1, row_count=1, resolved=False),
        data_file("d.parquet"),  # an entry from before migration 0012: neither field
    ]
    assert fold([[(ADD, f) for f in files]]) == [files]
    assert FileManifest.of(files).data_files() == tuple(files)
    flags = manifest.vectored(FileManifest.of(files))
    assert flags is not None and flags.tolist() == [True, True, False, False]
    assert manifest.vectored(FileManifest.of(files[2:])) is None


def test_no_ops_fold_to_no_files():
    assert fold([[], []]) == [[], []]
    assert len(parse_ops([])) == 0


def test_the_columnar_form_of_data_files_round_trips():
    files = [data_file("a.parquet", 10), data_file("b.parquet", 20)]
    manifest = FileManifest.of(files)
    assert manifest.data_files() == tuple(files)
    assert (len(manifest), manifest.row_count, manifest.size_bytes) == (2, 3, 30)
    assert manifest.paths == ["a.parquet", "b.parquet"]


NAMES = st.sampled_from(["a", "b", "c", "d"])
OPS = st.lists(st.tuples(st.sampled_from([ADD, DEL]), NAMES, st.integers(1, 3)), max_size=12)


@given(st.lists(OPS, max_size=4), st.sampled_from([0, manifest.SMALL_FOLD]))
def test_fold_equals_replaying_each_snapshot_into_a_dict(groups, small):
    """Both folds: the columnar one and the replay of few ops (``SMALL_FOLD``)."""
    ops = [[(a, data_file(f"{name}.parquet", size)) for a, name, size in g] for g in groups]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest, "SMALL_FOLD", small)
        assert fold(ops) == [reference(g) for g in ops]


def test_a_stop_signal_during_a_parse_reaches_the_handler_and_cancels_nothing():
    """A service's SIGTERM handler must hear the signal, and the plan in progress must finish:
    pyarrow's read_csv would cancel the parse (ArrowCancelled) when a handler is installed."""
    blob = line(ADD, data_file("data/f.parquet")) * 200_000
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGTERM)).start()
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            assert parse_ops([blob]).num_rows == 200_000
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == [signal.SIGTERM]
