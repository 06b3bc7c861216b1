"""How the consistent read point is chosen from the tables' histories (catalog.readpoint)."""

from __future__ import annotations

import pytest

from catalog import CommitOp, NoConsistentCutError, SourcePoint
from catalog.readpoint import VersionMark, consistent_cut, job_of


def point(n: int) -> SourcePoint:
    return SourcePoint(position=f"{n:032x}", transaction=f"tx{n}")


def v(
    version: int,
    at: int | None,
    *,
    op: CommitOp = CommitOp.MERGE,
    writer: str = "job:a",
    exceptions: tuple[str, ...] = (),
) -> VersionMark:
    return VersionMark(version, op, writer, None if at is None else point(at), exceptions)


def test_one_job_reads_its_heads_and_the_newest_point():
    cut = consistent_cut({"s.a": [v(3, 30), v(2, 20), v(1, 10)], "s.b": [v(1, 10)]})
    assert cut.versions == {"s.a": 3, "s.b": 1}
    assert cut.watermark == point(30)


def test_a_version_with_exceptions_steps_back_every_table_of_the_job():
    """c1 (a, b) ok at 10; c2 (a, b) published T incomplete at 20; c3 (b only) ok at 30. Reading
    b at c3 with a before c2 would split the complete transactions c2 published into both."""
    cut = consistent_cut(
        {
            "s.a": [v(2, 20, exceptions=("T",)), v(1, 10)],
            "s.b": [v(3, 30), v(2, 20, exceptions=("T",)), v(1, 10)],
        }
    )
    assert cut.versions == {"s.a": 1, "s.b": 1}
    assert cut.watermark == point(10)


def test_a_compaction_keeps_the_point_of_what_it_rewrote():
    cut = consistent_cut({"s.a": [v(3, None, op=CommitOp.COMPACTION), v(2, 20), v(1, 10)]})
    assert cut.versions == {"s.a": 3} and cut.watermark == point(20)


def test_a_batch_write_without_a_watermark_is_stepped_past():
    cut = consistent_cut({"s.a": [v(3, None, op=CommitOp.UPDATE, writer="dml"), v(2, 20)]})
    assert cut.versions == {"s.a": 2}


def test_tables_without_any_watermark_are_named():
    with pytest.raises(NoConsistentCutError) as caught:
        consistent_cut({"s.a": [v(1, 10)], "s.z": [v(1, None, op=CommitOp.APPEND)]})
    assert caught.value.tables == ("s.z",)
    assert "s.z" in str(caught.value) and "eventual" in str(caught.value)


def test_several_jobs_meet_at_the_smallest_of_their_latest_points():
    """slow reached 30; fast's newest version at or below it is its batch at 25, so the cut is
    whole up to 25 for every table (batch boundaries), and says so."""
    cut = consistent_cut(
        {
            "s.fast": [
                v(3, 50, writer="fast:x"),
                v(2, 25, writer="fast:x"),
                v(1, 5, writer="fast:x"),
            ],
            "s.slow": [v(2, 30, writer="slow:x"), v(1, 10, writer="slow:x")],
        }
    )
    assert cut.versions == {"s.fast": 2, "s.slow": 2}
    assert cut.watermark == point(25)


def test_a_job_keeps_its_identity_across_checkpoint_incarnations():
    assert job_of("orders:1f3a") == job_of("orders:77b0") == "orders"
    cut = consistent_cut({"s.a": [v(5, 50, writer="j:new")], "s.b": [v(2, 20, writer="j:old")]})
    assert cut.versions == {"s.a": 5, "s.b": 2}
