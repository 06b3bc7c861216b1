"""Append compaction: N small appends, then ONE full compaction, lakestream vs delta-rs.

Both systems take the same ``appends`` batches of ``rows`` rows (unique ids, the bench's order
rows), one commit each, untimed. Then each compacts everything in one call, timed:

* lakestream through ``lakestream tables compact``'s code path (``jobs.table_compact
  .compact_table``: load the table, plan with ``plan_table(..., force=True)`` at the current
  version, run every task with ``compaction.rewrite.compact``, the one routine);
* delta-rs ``DeltaTable(path).optimize.compact()`` (its defaults: 100 MB target, all cores).

A compaction can only run once per table, so every repeat builds fresh tables; the systems take
turns in a rotating order. A phase-timed copy of lakestream's compaction (the routine's steps done
one by one with the package's own functions, on a table of its own, in the same rotation) shows
where its time goes.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake

from bench.common import SCHEMA, PhaseClock, median_ms, payload, progress, same_rows
from catalog import Catalog, CommitOp, DataFile, FileAction, FileOp, PartitionCommit, Table
from catalog.files.reader import read_whole_files
from catalog.files.writer import WriteOptions, write_data_files
from catalog.meta import TableMeta
from compaction.planner import bins_of, plan_table
from compaction.policy import TARGET_FILE_SIZE, CompactionPolicy
from compaction.task import CompactionTask, OutcomeStatus
from jobs.table_compact import compact_table

#: The goal: lakestream's compaction at most this many times delta-rs's.
GOAL_RATIO = 1.0
LAKESTREAM, NO_FSYNC, DELTA = "lakestream", "lakestream, fsync off", "deltalake"
PHASED = "lakestream, phase-timed"

#: Phase name -> what it covers, in the order the routine runs them.
PHASES = {
    "plan": "load the table, scan plan at the head, `plan_table(force=True)`",
    "read": "read the inputs bin by bin (`read_whole_files`: one dataset per bin)",
    "write": "write the output file after file (`write_data_files`: Parquet+zstd, stats, fsync, "
    "rename; the routine writes a bin of several target sizes at once)",
    "commit": "the COMPACTION commit (500 deletes + 1 add, `Table.commit`)",
}
#: Not part of the total: the same inputs read by one pyarrow dataset over all the files.
REFERENCE_READ = "reference: one `pyarrow.dataset` over all inputs"


def append_batches(appends: int, rows: int, seed: int = 42) -> list[pa.Table]:
    """``appends`` batches of ``rows`` rows with ids unique over all of them."""
    rng = np.random.default_rng(seed)
    return [payload(np.arange(i * rows, (i + 1) * rows), rng, i) for i in range(appends)]


class System(Protocol):
    name: str

    def build(self, batches: Sequence[pa.Table]) -> None:
        """Untimed: a fresh table holding one commit per batch."""

    def compact(self) -> None:
        """Timed: one full compaction."""

    def read(self) -> pa.Table: ...

    def live_files(self) -> int: ...


class Lakestream:
    """An append table compacted by ``lakestream tables compact``'s code path."""

    def __init__(
        self, catalog: Catalog, name: str, *, fsync: bool, target_bytes: int | None = None
    ) -> None:
        self.name = LAKESTREAM if fsync else NO_FSYNC
        self.catalog = catalog
        self.table_name = name
        self.fsync = fsync
        self.target_bytes = target_bytes

    def build(self, batches: Sequence[pa.Table]) -> None:
        target = self.target_bytes
        properties = {TARGET_FILE_SIZE: str(target)} if target else None
        table = self.catalog.create_table(self.table_name, SCHEMA, properties=properties)
        for batch in batches:
            table.append(batch)

    def compact(self) -> None:
        options = WriteOptions(fsync=self.fsync)
        report = compact_table(self.catalog, self.table_name, options=options)
        _check_landed(self.table_name, [o.status for o in report.outcomes])

    def read(self) -> pa.Table:
        return self.catalog.load_table(self.table_name).scan().to_arrow()

    def live_files(self) -> int:
        return len(self.catalog.load_table(self.table_name).plan().files)


class Delta:
    def __init__(self, path: Path, target_bytes: int | None = None) -> None:
        self.name = DELTA
        self.path = path
        self.target_bytes = target_bytes

    def build(self, batches: Sequence[pa.Table]) -> None:
        DeltaTable.create(str(self.path), SCHEMA)
        for batch in batches:
            write_deltalake(str(self.path), batch, mode="append")

    def compact(self) -> None:
        DeltaTable(str(self.path)).optimize.compact(target_size=self.target_bytes)

    def read(self) -> pa.Table:
        return DeltaTable(str(self.path)).to_pyarrow_table()

    def live_files(self) -> int:
        return len(DeltaTable(str(self.path)).file_uris())


