"""Smoke test of bench/catalog_scale in its quick mode: it completes and reports every row.

Nothing is timed against a goal here; the figures come from full runs (bench/RESULTS.md).
Only lakestream runs: DuckLake needs the ``bench`` extra's duckdb extension wheels, which the
test environment does not have to carry. The benchmark starts its own throwaway PostgreSQL.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

_ROOT = Path(__file__).resolve().parents[3]


def test_quick_run_reports_every_row_with_no_lost_commit(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    argv = ["--quick", "--systems", "lakestream", "--writers", "2", "--tables", "5"]
    subprocess.run(
        [sys.executable, "-m", "bench.catalog_scale.run", *argv, "--markdown", str(out)],
        cwd=_ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    report = out.read_text()
    for row in (
        "| create the small tables, s |",
        "| big table: files registered | 400 |",
        "| full plan, s (files) | ",
        "| one-partition plan, ms (files) | ",
    ):
        assert row in report
    assert "(400)" in _cell(report, "| full plan, s (files) |")
    assert "(10)" in _cell(report, "| one-partition plan, ms (files) |")
    runs = [line for line in report.splitlines() if line.startswith("| 1 writer |")]
    runs += [line for line in report.splitlines() if line.startswith("| 2 writers,")]
    assert len(runs) == 3
    for line in runs:  # commits made == files in the table, none failed
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2] == cells[3] and cells[4] == "0", line
    assert "- met: one partition" in report or "- MISSED: one partition" in report


def _cell(report: str, prefix: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(prefix))


def test_lock_hold_reports_the_publishing_function_of_every_commit() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.catalog_scale.lock_hold", "--commits", "50"],
        cwd=_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 writer: 50 commits in " in proc.stdout
    assert "publish_commit: 50 calls, mean " in proc.stdout  # each commit one call, timed
    assert "one table's ceiling: ~" in proc.stdout
