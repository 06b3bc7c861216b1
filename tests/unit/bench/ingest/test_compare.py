"""Comparing two trees' transactions benchmark: the rounds read back from the report the
benchmark prints, each side pooled, the turns ABBA, and the other tree a real worktree."""

from __future__ import annotations

import argparse
import math
import subprocess
from pathlib import Path

import pytest

from bench.ingest.compare import (
    THAT,
    THIS,
    Pooled,
    _dirty,
    difference,
    loops,
    parse_rounds,
    pooled,
    report,
    turns,
    worktree,
)
from bench.ingest.transactions import Run
from bench.ingest.transactions import report as bench_report
from ingest.transactions import TransactionMode

C, E = TransactionMode.CONSISTENT, TransactionMode.EVENTUAL
ARGS = argparse.Namespace(
    events=1000, keys=100, max_offsets=250, buckets=4, warmup_events=1000, transaction_partitions=1
)


def printed(*runs: tuple[TransactionMode, float, float]) -> str:
    """The report ``bench.ingest.transactions`` prints for runs of (mode, seconds, driver)."""
    return bench_report(
        [Run(mode, 0, seconds, 1000, 5, {"driver": driver, "jvm": 4.0, "python workers": 12.0,
                                         "broker": 2.0, "other": 0.0})
         for mode, seconds, driver in runs],
        ARGS, (1.0, 1.0, 1.0),
    )  # fmt: skip


def test_the_rounds_are_read_from_the_report_the_benchmark_prints() -> None:
    rounds = parse_rounds(printed((E, 1.0, 0.2), (C, 1.25, 1.4)))

    assert [(r.mode, r.rate) for r in rounds] == [("eventual", 1000.0), ("consistent", 800.0)]
    assert rounds[1].cpu == (1.4, 4.0, 12.0, 2.0)


def test_a_report_without_cpu_or_without_both_modes() -> None:
    old = "| eventual | 0 | 8.7 | 115,413 | 5 |\n| consistent | 0 | 15.3 | 65,257 | 5 |"
    assert [r.cpu for r in parse_rounds(old)] == [None, None]
    assert pooled([parse_rounds(old)]).cpu_over is None
    with pytest.raises(ValueError, match="both modes"):
        parse_rounds("| eventual | 0 | 8.7 | 115,413 | 5 |")


def test_a_side_pools_every_round_of_its_runs() -> None:
    first = parse_rounds(printed((E, 1.0, 0.2), (C, 1.25, 1.4)))  # 1,000 and 800 events/s
    second = parse_rounds(printed((E, 0.5, 0.2), (C, 1.0, 1.2)))  # 2,000 and 1,000

    side = pooled([first, second])

    assert side.ratios == (0.8, 0.5)
    assert (side.consistent, side.eventual) == (900.0, 1500.0)
    assert side.ratio == pytest.approx(0.6)
    assert side.cpu_over == pytest.approx(
        {"driver": 1.1, "jvm": 0.0, "python workers": 0.0, "broker": 0.0}
    )
    text = report({THIS: side, THAT: side}, "abc1234")
    assert "| abc1234 | 2 | 0.80x, 0.50x | 0.650x ± 1.906 | 900 / 1,500 | **0.600x** |" in text


def side(*ratios: float) -> Pooled:
    return Pooled(len(ratios), ratios, 1.0, 1.0, None)


def test_a_side_has_its_mean_run_ratio_with_a_95_percent_interval() -> None:
    # by hand: mean 0.9, sample sd 0.016330, t(3) = 3.182 -> 3.182 * 0.016330 / 2
    four = side(0.90, 0.92, 0.88, 0.90)
    assert four.mean_ratio == pytest.approx(0.9)
    assert four.half_width == pytest.approx(0.025981, abs=1e-6)
    assert side(0.9).half_width == math.inf  # one run says nothing of its spread


def test_the_sides_differ_only_when_the_interval_of_the_difference_excludes_zero() -> None:
    # by hand (Welch): d 0.05, se 0.009129, df 4.41 -> t(4) = 2.776 -> +-0.025341
    better, worse = side(0.90, 0.92, 0.88, 0.90), side(0.85, 0.86, 0.84, 0.85)
    d, half = difference(better, worse)
    assert (d, half) == (pytest.approx(0.05), pytest.approx(0.025341, abs=1e-6))
    assert report({THIS: better, THAT: worse}, "abc").endswith(
        "less abc's: +0.050x ± 0.025 (95%, Welch): resolved"
    )
    # the same mean, spread as this VM spreads runs; by hand: se 0.025166, df 3.70 -> t(3)
    noisy = side(0.95, 0.85, 0.93, 0.87)
    assert report({THIS: noisy, THAT: better}, "abc").endswith(
        "less abc's: +0.000x ± 0.080 (95%, Welch): not resolved"
    )
    assert difference(side(0.95), side(0.85)) == (pytest.approx(0.1), math.inf)


def test_the_sides_take_turns_abba() -> None:
    assert turns(3) == [THIS, THAT, THAT, THIS, THIS, THAT]


def test_the_other_side_is_a_worktree_of_the_commit_removed_afterwards() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    with worktree("HEAD") as tree:
        assert (tree / "bench" / "ingest" / "transactions.py").is_file()
        at = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
        assert at == head
    assert not Path(tree).exists()
    listed = subprocess.run(["git", "worktree", "list"], capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    assert str(tree) not in listed


def test_a_tree_without_the_c_extension_runs_python() -> None:
    """Since issue 48 no tree has a C extension: both sides run Python (a tree from before it
    would get it built, as its install did)."""
    assert loops(Path(__file__).resolve().parents[4]) == "python"


def test_a_tree_with_uncommitted_changes_is_told_apart() -> None:
    """The comparison warns when this tree has changes: every run reads its files afresh."""
    with worktree("HEAD") as tree:
        assert not _dirty(tree)
        readme = tree / "bench" / "ingest" / "README.md"
        readme.write_text(readme.read_text() + "\nedited\n")
        assert _dirty(tree)
