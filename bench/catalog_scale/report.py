"""The figures of one system and the markdown report: setup and plans, commits, goals."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from bench.catalog_scale.sizes import Sizes
from bench.catalog_scale.writers import RunResult
from bench.common import Environment, percentile_ms

_FULL_PLAN_GOAL_S = 1.0
_ONE_PLAN_GOAL_MS = 5.0
_SCALING_GOAL = 4.0
_PEER_GOAL = 2.0


@dataclass
class Figures:
    system: str
    load_at_start: str
    load_at_end: str = ""
    tables_s: float = math.nan
    big_files: int = 0
    big_setup_s: float = math.nan
    full_plan_s: float = math.nan
    full_plan_files: int = 0
    one_plan_s: float = math.nan
    one_plan_files: int = 0
    runs: dict[str, RunResult] = field(default_factory=dict)
    in_table: dict[str, int] = field(default_factory=dict)


def render(env: Environment, load_at_end: str, sizes: Sizes, figures: Sequence[Figures]) -> str:
    lines = [*env.lines(load_at_end), f"- {_versions()}", ""]
    lines += [
        f"Sizes: {sizes.tables:,} tables; big table {sizes.partitions:,} partitions x "
        f"{sizes.files_per_partition} files (DuckLake: {sizes.ducklake_partitions:,} partitions), "
        f"{sizes.batch_partitions} partitions per setup commit; {sizes.writers} writers x "
        f"{sizes.commits_per_writer} commits; 1 writer x {sizes.single_commits} commits.",
        "",
        *_setup_table(figures),
        "",
        *_commit_table(figures),
        "",
        *_goals(figures),
        *_errors(figures),
    ]
    return "\n".join(lines) + "\n"


def _versions() -> str:
    names = ("duckdb", "duckdb-extension-ducklake", "duckdb-extension-postgres-scanner")
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def _setup_table(figures: Sequence[Figures]) -> list[str]:
    head = "| figure | " + " | ".join(f.system for f in figures) + " |"
    rows = [head, "| --- |" + " ---: |" * len(figures)]

    def row(label: str, cell: Callable[[Figures], str]) -> None:
        rows.append(f"| {label} | " + " | ".join(cell(f) for f in figures) + " |")

    row("create the small tables, s", lambda f: f"{f.tables_s:.1f}")
    row("big table: files registered", lambda f: f"{f.big_files:,}")
    row("big table: setup s (files/s)", lambda f: f"{f.big_setup_s:.1f} ({_per_s(f):,.0f}/s)")
    row(
        "full plan, s (files)",
        lambda f: f"{f.full_plan_s:.3f} ({f.full_plan_files:,})",
    )
    row(
        "one-partition plan, ms (files)",
        lambda f: f"{f.one_plan_s * 1000:.1f} ({f.one_plan_files:,})",
    )
    row("load at start of the system", lambda f: f.load_at_start)
    return rows


def _per_s(f: Figures) -> float:
    return f.big_files / f.big_setup_s if f.big_setup_s else math.nan


def _commit_table(figures: Sequence[Figures]) -> list[str]:
    rows = [
        "| run | system | commits | in table | failed | raised | commits/s | p50 ms | p99 ms "
        "| x 1 writer | lakestream / DuckLake |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    peer = {f.system: f for f in figures}
    for label in figures[0].runs:
        for f in figures:
            r = f.runs[label]
            single = f.runs[next(iter(f.runs))].rate
            ratio = _peer_ratio(peer, label)
            rows.append(
                f"| {label} | {f.system} | {r.commits:,} | {f.in_table[label]:,} | {r.failed} "
                f"| {r.raised} | {r.rate:.1f} | {percentile_ms(r.latencies_s, 50):.1f} "
                f"| {percentile_ms(r.latencies_s, 99):.1f} | {r.rate / single:.2f} | {ratio} |"
            )
    return rows


def _peer_ratio(peer: dict[str, Figures], label: str) -> str:
    if "lakestream" not in peer or "ducklake" not in peer:
        return "-"
    ours, theirs = peer["lakestream"].runs[label].rate, peer["ducklake"].runs[label].rate
    return f"{ours / theirs:.2f}"


def _goals(figures: Sequence[Figures]) -> list[str]:
    ours = next((f for f in figures if f.system == "lakestream"), None)
    if ours is None:
        return []
    labels = list(ours.runs)
    single, distinct = ours.runs[labels[0]], ours.runs[labels[1]]
    scaling = distinct.rate / single.rate
    goals = [
        (
            f"full plan of {ours.full_plan_files:,} files <= {_FULL_PLAN_GOAL_S:g} s",
            ours.full_plan_s <= _FULL_PLAN_GOAL_S,
            f"{ours.full_plan_s:.3f} s",
        ),
        (
            f"one partition <= {_ONE_PLAN_GOAL_MS:g} ms",
            ours.one_plan_s * 1000 <= _ONE_PLAN_GOAL_MS,
            f"{ours.one_plan_s * 1000:.1f} ms",
        ),
        (
            f"{labels[1]} >= {_SCALING_GOAL:g}x the single-writer rate, 0 failures",
            scaling >= _SCALING_GOAL and distinct.failed == 0,
            f"{scaling:.2f}x, {distinct.failed} failed",
        ),
    ]
    peer = next((f for f in figures if f.system == "ducklake"), None)
    if peer is not None:
        ratios = [ours.runs[label].rate / peer.runs[label].rate for label in labels]
        goals.append(
            (
                f">= {_PEER_GOAL:g}x DuckLake's commit rate in every row",
                min(ratios) >= _PEER_GOAL,
                ", ".join(f"{r:.2f}x" for r in ratios),
            )
        )
    return ["Goals (lakestream):", ""] + [
        f"- {'met' if met else 'MISSED'}: {text} ({value})" for text, met, value in goals
    ]


def _errors(figures: Sequence[Figures]) -> list[str]:
    """What the raised attempts were, so a failure can be told from a retried conflict."""
    found = [
        f"- {f.system}, {label}: "
        + ", ".join(f"{name} x{count}" for name, count in r.errors.most_common())
        for f in figures
        for label, r in f.runs.items()
        if r.errors
    ]
    return ["", "Raised by the commit calls:", "", *found] if found else []
