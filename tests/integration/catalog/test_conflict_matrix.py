"""Each of the 16 (mine, theirs) pairs, provoked by two real commits planned on one base."""

from __future__ import annotations

import contextlib
import threading

import pyarrow as pa
import pytest

from catalog import Catalog, CommitConflict, CommitOp, CommitResult, ConflictKind
from tests.fixtures.commits import adds, file_names, landing_while_deciding, rewrite
from tests.fixtures.postgres import catalog_connection

pytestmark = pytest.mark.integration
A, C, U, M = CommitOp.APPEND, CommitOp.COMPACTION, CommitOp.UPDATE, CommitOp.MERGE
PD = "bucket=0000"
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
BASE = ["f0", "f1"]


def part_for(op: CommitOp, who: str):
    """What each op does here: appends/merges add a file; resets rewrite f0 (and f1)."""
    if op is C:
        return rewrite(PD, ["f0", "f1"], [f"{who}_compacted"])
    if op is U:
        return rewrite(PD, ["f0"], [f"{who}_updated"])
    return adds(PD, f"{who}_{op.value}")


def state_after(files: list[str], op: CommitOp, who: str) -> list[str]:
    part = part_for(op, who)
    deleted = {f.path.removesuffix(".parquet") for f in part.deleted}
    return [f for f in files if f not in deleted] + [
        f.path.removesuffix(".parquet") for f in part.added
    ]


def expected(mine: CommitOp, theirs: CommitOp):
    """(outcome, files after both commits) as the design's matrix says."""
    after_theirs = state_after(BASE, theirs, "theirs")
    their_added = [f for f in after_theirs if f not in BASE]
    cell = {
        (A, A): "rebase", (A, C): "rebase", (A, U): "fail", (A, M): "fail",
        (C, A): "reorder", (C, C): "discard", (C, U): "discard", (C, M): "reorder",
        (U, A): "fail", (U, C): "overwrite", (U, U): "fail", (U, M): "fail",
        (M, A): "fail", (M, C): "rebase", (M, U): "fail", (M, M): "fail",
    }[(mine, theirs)]  # fmt: skip
    if cell in ("fail", "discard"):
        return cell, after_theirs
    if cell == "rebase":
        return cell, state_after(after_theirs, mine, "mine")
    if cell == "reorder":
        return cell, state_after(BASE, mine, "mine") + their_added
    return cell, state_after(BASE, mine, "mine")  # overwrite


@pytest.fixture
def cdc_table(catalog: Catalog):
    table = catalog.create_table("shop.orders", SCHEMA, primary_key=["id"], hash_buckets=1)
    table.commit(A, [adds(PD, "f0")])
    table.commit(M, [adds(PD, "f1")])
    return table


PAIRS = [(m, t) for m in (A, C, U, M) for t in (A, C, U, M)]
#: When their commit lands: before mine reads anything, or while mine decides without locks -
#: after its reads, before its publish_commit - so that mine's decision goes stale and must be
#: made again under the locks (catalog.committer). A reset op (C, U) decides without them too
#: when nothing landed since its base, as here until theirs lands in that window.
CASES = [(m, t, when) for m, t in PAIRS for when in ("landed-before", "landed-while-deciding")]


@pytest.mark.parametrize(
    ("mine", "theirs", "when"), CASES, ids=[f"{m}-vs-{t}-{w}" for m, t, w in CASES]
)
def test_pair(catalog_dsn: str, cdc_table, mine, theirs, when):
    base = cdc_table.current_version()
    theirs_landed: list[CommitResult] = []

    def land_theirs() -> None:
        part = part_for(theirs, "theirs")
        theirs_landed.append(cdc_table.commit(theirs, [part], base_version=base))

    window: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if when == "landed-before":
        land_theirs()
    else:
        window = landing_while_deciding(land_theirs)
    outcome, files = expected(mine, theirs)

    with window:
        if outcome == "fail":
            with pytest.raises(CommitConflict) as err:
                cdc_table.commit(mine, [part_for(mine, "mine")], base_version=base)
        else:
            result = cdc_table.commit(mine, [part_for(mine, "mine")], base_version=base)
    assert len(theirs_landed) == 1

    if outcome == "fail":
        assert err.value.kind is ConflictKind.CONCURRENT_WRITE
        assert err.value.winning_op == theirs.value
        assert err.value.winning_commit == theirs_landed[0].commit_id
        assert err.value.partition_desc == PD and err.value.expected_version == base
        assert cdc_table.current_version() == base + 1
    elif outcome == "discard":
        assert result.tables[0].discarded and result.tables[0].version is None
        assert cdc_table.current_version() == base + 1
        assert cleanup_paths(catalog_dsn) == ["mine_compacted.parquet"]
    else:
        assert result.version_of("shop.orders") == base + 2
    assert sorted(file_names(cdc_table.plan().files)) == sorted(files)


def cleanup_paths(dsn: str) -> list[str]:
    with catalog_connection(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT path FROM cleanup_file ORDER BY path")]


def test_reordered_compaction_keeps_appends_in_commit_order(catalog: Catalog):
    """compaction planned at v, appends land, compaction lands: [compaction, a1, a2]."""
    table = catalog.create_table("logs.events", SCHEMA)
    for name in ("e0", "e1", "e2"):
        table.commit(A, [adds("", name)])
    base = table.current_version()
    table.commit(A, [adds("", "a1")])
    table.commit(A, [adds("", "a2")])
    table.commit(C, [rewrite("", ["e0", "e1", "e2"], ["big"])], base_version=base)
    assert file_names(table.plan().files) == ["big", "a1", "a2"]
    # and the past is untouched
    assert file_names(table.plan(version=base).files) == ["e0", "e1", "e2"]


def test_compaction_whose_inputs_are_gone_fails_to_be_replanned(catalog: Catalog):
    table = catalog.create_table("logs.events", SCHEMA)
    table.commit(A, [adds("", "e0")])
    base = table.current_version()
    with pytest.raises(CommitConflict) as err:
        table.commit(C, [rewrite("", ["e0", "never_there"], ["big"])], base_version=base)
    assert err.value.kind is ConflictKind.INPUT_FILES_GONE
    assert file_names(table.plan().files) == ["e0"]


def test_racing_append_and_compaction_both_land_whoever_wins(catalog: Catalog):
    """Real threads released together: whichever order PostgreSQL picks, the matrix holds."""
    table = catalog.create_table("logs.events", SCHEMA)
    for name in ("e0", "e1"):
        table.commit(A, [adds("", name)])
    base = table.current_version()
    barrier = threading.Barrier(2)
    results = {}

    def run(name, op, part, base_version):
        barrier.wait()
        results[name] = table.commit(op, [part], base_version=base_version)

    threads = [
        threading.Thread(target=run, args=("append", A, adds("", "a1"), base)),
        threading.Thread(target=run, args=("compact", C, rewrite("", ["e0", "e1"], ["big"]), base)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(file_names(table.plan().files)) == ["a1", "big"]
    versions = sorted(r.version_of("logs.events") for r in results.values())
    assert versions == [base + 1, base + 2]
