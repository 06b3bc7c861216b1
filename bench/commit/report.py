"""From writer reports to the figures: rates, latency percentiles, drift, raised and lost.

*Rate* is commits done over the wall time from the first commit's start to the last commit's
end, across all writers. *Drift* compares the median latency of the first 50 commits with that
of the last 50 (by start time): a catalog whose commit cost grows with history shows it there.
*Lost* counts commits whose call returned success but whose file no reader of the latest version
sees; *phantom* counts files visible although no successful call added them.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from harness import CommitRecord, Verification, WriterReport

WINDOW = 50


@dataclass(frozen=True)
class SystemResult:
    system: str
    writers: int
    planned: int
    done: int
    elapsed_s: float
    p50_ms: float
    p99_ms: float
    first_p50_ms: float
    last_p50_ms: float
    raised: int
    retried: int
    failed: int
    internal_retries: int | None
    lost: int
    phantom: int
    duplicates: int
    capped: bool
    errors: dict[str, int]
    notes: list[str] = field(default_factory=list)
    #: median latency (ms) of each tenth of the commits, in start order: the growth curve
    tenths_p50_ms: list[float] = field(default_factory=list)
    #: seconds from the first start to the end of the k-th commit, k = 1..done (in end order)
    completion_s: list[float] = field(default_factory=list, repr=False)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def drift(self) -> float:
        return self.last_p50_ms / self.first_p50_ms if self.first_p50_ms > 0 else float("nan")

    def rate_over_first(self, count: int) -> float:
        """Commits/s over this system's first ``count`` commits: a like-for-like history."""
        count = min(count, self.done)
        return count / self.completion_s[count - 1] if count else 0.0


def summarise(
    system: str,
    writers: int,
    planned: int,
    reports: Sequence[WriterReport],
    verification: Verification,
    *,
    notes: Sequence[str] = (),
) -> SystemResult:
    records = sorted((r for rep in reports for r in rep.records), key=lambda r: r.start_ns)
    if not records:
        raise RuntimeError(f"{system}: no commit completed")
    latencies = [_ms(r) for r in records]
    t0 = records[0].start_ns
    ends = sorted(r.end_ns for r in records)
    errors: Counter[str] = Counter()
    for rep in reports:
        errors.update(rep.errors)
    done_ids = {r.commit_id for r in records}
    visible = Counter(verification.visible)
    return SystemResult(
        system=system,
        writers=writers,
        planned=planned,
        done=len(records),
        elapsed_s=(ends[-1] - t0) / 1e9,
        p50_ms=statistics.median(latencies),
        p99_ms=_percentile(latencies, 0.99),
        first_p50_ms=statistics.median(latencies[:WINDOW]),
        last_p50_ms=statistics.median(latencies[-WINDOW:]),
        raised=sum(errors.values()),
        retried=sum(rep.retried for rep in reports),
        failed=sum(len(rep.failed) for rep in reports),
        internal_retries=_sum_known(rep.internal_retries for rep in reports),
        lost=len(done_ids - visible.keys()),
        phantom=len(visible.keys() - done_ids),
        duplicates=sum(n - 1 for n in visible.values() if n > 1),
        capped=any(rep.budget_hit for rep in reports),
        errors=dict(errors),
        notes=[*verification.notes, *notes],
        tenths_p50_ms=_tenths(latencies),
        completion_s=[(end - t0) / 1e9 for end in ends],
    )


def _tenths(latencies: Sequence[float]) -> list[float]:
    size = len(latencies) / 10
    slices = [latencies[round(k * size) : round((k + 1) * size)] for k in range(10)]
    return [statistics.median(part) for part in slices if part]


def _sum_known(values: Iterable[int | None]) -> int | None:
    known = list(values)
    return None if any(v is None for v in known) else sum(v for v in known if v is not None)


def _ms(record: CommitRecord) -> float:
    return (record.end_ns - record.start_ns) / 1e6


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: the value below which a fraction ``q`` of samples fall."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


