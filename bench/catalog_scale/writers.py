"""W writer processes (multiprocessing spawn), a start barrier, timed commits.

The same loop as bench/commit's harness, cut to what this benchmark needs: every writer opens
its own handle before the barrier (untimed), then times each logical commit from its first
attempt to success. An exception escaping the system's commit call counts as *raised* and the
same commit is tried again; after :data:`MAX_ATTEMPTS` raised attempts it counts as *failed*.
(bench/commit's harness is bound to that benchmark's workload and system modules by name, so it
is not imported here; the two share :func:`bench.common.spawn_writers`.)
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.catalog_scale.systems import open_writer
from bench.common import spawn_writers

MAX_ATTEMPTS = 50
_BARRIER_TIMEOUT_S = 600.0


@dataclass
class WriterReport:
    writer_index: int
    spans_ns: list[tuple[int, int]] = field(default_factory=list)
    raised: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    broken: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """What every writer process of one run gets (picklable)."""

    system: str
    context: object
    commits: int


@dataclass(frozen=True)
class RunResult:
    writers: int
    commits: int
    wall_s: float
    latencies_s: list[float]
    raised: int
    failed: int
    errors: Counter[str]

    @property
    def rate(self) -> float:
        return self.commits / self.wall_s if self.wall_s else float("nan")


def run_writers(system: str, context: object, writers: int, commits: int) -> RunResult:
    """Start the writers, release them together, collect and merge their reports."""
    spec = RunSpec(system, context, commits)
    reports: list[WriterReport] = spawn_writers(_writer_main, spec, writers)
    broken = [r.broken for r in reports if r.broken]
    if broken:
        raise RuntimeError(f"{system}: a writer failed: {broken[0]}")
    return _merge(reports)


def _merge(reports: Sequence[WriterReport]) -> RunResult:
    spans = [span for r in reports for span in r.spans_ns]
    wall = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e9 if spans else 0.0
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r.errors)
    return RunResult(
        writers=len(reports),
        commits=len(spans),
        wall_s=wall,
        latencies_s=[(e - s) / 1e9 for s, e in spans],
        raised=sum(r.raised for r in reports),
        failed=sum(r.failed for r in reports),
        errors=errors,
    )


def _writer_main(spec: RunSpec, index: int, barrier: Any, queue: Any) -> None:
    from bench.common import quiet_logging

    quiet_logging()
    report = WriterReport(index)
    try:
        writer = open_writer(spec.system, spec.context, index)
    except Exception as exc:  # reported to the parent, which aborts the run
        report.broken = f"{type(exc).__name__}: {exc}"
        barrier.abort()
        queue.put(report)
        return
    try:
        barrier.wait(timeout=_BARRIER_TIMEOUT_S)
        for commit_id in range(spec.commits):
            _commit_one(writer, commit_id, report)
    except threading.BrokenBarrierError:
        report.broken = "another writer failed to start"
    finally:
        writer.close()
        queue.put(report)


def _commit_one(writer: Any, commit_id: int, report: WriterReport) -> None:
    start = time.monotonic_ns()
    for attempt in range(MAX_ATTEMPTS):
        try:
            if attempt:
                writer.recover()
            writer.commit(commit_id)
        except Exception as exc:  # every system has its own conflict error: count them all
            report.raised += 1
            report.errors[type(exc).__name__] += 1
        else:
            report.spans_ns.append((start, time.monotonic_ns()))
            return
    report.failed += 1
