"""Two code trees' ``transactions: consistent`` over ``eventual``, measured in turns.

Why: on the 2-core VM the benchmarks run on, the same code measured 0.78x and 0.865x half an
hour apart (``bench/archive/ingest-transactions.md``, runs 7 and 8); a change worth a few
percent shows only against its baseline measured in the same minutes. This runs
``bench.ingest.transactions`` in this tree and in a ``git worktree`` of another commit by
turns - ABBA, so a drift of the machine falls on both sides alike - one run at a time (each
starts its own PostgreSQL, broker and Spark), and pools each side's rounds::

    python -m bench.ingest.compare --against cb22b43 --pairs 3 -- --events 1000000 --repeat 2

Each side's mean run ratio is given with its 95% interval (Student's t), and the difference of
the two with Welch's: a difference whose interval holds 0 is one the runs do not resolve.

Everything after ``--`` goes to ``bench.ingest.transactions`` on both sides; the other tree
must have that module (any commit since it was added) and print its table of rounds.

A tree from the days of the C extension (``setup.py``, removed by issue 48) gets it built in
place, as its install built it, so that it runs as it ran then; which loops each side runs is
printed with the result ("python" for every tree since).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.ingest.transactions import CPU_SHOWN

#: A row of ``bench.ingest.transactions``' table: mode, round, seconds, events/s, batches and,
#: since ``d37019b``, CPU seconds "driver / JVM / workers / broker".
_ROUND = re.compile(
    r"^\| (consistent|eventual) \| \d+ \| [\d.]+ \| ([\d,]+) \| \d+ \|(?: ([\d./ ]+) \|)?$",
    re.MULTILINE,
)
THIS, THAT = "this", "that"
#: Student's t at 0.975 for 1..30 degrees of freedom (a two-sided 95% interval); 1.96 past 30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


@dataclass(frozen=True)
class Round:
    mode: str
    rate: float
    cpu: tuple[float, ...] | None


@dataclass(frozen=True)
class Pooled:
    """A side's rounds pooled: the median events/s of each mode, their ratio, and the median
    CPU seconds of consistent over eventual per component (None when a round lacks them)."""

    runs: int
    ratios: tuple[float, ...]
    consistent: float
    eventual: float
    cpu_over: dict[str, float] | None

    @property
    def ratio(self) -> float:
        return self.consistent / self.eventual

    @property
    def mean_ratio(self) -> float:
        return statistics.fmean(self.ratios)

    @property
    def half_width(self) -> float:
        """Of the 95% interval of :attr:`mean_ratio` (Student's t; infinite for one run)."""
        n = len(self.ratios)
        if n < 2:
            return math.inf
        return _t975(n - 1) * statistics.stdev(self.ratios) / math.sqrt(n)


def difference(this: Pooled, that: Pooled) -> tuple[float, float]:
    """``this`` side's mean run ratio less ``that`` one's, and the half width of its 95%
    interval (Welch's: the sides' spreads may differ). An interval that holds 0 is a
    difference the runs do not resolve.

    Why: single runs of the same code spread by ±5% here, and a change worth 1-2% was read
    into one set of runs more than once (bench/archive/ingest-transactions.md, runs 16-19)."""
    d = this.mean_ratio - that.mean_ratio
    if len(this.ratios) < 2 or len(that.ratios) < 2:
        return d, math.inf
    parts = [statistics.variance(p.ratios) / len(p.ratios) for p in (this, that)]
    se2 = sum(parts)
    if se2 == 0:
        return d, 0.0
    sides = zip(parts, (this, that), strict=True)
    df = se2**2 / sum(part**2 / (len(p.ratios) - 1) for part, p in sides)
    return d, _t975(df) * math.sqrt(se2)


def _t975(df: float) -> float:
    """t for a 95% interval at ``df`` degrees of freedom, rounded down (the wider interval).
    Welch's ``df`` is at least 1 but may come out a hair below it in floating point: index 0,
    not -1 (which would give the table's narrowest t)."""
    whole = max(int(df), 1)
    return _T975[whole - 1] if whole <= len(_T975) else 1.96


def parse_rounds(report: str) -> list[Round]:
    """The rounds of one ``bench.ingest.transactions`` report.

    Raises:
        ValueError: the text holds no round of either mode.
    """
    rounds = []
    for mode, rate, cpu in _ROUND.findall(report):
        parts = tuple(float(p) for p in cpu.split("/")) if cpu else None
        rounds.append(Round(mode, float(rate.replace(",", "")), parts))
    if {r.mode for r in rounds} != {"consistent", "eventual"}:
        raise ValueError("the report has no rounds of both modes")
    return rounds


def pooled(runs: Sequence[list[Round]]) -> Pooled:
    """One side's runs (each the rounds of one report) pooled."""
    every = [r for run in runs for r in run]
    consistent, eventual = _medians(every, lambda r: r.rate)
    return Pooled(len(runs), tuple(_ratio(run) for run in runs), consistent, eventual,
                  _cpu_over(every))  # fmt: skip


def _medians(rounds: list[Round], value: Callable[[Round], float]) -> tuple[float, float]:
    """The median ``value`` of the consistent rounds and of the eventual ones."""
    return (statistics.median(value(r) for r in rounds if r.mode == "consistent"),
            statistics.median(value(r) for r in rounds if r.mode == "eventual"))  # fmt: skip


def _ratio(run: list[Round]) -> float:
    consistent, eventual = _medians(run, lambda r: r.rate)
    return consistent / eventual


def _cpu_over(rounds: list[Round]) -> dict[str, float] | None:
    cpus = [r.cpu for r in rounds]
    if any(cpu is None or len(cpu) != len(CPU_SHOWN) for cpu in cpus):
        return None
    over = {}
    for at, name in enumerate(CPU_SHOWN):
        consistent, eventual = _medians(rounds, partial(_cpu_at, at))
        over[name] = consistent - eventual
    return over


def _cpu_at(at: int, round_: Round) -> float:
    return round_.cpu[at] if round_.cpu else math.nan


def turns(pairs: int) -> list[str]:
    """The sides in the order they run: ABBA ABBA ..., this tree first."""
    order: list[str] = []
    for pair in range(pairs):
        order += [THIS, THAT] if pair % 2 == 0 else [THAT, THIS]
    return order


def report(sides: dict[str, Pooled], against: str) -> str:
    lines = [
        "| tree | runs | ratio per run | mean of the run ratios (95%) "
        "| pooled consistent / eventual events/s | pooled ratio "
        "| CPU s of consistent over eventual (medians) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for side, name in ((THIS, "this tree"), (THAT, against)):
        p = sides[side]
        cpu = ("n/a" if p.cpu_over is None
               else ", ".join(f"{k} {v:+.1f}" for k, v in p.cpu_over.items()))  # fmt: skip
        ratios = ", ".join(f"{r:.2f}x" for r in p.ratios)
        mean = f"{p.mean_ratio:.3f}x ± {p.half_width:.3f}"
        lines.append(f"| {name} | {p.runs} | {ratios} | {mean} | {p.consistent:,.0f} / "
                     f"{p.eventual:,.0f} | **{p.ratio:.3f}x** | {cpu} |")  # fmt: skip
    d, half = difference(sides[THIS], sides[THAT])
    verdict = "not resolved" if abs(d) <= half else "resolved"
    lines.append(f"\nthis tree's mean run ratio less {against}'s: {d:+.3f}x ± {half:.3f} "
                 f"(95%, Welch): {verdict}")  # fmt: skip
    return "\n".join(lines)


@contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """A detached ``git worktree`` of ``commit``, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="bench-compare-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], check=True,
                   capture_output=True)  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], check=False,
                       capture_output=True)  # fmt: skip


def _dirty(tree: Path) -> bool:
    """Whether ``tree`` (a git checkout) has changes git would commit."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=tree,
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.returncode == 0 and bool(done.stdout.strip())


def build_extension(tree: Path) -> None:
    """Build the tree's C extension in place, as an install would (trees without one: nothing)."""
    if not (tree / "setup.py").exists():
        return
    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"building the C extension in {tree} failed: {done.stderr[-2000:]}")


def loops(tree: Path) -> str:
    """Which loops ``tree``'s code runs: ``ingest.sink.native.LOOPS`` ("native", or "python:
    <why>") in a tree that had the extension; "python" for every other."""
    probe = "from ingest.sink import native; print(native.LOOPS)"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else "python"


def run_bench(tree: Path, bench_args: Sequence[str]) -> str:
    """One ``bench.ingest.transactions`` run with ``tree``'s code; its report (stdout)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "bench.ingest.transactions", *bench_args]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the benchmark failed in {tree} (exit {done.returncode}): "
                           f"{done.stderr.strip()[-2000:]}")  # fmt: skip
    return done.stdout


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the commit to compare this tree with")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each side")
    parser.add_argument("bench_args", nargs="*", help="after --: bench.ingest.transactions'")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    here = Path(__file__).resolve().parents[2]
    runs: dict[str, list[list[Round]]] = {THIS: [], THAT: []}
    if _dirty(here):
        print("warning: this tree has uncommitted changes: its runs take the files as they are "
              "when each run starts (edit nothing meanwhile, or compare from a worktree of a "
              "commit)", file=sys.stderr, flush=True)  # fmt: skip
    with worktree(args.against) as there:
        build_extension(there)
        sides = {THIS: loops(here), THAT: loops(there)}
        print(f"loops: this tree {sides[THIS]}; {args.against} {sides[THAT]}", flush=True)
        for side in turns(args.pairs):
            rounds = parse_rounds(run_bench(here if side == THIS else there, args.bench_args))
            runs[side].append(rounds)
            print(f"{side}: {_ratio(rounds):.2f}x", file=sys.stderr, flush=True)
    print(f"command: python -m bench.ingest.compare {' '.join(sys.argv[1:])}")
    print(report({side: pooled(r) for side, r in runs.items()}, args.against))
    return 0


if __name__ == "__main__":
    sys.exit(main())