HEADER = (
    "| system | commits done | commits/s | p50 ms | p99 ms | first-50 p50 ms | last-50 p50 ms "
    "| last/first | raised | retried | failed | lost |\n"
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
)


def mode_table(results: Sequence[SystemResult]) -> str:
    rows = [HEADER]
    for r in results:
        done = f"{r.done:,} of {r.planned:,}" + (" (capped)" if r.capped else "")
        rows.append(
            f"| {r.system} | {done} | {r.rate:,.1f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} "
            f"| {r.first_p50_ms:.2f} | {r.last_p50_ms:.2f} | {r.drift:.2f} | {r.raised} "
            f"| {r.retried} | {r.failed} | {r.lost} |"
        )
    return "\n".join(rows)


def ratio_lines(results: Sequence[SystemResult], subject: str = "lakestream") -> list[str]:
    """lakestream over the best peer: overall, and over the same number of commits the peer did.

    A capped peer is measured over a short history, where it is fastest; comparing lakestream
    over its own first K commits (K = what the peer did) removes that advantage from neither
    side, so both ratios are given.
    """
    ours = next(r for r in results if r.system == subject)
    peers = [r for r in results if r.system != subject]
    if not peers:
        return []
    best = max(peers, key=lambda r: r.rate)
    same = ours.rate_over_first(best.done)
    return [
        f"- best peer: **{best.system}** at {best.rate:,.1f} commits/s over {best.done:,} commits",
        f"- lakestream / best peer, commits/s: **{ours.rate / best.rate:.1f}x** "
        f"({ours.rate:,.1f} over {ours.done:,} commits vs {best.rate:,.1f} over {best.done:,})",
        f"- lakestream / best peer over the same first {best.done:,} commits: "
        f"**{same / best.rate:.1f}x** ({same:,.1f} vs {best.rate:,.1f} commits/s)",
        f"- lakestream / best peer, p50 latency: {ours.p50_ms / best.p50_ms:.2f}x "
        f"({ours.p50_ms:.2f} vs {best.p50_ms:.2f} ms)",
    ]


def detail_lines(results: Sequence[SystemResult]) -> list[str]:
    """Per-system facts behind the table: errors by class, internal retries, verification."""
    lines = []
    for r in results:
        errors = ", ".join(f"{k} x{v}" for k, v in sorted(r.errors.items())) or "none"
        facts = [
            f"errors raised: {errors}",
            "internal retries: "
            + ("not reported" if r.internal_retries is None else str(r.internal_retries)),
            f"phantom files: {r.phantom}",
            f"duplicate files: {r.duplicates}",
            f"wall time {r.elapsed_s:.1f} s",
            "p50 ms by tenth of the run: " + " / ".join(f"{v:.1f}" for v in r.tenths_p50_ms),
            *r.notes,
        ]
        lines.append(f"- {r.system}: " + "; ".join(facts))
    return lines


def goal_lines(modes: Sequence[Sequence[SystemResult]], subject: str = "lakestream") -> list[str]:
    """The issue's goals for lakestream, each marked met or missed."""
    lines = []
    for results in modes:
        ours = next(r for r in results if r.system == subject)
        peers = [r for r in results if r.system != subject]
        best = max(peers, key=lambda r: r.rate) if peers else None
        label = f"{ours.writers} writer{'s' if ours.writers > 1 else ''}"
        if best is not None:
            ratio = ours.rate / best.rate
            lines.append(
                f"- {label}: >= 2x best peer commits/s: {_mark(ratio >= 2)} ({ratio:.1f}x)"
            )
        safe = ours.raised == 0 and ours.lost == 0 and ours.failed == 0
        lines.append(
            f"- {label}: zero raised, zero lost: {_mark(safe)} "
            f"(raised {ours.raised}, lost {ours.lost}, failed {ours.failed})"
        )
        lines.append(
            f"- {label}: last-50 p50 <= 1.1x first-50 p50: {_mark(ours.drift <= 1.1)} "
            f"({ours.drift:.2f}x)"
        )
    return lines


def _mark(ok: bool) -> str:
    return "met" if ok else "**MISSED**"