class Phased:
    """The routine's steps for an append table, one by one, timed (see :data:`PHASES`)."""

    name = PHASED

    def __init__(self, catalog: Catalog, name: str, target_bytes: int | None = None) -> None:
        self.catalog = catalog
        self.table_name = name
        self.target_bytes = target_bytes
        self.times: dict[str, list[float]] = {p: [] for p in [*PHASES, REFERENCE_READ]}

    def build(self, batches: Sequence[pa.Table]) -> None:
        lakestream = Lakestream(
            self.catalog, self.table_name, fsync=True, target_bytes=self.target_bytes
        )
        lakestream.build(batches)

    def compact(self) -> None:
        clock = PhaseClock()
        table = self.catalog.load_table(self.table_name)
        tasks = clock.run("plan", lambda: _force_plan(self.catalog, self.table_name))
        for task in tasks:
            outputs: list[DataFile] = []
            for group in bins_of(task.inputs, task.target_file_size):
                rows = clock.run("read", _read_inputs, table.meta.location, group, table.meta)
                outputs += clock.run("write", _write_bin, table, task, rows)
            ops = [FileOp(action=FileAction.DELETE, file=f) for f in task.inputs]
            ops += [FileOp(action=FileAction.ADD, file=f) for f in outputs]
            commit = PartitionCommit(partition_desc=task.partition_desc, ops=tuple(ops))
            clock.run(
                "commit",
                table.commit,
                CommitOp.COMPACTION,
                [commit],
                base_version=task.base_version,
                key=task.key(),
            )
            paths = [str(Path(table.meta.location) / f.path) for f in task.inputs]
            clock.run(REFERENCE_READ, _dataset_read, paths, table.schema)
        for phase, seconds in clock.seconds.items():
            self.times[phase].append(seconds)

    def read(self) -> pa.Table:
        return self.catalog.load_table(self.table_name).scan().to_arrow()

    def live_files(self) -> int:
        return len(self.catalog.load_table(self.table_name).plan().files)


def _force_plan(catalog: Catalog, name: str) -> list[CompactionTask]:
    table = catalog.load_table(name)
    policy = CompactionPolicy.from_properties(table.meta.properties, table=table.name)
    return plan_table(table.meta, table.plan(), policy, force=True)


def _read_inputs(location: str, files: Sequence[DataFile], meta: TableMeta) -> pa.Table:
    return read_whole_files(location, files, meta.schema, meta.current_schema_id)


def _write_bin(table: Table, task: CompactionTask, rows: pa.Table) -> list[DataFile]:
    meta = table.meta
    values, bucket = meta.spec.parse(task.partition_desc)
    return list(
        write_data_files(
            rows,
            meta.location,
            partition=list(values.items()),
            bucket=-1 if bucket is None else bucket,
            schema_id=meta.current_schema_id,
            options=WriteOptions(target_file_bytes=task.target_file_size),
        )
    )


def _dataset_read(paths: Sequence[str], schema: pa.Schema) -> pa.Table:
    return ds.dataset(list(paths), format="parquet", schema=schema).to_table()


def _check_landed(name: str, statuses: Sequence[OutcomeStatus]) -> None:
    if not statuses or any(s is not OutcomeStatus.COMMITTED for s in statuses):
        raise RuntimeError(f"the compaction of {name} did not land: {list(statuses)}")


# ------------------------------------------------------------------------------- the run


@dataclass
class AppendResult:
    appends: int
    rows: int
    repeats: int
    target_bytes: int | None = None
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    files_after: dict[str, int] = field(default_factory=dict)
    phases: dict[str, list[float]] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    input_mib: float = 0.0
    output_mib: float = 0.0


