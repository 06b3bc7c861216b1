"""The steady-state section of the report (the append section renders itself in append.py)."""

from __future__ import annotations

import statistics

from bench.common import median_ms, percentile_ms
from bench.compact.steady import (
    GOAL_RATIO,
    GOAL_WRITE_AMPLIFICATION,
    TREND_TOLERANCE,
    SteadyResult,
    lag_commits,
    lag_seconds,
    ratios,
    trend,
)
from bench.read.phases import PHASES


def render_steady(result: SteadyResult) -> list[str]:
    a = result.args
    pace = f"one every {a.interval:g} s" if a.interval else "as fast as the writer can"
    lines = [
        f"{a.commits:,} upserts of {a.rows:,} rows ({a.updates:.0%} updates), {a.buckets} "
        f"buckets, {pace}; the compactor service (coordinator + {a.workers} worker process"
        f"{'es' if a.workers != 1 else ''}, default thresholds) in its own process; reads "
        f"every {a.every} commits, median of {a.read_repeats} alternating reads each.",
        "",
        *(f"- {c}" for c in result.checks),
        "",
        *checkpoint_table(result),
        "",
        *goal_lines(result),
        *amplification_lines(result),
        "",
        *phase_lines(result),
        "",
        *lag_lines(result),
        "",
        *cpu_lines(result),
    ]
    return lines


def checkpoint_table(result: SteadyResult) -> list[str]:
    rows = [
        "| commits | version | files per bucket | rows decoded / live | latest ms "
        "| compacted ms | ratio | load 1 min |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in result.checkpoints:
        rows.append(
            f"| {c.commits:,} | {c.version:,} | {' '.join(map(str, c.runs))} "
            f"| {c.rows_decoded:.3f} | {c.latest_ms:.1f} | {c.compacted_ms:.1f} "
            f"| {c.ratio:.2f}x | {c.load:.1f} |"
        )
    return rows


def goal_lines(result: SteadyResult) -> list[str]:
    values = ratios(result)
    if not values:
        return ["- no checkpoint: --commits is below --every"]
    first, last, slope = trend(result)
    worst = max(values)
    stays = "met" if worst <= GOAL_RATIO else "MISSED"
    flat = "met" if last <= first + TREND_TOLERANCE else "MISSED"
    above = sum(v > GOAL_RATIO for v in values)
    return [
        f"- **latest / compacted read: median {statistics.median(values):.2f}x, max "
        f"{worst:.2f}x** over {len(values)} checkpoints ({above} above {GOAL_RATIO}x); "
        f"goal stays <= {GOAL_RATIO}x: **{stays}**",
        f"- trend: first-third median {first:.2f}x, last-third median {last:.2f}x, "
        f"least-squares slope {slope:+.3f}x per 1,000 commits; goal no upward trend "
        f"(last third <= first third + {TREND_TOLERANCE}): **{flat}**",
    ]


def amplification_lines(result: SteadyResult) -> list[str]:
    amp = result.amplification
    if amp is None or amp.ratio is None:
        return ["- write amplification: not measured"]
    met = "met" if amp.ratio <= GOAL_WRITE_AMPLIFICATION else "MISSED"
    return [
        f"- **write amplification {amp.ratio:.2f}x** (bytes compaction wrote "
        f"{amp.compaction_bytes_written:,} / bytes the upserts added "
        f"{amp.ingest_bytes_added:,}, every version of the run, from the catalog's version "
        f"summaries); goal <= {GOAL_WRITE_AMPLIFICATION:g}x: **{met}**"
    ]


def phase_lines(result: SteadyResult) -> list[str]:
    """The phase-timed reads of the last checkpoint (the largest table)."""
    last = next((c for c in reversed(result.checkpoints) if c.phases), None)
    if last is None:
        return []
    latest, compacted = last.phases["latest"], last.phases["compacted"]
    lines = [
        f"Where the reads of the last checkpoint (commit {last.commits:,}) spend their time: "
        "phase-timed copies of both reads (bench/read/phases.py, buckets one by one, "
        "same alternation; medians):",
        "",
        "| phase | what | latest ms | compacted ms |",
        "| --- | --- | ---: | ---: |",
    ]
    for phase, what in PHASES.items():
        lines.append(f"| {phase} | {what} | {_ms(latest, phase)} | {_ms(compacted, phase)} |")
    return lines


def _ms(phases: dict[str, float], phase: str) -> str:
    return f"{phases[phase]:.1f}" if phase in phases else "-"


def lag_lines(result: SteadyResult) -> list[str]:
    seconds, commits = lag_seconds(result), lag_commits(result)
    pending = sum(lag.seconds is None for lag in result.lags)
    lines = [
        "Compaction lag (commit -> the compaction versions that fold it in every bucket it "
        "touched; catalog clock):",
        "",
        "| upserts | folded | lag p50 s | lag p90 s | lag max s | p50 commits behind "
        "| p90 commits behind |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    window = max(1, len(result.lags) // 10)
    for start in range(0, len(result.lags), window):
        part = result.lags[start : start + window]
        s = [lag.seconds for lag in part if lag.seconds is not None]
        n = [float(lag.commits) for lag in part if lag.commits is not None]
        lines.append(
            f"| {start + 1}-{start + len(part)} | {len(s)} of {len(part)} | {_p(s, 50)} "
            f"| {_p(s, 90)} | {max(s) if s else float('nan'):.1f} | {_p(n, 50, 0)} "
            f"| {_p(n, 90, 0)} |"
        )
    lines += [
        "",
        f"- **lag over the run: p50 {_p(seconds, 50)} s, p90 {_p(seconds, 90)} s, max "
        f"{max(seconds) if seconds else float('nan'):.1f} s**; in commits landed meanwhile "
        f"p50 {_p(commits, 50, 0)}, p90 {_p(commits, 90, 0)}; not folded at the end: {pending}",
    ]
    return lines


def cpu_lines(result: SteadyResult) -> list[str]:
    usage = result.usage
    a = result.args
    ingested = a.commits * a.rows
    rewritten = sum(c.rows_out for c in result.compactions)
    tasks = len(result.compactions)
    durations = "-"
    if usage is None:
        return ["- compactor CPU: not measured (the service did not report)"]
    per_row = usage.cpu_s / ingested * 1e6
    ingest_per_row = result.ingest_cpu_s / ingested * 1e6
    durations = (
        f"upsert p50 {median_ms(result.upsert_s):.1f} ms, p99 "
        f"{percentile_ms(result.upsert_s, 99):.1f} ms"
    )
    return [
        f"- **compactor CPU per ingested row: {per_row:.2f} µs** ({usage.cpu_s:.1f} s over "
        f"{ingested:,} rows: coordinator {usage.coordinator_cpu_s:.1f} s, workers "
        f"{usage.workers_cpu_s:.1f} s; the service ran {usage.alive_s:.0f} s)",
        f"- the writer's own CPU per ingested row, for scale: {ingest_per_row:.2f} µs "
        f"({result.ingest_cpu_s:.1f} s in `Table.upsert`); {durations}",
        f"- compactions landed: {tasks} ({tasks / max(1, a.buckets):.0f} per bucket); rows "
        f"rewritten {rewritten:,} = {rewritten / ingested:.1f}x the rows ingested",
    ]


def _p(values: list[float], q: float, digits: int = 1) -> str:
    if not values:
        return "-"
    return f"{percentile_ms(values, q) / 1000:.{digits}f}"
