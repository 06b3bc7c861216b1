"""The benchmark's report: environment, figures, ratios, where lakestream's time goes."""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import load_average, package_version
from bench.ingest.pipelines import Measurement
from bench.ingest.tables import TableCheck
from bench.ingest.task_profile import TaskProfile
from bench.ingest.workload import Produced, Workload
from bench.machine import cpu_model, git_head, java_version, ram_gib

#: The issue's goals: lakestream / bare pipeline and lakestream / raw consume.
GOAL_VS_BARE = 1.0
GOAL_VS_RAW = 0.5
_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Environment:
    command: str
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    load_at_start: str = field(default_factory=load_average)
    pg_version: str = "?"

    def lines(self, load_at_end: str) -> list[str]:
        packages = ("pyspark", "pyarrow", "confluent-kafka", "orjson", "numpy")
        versions = ", ".join(f"{p} {package_version(p)}" for p in packages)
        return [
            f"- command: `{self.command}`",
            f"- date: {self.started:%Y-%m-%d %H:%M} UTC; lakestream commit {git_head()}",
            f"- machine: `nproc` {os.cpu_count()}, {cpu_model()}, {ram_gib():.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}",
            f"- load average (1/5/15 min) {self.load_at_start} at start, {load_at_end} at end "
            "(the machine is shared with other sessions)",
            f"- Python {platform.python_version()}, {versions}, librdkafka "
            f"{_librdkafka()}, {java_version()}, {_kafka()}, PostgreSQL {self.pg_version} "
            "(jobs.localpg: fsync off)",
        ]


@dataclass
class Results:
    workload: Workload
    produced: Produced
    settings: Mapping[str, Any]
    raw: list[Measurement] = field(default_factory=list)
    bare: list[Measurement] = field(default_factory=list)
    from_json: list[Measurement] = field(default_factory=list)
    skeleton: list[Measurement] = field(default_factory=list)
    lakestream: list[Measurement] = field(default_factory=list)
    checks: list[TableCheck] = field(default_factory=list)
    batch_logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    profile: TaskProfile | None = None


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _rate(items: Sequence[Measurement]) -> float:
    return _median([m.rate for m in items])


def _in_batch_rate(items: Sequence[Measurement]) -> float:
    rates = [m.in_batch_rate for m in items if m.in_batch_rate]
    return _median([r for r in rates if r is not None])


def ratios(results: Results) -> dict[str, float]:
    lake = _rate(results.lakestream)
    out = {
        "lakestream / bare (end to end)": lake / _rate(results.bare),
        "lakestream / raw consume": lake / _rate(results.raw),
        "lakestream / bare (inside batches)": _in_batch_rate(results.lakestream)
        / _in_batch_rate(results.bare),
    }
    if results.from_json:
        out["lakestream / bare + from_json (end to end)"] = lake / _rate(results.from_json)
    return out