def run_append(
    catalog: Catalog,
    work: Path,
    appends: int,
    rows: int,
    repeats: int,
    *,
    target_bytes: int | None = None,
) -> AppendResult:
    """``repeats`` rounds: build fresh tables for every system, then compact each, rotating.
    ``target_bytes``: both systems' target file size (None: each one's default)."""
    batches = append_batches(appends, rows)
    result = AppendResult(appends, rows, repeats, target_bytes)
    phased = Phased(catalog, "append.events_phased_0", target_bytes)
    for r in range(repeats):
        phased.table_name = f"append.events_phased_{r}"
        systems: list[System] = [
            Lakestream(catalog, f"append.events_{r}", fsync=True, target_bytes=target_bytes),
            Delta(work / "delta" / f"events_{r}", target_bytes),
            Lakestream(
                catalog, f"append.events_nofsync_{r}", fsync=False, target_bytes=target_bytes
            ),
            phased,
        ]
        progress(f"[append] repeat {r + 1}/{repeats}: {appends} appends x {rows:,} rows each ...")
        for system in systems:
            system.build(batches)
        if r == 0:
            result.input_mib = _table_mib(catalog, f"append.events_{r}")
        shift = r % len(systems)
        for system in systems[shift:] + systems[:shift]:
            cpu, wall = time.process_time(), time.perf_counter()
            system.compact()
            result.wall.setdefault(system.name, []).append(time.perf_counter() - wall)
            result.cpu.setdefault(system.name, []).append(time.process_time() - cpu)
        result.checks.append(_verify(r, systems, batches))
        for system in systems:
            result.files_after[system.name] = system.live_files()
        if r == 0:
            result.output_mib = _table_mib(catalog, f"append.events_{r}")
        shutil.rmtree(work / "delta" / f"events_{r}", ignore_errors=True)
    result.phases = phased.times
    return result


def _table_mib(catalog: Catalog, name: str) -> float:
    files = catalog.load_table(name).plan().files
    return sum(f.size_bytes for f in files) / 2**20


def _verify(repeat: int, systems: Sequence[System], batches: Sequence[pa.Table]) -> str:
    """Every system holds exactly the appended rows after its compaction."""
    expected = pa.concat_tables(batches)
    reads = {s.name: s.read() for s in systems}
    wrong = [name for name, rows in reads.items() if not same_rows(rows, expected)]
    counts = ", ".join(f"{name} {rows.num_rows:,}" for name, rows in reads.items())
    if wrong:
        raise AssertionError(f"repeat {repeat + 1}: {wrong} differ from the appended rows")
    return f"repeat {repeat + 1}: rows after compaction {counts}; all identical to the input: ok"


# ------------------------------------------------------------------------------- report


def render_append(result: AppendResult) -> list[str]:
    lines = [
        f"{result.appends} appends of {result.rows:,} rows, then one full compaction; "
        f"{result.repeats} repeats, fresh tables each, order rotating; target file size: "
        f"{_target(result.target_bytes)}.",
        "",
        f"- input: {result.appends} files, {result.input_mib:.1f} MiB (lakestream); "
        f"output: {result.output_mib:.1f} MiB",
        *(f"- {c}" for c in result.checks),
        "- live files after: " + ", ".join(f"{name} {n}" for name, n in result.files_after.items()),
        "",
        "| system | compaction p50 ms | min ms | max ms | CPU p50 ms | vs deltalake (p50) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = median_ms(result.wall[DELTA])
    for name, seconds in result.wall.items():
        p50 = median_ms(seconds)
        lines.append(
            f"| {name} | {p50:.0f} | {min(seconds) * 1000:.0f} | {max(seconds) * 1000:.0f} "
            f"| {median_ms(result.cpu[name]):.0f} | {p50 / base:.2f}x |"
        )
    lines += ["", *append_goal_lines(result), "", *phase_lines(result)]
    return lines


def _target(target_bytes: int | None) -> str:
    return f"{target_bytes / 2**20:g} MiB for both" if target_bytes else "each system's default"


def append_ratio(result: AppendResult, name: str = LAKESTREAM) -> float:
    return median_ms(result.wall[name]) / median_ms(result.wall[DELTA])


def append_goal_lines(result: AppendResult) -> list[str]:
    lines = []
    for name in (LAKESTREAM, NO_FSYNC):
        ratio = append_ratio(result, name)
        verdict = "met" if ratio <= GOAL_RATIO else "MISSED"
        lines.append(
            f"- **{name} / deltalake = {ratio:.2f}x** (p50 {median_ms(result.wall[name]):.0f} "
            f"vs {median_ms(result.wall[DELTA]):.0f} ms); goal <= {GOAL_RATIO}x: **{verdict}**"
        )
    return lines


def phase_lines(result: AppendResult) -> list[str]:
    medians = {p: median_ms(s) for p, s in result.phases.items()}
    total = sum(medians[p] for p in PHASES)
    lines = [
        f"Where `{PHASED}` spends its time (the routine's steps one by one, same rotation):",
        "",
        "| phase | what | p50 ms | share |",
        "| --- | --- | ---: | ---: |",
    ]
    for phase, what in PHASES.items():
        lines.append(f"| {phase} | {what} | {medians[phase]:.0f} | {medians[phase] / total:.0%} |")
    lines.append(f"| total | | {total:.0f} | |")
    lines.append(f"| {REFERENCE_READ} | not in the total | {medians[REFERENCE_READ]:.0f} | |")
    return lines
