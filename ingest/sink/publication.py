"""What a batch's commit publishes of what its tasks wrote: the seam between the plain sink and
``transactions: consistent``.

The sink (:class:`ingest.sink.batch.BatchSink`) writes and commits batches exactly once, whatever
is published; a :class:`Publication` decides what each commit may make visible. Eventual mode
publishes every event as its batch commits (:class:`EveryEvent`); consistent mode publishes a
prefix of the source's commit order and holds the rest (:mod:`ingest.sink.whole`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from catalog import CommitRequest, CommitResult, TableCommit
from ingest.kafka.offsets import OffsetsJson
from ingest.sink.plan import Holding, SinkPlan
from ingest.sink.report import TaskReport

__all__ = ["EveryEvent", "Publication"]


class Publication(Protocol):
    """The steps of a batch where publishing has a say, in the order the sink takes them."""

    def begin_run(self, start: OffsetsJson | None) -> None:
        """The query is about to start from ``start`` (None: Spark's checkpoint decides)."""

    def begin(self, df: Any, batch_id: int) -> None:
        """A batch begins (``df``: its offset ranges), before any write pass."""

    def holding(self, bases: dict[str, int]) -> Holding | None:
        """How the tasks of a write pass split their records; adds the versions of the tables
        it commits to itself to ``bases``."""

    def publish(self, reports: list[TaskReport], plan: SinkPlan) -> list[TaskReport]:
        """The reports of the pass with what the commit publishes beyond the tasks' files."""

    def commit_parts(self, has_files: bool) -> tuple[TableCommit, ...]:
        """Its own tables' part of the commit (``has_files``: the batch wrote target files)."""

    def progress(self, targets: Iterable[str]) -> dict[str, Any]:
        """Fields of the commit request beyond files and offsets (``targets``: the tables the
        batch wrote to)."""

    def committed(self, request: CommitRequest, result: CommitResult) -> None:
        """``request`` landed as ``result``."""

    def logged(self, bound: Any, reports: Sequence[TaskReport]) -> None:
        """The batch has ended: log what was decided."""

    def close(self) -> None:
        """The query has ended."""


class EveryEvent:
    """Eventual mode: every event is published by the commit of the batch that read it."""

    def begin_run(self, start: OffsetsJson | None) -> None:
        return None

    def begin(self, df: Any, batch_id: int) -> None:
        return None

    def holding(self, bases: dict[str, int]) -> Holding | None:
        return None

    def publish(self, reports: list[TaskReport], plan: SinkPlan) -> list[TaskReport]:
        return reports

    def commit_parts(self, has_files: bool) -> tuple[TableCommit, ...]:
        return ()

    def progress(self, targets: Iterable[str]) -> dict[str, Any]:
        return {}

    def committed(self, request: CommitRequest, result: CommitResult) -> None:
        return None

    def logged(self, bound: Any, reports: Sequence[TaskReport]) -> None:
        return None

    def close(self) -> None:
        return None
