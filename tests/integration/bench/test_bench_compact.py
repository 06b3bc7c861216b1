"""Smoke test of bench/compact at a tiny size: it completes and the systems end equal.

Nothing here is timed or compared against a goal; the figures come from full runs
(bench/RESULTS.md). The benchmark starts its own throwaway PostgreSQL, as it does when run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import bench_server
from bench.compact.append import render_append, run_append
from bench.compact.report import render_steady
from bench.compact.steady import SteadyArgs, run_steady

pytestmark = pytest.mark.integration


def test_append_scenario_ends_with_equal_compacted_tables(tmp_path: Path) -> None:
    with bench_server(tmp_path / "warehouse") as server:
        result = run_append(server.catalog, tmp_path, appends=6, rows=50, repeats=1)
    assert set(result.files_after.values()) == {1}  # every system compacted to one file
    assert len(result.checks) == 1  # run_append raises when a system's rows differ
    assert render_append(result)


def test_steady_scenario_completes_beside_the_service(tmp_path: Path) -> None:
    args = SteadyArgs(
        commits=12,
        rows=100,
        updates=0.5,
        buckets=2,
        every=6,
        interval=0.0,
        read_repeats=1,
        workers=1,
    )
    with bench_server(tmp_path / "warehouse") as server:
        result = run_steady(server, tmp_path, args)
    assert result.final_rows_ok
    assert [c.equal for c in result.checkpoints] == [True, True]
    assert result.usage is not None and result.usage.exit_code == 0
    assert len(result.lags) == args.commits
    amp = result.amplification
    assert amp is not None and amp.ingest_bytes_added > 0 and amp.compaction_bytes_written > 0
    assert any("write amplification" in line for line in render_steady(result))
