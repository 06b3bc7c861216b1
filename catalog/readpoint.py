"""The newest cut at which several tables hold whole source transactions (issue 13).

An ingest job in ``transactions: consistent`` mode commits each batch atomically over its tables
and publishes a prefix of the source's transactions in commit order, recording the point it
reached as the version's source watermark. So, for the tables one job feeds, their latest
versions read at one instant are a consistent cut: a table the batch did not touch had nothing
to publish up to that point. This module picks the cut from the tables' histories; it is pure,
so the rules below are tested without a database.

* A version published with exceptions (``on_timeout: publish``: a transaction went out
  incomplete) is no consistent point. The cut steps back below its position - for every table of
  the job, because the other tables' later versions already hold the rest of the transactions
  that commit published, and a cut that mixed them with the table's older version would split
  those transactions.
* A compaction changes files, never content: it keeps the watermark of the version it rewrote.
  Any other commit without a watermark (a batch write, a job in ``eventual`` mode) is no point
  either; the cut steps back past it.
* Several jobs: each job's cut gives its latest point; the cut of them all is, per table, the
  newest version at or below the smallest of those points. That holds whole transactions only at
  the jobs' batch boundaries: a job whose last batch ended before the smallest point is
  consistent up to its own batch point, not up to the smallest one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from catalog.errors import CatalogError
from catalog.model import CommitOp, SourcePoint

#: ``(position, 1)`` admits positions up to and including it; ``(position, 0)`` only below it.
_Bound = tuple[str, int]
_NO_BOUND: _Bound = ("g", 0)  # above every hex position


class NoConsistentCutError(CatalogError):
    """Some tables have no version that is a transaction-consistent point of their source."""

    def __init__(self, tables: Sequence[str], reason: str) -> None:
        super().__init__(f"no transaction-consistent version of {', '.join(tables)}: {reason}")
        self.tables = tuple(tables)
        self.reason = reason


@dataclass(frozen=True)
class ReadPoint:
    """Versions of several tables that belong together, and the source point they stand for."""

    versions: dict[str, int]
    watermark: SourcePoint | None
    """Up to where the cut holds the source's transactions whole (``None``: not asked for)."""


@dataclass(frozen=True)
class VersionMark:
    """One version of a table's history, as the cut sees it (newest first in a history)."""

    version: int
    op: CommitOp
    writer: str
    point: SourcePoint | None
    exceptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Candidate:
    version: int
    point: SourcePoint
    exceptions: tuple[str, ...]

    def below(self, bound: _Bound) -> bool:
        return (self.point.position, 0) < bound


def job_of(writer_id: str) -> str:
    """The job a writer id belongs to: ingest jobs write as ``<job>:<checkpoint incarnation>``,
    and a job that lost its checkpoint is still the same job, with the same source."""
    return writer_id.rsplit(":", 1)[0]


def consistent_cut(histories: Mapping[str, Sequence[VersionMark]]) -> ReadPoint:
    """The newest consistent cut of these tables (histories newest first, up to their heads).

    Raises:
        NoConsistentCutError: a table has no watermark at all, or none at or below the cut.
    """
    candidates = {name: _candidates(marks) for name, marks in histories.items()}
    unmarked = sorted(name for name, found in candidates.items() if not found)
    if unmarked:
        raise NoConsistentCutError(
            unmarked,
            "no version has a source watermark (written in eventual mode or by batch writes); "
            "read them with read_point(..., consistent=False)",
        )
    jobs = _jobs(histories)
    cuts = {job: _job_cut({t: candidates[t] for t in tables}, _NO_BOUND) for job, tables in jobs}
    if len(cuts) > 1:
        lowest = min(_top(cut).position for cut in cuts.values())
        cuts = {
            job: _job_cut({t: candidates[t] for t in tables}, (lowest, 1)) for job, tables in jobs
        }
    chosen = {name: c for cut in cuts.values() for name, c in cut.items()}
    watermark = min((_top(cut) for cut in cuts.values()), key=lambda p: p.position)
    return ReadPoint({name: chosen[name].version for name in histories}, watermark)


def _candidates(marks: Sequence[VersionMark]) -> list[_Candidate]:
    """The versions that may stand for a source point, newest first."""
    found: list[_Candidate] = []
    last: _Candidate | None = None
    for mark in reversed(marks):
        if mark.point is not None:
            last = _Candidate(mark.version, mark.point, mark.exceptions)
        elif mark.op is CommitOp.COMPACTION and last is not None:
            last = _Candidate(mark.version, last.point, last.exceptions)
        else:
            last = None
        if last is not None:
            found.append(last)
    return found[::-1]


def _jobs(histories: Mapping[str, Sequence[VersionMark]]) -> list[tuple[str, list[str]]]:
    """Tables by the job of their newest watermarked version."""
    by_job: dict[str, list[str]] = {}
    for name, marks in histories.items():
        writer = next(m.writer for m in marks if m.point is not None)
        by_job.setdefault(job_of(writer), []).append(name)
    return sorted(by_job.items())


def _job_cut(
    candidates: Mapping[str, Sequence[_Candidate]], bound: _Bound
) -> dict[str, _Candidate]:
    """Per table, the newest candidate below ``bound``; lowered below every version with
    exceptions it meets, until no table's choice has any."""
    while True:
        chosen: dict[str, _Candidate] = {}
        for name, found in candidates.items():
            pick = next((c for c in found if c.below(bound)), None)
            if pick is None:
                raise NoConsistentCutError([name], _too_old(bound))
            if pick.exceptions:
                bound = (pick.point.position, 0)
                break
            chosen[name] = pick
        else:
            return chosen


def _top(cut: Mapping[str, _Candidate]) -> SourcePoint:
    return max((c.point for c in cut.values()), key=lambda p: p.position)


def _too_old(bound: _Bound) -> str:
    position, inclusive = bound
    return f"its oldest watermark is newer than the cut ({'<=' if inclusive else '<'} {position})"


def marks_from_rows(rows: Iterable[Mapping[str, object]]) -> list[VersionMark]:
    """History rows (``version``, ``commit_op``, ``writer_id``, ``mark``) as version marks."""
    marks = []
    for row in rows:
        mark = row["mark"]
        point = exceptions = None
        if isinstance(mark, dict):
            point = SourcePoint.model_validate({k: v for k, v in mark.items() if k != "exceptions"})
            exceptions = tuple(str(x) for x in mark.get("exceptions") or ())
        marks.append(
            VersionMark(
                version=int(str(row["version"])),
                op=CommitOp(str(row["commit_op"])),
                writer=str(row["writer_id"]),
                point=point,
                exceptions=exceptions or (),
            )
        )
    return marks
