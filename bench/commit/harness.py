"""Runs one system in one mode: W spawned writer processes, a start barrier, timed commits.

Every system goes through the same loop, so the comparison differs only in the system's own
commit call: each writer process opens its own catalog/table handle and prepares its file
descriptions *before* the barrier (untimed), then times each logical commit from the first
attempt to success. An exception escaping the system's commit call is counted as *raised*, the
system's handle is refreshed and the same commit is tried again (counted as *retried*), so a
system that makes its callers retry pays for it in latency instead of losing the commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from workload import writer_items

from bench.common import spawn_writers  # run.py puts the repository root on sys.path first

#: A commit that raised this many times in a row is given up (counted as failed).
MAX_ATTEMPTS = 200
_BARRIER_TIMEOUT_S = 900.0


class Writer(Protocol):
    """One writer's handle on one table of one system, living in a writer process."""

    def commit(self, commit_id: int) -> None:
        """Commit the file of ``commit_id``; raise if the system gives up on it."""

    def internal_retries(self) -> int | None:
        """Retries the system made inside its commit calls so far; None if it does not say."""

    def recover(self) -> None:
        """Refresh whatever the system needs after its commit call raised."""

    def close(self) -> None: ...


class System(Protocol):
    """A catalog under test. ``setup`` and ``verify`` run in the main process, untimed."""

    name: str
    #: Whether --peer-budget-seconds caps this system (the peers; lakestream runs in full).
    budgeted: bool

    def version(self) -> str: ...

    def setup(self, env: Env, tag: str, commits: int) -> Any:
        """Create an empty table and its data files; return a picklable context."""

    def open_writer(self, context: Any, writer_index: int, items: Sequence[int]) -> Writer: ...

    def verify(self, context: Any) -> Verification: ...


@dataclass(frozen=True)
class Env:
    """The shared PostgreSQL server and scratch folder of a benchmark run."""

    work: Path
    pg_port: int

    def dsn(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/{dbname}"

    def create_database(self, dbname: str) -> str:
        """A fresh database per system and mode, so every run starts from an empty history."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return self.dsn(dbname)


@dataclass(frozen=True)
class Verification:
    """What the table holds after the run, read back through the system's own API."""

    visible: list[int]
    """Commit ids whose file a reader of the latest version sees (with repeats, if any)."""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitRecord:
    commit_id: int
    start_ns: int
    end_ns: int
    raised: int


@dataclass
class WriterReport:
    writer_index: int
    records: list[CommitRecord] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    """Commit ids given up after MAX_ATTEMPTS raised attempts."""
    errors: Counter[str] = field(default_factory=Counter)
    """Exceptions that escaped the system's commit call, by class name."""
    retried: int = 0
    """Times the loop tried a commit again after it raised."""
    internal_retries: int | None = None
    budget_hit: bool = False
    setup_error: str | None = None
    crash: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """One system in one mode; picklable so it can travel to spawned writer processes."""

    system: str
    writers: int
    commits: int
    budget_s: float | None
    context: Any


def quiet_logging() -> None:
    """Drop info logs: lakestream logs one line per commit, and printing it skews timings."""
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("lakestream").setLevel(logging.WARNING)


def run_mode(spec: RunSpec) -> list[WriterReport]:
    """Start the writers, release them together, collect their reports."""
    reports: list[WriterReport] = spawn_writers(writer_main, spec, spec.writers)
    broken = [r.setup_error or r.crash for r in reports if r.setup_error or r.crash]
    if broken:
        raise RuntimeError(f"{spec.system}: a writer failed: {broken[0]}")
    return sorted(reports, key=lambda r: r.writer_index)


def writer_main(spec: RunSpec, writer_index: int, barrier: Any, queue: Any) -> None:
    """Entry point of one writer process."""
    quiet_logging()
    from systems import get_system  # imported here: each process loads only what it runs

    report = WriterReport(writer_index)
    items = writer_items(spec.commits, spec.writers, writer_index)
    try:
        writer = get_system(spec.system).open_writer(spec.context, writer_index, items)
    except Exception as exc:  # reported to the parent, which aborts the run
        report.setup_error = f"{type(exc).__name__}: {exc}"
        barrier.abort()
        queue.put(report)
        return
    try:
        barrier.wait(timeout=_BARRIER_TIMEOUT_S)
    except threading.BrokenBarrierError:
        report.setup_error = "another writer failed to start"
        writer.close()
        queue.put(report)
        return
    deadline = time.monotonic_ns() + int(spec.budget_s * 1e9) if spec.budget_s else None
    try:
        _commit_all(writer, items, deadline, report)
    except BaseException as exc:  # a harness bug: the parent reports it and stops
        report.crash = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        report.internal_retries = writer.internal_retries()
        writer.close()
        queue.put(report)


def _commit_all(
    writer: Writer, items: Sequence[int], deadline: int | None, report: WriterReport
) -> None:
    for commit_id in items:
        if deadline is not None and time.monotonic_ns() >= deadline:
            report.budget_hit = True
            return
        record = _commit_one(writer, commit_id, deadline, report)
        if record is not None:
            report.records.append(record)


def _commit_one(
    writer: Writer, commit_id: int, deadline: int | None, report: WriterReport
) -> CommitRecord | None:
    """One logical commit, retried until it lands; None if it was given up or out of time."""
    start = time.monotonic_ns()
    for attempt in range(MAX_ATTEMPTS):
        try:
            if attempt:
                report.retried += 1
                writer.recover()
            writer.commit(commit_id)
        except Exception as exc:  # every system has its own conflict error: count them all
            report.errors[type(exc).__name__] += 1
            if deadline is not None and time.monotonic_ns() >= deadline:
                report.budget_hit = True
                return None
        else:
            return CommitRecord(commit_id, start, time.monotonic_ns(), attempt)
    report.failed.append(commit_id)
    return None