def markdown(results: Results, env: Environment, load_at_end: str) -> str:
    w, p = results.workload, results.produced
    s = results.settings
    lines = [*env.lines(load_at_end), ""]
    envelope = "with embedded Connect schema" if w.embedded_schema else "schemaless"
    lines += [
        f"Workload: {w.events:,} Debezium JSON change events ({envelope}, mean value "
        f"{p.mean_value_bytes:.0f} B) over {w.distinct_keys:,} keys "
        f"({w.distinct_keys:,} creates, {w.events - w.distinct_keys:,} updates) on "
        f"{w.partitions} partitions; produced in {p.seconds:.1f} s "
        f"({w.events / p.seconds:,.0f} events/s, batched); "
        f"end offsets {p.end_offsets} = produced counts.",
        f"Spark `local[2]`, AvailableNow, maxOffsetsPerTrigger {s['max_offsets']:,}; "
        f"lakestream: hash_buckets {s['buckets']}, "
        f"{'table created by the job' if s['new_table'] else 'table created up front'}; "
        f"{s['repeat']} measured round(s) after one unmeasured warm-up round "
        f"({s['warmup_events']:,} events); medians shown.",
        "",
        "| pipeline | events | seconds end to end | events/s end to end | events/s inside "
        "batches | batches |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for items in _pipelines(results):
        first = items[0]
        in_batch = _in_batch_rate(items)
        lines.append(
            f"| {first.name} | {first.events:,} | {_median([m.seconds for m in items]):.2f} | "
            f"{_rate(items):,.0f} | {'-' if math.isnan(in_batch) else f'{in_batch:,.0f}'} | "
            f"{first.data_batches or '-'} |"
        )
    lines.append("")
    goals = {
        "lakestream / bare (end to end)": GOAL_VS_BARE,
        "lakestream / raw consume": GOAL_VS_RAW,
    }
    for name, value in ratios(results).items():
        goal = goals.get(name)
        verdict = (
            "" if goal is None else (f" (goal >= {goal}: {'met' if value >= goal else 'missed'})")
        )
        lines.append(f"- {name}: **{value:.2f}x**{verdict}")
    lines += ["", *_cpu(results), "", *_checks(results), "", *_breakdown(results)]
    if results.profile is not None:
        lines += ["", *_profile(results.profile)]
    return "\n".join(lines) + "\n"


def _pipelines(results: Results) -> list[list[Measurement]]:
    every = (results.raw, results.bare, results.from_json, results.skeleton, results.lakestream)
    return [items for items in every if items]


def cpu_per_event(items: Sequence[Measurement]) -> float:
    """Median CPU microseconds per event (all components) over the runs."""
    return _median([sum(m.notes["cpu"].values()) * 1e6 / m.events for m in items])


def _cpu(results: Results) -> list[str]:
    """CPU seconds by component (the run with the median total), a load-robust view."""
    lines = [
        "CPU time by process (from /proc; less sensitive to the machine's load than wall time; "
        "`busy cores` = CPU / wall; the total includes processes of no listed kind):",
        "",
        "| pipeline | driver s | JVM s | Python workers s | broker s | total CPU s | "
        "CPU µs/event | busy cores |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for items in _pipelines(results):
        ranked = sorted(items, key=lambda m: sum(m.notes["cpu"].values()))
        m = ranked[len(ranked) // 2]
        used = m.notes["cpu"]
        total = sum(used.values())
        lines.append(
            f"| {m.name} | {used['driver']:.1f} | {used['jvm']:.1f} | "
            f"{used['python workers']:.1f} | {used['broker']:.1f} | {total:.1f} | "
            f"{total * 1e6 / m.events:.1f} | {total / m.seconds:.2f} |"
        )
    if results.bare and results.lakestream:
        lake = cpu_per_event(results.lakestream)
        lines += [
            "",
            f"- CPU per event, lakestream / bare: {lake / cpu_per_event(results.bare):.2f}x; "
            f"lakestream / raw consume: {lake / cpu_per_event(results.raw):.2f}x",
        ]
    return lines


def _checks(results: Results) -> list[str]:
    out = []
    for check in results.checks:
        out.append(
            f"- check: table rows {check.rows:,} = distinct keys {check.distinct_keys:,}: "
            f"{check.rows == check.distinct_keys}; {check.sampled:,} sampled keys hold their "
            f"last event's values: {check.mismatches == 0} ({check.mismatches} mismatches); "
            f"dead letters {check.dead_letters}; offsets committed with the data "
            f"{check.committed_offsets:,}; table version {check.versions}; "
            f"schema unchanged {check.schema_unchanged}"
        )
    return out


def _breakdown(results: Results) -> list[str]:
    """Per lakestream batch: Spark's phases and the sink's write/commit split (first round)."""
    if not results.lakestream:
        return []
    run = results.lakestream[0]
    logs = results.batch_logs.get(str(run.notes.get("job")), [])
    by_batch = {int(entry["batch"]): entry for entry in logs}
    lines = [
        "Where lakestream's time goes (first measured round; ms; `write`/`commit` from the "
        "job's `batch_committed` log lines, the rest from Spark's progress events):",
        "",
        "| batch | records | trigger total | latestOffset + planning | addBatch | - write "
        "(tasks: read + decode + Parquet) | - commit (catalog) | - other sink work | "
        "walCommit + commitOffsets | files | MB |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    totals = [0] * 8
    for batch in run.batches:
        if not batch.rows:
            continue
        d = batch.duration_ms
        entry = by_batch.get(batch.batch_id, {})
        write = int(entry.get("write_ms", 0))
        commit = int(entry.get("commit_ms", 0))
        add = d.get("addBatch", 0)
        values = [
            d.get("triggerExecution", 0),
            d.get("latestOffset", 0) + d.get("queryPlanning", 0) + d.get("getBatch", 0),
            add,
            write,
            commit,
            add - write - commit,
            d.get("walCommit", 0) + d.get("commitOffsets", 0),
            int(entry.get("files", 0)),
        ]
        totals = [t + v for t, v in zip(totals, values, strict=True)]
        mb = int(entry.get("bytes", 0)) / 1e6
        lines.append(
            f"| {batch.batch_id} | {batch.rows:,} | "
            + " | ".join(f"{v:,}" for v in values)
            + f" | {mb:.1f} |"
        )
    lines.append("| all | " + f"{run.events:,} | " + " | ".join(f"{v:,}" for v in totals) + " | |")
    outside = run.seconds * 1000 - totals[0]
    lines += [
        "",
        f"End to end {run.seconds * 1000:,.0f} ms, of which {outside:,.0f} ms outside "
        "micro-batches (query start: the source's planner process, checkpoint setup; the "
        "final empty trigger; stop).",
    ]
    ranges = int(run.notes.get("spark_input_ranges", 0))
    lines.append(
        f"Spark carried {ranges:,} offset-range rows for {run.events:,} events: the job's "
        "source emits ranges and its write tasks read the records from Kafka themselves."
    )
    return lines


def _profile(profile: TaskProfile) -> list[str]:
    lines = [
        f"One executor task outside Spark (partition 0, {profile.records:,} events, one core, "
        f"per CPU second): reading the range alone (Kafka -> record chunks) "
        f"{profile.read_rate:,.0f} events/s; `write_task` (read, decode, conform, write "
        f"{profile.files} files) {profile.task_rate:,.0f} events/s. Under cProfile "
        f"`write_task` took {profile.profiled_seconds:.2f} CPU s.",
        "",
        "| stage of write_task, run one by one | CPU µs/event | share of write_task |",
        "| --- | ---: | ---: |",
    ]
    lines += [
        f"| {label} | {seconds * 1e6 / profile.records:.2f} | "
        f"{seconds / profile.task_seconds:.0%} |"
        for label, seconds in profile.stages
    ]
    lines.append(
        f"| write_task end to end | {profile.task_seconds * 1e6 / profile.records:.2f} | 100% |"
    )
    lines += [
        "",
        "| function (top by own time, cProfile) | calls | own s | cumulative s |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| `{name}` | {calls:,} | {own:.3f} | {cum:.3f} |" for name, calls, own, cum in profile.top
    ]
    return lines


def _librdkafka() -> str:
    import confluent_kafka

    return str(confluent_kafka.libversion()[0])


def _kafka() -> str:
    from ingest.kafka.apache_kafka import KAFKA_VERSION

    return f"Apache Kafka {KAFKA_VERSION} (KRaft, one node)"
