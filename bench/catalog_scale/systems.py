"""The seam between the benchmark and a catalog under test.

A :class:`Side` runs in the main process (setup, plans); a :class:`Writer` lives in a writer
process, opened from the picklable context :meth:`Side.writer_context` returns, so the module of
a system is imported only by the processes that run it.
"""

from __future__ import annotations

import importlib
from enum import StrEnum
from typing import Protocol


class Mode(StrEnum):
    """Where concurrent writers commit: each to a partition of its own, or all to one."""

    DISTINCT = "distinct"
    ONE = "one"

    def day_of(self, writer_index: int) -> int:
        return writer_index if self is Mode.DISTINCT else 0


class Writer(Protocol):
    def commit(self, commit_id: int) -> None:
        """Register the file of ``commit_id`` in one commit; raise if the system gives up."""

    def recover(self) -> None:
        """Get the handle usable again after ``commit`` raised."""

    def close(self) -> None: ...


class Side(Protocol):
    name: str

    def create_tables(self, count: int) -> None: ...

    def build_big(self, partitions: int, files_per_partition: int, batch: int) -> None:
        """The big table: ``partitions`` x ``files_per_partition`` files, ``batch`` partitions
        per commit."""

    def plan_full(self) -> int:
        """Every file of the big table at its latest version; returns how many."""

    def plan_one(self, partition: int) -> int:
        """The files of one partition of the big table; returns how many."""

    def writer_context(self, mode: Mode, writers: int, commits: int) -> object:
        """A fresh table for one writer run (and its files); a picklable context."""

    def committed(self, context: object) -> int:
        """Files the writers' table holds, read back after the run."""

    def close(self) -> None: ...


_MODULES = {
    "lakestream": "bench.catalog_scale.lakestream",
    "ducklake": "bench.catalog_scale.ducklake",
}
SYSTEM_NAMES = tuple(_MODULES)


def open_writer(system: str, context: object, writer_index: int) -> Writer:
    module = importlib.import_module(_MODULES[system])
    writer: Writer = module.open_writer(context, writer_index)
    return writer
