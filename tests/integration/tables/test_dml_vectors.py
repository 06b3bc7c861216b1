"""Append-table DELETE/UPDATE with deletion vectors against real racing commits: the rows of
design D5's matrix that involve append DML (docs/design/deletion-vectors.md), and a statement
killed between writing its vector file and committing.

Each race lands a real commit exactly between a statement's (or a compaction's) written files
and its commit: ``run_statement(before_commit=...)`` for a statement, a task planned before
the racing commit for a compaction. What a user checks: rows, versions, vectors, files."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp, RetryPolicy, Table
from catalog.dml import run_statement
from compaction.rewrite import compact
from compaction.task import OutcomeStatus
from tests.fixtures.compaction import files_on_disk, plan_tasks, rows_at

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("v", pa.string())])
NO_WAIT = RetryPolicy(attempts=3, sleep=lambda _: None)


def batch(start: int, n: int = 10, v: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": [v] * n})


def events(catalog: Catalog, files: int = 1, properties: dict[str, str] | None = None) -> Table:
    table = catalog.create_table("logs.events", EVENTS, properties=properties)
    for i in range(files):
        table.append(batch(i * 10))
    return table


def ids(table: Table, version: int | None = None) -> list[int]:
    return sorted(r[0] for r in rows_at(table, version))


def vectors(table: Table) -> dict[str, int]:
    """Each live file's marked-row count (files without a vector left out)."""
    return {f.path: f.vector.cardinality for f in table.plan().files if f.vector is not None}


def lands_once(action):  # type: ignore[no-untyped-def]
    def land(attempt: int) -> None:
        if attempt == 1:
            action()

    return land


def test_two_deletes_marking_one_file_both_land_and_no_mark_is_lost(catalog: Catalog):
    """update/update: fail. The second statement's blind vector would drop the first one's
    marks; it loses instead and, evaluated again, unions them."""
    table = events(catalog)
    [path] = [f.path for f in table.plan().files]
    other = catalog.load_table("logs.events")
    theirs = []
    mine = run_statement(
        table,
        [("id", "<", 3)],
        None,
        retry=NO_WAIT,
        before_commit=lands_once(lambda: theirs.append(other.delete(where=[("id", ">=", 7)]))),
    )
    assert (theirs[0].attempts, theirs[0].rows) == (1, 3)
    assert (mine.attempts, mine.rows) == (2, 3), "lost once to the other DELETE, then landed"
    assert ids(table) == [3, 4, 5, 6]
    assert vectors(table) == {path: 6}
    assert [v.op for v in table.history(limit=2)] == [CommitOp.UPDATE, CommitOp.UPDATE]
    assert leftover_vector_files(table) == set()


def leftover_vector_files(table: Table) -> set[str]:
    """Vector files on disk that no version names (a lost attempt must have deleted its)."""
    named = {
        f.vector.path
        for version in range(table.current_version() + 1)
        for f in table.plan(version=version).files
        if f.vector and f.vector.path
    }
    return {p for p in files_on_disk(table) if p.endswith(".puffin")} - named


def test_two_deletes_with_vector_files_delete_the_losers_file(catalog: Catalog):
    table = events(catalog, properties={"vectors.inline-max-bytes": "0"})
    other = catalog.load_table("logs.events")
    mine = run_statement(
        table,
        [("id", "in", [1, 3])],
        None,
        retry=NO_WAIT,
        before_commit=lands_once(lambda: other.delete(where=[("id", "=", 8)])),
    )
    assert (mine.attempts, mine.vector_files) == (2, 1)
    assert ids(table) == [0, 2, 4, 5, 6, 7, 9]
    assert leftover_vector_files(table) == set(), "the lost attempt's vector file was deleted"
    assert ids(table, version=2) == [0, 1, 2, 3, 4, 5, 6, 7, 9], "the other DELETE's version"


def test_a_compaction_planned_before_a_delete_of_its_input_is_discarded(catalog: Catalog):
    """compaction/update: discard. Its output was read minus the input's old vector, so it
    would bring the newly deleted rows back."""
    table = events(catalog, files=3)
    [task] = plan_tasks(table)
    table.delete(where=[("id", "in", [4, 15])])
    outcome = compact(catalog, task)
    assert outcome.status is OutcomeStatus.DISCARDED
    expected = [i for i in range(30) if i not in (4, 15)]
    assert ids(table) == expected
    assert table.history(limit=1)[0].op is CommitOp.UPDATE
    [again] = plan_tasks(table)  # replanned on the marked files: the marks are applied
    assert compact(catalog, again).status is OutcomeStatus.COMMITTED
    assert ids(table) == expected and vectors(table) == {}


def test_a_delete_planned_before_a_compaction_overwrites_it(catalog: Catalog):
    """update/compaction: overwrite. The statement's set is its base's entries with its
    vectors; the compaction's outputs held the same rows, so dropping them loses nothing."""
    table = events(catalog, files=3)
    base_files = {f.path for f in table.plan().files}
    outputs: list[str] = []

    def compaction() -> None:
        [task] = plan_tasks(catalog.load_table("logs.events"))
        outcome = compact(catalog, task)
        assert outcome.status is OutcomeStatus.COMMITTED
        outputs.extend(o.path for o in outcome.outputs)

    result = run_statement(
        table, [("id", "in", [4, 15])], None, retry=NO_WAIT, before_commit=lands_once(compaction)
    )
    assert (result.attempts, result.rows) == (1, 2), "no retry: the statement overwrote it"
    assert [v.op for v in table.history(limit=2)] == [CommitOp.UPDATE, CommitOp.COMPACTION]
    assert {f.path for f in table.plan().files} == base_files
    assert not set(outputs) & base_files
    assert ids(table) == [i for i in range(30) if i not in (4, 15)]


def test_a_delete_that_loses_to_an_append_is_evaluated_again_with_vectors(catalog: Catalog):
    """update/append: fail, the statement retries - and marks the appended rows too."""
    table = events(catalog)
    other = catalog.load_table("logs.events")
    result = run_statement(
        table,
        [("id", "in", [2, 102])],
        None,
        retry=NO_WAIT,
        before_commit=lands_once(lambda: other.append(batch(100, 5))),
    )
    assert (result.attempts, result.rows, result.vectors_written) == (2, 2, 2)
    assert ids(table) == [i for i in [*range(10), *range(100, 105)] if i not in (2, 102)]
    assert sorted(vectors(table).values()) == [1, 1]


# ------------------------------------------------------------------- killed before its commit

KILLED = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from catalog import Catalog
    from catalog.dml import run_statement

    def written(attempt):  # the vector file is on disk; the commit is next
        Path(sys.argv[2]).write_text("written")
        time.sleep(600)

    table = Catalog.connect(sys.argv[1]).load_table("logs.events")
    run_statement(table, [("id", "<", 5)], None, before_commit=written)
""")


@pytest.mark.slow
def test_a_delete_killed_after_writing_its_vector_file_leaves_an_orphan_for_vacuum(
    catalog: Catalog, catalog_dsn: str, tmp_path: Path
):
    table = events(catalog, files=2, properties={"vectors.inline-max-bytes": "0"})
    before = rows_at(table)
    marker = tmp_path / "written"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, catalog_dsn, str(marker)], cwd=Path(__file__).parents[3]
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the statement ended before its commit"
            assert time.monotonic() < deadline, "the statement never wrote its vector file"
            time.sleep(0.05)
        proc.kill()  # SIGKILL: nothing of the statement may run after this
        assert proc.wait(timeout=10) == -9
    finally:
        if proc.poll() is None:
            proc.kill()

    table.refresh()
    assert table.current_version() == 2 and rows_at(table) == before, "nothing visible"
    [orphan] = [p for p in files_on_disk(table) if p.endswith(".puffin")]
    assert vectors(table) == {}
    kept = table.vacuum(older_than=dt.timedelta(hours=1))  # within the grace period: kept
    assert orphan not in kept.paths and orphan in files_on_disk(table)
    report = table.vacuum(older_than=dt.timedelta(0))
    assert orphan in report.paths and report.orphans == 1
    assert not any(p.endswith(".puffin") for p in files_on_disk(table))
    assert rows_at(table) == before
    assert table.delete(where=[("id", "<", 5)]).rows == 5, "the table is not blocked"


def test_a_file_past_the_deleted_ratio_is_rewritten_without_its_marked_rows(catalog: Catalog):
    """Tier 2 (design D8) for append files: one file, alone, not due as a small file."""
    table = events(catalog, files=1)
    table.delete(where=[("id", "<", 2)])  # 2 of 10 marked: not past 0.2
    assert plan_tasks(table, force=False) == []
    table.delete(where=[("id", "=", 9)])
    [task] = plan_tasks(table, force=False)
    assert [f.vector.cardinality for f in task.inputs if f.vector] == [3]
    outcome = compact(catalog, task)
    assert outcome.status is OutcomeStatus.COMMITTED
    [output] = table.plan().files
    assert output.vector is None and output.row_count == 7
    assert ids(table) == list(range(2, 9))
